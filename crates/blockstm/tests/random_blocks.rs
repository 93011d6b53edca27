//! Thousands of random blocks over a few accounts and contracts, so that conflicts are dense:
//! value transfers, storage reads and writes across contracts, calls, reverts, contract
//! creation (CREATE and CREATE2), self-destruct and re-creation at the same address, reads of
//! code hashes and sizes (of accounts created, destroyed or delegated in the same block), calls
//! with and without value to precompiles and reads of their balances, reads of the
//! beneficiary's balance, and EIP-7702 delegations set, changed and cleared in the block, on
//! forks before and after EIP-6780 and from Prague. Block-STM must give the sequential receipts
//! and state for every thread count, and every block must finish (no deadlock, no livelock).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use alloy_primitives::{Address, Bytes, B256, U256};
use gigas_blockstm::{execute_block_parallel, Bailout, ParallelExecutor};
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::context::{BlockEnv, TxEnv};
use gigas_evm::revm::context_interface::transaction::{
    Authorization, RecoveredAuthority, RecoveredAuthorization,
};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::primitives::TxKind;
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_evm::{execute_block, PlainEvm, PreparedBlock, PreparedTx};
use gigas_primitives::ChainSpec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const EOAS: u8 = 5;
const CONTRACTS: u8 = 3;

fn eoa(i: u8) -> Address {
    Address::with_last_byte(0x10 + i % EOAS)
}

fn contract(i: u8) -> Address {
    Address::with_last_byte(0xC0 + i % CONTRACTS)
}

/// EOAs that never send: they only sign EIP-7702 delegations, so their nonces follow from
/// the delegations alone.
const DELEGATORS: u8 = 2;

fn delegator(i: u8) -> Address {
    Address::with_last_byte(0x30 + i % DELEGATORS)
}

/// A precompile: ecrecover, sha256, ripemd160 or identity.
fn precompile(i: u8) -> Address {
    Address::with_last_byte(1 + i % 4)
}

/// An account to read or call: an EOA, a delegator, a contract, a CREATE2 child or a
/// precompile.
fn any_account(i: u8) -> Address {
    match i % 5 {
        0 => eoa(i / 5),
        1 => delegator(i / 5),
        2 => contract(i / 5),
        3 => child_address(contract(i / 5), (i / 5) % 2),
        _ => precompile(i / 5),
    }
}

/// One straight-line piece of EVM code.
#[derive(Debug, Clone)]
enum Snippet {
    Store(u8, u8),
    Increment(u8),
    CopyBalance(u8, u8),
    Call(u8, u8),
    Log(u8),
    Create2(u8),
    CallChild(u8, u8),
    /// EXTCODEHASH and EXTCODESIZE of an account into slots 9 and 10.
    CodeOf(u8),
    /// A call to a precompile with 0 or 1 wei, then its balance into slot 11.
    Precompile(u8, u8),
}

/// How a program ends.
#[derive(Debug, Clone)]
enum Ending {
    Stop,
    Revert,
    SelfDestruct(u8),
}

fn push20(code: &mut Vec<u8>, a: Address) {
    code.push(PUSH20);
    code.extend_from_slice(a.as_slice());
}

/// Init code of the CREATE2 child: writes slot 0, deploys `PUSH20 beneficiary SELFDESTRUCT`.
fn child_init(beneficiary: Address) -> Vec<u8> {
    let mut runtime = Vec::new();
    push20(&mut runtime, beneficiary);
    runtime.push(SELFDESTRUCT);
    let mut init = vec![PUSH1, 1, PUSH1, 0, SSTORE, PUSH22];
    init.extend_from_slice(&runtime);
    init.extend_from_slice(&[PUSH1, 0, MSTORE, PUSH1, 22, PUSH1, 10, RETURN]);
    init
}

fn child_address(deployer: Address, salt: u8) -> Address {
    deployer.create2_from_code(B256::with_last_byte(salt), child_init(eoa(0)))
}

fn assemble(snippets: &[Snippet], ending: &Ending, this: Option<Address>) -> Vec<u8> {
    let mut code = Vec::new();
    for s in snippets {
        match *s {
            Snippet::Store(slot, value) => {
                code.extend_from_slice(&[PUSH1, value, PUSH1, slot % 4, SSTORE])
            }
            Snippet::Increment(slot) => code.extend_from_slice(&[
                PUSH1,
                slot % 4,
                SLOAD,
                PUSH1,
                1,
                ADD,
                PUSH1,
                slot % 4,
                SSTORE,
            ]),
            Snippet::CopyBalance(who, slot) => {
                push20(
                    &mut code,
                    if who % 2 == 0 {
                        eoa(who)
                    } else {
                        contract(who)
                    },
                );
                code.extend_from_slice(&[BALANCE, PUSH1, 4 + slot % 4, SSTORE]);
            }
            Snippet::Call(target, value) => {
                code.extend_from_slice(&[PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, value]);
                push20(
                    &mut code,
                    match target % 4 {
                        0 => eoa(target),
                        1 => delegator(target),
                        _ => contract(target),
                    },
                );
                code.extend_from_slice(&[PUSH3, 0x01, 0x00, 0x00, CALL, POP]);
            }
            Snippet::Log(slot) => code.extend_from_slice(&[
                PUSH1,
                slot % 4,
                SLOAD,
                PUSH1,
                0,
                MSTORE,
                PUSH1,
                32,
                PUSH1,
                0,
                LOG0,
            ]),
            Snippet::Create2(salt) => {
                let init = child_init(eoa(0));
                for (i, chunk) in init.chunks(32).enumerate() {
                    let mut word = [0u8; 32];
                    word[..chunk.len()].copy_from_slice(chunk);
                    code.push(PUSH32);
                    code.extend_from_slice(&word);
                    code.extend_from_slice(&[PUSH1, (i * 32) as u8, MSTORE]);
                }
                code.extend_from_slice(&[
                    PUSH1,
                    salt % 2,
                    PUSH1,
                    init.len() as u8,
                    PUSH1,
                    0,
                    PUSH1,
                    0,
                    CREATE2,
                ]);
                code.extend_from_slice(&[PUSH1, 8, SSTORE]);
            }
            Snippet::CodeOf(who) => {
                push20(&mut code, any_account(who));
                code.extend_from_slice(&[EXTCODEHASH, PUSH1, 9, SSTORE]);
                push20(&mut code, any_account(who));
                code.extend_from_slice(&[EXTCODESIZE, PUSH1, 10, SSTORE]);
            }
            Snippet::Precompile(which, value) => {
                // 32 bytes of input from memory (whatever is there), 32 bytes of output.
                code.extend_from_slice(&[PUSH1, 32, PUSH1, 0, PUSH1, 32, PUSH1, 0]);
                code.extend_from_slice(&[PUSH1, value % 2]);
                push20(&mut code, precompile(which));
                code.extend_from_slice(&[PUSH3, 0x01, 0x00, 0x00, CALL, POP]);
                push20(&mut code, precompile(which));
                code.extend_from_slice(&[BALANCE, PUSH1, 11, SSTORE]);
            }
            Snippet::CallChild(deployer, salt) => {
                let child = child_address(contract(deployer), salt % 2);
                code.extend_from_slice(&[PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0]);
                push20(&mut code, child);
                code.extend_from_slice(&[PUSH3, 0x01, 0x00, 0x00, CALL, POP]);
            }
        }
    }
    match *ending {
        Ending::Stop => code.push(STOP),
        Ending::Revert => code.extend_from_slice(&[PUSH1, 0, PUSH1, 0, REVERT]),
        Ending::SelfDestruct(to) => {
            // A contract never self-destructs into itself.
            let mut beneficiary = eoa(to);
            if Some(beneficiary) == this {
                beneficiary = eoa(to + 1);
            }
            push20(&mut code, beneficiary);
            code.push(SELFDESTRUCT);
        }
    }
    code
}

#[derive(Debug, Clone)]
enum TxSpec {
    Transfer {
        from: u8,
        to: u8,
        value: u8,
    },
    CallContract {
        from: u8,
        to: u8,
        value: u8,
    },
    Create {
        from: u8,
        snippets: Vec<Snippet>,
        ending: Ending,
    },
    /// An EIP-7702 transaction: `authority` delegates to a contract (or clears its delegation),
    /// then the transaction calls `to`. Before Prague it is a plain call instead.
    Delegate {
        from: u8,
        authority: u8,
        target: u8,
        to: u8,
    },
}

fn snippet() -> impl Strategy<Value = Snippet> {
    prop_oneof![
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Snippet::Store(a, b)),
        any::<u8>().prop_map(Snippet::Increment),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Snippet::CopyBalance(a, b)),
        (any::<u8>(), 0u8..3).prop_map(|(a, b)| Snippet::Call(a, b)),
        any::<u8>().prop_map(Snippet::Log),
        any::<u8>().prop_map(Snippet::Create2),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Snippet::CallChild(a, b)),
        any::<u8>().prop_map(Snippet::CodeOf),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Snippet::Precompile(a, b)),
    ]
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        6 => Just(Ending::Stop),
        2 => Just(Ending::Revert),
        1 => any::<u8>().prop_map(Ending::SelfDestruct),
    ]
}

fn tx_spec() -> impl Strategy<Value = TxSpec> {
    prop_oneof![
        3 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(from, to, value)| TxSpec::Transfer { from, to, value }),
        4 => (any::<u8>(), any::<u8>(), 0u8..4).prop_map(|(from, to, value)| TxSpec::CallContract { from, to, value }),
        2 => (any::<u8>(), proptest::collection::vec(snippet(), 0..4), ending())
            .prop_map(|(from, snippets, ending)| TxSpec::Create { from, snippets, ending }),
        2 => (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
            .prop_map(|(from, authority, target, to)| TxSpec::Delegate { from, authority, target, to }),
    ]
}

#[derive(Debug, Clone)]
struct BlockSpec {
    /// Mainnet timestamp picking the fork: London (SELFDESTRUCT deletes), Shanghai, Cancun
    /// (EIP-6780), Prague (EIP-7702).
    fork_timestamp: u64,
    contracts: Vec<(Vec<Snippet>, Ending)>,
    txs: Vec<TxSpec>,
}

fn block_spec() -> impl Strategy<Value = BlockSpec> {
    (
        prop_oneof![
            Just(1_660_000_000u64),
            Just(1_690_000_000u64),
            Just(1_720_000_000u64),
            Just(1_750_000_000u64)
        ],
        proptest::collection::vec(
            (proptest::collection::vec(snippet(), 1..5), ending()),
            CONTRACTS as usize,
        ),
        proptest::collection::vec(tx_spec(), 1..24),
    )
        .prop_map(|(fork_timestamp, contracts, txs)| BlockSpec {
            fork_timestamp,
            contracts,
            txs,
        })
}

fn build(spec: &BlockSpec) -> (PreparedBlock, CacheDB<EmptyDB>) {
    let mut db = CacheDB::new(EmptyDB::default());
    for i in 0..EOAS {
        db.insert_account_info(
            eoa(i),
            AccountInfo {
                balance: U256::from(10u64).pow(U256::from(20)),
                ..Default::default()
            },
        );
    }
    for (i, (snippets, ending)) in spec.contracts.iter().enumerate() {
        let address = contract(i as u8);
        let code = Bytecode::new_raw(Bytes::from(assemble(snippets, ending, Some(address))));
        db.insert_account_info(
            address,
            AccountInfo {
                balance: U256::from(1_000u64),
                code_hash: code.hash_slow(),
                code: Some(code),
                nonce: 1,
                ..Default::default()
            },
        );
        let _ = db.insert_account_storage(address, U256::from(1), U256::from(7));
    }
    for i in 0..DELEGATORS {
        db.insert_account_info(
            delegator(i),
            AccountInfo {
                balance: U256::from(5u64),
                ..Default::default()
            },
        );
    }
    let prague = spec.fork_timestamp >= 1_746_612_311;
    let mut nonces = BTreeMap::new();
    let txs = spec
        .txs
        .iter()
        .map(|t| {
            let mut authorization = None;
            let (from, kind, value, data) = match t {
                TxSpec::Transfer { from, to, value } => {
                    let to = if to % 4 == 3 {
                        delegator(*to)
                    } else {
                        eoa(*to)
                    };
                    (*from, TxKind::Call(to), *value, Bytes::new())
                }
                TxSpec::Delegate {
                    from,
                    authority,
                    target,
                    to,
                } => {
                    if prague {
                        let authority = delegator(*authority);
                        // One target in three clears the delegation (the zero address).
                        let address = if target % 3 == 2 {
                            Address::ZERO
                        } else {
                            contract(*target)
                        };
                        let nonce = nonces.entry(authority).or_insert(0u64);
                        authorization = Some(RecoveredAuthorization::new_unchecked(
                            Authorization {
                                chain_id: U256::from(1),
                                address,
                                nonce: *nonce,
                            },
                            RecoveredAuthority::Valid(authority),
                        ));
                        *nonce += 1;
                    }
                    (*from, TxKind::Call(any_account(*to)), 0, Bytes::new())
                }
                TxSpec::CallContract { from, to, value } => {
                    (*from, TxKind::Call(contract(*to)), *value, Bytes::new())
                }
                TxSpec::Create {
                    from,
                    snippets,
                    ending,
                } => (
                    *from,
                    TxKind::Create,
                    0,
                    Bytes::from(assemble(snippets, ending, None)),
                ),
            };
            let caller = eoa(from);
            let nonce = nonces.entry(caller).or_insert(0u64);
            let mut env = TxEnv {
                caller,
                kind,
                value: U256::from(value),
                data,
                nonce: *nonce,
                gas_limit: 500_000,
                gas_price: 2,
                chain_id: Some(1),
                ..Default::default()
            };
            *nonce += 1;
            if let Some(authorization) = authorization {
                env.set_recovered_authorization(vec![authorization]);
                env.gas_priority_fee = Some(1);
                env.derive_tx_type()
                    .expect("a call with an authorization list");
            }
            PreparedTx::from_env(env).expect("known transaction type")
        })
        .collect();
    let block_env = BlockEnv {
        number: U256::from(18_000_000u64),
        timestamp: U256::from(spec.fork_timestamp),
        gas_limit: 30_000_000,
        beneficiary: eoa(4),
        basefee: 1,
        prevrandao: Some(B256::with_last_byte(1)),
        ..Default::default()
    };
    (
        PreparedBlock::synthetic(&ChainSpec::mainnet(), block_env, txs),
        db,
    )
}

type Snapshot = BTreeMap<Address, (U256, u64, B256, BTreeMap<U256, U256>)>;

fn snapshot(db: &CacheDB<EmptyDB>) -> Snapshot {
    db.cache
        .accounts
        .iter()
        .filter(|(_, a)| !a.info.is_empty() || a.storage.values().any(|v| !v.is_zero()))
        .map(|(address, a)| {
            (
                *address,
                (
                    a.info.balance,
                    a.info.nonce,
                    a.info.code_hash,
                    a.storage
                        .iter()
                        .filter(|(_, v)| !v.is_zero())
                        .map(|(k, v)| (*k, *v))
                        .collect(),
                ),
            )
        })
        .collect()
}

fn check(spec: &BlockSpec) -> Result<(), TestCaseError> {
    let (block, base) = build(spec);
    let mut sequential = PlainEvm::new(base.clone(), &block);
    let expected = execute_block(&mut sequential, &block);
    let expected_state = snapshot(sequential.db());
    // Pure Block-STM at every thread count; then 2 threads with a bailout that sends the rest
    // of the block to the sequential continuation after 3 executions (both ways of
    // committing).
    let always_bail = Bailout {
        after_executions: 3,
        conflicts_per_execution: 0.0,
        min_execution_ns: u64::MAX,
    };
    let runs = [
        (1, None),
        (2, None),
        (4, None),
        (8, None),
        (2, Some(always_bail)),
        (2, Some(always_bail)),
    ];
    for (run, (threads, bailout)) in runs.into_iter().enumerate() {
        let mut executor = ParallelExecutor::new(threads).with_bailout(bailout);
        // Alternately keep every transaction's changes and commit them after the block, or
        // commit in order while the block executes.
        let mut state = base.clone();
        let parallel = if run % 2 == 0 {
            executor.execute(&block, &base).map(|p| {
                let outcome = p.outcome.clone();
                p.commit_into(&mut state).expect("commit");
                outcome
            })
        } else {
            executor
                .execute_into(&block, &base, &mut state)
                .map(|(o, _)| o)
        };
        match (&expected, parallel) {
            (Ok(expected), Ok(outcome)) => {
                prop_assert_eq!(&outcome, expected, "receipts with {} threads", threads);
                prop_assert_eq!(
                    snapshot(&state),
                    expected_state.clone(),
                    "state with {} threads",
                    threads
                );
            }
            (Err(_), Err(_)) => {}
            (e, p) => prop_assert!(
                false,
                "sequential {:?} but parallel {:?}",
                e.as_ref().err(),
                p.err()
            ),
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

proptest! {
    // 3000 random blocks by default; PROPTEST_CASES=N for a longer run.
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn parallel_equals_sequential_on_random_blocks(spec in block_spec()) {
        check(&spec)?;
    }
}

/// Many dense random blocks, all of which must finish; the bound is generous and only there
/// to turn a deadlock into a failure instead of a hung CI run.
#[test]
fn random_blocks_always_finish() {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut aborts, mut waits, mut succeeded, mut reverted) = (0, 0, 0, 0);
        for _ in 0..300 {
            let spec = block_spec()
                .new_tree(&mut runner)
                .expect("generates")
                .current();
            let (block, base) = build(&spec);
            for threads in [2, 8] {
                if let Ok(p) = execute_block_parallel(&block, &base, threads) {
                    aborts += p.stats.aborts;
                    waits += p.stats.waits;
                    succeeded += p.outcome.receipts.iter().filter(|r| r.success).count();
                    reverted += p.outcome.receipts.iter().filter(|r| !r.success).count();
                }
            }
        }
        let _ = done_tx.send((aborts, waits, succeeded, reverted));
    });
    let (aborts, waits, succeeded, reverted) = done_rx
        .recv_timeout(Duration::from_secs(600))
        .expect("300 random blocks did not finish within 10 minutes: deadlock or livelock");
    // The workload must really conflict and really run code both ways.
    // How often incarnations collide depends on thread scheduling; thousands is typical, and
    // a handful already shows that the blocks conflict.
    assert!(
        aborts + waits > 10,
        "only {aborts} aborts and {waits} waits"
    );
    assert!(
        succeeded > 1000 && reverted > 100,
        "{succeeded} succeeded, {reverted} reverted"
    );
    eprintln!("300 random blocks x 2 thread counts: {aborts} aborts, {waits} waits, {succeeded} successful and {reverted} failed transactions");
}

/// The generator must really produce the cases this file claims to test: blocks that execute
/// (not just blocks that both executors reject), delegations that take effect and run code in
/// a delegator's storage, code hashes read into storage, value sent to precompiles.
#[test]
fn random_blocks_cover_the_hard_cases() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut ok, mut delegated, mut ran_delegated, mut hashes, mut precompile_value) =
        (0, 0, 0, 0, 0);
    for _ in 0..300 {
        let spec = block_spec()
            .new_tree(&mut runner)
            .expect("generates")
            .current();
        let (block, base) = build(&spec);
        let mut sequential = PlainEvm::new(base.clone(), &block);
        if execute_block(&mut sequential, &block).is_err() {
            continue;
        }
        ok += 1;
        let state = snapshot(sequential.db());
        for i in 0..DELEGATORS {
            if let Some((_, _, code_hash, storage)) = state.get(&delegator(i)) {
                delegated += usize::from(*code_hash != gigas_evm::revm::primitives::KECCAK_EMPTY);
                ran_delegated += usize::from(!storage.is_empty());
            }
        }
        for (_, _, _, storage) in state.values() {
            hashes += usize::from(storage.contains_key(&U256::from(9)));
        }
        for i in 0..4 {
            precompile_value += usize::from(
                state
                    .get(&precompile(i))
                    .is_some_and(|(balance, ..)| !balance.is_zero()),
            );
        }
    }
    eprintln!(
        "{ok} of 300 blocks execute; {delegated} delegations in effect at the end, \
         {ran_delegated} delegators with storage written by delegated code, {hashes} accounts \
         holding a code hash read, {precompile_value} precompiles holding value"
    );
    assert!(ok > 150, "only {ok} of 300 random blocks execute");
    assert!(delegated > 10 && ran_delegated > 5 && hashes > 50 && precompile_value > 10);
}

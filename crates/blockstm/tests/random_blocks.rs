//! Thousands of random blocks over a few accounts and contracts, so that conflicts are dense:
//! value transfers, storage reads and writes across contracts, calls, reverts, contract
//! creation (CREATE and CREATE2), self-destruct and re-creation at the same address (CREATE2
//! children whose code reads and writes their storage, so that slots written before a
//! destruction are read after the re-creation), reads of code hashes and sizes (of accounts
//! created, destroyed or delegated in the same block), calls with and without value to
//! precompiles and reads of their balances, reads of the beneficiary's balance, a beneficiary
//! that is an EOA, a contract or a delegated EOA that sweeps its balance away (more than once
//! per block), transactions that pay it no fee, and EIP-7702 delegations set, changed and
//! cleared in the block, on forks before and after EIP-6780 and from Prague. Block-STM must
//! give the sequential receipts and ChangeSet for every thread count, and commit state that
//! holds that ChangeSet,, and every block must finish
//! (no deadlock, no livelock).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use alloy_primitives::{Address, Bytes, B256, U256};
use gigas_blockstm::{
    execute_block_parallel, execute_block_sequential, Bailout, ParallelExecutor, ParallelOutcome,
};
use gigas_evm::receipts::TxReceipt;
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::context::result::EVMError;
use gigas_evm::revm::context::{BlockEnv, TxEnv};
use gigas_evm::revm::context_interface::transaction::{
    Authorization, RecoveredAuthority, RecoveredAuthorization,
};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::primitives::TxKind;
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_evm::{
    execute_block, BlockChanges, BlockEvm, BlockOutcome, PlainEvm, PreparedBlock, PreparedTx,
};
use gigas_primitives::ChainSpec;
use gigas_test_support::{assert_holds, assert_same_changes};
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

/// Deploys CREATE2 children on request: calldata byte 0 is the salt.
fn factory() -> Address {
    Address::with_last_byte(0xF0)
}

/// A contract that sends its whole balance to [`sink`] once it holds [`SWEEP_AT`] wei: as
/// the beneficiary (itself, or as the code of a delegated beneficiary) it empties its account
/// again and again, leaving it byte for byte as it was.
fn sweeper() -> Address {
    Address::with_last_byte(0xCB)
}

/// Where swept balances go.
fn sink() -> Address {
    Address::with_last_byte(0x5E)
}

/// A few transactions' fees.
const SWEEP_AT: u32 = 60_000;

/// A deployer of CREATE2 children: the factory, or a contract (if its code has a `Create2`).
fn deployer(i: u8) -> Address {
    if i.is_multiple_of(2) {
        factory()
    } else {
        contract(i / 2)
    }
}

/// A precompile: ecrecover, sha256, ripemd160 or identity.
fn precompile(i: u8) -> Address {
    Address::with_last_byte(1 + i % 4)
}

/// An account to read or call: an EOA, a delegator, a contract, a CREATE2 child, a
/// precompile or the sweeper.
fn any_account(i: u8) -> Address {
    match i % 6 {
        0 => eoa(i / 6),
        1 => delegator(i / 6),
        2 => contract(i / 6),
        3 => child_address(deployer(i / 6), (i / 12) % 2),
        4 => precompile(i / 6),
        _ => sweeper(),
    }
}

/// The beneficiary of a block: an EOA that also sends transactions, the sweeper, or a
/// delegator (in Prague possibly delegated to the sweeper's code).
fn coinbase(i: u8) -> Address {
    match i % 3 {
        0 => eoa(4),
        1 => sweeper(),
        _ => delegator(0),
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
    /// A call to a CREATE2 child: deployer, salt and the child's calldata byte (see
    /// [`child_runtime`]).
    CallChild(u8, u8, u8),
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

/// Fills in `PUSH1` jump targets: `at` is the offset of the placeholder byte.
fn patch(code: &mut [u8], at: usize, target: usize) {
    code[at] = u8::try_from(target).expect("short code");
}

/// Code of a CREATE2 child: logs slots 0 and 1, then by calldata byte 0: 1 self-destructs
/// (to `eoa(0)`), 2 stops, anything else increments slot 0.
fn child_runtime() -> Vec<u8> {
    let mut code = vec![
        PUSH1, 0, SLOAD, PUSH1, 0, MSTORE, PUSH1, 1, SLOAD, PUSH1, 32, MSTORE,
    ];
    code.extend_from_slice(&[PUSH1, 64, PUSH1, 0, LOG0]);
    code.extend_from_slice(&[PUSH1, 0, CALLDATALOAD, PUSH1, 0xF8, SHR]);
    code.extend_from_slice(&[DUP1, PUSH1, 1, EQ, PUSH1, 0, JUMPI]);
    let to_destruct = code.len() - 2;
    code.extend_from_slice(&[PUSH1, 2, EQ, PUSH1, 0, JUMPI]);
    let to_end = code.len() - 2;
    code.extend_from_slice(&[PUSH1, 0, SLOAD, PUSH1, 1, ADD, PUSH1, 0, SSTORE]);
    let end = code.len();
    code.extend_from_slice(&[JUMPDEST, STOP]);
    let destruct = code.len();
    code.push(JUMPDEST);
    push20(&mut code, eoa(0));
    code.push(SELFDESTRUCT);
    patch(&mut code, to_destruct, destruct);
    patch(&mut code, to_end, end);
    code
}

/// Init code of a CREATE2 child: writes slot 1 (never slot 0, so that slot 0 after a
/// re-creation is zero only because of the wipe) and deploys [`child_runtime`].
fn child_init() -> Vec<u8> {
    let runtime = child_runtime();
    let len = runtime.len() as u8;
    let mut init = vec![
        PUSH1, 1, PUSH1, 1, SSTORE, PUSH1, len, PUSH1, 17, PUSH1, 0, CODECOPY, PUSH1, len, PUSH1,
        0, RETURN,
    ];
    init.extend_from_slice(&runtime);
    init
}

fn child_address(deployer: Address, salt: u8) -> Address {
    deployer.create2_from_code(B256::with_last_byte(salt), child_init())
}

/// Code that deploys a child by CREATE2 with the salt `salt` pushes, and keeps its address
/// in slot 8.
fn emit_create2(code: &mut Vec<u8>, salt: &[u8]) {
    let init = child_init();
    for (i, chunk) in init.chunks(32).enumerate() {
        let mut word = [0u8; 32];
        word[..chunk.len()].copy_from_slice(chunk);
        code.push(PUSH32);
        code.extend_from_slice(&word);
        code.extend_from_slice(&[PUSH1, (i * 32) as u8, MSTORE]);
    }
    code.extend_from_slice(salt);
    code.extend_from_slice(&[PUSH1, init.len() as u8, PUSH1, 0, PUSH1, 0, CREATE2]);
    code.extend_from_slice(&[PUSH1, 8, SSTORE]);
}

/// The salt of a transaction that deploys or calls a child: 0 three times in four, so that
/// one child is deployed, written, destroyed and re-created often enough within a block.
fn busy_salt(salt: u8) -> u8 {
    u8::from(salt % 4 == 3)
}

fn factory_code() -> Vec<u8> {
    let mut code = Vec::new();
    emit_create2(
        &mut code,
        &[PUSH1, 0, CALLDATALOAD, PUSH1, 0xF8, SHR, PUSH1, 1, AND],
    );
    code.push(STOP);
    code
}

fn sweeper_code() -> Vec<u8> {
    let mut code = vec![PUSH3];
    code.extend_from_slice(&SWEEP_AT.to_be_bytes()[1..]);
    code.extend_from_slice(&[SELFBALANCE, LT, PUSH1, 0, JUMPI]);
    let to_end = code.len() - 2;
    code.extend_from_slice(&[PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, SELFBALANCE]);
    push20(&mut code, sink());
    code.extend_from_slice(&[GAS, CALL, POP]);
    let end = code.len();
    code.extend_from_slice(&[JUMPDEST, STOP]);
    patch(&mut code, to_end, end);
    code
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
                    match who % 6 {
                        0 | 1 => eoa(who),
                        2 | 3 => contract(who),
                        4 => sweeper(),
                        _ => delegator(0),
                    },
                );
                code.extend_from_slice(&[BALANCE, PUSH1, 4 + slot % 4, SSTORE]);
            }
            Snippet::Call(target, value) => {
                code.extend_from_slice(&[PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, value]);
                push20(
                    &mut code,
                    match target % 5 {
                        0 => eoa(target),
                        1 => delegator(target),
                        4 => sweeper(),
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
            Snippet::Create2(salt) => emit_create2(&mut code, &[PUSH1, salt % 2]),
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
            Snippet::CallChild(from, salt, mode) => {
                let child = child_address(deployer(from), salt % 2);
                // One byte of calldata: the mode, at memory offset 0.
                code.extend_from_slice(&[PUSH1, mode % 4, PUSH1, 0, MSTORE8]);
                code.extend_from_slice(&[PUSH1, 0, PUSH1, 0, PUSH1, 1, PUSH1, 0, PUSH1, 0]);
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
    /// An EIP-7702 transaction: `authority` delegates to a contract or the sweeper (or clears
    /// its delegation), then the transaction calls `to`. Before Prague it is a plain call
    /// instead.
    Delegate {
        from: u8,
        authority: u8,
        target: u8,
        to: u8,
    },
    /// A call to the factory, which deploys its child with `salt`.
    Deploy {
        from: u8,
        salt: u8,
    },
    /// A call to a CREATE2 child (mostly the factory's) with a mode byte.
    CallChild {
        from: u8,
        deployer: u8,
        salt: u8,
        mode: u8,
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
        (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(a, b, c)| Snippet::CallChild(a, b, c)),
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
        2 => deploy(),
        3 => call_child(),
    ]
}

fn deploy() -> impl Strategy<Value = TxSpec> {
    (any::<u8>(), any::<u8>()).prop_map(|(from, salt)| TxSpec::Deploy { from, salt })
}

fn call_child() -> impl Strategy<Value = TxSpec> {
    (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(from, deployer, salt, mode)| {
        TxSpec::CallChild {
            from,
            deployer,
            salt,
            mode,
        }
    })
}

/// The transactions of a block with a re-creation in it: the factory's busiest child is
/// deployed, its slot 0 written, the child destroyed, deployed again and called (which logs
/// slot 0), in that order, by random senders, with random transactions in between. (The
/// general mix gives the five in order too rarely.) Before Cancun the re-created child must
/// read slot 0 as zero, whatever the value written before the wipe.
fn recreation_txs() -> impl Strategy<Value = Vec<TxSpec>> {
    (
        proptest::collection::vec(tx_spec(), 3..16),
        [any::<u8>(); 5],
        [0u8..3, 0u8..3, 0u8..3, 0u8..3, 0u8..3],
    )
        .prop_map(|(mut txs, from, gaps)| {
            let call = |from, mode| TxSpec::CallChild {
                from,
                deployer: 0,
                salt: 0,
                mode,
            };
            let script = [
                TxSpec::Deploy {
                    from: from[0],
                    salt: 0,
                },
                call(from[1], 0),
                call(from[2], 1),
                TxSpec::Deploy {
                    from: from[3],
                    salt: 0,
                },
                call(from[4], 2),
            ];
            let mut at = 0;
            for (tx, gap) in script.into_iter().zip(gaps) {
                at = (at + usize::from(gap)).min(txs.len());
                txs.insert(at, tx);
                at += 1;
            }
            txs
        })
}

/// The first Cancun timestamp on mainnet (EIP-6780: SELFDESTRUCT no longer deletes).
const CANCUN: u64 = 1_710_338_135;

#[derive(Debug, Clone)]
struct BlockSpec {
    /// Mainnet timestamp picking the fork: London (SELFDESTRUCT deletes), Shanghai, Cancun
    /// (EIP-6780), Prague (EIP-7702).
    fork_timestamp: u64,
    /// See [`coinbase`].
    coinbase: u8,
    contracts: Vec<(Vec<Snippet>, Ending)>,
    /// Each transaction, and whether it pays the beneficiary nothing (a gas price equal to
    /// the base fee).
    txs: Vec<(TxSpec, bool)>,
}

fn block_spec() -> impl Strategy<Value = BlockSpec> {
    (
        prop_oneof![
            Just(1_660_000_000u64),
            Just(1_690_000_000u64),
            Just(1_720_000_000u64),
            Just(1_750_000_000u64)
        ],
        any::<u8>(),
        proptest::collection::vec(
            (proptest::collection::vec(snippet(), 1..5), ending()),
            CONTRACTS as usize,
        ),
        prop_oneof![
            3 => proptest::collection::vec((tx_spec(), proptest::bool::weighted(0.25)), 1..24),
            1 => recreation_txs().prop_flat_map(|txs| {
                let n = txs.len();
                (Just(txs), proptest::collection::vec(proptest::bool::weighted(0.25), n))
                    .prop_map(|(txs, free)| txs.into_iter().zip(free).collect::<Vec<_>>())
            }),
        ],
    )
        .prop_map(|(fork_timestamp, coinbase, contracts, txs)| BlockSpec {
            fork_timestamp,
            coinbase,
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
    for (address, code) in [(factory(), factory_code()), (sweeper(), sweeper_code())] {
        let code = Bytecode::new_raw(Bytes::from(code));
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
        .map(|(t, no_fee)| {
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
                    if prague && authority % 4 == 3 {
                        // One in four signed by a sender at its next nonce: the authorization
                        // takes that nonce, so the victim's next transaction in the block is
                        // invalid where it stands (nonce too low) and its later ones too (a
                        // gap is never closed): what a builder skips.
                        let victim = eoa(authority / 4);
                        let nonce = nonces.get(&victim).copied().unwrap_or(0);
                        authorization = Some(RecoveredAuthorization::new_unchecked(
                            Authorization {
                                chain_id: U256::from(1),
                                address: contract(*target),
                                nonce,
                            },
                            RecoveredAuthority::Valid(victim),
                        ));
                    } else if prague {
                        let authority = delegator(*authority);
                        // One target in four clears the delegation (the zero address).
                        let address = match target % 4 {
                            2 => Address::ZERO,
                            3 => sweeper(),
                            _ => contract(*target),
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
                    let to = if to % 4 == 3 {
                        sweeper()
                    } else {
                        contract(*to)
                    };
                    (*from, TxKind::Call(to), *value, Bytes::new())
                }
                TxSpec::Deploy { from, salt } => (
                    *from,
                    TxKind::Call(factory()),
                    0,
                    Bytes::from(vec![busy_salt(*salt)]),
                ),
                TxSpec::CallChild {
                    from,
                    deployer: d,
                    salt,
                    mode,
                } => {
                    // Three calls in four go to the factory's children, which the block
                    // itself deploys, destroys and re-creates.
                    let from_factory = if d % 4 == 3 {
                        deployer(*d / 4)
                    } else {
                        factory()
                    };
                    let child = child_address(from_factory, busy_salt(*salt));
                    (*from, TxKind::Call(child), 0, Bytes::from(vec![mode % 4]))
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
                gas_price: if *no_fee { 1 } else { 2 },
                chain_id: Some(1),
                ..Default::default()
            };
            *nonce += 1;
            if let Some(authorization) = authorization {
                env.set_recovered_authorization(vec![authorization]);
                env.gas_price = 2;
                env.gas_priority_fee = Some(u128::from(!*no_fee));
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
        beneficiary: coinbase(spec.coinbase),
        basefee: 1,
        prevrandao: Some(B256::with_last_byte(1)),
        ..Default::default()
    };
    (
        PreparedBlock::synthetic(&ChainSpec::mainnet(), block_env, txs),
        db,
    )
}

/// What a block builder makes of `block`, one transaction after another: a transaction that
/// is invalid where it stands is left out and changes nothing; the others execute as usual.
/// Returns the outcome of the included transactions and the indices of the skipped ones.
fn build_sequentially(
    block: &PreparedBlock,
    base: &CacheDB<EmptyDB>,
) -> (BlockOutcome, Vec<usize>) {
    let mut evm = PlainEvm::new(base.clone(), block);
    let mut receipts = Vec::new();
    let mut changes = BlockChanges::new(block.spec());
    let mut cumulative_gas_used = 0;
    let mut skipped = Vec::new();
    for (index, tx) in block.txs.iter().enumerate() {
        match BlockEvm::transact(&mut evm, tx.env.clone()) {
            Ok(done) => {
                changes.fold(&done.state);
                BlockEvm::commit(&mut evm, done.state);
                receipts.push(TxReceipt::after(
                    tx.tx_type,
                    done.result,
                    &mut cumulative_gas_used,
                ));
            }
            Err(EVMError::Transaction(_)) => skipped.push(index),
            Err(e) => panic!("transaction {index}: {e}"),
        }
    }
    let outcome = BlockOutcome {
        number: block.number,
        receipts,
        changes: changes.finish(),
    };
    (outcome, skipped)
}

/// A builder's executor ([`ParallelExecutor::building`]) skips the transactions a sequential
/// builder skips, and gives the same receipts, ChangeSet and state for the rest, at several
/// thread counts and through a bailout.
fn check_building(block: &PreparedBlock, base: &CacheDB<EmptyDB>) -> Result<(), TestCaseError> {
    let (expected, expected_skipped) = build_sequentially(block, base);
    let always_bail = Bailout {
        after_executions: 3,
        conflicts_per_execution: 0.0,
        min_execution_ns: u64::MAX,
    };
    for (run, (threads, bailout)) in [(2, None), (4, None), (2, Some(always_bail))]
        .into_iter()
        .enumerate()
    {
        let what = format!("building with {threads} threads, run {run}");
        let mut executor = ParallelExecutor::new(threads)
            .with_bailout(bailout)
            .building();
        let mut state = base.clone();
        let (outcome, skipped) = if run == 1 {
            let (outcome, _) = executor
                .execute_into(block, base, &mut state)
                .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
            (outcome, None)
        } else {
            let p = executor
                .execute(block, base)
                .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
            let skipped: Vec<usize> = p.skipped.iter().map(|s| s.index).collect();
            let outcome = p.outcome.clone();
            p.commit_into(&mut state).expect("commit");
            (outcome, Some(skipped))
        };
        if let Some(skipped) = skipped {
            prop_assert_eq!(&skipped, &expected_skipped, "skipped, {}", what);
        }
        assert_same_changes(&what, &outcome.changes, &expected.changes);
        prop_assert_eq!(&outcome, &expected, "receipts, {}", what);
        assert_holds(&what, &state, &expected.changes);
    }
    Ok(())
}

fn check(spec: &BlockSpec) -> Result<(), TestCaseError> {
    let (block, base) = build(spec);
    let mut sequential = PlainEvm::new(base.clone(), &block);
    let expected = execute_block(&mut sequential, &block);
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
                let what = format!("{threads} threads, run {run}");
                assert_same_changes(&what, &outcome.changes, &expected.changes);
                prop_assert_eq!(&outcome, expected, "receipts with {}", what);
                assert_holds(&what, &state, &expected.changes);
            }
            // Both refuse the block: for the same transaction and the same reason, so that a
            // block builder drops the same transaction whichever executor ran.
            (Err(e), Err(p)) => prop_assert_eq!(e, &p, "error with {} threads", threads),
            (e, p) => prop_assert!(
                false,
                "sequential {:?} but parallel {:?}",
                e.as_ref().err(),
                p.err()
            ),
        }
    }
    check_building(&block, &base)
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

/// Whether `child` has slot 0 written, then is destroyed, re-created, and called (its code
/// logs slot 0) in the block, in that order.
fn recreated_and_read(outcome: &ParallelOutcome, child: Address) -> bool {
    let mut stage = 0;
    for (state, receipt) in outcome.states.iter().zip(&outcome.outcome.receipts) {
        if stage == 3 && receipt.logs.iter().any(|log| log.address == child) {
            return true;
        }
        let Some(account) = state.get(&child) else {
            continue;
        };
        let wrote = account
            .storage
            .get(&U256::ZERO)
            .is_some_and(|slot| slot.is_changed());
        if stage == 0 && wrote {
            stage = 1;
        }
        if stage == 1 && account.is_selfdestructed() {
            stage = 2;
        } else if stage == 2 && account.is_created() {
            stage = 3;
        }
    }
    false
}

/// The generator must really produce the cases this file claims to test: blocks that execute
/// (not just blocks that both executors reject), delegations that take effect and run code in
/// a delegator's storage, code hashes read into storage, value sent to precompiles, CREATE2
/// children re-created before Cancun and read after their storage was written and wiped, a
/// contract or delegated beneficiary that sweeps its balance more than once in a block, and
/// transactions that pay no fee (some of them sweeping the beneficiary), and blocks a builder
/// makes only by skipping transactions invalid where they stand.
#[test]
fn random_blocks_cover_the_hard_cases() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut ok, mut delegated, mut ran_delegated, mut hashes, mut precompile_value) =
        (0, 0, 0, 0, 0);
    let (mut recreated, mut swept_twice, mut delegate_swept) = (0, 0, 0);
    let (mut no_fee, mut no_fee_sweeps) = (0, 0);
    let mut skipped_blocks = 0;
    for _ in 0..300 {
        let spec = block_spec()
            .new_tree(&mut runner)
            .expect("generates")
            .current();
        let (block, base) = build(&spec);
        let Ok(outcome) = execute_block_sequential(&block, &base) else {
            // A block a builder would have made by skipping: count what it skips.
            let (_, skipped) = build_sequentially(&block, &base);
            skipped_blocks += usize::from(!skipped.is_empty());
            continue;
        };
        ok += 1;
        if spec.fork_timestamp < CANCUN {
            let deployers = [factory(), contract(0), contract(1), contract(2)];
            let children = (0..2).flat_map(|salt| deployers.map(|d| child_address(d, salt)));
            recreated += children
                .filter(|child| recreated_and_read(&outcome, *child))
                .count();
        }
        let coinbase = block.block_env.beneficiary;
        let mut sweeps = 0;
        for ((state, fee), (_, free)) in outcome.states.iter().zip(&outcome.fees).zip(&spec.txs) {
            let swept = coinbase != eoa(4)
                && state.get(&coinbase).is_some_and(|a| {
                    a.is_touched() && !a.is_selfdestructed() && a.info.balance.is_zero()
                });
            sweeps += usize::from(swept);
            if *free {
                assert!(
                    fee.is_zero(),
                    "a transaction meant to pay no fee paid {fee}"
                );
                no_fee += 1;
                no_fee_sweeps += usize::from(swept);
            }
        }
        swept_twice += usize::from(sweeps >= 2);
        delegate_swept += usize::from(sweeps > 0 && coinbase == delegator(0));
        // What the block left, from its ChangeSet (the delegators start undelegated and
        // without storage; no account starts with slot 9 or a precompile with value).
        let changes = &outcome.outcome.changes;
        let account = |a: Address| {
            changes
                .accounts()
                .iter()
                .find(|(x, _)| *x == a)
                .and_then(|(_, c)| c.state)
        };
        for i in 0..DELEGATORS {
            delegated += usize::from(
                account(delegator(i))
                    .is_some_and(|s| s.code_hash != gigas_evm::revm::primitives::KECCAK_EMPTY),
            );
            ran_delegated += usize::from(
                changes
                    .storage()
                    .iter()
                    .any(|(a, _, v)| *a == delegator(i) && !v.is_zero()),
            );
        }
        hashes += changes
            .storage()
            .iter()
            .filter(|(_, slot, v)| *slot == U256::from(9) && !v.is_zero())
            .count();
        for i in 0..4 {
            precompile_value +=
                usize::from(account(precompile(i)).is_some_and(|s| !s.balance.is_zero()));
        }
    }
    eprintln!(
        "{ok} of 300 blocks execute; {delegated} delegations in effect at the end, \
         {ran_delegated} delegators with storage written by delegated code, {hashes} accounts \
         holding a code hash read, {precompile_value} precompiles holding value, {recreated} \
         children written, destroyed, re-created and read before Cancun, {swept_twice} blocks \
         whose beneficiary swept its balance twice or more, {delegate_swept} where a delegated \
         beneficiary swept, {no_fee} transactions paying no fee ({no_fee_sweeps} \
         of them sweeping the beneficiary), {skipped_blocks} blocks a builder makes by \
         skipping invalid transactions"
    );
    assert!(
        skipped_blocks > 5,
        "only {skipped_blocks} blocks with skipped transactions"
    );
    assert!(ok > 150, "only {ok} of 300 random blocks execute");
    assert!(delegated > 10 && ran_delegated > 5 && hashes > 50 && precompile_value > 10);
    assert!(recreated > 15, "only {recreated} re-created children read");
    assert!(swept_twice > 5 && delegate_swept > 0 && no_fee > 300 && no_fee_sweeps > 5);
}

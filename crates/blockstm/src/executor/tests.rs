//! Races replayed on purpose: real transactions executed over the multi-version memory in a
//! fixed order chosen to reproduce an interleaving that threads reach only by chance, then
//! settled as the in-order committer settles a block (a transaction whose reads no longer
//! hold runs again once every earlier one is final). What would be committed must be what
//! sequential execution gives.

use alloy_primitives::{Bytes, Log};
use gigas_evm::PreparedTx;
use gigas_primitives::ChainSpec;
use gigas_test_support::{assert_holds, assert_same_changes};
use revm::bytecode::opcode::*;
use revm::context::{BlockEnv, TxEnv};
use revm::database::EmptyDB;
use revm::primitives::TxKind;

use super::*;
use crate::policy::execute_block_sequential;

/// One incarnation's output: (incarnation, result, state, fee).
type Output = (usize, ExecutionResult, EvmState, U256);

/// A block executed incarnation by incarnation in the order a test chooses.
struct Interleaving<'a> {
    block: &'a PreparedBlock,
    base: &'a CacheDB<EmptyDB>,
    mv: MvMemory,
    codes: Mutex<HashMap<B256, Bytecode>>,
    outputs: Vec<Option<Output>>,
    executions: Vec<usize>,
}

impl<'a> Interleaving<'a> {
    fn new(block: &'a PreparedBlock, base: &'a CacheDB<EmptyDB>) -> Self {
        let n = block.txs.len();
        Self {
            block,
            base,
            mv: MvMemory::new(n),
            codes: Mutex::new(HashMap::new()),
            outputs: vec![None; n],
            executions: vec![0; n],
        }
    }

    /// Executes the next incarnation of `idx` over the memory as it is now and records its
    /// reads and writes, as a worker does.
    fn execute(&mut self, idx: usize) -> &ExecutionResult {
        let incarnation = self.executions[idx];
        let mut evm = PlainEvm::new(
            MvDb {
                mv: &self.mv,
                base: self.base,
                codes: &self.codes,
                beneficiary: self.block.block_env.beneficiary,
                idx,
                reads: Vec::new(),
                read_accounts: Vec::new(),
            },
            self.block,
        );
        let (done, fee) = evm
            .transact_deferring_reward(self.block.txs[idx].env.clone())
            .unwrap_or_else(|e| panic!("transaction {idx}, incarnation {incarnation}: {e}"));
        let mut writes = Vec::new();
        write_set(
            &done.state,
            &evm.db().read_accounts,
            &self.codes,
            &mut writes,
        );
        writes.push((Location::Fee(idx), Value::Fee(fee)));
        let mut reads = std::mem::take(&mut evm.db_mut().reads);
        self.mv.record((idx, incarnation), &mut reads, &mut writes);
        self.executions[idx] += 1;
        let output = self.outputs[idx].insert((incarnation, done.result, done.state, fee));
        &output.1
    }

    /// Whether `idx`'s last incarnation would pass validation now.
    fn valid(&self, idx: usize) -> bool {
        self.mv.validate_read_set(idx)
    }

    /// Commits in block order as the committer does: a transaction whose reads no longer
    /// hold is aborted and executed again (every earlier one is final by then, so once is
    /// enough).
    fn settle(mut self) -> ParallelOutcome {
        let n = self.block.txs.len();
        for idx in 0..n {
            if self.outputs[idx].is_none() {
                self.execute(idx);
            }
            if !self.valid(idx) {
                self.mv.convert_writes_to_estimates(idx);
                self.execute(idx);
                assert!(
                    self.valid(idx),
                    "transaction {idx} executed after every earlier one is final and its reads do not hold"
                );
            }
        }
        let mut cumulative_gas_used = 0;
        let (mut receipts, mut states, mut fees) = (Vec::new(), Vec::new(), Vec::new());
        let mut changes = deferred_changes(self.block, self.base).expect("base state reads");
        for (tx, output) in self.block.txs.iter().zip(self.outputs) {
            let (_, result, state, fee) = output.expect("every transaction executed");
            changes.fold_deferred(&state, fee);
            receipts.push(TxReceipt::after(
                tx.tx_type,
                result,
                &mut cumulative_gas_used,
            ));
            states.push(state);
            fees.push(fee);
        }
        ParallelOutcome {
            outcome: BlockOutcome {
                number: self.block.number,
                receipts,
                changes: changes.finish(),
            },
            states,
            fees,
            skipped: Vec::new(),
            beneficiary: self.block.block_env.beneficiary,
            stats: Stats::default(),
        }
    }
}

/// `parallel` must hold the sequential receipts, one by one, and state.
fn assert_sequential(block: &PreparedBlock, base: &CacheDB<EmptyDB>, parallel: ParallelOutcome) {
    let expected = execute_block_sequential(block, base).expect("sequential execution");
    for (i, (got, want)) in parallel
        .outcome
        .receipts
        .iter()
        .zip(&expected.outcome.receipts)
        .enumerate()
    {
        assert_eq!(
            got, want,
            "transaction {i}: Block-STM commits this receipt (left), sequential execution gives the right one"
        );
    }
    assert_same_changes(
        "the replayed interleaving",
        &parallel.outcome.changes,
        &expected.outcome.changes,
    );
    let mut got = base.clone();
    parallel.commit_into(&mut got).expect("commit");
    assert_holds("the replayed interleaving", &got, &expected.outcome.changes);
}

/// EVM code with forward jumps: `push_label` pushes the offset of a `label` placed later.
#[derive(Default)]
struct Asm {
    code: Vec<u8>,
    labels: HashMap<&'static str, usize>,
    fixups: Vec<(usize, &'static str)>,
}

impl Asm {
    fn op(mut self, bytes: &[u8]) -> Self {
        self.code.extend_from_slice(bytes);
        self
    }

    fn push_address(mut self, address: Address) -> Self {
        self.code.push(PUSH20);
        self.code.extend_from_slice(address.as_slice());
        self
    }

    fn push_label(mut self, label: &'static str) -> Self {
        self.code.push(PUSH1);
        self.fixups.push((self.code.len(), label));
        self.code.push(0);
        self
    }

    fn label(mut self, label: &'static str) -> Self {
        self.labels.insert(label, self.code.len());
        self.code.push(JUMPDEST);
        self
    }

    fn finish(mut self) -> Vec<u8> {
        for (at, label) in &self.fixups {
            let target = self.labels[label];
            self.code[*at] = u8::try_from(target).expect("code fits PUSH1 jumps");
        }
        self.code
    }
}

/// Init code that deploys `runtime` and writes no storage.
fn init_code(runtime: &[u8]) -> Vec<u8> {
    let len = u8::try_from(runtime.len()).expect("short runtime");
    let mut init = vec![
        PUSH1, len, PUSH1, 12, PUSH1, 0, CODECOPY, PUSH1, len, PUSH1, 0, RETURN,
    ];
    init.extend_from_slice(runtime);
    init
}

/// A factory that deploys `init`'s contract by CREATE2 with salt 0 whenever it is called.
fn factory(init: &[u8]) -> Vec<u8> {
    let len = u8::try_from(init.len()).expect("short init code");
    let mut code = vec![
        PUSH1, len, PUSH1, 18, PUSH1, 0, CODECOPY, PUSH1, 0, PUSH1, len, PUSH1, 0, PUSH1, 0,
        CREATE2, POP, STOP,
    ];
    code.extend_from_slice(init);
    code
}

/// Logs the 32-byte word on top of the stack.
const LOG_WORD: [u8; 8] = [PUSH1, 0, MSTORE, PUSH1, 32, PUSH1, 0, LOG0];

fn sender(i: u8) -> Address {
    Address::with_last_byte(0x10 + i)
}

fn contract_account(code: Vec<u8>, balance: u64) -> AccountInfo {
    let code = Bytecode::new_raw(Bytes::from(code));
    AccountInfo {
        balance: U256::from(balance),
        nonce: 1,
        code_hash: code.hash_slow(),
        code: Some(code),
        ..Default::default()
    }
}

/// A London block (SELFDESTRUCT deletes) of calls from distinct senders: (to, data, gas price)
/// over a base fee of 1, so a gas price of 1 pays the beneficiary nothing.
fn london_block(
    beneficiary: Address,
    contracts: Vec<(Address, AccountInfo)>,
    calls: &[(Address, &[u8], u128)],
) -> (PreparedBlock, CacheDB<EmptyDB>) {
    let mut base = CacheDB::new(EmptyDB::default());
    for (address, info) in contracts {
        base.insert_account_info(address, info);
    }
    let txs = calls
        .iter()
        .enumerate()
        .map(|(i, &(to, data, gas_price))| {
            let caller = sender(i as u8);
            base.insert_account_info(
                caller,
                AccountInfo {
                    balance: U256::from(10u64).pow(U256::from(18)),
                    ..Default::default()
                },
            );
            PreparedTx::from_env(TxEnv {
                caller,
                kind: TxKind::Call(to),
                data: Bytes::copy_from_slice(data),
                gas_limit: 1_000_000,
                gas_price,
                chain_id: Some(1),
                ..Default::default()
            })
            .expect("legacy transaction")
        })
        .collect();
    let block_env = BlockEnv {
        number: U256::from(13_000_000u64),
        timestamp: U256::from(1_630_000_000u64),
        gas_limit: 30_000_000,
        beneficiary,
        basefee: 1,
        ..Default::default()
    };
    let block = PreparedBlock::synthetic(&ChainSpec::mainnet(), block_env, txs);
    assert_eq!(block.hardfork, gigas_primitives::Hardfork::London);
    (block, base)
}

/// The words a transaction logged.
fn logged(result: &ExecutionResult) -> Vec<U256> {
    result
        .logs()
        .iter()
        .map(|log: &Log| U256::from_be_slice(&log.data.data))
        .collect()
}

/// The contract of finding 9, C, deployed by CREATE2 from a factory, and a London block of
/// calls `(to the factory or not, calldata byte)` from distinct senders. C's calldata byte 0:
/// 1 writes slot 0 = 5, 2 logs slot 0, anything else self-destructs C.
fn recreated_contract_block(calls: &[(bool, u8)]) -> (PreparedBlock, CacheDB<EmptyDB>) {
    let runtime = Asm::default()
        .op(&[PUSH1, 0, CALLDATALOAD, PUSH1, 0xF8, SHR, DUP1, PUSH1, 1, EQ])
        .push_label("store")
        .op(&[JUMPI, PUSH1, 2, EQ])
        .push_label("read")
        .op(&[JUMPI])
        .push_address(Address::with_last_byte(0xEE))
        .op(&[SELFDESTRUCT])
        .label("store")
        .op(&[PUSH1, 5, PUSH1, 0, SSTORE, STOP])
        .label("read")
        .op(&[PUSH1, 0, SLOAD])
        .op(&LOG_WORD)
        .op(&[STOP])
        .finish();
    let init = init_code(&runtime);
    let deployer = Address::with_last_byte(0xF0);
    let child = deployer.create2_from_code(B256::ZERO, &init);
    let data: Vec<[u8; 1]> = calls.iter().map(|&(_, byte)| [byte]).collect();
    let calls: Vec<(Address, &[u8], u128)> = calls
        .iter()
        .zip(&data)
        .map(|(&(deploy, _), data)| {
            if deploy {
                (deployer, &[][..], 2)
            } else {
                (child, &data[..], 2)
            }
        })
        .collect();
    london_block(
        Address::with_last_byte(0xBE),
        vec![(deployer, contract_account(factory(&init), 0))],
        &calls,
    )
}

const DEPLOY: (bool, u8) = (true, 0);
const STORE: (bool, u8) = (false, 1);
const READ: (bool, u8) = (false, 2);
const DESTRUCT: (bool, u8) = (false, 0);

/// Finding 9 of the review: a slot read after its account is destroyed and re-created.
///
/// tx0 deploys C by CREATE2; tx1 writes C's slot 0 = 5 (C's account is unchanged, so not
/// written); tx2 self-destructs C; tx3 re-creates it with the same code (same nonce,
/// balance and code hash); tx4 logs slot 0, which is 0 after the re-creation. tx4 runs
/// before tx2 and tx3 record their writes and logs 5; when they do, C's account and its
/// wipe hold values equal to what tx4 read (tx0's), but slot 0 now lies under a later wipe.
#[test]
fn a_slot_read_before_a_wipe_and_re_creation_is_not_committed() {
    let (block, base) = recreated_contract_block(&[DEPLOY, STORE, DESTRUCT, DEPLOY, READ]);
    let mut run = Interleaving::new(&block, &base);
    run.execute(0);
    run.execute(1);
    // tx4 before tx2 and tx3 have written: it sees tx1's 5 above tx0's wipe.
    assert_eq!(logged(run.execute(4)), vec![U256::from(5)]);
    run.execute(2);
    run.execute(3);
    for idx in 0..4 {
        assert!(run.valid(idx), "transaction {idx} read what it should");
    }
    assert_sequential(&block, &base, run.settle());
}

/// The other side of finding 9: a slot read as zero because a wipe came after its last
/// write, then written again with the same value by a later transaction.
///
/// tx0 deploys C, tx1 writes slot 0 = 5, tx2 destroys C, tx3 re-creates it, tx4 writes
/// slot 0 = 5 again, tx5 logs slot 0 (5). tx5 runs before tx4 has written and logs 0 (tx1's
/// 5 under tx3's wipe); tx4's write then holds the value tx5 read for the slot, and the wipe
/// is unchanged, but the slot's last write is now above the wipe.
#[test]
fn a_slot_read_under_a_wipe_before_an_equal_later_write_is_not_committed() {
    let (block, base) = recreated_contract_block(&[DEPLOY, STORE, DESTRUCT, DEPLOY, STORE, READ]);
    let mut run = Interleaving::new(&block, &base);
    for idx in 0..4 {
        run.execute(idx);
    }
    assert_eq!(logged(run.execute(5)), vec![U256::ZERO]);
    run.execute(4);
    assert_sequential(&block, &base, run.settle());
}

/// Finding 10 of the review: the beneficiary's balance, read as the last write of its
/// account plus the fees since.
///
/// The beneficiary K is a contract that sends its whole balance away when called. tx0 calls
/// it (K's account: balance 0); tx1 sets a flag in a gate G; tx2, which pays no fee, calls G,
/// which calls K only once the flag is set; tx3 logs K's balance. tx2's first incarnation
/// runs before tx1's write and does not call K; tx3 then reads K as tx0 left it plus the fees
/// of tx0, tx1 and tx2. tx2 runs again, calls K and leaves its account byte for byte as tx0
/// did, with the same (zero) fee: every value tx3 read is unchanged, but its balance is now
/// only the fees since tx2 (zero), not since tx0.
#[test]
fn a_beneficiary_read_before_a_later_equal_write_is_not_committed() {
    let swept_to = Address::with_last_byte(0xEE);
    let coinbase = Address::with_last_byte(0xCB);
    let gate = Address::with_last_byte(0xC6);
    let reader = Address::with_last_byte(0xC7);
    let sweep = Asm::default()
        .op(&[PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, SELFBALANCE])
        .push_address(swept_to)
        .op(&[GAS, CALL, POP, STOP])
        .finish();
    // With calldata: set the flag. Without: call the coinbase if the flag is set.
    let gate_code = Asm::default()
        .op(&[CALLDATASIZE])
        .push_label("set")
        .op(&[JUMPI, PUSH1, 0, SLOAD, ISZERO])
        .push_label("end")
        .op(&[JUMPI, PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0])
        .push_address(coinbase)
        .op(&[GAS, CALL, POP])
        .label("end")
        .op(&[STOP])
        .label("set")
        .op(&[PUSH1, 1, PUSH1, 0, SSTORE, STOP])
        .finish();
    let reader_code = Asm::default()
        .push_address(coinbase)
        .op(&[BALANCE])
        .op(&LOG_WORD)
        .op(&[STOP])
        .finish();
    let (block, base) = london_block(
        coinbase,
        vec![
            (coinbase, contract_account(sweep, 1_000)),
            (gate, contract_account(gate_code, 0)),
            (reader, contract_account(reader_code, 0)),
        ],
        &[
            (coinbase, &[], 2),
            (gate, &[1], 2),
            (gate, &[], 1),
            (reader, &[], 2),
        ],
    );

    let mut run = Interleaving::new(&block, &base);
    run.execute(0);
    run.execute(2);
    run.execute(1);
    let fees_since_tx0 = run.execute(3).clone();
    assert_ne!(logged(&fees_since_tx0), vec![U256::ZERO]);
    // tx2 read the flag before tx1 set it: it runs again and now calls the coinbase.
    assert!(!run.valid(2));
    run.mv.convert_writes_to_estimates(2);
    run.execute(2);
    assert_sequential(&block, &base, run.settle());
}

/// The policy's sequential path and a bailed-out block's tail are one loop
/// (`finish_sequentially`); what tells them apart is `Stats::sequential_from`, set only when a
/// parallel phase ran and bailed. Both must give what plain revm gives, transaction by
/// transaction, beneficiary sweeps included.
#[test]
fn the_sequential_path_and_a_bailout_tail_agree_with_plain_revm() {
    let coinbase = Address::with_last_byte(0xCB);
    let sweep = Asm::default()
        .op(&[PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, SELFBALANCE])
        .push_address(Address::with_last_byte(0xEE))
        .op(&[GAS, CALL, POP, STOP])
        .finish();
    let reader_code = Asm::default()
        .push_address(coinbase)
        .op(&[BALANCE])
        .op(&LOG_WORD)
        .op(&[STOP])
        .finish();
    let reader = Address::with_last_byte(0xC7);
    let (block, base) = london_block(
        coinbase,
        vec![
            (coinbase, contract_account(sweep, 1_000)),
            (reader, contract_account(reader_code, 0)),
        ],
        &[
            (reader, &[], 2),
            (coinbase, &[], 3),
            (reader, &[], 1),
            (reader, &[], 2),
        ],
    );
    let mut plain = PlainEvm::new(base.clone(), &block);
    let expected = gigas_evm::execute_block(&mut plain, &block).expect("plain revm executes");
    let n = block.txs.len();

    let sequential = execute_block_sequential(&block, &base).expect("sequential executes");
    assert_eq!(sequential.outcome, expected);
    assert_eq!(
        sequential.stats,
        Stats {
            executions: n,
            ..Stats::default()
        },
        "the policy's sequential path counts one execution per transaction and no bailout"
    );
    assert_eq!((sequential.states.len(), sequential.fees.len()), (n, n));
    let mut state = base.clone();
    sequential.commit_into(&mut state).expect("commit");
    assert_holds("committed", &state, &expected.changes);

    // Judged after the first execution, which is always cheaper than u64::MAX ns: the block
    // bails out and the rest runs sequentially, both ways of committing.
    let always_bail = Bailout {
        after_executions: 1,
        conflicts_per_execution: 0.0,
        min_execution_ns: u64::MAX,
    };
    let mut executor = ParallelExecutor::new(2).with_bailout(Some(always_bail));
    let bailed = executor.execute(&block, &base).expect("executes");
    assert_eq!(bailed.outcome, expected);
    assert!(bailed.stats.sequential_from.is_some_and(|from| from < n));
    let mut state = base.clone();
    bailed.commit_into(&mut state).expect("commit");
    assert_holds("committed", &state, &expected.changes);

    let mut state = base.clone();
    let (outcome, stats) = executor
        .execute_into(&block, &base, &mut state)
        .expect("executes");
    assert_eq!(outcome, expected);
    assert!(stats.sequential_from.is_some_and(|from| from < n));
    assert_holds("committed", &state, &expected.changes);
}

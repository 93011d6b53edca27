//! `--verify-execution`: re-execute a block's transactions over the state before it and check
//! that the result is the diff, as the talk's stateless challenger would.
//!
//! The sequencer executes a block with Block-STM over its tip; here the same transactions run
//! sequentially ([`gigas_evm::execute_block`] on [`gigas_evm::PlainEvm`]) over the full node's
//! pre-state, in the block environment built from the header's own fields exactly as the
//! sequencer builds it (`gigas_evm::env::block_env_of`: beneficiary, number, timestamp, gas
//! limit, base fee, `mixHash` as PREVRANDAO) and under the chain's fork. Both fold revm's
//! per-transaction state into a ChangeSet with [`gigas_evm::BlockChanges`], which gives
//! identical bytes whatever the executor, so the diff's ChangeSet and the re-execution's must
//! be equal.
//!
//! The checks, in order:
//!
//! 1. The block file belongs to the header (number, hash) and its transactions are the
//!    header's (`transactionsRoot`); a failure is [`ReexecError`]: the *file* is wrong (fetch
//!    it again), nothing is said about the diff.
//! 2. Every transaction executes (a transaction the EVM refuses could never have been in the
//!    sequencer's block): [`ReexecError::Execution`].
//! 3. Receipts ([`check_receipts`]): each one's status, cumulative gas and logs against the
//!    block file, the header's `gasUsed`, `receiptsRoot` and `logsBloom`: a [`Mismatch`].
//! 4. The state ([`compare`]): the first account, slot or bytecode where the diff and the
//!    re-execution differ: a [`Mismatch`], which halts the node naming the block and the key.
//!
//! [`verify_block`] runs all four.

use std::fmt;

use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{Header, ReceiptEnvelope, TxEnvelope};
use alloy_primitives::{Address, Bytes, B256, U256};
use gigas_evm::receipts::{receipts_root_and_bloom, TxReceipt};
use gigas_evm::revm::database::CacheDB;
use gigas_evm::revm::database_interface::{Database, DatabaseCommit, DatabaseRef, WrapDatabaseRef};
use gigas_evm::{execute_block, ExecutionError, PlainEvm, PreparedBlock, PreparedTx};
use gigas_primitives::{AccountChange, ChainSpec, ChangeSet};
use gigas_statediff::BlockFile;

/// Transactions below which senders are recovered on the calling thread (spawning costs more
/// than a few recoveries).
const PARALLEL_RECOVERY_MIN: usize = 256;

/// What re-executing a block produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reexecution {
    /// The block's number.
    pub number: u64,
    /// Its canonical ChangeSet.
    pub changes: ChangeSet,
    /// One receipt per transaction, in order.
    pub receipts: Vec<TxReceipt>,
}

impl Reexecution {
    /// Gas used by the whole block.
    pub fn gas_used(&self) -> u64 {
        self.receipts.last().map_or(0, |r| r.cumulative_gas_used)
    }
}

/// Why a block could not be re-executed at all (as opposed to a [`Mismatch`], where it was and
/// disagrees).
#[derive(Debug, thiserror::Error)]
pub enum ReexecError {
    /// The block file is not the header's block.
    #[error("block {block}: the block file is block {file_number} ({file_hash}), the header's hash is {hash}")]
    WrongBlock {
        /// The header's number.
        block: u64,
        /// The header's hash.
        hash: B256,
        /// The number the file carries.
        file_number: u64,
        /// The hash the file carries.
        file_hash: B256,
    },
    /// The block file's transactions are not the ones the header commits to.
    #[error("block {block}: the block file's transactions give transactionsRoot {got}, the header says {expected}")]
    Transactions {
        /// The block.
        block: u64,
        /// The header's `transactionsRoot`.
        expected: B256,
        /// The root of the file's transactions.
        got: B256,
    },
    /// The block file's receipts are not the ones the header commits to (its
    /// `receiptsRoot`): the file is damaged or forged, not the block wrong.
    #[error("block {block}: the block file's receipts give receiptsRoot {got}, the header says {expected}")]
    Receipts {
        /// The block.
        block: u64,
        /// The header's `receiptsRoot`.
        expected: B256,
        /// The root of the file's receipts.
        got: B256,
    },
    /// A transaction's signature does not recover a sender.
    #[error("block {block}, transaction {index} ({hash}): its sender does not recover: {reason}")]
    Sender {
        /// The block.
        block: u64,
        /// Index in the block.
        index: usize,
        /// Its hash.
        hash: B256,
        /// The recovery error.
        reason: String,
    },
    /// A transaction could not be executed: an invalid one (which the sequencer could not have
    /// included) or a failure reading the state.
    #[error("re-executing: {0}")]
    Execution(#[from] ExecutionError),
}

/// Where the expected side of a [`Mismatch`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The state diff's ChangeSet.
    Diff,
    /// The block file's receipts.
    BlockFile,
    /// The signed header.
    Header,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Diff => "diff",
            Source::BlockFile => "block file",
            Source::Header => "header",
        })
    }
}

/// The first thing that differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MismatchKey {
    /// An account, and which of its fields (`state` when one side does not change it at all).
    Account {
        /// The account.
        address: Address,
        /// `state`, `existence`, `nonce`, `balance`, `code hash` or `storage wiped`.
        field: &'static str,
    },
    /// A storage slot.
    Slot {
        /// The account.
        address: Address,
        /// The slot.
        slot: U256,
    },
    /// A bytecode deployed in the block.
    Bytecode {
        /// Its hash.
        hash: B256,
    },
    /// The number of receipts.
    ReceiptCount,
    /// A field of one receipt: `status`, `cumulative gas used` or `logs`.
    Receipt {
        /// Index in the block.
        index: usize,
        /// The field.
        field: &'static str,
    },
    /// A header field: `gasUsed`, `receiptsRoot` or `logsBloom`.
    Header {
        /// The field.
        field: &'static str,
    },
}

impl fmt::Display for MismatchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MismatchKey::Account { address, field } => write!(f, "account {address} {field}"),
            MismatchKey::Slot { address, slot } => write!(f, "account {address} slot {slot:#x}"),
            MismatchKey::Bytecode { hash } => write!(f, "bytecode {hash}"),
            MismatchKey::ReceiptCount => f.write_str("receipt count"),
            MismatchKey::Receipt { index, field } => write!(f, "receipt {index} {field}"),
            MismatchKey::Header { field } => write!(f, "header {field}"),
        }
    }
}

/// The first difference between what the sequencer published and what re-execution gives.
///
/// Displays as "block 17: account 0x.. balance: diff says X, re-execution gives Y".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("block {block}: {key}: {origin} says {expected}, re-execution gives {got}")]
pub struct Mismatch {
    /// The block.
    pub block: u64,
    /// What differs.
    pub key: MismatchKey,
    /// Where the expected value comes from.
    pub origin: Source,
    /// The published value ("no change" when the diff does not name the key).
    pub expected: String,
    /// The re-executed value ("no change" when re-execution does not change the key).
    pub got: String,
}

/// Why [`verify_block`] failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The block could not be re-executed.
    #[error(transparent)]
    Reexec(#[from] ReexecError),
    /// Re-execution disagrees with what was published.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
}

impl ReexecError {
    /// Whether the block file, not the block, is at fault: it is not the file of the block
    /// the signed header seals. A follower fetches such a file again instead of halting.
    pub fn is_bad_file(&self) -> bool {
        matches!(
            self,
            ReexecError::WrongBlock { .. }
                | ReexecError::Transactions { .. }
                | ReexecError::Receipts { .. }
        )
    }
}

/// Recovers every sender, in parallel for large blocks.
fn recover_senders(number: u64, txs: &[TxEnvelope]) -> Result<Vec<Address>, ReexecError> {
    let recover = |offset: usize, chunk: &[TxEnvelope]| -> Result<Vec<Address>, ReexecError> {
        chunk
            .iter()
            .enumerate()
            .map(|(i, tx)| {
                tx.recover_signer().map_err(|e| ReexecError::Sender {
                    block: number,
                    index: offset + i,
                    hash: *tx.tx_hash(),
                    reason: e.to_string(),
                })
            })
            .collect()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if txs.len() < PARALLEL_RECOVERY_MIN || threads < 2 {
        return recover(0, txs);
    }
    let size = txs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = txs
            .chunks(size)
            .enumerate()
            .map(|(i, chunk)| scope.spawn(move || recover(i * size, chunk)))
            .collect();
        let mut senders = Vec::with_capacity(txs.len());
        for handle in handles {
            let chunk = handle.join().map_err(|_| ReexecError::Sender {
                block: number,
                index: 0,
                hash: B256::ZERO,
                reason: "a recovery thread panicked".into(),
            })??;
            senders.extend(chunk);
        }
        Ok(senders)
    })
}

/// Checks that `block` is the block `header` seals (number, hash, `transactionsRoot`),
/// recovers its senders, and builds the block environment the sequencer built (the header's
/// own fields under the chain's fork): everything of a re-execution but the EVM.
pub fn prepare(
    spec: &ChainSpec,
    header: &Header,
    block: &BlockFile,
) -> Result<PreparedBlock, ReexecError> {
    let number = header.number;
    let hash = header.hash_slow();
    if block.number != number || block.hash != hash {
        return Err(ReexecError::WrongBlock {
            block: number,
            hash,
            file_number: block.number,
            file_hash: block.hash,
        });
    }
    let root = alloy_consensus::proofs::calculate_transaction_root(&block.transactions);
    if root != header.transactions_root {
        return Err(ReexecError::Transactions {
            block: number,
            expected: header.transactions_root,
            got: root,
        });
    }
    let senders = recover_senders(number, &block.transactions)?;
    let txs: Vec<PreparedTx> = block
        .transactions
        .iter()
        .zip(senders)
        .map(|(tx, sender)| PreparedTx {
            hash: *tx.tx_hash(),
            tx_type: tx.tx_type(),
            env: gigas_evm::env::tx_env_from(tx, sender),
        })
        .collect();
    let fork = spec.fork_at(number, header.timestamp);
    let block_env = gigas_evm::env::block_env_of(header, fork);
    Ok(PreparedBlock::synthetic(spec, block_env, txs))
}

/// Executes a [`prepare`]d block over `db`, which must answer with the state after the
/// block's parent and keep what each transaction commits for the next (revm's `CacheDB` over
/// the state does both; [`reexecute`] builds exactly that). Callers that measure the state
/// loading wrap the layers themselves.
pub fn execute_prepared<DB>(db: DB, prepared: &PreparedBlock) -> Result<Reexecution, ReexecError>
where
    DB: Database + DatabaseCommit,
    DB::Error: fmt::Display,
{
    let mut evm = PlainEvm::new(db, prepared);
    let outcome = execute_block(&mut evm, prepared)?;
    Ok(Reexecution {
        number: prepared.number,
        changes: outcome.changes,
        receipts: outcome.receipts,
    })
}

/// Re-executes `block` (the transactions of the block `header` seals) over `state`, the state
/// after its parent (the follower's open write group, [`gigas_statedb::StateWriter`], which
/// implements `DatabaseRef`), under `spec`, and returns its ChangeSet and receipts. Nothing is
/// written to `state`.
pub fn reexecute<DB>(
    state: &DB,
    spec: &ChainSpec,
    header: &Header,
    block: &BlockFile,
) -> Result<Reexecution, ReexecError>
where
    DB: DatabaseRef,
    DB::Error: fmt::Display,
{
    let prepared = prepare(spec, header, block)?;
    execute_prepared(CacheDB::new(WrapDatabaseRef(state)), &prepared)
}

/// Checks the re-executed receipts against the block file's and the header's `gasUsed`,
/// `receiptsRoot` and `logsBloom`; the first difference is the [`Mismatch`].
pub fn check_receipts(
    header: &Header,
    block: &BlockFile,
    got: &Reexecution,
) -> Result<(), Mismatch> {
    let mismatch = |key, origin, expected: String, got: String| Mismatch {
        block: header.number,
        key,
        origin,
        expected,
        got,
    };
    if block.receipts.len() != got.receipts.len() {
        return Err(mismatch(
            MismatchKey::ReceiptCount,
            Source::BlockFile,
            block.receipts.len().to_string(),
            got.receipts.len().to_string(),
        ));
    }
    for (index, (published, ours)) in block.receipts.iter().zip(&got.receipts).enumerate() {
        if let Some((field, expected, got)) = receipt_difference(published, ours) {
            return Err(mismatch(
                MismatchKey::Receipt { index, field },
                Source::BlockFile,
                expected,
                got,
            ));
        }
    }
    if header.gas_used != got.gas_used() {
        return Err(mismatch(
            MismatchKey::Header { field: "gasUsed" },
            Source::Header,
            header.gas_used.to_string(),
            got.gas_used().to_string(),
        ));
    }
    let (root, bloom) = receipts_root_and_bloom(&got.receipts);
    if header.receipts_root != root {
        return Err(mismatch(
            MismatchKey::Header {
                field: "receiptsRoot",
            },
            Source::Header,
            header.receipts_root.to_string(),
            root.to_string(),
        ));
    }
    if header.logs_bloom != bloom {
        return Err(mismatch(
            MismatchKey::Header { field: "logsBloom" },
            Source::Header,
            header.logs_bloom.to_string(),
            bloom.to_string(),
        ));
    }
    Ok(())
}

fn receipt_difference(
    published: &ReceiptEnvelope,
    ours: &TxReceipt,
) -> Option<(&'static str, String, String)> {
    if published.status() != ours.success {
        let word = |ok: bool| if ok { "success" } else { "failure" }.to_string();
        return Some(("status", word(published.status()), word(ours.success)));
    }
    if published.cumulative_gas_used() != ours.cumulative_gas_used {
        return Some((
            "cumulative gas used",
            published.cumulative_gas_used().to_string(),
            ours.cumulative_gas_used.to_string(),
        ));
    }
    if published.logs() != ours.logs.as_slice() {
        let count = |n: usize| format!("{n} logs");
        return Some((
            "logs",
            count(published.logs().len()),
            if published.logs().len() == ours.logs.len() {
                format!("{} different logs", ours.logs.len())
            } else {
                count(ours.logs.len())
            },
        ));
    }
    None
}

/// The first key (in the merged order of two sorted lists) whose entries differ, with each
/// side's entry (`None`: the list does not hold the key).
fn first_difference<'a, K: Ord + Copy + 'a, V: PartialEq + 'a>(
    a: impl IntoIterator<Item = (K, &'a V)>,
    b: impl IntoIterator<Item = (K, &'a V)>,
) -> Option<(K, Option<&'a V>, Option<&'a V>)> {
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    loop {
        match (a.peek().copied(), b.peek().copied()) {
            (None, None) => return None,
            (Some((ka, va)), Some((kb, vb))) if ka == kb => {
                if va != vb {
                    return Some((ka, Some(va), Some(vb)));
                }
                a.next();
                b.next();
            }
            (Some((ka, va)), Some((kb, _))) if ka < kb => return Some((ka, Some(va), None)),
            (Some((ka, va)), None) => return Some((ka, Some(va), None)),
            (_, Some((kb, vb))) => return Some((kb, None, Some(vb))),
        }
    }
}

const NO_CHANGE: &str = "no change";

fn accounts(c: &ChangeSet) -> impl Iterator<Item = (Address, &AccountChange)> {
    c.accounts().iter().map(|(a, change)| (*a, change))
}

fn slots(c: &ChangeSet) -> impl Iterator<Item = ((Address, U256), &U256)> {
    c.storage().iter().map(|(a, s, v)| ((*a, *s), v))
}

fn codes(c: &ChangeSet) -> impl Iterator<Item = (B256, &Bytes)> {
    c.bytecodes().iter().map(|(h, code)| (*h, code))
}

fn describe_account(change: &AccountChange) -> String {
    match &change.state {
        None => "destroyed".into(),
        Some(s) => format!(
            "nonce {}, balance {}, code hash {}{}",
            s.nonce,
            s.balance,
            s.code_hash,
            if change.storage_wiped {
                ", storage wiped"
            } else {
                ""
            }
        ),
    }
}

/// The differing field of two changes of one account, with both values.
fn account_field(e: &AccountChange, g: &AccountChange) -> (&'static str, String, String) {
    let exists = |c: &AccountChange| {
        if c.state.is_some() {
            "exists"
        } else {
            "destroyed"
        }
        .to_string()
    };
    match (&e.state, &g.state) {
        (Some(a), Some(b)) if a.nonce != b.nonce => {
            ("nonce", a.nonce.to_string(), b.nonce.to_string())
        }
        (Some(a), Some(b)) if a.balance != b.balance => {
            ("balance", a.balance.to_string(), b.balance.to_string())
        }
        (Some(a), Some(b)) if a.code_hash != b.code_hash => (
            "code hash",
            a.code_hash.to_string(),
            b.code_hash.to_string(),
        ),
        (Some(_), Some(_)) | (None, None) => (
            "storage wiped",
            e.storage_wiped.to_string(),
            g.storage_wiped.to_string(),
        ),
        _ => ("existence", exists(e), exists(g)),
    }
}

/// Compares block `block`'s published ChangeSet (`expected`, from the diff) with the
/// re-executed one (`got`): the first differing account (by address), else slot (by address
/// and slot), else bytecode (by hash) is the [`Mismatch`].
pub fn compare(block: u64, expected: &ChangeSet, got: &ChangeSet) -> Result<(), Mismatch> {
    let mismatch = |key, expected: String, got: String| Mismatch {
        block,
        key,
        origin: Source::Diff,
        expected,
        got,
    };
    if let Some((address, e, g)) = first_difference(accounts(expected), accounts(got)) {
        let (field, e, g) = match (e, g) {
            (Some(e), Some(g)) => account_field(e, g),
            (e, g) => (
                "state",
                e.map_or_else(|| NO_CHANGE.into(), describe_account),
                g.map_or_else(|| NO_CHANGE.into(), describe_account),
            ),
        };
        return Err(mismatch(MismatchKey::Account { address, field }, e, g));
    }
    if let Some(((address, slot), e, g)) = first_difference(slots(expected), slots(got)) {
        let value = |v: Option<&U256>| v.map_or_else(|| NO_CHANGE.into(), |v| v.to_string());
        return Err(mismatch(
            MismatchKey::Slot { address, slot },
            value(e),
            value(g),
        ));
    }
    if let Some((hash, e, g)) = first_difference(codes(expected), codes(got)) {
        let code = |c: Option<&Bytes>| {
            c.map_or_else(|| NO_CHANGE.into(), |c| format!("{} bytes", c.len()))
        };
        return Err(mismatch(MismatchKey::Bytecode { hash }, code(e), code(g)));
    }
    Ok(())
}

/// `--verify-execution` for one block: the block file checked against the signed header
/// (number, hash, `transactionsRoot`, `receiptsRoot`: a file that fails is to be fetched
/// again, [`ReexecError::is_bad_file`]), [`reexecute`] over `state` (the state after the
/// parent), then [`check_receipts`] and [`compare`] with `expected`, the diff's ChangeSet.
/// Returns the re-execution when everything agrees.
pub fn verify_block<DB>(
    state: &DB,
    spec: &ChainSpec,
    header: &Header,
    block: &BlockFile,
    expected: &ChangeSet,
) -> Result<Reexecution, VerifyError>
where
    DB: DatabaseRef,
    DB::Error: fmt::Display,
{
    // The file's receipts are compared with the re-execution's below: they must first be
    // the ones the signed header commits to, or a damaged file would halt the node for a
    // disagreement with unsigned data. (The transactions are checked by `prepare`.)
    let receipts_root = alloy_consensus::proofs::calculate_receipt_root(&block.receipts);
    if receipts_root != header.receipts_root {
        return Err(ReexecError::Receipts {
            block: header.number,
            expected: header.receipts_root,
            got: receipts_root,
        }
        .into());
    }
    let got = reexecute(state, spec, header, block)?;
    check_receipts(header, block, &got)?;
    compare(header.number, expected, &got.changes)?;
    Ok(got)
}

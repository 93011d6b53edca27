//! The sequencer's transaction pool.
//!
//! What it owns, in the order a transaction from `eth_sendRawTransaction` meets it:
//!
//! 1. [`decode_and_recover`]: the checks that need no state (size, EIP-2718 decoding, type,
//!    chain id, fee fields, gas limit against the block's, intrinsic gas by revm's own rules)
//!    and sender recovery through libsecp256k1. [`Recoverer`] runs it on a bounded pool of
//!    threads behind a bounded queue, so the RPC threads never do elliptic-curve work and a
//!    flood gets "busy" instead of an ever longer queue.
//! 2. [`TxPool::add`]: the checks against the head state (nonce, balance, base fee, minimum tip)
//!    and the per-sender nonce queues: pending (a contiguous run from the account's nonce) and
//!    queued (after a gap); replacement by a fee bump and eviction of the cheapest when full,
//!    as geth does.
//! 3. [`Journal`]: the accepted transaction is appended and fdatasynced (group commit) before
//!    the node returns its hash, and replayed at start.
//! 4. [`TxPool::best`] gives the block builder the best pending transactions;
//!    [`TxPool::on_block`] and [`TxPool::remove_invalid`] tidy up after it.
//!
//! What it must not do: execute transactions, read state behind the caller's back (state comes
//! through [`HeadAccounts`], read outside the pool's lock), or hold anything unbounded (the pool
//! is bounded in transactions, bytes and per sender; the queues, the broadcast channel and the
//! journal's queue are bounded; the journal's size is bounded by the node calling
//! [`Journal::rewrite`]).
//!
//! Rejections are [`TxPoolError`]s whose `Display` is the JSON-RPC message, in the words
//! Ethereum tools match on ("nonce too low: next nonce 7, tx nonce 5").
//!
//! # How the node uses it
//!
//! - `eth_sendRawTransaction`: `recoverer.recover(raw).await?`, then `pool.add(tx, &head,
//!   next_base_fee)?`, then `journal.append(tx.encoded.clone()).await?`, and only then return
//!   the hash. The order matters: the journal's rewrite relies on a transaction being in the
//!   pool before its append is queued.
//! - Each block: `pool.best(base_fee, gas_limit, max_txs)`; for a transaction the executor
//!   leaves out as invalid where it stood, `pool.remove_invalid(hash, reason)` (that one
//!   only); after the block, `pool.on_block(&tip, &senders_of_the_block, next_base_fee)`.
//! - When the journal's dead bytes (`journal.len_bytes()` minus `pool.stats().bytes`) pass a
//!   bound, `journal.start_rewrite(move || live)`, where `live` is the pool's snapshot plus
//!   the transactions of blocks not yet durable; appends go on while it runs.
//! - At start: [`Journal::open`] returns the raw transactions; recover them
//!   ([`decode_and_recover_all`]) and add them in order, ignoring "already known" (a rewrite may
//!   leave a duplicate) and "nonce too low" (a block included it).

mod config;
mod error;
mod journal;
mod metrics;
mod pool;
mod recover;
mod validate;

pub use config::PoolConfig;
pub use error::TxPoolError;
pub use journal::{Journal, JournalError, JournalMetrics, DEFAULT_QUEUE as DEFAULT_JOURNAL_QUEUE};
pub use metrics::{Metrics, ReasonLabel};
pub use pool::{AddOutcome, HeadAccounts, PoolContent, PoolStats, TxPool};
pub use recover::Recoverer;
pub use validate::{
    decode_and_recover, decode_and_recover_all, decode_and_recover_bytes, PooledTx,
};

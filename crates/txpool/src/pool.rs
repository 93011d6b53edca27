//! Per-sender nonce queues, replacement, eviction and block selection.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use alloy_primitives::{Address, Bytes, B256, U256};
use tokio::sync::broadcast;

use crate::{Metrics, PoolConfig, PooledTx, TxPoolError};

/// The least gas any transaction uses: below this, no further transaction fits a block.
const MIN_TX_GAS: u64 = 21_000;

/// An account as the head state holds it.
pub trait HeadAccounts {
    /// The account's nonce and balance (zero and zero for an account that does not exist).
    fn account(&self, address: Address) -> Result<(u64, U256), String>;
}

/// Where [`TxPool::add`] put a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddOutcome {
    /// Executable now: its nonce continues its sender's run from the account's nonce.
    Pending,
    /// Waiting for a missing nonce before it.
    Queued,
    /// It took the place of the transaction with the same sender and nonce.
    Replaced {
        /// The hash of the replaced transaction.
        old: B256,
    },
}

/// The pool's transactions by kind ([`TxPool::content`]), each sender's in nonce order.
#[derive(Debug, Default, Clone)]
pub struct PoolContent {
    /// Executable now.
    pub pending: Vec<(Address, Arc<PooledTx>)>,
    /// Waiting for a missing nonce before them.
    pub queued: Vec<(Address, Arc<PooledTx>)>,
}

/// Sizes of the pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Transactions executable now.
    pub pending: usize,
    /// Transactions waiting for a missing nonce.
    pub queued: usize,
    /// Senders with transactions in the pool.
    pub senders: usize,
    /// Bytes of encoded transactions.
    pub bytes: usize,
}

/// The order in which senders' last transactions are evicted, least valuable first: queued
/// before pending, then a fee cap below the base fee, then by effective tip, fee cap, and the
/// newest first among equals.
type TailKey = (bool, bool, u128, u128, Reverse<u64>);

#[derive(Debug)]
struct Entry {
    tx: Arc<PooledTx>,
    /// Arrival order: among equal tips the older transaction goes first.
    seq: u64,
}

#[derive(Debug)]
struct SenderQueue {
    /// The account's nonce as last read; every transaction held has a nonce at or above it.
    state_nonce: u64,
    balance: U256,
    txs: BTreeMap<u64, Entry>,
    /// The nonce after the contiguous run from `state_nonce` (the pending transactions).
    pending_end: u64,
    /// This sender's key in `Inner::tails`.
    tail: Option<TailKey>,
}

impl SenderQueue {
    fn pending_len(&self) -> usize {
        (self.pending_end - self.state_nonce) as usize
    }

    fn tail_key(&self, base_fee: u64) -> Option<TailKey> {
        let (&nonce, entry) = self.txs.last_key_value()?;
        let tip = entry.tx.effective_tip(base_fee);
        Some((
            nonce < self.pending_end,
            tip.is_some(),
            tip.unwrap_or(0),
            entry.tx.max_fee_per_gas,
            Reverse(entry.seq),
        ))
    }
}

#[derive(Debug, Default)]
struct Inner {
    by_hash: HashMap<B256, Arc<PooledTx>>,
    senders: HashMap<Address, SenderQueue>,
    /// Every sender's last transaction, cheapest first: the eviction candidates. Evicting from
    /// the tail never opens a nonce gap.
    tails: BTreeSet<(TailKey, Address)>,
    /// The base fee the keys in `tails` were computed at; rebuilt lazily when an eviction
    /// finds the base fee moved, so a block costs nothing unless the pool is full.
    tails_base_fee: u64,
    base_fee: u64,
    pending: usize,
    queued: usize,
    bytes: usize,
    next_seq: u64,
}

/// Removal counts of one sender update, for the metrics.
#[derive(Debug, Default)]
struct Removed {
    included: u64,
    unpayable: u64,
}

impl Inner {
    fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Takes `address` out of the totals and the eviction index before its queue changes;
    /// returns its pending end, to find what the change promotes.
    fn detach(&mut self, address: &Address) -> Option<u64> {
        let queue = self.senders.get_mut(address)?;
        let pending = queue.pending_len();
        self.pending -= pending;
        self.queued -= queue.txs.len() - pending;
        if let Some(key) = queue.tail.take() {
            self.tails.remove(&(key, *address));
        }
        Some(queue.pending_end)
    }

    /// Puts `address` back after its queue changed: recomputes its pending run, adds the hashes
    /// of transactions that became pending to `promoted`, and drops an empty queue.
    fn attach(
        &mut self,
        address: &Address,
        old_pending_end: Option<u64>,
        promoted: &mut Vec<B256>,
    ) {
        let Some(queue) = self.senders.get_mut(address) else {
            return;
        };
        if queue.txs.is_empty() {
            self.senders.remove(address);
            return;
        }
        let mut end = queue.state_nonce;
        for &nonce in queue.txs.range(queue.state_nonce..).map(|(nonce, _)| nonce) {
            if nonce != end {
                break;
            }
            end += 1;
        }
        let start = old_pending_end.map_or(queue.state_nonce, |old| old.max(queue.state_nonce));
        if start < end {
            promoted.extend(queue.txs.range(start..end).map(|(_, entry)| entry.tx.hash));
        }
        queue.pending_end = end;
        let pending = queue.pending_len();
        self.pending += pending;
        self.queued += queue.txs.len() - pending;
        if let Some(key) = queue.tail_key(self.tails_base_fee) {
            queue.tail = Some(key);
            self.tails.insert((key, *address));
        }
    }

    /// Removes one transaction from a detached sender's queue and from the hash index.
    fn take(&mut self, address: &Address, nonce: u64) -> Option<Arc<PooledTx>> {
        let entry = self.senders.get_mut(address)?.txs.remove(&nonce)?;
        self.by_hash.remove(&entry.tx.hash);
        self.bytes -= entry.tx.size();
        Some(entry.tx)
    }

    /// Sets a detached sender's account view and drops what it makes invalid: nonces below the
    /// account's (included) and, if `drop_unpayable`, transactions costing more than the balance.
    fn set_account(
        &mut self,
        address: &Address,
        nonce: u64,
        balance: U256,
        drop_unpayable: bool,
    ) -> Removed {
        let mut removed = Removed::default();
        let Some(queue) = self.senders.get_mut(address) else {
            return removed;
        };
        queue.state_nonce = nonce;
        queue.balance = balance;
        let stale: Vec<u64> = queue.txs.range(..nonce).map(|(n, _)| *n).collect();
        let unpayable: Vec<u64> = if drop_unpayable {
            queue
                .txs
                .range(nonce..)
                .filter(|(_, entry)| entry.tx.cost > balance)
                .map(|(n, _)| *n)
                .collect()
        } else {
            Vec::new()
        };
        for n in stale {
            if self.take(address, n).is_some() {
                removed.included += 1;
            }
        }
        for n in unpayable {
            if self.take(address, n).is_some() {
                removed.unpayable += 1;
            }
        }
        removed
    }

    fn rebuild_tails(&mut self) {
        let base_fee = self.base_fee;
        self.tails.clear();
        for (address, queue) in &mut self.senders {
            queue.tail = queue.tail_key(base_fee);
            if let Some(key) = queue.tail {
                self.tails.insert((key, *address));
            }
        }
        self.tails_base_fee = base_fee;
    }

    /// Chooses senders whose last transactions to evict so that `need_count` transactions and
    /// `need_bytes` bytes are freed, each cheaper than `new_key`; changes nothing.
    fn plan_eviction(
        &mut self,
        sender: &Address,
        new_key: TailKey,
        need_count: usize,
        need_bytes: usize,
    ) -> Result<Vec<Address>, TxPoolError> {
        if self.tails_base_fee != self.base_fee {
            self.rebuild_tails();
        }
        let mut victims = Vec::new();
        let (mut freed_count, mut freed_bytes) = (0usize, 0usize);
        for (key, victim) in &self.tails {
            if freed_count >= need_count && freed_bytes >= need_bytes {
                break;
            }
            if victim == sender {
                // Evicting the sender's own last transaction would open a gap before this one.
                continue;
            }
            if *key >= new_key {
                return Err(if key.0 && !new_key.0 {
                    TxPoolError::PoolFull
                } else {
                    TxPoolError::UnderpricedPoolFull {
                        cheapest: key.2,
                        tip: new_key.2,
                    }
                });
            }
            let size = self
                .senders
                .get(victim)
                .and_then(|queue| queue.txs.last_key_value())
                .map_or(0, |(_, entry)| entry.tx.size());
            victims.push(*victim);
            freed_count += 1;
            freed_bytes += size;
        }
        if freed_count >= need_count && freed_bytes >= need_bytes {
            Ok(victims)
        } else {
            Err(TxPoolError::PoolFull)
        }
    }

    fn evict_tail(&mut self, address: &Address, promoted: &mut Vec<B256>) -> bool {
        let old_end = self.detach(address);
        let last = self
            .senders
            .get(address)
            .and_then(|queue| queue.txs.last_key_value())
            .map(|(nonce, _)| *nonce);
        let evicted = last.and_then(|nonce| self.take(address, nonce));
        self.attach(address, old_end, promoted);
        evicted.is_some()
    }

    fn stats(&self) -> PoolStats {
        PoolStats {
            pending: self.pending,
            queued: self.queued,
            senders: self.senders.len(),
            bytes: self.bytes,
        }
    }
}

/// The sequencer's transaction pool: per-sender nonce queues of recovered transactions, with
/// geth's replacement and eviction rules, from which the block builder takes the best pending
/// transactions. Internally synchronised; every method holds the lock briefly and never while
/// reading state.
pub struct TxPool {
    config: PoolConfig,
    inner: RwLock<Inner>,
    pending_hashes: broadcast::Sender<B256>,
    metrics: Metrics,
}

impl std::fmt::Debug for TxPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxPool")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl TxPool {
    /// An empty pool.
    pub fn new(config: PoolConfig) -> Self {
        let (pending_hashes, _) = broadcast::channel(config.pending_broadcast_capacity.max(1));
        Self {
            config,
            inner: RwLock::new(Inner::default()),
            pending_hashes,
            metrics: Metrics::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    // A panic while holding the lock leaves the maps consistent between statements that matter
    // only for counts; serving on is better than taking the node down with it.
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the checks against the head state (`base_fee` is the next block's) and adds the
    /// transaction: pending if its nonce continues its sender's run, queued after a gap,
    /// replacing a pooled one with the same nonce if it raises both fees by the configured
    /// bump, evicting the cheapest senders' last transactions if the pool is full.
    pub fn add(
        &self,
        tx: PooledTx,
        state: &impl HeadAccounts,
        base_fee: u64,
    ) -> Result<AddOutcome, TxPoolError> {
        let result = self.add_checked(tx, state, base_fee);
        match &result {
            Ok(outcome) => {
                self.metrics.accepted.inc();
                if matches!(outcome, AddOutcome::Replaced { .. }) {
                    self.metrics.replaced.inc();
                }
            }
            Err(err) => self.metrics.record_rejected(err),
        }
        result
    }

    /// Adds a transaction the node accepted before a restart (replayed from the journal):
    /// the checks of [`Self::add`] except the price checks, the fee cap against the base fee
    /// and the tip against the minimum. It was given a hash, so it must come back: the base
    /// fee may have risen since (it does under load), and the pool holds a transaction whose
    /// fee cap is below the base fee until the base fee falls (block selection skips it).
    pub fn readmit(
        &self,
        tx: PooledTx,
        state: &impl HeadAccounts,
        base_fee: u64,
    ) -> Result<AddOutcome, TxPoolError> {
        let result = self.add_inner(tx, state, base_fee, false);
        if let Ok(outcome) = &result {
            self.metrics.accepted.inc();
            if matches!(outcome, AddOutcome::Replaced { .. }) {
                self.metrics.replaced.inc();
            }
        }
        result
    }

    fn add_checked(
        &self,
        tx: PooledTx,
        state: &impl HeadAccounts,
        base_fee: u64,
    ) -> Result<AddOutcome, TxPoolError> {
        self.add_inner(tx, state, base_fee, true)
    }

    fn add_inner(
        &self,
        tx: PooledTx,
        state: &impl HeadAccounts,
        base_fee: u64,
        price_checks: bool,
    ) -> Result<AddOutcome, TxPoolError> {
        if self.contains(tx.hash) {
            return Err(TxPoolError::AlreadyKnown);
        }
        let (state_nonce, balance) = state.account(tx.sender).map_err(TxPoolError::State)?;
        if tx.nonce < state_nonce {
            return Err(TxPoolError::NonceTooLow {
                next: state_nonce,
                tx: tx.nonce,
            });
        }
        if price_checks && tx.max_priority_fee_per_gas < self.config.min_priority_fee {
            return Err(TxPoolError::Underpriced {
                tip: tx.max_priority_fee_per_gas,
                min: self.config.min_priority_fee,
            });
        }
        if price_checks && tx.max_fee_per_gas < u128::from(base_fee) {
            return Err(TxPoolError::FeeCapBelowBaseFee {
                address: tx.sender,
                max_fee_per_gas: tx.max_fee_per_gas,
                base_fee,
            });
        }
        if tx.cost > balance {
            return Err(TxPoolError::InsufficientFunds {
                address: tx.sender,
                have: balance,
                want: tx.cost,
            });
        }
        let mut promoted = Vec::new();
        let outcome = {
            let mut inner = self.write();
            inner.base_fee = base_fee;
            let outcome = self.insert(&mut inner, tx, state_nonce, balance, &mut promoted);
            self.update_gauges(&inner);
            outcome?
        };
        self.announce(promoted);
        Ok(outcome)
    }

    fn insert(
        &self,
        inner: &mut Inner,
        tx: PooledTx,
        state_nonce: u64,
        balance: U256,
        promoted: &mut Vec<B256>,
    ) -> Result<AddOutcome, TxPoolError> {
        if inner.by_hash.contains_key(&tx.hash) {
            return Err(TxPoolError::AlreadyKnown);
        }
        let sender = tx.sender;
        let existing = inner.senders.get(&sender);
        // A block may have been applied between the caller's state read and this lock: keep
        // the fresher account view.
        let (state_nonce, balance) = match existing {
            Some(queue) if queue.state_nonce > state_nonce => (queue.state_nonce, queue.balance),
            _ => (state_nonce, balance),
        };
        if tx.nonce < state_nonce {
            return Err(TxPoolError::NonceTooLow {
                next: state_nonce,
                tx: tx.nonce,
            });
        }
        let window = u64::try_from(self.config.max_per_sender.max(1)).unwrap_or(u64::MAX);
        let max_nonce = state_nonce.saturating_add(window - 1);
        let pending_end = existing.map_or(state_nonce, |queue| queue.pending_end.max(state_nonce));
        if tx.nonce > max_nonce {
            return Err(TxPoolError::NonceTooHigh {
                next: pending_end,
                tx: tx.nonce,
                max: max_nonce,
            });
        }
        let old = existing
            .and_then(|queue| queue.txs.get(&tx.nonce))
            .map(|entry| Arc::clone(&entry.tx));
        if let Some(old) = &old {
            if !outbids(&tx, old, self.config.price_bump_percent) {
                return Err(TxPoolError::ReplacementUnderpriced);
            }
        }
        let earlier = existing.map_or(U256::ZERO, |queue| {
            queue
                .txs
                .range(state_nonce..tx.nonce)
                .fold(U256::ZERO, |sum, (_, entry)| {
                    sum.saturating_add(entry.tx.cost)
                })
        });
        let want = earlier.saturating_add(tx.cost);
        if want > balance {
            return Err(TxPoolError::InsufficientFunds {
                address: sender,
                have: balance,
                want,
            });
        }

        let old_size = old.as_ref().map_or(0, |old| old.size());
        let need_count =
            (inner.len() + usize::from(old.is_none())).saturating_sub(self.config.max_txs);
        let need_bytes = (inner.bytes - old_size + tx.size()).saturating_sub(self.config.max_bytes);
        if need_count > 0 || need_bytes > 0 {
            let tip = tx.effective_tip(inner.base_fee);
            let key = (
                tx.nonce <= pending_end,
                tip.is_some(),
                tip.unwrap_or(0),
                tx.max_fee_per_gas,
                Reverse(inner.next_seq),
            );
            let victims = inner.plan_eviction(&sender, key, need_count, need_bytes)?;
            for victim in victims {
                if inner.evict_tail(&victim, promoted) {
                    self.metrics.evicted.inc();
                }
            }
        }

        let old_end = inner.detach(&sender);
        let queue = inner.senders.entry(sender).or_insert_with(|| SenderQueue {
            state_nonce,
            balance,
            txs: BTreeMap::new(),
            pending_end: state_nonce,
            tail: None,
        });
        let refresh = queue.state_nonce != state_nonce || queue.balance != balance;
        if refresh {
            let removed = inner.set_account(&sender, state_nonce, balance, false);
            self.metrics.included.inc_by(removed.included);
        }
        if let Some(old) = &old {
            inner.take(&sender, old.nonce);
        }
        let tx = Arc::new(tx);
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.bytes += tx.size();
        inner.by_hash.insert(tx.hash, Arc::clone(&tx));
        if let Some(queue) = inner.senders.get_mut(&sender) {
            queue.txs.insert(
                tx.nonce,
                Entry {
                    tx: Arc::clone(&tx),
                    seq,
                },
            );
        }
        let before = promoted.len();
        inner.attach(&sender, old_end, promoted);
        let pending = inner
            .senders
            .get(&sender)
            .is_some_and(|queue| tx.nonce < queue.pending_end);
        Ok(match old {
            Some(old) => {
                if pending && !promoted[before..].contains(&tx.hash) {
                    promoted.push(tx.hash);
                }
                AddOutcome::Replaced { old: old.hash }
            }
            None if pending => AddOutcome::Pending,
            None => AddOutcome::Queued,
        })
    }

    /// The best pending transactions for a block with `base_fee`: highest effective tip first,
    /// each sender's in nonce order, until `gas_limit` (counting each transaction's gas limit)
    /// or `max_txs`. A sender whose next transaction does not fit the remaining gas, or whose
    /// fee cap is below `base_fee`, contributes nothing further to this block.
    pub fn best(&self, base_fee: u64, gas_limit: u64, max_txs: usize) -> Vec<Arc<PooledTx>> {
        #[derive(PartialEq, Eq, PartialOrd, Ord)]
        struct Candidate {
            tip: u128,
            older: Reverse<u64>,
            sender: Address,
            nonce: u64,
        }
        let inner = self.read();
        let candidate = |sender: &Address, entry: &Entry| {
            entry.tx.effective_tip(base_fee).map(|tip| Candidate {
                tip,
                older: Reverse(entry.seq),
                sender: *sender,
                nonce: entry.tx.nonce,
            })
        };
        let firsts: Vec<Candidate> = inner
            .senders
            .iter()
            .filter(|(_, queue)| queue.pending_end > queue.state_nonce)
            .filter_map(|(sender, queue)| {
                queue
                    .txs
                    .get(&queue.state_nonce)
                    .and_then(|entry| candidate(sender, entry))
            })
            .collect();
        let mut heap = BinaryHeap::from(firsts);
        let mut out = Vec::new();
        let mut remaining = gas_limit;
        while out.len() < max_txs && remaining >= MIN_TX_GAS {
            let Some(best) = heap.pop() else {
                break;
            };
            let Some(queue) = inner.senders.get(&best.sender) else {
                continue;
            };
            let Some(entry) = queue.txs.get(&best.nonce) else {
                continue;
            };
            if entry.tx.gas_limit > remaining {
                continue;
            }
            remaining -= entry.tx.gas_limit;
            out.push(Arc::clone(&entry.tx));
            let next = best.nonce + 1;
            if next < queue.pending_end {
                if let Some(next) = queue
                    .txs
                    .get(&next)
                    .and_then(|e| candidate(&best.sender, e))
                {
                    heap.push(next);
                }
            }
        }
        out
    }

    /// After a block: for each of `senders` in the pool, re-reads the account, drops what the
    /// block included (nonces below the account's) and what the balance can no longer pay,
    /// and promotes queued transactions whose gap closed. `base_fee` is the next block's.
    pub fn on_block(&self, state: &impl HeadAccounts, senders: &[Address], base_fee: u64) {
        let present: Vec<Address> = {
            let inner = self.read();
            let mut seen = HashSet::new();
            senders
                .iter()
                .filter(|address| inner.senders.contains_key(*address) && seen.insert(**address))
                .copied()
                .collect()
        };
        // State reads may touch disk: done before taking the lock.
        let accounts: Vec<(Address, u64, U256)> = present
            .into_iter()
            .filter_map(|address| match state.account(address) {
                Ok((nonce, balance)) => Some((address, nonce, balance)),
                Err(err) => {
                    tracing::warn!(%address, %err, "txpool: cannot read an account after a block");
                    None
                }
            })
            .collect();
        let mut promoted = Vec::new();
        {
            let mut inner = self.write();
            inner.base_fee = base_fee;
            for (address, nonce, balance) in accounts {
                let old_end = inner.detach(&address);
                if old_end.is_none() {
                    continue;
                }
                let removed = inner.set_account(&address, nonce, balance, true);
                self.metrics.included.inc_by(removed.included);
                self.metrics.unpayable.inc_by(removed.unpayable);
                inner.attach(&address, old_end, &mut promoted);
            }
            self.update_gauges(&inner);
        }
        self.announce(promoted);
    }

    /// Takes back one transaction that was added but could not be made durable (its journal
    /// append failed): only that one, so its sender's later transactions stay (queued behind
    /// the gap until it is sent again). Returns whether it was still in the pool: `false`
    /// when a block has already taken it (or it was replaced or evicted meanwhile).
    pub fn withdraw(&self, hash: B256) -> bool {
        let mut promoted = Vec::new();
        {
            let mut inner = self.write();
            let Some(tx) = inner.by_hash.get(&hash).cloned() else {
                return false;
            };
            let sender = tx.sender;
            let old_end = inner.detach(&sender);
            inner.take(&sender, tx.nonce);
            inner.attach(&sender, old_end, &mut promoted);
            self.update_gauges(&inner);
        }
        self.announce(promoted);
        true
    }

    /// Drops one transaction the block builder found invalid where it stood (a nonce or a
    /// balance an earlier transaction of the block changed). Its sender's later transactions
    /// stay: queued behind the gap, or pending at once when the sender's nonce moved past it
    /// (an EIP-7702 authorization that bumped the nonce makes the next one valid). Returns
    /// whether it was in the pool.
    pub fn remove_invalid(&self, hash: B256, reason: &str) -> bool {
        let removed = self.withdraw(hash);
        if removed {
            self.metrics.invalid.inc();
        }
        tracing::debug!(%hash, reason, removed, "txpool: removed an invalid transaction");
        removed
    }

    /// The pool's heap memory, estimated: each transaction's encoding, its decoded form (about
    /// as large again) and the entry around it in the pool's maps. For `/metrics`; bounded
    /// through [`PoolConfig::max_bytes`] and [`PoolConfig::max_txs`].
    pub fn memory_bytes(&self) -> usize {
        /// The pooled transaction's struct, its decoded envelope and the map entries.
        const PER_TX: usize = std::mem::size_of::<PooledTx>() + 512;
        let stats = self.stats();
        2 * stats.bytes + (stats.pending + stats.queued) * PER_TX
    }

    /// The nonce after this sender's contiguous pending run, if it has transactions here.
    pub fn pending_nonce(&self, address: Address) -> Option<u64> {
        self.read()
            .senders
            .get(&address)
            .map(|queue| queue.pending_end)
    }

    /// A pooled transaction by hash.
    pub fn get(&self, hash: B256) -> Option<Arc<PooledTx>> {
        self.read().by_hash.get(&hash).cloned()
    }

    /// Whether the pool holds this transaction.
    pub fn contains(&self, hash: B256) -> bool {
        self.read().by_hash.contains_key(&hash)
    }

    /// Transactions held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sizes of the pool.
    pub fn stats(&self) -> PoolStats {
        self.read().stats()
    }

    /// The pooled transactions of every sender (or of `from` alone), each sender's in nonce
    /// order, split into pending (executable now) and queued (after a nonce gap): what
    /// `txpool_content` and `txpool_inspect` show. Clones only the pointers, under the read
    /// lock.
    pub fn content(&self, from: Option<Address>) -> PoolContent {
        let inner = self.read();
        let mut content = PoolContent::default();
        let mut add = |address: &Address, queue: &SenderQueue| {
            for (nonce, entry) in &queue.txs {
                let list = if *nonce < queue.pending_end {
                    &mut content.pending
                } else {
                    &mut content.queued
                };
                list.push((*address, Arc::clone(&entry.tx)));
            }
        };
        match from {
            Some(address) => {
                if let Some(queue) = inner.senders.get(&address) {
                    add(&address, queue);
                }
            }
            None => {
                for (address, queue) in &inner.senders {
                    add(address, queue);
                }
            }
        }
        content
    }

    /// Every pooled transaction's encoding, each sender's in nonce order (what a journal
    /// rewrite keeps; replaying it in this order rebuilds the same queues).
    pub fn all_encoded(&self) -> Vec<Bytes> {
        let inner = self.read();
        let mut out = Vec::with_capacity(inner.len());
        for queue in inner.senders.values() {
            out.extend(queue.txs.values().map(|entry| entry.tx.encoded.clone()));
        }
        out
    }

    /// Hashes of transactions as they become pending (added or promoted). The channel is
    /// bounded; a receiver that falls behind gets `Lagged` and misses the oldest.
    pub fn subscribe_pending(&self) -> broadcast::Receiver<B256> {
        self.pending_hashes.subscribe()
    }

    /// The pool's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn announce(&self, hashes: Vec<B256>) {
        for hash in hashes {
            // No subscriber is not an error.
            let _ = self.pending_hashes.send(hash);
        }
    }

    fn update_gauges(&self, inner: &Inner) {
        let stats = inner.stats();
        self.metrics.pending.set(gauge(stats.pending));
        self.metrics.queued.set(gauge(stats.queued));
        self.metrics.senders.set(gauge(stats.senders));
        self.metrics.bytes.set(gauge(stats.bytes));
    }
}

fn gauge(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Geth's replacement rule: both the fee cap and the tip rise, each by at least `bump` percent.
fn outbids(new: &PooledTx, old: &PooledTx, bump: u64) -> bool {
    let at_least =
        |old: u128| U256::from(old) * U256::from(100u64.saturating_add(bump)) / U256::from(100u64);
    new.max_fee_per_gas > old.max_fee_per_gas
        && new.max_priority_fee_per_gas > old.max_priority_fee_per_gas
        && U256::from(new.max_fee_per_gas) >= at_least(old.max_fee_per_gas)
        && U256::from(new.max_priority_fee_per_gas) >= at_least(old.max_priority_fee_per_gas)
}

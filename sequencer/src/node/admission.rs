//! Admission: the pool's view of the tip, the nonces it answers, the transaction journal
//! (replayed at start, rewritten when it grows).

use super::*;

/// The tip's state, as the pool checks transactions against it.
pub(super) struct PoolView<'a, S>(pub(super) RevmState<'a, S>);

impl<S: crate::state::StateSource> HeadAccounts for PoolView<'_, S> {
    fn account(&self, address: Address) -> Result<(u64, U256), String> {
        match self.0.account(&address) {
            Ok(Some(a)) => Ok((a.state.nonce, a.state.balance)),
            Ok(None) => Ok((0, U256::ZERO)),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Node {
    /// Adds the journal's transactions to the pool (those a block made invalid are dropped)
    /// and rewrites the journal to what the pool kept.
    pub(super) fn replay_journal(self: &Arc<Self>, replay: Vec<Bytes>) -> Result<(), NodeError> {
        let total = replay.len();
        let mut kept = 0usize;
        let base_fee = self.next_base_fee();
        let recovered = gigas_txpool::decode_and_recover_all(
            &replay,
            self.pool.config(),
            self.config.recovery_threads,
        );
        {
            let vilmo = self.vilmo_read();
            let view = PoolView(self.head_db(&vilmo));
            for tx in recovered {
                // A rewrite can leave a transaction twice; "already known" and "nonce too
                // low" (included by a durable block) are expected here.
                let Ok(tx) = tx else { continue };
                // Readmitted without the price checks: the base fee may have risen since the
                // transaction was accepted (see `TxPool::readmit`).
                if self.pool.readmit(tx, &view, base_fee).is_ok() {
                    kept += 1;
                }
            }
        }
        let node = self.clone();
        self.journal.rewrite(move || node.pool.all_encoded())?;
        if total > 0 {
            info!(journaled = total, kept, "replayed the transaction journal");
        }
        Ok(())
    }

    /// The nonce of `address` at the producer's tip. A transaction leaves the pool when its
    /// block is sealed and shows in the head only once that block is published; the tip
    /// holds it in between.
    pub fn tip_nonce(&self, address: Address) -> Result<u64, NodeError> {
        self.with_tip(|db| Ok(db.account(&address)?.map_or(0, |a| a.state.nonce)))
    }

    /// A transaction of a block that is sealed but not yet published (it has left the pool
    /// and is not yet readable from the history), for lookups by hash in that interval.
    pub fn in_flight_transaction(&self, hash: B256) -> Option<Recovered<TxEnvelope>> {
        self.in_flight(hash).map(|(_, tx)| tx)
    }

    /// The number of the sealed, unpublished block that holds transaction `hash`.
    pub fn in_flight_block_of(&self, hash: B256) -> Option<u64> {
        self.in_flight(hash).map(|(number, _)| number)
    }

    /// The sealed, unpublished block holding transaction `hash`, and the transaction.
    fn in_flight(&self, hash: B256) -> Option<(u64, Recovered<TxEnvelope>)> {
        let pending = self
            .pending
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        // A linear scan of at most a few blocks: this lookup is rare (a hash neither in the
        // pool nor in a published block), a per-block index would be built for every block.
        pending.iter().rev().find_map(|b| {
            b.transactions
                .iter()
                .find(|tx| *tx.inner().tx_hash() == hash)
                .map(|tx| (b.number, tx.clone()))
        })
    }

    /// Whether the journal holds enough dead bytes (transactions no longer pooled: included,
    /// replaced, evicted) to be worth rewriting: more than twice the live bytes (what the pool
    /// holds) and more than 8 MiB. The journal then stays within about three times the pool.
    pub(super) fn journal_needs_rewrite(&self) -> bool {
        let live = self.pool.stats().bytes as u64;
        let dead = self.journal.len_bytes().saturating_sub(live);
        dead > (2 * live).max(8 << 20) && !self.journal.is_rewriting()
    }

    /// Starts rewriting the journal in the background to what is live: the pool, and the
    /// transactions of the blocks sealed and not yet durable (in neither the pool nor the
    /// history: a crash must find them in the journal). The pool is read first: a block sealed
    /// between the two reads is in flight at the second, and the pool forgets a block's
    /// transactions only after the block is in flight.
    pub(super) fn start_journal_rewrite(self: &Arc<Self>) {
        let node = self.clone();
        let live = move || {
            let mut live = node.pool.all_encoded();
            let in_flight = node
                .pending
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            for block in in_flight.iter() {
                live.extend(block.transactions.iter().map(|tx| {
                    Bytes::from(alloy_eips::eip2718::Encodable2718::encoded_2718(tx.inner()))
                }));
            }
            live
        };
        if let Err(e) = self.journal.start_rewrite(live) {
            warn!(error = %e, "cannot start rewriting the transaction journal; it keeps growing until a rewrite starts");
        }
    }
}

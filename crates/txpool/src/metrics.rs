//! The pool's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::TxPoolError;

/// The `reason` label of the rejection counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// [`TxPoolError::reason`].
    pub reason: &'static str,
}

/// Counters and gauges of the pool; cloning shares them (a [`crate::Recoverer`] holds a clone
/// of its pool's).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// Raw transactions given to a [`crate::Recoverer`].
    pub received: Counter,
    /// Transactions the pool took (new and replacements).
    pub accepted: Counter,
    /// Transactions refused, by [`TxPoolError::reason`].
    pub rejected: Family<ReasonLabel, Counter>,
    /// Transactions that replaced one with the same sender and nonce.
    pub replaced: Counter,
    /// Transactions evicted to make room for better-paying ones.
    pub evicted: Counter,
    /// Transactions removed after a block because the account's nonce passed them (included).
    pub included: Counter,
    /// Transactions removed after a block because their cost exceeds the sender's balance.
    pub unpayable: Counter,
    /// Transactions the block builder found invalid, with the rest of their senders'.
    pub invalid: Counter,
    /// Transactions a block may include now (each sender's contiguous run from its nonce).
    pub pending: Gauge,
    /// Transactions waiting for a missing nonce.
    pub queued: Gauge,
    /// Senders with transactions in the pool.
    pub senders: Gauge,
    /// Bytes of encoded transactions held.
    pub bytes: Gauge,
}

impl Metrics {
    /// Counts one rejection under its reason.
    pub fn record_rejected(&self, err: &TxPoolError) {
        self.rejected
            .get_or_create(&ReasonLabel {
                reason: err.reason(),
            })
            .inc();
    }

    /// Rejections counted under `reason` so far.
    pub fn rejected_count(&self, reason: &'static str) -> u64 {
        self.rejected.get_or_create(&ReasonLabel { reason }).get()
    }

    /// Registers every metric as `gigas_txpool_*`.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("gigas_txpool");
        registry.register(
            "received",
            "Raw transactions received for sender recovery",
            self.received.clone(),
        );
        registry.register(
            "accepted",
            "Transactions accepted into the pool",
            self.accepted.clone(),
        );
        registry.register(
            "rejected",
            "Transactions rejected, by reason",
            self.rejected.clone(),
        );
        registry.register(
            "replaced",
            "Transactions that replaced a pooled one by a fee bump",
            self.replaced.clone(),
        );
        registry.register(
            "evicted",
            "Transactions evicted from a full pool",
            self.evicted.clone(),
        );
        registry.register(
            "included",
            "Transactions removed because a block used their nonce",
            self.included.clone(),
        );
        registry.register(
            "unpayable",
            "Transactions removed because their cost exceeds the sender's balance",
            self.unpayable.clone(),
        );
        registry.register(
            "invalid",
            "Transactions removed because the block builder found them invalid",
            self.invalid.clone(),
        );
        registry.register(
            "pending",
            "Transactions executable now",
            self.pending.clone(),
        );
        registry.register(
            "queued",
            "Transactions waiting for a missing nonce",
            self.queued.clone(),
        );
        registry.register(
            "senders",
            "Senders with pooled transactions",
            self.senders.clone(),
        );
        registry.register("bytes", "Bytes of pooled transactions", self.bytes.clone());
    }
}

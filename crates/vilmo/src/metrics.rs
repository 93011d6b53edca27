//! Store metrics as `prometheus-client` types, for the node to register.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The store's metrics. Cloning shares the underlying values.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Bytes of log records that are still needed (current values, nullifies that still
    /// protect a file, drop records).
    pub live_bytes: Gauge,
    /// Bytes in log files that compaction could reclaim.
    pub useless_bytes: Gauge,
    /// Log files on disk.
    pub files: Gauge,
    /// Live keys.
    pub keys: Gauge,
    /// Log files compacted away.
    pub compactions: Counter,
    /// Batches committed.
    pub batches: Counter,
    /// Bytes appended to logs.
    pub bytes_written: Counter,
    /// Seconds from `commit` to durable.
    pub batch_latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            live_bytes: Gauge::default(),
            useless_bytes: Gauge::default(),
            files: Gauge::default(),
            keys: Gauge::default(),
            compactions: Counter::default(),
            batches: Counter::default(),
            bytes_written: Counter::default(),
            batch_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
        }
    }
}

impl Metrics {
    /// Registers every metric under `gigas_vilmo_*`.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_vilmo");
        sub.register(
            "live_bytes",
            "Bytes of log records still needed",
            self.live_bytes.clone(),
        );
        sub.register(
            "useless_bytes",
            "Bytes in log files that compaction could reclaim",
            self.useless_bytes.clone(),
        );
        sub.register("files", "Log files on disk", self.files.clone());
        sub.register("keys", "Live keys", self.keys.clone());
        sub.register(
            "compactions",
            "Log files compacted away",
            self.compactions.clone(),
        );
        sub.register("batches", "Batches committed", self.batches.clone());
        sub.register(
            "bytes_written",
            "Bytes appended to logs",
            self.bytes_written.clone(),
        );
        sub.register(
            "batch_latency_seconds",
            "Seconds from commit to durable",
            self.batch_latency.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_register_under_the_gigas_prefix() {
        let metrics = Metrics::default();
        metrics.batches.inc();
        metrics.live_bytes.set(42);
        metrics.batch_latency.observe(0.003);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for name in [
            "gigas_vilmo_live_bytes 42",
            "gigas_vilmo_useless_bytes",
            "gigas_vilmo_files",
            "gigas_vilmo_keys",
            "gigas_vilmo_compactions_total",
            "gigas_vilmo_batches_total 1",
            "gigas_vilmo_bytes_written_total",
            "gigas_vilmo_batch_latency_seconds_count 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}

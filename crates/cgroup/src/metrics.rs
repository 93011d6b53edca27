//! The cgroup's memory on `/metrics`, read at scrape time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::detect::CgroupRoots;
use crate::stat::MemoryStat;

/// A collector that reads this process's current cgroup ([`MemoryStat::of_self`]) on every
/// scrape and exports, without any registry prefix:
///
/// - `gigas_memory_limit_bytes` (only while a limit is in force),
/// - `gigas_cgroup_memory_usage_bytes`, `gigas_cgroup_memory_anon_bytes`,
///   `gigas_cgroup_memory_file_bytes` (gauges),
/// - `gigas_cgroup_major_faults_total` (counter).
///
/// Register it on the root registry ([`MemoryCollector::register`]) so that the names stay
/// these whatever prefix a node gives its own metrics; dashboards use them. A scrape where
/// the cgroup cannot be read exports none of them rather than failing the whole scrape.
#[derive(Debug, Clone, Default)]
pub struct MemoryCollector {
    roots: CgroupRoots,
}

impl MemoryCollector {
    /// Reads the hierarchy [`CgroupRoots::from_env`] finds.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the hierarchy `roots` finds.
    pub fn with_roots(roots: CgroupRoots) -> Self {
        Self { roots }
    }

    /// Registers a collector on `registry`, which should be the root one (no prefix).
    pub fn register(registry: &mut Registry) {
        registry.register_collector(Box::new(Self::new()));
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    let e = encoder.encode_descriptor(name, help, Some(&Unit::Bytes), metric.metric_type())?;
    metric.encode(e)
}

impl Collector for MemoryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = match MemoryStat::of_self_in(&self.roots) {
            Ok(stat) => stat,
            Err(e) => {
                tracing::debug!("cgroup memory not exported: {e}");
                return Ok(());
            }
        };
        if let Some(limit) = stat.limit {
            gauge(
                &mut encoder,
                "gigas_memory_limit",
                "The memory limit in force on this process's cgroup (its own or an ancestor's)",
                limit,
            )?;
        }
        gauge(
            &mut encoder,
            "gigas_cgroup_memory_usage",
            "Memory charged to this process's cgroup: anonymous, page cache, kernel",
            stat.usage,
        )?;
        gauge(
            &mut encoder,
            "gigas_cgroup_memory_anon",
            "Anonymous memory (heap, stacks) charged to this process's cgroup",
            stat.anon,
        )?;
        gauge(
            &mut encoder,
            "gigas_cgroup_memory_file",
            "Page cache (file pages, MDBX's map included) charged to this process's cgroup",
            stat.file,
        )?;
        let faults = ConstCounter::new(stat.major_faults);
        let e = encoder.encode_descriptor(
            "gigas_cgroup_major_faults",
            "Page faults in this process's cgroup that read from disk",
            None,
            faults.metric_type(),
        )?;
        faults.encode(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scrape(roots: CgroupRoots) -> String {
        // As a node does: its own metrics under a prefix, the collector on the root.
        let mut registry = Registry::default();
        registry
            .sub_registry_with_prefix("gigas_sequencer")
            .register(
                "head",
                "head",
                prometheus_client::metrics::gauge::Gauge::<i64>::default(),
            );
        registry.register_collector(Box::new(MemoryCollector::with_roots(roots)));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn names_and_values() {
        let root = tempfile::tempdir().unwrap();
        let memory = root.path().join("memory");
        fs::create_dir(&memory).unwrap();
        fs::write(memory.join("memory.usage_in_bytes"), "300\n").unwrap();
        fs::write(
            memory.join("memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        fs::write(
            memory.join("memory.stat"),
            "total_cache 200\ntotal_rss 100\ntotal_pgmajfault 5\n",
        )
        .unwrap();
        let text = scrape(CgroupRoots::fixed(root.path()));
        assert!(!text.contains("gigas_memory_limit_bytes"), "{text}");
        for line in [
            "gigas_cgroup_memory_usage_bytes 300",
            "gigas_cgroup_memory_anon_bytes 100",
            "gigas_cgroup_memory_file_bytes 200",
            "gigas_cgroup_major_faults_total 5",
            "# TYPE gigas_cgroup_major_faults counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        fs::write(memory.join("memory.limit_in_bytes"), "67108864\n").unwrap();
        let text = scrape(CgroupRoots::fixed(root.path()));
        assert!(
            text.lines()
                .any(|l| l == "gigas_memory_limit_bytes 67108864"),
            "{text}"
        );

        // Unreadable: the scrape still succeeds, without these metrics.
        let text = scrape(CgroupRoots::fixed(root.path().join("missing")));
        assert!(!text.contains("gigas_cgroup"), "{text}");
    }
}

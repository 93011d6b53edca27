//! Resident memory by component, for `/metrics` (`gigas_sequencer_memory_bytes{component}`).
//!
//! A node that runs for months must show where its memory goes and bound what can be bounded.
//! Each component below is either held to a flag or grows only with the chain's state (its
//! keys), which no flag could cap without refusing transactions:
//!
//! | component | what | bound |
//! |---|---|---|
//! | `txpool` | pooled transactions, decoded and encoded (estimate) | `--txpool.max-mib`, `--txpool.max-txs` |
//! | `jit_code` | compiled machine code held by the code cache | `--jit.budget-mib` |
//! | `vilmo_index` | Vilmo's in-memory index of every state key | the state's key count |
//! | `diff_key_index` | the diff writer's enumeration index of every state key | the state's key count |
//! | `trie_sparse` | the account trie held in memory across blocks' state roots | `--trie.memory-mib` |
//! | `trie_layer` | the state trie's changes since its last commit (estimate; twice that while a commit is under way, which holds a copy) | `--trie.commit-blocks`, and 256 MiB |
//! | `process_anon` | the process's anonymous resident memory (`RssAnon`) | the sum of the above and more |
//! | `unaccounted` | `process_anon` minus the components above: allocator slack, stacks, per-block buffers, caches not listed | |
//!
//! Beside them, `gigas_sequencer_threads`: each thread that allocates keeps its own allocator
//! heap, and the threads that serve RPC's blocking work are bounded
//! ([`gigas_rpc_eth::max_blocking_threads`]) for that reason. With tokio's default of 512,
//! a load of 1,000 tx/s in HTTP batches over 1M accounts grew the node to 217 threads and
//! 1.6 GiB anonymous in a minute; bounded, it held 44 threads and about 480 MiB, level.
//!
//! What the rest is, measured at 1,000 tx/s over 1M accounts with a heap profile
//! (`cargo build --release --workspace --bins --features gigas-sequencer/system-alloc`, then
//! `heaptrack gigas-sequencer ...`, killed under load so that every live allocation shows as a
//! leak): 151 MB live, of which 112 MiB was Vilmo's encode buffer, sized by the genesis batch
//! and kept for reuse (now dropped past 16 MiB), and 36 MB Vilmo's index; the live heap stayed
//! flat through the load. With the buffer gone the process holds about 380 MiB anonymous under
//! that load (was 480): the rest is the allocator keeping freed memory for reuse, not data.
//!
//! Owns the sampling only; it must not take any lock longer than a counter read (Vilmo's
//! read lock is taken for its statistics, as an RPC read takes it).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::diffs::DiffArchive;
use crate::Node;

/// The component a memory figure is for.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabel {
    /// Its name (see the module documentation).
    pub component: &'static str,
}

/// The memory gauges.
#[derive(Debug, Clone, Default)]
pub struct MemoryMetrics {
    /// Bytes by component.
    pub bytes: Family<ComponentLabel, Gauge>,
    /// The process's threads.
    pub threads: Gauge,
}

/// One sample, by component.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySample {
    /// Pooled transactions (estimate).
    pub txpool: u64,
    /// Compiled code.
    pub jit_code: u64,
    /// Vilmo's index.
    pub vilmo_index: u64,
    /// The diff writer's key index.
    pub diff_key_index: u64,
    /// The account trie held in memory.
    pub trie_sparse: u64,
    /// The state trie's changes since its last commit.
    pub trie_layer: u64,
    /// Anonymous resident memory of the process, if the kernel says.
    pub process_anon: Option<u64>,
    /// The process's threads, if the kernel says.
    pub threads: Option<u64>,
}

impl MemorySample {
    /// Takes one sample of `node` and, if given, its diff archive.
    pub fn take(node: &Node, archive: Option<&DiffArchive>) -> Self {
        let process = gigas_cgroup::ProcessMemory::read();
        let (trie_sparse, trie_layer) = node.trie_memory();
        Self {
            trie_sparse,
            trie_layer,
            txpool: node.pool().memory_bytes() as u64,
            jit_code: u64::try_from(node.jit().stats().resident_bytes.get()).unwrap_or(0),
            vilmo_index: node.vilmo_stats().index_bytes as u64,
            diff_key_index: archive
                .map(|a| u64::try_from(a.metrics().index_bytes.get()).unwrap_or(0))
                .unwrap_or(0),
            process_anon: process.map(|m| m.anon),
            threads: process.map(|m| m.threads),
        }
    }

    /// The components' sum.
    pub fn accounted(&self) -> u64 {
        self.txpool
            + self.jit_code
            + self.vilmo_index
            + self.diff_key_index
            + self.trie_sparse
            + self.trie_layer
    }
}

impl MemoryMetrics {
    /// Registers `gigas_sequencer_memory_bytes{component}`.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("gigas_sequencer");
        registry.register(
            "threads",
            "The process's threads (each allocating thread holds an allocator heap)",
            self.threads.clone(),
        );
        registry.register(
            "memory_bytes",
            "Resident memory by component (txpool, jit_code, vilmo_index, diff_key_index, \
             trie_sparse, trie_layer, process_anon, unaccounted); see \
             sequencer/src/memory.rs for each one's bound",
            self.bytes.clone(),
        );
    }

    /// Sets every gauge from `sample`.
    pub fn set(&self, sample: &MemorySample) {
        let set = |component: &'static str, value: u64| {
            self.bytes
                .get_or_create(&ComponentLabel { component })
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set("txpool", sample.txpool);
        set("jit_code", sample.jit_code);
        set("vilmo_index", sample.vilmo_index);
        set("diff_key_index", sample.diff_key_index);
        set("trie_sparse", sample.trie_sparse);
        set("trie_layer", sample.trie_layer);
        if let Some(anon) = sample.process_anon {
            set("process_anon", anon);
            set("unaccounted", anon.saturating_sub(sample.accounted()));
        }
        if let Some(threads) = sample.threads {
            self.threads.set(i64::try_from(threads).unwrap_or(i64::MAX));
        }
    }

    /// Samples once a second until the runtime stops.
    pub fn spawn_sampler(
        &self,
        runtime: &tokio::runtime::Runtime,
        node: Arc<Node>,
        archive: Option<Arc<DiffArchive>>,
    ) {
        let metrics = self.clone();
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let (node, archive) = (node.clone(), archive.clone());
                let sample = tokio::task::spawn_blocking(move || {
                    MemorySample::take(&node, archive.as_deref())
                })
                .await;
                if let Ok(sample) = sample {
                    metrics.set(&sample);
                }
            }
        });
    }
}

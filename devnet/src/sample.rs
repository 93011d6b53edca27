//! Once a second while the load runs: both nodes' heads (so the full node's lag in blocks)
//! and the memory of every process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eyre::{eyre, Result, WrapErr};
use serde::Serialize;

use crate::http::Http;
use gigas_cgroup::MemoryStat;
use gigas_fullnode::metrics::ProcessMemory as ProcMem;

/// One second's observation.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since sampling began (the load's start).
    pub t: f64,
    /// The sequencer's head (`eth_blockNumber`), asked first.
    pub sequencer_head: Option<u64>,
    /// The full node's durable head, asked right after.
    pub fullnode_head: Option<u64>,
    /// The difference: blocks the full node has not applied yet.
    pub lag_blocks: Option<u64>,
    /// The sequencer process.
    pub sequencer: Option<ProcMem>,
    /// The full node process.
    pub fullnode: Option<ProcMem>,
    /// This process: the load generator.
    pub generator: Option<ProcMem>,
    /// Bytes charged to the full node's cgroup (page cache included), where it has its own.
    pub fullnode_cgroup_bytes: Option<u64>,
}

/// What to sample.
#[derive(Debug, Clone)]
pub struct Targets {
    /// The sequencer's JSON-RPC URL.
    pub sequencer_rpc: String,
    /// The full node's JSON-RPC URL.
    pub fullnode_rpc: String,
    /// The sequencer's process id.
    pub sequencer_pid: u32,
    /// The full node's process id.
    pub fullnode_pid: u32,
    /// The full node runs in a memory cgroup of its own (its limit was applied).
    pub fullnode_limited: bool,
}

/// A running sampler.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Starts sampling `targets` now and then once a second.
    pub fn start(targets: Targets) -> Result<Self> {
        let http = Http::new(Duration::from_millis(800))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("devnet-sampler".into())
            .spawn(move || {
                let origin = Instant::now();
                let mut samples = Vec::new();
                for k in 0u32.. {
                    let due = origin + Duration::from_secs(u64::from(k));
                    while Instant::now() < due {
                        if stopped.load(Ordering::SeqCst) {
                            return samples;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    samples.push(sample(&http, &targets, origin));
                }
                samples
            })
            .wrap_err("starting the sampler")?;
        Ok(Self { stop, handle })
    }

    /// Stops sampling; every sample taken.
    pub fn finish(self) -> Result<Vec<Sample>> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .join()
            .map_err(|_| eyre!("the sampler thread panicked"))
    }
}

fn sample(http: &Http, targets: &Targets, origin: Instant) -> Sample {
    let t = origin.elapsed().as_secs_f64();
    let sequencer_head = http.block_number(&targets.sequencer_rpc).ok();
    let fullnode_head = http.block_number(&targets.fullnode_rpc).ok();
    Sample {
        t,
        sequencer_head,
        fullnode_head,
        lag_blocks: match (sequencer_head, fullnode_head) {
            (Some(s), Some(f)) => Some(s.saturating_sub(f)),
            _ => None,
        },
        sequencer: ProcMem::of(targets.sequencer_pid),
        fullnode: ProcMem::of(targets.fullnode_pid),
        generator: ProcMem::read(),
        fullnode_cgroup_bytes: targets
            .fullnode_limited
            .then(|| MemoryStat::of_pid(targets.fullnode_pid).ok())
            .flatten()
            .map(|s| s.usage),
    }
}

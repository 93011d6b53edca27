//! What a load or ramp run measured, per step and per second, as the report holds it.

use gigas_primitives::machine::Machine;
use serde::Serialize;

use super::disk;
use super::metrics::StageSplit;
use super::{Distribution, TransportKind, Workload};

/// Latency or interval percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values` (all NaN for none).
    pub fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Self {
                p50: f64::NAN,
                p90: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
            };
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let rank = (q * values.len() as f64).ceil() as usize;
            values[rank.clamp(1, values.len()) - 1]
        };
        Self {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: values[values.len() - 1],
        }
    }

    pub(super) fn quantile(values: &[f64], q: f64) -> f64 {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = (q * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }
}

/// Refusals of one reason in a step.
#[derive(Debug, Clone, Serialize)]
pub struct RefusalCount {
    /// The leading words of the node's message.
    pub reason: String,
    /// Answers with it (a retried transaction counts each time).
    pub count: u64,
    /// The pool was full or busy, or the node unreachable: retried, not a failure by itself.
    pub backpressure: bool,
    /// One full message.
    pub example: String,
}

/// CPU of one group of the node's threads.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadCpu {
    /// Thread name (trailing numbers folded to N).
    pub name: String,
    /// Cores used on average over the window.
    pub cores: f64,
}

/// One step (the whole run for `load`).
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    /// 1-based.
    pub step: usize,
    /// Target transactions per second.
    pub target_tps: f64,
    /// Seconds of sending (the measured window).
    pub seconds: f64,
    /// Seconds drawing and signing the step's transactions before it.
    pub sign_seconds: f64,
    /// Transactions sent.
    pub sent: u64,
    /// Accepted (hash returned).
    pub accepted: u64,
    /// Refused for a reason other than backpressure.
    pub rejected: u64,
    /// Still refused as full when retries ran out.
    pub gave_up: u64,
    /// Refusals by reason.
    pub refusals: Vec<RefusalCount>,
    /// Of the step's transactions, seen in a block.
    pub included: u64,
    /// Not seen in a block within the latency limit of their send.
    pub missed: u64,
    /// Sent per second over the window.
    pub submitted_tps: f64,
    /// Transactions per second of the blocks seen during the window (all of their
    /// transactions over the head time they span).
    pub included_tps: f64,
    /// Inclusion latency of the step's transactions.
    pub latency_ms: Percentiles,
    /// Time from posting a batch to the node's answer (recovery, pool, journal sync).
    pub answer_ms: Percentiles,
    /// Blocks seen during the window.
    pub blocks: u64,
    /// Time between consecutive heads during the window.
    pub block_interval_ms: Percentiles,
    /// Mean transactions per block during the window.
    pub txs_per_block: f64,
    /// The node's block production time (selection to publication) from its metrics.
    pub block_ms: Option<Percentiles>,
    /// Cores the node used on average (None: no process id).
    pub node_cpu_cores: Option<f64>,
    /// Cores this load generator used on average.
    pub generator_cpu_cores: f64,
    /// Node CPU microseconds per included transaction.
    pub node_cpu_us_per_tx: Option<f64>,
    /// Load generator CPU microseconds per sent transaction.
    pub generator_cpu_us_per_tx: f64,
    /// Cores other processes on this machine used meanwhile (busy time of the machine minus
    /// the node's and the generator's): the noise of a shared machine.
    pub other_cpu_cores: Option<f64>,
    /// Cores idle waiting for I/O meanwhile.
    pub iowait_cores: Option<f64>,
    /// The node's CPU by thread, busiest first.
    pub node_threads: Vec<ThreadCpu>,
    /// The node's block time by stage over the window.
    pub stages: Vec<StageSplit>,
    /// The `commit_history` stage by phase (`gigas_history_commit_phase_seconds`).
    pub history_phases: Vec<StageSplit>,
    /// The history indexer's time by phase (`gigas_history_index_phase_seconds`), off the
    /// durable path.
    pub index_phases: Vec<StageSplit>,
    /// Sender recovery's CPU microseconds per included transaction (the node's
    /// `txpool-recover-*` threads).
    pub recovery_us_per_tx: Option<f64>,
    /// The rate recovery alone would allow on every core of this machine
    /// (cores x 1 / `recovery_us_per_tx`): the bound to quote beside the figure.
    pub recovery_bound_tps: Option<f64>,
    /// What decoding and recovering one of this run's transactions costs on one thread of
    /// this machine through the node's own function, outside the node: the library's cost,
    /// against which `recovery_us_per_tx` shows the node's overhead.
    pub library_recovery_us: Option<f64>,
    /// Blocks durable in the history's block log and not yet in its index, at the step's
    /// end (`gigas_history_unindexed_blocks`).
    pub unindexed_blocks: Option<f64>,
    /// Diff file bytes per included transaction.
    pub diff_bytes_per_tx: Option<f64>,
    /// The state commitment's time per included transaction, µs: the diff writer's
    /// `gigas_diffs_commitment_seconds` (moving the lattice hash and signing it, on that one
    /// thread; wall time, which also counts waiting for a core).
    pub commitment_us_per_tx: Option<f64>,
    /// Its CPU per included transaction, µs (`gigas_diffs_commitment_cpu_seconds`).
    pub commitment_cpu_us_per_tx: Option<f64>,
    /// That CPU as a share of the node's CPU over the step.
    pub commitment_cpu_share: Option<f64>,
    /// Whether the step met every criterion.
    pub passed: bool,
    /// The criteria it failed.
    pub failures: Vec<String>,
}

/// One second of the run.
#[derive(Debug, Clone, Serialize)]
pub struct SecondPoint {
    /// Seconds since the run began.
    pub t: u64,
    /// The target rate then (0 between steps).
    pub target_tps: f64,
    /// Sent.
    pub submitted: u64,
    /// Accepted.
    pub accepted: u64,
    /// Refusals.
    pub rejected: u64,
    /// Included (by head arrival).
    pub included: u64,
    /// Blocks seen.
    pub blocks: u64,
    /// Latency of the transactions included in this second.
    pub latency_ms: Option<Percentiles>,
}

/// Receipts checked at the end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReceiptCheck {
    /// Asked for.
    pub checked: usize,
    /// Status 1.
    pub succeeded: usize,
    /// No receipt.
    pub missing: usize,
}

/// The run's configuration, as printed first.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    /// `load` or `ramp`.
    pub command: String,
    /// The rates.
    pub plan: String,
    /// Workload.
    pub workload: Workload,
    /// How accounts are drawn.
    pub distribution: Distribution,
    /// ERC-20 share of `mix`.
    pub erc20_share: f64,
    /// Benchmark accounts.
    pub accounts: u64,
    /// Key seed.
    pub seed: u64,
    /// Draw seed.
    pub workload_seed: u64,
    /// Block time (ms).
    pub block_time_ms: u64,
    /// Block gas limit.
    pub gas_limit: u64,
    /// HTTP or WebSocket.
    pub transport: TransportKind,
    /// Largest batch.
    pub batch: usize,
    /// Batches in flight at most.
    pub in_flight: usize,
    /// Fee cap and tip (wei).
    pub fees: (u128, u128),
    /// The node: its URL, or the binary and arguments this run started.
    pub sequencer: String,
    /// The benchmark chain's directory.
    pub genesis: String,
    /// What was measured: the checkout's git revision (with `+dirty` for local changes) and
    /// the started node binary's modification time.
    pub source: String,
    /// Pass criteria.
    pub criteria: String,
    /// The disk's sync latency where the node's data directory is made (None: not measured).
    pub disk_sync: Option<disk::DiskSync>,
}

/// What `load` and `ramp` write.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Configuration.
    pub config: RunConfig,
    /// Machine.
    pub machine: Machine,
    /// Build profile of this generator.
    pub build_profile: &'static str,
    /// Seconds the started node took to listen (genesis state written first).
    pub node_start_seconds: Option<f64>,
    /// Steps.
    pub steps: Vec<StepResult>,
    /// The target rate of the last step that passed.
    pub max_sustained_tps: Option<f64>,
    /// Why the run ended.
    pub stop_reason: String,
    /// Receipts checked.
    pub receipts: ReceiptCheck,
    /// Transactions included that this run did not send.
    pub foreign_txs: u64,
    /// Transactions sent over the whole run.
    pub sent_total: u64,
    /// Of them, seen in a block by the end of the run (after the last drain).
    pub included_total: u64,
    /// Per second.
    pub timeline: Vec<SecondPoint>,
}

impl LoadReport {
    /// The last step that passed.
    pub fn sustained_step(&self) -> Option<&StepResult> {
        self.steps.iter().rev().find(|s| s.passed)
    }
}

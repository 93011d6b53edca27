//! The load and ramp commands' flags: workloads, distributions, transports, rates.

use std::path::PathBuf;
use std::time::Duration;

use gigas_primitives::duration::parse_duration;
use serde::{Deserialize, Serialize};

/// A workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// ETH transfers, senders and receivers Zipf-Mandelbrot over the accounts.
    #[default]
    Transfers,
    /// WETH9 `transfer(to, amount)` calls, senders and receivers Zipf-Mandelbrot.
    Erc20,
    /// Both, `--erc20-share` of them ERC-20.
    Mix,
}

/// How senders and receivers are drawn among the benchmark accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Zipf-Mandelbrot (s = 1.0001, v = 2.7), the Vryx devnet's: a few hot accounts, the
    /// temporal locality a page cache lives on.
    #[default]
    Zipf,
    /// Uniform: every account as likely as any other, the worst case for a cache.
    Uniform,
}

/// How batches reach the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// HTTP POST per batch.
    Http,
    /// WebSocket messages.
    Ws,
}

/// What both commands share: the workload, the node, how to send, the pass criteria.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// The workload.
    #[arg(long, value_enum, default_value = "transfers")]
    pub workload: Workload,
    /// How senders and receivers are drawn.
    #[arg(long, value_enum, default_value = "zipf")]
    pub distribution: Distribution,
    /// Share of ERC-20 transfers in the `mix` workload.
    #[arg(long, default_value_t = 0.5)]
    pub erc20_share: f64,
    /// Benchmark accounts in the genesis (senders and receivers are drawn among them).
    #[arg(long, default_value_t = 1_000_000)]
    pub accounts: u64,
    /// Seed of the accounts' keys (the genesis's seed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seed of the draws (senders, receivers, values).
    #[arg(long, default_value_t = 42)]
    pub workload_seed: u64,
    /// The node's block time (passed to a node this run starts; with --sequencer, the block
    /// time of that node, for the interval criterion).
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    pub block_time: Duration,
    /// Block gas limit of the benchmark genesis (1 Ggas: 47,000 transfers; the dev chain's
    /// 60M would cap 250 ms blocks at 11,400 transfers per second).
    #[arg(long, default_value_t = 1_000_000_000)]
    pub gas_limit: u64,
    /// Drive this running node (http://HOST:PORT) instead of starting one. Its chain must be
    /// the benchmark genesis of --accounts and --seed (see --genesis-dir).
    #[arg(long, value_name = "URL")]
    pub sequencer: Option<String>,
    /// The node's WebSocket URL (default: --sequencer with ws://).
    #[arg(long, value_name = "URL", requires = "sequencer")]
    pub ws: Option<String>,
    /// With --sequencer: its /metrics URL, for the stage split and diff bytes.
    #[arg(long, value_name = "URL", requires = "sequencer")]
    pub metrics_url: Option<String>,
    /// With --sequencer: its process id, for its CPU time.
    #[arg(long, value_name = "PID", requires = "sequencer")]
    pub sequencer_pid: Option<u32>,
    /// The gigas-sequencer binary (default: the one beside gigas-bench).
    #[arg(long, value_name = "PATH")]
    pub sequencer_bin: Option<PathBuf>,
    /// Directory of the benchmark chain (default: target/bench-genesis/<accounts>-<seed>-gas<limit>[-erc20],
    /// built there once with `gigas-sequencer genesis`).
    #[arg(long, value_name = "DIR")]
    pub genesis_dir: Option<PathBuf>,
    /// Where the started node's data directory goes (a fresh one per run; default: the
    /// system's temporary directory).
    #[arg(long, value_name = "DIR")]
    pub datadir_root: Option<PathBuf>,
    /// Keep the started node's data directory (e.g. for `gigas-profiler fetch`).
    #[arg(long)]
    pub keep_datadir: bool,
    /// An extra argument for the started node (repeat it: --node-arg=--threads --node-arg=2).
    #[arg(long = "node-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub node_args: Vec<String>,
    /// How batches are sent: `http` (one POST per batch, kept-alive connections) or `ws`
    /// (batches over --ws-connections WebSocket connections).
    #[arg(long, value_enum, default_value = "http")]
    pub transport: TransportKind,
    /// WebSocket connections for `--transport ws`.
    #[arg(long, default_value_t = 4)]
    pub ws_connections: usize,
    /// Transactions per JSON-RPC batch at most (smaller at low rates: a batch every 10 ms).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Batches waiting for an answer at most.
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,
    /// A step fails if more than --max-missed of its transactions are not included within
    /// this long of their send.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub latency_limit: Duration,
    /// Share of a step's transactions that may miss --latency-limit.
    #[arg(long, default_value_t = 0.01)]
    pub max_missed: f64,
    /// A step fails if its block interval exceeds this many block times...
    #[arg(long, default_value_t = 2.0)]
    pub interval_factor: f64,
    /// ...at this quantile of the step's intervals (1.0: the longest one).
    #[arg(long, default_value_t = 0.9)]
    pub interval_quantile: f64,
    /// A step fails if it submits less than this share of its target rate (the node answers
    /// too slowly for --in-flight batches to carry the rate).
    #[arg(long, default_value_t = 0.98)]
    pub min_submitted: f64,
    /// Included transactions whose receipts are checked at the end (each must succeed).
    #[arg(long, default_value_t = 64)]
    pub check_receipts: usize,
    /// Mainnet fixtures holding WETH9's code (default: ../shared/data/mainnet).
    #[arg(long, value_name = "DIR")]
    pub fixtures: Option<PathBuf>,
    /// Where the report goes (default: reports/load or reports/ramp).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar (logs and tests).
    #[arg(long)]
    pub quiet: bool,
}

/// `gigas-bench load`: one rate for a duration.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Transactions per second.
    #[arg(long, default_value_t = 1_000.0)]
    pub rate: f64,
    /// How long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
}

/// `gigas-bench ramp`: rising rates until a step fails.
#[derive(Debug, Clone, clap::Args)]
pub struct RampArgs {
    /// The first step's rate (transactions per second).
    #[arg(long, default_value_t = 1_000.0)]
    pub start: f64,
    /// Each step adds this rate (unless --factor is given).
    #[arg(long, default_value_t = 1_000.0, conflicts_with = "factor")]
    pub step: f64,
    /// Each step multiplies the rate by this.
    #[arg(long)]
    pub factor: Option<f64>,
    /// Seconds per step.
    #[arg(long, default_value_t = 20.0)]
    pub step_secs: f64,
    /// Steps at most.
    #[arg(long, default_value_t = 40)]
    pub max_steps: usize,
    /// No step above this rate.
    #[arg(long, default_value_t = 200_000.0)]
    pub max_rate: f64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
}

impl RampArgs {
    /// The rate of step `k` (0-based).
    pub fn rate(&self, k: usize) -> f64 {
        match self.factor {
            Some(f) => self.start * f.powi(k as i32),
            None => self.start + self.step * k as f64,
        }
    }
}

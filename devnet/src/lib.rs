//! gigas-devnet: the whole Gigas system on one machine with one command.
//!
//! `cargo run --release -p gigas-devnet` builds (once, cached) a benchmark genesis, starts a
//! sequencer on it, a full node following it under a memory limit where the machine allows
//! one, and Prometheus where it is installed; drives signed transfers into the sequencer for a
//! minute with `gigas-bench load`'s generator while sampling both nodes once a second; then
//! prints a summary (TPS, inclusion latency, full-node lag, diff bytes per transaction, memory
//! of each process, whether the limit held), writes a report with charts, and runs the
//! profiler's report of the shipped mainnet blocks.
//!
//! The nodes run in processes of their own started from this very executable: `gigas-devnet
//! sequencer ARGS...`, `gigas-devnet fullnode ARGS...` and `gigas-devnet genesis ARGS...` are
//! hidden entry points that run `gigas-sequencer` and `gigas-fullnode` (their
//! `cli::main_with_args`), so building this one package builds everything it starts.
//!
//! Owns: orchestration (ports, the temporary directory, starting, watching and stopping the
//! processes, Ctrl-C), the once-a-second sampling of both nodes, the summary and the report.
//! Must not: contain node, load-generator or profiler logic (it calls `gigas-sequencer`,
//! `gigas-fullnode`, `gigas-bench` and `gigas-profiler`), or leave a process or a temporary
//! directory behind when it ends, normally, on an error or on Ctrl-C.
//!
//! Errors are `eyre` reports, as in `gigas-bench`: everything here ends at a person reading a
//! terminal.

#![warn(missing_docs)]

pub mod chart;
pub mod devnet;
pub mod http;
pub mod limit;
pub mod prometheus;
pub mod report;
pub mod sample;
pub mod supervisor;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// The hidden entry point that runs `gigas-sequencer`.
pub const SEQUENCER: &str = "sequencer";
/// The hidden entry point that runs `gigas-fullnode`.
pub const FULLNODE: &str = "fullnode";
/// The hidden entry point that runs `gigas-sequencer genesis` (what `gigas-bench`'s genesis
/// cache calls).
pub const GENESIS: &str = "genesis";

/// Starts the whole Gigas system on this machine for about a minute: a sequencer on a
/// benchmark genesis, a full node following it under a memory limit, Prometheus if installed,
/// and signed transfers at a steady rate; then prints a summary, writes a report with charts
/// and runs the profiler on the shipped mainnet blocks.
///
/// Everything listens on 127.0.0.1 on free ports and lives in a temporary directory removed at
/// the end (also on Ctrl-C). The benchmark genesis is built once and cached under
/// target/bench-genesis/ (about a minute for a million accounts).
///
/// The summary: transactions per second offered and included, inclusion latency p50/p90/p99
/// (send to the newHeads that carries the block), the full node's lag behind the sequencer in
/// blocks (both heads sampled once a second: median, p99, maximum), state-diff bytes per
/// transaction, the memory of each process (resident, anonymous, file-backed; the cgroup's
/// usage where limited), whether the memory limit was applied, and where the reports are.
/// The processes' logs go to OUT/logs/ (the nodes' level from GIGAS_NODE_LOG, default info).
///
/// Examples:
///   gigas-devnet                                   the default minute at 1,000 tx/s
///   gigas-devnet --rate 5000 --duration 2m         more load, longer
///   gigas-devnet --keep-running --no-profile       leave the nodes up for a wallet (Ctrl-C ends)
#[derive(Debug, Clone, Parser)]
#[command(name = "gigas-devnet", version, verbatim_doc_comment)]
pub struct Args {
    /// Signed transfers per second sent to the sequencer (the default is a safe fraction of
    /// what a 2-core machine sustains; `gigas-bench ramp` finds the maximum).
    #[arg(long, default_value_t = 1_000.0)]
    pub rate: f64,
    /// How long the load runs (e.g. 60s, 2m).
    #[arg(long, default_value = "60s", value_parser = gigas_primitives::duration::parse_duration)]
    pub duration: Duration,
    /// Benchmark accounts in the genesis; senders and receivers are drawn Zipf-Mandelbrot
    /// among them.
    #[arg(long, default_value_t = 1_000_000)]
    pub accounts: u64,
    /// Seed of the accounts' keys.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The sequencer's block time (e.g. 250ms, 1s).
    #[arg(long, default_value = "250ms", value_parser = gigas_primitives::duration::parse_duration)]
    pub block_time: Duration,
    /// Block gas limit of the genesis.
    #[arg(long, default_value_t = 1_000_000_000)]
    pub gas_limit: u64,
    /// The full node's memory limit (a cgroup: its heap and the page cache of its database
    /// count), e.g. 8GiB or 512MiB; `none` runs it unlimited.
    #[arg(long, value_name = "SIZE|none", default_value = "8GiB")]
    pub memory_limit: String,
    /// Stop if the machine allows no memory limit (default: go on without it and say so).
    #[arg(long)]
    pub memory_limit_required: bool,
    /// Where the report goes (report.md, report.json, SVG charts, the load generator's own
    /// report in load/, the processes' logs in logs/).
    #[arg(long, value_name = "DIR", default_value = "reports/devnet")]
    pub out: PathBuf,
    /// Do not run the profiler on the shipped mainnet blocks at the end.
    #[arg(long)]
    pub no_profile: bool,
    /// Where the profiler's report goes (as `gigas-profiler --out`).
    #[arg(long, value_name = "DIR", default_value = "reports/profile")]
    pub profile_out: PathBuf,
    /// Do not start Prometheus even if it is installed.
    #[arg(long)]
    pub no_prometheus: bool,
    /// The Prometheus configuration whose targets 127.0.0.1:9001 (sequencer) and
    /// 127.0.0.1:9002 (full node) are replaced by this run's ports (default:
    /// deploy/prometheus.yml of this checkout).
    #[arg(long, value_name = "FILE")]
    pub prometheus_config: Option<PathBuf>,
    /// After the summary, leave everything running (print the RPC URLs, chain id and funded
    /// keys for a wallet) until Ctrl-C.
    #[arg(long)]
    pub keep_running: bool,
    /// The benchmark genesis directory (default:
    /// target/bench-genesis/<accounts>-<seed>-gas<limit>, shared with gigas-bench).
    #[arg(long, value_name = "DIR")]
    pub genesis_dir: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `gigas-devnet` with these arguments (the first is the program name): the devnet, or
/// one of the hidden node entry points when the first argument names one.
pub fn main_with_args<I, T>(args: I) -> eyre::Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let rest = || args.iter().skip(2).cloned();
    match args.get(1).and_then(|a| a.to_str()) {
        Some(SEQUENCER) => gigas_sequencer::cli::main_with_args(
            std::iter::once(OsString::from("gigas-sequencer")).chain(rest()),
        ),
        Some(FULLNODE) => gigas_fullnode::cli::main_with_args(
            std::iter::once(OsString::from("gigas-fullnode")).chain(rest()),
        ),
        Some(GENESIS) => gigas_sequencer::cli::main_with_args(
            ["gigas-sequencer", "genesis"]
                .into_iter()
                .map(OsString::from)
                .chain(rest()),
        ),
        _ => devnet::run(&Args::parse_from(args)),
    }
}

//! `gigas-bench experiments`: the MegaETH talk's questions asked of Gigas under memory limits.
//!
//! - **keep-up**: a sequencer at the ramp's maximum sustained rate and a full node under a
//!   limit (8 GiB) on the same machine; the full node's lag in blocks, sampled four times a
//!   second from both nodes' `eth_blockNumber`, over five minutes.
//! - **memory-sweep**: one recorded stream of diffs (10M accounts) replayed in live mode (root
//!   and commit every block, the talk's live sync) under limits from 512 MiB to 8 GiB, once with
//!   Zipf-Mandelbrot accesses and once uniform: throughput against the limit, the split of
//!   time and the major faults.
//! - **execution**: the recorded blocks re-executed (the full node's `--verify-execution`) over
//!   the state under limits from 512 MiB to 8 GiB: EVM work against state loading, the misses
//!   at revm's cache and at the page cache, the mean miss penalty.
//! - **sync-modes**: batched (no root, a commit every 64 blocks) against live, with no limit and
//!   under 8 GiB, with the talk's breakdown: apply (decode, verify, read, write), merkleization
//!   (trie) and persistence (commit).
//!
//! The sweeps run `gigas-bench fullnode` (its recording, its genesis database, its replay
//! through the node's own `Applier`); a limit is a fresh memory cgroup per run
//! (`gigas-cgroup`), entered after the run's database was copied and evicted from the page
//! cache, so that every page the run reads is charged to it. Each experiment writes JSON,
//! Markdown and SVG charts under `--out/<name>/`, its configuration first.
//!
//! Must not: apply diffs or time anything itself (the full-node benchmark does), or leave a
//! process or a cgroup behind.

mod chart;
mod execution;
mod keep_up;
mod proofs;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use eyre::{eyre, Result, WrapErr};
use gigas_primitives::machine::Machine;
use serde::Serialize;

use crate::fullnode::{self, limit_label, FullnodeArgs, FullnodeReport, RunResult};
use crate::load::{parse_duration, Workload};
use crate::Table;

/// The `--workload` value the full-node benchmark takes.
fn workload_arg(w: Workload) -> &'static str {
    match w {
        Workload::Transfers => "transfers",
        Workload::Erc20 => "erc20",
        Workload::Mix => "mix",
    }
}

pub use execution::{ExecutionPoint, ExecutionReport};
pub use keep_up::KeepUpReport;
pub use proofs::{ProofReport, ProofSample};

/// One experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// A sequencer at the ramp's maximum rate, a full node under --keep-up-limit: its lag.
    KeepUp,
    /// Live apply under limits from 512 MiB to 8 GiB, Zipf and uniform.
    MemorySweep,
    /// Batched against live, with no limit and under 8 GiB.
    SyncModes,
    /// The recorded blocks re-executed over the state under limits from 512 MiB to 8 GiB:
    /// EVM work against state loading, cache misses, miss penalty.
    Execution,
}

/// `gigas-bench experiments`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExperimentsArgs {
    /// The experiments to run (all by default), in this order.
    #[arg(value_enum, default_values_t = [Experiment::KeepUp, Experiment::MemorySweep, Experiment::Execution, Experiment::SyncModes])]
    pub experiments: Vec<Experiment>,
    /// Accounts of the sweeps' state (10M: 2.8 GB in MDBX, larger than the smallest limits).
    #[arg(long, default_value_t = 10_000_000)]
    pub accounts: u64,
    /// The recorded workload of the sweeps: `transfers` (ETH: the state is accounts only) or
    /// `mix` (half WETH9 transfers: the genesis then holds a WETH9 balance slot per account,
    /// so the state has storage and execution runs contract code).
    #[arg(long, value_enum, default_value = "transfers")]
    pub workload: Workload,
    /// The sweep's memory limits.
    #[arg(long, value_delimiter = ',', default_value = "512MiB,1GiB,2GiB,8GiB")]
    pub limits: Vec<String>,
    /// Each sweep run stops after this long (a live run under 512 MiB would otherwise take
    /// hours); its figures cover the blocks applied by then.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub run_time: Duration,
    /// Loaded blocks applied before each sweep run's clock starts (the hot set into memory).
    #[arg(long, default_value_t = 8)]
    pub warmup_blocks: u64,
    /// keep-up: transactions per second offered (the ramp's maximum sustained rate over 1M
    /// accounts on this machine, issue 16: 12,000, median of four ramps).
    #[arg(long, default_value_t = 12_000.0)]
    pub keep_up_rate: f64,
    /// keep-up: accounts of the chain.
    #[arg(long, default_value_t = 1_000_000)]
    pub keep_up_accounts: u64,
    /// keep-up: how long the load runs.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub keep_up_duration: Duration,
    /// keep-up: the full node's memory limit.
    #[arg(long, default_value = "8GiB")]
    pub keep_up_limit: String,
    /// keep-up: the CPUs (e.g. `0`, `0-1`, `0,2`) the sequencer and the load generator run
    /// on; all of the machine's by default. With `--keep-up-fullnode-cpus` on the others, the
    /// follower gets cores of its own instead of what the sequencer leaves it: the issue's
    /// claim that a small machine keeps up with a larger one, on one machine.
    #[arg(long, value_name = "LIST")]
    pub keep_up_sequencer_cpus: Option<crate::cpus::CpuList>,
    /// keep-up: the CPUs the full node runs on; all of the machine's by default.
    #[arg(long, value_name = "LIST")]
    pub keep_up_fullnode_cpus: Option<crate::cpus::CpuList>,
    /// keep-up: one more argument for the full node (repeat for several, e.g.
    /// `--keep-up-fullnode-arg=--commit-interval --keep-up-fullnode-arg=8s`), to compare its
    /// settings under the same load.
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    pub keep_up_fullnode_arg: Vec<String>,
    /// keep-up: once the full node's state window holds this many blocks (its
    /// `--state-window`, 128 by default; 0: no probe), ask it once a second for
    /// `eth_getProof` at the window's oldest block, the most expensive proof it serves, and
    /// report how long each took and how many hit the execution timeout.
    #[arg(long, value_name = "BLOCKS", default_value_t = 0)]
    pub keep_up_proofs: u64,
    /// Where the reports go (one directory per experiment).
    #[arg(long, value_name = "DIR", default_value = "reports/experiments")]
    pub out: PathBuf,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Parser)]
struct FullnodeCli {
    #[command(flatten)]
    args: FullnodeArgs,
}

/// A `gigas-bench fullnode` argument list with its report in `out`, parsed as the command line
/// would be.
fn fullnode_args(argv: &[&str], out: &Path, quiet: bool) -> Result<FullnodeArgs> {
    let mut all: Vec<String> = std::iter::once("fullnode")
        .chain(argv.iter().copied())
        .map(String::from)
        .collect();
    all.extend(["--out".to_string(), out.display().to_string()]);
    if quiet {
        all.push("--quiet".to_string());
    }
    FullnodeCli::try_parse_from(&all)
        .map(|c| c.args)
        .map_err(|e| eyre!("the full-node benchmark's arguments {all:?}: {e}"))
}

/// The talk's three parts of a run's time, in seconds: apply (decode, verify, read, write,
/// the loop), merkleization (trie) and persistence (commit).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Breakdown {
    /// Decode, verify, read pages, write (and the loop around them).
    pub apply: f64,
    /// Hashing the trie.
    pub merkleization: f64,
    /// Committing.
    pub persistence: f64,
}

impl Breakdown {
    fn of(run: &RunResult) -> Self {
        let mut b = Self {
            apply: 0.0,
            merkleization: 0.0,
            persistence: 0.0,
        };
        for phase in &run.split {
            match phase.name {
                "trie" => b.merkleization += phase.seconds,
                "commit" => b.persistence += phase.seconds,
                _ => b.apply += phase.seconds,
            }
        }
        b
    }

    fn shares(&self) -> (f64, f64, f64) {
        let total = (self.apply + self.merkleization + self.persistence).max(f64::MIN_POSITIVE);
        (
            self.apply / total,
            self.merkleization / total,
            self.persistence / total,
        )
    }
}

/// One point of the memory sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// `zipf` or `uniform`.
    pub distribution: String,
    /// The limit.
    pub limit_bytes: u64,
    /// State changes per second.
    pub changes_per_second: f64,
    /// Blocks per second.
    pub blocks_per_second: f64,
    /// Blocks applied in the run's time.
    pub blocks: u64,
    /// The run applied the whole recording.
    pub complete: bool,
    /// Seconds per phase: decode, verify, read, write, trie, commit, other.
    pub split: Vec<(String, f64)>,
    /// The talk's breakdown.
    pub breakdown: Breakdown,
    /// Major faults charged to the run's cgroup while applying.
    pub major_faults: u64,
    /// Major faults per block.
    pub major_faults_per_block: f64,
    /// Peak usage of the cgroup (page cache included).
    pub peak_bytes: u64,
    /// Page cache charged at the end.
    pub file_bytes: u64,
    /// Anonymous memory at the end.
    pub anon_bytes: u64,
}

/// What the memory sweep writes.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    /// How it was run (printed first).
    pub config: Vec<(String, String)>,
    /// Machine.
    pub machine: Machine,
    /// Every point.
    pub points: Vec<SweepPoint>,
    /// Zipf: throughput at 8 GiB over throughput at 1 GiB (the target: at most 2).
    pub zipf_slowdown_1g_vs_8g: Option<f64>,
    /// Uniform: the same ratio.
    pub uniform_slowdown_1g_vs_8g: Option<f64>,
    /// The database's size on disk.
    pub state_disk_bytes: u64,
}

fn sweep_point(distribution: &str, run: &RunResult) -> Option<SweepPoint> {
    let cgroup = run.cgroup?;
    Some(SweepPoint {
        distribution: distribution.to_string(),
        limit_bytes: run.memory_limit_bytes?,
        changes_per_second: run.changes_per_second,
        blocks_per_second: run.blocks_per_second,
        blocks: run.blocks,
        complete: run.complete,
        split: run
            .split
            .iter()
            .map(|p| (p.name.to_string(), p.seconds))
            .collect(),
        breakdown: Breakdown::of(run),
        major_faults: cgroup.major_faults,
        major_faults_per_block: cgroup.major_faults as f64 / run.blocks.max(1) as f64,
        peak_bytes: cgroup.peak_bytes,
        file_bytes: cgroup.file_bytes,
        anon_bytes: cgroup.anon_bytes,
    })
}

fn slowdown(points: &[SweepPoint], distribution: &str) -> Option<f64> {
    let at = |gib: u64| {
        points
            .iter()
            .find(|p| p.distribution == distribution && p.limit_bytes == gib << 30)
            .map(|p| p.changes_per_second)
    };
    match (at(1), at(8)) {
        (Some(one), Some(eight)) if one > 0.0 => Some(eight / one),
        _ => None,
    }
}

fn memory_sweep(args: &ExperimentsArgs, out: &Path) -> Result<SweepReport> {
    let limits = args.limits.join(",");
    let run_time = format!("{}ms", args.run_time.as_millis());
    let mut points = Vec::new();
    let mut config = vec![
        (
            "state".to_string(),
            format!(
                "{} benchmark accounts (gigas-bench fullnode's genesis database); workload {}",
                args.accounts,
                workload_arg(args.workload)
            ),
        ),
        (
            "mode".to_string(),
            "live: root (MPT, alloy-trie) and a durable MDBX commit every block".to_string(),
        ),
        ("limits".to_string(), limits.clone()),
        (
            "run".to_string(),
            format!(
                "{} warm-up blocks outside the clock, then at most {:.0} s of blocks; one run per limit; each into a fresh copy of the genesis database evicted from the page cache, in a fresh memory cgroup entered before the database opens",
                args.warmup_blocks,
                args.run_time.as_secs_f64()
            ),
        ),
    ];
    let mut state_disk_bytes = 0;
    for distribution in ["zipf", "uniform"] {
        let (accounts, warmup) = (args.accounts.to_string(), args.warmup_blocks.to_string());
        let fargs = fullnode_args(
            &[
                "--accounts",
                &accounts,
                "--workload",
                workload_arg(args.workload),
                "--distribution",
                distribution,
                "--modes",
                "live",
                "--runs",
                "1",
                "--memory-limit",
                &limits,
                "--warmup-blocks",
                &warmup,
                "--max-run-time",
                &run_time,
                "--no-root-check",
                // What each limit leaves of the database in memory comes from the run, not
                // from a read-back before it.
                "--page-cache",
                "cold",
                // One database for every limit, so one page size: 4 KiB, the node's below 4
                // GiB, where the sweep's limits mostly are (`auto` would refuse the mix).
                "--page-size",
                "4096",
            ],
            &out.join(distribution),
            args.quiet,
        )?;
        println!("memory sweep, {distribution}: gigas-bench fullnode over {limits}");
        let report =
            fullnode::run(&fargs)?.ok_or_else(|| eyre!("the full-node benchmark ran no mode"))?;
        state_disk_bytes = report.genesis.disk_bytes;
        config.push((
            format!("recording ({distribution})"),
            report.config.recording.clone(),
        ));
        points.extend(
            report
                .runs
                .iter()
                .filter_map(|r| sweep_point(distribution, r)),
        );
    }
    let report = SweepReport {
        config,
        machine: Machine::current(),
        zipf_slowdown_1g_vs_8g: slowdown(&points, "zipf"),
        uniform_slowdown_1g_vs_8g: slowdown(&points, "uniform"),
        points,
        state_disk_bytes,
    };
    std::fs::create_dir_all(out).wrap_err_with(|| format!("creating {}", out.display()))?;
    for (file, draw) in [
        (
            "throughput.svg",
            chart::sweep_throughput as fn(&SweepReport, &Path) -> Result<()>,
        ),
        ("faults.svg", chart::sweep_faults),
        ("split.svg", chart::sweep_split),
    ] {
        if let Err(e) = draw(&report, &out.join(file)) {
            eprintln!("{e:#}");
        }
    }
    crate::write_report(out, "memory-sweep", &report, &sweep_markdown(&report))?;
    Ok(report)
}

fn config_lines(config: &[(String, String)]) -> String {
    config
        .iter()
        .map(|(k, v)| format!("- **{k}**: {v}\n"))
        .collect()
}

fn sweep_markdown(r: &SweepReport) -> String {
    let mut md =
        String::from("# Memory sweep: applying diffs under memory limits\n\n## Configuration\n\n");
    md += &config_lines(&r.config);
    md += &format!(
        "- **machine**: {}\n- **state on disk**: {:.2} GB\n\n",
        r.machine.describe(),
        r.state_disk_bytes as f64 / 1e9
    );
    md += "## Results\n\n";
    for (name, ratio) in [
        ("Zipf", r.zipf_slowdown_1g_vs_8g),
        ("uniform", r.uniform_slowdown_1g_vs_8g),
    ] {
        if let Some(x) = ratio {
            md += &format!(
                "- {name}: {x:.2}x slower at 1 GiB than at 8 GiB{}\n",
                if name == "Zipf" {
                    format!(
                        " (target at most 2x: {})",
                        if x <= 2.0 { "met" } else { "missed" }
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    md += "\n![throughput](throughput.svg)\n\n![split](split.svg)\n\n![faults](faults.svg)\n\n";
    let mut t = Table::new(
        "llrrrrrrrrrr",
        [
            "accesses",
            "limit",
            "changes/s",
            "blocks/s",
            "blocks",
            "apply",
            "trie",
            "commit",
            "read share",
            "major faults/block",
            "cgroup peak",
            "page cache at end",
        ],
    );
    for p in &r.points {
        let (a, m, c) = p.breakdown.shares();
        let total: f64 = p
            .split
            .iter()
            .map(|(_, s)| s)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
        let read = p
            .split
            .iter()
            .find(|(n, _)| n == "read")
            .map_or(0.0, |(_, s)| s / total);
        t.row([
            p.distribution.to_string(),
            limit_label(Some(p.limit_bytes)),
            format!("{:.0}", p.changes_per_second),
            format!("{:.2}", p.blocks_per_second),
            format!("{}{}", p.blocks, if p.complete { "" } else { " (stopped)" }),
            format!("{:.0}%", a * 100.0),
            format!("{:.0}%", m * 100.0),
            format!("{:.0}%", c * 100.0),
            format!("{:.0}%", read * 100.0),
            format!("{:.0}", p.major_faults_per_block),
            format!("{:.0} MiB", p.peak_bytes as f64 / 1048576.0),
            format!("{:.0} MiB", p.file_bytes as f64 / 1048576.0),
        ]);
    }
    md += &t.to_string();
    md
}

/// What the sync-modes experiment writes.
#[derive(Debug, Clone, Serialize)]
pub struct SyncModesReport {
    /// How it was run.
    pub config: Vec<(String, String)>,
    /// The rows: mode, limit, figures.
    pub rows: Vec<SyncModeRow>,
}

/// One mode under one limit.
#[derive(Debug, Clone, Serialize)]
pub struct SyncModeRow {
    /// The run's label.
    pub label: String,
    /// `batched` or `live`.
    pub mode: String,
    /// The limit (None: none).
    pub limit_bytes: Option<u64>,
    /// State changes per second.
    pub changes_per_second: f64,
    /// The target.
    pub target: f64,
    /// Seconds of apply, merkleization and persistence.
    pub breakdown: Breakdown,
    /// Batched: the root at the end, seconds.
    pub final_root_seconds: Option<f64>,
    /// Major faults while applying (the process's, or the cgroup's under a limit).
    pub major_faults: u64,
}

fn sync_modes(args: &ExperimentsArgs, out: &Path) -> Result<SyncModesReport> {
    let fargs = fullnode_args(
        &[
            "--accounts",
            &args.accounts.to_string(),
            "--workload",
            workload_arg(args.workload),
            "--modes",
            "batched,live",
            "--group",
            "64",
            "--runs",
            "1",
            "--memory-limit",
            "none,8GiB",
            "--page-cache",
            "cold",
            "--no-root-check",
        ],
        &out.join("fullnode"),
        args.quiet,
    )?;
    println!("sync modes: gigas-bench fullnode batched and live, no limit and 8 GiB");
    let report: FullnodeReport =
        fullnode::run(&fargs)?.ok_or_else(|| eyre!("the full-node benchmark ran no mode"))?;
    let rows: Vec<SyncModeRow> = report
        .runs
        .iter()
        .map(|r| SyncModeRow {
            label: r.label.clone(),
            mode: match r.mode {
                fullnode::Mode::Batched { .. } => "batched".into(),
                fullnode::Mode::Live { .. } => "live".into(),
            },
            limit_bytes: r.memory_limit_bytes,
            changes_per_second: r.changes_per_second,
            target: r.mode.target(),
            breakdown: Breakdown::of(r),
            final_root_seconds: r.final_root_seconds,
            major_faults: r.cgroup.map_or(r.major_faults, |c| c.major_faults),
        })
        .collect();
    let out_report = SyncModesReport {
        config: vec![
            ("state".into(), format!("{} accounts", args.accounts)),
            ("recording".into(), report.config.recording.clone()),
            (
                "runs".into(),
                "one per mode and limit, each into a fresh copy of the genesis database evicted from the page cache (cold start: with no limit too, so the two compare)".into(),
            ),
            ("statedb".into(), report.config.statedb_options.clone()),
        ],
        rows,
    };
    std::fs::create_dir_all(out).wrap_err_with(|| format!("creating {}", out.display()))?;
    if let Err(e) = chart::sync_modes(&out_report, &out.join("breakdown.svg")) {
        eprintln!("{e:#}");
    }
    crate::write_report(out, "sync-modes", &out_report, &sync_markdown(&out_report))?;
    Ok(out_report)
}

fn sync_markdown(r: &SyncModesReport) -> String {
    let mut md = String::from("# Sync modes: batched against live\n\n## Configuration\n\n");
    md += &config_lines(&r.config);
    md += "\n## Results\n\n![breakdown](breakdown.svg)\n\n";
    let mut t = Table::new(
        "llrrrrrrr",
        [
            "mode",
            "limit",
            "changes/s",
            "target",
            "apply",
            "merkleization",
            "persistence",
            "final root",
            "major faults",
        ],
    );
    for row in &r.rows {
        let (a, m, p) = row.breakdown.shares();
        t.row([
            row.mode.to_string(),
            limit_label(row.limit_bytes),
            format!("{:.0}", row.changes_per_second),
            format!(
                "{:.0} ({})",
                row.target,
                if row.changes_per_second >= row.target {
                    "met"
                } else {
                    "missed"
                }
            ),
            format!("{:.0}%", a * 100.0),
            format!("{:.0}%", m * 100.0),
            format!("{:.0}%", p * 100.0),
            row.final_root_seconds
                .map_or_else(|| "-".to_string(), |s| format!("{s:.1} s")),
            row.major_faults.to_string(),
        ]);
    }
    md += &t.to_string();
    md
}

/// Runs the experiments asked for.
pub fn run(args: &ExperimentsArgs) -> Result<()> {
    for experiment in &args.experiments {
        match experiment {
            Experiment::KeepUp => {
                let r = keep_up::run(args, &args.out.join("keep-up"))?;
                println!(
                    "keep-up: at the head after {}; from then on lag median {:.0}, p99 {:.0}, max {} blocks ({} samples); report in {}",
                    r.catch_up_seconds
                        .map_or_else(|| "never".to_string(), |t| format!("{t:.1} s")),
                    r.lag.p50,
                    r.lag.p99,
                    r.lag_max,
                    r.samples_at_head,
                    args.out.join("keep-up").display()
                );
            }
            Experiment::MemorySweep => {
                let r = memory_sweep(args, &args.out.join("memory-sweep"))?;
                println!(
                    "memory sweep: 1 GiB against 8 GiB, Zipf {:?}x, uniform {:?}x slower; report in {}",
                    r.zipf_slowdown_1g_vs_8g,
                    r.uniform_slowdown_1g_vs_8g,
                    args.out.join("memory-sweep").display()
                );
            }
            Experiment::Execution => {
                let r = execution::run(args, &args.out.join("execution"))?;
                println!(
                    "execution: {:?}x slower at the smallest limit than at the largest; report in {}",
                    r.slowdown_smallest_vs_largest,
                    args.out.join("execution").display()
                );
            }
            Experiment::SyncModes => {
                sync_modes(args, &args.out.join("sync-modes"))?;
                println!(
                    "sync modes: report in {}",
                    args.out.join("sync-modes").display()
                );
            }
        }
    }
    Ok(())
}

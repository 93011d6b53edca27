//! Experiment 3, the talk's first: execution under memory limits. The recorded blocks are
//! re-executed (`gigas-bench fullnode --verify-execution`: the full node's own re-execution)
//! over the MDBX state under each limit, and the execution time is split into EVM work and
//! state loading, with the misses at revm's cache and at the page cache and the mean miss
//! penalty (the talk, for reth: 21% and 31% missed, 6.5% of requests to the disk, 18 µs).

use std::path::Path;

use eyre::{eyre, Result, WrapErr};
use gigas_primitives::machine::Machine;
use plotters::style::{RGBColor, BLUE, GREEN, RED};
use serde::Serialize;

use super::chart::{against_limit, LimitSeries};
use super::{config_lines, fullnode_args, ExperimentsArgs};
use crate::chart::{stacked_bars, Bar};
use crate::fullnode::{self, limit_label, ExecutionFigures, RunResult};
use crate::Table;

/// One limit of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionPoint {
    /// The limit.
    pub limit_bytes: u64,
    /// The run went through the whole recording.
    pub complete: bool,
    /// What the re-execution measured.
    pub execution: ExecutionFigures,
    /// Milliseconds per block: EVM work.
    pub evm_ms_per_block: f64,
    /// Milliseconds per block: state loading.
    pub state_loading_ms_per_block: f64,
    /// Milliseconds per block: decoding the block file and recovering senders.
    pub prepare_ms_per_block: f64,
    /// Milliseconds per block: comparing receipts and changes.
    pub compare_ms_per_block: f64,
    /// Milliseconds per block: applying the diff (verify, write, commit) and the loop.
    pub apply_ms_per_block: f64,
    /// Major faults charged to the run's cgroup (all of it: execution and applying).
    pub cgroup_major_faults: u64,
    /// Peak usage of the cgroup (page cache included).
    pub peak_bytes: u64,
    /// Page cache charged at the end.
    pub file_bytes: u64,
    /// Anonymous memory at the end.
    pub anon_bytes: u64,
}

impl ExecutionPoint {
    fn of(run: &RunResult) -> Option<Self> {
        let execution = run.execution.clone()?;
        let cgroup = run.cgroup?;
        let blocks = execution.blocks.max(1) as f64;
        let ms = |s: f64| s * 1e3 / blocks;
        let apply = (run.seconds - execution.seconds).max(0.0);
        Some(Self {
            limit_bytes: run.memory_limit_bytes?,
            complete: run.complete,
            evm_ms_per_block: ms(execution.evm_seconds),
            state_loading_ms_per_block: ms(execution.state_loading_seconds),
            prepare_ms_per_block: ms(execution.prepare_seconds),
            compare_ms_per_block: ms(execution.compare_seconds),
            apply_ms_per_block: ms(apply),
            cgroup_major_faults: cgroup.major_faults,
            peak_bytes: cgroup.peak_bytes,
            file_bytes: cgroup.file_bytes,
            anon_bytes: cgroup.anon_bytes,
            execution,
        })
    }

    /// EVM work and state loading per block, in ms: what the talk calls execution.
    fn execution_ms_per_block(&self) -> f64 {
        self.evm_ms_per_block + self.state_loading_ms_per_block
    }
}

/// What the execution experiment writes.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionReport {
    /// How it was run (printed first).
    pub config: Vec<(String, String)>,
    /// Machine.
    pub machine: Machine,
    /// The database's size on disk.
    pub state_disk_bytes: u64,
    /// One point per limit, smallest first.
    pub points: Vec<ExecutionPoint>,
    /// Execution (EVM and state loading) per block at the smallest limit over that at the
    /// largest.
    pub slowdown_smallest_vs_largest: Option<f64>,
}

/// Runs the sweep and writes its report into `out`.
pub(super) fn run(args: &ExperimentsArgs, out: &Path) -> Result<ExecutionReport> {
    let limits = args.limits.join(",");
    let fargs = fullnode_args(
        &[
            "--accounts",
            &args.accounts.to_string(),
            "--workload",
            super::workload_arg(args.workload),
            "--distribution",
            "zipf",
            "--modes",
            "batched",
            "--group",
            "64",
            "--runs",
            "1",
            "--verify-execution",
            "--memory-limit",
            &limits,
            "--warmup-blocks",
            &args.warmup_blocks.to_string(),
            "--max-run-time",
            &format!("{}ms", args.run_time.as_millis()),
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
        &out.join("fullnode"),
        args.quiet,
    )?;
    println!(
        "execution under memory limits: gigas-bench fullnode --verify-execution over {limits}"
    );
    let report =
        fullnode::run(&fargs)?.ok_or_else(|| eyre!("the full-node benchmark ran no mode"))?;
    let mut points: Vec<ExecutionPoint> =
        report.runs.iter().filter_map(ExecutionPoint::of).collect();
    points.sort_by_key(|p| p.limit_bytes);
    let slowdown = match (points.first(), points.last()) {
        (Some(small), Some(large)) if points.len() > 1 && large.execution_ms_per_block() > 0.0 => {
            Some(small.execution_ms_per_block() / large.execution_ms_per_block())
        }
        _ => None,
    };
    let r = ExecutionReport {
        config: vec![
            (
                "state".to_string(),
                format!(
                    "{} accounts and {} storage slots{}, {:.2} GB in MDBX",
                    report.genesis.accounts,
                    report.genesis.slots,
                    if report.genesis.slots == 0 {
                        " (the recording's ETH transfers touch accounts only)"
                    } else {
                        ""
                    },
                    report.genesis.disk_bytes as f64 / 1e9
                ),
            ),
            ("recording".to_string(), report.config.recording.clone()),
            (
                "mode".to_string(),
                "historical-style apply (batched: no root while applying, a commit every 64 blocks), each block re-executed with gigas_fullnode::reexec (sequential revm over revm's CacheDB over the state) before its diff is verified and written, and checked against the block file's receipts, the header and the diff".to_string(),
            ),
            ("limits".to_string(), limits.clone()),
            (
                "run".to_string(),
                format!(
                    "{} warm-up blocks (re-executed and applied) outside the clock, then at most {:.0} s of blocks; one run per limit, each into a fresh copy of the genesis database evicted from the page cache, in a fresh memory cgroup entered before the database opens",
                    args.warmup_blocks,
                    args.run_time.as_secs_f64()
                ),
            ),
            (
                "cache levels".to_string(),
                "level 1: revm's CacheDB per block (an access is a request of revm's journal; a miss, a read of the database); level 2: the page cache under MDBX's map (a miss is a read that took a major fault on the executing thread, getrusage(RUSAGE_THREAD) around each read); miss penalty: mean time of a faulting read minus that of a clean one".to_string(),
            ),
            ("statedb".to_string(), report.config.statedb_options.clone()),
        ],
        machine: Machine::current(),
        state_disk_bytes: report.genesis.disk_bytes,
        points,
        slowdown_smallest_vs_largest: slowdown,
    };
    std::fs::create_dir_all(out).wrap_err_with(|| format!("creating {}", out.display()))?;
    for (file, draw) in [
        (
            "split.svg",
            split_chart as fn(&ExecutionReport, &Path) -> Result<()>,
        ),
        ("misses.svg", misses_chart),
        ("penalty.svg", penalty_chart),
    ] {
        if let Err(e) = draw(&r, &out.join(file)) {
            eprintln!("{e:#}");
        }
    }
    crate::write_report(out, "execution", &r, &markdown(&r))?;
    Ok(r)
}

fn split_chart(r: &ExecutionReport, file: &Path) -> Result<()> {
    let bars: Vec<Bar> = r
        .points
        .iter()
        .map(|p| Bar {
            label: limit_label(Some(p.limit_bytes)),
            parts: vec![
                ("EVM".to_string(), p.evm_ms_per_block),
                ("state loading".to_string(), p.state_loading_ms_per_block),
                ("prepare (senders)".to_string(), p.prepare_ms_per_block),
                ("compare".to_string(), p.compare_ms_per_block),
                ("apply the diff".to_string(), p.apply_ms_per_block),
            ],
        })
        .collect();
    stacked_bars(
        file,
        "a re-executed block's time under each memory limit",
        "milliseconds per block",
        &bars,
    )
}

fn series(
    r: &ExecutionReport,
    name: &str,
    color: RGBColor,
    value: fn(&ExecutionPoint) -> Option<f64>,
) -> LimitSeries {
    (
        name.to_string(),
        color,
        r.points
            .iter()
            .filter_map(|p| Some((p.limit_bytes, value(p)?)))
            .collect(),
    )
}

fn misses_chart(r: &ExecutionReport, file: &Path) -> Result<()> {
    against_limit(
        file,
        "cache misses of re-execution against the memory limit",
        "percent",
        vec![
            series(r, "level 1 (revm cache): reads / accesses", BLUE, |p| {
                Some(p.execution.level1_miss_ratio * 100.0)
            }),
            series(
                r,
                "level 2 (page cache): faulting reads / reads",
                RED,
                |p| Some(p.execution.level2_miss_ratio * 100.0),
            ),
            series(r, "to the disk: faulting reads / accesses", GREEN, |p| {
                Some(p.execution.disk_ratio * 100.0)
            }),
        ],
    )
}

fn penalty_chart(r: &ExecutionReport, file: &Path) -> Result<()> {
    against_limit(
        file,
        "state reads: miss penalty and clean read against the memory limit",
        "microseconds",
        vec![
            series(r, "miss penalty (faulting read - clean read)", RED, |p| {
                p.execution.miss_penalty_us
            }),
            series(r, "clean read", BLUE, |p| Some(p.execution.clean_read_us)),
        ],
    )
}

fn markdown(r: &ExecutionReport) -> String {
    let mut md = String::from("# Execution under memory limits\n\n## Configuration\n\n");
    md += &config_lines(&r.config);
    md += &format!(
        "- **machine**: {}\n- **state on disk**: {:.2} GB\n\n## Results\n\n",
        r.machine.describe(),
        r.state_disk_bytes as f64 / 1e9
    );
    if let (Some(x), Some(small), Some(large)) = (
        r.slowdown_smallest_vs_largest,
        r.points.first(),
        r.points.last(),
    ) {
        md += &format!(
            "- execution (EVM work and state loading) per block is {x:.2}x slower under {} than under {} (the talk, reth's historical sync: under 2x between 8 GB and 512 GB)\n",
            limit_label(Some(small.limit_bytes)),
            limit_label(Some(large.limit_bytes))
        );
    }
    md += "- the talk, for reth: 21% of requests missed its cache, 31% of those missed the page cache (6.5% to the disk), mean miss penalty 18 µs\n\n";
    md += "![split](split.svg)\n\n![misses](misses.svg)\n\n![penalty](penalty.svg)\n\n";
    let mut t = Table::new(
        "lrrrlrrrllrrrrrr",
        [
            "limit",
            "blocks",
            "Mgas/s (EVM + loading)",
            "EVM ms/block",
            "state loading ms/block (share)",
            "prepare ms/block",
            "apply ms/block",
            "accesses",
            "level-1 misses",
            "level-2 misses",
            "to the disk",
            "clean read µs",
            "faulting read µs",
            "miss penalty µs",
            "major faults (cgroup)",
            "cgroup peak",
        ],
    );
    let or_dash = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    for p in &r.points {
        let e = &p.execution;
        t.row([
            limit_label(Some(p.limit_bytes)),
            format!("{}{}", e.blocks, if p.complete { "" } else { " (stopped)" }),
            format!("{:.0}", e.gas_per_second / 1e6),
            format!("{:.1}", p.evm_ms_per_block),
            format!(
                "{:.1} ({:.0}%)",
                p.state_loading_ms_per_block,
                e.state_loading_share * 100.0
            ),
            format!("{:.1}", p.prepare_ms_per_block),
            format!("{:.1}", p.apply_ms_per_block),
            e.accesses.to_string(),
            format!("{:.1}% ({})", e.level1_miss_ratio * 100.0, e.reads),
            format!("{:.1}% ({})", e.level2_miss_ratio * 100.0, e.faulting_reads),
            format!("{:.2}%", e.disk_ratio * 100.0),
            format!("{:.2}", e.clean_read_us),
            or_dash(e.faulting_read_us),
            or_dash(e.miss_penalty_us),
            p.cgroup_major_faults.to_string(),
            format!("{:.0} MiB", p.peak_bytes as f64 / 1048576.0),
        ]);
    }
    md += &t.to_string();
    md += "\nRequests by kind (accesses / reads / faulting reads), per limit:\n\n";
    for p in &r.points {
        let kinds: Vec<String> = p
            .execution
            .kinds
            .iter()
            .filter(|k| k.accesses > 0)
            .map(|k| {
                format!(
                    "{} {} / {} / {}",
                    k.kind, k.accesses, k.reads, k.faulting_reads
                )
            })
            .collect();
        md += &format!(
            "- {}: {}\n",
            limit_label(Some(p.limit_bytes)),
            kinds.join("; ")
        );
    }
    md
}

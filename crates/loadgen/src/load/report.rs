//! What a run prints and writes: the configuration first, a line per step, then JSON,
//! Markdown and SVG charts.

use std::fmt::Write as _;
use std::path::Path;

use eyre::Result;
use gigas_primitives::machine::Machine;
use gigas_report::Table;

use super::metrics::StageSplit;
use super::{chart, LoadReport, RunConfig, StepResult, TransportKind, Workload};

/// Other processes above a quarter of a core took CPU the node could have used: say so
/// beside the verdict, since the figure is then the machine's, not the node's.
fn shared_note(s: &StepResult) -> String {
    match s.other_cpu_cores {
        Some(c) if c > 0.25 => format!(" (machine shared: other processes used {c:.2} cores)"),
        _ => String::new(),
    }
}

fn transport_name(c: &RunConfig) -> &'static str {
    match c.transport {
        TransportKind::Http => "HTTP",
        TransportKind::Ws => "WebSocket",
    }
}

/// How a distribution reads in a report.
pub fn distribution_label(d: super::Distribution) -> String {
    match d {
        super::Distribution::Zipf => format!(
            "Zipf-Mandelbrot (s = {}, v = {})",
            crate::zipf::DEVNET_S,
            crate::zipf::DEVNET_V
        ),
        super::Distribution::Uniform => "uniform".to_string(),
    }
}

pub(crate) fn print_config(c: &RunConfig, machine: &Machine, build_profile: &str) {
    println!("gigas-bench {} configuration", c.command);
    println!(
        "  workload   : {:?}{}; senders and receivers {} over {} accounts of seed {}; draws seeded {}",
        c.workload,
        if c.workload == Workload::Mix {
            format!(" ({:.0}% ERC-20)", c.erc20_share * 100.0)
        } else {
            String::new()
        },
        distribution_label(c.distribution),
        c.accounts,
        c.seed,
        c.workload_seed
    );
    println!("  rates      : {}", c.plan);
    println!(
        "  chain      : block time {} ms, gas limit {}; EIP-1559 txs, fee cap {} gwei, tip {} gwei",
        c.block_time_ms,
        c.gas_limit,
        c.fees.0 / 1_000_000_000,
        c.fees.1 / 1_000_000_000
    );
    println!(
        "  sending    : JSON-RPC batches over {} of at most {} txs, at most {} in flight; inclusion from newHeads over WebSocket",
        transport_name(c), c.batch, c.in_flight
    );
    println!("  node       : {}", c.sequencer);
    println!("  genesis    : {}", c.genesis);
    println!("  source     : {}", c.source);
    println!("  criteria   : {}", c.criteria);
    if let Some(d) = &c.disk_sync {
        println!(
            "  disk       : {} (where the node's data directory is made)",
            d.describe()
        );
    }
    println!(
        "  build      : {build_profile}; machine: {}; the load generator runs on the same machine",
        machine.describe()
    );
}

/// "; recovery N µs/tx, bound M tx/s on C cores" for a step whose node reported its threads.
fn recovery_note(s: &StepResult) -> String {
    match (s.recovery_us_per_tx, s.recovery_bound_tps) {
        (Some(us), Some(bound)) => format!(
            "; sender recovery {us:.0} µs/tx{}, so at most {bound:.0} tx/s on this machine's {} cores",
            s.library_recovery_us
                .map_or(String::new(), |lib| format!(" (the library alone: {lib:.0} µs/tx)")),
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        _ => String::new(),
    }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "-".to_string(),
    }
}

pub(crate) fn print_step(s: &StepResult) {
    println!(
        "step {}: target {:.0}/s, sent {:.0}/s, included {:.0}/s; latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; answers p99 {:.0} ms; block interval p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms; node {} cores, generator {:.2} cores, other processes {} cores; {}",
        s.step,
        s.target_tps,
        s.submitted_tps,
        s.included_tps,
        s.latency_ms.p50,
        s.latency_ms.p99,
        s.latency_ms.max,
        s.answer_ms.p99,
        s.block_interval_ms.p50,
        s.block_interval_ms.p90,
        s.block_interval_ms.max,
        fmt_opt(s.node_cpu_cores, 2),
        s.generator_cpu_cores,
        fmt_opt(s.other_cpu_cores, 2),
        if s.passed {
            "PASSED".to_string()
        } else {
            format!("FAILED: {}", s.failures.join("; "))
        } + &shared_note(s)
    );
}

pub(crate) fn write_report(r: &LoadReport, out: &Path) -> Result<()> {
    let name = &r.config.command;
    let mut charts = vec![
        (
            format!("{name}-tps.svg"),
            chart::tps(r, &out.join(format!("{name}-tps.svg"))),
        ),
        (
            format!("{name}-latency.svg"),
            chart::latency(r, &out.join(format!("{name}-latency.svg"))),
        ),
    ];
    if r.steps.len() > 1 {
        charts.push((
            format!("{name}-steps.svg"),
            chart::steps(r, &out.join(format!("{name}-steps.svg"))),
        ));
    }
    let mut drawn = Vec::new();
    for (file, result) in charts {
        match result {
            Ok(()) => drawn.push(file),
            Err(e) => eprintln!("chart {file}: {e}"),
        }
    }
    gigas_report::write_report(out, name, r, &markdown(r, &drawn))?;
    println!("charts: {}", drawn.join(", "));
    Ok(())
}

/// The report as Markdown: headline, steps, where the node's time went at the edge.
pub fn markdown(r: &LoadReport, charts: &[String]) -> String {
    let c = &r.config;
    let mut md = format!(
        "# gigas-bench {}: {:?} over {} accounts\n\n",
        c.command, c.workload, c.accounts
    );
    let _ = writeln!(md, "- rates: {}", c.plan);
    let _ = writeln!(
        md,
        "- chain: block time {} ms, gas limit {}; node: {}",
        c.block_time_ms, c.gas_limit, c.sequencer
    );
    let _ = writeln!(
        md,
        "- sending: JSON-RPC batches over {} of at most {}, at most {} in flight; latency = newHeads arrival - first send",
        transport_name(c), c.batch, c.in_flight
    );
    let _ = writeln!(md, "- criteria: {}", c.criteria);
    let _ = writeln!(md, "- source: {}", c.source);
    if let Some(d) = &c.disk_sync {
        let _ = writeln!(
            md,
            "- disk: {} (where the node's data directory is made)",
            d.describe()
        );
    }
    let _ = writeln!(
        md,
        "- machine: {}; build: {}; load generator on the same machine{}",
        r.machine.describe(),
        r.build_profile,
        r.node_start_seconds.map_or(String::new(), |s| format!(
            "; node start (genesis written) {s:.1} s"
        ))
    );
    match r.sustained_step() {
        Some(s) if c.command == "ramp" => {
            let _ = writeln!(
                md,
                "\n**Maximum sustained: {:.0} tx/s** (included {:.0} tx/s; latency p50 {:.0} ms, p99 {:.0} ms; block interval p50 {:.0} ms{}). Stopped: {}.",
                s.target_tps, s.included_tps, s.latency_ms.p50, s.latency_ms.p99, s.block_interval_ms.p50,
                recovery_note(s),
                r.stop_reason
            );
        }
        Some(s) => {
            let _ = writeln!(
                md,
                "\n**{:.0} tx/s held**: included {:.0} tx/s; latency p50 {:.0} ms, p99 {:.0} ms.",
                s.target_tps, s.included_tps, s.latency_ms.p50, s.latency_ms.p99
            );
        }
        None => {
            let _ = writeln!(md, "\n**No step passed.** {}", r.stop_reason);
        }
    }
    let _ = writeln!(
        md,
        "\nReceipts checked: {} of {} succeeded ({} missing).",
        r.receipts.succeeded, r.receipts.checked, r.receipts.missing
    );
    let mut steps = Table::new(
        "rrrrlllrlrrrrrlrrrrl",
        [
            "step",
            "target/s",
            "sent/s",
            "included/s",
            "latency p50 / p90 / p99 / max ms",
            "batch answer p50 / p99 ms",
            "block interval p50 / p90 / max ms",
            "txs/block",
            "node block ms p50 / p99",
            "node CPU cores",
            "node µs/tx",
            "generator CPU cores",
            "other processes' CPU cores",
            "iowait cores",
            "recovery µs/tx (bound tx/s)",
            "unindexed blocks",
            "diff B/tx",
            "commitment µs/tx wall / CPU (CPU share of node)",
            "refused",
            "result",
        ],
    );
    for s in &r.steps {
        let refused: u64 = s.refusals.iter().map(|x| x.count).sum();
        let l = &s.latency_ms;
        let b = &s.block_interval_ms;
        steps.row([
            s.step.to_string(),
            format!("{:.0}", s.target_tps),
            format!("{:.0}", s.submitted_tps),
            format!("{:.0}", s.included_tps),
            format!("{:.0} / {:.0} / {:.0} / {:.0}", l.p50, l.p90, l.p99, l.max),
            format!("{:.0} / {:.0}", s.answer_ms.p50, s.answer_ms.p99),
            format!("{:.0} / {:.0} / {:.0}", b.p50, b.p90, b.max),
            format!("{:.0}", s.txs_per_block),
            s.block_ms
                .map_or("-".to_string(), |b| format!("{:.0} / {:.0}", b.p50, b.p99)),
            fmt_opt(s.node_cpu_cores, 2),
            fmt_opt(s.node_cpu_us_per_tx, 0),
            format!("{:.2}", s.generator_cpu_cores),
            fmt_opt(s.other_cpu_cores, 2),
            fmt_opt(s.iowait_cores, 2),
            match (s.recovery_us_per_tx, s.recovery_bound_tps) {
                (Some(us), Some(bound)) => format!("{us:.0} ({bound:.0})"),
                _ => "-".to_string(),
            },
            fmt_opt(s.unindexed_blocks, 0),
            fmt_opt(s.diff_bytes_per_tx, 1),
            match (
                s.commitment_us_per_tx,
                s.commitment_cpu_us_per_tx,
                s.commitment_cpu_share,
            ) {
                (Some(wall), Some(cpu), Some(share)) => {
                    format!("{wall:.2} / {cpu:.2} ({:.2} %)", share * 100.0)
                }
                (Some(wall), Some(cpu), None) => format!("{wall:.2} / {cpu:.2}"),
                (Some(wall), None, _) => format!("{wall:.2} / -"),
                _ => "-".to_string(),
            },
            refused.to_string(),
            if s.passed {
                "passed".to_string()
            } else {
                format!("**failed**: {}", s.failures.join("; "))
            } + &shared_note(s),
        ]);
    }
    let _ = write!(md, "\n{steps}");
    // The edge: the last step that passed and the one that failed after it.
    let mut edge: Vec<&StepResult> = Vec::new();
    if let Some(s) = r.sustained_step() {
        edge.push(s);
    }
    if let Some(s) = r.steps.last().filter(|s| !s.passed) {
        edge.push(s);
    }
    for s in edge {
        let _ = writeln!(
            md,
            "\n## Where the node's time went at {:.0} tx/s (step {}, {})\n",
            s.target_tps,
            s.step,
            if s.passed { "passed" } else { "failed" }
        );
        if s.stages.is_empty() {
            let _ = writeln!(md, "No metrics from the node.");
        } else {
            split_table(&mut md, "stage", true, "share of block time", &s.stages);
        }
        if !s.history_phases.is_empty() {
            let _ = writeln!(md, "\n`commit_history` by phase:\n");
            split_table(&mut md, "phase", false, "share", &s.history_phases);
        }
        if !s.index_phases.is_empty() {
            let _ = writeln!(
                md,
                "\nThe history's indexer (its own thread, off the durable path), per batch by phase; {} blocks unindexed at the step's end:\n",
                fmt_opt(s.unindexed_blocks, 0)
            );
            split_table(&mut md, "phase", false, "share", &s.index_phases);
        }
        if !s.node_threads.is_empty() {
            let _ = writeln!(
                md,
                "\nNode CPU by thread ({} cores in all; load generator {:.2} cores):\n",
                fmt_opt(s.node_cpu_cores, 2),
                s.generator_cpu_cores
            );
            let mut threads = Table::new("lr", ["thread", "cores"]);
            for t in &s.node_threads {
                threads.row([t.name.clone(), format!("{:.3}", t.cores)]);
            }
            let _ = write!(md, "{threads}");
        }
        if !s.refusals.is_empty() {
            let _ = writeln!(md, "\nRefusals:\n");
            for x in &s.refusals {
                let _ = writeln!(
                    md,
                    "- {} x {}{}: \"{}\"",
                    x.count,
                    x.reason,
                    if x.backpressure {
                        " (backpressure, retried)"
                    } else {
                        ""
                    },
                    x.example
                );
            }
        }
    }
    if !charts.is_empty() {
        let _ = writeln!(md, "\n## Charts\n");
        for c in charts {
            let _ = writeln!(md, "![{c}]({c})");
        }
    }
    md
}

/// A Markdown table of a time split: one row per stage (or phase) with its mean, p50 and p99
/// milliseconds and its share, and the blocks observed when `blocks`.
fn split_table(md: &mut String, name: &str, blocks: bool, share: &str, rows: &[StageSplit]) {
    let mut headers = vec![name];
    if blocks {
        headers.push("blocks");
    }
    headers.extend(["mean ms", "p50 ms", "p99 ms", share]);
    let mut t = Table::new(if blocks { "lrrrrr" } else { "lrrrr" }, headers);
    for row in rows {
        let mut cells = vec![row.stage.to_string()];
        if blocks {
            cells.push(row.blocks.to_string());
        }
        cells.extend([
            format!("{:.2}", row.mean_ms),
            format!("{:.2}", row.p50_ms),
            format!("{:.2}", row.p99_ms),
            format!("{:.1}%", row.share * 100.0),
        ]);
        t.row(cells);
    }
    let _ = write!(md, "{t}");
}

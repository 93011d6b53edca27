//! The summary printed at the end and the report written to `--out`: configuration first,
//! then the figures, the charts, and where everything else is.

use std::fmt::Write as _;
use std::path::Path;

use eyre::{Result, WrapErr};
use gigas_loadgen::load::{LoadReport, Percentiles, SecondPoint};
use gigas_primitives::Machine;
use gigas_report::Table;
use serde::Serialize;

use crate::limit::LimitStatus;
use crate::prometheus::PromStatus;
use crate::sample::Sample;
use gigas_fullnode::metrics::ProcessMemory as ProcMem;

/// `n` bytes for a person: B, KiB, MiB or GiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    format!("{n} B")
}

/// A Markdown link from a file in `from` to `to` (both relative to the working directory, or
/// both absolute).
pub fn link(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to_parts: Vec<_> = to.components().collect();
    let common = from
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count();
    let mut path = std::path::PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for part in &to_parts[common..] {
        path.push(part);
    }
    path.display().to_string()
}

fn opt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "-".to_string(),
    }
}

/// The run's configuration, printed and written first.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// The command line.
    pub command: String,
    /// Offered transactions per second.
    pub rate: f64,
    /// Seconds of load.
    pub duration_seconds: f64,
    /// What the load is.
    pub workload: String,
    /// Block time (ms).
    pub block_time_ms: u64,
    /// Block gas limit.
    pub gas_limit: u64,
    /// The benchmark chain's directory.
    pub genesis: String,
    /// The full node's memory limit as asked.
    pub memory_limit: String,
    /// How the processes run.
    pub processes: String,
    /// The report's directory.
    pub out: String,
    /// The profile asked for.
    pub profile: String,
    /// What was measured (git revision).
    pub source: String,
    /// Build profile.
    pub build_profile: String,
    /// The machine.
    pub machine: Machine,
}

impl Config {
    /// The configuration as printed first.
    pub fn lines(&self) -> Vec<String> {
        vec![
            "gigas-devnet configuration".to_string(),
            format!(
                "  load       : {} tx/s for {:.0} s; {}",
                self.rate, self.duration_seconds, self.workload
            ),
            format!(
                "  chain      : block time {} ms, gas limit {}; genesis {}",
                self.block_time_ms, self.gas_limit, self.genesis
            ),
            format!("  full node  : memory limit {}", self.memory_limit),
            format!("  processes  : {}", self.processes),
            format!("  report     : {}; profile: {}", self.out, self.profile),
            format!(
                "  build      : {}; {}; machine: {}; everything on this one machine",
                self.build_profile,
                self.source,
                self.machine.describe()
            ),
        ]
    }
}

/// Memory of one process over the run.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessMemory {
    /// Which process.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// At the last sample (the end of the load).
    pub end: Option<ProcMem>,
    /// The largest resident size it reached (VmHWM).
    pub peak_rss: u64,
    /// Its own cgroup's usage at the end and at most (the full node under a limit).
    pub cgroup_end_bytes: Option<u64>,
    /// The largest cgroup usage sampled.
    pub cgroup_peak_bytes: Option<u64>,
    /// The cgroup's anonymous and file-backed (page cache) bytes at the end.
    pub cgroup_anon_file: Option<(u64, u64)>,
}

impl ProcessMemory {
    fn line(&self, limit: Option<u64>) -> String {
        let mut line = match self.end {
            Some(m) => format!(
                "RSS {} (anon {}, file {}), peak {}, {} major faults",
                bytes(m.resident),
                bytes(m.anon),
                bytes(m.file),
                bytes(self.peak_rss),
                m.major_faults
            ),
            None => "not sampled".to_string(),
        };
        if let Some(usage) = self.cgroup_end_bytes {
            let _ = write!(
                line,
                "; cgroup {}{} (peak {}{})",
                bytes(usage),
                limit.map_or(String::new(), |l| format!(" of {}", bytes(l))),
                bytes(self.cgroup_peak_bytes.unwrap_or(usage)),
                self.cgroup_anon_file
                    .map_or(String::new(), |(a, f)| format!(
                        "; anon {}, page cache {}",
                        bytes(a),
                        bytes(f)
                    ))
            );
        }
        line
    }
}

/// The profile's outcome.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ProfileOutcome {
    /// `--no-profile`.
    Skipped,
    /// Written.
    Written {
        /// Its report.md.
        report: String,
    },
    /// It failed.
    Failed {
        /// Why.
        error: String,
    },
}

/// The figures.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Offered transactions per second.
    pub offered_tps: f64,
    /// Sent per second over the load's window.
    pub sent_tps: f64,
    /// Included per second (the blocks seen during the window).
    pub included_tps: f64,
    /// Transactions sent.
    pub sent: u64,
    /// Of them, seen in a block.
    pub included: u64,
    /// Refused other than for backpressure.
    pub rejected: u64,
    /// Inclusion latency (send to newHeads), ms.
    pub latency_ms: Percentiles,
    /// Block interval, ms.
    pub block_interval_ms: Percentiles,
    /// Full-node lag in blocks over the once-a-second samples from the first in which the
    /// node was at the head (within a block: the two heads are read one after the other).
    pub lag_blocks: Percentiles,
    /// Those samples.
    pub lag_samples: usize,
    /// Seconds from the load's start to that first sample: the initial catch-up (`None`:
    /// the node never reached the head while sampled, and `lag_blocks` covers every sample).
    pub lag_catch_up_seconds: Option<f64>,
    /// How the full node caught up after the load.
    pub catch_up: String,
    /// Both nodes' state compared.
    pub state_check: String,
    /// Diff bytes per included transaction (the sequencer's metrics over the window).
    pub diff_bytes_per_tx: Option<f64>,
    /// Memory of each process.
    pub memory: Vec<ProcessMemory>,
    /// The full node's memory limit.
    pub memory_limit: LimitStatus,
    /// Prometheus.
    pub prometheus: PromStatus,
    /// Its targets up, of all, at the end.
    pub prometheus_targets_up: Option<(usize, usize)>,
    /// The profile.
    pub profile: ProfileOutcome,
    /// How each process ended.
    pub stopped: Vec<String>,
    /// Seconds from start to the summary.
    pub total_seconds: f64,
}

/// Lag at which a sample counts as at the head: the two heads are read one after the other,
/// so a block may land between the reads.
const AT_HEAD_BLOCKS: u64 = 1;

impl Results {
    /// Gathers the figures.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        load: &LoadReport,
        samples: &[Sample],
        catch_up: String,
        state_check: String,
        processes: &[(&str, u32)],
        fullnode_cgroup_anon_file: Option<(u64, u64)>,
        memory_limit: LimitStatus,
        prometheus: PromStatus,
        prometheus_targets_up: Option<(usize, usize)>,
        profile: ProfileOutcome,
        stopped: Vec<String>,
        total_seconds: f64,
    ) -> Self {
        let step = load.steps.first();
        // A node started with the load is behind at first: its lag counts from the first
        // time it reaches the head, and the time until then is its catch-up.
        let reached = samples
            .iter()
            .position(|s| s.lag_blocks.is_some_and(|l| l <= AT_HEAD_BLOCKS));
        let lag_catch_up_seconds = reached.map(|i| samples[i].t);
        let lags: Vec<f64> = samples[reached.unwrap_or(0)..]
            .iter()
            .filter_map(|s| s.lag_blocks.map(|l| l as f64))
            .collect();
        let memory = processes
            .iter()
            .map(|&(name, pid)| {
                let of = |s: &Sample| match name {
                    crate::SEQUENCER => s.sequencer,
                    crate::FULLNODE => s.fullnode,
                    _ => s.generator,
                };
                let full = name == crate::FULLNODE;
                let cgroup: Vec<u64> = samples
                    .iter()
                    .filter_map(|s| s.fullnode_cgroup_bytes.filter(|_| full))
                    .collect();
                ProcessMemory {
                    name: name.to_string(),
                    pid,
                    end: samples.iter().rev().find_map(of),
                    peak_rss: samples
                        .iter()
                        .filter_map(of)
                        .map(|m| m.peak)
                        .max()
                        .unwrap_or(0),
                    cgroup_end_bytes: cgroup.last().copied(),
                    cgroup_peak_bytes: cgroup.iter().max().copied(),
                    cgroup_anon_file: fullnode_cgroup_anon_file.filter(|_| full),
                }
            })
            .collect();
        Self {
            offered_tps: step.map_or(0.0, |s| s.target_tps),
            sent_tps: step.map_or(0.0, |s| s.submitted_tps),
            included_tps: step.map_or(0.0, |s| s.included_tps),
            sent: load.sent_total,
            included: load.included_total,
            rejected: step.map_or(0, |s| s.rejected),
            latency_ms: step.map_or_else(|| Percentiles::of(Vec::new()), |s| s.latency_ms),
            block_interval_ms: step
                .map_or_else(|| Percentiles::of(Vec::new()), |s| s.block_interval_ms),
            lag_samples: lags.len(),
            lag_blocks: Percentiles::of(lags),
            lag_catch_up_seconds,
            catch_up,
            state_check,
            diff_bytes_per_tx: step.and_then(|s| s.diff_bytes_per_tx),
            memory,
            memory_limit,
            prometheus,
            prometheus_targets_up,
            profile,
            stopped,
            total_seconds,
        }
    }
}

/// What `report.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct DevnetReport {
    /// Configuration.
    pub config: Config,
    /// Figures.
    pub results: Results,
    /// The load generator's own report.
    pub load_report: String,
    /// The processes' logs.
    pub logs: String,
    /// Once a second: heads, lag, memory.
    pub samples: Vec<Sample>,
    /// Once a second: the load generator's rates and latency.
    pub timeline: Vec<SecondPoint>,
}

/// The charts: file name and what it shows.
const CHARTS: [(&str, &str); 4] = [
    ("tps.svg", "transactions per second"),
    ("latency.svg", "inclusion latency"),
    ("lag.svg", "full-node lag"),
    ("memory.svg", "memory of each process"),
];

/// Writes report.json, report.md and the charts under `out`; returns the files written.
pub fn write(r: &DevnetReport, out: &Path) -> Result<Vec<String>> {
    std::fs::create_dir_all(out).wrap_err_with(|| format!("creating {}", out.display()))?;
    let mut charts = Vec::new();
    for (file, _) in CHARTS {
        let path = out.join(file);
        let drawn = match file {
            "tps.svg" => crate::chart::tps(&r.timeline, &path),
            "latency.svg" => crate::chart::latency(&r.timeline, &path),
            "lag.svg" => crate::chart::lag(&r.samples, &path),
            _ => crate::chart::memory(&r.samples, r.results.memory_limit.applied(), &path),
        };
        match drawn {
            Ok(()) => charts.push(file.to_string()),
            Err(e) => eprintln!("chart {file}: {e:#}"),
        }
    }
    let json = out.join("report.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(r).wrap_err("serialising the report")?,
    )
    .wrap_err_with(|| format!("writing {}", json.display()))?;
    let md = out.join("report.md");
    std::fs::write(&md, r.markdown(&charts))
        .wrap_err_with(|| format!("writing {}", md.display()))?;
    let mut files = vec!["report.md".to_string(), "report.json".to_string()];
    files.extend(charts);
    Ok(files)
}

impl DevnetReport {
    fn limit_bytes(&self) -> Option<u64> {
        match &self.results.memory_limit {
            LimitStatus::Applied { limit_bytes, .. } => Some(*limit_bytes),
            _ => None,
        }
    }

    /// Prometheus as it was: the URL only means something while the devnet runs.
    fn prometheus_line(&self) -> String {
        let r = &self.results;
        let up = match r.prometheus_targets_up {
            Some((up, all)) => format!("; {up} of {all} targets up at the end of the load"),
            None => String::new(),
        };
        match &r.prometheus {
            // Stopped with the other processes (not so with --keep-running).
            PromStatus::Running { url, .. } if !r.stopped.is_empty() => {
                format!("ran at {url} while the devnet ran{up}")
            }
            other => format!("{}{up}", other.line()),
        }
    }

    fn memory_lines(&self) -> Vec<(String, String)> {
        self.results
            .memory
            .iter()
            .map(|m| {
                let limit = (m.name == crate::FULLNODE)
                    .then(|| self.limit_bytes())
                    .flatten();
                let name = match m.name.as_str() {
                    crate::SEQUENCER => "sequencer".to_string(),
                    crate::FULLNODE => "full node".to_string(),
                    other => other.to_string(),
                };
                (name, m.line(limit))
            })
            .collect()
    }

    fn headline(&self) -> Vec<(&'static str, String)> {
        let r = &self.results;
        vec![
            (
                "throughput",
                format!(
                    "offered {:.0} tx/s, sent {:.0} tx/s, included {:.0} tx/s ({} of {} sent included{})",
                    r.offered_tps,
                    r.sent_tps,
                    r.included_tps,
                    r.included,
                    r.sent,
                    if r.rejected > 0 {
                        format!(", {} refused", r.rejected)
                    } else {
                        String::new()
                    }
                ),
            ),
            (
                "latency",
                format!(
                    "p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms (send to the newHeads that carries the block; blocks every {:.0} ms at p50)",
                    r.latency_ms.p50,
                    r.latency_ms.p90,
                    r.latency_ms.p99,
                    r.latency_ms.max,
                    r.block_interval_ms.p50
                ),
            ),
            (
                "full-node lag",
                format!(
                    "median {:.0}, p99 {:.0}, max {:.0} blocks ({} samples, once a second: sequencer head minus full-node head; {})",
                    r.lag_blocks.p50,
                    r.lag_blocks.p99,
                    r.lag_blocks.max,
                    r.lag_samples,
                    match r.lag_catch_up_seconds {
                        Some(t) => format!("from the node's first sample at the head, {t:.1} s into the load"),
                        None => "every sample: the node never reached the head".into(),
                    }
                ),
            ),
            ("catch-up", r.catch_up.clone()),
            ("state", r.state_check.clone()),
            (
                "diff bytes",
                match r.diff_bytes_per_tx {
                    Some(b) => format!("{b:.1} B per transaction (the sequencer's diff files over the load's window)"),
                    None => "- (no metrics from the sequencer)".to_string(),
                },
            ),
            ("memory limit", r.memory_limit.line()),
        ]
    }

    /// The summary printed at the end.
    pub fn summary_lines(&self, out: &Path, files: &[String]) -> Vec<String> {
        let r = &self.results;
        let mut lines = vec![format!(
            "gigas-devnet summary ({:.0} s of load at {} tx/s, {:.0} s in all)",
            self.config.duration_seconds, self.config.rate, r.total_seconds
        )];
        for (name, value) in self.headline() {
            lines.push(format!("  {name:<14}: {value}"));
        }
        lines.push("  memory        :".to_string());
        for (name, value) in self.memory_lines() {
            lines.push(format!("    {name:<14}: {value}"));
        }
        lines.push(format!("  prometheus    : {}", self.prometheus_line()));
        for line in &r.stopped {
            lines.push(format!("  stopped       : {line}"));
        }
        lines.push(format!(
            "  report        : {} ({})",
            out.join("report.md").display(),
            files.join(", ")
        ));
        lines.push(format!(
            "  load report   : {}; logs: {}",
            self.load_report, self.logs
        ));
        lines.push(format!(
            "  profile       : {}",
            match &r.profile {
                ProfileOutcome::Skipped => "not run (--no-profile)".to_string(),
                ProfileOutcome::Written { report } => report.clone(),
                ProfileOutcome::Failed { error } => format!("FAILED: {error}"),
            }
        ));
        lines
    }

    /// report.md.
    pub fn markdown(&self, charts: &[String]) -> String {
        let c = &self.config;
        let r = &self.results;
        let mut md = String::from("# gigas-devnet\n\n## Configuration\n\n");
        for line in c.lines().iter().skip(1) {
            let _ = writeln!(md, "- {}", line.trim());
        }
        let _ = writeln!(md, "- command: `{}`", c.command);
        let mut results = Table::new("ll", ["", ""]);
        for (name, value) in self.headline() {
            results.row([name.to_string(), value]);
        }
        for (name, value) in self.memory_lines() {
            results.row([format!("memory: {name}"), value]);
        }
        results.row(["prometheus".to_string(), self.prometheus_line()]);
        results.row([
            "profile".to_string(),
            match &r.profile {
                ProfileOutcome::Skipped => "not run".to_string(),
                ProfileOutcome::Written { report } => {
                    format!("[{report}]({})", link(Path::new(&c.out), Path::new(report)))
                }
                ProfileOutcome::Failed { error } => format!("failed: {error}"),
            },
        ]);
        let _ = write!(md, "\n## Results\n\n{results}");
        let _ = writeln!(
            md,
            "\nThe load generator's own report (its stage split of block time, CPU by thread): [{}]({}). Logs: {}.",
            self.load_report,
            link(Path::new(&c.out), Path::new(&self.load_report)),
            self.logs
        );
        let mut lag = Table::new(
            "rrrrrrrr",
            [
                "s",
                "sequencer head",
                "full-node head",
                "lag",
                "sequencer RSS",
                "full node RSS (anon / file)",
                "full node cgroup",
                "load generator RSS",
            ],
        );
        let show = |m: Option<ProcMem>| m.map_or("-".to_string(), |m| bytes(m.resident));
        let or_dash = |h: Option<u64>| h.map_or("-".into(), |h| h.to_string());
        for s in &self.samples {
            lag.row([
                format!("{:.0}", s.t),
                or_dash(s.sequencer_head),
                or_dash(s.fullnode_head),
                or_dash(s.lag_blocks),
                show(s.sequencer),
                s.fullnode.map_or("-".to_string(), |m| {
                    format!(
                        "{} ({} / {})",
                        bytes(m.resident),
                        bytes(m.anon),
                        bytes(m.file)
                    )
                }),
                s.fullnode_cgroup_bytes.map_or("-".into(), bytes),
                show(s.generator),
            ]);
        }
        let _ = write!(md, "\n## Lag and memory, once a second\n\n{lag}");
        if !charts.is_empty() {
            let _ = writeln!(md, "\n## Charts\n");
            for file in charts {
                let what = CHARTS
                    .iter()
                    .find(|(f, _)| f == file)
                    .map_or("", |(_, w)| w);
                let _ = writeln!(md, "![{what}]({file})");
            }
        }
        let _ = writeln!(
            md,
            "\nThroughput and latency per second: {} seconds sampled; diff bytes per transaction: {}.",
            self.timeline.len(),
            opt(r.diff_bytes_per_tx, 1)
        );
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links() {
        let out = Path::new("reports/devnet");
        assert_eq!(
            link(out, Path::new("reports/profile/report.md")),
            "../profile/report.md"
        );
        assert_eq!(
            link(out, Path::new("reports/devnet/load/load.md")),
            "load/load.md"
        );
        assert_eq!(link(Path::new("/t/o"), Path::new("/t/p/r.md")), "../p/r.md");
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(8 << 30), "8.0 GiB");
    }
}

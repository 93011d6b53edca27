//! What the node says about itself (its Prometheus `/metrics`) and what the kernel says about
//! both processes (CPU time from /proc).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

/// One scrape of a Prometheus text (or OpenMetrics) page: every sample by its series.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    samples: HashMap<String, f64>,
}

impl Scrape {
    /// Parses the text format: `name{labels} value` per line; comments skipped.
    pub fn parse(text: &str) -> Self {
        let mut samples = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // Label values here never hold a space or a brace: the series ends at the closing
            // brace if there is one, else at the first space.
            let split = match line.find('}') {
                Some(end) => end + 1,
                None => line.find(' ').unwrap_or(line.len()),
            };
            let (series, rest) = line.split_at(split);
            if let Some(value) = rest.split_whitespace().next().and_then(parse_value) {
                samples.insert(series.to_string(), value);
            }
        }
        Self { samples }
    }

    /// `self - earlier`, sample by sample (a sample absent before counts from 0).
    pub fn since(&self, earlier: &Scrape) -> Scrape {
        let samples = self
            .samples
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v - earlier.samples.get(k).copied().unwrap_or(0.0),
                )
            })
            .collect();
        Scrape { samples }
    }

    /// A counter or gauge by name (`_total` tried too, as OpenMetrics names counters).
    pub fn value(&self, name: &str) -> Option<f64> {
        self.samples
            .get(name)
            .or_else(|| self.samples.get(&format!("{name}_total")))
            .copied()
    }

    /// The histogram `name` restricted to series whose labels contain `label` (e.g.
    /// `stage="execute"`; empty for all).
    pub fn histogram(&self, name: &str, label: &str) -> Histogram {
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|(k, _)| k.starts_with(&bucket) && k.contains(label))
            .filter_map(|(k, v)| {
                let le = k.split("le=\"").nth(1)?.split('"').next()?;
                Some((parse_value(le)?, *v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pick = |suffix: &str| {
            self.samples
                .iter()
                .filter(|(k, _)| {
                    k.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(suffix))
                        && k.contains(label)
                })
                .map(|(_, v)| *v)
                .sum::<f64>()
        };
        Histogram {
            buckets,
            sum: pick("_sum"),
            count: pick("_count"),
        }
    }

    /// Whether the page held no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// A histogram's cumulative buckets `(upper bound, count)`, sum and count.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// `(upper bound, cumulative count)`, in the page's order.
    pub buckets: Vec<(f64, f64)>,
    /// The sum of the observed values.
    pub sum: f64,
    /// How many values were observed.
    pub count: f64,
}

impl Histogram {
    /// The `q` quantile by linear interpolation inside its bucket (Prometheus's
    /// `histogram_quantile`); NaN when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        let total = self.buckets.last().map_or(0.0, |b| b.1);
        if total <= 0.0 {
            return f64::NAN;
        }
        let rank = q * total;
        let mut lower = (0.0, 0.0);
        for &(le, count) in &self.buckets {
            if count >= rank {
                if le.is_infinite() {
                    // Beyond the last finite bound: that bound is all we know.
                    return lower.0;
                }
                let width = count - lower.1;
                let into = if width > 0.0 {
                    (rank - lower.1) / width
                } else {
                    1.0
                };
                return lower.0 + (le - lower.0) * into;
            }
            lower = (le, count);
        }
        lower.0
    }

    /// Mean (sum over count); NaN when empty.
    pub fn mean(&self) -> f64 {
        if self.count > 0.0 {
            self.sum / self.count
        } else {
            f64::NAN
        }
    }
}

/// One stage of the node's block production (or phase of its history commit) over a window.
#[derive(Debug, Clone, Serialize)]
pub struct StageSplit {
    /// The stage (`select`, `execute`, `seal`, `commit_history`, `commit_state`, `publish`) or
    /// history commit phase (`encode`, `index_wait`, `append`, `sync`), or index phase
    /// (`transactions`, `receipts`, `state_history`, `prune`, `commit`).
    pub stage: String,
    /// Blocks observed.
    pub blocks: u64,
    /// Mean milliseconds per block.
    pub mean_ms: f64,
    /// Median milliseconds (interpolated within its histogram bucket).
    pub p50_ms: f64,
    /// 99th percentile milliseconds.
    pub p99_ms: f64,
    /// Share of the summed stage time.
    pub share: f64,
}

/// The stage split of a window's metrics delta.
pub fn stage_split(delta: &Scrape) -> Vec<StageSplit> {
    // The node's own list of stages, so that a new stage shows up here too.
    let stages = gigas_sequencer::metrics::Stage::ALL.map(|s| s.name());
    split(delta, "gigas_sequencer_stage_seconds", "stage", &stages)
}

/// The history commit's split by phase over a window's metrics delta (empty for a node that
/// does not export it).
pub fn history_split(delta: &Scrape) -> Vec<StageSplit> {
    split(
        delta,
        "gigas_history_commit_phase_seconds",
        "phase",
        &gigas_history::CommitPhase::ALL.map(|p| p.name()),
    )
}

/// The history indexer's split by phase (off the durable path; empty for a node without one).
pub fn index_split(delta: &Scrape) -> Vec<StageSplit> {
    split(
        delta,
        "gigas_history_index_phase_seconds",
        "phase",
        &gigas_history::IndexPhase::ALL.map(|p| p.name()),
    )
}

/// Per value of `label`: mean, median, p99 and share of the seconds histogram `metric`.
fn split(delta: &Scrape, metric: &str, label: &str, names: &[&str]) -> Vec<StageSplit> {
    let histograms: Vec<(&str, Histogram)> = names
        .iter()
        .map(|s| (*s, delta.histogram(metric, &format!("{label}=\"{s}\""))))
        .collect();
    let total: f64 = histograms.iter().map(|(_, h)| h.sum).sum();
    histograms
        .into_iter()
        .filter(|(_, h)| h.count > 0.0)
        .map(|(stage, h)| StageSplit {
            stage: stage.to_string(),
            blocks: h.count.round() as u64,
            mean_ms: h.mean() * 1e3,
            p50_ms: h.quantile(0.5) * 1e3,
            p99_ms: h.quantile(0.99) * 1e3,
            share: if total > 0.0 { h.sum / total } else { 0.0 },
        })
        .collect()
}

/// Clock ticks per second of /proc's CPU times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// `(comm, user + system seconds)` from a /proc `stat` file's text.
fn parse_stat(text: &str) -> Option<(String, f64)> {
    // The command name is in parentheses and may hold spaces or parentheses itself: the
    // fields resume after the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // Fields 14 and 15 of proc(5) (utime, stime) are the 12th and 13th after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((comm, (utime + stime) / ticks_per_second()))
}

/// CPU seconds (user + system) a process has used; `None` for this process is "self".
pub fn process_cpu(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    parse_stat(&std::fs::read_to_string(path).ok()?).map(|(_, s)| s)
}

/// The whole machine's busy and I/O-wait CPU seconds since boot (the `cpu` line of
/// /proc/stat): what other processes on a shared machine took is busy minus ours.
pub fn machine_cpu() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    Some((busy / ticks_per_second(), at(4) / ticks_per_second()))
}

/// CPU seconds per thread name of a process, names with their trailing numbers folded
/// (`txpool-recover-0` and `-1` count as `txpool-recover-N`).
pub fn thread_cpu(pid: u32) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // schedstat's first field is the thread's time on a CPU in nanoseconds; stat counts
        // clock ticks (10 ms), too coarse for a thread that ran a few ms in a short step.
        let precise = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .map(|ns| ns as f64 / 1e9);
        if let Some((comm, seconds)) = parse_stat(&text) {
            *out.entry(fold_thread_name(&comm)).or_insert(0.0) += precise.unwrap_or(seconds);
        }
    }
    out
}

fn fold_thread_name(name: &str) -> String {
    // Thread names are cut at 15 bytes: `txpool-recover-12` reads `txpool-recover-`.
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if trimmed.len() < name.len() || trimmed.ends_with('-') {
        format!("{trimmed}N")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_interpolate_within_buckets() {
        let text = "# TYPE x histogram\n\
            x_bucket{stage=\"a\",le=\"0.1\"} 0\n\
            x_bucket{stage=\"a\",le=\"0.2\"} 50\n\
            x_bucket{stage=\"a\",le=\"0.4\"} 100\n\
            x_bucket{stage=\"a\",le=\"+Inf\"} 100\n\
            x_sum{stage=\"a\"} 25\n\
            x_count{stage=\"a\"} 100\n\
            y_total 7\n# EOF\n";
        let s = Scrape::parse(text);
        let h = s.histogram("x", "stage=\"a\"");
        assert_eq!(h.buckets.len(), 4);
        assert!((h.quantile(0.5) - 0.2).abs() < 1e-12);
        assert!((h.quantile(0.75) - 0.3).abs() < 1e-12);
        assert!((h.mean() - 0.25).abs() < 1e-12);
        assert_eq!(s.value("y"), Some(7.0));
        let later = Scrape::parse("y_total 10\n");
        assert_eq!(later.since(&s).value("y"), Some(3.0));
    }

    #[test]
    fn proc_stat_fields_after_a_name_with_spaces() {
        let line = "123 (tokio rt (1)) S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1 1 1";
        let (comm, secs) = parse_stat(line).unwrap();
        assert_eq!(comm, "tokio rt (1)");
        assert!((secs - 300.0 / ticks_per_second()).abs() < 1e-9);
        assert_eq!(fold_thread_name("txpool-recove12"), "txpool-recoveN");
        assert_eq!(fold_thread_name("txpool-recover-"), "txpool-recover-N");
        assert_eq!(fold_thread_name("gigas-rpc"), "gigas-rpc");
        assert!(process_cpu(None).is_some());
        assert!(machine_cpu().is_some_and(|(busy, _)| busy > 0.0));
    }
}

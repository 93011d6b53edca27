//! Judging a step is arithmetic over what the tracker, the CPU samples and the metrics saw;
//! it sits apart from the async sending so the pass and fail rules can be read in one place.

use crate::load::metrics::{self, Scrape};
use crate::load::send::{lock, Outcome};
use crate::load::{Percentiles, RefusalCount, StepResult, ThreadCpu};

use super::{Cpu, Session};

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn evaluate(
        &self,
        number: usize,
        rate: f64,
        sign_seconds: f64,
        (t0, t1): (f64, f64),
        (cpu0, cpu1): (&Cpu, &Cpu),
        (delta, metrics_after): (Option<&Scrape>, Option<&Scrape>),
    ) -> StepResult {
        let t = lock(&self.tracker);
        let limit = self.common.latency_limit.as_secs_f64();
        let window = (t1 - t0).max(1e-9);
        let mut sent = 0u64;
        let (mut accepted, mut rejected, mut gave_up, mut included, mut missed) = (0, 0, 0, 0, 0);
        let mut latencies = Vec::new();
        for tx in &t.txs {
            if tx.sent.is_nan() {
                continue;
            }
            sent += 1;
            match tx.outcome {
                Outcome::Accepted => accepted += 1,
                Outcome::Rejected => rejected += 1,
                Outcome::GaveUp => gave_up += 1,
                Outcome::Waiting => {}
            }
            if tx.included.is_nan() {
                missed += 1;
            } else {
                included += 1;
                let latency = tx.included - tx.sent;
                latencies.push(latency * 1e3);
                if latency > limit {
                    missed += 1;
                }
            }
        }
        let heads: Vec<_> = t
            .heads
            .iter()
            .filter(|h| h.seen >= t0 && h.seen <= t1)
            .copied()
            .collect();
        let intervals: Vec<f64> = heads
            .windows(2)
            .map(|w| (w[1].seen - w[0].seen) * 1e3)
            .collect();
        let included_tps = match (heads.first(), heads.last()) {
            (Some(first), Some(last)) if last.seen > first.seen => {
                heads[1..].iter().map(|h| h.txs as f64).sum::<f64>() / (last.seen - first.seen)
            }
            _ => 0.0,
        };
        let txs_per_block = if heads.is_empty() {
            0.0
        } else {
            heads.iter().map(|h| h.txs as f64).sum::<f64>() / heads.len() as f64
        };
        let answer_ms = Percentiles::of(t.answer_ms.iter().map(|&x| f64::from(x)).collect());
        let refusals: Vec<RefusalCount> = t
            .refusals
            .iter()
            .map(|(reason, r)| RefusalCount {
                reason: reason.clone(),
                count: r.count,
                backpressure: r.backpressure,
                example: r.example.clone(),
            })
            .collect();
        drop(t);

        let mut failures = Vec::new();
        for r in refusals.iter().filter(|r| !r.backpressure) {
            failures.push(format!("{} refused: \"{}\"", r.count, r.example));
        }
        if sent > 0 && missed as f64 > self.common.max_missed * sent as f64 {
            failures.push(format!(
                "{:.2}% of its txs not included within {limit:.1} s",
                100.0 * missed as f64 / sent as f64
            ));
        }
        let submitted_tps = sent as f64 / window;
        if submitted_tps < self.common.min_submitted * rate {
            failures.push(format!(
                "submitted {submitted_tps:.0}/s of {rate:.0}/s: answers (p99 {:.0} ms) too slow for {} batches in flight",
                answer_ms.p99, self.common.in_flight
            ));
        }
        let block_time_ms = self.common.block_time.as_secs_f64() * 1e3;
        let interval_q = Percentiles::quantile(&intervals, self.common.interval_quantile);
        if heads.len() < 2 {
            failures.push("fewer than two blocks during the step".to_string());
        } else if interval_q > self.common.interval_factor * block_time_ms {
            failures.push(format!(
                "p{:.0} block interval {interval_q:.0} ms > {}x {block_time_ms:.0} ms",
                self.common.interval_quantile * 100.0,
                self.common.interval_factor
            ));
        }

        let node_cpu = match (cpu0.node, cpu1.node) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let generator_cpu = cpu1.own - cpu0.own;
        let (other_cpu_cores, iowait_cores) = match (cpu0.machine, cpu1.machine) {
            (Some((b0, w0)), Some((b1, w1))) => (
                Some(((b1 - b0) - generator_cpu - node_cpu.unwrap_or(0.0)).max(0.0) / window),
                Some((w1 - w0) / window),
            ),
            _ => (None, None),
        };
        let mut node_threads: Vec<ThreadCpu> = cpu1
            .threads
            .iter()
            .map(|(name, s)| ThreadCpu {
                name: name.clone(),
                cores: (s - cpu0.threads.get(name).copied().unwrap_or(0.0)) / window,
            })
            .filter(|t| t.cores > 0.0005)
            .collect();
        node_threads.sort_by(|a, b| b.cores.total_cmp(&a.cores));
        let history_phases = delta.map(metrics::history_split).unwrap_or_default();
        let index_phases = delta.map(metrics::index_split).unwrap_or_default();
        let recovery_cores: f64 = node_threads
            .iter()
            .filter(|t| t.name.starts_with("txpool-recover"))
            .map(|t| t.cores)
            .sum();
        let recovery_us_per_tx = (recovery_cores > 0.0 && included > 0)
            .then(|| recovery_cores * window / included as f64 * 1e6);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let recovery_bound_tps = recovery_us_per_tx.map(|us| cores * 1e6 / us);
        let unindexed_blocks =
            metrics_after.and_then(|m| m.value("gigas_history_unindexed_blocks"));
        let commitment_seconds = delta
            .map(|d| d.histogram("gigas_diffs_commitment_seconds", ""))
            .filter(|h| h.count > 0.0)
            .map(|h| h.sum);
        let commitment_us_per_tx = commitment_seconds
            .filter(|_| included > 0)
            .map(|s| s / included as f64 * 1e6);
        let commitment_cpu = delta
            .and_then(|d| d.value("gigas_diffs_commitment_cpu_seconds"))
            .filter(|_| commitment_seconds.is_some());
        let commitment_cpu_us_per_tx = commitment_cpu
            .filter(|_| included > 0)
            .map(|s| s / included as f64 * 1e6);
        let commitment_cpu_share = commitment_cpu
            .zip(node_cpu)
            .filter(|(_, cpu)| *cpu > 0.0)
            .map(|(s, cpu)| s / cpu);
        let (stages, block_ms, diff_bytes_per_tx) = match delta {
            Some(d) if !d.is_empty() => {
                let block = d.histogram("gigas_sequencer_block_seconds", "");
                let included_metric = d.value("gigas_sequencer_transactions_included");
                let diff = d.value("gigas_diffs_diff_bytes");
                (
                    metrics::stage_split(d),
                    (block.count > 0.0).then(|| Percentiles {
                        p50: block.quantile(0.5) * 1e3,
                        p90: block.quantile(0.9) * 1e3,
                        p99: block.quantile(0.99) * 1e3,
                        max: f64::NAN,
                    }),
                    match (diff, included_metric) {
                        (Some(bytes), Some(n)) if n > 0.0 => Some(bytes / n),
                        _ => None,
                    },
                )
            }
            _ => (Vec::new(), None, None),
        };
        StepResult {
            step: number,
            target_tps: rate,
            seconds: window,
            sign_seconds,
            sent,
            accepted,
            rejected,
            gave_up,
            refusals,
            included,
            missed,
            submitted_tps,
            answer_ms,
            included_tps,
            latency_ms: Percentiles::of(latencies),
            blocks: heads.len() as u64,
            block_interval_ms: Percentiles::of(intervals),
            txs_per_block,
            block_ms,
            node_cpu_cores: node_cpu.map(|c| c / window),
            generator_cpu_cores: generator_cpu / window,
            node_cpu_us_per_tx: node_cpu
                .filter(|_| included > 0)
                .map(|c| c / included as f64 * 1e6),
            generator_cpu_us_per_tx: generator_cpu / sent.max(1) as f64 * 1e6,
            other_cpu_cores,
            iowait_cores,
            node_threads,
            stages,
            history_phases,
            index_phases,
            recovery_us_per_tx,
            recovery_bound_tps,
            library_recovery_us: self.library_recovery_us,
            unindexed_blocks,
            diff_bytes_per_tx,
            commitment_us_per_tx,
            commitment_cpu_us_per_tx,
            commitment_cpu_share,
            passed: failures.is_empty(),
            failures,
        }
    }
}

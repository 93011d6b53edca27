//! The opcode cost table and everything derived from it: JSON, CSV and Markdown.

use std::fmt::Write as _;

use gigas_evm::probe::Phase;
use gigas_evm::BlockCheck;
use gigas_report::Table;
use serde::Serialize;

use crate::calibrate::Calibration;
use crate::category::{opcode_category, opcode_name, Category};
use crate::replay::{Round, Workload};
use crate::sampler::Histogram;

/// The median, spread and values of a repeated measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Stat {
    /// Median.
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Every value, in round order.
    pub values: Vec<f64>,
}

impl Stat {
    /// Summarises `values`. An empty slice gives zeros.
    pub fn of(values: Vec<f64>) -> Self {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let median = match sorted.len() {
            0 => 0.0,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Self {
            median,
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
            values,
        }
    }
}

/// What was run, printed before any result.
#[derive(Debug, Clone, Serialize)]
pub struct Configuration {
    /// The block directory.
    pub blocks_dir: String,
    /// Blocks replayed.
    pub blocks: usize,
    /// Transactions replayed per pass.
    pub transactions: usize,
    /// Gas replayed per pass.
    pub gas: u64,
    /// Rounds of (plain pass, probed pass).
    pub rounds: usize,
    /// Target sampling interval, nanoseconds.
    pub sample_interval_ns: u64,
    /// Build profile of this binary.
    pub build_profile: String,
    /// `nproc`.
    pub cpus: usize,
    /// CPU model.
    pub cpu_model: String,
    /// Total memory, bytes.
    pub memory_bytes: u64,
    /// revm version the interpreter comes from.
    pub revm_version: String,
}

impl Configuration {
    /// Human-readable lines.
    pub fn lines(&self) -> Vec<String> {
        vec![
            format!("workload     : {} blocks, {} txs, {:.1} Mgas per pass, from {}", self.blocks, self.transactions, self.gas as f64 / 1e6, self.blocks_dir),
            format!("method       : {} rounds; in each, every block runs plain and probed back to back (order alternating); sampling every ~{} ns; opcode counts from one untimed counting pass per block", self.rounds, self.sample_interval_ns),
            format!("build        : {} profile, revm {}", self.build_profile, self.revm_version),
            format!("machine      : {} CPUs, {}, {:.1} GiB", self.cpus, self.cpu_model, self.memory_bytes as f64 / (1u64 << 30) as f64),
        ]
    }
}

/// One row of the cost table: an opcode or work outside opcodes.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Opcode mnemonic or phase name.
    pub name: String,
    /// The opcode byte, for opcode rows.
    pub opcode: Option<u8>,
    /// Category.
    pub category: Category,
    /// Exact executions per pass (for phases: the transactions or precompile calls they
    /// served).
    pub count: u64,
    /// Samples that landed in this row, over all rounds.
    pub samples: u64,
    /// Seconds per pass: sampled time less the probe's calibrated cost for each execution.
    pub time_s: f64,
    /// Seconds per pass as sampled, before the probe's cost is subtracted.
    pub time_s_raw: f64,
    /// Share of all attributed time.
    pub share: f64,
    /// Half-width of the share's 95% confidence interval from sampling alone.
    pub share_ci95: f64,
    /// Cumulative share of this row and every row above it.
    pub cumulative_share: f64,
    /// Average nanoseconds per execution.
    pub avg_ns: Option<f64>,
}

/// Time per category.
#[derive(Debug, Clone, Serialize)]
pub struct CategoryRow {
    /// The category.
    pub category: Category,
    /// Its name.
    pub name: String,
    /// Seconds per pass.
    pub time_s: f64,
    /// Share of attributed time.
    pub share: f64,
}

/// A replayed block.
#[derive(Debug, Clone, Serialize)]
pub struct BlockRow {
    /// Block number.
    pub number: u64,
    /// Its hardfork.
    pub hardfork: String,
    /// Transactions.
    pub transactions: usize,
    /// The header's `gasUsed`.
    pub header_gas_used: u64,
    /// Gas the replay used.
    pub computed_gas_used: u64,
    /// Whether receipts root and bloom were checked (Byzantium and later) and matched.
    pub receipts_root_and_bloom_checked: bool,
    /// Median plain execution time, microseconds.
    pub plain_time_us_median: f64,
    /// Median probed execution time, microseconds.
    pub probed_time_us_median: f64,
}

/// What the MegaETH talk reported next to what Gigas measured.
#[derive(Debug, Clone, Serialize)]
pub struct TalkComparison {
    /// The talk's top five opcodes by time.
    pub talk_top_five: Vec<String>,
    /// Ours.
    pub measured_top_five: Vec<String>,
    /// The talk's SLOAD share.
    pub talk_sload_share: f64,
    /// Ours.
    pub measured_sload_share: f64,
    /// The talk: host + system over 50%.
    pub talk_host_system_share_at_least: f64,
    /// Ours, host and system opcodes only.
    pub measured_host_system_share: f64,
    /// Ours, host and system opcodes plus work outside opcodes and precompiles.
    pub measured_beyond_jit_share: f64,
    /// The talk's stack share.
    pub talk_stack_share: f64,
    /// Ours.
    pub measured_stack_share: f64,
    /// The talk's JIT ceiling.
    pub talk_jit_ceiling: f64,
    /// Ours.
    pub measured_jit_ceiling: f64,
}

/// The whole profile.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What was run.
    pub configuration: Configuration,
    /// Probed pass time over plain pass time, per round.
    pub overhead_ratio_probed_over_plain: Stat,
    /// (sum of all rows - plain execution time) / plain execution time, rows corrected for
    /// the probe's calibrated cost; one value per round (rows and plain time of the same
    /// round, whose blocks ran interleaved), summarised by the median.
    pub attribution_add_up_error: Stat,
    /// The same before the correction: sampled time under the probe against plain time.
    pub attribution_add_up_error_uncorrected: Stat,
    /// Sum of all rows, seconds per pass.
    pub attributed_seconds_per_pass: f64,
    /// Sum of all rows before the probe's cost is subtracted, seconds per pass.
    pub attributed_seconds_per_pass_uncorrected: f64,
    /// The probe's cost per instruction, measured on a compute-bound program in this run.
    pub probe_calibration: Option<Calibration>,
    /// Plain execution time of a pass, seconds.
    pub plain_execution_seconds: Stat,
    /// Probed execution time of a pass, seconds.
    pub probed_execution_seconds: Stat,
    /// Attributed time over probed execution time: how much of the probed run the sampler saw.
    pub sampler_coverage: f64,
    /// Samples over all rounds.
    pub samples: u64,
    /// Samples that followed a long sampler stall.
    pub sampler_long_gaps: u64,
    /// Plain replay throughput, Mgas/s (median pass).
    pub plain_mgas_per_second: f64,
    /// Plain replay throughput, transactions per second (median pass).
    pub plain_tx_per_second: f64,
    /// Best speed-up a JIT could give if every opcode outside host and system were free.
    pub jit_ceiling_speedup: f64,
    /// The cost table, by time.
    pub rows: Vec<Row>,
    /// Time by category.
    pub categories: Vec<CategoryRow>,
    /// Every block.
    pub blocks: Vec<BlockRow>,
    /// The talk next to this run.
    pub talk_comparison: TalkComparison,
}

/// Sampled seconds outside idle, as sampled and with the probe's cost taken off each opcode
/// (never below zero, as in the rows).
fn attributed_seconds(histogram: &Histogram, counts: &[u64; 256], probe_ns: f64) -> (f64, f64) {
    let mut raw = 0.0;
    let mut corrected = 0.0;
    for (activity, nanos) in histogram.nanos.iter().enumerate() {
        if activity == Phase::Idle as usize {
            continue;
        }
        let seconds = *nanos as f64 / 1e9;
        raw += seconds;
        corrected += match counts.get(activity) {
            Some(&count) => (seconds - count as f64 * probe_ns / 1e9).max(0.0),
            None => seconds,
        };
    }
    (raw, corrected)
}

fn phase_category(phase: Phase) -> Category {
    match phase {
        Phase::Precompile => Category::Precompile,
        _ => Category::OutsideOpcodes,
    }
}

impl Report {
    /// Builds the report from a workload's checks and measured rounds.
    pub fn build(
        configuration: Configuration,
        workload: &Workload,
        checks: &[BlockCheck],
        rounds: &[Round],
        calibration: Option<Calibration>,
    ) -> Self {
        let probe_ns = calibration
            .as_ref()
            .map_or(0.0, |c| c.probe_ns_per_instruction);
        let n_rounds = rounds.len().max(1) as f64;
        let mut histogram = Histogram::default();
        for round in rounds {
            histogram.merge(&round.probed.histogram);
        }
        // Counts are exact and identical in every pass; take the first.
        let counts = rounds.first().map(|r| r.probed.counts).unwrap_or([0; 256]);
        let precompile_calls = rounds.first().map_or(0, |r| r.probed.precompile_calls);
        let txs = workload.tx_count() as u64;

        let idle = Phase::Idle as usize;
        let attributed_samples: u64 = histogram
            .samples
            .iter()
            .enumerate()
            .filter(|(a, _)| *a != idle)
            .map(|(_, s)| s)
            .sum();
        let attributed_ns: u64 = histogram
            .nanos
            .iter()
            .enumerate()
            .filter(|(a, _)| *a != idle)
            .map(|(_, n)| n)
            .sum();
        let attributed_raw_s = attributed_ns as f64 / 1e9 / n_rounds;

        let mut rows = Vec::new();
        for op in 0..=255u8 {
            let i = op as usize;
            if counts[i] == 0 && histogram.samples[i] == 0 {
                continue;
            }
            let raw = histogram.nanos[i] as f64 / 1e9 / n_rounds;
            rows.push(Row {
                name: opcode_name(op),
                opcode: Some(op),
                category: opcode_category(op),
                count: counts[i],
                samples: histogram.samples[i],
                time_s: (raw - counts[i] as f64 * probe_ns / 1e9).max(0.0),
                time_s_raw: raw,
                share: 0.0,
                share_ci95: 0.0,
                cumulative_share: 0.0,
                avg_ns: None,
            });
        }
        for phase in Phase::ALL {
            let i = phase as usize;
            if phase == Phase::Idle || histogram.samples[i] == 0 {
                continue;
            }
            rows.push(Row {
                name: phase.name().to_string(),
                opcode: None,
                category: phase_category(phase),
                count: if phase == Phase::Precompile {
                    precompile_calls
                } else {
                    txs
                },
                samples: histogram.samples[i],
                time_s: histogram.nanos[i] as f64 / 1e9 / n_rounds,
                time_s_raw: histogram.nanos[i] as f64 / 1e9 / n_rounds,
                share: 0.0,
                share_ci95: 0.0,
                cumulative_share: 0.0,
                avg_ns: None,
            });
        }
        rows.sort_by(|a, b| b.time_s.total_cmp(&a.time_s).then(b.count.cmp(&a.count)));
        let attributed_s: f64 = rows.iter().map(|r| r.time_s).sum();
        let mut cumulative = 0.0;
        for row in &mut rows {
            row.share = if attributed_s > 0.0 {
                row.time_s / attributed_s
            } else {
                0.0
            };
            let p = row.share;
            row.share_ci95 = if attributed_samples > 0 {
                1.96 * (p * (1.0 - p) / attributed_samples as f64).sqrt()
            } else {
                0.0
            };
            cumulative += row.share;
            row.cumulative_share = cumulative;
            row.avg_ns = (row.count > 0).then(|| row.time_s * 1e9 / row.count as f64);
        }

        let categories: Vec<CategoryRow> = Category::ALL
            .iter()
            .map(|&category| {
                let time_s: f64 = rows
                    .iter()
                    .filter(|r| r.category == category)
                    .map(|r| r.time_s)
                    .sum();
                CategoryRow {
                    category,
                    name: category.name().to_string(),
                    time_s,
                    share: if attributed_s > 0.0 {
                        time_s / attributed_s
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        let share_of = |pred: &dyn Fn(Category) -> bool| -> f64 {
            categories
                .iter()
                .filter(|c| pred(c.category))
                .map(|c| c.share)
                .sum()
        };
        let beyond_jit = share_of(&|c| c.beyond_jit());
        let jit_ceiling = if beyond_jit > 0.0 {
            1.0 / beyond_jit
        } else {
            f64::INFINITY
        };

        let plain = Stat::of(
            rounds
                .iter()
                .map(|r| r.plain.total().as_secs_f64())
                .collect(),
        );
        let probed = Stat::of(
            rounds
                .iter()
                .map(|r| r.probed.timing.total().as_secs_f64())
                .collect(),
        );
        let overhead = Stat::of(
            rounds
                .iter()
                .map(|r| r.probed.timing.total().as_secs_f64() / r.plain.total().as_secs_f64())
                .collect(),
        );

        let per_block_median =
            |f: &dyn Fn(&Round) -> f64| Stat::of(rounds.iter().map(f).collect()).median;
        let blocks = workload
            .blocks
            .iter()
            .zip(checks)
            .enumerate()
            .map(|(i, (loaded, check))| BlockRow {
                number: loaded.block.number,
                hardfork: loaded.block.hardfork.to_string(),
                transactions: loaded.block.txs.len(),
                header_gas_used: check.header_gas_used,
                computed_gas_used: check.computed_gas_used,
                receipts_root_and_bloom_checked: check.receipts_checked && check.is_match(),
                plain_time_us_median: per_block_median(&|r| {
                    r.plain.per_block[i].as_secs_f64() * 1e6
                }),
                probed_time_us_median: per_block_median(&|r| {
                    r.probed.timing.per_block[i].as_secs_f64() * 1e6
                }),
            })
            .collect();

        let opcode_share = |name: &str| {
            rows.iter()
                .find(|r| r.name == name)
                .map_or(0.0, |r| r.share)
        };
        let talk_comparison = TalkComparison {
            talk_top_five: ["STATICCALL", "KECCAK256", "SLOAD", "CALL", "PUSH1"]
                .map(String::from)
                .to_vec(),
            measured_top_five: rows
                .iter()
                .filter(|r| r.opcode.is_some())
                .take(5)
                .map(|r| r.name.clone())
                .collect(),
            talk_sload_share: 0.088,
            measured_sload_share: opcode_share("SLOAD"),
            talk_host_system_share_at_least: 0.50,
            measured_host_system_share: share_of(&|c| {
                matches!(c, Category::Host | Category::System)
            }),
            measured_beyond_jit_share: beyond_jit,
            talk_stack_share: 0.29,
            measured_stack_share: share_of(&|c| c == Category::Stack),
            talk_jit_ceiling: 2.0,
            measured_jit_ceiling: jit_ceiling,
        };

        let gas = workload.gas() as f64;
        Self {
            configuration,
            attribution_add_up_error: Stat::of(
                rounds
                    .iter()
                    .map(|r| {
                        let (_, corrected) =
                            attributed_seconds(&r.probed.histogram, &r.probed.counts, probe_ns);
                        corrected / r.plain.total().as_secs_f64() - 1.0
                    })
                    .collect(),
            ),
            attribution_add_up_error_uncorrected: Stat::of(
                rounds
                    .iter()
                    .map(|r| {
                        let (raw, _) =
                            attributed_seconds(&r.probed.histogram, &r.probed.counts, probe_ns);
                        raw / r.plain.total().as_secs_f64() - 1.0
                    })
                    .collect(),
            ),
            attributed_seconds_per_pass: attributed_s,
            attributed_seconds_per_pass_uncorrected: attributed_raw_s,
            probe_calibration: calibration,
            sampler_coverage: if probed.median > 0.0 {
                attributed_raw_s / probed.median
            } else {
                0.0
            },
            samples: attributed_samples,
            sampler_long_gaps: histogram.long_gaps,
            plain_mgas_per_second: if plain.median > 0.0 {
                gas / 1e6 / plain.median
            } else {
                0.0
            },
            plain_tx_per_second: if plain.median > 0.0 {
                txs as f64 / plain.median
            } else {
                0.0
            },
            jit_ceiling_speedup: jit_ceiling,
            overhead_ratio_probed_over_plain: overhead,
            plain_execution_seconds: plain,
            probed_execution_seconds: probed,
            rows,
            categories,
            blocks,
            talk_comparison,
        }
    }

    /// The cost table as CSV.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "rank,name,opcode,category,count,samples,time_s,time_s_raw,share,share_ci95,cumulative_share,avg_ns\n",
        );
        for (rank, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{:.9},{:.9},{:.6},{:.6},{:.6},{}",
                rank + 1,
                r.name,
                r.opcode.map(|o| format!("0x{o:02x}")).unwrap_or_default(),
                r.category.name(),
                r.count,
                r.samples,
                r.time_s,
                r.time_s_raw,
                r.share,
                r.share_ci95,
                r.cumulative_share,
                r.avg_ns.map(|v| format!("{v:.2}")).unwrap_or_default()
            );
        }
        out
    }

    /// The headline figures, one per line, for the terminal.
    pub fn summary_lines(&self) -> Vec<String> {
        let o = &self.overhead_ratio_probed_over_plain;
        let p = &self.plain_execution_seconds;
        vec![
            format!("plain replay : {:.1} ms per pass (median; min {:.1}, max {:.1}), {:.0} Mgas/s, {:.0} tx/s", p.median * 1e3, p.min * 1e3, p.max * 1e3, self.plain_mgas_per_second, self.plain_tx_per_second),
            format!("overhead     : {:.3}x probed / plain (median; min {:.3}, max {:.3}; target <= 1.15x)", o.median, o.min, o.max),
            format!("add-up error : {:+.2}% (median of rounds; min {:+.2}%, max {:+.2}%; rows {:.1} ms vs plain {:.1} ms per pass; target within 5%); before subtracting the probe's cost {:+.2}%", self.attribution_add_up_error.median * 100.0, self.attribution_add_up_error.min * 100.0, self.attribution_add_up_error.max * 100.0, self.attributed_seconds_per_pass * 1e3, p.median * 1e3, self.attribution_add_up_error_uncorrected.median * 100.0),
            match &self.probe_calibration {
                Some(c) => format!("probe cost   : {:.3} ns per instruction (snailtracer, {} instructions: plain {:.2} ms = {:.2} ns/instr, probed {:.2} ms, medians of {})", c.probe_ns_per_instruction, c.instructions, c.plain_ms.median, c.plain_ns_per_instruction, c.probed_ms.median, c.plain_ms.values.len()),
                None => "probe cost   : not calibrated (rows are as sampled)".to_string(),
            },
            format!("sampling     : {} samples, coverage {:.1}% of the probed run, {} long sampler gaps", self.samples, self.sampler_coverage * 100.0, self.sampler_long_gaps),
            format!("JIT ceiling  : {:.2}x (1 / share of host + system + precompiles + outside opcodes = {:.1}%)", self.jit_ceiling_speedup, self.talk_comparison.measured_beyond_jit_share * 100.0),
        ]
    }

    /// The top `n` rows as a Markdown table.
    pub fn table_markdown(&self, n: usize) -> String {
        let mut t = Table::new(
            "rlrrrrrrl",
            [
                "#",
                "opcode",
                "count",
                "time (s)",
                "share",
                "±95%",
                "cumulative",
                "ns/call",
                "category",
            ],
        );
        for (i, r) in self.rows.iter().take(n).enumerate() {
            t.row([
                (i + 1).to_string(),
                r.name.to_string(),
                r.count.to_string(),
                format!("{:.6}", r.time_s),
                format!("{:.2}%", r.share * 100.0),
                format!("{:.2}%", r.share_ci95 * 100.0),
                format!("{:.2}%", r.cumulative_share * 100.0),
                r.avg_ns.map_or_else(|| "-".into(), |v| format!("{v:.1}")),
                r.category.name().to_string(),
            ]);
        }
        t.to_string()
    }

    /// The full Markdown report, with the charts referenced by file name.
    pub fn markdown(&self, top_chart: &str, category_chart: &str) -> String {
        let mut md = String::new();
        let c = &self.configuration;
        let t = &self.talk_comparison;
        let _ = writeln!(md, "# Gigas opcode cost report\n");
        let _ = writeln!(md, "## Configuration\n");
        for line in c.lines() {
            let _ = writeln!(md, "- {line}");
        }
        let _ = writeln!(md, "\n## Headline figures\n");
        for line in self.summary_lines() {
            let _ = writeln!(md, "- {line}");
        }
        let _ = writeln!(md, "\n## How this was measured\n");
        let _ = writeln!(
            md,
            "- **Counts are exact.** Every entry of revm's instruction table is wrapped by a function \
             that counts the opcode before running revm's own instruction. An opcode that runs out of \
             gas on its static cost is not dispatched and not counted.\n\
             - **Time comes from sampling, not from timestamps around opcodes** (those make replay \
             about 8x slower and swamp cheap opcodes). The wrapper also publishes the current opcode \
             with one relaxed store; a sampler thread on the other core reads it about every {} ns \
             (jittered) and credits the time since its previous sample to what it sees. Each row's \
             `±95%` is the sampling error of its share.\n\
             - **The probe's own cost is subtracted.** Counting and publishing cost a little per \
             instruction; that cost is measured in the same run on snailtracer (compute-bound, no \
             state), plain against probed, and `count x cost` is taken off each opcode row \
             (`time_s_raw` in the JSON and CSV keeps the sampled value).\n\
             - **The time of a CALL-family or CREATE-family opcode is the opcode's own time**: preparing \
             the call, loading the callee's account and code, setting up and tearing down its frame. \
             The callee's opcodes are counted in their own rows. Frame teardown after the callee's last \
             opcode lands on that opcode (STOP, RETURN, REVERT), which is why they sit in `system`.\n\
             - **Work outside opcodes has its own rows**, in parentheses: transaction validation, \
             pre-execution, first-frame setup, post-execution, the state commit, the block loop, and \
             precompiles. All rows add up to the attributed time, which is compared with the plain \
             run's measured time as the add-up error.\n\
             - **Overhead is measured, not assumed**: in each round every block runs once plain and \
             once probed, back to back in the same process, the order alternating; the ratio of the \
             round's totals is quoted as a median over rounds with its spread.\n\
             - **One-time initialisation is excluded**: a first, untimed pass checks every block \
             against its header and pays precompile table and KZG trusted-setup initialisation. \
             Cloning the pre-state and building the EVM happen before each block's clock starts.",
            c.sample_interval_ns
        );
        let _ = writeln!(
            md,
            "\n## Top 30 opcodes\n\n![top 30 opcodes]({top_chart})\n"
        );
        let _ = writeln!(
            md,
            "\n## Time by category\n\n![time by category]({category_chart})\n"
        );
        let mut cats = self.categories.clone();
        cats.sort_by(|a, b| b.time_s.total_cmp(&a.time_s));
        let mut by_category = Table::new("lrr", ["category", "time (s)", "share"]);
        for cat in &cats {
            by_category.row([
                cat.name.to_string(),
                format!("{:.6}", cat.time_s),
                format!("{:.2}%", cat.share * 100.0),
            ]);
        }
        let _ = write!(md, "{by_category}");
        let _ = writeln!(md, "\n## Against the MegaETH talk\n");
        let _ = writeln!(
            md,
            "The talk profiled reth's historical sync over about 18 million mainnet blocks with the \
             state in memory. Its top five opcodes by time were {}; Gigas measures {} on these {} blocks. \
             The talk found SLOAD at about {:.1}% of time; here SLOAD takes {:.2}%. The talk put host + \
             system opcodes above {:.0}%; here they take {:.1}%, and {:.1}% with precompiles and the work \
             outside opcodes added (which the talk's table did not separate). Stack opcodes took about \
             {:.0}% in the talk and {:.1}% here. The talk concluded that a JIT could give at most about \
             {:.0}x; the same argument on these blocks gives {:.2}x. These {} blocks are a small sample \
             spread over every fork since Frontier, not the talk's full history, and revm's interpreter \
             has become faster since, which moves time from cheap opcodes to host and system work.",
            t.talk_top_five.join(", "),
            t.measured_top_five.join(", "),
            c.blocks,
            t.talk_sload_share * 100.0,
            t.measured_sload_share * 100.0,
            t.talk_host_system_share_at_least * 100.0,
            t.measured_host_system_share * 100.0,
            t.measured_beyond_jit_share * 100.0,
            t.talk_stack_share * 100.0,
            t.measured_stack_share * 100.0,
            t.talk_jit_ceiling,
            t.measured_jit_ceiling,
            c.blocks,
        );
        let _ = writeln!(
            md,
            "\n## Opcode cost table\n\nTimes are seconds per pass over all {} blocks.\n",
            c.blocks
        );
        md.push_str(&self.table_markdown(usize::MAX));
        let mut blocks = Table::new(
            "rlrrrlrr",
            [
                "block",
                "fork",
                "txs",
                "header gasUsed",
                "computed gasUsed",
                "receipts root + bloom",
                "plain µs",
                "probed µs",
            ],
        );
        for b in &self.blocks {
            blocks.row([
                b.number.to_string(),
                b.hardfork.to_string(),
                b.transactions.to_string(),
                b.header_gas_used.to_string(),
                b.computed_gas_used.to_string(),
                if b.receipts_root_and_bloom_checked {
                    "match"
                } else {
                    "n/a (pre-Byzantium)"
                }
                .to_string(),
                format!("{:.0}", b.plain_time_us_median),
                format!("{:.0}", b.probed_time_us_median),
            ]);
        }
        let _ = write!(md, "\n## Blocks\n\n{blocks}");
        md
    }
}

//! The call-stack report: whose time it is. Time and gas by contract and by (contract,
//! function), the costliest transactions of each block, and the files other tools read:
//! folded stacks, a flame graph and a pprof profile.
//!
//! Times are the sampled times of the opcode table, less the same calibrated probe cost per
//! instruction: every activity's time is scaled by its row's correction, so the contracts'
//! own times and the time outside any frame add up to the opcode table's total.
//!
//! Owns: the report's figures, its Markdown and JSON, and writing its files. Must not:
//! sample or replay.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use alloy_primitives::B256;
use eyre::{Context, Result};
use gigas_evm::probe::{Phase, ACTIVITY_COUNT};
use gigas_report::Table;
use serde::Serialize;

use crate::category::{opcode_category, opcode_name};
use crate::labels::Labels;
use crate::report::Report;
use crate::stacks::{CodeCost, Filter, StackProfile, TxCost, Weight};

/// What the call-stack report covers and how.
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// What stacks, flame graph and pprof weigh, and what the tables are ordered by.
    pub weight: Weight,
    /// Which samples are kept.
    pub filter: Filter,
    /// Names of contracts and functions.
    pub labels: Labels,
    /// Rows of the contract and function tables.
    pub top: usize,
    /// Transactions listed per block (by time, and by time per gas).
    pub top_txs: usize,
    /// The contracts' code (hash and length), for the JIT's hot list.
    pub codes: HashMap<alloy_primitives::Address, crate::replay::CodeInfo>,
    /// The JIT code cache's budget the hot list is sized for, in bytes of machine code.
    pub jit_budget_bytes: u64,
}

/// A row of the contract or function table.
#[derive(Debug, Clone, Serialize)]
pub struct CodeRow {
    /// `contract` or `contract:function`, named where a label is known.
    pub name: String,
    /// The code address.
    pub address: String,
    /// The selector, in a function row.
    pub selector: Option<String>,
    /// A precompile.
    pub precompile: bool,
    /// Time in its own code, seconds per pass.
    pub self_s: f64,
    /// Its share of the kept time.
    pub self_share: f64,
    /// Sampling error of that share (95 %).
    pub self_share_ci95: f64,
    /// Time in it and everything it called, seconds per pass.
    pub total_s: f64,
    /// Share of the kept time.
    pub total_share: f64,
    /// Sampling error of that share (95 %).
    pub total_share_ci95: f64,
    /// Frames entered per pass.
    pub calls: u64,
    /// Gas of its outermost frames, callees included, per pass.
    pub gas: u64,
    /// Gas of its own instructions per pass.
    pub self_gas: u64,
    /// `gas` as a share of the transactions' gas (beside `total_share`: what gas would say).
    pub gas_share: f64,
    /// Total time over total gas, nanoseconds per gas.
    pub ns_per_gas: Option<f64>,
    /// Its costliest activities inside its own code, with their share of its own time.
    pub top_activities: Vec<(String, f64)>,
}

/// A row of the transaction table.
#[derive(Debug, Clone, Serialize)]
pub struct TxRow {
    /// Block number.
    pub block: u64,
    /// Index in the block.
    pub index: u32,
    /// Hash.
    pub hash: String,
    /// What it called first (`contract:function`), or `transfer`.
    pub to: String,
    /// Sampled time, milliseconds per pass.
    pub time_ms: f64,
    /// Receipt gas.
    pub gas: u64,
    /// Time over gas, nanoseconds per gas.
    pub ns_per_gas: Option<f64>,
    /// Its rank in the block by time (1 = costliest), if in the top.
    pub rank_by_time: Option<usize>,
    /// Its rank in the block by time per gas, if in the top.
    pub rank_by_time_per_gas: Option<usize>,
}

/// A contract's share of what the JIT compiles: a row of `jit-hotlist.txt`.
#[derive(Debug, Clone, Serialize)]
pub struct JitRow {
    /// Its code: the hash the JIT's cache is keyed by, its length and the forks it runs
    /// under, when the pre-state holds it.
    pub code: Option<crate::replay::CodeInfo>,
    /// The contract, named where a label is known.
    pub name: String,
    /// Its address.
    pub address: String,
    /// Time in its own instructions that compiled code runs (not host calls, not the
    /// system's work, not precompiles), seconds per pass.
    pub compilable_s: f64,
    /// Time in its own code, seconds per pass.
    pub self_s: f64,
    /// The contract's own JIT ceiling: its own time over its own time less what compiled
    /// code could make free.
    pub ceiling: f64,
}

/// The call-stack report.
#[derive(Debug, Clone, Serialize)]
pub struct CallReport {
    /// What the stacks weigh.
    pub weight: Weight,
    /// `--contract`, if given.
    pub filter_contract: Option<String>,
    /// `--tx`, if given.
    pub filter_tx: Option<String>,
    /// Rounds the samples come from.
    pub rounds: u64,
    /// Samples kept.
    pub samples: u64,
    /// Kept time, seconds per pass.
    pub kept_s: f64,
    /// Of it, time in frames (contracts and precompiles), seconds per pass.
    pub in_frames_s: f64,
    /// Of it, time outside frames (transaction phases, the block loop), seconds per pass.
    pub outside_frames_s: f64,
    /// The opcode table's total, seconds per pass: without a filter, `kept_s` equals it.
    pub opcode_table_s: f64,
    /// Frames charged to their callers because a block's tree was full.
    pub dropped_frames: u64,
    /// Contracts, costliest first.
    pub contracts: Vec<CodeRow>,
    /// (contract, function) pairs, costliest first.
    pub functions: Vec<CodeRow>,
    /// The costliest transactions of each block.
    pub transactions: Vec<TxRow>,
    /// Every contract by the time compiled code could save in it, most first.
    pub jit: Vec<JitRow>,
}

/// The correction of each activity's sampled time: its opcode-table row's corrected time
/// over its raw time; idle time counts for nothing, as in the table.
fn corrections(report: &Report) -> Vec<f64> {
    let mut factor = vec![1.0; ACTIVITY_COUNT];
    factor[Phase::Idle as usize] = 0.0;
    for row in &report.rows {
        let index = match row.opcode {
            Some(op) => Some(op as usize),
            None => Phase::ALL
                .iter()
                .find(|p| p.name() == row.name)
                .map(|p| *p as usize),
        };
        if let Some(i) = index {
            factor[i] = if row.time_s_raw > 0.0 {
                row.time_s / row.time_s_raw
            } else {
                1.0
            };
        }
    }
    factor
}

/// An activity's name: the opcode, or the phase.
pub fn activity_name(activity: u16) -> String {
    if activity < 256 {
        opcode_name(activity as u8).to_string()
    } else {
        Phase::from_activity(activity)
            .map_or_else(|| format!("activity {activity}"), |p| p.name().to_string())
    }
}

impl CallReport {
    /// The report of `profile`, corrected as `report`'s opcode table is.
    pub fn build(profile: &StackProfile, report: &Report, options: &CallOptions) -> Self {
        let factor = corrections(report);
        let rounds = profile.rounds.max(1) as f64;
        // Nanoseconds per pass.
        let time = |activity: u16, nanos: u64| {
            nanos as f64 * factor.get(activity as usize).copied().unwrap_or(1.0) / rounds
        };
        let (kept_ns, samples) = profile.total(&options.filter, &time);
        let tx_costs = profile.tx_costs(&time);
        let all_gas: u64 = tx_costs.iter().map(|t| t.gas).sum();
        let labels = &options.labels;
        let share = |t: f64| if kept_ns > 0.0 { t / kept_ns } else { 0.0 };
        let ci95 = |s: u64| {
            if samples == 0 {
                return 0.0;
            }
            let p = s as f64 / samples as f64;
            1.96 * (p * (1.0 - p) / samples as f64).sqrt()
        };
        let row = |c: &CodeCost, with_function: bool| CodeRow {
            name: labels.code_name(&c.code, c.selector.as_ref(), c.precompile, with_function),
            address: format!("{:#x}", c.code),
            selector: c.selector.map(|s| format!("0x{}", hex::encode(s))),
            precompile: c.precompile,
            self_s: c.self_time / 1e9,
            self_share: share(c.self_time),
            self_share_ci95: ci95(c.self_samples),
            total_s: c.total_time / 1e9,
            total_share: share(c.total_time),
            total_share_ci95: ci95(c.total_samples),
            calls: c.calls,
            gas: c.gas,
            self_gas: c.self_gas,
            gas_share: if all_gas > 0 {
                c.gas as f64 / all_gas as f64
            } else {
                0.0
            },
            ns_per_gas: (c.gas > 0).then(|| c.total_time / c.gas as f64),
            top_activities: c
                .activities
                .iter()
                .take(3)
                .map(|&(a, t)| {
                    (
                        activity_name(a),
                        if c.self_time > 0.0 {
                            t / c.self_time
                        } else {
                            0.0
                        },
                    )
                })
                .collect(),
        };
        let order = |rows: &mut Vec<CodeCost>| {
            if options.weight == Weight::Gas {
                rows.sort_by(|a, b| {
                    b.gas
                        .cmp(&a.gas)
                        .then(b.total_time.total_cmp(&a.total_time))
                });
            }
        };
        let mut contracts = profile.code_costs(false, &options.filter, &time);
        order(&mut contracts);
        let in_frames_ns: f64 = contracts.iter().map(|c| c.self_time).sum();
        let mut functions = profile.code_costs(true, &options.filter, &time);
        order(&mut functions);
        let transactions = top_transactions(&tx_costs, options, labels);
        let jit = jit_rows(&contracts, options);
        Self {
            weight: options.weight,
            filter_contract: options.filter.contract.map(|a| format!("{a:#x}")),
            filter_tx: options.filter.tx.map(|h| format!("{h:#x}")),
            rounds: profile.rounds,
            samples,
            kept_s: kept_ns / 1e9,
            in_frames_s: in_frames_ns / 1e9,
            outside_frames_s: (kept_ns - in_frames_ns) / 1e9,
            opcode_table_s: report.attributed_seconds_per_pass,
            dropped_frames: profile.dropped_frames,
            contracts: contracts
                .iter()
                .take(options.top)
                .map(|c| row(c, false))
                .collect(),
            functions: functions
                .iter()
                .take(options.top)
                .map(|c| row(c, true))
                .collect(),
            transactions,
            jit,
        }
    }

    /// The report as Markdown, the flame graph referenced by file name.
    pub fn markdown(&self, flame_svg: &str) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# Gigas call-stack profile\n");
        let _ = writeln!(
            md,
            "- samples: {} over {} rounds; stacks, flame graph and pprof weigh **{}**{}{}",
            self.samples,
            self.rounds,
            match self.weight {
                Weight::Time => "time",
                Weight::Gas => "gas",
            },
            self.filter_contract
                .as_ref()
                .map_or(String::new(), |c| format!("; only frames of {c} and below")),
            self.filter_tx
                .as_ref()
                .map_or(String::new(), |t| format!("; only transaction {t}"))
        );
        let _ = writeln!(
            md,
            "- time kept: {:.6} s per pass = {:.6} s in contract and precompile frames + {:.6} s outside \
             frames (transaction phases, the block loop); the opcode table's total is {:.6} s ({:+.3}%)",
            self.kept_s,
            self.in_frames_s,
            self.outside_frames_s,
            self.opcode_table_s,
            if self.opcode_table_s > 0.0 {
                (self.kept_s / self.opcode_table_s - 1.0) * 100.0
            } else {
                0.0
            }
        );
        if self.dropped_frames > 0 {
            let _ = writeln!(
                md,
                "- {} frames were charged to their callers: a block's call tree reached its bound",
                self.dropped_frames
            );
        }
        let _ = writeln!(
            md,
            "\nTimes are seconds per pass (sampled, less the probe's calibrated cost, as in the \
             opcode table). *Self* is time in the code's own instructions; *total* adds \
             everything it called, each sample counted once however often the code recurs on \
             its stack. `±95%` is the sampling error of a share. Gas is exact: *gas* is what \
             its outermost frames spent with their callees (*gas share*: of all the transactions' \
             gas), *self gas* what its own instructions spent. ns/gas is total time over gas.\n"
        );
        for (title, rows) in [
            ("Contracts", &self.contracts),
            ("Functions (contract:function)", &self.functions),
        ] {
            let _ = writeln!(md, "## {title}\n");
            let _ = writeln!(md, "{}", code_table(rows));
        }
        let _ = writeln!(md, "## Costliest transactions of each block\n");
        let mut t = Table::new(
            "rrllrrrrr",
            [
                "block",
                "tx",
                "hash",
                "calls",
                "time (ms)",
                "gas",
                "ns/gas",
                "rank by time",
                "rank by ns/gas",
            ],
        );
        for tx in &self.transactions {
            t.row([
                tx.block.to_string(),
                tx.index.to_string(),
                format!("`{}`", &tx.hash),
                tx.to.clone(),
                format!("{:.3}", tx.time_ms),
                tx.gas.to_string(),
                tx.ns_per_gas.map_or("-".into(), |v| format!("{v:.2}")),
                tx.rank_by_time.map_or("-".into(), |r| r.to_string()),
                tx.rank_by_time_per_gas
                    .map_or("-".into(), |r| r.to_string()),
            ]);
        }
        let _ = writeln!(md, "{t}");
        let _ = writeln!(md, "## What the JIT could save, by contract\n");
        let _ = writeln!(
            md,
            "Time in each contract's own instructions of the kinds compiled code runs (stack, \
             arithmetic, control flow, memory: not host calls, the system's work or \
             precompiles), seconds per pass; its own JIT ceiling is its own time over what \
             would remain if that were free. `jit-hotlist.txt` takes from them, by code hash, \
             the code worth most per byte that fits the JIT's code cache, for \
             `gigas-sequencer --jit.hotlist`.\n"
        );
        let mut t = Table::new(
            "rlrrr",
            ["#", "contract", "compilable (s)", "own (s)", "own ceiling"],
        );
        for (i, r) in self.jit.iter().take(20).enumerate() {
            t.row([
                (i + 1).to_string(),
                r.name.clone(),
                format!("{:.6}", r.compilable_s),
                format!("{:.6}", r.self_s),
                ceiling_text(r.ceiling),
            ]);
        }
        let _ = writeln!(md, "{t}");
        let _ = writeln!(md, "## Flame graph\n");
        let _ = writeln!(md, "![flame graph]({flame_svg})\n");
        let _ = writeln!(
            md,
            "Each box is a frame: block → transaction → contract:function → … → the opcode or \
             phase that was executing. Its width is its share of the weight (time or gas); \
             boxes on top of it are what it called. Open the SVG in a browser to zoom and \
             search. `stacks.folded` holds the same stacks (Brendan Gregg's folded format), \
             `profile.pb.gz` a pprof profile (`go tool pprof -top profile.pb.gz`, Pyroscope, \
             Grafana, speedscope)."
        );
        md
    }
}

/// The contracts by the time compiled code runs in them (their own instructions of the
/// categories the JIT compiles), most first; precompiles and contracts without such time
/// left out.
fn jit_rows(contracts: &[CodeCost], options: &CallOptions) -> Vec<JitRow> {
    let mut rows: Vec<JitRow> = contracts
        .iter()
        .filter(|c| !c.precompile)
        .map(|c| {
            let compilable: f64 = c
                .activities
                .iter()
                .filter(|(a, _)| *a < 256 && !opcode_category(*a as u8).beyond_jit())
                .map(|(_, t)| t)
                .sum();
            let code = options.codes.get(&c.code).copied();
            JitRow {
                code,
                name: options.labels.contract_name(&c.code),
                address: format!("{:#x}", c.code),
                compilable_s: compilable / 1e9,
                self_s: c.self_time / 1e9,
                ceiling: own_ceiling(c.self_time, compilable),
            }
        })
        .filter(|r| r.compilable_s > 0.0)
        .collect();
    rows.sort_by(|a, b| b.compilable_s.total_cmp(&a.compilable_s));
    rows
}

/// A contract's own JIT ceiling: its own time over what would remain if its compilable
/// time were free (infinite when all of it is compilable).
fn own_ceiling(self_time: f64, compilable: f64) -> f64 {
    let rest = self_time - compilable;
    if rest > 0.0 {
        self_time / rest
    } else {
        f64::INFINITY
    }
}

fn ceiling_text(ceiling: f64) -> String {
    if ceiling.is_finite() {
        format!("{ceiling:.2}x")
    } else {
        "inf".to_string()
    }
}

/// Bytes of machine code the JIT emits per byte of EVM code: 32.1x to 33.3x on the shipped
/// mainnet blocks (`gigas-bench jit`, its code-cache table), rounded up.
pub const MACHINE_BYTES_PER_EVM_BYTE: u64 = 34;

/// One entry of the hot list: a code hash and every contract running it.
#[derive(Debug, Clone)]
struct HotEntry {
    hash: B256,
    first: usize,
    contracts: usize,
    compilable_s: f64,
    self_s: f64,
    code_bytes: usize,
    specs: u64,
}

impl HotEntry {
    /// Machine code it takes, estimated: one copy per fork it runs under.
    fn machine_bytes(&self) -> u64 {
        (self.code_bytes as u64)
            .saturating_mul(MACHINE_BYTES_PER_EVM_BYTE)
            .saturating_mul(u64::from(self.specs.count_ones().max(1)))
    }
}

/// `jit-hotlist.txt`: the code the JIT should keep compiled, chosen to fit
/// `options.jit_budget_bytes` of machine code (estimated at
/// [`MACHINE_BYTES_PER_EVM_BYTE`], once per fork the code runs under, since compiled code
/// is per fork): code hashes by the compilable time per byte of machine code,
/// taken greedily while they fit, then written most compilable time first. A list that
/// overflows the budget makes the cache evict and compile again on every pass, which costs
/// more than the list saves. One per line (`gigas-sequencer --jit.hotlist` and
/// `gigas-bench jit --hotlist` read the first column).
pub fn hot_list_text(calls: &CallReport, budget_bytes: u64) -> String {
    let all: f64 = calls.jit.iter().map(|r| r.compilable_s).sum();
    let mut entries: Vec<HotEntry> = Vec::new();
    let mut by_hash: HashMap<B256, usize> = HashMap::new();
    for (i, row) in calls.jit.iter().enumerate() {
        let Some(code) = row.code else {
            continue;
        };
        match by_hash.get(&code.hash) {
            Some(&k) => {
                let e = &mut entries[k];
                e.contracts += 1;
                e.compilable_s += row.compilable_s;
                e.self_s += row.self_s;
                e.specs |= code.specs;
            }
            None => {
                by_hash.insert(code.hash, entries.len());
                entries.push(HotEntry {
                    hash: code.hash,
                    first: i,
                    contracts: 1,
                    compilable_s: row.compilable_s,
                    self_s: row.self_s,
                    code_bytes: code.bytes,
                    specs: code.specs,
                });
            }
        }
    }
    let density = |e: &HotEntry| e.compilable_s / e.machine_bytes().max(1) as f64;
    entries.sort_by(|a, b| density(b).total_cmp(&density(a)));
    let mut chosen = Vec::new();
    let mut machine = 0u64;
    for e in entries {
        let need = e.machine_bytes();
        if machine.saturating_add(need) <= budget_bytes {
            machine += need;
            chosen.push(e);
        }
    }
    chosen.sort_by(|a, b| b.compilable_s.total_cmp(&a.compilable_s));
    let covered: f64 = chosen.iter().map(|e| e.compilable_s).sum();
    let mut text =
        format!(
        "# gigas-profiler: the code to keep compiled in a {:.0} MiB code cache: {} code hashes, \
         about {:.1} MiB of machine code, {:.1}% of the time compiled code could run.\n\
         # code hash, address, name (+ other contracts with this code), compilable ms per \
         pass, own ms per pass, own JIT ceiling, EVM bytes\n",
        budget_bytes as f64 / (1 << 20) as f64,
        chosen.len(),
        machine as f64 / (1 << 20) as f64,
        if all > 0.0 { 100.0 * covered / all } else { 0.0 },
    );
    for e in &chosen {
        let row = &calls.jit[e.first];
        let others = if e.contracts > 1 {
            format!("+{}", e.contracts - 1)
        } else {
            String::new()
        };
        let _ = writeln!(
            text,
            "{:#x} {} {}{others} {:.4} {:.4} {} {}",
            e.hash,
            row.address,
            row.name.replace(char::is_whitespace, "_"),
            e.compilable_s * 1e3,
            e.self_s * 1e3,
            ceiling_text(own_ceiling(e.self_s, e.compilable_s)),
            e.code_bytes,
        );
    }
    text
}

fn code_table(rows: &[CodeRow]) -> String {
    let mut t = Table::new(
        "rlrrrrrrrrrrrl",
        [
            "#",
            "code",
            "self (s)",
            "self share",
            "±95%",
            "total (s)",
            "total share",
            "±95%",
            "calls",
            "gas",
            "gas share",
            "self gas",
            "ns/gas",
            "top opcodes (share of self)",
        ],
    );
    for (i, r) in rows.iter().enumerate() {
        t.row([
            (i + 1).to_string(),
            r.name.clone(),
            format!("{:.6}", r.self_s),
            format!("{:.2}%", r.self_share * 100.0),
            format!("{:.2}%", r.self_share_ci95 * 100.0),
            format!("{:.6}", r.total_s),
            format!("{:.2}%", r.total_share * 100.0),
            format!("{:.2}%", r.total_share_ci95 * 100.0),
            r.calls.to_string(),
            r.gas.to_string(),
            format!("{:.2}%", r.gas_share * 100.0),
            r.self_gas.to_string(),
            r.ns_per_gas.map_or("-".into(), |v| format!("{v:.2}")),
            r.top_activities
                .iter()
                .map(|(name, s)| format!("{name} {:.0}%", s * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    t.to_string()
}

/// The top transactions of each block by time and by time per gas.
fn top_transactions(txs: &[TxCost], options: &CallOptions, labels: &Labels) -> Vec<TxRow> {
    let mut rows = Vec::new();
    let mut at = 0;
    while at < txs.len() {
        let block = txs[at].block;
        let end = txs[at..]
            .iter()
            .position(|t| t.block != block)
            .map_or(txs.len(), |p| at + p);
        let in_block = &txs[at..end];
        let keep = |t: &&TxCost| {
            options.filter.tx.is_none_or(|h| h == t.hash) && (t.samples > 0 || t.gas > 0)
        };
        let mut by_time: Vec<&TxCost> = in_block.iter().filter(keep).collect();
        by_time.sort_by(|a, b| b.time.total_cmp(&a.time));
        let mut by_density: Vec<&TxCost> =
            in_block.iter().filter(keep).filter(|t| t.gas > 0).collect();
        by_density.sort_by(|a, b| (b.time / b.gas as f64).total_cmp(&(a.time / a.gas as f64)));
        let mut listed: Vec<(B256, TxRow)> = Vec::new();
        for (rank, tx) in by_time.iter().take(options.top_txs).enumerate() {
            let mut row = tx_row(tx, labels);
            row.rank_by_time = Some(rank + 1);
            listed.push((tx.hash, row));
        }
        for (rank, tx) in by_density.iter().take(options.top_txs).enumerate() {
            match listed
                .iter_mut()
                .find(|(h, r)| *h == tx.hash && r.index == tx.index)
            {
                Some((_, row)) => row.rank_by_time_per_gas = Some(rank + 1),
                None => {
                    let mut row = tx_row(tx, labels);
                    row.rank_by_time_per_gas = Some(rank + 1);
                    listed.push((tx.hash, row));
                }
            }
        }
        rows.extend(listed.into_iter().map(|(_, r)| r));
        at = end;
    }
    rows
}

fn tx_row(tx: &TxCost, labels: &Labels) -> TxRow {
    TxRow {
        block: tx.block,
        index: tx.index,
        hash: format!("{:#x}", tx.hash),
        to: match tx.to {
            Some(code) => labels.code_name(&code, tx.selector.as_ref(), false, true),
            None => "transfer".into(),
        },
        time_ms: tx.time / 1e6,
        gas: tx.gas,
        ns_per_gas: (tx.gas > 0).then(|| tx.time / tx.gas as f64),
        rank_by_time: None,
        rank_by_time_per_gas: None,
    }
}

/// Files written by [`write`].
pub const FILES: &str =
    "calls.md, calls.json, stacks.folded, flame.svg, profile.pb.gz, jit-hotlist.txt";

/// Writes the call-stack report and its files into `out`: `calls.md`, `calls.json`,
/// `stacks.folded`, `flame.svg` and `profile.pb.gz`.
pub fn write(
    profile: &StackProfile,
    report: &Report,
    options: &CallOptions,
    out: &Path,
) -> Result<CallReport> {
    let calls = CallReport::build(profile, report, options);
    let factor = corrections(report);
    // The files carry the time of every round (nanoseconds), so that nothing rounds away.
    let time = |activity: u16, nanos: u64| {
        nanos as f64 * factor.get(activity as usize).copied().unwrap_or(1.0)
    };
    let name = |label: &crate::stacks::Label| options.labels.frame_name(label);
    let stacks = profile.weighted_stacks(
        options.weight,
        &options.filter,
        &name,
        &activity_name,
        &time,
    );
    let folded: Vec<String> = stacks.iter().filter_map(|s| s.folded()).collect();
    let mut text = folded.join("\n");
    text.push('\n');
    let path = out.join("stacks.folded");
    std::fs::write(&path, text).wrap_err_with(|| format!("cannot write {}", path.display()))?;

    let (title, unit) = match options.weight {
        Weight::Time => (
            format!(
                "EVM time by call stack ({} blocks, {} rounds)",
                report.configuration.blocks, profile.rounds
            ),
            "ns",
        ),
        Weight::Gas => (
            format!(
                "EVM gas by call stack ({} blocks)",
                report.configuration.blocks
            ),
            "gas",
        ),
    };
    let svg = out.join("flame.svg");
    crate::flame::write_svg(&folded, &title, unit, &svg)
        .wrap_err_with(|| format!("cannot draw {}", svg.display()))?;

    let types: Vec<crate::pprof::SampleType<'_>> = match options.weight {
        Weight::Time => vec![
            crate::pprof::SampleType {
                kind: "samples",
                unit: "count",
            },
            crate::pprof::SampleType {
                kind: "time",
                unit: "nanoseconds",
            },
        ],
        Weight::Gas => vec![crate::pprof::SampleType {
            kind: "gas",
            unit: "count",
        }],
    };
    let mut pprof = crate::pprof::Builder::new(&types);
    for s in &stacks {
        let frames: Vec<&str> = s.frames.iter().map(String::as_str).collect();
        let value = s.value.round() as i64;
        match options.weight {
            Weight::Time => pprof.add(&frames, &[s.samples as i64, value]),
            Weight::Gas => pprof.add(&frames, &[value]),
        }
    }
    pprof.duration_nanos(
        (report.probed_execution_seconds.median * 1e9 * profile.rounds as f64) as i64,
    );
    let path = out.join("profile.pb.gz");
    let bytes = pprof
        .encode_gzip()
        .wrap_err("cannot compress the pprof profile")?;
    std::fs::write(&path, bytes).wrap_err_with(|| format!("cannot write {}", path.display()))?;

    let json = serde_json::to_string_pretty(&calls).wrap_err("cannot serialise the call report")?;
    let path = out.join("calls.json");
    std::fs::write(&path, json).wrap_err_with(|| format!("cannot write {}", path.display()))?;
    let path = out.join("calls.md");
    std::fs::write(&path, calls.markdown("flame.svg"))
        .wrap_err_with(|| format!("cannot write {}", path.display()))?;
    let path = out.join("jit-hotlist.txt");
    std::fs::write(&path, hot_list_text(&calls, options.jit_budget_bytes))
        .wrap_err_with(|| format!("cannot write {}", path.display()))?;
    Ok(calls)
}

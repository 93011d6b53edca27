//! What a replay prints and how its runs are labelled and summed up, apart from the replay
//! itself, so the reporting can change without touching what is timed.

use gigas_primitives::machine::Machine;

use super::figures::{GenesisInfo, RunResult};
use super::mode::Mode;
use super::{FullnodeArgs, FullnodeConfig, ModeSummary};

/// How a memory limit reads in labels: `512 MiB`, `8 GiB`, `no limit`.
pub fn limit_label(limit: Option<u64>) -> String {
    match limit {
        None => "no limit".to_string(),
        Some(b) if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        Some(b) if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        Some(b) => format!("{} MiB", b >> 20),
    }
}

/// A run's label: the mode's, with the limit when there is one.
pub(super) fn run_label(mode: Mode, limit: Option<u64>) -> String {
    match limit {
        None => mode.label(),
        Some(_) => format!("{}, under {}", mode.label(), limit_label(limit)),
    }
}

pub(super) fn summarize(
    args: &FullnodeArgs,
    limits: &[Option<u64>],
    runs: &[RunResult],
) -> Vec<ModeSummary> {
    limits
        .iter()
        .flat_map(|&limit| {
            args.mode_list_for(limit)
                .into_iter()
                .map(move |mode| (mode, limit))
        })
        .filter_map(|(mode, limit)| {
            let of: Vec<(usize, &RunResult)> = runs
                .iter()
                .enumerate()
                .filter(|(_, r)| r.mode == mode && r.memory_limit_bytes == limit)
                .collect();
            let rates: Vec<f64> = of.iter().map(|(_, r)| r.changes_per_second).collect();
            let median = crate::median(rates.clone());
            // The run closest to the median, whose split is shown.
            let (median_run, _) = of.iter().min_by(|a, b| {
                (a.1.changes_per_second - median)
                    .abs()
                    .total_cmp(&(b.1.changes_per_second - median).abs())
            })?;
            Some(ModeSummary {
                mode,
                label: run_label(mode, limit),
                memory_limit_bytes: limit,
                runs: of.len(),
                changes_per_second: median,
                changes_per_second_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
                changes_per_second_max: rates.iter().copied().fold(0.0, f64::max),
                transfers_per_second: crate::median(
                    of.iter().map(|(_, r)| r.transfers_per_second).collect(),
                ),
                blocks_per_second: crate::median(
                    of.iter().map(|(_, r)| r.blocks_per_second).collect(),
                ),
                target_changes_per_second: mode.target(),
                median_run: *median_run,
            })
        })
        .collect()
}

pub(super) fn print_config(c: &FullnodeConfig, machine: &Machine, genesis: &GenesisInfo) {
    println!("gigas-bench fullnode configuration");
    println!("  state      : {} accounts of seed {}", c.accounts, c.seed);
    println!("  recording  : {}", c.recording);
    println!(
        "  genesis    : {} ({:.2} GB on disk; gigas_fullnode::genesis::initialize took {:.1} s{})",
        genesis.dir.display(),
        genesis.disk_bytes as f64 / 1e9,
        genesis.seconds,
        if genesis.built_now {
            ", this run"
        } else {
            ", cached"
        }
    );
    println!("  modes      : {}", c.modes.join("; "));
    println!("  rounds     : {} (modes alternated A B, B A, ...)", c.runs);
    println!("  statedb    : {}", c.statedb_options);
    println!("  scratch    : {}", c.scratch);
    println!("  apply path : gigas_fullnode::apply::Applier (verify, write, root, commit) and, live, gigas_fullnode::ahead (the applied-block log, redo records), as the node runs them");
    println!("  source     : {}", c.source);
    println!(
        "  build      : {}; machine: {}",
        crate::build_profile(),
        machine.describe()
    );
}

pub(super) fn print_run(r: &RunResult) {
    let split: Vec<String> = r
        .split
        .iter()
        .map(|p| format!("{} {:.0}%", p.name, p.share * 100.0))
        .collect();
    println!(
        "round {} {}: {} blocks, {} changes in {:.2} s: {:.0} changes/s, {:.0} transfers/s, {:.1} blocks/s; {}{}{}",
        r.round,
        r.label,
        r.blocks,
        r.changes,
        r.seconds,
        r.changes_per_second,
        r.transfers_per_second,
        r.blocks_per_second,
        split.join(", "),
        match r.final_root_seconds {
            Some(s) => format!("; final root {s:.1} s"),
            None => String::new(),
        },
        match (&r.cgroup, r.complete) {
            (Some(c), complete) => format!(
                "; cgroup v{}: peak {:.0} MiB of {:.0} MiB, {} major faults{}",
                c.version,
                c.peak_bytes as f64 / 1048576.0,
                c.limit_bytes as f64 / 1048576.0,
                c.major_faults,
                if complete { "" } else { "; stopped by --max-run-time" }
            ),
            (None, false) => "; stopped by --max-run-time".to_string(),
            (None, true) => String::new(),
        }
    );
    if let Some(s) = &r.snapshots {
        println!(
            "  snapshots beside it: {} written (blocks {:?}) in {} s each, the last {:.1} MiB; producer CPU {:.1} s of the run's {:.1} s{}",
            s.written,
            s.blocks,
            s.seconds
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            s.last_bytes as f64 / 1048576.0,
            s.cpu_seconds,
            r.cpu_seconds,
            if s.failed > 0 {
                format!(
                    "; {} failed, the last: {}",
                    s.failed,
                    s.last_error.as_deref().unwrap_or("?")
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(e) = &r.execution {
        println!(
            "  re-execution: {} blocks, {} transactions, {:.0} Mgas/s; EVM {:.2} s, state loading {:.2} s ({:.0}%), prepare {:.2} s, compare {:.2} s; misses: level 1 {:.1}% ({} reads of {} accesses), level 2 {:.1}% ({} reads with a major fault), {:.2}% to the disk; read {:.1} µs clean{}",
            e.blocks,
            e.transactions,
            e.gas_per_second / 1e6,
            e.evm_seconds,
            e.state_loading_seconds,
            e.state_loading_share * 100.0,
            e.prepare_seconds,
            e.compare_seconds,
            e.level1_miss_ratio * 100.0,
            e.reads,
            e.accesses,
            e.level2_miss_ratio * 100.0,
            e.faulting_reads,
            e.disk_ratio * 100.0,
            e.clean_read_us,
            match (e.faulting_read_us, e.miss_penalty_us) {
                (Some(f), Some(p)) => format!(", {f:.1} µs with a fault: miss penalty {p:.1} µs"),
                _ => String::new(),
            }
        );
    }
}

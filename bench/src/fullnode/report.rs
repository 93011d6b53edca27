//! The report: JSON, Markdown (configuration first) and an SVG of each mode's split.

use std::fmt::Write as _;
use std::path::Path;

use super::FullnodeReport;
use crate::chart::{stacked_bars, Bar};
use crate::Table;
use eyre::{eyre, Result};

const GB: f64 = 1e9;
const MIB: f64 = (1u64 << 20) as f64;

fn bytes_opt(b: Option<u64>, unit: f64, digits: usize) -> String {
    b.map_or("-".into(), |b| format!("{:.digits$}", b as f64 / unit))
}

/// The report as Markdown.
pub fn markdown(r: &FullnodeReport) -> String {
    let mut md = String::new();
    let m = &r.recording;
    let _ = writeln!(md, "# Full node: applying the sequencer's state diffs\n");
    let _ = writeln!(md, "## Configuration\n");
    let _ = writeln!(
        md,
        "- state: {} accounts of seed {} (the benchmark genesis)",
        r.config.accounts, r.config.seed
    );
    let _ = writeln!(md, "- recording: {}", r.config.recording);
    let _ = writeln!(
        md,
        "- genesis: `gigas_fullnode::genesis::initialize` (check diff 0, write {} accounts, compute the root and store the whole trie) took **{:.1} s**{}; {:.2} GB on disk ({:.2} GB of pages in use); each run starts from a copy of it ({:.1} s to copy and sync, median)",
        r.genesis.accounts,
        r.genesis.seconds,
        if r.genesis.built_now { " in this run" } else { " when it was cached" },
        r.genesis.disk_bytes as f64 / GB,
        r.genesis.used_bytes as f64 / GB,
        r.genesis.copy_seconds
    );
    let _ = writeln!(
        md,
        "- apply path: `gigas_fullnode::apply::Applier` as the node runs it (verify the frame, the signature and the checksum chain while decoding against the state; write the state (in memory until the commit), code, index keys and header; root; in live modes, as the node serves each block before its commit, append its diff to the applied-block log and record its redo record; commit); the diffs were read into memory before the clock started"
    );
    let _ = writeln!(md, "- modes: {}", r.config.modes.join("; "));
    let _ = writeln!(
        md,
        "- rounds: {}, modes alternated (A B, B A, ...); medians with the slowest and fastest run",
        r.config.runs
    );
    let _ = writeln!(md, "- statedb: `{}`", r.config.statedb_options);
    let _ = writeln!(md, "- scratch: {}", r.config.scratch);
    let _ = writeln!(md, "- source: {}", r.config.source);
    let _ = writeln!(
        md,
        "- build: {}; machine: {}; no memory limit\n",
        r.build_profile,
        r.machine.describe()
    );

    let _ = writeln!(md, "## Throughput\n");
    let mut t = Table::new(
        "lrrrrrrlrrr",
        [
            "mode",
            "runs",
            "state changes/s (median)",
            "slowest - fastest",
            "transfers/s",
            "blocks/s",
            "target",
            "",
            "final root s",
            "db on disk GB",
            "peak RSS MiB",
        ],
    );
    for s in &r.summary {
        let run = r.runs.get(s.median_run);
        t.row([
            s.label.to_string(),
            s.runs.to_string(),
            format!("**{:.0}**", s.changes_per_second),
            format!(
                "{:.0} - {:.0}",
                s.changes_per_second_min, s.changes_per_second_max
            ),
            format!("{:.0}", s.transfers_per_second),
            format!("{:.1}", s.blocks_per_second),
            format!("{:.0}", s.target_changes_per_second),
            if s.changes_per_second >= s.target_changes_per_second {
                "met"
            } else {
                "missed"
            }
            .to_string(),
            run.and_then(|x| x.final_root_seconds)
                .map_or("-".into(), |x| format!("{x:.1}")),
            run.map_or("-".into(), |x| {
                format!("{:.2}", x.db_disk_bytes as f64 / GB)
            }),
            bytes_opt(run.and_then(|x| x.peak_rss_bytes), MIB, 0),
        ]);
    }
    let _ = write!(md, "{t}");
    let _ = writeln!(
        md,
        "\nState changes: account and slot changes applied (a transfer changes its sender and receiver; an account changed by several transactions of a block counts once per block). Transfers: gas / 21,000. Batched: the one root at the end rebuilds the whole trie from the hashed tables (the batched mode keeps none), timed apart; the db and RSS columns are the median run's.\n"
    );
    let _ = writeln!(md, "## Where the time goes (the median run of each mode)\n");
    let _ = writeln!(
        md,
        "decode: frame, CRC, zstd; verify: header hash, signature recovery, checksum chain; read: decoding the body against the state (the key index and the prior values: the state's pages); write: the state into the group (in memory), code, index keys and headers into the open transaction; trie: the MPT update and its branch nodes (live only; it includes the block's hashed-table writes, which a root flushes first); commit: the group's sorted hashed-table writes, then MDBX's commit and sync; waiting: the writer's thread waiting for the decode thread's next block; other: the loop around them. Decoded ahead, decode, verify and read run on the decode thread beside the others, so the shares add up to more than 100 %.\n"
    );
    let names: Vec<&str> = r
        .summary
        .first()
        .and_then(|s| r.runs.get(s.median_run))
        .map(|run| run.split.iter().map(|p| p.name).collect())
        .unwrap_or_default();
    let mut t = Table::new(
        &format!("lr{}", "r".repeat(names.len())),
        ["mode", "seconds"].into_iter().chain(names.iter().copied()),
    );
    for s in &r.summary {
        let Some(run) = r.runs.get(s.median_run) else {
            continue;
        };
        let mut cells = vec![s.label.to_string(), format!("{:.2}", run.seconds)];
        cells.extend(run.split.iter().map(|p| {
            format!(
                "{:.2} s, {:.0}% ({:.2} us/change)",
                p.seconds,
                p.share * 100.0,
                p.us_per_change
            )
        }));
        t.row(cells);
    }
    let _ = write!(md, "{t}");
    let _ = writeln!(md, "\n![split](fullnode-split.svg)\n");

    let _ = writeln!(md, "## Each run\n");
    let mut t = Table::new(
        "rlrrrrrrlrrrrrrlrl",
        [
            "round",
            "mode",
            "blocks",
            "changes",
            "seconds",
            "changes/s",
            "commits",
            "MDBX commit s",
            "syncs (s)",
            "roots",
            "final root s",
            "CPU s",
            "major faults",
            "read MB",
            "written MB",
            "db GB (disk / used)",
            "peak RSS MiB",
            "RSS anon / file MiB",
        ],
    );
    for run in &r.runs {
        t.row([
            run.round.to_string(),
            run.mode.short(),
            run.blocks.to_string(),
            run.changes.to_string(),
            format!("{:.2}", run.seconds),
            format!("{:.0}", run.changes_per_second),
            run.commits.to_string(),
            format!("{:.2}", run.mdbx_commit_seconds),
            format!("{} ({:.2})", run.syncs, run.sync_seconds),
            run.roots.to_string(),
            match (run.final_root_seconds, run.final_root_commit_seconds) {
                (Some(root), Some(commit)) => format!("{root:.1} + {commit:.1}"),
                _ => "-".into(),
            },
            format!("{:.2}", run.cpu_seconds),
            run.major_faults.to_string(),
            format!("{:.1}", run.read_bytes as f64 / 1e6),
            format!("{:.1}", run.write_bytes as f64 / 1e6),
            format!(
                "{:.2} / {:.2}",
                run.db_disk_bytes as f64 / GB,
                run.db_used_bytes as f64 / GB
            ),
            bytes_opt(run.peak_rss_bytes, MIB, 0),
            format!(
                "{} / {}",
                bytes_opt(run.rss_anon_bytes, MIB, 0),
                bytes_opt(run.rss_file_bytes, MIB, 0)
            ),
        ]);
    }
    let _ = writeln!(md, "{t}");
    if r.runs.iter().any(|run| run.trie_cache.is_some()) {
        let _ = writeln!(md, "## Trie cache (live)\n");
        let _ = writeln!(
            md,
            "The writer's stored trie nodes kept in memory across roots (`--trie.cache-size`); counters cover the warm-up blocks too.\n"
        );
        let mut t = Table::new(
            "rlrrrrrrrrrr",
            [
                "round",
                "mode",
                "budget MiB",
                "held MiB",
                "entries",
                "node hits",
                "node misses",
                "hit ratio",
                "leaves from remembered hashes",
                "leaves hashed",
                "walks redone",
                "evicted",
            ],
        );
        for run in &r.runs {
            let Some(c) = &run.trie_cache else { continue };
            let seeks = c.hits + c.misses;
            t.row([
                run.round.to_string(),
                run.mode.short(),
                (c.budget_bytes >> 20).to_string(),
                format!("{:.1}", c.bytes as f64 / MIB),
                c.entries.to_string(),
                c.hits.to_string(),
                c.misses.to_string(),
                if seeks > 0 {
                    format!("{:.1}%", c.hits as f64 * 100.0 / seeks as f64)
                } else {
                    "-".into()
                },
                run.root_remembered.to_string(),
                run.root_leaves.to_string(),
                run.root_rereads.to_string(),
                c.evicted.to_string(),
            ]);
        }
        let _ = writeln!(md, "{t}");
    }
    if r.runs.iter().any(|run| run.sparse_trie.is_some()) {
        let _ = writeln!(md, "## Account trie in memory (live)\n");
        let _ = writeln!(
            md,
            "The account trie held across roots (`--trie.sparse-size`), at the end of each run; counters cover the warm-up blocks too.\n"
        );
        let mut t = Table::new(
            "rlrrrrr",
            [
                "round",
                "mode",
                "budget MiB",
                "held MiB",
                "nodes",
                "folded back",
                "leaves read to load",
            ],
        );
        for run in &r.runs {
            let Some(n) = &run.sparse_trie else { continue };
            t.row([
                run.round.to_string(),
                run.mode.short(),
                (n.budget_bytes >> 20).to_string(),
                format!("{:.1}", n.bytes as f64 / MIB),
                n.nodes.to_string(),
                n.pruned.to_string(),
                n.loaded_leaves.to_string(),
            ]);
        }
        let _ = writeln!(md, "{t}");
    }
    if r.runs.iter().any(|run| run.first_block.is_some()) {
        let _ = writeln!(md, "## First block after opening\n");
        let _ = writeln!(
            md,
            "The first block with changes a fresh writer applied (the first warm-up block), its root included: what a restart costs, with the trie in memory empty and the page cache as the scratch line above says. Beside it, the timed blocks' mean.\n"
        );
        let mut t = Table::new(
            "rlrrrrr",
            [
                "round",
                "mode",
                "changes",
                "ms",
                "us per change",
                "timed us per change",
                "ratio",
            ],
        );
        for run in &r.runs {
            let Some(f) = &run.first_block else { continue };
            let per_change = |seconds: f64, changes: u64| seconds * 1e6 / changes.max(1) as f64;
            let first = per_change(f.seconds, f.changes);
            let timed = per_change(run.seconds, run.changes);
            t.row([
                run.round.to_string(),
                run.mode.short(),
                f.changes.to_string(),
                format!("{:.1}", f.seconds * 1e3),
                format!("{first:.2}"),
                format!("{timed:.2}"),
                format!("{:.1}x", if timed > 0.0 { first / timed } else { 0.0 }),
            ]);
        }
        let _ = writeln!(md, "{t}");
    }
    let preloads: Vec<_> = r
        .runs
        .iter()
        .filter_map(|run| Some((run, run.preload?)))
        .collect();
    if !preloads.is_empty() {
        let _ = writeln!(md, "## Account trie loaded at open\n");
        let _ = writeln!(
            md,
            "With `--preload-trie`, the writer loaded the account trie with the stored branch nodes when it opened, before any block (on every core the run had), within three quarters of its budget:\n"
        );
        let mut t = Table::new(
            "rlrrrr",
            ["round", "mode", "seconds", "nodes", "MiB", "leaves read"],
        );
        for (run, p) in preloads {
            t.row([
                run.round.to_string(),
                run.mode.short(),
                format!("{:.2}", p.seconds),
                p.nodes.to_string(),
                format!("{:.1}", p.bytes as f64 / (1u64 << 20) as f64),
                p.leaves.to_string(),
            ]);
        }
        let _ = writeln!(md, "{t}");
    }
    if r.runs.iter().any(|run| run.execution.is_some()) {
        let _ = writeln!(md, "## Re-execution (`--verify-execution`)\n");
        let _ = writeln!(
            md,
            "Each timed block re-executed with `gigas_fullnode::reexec` over the state before it, then checked against the block file's receipts, the header and the diff's ChangeSet. Level 1: revm's `CacheDB` (a miss is a read of the database); level 2: the page cache (a miss is a read with a major fault). Miss penalty: mean µs of a faulting read minus that of a clean one.\n"
        );
        let mut t = Table::new(
            "rlrrrlrllrrr",
            [
                "round",
                "mode",
                "blocks",
                "Mgas/s",
                "EVM s",
                "state loading s (share)",
                "prepare s",
                "level-1 misses",
                "level-2 misses",
                "to the disk",
                "clean read µs",
                "miss penalty µs",
            ],
        );
        for run in &r.runs {
            let Some(e) = &run.execution else { continue };
            t.row([
                run.round.to_string(),
                run.label.to_string(),
                e.blocks.to_string(),
                format!("{:.0}", e.gas_per_second / 1e6),
                format!("{:.2}", e.evm_seconds),
                format!(
                    "{:.2} ({:.0}%)",
                    e.state_loading_seconds,
                    e.state_loading_share * 100.0
                ),
                format!("{:.2}", e.prepare_seconds),
                format!(
                    "{:.1}% ({} of {})",
                    e.level1_miss_ratio * 100.0,
                    e.reads,
                    e.accesses
                ),
                format!("{:.1}% ({})", e.level2_miss_ratio * 100.0, e.faulting_reads),
                format!("{:.2}%", e.disk_ratio * 100.0),
                format!("{:.2}", e.clean_read_us),
                e.miss_penalty_us
                    .map_or_else(|| "-".to_string(), |p| format!("{p:.1}")),
            ]);
        }
        let _ = writeln!(md, "{t}");
    }
    let _ = writeln!(md, "## Checks\n");
    let _ = writeln!(
        md,
        "- every run ended at block {} with hash `{}`: {}",
        m.last,
        m.last_hash,
        if r.heads_match { "yes" } else { "NO" }
    );
    let _ = writeln!(
        md,
        "- every complete run's final root is the same (`{}`): {}{}",
        r.runs
            .iter()
            .find(|x| x.complete)
            .map_or("-", |x| x.final_root.as_str()),
        if r.roots_agree { "yes" } else { "NO" },
        match r.runs.iter().filter(|x| !x.complete).count() {
            0 => String::new(),
            n => format!(
                " ({n} runs stopped by --max-run-time before the last block: not part of these two checks)"
            ),
        }
    );
    match (
        r.live_root_from_scratch_matches,
        r.runs.iter().find_map(|x| x.root_from_scratch_seconds),
    ) {
        (Some(ok), Some(s)) => {
            let _ = writeln!(
                md,
                "- the live root equals the root recomputed from scratch from the hashed tables ({s:.1} s): {}",
                if ok { "yes" } else { "NO" }
            );
        }
        _ => {
            let _ = writeln!(md, "- live root against a root from scratch: not checked");
        }
    }
    md
}

/// Microseconds per state change by phase, one stacked bar per mode (its median run).
fn chart(r: &FullnodeReport, file: &Path) -> Result<()> {
    let bars: Vec<Bar> = r
        .summary
        .iter()
        .filter_map(|s| {
            let run = r.runs.get(s.median_run)?;
            Some(Bar {
                label: s.label.clone(),
                parts: run
                    .split
                    .iter()
                    .map(|p| (p.name.to_string(), p.us_per_change))
                    .collect(),
            })
        })
        .collect();
    stacked_bars(
        file,
        &format!(
            "Apply time per state change by phase, {} accounts (median run of each mode)",
            r.config.accounts
        ),
        "microseconds per state change",
        &bars,
    )
}

/// Writes `fullnode.json`, `fullnode.md` and `fullnode-split.svg` under `out`.
pub(super) fn write(r: &FullnodeReport, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| eyre!("cannot create {}: {e}", out.display()))?;
    if let Err(e) = chart(r, &out.join("fullnode-split.svg")) {
        eprintln!("{e:#}");
    }
    crate::write_report(out, "fullnode", r, &markdown(r))
}

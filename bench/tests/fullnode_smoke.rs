//! A small `gigas-bench fullnode`: a benchmark genesis of 300 accounts, a real
//! `gigas-sequencer` recorded for a few blocks of signed transfers, then the diffs replayed
//! through the full node's `Applier` batched and live. Checks that both modes end at the
//! recording's last block with its hash, agree on the root, and that the live root equals
//! one recomputed from scratch; and that a second run takes the recording and the genesis
//! database from the cache. No rate is asserted. (The real run is `gigas-bench fullnode`.)

mod common;

use std::path::Path;

use clap::Parser;
use common::sequencer_binary;
use gigas_bench::fullnode::{run, DurabilityArg, FullnodeArgs, Mode, PageCache, RootArg};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: FullnodeArgs,
}

fn args(dir: &Path, bin: &Path, extra: &[&str]) -> FullnodeArgs {
    args_over(dir, bin, 300, extra)
}

/// As [`args`], over a genesis of `accounts` (cached under `dir`).
fn args_over(dir: &Path, bin: &Path, accounts: u64, extra: &[&str]) -> FullnodeArgs {
    let accounts = accounts.to_string();
    let mut argv: Vec<String> = [
        "fullnode",
        "--accounts",
        &accounts,
        "--seed",
        "5",
        "--rate",
        "150",
        "--blocks",
        "8",
        "--runs",
        "1",
        "--group",
        "3",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (flag, path) in [
        ("--sequencer-bin", bin.to_path_buf()),
        ("--genesis-dir", dir.join("genesis")),
        ("--cache-dir", dir.join("cache")),
        ("--out", dir.join("out")),
    ] {
        argv.push(flag.into());
        argv.push(path.display().to_string());
    }
    argv.extend(extra.iter().map(|s| s.to_string()));
    Cli::try_parse_from(&argv).expect("arguments").args
}

#[test]
fn a_small_recording_replays_batched_and_live_to_the_same_state() {
    let bin = sequencer_binary();
    let dir = tempfile::tempdir().expect("tempdir");

    let report = run(&args(dir.path(), &bin, &[]))
        .expect("record and replay")
        .expect("a report");
    let m = &report.recording;
    assert!(m.transactions > 0 && m.first_loaded >= 1 && m.last >= m.first_loaded);
    assert!(m.loaded_blocks <= 8, "{m:?}");
    assert_eq!(m.gas_used, m.transactions * 21_000, "transfers only");
    assert!(report.genesis.built_now && report.genesis.accounts >= 300);

    assert_eq!(report.runs.len(), 2);
    let modes: Vec<Mode> = report.runs.iter().map(|r| r.mode).collect();
    let auto_sparse_trie = gigas_fullnode::cli::AutoSize(None)
        .resolve(None, gigas_fullnode::memory::auto_sparse_trie_bytes);
    let sync = DurabilityArg::Periodic;
    assert_eq!(
        modes,
        [
            Mode::Batched {
                group: 3,
                sync,
                write_map: false,
                purge_delay_ms: gigas_fullnode::alloc::DEFAULT_PURGE_DELAY_MS,
                snapshot: false,
                page_cache: PageCache::Warm,
                // On by default, as the node's.
                decode_ahead: true,
            },
            Mode::Live {
                sync,
                group: 1,
                trie_cache: gigas_statedb::DEFAULT_TRIE_CACHE_BYTES as u64,
                sparse_trie: auto_sparse_trie,
                root: RootArg::Layered(0),
                prefetch: false,
                // Loaded at open by default, where there is a trie in memory to load.
                preload: auto_sparse_trie > 0,
                // Roots overlap through the trie in memory, which is off on a small machine.
                overlap: auto_sparse_trie > 0,
                // Off by default, as measured (gigas-fullnode --db.commit-thread).
                commit_thread: false,
                write_map: false,
                purge_delay_ms: gigas_fullnode::alloc::DEFAULT_PURGE_DELAY_MS,
                snapshot: false,
                page_cache: PageCache::Warm,
                decode_ahead: true,
            }
        ]
    );
    for r in &report.runs {
        assert!(r.head_matches, "{}: head", r.label);
        assert_eq!(r.blocks, m.loaded_blocks, "{}", r.label);
        assert_eq!(r.gas_used, m.gas_used, "{}", r.label);
        assert!(r.changes >= m.transactions, "{}: changes", r.label);
        assert!(r.changes_per_second > 0.0 && r.commits > 0);
        assert_eq!(r.split.len(), 8, "seven phases and the rest");
        // Decoded ahead: the decode thread's reads are counted, and the writer's thread
        // waited for it at least for the first block.
        let phase = |name| r.split.iter().find(|p| p.name == name).map(|p| p.seconds);
        assert!(phase("read").is_some_and(|s| s > 0.0), "{}: read", r.label);
        assert!(
            phase("waiting").is_some_and(|s| s > 0.0),
            "{}: waiting",
            r.label
        );
        // The node's default: commits unsynced, and every run ends on a durable point.
        assert!(r.syncs >= 1 && r.sync_seconds > 0.0, "{}: syncs", r.label);
    }
    let (batched, live) = (&report.runs[0], &report.runs[1]);
    assert_eq!(
        batched.roots, 0,
        "the batched mode keeps no root while applying"
    );
    assert!(batched.final_root_seconds.is_some());
    assert_eq!(live.roots, m.loaded_blocks, "a root every block");
    assert_eq!(live.commits, m.loaded_blocks, "a commit every block");
    assert!(report.heads_match && report.roots_agree);
    assert_eq!(report.live_root_from_scratch_matches, Some(true));
    assert_eq!(live.root_from_scratch.as_ref(), Some(&live.final_root));
    assert_eq!(report.summary.len(), 2);
    for file in ["fullnode.json", "fullnode.md", "fullnode-split.svg"] {
        assert!(dir.path().join("out").join(file).is_file(), "{file}");
    }
    let md = std::fs::read_to_string(dir.path().join("out/fullnode.md")).expect("markdown");
    assert!(md.starts_with("# Full node") && md.contains("## Configuration"));

    let cache = live.trie_cache.expect("a live run reports its trie cache");
    assert_eq!(
        (cache.budget_bytes, cache.entries),
        (0, 0),
        "off by default"
    );

    // Again, live only, every commit durable against the default and the trie cache off,
    // on and too small to hold one root's nodes, alternating in one run: the recording and
    // the genesis database come from the cache.
    let again = run(&args(
        dir.path(),
        &bin,
        &[
            "--modes",
            "live",
            "--durability",
            "durable,periodic",
            "--trie-cache",
            "0,1GiB,1KiB",
            // The trie cache serves walks: with the account trie in memory, roots do not
            // walk it.
            "--sparse-trie",
            "0",
        ],
    ))
    .expect("a second replay")
    .expect("a report");
    assert_eq!(again.recording.recorded_at, m.recorded_at);
    assert_eq!(again.recording.last_hash, m.last_hash);
    assert!(!again.genesis.built_now);
    assert_eq!(again.runs.len(), 6);
    for r in &again.runs {
        assert_eq!(r.final_root, live.final_root, "{}", r.label);
        let Mode::Live {
            sync, trie_cache, ..
        } = r.mode
        else {
            panic!("{}: not live", r.label)
        };
        assert_eq!(
            r.syncs == 0,
            sync == DurabilityArg::Durable,
            "{}: syncs",
            r.label
        );
        let cache = r.trie_cache.expect("trie cache figures");
        match trie_cache {
            0 => assert_eq!((cache.hits, cache.entries), (0, 0), "{}", r.label),
            1024 => assert!(
                cache.evicted > 0 && cache.bytes <= 1024,
                "{}: {cache:?}",
                r.label
            ),
            _ => assert!(
                cache.hits > 0 && cache.evicted == 0,
                "{}: {cache:?}",
                r.label
            ),
        }
    }

    // Roots in the write transaction, layered on one thread and on two, each with and
    // without the prefetch thread: the same final root.
    let roots = run(&args(
        dir.path(),
        &bin,
        &[
            "--modes",
            "live",
            "--root",
            "txn,1,2",
            "--prefetch",
            "false,true",
        ],
    ))
    .expect("a replay of the root modes")
    .expect("a report");
    assert_eq!(roots.runs.len(), 6);
    for r in &roots.runs {
        assert_eq!(r.final_root, live.final_root, "{}", r.label);
        assert!(r.head_matches, "{}: head", r.label);
    }

    // Snapshots written beside the run: the same state, and at least one snapshot (the one
    // under way when the clock stops is finished), of a block the run applied.
    let snap = run(&args(
        dir.path(),
        &bin,
        &["--modes", "live", "--snapshot-while", "true"],
    ))
    .expect("a replay beside snapshots")
    .expect("a report");
    let r = &snap.runs[0];
    assert!(r.mode.snapshot() && r.label.contains("while writing snapshots"));
    assert_eq!(r.final_root, live.final_root);
    let s = r.snapshots.as_ref().expect("snapshot figures");
    assert!(s.written >= 1 && s.failed == 0, "{s:?}");
    assert_eq!(s.seconds.len() as u64, s.written);
    assert!(
        s.blocks.iter().all(|b| *b <= m.last) && s.last_bytes > 0,
        "{s:?}"
    );

    // The account trie loaded when the writer opens: the same state, and the load's
    // figures beside the first block.
    let loaded = run(&args(
        dir.path(),
        &bin,
        &[
            "--modes",
            "live",
            "--sparse-trie",
            "64MiB",
            "--preload-trie",
            "true",
        ],
    ))
    .expect("a replay with the trie loaded at open")
    .expect("a report");
    let r = &loaded.runs[0];
    assert!(r.mode.preload() && r.label.contains("trie loaded at open"));
    assert_eq!(r.final_root, live.final_root);
    let p = r.preload.expect("the load's figures");
    assert!(p.nodes > 0 && p.bytes > 0, "{p:?}");

    // With --verify-execution: every timed block re-executed over the state (the recording
    // holds the block files), and the figures account for every transaction.
    let exec = run(&args(
        dir.path(),
        &bin,
        &["--modes", "batched", "--verify-execution"],
    ))
    .expect("a replay with re-execution")
    .expect("a report");
    assert_eq!(exec.recording.recorded_at, m.recorded_at, "from the cache");
    assert!(exec.recording.blocks && exec.recording.block_bytes > 0);
    let run = &exec.runs[0];
    assert_eq!(run.final_root, live.final_root);
    let e = run.execution.as_ref().expect("execution figures");
    assert_eq!(e.blocks, m.loaded_blocks);
    assert_eq!(e.transactions, m.transactions);
    assert_eq!(e.gas_used, m.gas_used);
    // Each transfer asks for its sender and its receiver at least.
    assert!(e.accesses >= 2 * m.transactions, "{e:?}");
    assert!(e.reads > 0 && e.reads <= e.accesses, "{e:?}");
    assert!(e.level1_miss_ratio > 0.0 && e.level1_miss_ratio <= 1.0);
    assert!(e.faulting_reads <= e.reads);
    let kinds: u64 = e.kinds.iter().map(|k| k.accesses).sum();
    assert_eq!(kinds, e.accesses);
    assert!(e.evm_seconds > 0.0 && e.state_loading_seconds > 0.0);
    assert_eq!(run.split.len(), 9, "execute, seven phases and the rest");
    assert_eq!(run.split[0].name, "execute");
    let md = std::fs::read_to_string(dir.path().join("out/fullnode.md")).expect("markdown");
    assert!(md.contains("## Re-execution"));

    // Under a memory limit (this test is the binary's only one, so moving the process into
    // the run's cgroup limits nothing else), cold and warm alternating, over a state of
    // 20,000 accounts (some hundred leaf pages, so that a cold run's faults are many): the
    // warm run's copy is read back inside the run's cgroup, so its pages are charged there
    // and the run faults in fewer of them from the disk than the cold one.
    let limited = gigas_bench::fullnode::run(&args_over(
        &dir.path().join("limited"),
        &bin,
        20_000,
        &[
            "--modes",
            "live",
            "--memory-limit",
            "1GiB",
            "--page-cache",
            "cold,warm",
        ],
    ))
    .expect("a replay under a memory limit (this needs a writable memory cgroup, as root)")
    .expect("a report");
    assert_eq!(limited.runs.len(), 2);
    let faults = |cache: PageCache| {
        let r = limited
            .runs
            .iter()
            .find(|r| r.mode.page_cache() == cache)
            .expect("a run per page cache");
        assert!(r.head_matches, "{}: head", r.label);
        let cgroup = r.cgroup.expect("a run under a limit reports its cgroup");
        assert!(cgroup.file_bytes > 0, "{}: {cgroup:?}", r.label);
        cgroup.major_faults
    };
    let (cold, warm) = (faults(PageCache::Cold), faults(PageCache::Warm));
    assert!(
        cold >= 10 && warm * 4 < cold,
        "major faults: cold {cold}, warm {warm}"
    );
    assert!(limited.heads_match && limited.roots_agree);
}

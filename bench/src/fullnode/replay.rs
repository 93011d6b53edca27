//! The replay: each run of a mode through the full node's `Applier`, over a copy of the
//! genesis database (`files`), and the report of the runs.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eyre::{bail, eyre, Result, WrapErr};
use gigas_fullnode::ahead::AheadServing;
use gigas_fullnode::apply::{Applier, ApplyTimings};
use gigas_fullnode::memory;
use gigas_fullnode::metrics::ProcessMemory;
use gigas_fullnode::wal::AppliedLog;
use gigas_fullnode::window::{StateWindow, WindowLimits};
use gigas_primitives::machine::Machine;
use gigas_statedb::{StateDb, StateDbOptions, WriterOptions};
use indicatif::{ProgressBar, ProgressStyle};

use super::execute::Reexecutor;
use super::figures::*;
use super::files::*;
use super::mode::*;
use super::summary::{limit_label, print_config, print_run, run_label, summarize};
use super::{FullnodeArgs, FullnodeConfig, FullnodeReport, Manifest, ModeKind, PageCache};

/// Peak resident memory is reset (`/proc/self/clear_refs`, 5), so each run reports its own.
pub(super) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// CPU seconds, major faults, storage bytes read and written of this process.
#[derive(Debug, Clone, Copy, Default)]
struct Resources {
    cpu: f64,
    major_faults: u64,
    read_bytes: u64,
    write_bytes: u64,
}

impl Resources {
    fn sample() -> Self {
        // SAFETY: getrusage fills the struct it is given; zeroed is a valid rusage.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a rusage for RUSAGE_SELF.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let io_field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Self {
            cpu: if ok {
                seconds(usage.ru_utime) + seconds(usage.ru_stime)
            } else {
                0.0
            },
            major_faults: if ok {
                u64::try_from(usage.ru_majflt).unwrap_or(0)
            } else {
                0
            },
            read_bytes: io_field("read_bytes:"),
            write_bytes: io_field("write_bytes:"),
        }
    }
}

/// The split of `t` over `seconds` of applying, with the re-execution's seconds as `execute`
/// (with `--verify-execution`) and what the phases do not account for as `other`.
fn split(t: &ApplyTimings, execute: Option<f64>, seconds: f64) -> Vec<Phase> {
    let changes = t.changes.max(1) as f64;
    let phase = |name, s: f64| Phase {
        name,
        seconds: s,
        share: if seconds > 0.0 { s / seconds } else { 0.0 },
        us_per_change: s / changes * 1e6,
    };
    let mut phases: Vec<Phase> = execute
        .map(|s| phase("execute", s))
        .into_iter()
        .chain(t.phases().iter().map(|&(n, s)| phase(n, s)))
        .collect();
    phases.push(phase(
        "other",
        (seconds - t.total() - execute.unwrap_or(0.0)).max(0.0),
    ));
    phases
}

/// Where block `n` (from 1) is in the preloaded vectors; past their end for block 0.
fn preload_index(n: u64) -> usize {
    usize::try_from(n.wrapping_sub(1)).unwrap_or(usize::MAX)
}

/// What `--verify-execution` re-executes: the recording's block files and the diffs' headers,
/// preloaded like the diffs.
struct ToExecute {
    spec: gigas_primitives::ChainSpec,
    /// Block files `1..=last`, index `n - 1`.
    blocks: Vec<Vec<u8>>,
    /// The headers of diffs `1..=last`, index `n - 1`.
    headers: Vec<alloy_consensus::Header>,
}

/// What one run needs beside its mode.
struct Replay<'a> {
    args: &'a FullnodeArgs,
    recording: &'a Manifest,
    sequencer: alloy_primitives::Address,
    /// Diffs `1..=last`, index `n - 1`.
    diffs: Vec<Vec<u8>>,
    /// With `--verify-execution`.
    execute: Option<ToExecute>,
    genesis: &'a GenesisInfo,
    scratch: &'a Path,
    options: StateDbOptions,
}

impl Replay<'_> {
    /// Diff `n` of the recording.
    fn diff(&self, n: u64) -> Result<&[u8]> {
        self.diffs
            .get(preload_index(n))
            .map(Vec::as_slice)
            .ok_or_else(|| eyre!("the recording has no diff {n}"))
    }

    /// Applies block `n`; with `--verify-execution`, re-executes it first over the state
    /// before it (see `execute`'s module doc for why before the diff's verification). Then,
    /// as the node does, logs it and records it for reads before its commit (`serving`: live
    /// modes).
    fn step(
        &self,
        applier: &mut Applier<'_>,
        reexecutor: Option<&mut Reexecutor>,
        serving: Option<&mut AheadServing>,
        n: u64,
    ) -> Result<gigas_fullnode::apply::AppliedBlock> {
        let bytes = self.diff(n)?;
        let expected = self.reexecute(applier, reexecutor, n)?;
        let verified = applier
            .verify(bytes)
            .wrap_err_with(|| format!("verifying block {n}"))?;
        if let Some((got, r)) = expected {
            r.compare(n, &verified.changes, &got)?;
        }
        Self::write_step(applier, serving, n, bytes, &verified)
    }

    /// [`Replay::step`] with the block verified on the decode thread (`decoded`) while this
    /// thread waited `waited` seconds for it.
    fn step_decoded(
        &self,
        applier: &mut Applier<'_>,
        reexecutor: Option<&mut Reexecutor>,
        serving: Option<&mut AheadServing>,
        n: u64,
        decoded: gigas_fullnode::decode::Decoded,
        waited: f64,
    ) -> Result<gigas_fullnode::apply::AppliedBlock> {
        let bytes = self.diff(n)?;
        applier.count_decoded(&decoded.timings, waited);
        let verified = decoded
            .result
            .wrap_err_with(|| format!("verifying block {n} on the decode thread"))?;
        if let Some((got, r)) = self.reexecute(applier, reexecutor, n)? {
            r.compare(n, &verified.changes, &got)?;
        }
        Self::write_step(applier, serving, n, bytes, &verified)
    }

    /// With `--verify-execution`, block `n` re-executed over the writer's state (the state
    /// before it), and the re-executor to compare it with.
    fn reexecute<'r>(
        &self,
        applier: &Applier<'_>,
        reexecutor: Option<&'r mut Reexecutor>,
        n: u64,
    ) -> Result<Option<(gigas_primitives::ChangeSet, &'r mut Reexecutor)>> {
        let (Some(r), Some(x)) = (reexecutor, &self.execute) else {
            return Ok(None);
        };
        let i = preload_index(n);
        let (Some(header), Some(block)) = (x.headers.get(i), x.blocks.get(i)) else {
            bail!("the recording has no block file {n}");
        };
        Ok(Some((r.execute(applier.writer(), header, block)?, r)))
    }

    /// Writes a verified block and logs it for serving, as the node does.
    fn write_step(
        applier: &mut Applier<'_>,
        serving: Option<&mut AheadServing>,
        n: u64,
        bytes: &[u8],
        verified: &gigas_statediff::VerifiedDiff,
    ) -> Result<gigas_fullnode::apply::AppliedBlock> {
        let applied = applier
            .write(verified)
            .wrap_err_with(|| format!("writing block {n}"))?;
        if let Some(serving) = serving {
            serving
                .applied(bytes, verified, &applied)
                .wrap_err_with(|| format!("logging block {n}"))?;
        }
        Ok(applied)
    }

    fn run(
        &self,
        round: usize,
        mode: Mode,
        limit: Option<u64>,
        check_root: bool,
    ) -> Result<RunResult> {
        let dir = self.scratch.join(format!(
            "run-{}-{round}-{}",
            std::process::id(),
            mode.short()
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .wrap_err_with(|| format!("clearing {}", dir.display()))?;
        }
        let result = self.run_in(&dir, round, mode, limit, check_root);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            eprintln!("could not remove {}: {e}", dir.display());
        }
        result
    }

    fn run_in(
        &self,
        dir: &Path,
        round: usize,
        mode: Mode,
        limit: Option<u64>,
        check_root: bool,
    ) -> Result<RunResult> {
        let m = self.recording;
        // Only `copy` without a limit keeps the copy's pages: under a limit a page cached now
        // would stay charged to this process's current cgroup, not to the run's. `warm` reads
        // them back once inside the run's cgroup, below.
        let cache = mode.page_cache();
        let evict = cache != PageCache::Copy || limit.is_some();
        let mut copy_seconds = copy_db(&self.genesis.dir, dir, evict)?;
        // As the node sets it at start; for the run only in effect from here on.
        gigas_fullnode::alloc::set_purge_delay(mode.purge_delay_ms());
        // Entered before the database opens, so that every page the map faults in is charged
        // to the limited cgroup; left (and removed) when `limited` drops.
        let limited = match limit {
            Some(bytes) => Some(super::limit::Limited::enter(
                &format!("bench-{}-{round}", mode.short()),
                bytes,
            )?),
            None => None,
        };
        if cache == PageCache::Warm {
            // Charged to the run's cgroup, if any: the page cache of a node that has run long
            // (under its limit, what of its database the limit leaves room for).
            let started = Instant::now();
            recache_dir(dir)?;
            copy_seconds += started.elapsed().as_secs_f64();
        }
        // The bounds the node's `auto` gives under the run's limit (gigas_fullnode::memory).
        let options = StateDbOptions {
            durability: mode.sync().to_statedb(),
            write_map: mode.write_map(),
            max_dirty_bytes: self.args.max_dirty.resolve(limit, memory::auto_dirty_bytes),
            ..self.options.clone()
        };
        let writer_options = WriterOptions {
            max_group_bytes: self
                .args
                .commit_bytes
                .resolve(limit, memory::auto_group_bytes)
                .max(1),
            ..mode.writer_options()
        };
        let every_commit = options.durability.every_commit();
        let db = StateDb::open(dir, options)?;
        let mut applier = Applier::new(&db, writer_options, self.sequencer)?;
        let preload = if mode.preload() {
            let started = Instant::now();
            let stats = applier
                .preload_trie()
                .wrap_err("loading the account trie")?;
            stats.map(|s| PreloadFigures {
                seconds: started.elapsed().as_secs_f64(),
                nodes: s.nodes,
                bytes: s.bytes,
                leaves: s.loaded_leaves,
            })
        } else {
            None
        };
        // Live modes pay what the node pays to serve each block before its group commits:
        // the applied-block log and the redo records (the node's `gigas_fullnode::ahead`).
        let mut serving = match mode.kind() {
            ModeKind::Live => {
                let (log, _) = AppliedLog::open(&dir.join(gigas_fullnode::wal::FILE_NAME))?;
                let window = Arc::new(StateWindow::new(WindowLimits {
                    blocks: 0,
                    max_bytes: 0,
                }));
                Some(AheadServing::new(log, window, every_commit)?)
            }
            ModeKind::Batched => None,
        };

        let mut reexecutor = self
            .execute
            .as_ref()
            .map(|x| Reexecutor::new(x.spec.clone()));
        // The empty blocks before the load, outside the clock.
        for n in 1..m.first_loaded {
            self.step(&mut applier, reexecutor.as_mut(), serving.as_mut(), n)?;
            if applier.should_commit() {
                commit(&mut applier, &mut serving)?;
            }
        }
        commit(&mut applier, &mut serving)?;
        // Warm-up: the first loaded blocks, applied and committed outside the clock, bring
        // the workload's hot accounts into the page cache as a node that has been running
        // would have them.
        let warmup = self
            .args
            .warmup_blocks
            .min(m.loaded_blocks.saturating_sub(1));
        let first_timed = m.first_loaded + warmup;
        let mut first_block = None;
        for n in m.first_loaded..first_timed {
            let start = Instant::now();
            let applied = self
                .step(&mut applier, reexecutor.as_mut(), serving.as_mut(), n)
                .wrap_err("a warm-up block")?;
            if n == m.first_loaded {
                // Its root may still run: the block costs a restart that too.
                applier.finish_root()?;
                first_block = Some(FirstBlockFigures {
                    changes: applied.changes,
                    seconds: start.elapsed().as_secs_f64(),
                });
            }
            if applier.should_commit() {
                commit(&mut applier, &mut serving)?;
            }
        }
        commit(&mut applier, &mut serving)?;
        // What the warm-up left unsynced is not the timed blocks' to write.
        applier.sync()?;
        applier.reset_timings();
        if let Some(r) = reexecutor.as_mut() {
            r.reset();
        }

        let bar = if self.args.quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(m.last + 1 - first_timed);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} blocks {per_sec} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(format!(
                "round {round}, {}{}",
                mode.short(),
                limit.map_or_else(String::new, |l| format!(" under {}", limit_label(Some(l))))
            ));
            bar
        };
        let (mut commits, mut mdbx_commit) = (0u64, 0.0);
        let (mut syncs, mut sync_seconds) = (0u64, 0.0);
        let mut tally = RootTally::default();
        // Returns the root the commit waited for, to be counted with the others.
        let mut count_commit = |info: Option<gigas_statedb::CommitInfo>| {
            let info = info?;
            commits += 1;
            mdbx_commit += info.commit_seconds;
            if info.sync_seconds > 0.0 {
                syncs += 1;
                sync_seconds += info.sync_seconds;
            }
            info.root
        };
        reset_peak_rss();
        let before = Resources::sample();
        let faults_before = limited.as_ref().map(|l| l.major_faults()).transpose()?;
        // The node's prefetch stage: a thread reading each timed block's pages a few blocks
        // ahead of the writer (the diffs are in memory, as the fetcher's queue holds them).
        let prefetch = matches!(mode, Mode::Live { prefetch: true, .. });
        let ahead: Vec<&[u8]> = if prefetch {
            (first_timed..=m.last)
                .map(|n| self.diff(n))
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let to_decode: Vec<&[u8]> = if mode.decode_ahead() {
            (first_timed..=m.last)
                .map(|n| self.diff(n))
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let (db_ref, sequencer) = (&db, self.sequencer);
        let writer_tip = applier.tip();
        let stop_snapshots = AtomicBool::new(false);
        let snapshot_dir = dir.join("snapshots");
        let mut complete = true;
        let (seconds, snapshots, last_sync) = std::thread::scope(|outer| -> Result<_> {
            // Set on every way out of this scope (an error too), so that the producer ends and
            // the scope's join does not wait for it forever.
            let _stop = StopOnDrop(&stop_snapshots);
            let producer = mode.snapshot().then(|| {
                let (stop, dir) = (&stop_snapshots, &snapshot_dir);
                outer.spawn(move || produce_snapshots(db_ref, dir, stop))
            });
            let started = Instant::now();
            std::thread::scope(|scope| -> Result<()> {
                let ready = prefetch.then(|| {
                    let (tx, rx) =
                        std::sync::mpsc::sync_channel::<()>(gigas_fullnode::prefetch::AHEAD_BLOCKS);
                    scope.spawn(move || {
                        for bytes in ahead {
                            // A diff it cannot read is the writer's to report.
                            let _ = gigas_fullnode::prefetch::warm_diff(db_ref, sequencer, bytes);
                            if tx.send(()).is_err() {
                                return;
                            }
                        }
                    });
                    rx
                });
                // The decode stage: a thread verifying and decoding the timed blocks ahead of
                // this one, from the last commit (the warm-up's, landed and synced above).
                let decoded = mode.decode_ahead().then(|| {
                    let (tx, rx) =
                        std::sync::mpsc::sync_channel(gigas_fullnode::decode::DECODED_AHEAD);
                    let mut diffs = to_decode.into_iter();
                    scope.spawn(move || {
                        gigas_fullnode::decode::run(
                            db_ref,
                            sequencer,
                            true,
                            Some(writer_tip),
                            || diffs.next(),
                            |_, decoded| tx.send(decoded).is_ok(),
                        )
                    });
                    rx
                });
                for n in first_timed..=m.last {
                    if self
                        .args
                        .max_run_time
                        .is_some_and(|max| started.elapsed() >= max)
                    {
                        complete = false;
                        break;
                    }
                    if let Some(ready) = &ready {
                        // Ends early only if the thread is gone, which the writer then runs without.
                        let _ = ready.recv();
                    }
                    let applied = match &decoded {
                        Some(decoded) => {
                            let wait = Instant::now();
                            let next = decoded
                                .recv()
                                .map_err(|_| eyre!("the decode thread stopped before block {n}"))?;
                            let waited = wait.elapsed().as_secs_f64();
                            self.step_decoded(
                                &mut applier,
                                reexecutor.as_mut(),
                                serving.as_mut(),
                                n,
                                next,
                                waited,
                            )?
                        }
                        None => {
                            self.step(&mut applier, reexecutor.as_mut(), serving.as_mut(), n)?
                        }
                    };
                    tally.add(applied.root);
                    landed(&mut applier, &mut serving)?;
                    if applier.should_commit() {
                        tally.add(count_commit(start_commit(&mut applier, &mut serving)?));
                    }
                    bar.inc(1);
                }
                // The prefetch and decode threads, if still sending, stop at their next send.
                drop(ready);
                drop(decoded);
                Ok(())
            })?;
            tally.add(count_commit(commit(&mut applier, &mut serving)?));
            // Every mode ends durable, in its clock: a periodic run pays for its last durable
            // point as the durable run paid for each commit's.
            let last_sync = applier.sync()?;
            let seconds = started.elapsed().as_secs_f64();
            stop_snapshots.store(true, Ordering::Release);
            // The snapshot under way is finished outside the clock.
            let snapshots = producer
                .map(|p| p.join().map_err(|_| eyre!("the snapshot thread panicked")))
                .transpose()?;
            Ok((seconds, snapshots, last_sync))
        })?;
        if let Some(took) = last_sync {
            syncs += 1;
            sync_seconds += took.as_secs_f64();
        }
        if let Some(s) = snapshots.as_ref().filter(|s| s.written == 0) {
            bail!(
                "no snapshot was written beside the run ({} failed; last: {})",
                s.failed,
                s.last_error.as_deref().unwrap_or("none")
            );
        }
        let after = Resources::sample();
        let cgroup = match (&limited, faults_before) {
            (Some(l), Some(before)) => Some(l.figures(before)?),
            _ => None,
        };
        let peak_rss_bytes = ProcessMemory::read().map(|m| m.peak);
        bar.finish_and_clear();
        let timings = *applier.timings();
        let trie_cache = match mode {
            Mode::Live { trie_cache, .. } => {
                let stats = applier.writer().trie_cache_stats();
                Some(TrieCacheFigures {
                    budget_bytes: trie_cache,
                    bytes: stats.bytes,
                    entries: stats.entries,
                    hits: stats.hits,
                    misses: stats.misses,
                    evicted: stats.evicted,
                })
            }
            Mode::Batched { .. } => None,
        };
        let sparse_trie = match mode {
            Mode::Live { sparse_trie, .. } if sparse_trie > 0 => {
                let stats = applier.writer().sparse_trie_stats();
                Some(SparseTrieFigures {
                    budget_bytes: sparse_trie,
                    bytes: stats.bytes,
                    nodes: stats.nodes,
                    pruned: stats.pruned,
                    loaded_leaves: stats.loaded_leaves,
                })
            }
            _ => None,
        };
        let execution = reexecutor.as_ref().map(Reexecutor::figures);

        let (final_root, final_root_seconds, final_root_commit_seconds) = match mode {
            // A stopped run's root is of another block: not computed (it would read the
            // whole state, and under a small limit take long).
            _ if !complete => (alloy_primitives::B256::ZERO, None, None),
            Mode::Batched { .. } => {
                let root = applier.compute_root()?;
                let t = Instant::now();
                applier.commit()?;
                (
                    root.root,
                    Some(root.seconds),
                    Some(t.elapsed().as_secs_f64()),
                )
            }
            Mode::Live { .. } => (
                tally
                    .last
                    .map(|(_, root)| root)
                    .ok_or_else(|| eyre!("the live mode computed no root"))?,
                None,
                None,
            ),
        };
        let memory = ProcessMemory::read();
        let rss_anon_bytes = memory.map(|m| m.anon);
        let rss_file_bytes = memory.map(|m| m.file);
        drop(applier);

        let head = db.head()?;
        let head_matches = !complete
            || head.is_some_and(|h| h.number == m.last && h.hash.to_string() == m.last_hash);
        let (root_from_scratch, root_from_scratch_seconds) = if check_root && complete {
            let t = Instant::now();
            let root = db.view()?.state_root_from_scratch()?;
            (Some(root.to_string()), Some(t.elapsed().as_secs_f64()))
        } else {
            (None, None)
        };
        let db_used_bytes = used_bytes(&db);
        drop(db);
        drop(limited);
        let db_disk_bytes = disk_bytes(dir);

        let transfers = timings.gas_used as f64 / 21_000.0;
        let per_second = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
        Ok(RunResult {
            round,
            mode,
            label: run_label(mode, limit),
            copy_seconds,
            seconds,
            blocks: timings.blocks,
            changes: timings.changes,
            gas_used: timings.gas_used,
            changes_per_second: per_second(timings.changes as f64),
            transfers_per_second: per_second(transfers),
            blocks_per_second: per_second(timings.blocks as f64),
            split: split(&timings, execution.as_ref().map(|e| e.seconds), seconds),
            execution,
            trie_cache,
            sparse_trie,
            first_block,
            preload,
            commits,
            mdbx_commit_seconds: mdbx_commit,
            syncs,
            sync_seconds,
            roots: tally.roots,
            root_leaves: tally.leaves,
            root_changed_accounts: tally.changed_accounts,
            root_remembered: tally.remembered,
            root_rereads: tally.rereads,
            final_root: final_root.to_string(),
            final_root_seconds,
            final_root_commit_seconds,
            head_matches,
            root_from_scratch,
            root_from_scratch_seconds,
            cpu_seconds: after.cpu - before.cpu,
            major_faults: after.major_faults.saturating_sub(before.major_faults),
            read_bytes: after.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: after.write_bytes.saturating_sub(before.write_bytes),
            db_used_bytes,
            db_disk_bytes,
            peak_rss_bytes,
            rss_anon_bytes,
            rss_file_bytes,
            memory_limit_bytes: limit,
            cgroup,
            complete,
            snapshots,
            warmup_blocks: warmup,
        })
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Writes snapshots of `db`'s committed state into `dir` one after another until `stop`,
/// as the node's producer does (`gigas_fullnode::snapshots`: its thread priority, its
/// chunking, two kept), but without waiting K blocks between them: the run measures
/// following while a snapshot is always being written.
fn produce_snapshots(db: &StateDb, dir: &Path, stop: &AtomicBool) -> SnapshotFigures {
    gigas_fullnode::snapshots::lower_thread_priority();
    let cpu_start = thread_cpu_seconds();
    let mut figures = SnapshotFigures::default();
    while !stop.load(Ordering::Acquire) {
        let produced = db
            .view()
            .map_err(gigas_snapshot::SnapshotError::from)
            .and_then(|view| {
                gigas_snapshot::write_snapshot(
                    &view,
                    dir,
                    gigas_snapshot::ProduceOptions::default(),
                )
            })
            .and_then(|p| gigas_snapshot::prune(dir, 2).map(|_| p));
        match produced {
            Ok(p) if p.written => {
                figures.written += 1;
                figures.seconds.push(p.seconds);
                figures.blocks.push(p.block);
                figures.last_bytes = p.bytes;
            }
            // This block's snapshot exists: wait for the next commit.
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                figures.failed += 1;
                figures.last_error = Some(e.to_string());
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    figures.cpu_seconds = thread_cpu_seconds() - cpu_start;
    figures
}

/// CPU seconds of the calling thread.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if ok {
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    } else {
        0.0
    }
}

/// Every round of every mode, then the summary. `page_size`: the genesis database's, which
/// every run's copy has.
pub(super) fn run_all(
    args: &FullnodeArgs,
    modes: &[Mode],
    limits: &[Option<u64>],
    recording: &Manifest,
    mut genesis: GenesisInfo,
    page_size: Option<usize>,
    scratch: &Path,
) -> Result<FullnodeReport> {
    std::fs::create_dir_all(scratch).wrap_err_with(|| format!("creating {}", scratch.display()))?;
    let chain = recording.load_chain()?;
    let sequencer = gigas_fullnode::genesis::sequencer_address(&chain)
        .map_err(|e| eyre!("the recording's chain: {e}"))?;
    // Each run sets the durability of its mode.
    let options = StateDbOptions {
        page_size,
        readahead: args.readahead,
        ..StateDbOptions::default()
    };
    let machine = Machine::current();
    let config = FullnodeConfig {
        accounts: recording.accounts,
        seed: recording.seed,
        recording: format!(
            "{}: {} {} offered at {} tx/s to gigas-sequencer (block time {} ms, gas limit {}, draws seeded {}), blocks {}..={} ({} blocks, {} transactions, {:.1} MB of diffs, {:.0} B per transaction); recorded at {}",
            recording.dir.display(),
            crate::load::distribution_label(recording.distribution),
            match recording.workload {
                crate::load::Workload::Transfers => "ETH transfers",
                crate::load::Workload::Erc20 => "WETH9 transfers",
                crate::load::Workload::Mix => "ETH and WETH9 transfers",
            },
            recording.rate,
            recording.block_time_ms,
            recording.gas_limit,
            recording.workload_seed,
            recording.first_loaded,
            recording.last,
            recording.loaded_blocks,
            recording.transactions,
            recording.diff_bytes as f64 / 1e6,
            recording.diff_bytes as f64 / recording.transactions.max(1) as f64,
            recording.source
        ),
        modes: modes.iter().map(Mode::label).collect(),
        runs: args.runs,
        statedb_options: format!(
            "{options:?}; writer: hashed writes {:?}",
            WriterOptions::default().hashed_writes
        ),
        scratch: format!(
            "{} ({}); each run into a fresh copy of the genesis database, copied and synced before the clock starts; page cache: {}",
            scratch.display(),
            filesystem_of(scratch),
            args.page_cache
                .iter()
                .map(|c| format!("{}: {}", c.name(), c.describe()))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        source: gigas_primitives::machine::source_revision(),
    };
    print_config(&config, &machine, &genesis);

    let started = Instant::now();
    let mut diffs = Vec::with_capacity(recording.last as usize);
    for n in 1..=recording.last {
        let path = recording.diff_path(n);
        diffs.push(std::fs::read(&path).wrap_err_with(|| format!("reading {}", path.display()))?);
    }
    println!(
        "preloaded diffs 1..={} ({:.1} MB) into memory in {:.1} s: the clock measures applying, not reading the recording",
        recording.last,
        recording.diff_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let execute = if args.verify_execution {
        Some(preload_execution(recording, &diffs, chain.spec())?)
    } else {
        None
    };
    let replay = Replay {
        args,
        recording,
        sequencer,
        diffs,
        execute,
        genesis: &genesis,
        scratch,
        options,
    };
    let mut runs: Vec<RunResult> = Vec::new();
    let last_live_round = args.runs;
    let mut checked = false;
    for (i, &limit) in limits.iter().enumerate() {
        let modes = args.mode_list_for(limit);
        for round in 1..=args.runs {
            let order: Vec<Mode> = if round % 2 == 1 {
                modes.clone()
            } else {
                modes.iter().rev().copied().collect()
            };
            for mode in order {
                // The root from scratch reads the whole state: once, on the first limit's
                // last live run.
                let check = !args.no_root_check
                    && i == 0
                    && mode.kind() == ModeKind::Live
                    && round == last_live_round
                    && !checked;
                checked |= check;
                let run = replay
                    .run(round, mode, limit, check)
                    .wrap_err_with(|| format!("round {round}, {}", run_label(mode, limit)))?;
                print_run(&run);
                runs.push(run);
            }
        }
    }
    drop(replay);
    genesis.copy_seconds = crate::median(runs.iter().map(|r| r.copy_seconds).collect());

    let summary = summarize(args, limits, &runs);
    let heads_match = runs.iter().all(|r| r.head_matches);
    let complete: Vec<&RunResult> = runs.iter().filter(|r| r.complete).collect();
    let roots_agree = complete
        .windows(2)
        .all(|w| w[0].final_root == w[1].final_root);
    let live_root_from_scratch_matches = runs
        .iter()
        .find_map(|r| r.root_from_scratch.as_ref().map(|s| *s == r.final_root));
    if !heads_match {
        bail!(
            "a run did not end at the recording's last block {}",
            recording.last
        );
    }
    if !roots_agree {
        bail!(
            "the runs disagree on the final root: {:?}",
            runs.iter()
                .map(|r| (&r.label, &r.final_root))
                .collect::<Vec<_>>()
        );
    }
    if live_root_from_scratch_matches == Some(false) {
        bail!("the live root differs from the root recomputed from scratch");
    }
    Ok(FullnodeReport {
        config,
        machine,
        build_profile: crate::build_profile(),
        recording: recording.clone(),
        genesis,
        runs,
        summary,
        heads_match,
        roots_agree,
        live_root_from_scratch_matches,
    })
}

/// The block files and the diffs' headers of `--verify-execution`, read before any clock.
fn preload_execution(
    recording: &Manifest,
    diffs: &[Vec<u8>],
    spec: gigas_primitives::ChainSpec,
) -> Result<ToExecute> {
    if !recording.blocks {
        bail!(
            "{} holds no block files to re-execute; record again (--rerecord)",
            recording.dir.display()
        );
    }
    let started = Instant::now();
    let mut blocks = Vec::with_capacity(diffs.len());
    let mut headers = Vec::with_capacity(diffs.len());
    for (i, bytes) in diffs.iter().enumerate() {
        let n = i as u64 + 1;
        let path = recording.block_path(n);
        blocks.push(std::fs::read(&path).wrap_err_with(|| format!("reading {}", path.display()))?);
        headers.push(
            gigas_statediff::DiffFile::decode(bytes)
                .wrap_err_with(|| format!("decoding diff {n}"))?
                .header,
        );
    }
    println!(
        "preloaded block files 1..={} ({:.1} MB) for --verify-execution in {:.1} s",
        recording.last,
        recording.block_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(ToExecute {
        spec,
        blocks,
        headers,
    })
}

/// The timed blocks' roots, added up.
#[derive(Debug, Default)]
struct RootTally {
    roots: u64,
    leaves: u64,
    changed_accounts: u64,
    remembered: u64,
    rereads: u64,
    /// The highest block seen and its root.
    last: Option<(u64, alloy_primitives::B256)>,
}

impl RootTally {
    fn add(&mut self, root: Option<gigas_statedb::RootInfo>) {
        let Some(root) = root else { return };
        self.roots += 1;
        self.leaves += root.leaves;
        self.changed_accounts += root.changed_accounts;
        self.remembered += root.remembered;
        self.rereads += root.rereads;
        self.last = self.last.max(Some((root.block, root.root)));
    }
}

/// Starts the group's commit, on the commit thread where the writer has one (as the node's
/// apply loop does), and lets the serving go of what landed.
fn start_commit(
    applier: &mut Applier<'_>,
    serving: &mut Option<AheadServing>,
) -> Result<Option<gigas_statedb::CommitInfo>> {
    let info = applier.start_commit()?;
    landed(applier, serving)?;
    Ok(info)
}

/// Takes in a commit that ended on the commit thread, and lets the serving go of it.
fn landed(applier: &mut Applier<'_>, serving: &mut Option<AheadServing>) -> Result<()> {
    applier.poll_commit()?;
    if let Some(serving) = serving.as_mut() {
        serving.committed(applier.committed_tip().number)?;
    }
    Ok(())
}

/// Commits the open group and, in a live mode, drops what served its blocks before the
/// commit (as the node's apply thread does).
fn commit(
    applier: &mut Applier<'_>,
    serving: &mut Option<AheadServing>,
) -> Result<Option<gigas_statedb::CommitInfo>> {
    let info = applier.commit()?;
    if let Some(serving) = serving.as_mut() {
        serving.committed(applier.committed_tip().number)?;
    }
    Ok(info)
}

//! The apply thread: takes fetched diffs in order, verifies each against the open group,
//! optionally re-executes its block, writes it, and commits groups by count and age.
//!
//! What "applied" means: a block is reported (to [`SyncState`], the RPC, `/metrics`) once it
//! is written into the open group *and* its diff is appended to the applied-block log
//! ([`crate::wal`]); the RPC serves it from the window's redo records until its group
//! commits ([`crate::window`]). A kill at any instant loses nothing reported: the next start
//! applies the logged blocks again before it serves anything. Without a log
//! ([`FollowConfig::applied_log`] `None`) a block is reported only once its group commits.
//! Groups are bounded by count and age; each commit empties the log. Under
//! `Durability::Periodic` (the node's default) commits are not synced: a process kill still
//! loses nothing (the page cache holds the commits and the log), and a power loss takes the
//! node back to its last durable point (`gigas_statedb_durable_block`), made every sync
//! period or sync bytes and at a clean stop; the blocks after it are fetched again.
//!
//! A rejected diff changes nothing: [`Applier::verify`] decodes against the open group
//! without writing, and only a verified diff reaches the writer. The thread then commits what
//! it holds, marks the node halted (logs, `gigas_fullnode_halted`, `eth_syncing`), waits a
//! backoff and moves the fetcher's cursor back to the block after its tip, so the same
//! block is fetched again: a corrupt copy in a cache may be replaced, a forged one never
//! gets through, and the node never advances past a block it could not verify.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use gigas_statedb::{StateDb, StateDbError, WriterOptions};
use gigas_statediff::{BlockFile, ChainTip};
use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};

use crate::ahead::AheadServing;
use crate::apply::{Applier, ApplyError};
use crate::decode::{DecodeStage, Decoded};
use crate::fetch::{Cursor, Fetched};
use crate::metrics::FollowerMetrics;
use crate::status::SyncState;
use crate::wal::{AppliedLog, WalError};

/// Most bytes of redo records the blocks above the last commit may hold before a commit,
/// whatever the group bounds say (`--commit-blocks` and `--commit-interval` can be set
/// high): the window's own default budget.
const MAX_AHEAD_BYTES: usize = 256 << 20;

/// What the apply thread is configured with.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// Group bounds and the root interval.
    pub writer: WriterOptions,
    /// The address every header must be signed by.
    pub sequencer: Address,
    /// Re-execute every block and compare with its diff.
    pub verify_execution: bool,
    /// At the head, write each block's changes into the write transaction while waiting for
    /// the next block, so that commits are short ([`Applier::flush_idle`]).
    pub flush_idle: bool,
    /// The fork schedule re-execution runs under.
    pub spec: gigas_primitives::ChainSpec,
    /// Wait after a rejection before fetching the block again.
    pub retry_after_rejection: Duration,
    /// Where each applied block's undo record goes, for reads of recent states, and its
    /// redo record while its group is open.
    pub window: Arc<crate::window::StateWindow>,
    /// The applied-block log ([`crate::wal`]): with one, each block is served as soon as it
    /// is applied and logged; without, once its group commits.
    pub applied_log: Option<PathBuf>,
    /// Keep the state's lattice hash and check each diff's signed commitment.
    pub state_commitment: bool,
    /// Load the account trie in memory with the stored nodes before the first block.
    pub preload_trie: bool,
    /// Verify and decode blocks on the decode thread ahead of this one ([`crate::decode`]):
    /// the apply thread then only writes, roots and commits.
    pub decode_ahead: bool,
}

/// Why the apply thread stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StateDbError),
    /// Reading or writing the local state failed while applying a diff.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Reading the state before a block (for reads of recent states) failed.
    #[error("block {block}: reading the state before it: {source}")]
    PriorState {
        /// The block.
        block: u64,
        /// The cause.
        source: gigas_statediff::StoreError,
    },
    /// Re-execution disagreed with a diff: the sequencer published a wrong state transition.
    #[error("block {block}: re-execution disagrees with the diff: {detail}")]
    ExecutionMismatch {
        /// The block.
        block: u64,
        /// The first differing key and both values.
        detail: String,
    },
    /// The apply thread panicked (a bug: the log has its message).
    #[error("the apply thread panicked")]
    Panicked,
    /// Re-execution itself failed.
    #[error("block {block}: re-execution failed: {detail}")]
    Reexecution {
        /// The block.
        block: u64,
        /// Why.
        detail: String,
    },
    /// The applied-block log failed.
    #[error(transparent)]
    Log(#[from] WalError),
}

/// Called each time the served head moves, with the new head (publishes heads to
/// subscribers).
pub type OnHead = Box<dyn FnMut(&StateDb, ChainTip) + Send>;

/// The apply thread's connections to the rest of the node.
#[derive(Debug)]
pub struct ThreadIo {
    /// The runtime the channels and timers belong to.
    pub handle: tokio::runtime::Handle,
    /// Diffs from the fetcher, in order.
    pub input: mpsc::Receiver<Fetched>,
    /// Where the fetcher should be (moved back after a rejection).
    pub cursor: watch::Sender<Cursor>,
    /// Turns true when the node stops.
    pub stop: watch::Receiver<bool>,
}

/// Why a block could not be applied, as the loop acts on it.
enum Refusal {
    /// Fetch it again after a backoff; the node is held meanwhile.
    Refetch {
        reason: &'static str,
        message: String,
    },
    /// Stop the node.
    Fatal(FollowError),
}

struct ApplyLoop<'db> {
    db: &'db StateDb,
    /// The same database, for the decode thread.
    shared_db: Arc<StateDb>,
    /// The decode thread, while the writer applies exactly what it decoded: opened when
    /// the writer's open group is empty and committed, dropped on any refusal.
    stage: Option<DecodeStage<Fetched>>,
    config: FollowConfig,
    io: ThreadIo,
    sync: Arc<SyncState>,
    metrics: FollowerMetrics,
    on_head: OnHead,
    applier: Applier<'db>,
    ahead: Option<AheadServing>,
    epoch: u64,
    last_commit: Instant,
    /// The committed head last served (or handed to `ahead`).
    landed_head: u64,
    changes_since_commit: u64,
    /// When the oldest block not yet durable arrived, for the lag in seconds.
    first_pending_arrival: Option<Instant>,
}

/// Runs the apply thread until the fetcher's channel closes or `stop` turns true; commits
/// the open group before returning.
pub fn run(
    db: Arc<StateDb>,
    config: FollowConfig,
    io: ThreadIo,
    sync: Arc<SyncState>,
    metrics: FollowerMetrics,
    on_head: OnHead,
) -> Result<(), FollowError> {
    let trie_in_memory = config.writer.sparse_trie_bytes > 0;
    let mut applier = Applier::new(&db, config.writer, config.sequencer)?
        .keep_commitment(config.state_commitment);
    // On by default, so a node with no trie in memory (under 4 GiB) skips it quietly.
    if config.preload_trie && trie_in_memory {
        let started = Instant::now();
        // Not loading it costs speed, not correctness: the node goes on without.
        match applier.preload_trie() {
            Ok(Some(trie)) => info!(
                nodes = trie.nodes,
                mib = trie.bytes >> 20,
                budget_mib = trie.budget >> 20,
                leaves = trie.loaded_leaves,
                seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
                "loaded the account trie"
            ),
            Ok(None) => {
                info!("--trie.preload: nothing to load (no stored trie kept)")
            }
            Err(e) => {
                warn!(error = %e, "could not load the account trie ahead; it fills as blocks change it")
            }
        }
    }
    // Recovery replayed and emptied the log before the node started serving; a record still
    // there is at or below the head.
    let ahead = match &config.applied_log {
        Some(path) => {
            let (log, _) = AppliedLog::open(path)?;
            let sync = db.options().durability.every_commit();
            Some(AheadServing::new(log, config.window.clone(), sync)?)
        }
        None => None,
    };
    let epoch = io.cursor.borrow().epoch;
    let landed_head = applier.committed_tip().number;
    let mut this = ApplyLoop {
        db: &db,
        shared_db: db.clone(),
        stage: None,
        config,
        io,
        sync,
        metrics,
        on_head,
        applier,
        ahead,
        epoch,
        last_commit: Instant::now(),
        landed_head,
        changes_since_commit: 0,
        first_pending_arrival: None,
    };
    let result = this.run();
    // Blocks it decoded and the writer never took are dropped (fetched again next start).
    this.stage = None;
    // Whatever verified is committed and synced, also when the loop stops on an error.
    let committed = this.commit().and_then(|()| {
        this.applier.finish_commit()?;
        this.landed()?;
        this.applier.sync()?;
        Ok(())
    });
    info!(
        head = this.applier.committed_tip().number,
        "apply thread stopped"
    );
    result.and(committed)
}

impl ApplyLoop<'_> {
    /// Commits the open group, or, with the commit thread, hands it over (it is served
    /// when it lands, [`ApplyLoop::landed`]).
    fn commit(&mut self) -> Result<(), FollowError> {
        let Some(info) = self.applier.start_commit()? else {
            return self.landed();
        };
        let seconds = self.last_commit.elapsed().as_secs_f64();
        if seconds > 0.0 {
            self.metrics
                .apply_changes_per_second
                .set(self.changes_since_commit as f64 / seconds);
        }
        self.changes_since_commit = 0;
        self.last_commit = Instant::now();
        self.first_pending_arrival = None;
        self.metrics.group_blocks.observe(info.blocks as f64);
        debug!(
            head = info.head,
            blocks = info.blocks,
            changes = info.changes,
            commit_ms = info.commit_seconds * 1e3,
            "group committed (or handed to the commit thread)"
        );
        self.landed()
    }

    /// Serves the committed head once it moved: at once after a commit on this thread,
    /// later (after a block, or on the idle timer) for one on the commit thread, which
    /// this takes in if it ended.
    fn landed(&mut self) -> Result<(), FollowError> {
        self.applier.poll_commit()?;
        let tip = self.applier.committed_tip();
        if tip.number == self.landed_head {
            return Ok(());
        }
        self.landed_head = tip.number;
        match self.ahead.as_mut() {
            Some(ahead) => {
                ahead.committed(tip.number)?;
                self.report_uncommitted();
            }
            None => self.serve(tip),
        }
        Ok(())
    }

    /// Reports `tip` as the head: `latest` for the RPC, the metrics, the subscribers.
    fn serve(&mut self, tip: ChainTip) {
        self.sync.set_applied(tip.number, tip.hash);
        self.metrics
            .applied_block
            .set(i64::try_from(tip.number).unwrap_or(i64::MAX));
        (self.on_head)(self.db, tip);
    }

    fn run(&mut self) -> Result<(), FollowError> {
        loop {
            match self.follow() {
                Err(e) => match mismatch_in(&e) {
                    Some((block, header, computed)) => {
                        self.root_mismatch(block, header, computed)?;
                    }
                    None => return Err(e),
                },
                Ok(()) => return Ok(()),
            }
        }
    }

    /// A block whose state root, computed here after applying it, is not its signed header's
    /// (from a block's write, a root landing, or a commit): the writer discarded its open
    /// group, the blocks after the last commit, so what was served of them goes too (the
    /// head served goes back to the last commit) and the blocks are fetched again after the
    /// backoff. The node does not go past the block; a source that serves another copy (or
    /// a corrected sequencer) lets it on.
    fn root_mismatch(
        &mut self,
        block: u64,
        header: alloy_primitives::B256,
        computed: alloy_primitives::B256,
    ) -> Result<(), FollowError> {
        self.stage = None;
        let tip = self.applier.tip();
        if let Some(ahead) = self.ahead.as_mut() {
            ahead.discard_after(tip.number)?;
        }
        self.serve(tip);
        self.report_uncommitted();
        self.hold(
            block,
            "state_root",
            format!(
                "invalid merkle root (remote: {header} local: {computed}): the state after \
                 the block is not the one its header commits to"
            ),
        )
    }

    fn follow(&mut self) -> Result<(), FollowError> {
        loop {
            if *self.io.stop.borrow() {
                return Ok(());
            }
            self.open_stage();
            // What the fetcher already holds goes to the decode thread.
            while self.stage.as_ref().is_some_and(|s| s.has_room()) {
                match self.io.input.try_recv() {
                    Ok(item) => self.admit(item),
                    Err(_) => break,
                }
            }
            if let Some(stage) = self.stage.as_mut().filter(|s| s.in_flight() > 0) {
                let waiting = Instant::now();
                let Some((item, decoded)) = stage.take() else {
                    // It ended without answering (it panicked: a bug, logged). What it held
                    // is fetched again and decoded here; a later clean point reopens it.
                    let next = self.applier.tip().number + 1;
                    error!(
                        next,
                        "the decode thread stopped with blocks in flight; fetching them again"
                    );
                    self.stage = None;
                    self.reset_cursor(next);
                    continue;
                };
                let waited = waiting.elapsed().as_secs_f64();
                self.applier.count_decoded(&decoded.timings, waited);
                self.metrics.decoded_ahead_blocks.inc();
                self.metrics.decode_wait_seconds.inc_by(waited);
                update_lag(&self.sync, &self.metrics, self.first_pending_arrival);
                self.process(&item, Some(decoded))?;
                continue;
            }
            let wait = match self.applier.writer().group_age() {
                Some(age) => self.config.writer.max_group_age.saturating_sub(age),
                None => Duration::from_millis(250),
            };
            let input = &mut self.io.input;
            let received = self
                .io
                .handle
                .block_on(async { tokio::time::timeout(wait, input.recv()).await });
            update_lag(&self.sync, &self.metrics, self.first_pending_arrival);
            let item = match received {
                Ok(Some(item)) => item,
                Ok(None) => return Ok(()),
                Err(_) => {
                    self.landed()?;
                    if self.applier.should_commit() {
                        self.commit()?;
                    }
                    // Commits stopped: the last one must not stay unsynced.
                    self.applier.sync_if_due()?;
                    continue;
                }
            };
            if self.stage.is_some() {
                self.admit(item);
                continue;
            }
            if self.accepts(&item) {
                self.process(&item, None)?;
            }
        }
    }

    /// Opens the decode thread when it is on and the writer is at its last commit (the
    /// thread reads under what it decodes from there).
    fn open_stage(&mut self) {
        if !self.config.decode_ahead || self.stage.is_some() {
            return;
        }
        let tip = self.applier.tip();
        if tip != self.applier.committed_tip() {
            return;
        }
        match DecodeStage::spawn(
            self.shared_db.clone(),
            self.config.sequencer,
            self.config.state_commitment,
            tip,
        ) {
            Ok(stage) => {
                debug!(tip = tip.number, "decode thread started");
                self.stage = Some(stage);
            }
            Err(e) => {
                warn!(error = %e, "could not start the decode thread; decoding on the apply thread from now on");
                self.config.decode_ahead = false;
            }
        }
    }

    /// The block the next fetched item must be: after what the decode thread holds, else
    /// after the writer's tip.
    fn expected_next(&self) -> u64 {
        match &self.stage {
            Some(stage) => stage.next_number(),
            None => self.applier.tip().number + 1,
        }
    }

    /// Whether a fetched item is the next block; a gap moves the fetcher back.
    fn accepts(&mut self, item: &Fetched) -> bool {
        let expected = self.expected_next();
        if item.epoch != self.epoch || item.number < expected {
            // Queued before a cursor reset, or already applied (a resent range).
            return false;
        }
        if item.number != expected {
            warn!(
                expected,
                got = item.number,
                "a gap in the fetched diffs; fetching again from the tip"
            );
            self.reset_cursor(expected);
            return false;
        }
        true
    }

    /// Hands a fetched item to the decode thread if it is the next block.
    fn admit(&mut self, item: Fetched) {
        if !self.accepts(&item) {
            return;
        }
        let Some(stage) = self.stage.as_mut() else {
            return;
        };
        if let Err(item) = stage.submit(item) {
            // The thread is gone (it reports why with the blocks it held) or full (a bug):
            // without it, this block is fetched again.
            warn!(
                block = item.number,
                "the decode thread did not take a block; decoding here"
            );
            self.stage = None;
            self.reset_cursor(item.number);
        }
    }

    /// Applies one block (decoded by the decode thread, or here) and commits when due.
    fn process(&mut self, item: &Fetched, decoded: Option<Decoded>) -> Result<(), FollowError> {
        self.first_pending_arrival.get_or_insert(item.received);
        match self.apply(item, decoded) {
            // A commit that landed while the block was written is served.
            Ok(()) => self.landed()?,
            Err(refusal) => {
                // The decode thread decoded past a block the writer did not take.
                self.stage = None;
                match refusal {
                    Refusal::Fatal(e) => return Err(e),
                    Refusal::Refetch { reason, message } => {
                        self.hold(item.number, reason, message)?
                    }
                }
            }
        }
        if self.applier.should_commit()
            || self
                .ahead
                .as_ref()
                .is_some_and(|a| a.bytes() > MAX_AHEAD_BYTES)
        {
            self.commit()?;
        } else if self.config.flush_idle
            && self.io.input.is_empty()
            && self.stage.as_ref().is_none_or(|s| s.in_flight() == 0)
        {
            // At the head: write this block's changes while waiting for the next one,
            // so that the group's commit is short (crate `gigas_statedb::flush`). Catching
            // up, the next block is waiting and they wait for the commit.
            // The block's root, if it runs on, ends first: the write needs its nodes.
            if let Some(root) = self.applier.finish_root()? {
                self.root_landed(&root);
            }
            self.applier.flush_idle()?;
        }
        Ok(())
    }

    /// Verifies (here, or takes the decode thread's verification) and re-executes, if
    /// asked, then writes one block.
    fn apply(&mut self, item: &Fetched, decoded: Option<Decoded>) -> Result<(), Refusal> {
        let started = Instant::now();
        let result = match decoded {
            Some(d) => {
                let t = d.timings;
                self.metrics
                    .verify_seconds
                    .observe(t.parse + t.signature + t.decode + t.commitment);
                d.result
            }
            None => {
                let r = self.applier.verify(&item.diff);
                self.metrics
                    .verify_seconds
                    .observe(started.elapsed().as_secs_f64());
                r
            }
        };
        let verified = match result {
            Ok(v) => v,
            Err(ApplyError::Rejected(e)) => {
                return Err(Refusal::Refetch {
                    reason: crate::apply::rejection_reason(&e.kind),
                    message: e.to_string(),
                })
            }
            Err(e) => return Err(Refusal::Fatal(e.into())),
        };
        if self.config.verify_execution {
            self.check_execution(&verified, item.block.as_deref())?;
            self.metrics.reexecuted_blocks.inc();
        }
        if self.sync.halted().is_some() {
            info!(block = item.number, "the block verified; following again");
            self.sync.set_halted(None);
            self.metrics.halted.set(0);
        }
        // What the block changes from, for reads of recent states: the prior values the
        // decoder read (here or on the decode thread), not a second read of the state.
        let undo = if self.config.window.enabled() {
            let undo = crate::window::BlockUndo::capture(
                verified.header.number,
                &verified.changes,
                &verified.prior,
            )
            .map_err(|source| {
                Refusal::Fatal(FollowError::PriorState {
                    block: verified.header.number,
                    source,
                })
            })?;
            Some(undo)
        } else {
            None
        };
        let applied = self
            .applier
            .write(&verified)
            .map_err(|e| Refusal::Fatal(e.into()))?;
        if let Some(undo) = undo {
            self.config.window.push(undo);
            self.metrics
                .state_window_blocks
                .set(self.config.window.len() as i64);
            self.metrics
                .state_window_bytes
                .set(i64::try_from(self.config.window.bytes()).unwrap_or(i64::MAX));
        }
        self.changes_since_commit += applied.changes;
        if let Some(root) = &applied.root {
            debug!(block = root.block, root = %root.root, ms = root.seconds * 1e3, "state root");
        }
        if let Some(ahead) = self.ahead.as_mut() {
            // Logged before it is served: a kill from here on finds it at the next start.
            ahead
                .applied(&item.diff, &verified, &applied)
                .map_err(|e| Refusal::Fatal(e.into()))?;
            let tip = self.applier.tip();
            self.serve(tip);
            self.first_pending_arrival = None;
            self.report_uncommitted();
        }
        Ok(())
    }

    /// A root ended outside a block's writing (before an idle write).
    fn root_landed(&mut self, root: &gigas_statedb::RootInfo) {
        debug!(block = root.block, root = %root.root, ms = root.seconds * 1e3, "state root");
        if let Some(ahead) = self.ahead.as_mut() {
            ahead.root_landed(root);
        }
    }

    /// The gauges of the blocks served above the last commit.
    fn report_uncommitted(&self) {
        let blocks = self.applier.group_blocks();
        let bytes = self.ahead.as_ref().map_or(0, AheadServing::bytes);
        self.metrics
            .uncommitted_blocks
            .set(i64::try_from(blocks).unwrap_or(i64::MAX));
        self.metrics
            .uncommitted_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Re-executes the block over the open group and compares with its diff. A bad block
    /// file is fetched again; a disagreement stops the node.
    fn check_execution(
        &self,
        diff: &gigas_statediff::VerifiedDiff,
        block: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        use crate::reexec::VerifyError;
        let number = diff.header.number;
        let refetch = |message: String| Refusal::Refetch {
            reason: "block_file",
            message,
        };
        let file = BlockFile::decode(block.unwrap_or_default())
            .map_err(|e| refetch(format!("block {number}'s transactions file: {e}")))?;
        match crate::reexec::verify_block(
            self.applier.writer(),
            &self.config.spec,
            &diff.header,
            &file,
            &diff.changes,
        ) {
            Ok(_) => Ok(()),
            Err(VerifyError::Reexec(e)) if e.is_bad_file() => Err(refetch(e.to_string())),
            Err(VerifyError::Reexec(e)) => Err(Refusal::Fatal(FollowError::Reexecution {
                block: number,
                detail: e.to_string(),
            })),
            Err(VerifyError::Mismatch(m)) => Err(Refusal::Fatal(FollowError::ExecutionMismatch {
                block: number,
                detail: m.to_string(),
            })),
        }
    }

    /// A block that did not verify: count it, say so, keep what verified before it, wait,
    /// and fetch it again. The node does not go past it.
    fn hold(
        &mut self,
        number: u64,
        reason: &'static str,
        message: String,
    ) -> Result<(), FollowError> {
        self.metrics.rejected(reason);
        self.metrics.halted.set(1);
        error!(block = number, reason, error = %message, "block rejected; nothing of it was applied, and the node will not go past it");
        self.sync.set_halted(Some(format!(
            "block {number} rejected ({reason}): {message}"
        )));
        self.commit()?;
        let mut stop = self.io.stop.clone();
        let retry = self.config.retry_after_rejection;
        self.io.handle.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = stop.changed() => {}
            }
        });
        self.reset_cursor(self.applier.tip().number + 1);
        Ok(())
    }

    fn reset_cursor(&mut self, next: u64) {
        self.epoch += 1;
        let _ = self.io.cursor.send(Cursor {
            epoch: self.epoch,
            next,
        });
    }
}

/// The block and both roots of a state root mismatch, wherever it surfaced.
fn mismatch_in(e: &FollowError) -> Option<(u64, alloy_primitives::B256, alloy_primitives::B256)> {
    let store = match e {
        FollowError::Store(e) | FollowError::Apply(ApplyError::Store(e)) => e,
        _ => return None,
    };
    match store {
        StateDbError::StateRootMismatch {
            block,
            header,
            computed,
        } => Some((*block, *header, *computed)),
        _ => None,
    }
}

fn update_lag(sync: &SyncState, metrics: &FollowerMetrics, pending: Option<Instant>) {
    let lag = sync.lag();
    metrics
        .lag_blocks
        .set(i64::try_from(lag).unwrap_or(i64::MAX));
    metrics.lag_seconds.set(match (lag, pending) {
        (0, _) => 0.0,
        (_, Some(since)) => since.elapsed().as_secs_f64(),
        (_, None) => 0.0,
    });
}

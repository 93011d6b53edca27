//! The writer's side of the commit thread ([`WriterOptions::commit_thread`], the thread's
//! own side is [`crate::persist`]): handing a group over, and taking its commit in when it
//! lands.

use super::*;

impl StateWriter<'_> {
    /// Starts the open group's commit: when commits run on the commit thread
    /// ([`WriterOptions::commit_thread`]), hands the group over and returns at once, the
    /// writer taking the next blocks while it commits ([`StateWriter::committed_tip`]
    /// moves when it lands: at a later call, or [`StateWriter::poll_commit`] and
    /// [`StateWriter::finish_commit`]); otherwise commits it as [`StateWriter::commit`].
    /// A commit still under way lands first (at most one is). Returns the group's
    /// figures, with `commit_seconds` the time this thread spent on the hand-over; `None`
    /// when there was nothing to commit. On error the group is discarded (and, with the
    /// commit thread, the one under way too if it failed).
    pub fn start_commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        if !self.background {
            return self.commit();
        }
        if !self.dirty {
            return Ok(None);
        }
        let result = self.hand_off().map(Some);
        self.discard_on_error(result)
    }

    /// Takes in the commit under way on the commit thread if it has ended (waiting for the
    /// root in flight, if any, first: the landing changes the layer it reads). Returns
    /// whether one landed. On error (the commit failed) both groups are discarded.
    pub fn poll_commit(&mut self) -> Result<bool, StateDbError> {
        if !self
            .committing
            .as_ref()
            .is_some_and(|c| c.handle.is_finished())
        {
            return Ok(false);
        }
        if self.in_flight.is_some() {
            self.unreported = self.finish_root()?;
        }
        Ok(self.land_commit(false)?.is_some())
    }

    /// Waits for the commit under way on the commit thread, if any, and takes it in.
    /// Returns what it did; `None` when none was under way. On error both groups are
    /// discarded.
    pub fn finish_commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        if self.committing.is_none() {
            return Ok(None);
        }
        if self.in_flight.is_some() {
            self.unreported = self.finish_root()?;
        }
        let Some(info) = self.committing.as_ref().map(|c| c.info) else {
            return Ok(None);
        };
        // Its root was returned with the hand-over.
        Ok(self.land_commit(true)?.map(|p| CommitInfo {
            commit_seconds: p.write_seconds + p.commit_seconds,
            sync_seconds: 0.0,
            root: None,
            ..info
        }))
    }

    /// Takes in the commit under way on the commit thread: waits for it with `wait`, else
    /// only when it has ended. The caller made sure no root is in flight (the landing
    /// prunes the layer a root would read). On error both groups are discarded.
    pub(super) fn land_commit(&mut self, wait: bool) -> Result<Option<Persisted>, StateDbError> {
        let Some(committing) = self.committing.take_if(|c| wait || c.handle.is_finished()) else {
            return Ok(None);
        };
        if self.in_flight.is_some() {
            self.committing = Some(committing);
            return Err(StateDbError::Invariant {
                what: "a commit was to land while a root read the layer it prunes".into(),
            });
        }
        let CommitInFlight {
            handoff, handle, ..
        } = committing;
        let joining = Instant::now();
        let joined = persist::join(handle);
        let join_ms = joining.elapsed().as_secs_f64() * 1e3;
        let persisted = match joined {
            Ok(persisted) => persisted,
            Err(e) => {
                self.db.metrics().groups_discarded.inc();
                self.discard();
                return Err(e);
            }
        };
        self.note_landed(handoff.meta.clone());
        // Reads of the last commit now see the group; what the layer holds of it with the
        // same value is there, and goes.
        self.reader = None;
        let reader = self.begin_reader();
        self.reader = Some(self.discard_on_error(reader)?);
        let pruning = Instant::now();
        self.hashed.prune_committed(&handoff.layer);
        let prune_ms = pruning.elapsed().as_secs_f64() * 1e3;
        self.carried = 0;
        for h in &persisted.wiped {
            self.trie_cache.forget_storage(h);
        }
        let metrics = self.db.metrics();
        metrics
            .hashed_flush_seconds
            .observe(persisted.write_seconds);
        metrics.commit_seconds.observe(persisted.commit_seconds);
        self.db.refresh_size_metrics();
        debug!(
            head = handoff.meta.tip.number,
            entries = persisted.entries,
            write_ms = persisted.write_seconds * 1e3,
            commit_ms = persisted.commit_seconds * 1e3,
            prune_ms,
            join_ms,
            "group landed"
        );
        Ok(Some(persisted))
    }

    /// A commit on the commit thread holding `meta` succeeded: it is the last commit.
    pub(super) fn note_landed(&mut self, meta: Snapshot) {
        self.committed = meta;
        self.db.metrics().groups_committed.inc();
        if self.db.options().durability.every_commit() {
            self.mark_durable();
        }
    }

    /// Hands the open group to the commit thread (see [`crate::persist`]).
    pub(super) fn hand_off(&mut self) -> Result<CommitInfo, StateDbError> {
        let start = Instant::now();
        let root = self.finish_root()?;
        // At most one commit under way.
        self.land_commit(true)?;
        // A durable point due waits for no commit under way (see `sync_if_due`): made
        // here, between two commits, it is not put off for as long as they follow each
        // other.
        let sync_seconds = self.sync_if_due()?.map_or(0.0, |d| d.as_secs_f64());
        // The account trie's nodes the trie in memory changed: part of the group.
        let drained = self.sparse.drain()?;
        let mut layer = std::mem::take(&mut self.hashed);
        layer.account_nodes.extend(drained);
        // The writer's reads and roots see the group through this copy until it lands.
        let copying = Instant::now();
        self.hashed = layer.clone();
        let copy_ms = copying.elapsed().as_secs_f64() * 1e3;
        self.carried = self.hashed.approx_bytes();
        // What it holds is in the copy: all of it may fold back into hashes.
        self.sparse.enforce_budget()?;
        let handoff = Arc::new(Handoff {
            layer,
            rows: std::mem::take(&mut self.rows),
            meta: self.current.clone(),
            changed: self.changed.clone(),
            clear_changed: self.changed_stored,
        });
        let (env, dbs) = (self.db.env().clone(), *self.db.dbs());
        let theirs = Arc::clone(&handoff);
        let handle = std::thread::Builder::new()
            .name("gigas-commit".into())
            .spawn(move || persist::persist(&env, &dbs, &theirs))
            .map_err(|e| StateDbError::Invariant {
                what: format!("cannot start the commit thread: {e}"),
            })?;
        self.changed_stored = !self.changed.is_empty();
        let group_seconds = self.group.opened.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let info = CommitInfo {
            blocks: self.group.blocks,
            head: self.current.tip.number,
            changes: self.group.changes,
            write_seconds: group_seconds,
            commit_seconds: start.elapsed().as_secs_f64() - sync_seconds,
            sync_seconds,
            root,
        };
        self.committing = Some(CommitInFlight {
            handoff,
            info,
            handle,
        });
        self.dirty = false;
        self.group = Group::default();
        self.db.metrics().write_txn_seconds.observe(group_seconds);
        debug!(
            head = info.head,
            ms = info.commit_seconds * 1e3,
            copy_ms,
            "group handed to the commit thread"
        );
        Ok(info)
    }
}

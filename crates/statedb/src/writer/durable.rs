//! The writer's durable points under [`crate::Durability::Periodic`]: when one is due, its
//! writeback on a thread, and the sync that makes it.

use super::*;

impl StateWriter<'_> {
    /// Makes a durable point if [`crate::Durability::Periodic`]'s schedule says one is due:
    /// commits are left unsynced and its period passed since the last one, or its bytes were
    /// written. Done after every commit; a caller whose commits stop (no block comes) calls
    /// it on a timer, so that the last commit does not stay unsynced. Returns how long the
    /// sync took on this thread, if one was made.
    ///
    /// With [`crate::SyncSchedule::background`], a due point first has its pages written
    /// back on the writeback thread and this returns at once; the first call after that
    /// ended makes the point (call it after every block, as the full node's applier does, so
    /// that it comes before the next group dirties many more pages).
    pub fn sync_if_due(&mut self) -> Result<Option<Duration>, StateDbError> {
        let crate::Durability::Periodic(schedule) = self.db.options().durability else {
            return Ok(None);
        };
        // A sync waits for MDBX's write lock, which the commit thread holds meanwhile: the
        // point waits for the commit to land instead.
        if self.committing.is_some() && !self.poll_commit()? {
            return Ok(None);
        }
        if self.durable == self.committed.tip {
            return Ok(None);
        }
        let written = self
            .db
            .page_bytes_written()
            .saturating_sub(self.written_at_sync);
        if let Some(writeback) = &self.writeback {
            // A writeback slower than the schedule's bytes come in: the disk is the limit,
            // so wait for it here rather than let unsynced pages pile up.
            let overdue = written >= schedule.bytes.saturating_mul(4);
            if writeback.is_finished() || overdue {
                return self.sync();
            }
            return Ok(None);
        }
        let due = self.last_sync.elapsed() >= schedule.period || written >= schedule.bytes;
        if !due {
            return Ok(None);
        }
        if schedule.background {
            if let Some(writeback) = self.start_writeback() {
                self.writeback = Some(writeback);
                return Ok(None);
            }
        }
        self.sync()
    }

    /// Whether a durable point's writeback is under way and not yet followed by this
    /// writer's sync (which [`StateWriter::sync_if_due`] makes once it ended).
    pub fn writeback_pending(&self) -> bool {
        self.writeback.is_some()
    }

    /// Starts writing the data file back on a thread; `None` when it cannot (the caller
    /// syncs by itself).
    pub(super) fn start_writeback(&mut self) -> Option<Writeback> {
        let file = match &self.data_file {
            Some(file) => Arc::clone(file),
            None => match File::open(self.db.data_file()) {
                Ok(file) => Arc::clone(self.data_file.insert(Arc::new(file))),
                Err(e) => {
                    warn!(error = %e, "cannot open the data file for its writeback; durable points sync on the writer's thread");
                    return None;
                }
            },
        };
        Writeback::start(file, self.db.metrics().writeback_seconds.clone())
            .inspect_err(|e| warn!(error = %e, "durable point synced on the writer's thread"))
            .ok()
    }

    /// Waits for the writeback under way, if any, and refuses to go on after a failed one.
    pub(super) fn finish_writeback(&mut self) -> Result<(), StateDbError> {
        if let Some(writeback) = self.writeback.take() {
            if let Err(e) = writeback.join() {
                self.writeback_failed = Some(e.to_string());
            }
        }
        match &self.writeback_failed {
            Some(why) => Err(StateDbError::Io {
                what: "make a durable point after a failed writeback".into(),
                source: std::io::Error::other(why.clone()),
            }),
            None => Ok(()),
        }
    }

    /// Makes every commit so far durable now (a clean stop does this), whatever the
    /// durability mode. Returns how long the sync took; `None` when every commit was durable
    /// already (nothing synced).
    pub fn sync(&mut self) -> Result<Option<Duration>, StateDbError> {
        self.finish_commit()?;
        if self.durable == self.committed.tip {
            return Ok(None);
        }
        let waited = Instant::now();
        self.finish_writeback()?;
        let took = waited.elapsed() + self.db.sync()?;
        self.last_sync = Instant::now();
        self.written_at_sync = self.db.page_bytes_written();
        self.mark_durable();
        debug!(
            block = self.durable.number,
            ms = took.as_secs_f64() * 1e3,
            "durable point"
        );
        Ok(Some(took))
    }

    /// The committed tip survives a power loss from now on.
    pub(super) fn mark_durable(&mut self) {
        self.durable = self.committed.tip;
        self.db
            .metrics()
            .durable_block
            .set(i64::try_from(self.durable.number).unwrap_or(i64::MAX));
    }
}

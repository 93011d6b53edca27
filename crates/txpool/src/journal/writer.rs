//! The writer thread: group commits of appends, and the steps of a rewrite that run on it
//! or on its background thread.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use alloy_primitives::Bytes;

use super::format::{encode_batch, file_header};
use super::{
    sync_dir, tmp_path, JournalError, PendingAppend, Request, RewriteReply, Shared, Snapshot,
    Written, MAX_RECORD, REWRITE_BATCH_BYTES,
};

pub(super) struct Writer {
    pub(super) shared: Arc<Shared>,
    pub(super) file: File,
    pub(super) poisoned: Option<String>,
}

impl Writer {
    pub(super) fn run(mut self) {
        loop {
            let items: Vec<Request> = {
                let mut queue = self.shared.lock();
                while queue.items.is_empty() && !queue.closed {
                    queue = self
                        .shared
                        .wake
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if queue.items.is_empty() {
                    drop(queue);
                    // A rewrite requested while the journal closed: its thread finds the queue
                    // closed, removes its file and ends; wait for that.
                    self.shared.join_rewriter();
                    return;
                }
                queue.items.drain(..).collect()
            };
            let mut appends = Vec::new();
            for item in items {
                match item {
                    Request::Append { raw, reply, _slot } => appends.push((raw, reply, _slot)),
                    Request::Rewrite { live, reply } => {
                        self.commit(std::mem::take(&mut appends));
                        if let Err(e) = self.start_rewrite(live, reply.clone()) {
                            self.rewrite_done(Err(e), reply);
                        }
                    }
                    Request::Swap {
                        written,
                        from,
                        reply,
                    } => {
                        self.commit(std::mem::take(&mut appends));
                        let result = self.swap(written, from);
                        self.rewrite_done(result, reply);
                    }
                }
            }
            self.commit(appends);
        }
    }

    fn path(&self) -> &Path {
        &self.shared.path
    }

    fn poisoned_error(&self, cause: &str) -> JournalError {
        JournalError::Poisoned {
            path: self.shared.path.clone(),
            cause: cause.to_string(),
        }
    }

    fn poison(&mut self, cause: String) {
        tracing::error!(path = %self.path().display(), %cause, "txpool journal: refusing further appends");
        self.shared.poisoned.store(true, Ordering::Release);
        self.poisoned = Some(cause);
    }

    /// One batch, one `fdatasync`, then every waiter is answered.
    fn commit(&mut self, appends: Vec<PendingAppend>) {
        if appends.is_empty() {
            return;
        }
        if let Some(cause) = self.poisoned.clone() {
            for (_, reply, _) in appends {
                let _ = reply.send(Err(self.poisoned_error(&cause)));
            }
            return;
        }
        let batch = encode_batch(appends.iter().map(|(raw, _, _)| raw));
        let fault = self
            .shared
            .fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let result = match fault {
            Some(after) => {
                std::thread::sleep(after);
                Err(("write", io::Error::from(io::ErrorKind::StorageFull)))
            }
            None => self.file.write_all(&batch).map_err(|err| ("write", err)),
        }
        .and_then(|()| self.file.sync_data().map_err(|err| ("fdatasync", err)));
        match result {
            Ok(()) => {
                let metrics = &self.shared.metrics;
                metrics.fsyncs.inc();
                metrics.appends.inc_by(appends.len() as u64);
                metrics.bytes_written.inc_by(batch.len() as u64);
                let len = self
                    .shared
                    .len_bytes
                    .fetch_add(batch.len() as u64, Ordering::AcqRel)
                    + batch.len() as u64;
                metrics.size.set(i64::try_from(len).unwrap_or(i64::MAX));
                for (_, reply, _) in appends {
                    let _ = reply.send(Ok(()));
                }
            }
            Err((op, err)) => {
                // After a failed write or fdatasync the file's contents are unknown (the kernel
                // may drop the dirty pages); retrying could acknowledge lost data.
                let cause = format!("{op}: {err}");
                self.poison(cause.clone());
                for (_, reply, _) in appends {
                    let _ = reply.send(Err(JournalError::Io {
                        path: self.shared.path.clone(),
                        op,
                        source: io::Error::new(err.kind(), cause.clone()),
                    }));
                }
            }
        }
    }

    /// Step 1 of a rewrite: the snapshot and the length it covers, then the background
    /// thread that writes the new file.
    fn start_rewrite(&mut self, live: Snapshot, reply: RewriteReply) -> Result<(), JournalError> {
        if let Some(cause) = self.poisoned.clone() {
            return Err(self.poisoned_error(&cause));
        }
        let path = self.shared.path.clone();
        let live = std::panic::catch_unwind(std::panic::AssertUnwindSafe(live)).map_err(|_| {
            JournalError::Io {
                path: path.clone(),
                op: "take the pool snapshot",
                source: io::Error::other("the snapshot closure panicked"),
            }
        })?;
        if let Some(raw) = live.iter().find(|raw| raw.len() > MAX_RECORD) {
            return Err(JournalError::TooLarge {
                path,
                size: raw.len(),
            });
        }
        let from = self.shared.len_bytes.load(Ordering::Acquire);
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name("txpool-journal-rewrite".to_string())
            .spawn(move || {
                let tmp = tmp_path(&shared.path);
                let written = write_new_file(&tmp, &live);
                drop(live);
                let swap = Request::Swap {
                    written,
                    from,
                    reply,
                };
                if shared.push(swap).is_err() {
                    // The journal closed without waiting (it always waits; this is a guard).
                    let _ = std::fs::remove_file(&tmp);
                }
            })
            .map_err(|source| JournalError::Io {
                path: self.shared.path.clone(),
                op: "start the rewrite thread",
                source,
            })?;
        let previous = self
            .shared
            .rewriter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(handle);
        if let Some(previous) = previous {
            // The previous rewrite's thread already handed its file over (one runs at a time).
            let _ = previous.join();
        }
        Ok(())
    }

    /// Step 3 of a rewrite: the batches appended since `from` copied to the new file, which
    /// is fsynced and renamed over the journal.
    fn swap(&mut self, written: Written, from: u64) -> Result<(), JournalError> {
        let path = self.shared.path.clone();
        let tmp = tmp_path(&path);
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| JournalError::Io { path, op, source }
        };
        let (mut file, snapshot_len) = match written {
            Ok(done) => done,
            Err((op, err)) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(io(op)(err));
            }
        };
        if let Some(cause) = self.poisoned.clone() {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.poisoned_error(&cause));
        }
        let end = self.shared.len_bytes.load(Ordering::Acquire);
        let copied = copy_tail(&self.file, &mut file, from, end).and_then(|()| {
            file.sync_data()
                .map_err(|err| ("fsync the rewrite file", err))
        });
        if let Err((op, err)) = copied {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(op)(err));
        }
        if let Err(err) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("rename the rewritten journal")(err));
        }
        // From here the name refers to the new file: append to it whatever happens next.
        self.file = file;
        let tail = end - from;
        let len = snapshot_len + tail;
        let metrics = &self.shared.metrics;
        self.shared.len_bytes.store(len, Ordering::Release);
        metrics.size.set(i64::try_from(len).unwrap_or(i64::MAX));
        metrics.bytes_written.inc_by(len);
        metrics.rewrite_tail_bytes.inc_by(tail);
        if let Err(err) = sync_dir(&path) {
            // The rename may not survive a power loss; the old file would then come back
            // without later appends. Stop acknowledging until a restart sorts it out.
            self.poison(format!("fsync the directory after a rewrite: {err}"));
            return Err(io("fsync the directory")(err));
        }
        Ok(())
    }

    /// Ends a rewrite: counted, logged if no one waits for it, and the next one allowed.
    fn rewrite_done(&self, result: Result<(), JournalError>, reply: RewriteReply) {
        let metrics = &self.shared.metrics;
        match &result {
            Ok(()) => metrics.rewrites.inc(),
            Err(_) => metrics.rewrite_failures.inc(),
        };
        self.shared.rewriting.store(false, Ordering::Release);
        match reply {
            Some(reply) => {
                let _ = reply.send(result);
            }
            None => match result {
                Ok(()) => tracing::debug!(
                    path = %self.path().display(),
                    bytes = self.shared.len_bytes.load(Ordering::Acquire),
                    "txpool journal: rewritten"
                ),
                Err(e) => tracing::warn!(
                    error = %e,
                    "txpool journal: a rewrite failed; the journal keeps growing until one succeeds"
                ),
            },
        }
    }
}

/// Copies `from..end` of `old` (whole batches appended during a rewrite) to the end of `new`.
fn copy_tail(
    old: &File,
    new: &mut File,
    from: u64,
    end: u64,
) -> Result<(), (&'static str, io::Error)> {
    use std::os::unix::fs::FileExt;
    let mut buffer = vec![0u8; (end - from).min(1 << 20) as usize];
    let mut at = from;
    while at < end {
        let n = ((end - at) as usize).min(buffer.len());
        old.read_exact_at(&mut buffer[..n], at)
            .map_err(|err| ("read the batches appended during the rewrite", err))?;
        new.write_all(&buffer[..n])
            .map_err(|err| ("write the rewrite file", err))?;
        at += n as u64;
    }
    Ok(())
}

fn write_new_file(tmp: &Path, live: &[Bytes]) -> Result<(File, u64), (&'static str, io::Error)> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(|err| ("create the rewrite file", err))?;
    let mut len = 0u64;
    let header = file_header();
    file.write_all(&header)
        .map_err(|err| ("write the rewrite file", err))?;
    len += header.len() as u64;
    let mut start = 0;
    while start < live.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < live.len()
            && (end == start || bytes + live[end].len() + 4 <= REWRITE_BATCH_BYTES)
        {
            bytes += live[end].len() + 4;
            end += 1;
        }
        let batch = encode_batch(live[start..end].iter());
        file.write_all(&batch)
            .map_err(|err| ("write the rewrite file", err))?;
        len += batch.len() as u64;
        start = end;
    }
    file.sync_all()
        .map_err(|err| ("fsync the rewrite file", err))?;
    Ok((file, len))
}

//! The commit pipeline: planning a batch's records and the compaction work that rides on
//! it, encoding, appending to the log, applying the records, and acknowledging the batch once
//! it is durable.

use std::path::PathBuf;
use std::time::Instant;

use super::{
    io, key_at, Batch, Commit, Hint, LogFile, OwnedKind, Vilmo, KEEP_BUFFER, MAX_BATCH_LEN,
};
use crate::error::{Error, Result};
use crate::format::{
    batch_checksum, encode_batch_header, Checksum, FileHeader, FileSpan, ReadPos, Record,
    BATCH_HEADER_LEN, FILE_HEADER_LEN, FOOTER_LEN, FOOTER_MAGIC, NO_FILE,
};
use crate::index::Location;
use crate::recovery::{self, file_name};
use crate::storage::{Storage, StorageFile};

/// A batch written and applied by [`Vilmo::commit_unsynced`], not yet durable: make it so
/// with [`Unsynced::sync`], then give the outcome to [`Vilmo::finish_commit`].
#[must_use = "a batch that is never finished leaves the store refusing further commits"]
pub struct Unsynced<F> {
    number: u64,
    checksum: Checksum,
    file_id: u32,
    base: u64,
    path: PathBuf,
    /// A handle of the batch's file to fdatasync (`None` when the store is not durable).
    sync: Option<F>,
    applied: Result<()>,
    /// The file the batch's compaction work finished, if any.
    compacted: Option<u32>,
    total: usize,
    started: Instant,
    t_plan: std::time::Duration,
    t_encode: std::time::Duration,
    t_durable: std::time::Duration,
}

impl<F> std::fmt::Debug for Unsynced<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsynced")
            .field("number", &self.number)
            .field("bytes", &self.total)
            .finish_non_exhaustive()
    }
}

impl<F: StorageFile> Unsynced<F> {
    /// The batch's number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Makes the batch durable (fdatasync of its file); touches nothing of the store.
    pub fn sync(&self) -> std::io::Result<()> {
        match &self.sync {
            Some(file) => file.sync_data(),
            None => Ok(()),
        }
    }
}

/// Where a record to be written will go, and what it is.
enum Planned<'a> {
    Put {
        key: &'a [u8],
        value: &'a [u8],
        supersedes: u32,
        moved: bool,
        hint: Hint,
    },
    Nullify {
        key: &'a [u8],
        target: u32,
    },
    Drop(Box<FileSpan>),
    Cursor {
        victim: u32,
        next: u64,
    },
}

/// What [`Vilmo::encode`] made of a batch.
struct Encoded {
    /// Whether the batch starts a new file.
    rotate: bool,
    /// Its length in bytes.
    total: usize,
    /// Each record's offset in the batch, with its hint.
    kinds: Vec<(u32, Option<Hint>)>,
    checksum: Checksum,
}

impl Planned<'_> {
    fn hint(&self) -> Option<Hint> {
        match self {
            Planned::Put { hint, .. } => Some(*hint),
            _ => None,
        }
    }

    fn record(&self) -> Record<'_> {
        match *self {
            Planned::Put {
                key,
                value,
                supersedes,
                moved,
                ..
            } => Record::Put {
                key,
                value,
                supersedes,
                moved,
            },
            Planned::Nullify { key, target } => Record::Nullify { key, target },
            Planned::Drop(ref span) => Record::Drop(**span),
            Planned::Cursor { victim, next } => Record::Cursor { victim, next },
        }
    }
}

impl<S: Storage> Vilmo<S> {
    /// Commits `batch` durably and returns its number and chained checksum.
    pub fn commit(&mut self, batch: Batch) -> Result<Commit> {
        let unsynced = self.commit_unsynced(batch)?;
        let synced = unsynced.sync();
        self.finish_commit(unsynced, synced)
    }

    /// The first half of [`Vilmo::commit`]: plans, encodes and writes `batch`, and applies it
    /// to the index, so that reads already see it; it is not durable yet. The caller makes it
    /// durable with [`Unsynced::sync`] (which needs no access to the store: a caller that
    /// shares the store behind a lock releases the lock meanwhile, so that readers are not
    /// held up by the disk) and then hands the outcome to [`Vilmo::finish_commit`], before
    /// any other commit. Until then [`Vilmo::last_commit`] is the previous batch.
    ///
    /// Readers that see the unsynced batch see state no one has acknowledged yet: a caller
    /// that publishes what it commits (the sequencer) publishes after `finish_commit`.
    pub fn commit_unsynced(&mut self, mut batch: Batch) -> Result<Unsynced<S::File>> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if self.unsynced {
            // A second batch before the first was finished would chain onto an unsynced one.
            self.poisoned = true;
            return Err(Error::Poisoned);
        }
        let started = Instant::now();
        let mut buf = std::mem::take(&mut self.buf);
        batch.canonicalize();
        let number = self.last.number + 1;

        // 1. The user's records, sorted by key.
        let mut planned = self.plan_records(&batch);
        let t_plan = started.elapsed();
        let own_records = planned.len();
        let own_len: usize = planned.iter().map(|p| p.record().encoded_len()).sum();
        // 2. Bounded, deterministic compaction work, resumed where the last batch stopped.
        let victim_done = self.plan_compaction(&batch, own_len, &mut planned);
        // 3. Encode, choosing the file.
        let encoded = self.encode(number, &mut planned, own_records, own_len, &mut buf);
        drop(planned);
        let Encoded {
            rotate,
            total,
            kinds,
            checksum,
        } = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                self.buf = buf;
                return Err(e);
            }
        };

        let t_encode = started.elapsed();
        // 4. Make it durable.
        let result = self.append(&buf, rotate, number);
        let t_durable = started.elapsed();
        // The buffer is kept for the next batch, but a batch far larger than a block's (a
        // genesis of a million accounts: 112 MiB) must not pin its size for the store's life.
        if buf.capacity() > KEEP_BUFFER {
            buf = Vec::new();
        }
        self.buf = buf;
        let (file_id, base) = match result {
            Ok(v) => v,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };

        // 5. Apply the records: reads see them from here on. The disk makes them durable in
        //    `Unsynced::sync`, and `finish_commit` acknowledges them.
        let (path, sync, applied) = self.apply_written(file_id, base, kinds)?;
        self.unsynced = true;
        Ok(Unsynced {
            number,
            checksum,
            file_id,
            base,
            path,
            sync,
            applied,
            compacted: victim_done.map(|span| span.file_id),
            total,
            started,
            t_plan,
            t_encode,
            t_durable,
        })
    }

    /// Phase 1 of a commit: the batch's own records, in its (sorted) order, each with what
    /// the index knows of its key.
    fn plan_records<'a>(&'a self, batch: &'a Batch) -> Vec<Planned<'a>> {
        let mut planned: Vec<Planned<'a>> = Vec::with_capacity(batch.ops.len() + 16);
        let files = &self.files;
        // Index lookups are read-only and each is a cache miss or two: spread them over the
        // cores.
        let index = &self.state.index;
        let lookups: Vec<(u64, Option<Location>)> = {
            use rayon::prelude::*;
            batch
                .ops
                .par_iter()
                .with_min_len(4096)
                .map(|op| {
                    let key = batch.key(op);
                    let hash = index.hash(key);
                    (hash, index.get_hashed(hash, key, |l| key_at(files, l)))
                })
                .collect()
        };
        for (op, &(hash, old)) in batch.ops.iter().zip(&lookups) {
            let key = batch.key(op);
            if op.delete {
                if let Some(old) = old {
                    planned.push(Planned::Nullify {
                        key,
                        target: old.file,
                    });
                }
                continue;
            }
            // The file of the previous version. Whether it is another file is only known
            // once the batch's own file is chosen (it may rotate), below.
            let supersedes = old.map_or(NO_FILE, |old| old.file);
            planned.push(Planned::Put {
                key,
                value: batch.value(op),
                supersedes,
                moved: false,
                hint: Hint { hash, old },
            });
        }
        planned
    }

    /// Phase 2 of a commit: the compaction work that rides on the batch (at most a budget of
    /// bytes of the victim file, resumed at its cursor), appended to `planned`; returns the
    /// victim's span when this step finished it.
    fn plan_compaction<'a>(
        &'a self,
        batch: &Batch,
        own_len: usize,
        planned: &mut Vec<Planned<'a>>,
    ) -> Option<FileSpan> {
        let files = &self.files;
        let budget = self
            .options
            .compaction_bytes_per_batch
            .max(own_len as u64 * 3);
        let mut victim_done = None;
        let cursor = self
            .state
            .cursor
            .or_else(|| self.pick_victim().map(|v| (v, ReadPos::START)));
        if let Some((victim, start)) = cursor {
            if let Some(vf) = self.file(victim) {
                let bytes = vf.bytes();
                let user_keys: Vec<&[u8]> = batch.ops.iter().map(|op| batch.key(op)).collect();
                let cursor_at = planned.len();
                planned.push(Planned::Cursor {
                    victim,
                    next: start.at as u64,
                });
                let budget_end = start.at.saturating_add(budget as usize);
                let mut pos = start;
                let mut read_any = false;
                while pos.at < bytes.len() && !(read_any && pos.at >= budget_end) {
                    // Verified bytes always hold whole batches and records; a failed decode
                    // (a can't-happen) stops the step rather than panic.
                    let Some((body_start, body_end, batch_end)) = pos.batch_bounds(bytes) else {
                        break;
                    };
                    let mut at = pos.at.max(body_start);
                    while at < body_end && !(read_any && at >= budget_end) {
                        let Some(Ok((record, rec_len))) =
                            bytes.get(at..body_end).map(Record::decode)
                        else {
                            break;
                        };
                        read_any = true;
                        let offset = at as u32;
                        match record {
                            Record::Put {
                                key,
                                value,
                                supersedes,
                                ..
                            } => {
                                let in_batch = user_keys.binary_search(&key).is_ok();
                                let live = !in_batch
                                    && self.state.index.get(key, |l| key_at(files, l))
                                        == Some(Location {
                                            file: victim,
                                            offset,
                                        });
                                let protects = supersedes != NO_FILE && self.exists(supersedes);
                                if live {
                                    planned.push(Planned::Put {
                                        key,
                                        value,
                                        supersedes: if protects { supersedes } else { NO_FILE },
                                        moved: true,
                                        hint: Hint {
                                            hash: self.state.index.hash(key),
                                            old: Some(Location {
                                                file: victim,
                                                offset,
                                            }),
                                        },
                                    });
                                } else if protects {
                                    planned.push(Planned::Nullify {
                                        key,
                                        target: supersedes,
                                    });
                                }
                            }
                            Record::Nullify { key, target } => {
                                if target != victim && self.exists(target) {
                                    planned.push(Planned::Nullify { key, target });
                                }
                            }
                            Record::Drop(span) => planned.push(Planned::Drop(Box::new(span))),
                            Record::Cursor { .. } => {}
                        }
                        at += rec_len;
                    }
                    if at < body_end {
                        pos.at = at;
                        break;
                    }
                    pos = ReadPos {
                        batch: batch_end,
                        at: batch_end,
                    };
                }
                planned[cursor_at] = Planned::Cursor {
                    victim,
                    next: pos.at as u64,
                };
                if pos.at >= bytes.len() {
                    victim_done = Some(vf.span());
                }
            }
        }
        if let Some(span) = victim_done {
            planned.push(Planned::Drop(Box::new(span)));
        }
        victim_done
    }

    /// Phase 3 of a commit: the batch's bytes in `buf` (header, records, footer with the
    /// chained checksum), and the file it goes to: the next one when it would push the
    /// current file past its target size.
    fn encode(
        &self,
        number: u64,
        planned: &mut [Planned<'_>],
        own_records: usize,
        own_len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Encoded> {
        let body_len = own_len
            + planned[own_records..]
                .iter()
                .map(|p| p.record().encoded_len())
                .sum::<usize>();
        let total = BATCH_HEADER_LEN + body_len + FOOTER_LEN;
        if total > MAX_BATCH_LEN {
            return Err(Error::TooLarge {
                what: "batch",
                len: total,
                limit: MAX_BATCH_LEN,
            });
        }
        let rotate = match self.file(self.current) {
            None => true,
            Some(f) => {
                f.last_batch >= f.header.first_batch
                    && f.len + total as u64 > self.options.target_file_size
            }
        };
        buf.clear();
        buf.reserve(total);
        buf.extend_from_slice(&encode_batch_header(
            number,
            planned.len() as u32,
            body_len as u32,
        ));
        // A put that supersedes a version in its own file needs no protection: that version
        // sits before it in the same file and dies with it.
        let target_file = if rotate {
            self.current + 1
        } else {
            self.current
        };
        for p in planned.iter_mut() {
            if let Planned::Put {
                supersedes,
                moved: false,
                ..
            } = p
            {
                if *supersedes == target_file {
                    *supersedes = NO_FILE;
                }
            }
        }
        let mut kinds = Vec::with_capacity(planned.len());
        for p in planned.iter() {
            let record = p.record();
            let at = buf.len();
            record.encode_into(buf);
            kinds.push((at as u32, p.hint()));
        }
        let checksum = batch_checksum(
            &self.last.checksum,
            &buf[..BATCH_HEADER_LEN],
            &buf[BATCH_HEADER_LEN..],
        );
        buf.extend_from_slice(&FOOTER_MAGIC);
        buf.extend_from_slice(&checksum);
        Ok(Encoded {
            rotate,
            total,
            kinds,
            checksum,
        })
    }

    /// Phase 5 of a commit: the records just written, applied to the index (read back from
    /// the page cache), and the file's handle for the sync. An error applying them is
    /// returned in the last element, for [`Vilmo::finish_commit`] to report.
    fn apply_written(
        &mut self,
        file_id: u32,
        base: u64,
        kinds: Vec<(u32, Option<Hint>)>,
    ) -> Result<(PathBuf, Option<S::File>, Result<()>)> {
        let path = self
            .file(file_id)
            .map(|f| f.path.clone())
            .unwrap_or_default();
        let sync = match (
            self.options.durable,
            self.file(file_id).map(|f| f.file.try_clone()),
        ) {
            (false, _) | (true, None) => None,
            (true, Some(Ok(file))) => Some(file),
            (true, Some(Err(e))) => {
                self.poisoned = true;
                return Err(io(&path, "dup for fdatasync")(e));
            }
        };
        let mut applied = Ok(());
        for (at, hint) in kinds {
            let offset = base + at as u64;
            // Read the record back from the page cache rather than keep a copy of every
            // decoded record in memory.
            let decoded = self.file(file_id).map(|f| {
                Record::decode(&f.bytes()[offset as usize..])
                    .map(|(r, len)| (OwnedKind::of(&r), len))
            });
            let (kind, len) = match decoded {
                Some(Ok(v)) => v,
                Some(Err(reason)) => {
                    applied = Err(Error::Corrupt {
                        path: path.clone(),
                        offset,
                        reason: format!("record just written does not decode: {reason}"),
                    });
                    break;
                }
                None => break,
            };
            if let Err(e) = self.apply(file_id, offset as u32, kind, len as u64, hint) {
                applied = Err(e);
                break;
            }
        }
        Ok((path, sync, applied))
    }

    /// The second half of [`Vilmo::commit`]: acknowledges the batch `unsynced` wrote once
    /// `synced` (its [`Unsynced::sync`]) says it is durable, and returns its number and
    /// chained checksum. A failed sync cuts the file back to the last acknowledged batch and
    /// poisons the store.
    pub fn finish_commit(
        &mut self,
        unsynced: Unsynced<S::File>,
        synced: std::io::Result<()>,
    ) -> Result<Commit> {
        self.unsynced = false;
        let Unsynced {
            number,
            checksum,
            file_id,
            base,
            path,
            sync: _,
            applied,
            compacted,
            total,
            started,
            t_plan,
            t_encode,
            t_durable,
        } = unsynced;
        if let Err(e) = synced {
            // After a failed fdatasync the page cache still holds the whole, valid batch: a
            // reopen would keep a batch that was never acknowledged, later batches would build
            // on it, and a power loss could then leave a hole. Cut the file back to what was
            // acknowledged and make that durable.
            self.poisoned = true;
            self.unlink.clear();
            let cut = self
                .files
                .get_mut(file_id as usize)
                .and_then(Option::as_mut)
                .map(|f| f.file.set_len(base).and_then(|()| f.file.sync_data()));
            if let Some(Err(cut_error)) = cut {
                // Neither the batch nor its removal can be made durable: whatever a later open
                // finds, the disk may run ahead of what was acknowledged. Stop before anything
                // builds on that.
                tracing::error!(path = %path.display(), sync_error = %e, %cut_error, "fdatasync of a batch failed and the batch cannot be cut back; aborting so that no later write builds on an unacknowledged batch");
                std::process::abort();
            }
            tracing::error!(path = %path.display(), error = %e, offset = base, "fdatasync of a batch failed; cut the file back to the last acknowledged batch");
            return Err(io(&path, "fdatasync batch")(e));
        }
        if let Err(e) = applied {
            self.poisoned = true;
            // The batch is durable, so its drops are too: a reopen removes the files.
            self.unlink.clear();
            return Err(e);
        }
        if let Some(f) = self
            .files
            .get_mut(file_id as usize)
            .and_then(Option::as_mut)
        {
            f.last_batch = number;
            f.last_checksum = checksum;
        }
        self.last = Commit { number, checksum };
        if let Some(file) = compacted {
            self.metrics.compactions.inc();
            tracing::debug!(file, batch = number, "compacted log file away");
        }
        // The batch is durable: removing the files it drops can no longer lose their keys. A
        // failure here does not undo the batch, so it is not the caller's error: the next
        // commit or open finishes the removal.
        if let Err(e) = self.finish_unlinks() {
            tracing::warn!(error = %e, "removing compacted log files did not complete; it is retried after the next batch");
        }
        tracing::trace!(
            batch = number,
            plan_ms = t_plan.as_secs_f64() * 1e3,
            encode_ms = (t_encode - t_plan).as_secs_f64() * 1e3,
            write_ms = (t_durable - t_encode).as_secs_f64() * 1e3,
            apply_and_sync_ms = (started.elapsed() - t_durable).as_secs_f64() * 1e3,
            bytes = total,
            "vilmo commit"
        );
        self.metrics.batches.inc();
        self.metrics.bytes_written.inc_by(total as u64);
        self.metrics
            .batch_latency
            .observe(started.elapsed().as_secs_f64());
        self.update_metrics();
        Ok(self.last)
    }

    /// Appends an encoded batch to the current file (or a new one). Returns the file and the
    /// offset the batch starts at; the caller makes it durable.
    fn append(&mut self, buf: &[u8], rotate: bool, number: u64) -> Result<(u32, u64)> {
        if rotate {
            let id = self.current + 1;
            if id > recovery::MAX_FILE_ID {
                return Err(Error::InvalidOption(format!(
                    "the store has used all {} file numbers; raise target_file_size",
                    recovery::MAX_FILE_ID
                )));
            }
            let path = self.dir.join(file_name(id));
            let header = FileHeader {
                file_id: id,
                first_batch: number,
                anchor: self.last.checksum,
            };
            let mut file = self
                .storage
                .create_new(&path)
                .map_err(io(&path, "create log file"))?;
            file.append(&header.encode())
                .map_err(io(&path, "write header"))?;
            if self.options.durable {
                // The header and the file's entry are durable before any batch goes in, so a
                // file that holds an acknowledged batch always has both.
                file.sync_data().map_err(io(&path, "fdatasync header"))?;
                self.storage
                    .sync_dir(&self.dir)
                    .map_err(io(&self.dir, "fsync directory"))?;
            }
            let map = file
                .map(FILE_HEADER_LEN as u64, self.options.target_file_size)
                .map_err(io(&path, "mmap"))?;
            if self.files.len() <= id as usize {
                self.files.resize_with(id as usize + 1, || None);
            }
            self.files[id as usize] = Some(LogFile {
                path,
                file,
                map,
                header,
                len: FILE_HEADER_LEN as u64,
                last_batch: number - 1,
                last_checksum: self.last.checksum,
            });
            *self.live_mut(id) += FILE_HEADER_LEN as u64;
            self.current = id;
        }
        let id = self.current;
        let f = self
            .files
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(Error::Poisoned)?;
        let base = f.len;
        // Durability comes from the fdatasync that `commit` runs beside applying the batch.
        let t = Instant::now();
        f.file.append(buf).map_err(io(&f.path, "append batch"))?;
        tracing::trace!(
            write_ms = t.elapsed().as_secs_f64() * 1e3,
            bytes = buf.len(),
            "vilmo write"
        );
        f.len += buf.len() as u64;
        if f.len as usize > f.map.len() {
            // Only a batch larger than the target file size (or a storage whose views do not
            // reserve room) gets here.
            f.map = f
                .file
                .map(f.len, f.len.saturating_mul(2))
                .map_err(io(&f.path, "mmap"))?;
        }
        Ok((id, base))
    }
}

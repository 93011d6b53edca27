//! The journal of accepted transactions: group-committed appends, replay at start, atomic
//! rewrite.
//!
//! # Format
//!
//! A 16-byte file header (`GIGASTXJ`, version `u32` LE, four zero bytes), then batches. A batch
//! is what one `fdatasync` made durable:
//!
//! ```text
//! payload_len u32 LE | payload_crc32 u32 LE | header_crc32 u32 LE (of the first 8 bytes)
//! payload: records, each  len u32 LE | raw EIP-2718 transaction
//! ```
//!
//! # Reading after a crash
//!
//! Only the last batch can be unfinished: the writer starts a batch after the previous one's
//! `fdatasync` returned, and never acknowledges an append before the `fdatasync` that covers
//! it. So a damaged *last* batch (too short for its header, a zeroed tail, a length past the end
//! of the file, a checksum mismatch in the batch that ends the file) is a torn tail: it is cut
//! with a warning, and nothing acknowledged is lost. A damaged batch followed by more data is
//! corruption of acknowledged data: opening fails with the file and the offset.
//!
//! # Rewrite
//!
//! A rewrite runs beside the appends, in three steps:
//!
//! 1. On the writer thread, between two group commits, the caller's closure takes the live
//!    transactions (the pool's snapshot) and the journal's length at that instant is noted.
//! 2. A background thread writes the snapshot to `<path>.tmp` and fsyncs it, while appends go
//!    on into the old file, each acknowledged after its own `fdatasync` as usual.
//! 3. Back on the writer thread, between two group commits: the batches appended since step 1
//!    are copied from the old file to the end of the new one (batches do not depend on their
//!    offset), the new file is fsynced, renamed over the journal, and the directory fsynced;
//!    appends then go to the new file.
//!
//! Appends wait only for step 3, whose work is what arrived during the rewrite, not the whole
//! pool (a rewrite of a full pool writes hundreds of MiB). A crash at any instant leaves the
//! old or the new file complete under the journal's name. No append is lost: the node adds a
//! transaction to the pool before it appends it, so an append written before step 1 is in the
//! snapshot (unless a block included it or the pool evicted it since), and one written after
//! it is in the copied tail. A transaction can appear twice (in the snapshot and in the tail);
//! replay must treat "already known" as success.

mod format;
mod writer;

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use alloy_primitives::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use format::{file_header, parse};
use writer::Writer;

const MAGIC: &[u8; 8] = b"GIGASTXJ";
const VERSION: u32 = 1;
const FILE_HEADER_LEN: usize = 16;
const BATCH_HEADER_LEN: usize = 12;
/// Payload bound of one batch a rewrite writes (appends make one batch per group commit).
const REWRITE_BATCH_BYTES: usize = 16 << 20;
/// Appends that may wait for the writer by default.
pub const DEFAULT_QUEUE: usize = 8192;
/// Largest record: the length prefix is a `u32`, and a batch must fit one too.
const MAX_RECORD: usize = 1 << 30;

/// A journal failure; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An I/O operation failed.
    #[error("journal {}: {op}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Acknowledged data is damaged.
    #[error("journal {}: corrupt at offset {offset}: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damaged batch or record.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The file does not start with the journal's header.
    #[error("journal {}: not a transaction journal (bad header)", path.display())]
    NotAJournal {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by a newer format.
    #[error("journal {}: unsupported version {version}", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        version: u32,
    },
    /// A write or sync failed earlier; after a failed fsync the file's state is unknown, so the
    /// journal refuses further appends until the node restarts and re-reads it.
    #[error("journal {}: refusing appends after an earlier failure: {cause}", path.display())]
    Poisoned {
        /// The file.
        path: PathBuf,
        /// The earlier failure.
        cause: String,
    },
    /// A record larger than the format holds.
    #[error("journal {}: record of {size} bytes is too large", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The record's size.
        size: usize,
    },
    /// A rewrite is already running.
    #[error("journal {}: a rewrite is already running", path.display())]
    RewriteRunning {
        /// The file.
        path: PathBuf,
    },
    /// The writer thread is gone.
    #[error("journal {}: closed", path.display())]
    Closed {
        /// The file.
        path: PathBuf,
    },
}

/// The journal's Prometheus metrics.
#[derive(Debug, Clone, Default)]
pub struct JournalMetrics {
    /// Transactions appended durably.
    pub appends: Counter,
    /// `fdatasync` calls of group commits (fewer than appends under concurrency).
    pub fsyncs: Counter,
    /// Bytes written by appends and rewrites.
    pub bytes_written: Counter,
    /// Completed rewrites.
    pub rewrites: Counter,
    /// Rewrites that failed (the journal goes on in the old file).
    pub rewrite_failures: Counter,
    /// Bytes appended during rewrites and copied to the new file when it took over.
    pub rewrite_tail_bytes: Counter,
    /// Current size of the journal file.
    pub size: Gauge,
}

impl JournalMetrics {
    /// Registers every metric as `gigas_txpool_journal_*`.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("gigas_txpool_journal");
        registry.register(
            "appends",
            "Transactions appended durably",
            self.appends.clone(),
        );
        registry.register(
            "fsyncs",
            "fdatasync calls of group commits",
            self.fsyncs.clone(),
        );
        registry.register(
            "bytes_written",
            "Bytes written to the journal",
            self.bytes_written.clone(),
        );
        registry.register("rewrites", "Journal rewrites", self.rewrites.clone());
        registry.register(
            "rewrite_failures",
            "Journal rewrites that failed (the old file goes on)",
            self.rewrite_failures.clone(),
        );
        registry.register(
            "rewrite_tail_bytes",
            "Bytes appended while a rewrite ran, copied to the new file",
            self.rewrite_tail_bytes.clone(),
        );
        registry.register("size_bytes", "Journal file size", self.size.clone());
    }
}

type Snapshot = Box<dyn FnOnce() -> Vec<Bytes> + Send>;

/// Who hears how a rewrite ended: a caller of [`Journal::rewrite`] waiting for it, or no one
/// (a rewrite started with [`Journal::start_rewrite`]; its outcome is logged and counted).
type RewriteReply = Option<mpsc::SyncSender<Result<(), JournalError>>>;

/// What the background thread of a rewrite hands back: the new file (its snapshot written and
/// fsynced) and its length, or the step that failed.
type Written = Result<(File, u64), (&'static str, io::Error)>;

/// An append taken off the queue: the record, its waiter, and its queue slot.
type PendingAppend = (
    Bytes,
    oneshot::Sender<Result<(), JournalError>>,
    OwnedSemaphorePermit,
);

enum Request {
    Append {
        raw: Bytes,
        reply: oneshot::Sender<Result<(), JournalError>>,
        /// Held until the record is durable: the bound of the queue and the batch in flight.
        _slot: OwnedSemaphorePermit,
    },
    Rewrite {
        live: Snapshot,
        reply: RewriteReply,
    },
    /// The background thread wrote the snapshot: the writer copies what was appended since
    /// `from` and swaps the files.
    Swap {
        written: Written,
        from: u64,
        reply: RewriteReply,
    },
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Request>,
    closed: bool,
}

struct Shared {
    path: PathBuf,
    queue: Mutex<Queue>,
    wake: Condvar,
    slots: Arc<Semaphore>,
    len_bytes: AtomicU64,
    poisoned: AtomicBool,
    /// Set from a rewrite's request until its swap (or failure): one at a time.
    rewriting: AtomicBool,
    /// The background thread of the running rewrite, joined before the journal closes.
    rewriter: Mutex<Option<JoinHandle<()>>>,
    metrics: JournalMetrics,
    /// A simulated disk failure armed for the next batch ([`Journal::fail_next_write`]).
    fault: Mutex<Option<Duration>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, request: Request) -> Result<(), JournalError> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(self.closed());
        }
        queue.items.push_back(request);
        drop(queue);
        self.wake.notify_one();
        Ok(())
    }

    /// Waits for the thread of the last rewrite, if it has not been waited for.
    fn join_rewriter(&self) {
        let rewriter = self
            .rewriter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(rewriter) = rewriter {
            let _ = rewriter.join();
        }
    }

    fn closed(&self) -> JournalError {
        JournalError::Closed {
            path: self.path.clone(),
        }
    }
}

/// The append-only file of accepted transactions, replayed at start.
pub struct Journal {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.shared.path)
            .field("len_bytes", &self.len_bytes())
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Opens (creating) the journal and returns the transactions it holds, in append order.
    /// A torn tail is cut with a warning; damage before the tail is an error naming the file
    /// and the offset.
    pub fn open(path: &Path) -> Result<(Journal, Vec<Bytes>), JournalError> {
        Self::open_with_queue(path, DEFAULT_QUEUE)
    }

    /// [`Journal::open`] with `queue` appends allowed to wait for the writer.
    pub fn open_with_queue(
        path: &Path,
        queue: usize,
    ) -> Result<(Journal, Vec<Bytes>), JournalError> {
        let path = path.to_path_buf();
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| JournalError::Io { path, op, source }
        };
        // A rewrite that crashed before its rename left this; the journal itself is intact.
        match std::fs::remove_file(tmp_path(&path)) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(io("remove a stale rewrite file")(err)),
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open"))?;
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(io("read"))?;

        let header = file_header();
        let (records, valid_end) = if data.len() < FILE_HEADER_LEN {
            // Empty, or a crash while the header of a new file was written.
            if !header.starts_with(&data) {
                return Err(JournalError::NotAJournal { path });
            }
            file.set_len(0).map_err(io("truncate"))?;
            file.seek(SeekFrom::Start(0)).map_err(io("seek"))?;
            file.write_all(&header).map_err(io("write the header"))?;
            file.sync_all().map_err(io("fsync"))?;
            sync_dir(&path).map_err(io("fsync the directory"))?;
            (Vec::new(), FILE_HEADER_LEN)
        } else {
            if data[..8] != MAGIC[..] {
                return Err(JournalError::NotAJournal { path });
            }
            let version = u32::from_le_bytes([data[8], data[9], data[10], data[11]]);
            if version != VERSION {
                return Err(JournalError::UnsupportedVersion { path, version });
            }
            let parsed = parse(&data, &path)?;
            if let Some(reason) = &parsed.torn {
                tracing::warn!(
                    path = %path.display(),
                    offset = parsed.valid_end,
                    cut_bytes = data.len() - parsed.valid_end,
                    reason = %reason,
                    "txpool journal: cutting a torn tail (an append that was never acknowledged)"
                );
                file.set_len(parsed.valid_end as u64)
                    .map_err(io("truncate the torn tail"))?;
                file.sync_all().map_err(io("fsync"))?;
            }
            (parsed.records, parsed.valid_end)
        };
        file.seek(SeekFrom::Start(valid_end as u64))
            .map_err(io("seek"))?;

        let metrics = JournalMetrics::default();
        metrics
            .size
            .set(i64::try_from(valid_end).unwrap_or(i64::MAX));
        let shared = Arc::new(Shared {
            path: path.clone(),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            slots: Arc::new(Semaphore::new(queue.clamp(1, Semaphore::MAX_PERMITS))),
            len_bytes: AtomicU64::new(valid_end as u64),
            poisoned: AtomicBool::new(false),
            rewriting: AtomicBool::new(false),
            rewriter: Mutex::new(None),
            metrics,
            fault: Mutex::new(None),
        });
        let writer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("txpool-journal".to_string())
                .spawn(move || {
                    Writer {
                        shared,
                        file,
                        poisoned: None,
                    }
                    .run()
                })
                .map_err(io("start the writer thread"))?
        };
        Ok((
            Journal {
                shared,
                writer: Some(writer),
            },
            records,
        ))
    }

    /// Appends one raw transaction and returns once it is durable. Appends queued while the
    /// previous `fdatasync` ran are written and synced together (group commit). Waits for a
    /// slot when the queue is full.
    pub async fn append(&self, raw: Bytes) -> Result<(), JournalError> {
        let shared = &self.shared;
        if raw.len() > MAX_RECORD {
            return Err(JournalError::TooLarge {
                path: shared.path.clone(),
                size: raw.len(),
            });
        }
        if shared.poisoned.load(Ordering::Acquire) {
            return Err(JournalError::Poisoned {
                path: shared.path.clone(),
                cause: "an earlier write or fsync failed".to_string(),
            });
        }
        let slot = Arc::clone(&shared.slots)
            .acquire_owned()
            .await
            .map_err(|_| shared.closed())?;
        let (reply, done) = oneshot::channel();
        shared.push(Request::Append {
            raw,
            reply,
            _slot: slot,
        })?;
        done.await.map_err(|_| shared.closed())?
    }

    /// Simulated fault, for tests of what a node does when its disk fails: the next batch's
    /// write waits `after`, then fails as a full disk would (`ENOSPC`), through the same path
    /// as a real failure (the journal is poisoned and every waiter of the batch gets the
    /// error). The wait lets a test act between an append's acceptance and its failure.
    #[doc(hidden)]
    pub fn fail_next_write(&self, after: Duration) {
        *self
            .shared
            .fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(after);
    }

    /// Replaces the journal by the transactions `live` returns plus whatever is appended
    /// meanwhile, atomically (see the module documentation). `live` runs on the writer thread
    /// after every append queued before this call is durable and before any queued after it is
    /// written; it should take the pool's snapshot, e.g. `move || pool.all_encoded()`, and
    /// must not use the journal.
    ///
    /// Blocks until the new file is in place: call it from a plain or blocking thread.
    /// Appends go on meanwhile. Fails with [`JournalError::RewriteRunning`] if one is running.
    pub fn rewrite(
        &self,
        live: impl FnOnce() -> Vec<Bytes> + Send + 'static,
    ) -> Result<(), JournalError> {
        let (reply, done) = mpsc::sync_channel(1);
        self.request_rewrite(Box::new(live), Some(reply))?;
        done.recv().map_err(|_| self.shared.closed())?
    }

    /// Starts a rewrite as [`Journal::rewrite`] does and returns at once: `Ok(true)` if it
    /// started, `Ok(false)` if one is already running. Its outcome is logged and counted
    /// ([`JournalMetrics::rewrites`], [`JournalMetrics::rewrite_failures`]).
    pub fn start_rewrite(
        &self,
        live: impl FnOnce() -> Vec<Bytes> + Send + 'static,
    ) -> Result<bool, JournalError> {
        match self.request_rewrite(Box::new(live), None) {
            Ok(()) => Ok(true),
            Err(JournalError::RewriteRunning { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether a rewrite is running.
    pub fn is_rewriting(&self) -> bool {
        self.shared.rewriting.load(Ordering::Acquire)
    }

    fn request_rewrite(&self, live: Snapshot, reply: RewriteReply) -> Result<(), JournalError> {
        let shared = &self.shared;
        if shared
            .rewriting
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(JournalError::RewriteRunning {
                path: shared.path.clone(),
            });
        }
        shared
            .push(Request::Rewrite { live, reply })
            .inspect_err(|_| {
                shared.rewriting.store(false, Ordering::Release);
            })
    }

    /// Reads a journal file's bytes as [`Journal::open`] does, without touching any file:
    /// the transactions of its intact batches, and where those end (a torn tail after that
    /// is what `open` would cut). Damage before the tail is an error. For tools and fuzzing.
    pub fn decode(bytes: &[u8]) -> Result<(Vec<Bytes>, usize), JournalError> {
        let path = PathBuf::from("<bytes>");
        if bytes.len() < FILE_HEADER_LEN {
            return if file_header().starts_with(bytes) {
                Ok((Vec::new(), bytes.len()))
            } else {
                Err(JournalError::NotAJournal { path })
            };
        }
        if bytes[..8] != MAGIC[..] {
            return Err(JournalError::NotAJournal { path });
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != VERSION {
            return Err(JournalError::UnsupportedVersion { path, version });
        }
        let parsed = parse(bytes, &path)?;
        Ok((parsed.records, parsed.valid_end))
    }

    /// The journal file's size in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.shared.len_bytes.load(Ordering::Acquire)
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The journal's metrics.
    pub fn metrics(&self) -> &JournalMetrics {
        &self.shared.metrics
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        // A running rewrite hands its file to the writer before the queue closes, so that its
        // temporary file is never left to a journal opened next on the same path.
        self.shared.join_rewriter();
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
        if let Some(writer) = self.writer.take() {
            // The writer finishes what was queued before it stops.
            let _ = writer.join();
        }
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

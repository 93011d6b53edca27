//! A simulated disk for power-loss tests: an in-memory [`Storage`] that knows, at every sync
//! barrier, which states a power loss could leave behind, and hands them to the test as disks
//! to reopen the store on. After the storage simulator of TigerBeetle.
//!
//! # The model
//!
//! The disk is a tree of directories, identified by their (normalized) paths, holding files
//! (inodes) and subdirectories.
//!
//! - **Directories.** Each directory has a *durable* set of entries (what survives any crash),
//!   the *current* entries (what `list_dir`, `open` and `create_new` see) and the list of
//!   *pending* operations since its last `sync_dir`: file created, file removed, subdirectory
//!   created. The current entries are always the durable ones with every pending operation
//!   applied in order. A subdirectory is an entry of its parent, so `sync_dir` of a new
//!   directory does not make the directory itself durable; `sync_dir` of its parent does.
//! - **Files.** Each inode has `durable` bytes (content and length that survive any crash) and
//!   `current` bytes (the page cache: what `read_exact_at`, `len` and `map` see). `append` and
//!   `set_len` change `current`; `sync_data` sets `durable = current`.
//! - **Barriers.** `sync_data` and `sync_dir` are the only points where the store waits for the
//!   disk, so they are where a crash is most interesting. When image generation is on
//!   ([`SimDisk::enable_images`]), each barrier first produces *crash images* of the state just
//!   before it: image 0 persists nothing pending, image 1 persists everything pending, and `k`
//!   more persist a random part of it. The test takes them with [`SimDisk::take_images`] and
//!   checks that the store reopens correctly on each one.
//! - **A crash image** keeps, for every directory, its durable entries plus a random subset of
//!   its pending operations applied in order (subsets, not only prefixes: POSIX promises no
//!   order between operations that were not separated by a barrier). A directory whose own
//!   creation was not kept vanishes with everything under it. For every file it keeps either
//!   the durable or the current length, and for every 4096-byte page where the two differ,
//!   either the durable or the current content; bytes past the durable length that were not
//!   persisted read as zeros (the size reached the disk, the data did not). Everything in an
//!   image is durable: it is the state after the power came back.
//! - **Faults**, armed by the test, each one-shot: a `sync_data` that fails with `EIO` (the
//!   next one, or the Nth from now), a `sync_dir` that fails with `EIO`; neither makes anything
//!   durable, and the data stays pending, as on Linux where the page cache still holds it and
//!   may or may not write it back later. Read faults ([`SimDisk::fail_reads`]) make
//!   `read_exact_at` of a byte range of a file fail with `EIO` until cleared, because a bad
//!   sector stays bad; the map of that file still shows the bytes (the real store's map would
//!   raise SIGBUS there, which is why the store must verify what it reads through ordinary
//!   reads).
//! - **Locks** are a set of locked directory paths; a second lock fails with `WouldBlock`.
//!   Unlike [`crate::FsStorage`], locking creates no `LOCK` file.
//! - **POSIX unlink.** Removing an open file removes the name; open handles keep reading,
//!   appending and syncing the inode, which lives until no handle and no durable, current or
//!   pending entry refers to it.
//!
//! Every random choice comes from a seeded generator, so a seed and the same sequence of calls
//! reproduce a run, images included. `list_dir` returns names in a random order (from a
//! separate stream, so that it does not disturb the images), because the real `read_dir` order
//! is unspecified.
//!
//! # What it deliberately does not model
//!
//! - Torn or reordered writes *within* a page (a 4096-byte page persists whole or not at all),
//!   partial sector writes, and bit rot of durable data: the corruption tests cover damaged
//!   bytes directly.
//! - Metadata other than the size (times, permissions), renames, hard links, and removing
//!   directories: the store uses none of them.
//! - Write-back between barriers: data becomes durable only through `sync_data`, never because
//!   the OS happened to flush it. That is no loss: a crash image may persist any pending part
//!   anyway.
//! - Linux's forgetting of dirty pages after a failed `fdatasync`: here the data stays pending,
//!   so a *retried* `sync_data` succeeds and makes it durable, which Linux does not guarantee.
//!   A store must treat a failed sync as fatal; this simulator cannot catch one that retries.
//! - Crashes between barriers other than through [`SimDisk::crash_now`]: images are taken at
//!   barriers, where the pending state is largest.
//! - Out-of-space errors and short reads; a map that shows later appends (a map here is a
//!   snapshot with exactly the length of the file when it was made).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{Storage, StorageFile};

/// The granularity at which a crash image mixes durable and current file content.
pub const PAGE_SIZE: usize = 4096;

/// A simulated disk. Clones share the same disk; see the module documentation for the model.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

/// An open file of a [`SimDisk`].
pub struct SimFile {
    state: Arc<Mutex<State>>,
    ino: u64,
    // The name it was opened by, for messages; the file may since have been removed.
    path: PathBuf,
}

/// A lock on a directory of a [`SimDisk`], released when dropped.
pub struct SimLock {
    state: Arc<Mutex<State>>,
    dir: PathBuf,
}

/// A read-only snapshot of a file's bytes, as [`StorageFile::map`] returns it.
#[derive(Clone)]
pub struct SimMap(Arc<Vec<u8>>);

/// Counters of what a disk has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// `sync_data` and `sync_dir` calls, failed ones included.
    pub barriers: u64,
    /// Crash images produced (at barriers and by [`SimDisk::crash_now`]).
    pub images: u64,
    /// `sync_data` calls.
    pub sync_data: u64,
    /// `sync_dir` calls.
    pub sync_dir: u64,
    /// `sync_data` calls failed by an injected fault.
    pub failed_sync_data: u64,
    /// `sync_dir` calls failed by an injected fault.
    pub failed_sync_dir: u64,
    /// `read_exact_at` calls.
    pub reads: u64,
    /// `read_exact_at` calls failed by an injected fault.
    pub failed_reads: u64,
    /// `append` calls.
    pub appends: u64,
    /// Bytes appended.
    pub appended_bytes: u64,
    /// `set_len` calls.
    pub set_lens: u64,
    /// `map` calls.
    pub maps: u64,
    /// `open` and `create_new` calls that succeeded.
    pub opens: u64,
    /// `remove_file` calls that succeeded.
    pub removes: u64,
}

/// The files and directories of a disk at one moment, for comparing disks in tests.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every directory, the roots (`/` and the empty path) excluded.
    pub dirs: BTreeSet<PathBuf>,
    /// Every file and its bytes.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
}

impl fmt::Debug for Snapshot {
    // File contents run to tens of kilobytes; an assertion message needs names and sizes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: BTreeMap<_, _> = self
            .files
            .iter()
            .map(|(path, bytes)| (path, format!("{} bytes", bytes.len())))
            .collect();
        f.debug_struct("Snapshot")
            .field("dirs", &self.dirs)
            .field("files", &files)
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir,
}

#[derive(Clone, Debug)]
enum DirOp {
    Create(String, u64),
    Remove(String),
    Mkdir(String),
}

impl DirOp {
    fn apply(&self, entries: &mut BTreeMap<String, Entry>) {
        match self {
            // A create whose earlier remove of the same name was not kept replaces the old
            // entry: the directory block holds the newer state of that name.
            DirOp::Create(name, ino) => {
                entries.insert(name.clone(), Entry::File(*ino));
            }
            // A remove whose create was not kept finds nothing, and does nothing.
            DirOp::Remove(name) => {
                if let Some(Entry::File(_)) = entries.get(name) {
                    entries.remove(name);
                }
            }
            DirOp::Mkdir(name) => {
                entries.insert(name.clone(), Entry::Dir);
            }
        }
    }
}

#[derive(Clone, Default)]
struct Dir {
    durable: BTreeMap<String, Entry>,
    current: BTreeMap<String, Entry>,
    pending: Vec<DirOp>,
}

#[derive(Clone)]
struct Inode {
    // Shared with maps and images, and between `durable` and `current` after a sync, so that a
    // file with nothing pending costs nothing to snapshot; an append copies on write.
    durable: Arc<Vec<u8>>,
    current: Arc<Vec<u8>>,
    handles: usize,
    // Byte ranges whose ordinary reads fail.
    bad_reads: Vec<Range<u64>>,
}

impl Inode {
    fn empty() -> Self {
        Self {
            durable: Arc::new(Vec::new()),
            current: Arc::new(Vec::new()),
            handles: 0,
            bad_reads: Vec::new(),
        }
    }

    fn settled(bytes: Arc<Vec<u8>>) -> Self {
        Self {
            durable: bytes.clone(),
            current: bytes,
            handles: 0,
            bad_reads: Vec::new(),
        }
    }

    fn pending(&self) -> bool {
        !Arc::ptr_eq(&self.durable, &self.current) && self.durable != self.current
    }
}

/// A one-shot fault: fails the call after `skip` more calls of its kind.
#[derive(Clone, Copy, Default)]
struct Countdown(Option<u64>);

impl Countdown {
    fn fires(&mut self) -> bool {
        match self.0 {
            Some(0) => {
                self.0 = None;
                true
            }
            Some(n) => {
                self.0 = Some(n - 1);
                false
            }
            None => false,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Persist {
    Nothing,
    Everything,
    Random,
}

struct State {
    dirs: BTreeMap<PathBuf, Dir>,
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    locks: BTreeSet<PathBuf>,
    image_rng: Rng,
    order_rng: Rng,
    // `Some(k)`: each barrier produces the two extreme images and `k` random ones.
    images_per_barrier: Option<usize>,
    images: Vec<SimDisk>,
    fail_sync_data: Countdown,
    fail_sync_dir: Countdown,
    stats: SimStats,
    origin: Option<String>,
}

/// splitmix64: small, fast, and good enough to choose subsets; no dependency needed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

fn not_found(what: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{what} {} does not exist", path.display()),
    )
}

/// One spelling per path: `a/./b` and `a/b/` are `a/b`.
fn normalize(path: &Path) -> PathBuf {
    path.components().collect()
}

fn is_root(path: &Path) -> bool {
    path.parent().is_none()
}

/// The directory and name of a file path.
fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let path = normalize(path);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a file path", path.display()),
            )
        })?
        .to_string();
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok((parent, name))
}

/// `bytes[start..end]`, with zeros where `bytes` ends first.
fn padded(bytes: &[u8], start: usize, end: usize) -> Cow<'_, [u8]> {
    if end <= bytes.len() {
        Cow::Borrowed(&bytes[start..end])
    } else {
        let mut out = bytes.get(start..).unwrap_or(&[]).to_vec();
        out.resize(end - start, 0);
        Cow::Owned(out)
    }
}

impl State {
    fn new(seed: u64) -> Self {
        let mut seeder = Rng(seed);
        let mut dirs = BTreeMap::new();
        // The roots of absolute and relative paths always exist.
        dirs.insert(PathBuf::from("/"), Dir::default());
        dirs.insert(PathBuf::new(), Dir::default());
        Self {
            dirs,
            inodes: BTreeMap::new(),
            next_ino: 1,
            locks: BTreeSet::new(),
            image_rng: Rng(seeder.next()),
            order_rng: Rng(seeder.next()),
            images_per_barrier: None,
            images: Vec::new(),
            fail_sync_data: Countdown::default(),
            fail_sync_dir: Countdown::default(),
            stats: SimStats::default(),
            origin: None,
        }
    }

    fn dir(&self, dir: &Path) -> io::Result<&Dir> {
        self.dirs
            .get(dir)
            .ok_or_else(|| not_found("directory", dir))
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let (parent, name) = split(path)?;
        match self.dir(&parent)?.current.get(&name) {
            Some(Entry::File(ino)) => Ok(*ino),
            Some(Entry::Dir) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", path.display()),
            )),
            None => Err(not_found("file", path)),
        }
    }

    fn inode(&mut self, ino: u64) -> &mut Inode {
        self.inodes
            .get_mut(&ino)
            .expect("an open file's inode lives")
    }

    /// Drops inodes that nothing can reach any more: no handle, and no entry in any
    /// directory's durable, current or pending state (a crash image may still bring back a
    /// removed file until its removal is durable).
    fn collect_garbage(&mut self) {
        let mut reachable = BTreeSet::new();
        for dir in self.dirs.values() {
            for entry in dir.durable.values().chain(dir.current.values()) {
                if let Entry::File(ino) = entry {
                    reachable.insert(*ino);
                }
            }
            for op in &dir.pending {
                if let DirOp::Create(_, ino) = op {
                    reachable.insert(*ino);
                }
            }
        }
        self.inodes
            .retain(|ino, inode| inode.handles > 0 || reachable.contains(ino));
    }

    fn open_handle(&mut self, state: &Arc<Mutex<State>>, ino: u64, path: &Path) -> SimFile {
        self.inode(ino).handles += 1;
        self.stats.opens += 1;
        SimFile {
            state: state.clone(),
            ino,
            path: normalize(path),
        }
    }

    /// At a barrier, before it takes effect: the images a power loss here could leave.
    fn barrier(&mut self, what: impl FnOnce() -> String) {
        self.stats.barriers += 1;
        let Some(random) = self.images_per_barrier else {
            return;
        };
        let barrier = self.stats.barriers;
        let what = what();
        let total = random + 2;
        for i in 0..total {
            let persist = match i {
                0 => Persist::Nothing,
                1 => Persist::Everything,
                _ => Persist::Random,
            };
            let origin = format!("barrier {barrier} ({what}), image {i} of {total}");
            let image = self.image(persist, origin);
            self.images.push(image);
        }
    }

    /// A new disk holding what a power loss now could leave, everything durable.
    fn image(&mut self, persist: Persist, origin: String) -> SimDisk {
        self.stats.images += 1;
        let mut out = State::new(self.image_rng.next());
        out.origin = Some(origin);
        // Directories in path order, each before its children, so that a directory is kept
        // exactly when its parent's image kept its entry; the roots always are.
        let mut kept: BTreeSet<PathBuf> =
            self.dirs.keys().filter(|p| is_root(p)).cloned().collect();
        let paths: Vec<PathBuf> = self.dirs.keys().cloned().collect();
        for path in paths {
            if !kept.contains(&path) {
                continue;
            }
            let dir = &self.dirs[&path];
            let mut entries = dir.durable.clone();
            for op in &dir.pending {
                let keep = match persist {
                    Persist::Nothing => false,
                    Persist::Everything => true,
                    Persist::Random => self.image_rng.coin(),
                };
                if keep {
                    op.apply(&mut entries);
                }
            }
            for (name, entry) in &entries {
                match entry {
                    Entry::Dir => {
                        kept.insert(path.join(name));
                    }
                    Entry::File(ino) => {
                        let bytes =
                            Self::image_file(&self.inodes[ino], persist, &mut self.image_rng);
                        out.inodes.insert(*ino, Inode::settled(bytes));
                    }
                }
            }
            out.dirs.insert(
                path,
                Dir {
                    durable: entries.clone(),
                    current: entries,
                    pending: Vec::new(),
                },
            );
        }
        out.next_ino = self.next_ino;
        SimDisk {
            state: Arc::new(Mutex::new(out)),
        }
    }

    fn image_file(inode: &Inode, persist: Persist, rng: &mut Rng) -> Arc<Vec<u8>> {
        if !inode.pending() {
            return inode.durable.clone();
        }
        match persist {
            Persist::Nothing => return inode.durable.clone(),
            Persist::Everything => return inode.current.clone(),
            Persist::Random => {}
        }
        let (durable, current) = (&inode.durable[..], &inode.current[..]);
        let len = if rng.coin() {
            durable.len()
        } else {
            current.len()
        };
        let mut out = Vec::with_capacity(len);
        for start in (0..len).step_by(PAGE_SIZE) {
            let end = (start + PAGE_SIZE).min(len);
            let old = padded(durable, start, end);
            let new = padded(current, start, end);
            // Only pages that differ draw from the generator: identical pages have nothing to
            // choose, and a long settled file should not shift the choices made after it.
            if old == new || !rng.coin() {
                out.extend_from_slice(&old);
            } else {
                out.extend_from_slice(&new);
            }
        }
        Arc::new(out)
    }

    /// A disk whose durable state is this one's current state.
    fn settled_copy(&mut self) -> SimDisk {
        let mut out = State::new(self.image_rng.next());
        for (path, dir) in &self.dirs {
            for entry in dir.current.values() {
                if let Entry::File(ino) = entry {
                    out.inodes
                        .insert(*ino, Inode::settled(self.inodes[ino].current.clone()));
                }
            }
            out.dirs.insert(
                path.clone(),
                Dir {
                    durable: dir.current.clone(),
                    current: dir.current.clone(),
                    pending: Vec::new(),
                },
            );
        }
        out.next_ino = self.next_ino;
        SimDisk {
            state: Arc::new(Mutex::new(out)),
        }
    }

    fn snapshot(&self, durable: bool) -> Snapshot {
        let mut snap = Snapshot::default();
        let mut kept: BTreeSet<&Path> = self
            .dirs
            .keys()
            .filter(|p| is_root(p))
            .map(PathBuf::as_path)
            .collect();
        for (path, dir) in &self.dirs {
            if !kept.contains(path.as_path()) {
                continue;
            }
            if !is_root(path) {
                snap.dirs.insert(path.clone());
            }
            let entries = if durable { &dir.durable } else { &dir.current };
            for (name, entry) in entries {
                let child = path.join(name);
                match entry {
                    Entry::Dir => {
                        // Children sort after their parent, so the loop reaches them later.
                        if let Some((child, _)) = self.dirs.get_key_value(&child) {
                            kept.insert(child.as_path());
                        }
                    }
                    Entry::File(ino) => {
                        let inode = &self.inodes[ino];
                        let bytes = if durable {
                            &inode.durable
                        } else {
                            &inode.current
                        };
                        snap.files.insert(child, bytes.to_vec());
                    }
                }
            }
        }
        snap
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panicking test must not turn every later drop of a file or lock into a second panic
    // (an abort while unwinding); the state is still usable for that.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Default for SimDisk {
    fn default() -> Self {
        Self::new(0)
    }
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("SimDisk")
            .field("origin", &state.origin)
            .field("dirs", &state.dirs.len())
            .field("inodes", &state.inodes.len())
            .field("stats", &state.stats)
            .finish()
    }
}

impl SimDisk {
    /// An empty disk whose random choices follow `seed`. Image generation is off.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::new(seed))),
        }
    }

    /// From now on, every barrier produces the two extreme images and `random` random ones.
    pub fn enable_images(&self, random: usize) {
        lock(&self.state).images_per_barrier = Some(random);
    }

    /// Stops producing images at barriers; images already produced stay to be taken.
    pub fn disable_images(&self) {
        lock(&self.state).images_per_barrier = None;
    }

    /// The images produced since the last call, in order: for each barrier, the image that
    /// persists nothing pending, the one that persists everything, then the random ones.
    pub fn take_images(&self) -> Vec<SimDisk> {
        std::mem::take(&mut lock(&self.state).images)
    }

    /// One random image of the state now, as if the power failed at this moment: for a test
    /// that continues on the image.
    pub fn crash_now(&self) -> SimDisk {
        let mut state = lock(&self.state);
        let origin = format!("crash after barrier {}", state.stats.barriers);
        state.image(Persist::Random, origin)
    }

    /// A disk whose durable state is this disk's current state: a clean restart of the
    /// process, as if the page cache had also been written back. Locks are not held, image
    /// generation is off. (To restart with the pending state still pending, drop the store
    /// and reopen it on this same disk.)
    pub fn restart(&self) -> SimDisk {
        lock(&self.state).settled_copy()
    }

    /// Where an image came from (barrier number, the call, which image), for test messages;
    /// `None` for a disk made by [`SimDisk::new`] or [`SimDisk::restart`].
    pub fn origin(&self) -> Option<String> {
        lock(&self.state).origin.clone()
    }

    /// The counters.
    pub fn stats(&self) -> SimStats {
        lock(&self.state).stats
    }

    /// Makes the next `sync_data` of any file fail with `EIO`, making nothing durable.
    pub fn fail_next_sync_data(&self) {
        self.fail_sync_data_after(0);
    }

    /// Makes the `sync_data` of any file after `skip` more succeeded fail with `EIO`, making
    /// nothing durable. Replaces a fault armed before.
    pub fn fail_sync_data_after(&self, skip: u64) {
        lock(&self.state).fail_sync_data = Countdown(Some(skip));
    }

    /// Makes the next `sync_dir` fail with `EIO`, making nothing durable.
    pub fn fail_next_sync_dir(&self) {
        self.fail_sync_dir_after(0);
    }

    /// Makes the `sync_dir` after `skip` more succeeded fail with `EIO`. Replaces a fault
    /// armed before.
    pub fn fail_sync_dir_after(&self, skip: u64) {
        lock(&self.state).fail_sync_dir = Countdown(Some(skip));
    }

    /// Makes `read_exact_at` of the file `path` names now fail with `EIO` whenever the read
    /// touches `range`, until [`SimDisk::clear_read_faults`]. Follows the file, not the name.
    pub fn fail_reads(&self, path: &Path, range: Range<u64>) -> io::Result<()> {
        let mut state = lock(&self.state);
        let ino = state.lookup(path)?;
        state.inode(ino).bad_reads.push(range);
        Ok(())
    }

    /// Removes every read fault.
    pub fn clear_read_faults(&self) {
        for inode in lock(&self.state).inodes.values_mut() {
            inode.bad_reads.clear();
        }
    }

    /// Whether anything is pending: a file whose durable bytes differ from its current ones
    /// (open handles to removed files included), or a directory operation not yet synced.
    pub fn has_pending(&self) -> bool {
        let state = lock(&self.state);
        state.inodes.values().any(Inode::pending)
            || state.dirs.values().any(|d| !d.pending.is_empty())
    }

    /// Every directory and file as the running process sees them.
    pub fn snapshot(&self) -> Snapshot {
        lock(&self.state).snapshot(false)
    }

    /// Every directory and file that survives any crash now: what the image persisting
    /// nothing pending holds.
    pub fn durable_snapshot(&self) -> Snapshot {
        lock(&self.state).snapshot(true)
    }

    /// The current bytes of the file at `path`.
    pub fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = lock(&self.state);
        let ino = state.lookup(path)?;
        Ok(state.inodes[&ino].current.to_vec())
    }

    /// Whether `path` names a file or directory now.
    pub fn exists(&self, path: &Path) -> bool {
        let state = lock(&self.state);
        let path = normalize(path);
        state.dirs.contains_key(&path) || state.lookup(&path).is_ok()
    }
}

impl Storage for SimDisk {
    type File = SimFile;
    type Lock = SimLock;

    fn create_dir_all(&self, dir: &Path) -> io::Result<bool> {
        let dir = normalize(dir);
        let mut state = lock(&self.state);
        if state.dirs.contains_key(&dir) {
            return Ok(false);
        }
        // Ancestors from the top down; each missing one becomes a pending entry in its parent.
        let mut missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|a| !state.dirs.contains_key(*a))
            .collect();
        missing.reverse();
        for path in missing {
            let (parent, name) = split(path)?;
            let parent_dir = state.dirs.get_mut(&parent).expect("created top down");
            if parent_dir.current.contains_key(&name) {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} exists and is a file", path.display()),
                ));
            }
            parent_dir.current.insert(name.clone(), Entry::Dir);
            parent_dir.pending.push(DirOp::Mkdir(name));
            state.dirs.insert(path.to_path_buf(), Dir::default());
        }
        Ok(true)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut state = lock(&self.state);
        let mut names: Vec<String> = state
            .dir(&normalize(dir))?
            .current
            .keys()
            .cloned()
            .collect();
        // Fisher-Yates: the store must not depend on the order of `read_dir`.
        for i in (1..names.len()).rev() {
            let j = state.order_rng.below(i + 1);
            names.swap(i, j);
        }
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<SimFile> {
        let mut state = lock(&self.state);
        let ino = state.lookup(path)?;
        Ok(state.open_handle(&self.state, ino, path))
    }

    fn create_new(&self, path: &Path) -> io::Result<SimFile> {
        let (parent, name) = split(path)?;
        let mut state = lock(&self.state);
        let ino = state.next_ino;
        let dir = state
            .dirs
            .get_mut(&parent)
            .ok_or_else(|| not_found("directory", &parent))?;
        if dir.current.contains_key(&name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        dir.current.insert(name.clone(), Entry::File(ino));
        dir.pending.push(DirOp::Create(name, ino));
        state.next_ino += 1;
        state.inodes.insert(ino, Inode::empty());
        Ok(state.open_handle(&self.state, ino, path))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let (parent, name) = split(path)?;
        let mut state = lock(&self.state);
        state.lookup(path)?;
        let dir = state.dirs.get_mut(&parent).expect("lookup found it");
        dir.current.remove(&name);
        dir.pending.push(DirOp::Remove(name));
        state.stats.removes += 1;
        // The inode stays: the durable entry (and any open handle) still refers to it.
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let mut state = lock(&self.state);
        state.dir(&dir)?;
        state.stats.sync_dir += 1;
        state.barrier(|| format!("sync_dir {}", dir.display()));
        if state.fail_sync_dir.fires() {
            state.stats.failed_sync_dir += 1;
            return Err(eio());
        }
        let d = state.dirs.get_mut(&dir).expect("checked above");
        d.durable = d.current.clone();
        d.pending.clear();
        state.collect_garbage();
        Ok(())
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<SimLock> {
        let dir = normalize(dir);
        let mut state = lock(&self.state);
        state.dir(&dir)?;
        if !state.locks.insert(dir.clone()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked", dir.display()),
            ));
        }
        Ok(SimLock {
            state: self.state.clone(),
            dir,
        })
    }
}

impl Drop for SimLock {
    fn drop(&mut self) {
        lock(&self.state).locks.remove(&self.dir);
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if let Some(inode) = state.inodes.get_mut(&self.ino) {
            inode.handles -= 1;
        }
        state.collect_garbage();
    }
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("ino", &self.ino)
            .field("path", &self.path)
            .finish()
    }
}

impl fmt::Debug for SimLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLock").field("dir", &self.dir).finish()
    }
}

impl Deref for SimMap {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SimMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimMap({} bytes)", self.0.len())
    }
}

impl StorageFile for SimFile {
    type Map = SimMap;

    fn size(&self) -> io::Result<u64> {
        let mut state = lock(&self.state);
        Ok(state.inode(self.ino).current.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.stats.reads += 1;
        let end = offset + buf.len() as u64;
        let inode = state.inode(self.ino);
        // An empty read touches no sector.
        let bad = !buf.is_empty()
            && inode
                .bad_reads
                .iter()
                .any(|r| r.start < end && offset < r.end);
        let current = inode.current.clone();
        if bad {
            state.stats.failed_reads += 1;
            return Err(eio());
        }
        if end > current.len() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {} bytes at {offset} past the end ({})",
                    buf.len(),
                    current.len()
                ),
            ));
        }
        buf.copy_from_slice(&current[offset as usize..end as usize]);
        Ok(())
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.stats.appends += 1;
        state.stats.appended_bytes += data.len() as u64;
        Arc::make_mut(&mut state.inode(self.ino).current).extend_from_slice(data);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let mut state = lock(&self.state);
        state.stats.set_lens += 1;
        let inode = state.inode(self.ino);
        if inode.current.len() != len {
            Arc::make_mut(&mut inode.current).resize(len, 0);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.stats.sync_data += 1;
        state.barrier(|| format!("sync_data {}", self.path.display()));
        if state.fail_sync_data.fires() {
            state.stats.failed_sync_data += 1;
            return Err(eio());
        }
        let inode = state.inode(self.ino);
        inode.durable = inode.current.clone();
        Ok(())
    }

    fn try_clone(&self) -> io::Result<Self> {
        let mut state = lock(&self.state);
        state.inode(self.ino).handles += 1;
        Ok(SimFile {
            state: self.state.clone(),
            ino: self.ino,
            path: self.path.clone(),
        })
    }

    fn map(&self, _len: u64, _reserve: u64) -> io::Result<SimMap> {
        let mut state = lock(&self.state);
        state.stats.maps += 1;
        Ok(SimMap(state.inode(self.ino).current.clone()))
    }
}

//! The real disk: [`FsStorage`] and the traits a store's file operations go through.
//!
//! A store's durability argument is about *which operations reach the disk in which order*:
//! a batch is acknowledged only after `sync_data` of its file; a file is unlinked only after the
//! batch that drops it is synced; a created or removed file is durable only after `sync_dir` of
//! its directory. A SIGKILL test cannot check any of that, because the page cache survives the
//! process. A [`Storage`] that records writes and directory operations between sync barriers can
//! produce the states a power loss may leave (the synced state plus any subset of what was not
//! synced), which is what [`crate::sim`] does.
//!
//! [`FsStorage`] is the real implementation: `std::fs`, `pread`, `fdatasync`, `flock` and
//! `mmap`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::Deref;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A directory tree of files that Vilmo keeps its logs in.
///
/// Paths are absolute or relative paths as the store builds them (`dir.join(name)`); an
/// implementation need not support anything else. Every method reports failure as an
/// [`io::Error`]; the store adds the path and the operation.
pub trait Storage: Send + Sync {
    /// An open log file.
    type File: StorageFile;
    /// An exclusive lock on a store directory, released when dropped.
    type Lock: Send + Sync;

    /// Creates `dir` and any missing parents. Returns whether `dir` itself was created, so that
    /// the caller can make its entry in the parent durable.
    fn create_dir_all(&self, dir: &Path) -> io::Result<bool>;
    /// The names of the entries in `dir`.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens an existing file for reading and appending.
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    /// Creates a new, empty file for reading and appending; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Self::File>;
    /// Removes a file. Durable only after [`Storage::sync_dir`] of its directory.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the creations and removals of entries in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `dir` for as long as the returned value lives. Fails with
    /// [`io::ErrorKind::WouldBlock`] when another holder (this process or another) has it.
    fn lock_dir(&self, dir: &Path) -> io::Result<Self::Lock>;
}

/// An open log file: ordinary reads, appends, truncation, `fdatasync` and a read-only mapping.
pub trait StorageFile: Send + Sync + Sized {
    /// A read-only view of the file's bytes; see [`StorageFile::map`].
    type Map: Deref<Target = [u8]> + Send + Sync;

    /// The file's length.
    fn size(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; an error if the file ends first or the read fails.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Appends `data` at the end of the file (not durable until [`StorageFile::sync_data`]).
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Cuts or extends the file to `len` bytes (not durable until `sync_data`).
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Makes the file's bytes and length durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// A second handle to the same file, so that `sync_data` can run on another thread while
    /// the first handle is read.
    fn try_clone(&self) -> io::Result<Self>;
    /// A view of the file's first `len` bytes. The view may be longer than `len` (a mapping
    /// reserved for growth, `reserve` bytes), and may then show later appends without being
    /// made again; the store never reads a view past the bytes it knows were written, and makes
    /// a new view when it needs more than [`Deref`] shows.
    fn map(&self, len: u64, reserve: u64) -> io::Result<Self::Map>;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsStorage;

/// A log file on the real file system.
#[derive(Debug)]
pub struct FsFile(File);

/// An exclusive `flock` on a store's `LOCK` file.
#[derive(Debug)]
pub struct FsLock(#[allow(dead_code)] File);

/// The name of the lock file in a store directory.
pub const LOCK_FILE: &str = "LOCK";

impl Storage for FsStorage {
    type File = FsFile;
    type Lock = FsLock;

    fn create_dir_all(&self, dir: &Path) -> io::Result<bool> {
        if dir.is_dir() {
            return Ok(false);
        }
        std::fs::create_dir_all(dir)?;
        Ok(true)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            // A name that is not UTF-8 is not one of ours.
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<FsFile> {
        OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map(FsFile)
    }

    fn create_new(&self, path: &Path) -> io::Result<FsFile> {
        OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(path)
            .map(FsFile)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<FsLock> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))?;
        // flock locks belong to the open file description, so a second open of the same store
        // in this process is refused as well as one from another process.
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a file descriptor this function owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(FsLock(file))
    }
}

impl StorageFile for FsFile {
    type Map = memmap2::Mmap;

    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.0, buf, offset)
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.write_all(data)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn try_clone(&self) -> io::Result<Self> {
        self.0.try_clone().map(FsFile)
    }

    fn map(&self, len: u64, reserve: u64) -> io::Result<memmap2::Mmap> {
        let len = len.max(reserve).max(1);
        let len = usize::try_from(len).map_err(io::Error::other)?;
        // SAFETY: the store holds the directory's lock, so no other process of ours changes
        // these files; log files are only appended to, and cut back only past bytes the store
        // never reads again. Bytes past the end of the file are never read. A read error of the
        // device still raises SIGBUS through a mapping: that is why replay verifies every
        // batch with ordinary reads before anything is read through the map.
        unsafe { memmap2::MmapOptions::new().len(len).map(&self.0) }
    }
}

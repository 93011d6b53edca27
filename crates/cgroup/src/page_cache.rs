//! Emptying the page cache before a limited run, so that the pages the run reads are charged
//! to its cgroup (a page is charged to the cgroup that first brought it in, and stays there).

use std::fs;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::PageCacheError;

/// The file that drops clean caches for the whole machine.
const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// What [`evict_file_pages`] went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evicted {
    /// Regular files advised.
    pub files: u64,
    /// Their total size in bytes (what may have been cached, not what was).
    pub bytes: u64,
}

/// Writes every dirty page to disk (`sync`) and drops the clean page cache of the whole
/// machine (`echo 1 > /proc/sys/vm/drop_caches`). Needs root; it also slows every other
/// process on the machine for a while, so prefer [`evict_file_pages`] when the files a run
/// reads are known.
pub fn drop_page_cache() -> Result<(), PageCacheError> {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    let path = PathBuf::from(DROP_CACHES);
    let err = |source| PageCacheError::DropCaches {
        path: path.clone(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(err)?;
    f.write_all(b"1").map_err(err)
}

/// Drops the cached pages of `path`, or of every regular file under it when it is a
/// directory (symbolic links are not followed): each file's dirty pages are written first
/// (`fdatasync`), then `posix_fadvise(POSIX_FADV_DONTNEED)` asks the kernel to drop the rest.
/// Needs only read access. Pages that a running process has mapped (an open MDBX
/// environment) stay: evict before opening.
pub fn evict_file_pages(path: &Path) -> Result<Evicted, PageCacheError> {
    let mut done = Evicted::default();
    evict(path, &mut done)?;
    Ok(done)
}

fn evict(path: &Path, done: &mut Evicted) -> Result<(), PageCacheError> {
    let io = |op| {
        move |source| PageCacheError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    };
    let meta = fs::symlink_metadata(path).map_err(io("stat"))?;
    if meta.is_dir() {
        for entry in fs::read_dir(path).map_err(io("list"))? {
            let entry = entry.map_err(io("list"))?;
            evict(&entry.path(), done)?;
        }
        return Ok(());
    }
    if !meta.is_file() {
        return Ok(());
    }
    let file = fs::File::open(path).map_err(io("open"))?;
    // Linux syncs through a read-only descriptor; a dirty page cannot be dropped.
    file.sync_data().map_err(io("sync"))?;
    // SAFETY: the descriptor is open for the duration of the call; offset 0 and length 0 mean
    // the whole file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io("advise DONTNEED on")(std::io::Error::from_raw_os_error(
            rc,
        )));
    }
    done.files += 1;
    done.bytes += meta.len();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_files_in_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("a"), vec![1u8; 10_000]).unwrap();
        fs::write(dir.path().join("sub/b"), vec![2u8; 5_000]).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a"), dir.path().join("link")).unwrap();
        let done = evict_file_pages(dir.path()).unwrap();
        assert_eq!(
            done,
            Evicted {
                files: 2,
                bytes: 15_000
            }
        );
        let e = evict_file_pages(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("cannot stat"), "{e}");
    }
}

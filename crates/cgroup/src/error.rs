//! What can go wrong placing a process under a memory limit, each with how to fix it.

use std::io;
use std::path::{Path, PathBuf};

/// How to get a memory limit when this process cannot make a cgroup, said at the end of every
/// error a user can fix by running differently.
pub const HOW_TO_FIX: &str = "run as root, or delegate a cgroup to your user \
     (systemd-run --user --scope -p MemoryMax=8G -p Delegate=yes -- COMMAND ...), \
     or pass --memory-limit-optional to go on without a limit";

/// An error creating, joining, reading or removing a memory cgroup.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// The cgroup name is not something a directory may be called.
    #[error(
        "invalid cgroup name {name:?}: use 1 to 64 ASCII letters, digits, '_' or '-' \
         (the cgroup is called gigas-NAME-PID)"
    )]
    InvalidName {
        /// The name given.
        name: String,
    },

    /// A limit of zero bytes was asked for.
    #[error("a memory limit of 0 bytes cannot run anything; give a size such as 512MiB or 8GiB")]
    ZeroLimit,

    /// Neither a cgroup v2 hierarchy with the memory controller nor a v1 memory hierarchy is
    /// mounted.
    #[error(
        "no cgroup memory controller is available: {detail}; mount one \
         (cgroup v2: boot with systemd.unified_cgroup_hierarchy=1; cgroup v1: \
         mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory), or pass \
         --memory-limit-optional to go on without a limit"
    )]
    NotMounted {
        /// What was looked at and found missing.
        detail: String,
    },

    /// cgroup v2: the memory controller is not enabled for this process's cgroup.
    #[error(
        "cgroup v2: the memory controller is not enabled for {path} (its cgroup.controllers \
         lacks \"memory\"); enable it from the parent (echo +memory > PARENT/cgroup.subtree_control), \
         or {HOW_TO_FIX}",
        path = path.display()
    )]
    NoMemoryController {
        /// The cgroup whose `cgroup.controllers` lacks `memory`.
        path: PathBuf,
    },

    /// cgroup v2: this process's cgroup holds processes, so it may not enable controllers for
    /// children, and there is no parent to make a sibling in.
    #[error(
        "cgroup v2: {path} holds processes, so no child of it can get the memory controller \
         (the no-internal-processes rule), and a sibling cannot be made beside it; \
         start this process in an empty delegated cgroup, or {HOW_TO_FIX}",
        path = path.display()
    )]
    NoInternalProcesses {
        /// The cgroup that holds processes.
        path: PathBuf,
    },

    /// The kernel refused for lack of privilege.
    #[error(
        "permission denied to {op} {path}: {source}; {HOW_TO_FIX}",
        path = path.display()
    )]
    PermissionDenied {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// The cgroup file system is mounted read-only (common inside containers).
    #[error(
        "cannot {op} {path}: the cgroup file system is mounted read-only (as in most containers); \
         run where /sys/fs/cgroup is writable (e.g. docker run --cgroupns=private with a \
         writable cgroup mount, or on the host), or {HOW_TO_FIX}",
        path = path.display()
    )]
    ReadOnly {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// A file every memory cgroup has is missing: the directory is not a cgroup of the
    /// expected version.
    #[error(
        "{path} does not exist: {dir} is not a memory cgroup of the expected version (is the \
         memory controller enabled there?)",
        path = path.display(),
        dir = path.parent().unwrap_or(path).display()
    )]
    NotACgroup {
        /// The missing file.
        path: PathBuf,
    },

    /// A cgroup file held something this crate does not understand.
    #[error("unexpected content in {path}: {detail}", path = path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },

    /// This process already holds a live [`crate::MemoryCgroup`] of that name.
    #[error(
        "cgroup {path} is already in use by this process: drop the earlier MemoryCgroup of \
         that name first, or give this one another name",
        path = path.display()
    )]
    InUse {
        /// The cgroup.
        path: PathBuf,
    },

    /// Processes are still in a cgroup being removed; it is left in place.
    #[error(
        "cgroup {path} still holds processes {pids:?}; left in place (the next start removes \
         it once they have exited)",
        path = path.display()
    )]
    Busy {
        /// The cgroup.
        path: PathBuf,
        /// The processes still in it.
        pids: Vec<u32>,
    },

    /// Any other I/O error, with what was being done.
    #[error("cannot {op} {path}: {source}", path = path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl CgroupError {
    /// Sorts an I/O error on `path` into the variant that says how to fix it.
    pub(crate) fn fs(op: &'static str, path: &Path, source: io::Error) -> Self {
        let path = path.to_path_buf();
        match source.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => {
                CgroupError::PermissionDenied { op, path, source }
            }
            Some(libc::EROFS) => CgroupError::ReadOnly { op, path, source },
            _ => CgroupError::Io { op, path, source },
        }
    }

    /// Whether going on without a limit is a reasonable answer to this error (the machine or
    /// the privileges do not allow a cgroup), as opposed to a mistake in the request.
    pub fn is_environment(&self) -> bool {
        !matches!(
            self,
            CgroupError::InvalidName { .. } | CgroupError::ZeroLimit | CgroupError::InUse { .. }
        )
    }
}

/// An error dropping or evicting cached file pages.
#[derive(Debug, thiserror::Error)]
pub enum PageCacheError {
    /// Writing `/proc/sys/vm/drop_caches` was refused or failed.
    #[error(
        "cannot drop the page cache through {path}: {source}; run as root (or with \
         CAP_SYS_ADMIN), or evict only the files the run reads (evict_file_pages, which needs \
         no privilege)",
        path = path.display()
    )]
    DropCaches {
        /// The `drop_caches` file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// A file or directory could not be opened, synced or advised.
    #[error("cannot {op} {path}: {source}", path = path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

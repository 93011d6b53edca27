//! A memory cgroup this process made, joined, and removes again.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::detect::{CgroupRoots, CgroupVersion, Located};
use crate::error::CgroupError;
use crate::size::{format_size, format_size_approx};
use crate::stat::MemoryStat;

/// Prefix of every cgroup this crate makes: `gigas-NAME-PID`.
pub const CGROUP_PREFIX: &str = "gigas-";

/// How long removal waits for the kernel to see a cgroup empty after its last process left
/// (exiting tasks leave it asynchronously). Bounded: removal must never hang a shutdown.
const REMOVE_RETRIES: u32 = 20;
const REMOVE_RETRY_WAIT: Duration = Duration::from_millis(10);

/// A memory cgroup with a limit, made by [`MemoryCgroup::create`].
///
/// It lives at `PARENT/gigas-NAME-PID`, where PARENT is this process's own cgroup (cgroup v1,
/// or v2 when that may have children with the memory controller) or, in cgroup v2 when the own
/// cgroup holds processes, the own cgroup's parent (a leaf sibling: v2 lets a cgroup either
/// hold processes or give controllers to children, not both). Nesting under the own cgroup
/// keeps any limit already placed on this process in force as well.
///
/// Dropping it (or [`MemoryCgroup::remove`]) moves the processes it placed back to where they
/// came from and removes the directory. A process killed by a signal cannot do that; the
/// next [`MemoryCgroup::create`] in the same parent removes every empty `gigas-*-PID` whose
/// PID is no longer running.
#[derive(Debug)]
pub struct MemoryCgroup {
    version: CgroupVersion,
    dir: PathBuf,
    /// The hierarchy's mount point, where reading ancestors' limits stops.
    mount: PathBuf,
    /// The cgroup this process was in before, where placed processes go back.
    home: PathBuf,
    limit: u64,
    swap_held: bool,
    /// Processes placed here by this value (this process after `enter_self`).
    placed: Vec<u32>,
    removed: bool,
    /// Declared last: released after Drop has removed the directory.
    _claim: Claim,
}

/// The cgroup directories live values of this process use: two values must never share one
/// (the first dropped would remove the other's).
static CLAIMED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

#[derive(Debug)]
struct Claim(PathBuf);

impl Claim {
    fn new(dir: &Path) -> Result<Self, CgroupError> {
        let mut claimed = CLAIMED.lock().unwrap_or_else(|p| p.into_inner());
        if claimed.iter().any(|d| d == dir) {
            return Err(CgroupError::InUse {
                path: dir.to_path_buf(),
            });
        }
        claimed.push(dir.to_path_buf());
        Ok(Claim(dir.to_path_buf()))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED.lock().unwrap_or_else(|p| p.into_inner());
        claimed.retain(|d| *d != self.0);
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Writes `value` to a cgroup control file in one `write`, as the kernel expects; a missing
/// file is [`CgroupError::NotACgroup`] (control files are never created, only written).
pub(crate) fn write_control(path: &Path, value: &str, op: &'static str) -> Result<(), CgroupError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => CgroupError::NotACgroup {
                path: path.to_path_buf(),
            },
            _ => CgroupError::fs(op, path, e),
        })?;
    file.write_all(value.as_bytes())
        .map_err(|e| CgroupError::fs(op, path, e))
}

pub(crate) fn read_control(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => CgroupError::NotACgroup {
            path: path.to_path_buf(),
        },
        _ => CgroupError::fs("read", path, e),
    })
}

fn read_pids(path: &Path) -> Result<Vec<u32>, CgroupError> {
    let text = read_control(path)?;
    text.split_whitespace()
        .map(|p| {
            p.parse().map_err(|_| CgroupError::Parse {
                path: path.to_path_buf(),
                detail: format!("{p:?} is not a process id"),
            })
        })
        .collect()
}

fn pid_running(pid: u32) -> bool {
    // A zombie has already left its cgroup and holds no memory: not running. (A killed
    // process whose parent has not reaped it yet is one.)
    if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        return !matches!(state, Some("Z") | Some("X"));
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks that the process exists; it sends nothing.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The PID at the end of a `gigas-NAME-PID` directory name.
fn stale_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(CGROUP_PREFIX)?;
    let (_, pid) = rest.rsplit_once('-')?;
    pid.parse().ok()
}

/// Removes the empty `gigas-*-PID` cgroups in `parent` whose PID is no longer running:
/// what a process killed before it could clean up leaves behind. Returns how many went.
pub(crate) fn sweep_stale(parent: &Path) -> usize {
    let Ok(entries) = fs::read_dir(parent) else {
        return 0;
    };
    let me = std::process::id();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(stale_pid) else {
            continue;
        };
        if pid == me || pid_running(pid) || !entry.path().is_dir() {
            continue;
        }
        let path = entry.path();
        match read_pids(&path.join("cgroup.procs")) {
            Ok(pids) if pids.is_empty() => {}
            _ => continue,
        }
        match fs::remove_dir(&path) {
            Ok(()) => {
                tracing::info!(
                    "removed the stale cgroup {} (its process {pid} is gone)",
                    path.display()
                );
                removed += 1;
            }
            Err(e) => tracing::warn!("could not remove the stale cgroup {}: {e}", path.display()),
        }
    }
    removed
}

/// cgroup v2: the directory a child with the memory controller can be made in.
fn v2_parent(found: &Located) -> Result<PathBuf, CgroupError> {
    let own = &found.own;
    let is_root = *own == found.mount;
    let controllers = read_control(&own.join("cgroup.controllers"))?;
    if !is_root && !controllers.split_whitespace().any(|c| c == "memory") {
        return Err(CgroupError::NoMemoryController { path: own.clone() });
    }
    let subtree = own.join("cgroup.subtree_control");
    if read_control(&subtree)?
        .split_whitespace()
        .any(|c| c == "memory")
    {
        return Ok(own.clone());
    }
    match write_control(&subtree, "+memory", "enable the memory controller in") {
        Ok(()) => Ok(own.clone()),
        Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {
            // The own cgroup holds processes (this one at least), and v2 gives controllers
            // to children only of cgroups without processes: make a leaf sibling instead.
            // Its parent enables memory for children already, since the own cgroup has it.
            match own.parent() {
                Some(parent) if !is_root && parent.starts_with(&found.mount) => {
                    tracing::debug!(
                        "cgroup v2: {} holds processes; the memory cgroup goes beside it",
                        own.display()
                    );
                    Ok(parent.to_path_buf())
                }
                _ => Err(CgroupError::NoInternalProcesses { path: own.clone() }),
            }
        }
        Err(e) => Err(e),
    }
}

impl MemoryCgroup {
    /// Makes `gigas-NAME-PID` with a memory limit of `limit_bytes` in the hierarchy
    /// [`CgroupRoots::from_env`] finds. Swap is held to the same limit where the kernel
    /// accounts it (`memory.memsw.limit_in_bytes` in v1, `memory.swap.max = 0` in v2), so
    /// swapping cannot dodge the limit. Nothing is placed in it yet: see
    /// [`MemoryCgroup::enter_self`] and [`MemoryCgroup::add_pid`].
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self, CgroupError> {
        Self::create_in(&CgroupRoots::from_env(), name, limit_bytes)
    }

    /// [`MemoryCgroup::create`] in the hierarchy `roots` finds.
    pub fn create_in(
        roots: &CgroupRoots,
        name: &str,
        limit_bytes: u64,
    ) -> Result<Self, CgroupError> {
        if !valid_name(name) {
            return Err(CgroupError::InvalidName {
                name: name.to_string(),
            });
        }
        if limit_bytes == 0 {
            return Err(CgroupError::ZeroLimit);
        }
        let found = roots.locate()?;
        let parent = match found.version {
            CgroupVersion::V1 => found.own.clone(),
            CgroupVersion::V2 => v2_parent(&found)?,
        };
        sweep_stale(&parent);
        let dir = parent.join(format!("{CGROUP_PREFIX}{name}-{}", std::process::id()));
        let claim = Claim::new(&dir)?;
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Left by an earlier value in this process that could not remove it, or by a
                // process that had this PID before: reuse it only if nothing is inside.
                let pids = read_pids(&dir.join("cgroup.procs"))?;
                if !pids.is_empty() {
                    return Err(CgroupError::Busy { pids, path: dir });
                }
            }
            Err(e) => return Err(CgroupError::fs("create the cgroup", &dir, e)),
        }
        let mut cgroup = MemoryCgroup {
            version: found.version,
            dir,
            mount: found.mount,
            home: found.own,
            limit: limit_bytes,
            swap_held: false,
            placed: Vec::new(),
            removed: false,
            _claim: claim,
        };
        // On error the half-made cgroup is removed by Drop.
        cgroup.set_limit(limit_bytes)?;
        tracing::debug!(
            "created cgroup {} {} with a limit of {} bytes",
            cgroup.version,
            cgroup.dir.display(),
            cgroup.limit
        );
        Ok(cgroup)
    }

    fn set_limit(&mut self, limit: u64) -> Result<(), CgroupError> {
        let value = limit.to_string();
        match self.version {
            CgroupVersion::V1 => {
                let limit_file = self.dir.join("memory.limit_in_bytes");
                let memsw = self.dir.join("memory.memsw.limit_in_bytes");
                // memsw counts memory + swap and may never be below the memory limit: a
                // fresh cgroup has both unlimited (memory first works), a reused one may
                // hold a smaller memsw (then memsw first).
                match write_control(&limit_file, &value, "set the memory limit in") {
                    Err(CgroupError::Io { source, .. })
                        if source.raw_os_error() == Some(libc::EINVAL) && memsw.exists() =>
                    {
                        write_control(&memsw, &value, "set the memory+swap limit in")?;
                        write_control(&limit_file, &value, "set the memory limit in")?;
                    }
                    other => other?,
                }
                if memsw.exists() {
                    write_control(&memsw, &value, "set the memory+swap limit in")?;
                    self.swap_held = true;
                }
                // The kernel rounds down to whole pages.
                self.limit = parse_u64(&limit_file, &read_control(&limit_file)?)?;
            }
            CgroupVersion::V2 => {
                let max = self.dir.join("memory.max");
                write_control(&max, &value, "set the memory limit in")?;
                let swap = self.dir.join("memory.swap.max");
                if swap.exists() {
                    write_control(&swap, "0", "forbid swap in")?;
                    self.swap_held = true;
                }
                let text = read_control(&max)?;
                if text.trim() != "max" {
                    self.limit = parse_u64(&max, &text)?;
                }
            }
        }
        Ok(())
    }

    /// Moves process `pid` (all its threads) into this cgroup. Memory it already holds stays
    /// charged where it was: place a process before it allocates or reads what should count.
    pub fn add_pid(&mut self, pid: u32) -> Result<(), CgroupError> {
        write_control(
            &self.dir.join("cgroup.procs"),
            &pid.to_string(),
            "move a process into",
        )?;
        if !self.placed.contains(&pid) {
            self.placed.push(pid);
        }
        Ok(())
    }

    /// Moves this process, all its threads, into this cgroup. Call it before opening
    /// databases or reading large files: pages are charged to the cgroup of the process that
    /// first touched them, and moving does not bring earlier charges along.
    pub fn enter_self(&mut self) -> Result<(), CgroupError> {
        self.add_pid(std::process::id())
    }

    /// The limit in bytes, as the kernel holds it (rounded down to whole pages).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Which cgroup interface it uses.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Whether swap is held to the limit too (false where the kernel does not account swap,
    /// which with swap configured lets the cgroup swap out instead of being held).
    pub fn swap_held(&self) -> bool {
        self.swap_held
    }

    /// The processes in it now.
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        read_pids(&self.dir.join("cgroup.procs"))
    }

    /// Its memory accounting now.
    pub fn stat(&self) -> Result<MemoryStat, CgroupError> {
        MemoryStat::read(self.version, &self.dir, &self.mount)
    }

    /// Moves the processes this value placed that are still inside back to the cgroup they
    /// came from, and removes the directory. Gives up after a bounded wait when other
    /// processes remain ([`CgroupError::Busy`]); the directory is then left for the next
    /// start's sweep.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.remove_inner()
    }

    fn remove_inner(&mut self) -> Result<(), CgroupError> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let procs = self.dir.join("cgroup.procs");
        let inside = match read_pids(&procs) {
            Ok(pids) => pids,
            // Already gone (removed by hand, or never fully made on a fake hierarchy).
            Err(CgroupError::NotACgroup { .. }) if !self.dir.exists() => return Ok(()),
            Err(e) => return Err(e),
        };
        for pid in inside.iter().filter(|p| self.placed.contains(p)) {
            let home = self.home.join("cgroup.procs");
            let fallback = self.dir.parent().map(|p| p.join("cgroup.procs"));
            let moved =
                write_control(&home, &pid.to_string(), "move a process back to").or_else(|e| {
                    match &fallback {
                        // v2 refuses processes in a cgroup that gives controllers to children.
                        Some(f) if *f != home => {
                            write_control(f, &pid.to_string(), "move a process back to")
                        }
                        _ => Err(e),
                    }
                });
            if let Err(e) = moved {
                tracing::warn!(
                    "could not move process {pid} out of {}: {e}",
                    self.dir.display()
                );
            }
        }
        let mut tries = 0;
        loop {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < REMOVE_RETRIES => {
                    tries += 1;
                    std::thread::sleep(REMOVE_RETRY_WAIT);
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(CgroupError::Busy {
                        pids: read_pids(&procs).unwrap_or_default(),
                        path: self.dir.clone(),
                    })
                }
                Err(e) => return Err(CgroupError::fs("remove the cgroup", &self.dir, e)),
            }
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if !self.removed {
            // The run's figures, once, where they are easiest to find: beside the removal.
            if let Ok(s) = self.stat() {
                tracing::info!(
                    "removing cgroup {}: peak {} of the {} limit; now anon {}, file {}; {} major faults, {} OOM kills",
                    self.dir.display(),
                    s.peak.map_or_else(|| "unknown".to_string(), format_size_approx),
                    format_size(self.limit),
                    format_size_approx(s.anon),
                    format_size_approx(s.file),
                    s.major_faults,
                    s.oom_kills.map_or_else(|| "unknown".to_string(), |k| k.to_string()),
                );
            }
        }
        match self.remove_inner() {
            Ok(()) => tracing::debug!("removed cgroup {}", self.dir.display()),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

pub(crate) fn parse_u64(path: &Path, text: &str) -> Result<u64, CgroupError> {
    text.trim().parse().map_err(|_| CgroupError::Parse {
        path: path.to_path_buf(),
        detail: format!("{:?} is not a byte count", text.trim()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("fullnode"));
        assert!(valid_name("bench-run_2"));
        assert!(!valid_name(""));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("../x"));
        assert!(!valid_name(&"x".repeat(65)));
        assert_eq!(stale_pid("gigas-fullnode-1234"), Some(1234));
        assert_eq!(stale_pid("gigas-bench-run-77"), Some(77));
        assert_eq!(stale_pid("gigas-fullnode"), None);
        assert_eq!(stale_pid("other-12"), None);
    }

    #[test]
    fn sweep_removes_only_empty_dead_gigas_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let stale = dir.path().join(format!("gigas-x-{dead}"));
        let alive = dir.path().join(format!("gigas-x-{}", std::process::id()));
        let other = dir.path().join(format!("mine-{dead}"));
        for d in [&stale, &alive, &other] {
            fs::create_dir(d).unwrap();
            fs::write(d.join("cgroup.procs"), "").unwrap();
        }
        // A plain directory keeps its file, so rmdir fails like a busy cgroup: left in place.
        assert_eq!(sweep_stale(dir.path()), 0);
        assert!(stale.exists());
        fs::remove_file(stale.join("cgroup.procs")).unwrap();
        // cgroup.procs unreadable: not known to be empty, left.
        assert_eq!(sweep_stale(dir.path()), 0);
        assert!(stale.exists() && alive.exists() && other.exists());
    }

    #[test]
    fn a_zombie_is_not_running() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        assert!(pid_running(std::process::id()));
        // Not reaped yet: a zombie once it has exited.
        let start = std::time::Instant::now();
        while pid_running(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "true never exited"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(!pid_running(pid));
    }

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }
}

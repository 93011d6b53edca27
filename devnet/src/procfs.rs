//! What the kernel says about a process's memory: `/proc/PID/status` and `stat`, and the
//! memory cgroup it is in (cgroup v1's memory hierarchy or v2's unified one).

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Memory of one process at one instant, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcMem {
    /// VmRSS.
    pub rss: u64,
    /// RssAnon (heap, stacks).
    pub anon: u64,
    /// RssFile + RssShmem (mapped files: MDBX's map, the binary).
    pub file: u64,
    /// VmHWM, the peak of VmRSS.
    pub peak_rss: u64,
    /// Major page faults since the process started (pages read from disk).
    pub major_faults: u64,
}

impl ProcMem {
    /// Reads `/proc/PID/status` and `/proc/PID/stat`; `None` once the process is gone.
    pub fn read(pid: u32) -> Option<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(0, |v| v * 1024)
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command (field 2) may hold spaces; after its ')' come fields 3, 4, ... so
        // majflt (field 12) is the tenth.
        let major_faults = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(9))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Some(Self {
            rss: kib("VmRSS:"),
            anon: kib("RssAnon:"),
            file: kib("RssFile:") + kib("RssShmem:"),
            peak_rss: kib("VmHWM:"),
            major_faults,
        })
    }
}

/// The memory cgroup a process is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryCgroup {
    /// 1 or 2.
    pub version: u8,
    /// Its directory under /sys/fs/cgroup.
    pub dir: PathBuf,
}

/// A v1 limit this large means none (the kernel's "unlimited", rounded to pages).
const V1_UNLIMITED: u64 = 1 << 62;

impl MemoryCgroup {
    /// The memory cgroup of `pid` (v1's memory hierarchy where mounted, else v2's).
    pub fn of(pid: u32) -> Option<Self> {
        Self::of_in(pid, Path::new("/sys/fs/cgroup"))
    }

    /// [`MemoryCgroup::of`] with the cgroup file systems under `root`.
    pub fn of_in(pid: u32, root: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        Self::parse(&text, root)
    }

    /// The memory cgroup a `/proc/PID/cgroup` text names, under `root`.
    pub fn parse(text: &str, root: &Path) -> Option<Self> {
        let v1_root = root.join("memory");
        if v1_root.join("memory.limit_in_bytes").is_file() {
            let path = text.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "memory")
                    .then(|| path.to_string())
            })?;
            return Some(Self {
                version: 1,
                dir: v1_root.join(path.trim_start_matches('/')),
            });
        }
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
        root.join("cgroup.controllers").is_file().then(|| Self {
            version: 2,
            dir: root.join(path.trim_start_matches('/')),
        })
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Its limit in bytes (`None`: unlimited or unreadable).
    pub fn limit(&self) -> Option<u64> {
        match self.version {
            1 => self
                .read_u64("memory.limit_in_bytes")
                .filter(|&l| l < V1_UNLIMITED),
            _ => self.read_u64("memory.max"),
        }
    }

    /// Bytes charged to it now (page cache included).
    pub fn usage(&self) -> Option<u64> {
        match self.version {
            1 => self.read_u64("memory.usage_in_bytes"),
            _ => self.read_u64("memory.current"),
        }
    }

    /// Its anonymous and file-backed bytes from `memory.stat`.
    pub fn anon_file(&self) -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).ok()?;
        let field = |name: &str| {
            stat.lines().find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<u64>().ok())?
            })
        };
        match self.version {
            // v1's `rss` already counts transparent huge pages (`rss_huge` is a part of it).
            1 => Some((field("rss")?, field("cache")?)),
            _ => Some((field("anon")?, field("file")?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process() {
        let me = ProcMem::read(std::process::id()).expect("/proc/self");
        assert!(me.rss > 0 && me.peak_rss >= me.rss, "{me:?}");
        assert!(me.anon + me.file <= me.rss + (1 << 20), "{me:?}");
        assert_eq!(ProcMem::read(u32::MAX), None);
    }

    #[test]
    fn v1_and_v2_layouts() {
        let text = "4:memory:/a/gigas-fullnode-7\n1:cpu:/\n0::/b/c\n";
        let dir = tempfile::tempdir().unwrap();
        // Neither hierarchy mounted: none.
        assert_eq!(MemoryCgroup::parse(text, dir.path()), None);

        // v2: the unified line names the directory.
        std::fs::write(dir.path().join("cgroup.controllers"), "memory\n").unwrap();
        let cg = MemoryCgroup::parse(text, dir.path()).unwrap();
        assert_eq!((cg.version, cg.dir.clone()), (2, dir.path().join("b/c")));
        std::fs::create_dir_all(&cg.dir).unwrap();
        std::fs::write(cg.dir.join("memory.max"), "max\n").unwrap();
        assert_eq!(cg.limit(), None);
        std::fs::write(cg.dir.join("memory.max"), "8589934592\n").unwrap();
        std::fs::write(cg.dir.join("memory.current"), "4096\n").unwrap();
        std::fs::write(cg.dir.join("memory.stat"), "anon 10\nfile 20\n").unwrap();
        assert_eq!(cg.limit(), Some(8 << 30));
        assert_eq!(cg.usage(), Some(4096));
        assert_eq!(cg.anon_file(), Some((10, 20)));

        // v1's memory hierarchy wins where mounted.
        let v1 = dir.path().join("memory");
        std::fs::create_dir_all(v1.join("a/gigas-fullnode-7")).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        let cg = MemoryCgroup::parse(text, dir.path()).unwrap();
        assert_eq!(
            (cg.version, cg.dir.clone()),
            (1, v1.join("a/gigas-fullnode-7"))
        );
        std::fs::write(
            cg.dir.join("memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(cg.limit(), None);
        std::fs::write(cg.dir.join("memory.limit_in_bytes"), "1073741824\n").unwrap();
        std::fs::write(cg.dir.join("memory.usage_in_bytes"), "8192\n").unwrap();
        std::fs::write(cg.dir.join("memory.stat"), "cache 30\nrss 40\nrss_huge 2\n").unwrap();
        assert_eq!(cg.limit(), Some(1 << 30));
        assert_eq!(cg.usage(), Some(8192));
        assert_eq!(cg.anon_file(), Some((40, 30)));
    }
}

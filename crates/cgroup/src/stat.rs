//! A memory cgroup's accounting, read the same way from v1 and v2.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::cgroup::{parse_u64, read_control};
use crate::detect::{CgroupRoots, CgroupVersion};
use crate::error::CgroupError;

/// cgroup v1 writes "no limit" as the largest page-aligned counter (0x7FFFFFFFFFFFF000 with
/// 4 KiB pages); anything this large is taken to mean unlimited.
const V1_UNLIMITED: u64 = 1 << 62;

/// A memory cgroup's accounting at one instant. Sizes are bytes and include the cgroup's
/// children (hierarchical), as the limit does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStat {
    /// Which interface it was read through.
    pub version: CgroupVersion,
    /// The cgroup read.
    pub path: PathBuf,
    /// Memory charged now: anonymous memory, the page cache it read or wrote, kernel memory
    /// (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    pub usage: u64,
    /// The most ever charged at once (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`;
    /// `None` on v2 kernels before 5.19).
    pub peak: Option<u64>,
    /// The limit in force: the smallest of the cgroup's and its ancestors' (`None`: none).
    pub limit: Option<u64>,
    /// Anonymous memory: heaps, stacks, private mappings (v1 `total_rss`, v2 `anon`).
    pub anon: u64,
    /// Page cache: file pages, an MDBX map's included, and tmpfs/shared memory (v1
    /// `total_cache`, v2 `file`).
    pub file: u64,
    /// Page faults that had to read from disk (v1 `total_pgmajfault`, v2 `pgmajfault`).
    pub major_faults: u64,
    /// Processes the kernel killed for exceeding the limit (v1 `memory.oom_control`
    /// `oom_kill`, kernels 4.13 on; v2 `memory.events` `oom_kill`).
    pub oom_kills: Option<u64>,
    /// Times a charge hit the limit and had to reclaim (v1 `memory.failcnt`, v2
    /// `memory.events` `max`). Not to be relied on for v1: recent kernels (6.18 measured)
    /// leave `memory.failcnt` at 0 even when usage reaches the limit; compare `peak` with
    /// `limit` instead.
    pub limit_hits: Option<u64>,
}

fn key_values(path: &Path) -> Result<HashMap<String, u64>, CgroupError> {
    let text = read_control(path)?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (k, v) = line.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect())
}

fn optional_u64(path: &Path) -> Result<Option<u64>, CgroupError> {
    match read_control(path) {
        Ok(text) => parse_u64(path, &text).map(Some),
        Err(CgroupError::NotACgroup { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn field(map: &HashMap<String, u64>, keys: &[&str], path: &Path) -> Result<u64, CgroupError> {
    keys.iter()
        .find_map(|k| map.get(*k).copied())
        .ok_or_else(|| CgroupError::Parse {
            path: path.to_path_buf(),
            detail: format!("no {} line", keys.join(" or ")),
        })
}

impl MemoryStat {
    /// Reads the cgroup at `dir`; `mount` is its hierarchy's root, where looking for
    /// ancestors' limits stops.
    pub(crate) fn read(
        version: CgroupVersion,
        dir: &Path,
        mount: &Path,
    ) -> Result<Self, CgroupError> {
        match version {
            CgroupVersion::V1 => Self::read_v1(dir),
            CgroupVersion::V2 => Self::read_v2(dir, mount),
        }
    }

    fn read_v1(dir: &Path) -> Result<Self, CgroupError> {
        let usage_file = dir.join("memory.usage_in_bytes");
        let usage = parse_u64(&usage_file, &read_control(&usage_file)?)?;
        let peak = optional_u64(&dir.join("memory.max_usage_in_bytes"))?;
        let stat_file = dir.join("memory.stat");
        let stat = key_values(&stat_file)?;
        let limit_file = dir.join("memory.limit_in_bytes");
        let own_limit = parse_u64(&limit_file, &read_control(&limit_file)?)?;
        let limit = stat
            .get("hierarchical_memory_limit")
            .map_or(own_limit, |h| own_limit.min(*h));
        let oom_control = dir.join("memory.oom_control");
        let oom_kills = match key_values(&oom_control) {
            Ok(map) => map.get("oom_kill").copied(),
            Err(CgroupError::NotACgroup { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(MemoryStat {
            version: CgroupVersion::V1,
            path: dir.to_path_buf(),
            usage,
            peak,
            limit: (limit < V1_UNLIMITED).then_some(limit),
            anon: field(&stat, &["total_rss", "rss"], &stat_file)?,
            file: field(&stat, &["total_cache", "cache"], &stat_file)?,
            major_faults: field(&stat, &["total_pgmajfault", "pgmajfault"], &stat_file)?,
            oom_kills,
            limit_hits: optional_u64(&dir.join("memory.failcnt"))?,
        })
    }

    fn read_v2(dir: &Path, mount: &Path) -> Result<Self, CgroupError> {
        let usage_file = dir.join("memory.current");
        let usage = parse_u64(&usage_file, &read_control(&usage_file)?)?;
        let peak = optional_u64(&dir.join("memory.peak"))?;
        let stat_file = dir.join("memory.stat");
        let stat = key_values(&stat_file)?;
        let events = match key_values(&dir.join("memory.events")) {
            Ok(map) => map,
            Err(CgroupError::NotACgroup { .. }) => HashMap::new(),
            Err(e) => return Err(e),
        };
        let mut limit: Option<u64> = None;
        let mut at = Some(dir);
        while let Some(d) = at {
            if d == mount || !d.starts_with(mount) {
                break;
            }
            let max = d.join("memory.max");
            match read_control(&max) {
                Ok(text) if text.trim() == "max" => {}
                Ok(text) => {
                    let v = parse_u64(&max, &text)?;
                    limit = Some(limit.map_or(v, |l| l.min(v)));
                }
                Err(CgroupError::NotACgroup { .. }) => {}
                Err(e) => return Err(e),
            }
            at = d.parent();
        }
        Ok(MemoryStat {
            version: CgroupVersion::V2,
            path: dir.to_path_buf(),
            usage,
            peak,
            limit,
            anon: field(&stat, &["anon"], &stat_file)?,
            file: field(&stat, &["file"], &stat_file)?,
            major_faults: field(&stat, &["pgmajfault"], &stat_file)?,
            oom_kills: events.get("oom_kill").copied(),
            limit_hits: events.get("max").copied(),
        })
    }

    /// The accounting of the cgroup this process is in now (whether or not it has a limit),
    /// in the hierarchy [`CgroupRoots::from_env`] finds. Costs a few small file reads.
    /// cgroup v2's root cgroup keeps no such files: a process there gets
    /// [`CgroupError::NotACgroup`].
    pub fn of_self() -> Result<Self, CgroupError> {
        Self::of_self_in(&CgroupRoots::from_env())
    }

    /// The accounting of the cgroup process `pid` is in now, found through its own
    /// `/proc/PID/mountinfo` and `/proc/PID/cgroup` (`$GIGAS_CGROUP_ROOT` does not apply: it
    /// stands for this process's view only).
    pub fn of_pid(pid: u32) -> Result<Self, CgroupError> {
        let proc = Path::new("/proc").join(pid.to_string());
        Self::of_self_in(&CgroupRoots::from_proc_files(
            proc.join("mountinfo"),
            proc.join("cgroup"),
        ))
    }

    /// [`MemoryStat::of_self`] in the hierarchy `roots` finds.
    pub fn of_self_in(roots: &CgroupRoots) -> Result<Self, CgroupError> {
        let found = roots.locate()?;
        Self::read(found.version, &found.own, &found.mount)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn reads_v2_files_and_the_smallest_ancestor_limit() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join("a");
        let dir = parent.join("gigas-x-1");
        fs::create_dir_all(&dir).unwrap();
        fs::write(parent.join("memory.max"), "1073741824\n").unwrap();
        fs::write(dir.join("memory.max"), "max\n").unwrap();
        fs::write(dir.join("memory.current"), "4096\n").unwrap();
        fs::write(dir.join("memory.peak"), "8192\n").unwrap();
        fs::write(
            dir.join("memory.stat"),
            "anon 1000\nfile 2000\nkernel 5\npgmajfault 7\n",
        )
        .unwrap();
        fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        let s = MemoryStat::read(CgroupVersion::V2, &dir, root.path()).unwrap();
        assert_eq!(s.usage, 4096);
        assert_eq!(s.peak, Some(8192));
        assert_eq!(s.limit, Some(1 << 30));
        assert_eq!((s.anon, s.file, s.major_faults), (1000, 2000, 7));
        assert_eq!((s.oom_kills, s.limit_hits), (Some(1), Some(3)));

        fs::write(dir.join("memory.max"), "67108864\n").unwrap();
        let s = MemoryStat::read(CgroupVersion::V2, &dir, root.path()).unwrap();
        assert_eq!(s.limit, Some(64 << 20));
    }

    #[test]
    fn v1_unlimited_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("memory.usage_in_bytes"), "100\n").unwrap();
        fs::write(d.join("memory.max_usage_in_bytes"), "200\n").unwrap();
        fs::write(d.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        fs::write(d.join("memory.failcnt"), "0\n").unwrap();
        fs::write(
            d.join("memory.stat"),
            "cache 1\nrss 2\npgmajfault 3\nhierarchical_memory_limit 9223372036854771712\n\
             total_cache 10\ntotal_rss 20\ntotal_pgmajfault 30\n",
        )
        .unwrap();
        let s = MemoryStat::read(CgroupVersion::V1, d, d).unwrap();
        assert_eq!(s.limit, None);
        assert_eq!((s.anon, s.file, s.major_faults), (20, 10, 30));
        assert_eq!(s.oom_kills, None);
        assert_eq!(s.limit_hits, Some(0));
        // A parent's limit shows through hierarchical_memory_limit.
        fs::write(
            d.join("memory.stat"),
            "total_cache 10\ntotal_rss 20\ntotal_pgmajfault 30\nhierarchical_memory_limit 4096\n",
        )
        .unwrap();
        assert_eq!(
            MemoryStat::read(CgroupVersion::V1, d, d).unwrap().limit,
            Some(4096)
        );
    }
}

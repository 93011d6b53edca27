//! A run under a memory limit: this process moves into a fresh memory cgroup for the run and
//! back out after it (`gigas-cgroup`), so that each limit starts with an empty charge.
//!
//! The caller evicts the run's database from the page cache first: a page stays charged to
//! the cgroup that first read it, and one read before the move would not count here.

use eyre::{eyre, Result};
use gigas_cgroup::MemoryCgroup;

use super::figures::CgroupFigures;

/// This process inside a limited cgroup; dropping it moves the process back and removes the
/// cgroup.
#[derive(Debug)]
pub(crate) struct Limited {
    cgroup: Option<MemoryCgroup>,
}

impl Limited {
    /// Creates a cgroup named after `name` with `limit` bytes and moves this process (every
    /// thread) into it.
    pub(crate) fn enter(name: &str, limit: u64) -> Result<Self> {
        let mut cgroup = MemoryCgroup::create(name, limit)
            .map_err(|e| eyre!("a memory limit of {limit} bytes for the run: {e}"))?;
        cgroup
            .enter_self()
            .map_err(|e| eyre!("moving into {}: {e}", cgroup.path().display()))?;
        Ok(Self {
            cgroup: Some(cgroup),
        })
    }

    fn cgroup(&self) -> Result<&MemoryCgroup> {
        self.cgroup
            .as_ref()
            .ok_or_else(|| eyre!("the run's cgroup is gone"))
    }

    /// Major faults charged to the cgroup so far.
    pub(crate) fn major_faults(&self) -> Result<u64> {
        let cgroup = self.cgroup()?;
        Ok(cgroup
            .stat()
            .map_err(|e| eyre!("reading {}: {e}", cgroup.path().display()))?
            .major_faults)
    }

    /// The accounting now, with the major faults since `faults_before`.
    pub(crate) fn figures(&self, faults_before: u64) -> Result<CgroupFigures> {
        let cgroup = self.cgroup()?;
        let stat = cgroup
            .stat()
            .map_err(|e| eyre!("reading {}: {e}", cgroup.path().display()))?;
        Ok(CgroupFigures {
            version: match stat.version {
                gigas_cgroup::CgroupVersion::V1 => 1,
                gigas_cgroup::CgroupVersion::V2 => 2,
            },
            limit_bytes: stat.limit.unwrap_or(cgroup.limit()),
            peak_bytes: stat.peak.unwrap_or(stat.usage),
            usage_bytes: stat.usage,
            anon_bytes: stat.anon,
            file_bytes: stat.file,
            major_faults: stat.major_faults.saturating_sub(faults_before),
        })
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            if let Err(e) = cgroup.remove() {
                eprintln!("could not remove the run's memory cgroup: {e}");
            }
        }
    }
}

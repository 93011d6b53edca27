//! A process's memory as the kernel reports it (`/proc/PID/status` and `stat`).

use std::path::Path;

/// Memory of a process as the kernel reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcessMemory {
    /// VmRSS, bytes.
    pub resident: u64,
    /// VmHWM: the peak of VmRSS (reset by writing 5 to `/proc/self/clear_refs`), bytes.
    pub peak: u64,
    /// RssFile + RssShmem, bytes.
    pub file: u64,
    /// RssAnon, bytes.
    pub anon: u64,
    /// Major faults (`/proc/PID/stat` field 12).
    pub major_faults: u64,
    /// Threads (`Threads:`): each thread that allocates holds its own allocator heap, so a
    /// thread count that climbs is a memory figure too.
    pub threads: u64,
}

impl ProcessMemory {
    /// This process's: reads `/proc/self/status` and `/proc/self/stat`; `None` where they do
    /// not exist.
    pub fn read() -> Option<Self> {
        Self::read_in(Path::new("/proc/self"))
    }

    /// Process `pid`'s (the devnet samples its nodes); `None` once it is gone.
    pub fn of(pid: u32) -> Option<Self> {
        Self::read_in(&Path::new("/proc").join(pid.to_string()))
    }

    fn read_in(dir: &Path) -> Option<Self> {
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let kib = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(0, |v| v * 1024)
        };
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // The command name (field 2) may hold spaces; fields after its ')' are plain.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest)?;
        // After ')' come field 3 (state), ..., so field 12 is the 10th of them.
        let major_faults = after
            .split_whitespace()
            .nth(9)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Some(Self {
            resident: kib("VmRSS:"),
            peak: kib("VmHWM:"),
            file: kib("RssFile:") + kib("RssShmem:"),
            anon: kib("RssAnon:"),
            major_faults,
            threads: status
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|rest| rest.trim().parse().ok())
                .unwrap_or(0),
        })
    }
}

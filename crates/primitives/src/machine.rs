//! The machine a measurement ran on, as every benchmark report states it.

use serde::Serialize;

/// CPU count, CPU model and memory of this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// CPUs this process may use (`nproc`).
    pub cpus: usize,
    /// CPU model name.
    pub cpu_model: String,
    /// Total memory in bytes.
    pub memory_bytes: u64,
}

impl Machine {
    /// Reads the description of this machine (from /proc on Linux; "unknown" elsewhere).
    pub fn current() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split(':').nth(1))
            })
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let memory_bytes = proc_kib("/proc/meminfo", "MemTotal:").unwrap_or(0) * 1024;
        Self {
            cpus,
            cpu_model,
            memory_bytes,
        }
    }

    /// One line for a report header.
    pub fn describe(&self) -> String {
        format!(
            "{} CPUs, {}, {:.1} GiB",
            self.cpus,
            self.cpu_model,
            self.memory_bytes as f64 / (1u64 << 30) as f64
        )
    }
}

/// Resident memory of this process in bytes, if the platform says.
pub fn resident_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmRSS:").map(|kib| kib * 1024)
}

fn proc_kib(file: &str, field: &str) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The git revision of the working directory's checkout, `+dirty` with local changes to
/// tracked files: what a report measured ("git unknown" outside a checkout or without git).
pub fn source_revision() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let revision = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    format!("git {revision}{}", if dirty { "+dirty" } else { "" })
}

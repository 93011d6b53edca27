//! Whether the full node's memory limit was applied, said plainly: from the cgroup the kernel
//! shows it in, its `gigas_memory_limit_bytes` metric, and its own warning when it went on
//! without one.

use serde::Serialize;

use crate::report::bytes;
use gigas_cgroup::{CgroupVersion, MemoryStat};

/// What became of the memory limit asked for the full node.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum LimitStatus {
    /// `--memory-limit none`.
    NotAsked,
    /// The node runs in a cgroup of its own with this limit.
    Applied {
        /// As asked (e.g. 8GiB).
        asked: String,
        /// The cgroup's limit.
        limit_bytes: u64,
        /// The cgroup's directory.
        cgroup: String,
        /// cgroup version (1 or 2).
        version: u8,
        /// The node's own `gigas_memory_limit_bytes`, where it exports it.
        metric_bytes: Option<f64>,
    },
    /// The node runs without a limit.
    NotApplied {
        /// As asked.
        asked: String,
        /// Why, in the node's words where it gave them.
        reason: String,
    },
}

impl LimitStatus {
    /// Whether a limit holds the node.
    pub fn applied(&self) -> bool {
        matches!(self, Self::Applied { .. })
    }

    /// One line for the summary.
    pub fn line(&self) -> String {
        match self {
            Self::NotAsked => "none asked (--memory-limit none)".to_string(),
            Self::Applied {
                limit_bytes,
                cgroup,
                version,
                metric_bytes,
                ..
            } => format!(
                "APPLIED to the full node: {} in cgroup v{version} {cgroup}{}",
                bytes(*limit_bytes),
                match metric_bytes {
                    Some(m) => format!(" (its gigas_memory_limit_bytes: {m:.0})"),
                    None => String::new(),
                }
            ),
            Self::NotApplied { asked, reason } => {
                format!(
                    "NOT APPLIED: the full node runs without the {asked} limit asked for: {reason}"
                )
            }
        }
    }
}

/// What became of `asked` for the node `pid`, given the lines it printed while starting and
/// its metrics page.
pub fn check(asked: &str, pid: u32, startup: &[String], metrics: Option<&str>) -> LimitStatus {
    let metric_bytes = metrics.and_then(|m| crate::http::metric(m, "gigas_memory_limit_bytes"));
    let own = MemoryStat::of_pid(std::process::id()).ok().map(|s| s.path);
    if let Ok(node) = MemoryStat::of_pid(pid) {
        // Its own cgroup, not the devnet's (whose limit, if any, would hold it too).
        if let (Some(limit_bytes), true) = (node.limit, Some(&node.path) != own.as_ref()) {
            return LimitStatus::Applied {
                asked: asked.to_string(),
                limit_bytes,
                cgroup: node.path.display().to_string(),
                version: match node.version {
                    CgroupVersion::V1 => 1,
                    CgroupVersion::V2 => 2,
                },
                metric_bytes,
            };
        }
    }
    // The node's own warning names the cause (no writable cgroup, not root, ...).
    let reason = startup
        .iter()
        .find(|l| l.contains("NO MEMORY LIMIT"))
        .map(|l| match l.split_once("Cause: ") {
            Some((_, cause)) => cause.trim().to_string(),
            None => l.trim().to_string(),
        })
        .unwrap_or_else(|| {
            "the kernel shows it in the devnet's own memory cgroup with no limit of its own (see its log)".to_string()
        });
    LimitStatus::NotApplied {
        asked: asked.to_string(),
        reason,
    }
}

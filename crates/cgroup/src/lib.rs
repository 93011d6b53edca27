//! `gigas-cgroup`: places a process in a memory cgroup and reads its memory accounting.
//!
//! It owns the mechanics, for cgroup v2 (`memory.max` in a child of the process's own cgroup,
//! or a leaf sibling when the own cgroup holds processes) and cgroup v1 (`memory.limit_in_bytes`
//! under the memory hierarchy, with `memory.memsw.limit_in_bytes` so swap cannot dodge it):
//!
//! - [`MemoryCgroup`]: make `gigas-NAME-PID` with a limit, move processes in, read its
//!   [`MemoryStat`], and remove it again (on drop; stale ones of dead processes are swept by
//!   the next create);
//! - [`MemoryStat::of_self`]: the accounting of whatever cgroup this process is in;
//! - [`MemoryLimitArgs`]: the `--memory-limit SIZE` / `--memory-limit-optional` flags;
//! - [`MemoryCollector`]: the `gigas_memory_limit_bytes` and `gigas_cgroup_*` metrics;
//! - [`drop_page_cache`] and [`evict_file_pages`]: empty the cache before a limited run;
//! - [`parse_size`]: `512MiB`, `8G`, `1073741824`;
//! - [`ProcessMemory`]: a process's resident, anonymous and file-backed memory and faults.
//!
//! It must not decide policy for its callers: which limit, whether going on without one is
//! acceptable, and when to evict are theirs. Errors say why and how to fix
//! ([`CgroupError`]); nothing here exits or panics on what the machine allows.
//!
//! Accounting rules an experiment must know: every page is charged to the cgroup of the
//! process that first brought it into memory, and stays charged there when that process
//! moves (v1 without the deprecated `move_charge_at_immigrate`, v2 always). The page cache
//! counts: an MDBX map's pages, clean or dirty, are charged to the reader and reclaimed under
//! the limit before the process is OOM-killed; anonymous memory cannot be reclaimed without
//! swap, so a heap past the limit gets the process killed. Place the process first
//! ([`MemoryCgroup::enter_self`]) and evict the files it will read
//! ([`evict_file_pages`]) so that what it reads counts against its limit.

mod args;
mod cgroup;
mod detect;
mod error;
mod metrics;
mod page_cache;
mod process;
mod size;
mod stat;

pub use args::MemoryLimitArgs;
pub use cgroup::{MemoryCgroup, CGROUP_PREFIX};
pub use detect::{CgroupRoots, CgroupVersion, ROOT_ENV};
pub use error::{CgroupError, PageCacheError, HOW_TO_FIX};
pub use metrics::MemoryCollector;
pub use page_cache::{drop_page_cache, evict_file_pages, Evicted};
pub use process::ProcessMemory;
pub use size::{format_size, format_size_approx, parse_size, SizeError};
pub use stat::MemoryStat;

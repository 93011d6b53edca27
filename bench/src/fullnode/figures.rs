//! What a run measured, as the report holds it: per run, per phase, and the genesis it
//! started from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::execute::ExecutionFigures;
use super::mode::Mode;
pub(super) fn layout_v1() -> u32 {
    1
}

/// The genesis database every run starts from a copy of.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenesisInfo {
    /// The chain's genesis fingerprint.
    pub chain_fingerprint: String,
    /// The state database's layout version it was written in (1 before the field existed):
    /// a cache of another layout is written again, as a node would start from a new database.
    #[serde(default = "layout_v1")]
    pub layout_version: u32,
    /// Whether the database keeps the state commitment (the recording's diff 0 carries one):
    /// a cache written without it is written again for a recording with one.
    #[serde(default)]
    pub state_commitment: bool,
    /// The state commitment's version the database's sum is of (0 before the field).
    #[serde(default)]
    pub commitment_version: u32,
    /// Seconds `gigas_fullnode::genesis::initialize` took (checking diff 0, writing the
    /// state, computing the root and storing the whole trie).
    pub seconds: f64,
    /// Accounts written.
    pub accounts: u64,
    /// Storage slots written.
    pub slots: u64,
    /// The genesis's MPT root.
    pub state_root: String,
    /// Bytes of the database's files on disk.
    pub disk_bytes: u64,
    /// Bytes of MDBX pages in use.
    pub used_bytes: u64,
    /// Peak resident memory of this process while writing it (bytes).
    pub peak_rss_bytes: Option<u64>,
    /// When it was written (seconds since the Unix epoch).
    pub built_at: u64,
    /// Written by this run (false: taken from the cache).
    #[serde(skip_deserializing)]
    pub built_now: bool,
    /// Median seconds to copy it (and sync the copy) into a run's directory.
    #[serde(skip_deserializing)]
    pub copy_seconds: f64,
    /// The database directory.
    #[serde(skip)]
    pub dir: PathBuf,
}

/// Time and share of one phase.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// decode, verify, read, write, trie, commit, or other (the loop around them).
    pub name: &'static str,
    /// Seconds.
    pub seconds: f64,
    /// Of the run's apply seconds.
    pub share: f64,
    /// Microseconds per state change.
    pub us_per_change: f64,
}

/// Snapshots written beside a run (a mode with `--snapshot-while true`): one after
/// another from the clock's start until it stops; the one under way then is finished
/// outside the clock.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SnapshotFigures {
    /// Snapshots finished (the last one possibly after the clock stopped).
    pub written: u64,
    /// Seconds each took.
    pub seconds: Vec<f64>,
    /// Blocks they were of.
    pub blocks: Vec<u64>,
    /// Bytes of the last one.
    pub last_bytes: u64,
    /// CPU seconds of the producer thread over the run (its share of the run's CPU).
    pub cpu_seconds: f64,
    /// Attempts that failed, with the last error.
    pub failed: u64,
    /// The last failure.
    pub last_error: Option<String>,
}

/// One run of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// 1-based round.
    pub round: usize,
    /// The mode.
    pub mode: Mode,
    /// Its label.
    pub label: String,
    /// Seconds to copy and sync the genesis database into the run's directory (and to evict
    /// and re-read it, per `--page-cache`).
    pub copy_seconds: f64,
    /// Seconds applying blocks `first_loaded..=last`, every commit included (the final root
    /// of the batched mode apart).
    pub seconds: f64,
    /// Blocks applied in that time.
    pub blocks: u64,
    /// Account and slot changes applied.
    pub changes: u64,
    /// Gas used by those blocks.
    pub gas_used: u64,
    /// State changes per second.
    pub changes_per_second: f64,
    /// Transfers (gas / 21,000) per second.
    pub transfers_per_second: f64,
    /// Blocks per second.
    pub blocks_per_second: f64,
    /// The split: decode, verify, read, write, trie, commit, other.
    pub split: Vec<Phase>,
    /// Groups committed.
    pub commits: u64,
    /// Of the commit phase: MDBX's commit and sync (the rest is writing the group's sorted
    /// hashed-table writes and its changed-key sets before it).
    pub mdbx_commit_seconds: f64,
    /// Durable points made after commits that were not synced (the run's last one
    /// included), and their seconds (part of the commit phase).
    pub syncs: u64,
    /// Seconds of those durable points.
    pub sync_seconds: f64,
    /// Roots computed while applying (live: one per block).
    pub roots: u64,
    /// Trie leaves hashed by those roots.
    pub root_leaves: u64,
    /// Accounts whose leaf those roots recomputed.
    pub root_changed_accounts: u64,
    /// Leaves those roots took from the trie cache's remembered hashes.
    pub root_remembered: u64,
    /// Trie walks those roots did again without remembered hashes.
    pub root_rereads: u64,
    /// The root at the last block.
    pub final_root: String,
    /// Batched: seconds of the one root at the end (a rebuild of the whole trie from the
    /// hashed tables, since batched mode keeps none).
    pub final_root_seconds: Option<f64>,
    /// Batched: seconds committing that root's trie nodes.
    pub final_root_commit_seconds: Option<f64>,
    /// The database's head is the recording's last block with its hash.
    pub head_matches: bool,
    /// The root recomputed from scratch from the hashed tables (checked on the last live run).
    pub root_from_scratch: Option<String>,
    /// Seconds that took.
    pub root_from_scratch_seconds: Option<f64>,
    /// CPU seconds of this process while applying (user + system).
    pub cpu_seconds: f64,
    /// Major page faults while applying (pages read from disk through the map).
    pub major_faults: u64,
    /// Bytes this process made the kernel read from storage while applying.
    pub read_bytes: u64,
    /// Bytes it caused to be written to storage while applying.
    pub write_bytes: u64,
    /// Bytes of MDBX pages in use at the end.
    pub db_used_bytes: u64,
    /// Bytes of the database's files on disk at the end.
    pub db_disk_bytes: u64,
    /// Peak resident memory while applying (the preloaded diffs and the map's touched pages
    /// included; the write map's pages are file-backed).
    pub peak_rss_bytes: Option<u64>,
    /// Anonymous (heap) resident memory at the end of the run.
    pub rss_anon_bytes: Option<u64>,
    /// File-backed resident memory (mapped database pages) at the end of the run.
    pub rss_file_bytes: Option<u64>,
    /// The memory limit the run ran under (None: none).
    pub memory_limit_bytes: Option<u64>,
    /// The run's cgroup accounting at its end (with a limit).
    pub cgroup: Option<CgroupFigures>,
    /// The run applied every block of the recording (false: `--max-run-time` stopped it).
    pub complete: bool,
    /// With a mode that writes snapshots: what its producer did during the run.
    pub snapshots: Option<SnapshotFigures>,
    /// Loaded blocks applied before the clock started (to bring the hot set into memory).
    pub warmup_blocks: u64,
    /// With `--verify-execution`: the re-execution's split and its cache misses.
    pub execution: Option<ExecutionFigures>,
    /// Live: the writer's trie cache at the end of the run (its counters cover the
    /// warm-up blocks too).
    pub trie_cache: Option<TrieCacheFigures>,
    /// Live: the account trie held in memory at the end of the run, when on.
    pub sparse_trie: Option<SparseTrieFigures>,
    /// The first block with changes after the database was opened (the first warm-up
    /// block), its root included; `None` without warm-up blocks.
    pub first_block: Option<FirstBlockFigures>,
    /// With `--preload-trie`: the account trie loaded when the writer opened, before any
    /// block (`None` without it, or with no trie in memory to load).
    pub preload: Option<PreloadFigures>,
}

/// The first block with changes a fresh writer applied: the cost of a restart, with the
/// trie in memory (and the trie cache) empty and the page cache as `--page-cache` left it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FirstBlockFigures {
    /// Its account and slot changes.
    pub changes: u64,
    /// Seconds to decode, verify, write and root it (waiting for a root that runs on).
    pub seconds: f64,
}

/// The account trie loaded at open (`--preload-trie`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PreloadFigures {
    /// Seconds it took.
    pub seconds: f64,
    /// Nodes it held after.
    pub nodes: u64,
    /// Bytes it held after, estimated.
    pub bytes: u64,
    /// Leaves read (and hashed) to load the stored nodes' lone leaves.
    pub leaves: u64,
}

/// The writer's in-memory account trie at the end of a run (its counters cover the warm-up
/// blocks too).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SparseTrieFigures {
    /// Its budget.
    pub budget_bytes: u64,
    /// What its loaded nodes hold (estimated).
    pub bytes: u64,
    /// Nodes loaded.
    pub nodes: u64,
    /// Nodes folded back into hashes to stay within the budget.
    pub pruned: u64,
    /// Leaves read from the tables to load subtries.
    pub loaded_leaves: u64,
}

/// The writer's trie cache at the end of a run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TrieCacheFigures {
    /// Its budget.
    pub budget_bytes: u64,
    /// What it holds (estimated from its entries).
    pub bytes: u64,
    /// Entries held.
    pub entries: u64,
    /// Node seeks answered from memory.
    pub hits: u64,
    /// Node seeks that searched MDBX.
    pub misses: u64,
    /// Entries dropped to keep within the budget.
    pub evicted: u64,
}

/// What a run's memory cgroup accounted.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CgroupFigures {
    /// cgroup version (1 or 2).
    pub version: u8,
    /// The limit.
    pub limit_bytes: u64,
    /// Highest usage (page cache included) while the cgroup existed.
    pub peak_bytes: u64,
    /// Usage at the end.
    pub usage_bytes: u64,
    /// Anonymous memory at the end.
    pub anon_bytes: u64,
    /// Page cache charged at the end.
    pub file_bytes: u64,
    /// Major faults charged to the cgroup while applying (the clock's span).
    pub major_faults: u64,
}

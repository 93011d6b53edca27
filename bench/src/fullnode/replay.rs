//! The replay: the genesis database (written once, then copied per run), and each run of a
//! mode through the full node's `Applier`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eyre::{bail, eyre, Result, WrapErr};
use gigas_fullnode::ahead::AheadServing;
use gigas_fullnode::apply::{Applier, ApplyTimings};
use gigas_fullnode::memory;
use gigas_fullnode::metrics::ProcessMemory;
use gigas_fullnode::wal::AppliedLog;
use gigas_fullnode::window::{StateWindow, WindowLimits};
use gigas_primitives::machine::Machine;
use gigas_statedb::{StateDb, StateDbOptions, WriterOptions};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::execute::{ExecutionFigures, Reexecutor};
use super::{
    DurabilityArg, FullnodeArgs, FullnodeConfig, FullnodeReport, Manifest, ModeKind, ModeSummary,
    PageCache, TARGET_BATCHED, TARGET_LIVE,
};

/// A trie cache budget for labels.
/// Where a live mode's roots run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RootArg {
    /// Inside the write transaction, on the writer's thread (before issue 30's fourth step).
    InTxn,
    /// Over the last commit and the group in memory, on this many threads (0: one per core).
    Layered(usize),
}

impl std::str::FromStr for RootArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "txn" => Ok(Self::InTxn),
            "all" => Ok(Self::Layered(0)),
            n => n
                .parse()
                .map(Self::Layered)
                .map_err(|_| format!("`{n}`: expected `txn`, `all` or a number of threads")),
        }
    }
}

impl RootArg {
    fn label(self) -> String {
        match self {
            Self::InTxn => "root in the transaction".into(),
            Self::Layered(0) => "layered root on all cores".into(),
            Self::Layered(1) => "layered root on 1 thread".into(),
            Self::Layered(n) => format!("layered root on {n} threads"),
        }
    }

    fn short(self) -> String {
        match self {
            Self::InTxn => "txn".into(),
            Self::Layered(0) => "all".into(),
            Self::Layered(n) => format!("t{n}"),
        }
    }
}

fn cache_label(bytes: u64) -> String {
    if bytes == 0 {
        "no trie cache".into()
    } else {
        format!("trie cache {} MiB", bytes >> 20)
    }
}

/// A mode of applying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Mode {
    /// No root while applying, a commit every `group` blocks, one root at the end.
    Batched {
        /// Blocks per commit.
        group: u64,
        /// How commits reach the disk.
        sync: DurabilityArg,
        /// MDBX's write map ([`StateDbOptions::write_map`]).
        write_map: bool,
        /// How long freed memory stays with the process, in ms
        /// ([`gigas_fullnode::alloc::set_purge_delay`]).
        purge_delay_ms: i64,
    },
    /// Root every block, a commit every `group` blocks (1: every block, the "live").
    Live {
        /// How commits reach the disk.
        sync: DurabilityArg,
        /// Blocks per commit.
        group: u64,
        /// The writer's trie cache budget in bytes (0: off).
        trie_cache: u64,
        /// The in-memory account trie's budget in bytes (0: off).
        sparse_trie: u64,
        /// Where the roots run.
        root: RootArg,
        /// A prefetch thread reads each block's pages ahead (`gigas_fullnode::prefetch`).
        prefetch: bool,
        /// Roots run while the next blocks are written
        /// ([`WriterOptions::overlap_roots`]).
        overlap: bool,
        /// Groups commit on the commit thread while the next blocks are applied
        /// ([`WriterOptions::commit_thread`]).
        commit_thread: bool,
        /// MDBX's write map ([`StateDbOptions::write_map`]).
        write_map: bool,
        /// How long freed memory stays with the process, in ms
        /// ([`gigas_fullnode::alloc::set_purge_delay`]).
        purge_delay_ms: i64,
    },
}

impl Mode {
    /// Which kind.
    pub fn kind(&self) -> ModeKind {
        match self {
            Self::Batched { .. } => ModeKind::Batched,
            Self::Live { .. } => ModeKind::Live,
        }
    }

    /// How its commits reach the disk.
    pub fn sync(&self) -> DurabilityArg {
        match *self {
            Self::Batched { sync, .. } | Self::Live { sync, .. } => sync,
        }
    }

    /// Whether the run's database uses MDBX's write map.
    pub fn write_map(&self) -> bool {
        match *self {
            Self::Batched { write_map, .. } | Self::Live { write_map, .. } => write_map,
        }
    }

    /// How long freed memory stays with the process during the run, in ms.
    pub fn purge_delay_ms(&self) -> i64 {
        match *self {
            Self::Batched { purge_delay_ms, .. } | Self::Live { purge_delay_ms, .. } => {
                purge_delay_ms
            }
        }
    }

    /// A label for tables.
    pub fn label(&self) -> String {
        let (kind, mut parts) = match *self {
            Self::Batched { group, .. } => {
                ("batched", vec![format!("commit every {group} blocks")])
            }
            Self::Live { group: 1, .. } => ("live", vec!["root and commit every block".into()]),
            Self::Live { group, .. } => (
                "live",
                vec![format!("root every block, commit every {group} blocks")],
            ),
        };
        parts.push(self.sync().name().into());
        if let Self::Live {
            trie_cache,
            sparse_trie,
            root,
            prefetch,
            overlap,
            commit_thread,
            ..
        } = *self
        {
            parts.push(cache_label(trie_cache));
            if sparse_trie > 0 {
                parts.push(format!(
                    "account trie in memory ({} MiB)",
                    sparse_trie >> 20
                ));
            }
            parts.push(root.label());
            if overlap {
                parts.push("roots overlap the next blocks".into());
            }
            if commit_thread {
                parts.push("commits on their own thread".into());
            }
            if prefetch {
                parts.push("prefetch".into());
            }
        }
        if self.write_map() {
            parts.push("write map".into());
        }
        if self.purge_delay_ms() != gigas_fullnode::alloc::DEFAULT_PURGE_DELAY_MS {
            parts.push(format!("freed memory kept {} ms", self.purge_delay_ms()));
        }
        format!("{kind} ({})", parts.join(", "))
    }

    /// A short name for files and directories.
    pub fn short(&self) -> String {
        let mut short = match *self {
            Self::Batched { group, sync, .. } => format!("batched-{group}-{}", sync.name()),
            Self::Live {
                sync,
                group,
                trie_cache,
                sparse_trie,
                root,
                prefetch,
                overlap,
                commit_thread,
                ..
            } => format!(
                "live-{}{}-tc{}{}-{}{}{}{}",
                if group == 1 {
                    String::new()
                } else {
                    format!("{group}-")
                },
                sync.name(),
                trie_cache >> 20,
                if sparse_trie > 0 {
                    format!("-sp{}", sparse_trie >> 20)
                } else {
                    String::new()
                },
                root.short(),
                if overlap { "-ov" } else { "" },
                if commit_thread { "-ct" } else { "" },
                if prefetch { "-pf" } else { "" }
            ),
        };
        if self.write_map() {
            short.push_str("-wm");
        }
        if self.purge_delay_ms() != gigas_fullnode::alloc::DEFAULT_PURGE_DELAY_MS {
            short.push_str(&format!("-pd{}", self.purge_delay_ms()));
        }
        short
    }

    /// The writer's options for this mode.
    pub fn writer_options(&self) -> WriterOptions {
        match *self {
            // Count-bound only: a replay runs faster than real time, so the node's age bound
            // (for a follower waiting on the next block) would cut groups by wall time.
            Self::Batched { group, .. } => WriterOptions {
                root_every: 0,
                max_group_blocks: group,
                max_group_age: Duration::from_secs(24 * 3600),
                ..WriterOptions::default()
            },
            Self::Live {
                group,
                trie_cache,
                sparse_trie,
                root,
                overlap,
                commit_thread,
                ..
            } => WriterOptions {
                sparse_trie_bytes: usize::try_from(sparse_trie).unwrap_or(usize::MAX),
                root_every: 1,
                max_group_blocks: group,
                max_group_age: Duration::from_secs(24 * 3600),
                trie_cache_bytes: usize::try_from(trie_cache).unwrap_or(usize::MAX),
                layered_roots: root != RootArg::InTxn,
                root_threads: match root {
                    RootArg::InTxn => 1,
                    RootArg::Layered(n) => n,
                },
                overlap_roots: overlap,
                commit_thread,
                ..WriterOptions::default()
            },
        }
    }

    /// The target in state changes per second.
    pub fn target(&self) -> f64 {
        match self {
            Self::Batched { .. } => TARGET_BATCHED,
            Self::Live { .. } => TARGET_LIVE,
        }
    }
}

fn layout_v1() -> u32 {
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

fn spinner(quiet: bool, message: String) -> ProgressBar {
    if quiet {
        println!("{message}");
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Bytes the files directly in `dir` occupy on disk (blocks allocated).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.blocks() * 512)
            .sum()
    })
}

fn used_bytes(db: &StateDb) -> u64 {
    db.refresh_size_metrics();
    u64::try_from(db.metrics().used_bytes.get()).unwrap_or(0)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The genesis database of the recording's chain: cached under `cache`, written with
/// `gigas_fullnode::genesis::initialize` when missing (or with `fresh`).
pub(super) fn ensure_genesis_db(
    recording: &Manifest,
    cache: &Path,
    page_size: Option<usize>,
    fresh: bool,
    quiet: bool,
) -> Result<GenesisInfo> {
    let chain = recording.load_chain()?;
    // Suffixes only off the defaults, so that older caches keep their names.
    let root = cache.join(format!(
        "genesis-db-{}-{}-gas{}{}{}",
        recording.accounts,
        recording.seed,
        recording.gas_limit,
        if recording.workload == crate::load::Workload::Transfers {
            ""
        } else {
            "-erc20"
        },
        page_size.map_or_else(String::new, |p| format!("-page{p}"))
    ));
    let info_path = root.join("genesis.json");
    if !fresh && info_path.is_file() {
        let cached = std::fs::read_to_string(&info_path)
            .ok()
            .and_then(|t| serde_json::from_str::<GenesisInfo>(&t).ok());
        match cached {
            Some(mut info)
                if info.chain_fingerprint == recording.chain_fingerprint
                    && info.layout_version == gigas_statedb::SCHEMA_VERSION =>
            {
                info.dir = root.join("db");
                println!(
                    "genesis database {} ({} accounts, {:.2} GB on disk; written in {:.1} s)",
                    info.dir.display(),
                    info.accounts,
                    info.disk_bytes as f64 / 1e9,
                    info.seconds
                );
                return Ok(info);
            }
            _ => eprintln!(
                "{}: not this chain's genesis or not this build's layout; writing it again",
                root.display()
            ),
        }
    }
    if root.exists() {
        std::fs::remove_dir_all(&root).wrap_err_with(|| format!("clearing {}", root.display()))?;
    }
    let db_dir = root.join("db");
    std::fs::create_dir_all(&db_dir).wrap_err_with(|| format!("creating {}", db_dir.display()))?;
    let diff0 = std::fs::read(recording.diff_path(0)).wrap_err("reading the recording's diff 0")?;
    let bar = spinner(
        quiet,
        format!(
            "writing the genesis of {} accounts into {} (gigas_fullnode::genesis::initialize)",
            recording.accounts,
            db_dir.display()
        ),
    );
    reset_peak_rss();
    let started = Instant::now();
    let db = StateDb::open(
        &db_dir,
        StateDbOptions {
            page_size,
            ..StateDbOptions::default()
        },
    )?;
    let (_, outcome) = gigas_fullnode::genesis::initialize(&db, &chain, &diff0)
        .map_err(|e| eyre!("writing the genesis: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let used = used_bytes(&db);
    drop(db);
    let info = GenesisInfo {
        chain_fingerprint: recording.chain_fingerprint.clone(),
        layout_version: gigas_statedb::SCHEMA_VERSION,
        seconds,
        accounts: outcome.accounts,
        slots: outcome.slots,
        state_root: outcome.state_root.to_string(),
        disk_bytes: disk_bytes(&db_dir),
        used_bytes: used,
        peak_rss_bytes: ProcessMemory::read().map(|m| m.peak),
        built_at: unix_now(),
        built_now: true,
        copy_seconds: 0.0,
        dir: db_dir,
    };
    println!(
        "genesis written in {seconds:.1} s: {} accounts, root {}, {:.2} GB on disk",
        info.accounts,
        info.state_root,
        info.disk_bytes as f64 / 1e9
    );
    std::fs::write(&info_path, serde_json::to_string_pretty(&info)?)
        .wrap_err_with(|| format!("writing {}", info_path.display()))?;
    Ok(info)
}

/// Copies the database files of `from` into a new `to` and syncs them, so that no write-back
/// of the copy lands in the measured run, then leaves the copy in the page cache as `cache`
/// says. The lock file is left for MDBX to create.
fn copy_db(from: &Path, to: &Path, cache: PageCache) -> Result<f64> {
    let started = Instant::now();
    std::fs::create_dir_all(to).wrap_err_with(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).wrap_err_with(|| format!("listing {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".lck") || !entry.file_type()?.is_file() {
            continue;
        }
        let target = to.join(&name);
        copy_sparse(&entry.path(), &target).wrap_err_with(|| {
            format!("copying {} to {}", entry.path().display(), target.display())
        })?;
        std::fs::File::open(&target)
            .and_then(|f| f.sync_all())
            .wrap_err_with(|| format!("syncing {}", target.display()))?;
        if cache != PageCache::Copy {
            recache(&target, cache == PageCache::Warm)
                .wrap_err_with(|| format!("evicting {} from the page cache", target.display()))?;
        }
    }
    std::fs::File::open(to)
        .and_then(|f| f.sync_all())
        .wrap_err_with(|| format!("syncing {}", to.display()))?;
    Ok(started.elapsed().as_secs_f64())
}

/// Evicts the (synced, so clean) pages of `path` from the page cache, then with `warm` reads
/// them back 4 KiB at a time with readahead off, so that the cache holds the file in base
/// pages, as MDBX's own page faults (readahead off) would have left it. A copy's buffered
/// writes leave it in large folios (ext4 on Linux 6.16 and later), and a 4 KiB write through
/// MDBX's map then dirties, and the commit's sync writes back, a whole folio.
fn recache(path: &Path, warm: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let fd = file.as_raw_fd();
    // SAFETY: fadvise on a descriptor this function owns.
    let rc = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    if !warm {
        return Ok(());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    let len = i64::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
    let mut page = vec![0u8; 4096];
    let mut pos = 0i64;
    while pos < len {
        // SAFETY: lseek on a descriptor this function owns.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut at = data as u64;
        while at < hole as u64 {
            if file.read_at(&mut page, at)? == 0 {
                break;
            }
            at += page.len() as u64;
        }
        pos = hole;
    }
    Ok(())
}

/// Copies `from` to `to` keeping its holes: MDBX grows its file in large sparse steps, and a
/// plain copy would write the unused tail as zeros (up to a growth step, 1 GiB, per run).
fn copy_sparse(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let src = std::fs::File::open(from)?;
    let len = i64::try_from(src.metadata()?.len()).map_err(std::io::Error::other)?;
    let dst = std::fs::File::create(to)?;
    dst.set_len(len as u64)?;
    let (s, d) = (src.as_raw_fd(), dst.as_raw_fd());
    let mut pos = 0i64;
    while pos < len {
        // SAFETY: lseek on a file descriptor this function owns.
        let data = unsafe { libc::lseek(s, pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // only a hole is left
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(s, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (mut off_in, mut off_out) = (data, data);
        while off_in < hole {
            let want = usize::try_from(hole - off_in).unwrap_or(usize::MAX);
            // SAFETY: both descriptors are open; the offsets are ours.
            let n = unsafe { libc::copy_file_range(s, &mut off_in, d, &mut off_out, want, 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                break;
            }
        }
        pos = hole;
    }
    Ok(())
}

/// The filesystem `path` is on, from /proc/mounts: "ext4 on /dev/vda (mounted at /)".
fn filesystem_of(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (device, point, kind) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(point)
                .then_some((point.len(), device, point, kind))
        })
        .max_by_key(|m| m.0)
        .map_or("unknown filesystem".into(), |(_, device, point, kind)| {
            format!("{kind} on {device} (mounted at {point})")
        })
}

/// Peak resident memory is reset (`/proc/self/clear_refs`, 5), so each run reports its own.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// CPU seconds, major faults, storage bytes read and written of this process.
#[derive(Debug, Clone, Copy, Default)]
struct Resources {
    cpu: f64,
    major_faults: u64,
    read_bytes: u64,
    write_bytes: u64,
}

impl Resources {
    fn sample() -> Self {
        // SAFETY: getrusage fills the struct it is given; zeroed is a valid rusage.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a rusage for RUSAGE_SELF.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let io_field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Self {
            cpu: if ok {
                seconds(usage.ru_utime) + seconds(usage.ru_stime)
            } else {
                0.0
            },
            major_faults: if ok {
                u64::try_from(usage.ru_majflt).unwrap_or(0)
            } else {
                0
            },
            read_bytes: io_field("read_bytes:"),
            write_bytes: io_field("write_bytes:"),
        }
    }
}

/// The split of `t` over `seconds` of applying, with the re-execution's seconds as `execute`
/// (with `--verify-execution`) and what the phases do not account for as `other`.
fn split(t: &ApplyTimings, execute: Option<f64>, seconds: f64) -> Vec<Phase> {
    let changes = t.changes.max(1) as f64;
    let phase = |name, s: f64| Phase {
        name,
        seconds: s,
        share: if seconds > 0.0 { s / seconds } else { 0.0 },
        us_per_change: s / changes * 1e6,
    };
    let mut phases: Vec<Phase> = execute
        .map(|s| phase("execute", s))
        .into_iter()
        .chain(t.phases().iter().map(|&(n, s)| phase(n, s)))
        .collect();
    phases.push(phase(
        "other",
        (seconds - t.total() - execute.unwrap_or(0.0)).max(0.0),
    ));
    phases
}

/// Where block `n` (from 1) is in the preloaded vectors; past their end for block 0.
fn preload_index(n: u64) -> usize {
    usize::try_from(n.wrapping_sub(1)).unwrap_or(usize::MAX)
}

/// What `--verify-execution` re-executes: the recording's block files and the diffs' headers,
/// preloaded like the diffs.
struct ToExecute {
    spec: gigas_primitives::ChainSpec,
    /// Block files `1..=last`, index `n - 1`.
    blocks: Vec<Vec<u8>>,
    /// The headers of diffs `1..=last`, index `n - 1`.
    headers: Vec<alloy_consensus::Header>,
}

/// What one run needs beside its mode.
struct Replay<'a> {
    args: &'a FullnodeArgs,
    recording: &'a Manifest,
    sequencer: alloy_primitives::Address,
    /// Diffs `1..=last`, index `n - 1`.
    diffs: Vec<Vec<u8>>,
    /// With `--verify-execution`.
    execute: Option<ToExecute>,
    genesis: &'a GenesisInfo,
    scratch: &'a Path,
    options: StateDbOptions,
}

impl Replay<'_> {
    /// Diff `n` of the recording.
    fn diff(&self, n: u64) -> Result<&[u8]> {
        self.diffs
            .get(preload_index(n))
            .map(Vec::as_slice)
            .ok_or_else(|| eyre!("the recording has no diff {n}"))
    }

    /// Applies block `n`; with `--verify-execution`, re-executes it first over the state
    /// before it (see `execute`'s module doc for why before the diff's verification). Then,
    /// as the node does, logs it and records it for reads before its commit (`serving`: live
    /// modes).
    fn step(
        &self,
        applier: &mut Applier<'_>,
        reexecutor: Option<&mut Reexecutor>,
        serving: Option<&mut AheadServing>,
        n: u64,
    ) -> Result<gigas_fullnode::apply::AppliedBlock> {
        let bytes = self.diff(n)?;
        let expected = match (reexecutor, &self.execute) {
            (Some(r), Some(x)) => {
                let i = preload_index(n);
                let (Some(header), Some(block)) = (x.headers.get(i), x.blocks.get(i)) else {
                    bail!("the recording has no block file {n}");
                };
                Some((r.execute(applier.writer(), header, block)?, r))
            }
            _ => None,
        };
        let verified = applier
            .verify(bytes)
            .wrap_err_with(|| format!("verifying block {n}"))?;
        if let Some((got, r)) = expected {
            r.compare(n, &verified.changes, &got)?;
        }
        let applied = applier
            .write(&verified)
            .wrap_err_with(|| format!("writing block {n}"))?;
        if let Some(serving) = serving {
            serving
                .applied(bytes, &verified, &applied)
                .wrap_err_with(|| format!("logging block {n}"))?;
        }
        Ok(applied)
    }

    fn run(
        &self,
        round: usize,
        mode: Mode,
        limit: Option<u64>,
        check_root: bool,
    ) -> Result<RunResult> {
        let dir = self.scratch.join(format!(
            "run-{}-{round}-{}",
            std::process::id(),
            mode.short()
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .wrap_err_with(|| format!("clearing {}", dir.display()))?;
        }
        let result = self.run_in(&dir, round, mode, limit, check_root);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            eprintln!("could not remove {}: {e}", dir.display());
        }
        result
    }

    fn run_in(
        &self,
        dir: &Path,
        round: usize,
        mode: Mode,
        limit: Option<u64>,
        check_root: bool,
    ) -> Result<RunResult> {
        let m = self.recording;
        // Under a limit the copy leaves nothing in the page cache: a page read back here
        // would stay charged to this process's current cgroup, not to the run's.
        let cache = if limit.is_some() {
            PageCache::Cold
        } else {
            self.args.page_cache
        };
        let copy_seconds = copy_db(&self.genesis.dir, dir, cache)?;
        // As the node sets it at start; for the run only in effect from here on.
        gigas_fullnode::alloc::set_purge_delay(mode.purge_delay_ms());
        // Entered before the database opens, so that every page the map faults in is charged
        // to the limited cgroup; left (and removed) when `limited` drops.
        let limited = match limit {
            Some(bytes) => Some(super::limit::Limited::enter(
                &format!("bench-{}-{round}", mode.short()),
                bytes,
            )?),
            None => None,
        };
        // The bounds the node's `auto` gives under the run's limit (gigas_fullnode::memory).
        let options = StateDbOptions {
            durability: mode.sync().to_statedb(),
            write_map: mode.write_map(),
            max_dirty_bytes: self.args.max_dirty.resolve(limit, memory::auto_dirty_bytes),
            ..self.options.clone()
        };
        let writer_options = WriterOptions {
            max_group_bytes: self
                .args
                .commit_bytes
                .resolve(limit, memory::auto_group_bytes)
                .max(1),
            ..mode.writer_options()
        };
        let every_commit = options.durability.every_commit();
        let db = StateDb::open(dir, options)?;
        let mut applier = Applier::new(&db, writer_options, self.sequencer)?;
        // Live modes pay what the node pays to serve each block before its group commits:
        // the applied-block log and the redo records (the node's `gigas_fullnode::ahead`).
        let mut serving = match mode.kind() {
            ModeKind::Live => {
                let (log, _) = AppliedLog::open(&dir.join(gigas_fullnode::wal::FILE_NAME))?;
                let window = Arc::new(StateWindow::new(WindowLimits {
                    blocks: 0,
                    max_bytes: 0,
                }));
                Some(AheadServing::new(log, window, every_commit)?)
            }
            ModeKind::Batched => None,
        };

        let mut reexecutor = self
            .execute
            .as_ref()
            .map(|x| Reexecutor::new(x.spec.clone()));
        // The empty blocks before the load, outside the clock.
        for n in 1..m.first_loaded {
            self.step(&mut applier, reexecutor.as_mut(), serving.as_mut(), n)?;
            if applier.should_commit() {
                commit(&mut applier, &mut serving)?;
            }
        }
        commit(&mut applier, &mut serving)?;
        // Warm-up: the first loaded blocks, applied and committed outside the clock, bring
        // the workload's hot accounts into the page cache as a node that has been running
        // would have them.
        let warmup = self
            .args
            .warmup_blocks
            .min(m.loaded_blocks.saturating_sub(1));
        let first_timed = m.first_loaded + warmup;
        let mut first_block = None;
        for n in m.first_loaded..first_timed {
            let start = Instant::now();
            let applied = self
                .step(&mut applier, reexecutor.as_mut(), serving.as_mut(), n)
                .wrap_err("a warm-up block")?;
            if n == m.first_loaded {
                // Its root may still run: the block costs a restart that too.
                applier.finish_root()?;
                first_block = Some(FirstBlockFigures {
                    changes: applied.changes,
                    seconds: start.elapsed().as_secs_f64(),
                });
            }
            if applier.should_commit() {
                commit(&mut applier, &mut serving)?;
            }
        }
        commit(&mut applier, &mut serving)?;
        // What the warm-up left unsynced is not the timed blocks' to write.
        applier.sync()?;
        applier.reset_timings();
        if let Some(r) = reexecutor.as_mut() {
            r.reset();
        }

        let bar = if self.args.quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(m.last + 1 - first_timed);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} blocks {per_sec} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(format!(
                "round {round}, {}{}",
                mode.short(),
                limit.map_or_else(String::new, |l| format!(" under {}", limit_label(Some(l))))
            ));
            bar
        };
        let (mut commits, mut mdbx_commit) = (0u64, 0.0);
        let (mut syncs, mut sync_seconds) = (0u64, 0.0);
        let mut tally = RootTally::default();
        // Returns the root the commit waited for, to be counted with the others.
        let mut count_commit = |info: Option<gigas_statedb::CommitInfo>| {
            let info = info?;
            commits += 1;
            mdbx_commit += info.commit_seconds;
            if info.sync_seconds > 0.0 {
                syncs += 1;
                sync_seconds += info.sync_seconds;
            }
            info.root
        };
        reset_peak_rss();
        let before = Resources::sample();
        let faults_before = limited.as_ref().map(|l| l.major_faults()).transpose()?;
        // The node's prefetch stage: a thread reading each timed block's pages a few blocks
        // ahead of the writer (the diffs are in memory, as the fetcher's queue holds them).
        let prefetch = matches!(mode, Mode::Live { prefetch: true, .. });
        let ahead: Vec<&[u8]> = if prefetch {
            (first_timed..=m.last)
                .map(|n| self.diff(n))
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let (db_ref, sequencer) = (&db, self.sequencer);
        let started = Instant::now();
        let mut complete = true;
        std::thread::scope(|scope| -> Result<()> {
            let ready = prefetch.then(|| {
                let (tx, rx) =
                    std::sync::mpsc::sync_channel::<()>(gigas_fullnode::prefetch::AHEAD_BLOCKS);
                scope.spawn(move || {
                    for bytes in ahead {
                        // A diff it cannot read is the writer's to report.
                        let _ = gigas_fullnode::prefetch::warm_diff(db_ref, sequencer, bytes);
                        if tx.send(()).is_err() {
                            return;
                        }
                    }
                });
                rx
            });
            for n in first_timed..=m.last {
                if self
                    .args
                    .max_run_time
                    .is_some_and(|max| started.elapsed() >= max)
                {
                    complete = false;
                    break;
                }
                if let Some(ready) = &ready {
                    // Ends early only if the thread is gone, which the writer then runs without.
                    let _ = ready.recv();
                }
                let applied = self.step(&mut applier, reexecutor.as_mut(), serving.as_mut(), n)?;
                tally.add(applied.root);
                landed(&mut applier, &mut serving)?;
                if applier.should_commit() {
                    tally.add(count_commit(start_commit(&mut applier, &mut serving)?));
                }
                bar.inc(1);
            }
            // The prefetch thread, if still sending, stops at its next send.
            drop(ready);
            Ok(())
        })?;
        tally.add(count_commit(commit(&mut applier, &mut serving)?));
        // Every mode ends durable, in its clock: a periodic run pays for its last durable
        // point as the durable run paid for each commit's.
        if let Some(took) = applier.sync()? {
            syncs += 1;
            sync_seconds += took.as_secs_f64();
        }
        let seconds = started.elapsed().as_secs_f64();
        let after = Resources::sample();
        let cgroup = match (&limited, faults_before) {
            (Some(l), Some(before)) => Some(l.figures(before)?),
            _ => None,
        };
        let peak_rss_bytes = ProcessMemory::read().map(|m| m.peak);
        bar.finish_and_clear();
        let timings = *applier.timings();
        let trie_cache = match mode {
            Mode::Live { trie_cache, .. } => {
                let stats = applier.writer().trie_cache_stats();
                Some(TrieCacheFigures {
                    budget_bytes: trie_cache,
                    bytes: stats.bytes,
                    entries: stats.entries,
                    hits: stats.hits,
                    misses: stats.misses,
                    evicted: stats.evicted,
                })
            }
            Mode::Batched { .. } => None,
        };
        let sparse_trie = match mode {
            Mode::Live { sparse_trie, .. } if sparse_trie > 0 => {
                let stats = applier.writer().sparse_trie_stats();
                Some(SparseTrieFigures {
                    budget_bytes: sparse_trie,
                    bytes: stats.bytes,
                    nodes: stats.nodes,
                    pruned: stats.pruned,
                    loaded_leaves: stats.loaded_leaves,
                })
            }
            _ => None,
        };
        let execution = reexecutor.as_ref().map(Reexecutor::figures);

        let (final_root, final_root_seconds, final_root_commit_seconds) = match mode {
            // A stopped run's root is of another block: not computed (it would read the
            // whole state, and under a small limit take long).
            _ if !complete => (alloy_primitives::B256::ZERO, None, None),
            Mode::Batched { .. } => {
                let root = applier.compute_root()?;
                let t = Instant::now();
                applier.commit()?;
                (
                    root.root,
                    Some(root.seconds),
                    Some(t.elapsed().as_secs_f64()),
                )
            }
            Mode::Live { .. } => (
                tally
                    .last
                    .map(|(_, root)| root)
                    .ok_or_else(|| eyre!("the live mode computed no root"))?,
                None,
                None,
            ),
        };
        let memory = ProcessMemory::read();
        let rss_anon_bytes = memory.map(|m| m.anon);
        let rss_file_bytes = memory.map(|m| m.file);
        drop(applier);

        let head = db.head()?;
        let head_matches = !complete
            || head.is_some_and(|h| h.number == m.last && h.hash.to_string() == m.last_hash);
        let (root_from_scratch, root_from_scratch_seconds) = if check_root && complete {
            let t = Instant::now();
            let root = db.view()?.state_root_from_scratch()?;
            (Some(root.to_string()), Some(t.elapsed().as_secs_f64()))
        } else {
            (None, None)
        };
        let db_used_bytes = used_bytes(&db);
        drop(db);
        drop(limited);
        let db_disk_bytes = disk_bytes(dir);

        let transfers = timings.gas_used as f64 / 21_000.0;
        let per_second = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
        Ok(RunResult {
            round,
            mode,
            label: run_label(mode, limit),
            copy_seconds,
            seconds,
            blocks: timings.blocks,
            changes: timings.changes,
            gas_used: timings.gas_used,
            changes_per_second: per_second(timings.changes as f64),
            transfers_per_second: per_second(transfers),
            blocks_per_second: per_second(timings.blocks as f64),
            split: split(&timings, execution.as_ref().map(|e| e.seconds), seconds),
            execution,
            trie_cache,
            sparse_trie,
            first_block,
            commits,
            mdbx_commit_seconds: mdbx_commit,
            syncs,
            sync_seconds,
            roots: tally.roots,
            root_leaves: tally.leaves,
            root_changed_accounts: tally.changed_accounts,
            root_remembered: tally.remembered,
            root_rereads: tally.rereads,
            final_root: final_root.to_string(),
            final_root_seconds,
            final_root_commit_seconds,
            head_matches,
            root_from_scratch,
            root_from_scratch_seconds,
            cpu_seconds: after.cpu - before.cpu,
            major_faults: after.major_faults.saturating_sub(before.major_faults),
            read_bytes: after.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: after.write_bytes.saturating_sub(before.write_bytes),
            db_used_bytes,
            db_disk_bytes,
            peak_rss_bytes,
            rss_anon_bytes,
            rss_file_bytes,
            memory_limit_bytes: limit,
            cgroup,
            complete,
            warmup_blocks: warmup,
        })
    }
}

/// Every round of every mode, then the summary.
pub(super) fn run_all(
    args: &FullnodeArgs,
    modes: &[Mode],
    limits: &[Option<u64>],
    recording: &Manifest,
    mut genesis: GenesisInfo,
    scratch: &Path,
) -> Result<FullnodeReport> {
    std::fs::create_dir_all(scratch).wrap_err_with(|| format!("creating {}", scratch.display()))?;
    let chain = recording.load_chain()?;
    let sequencer = gigas_fullnode::genesis::sequencer_address(&chain)
        .map_err(|e| eyre!("the recording's chain: {e}"))?;
    // Each run sets the durability of its mode.
    let options = StateDbOptions {
        page_size: args.page_size,
        readahead: args.readahead,
        ..StateDbOptions::default()
    };
    let machine = Machine::current();
    let config = FullnodeConfig {
        accounts: recording.accounts,
        seed: recording.seed,
        recording: format!(
            "{}: {} {} offered at {} tx/s to gigas-sequencer (block time {} ms, gas limit {}, draws seeded {}), blocks {}..={} ({} blocks, {} transactions, {:.1} MB of diffs, {:.0} B per transaction); recorded at {}",
            recording.dir.display(),
            crate::load::distribution_label(recording.distribution),
            match recording.workload {
                crate::load::Workload::Transfers => "ETH transfers",
                crate::load::Workload::Erc20 => "WETH9 transfers",
                crate::load::Workload::Mix => "ETH and WETH9 transfers",
            },
            recording.rate,
            recording.block_time_ms,
            recording.gas_limit,
            recording.workload_seed,
            recording.first_loaded,
            recording.last,
            recording.loaded_blocks,
            recording.transactions,
            recording.diff_bytes as f64 / 1e6,
            recording.diff_bytes as f64 / recording.transactions.max(1) as f64,
            recording.source
        ),
        modes: modes.iter().map(Mode::label).collect(),
        runs: args.runs,
        statedb_options: format!(
            "{options:?}; writer: hashed writes {:?}",
            WriterOptions::default().hashed_writes
        ),
        scratch: format!(
            "{} ({}); each run into a fresh copy of the genesis database, copied and synced before the clock starts; page cache: {}",
            scratch.display(),
            filesystem_of(scratch),
            args.page_cache.describe()
        ),
        source: gigas_primitives::machine::source_revision(),
    };
    print_config(&config, &machine, &genesis);

    let started = Instant::now();
    let mut diffs = Vec::with_capacity(recording.last as usize);
    for n in 1..=recording.last {
        let path = recording.diff_path(n);
        diffs.push(std::fs::read(&path).wrap_err_with(|| format!("reading {}", path.display()))?);
    }
    println!(
        "preloaded diffs 1..={} ({:.1} MB) into memory in {:.1} s: the clock measures applying, not reading the recording",
        recording.last,
        recording.diff_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let execute = if args.verify_execution {
        Some(preload_execution(recording, &diffs, chain.spec())?)
    } else {
        None
    };
    let replay = Replay {
        args,
        recording,
        sequencer,
        diffs,
        execute,
        genesis: &genesis,
        scratch,
        options,
    };
    let mut runs: Vec<RunResult> = Vec::new();
    let last_live_round = args.runs;
    let mut checked = false;
    for (i, &limit) in limits.iter().enumerate() {
        let modes = args.mode_list_for(limit);
        for round in 1..=args.runs {
            let order: Vec<Mode> = if round % 2 == 1 {
                modes.clone()
            } else {
                modes.iter().rev().copied().collect()
            };
            for mode in order {
                // The root from scratch reads the whole state: once, on the first limit's
                // last live run.
                let check = !args.no_root_check
                    && i == 0
                    && mode.kind() == ModeKind::Live
                    && round == last_live_round
                    && !checked;
                checked |= check;
                let run = replay
                    .run(round, mode, limit, check)
                    .wrap_err_with(|| format!("round {round}, {}", run_label(mode, limit)))?;
                print_run(&run);
                runs.push(run);
            }
        }
    }
    drop(replay);
    genesis.copy_seconds = crate::median(runs.iter().map(|r| r.copy_seconds).collect());

    let summary = summarize(args, limits, &runs);
    let heads_match = runs.iter().all(|r| r.head_matches);
    let complete: Vec<&RunResult> = runs.iter().filter(|r| r.complete).collect();
    let roots_agree = complete
        .windows(2)
        .all(|w| w[0].final_root == w[1].final_root);
    let live_root_from_scratch_matches = runs
        .iter()
        .find_map(|r| r.root_from_scratch.as_ref().map(|s| *s == r.final_root));
    if !heads_match {
        bail!(
            "a run did not end at the recording's last block {}",
            recording.last
        );
    }
    if !roots_agree {
        bail!(
            "the runs disagree on the final root: {:?}",
            runs.iter()
                .map(|r| (&r.label, &r.final_root))
                .collect::<Vec<_>>()
        );
    }
    if live_root_from_scratch_matches == Some(false) {
        bail!("the live root differs from the root recomputed from scratch");
    }
    Ok(FullnodeReport {
        config,
        machine,
        build_profile: crate::build_profile(),
        recording: recording.clone(),
        genesis,
        runs,
        summary,
        heads_match,
        roots_agree,
        live_root_from_scratch_matches,
    })
}

/// The block files and the diffs' headers of `--verify-execution`, read before any clock.
fn preload_execution(
    recording: &Manifest,
    diffs: &[Vec<u8>],
    spec: gigas_primitives::ChainSpec,
) -> Result<ToExecute> {
    if !recording.blocks {
        bail!(
            "{} holds no block files to re-execute; record again (--rerecord)",
            recording.dir.display()
        );
    }
    let started = Instant::now();
    let mut blocks = Vec::with_capacity(diffs.len());
    let mut headers = Vec::with_capacity(diffs.len());
    for (i, bytes) in diffs.iter().enumerate() {
        let n = i as u64 + 1;
        let path = recording.block_path(n);
        blocks.push(std::fs::read(&path).wrap_err_with(|| format!("reading {}", path.display()))?);
        headers.push(
            gigas_statediff::DiffFile::decode(bytes)
                .wrap_err_with(|| format!("decoding diff {n}"))?
                .header,
        );
    }
    println!(
        "preloaded block files 1..={} ({:.1} MB) for --verify-execution in {:.1} s",
        recording.last,
        recording.block_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(ToExecute {
        spec,
        blocks,
        headers,
    })
}

/// How a memory limit reads in labels: `512 MiB`, `8 GiB`, `no limit`.
pub fn limit_label(limit: Option<u64>) -> String {
    match limit {
        None => "no limit".to_string(),
        Some(b) if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        Some(b) if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        Some(b) => format!("{} MiB", b >> 20),
    }
}

/// A run's label: the mode's, with the limit when there is one.
fn run_label(mode: Mode, limit: Option<u64>) -> String {
    match limit {
        None => mode.label(),
        Some(_) => format!("{}, under {}", mode.label(), limit_label(limit)),
    }
}

fn summarize(args: &FullnodeArgs, limits: &[Option<u64>], runs: &[RunResult]) -> Vec<ModeSummary> {
    limits
        .iter()
        .flat_map(|&limit| {
            args.mode_list_for(limit)
                .into_iter()
                .map(move |mode| (mode, limit))
        })
        .filter_map(|(mode, limit)| {
            let of: Vec<(usize, &RunResult)> = runs
                .iter()
                .enumerate()
                .filter(|(_, r)| r.mode == mode && r.memory_limit_bytes == limit)
                .collect();
            let rates: Vec<f64> = of.iter().map(|(_, r)| r.changes_per_second).collect();
            let median = crate::median(rates.clone());
            // The run closest to the median, whose split is shown.
            let (median_run, _) = of.iter().min_by(|a, b| {
                (a.1.changes_per_second - median)
                    .abs()
                    .total_cmp(&(b.1.changes_per_second - median).abs())
            })?;
            Some(ModeSummary {
                mode,
                label: run_label(mode, limit),
                memory_limit_bytes: limit,
                runs: of.len(),
                changes_per_second: median,
                changes_per_second_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
                changes_per_second_max: rates.iter().copied().fold(0.0, f64::max),
                transfers_per_second: crate::median(
                    of.iter().map(|(_, r)| r.transfers_per_second).collect(),
                ),
                blocks_per_second: crate::median(
                    of.iter().map(|(_, r)| r.blocks_per_second).collect(),
                ),
                target_changes_per_second: mode.target(),
                median_run: *median_run,
            })
        })
        .collect()
}

fn print_config(c: &FullnodeConfig, machine: &Machine, genesis: &GenesisInfo) {
    println!("gigas-bench fullnode configuration");
    println!("  state      : {} accounts of seed {}", c.accounts, c.seed);
    println!("  recording  : {}", c.recording);
    println!(
        "  genesis    : {} ({:.2} GB on disk; gigas_fullnode::genesis::initialize took {:.1} s{})",
        genesis.dir.display(),
        genesis.disk_bytes as f64 / 1e9,
        genesis.seconds,
        if genesis.built_now {
            ", this run"
        } else {
            ", cached"
        }
    );
    println!("  modes      : {}", c.modes.join("; "));
    println!("  rounds     : {} (modes alternated A B, B A, ...)", c.runs);
    println!("  statedb    : {}", c.statedb_options);
    println!("  scratch    : {}", c.scratch);
    println!("  apply path : gigas_fullnode::apply::Applier (verify, write, root, commit) and, live, gigas_fullnode::ahead (the applied-block log, redo records), as the node runs them");
    println!("  source     : {}", c.source);
    println!(
        "  build      : {}; machine: {}",
        crate::build_profile(),
        machine.describe()
    );
}

fn print_run(r: &RunResult) {
    let split: Vec<String> = r
        .split
        .iter()
        .map(|p| format!("{} {:.0}%", p.name, p.share * 100.0))
        .collect();
    println!(
        "round {} {}: {} blocks, {} changes in {:.2} s: {:.0} changes/s, {:.0} transfers/s, {:.1} blocks/s; {}{}{}",
        r.round,
        r.label,
        r.blocks,
        r.changes,
        r.seconds,
        r.changes_per_second,
        r.transfers_per_second,
        r.blocks_per_second,
        split.join(", "),
        match r.final_root_seconds {
            Some(s) => format!("; final root {s:.1} s"),
            None => String::new(),
        },
        match (&r.cgroup, r.complete) {
            (Some(c), complete) => format!(
                "; cgroup v{}: peak {:.0} MiB of {:.0} MiB, {} major faults{}",
                c.version,
                c.peak_bytes as f64 / 1048576.0,
                c.limit_bytes as f64 / 1048576.0,
                c.major_faults,
                if complete { "" } else { "; stopped by --max-run-time" }
            ),
            (None, false) => "; stopped by --max-run-time".to_string(),
            (None, true) => String::new(),
        }
    );
    if let Some(e) = &r.execution {
        println!(
            "  re-execution: {} blocks, {} transactions, {:.0} Mgas/s; EVM {:.2} s, state loading {:.2} s ({:.0}%), prepare {:.2} s, compare {:.2} s; misses: level 1 {:.1}% ({} reads of {} accesses), level 2 {:.1}% ({} reads with a major fault), {:.2}% to the disk; read {:.1} µs clean{}",
            e.blocks,
            e.transactions,
            e.gas_per_second / 1e6,
            e.evm_seconds,
            e.state_loading_seconds,
            e.state_loading_share * 100.0,
            e.prepare_seconds,
            e.compare_seconds,
            e.level1_miss_ratio * 100.0,
            e.reads,
            e.accesses,
            e.level2_miss_ratio * 100.0,
            e.faulting_reads,
            e.disk_ratio * 100.0,
            e.clean_read_us,
            match (e.faulting_read_us, e.miss_penalty_us) {
                (Some(f), Some(p)) => format!(", {f:.1} µs with a fault: miss penalty {p:.1} µs"),
                _ => String::new(),
            }
        );
    }
}

/// Commits the open group and, in a live mode, drops what served its blocks before the
/// commit (as the node's apply thread does).
/// The timed blocks' roots, added up.
#[derive(Debug, Default)]
struct RootTally {
    roots: u64,
    leaves: u64,
    changed_accounts: u64,
    remembered: u64,
    rereads: u64,
    /// The highest block seen and its root.
    last: Option<(u64, alloy_primitives::B256)>,
}

impl RootTally {
    fn add(&mut self, root: Option<gigas_statedb::RootInfo>) {
        let Some(root) = root else { return };
        self.roots += 1;
        self.leaves += root.leaves;
        self.changed_accounts += root.changed_accounts;
        self.remembered += root.remembered;
        self.rereads += root.rereads;
        self.last = self.last.max(Some((root.block, root.root)));
    }
}

/// Starts the group's commit, on the commit thread where the writer has one (as the node's
/// apply loop does), and lets the serving go of what landed.
fn start_commit(
    applier: &mut Applier<'_>,
    serving: &mut Option<AheadServing>,
) -> Result<Option<gigas_statedb::CommitInfo>> {
    let info = applier.start_commit()?;
    landed(applier, serving)?;
    Ok(info)
}

/// Takes in a commit that ended on the commit thread, and lets the serving go of it.
fn landed(applier: &mut Applier<'_>, serving: &mut Option<AheadServing>) -> Result<()> {
    applier.poll_commit()?;
    if let Some(serving) = serving.as_mut() {
        serving.committed(applier.committed_tip().number)?;
    }
    Ok(())
}

fn commit(
    applier: &mut Applier<'_>,
    serving: &mut Option<AheadServing>,
) -> Result<Option<gigas_statedb::CommitInfo>> {
    let info = applier.commit()?;
    if let Some(serving) = serving.as_mut() {
        serving.committed(applier.committed_tip().number)?;
    }
    Ok(info)
}

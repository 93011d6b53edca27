//! `gigas-bench fullnode`: how fast the full node applies the sequencer's state diffs, in the
//! two modes the MegaETH talk compares: **batched** (no root, a commit every N blocks, one
//! root at the end) and **live** (root and commit every block).
//!
//! Method:
//!
//! - **Record once.** A real `gigas-sequencer` on the benchmark genesis of `--accounts`
//!   accounts takes `gigas-bench load`'s Zipf transfer workload at `--rate` for `--blocks`
//!   blocks (the load module's generator, node start and stop: [`crate::load::run_load`]).
//!   Diffs `0..=N` are copied from its archive into
//!   `target/bench-fullnode/recording-<accounts>-<seed>-<blocks>-<rate>/` with a manifest,
//!   and its data directory is deleted. Later runs replay the same files, so they compare.
//! - **Genesis once.** [`gigas_fullnode::genesis::initialize`] writes the chain's genesis
//!   into a fresh [`gigas_statedb::StateDb`] (timed, and cached beside the recordings); each
//!   run starts from a copy of that database (copied and synced before the clock starts:
//!   the copy's dirty pages would otherwise be written back by the first durable commit).
//! - **Replay.** Every diff is read into memory first (the measured path is applying, not
//!   reading the recording), then fed through [`gigas_fullnode::apply::Applier`], which is
//!   exactly what the node runs: verify (frame, signature, checksum chain, decoding against
//!   the state), write, root, commit. Its [`gigas_fullnode::apply::ApplyTimings`] give the
//!   split. Blocks before the first one with transactions (the sequencer was idle while the
//!   load generator signed) are applied and committed before the clock starts.
//! - **Rounds.** `--runs` rounds; each round runs every mode, the order reversed every other
//!   round (A B, B A, ...), each into a fresh copy of the genesis database. Medians with
//!   their spread.
//! - **Checks.** Every run ends at the recording's last block with its hash; every run's
//!   final root is the same; the live mode's root equals one recomputed from scratch from
//!   the hashed tables ([`gigas_statedb::StateView::state_root_from_scratch`]).
//!
//! Must not: re-implement any part of applying (it calls the node's `Applier`), or time
//! anything but applying.

mod execute;
mod figures;
mod files;
mod limit;
mod mode;
mod record;
mod replay;
mod report;
mod summary;

use std::path::PathBuf;
use std::time::Duration;

use eyre::{bail, Result, WrapErr};
use gigas_fullnode::memory;
use gigas_primitives::machine::Machine;
use serde::{Deserialize, Serialize};

use crate::load::{
    genesis_cache_root, parse_duration, sequencer_bin, Distribution, GenesisSpec, Workload,
};

pub use execute::{ExecutionFigures, RequestKind};
pub use figures::{CgroupFigures, GenesisInfo, RunResult};
pub(crate) use limit::Limited;
pub use mode::{Mode, RootArg};
pub use record::Manifest;
pub use report::markdown;
pub use summary::limit_label;

/// The state changes per second issue 30 asks of the batched mode over 10M accounts (5x the
/// 54,915 measured before it).
pub const TARGET_BATCHED: f64 = 300_000.0;
/// The state changes per second issue 30 asks of the live mode over 10M accounts (8x the
/// 12,372 measured before it).
pub const TARGET_LIVE: f64 = 100_000.0;

/// Which modes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeKind {
    /// No root while applying, a commit every `--group` blocks, one root at the end.
    Batched,
    /// Root and commit every block.
    Live,
}

/// How commits reach the disk (gigas-statedb's `Durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DurabilityArg {
    /// Data and meta pages synced at every commit: what "applied" means to the node.
    Durable,
    /// The meta page not synced.
    NoMetaSync,
    /// Nothing synced at commit (a process kill still loses nothing).
    SafeNoSync,
    /// Commits not synced, a durable point every second or 256 MiB of written pages, and at
    /// the end of the run (in its clock), its pages written back on a thread of their own
    /// while applying goes on: the full node's default.
    Periodic,
    /// As `periodic`, with each durable point synced on the apply thread (the node before
    /// background writeback, `--db.sync-background false`).
    PeriodicInline,
}

impl DurabilityArg {
    pub(crate) fn to_statedb(self) -> gigas_statedb::Durability {
        match self {
            Self::Durable => gigas_statedb::Durability::Durable,
            Self::NoMetaSync => gigas_statedb::Durability::NoMetaSync,
            Self::SafeNoSync => gigas_statedb::Durability::SafeNoSync,
            Self::Periodic => {
                gigas_statedb::Durability::Periodic(gigas_statedb::SyncSchedule::default())
            }
            Self::PeriodicInline => {
                gigas_statedb::Durability::Periodic(gigas_statedb::SyncSchedule {
                    background: false,
                    ..gigas_statedb::SyncSchedule::default()
                })
            }
        }
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Durable => "durable",
            Self::NoMetaSync => "no-meta-sync",
            Self::SafeNoSync => "safe-no-sync",
            Self::Periodic => "periodic",
            Self::PeriodicInline => "periodic-inline",
        }
    }
}

/// What the page cache holds of a run's database when its clock starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PageCache {
    /// The whole file, as the copy's buffered writes left it (in large folios on ext4 with
    /// Linux 6.16 and later: a 4 KiB write through the map then dirties a whole folio).
    Copy,
    /// Nothing: evicted after the copy (the run reads every page it needs from the disk).
    Cold,
    /// The whole file in 4 KiB pages: evicted, then read back a page at a time with readahead
    /// off, as MDBX's own faults would have loaded it. Under `--memory-limit` the read back
    /// happens inside the run's cgroup, charged to it: a node that has run long under the
    /// limit, with what of its database the limit leaves room for in the page cache.
    Warm,
}

impl PageCache {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Copy => "copy",
            Self::Cold => "cold",
            Self::Warm => "warm",
        }
    }

    /// What it means, for the run's configuration.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Copy => "the copy as written (large folios)",
            Self::Cold => "evicted after the copy (cold)",
            Self::Warm => "evicted after the copy, then read back in 4 KiB pages with readahead off (warm, base pages; under a memory limit, read back inside the run's cgroup and charged to it)",
        }
    }
}

/// `gigas-bench fullnode`.
#[derive(Debug, Clone, clap::Args)]
pub struct FullnodeArgs {
    /// 1,000,000 accounts instead of 10,000,000 (unless --accounts is given).
    #[arg(long)]
    pub quick: bool,
    /// Benchmark accounts in the genesis [default: 10000000, or 1000000 with --quick].
    #[arg(long)]
    pub accounts: Option<u64>,
    /// Seed of the accounts' keys (the genesis's seed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seed of the recorded workload's draws.
    #[arg(long, default_value_t = 42)]
    pub workload_seed: u64,
    /// Zipf transfers per second offered to the sequencer while recording (near its
    /// sustained maximum: the ramp measured 16,000/s over 1M accounts, 18,000/s over 10M).
    #[arg(long, default_value_t = 15_000.0)]
    pub rate: f64,
    /// Blocks of load to record (from the first block with transactions).
    #[arg(long, default_value_t = 240)]
    pub blocks: u64,
    /// The recording sequencer's block time.
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    pub block_time: Duration,
    /// Block gas limit of the benchmark genesis.
    #[arg(long, default_value_t = 1_000_000_000)]
    pub gas_limit: u64,
    /// The recorded workload: `transfers` (ETH) or `mix` (half of them WETH9 transfers, so
    /// the state has storage: the genesis then holds a WETH9 balance slot per account).
    #[arg(long, value_enum, default_value = "transfers")]
    pub workload: Workload,
    /// How the recorded workload draws senders and receivers.
    #[arg(long, value_enum, default_value = "zipf")]
    pub distribution: Distribution,
    /// MDBX page size of the genesis and run databases (a power of two from 256 bytes to
    /// 64 KiB, MDBX's own bounds). `auto`, the default, is the node's
    /// (`gigas-fullnode --db.page-size`): 16 KiB from 4 GiB of `--memory-limit` (else of the
    /// machine's memory), the OS page below; limits that resolve to different sizes run
    /// separately. A genesis per page size is cached.
    #[arg(long, value_name = "BYTES|auto", default_value = "auto", value_parser = gigas_fullnode::cli::parse_auto_page_size)]
    pub page_size: gigas_fullnode::cli::AutoSize,
    /// Let the kernel read ahead around MDBX's page faults (off by default, as reth: each
    /// fault then reads one page instead of a window the cache must make room for).
    #[arg(long)]
    pub readahead: bool,
    /// Run every round under each of these memory limits (comma-separated, e.g.
    /// `512MiB,1GiB,8GiB`; `none` for no limit): this process moves into a fresh memory
    /// cgroup with the limit for each run, after the run's database was copied and evicted
    /// from the page cache, so that every page the run reads is charged to its cgroup
    /// (`--page-cache warm` then reads it back inside the cgroup; `cold` leaves it out).
    #[arg(long, value_delimiter = ',', value_name = "SIZE")]
    pub memory_limit: Vec<String>,
    /// The group's memory bound (`gigas-fullnode --commit-bytes`); `auto`, the default,
    /// sizes it from the run's limit (else the machine's memory) as the node does.
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = gigas_fullnode::cli::parse_auto_size)]
    pub commit_bytes: gigas_fullnode::cli::AutoSize,
    /// MDBX's dirty-page bound (`gigas-fullnode --db.max-dirty`); `auto`, the default, sizes
    /// it from the run's limit (else the machine's memory) as the node does.
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = gigas_fullnode::cli::parse_auto_size)]
    pub max_dirty: gigas_fullnode::cli::AutoSize,
    /// Loaded blocks applied before each run's clock starts (they bring the workload's hot
    /// accounts into memory, as a node that has been running holds them).
    #[arg(long, default_value_t = 0)]
    pub warmup_blocks: u64,
    /// Re-execute every block before applying its diff, as `gigas-fullnode
    /// --verify-execution` does, and split the re-execution into EVM work and state loading
    /// with the misses at each cache level (needs a recording with block files: recorded
    /// again if the cached one has none).
    #[arg(long)]
    pub verify_execution: bool,
    /// Stop each run after this long (the figures cover the blocks applied by then; a run
    /// under a small limit can otherwise take hours).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_run_time: Option<Duration>,
    /// The modes to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "batched,live"
    )]
    pub modes: Vec<ModeKind>,
    /// Batched mode: blocks per commit; several (comma-separated) run one batched mode each.
    /// 64 by default: over 1M accounts, 4 / 16 / 64 / 128 / 256 measured about 85k / 205k /
    /// 310k-330k / 310k-320k / 300k state changes per second (each commit writes about as
    /// many pages whatever its size, so fewer commits pay until a group dirties most of the
    /// state's pages anyway).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub group: Vec<u64>,
    /// Live mode: blocks per commit (a root every block still); several (comma-separated) run
    /// one live mode each. 1, the default, is the "live": a commit every block. MDBX
    /// copies every page a commit changes, and under `periodic` it may not reuse a page
    /// freed since the last durable point, so each commit writes its pages anew whether
    /// synced or not: fewer commits write fewer pages.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub live_group: Vec<u64>,
    /// Live mode: the writer's trie cache budget (`gigas-fullnode --trie.cache-size`);
    /// several (comma-separated, `0` for none) run one live mode each, alternating in every
    /// round.
    #[arg(long, value_delimiter = ',', default_value = "0", value_parser = gigas_cgroup::parse_size)]
    pub trie_cache: Vec<u64>,
    /// Live mode: the account trie held in memory across roots, its budget
    /// (`gigas-fullnode --trie.sparse-size`; `auto`, the node's default: a quarter of the
    /// run's `--memory-limit`, else of the machine's memory, at most 2 GiB, off below 1 GiB);
    /// several (comma-separated, `0` for none: roots walk the stored trie) run one live
    /// mode each, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "auto", value_parser = gigas_fullnode::cli::parse_auto_size)]
    pub sparse_trie: Vec<gigas_fullnode::cli::AutoSize>,
    /// Live mode: where roots run: `txn` (inside the write transaction, on the writer's
    /// thread: the node before layered roots), `all` (over the last commit with the group in
    /// memory, on every core: the node's default) or a number of threads; several
    /// (comma-separated) run one live mode each, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub root: Vec<RootArg>,
    /// Live mode: a thread reads each block's pages ahead of the writer, as the node's
    /// prefetch stage does (`gigas-fullnode --prefetch`, off by default); `false,true` runs
    /// both, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "false", action = clap::ArgAction::Set)]
    pub prefetch: Vec<bool>,
    /// Live mode: the account trie in memory is loaded with the stored trie's nodes, on every
    /// core, when the writer opens, before the warm-up (`gigas-fullnode --trie.preload`, on
    /// by default): the trie a long run would hold, at the cost of the load (its own section
    /// of the report); `false,true` runs both, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "true", action = clap::ArgAction::Set)]
    pub preload_trie: Vec<bool>,
    /// Live mode: each root runs while the next blocks are decoded and written
    /// (`gigas-fullnode --trie.overlap-roots`, on by default; with the account trie in
    /// memory only); `false,true` runs both, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "true", action = clap::ArgAction::Set)]
    pub overlap_roots: Vec<bool>,
    /// Live mode: each group commits on a thread of its own while the next blocks are
    /// applied (`gigas-fullnode --db.commit-thread`, off by default; with overlapping roots
    /// only); `false,true` runs both, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "false", action = clap::ArgAction::Set)]
    pub commit_thread: Vec<bool>,
    /// Both modes: a thread verifies and decodes each block ahead of the writer, against the
    /// last commit with the blocks it decoded above it (`gigas-fullnode --decode-ahead`,
    /// `gigas_fullnode::decode`), so that the writer's thread only writes, roots and
    /// commits; `false,true` runs both, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "true", action = clap::ArgAction::Set)]
    pub decode_ahead: Vec<bool>,
    /// Rounds: every mode runs once per round, the order reversed every other round.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Sync of the replay's commits; several (comma-separated) run every mode once with
    /// each, alternating in every round (`durable,periodic`: before and after the follower's
    /// durable points).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "periodic")]
    pub durability: Vec<DurabilityArg>,
    /// MDBX's write map for each run's database (`gigas-fullnode --db.write-map`, off by
    /// default); `true,false` runs every mode with each, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "false", action = clap::ArgAction::Set)]
    pub write_map: Vec<bool>,
    /// How long memory freed during a run stays with the process before going back to the
    /// kernel, in ms (`gigas-fullnode --alloc.purge-delay-ms`, 1000 by default; mimalloc's
    /// own default is 10); several (comma-separated) run every mode with each, alternating.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000",
        allow_negative_numbers = true
    )]
    pub purge_delay_ms: Vec<i64>,
    /// Write snapshots of the state throughout each timed run, one after another, on a
    /// thread of their own at the node's snapshot priority (`gigas-fullnode
    /// --snapshot-every`); `false,true` measures what writing snapshots costs a node that
    /// follows at full speed, alternating in every round.
    #[arg(long, value_delimiter = ',', default_value = "false", action = clap::ArgAction::Set)]
    pub snapshot_while: Vec<bool>,
    /// What the page cache holds of each run's database when its clock starts; several
    /// (comma-separated, `cold,warm`) run every mode with each, alternating in every round.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "warm")]
    pub page_cache: Vec<PageCache>,
    /// Do not check the live mode's root against one recomputed from scratch (a read of the
    /// whole state, done on the last live run).
    #[arg(long)]
    pub no_root_check: bool,
    /// Record again even if a recording of this configuration exists.
    #[arg(long)]
    pub rerecord: bool,
    /// Write the genesis database again even if a cached one exists.
    #[arg(long)]
    pub fresh_genesis: bool,
    /// Only record (and cache the genesis database); no replay.
    #[arg(long)]
    pub record_only: bool,
    /// The gigas-sequencer binary (default: the one beside gigas-bench).
    #[arg(long, value_name = "PATH")]
    pub sequencer_bin: Option<PathBuf>,
    /// Directory of the benchmark chain (default: target/bench-genesis/<accounts>-<seed>-gas<limit>).
    #[arg(long, value_name = "DIR")]
    pub genesis_dir: Option<PathBuf>,
    /// Recordings and cached genesis databases (default: target/bench-fullnode).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Where each run's database is written (default: <cache-dir>/scratch). Put it on the
    /// disk to measure, not on tmpfs.
    #[arg(long, value_name = "DIR")]
    pub scratch_dir: Option<PathBuf>,
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/fullnode")]
    pub out: PathBuf,
    /// No progress bars (logs and tests).
    #[arg(long)]
    pub quiet: bool,
}

impl FullnodeArgs {
    /// The accounts of the genesis: --accounts, else 1M with --quick, else 10M.
    pub fn accounts(&self) -> u64 {
        self.accounts
            .unwrap_or(if self.quick { 1_000_000 } else { 10_000_000 })
    }

    /// The memory limits to run under, in bytes (`None`: no limit); one `None` without
    /// --memory-limit.
    pub fn limits(&self) -> Result<Vec<Option<u64>>> {
        if self.memory_limit.is_empty() {
            return Ok(vec![None]);
        }
        self.memory_limit
            .iter()
            .map(|s| match s.trim() {
                "none" | "" => Ok(None),
                size => gigas_cgroup::parse_size(size)
                    .map(Some)
                    .map_err(|e| eyre::eyre!("--memory-limit {size}: {e}")),
            })
            .collect()
    }

    /// The page size of every run's database: `--page-size`, or the node's `auto` for the
    /// runs' limits (`None`: the OS page). Runs share one genesis database, so limits whose
    /// `auto` sizes differ are refused.
    pub fn page_size(&self) -> Result<Option<usize>> {
        if let Some(bytes) = self.page_size.0 {
            return Ok(usize::try_from(bytes).ok());
        }
        let mut sizes: Vec<Option<usize>> = self
            .limits()?
            .into_iter()
            .map(|limit| {
                gigas_statedb::page_size_for_memory(gigas_fullnode::memory::available(limit))
            })
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        match sizes[..] {
            [] => Ok(None),
            [one] => Ok(one),
            _ => bail!(
                "--page-size auto gives these limits different page sizes (16 KiB from {} GiB, the OS page below): run them separately, or give --page-size",
                gigas_statedb::LARGE_PAGE_MIN_MEMORY >> 30
            ),
        }
    }

    /// Every mode of every limit, in the order of a round (see [`Self::mode_list_for`]).
    pub fn mode_list(&self) -> Vec<Mode> {
        let mut modes = Vec::new();
        for limit in self.limits().unwrap_or_else(|_| vec![None]) {
            for mode in self.mode_list_for(limit) {
                if !modes.contains(&mode) {
                    modes.push(mode);
                }
            }
        }
        modes
    }

    /// The modes of a run under `limit`, in the order of a round: every batched group, then
    /// live. `--sparse-trie auto` is sized from that limit, as the node sizes it.
    pub fn mode_list_for(&self, limit: Option<u64>) -> Vec<Mode> {
        let mut modes = Vec::new();
        let memory = self
            .write_map
            .iter()
            .flat_map(|w| self.purge_delay_ms.iter().map(move |p| (*w, *p)))
            .flat_map(|(w, p)| self.snapshot_while.iter().map(move |s| (w, p, *s)))
            .flat_map(|(w, p, s)| self.page_cache.iter().map(move |c| (w, p, s, *c)))
            .flat_map(|(w, p, s, c)| self.decode_ahead.iter().map(move |d| (w, p, s, c, *d)))
            .collect::<Vec<_>>();
        for (&sync, (write_map, purge_delay_ms, snapshot, page_cache, decode_ahead)) in self
            .durability
            .iter()
            .flat_map(|s| memory.iter().map(move |m| (s, *m)))
        {
            if self.modes.contains(&ModeKind::Batched) {
                for &group in &self.group {
                    modes.push(Mode::Batched {
                        group,
                        sync,
                        write_map,
                        purge_delay_ms,
                        snapshot,
                        page_cache,
                        decode_ahead,
                    });
                }
            }
            if self.modes.contains(&ModeKind::Live) {
                for &group in &self.live_group {
                    for (&trie_cache, sparse_trie) in self.trie_cache.iter().flat_map(|t| {
                        self.sparse_trie
                            .iter()
                            .map(move |s| (t, s.resolve(limit, memory::auto_sparse_trie_bytes)))
                    }) {
                        for &root in &self.root {
                            for (&prefetch, &preload) in self
                                .prefetch
                                .iter()
                                .flat_map(|p| self.preload_trie.iter().map(move |l| (p, l)))
                            {
                                for (&overlap, &commit_thread) in self
                                    .overlap_roots
                                    .iter()
                                    .flat_map(|o| self.commit_thread.iter().map(move |c| (o, c)))
                                {
                                    let mut mode = Mode::Live {
                                        sync,
                                        group,
                                        trie_cache,
                                        sparse_trie,
                                        root,
                                        prefetch,
                                        preload,
                                        overlap,
                                        commit_thread,
                                        write_map,
                                        purge_delay_ms,
                                        snapshot,
                                        page_cache,
                                        decode_ahead,
                                    };
                                    // Overlap (or a commit thread, or a preload) asked
                                    // where the writer does not use it is the mode
                                    // without it: named so, and run once.
                                    let options = mode.writer_options();
                                    if let Mode::Live {
                                        overlap,
                                        commit_thread,
                                        preload,
                                        ..
                                    } = &mut mode
                                    {
                                        *overlap = options.roots_overlap();
                                        *commit_thread = options.commits_in_background();
                                        *preload &= options.sparse_trie_bytes > 0;
                                    }
                                    if !modes.contains(&mode) {
                                        modes.push(mode);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        modes
    }
}

/// The run's configuration, as printed first.
#[derive(Debug, Clone, Serialize)]
pub struct FullnodeConfig {
    /// Benchmark accounts.
    pub accounts: u64,
    /// Key seed.
    pub seed: u64,
    /// The recording this run replays.
    pub recording: String,
    /// The modes, in the order of the first round.
    pub modes: Vec<String>,
    /// Rounds.
    pub runs: usize,
    /// The StateDb's environment options.
    pub statedb_options: String,
    /// Where run databases were written and its filesystem.
    pub scratch: String,
    /// The checkout's git revision.
    pub source: String,
}

/// One mode's figures over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct ModeSummary {
    /// The mode.
    pub mode: Mode,
    /// Its label.
    pub label: String,
    /// The memory limit of these runs.
    pub memory_limit_bytes: Option<u64>,
    /// Runs.
    pub runs: usize,
    /// Median state changes per second (account and slot changes applied / apply seconds).
    pub changes_per_second: f64,
    /// Slowest run.
    pub changes_per_second_min: f64,
    /// Fastest run.
    pub changes_per_second_max: f64,
    /// Median transfers per second (gas / 21,000).
    pub transfers_per_second: f64,
    /// Median blocks per second.
    pub blocks_per_second: f64,
    /// The target for this mode.
    pub target_changes_per_second: f64,
    /// The median run (its split is the one shown).
    pub median_run: usize,
}

/// What `gigas-bench fullnode` writes.
#[derive(Debug, Clone, Serialize)]
pub struct FullnodeReport {
    /// Configuration.
    pub config: FullnodeConfig,
    /// Machine.
    pub machine: Machine,
    /// Build profile.
    pub build_profile: &'static str,
    /// The recording.
    pub recording: Manifest,
    /// The genesis database.
    pub genesis: GenesisInfo,
    /// Every run, in the order run.
    pub runs: Vec<RunResult>,
    /// Per mode.
    pub summary: Vec<ModeSummary>,
    /// Every run ended at the recording's last block, with its hash.
    pub heads_match: bool,
    /// Every run's final root is the same.
    pub roots_agree: bool,
    /// The live mode's root against one recomputed from scratch (None: not checked).
    pub live_root_from_scratch_matches: Option<bool>,
}

/// Runs `gigas-bench fullnode`: records if needed, then replays in every mode.
pub fn run(args: &FullnodeArgs) -> Result<Option<FullnodeReport>> {
    if args.rate.is_nan() || args.rate <= 0.0 {
        bail!("--rate must be positive");
    }
    if args.blocks == 0 || args.runs == 0 {
        bail!("--blocks and --runs must be at least 1");
    }
    if args.group.contains(&0) {
        bail!("--group must be at least 1");
    }
    let modes = args.mode_list();
    if modes.is_empty() && !args.record_only {
        bail!("no mode to run");
    }
    let spec = GenesisSpec {
        accounts: args.accounts(),
        seed: args.seed,
        gas_limit: args.gas_limit,
        erc20: args.workload != Workload::Transfers,
    };
    let limits = args.limits()?;
    let page_size = args.page_size()?;
    let bin = sequencer_bin(args.sequencer_bin.as_deref());
    let target = match &bin {
        Ok(b) => genesis_cache_root(b)
            .parent()
            .map_or_else(|| PathBuf::from("target"), PathBuf::from),
        Err(_) => PathBuf::from("target"),
    };
    let genesis_dir = args
        .genesis_dir
        .clone()
        .unwrap_or_else(|| target.join("bench-genesis").join(spec.dir_name()));
    let cache = args
        .cache_dir
        .clone()
        .unwrap_or_else(|| target.join("bench-fullnode"));
    std::fs::create_dir_all(&cache).wrap_err_with(|| format!("creating {}", cache.display()))?;

    let recording = record::ensure(args, &spec, bin.as_deref().ok(), &genesis_dir, &cache)?;
    let genesis = files::ensure_genesis_db(
        &recording,
        &cache,
        page_size,
        args.fresh_genesis,
        args.quiet,
    )?;
    if args.record_only {
        println!(
            "recorded in {}; genesis database in {}",
            recording.dir.display(),
            genesis.dir.display()
        );
        return Ok(None);
    }
    let scratch = args
        .scratch_dir
        .clone()
        .unwrap_or_else(|| cache.join("scratch"));
    let report = replay::run_all(
        args, &modes, &limits, &recording, genesis, page_size, &scratch,
    )?;
    report::write(&report, &args.out)?;
    Ok(Some(report))
}

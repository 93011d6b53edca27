//! The `gigas-fullnode` command line as a library function, so that another binary (the one-command
//! devnet) can run the node in a process of its own without `gigas-fullnode` being built.
//!
//! Owns: parsing the flags and starting the node (or building a genesis). Must not: install a
//! global allocator (the binary that links it chooses one).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::fetch::{FetchConfig, SourceLayout};
use crate::memory::{self, MemoryPlan};
use crate::node::{FullNode, FullNodeConfig};
use clap::Parser;
use eyre::{bail, WrapErr};
use gigas_chain::ChainConfig;
use gigas_primitives::duration::parse_duration;
use gigas_statedb::{Durability, HashedWrites, StateDbOptions, SyncSchedule, WriterOptions};
use tracing::info;

/// A Gigas full node: follows the sequencer by applying its signed, compressed state diffs
/// (no re-execution), keeps the Ethereum state root, and serves read-only JSON-RPC.
///
/// Examples:
///   gigas-fullnode --dev                      follow a `gigas-sequencer --dev` on this machine
///   gigas-fullnode --chain chain.json --datadir /data/fn --sequencer http://seq:8545
#[derive(Debug, Parser)]
#[command(name = "gigas-fullnode", version, verbatim_doc_comment)]
struct Cli {
    /// Follow a `gigas-sequencer --dev` (the dev chain; a temporary data directory unless
    /// --datadir is given; the root kept every block).
    #[arg(long)]
    dev: bool,
    /// The chain spec file (the sequencer's: genesis state and its address or key).
    #[arg(long, value_name = "FILE", conflicts_with = "dev")]
    chain: Option<PathBuf>,
    /// Where the state lives (an MDBX environment in DIR/state).
    #[arg(long, value_name = "DIR")]
    datadir: Option<PathBuf>,
    /// The sequencer (or any HTTP server or cache serving its diff archive).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8545")]
    sequencer: String,
    /// How the source serves diffs: `auto` detects, `sequencer` uses ranges and the
    /// WebSocket push, `static` fetches files and polls `diffs/head`.
    #[arg(long, value_enum, default_value_t = SourceLayout::Auto)]
    source_layout: SourceLayout,
    /// JSON-RPC address (HTTP and WebSocket on one port).
    #[arg(long = "http.addr", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    http_addr: IpAddr,
    /// JSON-RPC port (0 picks a free one).
    #[arg(long = "http.port", default_value_t = 8546)]
    http_port: u16,
    /// Serve Prometheus metrics at ADDR/metrics (e.g. 127.0.0.1:9002).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Compute the MPT state root every K blocks and check it against the header's
    /// `stateRoot`, refusing a block whose root differs (0: off, rebuilt on demand). K = 1,
    /// the default, checks every block before it is committed; with a larger K the blocks
    /// between two roots are checked only through the next one, and a group may commit
    /// blocks no root checked yet. Proofs are served against the last root.
    #[arg(long, value_name = "K", default_value_t = 1)]
    root_every: u64,
    /// Commit after this many blocks in one write transaction (catching up; at the head the
    /// interval below comes first: 32 blocks of 250 ms)...
    #[arg(long, value_name = "N", default_value_t = 128)]
    commit_blocks: u64,
    /// ...or once the oldest uncommitted block was applied this long ago. A block is served
    /// as soon as it is applied (from memory, logged against a kill in `applied.wal`), so
    /// this bounds the memory and the replay at start, not the lag. Fewer commits write
    /// fewer pages: over 10M accounts (Zipf transfers, the same 94 blocks) a commit every 4 /
    /// 16 / 32 blocks wrote 7.1 / 4.2 / 2.9 GB and applied 22k / 28k / 37k state changes per
    /// second on two cores, and every 4 / 32 / 64 blocks 16k / 27k / 29k on one
    /// (`gigas-bench fullnode --live-group`), for 20-35 MiB more anonymous memory; with the
    /// state stored once and no write map, every 32 / 64 / 128 blocks 50.9k / 55.1k / 62.2k
    /// on two cores, for 293 / 313 / 363 MiB of anonymous memory in all. The cost:
    /// a longer replay of `applied.wal` at the start after a kill (up to `--commit-blocks`
    /// blocks) and, since durable points follow commits, up to this much more taken back by
    /// a power loss (fetched again).
    #[arg(long, value_name = "DURATION", default_value = "8s", value_parser = parse_duration)]
    commit_interval: Duration,
    /// ...or once the open group's changes held in memory until its commit (state and trie
    /// nodes, estimated) reach this much (e.g. `512MiB`). `auto` (the default): half of
    /// `--memory-limit` (else of the machine's memory) less 128 MiB, between 16 and 512 MiB.
    /// Transfers over 10M accounts hold well under 512 MiB at 128 blocks; storage-heavy
    /// blocks reach it sooner. The group is the node's best cache under a small limit:
    /// with storage under 1 GiB, 128 MiB applied 5,232 changes/s and 512 MiB 7,654.
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    commit_bytes: AutoSize,
    /// Blocks per range request while catching up.
    #[arg(long, value_name = "N", default_value_t = 64)]
    fetch_range: u64,
    /// Requests in flight while catching up.
    #[arg(long, value_name = "N", default_value_t = 4)]
    fetch_concurrency: usize,
    /// Fetched diffs waiting for the apply thread, at most.
    #[arg(long, value_name = "N", default_value_t = 256)]
    fetch_queue: usize,
    /// ...holding at most this many bytes between them (a larger diff goes alone). `auto`
    /// (the default): a sixteenth of `--memory-limit`, else of the machine's memory, at most
    /// 256 MiB.
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    fetch_queue_bytes: AutoSize,
    /// Largest answer read from the source (a range of diffs, a diff, a WebSocket message);
    /// a larger one is refused and fetched again after a backoff, so that a broken or
    /// hostile source cannot fill the memory. `auto` (the default): a thirty-second of
    /// `--memory-limit`, else of the machine's memory, between 16 and 64 MiB (the
    /// sequencer's range answers stay under 16 MiB).
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    fetch_max_response: AutoSize,
    /// Re-execute every block over the state and halt on any difference with its diff.
    #[arg(long)]
    verify_execution: bool,
    /// Recent blocks whose state is served besides the head's (balances, nonces, code,
    /// storage, calls and proofs at a block number), as geth's 128; their undo records
    /// are kept in memory. 0 serves the head only.
    #[arg(long, value_name = "BLOCKS", default_value_t = 128)]
    state_window: u64,
    /// Most memory the recent states' records may take, in MiB; the oldest blocks go
    /// first. `auto` (the default): a sixteenth of `--memory-limit`, else of the machine's
    /// memory, at most 256 MiB.
    #[arg(long, value_name = "MIB|auto", default_value = "auto", value_parser = parse_auto_mib)]
    state_window_mib: AutoSize,
    /// Turn MDBX readahead on (off by default: state reads are random point lookups).
    #[arg(long = "db.readahead")]
    db_readahead: bool,
    /// Use MDBX's write map: pages changed in the file mapping itself instead of in heap
    /// copies written at the commit. Off by default: over 10M accounts (live, a commit every
    /// 32 blocks) it applied 40,000 changes/s against 51,000-52,000 without, and used 31 CPU
    /// seconds against 19, most of them in the kernel write-protecting each mapped page as
    /// a durable point writes it back (a TLB flush on every core, costly in a VM).
    #[arg(long = "db.write-map", value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
    db_write_map: bool,
    /// Without the write map: most memory a commit's dirty pages take before MDBX writes
    /// some of them to the file early (e.g. `256MiB`). `auto` (the default): a sixteenth of
    /// `--memory-limit`, else of the machine's memory, at most 256 MiB.
    #[arg(long = "db.max-dirty", value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    db_max_dirty: AutoSize,
    /// MDBX page size of a new database (`16KiB`, `4096`: a power of two from 256 bytes to
    /// 64 KiB); a database that exists keeps its own. `auto` (the default): 16 KiB from 4
    /// GiB of `--memory-limit` (else of the machine's memory), where the state lives in the
    /// page cache and a group's commit dirties most leaf pages anyway (over 10M accounts,
    /// live on two cores: 101,000 changes/s against 91,000-95,000 with 4 KiB pages); the OS
    /// page below, where each fault should read as little as it can.
    #[arg(long = "db.page-size", value_name = "BYTES|auto", default_value = "auto", value_parser = parse_auto_page_size)]
    db_page_size: AutoSize,
    /// How long memory the node freed stays with it before going back to the kernel, in
    /// milliseconds (0: at once, -1: never). Applying frees and allocates the same buffers
    /// every block; mimalloc's own 10 ms returned them between blocks and the kernel zeroed
    /// them again for the next ([`crate::alloc`]).
    #[arg(long = "alloc.purge-delay-ms", value_name = "MS", default_value_t = crate::alloc::DEFAULT_PURGE_DELAY_MS, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..=3_600_000))]
    alloc_purge_delay_ms: i64,
    /// When commits reach the disk. `periodic` (the default): commits are not synced (a
    /// killed process loses nothing: the page cache holds them), and a durable point is made
    /// every `--db.sync-period` or `--db.sync-bytes` of written pages; a power loss rolls the
    /// node back to its last durable point, consistent, and it fetches the rest again from
    /// the sequencer's archive. `durable`: every commit synced (7 % slower over 10M accounts
    /// at a commit per block: the pages are written either way).
    /// `no-meta-sync`, `safe-no-sync` (never synced until the node stops): for measurements.
    #[arg(
        long = "db.sync",
        value_name = "MODE",
        value_enum,
        default_value = "periodic"
    )]
    db_sync: SyncMode,
    /// With `--db.sync periodic`: a durable point at the first commit this long after the
    /// last one. A power loss takes back what was applied since the last durable point (it
    /// is fetched again): up to this period plus `--commit-interval`.
    #[arg(long = "db.sync-period", value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    db_sync_period: Duration,
    /// With `--db.sync periodic`: a durable point sooner once commits wrote this much
    /// (e.g. `256MiB`), which bounds how long one sync takes.
    #[arg(long = "db.sync-bytes", value_name = "SIZE", default_value = "256MiB", value_parser = gigas_cgroup::parse_size)]
    db_sync_bytes: u64,
    /// With `--db.sync periodic`: write a durable point's pages back on a thread of their
    /// own while blocks apply on, then finish it (the rest, the meta page) on the apply
    /// thread. `false`: the apply thread syncs and waits, 1 to 2 s per point over 10M
    /// accounts. Measured there: following a sequencer at 9,000 transfers/s on the same 2
    /// cores, lag p99 5 blocks against 18 to 33 without; catching up, about 10 % slower
    /// (the writeback competes with applying), 30,658 to 34,051 state changes/s against
    /// 34,403 to 38,043.
    #[arg(long = "db.sync-background", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    db_sync_background: bool,
    /// Memory for the state trie's stored nodes (with their leaf children's hashes) kept
    /// across blocks (e.g. `1GiB`), so that a root finds what recent roots used without
    /// searching the database and takes unchanged sibling leaves from kept hashes; the least
    /// recently used go beyond it. Roots on every thread use it. `0`, the default, turns it
    /// off: over 10M accounts it held 224 MiB, answered 84 % of seeks and hashed 47 % fewer
    /// leaves, and applied 9 to 11 % slower (its lookups and upkeep cost more than the hot
    /// B-tree searches and hashes they save).
    #[arg(long = "trie.cache-size", value_name = "SIZE", default_value = "0", value_parser = gigas_cgroup::parse_size)]
    trie_cache_size: u64,
    /// Memory for the account trie held across blocks with every loaded node's hash
    /// (e.g. `2GiB`): a root sets each changed account in it and re-hashes only the changed
    /// paths, instead of walking the stored trie and re-reading every changed account's
    /// sibling leaves, and its branch nodes are written once per commit; the subtries no
    /// recent block changed fold back into hashes beyond it. `auto` (the default): a
    /// quarter of `--memory-limit`, else of the machine's memory, at most 2 GiB, and off when
    /// that is below 1 GiB (a smaller trie folds back and reloads its working set at
    /// every commit: with storage over 10M accounts, 128 MiB applied 14,324 changes/s
    /// against 38,967 with it off).
    /// `0` turns it off. Over 10M accounts (Zipf transfers, a commit every 128 blocks, 2
    /// cores) live apply went from 55,876 and 62,681 changes/s to 72,703 and 73,706.
    #[arg(long = "trie.sparse-size", value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    trie_sparse_size: AutoSize,
    /// Threads each state root runs on (`0`, the default: one per core). A root reads the
    /// last commit with the blocks since it held in memory, so different storage tries and
    /// the account trie's sixteen subtries are walked at once; the blocks' trie nodes are
    /// written once, at their group's commit.
    #[arg(long = "trie.root-threads", value_name = "N", default_value_t = 0)]
    trie_root_threads: usize,
    /// Run each block's root while the next blocks are decoded and written, instead of
    /// holding the apply thread until it ends: catching up, the apply thread's reads and
    /// writes then use the cores the root leaves idle. Only with the account trie in memory
    /// (`--trie.sparse-size`) and the trie cache off; at the head the node waits for the
    /// root before it writes the block's changes while idle, as before.
    /// Over 10M accounts (Zipf transfers, a commit every 128 blocks, 2 cores, three
    /// alternating rounds): a median of 83,782 changes/s against 77,143 with roots in place;
    /// on one core, 55,111 against 53,205; with storage under an 8 GiB limit (the mix
    /// workload), 29,856 against 21,449.
    #[arg(long = "trie.overlap-roots", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    trie_overlap_roots: bool,
    /// At start, load the account trie in memory (`--trie.sparse-size`) with the stored
    /// trie's branch nodes, on every core, the upper levels first, up to three quarters of
    /// its budget, before following. Without it the trie fills as blocks change accounts,
    /// and each block pays for the subtries it changes first (their stored node and its
    /// lone leaves, read and hashed). Over 10M accounts the whole stored trie is 813 MiB
    /// (1.39M nodes), loaded in 4.6-6.0 s on one core; with `--trie.sparse-size 2GiB` a
    /// one-core node then applied 50,742 changes/s against 45,797 without (2 cores:
    /// 81,701 against 72,412; `gigas-bench fullnode --preload-trie false,true`). On by
    /// default; without a trie in memory (`--trie.sparse-size 0`, or under 4 GiB) it does
    /// nothing.
    #[arg(long = "trie.preload", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    trie_preload: bool,
    /// Verify and decode each fetched diff on a thread of its own, ahead of the apply
    /// thread, against the last commit with the blocks it decoded above it held in memory:
    /// the apply thread then only writes, roots and commits, and the prior-value reads,
    /// the signature and the checksum chain run beside it. Each block is still verified
    /// whole before any of it is written. The copy of the open group's changes it keeps
    /// counts as a second `--commit-bytes` in the memory plan: `auto` turns it on when the
    /// plan has room for it (8 GiB does, 1 GiB does not).
    #[arg(long = "decode-ahead", value_name = "auto|BOOL", default_value = "auto", value_parser = parse_auto_bool)]
    decode_ahead: AutoBool,
    /// Read each fetched diff's keys (hashed leaves, trie paths) on a thread of
    /// their own before the apply thread takes it, so that the pages it needs are in memory
    /// by then. Off by default, as measured over 10M accounts (`gigas-bench fullnode
    /// --prefetch false,true`): with the state in memory it took CPU from the roots (8 %
    /// slower), and under a 1 GiB limit (mix workload) it faulted more pages in than it
    /// saved (2.5M major faults against 1.9M, 9 % slower).
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
    prefetch: bool,
    /// At the head, write each applied block's changes into MDBX's open write transaction
    /// while waiting for the next block, instead of all of a group's at its commit: the
    /// commit then stalls the node for the last block's writes and MDBX's own commit instead
    /// of the whole group's (about 0.7 s per 32 blocks over 10M accounts). Catching up, the
    /// next block is already waiting and nothing changes. `false`: everything at the commit.
    #[arg(long = "db.flush-idle", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    db_flush_idle: bool,
    /// Keep the lattice hash of the state and check it against the commitment the sequencer
    /// signs into every diff (on|off): what lets this node's state be checked, and be served
    /// as a snapshot (crates/statediff/SNAPSHOT.md). Costs about 2.7 µs of CPU per changed
    /// account or slot, on every core. `off` follows a sequencer run with
    /// `--state-commitment off`.
    #[arg(long = "state-commitment", default_value = "on", value_name = "on|off",
          action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    state_commitment: bool,
    /// Commit each group on a thread of its own while the apply thread goes on with the next
    /// blocks (reth persists on a background thread too), instead of holding the apply
    /// thread until MDBX's commit returns. The committing group's changes stay in memory
    /// until it lands, so the memory plan counts a second group (`--commit-bytes`). Applies
    /// with overlapping roots (`--trie.overlap-roots`, the account trie in memory);
    /// `--db.flush-idle` then has nothing to do.
    /// Off by default, as measured on 2 cores over 10M accounts (`gigas-bench fullnode
    /// --commit-thread false,true`, live, a commit every 32 blocks, two alternating rounds):
    /// 54,665 and 59,699 changes/s with it against 60,726 and 64,604 without, and 2 to 4 CPU
    /// seconds more. The commit's B-tree writes then compete with the roots and the apply
    /// thread for the same two cores, and the copy of the committing group's changes the
    /// apply thread keeps and prunes costs it 0.1 to 0.5 s per group. A machine with a core
    /// to spare for it may differ: measure before turning it on.
    #[arg(long = "db.commit-thread", value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
    db_commit_thread: bool,
    /// How an empty data directory starts: `genesis` writes the chain spec's genesis and
    /// replays every diff since; `snapshot` downloads the newest snapshot from
    /// `--snapshot-source`, checks it against the sequencer's signed state commitment, and
    /// follows from the block after it (a bootstrap stopped part-way resumes). Ignored when
    /// the data directory already holds a chain.
    #[arg(long, value_enum, default_value_t = BootstrapMode::Genesis)]
    bootstrap: BootstrapMode,
    /// Where snapshots are fetched from (a sequencer, a full node with `--snapshot-every`,
    /// any static server over a `snapshots/` directory); repeat it to give several: a chunk
    /// that fails from one is fetched from the next. Default: `--sequencer`.
    #[arg(long = "snapshot-source", value_name = "URL")]
    snapshot_sources: Vec<String>,
    /// Snapshot chunks fetched at once during a bootstrap.
    #[arg(long, value_name = "N", default_value_t = 4)]
    snapshot_concurrency: usize,
    /// Rounds over every source for one chunk before a bootstrap gives up (with a second's
    /// backoff, growing, between rounds).
    #[arg(long, value_name = "N", default_value_t = 3)]
    snapshot_attempts: u32,
    /// Write a snapshot of this node's committed state every K blocks (0: never), on a
    /// thread of its own from one read view, and serve the snapshots directory at
    /// `/snapshots/` on the JSON-RPC port. Over 10M accounts with every key indexed a
    /// snapshot is 627 MiB (45 bytes an account, 21 an index entry) and took 31 to 45 s.
    #[arg(long, value_name = "K", default_value_t = 0)]
    snapshot_every: u64,
    /// The snapshots directory (default DATADIR/snapshots). Give a sequencer's
    /// `ARCHIVE/snapshots` to have the sequencer, or nginx over its archive, serve them.
    #[arg(long, value_name = "DIR")]
    snapshot_dir: Option<PathBuf>,
    /// Snapshots kept; older ones are removed after each new one.
    #[arg(long, value_name = "N", default_value_t = 2)]
    snapshot_keep: usize,
    /// A chunk is cut at this much state, uncompressed (at most 16 MiB).
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = gigas_cgroup::parse_size)]
    snapshot_chunk_size: u64,
    #[command(flatten)]
    rpc: gigas_rpc_eth::RpcArgs,
    #[command(flatten)]
    memory: gigas_cgroup::MemoryLimitArgs,
}

/// `--bootstrap`'s modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BootstrapMode {
    /// From the genesis, replaying every diff.
    Genesis,
    /// From the newest snapshot.
    Snapshot,
}

/// `--db.sync`'s modes (described on the flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SyncMode {
    Periodic,
    Durable,
    NoMetaSync,
    SafeNoSync,
}

impl Cli {
    fn durability(&self) -> Durability {
        match self.db_sync {
            SyncMode::Periodic => Durability::Periodic(SyncSchedule {
                period: self.db_sync_period,
                bytes: self.db_sync_bytes,
                background: self.db_sync_background,
            }),
            SyncMode::Durable => Durability::Durable,
            SyncMode::NoMetaSync => Durability::NoMetaSync,
            SyncMode::SafeNoSync => Durability::SafeNoSync,
        }
    }
}

/// Runs `gigas-fullnode` with these arguments (the first is the program name, as in
/// `std::env::args`), exactly as the binary does.
///
/// Logs go to stdout through `tracing` at `RUST_LOG` (default `info`, Cranelift's JIT at
/// `warn`); a subscriber already installed by the caller is kept.
pub fn main_with_args<I, T>(args: I) -> eyre::Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    gigas_launch::init_logging(gigas_launch::LogTo::Stdout);
    let cli = Cli::parse_from(args);
    crate::alloc::set_purge_delay(cli.alloc_purge_delay_ms);
    let plan = cli.memory_plan();
    if let Some(limit) = cli.memory.memory_limit {
        plan.check(limit)?;
    }
    info!(
        commit_mib = plan.group >> 20,
        dirty_mib = plan.dirty >> 20,
        window_mib = plan.window >> 20,
        fetch_queue_mib = plan.fetch_queue >> 20,
        fetch_response_mib = plan.fetch_response >> 20,
        sparse_trie_mib = plan.sparse_trie >> 20,
        trie_cache_mib = plan.trie_cache >> 20,
        commit_thread = plan.commit_thread,
        decode_ahead = plan.decode_ahead,
        total_mib = plan.total() >> 20,
        "memory bounds"
    );
    info!(
        page_bytes = cli.page_size().unwrap_or(4096),
        "MDBX page size of a new database (an existing one keeps its own)"
    );
    // First, before any database is opened or thread started: pages are charged to the
    // cgroup that first touches them. Held to the end; dropping it removes the cgroup.
    let _memory_limit = cli.memory.apply("fullnode")?;
    let chain = match (&cli.chain, cli.dev) {
        (Some(path), _) => {
            let chain = ChainConfig::load(path)
                .wrap_err_with(|| format!("reading the chain spec {}", path.display()))?;
            // A follower holds nothing that can sign blocks: a leaked full-node host must not
            // be able to impersonate the sequencer.
            if chain.has_signing_key() {
                bail!(
                    "{} carries the sequencer's signing key (sequencer_key or sequencer_key_file); \
                     a full node must not hold it. Give it the public spec instead: \
                     gigas-sequencer export-chain --chain {} --out public-chain.json",
                    path.display(),
                    path.display()
                );
            }
            chain
        }
        // The dev chain's key is the public test mnemonic's, but the follower still gets
        // only the address.
        (None, true) => ChainConfig::dev(250)?.public()?,
        (None, false) => {
            bail!(
                "give --dev to follow a dev sequencer, or --chain FILE --datadir DIR (see --help)"
            )
        }
    };
    let mut _temp = None;
    let datadir = match (&cli.datadir, cli.dev) {
        (Some(dir), _) => dir.clone(),
        (None, true) => {
            let dir = tempfile::Builder::new()
                .prefix("gigas-fullnode-dev-")
                .tempdir()
                .wrap_err("creating a temporary data directory")?;
            let path = dir.path().to_path_buf();
            _temp = Some(dir);
            path
        }
        (None, false) => bail!("--datadir DIR is required with --chain"),
    };
    let mut fetch = FetchConfig::new(cli.sequencer.clone());
    fetch.layout = cli.source_layout;
    fetch.range_blocks = cli.fetch_range.clamp(1, 1024);
    fetch.concurrency = cli.fetch_concurrency.max(1);
    fetch.queue_blocks = cli.fetch_queue.max(1);
    fetch.queue_bytes = plan.fetch_queue.max(1);
    fetch.max_response_bytes = plan.fetch_response.max(1);
    let config = FullNodeConfig {
        datadir: datadir.clone(),
        chain,
        fetch,
        writer: WriterOptions {
            root_every: cli.root_every,
            max_group_blocks: cli.commit_blocks.max(1),
            max_group_age: cli.commit_interval,
            max_group_bytes: plan.group.max(1),
            hashed_writes: HashedWrites::SortedPerGroup,
            trie_cache_bytes: usize::try_from(cli.trie_cache_size).unwrap_or(usize::MAX),
            sparse_trie_bytes: usize::try_from(plan.sparse_trie).unwrap_or(usize::MAX),
            root_threads: cli.trie_root_threads,
            overlap_roots: cli.trie_overlap_roots,
            commit_thread: plan.commit_thread,
            ..WriterOptions::default()
        },
        db: StateDbOptions {
            readahead: cli.db_readahead,
            write_map: cli.db_write_map,
            max_dirty_bytes: plan.dirty,
            page_size: cli.page_size(),
            durability: cli.durability(),
            ..StateDbOptions::default()
        },
        verify_execution: cli.verify_execution,
        rpc: cli
            .rpc
            .config(SocketAddr::new(cli.http_addr, cli.http_port)),
        call_budget: cli.rpc.budget(),
        metrics: cli.metrics,
        sequencer_url: cli.sequencer.clone(),
        state_window: crate::window::WindowLimits {
            blocks: cli.state_window,
            max_bytes: usize::try_from(plan.window).unwrap_or(usize::MAX),
        },
        prefetch: cli.prefetch,
        flush_idle: cli.db_flush_idle,
        state_commitment: cli.state_commitment,
        preload_trie: cli.trie_preload,
        decode_ahead: plan.decode_ahead,
        bootstrap: (cli.bootstrap == BootstrapMode::Snapshot).then(|| {
            let sources = if cli.snapshot_sources.is_empty() {
                vec![cli.sequencer.clone()]
            } else {
                cli.snapshot_sources.clone()
            };
            let mut b = crate::bootstrap::BootstrapConfig::new(sources);
            b.concurrency = cli.snapshot_concurrency.max(1);
            b.attempts = cli.snapshot_attempts.max(1);
            b.progress_bar = std::io::IsTerminal::is_terminal(&std::io::stderr());
            b
        }),
        snapshots: (cli.snapshot_every > 0 || cli.snapshot_dir.is_some()).then(|| {
            crate::snapshots::SnapshotConfig {
                dir: cli
                    .snapshot_dir
                    .clone()
                    .unwrap_or_else(|| datadir.join("snapshots")),
                every: cli.snapshot_every,
                keep: cli.snapshot_keep.max(1),
                produce: gigas_snapshot::ProduceOptions {
                    chunk_bytes: usize::try_from(
                        cli.snapshot_chunk_size
                            .clamp(1 << 10, u64::from(gigas_snapshot::MAX_CHUNK_RAW) / 2),
                    )
                    .unwrap_or(4 << 20),
                    ..gigas_snapshot::ProduceOptions::default()
                },
            }
        }),
    };
    let runtime =
        gigas_rpc_eth::runtime("gigas-fullnode", Some(2)).wrap_err("starting the async runtime")?;
    info!(sequencer = %cli.sequencer, datadir = %datadir.display(), "starting the full node");
    let node = FullNode::start(config, &runtime)
        .wrap_err_with(|| format!("starting the full node in {}", datadir.display()))?;
    // Machine-readable lines, for scripts and tests that start the node on port 0; the
    // JSON-RPC line comes last.
    if let Some(addr) = node.metrics_addr() {
        println!("metrics on http://{addr}/metrics");
    }
    if let Some(addr) = node.rpc_addr() {
        gigas_launch::announce_rpc(format_args!("http://{addr}"));
    }
    let stop = node.stop_handle();
    runtime.spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        info!("stopping: the open group is committed first");
        stop.stop();
    });
    node.join().wrap_err("the full node stopped")?;
    runtime.shutdown_timeout(Duration::from_secs(2));
    info!("stopped");
    Ok(())
}

impl Cli {
    /// The page size of a new state database: the flag's, or `auto`'s for the memory
    /// (`None`: the OS page).
    fn page_size(&self) -> Option<usize> {
        match self.db_page_size.0 {
            Some(bytes) => usize::try_from(bytes).ok(),
            None => {
                gigas_statedb::page_size_for_memory(memory::available(self.memory.memory_limit))
            }
        }
    }

    /// The bounds the node runs with: each flag's size, or its `auto` share of
    /// `--memory-limit` (else of the machine's memory).
    fn memory_plan(&self) -> MemoryPlan {
        let limit = self.memory.memory_limit;
        let rpc = self
            .rpc
            .config(SocketAddr::new(self.http_addr, self.http_port));
        let mut plan = MemoryPlan {
            group: self.commit_bytes.resolve(limit, memory::auto_group_bytes),
            dirty: self.db_max_dirty.resolve(limit, memory::auto_dirty_bytes),
            window: self
                .state_window_mib
                .resolve(limit, memory::auto_window_bytes),
            fetch_queue: self
                .fetch_queue_bytes
                .resolve(limit, memory::auto_queue_bytes),
            fetch_response: self
                .fetch_max_response
                .resolve(limit, memory::auto_response_bytes),
            fetch_concurrency: self.fetch_concurrency.max(1) as u64,
            sparse_trie: self
                .trie_sparse_size
                .resolve(limit, memory::auto_sparse_trie_bytes),
            trie_cache: self.trie_cache_size,
            execution_memory: self.rpc.evm_memory,
            executions: rpc.max_concurrent_executions as u64,
            commit_thread: self.db_commit_thread,
            decode_ahead: false,
        };
        plan.decode_ahead = match self.decode_ahead.0 {
            Some(on) => on,
            None => {
                let with = MemoryPlan {
                    decode_ahead: true,
                    ..plan
                };
                with.check(memory::available(limit)).is_ok()
            }
        };
        plan
    }
}

/// A switch that may be `auto` (`None`: decided from the memory plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoBool(pub Option<bool>);

/// Parses `auto`, `true` or `false`.
pub fn parse_auto_bool(s: &str) -> Result<AutoBool, String> {
    match s.trim() {
        "auto" => Ok(AutoBool(None)),
        "true" => Ok(AutoBool(Some(true))),
        "false" => Ok(AutoBool(Some(false))),
        other => Err(format!("expected auto, true or false, not {other:?}")),
    }
}

/// A size flag that may be `auto` (`None`: sized from the memory, see [`crate::memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoSize(pub Option<u64>);

impl AutoSize {
    /// The size given, or `auto`'s share of `memory_limit` (`None`: of the machine's
    /// memory), e.g. with [`memory::auto_group_bytes`].
    pub fn resolve(self, memory_limit: Option<u64>, auto: impl FnOnce(u64) -> u64) -> u64 {
        self.0
            .unwrap_or_else(|| auto(memory::available(memory_limit)))
    }
}

/// Parses `auto` or a size (`256MiB`, `0`).
pub fn parse_auto_size(s: &str) -> Result<AutoSize, gigas_cgroup::SizeError> {
    match s.trim() {
        "auto" => Ok(AutoSize(None)),
        size => gigas_cgroup::parse_size(size).map(|bytes| AutoSize(Some(bytes))),
    }
}

/// Parses `auto` or an MDBX page size: a power of two from 256 bytes to 64 KiB (`16KiB`,
/// `4096`), MDBX's own bounds.
pub fn parse_auto_page_size(s: &str) -> Result<AutoSize, String> {
    let size = parse_auto_size(s).map_err(|e| e.to_string())?;
    match size.0 {
        Some(bytes) if !bytes.is_power_of_two() || !(256..=65536).contains(&bytes) => Err(format!(
            "{s}: an MDBX page size is a power of two from 256 bytes to 64 KiB"
        )),
        _ => Ok(size),
    }
}

/// Parses `auto` or a whole number of MiB.
pub fn parse_auto_mib(s: &str) -> Result<AutoSize, String> {
    match s.trim() {
        "auto" => Ok(AutoSize(None)),
        n => n
            .parse::<u64>()
            .map(|mib| AutoSize(Some(mib.saturating_mul(1 << 20))))
            .map_err(|e| format!("{n}: not `auto` or a number of MiB ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse(size: AutoSize, limit: Option<u64>) -> u64 {
        size.resolve(limit, memory::auto_sparse_trie_bytes)
    }

    #[test]
    fn every_flag_parses_with_its_default_and_the_sparse_trie_size_too() {
        let cli = Cli::try_parse_from(["gigas-fullnode"]).expect("defaults parse");
        assert_eq!(cli.trie_sparse_size, AutoSize(None));
        let cli = Cli::try_parse_from(["gigas-fullnode", "--trie.sparse-size", "512MiB"])
            .expect("a size parses");
        assert_eq!(cli.trie_sparse_size, AutoSize(Some(512 << 20)));
        assert_eq!(sparse(cli.trie_sparse_size, None), 512 << 20);
        assert!(Cli::try_parse_from(["gigas-fullnode", "--trie.sparse-size", "lots"]).is_err());
        // auto: a quarter of the limit, within its bounds.
        assert_eq!(sparse(AutoSize(None), Some(8 << 30)), 2 << 30);
        assert_eq!(sparse(AutoSize(None), Some(6 << 30)), 3 << 29);
        // Below a quarter of 4 GiB the trie would thrash: off.
        assert_eq!(sparse(AutoSize(None), Some(256 << 20)), 0);
        assert_eq!(sparse(AutoSize(None), Some(1 << 30)), 0);
        assert_eq!(sparse(AutoSize(None), Some((4 << 30) - 1)), 0);
        assert_eq!(sparse(AutoSize(None), Some(4 << 30)), 1 << 30);
        assert_eq!(sparse(AutoSize(None), Some(64 << 30)), 2 << 30);
    }

    #[test]
    fn the_memory_plan_follows_the_limit_and_refuses_bounds_that_cannot_fit_it() {
        let plan = |args: &[&str]| {
            let cli =
                Cli::try_parse_from(std::iter::once("gigas-fullnode").chain(args.iter().copied()))
                    .expect("the flags parse");
            (cli.memory_plan(), cli.memory.memory_limit)
        };
        let (eight, limit) = plan(&["--memory-limit", "8GiB"]);
        assert_eq!(limit, Some(8 << 30));
        assert_eq!(
            (eight.group, eight.dirty, eight.window),
            (512 << 20, 256 << 20, 256 << 20)
        );
        assert_eq!(eight.sparse_trie, 2 << 30);
        assert!(eight.check(8 << 30).is_ok());
        // The decode thread's copy of a group: on at 8 GiB, where it fits.
        assert!(eight.decode_ahead);
        let (without, _) = plan(&["--memory-limit", "8GiB", "--decode-ahead", "false"]);
        assert!(!without.decode_ahead);
        assert_eq!(eight.total(), without.total() + eight.group);
        // Off by default; on, it counts a second group, which 1 GiB has no room for.
        assert!(!eight.commit_thread);
        let (on, _) = plan(&["--memory-limit", "8GiB", "--db.commit-thread", "true"]);
        assert!(on.commit_thread && on.decode_ahead && on.check(8 << 30).is_ok());
        // A second group for the commit thread, and the decode thread's copy of it.
        assert_eq!(on.total(), eight.total() + 2 * eight.group);
        let (one_on, _) = plan(&["--memory-limit", "1GiB", "--db.commit-thread", "true"]);
        let err = one_on
            .check(1 << 30)
            .expect_err("two groups of 384 MiB in 1 GiB");
        assert!(err.to_string().contains("--db.commit-thread"), "{err}");
        let (one, _) = plan(&["--memory-limit", "1GiB"]);
        assert!(!one.commit_thread);
        // No room for the decode thread's copy of a 384 MiB group: `auto` leaves it off,
        // and asking for it names it.
        assert!(!one.decode_ahead);
        let (one_da, _) = plan(&["--memory-limit", "1GiB", "--decode-ahead", "true"]);
        let err = one_da
            .check(1 << 30)
            .expect_err("two groups of 384 MiB in 1 GiB");
        assert!(err.to_string().contains("--decode-ahead"), "{err}");
        assert_eq!(
            (one.group, one.dirty, one.fetch_queue),
            (384 << 20, 64 << 20, 64 << 20)
        );
        assert_eq!(one.sparse_trie, 0);
        assert!(one.check(1 << 30).is_ok(), "{:?}", one.check(1 << 30));
        // Given by hand, a bound is kept as given, and the check names it.
        let (hand, _) = plan(&[
            "--memory-limit",
            "1GiB",
            "--commit-bytes",
            "700MiB",
            "--state-window-mib",
            "32",
        ]);
        assert_eq!((hand.group, hand.window), (700 << 20, 32 << 20));
        let err = hand
            .check(1 << 30)
            .expect_err("700 MiB of group does not fit 1 GiB");
        assert!(err.to_string().contains("--commit-bytes 700 MiB"), "{err}");
        assert!(Cli::try_parse_from(["gigas-fullnode", "--state-window-mib", "lots"]).is_err());
        assert!(Cli::try_parse_from(["gigas-fullnode", "--db.max-dirty", "1.5G"]).is_err());
    }

    #[test]
    fn the_page_size_follows_the_memory_unless_given() {
        let page = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("gigas-fullnode").chain(args.iter().copied()))
                .map(|cli| cli.page_size())
        };
        // auto: 16 KiB where the state lives in memory, the OS page below 4 GiB.
        assert_eq!(page(&["--memory-limit", "8GiB"]).ok(), Some(Some(16 << 10)));
        assert_eq!(page(&["--memory-limit", "4GiB"]).ok(), Some(Some(16 << 10)));
        assert_eq!(page(&["--memory-limit", "4095MiB"]).ok(), Some(None));
        assert_eq!(page(&["--memory-limit", "1GiB"]).ok(), Some(None));
        // Given by hand, kept whatever the memory.
        let given = page(&["--memory-limit", "1GiB", "--db.page-size", "16KiB"]);
        assert_eq!(given.ok(), Some(Some(16 << 10)));
        let given = page(&["--memory-limit", "8GiB", "--db.page-size", "4096"]);
        assert_eq!(given.ok(), Some(Some(4096)));
        // MDBX's bounds.
        for bad in ["3000", "128", "128KiB", "lots"] {
            assert!(page(&["--db.page-size", bad]).is_err(), "{bad}");
        }
    }
}

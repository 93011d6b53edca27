//! The `gigas-sequencer` command line as a library function, so that another binary (the one-command
//! devnet) can run the node in a process of its own without `gigas-sequencer` being built.
//!
//! Owns: parsing the flags and starting the node (or building a genesis). Must not: install a
//! global allocator (the binary that links it chooses one).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::SequencerBackend;
use crate::diffs::{DiffConfig, DiffWriter};
use crate::{Node, NodeConfig};
use alloy_primitives::U256;
use clap::{Args, Parser, Subcommand};
use eyre::{bail, WrapErr};
use gigas_chain::{dev_accounts, ChainConfig};
use gigas_evm::jit::JitMode;
use gigas_primitives::duration::parse_duration;
use tracing::{error, info};

/// The Gigas L2 sequencer: accepts signed Ethereum transactions over JSON-RPC (HTTP and
/// WebSocket on one port), orders them into blocks every block time, executes them with
/// Block-STM and a Cranelift JIT over revm, keeps state in Vilmo and chain history in a block log indexed in MDBX.
///
/// Quick start: `gigas-sequencer --dev`, then point any Ethereum tool at
/// http://127.0.0.1:8545 with one of the printed dev keys.
#[derive(Debug, Parser)]
#[command(name = "gigas-sequencer", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build a benchmark chain: N accounts derived from a seed (in parallel, once), written as
    /// a chain spec plus an addresses file that a node starts on in seconds.
    Genesis(GenesisArgs),
    /// Write the public chain spec a full node follows with: the chain spec without the
    /// sequencer's signing key, naming its address instead. Full nodes refuse a spec that
    /// carries the key.
    ExportChain(ExportChainArgs),
    /// Rebuild the diff archive's key index log (`keys.log`) from a full node that follows
    /// this sequencer, when the log is damaged or lost. Stop the sequencer (and the full
    /// node) first; the old log is kept beside the new one.
    RebuildKeyLog(RebuildKeyLogArgs),
    /// Compute the Ethereum state root (Merkle-Patricia) of this sequencer's state from
    /// scratch: every account and slot read from its state store, hashed and fed to
    /// alloy-trie. It equals the root a full node keeps for the same block
    /// (`gigas_getStateRoot`). Stop the sequencer first. The state is held in memory: over
    /// 10M accounts it took 28 s and 4.2 GB resident at its peak on a 2-vCPU VM.
    StateRoot(StateRootArgs),
}

#[derive(Debug, Args)]
struct StateRootArgs {
    /// The sequencer's data directory.
    #[arg(long, value_name = "DIR")]
    datadir: PathBuf,
}

#[derive(Debug, Args)]
struct RebuildKeyLogArgs {
    /// The sequencer's data directory.
    #[arg(long, value_name = "DIR")]
    datadir: PathBuf,
    /// The diff archive (default: DATADIR/archive).
    #[arg(long = "diffs.dir", value_name = "DIR")]
    diffs_dir: Option<PathBuf>,
    /// The state database of a full node that follows this sequencer (its DATADIR/state);
    /// its enumeration index is the sequencer's.
    #[arg(long, value_name = "DIR")]
    from_state: PathBuf,
}

#[derive(Debug, Args)]
struct ExportChainArgs {
    /// The sequencer's chain spec.
    #[arg(long, value_name = "FILE", required_unless_present = "dev")]
    chain: Option<PathBuf>,
    /// The dev chain's spec (what `gigas-sequencer --dev` runs).
    #[arg(long, conflicts_with = "chain")]
    dev: bool,
    /// Where to write it (default: standard output).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct GenesisArgs {
    /// How many benchmark accounts.
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// The seed their keys derive from (keccak(seed ‖ index)).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Each account's balance, in ETH.
    #[arg(long, default_value_t = 1_000)]
    balance_eth: u64,
    /// Block time written into the chain spec (e.g. 250ms, 1s).
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    block_time: Duration,
    /// Gas limit of every block (default: the dev chain's 60,000,000).
    #[arg(long)]
    gas_limit: Option<u64>,
    /// Also deploy WETH9 (its mainnet runtime code, from the fixtures' pre-state) at its
    /// mainnet address, with --balance-eth WETH for every benchmark account: the ERC-20
    /// workload of `gigas-bench load`.
    #[arg(long)]
    erc20: bool,
    /// Mainnet fixtures to take WETH9's code from (default: ../shared/data/mainnet).
    #[arg(long, value_name = "DIR", requires = "erc20")]
    fixtures: Option<PathBuf>,
    /// Output directory (chain.json and the addresses file).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Development chain: chain id 1337, ten accounts of the test mnemonic with 10,000 ETH
    /// each (printed at start), a temporary data directory unless --datadir is given.
    #[arg(long, conflicts_with = "chain")]
    dev: bool,
    /// Chain spec file (JSON: chain_id, block_time_ms, block_gas_limit, fork, base_fee,
    /// sequencer_key or sequencer_key_file, alloc, bench_accounts).
    #[arg(long, value_name = "FILE")]
    chain: Option<PathBuf>,
    /// Data directory (state/, history/, journal). Required without --dev.
    #[arg(long, value_name = "DIR")]
    datadir: Option<PathBuf>,
    /// Address the JSON-RPC server (HTTP and WebSocket) listens on.
    #[arg(long = "http.addr", default_value = "127.0.0.1")]
    http_addr: IpAddr,
    /// Port of the JSON-RPC server (HTTP and WebSocket on the same port).
    #[arg(long = "http.port", default_value_t = 8545)]
    http_port: u16,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// Time between blocks (e.g. 250ms, 2s); overrides the chain spec's.
    #[arg(long, value_parser = parse_duration)]
    block_time: Option<Duration>,
    /// When compiled code runs: off (interpret), on (compile contracts once hot), eager
    /// (compile every contract on first call).
    #[arg(long, default_value = "on")]
    jit: JitMode,
    /// Block-STM workers per block (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Sender-recovery threads (default: the number of cores).
    #[arg(long = "txpool.recovery-threads")]
    recovery_threads: Option<usize>,
    /// The most transactions the pool holds; the cheapest are evicted beyond it.
    #[arg(long = "txpool.max-txs", default_value_t = 100_000)]
    pool_max_txs: usize,
    /// The most transactions of one sender the pool holds.
    #[arg(long = "txpool.max-per-sender", default_value_t = 256)]
    pool_max_per_sender: usize,
    /// The most memory of encoded transactions the pool holds, in MiB (the pool's memory is
    /// about twice that; /metrics shows it as memory_bytes{component="txpool"}).
    #[arg(long = "txpool.max-mib", default_value_t = 256, value_name = "MIB")]
    pool_max_mib: usize,
    /// The most compiled machine code the JIT keeps, in MiB; the least valuable contracts
    /// are evicted beyond it (memory_bytes{component="jit_code"}).
    #[arg(long = "jit.budget-mib", default_value_t = 64, value_name = "MIB")]
    jit_budget_mib: u64,
    /// Compile the contracts of this hot list at their first call, and no others, instead of
    /// the contracts whose interpreted frames spent 300,000 gas: one code hash per line, as
    /// `gigas-profiler` writes `jit-hotlist.txt` (the code worth most per byte, sized to the
    /// code cache's budget: give `gigas-profiler --jit-budget-mib` this --jit.budget-mib).
    #[arg(long = "jit.hotlist", value_name = "FILE")]
    jit_hotlist: Option<std::path::PathBuf>,
    /// With --jit.hotlist: also compile unlisted contracts once they reach the threshold
    /// (a list from another workload then still lets new hot contracts compile, at the cost
    /// of evictions when the list already fills the budget).
    #[arg(long = "jit.hotlist-with-threshold", requires = "jit_hotlist")]
    jit_hotlist_with_threshold: bool,
    /// The smallest priority fee (tip) the pool accepts, in wei.
    #[arg(long = "txpool.min-priority-fee", default_value_t = 0)]
    min_priority_fee: u128,
    /// The most transactions in one block.
    #[arg(long = "builder.max-txs", default_value_t = 20_000)]
    max_block_txs: usize,
    /// Blocks whose state stays queryable (eth_getBalance at an older block, the prestate
    /// tracer).
    /// At least 1,288: the diff writer re-encodes blocks after a restart from this state.
    #[arg(long = "state-history", default_value_t = 10_000, value_parser = parse_state_history)]
    state_history: u64,
    /// The history's indexer writes its MDBX index once this many blocks wait (or the oldest
    /// has waited 5 s). Blocks are durable in the block log before that and every query
    /// answers for them from memory meanwhile; larger batches cost the indexer less CPU per
    /// block (measured: 0.5 cores at 18,000 tx/s indexing block by block, 0.18 at 23,000 in
    /// batches of 24) and hold more blocks in memory (about 5 MB per block of 5,000
    /// transfers).
    #[arg(long = "history.index-batch", default_value_t = 24, value_name = "BLOCKS",
          value_parser = clap::value_parser!(u64).range(1..=128))]
    history_index_batch: u64,
    /// How often the history's indexer makes its MDBX index durable (0s: every batch). Blocks
    /// are durable in the block log either way; between these points the index is committed
    /// without a sync, a power loss takes it back to the last point, and the next start
    /// indexes the blocks after it again from the block log (about 40 blocks at 10 s).
    #[arg(long = "history.index-sync-period", default_value = "10s", value_name = "DURATION",
          value_parser = parse_duration)]
    history_index_sync_period: Duration,
    /// Memory for the account trie held across blocks' state roots, in MiB (0: every root
    /// walks the trie stored in DATADIR/trie through the page cache). Over 10M accounts the
    /// whole account trie is about 800 MiB; past the budget the subtries no recent block
    /// changed fold back into hashes.
    #[arg(long = "trie.memory-mib", default_value_t = gigas_sequencer_default_trie_mib(), value_name = "MIB")]
    trie_memory_mib: u64,
    /// Blocks per commit of the state trie to DATADIR/trie: a restart replays at most about
    /// twice this many blocks from the history (each a state root, a few ms).
    #[arg(long = "trie.commit-blocks", default_value_t = 64, value_name = "BLOCKS",
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    trie_commit_blocks: u64,
    #[command(flatten)]
    rpc: gigas_rpc_eth::RpcArgs,
    /// Directory of the state-diff archive (diffs/N, blocks/N), served at /diffs and /blocks
    /// on the JSON-RPC port; copy it to any static web server to serve followers from there.
    /// Default: DATADIR/archive.
    #[arg(long = "diffs.dir", value_name = "DIR")]
    diffs_dir: Option<PathBuf>,
    /// Keep only the newest N blocks' diff and block files (0: keep everything).
    #[arg(long = "diffs.retain", default_value_t = 0, value_name = "N")]
    diffs_retain: u64,
    /// zstd level of the archive's files (1-22; higher is smaller and slower to write).
    #[arg(long = "diffs.zstd-level", default_value_t = gigas_statediff::Compression::DEFAULT_LEVEL,
          value_parser = clap::value_parser!(i32).range(1..=22))]
    diffs_zstd_level: i32,
    /// Keep the lattice hash of the state and sign it into every diff (on|off): the state
    /// commitment that snapshots are checked against (crates/statediff/SNAPSHOT.md). Off only
    /// to measure its cost; full nodes must then run with `--state-commitment off` too.
    #[arg(long = "state-commitment", default_value = "on", value_name = "on|off",
          action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    state_commitment: bool,
    #[command(flatten)]
    memory: gigas_cgroup::MemoryLimitArgs,
}

/// `--trie.memory-mib` by default.
const fn gigas_sequencer_default_trie_mib() -> u64 {
    (crate::node::DEFAULT_TRIE_MEMORY_BYTES >> 20) as u64
}

/// Gives the memory freed so far back to the kernel. Opening a new chain writes its whole
/// genesis through short-lived buffers (hundreds of MiB at a million accounts), which the
/// allocator (mimalloc, the binary's global allocator) would otherwise keep for reuse for the
/// life of the process.
fn release_freed_memory() {
    // SAFETY: `mi_collect` only walks mimalloc's own heaps; it may be called at any time, from
    // any thread, whether or not mimalloc is the global allocator.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Runs `gigas-sequencer` with these arguments (the first is the program name, as in
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
    match cli.command {
        Some(Command::Genesis(args)) => genesis(args),
        Some(Command::ExportChain(args)) => export_chain(args),
        Some(Command::RebuildKeyLog(args)) => rebuild_key_log(args),
        Some(Command::StateRoot(args)) => state_root(args),
        None => run(cli.run),
    }
}

/// `--state-history`, refusing windows too short for recovery and the diff writer.
fn parse_state_history(s: &str) -> Result<u64, String> {
    let blocks: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of blocks"))?;
    let min = crate::diffs::MIN_STATE_HISTORY;
    if blocks < min {
        return Err(format!(
            "{blocks} blocks is too short: at least {min} (after a restart the diff writer \
             re-encodes up to {} blocks from the state before each, and recovery replays up to {})",
            crate::diffs::MARK_EVERY + crate::diffs::SYNC_EVERY,
            crate::node::MAX_GROUP
        ));
    }
    Ok(blocks)
}

fn state_root(args: StateRootArgs) -> eyre::Result<()> {
    let dir = args.datadir.join("state");
    if !dir.is_dir() {
        bail!(
            "{} is not a sequencer's state store: give the --datadir the sequencer ran with",
            dir.display()
        );
    }
    let started = std::time::Instant::now();
    // Vilmo takes the directory's lock: a running sequencer holds it.
    let vilmo =
        gigas_vilmo::Vilmo::open(&dir, gigas_vilmo::Options::default()).wrap_err_with(|| {
            format!(
                "opening {}: is the sequencer still running? stop it first",
                dir.display()
            )
        })?;
    let bar = indicatif::ProgressBar::new(vilmo.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "reading the state {bar:40} {pos}/{len} entries ({eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let state = crate::state::scratch_state(&vilmo, |read| bar.set_position(read))
        .wrap_err_with(|| format!("reading the state in {}", dir.display()))?;
    bar.finish_and_clear();
    let (accounts, slots) = (state.accounts(), state.slots());
    let spinner = indicatif::ProgressBar::new_spinner()
        .with_message(format!("hashing {accounts} accounts and {slots} slots"));
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let root = state
        .root()
        .wrap_err_with(|| format!("the state in {} makes no trie", dir.display()))?;
    spinner.finish_and_clear();
    println!(
        "block {}: state root {root} ({accounts} accounts, {slots} slots, {:.1} s)",
        crate::state::vilmo_block(&vilmo),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn rebuild_key_log(args: RebuildKeyLogArgs) -> eyre::Result<()> {
    use gigas_vilmo::Storage as _;
    // The sequencer holds this lock while it runs (Vilmo's store lock).
    let _running = gigas_vilmo::FsStorage
        .lock_dir(&args.datadir.join("state"))
        .wrap_err_with(|| {
            format!(
                "locking {}: is the sequencer still running? stop it first",
                args.datadir.join("state").display()
            )
        })?;
    let history = gigas_history::History::open(
        &args.datadir.join("history"),
        gigas_history::HistoryOptions::default(),
    )
    .wrap_err_with(|| format!("opening the history in {}", args.datadir.display()))?;
    let source =
        gigas_statedb::StateDb::open(&args.from_state, gigas_statedb::StateDbOptions::default())
            .wrap_err_with(|| {
                format!(
                    "opening the full node's state database {}",
                    args.from_state.display()
                )
            })?;
    let view = source.view()?;
    let tip = view
        .tip()?
        .ok_or_else(|| eyre::eyre!("{} holds no chain yet", args.from_state.display()))?;
    let archive = args
        .diffs_dir
        .unwrap_or_else(|| args.datadir.join("archive"));
    let lattice = view.lattice()?;
    let done = crate::diffs::rebuild_key_log(
        &archive,
        &history,
        tip.number,
        tip.hash,
        &view,
        lattice.as_ref(),
    )
    .wrap_err("rebuilding the key index log")?;
    println!(
        "wrote {} with {} keys as of block {}{}; the sequencer encodes blocks {}..={} again \
         at its next start",
        archive.join("keys.log").display(),
        done.keys,
        done.block,
        done.old_log
            .as_ref()
            .map(|p| format!(" (the old log is {})", p.display()))
            .unwrap_or_default(),
        done.block + 1,
        done.head
    );
    Ok(())
}

fn export_chain(args: ExportChainArgs) -> eyre::Result<()> {
    let chain = match &args.chain {
        Some(path) => ChainConfig::load(path)
            .wrap_err_with(|| format!("reading the chain spec {}", path.display()))?,
        None => ChainConfig::dev(250)?,
    };
    let public = gigas_chain::write_public_spec(&chain, args.out.as_deref())?;
    if args.out.is_none() {
        println!("{public}");
    }
    Ok(())
}

fn genesis(args: GenesisArgs) -> eyre::Result<()> {
    let bar = indicatif::ProgressBar::new(args.accounts);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "deriving accounts {bar:40} {pos}/{len} ({per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = std::time::Instant::now();
    let balance = U256::from(args.balance_eth) * U256::from(10u64).pow(U256::from(18));
    let token = if args.erc20 {
        let fixtures = args
            .fixtures
            .clone()
            .unwrap_or_else(gigas_chain::bench::default_fixtures_dir);
        Some(gigas_chain::bench::BenchToken::weth9(&fixtures, balance)?)
    } else {
        None
    };
    let spec = gigas_chain::bench::build_bench_chain_with(
        &args.out,
        &gigas_chain::bench::BenchGenesis {
            count: args.accounts,
            seed: args.seed,
            balance,
            block_time_ms: args.block_time.as_millis() as u64,
            gas_limit: args.gas_limit,
            token,
        },
        &|done| bar.set_position(done),
    )?;
    bar.finish_and_clear();
    println!(
        "{} accounts of seed {} in {:.1}s; start a node on it with:\n  gigas-sequencer --chain {} --datadir DIR",
        args.accounts,
        args.seed,
        started.elapsed().as_secs_f64(),
        spec.display()
    );
    Ok(())
}

fn run(args: RunArgs) -> eyre::Result<()> {
    // First, before any database is opened or thread started: pages are charged to the
    // cgroup that first touches them. Held to the end of run; dropping it removes the cgroup.
    let _memory_limit = args.memory.apply("sequencer")?;
    let mut chain = match (&args.chain, args.dev) {
        (Some(path), _) => ChainConfig::load(path)?,
        (None, true) => ChainConfig::dev(250)?,
        (None, false) => bail!("give --dev for a development chain or --chain FILE (see --help)"),
    };
    if let Some(block_time) = args.block_time {
        chain.block_time_ms = block_time.as_millis() as u64;
    }
    // A --dev node without --datadir lives in a temporary directory removed at exit.
    let mut _temp = None;
    let datadir = match (&args.datadir, args.dev) {
        (Some(dir), _) => dir.clone(),
        (None, true) => {
            let dir = tempfile::Builder::new()
                .prefix("gigas-dev-")
                .tempdir()
                .wrap_err("creating a temporary data directory")?;
            let path = dir.path().to_path_buf();
            _temp = Some(dir);
            path
        }
        (None, false) => bail!("--datadir DIR is required with --chain"),
    };
    let mut config = NodeConfig::new(datadir.clone(), chain.clone());
    config.jit = args.jit;
    if let Some(threads) = args.threads {
        config.threads = threads.max(1);
    }
    if let Some(threads) = args.recovery_threads {
        config.recovery_threads = threads.max(1);
    }
    config.pool_max_txs = args.pool_max_txs;
    config.pool_max_per_sender = args.pool_max_per_sender;
    config.pool_max_bytes = args.pool_max_mib.saturating_mul(1 << 20);
    config.jit_budget_bytes = args.jit_budget_mib.saturating_mul(1 << 20);
    if let Some(file) = &args.jit_hotlist {
        config.jit_hot_list = Some(gigas_jit::HotList::read(file)?);
    }
    config.jit_hot_list_with_threshold = args.jit_hotlist_with_threshold;
    config.min_priority_fee = args.min_priority_fee;
    config.max_block_txs = args.max_block_txs;
    config.state_history_blocks = args.state_history;
    config.history_index_batch = args.history_index_batch as usize;
    config.history_index_sync_period = args.history_index_sync_period;
    config.trie_memory_bytes =
        usize::try_from(args.trie_memory_mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    config.trie_commit_blocks = args.trie_commit_blocks;

    let node = Node::open(config)
        .wrap_err_with(|| format!("opening the node in {}", datadir.display()))?;
    release_freed_memory();
    let head = node.head();
    info!(
        datadir = %datadir.display(),
        chain_id = chain.chain_id,
        head = head.header.number,
        hash = %head.hash,
        sequencer = %node.sequencer_address(),
        block_time_ms = chain.block_time_ms,
        jit = %args.jit,
        "sequencer ready"
    );
    if args.dev && args.chain.is_none() {
        print_dev_accounts()?;
    }

    let runtime =
        gigas_rpc_eth::runtime("gigas-rpc", None).wrap_err("starting the async runtime")?;
    let rpc_config = args
        .rpc
        .config(SocketAddr::new(args.http_addr, args.http_port));
    let diff_config = DiffConfig {
        dir: args
            .diffs_dir
            .clone()
            .unwrap_or_else(|| datadir.join("archive")),
        retain: (args.diffs_retain > 0).then_some(args.diffs_retain),
        compression: gigas_statediff::Compression {
            level: Some(args.diffs_zstd_level),
        },
        commitment: args.state_commitment,
    };
    let (diff_writer, diff_archive) = DiffWriter::open(node.clone(), diff_config.clone())
        .wrap_err_with(|| format!("opening the diff archive in {}", diff_config.dir.display()))?;
    diff_archive.metrics().register(&mut node.registry());
    let memory = crate::memory::MemoryMetrics::default();
    memory.register(&mut node.registry());
    // Snapshots are written into the archive's `snapshots/` by a full node beside the
    // sequencer (`gigas-fullnode --snapshot-dir ARCHIVE/snapshots`); served from there like
    // the diffs, and by any static server over the archive.
    let routes = gigas_rpc::HttpRoutes::new(
        crate::diffs_http::router(diff_archive.clone(), rpc_config.limit_loopback).merge(
            gigas_snapshot::http::router(
                diff_config
                    .dir
                    .join(gigas_statediff::archive::SNAPSHOTS_DIR),
            ),
        ),
    )
    .with_websocket_paths(["/diffs/stream"]);
    let backend = Arc::new(SequencerBackend::new(node.clone()).with_call_budget(args.rpc.budget()));
    let rpc = runtime
        .block_on(gigas_rpc::RpcServer::start_with_routes(
            rpc_config,
            backend.clone(),
            routes,
        ))
        .wrap_err_with(|| {
            format!(
                "starting JSON-RPC on {}:{} (is the port in use? try --http.port)",
                args.http_addr, args.http_port
            )
        })?;
    info!(url = %format!("http://{}", rpc.local_addr()), "JSON-RPC (HTTP and WebSocket)");
    // One machine-readable line, for scripts and tests that start the node on port 0.
    gigas_launch::announce_rpc(format_args!("http://{}", rpc.local_addr()));
    rpc.metrics().register(&mut node.registry());
    memory.spawn_sampler(&runtime, node.clone(), Some(diff_archive.clone()));
    runtime.spawn(backend.clone().forward_committed());
    runtime.spawn(backend.clone().forward_pending());
    if let Some(addr) = args.metrics {
        let node = node.clone();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .wrap_err_with(|| format!("binding the metrics endpoint {addr}"))?;
        info!(url = %format!("http://{addr}/metrics"), "metrics");
        runtime.spawn(async move {
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let node = node.clone();
                    async move {
                        let mut out = String::new();
                        let _ =
                            prometheus_client::encoding::text::encode(&mut out, &node.registry());
                        (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            out,
                        )
                    }
                }),
            );
            if let Err(e) = axum::serve(listener, app).await {
                error!(error = %e, "metrics endpoint stopped");
            }
        });
    }

    let (stop_diffs, stop_diffs_rx) = tokio::sync::watch::channel(false);
    let diff_task = {
        let node = node.clone();
        runtime.spawn(async move {
            let result = diff_writer.run(stop_diffs_rx).await;
            if let Err(e) = &result {
                // Followers would stall behind a silent archive: stop the node with the cause.
                error!(error = %e, "the diff writer failed; stopping the node");
                node.stop();
            }
            result
        })
    };

    let producer = {
        let node = node.clone();
        std::thread::Builder::new()
            .name("gigas-producer".into())
            .spawn(move || node.run_producer())
            .wrap_err("starting the block producer")?
    };
    let stopper = node.clone();
    runtime.spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        info!("stopping after the current block (Ctrl-C again to kill)");
        stopper.stop();
    });
    let result = producer
        .join()
        .map_err(|_| eyre::eyre!("the block producer panicked"))?;
    // The writer finishes the diffs of every committed block before the process exits.
    let _ = stop_diffs.send(true);
    match runtime.block_on(diff_task) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return Err(e)
                .wrap_err("the diff writer failed (the next start rebuilds the missing diffs)")
        }
        Err(e) => error!(error = %e, "the diff writer panicked"),
    }
    rpc.stop();
    runtime.shutdown_timeout(Duration::from_secs(2));
    result.wrap_err("the block producer failed")?;
    info!("stopped");
    Ok(())
}

fn print_dev_accounts() -> eyre::Result<()> {
    let accounts = dev_accounts()?;
    println!("\nAvailable accounts (10,000 ETH each)\n====================================");
    for (i, a) in accounts.iter().enumerate() {
        println!("({i}) {}", a.address);
    }
    println!("\nPrivate keys\n============");
    for (i, a) in accounts.iter().enumerate() {
        println!("({i}) {}", a.key);
    }
    println!(
        "\nMnemonic: {}\nDerivation path: m/44'/60'/0'/0/i\n",
        gigas_chain::DEV_MNEMONIC
    );
    Ok(())
}

//! The recording: a real sequencer under the load module's Zipf transfer workload, its diffs
//! and block files copied out of its archive with a manifest, its data directory deleted.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use eyre::{bail, eyre, Result, WrapErr};
use gigas_chain::ChainConfig;
use gigas_statediff::archive::{Archive, FileKind};
use gigas_statediff::{BlockFile, DiffFile};
use serde::{Deserialize, Serialize};

use super::FullnodeArgs;
use crate::load::{ensure_genesis, run_load, Distribution, GenesisSpec, LoadArgs, Workload};

/// The manifest's file name in a recording directory (written last: a directory without it
/// is an interrupted recording).
const MANIFEST: &str = "manifest.json";

/// What a recording holds, from its `manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// The chain spec the sequencer ran (its genesis is replayed from it).
    pub chain: PathBuf,
    /// The chain's genesis fingerprint (`ChainConfig::genesis_fingerprint`).
    pub chain_fingerprint: String,
    /// The address that signed the diffs.
    pub sequencer_address: String,
    /// Benchmark accounts.
    pub accounts: u64,
    /// Key seed.
    pub seed: u64,
    /// Draw seed of the workload.
    pub workload_seed: u64,
    /// The workload (older recordings: ETH transfers).
    #[serde(default)]
    pub workload: Workload,
    /// How accounts were drawn (older recordings: Zipf).
    #[serde(default)]
    pub distribution: Distribution,
    /// The rate offered (transactions per second).
    pub rate: f64,
    /// The sequencer's block time (ms).
    pub block_time_ms: u64,
    /// Block gas limit.
    pub gas_limit: u64,
    /// Blocks of load asked for.
    pub blocks_requested: u64,
    /// The first block with transactions (the blocks before it are empty: the sequencer
    /// waited while the generator signed).
    pub first_loaded: u64,
    /// The last block recorded (diffs `0..=last` are in `diffs/`).
    pub last: u64,
    /// The last block's hash.
    pub last_hash: String,
    /// Blocks `first_loaded..=last`.
    pub loaded_blocks: u64,
    /// Transactions in blocks `1..=last` (from the archive's block files).
    pub transactions: u64,
    /// Gas used by blocks `1..=last`.
    pub gas_used: u64,
    /// Bytes of diffs `1..=last` (what a full node downloads).
    pub diff_bytes: u64,
    /// Bytes of diff 0 (the genesis header).
    pub genesis_diff_bytes: u64,
    /// The block files (transactions and receipts) of blocks `1..=last` are in `blocks/`
    /// (older recordings hold diffs only and cannot be re-executed).
    #[serde(default)]
    pub blocks: bool,
    /// Bytes of block files `1..=last`.
    #[serde(default)]
    pub block_bytes: u64,
    /// Whether the load run's one step passed its criteria (if not, the sequencer was
    /// saturated and blocks may be uneven).
    pub load_passed: bool,
    /// Included transactions per second the load run measured.
    pub load_included_tps: f64,
    /// What recorded it: the checkout's git revision.
    pub source: String,
    /// The state commitment's version its diffs carry (0: recorded before the field; such
    /// a recording is made again, since its commitments are no longer this build's).
    #[serde(default)]
    pub commitment_version: u32,
    /// Seconds since the Unix epoch when it was recorded.
    pub recorded_at: u64,
    /// The recording's directory (not stored: filled in on load).
    #[serde(skip)]
    pub dir: PathBuf,
}

impl Manifest {
    /// The path of diff `number`.
    pub fn diff_path(&self, number: u64) -> PathBuf {
        self.dir.join("diffs").join(number.to_string())
    }

    /// The path of the block file (transactions, receipts) of block `number`, if
    /// [`Manifest::blocks`].
    pub fn block_path(&self, number: u64) -> PathBuf {
        self.dir.join("blocks").join(number.to_string())
    }

    /// Whether this recording is the one `args` asks for.
    fn matches(&self, args: &FullnodeArgs) -> bool {
        (self.blocks || !args.verify_execution)
            && self.accounts == args.accounts()
            && self.seed == args.seed
            && self.workload_seed == args.workload_seed
            && self.workload == args.workload
            && self.distribution == args.distribution
            && self.rate == args.rate
            && self.blocks_requested == args.blocks
            && u128::from(self.block_time_ms) == args.block_time.as_millis()
            && self.gas_limit == args.gas_limit
            && self.commitment_version == gigas_statediff::commitment::COMMITMENT_VERSION
    }

    fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path)
            .wrap_err_with(|| format!("reading {}", path.display()))?;
        let mut manifest: Manifest =
            serde_json::from_str(&text).wrap_err_with(|| format!("parsing {}", path.display()))?;
        manifest.dir = dir.to_path_buf();
        Ok(manifest)
    }

    /// The chain spec, checked against the fingerprint recorded.
    pub fn load_chain(&self) -> Result<ChainConfig> {
        let chain = ChainConfig::load(&self.chain)
            .wrap_err_with(|| format!("loading the recording's chain {}", self.chain.display()))?;
        let fingerprint = chain
            .genesis_fingerprint()
            .wrap_err("fingerprinting the chain")?
            .to_string();
        if fingerprint != self.chain_fingerprint {
            bail!(
                "{} is not the chain {} was recorded on (fingerprint {fingerprint}, recorded {}); record again with --rerecord",
                self.chain.display(),
                self.dir.display(),
                self.chain_fingerprint
            );
        }
        Ok(chain)
    }
}

#[derive(Debug, Parser)]
struct LoadCli {
    #[command(flatten)]
    args: LoadArgs,
}

/// Removes a directory when dropped (the sequencer's data directory, a half-written
/// recording).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.0.exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.0) {
                eprintln!("could not remove {}: {e}", self.0.display());
            }
        }
    }
}

/// The recording `args` asks for: the cached one if its manifest matches, else a new one.
pub(super) fn ensure(
    args: &FullnodeArgs,
    spec: &GenesisSpec,
    bin: Option<&Path>,
    genesis_dir: &Path,
    cache: &Path,
) -> Result<Manifest> {
    // Suffixes only off the defaults, so that older recordings keep their names.
    let dir = cache.join(format!(
        "recording-{}-{}-{}-{}{}{}",
        args.accounts(),
        args.seed,
        args.blocks,
        args.rate,
        match args.workload {
            Workload::Transfers => "",
            Workload::Erc20 => "-erc20",
            Workload::Mix => "-mix",
        },
        match args.distribution {
            Distribution::Zipf => "",
            Distribution::Uniform => "-uniform",
        }
    ));
    if !args.rerecord && dir.join(MANIFEST).is_file() {
        match Manifest::load(&dir) {
            Ok(m) if m.matches(args) && m.load_chain().is_ok() => {
                println!(
                    "recording {}: blocks 0..={} ({} with transactions), {} transactions, {:.1} MB of diffs",
                    dir.display(),
                    m.last,
                    m.loaded_blocks,
                    m.transactions,
                    m.diff_bytes as f64 / 1e6
                );
                return Ok(m);
            }
            Ok(m) if !m.blocks && args.verify_execution => eprintln!(
                "{}: recorded without block files, which --verify-execution re-executes; recording again",
                dir.display()
            ),
            Ok(_) => eprintln!(
                "{}: recorded with other settings or chain; recording again",
                dir.display()
            ),
            Err(e) => eprintln!("{}: {e:#}; recording again", dir.display()),
        }
    }
    let bin = bin.ok_or_else(|| {
        eyre!("no recording in {} and no gigas-sequencer binary to make one (build it, or give --sequencer-bin)", dir.display())
    })?;
    record(args, spec, bin, genesis_dir, &dir)
}

fn record(
    args: &FullnodeArgs,
    spec: &GenesisSpec,
    bin: &Path,
    genesis_dir: &Path,
    dir: &Path,
) -> Result<Manifest> {
    let (chain, chain_path) =
        ensure_genesis(Some(bin), genesis_dir, spec, &crate::shared_data("mainnet"))?;
    let chain_path = std::fs::canonicalize(&chain_path)
        .wrap_err_with(|| format!("resolving {}", chain_path.display()))?;
    let sequencer = gigas_fullnode::genesis::sequencer_address(&chain)
        .map_err(|e| eyre!("the benchmark chain: {e}"))?;

    if dir.exists() {
        std::fs::remove_dir_all(dir).wrap_err_with(|| format!("clearing {}", dir.display()))?;
    }
    let partial = PathBuf::from(format!("{}.partial", dir.display()));
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .wrap_err_with(|| format!("clearing {}", partial.display()))?;
    }
    let partial_guard = RemoveOnDrop(partial.clone());
    let node_root = partial.join("sequencer-datadir");
    let node_guard = RemoveOnDrop(node_root.clone());

    let duration_ms = (args.block_time.as_millis() as u64).saturating_mul(args.blocks);
    println!(
        "recording: {} {:?} transactions/s ({:?}) into gigas-sequencer on {} accounts for {} blocks of {} ms ({:.0} s)",
        args.rate,
        args.workload,
        args.distribution,
        args.accounts(),
        args.blocks,
        args.block_time.as_millis(),
        duration_ms as f64 / 1e3
    );
    let mut argv: Vec<String> = [
        "load",
        "--workload",
        match args.workload {
            Workload::Transfers => "transfers",
            Workload::Erc20 => "erc20",
            Workload::Mix => "mix",
        },
        "--distribution",
        match args.distribution {
            Distribution::Zipf => "zipf",
            Distribution::Uniform => "uniform",
        },
        "--rate",
        &args.rate.to_string(),
        "--duration",
        &format!("{duration_ms}ms"),
        "--accounts",
        &args.accounts().to_string(),
        "--seed",
        &args.seed.to_string(),
        "--workload-seed",
        &args.workload_seed.to_string(),
        "--gas-limit",
        &args.gas_limit.to_string(),
        "--block-time",
        &format!("{}ms", args.block_time.as_millis()),
        "--keep-datadir",
        "--check-receipts",
        "16",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (flag, path) in [
        ("--sequencer-bin", bin),
        ("--genesis-dir", genesis_dir),
        ("--datadir-root", &node_root),
        ("--out", &partial.join("load")),
    ] {
        argv.push(flag.to_string());
        argv.push(path.display().to_string());
    }
    if args.quiet {
        argv.push("--quiet".into());
    }
    let load = LoadCli::try_parse_from(&argv)
        .map_err(|e| eyre!("the load arguments: {e}"))?
        .args;
    let report = run_load(&load).wrap_err("the recording's load run")?;
    let step = report
        .steps
        .first()
        .ok_or_else(|| eyre!("the load run made no step"))?;
    if !step.passed {
        eprintln!(
            "warning: the recording's load step did not pass its criteria ({}); the diffs are recorded anyway",
            step.failures.join("; ")
        );
    }

    // The load run kept the node's data directory: the only one under node_root.
    let datadir = std::fs::read_dir(&node_root)
        .wrap_err_with(|| format!("listing {}", node_root.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("gigas-load-node-"))
        })
        .ok_or_else(|| {
            eyre!(
                "the sequencer's data directory is not in {}",
                node_root.display()
            )
        })?;
    let archive =
        Archive::open(&datadir.join("archive")).wrap_err("opening the sequencer's diff archive")?;
    let (low, high) = archive
        .range(FileKind::Diff)?
        .ok_or_else(|| eyre!("the sequencer's archive holds no diff"))?;
    if low != 0 {
        bail!("the sequencer's archive starts at block {low}, not 0");
    }

    let started = Instant::now();
    let read = |kind: FileKind, n: u64| -> Result<Vec<u8>> {
        archive
            .read(kind, n)?
            .ok_or_else(|| eyre!("the archive has no {} file of block {n}", kind.dir_name()))
    };
    let mut headers = Vec::new();
    for n in 1..=high {
        let file = DiffFile::decode(&read(FileKind::Diff, n)?)
            .wrap_err_with(|| format!("decoding diff {n}"))?;
        headers.push(file.header);
    }
    let first_loaded = headers
        .iter()
        .find(|h| h.gas_used > 0)
        .map(|h| h.number)
        .ok_or_else(|| eyre!("no block of the recording holds a transaction"))?;
    let last_loaded = headers
        .iter()
        .rev()
        .find(|h| h.gas_used > 0)
        .map_or(first_loaded, |h| h.number);
    let last = last_loaded.min(first_loaded + args.blocks - 1);

    let diffs = partial.join("diffs");
    let blocks = partial.join("blocks");
    for d in [&diffs, &blocks] {
        std::fs::create_dir_all(d).wrap_err_with(|| format!("creating {}", d.display()))?;
    }
    let (mut diff_bytes, mut genesis_diff_bytes, mut transactions, mut gas_used) = (0, 0, 0, 0);
    let mut block_bytes = 0;
    for n in 0..=last {
        let bytes = read(FileKind::Diff, n)?;
        if n == 0 {
            genesis_diff_bytes = bytes.len() as u64;
        } else {
            diff_bytes += bytes.len() as u64;
            let block_bytes_n = read(FileKind::Block, n)?;
            let block = BlockFile::decode(&block_bytes_n)
                .wrap_err_with(|| format!("decoding block file {n}"))?;
            transactions += block.transactions.len() as u64;
            gas_used += headers[(n - 1) as usize].gas_used;
            block_bytes += block_bytes_n.len() as u64;
            let path = blocks.join(n.to_string());
            std::fs::write(&path, &block_bytes_n)
                .wrap_err_with(|| format!("writing {}", path.display()))?;
        }
        let path = diffs.join(n.to_string());
        std::fs::write(&path, &bytes).wrap_err_with(|| format!("writing {}", path.display()))?;
    }
    let last_header = &headers[(last - 1) as usize];
    println!(
        "copied diffs 0..={last} ({:.1} MB) and block files ({:.1} MB) in {:.1} s; deleting the sequencer's data directory",
        diff_bytes as f64 / 1e6,
        block_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    drop(archive);
    drop(node_guard);

    let manifest = Manifest {
        chain: chain_path,
        chain_fingerprint: chain
            .genesis_fingerprint()
            .wrap_err("fingerprinting the chain")?
            .to_string(),
        sequencer_address: sequencer.to_string(),
        accounts: args.accounts(),
        seed: args.seed,
        workload_seed: args.workload_seed,
        workload: args.workload,
        distribution: args.distribution,
        rate: args.rate,
        block_time_ms: args.block_time.as_millis() as u64,
        gas_limit: args.gas_limit,
        blocks_requested: args.blocks,
        first_loaded,
        last,
        last_hash: last_header.hash_slow().to_string(),
        loaded_blocks: last + 1 - first_loaded,
        transactions,
        gas_used,
        diff_bytes,
        genesis_diff_bytes,
        blocks: true,
        block_bytes,
        load_passed: step.passed,
        load_included_tps: step.included_tps,
        source: gigas_primitives::machine::source_revision(),
        commitment_version: gigas_statediff::commitment::COMMITMENT_VERSION,
        recorded_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        dir: dir.to_path_buf(),
    };
    let path = partial.join(MANIFEST);
    std::fs::write(&path, serde_json::to_string_pretty(&manifest)?)
        .wrap_err_with(|| format!("writing {}", path.display()))?;
    std::fs::rename(&partial, dir)
        .wrap_err_with(|| format!("renaming {} to {}", partial.display(), dir.display()))?;
    drop(partial_guard);
    println!(
        "recorded {} blocks ({}..={last}), {transactions} transactions, in {}",
        manifest.loaded_blocks,
        first_loaded,
        dir.display()
    );
    Ok(manifest)
}

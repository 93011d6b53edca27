//! `gigas-bench diffs`: bytes on the wire per transaction for state diffs, and how fast they
//! encode and decode.
//!
//! Each generated workload is a chain of real blocks: transactions executed by gigas-evm over
//! a state that persists from block to block, each block's ChangeSet encoded against the key
//! index and the prior values as the sequencer will (gigas-statediff), the index then extended
//! with the block's new keys. A warm-up runs until first writes are rare (the index filled by
//! the workload's first blocks, as on a chain that has run for a while); the blocks after it
//! are measured. The shipped mainnet blocks run as one stream with each block's prior values
//! from its fixture's pre-state.
//!
//! Speeds are one core, state changes (accounts plus slots) per second: encode is the packed
//! body plus zstd into a diff file; decode is decompression, the packed body against the
//! follower's state and index, and the chained checksum (the once-per-block signature
//! recovery, about 40 us, is not included).

use std::path::PathBuf;

use alloy_primitives::{address, Address};
use eyre::Result;
use gigas_chain::bench::weth9_code;
use gigas_primitives::machine::Machine;
use gigas_statediff::Compression;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::zipf::{DEVNET_S, DEVNET_V};

mod meter;
mod report;
mod workload;

use meter::dictionary;
pub use report::markdown;
use workload::{generated, mainnet};

/// Who the generated blocks pay their fees to.
const BENEFICIARY: Address = address!("00000000000000000000000000000000000b0b00");
/// The talk's budget: 100 Mbit/s for 100,000 TPS.
const BUDGET: f64 = 125.0;
/// The target and floor.
const TARGET: f64 = 32.0;
const FLOOR: f64 = 50.0;
/// Base fee and gas price of the generated blocks (0.01 and 0.02 gwei, L2-like).
const BASE_FEE: u64 = 10_000_000;
const GAS_PRICE: u128 = 20_000_000;

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct DiffsArgs {
    /// Workloads, comma-separated: `zipf` (once per `--accounts` size), `erc20`, `mainnet`.
    #[arg(long, value_delimiter = ',', default_value = "zipf,erc20,mainnet")]
    pub workloads: Vec<DiffWorkload>,
    /// Account counts the Zipf-Mandelbrot transfers draw from, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    pub accounts: Vec<usize>,
    /// Token holders the ERC-20 transfers draw from (Zipf-Mandelbrot too).
    #[arg(long, default_value_t = 1_000_000)]
    pub holders: usize,
    /// Transactions per generated block.
    #[arg(long, default_value_t = 10_000)]
    pub txs: usize,
    /// Measured blocks per generated workload, after the warm-up.
    #[arg(long, default_value_t = 20)]
    pub blocks: usize,
    /// The warm-up ends after the first block whose first writes are at most this share of
    /// its state changes...
    #[arg(long, default_value_t = 0.05)]
    pub warmup_until: f64,
    /// ...or after this many blocks, whichever comes first.
    #[arg(long, default_value_t = 2_500)]
    pub max_warmup_blocks: usize,
    /// Transfer values: `random` (uniform below 2^56 wei, every digit significant) or
    /// `round` (four significant decimal digits, 0.000001 to 0.9999 ETH).
    #[arg(long, value_enum, default_value = "random")]
    pub values: ValueKind,
    /// zstd level of the diff files.
    #[arg(long, default_value_t = Compression::DEFAULT_LEVEL)]
    pub level: i32,
    /// zstd levels to compare on the measured bodies, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,3,9,19")]
    pub compare_levels: Vec<i32>,
    /// A run of a few minutes: 1M Zipf accounts only, 100k ERC-20 holders, at most 300
    /// warm-up blocks, 10 measured blocks.
    #[arg(long)]
    pub quick: bool,
    /// Directory of mainnet block fixtures. Defaults to ../shared/data/mainnet.
    #[arg(long, value_name = "DIR")]
    pub blocks_dir: Option<PathBuf>,
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/diffs")]
    pub out: PathBuf,
    /// Seed of the generated workloads.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// A workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiffWorkload {
    /// ETH transfers, senders and receivers Zipf-Mandelbrot over `--accounts`.
    Zipf,
    /// WETH9 `transfer` calls, senders and receivers Zipf-Mandelbrot over `--holders`.
    Erc20,
    /// The 50 shipped mainnet blocks.
    Mainnet,
}

/// How transfer values are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueKind {
    /// Uniform below 2^56 wei.
    Random,
    /// 1 to 9999 times 10^12 to 10^14 wei.
    Round,
}

/// The results of one workload.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    /// Its name in the table.
    pub name: String,
    /// Warm-up blocks and their transactions.
    pub warmup_blocks: usize,
    /// Warm-up transactions.
    pub warmup_txs: usize,
    /// Keys in the index when the measurement started.
    pub index_keys: u64,
    /// Memory the index held then (bytes).
    pub index_bytes: usize,
    /// Measured blocks.
    pub blocks: usize,
    /// Measured transactions.
    pub txs: usize,
    /// Measured state changes (accounts plus slots).
    pub changes: usize,
    /// Of which first writes.
    pub first_writes: usize,
    /// Canonical ChangeSet bytes.
    pub raw: usize,
    /// Packed body bytes.
    pub packed: usize,
    /// Diff file bytes (header, signature, framing, zstd body): what goes on the wire.
    pub wire: usize,
    /// Of which header, signature and framing.
    pub overhead: usize,
    /// Diff file bytes with the dictionary experiment's dictionary (0 when not run).
    pub wire_dict: usize,
    /// zstd of the canonical ChangeSet bytes at the same level.
    pub raw_zstd: usize,
    /// Seconds encoding (packed body + zstd file).
    pub encode_s: f64,
    /// Seconds decoding (file + packed body + checksum).
    pub decode_s: f64,
    /// Of encoding: reading the prior values, packing, framing with zstd.
    pub encode_split: [f64; 3],
    /// Of decoding: the file with zstd, the packed body, the checksum.
    pub decode_split: [f64; 3],
    /// Index naming cost of the repeated writes under each layout (bytes, raw and zstd).
    pub index_layouts: IndexLayouts,
    /// Bytes per zstd level (packed bodies) and compression seconds.
    pub levels: Vec<LevelResult>,
}

/// What naming repeated writes costs under each index layout, over the measured blocks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IndexLayouts {
    /// Repeated writes.
    pub repeated: usize,
    /// Fixed width: the bytes the table's size needs, in ChangeSet order.
    pub fixed: (usize, usize),
    /// LEB128 of the index, in ChangeSet order.
    pub varint: (usize, usize),
    /// Sorted by index, LEB128 of the gap (the shipped layout).
    pub gap: (usize, usize),
    /// First-write slot groups whose address already has an account index, and the bytes
    /// naming it by that index would save.
    pub slot_groups: usize,
    /// Of which with an account index.
    pub slot_groups_indexed: usize,
    /// Bytes saved.
    pub slot_group_saving: usize,
}

/// One zstd level on the packed bodies.
#[derive(Debug, Clone, Serialize)]
pub struct LevelResult {
    /// Level.
    pub level: i32,
    /// Compressed bytes.
    pub bytes: usize,
    /// Compression seconds.
    pub seconds: f64,
}

/// A dictionary trained on one workload and tried on the others.
#[derive(Debug, Clone, Serialize)]
pub struct DictionaryResult {
    /// The workload whose bodies trained it.
    pub trained_on: String,
    /// Dictionary size.
    pub size: usize,
    /// Per workload: bytes without, bytes with.
    pub tested: Vec<(String, usize, usize)>,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct DiffsReport {
    /// Machine.
    pub machine: Machine,
    /// Build profile.
    pub build_profile: &'static str,
    /// zstd level.
    pub level: i32,
    /// Transfer values.
    pub values: ValueKind,
    /// Results.
    pub workloads: Vec<WorkloadResult>,
    /// Dictionary experiments.
    pub dictionaries: Vec<DictionaryResult>,
}

fn bar(len: u64, message: String) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} {elapsed} {per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}

fn human(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}k", n / 1_000)
    } else {
        n.to_string()
    }
}

/// Runs the benchmark and writes the report.
pub fn run(args: &DiffsArgs) -> Result<DiffsReport> {
    let mut args = args.clone();
    if args.quick {
        args.accounts = vec![1_000_000];
        args.holders = args.holders.min(100_000);
        args.max_warmup_blocks = args.max_warmup_blocks.min(300);
        args.blocks = args.blocks.min(10);
    }
    let machine = Machine::current();
    let build_profile = crate::build_profile();
    let blocks_dir = args
        .blocks_dir
        .clone()
        .unwrap_or_else(|| crate::shared_data("mainnet"));
    println!("gigas-bench diffs configuration");
    println!(
        "  workloads : {:?}; Zipf-Mandelbrot s = {DEVNET_S}, v = {DEVNET_V} over {:?} accounts; ERC-20 (WETH9) over {} holders",
        args.workloads, args.accounts, args.holders
    );
    println!(
        "  blocks    : {} txs per generated block; warm-up until first writes <= {:.0}% of a block's changes (at most {} blocks); {} measured blocks",
        args.txs,
        args.warmup_until * 100.0,
        args.max_warmup_blocks,
        args.blocks
    );
    println!(
        "  values    : {:?}; gas price {} wei, base fee {BASE_FEE} wei; every generated account starts with 10^6 ETH, every holder with 10^6 WETH",
        args.values, GAS_PRICE
    );
    println!(
        "  zstd      : level {} (compared: {:?}); mainnet fixtures: {}",
        args.level,
        args.compare_levels,
        blocks_dir.display()
    );
    println!(
        "  build     : {build_profile}; machine: {}",
        machine.describe()
    );

    let mut measured = Vec::new();
    for &workload in &args.workloads {
        match workload {
            DiffWorkload::Zipf => {
                for &n in &args.accounts {
                    measured.push(generated(&args, workload, n, None)?);
                }
            }
            DiffWorkload::Erc20 => {
                let code = weth9_code(&blocks_dir)?;
                measured.push(generated(&args, workload, args.holders, Some(&code))?);
            }
            DiffWorkload::Mainnet => measured.push(mainnet(&args, &blocks_dir)?),
        }
    }

    // Dictionaries: trained on the first workload's bodies and on the mainnet blocks', each
    // tried on every workload. The table's dictionary column uses the first.
    let mut dictionaries = Vec::new();
    if !measured.is_empty() {
        dictionaries.extend(dictionary(0, &measured, args.level)?);
    }
    if let Some(m) = measured
        .iter()
        .position(|m| m.result.name.contains("mainnet"))
    {
        if m != 0 {
            dictionaries.extend(dictionary(m, &measured, args.level)?);
        }
    }
    if let Some(d) = dictionaries.first() {
        for (m, (_, without, with)) in measured.iter_mut().zip(&d.tested) {
            let r = &mut m.result;
            let body = (r.wire - r.overhead) as f64;
            r.wire_dict = r.overhead + (body * *with as f64 / (*without).max(1) as f64) as usize;
        }
    }

    let report = DiffsReport {
        machine,
        build_profile,
        level: args.level,
        values: args.values,
        workloads: measured.into_iter().map(|m| m.result).collect(),
        dictionaries,
    };
    crate::write_report(&args.out, "diffs", &report, &markdown(&report))?;
    Ok(report)
}

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

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use alloy_primitives::{
    address, keccak256, Address, Bytes, Signature, B256, KECCAK256_EMPTY, U256,
};
use eyre::{eyre, Result, WrapErr};
use gigas_chain::bench::{weth9_code, WETH9};
use gigas_evm::receipts::receipts_root_and_bloom;
use gigas_evm::revm::context::{BlockEnv, TxEnv};
use gigas_evm::revm::database::CacheDB;
use gigas_evm::revm::primitives::TxKind;
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_evm::revm::DatabaseRef;
use gigas_evm::{
    execute_block, load_fixtures_dir, BlockFixture, PlainEvm, PreparedBlock, PreparedTx,
};
use gigas_primitives::machine::Machine;
use gigas_primitives::{state_checksum, AccountState, ChainSpec, ChangeSet};
use gigas_statediff::{
    decode_body, encode_body, Compression, DiffFile, Header, KeyIndex, MemoryKeyIndex, MemoryState,
    PriorState, PriorValues, StateKey, StoreError,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use gigas_statediff::zstd;

use crate::zipf::{SplitMix64, ZipfMandelbrot, DEVNET_S, DEVNET_V};

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

/// The chain's state: what blocks wrote, over a genesis rule for everything else (every
/// generated account funded, WETH9 deployed with every holder's balance set). One object
/// serves revm (as its database) and the codec (as the prior state), so both read the same.
struct Ledger {
    state: MemoryState,
    genesis_balance: U256,
    weth: Option<Weth>,
}

struct Weth {
    code: Bytecode,
    hash: B256,
    /// Holders' balance slots (untouched ones read as `initial`).
    holder_slots: std::collections::HashSet<U256>,
    initial: U256,
}

impl Ledger {
    fn genesis_account(&self, address: &Address) -> Option<AccountState> {
        if let Some(weth) = self.weth.as_ref().filter(|_| *address == WETH9) {
            return Some(AccountState {
                nonce: 1,
                balance: U256::from(10u64).pow(U256::from(24)),
                code_hash: weth.hash,
            });
        }
        // Every other address holds the genesis balance: the generated accounts are spread
        // over the whole address space, as real ones are.
        Some(AccountState {
            nonce: 0,
            balance: self.genesis_balance,
            code_hash: KECCAK256_EMPTY,
        })
    }

    fn account_now(&self, address: &Address) -> Option<AccountState> {
        self.state
            .account_state(address)
            .or_else(|| self.genesis_account(address))
    }

    fn slot_now(&self, address: &Address, slot: &U256) -> U256 {
        let value = self.state.slot_value(address, slot);
        if !value.is_zero() {
            return value;
        }
        // Balances never reach zero in these workloads: a zero is an untouched slot.
        match &self.weth {
            Some(w) if *address == WETH9 && w.holder_slots.contains(slot) => w.initial,
            _ => U256::ZERO,
        }
    }
}

impl PriorState for Ledger {
    fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError> {
        Ok(self.account_now(address))
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError> {
        Ok(self.slot_now(address, slot))
    }
}

impl DatabaseRef for Ledger {
    type Error = Infallible;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, Infallible> {
        Ok(self.account_now(&address).map(|a| AccountInfo {
            balance: a.balance,
            nonce: a.nonce,
            code_hash: a.code_hash,
            code: None,
            ..Default::default()
        }))
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, Infallible> {
        Ok(match &self.weth {
            Some(w) if w.hash == code_hash => w.code.clone(),
            _ => Bytecode::default(),
        })
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, Infallible> {
        Ok(self.slot_now(&address, &index))
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, Infallible> {
        Ok(keccak256(number.to_be_bytes()))
    }
}

/// The address of generated account `i`: 20 bytes that look random (as keccak-derived
/// addresses do, so that zstd finds nothing to squeeze in them), cheap to recompute.
fn account(i: usize) -> Address {
    let mut rng = SplitMix64(0x0ADD_4E55 ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut bytes = [0u8; 20];
    rng.fill(&mut bytes);
    Address::from(bytes)
}

fn balance_slot(holder: &Address) -> U256 {
    // WETH9 keeps balanceOf at mapping slot 3.
    let mut preimage = [0u8; 64];
    preimage[12..32].copy_from_slice(holder.as_slice());
    preimage[63] = 3;
    U256::from_be_bytes(keccak256(preimage).0)
}

/// Draws the generated blocks of one workload.
struct Generator {
    kind: DiffWorkload,
    dist: ZipfMandelbrot,
    rng: SplitMix64,
    values: ValueKind,
    txs: usize,
    number: u64,
}

impl Generator {
    fn value(&mut self) -> U256 {
        match self.values {
            ValueKind::Random => U256::from(self.rng.next_u64() >> 8),
            ValueKind::Round => {
                let m = 1 + self.rng.next_u64() % 9999;
                let e = 12 + self.rng.next_u64() % 3;
                U256::from(m) * U256::from(10u64).pow(U256::from(e))
            }
        }
    }

    fn block(&mut self, ledger: &Ledger) -> Result<PreparedBlock> {
        self.number += 1;
        let mut nonces: HashMap<Address, u64> = HashMap::new();
        let mut txs = Vec::with_capacity(self.txs);
        for _ in 0..self.txs {
            let from = account(self.dist.rank(self.rng.next_f64()));
            let to = account(self.dist.rank(self.rng.next_f64()));
            let nonce = nonces
                .entry(from)
                .or_insert_with(|| ledger.account_now(&from).map_or(0, |a| a.nonce));
            let (kind, value, data, gas_limit) = match self.kind {
                DiffWorkload::Erc20 => {
                    // transfer(address to, uint256 amount)
                    let mut data = vec![0xa9, 0x05, 0x9c, 0xbb];
                    data.extend_from_slice(&[0u8; 12]);
                    data.extend_from_slice(to.as_slice());
                    data.extend_from_slice(&self.value().to_be_bytes::<32>());
                    (TxKind::Call(WETH9), U256::ZERO, Bytes::from(data), 100_000)
                }
                _ => (TxKind::Call(to), self.value(), Bytes::new(), 21_000),
            };
            txs.push(TxEnv {
                caller: from,
                kind,
                value,
                data,
                nonce: *nonce,
                gas_limit,
                gas_price: GAS_PRICE,
                chain_id: Some(1),
                ..Default::default()
            });
            *nonce += 1;
        }
        let txs = txs
            .into_iter()
            .map(PreparedTx::from_env)
            .collect::<Result<Vec<_>, _>>()?;
        let block_env = BlockEnv {
            number: U256::from(self.number),
            timestamp: U256::from(1_800_000_000 + self.number),
            gas_limit: u64::MAX / 4,
            beneficiary: BENEFICIARY,
            basefee: BASE_FEE,
            prevrandao: Some(B256::with_last_byte(1)),
            ..Default::default()
        };
        Ok(PreparedBlock::synthetic(
            &ChainSpec::mainnet(),
            block_env,
            txs,
        ))
    }
}

/// What the measurement keeps per workload.
struct Measured {
    result: WorkloadResult,
    bodies: Vec<Vec<u8>>,
}

/// Accumulates the measured blocks of a workload.
struct Meter {
    level: i32,
    result: WorkloadResult,
    bodies: Vec<Vec<u8>>,
    parent: Header,
}

impl Meter {
    fn new(name: String, level: i32, compare_levels: &[i32]) -> Self {
        Self {
            level,
            result: WorkloadResult {
                name,
                warmup_blocks: 0,
                warmup_txs: 0,
                index_keys: 0,
                index_bytes: 0,
                blocks: 0,
                txs: 0,
                changes: 0,
                first_writes: 0,
                raw: 0,
                packed: 0,
                wire: 0,
                overhead: 0,
                wire_dict: 0,
                raw_zstd: 0,
                encode_s: 0.0,
                decode_s: 0.0,
                encode_split: [0.0; 3],
                decode_split: [0.0; 3],
                index_layouts: IndexLayouts::default(),
                levels: compare_levels
                    .iter()
                    .map(|&level| LevelResult {
                        level,
                        bytes: 0,
                        seconds: 0.0,
                    })
                    .collect(),
            },
            bodies: Vec::new(),
            parent: Header {
                gas_limit: 1_000_000_000,
                state_root: keccak256(b"gigas bench genesis"),
                ..Default::default()
            },
        }
    }

    /// The sealed header of the next block: real receipts root and bloom, the chained
    /// checksum, the parent's hash. The transactions root is a stand-in of the same size
    /// (these transactions are unsigned).
    fn header(
        &self,
        template: Option<&Header>,
        outcome: &gigas_evm::BlockOutcome,
        raw: &[u8],
    ) -> Header {
        let mut header = match template {
            Some(h) => h.clone(),
            None => {
                let (receipts_root, logs_bloom) = receipts_root_and_bloom(&outcome.receipts);
                Header {
                    beneficiary: BENEFICIARY,
                    gas_limit: self.parent.gas_limit,
                    gas_used: outcome.gas_used(),
                    timestamp: self.parent.timestamp + 1,
                    base_fee_per_gas: Some(BASE_FEE),
                    receipts_root,
                    logs_bloom,
                    transactions_root: keccak256(self.parent.number.to_be_bytes()),
                    ..Default::default()
                }
            }
        };
        header.parent_hash = self.parent.hash_slow();
        header.number = self.parent.number + 1;
        header.state_root = state_checksum(&self.parent.state_root, raw);
        header
    }

    /// Encodes one block (and, when `measure`, decodes it and counts everything). Returns
    /// the block's new keys and its share of first writes.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &mut self,
        measure: bool,
        template: Option<&Header>,
        outcome: &gigas_evm::BlockOutcome,
        txs: usize,
        index: &MemoryKeyIndex,
        prior: &dyn PriorState,
        follower: &dyn PriorState,
    ) -> Result<(Vec<StateKey>, f64)> {
        let changes = &outcome.changes;
        let raw = changes.encode();
        let header = self.header(template, outcome, &raw);
        let signature = Signature::new(U256::from(1), U256::from(1), false);
        let count = changes.accounts().len() + changes.storage().len();

        let started = Instant::now();
        let captured = PriorValues::capture(changes, &prior).map_err(|e| eyre!("{e}"))?;
        let t_capture = started.elapsed().as_secs_f64();
        let packed = encode_body(changes, index, &captured).map_err(|e| eyre!("{e}"))?;
        let t_pack = started.elapsed().as_secs_f64();
        let file = DiffFile {
            header,
            signature,
            body: packed.bytes,
        };
        let bytes = file
            .encode(&Compression {
                level: Some(self.level),
            })
            .map_err(|e| eyre!("{e}"))?;
        let encode_s = started.elapsed().as_secs_f64();
        let first_share = packed.new_keys.len() as f64 / count.max(1) as f64;
        if measure {
            let started = Instant::now();
            let decoded_file = DiffFile::decode(&bytes).map_err(|e| eyre!("{e}"))?;
            let t_file = started.elapsed().as_secs_f64();
            let decoded = decode_body(&decoded_file.body, index, follower)
                .map_err(|e| eyre!("block {}: {e}", file.header.number))?;
            let t_body = started.elapsed().as_secs_f64();
            let checksum = state_checksum(&self.parent.state_root, &decoded.canonical);
            let decode_s = started.elapsed().as_secs_f64();
            if decoded.changes != *changes || checksum != file.header.state_root {
                return Err(eyre!(
                    "block {}: the decoded diff differs from the block's changes",
                    file.header.number
                ));
            }
            let r = &mut self.result;
            r.blocks += 1;
            r.txs += txs;
            r.changes += count;
            r.first_writes += packed.new_keys.len();
            r.raw += raw.len();
            r.packed += file.body.len();
            r.wire += bytes.len();
            r.overhead += bytes.len() - zstd_len(&file.body, self.level)?;
            r.raw_zstd += zstd_len(&raw, self.level)?;
            r.encode_s += encode_s;
            r.decode_s += decode_s;
            for (acc, t) in
                r.encode_split
                    .iter_mut()
                    .zip([t_capture, t_pack - t_capture, encode_s - t_pack])
            {
                *acc += t;
            }
            for (acc, t) in
                r.decode_split
                    .iter_mut()
                    .zip([t_file, t_body - t_file, decode_s - t_body])
            {
                *acc += t;
            }
            for l in &mut r.levels {
                let started = Instant::now();
                l.bytes += zstd_len(&file.body, l.level)?;
                l.seconds += started.elapsed().as_secs_f64();
            }
            index_layouts(&mut r.index_layouts, changes, index, self.level)?;
            self.bodies.push(file.body.clone());
        }
        self.parent = file.header;
        Ok((packed.new_keys, first_share))
    }

    fn finish(self) -> Measured {
        Measured {
            result: self.result,
            bodies: self.bodies,
        }
    }
}

fn zstd_len(bytes: &[u8], level: i32) -> Result<usize> {
    Ok(zstd::bulk::compress(bytes, level)?.len())
}

fn varint_len(x: u64) -> usize {
    ((64 - x.leading_zeros() as usize).max(1)).div_ceil(7)
}

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// The index naming of one block's repeated writes under three layouts, as byte streams (so
/// that zstd's effect on each is measured, not guessed), and what naming first-write slot
/// groups' addresses by their account index would save.
fn index_layouts(
    layouts: &mut IndexLayouts,
    changes: &ChangeSet,
    index: &MemoryKeyIndex,
    level: i32,
) -> Result<()> {
    let table = index.key_count();
    let width = (((64 - table.leading_zeros()) as usize).div_ceil(8)).max(1);
    let look = |key: StateKey| index.index_of(&key).map_err(|e| eyre!("{e}"));
    let mut lists: Vec<Vec<u64>> = vec![Vec::new(), Vec::new()];
    for (address, _) in changes.accounts() {
        if let Some(i) = look(StateKey::Account(*address))? {
            lists[0].push(i);
        }
    }
    let mut last_group: Option<Address> = None;
    for (address, slot, _) in changes.storage() {
        match look(StateKey::Slot(*address, *slot))? {
            Some(i) => lists[1].push(i),
            None => {
                if last_group != Some(*address) {
                    last_group = Some(*address);
                    layouts.slot_groups += 1;
                    if let Some(i) = look(StateKey::Account(*address))? {
                        layouts.slot_groups_indexed += 1;
                        // A flag bit would be free in the group's count; the index replaces
                        // the 20-byte address.
                        layouts.slot_group_saving += 20 - varint_len(i);
                    }
                }
            }
        }
    }
    let (mut fixed, mut varint, mut gap) = (Vec::new(), Vec::new(), Vec::new());
    for list in &mut lists {
        layouts.repeated += list.len();
        for &i in list.iter() {
            fixed.extend_from_slice(&i.to_be_bytes()[8 - width..]);
            put_varint(&mut varint, i);
        }
        list.sort_unstable();
        let mut next = 0;
        for &i in list.iter() {
            put_varint(&mut gap, i - next);
            next = i + 1;
        }
    }
    for (acc, stream) in [
        (&mut layouts.fixed, fixed),
        (&mut layouts.varint, varint),
        (&mut layouts.gap, gap),
    ] {
        acc.0 += stream.len();
        acc.1 += zstd_len(&stream, level)?;
    }
    Ok(())
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

/// Runs a generated workload: warm-up, then the measured blocks.
fn generated(
    args: &DiffsArgs,
    kind: DiffWorkload,
    population: usize,
    weth: Option<&Bytes>,
) -> Result<Measured> {
    let name = match kind {
        DiffWorkload::Erc20 => format!("ERC-20 transfers, {} holders", human(population)),
        _ => format!("Zipf transfers, {} accounts", human(population)),
    };
    let started = Instant::now();
    let dist = ZipfMandelbrot::new(population, DEVNET_S, DEVNET_V);
    let mut ledger = Ledger {
        state: MemoryState::new(),
        // 10^6 ETH each: no sender runs dry in any run this bench makes.
        genesis_balance: U256::from(10u64).pow(U256::from(24)),
        weth: None,
    };
    if let Some(code) = weth {
        let code = Bytecode::new_raw(code.clone());
        let holder_slots = (0..population).map(|i| balance_slot(&account(i))).collect();
        ledger.weth = Some(Weth {
            hash: code.hash_slow(),
            code,
            holder_slots,
            initial: U256::from(10u64).pow(U256::from(24)),
        });
    }
    let mut generator = Generator {
        kind,
        dist,
        rng: SplitMix64(args.seed ^ population as u64),
        values: args.values,
        txs: args.txs,
        number: 0,
    };
    let mut index = MemoryKeyIndex::new();
    let mut meter = Meter::new(name.clone(), args.level, &args.compare_levels);
    tracing::info!("{name}: set up in {:.1} s", started.elapsed().as_secs_f64());

    let warmup = bar(
        args.max_warmup_blocks as u64,
        format!("warm-up {}", human(population)),
    );
    let mut blocks = 0;
    loop {
        let first = generated_block(&mut generator, &mut ledger, &mut index, &mut meter, false)?;
        blocks += 1;
        warmup.inc(1);
        warmup.set_message(format!(
            "warm-up {}: {:.1}% new",
            human(population),
            first * 100.0
        ));
        if first <= args.warmup_until || blocks >= args.max_warmup_blocks {
            break;
        }
    }
    warmup.finish_and_clear();
    meter.result.warmup_blocks = blocks;
    meter.result.warmup_txs = blocks * args.txs;
    meter.result.index_keys = index.key_count();
    meter.result.index_bytes = index.memory_bytes();
    tracing::info!(
        "{name}: warm-up {blocks} blocks ({} txs), {} keys indexed, {:.0} s",
        blocks * args.txs,
        index.key_count(),
        started.elapsed().as_secs_f64()
    );

    let measured = bar(args.blocks as u64, format!("measure {}", human(population)));
    for _ in 0..args.blocks {
        generated_block(&mut generator, &mut ledger, &mut index, &mut meter, true)?;
        measured.inc(1);
    }
    measured.finish_and_clear();
    Ok(meter.finish())
}

/// Generates, executes and meters one block, then applies it to the ledger and the key index;
/// returns the share of its diff's keys written for the first time.
fn generated_block(
    generator: &mut Generator,
    ledger: &mut Ledger,
    index: &mut MemoryKeyIndex,
    meter: &mut Meter,
    measured: bool,
) -> Result<f64> {
    let block = generator.block(ledger)?;
    let outcome = {
        let mut evm = PlainEvm::new(CacheDB::new(&*ledger), &block);
        execute_block(&mut evm, &block)?
    };
    let (new_keys, first) = meter.block(
        measured,
        None,
        &outcome,
        block.txs.len(),
        index,
        &*ledger,
        &*ledger,
    )?;
    ledger.state.apply(&outcome.changes);
    index.extend(&new_keys).map_err(|e| eyre!("{e}"))?;
    Ok(first)
}

/// The state before a mainnet block, from its fixture's pre-state.
fn prestate(fixture: &BlockFixture) -> MemoryState {
    let mut state = MemoryState::new();
    for (address, account) in &fixture.prestate {
        state.insert_account(*address, account.state());
        for (slot, value) in account.slots() {
            state.insert_slot(*address, slot, value);
        }
    }
    state
}

fn mainnet(args: &DiffsArgs, blocks_dir: &std::path::Path) -> Result<Measured> {
    let fixtures = load_fixtures_dir(blocks_dir)
        .wrap_err_with(|| format!("cannot load blocks from {}", blocks_dir.display()))?;
    let chain = ChainSpec::mainnet();
    let mut meter = Meter::new(
        format!("{} mainnet blocks", fixtures.len()),
        args.level,
        &args.compare_levels,
    );
    let mut index = MemoryKeyIndex::new();
    let progress = bar(fixtures.len() as u64, "mainnet".to_string());
    for fixture in &fixtures {
        let block = PreparedBlock::from_fixture(fixture, &chain)?;
        let outcome = {
            let mut evm = PlainEvm::new(fixture.database(), &block);
            execute_block(&mut evm, &block)?
        };
        let before = prestate(fixture);
        let (new_keys, _) = meter.block(
            true,
            Some(&fixture.block.header.inner),
            &outcome,
            block.txs.len(),
            &index,
            &before,
            &before,
        )?;
        index.extend(&new_keys).map_err(|e| eyre!("{e}"))?;
        progress.inc(1);
    }
    progress.finish_and_clear();
    // No warm-up here: the index is what the 50 blocks themselves built.
    meter.result.index_keys = index.key_count();
    meter.result.index_bytes = index.memory_bytes();
    Ok(meter.finish())
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

/// Trains a dictionary on the first half of workload `train`'s bodies and measures every
/// workload's bodies with and without it (the training workload on its second half only).
/// `None`, with a warning, when zstd cannot train on so few bodies: a short run skips the
/// experiment rather than losing the rest of its report.
fn dictionary(
    train: usize,
    workloads: &[Measured],
    level: i32,
) -> Result<Option<DictionaryResult>> {
    let source = &workloads[train];
    let half = source.bodies.len() / 2;
    // zstd trains best on many samples of a few kilobytes: cut the bodies.
    let samples: Vec<&[u8]> = source.bodies[..half]
        .iter()
        .flat_map(|b| b.chunks(16 * 1024))
        .collect();
    let dict = match zstd::dict::from_samples(&samples, 64 * 1024) {
        Ok(dict) => dict,
        Err(e) => {
            tracing::warn!(
                "no dictionary trained on {} ({} samples from {} bodies: {e}); \
                 measure more blocks (--blocks) for the dictionary experiment",
                source.result.name,
                samples.len(),
                half
            );
            return Ok(None);
        }
    };
    let mut compressor = zstd::bulk::Compressor::with_dictionary(level, &dict)?;
    let mut tested = Vec::new();
    for (w, measured) in workloads.iter().enumerate() {
        let bodies = if w == train {
            &measured.bodies[half..]
        } else {
            &measured.bodies[..]
        };
        let (mut without, mut with) = (0, 0);
        for body in bodies {
            without += zstd_len(body, level)?;
            with += compressor.compress(body)?.len();
        }
        tested.push((measured.result.name.clone(), without, with));
    }
    Ok(Some(DictionaryResult {
        trained_on: format!("{} (first half of the measured blocks)", source.result.name),
        size: dict.len(),
        tested,
    }))
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

/// The report as Markdown.
pub fn markdown(r: &DiffsReport) -> String {
    let mut md = String::from("# State diffs: bytes on the wire and codec speed\n\n");
    let _ = writeln!(
        md,
        "- machine: {}; build: {}; zstd level {}; transfer values: {:?}\n",
        r.machine.describe(),
        r.build_profile,
        r.level,
        r.values
    );
    let _ = writeln!(
        md,
        "| workload | warm-up blocks (txs) | measured txs | state changes | first writes | ChangeSet B/tx | packed B/tx | **wire B/tx** | with dict B/tx | zstd(ChangeSet) B/tx | ChangeSet B/change | packed B/change | wire B/change | encode M changes/s | decode M changes/s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for w in &r.workloads {
        let tx = w.txs.max(1) as f64;
        let ch = w.changes.max(1) as f64;
        let _ = writeln!(
            md,
            "| {} | {} ({}) | {} | {} | {:.1}% | {:.1} | {:.1} | **{:.1}** | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
            w.name,
            w.warmup_blocks,
            w.warmup_txs,
            w.txs,
            w.changes,
            100.0 * w.first_writes as f64 / ch,
            w.raw as f64 / tx,
            w.packed as f64 / tx,
            w.wire as f64 / tx,
            w.wire_dict as f64 / tx,
            w.raw_zstd as f64 / tx,
            w.raw as f64 / ch,
            w.packed as f64 / ch,
            w.wire as f64 / ch,
            w.changes as f64 / w.encode_s.max(1e-9) / 1e6,
            w.changes as f64 / w.decode_s.max(1e-9) / 1e6,
        );
    }
    let _ = writeln!(
        md,
        "\nBudget: {BUDGET} B/tx (100 Mbit/s at 100,000 TPS); target {TARGET} B per Zipf transfer, floor {FLOOR}. \
         `wire` is the whole diff file (header, signature, framing, zstd body); header and framing are {}.",
        r.workloads
            .iter()
            .map(|w| format!("{:.2} B/tx in {}", w.overhead as f64 / w.txs.max(1) as f64, w.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for w in &r.workloads {
        if w.txs > 0 && w.name.starts_with("Zipf") {
            let b = w.wire as f64 / w.txs as f64;
            let verdict = if b <= TARGET {
                "meets the 32 B target"
            } else if b <= FLOOR {
                "above the 32 B target, below the 50 B floor"
            } else {
                "ABOVE the 50 B floor"
            };
            let _ = writeln!(
                md,
                "- {}: {b:.1} B/tx {verdict}; a 100 Mbit/s link carries {:.0} such transfers per second.",
                w.name,
                12.5e6 / b
            );
        }
    }

    let _ = writeln!(
        md,
        "\n## Naming repeated writes: index layouts (bytes per transaction, raw / after zstd)\n\n| workload | repeated writes | index keys | index memory | fixed width | LEB128 index | sorted, LEB128 gap (shipped) | first-write slot groups (with an account index) | saving if named by account index |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for w in &r.workloads {
        let tx = w.txs.max(1) as f64;
        let l = &w.index_layouts;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} MB | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {} ({}) | {:.3} B/tx |",
            w.name,
            l.repeated,
            w.index_keys,
            w.index_bytes as f64 / 1e6,
            l.fixed.0 as f64 / tx,
            l.fixed.1 as f64 / tx,
            l.varint.0 as f64 / tx,
            l.varint.1 as f64 / tx,
            l.gap.0 as f64 / tx,
            l.gap.1 as f64 / tx,
            l.slot_groups,
            l.slot_groups_indexed,
            l.slot_group_saving as f64 / tx,
        );
    }

    let _ = writeln!(
        md,
        "\n## Where codec time goes (ns per state change, one core)\n\n| workload | encode: read prior values | pack | zstd + frame | decode: file + unzstd | unpack (index, prior state, ChangeSet) | checksum |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for w in &r.workloads {
        let ns = |s: f64| s / w.changes.max(1) as f64 * 1e9;
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            w.name,
            ns(w.encode_split[0]),
            ns(w.encode_split[1]),
            ns(w.encode_split[2]),
            ns(w.decode_split[0]),
            ns(w.decode_split[1]),
            ns(w.decode_split[2]),
        );
    }
    let _ = writeln!(
        md,
        "\n## zstd levels on the packed bodies (B/tx, compression MB/s)\n"
    );
    if let Some(first) = r.workloads.first() {
        let mut head = String::from("| workload |");
        let mut rule = String::from("|---|");
        for l in &first.levels {
            let _ = write!(head, " level {} |", l.level);
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for w in &r.workloads {
            let mut row = format!("| {} |", w.name);
            for l in &w.levels {
                let _ = write!(
                    row,
                    " {:.1} ({:.0} MB/s) |",
                    l.bytes as f64 / w.txs.max(1) as f64,
                    w.packed as f64 / l.seconds.max(1e-9) / 1e6
                );
            }
            let _ = writeln!(md, "{row}");
        }
    }

    let _ = writeln!(
        md,
        "\n## zstd dictionaries (64 KiB, trained with zstd::dict::from_samples)\n"
    );
    if r.dictionaries.is_empty() {
        let _ = writeln!(
            md,
            "- not run: too few measured bodies to train on (raise --blocks)"
        );
    }
    for d in &r.dictionaries {
        let _ = writeln!(
            md,
            "- trained on {} ({} bytes): {}",
            d.trained_on,
            d.size,
            d.tested
                .iter()
                .map(|(name, without, with)| format!(
                    "{name} {:+.2}%",
                    100.0 * (*with as f64 - *without as f64) / (*without).max(1) as f64
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    md
}

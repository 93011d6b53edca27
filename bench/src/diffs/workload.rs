//! The workloads measured: the generated chains (the [`Ledger`] their blocks run over, the
//! [`Generator`] that draws them, [`generated`]) and the shipped mainnet blocks
//! ([`mainnet`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Instant;

use alloy_primitives::{keccak256, Address, Bytes, B256, KECCAK256_EMPTY, U256};
use eyre::{eyre, Result, WrapErr};
use gigas_chain::bench::WETH9;
use gigas_evm::revm::context::{BlockEnv, TxEnv};
use gigas_evm::revm::database::CacheDB;
use gigas_evm::revm::primitives::TxKind;
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_evm::revm::DatabaseRef;
use gigas_evm::{
    execute_block, load_fixtures_dir, BlockFixture, PlainEvm, PreparedBlock, PreparedTx,
};
use gigas_primitives::{AccountState, ChainSpec};
use gigas_statediff::{MemoryKeyIndex, MemoryState, PriorState, StoreError};

use super::meter::{Measured, Meter};
use super::{bar, human, DiffWorkload, DiffsArgs, ValueKind, BASE_FEE, BENEFICIARY, GAS_PRICE};
use crate::zipf::{SplitMix64, ZipfMandelbrot, DEVNET_S, DEVNET_V};

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

/// Runs a generated workload: warm-up, then the measured blocks.
pub(super) fn generated(
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

pub(super) fn mainnet(args: &DiffsArgs, blocks_dir: &std::path::Path) -> Result<Measured> {
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

//! What `commit_block` costs for a block of 1,000 signed transfers: real EIP-1559
//! transactions, their receipts, a real ChangeSet of 2,001 accounts and the old values of
//! those accounts, committed durably. Prints a table; asserts nothing about time.
//!
//! `cargo test --release -p gigas-history --test commit_cost -- --ignored --nocapture`

mod common;

use std::time::Instant;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, Transaction, TxEnvelope};
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use common::{receipt, signed_tx, signer, OwnedBlock};
use gigas_history::{History, HistoryOptions};
use gigas_primitives::changeset::{AccountState, ChangeSetBuilder};
use gigas_primitives::state_keys::{account_key, StoredAccount};

const TRANSFERS: usize = 1_000;
const WARMUP: u64 = 3;
const TIMED: u64 = 15;

fn account_value(nonce: u64, balance: U256) -> Vec<u8> {
    StoredAccount {
        state: AccountState {
            nonce,
            balance,
            code_hash: alloy_primitives::KECCAK256_EMPTY,
        },
        slots: 0,
    }
    .encode()
    .to_vec()
}

/// Block `number` of the workload: sender `i` pays a fresh recipient.
fn transfer_block(number: u64, parent: B256, senders: &[PrivateKeySigner]) -> OwnedBlock {
    let nonce = number - 1;
    let mut txs: Vec<Recovered<TxEnvelope>> = Vec::with_capacity(TRANSFERS);
    std::thread::scope(|scope| {
        let halves: Vec<_> = senders
            .chunks(TRANSFERS / 2)
            .enumerate()
            .map(|(half, chunk)| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            let to = Address::from_word(B256::from(U256::from(
                                number * 1_000_000 + (half * TRANSFERS / 2 + i) as u64,
                            )));
                            signed_tx(s, 2, nonce, to, Bytes::new())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for half in halves {
            txs.extend(half.join().expect("signing thread"));
        }
    });
    let receipts: Vec<ReceiptEnvelope> = txs
        .iter()
        .enumerate()
        .map(|(i, tx)| receipt(tx, 21_000 * (i as u64 + 1), true, Vec::new()))
        .collect();

    let coinbase = Address::repeat_byte(0xC0);
    let mut builder = ChangeSetBuilder::new();
    let mut state_history = Vec::with_capacity(2 * TRANSFERS + 1);
    let balance = U256::from(10u64).pow(U256::from(22u64));
    for tx in &txs {
        let sender = tx.signer();
        builder.account(
            sender,
            AccountState {
                nonce: nonce + 1,
                balance: balance - U256::from(nonce + 1),
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            },
            false,
        );
        state_history.push((
            account_key(&sender).to_vec(),
            Some(account_value(nonce, balance - U256::from(nonce))),
        ));
        let to = tx.to().expect("a call");
        builder.account(
            to,
            AccountState {
                nonce: 0,
                balance: U256::from(1_000 + nonce),
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            },
            false,
        );
        state_history.push((account_key(&to).to_vec(), None));
    }
    builder.account(
        coinbase,
        AccountState {
            nonce: 0,
            balance: U256::from(number),
            code_hash: alloy_primitives::KECCAK256_EMPTY,
        },
        false,
    );
    state_history.push((
        account_key(&coinbase).to_vec(),
        Some(account_value(0, U256::from(number - 1))),
    ));
    let changeset = builder.build().encode();
    OwnedBlock::seal(number, parent, txs, receipts, changeset, state_history)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn commit_cost_of_a_block_of_1000_transfers() {
    let senders: Vec<PrivateKeySigner> =
        (0..TRANSFERS as u64).map(|i| signer(10_000 + i)).collect();
    let genesis = OwnedBlock::seal(
        0,
        B256::ZERO,
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let mut blocks = vec![genesis];
    for number in 1..=WARMUP + TIMED {
        let parent = blocks.last().map(|b| b.hash).unwrap_or_default();
        blocks.push(transfer_block(number, parent, &senders));
    }
    let b = &blocks[1];
    println!(
        "block: {} transfers, {} state keys, ChangeSet {} bytes",
        b.transactions.len(),
        b.state_history.len(),
        b.changeset.len()
    );
    println!("| write_map | window | median ms | p90 ms | max ms | table bytes per block |");
    println!("|---|---|---|---|---|---|");
    for (write_map, window) in [
        (false, 10_000),
        (true, 10_000),
        (false, 4),
        (true, 4),
        (false, 10_000),
        (true, 10_000),
    ] {
        let dir = tempfile::tempdir_in(
            std::env::var("GIGAS_BENCH_DIR")
                .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
        )
        .unwrap();
        let history = History::open(
            dir.path(),
            HistoryOptions {
                write_map,
                state_history_blocks: window,
                ..HistoryOptions::default()
            },
        )
        .unwrap();
        let mut times = Vec::new();
        for block in &blocks {
            let start = Instant::now();
            history.commit_block(&block.record()).unwrap();
            if block.header.number > WARMUP {
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        let stats = history.table_stats().unwrap();
        let bytes: u64 = stats.iter().map(|s| s.bytes).sum();
        times.sort_by(f64::total_cmp);
        println!(
            "| {write_map} | {window} | {:.2} | {:.2} | {:.2} | {} |",
            percentile(&times, 0.5),
            percentile(&times, 0.9),
            times.last().copied().unwrap_or_default(),
            bytes / (WARMUP + TIMED),
        );
        if window == 10_000 {
            // The fixed cost: empty blocks (a header, an empty ChangeSet), mostly the syncs.
            let mut parent = blocks.last().map(|b| b.hash).unwrap_or_default();
            let mut empty = Vec::new();
            for number in WARMUP + TIMED + 1..=WARMUP + TIMED + 50 {
                let block = OwnedBlock::seal(
                    number,
                    parent,
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                );
                parent = block.hash;
                let start = Instant::now();
                history.commit_block(&block.record()).unwrap();
                empty.push(start.elapsed().as_secs_f64() * 1e3);
            }
            empty.sort_by(f64::total_cmp);
            println!(
                "|   empty blocks | | {:.2} | {:.2} | {:.2} | |",
                percentile(&empty, 0.5),
                percentile(&empty, 0.9),
                empty.last().copied().unwrap_or_default()
            );
        }
        if !write_map && window == 4 {
            for s in &stats {
                println!(
                    "    {:<22} {:>9} rows {:>12} bytes",
                    s.table.name(),
                    s.entries,
                    s.bytes
                );
            }
        }
    }
}

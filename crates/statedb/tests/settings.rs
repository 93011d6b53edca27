//! Measurements behind the environment settings and the writer's modes, ignored by default
//! (they take minutes at full size and load the machine):
//!
//! ```text
//! GIGAS_STATEDB_ACCOUNTS=10000000 GIGAS_STATEDB_BLOCKS=300 \
//!   cargo test --release -p gigas-statedb --test settings -- --ignored --nocapture
//! ```
//!
//! A genesis of N accounts (`GIGAS_STATEDB_ACCOUNTS`, default 200,000), then blocks of
//! Zipf-skewed transfers (`GIGAS_STATEDB_TRANSFERS` per block, default 2,000: two account
//! changes each) applied under each configuration in turn, on the same growing chain:
//! batched (no root, a commit every 50 blocks) with sorted and with ChangeSet-order hashed
//! writes, live (root and commit every block), each with the write map on and off. Prints
//! state changes per second with the time split between writing, the trie and the commit.
//! Memory limits (readahead) are the next issue's: without one the page cache holds
//! everything and readahead changes nothing here.

mod common;

use std::time::Instant;

use alloy_primitives::{Address, U256};
use common::{address, small_options, Chain, Rng};
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use gigas_statedb::{
    BlockToApply, GenesisEntry, HashedWrites, StateDb, StateDbOptions, WriterOptions,
};
use gigas_statediff::StateKey;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A Zipf-like skew: low indices are hot.
fn skewed(rng: &mut Rng, n: u64) -> u64 {
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    ((n as f64) * u.powi(3)) as u64 % n
}

struct Stream {
    rng: Rng,
    accounts: u64,
    transfers: u64,
    chain: Chain,
    /// Balances and nonces of the accounts touched so far (the rest are at genesis values).
    touched: std::collections::HashMap<Address, AccountState>,
}

impl Stream {
    fn next_block(&mut self) -> ChangeSet {
        let mut b = ChangeSetBuilder::new();
        for _ in 0..self.transfers {
            let from = address(skewed(&mut self.rng, self.accounts));
            let to = address(skewed(&mut self.rng, self.accounts));
            for (a, nonce) in [(from, 1), (to, 0)] {
                let s = self.touched.entry(a).or_insert(AccountState {
                    nonce: 0,
                    balance: U256::from(10u64.pow(18)),
                    code_hash: alloy_primitives::KECCAK256_EMPTY,
                });
                s.nonce += nonce;
                s.balance = s.balance.wrapping_sub(U256::from(1 + nonce));
                b.account(a, *s, false);
            }
        }
        b.build()
    }
}

#[derive(Default)]
struct Split {
    changes: u64,
    apply: f64,
    trie: f64,
    commit: f64,
}

fn run(
    db: &StateDb,
    stream: &mut Stream,
    options: WriterOptions,
    blocks: u64,
    next_index: &mut u64,
) -> Split {
    let mut writer = db.writer(options).expect("writer");
    let mut split = Split::default();
    for _ in 0..blocks {
        let changes = stream.next_block();
        // Every changed key new to the index gets the next index, as a diff would name it.
        let keys: Vec<StateKey> = changes
            .accounts()
            .iter()
            .map(|(a, _)| StateKey::Account(*a))
            .filter(|k| {
                gigas_statediff::KeyIndex::index_of(&writer, k)
                    .expect("index")
                    .is_none()
            })
            .collect();
        *next_index += keys.len() as u64;
        let (header, hash) = stream.chain.next(&changes);
        let start = Instant::now();
        let root = writer
            .apply(BlockToApply {
                header: &header,
                hash,
                signature: None,
                changes: &changes,
                hashed: None,
                new_keys: &keys,
                lattice: None,
                commitment: None,
            })
            .expect("applies");
        let elapsed = start.elapsed().as_secs_f64();
        let trie = root.map_or(0.0, |r| r.seconds);
        split.trie += trie;
        split.apply += elapsed - trie;
        split.changes += changes.accounts().len() as u64;
        if writer.should_commit() {
            let start = Instant::now();
            writer.commit().expect("commits");
            split.commit += start.elapsed().as_secs_f64();
        }
    }
    let start = Instant::now();
    writer.commit().expect("commits");
    split.commit += start.elapsed().as_secs_f64();
    split
}

#[test]
#[ignore = "a measurement: minutes at full size; run with --ignored --nocapture"]
fn apply_throughput_by_setting() {
    let accounts = env("GIGAS_STATEDB_ACCOUNTS", 200_000);
    let blocks = env("GIGAS_STATEDB_BLOCKS", 40);
    let transfers = env("GIGAS_STATEDB_TRANSFERS", 2_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let chain = Chain::genesis();
    let start = Instant::now();
    {
        let db = StateDb::open(dir.path(), small_options()).expect("opens");
        let entries = (0..accounts).map(|i| {
            Ok::<_, std::io::Error>(GenesisEntry::Account {
                address: address(i),
                nonce: 0,
                balance: U256::from(10u64.pow(18)),
                code: None,
            })
        });
        let outcome = db
            .apply_genesis(chain.genesis_block(), entries, 1_000_000)
            .expect("genesis");
        let stats = db.table_stats().expect("stats");
        let bytes: u64 = stats.iter().map(|t| t.bytes).sum();
        println!(
            "genesis: {accounts} accounts in {:.1} s, root {}, {:.1} MB of pages",
            start.elapsed().as_secs_f64(),
            outcome.state_root,
            bytes as f64 / 1e6
        );
    }
    let mut stream = Stream {
        rng: Rng::new(1),
        accounts,
        transfers,
        chain,
        touched: Default::default(),
    };
    let mut next_index = 0;
    let batched = |hashed_writes| WriterOptions {
        root_every: 0,
        max_group_blocks: 50,
        max_group_age: std::time::Duration::from_secs(3600),
        hashed_writes,
        ..common::synthetic_headers()
    };
    let live = WriterOptions {
        root_every: 1,
        max_group_blocks: 1,
        ..common::synthetic_headers()
    };
    println!(
        "{blocks} blocks of {transfers} Zipf transfers per configuration, {accounts} accounts"
    );
    println!("configuration | changes/s | write s | trie s | commit s");
    for write_map in [true, false] {
        let db = StateDb::open(
            dir.path(),
            StateDbOptions {
                write_map,
                ..small_options()
            },
        )
        .expect("opens");
        let configs = [
            (
                "batched, sorted hashed writes",
                batched(HashedWrites::SortedPerGroup),
            ),
            (
                "batched, ChangeSet-order hashed writes",
                batched(HashedWrites::ChangeSetOrder),
            ),
            // The first live block rebuilds the trie the batched runs left stale: warm up.
            ("live (root + commit every block), warm-up", live),
            ("live (root + commit every block)", live),
        ];
        for (name, options) in configs {
            let split = run(&db, &mut stream, options, blocks, &mut next_index);
            let total = split.apply + split.trie + split.commit;
            println!(
                "write_map {write_map}, {name} | {:.0} | {:.2} | {:.2} | {:.2}",
                split.changes as f64 / total,
                split.apply,
                split.trie,
                split.commit
            );
        }
    }
}

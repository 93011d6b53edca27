//! Where the codec's time goes, on transfer-like blocks without execution (a micro-benchmark
//! that explains `gigas-bench diffs`; it asserts nothing about time). Run with
//! `cargo test --release -p gigas-statediff --test speed -- --ignored --nocapture`.

mod common;

use std::time::Instant;

use alloy_primitives::{Address, U256};
use common::Rng;
use gigas_primitives::{AccountState, ChangeSetBuilder};
use gigas_statediff::{
    decode_body, encode_body, Compression, DiffFile, MemoryKeyIndex, MemoryState, PriorValues,
    StateKey,
};

fn random_address(rng: &mut Rng) -> Address {
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&rng.next().to_le_bytes());
    bytes[8..16].copy_from_slice(&rng.next().to_le_bytes());
    bytes[16..].copy_from_slice(&rng.next().to_le_bytes()[..4]);
    Address::from(bytes)
}

#[test]
#[ignore = "a timing breakdown; run by hand"]
fn where_the_time_goes() {
    let mut rng = Rng(5);
    let accounts: Vec<Address> = (0..1_000_000).map(|_| random_address(&mut rng)).collect();
    let mut state = MemoryState::new();
    let mut index = MemoryKeyIndex::new();
    for a in &accounts {
        state.insert_account(
            *a,
            AccountState {
                nonce: rng.below(100),
                balance: U256::from(rng.next()) << 20,
                code_hash: common::NO_CODE,
            },
        );
    }
    let keys: Vec<StateKey> = accounts.iter().map(|a| StateKey::Account(*a)).collect();
    index.extend(&keys).unwrap();
    // With SLOTS set, blocks change ERC-20-like balance slots of one token instead.
    let token = random_address(&mut rng);
    let slots: Vec<U256> = (0..1_000_000u64)
        .map(|i| U256::from_be_bytes(alloy_primitives::keccak256(i.to_be_bytes()).0))
        .collect();
    let with_slots = std::env::var_os("SLOTS").is_some();
    if with_slots {
        for slot in &slots {
            state.insert_slot(token, *slot, U256::from(rng.next() >> 4));
        }
        let keys: Vec<StateKey> = slots.iter().map(|s| StateKey::Slot(token, *s)).collect();
        index.extend(&keys).unwrap();
    }
    let (mut t_capture, mut t_encode, mut t_zstd, mut t_unzstd, mut t_decode) =
        (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut changes_total = 0;
    for _ in 0..20 {
        let mut b = ChangeSetBuilder::new();
        for _ in 0..20_000 {
            if with_slots {
                let slot = slots[rng.below(slots.len() as u64) as usize];
                let v = state.slot_value(&token, &slot);
                b.slot(token, slot, v.wrapping_sub(U256::from(rng.next() >> 8)));
                continue;
            }
            let a = accounts[rng.below(accounts.len() as u64) as usize];
            let s = state.account_state(&a).unwrap();
            b.account(
                a,
                AccountState {
                    nonce: s.nonce + 1,
                    balance: s.balance - U256::from(rng.next() >> 8),
                    code_hash: s.code_hash,
                },
                false,
            );
        }
        let changes = b.build();
        changes_total += changes.accounts().len() + changes.storage().len();
        let t = Instant::now();
        let prior = PriorValues::capture(&changes, &state).unwrap();
        t_capture += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let packed = encode_body(&changes, &index, &prior).unwrap();
        t_encode += t.elapsed().as_secs_f64();
        let (header, signature) =
            common::seal(&common::sequencer(), &common::genesis_header(), &changes);
        let file = DiffFile {
            header,
            signature,
            commitment: None,
            body: packed.bytes,
        };
        let t = Instant::now();
        let bytes = file.encode(&Compression::default()).unwrap();
        t_zstd += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let decoded_file = DiffFile::decode(&bytes).unwrap();
        t_unzstd += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let decoded = decode_body(&decoded_file.body, &index, &state).unwrap();
        t_decode += t.elapsed().as_secs_f64();
        if std::env::var_os("DECODE_ONLY").is_some() {
            for _ in 0..50 {
                std::hint::black_box(decode_body(&decoded_file.body, &index, &state).unwrap());
            }
        }
        assert_eq!(decoded.changes, changes);
        state.apply(&changes);
    }
    let per = |s: f64| s / changes_total as f64 * 1e9;
    println!(
        "{changes_total} changes; ns per change: capture {:.0}, encode {:.0}, zstd {:.0}; \
         unzstd {:.0}, decode {:.0}",
        per(t_capture),
        per(t_encode),
        per(t_zstd),
        per(t_unzstd),
        per(t_decode)
    );
}

//! The decoders are total: random bytes and mutations of valid diffs (bit flips, byte
//! overwrites, insertions, deletions, truncations, splices of two diffs) never panic, never
//! allocate on a length field's word, and are either refused or decode to something that
//! re-encodes to exactly the input (the encoding is canonical).
//!
//! The suite runs 100,000 cases; `cargo test --release -p gigas-statediff --test fuzz --
//! --ignored --nocapture` runs 1,500,000 and prints the count.

mod common;

use common::{random_chain, Published, Rng};
use gigas_statediff::{decode_body, encode_body, verify_and_decode, BlockFile, DiffFile};

fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        let len = out.len().max(1) as u64;
        match rng.below(9) {
            0 | 1 => {
                if !out.is_empty() {
                    let at = rng.below(len) as usize;
                    out[at] ^= 1 << rng.below(8);
                }
            }
            2 => {
                if !out.is_empty() {
                    let at = rng.below(len) as usize;
                    out[at] = [0, 0xff, 0x7f, 0x80, 1, rng.next() as u8][rng.below(6) as usize];
                }
            }
            3 => {
                let at = rng.below(len + 1).min(out.len() as u64) as usize;
                let n = 1 + rng.below(8) as usize;
                for _ in 0..n {
                    out.insert(at, rng.next() as u8);
                }
            }
            4 => {
                if !out.is_empty() {
                    let at = rng.below(len) as usize;
                    let n = (1 + rng.below(8) as usize).min(out.len() - at);
                    out.drain(at..at + n);
                }
            }
            5 => out.truncate(rng.below(len + 1) as usize),
            6 => {
                // Splice: a prefix of this one and a suffix of another.
                let cut = rng.below(len + 1).min(out.len() as u64) as usize;
                let from = rng.below(other.len() as u64 + 1) as usize;
                out.truncate(cut);
                out.extend_from_slice(&other[from.min(other.len())..]);
            }
            7 => {
                // A varint-sized field made huge.
                if !out.is_empty() {
                    let at = rng.below(len) as usize;
                    let n = (5usize).min(out.len() - at);
                    for b in &mut out[at..at + n] {
                        *b = 0xff;
                    }
                }
            }
            _ => {
                // Swap two bytes (reorders keys and records).
                if out.len() >= 2 {
                    let a = rng.below(len) as usize;
                    let b = rng.below(len) as usize;
                    out.swap(a, b);
                }
            }
        }
    }
    out
}

fn fix_crc(bytes: &mut [u8]) {
    if bytes.len() >= 4 {
        let n = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Runs `cases` fuzz cases; returns (cases, accepted mutants).
fn fuzz(seed: u64, cases: usize) -> (usize, usize) {
    let chain: Vec<Published> = random_chain(seed, 24, 10);
    let mut rng = Rng(seed ^ 0xF022);
    let sequencer = common::sequencer().address();
    let mut accepted = 0;
    for case in 0..cases {
        let p = &chain[rng.below(chain.len() as u64) as usize];
        let q = &chain[rng.below(chain.len() as u64) as usize];
        match case % 4 {
            // Bodies: mutated valid ones, against the state and index they were written for.
            0 | 1 => {
                let input = if rng.chance(3) {
                    let n = rng.below(64) as usize;
                    (0..n).map(|_| rng.next() as u8).collect()
                } else {
                    mutate(&mut rng, &p.body, &q.body)
                };
                if let Ok(decoded) = decode_body(&input, &p.index, &p.state) {
                    let again = encode_body(&decoded.changes, &p.index, &p.state)
                        .expect("what decodes encodes");
                    assert_eq!(
                        again.bytes, input,
                        "case {case}: a non-canonical body decoded"
                    );
                    accepted += 1;
                }
            }
            // Whole diff files, the CRC recomputed half of the time so that the layers
            // behind it are reached.
            2 => {
                let mut input = if rng.chance(3) {
                    let n = rng.below(200) as usize;
                    (0..n).map(|_| rng.next() as u8).collect()
                } else {
                    mutate(&mut rng, &p.bytes, &q.bytes)
                };
                if rng.chance(50) {
                    fix_crc(&mut input);
                }
                if let Ok(file) = DiffFile::decode(&input) {
                    accepted += 1;
                    let _ = decode_body(&file.body, &p.index, &p.state);
                }
                if let Ok(v) = verify_and_decode(&p.tip, sequencer, &input, &p.index, &p.state) {
                    // The signature covers the header: only the original's verifies. A body
                    // mutated into other canonical changes decodes; the state they give is
                    // not the one the header's stateRoot commits to, and the follower's own
                    // root refuses the block (gigas-fullnode's `rejections` test).
                    assert_eq!(v.header, p.header, "case {case}");
                }
            }
            // Block files.
            _ => {
                let file = BlockFile {
                    number: p.header.number,
                    hash: p.header.hash_slow(),
                    transactions: Vec::new(),
                    receipts: Vec::new(),
                };
                let bytes = file.encode(&Default::default()).expect("encodes");
                let mut input = mutate(&mut rng, &bytes, &p.bytes);
                if rng.chance(50) {
                    fix_crc(&mut input);
                }
                if BlockFile::decode(&input).is_ok() {
                    accepted += 1;
                }
            }
        }
    }
    (cases, accepted)
}

#[test]
fn a_hundred_thousand_mutants_never_panic() {
    let (cases, accepted) = fuzz(11, 100_000);
    println!("{cases} fuzz cases, {accepted} accepted (each re-encoded to the same bytes)");
}

#[test]
#[ignore = "1.5 million cases: run with --ignored in release mode"]
fn a_million_and_a_half_mutants_never_panic() {
    let mut total = 0;
    let mut accepted = 0;
    for seed in 0..15 {
        let (c, a) = fuzz(1000 + seed, 100_000);
        total += c;
        accepted += a;
    }
    println!("{total} fuzz cases, {accepted} accepted (each re-encoded to the same bytes)");
    assert!(total >= 1_000_000);
}

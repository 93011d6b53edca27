//! Metering a workload's blocks: encoding and decoding each diff ([`Meter`]), the index
//! layouts compared on its repeated writes ([`index_layouts`]), and the zstd dictionary
//! experiment ([`dictionary`]).

use std::time::Instant;

use alloy_primitives::{keccak256, Address, Signature, U256};
use eyre::{eyre, Result};
use gigas_evm::receipts::receipts_root_and_bloom;
use gigas_primitives::ChangeSet;
use gigas_statediff::{
    decode_body, encode_body, zstd, Compression, DiffFile, Header, KeyIndex, MemoryKeyIndex,
    PriorState, PriorValues, StateKey,
};

use super::{DictionaryResult, IndexLayouts, LevelResult, WorkloadResult, BASE_FEE, BENEFICIARY};

/// What the measurement keeps per workload.
pub(super) struct Measured {
    pub(super) result: WorkloadResult,
    bodies: Vec<Vec<u8>>,
}

/// Accumulates the measured blocks of a workload.
pub(super) struct Meter {
    level: i32,
    pub(super) result: WorkloadResult,
    bodies: Vec<Vec<u8>>,
    parent: Header,
}

impl Meter {
    pub(super) fn new(name: String, level: i32, compare_levels: &[i32]) -> Self {
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
        // The format's cost does not depend on the root's value: a distinct placeholder.
        header.state_root = keccak256([self.parent.state_root.as_slice(), raw].concat());
        header
    }

    /// Encodes one block (and, when `measure`, decodes it and counts everything). Returns
    /// the block's new keys and its share of first writes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block(
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
            commitment: None,
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
            let decode_s = started.elapsed().as_secs_f64();
            if decoded.changes != *changes {
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

    pub(super) fn finish(self) -> Measured {
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

/// Trains a dictionary on the first half of workload `train`'s bodies and measures every
/// workload's bodies with and without it (the training workload on its second half only).
/// `None`, with a warning, when zstd cannot train on so few bodies: a short run skips the
/// experiment rather than losing the rest of its report.
pub(super) fn dictionary(
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

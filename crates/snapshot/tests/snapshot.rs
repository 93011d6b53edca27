//! Snapshots of a real MDBX state database (in a temp dir) written, checked and restored
//! into another one, and every kind of bad snapshot refused with nothing served as state.

use std::collections::{BTreeMap, HashSet};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use alloy_consensus::Header;
use alloy_primitives::{keccak256, Address, Bytes, B256, KECCAK256_EMPTY, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder, LatticeHash};
use gigas_snapshot::{
    manifest_id, read_manifest, restore_dir, verify_chunk, write_snapshot, ChunkFault, Manifest,
    ProduceOptions, Restore, SnapshotError,
};
use gigas_statedb::{
    BlockToApply, GenesisBlock, GenesisEntry, StateDb, StateDbOptions, WriterOptions,
};
use gigas_statediff::{commitment_digest, StateCommitment, StateKey};

/// A block as the sequencer made it: header, hash, changes, new index keys, lattice hash
/// after it, header signature, signed commitment.
type Block = (
    Header,
    B256,
    ChangeSet,
    Vec<StateKey>,
    LatticeHash,
    alloy_primitives::Signature,
    StateCommitment,
);

/// A chain written into a real state database, with the sequencer's signatures and the
/// state commitment kept beside it (from a model of the state, not from the database).
struct Source {
    _dir: tempfile::TempDir,
    db: StateDb,
    key: PrivateKeySigner,
    parent: Header,
    hash: B256,
    lattice: LatticeHash,
    accounts: BTreeMap<Address, AccountState>,
    slots: BTreeMap<(Address, U256), U256>,
    indexed: HashSet<StateKey>,
    index_len: u64,
}

fn options() -> StateDbOptions {
    StateDbOptions::default()
}

fn writer_options() -> WriterOptions {
    WriterOptions {
        root_every: 1,
        ..WriterOptions::default()
    }
}

fn address(i: u64) -> Address {
    Address::from_word(keccak256(i.to_be_bytes()))
}

impl Source {
    /// The state root of the source's state, from scratch (alloy-trie): what its headers
    /// carry, as the sequencer's do.
    fn root(&self) -> B256 {
        let mut scratch = gigas_trie::ScratchState::new();
        for (address, state) in &self.accounts {
            scratch.account(*address, *state);
        }
        for ((address, slot), value) in &self.slots {
            scratch.slot(*address, *slot, *value);
        }
        scratch.root().expect("a state makes a trie")
    }

    fn sign(
        &self,
        hash: &B256,
        lattice: &LatticeHash,
    ) -> (alloy_primitives::Signature, StateCommitment) {
        let header = self.key.sign_hash_sync(hash).expect("signs");
        let checksum = lattice.checksum();
        let signature = self
            .key
            .sign_hash_sync(&commitment_digest(hash, &checksum))
            .expect("signs");
        (
            header,
            StateCommitment {
                lattice: checksum,
                signature,
            },
        )
    }

    /// A genesis of `n` accounts; every seventh is a contract (three distinct codes) with
    /// storage.
    fn new(n: u64) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = StateDb::open(dir.path(), options()).expect("opens");
        let key = PrivateKeySigner::from_bytes(&B256::repeat_byte(0x42)).expect("a key");
        let mut accounts = BTreeMap::new();
        let mut slots = BTreeMap::new();
        let mut entries = Vec::new();
        let mut lattice = LatticeHash::zero();
        for i in 0..n {
            let a = address(i);
            let code = (i % 7 == 0).then(|| Bytes::from(vec![0x60, (i % 3) as u8, 0x00]));
            let state = AccountState {
                nonce: i % 5,
                balance: U256::from(i) * U256::from(10u64.pow(18)),
                code_hash: code.as_ref().map_or(KECCAK256_EMPTY, keccak256),
            };
            entries.push(GenesisEntry::Account {
                address: a,
                nonce: state.nonce,
                balance: state.balance,
                code: code.clone(),
            });
            lattice.add(&LatticeHash::account(&a, &state));
            accounts.insert(a, state);
            if code.is_some() {
                for s in 0..(i % 40) {
                    let (slot, value) = (U256::from(s), U256::from(s * 1000 + i + 1));
                    entries.push(GenesisEntry::Slot {
                        address: a,
                        slot,
                        value,
                    });
                    lattice.add_slot(&a, &slot, &value);
                    slots.insert((a, slot), value);
                }
            }
        }
        let mut source = Self {
            _dir: dir,
            db,
            key,
            lattice,
            accounts,
            slots,
            indexed: HashSet::new(),
            index_len: 0,
            parent: Header::default(),
            hash: B256::ZERO,
        };
        let header = Header {
            number: 0,
            gas_limit: 30_000_000,
            state_root: source.root(),
            ..Header::default()
        };
        let hash = header.hash_slow();
        source.parent = header.clone();
        source.hash = hash;
        let (signature, commitment) = source.sign(&hash, &source.lattice);
        source
            .db
            .apply_genesis(
                GenesisBlock {
                    header: &header,
                    hash,
                    signature: Some(signature),
                    commitment: Some(commitment),
                    verify_root: true,
                },
                entries.into_iter().map(Ok::<_, std::io::Error>),
                1000,
            )
            .expect("genesis");
        source
    }

    /// Block `seed`: balances moved, an account created, slots set and cleared. Returns
    /// the block with its signatures, to apply here and elsewhere.
    fn next_block(&mut self, seed: u64) -> Block {
        let mut b = ChangeSetBuilder::new();
        let mut new_keys = Vec::new();
        let mut lattice = self.lattice.clone();
        let touch =
            |key: StateKey, new_keys: &mut Vec<StateKey>, indexed: &mut HashSet<StateKey>| {
                if indexed.insert(key) {
                    new_keys.push(key);
                }
            };
        let n = self.accounts.len() as u64;
        for j in 0..12u64 {
            let a = address((seed * 31 + j * 17) % (n + 3));
            let before = self.accounts.get(&a).copied();
            let after = AccountState {
                nonce: before.map_or(0, |s| s.nonce + 1),
                balance: U256::from(seed * 100 + j + 1),
                code_hash: before.map_or(KECCAK256_EMPTY, |s| s.code_hash),
            };
            lattice.change_account(&a, before.as_ref(), Some(&after));
            self.accounts.insert(a, after);
            b.account(a, after, false);
            touch(StateKey::Account(a), &mut new_keys, &mut self.indexed);
        }
        let contract = address(7 * (seed % 5));
        for s in [seed % 4, 50 + seed] {
            let slot = U256::from(s);
            let before = self
                .slots
                .get(&(contract, slot))
                .copied()
                .unwrap_or_default();
            // Every other block clears the slot it set.
            let after = if seed.is_multiple_of(2) {
                U256::from(seed + 7)
            } else {
                U256::ZERO
            };
            lattice.change_slot(&contract, &slot, &before, &after);
            if after.is_zero() {
                self.slots.remove(&(contract, slot));
            } else {
                self.slots.insert((contract, slot), after);
            }
            b.slot(contract, slot, after);
            touch(
                StateKey::Slot(contract, slot),
                &mut new_keys,
                &mut self.indexed,
            );
        }
        for (i, key) in new_keys.iter().enumerate() {
            let index = self.index_len + i as u64;
            lattice.add(&match key {
                StateKey::Account(a) => LatticeHash::index_entry(index, a, None),
                StateKey::Slot(a, s) => LatticeHash::index_entry(index, a, Some(s)),
            });
        }
        self.index_len += new_keys.len() as u64;
        let header = Header {
            number: self.parent.number + 1,
            parent_hash: self.hash,
            gas_limit: 30_000_000,
            timestamp: self.parent.timestamp + 1,
            state_root: self.root(),
            ..Header::default()
        };
        let hash = header.hash_slow();
        let (signature, commitment) = self.sign(&hash, &lattice);
        self.parent = header.clone();
        self.hash = hash;
        self.lattice = lattice.clone();
        (
            header,
            hash,
            b.build(),
            new_keys,
            lattice,
            signature,
            commitment,
        )
    }

    fn advance(&mut self, blocks: std::ops::Range<u64>) {
        let blocks: Vec<_> = blocks.map(|seed| self.next_block(seed)).collect();
        let mut writer = self.db.writer(writer_options()).expect("writer");
        for (header, hash, changes, keys, lattice, signature, commitment) in &blocks {
            writer
                .apply(BlockToApply {
                    header,
                    hash: *hash,
                    signature: Some(*signature),
                    changes,
                    hashed: None,
                    new_keys: keys,
                    lattice: Some(lattice),
                    commitment: Some(*commitment),
                })
                .expect("applies");
        }
        writer.commit().expect("commits");
    }
}

/// Everything a database holds, in key order.
type Contents = (
    Vec<(B256, AccountState)>,
    Vec<(B256, B256, U256)>,
    Vec<(B256, Vec<u8>)>,
    Vec<(u64, StateKey)>,
);

/// Everything a database holds, in key order.
fn contents(db: &StateDb) -> Contents {
    let view = db.view().expect("view");
    let mut accounts = Vec::new();
    view.scan_accounts(|k, s| {
        accounts.push((*k, *s));
        ControlFlow::Continue(())
    })
    .expect("scan");
    let mut slots = Vec::new();
    view.scan_slots(|a, s, v| {
        slots.push((*a, *s, *v));
        ControlFlow::Continue(())
    })
    .expect("scan");
    let mut codes = Vec::new();
    view.scan_codes(|h, c| {
        codes.push((*h, c.to_vec()));
        ControlFlow::Continue(())
    })
    .expect("scan");
    let mut index = Vec::new();
    view.scan_index(|i, k| {
        index.push((i, *k));
        ControlFlow::Continue(())
    })
    .expect("scan");
    for (i, key) in &index {
        assert_eq!(view.indexed(key).expect("reads"), Some(*i), "key to index");
    }
    (accounts, slots, codes, index)
}

fn small() -> ProduceOptions {
    ProduceOptions {
        chunk_bytes: 2048,
        level: 1,
    }
}

fn fresh() -> (tempfile::TempDir, StateDb) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = StateDb::open(dir.path(), options()).expect("opens");
    (dir, db)
}

fn snapshot_of(source: &Source, into: &Path) -> (u64, PathBuf) {
    let view = source.db.view().expect("view");
    let produced = write_snapshot(&view, into, small()).expect("snapshot written");
    assert!(produced.written && produced.chunks > 8, "{produced:?}");
    (produced.block, produced.dir)
}

fn sequencer(source: &Source) -> Address {
    source.key.address()
}

#[test]
fn a_restored_database_equals_its_source_key_for_key_and_root_for_root_and_follows_on() {
    let mut source = Source::new(600);
    source.advance(1..9);
    let snapshots = tempfile::tempdir().expect("temp dir");
    let (block, _) = snapshot_of(&source, snapshots.path());
    assert_eq!(block, 8);
    let head = gigas_snapshot::read_head(snapshots.path())
        .expect("reads")
        .expect("a head");
    assert_eq!(head.number, 8);

    let (_t, target) = fresh();
    let outcome =
        restore_dir(&target, snapshots.path(), block, sequencer(&source)).expect("restores");
    assert_eq!(
        outcome.tip,
        source.db.head().expect("head").expect("a head")
    );
    assert_eq!(contents(&target), contents(&source.db));
    let root = |db: &StateDb, n| {
        db.view()
            .expect("view")
            .header(n)
            .expect("reads")
            .expect("a header")
    };
    assert_eq!(root(&target, 8).state_root, root(&source.db, 8).state_root);
    assert_eq!(
        outcome.state_root,
        root(&source.db, 8).state_root.expect("a root")
    );
    assert_eq!(root(&target, 8).commitment, root(&source.db, 8).commitment);
    assert_eq!(
        target.view().expect("view").lattice().expect("reads"),
        Some(source.lattice.clone())
    );
    assert_eq!(target.bootstrap_progress().expect("reads"), None);

    // Both follow the chain on, block for block, root for root.
    let mut writer = target.writer(writer_options()).expect("writer");
    for seed in 9..14 {
        let (header, hash, changes, keys, lattice, signature, commitment) = source.next_block(seed);
        let block = BlockToApply {
            header: &header,
            hash,
            signature: Some(signature),
            changes: &changes,
            hashed: None,
            new_keys: &keys,
            lattice: Some(&lattice),
            commitment: Some(commitment),
        };
        writer.apply(block).expect("the restored node applies");
        let mut w = source.db.writer(writer_options()).expect("writer");
        w.apply(block).expect("the source applies");
        w.commit().expect("commits");
    }
    writer.commit().expect("commits");
    drop(writer);
    assert_eq!(contents(&target), contents(&source.db));
    assert_eq!(
        root(&target, 13).state_root,
        root(&source.db, 13).state_root
    );
    assert!(root(&target, 13).state_root.is_some());
}

/// Copies a snapshot directory so that each case damages its own copy.
fn copy_snapshot(from: &Path, block: u64) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("temp dir");
    let dst = to.path().join(block.to_string());
    std::fs::create_dir_all(&dst).expect("mkdir");
    for entry in std::fs::read_dir(from.join(block.to_string())).expect("reads") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dst.join(entry.file_name())).expect("copies");
    }
    to
}

fn expect_refused(source: &Source, dir: &Path, block: u64) -> SnapshotError {
    let (_t, target) = fresh();
    let e = restore_dir(&target, dir, block, sequencer(source)).expect_err("refused");
    assert_eq!(
        target.head().expect("reads"),
        None,
        "nothing served after: {e}"
    );
    e
}

#[test]
fn every_kind_of_bad_snapshot_is_refused_with_its_chunk_and_reason_and_nothing_is_served() {
    let mut source = Source::new(400);
    source.advance(1..5);
    let snapshots = tempfile::tempdir().expect("temp dir");
    let (block, dir) = snapshot_of(&source, snapshots.path());
    let chunk = |d: &Path, k: u32| d.join(block.to_string()).join(k.to_string());

    // A tampered chunk: one bit flipped.
    let copy = copy_snapshot(snapshots.path(), block);
    let mut bytes = std::fs::read(chunk(copy.path(), 3)).expect("reads");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(chunk(copy.path(), 3), &bytes).expect("writes");
    match expect_refused(&source, copy.path(), block) {
        SnapshotError::Chunk {
            chunk: 3,
            fault: ChunkFault::Hash { .. },
        } => {}
        other => panic!("a flipped bit: {other}"),
    }

    // A truncated download.
    let copy = copy_snapshot(snapshots.path(), block);
    let bytes = std::fs::read(chunk(copy.path(), 2)).expect("reads");
    std::fs::write(chunk(copy.path(), 2), &bytes[..bytes.len() / 2]).expect("writes");
    match expect_refused(&source, copy.path(), block) {
        SnapshotError::Chunk {
            chunk: 2,
            fault: ChunkFault::Size { .. },
        } => {}
        other => panic!("a truncated chunk: {other}"),
    }

    // A missing chunk.
    let copy = copy_snapshot(snapshots.path(), block);
    std::fs::remove_file(chunk(copy.path(), 1)).expect("removes");
    match expect_refused(&source, copy.path(), block) {
        SnapshotError::Io { path, .. } if path.ends_with("1") => {}
        other => panic!("a missing chunk: {other}"),
    }

    // A chunk of another snapshot (the next block's, same position).
    source.advance(5..6);
    let (other_block, _) = snapshot_of(&source, snapshots.path());
    let copy = copy_snapshot(snapshots.path(), block);
    std::fs::copy(
        snapshots.path().join(other_block.to_string()).join("4"),
        chunk(copy.path(), 4),
    )
    .expect("copies");
    match expect_refused(&source, copy.path(), block) {
        SnapshotError::Chunk {
            chunk: 4,
            fault: ChunkFault::OtherSnapshot { block: b, chunk: 4 },
        } if b == other_block => {}
        other => panic!("another snapshot's chunk: {other}"),
    }

    let manifest_bytes = std::fs::read(dir.join("manifest")).expect("reads");
    let manifest = Manifest::decode(&manifest_bytes).expect("decodes");
    let rewrite = |m: &Manifest| {
        let copy = copy_snapshot(snapshots.path(), block);
        std::fs::write(
            copy.path().join(block.to_string()).join("manifest"),
            m.encode(),
        )
        .expect("writes");
        copy
    };

    // A manifest signed by another key: the header's signature, then the commitment's.
    let other = PrivateKeySigner::from_bytes(&B256::repeat_byte(0x43)).expect("a key");
    let mut forged = manifest.clone();
    forged.signature = other.sign_hash_sync(&forged.hash).expect("signs");
    match expect_refused(&source, rewrite(&forged).path(), block) {
        SnapshotError::Signer { what: "header", .. } => {}
        other => panic!("another key's header: {other}"),
    }
    let mut forged = manifest.clone();
    forged.commitment.signature = other
        .sign_hash_sync(&commitment_digest(&forged.hash, &forged.commitment.lattice))
        .expect("signs");
    match expect_refused(&source, rewrite(&forged).path(), block) {
        SnapshotError::Signer {
            what: "state commitment",
            ..
        } => {}
        other => panic!("another key's commitment: {other}"),
    }

    // A lattice hash that is not the signed one.
    let mut forged = manifest.clone();
    forged
        .lattice
        .add(&LatticeHash::index_entry(0, &Address::ZERO, None));
    assert!(matches!(
        expect_refused(&source, rewrite(&forged).path(), block),
        SnapshotError::Lattice { .. }
    ));

    // Shares moved between two chunks still add up; each chunk is refused on its own.
    let mut forged = manifest.clone();
    let moved = LatticeHash::index_entry(99, &Address::ZERO, None);
    forged.chunks[0].share.add(&moved);
    forged.chunks[1].share.sub(&moved);
    forged
        .verify(sequencer(&source))
        .expect("the sum is still the signed one");
    match expect_refused(&source, rewrite(&forged).path(), block) {
        SnapshotError::Chunk {
            chunk: 0,
            fault: ChunkFault::Share { .. },
        } => {}
        other => panic!("a moved share: {other}"),
    }

    // A manifest that leaves the codes out adds up (codes are not lattice elements): the
    // source re-encodes the chunks after them under their new numbers. It is refused once
    // every chunk is written: an account names a code that never came.
    let mut forged = manifest.clone();
    let copy = copy_snapshot(snapshots.path(), block);
    let d = copy.path().join(block.to_string());
    let mut kept = Vec::new();
    for (old, info) in manifest.chunks.iter().enumerate() {
        if info.kind == gigas_snapshot::ChunkKind::Codes {
            continue;
        }
        let bytes = std::fs::read(dir.join(old.to_string())).expect("reads");
        let entries = verify_chunk(&manifest, old as u32, &bytes).expect("checks");
        let new = kept.len() as u32;
        let (file, info) = gigas_snapshot::encode_chunk(block, new, &entries, 1).expect("encodes");
        std::fs::write(d.join(new.to_string()), file).expect("writes");
        kept.push(info);
    }
    assert!(
        kept.len() < manifest.chunks.len(),
        "the snapshot has code chunks"
    );
    forged.chunks = kept;
    forged.codes = 0;
    std::fs::write(d.join("manifest"), forged.encode()).expect("writes");
    forged
        .verify(sequencer(&source))
        .expect("the sum is still the signed one");
    match expect_refused(&source, copy.path(), block) {
        SnapshotError::Incomplete(reason) => assert!(reason.contains("code"), "{reason}"),
        other => panic!("a snapshot without its codes: {other}"),
    }

    // The intact snapshot still restores.
    let (_t, target) = fresh();
    restore_dir(&target, snapshots.path(), block, sequencer(&source)).expect("restores");
}

#[test]
fn a_bootstrap_stopped_part_way_resumes_at_its_first_unwritten_chunk() {
    let mut source = Source::new(500);
    source.advance(1..6);
    let snapshots = tempfile::tempdir().expect("temp dir");
    let (block, dir) = snapshot_of(&source, snapshots.path());
    let (t, target) = fresh();
    let (manifest, id) = read_manifest(snapshots.path(), block, sequencer(&source)).expect("reads");
    let total = manifest.chunks.len() as u32;
    {
        let mut restore = Restore::start(&target, manifest.clone(), id).expect("starts");
        for k in 0..total / 2 {
            let bytes = std::fs::read(dir.join(k.to_string())).expect("reads");
            let entries = verify_chunk(restore.manifest(), k, &bytes).expect("checks");
            restore.write(k, &entries).expect("writes");
        }
        // Dropped here: the process is gone.
    }
    drop(target);
    assert_eq!(manifest_id(&manifest.encode()), id);
    let target = StateDb::open(t.path(), options()).expect("reopens");
    assert_eq!(
        target.head().expect("reads"),
        None,
        "nothing served part-way"
    );
    let progress = target
        .bootstrap_progress()
        .expect("reads")
        .expect("under way");
    assert_eq!((progress.block, progress.chunks_done), (block, total / 2));
    restore_dir(&target, snapshots.path(), block, sequencer(&source)).expect("resumes");
    assert_eq!(contents(&target), contents(&source.db));

    // A bootstrap under way with another snapshot starts over with the new one.
    let (_t2, other) = fresh();
    {
        let mut restore = Restore::start(&other, manifest.clone(), id).expect("starts");
        let bytes = std::fs::read(dir.join("0")).expect("reads");
        let entries = verify_chunk(restore.manifest(), 0, &bytes).expect("checks");
        restore.write(0, &entries).expect("writes");
    }
    source.advance(6..7);
    let (newer, _) = snapshot_of(&source, snapshots.path());
    restore_dir(&other, snapshots.path(), newer, sequencer(&source)).expect("restores the newer");
    assert_eq!(contents(&other), contents(&source.db));
}

#[test]
fn old_snapshots_are_pruned_by_count_and_the_head_names_the_newest() {
    let mut source = Source::new(100);
    let snapshots = tempfile::tempdir().expect("temp dir");
    for round in 0..4u64 {
        source.advance(round * 2 + 1..round * 2 + 3);
        snapshot_of_any(&source, snapshots.path());
    }
    // The head names the older snapshots too, newest first, each with its manifest's
    // identity: a new node's fallbacks (issue 66, item 3).
    let bytes = std::fs::read(snapshots.path().join("head")).expect("reads");
    let (_, older) = gigas_snapshot::SnapshotHead::from_json_with_older(&bytes).expect("parses");
    assert_eq!(
        older.iter().map(|h| h.number).collect::<Vec<_>>(),
        vec![6, 4, 2]
    );
    for h in &older {
        let manifest = std::fs::read(snapshots.path().join(h.number.to_string()).join("manifest"))
            .expect("reads");
        assert_eq!(h.manifest, manifest_id(&manifest));
    }
    std::fs::create_dir_all(snapshots.path().join(".99.partial")).expect("mkdir");
    let removed = gigas_snapshot::prune(snapshots.path(), 2).expect("prunes");
    assert_eq!(removed, vec![2, 4]);
    assert_eq!(
        gigas_snapshot::list(snapshots.path()).expect("lists"),
        vec![6, 8]
    );
    assert!(!snapshots.path().join(".99.partial").exists());
    assert_eq!(
        gigas_snapshot::read_head(snapshots.path())
            .expect("reads")
            .map(|h| h.number),
        Some(8)
    );
    // Writing the same block again writes nothing.
    let view = source.db.view().expect("view");
    assert!(
        !write_snapshot(&view, snapshots.path(), small())
            .expect("ok")
            .written
    );
}

fn snapshot_of_any(source: &Source, into: &Path) {
    let view = source.db.view().expect("view");
    write_snapshot(&view, into, small()).expect("snapshot written");
}

/// A source of `accounts` accounts after blocks `blocks`, its snapshot (in the returned
/// directory), the snapshot's block and directory, and its manifest.
fn snapshotted(
    accounts: u64,
    blocks: std::ops::Range<u64>,
) -> (Source, tempfile::TempDir, u64, PathBuf, Manifest) {
    let mut source = Source::new(accounts);
    source.advance(blocks);
    let snapshots = tempfile::tempdir().expect("temp dir");
    let (block, dir) = snapshot_of(&source, snapshots.path());
    let manifest =
        Manifest::decode(&std::fs::read(dir.join("manifest")).expect("reads")).expect("decodes");
    (source, snapshots, block, dir, manifest)
}

/// Issue 66, item 1: a manifest that verifies could list a chunk of gigabytes (the node read
/// and reserved up to the listed length, four chunks at once), and a chunk could carry bytes
/// after its zstd frame (a second or skippable frame) that its entries do not account for.
#[test]
fn a_chunk_is_bounded_by_what_its_payload_compresses_to_and_is_one_zstd_frame() {
    let (source, _snapshots, _block, dir, manifest) = snapshotted(400, 1..5);

    // A chunk listed at 4 GiB, its payload at most 16 MiB.
    let mut forged = manifest.clone();
    forged.chunks[0].file_len = u32::MAX;
    match forged.verify(sequencer(&source)) {
        Err(SnapshotError::Manifest(reason)) => assert!(reason.contains("at worst"), "{reason}"),
        other => panic!("a chunk listed at 4 GiB: {other:?}"),
    }
    // Every chunk an honest producer writes is within the bound.
    for info in &manifest.chunks {
        assert!(u64::from(info.file_len) <= gigas_snapshot::max_file_len(info.raw_len));
    }

    // Bytes after the frame, listed with their right size and hash.
    let bytes = std::fs::read(dir.join("0")).expect("reads");
    let skippable = [0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
    let empty_frame = zstd::bulk::compress(&[], 1).expect("compresses");
    for (what, tail) in [
        ("a skippable frame", skippable.to_vec()),
        ("a second frame", empty_frame),
    ] {
        let mut padded = bytes.clone();
        padded.extend_from_slice(&tail);
        let mut forged = manifest.clone();
        forged.chunks[0].file_len = padded.len() as u32;
        forged.chunks[0].file_hash = B256::from(*blake3::hash(&padded).as_bytes());
        forged
            .verify(sequencer(&source))
            .expect("the layout is within its bounds");
        match verify_chunk(&forged, 0, &padded) {
            Err(SnapshotError::Chunk {
                chunk: 0,
                fault: ChunkFault::Malformed(reason),
            }) => assert!(reason.contains("after the zstd frame"), "{what}: {reason}"),
            other => panic!("{what} after a chunk's frame: {other:?}"),
        }
    }
}

/// Issue 66, item 2: code chunks carry no share of the signed commitment, so a snapshot that
/// verifies could add codes no account names; they were written, kept and served again in
/// this node's own snapshots.
#[test]
fn codes_no_account_names_are_not_written_and_more_codes_than_accounts_are_refused() {
    let (source, snapshots, block, dir, manifest) = snapshotted(400, 1..5);
    let last_code = manifest
        .chunks
        .iter()
        .rposition(|c| c.kind == gigas_snapshot::ChunkKind::Codes)
        .expect("the snapshot has code chunks");
    // A code whose hash sorts after the last listed one, so that it fits a chunk of its own.
    let after = manifest.chunks[last_code].last.clone();
    let (hash, code) = (0u32..)
        .map(|i| {
            let code = [&[0x60, 0x01, 0x60, 0x00][..], &i.to_be_bytes()].concat();
            (keccak256(&code), code)
        })
        .find(|(hash, _)| hash.as_slice() > after.as_slice())
        .expect("some code hashes past it");

    let copy = copy_snapshot(snapshots.path(), block);
    let d = copy.path().join(block.to_string());
    let mut chunks = Vec::new();
    for (old, info) in manifest.chunks.iter().enumerate() {
        let bytes = std::fs::read(dir.join(old.to_string())).expect("reads");
        let entries = verify_chunk(&manifest, old as u32, &bytes).expect("checks");
        let new = chunks.len() as u32;
        let (file, info) = if new == old as u32 {
            (bytes, info.clone())
        } else {
            gigas_snapshot::encode_chunk(block, new, &entries, 1).expect("encodes")
        };
        std::fs::write(d.join(new.to_string()), file).expect("writes");
        chunks.push(info);
        if old == last_code {
            let new = chunks.len() as u32;
            let extra = gigas_statedb::SnapshotEntries::Codes(vec![(hash, code.clone())]);
            let (file, info) =
                gigas_snapshot::encode_chunk(block, new, &extra, 1).expect("encodes");
            std::fs::write(d.join(new.to_string()), file).expect("writes");
            chunks.push(info);
        }
    }
    let mut forged = manifest.clone();
    forged.chunks = chunks;
    forged.codes += 1;
    std::fs::write(d.join("manifest"), forged.encode()).expect("writes");
    forged
        .verify(sequencer(&source))
        .expect("codes are outside the commitment: it still verifies");

    let (_t, target) = fresh();
    restore_dir(&target, copy.path(), block, sequencer(&source)).expect("restores");
    assert_eq!(
        target.view().expect("a view").code(&hash).expect("reads"),
        None,
        "a code no account names was written"
    );
    // Every named code did arrive, and the restored state equals its source.
    assert_eq!(contents(&target), contents(&source.db));

    // A manifest listing more codes than accounts is refused before anything is fetched.
    let mut padded = manifest.clone();
    padded.codes = padded.accounts + 1;
    if let Some(c) = padded
        .chunks
        .iter_mut()
        .find(|c| c.kind == gigas_snapshot::ChunkKind::Codes)
    {
        c.entries += (padded.codes - manifest.codes) as u32;
    }
    match padded.verify(sequencer(&source)) {
        Err(SnapshotError::Manifest(reason)) => assert!(reason.contains("codes for"), "{reason}"),
        other => panic!("more codes than accounts: {other:?}"),
    }
}

/// Issue 66, item 4: a node bootstrapped at N held header N only, so BLOCKHASH of the blocks
/// before it answered zero. A manifest carries the 256 headers before N, chained to the
/// signed header by parent hashes, and the restored database holds them.
#[test]
fn the_256_headers_before_a_snapshot_come_with_it_chained_to_its_signed_header() {
    let (source, snapshots, block, _dir, manifest) = snapshotted(200, 1..300);
    assert_eq!(block, 299);
    assert_eq!(manifest.ancestors.len(), 256);

    let (_t, target) = fresh();
    restore_dir(&target, snapshots.path(), block, sequencer(&source)).expect("restores");
    let (theirs, ours) = (
        source.db.view().expect("view"),
        target.view().expect("view"),
    );
    for n in block - 256..=block {
        assert_eq!(
            ours.block_hash(n).expect("reads"),
            theirs.block_hash(n).expect("reads")
        );
        assert!(
            ours.block_hash(n).expect("reads").is_some(),
            "block {n}'s hash"
        );
        let (a, b) = (
            ours.header(n).expect("reads"),
            theirs.header(n).expect("reads"),
        );
        assert_eq!(a.map(|h| h.header), b.map(|h| h.header), "header {n}");
    }
    assert_eq!(ours.block_hash(block - 257).expect("reads"), None);
    // revm's view of it: BLOCKHASH of a block before the snapshot is the block's hash.
    use gigas_evm::revm::database_interface::DatabaseRef;
    assert_eq!(
        ours.block_hash_ref(block - 3).expect("held"),
        theirs.block_hash(block - 3).expect("reads").expect("held")
    );
    match ours.block_hash_ref(block - 300) {
        Err(gigas_statedb::StateDbError::MissingHeader(n)) => assert_eq!(n, block - 300),
        other => panic!("a header the database lacks: {other:?}"),
    }

    // A changed ancestor, a missing one, one out of place: each breaks the chain.
    let refused = |m: &Manifest| match m.verify(sequencer(&source)) {
        Err(SnapshotError::Manifest(reason)) => reason,
        other => panic!("forged ancestors: {other:?}"),
    };
    let mut forged = manifest.clone();
    forged.ancestors[100].extra_data = Bytes::from_static(b"forged");
    assert!(refused(&forged).contains("parent"), "{}", refused(&forged));
    let mut forged = manifest.clone();
    forged.ancestors.remove(0);
    assert!(
        refused(&forged).contains("255 ancestor headers"),
        "{}",
        refused(&forged)
    );
    let mut forged = manifest.clone();
    forged.ancestors.swap(3, 4);
    refused(&forged);
    // A manifest of the version before refuses with what to do.
    let mut old = manifest.encode();
    old[3] = 1;
    let body = old.len() - 4;
    let crc = crc32fast::hash(&old[..body]);
    old[body..].copy_from_slice(&crc.to_be_bytes());
    match Manifest::decode(&old) {
        Err(SnapshotError::Manifest(reason)) => assert!(reason.contains("older Gigas"), "{reason}"),
        other => panic!("a manifest of version 1: {other:?}"),
    }
}

/// Issue 66, item 5: filling the key index split its passes by the key's first byte, so keys
/// sharing one (here every address starts with zero bytes, as one contract's slots share
/// their address) landed in one pass far past its bound. Passes now split by count.
#[test]
fn the_key_index_fill_holds_its_bound_whatever_the_keys() {
    let (source, snapshots, _block, _dir, manifest) = snapshotted(400, 1..30);
    let id = manifest_id(&manifest.encode());
    // Slots of five contracts among them: keys that share their first bytes.
    assert!(
        manifest.index_len > 100,
        "{} index entries",
        manifest.index_len
    );
    for bound in [5usize, 13, manifest.index_len as usize + 1] {
        let (_t, target) = fresh();
        let mut restore = Restore::start(&target, manifest.clone(), id)
            .expect("starts")
            .with_key_pass_entries(bound);
        restore.write_from_dir(snapshots.path()).expect("writes");
        let outcome = restore.finish().expect("finishes");
        assert!(
            outcome.key_pass_peak <= bound,
            "a pass held {} key-index entries, over its bound of {bound}",
            outcome.key_pass_peak
        );
        // `contents` checks every key against its index both ways.
        assert_eq!(contents(&target), contents(&source.db), "bound {bound}");
    }
}

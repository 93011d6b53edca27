//! The two files of a snapshot, byte for byte (`crates/statediff/SNAPSHOT.md`, "Files"), and
//! every check of them.
//!
//! A **manifest** carries what a new node checks the whole snapshot against: header N with
//! the sequencer's signature, diff N's signed state commitment, the 2,048 bytes of `L_N`,
//! and, per chunk, its size, BLAKE3, key range and share of `L_N`. [`Manifest::verify`]
//! checks the signatures, that `L_N` is the signed one, that the shares add up to it, and
//! that the key ranges tile each kind in order, so that each chunk can then be checked alone,
//! on arrival, in any order ([`verify_chunk`]). That the shares sum to `L_N` binds them to
//! the signed state only as strongly as the lattice hash itself: forging a chunk whose
//! entries sum to a listed share is finding a collision of the 2,048-byte lattice hash.
//!
//! Codes are not elements of the lattice hash: a code chunk's share is zero, each code is
//! checked against its keccak, and whether every code an account names arrived is checked
//! once all chunks are written ([`crate::restore`]).

use alloy_consensus::Header;
use alloy_primitives::{keccak256, Address, Signature, B256, KECCAK256_EMPTY, U256};
use alloy_rlp::{Decodable, Encodable};
use gigas_primitives::{AccountState, LatticeHash};
use gigas_statedb::SnapshotEntries;
use gigas_statediff::{StateCommitment, StateKey};

use crate::error::{ChunkFault, SnapshotError};

/// First bytes of a manifest: `GSM` and the format version (2: with the ancestor headers).
pub const MANIFEST_MAGIC: [u8; 4] = *b"GSM\x02";
/// The headers before N a manifest carries (fewer only when N is smaller): every block hash
/// BLOCKHASH can ask for at block N + 1, which a node bootstrapped at N must answer exactly
/// as the sequencer does.
pub const ANCESTORS: u64 = 256;
/// First bytes of a chunk: `GSC` and the format version.
pub const CHUNK_MAGIC: [u8; 4] = *b"GSC\x01";
/// The largest chunk payload, uncompressed: a reader never allocates more for one chunk.
pub const MAX_CHUNK_RAW: u32 = 16 << 20;
/// The largest manifest (about 29,000 chunks, 100 GiB of state at 4 MiB a chunk).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// The largest header a manifest may carry.
const MAX_HEADER: u32 = 1 << 16;
/// Bytes of a chunk file before its payload.
const CHUNK_HEADER: usize = 4 + 8 + 4 + 1 + 4 + 4;
const SIGNATURE_LEN: usize = 65;
const LATTICE_LEN: usize = 2048;

/// What a chunk holds. Chunks are listed kind by kind in this order, each kind in key order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChunkKind {
    /// Accounts by keccak(address).
    Accounts,
    /// Nonzero slots by keccak(address) ‖ keccak(slot).
    Slots,
    /// Codes by hash.
    Codes,
    /// Key-index entries by index.
    Index,
}

impl ChunkKind {
    fn code(self) -> u8 {
        match self {
            ChunkKind::Accounts => 0,
            ChunkKind::Slots => 1,
            ChunkKind::Codes => 2,
            ChunkKind::Index => 3,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => ChunkKind::Accounts,
            1 => ChunkKind::Slots,
            2 => ChunkKind::Codes,
            3 => ChunkKind::Index,
            _ => return None,
        })
    }

    /// The length of this kind's keys in a manifest's ranges.
    pub fn key_len(self) -> usize {
        match self {
            ChunkKind::Accounts | ChunkKind::Codes => 32,
            ChunkKind::Slots => 64,
            ChunkKind::Index => 8,
        }
    }

    /// The kind of `entries`.
    pub fn of(entries: &SnapshotEntries) -> Self {
        match entries {
            SnapshotEntries::Accounts(_) => ChunkKind::Accounts,
            SnapshotEntries::Slots(_) => ChunkKind::Slots,
            SnapshotEntries::Codes(_) => ChunkKind::Codes,
            SnapshotEntries::Index { .. } => ChunkKind::Index,
        }
    }
}

/// One chunk as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkInfo {
    /// What it holds.
    pub kind: ChunkKind,
    /// How many entries.
    pub entries: u32,
    /// Its payload's length, uncompressed.
    pub raw_len: u32,
    /// The file's length.
    pub file_len: u32,
    /// BLAKE3 of the file.
    pub file_hash: B256,
    /// The key of its first entry ([`ChunkKind::key_len`] bytes; the index, big-endian, for
    /// index chunks).
    pub first: Vec<u8>,
    /// The key of its last entry.
    pub last: Vec<u8>,
    /// The sum of its entries' lattice elements (zero for codes).
    pub share: LatticeHash,
}

/// A snapshot's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Header N as the sequencer sealed it.
    pub header: Header,
    /// Its hash.
    pub hash: B256,
    /// The sequencer's signature over the hash.
    pub signature: Signature,
    /// Diff N's state commitment.
    pub commitment: StateCommitment,
    /// `L_N`: the lattice hash whose checksum the commitment signs.
    pub lattice: LatticeHash,
    /// Entries in the key index.
    pub index_len: u64,
    /// Accounts in the state.
    pub accounts: u64,
    /// Nonzero slots in the state.
    pub slots: u64,
    /// Codes in the state.
    pub codes: u64,
    /// The chunks, kind by kind, each kind in key order.
    pub chunks: Vec<ChunkInfo>,
    /// The [`ANCESTORS`] headers before N (all of them when N is smaller), oldest first.
    /// Unsigned: each is bound to the signed header N by the chain of parent hashes.
    pub ancestors: Vec<Header>,
}

/// A little reader that turns running short into a [`SnapshotError::Manifest`].
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("truncated in {what}"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_be_bytes(a))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_be_bytes(a))
    }

    fn b256(&mut self, what: &str) -> Result<B256, String> {
        Ok(B256::from_slice(self.take(32, what)?))
    }

    fn signature(&mut self, what: &str) -> Result<Signature, String> {
        Signature::from_raw(self.take(SIGNATURE_LEN, what)?).map_err(|e| format!("{what}: {e}"))
    }

    fn lattice(&mut self, what: &str) -> Result<LatticeHash, String> {
        LatticeHash::from_bytes(self.take(LATTICE_LEN, what)?)
            .ok_or_else(|| format!("{what}: not a lattice hash"))
    }
}

impl Manifest {
    /// The manifest's bytes: `GSM\x02`, block (u64), header length (u32) and RLP, header
    /// signature (65), commitment checksum (32) and signature (65), `L_N` (2,048), index
    /// length, accounts, slots and codes (u64 each), chunk count (u32), per chunk: kind (1),
    /// entries, raw length and file length (u32 each), BLAKE3 (32), first and last key (their
    /// kind's length each), share (2,048); ancestor count (u32), per ancestor header: length
    /// (u32) and RLP, oldest first; then CRC-32 of everything before. Integers are
    /// big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4096 + self.chunks.len() * 2200);
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&self.header.number.to_be_bytes());
        let mut rlp = Vec::new();
        self.header.encode(&mut rlp);
        out.extend_from_slice(&(rlp.len() as u32).to_be_bytes());
        out.extend_from_slice(&rlp);
        out.extend_from_slice(&self.signature.as_bytes());
        out.extend_from_slice(self.commitment.lattice.as_slice());
        out.extend_from_slice(&self.commitment.signature.as_bytes());
        out.extend_from_slice(&self.lattice.to_bytes());
        for n in [self.index_len, self.accounts, self.slots, self.codes] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out.extend_from_slice(&(self.chunks.len() as u32).to_be_bytes());
        for c in &self.chunks {
            out.push(c.kind.code());
            out.extend_from_slice(&c.entries.to_be_bytes());
            out.extend_from_slice(&c.raw_len.to_be_bytes());
            out.extend_from_slice(&c.file_len.to_be_bytes());
            out.extend_from_slice(c.file_hash.as_slice());
            out.extend_from_slice(&c.first);
            out.extend_from_slice(&c.last);
            out.extend_from_slice(&c.share.to_bytes());
        }
        out.extend_from_slice(&(self.ancestors.len() as u32).to_be_bytes());
        for ancestor in &self.ancestors {
            rlp.clear();
            ancestor.encode(&mut rlp);
            out.extend_from_slice(&(rlp.len() as u32).to_be_bytes());
            out.extend_from_slice(&rlp);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a manifest's bytes. Checks their form only; [`Manifest::verify`] checks what
    /// they claim.
    pub fn decode(bytes: &[u8]) -> Result<Self, SnapshotError> {
        Self::decode_inner(bytes).map_err(SnapshotError::Manifest)
    }

    fn decode_inner(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(format!("{} bytes, more than the limit", bytes.len()));
        }
        if bytes.len() < 8 {
            return Err(format!("{} bytes, too short", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let mut stored = [0u8; 4];
        stored.copy_from_slice(crc);
        if crc32fast::hash(body) != u32::from_be_bytes(stored) {
            return Err("CRC mismatch (damaged or cut short)".into());
        }
        let mut r = Reader { bytes: body };
        let magic = r.take(4, "magic")?;
        if magic[..3] == MANIFEST_MAGIC[..3] && magic[3] < MANIFEST_MAGIC[3] {
            return Err(format!(
                "a manifest of version {}, which carries no ancestor headers (BLOCKHASH of \
                 the blocks before the snapshot would be wrong): the source runs an older \
                 Gigas; upgrade it, or bootstrap from another source",
                magic[3]
            ));
        }
        if magic != MANIFEST_MAGIC {
            return Err(format!(
                "not a Gigas snapshot manifest of version {}",
                MANIFEST_MAGIC[3]
            ));
        }
        let block = r.u64("block")?;
        let header_len = r.u32("header length")?;
        if header_len > MAX_HEADER {
            return Err(format!("header of {header_len} bytes"));
        }
        let mut rlp = r.take(header_len as usize, "header")?;
        let header = Header::decode(&mut rlp).map_err(|e| format!("header RLP: {e}"))?;
        if !rlp.is_empty() {
            return Err("bytes after the header's RLP".into());
        }
        if header.number != block {
            return Err(format!(
                "it names block {block} but carries header {}",
                header.number
            ));
        }
        let signature = r.signature("header signature")?;
        let commitment = StateCommitment {
            lattice: r.b256("commitment")?,
            signature: r.signature("commitment signature")?,
        };
        let lattice = r.lattice("lattice hash")?;
        let index_len = r.u64("index length")?;
        let accounts = r.u64("account count")?;
        let slots = r.u64("slot count")?;
        let codes = r.u64("code count")?;
        let count = r.u32("chunk count")?;
        let mut chunks = Vec::new();
        for i in 0..count {
            let kind = r.u8("chunk kind")?;
            let kind = ChunkKind::from_code(kind)
                .ok_or_else(|| format!("chunk {i} has unknown kind {kind}"))?;
            let entries = r.u32("chunk entries")?;
            let raw_len = r.u32("chunk raw length")?;
            let file_len = r.u32("chunk file length")?;
            let file_hash = r.b256("chunk hash")?;
            let first = r.take(kind.key_len(), "chunk first key")?.to_vec();
            let last = r.take(kind.key_len(), "chunk last key")?.to_vec();
            let share = r.lattice("chunk share")?;
            chunks.push(ChunkInfo {
                kind,
                entries,
                raw_len,
                file_len,
                file_hash,
                first,
                last,
                share,
            });
        }
        let count = r.u32("ancestor count")?;
        if u64::from(count) > ANCESTORS {
            return Err(format!("{count} ancestor headers, more than {ANCESTORS}"));
        }
        let mut ancestors = Vec::with_capacity(count as usize);
        for i in 0..count {
            let len = r.u32("ancestor header length")?;
            if len > MAX_HEADER {
                return Err(format!("ancestor header {i} of {len} bytes"));
            }
            let mut rlp = r.take(len as usize, "ancestor header")?;
            let ancestor =
                Header::decode(&mut rlp).map_err(|e| format!("ancestor header {i} RLP: {e}"))?;
            if !rlp.is_empty() {
                return Err(format!("bytes after ancestor header {i}'s RLP"));
            }
            ancestors.push(ancestor);
        }
        if !r.bytes.is_empty() {
            return Err(format!(
                "{} bytes after the last ancestor header",
                r.bytes.len()
            ));
        }
        let hash = header.hash_slow();
        Ok(Self {
            header,
            hash,
            signature,
            commitment,
            lattice,
            index_len,
            accounts,
            slots,
            codes,
            chunks,
            ancestors,
        })
    }

    /// The snapshot's block.
    pub fn block(&self) -> u64 {
        self.header.number
    }

    /// Checks what the manifest claims: both signatures are `sequencer`'s, `L_N` is the
    /// lattice hash the commitment signs, the shares add up to it, and the chunks tile each
    /// kind in key order with the counts the manifest gives. After this, each chunk is checked
    /// alone by [`verify_chunk`].
    pub fn verify(&self, sequencer: Address) -> Result<(), SnapshotError> {
        let who = |s: Option<Address>| s.map_or_else(|| "no key".to_string(), |a| a.to_string());
        let signer =
            alloy_consensus::crypto::secp256k1::recover_signer(&self.signature, self.hash).ok();
        if signer != Some(sequencer) {
            return Err(SnapshotError::Signer {
                what: "header",
                signer: who(signer),
                expected: sequencer,
            });
        }
        let signer = self.commitment.signer(&self.hash);
        if signer != Some(sequencer) {
            return Err(SnapshotError::Signer {
                what: "state commitment",
                signer: who(signer),
                expected: sequencer,
            });
        }
        let computed = self.lattice.checksum();
        if computed != self.commitment.lattice {
            return Err(SnapshotError::Lattice {
                signed: self.commitment.lattice,
                computed,
            });
        }
        let mut sum = LatticeHash::zero();
        for c in &self.chunks {
            sum.add(&c.share);
        }
        if sum != self.lattice {
            return Err(SnapshotError::Shares {
                signed: self.commitment.lattice,
                computed: sum.checksum(),
            });
        }
        self.check_layout().map_err(SnapshotError::Manifest)?;
        self.check_ancestors().map_err(SnapshotError::Manifest)
    }

    /// The ancestor headers are the [`ANCESTORS`] blocks before N, each the parent of the
    /// next and the last the parent of the signed header N: so they are the sequencer's, with
    /// no signature of their own.
    fn check_ancestors(&self) -> Result<(), String> {
        let n = self.block();
        let expected = n.min(ANCESTORS);
        if self.ancestors.len() as u64 != expected {
            return Err(format!(
                "{} ancestor headers; a snapshot of block {n} carries the {expected} before it",
                self.ancestors.len()
            ));
        }
        let mut child = (n, self.header.parent_hash);
        for ancestor in self.ancestors.iter().rev() {
            let number = child.0 - 1;
            if ancestor.number != number {
                return Err(format!(
                    "ancestor header {} stands where block {number} belongs",
                    ancestor.number
                ));
            }
            let hash = ancestor.hash_slow();
            if hash != child.1 {
                return Err(format!(
                    "ancestor header {number} hashes to {hash}, but block {} names {} as its \
                     parent",
                    child.0, child.1
                ));
            }
            child = (number, ancestor.parent_hash);
        }
        Ok(())
    }

    fn check_layout(&self) -> Result<(), String> {
        let mut counts = [0u64; 4];
        let mut previous: Option<&ChunkInfo> = None;
        for (i, c) in self.chunks.iter().enumerate() {
            if c.entries == 0 {
                return Err(format!("chunk {i} is empty"));
            }
            if c.raw_len > MAX_CHUNK_RAW {
                return Err(format!(
                    "chunk {i} holds {} bytes, over the limit",
                    c.raw_len
                ));
            }
            if (c.file_len as usize) < CHUNK_HEADER {
                return Err(format!("chunk {i} is {} bytes", c.file_len));
            }
            // What a node downloads and holds for a chunk is its file: bounded by what zstd
            // can make of the payload at worst, so that a manifest cannot make a node
            // reserve or read gigabytes for one chunk (four are fetched at once).
            let bound = max_file_len(c.raw_len);
            if u64::from(c.file_len) > bound {
                return Err(format!(
                    "chunk {i} is listed at {} bytes, over the {bound} its {} bytes can \
                     compress to at worst",
                    c.file_len, c.raw_len
                ));
            }
            if c.first > c.last {
                return Err(format!("chunk {i}'s range is reversed"));
            }
            if c.kind == ChunkKind::Codes && c.share != LatticeHash::zero() {
                return Err(format!(
                    "code chunk {i} has a share (codes are not elements)"
                ));
            }
            match previous {
                Some(p) if p.kind > c.kind => {
                    return Err(format!("chunk {i}'s kind comes after the next kind"))
                }
                Some(p) if p.kind == c.kind && p.last >= c.first => {
                    return Err(format!("chunk {i} overlaps or precedes chunk {}", i - 1))
                }
                _ => {}
            }
            if c.kind == ChunkKind::Index {
                let first = index_of(&c.first);
                let expected = previous
                    .filter(|p| p.kind == ChunkKind::Index)
                    .map_or(0, |p| index_of(&p.last) + 1);
                if first != expected || index_of(&c.last) - first + 1 != u64::from(c.entries) {
                    return Err(format!(
                        "index chunk {i} covers {first}..={}, not the next {} entries from {expected}",
                        index_of(&c.last),
                        c.entries
                    ));
                }
            }
            counts[c.kind.code() as usize] += u64::from(c.entries);
            previous = Some(c);
        }
        let expected = [self.accounts, self.slots, self.codes, self.index_len];
        if counts != expected {
            return Err(format!(
                "the chunks hold {counts:?} accounts, slots, codes and index entries; the manifest says {expected:?}"
            ));
        }
        // Codes are outside the signed commitment: every one must be named by an account,
        // so a state has no more codes than accounts. A snapshot listing more is padding a
        // node would download for nothing.
        if self.codes > self.accounts {
            return Err(format!(
                "{} codes for {} accounts: each code is named by an account",
                self.codes, self.accounts
            ));
        }
        Ok(())
    }
}

/// The most bytes a chunk file of a `raw_len`-byte payload can take: its header and zstd's
/// worst case for the payload ([`encode_chunk`] writes one frame of it).
pub fn max_file_len(raw_len: u32) -> u64 {
    (CHUNK_HEADER + zstd::zstd_safe::compress_bound(raw_len as usize)) as u64
}

fn index_of(key: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&key[..8]);
    u64::from_be_bytes(a)
}

/// The manifest's identity: BLAKE3 of its bytes (what a resumed bootstrap must find again).
pub fn manifest_id(bytes: &[u8]) -> B256 {
    B256::from(*blake3::hash(bytes).as_bytes())
}

fn trimmed(bytes: &[u8]) -> &[u8] {
    let zeros = bytes.iter().take_while(|b| **b == 0).count();
    &bytes[zeros..]
}

/// The keys of the first and last entry of `entries`, as a manifest lists them.
fn range_of(entries: &SnapshotEntries) -> (Vec<u8>, Vec<u8>) {
    fn ends<T>(v: &[T], key: impl Fn(&T) -> Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        (
            v.first().map(&key).unwrap_or_default(),
            v.last().map(&key).unwrap_or_default(),
        )
    }
    match entries {
        SnapshotEntries::Accounts(v) => ends(v, |(k, _)| k.to_vec()),
        SnapshotEntries::Slots(v) => ends(v, |(a, s, _)| [a.as_slice(), s.as_slice()].concat()),
        SnapshotEntries::Codes(v) => ends(v, |(h, _)| h.to_vec()),
        SnapshotEntries::Index { first, keys } => {
            let last = first + (keys.len() as u64).saturating_sub(1);
            (first.to_be_bytes().to_vec(), last.to_be_bytes().to_vec())
        }
    }
}

/// The payload of `entries`, uncompressed.
fn encode_payload(entries: &SnapshotEntries, out: &mut Vec<u8>) {
    out.clear();
    match entries {
        SnapshotEntries::Accounts(accounts) => {
            for (key, state) in accounts {
                out.extend_from_slice(key.as_slice());
                let nonce = state.nonce.to_be_bytes();
                let nonce = trimmed(&nonce);
                out.push(nonce.len() as u8);
                out.extend_from_slice(nonce);
                let balance = state.balance.to_be_bytes::<32>();
                let balance = trimmed(&balance);
                out.push(balance.len() as u8);
                out.extend_from_slice(balance);
                if state.code_hash == KECCAK256_EMPTY {
                    out.push(0);
                } else {
                    out.push(1);
                    out.extend_from_slice(state.code_hash.as_slice());
                }
            }
        }
        SnapshotEntries::Slots(slots) => {
            for (address, slot, value) in slots {
                out.extend_from_slice(address.as_slice());
                out.extend_from_slice(slot.as_slice());
                let value = value.to_be_bytes::<32>();
                let value = trimmed(&value);
                out.push(value.len() as u8);
                out.extend_from_slice(value);
            }
        }
        SnapshotEntries::Codes(codes) => {
            for (hash, code) in codes {
                out.extend_from_slice(hash.as_slice());
                out.extend_from_slice(&(code.len() as u32).to_be_bytes());
                out.extend_from_slice(code);
            }
        }
        SnapshotEntries::Index { first, keys } => {
            out.extend_from_slice(&first.to_be_bytes());
            for key in keys {
                match key {
                    StateKey::Account(address) => {
                        out.push(20);
                        out.extend_from_slice(address.as_slice());
                    }
                    StateKey::Slot(address, slot) => {
                        out.push(52);
                        out.extend_from_slice(address.as_slice());
                        out.extend_from_slice(&slot.to_be_bytes::<32>());
                    }
                }
            }
        }
    }
}

/// The sum of `entries`' lattice elements, on rayon's pool.
pub fn share_of(entries: &SnapshotEntries) -> LatticeHash {
    use rayon::prelude::*;
    let sum = |mut a: LatticeHash, b: LatticeHash| {
        a.add(&b);
        a
    };
    match entries {
        SnapshotEntries::Accounts(accounts) => accounts
            .par_iter()
            .fold(LatticeHash::zero, |mut s, (key, state)| {
                s.apply_account(true, key, state);
                s
            })
            .reduce(LatticeHash::zero, sum),
        SnapshotEntries::Slots(slots) => slots
            .par_iter()
            .fold(LatticeHash::zero, |mut s, (address, slot, value)| {
                if !value.is_zero() {
                    s.apply_slot(true, address, slot, value);
                }
                s
            })
            .reduce(LatticeHash::zero, sum),
        SnapshotEntries::Codes(_) => LatticeHash::zero(),
        SnapshotEntries::Index { first, keys } => keys
            .par_iter()
            .enumerate()
            .fold(LatticeHash::zero, |mut s, (i, key)| {
                let index = first + i as u64;
                match key {
                    StateKey::Account(address) => s.apply_index_entry(true, index, address, None),
                    StateKey::Slot(address, slot) => {
                        s.apply_index_entry(true, index, address, Some(slot))
                    }
                }
                s
            })
            .reduce(LatticeHash::zero, sum),
    }
}

/// How many entries `entries` holds.
pub fn entry_count(entries: &SnapshotEntries) -> usize {
    match entries {
        SnapshotEntries::Accounts(v) => v.len(),
        SnapshotEntries::Slots(v) => v.len(),
        SnapshotEntries::Codes(v) => v.len(),
        SnapshotEntries::Index { keys, .. } => keys.len(),
    }
}

/// Encodes chunk `number` of the snapshot at `block`: `GSC\x01`, block (u64), chunk number
/// (u32), kind (1), entries (u32), raw length (u32), then the payload as one zstd frame.
/// Returns the file and how the manifest lists it (its share summed on rayon's pool).
pub fn encode_chunk(
    block: u64,
    number: u32,
    entries: &SnapshotEntries,
    level: i32,
) -> Result<(Vec<u8>, ChunkInfo), SnapshotError> {
    let mut raw = Vec::new();
    encode_payload(entries, &mut raw);
    let (first, last) = range_of(entries);
    let count = entry_count(entries);
    if count == 0 || raw.len() > MAX_CHUNK_RAW as usize || count > u32::MAX as usize {
        return Err(SnapshotError::Unsupported(format!(
            "chunk {number} of {count} entries and {} bytes is outside the format's bounds",
            raw.len()
        )));
    }
    let kind = ChunkKind::of(entries);
    let mut file = Vec::with_capacity(CHUNK_HEADER + raw.len() / 2);
    file.extend_from_slice(&CHUNK_MAGIC);
    file.extend_from_slice(&block.to_be_bytes());
    file.extend_from_slice(&number.to_be_bytes());
    file.push(kind.code());
    file.extend_from_slice(&(count as u32).to_be_bytes());
    file.extend_from_slice(&(raw.len() as u32).to_be_bytes());
    let compressed = zstd::bulk::compress(&raw, level).map_err(|source| SnapshotError::Io {
        path: format!("chunk {number} (zstd)").into(),
        source,
    })?;
    file.extend_from_slice(&compressed);
    let info = ChunkInfo {
        kind,
        entries: count as u32,
        raw_len: raw.len() as u32,
        file_len: file.len() as u32,
        file_hash: B256::from(*blake3::hash(&file).as_bytes()),
        first,
        last,
        share: share_of(entries),
    };
    Ok((file, info))
}

/// Checks chunk `number` of `manifest` (which [`Manifest::verify`] accepted) as it arrived,
/// and returns its entries: the size and BLAKE3 the manifest lists (before decompressing
/// anything), its header, its entries in strict key order within the listed range, each
/// code against its hash, and the sum of its elements against its listed share.
pub fn verify_chunk(
    manifest: &Manifest,
    number: u32,
    bytes: &[u8],
) -> Result<SnapshotEntries, SnapshotError> {
    let fault = |fault| SnapshotError::Chunk {
        chunk: number,
        fault,
    };
    let info = manifest.chunks.get(number as usize).ok_or_else(|| {
        SnapshotError::Manifest(format!(
            "chunk {number} asked of a manifest of {} chunks",
            manifest.chunks.len()
        ))
    })?;
    // Whose chunk it is, when its header says so: the most useful reason for a mix-up.
    let named = (bytes.len() >= CHUNK_HEADER && bytes[..4] == CHUNK_MAGIC).then(|| {
        let mut block = [0u8; 8];
        block.copy_from_slice(&bytes[4..12]);
        let mut chunk = [0u8; 4];
        chunk.copy_from_slice(&bytes[12..16]);
        (u64::from_be_bytes(block), u32::from_be_bytes(chunk))
    });
    if let Some((block, chunk)) = named {
        if (block, chunk) != (manifest.block(), number) {
            return Err(fault(ChunkFault::OtherSnapshot { block, chunk }));
        }
    }
    if bytes.len() as u64 != u64::from(info.file_len) {
        return Err(fault(ChunkFault::Size {
            got: bytes.len() as u64,
            expected: u64::from(info.file_len),
        }));
    }
    let got = B256::from(*blake3::hash(bytes).as_bytes());
    if got != info.file_hash {
        return Err(fault(ChunkFault::Hash {
            got,
            expected: info.file_hash,
        }));
    }
    // The bytes are the ones listed; what follows guards against a manifest that lists a
    // file it does not describe.
    let malformed = |m: String| fault(ChunkFault::Malformed(m));
    let header = &bytes[..CHUNK_HEADER];
    let u32_at = |at: usize| {
        let mut a = [0u8; 4];
        a.copy_from_slice(&header[at..at + 4]);
        u32::from_be_bytes(a)
    };
    if ChunkKind::from_code(header[16]) != Some(info.kind)
        || u32_at(17) != info.entries
        || u32_at(21) != info.raw_len
        || named.is_none()
    {
        return Err(malformed(
            "its header is not the one the manifest lists".into(),
        ));
    }
    // One frame and nothing after it, as the diffs are read: a second or skippable frame
    // would be bytes the chunk's hash covers and its entries do not.
    let raw = gigas_statediff::decompress_one_frame(&bytes[CHUNK_HEADER..], info.raw_len as usize)
        .map_err(|e| malformed(format!("zstd: {e}")))?;
    let entries = decode_payload(info, &raw).map_err(malformed)?;
    if entry_count(&entries) != info.entries as usize {
        return Err(malformed(format!(
            "{} entries, {} listed",
            entry_count(&entries),
            info.entries
        )));
    }
    check_order(info, &entries).map_err(|m| fault(ChunkFault::Order(m)))?;
    if let SnapshotEntries::Codes(codes) = &entries {
        for (hash, code) in codes {
            let computed = keccak256(code);
            if computed != *hash {
                return Err(fault(ChunkFault::Code {
                    hash: *hash,
                    computed,
                }));
            }
        }
    }
    let share = share_of(&entries);
    if share != info.share {
        return Err(fault(ChunkFault::Share {
            computed: share.checksum(),
            listed: info.share.checksum(),
        }));
    }
    Ok(entries)
}

fn decode_payload(info: &ChunkInfo, raw: &[u8]) -> Result<SnapshotEntries, String> {
    let mut r = Reader { bytes: raw };
    let capacity = (info.entries as usize).min(raw.len() / 8 + 1);
    let int = |r: &mut Reader<'_>, max: usize, what: &str| -> Result<Vec<u8>, String> {
        let len = r.u8(what)? as usize;
        if len > max {
            return Err(format!("{what} of {len} bytes"));
        }
        Ok(r.take(len, what)?.to_vec())
    };
    Ok(match info.kind {
        ChunkKind::Accounts => {
            let mut out = Vec::with_capacity(capacity);
            while !r.bytes.is_empty() {
                let key = r.b256("account key")?;
                let nonce = int(&mut r, 8, "nonce")?;
                let mut padded = [0u8; 8];
                padded[8 - nonce.len()..].copy_from_slice(&nonce);
                let balance = U256::from_be_slice(&int(&mut r, 32, "balance")?);
                let code_hash = match r.u8("code flag")? {
                    0 => KECCAK256_EMPTY,
                    1 => r.b256("code hash")?,
                    other => return Err(format!("code flag {other}")),
                };
                out.push((
                    key,
                    AccountState {
                        nonce: u64::from_be_bytes(padded),
                        balance,
                        code_hash,
                    },
                ));
            }
            SnapshotEntries::Accounts(out)
        }
        ChunkKind::Slots => {
            let mut out = Vec::with_capacity(capacity);
            while !r.bytes.is_empty() {
                let address = r.b256("slot address")?;
                let slot = r.b256("slot key")?;
                let value = U256::from_be_slice(&int(&mut r, 32, "slot value")?);
                if value.is_zero() {
                    return Err("a slot holding zero (zero slots are not stored)".into());
                }
                out.push((address, slot, value));
            }
            SnapshotEntries::Slots(out)
        }
        ChunkKind::Codes => {
            let mut out = Vec::with_capacity(capacity);
            while !r.bytes.is_empty() {
                let hash = r.b256("code hash")?;
                let len = r.u32("code length")? as usize;
                out.push((hash, r.take(len, "code")?.to_vec()));
            }
            SnapshotEntries::Codes(out)
        }
        ChunkKind::Index => {
            let first = r.u64("first index")?;
            let mut keys = Vec::with_capacity(capacity);
            while !r.bytes.is_empty() {
                keys.push(match r.u8("key length")? {
                    20 => StateKey::Account(Address::from_slice(r.take(20, "address")?)),
                    52 => {
                        let address = Address::from_slice(r.take(20, "address")?);
                        StateKey::Slot(address, U256::from_be_slice(r.take(32, "slot")?))
                    }
                    other => return Err(format!("index key of {other} bytes")),
                });
            }
            SnapshotEntries::Index { first, keys }
        }
    })
}

/// Entries in strict key order, first and last as listed (for index chunks, the first index
/// as listed: the rest follow by construction).
fn check_order(info: &ChunkInfo, entries: &SnapshotEntries) -> Result<(), String> {
    fn strictly<T: PartialOrd>(items: impl Iterator<Item = T>) -> Result<(), String> {
        let mut previous: Option<T> = None;
        for (i, item) in items.enumerate() {
            if previous.as_ref().is_some_and(|p| *p >= item) {
                return Err(format!(
                    "entry {i} is not after entry {}",
                    i.saturating_sub(1)
                ));
            }
            previous = Some(item);
        }
        Ok(())
    }
    let (first, last) = range_of(entries);
    match entries {
        SnapshotEntries::Accounts(v) => strictly(v.iter().map(|(k, _)| *k))?,
        SnapshotEntries::Slots(v) => strictly(v.iter().map(|(a, s, _)| (*a, *s)))?,
        SnapshotEntries::Codes(v) => strictly(v.iter().map(|(h, _)| *h))?,
        SnapshotEntries::Index { .. } => {}
    }
    if first != info.first || last != info.last {
        return Err("its first or last key is not the one the manifest lists".into());
    }
    Ok(())
}

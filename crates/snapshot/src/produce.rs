//! Writing a snapshot of a full node's state from one read view, and pruning old ones.
//!
//! ```text
//! DIR/N/manifest   the manifest of the snapshot at block N ([`crate::Manifest`])
//! DIR/N/K          its chunk K (decimal, from 0)
//! DIR/head         JSON {"number": N, "manifest": "0x…"} of the newest (rewritten)
//! DIR/.N.partial   a snapshot being written (never served)
//! ```
//!
//! `DIR` is the archive's `snapshots/` directory, so the URL of a file is its path under the
//! archive, as for diffs. A snapshot is written under `.N.partial`, every file synced, then
//! renamed to `N` and the directory synced: a reader (or a crash) sees a whole snapshot or
//! none. Only then does `head` name it.

use std::fs;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use alloy_primitives::B256;
use gigas_statedb::{SnapshotEntries, StateView};
use tracing::{debug, info, warn};

use crate::error::SnapshotError;
use crate::format::{encode_chunk, manifest_id, Manifest};

/// How snapshots are cut.
#[derive(Debug, Clone, Copy)]
pub struct ProduceOptions {
    /// A chunk is cut once its payload reaches this many bytes, uncompressed (a code or
    /// entry is never split).
    pub chunk_bytes: usize,
    /// zstd level.
    pub level: i32,
}

impl Default for ProduceOptions {
    fn default() -> Self {
        Self {
            chunk_bytes: 4 << 20,
            level: 3,
        }
    }
}

/// What a snapshot write produced.
#[derive(Debug, Clone)]
pub struct Produced {
    /// The snapshot's block.
    pub block: u64,
    /// Its manifest's identity.
    pub manifest: B256,
    /// Its directory.
    pub dir: PathBuf,
    /// Chunks written.
    pub chunks: u32,
    /// Bytes of every file, the manifest included.
    pub bytes: u64,
    /// Accounts, slots, codes and index entries written.
    pub accounts: u64,
    /// Slots.
    pub slots: u64,
    /// Codes.
    pub codes: u64,
    /// Index entries.
    pub index_len: u64,
    /// Seconds it took.
    pub seconds: f64,
    /// `false` when the snapshot existed already and nothing was written.
    pub written: bool,
}

/// The name of the file naming the newest snapshot.
pub const HEAD_FILE: &str = "head";

/// What `DIR/head` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHead {
    /// The newest snapshot's block.
    pub number: u64,
    /// Its manifest's identity.
    pub manifest: B256,
}

/// The most older snapshots `DIR/head` names beside the newest.
pub const MAX_OLDER: usize = 8;

impl SnapshotHead {
    /// The JSON form.
    pub fn to_json(&self) -> String {
        self.to_json_with_older(&[])
    }

    /// The JSON form naming `older` snapshots too (newest first), which a new node falls back
    /// to when the newest cannot be used: `{"number", "manifest", "older": [{"number",
    /// "manifest"}, ...]}`.
    pub fn to_json_with_older(&self, older: &[SnapshotHead]) -> String {
        let mut value = self.to_value();
        value["older"] = older.iter().copied().map(Self::to_value).collect();
        value.to_string()
    }

    /// Reads the JSON form.
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        Self::from_json_with_older(bytes).map(|(head, _)| head)
    }

    /// Reads the JSON form with the older snapshots it names (none in a head written before
    /// they were named); older entries that do not parse are skipped, and at most
    /// [`MAX_OLDER`] are taken.
    pub fn from_json_with_older(bytes: &[u8]) -> Result<(Self, Vec<Self>), String> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("snapshots/head: {e}"))?;
        let head = Self::from_value(&value)?;
        let older = value
            .get("older")
            .and_then(serde_json::Value::as_array)
            .map(|older| {
                older
                    .iter()
                    .filter_map(|v| Self::from_value(v).ok())
                    .take(MAX_OLDER)
                    .collect()
            })
            .unwrap_or_default();
        Ok((head, older))
    }

    fn to_value(self) -> serde_json::Value {
        serde_json::json!({ "number": self.number, "manifest": self.manifest.to_string() })
    }

    fn from_value(value: &serde_json::Value) -> Result<Self, String> {
        let number = value
            .get("number")
            .and_then(serde_json::Value::as_u64)
            .ok_or("snapshots/head: no number")?;
        let manifest = value
            .get("manifest")
            .and_then(serde_json::Value::as_str)
            .and_then(|s| s.parse::<B256>().ok())
            .ok_or("snapshots/head: no manifest hash")?;
        Ok(Self { number, manifest })
    }
}

/// Accumulates one kind's entries and cuts chunks.
struct Cutter<'a> {
    dir: &'a Path,
    block: u64,
    options: ProduceOptions,
    manifest: &'a mut Manifest,
    bytes: u64,
    error: Option<SnapshotError>,
}

impl Cutter<'_> {
    fn cut(&mut self, entries: &mut SnapshotEntries) -> Result<(), SnapshotError> {
        let empty = match entries {
            SnapshotEntries::Accounts(v) => v.is_empty(),
            SnapshotEntries::Slots(v) => v.is_empty(),
            SnapshotEntries::Codes(v) => v.is_empty(),
            SnapshotEntries::Index { keys, .. } => keys.is_empty(),
        };
        if empty {
            return Ok(());
        }
        let number = self.manifest.chunks.len() as u32;
        let (file, info) = encode_chunk(self.block, number, entries, self.options.level)?;
        let path = self.dir.join(number.to_string());
        write_synced(&path, &file)?;
        self.bytes += file.len() as u64;
        debug!(chunk = number, kind = ?info.kind, entries = info.entries, bytes = file.len(), "snapshot chunk written");
        self.manifest.chunks.push(info);
        // Start the next chunk of the same kind.
        match entries {
            SnapshotEntries::Accounts(v) => v.clear(),
            SnapshotEntries::Slots(v) => v.clear(),
            SnapshotEntries::Codes(v) => v.clear(),
            SnapshotEntries::Index { first, keys } => {
                *first += keys.len() as u64;
                keys.clear();
            }
        }
        Ok(())
    }

    /// Adds an entry's estimated payload size; cuts when the chunk is full.
    fn grew(
        &mut self,
        size: &mut usize,
        by: usize,
        entries: &mut SnapshotEntries,
    ) -> ControlFlow<()> {
        *size += by;
        if *size < self.options.chunk_bytes {
            return ControlFlow::Continue(());
        }
        *size = 0;
        match self.cut(entries) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    let mut file = fs::File::create(path).map_err(SnapshotError::io(path))?;
    file.write_all(bytes).map_err(SnapshotError::io(path))?;
    file.sync_all().map_err(SnapshotError::io(path))
}

fn sync_dir(path: &Path) -> Result<(), SnapshotError> {
    fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(SnapshotError::io(path))
}

/// Writes a snapshot of `view`'s state (the head of its commit) under `dir`, unless one of
/// that block exists. The view is one MDBX read transaction: the node goes on applying and
/// committing meanwhile, and the snapshot is of the block the view saw.
pub fn write_snapshot(
    view: &StateView<'_>,
    dir: &Path,
    options: ProduceOptions,
) -> Result<Produced, SnapshotError> {
    let start = Instant::now();
    let tip = view
        .tip()?
        .ok_or_else(|| SnapshotError::Unsupported("the state database holds no block".into()))?;
    let block = tip.number;
    let final_dir = dir.join(block.to_string());
    let existing = final_dir.join("manifest");
    if existing.exists() {
        let bytes = fs::read(&existing).map_err(SnapshotError::io(&final_dir))?;
        if !bytes.starts_with(&crate::format::MANIFEST_MAGIC) {
            // Written by an older Gigas (a manifest without ancestor headers, which new nodes
            // refuse): written again in this version.
            tracing::info!(block, "rewriting a snapshot of an older format");
            fs::remove_dir_all(&final_dir).map_err(SnapshotError::io(&final_dir))?;
            return write_snapshot(view, dir, options);
        }
        return Ok(Produced {
            block,
            manifest: manifest_id(&bytes),
            dir: final_dir,
            chunks: 0,
            bytes: 0,
            accounts: 0,
            slots: 0,
            codes: 0,
            index_len: 0,
            seconds: 0.0,
            written: false,
        });
    }
    let header = view.header(block)?.ok_or_else(|| {
        SnapshotError::Unsupported(format!("the database holds no header of its head {block}"))
    })?;
    let (Some(signature), Some(commitment)) = (header.signature, header.commitment) else {
        return Err(SnapshotError::Unsupported(format!(
            "block {block}'s header is stored without the sequencer's signature or state \
             commitment (a node run with `--state-commitment off`, or a block applied by a \
             Gigas from before snapshots: the next block applied will have them)"
        )));
    };
    let lattice = view.lattice()?.ok_or_else(|| {
        SnapshotError::Unsupported("the database keeps no state commitment".into())
    })?;
    if lattice.checksum() != commitment.lattice {
        return Err(SnapshotError::Unsupported(format!(
            "the database's lattice hash {} is not the one the sequencer signed for block {block} ({})",
            lattice.checksum(),
            commitment.lattice
        )));
    }
    // The headers before N, which a node bootstrapped at N needs for BLOCKHASH: a node
    // holds every header from its genesis or, bootstrapped itself, from its snapshot's
    // ancestors on.
    let first = block.saturating_sub(crate::format::ANCESTORS);
    let mut ancestors = Vec::with_capacity((block - first) as usize);
    for number in first..block {
        let stored = view.header(number)?.ok_or_else(|| {
            SnapshotError::Unsupported(format!(
                "the database holds no header of block {number}, one of the {} before block \
                 {block} a snapshot carries (a node bootstrapped by a Gigas from before \
                 ancestor headers: it writes snapshots once it has applied {} blocks)",
                crate::format::ANCESTORS,
                crate::format::ANCESTORS
            ))
        })?;
        ancestors.push(stored.header);
    }
    let partial = dir.join(format!(".{block}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(SnapshotError::io(&partial))?;
    }
    fs::create_dir_all(&partial).map_err(SnapshotError::io(&partial))?;
    let mut manifest = Manifest {
        hash: header.hash,
        header: header.header,
        signature,
        commitment,
        lattice,
        index_len: 0,
        accounts: 0,
        slots: 0,
        codes: 0,
        chunks: Vec::new(),
        ancestors,
    };
    let (accounts, slots, codes, index_len, bytes) = {
        let mut cutter = Cutter {
            dir: &partial,
            block,
            options,
            manifest: &mut manifest,
            bytes: 0,
            error: None,
        };
        let mut counts = [0u64; 4];

        let mut entries = SnapshotEntries::Accounts(Vec::new());
        let mut size = 0;
        // The codes the accounts name: the only ones a snapshot carries (a code no account
        // names, left by a contract that self-destructed, is state no one can reach, and
        // codes are outside the signed commitment, so a node keeps only named ones).
        let mut named = std::collections::HashSet::new();
        view.scan_accounts(|key, state| {
            if let SnapshotEntries::Accounts(v) = &mut entries {
                v.push((*key, *state));
            }
            if state.code_hash != alloy_primitives::KECCAK256_EMPTY {
                named.insert(state.code_hash);
            }
            counts[0] += 1;
            let by = 32
                + 1
                + 8
                + 1
                + 32
                + 1
                + if state.code_hash == alloy_primitives::KECCAK256_EMPTY {
                    0
                } else {
                    32
                };
            cutter.grew(&mut size, by, &mut entries)
        })?;
        finish_kind(&mut cutter, &mut entries)?;

        let mut entries = SnapshotEntries::Slots(Vec::new());
        let mut size = 0;
        view.scan_slots(|address, slot, value| {
            if let SnapshotEntries::Slots(v) = &mut entries {
                v.push((*address, *slot, *value));
            }
            counts[1] += 1;
            cutter.grew(&mut size, 64 + 1 + value.byte_len(), &mut entries)
        })?;
        finish_kind(&mut cutter, &mut entries)?;

        let mut entries = SnapshotEntries::Codes(Vec::new());
        let mut size = 0;
        view.scan_codes(|hash, code| {
            if !named.contains(hash) {
                return ControlFlow::Continue(());
            }
            if let SnapshotEntries::Codes(v) = &mut entries {
                v.push((*hash, code.to_vec()));
            }
            counts[2] += 1;
            cutter.grew(&mut size, 36 + code.len(), &mut entries)
        })?;
        finish_kind(&mut cutter, &mut entries)?;

        let mut entries = SnapshotEntries::Index {
            first: 0,
            keys: Vec::new(),
        };
        let mut size = 0;
        let mut expected = 0u64;
        let mut gap = None;
        view.scan_index(|index, key| {
            if index != expected {
                gap = Some((expected, index));
                return ControlFlow::Break(());
            }
            expected += 1;
            if let SnapshotEntries::Index { keys, .. } = &mut entries {
                keys.push(*key);
            }
            counts[3] += 1;
            cutter.grew(&mut size, 53, &mut entries)
        })?;
        if let Some((expected, found)) = gap {
            return Err(SnapshotError::Unsupported(format!(
                "the key index jumps from {expected} to {found}: the database is damaged"
            )));
        }
        finish_kind(&mut cutter, &mut entries)?;
        let bytes = cutter.bytes;
        (counts[0], counts[1], counts[2], counts[3], bytes)
    };
    let stored_len = view.index_len()?;
    if stored_len != index_len {
        return Err(SnapshotError::Unsupported(format!(
            "the key index holds {index_len} entries, its recorded length is {stored_len}"
        )));
    }
    manifest.accounts = accounts;
    manifest.slots = slots;
    manifest.codes = codes;
    manifest.index_len = index_len;
    let encoded = manifest.encode();
    write_synced(&partial.join("manifest"), &encoded)?;
    sync_dir(&partial)?;
    fs::rename(&partial, &final_dir).map_err(SnapshotError::io(&final_dir))?;
    sync_dir(dir)?;
    let id = manifest_id(&encoded);
    let head = SnapshotHead {
        number: block,
        manifest: id,
    };
    let newest = read_head(dir).ok().flatten();
    if newest.is_none_or(|h| h.number < block) {
        let older = older_snapshots(dir, block);
        let tmp = dir.join(".head.tmp");
        write_synced(&tmp, head.to_json_with_older(&older).as_bytes())?;
        fs::rename(&tmp, dir.join(HEAD_FILE)).map_err(SnapshotError::io(dir))?;
        sync_dir(dir)?;
    }
    let produced = Produced {
        block,
        manifest: id,
        dir: final_dir,
        chunks: manifest.chunks.len() as u32,
        bytes: bytes + encoded.len() as u64,
        accounts,
        slots,
        codes,
        index_len,
        seconds: start.elapsed().as_secs_f64(),
        written: true,
    };
    info!(
        block,
        chunks = produced.chunks,
        mib = produced.bytes as f64 / (1 << 20) as f64,
        accounts,
        slots,
        codes,
        index_len,
        seconds = produced.seconds,
        "snapshot written"
    );
    Ok(produced)
}

fn finish_kind(
    cutter: &mut Cutter<'_>,
    entries: &mut SnapshotEntries,
) -> Result<(), SnapshotError> {
    if let Some(e) = cutter.error.take() {
        return Err(e);
    }
    cutter.cut(entries)
}

/// The snapshots under `dir` before `block`, newest first, at most [`MAX_OLDER`], each with
/// its manifest's identity (one whose manifest cannot be read is left out: pruning may be
/// removing it).
fn older_snapshots(dir: &Path, block: u64) -> Vec<SnapshotHead> {
    let blocks = list(dir).unwrap_or_default();
    blocks
        .iter()
        .rev()
        .filter(|&&n| n < block)
        .filter_map(|&n| {
            let bytes = fs::read(dir.join(n.to_string()).join("manifest")).ok()?;
            Some(SnapshotHead {
                number: n,
                manifest: manifest_id(&bytes),
            })
        })
        .take(MAX_OLDER)
        .collect()
}

/// What `dir/head` names (`None` when no snapshot was written yet).
pub fn read_head(dir: &Path) -> Result<Option<SnapshotHead>, SnapshotError> {
    let path = dir.join(HEAD_FILE);
    match fs::read(&path) {
        Ok(bytes) => SnapshotHead::from_json(&bytes)
            .map(Some)
            .map_err(SnapshotError::Manifest),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SnapshotError::io(&path)(e)),
    }
}

/// The blocks of the snapshots under `dir`, oldest first.
pub fn list(dir: &Path) -> Result<Vec<u64>, SnapshotError> {
    let mut blocks = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(blocks),
        Err(e) => return Err(SnapshotError::io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(SnapshotError::io(dir))?;
        if let Some(n) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u64>().ok())
        {
            if n.to_string() == entry.file_name().to_string_lossy() {
                blocks.push(n);
            }
        }
    }
    blocks.sort_unstable();
    Ok(blocks)
}

/// Removes all but the newest `keep` snapshots (never the one `head` names), and any
/// snapshot left half-written by a crash. Returns the blocks removed.
pub fn prune(dir: &Path, keep: usize) -> Result<Vec<u64>, SnapshotError> {
    let head = read_head(dir)?.map(|h| h.number);
    let blocks = list(dir)?;
    let mut removed = Vec::new();
    let cut = blocks.len().saturating_sub(keep.max(1));
    for &block in &blocks[..cut] {
        if Some(block) == head {
            continue;
        }
        let path = dir.join(block.to_string());
        fs::remove_dir_all(&path).map_err(SnapshotError::io(&path))?;
        removed.push(block);
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".partial") {
                if let Err(e) = fs::remove_dir_all(entry.path()) {
                    warn!(path = %entry.path().display(), error = %e, "removing a half-written snapshot");
                }
            }
        }
    }
    Ok(removed)
}

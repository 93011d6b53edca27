//! Writing a checked snapshot into an empty state database: chunks in manifest order through
//! [`gigas_statedb::Bootstrap`] (resumable), then the checks only the whole state allows and
//! the head.
//!
//! Where the chunks come from is the caller's (the full node fetches them over HTTP; tests and
//! `restore_dir` read a directory): every chunk given to [`Restore::write`] must have passed
//! [`crate::verify_chunk`] against the manifest passed to [`Restore::start`].

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::Path;

use alloy_primitives::{Address, B256, KECCAK256_EMPTY};
use gigas_statedb::{Bootstrap, BootstrapOutcome, SnapshotEntries, StateDb, StoredHeader};

use crate::error::SnapshotError;
use crate::format::{manifest_id, verify_chunk, Manifest, MAX_MANIFEST_BYTES};

/// A snapshot being written into a database.
#[derive(Debug)]
pub struct Restore<'db> {
    db: &'db StateDb,
    manifest: Manifest,
    bootstrap: Bootstrap<'db>,
    /// The codes the account chunks written by this run name; `None` once a run resumed
    /// after account chunks were written (then they are read back from the database).
    named_codes: Option<HashSet<B256>>,
}

impl<'db> Restore<'db> {
    /// Starts writing `manifest` (already verified) into `db`, or resumes where an earlier
    /// start with the same manifest stopped. `id` is [`manifest_id`] of its bytes.
    pub fn start(db: &'db StateDb, manifest: Manifest, id: B256) -> Result<Self, SnapshotError> {
        let bootstrap = db.bootstrap(manifest.block(), id)?;
        let done = bootstrap.progress().chunks_done as usize;
        let resumed_past_accounts = manifest
            .chunks
            .iter()
            .take(done)
            .any(|c| c.kind == crate::format::ChunkKind::Accounts);
        Ok(Self {
            db,
            manifest,
            bootstrap,
            named_codes: (!resumed_past_accounts).then(HashSet::new),
        })
    }

    /// The most key-index entries held in memory at once when the key index is filled
    /// ([`Bootstrap::with_key_pass_entries`]; tests set it small).
    #[doc(hidden)]
    pub fn with_key_pass_entries(mut self, entries: usize) -> Self {
        self.bootstrap = self.bootstrap.with_key_pass_entries(entries);
        self
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The next chunk to write (chunks before it are in the database).
    pub fn next_chunk(&self) -> u32 {
        self.bootstrap.progress().chunks_done
    }

    /// Whether every chunk is written.
    pub fn complete(&self) -> bool {
        self.next_chunk() as usize >= self.manifest.chunks.len()
    }

    /// Writes the next chunk's entries (checked by [`crate::verify_chunk`]). Of a code chunk
    /// only the codes an account names are written: codes are outside the signed commitment,
    /// so a source could otherwise add any number of them, which this node would keep and
    /// serve in its own snapshots. (Accounts come before codes in every manifest, so the
    /// names are all known by then.)
    pub fn write(&mut self, chunk: u32, entries: &SnapshotEntries) -> Result<(), SnapshotError> {
        if let SnapshotEntries::Codes(codes) = entries {
            let named = self.named_codes()?;
            if codes.iter().any(|(hash, _)| !named.contains(hash)) {
                let kept: Vec<_> = codes
                    .iter()
                    .filter(|(hash, _)| named.contains(hash))
                    .cloned()
                    .collect();
                let dropped = codes.len() - kept.len();
                tracing::warn!(
                    chunk,
                    dropped,
                    "the snapshot's code chunk holds codes no account names; they are not written"
                );
                self.bootstrap
                    .write_chunk(chunk, &SnapshotEntries::Codes(kept))?;
                return Ok(());
            }
        }
        self.bootstrap.write_chunk(chunk, entries)?;
        if let (Some(named), SnapshotEntries::Accounts(accounts)) = (&mut self.named_codes, entries)
        {
            named.extend(
                accounts
                    .iter()
                    .map(|(_, state)| state.code_hash)
                    .filter(|h| *h != KECCAK256_EMPTY),
            );
        }
        Ok(())
    }

    /// Writes every chunk not written yet from the local snapshots directory `dir` (a copy
    /// of a server's `snapshots/`), each checked with [`crate::verify_chunk`] first.
    pub fn write_from_dir(&mut self, dir: &Path) -> Result<(), SnapshotError> {
        let block = self.manifest.block();
        while !self.complete() {
            let chunk = self.next_chunk();
            let path = dir.join(block.to_string()).join(chunk.to_string());
            let bytes = std::fs::read(&path).map_err(SnapshotError::io(&path))?;
            let entries = verify_chunk(&self.manifest, chunk, &bytes)?;
            self.write(chunk, &entries)?;
        }
        Ok(())
    }

    /// Checks what no single chunk shows, then computes the state root (storing the trie)
    /// and records block N as the head. Until this returns, the database has no head: no
    /// part of the snapshot is ever served as state.
    pub fn finish(mut self) -> Result<BootstrapOutcome, SnapshotError> {
        if !self.complete() {
            return Err(SnapshotError::Incomplete(format!(
                "{} of {} chunks written",
                self.next_chunk(),
                self.manifest.chunks.len()
            )));
        }
        // A code chunk adds nothing to the lattice hash, so a manifest could leave one out
        // and still add up: every code an account names must have arrived.
        let named = std::mem::take(self.named_codes()?);
        let view = self.db.view()?;
        for hash in &named {
            if view.code(hash)?.is_none() {
                return Err(SnapshotError::Incomplete(format!(
                    "an account's code {hash} is in no chunk of the snapshot"
                )));
            }
        }
        drop(view);
        let m = &self.manifest;
        let header = StoredHeader {
            header: m.header.clone(),
            hash: m.hash,
            signature: Some(m.signature),
            state_root: None,
            commitment: Some(m.commitment),
        };
        // Unsigned: [`Manifest::verify`] checked that they chain to the signed header.
        let ancestors: Vec<StoredHeader> = m
            .ancestors
            .iter()
            .map(|h| StoredHeader {
                hash: h.hash_slow(),
                header: h.clone(),
                signature: None,
                state_root: None,
                commitment: None,
            })
            .collect();
        Ok(self
            .bootstrap
            .finish(&header, &ancestors, m.index_len, Some(&m.lattice))?)
    }
}

impl Restore<'_> {
    /// The codes the written account chunks name, read back from the database once when this
    /// run resumed past them.
    fn named_codes(&mut self) -> Result<&mut HashSet<B256>, SnapshotError> {
        if self.named_codes.is_none() {
            let mut named = HashSet::new();
            self.db.view()?.scan_accounts(|_, state| {
                if state.code_hash != KECCAK256_EMPTY {
                    named.insert(state.code_hash);
                }
                ControlFlow::Continue(())
            })?;
            self.named_codes = Some(named);
        }
        Ok(self.named_codes.get_or_insert_with(HashSet::new))
    }
}

/// Reads and verifies the manifest of the snapshot at `block` under the snapshots directory
/// `dir`, returning it with its identity.
pub fn read_manifest(
    dir: &Path,
    block: u64,
    sequencer: Address,
) -> Result<(Manifest, B256), SnapshotError> {
    let path = dir.join(block.to_string()).join("manifest");
    let len = std::fs::metadata(&path)
        .map_err(SnapshotError::io(&path))?
        .len();
    if len > MAX_MANIFEST_BYTES {
        return Err(SnapshotError::Manifest(format!(
            "{len} bytes, over the limit"
        )));
    }
    let bytes = std::fs::read(&path).map_err(SnapshotError::io(&path))?;
    let manifest = Manifest::decode(&bytes)?;
    manifest.verify(sequencer)?;
    Ok((manifest, manifest_id(&bytes)))
}

/// Bootstraps `db` from the snapshot at `block` in the local snapshots directory `dir`
/// (a copy of a server's `snapshots/`), resuming an earlier start: every check the network
/// path makes, without the network.
pub fn restore_dir(
    db: &StateDb,
    dir: &Path,
    block: u64,
    sequencer: Address,
) -> Result<BootstrapOutcome, SnapshotError> {
    let (manifest, id) = read_manifest(dir, block, sequencer)?;
    let mut restore = Restore::start(db, manifest, id)?;
    restore.write_from_dir(dir)?;
    restore.finish()
}

//! The apply core: verify a diff against the writer's tip, write it into the open group, keep
//! the root and commit groups. Shared by the follower's apply thread and `gigas-bench
//! fullnode`, so that the benchmark measures exactly what the node does.

use std::time::Instant;

use alloy_primitives::{Address, B256};
use gigas_statedb::{BlockToApply, CommitInfo, RootInfo, StateDb, StateDbError, StateWriter};
use gigas_statediff::{
    verify_and_decode_timed, BodyErrorKind, ChainTip, DiffError, DiffErrorKind, VerifiedDiff,
    VerifyTimings,
};

/// Where applying spent its time, summed over blocks (seconds), and what it applied.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ApplyTimings {
    /// Checking the frame and CRC, decompressing.
    pub decode: f64,
    /// Header hash and signature recovery, and the checksum chain.
    pub verify: f64,
    /// Decoding the body: reading the key index and the prior values (the state's pages).
    pub read: f64,
    /// Writing the block's state into the group (in memory until the commit), and its code,
    /// index keys and header into the open transaction.
    pub write: f64,
    /// Updating the MPT and storing its branch nodes.
    pub trie: f64,
    /// Committing groups (the sorted hashed writes, then MDBX's commit and sync).
    pub commit: f64,
    /// With the decode stage ([`crate::decode`]): the apply thread waiting for its next
    /// decoded block. `decode`, `verify` and `read` are then the decode thread's, beside it.
    pub waiting: f64,
    /// Whether blocks were decoded ahead, on the decode thread.
    pub decoded_ahead: bool,
    /// Blocks applied.
    pub blocks: u64,
    /// Account and slot changes applied.
    pub changes: u64,
    /// Gas used by the applied blocks (transfers = gas / 21,000 for a transfer workload).
    pub gas_used: u64,
}

impl ApplyTimings {
    /// The apply thread's time in the phases: with the decode stage, decoding, verifying
    /// and reading are another thread's, and its waiting for them counts instead.
    pub fn total(&self) -> f64 {
        let decoding = if self.decoded_ahead {
            0.0
        } else {
            self.decode + self.verify + self.read
        };
        decoding + self.write + self.trie + self.commit + self.waiting
    }

    /// The phases by name, in pipeline order, for tables.
    pub fn phases(&self) -> [(&'static str, f64); 7] {
        [
            ("decode", self.decode),
            ("verify", self.verify),
            ("read", self.read),
            ("write", self.write),
            ("trie", self.trie),
            ("commit", self.commit),
            ("waiting", self.waiting),
        ]
    }

    fn add_verify(&mut self, t: &VerifyTimings) {
        self.decode += t.parse;
        self.verify += t.signature + t.commitment;
        self.read += t.decode;
    }
}

/// Why a diff was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The diff failed verification: nothing of it was written.
    #[error("diff rejected: {0}")]
    Rejected(DiffError),
    /// Reading the local database failed while decoding the diff (the diff may be fine).
    #[error("reading the state to decode a diff: {0}")]
    Read(DiffError),
    /// The local database failed; the open group was discarded and the tip went back to the
    /// last commit.
    #[error("state database: {0}")]
    Store(#[from] StateDbError),
}

impl ApplyError {
    /// The metrics label of a rejection (`None` for a local failure).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Self::Rejected(e) => Some(rejection_reason(&e.kind)),
            Self::Read(_) | Self::Store(_) => None,
        }
    }
}

/// A short, stable name for why a diff was rejected.
pub fn rejection_reason(kind: &DiffErrorKind) -> &'static str {
    match kind {
        DiffErrorKind::NotNext { .. } => "not_next",
        DiffErrorKind::WrongParent { .. } => "wrong_parent",
        DiffErrorKind::WrongSigner { .. } => "wrong_signer",
        DiffErrorKind::UnnamedCode { .. } => "code",
        DiffErrorKind::Truncated { .. } => "truncated",
        DiffErrorKind::Crc { .. } => "crc",
        DiffErrorKind::Body(_) => "body",
        _ => "malformed",
    }
}

/// Whether decoding failed reading the local index or state rather than on the diff's bytes.
fn is_local_read(e: &DiffError) -> bool {
    matches!(&e.kind, DiffErrorKind::Body(b)
        if matches!(b.kind, BodyErrorKind::Index(_) | BodyErrorKind::Prior(_)))
}

/// A failed verification as the diff's fault, or the local state's.
pub(crate) fn classify(e: DiffError) -> ApplyError {
    if is_local_read(&e) {
        ApplyError::Read(e)
    } else {
        ApplyError::Rejected(e)
    }
}

/// What one applied block did.
#[derive(Debug, Clone)]
pub struct AppliedBlock {
    /// The block's number.
    pub number: u64,
    /// Its hash.
    pub hash: B256,
    /// Its timestamp (seconds).
    pub timestamp: u64,
    /// Account and slot changes.
    pub changes: u64,
    /// A root that ended while this block was written: this block's, or with roots that
    /// overlap the next blocks ([`gigas_statedb::WriterOptions::overlap_roots`]) an
    /// earlier one's ([`RootInfo::block`]).
    pub root: Option<RootInfo>,
}

/// The writer with the verification in front of it. Lives on one thread (MDBX ties the write
/// transaction to it).
#[derive(Debug)]
pub struct Applier<'db> {
    writer: StateWriter<'db>,
    sequencer: Address,
    timings: ApplyTimings,
    /// Check the signed state commitment when the database keeps the lattice.
    commitment: bool,
}

impl<'db> Applier<'db> {
    /// Opens the database's writer with `options`; diffs must be signed by `sequencer`.
    pub fn new(
        db: &'db StateDb,
        options: gigas_statedb::WriterOptions,
        sequencer: Address,
    ) -> Result<Self, StateDbError> {
        Ok(Self {
            writer: db.writer(options)?,
            sequencer,
            timings: ApplyTimings::default(),
            commitment: true,
        })
    }

    /// Whether to keep the state commitment (on by default, where the database keeps its
    /// lattice): off, diffs are verified without it and the database stops keeping it at the
    /// next commit.
    pub fn keep_commitment(mut self, keep: bool) -> Self {
        self.commitment = keep;
        self
    }

    /// The last applied block, the open group included.
    pub fn tip(&self) -> ChainTip {
        self.writer.tip()
    }

    /// The last committed (durable) block.
    pub fn committed_tip(&self) -> ChainTip {
        self.writer.committed_tip()
    }

    /// The writer, for reads of the open group (re-execution reads through it).
    pub fn writer(&self) -> &StateWriter<'db> {
        &self.writer
    }

    /// Loads the account trie in memory with the stored trie's nodes, within its budget
    /// ([`StateWriter::preload_account_trie`]; `--trie.preload`): only between groups.
    pub fn preload_trie(&mut self) -> Result<Option<gigas_statedb::SparseTrieStats>, StateDbError> {
        self.writer.preload_account_trie(usize::MAX)
    }

    /// What was applied so far and where the time went.
    pub fn timings(&self) -> &ApplyTimings {
        &self.timings
    }

    /// Forgets the timings (a benchmark's warm-up).
    pub fn reset_timings(&mut self) {
        self.timings = ApplyTimings::default();
    }

    /// Verifies `bytes` as the successor of the tip (signature, parent, checksum chain over
    /// the changes decoded against the open group) and returns the verified diff without
    /// writing anything. [`Applier::write`] then writes it.
    pub fn verify(&mut self, bytes: &[u8]) -> Result<VerifiedDiff, ApplyError> {
        let mut t = VerifyTimings::default();
        let tip = self.writer.tip();
        let lattice = if self.commitment {
            self.writer.lattice()
        } else {
            None
        };
        let result = verify_and_decode_timed(
            &tip,
            lattice,
            self.sequencer,
            bytes,
            &self.writer,
            &self.writer,
            &mut t,
        );
        self.timings.add_verify(&t);
        // A failed read of the local database is not the diff's fault.
        result.map_err(classify)
    }

    /// Counts a block the decode stage ([`crate::decode`]) verified, with its timings there,
    /// and the seconds this thread waited for it. [`Applier::write`] then writes it.
    pub fn count_decoded(&mut self, t: &VerifyTimings, waited: f64) {
        self.timings.decoded_ahead = true;
        self.timings.add_verify(t);
        self.timings.waiting += waited;
    }

    /// Writes a verified diff into the open group (and the root, when due).
    pub fn write(&mut self, diff: &VerifiedDiff) -> Result<AppliedBlock, ApplyError> {
        let start = Instant::now();
        let root = self.writer.apply(BlockToApply::from(diff))?;
        let elapsed = start.elapsed().as_secs_f64();
        // An overlapped root costs this thread only its start and the wait for it.
        let trie = root.as_ref().map_or(0.0, |r| r.waited_seconds);
        self.timings.trie += trie;
        self.timings.write += (elapsed - trie).max(0.0);
        // A durable point whose writeback ended is finished now, before the group dirties
        // many more pages that its sync would have to write too.
        self.sync_if_due()?;
        let changes = (diff.changes.accounts().len() + diff.changes.storage().len()) as u64;
        self.timings.blocks += 1;
        self.timings.changes += changes;
        self.timings.gas_used += diff.header.gas_used;
        Ok(AppliedBlock {
            number: diff.header.number,
            hash: diff.hash,
            timestamp: diff.header.timestamp,
            changes,
            root,
        })
    }

    /// [`Applier::verify`] then [`Applier::write`].
    pub fn apply(&mut self, bytes: &[u8]) -> Result<AppliedBlock, ApplyError> {
        let diff = self.verify(bytes)?;
        self.write(&diff)
    }

    /// Whether the open group reached its count or age bound.
    pub fn should_commit(&self) -> bool {
        self.writer.should_commit()
    }

    /// Blocks in the open group.
    pub fn group_blocks(&self) -> u64 {
        self.writer.group_blocks()
    }

    /// Commits the open group (`None` when it is empty), after the root in flight, if any
    /// ([`CommitInfo::root`]).
    pub fn commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        let start = Instant::now();
        let info = self.writer.commit()?;
        self.count_commit(start, info.as_ref());
        Ok(info)
    }

    /// Starts the open group's commit ([`StateWriter::start_commit`]): with the commit
    /// thread, hands it over and returns (the committed tip moves when it lands); else as
    /// [`Applier::commit`]. Its time on this thread counts as commit time.
    pub fn start_commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        let start = Instant::now();
        let info = self.writer.start_commit()?;
        self.count_commit(start, info.as_ref());
        Ok(info)
    }

    /// Counts a commit that began at `start`: the root it waited for as trie time, the
    /// rest as commit time.
    fn count_commit(&mut self, start: Instant, info: Option<&CommitInfo>) {
        if let Some(info) = info {
            let trie = info.root.map_or(0.0, |r| r.waited_seconds);
            self.timings.trie += trie;
            self.timings.commit += (start.elapsed().as_secs_f64() - trie).max(0.0);
        }
    }

    /// Takes in a commit that ended on the commit thread, if any
    /// ([`StateWriter::poll_commit`]); whether one landed.
    pub fn poll_commit(&mut self) -> Result<bool, StateDbError> {
        let start = Instant::now();
        let landed = self.writer.poll_commit()?;
        if landed {
            self.timings.commit += start.elapsed().as_secs_f64();
        }
        Ok(landed)
    }

    /// Waits for the commit under way on the commit thread, if any
    /// ([`StateWriter::finish_commit`]).
    pub fn finish_commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        let start = Instant::now();
        let info = self.writer.finish_commit()?;
        self.timings.commit += start.elapsed().as_secs_f64();
        Ok(info)
    }

    /// Waits for the root in flight, if any ([`StateWriter::finish_root`]).
    pub fn finish_root(&mut self) -> Result<Option<RootInfo>, StateDbError> {
        let root = self.writer.finish_root()?;
        if let Some(root) = &root {
            self.timings.trie += root.waited_seconds;
        }
        Ok(root)
    }

    /// Writes the open group's changes since the last call into the write transaction while
    /// the node waits for its next block ([`StateWriter::flush_idle`]), so that the commit
    /// that follows is short; its time counts as commit time, as the same work at the commit
    /// would.
    pub fn flush_idle(&mut self) -> Result<u64, StateDbError> {
        let start = Instant::now();
        let entries = self.writer.flush_idle()?;
        if entries > 0 {
            self.timings.commit += start.elapsed().as_secs_f64();
        }
        Ok(entries)
    }

    /// Makes a durable point if one is due (see [`StateWriter::sync_if_due`]); its time
    /// counts as commit time.
    pub fn sync_if_due(&mut self) -> Result<Option<std::time::Duration>, StateDbError> {
        let took = self.writer.sync_if_due()?;
        if let Some(took) = took {
            self.timings.commit += took.as_secs_f64();
        }
        Ok(took)
    }

    /// Makes every commit durable now (a clean stop); `None` when all were already.
    pub fn sync(&mut self) -> Result<Option<std::time::Duration>, StateDbError> {
        let took = self.writer.sync()?;
        if let Some(took) = took {
            self.timings.commit += took.as_secs_f64();
        }
        Ok(took)
    }

    /// Computes the root at the tip now, whatever the options say (the end of a batched run).
    pub fn compute_root(&mut self) -> Result<RootInfo, StateDbError> {
        let root = self.writer.compute_root()?;
        self.timings.trie += root.seconds;
        Ok(root)
    }

    /// Drops the open group (the tip goes back to the last commit).
    pub fn discard(&mut self) {
        self.writer.discard();
    }
}

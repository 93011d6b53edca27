//! Verification: a follower applies a diff only if it is the next block of the chain it holds,
//! signed by the sequencer, and its body decodes against the follower's state (and, when the
//! follower keeps the lattice hash, moves it to the signed state commitment). Everything is
//! checked before anything is returned, so a caller that applies only what
//! [`verify_and_decode`] returns can never apply part of a block.
//!
//! What the block's changes do to the state is checked by the follower's own state root: the
//! signed header's `stateRoot` is the Ethereum state root after the block, which the follower
//! computes after applying the changes and compares (`gigas-fullnode`), refusing the block
//! when they differ.

use alloy_consensus::Header;
use alloy_primitives::{Address, Signature, B256};
use gigas_primitives::{ChangeSet, LatticeHash};

use crate::body::{decode_body, encode_body};
use crate::commitment::{lattice_delta_hashed, StateCommitment};
use crate::error::{DiffError, DiffErrorKind};
use crate::file::{Compression, DiffFile, FramedDiff};
use crate::key::{KeyIndex, StateKey};
use crate::prior::{PriorState, PriorValues};
use gigas_primitives::HashedKeys;

/// What a follower holds of the chain: its last applied block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainTip {
    /// Its number.
    pub number: u64,
    /// Its hash.
    pub hash: B256,
    /// Its header's `state_root`: the Ethereum state root after it.
    pub state_root: B256,
}

impl ChainTip {
    /// The tip at a sealed header.
    pub fn of(header: &Header) -> Self {
        Self {
            number: header.number,
            hash: header.hash_slow(),
            state_root: header.state_root,
        }
    }
}

/// A diff that verified: the block's header and changes, ready to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedDiff {
    /// The sealed header.
    pub header: Header,
    /// Its hash.
    pub hash: B256,
    /// The sequencer's signature over the hash.
    pub signature: Signature,
    /// The block's changes.
    pub changes: ChangeSet,
    /// The keccak of each changed key, in `changes`' order (computed once, by the decoder).
    pub hashed: HashedKeys,
    /// Keys written for the first time: extend the key index with them, in this order, in
    /// the same commit that applies `changes`.
    pub new_keys: Vec<StateKey>,
    /// The values the block replaced, as the decoder read them (the slots of storages the
    /// block wiped left out: they count as zero). A follower keeping undo records takes
    /// them from here instead of reading its state again.
    pub prior: PriorValues,
    /// The signed state commitment the diff carried, if any.
    pub commitment: Option<StateCommitment>,
    /// The lattice hash of the state after the block, when the caller kept the one before
    /// it (and the diff's signed commitment matched it).
    pub lattice: Option<LatticeHash>,
}

impl VerifiedDiff {
    /// The tip once this diff is applied.
    pub fn tip(&self) -> ChainTip {
        ChainTip {
            number: self.header.number,
            hash: self.hash,
            state_root: self.header.state_root,
        }
    }
}

/// Decodes a diff file and verifies it as the successor of `tip`: number `tip + 1`, parent
/// hash the tip's, signed by `sequencer`, and a body that decodes against `index` and
/// `prior`. Reads `index` and `prior` only; nothing is returned unless every check passed.
/// The header's `state_root` is the caller's to check against the root of its state once
/// the changes are applied.
pub fn verify_and_decode<I, P>(
    tip: &ChainTip,
    sequencer: Address,
    bytes: &[u8],
    index: &I,
    prior: &P,
) -> Result<VerifiedDiff, DiffError>
where
    I: KeyIndex + ?Sized,
    P: PriorState + ?Sized,
{
    verify_and_decode_timed(
        tip,
        None,
        sequencer,
        bytes,
        index,
        prior,
        &mut VerifyTimings::default(),
    )
}

/// Where [`verify_and_decode_timed`] spent its time, in seconds, added to what the fields
/// held (so one value sums over many diffs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VerifyTimings {
    /// Checking the frame and its CRC, and decompressing the body.
    pub parse: f64,
    /// Hashing the header and recovering its signer.
    pub signature: f64,
    /// Decoding the body: reading the index and the prior values (the state's pages).
    pub decode: f64,
    /// Moving the lattice hash to the block's state and checking its signed commitment.
    pub commitment: f64,
}

/// [`verify_and_decode`], adding the time of each step to `timings`: a follower's metrics
/// and the full-node benchmark split verification from the state reads it does.
///
/// With `lattice` (the lattice hash of the state at `tip`), the diff must also carry a state
/// commitment signed by `sequencer` whose lattice checksum is that of `lattice` moved by the
/// block's changes and new keys; the moved hash is returned in [`VerifiedDiff::lattice`].
pub fn verify_and_decode_timed<I, P>(
    tip: &ChainTip,
    lattice: Option<&LatticeHash>,
    sequencer: Address,
    bytes: &[u8],
    index: &I,
    prior: &P,
    timings: &mut VerifyTimings,
) -> Result<VerifiedDiff, DiffError>
where
    I: KeyIndex + ?Sized,
    P: PriorState + ?Sized,
{
    let mut clock = std::time::Instant::now();
    let mut lap = |slot: &mut f64| {
        let now = std::time::Instant::now();
        *slot += now.duration_since(clock).as_secs_f64();
        clock = now;
    };
    // The signature is checked on the header before the body is decompressed: a peer that
    // is not the sequencer cannot make a follower decompress anything.
    let framed = FramedDiff::parse(bytes)?;
    lap(&mut timings.parse);
    let number = framed.header.number;
    let fail = |kind| Err(DiffError::new(Some(number), kind));
    if Some(number) != tip.number.checked_add(1) {
        return fail(DiffErrorKind::NotNext {
            expected: tip.number.wrapping_add(1),
        });
    }
    if framed.header.parent_hash != tip.hash {
        return fail(DiffErrorKind::WrongParent {
            expected: tip.hash,
            found: framed.header.parent_hash,
        });
    }
    let hash = check_signer(&framed, sequencer)?;
    lap(&mut timings.signature);
    if lattice.is_some() {
        match &framed.commitment {
            None => return fail(DiffErrorKind::NoCommitment),
            Some(c) => {
                let recovered = c.signer(&hash);
                if recovered != Some(sequencer) {
                    return fail(DiffErrorKind::CommitmentSigner {
                        expected: sequencer,
                        recovered,
                    });
                }
            }
        }
    }
    lap(&mut timings.signature);
    let first_index = if lattice.is_some() {
        index
            .len()
            .map_err(|e| DiffError::new(Some(number), DiffErrorKind::CommitmentStore(e)))?
    } else {
        0
    };
    let file = framed.decompress()?;
    lap(&mut timings.parse);
    let decoded = decode_body(&file.body, index, prior)
        .map_err(|e| DiffError::new(Some(number), DiffErrorKind::Body(e)))?;
    lap(&mut timings.decode);
    // The header's stateRoot covers the accounts' code hashes, not the codes: a code is
    // stored only under a hash an account of the block takes, so that no code reaches the
    // state without its hash being committed to (the decoder computed each code's hash).
    if !decoded.changes.bytecodes().is_empty() {
        // A set: the diff is the sequencer's, but its sizes are bounded only by the body's.
        let named: alloy_primitives::map::B256Set = decoded
            .changes
            .accounts()
            .iter()
            .filter_map(|(_, change)| change.state.map(|s| s.code_hash))
            .collect();
        if let Some((hash, _)) = decoded
            .changes
            .bytecodes()
            .iter()
            .find(|(hash, _)| !named.contains(hash))
        {
            return fail(DiffErrorKind::UnnamedCode { hash: *hash });
        }
    }
    let lattice = match (lattice, &file.commitment) {
        (Some(before), Some(commitment)) => {
            let delta = lattice_delta_hashed(
                &decoded.changes,
                &decoded.hashed,
                &decoded.prior,
                first_index,
                &decoded.new_keys,
                true,
            )
            .map_err(|e| DiffError::new(Some(number), DiffErrorKind::CommitmentStore(e)))?;
            let mut after = before.clone();
            after.add(&delta);
            let computed = after.checksum();
            if computed != commitment.lattice {
                return fail(DiffErrorKind::Commitment {
                    signed: commitment.lattice,
                    computed,
                });
            }
            Some(after)
        }
        _ => None,
    };
    lap(&mut timings.commitment);
    Ok(VerifiedDiff {
        header: file.header,
        hash,
        signature: file.signature,
        changes: decoded.changes,
        hashed: decoded.hashed,
        new_keys: decoded.new_keys,
        prior: decoded.prior,
        commitment: file.commitment,
        lattice,
    })
}

/// The header's hash, once its signature is found to be `sequencer`'s.
fn check_signer(framed: &FramedDiff<'_>, sequencer: Address) -> Result<B256, DiffError> {
    let hash = framed.header.hash_slow();
    // EIP-2's low-s rule: one signature per header, so a diff's bytes cannot be varied
    // through the signature.
    let recovered =
        alloy_consensus::crypto::secp256k1::recover_signer(&framed.signature, hash).ok();
    if recovered != Some(sequencer) {
        return Err(DiffError::new(
            Some(framed.header.number),
            DiffErrorKind::WrongSigner {
                expected: sequencer,
                recovered,
            },
        ));
    }
    Ok(hash)
}

/// A diff's file, decompressed once its header is found signed by `sequencer`, wherever the
/// block stands in the chain: for reading ahead of [`verify_and_decode`] (which checks the
/// rest), never for applying.
pub fn open_signed(bytes: &[u8], sequencer: Address) -> Result<DiffFile, DiffError> {
    let framed = FramedDiff::parse(bytes)?;
    check_signer(&framed, sequencer)?;
    framed.decompress()
}

/// A diff file ready to write, and the keys to add to the index once it is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedDiff {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// Keys written for the first time, in index order.
    pub new_keys: Vec<StateKey>,
    /// Length of the packed body before compression (for metrics).
    pub body_len: usize,
}

/// The writer's side: packs `changes` against the index and prior values and frames it with
/// the sealed header and the sequencer's signature (no state commitment: see [`pack_diff`]).
pub fn encode_diff<I, P>(
    header: &Header,
    signature: &Signature,
    changes: &ChangeSet,
    index: &I,
    prior: &P,
    compression: &Compression,
) -> Result<EncodedDiff, DiffError>
where
    I: KeyIndex + ?Sized,
    P: PriorState + ?Sized,
{
    pack_diff(header, signature, changes, index, prior)?.finish(compression)
}

/// A packed diff not yet framed: the writer learns the block's new keys from it, which the
/// state commitment covers, and sets [`PackedDiff::file`]'s `commitment` before
/// [`PackedDiff::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedDiff {
    /// The file, without a commitment.
    pub file: DiffFile,
    /// Keys written for the first time, in index order.
    pub new_keys: Vec<StateKey>,
}

impl PackedDiff {
    /// Compresses and frames the file.
    pub fn finish(self, compression: &Compression) -> Result<EncodedDiff, DiffError> {
        let body_len = self.file.body.len();
        Ok(EncodedDiff {
            bytes: self.file.encode(compression)?,
            new_keys: self.new_keys,
            body_len,
        })
    }
}

/// Packs `changes` against the index and prior values under the sealed header and its
/// signature.
pub fn pack_diff<I, P>(
    header: &Header,
    signature: &Signature,
    changes: &ChangeSet,
    index: &I,
    prior: &P,
) -> Result<PackedDiff, DiffError>
where
    I: KeyIndex + ?Sized,
    P: PriorState + ?Sized,
{
    let packed = encode_body(changes, index, prior)
        .map_err(|e| DiffError::new(Some(header.number), DiffErrorKind::Body(e)))?;
    Ok(PackedDiff {
        file: DiffFile {
            header: header.clone(),
            signature: *signature,
            commitment: None,
            body: packed.bytes,
        },
        new_keys: packed.new_keys,
    })
}

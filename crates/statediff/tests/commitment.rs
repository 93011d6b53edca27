//! The signed state commitment in diffs: a follower that keeps the lattice hash accepts
//! exactly the diffs whose signed commitment its own sum reproduces, and refuses the rest
//! with the reason, returning nothing to apply.

mod common;

use alloy_signer::SignerSync as _;
use alloy_signer_local::PrivateKeySigner;
use common::{random_chain, random_changes, sequencer, Published, Rng, Writer};
use gigas_primitives::LatticeHash;
use gigas_statediff::{
    commitment_digest, index_lattice, verify_and_decode_timed, Compression, DiffErrorKind,
    DiffFile, KeyIndex as _, StateCommitment, VerifyTimings,
};

fn committed_chain(seed: u64, blocks: usize) -> (Vec<Published>, Writer) {
    let mut rng = Rng(seed);
    let mut writer = Writer::committing();
    let chain = (0..blocks)
        .map(|_| {
            let changes = random_changes(&mut rng, &writer.state, 40);
            writer.publish(changes)
        })
        .collect();
    (chain, writer)
}

fn verify(
    p: &Published,
    lattice: Option<&LatticeHash>,
    bytes: &[u8],
) -> Result<gigas_statediff::VerifiedDiff, gigas_statediff::DiffError> {
    verify_and_decode_timed(
        &p.tip,
        lattice,
        sequencer().address(),
        bytes,
        &p.index,
        &p.state,
        &mut VerifyTimings::default(),
    )
}

/// Re-frames `p`'s diff with `commitment` in place of the one it carries.
fn with_commitment(p: &Published, commitment: Option<StateCommitment>) -> Vec<u8> {
    let mut file = DiffFile::decode(&p.bytes).expect("decodes");
    file.commitment = commitment;
    file.encode(&Compression::default()).expect("encodes")
}

#[test]
fn a_follower_keeps_the_writers_sum_block_by_block() {
    let (chain, writer) = committed_chain(7, 60);
    let mut lattice = LatticeHash::zero();
    for p in &chain {
        assert_eq!(p.lattice.as_ref(), Some(&lattice));
        let verified = verify(p, Some(&lattice), &p.bytes)
            .unwrap_or_else(|e| panic!("block {}: {e}", p.header.number));
        lattice = verified.lattice.expect("the sum moved");
        assert_eq!(
            verified.commitment.map(|c| c.lattice),
            Some(lattice.checksum())
        );
    }
    assert_eq!(Some(lattice), writer.lattice);
}

#[test]
fn the_kept_sum_is_the_state_from_scratch_on_a_chain_without_wipes() {
    // Transfers and slot writes only: every element is accounted for exactly.
    let mut writer = Writer::committing();
    let mut rng = Rng(11);
    for _ in 0..40 {
        let changes = loop {
            let c = random_changes(&mut rng, &writer.state, 30);
            if !c
                .accounts()
                .iter()
                .any(|(_, a)| a.storage_wiped || a.state.is_none())
            {
                break c;
            }
        };
        writer.publish(changes);
    }
    let mut scratch = writer.state.lattice();
    scratch.add(&index_lattice(&writer.index, 0, writer.index.len().unwrap()).unwrap());
    assert_eq!(writer.lattice, Some(scratch));
}

#[test]
fn a_wrong_sum_a_foreign_signature_and_a_missing_commitment_are_refused() {
    let (chain, _) = committed_chain(9, 12);
    let p = &chain[11];
    let lattice = p.lattice.clone().expect("committing writer");
    let file = DiffFile::decode(&p.bytes).unwrap();
    let hash = file.header.hash_slow();
    let honest = file.commitment.expect("carries one");

    // The sequencer's own key over a sum that is not the state's.
    let wrong = LatticeHash::zero().checksum();
    let signed_wrong = StateCommitment {
        lattice: wrong,
        signature: sequencer()
            .sign_hash_sync(&commitment_digest(&hash, &wrong))
            .unwrap(),
    };
    let e = verify(p, Some(&lattice), &with_commitment(p, Some(signed_wrong))).unwrap_err();
    assert!(
        matches!(e.kind, DiffErrorKind::Commitment { signed, .. } if signed == wrong),
        "{e}"
    );

    // The right sum signed by another key.
    let other = PrivateKeySigner::random();
    let foreign = StateCommitment {
        lattice: honest.lattice,
        signature: other
            .sign_hash_sync(&commitment_digest(&hash, &honest.lattice))
            .unwrap(),
    };
    let e = verify(p, Some(&lattice), &with_commitment(p, Some(foreign))).unwrap_err();
    assert!(
        matches!(e.kind, DiffErrorKind::CommitmentSigner { recovered: Some(a), .. } if a == other.address()),
        "{e}"
    );

    // A commitment of another block (the signature names the block's hash).
    let previous = DiffFile::decode(&chain[10].bytes)
        .unwrap()
        .commitment
        .unwrap();
    let e = verify(p, Some(&lattice), &with_commitment(p, Some(previous))).unwrap_err();
    assert!(
        matches!(e.kind, DiffErrorKind::CommitmentSigner { .. }),
        "{e}"
    );

    // None at all, to a follower that keeps the sum; a follower that does not is unaffected.
    let bare = with_commitment(p, None);
    let e = verify(p, Some(&lattice), &bare).unwrap_err();
    assert_eq!(e.kind, DiffErrorKind::NoCommitment, "{e}");
    assert!(verify(p, None, &bare).unwrap().lattice.is_none());

    // A follower whose own sum went wrong refuses the honest diff too.
    let e = verify(p, Some(&LatticeHash::zero()), &p.bytes).unwrap_err();
    assert!(matches!(e.kind, DiffErrorKind::Commitment { .. }), "{e}");

    // And the honest one passes.
    assert!(verify(p, Some(&lattice), &p.bytes).is_ok());
}

#[test]
fn the_commitment_travels_in_the_frame_and_every_byte_of_it_counts() {
    let chain = random_chain(3, 2, 20);
    let plain = DiffFile::decode(&chain[1].bytes).unwrap();
    assert!(
        plain.commitment.is_none(),
        "an uncommitted writer adds none"
    );
    let (committed, _) = committed_chain(3, 2);
    let p = &committed[1];
    let with = DiffFile::decode(&p.bytes).unwrap();
    assert!(with.commitment.is_some());
    // Flipping any byte of the lattice checksum or its signature is caught (CRC first).
    let lattice = p.lattice.as_ref().unwrap();
    let header_len = alloy_rlp::encode(&with.header).len();
    let at = 3 + 1 + 1 + 8 + 4 + header_len + 65;
    for offset in [at, at + 31, at + 32, at + 96] {
        let mut bytes = p.bytes.clone();
        bytes[offset] ^= 1;
        assert!(verify(p, Some(lattice), &bytes).is_err(), "byte {offset}");
    }
}

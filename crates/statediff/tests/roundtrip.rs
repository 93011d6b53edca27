//! Encode then decode is the identity, and re-encoding gives the same bytes: on random blocks
//! (proptest), over a stream where the writer and the follower each keep their own state and
//! key index, and through the signed, compressed files.

mod common;

use alloy_primitives::Address;
use common::{random_changes, Rng, Writer};
use gigas_statediff::{
    body_keys, decode_body, encode_body, open_signed, verify_and_decode, ChainTip, DiffFile,
    HashedKeys, MemoryKeyIndex, MemoryState, PriorValues, StateKey,
};
use proptest::prelude::*;

/// Runs `blocks` random blocks from `seed` through the writer and an independent follower.
fn stream(seed: u64, blocks: usize, universe: u64) -> (usize, usize) {
    let mut rng = Rng(seed);
    let mut writer = Writer::new();
    let mut state = MemoryState::new();
    let mut index = MemoryKeyIndex::new();
    let mut tip = ChainTip::of(&writer.parent);
    let sequencer = writer.signer.address();
    let (mut changes_seen, mut repeated) = (0, 0);
    for _ in 0..blocks {
        let changes = random_changes(&mut rng, &writer.state, universe);
        let published = writer.publish(changes.clone());

        // The body alone: identity, and the decoder's side re-encodes to the same bytes.
        let decoded = decode_body(&published.body, &index, &state).expect("a valid body decodes");
        assert_eq!(decoded.changes, changes);
        assert_eq!(decoded.canonical, changes.encode());
        assert_eq!(
            decoded.hashed,
            HashedKeys::of(&changes),
            "each key hashed, in order"
        );
        let again = encode_body(&decoded.changes, &index, &state).expect("encodes");
        assert_eq!(again.bytes, published.body);
        assert_eq!(again.new_keys, decoded.new_keys);
        let prior = PriorValues::capture(&changes, &state).expect("reads");
        assert_eq!(
            encode_body(&changes, &index, &prior)
                .expect("encodes")
                .bytes,
            published.body,
            "prior values captured and the whole state give the same bytes"
        );

        // Read ahead (the full node's prefetch stage): the body behind the signed header,
        // and its keys; against an index without this stream's keys, only its first writes.
        let opened = open_signed(&published.bytes, sequencer).expect("signed by the sequencer");
        assert_eq!(opened.body, published.body);
        assert!(open_signed(&published.bytes, Address::repeat_byte(7)).is_err());
        let mut keys = body_keys(&published.body, &index).expect("keys");
        let mut expected: Vec<StateKey> = changes
            .accounts()
            .iter()
            .map(|(a, _)| StateKey::Account(*a))
            .chain(
                changes
                    .storage()
                    .iter()
                    .map(|(a, s, _)| StateKey::Slot(*a, *s)),
            )
            .collect();
        keys.sort_unstable();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        let mut first = body_keys(&published.body, &MemoryKeyIndex::new()).expect("keys");
        let mut new_keys = decoded.new_keys.clone();
        first.sort_unstable();
        new_keys.sort_unstable();
        assert_eq!(first, new_keys);

        // The file: verified as the tip's successor, the same changes.
        let verified = verify_and_decode(&tip, sequencer, &published.bytes, &index, &state)
            .expect("a published diff verifies");
        assert_eq!(verified.changes, changes);
        assert_eq!(verified.hashed, HashedKeys::of(&changes));
        assert_eq!(verified.header, published.header);
        let file = DiffFile::decode(&published.bytes).expect("decodes");
        assert_eq!(file.body, published.body);

        changes_seen += changes.accounts().len() + changes.storage().len();
        repeated += changes.accounts().len() + changes.storage().len() - verified.new_keys.len();
        state.apply(&verified.changes);
        index.extend(&verified.new_keys).expect("new keys are new");
        tip = verified.tip();
    }
    assert_eq!(state, writer.state);
    (changes_seen, repeated)
}

#[test]
fn a_long_stream_round_trips_and_reuses_indices() {
    let (changes, repeated) = stream(1, 400, 40);
    // The small universe makes most writes repeated ones: both paths are exercised.
    assert!(changes > 2_000, "{changes}");
    assert!(repeated * 2 > changes, "{repeated} of {changes}");
}

#[test]
fn the_empty_block_round_trips() {
    let mut writer = Writer::new();
    let published = writer.publish(Default::default());
    let decoded =
        decode_body(&published.body, &MemoryKeyIndex::new(), &MemoryState::new()).expect("decodes");
    assert!(decoded.changes.is_empty());
    assert_eq!(published.body, [0, 0, 0, 0, 0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_streams_round_trip(seed in any::<u64>(), blocks in 1usize..12, universe in 1u64..30) {
        stream(seed, blocks, universe);
    }
}

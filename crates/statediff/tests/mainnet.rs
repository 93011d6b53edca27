//! Every ChangeSet of the 50 shipped mainnet blocks round-trips through the packed body and
//! the signed, compressed file, as one stream (the key index carries over from block to block)
//! with each block's prior values taken from its fixture's pre-state.

mod common;

use gigas_evm::{execute_block, BlockFixture, PlainEvm};
use gigas_statediff::{
    decode_body, encode_body, verify_and_decode, ChainTip, Compression, DiffFile, MemoryKeyIndex,
    MemoryState, PriorValues,
};
use gigas_test_support::mainnet_blocks;

/// The state before the block, from the fixture's pre-state.
fn prestate(fixture: &BlockFixture) -> MemoryState {
    let mut state = MemoryState::new();
    for (address, account) in &fixture.prestate {
        state.insert_account(*address, account.state());
        for (slot, value) in account.slots() {
            state.insert_slot(*address, slot, value);
        }
    }
    state
}

#[test]
fn the_fifty_mainnet_blocks_round_trip_as_one_stream() {
    let blocks = mainnet_blocks();
    assert_eq!(blocks.len(), 50);
    let mut writer = common::Writer::new();
    let mut follower = MemoryKeyIndex::new();
    let mut tip = ChainTip::of(&writer.parent);
    let sequencer = writer.signer.address();
    let (mut changes_total, mut raw, mut packed, mut file_bytes, mut txs) = (0, 0, 0, 0, 0);
    for (fixture, block) in &blocks {
        let mut evm = PlainEvm::new(fixture.database(), block);
        let outcome = execute_block(&mut evm, block)
            .unwrap_or_else(|e| panic!("block {} does not execute: {e}", block.number));
        let changes = outcome.changes;
        let before = prestate(fixture);
        let prior = PriorValues::capture(&changes, &before).expect("reads");

        let body = encode_body(&changes, &writer.index, &prior).expect("encodes");
        let decoded = decode_body(&body.bytes, &follower, &before)
            .unwrap_or_else(|e| panic!("block {}: {e}", block.number));
        assert_eq!(decoded.changes, changes, "block {}", block.number);
        assert_eq!(decoded.new_keys, body.new_keys);
        let again = encode_body(&decoded.changes, &follower, &before).expect("encodes");
        assert_eq!(
            again.bytes, body.bytes,
            "block {}: re-encoding",
            block.number
        );

        // Through the file and the verification, on a chain of our own headers.
        let (header, signature) = common::seal(&writer.signer, &writer.parent, &changes);
        let bytes = DiffFile {
            header: header.clone(),
            signature,
            commitment: None,
            body: body.bytes.clone(),
        }
        .encode(&Compression::default())
        .expect("encodes");
        let verified = verify_and_decode(&tip, sequencer, &bytes, &follower, &before)
            .unwrap_or_else(|e| panic!("block {}: {e}", block.number));
        assert_eq!(verified.changes, changes);

        changes_total += changes.accounts().len() + changes.storage().len();
        raw += changes.encode().len();
        packed += body.bytes.len();
        file_bytes += bytes.len();
        txs += block.txs.len();
        writer.index.extend(&body.new_keys).expect("new");
        follower.extend(&verified.new_keys).expect("new");
        writer.parent = header;
        tip = verified.tip();
    }
    println!(
        "50 mainnet blocks, {txs} txs, {changes_total} state changes: ChangeSet {raw} B, \
         packed {packed} B, file {file_bytes} B ({:.1} B/tx on the wire)",
        file_bytes as f64 / txs as f64
    );
    assert!(
        packed < raw / 2,
        "packing should at least halve the ChangeSet"
    );
}

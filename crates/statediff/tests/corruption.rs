//! Each kind of damage or forgery is refused with its reason, naming the block and the byte
//! offset: a flipped byte, a truncated file, oversized lengths, reordered or repeated keys, a
//! diff from another chain, a wrong signature, a skipped block, a bad checksum.

mod common;

use alloy_primitives::{Address, U256};
use alloy_signer_local::PrivateKeySigner;
use common::{genesis_header, random_chain, seal, Published, Writer};
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use gigas_statediff::{
    decode_body, encode_diff, verify_and_decode, BodyErrorKind, ChainTip, Compression, DiffError,
    DiffErrorKind, DiffFile, MemoryKeyIndex, MemoryState, Section,
};

fn verify(p: &Published, bytes: &[u8]) -> Result<gigas_statediff::VerifiedDiff, DiffError> {
    verify_and_decode(
        &p.tip,
        common::sequencer().address(),
        bytes,
        &p.index,
        &p.state,
    )
}

/// Recomputes the CRC after a deliberate edit, so that the layers behind it are reached.
fn fix_crc(bytes: &mut [u8]) {
    let n = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..n]);
    bytes[n..].copy_from_slice(&crc.to_le_bytes());
}

fn chain() -> Vec<Published> {
    let chain = random_chain(7, 6, 12);
    assert!(chain.iter().all(|p| verify(p, &p.bytes).is_ok()));
    chain
}

#[test]
fn every_flipped_bit_and_every_truncation_is_refused() {
    let chain = chain();
    let p = &chain[3];
    for at in 0..p.bytes.len() {
        for bit in 0..8 {
            let mut bytes = p.bytes.clone();
            bytes[at] ^= 1 << bit;
            let e = verify(p, &bytes).expect_err("a flipped bit is refused");
            // Past the magic and version, the CRC names the damage and the block.
            if at >= 13 {
                assert_eq!(e.block, Some(4), "byte {at}: {e}");
                assert!(
                    matches!(e.kind, DiffErrorKind::Crc { at, .. } if at == bytes.len() - 4)
                        || matches!(
                            e.kind,
                            DiffErrorKind::Length { .. }
                                | DiffErrorKind::Truncated { .. }
                                | DiffErrorKind::Trailing { .. }
                        ),
                    "byte {at}: {e}"
                );
            }
        }
    }
    for len in 0..p.bytes.len() {
        let e = verify(p, &p.bytes[..len]).expect_err("a truncated file is refused");
        if len >= 13 {
            assert_eq!(e.block, Some(4));
        }
        assert!(
            matches!(
                e.kind,
                DiffErrorKind::Truncated { .. }
                    | DiffErrorKind::Crc { .. }
                    | DiffErrorKind::Trailing { .. }
            ),
            "prefix {len}: {e}"
        );
    }
    let e = verify(p, &p.bytes[..p.bytes.len() - 1]).unwrap_err();
    println!("truncated by one byte: {e}");
    let mut bytes = p.bytes.clone();
    bytes[40] ^= 4;
    println!("a flipped bit: {}", verify(p, &bytes).unwrap_err());
}

#[test]
fn oversized_lengths_are_refused_before_anything_is_reserved() {
    let chain = chain();
    let p = &chain[0];
    // The header length field sits at byte 13.
    let mut bytes = p.bytes.clone();
    bytes[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = verify(p, &bytes).unwrap_err();
    assert!(
        matches!(
            e.kind,
            DiffErrorKind::Length {
                at: 13,
                what: "header",
                ..
            }
        ),
        "{e}"
    );
    println!("{e}");
    // The body length follows the header and the signature.
    let header_len = u32::from_le_bytes(p.bytes[13..17].try_into().unwrap()) as usize;
    let body_len_at = 17 + header_len + 65;
    let mut bytes = p.bytes.clone();
    bytes[body_len_at..body_len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = verify(p, &bytes).unwrap_err();
    assert!(
        matches!(e.kind, DiffErrorKind::Length { what: "body", .. }),
        "{e}"
    );
    // A payload longer than the file.
    let mut bytes = p.bytes.clone();
    bytes[body_len_at + 4..body_len_at + 8].copy_from_slice(&1_000_000u32.to_le_bytes());
    let e = verify(p, &bytes).unwrap_err();
    assert!(matches!(e.kind, DiffErrorKind::Truncated { .. }), "{e}");
    // A body that declares more than it decompresses to (CRC fixed so the check is reached).
    let mut bytes = p.bytes.clone();
    let declared = u32::from_le_bytes(bytes[body_len_at..body_len_at + 4].try_into().unwrap());
    bytes[body_len_at..body_len_at + 4].copy_from_slice(&(declared + 1000).to_le_bytes());
    fix_crc(&mut bytes);
    let e = verify(p, &bytes).unwrap_err();
    assert!(matches!(e.kind, DiffErrorKind::Decompress { .. }), "{e}");
    println!("{e}");
}

/// A file that ends right after a zero payload length, with fewer than the CRC's four bytes
/// left: before the fix the count of trailing bytes was computed as `left - 4` and wrapped
/// (a panic in a debug build, "18446744073709551613 trailing bytes" in a release build).
#[test]
fn a_zero_payload_length_at_the_end_of_a_file_is_a_truncation() {
    let chain = chain();
    let p = &chain[0];
    let header_len = u32::from_le_bytes(p.bytes[13..17].try_into().unwrap()) as usize;
    let payload_len_at = 17 + header_len + 65 + 4;
    for left in 0..4 {
        let mut bytes = p.bytes[..payload_len_at].to_vec();
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend(std::iter::repeat_n(0u8, left));
        let e = DiffFile::decode(&bytes).unwrap_err();
        assert!(
            matches!(e.kind, DiffErrorKind::Truncated { need: 4, .. }),
            "{left} bytes after a zero payload length: {e}"
        );
        let e = verify(p, &bytes).unwrap_err();
        assert!(matches!(e.kind, DiffErrorKind::Truncated { .. }), "{e}");
    }
}

/// A diff not signed by the sequencer is refused before its body is decompressed: a body
/// that would not even decompress (its declared length is wrong) gives the signature error.
#[test]
fn the_signature_is_checked_before_the_body_is_decompressed() {
    let chain = chain();
    let p = &chain[0];
    let header_len = u32::from_le_bytes(p.bytes[13..17].try_into().unwrap()) as usize;
    let signature_at = 17 + header_len;
    let body_len_at = signature_at + 65;
    let mut bytes = p.bytes.clone();
    // A different (valid-looking) signature, and a body that cannot decompress.
    bytes[signature_at] ^= 0x01;
    let declared = u32::from_le_bytes(bytes[body_len_at..body_len_at + 4].try_into().unwrap());
    bytes[body_len_at..body_len_at + 4].copy_from_slice(&(declared + 1000).to_le_bytes());
    fix_crc(&mut bytes);
    let e = verify(p, &bytes).unwrap_err();
    assert!(
        matches!(e.kind, DiffErrorKind::WrongSigner { .. }),
        "expected the signature to be refused first, got: {e}"
    );
}

/// A block whose first writes are two accounts and two slots of one address, all new.
fn fresh_block() -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    for i in [1u8, 2] {
        b.account(
            Address::repeat_byte(i),
            AccountState {
                nonce: 1,
                balance: U256::from(100),
                code_hash: common::NO_CODE,
            },
            false,
        );
        b.slot(Address::repeat_byte(9), U256::from(i), U256::from(7));
    }
    b.build()
}

#[test]
fn reordered_and_repeated_keys_are_refused_with_their_offset() {
    let mut writer = Writer::new();
    let p = writer.publish(fresh_block());
    let body = &p.body;
    // Layout: 0 repeated accounts (1 byte), 2 first accounts (1), then 2 records of
    // 20 + 1 + 2 bytes; 0 repeated slots; 1 group: address, count 2, two slots of 32 + 2.
    assert_eq!(body[0], 0);
    assert_eq!(body[1], 2);
    let (a1, a2) = (2usize, 2 + 23);
    let mut swapped = body.clone();
    swapped[a1..a1 + 20].copy_from_slice(&[2; 20]);
    swapped[a2..a2 + 20].copy_from_slice(&[1; 20]);
    let e = decode_body(&swapped, &p.index, &p.state).unwrap_err();
    assert_eq!(e.at, a2);
    assert_eq!(
        e.kind,
        BodyErrorKind::Unordered {
            section: Section::FirstAccounts
        }
    );
    let mut repeated = body.clone();
    repeated[a2..a2 + 20].copy_from_slice(&[1; 20]);
    let e = decode_body(&repeated, &p.index, &p.state).unwrap_err();
    assert_eq!(
        e.kind,
        BodyErrorKind::Unordered {
            section: Section::FirstAccounts
        }
    );
    // The two slots of the group, swapped.
    let group = a2 + 23 + 2; // after the repeated-slot count and the group count
    let s1 = group + 20 + 1;
    let s2 = s1 + 34;
    let mut slots = body.clone();
    slots[s1 + 31] = 2;
    slots[s2 + 31] = 1;
    let e = decode_body(&slots, &p.index, &p.state).unwrap_err();
    assert_eq!(
        (e.at, e.kind),
        (
            s2,
            BodyErrorKind::Unordered {
                section: Section::FirstSlots
            }
        )
    );

    // In a file (its CRC made right), the error names the block and the body offset.
    let file = DiffFile::decode(&p.bytes).unwrap();
    let forged = DiffFile {
        body: swapped,
        ..file
    }
    .encode(&Compression::default())
    .unwrap();
    let e = verify(&p, &forged).unwrap_err();
    assert_eq!(e.block, Some(1));
    assert!(
        matches!(&e.kind, DiffErrorKind::Body(b) if b.at == a2),
        "{e}"
    );
    println!("{e}");

    // The next block names the same keys by index; a first write of one is refused.
    let next = writer.publish(fresh_block_changed());
    let e = decode_body(&p.body, &next.index, &next.state).unwrap_err();
    assert!(
        matches!(
            e.kind,
            BodyErrorKind::AlreadyIndexed {
                section: Section::FirstAccounts,
                index: 0
            }
        ),
        "{e}"
    );
    // Repeated writes: an index past the table, and an index of the wrong kind.
    let body = &next.body;
    assert_eq!(body[0], 2, "two repeated accounts");
    let mut unknown = body.clone();
    unknown[1] = 100;
    let e = decode_body(&unknown, &next.index, &next.state).unwrap_err();
    assert!(
        matches!(
            e.kind,
            BodyErrorKind::UnknownIndex {
                index: 100,
                len: 4,
                ..
            }
        ),
        "{e}"
    );
    let mut wrong = body.clone();
    wrong[1] = 2; // index 2 is the first slot
    let e = decode_body(&wrong, &next.index, &next.state).unwrap_err();
    assert!(
        matches!(e.kind, BodyErrorKind::WrongKind { found: "slot", .. }),
        "{e}"
    );
    println!("{e}");
}

fn fresh_block_changed() -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    for i in [1u8, 2] {
        b.account(
            Address::repeat_byte(i),
            AccountState {
                nonce: 2,
                balance: U256::from(90),
                code_hash: common::NO_CODE,
            },
            false,
        );
    }
    b.build()
}

#[test]
fn forgeries_and_gaps_are_refused_with_their_reason() {
    let chain = chain();
    let p = &chain[2];

    // A block skipped: the follower is at block 1 and gets block 3... or block 3 again.
    let e = verify_and_decode(
        &chain[1].tip,
        common::sequencer().address(),
        &p.bytes,
        &chain[1].index,
        &chain[1].state,
    )
    .unwrap_err();
    assert_eq!(e.kind, DiffErrorKind::NotNext { expected: 2 });
    println!("{e}");

    // Another chain: the same changes on a chain with another genesis.
    let mut other = Writer::new();
    other.parent.state_root = alloy_primitives::B256::repeat_byte(9);
    other.parent.extra_data = alloy_primitives::Bytes::from_static(b"another chain");
    for q in &chain[..3] {
        other.publish(q.changes.clone());
    }
    let theirs = other.publish(chain[3].changes.clone());
    let e = verify(&chain[3], &theirs.bytes).unwrap_err();
    assert!(matches!(e.kind, DiffErrorKind::WrongParent { .. }), "{e}");
    println!("{e}");

    // A wrong signature: another key signed the same header.
    let stranger = PrivateKeySigner::from_bytes(&alloy_primitives::B256::repeat_byte(7)).unwrap();
    let (header, _) = seal(&common::sequencer(), &chain[1].header, &p.changes);
    let (_, signature) = seal(&stranger, &chain[1].header, &p.changes);
    let forged = encode_diff(
        &header,
        &signature,
        &p.changes,
        &p.index,
        &p.state,
        &Compression::default(),
    )
    .unwrap();
    let e = verify(p, &forged.bytes).unwrap_err();
    assert_eq!(
        e.kind,
        DiffErrorKind::WrongSigner {
            expected: common::sequencer().address(),
            recovered: Some(stranger.address())
        }
    );
    println!("{e}");

    // A header signed with a root its changes do not give decodes here: the follower's
    // own root refuses it once it applied the changes (gigas-fullnode's tests).

    // The frame's number and the header's differ.
    let mut bytes = p.bytes.clone();
    bytes[5] ^= 0x40;
    fix_crc(&mut bytes);
    let e = verify(p, &bytes).unwrap_err();
    assert!(
        matches!(e.kind, DiffErrorKind::NumberMismatch { header: 3, .. }),
        "{e}"
    );

    // A parity byte other than 0 or 1.
    let header_len = u32::from_le_bytes(p.bytes[13..17].try_into().unwrap()) as usize;
    let mut bytes = p.bytes.clone();
    bytes[17 + header_len + 64] = 27;
    fix_crc(&mut bytes);
    let e = verify(p, &bytes).unwrap_err();
    assert!(matches!(e.kind, DiffErrorKind::Signature { .. }), "{e}");

    // Not a diff file at all, a future version, and version 1 (headers with a state
    // checksum instead of the state root).
    let e = verify(p, b"GSB\x02 a block file, not a diff").unwrap_err();
    assert!(matches!(e.kind, DiffErrorKind::Magic { .. }), "{e}");
    for version in [3, 1] {
        let mut bytes = p.bytes.clone();
        bytes[3] = version;
        let e = verify(p, &bytes).unwrap_err();
        assert_eq!(e.kind, DiffErrorKind::Version(version));
        assert!(e.to_string().contains("reads version 2"), "{e}");
    }
}

#[test]
fn a_missing_prior_value_is_an_error_not_a_zero() {
    let changes = fresh_block();
    let (header, signature) = seal(&common::sequencer(), &genesis_header(), &changes);
    let empty = gigas_statediff::PriorValues::default();
    let e = encode_diff(
        &header,
        &signature,
        &changes,
        &MemoryKeyIndex::new(),
        &empty,
        &Compression::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e.kind, DiffErrorKind::Body(b) if matches!(b.kind, BodyErrorKind::Prior(_))),
        "{e}"
    );
    let _ = MemoryState::new();
    let _ = ChainTip::of(&header);
}

//! The block file (transactions and receipts) round-trips real signed transactions and
//! receipts, checks against its header, and refuses damage.

use alloy_consensus::{
    proofs::{calculate_receipt_root, calculate_transaction_root},
    Eip658Value, Receipt, ReceiptEnvelope, ReceiptWithBloom, TxEip1559, TxEnvelope, TxLegacy,
};
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{Address, Bytes, Log, TxKind, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use gigas_statediff::{BlockFile, Compression, DiffErrorKind, Header};
use gigas_test_support::sign_raw;

fn block() -> (Header, BlockFile) {
    let signer = PrivateKeySigner::from_bytes(&B256::repeat_byte(3)).unwrap();
    let mut transactions = Vec::new();
    let mut receipts = Vec::new();
    for nonce in 0..20u64 {
        let raw = if nonce % 2 == 0 {
            sign_raw(
                &signer,
                TxLegacy {
                    chain_id: Some(1337),
                    nonce,
                    gas_price: 1_000_000_000,
                    gas_limit: 21_000,
                    to: TxKind::Call(Address::repeat_byte(9)),
                    value: U256::from(nonce * 1000),
                    input: Bytes::new(),
                },
            )
        } else {
            sign_raw(
                &signer,
                TxEip1559 {
                    chain_id: 1337,
                    nonce,
                    gas_limit: 60_000,
                    max_fee_per_gas: 2_000_000_000,
                    max_priority_fee_per_gas: 1,
                    to: TxKind::Call(Address::repeat_byte(8)),
                    value: U256::ZERO,
                    input: Bytes::from(vec![0xa9, 0x05, 0x9c, 0xbb, nonce as u8]),
                    access_list: Default::default(),
                },
            )
        };
        transactions.push(TxEnvelope::decode_2718(&mut raw.as_ref()).unwrap());
        let receipt = Receipt {
            status: Eip658Value::Eip658(nonce % 3 != 0),
            cumulative_gas_used: 21_000 * (nonce + 1),
            logs: vec![Log::new_unchecked(
                Address::repeat_byte(8),
                vec![B256::repeat_byte(nonce as u8)],
                Bytes::from(vec![1, 2, 3]),
            )],
        };
        let with_bloom = ReceiptWithBloom::from(receipt);
        receipts.push(if nonce % 2 == 0 {
            ReceiptEnvelope::Legacy(with_bloom)
        } else {
            ReceiptEnvelope::Eip1559(with_bloom)
        });
    }
    let header = Header {
        number: 12,
        transactions_root: calculate_transaction_root(&transactions),
        receipts_root: calculate_receipt_root(&receipts),
        ..Default::default()
    };
    let file = BlockFile {
        number: 12,
        hash: header.hash_slow(),
        transactions,
        receipts,
    };
    (header, file)
}

#[test]
fn a_block_file_round_trips_and_checks_against_its_header() {
    let (header, file) = block();
    for compression in [Compression::default(), Compression::NONE] {
        let bytes = file.encode(&compression).unwrap();
        let decoded = BlockFile::decode(&bytes).unwrap();
        assert_eq!(decoded, file);
        decoded.check(&header).unwrap();
    }
    let mut other = header.clone();
    other.receipts_root = B256::ZERO;
    let e = file.check(&other).unwrap_err();
    assert!(
        matches!(
            e.kind,
            DiffErrorKind::Mismatch {
                what: "block hash",
                ..
            }
        ),
        "{e}"
    );
    let mut short = file.clone();
    short.transactions.pop();
    let e = short.check(&header).unwrap_err();
    assert!(
        matches!(
            e.kind,
            DiffErrorKind::Mismatch {
                what: "transactions root",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_damaged_block_file_is_refused() {
    let (_, file) = block();
    let bytes = file.encode(&Compression::default()).unwrap();
    for at in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        assert!(BlockFile::decode(&damaged).is_err(), "byte {at}");
    }
    for len in 0..bytes.len() {
        assert!(BlockFile::decode(&bytes[..len]).is_err(), "prefix {len}");
    }
    // An item that does not decode, behind a correct CRC.
    let raw = file.encode(&Compression::NONE).unwrap();
    let mut damaged = raw.clone();
    damaged[53 + 2] ^= 0xff; // inside the first transaction
    let n = damaged.len() - 4;
    let crc = crc32fast::hash(&damaged[..n]);
    damaged[n..].copy_from_slice(&crc.to_le_bytes());
    let e = BlockFile::decode(&damaged).unwrap_err();
    assert_eq!(e.block, Some(12));
    println!("{e}");
}

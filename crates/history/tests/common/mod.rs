//! Shared test helpers: a seeded generator, real signed transactions of every accepted type,
//! receipts with logs, headers signed by a sequencer key, and whole chains of blocks.
#![allow(dead_code, unreachable_pub)]

use alloy_consensus::transaction::{Recovered, SignerRecoverable};
use alloy_consensus::{
    Eip658Value, Header, Receipt, ReceiptEnvelope, SignableTransaction, TxEip1559, TxEip2930,
    TxEip7702, TxEnvelope, TxLegacy, TxType,
};
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip7702::Authorization;
use alloy_primitives::{Address, Bytes, Log, LogData, Signature, TxKind, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use gigas_history::{BlockRecord, IndexedLog, LogQuery};

/// The chain id of the test transactions.
pub const CHAIN_ID: u64 = 4242;

/// SplitMix64: small, seeded, good enough to pick test cases.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// Random bytes of a random length below `max`.
    pub fn bytes_below(&mut self, max: u64) -> Vec<u8> {
        let len = self.below(max) as usize;
        self.bytes(len)
    }

    pub fn b256(&mut self) -> B256 {
        B256::from_slice(&self.bytes(32))
    }
}

/// Deterministic key number `i`.
pub fn signer(i: u64) -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&B256::from(U256::from(i + 1)))
        .expect("a small scalar is a valid key")
}

/// A signed transaction of `kind` (0 legacy EIP-155, 1 EIP-2930, 2 EIP-1559, 3 EIP-7702).
pub fn signed_tx(
    signer: &PrivateKeySigner,
    kind: u64,
    nonce: u64,
    to: Address,
    input: Bytes,
) -> Recovered<TxEnvelope> {
    let access_list = AccessList(vec![AccessListItem {
        address: to,
        storage_keys: vec![B256::with_last_byte(nonce as u8)],
    }]);
    let value = U256::from(1_000 + nonce);
    let envelope: TxEnvelope = match kind {
        0 => {
            let tx = TxLegacy {
                chain_id: Some(CHAIN_ID),
                nonce,
                gas_price: 2_000_000_000,
                gas_limit: 21_000 + 16 * input.len() as u64,
                to: TxKind::Call(to),
                value,
                input,
            };
            let sig = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing");
            tx.into_signed(sig).into()
        }
        1 => {
            let tx = TxEip2930 {
                chain_id: CHAIN_ID,
                nonce,
                gas_price: 2_000_000_000,
                gas_limit: 50_000,
                to: TxKind::Call(to),
                value,
                access_list,
                input,
            };
            let sig = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing");
            tx.into_signed(sig).into()
        }
        2 => {
            let tx = TxEip1559 {
                chain_id: CHAIN_ID,
                nonce,
                gas_limit: 60_000,
                max_fee_per_gas: 3_000_000_000,
                max_priority_fee_per_gas: 1_000_000,
                to: TxKind::Call(to),
                value,
                access_list,
                input,
            };
            let sig = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing");
            tx.into_signed(sig).into()
        }
        _ => {
            let authorization = Authorization {
                chain_id: U256::from(CHAIN_ID),
                address: to,
                nonce: nonce + 1,
            };
            let auth_sig = signer
                .sign_hash_sync(&authorization.signature_hash())
                .expect("signing");
            let tx = TxEip7702 {
                chain_id: CHAIN_ID,
                nonce,
                gas_limit: 80_000,
                max_fee_per_gas: 3_000_000_000,
                max_priority_fee_per_gas: 1_000_000,
                to,
                value,
                access_list,
                authorization_list: vec![authorization.into_signed(auth_sig)],
                input,
            };
            let sig = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing");
            tx.into_signed(sig).into()
        }
    };
    Recovered::new_unchecked(envelope, signer.address())
}

/// A receipt for `tx` with `logs`, its bloom computed.
pub fn receipt(
    tx: &TxEnvelope,
    cumulative_gas_used: u64,
    success: bool,
    logs: Vec<Log>,
) -> ReceiptEnvelope {
    let receipt = Receipt {
        status: Eip658Value::Eip658(success),
        cumulative_gas_used,
        logs,
    };
    let tx_type: TxType = tx.tx_type();
    ReceiptEnvelope::from_typed(tx_type, receipt.with_bloom())
}

pub fn log(address: Address, topics: Vec<B256>, data: Vec<u8>) -> Log {
    Log {
        address,
        data: LogData::new_unchecked(topics, data.into()),
    }
}

/// The key that signs test headers.
pub fn sequencer() -> PrivateKeySigner {
    signer(1_000_000)
}

/// An owned block, from which a [`BlockRecord`] borrows.
#[derive(Debug, Clone)]
pub struct OwnedBlock {
    pub header: Header,
    pub hash: B256,
    pub signature: Signature,
    pub transactions: Vec<Recovered<TxEnvelope>>,
    pub receipts: Vec<ReceiptEnvelope>,
    pub changeset: Vec<u8>,
    pub state_history: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl OwnedBlock {
    /// Seals a block: the header's hash and the sequencer's signature over it.
    pub fn seal(
        number: u64,
        parent_hash: B256,
        transactions: Vec<Recovered<TxEnvelope>>,
        receipts: Vec<ReceiptEnvelope>,
        changeset: Vec<u8>,
        state_history: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    ) -> Self {
        let header = Header {
            parent_hash,
            number,
            timestamp: 1_700_000_000 + number,
            gas_limit: 30_000_000,
            gas_used: receipts.last().map_or(0, |r| r.cumulative_gas_used()),
            base_fee_per_gas: Some(1_000_000_000),
            extra_data: Bytes::from_static(b"gigas"),
            ..Header::default()
        };
        let hash = header.hash_slow();
        let signature = sequencer().sign_hash_sync(&hash).expect("signing");
        Self {
            header,
            hash,
            signature,
            transactions,
            receipts,
            changeset,
            state_history,
        }
    }

    pub fn record(&self) -> BlockRecord<'_> {
        BlockRecord {
            header: &self.header,
            hash: self.hash,
            signature: self.signature,
            transactions: &self.transactions,
            receipts: &self.receipts,
            changeset: &self.changeset,
            state_history: &self.state_history,
        }
    }
}

/// Addresses that emit logs in generated chains: a few common ones and one rare one.
pub fn emitter(i: u64) -> Address {
    Address::with_last_byte(0xE0 + i as u8)
}

/// The address that emits in only a few blocks.
pub fn rare_emitter() -> Address {
    Address::repeat_byte(0xAA)
}

/// Topics used by generated logs.
pub fn topic(i: u64) -> B256 {
    B256::with_last_byte(0x10 + i as u8)
}

/// A topic that appears in only a few blocks.
pub fn rare_topic() -> B256 {
    B256::repeat_byte(0xBB)
}

/// A chain of `blocks` blocks (numbers `0..blocks`) of real signed transactions of every kind
/// with receipts and logs; the blocks in `rare_blocks` get one log from [`rare_emitter`] with
/// [`rare_topic`] at position 1.
pub fn generate_chain(seed: u64, blocks: u64, rare_blocks: &[u64]) -> Vec<OwnedBlock> {
    let mut rng = Rng(seed);
    let senders: Vec<PrivateKeySigner> = (0..8).map(signer).collect();
    let mut nonces = vec![0u64; senders.len()];
    let mut parent = B256::ZERO;
    let mut out = Vec::with_capacity(blocks as usize);
    for number in 0..blocks {
        let count = if number == 0 {
            0
        } else if rare_blocks.contains(&number) {
            1 + rng.below(5)
        } else {
            rng.below(6)
        };
        let mut transactions = Vec::new();
        let mut receipts = Vec::new();
        let mut gas = 0;
        for i in 0..count {
            let s = rng.below(senders.len() as u64) as usize;
            let kind = rng.below(4);
            let to = Address::with_last_byte(rng.below(200) as u8 + 1);
            let input: Bytes = rng.bytes_below(40).into();
            let tx = signed_tx(&senders[s], kind, nonces[s], to, input);
            nonces[s] += 1;
            let mut logs = Vec::new();
            for _ in 0..rng.below(4) {
                let topics = (0..rng.below(5)).map(|_| topic(rng.below(6))).collect();
                logs.push(log(emitter(rng.below(4)), topics, rng.bytes_below(64)));
            }
            if i == 0 && rare_blocks.contains(&number) {
                logs.push(log(
                    rare_emitter(),
                    vec![topic(0), rare_topic()],
                    vec![1, 2, 3],
                ));
            }
            gas += 21_000 + rng.below(50_000);
            receipts.push(receipt(&tx, gas, rng.chance(90), logs));
            transactions.push(tx);
        }
        let changeset = rng.bytes_below(300);
        let block = OwnedBlock::seal(
            number,
            parent,
            transactions,
            receipts,
            changeset,
            Vec::new(),
        );
        parent = block.hash;
        out.push(block);
    }
    out
}

/// Checks that every generated transaction's signature recovers to its recorded sender.
pub fn assert_senders_recover(block: &OwnedBlock) {
    for tx in &block.transactions {
        assert_eq!(tx.inner().recover_signer().expect("recovers"), tx.signer());
    }
}

/// The logs of `chain` that `query` matches, found by reading every receipt.
pub fn brute_force(chain: &[OwnedBlock], query: &LogQuery) -> Vec<IndexedLog> {
    let mut out = Vec::new();
    for block in chain {
        let n = block.header.number;
        if n < query.from || n > query.to {
            continue;
        }
        let mut log_index = 0u32;
        for (tx_index, (tx, receipt)) in
            (0u32..).zip(block.transactions.iter().zip(&block.receipts))
        {
            for log in receipt.logs() {
                if query.matches(log) {
                    out.push(IndexedLog {
                        block_number: n,
                        block_hash: block.hash,
                        tx_hash: *tx.tx_hash(),
                        tx_index,
                        log_index,
                        log: log.clone(),
                    });
                }
                log_index += 1;
            }
        }
    }
    out
}

/// A random log filter over a chain of `blocks` blocks from [`generate_chain`].
pub fn random_query(rng: &mut Rng, blocks: u64) -> LogQuery {
    let from = rng.below(blocks + 5);
    let to = from + rng.below(blocks + 10 - from);
    let addresses: Vec<Address> = (0..rng.below(3))
        .map(|_| {
            if rng.chance(10) {
                rare_emitter()
            } else {
                emitter(rng.below(5))
            }
        })
        .collect();
    let mut topics: [Option<Vec<B256>>; 4] = Default::default();
    for slot in &mut topics {
        if rng.chance(35) {
            let list = (0..rng.below(3))
                .map(|_| {
                    if rng.chance(10) {
                        rare_topic()
                    } else {
                        topic(rng.below(7))
                    }
                })
                .collect();
            *slot = Some(list);
        }
    }
    LogQuery {
        from,
        to,
        addresses,
        topics,
    }
}

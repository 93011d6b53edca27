//! The valid inputs and how each target's decoder is called on them live together: a seed's
//! context (chain tip, prior state, key index, pool config) is what its decoder runs against.
//! Building them takes real signing, encoding and a journal on disk, kept out of the mutation
//! loop so the harness reads without that detail.

use alloy_consensus::{
    Receipt, ReceiptEnvelope, ReceiptWithBloom, SignableTransaction, TxEip1559, TxEip2930,
    TxEip7702, TxEnvelope, TxLegacy,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Bytes, Log, TxKind, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use eyre::{bail, Result};
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use gigas_statediff::{
    decode_body, encode_body, encode_diff, verify_and_decode, BlockFile, ChainTip, Compression,
    DiffFile, Header, MemoryKeyIndex, MemoryState, PriorValues,
};

use super::{Outcome, Rng, Target};

/// A published block with what a follower holds before it.
struct DiffSeed {
    tip: ChainTip,
    bytes: Vec<u8>,
    body: Vec<u8>,
    state: MemoryState,
    index: MemoryKeyIndex,
}

/// The valid inputs every case starts from.
pub struct Seeds {
    sequencer: Address,
    diffs: Vec<DiffSeed>,
    changesets: Vec<Vec<u8>>,
    blocks: Vec<Vec<u8>>,
    transactions: Vec<Vec<u8>>,
    journals: Vec<Vec<u8>>,
    pool: gigas_txpool::PoolConfig,
}

impl std::fmt::Debug for Seeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seeds")
            .field("diffs", &self.diffs.len())
            .field("changesets", &self.changesets.len())
            .field("blocks", &self.blocks.len())
            .field("transactions", &self.transactions.len())
            .field("journals", &self.journals.len())
            .finish_non_exhaustive()
    }
}

fn random_changes(rng: &mut Rng, state: &MemoryState) -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    // Codes go in with the account that takes each, after the other changes: a code no
    // account of the block names is refused (the state root covers code hashes only).
    let mut deployed = std::collections::BTreeMap::new();
    for _ in 0..1 + rng.below(24) {
        let address = Address::with_last_byte(rng.below(12) as u8);
        match rng.below(12) {
            0..=4 => {
                let prior = state
                    .account_state(&address)
                    .unwrap_or(gigas_statediff::EMPTY_ACCOUNT);
                b.account(
                    address,
                    AccountState {
                        nonce: prior.nonce + rng.below(3),
                        balance: U256::from(rng.next()),
                        code_hash: prior.code_hash,
                    },
                    rng.below(10) == 0,
                );
            }
            5 => b.destroyed(address),
            6 => {
                deployed.insert(
                    address,
                    Bytes::from(vec![rng.next() as u8; 1 + rng.index(40)]),
                );
            }
            _ => b.slot(
                address,
                U256::from(rng.below(6)),
                U256::from(rng.below(3) * rng.next()),
            ),
        }
    }
    for (address, code) in deployed {
        let prior = state
            .account_state(&address)
            .unwrap_or(gigas_statediff::EMPTY_ACCOUNT);
        b.account(
            address,
            AccountState {
                code_hash: alloy_primitives::keccak256(&code),
                ..prior
            },
            false,
        );
        b.bytecode(code);
    }
    b.build()
}

fn signed<T: SignableTransaction<alloy_primitives::Signature>>(
    key: &PrivateKeySigner,
    tx: T,
) -> Result<TxEnvelope>
where
    TxEnvelope: From<alloy_consensus::Signed<T>>,
{
    let signature = key.sign_hash_sync(&tx.signature_hash())?;
    Ok(TxEnvelope::from(tx.into_signed(signature)))
}

impl Seeds {
    /// Valid inputs of every target, built from `seed`.
    pub fn build(seed: u64) -> Result<Self> {
        let mut rng = Rng::new(seed);
        let key = PrivateKeySigner::from_bytes(&B256::with_last_byte(0x29))?;
        let sequencer = key.address();

        // Six blocks of random changes, published as the sequencer publishes them.
        let mut parent = Header {
            gas_limit: 30_000_000,
            ..Header::default()
        };
        let mut state = MemoryState::new();
        let mut index = MemoryKeyIndex::new();
        let mut diffs = Vec::new();
        let mut changesets = Vec::new();
        for _ in 0..6 {
            let changes = random_changes(&mut rng, &state);
            let header = Header {
                parent_hash: parent.hash_slow(),
                number: parent.number + 1,
                timestamp: parent.timestamp + 1,
                gas_limit: parent.gas_limit,
                // Fuzz seeds: decoders are what is fuzzed, not roots; a distinct value per block.
                state_root: alloy_primitives::keccak256(changes.encode()),
                ..Header::default()
            };
            let signature = key.sign_hash_sync(&header.hash_slow())?;
            let prior = PriorValues::capture(&changes, &state)?;
            let encoded = encode_diff(
                &header,
                &signature,
                &changes,
                &index,
                &prior,
                &Compression::default(),
            )?;
            let body = encode_body(&changes, &index, &prior)?.bytes;
            diffs.push(DiffSeed {
                tip: ChainTip::of(&parent),
                bytes: encoded.bytes,
                body,
                state: state.clone(),
                index: index.clone(),
            });
            changesets.push(changes.encode());
            state.apply(&changes);
            index.extend(&encoded.new_keys)?;
            parent = header;
        }

        // One transaction of each type, then block files of them with receipts.
        let to = TxKind::Call(Address::repeat_byte(0x77));
        let access_list =
            alloy_eips::eip2930::AccessList(vec![alloy_eips::eip2930::AccessListItem {
                address: Address::repeat_byte(1),
                storage_keys: vec![B256::repeat_byte(2)],
            }]);
        let auth = alloy_eips::eip7702::Authorization {
            chain_id: U256::from(1337),
            address: Address::repeat_byte(3),
            nonce: 0,
        };
        let auth = {
            let signature = key.sign_hash_sync(&auth.signature_hash())?;
            auth.into_signed(signature)
        };
        let txs = [
            signed(
                &key,
                TxLegacy {
                    chain_id: Some(1337),
                    nonce: 1,
                    gas_price: 1_000_000_000,
                    gas_limit: 21_000,
                    to,
                    value: U256::from(5),
                    input: Bytes::new(),
                },
            )?,
            signed(
                &key,
                TxEip2930 {
                    chain_id: 1337,
                    nonce: 2,
                    gas_price: 1_000_000_000,
                    gas_limit: 50_000,
                    to,
                    value: U256::ZERO,
                    access_list: access_list.clone(),
                    input: Bytes::from_static(&[1, 2, 3]),
                },
            )?,
            signed(
                &key,
                TxEip1559 {
                    chain_id: 1337,
                    nonce: 3,
                    gas_limit: 60_000,
                    max_fee_per_gas: 2_000_000_000,
                    max_priority_fee_per_gas: 1,
                    to,
                    value: U256::from(7),
                    access_list,
                    input: Bytes::from_static(&[0xa9, 0x05, 0x9c, 0xbb]),
                },
            )?,
            signed(
                &key,
                TxEip7702 {
                    chain_id: 1337,
                    nonce: 4,
                    gas_limit: 80_000,
                    max_fee_per_gas: 2_000_000_000,
                    max_priority_fee_per_gas: 1,
                    to: Address::repeat_byte(0x77),
                    authorization_list: vec![auth],
                    ..TxEip7702::default()
                },
            )?,
        ];
        let transactions: Vec<Vec<u8>> = txs.iter().map(|tx| tx.encoded_2718()).collect();
        let receipts: Vec<ReceiptEnvelope> = txs
            .iter()
            .enumerate()
            .map(|(i, tx)| {
                let receipt = Receipt {
                    status: alloy_consensus::Eip658Value::Eip658(i % 2 == 0),
                    cumulative_gas_used: 21_000 * (i as u64 + 1),
                    logs: vec![Log::new_unchecked(
                        Address::repeat_byte(i as u8),
                        vec![B256::repeat_byte(9)],
                        Bytes::from(vec![i as u8; 40]),
                    )],
                };
                let with_bloom = ReceiptWithBloom::from(receipt);
                match tx {
                    TxEnvelope::Legacy(_) => ReceiptEnvelope::Legacy(with_bloom),
                    TxEnvelope::Eip2930(_) => ReceiptEnvelope::Eip2930(with_bloom),
                    TxEnvelope::Eip7702(_) => ReceiptEnvelope::Eip7702(with_bloom),
                    _ => ReceiptEnvelope::Eip1559(with_bloom),
                }
            })
            .collect();
        let mut blocks = Vec::new();
        for n in 1..=txs.len() {
            let file = BlockFile {
                number: n as u64,
                hash: B256::repeat_byte(n as u8),
                transactions: txs[..n].to_vec(),
                receipts: receipts[..n].to_vec(),
            };
            let compression = if n % 2 == 0 {
                Compression::NONE
            } else {
                Compression::default()
            };
            blocks.push(file.encode(&compression)?);
        }

        // Journals: the transactions appended in batches, as the writer leaves the file.
        let dir = tempfile::tempdir()?;
        let mut journals = Vec::new();
        for batches in 1..=3 {
            let path = dir.path().join(format!("journal-{batches}"));
            {
                let (journal, _) = gigas_txpool::Journal::open(&path)?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                for batch in 0..batches {
                    runtime.block_on(async {
                        let appends = transactions
                            .iter()
                            .skip(batch)
                            .map(|raw| journal.append(Bytes::from(raw.clone())));
                        for result in futures::future::join_all(appends).await {
                            result?;
                        }
                        Ok::<_, gigas_txpool::JournalError>(())
                    })?;
                }
            }
            journals.push(std::fs::read(&path)?);
        }

        let seeds = Self {
            sequencer,
            diffs,
            changesets,
            blocks,
            transactions,
            journals,
            pool: gigas_txpool::PoolConfig::new(1337, 30_000_000),
        };
        // Every seed must be accepted, or the mutations would start from refusals.
        for target in Target::ALL {
            for i in 0..seeds.count(target) {
                let input = seeds.input(target, i).to_vec();
                if let Outcome::Refused(kind) = seeds.run(target, i, &input) {
                    bail!("seed {i} of {} is refused: {kind}", target.name());
                }
            }
        }
        Ok(seeds)
    }

    pub(super) fn count(&self, target: Target) -> usize {
        match target {
            Target::DiffFile | Target::DiffBody => self.diffs.len(),
            Target::BlockFile => self.blocks.len(),
            Target::Changeset => self.changesets.len(),
            Target::Transaction => self.transactions.len(),
            Target::Journal => self.journals.len(),
        }
    }

    pub(super) fn input(&self, target: Target, i: usize) -> &[u8] {
        match target {
            Target::DiffFile => &self.diffs[i].bytes,
            Target::DiffBody => &self.diffs[i].body,
            Target::BlockFile => &self.blocks[i],
            Target::Changeset => &self.changesets[i],
            Target::Transaction => &self.transactions[i],
            Target::Journal => &self.journals[i],
        }
    }

    /// Runs the decoder of `target` on `input` (a mutation of seed `i`, whose context it
    /// decodes against).
    pub(super) fn run(&self, target: Target, i: usize, input: &[u8]) -> Outcome {
        fn kind(e: &impl std::fmt::Debug) -> String {
            let text = format!("{e:?}");
            text.split(['(', '{', ' '])
                .next()
                .unwrap_or_default()
                .to_string()
        }
        match target {
            Target::DiffFile => {
                let seed = &self.diffs[i];
                let framed = DiffFile::decode(input);
                match verify_and_decode(&seed.tip, self.sequencer, input, &seed.index, &seed.state)
                {
                    Ok(_) => Outcome::Accepted,
                    Err(e) => Outcome::Refused(match framed {
                        Err(_) => format!("frame:{}", kind(&e.kind)),
                        Ok(_) => format!("verify:{}", kind(&e.kind)),
                    }),
                }
            }
            Target::DiffBody => {
                let seed = &self.diffs[i];
                match decode_body(input, &seed.index, &seed.state) {
                    Ok(_) => Outcome::Accepted,
                    Err(e) => Outcome::Refused(kind(&e.kind)),
                }
            }
            Target::BlockFile => match BlockFile::decode(input) {
                Ok(_) => Outcome::Accepted,
                Err(e) => Outcome::Refused(kind(&e.kind)),
            },
            Target::Changeset => match ChangeSet::decode(input) {
                Ok(changes) => {
                    let again = changes.encode();
                    match ChangeSet::decode(&again) {
                        Ok(back) if back == changes => Outcome::Accepted,
                        Ok(_) => Outcome::Failed("re-encoded ChangeSet decodes differently".into()),
                        Err(e) => Outcome::Failed(format!("re-encoded ChangeSet refused: {e}")),
                    }
                }
                Err(e) => Outcome::Refused(kind(&e)),
            },
            Target::Transaction => match gigas_txpool::decode_and_recover(input, &self.pool) {
                Ok(_) => Outcome::Accepted,
                Err(e) => Outcome::Refused(e.reason().to_string()),
            },
            Target::Journal => match gigas_txpool::Journal::decode(input) {
                Ok(_) => Outcome::Accepted,
                Err(e) => Outcome::Refused(kind(&e)),
            },
        }
    }
}

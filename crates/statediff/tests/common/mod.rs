//! What the statediff tests share: a reproducible generator of ChangeSets over a small
//! universe of keys (so that keys repeat and values move by deltas), and a signed chain.

#![allow(dead_code, unreachable_pub)]

use alloy_primitives::{keccak256, Address, Bytes, Signature, B256, KECCAK256_EMPTY, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder, LatticeHash};
use gigas_statediff::{
    commitment_digest, lattice_delta, pack_diff, ChainTip, Compression, Header, KeyIndex as _,
    MemoryKeyIndex, MemoryState, PriorValues, StateCommitment,
};

/// SplitMix64: reproducible randomness without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn word(&mut self) -> U256 {
        U256::from_limbs([self.next(), self.next(), self.next(), self.next()])
    }

    /// A value as contracts hold them: zero, small, a round amount, near the prior, huge.
    pub fn value(&mut self, prior: U256) -> U256 {
        match self.below(8) {
            0 => U256::ZERO,
            1 => U256::from(self.below(300)),
            2 => prior.wrapping_add(U256::from(self.below(1 << 20))),
            3 => prior.wrapping_sub(U256::from(self.below(1 << 20))),
            4 => self.word(),
            5 => U256::MAX - U256::from(self.below(5)),
            6 => U256::from(self.below(1000)) * U256::from(10u64).pow(U256::from(15)),
            _ => U256::from(self.next()),
        }
    }
}

pub fn address(i: u64) -> Address {
    let mut bytes = [0u8; 20];
    bytes[0] = 0xA0 | (i % 7) as u8;
    bytes[12..].copy_from_slice(&i.to_be_bytes());
    Address::from(bytes)
}

pub fn slot_key(rng: &mut Rng) -> U256 {
    if rng.chance(70) {
        U256::from(rng.below(8))
    } else {
        // A mapping slot: a keccak-like full word, from a small set so that it repeats.
        U256::from_be_bytes(keccak256(rng.below(16).to_be_bytes()).0)
    }
}

/// A random block's changes over `universe` addresses, against `state` (so that nonces,
/// balances and slots often move by small deltas, as real blocks do).
pub fn random_changes(rng: &mut Rng, state: &MemoryState, universe: u64) -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    // Codes deployed, each with the account that takes it: recorded after the other changes,
    // so that no later destruction leaves a code no account names (followers refuse one).
    let mut deployed = std::collections::BTreeMap::new();
    let ops = rng.below(24);
    for _ in 0..ops {
        let a = address(rng.below(universe));
        match rng.below(20) {
            0..=7 => {
                let prior = state
                    .account_state(&a)
                    .unwrap_or(gigas_statediff::EMPTY_ACCOUNT);
                let nonce = match rng.below(6) {
                    0 => prior.nonce,
                    1 | 2 => prior.nonce.wrapping_add(1),
                    3 => prior.nonce.wrapping_add(rng.below(1000)),
                    4 => rng.below(3),
                    _ => rng.next(),
                };
                let code_hash = match rng.below(6) {
                    0 => keccak256([rng.below(4) as u8]),
                    1 => B256::from(rng.word()),
                    _ => prior.code_hash,
                };
                let state = AccountState {
                    nonce,
                    balance: rng.value(prior.balance),
                    code_hash,
                };
                b.account(a, state, rng.chance(10));
            }
            8 => b.destroyed(a),
            // One code per address: the last deployed to it is the one it takes.
            9 => {
                deployed.insert(
                    a,
                    Bytes::from(vec![rng.below(256) as u8; 1 + rng.below(40) as usize]),
                );
            }
            _ => {
                let slot = slot_key(rng);
                let prior = state.slot_value(&a, &slot);
                b.slot(a, slot, rng.value(prior));
            }
        }
    }
    for (a, code) in deployed {
        let prior = state
            .account_state(&a)
            .unwrap_or(gigas_statediff::EMPTY_ACCOUNT);
        b.account(
            a,
            AccountState {
                code_hash: keccak256(&code),
                ..prior
            },
            false,
        );
        b.bytecode(code);
    }
    b.build()
}

/// The sequencer's key in tests.
pub fn sequencer() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&B256::repeat_byte(0x42)).expect("a valid key")
}

pub fn genesis_header() -> Header {
    Header {
        number: 0,
        state_root: keccak256(b"gigas test genesis"),
        gas_limit: 30_000_000,
        ..Default::default()
    }
}

/// The sealed header of the block after `parent` with `changes`, and its signature.
pub fn seal(
    signer: &PrivateKeySigner,
    parent: &Header,
    changes: &ChangeSet,
) -> (Header, Signature) {
    let header = Header {
        parent_hash: parent.hash_slow(),
        number: parent.number + 1,
        timestamp: parent.timestamp + 1,
        gas_limit: parent.gas_limit,
        // A placeholder, distinct per block: these tests are of the codec, not of roots
        // (a follower's root check is gigas-fullnode's).
        state_root: keccak256([parent.state_root.as_slice(), &changes.encode()].concat()),
        ..Default::default()
    };
    let signature = signer
        .sign_hash_sync(&header.hash_slow())
        .expect("a local key signs");
    (header, signature)
}

/// What the writer keeps between blocks.
#[derive(Debug, Clone)]
pub struct Writer {
    pub signer: PrivateKeySigner,
    pub parent: Header,
    pub state: MemoryState,
    pub index: MemoryKeyIndex,
    /// The state commitment kept, when the writer signs one into each diff.
    pub lattice: Option<LatticeHash>,
}

/// One published block, with the follower-side inputs it needs.
#[derive(Debug, Clone)]
pub struct Published {
    pub tip: ChainTip,
    pub changes: ChangeSet,
    pub header: Header,
    pub bytes: Vec<u8>,
    pub body: Vec<u8>,
    /// The state and index before the block.
    pub state: MemoryState,
    pub index: MemoryKeyIndex,
    /// The lattice hash before the block (a committing writer's).
    pub lattice: Option<LatticeHash>,
}

impl Writer {
    pub fn new() -> Self {
        Self {
            signer: sequencer(),
            parent: genesis_header(),
            state: MemoryState::new(),
            index: MemoryKeyIndex::new(),
            lattice: None,
        }
    }

    /// A writer that signs a state commitment into each diff, as the sequencer does.
    pub fn committing() -> Self {
        Self {
            lattice: Some(LatticeHash::zero()),
            ..Self::new()
        }
    }

    /// Seals and encodes the next block, as the sequencer would (prior values captured from
    /// the state before the block), then applies it.
    pub fn publish(&mut self, changes: ChangeSet) -> Published {
        let (header, signature) = seal(&self.signer, &self.parent, &changes);
        let prior = PriorValues::capture(&changes, &self.state).expect("the memory state reads");
        let mut packed =
            pack_diff(&header, &signature, &changes, &self.index, &prior).expect("encodes");
        let before = self.lattice.clone();
        if let Some(lattice) = &mut self.lattice {
            let delta = lattice_delta(
                &changes,
                &prior,
                self.index.len().expect("reads"),
                &packed.new_keys,
                false,
            )
            .expect("every prior value captured");
            lattice.add(&delta);
            let checksum = lattice.checksum();
            let signature = self
                .signer
                .sign_hash_sync(&commitment_digest(&header.hash_slow(), &checksum))
                .expect("a local key signs");
            packed.file.commitment = Some(StateCommitment {
                lattice: checksum,
                signature,
            });
        }
        let encoded = packed.finish(&Compression::default()).expect("frames");
        let body = gigas_statediff::encode_body(&changes, &self.index, &prior)
            .expect("encodes")
            .bytes;
        let published = Published {
            tip: ChainTip::of(&self.parent),
            changes: changes.clone(),
            header: header.clone(),
            bytes: encoded.bytes,
            body,
            state: self.state.clone(),
            index: self.index.clone(),
            lattice: before,
        };
        self.state.apply(&changes);
        self.index
            .extend(&encoded.new_keys)
            .expect("new keys are new");
        self.parent = header;
        published
    }
}

/// A chain of `blocks` random blocks.
pub fn random_chain(seed: u64, blocks: usize, universe: u64) -> Vec<Published> {
    let mut rng = Rng(seed);
    let mut writer = Writer::new();
    (0..blocks)
        .map(|_| {
            let changes = random_changes(&mut rng, &writer.state, universe);
            writer.publish(changes)
        })
        .collect()
}

/// An empty code hash, for readability in tests.
pub const NO_CODE: B256 = KECCAK256_EMPTY;

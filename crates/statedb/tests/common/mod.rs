//! What the state database's tests share: a deterministic generator, an in-memory model of
//! the state with its root from alloy-trie alone, and chains of headers over ChangeSets.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::Path;

use alloy_consensus::Header;
use alloy_primitives::{keccak256, Address, Bytes, B256, KECCAK256_EMPTY, U256};
use alloy_trie::{HashBuilder, Nibbles, TrieAccount, EMPTY_ROOT_HASH};
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use gigas_statedb::{BlockToApply, GenesisBlock, GenesisEntry, StateDb, StateDbOptions, StateView};
use gigas_statediff::{encode_body, MemoryKeyIndex, PriorValues, StateKey};

/// xorshift64*: reproducible streams without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub fn small_options() -> StateDbOptions {
    StateDbOptions {
        // Tests open many environments in one process: keep the reserved address space small.
        max_size_bytes: 4 << 30,
        growth_step_bytes: 16 << 20,
        ..StateDbOptions::default()
    }
}

pub fn open(dir: &Path) -> StateDb {
    StateDb::open(dir, small_options()).expect("opens")
}

/// The whole state in memory, and its root from alloy-trie's HashBuilder fed every leaf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub accounts: BTreeMap<Address, AccountState>,
    pub storage: BTreeMap<Address, BTreeMap<U256, U256>>,
    pub codes: BTreeMap<B256, Bytes>,
}

impl Model {
    pub fn apply(&mut self, changes: &ChangeSet) {
        for (address, change) in changes.accounts() {
            if change.storage_wiped {
                self.storage.remove(address);
            }
            match change.state {
                Some(state) => {
                    self.accounts.insert(*address, state);
                }
                None => {
                    self.accounts.remove(address);
                }
            }
        }
        for (address, slot, value) in changes.storage() {
            let slots = self.storage.entry(*address).or_default();
            if value.is_zero() {
                slots.remove(slot);
            } else {
                slots.insert(*slot, *value);
            }
            if slots.is_empty() {
                self.storage.remove(address);
            }
        }
        for (hash, code) in changes.bytecodes() {
            self.codes.insert(*hash, code.clone());
        }
    }

    pub fn slot(&self, address: &Address, slot: &U256) -> U256 {
        self.storage
            .get(address)
            .and_then(|s| s.get(slot))
            .copied()
            .unwrap_or_default()
    }

    pub fn storage_root(&self, address: &Address) -> B256 {
        let Some(slots) = self.storage.get(address) else {
            return EMPTY_ROOT_HASH;
        };
        let mut leaves: Vec<(B256, U256)> = slots
            .iter()
            .map(|(s, v)| (keccak256(s.to_be_bytes::<32>()), *v))
            .collect();
        leaves.sort_unstable();
        let mut hb = HashBuilder::default();
        for (k, v) in leaves {
            hb.add_leaf(Nibbles::unpack(k), &alloy_rlp::encode(v));
        }
        hb.root()
    }

    pub fn trie_account(&self, address: &Address) -> Option<TrieAccount> {
        self.accounts
            .get(address)
            .map(|a| TrieAccount::new(a.nonce, a.balance, self.storage_root(address), a.code_hash))
    }

    /// The state root from alloy-trie's HashBuilder fed with every leaf in key order.
    pub fn root(&self) -> B256 {
        let mut leaves: Vec<(B256, TrieAccount)> = self
            .accounts
            .keys()
            .filter_map(|a| self.trie_account(a).map(|t| (keccak256(a), t)))
            .collect();
        leaves.sort_unstable_by_key(|l| l.0);
        let mut hb = HashBuilder::default();
        for (k, account) in leaves {
            hb.add_leaf(Nibbles::unpack(k), &alloy_rlp::encode(account));
        }
        let root = hb.root();
        // And alloy-trie's own helper, which hashes the addresses itself.
        let again = alloy_trie::root::state_root_unhashed(
            self.accounts
                .keys()
                .filter_map(|a| self.trie_account(a).map(|t| (*a, t))),
        );
        assert_eq!(
            root, again,
            "two ways of computing the reference root differ"
        );
        root
    }

    pub fn genesis_entries(&self) -> Vec<GenesisEntry> {
        let mut out = Vec::new();
        for (address, state) in &self.accounts {
            let code = (state.code_hash != KECCAK256_EMPTY)
                .then(|| self.codes.get(&state.code_hash).cloned())
                .flatten();
            out.push(GenesisEntry::Account {
                address: *address,
                nonce: state.nonce,
                balance: state.balance,
                code,
            });
        }
        for (address, slots) in &self.storage {
            for (slot, value) in slots {
                out.push(GenesisEntry::Slot {
                    address: *address,
                    slot: *slot,
                    value: *value,
                });
            }
        }
        out
    }

    /// Panics unless the view holds exactly this state, key by key.
    #[track_caller]
    pub fn assert_held_by(&self, view: &StateView<'_>, touched: &[Address]) {
        for (address, state) in &self.accounts {
            assert_eq!(
                view.account(address).unwrap(),
                Some(*state),
                "account {address}"
            );
        }
        for address in touched {
            assert_eq!(
                view.account(address).unwrap(),
                self.accounts.get(address).copied(),
                "account {address}"
            );
            for slot in 0..8u64 {
                let slot = U256::from(slot);
                assert_eq!(
                    view.storage(address, &slot).unwrap(),
                    self.slot(address, &slot),
                    "slot {slot} of {address}"
                );
            }
        }
        for (address, slots) in &self.storage {
            for (slot, value) in slots {
                assert_eq!(
                    view.storage(address, slot).unwrap(),
                    *value,
                    "slot {slot} of {address}"
                );
            }
        }
        for (hash, code) in &self.codes {
            assert_eq!(view.code(hash).unwrap().as_ref(), Some(code), "code {hash}");
        }
    }
}

pub fn address(i: u64) -> Address {
    Address::from_word(keccak256(i.to_be_bytes()))
}

fn state(rng: &mut Rng, code_hash: B256) -> AccountState {
    AccountState {
        nonce: rng.below(1000),
        balance: U256::from(rng.next()) << (rng.below(3) * 64),
        code_hash,
    }
}

/// A random starting state over accounts `0..accounts`, some with code and storage.
pub fn random_model(rng: &mut Rng, accounts: u64) -> Model {
    let mut model = Model::default();
    let code = Bytes::from(vec![0x60, 0x01, 0x60, 0x00, 0x55]);
    let code_hash = keccak256(&code);
    model.codes.insert(code_hash, code);
    for i in 0..accounts {
        let a = address(i);
        let with_code = rng.chance(20);
        model.accounts.insert(
            a,
            state(
                rng,
                if with_code {
                    code_hash
                } else {
                    KECCAK256_EMPTY
                },
            ),
        );
        if rng.chance(30) {
            let slots = model.storage.entry(a).or_default();
            for _ in 0..1 + rng.below(40) {
                slots.insert(
                    U256::from(rng.below(64)),
                    U256::from(1 + rng.below(1 << 40)),
                );
            }
        }
    }
    model
}

/// A random block over accounts `0..accounts` (some beyond the model: creations): balance
/// and nonce changes, slot writes and deletions, destructions, re-creations with storage in
/// the same block, new code.
pub fn random_changes(rng: &mut Rng, model: &Model, accounts: u64, block: u64) -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    let touches = 1 + rng.below(30);
    for _ in 0..touches {
        let a = address(rng.below(accounts + accounts / 5));
        let exists = model.accounts.contains_key(&a);
        match rng.below(20) {
            0 if exists => b.destroyed(a),
            1 if exists => {
                // Destroyed and re-created in the block, with fresh storage.
                b.destroyed(a);
                b.account(a, state(rng, KECCAK256_EMPTY), true);
                for _ in 0..rng.below(5) {
                    b.slot(
                        a,
                        U256::from(rng.below(64)),
                        U256::from(1 + rng.below(1000)),
                    );
                }
            }
            2 => {
                let code = Bytes::from(block.to_be_bytes().to_vec());
                let hash = keccak256(&code);
                b.bytecode(code);
                b.account(a, state(rng, hash), false);
            }
            _ => {
                let mut s = model
                    .accounts
                    .get(&a)
                    .copied()
                    .unwrap_or_else(|| state(rng, KECCAK256_EMPTY));
                s.nonce += 1;
                s.balance = U256::from(rng.next());
                b.account(a, s, false);
                for _ in 0..rng.below(4) {
                    let slot = U256::from(rng.below(64));
                    // A third of writes delete.
                    let value = if rng.chance(33) {
                        U256::ZERO
                    } else {
                        U256::from(rng.next())
                    };
                    b.slot(a, slot, value);
                }
            }
        }
    }
    b.build()
}

/// Keeps slots only of accounts that exist after the block (storage of an account that does
/// not exist is not Ethereum state) and drops slot writes that change nothing.
pub fn consistent(changes: ChangeSet, model: &Model) -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    let exists_after = |a: &Address| match changes.accounts().iter().find(|(x, _)| x == a) {
        Some((_, c)) => c.state.is_some(),
        None => model.accounts.contains_key(a),
    };
    for (address, change) in changes.accounts() {
        match change.state {
            None => b.destroyed(*address),
            Some(state) => {
                if change.storage_wiped {
                    b.destroyed(*address);
                }
                b.account(*address, state, change.storage_wiped)
            }
        }
    }
    for (address, slot, value) in changes.storage() {
        let wiped = changes
            .accounts()
            .iter()
            .any(|(a, c)| a == address && c.storage_wiped);
        let before = if wiped {
            U256::ZERO
        } else {
            model.slot(address, slot)
        };
        if exists_after(address) && before != *value {
            b.slot(*address, *slot, *value);
        }
    }
    for (_, code) in changes.bytecodes() {
        b.bytecode(code.clone());
    }
    b.build()
}

/// Writer options for the chains of these tests, whose headers carry a placeholder
/// `stateRoot` ([`Chain::next`]): the writer's
/// roots are checked against the model's root from scratch instead. Root verification
/// against headers has its own test (`verify.rs`), over headers with the true roots.
pub fn synthetic_headers() -> gigas_statedb::WriterOptions {
    gigas_statedb::WriterOptions {
        verify_roots: false,
        ..gigas_statedb::WriterOptions::default()
    }
}

/// A chain of unsigned headers whose `state_root` is a placeholder (keccak of the parent's
/// and the block's changes, unique per chain) for tests that do not verify roots.
#[derive(Debug, Clone)]
pub struct Chain {
    pub parent: Header,
    pub hash: B256,
}

impl Chain {
    pub fn genesis() -> Self {
        let header = Header {
            number: 0,
            gas_limit: 30_000_000,
            state_root: B256::repeat_byte(0x11),
            ..Header::default()
        };
        let hash = header.hash_slow();
        Self {
            parent: header,
            hash,
        }
    }

    pub fn genesis_block(&self) -> GenesisBlock<'_> {
        GenesisBlock {
            header: &self.parent,
            hash: self.hash,
            signature: None,
            commitment: None,
            verify_root: false,
        }
    }

    /// The next header over `changes`.
    pub fn next(&mut self, changes: &ChangeSet) -> (Header, B256) {
        let header = Header {
            number: self.parent.number + 1,
            parent_hash: self.hash,
            gas_limit: 30_000_000,
            timestamp: self.parent.timestamp + 1,
            state_root: alloy_primitives::keccak256(
                [self.parent.state_root.as_slice(), &changes.encode()].concat(),
            ),
            ..Header::default()
        };
        let hash = header.hash_slow();
        self.parent = header.clone();
        self.hash = hash;
        (header, hash)
    }
}

/// The sequencer's side of the enumeration index: the new keys a block's diff names.
pub fn new_keys(index: &mut MemoryKeyIndex, model: &Model, changes: &ChangeSet) -> Vec<StateKey> {
    let prior = PriorValues::capture(changes, &ModelPrior(model)).expect("prior values");
    let body = encode_body(changes, index, &prior).expect("encodes");
    index.extend(&body.new_keys).expect("new keys");
    body.new_keys
}

/// The model as the diff codec's prior state.
pub struct ModelPrior<'a>(pub &'a Model);

impl gigas_statediff::PriorState for ModelPrior<'_> {
    fn account(
        &self,
        address: &Address,
    ) -> Result<Option<AccountState>, gigas_statediff::StoreError> {
        Ok(self.0.accounts.get(address).copied())
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, gigas_statediff::StoreError> {
        Ok(self.0.slot(address, slot))
    }
}

pub fn apply_genesis(db: &StateDb, chain: &Chain, model: &Model, chunk: usize) -> B256 {
    let entries = model
        .genesis_entries()
        .into_iter()
        .map(Ok::<_, std::io::Error>);
    db.apply_genesis(chain.genesis_block(), entries, chunk)
        .expect("genesis")
        .state_root
}

pub fn block<'a>(
    header: &'a Header,
    hash: B256,
    changes: &'a ChangeSet,
    keys: &'a [StateKey],
) -> BlockToApply<'a> {
    BlockToApply {
        header,
        hash,
        signature: None,
        changes,
        hashed: None,
        new_keys: keys,
        lattice: None,
        commitment: None,
    }
}

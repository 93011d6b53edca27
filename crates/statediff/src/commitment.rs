//! The state commitment: the lattice hash of the state after a block (accounts, nonzero
//! slots and key-index entries; [`gigas_primitives::lattice`]), signed by the sequencer and
//! carried in the block's diff file (FORMAT.md, "Files"; `SNAPSHOT.md`).
//!
//! The header's `stateRoot` carries the chained checksum over ChangeSets, which commits to the
//! history, not to a state: a node that starts from a snapshot has no history to check it
//! against. The lattice hash commits to the state itself, and is kept from block to block at
//! the cost of the block's changes: subtract each changed key's old element, add its new one,
//! add an element per new key-index entry. The sequencer signs
//! `keccak256("gigas/state-commitment/v2" ‖ block hash ‖ checksum of the lattice)` with the
//! key that signs its headers, so a snapshot's manifest is checked with the block's header
//! and this one signature.
//!
//! Wiped storage: a ChangeSet wipes an account's storage without listing the slots. Both
//! sides count the slots of a wiped account as zero before the block (as the codec does),
//! which is exact on a Gigas chain: it runs Cancun or later, where only an account created in
//! the same transaction can be destroyed (EIP-6780), and no account a creation can land on
//! (no code, nonce 0) holds slots: revm 43 does not check EIP-7610, but the only way to such
//! an account is genesis storage, which the chain spec refuses (`gigas-chain`'s
//! `ChainConfig::validate`). So a wiped account never held slots before its block. Were that
//! ever false,
//! the sequencer's and a follower's sums would still agree (both leave the same slots out),
//! and a snapshot's would not: the manifest's check refuses it.

use alloy_primitives::{keccak256, Address, Signature, B256, U256};
use gigas_primitives::{AccountState, ChangeSet, LatticeHash};

use crate::error::StoreError;
use crate::key::{KeyIndex, StateKey};
use crate::prior::PriorState;
use gigas_primitives::HashedKeys;

/// The commitment's version: 2 names accounts and slots by their keccak
/// ([`gigas_primitives::lattice`]). Caches of diffs or states keyed by it are written again
/// when it moves.
pub const COMMITMENT_VERSION: u32 = 2;

/// Domain of the signed message.
pub const COMMITMENT_DOMAIN: &[u8] = b"gigas/state-commitment/v2";

/// A block's state commitment as its diff carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCommitment {
    /// [`LatticeHash::checksum`] of the state after the block.
    pub lattice: B256,
    /// The sequencer's signature over [`commitment_digest`].
    pub signature: Signature,
}

/// What the sequencer signs for block `block_hash` whose state's lattice checksum is
/// `lattice`.
pub fn commitment_digest(block_hash: &B256, lattice: &B256) -> B256 {
    let mut bytes = [0u8; COMMITMENT_DOMAIN.len() + 64];
    bytes[..COMMITMENT_DOMAIN.len()].copy_from_slice(COMMITMENT_DOMAIN);
    bytes[COMMITMENT_DOMAIN.len()..COMMITMENT_DOMAIN.len() + 32]
        .copy_from_slice(block_hash.as_slice());
    bytes[COMMITMENT_DOMAIN.len() + 32..].copy_from_slice(lattice.as_slice());
    keccak256(bytes)
}

impl StateCommitment {
    /// Who signed it for `block_hash` (`None`: not a valid signature). EIP-2's low-s rule
    /// applies, as for headers.
    pub fn signer(&self, block_hash: &B256) -> Option<Address> {
        alloy_consensus::crypto::secp256k1::recover_signer(
            &self.signature,
            commitment_digest(block_hash, &self.lattice),
        )
        .ok()
    }
}

/// One element of a block's delta: subtracted (`false`) or added. Accounts and slots carry
/// their keys' keccak, computed once per changed key for both its old and new element.
enum Element {
    Account(B256, AccountState),
    Slot(B256, B256, U256),
    Key(u64, StateKey),
}

impl Element {
    /// Adds (`add`) or subtracts the element in place (no element is built: four per
    /// transfer on the sequencer's diff writer).
    fn apply(&self, sum: &mut LatticeHash, add: bool) {
        match self {
            Element::Account(address, state) => sum.apply_account(add, address, state),
            Element::Slot(address, slot, value) => sum.apply_slot(add, address, slot, value),
            Element::Key(index, StateKey::Account(address)) => {
                sum.apply_index_entry(add, *index, address, None)
            }
            Element::Key(index, StateKey::Slot(address, slot)) => {
                sum.apply_index_entry(add, *index, address, Some(slot))
            }
        }
    }
}

/// Below this many elements a delta is summed on the calling thread: the pool's hand-off
/// costs more than it saves.
const PARALLEL_FROM: usize = 512;

/// The change a block makes to the lattice hash: `changes` against the state before it
/// (`prior`, which must hold every changed key, as [`crate::PriorValues::capture`] and the
/// decoder's read do), and its new key-index entries `new_keys`, numbered from
/// `first_index`. Add it to the sum before the block to get the sum after. `parallel` sums the
/// elements on rayon's pool (a follower with idle cores); the sequencer sums on its own
/// thread, beside the producer's.
pub fn lattice_delta<P: PriorState + ?Sized>(
    changes: &ChangeSet,
    prior: &P,
    first_index: u64,
    new_keys: &[StateKey],
    parallel: bool,
) -> Result<LatticeHash, StoreError> {
    lattice_delta_hashed(
        changes,
        &HashedKeys::of(changes),
        prior,
        first_index,
        new_keys,
        parallel,
    )
}

/// [`lattice_delta`] with the keys' keccak already computed (`hashed`, as the decoder gives
/// them), so that no key is hashed again. Hashes that do not fit `changes` are an error.
pub fn lattice_delta_hashed<P: PriorState + ?Sized>(
    changes: &ChangeSet,
    hashed: &HashedKeys,
    prior: &P,
    first_index: u64,
    new_keys: &[StateKey],
    parallel: bool,
) -> Result<LatticeHash, StoreError> {
    if !hashed.fits(changes) {
        return Err(StoreError::msg(format!(
            "{} account and {} slot hashes for a ChangeSet of {} accounts and {} slots",
            hashed.accounts().len(),
            hashed.slots().len(),
            changes.accounts().len(),
            changes.storage().len()
        )));
    }
    let mut elements: Vec<(bool, Element)> = Vec::with_capacity(
        2 * (changes.accounts().len() + changes.storage().len()) + new_keys.len(),
    );
    let mut wiped: Vec<Address> = Vec::new();
    for ((address, change), &hashed) in changes.accounts().iter().zip(hashed.accounts()) {
        if change.storage_wiped {
            wiped.push(*address);
        }
        let before = prior.account(address)?;
        if before == change.state {
            continue;
        }
        if let Some(before) = before {
            elements.push((false, Element::Account(hashed, before)));
        }
        if let Some(after) = change.state {
            elements.push((true, Element::Account(hashed, after)));
        }
    }
    for ((address, slot, value), &(hashed_address, hashed_slot)) in
        changes.storage().iter().zip(hashed.slots())
    {
        // `wiped` is in address order, as the ChangeSet's accounts are.
        let before = if wiped.binary_search(address).is_ok() {
            U256::ZERO
        } else {
            prior.slot(address, slot)?
        };
        if before == *value {
            continue;
        }
        if !before.is_zero() {
            elements.push((false, Element::Slot(hashed_address, hashed_slot, before)));
        }
        if !value.is_zero() {
            elements.push((true, Element::Slot(hashed_address, hashed_slot, *value)));
        }
    }
    for (i, key) in new_keys.iter().enumerate() {
        elements.push((true, Element::Key(first_index + i as u64, *key)));
    }
    let fold = |mut sum: LatticeHash, (add, element): &(bool, Element)| {
        element.apply(&mut sum, *add);
        sum
    };
    if parallel && elements.len() >= PARALLEL_FROM {
        use rayon::prelude::*;
        Ok(elements.par_iter().fold(LatticeHash::zero, fold).reduce(
            LatticeHash::zero,
            |mut a, b| {
                a.add(&b);
                a
            },
        ))
    } else {
        Ok(elements.iter().fold(LatticeHash::zero(), fold))
    }
}

/// The elements of key-index entries `from..to` of `index`, summed from scratch (a check of
/// a kept sum, or a snapshot's index part).
pub fn index_lattice<I: KeyIndex + ?Sized>(
    index: &I,
    from: u64,
    to: u64,
) -> Result<LatticeHash, StoreError> {
    let mut keys = Vec::with_capacity(usize::try_from(to.saturating_sub(from)).unwrap_or(0));
    for i in from..to {
        keys.push(
            index
                .key_at(i)?
                .ok_or_else(|| StoreError::msg(format!("the key index has no entry {i}")))?,
        );
    }
    lattice_delta(
        &ChangeSet::default(),
        &crate::PriorValues::default(),
        from,
        &keys,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prior::{MemoryState, PriorValues};
    use alloy_primitives::{address, KECCAK256_EMPTY};
    use gigas_primitives::ChangeSetBuilder;

    fn state(nonce: u64, balance: u64) -> AccountState {
        AccountState {
            nonce,
            balance: U256::from(balance),
            code_hash: KECCAK256_EMPTY,
        }
    }

    /// The lattice of a whole state, from scratch.
    fn full(state: &MemoryState, keys: &[StateKey]) -> LatticeHash {
        let mut sum = state.lattice();
        for (i, key) in keys.iter().enumerate() {
            // Built whole, apart from the in-place path the delta takes.
            sum.add(&match key {
                StateKey::Account(a) => LatticeHash::index_entry(i as u64, a, None),
                StateKey::Slot(a, s) => LatticeHash::index_entry(i as u64, a, Some(s)),
            });
        }
        sum
    }

    #[test]
    fn a_delta_takes_the_sum_to_the_sum_of_the_state_after() {
        let a = address!("1000000000000000000000000000000000000001");
        let b = address!("2000000000000000000000000000000000000002");
        let c = address!("3000000000000000000000000000000000000003");
        let mut before = MemoryState::new();
        before.insert_account(a, state(1, 100));
        before.insert_account(b, state(0, 5));
        before.insert_slot(b, U256::from(1), U256::from(11));
        before.insert_slot(b, U256::from(2), U256::from(22));
        let keys = vec![
            StateKey::Account(a),
            StateKey::Account(b),
            StateKey::Slot(b, U256::from(1)),
            StateKey::Slot(b, U256::from(2)),
        ];
        let sum_before = full(&before, &keys);

        // a pays c (new), b's slot 1 changes, slot 2 is cleared, slot 3 is new; a's nonce.
        let mut builder = ChangeSetBuilder::new();
        builder.account(a, state(2, 60), false);
        builder.account(c, state(0, 40), false);
        builder.slot(b, U256::from(1), U256::from(12));
        builder.slot(b, U256::from(2), U256::ZERO);
        builder.slot(b, U256::from(3), U256::from(33));
        let changes = builder.build();
        let new_keys = vec![StateKey::Account(c), StateKey::Slot(b, U256::from(3))];

        for source in [0, 1] {
            for parallel in [false, true] {
                let delta = if source == 0 {
                    lattice_delta(&changes, &before, keys.len() as u64, &new_keys, parallel)
                } else {
                    let prior = PriorValues::capture(&changes, &before).expect("captured");
                    lattice_delta(&changes, &prior, keys.len() as u64, &new_keys, parallel)
                }
                .expect("delta");
                let mut after = before.clone();
                after.apply(&changes);
                let all: Vec<StateKey> = keys.iter().chain(&new_keys).copied().collect();
                let mut sum = sum_before.clone();
                sum.add(&delta);
                assert_eq!(
                    sum,
                    full(&after, &all),
                    "source {source}, parallel {parallel}"
                );
            }
        }
    }

    #[test]
    fn a_missing_prior_value_is_an_error() {
        let a = address!("1000000000000000000000000000000000000001");
        let mut builder = ChangeSetBuilder::new();
        builder.account(a, state(1, 1), false);
        let changes = builder.build();
        let empty = PriorValues::default();
        assert!(lattice_delta(&changes, &empty, 0, &[], false).is_err());
    }

    #[test]
    fn the_signature_names_the_block_and_the_state() {
        use alloy_signer::SignerSync as _;
        let signer = alloy_signer_local::PrivateKeySigner::random();
        let block = B256::repeat_byte(1);
        let lattice = LatticeHash::account(
            &address!("1000000000000000000000000000000000000001"),
            &state(1, 1),
        )
        .checksum();
        let signature = signer
            .sign_hash_sync(&commitment_digest(&block, &lattice))
            .expect("signed");
        let c = StateCommitment { lattice, signature };
        assert_eq!(c.signer(&block), Some(signer.address()));
        assert_ne!(c.signer(&B256::repeat_byte(2)), Some(signer.address()));
        let other = StateCommitment {
            lattice: B256::repeat_byte(3),
            ..c
        };
        assert_ne!(other.signer(&block), Some(signer.address()));
    }
}

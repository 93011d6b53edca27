//! A lattice hash of the whole state: a commitment a sequencer can keep up to date at the cost
//! of the block's changes alone, and a snapshot can be checked against in any chunk order.
//!
//! The construction is LtHash as Solana adopted it (SIMD-0215): each element of the state
//! (an account, a nonzero storage slot) is hashed with BLAKE3 in extendable-output mode to
//! 2,048 bytes, read as 1,024 little-endian `u16` lanes, and the state's hash is the
//! lane-wise sum of its elements modulo 2^16. A change subtracts the old element and adds the
//! new one, so the sum after a block needs only the block's prior and new values, never a
//! walk of the state; and because addition commutes, the sum over a snapshot's chunks does
//! not depend on the order they arrive in. At 2,048 bytes the construction is estimated at
//! 128-bit security (Bellare and Micciancio's LtHash, sized as in SIMD-0215); a smaller lattice
//! would be cheaper and is not safe against Wagner's generalized-birthday attack.
//!
//! # Elements, version 1
//!
//! Each kind of element is hashed with its own BLAKE3 key, derived from a context string, so
//! an account's bytes can never be read as a slot's:
//!
//! | element | context | hashed bytes |
//! |---|---|---|
//! | account | `gigas 2026 lattice v1 account` | address (20), nonce (8, big-endian), balance (32), code hash (32) |
//! | slot | `gigas 2026 lattice v1 slot` | address (20), slot (32), value (32) |
//!
//! An account that does not exist and a slot holding zero are not elements: they add nothing,
//! so deleting one subtracts its element and leaves the sum as if it had never been written.
//! An existing account counts even when it is empty (no nonce, balance or code), which keeps
//! the set of elements that of the accounts stored. Code is not an element: it is stored by
//! its keccak, which checks itself, and the account's code hash commits to it.
//!
//! The 32-byte [`LatticeHash::checksum`] is BLAKE3 of the 2,048 bytes: the form a header or a
//! manifest carries.

use alloy_primitives::{Address, B256, U256};

use crate::changeset::AccountState;

/// Lanes of a lattice hash: 2,048 bytes of `u16`.
pub const LANES: usize = 1024;

const ACCOUNT_CONTEXT: &str = "gigas 2026 lattice v1 account";
const SLOT_CONTEXT: &str = "gigas 2026 lattice v1 slot";

/// A lattice hash: the lane-wise sum of the state's elements, modulo 2^16 per lane.
///
/// The zero value is the hash of the empty state. Sums and differences are exact and
/// order-free: `a + b - a == b` for any elements, in any order.
#[derive(Clone, PartialEq, Eq)]
pub struct LatticeHash {
    lanes: Box<[u16; LANES]>,
}

impl std::fmt::Debug for LatticeHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LatticeHash({})", self.checksum())
    }
}

impl Default for LatticeHash {
    fn default() -> Self {
        Self::zero()
    }
}

impl LatticeHash {
    /// The hash of the empty state.
    pub fn zero() -> Self {
        Self {
            lanes: Box::new([0; LANES]),
        }
    }

    /// The element of an account that exists with `state`.
    pub fn account(address: &Address, state: &AccountState) -> Self {
        let mut bytes = [0u8; 92];
        bytes[..20].copy_from_slice(address.as_slice());
        bytes[20..28].copy_from_slice(&state.nonce.to_be_bytes());
        bytes[28..60].copy_from_slice(&state.balance.to_be_bytes::<32>());
        bytes[60..].copy_from_slice(state.code_hash.as_slice());
        Self::element(ACCOUNT_CONTEXT, &bytes)
    }

    /// The element of a storage slot holding `value` (which should be nonzero: a zero slot
    /// is not an element, see [`LatticeHash::add_slot`]).
    pub fn slot(address: &Address, slot: &U256, value: &U256) -> Self {
        let mut bytes = [0u8; 84];
        bytes[..20].copy_from_slice(address.as_slice());
        bytes[20..52].copy_from_slice(&slot.to_be_bytes::<32>());
        bytes[52..].copy_from_slice(&value.to_be_bytes::<32>());
        Self::element(SLOT_CONTEXT, &bytes)
    }

    fn element(context: &str, bytes: &[u8]) -> Self {
        let mut out = [0u8; 2 * LANES];
        blake3::Hasher::new_derive_key(context)
            .update(bytes)
            .finalize_xof()
            .fill(&mut out);
        let mut lanes = Box::new([0u16; LANES]);
        for (lane, pair) in lanes.iter_mut().zip(out.chunks_exact(2)) {
            *lane = u16::from_le_bytes([pair[0], pair[1]]);
        }
        Self { lanes }
    }

    /// Adds `other` lane by lane.
    pub fn add(&mut self, other: &LatticeHash) {
        for (a, b) in self.lanes.iter_mut().zip(other.lanes.iter()) {
            *a = a.wrapping_add(*b);
        }
    }

    /// Subtracts `other` lane by lane.
    pub fn sub(&mut self, other: &LatticeHash) {
        for (a, b) in self.lanes.iter_mut().zip(other.lanes.iter()) {
            *a = a.wrapping_sub(*b);
        }
    }

    /// Moves an account from `before` to `after` (`None`: it does not exist).
    pub fn change_account(
        &mut self,
        address: &Address,
        before: Option<&AccountState>,
        after: Option<&AccountState>,
    ) {
        if before == after {
            return;
        }
        if let Some(before) = before {
            self.sub(&Self::account(address, before));
        }
        if let Some(after) = after {
            self.add(&Self::account(address, after));
        }
    }

    /// Moves a slot from `before` to `after` (zero: not an element).
    pub fn change_slot(&mut self, address: &Address, slot: &U256, before: &U256, after: &U256) {
        if before == after {
            return;
        }
        if !before.is_zero() {
            self.sub(&Self::slot(address, slot, before));
        }
        self.add_slot(address, slot, after);
    }

    /// Adds a slot holding `value`; a zero value adds nothing.
    pub fn add_slot(&mut self, address: &Address, slot: &U256, value: &U256) {
        if !value.is_zero() {
            self.add(&Self::slot(address, slot, value));
        }
    }

    /// The 2,048 bytes, lanes little-endian: how a lattice hash is stored and sent.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.lanes.iter().flat_map(|l| l.to_le_bytes()).collect()
    }

    /// Reads what [`LatticeHash::to_bytes`] wrote; `None` unless exactly 2,048 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != 2 * LANES {
            return None;
        }
        let mut lanes = Box::new([0u16; LANES]);
        for (lane, pair) in lanes.iter_mut().zip(bytes.chunks_exact(2)) {
            *lane = u16::from_le_bytes([pair[0], pair[1]]);
        }
        Some(Self { lanes })
    }

    /// BLAKE3 of the 2,048 bytes: the 32-byte form a header or a manifest carries.
    pub fn checksum(&self) -> B256 {
        B256::from(*blake3::hash(&self.to_bytes()).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{address, b256};

    fn state(nonce: u64, balance: u64) -> AccountState {
        AccountState {
            nonce,
            balance: U256::from(balance),
            code_hash: b256!("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"),
        }
    }

    #[test]
    fn the_sum_does_not_depend_on_order_and_undoes_exactly() {
        let a = address!("1000000000000000000000000000000000000001");
        let b = address!("2000000000000000000000000000000000000002");
        let mut one = LatticeHash::zero();
        one.change_account(&a, None, Some(&state(1, 10)));
        one.change_account(&b, None, Some(&state(0, 5)));
        one.add_slot(&a, &U256::from(7), &U256::from(9));
        let mut other = LatticeHash::zero();
        other.add_slot(&a, &U256::from(7), &U256::from(9));
        other.change_account(&b, None, Some(&state(0, 5)));
        other.change_account(&a, None, Some(&state(1, 10)));
        assert_eq!(one, other);
        assert_ne!(one, LatticeHash::zero());

        // Changing and changing back is the identity; deleting everything is the zero hash.
        let before = one.clone();
        one.change_account(&a, Some(&state(1, 10)), Some(&state(2, 3)));
        assert_ne!(one, before);
        one.change_account(&a, Some(&state(2, 3)), Some(&state(1, 10)));
        assert_eq!(one, before);
        one.change_slot(&a, &U256::from(7), &U256::from(9), &U256::ZERO);
        one.change_account(&a, Some(&state(1, 10)), None);
        one.change_account(&b, Some(&state(0, 5)), None);
        assert_eq!(one, LatticeHash::zero());
    }

    #[test]
    fn an_account_and_a_slot_with_the_same_bytes_differ() {
        let a = address!("1000000000000000000000000000000000000001");
        // The same address and word in both kinds: the derived keys keep them apart.
        let as_slot = LatticeHash::slot(&a, &U256::ZERO, &U256::from(1));
        let as_account = LatticeHash::account(&a, &state(0, 1));
        assert_ne!(as_slot, as_account);
        assert_ne!(
            LatticeHash::slot(&a, &U256::from(1), &U256::from(2)),
            LatticeHash::slot(&a, &U256::from(2), &U256::from(1)),
            "slot and value are not interchangeable"
        );
    }

    #[test]
    fn bytes_round_trip_and_the_checksum_names_the_state() {
        let a = address!("1000000000000000000000000000000000000001");
        let h = LatticeHash::account(&a, &state(3, 4));
        let bytes = h.to_bytes();
        assert_eq!(bytes.len(), 2048);
        assert_eq!(LatticeHash::from_bytes(&bytes), Some(h.clone()));
        assert_eq!(LatticeHash::from_bytes(&bytes[1..]), None);
        assert_ne!(h.checksum(), LatticeHash::zero().checksum());
        // Pinned: a change of construction must be a new version, not a silent change.
        assert_eq!(
            LatticeHash::zero().checksum(),
            B256::from(*blake3::hash(&[0u8; 2048]).as_bytes())
        );
    }
}

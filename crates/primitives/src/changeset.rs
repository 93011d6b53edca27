//! The [`ChangeSet`]: the canonical result of a block, and its byte encoding.
//!
//! Everything downstream of execution is derived from one ChangeSet per block: Vilmo's batch,
//! the state diff that full nodes apply, and the state trie the header's `stateRoot` is the
//! root of. So two
//! machines that executed the same block must produce the same bytes, whatever the executor
//! (sequential, Block-STM at any thread count, interpreter or JIT) and whatever order it
//! discovered the changes in. That is why a ChangeSet can only be made by
//! [`ChangeSetBuilder::build`], which sorts and de-duplicates, and why [`ChangeSet::decode`]
//! refuses any byte string that [`ChangeSet::encode`] would not produce.
//!
//! # Contents
//!
//! - **Accounts** whose nonce, balance or code hash changed, or that were destroyed, sorted by
//!   address. An account that existed before the block and was destroyed in it (and perhaps
//!   re-created at the same address afterwards) carries `storage_wiped`: its storage before
//!   the block is gone *as a whole*, whatever slots it held. Executors cannot enumerate the old
//!   slots (revm's database interface cannot), so the wipe is explicit and the consumer
//!   deletes them (MDBX's DUPSORT table can; Vilmo's layout keeps a slot count for it, see
//!   [`crate::state_keys`]). Creation alone needs an address without code, nonce or (since
//!   EIP-7610) storage, so it wipes nothing.
//! - **Storage slots** whose value changed, sorted by (address, slot). Zero means deleted. After
//!   a wipe, only slots written afterwards in the block are listed.
//! - **Bytecodes** first deployed in the block, by code hash, sorted by hash.
//!
//! # Encoding, version 1
//!
//! All integers little-endian; 32-byte words (balances, slots, values, hashes) big-endian as
//! the EVM writes them.
//!
//! | bytes | field |
//! |---:|---|
//! | 4 | magic `GCS` and the version byte `1` |
//! | 4 | number of accounts |
//! | per account | address (20), flags (1: bit 0 destroyed, bit 1 storage wiped; other bits zero), and unless destroyed: nonce (8), balance (32), code hash (32) |
//! | 4 | number of slots |
//! | per slot | address (20), slot (32), value (32) |
//! | 4 | number of bytecodes |
//! | per bytecode | code hash (32), length (4), code |
//!
//! Records are strictly increasing by their key (address; address then slot; hash), with no
//! duplicates, and nothing follows the last bytecode. A destroyed account always has
//! `storage_wiped` set. A bytecode's hash is the keccak-256 of its code.

use std::collections::BTreeMap;

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};

/// The magic bytes and version that open an encoded ChangeSet.
pub const CHANGESET_MAGIC: [u8; 4] = *b"GCS\x01";

const DESTROYED: u8 = 1;
const WIPED: u8 = 2;

/// An account's state after the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AccountState {
    /// The nonce.
    pub nonce: u64,
    /// The balance in wei.
    pub balance: U256,
    /// The keccak-256 of the account's code (`KECCAK_EMPTY` for none).
    pub code_hash: B256,
}

/// What happened to one account in the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AccountChange {
    /// The account's state after the block; `None` when it was destroyed.
    pub state: Option<AccountState>,
    /// Whether its storage from before the block was wiped (it was destroyed in the block).
    pub storage_wiped: bool,
}

/// The canonical, sorted result of a block. Build one with [`ChangeSetBuilder`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    accounts: Vec<(Address, AccountChange)>,
    storage: Vec<(Address, U256, U256)>,
    bytecodes: Vec<(B256, Bytes)>,
}

/// Why bytes are not an encoded ChangeSet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeSetError {
    /// The bytes do not start with the magic and a known version.
    #[error("not a ChangeSet of version 1 (bad magic or version)")]
    Version,
    /// The bytes end inside a record.
    #[error("truncated at byte {0}")]
    Truncated(usize),
    /// A record's key is not greater than the previous one.
    #[error("{what} at byte {at} is out of order or repeated")]
    Unsorted {
        /// Which list.
        what: &'static str,
        /// Offset of the record.
        at: usize,
    },
    /// Flags with unknown bits, or a destroyed account without its wipe.
    #[error("account at byte {0} has invalid flags")]
    Flags(usize),
    /// A bytecode whose hash is not the keccak-256 of its code.
    #[error("bytecode at byte {0} does not match its hash")]
    CodeHash(usize),
    /// Bytes after the last record.
    #[error("{0} bytes after the last record")]
    Trailing(usize),
}

impl ChangeSet {
    /// Accounts changed or destroyed, sorted by address.
    pub fn accounts(&self) -> &[(Address, AccountChange)] {
        &self.accounts
    }

    /// Storage slots changed `(address, slot, value)`, sorted by address then slot; zero means
    /// deleted.
    pub fn storage(&self) -> &[(Address, U256, U256)] {
        &self.storage
    }

    /// Bytecodes deployed in the block, sorted by code hash.
    pub fn bytecodes(&self) -> &[(B256, Bytes)] {
        &self.bytecodes
    }

    /// Whether the block changed nothing.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty() && self.storage.is_empty() && self.bytecodes.is_empty()
    }

    /// The length of [`ChangeSet::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        let accounts: usize = self
            .accounts
            .iter()
            .map(|(_, c)| 21 + if c.state.is_some() { 72 } else { 0 })
            .sum();
        let code: usize = self.bytecodes.iter().map(|(_, c)| 36 + c.len()).sum();
        4 + 12 + accounts + self.storage.len() * 84 + code
    }

    /// The canonical bytes (see the module documentation).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&CHANGESET_MAGIC);
        out.extend_from_slice(&(self.accounts.len() as u32).to_le_bytes());
        for (address, change) in &self.accounts {
            out.extend_from_slice(address.as_slice());
            let mut flags = 0u8;
            if change.state.is_none() {
                flags |= DESTROYED;
            }
            if change.storage_wiped {
                flags |= WIPED;
            }
            out.push(flags);
            if let Some(state) = &change.state {
                out.extend_from_slice(&state.nonce.to_le_bytes());
                out.extend_from_slice(&state.balance.to_be_bytes::<32>());
                out.extend_from_slice(state.code_hash.as_slice());
            }
        }
        out.extend_from_slice(&(self.storage.len() as u32).to_le_bytes());
        for (address, slot, value) in &self.storage {
            out.extend_from_slice(address.as_slice());
            out.extend_from_slice(&slot.to_be_bytes::<32>());
            out.extend_from_slice(&value.to_be_bytes::<32>());
        }
        out.extend_from_slice(&(self.bytecodes.len() as u32).to_le_bytes());
        for (hash, code) in &self.bytecodes {
            out.extend_from_slice(hash.as_slice());
            out.extend_from_slice(&(code.len() as u32).to_le_bytes());
            out.extend_from_slice(code);
        }
        out
    }

    /// Decodes canonical bytes; anything [`ChangeSet::encode`] would not produce is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, ChangeSetError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != CHANGESET_MAGIC {
            return Err(ChangeSetError::Version);
        }
        let mut set = ChangeSet::default();
        // Counts come from the input: reserve no more than the bytes could hold.
        let n = r.u32()? as usize;
        set.accounts.reserve(n.min(bytes.len() / 21));
        for _ in 0..n {
            let at = r.at;
            let address = Address::from_slice(r.take(20)?);
            let flags = r.take(1)?[0];
            if flags & !(DESTROYED | WIPED) != 0 || (flags & DESTROYED != 0 && flags & WIPED == 0) {
                return Err(ChangeSetError::Flags(at));
            }
            let state = if flags & DESTROYED == 0 {
                Some(AccountState {
                    nonce: u64::from_le_bytes(r.array::<8>()?),
                    balance: U256::from_be_bytes(r.array::<32>()?),
                    code_hash: B256::from(r.array::<32>()?),
                })
            } else {
                None
            };
            if set.accounts.last().is_some_and(|(a, _)| *a >= address) {
                return Err(ChangeSetError::Unsorted {
                    what: "account",
                    at,
                });
            }
            set.accounts.push((
                address,
                AccountChange {
                    state,
                    storage_wiped: flags & WIPED != 0,
                },
            ));
        }
        let n = r.u32()? as usize;
        set.storage.reserve(n.min(bytes.len() / 84));
        for _ in 0..n {
            let at = r.at;
            let address = Address::from_slice(r.take(20)?);
            let slot = U256::from_be_bytes(r.array::<32>()?);
            let value = U256::from_be_bytes(r.array::<32>()?);
            if set
                .storage
                .last()
                .is_some_and(|(a, s, _)| (*a, *s) >= (address, slot))
            {
                return Err(ChangeSetError::Unsorted { what: "slot", at });
            }
            set.storage.push((address, slot, value));
        }
        let n = r.u32()? as usize;
        set.bytecodes.reserve(n.min(bytes.len() / 36));
        for _ in 0..n {
            let at = r.at;
            let hash = B256::from(r.array::<32>()?);
            let len = r.u32()? as usize;
            let code = r.take(len)?;
            if keccak256(code) != hash {
                return Err(ChangeSetError::CodeHash(at));
            }
            if set.bytecodes.last().is_some_and(|(h, _)| *h >= hash) {
                return Err(ChangeSetError::Unsorted {
                    what: "bytecode",
                    at,
                });
            }
            set.bytecodes.push((hash, Bytes::copy_from_slice(code)));
        }
        if r.at != bytes.len() {
            return Err(ChangeSetError::Trailing(bytes.len() - r.at));
        }
        Ok(set)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ChangeSetError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(ChangeSetError::Truncated(self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ChangeSetError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, ChangeSetError> {
        Ok(u32::from_le_bytes(self.array::<4>()?))
    }
}

/// Collects a block's changes in any order; [`ChangeSetBuilder::build`] makes the canonical
/// [`ChangeSet`]. A later change of the same key replaces an earlier one.
#[derive(Debug, Clone, Default)]
pub struct ChangeSetBuilder {
    accounts: BTreeMap<Address, AccountChange>,
    storage: BTreeMap<(Address, U256), U256>,
    bytecodes: BTreeMap<B256, Bytes>,
}

impl ChangeSetBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the account's state after the block. `storage_wiped` when its storage from
    /// before the block is gone (a wipe recorded earlier for the address stays).
    pub fn account(&mut self, address: Address, state: AccountState, storage_wiped: bool) {
        let wiped = storage_wiped || self.accounts.get(&address).is_some_and(|c| c.storage_wiped);
        self.accounts.insert(
            address,
            AccountChange {
                state: Some(state),
                storage_wiped: wiped,
            },
        );
    }

    /// Records that the account was destroyed: its state and its old storage are gone, and so
    /// are slots recorded for it so far.
    pub fn destroyed(&mut self, address: Address) {
        self.accounts.insert(
            address,
            AccountChange {
                state: None,
                storage_wiped: true,
            },
        );
        let slots: Vec<(Address, U256)> = self
            .storage
            .range((address, U256::ZERO)..=(address, U256::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in slots {
            self.storage.remove(&key);
        }
    }

    /// Records a slot's value after the block (zero: deleted).
    pub fn slot(&mut self, address: Address, slot: U256, value: U256) {
        self.storage.insert((address, slot), value);
    }

    /// Records a bytecode deployed in the block; its hash is computed here.
    pub fn bytecode(&mut self, code: Bytes) {
        self.bytecodes.insert(keccak256(&code), code);
    }

    /// The canonical ChangeSet.
    pub fn build(self) -> ChangeSet {
        ChangeSet {
            accounts: self.accounts.into_iter().collect(),
            storage: self
                .storage
                .into_iter()
                .map(|((a, s), v)| (a, s, v))
                .collect(),
            bytecodes: self.bytecodes.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(i: u8) -> Address {
        Address::repeat_byte(i)
    }

    fn state(n: u64) -> AccountState {
        AccountState {
            nonce: n,
            balance: U256::from(n) << 100,
            code_hash: B256::repeat_byte(n as u8),
        }
    }

    fn sample(order: &[usize]) -> ChangeSet {
        type Op = Box<dyn Fn(&mut ChangeSetBuilder)>;
        let ops: Vec<Op> = vec![
            Box::new(|b| b.account(address(3), state(1), false)),
            Box::new(|b| b.account(address(1), state(7), true)),
            Box::new(|b| b.destroyed(address(9))),
            Box::new(|b| b.slot(address(1), U256::from(5), U256::from(6))),
            Box::new(|b| b.slot(address(1), U256::from(2), U256::ZERO)),
            Box::new(|b| b.slot(address(3), U256::MAX, U256::from(1))),
            Box::new(|b| b.bytecode(Bytes::from_static(&[0x60, 0x00, 0xf3]))),
            Box::new(|b| b.bytecode(Bytes::from_static(&[0x00]))),
        ];
        let mut builder = ChangeSetBuilder::new();
        for &i in order {
            ops[i](&mut builder);
        }
        builder.build()
    }

    #[test]
    fn the_bytes_do_not_depend_on_the_order_changes_were_found() {
        let a = sample(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let b = sample(&[7, 5, 3, 1, 6, 4, 2, 0]);
        assert_eq!(a, b);
        assert_eq!(a.encode(), b.encode());
        assert_eq!(a.encode().len(), a.encoded_len());
    }

    #[test]
    fn round_trips() {
        let set = sample(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let bytes = set.encode();
        assert_eq!(ChangeSet::decode(&bytes), Ok(set.clone()));
        assert_eq!(set.accounts().len(), 3);
        assert_eq!(set.storage().len(), 3);
        assert_eq!(set.bytecodes().len(), 2);
        let empty = ChangeSet::default();
        assert!(empty.is_empty());
        assert_eq!(ChangeSet::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn destroying_an_account_drops_its_slots_and_wipes_its_storage() {
        let mut b = ChangeSetBuilder::new();
        b.slot(address(2), U256::from(1), U256::from(1));
        b.slot(address(4), U256::from(1), U256::from(1));
        b.destroyed(address(2));
        // Re-created later in the block: the wipe stays.
        b.account(address(2), state(1), false);
        b.slot(address(2), U256::from(3), U256::from(3));
        let set = b.build();
        assert_eq!(
            set.accounts(),
            &[(
                address(2),
                AccountChange {
                    state: Some(state(1)),
                    storage_wiped: true
                }
            )]
        );
        assert_eq!(
            set.storage(),
            &[
                (address(2), U256::from(3), U256::from(3)),
                (address(4), U256::from(1), U256::from(1))
            ]
        );
    }

    #[test]
    fn decode_refuses_every_non_canonical_form() {
        let set = sample(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let bytes = set.encode();
        // Every strict prefix is truncated (or, for the empty prefix, has no magic).
        for len in 0..bytes.len() {
            assert!(ChangeSet::decode(&bytes[..len]).is_err(), "prefix {len}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(
            ChangeSet::decode(&trailing),
            Err(ChangeSetError::Trailing(1))
        );
        let mut version = bytes.clone();
        version[3] = 2;
        assert_eq!(ChangeSet::decode(&version), Err(ChangeSetError::Version));
        // Swap the first two accounts: out of order.
        let mut swapped = set.clone();
        swapped.accounts.swap(0, 1);
        assert!(matches!(
            ChangeSet::decode(&swapped.encode()),
            Err(ChangeSetError::Unsorted {
                what: "account",
                ..
            })
        ));
        let mut repeated = set.clone();
        let first = repeated.storage[0];
        repeated.storage.insert(0, first);
        assert!(matches!(
            ChangeSet::decode(&repeated.encode()),
            Err(ChangeSetError::Unsorted { what: "slot", .. })
        ));
        let mut code = set.clone();
        code.bytecodes[0].1 = Bytes::from_static(&[0xfe]);
        assert!(matches!(
            ChangeSet::decode(&code.encode()),
            Err(ChangeSetError::CodeHash(_))
        ));
        let mut flags = bytes.clone();
        flags[4 + 4 + 20] = 0x80;
        assert!(matches!(
            ChangeSet::decode(&flags),
            Err(ChangeSetError::Flags(_))
        ));
        // A huge count in a short input fails without reserving memory for it.
        let mut huge = CHANGESET_MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            ChangeSet::decode(&huge),
            Err(ChangeSetError::Truncated(_))
        ));
    }

    /// The encoding is part of the protocol (checksums and diffs are computed over it): any
    /// change to it must change this digest and the version.
    #[test]
    fn the_encoding_of_version_1_is_stable() {
        let bytes = sample(&[0, 1, 2, 3, 4, 5, 6, 7]).encode();
        assert_eq!(&bytes[..4], b"GCS\x01");
        assert_eq!(
            bytes.len(),
            4 + 12 + 3 * 21 + 2 * 72 + 3 * 84 + (36 + 3) + (36 + 1)
        );
        assert_eq!(keccak256(&bytes), STABLE_DIGEST);
    }

    const STABLE_DIGEST: B256 =
        alloy_primitives::b256!("1c24206046649a2a0c6cf063dc2f80729d5a8b4cdf5898c1755db581af761e70");
}

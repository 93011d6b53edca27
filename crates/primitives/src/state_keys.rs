//! How state is laid out in a key-value store (Vilmo), and how a [`ChangeSet`] becomes the
//! writes of one batch.
//!
//! The layout is the contract between the sequencer, which writes a batch per block, and
//! anything that reads the store or syncs it from the logs: the state after block N is the
//! state before block 1 written with [`genesis_writes`] plus, block by block, the writes
//! [`changeset_writes`] makes of each block's ChangeSet.
//!
//! # Keys and values
//!
//! | key | bytes | value |
//! |---|---:|---|
//! | `a` ‖ address | 21 | account: nonce (8, little-endian) ‖ balance (32, big-endian) ‖ code hash (32) ‖ number of stored slots (8, little-endian); 80 bytes |
//! | `s` ‖ address ‖ slot (32, big-endian) | 53 | the slot's value, 32 bytes big-endian, never zero (a zero slot is deleted) |
//! | `c` ‖ code hash | 33 | the bytecode |
//!
//! An account that does not exist has no `a` key and no `s` keys. Bytecodes are never
//! deleted (several accounts may share one, and a destroyed contract's code may return).
//!
//! # Why the slot count
//!
//! A ChangeSet wipes a destroyed account's storage as a whole, without listing the slots,
//! because an executor cannot enumerate them. A hash-indexed store cannot enumerate them
//! cheaply either. The count, kept exact by every write, says whether there is anything to
//! wipe; only then are the account's slot keys looked for ([`StateReader::keys_with_prefix`],
//! a scan). Since Cancun (EIP-6780) only an account created in the same transaction can be
//! destroyed, so on a rollup the count is always zero when a wipe comes and no scan ever runs;
//! replaying older mainnet blocks can scan.

use alloy_primitives::{Address, B256, U256};

use crate::changeset::{AccountState, ChangeSet};

/// First byte of an account key.
pub const ACCOUNT_PREFIX: u8 = b'a';
/// First byte of a storage slot key.
pub const SLOT_PREFIX: u8 = b's';
/// First byte of a bytecode key.
pub const CODE_PREFIX: u8 = b'c';
/// Length of an encoded account value.
pub const ACCOUNT_VALUE_LEN: usize = 80;

/// `prefix` followed by `address`.
fn address_key(prefix: u8, address: &Address) -> [u8; 21] {
    let mut key = [0u8; 21];
    key[0] = prefix;
    key[1..].copy_from_slice(address.as_slice());
    key
}

/// The key of `address`'s account.
pub fn account_key(address: &Address) -> [u8; 21] {
    address_key(ACCOUNT_PREFIX, address)
}

/// The prefix of every slot key of `address`.
pub fn slot_prefix(address: &Address) -> [u8; 21] {
    address_key(SLOT_PREFIX, address)
}

/// The key of `address`'s storage `slot`.
pub fn slot_key(address: &Address, slot: &U256) -> [u8; 53] {
    let mut key = [0u8; 53];
    key[..21].copy_from_slice(&slot_prefix(address));
    key[21..].copy_from_slice(&slot.to_be_bytes::<32>());
    key
}

/// The key of the bytecode whose keccak-256 is `hash`.
pub fn code_key(hash: &B256) -> [u8; 33] {
    let mut key = [0u8; 33];
    key[0] = CODE_PREFIX;
    key[1..].copy_from_slice(hash.as_slice());
    key
}

/// A stored account: its state and how many slots it has stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredAccount {
    /// Nonce, balance and code hash.
    pub state: AccountState,
    /// Number of `s` keys under the account.
    pub slots: u64,
}

impl StoredAccount {
    /// The value bytes.
    pub fn encode(&self) -> [u8; ACCOUNT_VALUE_LEN] {
        let mut out = [0u8; ACCOUNT_VALUE_LEN];
        out[..8].copy_from_slice(&self.state.nonce.to_le_bytes());
        out[8..40].copy_from_slice(&self.state.balance.to_be_bytes::<32>());
        out[40..72].copy_from_slice(self.state.code_hash.as_slice());
        out[72..].copy_from_slice(&self.slots.to_le_bytes());
        out
    }

    /// Reads a value written by [`Self::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, LayoutError> {
        if bytes.len() != ACCOUNT_VALUE_LEN {
            return Err(LayoutError::AccountValue(bytes.len()));
        }
        let word = |range: std::ops::Range<usize>| {
            let mut out = [0u8; 32];
            out.copy_from_slice(&bytes[range]);
            out
        };
        let mut nonce = [0u8; 8];
        nonce.copy_from_slice(&bytes[..8]);
        let mut slots = [0u8; 8];
        slots.copy_from_slice(&bytes[72..]);
        Ok(Self {
            state: AccountState {
                nonce: u64::from_le_bytes(nonce),
                balance: U256::from_be_bytes(word(8..40)),
                code_hash: B256::from(word(40..72)),
            },
            slots: u64::from_le_bytes(slots),
        })
    }
}

/// Decodes a slot value (32 bytes, big-endian).
pub fn decode_slot(bytes: &[u8]) -> Result<U256, LayoutError> {
    let word: [u8; 32] = bytes
        .try_into()
        .map_err(|_| LayoutError::SlotValue(bytes.len()))?;
    Ok(U256::from_be_bytes(word))
}

/// A stored value that does not follow the layout: the store is corrupt or not a state store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// An account value of the wrong length.
    #[error("an account value is {0} bytes, not {ACCOUNT_VALUE_LEN}")]
    AccountValue(usize),
    /// A slot value of the wrong length.
    #[error("a slot value is {0} bytes, not 32")]
    SlotValue(usize),
    /// Slots written for an account that does not exist after the block.
    #[error("the ChangeSet writes slots of {0}, which does not exist after the block")]
    SlotsWithoutAccount(Address),
    /// A slot count that the writes would take below zero.
    #[error("account {0} stores fewer slots than the ChangeSet deletes")]
    SlotCount(Address),
    /// A key that is none of the layout's: not an account, slot or code key of its length.
    #[error("a key of {len} bytes starting with {first:#04x} is not an account, slot or code key")]
    Key {
        /// Its first byte.
        first: u8,
        /// Its length.
        len: usize,
    },
}

/// A stored entry as the layout reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateEntry {
    /// An account.
    Account(Address, StoredAccount),
    /// A non-zero storage slot: address, slot, value.
    Slot(Address, U256, U256),
    /// A bytecode, by its hash.
    Code(B256),
}

/// Reads one stored key and value of the layout.
pub fn decode_entry(key: &[u8], value: &[u8]) -> Result<StateEntry, LayoutError> {
    let address = || Address::from_slice(&key[1..21]);
    match (key.first(), key.len()) {
        (Some(&ACCOUNT_PREFIX), 21) => Ok(StateEntry::Account(
            address(),
            StoredAccount::decode(value)?,
        )),
        (Some(&SLOT_PREFIX), 53) => Ok(StateEntry::Slot(
            address(),
            U256::from_be_slice(&key[21..]),
            decode_slot(value)?,
        )),
        (Some(&CODE_PREFIX), 33) => Ok(StateEntry::Code(B256::from_slice(&key[1..]))),
        (first, len) => Err(LayoutError::Key {
            first: first.copied().unwrap_or(0),
            len,
        }),
    }
}

/// One write of a batch: put `key` to `Some(value)`, or delete it.
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// The committed state the writes of a block are computed against.
pub trait StateReader {
    /// The reader's error.
    type Error: From<LayoutError>;

    /// The value of `key`, if stored.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Self::Error>;

    /// Every stored key that starts with `prefix`. Only called to wipe an account whose
    /// slot count is not zero (see the module documentation).
    fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Self::Error>;
}

/// The writes that take the state before the first block: every account with its slots
/// (zero slots are skipped) and every bytecode.
pub fn genesis_writes<'a>(
    accounts: impl IntoIterator<Item = (Address, AccountState, Vec<(U256, U256)>)>,
    codes: impl IntoIterator<Item = (B256, &'a [u8])>,
) -> Vec<Write> {
    let mut writes = Vec::new();
    for (address, state, storage) in accounts {
        let mut slots = 0;
        for (slot, value) in storage {
            if !value.is_zero() {
                slots += 1;
                writes.push((
                    slot_key(&address, &slot).to_vec(),
                    Some(value.to_be_bytes::<32>().to_vec()),
                ));
            }
        }
        writes.push((
            account_key(&address).to_vec(),
            Some(StoredAccount { state, slots }.encode().to_vec()),
        ));
    }
    for (hash, code) in codes {
        writes.push((code_key(&hash).to_vec(), Some(code.to_vec())));
    }
    writes
}

/// The writes that apply `changes` to the state `reader` holds (the state after the previous
/// block), in the order of the ChangeSet. Reads each changed slot's old value and each
/// touched account's record, to keep slot counts exact.
pub fn changeset_writes<R: StateReader>(
    changes: &ChangeSet,
    reader: &R,
) -> Result<Vec<Write>, R::Error> {
    let mut writes = Vec::with_capacity(changes.accounts().len() + changes.storage().len());
    let stored = |address: &Address| -> Result<Option<StoredAccount>, R::Error> {
        match reader.get(&account_key(address))? {
            Some(bytes) => Ok(Some(StoredAccount::decode(&bytes)?)),
            None => Ok(None),
        }
    };
    let wipe = |address: &Address, old: Option<StoredAccount>, writes: &mut Vec<Write>| {
        if old.is_some_and(|o| o.slots > 0) {
            for key in reader.keys_with_prefix(&slot_prefix(address))? {
                writes.push((key, None));
            }
        }
        Ok::<(), R::Error>(())
    };
    // Accounts and slots are both sorted by address: walk them together, one address at a
    // time, so that each account's record is written once with its final slot count.
    let accounts = changes.accounts();
    let storage = changes.storage();
    let (mut a, mut s) = (0, 0);
    while a < accounts.len() || s < storage.len() {
        let address = match (accounts.get(a), storage.get(s)) {
            (Some((x, _)), Some((y, _, _))) => *x.min(y),
            (Some((x, _)), None) => *x,
            (None, Some((y, _, _))) => *y,
            (None, None) => break,
        };
        let old = stored(&address)?;
        let change = accounts
            .get(a)
            .filter(|(x, _)| *x == address)
            .map(|(_, c)| *c);
        if change.is_some() {
            a += 1;
        }
        let slots_end = s + storage[s..]
            .iter()
            .take_while(|(x, _, _)| *x == address)
            .count();
        let slot_writes = &storage[s..slots_end];
        s = slots_end;

        let wiped = change.is_some_and(|c| c.storage_wiped);
        if wiped {
            wipe(&address, old, &mut writes)?;
        }
        let state = match (change, old) {
            (Some(change), _) => change.state,
            (None, Some(old)) => Some(old.state),
            (None, None) => return Err(LayoutError::SlotsWithoutAccount(address).into()),
        };
        let Some(state) = state else {
            // Destroyed: the wipe above removed its slots, and it cannot have new ones.
            if !slot_writes.is_empty() {
                return Err(LayoutError::SlotsWithoutAccount(address).into());
            }
            if old.is_some() {
                writes.push((account_key(&address).to_vec(), None));
            }
            continue;
        };
        let mut count = if wiped { 0 } else { old.map_or(0, |o| o.slots) };
        for (_, slot, value) in slot_writes {
            let key = slot_key(&address, slot);
            let existed = !wiped && reader.get(&key)?.is_some();
            if value.is_zero() {
                if existed {
                    count = count
                        .checked_sub(1)
                        .ok_or(LayoutError::SlotCount(address))?;
                    writes.push((key.to_vec(), None));
                }
            } else {
                count += u64::from(!existed);
                writes.push((key.to_vec(), Some(value.to_be_bytes::<32>().to_vec())));
            }
        }
        let record = StoredAccount {
            state,
            slots: count,
        };
        if old != Some(record) {
            writes.push((
                account_key(&address).to_vec(),
                Some(record.encode().to_vec()),
            ));
        }
    }
    for (hash, code) in changes.bytecodes() {
        let key = code_key(hash);
        if reader.get(&key)?.is_none() {
            writes.push((key.to_vec(), Some(code.to_vec())));
        }
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changeset::ChangeSetBuilder;
    use std::collections::BTreeMap;

    #[test]
    fn entries_read_back_as_written_and_foreign_keys_are_refused() {
        let who = Address::repeat_byte(7);
        let stored = StoredAccount {
            state: AccountState {
                nonce: 3,
                balance: U256::from(9),
                code_hash: B256::repeat_byte(1),
            },
            slots: 2,
        };
        assert_eq!(
            decode_entry(&account_key(&who), &stored.encode()),
            Ok(StateEntry::Account(who, stored))
        );
        let slot = U256::from(0x1234);
        let value = U256::from(5).to_be_bytes::<32>();
        assert_eq!(
            decode_entry(&slot_key(&who, &slot), &value),
            Ok(StateEntry::Slot(who, slot, U256::from(5)))
        );
        let hash = B256::repeat_byte(2);
        assert_eq!(
            decode_entry(&code_key(&hash), b"code"),
            Ok(StateEntry::Code(hash))
        );
        assert_eq!(
            decode_entry(b"x123", b""),
            Err(LayoutError::Key {
                first: b'x',
                len: 4
            })
        );
        // The right prefix at the wrong length is not that kind of key.
        assert!(decode_entry(&account_key(&who)[..20], &stored.encode()).is_err());
        assert!(decode_entry(&account_key(&who), &[0u8; 79]).is_err());
    }

    /// A store in a map, counting prefix scans.
    #[derive(Default)]
    struct Map {
        kv: BTreeMap<Vec<u8>, Vec<u8>>,
        scans: std::cell::Cell<usize>,
    }

    impl StateReader for Map {
        type Error = LayoutError;
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LayoutError> {
            Ok(self.kv.get(key).cloned())
        }
        fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, LayoutError> {
            self.scans.set(self.scans.get() + 1);
            Ok(self
                .kv
                .keys()
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect())
        }
    }

    impl Map {
        fn apply(&mut self, writes: Vec<Write>) {
            for (k, v) in writes {
                match v {
                    Some(v) => self.kv.insert(k, v),
                    None => self.kv.remove(&k),
                };
            }
        }
        fn account(&self, a: &Address) -> Option<StoredAccount> {
            self.kv
                .get(&account_key(a)[..])
                .map(|v| StoredAccount::decode(v).expect("account"))
        }
    }

    fn state(nonce: u64) -> AccountState {
        AccountState {
            nonce,
            balance: U256::from(nonce * 10),
            code_hash: B256::repeat_byte(nonce as u8),
        }
    }

    #[test]
    fn account_values_round_trip_and_bad_lengths_are_refused() {
        let record = StoredAccount {
            state: state(7),
            slots: 3,
        };
        assert_eq!(StoredAccount::decode(&record.encode()), Ok(record));
        assert_eq!(
            StoredAccount::decode(&[0; 79]),
            Err(LayoutError::AccountValue(79))
        );
        assert_eq!(decode_slot(&[1; 31]), Err(LayoutError::SlotValue(31)));
    }

    #[test]
    fn slot_counts_follow_writes_and_wipes_scan_only_when_slots_exist() {
        let (a, b) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let mut map = Map::default();
        map.apply(genesis_writes(
            [
                (
                    a,
                    state(1),
                    vec![(U256::from(1), U256::from(5)), (U256::from(2), U256::ZERO)],
                ),
                (b, state(2), vec![]),
            ],
            [],
        ));
        assert_eq!(map.account(&a).map(|r| r.slots), Some(1));

        // A new slot, a deleted one, and a storage-only change of `a`.
        let mut builder = ChangeSetBuilder::new();
        builder.slot(a, U256::from(1), U256::ZERO);
        builder.slot(a, U256::from(3), U256::from(9));
        builder.slot(a, U256::from(4), U256::from(9));
        let writes = changeset_writes(&builder.build(), &map).expect("writes");
        map.apply(writes);
        assert_eq!(
            map.account(&a).map(|r| (r.state, r.slots)),
            Some((state(1), 2))
        );

        // Destroying `b`, which has no slots, needs no scan; destroying `a` scans once.
        let mut builder = ChangeSetBuilder::new();
        builder.destroyed(b);
        map.apply(changeset_writes(&builder.build(), &map).expect("writes"));
        assert_eq!(map.scans.get(), 0);
        assert!(map.account(&b).is_none());
        let mut builder = ChangeSetBuilder::new();
        builder.destroyed(a);
        builder.account(a, state(9), true);
        builder.slot(a, U256::from(8), U256::from(1));
        map.apply(changeset_writes(&builder.build(), &map).expect("writes"));
        assert_eq!(map.scans.get(), 1);
        assert_eq!(
            map.account(&a).map(|r| (r.state, r.slots)),
            Some((state(9), 1))
        );
        assert_eq!(
            map.kv.keys().filter(|k| k[0] == SLOT_PREFIX).count(),
            1,
            "only the slot written after the re-creation is left"
        );

        // Slots of an account that does not exist are refused, not dropped.
        let mut builder = ChangeSetBuilder::new();
        builder.slot(b, U256::from(1), U256::from(1));
        assert_eq!(
            changeset_writes(&builder.build(), &map),
            Err(LayoutError::SlotsWithoutAccount(b))
        );
    }
}

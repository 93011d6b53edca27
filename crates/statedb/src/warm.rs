//! Warming the pages a block will touch, ahead of applying it ([`StateView::warm`]).
//!
//! A follower knows every key a block changes before it applies the block. Reading them
//! through a view on another thread brings their pages into the page cache while the
//! writer is busy with the block before: the hashed leaves the decode and the
//! writes find, and the stored trie nodes on each key's path that the root walks. Under a
//! memory limit those reads are page faults; taken here they no longer stall the writer.
//! With everything cached already it only costs a core some B-tree searches.

use std::borrow::Cow;

use alloy_primitives::{keccak256, B256};
use alloy_trie::Nibbles;
use gigas_mdbx::StoreError as _;
use gigas_statediff::StateKey;
use signet_libmdbx::{Cursor, Ro};

use crate::codec;
use crate::error::StateDbError;
use crate::view::StateView;
use gigas_triedb::TrieTable;

/// Levels of a key's trie path sought: the upper ones are hot anyway, and over 10M
/// accounts the account trie's stored nodes end about seven nibbles down.
const ACCOUNT_PATH_NIBBLES: usize = 8;
/// Storage tries are small: a few levels cover them.
const STORAGE_PATH_NIBBLES: usize = 4;

/// A row read and dropped (borrowed from the map, so nothing is copied).
type Row<'tx> = Option<(Cow<'tx, [u8]>, Cow<'tx, [u8]>)>;

/// What [`StateView::warm`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Warmed {
    /// Accounts whose leaves and trie path were read.
    pub accounts: u64,
    /// Slots likewise.
    pub slots: u64,
}

fn cursor<'tx>(
    view: &'tx StateView<'_>,
    table: TrieTable,
) -> Result<Cursor<'tx, Ro>, StateDbError> {
    view.txn()
        .cursor(view.dbs().trie().get(table))
        .map_err(StateDbError::mdbx("open a cursor"))
}

impl StateView<'_> {
    /// Reads what applying a block that writes `keys` will read (see the module doc), in
    /// key order, and throws it away. Keys may repeat and need not exist.
    pub fn warm(&self, keys: &[StateKey]) -> Result<Warmed, StateDbError> {
        let mut accounts: Vec<B256> = Vec::new();
        let mut slots: Vec<(B256, B256)> = Vec::new();
        for key in keys {
            match key {
                StateKey::Account(address) => accounts.push(keccak256(address)),
                StateKey::Slot(address, slot) => {
                    slots.push((keccak256(address), keccak256(slot.to_be_bytes::<32>())));
                }
            }
        }
        accounts.sort_unstable();
        accounts.dedup();
        slots.sort_unstable();
        slots.dedup();
        let mut hashed = cursor(self, TrieTable::HashedAccounts)?;
        let mut nodes = cursor(self, TrieTable::AccountsTrie)?;
        for h in &accounts {
            let _: Row<'_> = hashed
                .set_range(h.as_slice())
                .map_err(StateDbError::read("HashedAccounts"))?;
            let path = Nibbles::unpack(h);
            for len in 1..=ACCOUNT_PATH_NIBBLES {
                let _: Row<'_> = nodes
                    .set_range(&codec::encode_path(&path.slice(..len)))
                    .map_err(StateDbError::read("AccountsTrie"))?;
            }
        }
        let mut hashed = cursor(self, TrieTable::HashedStorages)?;
        let mut nodes = cursor(self, TrieTable::StoragesTrie)?;
        for (h, hs) in &slots {
            let _: Option<Cow<'_, [u8]>> = hashed
                .get_both_range(h.as_slice(), hs.as_slice())
                .map_err(StateDbError::read("HashedStorages"))?;
            let path = Nibbles::unpack(hs);
            for len in 0..=STORAGE_PATH_NIBBLES {
                let _: Option<Cow<'_, [u8]>> = nodes
                    .get_both_range(h.as_slice(), &codec::encode_path(&path.slice(..len)))
                    .map_err(StateDbError::read("StoragesTrie"))?;
            }
        }
        Ok(Warmed {
            accounts: accounts.len() as u64,
            slots: slots.len() as u64,
        })
    }
}

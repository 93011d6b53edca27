//! [`AheadState`]: the state the next diff decodes against, for a thread that decodes ahead
//! of the writer. The last commit (a read snapshot, renewed as commits land) with the
//! changes of the blocks decoded above it held in memory, each tagged with its block so that
//! a landed commit prunes exactly what it made durable.
//!
//! Why a follower wants it: decoding a diff reads every changed key's prior value (B-tree
//! lookups, a quarter of a block's time on the writer's thread). With this state a second
//! thread decodes and verifies block n+1 while the writer writes block n, roots and commits.
//!
//! Nothing here is trusted by the writer beyond what the checks already cover: a prior value
//! read wrong would decode to values whose chained checksum is not the signed header's, and
//! the diff would be rejected, never written.

use std::collections::HashMap;

use alloy_primitives::map::B256Map;
use alloy_primitives::{Address, B256, U256};
use gigas_primitives::{AccountState, LatticeHash};
use gigas_statediff::{ChainTip, KeyIndex, PriorState, StateKey, StoreError, VerifiedDiff};

use crate::db::StateDb;
use crate::error::StateDbError;
use crate::view::StateView;

/// A slot's value above the snapshot, or an account's storage wiped there.
#[derive(Debug, Default)]
struct StorageAbove {
    /// The last block that wiped the account's storage, if one above the snapshot did: its
    /// slots not written since read as zero.
    wiped: Option<u64>,
    /// Slots written above the snapshot: value and the last block that wrote it.
    slots: B256Map<(U256, u64)>,
}

/// Figures of an [`AheadState`], for logs and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AheadStats {
    /// The last block recorded.
    pub tip: u64,
    /// The head of the snapshot it reads under them.
    pub base: u64,
    /// Accounts, storages and new keys held in memory.
    pub entries: usize,
    /// Times the snapshot was renewed because a commit landed.
    pub renewed: u64,
}

/// The last commit with the blocks decoded above it: the decoder's
/// [`PriorState`] and [`KeyIndex`] for a thread other than the writer's.
///
/// The caller [`AheadState::record`]s every block it verified against this state, in order,
/// and hands the same blocks to the writer in the same order; the writer's state at any
/// block then equals this one's, whenever either commits. A block the writer did not take
/// (or any failure of the writer) makes this state wrong: [`AheadState::open`] a new one
/// once the writer's open group is committed or discarded.
pub struct AheadState<'db> {
    db: &'db StateDb,
    view: StateView<'db>,
    /// The snapshot's head block.
    base: u64,
    /// The snapshot's index length: keys from it on are in `new_keys`.
    index_base: u64,
    tip: ChainTip,
    lattice: Option<LatticeHash>,
    accounts: B256Map<(Option<AccountState>, u64)>,
    storage: B256Map<StorageAbove>,
    new_keys: Vec<StateKey>,
    key_indices: HashMap<StateKey, u64>,
    renewed: u64,
}

impl std::fmt::Debug for AheadState<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AheadState")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<'db> AheadState<'db> {
    /// At the database's last commit, nothing above it. `lattice`: keep the state
    /// commitment (the snapshot's lattice hash, moved by each recorded block).
    pub fn open(db: &'db StateDb, lattice: bool) -> Result<Self, StateDbError> {
        let view = db.view()?;
        let tip = view.tip()?.ok_or(StateDbError::NotInitialized)?;
        let lattice = if lattice { view.lattice()? } else { None };
        let index_base = view.index_len()?;
        Ok(Self {
            db,
            view,
            base: tip.number,
            index_base,
            tip,
            lattice,
            accounts: B256Map::default(),
            storage: B256Map::default(),
            new_keys: Vec::new(),
            key_indices: HashMap::new(),
            renewed: 0,
        })
    }

    /// The last block recorded (the snapshot's head before any).
    pub fn tip(&self) -> ChainTip {
        self.tip
    }

    /// The lattice hash at the tip, when kept.
    pub fn lattice(&self) -> Option<&LatticeHash> {
        self.lattice.as_ref()
    }

    /// What it holds.
    pub fn stats(&self) -> AheadStats {
        AheadStats {
            tip: self.tip.number,
            base: self.base,
            entries: self.accounts.len() + self.storage.len() + self.new_keys.len(),
            renewed: self.renewed,
        }
    }

    /// Records a block verified against this state (its successor): its changes, new keys,
    /// tip and lattice hash. A block that does not follow the tip is refused.
    pub fn record(&mut self, diff: &VerifiedDiff) -> Result<(), StateDbError> {
        crate::writer::check_successor(&self.tip, &diff.header, &diff.changes, Some(&diff.hashed))?;
        let number = diff.header.number;
        let changes = &diff.changes;
        for ((_, change), h) in changes.accounts().iter().zip(diff.hashed.accounts()) {
            if change.storage_wiped {
                let storage = self.storage.entry(*h).or_default();
                storage.wiped = Some(number);
                storage.slots.clear();
            }
            self.accounts.insert(*h, (change.state, number));
        }
        for ((_, _, value), (h, hs)) in changes.storage().iter().zip(diff.hashed.slots()) {
            self.storage
                .entry(*h)
                .or_default()
                .slots
                .insert(*hs, (*value, number));
        }
        for key in &diff.new_keys {
            let index = self.index_base + self.new_keys.len() as u64;
            self.new_keys.push(*key);
            self.key_indices.insert(*key, index);
        }
        self.tip = diff.tip();
        // A block without one ends the commitment here, as the writer's does.
        self.lattice = diff.lattice.clone();
        Ok(())
    }

    /// Reads under the blocks from the last commit on: when one landed since the snapshot,
    /// takes a new snapshot and forgets what that commit made durable. Returns whether it
    /// did. Cheap when nothing landed (a read transaction and the head's row).
    pub fn renew(&mut self) -> Result<bool, StateDbError> {
        let view = self.db.view()?;
        let head = view.tip()?.ok_or(StateDbError::NotInitialized)?;
        if head.number == self.base {
            return Ok(false);
        }
        if head.number < self.base || head.number > self.tip.number {
            // Only the writer of these same blocks moves the head, forward, up to them.
            return Err(StateDbError::Invariant {
                what: format!(
                    "the database's head moved to block {} while decoding ahead over {}..={}",
                    head.number, self.base, self.tip.number
                ),
            });
        }
        let index_len = view.index_len()?;
        let durable = usize::try_from(index_len.saturating_sub(self.index_base))
            .unwrap_or(usize::MAX)
            .min(self.new_keys.len());
        for key in self.new_keys.drain(..durable) {
            self.key_indices.remove(&key);
        }
        self.index_base = index_len;
        let landed = head.number;
        self.accounts.retain(|_, (_, block)| *block > landed);
        self.storage.retain(|_, s| {
            s.slots.retain(|_, (_, block)| *block > landed);
            if s.wiped.is_some_and(|w| w <= landed) {
                s.wiped = None;
            }
            s.wiped.is_some() || !s.slots.is_empty()
        });
        self.view = view;
        self.base = landed;
        self.renewed += 1;
        Ok(true)
    }

    fn account_by_hash(&self, h: &B256) -> Result<Option<AccountState>, StateDbError> {
        match self.accounts.get(h) {
            Some((state, _)) => Ok(*state),
            None => self.view.account_hashed(h),
        }
    }

    fn slot_by_hash(&self, h: &B256, hs: &B256) -> Result<U256, StateDbError> {
        if let Some(storage) = self.storage.get(h) {
            if let Some((value, _)) = storage.slots.get(hs) {
                return Ok(*value);
            }
            if storage.wiped.is_some() {
                return Ok(U256::ZERO);
            }
        }
        self.view.storage_hashed(h, hs)
    }
}

impl PriorState for AheadState<'_> {
    fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError> {
        self.account_by_hash(&alloy_primitives::keccak256(address))
            .map_err(StoreError::new)
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError> {
        let h = alloy_primitives::keccak256(address);
        let hs = alloy_primitives::keccak256(slot.to_be_bytes::<32>());
        self.slot_by_hash(&h, &hs).map_err(StoreError::new)
    }

    fn account_hashed(
        &self,
        _address: &Address,
        hashed: &B256,
    ) -> Result<Option<AccountState>, StoreError> {
        self.account_by_hash(hashed).map_err(StoreError::new)
    }

    fn slot_hashed(
        &self,
        _address: &Address,
        _slot: &U256,
        (h, hs): &(B256, B256),
    ) -> Result<U256, StoreError> {
        self.slot_by_hash(h, hs).map_err(StoreError::new)
    }
}

impl KeyIndex for AheadState<'_> {
    fn index_of(&self, key: &StateKey) -> Result<Option<u64>, StoreError> {
        if let Some(index) = self.key_indices.get(key) {
            return Ok(Some(*index));
        }
        self.view.indexed(key).map_err(StoreError::new)
    }

    fn key_at(&self, index: u64) -> Result<Option<StateKey>, StoreError> {
        match index.checked_sub(self.index_base) {
            Some(above) => Ok(usize::try_from(above)
                .ok()
                .and_then(|i| self.new_keys.get(i))
                .copied()),
            None => self.view.key_of(index).map_err(StoreError::new),
        }
    }

    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.index_base + self.new_keys.len() as u64)
    }
}

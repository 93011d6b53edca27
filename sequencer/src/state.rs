//! State as revm reads it: a `DatabaseRef` over Vilmo at the head, or at an older block
//! through the old values the chain history keeps.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::TxEnvelope;

use alloy_primitives::{Address, B256, U256};
use gigas_evm::revm::database_interface::{DBErrorMarker, DatabaseRef};
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_history::{HistoricValue, History};
use gigas_primitives::state_keys::{
    account_key, code_key, decode_slot, slot_key, LayoutError, StoredAccount, Write,
};
use gigas_vilmo::Vilmo;

/// Why state could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StateError {
    /// A stored value does not follow the layout: the store is corrupt.
    #[error("state store: {0}")]
    Layout(#[from] LayoutError),
    /// The chain history failed.
    #[error("chain history: {0}")]
    History(String),
    /// The block is older than the retained state history.
    #[error("state at block {block} is not available: this node keeps the state of the last blocks from {oldest} on")]
    Pruned {
        /// The block asked for.
        block: u64,
        /// The oldest block whose state is kept.
        oldest: u64,
    },
    /// A code hash without its code.
    #[error("code {0} is missing from the state store")]
    MissingCode(B256),
}

impl DBErrorMarker for StateError {}

/// Raw reads of the state key layout at one block.
pub trait StateSource {
    /// The value of `key`, if stored.
    fn get(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>, StateError>;
}

/// The state after the last block Vilmo holds.
#[derive(Clone, Copy)]
pub struct Head<'a>(pub &'a Vilmo);

impl fmt::Debug for Head<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Head").finish_non_exhaustive()
    }
}

impl StateSource for Head<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>, StateError> {
        Ok(self.0.get(key).map(Cow::Borrowed))
    }
}

/// A block the producer has sealed and handed to the committer, not yet in Vilmo: what the
/// next blocks execute on top of. The committer commits the same writes and publishes the
/// same transactions: nothing is copied for the overlay.
#[derive(Debug)]
pub struct PendingBlock {
    /// Its number.
    pub number: u64,
    /// Its hash, for BLOCKHASH in the blocks after it.
    pub hash: B256,
    /// Its state writes, sorted by key, one per key (`None`: deleted).
    writes: Vec<Write>,
    /// Its transactions: they have left the pool and are not yet in the history.
    pub transactions: Arc<[Recovered<TxEnvelope>]>,
}

impl PendingBlock {
    /// A pending block of `writes` (put in key order here if they are not already; of two
    /// writes of one key the later wins, as in a Vilmo batch).
    pub fn new(
        number: u64,
        hash: B256,
        mut writes: Vec<Write>,
        transactions: Arc<[Recovered<TxEnvelope>]>,
    ) -> Self {
        // The writes of a ChangeSet come sorted and unique: one linear check.
        if !writes.windows(2).all(|w| w[0].0 < w[1].0) {
            // Stable, so that the last of equal keys is the one kept.
            writes.sort_by(|a, b| a.0.cmp(&b.0));
            let mut unique: Vec<Write> = Vec::with_capacity(writes.len());
            for write in writes {
                match unique.last_mut() {
                    Some(last) if last.0 == write.0 => *last = write,
                    _ => unique.push(write),
                }
            }
            writes = unique;
        }
        Self {
            number,
            hash,
            writes,
            transactions,
        }
    }

    /// Its writes, sorted by key.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Its write of `key`, if it writes it (`Some(None)`: it deletes it).
    pub fn write(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.writes
            .binary_search_by(|(k, _)| k.as_slice().cmp(key))
            .ok()
            .map(|i| &self.writes[i].1)
    }

    /// Its writes of keys that start with `prefix`.
    fn writes_with_prefix(&self, prefix: &[u8]) -> &[Write] {
        let start = self.writes.partition_point(|(k, _)| k.as_slice() < prefix);
        let len = self.writes[start..].partition_point(|(k, _)| k.starts_with(prefix));
        &self.writes[start..start + len]
    }
}

/// The producer's tip: Vilmo's head with the blocks in flight to the committer laid over it
/// (`pending` oldest first; a key's newest pending write wins). A block in `pending` may
/// already be in Vilmo too: its writes are then the same values, so either read is right.
#[derive(Clone, Copy)]
pub struct Tip<'a> {
    /// The committed state.
    pub vilmo: &'a Vilmo,
    /// The blocks in flight, oldest first.
    pub pending: &'a [std::sync::Arc<PendingBlock>],
    /// Hashes of committed blocks.
    pub history: &'a History,
}

impl fmt::Debug for Tip<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tip")
            .field(
                "pending",
                &self.pending.iter().map(|p| p.number).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl StateSource for Tip<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>, StateError> {
        for block in self.pending.iter().rev() {
            if let Some(value) = block.write(key) {
                return Ok(value.as_deref().map(Cow::Borrowed));
            }
        }
        Ok(self.vilmo.get(key).map(Cow::Borrowed))
    }
}

impl BlockHashes for Tip<'_> {
    fn block_hash(&self, number: u64) -> Option<B256> {
        match self.pending.iter().find(|p| p.number == number) {
            Some(p) => Some(p.hash),
            None => self.history.block_hash(number),
        }
    }
}

/// A block's writes are computed against the tip: the same reads, plus the prefix scan that
/// wiping an account's storage needs (Vilmo's keys, then each pending block's puts and
/// deletes in order).
impl gigas_primitives::state_keys::StateReader for Tip<'_> {
    type Error = LayoutError;

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LayoutError> {
        for block in self.pending.iter().rev() {
            if let Some(value) = block.write(key) {
                return Ok(value.clone());
            }
        }
        Ok(self.vilmo.get(key).map(<[u8]>::to_vec))
    }

    fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, LayoutError> {
        let mut keys: std::collections::BTreeSet<Vec<u8>> =
            gigas_primitives::state_keys::StateReader::keys_with_prefix(self.vilmo, prefix)?
                .into_iter()
                .collect();
        for block in self.pending {
            for (key, value) in block.writes_with_prefix(prefix) {
                if value.is_some() {
                    keys.insert(key.clone());
                } else {
                    keys.remove(key);
                }
            }
        }
        Ok(keys.into_iter().collect())
    }
}

/// The state at the end of block `block`: a key's old value from the history when a later
/// block changed it, else its value at the head.
///
/// Every read takes the store's read lock for itself alone, so that an execution reading
/// state for seconds (a client's `eth_call`) never holds off the committer, and copies the
/// value out. That is consistent because the committer writes a block's old values to the
/// history before it writes the block's state to Vilmo: a read takes Vilmo's value *first*
/// and asks the history second, so a block committed between the two is always seen in the
/// history, whose old value then wins. Every read therefore answers for `block`, whichever
/// blocks commit meanwhile.
pub struct At<'a> {
    /// The head state.
    pub vilmo: &'a std::sync::RwLock<Vilmo>,
    /// The history with the old values.
    pub history: &'a History,
    /// The block.
    pub block: u64,
}

impl fmt::Debug for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("At").field("block", &self.block).finish()
    }
}

impl At<'_> {
    /// Vilmo's value of `key` now, copied out under a read lock held for this read alone.
    fn head_value(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.vilmo
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .map(<[u8]>::to_vec)
    }
}

impl StateSource for At<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>, StateError> {
        let head = self.head_value(key);
        // Code is never deleted and its key is its hash: the head holds every code ever
        // stored.
        if key.first() == Some(&gigas_primitives::state_keys::CODE_PREFIX) {
            return Ok(head.map(Cow::Owned));
        }
        match self
            .history
            .value_at(key, self.block)
            .map_err(|e| StateError::History(e.to_string()))?
        {
            HistoricValue::Changed(old) => Ok(old.map(Cow::Owned)),
            HistoricValue::Unchanged => Ok(head.map(Cow::Owned)),
            HistoricValue::Pruned { oldest } => Err(StateError::Pruned {
                block: self.block,
                oldest,
            }),
        }
    }
}

/// Block hashes for BLOCKHASH.
pub trait BlockHashes {
    /// The hash of block `number`, if known.
    fn block_hash(&self, number: u64) -> Option<B256>;
}

impl BlockHashes for History {
    fn block_hash(&self, number: u64) -> Option<B256> {
        self.sealed_header(number).ok().flatten().map(|h| h.hash)
    }
}

/// revm's view of a [`StateSource`].
pub struct RevmState<'a, S> {
    /// Where values come from.
    pub source: S,
    /// Where block hashes come from.
    pub hashes: &'a (dyn BlockHashes + Sync),
}

impl<S> fmt::Debug for RevmState<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RevmState").finish_non_exhaustive()
    }
}

impl<S: StateSource> RevmState<'_, S> {
    /// The stored account record.
    pub fn account(&self, address: &Address) -> Result<Option<StoredAccount>, StateError> {
        match self.source.get(&account_key(address))? {
            Some(bytes) => Ok(Some(StoredAccount::decode(&bytes)?)),
            None => Ok(None),
        }
    }
}

impl<S: StateSource> DatabaseRef for RevmState<'_, S> {
    type Error = StateError;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        Ok(self.account(&address)?.map(|a| AccountInfo {
            balance: a.state.balance,
            nonce: a.state.nonce,
            code_hash: a.state.code_hash,
            code: None,
            ..Default::default()
        }))
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, StateError> {
        if code_hash == alloy_primitives::KECCAK256_EMPTY {
            return Ok(Bytecode::default());
        }
        match self.source.get(&code_key(&code_hash))? {
            Some(code) => Ok(Bytecode::new_raw(alloy_primitives::Bytes::copy_from_slice(
                &code,
            ))),
            None => Err(StateError::MissingCode(code_hash)),
        }
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, StateError> {
        match self.source.get(&slot_key(&address, &index))? {
            Some(bytes) => Ok(decode_slot(&bytes)?),
            None => Ok(U256::ZERO),
        }
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, StateError> {
        Ok(self.hashes.block_hash(number).unwrap_or_default())
    }
}

/// The state-diff writer reads the values a block replaced through the same view revm reads.
impl<S: StateSource> gigas_statediff::PriorState for RevmState<'_, S> {
    fn account(
        &self,
        address: &Address,
    ) -> Result<Option<gigas_primitives::AccountState>, gigas_statediff::StoreError> {
        Ok(RevmState::account(self, address)
            .map_err(gigas_statediff::StoreError::new)?
            .map(|a| a.state))
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, gigas_statediff::StoreError> {
        self.storage_ref(*address, *slot)
            .map_err(gigas_statediff::StoreError::new)
    }
}

/// The block whose state Vilmo holds: its batch `k` holds block `k - 1` (batch 1 is the
/// genesis state).
pub fn vilmo_block(vilmo: &Vilmo) -> u64 {
    vilmo.last_commit().number.saturating_sub(1)
}

/// Reads every account and slot of `vilmo` for a root from scratch
/// ([`gigas_trie::ScratchState::root`]): the root a full node keeps for the same block, and
/// the check of any root kept incrementally (`gigas-sequencer state-root`). Holds the state
/// in memory (10M accounts: 4.2 GB resident at the peak with Vilmo's index and maps, and 28 s
/// with the hashing, on a 2-vCPU VM). `progress` is told now and then how many of the
/// store's entries were read.
pub fn scratch_state(
    vilmo: &Vilmo,
    mut progress: impl FnMut(u64),
) -> Result<gigas_trie::ScratchState, StateError> {
    let mut state = gigas_trie::ScratchState::new();
    let mut failed = None;
    let mut read = 0u64;
    vilmo.for_each(|key, value| {
        read += 1;
        if read.is_multiple_of(1 << 16) {
            progress(read);
        }
        if failed.is_none() {
            failed = add_entry(&mut state, key, value).err();
        }
    });
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(state),
    }
}

/// Adds one stored entry of the state key layout to `state` (a code adds nothing: accounts
/// name theirs by hash).
pub fn add_entry(
    state: &mut gigas_trie::ScratchState,
    key: &[u8],
    value: &[u8],
) -> Result<(), LayoutError> {
    use gigas_primitives::state_keys::{decode_entry, StateEntry};
    match decode_entry(key, value)? {
        StateEntry::Account(address, stored) => state.account(address, stored.state),
        StateEntry::Slot(address, slot, value) => state.slot(address, slot, value),
        StateEntry::Code(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gigas_primitives::state_keys::StateReader;
    use gigas_vilmo::{Batch, Options};

    use super::*;

    fn pending(number: u64, writes: &[(&[u8], Option<&[u8]>)]) -> Arc<PendingBlock> {
        Arc::new(PendingBlock::new(
            number,
            B256::with_last_byte(number as u8),
            writes
                .iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect(),
            Arc::from(Vec::new()),
        ))
    }

    /// The newest in-flight write of a key wins over older ones and over Vilmo, a pending
    /// delete hides a committed key, and the prefix scan sees the same keys as reads do.
    #[test]
    fn the_tip_lays_pending_blocks_over_vilmo_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut vilmo = Vilmo::open(dir.path().join("state"), Options::default()).unwrap();
        let mut batch = Batch::with_capacity(3, 0);
        batch.put(b"pa", b"vilmo-a").unwrap();
        batch.put(b"pb", b"vilmo-b").unwrap();
        batch.put(b"q", b"vilmo-q").unwrap();
        vilmo.commit(batch).unwrap();
        let history = History::open(&dir.path().join("history"), Default::default()).unwrap();
        let blocks = [
            // Out of order, and `pc` written twice: the later write wins.
            pending(
                1,
                &[
                    (b"pc", Some(b"first-c")),
                    (b"pa", Some(b"one-a")),
                    (b"pc", Some(b"one-c")),
                ],
            ),
            pending(2, &[(b"pa", Some(b"two-a")), (b"pb", None)]),
        ];
        let tip = Tip {
            vilmo: &vilmo,
            pending: &blocks,
            history: &history,
        };
        let get = |k: &[u8]| StateReader::get(&tip, k).unwrap();
        assert_eq!(get(b"pa"), Some(b"two-a".to_vec()));
        assert_eq!(get(b"pb"), None);
        assert_eq!(get(b"pc"), Some(b"one-c".to_vec()));
        assert_eq!(get(b"q"), Some(b"vilmo-q".to_vec()));
        assert_eq!(
            StateSource::get(&tip, b"pa").unwrap().as_deref(),
            Some(&b"two-a"[..])
        );
        assert_eq!(
            tip.keys_with_prefix(b"p").unwrap(),
            vec![b"pa".to_vec(), b"pc".to_vec()]
        );
        assert_eq!(tip.block_hash(2), Some(B256::with_last_byte(2)));
        assert_eq!(tip.block_hash(7), None);
    }
}

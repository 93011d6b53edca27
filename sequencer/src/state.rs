//! State as revm reads it: a `DatabaseRef` over Vilmo at the head, or at an older block
//! through the old values the chain history keeps.

use std::borrow::Cow;
use std::fmt;

use alloy_primitives::{Address, B256, U256};
use gigas_evm::revm::database_interface::{DBErrorMarker, DatabaseRef};
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_history::{HistoricValue, History};
use gigas_primitives::state_keys::{
    account_key, code_key, decode_slot, slot_key, LayoutError, StoredAccount,
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

/// The state at the end of block `block`: a key's old value from the history when a later
/// block changed it, else its value at the head.
pub struct At<'a> {
    /// The head state.
    pub vilmo: &'a Vilmo,
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

impl StateSource for At<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>, StateError> {
        // Code is never deleted and its key is its hash: the head holds every code ever
        // stored.
        if key.first() == Some(&gigas_primitives::state_keys::CODE_PREFIX) {
            return Ok(self.vilmo.get(key).map(Cow::Borrowed));
        }
        match self
            .history
            .value_at(key, self.block)
            .map_err(|e| StateError::History(e.to_string()))?
        {
            HistoricValue::Changed(old) => Ok(old.map(Cow::Owned)),
            HistoricValue::Unchanged => Ok(self.vilmo.get(key).map(Cow::Borrowed)),
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
pub struct StateDb<'a, S> {
    /// Where values come from.
    pub source: S,
    /// Where block hashes come from.
    pub hashes: &'a (dyn BlockHashes + Sync),
}

impl<S> fmt::Debug for StateDb<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDb").finish_non_exhaustive()
    }
}

impl<S: StateSource> StateDb<'_, S> {
    /// The stored account record.
    pub fn account(&self, address: &Address) -> Result<Option<StoredAccount>, StateError> {
        match self.source.get(&account_key(address))? {
            Some(bytes) => Ok(Some(StoredAccount::decode(&bytes)?)),
            None => Ok(None),
        }
    }
}

impl<S: StateSource> DatabaseRef for StateDb<'_, S> {
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
impl<S: StateSource> gigas_statediff::PriorState for StateDb<'_, S> {
    fn account(
        &self,
        address: &Address,
    ) -> Result<Option<gigas_primitives::AccountState>, gigas_statediff::StoreError> {
        Ok(StateDb::account(self, address)
            .map_err(gigas_statediff::StoreError::new)?
            .map(|a| a.state))
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, gigas_statediff::StoreError> {
        self.storage_ref(*address, *slot)
            .map_err(gigas_statediff::StoreError::new)
    }
}

//! [`StateView`]: reads of the last commit, and the trait impls that the writer shares
//! (the diff decoder's [`PriorState`] and [`KeyIndex`], revm's [`DatabaseRef`]).

use std::fmt;

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use gigas_primitives::AccountState;
use gigas_statediff::ChainTip;
use signet_libmdbx::tx::aliases::RoTxUnsync;

use crate::db::StateDb;
use crate::error::StateDbError;
use crate::read;
use crate::types::{AccountProof, StorageProof, StoredHeader};
use gigas_triedb::overlay::StateOverlay;
use gigas_triedb::{root, store};

/// A consistent snapshot of the last commit. `Send` (not `Sync`): take one per request, on
/// the thread that uses it; it pins the snapshot's pages while it lives.
pub struct StateView<'db> {
    db: &'db StateDb,
    txn: RoTxUnsync,
}

impl fmt::Debug for StateView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateView").finish_non_exhaustive()
    }
}

impl<'db> StateView<'db> {
    pub(crate) fn new(db: &'db StateDb, txn: RoTxUnsync) -> Self {
        Self { db, txn }
    }

    pub(crate) fn txn(&self) -> &RoTxUnsync {
        &self.txn
    }

    pub(crate) fn dbs(&self) -> &crate::read::Dbs {
        self.db.dbs()
    }

    /// The last applied block (`None` before a genesis).
    pub fn tip(&self) -> Result<Option<ChainTip>, StateDbError> {
        Ok(read::meta(self.db.dbs(), &self.txn)?.head)
    }

    /// The lattice hash of the state at the tip (`None`: not kept).
    pub fn lattice(&self) -> Result<Option<gigas_primitives::LatticeHash>, StateDbError> {
        Ok(read::meta(self.db.dbs(), &self.txn)?.lattice)
    }

    /// The block and root of the last computed state root.
    pub fn last_root(&self) -> Result<Option<(u64, B256)>, StateDbError> {
        Ok(read::meta(self.db.dbs(), &self.txn)?.last_root)
    }

    /// Keys in the enumeration index.
    pub fn index_len(&self) -> Result<u64, StateDbError> {
        Ok(read::meta(self.db.dbs(), &self.txn)?.index_len)
    }

    /// An account (`None`: it does not exist).
    pub fn account(&self, address: &Address) -> Result<Option<AccountState>, StateDbError> {
        read::account(self.db.dbs(), &self.txn, address)
    }

    /// A storage slot's value (zero when unset).
    pub fn storage(&self, address: &Address, slot: &U256) -> Result<U256, StateDbError> {
        read::slot(self.db.dbs(), &self.txn, address, slot)
    }

    /// [`StateView::account`] by `keccak(address)`.
    pub fn account_hashed(&self, hashed: &B256) -> Result<Option<AccountState>, StateDbError> {
        read::hashed_account(self.db.dbs(), &self.txn, hashed)
    }

    /// [`StateView::storage`] by `keccak(address)` and `keccak(slot)`.
    pub fn storage_hashed(&self, hashed: &B256, hashed_slot: &B256) -> Result<U256, StateDbError> {
        read::hashed_slot(self.db.dbs(), &self.txn, hashed, hashed_slot)
    }

    /// Code by its hash.
    pub fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateDbError> {
        read::code(self.db.dbs(), &self.txn, hash)
    }

    /// The header of an applied block, with the MPT root if one was computed at it.
    pub fn header(&self, number: u64) -> Result<Option<StoredHeader>, StateDbError> {
        read::header(self.db.dbs(), &self.txn, number)
    }

    /// The hash of block `number`'s header, if the database holds it (BLOCKHASH).
    pub fn block_hash(&self, number: u64) -> Result<Option<B256>, StateDbError> {
        read::block_hash(self.db.dbs(), &self.txn, number)
    }

    /// The index of `key` in the key index.
    pub fn indexed(&self, key: &gigas_statediff::StateKey) -> Result<Option<u64>, StateDbError> {
        read::index_of(self.db.dbs(), &self.txn, key)
    }

    /// The key at `index` of the key index.
    pub fn key_of(&self, index: u64) -> Result<Option<gigas_statediff::StateKey>, StateDbError> {
        read::key_at(self.db.dbs(), &self.txn, index)
    }

    /// The number of the block with header hash `hash`, if the database holds that header.
    pub fn number_by_hash(&self, hash: &B256) -> Result<Option<u64>, StateDbError> {
        read::number_by_hash(self.db.dbs(), &self.txn, hash)
    }

    /// `eth_getProof`: the account and the asked slots with their trie nodes, against the
    /// state root of this snapshot. That is the head's stored root when a root was computed
    /// at the head (every block with `root_every: 1`); after blocks without one, the proof
    /// is against the head's state all the same, and carries the root it was computed for.
    /// [`StateDbError::TrieStale`] when the writer ran with the trie off since the last root.
    pub fn proof(&self, address: &Address, slots: &[U256]) -> Result<AccountProof, StateDbError> {
        self.proof_through(address, slots, &StateOverlay::new())
    }

    /// [`Self::proof`] against the state `overlay` makes of this snapshot's (a recent past
    /// block's state, given as the head's with the keys the blocks since changed set back).
    /// The proof and its `state_root` are that state's; the caller checks the root against
    /// the one it expects, since an overlay that misses a changed key gives another root.
    /// `block` is the head's number: the caller knows which block the overlay stands for.
    pub fn proof_through(
        &self,
        address: &Address,
        slots: &[U256],
        overlay: &StateOverlay,
    ) -> Result<AccountProof, StateDbError> {
        self.proof_through_until(address, slots, overlay, None)
    }

    /// [`Self::proof_through`] that stops with [`StateDbError::DeadlinePassed`] once
    /// `deadline` passes: the walk recomputes the path of every key the overlay holds, which
    /// at an old block of a long window is many, so the deadline is checked inside it.
    pub fn proof_through_until(
        &self,
        address: &Address,
        slots: &[U256],
        overlay: &StateOverlay,
        deadline: Option<std::time::Instant>,
    ) -> Result<AccountProof, StateDbError> {
        let dbs = self.db.dbs();
        let meta = read::meta(dbs, &self.txn)?;
        let tip = meta.head.ok_or(StateDbError::NotInitialized)?;
        if !meta.trie_valid {
            return Err(StateDbError::TrieStale {
                last_root: meta.last_root.map_or(0, |r| r.0),
            });
        }
        let changed = store::load_changed(dbs.trie(), &self.txn)?;
        let hashed_slots: Vec<B256> = slots
            .iter()
            .map(|s| keccak256(s.to_be_bytes::<32>()))
            .collect();
        let proven = root::prove(
            dbs.trie(),
            &self.txn,
            changed,
            &overlay.hashed(),
            keccak256(address),
            &hashed_slots,
            deadline,
        )?;
        let account = match overlay.account(address) {
            Some(state) => state,
            None => read::account(dbs, &self.txn, address)?,
        };
        let mut storage_proofs = Vec::with_capacity(slots.len());
        for (slot, proof) in slots.iter().zip(proven.storage_proofs) {
            let value = match overlay.slot(address, slot) {
                Some(value) => value,
                None => read::slot(dbs, &self.txn, address, slot)?,
            };
            storage_proofs.push(StorageProof {
                slot: *slot,
                value,
                proof,
            });
        }
        let state = account.unwrap_or(gigas_statediff::EMPTY_ACCOUNT);
        Ok(AccountProof {
            state_root: proven.state_root,
            block: tip.number,
            address: *address,
            nonce: state.nonce,
            balance: state.balance,
            code_hash: state.code_hash,
            storage_root: proven.storage_root,
            exists: account.is_some(),
            account_proof: proven.account_proof,
            storage_proofs,
        })
    }

    /// The state root recomputed from the hashed tables alone, ignoring every stored trie
    /// node: a check on the incremental root (it reads the whole state).
    pub fn state_root_from_scratch(&self) -> Result<B256, StateDbError> {
        Ok(root::root_from_scratch(self.db.dbs().trie(), &self.txn)?)
    }
}

/// Implements the decoder's and revm's read traits for a type with the reads they need
/// (`account`, `storage`, `code`, `block_hash`, `indexed`, `key_of`, `index_length`).
macro_rules! impl_state_reads {
    ($ty:ty) => {
        impl gigas_statediff::PriorState for $ty {
            fn account(
                &self,
                address: &alloy_primitives::Address,
            ) -> Result<Option<gigas_primitives::AccountState>, gigas_statediff::StoreError> {
                self.account(address)
                    .map_err(gigas_statediff::StoreError::new)
            }

            fn slot(
                &self,
                address: &alloy_primitives::Address,
                slot: &alloy_primitives::U256,
            ) -> Result<alloy_primitives::U256, gigas_statediff::StoreError> {
                self.storage(address, slot)
                    .map_err(gigas_statediff::StoreError::new)
            }

            fn account_hashed(
                &self,
                _address: &alloy_primitives::Address,
                hashed: &alloy_primitives::B256,
            ) -> Result<Option<gigas_primitives::AccountState>, gigas_statediff::StoreError> {
                self.account_hashed(hashed)
                    .map_err(gigas_statediff::StoreError::new)
            }

            fn slot_hashed(
                &self,
                _address: &alloy_primitives::Address,
                _slot: &alloy_primitives::U256,
                (hashed, hashed_slot): &(alloy_primitives::B256, alloy_primitives::B256),
            ) -> Result<alloy_primitives::U256, gigas_statediff::StoreError> {
                self.storage_hashed(hashed, hashed_slot)
                    .map_err(gigas_statediff::StoreError::new)
            }
        }

        impl gigas_statediff::KeyIndex for $ty {
            fn index_of(
                &self,
                key: &gigas_statediff::StateKey,
            ) -> Result<Option<u64>, gigas_statediff::StoreError> {
                self.indexed(key).map_err(gigas_statediff::StoreError::new)
            }

            fn key_at(
                &self,
                index: u64,
            ) -> Result<Option<gigas_statediff::StateKey>, gigas_statediff::StoreError> {
                self.key_of(index).map_err(gigas_statediff::StoreError::new)
            }

            fn len(&self) -> Result<u64, gigas_statediff::StoreError> {
                self.index_length()
                    .map_err(gigas_statediff::StoreError::new)
            }
        }

        impl gigas_evm::revm::database_interface::DatabaseRef for $ty {
            type Error = $crate::StateDbError;

            fn basic_ref(
                &self,
                address: alloy_primitives::Address,
            ) -> Result<Option<gigas_evm::revm::state::AccountInfo>, $crate::StateDbError> {
                Ok(self
                    .account(&address)?
                    .map(|a| gigas_evm::revm::state::AccountInfo {
                        balance: a.balance,
                        nonce: a.nonce,
                        code_hash: a.code_hash,
                        code: None,
                        ..Default::default()
                    }))
            }

            fn code_by_hash_ref(
                &self,
                code_hash: alloy_primitives::B256,
            ) -> Result<gigas_evm::revm::state::Bytecode, $crate::StateDbError> {
                if code_hash == alloy_primitives::KECCAK256_EMPTY {
                    return Ok(gigas_evm::revm::state::Bytecode::default());
                }
                match self.code(&code_hash)? {
                    Some(code) => Ok(gigas_evm::revm::state::Bytecode::new_raw(code)),
                    None => Err($crate::StateDbError::MissingCode(code_hash)),
                }
            }

            fn storage_ref(
                &self,
                address: alloy_primitives::Address,
                index: alloy_primitives::U256,
            ) -> Result<alloy_primitives::U256, $crate::StateDbError> {
                self.storage(&address, &index)
            }

            fn block_hash_ref(
                &self,
                number: u64,
            ) -> Result<alloy_primitives::B256, $crate::StateDbError> {
                // revm asks only for the 256 blocks before the one executing, which a node
                // holds (from its genesis, or its snapshot's ancestor headers on): a missing
                // one is an error, never a zero hash that would differ from the sequencer's.
                self.block_hash(number)?
                    .ok_or($crate::StateDbError::MissingHeader(number))
            }
        }
    };
}

pub(crate) use impl_state_reads;

impl StateView<'_> {
    fn index_length(&self) -> Result<u64, StateDbError> {
        self.index_len()
    }
}

impl_state_reads!(StateView<'_>);

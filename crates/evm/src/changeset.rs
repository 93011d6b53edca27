//! Building a block's [`ChangeSet`] from what revm reports per transaction.
//!
//! revm hands back, after each transaction, the accounts it loaded with flags (touched,
//! created, self-destructed, loaded as not existing), their info before the transaction
//! (`original_info`) and after, and each loaded slot's value before and after. A
//! [`BlockChanges`] folds those reports in block order, applying the rules a database commit
//! applies (revm's `State`: untouched accounts are not written; a self-destructed account is
//! gone with its storage; a created one starts from empty storage; a touched account that is
//! empty afterwards is deleted, EIP-161, which revm's journal already adapts for forks before
//! Spurious Dragon). [`BlockChanges::finish`] then keeps only what differs from the state
//! before the block, so the ChangeSet does not depend on which accounts an executor happened
//! to touch without changing, nor on the order it found them.
//!
//! The same fold serves every executor: [`crate::execute_block`] folds each committed
//! transaction; Block-STM folds its final transactions in commit order with
//! [`BlockChanges::fold_deferred`], because it pays the beneficiary's fees after the block
//! instead of in every transaction. Both must give identical bytes; the tests hold them to it.
//!
//! # What counts as "before the block"
//!
//! An account's state before the block is its `original_info` in the first transaction that
//! touched it (revm reads it from the database at the start of that transaction, and no
//! earlier transaction changed it, or it would have been touched there). A slot's is its
//! `original_value` the first time it appears after the account's last wipe. The beneficiary
//! under deferred fees is the exception: an executor that adds unpaid fees to what its
//! transactions read must give its state before the block explicitly
//! ([`BlockChanges::deferring`]).

use alloy_primitives::{Address, Bytes, U256};
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use revm::primitives::hardfork::SpecId;
use revm::primitives::KECCAK_EMPTY;
use revm::state::{AccountInfo, EvmState};
use std::collections::HashMap;

/// One account as the block has left it so far.
#[derive(Debug, Clone)]
struct Tracked {
    /// Its state before the block; `None` when it did not exist.
    pre: Option<AccountInfo>,
    /// Its state now; `None` when it does not exist (destroyed, or deleted as empty).
    now: Option<AccountInfo>,
    /// Whether a transaction of the block destroyed it (its storage from before the block is
    /// gone, even if it was created again afterwards).
    wiped: bool,
    /// Slots written since the last wipe: value before the block (meaningless once wiped)
    /// and value now.
    slots: Map<U256, (U256, U256)>,
}

/// revm's state is keyed by addresses and slots that an attacker can choose; foldhash is
/// fast and seeded per process (the iteration order never reaches the ChangeSet, which is
/// sorted).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Folds a block's per-transaction state changes into its [`ChangeSet`].
#[derive(Debug, Clone)]
pub struct BlockChanges {
    spec: SpecId,
    accounts: Map<Address, Tracked>,
    /// Code of accounts whose code changed, by hash: only new code is cloned.
    codes: Map<alloy_primitives::B256, Bytes>,
    /// Under deferred fees: the beneficiary, the fees not yet credited to it, and whether any
    /// transaction was folded.
    deferred: Option<(Address, U256, bool)>,
}

impl BlockChanges {
    /// An empty fold for a block run under `spec`, whose transactions pay the beneficiary
    /// themselves (plain sequential execution).
    pub fn new(spec: SpecId) -> Self {
        Self {
            spec,
            accounts: Map::default(),
            codes: Map::default(),
            deferred: None,
        }
    }

    /// An empty fold for an executor that keeps each transaction's fee out of its state and
    /// pays the beneficiary once (see [`Self::fold_deferred`]). `pre` is the beneficiary's
    /// account before the block (`None`: it does not exist), read from the base state: what
    /// such an executor's transactions read includes earlier fees, so it is not a
    /// trustworthy "before".
    pub fn deferring(spec: SpecId, beneficiary: Address, pre: Option<AccountInfo>) -> Self {
        let mut changes = Self::new(spec);
        changes.accounts.insert(
            beneficiary,
            Tracked {
                now: pre.clone(),
                pre,
                wiped: false,
                slots: Map::default(),
            },
        );
        changes.deferred = Some((beneficiary, U256::ZERO, false));
        changes
    }

    /// Folds the state changes of the next transaction in block order, as revm's journal
    /// finalised them (beneficiary paid).
    pub fn fold(&mut self, state: &EvmState) {
        for (address, account) in state {
            if !account.is_touched() {
                continue;
            }
            let tracked = self.accounts.entry(*address).or_insert_with(|| {
                let pre = (!account.is_loaded_as_not_existing())
                    .then(|| account.original_info().copy_without_code());
                Tracked {
                    now: pre.clone(),
                    pre,
                    wiped: false,
                    slots: Map::default(),
                }
            });
            if account.is_selfdestructed() {
                tracked.now = None;
                tracked.wiped = true;
                tracked.slots.clear();
                continue;
            }
            if account.is_created() {
                // Creation needs an address without code or nonce, and no such account
                // holds storage on a Gigas chain (EIP-7610, which revm 43 does not check:
                // the chain spec refuses genesis storage there, the only way to it), so
                // nothing stored is wiped here; a destroyed and
                // re-created account keeps the wipe its destruction set.
                tracked.slots.clear();
            } else if account.is_empty() {
                // EIP-161: a touched empty account is deleted (before Spurious Dragon the
                // journal has already untouched it, or marked it created to keep it).
                tracked.now = None;
                continue;
            }
            let info = &account.info;
            let old_code = tracked.now.as_ref().map(|now| now.code_hash);
            if info.code_hash != old_code.unwrap_or(KECCAK_EMPTY) {
                if let Some(code) = &info.code {
                    self.codes
                        .entry(info.code_hash)
                        .or_insert_with(|| Bytes::copy_from_slice(code.original_byte_slice()));
                }
            }
            tracked.now = Some(info.copy_without_code());
            for (slot, value) in &account.storage {
                tracked
                    .slots
                    .entry(*slot)
                    .and_modify(|(_, now)| *now = value.present_value)
                    .or_insert((value.original_value, value.present_value));
            }
        }
    }

    /// Folds the next transaction's changes made without paying the beneficiary, and its
    /// `fee`. The fees since the last transaction that wrote the beneficiary's account
    /// (whose write holds every fee before its own) are credited by [`Self::settle`].
    ///
    /// # Panics
    ///
    /// When the fold was not made with [`Self::deferring`] (a caller bug).
    pub fn fold_deferred(&mut self, state: &EvmState, fee: U256) {
        let Some((beneficiary, unpaid, _)) = self.deferred else {
            panic!("BlockChanges::fold_deferred on a fold made without BlockChanges::deferring");
        };
        self.fold(state);
        let wrote = state.get(&beneficiary).is_some_and(|a| a.is_touched());
        let unpaid = if wrote {
            fee
        } else {
            unpaid.saturating_add(fee)
        };
        self.deferred = Some((beneficiary, unpaid, true));
    }

    /// Credits the fees not yet paid to the beneficiary and touches it, as revm's reward
    /// does at the end of a transaction; later transactions are then folded with
    /// [`Self::fold`]. Returns the amount credited, for an executor that pays the same into
    /// its database; `None` when no transaction was folded deferred (nothing to pay, and the
    /// beneficiary is not even touched).
    pub fn settle(&mut self) -> Option<U256> {
        let (beneficiary, unpaid, folded) = self.deferred.take()?;
        if !folded {
            return None;
        }
        let spurious_dragon = self.spec.is_enabled_in(SpecId::SPURIOUS_DRAGON);
        // `deferring` tracks the beneficiary from the start.
        let tracked = self.accounts.get_mut(&beneficiary)?;
        let mut info = tracked.now.clone().unwrap_or_default();
        info.balance = info.balance.saturating_add(unpaid);
        // Before Spurious Dragon the journal keeps a touched empty account that exists and
        // materialises one that does not: either way it exists afterwards.
        tracked.now = if info.is_empty() && spurious_dragon {
            None
        } else {
            Some(info)
        };
        Some(unpaid)
    }

    /// Whether nothing was folded that the block could have changed.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    /// The block's canonical ChangeSet: every account, slot and bytecode whose value after
    /// the block differs from before it, and every wipe of storage that existed before.
    pub fn finish(mut self) -> ChangeSet {
        self.settle();
        let mut builder = ChangeSetBuilder::new();
        for (address, tracked) in self.accounts {
            // Nothing can have been stored under an account that did not exist.
            let wiped = tracked.wiped && tracked.pre.is_some();
            let Some(now) = tracked.now else {
                if tracked.pre.is_some() {
                    builder.destroyed(address);
                }
                continue;
            };
            let state = AccountState {
                nonce: now.nonce,
                balance: now.balance,
                code_hash: now.code_hash,
            };
            let unchanged = tracked.pre.as_ref().is_some_and(|pre| {
                pre.nonce == now.nonce
                    && pre.balance == now.balance
                    && pre.code_hash == now.code_hash
            });
            if wiped || !unchanged {
                builder.account(address, state, wiped);
            }
            let pre_code = tracked.pre.as_ref().map_or(KECCAK_EMPTY, |p| p.code_hash);
            if now.code_hash != pre_code && now.code_hash != KECCAK_EMPTY {
                if let Some(code) = self.codes.get(&now.code_hash) {
                    builder.bytecode(code.clone());
                }
            }
            for (slot, (pre, value)) in tracked.slots {
                let changed = if tracked.wiped {
                    !value.is_zero()
                } else {
                    value != pre
                };
                if changed {
                    builder.slot(address, slot, value);
                }
            }
        }
        builder.build()
    }
}

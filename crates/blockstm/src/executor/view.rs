//! The state a transaction executes over: earlier transactions' writes in the
//! multi-version memory over the base state ([`MvDb`]), and the locations a transaction's
//! changes write ([`write_set`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use alloy_primitives::{Address, B256, U256};
use revm::database_interface::{DBErrorMarker, Database, DatabaseRef};
use revm::state::{AccountInfo, Bytecode, EvmState};

use crate::mvmemory::{Location, MvMemory, Origin, Read, ReadResult, Value};
use crate::scheduler::Version;

/// Why a read could not complete.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum MvError {
    #[error("reads an estimate of transaction {0}")]
    Blocked(usize),
    #[error("base state: {0}")]
    Base(String),
}

impl DBErrorMarker for MvError {}

/// The state as transaction `idx` sees it: earlier transactions' writes over the base.
pub(super) struct MvDb<'a, B> {
    pub(super) mv: &'a MvMemory,
    pub(super) base: &'a B,
    pub(super) codes: &'a Mutex<HashMap<B256, Bytecode>>,
    pub(super) beneficiary: Address,
    pub(super) idx: usize,
    pub(super) reads: Vec<Read>,
    /// Accounts as this transaction read them (balance, nonce, code hash), to leave unchanged
    /// ones out of its writes. A handful per transaction: a vector beats a map.
    pub(super) read_accounts: Vec<(Address, U256, u64, B256)>,
}

impl<B: DatabaseRef> MvDb<'_, B>
where
    B::Error: fmt::Display,
{
    fn resolve(&mut self, location: Location) -> Result<Option<(Version, Value)>, MvError> {
        match self.mv.read(&location, self.idx) {
            ReadResult::Estimate(j) => Err(MvError::Blocked(j)),
            ReadResult::NotFound => {
                self.reads.push((location, Origin::Base));
                Ok(None)
            }
            ReadResult::Value(version, value) => {
                self.reads
                    .push((location, Origin::Written(version, value.clone())));
                Ok(Some((version, value)))
            }
        }
    }

    /// Makes the read recorded at `at`, if it found a write, hold only while the same
    /// transaction remains the latest writer (see [`Origin::WrittenBy`]).
    fn pin_to_writer(&mut self, at: usize) {
        if let Some((_, origin)) = self.reads.get_mut(at) {
            if let Origin::Written(version, value) = std::mem::replace(origin, Origin::Base) {
                *origin = Origin::WrittenBy(version, value);
            }
        }
    }
}

impl<B: DatabaseRef> Database for MvDb<'_, B>
where
    B::Error: fmt::Display,
{
    type Error = MvError;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, MvError> {
        let account_read = self.reads.len();
        let (info, unpaid_from) = match self.resolve(Location::Account(address))? {
            Some(((writer, _), Value::Account(info))) => (info, writer),
            Some(_) => {
                return Err(MvError::Base(
                    "account location holds another kind of value".into(),
                ))
            }
            None => (
                self.base
                    .basic_ref(address)
                    .map_err(|e| MvError::Base(e.to_string()))?,
                0,
            ),
        };
        if address != self.beneficiary {
            if let Some(info) = &info {
                self.read_accounts
                    .push((address, info.balance, info.nonce, info.code_hash));
            }
            return Ok(info);
        }
        // The beneficiary's balance includes every earlier transaction's fee; fees are paid
        // after a transaction's own changes, so a writer's own fee is not in what it wrote.
        // Which fees are added depends on which transaction wrote the account: a later
        // writer that leaves it byte for byte as it was (a contract that sweeps its balance
        // twice) already accounts for the fees before it, which must not be added again.
        self.pin_to_writer(account_read);
        let mut fees = U256::ZERO;
        for j in unpaid_from..self.idx {
            if let Some((_, Value::Fee(fee))) = self.resolve(Location::Fee(j))? {
                fees = fees.saturating_add(fee);
            }
        }
        if fees.is_zero() {
            return Ok(info);
        }
        let mut info = info.unwrap_or_default();
        info.balance = info.balance.saturating_add(fees);
        Ok(Some(info))
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, MvError> {
        if let Some(code) = self
            .codes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&code_hash)
        {
            return Ok(code.clone());
        }
        self.base
            .code_by_hash_ref(code_hash)
            .map_err(|e| MvError::Base(e.to_string()))
    }

    fn storage(&mut self, address: Address, index: U256) -> Result<U256, MvError> {
        let slot_read = self.reads.len();
        let slot = self.resolve(Location::Slot(address, index))?;
        let reset = self.resolve(Location::StorageReset(address))?;
        match (slot, reset) {
            // A wipe after the last write of the slot leaves it zero; a wipe by the same
            // transaction (a contract created and written) comes before its writes. The
            // answer depends on which transactions wrote the two, so an equal value from
            // another one (every wipe is equal, and so is a slot written again with the
            // same value) must not let the read stand. A slot or a wipe found alone keeps
            // validation by value: its answer does not depend on who wrote it.
            (Some(((w, _), Value::Slot(v))), Some(((r, _), _))) => {
                self.pin_to_writer(slot_read);
                self.pin_to_writer(slot_read + 1);
                Ok(if r > w { U256::ZERO } else { v })
            }
            (Some((_, Value::Slot(v))), None) => Ok(v),
            (None, Some(_)) => Ok(U256::ZERO),
            (None, None) => self
                .base
                .storage_ref(address, index)
                .map_err(|e| MvError::Base(e.to_string())),
            _ => Err(MvError::Base(
                "slot location holds another kind of value".into(),
            )),
        }
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, MvError> {
        self.base
            .block_hash_ref(number)
            .map_err(|e| MvError::Base(e.to_string()))
    }
}

/// Appends to `writes` the locations a transaction's state changes write, as later
/// transactions must see them (the same view `CacheDB::commit` gives a sequential run).
pub(super) fn write_set(
    state: &EvmState,
    read_accounts: &[(Address, U256, u64, B256)],
    codes: &Mutex<HashMap<B256, Bytecode>>,
    writes: &mut Vec<(Location, Value)>,
) {
    for (address, account) in state {
        if !account.is_touched() {
            continue;
        }
        if account.is_selfdestructed() {
            writes.push((Location::Account(*address), Value::Account(None)));
            writes.push((Location::StorageReset(*address), Value::StorageReset));
            continue;
        }
        if account.is_created() {
            writes.push((Location::StorageReset(*address), Value::StorageReset));
        }
        let read = read_accounts
            .iter()
            .find(|(a, ..)| a == address)
            .map(|&(_, balance, nonce, code_hash)| (balance, nonce, code_hash));
        let info = &account.info;
        // Code is published by hash only when it is new to this account (created, or an
        // EIP-7702 delegation set): calls into existing contracts take no lock here.
        if let Some(code) = &info.code {
            if account.is_created() || read.is_none_or(|(_, _, hash)| hash != info.code_hash) {
                codes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(info.code_hash)
                    .or_insert_with(|| code.clone());
            }
        }
        // A touched account that existed and did not change (a contract called without
        // value) reads the same afterwards: writing it would make every caller conflict.
        let unchanged =
            !account.is_created() && read == Some((info.balance, info.nonce, info.code_hash));
        if !unchanged {
            writes.push((
                Location::Account(*address),
                Value::Account(Some(info.copy_without_code())),
            ));
        }
        for (slot, value) in &account.storage {
            if value.is_changed() {
                writes.push((
                    Location::Slot(*address, *slot),
                    Value::Slot(value.present_value()),
                ));
            }
        }
    }
}

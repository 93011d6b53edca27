//! Recent states: what the full node keeps to answer state reads at the last blocks, not only
//! at its head (geth keeps 128 in memory).
//!
//! A client reads `latest`, then asks for a balance, a call or a storage slot at that block's
//! number; on a 250 ms chain the head has moved by then. The database holds only the head's
//! state, so for each applied block the apply thread keeps, in memory, what the block changed
//! *from*: every account's and slot's value before it ([`BlockUndo`]). The value of a key after
//! block `n` is then the value before the first block after `n` that changed it, or the head's
//! value if none did ([`PastState`]).
//!
//! The same records serve the blocks applied and not yet committed, the other way round:
//! the apply thread commits a group of blocks at once (a commit per block writes every page
//! a block touches, about 120 MB per block over 10M accounts), but serves each block as soon
//! as it is applied. The database's snapshot is the last commit, so the state after an
//! applied block `n` above it is the snapshot read through what the blocks up to `n` wrote
//! ([`BlockUndo::after`]: a *redo* record, with the block's header), newest first
//! ([`StateWindow::ahead`]). A kill loses none of them: the apply thread logs each block
//! before it is served (`crate::wal`).
//!
//! **Owns:** the undo records of the last `--state-window` blocks, bounded in blocks and in
//! bytes, the redo records and headers of the blocks above the last commit (bounded by the
//! group: dropped at each commit), and reads of past and not-yet-committed states through
//! them, including the overlay through which a proof at such a block is computed over the
//! committed trie ([`PastState::overlay`]).
//!
//! **Must not:** grow without bound (the oldest block goes first when either bound is passed),
//! or answer a block whose undo records it does not hold: a read below the window is refused
//! by the caller with the range that is served.
//!
//! A block that wipes an account's storage (it was destroyed in the block) records no prior
//! slots for it: Gigas chains run Cancun or later, where only an account created in the same
//! transaction can be destroyed (EIP-6780) and a creation never lands on an address with
//! storage (EIP-7610), so the storage before such a block is empty.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock};

use alloy_primitives::{Address, Bytes, B256, U256};
use gigas_primitives::{AccountState, ChangeSet};
use gigas_statedb::{StateOverlay, StoredHeader};
use gigas_statediff::{PriorState, StoreError};

/// Rough heap cost of one account record (key, value, map overhead), for the byte bound.
const ACCOUNT_BYTES: usize = 128;
/// Rough heap cost of one slot record.
const SLOT_BYTES: usize = 128;

/// What one block changed, at its value before the block (an undo record) or after it (a
/// redo record: [`BlockUndo::after`]). `wiped` means the same both ways: every slot of the
/// account that the record does not name is empty.
#[derive(Debug, Default)]
pub struct BlockUndo {
    number: u64,
    accounts: HashMap<Address, Option<AccountState>>,
    slots: HashMap<(Address, U256), U256>,
    wiped: HashSet<Address>,
    /// Code the block deployed (redo records only: an undo record's state has its code in
    /// the database already).
    codes: HashMap<B256, Bytes>,
    /// The block's hash (redo records only: its header is not in the database yet).
    hash: Option<B256>,
}

impl BlockUndo {
    /// Reads from `prior` (the state before the block: the writer's open group) the value of
    /// every key block `number`'s `changes` write.
    pub fn capture(
        number: u64,
        changes: &ChangeSet,
        prior: &impl PriorState,
    ) -> Result<Self, StoreError> {
        let mut undo = BlockUndo {
            number,
            accounts: HashMap::with_capacity(changes.accounts().len()),
            slots: HashMap::with_capacity(changes.storage().len()),
            ..Self::default()
        };
        for (address, change) in changes.accounts() {
            undo.accounts.insert(*address, prior.account(address)?);
            if change.storage_wiped {
                undo.wiped.insert(*address);
            }
        }
        for (address, slot, _) in changes.storage() {
            let before = if undo.wiped.contains(address) {
                // Destroyed and re-created in the block: see the module documentation.
                U256::ZERO
            } else {
                prior.slot(address, slot)?
            };
            undo.slots.insert((*address, *slot), before);
        }
        Ok(undo)
    }

    /// The redo record of block `number` (with `hash`): every key its `changes` write, at its
    /// value after the block, and the code it deploys. Needs no read: the diff carries the
    /// new values.
    pub fn after(number: u64, hash: B256, changes: &ChangeSet) -> Self {
        let mut redo = BlockUndo {
            number,
            accounts: HashMap::with_capacity(changes.accounts().len()),
            slots: HashMap::with_capacity(changes.storage().len()),
            hash: Some(hash),
            ..Self::default()
        };
        for (address, change) in changes.accounts() {
            redo.accounts.insert(*address, change.state);
            if change.storage_wiped {
                redo.wiped.insert(*address);
            }
        }
        for (address, slot, value) in changes.storage() {
            redo.slots.insert((*address, *slot), *value);
        }
        for (hash, code) in changes.bytecodes() {
            redo.codes.insert(*hash, code.clone());
        }
        redo
    }

    /// The block it undoes (or redoes).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Its approximate heap size.
    pub fn bytes(&self) -> usize {
        self.accounts.len() * ACCOUNT_BYTES
            + self.slots.len() * SLOT_BYTES
            + self.codes.values().map(|c| c.len() + 64).sum::<usize>()
            + 64
    }
}

/// A block applied above the last commit: what it wrote, and its header.
#[derive(Debug)]
struct AheadBlock {
    redo: Arc<BlockUndo>,
    header: StoredHeader,
}

/// The bounds of a [`StateWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLimits {
    /// Blocks before the head whose state is served (0: the head only).
    pub blocks: u64,
    /// Most bytes the undo records may take; the oldest go first.
    pub max_bytes: usize,
}

impl Default for WindowLimits {
    /// geth's 128 recent states, within 256 MiB.
    fn default() -> Self {
        Self {
            blocks: 128,
            max_bytes: 256 << 20,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Consecutive blocks, oldest first.
    blocks: VecDeque<Arc<BlockUndo>>,
    bytes: usize,
    /// Consecutive blocks above the last commit, oldest first (kept whatever the window's
    /// bounds: they are the head; the apply thread commits when they grow past its bound).
    ahead: VecDeque<AheadBlock>,
    ahead_bytes: usize,
}

/// The undo records of the last applied blocks, shared by the apply thread (which pushes)
/// and the RPC (which reads).
#[derive(Debug)]
pub struct StateWindow {
    limits: WindowLimits,
    inner: RwLock<Inner>,
}

impl StateWindow {
    /// An empty window with `limits`.
    pub fn new(limits: WindowLimits) -> Self {
        Self {
            limits,
            inner: RwLock::new(Inner::default()),
        }
    }

    /// Whether it keeps anything (a window of 0 blocks keeps nothing, and the apply thread
    /// need not capture).
    pub fn enabled(&self) -> bool {
        self.limits.blocks > 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds the undo record of the block just applied. A block that does not follow the last
    /// one (the apply thread went back after a failure) starts the window over.
    pub fn push(&self, undo: BlockUndo) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.write();
        if inner
            .blocks
            .back()
            .is_some_and(|last| last.number + 1 != undo.number)
        {
            inner.blocks.clear();
            inner.bytes = 0;
        }
        inner.bytes += undo.bytes();
        inner.blocks.push_back(Arc::new(undo));
        // One more block than the window: the window's oldest state is the one before the
        // oldest record. Blocks applied and not yet committed count too, so the window is at
        // least `blocks` deep behind the committed head.
        while inner.blocks.len() as u64 > self.limits.blocks + 1
            || (inner.bytes > self.limits.max_bytes && inner.blocks.len() > 1)
        {
            if let Some(old) = inner.blocks.pop_front() {
                inner.bytes -= old.bytes();
            }
        }
    }

    /// Forgets every record above `number` (blocks applied and then discarded).
    pub fn truncate_after(&self, number: u64) {
        let mut inner = self.write();
        while inner.blocks.back().is_some_and(|b| b.number > number) {
            if let Some(old) = inner.blocks.pop_back() {
                inner.bytes -= old.bytes();
            }
        }
    }

    /// The oldest block whose state can be read while the head is `head`, if the records
    /// reach back past it.
    pub fn oldest(&self, head: u64) -> u64 {
        let inner = self.read();
        match inner.blocks.front() {
            Some(first) if first.number <= head => first.number - 1,
            _ => head,
        }
    }

    /// The records that turn the state after `head` into the state after `at` (`at <= head`),
    /// oldest first, or `None` when the window does not reach back to `at`.
    pub fn undo(&self, at: u64, head: u64) -> Option<Vec<Arc<BlockUndo>>> {
        if at >= head {
            return Some(Vec::new());
        }
        let inner = self.read();
        let first = inner.blocks.front()?.number;
        if at + 1 < first {
            return None;
        }
        let records: Vec<Arc<BlockUndo>> = inner
            .blocks
            .iter()
            .filter(|b| b.number > at && b.number <= head)
            .cloned()
            .collect();
        (records.len() as u64 == head - at).then_some(records)
    }

    /// Adds block `redo.number()`, applied and not committed, with its header. A block that
    /// does not follow the last one starts the list over.
    pub fn push_ahead(&self, redo: BlockUndo, header: StoredHeader) {
        let mut inner = self.write();
        if inner
            .ahead
            .back()
            .is_some_and(|last| last.redo.number + 1 != redo.number)
        {
            inner.ahead.clear();
            inner.ahead_bytes = 0;
        }
        inner.ahead_bytes += redo.bytes();
        inner.ahead.push_back(AheadBlock {
            redo: Arc::new(redo),
            header,
        });
    }

    /// Gives block `number`, served above the last commit, its state root, computed after
    /// it was served. Readers that took their snapshot before see the block without it.
    pub fn set_ahead_root(&self, number: u64, root: B256) {
        let mut inner = self.write();
        if let Some(block) = inner.ahead.iter_mut().find(|b| b.redo.number == number) {
            block.header.state_root = Some(root);
        }
    }

    /// Forgets the blocks above the last commit up to `number`, now committed. A reader that
    /// took its snapshot before the commit finds them gone and takes a new snapshot.
    pub fn committed(&self, number: u64) {
        let mut inner = self.write();
        while inner.ahead.front().is_some_and(|b| b.redo.number <= number) {
            if let Some(old) = inner.ahead.pop_front() {
                inner.ahead_bytes -= old.redo.bytes();
            }
        }
    }

    /// Forgets every block above `number` (applied and then discarded), ahead and in the
    /// window.
    pub fn discard_after(&self, number: u64) {
        self.truncate_after(number);
        let mut inner = self.write();
        while inner.ahead.back().is_some_and(|b| b.redo.number > number) {
            if let Some(old) = inner.ahead.pop_back() {
                inner.ahead_bytes -= old.redo.bytes();
            }
        }
    }

    /// The redo records that turn the committed state after block `committed` into the
    /// state after `at` (`at > committed`), newest first, or `None` when some block between
    /// is not held (committed since the caller's snapshot was taken).
    pub fn ahead(&self, committed: u64, at: u64) -> Option<Vec<Arc<BlockUndo>>> {
        let inner = self.read();
        let records: Vec<Arc<BlockUndo>> = inner
            .ahead
            .iter()
            .rev()
            .filter(|b| b.redo.number > committed && b.redo.number <= at)
            .map(|b| b.redo.clone())
            .collect();
        (records.len() as u64 == at.saturating_sub(committed)).then_some(records)
    }

    /// The header of block `number` if it is above the last commit.
    pub fn ahead_header(&self, number: u64) -> Option<StoredHeader> {
        let inner = self.read();
        let first = inner.ahead.front()?.redo.number;
        let block = inner
            .ahead
            .get(usize::try_from(number.checked_sub(first)?).ok()?)?;
        (block.redo.number == number).then(|| block.header.clone())
    }

    /// The number of the block with `hash` if it is above the last commit.
    pub fn ahead_number(&self, hash: &B256) -> Option<u64> {
        let inner = self.read();
        inner
            .ahead
            .iter()
            .find(|b| b.header.hash == *hash)
            .map(|b| b.redo.number)
    }

    /// Blocks above the last commit.
    pub fn ahead_len(&self) -> usize {
        self.read().ahead.len()
    }

    /// Approximate bytes of the redo records above the last commit.
    pub fn ahead_bytes(&self) -> usize {
        self.read().ahead_bytes
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.read().blocks.len()
    }

    /// Whether it holds no block.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate bytes held.
    pub fn bytes(&self) -> usize {
        self.read().bytes
    }
}

/// The state after some block `at`: a committed snapshot read through records, the first
/// record that names a key giving its value. Either the undo records of the blocks after
/// `at`, oldest first (`at` below the snapshot), or the redo records of the blocks up to
/// `at`, newest first (`at` above it).
#[derive(Debug)]
pub struct PastState<S> {
    head: S,
    undo: Vec<Arc<BlockUndo>>,
}

impl<S> PastState<S> {
    /// The state after block `at`, given the snapshot's state and the records of the blocks
    /// between, in the order that gives each key its value at `at` (see
    /// [`StateWindow::undo`] and [`StateWindow::ahead`]). With no records it is the
    /// snapshot's state.
    pub fn new(head: S, undo: Vec<Arc<BlockUndo>>) -> Self {
        Self { head, undo }
    }

    /// Code deployed by a block the records redo, by hash.
    pub fn code_override(&self, hash: &B256) -> Option<Bytes> {
        self.undo
            .iter()
            .find_map(|block| block.codes.get(hash).cloned())
    }

    /// The hash of block `number` if a redo record holds it.
    pub fn block_hash_override(&self, number: u64) -> Option<B256> {
        self.undo
            .iter()
            .find(|block| block.number == number)
            .and_then(|block| block.hash)
    }

    /// The head's state underneath.
    pub fn head(&self) -> &S {
        &self.head
    }

    /// The account's state before the first block after `at` that changed it, if any did.
    pub fn account_override(&self, address: &Address) -> Option<Option<AccountState>> {
        self.undo
            .iter()
            .find_map(|block| block.accounts.get(address).copied())
    }

    /// The slot's value before the first block after `at` that changed it (or wiped its
    /// account), if any did.
    pub fn slot_override(&self, address: &Address, slot: &U256) -> Option<U256> {
        self.undo.iter().find_map(|block| {
            block
                .slots
                .get(&(*address, *slot))
                .copied()
                .or_else(|| block.wiped.contains(address).then_some(U256::ZERO))
        })
    }
}

impl<S> PastState<S> {
    /// The same state as an overlay of the snapshot's, for proofs through its trie: each key
    /// set to its value in the first record that has it, and an account a record wipes
    /// cleared of the slots no earlier record names, as [`Self::slot_override`] reads them.
    pub fn overlay(&self) -> StateOverlay {
        let mut overlay = StateOverlay::new();
        for block in &self.undo {
            for (address, state) in &block.accounts {
                overlay.set_account(*address, *state);
            }
            for ((address, slot), value) in &block.slots {
                overlay.set_slot(*address, *slot, *value);
            }
            for address in &block.wiped {
                overlay.clear_storage(*address);
            }
        }
        overlay
    }
}

impl<S: PriorState> PriorState for PastState<S> {
    fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError> {
        match self.account_override(address) {
            Some(state) => Ok(state),
            None => self.head.account(address),
        }
    }

    fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError> {
        match self.slot_override(address, slot) {
            Some(value) => Ok(value),
            None => self.head.slot(address, slot),
        }
    }
}

impl<S> gigas_evm::revm::database_interface::DatabaseRef for PastState<S>
where
    S: gigas_evm::revm::database_interface::DatabaseRef,
{
    type Error = S::Error;

    fn basic_ref(
        &self,
        address: Address,
    ) -> Result<Option<gigas_evm::revm::state::AccountInfo>, Self::Error> {
        match self.account_override(&address) {
            Some(state) => Ok(state.map(|a| gigas_evm::revm::state::AccountInfo {
                balance: a.balance,
                nonce: a.nonce,
                code_hash: a.code_hash,
                code: None,
                ..Default::default()
            })),
            None => self.head.basic_ref(address),
        }
    }

    fn code_by_hash_ref(
        &self,
        code_hash: B256,
    ) -> Result<gigas_evm::revm::state::Bytecode, Self::Error> {
        // Code is kept by hash and never removed: the snapshot has every code a past state
        // names, and the redo records the code deployed since.
        if let Some(code) = self.code_override(&code_hash) {
            return Ok(gigas_evm::revm::state::Bytecode::new_raw(code));
        }
        self.head.code_by_hash_ref(code_hash)
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, Self::Error> {
        match self.slot_override(&address, &index) {
            Some(value) => Ok(value),
            None => self.head.storage_ref(address, index),
        }
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, Self::Error> {
        match self.block_hash_override(number) {
            Some(hash) => Ok(hash),
            None => self.head.block_hash_ref(number),
        }
    }
}

#[cfg(test)]
mod tests {
    use gigas_primitives::ChangeSetBuilder;

    use super::*;

    /// A toy state: accounts and slots in maps.
    #[derive(Default, Clone)]
    struct Mem {
        accounts: HashMap<Address, AccountState>,
        slots: HashMap<(Address, U256), U256>,
    }

    impl PriorState for Mem {
        fn account(&self, address: &Address) -> Result<Option<AccountState>, StoreError> {
            Ok(self.accounts.get(address).copied())
        }
        fn slot(&self, address: &Address, slot: &U256) -> Result<U256, StoreError> {
            Ok(self
                .slots
                .get(&(*address, *slot))
                .copied()
                .unwrap_or_default())
        }
    }

    impl Mem {
        fn apply(&mut self, changes: &ChangeSet) {
            for (address, change) in changes.accounts() {
                if change.storage_wiped {
                    self.slots.retain(|(a, _), _| a != address);
                }
                match change.state {
                    Some(state) => self.accounts.insert(*address, state),
                    None => self.accounts.remove(address),
                };
            }
            for (address, slot, value) in changes.storage() {
                if value.is_zero() {
                    self.slots.remove(&(*address, *slot));
                } else {
                    self.slots.insert((*address, *slot), *value);
                }
            }
        }
    }

    fn account(balance: u64, nonce: u64) -> AccountState {
        AccountState {
            balance: U256::from(balance),
            nonce,
            code_hash: alloy_primitives::KECCAK256_EMPTY,
        }
    }

    /// A deterministic stream of pseudo-random numbers from `seed`.
    fn lcg(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        }
    }

    /// A random block `number` over `addresses` and `slots` after `state`: balance changes,
    /// re-creations, destroys and slot writes.
    fn random_block(
        state: &Mem,
        number: u64,
        next: &mut impl FnMut() -> u64,
        addresses: &[Address],
        slots: &[U256],
    ) -> ChangeSetBuilder {
        let mut builder = ChangeSetBuilder::new();
        for address in addresses {
            // Only an account without storage is destroyed or re-created (Cancun: see the
            // module documentation).
            let bare = !state.slots.keys().any(|(a, _)| a == address);
            match next() % 5 {
                0 => builder.account(*address, account(next() % 1000, number), false),
                1 if bare => builder.account(*address, account(1, 0), true),
                2 if bare => builder.destroyed(*address),
                _ => {}
            }
            for slot in slots {
                if next().is_multiple_of(3) {
                    builder.slot(*address, *slot, U256::from(next() % 4));
                }
            }
        }
        builder
    }

    /// Every account and slot of `state` equals the model's.
    fn assert_same(
        state: &impl PriorState,
        model: &Mem,
        addresses: &[Address],
        slots: &[U256],
        context: &str,
    ) {
        for address in addresses {
            assert_eq!(
                state.account(address).unwrap(),
                model.account(address).unwrap(),
                "{address} {context}"
            );
            for slot in slots {
                assert_eq!(
                    state.slot(address, slot).unwrap(),
                    model.slot(address, slot).unwrap(),
                    "{address} slot {slot} {context}"
                );
            }
        }
    }

    /// Random blocks over a few keys: every past state read through the window equals the
    /// state the model had after that block, at every depth the window holds, and nothing
    /// older is answered.
    #[test]
    fn past_states_read_through_the_window_equal_the_model() {
        let addresses: Vec<Address> = (1..=4).map(Address::with_last_byte).collect();
        let slots: Vec<U256> = (0..3).map(U256::from).collect();
        let window = StateWindow::new(WindowLimits {
            blocks: 8,
            max_bytes: 1 << 20,
        });
        let mut state = Mem::default();
        let mut history = vec![state.clone()];
        let mut next = lcg(7);
        for number in 1..=40u64 {
            let changes = random_block(&state, number, &mut next, &addresses, &slots).build();
            window.push(BlockUndo::capture(number, &changes, &state).unwrap());
            state.apply(&changes);
            history.push(state.clone());
            let oldest = window.oldest(number);
            // At least the window's 8 blocks below the head.
            assert_eq!(oldest, number.saturating_sub(9));
            for at in oldest..=number {
                let past = PastState::new(state.clone(), window.undo(at, number).unwrap());
                let context = format!("after block {at}, head {number}");
                assert_same(&past, &history[at as usize], &addresses, &slots, &context);
            }
            if oldest > 0 {
                assert!(window.undo(oldest - 1, number).is_none());
            }
        }
        assert_eq!(window.len(), 9);
    }

    /// Random blocks applied above a committed snapshot: the state after every block above
    /// it, read as the snapshot through the redo records, equals the model's; a commit
    /// drops the records it made durable, and a reader whose snapshot is older then finds
    /// them gone (and must take a new one) instead of reading a wrong state.
    #[test]
    fn states_above_the_commit_read_through_redo_records_equal_the_model() {
        let addresses: Vec<Address> = (1..=4).map(Address::with_last_byte).collect();
        let slots: Vec<U256> = (0..3).map(U256::from).collect();
        let window = StateWindow::new(WindowLimits {
            blocks: 0,
            max_bytes: 0,
        });
        let mut state = Mem::default();
        let mut committed = (0u64, state.clone());
        let mut history = vec![state.clone()];
        let mut next = lcg(11);
        let code = Bytes::from_static(&[0x60, 0x00]);
        let code_hash = alloy_primitives::keccak256(&code);
        for number in 1..=60u64 {
            let mut builder = random_block(&state, number, &mut next, &addresses, &slots);
            if number == 5 {
                builder.bytecode(code.clone());
            }
            let changes = builder.build();
            let hash = B256::with_last_byte(number as u8);
            let header = StoredHeader {
                header: alloy_consensus::Header {
                    number,
                    ..Default::default()
                },
                hash,
                signature: None,
                state_root: None,
                commitment: None,
            };
            window.push_ahead(BlockUndo::after(number, hash, &changes), header);
            state.apply(&changes);
            history.push(state.clone());
            // A commit every 7 blocks.
            if number % 7 == 0 {
                let stale = window.ahead(committed.0, number).unwrap();
                window.committed(number);
                assert!(
                    window.ahead(committed.0, number).is_none(),
                    "a snapshot from before the commit finds its records gone"
                );
                drop(stale);
                committed = (number, state.clone());
            }
            let (base, snapshot) = &committed;
            for at in base + 1..=number {
                let redo = window.ahead(*base, at).unwrap();
                assert_eq!(redo.len() as u64, at - base);
                let past = PastState::new(snapshot.clone(), redo);
                let context = format!("after block {at}, committed {base}, head {number}");
                assert_same(&past, &history[at as usize], &addresses, &slots, &context);
                if at >= 5 && *base < 5 {
                    assert_eq!(past.code_override(&code_hash), Some(code.clone()));
                }
                assert_eq!(
                    past.block_hash_override(at),
                    Some(B256::with_last_byte(at as u8))
                );
                assert_eq!(
                    window.ahead_header(at).map(|h| h.hash),
                    Some(B256::with_last_byte(at as u8))
                );
                assert_eq!(
                    window.ahead_number(&B256::with_last_byte(at as u8)),
                    Some(at)
                );
            }
            assert_eq!(window.ahead_len() as u64, number - base);
            assert_eq!(window.ahead_bytes() == 0, number == *base);
            assert!(window.ahead_header(*base).is_none());
        }
        window.discard_after(57);
        assert_eq!(window.ahead_len(), 1);
        assert!(window.ahead(56, 58).is_none());
    }

    #[test]
    fn the_byte_bound_drops_the_oldest_blocks() {
        let window = StateWindow::new(WindowLimits {
            blocks: 100,
            max_bytes: 10 * 1024,
        });
        let state = Mem::default();
        for number in 1..=50u64 {
            let mut builder = ChangeSetBuilder::new();
            for i in 0..10u8 {
                builder.account(Address::with_last_byte(i), account(number, number), false);
            }
            window.push(BlockUndo::capture(number, &builder.build(), &state).unwrap());
        }
        assert!(window.bytes() <= 10 * 1024, "{} bytes", window.bytes());
        assert!(window.len() < 50);
        assert_eq!(window.oldest(50), 50 - window.len() as u64);
        // A gap starts over.
        window.push(BlockUndo::capture(60, &ChangeSet::default(), &state).unwrap());
        assert_eq!(window.len(), 1);
        window.truncate_after(59);
        assert!(window.is_empty());
    }
}

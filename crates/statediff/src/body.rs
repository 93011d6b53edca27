//! The packed body: one block's ChangeSet as enumeration indices and deltas (FORMAT.md,
//! "Body").
//!
//! Encoding is a function of (ChangeSet, key index, prior values), and decoding accepts exactly
//! what encoding produces: counts are exact, integers minimal, keys strictly ordered, and each
//! value carries the operation the encoder would choose. So a decoded body re-encodes to the
//! same bytes, and any other byte string is an error naming its offset.

use alloy_primitives::{keccak256, Address, B256, U256};
use gigas_primitives::keccak::keccak256_all;
use gigas_primitives::{AccountChange, AccountState, ChangeSet, CHANGESET_MAGIC};

use crate::error::{BodyError, BodyErrorKind, Section};
use crate::key::{KeyIndex, StateKey};
use crate::prior::{wiped_addresses, PriorState, PriorValues, EMPTY_ACCOUNT};
use gigas_primitives::hashed::{slot_hashes, HashedKeys};

/// Account flags: a balance value record follows.
const BALANCE: u8 = 1;
/// Account flags: the nonce operation (two bits).
const NONCE_SHIFT: u8 = 1;
const NONCE_MASK: u8 = 3 << NONCE_SHIFT;
/// Account flags: the 32-byte code hash follows.
const CODE: u8 = 1 << 3;
/// Account flags: the account's storage from before the block is wiped.
const WIPED: u8 = 1 << 4;
/// Account flags: the account is destroyed (only with `WIPED`, nothing follows).
const DESTROYED: u8 = 1 << 5;
const ACCOUNT_RESERVED: u8 = !(BALANCE | NONCE_MASK | CODE | WIPED | DESTROYED);

/// Nonce operations.
const NONCE_SAME: u8 = 0;
const NONCE_PLUS_ONE: u8 = 1;
const NONCE_ADD: u8 = 2;
const NONCE_SET: u8 = 3;

/// Value operations (top two bits of the metadata byte; the low six are the length).
const OP_ADD: u8 = 0;
const OP_SUB: u8 = 1;
const OP_REPLACE: u8 = 2;

/// The smallest records of each section, to bound counts by the bytes that remain.
const MIN_REPEATED: usize = 2;
const MIN_FIRST_ACCOUNT: usize = 21;
const MIN_SLOT_GROUP: usize = 20 + 1 + 33;
const MIN_FIRST_SLOT: usize = 33;
const MIN_CODE: usize = 1;

/// A packed body and the keys it writes for the first time, in index order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedBody {
    /// The packed bytes (before compression).
    pub bytes: Vec<u8>,
    /// The keys that get the next indices once the diff is durable.
    pub new_keys: Vec<StateKey>,
}

/// A decoded body: the block's canonical ChangeSet and its new keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBody {
    /// The block's changes.
    pub changes: ChangeSet,
    /// Their canonical encoding ([`ChangeSet::encode`]), which the state checksum covers.
    pub canonical: Vec<u8>,
    /// The keys it writes for the first time, in index order.
    pub new_keys: Vec<StateKey>,
    /// The values the block replaced, as the decoder read them (the slots of wiped accounts
    /// left out: they count as zero): what the state commitment's delta subtracts.
    pub prior: PriorValues,
    /// The keccak of each changed key, in `changes`' order.
    pub hashed: HashedKeys,
}

/// Bytes a value needs (0 for zero).
#[inline]
fn byte_len(x: &U256) -> usize {
    (256 - x.leading_zeros()).div_ceil(8)
}

/// The operation the encoder uses to carry `new` against `prior`: the shortest of adding,
/// subtracting (both wrapping mod 2^256) and replacing; ties go to add, then subtract.
#[inline]
fn pack_value(prior: &U256, new: &U256) -> (u8, U256) {
    let add = new.wrapping_sub(*prior);
    let sub = prior.wrapping_sub(*new);
    let (la, ls, lr) = (byte_len(&add), byte_len(&sub), byte_len(new));
    if la <= ls && la <= lr {
        (OP_ADD, add)
    } else if ls <= lr {
        (OP_SUB, sub)
    } else {
        (OP_REPLACE, *new)
    }
}

#[inline]
fn write_value(out: &mut Vec<u8>, prior: &U256, new: &U256) {
    let (op, operand) = pack_value(prior, new);
    let len = byte_len(&operand);
    out.push(op << 6 | len as u8);
    out.extend_from_slice(&operand.to_be_bytes::<32>()[32 - len..]);
}

#[inline]
fn varint_len(x: u64) -> usize {
    ((64 - x.leading_zeros() as usize).max(1)).div_ceil(7)
}

#[inline]
pub(crate) fn write_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// The nonce operation and its operand.
#[inline]
fn nonce_op(prior: u64, new: u64) -> (u8, u64) {
    if new == prior {
        (NONCE_SAME, 0)
    } else if prior.checked_add(1) == Some(new) {
        (NONCE_PLUS_ONE, 0)
    } else if new > prior && varint_len(new - prior) <= varint_len(new) {
        (NONCE_ADD, new - prior)
    } else {
        (NONCE_SET, new)
    }
}

fn write_account(out: &mut Vec<u8>, change: &AccountChange, prior: Option<AccountState>) {
    let Some(new) = change.state else {
        // A ChangeSet never holds a destroyed account without its wipe.
        out.push(DESTROYED | WIPED);
        return;
    };
    let prior = prior.unwrap_or(EMPTY_ACCOUNT);
    let (nonce, operand) = nonce_op(prior.nonce, new.nonce);
    let mut flags = nonce << NONCE_SHIFT;
    if change.storage_wiped {
        flags |= WIPED;
    }
    if new.balance != prior.balance {
        flags |= BALANCE;
    }
    if new.code_hash != prior.code_hash {
        flags |= CODE;
    }
    out.push(flags);
    if flags & BALANCE != 0 {
        write_value(out, &prior.balance, &new.balance);
    }
    if nonce >= NONCE_ADD {
        write_varint(out, operand);
    }
    if flags & CODE != 0 {
        out.extend_from_slice(new.code_hash.as_slice());
    }
}

fn index_error(at: usize, e: crate::error::StoreError) -> BodyError {
    BodyError {
        at,
        kind: BodyErrorKind::Index(e),
    }
}

fn prior_error(at: usize, e: crate::error::StoreError) -> BodyError {
    BodyError {
        at,
        kind: BodyErrorKind::Prior(e),
    }
}

/// Packs `changes` against the key index and the prior values. Reads only; the caller
/// extends the index with [`PackedBody::new_keys`] once the diff is durable.
pub fn encode_body<I, P>(changes: &ChangeSet, index: &I, prior: &P) -> Result<PackedBody, BodyError>
where
    I: KeyIndex + ?Sized,
    P: PriorState + ?Sized,
{
    let accounts = changes.accounts();
    let storage = changes.storage();
    let code_bytes: usize = changes.bytecodes().iter().map(|(_, c)| c.len() + 4).sum();
    let mut out = Vec::with_capacity(16 + accounts.len() * 16 + storage.len() * 16 + code_bytes);
    let mut new_keys = Vec::new();

    // Prior values are read in the ChangeSet's order (a store reads them sequentially; a
    // PriorValues finds each at its hint), then records are written in index order.
    let mut repeated: Vec<(u64, u32)> = Vec::with_capacity(accounts.len());
    let mut first: Vec<u32> = Vec::new();
    let mut befores: Vec<Option<AccountState>> = Vec::with_capacity(accounts.len());
    for (i, (address, _)) in accounts.iter().enumerate() {
        match index
            .index_of(&StateKey::Account(*address))
            .map_err(|e| index_error(0, e))?
        {
            Some(ix) => repeated.push((ix, i as u32)),
            None => first.push(i as u32),
        }
        befores.push(prior.account(address).map_err(|e| prior_error(0, e))?);
    }
    repeated.sort_unstable_by_key(|r| r.0);
    write_varint(&mut out, repeated.len() as u64);
    let mut next = 0u64;
    for &(ix, i) in &repeated {
        write_varint(&mut out, ix - next);
        next = ix + 1;
        write_account(&mut out, &accounts[i as usize].1, befores[i as usize]);
    }
    write_varint(&mut out, first.len() as u64);
    for &i in &first {
        let (address, change) = &accounts[i as usize];
        out.extend_from_slice(address.as_slice());
        write_account(&mut out, change, befores[i as usize]);
        new_keys.push(StateKey::Account(*address));
    }

    let wiped = wiped_addresses(changes);
    repeated.clear();
    first.clear();
    let mut slot_befores: Vec<U256> = Vec::with_capacity(storage.len());
    for (i, (address, slot, _)) in storage.iter().enumerate() {
        match index
            .index_of(&StateKey::Slot(*address, *slot))
            .map_err(|e| index_error(out.len(), e))?
        {
            Some(ix) => repeated.push((ix, i as u32)),
            None => first.push(i as u32),
        }
        slot_befores.push(if wiped.binary_search(address).is_ok() {
            U256::ZERO
        } else {
            prior
                .slot(address, slot)
                .map_err(|e| prior_error(out.len(), e))?
        });
    }
    repeated.sort_unstable_by_key(|r| r.0);
    write_varint(&mut out, repeated.len() as u64);
    let mut next = 0u64;
    for &(ix, i) in &repeated {
        write_varint(&mut out, ix - next);
        next = ix + 1;
        write_value(&mut out, &slot_befores[i as usize], &storage[i as usize].2);
    }
    // First writes of slots, grouped by address (the ChangeSet's order keeps them together).
    let groups = first
        .iter()
        .enumerate()
        .filter(|&(n, &i)| n == 0 || storage[first[n - 1] as usize].0 != storage[i as usize].0)
        .count();
    write_varint(&mut out, groups as u64);
    let mut n = 0;
    while n < first.len() {
        let address = storage[first[n] as usize].0;
        let len = first[n..]
            .iter()
            .take_while(|&&i| storage[i as usize].0 == address)
            .count();
        out.extend_from_slice(address.as_slice());
        write_varint(&mut out, len as u64);
        for &i in &first[n..n + len] {
            let (_, slot, value) = &storage[i as usize];
            out.extend_from_slice(&slot.to_be_bytes::<32>());
            write_value(&mut out, &slot_befores[i as usize], value);
            new_keys.push(StateKey::Slot(address, *slot));
        }
        n += len;
    }

    write_varint(&mut out, changes.bytecodes().len() as u64);
    for (_, code) in changes.bytecodes() {
        write_varint(&mut out, code.len() as u64);
        out.extend_from_slice(code);
    }
    Ok(PackedBody {
        bytes: out,
        new_keys,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, at: usize, kind: BodyErrorKind) -> BodyError {
        debug_assert!(at <= self.bytes.len());
        BodyError { at, kind }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], BodyError> {
        if n > self.remaining() {
            return Err(self.error(
                self.at,
                BodyErrorKind::Truncated {
                    need: n - self.remaining(),
                },
            ));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    #[inline]
    fn u8(&mut self) -> Result<u8, BodyError> {
        match self.bytes.get(self.at) {
            Some(&b) => {
                self.at += 1;
                Ok(b)
            }
            None => Err(self.error(self.at, BodyErrorKind::Truncated { need: 1 })),
        }
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, BodyError> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.u8()?;
            if shift == 63 && byte > 1 {
                return Err(self.error(start, BodyErrorKind::Varint("over 64 bits")));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 {
                    return Err(self.error(start, BodyErrorKind::Varint("not minimal")));
                }
                return Ok(value);
            }
        }
        Err(self.error(start, BodyErrorKind::Varint("longer than 10 bytes")))
    }

    /// A count of records at least `min` bytes each: no more than the remaining bytes hold,
    /// so that nothing is reserved on a length field's word.
    fn count(&mut self, section: Section, min: usize) -> Result<usize, BodyError> {
        let at = self.at;
        let count = self.varint()?;
        let remaining = self.remaining();
        if count > (remaining / min) as u64 {
            return Err(self.error(
                at,
                BodyErrorKind::Count {
                    section,
                    count,
                    remaining,
                },
            ));
        }
        Ok(count as usize)
    }

    fn address(&mut self) -> Result<Address, BodyError> {
        Ok(Address::from_slice(self.take(20)?))
    }

    /// A value record's structure: its offset (the metadata byte) once the operand is
    /// known to be there. The value itself needs the prior value ([`resolve_value`]).
    #[inline]
    fn value(&mut self) -> Result<usize, BodyError> {
        let at = self.at;
        let meta = self.u8()?;
        let (op, len) = (meta >> 6, (meta & 0x3f) as usize);
        if op > OP_REPLACE || len > 32 {
            return Err(self.error(at, BodyErrorKind::ValueMeta(meta)));
        }
        self.take(len)?;
        Ok(at)
    }

    /// An account record's structure (see [`RawAccount`]).
    fn account(&mut self) -> Result<RawAccount, BodyError> {
        let at = self.at;
        let flags = self.u8()?;
        if flags & ACCOUNT_RESERVED != 0 || (flags & DESTROYED != 0 && flags != DESTROYED | WIPED) {
            return Err(self.error(at, BodyErrorKind::Flags(flags)));
        }
        let mut raw = RawAccount {
            at,
            flags,
            balance_at: 0,
            nonce: 0,
            nonce_at: 0,
            code_at: 0,
        };
        if flags & DESTROYED != 0 {
            return Ok(raw);
        }
        if flags & BALANCE != 0 {
            raw.balance_at = self.value()?;
        }
        if (flags & NONCE_MASK) >> NONCE_SHIFT >= NONCE_ADD {
            raw.nonce_at = self.at;
            raw.nonce = self.varint()?;
        }
        if flags & CODE != 0 {
            raw.code_at = self.at;
            self.take(32)?;
        }
        Ok(raw)
    }

    /// The next index of a gap-encoded, strictly increasing sequence.
    fn next_index(
        &mut self,
        section: Section,
        next: &mut u64,
        len: u64,
    ) -> Result<(usize, u64), BodyError> {
        let at = self.at;
        let gap = self.varint()?;
        let index = next.checked_add(gap).filter(|&i| i < len).ok_or_else(|| {
            self.error(
                at,
                BodyErrorKind::UnknownIndex {
                    section,
                    index: next.saturating_add(gap),
                    len,
                },
            )
        })?;
        *next = index + 1;
        Ok((at, index))
    }
}

/// An account record parsed for its structure; offsets point into the body.
#[derive(Debug, Clone, Copy)]
struct RawAccount {
    /// Offset of the flags byte.
    at: usize,
    flags: u8,
    /// Offset of the balance's value record (when `BALANCE`).
    balance_at: usize,
    /// The nonce operand (for `NONCE_ADD` and `NONCE_SET`) and its offset.
    nonce: u64,
    nonce_at: usize,
    /// Offset of the code hash (when `CODE`).
    code_at: usize,
}

/// The value a record at `at` gives against `prior`, refused unless it is what the encoder
/// writes for that value.
#[inline]
fn resolve_value(bytes: &[u8], at: usize, prior: &U256) -> Result<U256, BodyError> {
    let meta = bytes[at];
    let (op, len) = (meta >> 6, (meta & 0x3f) as usize);
    let operand = U256::from_be_slice(&bytes[at + 1..at + 1 + len]);
    let new = match op {
        OP_ADD => prior.wrapping_add(operand),
        OP_SUB => prior.wrapping_sub(operand),
        _ => operand,
    };
    let (canonical, _) = pack_value(prior, &new);
    if canonical != op || byte_len(&operand) != len {
        return Err(BodyError {
            at,
            kind: BodyErrorKind::NonCanonical("value"),
        });
    }
    Ok(new)
}

/// The account change a record gives against the account's prior state.
fn resolve_account(
    bytes: &[u8],
    raw: &RawAccount,
    prior: Option<AccountState>,
) -> Result<AccountChange, BodyError> {
    let fail = |at, kind| Err(BodyError { at, kind });
    if raw.flags & DESTROYED != 0 {
        return Ok(AccountChange {
            state: None,
            storage_wiped: true,
        });
    }
    let prior = prior.unwrap_or(EMPTY_ACCOUNT);
    let balance = if raw.flags & BALANCE != 0 {
        let balance = resolve_value(bytes, raw.balance_at, &prior.balance)?;
        if balance == prior.balance {
            return fail(
                raw.balance_at,
                BodyErrorKind::NonCanonical("unchanged balance"),
            );
        }
        balance
    } else {
        prior.balance
    };
    let op = (raw.flags & NONCE_MASK) >> NONCE_SHIFT;
    let nonce = match op {
        NONCE_SAME => Some(prior.nonce),
        NONCE_PLUS_ONE => prior.nonce.checked_add(1),
        NONCE_ADD => prior.nonce.checked_add(raw.nonce),
        _ => Some(raw.nonce),
    };
    let Some(nonce) = nonce else {
        return fail(raw.at, BodyErrorKind::NonceOverflow);
    };
    if nonce_op(prior.nonce, nonce).0 != op {
        return fail(raw.at, BodyErrorKind::NonCanonical("nonce"));
    }
    let code_hash = if raw.flags & CODE != 0 {
        let hash = B256::from_slice(&bytes[raw.code_at..raw.code_at + 32]);
        if hash == prior.code_hash {
            return fail(
                raw.code_at,
                BodyErrorKind::NonCanonical("unchanged code hash"),
            );
        }
        hash
    } else {
        prior.code_hash
    };
    Ok(AccountChange {
        state: Some(AccountState {
            nonce,
            balance,
            code_hash,
        }),
        storage_wiped: raw.flags & WIPED != 0,
    })
}

/// A body's records as laid out, before any key or prior value is looked up (pass 1).
struct Structure<'b> {
    /// (offset, index, record)
    repeated_accounts: Vec<(usize, u64, RawAccount)>,
    /// (offset, address, record)
    first_accounts: Vec<(usize, Address, RawAccount)>,
    /// (offset, index, offset of the value)
    repeated_slots: Vec<(usize, u64, usize)>,
    /// (offset, address, slot, offset of the value)
    first_slots: Vec<(usize, Address, U256, usize)>,
    codes: Vec<&'b [u8]>,
}

/// Pass 1: the body's structure; indices must lie below `table_len`.
fn structure(bytes: &[u8], table_len: u64) -> Result<Structure<'_>, BodyError> {
    let mut r = Reader { bytes, at: 0 };
    let count = r.count(Section::RepeatedAccounts, MIN_REPEATED)?;
    let mut repeated_accounts: Vec<(usize, u64, RawAccount)> = Vec::with_capacity(count);
    let mut next = 0u64;
    for _ in 0..count {
        let (at, ix) = r.next_index(Section::RepeatedAccounts, &mut next, table_len)?;
        repeated_accounts.push((at, ix, r.account()?));
    }
    let section = Section::FirstAccounts;
    let count = r.count(section, MIN_FIRST_ACCOUNT)?;
    let mut first_accounts: Vec<(usize, Address, RawAccount)> = Vec::with_capacity(count);
    for _ in 0..count {
        let at = r.at;
        let address = r.address()?;
        if first_accounts.last().is_some_and(|(_, l, _)| *l >= address) {
            return Err(r.error(at, BodyErrorKind::Unordered { section }));
        }
        first_accounts.push((at, address, r.account()?));
    }
    let count = r.count(Section::RepeatedSlots, MIN_REPEATED)?;
    let mut repeated_slots: Vec<(usize, u64, usize)> = Vec::with_capacity(count);
    let mut next = 0u64;
    for _ in 0..count {
        let (at, ix) = r.next_index(Section::RepeatedSlots, &mut next, table_len)?;
        repeated_slots.push((at, ix, r.value()?));
    }
    let section = Section::FirstSlots;
    let groups = r.count(section, MIN_SLOT_GROUP)?;
    let mut first_slots: Vec<(usize, Address, U256, usize)> = Vec::new();
    let mut last: Option<Address> = None;
    for _ in 0..groups {
        let at = r.at;
        let address = r.address()?;
        if last.is_some_and(|l| l >= address) {
            return Err(r.error(at, BodyErrorKind::Unordered { section }));
        }
        last = Some(address);
        let count_at = r.at;
        let count = r.count(section, MIN_FIRST_SLOT)?;
        if count == 0 {
            return Err(r.error(count_at, BodyErrorKind::NonCanonical("empty slot group")));
        }
        first_slots.reserve(count);
        let mut last_slot: Option<U256> = None;
        for _ in 0..count {
            let at = r.at;
            let slot = U256::from_be_slice(r.take(32)?);
            if last_slot.is_some_and(|l| l >= slot) {
                return Err(r.error(at, BodyErrorKind::Unordered { section }));
            }
            last_slot = Some(slot);
            first_slots.push((at, address, slot, r.value()?));
        }
    }
    let section = Section::Bytecodes;
    let count = r.count(section, MIN_CODE)?;
    let mut codes: Vec<&[u8]> = Vec::with_capacity(count);
    let mut last: Option<B256> = None;
    for _ in 0..count {
        let at = r.at;
        let len = r.varint()?;
        if len > r.remaining() as u64 {
            let need = (len - r.remaining() as u64).min(usize::MAX as u64) as usize;
            return Err(r.error(r.at, BodyErrorKind::Truncated { need }));
        }
        let code = r.take(len as usize)?;
        let hash = keccak256(code);
        if last.is_some_and(|l| l >= hash) {
            return Err(r.error(at, BodyErrorKind::Unordered { section }));
        }
        last = Some(hash);
        codes.push(code);
    }
    if r.remaining() != 0 {
        return Err(r.error(r.at, BodyErrorKind::Trailing(r.remaining())));
    }

    Ok(Structure {
        repeated_accounts,
        first_accounts,
        repeated_slots,
        first_slots,
        codes,
    })
}

/// The keys a body writes, for warming a store's pages before the body is decoded against
/// it: the first writes' keys as they stand in the body, the repeated writes' keys as
/// `index` names them, skipping indices it does not hold (keys indexed since `index`'s
/// state, which a follower's open group has and a committed view does not). Only the
/// structure is checked; [`decode_body`] checks the rest.
pub fn body_keys<I>(bytes: &[u8], index: &I) -> Result<Vec<StateKey>, BodyError>
where
    I: KeyIndex + ?Sized,
{
    let body = structure(bytes, u64::MAX)?;
    let mut keys = Vec::with_capacity(
        body.repeated_accounts.len()
            + body.first_accounts.len()
            + body.repeated_slots.len()
            + body.first_slots.len(),
    );
    let repeated = body
        .repeated_accounts
        .iter()
        .map(|(at, ix, _)| (*at, *ix))
        .chain(body.repeated_slots.iter().map(|(at, ix, _)| (*at, *ix)));
    for (at, ix) in repeated {
        if let Some(key) = index.key_at(ix).map_err(|e| index_error(at, e))? {
            keys.push(key);
        }
    }
    keys.extend(
        body.first_accounts
            .iter()
            .map(|(_, address, _)| StateKey::Account(*address)),
    );
    keys.extend(
        body.first_slots
            .iter()
            .map(|(_, address, slot, _)| StateKey::Slot(*address, *slot)),
    );
    Ok(keys)
}

/// Decodes a packed body against the key index and the prior values. Total: any byte string
/// either decodes to the ChangeSet whose encoding it is, or is an error naming its offset;
/// nothing is allocated beyond what the bytes can hold. Reads only; the caller extends the
/// index with [`DecodedBody::new_keys`] once the diff is verified.
///
/// It works in passes: the structure first (every count, index and length, no lookups), then
/// the keys of the repeated writes, then the prior values and values in key order. Each
/// pass's lookups are independent of each other, so a store's cache misses overlap instead of
/// queueing behind the parsing of the record before.
pub fn decode_body<I, P>(bytes: &[u8], index: &I, prior: &P) -> Result<DecodedBody, BodyError>
where
    I: KeyIndex + ?Sized,
    P: PriorState + ?Sized,
{
    let table_len = index.len().map_err(|e| index_error(0, e))?;
    let Structure {
        repeated_accounts,
        first_accounts,
        repeated_slots,
        first_slots,
        codes,
    } = structure(bytes, table_len)?;

    // Pass 2: keys. Repeated writes name theirs by index; first writes must have none.
    let mut account_keys: Vec<(Address, u32)> =
        Vec::with_capacity(repeated_accounts.len() + first_accounts.len());
    for (n, &(at, ix, _)) in repeated_accounts.iter().enumerate() {
        match index.key_at(ix).map_err(|e| index_error(at, e))? {
            Some(StateKey::Account(a)) => account_keys.push((a, n as u32)),
            other => {
                return Err(wrong_key(
                    at,
                    Section::RepeatedAccounts,
                    ix,
                    table_len,
                    other,
                ))
            }
        }
    }
    let mut new_keys = Vec::with_capacity(first_accounts.len() + first_slots.len());
    for (n, &(at, address, _)) in first_accounts.iter().enumerate() {
        let key = StateKey::Account(address);
        if let Some(ix) = index.index_of(&key).map_err(|e| index_error(at, e))? {
            return Err(already(at, Section::FirstAccounts, ix));
        }
        account_keys.push((address, (repeated_accounts.len() + n) as u32));
        new_keys.push(key);
    }
    let mut slot_keys: Vec<(Address, U256, u32)> =
        Vec::with_capacity(repeated_slots.len() + first_slots.len());
    for (n, &(at, ix, _)) in repeated_slots.iter().enumerate() {
        match index.key_at(ix).map_err(|e| index_error(at, e))? {
            Some(StateKey::Slot(a, s)) => slot_keys.push((a, s, n as u32)),
            other => return Err(wrong_key(at, Section::RepeatedSlots, ix, table_len, other)),
        }
    }
    for (n, &(at, address, slot, _)) in first_slots.iter().enumerate() {
        let key = StateKey::Slot(address, slot);
        if let Some(ix) = index.index_of(&key).map_err(|e| index_error(at, e))? {
            return Err(already(at, Section::FirstSlots, ix));
        }
        slot_keys.push((address, slot, (repeated_slots.len() + n) as u32));
        new_keys.push(key);
    }

    // Passes 3 and 4: prior values and values, in key order. That is the order of the
    // canonical ChangeSet written below, and the order in which a B-tree store (the full
    // node's MDBX) reads fastest.
    account_keys.sort_unstable();
    slot_keys.sort_unstable_by_key(|k| (k.0, k.1));
    let raw_account = |n: u32| {
        let n = n as usize;
        match repeated_accounts.get(n) {
            Some((_, _, raw)) => raw,
            None => &first_accounts[n - repeated_accounts.len()].2,
        }
    };
    let value_at = |n: u32| {
        let n = n as usize;
        match repeated_slots.get(n) {
            Some(&(_, _, at)) => at,
            None => first_slots[n - repeated_slots.len()].3,
        }
    };
    let code_len: usize = codes.iter().map(|c| 36 + c.len()).sum();
    let mut canonical =
        Vec::with_capacity(16 + account_keys.len() * 93 + slot_keys.len() * 84 + code_len);
    canonical.extend_from_slice(&CHANGESET_MAGIC);
    canonical.extend_from_slice(&(account_keys.len() as u32).to_le_bytes());
    // The lookups run in a loop of their own: with nothing else in the loop, the processor
    // keeps several of a store's cache misses in flight at once.
    // Each key is hashed once, here: a store kept by keccak reads with the hash, and the
    // lattice and the writer take it from `DecodedBody::hashed`.
    // Together: eight at a time where the CPU has AVX-512 (`gigas_primitives::keccak`).
    let hashed_accounts = keccak256_all(account_keys.iter().map(|(a, _)| a.as_slice()));
    let mut befores: Vec<Option<AccountState>> = Vec::with_capacity(account_keys.len());
    for (&(address, n), hashed) in account_keys.iter().zip(&hashed_accounts) {
        befores.push(
            prior
                .account_hashed(&address, hashed)
                .map_err(|e| prior_error(raw_account(n).at, e))?,
        );
    }
    let mut wiped: Vec<Address> = Vec::new();
    let mut prior_accounts: Vec<(Address, Option<AccountState>)> =
        Vec::with_capacity(account_keys.len());
    for (&(address, n), before) in account_keys.iter().zip(befores) {
        prior_accounts.push((address, before));
        let raw = raw_account(n);
        let change = resolve_account(bytes, raw, before)?;
        if change.storage_wiped {
            wiped.push(address);
        }
        // gigas-primitives' ChangeSet encoding, version 1 (changeset.rs).
        canonical.extend_from_slice(address.as_slice());
        canonical.push(u8::from(change.state.is_none()) | u8::from(change.storage_wiped) << 1);
        if let Some(state) = &change.state {
            canonical.extend_from_slice(&state.nonce.to_le_bytes());
            canonical.extend_from_slice(&state.balance.to_be_bytes::<32>());
            canonical.extend_from_slice(state.code_hash.as_slice());
        }
    }
    canonical.extend_from_slice(&(slot_keys.len() as u32).to_le_bytes());
    let hashed_slots = slot_hashes(slot_keys.iter().map(|(a, slot, _)| (a, slot)));
    let mut slot_befores: Vec<U256> = Vec::with_capacity(slot_keys.len());
    for (&(address, slot, n), hashed) in slot_keys.iter().zip(&hashed_slots) {
        // `wiped` is sorted: it was filled in address order.
        slot_befores.push(if wiped.binary_search(&address).is_ok() {
            U256::ZERO
        } else {
            prior
                .slot_hashed(&address, &slot, hashed)
                .map_err(|e| prior_error(value_at(n), e))?
        });
    }
    let mut prior_slots: Vec<(Address, U256, U256)> = Vec::with_capacity(slot_keys.len());
    for (&(address, slot, n), before) in slot_keys.iter().zip(&slot_befores) {
        if wiped.binary_search(&address).is_err() {
            prior_slots.push((address, slot, *before));
        }
        let value = resolve_value(bytes, value_at(n), before)?;
        canonical.extend_from_slice(address.as_slice());
        canonical.extend_from_slice(&slot.to_be_bytes::<32>());
        canonical.extend_from_slice(&value.to_be_bytes::<32>());
    }
    canonical.extend_from_slice(&(codes.len() as u32).to_le_bytes());
    for code in &codes {
        canonical.extend_from_slice(keccak256(code).as_slice());
        canonical.extend_from_slice(&(code.len() as u32).to_le_bytes());
        canonical.extend_from_slice(code);
    }
    // ChangeSet::decode builds the ChangeSet from these bytes with plain pushes (a
    // ChangeSetBuilder's sorted maps cost several times more) and checks their order once
    // more: only an index that names one key under two indices can fail it here. The
    // layout is gigas-primitives' version 1; a change there shows up as a decode error in
    // every round-trip test.
    let changes = ChangeSet::decode(&canonical).map_err(|e| {
        index_error(
            0,
            crate::error::StoreError::msg(format!("the index names a key twice in this body: {e}")),
        )
    })?;
    Ok(DecodedBody {
        changes,
        new_keys,
        canonical,
        // Both lists are in key order (the loops above ran in it) and unique (the ChangeSet
        // just decoded from the same keys would have refused a repeat).
        prior: PriorValues::sorted(prior_accounts, prior_slots),
        // In the ChangeSet's order: it was decoded from keys in these loops' order.
        hashed: HashedKeys::from_parts(hashed_accounts, hashed_slots),
    })
}

fn wrong_key(
    at: usize,
    section: Section,
    index: u64,
    len: u64,
    found: Option<StateKey>,
) -> BodyError {
    let kind = match found {
        Some(StateKey::Account(_)) => BodyErrorKind::WrongKind {
            section,
            index,
            found: "account",
        },
        Some(StateKey::Slot(..)) => BodyErrorKind::WrongKind {
            section,
            index,
            found: "slot",
        },
        None => BodyErrorKind::UnknownIndex {
            section,
            index,
            len,
        },
    };
    BodyError { at, kind }
}

fn already(at: usize, section: Section, index: u64) -> BodyError {
    BodyError {
        at,
        kind: BodyErrorKind::AlreadyIndexed { section, index },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_take_the_shortest_operation() {
        let v = |x: u64| U256::from(x);
        assert_eq!(pack_value(&v(100), &v(101)), (OP_ADD, v(1)));
        assert_eq!(pack_value(&v(100), &v(99)), (OP_SUB, v(1)));
        assert_eq!(pack_value(&(U256::MAX - v(5)), &v(3)), (OP_ADD, v(9)));
        assert_eq!(pack_value(&(U256::MAX - v(5)), &v(0)), (OP_REPLACE, v(0)));
        assert_eq!(pack_value(&v(0), &v(0)), (OP_ADD, v(0)));
        assert_eq!(pack_value(&(v(1) << 200), &v(7)), (OP_REPLACE, v(7)));
        let mut out = Vec::new();
        write_value(&mut out, &v(1000), &v(1001));
        assert_eq!(out, [OP_ADD << 6 | 1, 1]);
        assert_eq!(resolve_value(&out, 0, &v(1000)), Ok(v(1001)));
        // The same value written as a replacement is refused.
        let replaced = [OP_REPLACE << 6 | 2, 0x03, 0xe9];
        assert!(matches!(
            resolve_value(&replaced, 0, &v(1000)),
            Err(BodyError {
                kind: BodyErrorKind::NonCanonical(_),
                ..
            })
        ));
    }

    #[test]
    fn varints_are_minimal_and_bounded() {
        for x in [0u64, 1, 127, 128, 300, u64::MAX >> 1, u64::MAX] {
            let mut out = Vec::new();
            write_varint(&mut out, x);
            assert_eq!(out.len(), varint_len(x));
            let mut r = Reader { bytes: &out, at: 0 };
            assert_eq!(r.varint(), Ok(x));
        }
        for bad in [
            &[0x80, 0x00][..],
            &[0xff; 11][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..],
            &[0x80][..],
        ] {
            let mut r = Reader { bytes: bad, at: 0 };
            assert!(r.varint().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn nonces_take_the_shortest_operation() {
        assert_eq!(nonce_op(5, 5), (NONCE_SAME, 0));
        assert_eq!(nonce_op(5, 6), (NONCE_PLUS_ONE, 0));
        assert_eq!(nonce_op(5, 9), (NONCE_ADD, 4));
        assert_eq!(nonce_op(5, 1), (NONCE_SET, 1));
        assert_eq!(nonce_op(0, 1 << 40), (NONCE_ADD, 1 << 40));
        assert_eq!(nonce_op(u64::MAX, 0), (NONCE_SET, 0));
    }
}

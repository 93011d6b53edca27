//! The packed body: one block's ChangeSet as enumeration indices and deltas (FORMAT.md,
//! "Body").
//!
//! Encoding is a function of (ChangeSet, key index, prior values), and decoding accepts exactly
//! what encoding produces: counts are exact, integers minimal, keys strictly ordered, and each
//! value carries the operation the encoder would choose. So a decoded body re-encodes to the
//! same bytes, and any other byte string is an error naming its offset.

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use gigas_primitives::{AccountChange, AccountState, ChangeSet, ChangeSetBuilder};

use crate::error::{BodyError, BodyErrorKind, Section};
use crate::key::{KeyIndex, StateKey};
use crate::prior::{wiped_addresses, PriorState, EMPTY_ACCOUNT};

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
    /// The keys it writes for the first time, in index order.
    pub new_keys: Vec<StateKey>,
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

    let mut repeated: Vec<(u64, u32)> = Vec::with_capacity(accounts.len());
    let mut first: Vec<u32> = Vec::new();
    for (i, (address, _)) in accounts.iter().enumerate() {
        match index
            .index_of(&StateKey::Account(*address))
            .map_err(|e| index_error(out.len(), e))?
        {
            Some(ix) => repeated.push((ix, i as u32)),
            None => first.push(i as u32),
        }
    }
    repeated.sort_unstable_by_key(|r| r.0);
    write_varint(&mut out, repeated.len() as u64);
    let mut next = 0u64;
    for &(ix, i) in &repeated {
        write_varint(&mut out, ix - next);
        next = ix + 1;
        let (address, change) = &accounts[i as usize];
        let before = prior
            .account(address)
            .map_err(|e| prior_error(out.len(), e))?;
        write_account(&mut out, change, before);
    }
    write_varint(&mut out, first.len() as u64);
    for &i in &first {
        let (address, change) = &accounts[i as usize];
        out.extend_from_slice(address.as_slice());
        let before = prior
            .account(address)
            .map_err(|e| prior_error(out.len(), e))?;
        write_account(&mut out, change, before);
        new_keys.push(StateKey::Account(*address));
    }

    let wiped = wiped_addresses(changes);
    let slot_prior = |address: &Address, slot: &U256, at: usize| -> Result<U256, BodyError> {
        if wiped.binary_search(address).is_ok() {
            Ok(U256::ZERO)
        } else {
            prior.slot(address, slot).map_err(|e| prior_error(at, e))
        }
    };
    repeated.clear();
    first.clear();
    for (i, (address, slot, _)) in storage.iter().enumerate() {
        match index
            .index_of(&StateKey::Slot(*address, *slot))
            .map_err(|e| index_error(out.len(), e))?
        {
            Some(ix) => repeated.push((ix, i as u32)),
            None => first.push(i as u32),
        }
    }
    repeated.sort_unstable_by_key(|r| r.0);
    write_varint(&mut out, repeated.len() as u64);
    let mut next = 0u64;
    for &(ix, i) in &repeated {
        write_varint(&mut out, ix - next);
        next = ix + 1;
        let (address, slot, value) = &storage[i as usize];
        let before = slot_prior(address, slot, out.len())?;
        write_value(&mut out, &before, value);
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
            let before = slot_prior(&address, slot, out.len())?;
            write_value(&mut out, &before, value);
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

    #[inline]
    fn value(&mut self, prior: &U256) -> Result<U256, BodyError> {
        let at = self.at;
        let meta = self.u8()?;
        let (op, len) = (meta >> 6, (meta & 0x3f) as usize);
        if op > OP_REPLACE || len > 32 {
            return Err(self.error(at, BodyErrorKind::ValueMeta(meta)));
        }
        let operand = U256::from_be_slice(self.take(len)?);
        let new = match op {
            OP_ADD => prior.wrapping_add(operand),
            OP_SUB => prior.wrapping_sub(operand),
            _ => operand,
        };
        let (canonical, _) = pack_value(prior, &new);
        if canonical != op || byte_len(&operand) != len {
            return Err(self.error(at, BodyErrorKind::NonCanonical("value")));
        }
        Ok(new)
    }

    fn account(&mut self, prior: Option<AccountState>) -> Result<AccountChange, BodyError> {
        let at = self.at;
        let flags = self.u8()?;
        if flags & ACCOUNT_RESERVED != 0 {
            return Err(self.error(at, BodyErrorKind::Flags(flags)));
        }
        if flags & DESTROYED != 0 {
            if flags != DESTROYED | WIPED {
                return Err(self.error(at, BodyErrorKind::Flags(flags)));
            }
            return Ok(AccountChange {
                state: None,
                storage_wiped: true,
            });
        }
        let prior = prior.unwrap_or(EMPTY_ACCOUNT);
        let balance = if flags & BALANCE != 0 {
            let value_at = self.at;
            let balance = self.value(&prior.balance)?;
            if balance == prior.balance {
                return Err(self.error(value_at, BodyErrorKind::NonCanonical("unchanged balance")));
            }
            balance
        } else {
            prior.balance
        };
        let op = (flags & NONCE_MASK) >> NONCE_SHIFT;
        let nonce_at = self.at;
        let nonce = match op {
            NONCE_SAME => prior.nonce,
            NONCE_PLUS_ONE => prior
                .nonce
                .checked_add(1)
                .ok_or_else(|| self.error(at, BodyErrorKind::NonceOverflow))?,
            NONCE_ADD => {
                let delta = self.varint()?;
                prior
                    .nonce
                    .checked_add(delta)
                    .ok_or_else(|| self.error(nonce_at, BodyErrorKind::NonceOverflow))?
            }
            _ => self.varint()?,
        };
        if nonce_op(prior.nonce, nonce).0 != op {
            return Err(self.error(nonce_at, BodyErrorKind::NonCanonical("nonce")));
        }
        let code_hash = if flags & CODE != 0 {
            let code_at = self.at;
            let hash = B256::from_slice(self.take(32)?);
            if hash == prior.code_hash {
                return Err(self.error(code_at, BodyErrorKind::NonCanonical("unchanged code hash")));
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
            storage_wiped: flags & WIPED != 0,
        })
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

/// Decodes a packed body against the key index and the prior values. Total: any byte string
/// either decodes to the ChangeSet whose encoding it is, or is an error naming its offset;
/// nothing is allocated beyond what the bytes can hold. Reads only; the caller extends the
/// index with [`DecodedBody::new_keys`] once the diff is verified.
pub fn decode_body<I, P>(bytes: &[u8], index: &I, prior: &P) -> Result<DecodedBody, BodyError>
where
    I: KeyIndex + ?Sized,
    P: PriorState + ?Sized,
{
    let mut r = Reader { bytes, at: 0 };
    let table_len = index.len().map_err(|e| index_error(0, e))?;
    let mut builder = ChangeSetBuilder::new();
    let mut new_keys = Vec::new();
    let mut wiped: Vec<Address> = Vec::new();

    let section = Section::RepeatedAccounts;
    let count = r.count(section, MIN_REPEATED)?;
    let mut next = 0u64;
    for _ in 0..count {
        let (at, ix) = r.next_index(section, &mut next, table_len)?;
        let address = match index.key_at(ix).map_err(|e| index_error(at, e))? {
            Some(StateKey::Account(a)) => a,
            Some(StateKey::Slot(..)) => {
                return Err(r.error(
                    at,
                    BodyErrorKind::WrongKind {
                        section,
                        index: ix,
                        found: "slot",
                    },
                ))
            }
            None => {
                return Err(r.error(
                    at,
                    BodyErrorKind::UnknownIndex {
                        section,
                        index: ix,
                        len: table_len,
                    },
                ))
            }
        };
        let before = prior.account(&address).map_err(|e| prior_error(at, e))?;
        let change = r.account(before)?;
        add_account(&mut builder, &mut wiped, address, change);
    }

    let section = Section::FirstAccounts;
    let count = r.count(section, MIN_FIRST_ACCOUNT)?;
    new_keys.reserve(count);
    let mut last: Option<Address> = None;
    for _ in 0..count {
        let at = r.at;
        let address = r.address()?;
        if last.is_some_and(|l| l >= address) {
            return Err(r.error(at, BodyErrorKind::Unordered { section }));
        }
        last = Some(address);
        let key = StateKey::Account(address);
        if let Some(ix) = index.index_of(&key).map_err(|e| index_error(at, e))? {
            return Err(r.error(at, BodyErrorKind::AlreadyIndexed { section, index: ix }));
        }
        let before = prior.account(&address).map_err(|e| prior_error(at, e))?;
        let change = r.account(before)?;
        add_account(&mut builder, &mut wiped, address, change);
        new_keys.push(key);
    }
    wiped.sort_unstable();
    let slot_prior = |address: &Address, slot: &U256, at: usize| -> Result<U256, BodyError> {
        if wiped.binary_search(address).is_ok() {
            Ok(U256::ZERO)
        } else {
            prior.slot(address, slot).map_err(|e| prior_error(at, e))
        }
    };

    let section = Section::RepeatedSlots;
    let count = r.count(section, MIN_REPEATED)?;
    let mut next = 0u64;
    for _ in 0..count {
        let (at, ix) = r.next_index(section, &mut next, table_len)?;
        let (address, slot) = match index.key_at(ix).map_err(|e| index_error(at, e))? {
            Some(StateKey::Slot(a, s)) => (a, s),
            Some(StateKey::Account(_)) => {
                return Err(r.error(
                    at,
                    BodyErrorKind::WrongKind {
                        section,
                        index: ix,
                        found: "account",
                    },
                ))
            }
            None => {
                return Err(r.error(
                    at,
                    BodyErrorKind::UnknownIndex {
                        section,
                        index: ix,
                        len: table_len,
                    },
                ))
            }
        };
        let before = slot_prior(&address, &slot, at)?;
        let value = r.value(&before)?;
        builder.slot(address, slot, value);
    }

    let section = Section::FirstSlots;
    let groups = r.count(section, MIN_SLOT_GROUP)?;
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
        new_keys.reserve(count);
        let mut last_slot: Option<U256> = None;
        for _ in 0..count {
            let at = r.at;
            let slot = U256::from_be_slice(r.take(32)?);
            if last_slot.is_some_and(|l| l >= slot) {
                return Err(r.error(at, BodyErrorKind::Unordered { section }));
            }
            last_slot = Some(slot);
            let key = StateKey::Slot(address, slot);
            if let Some(ix) = index.index_of(&key).map_err(|e| index_error(at, e))? {
                return Err(r.error(at, BodyErrorKind::AlreadyIndexed { section, index: ix }));
            }
            let before = slot_prior(&address, &slot, at)?;
            let value = r.value(&before)?;
            builder.slot(address, slot, value);
            new_keys.push(key);
        }
    }

    let section = Section::Bytecodes;
    let count = r.count(section, MIN_CODE)?;
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
        builder.bytecode(Bytes::copy_from_slice(code));
    }

    if r.remaining() != 0 {
        return Err(r.error(r.at, BodyErrorKind::Trailing(r.remaining())));
    }
    Ok(DecodedBody {
        changes: builder.build(),
        new_keys,
    })
}

fn add_account(
    builder: &mut ChangeSetBuilder,
    wiped: &mut Vec<Address>,
    address: Address,
    change: AccountChange,
) {
    if change.storage_wiped {
        wiped.push(address);
    }
    match change.state {
        Some(state) => builder.account(address, state, change.storage_wiped),
        None => builder.destroyed(address),
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
        let mut r = Reader { bytes: &out, at: 0 };
        assert_eq!(r.value(&v(1000)), Ok(v(1001)));
        // The same value written as a replacement is refused.
        let replaced = [OP_REPLACE << 6 | 2, 0x03, 0xe9];
        let mut r = Reader {
            bytes: &replaced,
            at: 0,
        };
        assert!(matches!(
            r.value(&v(1000)),
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

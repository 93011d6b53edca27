//! Batches: the puts and deletes committed together, and their canonical order.

use super::{MAX_BATCH_LEN, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::error::{Error, Result};

/// A set of puts and deletes, committed together.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    data: Vec<u8>,
    pub(super) ops: Vec<Op>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Op {
    key_at: u32,
    key_len: u16,
    value_at: u32,
    value_len: u32,
    pub(super) delete: bool,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `ops` operations of about `bytes` bytes in total.
    pub fn with_capacity(ops: usize, bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(bytes),
            ops: Vec::with_capacity(ops),
        }
    }

    /// Sets `key` to `value`. A later operation on the same key in this batch wins.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.push(key, value, false)
    }

    /// Deletes `key`. Deleting an absent key writes nothing.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.push(key, &[], true)
    }

    fn push(&mut self, key: &[u8], value: &[u8], delete: bool) -> Result<()> {
        if key.len() > MAX_KEY_LEN {
            return Err(Error::TooLarge {
                what: "key",
                len: key.len(),
                limit: MAX_KEY_LEN,
            });
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::TooLarge {
                what: "value",
                len: value.len(),
                limit: MAX_VALUE_LEN,
            });
        }
        if self.data.len() + key.len() + value.len() > MAX_BATCH_LEN {
            return Err(Error::TooLarge {
                what: "batch",
                len: self.data.len() + key.len() + value.len(),
                limit: MAX_BATCH_LEN,
            });
        }
        let key_at = self.data.len() as u32;
        self.data.extend_from_slice(key);
        let value_at = self.data.len() as u32;
        self.data.extend_from_slice(value);
        self.ops.push(Op {
            key_at,
            key_len: key.len() as u16,
            value_at,
            value_len: value.len() as u32,
            delete,
        });
        Ok(())
    }

    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub(super) fn key(&self, op: &Op) -> &[u8] {
        &self.data[op.key_at as usize..op.key_at as usize + op.key_len as usize]
    }

    pub(super) fn value(&self, op: &Op) -> &[u8] {
        &self.data[op.value_at as usize..op.value_at as usize + op.value_len as usize]
    }

    /// Sorts by key, keeping only the last operation on each key.
    pub(super) fn canonicalize(&mut self) {
        let data = &self.data;
        let key = |op: &Op| &data[op.key_at as usize..op.key_at as usize + op.key_len as usize];
        // Callers that already sort their keys (the sequencer's ChangeSet is sorted) pay one
        // linear check.
        if self.ops.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
            return;
        }
        // Stable: equal keys stay in insertion order, so the last one is the one kept.
        self.ops.sort_by(|a, b| key(a).cmp(key(b)));
        let mut out: Vec<Op> = Vec::with_capacity(self.ops.len());
        for op in self.ops.drain(..) {
            match out.last_mut() {
                Some(last) if key(last) == key(&op) => *last = op,
                _ => out.push(op),
            }
        }
        self.ops = out;
    }
}

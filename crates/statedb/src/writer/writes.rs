//! The writer's writes of a block into the open group: code, hashed state, the key index and
//! the rows, held in memory or written into the transaction (at a root inside it, an idle
//! write, or the commit).

use super::*;

pub(crate) fn cursor<'tx>(
    dbs: &Dbs,
    txn: &'tx RwTxUnsync,
    table: Table,
) -> Result<Cursor<'tx, Rw>, StateDbError> {
    txn.cursor(dbs.get(table))
        .map_err(StateDbError::mdbx("open a cursor"))
}

impl StateWriter<'_> {
    pub(super) fn write_codes(&mut self, changes: &ChangeSet) {
        for (hash, code) in changes.bytecodes() {
            self.rows.put_code(*hash, code);
        }
    }

    /// Writes the block's keys by their keccak (`keys`, which fit `changes`: see
    /// [`StateWriter::write_block`]) into the hashed tables and the changed-key sets.
    pub(super) fn write_hashed(
        &mut self,
        changes: &ChangeSet,
        keys: &HashedKeys,
    ) -> Result<(), StateDbError> {
        let tracking = self.current.trie_valid;
        if tracking {
            self.changed.add_block(changes, keys);
        }
        let account_changes = || {
            changes
                .accounts()
                .iter()
                .zip(keys.accounts())
                .map(|((_, change), &h)| (h, change.state, change.storage_wiped))
        };
        let slot_changes = || {
            changes
                .storage()
                .iter()
                .zip(keys.slots())
                .map(|((_, _, value), &(h, s))| (h, s, *value))
        };
        match self.options.hashed_writes {
            HashedWrites::SortedPerGroup => {
                if let Some(pending) = self.pending.as_mut() {
                    for (h, _, wiped) in account_changes() {
                        pending.account(h, wiped);
                    }
                    for (h, s, _) in slot_changes() {
                        pending.slot(h, s);
                    }
                }
                for (h, _, wiped) in account_changes() {
                    if wiped {
                        // Its storage trie as the cache knows it is gone.
                        self.trie_cache.forget_storage(&h);
                    }
                }
                self.hashed.write_block(changes, keys);
                Ok(())
            }
            HashedWrites::ChangeSetOrder => {
                if tracking {
                    for (h, _, wiped) in account_changes() {
                        if wiped {
                            self.trie_cache.forget_storage(&h);
                        }
                    }
                }
                let (dbs, txn) = self.reads()?;
                let buf = &mut Vec::with_capacity(128);
                let trie_dbs = dbs.trie();
                let mut accounts = rows::cursor(trie_dbs, txn, TrieTable::HashedAccounts)?;
                let mut storage = rows::cursor(trie_dbs, txn, TrieTable::HashedStorages)?;
                let mut trie = rows::cursor(trie_dbs, txn, TrieTable::StoragesTrie)?;
                for (h, state, wiped) in account_changes() {
                    if wiped {
                        rows::delete_dups(&mut storage, h.as_slice())?;
                        if tracking {
                            rows::delete_dups(&mut trie, h.as_slice())?;
                        }
                    }
                    put_hashed_account(&mut accounts, &h, state.as_ref(), buf)?;
                }
                for (h, s, value) in slot_changes() {
                    rows::put_slot(
                        &mut storage,
                        TrieTable::HashedStorages,
                        h.as_slice(),
                        &s,
                        &value,
                        false,
                        buf,
                    )?;
                }
                Ok(())
            }
        }
    }

    /// Writes the group's state changes not yet in the transaction, and the trie nodes
    /// roots over them changed, in key order, and empties the layer: the transaction then
    /// holds all of them (a root inside it, or the commit, follows).
    pub(super) fn flush_hashed(&mut self) -> Result<(), StateDbError> {
        if self.hashed.is_empty() {
            self.pending = None;
            return Ok(());
        }
        self.write_pending(false)?;
        self.hashed = TrieLayer::default();
        self.pending = None;
        Ok(())
    }

    /// Writes what of the layer is not in the transaction yet (see [`crate::flush`]).
    ///
    /// With `keep`, the in-memory trie's nodes go into the layer too: later layered roots
    /// read the last commit with the layer over it, not the transaction, and may load
    /// them again once the trie folds them back into hashes.
    pub(super) fn write_pending(&mut self, keep: bool) -> Result<u64, StateDbError> {
        if self.in_flight.is_some() {
            return Err(StateDbError::Invariant {
                what: "the group's layer was to be written while a root read it".into(),
            });
        }
        // The account trie's nodes the in-memory trie changed since its last drain.
        let drained = self.sparse.drain()?;
        if drained.is_empty() && self.pending.as_ref().is_some_and(PendingKeys::is_empty) {
            return Ok(0);
        }
        let start = Instant::now();
        let tracking = self.current.trie_valid;
        let (dbs, txn) = (self.db.dbs(), open_txn(&self.txn)?);
        let mut written = flush::write_layer(
            dbs.trie(),
            txn,
            &self.hashed,
            self.pending.as_ref(),
            tracking,
        )?;
        // After the layer's: newer than any node a walk put there.
        store::write_account_nodes(
            dbs.trie(),
            txn,
            drained.iter().map(|(path, node)| (path, node)),
        )?;
        written.entries += drained.len() as u64;
        if keep {
            self.hashed.account_nodes.extend(drained);
        }
        // Now that nothing it holds is unwritten, all of it may fold back into hashes.
        self.sparse.enforce_budget()?;
        for h in &written.wiped {
            self.trie_cache.forget_storage(h);
        }
        self.db
            .metrics()
            .hashed_flush_seconds
            .observe(start.elapsed().as_secs_f64());
        Ok(written.entries)
    }

    /// Writes the open group's state changes made since the last call (or since the
    /// commit) into the write transaction, so that the commit has less left to write: for a
    /// follower waiting for its next block (see [`crate::flush`]). Visible to readers only at
    /// the commit, as before. Returns the entries written. On error the group is discarded.
    pub fn flush_idle(&mut self) -> Result<u64, StateDbError> {
        // The root in flight records its trie nodes into the layer this writes.
        self.unreported = self.finish_root()?;
        if self.background {
            // Nothing to write ahead: the commit thread writes the whole group. A commit
            // that landed meanwhile is taken in.
            self.land_commit(false)?;
            return Ok(0);
        }
        let result = self.write_idle();
        self.discard_on_error(result)
    }

    pub(super) fn write_idle(&mut self) -> Result<u64, StateDbError> {
        self.write_rows()?;
        if self.hashed.is_empty() {
            return Ok(0);
        }
        let entries = self.write_pending(true)?;
        self.pending = Some(PendingKeys::default());
        Ok(entries)
    }

    pub(super) fn write_index(
        &mut self,
        block: u64,
        new_keys: &[StateKey],
    ) -> Result<(), StateDbError> {
        let mut index = self.current.index_len;
        for key in new_keys {
            if let Some(existing) = self.indexed(key)? {
                return Err(StateDbError::KeyAlreadyIndexed {
                    block,
                    key: *key,
                    index: existing,
                });
            }
            self.rows.push_key(*key, index)?;
            index += 1;
        }
        self.current.index_len = index;
        Ok(())
    }

    /// Writes the group's code, key-index and header rows into the transaction.
    pub(super) fn write_rows(&mut self) -> Result<(), StateDbError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let (dbs, txn) = (self.db.dbs(), open_txn(&self.txn)?);
        self.rows.write(dbs, txn)?;
        self.rows = GroupRows::default();
        Ok(())
    }
}

//! The writer's state roots: layered over the last commit on their own threads (and
//! overlapping the next blocks), or inside the write transaction, and what each cost.

use super::*;

impl StateWriter<'_> {
    /// Whether the due root may run while the writer takes the next blocks
    /// ([`WriterOptions::overlap_roots`]).
    pub(super) fn can_overlap(&self) -> bool {
        self.options.roots_overlap() && self.current.trie_valid && self.layer_exact
    }

    /// Starts the root at the tip on its own thread over the group's layer, which it takes:
    /// the writer's reads and the next blocks' writes go to a fresh layer over it.
    pub(super) fn launch_root(&mut self) -> Result<(), StateDbError> {
        let start = Instant::now();
        let block = self.current.tip.number;
        let changed = self.take_changed()?;
        let layer = Arc::new(std::mem::take(&mut self.hashed));
        let (env, dbs, parallelism) = (
            self.db.env().clone(),
            *self.db.dbs().trie(),
            self.parallelism(),
        );
        let (root_layer, sparse) = (Arc::clone(&layer), Arc::clone(&self.sparse));
        let handle = std::thread::Builder::new()
            .name("gigas-root".into())
            .spawn(move || {
                layer::layered_root(
                    &env,
                    &dbs,
                    &root_layer,
                    changed,
                    parallelism,
                    None,
                    Some(&sparse),
                )
                .map_err(StateDbError::from)
            });
        let handle = match handle {
            Ok(handle) => handle,
            Err(e) => {
                // The layer goes back for the discard that follows to find it whole.
                self.hashed = Arc::try_unwrap(layer).unwrap_or_default();
                return Err(StateDbError::Invariant {
                    what: format!("cannot start a thread for the root of block {block}: {e}"),
                });
            }
        };
        self.in_flight = Some(RootInFlight {
            block,
            layer,
            started: start,
            spent: start.elapsed().as_secs_f64(),
            handle,
        });
        Ok(())
    }

    /// Waits for the root in flight ([`WriterOptions::overlap_roots`]), if any, takes in
    /// what it computed, and stores it in its block's header row. Returns it, or else a
    /// root that ended inside an earlier call that could not return it
    /// ([`StateWriter::flush_idle`], [`StateWriter::compute_root`]); `None` when neither
    /// exists. On error the group is discarded.
    pub fn finish_root(&mut self) -> Result<Option<RootInfo>, StateDbError> {
        let Some(flight) = self.in_flight.take() else {
            return Ok(self.unreported.take());
        };
        let result = self.land_root(flight).map(Some);
        self.discard_on_error(result)
    }

    pub(super) fn land_root(&mut self, flight: RootInFlight) -> Result<RootInfo, StateDbError> {
        let waiting = Instant::now();
        let RootInFlight {
            block,
            layer,
            started,
            spent,
            handle,
        } = flight;
        let computed = handle
            .join()
            .map_err(|_| StateDbError::Trie(gigas_triedb::TrieDbError::RootThreadPanicked))?;
        let seconds = started.elapsed().as_secs_f64();
        let mut layer = Arc::try_unwrap(layer).map_err(|_| StateDbError::Invariant {
            what: format!("the layer of block {block}'s root is still shared after it ended"),
        })?;
        let root = computed?;
        let signed = self.rows.header(block).map(|h| h.header.state_root);
        self.verify_root(block, signed, root.outcome.root)?;
        if let Some(pending) = self.pending.as_mut() {
            pending.root(&root);
        }
        let (outcome, split) = layer.record_root(root);
        let later = std::mem::replace(&mut self.hashed, layer);
        self.hashed.absorb(later);
        if !self.rows.set_state_root(block, outcome.root) {
            return Err(StateDbError::Invariant {
                what: format!("block {block}'s header row left the group before its root landed"),
            });
        }
        let waited = spent + waiting.elapsed().as_secs_f64();
        Ok(self.note_root(block, outcome, false, split, seconds, waited))
    }

    /// Computes the root at the tip now (whatever `root_every` says), stores it in the tip's
    /// header row, and returns it. Rebuilds the trie from the hashed tables if it was off.
    /// Part of the open group: durable with the next commit.
    pub fn compute_root(&mut self) -> Result<RootInfo, StateDbError> {
        self.ensure_txn()?;
        self.unreported = self.finish_root()?;
        let result = self.root_now().and_then(|root| {
            let number = self.current.tip.number;
            let signed = match self.rows.header(number) {
                Some(row) => Some(row.header.state_root),
                None => self.header(number)?.map(|row| row.header.state_root),
            };
            self.verify_root(number, signed, root.root)?;
            if !self.rows.set_state_root(number, root.root) {
                // An idle write took the row into the transaction.
                if let Some(mut header) = self.header(number)? {
                    header.state_root = Some(root.root);
                    self.rows.put_header(header);
                }
            }
            Ok(root)
        });
        if result.is_ok() {
            self.dirty = true;
        }
        self.discard_on_error(result)
    }

    /// Checks a computed root against the block's signed `stateRoot`
    /// ([`WriterOptions::verify_roots`]); `signed` is `None` only for a block whose header the
    /// writer does not hold (a bug, reported as such).
    pub(super) fn verify_root(
        &self,
        block: u64,
        signed: Option<B256>,
        computed: B256,
    ) -> Result<(), StateDbError> {
        if !self.options.verify_roots {
            return Ok(());
        }
        match signed {
            Some(header) if header == computed => Ok(()),
            Some(header) => {
                self.db.metrics().root_mismatches.inc();
                Err(StateDbError::StateRootMismatch {
                    block,
                    header,
                    computed,
                })
            }
            None => Err(StateDbError::Invariant {
                what: format!("block {block}'s root was computed without its header at hand"),
            }),
        }
    }

    /// The keys the next root recomputes: the writer's since the last root and, when the
    /// writer commits on its own thread, nothing else (it keeps them in memory across
    /// commits); else with those the changed-key tables carried over a commit, which it
    /// empties.
    pub(super) fn take_changed(&mut self) -> Result<ChangedKeys, StateDbError> {
        let pending = std::mem::take(&mut self.changed);
        if self.background {
            return Ok(pending);
        }
        let (dbs, txn) = self.reads()?;
        let mut changed = store::load_changed(dbs.trie(), txn)?;
        changed.merge(pending);
        store::clear_changed(dbs.trie(), txn)?;
        Ok(changed)
    }

    /// Whether roots run over the last commit and the open group's changes in memory
    /// ([`gigas_triedb::layer`]), on [`WriterOptions::root_threads`] threads, instead of
    /// inside the write transaction: whenever the hashed writes wait for the commit. The
    /// trie cache describes the trie as the writer sees it either way (the layer over the
    /// last commit, or the transaction, which hold the same nodes once the layer is
    /// written), so it serves both.
    /// Within a group, once a root ran inside the transaction (a rebuild), the rest of the
    /// group's roots do too: the transaction then holds trie writes the layer does not.
    pub(super) fn layered(&self) -> bool {
        self.layer_exact
            && self.options.layered_roots
            && self.options.hashed_writes == HashedWrites::SortedPerGroup
    }

    pub(super) fn parallelism(&self) -> Parallelism {
        let threads = match self.options.root_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
        // Each thread holds a read transaction (a reader slot) for the root's length.
        .min(MAX_ROOT_THREADS);
        Parallelism {
            threads,
            min_split_accounts: self.options.root_split_min_accounts,
        }
    }

    pub(super) fn root_now(&mut self) -> Result<RootInfo, StateDbError> {
        let start = Instant::now();
        let rebuilt = !self.current.trie_valid;
        let layered = !rebuilt && self.layered();
        if !layered {
            self.flush_hashed()?;
            self.layer_exact = false;
            // This root changes the trie behind its back.
            self.sparse.clear();
        }
        let mut split = false;
        let cached = self.trie_cache.enabled();
        if cached {
            self.trie_cache.begin_root();
        }
        let outcome = if layered {
            let changed = self.take_changed()?;
            let cache = cached.then_some(&self.trie_cache);
            let root = layer::layered_root(
                self.db.env(),
                self.db.dbs().trie(),
                &self.hashed,
                changed,
                self.parallelism(),
                cache,
                Some(self.sparse.as_ref()),
            )?;
            root.update_cache(&self.trie_cache);
            if let Some(pending) = self.pending.as_mut() {
                pending.root(&root);
            }
            let (outcome, was_split) = self.hashed.record_root(root);
            split = was_split;
            outcome
        } else {
            let pending = std::mem::take(&mut self.changed);
            // Not `reads()`: the cache is borrowed beside the transaction.
            let (dbs, txn) = (self.db.dbs().trie(), open_txn(&self.txn)?);
            if rebuilt {
                self.trie_cache.clear();
                root::rebuild_root(dbs, txn)?
            } else {
                let mut changed = store::load_changed(dbs, txn)?;
                changed.merge(pending);
                root::update_root(dbs, txn, changed, &self.trie_cache)?
            }
        };
        let seconds = start.elapsed().as_secs_f64();
        let block = self.current.tip.number;
        Ok(self.note_root(block, outcome, rebuilt, split, seconds, seconds))
    }

    /// Keeps a computed root as the last one, and counts it.
    pub(super) fn note_root(
        &mut self,
        block: u64,
        outcome: RootOutcome,
        rebuilt: bool,
        split: bool,
        seconds: f64,
        waited_seconds: f64,
    ) -> RootInfo {
        let evicted = self.trie_cache.enforce_budget();
        self.current.trie_valid = true;
        self.current.last_root = Some((block, outcome.root));
        let metrics = self.db.metrics();
        metrics.trie_update_seconds.observe(seconds);
        metrics.trie_leaves_hashed.inc_by(outcome.leaves);
        metrics
            .last_root_block
            .set(i64::try_from(block).unwrap_or(i64::MAX));
        if rebuilt {
            metrics.trie_rebuilds.inc();
        }
        let cache = self.trie_cache.stats();
        metrics.trie_cache_evicted.inc_by(evicted);
        metrics
            .trie_cache_hits
            .inc_by(cache.hits.saturating_sub(self.cache_reported.hits));
        metrics
            .trie_cache_misses
            .inc_by(cache.misses.saturating_sub(self.cache_reported.misses));
        self.cache_reported = cache;
        metrics
            .trie_cache_bytes
            .set(i64::try_from(cache.bytes).unwrap_or(i64::MAX));
        metrics
            .trie_cache_entries
            .set(i64::try_from(cache.entries).unwrap_or(i64::MAX));
        debug!(block, root = %outcome.root, rebuilt, leaves = outcome.leaves, seconds, "state root");
        RootInfo {
            block,
            root: outcome.root,
            rebuilt,
            changed_accounts: outcome.changed_accounts,
            storage_tries: outcome.storage_tries,
            leaves: outcome.leaves,
            skipped: outcome.skipped,
            remembered: outcome.remembered,
            rereads: outcome.rereads,
            split,
            seconds,
            waited_seconds,
        }
    }
}

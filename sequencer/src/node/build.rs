//! Block building: the producer's loop, selecting and executing transactions, sealing.

use super::*;

/// Signs a header and returns it sealed.
pub(super) fn seal(signer: &PrivateKeySigner, header: Header) -> Result<HeadBlock, NodeError> {
    let hash = header.hash_slow();
    let signature = signer
        .sign_hash_sync(&hash)
        .map_err(|e| NodeError::Sign(header.number, e.to_string()))?;
    Ok(HeadBlock {
        header,
        hash,
        signature,
    })
}

/// A header of `chain` with every field that is the same in all its blocks set (no ommers,
/// no withdrawals or blobs, empty roots, the Gigas extra data); a block fills in the rest.
pub(super) fn header_template(chain: &ChainConfig) -> Header {
    Header {
        ommers_hash: EMPTY_OMMER_ROOT_HASH,
        transactions_root: EMPTY_ROOT_HASH,
        receipts_root: EMPTY_ROOT_HASH,
        difficulty: U256::ZERO,
        gas_limit: chain.block_gas_limit,
        extra_data: Bytes::from_static(EXTRA_DATA),
        base_fee_per_gas: Some(chain.base_fee.initial),
        withdrawals_root: Some(EMPTY_ROOT_HASH),
        blob_gas_used: Some(0),
        excess_blob_gas: Some(0),
        parent_beacon_block_root: Some(B256::ZERO),
        requests_hash: (chain.fork >= gigas_primitives::Hardfork::Prague)
            .then_some(EMPTY_REQUESTS_HASH),
        ..Header::default()
    }
}

impl Node {
    /// Produces blocks every block time until [`Self::stop`], committing them on a second
    /// thread (see [`Pipeline`]). Runs on its own thread; returns the first error of either.
    pub fn run_producer(self: &Arc<Self>) -> Result<(), NodeError> {
        let block_time = Duration::from_millis(self.config.chain.block_time_ms);
        let mut executor = ParallelExecutor::new(self.config.threads)
            .with_jit(Some(self.jit.clone()))
            .building();
        let policy = Policy::default();
        let mut pipeline = Pipeline::start(self)?;
        let mut next = Instant::now() + block_time;
        let result = loop {
            if self.stop.load(Ordering::SeqCst) {
                break Ok(());
            }
            let now = Instant::now();
            if next > now {
                std::thread::sleep((next - now).min(Duration::from_millis(50)));
                continue;
            }
            // A block that took longer than the block time starts the next one at once.
            next = (next + block_time).max(Instant::now());
            if let Err(e) = self.produce(&mut executor, &policy, &mut pipeline) {
                break Err(e);
            }
        };
        // Whatever was handed to the committer is committed before the producer returns,
        // then the state trie up to it (its commit waits for nothing once the committer has
        // published the head; after a failure it gives up and the next start replays).
        let finished = pipeline.finish();
        self.stop.store(true, Ordering::SeqCst);
        let trie = lock(&self.trie)
            .flush()
            .map_err(trie_error(&self.config.datadir.join(TRIE_DIR)));
        result.and(finished).and(trie)
    }

    /// Takes the transactions the block left out (invalid where they stood: a nonce or a
    /// balance an earlier transaction of the block changed) out of `selected`, and out of the
    /// pool unless they may become valid: only the skipped transaction goes, never its
    /// sender's later ones (an EIP-7702 authorization that bumped a victim's nonce makes the
    /// victim's next transaction the valid one). A nonce too high waits in the pool behind
    /// its gap (its predecessor was skipped here).
    pub(super) fn drop_skipped(
        &self,
        number: u64,
        skipped: &[gigas_blockstm::Skipped],
        selected: &mut Vec<Arc<gigas_txpool::PooledTx>>,
    ) {
        for s in skipped {
            let Some(tx) = selected.get(s.index) else {
                continue;
            };
            let gap = matches!(
                s.reason,
                gigas_evm::revm::context::result::InvalidTransaction::NonceTooHigh { .. }
            );
            debug!(block = number, tx = %s.hash, sender = %tx.sender, reason = %s.reason, kept = gap, "left a transaction invalid in its place out of the block");
            self.metrics.transactions_dropped.inc();
            if !gap {
                self.pool.remove_invalid(s.hash, &s.reason.to_string());
            }
        }
        let mut index = 0;
        let mut next_skipped = skipped.iter().map(|s| s.index).peekable();
        selected.retain(|_| {
            let keep = next_skipped.next_if_eq(&index).is_none();
            index += 1;
            keep
        });
    }

    /// Builds, executes and seals one block on the producer's tip and hands it to the
    /// committer; the pool moves on to the tip at once.
    pub(super) fn produce(
        self: &Arc<Self>,
        executor: &mut ParallelExecutor,
        policy: &Policy,
        pipeline: &mut Pipeline,
    ) -> Result<u64, NodeError> {
        let started = Instant::now();
        pipeline.forget_committed(self);
        if self.journal_needs_rewrite() {
            self.start_journal_rewrite();
        }
        let parent = pipeline.tip.clone();
        let number = parent.header.number + 1;
        let chain = &self.config.chain;
        let base_fee = self.base_fee_after(&parent.header);
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // Several blocks share a second at sub-second block times; time never runs back.
        let timestamp = unix.max(parent.header.timestamp);
        let prevrandao = keccak256([parent.hash.as_slice(), &number.to_be_bytes()].concat());
        let beneficiary = self.signer.address();

        let t = Instant::now();
        let mut selected =
            self.pool
                .best(base_fee, chain.block_gas_limit, self.config.max_block_txs);
        self.metrics.stage(Stage::Select, seconds(t));

        let t = Instant::now();
        // The header's own fields drive execution, so that a re-execution from the header
        // (the prestate tracer, a verifying full node) sees the same environment.
        let mut header = Header {
            parent_hash: parent.hash,
            beneficiary,
            number,
            timestamp,
            mix_hash: prevrandao,
            base_fee_per_gas: Some(base_fee),
            ..header_template(chain)
        };
        let block_env = gigas_evm::env::block_env_of(&header, chain.fork);
        let vilmo = self.vilmo_read();
        let tip = pipeline.view(self, &vilmo);
        let db = RevmState {
            source: tip,
            hashes: &tip,
        };
        let txs: Vec<PreparedTx> = selected
            .iter()
            .map(|tx| PreparedTx {
                hash: tx.hash,
                tx_type: tx.tx.tx_type(),
                env: gigas_evm::env::tx_env_from(tx.tx.inner(), tx.sender),
            })
            .collect();
        let block = PreparedBlock::synthetic(&self.spec, block_env.clone(), txs);
        let (_, executed) = executor
            .execute_with_policy(&block, &db, policy, &self.blockstm)
            .map_err(|source| NodeError::Execution {
                block: number,
                source,
            })?;
        // Every sender the block selected is re-read after it, the skipped ones' too: the pool
        // then drops what became unpayable or stale and promotes what a moved nonce unblocked.
        let senders: Vec<Address> = {
            let mut s: Vec<Address> = selected.iter().map(|t| t.sender).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        if !executed.skipped.is_empty() {
            self.drop_skipped(number, &executed.skipped, &mut selected);
        }
        let outcome = executed.outcome;
        self.metrics.stage(Stage::Execute, seconds(t));

        let t = Instant::now();
        let transactions: Arc<[Recovered<TxEnvelope>]> =
            selected.iter().map(|tx| tx.tx.clone()).collect();
        let receipts: Vec<ReceiptEnvelope> =
            outcome.receipts.iter().map(|r| r.envelope()).collect();
        let (receipts_root, logs_bloom) = receipts_root_and_bloom(&outcome.receipts);
        let envelopes: Vec<&TxEnvelope> = transactions.iter().map(|t| t.inner()).collect();
        let transactions_root = alloy_consensus::proofs::calculate_transaction_root(&envelopes);
        let changeset = outcome.changes.encode();
        // The seal's time goes on after the root (the header needs it).
        let sealing = seconds(t);

        let t = Instant::now();
        let hashed = gigas_primitives::HashedKeys::of(&outcome.changes);
        let root = {
            let mut trie = lock(&self.trie);
            let root = trie
                .apply(number, &outcome.changes, &hashed)
                .map_err(|source| NodeError::Root {
                    block: number,
                    source,
                })?;
            self.trie_memory[0].store(trie.sparse_trie_stats().bytes, Ordering::Relaxed);
            self.trie_memory[1].store(root.layer_bytes, Ordering::Relaxed);
            root
        };
        self.metrics.stage(Stage::Root, seconds(t));
        self.metrics.root_leaves.inc_by(root.leaves);

        let t = Instant::now();
        header.state_root = root.head.root;
        header.transactions_root = transactions_root;
        header.receipts_root = receipts_root;
        header.logs_bloom = logs_bloom;
        header.gas_used = outcome.gas_used();
        let hash = header.hash_slow();
        let signature = self
            .signer
            .sign_hash_sync(&hash)
            .map_err(|e| NodeError::Sign(number, e.to_string()))?;
        let writes =
            changeset_writes(&outcome.changes, &tip).map_err(crate::state::StateError::from)?;
        let state_history: Vec<(Vec<u8>, Option<Vec<u8>>)> = writes
            .iter()
            .map(|(key, _)| {
                gigas_primitives::state_keys::StateReader::get(&tip, key)
                    .map(|old| (key.clone(), old))
            })
            .collect::<Result<_, _>>()
            .map_err(crate::state::StateError::from)?;
        let prior = PriorValues::capture(&outcome.changes, &db)
            .map_err(|e| NodeError::Prior(number, e.to_string()))?;
        drop(vilmo);
        self.metrics.stage(Stage::Seal, sealing + seconds(t));

        let sealed = HeadBlock {
            header,
            hash,
            signature,
        };
        pipeline.send(
            self,
            SealedBlock {
                block: CommittedBlock {
                    header: sealed.header.clone(),
                    hash,
                    signature,
                    transactions: transactions.clone(),
                    receipts,
                    changeset,
                    changes: outcome.changes,
                    hashed,
                    prior,
                },
                state_history,
                pending: Arc::new(crate::state::PendingBlock::new(
                    number,
                    hash,
                    writes,
                    transactions,
                )),
                started,
            },
        )?;
        // The pool moves to the tip now, so that the next block selects what follows.
        let next_base_fee = self.base_fee_after(&sealed.header);
        {
            let vilmo = self.vilmo_read();
            let view = PoolView(RevmState {
                source: pipeline.view(self, &vilmo),
                hashes: &self.history,
            });
            self.pool.on_block(&view, &senders, next_base_fee);
        }
        pipeline.tip = sealed;
        Ok(number)
    }

    /// The base fee of the block after `parent`.
    pub(super) fn base_fee_after(&self, parent: &Header) -> u64 {
        self.config.chain.base_fee.next(
            parent.gas_used,
            parent.gas_limit,
            parent.base_fee_per_gas.unwrap_or_default(),
        )
    }
}

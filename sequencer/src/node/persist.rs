//! Committing: the pipeline from the producer to the committer thread, and the committer's
//! durable steps (the history first, then Vilmo, then publication).

use super::*;

/// A block the producer sealed, on its way to the committer.
pub(super) struct SealedBlock {
    /// What subscribers receive once it is published.
    pub(super) block: CommittedBlock,
    /// The old value of every key it writes, for the history.
    pub(super) state_history: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Its writes (for Vilmo) and transactions, as the producer's tip reads them meanwhile.
    pub(super) pending: Arc<crate::state::PendingBlock>,
    /// When its selection started.
    pub(super) started: Instant,
}

/// The producer's side of the block pipeline.
///
/// Two threads share the work of a block. The **producer** selects, executes and seals block
/// `N + 1` on its *tip*: Vilmo's committed state with the writes of the blocks it has sealed
/// but the committer has not yet committed laid over it ([`crate::state::Tip`]). It hands each
/// sealed block to the **committer** through a channel of [`PIPELINE_DEPTH`] slots and moves
/// the pool to the tip at once. The committer takes every block waiting (up to
/// [`MAX_GROUP`]), makes them durable in the history (one block-log append and sync), then commits
/// each block's state to Vilmo and publishes it, in order. So a block's durable commit (the
/// fsync-bound part of its time) overlaps the next block's execution (the CPU-bound part), and
/// when the disk falls behind, blocks queue and commit in groups that share one sync.
///
/// The order of durable steps is the one the crate documentation argues from: a block's
/// history before its state, its state before its publication, and blocks in order. The
/// producer forgets an in-flight block only after the committer reports it in Vilmo.
pub(super) struct Pipeline {
    pub(super) sender: Option<std::sync::mpsc::SyncSender<SealedBlock>>,
    pub(super) committer: Option<std::thread::JoinHandle<Result<(), NodeError>>>,
    /// The blocks sealed and not yet known to be in Vilmo, oldest first.
    pub(super) pending: Vec<Arc<crate::state::PendingBlock>>,
    /// The last block sealed (or the published head at start).
    pub(super) tip: HeadBlock,
}

impl Pipeline {
    pub(super) fn start(node: &Arc<Node>) -> Result<Self, NodeError> {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<SealedBlock>(PIPELINE_DEPTH);
        let committer_node = node.clone();
        let committer = std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || {
                let committer = Committer::of(&committer_node);
                let mut last_published = None;
                // Ends when the producer drops its sender and every block sent is committed.
                while let Ok(first) = receiver.recv() {
                    let mut group = vec![first];
                    while group.len() < MAX_GROUP {
                        match receiver.try_recv() {
                            Ok(next) => group.push(next),
                            Err(_) => break,
                        }
                    }
                    if let Err(e) = committer.commit_group(group, &mut last_published) {
                        tracing::error!(error = %e, "committing blocks failed: the producer stops");
                        return Err(e);
                    }
                }
                Ok(())
            })
            .map_err(|e| NodeError::Pipeline(format!("cannot start the committer thread: {e}")))?;
        Ok(Self {
            sender: Some(sender),
            committer: Some(committer),
            pending: Vec::new(),
            tip: node.head(),
        })
    }

    /// The tip's state over `vilmo` (a read guard of the node's store).
    pub(super) fn view<'a>(&'a self, node: &'a Node, vilmo: &'a Vilmo) -> crate::state::Tip<'a> {
        crate::state::Tip {
            vilmo,
            pending: &self.pending,
            history: &node.history,
        }
    }

    /// Drops the in-flight blocks the committer has put in Vilmo.
    pub(super) fn forget_committed(&mut self, node: &Node) {
        let through = node.committed_through.load(Ordering::SeqCst);
        let before = self.pending.len();
        self.pending.retain(|b| b.number > through);
        if self.pending.len() != before {
            node.set_pending(&self.pending);
        }
    }

    /// Hands `sealed` to the committer (waiting while [`PIPELINE_DEPTH`] blocks wait).
    pub(super) fn send(&mut self, node: &Node, sealed: SealedBlock) -> Result<(), NodeError> {
        self.pending.push(sealed.pending.clone());
        node.set_pending(&self.pending);
        if self.sender.as_ref().is_some_and(|s| s.send(sealed).is_ok()) {
            return Ok(());
        }
        // The committer stopped: its error says why.
        Err(self
            .join()
            .err()
            .unwrap_or_else(|| NodeError::Pipeline("the committer thread stopped".into())))
    }

    /// Closes the channel and waits for the committer to commit what it holds.
    pub(super) fn finish(mut self) -> Result<(), NodeError> {
        self.sender = None;
        self.join()
    }

    pub(super) fn join(&mut self) -> Result<(), NodeError> {
        self.sender = None;
        match self.committer.take() {
            Some(handle) => handle.join().unwrap_or_else(|_| {
                Err(NodeError::Pipeline("the committer thread panicked".into()))
            }),
            None => Ok(()),
        }
    }
}

pub(super) fn batch_of(writes: &[Write]) -> Result<Batch, NodeError> {
    let mut batch = Batch::with_capacity(writes.len(), 0);
    for (key, value) in writes {
        match value {
            Some(value) => batch.put(key, value)?,
            None => batch.delete(key)?,
        }
    }
    Ok(batch)
}

/// What the committer thread may touch of the node: the stores it makes blocks durable in,
/// the head it publishes, and its metrics. Nothing of the pool, the producer's tip or the
/// configuration.
pub(super) struct Committer<'a> {
    history: &'a History,
    vilmo: &'a RwLock<Vilmo>,
    head: &'a RwLock<HeadBlock>,
    committed_through: &'a AtomicU64,
    committed: &'a broadcast::Sender<Arc<CommittedBlock>>,
    metrics: &'a NodeMetrics,
    gate: &'a Mutex<()>,
}

impl<'a> Committer<'a> {
    pub(super) fn of(node: &'a Node) -> Self {
        Self {
            history: &node.history,
            vilmo: &node.vilmo,
            head: &node.head,
            committed_through: &node.committed_through,
            committed: &node.committed,
            metrics: &node.metrics,
            gate: &node.commit_gate,
        }
    }

    /// Commits a group of sealed blocks, in order: the history in one durable transaction,
    /// then each block's state in Vilmo, then each is published.
    pub(super) fn commit_group(
        &self,
        group: Vec<SealedBlock>,
        last_published: &mut Option<Instant>,
    ) -> Result<(), NodeError> {
        let _gate = lock(self.gate);
        let t = Instant::now();
        let records: Vec<BlockRecord<'_>> = group
            .iter()
            .map(|b| BlockRecord {
                header: &b.block.header,
                hash: b.block.hash,
                signature: b.block.signature,
                transactions: &b.block.transactions,
                receipts: &b.block.receipts,
                changeset: &b.block.changeset,
                state_history: &b.state_history,
            })
            .collect();
        self.history.commit_blocks(&records)?;
        drop(records);
        self.metrics.stage(Stage::CommitHistory, seconds(t));
        self.metrics.commit_group_blocks.observe(group.len() as f64);

        for sealed in group {
            let t = Instant::now();
            self.commit_state(sealed.pending.writes())?;
            self.metrics.stage(Stage::CommitState, seconds(t));

            let t = Instant::now();
            let block = sealed.block;
            let number = block.header.number;
            let gas_used = block.header.gas_used;
            let tx_count = block.transactions.len();
            *self
                .head
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = HeadBlock {
                header: block.header.clone(),
                hash: block.hash,
                signature: block.signature,
            };
            self.committed_through.store(number, Ordering::SeqCst);
            let _ = self.committed.send(Arc::new(block));
            self.metrics.stage(Stage::Publish, seconds(t));

            let published = Instant::now();
            if let Some(last) = *last_published {
                self.metrics
                    .block_interval_seconds
                    .observe((published - last).as_secs_f64());
            }
            *last_published = Some(published);
            self.metrics
                .block_seconds
                .observe((published - sealed.started).as_secs_f64());
            self.metrics.block_gas.observe(gas_used as f64);
            self.metrics.block_transactions.observe(tx_count as f64);
            self.metrics.transactions_included.inc_by(tx_count as u64);
            self.metrics.blocks.inc();
            self.metrics.head.set(number as i64);
            // Empty blocks come four times a second on an idle dev chain: keep them out of
            // the default log.
            if tx_count == 0 {
                tracing::debug!(block = number, "empty block");
            } else {
                info!(
                    block = number,
                    txs = tx_count,
                    gas = gas_used,
                    ms = format_args!("{:.1}", (published - sealed.started).as_secs_f64() * 1e3),
                    "block"
                );
            }
        }
        Ok(())
    }

    /// Commits a block's state to Vilmo. The fdatasync runs outside Vilmo's write lock: an
    /// RPC read (which takes the read lock) waits at most for the write and the index
    /// update, never for the disk. What it may see meanwhile, the block's values before
    /// they are durable, is not published: the block's history is durable already, reads at
    /// an older block correct Vilmo's values through it, and the head moves only after this
    /// returns.
    pub(super) fn commit_state(&self, writes: &[Write]) -> Result<(), NodeError> {
        let batch = batch_of(writes)?;
        let write = || {
            self.vilmo
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let unsynced = write().commit_unsynced(batch)?;
        let synced = unsynced.sync();
        write().finish_commit(unsynced, synced)?;
        Ok(())
    }
}

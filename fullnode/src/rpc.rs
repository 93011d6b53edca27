//! The full node's read-only JSON-RPC: [`FullNodeBackend`], a [`gigas_rpc::Backend`] over the
//! MDBX state ([`gigas_statedb`]), served by the same method tables and error type as the
//! sequencer's ([`gigas_rpc::RpcServer`]).
//!
//! **What it answers.** `latest` (and `pending`, `safe`, `finalized`) is the last *applied*
//! block ([`SyncState::applied`]: written, and logged against a kill, perhaps not yet
//! committed); state reads use a [`StateView`], a snapshot of the last commit, read through
//! the redo records of the blocks applied since when the block asked for is above it, or
//! through the undo records of the blocks after the one asked for when it is below
//! ([`crate::window`]: the last `--state-window` blocks, 128 by default, as geth keeps); an
//! older block is refused with the range served and the sequencer's URL. Headers of blocks
//! above the last commit come from the same records. `eth_getProof` proves accounts and slots against the state root (MPT) this node
//! computed; `eth_call` and `eth_estimateGas` run revm over the view through `gigas-evm`,
//! configured as the sequencer configures its calls. Blocks are the headers the database holds,
//! as signed (the full node keeps no bodies: a block with transactions is refused, its header
//! served by `eth_getHeaderByNumber`); the header's `stateRoot` is the MPT root this node
//! computed and checked (see [`rpc_header`]).
//!
//! **What it refuses.** Writes (`eth_sendRawTransaction`) and history (transactions, receipts,
//! logs, traces) with an error that names the sequencer's URL: a wallet pointed at the full
//! node learns where to go instead of waiting for a receipt that never comes.
//!
//! **Race with the follower.** A commit drops the redo records it made durable; a read that
//! took its snapshot before the commit and finds them gone takes a new snapshot (a few
//! times at most).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_rpc_types_eth::state::{EvmOverrides, StateOverride};
use alloy_rpc_types_eth::AccessListResult;
use alloy_rpc_types_eth::{
    Block, BlockOverrides, BlockTransactions, EIP1186AccountProofResponse, EIP1186StorageProof,
    Filter, Header as RpcHeader, Log, SyncInfo, SyncStatus, Transaction, TransactionReceipt,
    TransactionRequest,
};
use alloy_rpc_types_trace::geth::{
    GethDebugTracingCallOptions, GethDebugTracingOptions, GethTrace,
};
use alloy_rpc_types_txpool::{TxpoolContent, TxpoolInspect, TxpoolStatus};
use gigas_chain::{BaseFeeConfig, ChainConfig};
use gigas_evm::budget::CallBudget;
use gigas_primitives::ChainSpec;
use gigas_rpc::{Backend, FeeHistoryBlock, PrestateTrace, RpcError, SubscriptionHub, LATEST_STATE};
use gigas_rpc_eth::StateCalls;
use gigas_statedb::{StateDb, StateDbError, StateView, StoredHeader};

use crate::status::SyncState;
use crate::window::{PastState, StateWindow, WindowLimits};
use gigas_statediff::PriorState;

/// Most heads [`FullNodeBackend::publish_heads`] sends at once (the subscription channel's
/// default capacity): after a long catch-up, subscribers get the recent heads, not all.
const MAX_HEADS_PUBLISHED: u64 = 256;

/// The tip a full node suggests, in wei (see [`FullNodeBackend::max_priority_fee`]).
pub const SUGGESTED_TIP: u64 = 1;

/// The full node as a [`gigas_rpc::Backend`].
#[derive(Debug)]
pub struct FullNodeBackend {
    db: Arc<StateDb>,
    sync: Arc<SyncState>,
    hub: SubscriptionHub,
    sequencer_url: String,
    chain_id: u64,
    spec: ChainSpec,
    base_fee: BaseFeeConfig,
    /// The last head given to the `newHeads` channel.
    published: AtomicU64,
    /// What one client execution may use.
    budget: CallBudget,
    /// The undo records of recent blocks, for state reads below the head.
    window: Arc<StateWindow>,
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::Internal(e.to_string())
}

fn store(e: StateDbError) -> RpcError {
    match e {
        StateDbError::TrieStale { last_root } => RpcError::ResourceNotFound(format!(
            "eth_getProof: this full node runs with the state trie off (its last state root is \
             at block {last_root}); restart it with a root interval to serve proofs"
        )),
        other => internal(other),
    }
}

/// The RPC header of a stored header: the sequencer's header exactly as it signed it, so that
/// `hash == keccak(rlp(header))` and both nodes answer the same block alike. Its `stateRoot`
/// is the Ethereum state root after the block, which this node checked against its own
/// before applying the block (the root `eth_getProof` proves against).
///
/// `size` is left out: it is the block's length, and the node does not hold the bodies of
/// blocks with transactions.
pub fn rpc_header(stored: &StoredHeader) -> RpcHeader {
    RpcHeader {
        size: None,
        ..gigas_rpc_eth::rpc_header(&stored.header, stored.hash)
    }
}

impl FullNodeBackend {
    /// A backend over `db` for `chain`, refusing writes and history with `sequencer_url` (the
    /// sequencer's JSON-RPC address, as users should reach it), reading the durable head from
    /// `sync`, and feeding subscriptions through `hub` (see [`Self::publish_heads`]).
    pub fn new(
        db: Arc<StateDb>,
        chain: &ChainConfig,
        sequencer_url: String,
        sync: Arc<SyncState>,
        hub: SubscriptionHub,
    ) -> Self {
        Self {
            published: AtomicU64::new(sync.applied()),
            db,
            sync,
            hub,
            sequencer_url,
            chain_id: chain.chain_id,
            spec: chain.spec(),
            base_fee: chain.base_fee,
            budget: CallBudget::default(),
            window: Arc::new(StateWindow::new(WindowLimits {
                blocks: 0,
                max_bytes: 0,
            })),
        }
    }

    /// Serves state reads at the recent blocks `window` holds the undo records of (the apply
    /// thread fills it), not only at the head.
    pub fn with_state_window(mut self, window: Arc<StateWindow>) -> Self {
        self.window = window;
        self
    }

    /// Holds every client execution to `budget` instead of geth's defaults.
    pub fn with_call_budget(mut self, budget: CallBudget) -> Self {
        self.budget = budget;
        self
    }

    /// The subscription channels (`newHeads` is fed by [`Self::publish_heads`]; this node
    /// publishes no logs and no pending transactions).
    pub fn hub(&self) -> &SubscriptionHub {
        &self.hub
    }

    /// The sequencer URL named in refusals.
    pub fn sequencer_url(&self) -> &str {
        &self.sequencer_url
    }

    /// Publishes to `newHeads` the headers of the blocks after the last one published, through
    /// `head` (at most the last 256 after a long catch-up). The follower calls it each time
    /// [`SyncState::set_applied`] has moved `latest`; with no subscriber it only
    /// moves the mark. Heads carry this node's state root, as [`rpc_header`] builds them.
    pub fn publish_heads(&self, head: u64) -> Result<(), RpcError> {
        let previous = self.published.fetch_max(head, Ordering::AcqRel);
        if previous >= head || !self.hub.has_head_subscribers() {
            return Ok(());
        }
        let from = (previous + 1).max(head.saturating_sub(MAX_HEADS_PUBLISHED - 1));
        let view = self.db.view().map_err(store)?;
        for number in from..=head {
            if let Some(stored) = self.header_at(&view, number)? {
                self.hub.publish_head(rpc_header(&stored));
            }
        }
        Ok(())
    }

    /// Block `number`'s header: from the window's records when it is above the last commit,
    /// else from `view`, else (committed after `view` was taken) from a new snapshot.
    fn header_at(
        &self,
        view: &StateView<'_>,
        number: u64,
    ) -> Result<Option<StoredHeader>, RpcError> {
        if let Some(header) = self.window.ahead_header(number) {
            return Ok(Some(header));
        }
        if let Some(header) = view.header(number).map_err(store)? {
            return Ok(Some(header));
        }
        if number > self.sync.applied() {
            return Ok(None);
        }
        self.db.view().map_err(store)?.header(number).map_err(store)
    }

    /// [`Self::header_at`], for a block that must exist.
    fn header_of(&self, view: &StateView<'_>, number: u64) -> Result<StoredHeader, RpcError> {
        self.header_at(view, number)?
            .ok_or(RpcError::HeaderNotFound)
    }

    /// The refusal of a method this node cannot serve, naming the sequencer.
    fn pool_refused(&self) -> RpcError {
        RpcError::ResourceNotFound(format!(
            "this full node has no transaction pool; ask the sequencer at {}",
            self.sequencer_url
        ))
    }

    fn history_refused(&self, what: &str) -> RpcError {
        RpcError::ResourceNotFound(format!(
            "this full node keeps state and headers, not {what}; ask the sequencer at {}",
            self.sequencer_url
        ))
    }

    /// The state after block `at` ([`LATEST_STATE`]: the head) and its number: the head's
    /// snapshot, read through the undo records of the blocks after `at` when `at` is below
    /// the head and within the window; older blocks are refused with the range served.
    fn view_at(&self, at: u64) -> Result<(PastState<StateView<'_>>, u64), RpcError> {
        // A commit between the snapshot and the redo records drops records the snapshot
        // lacks: then a new snapshot holds them. Commits are a group apart, so a second
        // attempt nearly always succeeds.
        for _ in 0..4 {
            let view = self.db.view().map_err(store)?;
            let tip = view
                .tip()
                .map_err(store)?
                .ok_or_else(|| internal("the state database holds no chain yet"))?
                .number;
            let head = self.sync.applied().max(tip);
            let at = if at == LATEST_STATE { head } else { at };
            if at > head {
                return Err(RpcError::HeaderNotFound);
            }
            if at <= tip {
                return self.view_below(view, at, tip);
            }
            if let Some(redo) = self.window.ahead(tip, at) {
                return Ok((PastState::new(view, redo), at));
            }
        }
        Err(internal(
            "the head kept moving while this read looked for its state; retry",
        ))
    }

    /// The state after `at`, at or below the snapshot's block `tip`.
    fn view_below<'a>(
        &self,
        view: StateView<'a>,
        at: u64,
        tip: u64,
    ) -> Result<(PastState<StateView<'a>>, u64), RpcError> {
        if at == tip {
            return Ok((PastState::new(view, Vec::new()), tip));
        }
        match self.window.undo(at, tip) {
            Some(undo) => Ok((PastState::new(view, undo), at)),
            None => Err(RpcError::ResourceNotFound(format!(
                "this full node keeps the state of blocks {}..={tip} (its head and the \
                 --state-window before it), not block {at}'s; ask the sequencer at {} for \
                 older state",
                self.window.oldest(tip),
                self.sequencer_url
            ))),
        }
    }

    /// An account of the state after `view`'s block.
    fn account(
        view: &PastState<StateView<'_>>,
        address: &Address,
    ) -> Result<Option<gigas_primitives::AccountState>, RpcError> {
        PriorState::account(view, address).map_err(internal)
    }

    /// `eth_call` at the head `at`, held to the node's [`CallBudget`].
    pub fn call(
        &self,
        req: &TransactionRequest,
        at: u64,
        state: Option<&StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Result<Bytes, RpcError> {
        self.calls_at(at, |calls| calls.call(req, state, block))
    }

    /// Runs `f` with the calls over the state at `at` (the head or a block of the window).
    fn calls_at<T>(
        &self,
        at: u64,
        f: impl FnOnce(&StateCalls<'_, PastState<StateView<'_>>>) -> Result<T, RpcError>,
    ) -> Result<T, RpcError> {
        let (view, at) = self.view_at(at)?;
        let header = self.header_of(view.head(), at)?.header;
        f(&StateCalls::new(&self.spec, &header, &view, self.budget))
    }

    /// `eth_estimateGas` at the head `at` (see [`gigas_evm::call::CallRequest::estimate`]),
    /// all over one snapshot.
    pub fn estimate_gas(
        &self,
        req: &TransactionRequest,
        at: u64,
        state: Option<&StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Result<u64, RpcError> {
        self.calls_at(at, |calls| calls.estimate_gas(req, state, block))
    }

    /// The base fee of the block after the head.
    fn next_base_fee(&self) -> Result<u64, RpcError> {
        let view = self.db.view().map_err(store)?;
        let head = self.header_of(&view, self.sync.applied())?.header;
        Ok(self.base_fee.next(
            head.gas_used,
            head.gas_limit,
            head.base_fee_per_gas.unwrap_or_default(),
        ))
    }
}

impl Backend for FullNodeBackend {
    fn client_version(&self) -> String {
        format!(
            "gigas-fullnode/v{}/{}-{}/rust",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        )
    }

    fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// Not syncing while at most one block behind the sequencer's head as last seen (a block
    /// is in flight most of the time); else the block it started from, the durable head and
    /// the sequencer's.
    fn syncing(&self) -> SyncStatus {
        if self.sync.lag() <= 1 {
            return SyncStatus::None;
        }
        SyncStatus::Info(Box::new(SyncInfo {
            starting_block: U256::from(self.sync.starting()),
            current_block: U256::from(self.sync.applied()),
            highest_block: U256::from(self.sync.sequencer_head()),
            warp_chunks_amount: None,
            warp_chunks_processed: None,
            stages: None,
        }))
    }

    fn latest(&self) -> u64 {
        self.sync.applied()
    }

    fn resolves_latest_at_read(&self) -> bool {
        true
    }

    /// The number of the block with `hash` (the sequencer's signed header hash), among every
    /// header the database holds (indexed by hash), up to the durable head.
    fn block_number(&self, hash: B256) -> Result<Option<u64>, RpcError> {
        let head = self.sync.applied();
        if self.sync.applied_hash() == hash {
            return Ok(Some(head));
        }
        if let Some(number) = self.window.ahead_number(&hash) {
            return Ok(Some(number).filter(|n| *n <= head));
        }
        let view = self.db.view().map_err(store)?;
        Ok(view
            .number_by_hash(&hash)
            .map_err(store)?
            .filter(|number| *number <= head))
    }

    /// Block `number` as the database holds it: the signed header (see [`rpc_header`]). The
    /// full node keeps no bodies, so it answers only what it holds: a block without
    /// transactions (its header's `transactionsRoot` is the empty root) in full; for a block
    /// with transactions, whose hashes it does not have, it refuses, naming
    /// `eth_getHeaderByNumber` (the header alone) and the sequencer (the transactions), rather
    /// than answer an empty list that would be wrong.
    fn block(&self, number: u64, full: bool) -> Result<Option<Block>, RpcError> {
        let view = self.db.view().map_err(store)?;
        let Some(stored) = self.header_at(&view, number)? else {
            return Ok(None);
        };
        if stored.header.transactions_root != alloy_consensus::EMPTY_ROOT_HASH {
            return Err(RpcError::ResourceNotFound(format!(
                "this full node keeps headers and state, not the transactions of block {number} \
                 (gas used {}); eth_getHeaderByNumber gives its header, the sequencer at {} its \
                 transactions",
                stored.header.gas_used, self.sequencer_url
            )));
        }
        let _ = full;
        let mut header = rpc_header(&stored);
        // The block's RLP length, as the sequencer reports it: the header and empty lists.
        header.size = Some(U256::from(gigas_rpc_eth::block_size(&stored.header, &[])));
        Ok(Some(Block {
            header,
            uncles: Vec::new(),
            transactions: BlockTransactions::Hashes(Vec::new()),
            withdrawals: Some(Default::default()),
        }))
    }

    /// The header of block `number`, as signed (see [`rpc_header`]).
    fn header(&self, number: u64) -> Result<Option<RpcHeader>, RpcError> {
        let view = self.db.view().map_err(store)?;
        Ok(self.header_at(&view, number)?.map(|s| rpc_header(&s)))
    }

    fn block_transaction_count(&self, number: u64) -> Result<Option<u64>, RpcError> {
        // Known only for a block without transactions (the empty root says so).
        Ok(self.block(number, false)?.map(|_| 0))
    }

    /// Balance of `address` at the head `at`.
    fn balance(&self, address: Address, at: u64) -> Result<U256, RpcError> {
        let (view, _) = self.view_at(at)?;
        Ok(Self::account(&view, &address)?.map_or(U256::ZERO, |a| a.balance))
    }

    /// Nonce of `address` at the head `at`.
    fn nonce(&self, address: Address, at: u64) -> Result<u64, RpcError> {
        let (view, _) = self.view_at(at)?;
        Ok(Self::account(&view, &address)?.map_or(0, |a| a.nonce))
    }

    /// The head's nonce: the full node has no pool.
    fn pending_nonce(&self, address: Address) -> Result<u64, RpcError> {
        let (view, _) = self.view_at(LATEST_STATE)?;
        Ok(Self::account(&view, &address)?.map_or(0, |a| a.nonce))
    }

    /// Code of `address` at the head `at` (empty when none).
    fn code(&self, address: Address, at: u64) -> Result<Bytes, RpcError> {
        let (view, _) = self.view_at(at)?;
        let Some(account) = Self::account(&view, &address)? else {
            return Ok(Bytes::new());
        };
        if account.code_hash == alloy_primitives::KECCAK256_EMPTY {
            return Ok(Bytes::new());
        }
        if let Some(code) = view.code_override(&account.code_hash) {
            return Ok(code);
        }
        view.head()
            .code(&account.code_hash)
            .map_err(store)?
            .ok_or_else(|| {
                internal(format!(
                    "the code {} of {address} is missing from the state",
                    account.code_hash
                ))
            })
    }

    /// Storage slot `slot` of `address` at the head `at`.
    fn storage(&self, address: Address, slot: B256, at: u64) -> Result<B256, RpcError> {
        let (view, _) = self.view_at(at)?;
        let value =
            PriorState::slot(&view, &address, &U256::from_be_bytes(slot.0)).map_err(internal)?;
        Ok(B256::from(value))
    }

    /// `eth_getProof` at `at`, the head or a block of the state window, against that block's
    /// state root. At a past block the proof goes through the head's trie with the window's
    /// undo records laid over it (only the paths to keys changed since are recomputed), and
    /// its root must equal the root stored with the block, or nothing is answered. Keys are
    /// echoed as 32-byte words.
    fn proof(
        &self,
        address: Address,
        slots: Vec<U256>,
        at: u64,
    ) -> Result<EIP1186AccountProofResponse, RpcError> {
        let (view, at) = self.view_at(at)?;
        // The request's deadline (geth's --rpc.evmtimeout): laying the window's records over
        // the head and walking every path they changed grow with how old `at` is, so both
        // are held to it.
        let deadline = gigas_rpc::deadline::remaining().map(|left| Instant::now() + left);
        let overlay = view.overlay();
        gigas_rpc::deadline::check(&format!("eth_getProof at block {at}"))?;
        let head = view.head();
        let proof = head
            .proof_through_until(&address, &slots, &overlay, deadline)
            .map_err(|e| match e {
                StateDbError::DeadlinePassed(_) => RpcError::Timeout(format!(
                    "eth_getProof at block {at}: aborted at the execution timeout ({} keys \
                     changed since that block); ask for a more recent block",
                    overlay.len()
                )),
                other => store(other),
            })?;
        if !overlay.is_empty() {
            // A root was computed at every block when the roots run every block (`--dev`);
            // between roots there is nothing to check against, as at the head.
            if let Some(root) = self.header_of(head, at)?.state_root {
                if root != proof.state_root {
                    return Err(internal(format!(
                        "eth_getProof at block {at}: the proof's state root {} is not the \
                         root stored with the block ({root}); the state window's records \
                         disagree with the trie",
                        proof.state_root
                    )));
                }
            }
        }
        Ok(EIP1186AccountProofResponse {
            address: proof.address,
            balance: proof.balance,
            code_hash: proof.code_hash,
            nonce: proof.nonce,
            storage_hash: proof.storage_root,
            account_proof: proof.account_proof,
            storage_proof: proof
                .storage_proofs
                .into_iter()
                .map(|p| EIP1186StorageProof {
                    key: B256::from(p.slot).into(),
                    value: p.value,
                    proof: p.proof,
                })
                .collect(),
        })
    }

    fn call(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<Bytes, RpcError> {
        FullNodeBackend::call(
            self,
            &request,
            at,
            overrides.state.as_ref(),
            overrides.block.as_deref(),
        )
    }

    fn estimate_gas(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<u64, RpcError> {
        FullNodeBackend::estimate_gas(
            self,
            &request,
            at,
            overrides.state.as_ref(),
            overrides.block.as_deref(),
        )
    }

    /// `eth_gasPrice`: the next block's base fee (from the head header and the chain's base
    /// fee rule, as the sequencer computes it) plus [`SUGGESTED_TIP`].
    fn gas_price(&self) -> Result<U256, RpcError> {
        Ok(U256::from(self.next_base_fee()?) + U256::from(SUGGESTED_TIP))
    }

    /// `eth_maxPriorityFeePerGas`: [`SUGGESTED_TIP`] (1 wei). The full node keeps no
    /// transactions, so it has no paid tips to sample as the sequencer's oracle does; the
    /// sequencer admits any tip at or above its configured minimum (0 by default) and orders by
    /// tip, so the smallest positive tip is included whenever blocks are not full. A wallet
    /// that needs priority asks the sequencer.
    fn max_priority_fee(&self) -> Result<U256, RpcError> {
        Ok(U256::from(SUGGESTED_TIP))
    }

    /// A block's fees from its header. Reward percentiles are refused: they need the
    /// blocks' transactions, which a full node does not keep.
    fn fee_history_block(
        &self,
        number: u64,
        percentiles: Option<&[f64]>,
    ) -> Result<Option<FeeHistoryBlock>, RpcError> {
        if percentiles.is_some_and(|p| !p.is_empty()) {
            return Err(
                self.history_refused("transactions, so no rewards (ask without rewardPercentiles)")
            );
        }
        let view = self.db.view().map_err(store)?;
        let h = self.header_of(&view, number)?.header;
        let base_fee = h.base_fee_per_gas.unwrap_or_default();
        Ok(Some(FeeHistoryBlock {
            base_fee,
            gas_used: h.gas_used,
            gas_limit: h.gas_limit,
            next_base_fee: self.base_fee.next(h.gas_used, h.gas_limit, base_fee),
            reward: None,
        }))
    }

    /// Refused: a full node has no pool. `TxRejected` (-32000) so that wallets show the text.
    async fn send_raw_transaction(&self, _raw: Bytes) -> Result<B256, RpcError> {
        Err(RpcError::TxRejected(format!(
            "this full node does not accept transactions; send them to the sequencer at {}",
            self.sequencer_url
        )))
    }

    fn transaction_by_hash(&self, _hash: B256) -> Result<Option<Transaction>, RpcError> {
        Err(self.history_refused("transactions"))
    }

    fn receipt(&self, _hash: B256) -> Result<Option<TransactionReceipt>, RpcError> {
        Err(self.history_refused("receipts"))
    }

    fn block_receipts(&self, _number: u64) -> Result<Option<Vec<TransactionReceipt>>, RpcError> {
        Err(self.history_refused("receipts"))
    }

    fn logs(
        &self,
        _from: u64,
        _to: u64,
        _filter: &Filter,
        _limit: usize,
    ) -> Result<Vec<Log>, RpcError> {
        Err(self.history_refused("logs"))
    }

    fn subscriptions(&self) -> &SubscriptionHub {
        &self.hub
    }

    fn trace_block_prestate(&self, _number: u64) -> Result<Vec<PrestateTrace>, RpcError> {
        Err(self.history_refused("old state to trace blocks over"))
    }

    fn transaction_by_block_and_index(
        &self,
        _number: u64,
        _index: usize,
    ) -> Result<Option<Transaction>, RpcError> {
        Err(self.history_refused("transactions"))
    }

    fn create_access_list(
        &self,
        request: TransactionRequest,
        at: u64,
        state: Option<StateOverride>,
    ) -> Result<AccessListResult, RpcError> {
        self.calls_at(at, |calls| calls.access_list(&request, state.as_ref()))
    }

    fn txpool_status(&self) -> Result<TxpoolStatus, RpcError> {
        Err(self.pool_refused())
    }

    fn txpool_content(&self, _from: Option<Address>) -> Result<TxpoolContent, RpcError> {
        Err(self.pool_refused())
    }

    fn txpool_inspect(&self) -> Result<TxpoolInspect, RpcError> {
        Err(self.pool_refused())
    }

    fn trace_transaction(
        &self,
        _hash: B256,
        _options: GethDebugTracingOptions,
    ) -> Result<GethTrace, RpcError> {
        Err(self.history_refused("transactions to trace"))
    }

    fn trace_call(
        &self,
        request: TransactionRequest,
        at: u64,
        options: GethDebugTracingCallOptions,
    ) -> Result<GethTrace, RpcError> {
        self.calls_at(at, |calls| calls.trace(&request, &options))
    }
}

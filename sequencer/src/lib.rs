//! The Gigas L2 sequencer node.
//!
//! Owns: the chain config and genesis ([`chain`], [`genesis`]), the node ([`node`]: opening
//! and recovering its stores, producing, committing and publishing blocks), revm's view of
//! state over Vilmo ([`state`]), the RPC backend ([`backend`]) and the node's metrics
//! ([`metrics`]). The engines it drives live in their own crates: execution in `gigas-evm` and
//! `gigas-blockstm` (with `gigas-jit`), state in `gigas-vilmo`, chain history in
//! `gigas-history`, the pool and journal in `gigas-txpool`, JSON-RPC in `gigas-rpc`.
//!
//! Must not: configure revm (gigas-evm does), define storage layouts (gigas-primitives owns
//! the state keys, gigas-history its tables), or speak JSON-RPC itself.
//!
//! # Data flow
//!
//! `eth_sendRawTransaction` → sender recovery on the pool's worker threads → checks against
//! the head state → pool → journal (group-committed `fdatasync`) → the hash is returned. Every
//! block time the producer thread selects by effective tip under nonce order and the gas
//! limit, executes with Block-STM (or sequentially, as the measured policy says) with the
//! JIT, builds receipts and roots, computes the block's state root in its state trie, signs
//! the header hash, commits, and publishes.
//!
//! # Headers
//!
//! Blocks are Ethereum-shaped (Prague fields, RLP-hashed, `extraData` = "gigas", which
//! web3.py accepts without its proof-of-authority middleware). `stateRoot` is the Ethereum
//! state root (Merkle-Patricia) after the block: the producer applies the block's changes to
//! its state trie (`gigas_triedb::TrieStore` in `DATADIR/trie`: the changes since its last
//! commit held in memory over the trie stored in MDBX, the account trie held in memory across
//! blocks within `--trie.memory-mib`) and takes its root before it signs (`node::trie`). Every
//! full node computes the same root after applying the block and refuses the block if it
//! differs. The trie commits on a thread of its own every `--trie.commit-blocks` blocks, and
//! only blocks the committer has made durable: after a crash it is at or behind the head, and
//! the blocks after its commit replay from the history, each root checked against its
//! header (a trie that cannot be replayed is rebuilt from Vilmo's state). The sequencer's secp256k1
//! signature over the block hash is kept beside the header (in the history and in what
//! followers receive), not inside it, so the hash stays a plain Ethereum header hash;
//! `ecrecover(hash, signature)` gives the sequencer's address.
//!
//! # Commit order and crash recovery
//!
//! Blocks go through a two-thread pipeline (`node::Pipeline`): the producer executes and
//! seals block `N + 1` on its tip (the committed state with the sealed, uncommitted blocks
//! laid over it) while the committer makes block `N` durable. The committer takes the blocks
//! waiting for it (at most [`node::MAX_GROUP`]) as one group and makes each durable in two
//! steps, in this order:
//!
//! 1. **History** (`gigas-history`: one append to its block log and one `fdatasync` for the
//!    whole group): each block's header, signature, transactions, receipts, encoded ChangeSet
//!    and the old value of every state key it writes. The history's indexer writes the MDBX
//!    index (lookups, log index, state history) behind it, off this path; reads answer for
//!    unindexed blocks from memory.
//! 2. **State** (Vilmo, one durable batch per block, in block order): the block's writes.
//!    Vilmo batch `k` holds block `k - 1` (batch 1 is the genesis state).
//!
//! Only then is a block **published**: the in-memory head moves and subscribers hear of it.
//! Nothing reads the history past the published head. (The pool moved on at sealing time:
//! the next block must not select the same transactions; lookups by hash find a sealed,
//! unpublished block's transactions through `Node::in_flight_transaction`.)
//!
//! Why a SIGKILL at any instant recovers to one consistent head with the same roots:
//!
//! - Each step is atomic on its own: the history's block log and Vilmo each cut a torn tail
//!   on open (records and batches appended after their last sync were never acknowledged),
//!   and the history indexes what its log holds beyond its index before it opens. So after a crash the history ends at some block
//!   `H` and Vilmo at some batch `V`.
//! - A block's step 2 starts only after the step 1 that holds it returned, and a group's step
//!   1 only after the previous group's steps 2 all returned. Hence
//!   `H + 1 - MAX_GROUP ≤ V ≤ H + 1`.
//! - `V = H + 1`: both hold block `H`; that is the head.
//! - `V ≤ H`: the history holds blocks `V ..= H` that Vilmo (up to block `V - 1`) lacks.
//!   For each in order, recovery derives the writes of the stored ChangeSet (covered by the
//!   block log's checksums) against Vilmo's state (the same state the producer derived them
//!   against through its tip, so the same writes) and commits them. Now `V = H + 1`; the
//!   state trie then replays to `H`, each block's root checked against its header.
//! - Blocks in the history but never published (the crash came before their publication)
//!   are kept, not rebuilt: they are durable, signed and deterministic, so nobody can have
//!   seen different ones. A block that was published is durable in both stores, so it never
//!   changes. Sealed blocks that never reached the history are lost, and were never
//!   published; their transactions are still in the journal (below).
//! - Any other pair (`V > H + 1`, `V` further behind, a genesis that differs from the chain
//!   spec's) is not a crash but stores that do not belong together: the node refuses to
//!   start and says which.
//!
//! Transactions: the hash is returned only after the journal's `fdatasync`. At start the
//! journal is replayed into the pool against the recovered head state; transactions that a
//! durable block included (or made invalid) are dropped then, and the journal is rewritten
//! to the pool's contents. The running node rewrites the journal in the background while
//! blocks are in flight: the rewrite keeps what the pool holds and the transactions of every
//! block sealed and not yet published (read after the pool, so that a block sealed between
//! the two reads is counted), so a transaction that left the pool for a sealed block stays
//! journaled until that block is durable. A submission whose journal write failed is answered
//! with its hash only if a block took it, and only once that block is durable; otherwise it
//! is refused. So a transaction that got a hash is, after any crash, either in a durable
//! block or back in the pool.

pub mod backend;
pub mod cli;
pub mod diffs;
pub mod diffs_http;
pub mod memory;
pub mod metrics;
pub mod node;
pub mod state;

pub use gigas_chain::ChainConfig;
pub use node::{CommittedBlock, HeadBlock, Node, NodeConfig, NodeError, SubmitError};

//! What both Gigas nodes answer the same way over Ethereum's JSON-RPC, beside `gigas-rpc`
//! (which owns the server, the method tables and the `Backend` trait), after reth's
//! `crates/rpc/rpc-eth-api` helpers.
//!
//! Owns:
//! - [`call`]: `eth_call`, `eth_estimateGas`, `eth_createAccessList` and `debug_traceCall` over
//!   any revm `DatabaseRef`, held to a budget, with geth's error words;
//! - [`convert`]: the RPC header and a block's RLP size;
//! - [`args`]: the `--rpc.*` flags both nodes flatten into their command lines, and the async
//!   runtime they serve from.
//!
//! Must not: hold a node's state, know which node calls it, or configure revm (that is
//! `gigas-evm`'s).

pub mod args;
pub mod call;
pub mod convert;

pub use args::{max_blocking_threads, runtime, RpcArgs};
pub use call::StateCalls;
pub use convert::{block_size, rpc_header};

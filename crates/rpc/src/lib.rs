//! Gigas's Ethereum JSON-RPC layer, shared by the sequencer and the full node.
//!
//! **What it owns.** The method tables (`#[rpc(server)]` traits for the `eth`, `net`, `web3` and
//! `debug` namespaces, [`api`]), their parameter checks and block-tag resolution, the bounds on
//! requests (body, response, batch, connections, subscriptions, `eth_getLogs` range and results),
//! the one typed error [`RpcError`] with the JSON-RPC code of each case, subscriptions
//! (`newHeads`, `logs`, `newPendingTransactions`) fed from bounded broadcast channels
//! ([`SubscriptionHub`]), the server itself (HTTP and WebSocket on one port, over jsonrpsee) and
//! its metrics (`gigas_rpc_*`).
//!
//! **What it must not do.** It knows nothing of storage, execution or the pool: every answer
//! comes from a [`Backend`], which the sequencer and the full node implement. It never resolves
//! state, never decodes transactions, and never rewords a backend's error (a pool rejection's
//! text reaches the client verbatim, as Ethereum tools match on it).
//!
//! **Serving.**
//! ```ignore
//! let handle = RpcServer::start(RpcConfig::default(), Arc::new(my_backend)).await?;
//! handle.metrics().register(&mut registry);
//! // keep `handle`: dropping it stops the server
//! ```
//!
//! **Plain HTTP routes on the same port.** Give any tower service whose error is `Infallible`
//! (an `axum::Router` as it is) to [`RpcServer::start_with_routes`] with [`HttpRoutes::new`].
//! Requests that are not `POST` and not a WebSocket upgrade (so `GET /diffs/17`, `HEAD`, ...) go
//! to it; JSON-RPC (`POST`) and WebSocket upgrades go to jsonrpsee:
//! ```ignore
//! let routes = axum::Router::new().route("/diffs/{n}", axum::routing::get(serve_diff));
//! let handle = RpcServer::start_with_routes(config, backend, HttpRoutes::new(routes)).await?;
//! ```
//!
//! **Errors.** Unknown methods answer -32601 "the method X does not exist/is not available";
//! malformed JSON -32700; bad parameters (bad hex, wrong types) -32602; batches over the limit
//! one error; bodies over the limit HTTP 413 with a JSON-RPC error body. Every case leaves the
//! server serving.
//!
//! **Connections.** The server runs its own accept loop ([`accept`]): each client address
//! holds at most `max_connections_per_address` TCP connections (a JSON-RPC WebSocket keeps its
//! place for its session; loopback is exempt unless `limit_loopback`), more are answered 429
//! and closed and counted in `gigas_rpc_connections_refused_total`, and every request carries
//! its [`accept::ClientAddr`] for routes that bound their own work per client.
//!
//! **Subscriptions and memory.** Each subscription reads a bounded broadcast channel; a client
//! that falls further behind than the channel holds, or whose connection takes no notification
//! for `subscription_send_timeout` (it stopped reading: the socket and the connection's buffer
//! are full), is dropped with an error notification
//! (`{"subscription": id, "error": "subscription dropped: ..."}`) and counted in
//! `gigas_rpc_subscriptions_dropped_total`, so a slow client never grows the node's memory.
//! Logs subscriptions share each block's one list of logs and serialize from it.

pub mod accept;
pub mod api;
mod backend;
mod conn;
pub mod deadline;
mod error;
pub mod files;
mod filters;
mod handler;
mod metrics;
mod middleware;
mod server;

pub use backend::{
    Backend, FeeHistoryBlock, PrestateAccount, PrestateTrace, StateRoots, SubscriptionBuffers,
    SubscriptionHub, LATEST_STATE,
};
pub use error::{codes, RpcError};
pub use filters::FilterLimits;
pub use handler::{EthRpc, Limits, DEFAULT_EXECUTION_TIMEOUT};
pub use metrics::RpcMetrics;
pub use middleware::HttpRoutes;
pub use server::{RpcConfig, RpcHandle, RpcServer};

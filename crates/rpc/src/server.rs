//! The server: configuration, start-up and the handle that keeps it running.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use jsonrpsee::server::middleware::rpc::RpcServiceBuilder;
use jsonrpsee::server::{
    BatchRequestConfig, HttpBody, IdProvider, Methods, Server, ServerConfig, ServerHandle,
};
use jsonrpsee::types::SubscriptionId;

use crate::accept::{ClientAddr, ClientLimits};
use crate::handler::{EthRpc, Limits};
use crate::metrics::RpcMetrics;
use crate::middleware::{CallLayer, HttpLayer, HttpRoutes};
use crate::{Backend, RpcError};

const MIB: u32 = 1024 * 1024;

/// The server's configuration. [`RpcConfig::default`] listens on 127.0.0.1:8545.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcConfig {
    /// Where HTTP and WebSocket are both served; port 0 picks a free port
    /// ([`RpcHandle::local_addr`] reports it).
    pub listen: SocketAddr,
    /// Largest request body (HTTP) or message (WebSocket). Default 10 MiB (jsonrpsee's default):
    /// the pool refuses a transaction over 128 KiB ("oversized data"), so this admits a batch of
    /// dozens of the largest transactions hex-encoded while a single body stays small next to the
    /// node's memory. Larger HTTP bodies get HTTP 413 with a JSON-RPC error body.
    pub max_request_body_bytes: u32,
    /// Largest response. Default 32 MiB: 10,000 logs (the result bound) are about 6 MiB of JSON,
    /// and a full block or prestate trace of some thousands of transactions a few MiB; larger
    /// answers get a JSON-RPC error instead of holding that much memory per request.
    pub max_response_body_bytes: u32,
    /// Most HTTP requests in flight plus open WebSocket connections (jsonrpsee takes one permit
    /// per HTTP request and one per WebSocket session); beyond it HTTP answers 429. Default 500,
    /// reth's default.
    pub max_connections: u32,
    /// Most TCP connections one client address may hold open (0: no bound); beyond it a new
    /// connection is answered 429 and closed. Default 64. Loopback addresses are held to it
    /// only with [`RpcConfig::limit_loopback`].
    pub max_connections_per_address: u32,
    /// Hold loopback clients to the per-address bounds too. Off by default: a proxy on the
    /// same host brings every remote client in from 127.0.0.1.
    pub limit_loopback: bool,
    /// Most calls in one batch (0 disables batches); a larger batch gets one JSON-RPC error.
    /// Default 1000, geth's default.
    pub max_batch_size: u32,
    /// Most subscriptions one WebSocket connection may hold. Default 1024 (jsonrpsee and reth).
    pub max_subscriptions_per_connection: u32,
    /// Messages buffered per WebSocket connection before its subscriptions wait (and, once they
    /// fall behind the node's broadcast buffer or wait longer than
    /// [`RpcConfig::subscription_send_timeout`], are dropped). Default 1024 (jsonrpsee).
    pub message_buffer_capacity: u32,
    /// How long a subscription's notification may wait for room in its connection's buffer
    /// before the subscription is dropped (the client stopped reading). Default 10 s.
    pub subscription_send_timeout: std::time::Duration,
    /// How long a connection may take no byte of an answer before it is closed, with every
    /// answer and permit it held (a client that stopped reading; a slow one that keeps
    /// taking bytes is not cut). Default 30 s.
    pub send_timeout: std::time::Duration,
    /// Most blocks one `eth_getLogs` may span. Default 10,000.
    pub max_log_block_range: u64,
    /// Most logs one `eth_getLogs` may return. Default 10,000.
    pub max_log_results: usize,
    /// Most blocks one `eth_feeHistory` covers (larger counts are clamped). Default 1024 (geth).
    pub max_fee_history_blocks: u64,
    /// Most `eth_call` / `eth_estimateGas` / `eth_getLogs` / `eth_feeHistory` /
    /// `debug_traceBlockByNumber` executing at once; more wait their turn without a thread.
    /// Default: one per core, at least 2.
    pub max_concurrent_executions: usize,
    /// How long one of those may run before it is stopped with an error. Default 5 s (geth's
    /// `--rpc.evmtimeout`); EVM executions are held to their own budget by the backend.
    pub execution_timeout: std::time::Duration,
    /// Origins a browser may call from (CORS), as geth's `--http.corsdomain`: `*` for any,
    /// or a list of origins (`https://app.example`). Empty: no CORS headers, so browsers
    /// refuse pages of other origins.
    pub cors_origins: Vec<String>,
}

impl Default for RpcConfig {
    fn default() -> Self {
        let limits = Limits::default();
        RpcConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8545)),
            max_request_body_bytes: 10 * MIB,
            max_response_body_bytes: 32 * MIB,
            max_connections: 500,
            max_connections_per_address: 64,
            limit_loopback: false,
            max_batch_size: 1000,
            max_subscriptions_per_connection: 1024,
            message_buffer_capacity: 1024,
            subscription_send_timeout: limits.subscription_send_timeout,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            max_log_block_range: limits.max_log_block_range,
            max_log_results: limits.max_log_results,
            max_fee_history_blocks: limits.max_fee_history_blocks,
            max_concurrent_executions: limits.max_concurrent_executions,
            execution_timeout: limits.execution_timeout,
            cors_origins: Vec::new(),
        }
    }
}

impl RpcConfig {
    /// The method handlers' bounds from this configuration.
    pub fn limits(&self) -> Limits {
        Limits {
            max_log_block_range: self.max_log_block_range.max(1),
            max_log_results: self.max_log_results,
            max_fee_history_blocks: self.max_fee_history_blocks,
            max_concurrent_executions: self.max_concurrent_executions.max(1),
            execution_timeout: self.execution_timeout,
            subscription_send_timeout: self.subscription_send_timeout,
            limit_loopback: self.limit_loopback,
            ..Limits::default()
        }
    }
}

/// [`RpcConfig::send_timeout`]'s default.
pub(crate) const DEFAULT_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts servers. See [`RpcServer::start`].
#[derive(Debug)]
pub struct RpcServer;

impl RpcServer {
    /// Serves JSON-RPC over HTTP and WebSocket on `config.listen`, answering from `backend`.
    /// Must be called inside a tokio runtime; the server runs on it until the returned handle is
    /// stopped or dropped.
    pub async fn start<B: Backend>(
        config: RpcConfig,
        backend: Arc<B>,
    ) -> Result<RpcHandle, RpcError> {
        Self::start_inner(config, backend, None).await
    }

    /// As [`RpcServer::start`], and serves `routes` on the same port for every request that is
    /// not a `POST` or a WebSocket upgrade (e.g. the sequencer's `GET /diffs/{n}`).
    pub async fn start_with_routes<B: Backend>(
        config: RpcConfig,
        backend: Arc<B>,
        routes: HttpRoutes,
    ) -> Result<RpcHandle, RpcError> {
        Self::start_inner(config, backend, Some(routes)).await
    }

    async fn start_inner<B: Backend>(
        config: RpcConfig,
        backend: Arc<B>,
        routes: Option<HttpRoutes>,
    ) -> Result<RpcHandle, RpcError> {
        let metrics = Arc::new(RpcMetrics::default());
        let module = EthRpc::new(backend, config.limits(), metrics.clone()).into_module()?;
        let methods: Arc<HashSet<&'static str>> = Arc::new(module.method_names().collect());

        let batches = match config.max_batch_size {
            0 => BatchRequestConfig::Disabled,
            n => BatchRequestConfig::Limit(n),
        };
        let server_config = ServerConfig::builder()
            .max_request_body_size(config.max_request_body_bytes)
            .max_response_body_size(config.max_response_body_bytes)
            .max_connections(config.max_connections)
            .max_subscriptions_per_connection(config.max_subscriptions_per_connection)
            .set_batch_request_config(batches)
            .set_message_buffer_capacity(config.message_buffer_capacity.max(1))
            .set_id_provider(HexIdProvider)
            .build();

        let call_metrics = metrics.clone();
        let max_response_body_size = config.max_response_body_bytes as usize;
        let rpc_middleware = RpcServiceBuilder::new().layer_fn(move |inner| CallLayer {
            inner,
            methods: methods.clone(),
            metrics: call_metrics.clone(),
            max_response_body_size,
        });
        let cors = cors_layer(&config.cors_origins)?;
        let http_layer = HttpLayer {
            routes,
            metrics: metrics.clone(),
            route_permits: Arc::new(tokio::sync::Semaphore::new(
                config.max_connections.max(1) as usize
            )),
        };
        let services = Server::builder()
            .set_config(server_config)
            .set_rpc_middleware(rpc_middleware)
            .to_service_builder();
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| RpcError::Bind {
                addr: config.listen,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| RpcError::Bind {
            addr: config.listen,
            source,
        })?;
        let clients = ClientLimits::new(
            config.max_connections_per_address as usize,
            config.limit_loopback,
        );
        let (stop, handle) = jsonrpsee::server::stop_channel();
        let methods: Methods = module.into();
        let refused = metrics.clone();
        let send_timeout = config.send_timeout;
        let accept = async move {
            loop {
                let (socket, peer) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            // Out of file descriptors, most likely: wait for some to close
                            // instead of spinning on the error.
                            tracing::warn!(error = %e, "accepting a connection failed");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    _ = stop.clone().shutdown() => break,
                };
                let _ = socket.set_nodelay(true);
                let Some(slot) = clients.try_open(peer.ip()) else {
                    refused.connection_refused();
                    tokio::spawn(refuse(socket));
                    continue;
                };
                let rpc = services.clone().build(methods.clone(), stop.clone());
                let service = tower::ServiceBuilder::new()
                    .map_request(|request: http::Request<hyper::body::Incoming>| {
                        request.map(HttpBody::new)
                    })
                    .option_layer(cors.clone())
                    .layer(http_layer.for_client(ClientAddr(peer), slot))
                    .service(rpc);
                serve_connection(socket, peer, service, stop.clone(), send_timeout);
            }
        };
        tokio::spawn(accept);
        tracing::info!(%local_addr, "JSON-RPC server listening (HTTP and WebSocket)");
        Ok(RpcHandle {
            local_addr,
            handle,
            metrics,
        })
    }
}

/// Serves one accepted connection until it closes or the server stops (its service holds
/// the client's place, see `HttpLayer::for_client`): HTTP/1.1 with upgrades to WebSocket,
/// over a socket that fails a write making no progress for `send_timeout` and a
/// connection that sends nothing for its first 30 s (see [`crate::conn`]). On stop, the
/// requests under way finish first.
fn serve_connection<S, B>(
    socket: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    service: S,
    stop: jsonrpsee::server::StopHandle,
    send_timeout: std::time::Duration,
) where
    S: tower::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Into<jsonrpsee::core::BoxError>,
    B: hyper::body::Body<Data = hyper::body::Bytes> + Send + 'static,
    B::Error: Into<jsonrpsee::core::BoxError>,
{
    tokio::spawn(async move {
        let io = hyper_util::rt::TokioIo::new(crate::conn::Deadlines::new(
            socket,
            crate::conn::FIRST_REQUEST_TIMEOUT,
            send_timeout,
        ));
        let conn = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, hyper_util::service::TowerToHyperService::new(service))
            .with_upgrades();
        let stopped = stop.shutdown();
        tokio::pin!(conn, stopped);
        let ended = tokio::select! {
            ended = &mut conn => ended,
            () = &mut stopped => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = ended {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    });
}

/// Answers a connection over its address's bound with a 429 and closes it, within a second
/// (a client that does not read is not waited for).
async fn refuse(mut socket: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        socket.write_all(crate::accept::TOO_MANY).await?;
        socket.shutdown().await
    })
    .await;
}

/// The CORS layer of `origins` (geth's `--http.corsdomain`), `None` for none. Preflight
/// requests are answered by the layer; the methods are those a JSON-RPC or archive client
/// uses, and any request header is allowed (browsers send `content-type`).
fn cors_layer(origins: &[String]) -> Result<Option<tower_http::cors::CorsLayer>, RpcError> {
    use tower_http::cors::{AllowOrigin, Any, CorsLayer};
    let origins: Vec<&str> = origins
        .iter()
        .map(|o| o.trim())
        .filter(|o| !o.is_empty())
        .collect();
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.contains(&"*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|o| {
                http::HeaderValue::from_str(o).map_err(|_| {
                    RpcError::InvalidParams(format!("--http.corsdomain: {o:?} is not an origin"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([http::Method::GET, http::Method::POST, http::Method::OPTIONS])
            .allow_headers(Any)
            .max_age(std::time::Duration::from_secs(3600)),
    ))
}

/// Subscription ids as geth makes them: "0x" and 16 random bytes in hex. jsonrpsee's default
/// (a JSON number) parses in alloy but not in every client that expects geth's strings.
#[derive(Debug, Clone, Copy)]
struct HexIdProvider;

impl IdProvider for HexIdProvider {
    fn next_id(&self) -> SubscriptionId<'static> {
        let id: u128 = rand::random();
        SubscriptionId::Str(format!("{id:#034x}").into())
    }
}

/// A running server. Dropping it stops the server.
#[derive(Debug)]
pub struct RpcHandle {
    local_addr: SocketAddr,
    handle: ServerHandle,
    metrics: Arc<RpcMetrics>,
}

impl RpcHandle {
    /// The address the server is bound to (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://addr`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// `ws://addr`.
    pub fn ws_url(&self) -> String {
        format!("ws://{}", self.local_addr)
    }

    /// The server's metrics; [`RpcMetrics::register`] puts them into a registry.
    pub fn metrics(&self) -> &RpcMetrics {
        &self.metrics
    }

    /// Asks the server to stop: it accepts nothing more and closes connections once their calls
    /// are answered. Stopping twice is harmless.
    pub fn stop(&self) {
        let _ = self.handle.stop();
    }

    /// Waits until the server has stopped (after [`RpcHandle::stop`]).
    pub async fn stopped(self) {
        self.handle.stopped().await
    }
}

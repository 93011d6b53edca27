//! The JSON-RPC flags both nodes share (`--rpc.*`): the server's bounds and the budget of every
//! execution a client asks for. The sequencer and the full node flatten [`RpcArgs`] into their
//! command lines, so that a flag means the same on both and has one default.

use std::time::Duration;

use gigas_evm::budget::{CallBudget, DEFAULT_GAS_CAP};
use gigas_primitives::duration::parse_duration;

/// `--rpc.*` flags, for `#[command(flatten)]`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct RpcArgs {
    /// Largest JSON-RPC request body, in bytes.
    #[arg(long = "rpc.max-request-size", default_value_t = 10 << 20, value_name = "BYTES")]
    pub max_request: u32,
    /// Largest JSON-RPC response body, in bytes.
    #[arg(long = "rpc.max-response-size", default_value_t = 100 << 20, value_name = "BYTES")]
    pub max_response: u32,
    /// Most simultaneous connections (HTTP requests in flight plus WebSocket sessions).
    #[arg(long = "rpc.max-connections", default_value_t = 500, value_name = "N")]
    pub max_connections: u32,
    /// Most TCP connections one client address may hold open (0: no bound); more are
    /// answered 429 and closed. Loopback is exempt unless --rpc.limit-loopback.
    #[arg(
        long = "rpc.max-connections-per-ip",
        default_value_t = 64,
        value_name = "N"
    )]
    pub max_connections_per_ip: u32,
    /// Hold loopback clients to the per-address bounds too (leave off behind a proxy on the
    /// same host: every client comes in from 127.0.0.1 there).
    #[arg(long = "rpc.limit-loopback")]
    pub limit_loopback: bool,
    /// Most calls in one batch request.
    #[arg(long = "rpc.max-batch", default_value_t = 1_000, value_name = "N")]
    pub max_batch: u32,
    /// Most subscriptions per WebSocket connection.
    #[arg(
        long = "rpc.max-subscriptions",
        default_value_t = 1_024,
        value_name = "N"
    )]
    pub max_subscriptions: u32,
    /// How long a WebSocket subscription's notification may wait for a client that stopped
    /// reading (its connection's buffer full) before the subscription is dropped with an
    /// error notification.
    #[arg(long = "rpc.subscription-send-timeout", default_value = "10s",
          value_name = "DURATION", value_parser = parse_duration)]
    pub subscription_send_timeout: Duration,
    /// How long a connection may take no byte of an answer (a client that stopped reading)
    /// before it is closed with every answer it held.
    #[arg(long = "rpc.send-timeout", default_value = "30s", value_name = "DURATION",
          value_parser = parse_duration)]
    pub send_timeout: Duration,
    /// Widest block range of one eth_getLogs.
    #[arg(
        long = "rpc.max-logs-range",
        default_value_t = 10_000,
        value_name = "BLOCKS"
    )]
    pub max_logs_range: u64,
    /// Most logs one eth_getLogs returns.
    #[arg(long = "rpc.max-logs", default_value_t = 10_000, value_name = "N")]
    pub max_logs: usize,
    /// Most executions (eth_call, eth_estimateGas, traces, log scans, fee history, proofs)
    /// running at once; more wait their turn. Default: one per core, at least 2.
    #[arg(long = "rpc.max-executions", value_name = "N")]
    pub max_executions: Option<usize>,
    /// Most gas one eth_call, eth_estimateGas or trace may use, whatever the request and its
    /// block overrides say (geth's flag and default).
    #[arg(long = "rpc.gascap", default_value_t = DEFAULT_GAS_CAP, value_name = "GAS",
          value_parser = clap::value_parser!(u64).range(21_000..))]
    pub gas_cap: u64,
    /// Wall-clock time one eth_call, eth_estimateGas (all its runs) or trace may take before it
    /// is stopped and answered with an error (geth's flag and default).
    #[arg(long = "rpc.evmtimeout", default_value = "5s", value_name = "DURATION",
          value_parser = parse_duration)]
    pub evm_timeout: Duration,
    /// Most EVM memory one execution may use, all call frames together (e.g. 64MiB); a frame
    /// growing past it halts out of gas.
    #[arg(long = "rpc.evmmemory", default_value = "64MiB", value_name = "SIZE",
          value_parser = parse_memory)]
    pub evm_memory: u64,
    /// Origins browsers may call the node from (CORS), comma-separated, or `*` for any
    /// (geth's flag). Default: none.
    #[arg(
        long = "http.corsdomain",
        value_name = "ORIGINS",
        value_delimiter = ','
    )]
    pub cors_domain: Vec<String>,
}

/// A size of at least 1 MiB (a contract's memory grows a page at a time; less is a typo).
fn parse_memory(s: &str) -> Result<u64, String> {
    let bytes = gigas_cgroup::parse_size(s).map_err(|e| e.to_string())?;
    if bytes < 1 << 20 {
        return Err(format!("{s} is less than 1MiB"));
    }
    Ok(bytes)
}

impl RpcArgs {
    /// The server's configuration listening on `listen`.
    pub fn config(&self, listen: std::net::SocketAddr) -> gigas_rpc::RpcConfig {
        let defaults = gigas_rpc::RpcConfig::default();
        gigas_rpc::RpcConfig {
            listen,
            max_request_body_bytes: self.max_request,
            max_response_body_bytes: self.max_response,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_ip,
            limit_loopback: self.limit_loopback,
            max_batch_size: self.max_batch,
            max_subscriptions_per_connection: self.max_subscriptions,
            subscription_send_timeout: self.subscription_send_timeout,
            send_timeout: self.send_timeout,
            max_log_block_range: self.max_logs_range,
            max_log_results: self.max_logs,
            max_concurrent_executions: self
                .max_executions
                .unwrap_or(defaults.max_concurrent_executions),
            execution_timeout: self.evm_timeout,
            cors_origins: self.cors_domain.clone(),
            ..defaults
        }
    }

    /// The budget of every execution a client asks for.
    pub fn budget(&self) -> CallBudget {
        CallBudget {
            gas_cap: self.gas_cap,
            memory_limit: self.evm_memory,
            timeout: self.evm_timeout,
        }
    }
}

/// Threads the async runtime may run blocking work on (RPC reads and executions, submissions'
/// pool checks): 8 per core, at least 32. Executions are bounded by their permits and reads
/// are short, so more threads would only add memory: each thread that allocates keeps its own
/// allocator heap, and tokio's default of 512 let a load of 1,000 tx/s over HTTP batches
/// reach 217 threads and 1.6 GiB of anonymous memory in a minute.
pub fn max_blocking_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (8 * cores).max(32)
}

/// The nodes' async runtime: `workers` threads (default: one per core), blocking work held to
/// [`max_blocking_threads`], and idle blocking threads kept a minute instead of tokio's 10 s,
/// so that a steady load does not make and end threads (and abandon their heaps) all the time.
pub fn runtime(name: &str, workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .thread_name(name)
        .max_blocking_threads(max_blocking_threads())
        .thread_keep_alive(Duration::from_secs(60));
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder.build()
}

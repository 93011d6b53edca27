//! Prometheus metrics of the RPC server, registered under `gigas_rpc_*`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Label of per-method series. Method names come from the method table (or "unknown"), so the
/// number of series is bounded whatever clients send.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: &'static str,
}

/// Label of the error series: the JSON-RPC code.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: i64,
}

/// Label of the subscription series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

fn latency_histogram() -> Histogram {
    // 10 µs .. ~42 s in factors of 2.5.
    Histogram::new(exponential_buckets(0.000_01, 2.5, 17))
}

/// The server's metrics. Cheap to clone (every metric is shared).
#[derive(Debug, Clone)]
pub struct RpcMetrics {
    requests: Family<MethodLabel, Counter>,
    latency: Family<MethodLabel, Histogram, fn() -> Histogram>,
    errors: Family<CodeLabel, Counter>,
    connections: Gauge,
    connections_refused: Counter,
    subscriptions: Family<KindLabel, Gauge>,
    subscriptions_dropped: Family<KindLabel, Counter>,
}

impl Default for RpcMetrics {
    fn default() -> Self {
        RpcMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            errors: Family::default(),
            connections: Gauge::default(),
            connections_refused: Counter::default(),
            subscriptions: Family::default(),
            subscriptions_dropped: Family::default(),
        }
    }
}

impl RpcMetrics {
    /// Registers every metric under `gigas_rpc_`: `requests_total{method}`,
    /// `request_duration_seconds{method}`, `errors_total{code}`, `open_connections`,
    /// `connections_refused_total`, `subscriptions{kind}`, `subscriptions_dropped_total{kind}`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("gigas_rpc");
        r.register(
            "requests",
            "JSON-RPC calls answered, by method (batch entries counted one by one)",
            self.requests.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time to answer a JSON-RPC call, by method",
            self.latency.clone(),
        );
        r.register(
            "errors",
            "JSON-RPC error answers, by error code",
            self.errors.clone(),
        );
        r.register(
            "open_connections",
            "Open TCP connections (HTTP and WebSocket)",
            self.connections.clone(),
        );
        r.register(
            "connections_refused",
            "TCP connections refused because their address held its most (429)",
            self.connections_refused.clone(),
        );
        r.register(
            "subscriptions",
            "Active subscriptions, by kind",
            self.subscriptions.clone(),
        );
        r.register(
            "subscriptions_dropped",
            "Subscriptions dropped because the client fell behind, by kind",
            self.subscriptions_dropped.clone(),
        );
    }

    /// Records one answered call.
    pub(crate) fn record_call(&self, method: &'static str, took: Duration, error: Option<i32>) {
        let label = MethodLabel { method };
        self.requests.get_or_create(&label).inc();
        self.latency
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if let Some(code) = error {
            self.record_error(code);
        }
    }

    /// Records one error answer.
    pub(crate) fn record_error(&self, code: i32) {
        self.errors
            .get_or_create(&CodeLabel {
                code: i64::from(code),
            })
            .inc();
    }

    /// Counts a connection until the returned guard drops.
    pub(crate) fn connection_opened(&self) -> GaugeGuard {
        GaugeGuard::new(self.connections.clone())
    }

    /// Counts a connection refused for its address's bound.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// Counts a subscription until the returned guard drops.
    pub(crate) fn subscription_opened(&self, kind: &'static str) -> GaugeGuard {
        GaugeGuard::new(
            self.subscriptions
                .get_or_create(&KindLabel { kind })
                .clone(),
        )
    }

    /// Counts a subscription dropped for lagging.
    pub(crate) fn subscription_dropped(&self, kind: &'static str) {
        self.subscriptions_dropped
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// Connections refused so far for their address's bound.
    pub fn connections_refused(&self) -> u64 {
        self.connections_refused.get()
    }

    /// Open connections now (for tests and logs).
    pub fn open_connections(&self) -> i64 {
        self.connections.get()
    }

    /// Active subscriptions of `kind` ("newHeads", "logs", "newPendingTransactions") now.
    pub fn active_subscriptions(&self, kind: &'static str) -> i64 {
        self.subscriptions.get_or_create(&KindLabel { kind }).get()
    }

    /// Subscriptions of `kind` dropped for lagging so far.
    pub fn dropped_subscriptions(&self, kind: &'static str) -> u64 {
        self.subscriptions_dropped
            .get_or_create(&KindLabel { kind })
            .get()
    }

    /// Calls answered for `method` so far ("unknown" counts methods not in the table).
    pub fn requests(&self, method: &'static str) -> u64 {
        self.requests.get_or_create(&MethodLabel { method }).get()
    }

    /// Error answers with `code` so far.
    pub fn errors(&self, code: i32) -> u64 {
        self.errors
            .get_or_create(&CodeLabel {
                code: i64::from(code),
            })
            .get()
    }
}

/// Increments a gauge on creation and decrements it on drop.
#[derive(Debug)]
pub(crate) struct GaugeGuard(Gauge);

impl GaugeGuard {
    fn new(gauge: Gauge) -> Self {
        gauge.inc();
        GaugeGuard(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

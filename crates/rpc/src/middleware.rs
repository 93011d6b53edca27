//! The two middlewares of the server: per-call (unknown methods named in the error, metrics) and
//! per-HTTP-request (extra routes on the same port, connection counting).

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::Method;
use hyper::body::Bytes;
use jsonrpsee::core::middleware::{Batch, BatchEntry, Notification, RpcServiceT};
use jsonrpsee::core::BoxError;
use jsonrpsee::server::{
    BatchResponseBuilder, HttpBody, HttpRequest, HttpResponse, MethodResponse,
};
use jsonrpsee::types::{ErrorObject, Request};
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};

use crate::accept::{ClientAddr, ClientSlot};
use crate::error::codes;

/// Entries of one batch answered at once (the rest wait their turn, in order).
const BATCH_CONCURRENCY: usize = 64;
use crate::metrics::{GaugeGuard, RpcMetrics};

/// Longest method name echoed back in a "does not exist" error: a client may send megabytes.
const MAX_ECHOED_METHOD: usize = 128;

/// Per-call middleware: answers unknown methods itself with their name (jsonrpsee says only
/// "Method not found") and records every call's method, latency and error code.
#[derive(Debug, Clone)]
pub(crate) struct CallLayer<S> {
    pub(crate) inner: S,
    pub(crate) methods: Arc<HashSet<&'static str>>,
    pub(crate) metrics: Arc<RpcMetrics>,
    pub(crate) max_response_body_size: usize,
}

impl<S> CallLayer<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            BatchResponse = MethodResponse,
            NotificationResponse = MethodResponse,
        > + Send
        + Sync,
{
    async fn answer(&self, request: Request<'_>) -> MethodResponse {
        let Some(&method) = self.methods.get(request.method_name()) else {
            let name: String = request
                .method_name()
                .chars()
                .take(MAX_ECHOED_METHOD)
                .collect();
            let err = ErrorObject::owned(
                codes::METHOD_NOT_FOUND,
                format!("the method {name} does not exist/is not available"),
                None::<()>,
            );
            self.metrics
                .record_call("unknown", Default::default(), Some(codes::METHOD_NOT_FOUND));
            return MethodResponse::error(request.id, err).with_extensions(request.extensions);
        };
        let started = Instant::now();
        let response = self.inner.call(request).await;
        self.metrics
            .record_call(method, started.elapsed(), response.as_error_code());
        response
    }

    /// One batch entry's answer (`None` for a notification).
    fn entry<'a>(
        self,
        entry: Result<BatchEntry<'a>, jsonrpsee::core::middleware::BatchEntryErr<'a>>,
    ) -> futures::future::BoxFuture<'a, Option<MethodResponse>>
    where
        S: 'a,
    {
        Box::pin(async move {
            match entry {
                Ok(BatchEntry::Call(request)) => Some(self.answer(request).await),
                Ok(BatchEntry::Notification(n)) => {
                    self.inner.notification(n).await;
                    None
                }
                Err(err) => {
                    let (err, id) = err.into_parts();
                    self.metrics.record_error(err.code());
                    Some(MethodResponse::error(id, err))
                }
            }
        })
    }
}

impl<S> RpcServiceT for CallLayer<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            BatchResponse = MethodResponse,
            NotificationResponse = MethodResponse,
        > + Clone
        + Send
        + Sync
        + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, request: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let this = self.clone();
        async move { this.answer(request).await }
    }

    /// jsonrpsee's own batch handling calls the inner service directly, past this middleware;
    /// batches are therefore answered here entry by entry so that each gets the same treatment
    /// as a single call. jsonrpsee has already refused batches over the size limit.
    ///
    /// Up to [`BATCH_CONCURRENCY`] entries of a batch are answered at once, in the order
    /// given: one after another, a batch of transactions would wait for each one's sender
    /// recovery and journal sync in turn, where together they share them.
    fn batch<'a>(&self, batch: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let this = self.clone();
        async move {
            use futures::StreamExt as _;
            let mut answers = BatchResponseBuilder::new_with_limit(this.max_response_body_size);
            let mut got_notification = false;
            // Boxed one by one: a closure building the futures inside this `Send` future
            // trips the compiler's higher-ranked lifetime check.
            let entries: Vec<_> = batch
                .into_iter()
                .map(|entry| this.clone().entry(entry))
                .collect();
            let mut responses = futures::stream::iter(entries).buffered(BATCH_CONCURRENCY);
            while let Some(response) = responses.next().await {
                let Some(response) = response else {
                    got_notification = true;
                    continue;
                };
                if let Err(too_big) = answers.append(response) {
                    return too_big;
                }
            }
            if answers.is_empty() && got_notification {
                MethodResponse::notification()
            } else {
                MethodResponse::from_batch(answers.finish())
            }
        }
    }

    fn notification<'a>(
        &self,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.inner.notification(n)
    }
}

/// Plain HTTP routes served on the JSON-RPC port, e.g. the sequencer's `GET /diffs/{n}`.
///
/// Every request that is neither a WebSocket upgrade nor a `POST` (that is, `GET`, `HEAD`,
/// `OPTIONS`, ...) goes to this service; `POST` goes to JSON-RPC, and so do WebSocket upgrades
/// except those to a path named with [`HttpRoutes::with_websocket_paths`] (e.g. the
/// sequencer's binary `/diffs/stream`). An `axum::Router` fits as it is (its error type is
/// `Infallible`): `HttpRoutes::new(router)`.
#[derive(Clone)]
pub struct HttpRoutes {
    service: BoxCloneSyncService<HttpRequest, HttpResponse, Infallible>,
    websocket_paths: Arc<[String]>,
}

impl std::fmt::Debug for HttpRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpRoutes(..)")
    }
}

impl HttpRoutes {
    /// Routes served by `service` (e.g. an `axum::Router`).
    pub fn new<S, B>(service: S) -> Self
    where
        S: Service<HttpRequest, Response = http::Response<B>, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        HttpRoutes {
            service: BoxCloneSyncService::new(
                service.map_response(|response: http::Response<B>| response.map(HttpBody::new)),
            ),
            websocket_paths: Arc::from([]),
        }
    }

    /// WebSocket upgrades to these exact paths go to the routes instead of JSON-RPC.
    pub fn with_websocket_paths(
        mut self,
        paths: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.websocket_paths = paths.into_iter().map(Into::into).collect();
        self
    }

    fn takes_upgrade(&self, request: &HttpRequest) -> bool {
        let path = request.uri().path();
        self.websocket_paths.iter().any(|p| p == path)
    }
}

/// A route's answer body holding its route permit until it is sent whole or dropped.
struct PermitBody {
    body: HttpBody,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl hyper::body::Body for PermitBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// 503 for a route request beyond the connection limit, with a JSON error and `Retry-After`.
fn busy() -> HttpResponse {
    let body = r#"{"error":"too many requests in flight; try again shortly"}"#;
    http::Response::builder()
        .status(http::StatusCode::SERVICE_UNAVAILABLE)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::RETRY_AFTER, "1")
        .body(HttpBody::from(body))
        .unwrap_or_else(|_| http::Response::new(HttpBody::from(body)))
}

/// Marks a connection open while any copy lives: counted in the open-connections gauge, and
/// holding its place among its client address's. The HTTP service holds one for the TCP
/// connection; a WebSocket upgrade stores another in the request's extensions, which jsonrpsee
/// keeps for the whole WebSocket session, so both follow the upgraded connection too.
#[derive(Debug, Clone)]
struct OpenConnection(#[allow(dead_code)] Arc<(GaugeGuard, ClientSlot)>);

/// The HTTP middleware, built once per TCP connection ([`HttpLayer::for_client`]).
#[derive(Debug, Clone)]
pub(crate) struct HttpLayer {
    pub(crate) routes: Option<HttpRoutes>,
    pub(crate) metrics: Arc<RpcMetrics>,
    /// Requests to the extra routes in flight, all connections together: jsonrpsee counts
    /// only its own against `max_connections`, and the routes must not go past it either.
    pub(crate) route_permits: Arc<tokio::sync::Semaphore>,
}

impl HttpLayer {
    /// The layer of one connection from `client`, which holds `slot` while it is open: its
    /// requests carry the address.
    pub(crate) fn for_client(&self, client: ClientAddr, slot: ClientSlot) -> ClientHttpLayer {
        ClientHttpLayer {
            layer: self.clone(),
            client,
            connection: OpenConnection(Arc::new((self.metrics.connection_opened(), slot))),
        }
    }
}

/// [`HttpLayer`] for one accepted connection.
#[derive(Debug, Clone)]
pub(crate) struct ClientHttpLayer {
    layer: HttpLayer,
    client: ClientAddr,
    connection: OpenConnection,
}

impl<S> Layer<S> for ClientHttpLayer {
    type Service = HttpService<S>;

    fn layer(&self, inner: S) -> HttpService<S> {
        HttpService {
            inner,
            routes: self.layer.routes.clone(),
            connection: self.connection.clone(),
            route_permits: self.layer.route_permits.clone(),
            client: self.client,
        }
    }
}

/// See [`HttpLayer`].
#[derive(Debug, Clone)]
pub(crate) struct HttpService<S> {
    inner: S,
    routes: Option<HttpRoutes>,
    connection: OpenConnection,
    route_permits: Arc<tokio::sync::Semaphore>,
    client: ClientAddr,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S> Service<HttpRequest> for HttpService<S>
where
    S: Service<HttpRequest, Response = HttpResponse, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = BoxFuture<Result<HttpResponse, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: HttpRequest) -> Self::Future {
        request.extensions_mut().insert(self.client);
        let upgrade = jsonrpsee::server::ws::is_upgrade_request(&request);
        let to_routes = match &self.routes {
            Some(routes) if upgrade => routes.takes_upgrade(&request),
            Some(_) => request.method() != Method::POST,
            None => false,
        };
        if upgrade {
            request.extensions_mut().insert(self.connection.clone());
        }
        if to_routes {
            if let Some(routes) = &self.routes {
                let Ok(permit) = self.route_permits.clone().try_acquire_owned() else {
                    return Box::pin(async { Ok(busy()) });
                };
                let routes = routes.service.clone();
                return Box::pin(async move {
                    match routes.oneshot(request).await {
                        // The permit goes with the body: an answer counts until it is sent
                        // (or its connection is cut), not only until it is built.
                        Ok(response) => Ok(response.map(|body| {
                            HttpBody::new(PermitBody {
                                body,
                                _permit: permit,
                            })
                        })),
                        Err(never) => match never {},
                    }
                });
            }
        }
        Box::pin(self.inner.call(request))
    }
}

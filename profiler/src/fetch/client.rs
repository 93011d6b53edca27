//! The JSON-RPC client: one call to the node, retried with backoff while the transport fails.

use std::time::Duration;

use alloy_primitives::B256;
use alloy_provider::transport::{RpcError, TransportErrorKind};
use alloy_provider::{Provider, RootProvider};
use serde_json::{json, Value};

use super::{field_hash, quantity, FetchError};

enum CallError {
    /// The node answered with an error: code and message.
    Node(String),
    /// Anything else, after the retries.
    Fatal(FetchError),
}

pub(super) struct Client {
    provider: RootProvider,
    pub(super) url: String,
    retries: u32,
}

impl Client {
    pub(super) async fn new(url: &str, retries: u32) -> Result<Self, FetchError> {
        // Parsing an http(s) URL opens no connection; ws:// would connect here.
        let provider = RootProvider::connect(url)
            .await
            .map_err(|e| FetchError::BadUrl {
                url: url.into(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            provider,
            url: url.into(),
            retries,
        })
    }

    /// One call, retried with backoff while the transport fails.
    async fn call(&self, method: &'static str, params: Value) -> Result<Value, CallError> {
        let mut wait = Duration::from_millis(250);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result: Result<Value, _> = self
                .provider
                .raw_request(method.into(), params.clone())
                .await;
            let error = match result {
                Ok(value) => return Ok(value),
                Err(RpcError::NullResp) => return Ok(Value::Null),
                Err(RpcError::ErrorResp(payload)) => {
                    return Err(CallError::Node(format!(
                        "{} (code {})",
                        payload.message, payload.code
                    )))
                }
                Err(RpcError::Transport(kind)) => {
                    if matches!(kind, TransportErrorKind::NonRetryable(_)) {
                        kind.to_string()
                    } else if attempt <= self.retries {
                        tracing::warn!(method, attempt, error = %kind, "transport error; retrying in {wait:?}");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(30));
                        continue;
                    } else {
                        kind.to_string()
                    }
                }
                Err(other) => other.to_string(),
            };
            return Err(CallError::Fatal(FetchError::Transport {
                url: self.url.clone(),
                method: method.into(),
                attempts: attempt,
                message: error,
            }));
        }
    }

    /// A call whose node-side error is just reported as such.
    async fn plain(&self, method: &'static str, params: Value) -> Result<Value, FetchError> {
        self.call(method, params).await.map_err(|e| match e {
            CallError::Node(message) => FetchError::Refused {
                url: self.url.clone(),
                method: method.into(),
                message,
            },
            CallError::Fatal(e) => e,
        })
    }

    pub(super) async fn number(&self, method: &'static str) -> Result<u64, FetchError> {
        let value = self.plain(method, json!([])).await?;
        quantity(Some(&value))
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| FetchError::Malformed {
                url: self.url.clone(),
                method: method.into(),
                number: 0,
                reason: format!("{value} is not a number"),
            })
    }

    /// `eth_getBlockByNumber`, a missing block being an error that names the node's head.
    pub(super) async fn block(&self, number: u64, full: bool) -> Result<Value, FetchError> {
        let block = self
            .plain(
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), full]),
            )
            .await?;
        if block.is_null() {
            return Err(FetchError::NoBlock {
                url: self.url.clone(),
                number,
                head: self.number("eth_blockNumber").await?,
            });
        }
        Ok(block)
    }

    pub(super) async fn prestate_trace(&self, number: u64) -> Result<Value, FetchError> {
        self.call(
            "debug_traceBlockByNumber",
            json!([format!("{number:#x}"), {"tracer": "prestateTracer"}]),
        )
        .await
        .map_err(|e| match e {
            CallError::Node(message) => FetchError::NoPrestateTracer {
                url: self.url.clone(),
                number,
                message,
            },
            CallError::Fatal(e) => e,
        })
    }

    pub(super) async fn block_hash(&self, number: u64) -> Result<B256, FetchError> {
        let header = self.block(number, false).await?;
        self.hash_of(&header, number, "eth_getBlockByNumber")
    }

    fn hash_of(&self, block: &Value, number: u64, method: &str) -> Result<B256, FetchError> {
        field_hash(block, "hash").ok_or_else(|| FetchError::Malformed {
            url: self.url.clone(),
            method: method.into(),
            number,
            reason: "no 32-byte `hash`".into(),
        })
    }
}

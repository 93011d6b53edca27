//! The one error type of the RPC layer and the JSON-RPC codes it answers with.

use std::net::SocketAddr;

use alloy_primitives::{hex, Bytes};
use alloy_sol_types::{Panic, Revert, SolError};
use jsonrpsee::types::ErrorObjectOwned;

/// JSON-RPC error codes, as geth and reth answer them.
pub mod codes {
    /// The request body is not valid JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// The JSON is not a valid request object.
    pub const INVALID_REQUEST: i32 = -32600;
    /// No such method, or the node does not serve it.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// A parameter is missing, malformed or out of range.
    pub const INVALID_PARAMS: i32 = -32602;
    /// The node failed; not the caller's fault.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// geth's generic server error: transaction pool rejections, execution failures.
    pub const SERVER_ERROR: i32 = -32000;
    /// The block (or another resource) asked for does not exist.
    pub const RESOURCE_NOT_FOUND: i32 = -32001;
    /// A query asks for more than the configured bounds allow.
    pub const LIMIT_EXCEEDED: i32 = -32005;
    /// The call reverted; `data` holds the revert output (EIP-1474 / geth).
    pub const EXECUTION_REVERTED: i32 = 3;
}

/// Every error the RPC layer or a [`Backend`](crate::Backend) can answer with.
///
/// Each variant has one JSON-RPC code ([`RpcError::code`]); the message is the `Display` text.
/// Backends build pool rejections with [`RpcError::TxRejected`] (the pool's words, verbatim) and
/// reverts with [`RpcError::revert`].
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The transaction pool refused a transaction; the text is passed through verbatim, e.g.
    /// "nonce too low: next nonce 7, tx nonce 5". Code -32000.
    #[error("{0}")]
    TxRejected(String),
    /// `eth_call` / `eth_estimateGas` failed for a reason other than a revert, e.g.
    /// "insufficient funds for gas * price + value: ..." or "gas required exceeds allowance
    /// (30000000)". Code -32000.
    #[error("{0}")]
    ExecutionFailed(String),
    /// The call reverted. Code 3, `data` = the revert output as hex; the message decodes
    /// `Error(string)` and `Panic(uint256)`. Build it with [`RpcError::revert`].
    #[error("{message}")]
    Reverted {
        /// "execution reverted" or "execution reverted: <reason>".
        message: String,
        /// The raw revert output.
        output: Bytes,
    },
    /// A parameter is wrong. Code -32602.
    #[error("{0}")]
    InvalidParams(String),
    /// No method of that name. Code -32601.
    #[error("the method {0} does not exist/is not available")]
    MethodNotFound(String),
    /// The method exists in Ethereum's API but this node does not serve it (e.g. the full node and
    /// `eth_sendRawTransaction`). Code -32601, naming the method.
    #[error("the method {0} is not available on this node")]
    MethodNotSupported(&'static str),
    /// The block asked for is not known (beyond the head, or an unknown hash). Code -32000 with
    /// geth's words, which tools match on.
    #[error("header not found")]
    HeaderNotFound,
    /// Another resource is not known. Code -32001.
    #[error("{0}")]
    ResourceNotFound(String),
    /// The state at `block` is no longer kept. Code -32000.
    #[error("historical state for block {block} is not available: this node keeps state from block {oldest} on")]
    StatePruned {
        /// The block asked for.
        block: u64,
        /// The oldest block whose state the node still answers for.
        oldest: u64,
    },
    /// `eth_getLogs` asked for more blocks than allowed. Code -32005.
    #[error("query exceeds max block range {0}")]
    LogRangeTooLarge(u64),
    /// A request would go past another of the node's bounds (filters installed, ...); the
    /// text says which. Code -32005.
    #[error("{0}")]
    LimitExceeded(String),
    /// `eth_getLogs` matched more logs than allowed. Code -32005.
    #[error("query returned more than {0} results")]
    TooManyLogs(usize),
    /// The request ran past its execution timeout and was stopped; the text says what
    /// stopped, e.g. geth's "execution aborted (timeout = 5s)". Code -32000.
    #[error("{0}")]
    Timeout(String),
    /// The node failed (storage error, a panicking backend). Code -32603.
    #[error("internal error: {0}")]
    Internal(String),
    /// The server could not bind its listen address (start-up only; never sent to a client).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

impl RpcError {
    /// A revert carrying `output`, with the reason decoded as geth does: `Error(string)` gives
    /// "execution reverted: <reason>", `Panic(uint256)` names the panic, anything else gives
    /// "execution reverted".
    pub fn revert(output: Bytes) -> Self {
        let reason = if let Ok(revert) = Revert::abi_decode(&output) {
            Some(revert.reason)
        } else if let Ok(panic) = Panic::abi_decode(&output) {
            Some(panic.to_string())
        } else {
            None
        };
        let message = match reason {
            Some(reason) if !reason.is_empty() => format!("execution reverted: {reason}"),
            _ => "execution reverted".to_string(),
        };
        RpcError::Reverted { message, output }
    }

    /// The JSON-RPC code this error is answered with.
    pub fn code(&self) -> i32 {
        match self {
            RpcError::TxRejected(_)
            | RpcError::ExecutionFailed(_)
            | RpcError::StatePruned { .. }
            | RpcError::Timeout(_)
            | RpcError::HeaderNotFound => codes::SERVER_ERROR,
            RpcError::Reverted { .. } => codes::EXECUTION_REVERTED,
            RpcError::InvalidParams(_) => codes::INVALID_PARAMS,
            RpcError::MethodNotFound(_) | RpcError::MethodNotSupported(_) => {
                codes::METHOD_NOT_FOUND
            }
            RpcError::ResourceNotFound(_) => codes::RESOURCE_NOT_FOUND,
            RpcError::LogRangeTooLarge(_)
            | RpcError::TooManyLogs(_)
            | RpcError::LimitExceeded(_) => codes::LIMIT_EXCEEDED,
            RpcError::Internal(_) | RpcError::Bind { .. } => codes::INTERNAL_ERROR,
        }
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(err: RpcError) -> Self {
        let code = err.code();
        let message = err.to_string();
        match err {
            // geth sends the revert output as one hex string; alloy, viem and ethers read it there.
            RpcError::Reverted { output, .. } => {
                ErrorObjectOwned::owned(code, message, Some(hex::encode_prefixed(&output)))
            }
            _ => ErrorObjectOwned::owned(code, message, None::<()>),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::U256;

    #[test]
    fn revert_decodes_error_string() {
        let output = Bytes::from(Revert::from("not owner").abi_encode());
        let err = RpcError::revert(output.clone());
        assert_eq!(err.to_string(), "execution reverted: not owner");
        assert_eq!(err.code(), 3);
        let obj = ErrorObjectOwned::from(err);
        assert_eq!(obj.code(), 3);
        let data = obj.data().map(|d| d.get().to_string());
        assert_eq!(data, Some(format!("\"{}\"", hex::encode_prefixed(&output))));
    }

    #[test]
    fn revert_decodes_panic() {
        let output = Bytes::from(
            Panic {
                code: U256::from(0x11),
            }
            .abi_encode(),
        );
        let msg = RpcError::revert(output).to_string();
        assert!(msg.starts_with("execution reverted: panic: "), "{msg}");
        assert!(msg.contains("overflow"), "{msg}");
    }

    #[test]
    fn revert_without_reason() {
        assert_eq!(
            RpcError::revert(Bytes::new()).to_string(),
            "execution reverted"
        );
        assert_eq!(
            RpcError::revert(Bytes::from_static(&[1, 2, 3])).to_string(),
            "execution reverted"
        );
    }

    #[test]
    fn limit_messages_match_geth() {
        assert_eq!(
            RpcError::LogRangeTooLarge(10_000).to_string(),
            "query exceeds max block range 10000"
        );
        assert_eq!(
            RpcError::TooManyLogs(10_000).to_string(),
            "query returned more than 10000 results"
        );
        assert_eq!(RpcError::TooManyLogs(1).code(), -32005);
        assert_eq!(RpcError::HeaderNotFound.code(), -32000);
        assert_eq!(RpcError::MethodNotSupported("eth_x").code(), -32601);
    }
}

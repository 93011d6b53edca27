//! The few JSON-RPC calls the load generator makes, over one pooled HTTP client.

use alloy_primitives::{Address, B256, U64};
use eyre::{bail, eyre, Result, WrapErr};
use serde::Deserialize;
use serde_json::{json, Value};

/// One answer of a (batch) JSON-RPC response.
#[derive(Debug, Deserialize)]
pub struct Answer<T> {
    /// The request's id.
    #[serde(default)]
    pub id: Option<u64>,
    /// The result, if it succeeded.
    #[serde(default = "none")]
    pub result: Option<T>,
    /// The error, if it failed.
    #[serde(default)]
    pub error: Option<RpcError>,
}

fn none<T>() -> Option<T> {
    None
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, Deserialize)]
pub struct RpcError {
    /// The error code.
    #[serde(default)]
    pub code: i64,
    /// The error message.
    #[serde(default)]
    pub message: String,
}

/// A JSON-RPC endpoint over HTTP.
#[derive(Debug, Clone)]
pub struct Rpc {
    /// The HTTP client, with its pool of connections.
    pub client: reqwest::Client,
    /// The endpoint.
    pub url: String,
}

impl Rpc {
    /// A client for `url` keeping up to `connections` connections alive.
    pub fn new(url: &str, connections: usize) -> Result<Self> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(connections)
            .tcp_nodelay(true)
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .wrap_err("building the HTTP client")?;
        Ok(Self {
            client,
            url: url.to_string(),
        })
    }

    /// POSTs `body` and returns the response's bytes (an error for a non-2xx status).
    pub async fn post(&self, body: String) -> Result<Vec<u8>> {
        let response = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        if !status.is_success() {
            bail!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            );
        }
        Ok(Vec::from(bytes))
    }

    /// One call.
    pub async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let bytes = self.post(body.to_string()).await?;
        let answer: Answer<T> = serde_json::from_slice(&bytes)
            .wrap_err_with(|| format!("{method}: unexpected answer"))?;
        match (answer.result, answer.error) {
            (_, Some(e)) => Err(eyre!("{method}: {} ({})", e.message, e.code)),
            (Some(r), None) => Ok(r),
            (None, None) => Err(eyre!("{method}: null result")),
        }
    }

    /// The chain id.
    pub async fn chain_id(&self) -> Result<u64> {
        let id: U64 = self.call("eth_chainId", json!([])).await?;
        Ok(id.to())
    }

    /// The head block number.
    pub async fn block_number(&self) -> Result<u64> {
        let n: U64 = self.call("eth_blockNumber", json!([])).await?;
        Ok(n.to())
    }

    /// The transaction hashes of block `number` (None if the node has no such block).
    pub async fn block_hashes(&self, number: u64) -> Result<Option<Vec<B256>>> {
        #[derive(Deserialize)]
        struct Hashes {
            transactions: Vec<B256>,
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber",
            "params": [format!("{number:#x}"), false]});
        let bytes = self.post(body.to_string()).await?;
        let answer: Answer<Hashes> =
            serde_json::from_slice(&bytes).wrap_err("eth_getBlockByNumber: unexpected answer")?;
        if let Some(e) = answer.error {
            bail!("eth_getBlockByNumber {number}: {}", e.message);
        }
        Ok(answer.result.map(|b| b.transactions))
    }

    /// Next nonces (counting pooled transactions) of `addresses`, in batches.
    pub async fn pending_nonces(&self, addresses: &[Address]) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(addresses.len());
        for chunk in addresses.chunks(500) {
            let calls: Vec<Value> = chunk
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    json!({"jsonrpc": "2.0", "id": i, "method": "eth_getTransactionCount",
                        "params": [a, "pending"]})
                })
                .collect();
            let bytes = self.post(Value::Array(calls).to_string()).await?;
            let answers: Vec<Answer<U64>> = serde_json::from_slice(&bytes)
                .wrap_err("eth_getTransactionCount batch: unexpected answer")?;
            let mut nonces = vec![None; chunk.len()];
            for a in answers {
                if let Some(e) = a.error {
                    bail!("eth_getTransactionCount: {}", e.message);
                }
                if let (Some(id), Some(n)) = (a.id, a.result) {
                    if let Some(slot) = nonces.get_mut(id as usize) {
                        *slot = Some(n.to::<u64>());
                    }
                }
            }
            for (a, n) in chunk.iter().zip(nonces) {
                out.push(n.ok_or_else(|| eyre!("no nonce answered for {a}"))?);
            }
        }
        Ok(out)
    }

    /// Receipt statuses (true: success) of `hashes`; None for a hash without a receipt.
    pub async fn receipt_statuses(&self, hashes: &[B256]) -> Result<Vec<Option<bool>>> {
        #[derive(Deserialize)]
        struct Receipt {
            status: Option<U64>,
        }
        let calls: Vec<Value> = hashes
            .iter()
            .enumerate()
            .map(|(i, h)| {
                json!({"jsonrpc": "2.0", "id": i, "method": "eth_getTransactionReceipt",
                    "params": [h]})
            })
            .collect();
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let bytes = self.post(Value::Array(calls).to_string()).await?;
        let answers: Vec<Answer<Receipt>> = serde_json::from_slice(&bytes)
            .wrap_err("eth_getTransactionReceipt batch: unexpected answer")?;
        let mut out = vec![None; hashes.len()];
        for a in answers {
            if let (Some(id), Some(r)) = (a.id, a.result) {
                if let Some(slot) = out.get_mut(id as usize) {
                    *slot = Some(r.status.is_some_and(|s| s.to::<u64>() == 1));
                }
            }
        }
        Ok(out)
    }

    /// GET `url` as text (the metrics page).
    pub async fn get_text(&self, url: &str) -> Result<String> {
        let response = self.client.get(url).send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("GET {url}: HTTP {status}");
        }
        Ok(text)
    }
}

//! Blocking HTTP for the devnet's few requests (JSON-RPC `eth_blockNumber` and friends,
//! `/metrics`, Prometheus's API): a small runtime of its own per user, short timeouts.

use std::time::Duration;

use eyre::{bail, eyre, Result, WrapErr};

/// A client with its own single-threaded runtime.
#[derive(Debug)]
pub struct Http {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
}

impl Http {
    /// A client whose every request gives up after `timeout`.
    pub fn new(timeout: Duration) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .wrap_err("starting an HTTP runtime")?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .wrap_err("building an HTTP client")?;
        Ok(Self { runtime, client })
    }

    /// GET `url`: its status and body.
    pub fn get(&self, url: &str) -> Result<(u16, String)> {
        self.runtime.block_on(async {
            let response = self
                .client
                .get(url)
                .send()
                .await
                .wrap_err_with(|| format!("GET {url}"))?;
            let status = response.status().as_u16();
            let body = response
                .text()
                .await
                .wrap_err_with(|| format!("GET {url}"))?;
            Ok((status, body))
        })
    }

    /// A JSON-RPC call; its `result`.
    pub fn rpc(
        &self,
        url: &str,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value> {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let text = self.runtime.block_on(async {
            self.client
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .wrap_err_with(|| format!("{method} to {url}"))?
                .text()
                .await
                .wrap_err_with(|| format!("{method} to {url}"))
        })?;
        let mut answer: serde_json::Value = serde_json::from_str(&text)
            .wrap_err_with(|| format!("{method} to {url}: not JSON: {text}"))?;
        if let Some(error) = answer.get("error") {
            bail!("{method} to {url}: {error}");
        }
        answer
            .get_mut("result")
            .map(serde_json::Value::take)
            .ok_or_else(|| eyre!("{method} to {url}: no result in {text}"))
    }

    /// `eth_blockNumber`.
    pub fn block_number(&self, url: &str) -> Result<u64> {
        let result = self.rpc(url, "eth_blockNumber", serde_json::json!([]))?;
        quantity(&result).ok_or_else(|| eyre!("eth_blockNumber to {url}: {result} is no number"))
    }
}

/// A JSON-RPC quantity ("0x1a") as a number.
pub fn quantity(value: &serde_json::Value) -> Option<u64> {
    let text = value.as_str()?;
    u64::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

/// The value of the first sample of `name` (no labels, or any labels) in a Prometheus text
/// page.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = if let Some(labelled) = rest.strip_prefix('{') {
                labelled.split_once('}')?.1
            } else if rest.starts_with(' ') {
                rest
            } else {
                return None;
            };
            value.split_whitespace().next()?.parse().ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_and_quantities() {
        let page = "# HELP x y\ngigas_a_total 3\ngigas_a 7\ngigas_b{kind=\"v1\"} 8589934592\n";
        assert_eq!(metric(page, "gigas_a"), Some(7.0));
        assert_eq!(metric(page, "gigas_b"), Some(8589934592.0));
        assert_eq!(metric(page, "gigas_c"), None);
        assert_eq!(quantity(&serde_json::json!("0x1a")), Some(26));
        assert_eq!(quantity(&serde_json::json!(26)), None);
    }
}

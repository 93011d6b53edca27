//! The worst `eth_getProof` a full node answers while it follows: a proof at the oldest block
//! of its state window (`--keep-up-proofs`).
//!
//! A proof at a past block is computed through the head's trie with every key changed since
//! that block laid over it, so the oldest block of a full window is the most expensive read a
//! client can ask for; the node holds it to `--rpc.evmtimeout` (5 s by default) and answers
//! geth's timeout error past it. The probe asks for it once a second while the load runs,
//! from the moment the window is full (its size read from the node's
//! `gigas_fullnode_state_window_blocks`), and records how long each answer took and whether
//! it was a proof, a timeout or another error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use eyre::{eyre, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::load::metrics::Scrape;
use crate::load::rpc::Rpc;
use crate::load::Percentiles;

/// Blocks above the window's oldest at which the probe asks: the head moves between reading
/// it and the node answering, and the oldest block leaves the window with it.
const MARGIN: u64 = 2;

/// One probe.
#[derive(Debug, Clone, Serialize)]
pub struct ProofSample {
    /// Seconds since the probe started.
    pub t: f64,
    /// The node's head when the probe read it.
    pub head: u64,
    /// The block the proof was asked at.
    pub at: u64,
    /// Blocks the window held.
    pub window: u64,
    /// Milliseconds until the whole answer arrived.
    pub ms: f64,
    /// `proof`, `timeout` or the error's message.
    pub outcome: String,
}

/// What the probe found.
#[derive(Debug, Clone, Serialize)]
pub struct ProofReport {
    /// The address proven (the hottest benchmark account, changed in most blocks).
    pub address: Address,
    /// Milliseconds of the answered proofs (median, p90, p99, max).
    pub answered_ms: Percentiles,
    /// Proofs answered.
    pub answered: usize,
    /// Answers that were geth's execution-timeout error.
    pub timeouts: usize,
    /// Other errors (the first one's message in `first_error`).
    pub errors: usize,
    /// The first other error.
    pub first_error: Option<String>,
    /// The largest window seen, in blocks.
    pub window_blocks: u64,
    /// Every probe.
    pub samples: Vec<ProofSample>,
}

/// The running probe.
pub(super) struct ProofProbe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Vec<ProofSample>>>,
    address: Address,
}

impl ProofProbe {
    /// Starts probing the full node at `url` (its metrics at `metrics_url`) for proofs of
    /// `address`; it waits for the window to hold `full_window` blocks, all after block
    /// `load_from` (the sequencer's head when the load starts).
    pub(super) fn start(
        url: &str,
        metrics_url: &str,
        address: Address,
        full_window: u64,
        load_from: u64,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let rpc = Rpc::new(url, 1)?;
        let metrics_url = metrics_url.to_string();
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> Result<Vec<ProofSample>> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let started = Instant::now();
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let tick = Instant::now();
                    let window = runtime
                        .block_on(rpc.get_text(&metrics_url))
                        .ok()
                        .and_then(|text| {
                            Scrape::parse(&text).value("gigas_fullnode_state_window_blocks")
                        })
                        .map_or(0, |w| w as u64);
                    let head = runtime.block_on(rpc.block_number()).ok();
                    // Full once its oldest block came after `load_from`, so that every
                    // block in it carries the load's changes (the empty blocks before make
                    // cheap proofs).
                    let oldest = head.map(|h| (h + 1).saturating_sub(window));
                    let loaded = oldest.is_some_and(|o| o > load_from);
                    if let (Some(head), true) = (head, window >= full_window && loaded) {
                        let at = (head + 1 + MARGIN).saturating_sub(window);
                        let asked = Instant::now();
                        let answer: Result<Value> = runtime.block_on(
                            rpc.call("eth_getProof", json!([address, [], format!("{at:#x}")])),
                        );
                        let ms = asked.elapsed().as_secs_f64() * 1e3;
                        samples.push(ProofSample {
                            t: started.elapsed().as_secs_f64(),
                            head,
                            at,
                            window,
                            ms,
                            outcome: outcome(&answer),
                        });
                    }
                    std::thread::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed()));
                }
                Ok(samples)
            })
        };
        Ok(Self {
            stop,
            thread,
            address,
        })
    }

    /// Stops the probe and sums up what it found.
    pub(super) fn finish(self) -> Result<ProofReport> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self
            .thread
            .join()
            .map_err(|_| eyre!("the proof probe panicked"))??;
        Ok(summarize(self.address, samples))
    }
}

/// How an answer is counted.
fn outcome(answer: &Result<Value>) -> String {
    match answer {
        Ok(v) if v.get("accountProof").is_some() => "proof".into(),
        Ok(v) => format!("an answer without accountProof: {v}"),
        // geth's timeout error, as `gigas_rpc` words it.
        Err(e) if e.to_string().contains("execution timeout") => "timeout".into(),
        Err(e) => e.to_string(),
    }
}

fn summarize(address: Address, samples: Vec<ProofSample>) -> ProofReport {
    let answered: Vec<f64> = samples
        .iter()
        .filter(|s| s.outcome == "proof")
        .map(|s| s.ms)
        .collect();
    let timeouts = samples.iter().filter(|s| s.outcome == "timeout").count();
    let others: Vec<&ProofSample> = samples
        .iter()
        .filter(|s| s.outcome != "proof" && s.outcome != "timeout")
        .collect();
    ProofReport {
        address,
        answered: answered.len(),
        answered_ms: Percentiles::of(answered),
        timeouts,
        errors: others.len(),
        first_error: others.first().map(|s| s.outcome.clone()),
        window_blocks: samples.iter().map(|s| s.window).max().unwrap_or(0),
        samples,
    }
}

/// The report's Markdown section.
pub(super) fn markdown(r: &ProofReport) -> String {
    format!(
        "\n## eth_getProof at the oldest block of the state window\n\n- address {} (the hottest benchmark account), no slots, asked {} blocks above the window's oldest, once a second from the time the window was full of blocks made under the load ({} blocks at most)\n- {} answered: median {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms\n- {} timeouts (geth's execution-timeout error), {} other errors{}\n",
        r.address,
        MARGIN,
        r.window_blocks,
        r.answered,
        r.answered_ms.p50,
        r.answered_ms.p90,
        r.answered_ms.p99,
        r.answered_ms.max,
        r.timeouts,
        r.errors,
        r.first_error
            .as_ref()
            .map_or_else(String::new, |e| format!(" (first: {e})")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: f64, outcome: &str) -> ProofSample {
        ProofSample {
            t: 0.0,
            head: 300,
            at: 175,
            window: 128,
            ms,
            outcome: outcome.into(),
        }
    }

    #[test]
    fn answers_timeouts_and_errors_are_counted_apart() {
        let r = summarize(
            Address::ZERO,
            vec![
                sample(40.0, "proof"),
                sample(5000.0, "timeout"),
                sample(60.0, "proof"),
                sample(1.0, "eth_getProof: not found (-32001)"),
            ],
        );
        assert_eq!((r.answered, r.timeouts, r.errors), (2, 1, 1));
        assert_eq!(r.answered_ms.max, 60.0);
        assert_eq!(
            r.first_error.as_deref(),
            Some("eth_getProof: not found (-32001)")
        );
    }

    #[test]
    fn a_timeout_is_told_from_other_errors() {
        let timeout: Result<Value> = Err(eyre!(
            "eth_getProof: eth_getProof at block 175: aborted at the execution timeout (412031 keys \
             changed since that block); ask for a more recent block (-32000)"
        ));
        assert_eq!(outcome(&timeout), "timeout");
        let proof: Result<Value> = Ok(json!({"accountProof": []}));
        assert_eq!(outcome(&proof), "proof");
    }
}

//! A run's live state (connections, tracker, head watcher, CPU samples) lives apart from the
//! run's plan and report, so what happens while a step is sent and drained can be read without
//! the command-line wiring around it.

mod evaluate;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::B256;
use eyre::{bail, Result, WrapErr};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::metrics::{self, Scrape};
use super::rpc::Rpc;
use super::send::{self, lock, Pace, Tracker, Transport};
use super::sign::{Generator, SignedTx};
use super::{CommonArgs, Percentiles, ReceiptCheck, SecondPoint, StepResult, TransportKind};

/// Microseconds per transaction to decode and recover up to 2,000 of `signed` on this thread,
/// with the node's own `decode_and_recover_bytes` (libsecp256k1 through alloy).
fn library_recovery_us(signed: &[SignedTx], config: &gigas_txpool::PoolConfig) -> Option<f64> {
    let raws: Vec<alloy_primitives::Bytes> = signed
        .iter()
        .take(2_000)
        .filter_map(|t| alloy_primitives::hex::decode(&t.hex).ok().map(Into::into))
        .collect();
    if raws.is_empty() {
        return None;
    }
    let started = std::time::Instant::now();
    let recovered = raws
        .into_iter()
        .filter(|raw| gigas_txpool::decode_and_recover_bytes(raw.clone(), config).is_ok())
        .count();
    (recovered > 0).then(|| started.elapsed().as_secs_f64() * 1e6 / recovered as f64)
}

type Finished = (Vec<StepResult>, String, ReceiptCheck, Vec<SecondPoint>, u64);

/// One run's live state.
pub(super) struct Session {
    common: CommonArgs,
    origin: Instant,
    rpc: Rpc,
    transport: Transport,
    tracker: Arc<Mutex<Tracker>>,
    generator: Generator,
    metrics_url: Option<String>,
    node_pid: Option<u32>,
    /// With a running node, its accounts' nonces are asked for; a started node's are 0.
    fetch_nonces: bool,
    next_id: u64,
    stop: watch::Sender<bool>,
    watcher: tokio::task::JoinHandle<Result<()>>,
    /// Answers still outstanding from the last step.
    stragglers: JoinSet<()>,
    /// Step windows: (start, end, rate), for the timeline.
    windows: Vec<(f64, f64, f64)>,
    /// Included transactions sampled for the receipt check.
    sample: Vec<B256>,
    /// The recovery library's own cost here, measured on the first step's transactions.
    library_recovery_us: Option<f64>,
}

impl Session {
    pub(super) async fn open(
        common: &CommonArgs,
        generator: Generator,
        url: &str,
        ws: String,
        metrics_url: Option<String>,
        node_pid: Option<u32>,
        chain_id: u64,
    ) -> Result<Self> {
        let rpc = Rpc::new(url, common.in_flight + 8)?;
        let node_chain = rpc
            .chain_id()
            .await
            .wrap_err("asking the node its chain id")?;
        if node_chain != chain_id {
            bail!("the node runs chain {node_chain}, the benchmark genesis is chain {chain_id}");
        }
        let head = rpc.block_number().await?;
        let origin = Instant::now();
        let tracker = Arc::new(Mutex::new(Tracker::new(origin)));
        let transport = match common.transport {
            TransportKind::Http => Transport::Http(rpc.clone()),
            TransportKind::Ws => Transport::Ws(Arc::new(
                send::WsPool::connect(&ws, common.ws_connections).await?,
            )),
        };
        let (stop, stopped) = watch::channel(false);
        let watcher = tokio::spawn(send::watch_heads(
            ws,
            rpc.clone(),
            Arc::clone(&tracker),
            origin,
            head,
            stopped,
        ));
        Ok(Self {
            common: common.clone(),
            origin,
            rpc,
            transport,
            tracker,
            generator,
            metrics_url,
            node_pid,
            fetch_nonces: common.sequencer.is_some(),
            library_recovery_us: None,
            next_id: 0,
            stop,
            watcher,
            stragglers: JoinSet::new(),
            windows: Vec::new(),
            sample: Vec::new(),
        })
    }

    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    async fn scrape(&self) -> Option<Scrape> {
        let url = self.metrics_url.as_ref()?;
        match self.rpc.get_text(url).await {
            Ok(text) => Some(Scrape::parse(&text)),
            Err(e) => {
                eprintln!("metrics: {e}");
                None
            }
        }
    }

    fn check_watcher(&mut self) -> Result<()> {
        if self.watcher.is_finished() {
            bail!("the head subscription stopped early (see above); inclusion can no longer be measured");
        }
        Ok(())
    }

    /// Draws, signs and sends one step; returns its evaluation.
    pub(super) async fn step(&mut self, number: usize, rate: f64, secs: f64) -> Result<StepResult> {
        self.check_watcher()?;
        let count = ((rate * secs).round() as usize).max(1);
        let signing = std::time::Instant::now();
        let mut drafts = self.generator.draw(count);
        if self.fetch_nonces {
            let senders = self.generator.new_senders(&drafts);
            let addresses: Vec<_> = senders.iter().map(|&i| self.generator.address(i)).collect();
            let nonces = self.rpc.pending_nonces(&addresses).await?;
            self.generator.set_nonces(senders.into_iter().zip(nonces));
        }
        self.generator.assign_nonces(&mut drafts);
        // Signing blocks this thread only: the runtime's workers keep following heads.
        let signed = self.generator.sign(&drafts)?;
        let sign_seconds = signing.elapsed().as_secs_f64();
        if self.library_recovery_us.is_none() {
            let config =
                gigas_txpool::PoolConfig::new(self.generator.chain_id(), self.common.gas_limit);
            self.library_recovery_us = library_recovery_us(&signed, &config);
        }
        let erc20_count = signed.iter().filter(|t| t.erc20).count();
        let txs: Arc<Vec<SignedTx>> = Arc::new(signed);
        let base = self.next_id;
        self.next_id += count as u64;
        lock(&self.tracker).begin_step(base, txs.iter().map(|t| t.hash));
        if !self.common.quiet {
            println!(
                "step {number}: {count} txs ({erc20_count} ERC-20) drawn and signed in {sign_seconds:.1} s; sending {rate:.0} tx/s for {secs:.0} s"
            );
        }

        // The measured window: sending only.
        let m0 = self.scrape().await;
        let cpu0 = Cpu::sample(self.node_pid);
        let t0 = self.now();
        let bar = self.progress_bar(count as u64, number, rate);
        let ticker = tokio::spawn(progress(
            Arc::clone(&self.tracker),
            bar.clone(),
            self.origin,
        ));
        let batch = self
            .common
            .batch
            .min(((rate * 0.01).ceil() as usize).max(1));
        let pace = Pace {
            rate,
            batch,
            in_flight: self.common.in_flight,
            retry_for: self.common.latency_limit + Duration::from_secs(5),
        };
        let tasks = send::send_step(&self.transport, &self.tracker, &txs, base, pace).await?;
        let t1 = self.now();
        let cpu1 = Cpu::sample(self.node_pid);
        let m1 = self.scrape().await;
        self.stragglers = tasks;
        self.windows.push((t0, t1, rate));

        // Every transaction gets its chance to be included within the latency limit.
        let limit = self.common.latency_limit.as_secs_f64();
        loop {
            let outstanding = lock(&self.tracker).step_outstanding();
            let answered = self.stragglers.is_empty();
            if (outstanding == 0 && answered) || self.now() > t1 + limit + 0.5 {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                Some(done) = self.stragglers.join_next() => {
                    done.wrap_err("a sending task panicked")?;
                }
            }
        }
        ticker.abort();
        bar.finish_and_clear();
        let delta = match (&m1, m0) {
            (Some(m1), Some(m0)) => Some(m1.since(&m0)),
            _ => None,
        };
        let result = self.evaluate(
            number,
            rate,
            sign_seconds,
            (t0, t1),
            (&cpu0, &cpu1),
            (delta.as_ref(), m1.as_ref()),
        );
        self.sample_included(&txs);
        Ok(result)
    }

    fn progress_bar(&self, len: u64, number: usize, rate: f64) -> ProgressBar {
        if self.common.quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} sent {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("step {number} @ {rate:.0}/s"));
        bar
    }

    /// Up to --check-receipts included transactions, spread over the run.
    fn sample_included(&mut self, txs: &[SignedTx]) {
        let t = lock(&self.tracker);
        let included: Vec<usize> = t
            .txs
            .iter()
            .enumerate()
            .filter(|(_, tx)| !tx.included.is_nan())
            .map(|(i, _)| i)
            .collect();
        let want = self.common.check_receipts;
        if included.is_empty() || want == 0 {
            return;
        }
        let stride = (included.len() / want).max(1);
        self.sample.extend(
            included
                .iter()
                .step_by(stride)
                .take(want)
                .filter_map(|&i| txs.get(i).map(|t| t.hash)),
        );
    }

    /// Waits until the last step's transactions are answered and included (at most `limit`).
    pub(super) async fn drain(&mut self, limit: Duration) -> Result<()> {
        let until = Instant::now() + limit;
        loop {
            while let Some(done) = self.stragglers.try_join_next() {
                done.wrap_err("a sending task panicked")?;
            }
            let outstanding = lock(&self.tracker).step_outstanding();
            if outstanding == 0 && self.stragglers.is_empty() {
                return Ok(());
            }
            if Instant::now() >= until {
                eprintln!(
                    "{outstanding} transactions of the last step still not included after {:.0} s",
                    limit.as_secs_f64()
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) async fn check_receipts(&mut self) -> ReceiptCheck {
        let want = self.common.check_receipts;
        if self.sample.len() > want {
            let stride = self.sample.len() / want;
            self.sample = self
                .sample
                .iter()
                .step_by(stride)
                .take(want)
                .copied()
                .collect();
        }
        match self.rpc.receipt_statuses(&self.sample).await {
            Ok(statuses) => ReceiptCheck {
                checked: statuses.len(),
                succeeded: statuses.iter().filter(|s| **s == Some(true)).count(),
                missing: statuses.iter().filter(|s| s.is_none()).count(),
            },
            Err(e) => {
                eprintln!("receipt check: {e}");
                ReceiptCheck::default()
            }
        }
    }

    pub(super) async fn finish(
        mut self,
        steps: Vec<StepResult>,
        stop_reason: String,
        receipts: ReceiptCheck,
    ) -> Result<Finished> {
        let _ = self.stop.send(true);
        self.stragglers.abort_all();
        match tokio::time::timeout(Duration::from_secs(5), &mut self.watcher).await {
            Ok(Ok(Err(e))) => eprintln!("head subscription: {e:#}"),
            Ok(Err(e)) => eprintln!("head subscription task: {e}"),
            Ok(Ok(Ok(()))) => {}
            Err(_) => self.watcher.abort(),
        }
        let t = lock(&self.tracker);
        let timeline = t
            .seconds
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mid = i as f64 + 0.5;
                let target = self
                    .windows
                    .iter()
                    .find(|(a, b, _)| mid >= *a && mid < *b)
                    .map_or(0.0, |w| w.2);
                SecondPoint {
                    t: i as u64,
                    target_tps: target,
                    submitted: s.submitted,
                    accepted: s.accepted,
                    rejected: s.rejected,
                    included: s.included,
                    blocks: s.blocks,
                    latency_ms: (!s.latencies_ms.is_empty()).then(|| {
                        Percentiles::of(s.latencies_ms.iter().map(|&l| f64::from(l)).collect())
                    }),
                }
            })
            .collect();
        Ok((steps, stop_reason, receipts, timeline, t.foreign))
    }
}

/// CPU seconds of both processes (and the node's threads) at one instant.
#[derive(Debug, Clone, Default)]
struct Cpu {
    node: Option<f64>,
    own: f64,
    threads: BTreeMap<String, f64>,
    /// The machine's busy and I/O-wait seconds.
    machine: Option<(f64, f64)>,
}

impl Cpu {
    fn sample(node: Option<u32>) -> Self {
        Self {
            node: node.and_then(|pid| metrics::process_cpu(Some(pid))),
            own: metrics::process_cpu(None).unwrap_or(0.0),
            threads: node.map(metrics::thread_cpu).unwrap_or_default(),
            machine: metrics::machine_cpu(),
        }
    }
}

/// Updates the bar every half second with the last full second's rates.
async fn progress(tracker: Arc<Mutex<Tracker>>, bar: ProgressBar, origin: Instant) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let message = {
            let t = lock(&tracker);
            let sent = t.txs.iter().filter(|x| !x.sent.is_nan()).count() as u64;
            bar.set_position(sent);
            let now = origin.elapsed().as_secs_f64() as usize;
            let last = now.checked_sub(1).and_then(|i| t.seconds.get(i));
            match last {
                Some(s) => {
                    let p = Percentiles::of(s.latencies_ms.iter().map(|&l| f64::from(l)).collect());
                    format!(
                        "| {}/s sent, {}/s included, {} refused, p50 {:.0} ms, p99 {:.0} ms, head {}",
                        s.submitted,
                        s.included,
                        s.rejected,
                        p.p50,
                        p.p99,
                        t.head_number().unwrap_or(0)
                    )
                }
                None => String::new(),
            }
        };
        bar.set_message(message);
    }
}

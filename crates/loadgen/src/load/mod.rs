//! `gigas-bench load` and `gigas-bench ramp`: signed transactions at a target rate into a
//! sequencer, inclusion latency from a `newHeads` subscription, and the Ripple ramp that finds
//! the highest rate the node sustains.
//!
//! Method (shared/BENCHMARKING.md, "The node's headline: the ramp"):
//!
//! - Workloads with a fixed seed over the benchmark genesis's N accounts: ETH transfers with
//!   senders and receivers drawn Zipf-Mandelbrot (s = 1.0001, v = 2.7), WETH9 `transfer`
//!   calls among the same accounts (the token's real mainnet code, deployed in the genesis),
//!   or a mix. Each sender's nonces are counted here, so no transaction is refused for its
//!   nonce.
//! - A step's transactions are drawn and signed (on every core, libsecp256k1) before the step
//!   starts, while the node is idle; the measured window is sending only.
//! - Sending: JSON-RPC batches of `eth_sendRawTransaction` over HTTP, batch `k` due at
//!   `k * batch / rate` seconds, at most `--in-flight` batches waiting for an answer. A
//!   transaction refused because the pool is full or busy, or its sender's pool window is
//!   full ("nonce too high" for gap-free nonces), is sent again with exponential backoff (its
//!   latency still counts from the first send), so that its sender's later nonces stay valid.
//! - Inclusion: a `newHeads` WebSocket subscription; each head is timestamped as it arrives,
//!   then its block's transaction hashes are fetched once and matched to send times. Latency =
//!   head seen - first send. No receipt is polled per transaction.
//! - The ramp holds each rate for a step (20 s), then raises it by `--step` or `--factor`. A
//!   step fails when the block interval (its `--interval-quantile`, p90 by default) exceeds
//!   twice the block time, or more than 1% of its transactions are not included within 5 s
//!   of their send, or any transaction is refused for a reason other than a full pool (or a
//!   full per-sender window of it). The
//!   maximum sustained rate is the last step that passed. Between steps the generator waits
//!   for the previous step's transactions to be included and signs the next step: each step
//!   starts on a drained pool.
//! - Around each window: the node's `/metrics` (stage split of block time, diff bytes) and
//!   both processes' CPU time from /proc, per thread for the node.
//!
//! Must not: measure anything the node does not do for real (every transaction is signed,
//! recovered, pooled, journaled, executed and committed by the node under test).

mod args;
mod chart;
pub mod disk;
pub mod metrics;
mod node;
mod report;
mod results;
pub mod rpc;
mod send;
mod sign;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::B256;
use eyre::{bail, eyre, Result, WrapErr};
use gigas_primitives::machine::Machine;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use args::*;
pub use gigas_primitives::duration::parse_duration;
pub use metrics::StageSplit;
pub use node::{ensure_genesis, genesis_cache_root, sequencer_bin, GenesisSpec, SequencerProcess};
pub use report::{distribution_label, markdown};
pub use results::*;

use metrics::Scrape;
use report::{print_config, print_step, write_report};
use rpc::Rpc;
use send::{lock, Outcome, Pace, Tracker, Transport};
use sign::{Generator, SignedTx};
/// Runs `gigas-bench load`.
pub fn run_load(args: &LoadArgs) -> Result<LoadReport> {
    if args.rate.is_nan() || args.rate <= 0.0 {
        bail!("--rate must be positive");
    }
    let plan = format!(
        "{} tx/s for {:.0} s",
        args.rate,
        args.duration.as_secs_f64()
    );
    let (rate, secs) = (args.rate, args.duration.as_secs_f64());
    run(&args.common, "load", plan, &mut |k, _| {
        (k == 0).then_some((rate, secs))
    })
}

/// Runs `gigas-bench ramp`.
pub fn run_ramp(args: &RampArgs) -> Result<LoadReport> {
    if args.start.is_nan() || args.start <= 0.0 || args.factor.is_some_and(|f| f <= 1.0) {
        bail!("--start must be positive and --factor above 1");
    }
    if args.step.is_nan() || args.step <= 0.0 {
        bail!("--step must be positive");
    }
    let plan = match args.factor {
        Some(f) => format!(
            "from {} tx/s, x{f} per step of {} s, at most {} steps or {} tx/s",
            args.start, args.step_secs, args.max_steps, args.max_rate
        ),
        None => format!(
            "from {} tx/s, +{} per step of {} s, at most {} steps or {} tx/s",
            args.start, args.step, args.step_secs, args.max_steps, args.max_rate
        ),
    };
    run(&args.common, "ramp", plan, &mut |k, last| {
        if k >= args.max_steps || last.is_some_and(|s| !s.passed) {
            return None;
        }
        let rate = args.rate(k);
        (rate <= args.max_rate).then_some((rate, args.step_secs))
    })
}

/// The plan: the rate and seconds of step `k` given the previous step's result, or None to stop.
type Plan<'a> = dyn FnMut(usize, Option<&StepResult>) -> Option<(f64, f64)> + 'a;

fn run(
    common: &CommonArgs,
    command: &str,
    plan: String,
    next: &mut Plan<'_>,
) -> Result<LoadReport> {
    let out = common
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports").join(command));
    std::fs::create_dir_all(&out).wrap_err_with(|| format!("creating {}", out.display()))?;
    let machine = Machine::current();
    let build_profile = crate::build_profile();
    let erc20 = common.workload != Workload::Transfers;
    let spec = GenesisSpec {
        accounts: common.accounts,
        seed: common.seed,
        gas_limit: common.gas_limit,
        erc20,
    };
    let bin = match (&common.sequencer, &common.sequencer_bin) {
        (None, explicit) => Some(sequencer_bin(explicit.as_deref())?),
        (Some(_), Some(explicit)) => Some(explicit.clone()),
        (Some(_), None) => sequencer_bin(None).ok(),
    };
    let genesis_dir = common.genesis_dir.clone().unwrap_or_else(|| {
        genesis_cache_root(bin.as_deref().unwrap_or(Path::new("target/release/x")))
            .join(spec.dir_name())
    });
    let criteria = format!(
        "a step fails if its p{:.0} block interval > {}x the block time, or > {:.1}% of its txs are not included within {:.1} s of their send, or any tx is refused for a reason other than a full pool (or sender window), or it submits < {:.0}% of its rate",
        common.interval_quantile * 100.0,
        common.interval_factor,
        common.max_missed * 100.0,
        common.latency_limit.as_secs_f64(),
        common.min_submitted * 100.0
    );
    let mut node_args = vec![format!("--block-time {}ms", common.block_time.as_millis())];
    node_args.extend(common.node_args.iter().cloned());
    let config = RunConfig {
        command: command.to_string(),
        plan,
        workload: common.workload,
        distribution: common.distribution,
        erc20_share: common.erc20_share,
        accounts: common.accounts,
        seed: common.seed,
        workload_seed: common.workload_seed,
        block_time_ms: common.block_time.as_millis() as u64,
        gas_limit: common.gas_limit,
        transport: common.transport,
        batch: common.batch,
        in_flight: common.in_flight,
        fees: (sign::MAX_FEE_PER_GAS, sign::PRIORITY_FEE),
        sequencer: match &common.sequencer {
            Some(url) => format!("running node at {url}"),
            None => format!(
                "started here: {} {} (metrics on, fresh datadir)",
                bin.as_deref()
                    .map_or("?".into(), |b| b.display().to_string()),
                node_args.join(" ")
            ),
        },
        genesis: genesis_dir.display().to_string(),
        source: source_description(bin.as_deref()),
        criteria,
        disk_sync: match &common.sequencer {
            // A running node's disk is not known here.
            Some(_) => None,
            None => disk::measure(
                &common
                    .datadir_root
                    .clone()
                    .unwrap_or_else(std::env::temp_dir),
            ),
        },
    };
    print_config(&config, &machine, build_profile);

    let fixtures = common
        .fixtures
        .clone()
        .unwrap_or_else(|| crate::shared_data("mainnet"));
    let (chain, chain_file) = ensure_genesis(bin.as_deref(), &genesis_dir, &spec, &fixtures)?;
    let bench = chain
        .bench_accounts
        .clone()
        .ok_or_else(|| eyre!("{} has no benchmark accounts", chain_file.display()))?;
    let addresses = gigas_chain::bench::read_addresses(&bench)?;
    let token = erc20.then_some(gigas_chain::bench::WETH9);
    let generator = Generator::new(
        common.workload,
        common.distribution,
        common.erc20_share,
        token,
        common.seed,
        common.workload_seed,
        chain.chain_id,
        addresses,
    )?;

    let mut node = match &common.sequencer {
        Some(_) => None,
        None => {
            let bin = bin
                .as_deref()
                .ok_or_else(|| eyre!("no gigas-sequencer binary"))?;
            println!("starting {} on {} ...", bin.display(), chain_file.display());
            let node = SequencerProcess::start(
                bin,
                &chain_file,
                common.block_time,
                &common.node_args,
                common.datadir_root.as_deref(),
                &out.join("node.log"),
            )?;
            println!(
                "node listening at {} after {:.1} s (log {})",
                node.url,
                node.start_seconds,
                node.log.display()
            );
            Some(node)
        }
    };
    let url = node
        .as_ref()
        .map(|n| n.url.clone())
        .or_else(|| common.sequencer.clone())
        .ok_or_else(|| eyre!("no node"))?;
    let ws = node
        .as_ref()
        .map(|n| n.ws.clone())
        .or_else(|| common.ws.clone())
        .unwrap_or_else(|| url.replacen("http://", "ws://", 1));
    let metrics_url = node
        .as_ref()
        .map(|n| n.metrics.clone())
        .or_else(|| common.metrics_url.clone());
    let node_pid = node
        .as_ref()
        .map(SequencerProcess::pid)
        .or(common.sequencer_pid);
    let node_start_seconds = node.as_ref().map(|n| n.start_seconds);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("gigas-load")
        .build()
        .wrap_err("starting the async runtime")?;
    let result = runtime.block_on(async {
        let mut session = Session::open(
            common,
            generator,
            &url,
            ws,
            metrics_url,
            node_pid,
            chain.chain_id,
        )
        .await?;
        let mut steps: Vec<StepResult> = Vec::new();
        let stop_reason = loop {
            let k = steps.len();
            let Some((rate, secs)) = next(k, steps.last()) else {
                break match steps.last() {
                    Some(s) if !s.passed => format!(
                        "step {} (target {:.0} tx/s) failed: {}",
                        s.step,
                        s.target_tps,
                        s.failures.join("; ")
                    ),
                    Some(_) => "the plan ended".to_string(),
                    None => "no step".to_string(),
                };
            };
            if k > 0 {
                session.drain(Duration::from_secs(60)).await?;
            }
            let step = session.step(k + 1, rate, secs).await?;
            print_step(&step);
            steps.push(step);
        };
        session.drain(Duration::from_secs(30)).await?;
        let receipts = session.check_receipts().await;
        let report = session.finish(steps, stop_reason, receipts).await?;
        Ok::<_, eyre::Report>(report)
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    let (steps, stop_reason, receipts, timeline, foreign) = match result {
        Ok(r) => r,
        Err(e) => {
            if let Some(node) = node.take() {
                let _ = node.stop();
            }
            return Err(e);
        }
    };
    if let Some(mut n) = node.take() {
        if common.keep_datadir {
            if let Some(dir) = n.keep_datadir() {
                println!("node data directory kept: {}", dir.display());
            }
        }
        n.stop()?;
    }
    let max_sustained_tps = steps.iter().rev().find(|s| s.passed).map(|s| s.target_tps);
    let sent_total = timeline.iter().map(|p| p.submitted).sum();
    let included_total = timeline.iter().map(|p| p.included).sum();
    let report = LoadReport {
        config,
        machine,
        build_profile,
        node_start_seconds,
        steps,
        max_sustained_tps,
        stop_reason,
        receipts,
        foreign_txs: foreign,
        sent_total,
        included_total,
        timeline,
    };
    write_report(&report, &out)?;
    Ok(report)
}

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

/// The git revision of the working directory's checkout and the binary's build time, so a
/// figure names what it measured (best effort: "unknown" outside a checkout).
fn source_description(bin: Option<&Path>) -> String {
    let built = bin
        .and_then(|b| std::fs::metadata(b).ok()?.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or("unknown".to_string(), |d| {
            let age = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |now| now.as_secs().saturating_sub(d.as_secs()));
            format!("{age} s before the run")
        });
    format!(
        "{}; node binary built {built}",
        gigas_primitives::machine::source_revision()
    )
}

/// One run's live state.
struct Session {
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
    async fn open(
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
    async fn step(&mut self, number: usize, rate: f64, secs: f64) -> Result<StepResult> {
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

    #[allow(clippy::too_many_arguments)]
    fn evaluate(
        &self,
        number: usize,
        rate: f64,
        sign_seconds: f64,
        (t0, t1): (f64, f64),
        (cpu0, cpu1): (&Cpu, &Cpu),
        (delta, metrics_after): (Option<&Scrape>, Option<&Scrape>),
    ) -> StepResult {
        let t = lock(&self.tracker);
        let limit = self.common.latency_limit.as_secs_f64();
        let window = (t1 - t0).max(1e-9);
        let mut sent = 0u64;
        let (mut accepted, mut rejected, mut gave_up, mut included, mut missed) = (0, 0, 0, 0, 0);
        let mut latencies = Vec::new();
        for tx in &t.txs {
            if tx.sent.is_nan() {
                continue;
            }
            sent += 1;
            match tx.outcome {
                Outcome::Accepted => accepted += 1,
                Outcome::Rejected => rejected += 1,
                Outcome::GaveUp => gave_up += 1,
                Outcome::Waiting => {}
            }
            if tx.included.is_nan() {
                missed += 1;
            } else {
                included += 1;
                let latency = tx.included - tx.sent;
                latencies.push(latency * 1e3);
                if latency > limit {
                    missed += 1;
                }
            }
        }
        let heads: Vec<_> = t
            .heads
            .iter()
            .filter(|h| h.seen >= t0 && h.seen <= t1)
            .copied()
            .collect();
        let intervals: Vec<f64> = heads
            .windows(2)
            .map(|w| (w[1].seen - w[0].seen) * 1e3)
            .collect();
        let included_tps = match (heads.first(), heads.last()) {
            (Some(first), Some(last)) if last.seen > first.seen => {
                heads[1..].iter().map(|h| h.txs as f64).sum::<f64>() / (last.seen - first.seen)
            }
            _ => 0.0,
        };
        let txs_per_block = if heads.is_empty() {
            0.0
        } else {
            heads.iter().map(|h| h.txs as f64).sum::<f64>() / heads.len() as f64
        };
        let answer_ms = Percentiles::of(t.answer_ms.iter().map(|&x| f64::from(x)).collect());
        let refusals: Vec<RefusalCount> = t
            .refusals
            .iter()
            .map(|(reason, r)| RefusalCount {
                reason: reason.clone(),
                count: r.count,
                backpressure: r.backpressure,
                example: r.example.clone(),
            })
            .collect();
        drop(t);

        let mut failures = Vec::new();
        for r in refusals.iter().filter(|r| !r.backpressure) {
            failures.push(format!("{} refused: \"{}\"", r.count, r.example));
        }
        if sent > 0 && missed as f64 > self.common.max_missed * sent as f64 {
            failures.push(format!(
                "{:.2}% of its txs not included within {limit:.1} s",
                100.0 * missed as f64 / sent as f64
            ));
        }
        let submitted_tps = sent as f64 / window;
        if submitted_tps < self.common.min_submitted * rate {
            failures.push(format!(
                "submitted {submitted_tps:.0}/s of {rate:.0}/s: answers (p99 {:.0} ms) too slow for {} batches in flight",
                answer_ms.p99, self.common.in_flight
            ));
        }
        let block_time_ms = self.common.block_time.as_secs_f64() * 1e3;
        let interval_q = Percentiles::quantile(&intervals, self.common.interval_quantile);
        if heads.len() < 2 {
            failures.push("fewer than two blocks during the step".to_string());
        } else if interval_q > self.common.interval_factor * block_time_ms {
            failures.push(format!(
                "p{:.0} block interval {interval_q:.0} ms > {}x {block_time_ms:.0} ms",
                self.common.interval_quantile * 100.0,
                self.common.interval_factor
            ));
        }

        let node_cpu = match (cpu0.node, cpu1.node) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let generator_cpu = cpu1.own - cpu0.own;
        let (other_cpu_cores, iowait_cores) = match (cpu0.machine, cpu1.machine) {
            (Some((b0, w0)), Some((b1, w1))) => (
                Some(((b1 - b0) - generator_cpu - node_cpu.unwrap_or(0.0)).max(0.0) / window),
                Some((w1 - w0) / window),
            ),
            _ => (None, None),
        };
        let mut node_threads: Vec<ThreadCpu> = cpu1
            .threads
            .iter()
            .map(|(name, s)| ThreadCpu {
                name: name.clone(),
                cores: (s - cpu0.threads.get(name).copied().unwrap_or(0.0)) / window,
            })
            .filter(|t| t.cores > 0.0005)
            .collect();
        node_threads.sort_by(|a, b| b.cores.total_cmp(&a.cores));
        let history_phases = delta.map(metrics::history_split).unwrap_or_default();
        let index_phases = delta.map(metrics::index_split).unwrap_or_default();
        let recovery_cores: f64 = node_threads
            .iter()
            .filter(|t| t.name.starts_with("txpool-recover"))
            .map(|t| t.cores)
            .sum();
        let recovery_us_per_tx = (recovery_cores > 0.0 && included > 0)
            .then(|| recovery_cores * window / included as f64 * 1e6);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let recovery_bound_tps = recovery_us_per_tx.map(|us| cores * 1e6 / us);
        let unindexed_blocks =
            metrics_after.and_then(|m| m.value("gigas_history_unindexed_blocks"));
        let (stages, block_ms, diff_bytes_per_tx) = match delta {
            Some(d) if !d.is_empty() => {
                let block = d.histogram("gigas_sequencer_block_seconds", "");
                let included_metric = d.value("gigas_sequencer_transactions_included");
                let diff = d.value("gigas_diffs_diff_bytes");
                (
                    metrics::stage_split(d),
                    (block.count > 0.0).then(|| Percentiles {
                        p50: block.quantile(0.5) * 1e3,
                        p90: block.quantile(0.9) * 1e3,
                        p99: block.quantile(0.99) * 1e3,
                        max: f64::NAN,
                    }),
                    match (diff, included_metric) {
                        (Some(bytes), Some(n)) if n > 0.0 => Some(bytes / n),
                        _ => None,
                    },
                )
            }
            _ => (Vec::new(), None, None),
        };
        StepResult {
            step: number,
            target_tps: rate,
            seconds: window,
            sign_seconds,
            sent,
            accepted,
            rejected,
            gave_up,
            refusals,
            included,
            missed,
            submitted_tps,
            answer_ms,
            included_tps,
            latency_ms: Percentiles::of(latencies),
            blocks: heads.len() as u64,
            block_interval_ms: Percentiles::of(intervals),
            txs_per_block,
            block_ms,
            node_cpu_cores: node_cpu.map(|c| c / window),
            generator_cpu_cores: generator_cpu / window,
            node_cpu_us_per_tx: node_cpu
                .filter(|_| included > 0)
                .map(|c| c / included as f64 * 1e6),
            generator_cpu_us_per_tx: generator_cpu / sent.max(1) as f64 * 1e6,
            other_cpu_cores,
            iowait_cores,
            node_threads,
            stages,
            history_phases,
            index_phases,
            recovery_us_per_tx,
            recovery_bound_tps,
            library_recovery_us: self.library_recovery_us,
            unindexed_blocks,
            diff_bytes_per_tx,
            passed: failures.is_empty(),
            failures,
        }
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
    async fn drain(&mut self, limit: Duration) -> Result<()> {
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

    async fn check_receipts(&mut self) -> ReceiptCheck {
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

    async fn finish(
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

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
mod session;
mod sign;

use std::path::{Path, PathBuf};
use std::time::Duration;

use eyre::{bail, eyre, Result, WrapErr};
use gigas_primitives::machine::Machine;

pub use args::*;
pub use gigas_primitives::duration::parse_duration;
pub use metrics::StageSplit;
pub use node::{ensure_genesis, genesis_cache_root, sequencer_bin, GenesisSpec, SequencerProcess};
pub use report::{distribution_label, markdown};
pub use results::*;

use report::{print_config, print_step, write_report};
use session::Session;
use sign::Generator;
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
    let build_profile = gigas_report::build_profile();
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

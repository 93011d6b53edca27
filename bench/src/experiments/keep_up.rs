//! Keep up: a sequencer at the ramp's maximum sustained rate and a full node under a memory
//! limit, both on this machine; the full node's lag behind the sequencer in blocks.
//!
//! Lag is sampled four times a second as the difference of the two nodes' `eth_blockNumber`
//! (each read over its own HTTP connection; the two reads are a few milliseconds apart, so a
//! sample can be one block off either way at a block boundary).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use eyre::{bail, eyre, Result, WrapErr};
use serde::Serialize;

use super::ExperimentsArgs;
use crate::load::metrics::Scrape;
use crate::load::rpc::Rpc;
use crate::load::{
    ensure_genesis, genesis_cache_root, run_load, sequencer_bin, GenesisSpec, LoadArgs,
    Percentiles, SequencerProcess,
};

/// One lag sample.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LagSample {
    /// Seconds since the load started.
    pub t: f64,
    /// The sequencer's head.
    pub sequencer: u64,
    /// The full node's head.
    pub fullnode: u64,
}

impl LagSample {
    /// Blocks the full node is behind.
    pub(super) fn lag(&self) -> u64 {
        self.sequencer.saturating_sub(self.fullnode)
    }
}

/// The samples from the first one at which the full node was at the head (at most 2 blocks
/// behind) on, and how long that took from the first sample: the node starts from its
/// genesis while the sequencer already runs, so the samples before it measure the first
/// catch-up, not following.
fn split_at_head(samples: &[LagSample]) -> (Option<f64>, &[LagSample]) {
    match samples.iter().position(|s| s.lag() <= 2) {
        Some(i) => (Some(samples[i].t - samples[0].t), &samples[i..]),
        None => (None, &[]),
    }
}

/// What the keep-up experiment writes.
#[derive(Debug, Clone, Serialize)]
pub struct KeepUpReport {
    /// How it was run.
    pub config: Vec<(String, String)>,
    /// Seconds from the first sample until the full node first reached the head (at most 2
    /// blocks behind); `None` if it never did.
    pub catch_up_seconds: Option<f64>,
    /// The lag at the first sample, before that catch-up.
    pub lag_at_start: u64,
    /// Lag percentiles in blocks from the first time at the head on (median, p90, p99, max).
    pub lag: Percentiles,
    /// The largest lag from the first time at the head on.
    pub lag_max: u64,
    /// Samples above 2 blocks from the first time at the head on.
    pub samples_above_2: usize,
    /// Samples from the first time at the head on.
    pub samples_at_head: usize,
    /// Included transactions per second the load measured.
    pub included_tps: f64,
    /// Whether the load step passed its criteria (the sequencer kept its block time).
    pub load_passed: bool,
    /// The full node's memory limit as its metrics reported it (None: not limited).
    pub fullnode_limit_bytes: Option<u64>,
    /// The full node's cgroup usage at the end (page cache included).
    pub fullnode_cgroup_usage_bytes: Option<u64>,
    /// The full node's resident memory at the end.
    pub fullnode_rss_bytes: Option<u64>,
    /// The full node's CPU (user + system seconds per second, from /proc) over the load:
    /// what following costs it on the machine the sequencer shares.
    pub fullnode_cpu_cores: Option<f64>,
    /// `eth_getProof` at the oldest block of the full node's state window, asked once a
    /// second while the load ran (`--keep-up-proofs`).
    pub proofs: Option<super::proofs::ProofReport>,
    /// Every sample.
    pub samples: Vec<LagSample>,
}

/// Kills and reaps a child when dropped.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // SIGTERM first, so that it removes its cgroup; SIGKILL after 10 s.
            // SAFETY: kill(2) on the pid of a child this guard owns and has not reaped.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `gigas-fullnode` binary beside the sequencer's.
fn fullnode_bin(sequencer: &Path) -> Result<PathBuf> {
    let path = sequencer.with_file_name(format!("gigas-fullnode{}", std::env::consts::EXE_SUFFIX));
    if path.is_file() {
        Ok(path)
    } else {
        bail!(
            "no {} : build it with `cargo build --release -p gigas-fullnode`",
            path.display()
        )
    }
}

#[derive(Debug, Parser)]
struct LoadCli {
    #[command(flatten)]
    args: LoadArgs,
}

pub(super) fn run(args: &ExperimentsArgs, out: &Path) -> Result<KeepUpReport> {
    std::fs::create_dir_all(out).wrap_err_with(|| format!("creating {}", out.display()))?;
    let bin = sequencer_bin(None)?;
    let fullnode = fullnode_bin(&bin)?;
    let spec = GenesisSpec {
        accounts: args.keep_up_accounts,
        seed: 1,
        gas_limit: 1_000_000_000,
        erc20: false,
    };
    let genesis_dir = genesis_cache_root(&bin).join(spec.dir_name());
    let (chain_config, chain) = ensure_genesis(
        Some(&bin),
        &genesis_dir,
        &spec,
        &crate::shared_data("mainnet"),
    )?;
    let block_time = Duration::from_millis(250);
    // Before the sequencer starts: it and the load generator's threads inherit this thread's
    // CPUs, until the experiment ends.
    let _pinned = match &args.keep_up_sequencer_cpus {
        Some(cpus) => Some(
            crate::cpus::pin_current_thread(cpus)
                .wrap_err_with(|| format!("cannot run the sequencer on CPUs {cpus}"))?,
        ),
        None => None,
    };
    println!(
        "keep-up: starting a sequencer on {} accounts and a full node under {}",
        args.keep_up_accounts, args.keep_up_limit
    );
    let sequencer = SequencerProcess::start(
        &bin,
        &chain,
        block_time,
        &[],
        None,
        &out.join("sequencer.log"),
    )?;

    let datadir = tempfile::Builder::new()
        .prefix("gigas-keep-up-fullnode-")
        .tempdir()
        .wrap_err("creating the full node's data directory")?;
    let (http_port, metrics_port) = (gigas_launch::free_port()?, gigas_launch::free_port()?);
    let log_path = out.join("fullnode.log");
    let log = std::fs::File::create(&log_path)
        .wrap_err_with(|| format!("creating {}", log_path.display()))?;
    // The follower gets the public spec: full nodes refuse one carrying the signing key.
    let public_chain = out.join("public-chain.json");
    let loaded = gigas_chain::ChainConfig::load(&chain)
        .wrap_err_with(|| format!("reading {}", chain.display()))?;
    gigas_chain::write_public_spec(&loaded, Some(&public_chain))
        .wrap_err("writing the full node's public chain spec")?;
    let mut command = Command::new(&fullnode);
    if let Some(cpus) = &args.keep_up_fullnode_cpus {
        crate::cpus::run_on(&mut command, cpus);
    }
    let child = command
        .arg("--chain")
        .arg(&public_chain)
        .arg("--datadir")
        .arg(datadir.path())
        .args(["--sequencer", &sequencer.url])
        .args(["--http.port", &http_port.to_string()])
        .args(["--metrics", &format!("127.0.0.1:{metrics_port}")])
        .args(["--memory-limit", &args.keep_up_limit])
        .args(&args.keep_up_fullnode_arg)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .wrap_err_with(|| format!("starting {}", fullnode.display()))?;
    let fullnode_guard = ChildGuard(Some(child));
    let fullnode_url = format!("http://127.0.0.1:{http_port}");
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let fullnode_rpc = Rpc::new(&fullnode_url, 1)?;
    // The full node is up once its RPC answers (it wrote its genesis first).
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if runtime.block_on(fullnode_rpc.block_number()).is_ok() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the full node did not answer within 300 s; see {}",
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    let samples = Arc::new(Mutex::new(Vec::<LagSample>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (samples, stop) = (Arc::clone(&samples), Arc::clone(&stop));
        let (seq_rpc, fn_rpc) = (Rpc::new(&sequencer.url, 1)?, Rpc::new(&fullnode_url, 1)?);
        std::thread::spawn(move || -> Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let tick = Instant::now();
                let (s, f) = runtime.block_on(async {
                    tokio::join!(seq_rpc.block_number(), fn_rpc.block_number())
                });
                if let (Ok(sequencer), Ok(fullnode)) = (s, f) {
                    if let Ok(mut v) = samples.lock() {
                        v.push(LagSample {
                            t: started.elapsed().as_secs_f64(),
                            sequencer,
                            fullnode,
                        });
                    }
                }
                std::thread::sleep(Duration::from_millis(250).saturating_sub(tick.elapsed()));
            }
            Ok(())
        })
    };

    let argv: Vec<String> = [
        "load",
        "--rate",
        &args.keep_up_rate.to_string(),
        "--duration",
        &format!("{}ms", args.keep_up_duration.as_millis()),
        "--accounts",
        &args.keep_up_accounts.to_string(),
        "--sequencer",
        &sequencer.url,
        "--metrics-url",
        &sequencer.metrics,
        "--sequencer-pid",
        &sequencer.pid().to_string(),
        "--out",
        &out.join("load").display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(args.quiet.then(|| "--quiet".to_string()))
    .collect();
    let load = LoadCli::try_parse_from(&argv)
        .map_err(|e| eyre!("the load arguments: {e}"))?
        .args;
    let probe = match args.keep_up_proofs {
        0 => None,
        full_window => {
            // Account 0 is the Zipf distribution's most drawn: changed in nearly every block.
            let bench = chain_config
                .bench_accounts
                .as_ref()
                .ok_or_else(|| eyre!("{} has no benchmark accounts", chain.display()))?;
            let hottest = gigas_chain::bench::read_addresses(bench)?
                .first()
                .copied()
                .ok_or_else(|| eyre!("{} lists no benchmark accounts", bench.file.display()))?;
            let load_from = runtime
                .block_on(Rpc::new(&sequencer.url, 1)?.block_number())
                .wrap_err("reading the sequencer's head")?;
            Some(super::proofs::ProofProbe::start(
                &fullnode_url,
                &metrics_url,
                hottest,
                full_window,
                load_from,
            )?)
        }
    };
    let fullnode_pid = fullnode_guard.0.as_ref().map(Child::id);
    let cpu = || fullnode_pid.and_then(|pid| crate::load::metrics::process_cpu(Some(pid)));
    let (cpu_before, load_started) = (cpu(), Instant::now());
    let load_result = run_load(&load);
    let fullnode_cpu_cores = match (cpu_before, cpu()) {
        (Some(before), Some(after)) => {
            Some((after - before) / load_started.elapsed().as_secs_f64().max(1e-3))
        }
        _ => None,
    };
    stop.store(true, Ordering::Relaxed);
    let proofs = probe.map(super::proofs::ProofProbe::finish).transpose()?;
    let sampled = sampler.join();
    let report = load_result.wrap_err("the keep-up load")?;
    match sampled {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.wrap_err("the lag sampler")),
        Err(_) => bail!("the lag sampler panicked"),
    }
    let metrics = Scrape::parse(
        &runtime
            .block_on(fullnode_rpc.get_text(&metrics_url))
            .unwrap_or_default(),
    );
    drop(fullnode_guard);
    sequencer.stop()?;

    let samples = samples
        .lock()
        .map_err(|_| eyre!("the lag samples' lock was poisoned"))?
        .clone();
    let step = report.steps.first();
    let (catch_up_seconds, at_head) = split_at_head(&samples);
    let lags: Vec<f64> = at_head.iter().map(|s| s.lag() as f64).collect();
    let lag_max = at_head.iter().map(LagSample::lag).max().unwrap_or(0);
    let samples_above_2 = at_head.iter().filter(|s| s.lag() > 2).count();
    let samples_at_head = at_head.len();
    let lag_at_start = samples.first().map_or(0, LagSample::lag);
    let out_report = KeepUpReport {
        config: vec![
            (
                "sequencer".into(),
                format!(
                    "gigas-sequencer, {} benchmark accounts, 250 ms blocks, gas limit 1e9",
                    args.keep_up_accounts
                ),
            ),
            (
                "load".into(),
                format!(
                    "gigas-bench load: Zipf ETH transfers at {} tx/s for {:.0} s",
                    args.keep_up_rate,
                    args.keep_up_duration.as_secs_f64()
                ),
            ),
            (
                "full node".into(),
                format!(
                    "gigas-fullnode --chain --sequencer --memory-limit {}{}{} (each block served as applied; the rest as its defaults)",
                    args.keep_up_limit,
                    if args.keep_up_fullnode_arg.is_empty() { "" } else { " " },
                    args.keep_up_fullnode_arg.join(" ")
                ),
            ),
            (
                "lag".into(),
                "sequencer head - full node head, from eth_blockNumber of each, every 250 ms"
                    .into(),
            ),
            ("machine".into(), placement(args)),
        ],
        catch_up_seconds,
        lag_at_start,
        lag: Percentiles::of(lags),
        lag_max,
        samples_above_2,
        samples_at_head,
        included_tps: step.map_or(0.0, |s| s.included_tps),
        load_passed: step.is_some_and(|s| s.passed),
        fullnode_limit_bytes: metrics.value("gigas_memory_limit_bytes").map(|v| v as u64),
        fullnode_cgroup_usage_bytes: metrics
            .value("gigas_cgroup_memory_usage_bytes")
            .map(|v| v as u64),
        fullnode_rss_bytes: metrics
            .value("gigas_fullnode_resident_bytes")
            .map(|v| v as u64),
        fullnode_cpu_cores,
        proofs,
        samples,
    };
    if let Err(e) = super::chart::keep_up(&out_report, &out.join("lag.svg")) {
        eprintln!("{e:#}");
    }
    crate::write_report(out, "keep-up", &out_report, &markdown(&out_report))?;
    Ok(out_report)
}

/// The machine's cores, whatever this thread was pinned to (`available_parallelism` counts
/// only the CPUs this thread may run on).
fn online_cores() -> i64 {
    // SAFETY: sysconf reads a system value and has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }
}

/// Where the processes ran, for the report.
fn placement(args: &ExperimentsArgs) -> String {
    let cores = online_cores();
    let on = |cpus: &Option<crate::cpus::CpuList>| match cpus {
        Some(cpus) => format!("CPUs {cpus}"),
        None => format!("all {cores} cores"),
    };
    match (&args.keep_up_sequencer_cpus, &args.keep_up_fullnode_cpus) {
        (None, None) => format!("all three processes on the same {cores} cores"),
        (s, f) => format!(
            "the sequencer and the load generator on {}, the full node on {}",
            on(s),
            on(f)
        ),
    }
}

fn markdown(r: &KeepUpReport) -> String {
    let mut md = String::from(
        "# Keep up: a full node behind a sequencer at full rate\n\n## Configuration\n\n",
    );
    md += &super::config_lines(&r.config);
    md += &format!(
        "\n## Results\n\n- first catch-up: {}\n- lag in blocks from then on, over {} of the {} samples: median {:.0}, p90 {:.0}, p99 {:.0}, max {} (target at most 2 throughout: {}); {} samples above 2\n- included {:.0} tx/s (load step {})\n- full node: limit {}, cgroup usage at the end {}, resident {}, CPU over the load {} cores of the machine's {}\n\n![lag](lag.svg)\n",
        r.catch_up_seconds.map_or_else(
            || format!("never at the head (lag {} at the first sample)", r.lag_at_start),
            |t| format!("at the head {t:.1} s after the first sample (lag {} blocks then)", r.lag_at_start),
        ),
        r.samples_at_head,
        r.samples.len(),
        r.lag.p50,
        r.lag.p90,
        r.lag.p99,
        r.lag_max,
        if r.catch_up_seconds.is_some() && r.lag_max <= 2 { "met" } else { "missed" },
        r.samples_above_2,
        r.included_tps,
        if r.load_passed { "passed" } else { "failed its criteria" },
        r.fullnode_limit_bytes
            .map_or_else(|| "none reported".to_string(), |b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)),
        r.fullnode_cgroup_usage_bytes
            .map_or_else(|| "-".to_string(), |b| format!("{:.0} MiB", b as f64 / 1048576.0)),
        r.fullnode_rss_bytes
            .map_or_else(|| "-".to_string(), |b| format!("{:.0} MiB", b as f64 / 1048576.0)),
        r.fullnode_cpu_cores
            .map_or_else(|| "-".to_string(), |c| format!("{c:.2}")),
        online_cores(),
    );
    if let Some(proofs) = &r.proofs {
        md += &super::proofs::markdown(proofs);
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, sequencer: u64, fullnode: u64) -> LagSample {
        LagSample {
            t,
            sequencer,
            fullnode,
        }
    }

    #[test]
    fn lag_counts_from_the_first_sample_at_the_head() {
        let samples = [
            sample(10.0, 300, 0),
            sample(10.25, 301, 200),
            sample(10.5, 302, 300),
            sample(10.75, 303, 296),
            sample(11.0, 304, 304),
        ];
        let (catch_up, at_head) = split_at_head(&samples);
        assert_eq!(catch_up, Some(0.5));
        assert_eq!(at_head.len(), 3);
        assert_eq!(at_head.iter().map(LagSample::lag).max(), Some(7));

        let (never, none) = split_at_head(&samples[..2]);
        assert_eq!((never, none.len()), (None, 0));
    }
}

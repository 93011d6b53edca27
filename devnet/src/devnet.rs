//! The run: genesis, the processes, the load with sampling, the checks after it, the stop, the
//! profile, the report.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use clap::Parser;
use eyre::{bail, eyre, Result, WrapErr};
use gigas_loadgen::load::{ensure_genesis, genesis_cache_root, GenesisSpec, LoadArgs, LoadReport};
use gigas_primitives::Machine;

use crate::http::Http;
use crate::limit::LimitStatus;
use crate::prometheus::PromStatus;
use crate::report::{self, Config, DevnetReport, ProfileOutcome, Results};
use crate::sample::{Sampler, Targets};
use crate::supervisor::Supervisor;
use crate::{Args, FULLNODE, SEQUENCER};
use gigas_cgroup::MemoryStat;

use gigas_launch::{free_port, tail};

/// The name of the file in a run's temporary directory that holds the run's process id.
const PID_FILE: &str = "devnet.pid";
/// The prefix of a run's temporary directory.
const TEMP_PREFIX: &str = "gigas-devnet-";

/// Removes the temporary directories of earlier runs that were killed before they could
/// (a SIGKILL leaves no chance; their processes got SIGTERM from the kernel): those whose
/// pid file names a process that is no longer a gigas-devnet. Returns what it removed.
fn remove_stale_temp_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let ours = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(TEMP_PREFIX));
        // A directory without a pid file may be a run that is just starting: left alone.
        let Some(pid) = ours
            .then(|| std::fs::read_to_string(dir.join(PID_FILE)).ok())
            .flatten()
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let alive = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim() == "gigas-devnet");
        if !alive && std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

/// A node process this run started.
#[derive(Debug, Clone)]
pub struct Node {
    /// `sequencer` or `fullnode`.
    pub name: &'static str,
    /// Its process id.
    pub pid: u32,
    /// Its JSON-RPC URL (HTTP; WebSocket on the same port).
    pub rpc: String,
    /// Its metrics endpoint's address.
    pub metrics: SocketAddr,
    /// Its log.
    pub log: PathBuf,
    /// What it printed before it listened.
    pub startup: Vec<String>,
}

impl Node {
    /// `http://ADDR/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.metrics)
    }
}

/// Starts `gigas-devnet ENTRY ARGS --http.port 0 --metrics ADDR` and waits until its JSON-RPC
/// server listens.
fn start_node(
    supervisor: &Supervisor,
    exe: &Path,
    name: &'static str,
    args: Vec<OsString>,
    log: &Path,
) -> Result<Node> {
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()?)
        .parse()
        .wrap_err("a loopback address")?;
    let mut command = Command::new(exe);
    command
        .arg(name)
        .args(args)
        .args(["--http.port", "0", "--metrics", &metrics.to_string()])
        .env(
            "RUST_LOG",
            std::env::var("GIGAS_NODE_LOG").unwrap_or_else(|_| "info".into()),
        );
    let spawned = supervisor.spawn(name, command, log, libc::SIGINT)?;
    // A genesis of millions of accounts is written before the node listens.
    match gigas_launch::wait_for_rpc(&spawned.lines, Duration::from_secs(1800)) {
        Ok(ready) => Ok(Node {
            name,
            pid: spawned.pid,
            rpc: ready.url,
            metrics,
            log: log.to_path_buf(),
            startup: ready.before,
        }),
        Err(gigas_launch::WaitError::Timeout(_)) => bail!(
            "the {name} did not listen within 30 minutes (log {}):\n{}",
            log.display(),
            tail(log, 30)
        ),
        Err(gigas_launch::WaitError::Exited) => {
            // Its stdout closed: it exited. Give the log a moment to hold its last words.
            std::thread::sleep(Duration::from_millis(100));
            bail!(
                "the {name} exited while starting (log {}):\n{}",
                log.display(),
                tail(log, 30)
            )
        }
    }
}

/// `gigas-bench load`'s arguments, parsed as its command line would be (so its defaults stay
/// its own).
#[derive(Debug, Parser)]
struct LoadCli {
    #[command(flatten)]
    load: LoadArgs,
}

/// Runs the devnet.
pub fn run(args: &Args) -> Result<()> {
    if !args.rate.is_finite() || args.rate <= 0.0 {
        bail!("--rate must be a positive number of transactions per second");
    }
    let run_started = Instant::now();
    let exe = std::env::current_exe().wrap_err("locating this executable")?;
    let out = args.out.clone();
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).wrap_err_with(|| format!("creating {}", logs.display()))?;
    let spec = GenesisSpec {
        accounts: args.accounts,
        seed: args.seed,
        gas_limit: args.gas_limit,
        erc20: false,
    };
    let genesis_dir = args
        .genesis_dir
        .clone()
        .unwrap_or_else(|| genesis_cache_root(&exe).join(spec.dir_name()));
    let limit_asked = (!args.memory_limit.eq_ignore_ascii_case("none"))
        .then(|| args.memory_limit.trim().to_string());
    let config = Config {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        rate: args.rate,
        duration_seconds: args.duration.as_secs_f64(),
        workload: format!(
            "ETH transfers, senders and receivers Zipf-Mandelbrot (s = {}, v = {}) over {} accounts of seed {}, signed ahead and sent as JSON-RPC batches",
            gigas_loadgen::zipf::DEVNET_S,
            gigas_loadgen::zipf::DEVNET_V,
            args.accounts,
            args.seed
        ),
        block_time_ms: args.block_time.as_millis() as u64,
        gas_limit: args.gas_limit,
        genesis: genesis_dir.display().to_string(),
        memory_limit: match &limit_asked {
            None => "none (--memory-limit none)".to_string(),
            Some(l) if args.memory_limit_required => format!("{l} on the full node (required)"),
            Some(l) => format!(
                "{l} on the full node (where the machine allows one; said below if not)"
            ),
        },
        processes: format!(
            "{} re-run as `gigas-devnet sequencer|fullnode ...`, each in its own process group, on 127.0.0.1, data in a temporary directory",
            exe.display()
        ),
        out: out.display().to_string(),
        profile: if args.no_profile {
            "off (--no-profile)".to_string()
        } else {
            format!(
                "the shipped mainnet blocks, report in {}",
                args.profile_out.display()
            )
        },
        source: gigas_primitives::machine::source_revision(),
        build_profile: gigas_report::build_profile().to_string(),
        machine: Machine::current(),
    };
    for line in config.lines() {
        println!("{line}");
    }

    // The benchmark chain, built once by this executable's `genesis` entry point and cached.
    let fixtures = gigas_chain::bench::default_fixtures_dir();
    let (chain, chain_file) = ensure_genesis(Some(&exe), &genesis_dir, &spec, &fixtures)?;
    let bench = chain
        .bench_accounts
        .clone()
        .ok_or_else(|| eyre!("{} has no benchmark accounts", chain_file.display()))?;

    for dir in remove_stale_temp_dirs() {
        println!(
            "removed {}, left by a devnet that was killed",
            dir.display()
        );
    }
    let temp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempdir()
        .wrap_err("creating the temporary directory")?;
    std::fs::write(temp.path().join(PID_FILE), std::process::id().to_string())
        .wrap_err("writing the run's pid file")?;
    let supervisor = Supervisor::new(temp)?;
    let tmp = supervisor.temp_path();
    println!(
        "temporary directory: {} (removed at the end)",
        tmp.display()
    );

    let sequencer = start_node(
        &supervisor,
        &exe,
        SEQUENCER,
        vec![
            "--chain".into(),
            chain_file.clone().into(),
            "--datadir".into(),
            tmp.join("sequencer").into(),
            "--block-time".into(),
            format!("{}ms", args.block_time.as_millis()).into(),
        ],
        &logs.join("sequencer.log"),
    )?;
    println!(
        "sequencer  : {} (chain id {}, metrics {}, pid {}, log {})",
        sequencer.rpc,
        chain.chain_id,
        sequencer.metrics_url(),
        sequencer.pid,
        sequencer.log.display()
    );

    // The follower gets the public spec: full nodes refuse one carrying the signing key.
    let public_chain = tmp.join("public-chain.json");
    gigas_chain::write_public_spec(&chain, Some(&public_chain))
        .wrap_err("writing the full node's public chain spec")?;
    let mut fullnode_args: Vec<OsString> = vec![
        "--chain".into(),
        public_chain.into(),
        "--datadir".into(),
        tmp.join("fullnode").into(),
        "--sequencer".into(),
        sequencer.rpc.clone().into(),
    ];
    if let Some(limit) = &limit_asked {
        fullnode_args.push("--memory-limit".into());
        fullnode_args.push(limit.into());
        if !args.memory_limit_required {
            fullnode_args.push("--memory-limit-optional".into());
        }
    }
    let fullnode = start_node(
        &supervisor,
        &exe,
        FULLNODE,
        fullnode_args,
        &logs.join("fullnode.log"),
    )?;
    let http = Http::new(Duration::from_secs(5))?;
    let limit = match &limit_asked {
        None => LimitStatus::NotAsked,
        Some(asked) => {
            let metrics = http.get(&fullnode.metrics_url()).ok().map(|(_, body)| body);
            crate::limit::check(asked, fullnode.pid, &fullnode.startup, metrics.as_deref())
        }
    };
    println!(
        "full node  : {} (metrics {}, pid {}, log {})",
        fullnode.rpc,
        fullnode.metrics_url(),
        fullnode.pid,
        fullnode.log.display()
    );
    println!("memory limit: {}", limit.line());
    if args.memory_limit_required && limit_asked.is_some() && !limit.applied() {
        bail!("--memory-limit-required: {}", limit.line());
    }

    let prometheus = if args.no_prometheus {
        PromStatus::Disabled
    } else {
        let config_file = args
            .prometheus_config
            .clone()
            .unwrap_or_else(crate::prometheus::default_config);
        crate::prometheus::start(
            &supervisor,
            &config_file,
            sequencer.metrics,
            fullnode.metrics,
            &logs.join("prometheus.log"),
        )
    };
    println!("prometheus : {}", prometheus.line());

    // The load, with both nodes sampled once a second meanwhile.
    let load_out = out.join("load");
    let mut load_argv: Vec<OsString> = vec![
        "load".into(),
        "--rate".into(),
        args.rate.to_string().into(),
        "--duration".into(),
        format!("{}s", args.duration.as_secs_f64()).into(),
        "--accounts".into(),
        args.accounts.to_string().into(),
        "--seed".into(),
        args.seed.to_string().into(),
        "--block-time".into(),
        format!("{}ms", args.block_time.as_millis()).into(),
        "--gas-limit".into(),
        args.gas_limit.to_string().into(),
        "--sequencer".into(),
        sequencer.rpc.clone().into(),
        "--metrics-url".into(),
        sequencer.metrics_url().into(),
        "--sequencer-pid".into(),
        sequencer.pid.to_string().into(),
        "--sequencer-bin".into(),
        exe.clone().into(),
        "--genesis-dir".into(),
        genesis_dir.clone().into(),
        "--out".into(),
        load_out.clone().into(),
    ];
    if args.quiet {
        load_argv.push("--quiet".into());
    }
    let load_args = LoadCli::try_parse_from(load_argv)
        .map_err(|e| eyre!("the load generator's arguments: {e}"))?
        .load;
    println!(
        "\nload: {} tx/s for {:.0} s (gigas-bench load; its own report goes to {})",
        args.rate,
        args.duration.as_secs_f64(),
        load_out.display()
    );
    let sampler = Sampler::start(Targets {
        sequencer_rpc: sequencer.rpc.clone(),
        fullnode_rpc: fullnode.rpc.clone(),
        sequencer_pid: sequencer.pid,
        fullnode_pid: fullnode.pid,
        fullnode_limited: limit.applied(),
    })?;
    let load = gigas_loadgen::load::run_load(&load_args);
    let samples = sampler.finish()?;
    let load: LoadReport = load.wrap_err("the load generator failed")?;
    let fullnode_cgroup_split = limit
        .applied()
        .then(|| MemoryStat::of_pid(fullnode.pid).ok())
        .flatten()
        .map(|s| (s.anon, s.file));

    let catch_up = catch_up(&http, &sequencer, &fullnode);
    println!("catch-up   : {catch_up}");
    let addresses = gigas_chain::bench::read_addresses(&bench)?;
    let state_check = compare_state(&http, &sequencer, &fullnode, &addresses);
    println!("state      : {state_check}");
    let prometheus_targets = match &prometheus {
        PromStatus::Running { url, .. } => crate::prometheus::targets_up(&http, url),
        _ => None,
    };
    let died: Vec<String> = supervisor
        .exited()
        .into_iter()
        .map(|(name, status, log)| {
            format!(
                "the {name} exited during the run ({status}; log {}):\n{}",
                log.display(),
                tail(&log, 20)
            )
        })
        .collect();

    let stopped = if args.keep_running {
        Vec::new()
    } else {
        supervisor.shutdown()
    };

    let profile = if args.no_profile {
        ProfileOutcome::Skipped
    } else {
        println!(
            "\nprofiling the shipped mainnet blocks (gigas-profiler --out {})",
            args.profile_out.display()
        );
        run_profiler(&args.profile_out)
    };

    let results = Results::new(
        &load,
        &samples,
        catch_up,
        state_check,
        &[
            (SEQUENCER, sequencer.pid),
            (FULLNODE, fullnode.pid),
            ("load generator", std::process::id()),
        ],
        fullnode_cgroup_split,
        limit,
        prometheus,
        prometheus_targets,
        profile,
        stopped,
        run_started.elapsed().as_secs_f64(),
    );
    let report = DevnetReport {
        config,
        results,
        load_report: load_out.join("load.md").display().to_string(),
        logs: logs.display().to_string(),
        samples,
        timeline: load.timeline.clone(),
    };
    let files = report::write(&report, &out)?;
    println!();
    for line in report.summary_lines(&out, &files) {
        println!("{line}");
    }
    if !died.is_empty() {
        bail!("{}", died.join("\n"));
    }
    if let ProfileOutcome::Failed { error } = &report.results.profile {
        bail!("the profile failed: {error}");
    }
    if args.keep_running {
        keep_running(&supervisor, &chain, &sequencer, &fullnode, &report)?;
    }
    Ok(())
}

/// Waits until the full node holds the block that was the sequencer's head when the load
/// ended; says how long that took.
fn catch_up(http: &Http, sequencer: &Node, fullnode: &Node) -> String {
    let target = match http.block_number(&sequencer.rpc) {
        Ok(n) => n,
        Err(e) => return format!("the sequencer's head could not be read: {e:#}"),
    };
    let started = Instant::now();
    let limit = Duration::from_secs(60);
    loop {
        match http.block_number(&fullnode.rpc) {
            Ok(n) if n >= target => {
                return format!(
                    "the full node reached block {target} (the sequencer's head when the load ended) {:.2} s after",
                    started.elapsed().as_secs_f64()
                )
            }
            Ok(n) if started.elapsed() > limit => {
                return format!(
                    "NOT CAUGHT UP: the full node was at block {n} {} s after the sequencer reached {target}",
                    limit.as_secs()
                )
            }
            Err(e) if started.elapsed() > limit => {
                return format!("the full node's head could not be read: {e:#}")
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The balances and nonces of the most-drawn accounts at the full node's head, on both nodes.
fn compare_state(http: &Http, sequencer: &Node, fullnode: &Node, addresses: &[Address]) -> String {
    // Zipf draws rank the first accounts hottest: the ones the load changed most.
    let accounts: Vec<Address> = addresses.iter().take(16).copied().collect();
    let ask = |url: &str, method: &str, address: &Address, at: u64| {
        http.rpc(
            url,
            method,
            serde_json::json!([address.to_string(), format!("{at:#x}")]),
        )
    };
    for _attempt in 0..20 {
        let Ok(at) = http.block_number(&fullnode.rpc) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let mut differ = Vec::new();
        let mut moved = false;
        for address in &accounts {
            for method in ["eth_getBalance", "eth_getTransactionCount"] {
                // The full node answers only at its head: if it moved, start over.
                let Ok(here) = ask(&fullnode.rpc, method, address, at) else {
                    moved = true;
                    break;
                };
                match ask(&sequencer.rpc, method, address, at) {
                    Ok(there) if there == here => {}
                    Ok(there) => differ.push(format!("{method}({address}): {here} vs {there}")),
                    Err(e) => return format!("the sequencer's state at block {at}: {e:#}"),
                }
            }
            if moved {
                break;
            }
        }
        if moved {
            continue;
        }
        return if differ.is_empty() {
            format!(
                "the full node's balances and nonces of the {} most-drawn accounts equal the sequencer's at block {at}",
                accounts.len()
            )
        } else {
            format!(
                "DIFFERENT at block {at}: {} (full node vs sequencer)",
                differ.join("; ")
            )
        };
    }
    "not compared: the full node's head kept moving".to_string()
}

/// The profiler's report, produced in this process on a thread of its own (it pins its replay
/// thread to a CPU).
fn run_profiler(out: &Path) -> ProfileOutcome {
    let out_arg: OsString = out.into();
    let outcome = std::thread::Builder::new()
        .name("profiler".into())
        .spawn(move || {
            gigas_profiler::cli::main_with_args([
                OsString::from("gigas-profiler"),
                OsString::from("--out"),
                out_arg,
            ])
        })
        .map_err(|e| eyre!("starting the profiler thread: {e}"))
        .and_then(|h| {
            h.join()
                .map_err(|_| eyre!("the profiler panicked"))
                .and_then(|r| r)
        });
    match outcome {
        Ok(()) => ProfileOutcome::Written {
            report: out.join("report.md").display().to_string(),
        },
        Err(e) => ProfileOutcome::Failed {
            error: format!("{e:#}"),
        },
    }
}

/// `--keep-running`: what a wallet needs, then everything stays up until Ctrl-C.
fn keep_running(
    supervisor: &Supervisor,
    chain: &gigas_chain::ChainConfig,
    sequencer: &Node,
    fullnode: &Node,
    report: &DevnetReport,
) -> Result<()> {
    println!("\nThe devnet keeps running until Ctrl-C:");
    println!(
        "  sequencer JSON-RPC : {} (HTTP and WebSocket), chain id {}",
        sequencer.rpc, chain.chain_id
    );
    println!("  full node JSON-RPC : {} (read-only)", fullnode.rpc);
    println!(
        "  metrics            : {} and {}",
        sequencer.metrics_url(),
        fullnode.metrics_url()
    );
    if let PromStatus::Running { url, .. } = &report.results.prometheus {
        println!("  prometheus         : {url}");
    }
    let accounts = gigas_chain::dev_accounts()?;
    println!(
        "  funded accounts (10,000 ETH each; mnemonic \"{}\", path m/44'/60'/0'/0/i):",
        gigas_chain::DEV_MNEMONIC
    );
    for a in accounts.iter().take(5) {
        println!("    {}  key {}", a.address, a.key);
    }
    supervisor.interrupt_ends_normally();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        if let Some((name, status, log)) = supervisor.exited().into_iter().next() {
            bail!(
                "the {name} exited ({status}; log {}):\n{}",
                log.display(),
                tail(&log, 20)
            );
        }
    }
}

//! The `gigas-profiler` command line as a library function, so that another binary (the
//! one-command devnet) can produce the same report in its own process.
//!
//! Owns: parsing the flags and running the profile, `fetch` or the state tests. Must not:
//! install a global allocator or anything else process-wide beyond a tracing subscriber
//! (kept if the caller installed one).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::replay::Workload;
use crate::report::{Configuration, Report};
use crate::{calibrate, chart, replay};
use clap::{Parser, Subcommand};
use eyre::{bail, eyre, Context, Result};
use gigas_primitives::ChainSpec;
use indicatif::{ProgressBar, ProgressStyle};

/// Replays Ethereum blocks through an instrumented revm and reports where execution time goes:
/// an opcode cost table (count, time, share, cumulative share, ns per call, category), time
/// outside opcodes, time by category, the JIT ceiling, and the profiler's own overhead.
///
/// Every block is first checked against its header (gasUsed; receipts root and logs bloom
/// from Byzantium on); any mismatch exits non-zero naming the block. Then, for ROUNDS rounds,
/// each block runs once plain and once probed back to back in this process (the order
/// alternating), and the probe's own cost is calibrated on a compute-bound program.
/// Writes profile.json, opcodes.csv, report.md, top30.svg and categories.svg to --out.
///
/// With call stacks on (the default), every sample also names its call path (block,
/// transaction, contract:function, …), and calls.md, calls.json, stacks.folded, flame.svg and
/// profile.pb.gz (pprof) report time by contract, function and transaction.
#[derive(Debug, Parser)]
#[command(
    name = "gigas-profiler",
    version,
    args_conflicts_with_subcommands = true
)]
struct Args {
    /// Instead of profiling: `fetch` writes block fixtures from a node's JSON-RPC.
    #[command(subcommand)]
    command: Option<Command>,

    /// Directory of block fixtures: one sub-directory per block with block.json.zst,
    /// prestate.json.zst and optionally block_hashes.json (see shared/data/README.md), and
    /// optionally chain.json (chain id and forks, as `fetch` writes it; mainnet without it).
    /// Defaults to ../shared/data/mainnet.
    #[arg(long, value_name = "DIR")]
    blocks: Option<PathBuf>,

    /// Directory the report is written to (created if missing).
    #[arg(long, value_name = "DIR", default_value = "reports/profile")]
    out: PathBuf,

    /// Rounds of (plain pass, probed pass). More rounds give more samples and a tighter
    /// overhead estimate.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,

    /// Target interval between samples of the current opcode, in nanoseconds. Shorter
    /// intervals give more samples and a little more overhead.
    #[arg(long, value_name = "NS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    sample_interval_ns: u64,

    /// Rows of the cost table printed to the terminal (the files hold every row).
    #[arg(long, default_value_t = 10)]
    top: usize,

    /// Runtime bytecode (hex) of the compute-bound program the probe's cost per instruction is
    /// calibrated on. Defaults to ../shared/data/evm-bench/snailtracer.hex.
    #[arg(long, value_name = "FILE")]
    calibration_program: Option<PathBuf>,

    /// Calldata (hex) for the calibration program.
    #[arg(long, value_name = "HEX", default_value = "0x30627b7c")]
    calibration_calldata: String,

    /// Alternated plain/probed runs of the calibration program; 0 skips the calibration and
    /// reports rows as sampled.
    #[arg(long, default_value_t = 21)]
    calibration_runs: usize,

    /// Only check every block against its header, then exit.
    #[arg(long)]
    check_only: bool,

    /// Attribute every sample to its call stack (block, transaction, contract:function, …):
    /// `on` writes the call-stack report (calls.md, stacks.folded, flame.svg, profile.pb.gz)
    /// at about 60 ns a call (about 1 % of a replay); `off` profiles opcodes alone.
    #[arg(long, value_name = "on|off", default_value = "on", action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    call_stacks: bool,

    /// A label file naming contracts and functions (`0xADDRESS name`, `name(types)` or
    /// `0xSELECTOR name` per line; see profiler/labels.txt, which is always loaded first).
    #[arg(long, value_name = "FILE")]
    labels: Option<PathBuf>,

    /// Call-stack report of the frames of this contract (code address) and below only.
    #[arg(long, value_name = "ADDRESS")]
    contract: Option<alloy_primitives::Address>,

    /// Call-stack report of this transaction only.
    #[arg(long, value_name = "HASH")]
    tx: Option<alloy_primitives::B256>,

    /// What folded stacks, the flame graph and the pprof profile weigh, and what the
    /// contract tables are ordered by: sampled `time`, or exact `gas` (by frame).
    #[arg(long, value_name = "time|gas", default_value = "time")]
    by: crate::stacks::Weight,

    /// Instead of profiling: measure what call stacks cost. Every block runs plain, plain
    /// beside a spinning sampler (what a second busy core alone costs), probed, and probed
    /// with call stacks, back to back in a rotating order, for ROUNDS rounds; prints the
    /// medians of the per-round ratios and the ratios of each block's fastest run of each
    /// way, summed, and writes overhead.json to --out.
    #[arg(long)]
    compare_call_stacks: bool,

    /// The JIT code cache `jit-hotlist.txt` is sized for, in MiB of machine code (the
    /// sequencer's --jit.budget-mib).
    #[arg(long, value_name = "MIB", default_value_t = gigas_evm::jit::DEFAULT_BUDGET_BYTES >> 20)]
    jit_budget_mib: u64,

    /// Rows of the contract and function tables in calls.md.
    #[arg(long, value_name = "N", default_value_t = 40)]
    top_contracts: usize,

    /// Run every Ethereum state test (GeneralStateTests JSON) under DIR instead of profiling:
    /// each vector runs interpreted and with the JIT, from the same pre-state. Exits non-zero
    /// listing every vector whose post-state root or logs hash differs from the expected one
    /// or between the two runs. The shipped tests are in ../shared/data/state-tests.
    #[arg(long, value_name = "DIR")]
    state_tests: Option<PathBuf>,

    /// When compiled code runs: off (interpreter only), on (contracts compiled in the
    /// background once hot) or eager (every contract compiled before its first frame).
    /// For a profile it applies to the header check (blocks must still match their headers
    /// with compiled code; the timed passes stay interpreted, since the probe counts the
    /// interpreter's opcodes); defaults to off. With --state-tests it defaults to eager, so
    /// that compiled code is what gets checked.
    #[arg(long, value_name = "MODE")]
    jit: Option<gigas_evm::jit::JitMode>,

    /// With `--jit on`: compile the contracts of this hot list at their first call and no
    /// others, as `gigas-sequencer --jit.hotlist` does (one code hash per line, as this
    /// profiler writes `jit-hotlist.txt`).
    #[arg(long, value_name = "FILE")]
    jit_hotlist: Option<PathBuf>,

    /// Threads running state tests (defaults to the CPUs available).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,

    #[command(flatten)]
    memory: gigas_cgroup::MemoryLimitArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetches blocks from a node into fixtures in the shipped format: for each block,
    /// eth_getBlockByNumber(N, true), debug_traceBlockByNumber(N, {"tracer":"prestateTracer"})
    /// merged into the block's prestate, and the hashes its BLOCKHASH calls read; chain.json
    /// holds the chain id and fork. Works with any node that serves the prestate tracer for
    /// the range (an archive node, or a Gigas sequencer within its state history).
    Fetch(FetchArgs),
}

#[derive(Debug, clap::Args)]
struct FetchArgs {
    /// The node's JSON-RPC URL (http://HOST:PORT).
    #[arg(long, value_name = "URL")]
    rpc: String,

    /// First block.
    #[arg(long, value_name = "N")]
    from: u64,

    /// Last block (inclusive).
    #[arg(long, value_name = "N")]
    to: u64,

    /// Directory the fixtures go to: OUT/<number>/ per block and OUT/chain.json.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,

    /// The fork the chain runs from genesis (e.g. Prague), for a chain other than mainnet.
    /// Defaults to the fork the first header shows; mainnet (chain id 1) gets its schedule.
    #[arg(long, value_name = "FORK", value_parser = parse_fork)]
    fork: Option<gigas_primitives::Hardfork>,

    /// Retries of a call whose transport fails (the wait doubles from 250 ms).
    #[arg(long, default_value_t = 6)]
    retries: u32,
}

fn parse_fork(s: &str) -> std::result::Result<gigas_primitives::Hardfork, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        "expected a fork name: Frontier, Homestead, Tangerine, SpuriousDragon, Byzantium, \
         Petersburg, Istanbul, Berlin, London, Paris, Shanghai, Cancun or Prague"
            .to_string()
    })
}

/// `gigas-profiler fetch`.
fn fetch(args: &FetchArgs) -> Result<()> {
    use crate::fetch::{fetch_blocking, FetchConfig};
    let config = FetchConfig {
        rpc: args.rpc.clone(),
        from: args.from,
        to: args.to,
        out: args.out.clone(),
        fork: args.fork,
        retries: args.retries,
    };
    let progress = bar(0, "fetching");
    let summary = fetch_blocking(&config, |done, total| {
        progress.set_length(total);
        progress.set_position(done);
    })
    .map_err(|e| eyre!(e))?;
    progress.finish_and_clear();
    println!(
        "fetched      : blocks {}..={} from {} into {}",
        args.from,
        args.to,
        args.rpc,
        args.out.display()
    );
    println!(
        "contents     : {} blocks, {} transactions, {} prestate accounts, {} slots, {} block hashes ({} headers fetched for them)",
        summary.blocks,
        summary.transactions,
        summary.accounts,
        summary.slots,
        summary.block_hashes,
        summary.headers_fetched
    );
    println!(
        "chain        : id {}, {} (written to {})",
        summary.chain.chain_id,
        summary
            .chain
            .activations
            .iter()
            .map(|(fork, at)| format!("{fork} from {at:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        args.out.join(crate::fetch::CHAIN_FILE).display()
    );
    for (number, reason) in &summary.unreplayable {
        tracing::warn!(
            "block {number} could not be replayed to find its BLOCKHASH numbers ({reason}); it got all 256 preceding hashes"
        );
    }
    Ok(())
}

/// `../shared/data/<rest>` from the working directory, or else from the checkout this binary
/// was built from.
fn shared_data(rest: &str) -> PathBuf {
    let relative = PathBuf::from("../shared/data").join(rest);
    if relative.exists() {
        return relative;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(rest)
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    let style = ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, contents).wrap_err_with(|| format!("cannot write {}", path.display()))
}

/// `--state-tests DIR`: every vector both ways; non-zero exit listing the ones that differ.
fn state_tests(dir: &Path, args: &Args) -> Result<()> {
    use gigas_evm::jit::JitMode;
    if !dir.is_dir() {
        bail!(
            "state-test directory {} does not exist (the shipped tests are in ../shared/data/state-tests)",
            dir.display()
        );
    }
    let mode = args.jit.unwrap_or(JitMode::Eager);
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
    });
    let progress = bar(0, "files");
    let started = std::time::Instant::now();
    let results = gigas_evm::statetest::run_dir(dir, mode, threads, |done, total| {
        progress.set_length(total as u64);
        progress.set_position(done as u64);
    })
    .wrap_err_with(|| format!("cannot run the state tests in {}", dir.display()))?;
    progress.finish_and_clear();
    let differing = results.differing();
    for (vector, problems) in &differing {
        println!("DIFFERS {}", vector.id);
        for problem in problems {
            println!("    {problem}");
        }
    }
    for error in &results.errors {
        println!("ERROR {error}");
    }
    let known = results.vectors.iter().filter(|v| v.known_deviation).count();
    println!(
        "state tests  : {} files, {} vectors, interpreter{} ({} threads, {:.1} s)",
        results.files,
        results.vectors.len(),
        if mode == JitMode::Off {
            String::new()
        } else {
            format!(" and JIT ({mode})")
        },
        threads,
        started.elapsed().as_secs_f64()
    );
    println!(
        "match        : {} vectors match the expected root and logs hash{}",
        results.vectors.len()
            - differing.len()
            - known.min(results.vectors.len() - differing.len()),
        if mode == JitMode::Off {
            ""
        } else {
            ", and the JIT matches the interpreter"
        }
    );
    if known > 0 {
        println!(
            "known        : {known} vectors checked against the interpreter only ({})",
            gigas_evm::statetest::KNOWN_DEVIATIONS.join(", ")
        );
    }
    if !results.skipped.is_empty() {
        println!(
            "skipped      : {} vectors of forks Gigas does not configure",
            results.skipped.len()
        );
    }
    if let Some(jit) = results.jit {
        println!(
            "jit          : {} contracts compiled ({} KB of EVM code, {:.1} ms/KB), {} not compiled; {} frames started in compiled code, {} suspensions at a CALL, {} hand-overs to the interpreter",
            jit.compiled,
            jit.evm_bytes / 1024,
            jit.compile_ns as f64 / 1e6 / (jit.evm_bytes.max(1) as f64 / 1024.0),
            jit.failed,
            jit.compiled_frames,
            jit.suspensions,
            jit.bailed_frames
        );
    }
    if !differing.is_empty() || !results.errors.is_empty() {
        bail!(
            "{} vectors differ and {} files could not be run (listed above)",
            differing.len(),
            results.errors.len()
        );
    }
    Ok(())
}

/// `--compare-call-stacks`: the overhead of plain probing and of probing with call stacks,
/// alternated in one run.
fn compare_call_stacks(workload: &Workload, args: &Args) -> Result<()> {
    let measuring = bar(args.rounds as usize, "rounds");
    let rounds = workload
        .measure_overhead(
            args.rounds as usize,
            Duration::from_nanos(args.sample_interval_ns),
            |done, _| measuring.set_position(done as u64),
        )
        .wrap_err("measurement failed")?;
    measuring.finish_and_clear();
    let ratio = |f: &dyn Fn(&replay::OverheadRound) -> f64| {
        crate::report::Stat::of(rounds.iter().map(f).collect())
    };
    use replay::OverheadRound as Way;
    let over = |a: usize, b: usize| ratio(&|r| r.pass_seconds(a) / r.pass_seconds(b));
    let beside = over(Way::BESIDE_SAMPLER, Way::PLAIN);
    let probed = over(Way::PROBED, Way::PLAIN);
    let stacked = over(Way::STACKED, Way::PLAIN);
    let added = over(Way::STACKED, Way::PROBED);
    let plain_ms = ratio(&|r| r.pass_seconds(Way::PLAIN) * 1e3);
    println!(
        "plain        : {:.1} ms per pass (median of {} rounds; min {:.1}, max {:.1})",
        plain_ms.median,
        rounds.len(),
        plain_ms.min,
        plain_ms.max
    );
    for (name, s) in [
        ("sampler only ", &beside),
        ("probed       ", &probed),
        ("call stacks  ", &stacked),
        ("stacks/probed", &added),
    ] {
        println!(
            "{name}: {:.3}x (median of per-round ratios; min {:.3}, max {:.3})",
            s.median, s.min, s.max
        );
    }
    // On a VM whose neighbours come and go, the medians above move by a point or two from
    // run to run. Each block's fastest run of each way, summed, is the least disturbed
    // estimate: another tenant can only slow a run down.
    let fastest = fastest_pass_ratios(&rounds);
    println!(
        "fastest runs : sampler only {:.3}x, probed {:.3}x, call stacks {:.3}x, stacks/probed {:.3}x (each block's fastest of {} runs per way, summed)",
        fastest[Way::BESIDE_SAMPLER],
        fastest[Way::PROBED],
        fastest[Way::STACKED],
        fastest[Way::STACKED] / fastest[Way::PROBED],
        rounds.len()
    );
    std::fs::create_dir_all(&args.out)
        .wrap_err_with(|| format!("cannot create {}", args.out.display()))?;
    let json = serde_json::json!({
        "fastest_runs_over_plain": {
            "plain_beside_sampler": fastest[Way::BESIDE_SAMPLER],
            "probed": fastest[Way::PROBED],
            "call_stacks": fastest[Way::STACKED],
        },
        "rounds": rounds.len(),
        "blocks": workload.blocks.len(),
        "plain_ms_per_pass": plain_ms,
        "plain_beside_sampler_over_plain": beside,
        "probed_over_plain": probed,
        "call_stacks_over_plain": stacked,
        "call_stacks_over_probed": added,
    });
    write(
        &args.out.join("overhead.json"),
        serde_json::to_string_pretty(&json).wrap_err("cannot serialise")?,
    )?;
    println!("written to {}/overhead.json", args.out.display());
    Ok(())
}

/// For each way of running (plain, beside the sampler, probed, with stacks), the sum over
/// blocks of each block's fastest run, over the plain sum: 1.0 for plain itself.
fn fastest_pass_ratios(rounds: &[replay::OverheadRound]) -> [f64; 4] {
    let blocks = rounds.first().map_or(0, |r| r.per_block.len());
    let mut sums = [0.0f64; 4];
    for b in 0..blocks {
        for (way, sum) in sums.iter_mut().enumerate() {
            *sum += rounds
                .iter()
                .filter_map(|r| r.per_block.get(b).map(|t| t[way].as_secs_f64()))
                .fold(f64::INFINITY, f64::min);
        }
    }
    let plain = sums[replay::OverheadRound::PLAIN];
    if plain > 0.0 && plain.is_finite() {
        sums.map(|s| s / plain)
    } else {
        [f64::NAN; 4]
    }
}

/// Runs `gigas-profiler` with these arguments (the first is the program name, as in
/// `std::env::args`), exactly as the binary does: the report goes to `--out`.
pub fn main_with_args<I, T>(args: I) -> Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    gigas_launch::init_logging(gigas_launch::LogTo::Stderr);
    let args = Args::parse_from(args);
    // First, before any block is read or thread started: pages are charged to the cgroup
    // that first touches them. Held to the end; dropping it removes the cgroup.
    let _memory_limit = args.memory.apply("profiler")?;
    if let Some(Command::Fetch(fetch_args)) = &args.command {
        return fetch(fetch_args);
    }
    if let Some(dir) = &args.state_tests {
        return state_tests(dir, &args);
    }
    let blocks_dir = args
        .blocks
        .clone()
        .unwrap_or_else(|| shared_data("mainnet"));
    if !blocks_dir.is_dir() {
        bail!(
            "block directory {} does not exist: pass --blocks DIR, or clone the project with shared/ beside it",
            blocks_dir.display()
        );
    }
    // A directory written by `fetch` names its chain; the shipped fixtures are mainnet's.
    let chain = match crate::fetch::load_chain(&blocks_dir).map_err(|e| eyre!(e))? {
        Some(chain) => {
            println!(
                "chain        : id {} from {}",
                chain.chain_id,
                blocks_dir.join(crate::fetch::CHAIN_FILE).display()
            );
            chain
        }
        None => ChainSpec::mainnet(),
    };

    let mut labels = crate::labels::Labels::shipped();
    if let Some(file) = &args.labels {
        labels.add_file(file).map_err(|e| eyre!(e))?;
    }
    let loading = bar(0, "loading");
    let workload = Workload::load(&blocks_dir, &chain, |done, total| {
        loading.set_length(total as u64);
        loading.set_position(done as u64);
    })
    .wrap_err_with(|| format!("cannot load blocks from {}", blocks_dir.display()))?;
    loading.finish_and_clear();

    let machine = gigas_primitives::Machine::current();
    let configuration = Configuration {
        blocks_dir: blocks_dir.display().to_string(),
        blocks: workload.blocks.len(),
        transactions: workload.tx_count(),
        gas: workload.gas(),
        rounds: args.rounds as usize,
        sample_interval_ns: args.sample_interval_ns,
        build_profile: gigas_report::build_profile().into(),
        cpus: machine.cpus,
        cpu_model: machine.cpu_model,
        memory_bytes: machine.memory_bytes,
        revm_version: gigas_evm::REVM_VERSION.into(),
    };
    println!("gigas-profiler configuration");
    for line in configuration.lines() {
        println!("  {line}");
    }
    if configuration.build_profile == "debug" {
        tracing::warn!("debug build: timings are not representative; use cargo run --release");
    }

    let hot_list = match &args.jit_hotlist {
        Some(file) => Some(gigas_evm::jit::HotList::read(file).map_err(|e| eyre!(e))?),
        None => None,
    };
    let jit = args
        .jit
        .filter(|mode| *mode != gigas_evm::jit::JitMode::Off)
        .map(|mode| match &hot_list {
            Some(hot) => gigas_evm::jit::CodeCache::with_hot_list(
                gigas_evm::jit::CacheConfig {
                    hotness: gigas_evm::jit::Hotness::NEVER,
                    ..gigas_evm::jit::CacheConfig::new(mode)
                },
                hot.clone(),
            ),
            None => gigas_evm::jit::CodeCache::new(mode),
        });
    let checking = bar(workload.blocks.len(), "checking");
    let checks = workload
        .check_with(jit.as_ref(), |done, _| checking.set_position(done as u64))
        .map_err(|e| match e {
            replay::ReplayError::HeaderMismatch { .. } | replay::ReplayError::Execution(_) => {
                eyre!("{e}")
            }
            other => eyre!(other),
        })?;
    checking.finish_and_clear();
    let receipts_checked = checks.iter().filter(|c| c.receipts_checked).count();
    println!(
        "checked      : {} blocks match their header's gasUsed; {} (Byzantium on) also receipts root and logs bloom",
        checks.len(),
        receipts_checked
    );
    if let Some(cache) = &jit {
        let jit = cache.stats().snapshot();
        println!(
            "jit          : checked with --jit {}: {} contracts compiled, {} frames started in compiled code, {} suspensions at a CALL, {} hand-overs to the interpreter",
            cache.mode(),
            jit.compiled,
            jit.compiled_frames,
            jit.suspensions,
            jit.bailed_frames
        );
    }
    if args.check_only {
        return Ok(());
    }

    match crate::affinity::placement() {
        Some(p) if crate::affinity::pin_current_thread(p.replay) => {
            tracing::debug!(replay = p.replay, sampler = p.sampler, "pinned replay and sampler threads")
        }
        Some(_) => tracing::warn!("could not pin the replay thread; the scheduler may move it onto the sampler's CPU"),
        None => tracing::warn!(
            "only one CPU available: the sampler shares it with the replay, which inflates the overhead"
        ),
    }
    if args.compare_call_stacks {
        return compare_call_stacks(&workload, &args);
    }
    let measuring = bar(args.rounds as usize, "rounds");
    let rounds = workload
        .measure_with(
            args.rounds as usize,
            Duration::from_nanos(args.sample_interval_ns),
            args.call_stacks,
            |done, _| measuring.set_position(done as u64),
        )
        .wrap_err("measurement failed")?;
    measuring.finish_and_clear();

    let calibration = if args.calibration_runs > 0 {
        let program = args
            .calibration_program
            .clone()
            .unwrap_or_else(|| shared_data("evm-bench/snailtracer.hex"));
        let text = args.calibration_calldata.trim();
        let calldata = hex::decode(text.strip_prefix("0x").unwrap_or(text))
            .wrap_err("--calibration-calldata is not hex")?;
        let spinner = ProgressBar::new_spinner();
        spinner.set_message("calibrating the probe's cost on snailtracer");
        spinner.enable_steady_tick(Duration::from_millis(200));
        let calibration = calibrate::calibrate(
            &program,
            calldata.into(),
            args.calibration_runs,
            Duration::from_nanos(args.sample_interval_ns),
        )
        .wrap_err("probe calibration failed (pass --calibration-runs 0 to skip it)")?;
        spinner.finish_and_clear();
        Some(calibration)
    } else {
        None
    };
    let report = Report::build(configuration, &workload, &checks, &rounds, calibration);
    for line in report.summary_lines() {
        println!("{line}");
    }
    println!("\n{}", report.table_markdown(args.top));

    std::fs::create_dir_all(&args.out)
        .wrap_err_with(|| format!("cannot create {}", args.out.display()))?;
    let json = serde_json::to_string_pretty(&report).wrap_err("cannot serialise the report")?;
    write(&args.out.join("profile.json"), json)?;
    write(&args.out.join("opcodes.csv"), report.csv())?;
    chart::top_opcodes(&report, &args.out.join("top30.svg"))?;
    chart::categories(&report, &args.out.join("categories.svg"))?;
    write(
        &args.out.join("report.md"),
        report.markdown("top30.svg", "categories.svg"),
    )?;
    println!(
        "report written to {}/ (report.md, profile.json, opcodes.csv, top30.svg, categories.svg)",
        args.out.display()
    );
    if let Some(profile) =
        crate::stacks::StackProfile::merged(rounds.iter().filter_map(|r| r.probed.stacks.as_ref()))
    {
        let options = crate::calls::CallOptions {
            weight: args.by,
            filter: crate::stacks::Filter {
                contract: args.contract,
                tx: args.tx,
            },
            labels,
            top: args.top_contracts,
            top_txs: 5,
            codes: workload.codes(),
            jit_budget_bytes: args.jit_budget_mib.saturating_mul(1 << 20),
        };
        let calls = crate::calls::write(&profile, &report, &options, &args.out)?;
        println!(
            "call stacks  : {} samples; {:.1}% of the time in contract frames, {:.1}% outside them; {} contracts",
            calls.samples,
            if calls.kept_s > 0.0 { calls.in_frames_s / calls.kept_s * 100.0 } else { 0.0 },
            if calls.kept_s > 0.0 { calls.outside_frames_s / calls.kept_s * 100.0 } else { 0.0 },
            calls.contracts.len()
        );
        for (i, c) in calls.contracts.iter().take(5).enumerate() {
            println!(
                "  {}. {:<44} time {:>5.1}% ±{:.1}% (self {:>4.1}%)  gas {:>5.1}%",
                i + 1,
                c.name,
                c.total_share * 100.0,
                c.total_share_ci95 * 100.0,
                c.self_share * 100.0,
                c.gas_share * 100.0
            );
        }
        println!(
            "call report written to {}/ ({})",
            args.out.display(),
            crate::calls::FILES
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(times_ms: &[[u64; 4]]) -> replay::OverheadRound {
        replay::OverheadRound {
            per_block: times_ms
                .iter()
                .map(|t| t.map(Duration::from_millis))
                .collect(),
        }
    }

    #[test]
    fn fastest_runs_are_taken_per_block_and_way_then_summed() {
        // Block 0 is disturbed in round 1 for plain and in round 0 for stacks; block 1 in
        // round 0 for probed. Each block's fastest run of each way is what counts.
        let rounds = [
            round(&[[100, 100, 104, 150], [50, 51, 80, 53]]),
            round(&[[130, 101, 103, 106], [51, 50, 52, 54]]),
        ];
        let r = fastest_pass_ratios(&rounds);
        let plain = 100.0 + 50.0;
        assert!((r[0] - 1.0).abs() < 1e-12);
        assert!((r[1] - (100.0 + 50.0) / plain).abs() < 1e-12);
        assert!((r[2] - (103.0 + 52.0) / plain).abs() < 1e-12);
        assert!((r[3] - (106.0 + 53.0) / plain).abs() < 1e-12);
        assert!(fastest_pass_ratios(&[]).iter().all(|x| x.is_nan()));
    }
}

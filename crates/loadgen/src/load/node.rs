//! The node under load when the run starts its own: the benchmark genesis (built once by
//! `gigas-sequencer genesis` and cached), a fresh data directory, the process, and its stop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use eyre::{bail, eyre, Result, WrapErr};
use gigas_chain::bench::WETH9;
use gigas_chain::ChainConfig;

/// The `gigas-sequencer` binary: `explicit`, else the one beside this executable (a test's
/// executable sits one directory deeper, in `deps/`).
pub fn sequencer_bin(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let exe = std::env::current_exe().wrap_err("locating this executable")?;
    let name = format!("gigas-sequencer{}", std::env::consts::EXE_SUFFIX);
    let mut dir = exe.parent();
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join(&name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        dir = d.parent();
    }
    bail!(
        "no {name} beside {}: build it with `cargo build --release -p gigas-sequencer`, or give --sequencer-bin PATH or --sequencer URL",
        exe.display()
    )
}

/// Where benchmark chains are cached: `target/bench-genesis` of the build the sequencer
/// binary comes from, else `./target/bench-genesis`.
pub fn genesis_cache_root(bin: &Path) -> PathBuf {
    // A cargo target directory carries this tag file.
    bin.parent()
        .and_then(Path::parent)
        .filter(|target| target.join("CACHEDIR.TAG").is_file())
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("bench-genesis")
}

/// What the benchmark chain must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenesisSpec {
    /// Benchmark accounts.
    pub accounts: u64,
    /// Their seed.
    pub seed: u64,
    /// Block gas limit.
    pub gas_limit: u64,
    /// WETH9 deployed with a balance for every account.
    pub erc20: bool,
}

impl GenesisSpec {
    /// The cache directory's name for this chain.
    pub fn dir_name(&self) -> String {
        format!(
            "{}-{}-gas{}{}",
            self.accounts,
            self.seed,
            self.gas_limit,
            if self.erc20 { "-erc20" } else { "" }
        )
    }

    /// Whether `config` is this chain.
    fn matches(&self, config: &ChainConfig) -> bool {
        config
            .bench_accounts
            .as_ref()
            .is_some_and(|b| b.count == self.accounts && b.seed == self.seed)
            && config.block_gas_limit == self.gas_limit
            && config.alloc.contains_key(&WETH9) == self.erc20
    }
}

/// The chain spec of `spec` in `dir`, built there with `bin genesis` unless a valid one is
/// there already. Returns the loaded spec and its path.
pub fn ensure_genesis(
    bin: Option<&Path>,
    dir: &Path,
    spec: &GenesisSpec,
    fixtures: &Path,
) -> Result<(ChainConfig, PathBuf)> {
    let chain = dir.join("chain.json");
    if chain.is_file() {
        match ChainConfig::load(&chain) {
            Ok(config) if spec.matches(&config) => {
                if let Some(bench) = &config.bench_accounts {
                    if gigas_chain::bench::addresses_checksum(bench).is_ok() {
                        return Ok((config, chain));
                    }
                }
                eprintln!("{}: addresses file damaged; rebuilding", dir.display());
            }
            Ok(_) => eprintln!(
                "{}: holds another chain than {:?}; rebuilding",
                dir.display(),
                spec
            ),
            Err(e) => eprintln!("{}: {e}; rebuilding", dir.display()),
        }
    }
    let Some(bin) = bin else {
        bail!(
            "no benchmark chain in {} and no gigas-sequencer binary to build one (give --sequencer-bin)",
            dir.display()
        );
    };
    if dir.exists() {
        std::fs::remove_dir_all(dir).wrap_err_with(|| format!("clearing {}", dir.display()))?;
    }
    println!(
        "building the benchmark chain ({} accounts of seed {}, gas limit {}{}) in {}",
        spec.accounts,
        spec.seed,
        spec.gas_limit,
        if spec.erc20 { ", WETH9" } else { "" },
        dir.display()
    );
    let mut cmd = Command::new(bin);
    cmd.arg("genesis")
        .args(["--accounts", &spec.accounts.to_string()])
        .args(["--seed", &spec.seed.to_string()])
        .args(["--gas-limit", &spec.gas_limit.to_string()])
        .arg("--out")
        .arg(dir);
    if spec.erc20 {
        cmd.arg("--erc20").arg("--fixtures").arg(fixtures);
    }
    let started = Instant::now();
    let status = cmd
        .status()
        .wrap_err_with(|| format!("running {} genesis", bin.display()))?;
    if !status.success() {
        bail!("{} genesis failed ({status})", bin.display());
    }
    let config = ChainConfig::load(&chain)?;
    if !spec.matches(&config) {
        bail!(
            "{} does not hold the chain asked for ({spec:?})",
            chain.display()
        );
    }
    println!(
        "benchmark chain built in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok((config, chain))
}

/// A `gigas-sequencer` process this run started; stopped (SIGINT, then SIGKILL) at the end or
/// when dropped.
#[derive(Debug)]
pub struct SequencerProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`, JSON-RPC over HTTP.
    pub url: String,
    /// `ws://127.0.0.1:PORT`, JSON-RPC over WebSocket.
    pub ws: String,
    /// `http://127.0.0.1:PORT/metrics`.
    pub metrics: String,
    /// Its data directory (removed when dropped unless kept).
    datadir: Option<tempfile::TempDir>,
    /// Its log file.
    pub log: PathBuf,
    /// Seconds from spawn to the JSON-RPC server listening.
    pub start_seconds: f64,
}

impl SequencerProcess {
    /// Starts `bin --chain CHAIN --datadir <fresh> --http.port 0 --metrics 127.0.0.1:<free>
    /// --block-time BLOCK_TIME EXTRA...`, its output to `log`, and waits until its JSON-RPC
    /// server listens (a genesis of millions of accounts is written first: minutes for 10M).
    pub fn start(
        bin: &Path,
        chain: &Path,
        block_time: Duration,
        extra: &[String],
        datadir_root: Option<&Path>,
        log: &Path,
    ) -> Result<Self> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("gigas-load-node-");
        let datadir = match datadir_root {
            Some(root) => {
                std::fs::create_dir_all(root)
                    .wrap_err_with(|| format!("creating {}", root.display()))?;
                builder.tempdir_in(root)
            }
            None => builder.tempdir(),
        }
        .wrap_err("creating the node's data directory")?;
        let metrics = format!("127.0.0.1:{}", gigas_launch::free_port()?);
        if let Some(parent) = log.parent() {
            std::fs::create_dir_all(parent)
                .wrap_err_with(|| format!("creating {}", parent.display()))?;
        }
        let log_file = std::fs::File::create(log)
            .wrap_err_with(|| format!("creating the node log {}", log.display()))?;
        let stderr = log_file.try_clone().wrap_err("opening the node log")?;
        let started = Instant::now();
        let mut child = Command::new(bin)
            .arg("--chain")
            .arg(chain)
            .arg("--datadir")
            .arg(datadir.path())
            .args(["--http.port", "0", "--metrics", &metrics])
            .args(["--block-time", &format!("{}ms", block_time.as_millis())])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("GIGAS_NODE_LOG").unwrap_or("info,cranelift_jit=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .wrap_err_with(|| format!("starting {}", bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| eyre!("the node's stdout was not piped"))?;
        // Every line goes to the log; the start waits for the JSON-RPC line.
        let lines = gigas_launch::tee_lines("node", stdout, Some(log_file))
            .wrap_err("starting the node log thread")?;
        let url = match gigas_launch::wait_for_rpc(&lines, Duration::from_secs(1800)) {
            Ok(ready) => ready.url,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let tail = gigas_launch::tail(log, 30);
                bail!(
                    "{} did not start ({e}; log {}):\n{tail}",
                    bin.display(),
                    log.display()
                );
            }
        };
        Ok(Self {
            ws: url.replacen("http://", "ws://", 1),
            url,
            metrics: format!("http://{metrics}/metrics"),
            child,
            datadir: Some(datadir),
            log: log.to_path_buf(),
            start_seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Keeps the data directory after the run (its path is returned).
    pub fn keep_datadir(&mut self) -> Option<PathBuf> {
        self.datadir.take().map(tempfile::TempDir::keep)
    }

    /// SIGINT (the node finishes its block and its diffs), SIGKILL after 60 s.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        if let Ok(Some(_)) = self.child.try_wait() {
            return Ok(());
        }
        let pid = libc::pid_t::try_from(self.child.id()).unwrap_or(0);
        if pid > 0 {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                if status.success() {
                    return Ok(());
                }
                bail!("the node exited with {status} (log {})", self.log.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        bail!(
            "the node did not stop within 60 s of SIGINT and was killed (log {})",
            self.log.display()
        )
    }
}

impl Drop for SequencerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

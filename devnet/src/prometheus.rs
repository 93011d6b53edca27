//! A real Prometheus for the devnet's lifetime, where Debian's `prometheus` is installed: the
//! shipped `deploy/prometheus.yml` with its two targets pointed at this run's ports, a
//! throw-away time-series directory, a free port.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::http::Http;
use crate::supervisor::Supervisor;

/// The targets `deploy/prometheus.yml` is written with.
pub const SEQUENCER_TARGET: &str = "127.0.0.1:9001";
/// The full node's target in `deploy/prometheus.yml`.
pub const FULLNODE_TARGET: &str = "127.0.0.1:9002";

/// What became of Prometheus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PromStatus {
    /// `--no-prometheus`.
    Disabled,
    /// No `prometheus` on PATH.
    NotInstalled,
    /// The configuration file is missing.
    NoConfig {
        /// Where it was looked for.
        path: String,
    },
    /// Running (until the devnet stops).
    Running {
        /// Its web UI.
        url: String,
        /// Its process id.
        pid: u32,
    },
    /// It did not start.
    Failed {
        /// Why.
        reason: String,
    },
}

impl PromStatus {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        match self {
            Self::Disabled => "not started (--no-prometheus)".to_string(),
            Self::NotInstalled => "not installed: `scripts/prerequisites.sh devnet` (Debian's prometheus) to watch a run live with deploy/prometheus.yml and the Grafana dashboard in deploy/grafana/".to_string(),
            Self::NoConfig { path } => format!("not started: no configuration at {path} (give --prometheus-config FILE)"),
            Self::Running { url, .. } => format!(
                "{url} (for the devnet's lifetime; try gigas_fullnode_lag_blocks or rate(gigas_sequencer_transactions_included_total[10s]) in {url}/graph)"
            ),
            Self::Failed { reason } => format!("did not start: {reason}"),
        }
    }
}

/// `prometheus` on PATH.
pub fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("prometheus"))
        .find(|p| p.is_file())
}

/// `deploy/prometheus.yml` of the working directory's checkout, else of the one this binary
/// was built from.
pub fn default_config() -> PathBuf {
    let here = PathBuf::from("deploy/prometheus.yml");
    if here.is_file() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus.yml")
}

/// Starts Prometheus on `config` (targets rewritten to these addresses; the files beside it,
/// such as its rules, copied along) and waits until it is ready.
pub fn start(
    supervisor: &Supervisor,
    config: &Path,
    sequencer_metrics: SocketAddr,
    fullnode_metrics: SocketAddr,
    log: &Path,
) -> PromStatus {
    let Some(bin) = find_binary() else {
        return PromStatus::NotInstalled;
    };
    let Ok(text) = std::fs::read_to_string(config) else {
        return PromStatus::NoConfig {
            path: config.display().to_string(),
        };
    };
    let failed = |reason: String| PromStatus::Failed { reason };
    let dir = supervisor.temp_path().join("prometheus");
    if let Err(e) = std::fs::create_dir_all(dir.join("data")) {
        return failed(format!("creating {}: {e}", dir.display()));
    }
    // Rule files are named relative to the configuration: bring its neighbours along.
    if let Some(Ok(entries)) = config.parent().map(std::fs::read_dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let yaml = path.extension().is_some_and(|e| e == "yml" || e == "yaml");
            if yaml && path.is_file() {
                if let Some(name) = path.file_name() {
                    let _ = std::fs::copy(&path, dir.join(name));
                }
            }
        }
    }
    let text = text
        .replace(SEQUENCER_TARGET, &sequencer_metrics.to_string())
        .replace(FULLNODE_TARGET, &fullnode_metrics.to_string());
    let file = dir.join("prometheus.yml");
    if let Err(e) = std::fs::write(&file, text) {
        return failed(format!("writing {}: {e}", file.display()));
    }
    let port = match gigas_launch::free_port() {
        Ok(p) => p,
        Err(e) => return failed(format!("{e:#}")),
    };
    let mut command = Command::new(&bin);
    command
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let spawned = match supervisor.spawn("prometheus", command, log, libc::SIGTERM) {
        Ok(s) => s,
        Err(e) => return failed(format!("{e:#}")),
    };
    let url = format!("http://127.0.0.1:{port}");
    let Ok(http) = Http::new(Duration::from_secs(1)) else {
        return failed("no HTTP client".into());
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if matches!(http.get(&format!("{url}/-/ready")), Ok((200, _))) {
            return PromStatus::Running {
                url,
                pid: spawned.pid,
            };
        }
        if supervisor
            .exited()
            .iter()
            .any(|(name, ..)| name == "prometheus")
        {
            return failed(format!(
                "it exited at start (log {}):\n{}",
                log.display(),
                gigas_launch::tail(log, 10)
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    failed(format!(
        "not ready within 30 s (log {}); it keeps running with the devnet",
        log.display()
    ))
}

/// Targets up and in all, from Prometheus's `up` series.
pub fn targets_up(http: &Http, url: &str) -> Option<(usize, usize)> {
    let (status, body) = http.get(&format!("{url}/api/v1/query?query=up")).ok()?;
    if status != 200 {
        return None;
    }
    let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
    let results = answer.pointer("/data/result")?.as_array()?;
    let up = results
        .iter()
        .filter(|r| r.pointer("/value/1").and_then(|v| v.as_str()) == Some("1"))
        .count();
    Some((up, results.len()))
}

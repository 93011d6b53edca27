//! gigas-launch: the contract between a Gigas node process and whoever starts it (the
//! devnet, the load benchmark, the tests). A node prints one line once its JSON-RPC server
//! listens ([`announce_rpc`]); the starting side copies the node's stdout to a log while it
//! reads the lines ([`tee_lines`]), waits for that one ([`wait_for_rpc`]), and finds free
//! loopback ports for the node's other listeners ([`free_port`]). Where a process's log
//! lines go is part of the same contract ([`init_logging`]): a node logs to stdout, which
//! its starter copies into the node's log beside the readiness line; a tool logs to stderr,
//! since its stdout is its report.
//!
//! **Owns:** the readiness line's wording ([`RPC_READY`]) on both sides, the few steps
//! every starter repeats around it, and every Gigas binary's log set-up.
//!
//! **Must not:** know a node's flags, spawn or supervise processes (each caller builds its
//! own command and owns its child: the devnet kills its children with itself, a test with
//! its guard), or depend on another Gigas crate.

use std::fmt::Display;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Where a process's log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTo {
    /// stdout: a node, whose starter reads its stdout for the readiness line anyway.
    Stdout,
    /// stderr: a tool whose stdout is its report (the profiler, the benchmarks).
    Stderr,
}

/// The filter without `RUST_LOG`: info, but Cranelift's at warn (at info it logs every
/// compiled function's whole IR, thousands of lines per contract).
pub const DEFAULT_LOG_FILTER: &str = "info,cranelift_jit=warn,cranelift_codegen=warn";

/// Sets up `tracing` for a Gigas binary: `RUST_LOG` when set, else
/// [`DEFAULT_LOG_FILTER`]; colour codes only for a person at a terminal, not in a log file
/// or a pipe. A subscriber installed first (a test that runs a node in its own process)
/// is kept.
pub fn init_logging(to: LogTo) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // try_init: the subscriber already installed, if any, stays.
    let _ = match to {
        LogTo::Stdout => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
        LogTo::Stderr => builder
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
}

/// What a node prints, followed by its `http://` URL, once its JSON-RPC server listens.
pub const RPC_READY: &str = "JSON-RPC listening on ";

/// Prints the readiness line for the server at `url` (`http://ADDR`) to stdout, and
/// flushes it: the starter waits for it, and a pipe buffers.
pub fn announce_rpc(url: impl Display) {
    println!("{RPC_READY}{url}");
    let _ = std::io::stdout().flush();
}

/// The URL in a readiness line, if `line` is one.
pub fn rpc_url(line: &str) -> Option<&str> {
    line.strip_prefix(RPC_READY).map(str::trim)
}

/// Reads `out` (a child's stdout) line by line on a thread of its own, appending each line
/// to `log` (when given) and sending it to the returned receiver. The thread goes on
/// reading after the receiver is dropped, so that the child never blocks on a full pipe;
/// the receiver disconnects when the child closes its stdout (it exited).
pub fn tee_lines(
    name: &str,
    out: impl Read + Send + 'static,
    log: Option<File>,
) -> std::io::Result<Receiver<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("{name}-log"))
        .spawn(move || {
            let mut log = log;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if let Some(log) = log.as_mut() {
                    // A log that cannot be written loses lines, not the node.
                    let _ = writeln!(log, "{line}");
                }
                let _ = tx.send(line);
            }
        })?;
    Ok(rx)
}

/// A node that announced its JSON-RPC server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// Its `http://ADDR` URL.
    pub url: String,
    /// The lines it printed before (its start-up banner).
    pub before: Vec<String>,
}

impl Ready {
    /// The same server's `ws://ADDR` URL.
    pub fn ws_url(&self) -> String {
        self.url.replacen("http://", "ws://", 1)
    }

    /// The value of the first banner line starting with `prefix` (e.g. `"metrics on "`).
    pub fn banner_value(&self, prefix: &str) -> Option<&str> {
        self.before
            .iter()
            .find_map(|line| line.strip_prefix(prefix).map(str::trim))
    }
}

/// Why a node did not announce its server.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WaitError {
    /// No readiness line in time (the node may still be writing a large genesis).
    #[error("it printed no JSON-RPC address within {0:?}")]
    Timeout(Duration),
    /// Its stdout closed before the line: it exited.
    #[error("it exited before its JSON-RPC server listened")]
    Exited,
}

/// Waits up to `within` for the readiness line among `lines` (from [`tee_lines`]).
pub fn wait_for_rpc(lines: &Receiver<String>, within: Duration) -> Result<Ready, WaitError> {
    let deadline = Instant::now() + within;
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => match rpc_url(&line) {
                Some(url) => {
                    return Ok(Ready {
                        url: url.to_string(),
                        before,
                    })
                }
                None => before.push(line),
            },
            Err(RecvTimeoutError::Timeout) => return Err(WaitError::Timeout(within)),
            Err(RecvTimeoutError::Disconnected) => return Err(WaitError::Exited),
        }
    }
}

/// No free loopback port could be found.
#[derive(Debug, thiserror::Error)]
#[error("finding a free loopback port: {0}")]
pub struct PortError(#[from] std::io::Error);

/// A free loopback port: bound, read and released, so another process could take it in
/// between, which fails that start with a clear error rather than a wrong answer.
pub fn free_port() -> Result<u16, PortError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The last `n` lines of a file (empty when it cannot be read): for an error that shows
/// why a node did not start.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real child process: its lines reach the log and the receiver, the readiness line
    /// ends the wait with the banner before it, and the lines after it still reach the log.
    #[test]
    fn a_child_that_announces_is_ready_and_its_output_is_logged() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("node.log");
        let script = format!(
            "echo banner one; echo 'metrics on 127.0.0.1:9'; echo '{RPC_READY}http://127.0.0.1:8545'; echo after"
        );
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let log = File::create(&log_path).unwrap();
        let lines = tee_lines("test", out, Some(log)).unwrap();
        let ready = wait_for_rpc(&lines, Duration::from_secs(30)).unwrap();
        assert_eq!(ready.url, "http://127.0.0.1:8545");
        assert_eq!(ready.ws_url(), "ws://127.0.0.1:8545");
        assert_eq!(ready.before.len(), 2);
        assert_eq!(ready.banner_value("metrics on "), Some("127.0.0.1:9"));
        child.wait().unwrap();
        // The thread drains to the end, then the channel disconnects.
        assert_eq!(
            lines.recv_timeout(Duration::from_secs(30)).unwrap(),
            "after"
        );
        assert!(lines.recv_timeout(Duration::from_secs(30)).is_err());
        assert_eq!(
            tail(&log_path, 2),
            format!("{RPC_READY}http://127.0.0.1:8545\nafter")
        );
    }

    /// The second set-up keeps the first subscriber instead of failing (a node started
    /// inside a process that already logs).
    #[test]
    fn logging_is_set_up_once_and_a_second_set_up_keeps_it() {
        init_logging(LogTo::Stderr);
        init_logging(LogTo::Stdout);
        assert!(tracing_subscriber::EnvFilter::try_new(DEFAULT_LOG_FILTER).is_ok());
    }

    #[test]
    fn a_child_that_exits_or_stays_silent_is_not_ready() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo starting; exit 3"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines = tee_lines("test", child.stdout.take().unwrap(), None).unwrap();
        assert_eq!(
            wait_for_rpc(&lines, Duration::from_secs(30)),
            Err(WaitError::Exited)
        );
        child.wait().unwrap();
        let (_tx, rx) = mpsc::channel::<String>();
        assert_eq!(
            wait_for_rpc(&rx, Duration::from_millis(50)),
            Err(WaitError::Timeout(Duration::from_millis(50)))
        );
        assert_eq!(
            rpc_url("JSON-RPC listening on  http://x \n"),
            Some("http://x")
        );
        assert_eq!(rpc_url("something else"), None);
        assert!(free_port().unwrap() > 0);
    }
}

//! Prometheus tooling for `tests/prometheus.rs`: finding `prometheus` and `promtool`, linting
//! an exposition with `promtool check metrics`, reading metric names out of a scrape, the
//! dashboard and the rules, and a real Prometheus server on loopback.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What a missing tool's failure says.
pub(crate) const INSTALL: &str =
    "the suite's prerequisites install it: scripts/prerequisites.sh tests (Debian's prometheus package)";

/// `name` on `PATH`, or a panic saying what to install (the kit is tested, never skipped).
pub(crate) fn require_tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no `{name}` on PATH: {INSTALL}"))
}

/// The outcome of `promtool check metrics` on one body.
#[derive(Debug, Default)]
pub(crate) struct Lint {
    /// Problems that come from promtool 2.x reading OpenMetrics with the 0.0.4 text parser: a
    /// counter family `X` is typed once, its sample is `X_total`, which the text parser takes
    /// for a second family without HELP. Not a problem in the exposition.
    pub(crate) format_artifacts: Vec<String>,
    /// Every other lint line (naming, units, ...): reported, not failed on.
    pub(crate) lints: Vec<String>,
    /// Errors: the body did not parse. The test fails on these.
    pub(crate) errors: Vec<String>,
}

/// Runs `promtool check metrics` with `body` on its stdin. promtool exits 0 when clean, 3 on
/// lint problems and 1 when the exposition cannot be parsed.
pub(crate) fn promtool_check_metrics(promtool: &Path, body: &str) -> Lint {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e} ({INSTALL})", promtool.display()));
    {
        let mut stdin = child.stdin.take().expect("stdin piped");
        stdin
            .write_all(body.as_bytes())
            .expect("write the metrics to promtool");
    }
    let out = child.wait_with_output().expect("promtool ran");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let counters: BTreeSet<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .filter(|(_, kind)| kind.trim() == "counter")
        .map(|(name, _)| format!("{name}_total"))
        .collect();
    let mut lint = Lint::default();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let artifact = line
            .strip_suffix(" no help text")
            .is_some_and(|name| counters.contains(name));
        if artifact {
            lint.format_artifacts.push(line.to_string());
        } else if line.starts_with("error") {
            lint.errors.push(line.to_string());
        } else {
            lint.lints.push(line.to_string());
        }
    }
    match out.status.code() {
        Some(0) | Some(3) => {}
        other => lint.errors.push(format!(
            "promtool check metrics exited with {other:?}: {text}"
        )),
    }
    lint
}

/// The sample names of an exposition (`foo_bucket`, `foo_total`, ...), comments skipped.
pub(crate) fn sample_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// The `gigas_*` metric names a PromQL expression reads. Quoted strings (label values) are
/// skipped; names with a colon are recording rules, not scraped metrics.
pub(crate) fn promql_metrics(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            let mut escaped = false;
            for d in chars.by_ref() {
                if escaped {
                    escaped = false;
                } else if d == '\\' {
                    escaped = true;
                } else if d == c {
                    break;
                }
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let mut ident = String::from(c);
            while let Some(&d) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' || d == ':' {
                    ident.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            if ident.starts_with("gigas_") && !ident.contains(':') {
                names.insert(ident);
            }
        } else if c.is_ascii_digit() {
            // A number or a duration (`30s`, `1e-3`): never a metric.
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '.')
            {
                chars.next();
            }
        }
    }
    names
}

/// Every target expression of a Grafana dashboard (row panels' nested panels included), with
/// its panel's title.
pub(crate) fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(panels: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?").to_string();
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((title.clone(), expr.to_string()));
                }
            }
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The `expr:` lines of a rules file (each expression on one line, as deploy/rules.yml has
/// them).
pub(crate) fn rule_exprs(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(|e| e.trim().to_string())
        .collect()
}

/// `text` with `from` replaced by `to`, which must occur exactly once: the test runs the
/// shipped configuration, so a line it expects and does not find fails it loudly.
pub(crate) fn substitute_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "deploy/prometheus.yml should hold `{from}` exactly once (the test rewrites it)"
    );
    text.replacen(from, to, 1)
}

/// Percent-encodes a query-string value.
pub(crate) fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server on loopback, killed when dropped.
pub(crate) struct Prometheus {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    log: PathBuf,
}

impl Prometheus {
    /// Starts `prometheus` on `config` with its TSDB in `dir/data`, and waits (at most 30 s)
    /// until it is ready.
    pub(crate) fn start(bin: &Path, config: &Path, dir: &Path) -> Self {
        let port = gigas_launch::free_port().unwrap();
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).expect("create the Prometheus log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e} ({INSTALL})", bin.display()));
        let mut prometheus = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!(
                    "prometheus exited ({status}); its log:\n{}",
                    prometheus.log_text()
                );
            }
            let ready =
                crate::common::reqwest::blocking_get(&format!("{}/-/ready", prometheus.url))
                    .is_some_and(|body| body.contains("Ready"));
            if ready {
                return prometheus;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus was not ready in 30 s; its log:\n{}",
                prometheus.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its log so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET /api/v1/PATH?query=...` as JSON (`Null` when the server did not answer).
    pub(crate) fn api(&self, path: &str, query: Option<&str>) -> serde_json::Value {
        let url = match query {
            Some(q) => format!("{}/api/v1/{path}?query={}", self.url, url_encode(q)),
            None => format!("{}/api/v1/{path}", self.url),
        };
        crate::common::reqwest::blocking_get(&url)
            .and_then(|body| serde_json::from_str(&body).ok())
            .unwrap_or(serde_json::Value::Null)
    }

    /// An instant query's result vector (empty on no data or any failure).
    pub(crate) fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        self.api("query", Some(expr))["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Polls `expr` until it returns a series whose value is a finite number, for at most
    /// `limit`.
    pub(crate) fn wait_for_series(&self, expr: &str, limit: Duration) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + limit;
        loop {
            let result = self.query(expr);
            let finite = result.iter().any(|series| {
                series["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(f64::is_finite)
            });
            if finite {
                return result;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus returned no finite series for `{expr}` in {limit:?} (last: {result:?}); targets: {}; its log:\n{}",
                self.api("targets", None),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

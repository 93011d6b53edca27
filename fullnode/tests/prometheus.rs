//! The observability kit (`deploy/`) against real nodes: a dev sequencer and a full node under
//! a short load of signed transactions. Both `/metrics` bodies pass `promtool check metrics`;
//! every metric the Grafana dashboard and the rules read is one the nodes export (so renaming a
//! metric breaks this test, not the dashboard in silence); and a real Prometheus, run on the
//! shipped `deploy/prometheus.yml` with only its targets and intervals rewritten, scrapes both,
//! evaluates the rules, and answers the lag and block-time queries.
//!
//! Needs Debian's `prometheus` package (`prometheus` and `promtool` on PATH); without it the
//! test fails saying so.

mod common;
#[path = "common/prom.rs"]
mod prom;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::reqwest::blocking_get;
use common::{head, sequencer_bin, wait_for_block, wait_until, Load, Process};
use prom::Prometheus;

/// Metrics the dashboard or the rules may read that a healthy short run does not export, with
/// why, and the source text that shows the family is still registered under that name.
const ABSENT_UNTIL_USED: [(&str, &str, &str, &str); 3] = [
    (
        "gigas_memory_limit_bytes",
        "exported only when the process runs under --memory-limit; this test sets none",
        "",
        "",
    ),
    (
        "gigas_fullnode_diffs_rejected_total",
        "a labelled family appears with its first rejection",
        include_str!("../src/metrics.rs"),
        "\"diffs_rejected\"",
    ),
    (
        "gigas_txpool_rejected_total",
        "a labelled family appears with its first rejection",
        include_str!("../../crates/txpool/src/metrics.rs"),
        "\"rejected\"",
    ),
];

/// Grafana's interval variables, as a query at one instant can take them.
fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "10s")
        .replace("$__interval", "2s")
        .replace("$__range", "1m")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_both_nodes_with_the_shipped_kit() {
    let started = Instant::now();
    let prometheus_bin = prom::require_tool("prometheus");
    let promtool = prom::require_tool("promtool");
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let read = |name: &str| {
        std::fs::read_to_string(deploy.join(name)).unwrap_or_else(|e| panic!("deploy/{name}: {e}"))
    };
    let shipped_config = read("prometheus.yml");
    let rules = read("rules.yml");
    let dashboard: serde_json::Value = serde_json::from_str(&read("grafana/gigas-dashboard.json"))
        .expect("deploy/grafana/gigas-dashboard.json is JSON");

    // The shipped files as promtool sees them (check config loads the rules file too).
    let check = std::process::Command::new(&promtool)
        .arg("check")
        .arg("config")
        .arg(deploy.join("prometheus.yml"))
        .output()
        .expect("promtool runs");
    assert!(
        check.status.success(),
        "promtool check config deploy/prometheus.yml:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    // A dev sequencer with its metrics on a port picked here (it does not print the port it
    // bound), and a full node following it.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let seq_port = gigas_launch::free_port().unwrap();
    let seq_args: Vec<String> = [
        "--dev",
        "--http.port",
        "0",
        "--metrics",
        &format!("127.0.0.1:{seq_port}"),
        "--datadir",
        &dir.path().join("seq").display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let seq = Process::start(&sequencer_bin(), &seq_args, &dir.path().join("seq.log"));
    let seq_metrics = format!("http://127.0.0.1:{seq_port}/metrics");
    // The endpoint starts just after the JSON-RPC line.
    wait_until(Duration::from_secs(30), "the sequencer's /metrics", || {
        blocking_get(&seq_metrics).is_some_and(|b| b.contains("gigas_sequencer_head"))
    });
    let node = Process::fullnode(&dir.path().join("fn"), &seq.url, &[]);
    let node_metrics = node
        .metrics
        .clone()
        .expect("the full node printed its metrics URL");
    let host_port = |url: &str| {
        url.trim_start_matches("http://")
            .trim_end_matches("/metrics")
            .to_string()
    };

    // Prometheus on the shipped configuration: only the targets and the intervals change.
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).expect("create the Prometheus directory");
    let mut config = shipped_config.clone();
    for (from, to) in [
        ("'127.0.0.1:9001'", format!("'{}'", host_port(&seq_metrics))),
        (
            "'127.0.0.1:9002'",
            format!("'{}'", host_port(&node_metrics)),
        ),
        ("scrape_interval: 2s", "scrape_interval: 1s".to_string()),
        ("scrape_timeout: 2s", "scrape_timeout: 1s".to_string()),
        (
            "evaluation_interval: 2s",
            "evaluation_interval: 1s".to_string(),
        ),
    ] {
        config = prom::substitute_once(&config, from, &to);
    }
    let config_path = prom_dir.join("prometheus.yml");
    std::fs::write(&config_path, &config).expect("write the Prometheus configuration");
    // rule_files names rules.yml beside the configuration.
    std::fs::write(prom_dir.join("rules.yml"), &rules).expect("write the rules");
    let server = Prometheus::start(&prometheus_bin, &config_path, &prom_dir);
    // Prometheus takes its first scrape a few seconds after it starts (it applies new targets
    // every 5 s): the load waits for both targets to be up, so the series cover it. Up means it
    // parsed the OpenMetrics body too.
    let limit = Duration::from_secs(30);
    wait_until(limit, "both Prometheus targets up", || {
        let targets = server.api("targets", None);
        let up: BTreeSet<String> = targets["data"]["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["health"] == "up" && t["lastError"] == "")
            .filter_map(|t| t["labels"]["job"].as_str().map(str::to_string))
            .collect();
        up.contains("gigas-sequencer") && up.contains("gigas-fullnode")
    });

    // A short signed load, then the full node at the sequencer's head.
    let load = Load::start(&seq.url, 2, 18).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let accepted = load.accepted.load(std::sync::atomic::Ordering::Relaxed);
    load.stop(&seq.url).await;
    assert!(accepted > 0, "the load sent no transaction");
    let target = head(&seq.url).await;
    wait_for_block(&node.url, target, Duration::from_secs(30)).await;

    // Both expositions: OpenMetrics text (ending in `# EOF`) that promtool parses.
    let mut scraped = BTreeSet::new();
    let mut lint_report = Vec::new();
    for (who, url) in [("sequencer", &seq_metrics), ("full node", &node_metrics)] {
        let body = blocking_get(url).unwrap_or_else(|| panic!("scrape the {who} at {url}"));
        assert!(
            body.trim_end().ends_with("# EOF"),
            "the {who}'s exposition does not end with `# EOF`"
        );
        let lint = prom::promtool_check_metrics(&promtool, &body);
        println!(
            "promtool check metrics, {who}: {} errors, {} lint problems, {} counter HELP lines promtool 2.x misreads in OpenMetrics",
            lint.errors.len(),
            lint.lints.len(),
            lint.format_artifacts.len()
        );
        for line in &lint.lints {
            println!("  lint ({who}): {line}");
            lint_report.push(format!("{who}: {line}"));
        }
        assert!(
            lint.errors.is_empty(),
            "promtool check metrics found errors in the {who}'s exposition:\n{}",
            lint.errors.join("\n")
        );
        scraped.extend(prom::sample_names(&body));
    }

    // Drift: every metric the dashboard and the rules read is exported.
    let mut referenced: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let exprs = prom::dashboard_exprs(&dashboard);
    assert!(
        exprs.len() >= 20,
        "the dashboard has only {} expressions",
        exprs.len()
    );
    for (panel, expr) in &exprs {
        for name in prom::promql_metrics(expr) {
            referenced
                .entry(name)
                .or_default()
                .insert(format!("dashboard panel \"{panel}\""));
        }
    }
    let rule_exprs = prom::rule_exprs(&rules);
    assert!(
        !rule_exprs.is_empty(),
        "deploy/rules.yml has no expressions"
    );
    for expr in &rule_exprs {
        for name in prom::promql_metrics(expr) {
            referenced
                .entry(name)
                .or_default()
                .insert("deploy/rules.yml".to_string());
        }
    }
    // The cgroup collector exports nothing where the kernel shows no memory cgroup; where it
    // does (cgroup v1's memory hierarchy or v2's memory controller), its names are required.
    let memory_cgroup = Path::new("/sys/fs/cgroup/memory").is_dir()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
    let mut missing = Vec::new();
    for (name, places) in &referenced {
        if scraped.contains(name) {
            continue;
        }
        if name.starts_with("gigas_cgroup_") && !memory_cgroup {
            println!("not exported on this machine (no memory cgroup): {name}");
            continue;
        }
        if let Some((_, why, source, registered)) =
            ABSENT_UNTIL_USED.iter().find(|(absent, ..)| absent == name)
        {
            assert!(
                source.contains(registered),
                "{name} is read by {places:?} and its source no longer registers {registered}"
            );
            println!("not exported in this run (expected): {name}: {why}");
            continue;
        }
        missing.push(format!("{name} (read by {places:?})"));
    }
    assert!(
        missing.is_empty(),
        "metrics read by the dashboard or the rules that neither node exports:\n  {}",
        missing.join("\n  ")
    );

    // Prometheus: the lag and block-time series, the recording rules, and the transactions it
    // saw included.
    for expr in [
        r#"gigas_fullnode_lag_blocks{job="gigas-fullnode"}"#,
        r#"gigas_fullnode_lag_seconds{job="gigas-fullnode"}"#,
        r#"histogram_quantile(0.5, sum by (le) (rate(gigas_sequencer_block_seconds_bucket{job="gigas-sequencer"}[10s])))"#,
        r#"histogram_quantile(0.99, sum by (le) (rate(gigas_sequencer_block_interval_seconds_bucket{job="gigas-sequencer"}[10s])))"#,
        "job:gigas_sequencer_block_seconds:p50_1m",
        "job:gigas_fullnode_lag_blocks:max1m",
        r#"sum(increase(gigas_sequencer_transactions_included_total{job="gigas-sequencer"}[1m])) > 0"#,
    ] {
        let result = server.wait_for_series(expr, limit);
        println!("prometheus: {expr} = {}", result[0]["value"][1]);
    }
    // Every dashboard expression is PromQL that Prometheus accepts.
    for (panel, expr) in &exprs {
        let answer = server.api("query", Some(&grafana_to_promql(expr)));
        assert_eq!(
            answer["status"], "success",
            "dashboard panel \"{panel}\": `{expr}`: {answer}"
        );
    }
    let rules_state = server.api("rules", None);
    let groups = rules_state["data"]["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !groups.is_empty(),
        "Prometheus loaded no rules: {rules_state}"
    );
    for rule in groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
    {
        assert_ne!(
            rule["health"], "err",
            "rule {}: {}",
            rule["name"], rule["lastError"]
        );
    }

    drop(server);
    drop(node);
    drop(seq);
    println!(
        "lint problems to fix in the metrics code: {}; took {:.1} s",
        lint_report.len(),
        started.elapsed().as_secs_f64()
    );
}

//! The real `gigas-devnet` binary, end to end on loopback: a short run prints every summary
//! field, writes the report, says whether the memory limit was applied, and leaves no process
//! and no temporary directory behind; a Ctrl-C in the middle of the load stops everything too.
//!
//! Each run gets its own TMPDIR (where the devnet puts its temporary directory) and its own
//! genesis of 10,000 accounts, so that "nothing left behind" is checked on directories only
//! this test uses. Prometheus runs when it is installed; the summary says either way.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// Two devnets at once would share the machine's two cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn devnet(tmp: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gigas-devnet"));
    command
        .args(["--rate", "200", "--accounts", "10000", "--no-profile"])
        .arg("--out")
        .arg(out.join("report"))
        .arg("--genesis-dir")
        .arg(out.join("genesis"))
        .args(extra)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null());
    command
}

/// Every process whose command line mentions `dir` (the run's temporary directory is under
/// it: the nodes' data directories, Prometheus's configuration).
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

fn assert_clean(tmp: &Path) {
    let left = processes_under(tmp);
    assert!(left.is_empty(), "processes left behind: {left:#?}");
    let entries: Vec<_> = std::fs::read_dir(tmp)
        .expect("TMPDIR")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        entries.is_empty(),
        "temporary files left behind: {entries:?}"
    );
}

#[test]
fn a_short_run_summarises_reports_and_cleans_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let output = devnet(tmp.path(), out.path(), &["--duration", "8"])
        .output()
        .expect("running gigas-devnet");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "gigas-devnet failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let summary = stdout
        .split("gigas-devnet summary")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    let field = |name: &str| -> String {
        summary
            .lines()
            .find_map(|l| {
                let (key, value) = l.split_once(':')?;
                (key.trim() == name).then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no '{name}' in the summary:\n{summary}"))
    };
    assert!(
        field("throughput").starts_with("offered 200 tx/s"),
        "{summary}"
    );
    let latency = field("latency");
    assert!(
        latency.contains("p50") && latency.contains("p90") && latency.contains("p99"),
        "{latency}"
    );
    let lag = field("full-node lag");
    assert!(
        lag.contains("median") && lag.contains("p99") && lag.contains("max"),
        "{lag}"
    );
    // The lag counts from the node's first sample at the head; the catch-up before it apart.
    assert!(
        lag.contains("from the node's first sample at the head")
            || lag.contains("the node never reached the head"),
        "{lag}"
    );
    assert!(
        field("diff bytes").contains("B per transaction"),
        "{summary}"
    );
    assert!(field("catch-up").contains("reached block"), "{summary}");
    assert!(
        field("state").contains("equal the sequencer's"),
        "{summary}"
    );
    for process in ["sequencer", "full node", "load generator"] {
        let line = field(process);
        assert!(
            line.contains("RSS") && line.contains("anon") && line.contains("file"),
            "{process}: {line}"
        );
    }
    // The limit is either applied (with its cgroup) or plainly not, with the reason.
    let limit = field("memory limit");
    assert!(
        limit.starts_with("APPLIED to the full node: 8.0 GiB in cgroup v")
            || (limit.starts_with("NOT APPLIED") && limit.len() > "NOT APPLIED: ".len() + 20),
        "{limit}"
    );
    if limit.starts_with("APPLIED") {
        assert!(field("full node").contains("cgroup"), "{summary}");
    }
    assert!(
        !field("prometheus").is_empty(),
        "prometheus line: {summary}"
    );
    assert!(field("profile").contains("--no-profile"), "{summary}");

    let report = out.path().join("report");
    for file in [
        "report.md",
        "report.json",
        "tps.svg",
        "latency.svg",
        "lag.svg",
        "memory.svg",
        "load/load.md",
        "load/load.json",
        "logs/sequencer.log",
        "logs/fullnode.log",
    ] {
        assert!(report.join(file).is_file(), "{file} missing in {report:?}");
    }
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    let config_at = md.find("## Configuration").expect("configuration section");
    let results_at = md.find("## Results").expect("results section");
    assert!(config_at < results_at, "the configuration comes first");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("report.json")).unwrap())
            .unwrap();
    let results = &json["results"];
    assert!(results["included"].as_u64().unwrap_or(0) > 0, "{results}");
    assert!(json["samples"].as_array().is_some_and(|s| s.len() >= 5));
    assert!(
        results["lag_catch_up_seconds"].is_f64() || results["lag_catch_up_seconds"].is_null(),
        "{results}"
    );
    assert!(
        json["samples"][0]["lag_blocks"].is_u64(),
        "{}",
        json["samples"][0]
    );

    assert_clean(tmp.path());
}

#[test]
fn ctrl_c_during_the_load_stops_everything() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut child = devnet(
        tmp.path(),
        out.path(),
        &["--duration", "60", "--no-prometheus"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("starting gigas-devnet");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Interrupt once the load runs (both nodes are up by then).
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120).saturating_sub(started.elapsed()))
            .unwrap_or_else(|_| panic!("the load never started:\n{}", seen.join("\n")));
        let load = line.starts_with("load:");
        seen.push(line);
        if load {
            break;
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    assert_eq!(status.code(), Some(130), "{status}; stderr:\n{stderr}");
    assert!(
        stderr.contains("interrupted") && stderr.contains("removed"),
        "{stderr}"
    );
    assert_clean(tmp.path());
}

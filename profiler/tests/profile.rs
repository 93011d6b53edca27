//! The profiler's arithmetic adds up, and its command fails loudly on a block that does not
//! match its header.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gigas_primitives::ChainSpec;
use gigas_profiler::replay::Workload;
use gigas_profiler::report::Report;

mod common;
use common::{configuration, copy_blocks};

/// Copies a few shipped blocks into a temporary directory: one pre-Byzantium transfer, one
/// Byzantium block, one busy Cancun block.
fn small_set(to: &Path) {
    copy_blocks(to, &["46147", "4370000", "19426587"]);
}

#[test]
fn rows_add_up_and_counts_are_consistent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    small_set(tmp.path());
    let workload = Workload::load(tmp.path(), &ChainSpec::mainnet(), |_, _| {}).expect("loads");
    let checks = workload
        .check(|_, _| {})
        .expect("blocks match their headers");
    let rounds = workload
        .measure(2, Duration::from_micros(2), |_, _| {})
        .expect("measures");
    let report = Report::build(
        configuration(&workload, 2),
        &workload,
        &checks,
        &rounds,
        None,
    );

    // Counts are exact and deterministic: the timed rounds carry the counting pass's counts
    // (their probe does not count), and counting again gives the same.
    let mut recounted = [0u64; 256];
    for block in workload.count().expect("counts again") {
        for (total, n) in recounted.iter_mut().zip(block.opcodes) {
            *total += n;
        }
    }
    assert_eq!(rounds[0].probed.counts, recounted);
    assert_eq!(rounds[1].probed.counts, recounted);
    let opcode_total: u64 = report
        .rows
        .iter()
        .filter(|r| r.opcode.is_some())
        .map(|r| r.count)
        .sum();
    assert_eq!(opcode_total, rounds[0].probed.counts.iter().sum::<u64>());
    assert!(
        opcode_total > 10_000,
        "the Cancun block runs plenty of code"
    );

    // Every sample the rounds took outside the harness is in exactly one row, and samples
    // land only on opcodes that ran: a sampler that read a stale or wrong activity, or a
    // report that dropped or double-counted one, fails here. (How many samples a short run
    // gets depends on the machine's load; the arithmetic of time and shares is checked on a
    // synthetic histogram in `report_arithmetic_is_exact`.)
    let idle = gigas_evm::probe::Phase::Idle as usize;
    let taken: u64 = rounds
        .iter()
        .flat_map(|r| r.probed.histogram.samples.iter().enumerate())
        .filter(|(activity, _)| *activity != idle)
        .map(|(_, samples)| samples)
        .sum();
    let in_rows: u64 = report.rows.iter().map(|r| r.samples).sum();
    // (No lower bound on the count: on a loaded machine a two-round run can get none.)
    assert_eq!(in_rows, taken, "samples in the table vs samples taken");
    for row in report.rows.iter().filter(|r| r.opcode.is_some()) {
        assert!(
            row.count > 0 || row.samples == 0,
            "{} never ran but got {} samples",
            row.name,
            row.samples
        );
    }
    assert!(report.rows.windows(2).all(|w| w[0].time_s >= w[1].time_s));

    // Every block is reported with its header's gas and the replay's.
    assert_eq!(report.blocks.len(), 3);
    for block in &report.blocks {
        assert_eq!(block.header_gas_used, block.computed_gas_used);
    }
    assert!(
        !report.blocks[0].receipts_root_and_bloom_checked,
        "46147 is pre-Byzantium"
    );
    assert!(report.blocks[1].receipts_root_and_bloom_checked);
}

/// Report arithmetic on a histogram and timings chosen by hand: every figure is exact.
#[test]
fn report_arithmetic_is_exact() {
    use gigas_evm::probe::Phase;
    use gigas_profiler::replay::{PassTiming, ProbedPass, Round};
    use gigas_profiler::sampler::Histogram;
    use std::time::Duration;

    let tmp = tempfile::tempdir().expect("tempdir");
    small_set(tmp.path());
    let workload = Workload::load(tmp.path(), &ChainSpec::mainnet(), |_, _| {}).expect("loads");
    let checks = workload.check(|_, _| {}).expect("blocks match");
    let per_block = |ms: u64| PassTiming {
        per_block: vec![Duration::from_millis(ms); 3],
        gas: vec![0; 3],
    };
    let mut histogram = Histogram::default();
    // 60 ms in PUSH1 (stack), 30 ms in SLOAD (host), 10 ms validating transactions, and idle
    // time that must not count.
    histogram.nanos[0x60] = 60_000_000;
    histogram.samples[0x60] = 600;
    histogram.nanos[0x54] = 30_000_000;
    histogram.samples[0x54] = 300;
    histogram.nanos[Phase::Validation as usize] = 10_000_000;
    histogram.samples[Phase::Validation as usize] = 100;
    histogram.nanos[Phase::Idle as usize] = 99_000_000;
    histogram.samples[Phase::Idle as usize] = 990;
    let mut counts = [0u64; 256];
    counts[0x60] = 1_000;
    counts[0x54] = 100;
    let round = Round {
        plain: per_block(32),
        probed: ProbedPass {
            timing: per_block(35),
            histogram,
            counts,
            precompile_calls: 0,
            stacks: None,
        },
    };
    let report = Report::build(
        configuration(&workload, 1),
        &workload,
        &checks,
        &[round],
        None,
    );
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert_eq!(report.rows.len(), 3);
    assert_eq!(report.rows[0].name, "PUSH1");
    assert!(close(report.rows[0].time_s, 0.060) && close(report.rows[0].share, 0.6));
    assert!(close(report.rows[0].avg_ns.expect("count"), 60_000.0));
    assert!(close(report.rows[1].cumulative_share, 0.9));
    assert!(close(report.rows[2].cumulative_share, 1.0));
    assert!(close(report.attributed_seconds_per_pass, 0.100));
    // Plain pass 3 x 32 ms = 96 ms against 100 ms attributed; probed 105 ms.
    assert!(close(
        report.attribution_add_up_error.median,
        0.100 / 0.096 - 1.0
    ));
    assert!(close(
        report.overhead_ratio_probed_over_plain.median,
        105.0 / 96.0
    ));
    // Host (SLOAD) 30% plus outside opcodes 10%: the JIT ceiling is 1 / 0.4.
    assert!(close(report.jit_ceiling_speedup, 2.5));
    assert!(close(report.talk_comparison.measured_stack_share, 0.6));
    assert_eq!(report.samples, 1_000);
}

#[test]
fn command_writes_every_report_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let blocks = tmp.path().join("blocks");
    small_set(&blocks);
    let out = tmp.path().join("out");
    let status = Command::new(env!("CARGO_BIN_EXE_gigas-profiler"))
        .args(["--rounds", "1", "--calibration-runs", "1", "--blocks"])
        .arg(&blocks)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("runs");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    for file in [
        "profile.json",
        "opcodes.csv",
        "report.md",
        "top30.svg",
        "categories.svg",
        "calls.md",
        "calls.json",
        "stacks.folded",
        "flame.svg",
        "profile.pb.gz",
    ] {
        let path = out.join(file);
        assert!(path.is_file(), "{} missing", path.display());
        assert!(
            fs::metadata(&path).expect("stat").len() > 100,
            "{file} is empty"
        );
    }
    let json: serde_json::Value =
        serde_json::from_slice(&fs::read(out.join("profile.json")).expect("read")).expect("json");
    assert!(
        json["overhead_ratio_probed_over_plain"]["median"]
            .as_f64()
            .expect("ratio")
            > 0.0
    );
    assert!(json["attribution_add_up_error"]["median"].is_number());
    let blocks = json["blocks"].as_array().expect("blocks");
    assert_eq!(blocks.len(), 3);
    for b in blocks {
        assert_eq!(b["header_gas_used"], b["computed_gas_used"]);
    }
    let csv = fs::read_to_string(out.join("opcodes.csv")).expect("csv");
    assert!(csv.starts_with("rank,name,opcode,category,count"));
    let svg = fs::read_to_string(out.join("top30.svg")).expect("svg");
    let top_opcode = json["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| !r["opcode"].is_null())
        .and_then(|r| r["name"].as_str())
        .expect("an opcode row");
    assert!(
        svg.contains("<svg") && svg.contains(top_opcode),
        "{top_opcode} missing from the chart"
    );
    // The opcode names sit below the axis, not over the bars: each rotated label starts at
    // or below the bottom of the bars and runs downwards from there.
    let attr = |element: &str, name: &str| -> Option<f64> {
        let start = element.find(&format!(" {name}=\""))? + name.len() + 3;
        element[start..].split('"').next()?.parse().ok()
    };
    let bars_bottom = svg
        .split("<rect")
        .skip(1)
        .filter(|r| r.contains("fill=\"#0000FF\""))
        .filter_map(|r| Some(attr(r, "y")? + attr(r, "height")?))
        .fold(f64::MIN, f64::max);
    let names: Vec<&str> = json["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| !r["opcode"].is_null())
        .filter_map(|r| r["name"].as_str())
        .collect();
    let labels: Vec<&str> = svg
        .split("<text")
        .skip(1)
        .filter(|t| {
            let text = t
                .split('>')
                .nth(1)
                .unwrap_or("")
                .split('<')
                .next()
                .unwrap_or("");
            names.contains(&text.trim())
        })
        .collect();
    assert!(
        bars_bottom > 0.0 && labels.len() == names.len().min(30),
        "{} opcode labels for {} opcodes",
        labels.len(),
        names.len()
    );
    for label in &labels {
        let y = attr(label, "y").expect("label y");
        assert!(
            y >= bars_bottom && label.contains("text-anchor=\"start\""),
            "a label at y {y} over bars ending at {bars_bottom}: {label}"
        );
    }
}

#[test]
fn command_names_a_block_that_does_not_match() {
    let tmp = tempfile::tempdir().expect("tempdir");
    small_set(tmp.path());
    // Make block 4370000's header claim one more unit of gas than it used.
    let file = tmp.path().join("4370000").join("block.json.zst");
    let json = zstd::decode_all(fs::read(&file).expect("read").as_slice()).expect("decode");
    let mut value: serde_json::Value = serde_json::from_slice(&json).expect("json");
    let gas = u64::from_str_radix(
        value["gasUsed"]
            .as_str()
            .expect("hex")
            .trim_start_matches("0x"),
        16,
    )
    .expect("number");
    value["gasUsed"] = serde_json::Value::String(format!("0x{:x}", gas + 1));
    fs::write(
        &file,
        zstd::encode_all(value.to_string().as_bytes(), 3).expect("compress"),
    )
    .expect("write");

    let output = Command::new(env!("CARGO_BIN_EXE_gigas-profiler"))
        .args(["--check-only", "--blocks"])
        .arg(tmp.path())
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("block 4370000"), "{stderr}");
    assert!(stderr.contains("gasUsed"), "{stderr}");
}

#[test]
fn missing_block_directory_is_explained() {
    let output = Command::new(env!("CARGO_BIN_EXE_gigas-profiler"))
        .args(["--check-only", "--blocks", "/nonexistent/gigas-blocks"])
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/gigas-blocks"), "{stderr}");
}

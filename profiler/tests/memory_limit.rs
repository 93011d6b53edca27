//! `gigas-profiler --memory-limit` on this machine's real cgroups: the process runs in
//! `gigas-profiler-PID` and the cgroup is gone when it exits; where no cgroup can be written
//! it stops with the how-to-fix message, or goes on with `--memory-limit-optional`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Two shipped mainnet blocks, linked into a directory of their own (checking them is fast).
fn two_blocks() -> tempfile::TempDir {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/mainnet");
    let dir = tempfile::tempdir().unwrap();
    for block in ["116525", "1150000"] {
        let from = shipped.join(block);
        assert!(
            from.is_dir(),
            "{} is missing: clone the project with shared/ beside it",
            from.display()
        );
        std::os::unix::fs::symlink(&from, dir.path().join(block)).unwrap();
    }
    dir
}

fn profiler(blocks: &Path, extra: &[&str], root: Option<&Path>) -> (Output, u32) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gigas-profiler"));
    cmd.args(["--check-only", "--blocks"])
        .arg(blocks)
        .args(extra)
        .env("RUST_LOG", "info");
    match root {
        Some(root) => cmd.env(gigas_cgroup::ROOT_ENV, root),
        None => cmd.env_remove(gigas_cgroup::ROOT_ENV),
    };
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run gigas-profiler");
    let pid = child.id();
    (
        child.wait_with_output().expect("wait for the profiler"),
        pid,
    )
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn runs_in_its_cgroup_and_removes_it() {
    let blocks = two_blocks();
    let (out, pid) = profiler(blocks.path(), &["--memory-limit", "1GiB"], None);
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("memory limit 1 GiB (1073741824 bytes) in cgroup v"))
        .unwrap_or_else(|| panic!("no memory-limit line: {}", describe(&out)));
    assert!(
        line.contains(&format!("process {pid} entered it")),
        "{line}"
    );
    let path: PathBuf = line
        .split_once(" in cgroup v")
        .and_then(|(_, r)| r.split_once(' '))
        .map(|(_, r)| r.split(',').next().unwrap_or(r).into())
        .unwrap_or_else(|| panic!("{line}"));
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some(format!("gigas-profiler-{pid}").as_str()),
        "{line}"
    );
    assert!(
        !stderr.contains("not listed in its cgroup.procs"),
        "{stderr}"
    );
    assert!(stderr.contains("removing cgroup"), "{stderr}");
    assert!(!path.exists(), "{} is still there", path.display());
    assert!(String::from_utf8_lossy(&out.stdout).contains("checked      : 2 blocks"));
}

#[test]
fn without_a_writable_cgroup_it_stops_or_goes_on_when_told() {
    let blocks = two_blocks();
    let nowhere = tempfile::tempdir().unwrap();
    let (out, _) = profiler(
        blocks.path(),
        &["--memory-limit", "1GiB"],
        Some(nowhere.path()),
    );
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for part in ["no cgroup memory controller", "--memory-limit-optional"] {
        assert!(stderr.contains(part), "{part} missing: {stderr}");
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains("checked"));

    let (out, _) = profiler(
        blocks.path(),
        &["--memory-limit", "1GiB", "--memory-limit-optional"],
        Some(nowhere.path()),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NO MEMORY LIMIT"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("checked      : 2 blocks"));
}

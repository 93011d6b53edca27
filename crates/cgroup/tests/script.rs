//! `scripts/with-memory-limit.sh` on this machine's real cgroups, and its error path on a
//! fake root.

mod common;

use common::describe;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/with-memory-limit.sh")
}

fn run(args: &[&str], root: Option<&Path>) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script()).args(args);
    match root {
        Some(root) => cmd.env(gigas_cgroup::ROOT_ENV, root),
        None => cmd.env_remove(gigas_cgroup::ROOT_ENV),
    };
    cmd.output().expect("run bash (install bash)")
}

/// The cgroup directory the script announced on stderr.
fn announced_dir(out: &Output) -> PathBuf {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("memory limit"))
        .unwrap_or_else(|| panic!("no announcement: {}", describe(out)));
    let after = line
        .split_once(" in cgroup v")
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("{line}"));
    // "1 /sys/fs/cgroup/.../gigas-sh-PID, swap held ..."
    let path = after.split_once(' ').unwrap().1.split(',').next().unwrap();
    PathBuf::from(path)
}

#[test]
fn runs_the_command_in_a_new_cgroup_and_removes_it() {
    let out = run(&["64M", "--", "sh", "-c", "cat /proc/self/cgroup"], None);
    assert!(out.status.success(), "{}", describe(&out));
    let dir = announced_dir(&out);
    let name = dir.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("gigas-sh-"), "{name}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.ends_with(&format!("/{name}"))),
        "the command did not run in {name}:\n{stdout}"
    );
    assert!(!dir.exists(), "{} is still there", dir.display());
}

#[test]
fn passes_on_the_exit_status_and_reports_an_oom_kill() {
    let out = run(&["64MiB", "--", "sh", "-c", "exit 7"], None);
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    assert!(!announced_dir(&out).exists());

    // `tail` keeps everything after the last newline: /dev/zero has none.
    let out = run(
        &[
            "64M",
            "--",
            "sh",
            "-c",
            "head -c 256M /dev/zero | tail -c 1 >/dev/null",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // tail -c 1 only keeps one byte; the heap is `head`'s and tail's buffers: fits.
    assert!(out.status.success(), "{}", describe(&out));
    assert!(!stderr.contains("OOM-killed"), "{stderr}");

    let out = run(
        &[
            "64M",
            "--",
            "sh",
            "-c",
            "head -c 256M /dev/zero | tail >/dev/null",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(137), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OOM-killed"), "{stderr}");
    assert!(!announced_dir(&out).exists());
}

#[test]
fn forwards_term_and_cleans_up() {
    let child = Command::new("bash")
        .arg(script())
        .args(["64M", "--", "sleep", "30"])
        .env_remove(gigas_cgroup::ROOT_ENV)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the command runs in its cgroup: a process whose parent is the script.
    let start = Instant::now();
    let script_pid = child.id();
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{script_pid}/task/{script_pid}/children"))
                .unwrap_or_default();
        let running_sleep = children.split_whitespace().any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        });
        if running_sleep {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "sleep never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(script_pid as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGTERM),
        "{}",
        describe(&out)
    );
    assert!(!announced_dir(&out).exists());
}

#[test]
fn says_why_and_how_to_fix_when_no_cgroup_can_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["64M", "--", "true"], Some(dir.path()));
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for part in ["no cgroup memory controller", "run as root", "systemd-run"] {
        assert!(stderr.contains(part), "{part} missing: {stderr}");
    }

    // cgroup v2 without the memory controller.
    std::fs::write(dir.path().join("cgroup.controllers"), "cpu pids\n").unwrap();
    let out = run(&["64M", "--", "true"], Some(dir.path()));
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lacks it"));

    // A v1-shaped directory that is not a cgroup: no file is written into it.
    let fake = tempfile::tempdir().unwrap();
    std::fs::create_dir(fake.path().join("memory")).unwrap();
    let out = run(&["64M", "--", "true"], Some(fake.path()));
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a memory cgroup"));
    let left: Vec<_> = std::fs::read_dir(fake.path().join("memory"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // Bad sizes and usage.
    let out = run(&["1.5G", "--", "true"], None);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("512MiB"));
    let out = run(&["64M", "true"], None);
    assert_eq!(out.status.code(), Some(125));
    let out = run(&["--help"], None);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("Usage: scripts/with-memory-limit.sh SIZE -- COMMAND"));
}

#[test]
fn removes_what_a_killed_run_left() {
    // Where the script makes its cgroups (beside its own in cgroup v2 when that holds
    // processes): learnt from a first run.
    let first = run(&["64M", "--", "true"], None);
    assert!(first.status.success(), "{}", describe(&first));
    let parent = announced_dir(&first).parent().unwrap().to_path_buf();
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let stale = parent.join(format!("gigas-killed-{dead_pid}"));
    std::fs::create_dir(&stale).unwrap_or_else(|e| panic!("mkdir {}: {e}", stale.display()));
    let out = run(&["64M", "--", "true"], None);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        !stale.exists(),
        "{} was not swept: {}",
        stale.display(),
        describe(&out)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("removed the stale cgroup"));
}

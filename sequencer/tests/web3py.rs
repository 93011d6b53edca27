//! web3.py, from PyPI and unchanged, drives a dev sequencer: every accepted transaction type,
//! a contract deployed and called, receipts, balances, blocks, logs, estimates, fees,
//! rejections, and `newHeads` / `logs` subscriptions over WebSocket.
//!
//! The Python side is `tests/web3py/test_sequencer.py`. It runs in a virtual environment
//! under the target directory (`web3-venv`), created by the first run with `python3 -m venv`
//! and `pip install` and reused while its marker names the same pinned packages. A fresh
//! Debian or Ubuntu machine needs `python3-venv` for that, which `scripts/prerequisites.sh` installs.

mod common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::NodeProcess;

/// What the environment holds; a venv whose marker differs is rebuilt.
const PACKAGES: &[&str] = &["web3==8.0.0", "eth-account==0.14.0"];
/// Written last, so that a venv interrupted while installing is never taken as ready.
const MARKER: &str = "gigas-ready";
/// The script's own waits are 30 s each; this only stops a hung interpreter.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(240);

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn run(command: &mut Command, what: &str) -> Result<String, String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{what} failed ({}):\n{text}", out.status))
    }
}

fn is_ready(venv: &Path) -> bool {
    let marker = std::fs::read_to_string(venv.join(MARKER)).unwrap_or_default();
    marker.trim() == PACKAGES.join(" ")
        && run(
            Command::new(venv_python(venv)).args(["-c", "import web3, eth_account"]),
            "import web3",
        )
        .is_ok()
}

/// An exclusive `flock` on `path`, held until the file is dropped. The kernel releases it
/// if the holder dies, so a killed test run never leaves the venv locked.
fn lock(path: &Path) -> File {
    let file = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        rc,
        0,
        "flock {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    file
}

/// The venv's python, creating the venv first if needed.
fn web3_python() -> PathBuf {
    let target = target_dir();
    std::fs::create_dir_all(&target).unwrap_or_else(|e| panic!("create {}: {e}", target.display()));
    let venv = target.join("web3-venv");
    // Two test binaries (or two checkouts sharing a target dir) must not build it at once.
    let _guard = lock(&target.join("web3-venv.lock"));
    if is_ready(&venv) {
        return venv_python(&venv);
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .unwrap_or_else(|e| panic!("remove the stale {}: {e}", venv.display()));
    }
    if let Err(e) = run(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "python3 -m venv",
    ) {
        panic!(
            "cannot create the web3.py virtual environment at {}: {e}\n\
             The suite's prerequisites install the venv module: scripts/prerequisites.sh tests",
            venv.display()
        );
    }
    if let Err(e) = run(
        Command::new(venv_python(&venv))
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
            .args(PACKAGES),
        "pip install",
    ) {
        panic!(
            "cannot install {} into {} (PyPI must be reachable): {e}",
            PACKAGES.join(" "),
            venv.display()
        );
    }
    std::fs::write(venv.join(MARKER), PACKAGES.join(" "))
        .unwrap_or_else(|e| panic!("write {}: {e}", venv.join(MARKER).display()));
    venv_python(&venv)
}

#[test]
fn web3py_drives_a_dev_sequencer() {
    let python = web3_python();
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "100ms"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web3py/test_sequencer.py");
    let output_path = dir.path().join("web3py.out");
    let output = File::create(&output_path).unwrap();
    let mut child = Command::new(&python)
        // -B: no __pycache__ written next to the script in the source tree.
        .arg("-B")
        .arg(&script)
        .arg(&node.url)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::from(output.try_clone().unwrap()))
        .stderr(Stdio::from(output))
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", python.display()));
    let deadline = Instant::now() + SCRIPT_DEADLINE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Err(e) => panic!("waiting for python: {e}"),
        }
    };
    let text = std::fs::read_to_string(&output_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => println!("{text}"),
        Some(s) => panic!(
            "the web3.py script failed ({s}); its output:\n{text}\nthe node's log:\n{}",
            node.log_text()
        ),
        None => panic!(
            "the web3.py script ran over {SCRIPT_DEADLINE:?} and was killed; its output:\n{text}"
        ),
    }
}

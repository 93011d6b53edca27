//! Real memory cgroups on this machine: a heap past the limit is OOM-killed, a file read
//! through the page cache is held to the limit, `--memory-limit` places and removes, and the
//! errors say how to fix. No skipping: where no cgroup can be written these fail with the
//! crate's own message.
//!
//! The processes under a limit are this test binary run again as a child (`CHILD_ENV` names
//! its role), so that nothing but the child is limited.

mod common;

use common::describe;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use gigas_cgroup::{
    evict_file_pages, CgroupError, CgroupRoots, MemoryCgroup, MemoryCollector, MemoryLimitArgs,
    MemoryStat,
};

const CHILD_ENV: &str = "GIGAS_CGROUP_TEST_CHILD";
const MIB: u64 = 1 << 20;
const LIMIT: u64 = 64 * MIB;

fn created(name: &str) -> MemoryCgroup {
    MemoryCgroup::create(name, LIMIT).unwrap_or_else(|e| {
        panic!("these tests need a writable memory cgroup (cgroup v1 or v2), as root: {e}")
    })
}

/// This binary again, running only `child_entry` in role `role`.
fn child(role: &str) -> Command {
    child_at(
        &std::env::current_exe().expect("the test binary's path"),
        role,
    )
}

fn child_at(exe: &Path, role: &str) -> Command {
    let mut c = Command::new(exe);
    c.args([
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(CHILD_ENV, role)
    .env_remove(gigas_cgroup::ROOT_ENV);
    c
}

/// Starts `cmd` waiting on stdin, places it in `cgroup`, lets it go, and waits for it.
fn run_in(cgroup: &mut MemoryCgroup, mut cmd: Command) -> Output {
    let mut proc = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    cgroup.add_pid(proc.id()).unwrap_or_else(|e| panic!("{e}"));
    proc.stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("start the child");
    proc.wait_with_output().expect("wait for the child")
}

/// The lines the child printed as `CHILD <key> <value>`.
fn child_value(out: &Output, key: &str) -> Option<String> {
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        l.strip_prefix("CHILD ")
            .and_then(|l| l.strip_prefix(key))
            .and_then(|l| l.strip_prefix(' '))
            .map(str::to_string)
    })
}

fn swap_configured() -> bool {
    fs::read_to_string("/proc/swaps")
        .map(|s| s.lines().count() > 1)
        .unwrap_or(false)
}

/// The child's side. Returns at once in the normal test run.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    let wait_for_go = || {
        let mut line = [0u8; 3];
        std::io::stdin().read_exact(&mut line).expect("go");
    };
    match role.as_str() {
        "alloc" => {
            wait_for_go();
            let mib: usize = std::env::var("ALLOC_MIB").unwrap().parse().unwrap();
            let mut heap = vec![0u8; mib << 20];
            // Touch every page: an untouched page of a zeroed allocation costs nothing.
            for i in (0..heap.len()).step_by(4096) {
                heap[i] = 1;
            }
            std::hint::black_box(&heap);
            println!("CHILD allocated {mib}");
        }
        "read" | "mmap" => {
            wait_for_go();
            let path = PathBuf::from(std::env::var("READ_FILE").unwrap());
            let total = if role == "read" {
                read_file(&path)
            } else {
                read_mapped(&path)
            };
            println!("CHILD read {total}");
        }
        "apply" => {
            let args = MemoryLimitArgs {
                memory_limit: Some(LIMIT),
                memory_limit_optional: false,
            };
            let guard = args.apply("test-apply").unwrap_or_else(|e| panic!("{e}"));
            let guard = guard.expect("a limit was asked for");
            println!("CHILD path {}", guard.path().display());
            println!("CHILD inside {}", own_cgroup_line());
            let mut registry = prometheus_client::registry::Registry::default();
            MemoryCollector::register(&mut registry);
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                println!("CHILD metric {line}");
            }
            drop(guard);
            println!("CHILD after {}", own_cgroup_line());
        }
        "unprivileged" => {
            let e = MemoryCgroup::create("test-unprivileged", LIMIT).unwrap_err();
            println!(
                "CHILD kind {}",
                match e {
                    CgroupError::PermissionDenied { .. } => "PermissionDenied",
                    _ => "other",
                }
            );
            println!("CHILD message {e}");
            let optional = MemoryLimitArgs {
                memory_limit: Some(LIMIT),
                memory_limit_optional: true,
            };
            let applied = optional.apply("test-unprivileged");
            println!("CHILD optional {}", matches!(applied, Ok(None)));
        }
        other => panic!("unknown child role {other}"),
    }
}

fn read_file(path: &Path) -> u64 {
    let mut f = fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return total;
        }
        total += n as u64;
    }
}

/// Reads the file through a shared read-only map without readahead, as MDBX reads its data
/// file.
fn read_mapped(path: &Path) -> u64 {
    use std::os::unix::io::AsRawFd;
    let f = fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: a fresh read-only shared mapping of a file nobody truncates during the test,
    // unmapped below; only read through the slice.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        // No readahead, as MDBX opens (reth's no_rdahead): every first touch of a page is a
        // major fault, counted in the cgroup.
        assert_eq!(libc::madvise(p, len, libc::MADV_RANDOM), 0);
        let bytes = std::slice::from_raw_parts(p as *const u8, len);
        let mut sum = 0u64;
        for i in (0..len).step_by(4096) {
            sum = sum.wrapping_add(u64::from(bytes[i]));
        }
        std::hint::black_box(sum);
        libc::munmap(p, len);
    }
    len as u64
}

fn own_cgroup_line() -> String {
    let text = fs::read_to_string("/proc/self/cgroup").unwrap();
    text.lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "memory"))
        })
        .or_else(|| text.lines().find(|l| l.starts_with("0::")))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_heap_past_the_limit_is_oom_killed() {
    let mut cgroup = created("test-oom");
    assert_eq!(cgroup.limit(), LIMIT);
    let mut cmd = child("alloc");
    cmd.env("ALLOC_MIB", "256");
    let out = run_in(&mut cgroup, cmd);
    let stat = cgroup.stat().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("heap of 256 MiB under 64 MiB: {:?}; {stat:?}", out.status);
    if cgroup.swap_held() || !swap_configured() {
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "{}",
            describe(&out)
        );
        assert!(child_value(&out, "allocated").is_none());
        if let Some(kills) = stat.oom_kills {
            assert!(kills >= 1, "{stat:?}");
        }
        // The kernel counts the kill; failcnt / memory.events "max" is not asserted: v1 on
        // recent kernels (6.18 here) leaves memory.failcnt at 0 even at the limit.
        assert_eq!(stat.peak, Some(LIMIT), "{stat:?}");
    } else {
        // Swap not held to the limit: the kernel may swap instead of killing.
        assert!(
            out.status.signal() == Some(libc::SIGKILL) || out.status.success(),
            "{}",
            describe(&out)
        );
    }
    assert!(stat.peak.unwrap_or(0) <= LIMIT, "{stat:?}");
    assert_eq!(stat.limit, Some(LIMIT));
    let path = cgroup.path().to_path_buf();
    cgroup.remove().unwrap_or_else(|e| panic!("{e}"));
    assert!(!path.exists(), "{} is still there", path.display());
}

#[test]
fn a_heap_within_the_limit_runs() {
    let mut cgroup = created("test-fits");
    let mut cmd = child("alloc");
    cmd.env("ALLOC_MIB", "16");
    let out = run_in(&mut cgroup, cmd);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(child_value(&out, "allocated").as_deref(), Some("16"));
    let stat = cgroup.stat().unwrap();
    assert_eq!(stat.oom_kills.unwrap_or(0), 0, "{stat:?}");
    assert!(stat.peak.unwrap_or(u64::MAX) >= 16 * MIB, "{stat:?}");
}

/// A file three times the limit, read twice (read(2), then a shared map as MDBX uses):
/// each run completes, and the page cache is charged and held to the limit.
#[test]
fn the_page_cache_is_held_to_the_limit() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary directory");
    let file = dir.path().join("big");
    {
        let mut f = fs::File::create(&file).unwrap();
        let block: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
        for _ in 0..3 * LIMIT / MIB {
            f.write_all(&block).unwrap();
        }
    }
    for role in ["read", "mmap"] {
        // Written (and charged) by this process: evicted so the child's reads charge it.
        let evicted = evict_file_pages(&file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(evicted.bytes, 3 * LIMIT);
        let mut cgroup = created(&format!("test-{role}"));
        let mut cmd = child(role);
        cmd.env("READ_FILE", &file);
        let out = run_in(&mut cgroup, cmd);
        let stat = cgroup.stat().unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "{role} of a {} MiB file under 64 MiB: {stat:?}",
            3 * LIMIT / MIB
        );
        assert!(out.status.success(), "{}", describe(&out));
        assert_eq!(
            child_value(&out, "read"),
            Some((3 * LIMIT).to_string()),
            "{}",
            describe(&out)
        );
        let peak = stat.peak.expect("peak usage");
        assert!(peak <= LIMIT, "{stat:?}");
        // Pages stay charged after the reader exits: most of the limit is page cache.
        assert!(
            stat.file >= LIMIT / 4,
            "file pages not charged here: {stat:?}"
        );
        // Three times the limit went through: the cache filled up to the limit and was
        // reclaimed rather than growing past it or killing the reader.
        assert!(
            peak >= LIMIT * 3 / 4,
            "the reads never came near the limit: {stat:?}"
        );
        assert_eq!(stat.oom_kills.unwrap_or(0), 0, "{stat:?}");
        if role == "mmap" {
            assert!(stat.major_faults >= 3 * LIMIT / 4096 / 2, "{stat:?}");
        }
        cgroup.remove().unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn memory_limit_args_place_the_process_and_clean_up() {
    let out = child("apply").output().expect("run the child");
    assert!(out.status.success(), "{}", describe(&out));
    let path = PathBuf::from(child_value(&out, "path").expect("path"));
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("gigas-test-apply-"), "{name}");
    let inside = child_value(&out, "inside").unwrap();
    assert!(inside.ends_with(&format!("/{name}")), "{inside}");
    let after = child_value(&out, "after").unwrap();
    assert!(!after.contains(&name), "{after}");
    assert!(!path.exists(), "{} is still there", path.display());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let metric = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("CHILD metric {prefix} ")))
            .map(str::to_string)
    };
    assert_eq!(
        metric("gigas_memory_limit_bytes"),
        Some(LIMIT.to_string()),
        "{stdout}"
    );
    for name in [
        "gigas_cgroup_memory_usage_bytes",
        "gigas_cgroup_memory_anon_bytes",
        "gigas_cgroup_memory_file_bytes",
        "gigas_cgroup_major_faults_total",
    ] {
        let v = metric(name).unwrap_or_else(|| panic!("{name} missing:\n{stdout}"));
        assert!(v.parse::<u64>().is_ok(), "{name} {v}");
    }
}

#[test]
fn a_killed_process_cgroup_is_swept_by_the_next_start() {
    let own = MemoryStat::of_self().unwrap_or_else(|e| panic!("{e}")).path;
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    // What a process killed before its cleanup leaves: an empty cgroup named for it.
    // (cgroup v2 puts ours beside the own cgroup when that holds processes.)
    let cgroup = created("test-sweep");
    let parent = cgroup.path().parent().unwrap().to_path_buf();
    let stale = parent.join(format!("gigas-killed-{dead_pid}"));
    fs::create_dir(&stale).unwrap_or_else(|e| panic!("mkdir {}: {e}", stale.display()));
    let alive = parent.join("gigas-alive-1");
    fs::create_dir(&alive).unwrap();
    drop(cgroup);
    let next = created("test-sweep");
    assert!(!stale.exists(), "{} was not swept", stale.display());
    assert!(alive.exists(), "the cgroup of a running process was swept");
    fs::remove_dir(&alive).unwrap();
    drop(next);
    assert!(own.exists());
}

#[test]
fn errors_say_how_to_fix() {
    let dir = tempfile::tempdir().unwrap();

    // Nothing mounted where the roots point.
    let e = MemoryCgroup::create_in(&CgroupRoots::fixed(dir.path().join("none")), "t", LIMIT)
        .unwrap_err();
    assert!(matches!(e, CgroupError::NotMounted { .. }), "{e}");
    assert!(e.to_string().contains("--memory-limit-optional"), "{e}");

    // cgroup v2 whose own cgroup lacks the memory controller (not delegated).
    let v2 = dir.path().join("v2");
    fs::create_dir_all(v2.join("user.slice/me.scope")).unwrap();
    fs::write(v2.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    fs::write(v2.join("user.slice/me.scope/cgroup.controllers"), "pids\n").unwrap();
    let mountinfo = dir.path().join("mountinfo");
    fs::write(
        &mountinfo,
        format!("41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n", v2.display()),
    )
    .unwrap();
    let membership = dir.path().join("cgroup");
    fs::write(&membership, "0::/user.slice/me.scope\n").unwrap();
    let roots = CgroupRoots::from_proc_files(&mountinfo, &membership);
    let e = MemoryCgroup::create_in(&roots, "t", LIMIT).unwrap_err();
    assert!(matches!(e, CgroupError::NoMemoryController { .. }), "{e}");
    for part in [
        "+memory",
        "run as root",
        "systemd-run",
        "--memory-limit-optional",
    ] {
        assert!(e.to_string().contains(part), "{part} missing: {e}");
    }

    // A cgroup v1 hierarchy mounted read-only (as in most containers).
    let ro = dir.path().join("ro");
    fs::create_dir(&ro).unwrap();
    let mount = ReadOnlyTmpfs::mount(&ro, |root| fs::create_dir(root.join("memory")).unwrap());
    let e = MemoryCgroup::create_in(&CgroupRoots::fixed(&mount.0), "t", LIMIT).unwrap_err();
    assert!(matches!(e, CgroupError::ReadOnly { .. }), "{e}");
    for part in ["read-only", "run as root", "--memory-limit-optional"] {
        assert!(e.to_string().contains(part), "{part} missing: {e}");
    }
    drop(mount);

    // A directory that is not a cgroup: nothing is created in it.
    let fake = dir.path().join("fake");
    fs::create_dir_all(fake.join("memory")).unwrap();
    let e = MemoryCgroup::create_in(&CgroupRoots::fixed(&fake), "t", LIMIT).unwrap_err();
    assert!(matches!(e, CgroupError::NotACgroup { .. }), "{e}");
}

/// A tmpfs filled by `fill`, then remounted read-only; unmounted on drop.
struct ReadOnlyTmpfs(PathBuf);

impl ReadOnlyTmpfs {
    fn mount(at: &Path, fill: impl FnOnce(&Path)) -> Self {
        let run = |args: &[&str]| {
            let status = Command::new("mount")
                .args(args)
                .status()
                .expect("run mount");
            assert!(
                status.success(),
                "mount {args:?} failed: these tests need root (CAP_SYS_ADMIN)"
            );
        };
        let at_str = at.to_str().unwrap();
        run(&["-t", "tmpfs", "-o", "size=1m", "tmpfs", at_str]);
        let guard = ReadOnlyTmpfs(at.to_path_buf());
        fill(at);
        run(&["-o", "remount,ro", at_str]);
        guard
    }
}

impl Drop for ReadOnlyTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Run as an unprivileged user, the error names the fix, and --memory-limit-optional goes on.
#[test]
fn an_unprivileged_user_is_told_how_to_fix() {
    // The user `nobody` cannot reach the build directory's binary: link it somewhere it can.
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let exe = dir.path().join("limits-test");
    let me = std::env::current_exe().unwrap();
    if fs::hard_link(&me, &exe).is_err() {
        fs::copy(&me, &exe).unwrap();
    }
    let mut cmd = child_at(&exe, "unprivileged");
    let out = cmd
        .current_dir("/")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run the child as nobody (needs root)");
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        child_value(&out, "kind").as_deref(),
        Some("PermissionDenied"),
        "{}",
        describe(&out)
    );
    let message = child_value(&out, "message").unwrap();
    for part in [
        "permission denied",
        "run as root",
        "systemd-run",
        "--memory-limit-optional",
    ] {
        assert!(message.contains(part), "{part} missing: {message}");
    }
    assert_eq!(child_value(&out, "optional").as_deref(), Some("true"));
}

#[test]
fn one_name_one_live_cgroup_and_limits_can_change_on_reuse() {
    let first = created("test-twice");
    let e = MemoryCgroup::create("test-twice", LIMIT).unwrap_err();
    assert!(matches!(e, CgroupError::InUse { .. }), "{e}");
    let path = first.path().to_path_buf();
    drop(first);
    assert!(!path.exists());
    // A directory of this PID left behind (as after PID reuse) is reused, whatever limits
    // it held: here smaller ones, memory+swap included.
    let dir = path
        .parent()
        .unwrap()
        .join(format!("gigas-test-reuse-{}", std::process::id()));
    fs::create_dir(&dir).unwrap();
    for file in [
        "memory.limit_in_bytes",
        "memory.memsw.limit_in_bytes",
        "memory.max",
    ] {
        if dir.join(file).exists() {
            fs::write(dir.join(file), LIMIT.to_string()).unwrap();
        }
    }
    let bigger = MemoryCgroup::create("test-reuse", 4 * LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bigger.path(), dir);
    assert_eq!(bigger.limit(), 4 * LIMIT);
    assert_eq!(bigger.stat().unwrap().limit, Some(4 * LIMIT));
}

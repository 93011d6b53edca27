//! The processes this run started and its temporary directory: started in their own process
//! groups (a terminal's Ctrl-C reaches only the devnet, which stops them in order), killed by
//! the kernel if the devnet dies without stopping them, stopped and reaped at the end, on an
//! error, or on SIGINT/SIGTERM/SIGHUP; the directory removed after them.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use eyre::{bail, eyre, Result, WrapErr};

/// The signal that asked this process to stop (0: none yet).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only an atomic store: the one thing a signal handler may safely do here.
    SIGNALLED.store(signal, Ordering::SeqCst);
}

/// How long a process gets to stop after its stop signal before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// One process this run started.
#[derive(Debug)]
struct Managed {
    name: String,
    child: Child,
    stop_signal: libc::c_int,
    log: PathBuf,
    /// Its exit status once reaped.
    exited: Option<ExitStatus>,
}

#[derive(Debug, Default)]
struct State {
    children: Vec<Managed>,
    temp: Option<tempfile::TempDir>,
    temp_path: PathBuf,
    /// What the stop did, in order, for the summary.
    stopped: Vec<String>,
}

/// The processes and the temporary directory of one run. Dropping it stops everything.
#[derive(Debug)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

/// What the run and the signal watcher share.
#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// A Ctrl-C ends the run normally (after `--keep-running`'s summary) rather than as an
    /// interruption.
    interrupt_is_exit: AtomicBool,
}

/// A process started by [`Supervisor::spawn`].
#[derive(Debug)]
pub struct Spawned {
    /// Its process id.
    pub pid: u32,
    /// Its stdout, line by line, while the receiver is kept (every line also goes to the log).
    pub lines: mpsc::Receiver<String>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves plain data: go on with it, the stop must run.
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Supervisor {
    /// Takes `temp` (removed at the end) and installs the handlers of SIGINT, SIGTERM and
    /// SIGHUP: on any of them everything is stopped, the directory removed, and the process
    /// exits (status 128 + signal).
    pub fn new(temp: tempfile::TempDir) -> Result<Self> {
        let temp_path = temp.path().to_path_buf();
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                temp: Some(temp),
                temp_path,
                ..State::default()
            }),
            interrupt_is_exit: AtomicBool::new(false),
        });
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: the handler only stores to an atomic; sa_mask is an empty set.
            let installed = unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = libc::SA_RESTART;
                libc::sigaction(signal, &action, std::ptr::null_mut())
            };
            if installed != 0 {
                bail!(
                    "installing the handler of signal {signal}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        let watcher = Arc::clone(&inner);
        std::thread::Builder::new()
            .name("devnet-signals".into())
            .spawn(move || watcher.watch_signals())
            .wrap_err("starting the signal watcher")?;
        Ok(Self { inner })
    }

    /// From now on a Ctrl-C ends the run with status 0 (it is how `--keep-running` ends).
    pub fn interrupt_ends_normally(&self) {
        self.inner.interrupt_is_exit.store(true, Ordering::SeqCst);
    }

    /// Whether a stop signal (Ctrl-C) arrived.
    pub fn interrupted() -> bool {
        SIGNALLED.load(Ordering::SeqCst) != 0
    }

    /// The temporary directory.
    pub fn temp_path(&self) -> PathBuf {
        lock(&self.inner.state).temp_path.clone()
    }

    /// Starts `command` as `name`: stdout and stderr to `log` (stdout also line by line to the
    /// returned receiver), in its own process group, with SIGTERM from the kernel should this
    /// process die before stopping it. `stop_signal` is what asks it to stop.
    pub fn spawn(
        &self,
        name: &str,
        mut command: Command,
        log: &Path,
        stop_signal: libc::c_int,
    ) -> Result<Spawned> {
        if Self::interrupted() {
            bail!("interrupted");
        }
        let log_file = std::fs::File::create(log)
            .wrap_err_with(|| format!("creating the log {}", log.display()))?;
        let stderr = log_file
            .try_clone()
            .wrap_err_with(|| format!("opening the log {}", log.display()))?;
        let parent = std::process::id();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .process_group(0);
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the request above took effect.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::other("the devnet exited"));
                }
                Ok(())
            });
        }
        // Held across the spawn, so a shutdown from the signal watcher either sees this child
        // or runs before it exists.
        let mut state = lock(&self.inner.state);
        if state.temp.is_none() {
            bail!("the devnet is stopping");
        }
        let mut child = command
            .spawn()
            .wrap_err_with(|| format!("starting {name} ({command:?})"))?;
        let pid = child.id();
        let stdout = child.stdout.take();
        state.children.push(Managed {
            name: name.to_string(),
            child,
            stop_signal,
            log: log.to_path_buf(),
            exited: None,
        });
        drop(state);
        let stdout = stdout.ok_or_else(|| eyre!("{name}'s stdout was not piped"))?;
        let lines = gigas_launch::tee_lines(name, stdout, Some(log_file))
            .wrap_err("starting a log thread")?;
        Ok(Spawned { pid, lines })
    }

    /// Processes that exited on their own since the last call: (name, status, log).
    pub fn exited(&self) -> Vec<(String, ExitStatus, PathBuf)> {
        let mut state = lock(&self.inner.state);
        let mut out = Vec::new();
        for m in &mut state.children {
            if m.exited.is_none() {
                if let Ok(Some(status)) = m.child.try_wait() {
                    m.exited = Some(status);
                    out.push((m.name.clone(), status, m.log.clone()));
                }
            }
        }
        out
    }

    /// Stops every process (the last started first: its stop signal, then SIGKILL after
    /// 30 s), reaps it, and removes the temporary directory. Returns one line per process
    /// saying how it ended (those stopped earlier by [`Supervisor::stop`] included); a second
    /// call stops nothing more.
    pub fn shutdown(&self) -> Vec<String> {
        self.inner.shutdown()
    }

    /// Stops the process `name` now (as [`Supervisor::shutdown`] would) and says how it ended.
    pub fn stop(&self, name: &str) -> Option<String> {
        let mut state = lock(&self.inner.state);
        let at = state.children.iter().position(|m| m.name == name)?;
        let mut m = state.children.remove(at);
        let line = stop_one(&mut m);
        state.stopped.push(line.clone());
        Some(line)
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // On every way out of the run, an error or a panic included: nothing may outlive it.
        let _ = self.inner.shutdown();
    }
}

impl Inner {
    fn watch_signals(&self) {
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let signal = SIGNALLED.load(Ordering::SeqCst);
            if signal == 0 {
                continue;
            }
            let normal = self.interrupt_is_exit.load(Ordering::SeqCst);
            if normal {
                println!("\nstopping the devnet");
            } else {
                eprintln!("\ninterrupted (signal {signal}): stopping the devnet's processes");
            }
            for line in self.shutdown() {
                eprintln!("  {line}");
            }
            let _ = std::io::stdout().flush();
            std::process::exit(if normal { 0 } else { 128 + signal });
        }
    }

    fn shutdown(&self) -> Vec<String> {
        let mut state = lock(&self.state);
        let mut children = std::mem::take(&mut state.children);
        while let Some(mut m) = children.pop() {
            let line = stop_one(&mut m);
            state.stopped.push(line);
        }
        if let Some(temp) = state.temp.take() {
            let path = temp.path().display().to_string();
            match temp.close() {
                Ok(()) => state.stopped.push(format!("removed {path}")),
                Err(e) => state.stopped.push(format!("could not remove {path}: {e}")),
            }
        }
        state.stopped.clone()
    }
}

/// Signals, waits, kills if needed, reaps; one line on how it ended.
fn stop_one(m: &mut Managed) -> String {
    if let Some(status) = m.exited.or_else(|| m.child.try_wait().ok().flatten()) {
        return format!(
            "{} had already exited ({status}; log {})",
            m.name,
            m.log.display()
        );
    }
    let started = Instant::now();
    if let Ok(pid) = libc::pid_t::try_from(m.child.id()) {
        // SAFETY: kill(2) on our own child, not yet reaped, so the pid is still ours.
        unsafe { libc::kill(pid, m.stop_signal) };
    }
    while started.elapsed() < STOP_GRACE {
        if let Ok(Some(status)) = m.child.try_wait() {
            return format!(
                "{} (pid {}) stopped in {:.1} s ({status})",
                m.name,
                m.child.id(),
                started.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = m.child.kill();
    let status = m.child.wait();
    format!(
        "{} (pid {}) did not stop within {} s and was killed ({status:?}; log {})",
        m.name,
        m.child.id(),
        STOP_GRACE.as_secs(),
        m.log.display()
    )
}

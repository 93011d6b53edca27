//! Placing benchmark processes on CPUs: a CPU list as `taskset` writes it, and the affinity
//! calls that apply it to this thread or to a child before it runs.
//!
//! Owns: parsing lists and setting masks. Must not: decide which process goes where (each
//! benchmark says so in its options).

use std::process::Command;

/// The largest CPU number a list may name (the kernel's `cpu_set_t` holds 1,024).
const MAX_CPU: usize = 1023;

/// A CPU list, as an option's value (`--x-cpus 0,2-3`): sorted, without repeats, every CPU
/// at most [`MAX_CPU`] (made only by [`parse_cpu_list`]'s checks, so a mask can hold it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// The CPUs, in order.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }
}

impl std::str::FromStr for CpuList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        parse_cpu_list(text).map(CpuList)
    }
}

impl std::fmt::Display for CpuList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_cpu_list(&self.0))
    }
}

/// Parses a CPU list: numbers and inclusive ranges separated by commas (`0`, `0-1`, `0,2-3`).
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let number = |s: &str| -> Result<usize, String> {
            let n: usize = s
                .trim()
                .parse()
                .map_err(|_| format!("`{s}` in the CPU list `{text}` is not a CPU number"))?;
            if n > MAX_CPU {
                return Err(format!("CPU {n} in `{text}` is above {MAX_CPU}"));
            }
            Ok(n)
        };
        match part.split_once('-') {
            Some((low, high)) => {
                let (low, high) = (number(low)?, number(high)?);
                if low > high {
                    return Err(format!("the range `{part}` in `{text}` runs backwards"));
                }
                cpus.extend(low..=high);
            }
            None => cpus.push(number(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn mask(cpus: &CpuList) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it for every CPU up
    // to MAX_CPU, which a CpuList never exceeds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus.cpus() {
            libc::CPU_SET(cpu, &mut set);
        }
        set
    }
}

/// The calling thread held to some CPUs; dropping it gives the thread back the CPUs it had,
/// so that what a benchmark runs after (the next experiment) is not held too.
#[derive(Debug)]
#[must_use = "the thread is unpinned when this is dropped"]
pub struct Pinned {
    before: libc::cpu_set_t,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // Nothing to do about a failure here: the thread keeps the narrower mask.
        let _ = set_current(&self.before);
    }
}

/// The calling thread's CPUs.
fn current() -> std::io::Result<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(set)
    }
}

fn set_current(set: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: `set` is a valid, initialised mask that outlives the call; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Restricts the calling thread, and every thread and process it starts while the result
/// lives, to `cpus`.
pub fn pin_current_thread(cpus: &CpuList) -> std::io::Result<Pinned> {
    let before = current()?;
    set_current(&mask(cpus))?;
    Ok(Pinned { before })
}

/// Makes `command`'s process run on `cpus` only, from before its first instruction (so
/// every thread it starts inherits the mask).
pub fn run_on(command: &mut Command, cpus: &CpuList) {
    use std::os::unix::process::CommandExt;
    let set = mask(cpus);
    // SAFETY: the closure runs in the forked child before exec and makes one system call,
    // which is async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// A CPU list as `taskset` would print it back (`0,2-3`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first CPU this thread may run on (CPU 0 may be outside a CI machine's cpuset).
    fn first_allowed() -> usize {
        let set = match current() {
            Ok(set) => set,
            Err(e) => panic!("cannot read this thread's CPUs: {e}"),
        };
        // SAFETY: CPU_ISSET reads within the set for every CPU up to MAX_CPU.
        (0..=MAX_CPU)
            .find(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .unwrap_or(0)
    }

    #[test]
    fn lists_parse_and_print_back() {
        assert_eq!(parse_cpu_list("1"), Ok(vec![1]));
        assert_eq!(parse_cpu_list("0-1"), Ok(vec![0, 1]));
        assert_eq!(parse_cpu_list("3, 0,2-3"), Ok(vec![0, 2, 3]));
        assert_eq!(format_cpu_list(&[0, 2, 3, 4, 7]), "0,2-4,7");
        assert!(parse_cpu_list("2-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("5000").is_err());
    }

    /// A pinned thread runs on its CPUs until the pin is dropped, then on what it had.
    #[test]
    fn a_pin_is_undone_when_dropped() {
        std::thread::spawn(|| {
            let before = std::thread::available_parallelism().map_or(0, |n| n.get());
            let pinned = match pin_current_thread(&CpuList(vec![first_allowed()])) {
                Ok(p) => p,
                Err(e) => panic!("cannot pin: {e}"),
            };
            assert_eq!(
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                1
            );
            drop(pinned);
            assert_eq!(
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                before
            );
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    }

    /// A child started with a mask runs on exactly those CPUs (read back from the kernel).
    #[test]
    fn a_child_runs_on_its_cpus() {
        let mut command = Command::new("sh");
        command.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        let cpu = first_allowed();
        run_on(&mut command, &CpuList(vec![cpu]));
        let out = match command.output() {
            Ok(out) => out,
            Err(e) => panic!("cannot run sh: {e}"),
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert_eq!(
            text.split_whitespace().last(),
            Some(cpu.to_string().as_str()),
            "{text}"
        );
    }
}

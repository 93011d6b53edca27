//! Pinning the replay thread and the sampler to different CPUs.
//!
//! With both threads busy, letting the scheduler move them would sometimes put the sampler on
//! the replay thread's CPU, where it would steal the time it is measuring. Pinning keeps them
//! apart. It is best effort: where it fails, measurement goes on and the report says so.

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit set that sched_getaffinity fills for the calling thread;
    // the size passed is its own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`. Returns whether it worked.
pub fn pin_current_thread(cpu: usize) -> bool {
    // SAFETY: as above; the set holds one CPU and outlives the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Where the replay thread and the sampler should run: two distinct CPUs, when there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// CPU of the replay thread.
    pub replay: usize,
    /// CPU of the sampler.
    pub sampler: usize,
}

/// Two distinct allowed CPUs, or `None` when the process may use only one (then the sampler
/// shares the replay thread's CPU and the overhead figure shows it).
///
/// Decided once, on first use: a thread inherits its parent's affinity, so asking again from
/// a thread spawned by the pinned replay thread would see only the replay CPU.
pub fn placement() -> Option<Placement> {
    static PLACEMENT: std::sync::OnceLock<Option<Placement>> = std::sync::OnceLock::new();
    *PLACEMENT.get_or_init(|| match allowed_cpus().as_slice() {
        [replay, sampler, ..] => Some(Placement {
            replay: *replay,
            sampler: *sampler,
        }),
        _ => None,
    })
}

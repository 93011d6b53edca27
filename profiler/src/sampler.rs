//! The sampler: a thread that reads the probed thread's current activity on a timer.
//!
//! Each sample is weighted by the time elapsed since the previous one and credited to the
//! activity seen at that moment, so that the weights of all samples add up to the wall time the
//! sampler ran. The probed thread pays one relaxed store per instruction and nothing per
//! sample; the sampler spins on the clock on the other core. The sampling instant is jittered
//! so that it cannot lock onto a periodic loop in the EVM code.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gigas_evm::callstack::unpack;
use gigas_evm::probe::{CellReader, Phase, ProbedEvm, ACTIVITY_COUNT};
use gigas_evm::revm::database_interface::{Database, DatabaseCommit};
use gigas_evm::{execute_block, BlockOutcome, ExecutionError, PreparedBlock};

/// Time per published word. A lookup per sample: foldhash rather than SipHash keeps the
/// sampler's own work per sample small (it did not change the replay's overhead, measured
/// alternating: call stacks cost 2.7-3.6 % over the probe with either hasher).
pub type WordMap = HashMap<u64, WordTime, foldhash::fast::RandomState>;

/// Words a histogram has room for before it grows (a block's call paths times the opcodes
/// seen in each: a few thousand on the shipped blocks).
const WORDS_UP_FRONT: usize = 8192;

/// Sampled time per activity.
#[derive(Debug, Clone)]
pub struct Histogram {
    /// Nanoseconds credited to each activity.
    pub nanos: Vec<u64>,
    /// Samples taken in each activity.
    pub samples: Vec<u64>,
    /// Samples whose gap since the previous sample exceeded 50 intervals (the sampler was
    /// descheduled): their time is still credited, but to a single activity.
    pub long_gaps: u64,
    /// Nanoseconds and samples per published word (call-tree node and activity,
    /// [`gigas_evm::callstack::pack`]): what a call-stack profile is built from. With call
    /// stacks off every word is in the block's node. Empty after [`Histogram::merge`], since
    /// node ids mean nothing outside their block's tree.
    pub by_word: WordMap,
}

/// Sampled time of one published word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WordTime {
    /// Nanoseconds credited.
    pub nanos: u64,
    /// Samples taken.
    pub samples: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            nanos: vec![0; ACTIVITY_COUNT],
            samples: vec![0; ACTIVITY_COUNT],
            long_gaps: 0,
            by_word: WordMap::with_capacity_and_hasher(WORDS_UP_FRONT, Default::default()),
        }
    }
}

impl Histogram {
    /// Adds another histogram's samples to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.nanos.iter_mut().zip(&other.nanos) {
            *a += b;
        }
        for (a, b) in self.samples.iter_mut().zip(&other.samples) {
            *a += b;
        }
        self.long_gaps += other.long_gaps;
    }

    /// Total samples.
    pub fn total_samples(&self) -> u64 {
        self.samples.iter().sum()
    }
}

/// Runs `work` while a thread samples `cell` about every `interval`, and returns what `work`
/// returned with the samples.
///
/// The sampler is a scoped thread: `cell` need only outlive this call, which lets it be a
/// field of the EVM that `work` executes ([`gigas_evm::probe::ProbedEvm::reader`]). The
/// sampler is stopped however `work` ends, so a panic in it unwinds instead of waiting on a
/// thread that never stops.
pub fn sample_during<R>(
    cell: CellReader<'_>,
    interval: Duration,
    work: impl FnOnce() -> R,
) -> std::io::Result<(R, Histogram)> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let stop = &stop;
        let handle = std::thread::Builder::new()
            .name("gigas-sampler".into())
            .spawn_scoped(scope, move || {
                if let Some(placement) = crate::affinity::placement() {
                    crate::affinity::pin_current_thread(placement.sampler);
                }
                // Tell the caller the clock is running, so that no early sample is missed.
                let _ = ready_tx.send(());
                sample_until(cell, interval, stop)
            })?;
        let guard = StopOnDrop(stop);
        ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("sampler thread exited before starting"))?;
        let out = work();
        drop(guard);
        // A panic in the sampler loop would be a bug in this file; surface it as such.
        match handle.join() {
            Ok(histogram) => Ok((out, histogram)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// A block executed on a probed EVM while a sampler read it.
#[derive(Debug)]
pub struct SampledBlock {
    /// What execution returned.
    pub outcome: Result<BlockOutcome, ExecutionError>,
    /// Execution time: from the block loop's start to idle, the sampler already running.
    pub elapsed: Duration,
    /// The samples.
    pub histogram: Histogram,
}

/// Executes `block` on `evm` with a sampler reading its probe about every `interval`: the
/// one way a probed block is timed, by the profiler's passes and by the calibration alike.
pub fn sampled_block<DB>(
    evm: &mut ProbedEvm<DB>,
    block: &PreparedBlock,
    interval: Duration,
) -> std::io::Result<SampledBlock>
where
    DB: Database + DatabaseCommit,
    DB::Error: std::fmt::Display,
{
    let (reader, evm) = evm.reader();
    let ((outcome, elapsed), histogram) = sample_during(reader, interval, || {
        let start = Instant::now();
        evm.set_phase(Phase::BlockLoop);
        let outcome = execute_block(&mut *evm, block);
        evm.set_phase(Phase::Idle);
        (outcome, start.elapsed())
    })?;
    Ok(SampledBlock {
        outcome,
        elapsed,
        histogram,
    })
}

/// Sets the sampler's stop flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn sample_until(cell: CellReader<'_>, interval: Duration, stop: &AtomicBool) -> Histogram {
    let mut histogram = Histogram::default();
    let interval_ns = interval.as_nanos().max(1) as u64;
    let long_gap = interval_ns * 50;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let start = Instant::now();
    let mut last_ns = 0u64;
    let mut next_ns = interval_ns;
    loop {
        let now_ns = start.elapsed().as_nanos() as u64;
        if now_ns < next_ns {
            std::hint::spin_loop();
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let word = cell.get();
        let activity = unpack(word).1 as usize;
        let weight = now_ns - last_ns;
        last_ns = now_ns;
        if let (Some(n), Some(s)) = (
            histogram.nanos.get_mut(activity),
            histogram.samples.get_mut(activity),
        ) {
            *n += weight;
            *s += 1;
            let at = histogram.by_word.entry(word).or_default();
            at.nanos += weight;
            at.samples += 1;
        }
        if weight > long_gap {
            histogram.long_gaps += 1;
        }
        // xorshift64: a jitter of up to half an interval either way.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        next_ns = now_ns + interval_ns / 2 + rng % interval_ns.max(1);
    }
    histogram
}

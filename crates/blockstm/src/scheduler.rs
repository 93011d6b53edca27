//! The collaborative scheduler of Block-STM (Gelashvili et al., PPoPP 2023, Algorithms 4-5).
//!
//! In words: transactions keep the block's order. Two shared counters say which transaction
//! is next to execute and which is next to validate; every worker repeatedly takes the lower
//! of the two kinds of task. Executing incarnation `k` of transaction `i` records its reads
//! and writes in the multi-version memory. Validating `i` re-reads its read set; if any read
//! now resolves to another write, the incarnation is aborted, its writes become ESTIMATE
//! markers, and `i` goes back to be executed as incarnation `k + 1` while every transaction
//! after it is validated again. A transaction that reads an ESTIMATE of `j` waits: it is
//! registered as a dependency of `j` and resumed when `j` finishes executing. The block is done
//! when both counters have passed the end, no task is running, and no counter moved back in
//! the meantime.
//!
//! A task holds one count of `num_active_tasks` from the moment it is handed out until it
//! finishes without handing out a follow-up task.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A transaction index and incarnation.
pub type Version = (usize, usize);

/// Work for a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Execute this incarnation.
    Execute(Version),
    /// Validate this incarnation's reads.
    Validate(Version),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    ReadyToExecute,
    Executing,
    Executed,
    Aborting,
}

#[derive(Debug)]
struct TxState {
    incarnation: usize,
    status: Status,
}

/// The scheduler for a block of `len` transactions.
#[derive(Debug)]
pub struct Scheduler {
    len: usize,
    execution_idx: AtomicUsize,
    validation_idx: AtomicUsize,
    decrease_cnt: AtomicUsize,
    num_active_tasks: AtomicUsize,
    done_marker: AtomicBool,
    status: Vec<Mutex<TxState>>,
    dependencies: Vec<Mutex<Vec<usize>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A worker that panicked is re-raised by the thread scope; the data it guarded is plain
    // state that stays consistent under the lock, so poisoning carries no information here.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Scheduler {
    /// A scheduler with every transaction ready for its first incarnation.
    pub fn new(len: usize) -> Self {
        Self {
            len,
            execution_idx: AtomicUsize::new(0),
            validation_idx: AtomicUsize::new(0),
            decrease_cnt: AtomicUsize::new(0),
            num_active_tasks: AtomicUsize::new(0),
            done_marker: AtomicBool::new(len == 0),
            status: (0..len)
                .map(|_| {
                    Mutex::new(TxState {
                        incarnation: 0,
                        status: Status::ReadyToExecute,
                    })
                })
                .collect(),
            dependencies: (0..len).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Whether every transaction is executed and validated.
    pub fn done(&self) -> bool {
        self.done_marker.load(Ordering::SeqCst)
    }

    /// Stops handing out tasks: the block cannot succeed (a final transaction is invalid).
    pub fn halt(&self) {
        self.done_marker.store(true, Ordering::SeqCst);
    }

    /// The incarnation of `idx` if it has finished executing and is not being aborted.
    pub fn executed_incarnation(&self, idx: usize) -> Option<usize> {
        let s = lock(self.status.get(idx)?);
        (s.status == Status::Executed).then_some(s.incarnation)
    }

    fn decrease_execution_idx(&self, target: usize) {
        self.execution_idx.fetch_min(target, Ordering::SeqCst);
        self.decrease_cnt.fetch_add(1, Ordering::SeqCst);
    }

    fn decrease_validation_idx(&self, target: usize) {
        self.validation_idx.fetch_min(target, Ordering::SeqCst);
        self.decrease_cnt.fetch_add(1, Ordering::SeqCst);
    }

    fn check_done(&self) {
        let observed = self.decrease_cnt.load(Ordering::SeqCst);
        if self
            .execution_idx
            .load(Ordering::SeqCst)
            .min(self.validation_idx.load(Ordering::SeqCst))
            >= self.len
            && self.num_active_tasks.load(Ordering::SeqCst) == 0
            && observed == self.decrease_cnt.load(Ordering::SeqCst)
        {
            self.done_marker.store(true, Ordering::SeqCst);
        }
    }

    /// Marks `idx` executing if it is ready; the caller holds an active-task count.
    fn try_incarnate(&self, idx: usize) -> Option<Version> {
        if idx >= self.len {
            return None;
        }
        let mut s = lock(&self.status[idx]);
        if s.status == Status::ReadyToExecute {
            s.status = Status::Executing;
            Some((idx, s.incarnation))
        } else {
            None
        }
    }

    fn next_version_to_execute(&self) -> Option<Version> {
        if self.execution_idx.load(Ordering::SeqCst) >= self.len {
            self.check_done();
            return None;
        }
        self.num_active_tasks.fetch_add(1, Ordering::SeqCst);
        let idx = self.execution_idx.fetch_add(1, Ordering::SeqCst);
        let version = self.try_incarnate(idx);
        if version.is_none() {
            self.num_active_tasks.fetch_sub(1, Ordering::SeqCst);
        }
        version
    }

    fn next_version_to_validate(&self) -> Option<Version> {
        if self.validation_idx.load(Ordering::SeqCst) >= self.len {
            self.check_done();
            return None;
        }
        self.num_active_tasks.fetch_add(1, Ordering::SeqCst);
        let idx = self.validation_idx.fetch_add(1, Ordering::SeqCst);
        if idx < self.len {
            let s = lock(&self.status[idx]);
            if s.status == Status::Executed {
                return Some((idx, s.incarnation));
            }
        }
        self.num_active_tasks.fetch_sub(1, Ordering::SeqCst);
        None
    }

    /// The next task, or `None` when the block is done.
    pub fn next_task(&self) -> Option<Task> {
        loop {
            if self.done() {
                return None;
            }
            let validate = self.validation_idx.load(Ordering::SeqCst)
                < self.execution_idx.load(Ordering::SeqCst);
            let task = if validate {
                self.next_version_to_validate().map(Task::Validate)
            } else {
                self.next_version_to_execute().map(Task::Execute)
            };
            if task.is_some() {
                return task;
            }
            std::hint::spin_loop();
        }
    }

    /// `idx` read an ESTIMATE written by `blocking`. Returns false if `blocking` has finished
    /// executing meanwhile (the caller re-executes at once); otherwise `idx` waits for it and
    /// the task ends.
    pub fn add_dependency(&self, idx: usize, blocking: usize) -> bool {
        {
            let mut deps = lock(&self.dependencies[blocking]);
            if lock(&self.status[blocking]).status == Status::Executed {
                return false;
            }
            lock(&self.status[idx]).status = Status::Aborting;
            deps.push(idx);
        }
        self.num_active_tasks.fetch_sub(1, Ordering::SeqCst);
        true
    }

    fn set_ready_status(&self, idx: usize) {
        let mut s = lock(&self.status[idx]);
        s.incarnation += 1;
        s.status = Status::ReadyToExecute;
    }

    fn resume_dependencies(&self, dependents: Vec<usize>) {
        let min = dependents.iter().copied().min();
        for d in dependents {
            self.set_ready_status(d);
        }
        if let Some(min) = min {
            self.decrease_execution_idx(min);
        }
    }

    /// An execution finished; `wrote_new_location` says whether it wrote a location its
    /// previous incarnation did not (then every later transaction must be validated again).
    pub fn finish_execution(
        &self,
        idx: usize,
        incarnation: usize,
        wrote_new_location: bool,
    ) -> Option<Task> {
        lock(&self.status[idx]).status = Status::Executed;
        let dependents = std::mem::take(&mut *lock(&self.dependencies[idx]));
        self.resume_dependencies(dependents);
        if self.validation_idx.load(Ordering::SeqCst) > idx {
            if wrote_new_location {
                self.decrease_validation_idx(idx);
            } else {
                return Some(Task::Validate((idx, incarnation)));
            }
        }
        self.num_active_tasks.fetch_sub(1, Ordering::SeqCst);
        None
    }

    /// Claims the abort of a failed validation; only one validator of an incarnation wins.
    pub fn try_validation_abort(&self, idx: usize, incarnation: usize) -> bool {
        let mut s = lock(&self.status[idx]);
        if s.incarnation == incarnation && s.status == Status::Executed {
            s.status = Status::Aborting;
            true
        } else {
            false
        }
    }

    /// A validation finished; after an abort, the transaction is re-executed, by this worker
    /// when possible.
    pub fn finish_validation(&self, idx: usize, aborted: bool) -> Option<Task> {
        if aborted {
            self.set_ready_status(idx);
            self.decrease_validation_idx(idx + 1);
            if self.execution_idx.load(Ordering::SeqCst) > idx {
                if let Some(version) = self.try_incarnate(idx) {
                    return Some(Task::Execute(version));
                }
            }
        }
        self.num_active_tasks.fetch_sub(1, Ordering::SeqCst);
        None
    }
}

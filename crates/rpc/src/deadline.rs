//! The deadline of the request whose work runs on this thread.
//!
//! The handlers run executions and scans on tokio's blocking pool under
//! [`RpcConfig::execution_timeout`](crate::RpcConfig); a blocking task cannot be cancelled
//! from outside, so the work itself must stop: a backend's scan over blocks (logs, fee
//! history, traces) calls [`check`] between blocks and answers [`RpcError::Timeout`] once the
//! deadline has passed. The deadline is a thread-local entered for the duration of the
//! work, so that the [`Backend`](crate::Backend) methods keep their signatures and a backend
//! called outside a request (a test, a tool) runs without one.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::RpcError;

thread_local! {
    static DEADLINE: Cell<Option<(Instant, Duration)>> = const { Cell::new(None) };
}

/// The deadline of the work on this thread until dropped.
#[derive(Debug)]
pub struct RequestDeadline {
    previous: Option<(Instant, Duration)>,
}

impl RequestDeadline {
    /// Work on this thread must end within `timeout` from now, until the guard drops.
    pub fn enter(timeout: Duration) -> Self {
        let deadline = Instant::now().checked_add(timeout).map(|at| (at, timeout));
        Self {
            previous: DEADLINE.with(|d| d.replace(deadline)),
        }
    }
}

impl Drop for RequestDeadline {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.previous));
    }
}

/// [`RpcError::Timeout`] once this thread's request deadline has passed (never without one).
/// `what` names the work in the error, e.g. "eth_getLogs over blocks 10..=90".
pub fn check(what: &str) -> Result<(), RpcError> {
    match DEADLINE.with(Cell::get) {
        Some((at, timeout)) if Instant::now() >= at => Err(RpcError::Timeout(format!(
            "{what}: aborted after the {} execution timeout",
            gigas_primitives::duration::format_duration(timeout)
        ))),
        _ => Ok(()),
    }
}

/// The time left before this thread's request deadline (`None` without one).
pub fn remaining() -> Option<Duration> {
    DEADLINE
        .with(Cell::get)
        .map(|(at, _)| at.saturating_duration_since(Instant::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_deadline_fails_the_check_and_nesting_restores() {
        assert!(check("outside").is_ok(), "no deadline, no failure");
        let outer = RequestDeadline::enter(Duration::from_secs(60));
        assert!(check("within").is_ok());
        {
            let _inner = RequestDeadline::enter(Duration::ZERO);
            let err = check("eth_getLogs over blocks 1..=9").unwrap_err();
            assert_eq!(err.code(), crate::codes::SERVER_ERROR);
            assert!(
                err.to_string().contains("eth_getLogs over blocks 1..=9"),
                "{err}"
            );
        }
        assert!(check("restored").is_ok());
        drop(outer);
        assert!(remaining().is_none());
    }
}

//! The node's memory plan: how much each of its bounded buffers may hold, sized from
//! `--memory-limit` (or the machine's memory) where its flag says `auto`, and the check that
//! all of them together fit the limit.
//!
//! Owns: the `auto` sizes and the check. Must not: allocate, measure or enforce (each buffer
//! enforces its own bound; the cgroup enforces the limit).
//!
//! Each bound alone was sane, but they were chosen for an 8 GiB node and did not scale: under
//! a 1 GiB limit the open group (512 MiB), MDBX's dirty pages (256 MiB) and the recent states
//! (256 MiB) could take the whole limit between them before the page cache got any, and the
//! fetch queue was bounded only in blocks. Now every `auto` share shrinks with the limit, and
//! the node refuses to start when the bounds it would run with (those given by hand
//! included) cannot fit, naming the largest.

use std::fmt;

const MIB: u64 = 1 << 20;

/// What the process needs beside the bounded buffers: the binary's mapped text, the async
/// runtime and its threads' stacks and heaps, MDBX's reader table, RPC connections' buffers.
/// Most of that is file-backed (the binary's text) and can be reclaimed; the rest, a few
/// tens of MiB for an idle node.
pub const UNBOUNDED_RESERVE: u64 = 64 * MIB;

/// The smallest answer bound `auto` gives: the sequencer's range answers go up to 16 MiB.
const MIN_AUTO_RESPONSE: u64 = 16 * MIB;

/// The memory `auto` sizes are shares of: the limit, else the machine's memory.
pub fn available(memory_limit: Option<u64>) -> u64 {
    memory_limit.unwrap_or_else(|| gigas_primitives::Machine::current().memory_bytes)
}

/// The `auto` budget of the account trie in memory (`--trie.sparse-size`): see
/// [`gigas_statedb::sparse_trie_budget`].
pub fn auto_sparse_trie_bytes(memory: u64) -> u64 {
    gigas_statedb::sparse_trie_budget(memory) as u64
}

/// `memory / share`, at most `cap`: an `auto` size.
pub fn auto_share(memory: u64, share: u64, cap: u64) -> u64 {
    (memory / share.max(1)).min(cap)
}

/// The `auto` bound of the open group's changes held until its commit (`--commit-bytes`):
/// half the memory less 128 MiB, between 16 and 512 MiB (384 MiB under 1 GiB).
///
/// The largest share, because the group is also the node's best cache: what it holds is
/// read from memory instead of from pages the limit may have evicted. With storage under
/// 1 GiB (the mix workload over 10M accounts and 10M slots, a commit every 128 blocks),
/// 128 MiB made 5 commits in 201 blocks, read 28 GB from the disk and applied 5,232
/// changes/s; 512 MiB made 2 commits in 240 blocks, read 9.6 GB and applied 7,654.
pub fn auto_group_bytes(memory: u64) -> u64 {
    (memory / 2)
        .saturating_sub(128 * MIB)
        .clamp(16 * MIB, 512 * MIB)
}

/// The `auto` bound of a write transaction's dirty pages (`--db.max-dirty`): a sixteenth,
/// at most 256 MiB.
pub fn auto_dirty_bytes(memory: u64) -> u64 {
    auto_share(memory, 16, 256 * MIB)
}

/// The `auto` bound of the recent states' undo records (`--state-window-mib`): a
/// sixteenth, at most 256 MiB.
pub fn auto_window_bytes(memory: u64) -> u64 {
    auto_share(memory, 16, 256 * MIB)
}

/// The `auto` bound of fetched diffs waiting to be applied (`--fetch-queue-bytes`): a
/// sixteenth, at most 256 MiB.
pub fn auto_queue_bytes(memory: u64) -> u64 {
    auto_share(memory, 16, 256 * MIB)
}

/// The `auto` bound of one answer from the source (`--fetch-max-response`): a
/// thirty-second, between 16 and 64 MiB.
pub fn auto_response_bytes(memory: u64) -> u64 {
    auto_share(memory, 32, crate::fetch::DEFAULT_MAX_RESPONSE_BYTES).max(MIN_AUTO_RESPONSE)
}

/// The bounds the node runs with, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The open group's changes until its commit (`--commit-bytes`).
    pub group: u64,
    /// A write transaction's dirty pages (`--db.max-dirty`).
    pub dirty: u64,
    /// The recent states' undo records (`--state-window-mib`).
    pub window: u64,
    /// Fetched diffs waiting for the apply thread (`--fetch-queue-bytes`).
    pub fetch_queue: u64,
    /// One answer from the source (`--fetch-max-response`), held by each request in flight.
    pub fetch_response: u64,
    /// Requests in flight (`--fetch-concurrency`).
    pub fetch_concurrency: u64,
    /// The account trie in memory (`--trie.sparse-size`).
    pub sparse_trie: u64,
    /// The trie node cache (`--trie.cache-size`).
    pub trie_cache: u64,
    /// EVM memory of one RPC execution (`--rpc.evmmemory`).
    pub execution_memory: u64,
    /// RPC executions at once (`--rpc.max-executions`).
    pub executions: u64,
    /// Groups commit on the commit thread (`--db.commit-thread`): the committing group's
    /// changes stay in memory beside the next group's until it lands.
    pub commit_thread: bool,
    /// The decode thread (`--decode-ahead`): its copy of the changes above the last commit
    /// (the open group's, and the committing group's until it lands).
    pub decode_ahead: bool,
}

/// One bounded consumer of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The flag (or flags) that set it.
    pub flags: &'static str,
    /// Its bound in bytes.
    pub bytes: u64,
}

impl MemoryPlan {
    /// Every bounded consumer, largest first.
    pub fn parts(&self) -> Vec<Part> {
        let mut parts = vec![
            Part {
                flags: "--commit-bytes",
                bytes: self.group,
            },
            Part {
                flags: "--db.max-dirty",
                bytes: self.dirty,
            },
            Part {
                flags: "--state-window-mib",
                bytes: self.window,
            },
            Part {
                flags: "--fetch-queue-bytes",
                bytes: self.fetch_queue,
            },
            Part {
                flags: "--fetch-max-response x --fetch-concurrency",
                bytes: self.fetch_response.saturating_mul(self.fetch_concurrency),
            },
            Part {
                flags: "--trie.sparse-size",
                bytes: self.sparse_trie,
            },
            Part {
                flags: "--trie.cache-size",
                bytes: self.trie_cache,
            },
            Part {
                flags: "--rpc.evmmemory x --rpc.max-executions",
                bytes: self.execution_memory.saturating_mul(self.executions),
            },
            Part {
                flags: "--db.commit-thread (a second --commit-bytes)",
                bytes: if self.commit_thread { self.group } else { 0 },
            },
            Part {
                flags: "--decode-ahead (a copy of the changes above the last commit)",
                bytes: match (self.decode_ahead, self.commit_thread) {
                    (false, _) => 0,
                    (true, false) => self.group,
                    (true, true) => self.group.saturating_mul(2),
                },
            },
        ];
        parts.sort_by_key(|p| std::cmp::Reverse(p.bytes));
        parts
    }

    /// The sum of every bound.
    pub fn total(&self) -> u64 {
        self.parts()
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.bytes))
    }

    /// Whether every bound together, with [`UNBOUNDED_RESERVE`] for the rest of the process,
    /// fits `limit`.
    pub fn check(&self, limit: u64) -> Result<(), MemoryPlanError> {
        let total = self.total();
        if total.saturating_add(UNBOUNDED_RESERVE) <= limit {
            return Ok(());
        }
        Err(MemoryPlanError {
            limit,
            total,
            parts: self.parts().into_iter().filter(|p| p.bytes > 0).collect(),
        })
    }
}

/// The node's memory bounds do not fit its memory limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct MemoryPlanError {
    /// `--memory-limit`.
    pub limit: u64,
    /// What the bounds add up to.
    pub total: u64,
    /// The non-zero bounds, largest first.
    pub parts: Vec<Part>,
}

impl fmt::Display for MemoryPlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the node's memory bounds add up to {} MiB, and with {} MiB for the rest of the \
             process that exceeds --memory-limit ({} MiB): ",
            self.total / MIB,
            UNBOUNDED_RESERVE / MIB,
            self.limit / MIB
        )?;
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {} MiB", part.flags, part.bytes.div_ceil(MIB))?;
        }
        f.write_str(". Lower the largest (or leave it at `auto`, which sizes it from the limit), or raise --memory-limit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn auto_plan(memory: u64) -> MemoryPlan {
        MemoryPlan {
            group: auto_group_bytes(memory),
            dirty: auto_dirty_bytes(memory),
            window: auto_window_bytes(memory),
            fetch_queue: auto_queue_bytes(memory),
            fetch_response: auto_response_bytes(memory),
            fetch_concurrency: 4,
            sparse_trie: gigas_statedb::sparse_trie_budget(memory) as u64,
            trie_cache: 0,
            execution_memory: 64 * MIB,
            executions: 2,
            commit_thread: false,
            decode_ahead: false,
        }
    }

    #[test]
    fn auto_sizes_keep_an_8_gib_nodes_bounds_and_shrink_below() {
        let plan = auto_plan(8 * GIB);
        assert_eq!(plan.group, 512 * MIB);
        assert_eq!(plan.dirty, 256 * MIB);
        assert_eq!(plan.window, 256 * MIB);
        assert_eq!(plan.fetch_queue, 256 * MIB);
        assert_eq!(plan.fetch_response, 64 * MIB);
        assert_eq!(plan.sparse_trie, 2 * GIB);
        let small = auto_plan(GIB);
        assert_eq!(small.group, 384 * MIB);
        assert_eq!(auto_plan(512 * MIB).group, 128 * MIB);
        assert_eq!(auto_plan(128 * MIB).group, 16 * MIB);
        assert_eq!(small.dirty, 64 * MIB);
        assert_eq!(small.fetch_response, 32 * MIB);
        assert_eq!(small.sparse_trie, 0);
        assert_eq!(auto_response_bytes(128 * MIB), MIN_AUTO_RESPONSE);
    }

    #[test]
    fn the_defaults_fit_every_limit_from_512_mib_and_a_hand_set_bound_that_cannot_is_named() {
        for limit in [512 * MIB, GIB, 2 * GIB, 4 * GIB, 8 * GIB, 64 * GIB] {
            let plan = auto_plan(limit);
            assert!(
                plan.check(limit).is_ok(),
                "{limit}: {:?}",
                plan.check(limit)
            );
        }
        let plan = MemoryPlan {
            group: 640 * MIB,
            ..auto_plan(GIB)
        };
        let err = plan
            .check(GIB)
            .expect_err("640 MiB of group in 1 GiB does not fit");
        assert_eq!(err.parts[0].flags, "--commit-bytes");
        assert!(err.total > GIB - UNBOUNDED_RESERVE);
        let text = err.to_string();
        assert!(text.contains("--commit-bytes 640 MiB"), "{text}");
        assert!(text.contains("--memory-limit (1024 MiB)"), "{text}");
        // Zero bounds are not listed.
        assert!(!text.contains("--trie.cache-size"), "{text}");
    }
}

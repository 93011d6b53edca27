//! The modes a replay runs: how the writer groups, roots and commits, and their labels.

use std::time::Duration;

use eyre::Result;
use gigas_statedb::WriterOptions;
use serde::{Deserialize, Serialize};

use super::{DurabilityArg, ModeKind, PageCache, TARGET_BATCHED, TARGET_LIVE};

/// Where a live mode's roots run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RootArg {
    /// Inside the write transaction, on the writer's thread (before issue 30's fourth step).
    InTxn,
    /// Over the last commit and the group in memory, on this many threads (0: one per core).
    Layered(usize),
}

impl std::str::FromStr for RootArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "txn" => Ok(Self::InTxn),
            "all" => Ok(Self::Layered(0)),
            n => n
                .parse()
                .map(Self::Layered)
                .map_err(|_| format!("`{n}`: expected `txn`, `all` or a number of threads")),
        }
    }
}

impl RootArg {
    fn label(self) -> String {
        match self {
            Self::InTxn => "root in the transaction".into(),
            Self::Layered(0) => "layered root on all cores".into(),
            Self::Layered(1) => "layered root on 1 thread".into(),
            Self::Layered(n) => format!("layered root on {n} threads"),
        }
    }

    fn short(self) -> String {
        match self {
            Self::InTxn => "txn".into(),
            Self::Layered(0) => "all".into(),
            Self::Layered(n) => format!("t{n}"),
        }
    }
}

fn cache_label(bytes: u64) -> String {
    if bytes == 0 {
        "no trie cache".into()
    } else {
        format!("trie cache {} MiB", bytes >> 20)
    }
}

/// A mode of applying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Mode {
    /// No root while applying, a commit every `group` blocks, one root at the end.
    Batched {
        /// Blocks per commit.
        group: u64,
        /// How commits reach the disk.
        sync: DurabilityArg,
        /// MDBX's write map ([`StateDbOptions::write_map`]).
        write_map: bool,
        /// How long freed memory stays with the process, in ms
        /// ([`gigas_fullnode::alloc::set_purge_delay`]).
        purge_delay_ms: i64,
        /// Snapshots are written throughout the timed blocks.
        snapshot: bool,
        /// What the page cache holds of the database when the run starts.
        page_cache: PageCache,
        /// A thread verifies and decodes each block ahead of the writer
        /// (`gigas_fullnode::decode`).
        decode_ahead: bool,
    },
    /// Root every block, a commit every `group` blocks (1: every block, the "live").
    Live {
        /// How commits reach the disk.
        sync: DurabilityArg,
        /// Blocks per commit.
        group: u64,
        /// The writer's trie cache budget in bytes (0: off).
        trie_cache: u64,
        /// The in-memory account trie's budget in bytes (0: off).
        sparse_trie: u64,
        /// Where the roots run.
        root: RootArg,
        /// A prefetch thread reads each block's pages ahead (`gigas_fullnode::prefetch`).
        prefetch: bool,
        /// The account trie in memory is loaded with the stored nodes when the writer
        /// opens ([`gigas_statedb::StateWriter::preload_account_trie`]).
        preload: bool,
        /// Roots run while the next blocks are written
        /// ([`WriterOptions::overlap_roots`]).
        overlap: bool,
        /// Groups commit on the commit thread while the next blocks are applied
        /// ([`WriterOptions::commit_thread`]).
        commit_thread: bool,
        /// MDBX's write map ([`StateDbOptions::write_map`]).
        write_map: bool,
        /// How long freed memory stays with the process, in ms
        /// ([`gigas_fullnode::alloc::set_purge_delay`]).
        purge_delay_ms: i64,
        /// Snapshots are written throughout the timed blocks.
        snapshot: bool,
        /// What the page cache holds of the database when the run starts.
        page_cache: PageCache,
        /// A thread verifies and decodes each block ahead of the writer
        /// (`gigas_fullnode::decode`).
        decode_ahead: bool,
    },
}

impl Mode {
    /// Which kind.
    pub fn kind(&self) -> ModeKind {
        match self {
            Self::Batched { .. } => ModeKind::Batched,
            Self::Live { .. } => ModeKind::Live,
        }
    }

    /// How its commits reach the disk.
    pub fn sync(&self) -> DurabilityArg {
        match *self {
            Self::Batched { sync, .. } | Self::Live { sync, .. } => sync,
        }
    }

    /// Whether the writer loads the account trie's stored nodes when it opens.
    pub fn preload(&self) -> bool {
        matches!(self, Self::Live { preload: true, .. })
    }

    /// Whether the run's database uses MDBX's write map.
    pub fn write_map(&self) -> bool {
        match *self {
            Self::Batched { write_map, .. } | Self::Live { write_map, .. } => write_map,
        }
    }

    /// How long freed memory stays with the process during the run, in ms.
    pub fn purge_delay_ms(&self) -> i64 {
        match *self {
            Self::Batched { purge_delay_ms, .. } | Self::Live { purge_delay_ms, .. } => {
                purge_delay_ms
            }
        }
    }

    /// Whether snapshots are written throughout the timed blocks.
    pub fn snapshot(&self) -> bool {
        match *self {
            Self::Batched { snapshot, .. } | Self::Live { snapshot, .. } => snapshot,
        }
    }

    /// What the page cache holds of the database when the run starts.
    pub fn page_cache(&self) -> PageCache {
        match *self {
            Self::Batched { page_cache, .. } | Self::Live { page_cache, .. } => page_cache,
        }
    }

    /// Whether a thread verifies and decodes each block ahead of the writer.
    pub fn decode_ahead(&self) -> bool {
        match *self {
            Self::Batched { decode_ahead, .. } | Self::Live { decode_ahead, .. } => decode_ahead,
        }
    }

    /// A label for tables.
    pub fn label(&self) -> String {
        let (kind, mut parts) = match *self {
            Self::Batched { group, .. } => {
                ("batched", vec![format!("commit every {group} blocks")])
            }
            Self::Live { group: 1, .. } => ("live", vec!["root and commit every block".into()]),
            Self::Live { group, .. } => (
                "live",
                vec![format!("root every block, commit every {group} blocks")],
            ),
        };
        parts.push(self.sync().name().into());
        if let Self::Live {
            trie_cache,
            sparse_trie,
            root,
            prefetch,
            preload,
            overlap,
            commit_thread,
            ..
        } = *self
        {
            parts.push(cache_label(trie_cache));
            if sparse_trie > 0 {
                parts.push(format!(
                    "account trie in memory ({} MiB)",
                    sparse_trie >> 20
                ));
            }
            parts.push(root.label());
            if overlap {
                parts.push("roots overlap the next blocks".into());
            }
            if commit_thread {
                parts.push("commits on their own thread".into());
            }
            if prefetch {
                parts.push("prefetch".into());
            }
            if preload {
                parts.push("trie loaded at open".into());
            }
        }
        if self.decode_ahead() {
            parts.push("decoded ahead".into());
        }
        if self.write_map() {
            parts.push("write map".into());
        }
        if self.purge_delay_ms() != gigas_fullnode::alloc::DEFAULT_PURGE_DELAY_MS {
            parts.push(format!("freed memory kept {} ms", self.purge_delay_ms()));
        }
        if self.snapshot() {
            parts.push("while writing snapshots".into());
        }
        if self.page_cache() != PageCache::Warm {
            parts.push(format!("page cache {}", self.page_cache().name()));
        }
        format!("{kind} ({})", parts.join(", "))
    }

    /// A short name for files and directories.
    pub fn short(&self) -> String {
        let mut short = match *self {
            Self::Batched { group, sync, .. } => format!("batched-{group}-{}", sync.name()),
            Self::Live {
                sync,
                group,
                trie_cache,
                sparse_trie,
                root,
                prefetch,
                preload,
                overlap,
                commit_thread,
                ..
            } => format!(
                "live-{}{}-tc{}{}-{}{}{}{}{}",
                if group == 1 {
                    String::new()
                } else {
                    format!("{group}-")
                },
                sync.name(),
                trie_cache >> 20,
                if sparse_trie > 0 {
                    format!("-sp{}", sparse_trie >> 20)
                } else {
                    String::new()
                },
                root.short(),
                if overlap { "-ov" } else { "" },
                if commit_thread { "-ct" } else { "" },
                if prefetch { "-pf" } else { "" },
                if preload { "-pl" } else { "" }
            ),
        };
        if self.decode_ahead() {
            short.push_str("-da");
        }
        if self.write_map() {
            short.push_str("-wm");
        }
        if self.purge_delay_ms() != gigas_fullnode::alloc::DEFAULT_PURGE_DELAY_MS {
            short.push_str(&format!("-pd{}", self.purge_delay_ms()));
        }
        if self.snapshot() {
            short.push_str("-snap");
        }
        if self.page_cache() != PageCache::Warm {
            short.push('-');
            short.push_str(self.page_cache().name());
        }
        short
    }

    /// The writer's options for this mode.
    pub fn writer_options(&self) -> WriterOptions {
        match *self {
            // Count-bound only: a replay runs faster than real time, so the node's age bound
            // (for a follower waiting on the next block) would cut groups by wall time.
            Self::Batched { group, .. } => WriterOptions {
                root_every: 0,
                max_group_blocks: group,
                max_group_age: Duration::from_secs(24 * 3600),
                ..WriterOptions::default()
            },
            Self::Live {
                group,
                trie_cache,
                sparse_trie,
                root,
                overlap,
                commit_thread,
                ..
            } => WriterOptions {
                sparse_trie_bytes: usize::try_from(sparse_trie).unwrap_or(usize::MAX),
                root_every: 1,
                max_group_blocks: group,
                max_group_age: Duration::from_secs(24 * 3600),
                trie_cache_bytes: usize::try_from(trie_cache).unwrap_or(usize::MAX),
                layered_roots: root != RootArg::InTxn,
                root_threads: match root {
                    RootArg::InTxn => 1,
                    RootArg::Layered(n) => n,
                },
                overlap_roots: overlap,
                commit_thread,
                ..WriterOptions::default()
            },
        }
    }

    /// The target in state changes per second.
    pub fn target(&self) -> f64 {
        match self {
            Self::Batched { .. } => TARGET_BATCHED,
            Self::Live { .. } => TARGET_LIVE,
        }
    }
}

//! The account trie held in memory across roots ([`SparseAccounts`]): sixteen
//! [`SparseTrie`] parts, one per first nibble, each behind its own lock, the root node
//! assembled from their tops, and what they hold and did ([`SparseTrieStats`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use alloy_primitives::{keccak256, B256};
use alloy_trie::nodes::BranchNodeRef;
use alloy_trie::{BranchNodeCompact, Nibbles, TrieMask};

use super::{Drained, Emitted, SparseTrie};
use crate::error::TrieError;

/// The account trie held in memory across roots, in sixteen parts (one per first nibble,
/// each behind its own lock, so that a root's threads work on different parts at once), its
/// root node assembled from theirs. Off with a budget of 0.
#[derive(Debug)]
pub struct SparseAccounts {
    budget: usize,
    /// The parts describe the trie (else the next root sets them up from the stored root).
    ready: AtomicBool,
    parts: Vec<Mutex<SparseTrie>>,
    pruned: AtomicU64,
    loaded_leaves: AtomicU64,
    /// Bytes the parts held at the last root or fold (read without their locks).
    held: AtomicU64,
    /// Roots since the start, for the parts' ages.
    roots: AtomicU32,
    /// The root node as the last root left it, if it changed since the last drain
    /// (`Some(None)`: it is no longer stored).
    root_node: Mutex<Option<Option<BranchNodeCompact>>>,
}

/// What a [`SparseAccounts`] holds and did, for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SparseTrieStats {
    /// Its budget in bytes (0: off).
    pub budget: u64,
    /// Heap bytes held, estimated.
    pub bytes: u64,
    /// Nodes loaded.
    pub nodes: u64,
    /// Nodes folded back into hashes to stay within the budget, since the start.
    pub pruned: u64,
    /// Leaves read from the tables to load subtries, since the start.
    pub loaded_leaves: u64,
}

impl SparseAccounts {
    /// An account trie in memory within `budget` bytes (0: off).
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            ready: AtomicBool::new(false),
            parts: (0..16u8)
                .map(|n| Mutex::new(SparseTrie::empty(Nibbles::from_nibbles_unchecked([n]))))
                .collect(),
            pruned: AtomicU64::new(0),
            loaded_leaves: AtomicU64::new(0),
            held: AtomicU64::new(0),
            roots: AtomicU32::new(0),
            root_node: Mutex::new(None),
        }
    }

    /// Records the root node a root assembled (`None`: it is not stored), for the drain.
    pub fn set_root_node(&self, node: Option<BranchNodeCompact>) -> Result<(), TrieError> {
        *self
            .root_node
            .lock()
            .map_err(|_| TrieError::ThreadPanicked)? = Some(node);
        Ok(())
    }

    /// The branch nodes changed since the last drain (`None`: to delete), sorted by path:
    /// for the writer to store, once per group (or before anything reads the stored trie
    /// through the layer instead of this).
    pub fn drain(&self) -> Result<Drained, TrieError> {
        let mut out = Vec::new();
        if !self.ready() {
            return Ok(out);
        }
        let root = self
            .root_node
            .lock()
            .map_err(|_| TrieError::ThreadPanicked)?
            .take();
        if let Some(node) = root {
            out.push((Nibbles::new(), node));
        }
        // The parts on every core: a group's drain visits every node its roots touched.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(16));
        let next = AtomicUsize::new(0);
        let work = || -> Result<Vec<(usize, Drained)>, TrieError> {
            let mut done = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= 16 {
                    return Ok(done);
                }
                let mut part = Vec::new();
                self.part(n as u8)?.drain(&mut part);
                done.push((n, part));
            }
        };
        let mut parts = std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
            let mut all = work()?;
            for helper in helpers {
                all.extend(helper.join().map_err(|_| TrieError::ThreadPanicked)??);
            }
            Ok::<_, TrieError>(all)
        })?;
        parts.sort_unstable_by_key(|(n, _)| *n);
        out.reserve(parts.iter().map(|(_, p)| p.len()).sum());
        for (_, part) in parts {
            out.extend(part);
        }
        Ok(out)
    }

    /// Starts a root: its number, for [`SparseTrie::begin_at`].
    pub fn next_root(&self) -> u32 {
        self.roots.fetch_add(1, Ordering::Relaxed).saturating_add(1)
    }

    /// Its budget in bytes (0: off).
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Whether roots use it.
    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Whether the parts describe the trie.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Forgets everything: the next root sets the parts up again from the stored trie.
    pub fn clear(&self) {
        if let Ok(mut root) = self.root_node.lock() {
            *root = None;
        }
        if !self.ready.swap(false, Ordering::AcqRel) {
            return;
        }
        self.held.store(0, Ordering::Relaxed);
        for (n, part) in self.parts.iter().enumerate() {
            if let Ok(mut part) = part.lock() {
                *part = SparseTrie::empty(Nibbles::from_nibbles_unchecked([n as u8]));
            }
        }
    }

    /// Sets the parts up from the root node as stored (`None`: none is): each child's hash
    /// as a stub, or unknown when the node keeps none for it.
    pub fn set_up(&self, root: Option<&BranchNodeCompact>) -> Result<(), TrieError> {
        for (n, part) in self.parts.iter().enumerate() {
            let nibble = n as u8;
            let base = Nibbles::from_nibbles_unchecked([nibble]);
            let trie = match root {
                None => SparseTrie::unknown(base, true),
                Some(node) if !node.state_mask.is_bit_set(nibble) => SparseTrie::empty(base),
                Some(node) => {
                    let below = node.tree_mask.is_bit_set(nibble);
                    if node.hash_mask.is_bit_set(nibble) {
                        SparseTrie::stub(base, node.hash_for_nibble(nibble), true, below)
                    } else {
                        SparseTrie::unknown(base, below)
                    }
                }
            };
            *part.lock().map_err(|_| TrieError::ThreadPanicked)? = trie;
        }
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// The part of first nibble `nibble`, locked.
    pub fn part(&self, nibble: u8) -> Result<std::sync::MutexGuard<'_, SparseTrie>, TrieError> {
        self.parts[usize::from(nibble)]
            .lock()
            .map_err(|_| TrieError::ThreadPanicked)
    }

    /// Counts leaves a root read to load subtries.
    pub fn loaded(&self, leaves: u64) {
        self.loaded_leaves.fetch_add(leaves, Ordering::Relaxed);
    }

    /// The root, and the root node over the parts' tops as a walk would store it (`None`:
    /// not stored, or no branch at the root: fewer than two parts hold keys, and the root
    /// is the one part's top one nibble higher, or empty). Every part must be hashed.
    pub fn assemble(&self) -> Result<(B256, Option<BranchNodeCompact>), TrieError> {
        let (mut state, mut tree, mut hashed) = (0u16, 0u16, 0u16);
        let mut stack = Vec::with_capacity(16);
        let mut hashes = Vec::new();
        let mut unused = Emitted::default();
        let mut held = 0;
        for n in 0..16u8 {
            let mut part = self.part(n)?;
            held += part.bytes() as u64;
            let Some((rlp, branch, stored)) = part.hash(&mut unused)? else {
                continue;
            };
            let bit = 1u16 << n;
            state |= bit;
            if stored {
                tree |= bit;
            }
            if branch {
                if let Some(hash) = rlp.as_hash() {
                    hashed |= bit;
                    hashes.push(hash);
                }
            }
            stack.push(rlp);
        }
        self.held.store(held, Ordering::Relaxed);
        debug_assert!(unused.hashed == 0, "a part was not hashed by its job");
        if stack.len() < 2 {
            let Some(only) = (0..16u8).find(|n| state & (1 << n) != 0) else {
                return Ok((alloy_trie::EMPTY_ROOT_HASH, None));
            };
            let root = match self.part(only)?.lifted()? {
                Some(rlp) => rlp.as_hash().unwrap_or_else(|| keccak256(&rlp)),
                None => alloy_trie::EMPTY_ROOT_HASH,
            };
            return Ok((root, None));
        }
        let mut buf = Vec::with_capacity(600);
        let rlp = BranchNodeRef::new(&stack, TrieMask::new(state)).rlp(&mut buf);
        let root = rlp.as_hash().unwrap_or_else(|| keccak256(&rlp));
        let stored = tree != 0 || hashed != 0;
        let node = stored.then(|| {
            BranchNodeCompact::new(
                TrieMask::new(state),
                TrieMask::new(tree),
                TrieMask::new(hashed),
                hashes,
                Some(root),
            )
        });
        Ok((root, node))
    }

    /// Folds the least recently changed subtries back into hashes until the parts hold at
    /// most three quarters of the budget, if they hold more than it.
    pub fn enforce_budget(&self) -> Result<(), TrieError> {
        let bytes = |this: &Self| -> Result<usize, TrieError> {
            let mut total = 0;
            for n in 0..16u8 {
                total += this.part(n)?.bytes();
            }
            Ok(total)
        };
        let held = bytes(self)?;
        self.held.store(held as u64, Ordering::Relaxed);
        if held <= self.budget {
            return Ok(());
        }
        let mut span = 0;
        for n in 0..16u8 {
            span = span.max(self.part(n)?.span());
        }
        let mut age = span / 2;
        loop {
            let mut pruned = 0;
            for n in 0..16u8 {
                pruned += self.part(n)?.prune(age);
            }
            self.pruned.fetch_add(pruned as u64, Ordering::Relaxed);
            let held = bytes(self)?;
            self.held.store(held as u64, Ordering::Relaxed);
            if held <= self.budget / 4 * 3 || age == 0 {
                return Ok(());
            }
            age /= 2;
        }
    }

    /// Bytes held beyond the budget at the last root: the nodes a group changed (which
    /// stay until its commit writes them) and those loaded since the last fold. The next
    /// commit gives them back, so they count toward the group's memory bound.
    pub fn over_budget(&self) -> u64 {
        if !self.enabled() {
            return 0;
        }
        self.held
            .load(Ordering::Relaxed)
            .saturating_sub(self.budget as u64)
    }

    /// What it holds and did.
    pub fn stats(&self) -> SparseTrieStats {
        let (mut bytes, mut nodes) = (0u64, 0u64);
        for part in &self.parts {
            if let Ok(part) = part.lock() {
                bytes += part.bytes() as u64;
                nodes += part.len() as u64;
            }
        }
        SparseTrieStats {
            budget: self.budget as u64,
            bytes,
            nodes,
            pruned: self.pruned.load(Ordering::Relaxed),
            loaded_leaves: self.loaded_leaves.load(Ordering::Relaxed),
        }
    }
}

//! The incremental root: recompute only the changed paths, taking every unchanged subtrie's
//! hash from the stored branch nodes.
//!
//! A stored branch node (reth's layout: `BranchNodeCompact`) says, per child nibble, whether
//! the child exists (state mask), whether stored nodes lie below it (tree mask), and the
//! child's hash when the child is itself a branch (hash mask). A walk over the stored nodes in
//! path order decides each child of each node it enters:
//!
//! - unchanged (no changed key starts with its path) with a known hash: the child is fed to
//!   the hash builder as that hash, and none of its leaves are read;
//! - stored nodes below it and something to recompute: the walk enters the first stored node
//!   under it (the child itself, or the branch an extension leads to);
//! - otherwise its leaves are read from the hashed table (a leaf child, a small branch, or a
//!   subtrie that changed and has nothing stored).
//!
//! A child that does not exist and is unchanged has no leaves, so nothing is read for it: leaf
//! seeks happen only where something changed or a child is a plain leaf, not between every
//! two skipped siblings. Keys outside every stored node (above an extension at the top, or in
//! a trie with nothing stored yet) are read too, which makes a walk over an empty node table
//! a full computation, and a rebuild is just that.
//!
//! Every node the walk entered is replaced: the hash builder re-emits those that still
//! qualify for storage, and the caller deletes the others ([`TrieRun::removed`]).

use std::collections::VecDeque;

use alloy_primitives::B256;
use alloy_trie::nodes::LeafNodeRef;
use alloy_trie::proof::{ProofNodes, ProofRetainer};
use alloy_trie::{BranchNodeCompact, HashBuilder, Nibbles, TrieMask};

use crate::error::TrieError;
use crate::keys::{key_after, lower_key};
use crate::prefix::PrefixSet;

/// Where one trie's stored nodes and leaves come from.
pub trait TrieSource {
    /// A leaf as the hashed table holds it.
    type Leaf;
    /// What reading the storage can fail with; it takes in the engine's own failures.
    type Error: From<TrieError>;

    /// The first stored node in path order whose path starts with `path` (the node at
    /// `path` itself, or the first below it), if any.
    fn seek_node(
        &mut self,
        path: &Nibbles,
    ) -> Result<Option<(Nibbles, BranchNodeCompact)>, Self::Error>;

    /// The first leaf with a key at or after `key`.
    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, Self::Leaf)>, Self::Error>;

    /// The leaf after the last one returned.
    fn next_leaf(&mut self) -> Result<Option<(B256, Self::Leaf)>, Self::Error>;

    /// The leaf's value in the trie (RLP), into `out` (empty on entry).
    fn leaf_value(
        &mut self,
        key: &B256,
        leaf: &Self::Leaf,
        out: &mut Vec<u8>,
    ) -> Result<(), Self::Error>;

    /// The hashes of the leaf children of the node the last [`TrieSource::seek_node`]
    /// returned, as a past walk left them with it (see [`run_memo`]).
    fn take_leaf_hashes(&mut self) -> Option<LeafHashes> {
        None
    }

    /// Whether it gives back leaf hashes kept with nodes ([`TrieSource::take_leaf_hashes`]),
    /// so that a walk with updates should collect them ([`run_updates`]).
    fn remembers_leaves(&self) -> bool {
        false
    }
}

/// The hashes of some of a branch node's leaf children (children that are one leaf: neither
/// hashed in the stored node nor stored below it), by nibble. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafHashes {
    mask: u16,
    hashes: std::sync::Arc<[B256]>,
}

impl LeafHashes {
    /// The hash of the leaf child at `nibble`, if held.
    pub fn get(&self, nibble: u8) -> Option<B256> {
        let bit = 1u16 << nibble;
        (self.mask & bit != 0).then(|| self.hashes[(self.mask & (bit - 1)).count_ones() as usize])
    }

    /// One leaf child's hash.
    pub fn single(nibble: u8, hash: B256) -> Self {
        Self {
            mask: 1 << nibble,
            hashes: vec![hash].into(),
        }
    }

    /// Heap bytes it holds.
    pub fn heap_bytes(&self) -> usize {
        2 * size_of::<usize>() + self.hashes.len() * size_of::<B256>()
    }
}

/// Leaf hashes collected in nibble order.
#[derive(Debug, Default)]
struct LeafHashesBuilder {
    mask: u16,
    hashes: Vec<B256>,
}

impl LeafHashesBuilder {
    fn push(&mut self, nibble: u8, hash: B256) {
        debug_assert!(self.mask >> nibble == 0, "leaf hashes out of nibble order");
        self.mask |= 1 << nibble;
        self.hashes.push(hash);
    }

    fn build(self) -> Option<LeafHashes> {
        (self.mask != 0).then(|| LeafHashes {
            mask: self.mask,
            hashes: self.hashes.into(),
        })
    }
}

/// What a walk computed.
#[derive(Debug, Default)]
pub struct TrieRun {
    /// The trie's root.
    pub root: B256,
    /// Branch nodes to store, sorted by path.
    pub updates: Vec<(Nibbles, BranchNodeCompact)>,
    /// Stored nodes the walk entered: each is either in `updates` again or must go.
    pub removed: Vec<Nibbles>,
    /// Nodes along the proof targets' paths.
    pub proof: ProofNodes,
    /// Leaves hashed.
    pub leaves: u64,
    /// Subtries taken from their stored hash.
    pub skipped: u64,
    /// Leaves taken from their remembered hash ([`run_memo`]).
    pub remembered: u64,
    /// Each entered node's leaf children's hashes, as known after the walk, sorted by the
    /// node's path ([`run_memo`]): for the source to give back with the node next time.
    pub leaf_hashes: Vec<(Nibbles, LeafHashes)>,
    /// [`run_memo`] walked again without remembered hashes.
    pub reread: bool,
}

/// Computes the root of the trie `source` holds, recomputing what `changed` names (which
/// must include the proof targets). With `updates`, also the branch nodes to store.
pub fn run<S: TrieSource>(
    source: &mut S,
    changed: &PrefixSet,
    targets: Vec<Nibbles>,
    updates: bool,
) -> Result<TrieRun, S::Error> {
    run_spilling(source, changed, targets, updates, None)
}

/// [`run`] without updates that stops with [`TrieError::DeadlinePassed`] once `deadline`
/// passes (checked every [`DEADLINE_STEPS`] steps, the first included): proofs for RPC
/// requests, whose walks grow with the keys changed since the block asked for.
pub fn run_until<S: TrieSource>(
    source: &mut S,
    changed: &PrefixSet,
    targets: Vec<Nibbles>,
    deadline: Option<std::time::Instant>,
) -> Result<TrieRun, S::Error> {
    walk(source, changed, targets, false, None, Memo::Off, deadline)
}

/// Steps of a walk between two readings of the clock against its deadline: a step is a node
/// or a run of leaves, some microseconds, so the deadline is overrun by at most a millisecond
/// or so.
pub const DEADLINE_STEPS: u32 = 256;

/// [`run`] with updates, through [`run_memo`] when the source remembers leaf hashes (a
/// cache), else reading every leaf the walk needs: the one entry point of roots that store
/// their nodes.
pub fn run_updates<S: TrieSource>(
    source: &mut S,
    changed: &PrefixSet,
) -> Result<TrieRun, S::Error> {
    if source.remembers_leaves() {
        run_memo(source, changed)
    } else {
        run(source, changed, Vec::new(), true)
    }
}

/// [`run`] with updates, taking the hash of every unchanged leaf child of an entered node
/// from the hashes the source gave with the node ([`TrieSource::take_leaf_hashes`]) instead
/// of reading and hashing the leaf, and returning every entered node's leaf hashes as known
/// after the walk ([`TrieRun::leaf_hashes`]), for the source to keep with the node.
///
/// A stored node keeps no hash for its leaf children, so a walk otherwise reads every
/// sibling leaf of every changed key from the hashed table and hashes it again: over 10M
/// accounts about seven per changed account. The hashes kept with a node stay true while
/// the node is not entered: a change to a key under it makes the walk enter it, and its
/// hashes are then replaced by the ones this walk returns.
///
/// The hash builder takes a hash it is given as a branch child: the node above gets a hash
/// bit (and the hash) for it, which the stored layout keeps for branch children only. Those
/// are taken out of the updates afterwards. If the node above is then no longer a stored
/// node (its last branch child went), or no longer a branch (a deletion merged its
/// children), the given hash stood where the trie has no such child: the walk is done again
/// without remembered hashes, which gives the true root and updates.
pub fn run_memo<S: TrieSource>(source: &mut S, changed: &PrefixSet) -> Result<TrieRun, S::Error> {
    let mut fed = Vec::new();
    let mut out = walk(
        source,
        changed,
        Vec::new(),
        true,
        None,
        Memo::Feed(&mut fed),
        None,
    )?;
    if fed.is_empty() || unfeed(&mut out.updates, &fed) {
        return Ok(out);
    }
    let mut again = walk(source, changed, Vec::new(), true, None, Memo::Collect, None)?;
    again.reread = true;
    Ok(again)
}

/// Takes the hashes fed for the leaf children `fed` (in walk order, so a node's children
/// are consecutive) out of the nodes above them, each node rebuilt once. False when a node
/// above is not in `updates` as a branch with those children, or keeps no hash or stored
/// child once they are gone: the walk must be done again.
fn unfeed(updates: &mut [(Nibbles, BranchNodeCompact)], fed: &[Nibbles]) -> bool {
    let mut i = 0;
    while i < fed.len() {
        let Some(parent) = fed[i].len().checked_sub(1).map(|len| fed[i].slice(..len)) else {
            return false;
        };
        let mut mask = 0u16;
        while let Some(child) = fed.get(i).filter(|c| c.len() == parent.len() + 1) {
            if !child.starts_with(&parent) {
                break;
            }
            mask |= 1 << child.last().unwrap_or_default();
            i += 1;
        }
        let Ok(at) = updates.binary_search_by(|(path, _)| path.cmp(&parent)) else {
            return false;
        };
        let node = &mut updates[at].1;
        let (state, hashed) = (node.state_mask.get(), node.hash_mask.get());
        if state & mask != mask || hashed & mask != mask {
            return false;
        }
        let kept = (0..16u8)
            .filter(|n| hashed & (1 << n) != 0)
            .zip(node.hashes.iter())
            .filter(|(n, _)| mask & (1 << n) == 0)
            .map(|(_, hash)| *hash)
            .collect::<Vec<_>>();
        node.hashes = std::sync::Arc::new(kept);
        node.hash_mask = TrieMask::new(hashed & !mask);
        if node.hash_mask.is_empty() && node.tree_mask.is_empty() {
            return false;
        }
    }
    true
}

/// Where a spill sends finished branch nodes, sorted by path.
pub type SpillTo<'a, E> = &'a mut dyn FnMut(&[(Nibbles, BranchNodeCompact)]) -> Result<(), E>;

/// Branch nodes a rebuild holds before handing them to its spill (about 200 bytes each).
pub const SPILL_NODES: usize = 1 << 16;

/// Where a rebuild writes finished branch nodes as it goes, so that a trie of any size
/// holds at most `every` of them in memory ([`SPILL_NODES`] in production; tests spill
/// often). Only for walks over a trie with nothing stored (nothing is removed, and a node
/// is finished once).
#[allow(missing_debug_implementations)] // holds a closure
pub struct Spill<'a, E> {
    /// Nodes held before they are handed over.
    pub every: usize,
    /// Takes finished nodes, sorted by path.
    pub to: SpillTo<'a, E>,
}

/// [`run`], handing finished branch nodes to `spill` whenever `spill.every` are held.
pub fn run_spilling<S: TrieSource>(
    source: &mut S,
    changed: &PrefixSet,
    targets: Vec<Nibbles>,
    updates: bool,
    spill: Option<Spill<'_, S::Error>>,
) -> Result<TrieRun, S::Error> {
    walk(source, changed, targets, updates, spill, Memo::Off, None)
}

/// What a walk does with leaf hashes.
enum Memo<'f> {
    /// Reads and hashes every leaf it needs.
    Off,
    /// Also collects the entered nodes' leaf hashes.
    Collect,
    /// Also feeds the hashes the source gave with each node, their paths into the vector.
    Feed(&'f mut Vec<Nibbles>),
}

/// The walk.
fn walk<S: TrieSource>(
    source: &mut S,
    changed: &PrefixSet,
    targets: Vec<Nibbles>,
    updates: bool,
    mut spill: Option<Spill<'_, S::Error>>,
    mut memo: Memo<'_>,
    deadline: Option<std::time::Instant>,
) -> Result<TrieRun, S::Error> {
    if changed.is_empty() && targets.is_empty() {
        // Nothing changed: the stored root node carries the root.
        if let Some((path, node)) = source.seek_node(&Nibbles::new())? {
            if let (true, Some(root)) = (path.is_empty(), node.root_hash) {
                return Ok(TrieRun {
                    root,
                    ..TrieRun::default()
                });
            }
        }
    }
    let mut hb = HashBuilder::default().with_updates(updates);
    if !targets.is_empty() {
        hb = hb.with_proof_retainer(ProofRetainer::new(targets));
    }
    let mut walker = Walker {
        changed,
        collect: !matches!(memo, Memo::Off),
        feed: matches!(memo, Memo::Feed(_)),
        leaf_hashes: Vec::new(),
        stack: Vec::new(),
        queue: VecDeque::new(),
        started: false,
        removed: Vec::new(),
    };
    let mut feed = LeafFeed {
        peek: None,
        low: None,
        count: 0,
    };
    let mut buf = Vec::with_capacity(128);
    let mut rlp = Vec::with_capacity(128);
    let (mut skipped, mut remembered) = (0, 0);
    let mut steps = 0u32;
    while let Some(step) = walker.next(source)? {
        if let Some(deadline) = deadline {
            if steps.is_multiple_of(DEADLINE_STEPS) && std::time::Instant::now() >= deadline {
                return Err(TrieError::DeadlinePassed("a trie walk").into());
            }
            steps = steps.wrapping_add(1);
        }
        match step {
            Step::Skip { path, hash, stored } => {
                hb.add_branch(path, hash, stored);
                skipped += 1;
            }
            Step::Remembered { path, hash } => {
                hb.add_branch(path, hash, false);
                remembered += 1;
                if let Memo::Feed(fed) = &mut memo {
                    fed.push(path);
                }
            }
            Step::Leaves(range, leaf_child) => {
                // Feeding, a leaf child's one leaf is held back and given to the hash builder
                // as its hash, so that it is hashed once, here, not again by the builder.
                let hold = leaf_child.is_some() && matches!(memo, Memo::Feed(_));
                let single = feed.feed(source, &mut hb, range, &mut buf, &mut spill, hold)?;
                if let (Some(child), Some(key)) = (leaf_child, single) {
                    // `buf` still holds the one leaf's value. A leaf node under 32 bytes
                    // is inlined in its parent, not hashed: neither kept nor given.
                    rlp.clear();
                    let key = Nibbles::unpack(key);
                    let node = LeafNodeRef::new(&key.slice(child.len()..), &buf).rlp(&mut rlp);
                    let hash = node.as_hash();
                    if let Some(hash) = hash {
                        walker.collect_leaf(&child, hash);
                    }
                    match (hash, &mut memo) {
                        (Some(hash), Memo::Feed(fed)) if hold => {
                            hb.add_branch(child, hash, false);
                            fed.push(child);
                        }
                        _ if hold => hb.add_leaf(key, &buf),
                        _ => {}
                    }
                }
            }
        }
    }
    let root = hb.root();
    let proof = hb.take_proof_nodes();
    let (_, nodes) = hb.split();
    let mut nodes: Vec<_> = nodes.into_iter().collect();
    nodes.sort_unstable_by_key(|a| a.0);
    Ok(TrieRun {
        root,
        updates: nodes,
        removed: walker.removed,
        proof,
        leaves: feed.count,
        skipped,
        remembered,
        leaf_hashes: {
            let mut hashes = walker.leaf_hashes;
            hashes.sort_unstable_by_key(|(path, _)| *path);
            hashes
        },
        reread: false,
    })
}

/// A range of leaf keys: `from` inclusive (`None`: past the last key), `to` exclusive
/// (`None`: to the end).
#[derive(Debug, Clone, Copy)]
struct Range {
    from: Option<B256>,
    to: Option<B256>,
}

enum Step {
    Skip {
        path: Nibbles,
        hash: B256,
        stored: bool,
    },
    /// An unchanged leaf child, by its remembered hash.
    Remembered { path: Nibbles, hash: B256 },
    /// Leaves to read; with the path of a leaf child whose hash is to be remembered.
    Leaves(Range, Option<Nibbles>),
}

struct Frame {
    path: Nibbles,
    node: BranchNodeCompact,
    /// The next child nibble to decide (16: done).
    next: u8,
    /// Leaves to read once the node is done: the rest of the child range an extension led
    /// into this node from.
    tail: Option<Range>,
    /// Its leaf children's hashes as the source kept them.
    known: Option<LeafHashes>,
    /// Its leaf children's hashes as this walk knows them.
    collected: LeafHashesBuilder,
    /// The children under which some key changed, by nibble.
    changed: u16,
}

struct Walker<'p> {
    changed: &'p PrefixSet,
    /// Collect the hashes of entered nodes' leaf children.
    collect: bool,
    /// Feed unchanged leaf children by the hashes kept with their node.
    feed: bool,
    /// Each entered node's collected leaf hashes, as the nodes are done.
    leaf_hashes: Vec<(Nibbles, LeafHashes)>,
    stack: Vec<Frame>,
    queue: VecDeque<Step>,
    started: bool,
    removed: Vec<Nibbles>,
}

impl Walker<'_> {
    fn push_leaves(&mut self, from: Option<B256>, to: Option<B256>) {
        let empty = match (from, to) {
            (None, _) => true,
            (Some(from), Some(to)) => from >= to,
            (Some(_), None) => false,
        };
        if !empty {
            self.queue.push_back(Step::Leaves(Range { from, to }, None));
        }
    }

    /// Enters the stored node at `path`, the first under the child range `within` (the
    /// whole key space for the top node): the keys of the range before and after the
    /// node's own subtrie can only be new ones, and are read.
    fn enter(
        &mut self,
        within: &Nibbles,
        path: Nibbles,
        node: BranchNodeCompact,
        known: Option<LeafHashes>,
    ) {
        let tail = if &path == within {
            None
        } else {
            self.push_leaves(Some(lower_key(within)), Some(lower_key(&path)));
            Some(Range {
                from: key_after(&path),
                to: key_after(within),
            })
        };
        self.removed.push(path);
        let changed = self.changed.child_mask(&path);
        self.stack.push(Frame {
            path,
            node,
            next: 0,
            tail,
            known: known.filter(|_| self.feed),
            collected: LeafHashesBuilder::default(),
            changed,
        });
    }

    /// The hash of the leaf child `child` of the node being walked, just read.
    fn collect_leaf(&mut self, child: &Nibbles, hash: B256) {
        if let (Some(frame), Some(nibble)) = (self.stack.last_mut(), child.last()) {
            if child.len() == frame.path.len() + 1 && child.starts_with(&frame.path) {
                frame.collected.push(nibble, hash);
            }
        }
    }

    fn next<S: TrieSource>(&mut self, source: &mut S) -> Result<Option<Step>, S::Error> {
        loop {
            if let Some(step) = self.queue.pop_front() {
                return Ok(Some(step));
            }
            if !self.started {
                self.started = true;
                let top = Nibbles::new();
                match source.seek_node(&top)? {
                    Some((path, node)) => {
                        let known = source.take_leaf_hashes();
                        self.enter(&top, path, node, known);
                    }
                    None => self.push_leaves(Some(B256::ZERO), None),
                }
                continue;
            }
            let Some(frame) = self.stack.last_mut() else {
                return Ok(None);
            };
            if frame.next >= 16 {
                if let Some(done) = self.stack.pop() {
                    if self.collect {
                        if let Some(hashes) = done.collected.build() {
                            self.leaf_hashes.push((done.path, hashes));
                        }
                    }
                    if let Some(tail) = done.tail {
                        self.push_leaves(tail.from, tail.to);
                    }
                }
                continue;
            }
            let i = frame.next;
            frame.next += 1;
            let mut child = frame.path;
            child.push(i);
            let node = &frame.node;
            let present = node.state_mask.is_bit_set(i);
            let below = node.tree_mask.is_bit_set(i);
            let hashed = node.hash_mask.is_bit_set(i);
            let hash = (present && hashed).then(|| node.hash_for_nibble(i));
            let changed = frame.changed & (1 << i) != 0;
            if !present && !changed {
                continue;
            }
            if let (Some(hash), false) = (hash, changed) {
                return Ok(Some(Step::Skip {
                    path: child,
                    hash,
                    stored: below,
                }));
            }
            if present && below {
                if let Some((path, node)) = source.seek_node(&child)? {
                    let known = source.take_leaf_hashes();
                    self.enter(&child, path, node, known);
                    continue;
                }
                // The mask names a stored node that is not there: recompute from leaves.
            } else if present && !changed && self.collect {
                // A leaf child: neither hashed in the node nor stored below it.
                if let Some(hash) = frame.known.as_ref().and_then(|k| k.get(i)) {
                    frame.collected.push(i, hash);
                    return Ok(Some(Step::Remembered { path: child, hash }));
                }
                let range = Range {
                    from: Some(lower_key(&child)),
                    to: key_after(&child),
                };
                return Ok(Some(Step::Leaves(range, Some(child))));
            }
            self.push_leaves(Some(lower_key(&child)), key_after(&child));
        }
    }
}

/// Reads leaves range by range, seeking only when the cursor is not already at the range's
/// first leaf.
struct LeafFeed<L> {
    /// The first leaf at or after `low`.
    peek: Option<(B256, L)>,
    /// `(key, exclusive)`: what `peek` was found from (`None`: nothing read yet).
    low: Option<(B256, bool)>,
    count: u64,
}

impl<L> LeafFeed<L> {
    fn feed<S: TrieSource<Leaf = L>>(
        &mut self,
        source: &mut S,
        hb: &mut HashBuilder,
        range: Range,
        buf: &mut Vec<u8>,
        spill: &mut Option<Spill<'_, S::Error>>,
        hold: bool,
    ) -> Result<Option<B256>, S::Error> {
        let Some(from) = range.from else {
            return Ok(None);
        };
        let (mut fed, mut first) = (0u64, None);
        // With `hold`: the range's first leaf, not yet given to the hash builder.
        let mut held: Option<B256> = None;
        let positioned = match self.low {
            Some((low, exclusive)) => {
                (low < from || (low == from && !exclusive))
                    && self.peek.as_ref().is_none_or(|(key, _)| *key >= from)
            }
            None => false,
        };
        if !positioned {
            self.peek = source.seek_leaf(&from)?;
            self.low = Some((from, false));
        }
        while let Some((key, leaf)) = self.peek.take() {
            if range.to.is_some_and(|to| key >= to) {
                self.peek = Some((key, leaf));
                break;
            }
            if let Some(first) = held.take() {
                // A second leaf: the first one goes to the builder after all.
                hb.add_leaf(Nibbles::unpack(first), buf);
            }
            buf.clear();
            source.leaf_value(&key, &leaf, buf)?;
            if hold && fed == 0 {
                held = Some(key);
            } else {
                hb.add_leaf(Nibbles::unpack(key), buf);
            }
            self.count += 1;
            fed += 1;
            first.get_or_insert(key);
            if let Some(spill) = spill.as_mut() {
                let held = hb.updated_branch_nodes.as_ref().map_or(0, |u| u.len());
                if held >= spill.every {
                    let nodes = hb.updated_branch_nodes.replace(Default::default());
                    let mut nodes: Vec<_> = nodes.into_iter().flatten().collect();
                    nodes.sort_unstable_by_key(|n| n.0);
                    (spill.to)(&nodes)?;
                }
            }
            self.peek = source.next_leaf()?;
            self.low = Some((key, true));
        }
        // The range's leaf, if it held exactly one (its value is left in `buf`; with `hold`,
        // the builder has not had it).
        Ok(first.filter(|_| fed == 1))
    }
}

#[cfg(test)]
mod tests {
    //! The walk against alloy-trie's own root over an in-memory trie, through rounds of
    //! random changes with the stored nodes carried from round to round.

    use alloy_primitives::{keccak256, U256};

    use super::*;
    use crate::testing::{reference, Memory};

    #[test]
    fn incremental_roots_match_from_scratch_roots() {
        let mut trie = Memory::default();
        let mut seed = 7u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut remembered, mut rereads) = (0, 0);
        for round in 0..60 {
            let mut changed = Vec::new();
            let count = if round == 0 { 3000 } else { 1 + rand() % 200 };
            for _ in 0..count {
                // Few distinct keys in later rounds, so that deletions hit stored paths.
                let key = keccak256((rand() % 4000).to_be_bytes());
                changed.push(key);
                if rand() % 3 == 0 {
                    trie.leaves.remove(&key);
                } else {
                    trie.leaves.insert(key, U256::from(rand()));
                }
            }
            let set = PrefixSet::new(changed);
            let memo = run_memo(&mut trie, &set).unwrap();
            let out = run(&mut trie, &set, Vec::new(), true).unwrap();
            assert_eq!(out.root, reference(&trie.leaves), "round {round}");
            // Remembered hashes change how much is read, never what is computed.
            assert_eq!(memo.root, out.root, "round {round}");
            assert_eq!(memo.updates, out.updates, "round {round}");
            assert_eq!(memo.removed, out.removed, "round {round}");
            remembered += memo.remembered;
            rereads += u64::from(memo.reread);
            if memo.remembered > 0 && !memo.reread {
                assert!(memo.leaves < out.leaves, "round {round}");
            }
            for path in &out.removed {
                trie.nodes.remove(path);
                trie.kept.remove(path);
            }
            // As the writer's cache keeps them: with the stored nodes they describe.
            for (path, hashes) in memo.leaf_hashes {
                if out.updates.binary_search_by(|(p, _)| p.cmp(&path)).is_ok() {
                    trie.kept.insert(path, hashes);
                }
            }
            for (path, node) in out.updates {
                trie.nodes.insert(path, node);
            }
            if round > 0 && count < 50 {
                assert!(out.skipped > 0, "round {round} skipped nothing");
                assert!(out.leaves < trie.leaves.len() as u64 / 2);
            }
            // Unchanged: the stored root answers.
            let again = run(&mut trie, &PrefixSet::default(), Vec::new(), true).unwrap();
            assert_eq!(again.root, out.root);
        }
        assert!(
            remembered > 1000,
            "{remembered} leaves from remembered hashes"
        );
        assert!(
            rereads > 0,
            "no deletion changed the shape around a remembered leaf"
        );
        // A rebuild that spills as it goes stores the same nodes as one that does not.
        let mut spilled = Vec::new();
        let mut collect = |nodes: &[(Nibbles, BranchNodeCompact)]| {
            spilled.extend_from_slice(nodes);
            Ok(())
        };
        let mut bare = Memory::with_leaves(trie.leaves.clone());
        let all = PrefixSet::all();
        let spill = Spill {
            every: 16,
            to: &mut collect,
        };
        let out = run_spilling(&mut bare, &all, Vec::new(), true, Some(spill)).unwrap();
        let whole = run(&mut bare, &all, Vec::new(), true).unwrap();
        assert_eq!(out.root, whole.root);
        assert!(spilled.len() > 16, "{} spilled", spilled.len());
        spilled.extend(out.updates);
        spilled.sort_unstable_by_key(|n| n.0);
        assert_eq!(spilled, whole.updates);
        let stored: Vec<_> = trie.nodes.iter().map(|(p, n)| (*p, n.clone())).collect();
        assert_eq!(
            stored, whole.updates,
            "incremental and rebuilt nodes differ"
        );

        // Delete everything: the empty root, nothing left stored.
        let keys: Vec<B256> = trie.leaves.keys().copied().collect();
        trie.leaves.clear();
        let out = run(&mut trie, &PrefixSet::new(keys), Vec::new(), true).unwrap();
        assert_eq!(out.root, alloy_trie::EMPTY_ROOT_HASH);
        assert!(out.updates.is_empty());
    }
}

//! A trie held in memory across roots: only the paths of changed keys are re-hashed.
//!
//! **Why.** The walk ([`crate::walk`]) keeps nothing between roots: every root seeks
//! the stored branch nodes on each changed key's path in MDBX, and reads and hashes every
//! sibling leaf of every changed key again (a stored node keeps no hash for its leaf
//! children), about seven leaves per changed account over 10M accounts. Here the nodes a root
//! revealed stay in memory with their encodings (reth's sparse trie, `crates/trie/sparse`, in
//! spirit): a root descends each changed key's path, replaces the leaf, and re-hashes the
//! nodes it passed, bottom up; every other subtrie answers with the encoding it kept.
//!
//! **Revealed on demand, from the stored trie.** A subtrie the trie has not seen is a
//! stub: its hash as its stored parent gives it. A key whose path enters a stub
//! loads it: its stored branch node (with the hashes of its branch children as stubs), and
//! its other children from the leaves under them, which it hashes once. So the first root
//! after a start costs what a walk costs; later ones touch what is already loaded.
//!
//! **The same nodes as a walk.** The trie emits the branch nodes to store under the hash
//! builder's rules (a child's hash bit when it is a branch with a hashed encoding, its tree
//! bit when it is, or leads through an extension to, a stored branch; a node stored when it
//! has either), so the stored tables, the layer and proofs are unchanged, and a root from
//! scratch over them agrees.
//!
//! **Bounded.** Every node records the last root that changed it; past the budget, the least
//! recently changed subtries are folded back into stubs ([`SparseTrie::prune`]).
//!
//! It must describe exactly the trie its source holds (the last commit with the open group
//! over it): whoever changes that trie another way (a discarded group, a rebuild, a root in
//! the write transaction) clears it.

use alloy_primitives::{keccak256, B256};
use alloy_rlp::Encodable;
use alloy_trie::nodes::{BranchNodeRef, ExtensionNodeRef, LeafNodeRef, RlpNode};
use alloy_trie::{BranchNodeCompact, Nibbles, TrieMask};
use gigas_primitives::keccak::keccak256_each;

use crate::error::TrieError;
use crate::keys::lower_key;
use crate::walk::TrieSource;

mod accounts;

pub use accounts::SparseAccounts;
pub use accounts::SparseTrieStats;

/// A child of a node (or the top of a trie).
#[derive(Debug, Clone)]
enum Slot {
    /// No key under it.
    Empty,
    /// A subtrie not loaded: its encoding (a hash), whether it is directly a branch, and
    /// whether stored nodes lie in it, as its stored parent said.
    Stub {
        rlp: RlpNode,
        branch: bool,
        stored: bool,
    },
    /// A subtrie not loaded whose encoding is not known either (a top whose parent keeps
    /// no hash for it): loaded before it is hashed.
    Unknown { stored: bool },
    /// A loaded node, by index.
    Node(u32),
}

#[derive(Debug)]
enum Kind {
    /// The rest of the key below the node's path, and the leaf's value.
    Leaf {
        suffix: Nibbles,
        value: Vec<u8>,
    },
    Extension {
        key: Nibbles,
        child: Slot,
    },
    Branch {
        children: Box<[Slot; 16]>,
        /// Stored in the trie tables, as of its last hashing (or its loading).
        stored: bool,
    },
}

#[derive(Debug)]
struct Node {
    kind: Kind,
    /// Its encoding, while it is not changed.
    rlp: Option<RlpNode>,
    /// Changed since its last hashing.
    dirty: bool,
    /// Changed since the last drain: the next one stores it (a branch that qualifies).
    pending: bool,
    /// With `rlp`: stored nodes lie at or below it (its parent's tree bit).
    tree: bool,
    /// The last root that changed or loaded it.
    touched: u32,
}

/// What a parent needs of a child: its encoding and its two mask bits.
struct Info {
    rlp: RlpNode,
    /// Directly a branch (its parent's hash bit, with a hashed encoding).
    branch: bool,
    /// A stored branch lies at its top (its parent's tree bit).
    stored: bool,
}

/// The leaf a source stands at (`None`: past the last).
type Next<S> = Option<(B256, <S as TrieSource>::Leaf)>;

/// What [`SparseTrie::preload`] does with a child: go down into a loaded node, or load the
/// stored branch a stub stands for (keeping its encoding).
enum Visit {
    Node(u32),
    Stub(RlpNode),
}

impl Visit {
    /// `None`: nothing to load under it (empty, a leaf's hash, or a subtrie with no stored
    /// node).
    fn of(slot: &Slot) -> Option<Self> {
        match slot {
            Slot::Node(id) => Some(Self::Node(*id)),
            Slot::Stub {
                rlp,
                branch: true,
                stored: true,
            } => Some(Self::Stub(rlp.clone())),
            _ => None,
        }
    }
}

/// What a root's loads and hashing did.
#[derive(Debug, Default)]
pub struct Emitted {
    /// Leaves read from the source to load subtries.
    pub leaves_read: u64,
    /// Nodes hashed.
    pub hashed: u64,
}

/// Branch nodes to store (`None`: to delete), sorted by path: what a drain gives.
pub type Drained = Vec<(Nibbles, Option<BranchNodeCompact>)>;

/// Bytes a node costs beyond its leaf value's heap, estimated (the node, its arena slot, a
/// branch's sixteen children).
const NODE_BYTES: usize = size_of::<Node>() + 8;
const BRANCH_BYTES: usize = size_of::<[Slot; 16]>();

/// Nodes in chunks that never move: growing adds a chunk instead of copying (and faulting
/// in) the whole vector again, which a trie warming to millions of nodes would do at every
/// doubling.
#[derive(Debug, Default)]
struct Arena {
    chunks: Vec<Vec<Node>>,
    len: usize,
}

/// Nodes per chunk (about 2.5 MB).
const CHUNK: usize = 1 << 14;

impl Arena {
    fn push(&mut self, node: Node) -> u32 {
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(node);
        }
        self.len += 1;
        // Four billion nodes are far past any budget.
        u32::try_from(self.len - 1).unwrap_or(u32::MAX)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Asks the CPU to bring node `id` into its cache. A branch's hashing reads each of its
    /// children, scattered through the arena: one by one, each read waited for memory
    /// (the reads of a child's encoding took 44 % of `hash_node`'s own time).
    fn prefetch(&self, id: u32) {
        let id = id as usize;
        #[cfg(target_arch = "x86_64")]
        if let Some(node) = self.chunks.get(id / CHUNK).and_then(|c| c.get(id % CHUNK)) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let at = std::ptr::from_ref(node).cast::<i8>();
            // A node spans two cache lines; its encoding is in the second.
            // SAFETY: a prefetch is a hint that never faults, whatever the address, and SSE
            // (which the intrinsic needs) is part of every x86-64 CPU.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(at);
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(64));
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Node> {
        self.chunks.iter().flatten()
    }
}

impl std::ops::Index<u32> for Arena {
    type Output = Node;

    fn index(&self, id: u32) -> &Node {
        let id = id as usize;
        &self.chunks[id / CHUNK][id % CHUNK]
    }
}

impl std::ops::IndexMut<u32> for Arena {
    fn index_mut(&mut self, id: u32) -> &mut Node {
        let id = id as usize;
        &mut self.chunks[id / CHUNK][id % CHUNK]
    }
}

/// One trie (or one subtrie under a fixed path) held in memory.
#[derive(Debug)]
pub struct SparseTrie {
    /// The path of its top.
    base: Nibbles,
    top: Slot,
    nodes: Arena,
    free: Vec<u32>,
    /// Heap bytes held, estimated.
    bytes: usize,
    /// Roots seen, for [`Node::touched`].
    now: u32,
    /// The root of the last drain: nodes touched since lie on changed paths (or were
    /// loaded since).
    drained_at: u32,
    /// Stored branch nodes that went since the last drain (a collapse, or a branch that no
    /// longer qualifies), by path.
    removed: Vec<Nibbles>,
    /// Scratch for encodings.
    buf: Vec<u8>,
    /// Scratch of the level-by-level hashing, kept across roots.
    scratch: HashScratch,
}

/// Changed nodes whose scratch a root keeps for the next one (about 3 MB); a larger root's
/// is given back.
const SCRATCH_NODES: usize = 1 << 16;

/// What [`SparseTrie::hash_changed`] reuses from root to root: the changed nodes by depth
/// with their paths, a level's encodings, those waiting for their hash (node, span in the
/// encodings, tree bit) and their digests.
#[derive(Debug, Default)]
struct HashScratch {
    levels: Vec<Vec<(u32, Nibbles)>>,
    encodings: Vec<u8>,
    pending: Vec<(u32, usize, usize, bool)>,
    digests: Vec<B256>,
}

impl SparseTrie {
    /// A trie under `base` that has loaded nothing: its top is loaded from the source on
    /// first use, from the stored node at `base` when `stored`, else from its leaves.
    pub fn unknown(base: Nibbles, stored: bool) -> Self {
        Self::with_top(base, Slot::Unknown { stored })
    }

    /// A trie under `base` whose top is the subtrie with this hash, as its stored parent
    /// says it (`branch`: directly a branch; `stored`: stored nodes lie in it).
    pub fn stub(base: Nibbles, hash: B256, branch: bool, stored: bool) -> Self {
        Self::with_top(
            base,
            Slot::Stub {
                rlp: RlpNode::word_rlp(&hash),
                branch,
                stored,
            },
        )
    }

    /// A trie under `base` with no key.
    pub fn empty(base: Nibbles) -> Self {
        Self::with_top(base, Slot::Empty)
    }

    fn with_top(base: Nibbles, top: Slot) -> Self {
        Self {
            base,
            top,
            nodes: Arena::default(),
            free: Vec::new(),
            bytes: 0,
            now: 0,
            drained_at: 0,
            removed: Vec::new(),
            buf: Vec::with_capacity(600),
            scratch: HashScratch::default(),
        }
    }

    /// Heap bytes its loaded nodes hold, estimated. (The arena keeps the slots of freed
    /// nodes for reuse, so its high-water mark stays, bounded by the budget it was pruned
    /// to.)
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Loaded nodes.
    pub fn len(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Whether it holds no node.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts a root: what it changes is recorded as changed by it.
    #[cfg(test)]
    pub fn begin(&mut self) {
        self.now = self.now.saturating_add(1);
    }

    /// Starts root number `now` (of a count shared by the parts of one trie).
    pub fn begin_at(&mut self, now: u32) {
        self.now = now;
    }

    /// Sets the leaf at `key` (a full path under the base) to `value` (`None`: no leaf),
    /// loading from `source` what its path enters. Removing a key that is not there, or
    /// setting a value it already has, changes nothing but the path's encodings.
    pub fn set<S: TrieSource>(
        &mut self,
        key: &Nibbles,
        value: Option<Vec<u8>>,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<(), S::Error> {
        debug_assert!(key.starts_with(&self.base), "key outside the trie's base");
        let top = std::mem::replace(&mut self.top, Slot::Empty);
        let base = self.base;
        match self.set_in(top.clone(), base, key, value, source, emitted) {
            Ok(slot) => {
                self.top = slot;
                Ok(())
            }
            Err(e) => {
                // A failed load leaves the path half changed: the caller clears the trie.
                self.top = top;
                Err(e)
            }
        }
    }

    /// Loads the top if nothing says its encoding yet.
    pub fn ensure_top<S: TrieSource>(
        &mut self,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<(), S::Error> {
        if let Slot::Unknown { stored } = self.top {
            let base = self.base;
            self.top = self.load(&base, stored, source, emitted)?;
        }
        Ok(())
    }

    /// Loads the stored branch nodes under its top, breadth first (the upper levels first),
    /// until it holds `max_bytes` or none is left: what roots would load at each subtrie's
    /// first change, read ahead, so that a node that starts holds what a long run would.
    /// A stored node's lone leaves come as their hashes, as a root loads them; subtries
    /// that hold no stored node (a few leaves) stay stubs. Changes nothing: a loaded node
    /// keeps the encoding its stub gave, and nothing loaded is drained.
    pub fn preload<S: TrieSource>(
        &mut self,
        source: &mut S,
        emitted: &mut Emitted,
        max_bytes: usize,
    ) -> Result<(), S::Error> {
        self.ensure_top(source, emitted)?;
        let base = self.base;
        if let Some(Visit::Stub(rlp)) = Visit::of(&self.top) {
            let slot = self.load(&base, true, source, emitted)?;
            self.top = self.adopt(slot, rlp);
        }
        let mut level = match self.top {
            Slot::Node(id) => vec![(id, base)],
            _ => Vec::new(),
        };
        while !level.is_empty() {
            let mut next = Vec::new();
            for (id, path) in level {
                // The children to go down into or to load (index 16: an extension's child).
                let (children, below): (Vec<(usize, Visit)>, Nibbles) = match &self.nodes[id].kind {
                    Kind::Branch { children, .. } => (
                        children
                            .iter()
                            .enumerate()
                            .filter_map(|(i, c)| Some((i, Visit::of(c)?)))
                            .collect(),
                        path,
                    ),
                    Kind::Extension { key, child } => (
                        Visit::of(child).map(|v| (16, v)).into_iter().collect(),
                        path.join(key),
                    ),
                    Kind::Leaf { .. } => continue,
                };
                for (i, visit) in children {
                    let mut at = below;
                    if i < 16 {
                        at.push(i as u8);
                    }
                    let rlp = match visit {
                        Visit::Node(c) => {
                            next.push((c, at));
                            continue;
                        }
                        Visit::Stub(rlp) => rlp,
                    };
                    if self.bytes >= max_bytes {
                        return Ok(());
                    }
                    let loaded = self.load(&at, true, source, emitted)?;
                    let loaded = self.adopt(loaded, rlp);
                    if let Slot::Node(c) = loaded {
                        next.push((c, at));
                    }
                    match &mut self.nodes[id].kind {
                        Kind::Branch { children, .. } if i < 16 => children[i] = loaded,
                        Kind::Extension { child, .. } => *child = loaded,
                        _ => {}
                    }
                }
            }
            level = next;
        }
        Ok(())
    }

    /// A stored branch loaded in place of its stub keeps the stub's encoding: its parent's
    /// encoding, cached, still holds, and pruning can fold it back.
    fn adopt(&mut self, slot: Slot, rlp: RlpNode) -> Slot {
        if let Slot::Node(id) = slot {
            let node = &mut self.nodes[id];
            if let Kind::Branch { stored: true, .. } = node.kind {
                node.rlp = Some(rlp);
                node.tree = true;
            }
        }
        slot
    }

    /// The top's encoding (`None`: the trie is empty) and mask bits, hashing what changed
    /// and emitting the changed branch nodes. The top must be known ([`Self::ensure_top`]).
    pub fn hash(
        &mut self,
        emitted: &mut Emitted,
    ) -> Result<Option<(RlpNode, bool, bool)>, TrieError> {
        let top = self.top.clone();
        let base = self.base;
        Ok(self
            .hash_slot(&top, base, emitted)?
            .map(|info| (info.rlp, info.branch, info.stored)))
    }

    /// The top's encoding one nibble higher, as the whole trie's root node when the part
    /// is the only one holding keys: a leaf or an extension with the base's last nibble
    /// before its key, a branch behind an extension of that nibble. `None`: empty. The
    /// part must be hashed.
    fn lifted(&self) -> Result<Option<RlpNode>, TrieError> {
        let lead = self.base.slice(self.base.len().saturating_sub(1)..);
        let behind = |rlp: &RlpNode| {
            let mut buf = Vec::with_capacity(64);
            ExtensionNodeRef::new(&lead, rlp).rlp(&mut buf)
        };
        let unloaded = || TrieError::Unloaded { path: self.base };
        let mut buf = Vec::with_capacity(128);
        Ok(Some(match &self.top {
            Slot::Empty => return Ok(None),
            // Only a branch is a stub at the top (its stored parent's hash bit).
            Slot::Stub {
                rlp, branch: true, ..
            } => behind(rlp),
            Slot::Stub { .. } | Slot::Unknown { .. } => return Err(unloaded()),
            Slot::Node(id) => {
                let node = &self.nodes[*id];
                match &node.kind {
                    Kind::Leaf { suffix, value } => {
                        LeafNodeRef::new(&lead.join(suffix), value).rlp(&mut buf)
                    }
                    Kind::Extension { key, child } => {
                        let child = match child {
                            Slot::Stub { rlp, .. } => rlp,
                            Slot::Node(c) => self.nodes[*c].rlp.as_ref().ok_or_else(unloaded)?,
                            Slot::Empty | Slot::Unknown { .. } => return Err(unloaded()),
                        };
                        ExtensionNodeRef::new(&lead.join(key), child).rlp(&mut buf)
                    }
                    Kind::Branch { .. } => behind(node.rlp.as_ref().ok_or_else(unloaded)?),
                }
            }
        }))
    }

    /// The root hash of a trie whose base is the empty path.
    #[cfg(test)]
    pub fn root(&mut self, emitted: &mut Emitted) -> Result<B256, TrieError> {
        Ok(match self.hash(emitted)? {
            None => alloy_trie::EMPTY_ROOT_HASH,
            Some((rlp, _, _)) => rlp.as_hash().unwrap_or_else(|| keccak256(&rlp)),
        })
    }

    /// Whether the top's encoding is not known yet ([`Self::ensure_top`] loads it).
    pub fn top_unknown(&self) -> bool {
        matches!(self.top, Slot::Unknown { .. })
    }

    fn alloc(&mut self, kind: Kind, dirty: bool) -> Slot {
        self.bytes += NODE_BYTES
            + match &kind {
                Kind::Leaf { value, .. } => value.capacity(),
                Kind::Branch { .. } => BRANCH_BYTES,
                Kind::Extension { .. } => 0,
            };
        let node = Node {
            kind,
            rlp: None,
            dirty,
            pending: dirty,
            tree: false,
            touched: self.now,
        };
        match self.free.pop() {
            Some(id) => {
                self.nodes[id] = node;
                Slot::Node(id)
            }
            None => Slot::Node(self.nodes.push(node)),
        }
    }

    /// Frees one node (not its children).
    fn release(&mut self, id: u32) {
        let node = &mut self.nodes[id];
        let held = NODE_BYTES
            + match &node.kind {
                Kind::Leaf { value, .. } => value.capacity(),
                Kind::Branch { .. } => BRANCH_BYTES,
                Kind::Extension { .. } => 0,
            };
        node.kind = Kind::Extension {
            key: Nibbles::new(),
            child: Slot::Empty,
        };
        node.rlp = None;
        self.bytes = self.bytes.saturating_sub(held);
        self.free.push(id);
    }

    /// Frees a node and everything loaded below it.
    fn release_all(&mut self, id: u32) {
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            match &self.nodes[id].kind {
                Kind::Branch { children, .. } => {
                    stack.extend(children.iter().filter_map(|c| match c {
                        Slot::Node(c) => Some(*c),
                        _ => None,
                    }))
                }
                Kind::Extension {
                    child: Slot::Node(c),
                    ..
                } => stack.push(*c),
                _ => {}
            }
            self.release(id);
        }
    }

    /// Marks a node changed by this root.
    fn touch(&mut self, id: u32) {
        let now = self.now;
        let node = &mut self.nodes[id];
        node.rlp = None;
        node.dirty = true;
        node.pending = true;
        node.touched = now;
    }

    fn leaf(&mut self, suffix: Nibbles, value: Vec<u8>) -> Slot {
        self.alloc(Kind::Leaf { suffix, value }, true)
    }

    /// Loads the subtrie at `path`: from its stored node when `stored` says one lies
    /// there, else (or when none does after all) from its leaves. Nothing loaded is
    /// changed: hashing it emits nothing.
    fn load<S: TrieSource>(
        &mut self,
        path: &Nibbles,
        stored: bool,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<Slot, S::Error> {
        if stored {
            if let Some((at, node)) = source.seek_node(path)? {
                if at.starts_with(path) {
                    return self.reveal(path, at, node, source, emitted);
                }
            }
        }
        self.read_leaves(path, source, emitted)
    }

    /// The stored branch node `node` at `at`, reached from `path` (through an extension
    /// when longer).
    fn reveal<S: TrieSource>(
        &mut self,
        path: &Nibbles,
        at: Nibbles,
        node: BranchNodeCompact,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<Slot, S::Error> {
        let mut children: Box<[Slot; 16]> = Box::new(std::array::from_fn(|_| Slot::Empty));
        // The leaf after the last child read from leaves, and that child: the next child's
        // leaves follow it without a seek when the two are neighbours.
        let mut after: Option<(u8, Next<S>)> = None;
        for i in 0..16u8 {
            if !node.state_mask.is_bit_set(i) {
                continue;
            }
            let below = node.tree_mask.is_bit_set(i);
            let mut child = at;
            child.push(i);
            children[usize::from(i)] = if node.hash_mask.is_bit_set(i) {
                Slot::Stub {
                    rlp: RlpNode::word_rlp(&node.hash_for_nibble(i)),
                    branch: true,
                    stored: below,
                }
            } else if below {
                after = None;
                self.load(&child, below, source, emitted)?
            } else {
                let first = match after.take() {
                    Some((last, next)) if last + 1 == i => Some(next),
                    _ => None,
                };
                let (slot, next) = self.read_from(&child, first, true, source, emitted)?;
                after = Some((i, next));
                slot
            };
        }
        let branch = self.alloc(
            Kind::Branch {
                children,
                stored: true,
            },
            false,
        );
        if at.len() == path.len() {
            return Ok(branch);
        }
        Ok(self.alloc(
            Kind::Extension {
                key: at.slice(path.len()..),
                child: branch,
            },
            false,
        ))
    }

    /// The subtrie at `path` built from the leaves under it.
    fn read_leaves<S: TrieSource>(
        &mut self,
        path: &Nibbles,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<Slot, S::Error> {
        Ok(self.read_from(path, None, false, source, emitted)?.0)
    }

    /// [`Self::read_leaves`], from `first` when given (the source stands at the first leaf
    /// at or after the path's lowest key, read already), and the leaf after them. With
    /// `hash_single`, a lone leaf comes back as its hash: a sibling loaded with a changed
    /// key's node is rarely changed itself, so it costs a slot, not a node and its value
    /// (a change to it later reads it again).
    fn read_from<S: TrieSource>(
        &mut self,
        path: &Nibbles,
        first: Option<Next<S>>,
        hash_single: bool,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<(Slot, Next<S>), S::Error> {
        let mut leaves = Vec::new();
        let mut next = match first {
            Some(first) => first,
            None => source.seek_leaf(&lower_key(path))?,
        };
        while let Some((key, leaf)) = next {
            let nibbles = Nibbles::unpack(key);
            if !nibbles.starts_with(path) {
                next = Some((key, leaf));
                break;
            }
            let mut value = Vec::new();
            source.leaf_value(&key, &leaf, &mut value)?;
            leaves.push((nibbles, value));
            next = source.next_leaf()?;
        }
        emitted.leaves_read += leaves.len() as u64;
        if let ([(key, value)], true) = (leaves.as_slice(), hash_single) {
            self.buf.clear();
            let rlp = LeafNodeRef::new(&key.slice(path.len()..), value).rlp(&mut self.buf);
            emitted.hashed += 1;
            let stub = Slot::Stub {
                rlp,
                branch: false,
                stored: false,
            };
            return Ok((stub, next));
        }
        let mut slot = Slot::Empty;
        for (key, value) in leaves {
            slot = self.insert_clean(slot, *path, &key, value);
        }
        Ok((slot, next))
    }

    /// Inserts a leaf read from the source into a subtrie being built from leaves in key
    /// order: nothing built this way was stored, and none of it is changed.
    fn insert_clean(&mut self, slot: Slot, path: Nibbles, key: &Nibbles, value: Vec<u8>) -> Slot {
        let rest = key.slice(path.len()..);
        let id = match slot {
            Slot::Node(id) => id,
            _ => {
                return self.alloc(
                    Kind::Leaf {
                        suffix: rest,
                        value,
                    },
                    false,
                )
            }
        };
        match &mut self.nodes[id].kind {
            Kind::Leaf { suffix, .. } => {
                let suffix = *suffix;
                self.split_leaf(id, suffix, rest, value, false)
            }
            Kind::Extension { key: ext, child } => {
                let ext = *ext;
                let common = rest.common_prefix_length(&ext);
                if common == ext.len() {
                    let child = std::mem::replace(child, Slot::Empty);
                    let new = self.insert_clean(child, path.join(&ext), key, value);
                    if let Kind::Extension { child, .. } = &mut self.nodes[id].kind {
                        *child = new;
                    }
                    Slot::Node(id)
                } else {
                    self.split_extension(id, ext, rest, common, value, false)
                }
            }
            Kind::Branch { children, .. } => {
                let nibble = rest.get_unchecked(0);
                let child = std::mem::replace(&mut children[usize::from(nibble)], Slot::Empty);
                let mut below = path;
                below.push(nibble);
                let new = self.insert_clean(child, below, key, value);
                if let Kind::Branch { children, .. } = &mut self.nodes[id].kind {
                    children[usize::from(nibble)] = new;
                }
                Slot::Node(id)
            }
        }
    }

    /// Replaces the leaf `id` (suffix `suffix`) by a branch over it and a new leaf `rest`.
    fn split_leaf(
        &mut self,
        id: u32,
        suffix: Nibbles,
        rest: Nibbles,
        value: Vec<u8>,
        dirty: bool,
    ) -> Slot {
        let common = rest.common_prefix_length(&suffix);
        // Keys have one length: two different ones part before either ends.
        debug_assert!(common < suffix.len() && common < rest.len());
        let (old, new) = (suffix.get_unchecked(common), rest.get_unchecked(common));
        if let Kind::Leaf { suffix: s, .. } = &mut self.nodes[id].kind {
            *s = suffix.slice(common + 1..);
        }
        self.mark(id, dirty);
        self.fork((old, Slot::Node(id)), (new, rest), common, value, dirty)
    }

    /// A node changed in place: by a root (`dirty`), or while a subtrie is built from
    /// leaves (only its encoding is gone).
    fn mark(&mut self, id: u32, dirty: bool) {
        if dirty {
            self.touch(id);
        } else {
            self.nodes[id].rlp = None;
        }
    }

    /// The branch where a new key `rest` parts from what was there (`lower`, under its
    /// nibble) after `common` shared nibbles, with the new key's leaf, under an extension
    /// of the shared nibbles if any.
    fn fork(
        &mut self,
        lower: (u8, Slot),
        (new, rest): (u8, Nibbles),
        common: usize,
        value: Vec<u8>,
        dirty: bool,
    ) -> Slot {
        let leaf = self.alloc(
            Kind::Leaf {
                suffix: rest.slice(common + 1..),
                value,
            },
            dirty,
        );
        let mut children: Box<[Slot; 16]> = Box::new(std::array::from_fn(|_| Slot::Empty));
        children[usize::from(lower.0)] = lower.1;
        children[usize::from(new)] = leaf;
        let branch = self.alloc(
            Kind::Branch {
                children,
                stored: false,
            },
            dirty,
        );
        if common == 0 {
            return branch;
        }
        self.alloc(
            Kind::Extension {
                key: rest.slice(..common),
                child: branch,
            },
            dirty,
        )
    }

    /// Splits the extension `id` (key `ext`) where `rest` leaves it (after `common`
    /// nibbles), with a new leaf for `rest`.
    fn split_extension(
        &mut self,
        id: u32,
        ext: Nibbles,
        rest: Nibbles,
        common: usize,
        value: Vec<u8>,
        dirty: bool,
    ) -> Slot {
        let (old, new) = (ext.get_unchecked(common), rest.get_unchecked(common));
        let lower = if common + 1 < ext.len() {
            if let Kind::Extension { key, .. } = &mut self.nodes[id].kind {
                *key = ext.slice(common + 1..);
            }
            self.mark(id, dirty);
            Slot::Node(id)
        } else {
            let child = match &mut self.nodes[id].kind {
                Kind::Extension { child, .. } => std::mem::replace(child, Slot::Empty),
                _ => Slot::Empty,
            };
            self.release(id);
            child
        };
        // The extension's first `common` nibbles are the new key's too.
        self.fork((old, lower), (new, rest), common, value, dirty)
    }

    fn set_in<S: TrieSource>(
        &mut self,
        slot: Slot,
        path: Nibbles,
        key: &Nibbles,
        value: Option<Vec<u8>>,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<Slot, S::Error> {
        let id = match slot {
            Slot::Empty => {
                return Ok(match value {
                    Some(value) => self.leaf(key.slice(path.len()..), value),
                    None => Slot::Empty,
                });
            }
            Slot::Stub { stored, .. } | Slot::Unknown { stored } => {
                let loaded = self.load(&path, stored, source, emitted)?;
                return self.set_in(loaded, path, key, value, source, emitted);
            }
            Slot::Node(id) => id,
        };
        self.touch(id);
        let rest = key.slice(path.len()..);
        match &mut self.nodes[id].kind {
            Kind::Leaf { suffix, value: old } => {
                if *suffix == rest {
                    match value {
                        Some(value) => {
                            self.bytes =
                                self.bytes.saturating_sub(old.capacity()) + value.capacity();
                            *old = value;
                            Ok(Slot::Node(id))
                        }
                        None => {
                            self.release(id);
                            Ok(Slot::Empty)
                        }
                    }
                } else {
                    let suffix = *suffix;
                    Ok(match value {
                        Some(value) => self.split_leaf(id, suffix, rest, value, true),
                        None => Slot::Node(id),
                    })
                }
            }
            Kind::Extension { key: ext, child } => {
                let ext = *ext;
                let common = rest.common_prefix_length(&ext);
                if common == ext.len() {
                    let child = std::mem::replace(child, Slot::Empty);
                    let new = self.set_in(child, path.join(&ext), key, value, source, emitted)?;
                    Ok(self.reattach(id, ext, new))
                } else {
                    Ok(match value {
                        Some(value) => self.split_extension(id, ext, rest, common, value, true),
                        None => Slot::Node(id),
                    })
                }
            }
            Kind::Branch { children, .. } => {
                let nibble = rest.get_unchecked(0);
                let child = std::mem::replace(&mut children[usize::from(nibble)], Slot::Empty);
                let mut below = path;
                below.push(nibble);
                let new = self.set_in(child, below, key, value, source, emitted)?;
                let emptied = matches!(new, Slot::Empty);
                if let Kind::Branch { children, .. } = &mut self.nodes[id].kind {
                    children[usize::from(nibble)] = new;
                }
                if emptied {
                    self.collapse(id, path, source, emitted)
                } else {
                    Ok(Slot::Node(id))
                }
            }
        }
    }

    /// Puts `new`, what the child of the extension `id` (key `ext`) became, back under it,
    /// merging the two when the child is no longer a branch.
    fn reattach(&mut self, id: u32, ext: Nibbles, new: Slot) -> Slot {
        let Slot::Node(child) = new else {
            // Only a branch is ever below an extension, and a branch changed by one key
            // stays a node: this is the emptied case.
            self.release(id);
            return new;
        };
        match &mut self.nodes[child].kind {
            Kind::Leaf { suffix, .. } => {
                *suffix = ext.join(suffix);
            }
            Kind::Extension { key, .. } => {
                *key = ext.join(key);
            }
            Kind::Branch { .. } => {
                if let Kind::Extension { child: c, .. } = &mut self.nodes[id].kind {
                    *c = new;
                }
                return Slot::Node(id);
            }
        }
        self.touch(child);
        self.release(id);
        Slot::Node(child)
    }

    /// The branch `id` at `path` after a child went: itself while two children remain,
    /// else what its last child becomes one nibble higher.
    fn collapse<S: TrieSource>(
        &mut self,
        id: u32,
        path: Nibbles,
        source: &mut S,
        emitted: &mut Emitted,
    ) -> Result<Slot, S::Error> {
        let Kind::Branch { children, stored } = &mut self.nodes[id].kind else {
            return Ok(Slot::Node(id));
        };
        let stored = *stored;
        let mut left = children
            .iter()
            .enumerate()
            .filter(|(_, c)| !matches!(c, Slot::Empty));
        let Some((nibble, _)) = left.next() else {
            if stored {
                self.removed.push(path);
            }
            self.release(id);
            return Ok(Slot::Empty);
        };
        if left.next().is_some() {
            return Ok(Slot::Node(id));
        }
        let nibble = nibble as u8;
        let last = std::mem::replace(&mut children[usize::from(nibble)], Slot::Empty);
        let mut below = path;
        below.push(nibble);
        let last = match last {
            Slot::Stub { stored, .. } | Slot::Unknown { stored } => {
                self.load(&below, stored, source, emitted)?
            }
            other => other,
        };
        if stored {
            self.removed.push(path);
        }
        let Slot::Node(child) = last else {
            self.release(id);
            return Ok(Slot::Empty);
        };
        let lead = Nibbles::from_nibbles_unchecked([nibble]);
        match &mut self.nodes[child].kind {
            Kind::Leaf { suffix, .. } => {
                *suffix = lead.join(suffix);
            }
            Kind::Extension { key, .. } => {
                *key = lead.join(key);
            }
            Kind::Branch { .. } => {
                // The branch stays where it is; this node becomes the extension to it.
                self.bytes = self.bytes.saturating_sub(BRANCH_BYTES);
                self.nodes[id].kind = Kind::Extension {
                    key: lead,
                    child: Slot::Node(child),
                };
                return Ok(Slot::Node(id));
            }
        }
        self.touch(child);
        self.release(id);
        Ok(Slot::Node(child))
    }

    fn hash_slot(
        &mut self,
        slot: &Slot,
        path: Nibbles,
        emitted: &mut Emitted,
    ) -> Result<Option<Info>, TrieError> {
        Ok(match slot {
            Slot::Empty => None,
            Slot::Stub {
                rlp,
                branch,
                stored,
            } => Some(Info {
                rlp: rlp.clone(),
                branch: *branch,
                stored: *stored,
            }),
            Slot::Unknown { .. } => return Err(TrieError::Unloaded { path }),
            Slot::Node(id) => {
                self.hash_changed(*id, path, emitted)?;
                Some(self.info(*id).ok_or_else(|| TrieError::Invariant {
                    what: format!("sparse trie node at {path:?} not hashed after its root"),
                })?)
            }
        })
    }

    /// A hashed node's encoding and mask bits (`None`: not hashed since it changed).
    fn info(&self, id: u32) -> Option<Info> {
        let node = &self.nodes[id];
        let rlp = node.rlp.clone()?;
        let (branch, stored) = match &node.kind {
            Kind::Branch { stored, .. } => (true, *stored),
            _ => (false, node.tree),
        };
        Some(Info {
            rlp,
            branch,
            stored,
        })
    }

    /// Hashes every node at or under `top` changed since its last hashing, a depth at a
    /// time from the deepest up: the nodes of one depth depend only on deeper ones, so
    /// their encodings go to [`keccak256_each`] together (eight at once where the CPU has
    /// AVX-512) instead of one by one as a post-order walk would.
    fn hash_changed(
        &mut self,
        top: u32,
        path: Nibbles,
        emitted: &mut Emitted,
    ) -> Result<(), TrieError> {
        if self.nodes[top].rlp.is_some() {
            return Ok(());
        }
        let mut levels = std::mem::take(&mut self.scratch.levels);
        let mut stack = vec![(top, path, 0usize)];
        while let Some((id, path, depth)) = stack.pop() {
            if levels.len() <= depth {
                levels.resize_with(depth + 1, Vec::new);
            }
            levels[depth].push((id, path));
            let changed = |c: &u32| self.nodes[*c].rlp.is_none();
            match &self.nodes[id].kind {
                Kind::Leaf { .. } => {}
                Kind::Extension { key, child } => {
                    if let Slot::Node(c) = child {
                        if changed(c) {
                            stack.push((*c, path.join(key), depth + 1));
                        }
                    }
                }
                Kind::Branch { children, .. } => {
                    // Every child is read to learn whether it changed, and they lie
                    // scattered through the arena: asked for all at once, their cache
                    // misses overlap instead of following one another (this loop was
                    // about half of the hashing's own time without).
                    for slot in children.iter() {
                        if let Slot::Node(c) = slot {
                            self.nodes.prefetch(*c);
                        }
                    }
                    for (i, slot) in children.iter().enumerate() {
                        if let Slot::Node(c) = slot {
                            if changed(c) {
                                let mut below = path;
                                below.push(i as u8);
                                stack.push((*c, below, depth + 1));
                            }
                        }
                    }
                }
            }
        }
        let mut result = Ok(());
        for level in levels.iter_mut().rev() {
            if result.is_ok() {
                result = self.hash_level(level, emitted);
            }
            level.clear();
        }
        // Kept for the next root unless a large one (a catch-up group's) grew it.
        if levels.iter().map(Vec::capacity).sum::<usize>() <= SCRATCH_NODES {
            self.scratch.levels = levels;
        }
        if self.scratch.encodings.capacity() > SCRATCH_NODES * 64 {
            self.scratch = HashScratch::default();
        }
        result
    }

    /// Encodes the nodes of one depth (their children hashed already) and hashes the
    /// encodings of 32 bytes or more together; a shorter one is its own reference.
    fn hash_level(
        &mut self,
        level: &[(u32, Nibbles)],
        emitted: &mut Emitted,
    ) -> Result<(), TrieError> {
        let mut encodings = std::mem::take(&mut self.scratch.encodings);
        let mut pending = std::mem::take(&mut self.scratch.pending);
        encodings.clear();
        pending.clear();
        let mut result = Ok(());
        for &(id, path) in level {
            emitted.hashed += 1;
            let start = encodings.len();
            let stored = match self.encode(id, path, &mut encodings) {
                Ok(stored) => stored,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if encodings.len() - start < 32 {
                let rlp = RlpNode::from_raw(&encodings[start..]).unwrap_or_default();
                encodings.truncate(start);
                self.hashed(id, rlp, stored);
            } else {
                pending.push((id, start, encodings.len(), stored));
            }
        }
        if result.is_ok() && !pending.is_empty() {
            let messages: Vec<&[u8]> = pending
                .iter()
                .map(|&(_, start, end, _)| &encodings[start..end])
                .collect();
            let mut digests = std::mem::take(&mut self.scratch.digests);
            digests.clear();
            digests.resize(messages.len(), B256::ZERO);
            keccak256_each(&messages, &mut digests);
            for (&(id, _, _, stored), digest) in pending.iter().zip(&digests) {
                self.hashed(id, RlpNode::word_rlp(digest), stored);
            }
            self.scratch.digests = digests;
        }
        self.scratch.encodings = encodings;
        self.scratch.pending = pending;
        result
    }

    /// A node's encoding and mask bits are known: it is clean.
    fn hashed(&mut self, id: u32, rlp: RlpNode, stored: bool) {
        let node = &mut self.nodes[id];
        node.rlp = Some(rlp);
        node.tree = stored;
        node.dirty = false;
    }

    /// Appends node `id`'s encoding to `out` (its children must be hashed) and returns
    /// its parent's tree bit for it. A branch records whether it is stored now, and one
    /// that no longer qualifies is noted for the drain.
    fn encode(&mut self, id: u32, path: Nibbles, out: &mut Vec<u8>) -> Result<bool, TrieError> {
        let not_hashed = |path: Nibbles| TrieError::Invariant {
            what: format!("sparse trie: the child at {path:?} was to be hashed before its parent"),
        };
        let node = &self.nodes[id];
        Ok(match &node.kind {
            Kind::Leaf { suffix, value } => {
                LeafNodeRef::new(suffix, value).encode(out);
                false
            }
            Kind::Extension { key, child } => {
                let below = path.join(key);
                let child = match child {
                    Slot::Stub { rlp, stored, .. } => Info {
                        rlp: rlp.clone(),
                        branch: false,
                        stored: *stored,
                    },
                    Slot::Node(c) => self.info(*c).ok_or_else(|| not_hashed(below))?,
                    Slot::Empty | Slot::Unknown { .. } => {
                        return Err(TrieError::Unloaded { path: below })
                    }
                };
                ExtensionNodeRef::new(key, &child.rlp).encode(out);
                child.stored
            }
            Kind::Branch { children, stored } => {
                let was_stored = *stored;
                for slot in children.iter() {
                    if let Slot::Node(c) = slot {
                        self.nodes.prefetch(*c);
                    }
                }
                let (mut state, mut tree, mut hashed) = (0u16, 0u16, 0u16);
                // On the stack: a root re-hashes thousands of branches.
                let mut stack: [RlpNode; 16] = Default::default();
                let mut len = 0;
                for (i, slot) in children.iter().enumerate() {
                    let below = || {
                        let mut below = path;
                        below.push(i as u8);
                        below
                    };
                    let info = match slot {
                        Slot::Empty => continue,
                        Slot::Stub {
                            rlp,
                            branch,
                            stored,
                        } => Info {
                            rlp: rlp.clone(),
                            branch: *branch,
                            stored: *stored,
                        },
                        Slot::Unknown { .. } => return Err(TrieError::Unloaded { path: below() }),
                        Slot::Node(c) => {
                            let child = &self.nodes[*c];
                            Info {
                                rlp: child.rlp.clone().ok_or_else(|| not_hashed(below()))?,
                                branch: matches!(child.kind, Kind::Branch { .. }),
                                stored: child.tree,
                            }
                        }
                    };
                    let bit = 1u16 << i;
                    state |= bit;
                    if info.stored {
                        tree |= bit;
                    }
                    if info.branch && info.rlp.is_hash() {
                        hashed |= bit;
                    }
                    stack[len] = info.rlp;
                    len += 1;
                }
                BranchNodeRef::new(&stack[..len], TrieMask::new(state)).encode(out);
                let now_stored = tree != 0 || hashed != 0;
                if node.dirty && was_stored && !now_stored {
                    self.removed.push(path);
                }
                if let Kind::Branch { stored, .. } = &mut self.nodes[id].kind {
                    *stored = now_stored;
                }
                now_stored
            }
        })
    }

    /// The branch nodes to store since the last drain, and those to delete, sorted by path,
    /// appended to `out`: what changed, as a walk's updates over the same roots would have
    /// left the tables (a node changed by several roots once, as it is now). Every node
    /// must be hashed.
    pub fn drain(&mut self, out: &mut Drained) {
        let start = out.len();
        if let Slot::Node(top) = self.top {
            let base = self.base;
            self.drain_node(top, base, out);
        }
        let mut removed = std::mem::take(&mut self.removed);
        removed.sort_unstable();
        removed.dedup();
        let stored = &out[start..];
        let gone: Vec<_> = removed
            .into_iter()
            .filter(|p| stored.binary_search_by(|(q, _)| q.cmp(p)).is_err())
            .map(|p| (p, None))
            .collect();
        if !gone.is_empty() {
            out.extend(gone);
            out[start..].sort_unstable_by_key(|(p, _)| *p);
        }
        self.drained_at = self.now;
    }

    /// Depth first in nibble order, so in path order.
    fn drain_node(&mut self, id: u32, path: Nibbles, out: &mut Drained) {
        let drained_at = self.drained_at;
        let node = &mut self.nodes[id];
        if node.touched <= drained_at {
            return;
        }
        let pending = std::mem::replace(&mut node.pending, false);
        match &node.kind {
            Kind::Leaf { .. } => {}
            Kind::Extension { key, child } => {
                if let Slot::Node(c) = *child {
                    let below = path.join(key);
                    self.drain_node(c, below, out);
                }
            }
            Kind::Branch { stored, .. } => {
                if pending && *stored {
                    let node = self.compact(id, &path);
                    out.push((path, Some(node)));
                }
                for i in 0..16u8 {
                    let Kind::Branch { children, .. } = &self.nodes[id].kind else {
                        break;
                    };
                    if let Slot::Node(c) = children[usize::from(i)] {
                        let mut child = path;
                        child.push(i);
                        self.drain_node(c, child, out);
                    }
                }
            }
        }
    }

    /// The stored form of the hashed branch `id` at `path`.
    fn compact(&self, id: u32, path: &Nibbles) -> BranchNodeCompact {
        let node = &self.nodes[id];
        let (mut state, mut tree, mut hashed) = (0u16, 0u16, 0u16);
        // The node keeps its hashes' `Vec` (behind an `Arc`) until the group is written, and
        // most branches deep in the trie hash none or one of their children: a vector sized
        // for sixteen held 512 bytes for every branch node the group changed, fresh memory
        // the kernel zeroed at each commit (seen on one core as bursts of `clear_page_erms`
        // under this function). Gather them here, then allocate what they need.
        let mut found = [B256::ZERO; 16];
        let mut count = 0;
        if let Kind::Branch { children, .. } = &node.kind {
            for (i, child) in children.iter().enumerate() {
                let (rlp, branch, stored) = match child {
                    Slot::Empty | Slot::Unknown { .. } => continue,
                    Slot::Stub {
                        rlp,
                        branch,
                        stored,
                    } => (Some(rlp), *branch, *stored),
                    Slot::Node(c) => {
                        let c = &self.nodes[*c];
                        (
                            c.rlp.as_ref(),
                            matches!(c.kind, Kind::Branch { .. }),
                            c.tree,
                        )
                    }
                };
                let bit = 1u16 << i;
                state |= bit;
                if stored {
                    tree |= bit;
                }
                if let (true, Some(hash)) = (branch, rlp.and_then(RlpNode::as_hash)) {
                    hashed |= bit;
                    found[count] = hash;
                    count += 1;
                }
            }
        }
        let root = path.is_empty().then(|| {
            node.rlp.as_ref().map_or(B256::ZERO, |rlp| {
                rlp.as_hash().unwrap_or_else(|| keccak256(rlp))
            })
        });
        BranchNodeCompact::new(
            TrieMask::new(state),
            TrieMask::new(tree),
            TrieMask::new(hashed),
            found[..count].to_vec(),
            root,
        )
    }

    /// Folds the subtries no root changed in the last `age` roots (all of them with 0)
    /// back into stubs (the top stays), after a hashing (every node has
    /// its encoding). Returns the nodes freed.
    pub fn prune(&mut self, age: u32) -> usize {
        let before = self.len();
        // Nothing changed since the last drain: its stored nodes are written (or in the
        // layer), so it can be loaded again from them.
        let cutoff = self.now.saturating_sub(age).min(self.drained_at);
        let Slot::Node(top) = self.top else {
            return 0;
        };
        let mut stack = vec![top];
        while let Some(id) = stack.pop() {
            let children: Vec<(usize, u32)> = match &self.nodes[id].kind {
                Kind::Branch { children, .. } => children
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| match c {
                        Slot::Node(c) => Some((i, *c)),
                        _ => None,
                    })
                    .collect(),
                Kind::Extension {
                    child: Slot::Node(c),
                    ..
                } => vec![(16, *c)],
                _ => Vec::new(),
            };
            for (i, child) in children {
                let node = &self.nodes[child];
                let stub = match (&node.rlp, node.touched <= cutoff) {
                    (Some(rlp), true) => Some(Slot::Stub {
                        rlp: rlp.clone(),
                        branch: matches!(node.kind, Kind::Branch { .. }),
                        stored: node.tree,
                    }),
                    _ => None,
                };
                match stub {
                    Some(stub) => {
                        self.release_all(child);
                        match &mut self.nodes[id].kind {
                            Kind::Branch { children, .. } => children[i] = stub,
                            Kind::Extension { child, .. } => *child = stub,
                            Kind::Leaf { .. } => {}
                        }
                    }
                    None => stack.push(child),
                }
            }
        }
        before - self.len()
    }

    /// The roots since the oldest change a loaded node holds, for choosing a prune age.
    pub fn span(&self) -> u32 {
        let oldest = self
            .nodes
            .iter()
            .filter(|n| n.rlp.is_some())
            .map(|n| n.touched)
            .min()
            .unwrap_or(self.now);
        self.now - oldest
    }
}

#[cfg(test)]
mod tests {
    //! The trie held in memory against a walk's root and stored nodes, through rounds of
    //! random changes with the stored nodes carried from round to round.

    use alloy_primitives::{keccak256, U256};

    use super::*;
    use crate::prefix::PrefixSet;
    use crate::testing::{reference, Memory};
    use crate::walk;

    use gigas_test_support::XorShift as Rng;

    /// Rounds of random sets and deletions over a small key space (so that deletions
    /// collapse branches and inserts split leaves and extensions), the trie kept across
    /// rounds and pruned hard every few: each root and every stored node as a walk
    /// computes them, and the root as a hash builder over all leaves computes it.
    fn rounds(keys: u64, first: u64, seed: u64, prune_every: u64) {
        rounds_preloading(keys, first, seed, prune_every, None);
    }

    /// [`rounds`], loading the stored nodes ahead within `preload` bytes every fifth round.
    fn rounds_preloading(
        keys: u64,
        first: u64,
        seed: u64,
        prune_every: u64,
        preload: Option<usize>,
    ) {
        let mut mem = Memory::default();
        let mut rng = Rng(seed);
        let mut trie = SparseTrie::unknown(Nibbles::new(), true);
        let (mut loaded_from_leaves, mut pruned) = (0, 0);
        for round in 0..80u64 {
            let count = if round == 0 {
                first
            } else {
                1 + rng.next_u64() % 60
            };
            let mut changed = Vec::new();
            for _ in 0..count {
                let key = keccak256((rng.next_u64() % keys).to_be_bytes());
                changed.push(key);
                if rng.next_u64().is_multiple_of(3) {
                    mem.leaves.remove(&key);
                } else {
                    mem.leaves
                        .insert(key, U256::from(rng.next_u64() % 1000 + 1));
                }
            }
            let set = PrefixSet::new(changed.clone());
            // The walk over the stored nodes as they were, before this round's.
            let walked = walk::run(&mut mem, &set, Vec::new(), true).unwrap();
            trie.begin();
            let mut emitted = Emitted::default();
            trie.ensure_top(&mut mem, &mut emitted).unwrap();
            for key in set.keys() {
                let value = mem.leaves.get(key).map(alloy_rlp::encode);
                trie.set(&Nibbles::unpack(key), value, &mut mem, &mut emitted)
                    .unwrap();
            }
            let root = trie.root(&mut emitted).unwrap();
            let mut drained = Vec::new();
            trie.drain(&mut drained);
            assert!(
                drained.windows(2).all(|w| w[0].0 < w[1].0),
                "drain out of order"
            );
            let updates: Vec<_> = drained
                .iter()
                .filter_map(|(p, n)| n.clone().map(|n| (*p, n)))
                .collect();
            let removed_now: Vec<Nibbles> = drained
                .iter()
                .filter(|(_, n)| n.is_none())
                .map(|(p, _)| *p)
                .collect();
            assert_eq!(root, reference(&mem.leaves), "round {round}");
            assert_eq!(root, walked.root, "round {round}");
            // The walk also stores again, unchanged, a stored branch it entered only for
            // its hash (one behind an extension); the trie stores what changed.
            for (path, node) in &walked.updates {
                match updates.binary_search_by(|(p, _)| p.cmp(path)) {
                    Ok(at) => assert_eq!(&updates[at].1, node, "round {round}: {path:?}"),
                    Err(_) => assert_eq!(
                        mem.nodes.get(path),
                        Some(node),
                        "round {round}: {path:?} changed, not stored"
                    ),
                }
            }
            for (path, _) in &updates {
                assert!(
                    walked
                        .updates
                        .binary_search_by(|(p, _)| p.cmp(path))
                        .is_ok(),
                    "round {round}: {path:?} stored, not by the walk"
                );
            }
            // What the walk removes and does not store again, the trie removes too; it
            // never removes a node it stores.
            let gone: std::collections::BTreeSet<_> = walked
                .removed
                .iter()
                .filter(|p| walked.updates.binary_search_by(|(u, _)| u.cmp(p)).is_err())
                .copied()
                .collect();
            let removed: std::collections::BTreeSet<_> = removed_now
                .iter()
                .filter(|p| mem.nodes.contains_key(*p))
                .copied()
                .collect();
            assert_eq!(removed, gone, "round {round}: removed");
            for p in &removed {
                mem.nodes.remove(p);
            }
            for (p, n) in updates {
                mem.nodes.insert(p, n);
            }
            loaded_from_leaves += emitted.leaves_read;
            if prune_every > 0 && round % prune_every == prune_every - 1 {
                pruned += trie.prune(1);
            }
            // Unchanged: the same root without hashing anything again.
            let mut again = Emitted::default();
            assert_eq!(trie.root(&mut again).unwrap(), root);
            assert_eq!(again.hashed, 0);
            let mut none = Vec::new();
            trie.drain(&mut none);
            assert!(none.is_empty(), "round {round}: drained twice");
            if let Some(bytes) = preload.filter(|_| round % 5 == 2) {
                // Loading ahead changes nothing: the same root, nothing hashed, nothing
                // to store.
                let before = trie.len();
                let mut loading = Emitted::default();
                trie.preload(&mut mem, &mut loading, bytes).unwrap();
                assert!(
                    trie.len() >= before,
                    "round {round}: preloading freed nodes"
                );
                let mut again = Emitted::default();
                assert_eq!(trie.root(&mut again).unwrap(), root, "round {round}");
                assert_eq!(
                    again.hashed, 0,
                    "round {round}: a loaded node lost its hash"
                );
                trie.drain(&mut none);
                assert!(none.is_empty(), "round {round}: preloading drained");
            }
        }
        if keys >= 1000 {
            assert!(loaded_from_leaves > 0);
        }
        if prune_every > 0 {
            assert!(pruned > 0, "nothing pruned");
        }
    }

    /// `keys` random leaves with every branch node a rebuild stores.
    fn stored_trie(keys: u64, seed: u64) -> Memory {
        let mut mem = Memory::default();
        let mut rng = Rng(seed);
        for i in 0..keys {
            mem.leaves.insert(
                keccak256(i.to_be_bytes()),
                U256::from(rng.next_u64() % 1000 + 1),
            );
        }
        let built = walk::run(&mut mem, &PrefixSet::all(), Vec::new(), true).unwrap();
        mem.nodes.extend(built.updates);
        mem
    }

    #[test]
    fn roots_and_stored_nodes_match_the_walk() {
        rounds(3000, 2000, 7, 0);
    }

    #[test]
    fn pruned_subtries_load_again_and_agree() {
        rounds(3000, 2000, 11, 3);
    }

    #[test]
    fn a_few_keys_split_and_merge_extensions() {
        // Tiny tries: a lone leaf, extensions at the top, everything deleted and back.
        rounds(6, 1, 3, 0);
        rounds(40, 5, 5, 2);
    }

    #[test]
    fn preloaded_tries_agree_with_the_walk() {
        rounds_preloading(3000, 2000, 13, 0, Some(usize::MAX));
        // Within a budget that stops it part way, and pruned back hard after.
        rounds_preloading(3000, 2000, 17, 0, Some(40_000));
        rounds_preloading(3000, 2000, 19, 3, Some(usize::MAX));
        rounds_preloading(40, 5, 23, 2, Some(usize::MAX));
    }

    #[test]
    fn preload_loads_every_stored_node_and_a_change_reads_few_leaves() {
        let mut mem = stored_trie(5000, 5);
        let mut trie = SparseTrie::unknown(Nibbles::new(), true);
        trie.begin();
        let mut emitted = Emitted::default();
        trie.preload(&mut mem, &mut emitted, usize::MAX).unwrap();
        let stored = mem.nodes.len();
        assert!(
            trie.len() >= stored,
            "{} nodes loaded of {stored} stored",
            trie.len()
        );
        // The lone leaves under stored nodes were read (a quarter or so of the keys).
        assert!(emitted.leaves_read > 500, "{}", emitted.leaves_read);
        let mut hashing = Emitted::default();
        assert_eq!(trie.root(&mut hashing).unwrap(), reference(&mem.leaves));
        // Hardly anything was hashed: what was loaded in place of a stub kept its hash.
        assert!(hashing.hashed < 20, "{} nodes hashed", hashing.hashed);
        // A change now reads at most the few leaves of the unstored subtrie it enters, not
        // the siblings of a stored node.
        let key = keccak256(17u64.to_be_bytes());
        mem.leaves.insert(key, U256::from(123_456));
        let mut changing = Emitted::default();
        trie.begin();
        trie.set(
            &Nibbles::unpack(key),
            Some(alloy_rlp::encode(U256::from(123_456))),
            &mut mem,
            &mut changing,
        )
        .unwrap();
        assert_eq!(trie.root(&mut changing).unwrap(), reference(&mem.leaves));
        assert!(
            changing.leaves_read <= 8,
            "{} leaves read",
            changing.leaves_read
        );
        // Within a budget it stops once it holds it (one stored node's load past it).
        let mut small = SparseTrie::unknown(Nibbles::new(), true);
        small
            .preload(&mut mem, &mut Emitted::default(), 20_000)
            .unwrap();
        assert!(small.len() < trie.len());
        assert!(small.bytes() < 20_000 + 4 * (NODE_BYTES + BRANCH_BYTES) + 4096);
    }

    #[test]
    fn loads_a_stored_trie_it_never_saw() {
        // A trie stored by a rebuild, then changed through a fresh sparse trie.
        let mut mem = stored_trie(5000, 99);
        let mut trie = SparseTrie::unknown(Nibbles::new(), true);
        trie.begin();
        let mut emitted = Emitted::default();
        trie.ensure_top(&mut mem, &mut emitted).unwrap();
        let key = keccak256(17u64.to_be_bytes());
        mem.leaves.insert(key, U256::from(123_456));
        trie.set(
            &Nibbles::unpack(key),
            Some(alloy_rlp::encode(U256::from(123_456))),
            &mut mem,
            &mut emitted,
        )
        .unwrap();
        assert_eq!(trie.root(&mut emitted).unwrap(), reference(&mem.leaves));
        // Only the changed key's path was loaded: a few nodes, not the whole trie.
        assert!(trie.len() < 100, "{} nodes loaded", trie.len());
        assert!(
            emitted.leaves_read < 40,
            "{} leaves read",
            emitted.leaves_read
        );
    }
}

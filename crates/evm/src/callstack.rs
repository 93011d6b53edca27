//! The calling-context tree of a probed block: which frames ran inside which, so that a
//! sample of the current activity can name the call stack it was taken in.
//!
//! The probe keeps one [`CallTree`] per block. Its root is the block; below it come the
//! transactions, below them the frames each transaction opened (a call, a create, a
//! precompile), each identified by the code that ran, the 4-byte selector of its input and
//! how it was called. A frame reached twice by the same path is one node with two calls, so
//! the tree grows with the distinct call paths of the block, not with its calls, and it is
//! bounded ([`CallTree::with_capacity`]): past the bound, new frames are charged to their
//! caller and counted in [`CallTree::dropped`].
//!
//! The probed thread publishes a word that packs the node it is in with the activity it is
//! executing ([`pack`]); the sampler reads that word, so a sample never pairs an opcode with
//! another frame's node.
//!
//! Owns: the nodes, the stack of open frames, the word layout. Must not: time anything (the
//! sampler does) or know about reports.

use std::collections::HashMap;

use alloy_primitives::Address;

/// Index of a node in its [`CallTree`].
pub type NodeId = u32;

/// The block's node: samples outside any transaction land here.
pub const ROOT: NodeId = 0;

/// Default bound on the nodes of one block's tree: 1M distinct call paths (about 64 MiB),
/// far above the few thousand a mainnet block makes.
pub const DEFAULT_MAX_NODES: usize = 1 << 20;

/// Packs a node and an activity (an opcode or a [`crate::probe::Phase`]) into the word the
/// probe publishes.
#[inline(always)]
pub const fn pack(node: NodeId, activity: u16) -> u64 {
    ((node as u64) << 16) | activity as u64
}

/// The node and the activity of a published word.
#[inline(always)]
pub const fn unpack(word: u64) -> (NodeId, u16) {
    ((word >> 16) as NodeId, word as u16)
}

/// How a frame was entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKind {
    /// CALL, or a transaction's call.
    Call,
    /// CALLCODE.
    CallCode,
    /// DELEGATECALL: the code of another account on the caller's storage.
    DelegateCall,
    /// STATICCALL.
    StaticCall,
    /// CREATE, or a contract-creating transaction.
    Create,
    /// CREATE2.
    Create2,
}

impl CallKind {
    /// The opcode's name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Call => "CALL",
            CallKind::CallCode => "CALLCODE",
            CallKind::DelegateCall => "DELEGATECALL",
            CallKind::StaticCall => "STATICCALL",
            CallKind::Create => "CREATE",
            CallKind::Create2 => "CREATE2",
        }
    }
}

/// What a node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKey {
    /// The block ([`ROOT`]).
    Block,
    /// A transaction, by its index in the block.
    Tx(u32),
    /// A frame.
    Frame(Frame),
}

/// A frame: the code that ran and how it was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// The account whose code ran: the callee, the library of a DELEGATECALL or CALLCODE, the
    /// delegate of an EIP-7702 account, the created contract of a create, the precompile.
    pub code: Address,
    /// The first four bytes of the input (none for a create or a shorter input).
    pub selector: Option<[u8; 4]>,
    /// How the frame was entered.
    pub kind: CallKind,
    /// The code is a precompile (it ran inside the call, with no interpreter frame).
    pub precompile: bool,
}

/// One node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallNode {
    /// The caller's node ([`ROOT`] for the root itself).
    pub parent: NodeId,
    /// What the node stands for.
    pub key: FrameKey,
    /// Times it was entered.
    pub calls: u64,
    /// Gas it spent, its callees' included: for a frame, what it took of the gas it was given;
    /// for a transaction, its receipt's gas.
    pub gas: u64,
}

/// Nodes a tree has room for before it grows: the shipped mainnet blocks make from a few
/// hundred to a few thousand.
const INITIAL_NODES: usize = 4096;

/// No node: the end of a child list.
const NO_NODE: NodeId = NodeId::MAX;

/// A parent with up to this many children finds one by walking its list; past it, by hash.
/// Almost every frame is a new node (its path starts at its transaction), and the list it
/// is looked up in was written moments before, so the walk stays in cache, where a lookup
/// in a block-wide hash table costs a cache miss or two per call (measured: about 210 ns a
/// frame, 2-4 % of a probed replay). The table remains for the few wide parents (a router
/// calling hundreds of pools), where a walk would be long. Transactions, the widest level,
/// are found by their index instead ([`CallTree::begin_tx`]).
const LIST_CHILDREN: u32 = 16;

/// Children of the wide parents, by key: foldhash rather than SipHash, seeded per map since
/// the keys come from the block.
type Children = HashMap<(NodeId, FrameKey), NodeId, foldhash::fast::RandomState>;

/// Where a node sits among its siblings and where its own children start.
#[derive(Debug, Clone, Copy)]
struct Links {
    /// The newest child, or [`NO_NODE`].
    first_child: NodeId,
    /// The next older sibling, or [`NO_NODE`].
    next_sibling: NodeId,
    /// How many children the node has.
    children: u32,
}

impl Links {
    const LEAF: Links = Links {
        first_child: NO_NODE,
        next_sibling: NO_NODE,
        children: 0,
    };
}

/// The calling-context tree of one block, and the frames open now.
#[derive(Debug, Clone)]
pub struct CallTree {
    nodes: Vec<CallNode>,
    /// Parallel to `nodes`: each node's child list.
    links: Vec<Links>,
    /// Children of the parents with more than [`LIST_CHILDREN`].
    wide: Children,
    /// The last child found or made: a contract calling the same callee in a loop (a
    /// router's token calls, a pool's callbacks) finds it without a walk.
    last: Option<((NodeId, FrameKey), NodeId)>,
    /// Each transaction's node, by its index in the block ([`NO_NODE`] for none yet).
    /// Transactions are the root's children but not in its child list: a block's hundreds
    /// of them would make the root wide, and a hash lookup and insert per transaction cost
    /// more than the rest of its bookkeeping (measured: about 0.5 % of a probed replay).
    txs: Vec<NodeId>,
    /// Open frames, innermost last; `false` marks a frame charged to its caller because the
    /// tree was full.
    stack: Vec<(NodeId, bool)>,
    max_nodes: usize,
    dropped: u64,
}

impl Default for CallTree {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_MAX_NODES)
    }
}

impl CallTree {
    /// An empty tree (the block's node alone) that holds at most `max_nodes` nodes.
    pub fn with_capacity(max_nodes: usize) -> Self {
        // Room for a typical mainnet block's tree up front, so that the probed thread does
        // not grow it while it is being timed.
        let room = max_nodes.clamp(1, INITIAL_NODES);
        let mut nodes = Vec::with_capacity(room);
        nodes.push(CallNode {
            parent: ROOT,
            key: FrameKey::Block,
            calls: 1,
            gas: 0,
        });
        let mut links = Vec::with_capacity(room);
        links.push(Links::LEAF);
        Self {
            nodes,
            links,
            wide: Children::default(),
            last: None,
            txs: Vec::with_capacity(1024),
            stack: Vec::with_capacity(64),
            // A node id must fit the published word's 48 bits and stay below `NO_NODE`, and
            // the root is always there.
            max_nodes: max_nodes.clamp(1, NO_NODE as usize),
            dropped: 0,
        }
    }

    /// The node executing now: the innermost open frame, else [`ROOT`].
    #[inline]
    pub fn current(&self) -> NodeId {
        self.stack.last().map_or(ROOT, |&(node, _)| node)
    }

    /// Every node, by id; the root first.
    pub fn nodes(&self) -> &[CallNode] {
        &self.nodes
    }

    /// Frames charged to their caller because the tree was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Frames open now.
    pub fn depth(&self) -> usize {
        self.stack.len()
    }

    /// Opens transaction `index` below the root (closing whatever a failed transaction left
    /// open) and returns its node.
    pub fn begin_tx(&mut self, index: u32) -> NodeId {
        self.stack.clear();
        let at = index as usize;
        let known = self.txs.get(at).copied().filter(|&node| node != NO_NODE);
        let node = match known {
            Some(node) => Some(node),
            // An index at or past the bound could not get a node anyway; checking it first
            // keeps `txs` within the bound too.
            None if at < self.max_nodes && self.nodes.len() < self.max_nodes => {
                let node = self.push_node(ROOT, FrameKey::Tx(index), NO_NODE);
                if self.txs.len() <= at {
                    self.txs.resize(at + 1, NO_NODE);
                }
                self.txs[at] = node;
                Some(node)
            }
            None => None,
        };
        self.push_open(ROOT, node)
    }

    /// Closes the transaction with its receipt's `gas` and returns [`ROOT`].
    pub fn end_tx(&mut self, gas: u64) -> NodeId {
        if let Some(&(node, counted)) = self.stack.first() {
            if counted {
                self.nodes[node as usize].gas += gas;
            }
        }
        self.stack.clear();
        ROOT
    }

    /// Opens a frame below the current node and returns the node it runs in.
    pub fn enter(&mut self, frame: Frame) -> NodeId {
        self.enter_below(self.current(), FrameKey::Frame(frame))
    }

    /// Closes the innermost frame, which spent `gas`, and returns its caller's node.
    pub fn exit(&mut self, gas: u64) -> NodeId {
        if let Some((node, counted)) = self.stack.pop() {
            if counted {
                self.nodes[node as usize].gas += gas;
            }
        }
        self.current()
    }

    fn enter_below(&mut self, parent: NodeId, key: FrameKey) -> NodeId {
        let found = match self.last {
            Some((last, node)) if last == (parent, key) => Some(node),
            _ => self.child(parent, &key),
        };
        let node = match found {
            Some(node) => Some(node),
            None if self.nodes.len() < self.max_nodes => Some(self.add_child(parent, key)),
            None => None,
        };
        if let Some(node) = node {
            self.last = Some(((parent, key), node));
        }
        self.push_open(parent, node)
    }

    /// Opens `node` below `parent`, or, with no node (the tree is full), charges the frame
    /// to `parent`.
    #[inline]
    fn push_open(&mut self, parent: NodeId, node: Option<NodeId>) -> NodeId {
        match node {
            Some(node) => {
                self.nodes[node as usize].calls += 1;
                self.stack.push((node, true));
                node
            }
            None => {
                self.dropped += 1;
                self.stack.push((parent, false));
                parent
            }
        }
    }

    /// The child of `parent` with `key`, if it has one.
    fn child(&self, parent: NodeId, key: &FrameKey) -> Option<NodeId> {
        let links = self.links[parent as usize];
        if links.children > LIST_CHILDREN {
            return self.wide.get(&(parent, *key)).copied();
        }
        let mut at = links.first_child;
        while at != NO_NODE {
            if self.nodes[at as usize].key == *key {
                return Some(at);
            }
            at = self.links[at as usize].next_sibling;
        }
        None
    }

    /// Makes a new child of `parent` with `key`; the caller checked it has none and that
    /// there is room.
    fn add_child(&mut self, parent: NodeId, key: FrameKey) -> NodeId {
        let next_sibling = self.links[parent as usize].first_child;
        let node = self.push_node(parent, key, next_sibling);
        let up = &mut self.links[parent as usize];
        up.first_child = node;
        up.children += 1;
        let children = up.children;
        if children == LIST_CHILDREN + 1 {
            // The parent turns wide: its children, this one included, go into the table.
            let mut at = node;
            while at != NO_NODE {
                self.wide.insert((parent, self.nodes[at as usize].key), at);
                at = self.links[at as usize].next_sibling;
            }
        } else if children > LIST_CHILDREN {
            self.wide.insert((parent, key), node);
        }
        node
    }

    /// Appends a node below `parent` with no calls yet and no children, `next_sibling`
    /// after it in its parent's list ([`NO_NODE`]: last, or in no list).
    fn push_node(&mut self, parent: NodeId, key: FrameKey, next_sibling: NodeId) -> NodeId {
        let node = self.nodes.len() as NodeId;
        self.nodes.push(CallNode {
            parent,
            key,
            calls: 0,
            gas: 0,
        });
        self.links.push(Links {
            next_sibling,
            ..Links::LEAF
        });
        debug_assert_eq!(self.nodes.len(), self.links.len());
        node
    }

    /// The nodes from the root down to `node`.
    pub fn path(&self, node: NodeId) -> Vec<NodeId> {
        let mut path = Vec::new();
        let mut at = node;
        // Parents have smaller ids than their children, so this ends at the root.
        while at != ROOT && (at as usize) < self.nodes.len() {
            path.push(at);
            at = self.nodes[at as usize].parent;
        }
        path.push(ROOT);
        path.reverse();
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(byte: u8, selector: u8) -> Frame {
        Frame {
            code: Address::with_last_byte(byte),
            selector: Some([selector; 4]),
            kind: CallKind::Call,
            precompile: false,
        }
    }

    #[test]
    fn words_pack_and_unpack() {
        for (node, activity) in [(0, 0), (1, 0x54), (u32::MAX, u16::MAX), (77, 263)] {
            assert_eq!(unpack(pack(node, activity)), (node, activity));
        }
    }

    /// Two calls by the same path are one node; the same code below another caller is
    /// another node; gas and calls add up per node.
    #[test]
    fn repeated_paths_share_a_node() {
        let mut tree = CallTree::default();
        let tx = tree.begin_tx(0);
        let a = tree.enter(frame(0xa, 1));
        let b1 = tree.enter(frame(0xb, 2));
        let c = tree.enter(frame(0xc, 3));
        assert_eq!(tree.exit(100), b1);
        assert_eq!(tree.exit(300), a);
        let b2 = tree.enter(frame(0xb, 2));
        assert_eq!(b1, b2);
        assert_eq!(tree.exit(50), a);
        let c_under_a = tree.enter(frame(0xc, 3));
        assert_ne!(c_under_a, c);
        assert_eq!(tree.exit(7), a);
        assert_eq!(tree.exit(1000), tx);
        assert_eq!(tree.end_tx(21_000 + 1000), ROOT);

        let nodes = tree.nodes();
        assert_eq!(nodes.len(), 6);
        assert_eq!(nodes[b1 as usize].calls, 2);
        assert_eq!(nodes[b1 as usize].gas, 350);
        assert_eq!(nodes[c as usize].parent, b1);
        assert_eq!(nodes[c_under_a as usize].parent, a);
        assert_eq!(nodes[tx as usize].gas, 22_000);
        assert_eq!(tree.path(c), vec![ROOT, tx, a, b1, c]);
        assert_eq!(tree.dropped(), 0);
    }

    /// A full tree charges new frames to their callers and keeps the stack balanced.
    #[test]
    fn a_full_tree_charges_new_frames_to_their_caller() {
        let mut tree = CallTree::with_capacity(3);
        let tx = tree.begin_tx(0);
        let a = tree.enter(frame(0xa, 1));
        assert_eq!(tree.enter(frame(0xb, 2)), a);
        assert_eq!(tree.enter(frame(0xc, 3)), a);
        assert_eq!(tree.exit(5), a);
        assert_eq!(tree.exit(5), a);
        assert_eq!(tree.exit(40), tx);
        assert_eq!(tree.dropped(), 2);
        assert_eq!(tree.nodes().len(), 3);
        // The dropped frames' gas is inside their caller's already.
        assert_eq!(tree.nodes()[a as usize].gas, 40);
        // A transaction is a node too: past the bound it runs in the root.
        assert_eq!(tree.begin_tx(1), ROOT);
        assert_eq!(tree.dropped(), 3);
    }

    /// Transactions are found by index: a repeated index is the same node, a new one gets
    /// its own, and an index past the bound gets none (nor room in the index).
    #[test]
    fn transactions_are_nodes_by_index_within_the_bound() {
        let mut tree = CallTree::with_capacity(4);
        let first = tree.begin_tx(0);
        tree.end_tx(21_000);
        let second = tree.begin_tx(2);
        tree.end_tx(30_000);
        assert_ne!(first, second);
        assert_eq!(tree.begin_tx(0), first);
        tree.end_tx(1);
        assert_eq!(tree.nodes()[first as usize].calls, 2);
        assert_eq!(tree.nodes()[first as usize].gas, 21_001);
        assert_eq!(tree.nodes()[second as usize].parent, ROOT);
        assert_eq!(tree.nodes()[second as usize].key, FrameKey::Tx(2));
        assert_eq!(tree.begin_tx(u32::MAX), ROOT);
        assert!(
            tree.txs.len() <= 4,
            "an index past the bound grew the index"
        );
        assert_eq!(tree.dropped(), 1);
        assert_eq!(tree.path(second), vec![ROOT, second]);
    }

    /// Against a model that keys every node by (parent, key) in one map: the same ids for
    /// any sequence of enters and exits, whether a parent's children are few (found by
    /// walking its list) or many (found by hash), and across the switch from one to the
    /// other.
    #[test]
    fn child_lists_and_the_wide_table_agree_with_a_map() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let mut tree = CallTree::default();
        let mut model: HashMap<(NodeId, FrameKey), NodeId> = HashMap::new();
        let mut model_stack: Vec<NodeId> = Vec::new();
        let mut made = 1;
        for tx in 0..40 {
            let key = FrameKey::Tx(tx % 25);
            let expected = *model.entry((ROOT, key)).or_insert_with(|| {
                made += 1;
                made - 1
            });
            assert_eq!(tree.begin_tx(tx % 25), expected);
            model_stack.clear();
            model_stack.push(expected);
            for _ in 0..400 {
                if next(3) == 0 && model_stack.len() > 1 {
                    model_stack.pop();
                    assert_eq!(tree.exit(1), *model_stack.last().unwrap_or(&ROOT));
                    continue;
                }
                // Up to 40 distinct callees below one caller: past LIST_CHILDREN.
                let f = frame(next(40) as u8, next(2) as u8);
                let parent = *model_stack.last().unwrap_or(&ROOT);
                let expected = *model
                    .entry((parent, FrameKey::Frame(f)))
                    .or_insert_with(|| {
                        made += 1;
                        made - 1
                    });
                assert_eq!(tree.enter(f), expected);
                model_stack.push(expected);
                if model_stack.len() > 6 {
                    model_stack.pop();
                    tree.exit(1);
                }
            }
            tree.end_tx(21_000);
        }
        assert_eq!(tree.nodes().len() as NodeId, made);
        for (&(parent, key), &node) in &model {
            assert_eq!(tree.nodes()[node as usize].parent, parent);
            assert_eq!(tree.nodes()[node as usize].key, key);
        }
        assert!(
            tree.links.iter().any(|l| l.children > LIST_CHILDREN),
            "the test must reach the wide table"
        );
    }
}

//! Call-stack profiles: the samples of every probed block credited to the call path they were
//! taken in (block → transaction → contract:function → … → opcode or phase), merged over the
//! rounds, and what is read from them: time by contract and by (contract, function), the
//! costliest transactions of each block, folded stacks.
//!
//! Owns: the merged tree and the queries on it. Must not: sample (the sampler does), draw or
//! encode files (`flame`, `pprof`) or name anything (`labels`).

use std::collections::{BTreeMap, HashMap, HashSet};

use alloy_primitives::{Address, B256};
use gigas_evm::callstack::{self, CallTree, FrameKey};

use crate::sampler::WordTime;

/// What a node of the merged tree stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Label {
    /// The profile's root: every block below it.
    All,
    /// A block, by number.
    Block(u64),
    /// A transaction of its block.
    Tx {
        /// Index in the block.
        index: u32,
        /// Its hash.
        hash: B256,
    },
    /// A frame.
    Frame(callstack::Frame),
}

/// One node of the merged tree.
#[derive(Debug, Clone)]
pub struct PathNode {
    /// The caller's node (the root's is itself).
    pub parent: usize,
    /// What it stands for.
    pub label: Label,
    /// Times it was entered, in one pass.
    pub calls: u64,
    /// Gas it spent in one pass, its callees' included.
    pub gas: u64,
    /// Sampled time in the node itself, by activity (opcode or phase), over every round.
    pub activities: BTreeMap<u16, WordTime>,
}

/// The samples of every round by call path.
#[derive(Debug, Clone)]
pub struct StackProfile {
    nodes: Vec<PathNode>,
    index: HashMap<(usize, Label), usize>,
    /// Frames the probe charged to their callers because a block's tree was full.
    pub dropped_frames: u64,
    /// Rounds merged (the sampled time is over all of them; calls and gas are one pass's).
    pub rounds: u64,
}

impl Default for StackProfile {
    fn default() -> Self {
        Self {
            nodes: vec![PathNode {
                parent: 0,
                label: Label::All,
                calls: 1,
                gas: 0,
                activities: BTreeMap::new(),
            }],
            index: HashMap::new(),
            dropped_frames: 0,
            rounds: 0,
        }
    }
}

/// Time and gas of a contract, or of a (contract, function) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeCost {
    /// The code address.
    pub code: Address,
    /// The selector, for a per-function row (`None`: no selector, e.g. a plain transfer
    /// into a fallback, or a create). Always `None` in a per-contract row.
    pub selector: Option<[u8; 4]>,
    /// The row is a precompile.
    pub precompile: bool,
    /// Sampled time in its own code, over all rounds, as the caller's `time` weighs it.
    pub self_time: f64,
    /// Samples in its own code.
    pub self_samples: u64,
    /// Sampled time in it and everything it called (each sample counted once however often
    /// the code recurs in its stack), over all rounds.
    pub total_time: f64,
    /// Samples in it and below.
    pub total_samples: u64,
    /// Frames entered, in one pass.
    pub calls: u64,
    /// Gas its outermost frames spent, callees included, in one pass.
    pub gas: u64,
    /// Gas spent by its own instructions (its frames' gas less their callees'), in one pass.
    pub self_gas: u64,
    /// Its own time by activity, costliest first.
    pub activities: Vec<(u16, f64)>,
}

/// A transaction's cost.
#[derive(Debug, Clone, PartialEq)]
pub struct TxCost {
    /// Block number.
    pub block: u64,
    /// Index in the block.
    pub index: u32,
    /// Hash.
    pub hash: B256,
    /// Sampled time over all rounds, as the caller's `time` weighs it.
    pub time: f64,
    /// Samples.
    pub samples: u64,
    /// Receipt gas.
    pub gas: u64,
    /// The code its first frame ran, if it called a contract.
    pub to: Option<Address>,
    /// The selector of its input.
    pub selector: Option<[u8; 4]>,
}

/// What a folded stack or a flame graph weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Weight {
    /// Sampled time (nanoseconds, leaves are opcodes and phases).
    Time,
    /// Gas spent by each frame's own instructions (leaves are frames).
    Gas,
}

/// Which samples a profile keeps.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only samples taken in a frame of this code or below one.
    pub contract: Option<Address>,
    /// Only samples of this transaction.
    pub tx: Option<B256>,
}

impl Filter {
    /// Whether the filter keeps everything.
    pub fn is_empty(&self) -> bool {
        self.contract.is_none() && self.tx.is_none()
    }
}

impl StackProfile {
    /// Every node; the root first, parents before children.
    pub fn nodes(&self) -> &[PathNode] {
        &self.nodes
    }

    fn child(&mut self, parent: usize, label: Label) -> usize {
        if let Some(&node) = self.index.get(&(parent, label)) {
            return node;
        }
        let node = self.nodes.len();
        self.nodes.push(PathNode {
            parent,
            label,
            calls: 0,
            gas: 0,
            activities: BTreeMap::new(),
        });
        self.index.insert((parent, label), node);
        node
    }

    /// Merges a probed block: its tree and the time sampled in each of its words. `exact`
    /// adds the tree's calls and gas too (once per block, not once per round).
    pub fn add_block(
        &mut self,
        number: u64,
        tx_hashes: &[B256],
        tree: &CallTree,
        by_word: &crate::sampler::WordMap,
        exact: bool,
    ) {
        let mut map: Vec<usize> = Vec::with_capacity(tree.nodes().len());
        let mut block_gas = 0;
        for node in tree.nodes() {
            let mapped = match node.key {
                FrameKey::Block => self.child(0, Label::Block(number)),
                FrameKey::Tx(index) => {
                    let parent = map[node.parent as usize];
                    let hash = tx_hashes.get(index as usize).copied().unwrap_or(B256::ZERO);
                    block_gas += node.gas;
                    self.child(parent, Label::Tx { index, hash })
                }
                FrameKey::Frame(frame) => {
                    let parent = map[node.parent as usize];
                    self.child(parent, Label::Frame(frame))
                }
            };
            if exact && !matches!(node.key, FrameKey::Block) {
                let target = &mut self.nodes[mapped];
                target.calls += node.calls;
                target.gas += node.gas;
            }
            map.push(mapped);
        }
        if exact {
            let block = map[0];
            self.nodes[block].calls += 1;
            self.nodes[block].gas += block_gas;
            self.dropped_frames += tree.dropped();
        }
        for (&word, time) in by_word {
            let (node, activity) = callstack::unpack(word);
            // The harness between blocks, not the block: the opcode table leaves it out too.
            if activity == gigas_evm::probe::Phase::Idle as u16 {
                continue;
            }
            let Some(&mapped) = map.get(node as usize).or(map.first()) else {
                continue;
            };
            let at = self.nodes[mapped].activities.entry(activity).or_default();
            at.nanos += time.nanos;
            at.samples += time.samples;
        }
    }

    /// The nodes from the root down to `node`.
    pub fn path(&self, node: usize) -> Vec<usize> {
        let mut path = vec![node];
        let mut at = node;
        while at != 0 {
            at = self.nodes[at].parent;
            path.push(at);
        }
        path.reverse();
        path
    }

    /// Whether the samples of `node` pass `filter`.
    pub fn keeps(&self, node: usize, filter: &Filter) -> bool {
        if filter.is_empty() {
            return true;
        }
        let path = self.path(node);
        let tx_ok = filter.tx.is_none_or(|want| {
            path.iter()
                .any(|&n| matches!(self.nodes[n].label, Label::Tx { hash, .. } if hash == want))
        });
        let contract_ok = filter.contract.is_none_or(|want| {
            path.iter()
                .any(|&n| matches!(self.nodes[n].label, Label::Frame(f) if f.code == want))
        });
        tx_ok && contract_ok
    }

    /// Time (as `time` weighs it) and samples of the nodes `filter` keeps.
    pub fn total(&self, filter: &Filter, time: &dyn Fn(u16, u64) -> f64) -> (f64, u64) {
        let mut total = (0.0, 0);
        for (i, node) in self.nodes.iter().enumerate() {
            if node.activities.is_empty() || !self.keeps(i, filter) {
                continue;
            }
            for (&activity, t) in &node.activities {
                total.0 += time(activity, t.nanos);
                total.1 += t.samples;
            }
        }
        total
    }

    /// A profile with the samples of every pass in `passes` and the calls and gas of the
    /// first (they are the same in every pass); `None` without passes.
    pub fn merged<'a>(mut passes: impl Iterator<Item = &'a StackProfile>) -> Option<Self> {
        let mut merged = passes.next()?.clone();
        merged.rounds = 1;
        for other in passes {
            let mut map = vec![0usize; other.nodes.len()];
            for (i, node) in other.nodes.iter().enumerate() {
                let mapped = if i == 0 {
                    0
                } else {
                    merged.child(map[node.parent], node.label)
                };
                map[i] = mapped;
                for (&activity, t) in &node.activities {
                    let at = merged.nodes[mapped].activities.entry(activity).or_default();
                    at.nanos += t.nanos;
                    at.samples += t.samples;
                }
            }
            merged.rounds += 1;
        }
        Some(merged)
    }

    /// Time and gas per contract (`by_function` false) or per (contract, selector), costliest
    /// first by total time; `time` weighs an activity's sampled nanoseconds (e.g. less the
    /// probe's cost per instruction).
    pub fn code_costs(
        &self,
        by_function: bool,
        filter: &Filter,
        time: &dyn Fn(u16, u64) -> f64,
    ) -> Vec<CodeCost> {
        type Key = (Address, Option<[u8; 4]>, bool);
        let key_of = |label: &Label| -> Option<Key> {
            match label {
                Label::Frame(f) => Some((
                    f.code,
                    if by_function { f.selector } else { None },
                    f.precompile,
                )),
                _ => None,
            }
        };
        let mut rows: HashMap<Key, CodeCost> = HashMap::new();
        let mut activities: HashMap<Key, HashMap<u16, f64>> = HashMap::new();
        // Gas spent by each node's frame callees, to take out of its own.
        let mut callee_gas = vec![0u64; self.nodes.len()];
        for node in self.nodes.iter().skip(1) {
            if matches!(node.label, Label::Frame(_)) {
                callee_gas[node.parent] += node.gas;
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(key) = key_of(&node.label) else {
                continue;
            };
            let path = self.path(i);
            let outermost = !path[..path.len() - 1]
                .iter()
                .any(|&n| key_of(&self.nodes[n].label) == Some(key));
            let entry = rows.entry(key).or_insert_with(|| empty_cost(key));
            entry.calls += node.calls;
            entry.self_gas += node.gas.saturating_sub(callee_gas[i]);
            if outermost {
                entry.gas += node.gas;
            }
            if node.activities.is_empty() || !self.keeps(i, filter) {
                continue;
            }
            let mut nanos = 0.0;
            let mut samples = 0;
            let per_activity = activities.entry(key).or_default();
            for (&activity, t) in &node.activities {
                let weighed = time(activity, t.nanos);
                nanos += weighed;
                samples += t.samples;
                *per_activity.entry(activity).or_default() += weighed;
            }
            let entry = rows.entry(key).or_insert_with(|| empty_cost(key));
            entry.self_time += nanos;
            entry.self_samples += samples;
            // Total time: once for every distinct code on the sample's path.
            let mut seen: HashSet<Key> = HashSet::new();
            for &n in &path {
                if let Some(k) = key_of(&self.nodes[n].label) {
                    if seen.insert(k) {
                        let e = rows.entry(k).or_insert_with(|| empty_cost(k));
                        e.total_time += nanos;
                        e.total_samples += samples;
                    }
                }
            }
        }
        let mut out: Vec<CodeCost> = rows
            .into_iter()
            .map(|(key, mut cost)| {
                let mut acts: Vec<(u16, f64)> = activities
                    .remove(&key)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                acts.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                cost.activities = acts;
                cost
            })
            .filter(|c| c.total_samples > 0 || filter.is_empty())
            .collect();
        out.sort_by(|a, b| {
            b.total_time
                .total_cmp(&a.total_time)
                .then(b.gas.cmp(&a.gas))
                .then(a.code.cmp(&b.code))
                .then(a.selector.cmp(&b.selector))
        });
        out
    }

    /// Every transaction with its sampled time (its frames' and its phases', weighed by
    /// `time`), in block order.
    pub fn tx_costs(&self, time: &dyn Fn(u16, u64) -> f64) -> Vec<TxCost> {
        let mut txs: Vec<TxCost> = Vec::new();
        let mut of_node: HashMap<usize, usize> = HashMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if let Label::Tx { index, hash } = node.label {
                let block = match self.nodes[node.parent].label {
                    Label::Block(number) => number,
                    _ => 0,
                };
                of_node.insert(i, txs.len());
                txs.push(TxCost {
                    block,
                    index,
                    hash,
                    time: 0.0,
                    samples: 0,
                    gas: node.gas,
                    to: None,
                    selector: None,
                });
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            // The first frame below a transaction is what it called.
            if let (Label::Frame(f), Some(&t)) = (node.label, of_node.get(&node.parent)) {
                if txs[t].to.is_none() {
                    txs[t].to = Some(f.code);
                    txs[t].selector = f.selector;
                }
            }
            if node.activities.is_empty() {
                continue;
            }
            let Some(&t) = self.path(i).iter().find_map(|n| of_node.get(n)) else {
                continue;
            };
            for (&activity, at) in &node.activities {
                txs[t].time += time(activity, at.nanos);
                txs[t].samples += at.samples;
            }
        }
        txs.sort_by_key(|t| (t.block, t.index));
        txs
    }

    /// Every stack of the samples `filter` keeps, root first (the `all` root left out), its
    /// frames named by `name` and `activity_name`, with its weight and samples: by time,
    /// one stack per (node, activity) weighed by `time`; by gas, one stack per frame or
    /// transaction weighed by the gas of its own instructions (samples 0). Stacks of no
    /// weight are left out; sorted by their frames.
    pub fn weighted_stacks(
        &self,
        weight: Weight,
        filter: &Filter,
        name: &dyn Fn(&Label) -> String,
        activity_name: &dyn Fn(u16) -> String,
        time: &dyn Fn(u16, u64) -> f64,
    ) -> Vec<WeightedStack> {
        let names: Vec<String> = self
            .nodes
            .iter()
            .map(|n| sanitize(&name(&n.label)))
            .collect();
        let frames = |node: usize| -> Vec<String> {
            self.path(node)
                .iter()
                .skip(1)
                .map(|&n| names[n].clone())
                .collect()
        };
        let mut stacks = Vec::new();
        match weight {
            Weight::Time => {
                for (i, node) in self.nodes.iter().enumerate() {
                    if node.activities.is_empty() || !self.keeps(i, filter) {
                        continue;
                    }
                    for (&activity, t) in &node.activities {
                        let value = time(activity, t.nanos);
                        if value > 0.0 {
                            let mut f = frames(i);
                            f.push(sanitize(&activity_name(activity)));
                            stacks.push(WeightedStack {
                                frames: f,
                                value,
                                samples: t.samples,
                            });
                        }
                    }
                }
            }
            Weight::Gas => {
                let mut callee_gas = vec![0u64; self.nodes.len()];
                for node in self.nodes.iter().skip(1) {
                    if matches!(node.label, Label::Frame(_) | Label::Tx { .. }) {
                        callee_gas[node.parent] += node.gas;
                    }
                }
                for (i, node) in self.nodes.iter().enumerate() {
                    if !matches!(node.label, Label::Frame(_) | Label::Tx { .. })
                        || !self.keeps(i, filter)
                    {
                        continue;
                    }
                    let own = node.gas.saturating_sub(callee_gas[i]);
                    if own > 0 {
                        stacks.push(WeightedStack {
                            frames: frames(i),
                            value: own as f64,
                            samples: 0,
                        });
                    }
                }
            }
        }
        stacks.sort_by(|a, b| a.frames.cmp(&b.frames));
        stacks
    }
}

/// One stack of a profile and its weight.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedStack {
    /// Frame names, root first.
    pub frames: Vec<String>,
    /// Its weight (time or gas).
    pub value: f64,
    /// Samples behind it (0 by gas).
    pub samples: u64,
}

impl WeightedStack {
    /// The stack as a folded line (`frame;frame;… count`), its weight rounded; `None` when
    /// it rounds to nothing.
    pub fn folded(&self) -> Option<String> {
        let units = self.value.round();
        (units >= 1.0).then(|| format!("{} {}", self.frames.join(";"), units as u64))
    }
}

fn empty_cost(key: (Address, Option<[u8; 4]>, bool)) -> CodeCost {
    CodeCost {
        code: key.0,
        selector: key.1,
        precompile: key.2,
        self_time: 0.0,
        self_samples: 0,
        total_time: 0.0,
        total_samples: 0,
        calls: 0,
        gas: 0,
        self_gas: 0,
        activities: Vec::new(),
    }
}

/// A frame name fit for a folded line: no separator, no line break, and not ending in what
/// reads as a count.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ',',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

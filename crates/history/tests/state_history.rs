//! `value_at` against an in-memory model of random state changes, through pruning, a window
//! that shrinks between runs, and reopening.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use alloy_primitives::B256;
use common::{OwnedBlock, Rng};
use gigas_history::{HistoricValue, History, HistoryOptions, Table};

type State = HashMap<Vec<u8>, Vec<u8>>;

/// Keys of many lengths, including a family where each key is a prefix of the next (the
/// encoding must keep their rows apart) and Vilmo-shaped ones (21, 33 and 53 bytes).
fn keys(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (1..=8)
        .map(|n| {
            let mut k = vec![b'a'];
            k.resize(n, 0);
            k
        })
        .collect();
    // Keys that extend the one-byte key `a` with what looks like a block number: without a
    // prefix-free encoding their rows would sort between `a`'s rows.
    for x in [3u8, 50, 120, 200] {
        let mut k = vec![b'a', 0, 0, 0, 0, 0, 0, 0, x];
        keys.push(k.clone());
        k.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, x / 2]);
        keys.push(k);
    }
    keys.push(Vec::new());
    for len in [1usize, 2, 9, 21, 21, 21, 33, 53, 53, 53, 53, 100] {
        let mut k = rng.bytes(len);
        if len > 0 {
            k[0] = [b'a', b's', b'c'][rng.below(3) as usize];
        }
        keys.push(k);
    }
    keys.sort();
    keys.dedup();
    keys
}

struct Model {
    current: State,
    /// State at the end of each block.
    snapshots: Vec<State>,
    /// Keys each block changed.
    changed: Vec<Vec<Vec<u8>>>,
}

impl Model {
    /// What `value_at(key, block)` must say, given the oldest answerable block.
    fn expected(&self, key: &[u8], block: u64, oldest: u64) -> HistoricValue {
        if block < oldest {
            return HistoricValue::Pruned { oldest };
        }
        let head = self.snapshots.len() as u64 - 1;
        if block >= head {
            return HistoricValue::Unchanged;
        }
        let changed_later =
            (block + 1..=head).any(|b| self.changed[b as usize].iter().any(|k| k == key));
        if changed_later {
            HistoricValue::Changed(self.snapshots[block as usize].get(key).cloned())
        } else {
            HistoricValue::Unchanged
        }
    }
}

fn random_block(
    rng: &mut Rng,
    model: &mut Model,
    keys: &[Vec<u8>],
    number: u64,
    parent: B256,
) -> OwnedBlock {
    let mut state_history = Vec::new();
    let mut changed = Vec::new();
    let count = rng.below(6);
    let mut picked: Vec<usize> = Vec::new();
    for _ in 0..count {
        let i = rng.below(keys.len() as u64) as usize;
        if picked.contains(&i) {
            continue;
        }
        picked.push(i);
        let key = keys[i].clone();
        let before = model.current.get(&key).cloned();
        state_history.push((key.clone(), before));
        match rng.below(10) {
            0..=1 => {
                model.current.remove(&key);
            }
            // The empty value is a value, not an absence.
            2 => {
                model.current.insert(key.clone(), Vec::new());
            }
            _ => {
                let value = rng.bytes_below(120);
                model.current.insert(key.clone(), value);
            }
        }
        changed.push(key);
    }
    model.snapshots.push(model.current.clone());
    model.changed.push(changed);
    let changeset = format!("changeset of block {number}").into_bytes();
    OwnedBlock::seal(
        number,
        parent,
        Vec::new(),
        Vec::new(),
        changeset,
        state_history,
    )
}

fn check(
    history: &History,
    model: &Model,
    keys: &[Vec<u8>],
    rng: &mut Rng,
    window: u64,
    caught_up: bool,
) {
    let head = model.snapshots.len() as u64 - 1;
    assert_eq!(history.head().unwrap(), Some(head));
    // The window is the index's: pruning happens as the indexer catches up.
    // (`unindexed.rs` checks the answers before and after it does.)
    assert!(history.wait_indexed(Duration::from_secs(120)).unwrap());
    let oldest = history.oldest_state_block().unwrap();
    let full_window = head.saturating_sub(window);
    assert!(
        oldest <= full_window,
        "pruned too much: oldest {oldest} > head {head} - window {window}"
    );
    if caught_up {
        assert_eq!(oldest, full_window);
    }

    // Every key at a spread of blocks, including the head and past it.
    for key in keys {
        for _ in 0..6 {
            let block = rng.below(head + 3);
            let got = history.value_at(key, block).unwrap();
            let want = model.expected(key, block, oldest);
            assert_eq!(
                got,
                want,
                "key {} at block {block} (head {head}, oldest {oldest})",
                alloy_primitives::hex::encode(key)
            );
            // What the caller makes of it is the model's state at that block.
            if block >= oldest {
                let resolved = match got {
                    HistoricValue::Changed(v) => v,
                    HistoricValue::Unchanged => model.current.get(key).cloned(),
                    HistoricValue::Pruned { .. } => unreachable!(),
                };
                let at = block.min(head) as usize;
                assert_eq!(resolved, model.snapshots[at].get(key).cloned());
            }
        }
    }

    // ChangeSets and StateHistory rows exist for exactly the blocks still in the window.
    for n in 0..=head {
        let kept = history.changeset(n).unwrap().is_some();
        if n > oldest {
            assert!(kept, "block {n}'s ChangeSet is gone (oldest {oldest})");
        }
        if n < oldest {
            assert!(
                !kept,
                "block {n}'s ChangeSet outlived the window (oldest {oldest})"
            );
        }
    }
    let stats: BTreeMap<_, _> = history
        .table_stats()
        .unwrap()
        .into_iter()
        .map(|s| (s.table.name(), s.entries))
        .collect();
    let rows_from = |first: u64| -> u64 {
        (first..=head)
            .map(|n| model.changed[n as usize].len() as u64)
            .sum()
    };
    let rows = stats[Table::StateHistory.name()];
    assert_eq!(rows, stats[Table::StateHistoryKeys.name()]);
    if oldest > 0 {
        assert_eq!(rows, rows_from(oldest + 1));
        assert_eq!(stats[Table::ChangeSets.name()], head - oldest);
    } else {
        assert!(
            rows == rows_from(0) || rows == rows_from(1),
            "{rows} rows at oldest 0"
        );
    }
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed);
    let keys = keys(&mut rng);
    let mut model = Model {
        current: State::new(),
        snapshots: Vec::new(),
        changed: Vec::new(),
    };
    let options = |window: u64| HistoryOptions {
        state_history_blocks: window,
        prune_blocks_per_commit: 4,
        max_size_bytes: 4 << 30,
        growth_step_bytes: 16 << 20,
        ..HistoryOptions::default()
    };

    let mut parent = B256::ZERO;
    let mut number = 0;
    let mut commit = |history: &History, model: &mut Model, rng: &mut Rng| {
        let block = random_block(rng, model, &keys, number, parent);
        history.commit_block(&block.record()).unwrap();
        parent = block.hash;
        number += 1;
    };

    // A window of 60 blocks, through its first prunes.
    let history = History::open(dir.path(), options(60)).unwrap();
    for i in 0..150 {
        commit(&history, &mut model, &mut rng);
        if i % 10 == 0 {
            check(&history, &model, &keys, &mut rng, 60, true);
        }
    }
    check(&history, &model, &keys, &mut rng, 60, true);
    drop(history);

    // Reopen with the same window: the same answers.
    let history = History::open(dir.path(), options(60)).unwrap();
    check(&history, &model, &keys, &mut rng, 60, true);
    for _ in 0..30 {
        commit(&history, &mut model, &mut rng);
    }
    check(&history, &model, &keys, &mut rng, 60, true);
    drop(history);

    // A smaller window: pruning catches up 4 blocks per commit, never cutting too much.
    let history = History::open(dir.path(), options(20)).unwrap();
    check(&history, &model, &keys, &mut rng, 20, false);
    let mut caught_up = false;
    for _ in 0..40 {
        commit(&history, &mut model, &mut rng);
        assert!(history.wait_indexed(Duration::from_secs(120)).unwrap());
        let head = model.snapshots.len() as u64 - 1;
        caught_up |= history.oldest_state_block().unwrap() == head - 20;
        check(&history, &model, &keys, &mut rng, 20, caught_up);
    }
    assert!(caught_up);

    // A larger window does not bring pruned blocks back.
    drop(history);
    let history = History::open(dir.path(), options(500)).unwrap();
    let oldest = history.oldest_state_block().unwrap();
    commit(&history, &mut model, &mut rng);
    assert_eq!(history.oldest_state_block().unwrap(), oldest);
    // So the bound is still the smaller window's.
    check(&history, &model, &keys, &mut rng, 20, false);
}

#[test]
fn value_at_matches_the_model_seed_1() {
    run(1);
}

#[test]
fn value_at_matches_the_model_seed_2() {
    run(0xDEAD_BEEF);
}

#[test]
fn value_at_matches_the_model_seed_3() {
    run(77);
}

#[test]
fn an_empty_history_answers_unchanged_and_oldest_zero() {
    let dir = tempfile::tempdir().unwrap();
    let history = History::open(
        dir.path(),
        HistoryOptions {
            max_size_bytes: 1 << 30,
            ..HistoryOptions::default()
        },
    )
    .unwrap();
    assert_eq!(history.oldest_state_block().unwrap(), 0);
    assert_eq!(
        history.value_at(b"anything", 0).unwrap(),
        HistoricValue::Unchanged
    );
    assert_eq!(
        history.value_at(b"anything", u64::MAX).unwrap(),
        HistoricValue::Unchanged
    );
    assert_eq!(
        history.value_at(&[1; 300], 5).unwrap(),
        HistoricValue::Unchanged
    );
}

//! A batch far larger than the compaction budget (a genesis of millions of keys is one batch)
//! is compacted in bounded steps that stop between its records: no batch after it writes much
//! more than the budget, a store reopened at every step continues where it stopped, and its
//! contents always equal those of a store never reopened.

mod common;

use std::collections::BTreeMap;

use common::contents;

use gigas_vilmo::{Batch, Options, Vilmo};

const KEYS: u64 = 20_000;
const BUDGET: u64 = 64 << 10;

fn options() -> Options {
    Options {
        // The genesis batch alone fills its file; later files are small, so the genesis file is
        // the first to fall under the threshold.
        target_file_size: 256 << 10,
        compaction_threshold_percent: 60,
        compaction_bytes_per_batch: BUDGET,
        durable: false,
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("account-{i:08}").into_bytes()
}

fn value(i: u64, version: u64) -> Vec<u8> {
    let mut v = format!("v{version}-").into_bytes();
    v.resize(40 + (i % 17) as usize, (i ^ version) as u8);
    v
}

#[test]
fn a_batch_larger_than_the_budget_is_compacted_in_bounded_steps_across_reopens() {
    let dir_a = tempfile::tempdir().expect("tempdir");
    let dir_b = tempfile::tempdir().expect("tempdir");
    let mut a = Vilmo::open(dir_a.path(), options()).expect("open a");
    let mut b = Vilmo::open(dir_b.path(), options()).expect("open b");
    let mut model = BTreeMap::new();

    let mut genesis = Batch::new();
    for i in 0..KEYS {
        genesis.put(&key(i), &value(i, 0)).expect("put");
        model.insert(key(i), value(i, 0));
    }
    let genesis_bytes = |store: &Vilmo| store.metrics().bytes_written.get();
    a.commit(genesis.clone()).expect("genesis a");
    b.commit(genesis).expect("genesis b");
    let genesis_len = genesis_bytes(&a);
    assert!(
        genesis_len > 10 * BUDGET,
        "the genesis batch ({genesis_len} bytes) must be many budgets long for this test"
    );

    // Overwrite keys in small batches until the genesis file is compacted away; every batch
    // writes its own records plus at most the budget of moved records, plus one record.
    let mut moving_steps = 0u64;
    for n in 1..=2_000u64 {
        let mut batch = Batch::new();
        let mut own = 0u64;
        for j in 0..40u64 {
            // Each batch rewrites a spread of keys, so the genesis file's live bytes fall.
            let i = (n * 40 + j) * 7 % KEYS;
            let v = value(i, n);
            own += (key(i).len() + v.len()) as u64;
            batch.put(&key(i), &v).expect("put");
            model.insert(key(i), v);
        }
        let before = a.metrics().bytes_written.get();
        a.commit(batch.clone()).expect("commit a");
        b.commit(batch).expect("commit b");
        let written = a.metrics().bytes_written.get() - before;
        // Records carry headers (at most 11 bytes each) and the batch a header and footer;
        // moved records are copies of at most BUDGET bytes read, plus the one record that
        // crosses the budget's end.
        let bound = own + 40 * 11 + 128 + BUDGET + 4096;
        assert!(
            written <= bound,
            "batch {n} wrote {written} bytes, more than its own and one compaction step ({bound})"
        );
        if written > own + 40 * 11 + 128 {
            moving_steps += 1;
        }
        assert_eq!(
            a.last_commit(),
            b.last_commit(),
            "batch {n}: a reopened store wrote other bytes than one never reopened"
        );
        // Reopen a at every step, so that compaction resumes from every kind of cursor.
        drop(a);
        a = Vilmo::open(dir_a.path(), options()).expect("reopen a");
        if n % 50 == 0 {
            assert_eq!(
                contents(&a),
                model,
                "batch {n}: contents of the reopened store"
            );
        }
        if b.log_files().iter().all(|p| !p.ends_with("00000001.vlog")) {
            break;
        }
    }
    assert!(
        b.log_files().iter().all(|p| !p.ends_with("00000001.vlog")),
        "the genesis file was never compacted away"
    );
    // Compacting the genesis file alone takes a step per budget read, each moving records.
    assert!(
        moving_steps >= genesis_len / (BUDGET + 4096) / 2,
        "compaction moved records in {moving_steps} batches, too few to have split the genesis batch ({genesis_len} bytes) into {BUDGET}-byte steps"
    );
    assert_eq!(contents(&a), model);
    assert_eq!(contents(&b), model);
}

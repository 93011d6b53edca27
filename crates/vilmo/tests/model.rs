//! Random sequences of puts, deletes, commits, reopenings and compactions agree with a
//! `BTreeMap`, and two stores fed the same sequence (one reopened along the way, one not)
//! have equal checksums after every commit.

use std::collections::BTreeMap;

use gigas_vilmo::{Batch, Options, Vilmo};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Put(u16, Vec<u8>),
    Delete(u16),
    Commit,
    Reopen,
}

fn key(k: u16) -> Vec<u8> {
    // Keys of different lengths, sharing prefixes, so ordering and hashing both matter.
    let mut key = format!("key-{k}").into_bytes();
    if k.is_multiple_of(3) {
        key.extend_from_slice(&[0xAB; 40]);
    }
    key
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u16..60, proptest::collection::vec(any::<u8>(), 0..120).prop_map(|mut v| { v.truncate(v.len()); v })).prop_map(|(k, v)| Step::Put(k, v)),
        2 => (0u16..60).prop_map(Step::Delete),
        3 => Just(Step::Commit),
        1 => Just(Step::Reopen),
    ]
}

/// Small files and a small compaction budget, so that rotation, compaction across several
/// batches, nullify records and drop records all happen within a few dozen commits.
fn options() -> Options {
    Options {
        target_file_size: 4096,
        compaction_threshold_percent: 60,
        compaction_bytes_per_batch: 700,
        durable: false,
    }
}

fn contents(store: &Vilmo) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    store.for_each(|k, v| {
        assert!(
            out.insert(k.to_vec(), v.to_vec()).is_none(),
            "key listed twice"
        );
    });
    out
}

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[..key.len().min(8)]).into_owned()
}

fn check(store: &Vilmo, model: &BTreeMap<Vec<u8>, Vec<u8>>) -> Result<(), TestCaseError> {
    let got = contents(store);
    let mut diffs = Vec::new();
    for (k, v) in model {
        match got.get(k) {
            None => diffs.push(format!("{} missing", show(k))),
            Some(g) if g != v => diffs.push(format!("{} has a wrong value", show(k))),
            _ => {}
        }
    }
    for k in got.keys() {
        if !model.contains_key(k) {
            diffs.push(format!("{} should be absent", show(k)));
        }
    }
    prop_assert!(
        diffs.is_empty(),
        "after batch {}: {:?}",
        store.last_commit().number,
        diffs
    );
    prop_assert_eq!(store.len(), model.len());
    for k in 0u16..60 {
        let key = key(k);
        prop_assert_eq!(store.get(&key), model.get(&key).map(Vec::as_slice));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn store_agrees_with_model(steps in proptest::collection::vec(step(), 1..400)) {
        let dir_a = tempfile::tempdir().expect("tempdir");
        let dir_b = tempfile::tempdir().expect("tempdir");
        let mut a = Vilmo::open(dir_a.path(), options()).expect("open a");
        let mut b = Vilmo::open(dir_b.path(), options()).expect("open b");
        let mut model = BTreeMap::new();
        let mut pending = BTreeMap::new();
        let mut batch_a = Batch::new();
        let mut batch_b = Batch::new();
        for step in steps {
            match step {
                Step::Put(k, v) => {
                    batch_a.put(&key(k), &v).expect("put");
                    batch_b.put(&key(k), &v).expect("put");
                    pending.insert(key(k), Some(v));
                }
                Step::Delete(k) => {
                    batch_a.delete(&key(k)).expect("delete");
                    batch_b.delete(&key(k)).expect("delete");
                    pending.insert(key(k), None);
                }
                Step::Commit => {
                    let ca = a.commit(std::mem::take(&mut batch_a)).expect("commit a");
                    let cb = b.commit(std::mem::take(&mut batch_b)).expect("commit b");
                    prop_assert_eq!(ca, cb, "same batches, same checksums");
                    for (k, v) in std::mem::take(&mut pending) {
                        match v {
                            Some(v) => { model.insert(k, v); }
                            None => { model.remove(&k); }
                        }
                    }
                    check(&a, &model)?;
                }
                Step::Reopen => {
                    // Uncommitted operations are lost with the process; drop them everywhere.
                    batch_a = Batch::new();
                    batch_b = Batch::new();
                    pending.clear();
                    let before = a.last_commit();
                    drop(a);
                    a = Vilmo::open(dir_a.path(), options()).expect("reopen");
                    prop_assert_eq!(a.last_commit(), before);
                    check(&a, &model)?;
                }
            }
        }
        // Everything the index says is live is bounded by what is on disk, and the store
        // reclaims space: live bytes never exceed the files.
        let stats = a.stats();
        prop_assert!(stats.live_bytes <= stats.disk_bytes);
    }
}

#[test]
fn compaction_removes_files_and_keeps_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Vilmo::open(dir.path(), options()).expect("open");
    let mut model = BTreeMap::new();
    // Overwrite the same few keys many times: almost everything written dies.
    for round in 0..300u32 {
        let mut batch = Batch::new();
        for k in 0..8u16 {
            let value = format!("value-{round}-{k}").into_bytes();
            batch.put(&key(k), &value).expect("put");
            model.insert(key(k), value);
        }
        if round.is_multiple_of(7) {
            batch.delete(&key(3)).expect("delete");
            model.remove(&key(3));
        }
        store.commit(batch).expect("commit");
    }
    let compactions = store.metrics().compactions.get();
    assert!(
        compactions > 10,
        "only {compactions} files were compacted away"
    );
    let stats = store.stats();
    assert!(stats.files < 10, "{} files remain", stats.files);
    assert_eq!(contents(&store), model);
    let last = store.last_commit();
    drop(store);
    let store = Vilmo::open(dir.path(), options()).expect("reopen");
    assert_eq!(store.last_commit(), last);
    assert_eq!(contents(&store), model);
}

#[test]
fn sync_from_logs_reproduces_the_state() {
    let src = tempfile::tempdir().expect("tempdir");
    let dest = tempfile::tempdir().expect("tempdir");
    let mut store = Vilmo::open(src.path(), options()).expect("open");
    for round in 0..120u32 {
        let mut batch = Batch::new();
        for k in 0..12u16 {
            if (round + k as u32).is_multiple_of(5) {
                batch.delete(&key(k)).expect("delete");
            } else {
                batch
                    .put(&key(k), format!("{round}:{k}").as_bytes())
                    .expect("put");
            }
        }
        store.commit(batch).expect("commit");
    }
    assert!(
        store.metrics().compactions.get() > 0,
        "the chain must cross compacted files"
    );
    let expected = store.last_commit();
    let synced = Vilmo::sync_from_logs(
        &store.log_files(),
        dest.path().join("node"),
        options(),
        expected,
    )
    .expect("sync verifies");
    assert_eq!(contents(&synced), contents(&store));
    assert_eq!(synced.last_commit(), expected);

    // A node told to expect another checksum refuses the logs.
    let mut wrong = expected;
    wrong.checksum[0] ^= 1;
    let err = Vilmo::sync_from_logs(
        &store.log_files(),
        dest.path().join("other"),
        options(),
        wrong,
    )
    .expect_err("mismatch detected");
    assert!(err.to_string().contains("expected batch"), "{err}");
}

//! Deterministic workloads shared by the crash and corruption tests.

#![allow(dead_code)]

use std::collections::BTreeMap;

use gigas_vilmo::{Batch, Options, Storage, Vilmo};

/// Small files and compaction steps, so that a few hundred batches rotate and compact often.
pub(crate) fn options(durable: bool) -> Options {
    Options {
        target_file_size: 48 << 10,
        compaction_threshold_percent: 60,
        compaction_bytes_per_batch: 12 << 10,
        durable,
    }
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The operations of batch `n`: about 60 puts and deletes over 1,500 keys.
pub(crate) fn ops(n: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let count = 20 + mix(n) % 80;
    (0..count)
        .map(|i| {
            let r = mix(n * 1_000 + i);
            let key = format!("key-{:04}", r % 1_500).into_bytes();
            if r.is_multiple_of(11) {
                (key, None)
            } else {
                let len = (r >> 20) as usize % 90;
                let value: Vec<u8> = (0..len).map(|j| (r >> (j % 50)) as u8 ^ j as u8).collect();
                (key, Some(value))
            }
        })
        .collect()
}

/// Batch `n` as a [`Batch`].
pub(crate) fn batch(n: u64) -> Batch {
    let mut batch = Batch::new();
    for (k, v) in ops(n) {
        match v {
            Some(v) => batch.put(&k, &v).expect("put"),
            None => batch.delete(&k).expect("delete"),
        }
    }
    batch
}

/// Applies batch `n` to a model.
pub(crate) fn apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, n: u64) {
    for (k, v) in ops(n) {
        match v {
            Some(v) => {
                model.insert(k, v);
            }
            None => {
                model.remove(&k);
            }
        }
    }
}

/// Everything in a store.
pub(crate) fn contents<S: Storage>(store: &Vilmo<S>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    store.for_each(|k, v| {
        out.insert(k.to_vec(), v.to_vec());
    });
    out
}

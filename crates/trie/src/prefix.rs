//! Which subtries a root must recompute: the keys changed since the last root.

use alloy_primitives::B256;
use alloy_trie::Nibbles;

use crate::keys::{key_after, lower_key};

/// Hashed keys changed since the last root, sorted. A subtrie is unchanged, and its stored
/// hash still good, exactly when no key here starts with its path.
#[derive(Debug, Clone, Default)]
pub struct PrefixSet {
    keys: Vec<B256>,
    all: bool,
}

impl PrefixSet {
    /// From keys in any order, with repeats.
    pub fn new(mut keys: Vec<B256>) -> Self {
        keys.sort_unstable();
        keys.dedup();
        Self { keys, all: false }
    }

    /// The keys, sorted.
    pub fn keys(&self) -> &[B256] {
        &self.keys
    }

    /// Every subtrie changed: a rebuild.
    pub fn all() -> Self {
        Self {
            keys: Vec::new(),
            all: true,
        }
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }

    /// How many distinct keys changed (0 for a rebuild).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The keys by their first nibble: one set per nibble that has any, in nibble order.
    pub fn split_by_first_nibble(&self) -> Vec<(u8, PrefixSet)> {
        let mut out: Vec<(u8, PrefixSet)> = Vec::new();
        for key in &self.keys {
            let nibble = key[0] >> 4;
            match out.last_mut() {
                Some((n, set)) if *n == nibble => set.keys.push(*key),
                _ => out.push((
                    nibble,
                    PrefixSet {
                        keys: vec![*key],
                        all: false,
                    },
                )),
            }
        }
        out
    }

    /// The children of the node at `path` under which some key changed, as a mask by
    /// nibble: bit `n` is set exactly when a key here starts with `path` followed by `n`.
    /// One search and a scan of the keys under `path`, for the sixteen questions a walk
    /// asks at each node it enters (the keys under a node are scanned once per level, so a
    /// walk's masks cost one pass over the keys per trie level).
    pub fn child_mask(&self, path: &Nibbles) -> u16 {
        if self.all {
            return u16::MAX;
        }
        let depth = path.len();
        if depth >= 64 {
            return 0;
        }
        let low = lower_key(path);
        let end = key_after(path);
        let from = self.keys.partition_point(|k| *k < low);
        let mut mask = 0u16;
        for key in &self.keys[from..] {
            if end.is_some_and(|end| *key >= end) {
                break;
            }
            let byte = key[depth / 2];
            let nibble = if depth.is_multiple_of(2) {
                byte >> 4
            } else {
                byte & 0x0f
            };
            mask |= 1 << nibble;
        }
        mask
    }

    /// Whether some changed key starts with `prefix`.
    #[cfg(test)]
    pub fn contains_prefix(&self, prefix: &Nibbles) -> bool {
        if self.all {
            return true;
        }
        let low = lower_key(prefix);
        let at = self.keys.partition_point(|k| *k < low);
        match (self.keys.get(at), key_after(prefix)) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(k), Some(end)) => *k < end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_of_changed_keys() {
        let mut a = B256::ZERO;
        a[0] = 0xab;
        a[1] = 0xcd;
        let mut b = B256::ZERO;
        b[0] = 0xff;
        let set = PrefixSet::new(vec![b, a, a]);
        assert!(set.contains_prefix(&Nibbles::new()));
        assert!(set.contains_prefix(&Nibbles::from_nibbles([0xa])));
        assert!(set.contains_prefix(&Nibbles::from_nibbles([0xa, 0xb, 0xc])));
        assert!(!set.contains_prefix(&Nibbles::from_nibbles([0xa, 0xb, 0xd])));
        assert!(!set.contains_prefix(&Nibbles::from_nibbles([0xa, 0xa])));
        assert!(set.contains_prefix(&Nibbles::from_nibbles([0xf, 0xf])));
        assert!(!set.contains_prefix(&Nibbles::from_nibbles([0xf, 0xe])));
        assert!(!PrefixSet::default().contains_prefix(&Nibbles::new()));
        assert!(PrefixSet::all().contains_prefix(&Nibbles::from_nibbles([1, 2])));
    }

    /// Each bit of a child mask answers the prefix question for that child, at every
    /// depth, for random keys (some sharing long prefixes) and the keys' own paths.
    #[test]
    fn child_masks_answer_as_prefix_checks_do() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut keys = Vec::new();
        for i in 0..200u64 {
            let mut key = B256::ZERO;
            for chunk in key.0.chunks_mut(8) {
                chunk.copy_from_slice(&next().to_be_bytes());
            }
            // Every fourth key shares its first 20 bytes with the one before it.
            if i % 4 == 3 {
                let prev: B256 = keys[keys.len() - 1];
                key.0[..20].copy_from_slice(&prev.0[..20]);
            }
            keys.push(key);
        }
        let set = PrefixSet::new(keys.clone());
        let mut paths = vec![Nibbles::new()];
        for key in keys.iter().take(50) {
            let full = Nibbles::unpack(key);
            for len in [1, 2, 3, 5, 20, 40, 41, 63] {
                paths.push(full.slice(..len));
            }
        }
        for n in 0..16u8 {
            paths.push(Nibbles::from_nibbles([n]));
            paths.push(Nibbles::from_nibbles([0xf, n]));
        }
        for path in paths {
            let mask = set.child_mask(&path);
            for n in 0..16u8 {
                let mut child = path;
                child.push(n);
                assert_eq!(
                    mask & (1 << n) != 0,
                    set.contains_prefix(&child),
                    "{path:?} + {n}"
                );
            }
        }
        assert_eq!(PrefixSet::all().child_mask(&Nibbles::new()), u16::MAX);
        assert_eq!(PrefixSet::default().child_mask(&Nibbles::new()), 0);
    }
}

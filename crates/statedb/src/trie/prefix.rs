//! Which subtries a root must recompute: the keys changed since the last root.

use alloy_primitives::B256;
use alloy_trie::Nibbles;

use crate::codec::{key_after, lower_key};

/// Hashed keys changed since the last root, sorted. A subtrie is unchanged, and its stored
/// hash still good, exactly when no key here starts with its path.
#[derive(Debug, Clone, Default)]
pub(crate) struct PrefixSet {
    keys: Vec<B256>,
    all: bool,
}

impl PrefixSet {
    /// From keys in any order, with repeats.
    pub(crate) fn new(mut keys: Vec<B256>) -> Self {
        keys.sort_unstable();
        keys.dedup();
        Self { keys, all: false }
    }

    /// Every subtrie changed: a rebuild.
    pub(crate) fn all() -> Self {
        Self {
            keys: Vec::new(),
            all: true,
        }
    }

    /// Whether nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }

    /// How many distinct keys changed (0 for a rebuild).
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The children of the node at `prefix` (bit `i` for child nibble `i`) that some changed
    /// key lies under. One binary search per changed child, over the keys under `prefix`.
    pub(crate) fn changed_children(&self, prefix: &Nibbles) -> u16 {
        if self.all {
            return u16::MAX;
        }
        let depth = prefix.len();
        if depth >= 64 {
            return 0;
        }
        let end = key_after(prefix);
        let low = lower_key(prefix);
        let mut at = self.keys.partition_point(|k| *k < low);
        let mut mask = 0u16;
        while let Some(key) = self.keys.get(at) {
            if end.is_some_and(|end| *key >= end) {
                break;
            }
            let byte = key[depth / 2];
            let nibble = if depth % 2 == 0 { byte >> 4 } else { byte & 0x0f };
            mask |= 1 << nibble;
            let mut child = *prefix;
            child.push(nibble);
            let Some(next) = key_after(&child) else {
                break;
            };
            at += self.keys[at..].partition_point(|k| *k < next);
        }
        mask
    }

    /// Whether some changed key starts with `prefix`.
    pub(crate) fn contains_prefix(&self, prefix: &Nibbles) -> bool {
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

        assert_eq!(set.changed_children(&Nibbles::new()), 1 << 0xa | 1 << 0xf);
        assert_eq!(set.changed_children(&Nibbles::from_nibbles([0xa])), 1 << 0xb);
        assert_eq!(set.changed_children(&Nibbles::from_nibbles([0xa, 0xb])), 1 << 0xc);
        assert_eq!(set.changed_children(&Nibbles::from_nibbles([0xa, 0xc])), 0);
        assert_eq!(set.changed_children(&Nibbles::from_nibbles([0xf, 0xf])), 1);
        assert_eq!(PrefixSet::all().changed_children(&Nibbles::new()), u16::MAX);
        // Against contains_prefix, over random keys and prefixes.
        let mut seed = 3u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let keys: Vec<B256> = (0..300)
            .map(|_| alloy_primitives::keccak256(rand().to_be_bytes()))
            .collect();
        let set = PrefixSet::new(keys.clone());
        for key in keys.iter().take(50) {
            for len in 0..4 {
                let prefix = Nibbles::unpack(key).slice(..len);
                let mut expected = 0u16;
                for i in 0..16u8 {
                    let mut child = prefix;
                    child.push(i);
                    if set.contains_prefix(&child) {
                        expected |= 1 << i;
                    }
                }
                assert_eq!(set.changed_children(&prefix), expected, "{prefix:?}");
            }
        }
    }
}

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

    /// The keys by their first nibble: one set per nibble that has any, in nibble order.
    pub(crate) fn split_by_first_nibble(&self) -> Vec<(u8, PrefixSet)> {
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
    }
}

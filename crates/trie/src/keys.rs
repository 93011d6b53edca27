//! Hashed keys and nibble paths: where a subtrie's keys begin and end, and the byte key under
//! which a stored node sorts in the trie's pre-order.

use alloy_primitives::B256;
use alloy_trie::Nibbles;

/// Bytes of a path key ([`encode_path`]).
pub const PATH_LEN: usize = 33;

/// A nibble path as a key: packed nibbles padded with zeros to 32 bytes, then the nibble
/// count. Byte order of these keys is the trie's pre-order (a path sorts before its
/// extensions, siblings by nibble), so a seek finds the first node at or under a path.
pub fn encode_path(path: &Nibbles) -> [u8; PATH_LEN] {
    let mut out = [0u8; PATH_LEN];
    path.pack_to(&mut out[..32]);
    out[32] = path.len() as u8;
    out
}

/// The first 32-byte key with this prefix (the prefix padded with zero nibbles).
pub fn lower_key(path: &Nibbles) -> B256 {
    let mut out = B256::ZERO;
    path.pack_to(out.as_mut_slice());
    out
}

/// The first 32-byte key after every key with this prefix; `None` when no key follows it
/// (the prefix is all `f`, or empty).
pub fn key_after(path: &Nibbles) -> Option<B256> {
    path.increment().map(|next| lower_key(&next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ranges_of_prefixes() {
        let p = Nibbles::from_nibbles([0xa, 0xb, 0xc]);
        assert_eq!(lower_key(&p)[..2], [0xab, 0xc0]);
        assert_eq!(key_after(&p).unwrap()[..2], [0xab, 0xd0]);
        assert_eq!(key_after(&Nibbles::from_nibbles([0xf, 0xf])), None);
        assert_eq!(key_after(&Nibbles::new()), None);
    }

    #[test]
    fn path_keys_sort_in_trie_pre_order() {
        let keys: Vec<_> = [
            &[][..],
            &[0],
            &[0, 0],
            &[0, 0, 0],
            &[0, 1],
            &[0, 15, 15],
            &[1],
            &[1, 0],
            &[1, 0, 0],
            &[1, 2],
            &[15],
            &[15, 15],
        ]
        .iter()
        .map(|p| encode_path(&Nibbles::from_nibbles(p)))
        .collect();
        for pair in keys.windows(2) {
            assert!(pair[0] < pair[1]);
        }
    }
}

//! Keccak-256 of many independent messages at once: eight side by side where the CPU has
//! AVX-512F, one at a time (alloy's `keccak256`, the `asm-keccak` build) elsewhere.
//!
//! Why: a state root re-hashes thousands of trie nodes per block, each its own short
//! message (a leaf of about 110 bytes, a branch of up to 532), and the scalar permutation
//! was a sixth of a full node's CPU over 10M accounts. The nodes of one depth do not
//! depend on each other, so a caller that hashes a trie level by level can hand them over
//! together. With AVX-512 each of the 25 words of the Keccak state gets a register holding
//! that word of eight messages ("vertical", as the lattice's ChaCha does in
//! [`crate::keystream`]): a round is rotates and three-input logic on whole registers with
//! no shuffles, and native 64-bit rotates make rho cheap.
//!
//! This module must not know what the messages are (trie nodes, keys): it only hashes bytes,
//! and gives exactly `alloy_primitives::keccak256`'s digests on every path (tests hold both
//! paths to it and to published vectors).

use alloy_primitives::B256;

/// Fewest messages worth a pass of the eight-lane permutation: below, the lanes left empty
/// cost more than hashing the few one by one.
#[cfg(target_arch = "x86_64")]
const MIN_BATCH: usize = 3;

/// `out[i] = keccak256(messages[i])` for every `i`.
///
/// # Panics
///
/// When `out` is shorter than `messages` (a caller's bug, not an input's).
pub fn keccak256_each(messages: &[&[u8]], out: &mut [B256]) {
    assert!(
        out.len() >= messages.len(),
        "keccak256_each: {} messages, room for {} digests",
        messages.len(),
        out.len()
    );
    #[cfg(target_arch = "x86_64")]
    if messages.len() >= MIN_BATCH && std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F, the one feature `avx512::each` is compiled for.
        unsafe { avx512::each(messages, out) };
        return;
    }
    portable(messages, out);
}

/// The Keccak-256 of each item, in order ([`keccak256_each`] over any byte strings:
/// addresses, 32-byte words, encodings).
pub fn keccak256_all<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Vec<B256> {
    let messages: Vec<&[u8]> = items.into_iter().collect();
    let mut out = vec![B256::ZERO; messages.len()];
    keccak256_each(&messages, &mut out);
    out
}

/// Whether [`keccak256_each`] hashes eight messages at a time on this CPU.
pub fn batched_on_this_cpu() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn portable(messages: &[&[u8]], out: &mut [B256]) {
    for (digest, message) in out.iter_mut().zip(messages) {
        *digest = alloy_primitives::keccak256(message);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use alloy_primitives::B256;
    use std::arch::x86_64::*;

    /// Keccak-256's rate: bytes absorbed per permutation.
    const RATE: usize = 136;

    /// Permutations a message takes: its bytes, the padding's first byte, and its last byte,
    /// in whole blocks.
    fn blocks_of(len: usize) -> usize {
        len / RATE + 1
    }

    /// Block `b` of `message` as 17 little-endian words; the last one padded with Keccak's
    /// `pad10*1` (domain byte 0x01, the original Keccak's, not SHA-3's 0x06).
    fn padded_block(message: &[u8], b: usize) -> [u64; RATE / 8] {
        let start = b * RATE;
        let mut bytes = [0u8; RATE];
        let end = message.len().min(start + RATE);
        let take = end.saturating_sub(start);
        bytes[..take].copy_from_slice(&message[start..end]);
        if b + 1 == blocks_of(message.len()) {
            bytes[take] ^= 0x01;
            bytes[RATE - 1] ^= 0x80;
        }
        let mut words = [0u64; RATE / 8];
        for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(chunk);
            *word = u64::from_le_bytes(le);
        }
        words
    }

    /// Messages hashed side by side: one per 64-bit lane of a 512-bit register.
    const LANES: usize = 8;

    /// Iota's round constants.
    const RC: [u64; 24] = [
        0x0000_0000_0000_0001,
        0x0000_0000_0000_8082,
        0x8000_0000_0000_808A,
        0x8000_0000_8000_8000,
        0x0000_0000_0000_808B,
        0x0000_0000_8000_0001,
        0x8000_0000_8000_8081,
        0x8000_0000_0000_8009,
        0x0000_0000_0000_008A,
        0x0000_0000_0000_0088,
        0x0000_0000_8000_8009,
        0x0000_0000_8000_000A,
        0x0000_0000_8000_808B,
        0x8000_0000_0000_008B,
        0x8000_0000_0000_8089,
        0x8000_0000_0000_8003,
        0x8000_0000_0000_8002,
        0x8000_0000_0000_0080,
        0x0000_0000_0000_800A,
        0x8000_0000_8000_000A,
        0x8000_0000_8000_8081,
        0x8000_0000_0000_8080,
        0x0000_0000_8000_0001,
        0x8000_0000_8000_8008,
    ];

    /// `a ^ b ^ c` as `vpternlogq`'s truth table.
    const XOR3: i32 = 0x96;
    /// `a ^ (!b & c)`, chi's step.
    const CHI: i32 = 0xD2;

    /// Rho's rotation of word `x + 5y` by a const amount (the intrinsic takes it as a const
    /// generic, so each of the 25 is spelled out).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn rho(a: &[__m512i; 25]) -> [__m512i; 25] {
        [
            a[0],
            _mm512_rol_epi64::<1>(a[1]),
            _mm512_rol_epi64::<62>(a[2]),
            _mm512_rol_epi64::<28>(a[3]),
            _mm512_rol_epi64::<27>(a[4]),
            _mm512_rol_epi64::<36>(a[5]),
            _mm512_rol_epi64::<44>(a[6]),
            _mm512_rol_epi64::<6>(a[7]),
            _mm512_rol_epi64::<55>(a[8]),
            _mm512_rol_epi64::<20>(a[9]),
            _mm512_rol_epi64::<3>(a[10]),
            _mm512_rol_epi64::<10>(a[11]),
            _mm512_rol_epi64::<43>(a[12]),
            _mm512_rol_epi64::<25>(a[13]),
            _mm512_rol_epi64::<39>(a[14]),
            _mm512_rol_epi64::<41>(a[15]),
            _mm512_rol_epi64::<45>(a[16]),
            _mm512_rol_epi64::<15>(a[17]),
            _mm512_rol_epi64::<21>(a[18]),
            _mm512_rol_epi64::<8>(a[19]),
            _mm512_rol_epi64::<18>(a[20]),
            _mm512_rol_epi64::<2>(a[21]),
            _mm512_rol_epi64::<61>(a[22]),
            _mm512_rol_epi64::<56>(a[23]),
            _mm512_rol_epi64::<14>(a[24]),
        ]
    }

    /// Keccak-f[1600] on eight states, word `x + 5y` of state `l` in lane `l` of `a[x + 5y]`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn permute(a: &mut [__m512i; 25]) {
        for rc in RC {
            // Theta: each column's parity, folded into its two neighbours.
            let mut c = [_mm512_setzero_si512(); 5];
            for (x, parity) in c.iter_mut().enumerate() {
                let three = _mm512_ternarylogic_epi64::<XOR3>(a[x], a[x + 5], a[x + 10]);
                *parity = _mm512_ternarylogic_epi64::<XOR3>(three, a[x + 15], a[x + 20]);
            }
            for x in 0..5 {
                let d = _mm512_xor_si512(c[(x + 4) % 5], _mm512_rol_epi64::<1>(c[(x + 1) % 5]));
                for y in 0..5 {
                    a[x + 5 * y] = _mm512_xor_si512(a[x + 5 * y], d);
                }
            }
            // Rho and pi: word (x, y) rotated goes to (y, 2x + 3y).
            let rotated = rho(a);
            let mut b = [_mm512_setzero_si512(); 25];
            for x in 0..5 {
                for y in 0..5 {
                    b[y + 5 * ((2 * x + 3 * y) % 5)] = rotated[x + 5 * y];
                }
            }
            // Chi along each row, then iota.
            for y in 0..5 {
                for x in 0..5 {
                    a[x + 5 * y] = _mm512_ternarylogic_epi64::<CHI>(
                        b[x + 5 * y],
                        b[(x + 1) % 5 + 5 * y],
                        b[(x + 2) % 5 + 5 * y],
                    );
                }
            }
            a[0] = _mm512_xor_si512(a[0], _mm512_set1_epi64(rc as i64));
        }
    }

    /// See [`super::keccak256_each`]: the messages sorted by length so that the eight of a
    /// pass take about as many permutations, then eight at a time; a short last pass
    /// leaves its idle lanes empty.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn each(messages: &[&[u8]], out: &mut [B256]) {
        let mut order: Vec<u32> = (0..messages.len() as u32).collect();
        order.sort_unstable_by_key(|&i| blocks_of(messages[i as usize].len()));
        for pass in order.chunks(LANES) {
            let lanes: [Option<&[u8]>; LANES] =
                std::array::from_fn(|l| pass.get(l).map(|&i| messages[i as usize]));
            let digests = eight(&lanes);
            for (&i, digest) in pass.iter().zip(digests) {
                out[i as usize] = digest;
            }
        }
    }

    /// The digests of up to eight messages (`None`: an idle lane, whose digest is junk).
    #[target_feature(enable = "avx512f")]
    fn eight(lanes: &[Option<&[u8]>; LANES]) -> [B256; LANES] {
        let blocks: [usize; LANES] =
            std::array::from_fn(|l| lanes[l].map_or(0, |m| blocks_of(m.len())));
        let most = blocks.iter().copied().max().unwrap_or(0);
        let mut a = [_mm512_setzero_si512(); 25];
        let mut digests = [B256::ZERO; LANES];
        for b in 0..most {
            // Word w of lane l's block at [w][l]; a lane past its last block absorbs zeros
            // (its digest was taken already).
            let mut words = [[0u64; LANES]; RATE / 8];
            for (l, lane) in lanes.iter().enumerate() {
                if let Some(message) = lane.filter(|_| b < blocks[l]) {
                    for (w, word) in padded_block(message, b).into_iter().enumerate() {
                        words[w][l] = word;
                    }
                }
            }
            for (state, row) in a.iter_mut().zip(&words) {
                // SAFETY: `row` is 64 readable bytes; the load is unaligned.
                let input = unsafe { _mm512_loadu_si512(row.as_ptr().cast()) };
                *state = _mm512_xor_si512(*state, input);
            }
            permute(&mut a);
            if !blocks.contains(&(b + 1)) {
                continue;
            }
            let mut squeezed = [[0u64; LANES]; 4];
            for (row, state) in squeezed.iter_mut().zip(&a) {
                // SAFETY: `row` is 64 writable bytes; the store is unaligned.
                unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), *state) };
            }
            for (l, digest) in digests.iter_mut().enumerate() {
                if blocks[l] == b + 1 {
                    for (w, row) in squeezed.iter().enumerate() {
                        digest.0[w * 8..w * 8 + 8].copy_from_slice(&row[l].to_le_bytes());
                    }
                }
            }
        }
        digests
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{b256, keccak256};

    /// Messages of every length around the block boundaries, with varied bytes.
    fn messages() -> Vec<Vec<u8>> {
        let mut lengths: Vec<usize> = (0..=300).collect();
        lengths.extend([407, 408, 409, 531, 532, 543, 544, 545, 1000, 4096]);
        lengths
            .into_iter()
            .map(|len| {
                (0..len)
                    .map(|i| (i as u8).wrapping_mul(29).wrapping_add(len as u8))
                    .collect()
            })
            .collect()
    }

    fn check(messages: &[&[u8]]) {
        let mut out = vec![B256::ZERO; messages.len()];
        keccak256_each(messages, &mut out);
        for (message, digest) in messages.iter().zip(&out) {
            assert_eq!(*digest, keccak256(message), "length {}", message.len());
        }
    }

    #[test]
    fn every_length_and_batch_size_matches_alloys_keccak() {
        let all = messages();
        let refs: Vec<&[u8]> = all.iter().map(Vec::as_slice).collect();
        check(&refs);
        // Every batch size from one message to several passes, mixed lengths in a pass.
        for size in 0..=20 {
            for start in (0..refs.len().saturating_sub(size)).step_by(37) {
                check(&refs[start..start + size]);
            }
        }
    }

    #[test]
    fn keccak256_all_hashes_each_item_in_order() {
        let addresses: Vec<[u8; 20]> = (0u8..19).map(|i| [i; 20]).collect();
        let digests = keccak256_all(addresses.iter().map(|a| a.as_slice()));
        assert_eq!(digests.len(), addresses.len());
        for (address, digest) in addresses.iter().zip(&digests) {
            assert_eq!(*digest, keccak256(address));
        }
        assert!(keccak256_all([]).is_empty());
    }

    #[test]
    fn published_vectors() {
        // keccak256("") and keccak256("abc"), as Ethereum's tooling gives them: an outside
        // check on the padding (Keccak's 0x01, not SHA-3's 0x06).
        let empty = b256!("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
        let abc = b256!("4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45");
        let inputs: [&[u8]; 4] = [b"", b"abc", b"", b"abc"];
        let mut out = [B256::ZERO; 4];
        keccak256_each(&inputs, &mut out);
        assert_eq!(out, [empty, abc, empty, abc]);
    }

    #[test]
    fn the_eight_lane_path_ran_where_the_cpu_has_it() {
        if !batched_on_this_cpu() {
            eprintln!("no AVX-512F on this CPU: only the portable path was checked");
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let all = messages();
            let refs: Vec<&[u8]> = all.iter().map(Vec::as_slice).collect();
            let mut out = vec![B256::ZERO; refs.len()];
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { avx512::each(&refs, &mut out) };
            for (message, digest) in refs.iter().zip(&out) {
                assert_eq!(*digest, keccak256(message), "length {}", message.len());
            }
        }
    }
}

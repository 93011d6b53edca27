//! ChaCha's keystream for a lattice element: 2,048 bytes (32 blocks) under a 32-byte key,
//! nonce zero, block counter from zero, exactly the bytes of `chacha20::ChaCha12Rng` seeded
//! with the key.
//!
//! Why not only the `chacha20` crate: its RNG path keeps two blocks per AVX2 register and
//! reshuffles rows to columns every round, four blocks at a time, even where AVX-512 is there.
//! A lattice element is 32 blocks whose counters are known up front, so with AVX-512 the 16
//! words of the state each get a register holding that word of 16 blocks ("vertical"): a round
//! is plain adds, xors and native rotates with no shuffles, and one transpose at the end puts
//! the blocks in order. On machines without AVX-512 the crate draws the bytes, so every
//! machine produces the same keystream; the tests hold both paths to the crate's bytes.
//!
//! This module must not decide what a lattice element is (that is [`crate::lattice`]): it
//! only expands a key.

/// Bytes of one element's keystream.
pub(crate) const BYTES: usize = 2048;

/// Fills `out` with the keystream of ChaCha with `DOUBLE_ROUNDS` double rounds (4: ChaCha8,
/// 6: ChaCha12, 10: ChaCha20) under `key`.
pub(crate) fn fill<const DOUBLE_ROUNDS: usize>(key: &[u8; 32], out: &mut [u8; BYTES]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F, the one feature `avx512::fill` is compiled for.
        unsafe { avx512::fill::<DOUBLE_ROUNDS>(key, out) };
        return;
    }
    portable::<DOUBLE_ROUNDS>(key, out);
}

/// The `chacha20` crate's RNG, which picks its own SIMD backend (AVX2, SSE2, NEON or none).
fn portable<const DOUBLE_ROUNDS: usize>(key: &[u8; 32], out: &mut [u8; BYTES]) {
    use rand_core::{Rng as _, SeedableRng as _};
    match DOUBLE_ROUNDS {
        4 => chacha20::ChaCha8Rng::from_seed(*key).fill_bytes(out),
        6 => chacha20::ChaCha12Rng::from_seed(*key).fill_bytes(out),
        10 => chacha20::ChaCha20Rng::from_seed(*key).fill_bytes(out),
        other => unreachable!("ChaCha with {other} double rounds is not a variant we draw"),
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::BYTES;
    use std::arch::x86_64::*;

    /// "expand 32-byte k", the first four words of every ChaCha state.
    const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

    /// Blocks computed side by side: one per 32-bit lane of a 512-bit register.
    const LANES: usize = 16;

    /// One quarter round on four words of 16 states at once.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn quarter(x: &mut [__m512i; 16], a: usize, b: usize, c: usize, d: usize) {
        x[a] = _mm512_add_epi32(x[a], x[b]);
        x[d] = _mm512_rol_epi32::<16>(_mm512_xor_si512(x[d], x[a]));
        x[c] = _mm512_add_epi32(x[c], x[d]);
        x[b] = _mm512_rol_epi32::<12>(_mm512_xor_si512(x[b], x[c]));
        x[a] = _mm512_add_epi32(x[a], x[b]);
        x[d] = _mm512_rol_epi32::<8>(_mm512_xor_si512(x[d], x[a]));
        x[c] = _mm512_add_epi32(x[c], x[d]);
        x[b] = _mm512_rol_epi32::<7>(_mm512_xor_si512(x[b], x[c]));
    }

    /// See [`super::fill`]; 16 blocks per pass, two passes.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fill<const DOUBLE_ROUNDS: usize>(key: &[u8; 32], out: &mut [u8; BYTES]) {
        let mut key_words = [0u32; 8];
        for (word, bytes) in key_words.iter_mut().zip(key.chunks_exact(4)) {
            *word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        let lane_index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for (pass, chunk) in out.chunks_exact_mut(LANES * 64).enumerate() {
            // Word w of the state of block `pass * 16 + lane` sits in lane `lane` of start[w].
            let mut start = [_mm512_setzero_si512(); 16];
            for (word, constant) in start.iter_mut().zip(SIGMA) {
                *word = _mm512_set1_epi32(constant as i32);
            }
            for (word, key_word) in start[4..12].iter_mut().zip(key_words) {
                *word = _mm512_set1_epi32(key_word as i32);
            }
            // Word 12 is the low half of the block counter; 13 (its high half, as the RNG
            // counts) and the nonce (14, 15) stay zero for the 32 blocks of an element.
            start[12] = _mm512_add_epi32(_mm512_set1_epi32((pass * LANES) as i32), lane_index);
            let mut x = start;
            for _ in 0..DOUBLE_ROUNDS {
                quarter(&mut x, 0, 4, 8, 12);
                quarter(&mut x, 1, 5, 9, 13);
                quarter(&mut x, 2, 6, 10, 14);
                quarter(&mut x, 3, 7, 11, 15);
                quarter(&mut x, 0, 5, 10, 15);
                quarter(&mut x, 1, 6, 11, 12);
                quarter(&mut x, 2, 7, 8, 13);
                quarter(&mut x, 3, 4, 9, 14);
            }
            for (word, initial) in x.iter_mut().zip(start) {
                *word = _mm512_add_epi32(*word, initial);
            }
            for (block, row) in transpose(&x).iter().enumerate() {
                let at = chunk[block * 64..block * 64 + 64].as_mut_ptr();
                // SAFETY: `at` starts 64 writable bytes inside `chunk`; the store is unaligned.
                unsafe { _mm512_storeu_si512(at.cast(), *row) };
            }
        }
    }

    /// Turns 16 registers of one word of 16 blocks into 16 registers of one block's 16
    /// words: 32-bit and 64-bit interleaves inside each 128-bit lane, then two exchanges of
    /// whole 128-bit lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn transpose(x: &[__m512i; 16]) -> [__m512i; 16] {
        // After the interleaves, quad[4g + j] lane L holds words 4g..4g+3 of block 4L + j.
        let mut pairs = [_mm512_setzero_si512(); 16];
        for i in 0..8 {
            pairs[2 * i] = _mm512_unpacklo_epi32(x[2 * i], x[2 * i + 1]);
            pairs[2 * i + 1] = _mm512_unpackhi_epi32(x[2 * i], x[2 * i + 1]);
        }
        let mut quad = [_mm512_setzero_si512(); 16];
        for g in 0..4 {
            let (lo, hi) = (pairs[4 * g], pairs[4 * g + 1]);
            let (lo2, hi2) = (pairs[4 * g + 2], pairs[4 * g + 3]);
            quad[4 * g] = _mm512_unpacklo_epi64(lo, lo2);
            quad[4 * g + 1] = _mm512_unpackhi_epi64(lo, lo2);
            quad[4 * g + 2] = _mm512_unpacklo_epi64(hi, hi2);
            quad[4 * g + 3] = _mm512_unpackhi_epi64(hi, hi2);
        }
        // Block 4L + j is lane L of quad[j], quad[4 + j], quad[8 + j], quad[12 + j]:
        // a 4x4 transpose of 128-bit lanes for each j.
        let mut blocks = [_mm512_setzero_si512(); 16];
        for j in 0..4 {
            let (a, b, c, d) = (quad[j], quad[4 + j], quad[8 + j], quad[12 + j]);
            let ab_even = _mm512_shuffle_i32x4::<0x88>(a, b);
            let ab_odd = _mm512_shuffle_i32x4::<0xdd>(a, b);
            let cd_even = _mm512_shuffle_i32x4::<0x88>(c, d);
            let cd_odd = _mm512_shuffle_i32x4::<0xdd>(c, d);
            blocks[j] = _mm512_shuffle_i32x4::<0x88>(ab_even, cd_even);
            blocks[4 + j] = _mm512_shuffle_i32x4::<0x88>(ab_odd, cd_odd);
            blocks[8 + j] = _mm512_shuffle_i32x4::<0xdd>(ab_even, cd_even);
            blocks[12 + j] = _mm512_shuffle_i32x4::<0xdd>(ab_odd, cd_odd);
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> impl Iterator<Item = [u8; 32]> {
        // Keys with every byte position and value exercised, and the degenerate ones.
        (0u8..40)
            .map(|seed| {
                let mut key = [0u8; 32];
                for (i, byte) in key.iter_mut().enumerate() {
                    *byte = seed
                        .wrapping_mul(97)
                        .wrapping_add((i as u8).wrapping_mul(31));
                }
                key
            })
            .chain([[0u8; 32], [0xff; 32]])
    }

    fn each_variant(check: impl Fn(&str, &[u8; BYTES], &[u8; BYTES])) {
        for key in keys() {
            let (mut fast, mut crate_bytes) = ([0u8; BYTES], [0u8; BYTES]);
            fill::<4>(&key, &mut fast);
            portable::<4>(&key, &mut crate_bytes);
            check("ChaCha8", &fast, &crate_bytes);
            fill::<6>(&key, &mut fast);
            portable::<6>(&key, &mut crate_bytes);
            check("ChaCha12", &fast, &crate_bytes);
            fill::<10>(&key, &mut fast);
            portable::<10>(&key, &mut crate_bytes);
            check("ChaCha20", &fast, &crate_bytes);
        }
    }

    #[test]
    fn the_keystream_is_the_chacha20_crates_on_this_machine() {
        each_variant(|name, fast, crate_bytes| assert_eq!(fast, crate_bytes, "{name}"));
    }

    #[test]
    fn the_keystream_is_rfc_8439s_block_function() {
        // RFC 8439 section 2.3.2's key with a zero nonce and counter: an outside check on
        // the block layout, written from the RFC's quarter round, not from either path.
        fn block(key: &[u8; 32], counter: u32, double_rounds: usize) -> [u8; 64] {
            let mut s = [0u32; 16];
            s[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
            for (i, word) in key.chunks_exact(4).enumerate() {
                s[4 + i] = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            }
            s[12] = counter;
            let mut x = s;
            let qr = |x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize| {
                x[a] = x[a].wrapping_add(x[b]);
                x[d] = (x[d] ^ x[a]).rotate_left(16);
                x[c] = x[c].wrapping_add(x[d]);
                x[b] = (x[b] ^ x[c]).rotate_left(12);
                x[a] = x[a].wrapping_add(x[b]);
                x[d] = (x[d] ^ x[a]).rotate_left(8);
                x[c] = x[c].wrapping_add(x[d]);
                x[b] = (x[b] ^ x[c]).rotate_left(7);
            };
            for _ in 0..double_rounds {
                for (a, b, c, d) in [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)] {
                    qr(&mut x, a, b, c, d);
                }
                for (a, b, c, d) in [(0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)] {
                    qr(&mut x, a, b, c, d);
                }
            }
            let mut bytes = [0u8; 64];
            for (i, word) in x.iter().enumerate() {
                bytes[4 * i..4 * i + 4].copy_from_slice(&s[i].wrapping_add(*word).to_le_bytes());
            }
            bytes
        }
        for key in keys() {
            let mut fast = [0u8; BYTES];
            fill::<6>(&key, &mut fast);
            for (counter, chunk) in fast.chunks_exact(64).enumerate() {
                assert_eq!(chunk, block(&key, counter as u32, 6), "block {counter}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx512_path_ran_where_the_cpu_has_it() {
        // Says which path the other tests held to the crate's bytes, so a run on a machine
        // without AVX-512 is not mistaken for a check of it.
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512F here: only the portable path was checked");
            return;
        }
        let key = [7u8; 32];
        let (mut fast, mut crate_bytes) = ([0u8; BYTES], [0u8; BYTES]);
        // SAFETY: AVX-512F was detected above.
        unsafe { avx512::fill::<6>(&key, &mut fast) };
        portable::<6>(&key, &mut crate_bytes);
        assert_eq!(fast, crate_bytes);
    }
}

//! Resident memory levels off while the JIT code cache keeps compiling and evicting: twenty
//! passes over the mainnet blocks under `on` with a small budget, the process's resident set
//! read from /proc after each pass. In a file of its own, so that it runs in a process of its
//! own: other tests' allocations would move the figures.
//!
//! Every pass replays the same five blocks, so that passes 11 to 20 do exactly what passes 1
//! to 10 did: whatever the first passes needed (the blocks' databases, revm's buffers, the
//! allocator's arenas, the compiler's scratch space) is in place by then, and the last ten
//! can only add what leaks. With a hotness of 1,000,000 gas and a budget of 4 MiB (about a
//! dozen of these blocks' contracts), the hot contracts do not fit: each pass evicts code that
//! later blocks of the same pass compile again, so the cache keeps taking in and freeing code
//! to the end (some 60 MiB of machine code over the last ten passes).

use std::sync::Arc;

use gigas_evm::jit::{CacheConfig, CodeCache, Hotness, JitMode};
use gigas_evm::{execute_block, PlainEvm};
use gigas_test_support::mainnet_blocks;

const BUDGET: u64 = 4 << 20;
const PASSES: usize = 20;
/// The blocks of every pass: five recent (Cancun) blocks, busy with DeFi contracts.
const BLOCKS: std::ops::Range<usize> = 40..45;

/// The process's resident set (`VmRSS` in /proc/self/status).
fn resident_set_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .expect("VmRSS in /proc/self/status");
    kib * 1024
}

/// Bytes of anonymous executable mappings (/proc/self/maps): the JIT's machine code, as the
/// kernel sees it.
fn executable_anonymous_bytes() -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // address, perms, offset, device, inode and no path: anonymous.
            if fields.len() != 5 || !fields[1].starts_with("r-x") {
                return None;
            }
            let (start, end) = fields[0].split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            Some(end - start)
        })
        .sum()
}

struct Pass {
    rss: u64,
    exec: u64,
    resident: u64,
    compiled_code: u64,
}

#[test]
fn resident_memory_levels_off_over_twenty_passes() {
    let blocks = mainnet_blocks();
    assert!(blocks.len() >= BLOCKS.end);
    let cache = CodeCache::with_config(CacheConfig {
        budget_bytes: BUDGET,
        hotness: Hotness {
            calls: 1,
            gas: 1_000_000,
        },
        ..CacheConfig::new(JitMode::On)
    });
    let mut passes: Vec<Pass> = Vec::new();
    eprintln!(
        "pass | RSS MiB | resident KiB | mapped KiB | exec anon KiB | compiles | evictions | freed"
    );
    for pass in 0..PASSES {
        for (fixture, block) in &blocks[BLOCKS] {
            let mut evm = PlainEvm::with_jit(fixture.database(), block, Arc::clone(&cache));
            let outcome = execute_block(&mut evm, block)
                .unwrap_or_else(|e| panic!("block {} fails: {e}", block.number));
            let check = outcome.check(block).expect("fixtures have headers");
            assert!(check.is_match(), "block {}: {check:?}", block.number);
        }
        cache.wait_for_compiles();
        let residency = cache
            .residency()
            .unwrap_or_else(|e| panic!("pass {}: {e}", pass + 1));
        let counts = cache.stats().snapshot();
        let row = Pass {
            rss: resident_set_bytes(),
            exec: executable_anonymous_bytes(),
            resident: residency.resident_bytes,
            compiled_code: counts.code_bytes,
        };
        eprintln!(
            "{:>4} | {:>7.1} | {:>12} | {:>10} | {:>13} | {:>8} | {:>9} | {:>5}",
            pass + 1,
            row.rss as f64 / (1 << 20) as f64,
            row.resident / 1024,
            counts.mapped_bytes / 1024,
            row.exec / 1024,
            counts.compiled,
            counts.evictions,
            counts.freed_modules
        );
        assert!(row.resident <= BUDGET, "pass {}: over the budget", pass + 1);
        // No EVM is alive between passes: all the code mapped is the cache's.
        assert_eq!(counts.mapped_bytes, row.resident, "pass {}", pass + 1);
        // The kernel agrees: the process maps no more executable memory than the cache
        // holds, beyond what other code of the process maps anonymously (a page or two).
        assert!(
            row.exec <= row.resident + (64 << 10),
            "pass {}: {} bytes of anonymous executable memory, {} held by the cache",
            pass + 1,
            row.exec,
            row.resident
        );
        passes.push(row);
    }
    let (early, late) = passes.split_at(PASSES / 2);
    let max_rss = |passes: &[Pass]| passes.iter().map(|p| p.rss).max().unwrap_or(0);
    let churn = late[late.len() - 1].compiled_code - early[early.len() - 1].compiled_code;
    // Had evicted code stayed mapped, the resident set would have grown by at least the
    // machine code compiled in the last ten passes (each page of it is written when the code
    // is emitted). That churn must be large enough to show, and the growth must stay well
    // under it: an eighth of it (some 8 MiB, under 4% of the resident set) leaves room for the
    // allocator's noise, which moved the maximum by 0.1 to 5.5 MiB on the subsets of blocks
    // tried while writing this test.
    assert!(
        churn >= 4 * BUDGET,
        "only {churn} bytes of machine code compiled in passes 11-20: too little churn to judge"
    );
    let (early_max, late_max) = (max_rss(early), max_rss(late));
    eprintln!(
        "max RSS: passes 1-10 {:.1} MiB, passes 11-20 {:.1} MiB; machine code compiled in \
         passes 11-20: {:.1} MiB",
        early_max as f64 / (1 << 20) as f64,
        late_max as f64 / (1 << 20) as f64,
        churn as f64 / (1 << 20) as f64
    );
    assert!(
        late_max <= early_max + churn / 8,
        "resident memory grows: max {late_max} bytes over passes 11-20 against {early_max} \
         over passes 1-10, with {churn} bytes of machine code compiled in passes 11-20"
    );
}

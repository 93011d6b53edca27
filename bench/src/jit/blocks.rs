//! The mainnet blocks are a harness of their own (fixtures, two code caches under one budget,
//! three ways rotating per block), so they sit apart from the one-frame programs.

use std::sync::Arc;
use std::time::Instant;

use eyre::{eyre, Context, Result};
use gigas_evm::jit::{CacheConfig, CodeCache, HotList, Hotness, JitMode};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::{execute_block, load_fixtures_dir, BlockOutcome, PlainEvm, PreparedBlock};
use gigas_primitives::ChainSpec;

use super::{CacheFigures, HotFigures, HotListResult, MainnetResult};
use crate::median;

/// How a block runs in the mainnet comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Interpreter,
    Eager,
    On,
    /// `on` compiling the contracts of a hot list at their first call, and no others.
    HotOnly,
    /// `on` compiling the hot list's contracts at their first call, the rest by the
    /// threshold (`gigas-sequencer --jit.hotlist-with-threshold`).
    HotFirst,
}

/// Every mainnet block per round: interpreted, `eager` (unless skipped), `on`, and with a
/// hot list `on` by the list alone and by the list first, the order rotating; every code
/// cache under `budget` bytes of machine code.
pub(super) fn mainnet(
    dir: &std::path::Path,
    rounds: usize,
    budget: u64,
    with_eager: bool,
    hot_list: Option<HotList>,
) -> Result<MainnetResult> {
    let chain = ChainSpec::mainnet();
    let items: Vec<(PreparedBlock, CacheDB<EmptyDB>)> = load_fixtures_dir(dir)
        .wrap_err_with(|| format!("cannot load blocks from {}", dir.display()))?
        .iter()
        .map(|f| Ok((PreparedBlock::from_fixture(f, &chain)?, f.database())))
        .collect::<Result<_>>()?;
    let cache = |mode| {
        CodeCache::with_config(CacheConfig {
            budget_bytes: budget,
            ..CacheConfig::new(mode)
        })
    };
    let eager = cache(JitMode::Eager);
    let on = cache(JitMode::On);
    let listed = hot_list.as_ref().map(HotList::len);
    let on_config = CacheConfig {
        budget_bytes: budget,
        ..CacheConfig::new(JitMode::On)
    };
    let hot = hot_list.map(|list| {
        let only = CacheConfig {
            hotness: Hotness::NEVER,
            ..on_config
        };
        (
            CodeCache::with_hot_list(only, list.clone()),
            CodeCache::with_hot_list(on_config, list),
        )
    });
    let mut ways: Vec<Way> = vec![Way::Interpreter];
    if with_eager {
        ways.push(Way::Eager);
    }
    ways.push(Way::On);
    if hot.is_some() {
        ways.extend([Way::HotOnly, Way::HotFirst]);
    }
    let index = |way: Way| ways.iter().position(|w| *w == way);
    let run =
        |way: Way, block: &PreparedBlock, db: &CacheDB<EmptyDB>| -> Result<(f64, BlockOutcome)> {
            let mut evm = match way {
                Way::Interpreter => PlainEvm::new(db.clone(), block),
                Way::Eager => PlainEvm::with_jit(db.clone(), block, Arc::clone(&eager)),
                Way::On => PlainEvm::with_jit(db.clone(), block, Arc::clone(&on)),
                Way::HotOnly | Way::HotFirst => match &hot {
                    Some((only, first)) => {
                        let cache = if way == Way::HotOnly { only } else { first };
                        PlainEvm::with_jit(db.clone(), block, Arc::clone(cache))
                    }
                    None => PlainEvm::new(db.clone(), block),
                },
            };
            let started = Instant::now();
            let outcome = execute_block(&mut evm, block)?;
            Ok((started.elapsed().as_secs_f64(), outcome))
        };
    // Warm-up, untimed: the interpreter's receipts are the reference; `eager` compiles every
    // contract, `on` compiles what two passes make hot.
    let mut expected = Vec::new();
    for (block, db) in &items {
        expected.push(run(Way::Interpreter, block, db)?.1);
    }
    let mut warm_ups = Vec::new();
    if with_eager {
        warm_ups.push(Way::Eager);
    }
    warm_ups.extend([Way::On, Way::On]);
    if hot.is_some() {
        warm_ups.extend([Way::HotOnly, Way::HotFirst, Way::HotOnly, Way::HotFirst]);
    }
    for &way in &warm_ups {
        for ((block, db), expected) in items.iter().zip(&expected) {
            if &run(way, block, db)?.1 != expected {
                return Err(eyre!(
                    "block {}: compiled code gives other receipts than the interpreter",
                    block.number
                ));
            }
        }
        on.wait_for_compiles();
        if let Some((only, first)) = &hot {
            only.wait_for_compiles();
            first.wait_for_compiles();
        }
    }
    let (eager_compiles, on_compiles) = (eager.stats().snapshot(), on.stats().snapshot());
    let hot_compiles = hot
        .as_ref()
        .map(|(only, first)| (only.stats().snapshot(), first.stats().snapshot()));
    let n = ways.len();
    let mut pass = vec![Vec::new(); n];
    let mut per_block = vec![vec![Vec::new(); n]; items.len()];
    for round in 0..rounds {
        let mut totals = vec![0.0; n];
        for (i, ((block, db), expected)) in items.iter().zip(&expected).enumerate() {
            for k in 0..n {
                let w = (round + i + k) % n;
                let (t, outcome) = run(ways[w], block, db)?;
                if &outcome != expected {
                    return Err(eyre!(
                        "block {}: results differ in round {round}",
                        block.number
                    ));
                }
                totals[w] += t;
                per_block[i][w].push(t);
            }
        }
        for (w, total) in totals.into_iter().enumerate() {
            pass[w].push(total);
        }
    }
    let worst = |w: usize| -> (u64, f64) {
        items
            .iter()
            .zip(&per_block)
            .filter(|((block, _), _)| !block.txs.is_empty())
            .map(|((block, _), times)| {
                let ratios = times[0].iter().zip(&times[w]).map(|(i, j)| i / j).collect();
                (block.number, median(ratios))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 1.0))
    };
    let medians: Vec<f64> = pass.into_iter().map(median).collect();
    let on_index = index(Way::On).unwrap_or(n - 1);
    let (interp, on_t) = (medians[0], medians[on_index]);
    let eager_t = with_eager.then(|| medians[1]);
    Ok(MainnetResult {
        blocks: items.len(),
        interpreter_ms: interp * 1e3,
        eager_ms: eager_t.map(|t| t * 1e3),
        on_ms: on_t * 1e3,
        eager_speedup: eager_t.map(|t| interp / t),
        on_speedup: interp / on_t,
        worst_on_block: worst(on_index),
        worst_eager_block: with_eager.then(|| worst(1)),
        profiler_ceiling: None,
        budget_bytes: budget,
        eager_cache: with_eager.then(|| {
            CacheFigures::of(
                eager_compiles,
                eager.stats().snapshot(),
                eager_compiles,
                rounds as u64,
            )
        }),
        on_cache: CacheFigures::of(
            on_compiles,
            on.stats().snapshot(),
            on_compiles,
            rounds as u64,
        ),
        on_hot_gas: on.hotness().gas,
        hot_list: match (&hot, hot_compiles, listed) {
            (Some((only, first)), Some((only_compiles, first_compiles)), Some(listed)) => {
                let figures = |way: Way, cache: &CodeCache, compiles| {
                    let t = index(way).map_or(f64::NAN, |i| medians[i]);
                    HotFigures {
                        ms: t * 1e3,
                        speedup: interp / t,
                        worst_block: index(way).map_or((0, 1.0), worst),
                        cache: CacheFigures::of(
                            compiles,
                            cache.stats().snapshot(),
                            compiles,
                            rounds as u64,
                        ),
                    }
                };
                Some(HotListResult {
                    listed,
                    only: figures(Way::HotOnly, only, only_compiles),
                    first: figures(Way::HotFirst, first, first_compiles),
                })
            }
            _ => None,
        },
    })
}

/// The JIT ceiling from a profiler report, if there is one.
pub(super) fn profiler_ceiling(path: &std::path::Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    find_key(&json, "jit_ceiling_speedup")
}

fn find_key(value: &serde_json::Value, key: &str) -> Option<f64> {
    match value {
        serde_json::Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k == key {
                v.as_f64().or_else(|| find_key(v, key))
            } else {
                find_key(v, key)
            }
        }),
        serde_json::Value::Array(items) => items.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

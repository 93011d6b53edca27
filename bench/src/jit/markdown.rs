//! The report's layout lives apart from the measuring, so it can change without touching what
//! is timed.

use gigas_evm::jit::DEFAULT_BUDGET_BYTES;

use super::{describe_budget, CacheFigures, JitReport};
use crate::Table;

/// The report as Markdown.
pub fn markdown(r: &JitReport) -> String {
    use std::fmt::Write as _;
    let mut md = String::from("# Compiled code against the interpreter\n\n");
    let _ = writeln!(md, "- machine: {}\n", r.machine.describe());
    if !r.programs.is_empty() {
        let mut t = Table::new(
            "lrrrrrrrrrl",
            [
                "program",
                "code bytes",
                "Mgas",
                "interpreter ms",
                "jit ms",
                "speed-up",
                "compile ms",
                "compile us/KB",
                "machine code bytes",
                "blocks translated",
                "compiled code left",
            ],
        );
        for p in &r.programs {
            t.row([
                p.name.to_string(),
                p.code_bytes.to_string(),
                format!("{:.1}", p.gas_used as f64 / 1e6),
                format!("{:.2}", p.interpreter_ms),
                format!("{:.2}", p.jit_ms),
                format!("{:.2}x", p.speedup),
                format!("{:.2}", p.compile_ms),
                format!("{:.0}", p.compile_us_per_kb),
                p.machine_code_bytes.to_string(),
                format!("{}/{}", p.blocks.0, p.blocks.1),
                p.exit.to_string(),
            ]);
        }
        let _ = write!(md, "## One frame\n\n{t}");
    }
    let mut cache = Table::new(
        "lrrrrrrrlrrrr",
        [
            "cache",
            "contracts compiled",
            "not compiled",
            "EVM KiB",
            "machine code MiB",
            "compile ms",
            "compile ms/KB",
            "machine/EVM bytes",
            "frames / suspensions / hand-overs per pass",
            "resident MiB (contracts)",
            "evictions",
            "compiles per timed pass",
            "evictions per timed pass",
        ],
    );
    let cache_row = |t: &mut Table, what: &str, c: &CacheFigures| {
        t.row([
            what.to_string(),
            c.contracts.to_string(),
            c.failed.to_string(),
            format!("{:.0}", c.evm_bytes as f64 / 1024.0),
            format!("{:.1}", c.machine_code_bytes as f64 / (1024.0 * 1024.0)),
            format!("{:.1}", c.compile_ms),
            format!("{:.1}", c.compile_ms_per_kb),
            format!(
                "{:.1}x",
                c.machine_code_bytes as f64 / c.evm_bytes.max(1) as f64
            ),
            format!("{} / {} / {}", c.frames.0, c.frames.1, c.frames.2),
            format!(
                "{:.1} ({})",
                c.resident_bytes as f64 / (1024.0 * 1024.0),
                c.resident_contracts
            ),
            c.evictions.to_string(),
            format!("{:.1}", c.timed_compiles_per_pass),
            format!("{:.1}", c.timed_evictions_per_pass),
        ]);
    };
    if let Some(b) = &r.burntpix {
        cache_row(&mut cache, "burntpix, eager", &b.cache);
    }
    let mut whole = Table::new(
        "lrrrr",
        ["workload", "Mgas", "interpreter ms", "jit ms", "speed-up"],
    );
    if let Some(b) = &r.burntpix {
        whole.row([
            b.name.to_string(),
            format!("{:.1}", b.gas_used as f64 / 1e6),
            format!("{:.2}", b.interpreter_ms),
            format!("{:.2}", b.jit_ms),
            format!("{:.2}x", b.speedup),
        ]);
    }
    let Some(m) = &r.mainnet else {
        if r.burntpix.is_some() {
            let _ = write!(
                md,
                "\n## Whole transactions through revm's frame loop\n\n{whole}"
            );
            let _ = write!(md, "\n## Code cache\n\n{cache}");
        }
        return md;
    };
    if let (Some(eager_ms), Some(eager_speedup)) = (m.eager_ms, m.eager_speedup) {
        whole.row([
            format!("{} mainnet blocks, `--jit eager`", m.blocks),
            String::new(),
            format!("{:.2}", m.interpreter_ms),
            format!("{eager_ms:.2}"),
            format!("{eager_speedup:.2}x"),
        ]);
    }
    whole.row([
        format!(
            "{} mainnet blocks, `--jit on` (hot after {} gas)",
            m.blocks, m.on_hot_gas
        ),
        String::new(),
        format!("{:.2}", m.interpreter_ms),
        format!("{:.2}", m.on_ms),
        format!("{:.2}x", m.on_speedup),
    ]);
    if let Some(h) = &m.hot_list {
        for (how, f) in [
            ("the profiler's hot list alone", &h.only),
            ("the hot list first, the rest by the threshold", &h.first),
        ] {
            whole.row([
                format!(
                    "{} mainnet blocks, `--jit on` by {how} ({} listed)",
                    m.blocks, h.listed
                ),
                String::new(),
                format!("{:.2}", m.interpreter_ms),
                format!("{:.2}", f.ms),
                format!("{:.2}x", f.speedup),
            ]);
        }
    }
    let _ = write!(
        md,
        "\n## Whole transactions through revm's frame loop\n\n{whole}"
    );
    let _ = writeln!(
        md,
        "\n- code cache budget on the mainnet blocks: {}{}",
        describe_budget(m.budget_bytes),
        if m.budget_bytes == DEFAULT_BUDGET_BYTES {
            " (gigas-jit's default, chosen from runs at several budgets: see its crate documentation)"
        } else {
            ""
        }
    );
    let _ = write!(
        md,
        "- slowest block against the interpreter: `on` block {} at {:.2}x",
        m.worst_on_block.0, m.worst_on_block.1
    );
    match m.worst_eager_block {
        Some((block, ratio)) => {
            let _ = writeln!(md, ", `eager` block {block} at {ratio:.2}x");
        }
        None => {
            let _ = writeln!(md);
        }
    }
    match m.profiler_ceiling {
        Some(c) => {
            let _ = writeln!(
                md,
                "- the profiler's JIT ceiling on these blocks (all opcode time gone): {c:.2}x; `on` reaches {:.0}% of the way",
                100.0 * (m.on_speedup - 1.0) / (c - 1.0)
            );
        }
        None => {
            let _ = writeln!(
                md,
                "- the profiler's JIT ceiling: run `cargo run --release -p gigas-profiler` first to compare"
            );
        }
    }
    if let Some(eager) = &m.eager_cache {
        cache_row(&mut cache, "mainnet, eager", eager);
    }
    cache_row(&mut cache, "mainnet, on", &m.on_cache);
    if let Some(h) = &m.hot_list {
        cache_row(
            &mut cache,
            "mainnet, on by the hot list alone",
            &h.only.cache,
        );
        cache_row(
            &mut cache,
            "mainnet, on by the hot list first",
            &h.first.cache,
        );
    }
    let _ = write!(md, "\n## Code cache\n\n{cache}");
    md
}

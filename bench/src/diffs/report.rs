//! The report as Markdown: the bytes-per-transaction table, the index layouts, where codec
//! time goes, the zstd levels and the dictionary experiments.

use std::fmt::Write as _;

use super::{DiffsReport, BUDGET, FLOOR, TARGET};
use crate::Table;

/// The report as Markdown.
pub fn markdown(r: &DiffsReport) -> String {
    let mut md = String::from("# State diffs: bytes on the wire and codec speed\n\n");
    let _ = writeln!(
        md,
        "- machine: {}; build: {}; zstd level {}; transfer values: {:?}\n",
        r.machine.describe(),
        r.build_profile,
        r.level,
        r.values
    );
    let mut t = Table::new(
        "llrrrrrrrrrrrrr",
        [
            "workload",
            "warm-up blocks (txs)",
            "measured txs",
            "state changes",
            "first writes",
            "ChangeSet B/tx",
            "packed B/tx",
            "**wire B/tx**",
            "with dict B/tx",
            "zstd(ChangeSet) B/tx",
            "ChangeSet B/change",
            "packed B/change",
            "wire B/change",
            "encode M changes/s",
            "decode M changes/s",
        ],
    );
    for w in &r.workloads {
        let tx = w.txs.max(1) as f64;
        let ch = w.changes.max(1) as f64;
        t.row([
            w.name.to_string(),
            format!("{} ({})", w.warmup_blocks, w.warmup_txs),
            w.txs.to_string(),
            w.changes.to_string(),
            format!("{:.1}%", 100.0 * w.first_writes as f64 / ch),
            format!("{:.1}", w.raw as f64 / tx),
            format!("{:.1}", w.packed as f64 / tx),
            format!("**{:.1}**", w.wire as f64 / tx),
            format!("{:.1}", w.wire_dict as f64 / tx),
            format!("{:.1}", w.raw_zstd as f64 / tx),
            format!("{:.1}", w.raw as f64 / ch),
            format!("{:.1}", w.packed as f64 / ch),
            format!("{:.1}", w.wire as f64 / ch),
            format!("{:.2}", w.changes as f64 / w.encode_s.max(1e-9) / 1e6),
            format!("{:.2}", w.changes as f64 / w.decode_s.max(1e-9) / 1e6),
        ]);
    }
    let _ = write!(md, "{t}");
    let _ = writeln!(
        md,
        "\nBudget: {BUDGET} B/tx (100 Mbit/s at 100,000 TPS); target {TARGET} B per Zipf transfer, floor {FLOOR}. \
         `wire` is the whole diff file (header, signature, framing, zstd body); header and framing are {}.",
        r.workloads
            .iter()
            .map(|w| format!("{:.2} B/tx in {}", w.overhead as f64 / w.txs.max(1) as f64, w.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for w in &r.workloads {
        if w.txs > 0 && w.name.starts_with("Zipf") {
            let b = w.wire as f64 / w.txs as f64;
            let verdict = if b <= TARGET {
                "meets the 32 B target"
            } else if b <= FLOOR {
                "above the 32 B target, below the 50 B floor"
            } else {
                "ABOVE the 50 B floor"
            };
            let _ = writeln!(
                md,
                "- {}: {b:.1} B/tx {verdict}; a 100 Mbit/s link carries {:.0} such transfers per second.",
                w.name,
                12.5e6 / b
            );
        }
    }

    let mut t = Table::new(
        "lrrrrrrrr",
        [
            "workload",
            "repeated writes",
            "index keys",
            "index memory",
            "fixed width",
            "LEB128 index",
            "sorted, LEB128 gap (shipped)",
            "first-write slot groups (with an account index)",
            "saving if named by account index",
        ],
    );
    for w in &r.workloads {
        let tx = w.txs.max(1) as f64;
        let l = &w.index_layouts;
        let pair = |p: (usize, usize)| format!("{:.2} / {:.2}", p.0 as f64 / tx, p.1 as f64 / tx);
        t.row([
            w.name.to_string(),
            l.repeated.to_string(),
            w.index_keys.to_string(),
            format!("{:.0} MB", w.index_bytes as f64 / 1e6),
            pair(l.fixed),
            pair(l.varint),
            pair(l.gap),
            format!("{} ({})", l.slot_groups, l.slot_groups_indexed),
            format!("{:.3} B/tx", l.slot_group_saving as f64 / tx),
        ]);
    }
    let _ = write!(
        md,
        "\n## Naming repeated writes: index layouts (bytes per transaction, raw / after zstd)\n\n{t}"
    );

    let mut t = Table::new(
        "lrrrrrr",
        [
            "workload",
            "encode: read prior values",
            "pack",
            "zstd + frame",
            "decode: file + unzstd",
            "unpack (index, prior state, ChangeSet)",
            "checksum",
        ],
    );
    for w in &r.workloads {
        let ns = |s: f64| format!("{:.0}", s / w.changes.max(1) as f64 * 1e9);
        t.row([
            w.name.to_string(),
            ns(w.encode_split[0]),
            ns(w.encode_split[1]),
            ns(w.encode_split[2]),
            ns(w.decode_split[0]),
            ns(w.decode_split[1]),
            ns(w.decode_split[2]),
        ]);
    }
    let _ = write!(
        md,
        "\n## Where codec time goes (ns per state change, one core)\n\n{t}"
    );
    let _ = writeln!(
        md,
        "\n## zstd levels on the packed bodies (B/tx, compression MB/s)\n"
    );
    if let Some(first) = r.workloads.first() {
        let mut headers = vec!["workload".to_string()];
        headers.extend(first.levels.iter().map(|l| format!("level {}", l.level)));
        let mut t = Table::new(&format!("l{}", "r".repeat(first.levels.len())), headers);
        for w in &r.workloads {
            let mut cells = vec![w.name.to_string()];
            cells.extend(w.levels.iter().map(|l| {
                format!(
                    "{:.1} ({:.0} MB/s)",
                    l.bytes as f64 / w.txs.max(1) as f64,
                    w.packed as f64 / l.seconds.max(1e-9) / 1e6
                )
            }));
            t.row(cells);
        }
        let _ = write!(md, "{t}");
    }

    let _ = writeln!(
        md,
        "\n## zstd dictionaries (64 KiB, trained with zstd::dict::from_samples)\n"
    );
    if r.dictionaries.is_empty() {
        let _ = writeln!(
            md,
            "- not run: too few measured bodies to train on (raise --blocks)"
        );
    }
    for d in &r.dictionaries {
        let _ = writeln!(
            md,
            "- trained on {} ({} bytes): {}",
            d.trained_on,
            d.size,
            d.tested
                .iter()
                .map(|(name, without, with)| format!(
                    "{name} {:+.2}%",
                    100.0 * (*with as f64 - *without as f64) / (*without).max(1) as f64
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    md
}

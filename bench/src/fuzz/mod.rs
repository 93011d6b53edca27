//! `gigas-bench fuzz`: every decoder a peer or a client can reach, fed mutated copies of valid
//! inputs, a million cases each by default.
//!
//! The targets are what arrives from outside: a diff file and its packed body (from the
//! sequencer's archive, verified with [`gigas_statediff::verify_and_decode`]), a block file (for
//! `--verify-execution`), a ChangeSet, a raw transaction (`eth_sendRawTransaction`, decoded and
//! recovered as the pool does) and the transaction journal (read back at start). Each case
//! takes a valid input, applies one to four mutations (bit flips, bytes and length words set
//! to edge values, truncation, insertion, deletion, duplication, splicing with another input)
//! and, for half the cases, recomputes the checksums the mutation broke, so that the layers
//! behind the CRCs are reached too. A case passes when the decoder returns, with a value or an
//! error; a panic fails it. Decoded ChangeSets must also encode back to bytes that decode to
//! the same value.
//!
//! The run is deterministic for a seed; cases run on every core.

mod seeds;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use eyre::{bail, Result};
use rayon::prelude::*;
use serde::Serialize;

use crate::Table;

pub use seeds::Seeds;

/// What `gigas-bench fuzz` takes.
#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Cases per target.
    #[arg(long, default_value_t = 1_000_000)]
    pub cases: u64,
    /// The targets (all by default).
    #[arg(long, value_delimiter = ',')]
    pub target: Vec<Target>,
    /// The run's seed.
    #[arg(long, default_value_t = 29)]
    pub seed: u64,
    /// Where the report and any failing input go.
    #[arg(long, default_value = "target/bench/fuzz")]
    pub out: PathBuf,
}

/// A decoder under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// A diff file, framed, decompressed and verified against the follower's state.
    DiffFile,
    /// The packed body of a diff, decoded against the key index and the prior state.
    DiffBody,
    /// A block file (transactions and receipts).
    BlockFile,
    /// A ChangeSet's canonical encoding.
    Changeset,
    /// A raw transaction, decoded and its sender recovered as the pool does.
    Transaction,
    /// The transaction journal's bytes.
    Journal,
}

impl Target {
    /// Every target, in report order.
    pub const ALL: [Target; 6] = [
        Target::DiffFile,
        Target::DiffBody,
        Target::BlockFile,
        Target::Changeset,
        Target::Transaction,
        Target::Journal,
    ];

    fn name(self) -> &'static str {
        match self {
            Target::DiffFile => "diff-file",
            Target::DiffBody => "diff-body",
            Target::BlockFile => "block-file",
            Target::Changeset => "changeset",
            Target::Transaction => "transaction",
            Target::Journal => "journal",
        }
    }
}

/// One target's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// The target.
    pub target: Target,
    /// Cases run.
    pub cases: u64,
    /// Cases the decoder accepted.
    pub accepted: u64,
    /// Cases it refused with an error.
    pub refused: u64,
    /// Cases that panicked (or broke a round trip): each is a defect.
    pub failures: u64,
    /// Refusals by error kind: how deep the mutations reached.
    pub refusals: BTreeMap<String, u64>,
    /// Cases per second.
    pub cases_per_second: f64,
    /// The slowest case, in microseconds.
    pub slowest_us: u64,
    /// The first failure: its message and the input (hex).
    pub first_failure: Option<(String, String)>,
}

/// A small, fast, deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
}

/// Applies one to four random mutations to `bytes`; `other` is another valid input to splice
/// from.
pub fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>, other: &[u8]) {
    const EDGE_BYTES: [u8; 6] = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff];
    const EDGE_WORDS: [u32; 8] = [0, 1, 2, 0x7f, 0x80, 0xffff, 0x7fff_ffff, 0xffff_ffff];
    for _ in 0..=rng.below(4) {
        let len = bytes.len();
        match rng.below(10) {
            0 | 1 if len > 0 => {
                let at = rng.index(len);
                bytes[at] ^= 1 << rng.below(8);
            }
            2 if len > 0 => {
                let at = rng.index(len);
                bytes[at] = EDGE_BYTES[rng.index(EDGE_BYTES.len())];
            }
            3 if len >= 4 => {
                // A length or count field set to an edge value, in either byte order.
                let at = rng.index(len - 3);
                let mut word = EDGE_WORDS[rng.index(EDGE_WORDS.len())];
                if rng.below(3) == 0 {
                    word = rng.below(u64::from(u32::MAX)) as u32 % (len as u32 * 2 + 1);
                }
                let encoded = if rng.below(2) == 0 {
                    word.to_le_bytes()
                } else {
                    word.to_be_bytes()
                };
                bytes[at..at + 4].copy_from_slice(&encoded);
            }
            4 => {
                let keep = rng.index(len + 1);
                bytes.truncate(keep);
            }
            5 => {
                let at = rng.index(len + 1);
                let n = 1 + rng.index(16);
                let insert: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                bytes.splice(at..at, insert);
            }
            6 if len > 0 => {
                let at = rng.index(len);
                let n = 1 + rng.index((len - at).min(64));
                bytes.drain(at..at + n);
            }
            7 if len > 0 => {
                let at = rng.index(len);
                let n = 1 + rng.index((len - at).min(64));
                let chunk = bytes[at..at + n].to_vec();
                let to = rng.index(len + 1);
                bytes.splice(to..to, chunk);
            }
            8 if !other.is_empty() => {
                // Splice: our head, the other input's tail.
                let cut = rng.index(len + 1);
                let from = rng.index(other.len());
                bytes.truncate(cut);
                bytes.extend_from_slice(&other[from..]);
            }
            _ => {
                let at = rng.index(len + 1);
                let byte = rng.next() as u8;
                bytes.insert(at, byte);
            }
        }
    }
}

/// Recomputes a diff or block file's trailing CRC-32 (over everything before it).
fn fix_file_crc(bytes: &mut [u8]) {
    if bytes.len() < 4 {
        return;
    }
    let n = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..n]);
    bytes[n..].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the checksums of every journal batch whose declared length fits the file.
fn fix_journal_crcs(bytes: &mut [u8]) {
    let mut at = 16;
    while at + 12 <= bytes.len() {
        let len =
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let Some(end) = (at + 12).checked_add(len).filter(|end| *end <= bytes.len()) else {
            return;
        };
        let payload_crc = crc32fast::hash(&bytes[at + 12..end]);
        bytes[at + 4..at + 8].copy_from_slice(&payload_crc.to_le_bytes());
        let header_crc = crc32fast::hash(&bytes[at..at + 8]);
        bytes[at + 8..at + 12].copy_from_slice(&header_crc.to_le_bytes());
        at = end;
    }
}

/// One chunk's counts: accepted, refused, failed, refusals by kind, slowest case (us).
type Partial = (u64, u64, u64, BTreeMap<String, u64>, u64);

enum Outcome {
    Accepted,
    Refused(String),
    Failed(String),
}

/// Runs `cases` mutated cases of `target` from `seeds`, on every core.
pub fn fuzz(seeds: &Seeds, target: Target, cases: u64, seed: u64) -> TargetReport {
    const CHUNK: u64 = 4096;
    let first_failure = Mutex::new(None);
    let started = Instant::now();
    let chunks = cases.div_ceil(CHUNK);
    let partials: Vec<Partial> = (0..chunks)
        .into_par_iter()
        .map(|chunk| {
            let mut rng = Rng::new(seed ^ (target as u64) << 56 ^ chunk.wrapping_mul(0x5851_F42D));
            let (mut accepted, mut refused, mut failures) = (0u64, 0u64, 0u64);
            let mut refusals = BTreeMap::new();
            let mut slowest = 0u64;
            let n = CHUNK.min(cases - chunk * CHUNK);
            for _ in 0..n {
                let i = rng.index(seeds.count(target));
                let other = seeds.input(target, rng.index(seeds.count(target)));
                let mut input = seeds.input(target, i).to_vec();
                // One case in a hundred is the seed itself: the harness must accept those.
                if rng.below(100) != 0 {
                    mutate(&mut rng, &mut input, other);
                    if rng.below(2) == 0 {
                        match target {
                            Target::DiffFile | Target::BlockFile => fix_file_crc(&mut input),
                            Target::Journal => fix_journal_crcs(&mut input),
                            _ => {}
                        }
                    }
                }
                let t = Instant::now();
                let outcome = catch_unwind(AssertUnwindSafe(|| seeds.run(target, i, &input)))
                    .unwrap_or_else(|panic| {
                        let message = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "a panic".into());
                        Outcome::Failed(format!("panicked: {message}"))
                    });
                slowest = slowest.max(t.elapsed().as_micros() as u64);
                match outcome {
                    Outcome::Accepted => accepted += 1,
                    Outcome::Refused(kind) => {
                        refused += 1;
                        *refusals.entry(kind).or_insert(0) += 1;
                    }
                    Outcome::Failed(message) => {
                        failures += 1;
                        let mut first = first_failure
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if first.is_none() {
                            let hex: String = input
                                .iter()
                                .take(4096)
                                .map(|b| format!("{b:02x}"))
                                .collect();
                            *first = Some((message, hex));
                        }
                    }
                }
            }
            (accepted, refused, failures, refusals, slowest)
        })
        .collect();
    let seconds = started.elapsed().as_secs_f64();
    let mut report = TargetReport {
        target,
        cases,
        accepted: 0,
        refused: 0,
        failures: 0,
        refusals: BTreeMap::new(),
        cases_per_second: cases as f64 / seconds.max(1e-9),
        slowest_us: 0,
        first_failure: first_failure
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    };
    for (accepted, refused, failures, refusals, slowest) in partials {
        report.accepted += accepted;
        report.refused += refused;
        report.failures += failures;
        report.slowest_us = report.slowest_us.max(slowest);
        for (kind, n) in refusals {
            *report.refusals.entry(kind).or_insert(0) += n;
        }
    }
    report
}

/// Runs every case quietly: a panic is counted, not printed (the report names the first).
pub fn fuzz_quietly(seeds: &Seeds, target: Target, cases: u64, seed: u64) -> TargetReport {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report = fuzz(seeds, target, cases, seed);
    std::panic::set_hook(hook);
    report
}

/// The whole report.
#[derive(Debug, Serialize)]
struct Report {
    profile: &'static str,
    threads: usize,
    seed: u64,
    targets: Vec<TargetReport>,
}

/// `gigas-bench fuzz`.
pub fn run(args: FuzzArgs) -> Result<()> {
    let targets = if args.target.is_empty() {
        Target::ALL.to_vec()
    } else {
        args.target.clone()
    };
    println!(
        "fuzz: {} cases per target, targets {}, seed {}, {} threads, {} build",
        args.cases,
        targets
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(","),
        args.seed,
        rayon::current_num_threads(),
        crate::build_profile()
    );
    let seeds = Seeds::build(args.seed)?;
    let mut reports = Vec::new();
    for target in targets {
        let report = fuzz_quietly(&seeds, target, args.cases, args.seed);
        println!(
            "  {:<12} {:>9} cases  {:>9} accepted  {:>9} refused  {} failed  {:>9.0} cases/s  slowest {} us",
            target.name(),
            report.cases,
            report.accepted,
            report.refused,
            report.failures,
            report.cases_per_second,
            report.slowest_us
        );
        reports.push(report);
    }
    let mut t = Table::new(
        "lrrrrrrl",
        [
            "target",
            "cases",
            "accepted",
            "refused",
            "failed",
            "cases/s",
            "slowest (us)",
            "refusal kinds",
        ],
    );
    for r in &reports {
        let kinds: Vec<String> = r
            .refusals
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        t.row([
            r.target.name().to_string(),
            r.cases.to_string(),
            r.accepted.to_string(),
            r.refused.to_string(),
            r.failures.to_string(),
            format!("{:.0}", r.cases_per_second),
            r.slowest_us.to_string(),
            kinds.join(", "),
        ]);
    }
    let mut md = format!("# Decoders under mutated input\n\n{t}");
    let failed = reports.iter().filter(|r| r.failures > 0).count();
    for r in reports.iter().filter(|r| r.failures > 0) {
        if let Some((message, hex)) = &r.first_failure {
            md.push_str(&format!(
                "\n{}: first failure: {message}\ninput: {hex}\n",
                r.target.name()
            ));
        }
    }
    let report = Report {
        profile: crate::build_profile(),
        threads: rayon::current_num_threads(),
        seed: args.seed,
        targets: reports,
    };
    crate::write_report(&args.out, "fuzz", &report, &md)?;
    if failed > 0 {
        bail!("{failed} target(s) failed on mutated input (see the report)");
    }
    Ok(())
}

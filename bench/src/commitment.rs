//! `gigas-bench commitment`: what a lattice hash of the state (issue 33's candidate for the
//! commitment a sequencer signs) costs per element, per state change and per transfer, on one
//! core and on all of them, against the budget the issue sets: at most 3 % of the
//! sequencer's CPU at the ramp's maximum sustained rate.
//!
//! The workload is the one the sequencer sees in the ramp: Zipf-Mandelbrot transfers over the
//! benchmark's accounts, grouped into blocks. Each transfer changes its sender and its
//! receiver; an account changed by several transfers of a block changes once per block, as
//! in a ChangeSet. A change subtracts the account's old element and adds its new one (a new
//! account only adds). The block's delta is summed serially, then split over rayon's threads
//! (each sums its own share, the shares are added), the two alternating block by block.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use alloy_primitives::{Address, U256};
use eyre::Result;
use gigas_primitives::changeset::AccountState;
use gigas_primitives::lattice::Expansion;
use gigas_primitives::machine::Machine;
use gigas_primitives::LatticeHash;
use rayon::prelude::*;
use serde::Serialize;

use crate::zipf::{SplitMix64, ZipfMandelbrot, DEVNET_S, DEVNET_V};
use crate::{build_profile, median, write_report, Table};

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct CommitmentArgs {
    /// Accounts the transfers are drawn from (Zipf-Mandelbrot, the devnet's parameters).
    #[arg(long, default_value_t = 10_000_000)]
    pub accounts: u64,
    /// Transfers per block.
    #[arg(long, default_value_t = 8_000)]
    pub block_transfers: usize,
    /// Blocks measured (each summed serially and in parallel).
    #[arg(long, default_value_t = 40)]
    pub blocks: usize,
    /// Elements hashed one after another for the per-element figure.
    #[arg(long, default_value_t = 200_000)]
    pub elements: usize,
    /// The sequencer's maximum sustained rate the budget is taken from (transfers/s; the
    /// ramp's figure on this machine in BENCHMARKING.md).
    #[arg(long, default_value_t = 16_000.0)]
    pub rate: f64,
    /// Share of the sequencer's CPU the commitment may take (the 3 %).
    #[arg(long, default_value_t = 0.03)]
    pub budget_share: f64,
    /// Ways of drawing an element's bytes to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "blake3,chacha8,chacha12,chacha20"
    )]
    pub xof: Vec<Xof>,
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/commitment")]
    pub out: PathBuf,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// How an element's 2,048 bytes are drawn from its encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Xof {
    /// BLAKE3 in extendable-output mode, as SIMD-0215.
    Blake3,
    /// BLAKE3's derived key of the encoding, expanded by ChaCha with 8 rounds.
    Chacha8,
    /// The same with 12 rounds (rand's standard generator; version 1 of the commitment).
    Chacha12,
    /// The same with 20 rounds.
    Chacha20,
}

impl Xof {
    fn expansion(self) -> Expansion {
        match self {
            Xof::Blake3 => Expansion::Blake3Xof,
            Xof::Chacha8 => Expansion::ChaCha8,
            Xof::Chacha12 => Expansion::ChaCha12,
            Xof::Chacha20 => Expansion::ChaCha20,
        }
    }
}

/// An account's element as the sequencer draws it: the keccak of its address, then the
/// element of the hashed key.
fn element(xof: Xof, address: &Address, state: &AccountState) -> LatticeHash {
    LatticeHash::account_with(
        xof.expansion(),
        &alloy_primitives::keccak256(address),
        state,
    )
}

/// One way of keeping the sum, measured.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    /// How elements are drawn.
    pub xof: Xof,
    /// Whether a block's new elements are kept for the next block, whose old elements they
    /// are when the same account changes again (Zipf's hot accounts do).
    pub carry: bool,
    /// Nanoseconds to hash one account element (median of five passes).
    pub element_ns: f64,
    /// Old elements found among the last block's new ones (with `carry`).
    pub carried_share: f64,
    /// Milliseconds to sum a block's delta on one core (median over blocks).
    pub serial_ms_per_block: f64,
    /// Milliseconds to sum it on every thread of rayon's pool (without carry only).
    pub parallel_ms_per_block: Option<f64>,
    /// CPU microseconds per transfer (serial sum).
    pub cpu_us_per_transfer: f64,
    /// CPU microseconds per state change.
    pub cpu_us_per_change: f64,
    /// Share of the machine at the rate: CPU per transfer times the rate, over the cores.
    pub share_of_cpu_at_rate: f64,
    /// Whether the share is within the budget.
    pub within_budget: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct CommitmentReport {
    /// The machine.
    pub machine: Machine,
    /// The build profile.
    pub build_profile: &'static str,
    /// Threads in rayon's pool (the parallel sum's).
    pub threads: usize,
    /// The arguments, as a line.
    pub config: String,
    /// Nanoseconds to add one element into a sum.
    pub add_ns: f64,
    /// State changes per block (median).
    pub changes_per_block: f64,
    /// The budget: `budget_share` of the machine's cores at `rate`, per transfer.
    pub budget_us_per_transfer: f64,
    /// Each way measured.
    pub variants: Vec<Variant>,
    /// Whether the serial and parallel sums, and the sums with and without carry, agreed on
    /// every block (they must).
    pub sums_agree: bool,
}

fn state(nonce: u64, balance: U256) -> AccountState {
    AccountState {
        nonce,
        balance,
        code_hash: alloy_primitives::KECCAK256_EMPTY,
    }
}

fn address(i: u64) -> Address {
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&i.to_be_bytes());
    bytes[8..16].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    Address::from(bytes)
}

/// One account's change in a block: its state before (none: new) and after.
type Change = (Address, Option<AccountState>, AccountState);

/// The block's delta; with `carry`, old elements are taken from the last block's new ones
/// where they are there, and this block's new ones are returned for the next.
fn sum_serial(
    xof: Xof,
    changes: &[Change],
    carried: Option<&HashMap<Address, LatticeHash>>,
) -> (LatticeHash, HashMap<Address, LatticeHash>, usize) {
    let mut sum = LatticeHash::zero();
    let mut next = HashMap::new();
    let mut hits = 0;
    for (a, before, after) in changes {
        if let Some(before) = before {
            match carried.and_then(|c| c.get(a)) {
                Some(old) => {
                    sum.sub(old);
                    hits += 1;
                }
                None => sum.sub(&element(xof, a, before)),
            }
        }
        let new = element(xof, a, after);
        sum.add(&new);
        if carried.is_some() {
            next.insert(*a, new);
        }
    }
    (sum, next, hits)
}

/// `f`'s result and the milliseconds it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64() * 1e3)
}

fn sum_parallel(xof: Xof, changes: &[Change]) -> LatticeHash {
    let per_thread = changes.len().div_ceil(rayon::current_num_threads()).max(1);
    changes
        .par_chunks(per_thread)
        .map(|c| sum_serial(xof, c, None).0)
        .reduce(LatticeHash::zero, |mut a, b| {
            a.add(&b);
            a
        })
}

/// Runs the benchmark and writes its report.
pub fn run(args: &CommitmentArgs) -> Result<CommitmentReport> {
    eyre::ensure!(args.accounts > 1, "--accounts must be at least 2");
    eyre::ensure!(
        args.blocks > 0 && args.block_transfers > 0 && args.elements > 0,
        "--blocks, --block-transfers and --elements must be positive"
    );
    eyre::ensure!(!args.xof.is_empty(), "--xof needs at least one way");
    let machine = Machine::current();
    let config = format!(
        "{} accounts (all in the genesis), {} transfers per block, {} blocks, {} elements, rate {} tx/s, budget {:.1}%, seed {}",
        args.accounts,
        args.block_transfers,
        args.blocks,
        args.elements,
        args.rate,
        args.budget_share * 100.0,
        args.seed
    );
    eprintln!("commitment: {config}; machine {}", machine.describe());
    let cores = machine.cpus.max(1) as f64;

    let add_ns = {
        let one = LatticeHash::account(&address(1), &state(1, U256::from(1)));
        let n = args.elements * 10;
        let t = Instant::now();
        let mut sink = LatticeHash::zero();
        for _ in 0..n {
            sink.add(std::hint::black_box(&one));
        }
        std::hint::black_box(&sink);
        t.elapsed().as_secs_f64() * 1e9 / n as f64
    };

    // The blocks, built once: every account is in the genesis with a balance, so a change
    // has an old element unless the account was never written (none here).
    let zipf = ZipfMandelbrot::new(args.accounts as usize, DEVNET_S, DEVNET_V);
    let mut rng = SplitMix64(args.seed);
    let genesis = state(0, U256::from(1_000_000_000u64));
    let mut known: HashMap<u64, AccountState> = HashMap::new();
    let mut blocks: Vec<Vec<Change>> = Vec::with_capacity(args.blocks);
    for _ in 0..args.blocks {
        let mut touched: BTreeMap<u64, (AccountState, AccountState)> = BTreeMap::new();
        for _ in 0..args.block_transfers {
            let from = zipf.rank(rng.next_f64()) as u64;
            let mut to = zipf.rank(rng.next_f64()) as u64;
            if to == from {
                to = (from + 1) % args.accounts;
            }
            for (i, sender) in [(from, true), (to, false)] {
                let prior = known.get(&i).copied().unwrap_or(genesis);
                let entry = touched.entry(i).or_insert((prior, prior));
                if sender {
                    entry.1.nonce += 1;
                    entry.1.balance -= U256::from(1);
                } else {
                    entry.1.balance += U256::from(1);
                }
            }
        }
        for (i, (_, after)) in &touched {
            known.insert(*i, *after);
        }
        blocks.push(
            touched
                .iter()
                .map(|(i, (before, after))| (address(*i), Some(*before), *after))
                .collect(),
        );
    }
    let changes_per_block = median(blocks.iter().map(|b| b.len() as f64).collect());

    let mut sums_agree = true;
    let mut variants = Vec::new();
    let mut reference: Option<Vec<LatticeHash>> = None;
    for &xof in &args.xof {
        let element_ns = {
            let passes: Vec<f64> = (0..5u64)
                .map(|pass| {
                    let t = Instant::now();
                    let mut sink = LatticeHash::zero();
                    for i in 0..args.elements as u64 {
                        let i = i + pass * args.elements as u64;
                        sink.add(&element(xof, &address(i), &state(i, U256::from(i))));
                    }
                    std::hint::black_box(&sink);
                    t.elapsed().as_secs_f64() * 1e9 / args.elements as f64
                })
                .collect();
            median(passes)
        };
        for carry in [false, true] {
            let (mut serial, mut parallel) = (Vec::new(), Vec::new());
            let mut carried: HashMap<Address, LatticeHash> = HashMap::new();
            let (mut hits, mut olds) = (0usize, 0usize);
            let mut sums = Vec::new();
            for (n, changes) in blocks.iter().enumerate() {
                let mut timed_parallel = || {
                    let (p, ms) = timed(|| sum_parallel(xof, changes));
                    parallel.push(ms);
                    p
                };
                // Alternate which goes first, so that neither always meets a warm cache.
                let early = (!carry && n % 2 == 1).then(&mut timed_parallel);
                let ((sum, next, h), ms) =
                    timed(|| sum_serial(xof, changes, carry.then_some(&carried)));
                serial.push(ms);
                let late = (!carry && n % 2 == 0).then(&mut timed_parallel);
                if let Some(p) = early.or(late) {
                    sums_agree &= p == sum;
                }
                sums.push(sum);
                hits += h;
                olds += changes.len();
                carried = next;
            }
            // A sum is the same whichever way it was kept, and with any XOF the differences
            // between variants are in the elements, so compare like with like only.
            if carry {
                if let Some(r) = &reference {
                    sums_agree &= r == &sums;
                }
            } else {
                reference = Some(sums);
            }
            let serial_ms = median(serial);
            let cpu_us_per_transfer = serial_ms * 1e3 / args.block_transfers as f64;
            let share = cpu_us_per_transfer * 1e-6 * args.rate / cores;
            variants.push(Variant {
                xof,
                carry,
                element_ns,
                carried_share: hits as f64 / olds.max(1) as f64,
                serial_ms_per_block: serial_ms,
                parallel_ms_per_block: (!carry).then(|| median(parallel)),
                cpu_us_per_transfer,
                cpu_us_per_change: serial_ms * 1e3 / changes_per_block.max(1.0),
                share_of_cpu_at_rate: share,
                within_budget: share <= args.budget_share,
            });
        }
    }

    let report = CommitmentReport {
        threads: rayon::current_num_threads(),
        build_profile: build_profile(),
        config,
        add_ns,
        changes_per_block,
        budget_us_per_transfer: args.budget_share * cores / args.rate * 1e6,
        variants,
        sums_agree,
        machine,
    };
    write_report(&args.out, "commitment", &report, &markdown(&report))?;
    eyre::ensure!(
        report.sums_agree,
        "the sums kept in different ways differ: a bug in the lattice hash's addition or the carry"
    );
    Ok(report)
}

/// The report as Markdown.
pub fn markdown(r: &CommitmentReport) -> String {
    let mut t = Table::new(
        "llrrrrrrr",
        [
            "XOF",
            "carry",
            "element ns",
            "old elements carried",
            "block delta, one core ms",
            "block delta, all cores ms",
            "CPU µs per change",
            "CPU µs per transfer",
            "share of the machine at the rate",
        ],
    );
    for v in &r.variants {
        t.row([
            format!("{:?}", v.xof).to_lowercase(),
            if v.carry { "yes" } else { "no" }.to_string(),
            format!("{:.0}", v.element_ns),
            if v.carry {
                format!("{:.0}%", v.carried_share * 100.0)
            } else {
                "-".to_string()
            },
            format!("{:.2}", v.serial_ms_per_block),
            v.parallel_ms_per_block.map_or("-".to_string(), |ms| {
                format!("{ms:.2} ({} threads)", r.threads)
            }),
            format!("{:.2}", v.cpu_us_per_change),
            format!("**{:.2}**", v.cpu_us_per_transfer),
            format!(
                "**{:.1}%** ({})",
                v.share_of_cpu_at_rate * 100.0,
                if v.within_budget {
                    "within budget"
                } else {
                    "over budget"
                }
            ),
        ]);
    }
    format!(
        "# The state commitment's cost: a lattice hash (LtHash, 2,048 bytes)\n\n\
         - {}\n- machine: {}; build: {}\n- state changes per block (median): {:.0}; adding one element to a sum: {:.0} ns\n\
         - budget: {:.2} µs of CPU per transfer\n- sums agree whichever way they were kept: {}\n\n{t}",
        r.config,
        r.machine.describe(),
        r.build_profile,
        r.changes_per_block,
        r.add_ns,
        r.budget_us_per_transfer,
        r.sums_agree
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_delta_is_the_difference_of_the_states_whichever_way_it_is_kept() {
        for xof in [Xof::Blake3, Xof::Chacha12] {
            // Two accounts summed from scratch after a change equal the old sum plus the
            // block's delta, serial, parallel, or with the old element carried.
            let before: Vec<Change> = vec![
                (address(1), None, state(0, U256::from(5))),
                (address(2), None, state(0, U256::from(7))),
            ];
            let (mut running, carried, _) = sum_serial(xof, &before, Some(&HashMap::new()));
            let delta = vec![(
                address(1),
                Some(state(0, U256::from(5))),
                state(1, U256::from(4)),
            )];
            let parallel = sum_parallel(xof, &delta);
            let (with_carry, _, hits) = sum_serial(xof, &delta, Some(&carried));
            assert_eq!(hits, 1);
            assert_eq!(parallel, with_carry);
            let old = running.clone();
            running.add(&parallel);
            let after: Vec<Change> = vec![
                (address(1), None, state(1, U256::from(4))),
                (address(2), None, state(0, U256::from(7))),
            ];
            assert_eq!(running, sum_serial(xof, &after, None).0);
            assert_ne!(running, old);
        }
        assert_ne!(
            element(Xof::Blake3, &address(1), &state(0, U256::from(1))),
            element(Xof::Chacha8, &address(1), &state(0, U256::from(1)))
        );
    }

    #[test]
    fn a_small_run_writes_its_report() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let args = CommitmentArgs {
            accounts: 1_000,
            block_transfers: 200,
            blocks: 4,
            elements: 200,
            rate: 16_000.0,
            budget_share: 0.03,
            xof: vec![Xof::Blake3, Xof::Chacha8],
            out: dir.path().to_path_buf(),
            seed: 7,
        };
        let r = run(&args).expect("the run");
        assert!(r.sums_agree);
        // 200 Zipf transfers over 1,000 accounts touch fewer than 400 accounts, more than 1.
        assert!(
            r.changes_per_block > 1.0 && r.changes_per_block < 400.0,
            "{r:?}"
        );
        assert_eq!(r.variants.len(), 4);
        // Zipf's hot accounts change again in the next block: some old elements carry.
        assert!(
            r.variants.iter().any(|v| v.carry && v.carried_share > 0.0),
            "{r:?}"
        );
        assert!(r
            .variants
            .iter()
            .all(|v| v.element_ns > 0.0 && v.cpu_us_per_transfer > 0.0));
        let md = std::fs::read_to_string(dir.path().join("commitment.md")).expect("markdown");
        assert!(md.contains("| blake3 | no |"), "{md}");
        assert!(dir.path().join("commitment.json").exists());
    }
}

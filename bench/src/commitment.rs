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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use alloy_primitives::{Address, U256};
use eyre::Result;
use gigas_primitives::changeset::AccountState;
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
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/commitment")]
    pub out: PathBuf,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
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
    /// Nanoseconds to hash one account element (median of five passes).
    pub account_element_ns: f64,
    /// Nanoseconds to hash one slot element.
    pub slot_element_ns: f64,
    /// Nanoseconds to add one element into a sum.
    pub add_ns: f64,
    /// State changes per block (median).
    pub changes_per_block: f64,
    /// Elements hashed per block (a new account adds one, a changed one two).
    pub elements_per_block: f64,
    /// Milliseconds to sum a block's delta on one core (median over blocks).
    pub serial_ms_per_block: f64,
    /// Milliseconds to sum it on every thread of rayon's pool.
    pub parallel_ms_per_block: f64,
    /// CPU microseconds per transfer (serial sum).
    pub cpu_us_per_transfer: f64,
    /// CPU microseconds per state change.
    pub cpu_us_per_change: f64,
    /// The budget: `budget_share` of the machine's cores at `rate`, per transfer.
    pub budget_us_per_transfer: f64,
    /// Share of the sequencer's CPU at `rate` the commitment takes: CPU per transfer times
    /// the rate, over the machine's cores.
    pub share_of_cpu_at_rate: f64,
    /// Whether the share is within the budget.
    pub within_budget: bool,
    /// Whether the serial and parallel sums agreed on every block (they must).
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

fn sum_serial(changes: &[Change]) -> LatticeHash {
    let mut sum = LatticeHash::zero();
    for (a, before, after) in changes {
        sum.change_account(a, before.as_ref(), Some(after));
    }
    sum
}

fn sum_parallel(changes: &[Change]) -> LatticeHash {
    let per_thread = changes.len().div_ceil(rayon::current_num_threads()).max(1);
    changes
        .par_chunks(per_thread)
        .map(sum_serial)
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
    let machine = Machine::current();
    let config = format!(
        "{} accounts, {} transfers per block, {} blocks, {} elements, rate {} tx/s, budget {:.1}%, seed {}",
        args.accounts,
        args.block_transfers,
        args.blocks,
        args.elements,
        args.rate,
        args.budget_share * 100.0,
        args.seed
    );
    eprintln!("commitment: {config}; machine {}", machine.describe());

    // One element after another: the hash itself.
    let time_per = |f: &dyn Fn(u64) -> LatticeHash| {
        let passes: Vec<f64> = (0..5)
            .map(|pass| {
                let t = Instant::now();
                let mut sink = LatticeHash::zero();
                for i in 0..args.elements as u64 {
                    sink.add(&f(i + pass * args.elements as u64));
                }
                std::hint::black_box(&sink);
                t.elapsed().as_secs_f64() * 1e9 / args.elements as f64
            })
            .collect();
        median(passes)
    };
    let account_element_ns =
        time_per(&|i| LatticeHash::account(&address(i), &state(i, U256::from(i))));
    let slot_element_ns =
        time_per(&|i| LatticeHash::slot(&address(i), &U256::from(i), &U256::from(i + 1)));
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

    // Blocks of transfers: each account's state kept, as the sequencer's state would hold it.
    let zipf = ZipfMandelbrot::new(args.accounts as usize, DEVNET_S, DEVNET_V);
    let mut rng = SplitMix64(args.seed);
    let mut known: std::collections::HashMap<u64, AccountState> = Default::default();
    let (mut serial, mut parallel, mut changes_n, mut elements_n) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut sums_agree = true;
    let mut running = LatticeHash::zero();
    for block in 0..args.blocks {
        let mut touched: BTreeMap<u64, (Option<AccountState>, AccountState)> = BTreeMap::new();
        for _ in 0..args.block_transfers {
            let from = zipf.rank(rng.next_f64()) as u64;
            let mut to = zipf.rank(rng.next_f64()) as u64;
            if to == from {
                to = (from + 1) % args.accounts;
            }
            for (i, sender) in [(from, true), (to, false)] {
                let prior = known.get(&i).copied();
                let entry = touched.entry(i).or_insert_with(|| {
                    (
                        prior,
                        prior.unwrap_or(state(0, U256::from(1_000_000_000u64))),
                    )
                });
                if sender {
                    entry.1.nonce += 1;
                    entry.1.balance -= U256::from(1);
                } else {
                    entry.1.balance += U256::from(1);
                }
            }
        }
        let changes: Vec<Change> = touched
            .iter()
            .map(|(i, (before, after))| (address(*i), *before, *after))
            .collect();
        for (i, (_, after)) in &touched {
            known.insert(*i, *after);
        }
        changes_n.push(changes.len() as f64);
        elements_n.push(
            changes
                .iter()
                .map(|c| 1 + usize::from(c.1.is_some()))
                .sum::<usize>() as f64,
        );
        // Alternate which goes first, so neither always meets a warm cache.
        let mut timed = |parallel_first: bool| {
            let order = if parallel_first {
                [true, false]
            } else {
                [false, true]
            };
            let mut sums = Vec::new();
            for par in order {
                let t = Instant::now();
                let sum = if par {
                    sum_parallel(&changes)
                } else {
                    sum_serial(&changes)
                };
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if par {
                    parallel.push(ms);
                } else {
                    serial.push(ms);
                }
                sums.push(sum);
            }
            sums
        };
        let sums = timed(block % 2 == 1);
        sums_agree &= sums[0] == sums[1];
        running.add(&sums[0]);
    }
    std::hint::black_box(running.checksum());

    let serial_ms = median(serial);
    let parallel_ms = median(parallel);
    let changes_per_block = median(changes_n);
    let cpu_us_per_transfer = serial_ms * 1e3 / args.block_transfers as f64;
    let share = cpu_us_per_transfer * 1e-6 * args.rate / machine.cpus.max(1) as f64;
    let report = CommitmentReport {
        threads: rayon::current_num_threads(),
        build_profile: build_profile(),
        config,
        account_element_ns,
        slot_element_ns,
        add_ns,
        changes_per_block,
        elements_per_block: median(elements_n),
        serial_ms_per_block: serial_ms,
        parallel_ms_per_block: parallel_ms,
        cpu_us_per_transfer,
        cpu_us_per_change: serial_ms * 1e3 / changes_per_block.max(1.0),
        budget_us_per_transfer: args.budget_share * machine.cpus.max(1) as f64 / args.rate * 1e6,
        share_of_cpu_at_rate: share,
        within_budget: share <= args.budget_share,
        sums_agree,
        machine,
    };
    write_report(&args.out, "commitment", &report, &markdown(&report))?;
    eyre::ensure!(
        report.sums_agree,
        "the parallel sum differed from the serial one: a bug in the lattice hash's addition"
    );
    Ok(report)
}

/// The report as Markdown.
pub fn markdown(r: &CommitmentReport) -> String {
    let mut t = Table::new("lr", ["figure", "value"]);
    let rows: [(&str, String); 11] = [
        (
            "account element (hash to 2,048 bytes)",
            format!("{:.0} ns", r.account_element_ns),
        ),
        ("slot element", format!("{:.0} ns", r.slot_element_ns)),
        ("add one element to a sum", format!("{:.0} ns", r.add_ns)),
        (
            "state changes per block (median)",
            format!("{:.0}", r.changes_per_block),
        ),
        (
            "elements hashed per block",
            format!("{:.0}", r.elements_per_block),
        ),
        (
            "block delta, one core",
            format!("{:.2} ms", r.serial_ms_per_block),
        ),
        (
            "block delta, all cores",
            format!("{:.2} ms ({} threads)", r.parallel_ms_per_block, r.threads),
        ),
        (
            "CPU per state change",
            format!("{:.2} µs", r.cpu_us_per_change),
        ),
        (
            "CPU per transfer",
            format!("**{:.2} µs**", r.cpu_us_per_transfer),
        ),
        (
            "budget per transfer",
            format!("{:.2} µs", r.budget_us_per_transfer),
        ),
        (
            "share of the machine at the rate",
            format!(
                "**{:.1}%** ({})",
                r.share_of_cpu_at_rate * 100.0,
                if r.within_budget {
                    "within budget"
                } else {
                    "over budget"
                }
            ),
        ),
    ];
    for (name, value) in rows {
        t.row([name.to_string(), value]);
    }
    format!(
        "# The state commitment's cost: a lattice hash (LtHash, 2,048 bytes)\n\n\
         - {}\n- machine: {}; build: {}\n- serial and parallel sums agree on every block: {}\n\n{t}",
        r.config,
        r.machine.describe(),
        r.build_profile,
        r.sums_agree
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_delta_is_the_difference_of_the_states() {
        // Two accounts summed from scratch after a change equal the old sum plus the delta.
        let before: Vec<Change> = vec![
            (address(1), None, state(0, U256::from(5))),
            (address(2), None, state(0, U256::from(7))),
        ];
        let mut running = sum_serial(&before);
        let delta = vec![(
            address(1),
            Some(state(0, U256::from(5))),
            state(1, U256::from(4)),
        )];
        running.add(&sum_parallel(&delta));
        let after: Vec<Change> = vec![
            (address(1), None, state(1, U256::from(4))),
            (address(2), None, state(0, U256::from(7))),
        ];
        assert_eq!(running, sum_serial(&after));
        assert_ne!(running, sum_serial(&before));
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
            out: dir.path().to_path_buf(),
            seed: 7,
        };
        let r = run(&args).expect("the run");
        assert!(r.sums_agree);
        // 200 Zipf transfers over 1,000 accounts touch fewer than 400 accounts, more than 1.
        assert!(r.changes_per_block > 1.0 && r.changes_per_block < 400.0, "{r:?}");
        assert!(r.elements_per_block >= r.changes_per_block);
        assert!(r.account_element_ns > 0.0 && r.cpu_us_per_transfer > 0.0);
        let md = std::fs::read_to_string(dir.path().join("commitment.md")).expect("markdown");
        assert!(md.contains("| CPU per transfer |"), "{md}");
        assert!(dir.path().join("commitment.json").exists());
    }
}

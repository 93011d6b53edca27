//! `gigas-bench`: Gigas's macro-benchmarks. Each subcommand prints its configuration, runs a
//! workload with a fixed seed, and writes JSON, Markdown and SVG to `reports/`.

use clap::{Parser, Subcommand};

/// mimalloc keeps freed pages for reuse instead of returning them to the kernel at once, as
/// the system allocator does when the top of its heap is free: a block executor allocates and
/// frees the same tens of megabytes per block, and with the system allocator every block pays
/// the page faults again. Both sides of every comparison run in this process, on this
/// allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use eyre::Result;
use gigas_bench::{
    blockstm, bootstrap, commitment, diffs, experiments, fullnode, fuzz, jit, load, storage,
};

/// Gigas macro-benchmarks.
#[derive(Debug, Parser)]
#[command(name = "gigas-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Vilmo against MDBX: durable key-values per second, memory and disk as the store grows
    /// (10 million keys and 100 Zipf update batches by default; several minutes).
    Storage(storage::StorageArgs),
    /// Block-STM against sequential execution on mainnet blocks and generated workloads
    /// (independent, Zipf and ERC-20 transfers, a dependent chain); checks parallel ==
    /// sequential on every block.
    Blockstm(blockstm::BlockstmArgs),
    /// Compiled code against the interpreter on compute programs (snailtracer, analysis, an
    /// arithmetic loop, a KECCAK loop), frame for frame; compile time apart.
    Jit(jit::JitArgs),
    /// State diffs: bytes on the wire per transaction (Zipf transfers over 1M and 10M
    /// accounts, ERC-20 transfers, the mainnet blocks) and encode/decode speed; `--quick` for
    /// a run of a few minutes.
    Diffs(diffs::DiffsArgs),
    /// Signed transactions at one rate into a sequencer (started here on the benchmark
    /// genesis, or --sequencer URL): submitted, accepted, refused and included per second,
    /// inclusion latency, the node's stage split and CPU.
    Load(load::LoadArgs),
    /// The Ripple ramp: rising rates, 20 s each, until the block interval passes twice the
    /// block time, > 1% of a step's txs miss 5 s, or a tx is refused for anything but a full
    /// pool; the maximum sustained rate is the last step that passed.
    Ramp(load::RampArgs),
    /// The full node's apply throughput: diffs recorded once from a sequencer under Zipf
    /// transfers (10M accounts; 1M with --quick), replayed into a fresh MDBX state batched
    /// (no root, a commit every N blocks) and live (root and commit every block), with the
    /// time split between decode, verify, read, write, trie and commit.
    // Boxed: its options outweigh every other command's.
    Fullnode(Box<fullnode::FullnodeArgs>),
    /// Every decoder a peer or client reaches (diff file and body, block file, ChangeSet, raw
    /// transaction, journal) on mutated copies of valid inputs, 1M cases each by default; a
    /// panic or a broken round trip fails the run.
    Fuzz(fuzz::FuzzArgs),
    /// The MegaETH talk's experiments under memory limits (cgroups): keep-up (a full node's
    /// lag behind a sequencer at full rate), memory-sweep (live apply from 512 MiB to 8 GiB,
    /// Zipf and uniform) and sync-modes (batched against live, with and without 8 GiB).
    Experiments(experiments::ExperimentsArgs),
    /// What a lattice hash of the state (the candidate commitment a sequencer signs) costs
    /// per element, per change and per transfer of Zipf blocks, on one core and on all,
    /// against 3 % of the sequencer's CPU at the ramp's maximum rate.
    Commitment(commitment::CommitmentArgs),
    /// A new full node from a snapshot: the snapshot written from a state of 10M accounts
    /// (`--slots 10000000` for the mix state), served by nginx on loopback, and bootstrapped
    /// under an 8 GiB cgroup: production time and CPU, bytes per account and slot, and the
    /// bootstrap split into manifest, fetch/verify/write and merkleize.
    Bootstrap(bootstrap::BootstrapArgs),
}

fn main() -> Result<()> {
    gigas_launch::init_logging(gigas_launch::LogTo::Stderr);
    match Cli::parse().command {
        Command::Storage(args) => {
            storage::run(&args)?;
        }
        Command::Blockstm(args) => {
            blockstm::run(&args)?;
        }
        Command::Jit(args) => {
            jit::run(&args)?;
        }
        Command::Diffs(args) => {
            diffs::run(&args)?;
        }
        Command::Load(args) => {
            load::run_load(&args)?;
        }
        Command::Ramp(args) => {
            load::run_ramp(&args)?;
        }
        Command::Fullnode(args) => {
            fullnode::run(&args)?;
        }
        Command::Fuzz(args) => {
            fuzz::run(args)?;
        }
        Command::Experiments(args) => {
            experiments::run(&args)?;
        }
        Command::Commitment(args) => {
            commitment::run(&args)?;
        }
        Command::Bootstrap(args) => {
            bootstrap::run(&args)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand's options are well formed (clap checks types, names and defaults
    /// only when a command is built, which otherwise first happens in a user's hands).
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn keep_up_takes_cpu_lists() {
        let cli = match Cli::try_parse_from([
            "gigas-bench",
            "experiments",
            "keep-up",
            "--keep-up-sequencer-cpus",
            "0",
            "--keep-up-fullnode-cpus",
            "1-2",
        ]) {
            Ok(cli) => cli,
            Err(e) => panic!("{e}"),
        };
        let Command::Experiments(args) = cli.command else {
            panic!("parsed as another command");
        };
        assert_eq!(
            args.keep_up_sequencer_cpus.map(|c| c.cpus().to_vec()),
            Some(vec![0])
        );
        assert_eq!(
            args.keep_up_fullnode_cpus.map(|c| c.cpus().to_vec()),
            Some(vec![1, 2])
        );
        assert!(Cli::try_parse_from([
            "gigas-bench",
            "experiments",
            "--keep-up-fullnode-cpus",
            "2-1"
        ])
        .is_err());
    }
}

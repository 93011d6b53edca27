//! Hardforks and their activation points.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An Ethereum hardfork that changes execution rules, in activation order.
///
/// Forks that only moved the difficulty bomb (Muir Glacier, Arrow Glacier, Gray Glacier) do
/// not change execution and are therefore not listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Hardfork {
    /// Genesis rules.
    Frontier,
    /// EIP-2, EIP-7, EIP-8.
    Homestead,
    /// Tangerine Whistle (EIP-150 gas repricing).
    Tangerine,
    /// Spurious Dragon (EIP-155, EIP-158, EIP-161, EIP-170).
    SpuriousDragon,
    /// Byzantium (receipts carry a status instead of an intermediate state root).
    Byzantium,
    /// Constantinople without EIP-1283, as mainnet activated it (Constantinople and Petersburg
    /// went live together at block 7,280,000).
    Petersburg,
    /// Istanbul.
    Istanbul,
    /// Berlin (EIP-2929 access lists and warm/cold accounting).
    Berlin,
    /// London (EIP-1559 base fee).
    London,
    /// Paris, the Merge (PREVRANDAO).
    Paris,
    /// Shanghai (PUSH0, withdrawals).
    Shanghai,
    /// Cancun (blobs, transient storage, MCOPY).
    Cancun,
    /// Prague (EIP-7702, BLS precompiles).
    Prague,
}

impl fmt::Display for Hardfork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// When a hardfork activates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Activation {
    /// At this block number and after.
    Block(u64),
    /// At this block timestamp (seconds) and after.
    Timestamp(u64),
}

/// The hardfork schedule of a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainSpec {
    /// EIP-155 chain id.
    pub chain_id: u64,
    /// Activations, in hardfork order. Forks absent from the list are active from genesis if
    /// an earlier fork is listed after them, and never otherwise.
    pub activations: Vec<(Hardfork, Activation)>,
}

impl ChainSpec {
    /// Ethereum mainnet.
    pub fn mainnet() -> Self {
        use Activation::{Block, Timestamp};
        use Hardfork::*;
        Self {
            chain_id: 1,
            activations: vec![
                (Frontier, Block(0)),
                (Homestead, Block(1_150_000)),
                (Tangerine, Block(2_463_000)),
                (SpuriousDragon, Block(2_675_000)),
                (Byzantium, Block(4_370_000)),
                (Petersburg, Block(7_280_000)),
                (Istanbul, Block(9_069_000)),
                (Berlin, Block(12_244_000)),
                (London, Block(12_965_000)),
                (Paris, Block(15_537_394)),
                (Shanghai, Timestamp(1_681_338_455)),
                (Cancun, Timestamp(1_710_338_135)),
                (Prague, Timestamp(1_746_612_311)),
            ],
        }
    }

    /// A chain that runs one fork from genesis, as an L2 or a test network does.
    pub fn single_fork(chain_id: u64, fork: Hardfork) -> Self {
        Self {
            chain_id,
            activations: vec![(fork, Activation::Block(0))],
        }
    }

    /// The newest fork active at a block with this number and timestamp.
    ///
    /// Post-merge forks activate by timestamp, earlier ones by number; a block is under a fork
    /// when it has reached the fork's activation point, whichever kind it is.
    pub fn fork_at(&self, number: u64, timestamp: u64) -> Hardfork {
        self.activations
            .iter()
            .filter(|(_, activation)| match *activation {
                Activation::Block(b) => number >= b,
                Activation::Timestamp(t) => timestamp >= t,
            })
            .map(|(fork, _)| *fork)
            .max()
            .unwrap_or(Hardfork::Frontier)
    }

    /// Whether `fork` is active at this block.
    pub fn is_active(&self, fork: Hardfork, number: u64, timestamp: u64) -> bool {
        self.fork_at(number, timestamp) >= fork
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mainnet_fork_boundaries() {
        let spec = ChainSpec::mainnet();
        // Timestamps before the Merge are far below every timestamp activation.
        let old = 1_500_000_000;
        assert_eq!(spec.fork_at(0, old), Hardfork::Frontier);
        assert_eq!(spec.fork_at(1_149_999, old), Hardfork::Frontier);
        assert_eq!(spec.fork_at(1_150_000, old), Hardfork::Homestead);
        assert_eq!(spec.fork_at(2_462_999, old), Hardfork::Homestead);
        assert_eq!(spec.fork_at(2_463_000, old), Hardfork::Tangerine);
        assert_eq!(spec.fork_at(2_675_000, old), Hardfork::SpuriousDragon);
        assert_eq!(spec.fork_at(4_369_999, old), Hardfork::SpuriousDragon);
        assert_eq!(spec.fork_at(4_370_000, old), Hardfork::Byzantium);
        assert_eq!(spec.fork_at(7_280_000, old), Hardfork::Petersburg);
        assert_eq!(spec.fork_at(9_069_000, old), Hardfork::Istanbul);
        assert_eq!(spec.fork_at(12_243_999, old), Hardfork::Istanbul);
        assert_eq!(spec.fork_at(12_244_000, old), Hardfork::Berlin);
        assert_eq!(spec.fork_at(12_965_000, old), Hardfork::London);
        assert_eq!(spec.fork_at(15_537_393, 1_663_224_162), Hardfork::London);
        assert_eq!(spec.fork_at(15_537_394, 1_663_224_179), Hardfork::Paris);
        assert_eq!(spec.fork_at(17_034_869, 1_681_338_443), Hardfork::Paris);
        assert_eq!(spec.fork_at(17_034_870, 1_681_338_455), Hardfork::Shanghai);
        assert_eq!(spec.fork_at(19_426_587, 1_710_338_135), Hardfork::Cancun);
        assert!(spec.is_active(Hardfork::Byzantium, 4_370_000, old));
        assert!(!spec.is_active(Hardfork::Byzantium, 4_369_999, old));
    }

    #[test]
    fn single_fork_chain() {
        let spec = ChainSpec::single_fork(42, Hardfork::Cancun);
        assert_eq!(spec.fork_at(0, 0), Hardfork::Cancun);
        assert_eq!(spec.chain_id, 42);
    }
}

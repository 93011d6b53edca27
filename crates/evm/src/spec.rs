//! Hardfork to revm spec, and the configuration environment of a block.

use gigas_primitives::{ChainSpec, Hardfork};
use revm::context::CfgEnv;
use revm::primitives::hardfork::SpecId;

/// EIP-4844 blob base fee update fraction from Cancun until Prague.
pub const BLOB_BASE_FEE_UPDATE_FRACTION_CANCUN: u64 = 3_338_477;
/// EIP-7691 blob base fee update fraction from Prague on.
pub const BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE: u64 = 5_007_716;

/// The revm spec that implements a hardfork's execution rules.
pub fn spec_id(fork: Hardfork) -> SpecId {
    match fork {
        Hardfork::Frontier => SpecId::FRONTIER,
        Hardfork::Homestead => SpecId::HOMESTEAD,
        Hardfork::Tangerine => SpecId::TANGERINE,
        Hardfork::SpuriousDragon => SpecId::SPURIOUS_DRAGON,
        Hardfork::Byzantium => SpecId::BYZANTIUM,
        Hardfork::Petersburg => SpecId::PETERSBURG,
        Hardfork::Istanbul => SpecId::ISTANBUL,
        Hardfork::Berlin => SpecId::BERLIN,
        Hardfork::London => SpecId::LONDON,
        Hardfork::Paris => SpecId::MERGE,
        Hardfork::Shanghai => SpecId::SHANGHAI,
        Hardfork::Cancun => SpecId::CANCUN,
        Hardfork::Prague => SpecId::PRAGUE,
    }
}

/// The blob base fee update fraction in force under a fork.
pub fn blob_base_fee_update_fraction(fork: Hardfork) -> u64 {
    if fork >= Hardfork::Prague {
        BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE
    } else {
        BLOB_BASE_FEE_UPDATE_FRACTION_CANCUN
    }
}

/// The configuration environment for executing blocks of `chain` under `fork`.
///
/// The spec is set together with the gas parameters of that fork: assigning `cfg.spec` alone
/// keeps the gas table of the newest fork and gives wrong gas on old blocks.
pub fn cfg_env(chain: &ChainSpec, fork: Hardfork) -> CfgEnv {
    let mut cfg = CfgEnv::default();
    cfg.set_spec_and_mainnet_gas_params(spec_id(fork));
    cfg.chain_id = chain.chain_id;
    cfg.blob_base_fee_update_fraction = Some(blob_base_fee_update_fraction(fork));
    if let Some(max) = max_blobs_per_tx(fork) {
        // revm leaves the count unchecked unless told: a transaction with more blobs than a
        // block may hold must be rejected, not executed.
        cfg.set_max_blobs_per_tx(max);
    }
    cfg
}

/// The most blobs one transaction may carry under `fork` (the most a block may hold: 6 from
/// Cancun, 9 from Prague by EIP-7691); `None` before blobs exist.
pub fn max_blobs_per_tx(fork: Hardfork) -> Option<u64> {
    if fork >= Hardfork::Prague {
        Some(9)
    } else if fork >= Hardfork::Cancun {
        Some(6)
    } else {
        None
    }
}

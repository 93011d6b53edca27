//! The chain a full node follows: the sequencer's address, and the genesis state written
//! into a fresh database after checking it against the sequencer's signed genesis header
//! (diff 0).

use alloy_primitives::Address;
use gigas_chain::ChainConfig;
use gigas_statedb::{GenesisBlock, GenesisEntry, GenesisOutcome, StateDb, StateDbError};
use gigas_statediff::{ChainTip, DiffFile};

/// Why the genesis could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GenesisError {
    /// The chain spec is unusable.
    #[error("chain spec: {0}")]
    Chain(String),
    /// Diff 0 is not a valid genesis file.
    #[error("the sequencer's genesis file (diff 0): {0}")]
    File(#[from] gigas_statediff::DiffError),
    /// Diff 0 is not this chain's genesis.
    #[error("the sequencer's genesis does not match the chain spec: {0}")]
    Mismatch(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StateDbError),
}

/// The address whose signature every header must carry: `sequencer_address`, else the key's.
pub fn sequencer_address(chain: &ChainConfig) -> Result<Address, GenesisError> {
    chain.sequencer().map_err(|e| {
        GenesisError::Chain(format!(
            "{e} (a follower needs `sequencer_address` in the chain spec)"
        ))
    })
}

/// Writes the genesis state of `chain` into an empty `db`, after checking that `diff0` (the
/// sequencer's block 0) is signed by the sequencer; its state root must be the header's
/// `stateRoot` (else [`StateDbError::StateRootMismatch`], and no head is recorded).
/// Returns the tip and what was written.
pub fn initialize(
    db: &StateDb,
    chain: &ChainConfig,
    diff0: &[u8],
    commitment: bool,
) -> Result<(ChainTip, GenesisOutcome), GenesisError> {
    let sequencer = sequencer_address(chain)?;
    let file = DiffFile::decode(diff0)?;
    let header = &file.header;
    if header.number != 0 {
        return Err(GenesisError::Mismatch(format!(
            "it is block {}, not 0",
            header.number
        )));
    }
    let hash = header.hash_slow();
    let signer = alloy_consensus::crypto::secp256k1::recover_signer(&file.signature, hash)
        .map_err(|e| GenesisError::Mismatch(format!("its signature does not recover: {e}")))?;
    if signer != sequencer {
        return Err(GenesisError::Mismatch(format!(
            "it is signed by {signer}, the chain spec's sequencer is {sequencer}"
        )));
    }
    // The genesis state's root is checked as it is written (`verify_root`): the database
    // records no head unless the chain spec's genesis state gives the header's stateRoot.
    // The genesis state written must be the one the sequencer signed: its lattice is the
    // base every later commitment is checked from (the database refuses a different sum).
    let lattice = if commitment {
        match &file.commitment {
            None => {
                return Err(GenesisError::Mismatch(
                    "diff 0 carries no state commitment (a sequencer run with \
                     `--state-commitment off`? follow it with `--state-commitment off`)"
                        .into(),
                ))
            }
            Some(c) if c.signer(&hash) != Some(sequencer) => {
                return Err(GenesisError::Mismatch(
                    "its state commitment is not signed by the sequencer".into(),
                ))
            }
            Some(c) => Some(*c),
        }
    } else {
        None
    };
    let outcome = db.apply_genesis(
        GenesisBlock {
            header,
            hash,
            signature: Some(file.signature),
            commitment: lattice,
            verify_root: true,
        },
        genesis_entries(chain)?,
        1 << 20,
    )?;
    Ok((ChainTip::of(header), outcome))
}

/// The chain spec's genesis state as a stream (the benchmark accounts read from their file).
pub fn genesis_entries(
    chain: &ChainConfig,
) -> Result<impl Iterator<Item = Result<GenesisEntry, std::convert::Infallible>>, GenesisError> {
    let mut entries = Vec::new();
    for (address, account) in &chain.alloc {
        entries.push(GenesisEntry::Account {
            address: *address,
            nonce: account.nonce,
            balance: account.balance,
            code: (!account.code.is_empty()).then(|| account.code.clone()),
        });
        for (slot, value) in &account.storage {
            entries.push(GenesisEntry::Slot {
                address: *address,
                slot: *slot,
                value: *value,
            });
        }
    }
    let bench = match &chain.bench_accounts {
        Some(bench) => {
            let addresses = gigas_chain::bench::read_addresses(bench)
                .map_err(|e| GenesisError::Chain(e.to_string()))?;
            Some((addresses, bench.balance))
        }
        None => None,
    };
    let bench_entries = bench.into_iter().flat_map(|(addresses, balance)| {
        addresses
            .into_iter()
            .map(move |address| GenesisEntry::Account {
                address,
                nonce: 0,
                balance,
                code: None,
            })
    });
    Ok(entries.into_iter().chain(bench_entries).map(Ok))
}

/// Checks that a database initialised earlier holds this chain: its block 0 is signed by the
/// chain spec's sequencer.
pub fn check_existing(
    db: &StateDb,
    chain: &ChainConfig,
    commitment: bool,
) -> Result<ChainTip, GenesisError> {
    let sequencer = sequencer_address(chain)?;
    let view = db.view()?;
    let tip = view.tip()?.ok_or(StateDbError::NotInitialized)?;
    // A node bootstrapped from a snapshot holds no signed block 0 (none, or an unsigned
    // ancestor header the snapshot carried): its head is signed by the sequencer all the same.
    let genesis = match view.header(0)? {
        Some(header) if header.signature.is_some() => header,
        _ => view.header(tip.number)?.ok_or_else(|| {
            GenesisError::Mismatch(format!(
                "the database holds neither block 0 nor its head {}",
                tip.number
            ))
        })?,
    };
    let signer = genesis
        .signature
        .and_then(|s| alloy_consensus::crypto::secp256k1::recover_signer(&s, genesis.hash).ok());
    if signer != Some(sequencer) {
        return Err(GenesisError::Mismatch(format!(
            "this data directory follows another chain (its block {} {} is not signed by {sequencer}); use another --datadir",
            genesis.header.number,
            genesis.hash
        )));
    }
    if commitment && view.lattice()?.is_none() {
        return Err(GenesisError::Mismatch(format!(
            "this state database (at block {}) keeps no state commitment: it was written by a \
             Gigas from before state commitments or with `--state-commitment off`. Move its \
             `state` directory aside to start again, or run with `--state-commitment off`",
            tip.number
        )));
    }
    Ok(tip)
}

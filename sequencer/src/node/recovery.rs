//! Recovery: the genesis, the data directory's fingerprint, and bringing Vilmo to the
//! history's head after a crash.

use super::*;

/// The genesis block of `chain` whose state has root `state_root`.
pub fn genesis_block(
    chain: &ChainConfig,
    signer: &PrivateKeySigner,
    state_root: B256,
) -> Result<HeadBlock, NodeError> {
    let header = Header {
        beneficiary: signer.address(),
        state_root,
        timestamp: chain.genesis_timestamp,
        base_fee_per_gas: Some(chain.base_fee.initial),
        ..header_template(chain)
    };
    seal(signer, header)
}

/// The genesis block of `chain` with its state writes, its root computed from scratch.
pub fn genesis(
    chain: &ChainConfig,
    signer: &PrivateKeySigner,
) -> Result<(HeadBlock, Vec<Write>), NodeError> {
    let writes = chain.genesis_writes()?;
    let root = genesis_root(&writes)?;
    Ok((genesis_block(chain, signer, root)?, writes))
}

pub(super) const FINGERPRINT_FILE: &str = "genesis.fingerprint";

/// `DATADIR/layout.version`: the data directory's layout, one decimal number.
pub(super) const LAYOUT_FILE: &str = "layout.version";

/// The layout this build writes and reads. Version 2: headers carry the Ethereum state root
/// (the trie in `DATADIR/trie`); version 1 (no file) carried a chained ChangeSet checksum.
pub(super) const DATADIR_LAYOUT: u32 = 2;

/// Refuses a data directory of another layout; marks a new one (an empty history) with
/// this build's.
pub(super) fn check_layout(dir: &std::path::Path, history: &History) -> Result<(), NodeError> {
    let path = dir.join(LAYOUT_FILE);
    let found = match std::fs::read_to_string(&path) {
        Ok(text) => Some(
            text.trim()
                .parse::<u32>()
                .map_err(|_| NodeError::Inconsistent {
                    dir: dir.to_path_buf(),
                    message: format!(
                        "{} does not hold a layout version: {text:?}",
                        path.display()
                    ),
                })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(NodeError::Inconsistent {
                dir: dir.to_path_buf(),
                message: format!("cannot read {}: {e}", path.display()),
            })
        }
    };
    let fresh = history.head()?.is_none();
    match found {
        Some(DATADIR_LAYOUT) => Ok(()),
        None if fresh => {
            let tmp = dir.join(format!("{LAYOUT_FILE}.tmp"));
            std::fs::write(&tmp, format!("{DATADIR_LAYOUT}\n"))
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| NodeError::Inconsistent {
                    dir: dir.to_path_buf(),
                    message: format!("cannot write {}: {e}", path.display()),
                })
        }
        found => Err(NodeError::Inconsistent {
            dir: dir.to_path_buf(),
            message: format!(
                "it holds a chain of data directory layout {} and this build reads layout \
                 {DATADIR_LAYOUT}, whose headers carry the Ethereum state root instead of a \
                 state checksum: its blocks cannot be served as they are. Start the chain \
                 again in an empty --datadir (full nodes following it start again too), or \
                 run the build that created it",
                found.unwrap_or(1)
            ),
        }),
    }
}

/// `genesis.fingerprint`: the chain spec's genesis fingerprint and the genesis hash, hex, one
/// per line.
pub(super) fn read_fingerprint(dir: &std::path::Path) -> Option<(B256, B256)> {
    let text = std::fs::read_to_string(dir.join(FINGERPRINT_FILE)).ok()?;
    let mut lines = text.lines();
    let fingerprint = lines.next()?.trim().parse().ok()?;
    let hash = lines.next()?.trim().parse().ok()?;
    Some((fingerprint, hash))
}

pub(super) fn write_fingerprint(
    dir: &std::path::Path,
    chain: &ChainConfig,
    genesis_hash: B256,
) -> Result<(), NodeError> {
    let fingerprint = chain.genesis_fingerprint()?;
    let path = dir.join(FINGERPRINT_FILE);
    let tmp = dir.join(format!("{FINGERPRINT_FILE}.tmp"));
    std::fs::write(&tmp, format!("{fingerprint}\n{genesis_hash}\n"))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| NodeError::Inconsistent {
            dir: dir.to_path_buf(),
            message: format!("cannot write {}: {e}", path.display()),
        })
}

/// Brings Vilmo and the history to the same head and returns it.
///
/// Vilmo's batch `k` holds block `k - 1` (batch 1 is the genesis state). The committer writes
/// a group of blocks to the history before any of them to Vilmo, so after a crash Vilmo is at
/// the history's head or up to [`MAX_GROUP`] blocks behind it; anything else means the
/// directory's stores do not belong together.
pub(super) fn recover(
    config: &NodeConfig,
    signer: &PrivateKeySigner,
    vilmo: &mut Vilmo,
    history: &History,
    trie: &mut gigas_triedb::TrieStore,
) -> Result<HeadBlock, NodeError> {
    let dir = &config.datadir;
    let inconsistent = |message: String| NodeError::Inconsistent {
        dir: dir.clone(),
        message,
    };
    let batches = vilmo.last_commit().number;
    let Some(head) = history.head()? else {
        if batches != 0 {
            return Err(inconsistent(format!(
                "the state store holds {batches} batches but the chain history is empty; \
                 remove the directory to start a new chain"
            )));
        }
        // The trie first: a crash before the history holds the genesis starts over.
        let writes = config.chain.genesis_writes()?;
        let (accounts, slots) = genesis_state(&writes)?;
        let trie_dir = trie.dir().to_path_buf();
        let root = trie
            .reset(0, accounts, slots)
            .map_err(trie_error(&trie_dir))?;
        let genesis = genesis_block(&config.chain, signer, root.root)?;
        history.commit_block(&BlockRecord {
            header: &genesis.header,
            hash: genesis.hash,
            signature: genesis.signature,
            transactions: &[],
            receipts: &[],
            changeset: &[],
            state_history: &[],
        })?;
        vilmo.commit(batch_of(&writes)?)?;
        write_fingerprint(dir, &config.chain, genesis.hash)?;
        info!(hash = %genesis.hash, accounts = writes.len(), "wrote the genesis block");
        return Ok(genesis);
    };
    let sealed = history
        .sealed_header(head)?
        .ok_or_else(|| inconsistent(format!("the history's head {head} has no header")))?;
    // The chain in this directory must be the configured one.
    let genesis_header = history
        .sealed_header(0)?
        .ok_or_else(|| inconsistent("the history has no genesis header".into()))?;
    // The fingerprint spares rebuilding a genesis of millions of accounts to compare it;
    // without one (or when it differs) the genesis is rebuilt and compared by hash.
    let fingerprint_matches = match read_fingerprint(dir) {
        Some((fingerprint, hash)) if hash == genesis_header.hash => {
            config.chain.genesis_fingerprint().ok() == Some(fingerprint)
        }
        _ => false,
    };
    let mut genesis_writes = None;
    if !fingerprint_matches {
        let (expected, writes) = genesis(&config.chain, signer)?;
        if genesis_header.hash != expected.hash {
            return Err(inconsistent(format!(
                "its genesis {} is not the configured chain's genesis {}; use another --datadir \
                 or the chain spec it was created with",
                genesis_header.hash, expected.hash
            )));
        }
        write_fingerprint(dir, &config.chain, expected.hash)?;
        genesis_writes = Some(writes);
    }
    if batches == head + 1 {
        return Ok(HeadBlock::from_sealed(sealed));
    }
    // The committer writes up to MAX_GROUP blocks to the history, then their state one by
    // one: a crash leaves Vilmo at most that many blocks behind, never ahead.
    if batches > head + 1 || batches + (MAX_GROUP as u64) < head + 1 {
        return Err(inconsistent(format!(
            "the state store holds {batches} batches (block {}), the chain history ends at \
             block {head}: they do not belong together",
            batches as i128 - 1
        )));
    }
    for number in batches..=head {
        let writes = if number == 0 {
            match genesis_writes.take() {
                Some(writes) => writes,
                None => config.chain.genesis_writes()?,
            }
        } else {
            let bytes = history.changeset(number)?.ok_or_else(|| {
                inconsistent(format!(
                    "block {number}'s ChangeSet is missing from the history"
                ))
            })?;
            // The block log's checksums cover the ChangeSet; the state root of the block
            // is checked when the trie replays it (`recover_trie`).
            let changes = ChangeSet::decode(&bytes).map_err(|e| {
                inconsistent(format!(
                    "block {number}'s stored ChangeSet does not decode: {e}"
                ))
            })?;
            changeset_writes(&changes, &*vilmo).map_err(crate::state::StateError::from)?
        };
        vilmo.commit(batch_of(&writes)?)?;
        warn!(
            block = number,
            "re-applied a block's state, which a crash had cut off"
        );
    }
    Ok(HeadBlock::from_sealed(sealed))
}

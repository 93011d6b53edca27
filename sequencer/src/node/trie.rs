//! The state trie: the root every header carries (`stateRoot`, the Ethereum state root),
//! kept by a [`TrieStore`] in `DATADIR/trie`, its genesis, and bringing it to the head at a
//! start.
//!
//! The trie is at most as far as the history: its commit thread commits a block only once
//! the committer has made it durable (the gate below). At a start it is at or behind the
//! head, and the blocks after its last commit (at most a few commit groups) replay from the
//! history's ChangeSets, each root checked against its header. A trie that cannot be
//! brought to the head (missing, corrupt, or disagreeing with a header) is rebuilt from
//! Vilmo's state, which is the head's, and checked against the head's header.

use std::path::Path;

use gigas_primitives::hashed::AddressRuns;
use gigas_primitives::state_keys::{decode_entry, StateEntry};
use gigas_primitives::AccountState;
use gigas_primitives::HashedKeys;
use gigas_triedb::{TrieHead, TrieStore, TrieStoreOptions};

use super::*;

/// `DATADIR/trie`.
pub(super) const TRIE_DIR: &str = "trie";

/// Hashed accounts and hashed slots of a whole state, as [`TrieStore::reset`] takes them.
pub(super) type HashedState = (Vec<(B256, AccountState)>, Vec<(B256, B256, U256)>);

/// A whole state by hashed key, read from stored entries (codes skipped).
#[derive(Default)]
struct HashedStateReader {
    accounts: Vec<(B256, AccountState)>,
    slots: Vec<(B256, B256, U256)>,
    owners: AddressRuns,
    failed: Option<gigas_primitives::state_keys::LayoutError>,
}

impl HashedStateReader {
    fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        match decode_entry(key, value) {
            Ok(StateEntry::Account(address, stored)) => {
                self.accounts.push((keccak256(address), stored.state));
            }
            Ok(StateEntry::Slot(address, slot, value)) => {
                // Slots come by address: each owner is hashed once.
                let owner = self.owners.hash(&address);
                self.slots
                    .push((owner, keccak256(slot.to_be_bytes::<32>()), value));
            }
            Ok(StateEntry::Code(_)) => {}
            Err(e) => self.failed = Some(e),
        }
    }

    fn finish(self) -> Result<HashedState, NodeError> {
        match self.failed {
            Some(e) => Err(crate::state::StateError::from(e).into()),
            None => Ok((self.accounts, self.slots)),
        }
    }
}

/// The genesis state's hashed accounts and slots.
pub(super) fn genesis_state(writes: &[Write]) -> Result<HashedState, NodeError> {
    let mut reader = HashedStateReader::default();
    for (key, value) in writes {
        if let Some(value) = value {
            reader.push(key, value);
        }
    }
    reader.finish()
}

/// Vilmo's state (the head's) by hashed key.
fn vilmo_state(vilmo: &Vilmo) -> Result<HashedState, NodeError> {
    let mut reader = HashedStateReader::default();
    vilmo.for_each(|key, value| reader.push(key, value));
    reader.finish()
}

/// The root of the genesis state, from scratch (alloy-trie): for checking a stored genesis
/// against the chain spec's.
pub(super) fn genesis_root(writes: &[Write]) -> Result<B256, NodeError> {
    let mut scratch = gigas_trie::ScratchState::new();
    for (key, value) in writes {
        if let Some(value) = value {
            crate::state::add_entry(&mut scratch, key, value)
                .map_err(crate::state::StateError::from)?;
        }
    }
    scratch.root().map_err(|e| NodeError::Inconsistent {
        dir: PathBuf::new(),
        message: format!("the genesis state's root: {e}"),
    })
}

/// The trie store's options from the node's.
pub(super) fn trie_options(config: &NodeConfig) -> TrieStoreOptions {
    TrieStoreOptions {
        sparse_trie_bytes: config.trie_memory_bytes,
        commit_blocks: config.trie_commit_blocks,
        root_threads: config.threads,
        ..TrieStoreOptions::default()
    }
}

pub(super) fn open_trie(config: &NodeConfig) -> Result<TrieStore, NodeError> {
    let dir = config.datadir.join(TRIE_DIR);
    TrieStore::open(&dir, trie_options(config)).map_err(trie_error(&dir))
}

/// The trie store's failure, with its directory.
pub(super) fn trie_error(dir: &Path) -> impl Fn(gigas_triedb::TrieDbError) -> NodeError + '_ {
    move |source| NodeError::Trie {
        dir: dir.to_path_buf(),
        source,
    }
}

/// Brings `trie` to `head` (recovered: Vilmo and the history both at it): replays the
/// blocks after its last commit from the history, or rebuilds it from Vilmo when that
/// cannot be done. Either way the root at the head must be the head's `stateRoot`.
pub(super) fn recover_trie(
    config: &NodeConfig,
    trie: &mut TrieStore,
    vilmo: &Vilmo,
    history: &History,
    head: &HeadBlock,
) -> Result<(), NodeError> {
    let dir = trie.dir().to_path_buf();
    let number = head.header.number;
    let replayable = match trie.committed() {
        Some(committed) if committed.block <= number => {
            match replay(trie, history, committed, number) {
                Ok(()) => true,
                Err(e) => {
                    warn!(error = %e, dir = %dir.display(), "the state trie cannot be brought to the head by replaying blocks; rebuilding it from the state");
                    false
                }
            }
        }
        Some(committed) => {
            warn!(
                trie = committed.block,
                head = number,
                "the state trie is ahead of the chain history; rebuilding it from the state"
            );
            false
        }
        None => {
            warn!(dir = %dir.display(), "no state trie in the data directory; building it from the state");
            false
        }
    };
    if !replayable {
        let start = Instant::now();
        let (accounts, slots) = vilmo_state(vilmo)?;
        let rebuilt = trie
            .reset(number, accounts, slots)
            .map_err(trie_error(&dir))?;
        if rebuilt.root != head.header.state_root {
            return Err(NodeError::Inconsistent {
                dir: config.datadir.clone(),
                message: format!(
                    "the state root of block {number} computed from the state store is {}, \
                     its header says {}: the state store does not hold that block's state",
                    rebuilt.root, head.header.state_root
                ),
            });
        }
        info!(
            block = number,
            seconds = format_args!("{:.1}", start.elapsed().as_secs_f64()),
            "rebuilt the state trie"
        );
    }
    Ok(())
}

/// Applies blocks `from.block + 1 ..= to` from the history, checking each root against its
/// header.
fn replay(trie: &mut TrieStore, history: &History, from: TrieHead, to: u64) -> Result<(), String> {
    let header = |n: u64| {
        history
            .sealed_header(n)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("block {n}'s header is missing from the history"))
    };
    let at = header(from.block)?;
    if at.header.state_root != from.root {
        return Err(format!(
            "its last commit, block {}, has root {}, the block's header {}",
            from.block, from.root, at.header.state_root
        ));
    }
    let start = Instant::now();
    for n in from.block + 1..=to {
        let bytes = history
            .changeset(n)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("block {n}'s ChangeSet is not in the history's window"))?;
        let changes =
            ChangeSet::decode(&bytes).map_err(|e| format!("block {n}'s ChangeSet: {e}"))?;
        let applied = trie
            .apply(n, &changes, &HashedKeys::of(&changes))
            .map_err(|e| e.to_string())?;
        let expected = header(n)?.header.state_root;
        if applied.head.root != expected {
            return Err(format!(
                "block {n}'s root replayed is {}, its header says {expected}",
                applied.head.root
            ));
        }
    }
    if to > from.block {
        info!(
            from = from.block + 1,
            to,
            seconds = format_args!("{:.2}", start.elapsed().as_secs_f64()),
            "replayed the state trie to the head"
        );
    }
    Ok(())
}

/// The trie's commit gate: a block is committed once the committer has made it durable
/// (`committed_through`), never while the node is stopping and it is not.
pub(super) fn commit_gate(
    committed_through: Arc<AtomicU64>,
    stopping: Arc<AtomicBool>,
) -> gigas_triedb::CommitGate {
    Arc::new(move |block| loop {
        if committed_through.load(Ordering::SeqCst) >= block {
            return true;
        }
        if stopping.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    })
}

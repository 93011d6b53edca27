//! What the trie engine itself can fail with; a source's own errors are its own type
//! ([`crate::TrieSource::Error`]), which takes these in.

use alloy_primitives::Address;
use alloy_trie::Nibbles;

/// A failure of the engine, not of the storage under it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrieError {
    /// The engine's bookkeeping disagrees with itself: a bug. Whoever holds the trie drops it
    /// and starts again from the stored one.
    #[error("the trie's bookkeeping is inconsistent: {what} (a bug)")]
    Invariant {
        /// What did not hold.
        what: String,
    },
    /// A root thread panicked (its part of the trie is lost with it).
    #[error("a state root thread panicked")]
    ThreadPanicked,
    /// The in-memory trie was asked for the hash of a subtrie it never loaded.
    #[error("the in-memory trie has no encoding for the subtrie at {path:?}")]
    Unloaded {
        /// The subtrie's path.
        path: Nibbles,
    },
    /// A state given to a root from scratch has slots under an address with no account: the
    /// store it was read from is inconsistent.
    #[error("the state has storage under {address}, which has no account")]
    SlotsWithoutAccount {
        /// The address.
        address: Address,
    },
    /// A walk ran past the deadline it was given.
    #[error("{0}: stopped at its deadline")]
    DeadlinePassed(&'static str),
}

//! A hot list: the contracts to compile, named by code hash, as the profiler writes them
//! (`gigas-profiler` → `jit-hotlist.txt`, ordered by the time the JIT could save in each).
//!
//! With a hot list, [`JitMode::On`](super::JitMode::On) compiles a listed contract at its
//! first call (in the background, as always) instead of after it has spent the gas
//! threshold of [`Hotness`](super::Hotness); unlisted contracts still compile by the
//! threshold, so a stale list costs the gain of its missing contracts, never the JIT.

use std::collections::HashSet;
use std::path::Path;

use alloy_primitives::B256;

/// The most entries a hot list may hold: far more than a code cache's budget can keep
/// compiled, and a bound on what a file can make the node allocate.
pub const MAX_HOT_LIST: usize = 1 << 16;

/// A hot list that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HotListError {
    /// The file cannot be read.
    #[error("cannot read the JIT hot list {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line does not start with a 32-byte code hash.
    #[error(
        "{path}, line {line}: `{text}` does not start with a code hash (0x and 64 hex digits)"
    )]
    Line {
        /// The file.
        path: String,
        /// Line number (from 1).
        line: usize,
        /// The line.
        text: String,
    },
    /// More entries than [`MAX_HOT_LIST`].
    #[error("{path} lists more than {MAX_HOT_LIST} contracts")]
    TooLong {
        /// The file.
        path: String,
    },
}

/// The code hashes of a hot list, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotList {
    hashes: Vec<B256>,
    set: HashSet<B256>,
}

impl HotList {
    /// Reads a hot list: one contract per line, its code hash first (the rest of the line and
    /// `#` comments are for people).
    pub fn read(path: &Path) -> Result<Self, HotListError> {
        let text = std::fs::read_to_string(path).map_err(|source| HotListError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses a hot list's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, HotListError> {
        let mut list = Self::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            let Some(first) = line.split_whitespace().next() else {
                continue;
            };
            let hash = first
                .parse::<B256>()
                .ok()
                .filter(|_| first.len() == 66)
                .ok_or_else(|| HotListError::Line {
                    path: origin.to_string(),
                    line: i + 1,
                    text: raw.trim().to_string(),
                })?;
            if list.set.insert(hash) {
                if list.hashes.len() >= MAX_HOT_LIST {
                    return Err(HotListError::TooLong {
                        path: origin.to_string(),
                    });
                }
                list.hashes.push(hash);
            }
        }
        Ok(list)
    }

    /// A hot list of these hashes.
    pub fn of(hashes: impl IntoIterator<Item = B256>) -> Self {
        let mut list = Self::default();
        for hash in hashes {
            if list.set.insert(hash) {
                list.hashes.push(hash);
            }
        }
        list
    }

    /// Whether `hash` is listed.
    pub fn contains(&self, hash: &B256) -> bool {
        self.set.contains(hash)
    }

    /// Contracts listed.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The hashes, in file order.
    pub fn hashes(&self) -> &[B256] {
        &self.hashes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hot_list_reads_hashes_and_rejects_anything_else() {
        let h1 = B256::repeat_byte(1);
        let h2 = B256::repeat_byte(2);
        let text =
            format!("# code hash, address, ms\n{h1:#x} 0xabc 12.5\n\n{h2:#x}\n{h1:#x} again\n");
        let list = HotList::parse(&text, "t").expect("parses");
        assert_eq!(list.hashes(), &[h1, h2]);
        assert!(list.contains(&h2) && !list.contains(&B256::ZERO));
        for bad in ["0x1234 short", "hello", "0xzz"] {
            let err = HotList::parse(&format!("{h1:#x}\n{bad}\n"), "t").expect_err(bad);
            assert!(err.to_string().contains("line 2"), "{err}");
        }
    }
}

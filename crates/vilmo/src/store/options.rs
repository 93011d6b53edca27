//! The store's options and their validation.

use crate::error::{Error, Result};

/// How the store behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A new log file is started when the current one would grow past this many bytes.
    pub target_file_size: u64,
    /// A log file is compacted when its live bytes fall under this percentage of its size;
    /// 0 turns compaction off.
    pub compaction_threshold_percent: u8,
    /// How many bytes of the file being compacted each batch reads at most, unless three times
    /// the batch's own bytes is more (so that compaction keeps up with any write rate; at least
    /// one record): the bound on compaction work per batch. Compaction stops between records,
    /// so a batch of any size is compacted in steps of this bound.
    pub compaction_bytes_per_batch: u64,
    /// Whether `commit` waits for `fdatasync`. Only tests and CPU benchmarks turn it off.
    pub durable: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            target_file_size: 256 << 20,
            compaction_threshold_percent: 60,
            // About 25 ms of work per batch on a 2-vCPU VM (0.7 µs per record read); 24 MiB
            // made a 150 ms pause in the sequencer's commit under the store's write lock.
            compaction_bytes_per_batch: 4 << 20,
            durable: true,
        }
    }
}

impl Options {
    pub(super) fn validate(&self) -> Result<()> {
        if self.target_file_size < 4096 || self.target_file_size > (3u64 << 30) {
            return Err(Error::InvalidOption(format!(
                "target_file_size {} must be between 4 KiB and 3 GiB",
                self.target_file_size
            )));
        }
        if self.compaction_threshold_percent > 99 {
            return Err(Error::InvalidOption(format!(
                "compaction_threshold_percent {} must be between 0 (off) and 99",
                self.compaction_threshold_percent
            )));
        }
        Ok(())
    }
}

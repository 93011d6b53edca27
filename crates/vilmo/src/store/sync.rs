//! Building a store from another store's log files, as a new node does.

use std::fs;
use std::path::{Path, PathBuf};

use super::{io, Commit, Options, Vilmo};
use crate::error::{Error, Result};
use crate::format::GENESIS;
use crate::recovery::{self, file_name, hex};
use crate::storage::{FsStorage, Storage};

impl Vilmo<FsStorage> {
    /// Builds a store in `dest` from another store's log files (as a new node does after
    /// downloading them) and checks that it ends at `expected` (the checksum every node agrees
    /// on). On success the new store holds exactly the source's state.
    ///
    /// The files come from a peer and are not trusted: before anything is copied or applied,
    /// every file is verified with ordinary reads (names, headers, checksums, record bounds, the
    /// chain across files and drop records) and the chain must end at `expected`; only then are
    /// the files copied into `dest` (which must hold no log files) and opened.
    pub fn sync_from_logs(
        logs: &[PathBuf],
        dest: impl AsRef<Path>,
        options: Options,
        expected: Commit,
    ) -> Result<Self> {
        let dest = dest.as_ref();
        let mut named: Vec<(u32, &PathBuf)> = Vec::with_capacity(logs.len());
        for src in logs {
            let id = src
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(recovery::parse_file_name)
                .ok_or_else(|| Error::Corrupt {
                    path: src.clone(),
                    offset: 0,
                    reason: "not named like a log file (eight digits and .vlog)".into(),
                })?;
            named.push((id, src));
        }
        named.sort_by_key(|(id, _)| *id);
        if let Some(w) = named.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::Corrupt {
                path: w[1].1.clone(),
                offset: 0,
                reason: format!("log file {} given twice", w[1].0),
            });
        }
        let newest = named.last().map(|(id, _)| *id);
        let mut scans = Vec::with_capacity(named.len());
        for &(id, src) in &named {
            let file = std::fs::File::open(src).map_err(io(src, "open"))?;
            let len = file.metadata().map_err(io(src, "stat"))?.len();
            let read =
                |buf: &mut [u8], at: u64| std::os::unix::fs::FileExt::read_exact_at(&file, buf, at);
            scans.push(recovery::scan_file(
                &read,
                len,
                src,
                id,
                Some(id) == newest,
            )?);
        }
        let (got_batch, got) = recovery::check_chain(dest, &scans)?;
        let got = if got_batch == 0 { GENESIS } else { got };
        if got_batch != expected.number || got != expected.checksum {
            return Err(Error::SyncMismatch {
                expected_batch: expected.number,
                expected: hex(&expected.checksum),
                got_batch,
                got: hex(&got),
            });
        }

        fs::create_dir_all(dest).map_err(io(dest, "create directory"))?;
        let existing = FsStorage
            .list_dir(dest)
            .map_err(io(dest, "list directory"))?;
        if let Some(name) = existing.iter().find(|n| n.ends_with(".vlog")) {
            return Err(Error::InvalidOption(format!(
                "{} already holds log file {name}; sync into an empty directory",
                dest.display()
            )));
        }
        for (id, src) in &named {
            let target = dest.join(file_name(*id));
            fs::copy(src, &target).map_err(io(src, "copy log file"))?;
            std::fs::File::open(&target)
                .and_then(|f| f.sync_all())
                .map_err(io(&target, "fsync copied log"))?;
        }
        FsStorage
            .sync_dir(dest)
            .map_err(io(dest, "fsync directory"))?;
        let store = Self::open(dest, options)?;
        if store.last != expected {
            return Err(Error::SyncMismatch {
                expected_batch: expected.number,
                expected: hex(&expected.checksum),
                got_batch: store.last.number,
                got: hex(&store.last.checksum),
            });
        }
        Ok(store)
    }
}

//! Helpers shared by the profiler's integration tests.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use gigas_profiler::replay::Workload;
use gigas_profiler::report::Configuration;

pub(crate) fn mainnet_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/mainnet");
    assert!(
        dir.is_dir(),
        "shared data missing: expected the mainnet fixtures at {}",
        dir.display()
    );
    dir
}

/// Copies the shipped blocks `numbers` into `to`, a directory per block.
pub(crate) fn copy_blocks(to: &Path, numbers: &[&str]) {
    for number in numbers {
        let from = mainnet_dir().join(number);
        let dest = to.join(number);
        fs::create_dir_all(&dest).expect("mkdir");
        for entry in fs::read_dir(&from).expect("read fixture") {
            let entry = entry.expect("entry");
            fs::copy(entry.path(), dest.join(entry.file_name())).expect("copy");
        }
    }
}

/// A report configuration for `workload` measured over `rounds` rounds.
pub(crate) fn configuration(workload: &Workload, rounds: usize) -> Configuration {
    Configuration {
        blocks_dir: "test".into(),
        blocks: workload.blocks.len(),
        transactions: workload.tx_count(),
        gas: workload.gas(),
        rounds,
        sample_interval_ns: 2000,
        build_profile: "test".into(),
        cpus: 1,
        cpu_model: "test".into(),
        memory_bytes: 0,
        revm_version: gigas_evm::REVM_VERSION.into(),
    }
}

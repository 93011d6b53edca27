//! The benchmark genesis: N accounts derived from a seed, built once and kept.
//!
//! Deriving an address costs an elliptic-curve multiplication (tens of microseconds), so 10M
//! accounts cost minutes of CPU: `gigas-sequencer genesis` derives them once, in parallel,
//! into an addresses file beside a chain spec that names it. A node then starts on that spec
//! by reading the file (about a second per million accounts), and a load generator derives
//! any account's key from the seed without curve work ([`crate::chain::bench_key`]).
//!
//! File layout: magic `GIGASACC`, version u32 LE (1), seed u64 LE, count u64 LE, then
//! `count` 20-byte addresses in index order, then BLAKE3 of everything before it (32 bytes).

use std::io::Write as _;
use std::path::Path;

use alloy_primitives::{Address, U256};
use alloy_signer_local::PrivateKeySigner;
use rayon::prelude::*;

use crate::chain::{bench_key, BenchAccounts, ChainConfig};

const MAGIC: &[u8; 8] = b"GIGASACC";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 8 + 8;

/// Why an addresses file could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum GenesisError {
    /// An I/O error on the file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not what the chain spec says it is.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and what to do.
        message: String,
    },
}

/// The address of benchmark account `index` of `seed`.
pub fn bench_address(seed: u64, index: u64) -> Address {
    let key = bench_key(seed, index);
    // `bench_key` only returns keys the signer accepts.
    PrivateKeySigner::from_bytes(&key)
        .map(|s| s.address())
        .unwrap_or_default()
}

/// Derives `count` addresses of `seed` on every core, calling `progress` with the number
/// done now and then.
pub fn derive_addresses(seed: u64, count: u64, progress: &(dyn Fn(u64) + Sync)) -> Vec<Address> {
    const REPORT_EVERY: u64 = 16_384;
    let done = std::sync::atomic::AtomicU64::new(0);
    (0..count)
        .into_par_iter()
        .map(|i| {
            if i % REPORT_EVERY == REPORT_EVERY - 1 {
                let n = done.fetch_add(REPORT_EVERY, std::sync::atomic::Ordering::Relaxed);
                progress(n + REPORT_EVERY);
            }
            bench_address(seed, i)
        })
        .collect()
}

/// Writes the addresses file (to a temporary name, synced, then renamed).
pub fn write_addresses(path: &Path, seed: u64, addresses: &[Address]) -> Result<(), GenesisError> {
    let io = |source| GenesisError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut bytes = Vec::with_capacity(HEADER_LEN + addresses.len() * 20 + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&seed.to_le_bytes());
    bytes.extend_from_slice(&(addresses.len() as u64).to_le_bytes());
    for a in addresses {
        bytes.extend_from_slice(a.as_slice());
    }
    let digest = blake3::hash(&bytes);
    bytes.extend_from_slice(digest.as_bytes());
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(&bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}

/// The addresses file's own checksum (its last 32 bytes), after checking its header and
/// length against the chain spec: what a restart compares instead of reading every address.
pub fn addresses_checksum(bench: &BenchAccounts) -> Result<[u8; 32], GenesisError> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let path = bench.file.display().to_string();
    let io = |source| GenesisError::Io {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::File::open(&bench.file).map_err(io)?;
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header).map_err(io)?;
    let expected_len = (HEADER_LEN + 32) as u64 + bench.count * 20;
    let len = file.metadata().map_err(io)?.len();
    let seed = u64::from_le_bytes(header[12..20].try_into().unwrap_or_default());
    let count = u64::from_le_bytes(header[20..28].try_into().unwrap_or_default());
    if &header[..8] != MAGIC || seed != bench.seed || count != bench.count || len != expected_len {
        return Err(GenesisError::Invalid {
            path,
            message: format!(
                "does not hold the chain spec's {} accounts of seed {}",
                bench.count, bench.seed
            ),
        });
    }
    let mut digest = [0u8; 32];
    file.seek(SeekFrom::End(-32)).map_err(io)?;
    file.read_exact(&mut digest).map_err(io)?;
    Ok(digest)
}

/// Reads and checks the addresses file a chain spec names.
pub fn read_addresses(bench: &BenchAccounts) -> Result<Vec<Address>, GenesisError> {
    let path = bench.file.display().to_string();
    let bytes = std::fs::read(&bench.file).map_err(|source| GenesisError::Io {
        path: path.clone(),
        source,
    })?;
    let invalid = |message: String| GenesisError::Invalid {
        path: path.clone(),
        message,
    };
    if bytes.len() < HEADER_LEN + 32 || &bytes[..8] != MAGIC {
        return Err(invalid(
            "not a Gigas addresses file; build one with `gigas-sequencer genesis`".into(),
        ));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or([0; 4]));
    if version != VERSION {
        return Err(invalid(format!("version {version}, expected {VERSION}")));
    }
    let (seed, count) = (word(12), word(20));
    if seed != bench.seed || count != bench.count {
        return Err(invalid(format!(
            "holds {count} accounts of seed {seed}, the chain spec says {} of seed {}",
            bench.count, bench.seed
        )));
    }
    let body = HEADER_LEN + count as usize * 20;
    if bytes.len() != body + 32 {
        return Err(invalid(format!(
            "{} bytes, expected {} for {count} accounts (truncated?)",
            bytes.len(),
            body + 32
        )));
    }
    if blake3::hash(&bytes[..body]).as_bytes() != &bytes[body..] {
        return Err(invalid("checksum mismatch: the file is corrupt".into()));
    }
    Ok(bytes[HEADER_LEN..body]
        .chunks_exact(20)
        .map(Address::from_slice)
        .collect())
}

/// Builds a benchmark chain in `dir`: `chain.json` (the dev chain's settings and dev
/// accounts, plus `count` benchmark accounts of `seed` with `balance` each) and the
/// addresses file it names.
pub fn build_bench_chain(
    dir: &Path,
    count: u64,
    seed: u64,
    balance: U256,
    block_time_ms: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> eyre::Result<std::path::PathBuf> {
    use eyre::WrapErr;
    std::fs::create_dir_all(dir).wrap_err_with(|| format!("creating {}", dir.display()))?;
    let file_name = format!("accounts-{count}-{seed}.bin");
    let addresses = derive_addresses(seed, count, progress);
    write_addresses(&dir.join(&file_name), seed, &addresses)?;
    let mut config = ChainConfig::dev(block_time_ms)?;
    config.bench_accounts = Some(BenchAccounts {
        count,
        seed,
        balance,
        file: file_name.into(),
    });
    let spec = dir.join("chain.json");
    let json = serde_json::to_string_pretty(&config)?;
    std::fs::write(&spec, json).wrap_err_with(|| format!("writing {}", spec.display()))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_file_round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let spec = build_bench_chain(dir.path(), 100, 7, U256::from(5u64), 250, &|_| {}).unwrap();
        let config = ChainConfig::load(&spec).unwrap();
        let bench = config.bench_accounts.clone().unwrap();
        let addresses = read_addresses(&bench).unwrap();
        assert_eq!(addresses.len(), 100);
        assert_eq!(addresses[42], bench_address(7, 42));
        // The key of account 42 signs for its address.
        let signer = PrivateKeySigner::from_bytes(&bench_key(7, 42)).unwrap();
        assert_eq!(signer.address(), addresses[42]);
        // Genesis holds the dev accounts and every benchmark account.
        let writes = config.genesis_writes().unwrap();
        assert_eq!(writes.len(), 10 + 100);

        let mut bytes = std::fs::read(&bench.file).unwrap();
        bytes[HEADER_LEN + 5] ^= 1;
        std::fs::write(&bench.file, &bytes).unwrap();
        let err = read_addresses(&bench).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
        let wrong = BenchAccounts {
            count: 99,
            ..bench.clone()
        };
        let err = read_addresses(&wrong).unwrap_err().to_string();
        assert!(err.contains("the chain spec says 99"), "{err}");
    }
}

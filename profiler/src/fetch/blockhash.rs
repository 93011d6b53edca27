//! The BLOCKHASH numbers a block asks for, found by replaying it on a recording database.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use alloy_primitives::{keccak256, Address, B256, U256};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::primitives::AddressMap;
use gigas_evm::revm::state::{Account, AccountInfo, Bytecode};
use gigas_evm::revm::{Database, DatabaseCommit};
use gigas_evm::{execute_block, PlainEvm, PreparedBlock};
use gigas_primitives::ChainSpec;

use super::client::Client;
use super::{FetchError, FetchSummary};

/// A database that answers BLOCKHASH from `known` (a placeholder for the rest) and records
/// every number asked for.
struct RecordingDb<'a> {
    inner: CacheDB<EmptyDB>,
    known: &'a BTreeMap<u64, B256>,
    asked: BTreeSet<u64>,
}

impl Database for RecordingDb<'_> {
    type Error = Infallible;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Self::Error> {
        self.inner.basic(address)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Self::Error> {
        self.inner.code_by_hash(code_hash)
    }

    fn storage(&mut self, address: Address, index: U256) -> Result<U256, Self::Error> {
        self.inner.storage(address, index)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, Self::Error> {
        self.asked.insert(number);
        Ok(self
            .known
            .get(&number)
            .copied()
            .unwrap_or_else(|| keccak256(number.to_be_bytes())))
    }
}

impl DatabaseCommit for RecordingDb<'_> {
    fn commit(&mut self, changes: AddressMap<Account>) {
        self.inner.commit(changes)
    }
}

/// The BLOCKHASH numbers one replay of `block` asks for, given the hashes in `known`.
fn blockhash_numbers(
    block: &PreparedBlock,
    db: &CacheDB<EmptyDB>,
    known: &BTreeMap<u64, B256>,
) -> Result<BTreeSet<u64>, String> {
    let mut evm = PlainEvm::new(
        RecordingDb {
            inner: db.clone(),
            known,
            asked: BTreeSet::new(),
        },
        block,
    );
    execute_block(&mut evm, block).map_err(|e| e.to_string())?;
    Ok(evm.into_db().asked)
}

/// The BLOCKHASH numbers of the block, replaying until no new one comes up; `Ok(Err(..))`
/// when the block cannot be replayed.
pub(super) async fn blockhash_set(
    client: &Client,
    fixture: &gigas_evm::BlockFixture,
    spec: &ChainSpec,
    hashes: &mut BTreeMap<u64, B256>,
    summary: &mut FetchSummary,
) -> Result<Result<BTreeSet<u64>, String>, FetchError> {
    let prepared = match PreparedBlock::from_fixture(fixture, spec) {
        Ok(prepared) => prepared,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let db = fixture.database();
    loop {
        let asked = match blockhash_numbers(&prepared, &db, hashes) {
            Ok(asked) => asked,
            Err(e) => return Ok(Err(e)),
        };
        let missing: Vec<u64> = asked
            .iter()
            .copied()
            .filter(|n| !hashes.contains_key(n))
            .collect();
        if missing.is_empty() {
            return Ok(Ok(asked));
        }
        for n in missing {
            let hash = client.block_hash(n).await?;
            summary.headers_fetched += 1;
            hashes.insert(n, hash);
        }
    }
}

//! The genesis state, streamed in chunks.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::time::Instant;

use alloy_primitives::{keccak256, Address, Bytes, B256, KECCAK256_EMPTY, U256};
use gigas_primitives::{AccountState, LatticeHash};
use gigas_statediff::ChainTip;
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::WriteFlags;
use tracing::info;

use crate::codec;
use crate::db::{write_meta_tip, StateDb};
use crate::error::StateDbError;
use crate::read::Dbs;
use crate::tables::{Table, META_SCHEMA_VERSION};
use crate::types::{GenesisBlock, GenesisEntry, GenesisOutcome, StoredHeader};
use gigas_triedb::rebuild;

type GenesisAccount = (Address, AccountState, Option<Bytes>);

/// The lattice elements of a chunk of the genesis, summed on rayon's pool.
fn chunk_lattice(accounts: &[GenesisAccount], slots: &[(Address, U256, U256)]) -> LatticeHash {
    use rayon::prelude::*;
    let sum = |mut a: LatticeHash, b: LatticeHash| {
        a.add(&b);
        a
    };
    let accounts = accounts
        .par_iter()
        .fold(LatticeHash::zero, |mut s, (address, state, _)| {
            s.add(&LatticeHash::account(address, state));
            s
        })
        .reduce(LatticeHash::zero, sum);
    let slots = slots
        .par_iter()
        .fold(LatticeHash::zero, |mut s, (address, slot, value)| {
            s.add_slot(address, slot, value);
            s
        })
        .reduce(LatticeHash::zero, sum);
    sum(accounts, slots)
}

impl StateDb {
    /// Writes a genesis state from a stream of entries, `chunk_entries` per write
    /// transaction (each chunk is sorted before it is written, and only the chunk is held in
    /// memory), then computes its state root from the hashed tables, storing the whole trie,
    /// and only then records the head in `Meta`, in a last transaction. A genesis interrupted
    /// before that leaves a database without a head, which the next `apply_genesis` clears
    /// and starts over. Refused when the database already has a head.
    pub fn apply_genesis<I, E>(
        &self,
        genesis: GenesisBlock<'_>,
        entries: I,
        chunk_entries: usize,
    ) -> Result<GenesisOutcome, StateDbError>
    where
        I: IntoIterator<Item = Result<GenesisEntry, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let _lock = self.lock_writer()?;
        let start = Instant::now();
        if let Some(tip) = self.head()? {
            return Err(StateDbError::AlreadyInitialized { head: tip.number });
        }
        let dbs = *self.dbs();
        let begin = || {
            self.env()
                .begin_rw_unsync()
                .map_err(StateDbError::mdbx("begin a genesis transaction"))
        };
        let mut txn = begin()?;
        clear_all(&dbs, &txn)?;
        let mut outcome = GenesisOutcome {
            state_root: B256::ZERO,
            accounts: 0,
            slots: 0,
            transactions: 0,
        };
        let chunk_entries = chunk_entries.max(1);
        let mut entries = entries.into_iter();
        let mut lattice = genesis.commitment.map(|_| LatticeHash::zero());
        loop {
            let mut accounts = Vec::new();
            let mut slots = Vec::new();
            for entry in entries.by_ref().take(chunk_entries) {
                match entry.map_err(|e| StateDbError::Genesis(Box::new(e)))? {
                    GenesisEntry::Account {
                        address,
                        nonce,
                        balance,
                        code,
                    } => {
                        let code = code.filter(|c| !c.is_empty());
                        let code_hash = code.as_ref().map_or(KECCAK256_EMPTY, keccak256);
                        let state = AccountState {
                            nonce,
                            balance,
                            code_hash,
                        };
                        accounts.push((address, state, code));
                    }
                    GenesisEntry::Slot {
                        address,
                        slot,
                        value,
                    } => {
                        if !value.is_zero() {
                            slots.push((address, slot, value));
                        }
                    }
                }
            }
            if accounts.is_empty() && slots.is_empty() {
                break;
            }
            outcome.accounts += accounts.len() as u64;
            outcome.slots += slots.len() as u64;
            if let Some(sum) = lattice.as_mut() {
                sum.add(&chunk_lattice(&accounts, &slots));
            }
            write_chunk(&dbs, &txn, accounts, slots)?;
            txn.commit()
                .map_err(StateDbError::mdbx("commit a genesis chunk"))?;
            outcome.transactions += 1;
            txn = begin()?;
        }
        if let (Some(signed), Some(sum)) = (genesis.commitment.map(|c| c.lattice), &lattice) {
            // Before the head: a refused genesis leaves a database the next attempt clears.
            if sum.checksum() != signed {
                return Err(StateDbError::Genesis(
                    format!(
                        "the genesis state's lattice hash is {}, the sequencer signed {signed}",
                        sum.checksum()
                    )
                    .into(),
                ));
            }
        }
        // The parts of the rebuild read the last commit: this transaction's clearing of an
        // interrupted genesis (when no entry came) must be in it.
        txn.commit()
            .map_err(StateDbError::mdbx("commit the genesis state"))?;
        let txn = begin()?;
        let root = rebuild::rebuild_root(self.env(), dbs.trie(), &txn, rebuild::SPLIT_SLOTS)?;
        if genesis.verify_root && root.root != genesis.header.state_root {
            return Err(StateDbError::StateRootMismatch {
                block: genesis.header.number,
                header: genesis.header.state_root,
                computed: root.root,
            });
        }
        outcome.state_root = root.root;
        let header = genesis.header;
        let tip = ChainTip {
            number: header.number,
            hash: genesis.hash,
            state_root: header.state_root,
        };
        let mut buf = Vec::new();
        codec::encode_header_row(
            &StoredHeader {
                header: header.clone(),
                hash: genesis.hash,
                signature: genesis.signature,
                state_root: Some(root.root),
                commitment: genesis.commitment,
            },
            &mut buf,
        );
        txn.put(
            dbs.get(Table::Headers),
            codec::block_key(header.number),
            &buf,
            WriteFlags::empty(),
        )
        .map_err(StateDbError::mdbx("write Headers"))?;
        txn.put(
            dbs.get(Table::HeaderNumbers),
            genesis.hash,
            codec::block_key(header.number),
            WriteFlags::empty(),
        )
        .map_err(StateDbError::mdbx("write HeaderNumbers"))?;
        write_meta_tip(
            &dbs,
            &txn,
            &tip,
            0,
            Some((header.number, root.root)),
            true,
            lattice.as_ref(),
        )?;
        txn.commit()
            .map_err(StateDbError::mdbx("commit the genesis"))?;
        outcome.transactions += 1;
        self.metrics()
            .last_root_block
            .set(i64::try_from(header.number).unwrap_or(i64::MAX));
        self.refresh_size_metrics();
        info!(
            accounts = outcome.accounts,
            slots = outcome.slots,
            root = %root.root,
            seconds = start.elapsed().as_secs_f64(),
            "genesis state written"
        );
        Ok(outcome)
    }
}

/// Empties every table but the layout version: what an interrupted genesis left.
pub(crate) fn clear_all(dbs: &Dbs, txn: &RwTxUnsync) -> Result<(), StateDbError> {
    for &table in Table::ALL {
        if table != Table::Meta {
            txn.clear_db(dbs.get(table))
                .map_err(StateDbError::mdbx("clear a table"))?;
        }
    }
    gigas_triedb::store::clear(dbs.trie(), txn, &gigas_triedb::tables::STATE_TABLES)?;
    let meta = dbs.get(Table::Meta);
    let mut names = Vec::new();
    {
        let mut c = txn
            .cursor(meta)
            .map_err(StateDbError::mdbx("open a Meta cursor"))?;
        let mut row: Option<(Cow<'_, [u8]>, ())> = c.first().map_err(StateDbError::read("Meta"))?;
        while let Some((name, ())) = row {
            if name.as_ref() != META_SCHEMA_VERSION {
                names.push(name.into_owned());
            }
            row = c.next().map_err(StateDbError::read("Meta"))?;
        }
    }
    for name in names {
        txn.del(meta, &name, None)
            .map_err(StateDbError::mdbx("clear Meta"))?;
    }
    Ok(())
}

fn write_chunk(
    dbs: &Dbs,
    txn: &RwTxUnsync,
    accounts: Vec<GenesisAccount>,
    slots: Vec<(Address, U256, U256)>,
) -> Result<(), StateDbError> {
    let mut buf = Vec::with_capacity(128);
    let codes = dbs.get(Table::Bytecodes);
    for (_, state, code) in &accounts {
        if let Some(code) = code {
            txn.put(codes, state.code_hash, code, WriteFlags::empty())
                .map_err(StateDbError::mdbx("write Bytecodes"))?;
        }
    }
    let mut hashed: Vec<(B256, AccountState)> = accounts
        .iter()
        .map(|(address, state, _)| (keccak256(address), *state))
        .collect();
    drop(accounts);
    hashed.sort_unstable_by_key(|a| a.0);
    let trie = dbs.trie();
    gigas_triedb::rows::put_accounts(trie, txn, &hashed, &mut buf)?;
    drop(hashed);

    let mut hashed: Vec<(B256, B256, U256)> = slots
        .iter()
        .map(|(a, s, v)| (keccak256(a), keccak256(s.to_be_bytes::<32>()), *v))
        .collect();
    drop(slots);
    hashed.sort_unstable_by_key(|s| (s.0, s.1));
    Ok(gigas_triedb::rows::put_slots(
        trie,
        txn,
        hashed.into_iter(),
        &mut buf,
    )?)
}

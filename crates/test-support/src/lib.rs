//! What Gigas's tests share, so that no test file defines it again: where the shared data is,
//! the mainnet fixtures ready to execute, one definition of "the same state" (ChangeSet bytes,
//! with a readable first difference), and revm's own account of a block's changes to hold
//! [`gigas_evm::BlockChanges`] to.
//!
//! Owns nothing a binary uses: it is a dev-dependency only (`publish = false`). Must not
//! skip: a missing data directory is a panic naming the path, never a passing test.

#![warn(missing_docs)]

use std::path::PathBuf;

use alloy_primitives::Bytes;
use gigas_evm::revm::database::states::bundle_state::BundleRetention;
use gigas_evm::revm::database::{CacheDB, EmptyDB, State};
use gigas_evm::{execute_block, BlockFixture, BlockOutcome, PlainEvm, PreparedBlock};
use gigas_primitives::{AccountState, ChainSpec, ChangeSet, ChangeSetBuilder};

/// `shared/data/<rest>` beside the checkout. Panics with a clear message when absent: tests
/// must never pass by skipping.
pub fn shared_data(rest: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(rest);
    assert!(
        dir.exists(),
        "shared data missing: expected {} (clone the project with shared/ beside it)",
        dir.display()
    );
    dir
}

/// A binary of this workspace (`gigas-sequencer`, `gigas-fullnode`, ...) as the build that made
/// the running test made it: `target/<profile>/NAME`, beside the test's `deps/` directory.
///
/// A test can name only its own package's binaries (`CARGO_BIN_EXE_*`); `cargo test
/// --workspace` builds every package's binaries before any test runs, so the others are there
/// too. Tests never run `cargo build` themselves: `-p` resolves features differently from the
/// workspace build and would rebuild for minutes. Panics, naming the command that builds it,
/// when it is absent (a test run of one package alone).
pub fn workspace_binary(name: &str) -> PathBuf {
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    let exe = std::env::current_exe().expect("the running test's own path");
    // target/<profile>/deps/<test>: the binary is one or two levels up (two for a test run
    // through a `deps` directory, one for a binary's own unit tests).
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(&file))
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no {file} in {candidates:?}: the workspace's test command builds it \
                 (`cargo test --workspace --release`, as scripts/test.sh runs it); a test run \
                 of one package alone needs `cargo build --release --workspace --bins` first"
            )
        })
}

/// `shared/data/mainnet`: the 50 mainnet blocks with their pre-state.
pub fn mainnet_dir() -> PathBuf {
    shared_data("mainnet")
}

/// Every shipped mainnet block, loaded and prepared on mainnet's chain spec, in block order.
pub fn mainnet_blocks() -> Vec<(BlockFixture, PreparedBlock)> {
    let fixtures = gigas_evm::load_fixtures_dir(mainnet_dir())
        .unwrap_or_else(|e| panic!("the mainnet fixtures do not load: {e}"));
    let chain = ChainSpec::mainnet();
    fixtures
        .into_iter()
        .map(|fixture| {
            let block = PreparedBlock::from_fixture(&fixture, &chain)
                .unwrap_or_else(|e| panic!("block {} does not prepare: {e}", fixture.number()));
            (fixture, block)
        })
        .collect()
}

/// Panics unless `actual` and `expected` are the same ChangeSet, byte for byte, naming the
/// first account, slot or bytecode that differs.
#[track_caller]
pub fn assert_same_changes(what: &str, actual: &ChangeSet, expected: &ChangeSet) {
    if actual.encode() == expected.encode() {
        return;
    }
    let first = |a: Vec<String>, e: Vec<String>| {
        a.iter()
            .zip(&e)
            .find(|(a, e)| a != e)
            .map(|(a, e)| format!("first difference: {a} instead of {e}"))
            .unwrap_or_else(|| format!("{} entries instead of {}", a.len(), e.len()))
    };
    let accounts = |c: &ChangeSet| c.accounts().iter().map(|x| format!("{x:?}")).collect();
    let slots = |c: &ChangeSet| c.storage().iter().map(|x| format!("{x:?}")).collect();
    let codes = |c: &ChangeSet| c.bytecodes().iter().map(|(h, _)| format!("{h}")).collect();
    let detail = if actual.accounts() != expected.accounts() {
        format!("accounts: {}", first(accounts(actual), accounts(expected)))
    } else if actual.storage() != expected.storage() {
        format!("slots: {}", first(slots(actual), slots(expected)))
    } else {
        format!("bytecodes: {}", first(codes(actual), codes(expected)))
    };
    panic!("{what}: the ChangeSets differ; {detail}");
}

/// Executes `block` sequentially over `fixture`'s pre-state and returns the outcome (whose
/// ChangeSet comes from [`gigas_evm::BlockChanges`]) and, independently, the ChangeSet that
/// revm's own `State` database derives from the same execution (its bundle: accounts with
/// their state before and after, slots, destroyed flags, EIP-161 deletions).
pub fn execute_with_reference(
    fixture: &BlockFixture,
    block: &PreparedBlock,
) -> (BlockOutcome, ChangeSet) {
    let state: State<CacheDB<EmptyDB>> = State::builder()
        .with_database(fixture.database())
        .with_bundle_update()
        .build();
    let mut evm = PlainEvm::new(state, block);
    let outcome = execute_block(&mut evm, block)
        .unwrap_or_else(|e| panic!("block {} does not execute: {e}", block.number));
    let mut state = evm.into_db();
    state.merge_transitions(BundleRetention::PlainState);
    let bundle = state.take_bundle();
    let mut builder = ChangeSetBuilder::new();
    for (address, account) in &bundle.state {
        let wiped = account.status.was_destroyed() && account.original_info.is_some();
        let key = |i: &gigas_evm::revm::state::AccountInfo| (i.nonce, i.balance, i.code_hash);
        match &account.info {
            None => {
                if account.original_info.is_some() {
                    builder.destroyed(*address);
                }
                continue;
            }
            Some(info) => {
                if wiped || account.original_info.as_ref().map(key) != Some(key(info)) {
                    builder.account(
                        *address,
                        AccountState {
                            nonce: info.nonce,
                            balance: info.balance,
                            code_hash: info.code_hash,
                        },
                        wiped,
                    );
                }
                let before = account
                    .original_info
                    .as_ref()
                    .map_or(gigas_evm::revm::primitives::KECCAK_EMPTY, |o| o.code_hash);
                if info.code_hash != before
                    && info.code_hash != gigas_evm::revm::primitives::KECCAK_EMPTY
                {
                    let code = bundle
                        .contracts
                        .get(&info.code_hash)
                        .unwrap_or_else(|| panic!("revm's bundle lacks code {}", info.code_hash));
                    builder.bytecode(Bytes::copy_from_slice(code.original_byte_slice()));
                }
            }
        }
        for (slot, value) in &account.storage {
            let changed = if account.status.was_destroyed() {
                !value.present_value.is_zero()
            } else {
                value.present_value != value.previous_or_original_value
            };
            if changed {
                builder.slot(*address, *slot, value.present_value);
            }
        }
    }
    (outcome, builder.build())
}

/// Panics unless `db` holds what `changes` says the block left: every changed account's
/// nonce, balance and code hash (a destroyed one absent or empty), every changed slot's value
/// and every new bytecode. This is how a test checks an executor's *committed* state against
/// the ChangeSet it reported.
#[track_caller]
pub fn assert_holds<D>(what: &str, db: &D, changes: &ChangeSet)
where
    D: gigas_evm::revm::database_interface::DatabaseRef,
    D::Error: std::fmt::Debug,
{
    for (address, change) in changes.accounts() {
        let info = db
            .basic_ref(*address)
            .unwrap_or_else(|e| panic!("{what}: reading {address}: {e:?}"));
        match (&change.state, info) {
            (None, None) => {}
            (None, Some(info)) => assert!(
                info.is_empty(),
                "{what}: {address} was destroyed but holds {info:?}"
            ),
            (Some(state), info) => {
                let info = info.unwrap_or_else(|| panic!("{what}: {address} is missing"));
                assert_eq!(
                    (info.nonce, info.balance, info.code_hash),
                    (state.nonce, state.balance, state.code_hash),
                    "{what}: account {address}"
                );
            }
        }
    }
    for (address, slot, value) in changes.storage() {
        let held = db
            .storage_ref(*address, *slot)
            .unwrap_or_else(|e| panic!("{what}: reading {address} slot {slot}: {e:?}"));
        assert_eq!(held, *value, "{what}: {address} slot {slot}");
    }
    for (hash, code) in changes.bytecodes() {
        let held = db
            .code_by_hash_ref(*hash)
            .unwrap_or_else(|e| panic!("{what}: reading code {hash}: {e:?}"));
        assert_eq!(held.original_byte_slice(), &code[..], "{what}: code {hash}");
    }
}

/// Signs `tx` with `signer` and returns its EIP-2718 bytes, as `eth_sendRawTransaction` takes
/// them.
pub fn sign_raw<T>(signer: &alloy_signer_local::PrivateKeySigner, mut tx: T) -> Bytes
where
    T: alloy_consensus::SignableTransaction<alloy_primitives::Signature>,
    alloy_consensus::TxEnvelope: From<alloy_consensus::Signed<T>>,
{
    use alloy_eips::eip2718::Encodable2718;
    use alloy_network::TxSignerSync;
    let sig = signer
        .sign_transaction_sync(&mut tx)
        .expect("a local key signs");
    alloy_consensus::TxEnvelope::from(tx.into_signed(sig))
        .encoded_2718()
        .into()
}

/// A signed 1 wei EIP-1559 transfer on the dev chain (id 1337) from `signer` at `nonce` to
/// 0x7777…77: 21,000 gas, fee cap 100 gwei, tip 1 gwei.
pub fn dev_transfer(signer: &alloy_signer_local::PrivateKeySigner, nonce: u64) -> Bytes {
    const GWEI: u128 = 1_000_000_000;
    sign_raw(
        signer,
        alloy_consensus::TxEip1559 {
            chain_id: 1337,
            nonce,
            gas_limit: 21_000,
            max_fee_per_gas: 100 * GWEI,
            max_priority_fee_per_gas: GWEI,
            to: alloy_primitives::TxKind::Call(alloy_primitives::Address::repeat_byte(0x77)),
            value: alloy_primitives::U256::from(1),
            ..alloy_consensus::TxEip1559::default()
        },
    )
}

/// Creation code that deploys `runtime` (at most 255 bytes): CODECOPY of the bytes after this
/// 9-byte prefix, then RETURN.
pub fn init_code(runtime: &[u8]) -> Vec<u8> {
    let len = u8::try_from(runtime.len()).expect("a runtime of at most 255 bytes");
    let mut code = vec![0x60, len, 0x80, 0x60, 0x09, 0x5f, 0x39, 0x5f, 0xf3];
    code.extend_from_slice(runtime);
    code
}

/// A xorshift64 generator: reproducible draws from a seed for tests that pick kill points,
/// keys or values at random (a failure prints its seed, and the seed gives it back). The
/// seed must not be zero.
#[derive(Debug, Clone)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next draw.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

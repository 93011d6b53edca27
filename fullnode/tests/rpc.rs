//! The full node's JSON-RPC over a real state database: a genesis and a few blocks written with
//! the real writer, the real server on 127.0.0.1, and alloy's HTTP provider calling every
//! method. Proofs are checked with alloy-trie's verifier against `latest`'s `stateRoot`, and
//! that root against one alloy-trie computes from the test's own model of the state.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use alloy_consensus::{Header, TxEip1559};
use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{keccak256, Address, Bytes, TxKind, B256, KECCAK256_EMPTY, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_rpc_types_eth::{SyncStatus, TransactionRequest};
use alloy_trie::{Nibbles, TrieAccount};
use gigas_chain::{dev_accounts, dev_signer, ChainConfig};
use gigas_fullnode::rpc::FullNodeBackend;
use gigas_fullnode::status::SyncState;
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use gigas_rpc::{RpcConfig, RpcServer, SubscriptionHub};
use gigas_statedb::{
    BlockToApply, GenesisBlock, GenesisEntry, StateDb, StateDbOptions, WriterOptions,
};

const SEQUENCER_URL: &str = "http://sequencer.example:8545";

/// Runtime code that returns storage slot 0: SLOAD(0), MSTORE(0), RETURN(0, 32).
const RETURNS_SLOT_0: [u8; 8] = [0x5f, 0x54, 0x5f, 0x52, 0x60, 0x20, 0x5f, 0xf3];

fn contract() -> Address {
    Address::repeat_byte(0xc0)
}

fn eth(n: u64) -> U256 {
    U256::from(n) * U256::from(10u64).pow(U256::from(18))
}

/// The state as the test wrote it, to compute the state root independently.
#[derive(Default, Clone)]
struct Model {
    accounts: BTreeMap<Address, AccountState>,
    storage: BTreeMap<Address, BTreeMap<U256, U256>>,
}

impl Model {
    fn apply(&mut self, changes: &ChangeSet) {
        for (address, change) in changes.accounts() {
            match change.state {
                Some(state) => {
                    self.accounts.insert(*address, state);
                }
                None => {
                    self.accounts.remove(address);
                }
            }
        }
        for (address, slot, value) in changes.storage() {
            let slots = self.storage.entry(*address).or_default();
            if value.is_zero() {
                slots.remove(slot);
            } else {
                slots.insert(*slot, *value);
            }
        }
    }

    fn storage_root(&self, address: &Address) -> B256 {
        alloy_trie::root::storage_root_unhashed(
            self.storage
                .get(address)
                .into_iter()
                .flatten()
                .map(|(s, v)| (B256::from(*s), *v)),
        )
    }

    fn root(&self) -> B256 {
        alloy_trie::root::state_root_unhashed(self.accounts.iter().map(|(a, s)| {
            (
                *a,
                TrieAccount::new(s.nonce, s.balance, self.storage_root(a), s.code_hash),
            )
        }))
    }
}

fn header(parent: B256, number: u64, chain: &ChainConfig) -> Header {
    Header {
        parent_hash: parent,
        number,
        gas_limit: chain.block_gas_limit,
        gas_used: 21_000 * number,
        // Even blocks hold no transactions (the empty root), odd ones do.
        transactions_root: if number.is_multiple_of(2) {
            alloy_trie::EMPTY_ROOT_HASH
        } else {
            keccak256(number.to_be_bytes())
        },
        timestamp: 1_700_000_000 + number,
        base_fee_per_gas: Some(1_000_000_000 - number * 1_000),
        mix_hash: B256::with_last_byte(number as u8),
        beneficiary: Address::repeat_byte(0xbe),
        // Prague headers, as the sequencer's.
        withdrawals_root: Some(alloy_trie::EMPTY_ROOT_HASH),
        blob_gas_used: Some(0),
        excess_blob_gas: Some(0),
        parent_beacon_block_root: Some(B256::ZERO),
        requests_hash: Some(alloy_eips::eip7685::EMPTY_REQUESTS_HASH),
        // The sequencer's chained state checksum goes here; any value does for the RPC.
        state_root: B256::repeat_byte(0x5c ^ number as u8),
        ..Header::default()
    }
}

struct Chain {
    db: Arc<StateDb>,
    model: Model,
    headers: Vec<(Header, B256)>,
    _dir: tempfile::TempDir,
}

impl Chain {
    /// A database with the dev accounts and the contract at genesis.
    fn genesis(chain: &ChainConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(
            dir.path(),
            StateDbOptions {
                max_size_bytes: 4 << 30,
                growth_step_bytes: 16 << 20,
                ..StateDbOptions::default()
            },
        )
        .unwrap();
        let mut model = Model::default();
        let mut entries = Vec::new();
        for account in dev_accounts().unwrap() {
            entries.push(GenesisEntry::Account {
                address: account.address,
                nonce: 0,
                balance: eth(10_000),
                code: None,
            });
            model.accounts.insert(
                account.address,
                AccountState {
                    nonce: 0,
                    balance: eth(10_000),
                    code_hash: KECCAK256_EMPTY,
                },
            );
        }
        let code = Bytes::from_static(&RETURNS_SLOT_0);
        entries.push(GenesisEntry::Account {
            address: contract(),
            nonce: 1,
            balance: U256::ZERO,
            code: Some(code.clone()),
        });
        model.accounts.insert(
            contract(),
            AccountState {
                nonce: 1,
                balance: U256::ZERO,
                code_hash: keccak256(&code),
            },
        );
        for (slot, value) in [(0u64, 42u64), (1, 7), (3, 0x1234)] {
            entries.push(GenesisEntry::Slot {
                address: contract(),
                slot: U256::from(slot),
                value: U256::from(value),
            });
            model
                .storage
                .entry(contract())
                .or_default()
                .insert(U256::from(slot), U256::from(value));
        }
        // Headers carry the true state root, as the sequencer signs them: the writer checks
        // its own against it.
        let h0 = Header {
            state_root: model.root(),
            ..header(B256::ZERO, 0, chain)
        };
        let hash0 = h0.hash_slow();
        let outcome = db
            .apply_genesis(
                GenesisBlock {
                    header: &h0,
                    hash: hash0,
                    signature: None,
                    commitment: None,
                    verify_root: true,
                },
                entries.into_iter().map(Ok::<_, std::convert::Infallible>),
                1000,
            )
            .unwrap();
        assert_eq!(outcome.state_root, model.root(), "the genesis root");
        Self {
            db: Arc::new(db),
            model,
            headers: vec![(h0, hash0)],
            _dir: dir,
        }
    }

    /// Applies and commits the next block with `changes`; returns its number and hash.
    fn block(&mut self, chain: &ChainConfig, changes: ChangeSet) -> (u64, B256) {
        let (parent, parent_hash) = self.headers.last().cloned().unwrap();
        let mut after = self.model.clone();
        after.apply(&changes);
        let h = Header {
            state_root: after.root(),
            ..header(parent_hash, parent.number + 1, chain)
        };
        let hash = h.hash_slow();
        let mut writer = self.db.writer(WriterOptions::default()).unwrap();
        let root = writer
            .apply(BlockToApply {
                header: &h,
                hash,
                signature: None,
                changes: &changes,
                hashed: None,
                new_keys: &[],
                lattice: None,
                commitment: None,
            })
            .unwrap()
            .expect("a root every block");
        writer.commit().unwrap();
        self.model.apply(&changes);
        assert_eq!(root.root, self.model.root(), "block {}'s root", h.number);
        self.headers.push((h.clone(), hash));
        (h.number, hash)
    }
}

fn transfer(model: &Model, from: Address, to: Address, value: U256) -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    let sender = model.accounts[&from];
    b.account(
        from,
        AccountState {
            nonce: sender.nonce + 1,
            balance: sender.balance - value - U256::from(21_000_000_000_000u64),
            code_hash: KECCAK256_EMPTY,
        },
        false,
    );
    let receiver = model.accounts.get(&to).copied().unwrap_or(AccountState {
        nonce: 0,
        balance: U256::ZERO,
        code_hash: KECCAK256_EMPTY,
    });
    b.account(
        to,
        AccountState {
            balance: receiver.balance + value,
            ..receiver
        },
        false,
    );
    b.build()
}

fn rlp_account(model: &Model, address: &Address) -> Vec<u8> {
    let s = model.accounts[address];
    alloy_rlp::encode(TrieAccount::new(
        s.nonce,
        s.balance,
        model.storage_root(address),
        s.code_hash,
    ))
}

fn error_text<T: std::fmt::Debug, E: std::fmt::Display>(result: Result<T, E>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_answers_from_the_head_state() {
    let chain = ChainConfig::dev(250).unwrap();
    let dev = dev_accounts().unwrap();
    let (alice, bob) = (dev[0].address, dev[1].address);
    let carol = Address::repeat_byte(0xca);
    let mut c = Chain::genesis(&chain);

    // Block 1: alice pays carol (a new account). Block 2: the contract's storage changes
    // (slot 0 rewritten, slot 1 deleted, slot 5 new). Block 3: bob pays carol.
    c.block(&chain, transfer(&c.model, alice, carol, eth(1)));
    let mut b = ChangeSetBuilder::new();
    b.slot(contract(), U256::ZERO, U256::from(99));
    b.slot(contract(), U256::from(1), U256::ZERO);
    b.slot(contract(), U256::from(5), U256::from(3));
    let (_, hash2) = c.block(&chain, b.build());
    let (n3, hash3) = c.block(&chain, transfer(&c.model, bob, carol, eth(2)));
    assert_eq!(n3, 3);

    let sync = Arc::new(SyncState::new(3, hash3));
    let backend = Arc::new(FullNodeBackend::new(
        c.db.clone(),
        &chain,
        SEQUENCER_URL.into(),
        sync.clone(),
        SubscriptionHub::default(),
    ));
    let handle = RpcServer::start(
        RpcConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..RpcConfig::default()
        },
        backend.clone(),
    )
    .await
    .unwrap();
    let provider = ProviderBuilder::new().connect_http(handle.http_url().parse().unwrap());

    // Chain and sync status.
    assert_eq!(provider.get_chain_id().await.unwrap(), chain.chain_id);
    assert_eq!(provider.get_block_number().await.unwrap(), 3);
    assert_eq!(provider.syncing().await.unwrap(), SyncStatus::None);
    sync.saw_sequencer_head(4);
    assert_eq!(
        provider.syncing().await.unwrap(),
        SyncStatus::None,
        "one block behind is not syncing"
    );
    sync.saw_sequencer_head(10);
    match provider.syncing().await.unwrap() {
        SyncStatus::Info(info) => {
            assert_eq!(info.starting_block, U256::from(3));
            assert_eq!(info.current_block, U256::from(3));
            assert_eq!(info.highest_block, U256::from(10));
        }
        other => panic!("expected syncing, got {other:?}"),
    }

    // Accounts, code, storage.
    let model = &c.model;
    assert_eq!(
        provider.get_balance(carol).await.unwrap(),
        model.accounts[&carol].balance
    );
    assert_eq!(provider.get_balance(carol).await.unwrap(), eth(3));
    assert_eq!(provider.get_transaction_count(alice).await.unwrap(), 1);
    assert_eq!(
        provider
            .get_transaction_count(alice)
            .pending()
            .await
            .unwrap(),
        1,
        "pending is latest: no pool"
    );
    assert_eq!(
        provider
            .get_balance(Address::repeat_byte(0x77))
            .await
            .unwrap(),
        U256::ZERO
    );
    assert_eq!(
        provider.get_code_at(contract()).await.unwrap(),
        Bytes::from_static(&RETURNS_SLOT_0)
    );
    assert_eq!(provider.get_code_at(alice).await.unwrap(), Bytes::new());
    assert_eq!(
        provider
            .get_storage_at(contract(), U256::ZERO)
            .await
            .unwrap(),
        U256::from(99)
    );
    assert_eq!(
        provider
            .get_storage_at(contract(), U256::from(1))
            .await
            .unwrap(),
        U256::ZERO
    );
    assert_eq!(
        provider
            .get_storage_at(contract(), U256::from(3))
            .block_id(BlockId::number(3))
            .await
            .unwrap(),
        U256::from(0x1234)
    );

    // Older state is refused, naming the sequencer; beyond the head is not found.
    let older = error_text(
        provider
            .get_balance(carol)
            .block_id(BlockId::number(2))
            .await,
    );
    assert!(
        older.contains("keeps the state of blocks 3..=3") && older.contains(SEQUENCER_URL),
        "{older}"
    );
    let beyond = error_text(
        provider
            .get_balance(carol)
            .block_id(BlockId::number(9))
            .await,
    );
    assert!(beyond.contains("header not found"), "{beyond}");

    // Headers as the sequencer signed them: keccak(rlp(header)) is the hash, and the
    // stateRoot field is the Ethereum state root on both nodes.
    let latest: alloy_rpc_types_eth::Header = provider
        .client()
        .request("eth_getHeaderByNumber", (BlockNumberOrTag::Latest,))
        .await
        .unwrap();
    assert_eq!(latest.number, 3);
    assert_eq!(latest.hash, hash3);
    assert_eq!(
        latest.inner.hash_slow(),
        hash3,
        "keccak(rlp(header)) == hash"
    );
    assert_eq!(latest.inner, c.headers[3].0);
    assert_eq!(latest.parent_hash, hash2);
    // gigas_getStateRoot: an alias of the header's stateRoot.
    let roots: gigas_rpc::StateRoots = provider
        .client()
        .request("gigas_getStateRoot", (BlockNumberOrTag::Latest,))
        .await
        .unwrap();
    assert_eq!(roots.hash, hash3);
    assert_eq!(roots.state_root, c.headers[3].0.state_root);
    assert_eq!(roots.state_root, model.root());
    assert_eq!(latest.state_root, model.root());
    // A block with transactions: the node holds no bodies, so it refuses instead of an
    // empty list, and says where the header and the transactions are.
    let with_txs = error_text(provider.get_block_by_number(BlockNumberOrTag::Latest).await);
    assert!(
        with_txs.contains("eth_getHeaderByNumber") && with_txs.contains(SEQUENCER_URL),
        "{with_txs}"
    );
    // A block without transactions is answered whole, found by hash at any depth.
    let by_hash = provider
        .get_block_by_hash(hash2)
        .await
        .unwrap()
        .expect("block 2 by hash");
    assert_eq!(by_hash.header.number, 2);
    assert_eq!(by_hash.header.inner.hash_slow(), hash2);
    assert!(by_hash.transactions.is_empty());
    let genesis = provider
        .get_block_by_number(BlockNumberOrTag::Earliest)
        .await
        .unwrap()
        .expect("genesis");
    assert_eq!(genesis.header.hash, c.headers[0].1);
    assert!(provider
        .get_block_by_number(BlockNumberOrTag::Number(4))
        .await
        .unwrap()
        .is_none());
    assert!(provider
        .get_block_by_hash(B256::repeat_byte(1))
        .await
        .unwrap()
        .is_none());
    let full = error_text(
        provider
            .get_block_by_number(BlockNumberOrTag::Latest)
            .full()
            .await,
    );
    assert!(full.contains(SEQUENCER_URL), "{full}");

    // Proofs, verified with alloy-trie against the header's stateRoot.
    let root = latest.state_root;
    assert_eq!(roots.state_root, root);
    let absent_slot = U256::from(0xdead);
    let keys: Vec<B256> = [U256::ZERO, U256::from(5), U256::from(3), absent_slot]
        .into_iter()
        .map(B256::from)
        .collect();
    let proof = provider.get_proof(contract(), keys.clone()).await.unwrap();
    assert_eq!(proof.address, contract());
    assert_eq!(proof.nonce, 1);
    assert_eq!(proof.storage_hash, model.storage_root(&contract()));
    alloy_trie::proof::verify_proof(
        root,
        Nibbles::unpack(keccak256(contract())),
        Some(rlp_account(model, &contract())),
        &proof.account_proof,
    )
    .expect("the contract's account proof verifies");
    assert_eq!(proof.storage_proof.len(), keys.len());
    for (asked, p) in keys.iter().zip(&proof.storage_proof) {
        assert_eq!(p.key.as_b256(), *asked, "keys in the order asked");
        let slot = U256::from_be_bytes(asked.0);
        let expected = model.storage[&contract()]
            .get(&slot)
            .copied()
            .unwrap_or_default();
        assert_eq!(p.value, expected, "slot {slot}");
        alloy_trie::proof::verify_proof(
            proof.storage_hash,
            Nibbles::unpack(keccak256(asked)),
            (!expected.is_zero()).then(|| alloy_rlp::encode(expected)),
            &p.proof,
        )
        .unwrap_or_else(|e| panic!("slot {slot}'s proof: {e}"));
    }
    // A wrong value does not verify (the verifier is not vacuous).
    assert!(alloy_trie::proof::verify_proof(
        proof.storage_hash,
        Nibbles::unpack(keccak256(keys[0])),
        Some(alloy_rlp::encode(U256::from(98))),
        &proof.storage_proof[0].proof,
    )
    .is_err());
    let nobody = Address::repeat_byte(0x42);
    let absent = provider.get_proof(nobody, vec![B256::ZERO]).await.unwrap();
    assert_eq!(absent.balance, U256::ZERO);
    assert_eq!(absent.storage_hash, alloy_trie::EMPTY_ROOT_HASH);
    alloy_trie::proof::verify_proof(
        root,
        Nibbles::unpack(keccak256(nobody)),
        None,
        &absent.account_proof,
    )
    .expect("the absent account's proof verifies");
    let carol_proof = provider.get_proof(carol, vec![]).await.unwrap();
    alloy_trie::proof::verify_proof(
        root,
        Nibbles::unpack(keccak256(carol)),
        Some(rlp_account(model, &carol)),
        &carol_proof.account_proof,
    )
    .expect("carol's account proof verifies");
    let old_proof = error_text(
        provider
            .get_proof(carol, vec![])
            .block_id(BlockId::number(1))
            .await,
    );
    assert!(old_proof.contains(SEQUENCER_URL), "{old_proof}");

    // Calls and estimates run revm over the head state.
    let out = provider
        .call(TransactionRequest {
            to: Some(TxKind::Call(contract())),
            ..TransactionRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(U256::from_be_slice(&out), U256::from(99));
    let gas = provider
        .estimate_gas(TransactionRequest {
            from: Some(alice),
            to: Some(TxKind::Call(bob)),
            value: Some(U256::from(1)),
            ..TransactionRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(gas, 21_000);
    let broke = error_text(
        provider
            .estimate_gas(TransactionRequest {
                from: Some(nobody),
                to: Some(TxKind::Call(bob)),
                value: Some(eth(1)),
                ..TransactionRequest::default()
            })
            .await,
    );
    assert!(broke.to_lowercase().contains("funds"), "{broke}");

    // Fees from the head header.
    let h3 = &c.headers[3].0;
    let next = chain.base_fee.next(
        h3.gas_used,
        h3.gas_limit,
        h3.base_fee_per_gas.unwrap_or_default(),
    );
    assert_eq!(
        provider.get_gas_price().await.unwrap(),
        u128::from(next) + 1
    );
    assert_eq!(provider.get_max_priority_fee_per_gas().await.unwrap(), 1);
    let history = provider
        .get_fee_history(2, BlockNumberOrTag::Latest, &[])
        .await
        .unwrap();
    assert_eq!(history.oldest_block, 2);
    assert_eq!(
        history.base_fee_per_gas,
        vec![
            u128::from(c.headers[2].0.base_fee_per_gas.unwrap_or_default()),
            u128::from(h3.base_fee_per_gas.unwrap_or_default()),
            u128::from(next)
        ]
    );
    assert_eq!(history.gas_used_ratio.len(), 2);
    let rewards = error_text(
        provider
            .get_fee_history(2, BlockNumberOrTag::Latest, &[50.0])
            .await,
    );
    assert!(rewards.contains(SEQUENCER_URL), "{rewards}");

    // Writes and history are refused, naming the sequencer.
    let raw = gigas_test_support::sign_raw(
        &dev_signer(0).unwrap(),
        TxEip1559 {
            chain_id: chain.chain_id,
            nonce: 1,
            gas_limit: 21_000,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1,
            to: TxKind::Call(bob),
            value: U256::from(1),
            ..TxEip1559::default()
        },
    );
    let refused = error_text(provider.send_raw_transaction(&raw).await);
    assert!(
        refused.contains("does not accept transactions")
            && refused.contains(&format!("send them to the sequencer at {SEQUENCER_URL}")),
        "{refused}"
    );
    let receipt = error_text(provider.get_transaction_receipt(keccak256(&raw)).await);
    assert!(receipt.contains(SEQUENCER_URL), "{receipt}");
    let logs = error_text(
        provider
            .get_logs(&alloy_rpc_types_eth::Filter::new().from_block(0))
            .await,
    );
    assert!(logs.contains(SEQUENCER_URL), "{logs}");

    // A new block: subscribers hear its header as signed, `latest` moves, and the previous
    // head's state is no longer served.
    let mut heads = backend.hub().subscribe_heads();
    let (n4, hash4) = c.block(&chain, transfer(&c.model, alice, bob, eth(1)));
    sync.set_applied(n4, hash4);
    backend.publish_heads(n4).unwrap();
    let head = heads.recv().await.unwrap();
    assert_eq!(head.number, 4);
    assert_eq!(head.hash, hash4);
    assert_eq!(head.inner, c.headers[4].0);
    assert_eq!(head.inner.hash_slow(), hash4);
    assert_eq!(provider.get_block_number().await.unwrap(), 4);
    assert_eq!(
        provider.get_transaction_count(alice).await.unwrap(),
        2,
        "the new head's state"
    );
    let previous = error_text(
        provider
            .get_transaction_count(alice)
            .block_id(BlockId::number(3))
            .await,
    );
    assert!(previous.contains("blocks 4..=4"), "{previous}");

    handle.stop();
}

/// `eth_getBlockByHash` finds a block at any depth (issue 29, finding 16): the database
/// indexes header hashes. Before, the node scanned back 1,024 headers from the head and
/// answered `null` for anything older.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_is_found_by_hash_at_any_depth() {
    let chain = ChainConfig::dev(250).unwrap();
    let c = Chain::genesis(&chain);
    // 1,100 empty blocks (even numbers only hold no transactions in `header`, so every block
    // here gets the empty root), in one durable group.
    let mut hashes = vec![c.headers[0].1];
    {
        let mut writer =
            c.db.writer(WriterOptions {
                root_every: 0,
                ..WriterOptions::default()
            })
            .unwrap();
        let mut parent = hashes[0];
        // Empty blocks: the state, and its root, stay the genesis'.
        let root = c.model.root();
        for number in 1..=1_100u64 {
            let h = Header {
                state_root: root,
                transactions_root: alloy_trie::EMPTY_ROOT_HASH,
                gas_used: 0,
                ..header(parent, number, &chain)
            };
            parent = h.hash_slow();
            writer
                .apply(BlockToApply {
                    header: &h,
                    hash: parent,
                    signature: None,
                    changes: &ChangeSet::default(),
                    hashed: None,
                    new_keys: &[],
                    lattice: None,
                    commitment: None,
                })
                .unwrap();
            hashes.push(parent);
        }
        writer.commit().unwrap();
    }
    let sync = Arc::new(SyncState::new(1_100, hashes[1_100]));
    let backend = Arc::new(FullNodeBackend::new(
        c.db.clone(),
        &chain,
        SEQUENCER_URL.into(),
        sync,
        SubscriptionHub::default(),
    ));
    let handle = RpcServer::start(
        RpcConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..RpcConfig::default()
        },
        backend,
    )
    .await
    .unwrap();
    let provider = ProviderBuilder::new().connect_http(handle.http_url().parse().unwrap());
    for number in [0u64, 5, 75, 1_099, 1_100] {
        let block = provider
            .get_block_by_hash(hashes[number as usize])
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("block {number} by hash, head 1,100: not found"));
        assert_eq!(block.header.number, number);
        assert_eq!(block.header.hash, hashes[number as usize]);
    }
    handle.stop();
}

/// Issue 66, item 9: `eth_getProof` never checked the request's deadline, and at an old
/// block it walks every path changed since. Under a deadline that has passed it must stop
/// with a timeout (a deadline far off lets the same proof through).
#[test]
fn a_proof_stops_at_the_request_deadline() {
    let chain = ChainConfig::dev(250).unwrap();
    let dev = dev_accounts().unwrap();
    let (alice, carol) = (dev[0].address, Address::repeat_byte(0xca));
    let mut c = Chain::genesis(&chain);
    c.block(&chain, transfer(&c.model, alice, carol, eth(1)));
    let (n, hash) = c.block(&chain, transfer(&c.model, alice, carol, eth(1)));
    let backend = FullNodeBackend::new(
        c.db.clone(),
        &chain,
        SEQUENCER_URL.into(),
        Arc::new(SyncState::new(n, hash)),
        SubscriptionHub::default(),
    );
    {
        let _deadline = gigas_rpc::deadline::RequestDeadline::enter(std::time::Duration::ZERO);
        match gigas_rpc::Backend::proof(&backend, carol, vec![U256::ZERO], n) {
            Err(gigas_rpc::RpcError::Timeout(reason)) => {
                assert!(reason.contains("eth_getProof"), "{reason}")
            }
            other => panic!("a proof past its deadline answered {other:?}"),
        }
    }
    let _deadline =
        gigas_rpc::deadline::RequestDeadline::enter(std::time::Duration::from_secs(600));
    gigas_rpc::Backend::proof(&backend, carol, vec![U256::ZERO], n)
        .expect("within its deadline the proof is answered");
}

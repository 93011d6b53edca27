//! SIGKILL of a loaded sequencer at random instants, then restart, again and again
//! (`GIGAS_KILL_POINTS`, 50 by default; `GIGAS_KILL_SEED` picks the instants).
//!
//! After every restart: no transaction that got a hash is lost (it is in a block or back in
//! the pool), no block that was ever served changed, and the chain continues from the same
//! head. At the end, with the node stopped, the stores are opened directly: every block's
//! stored ChangeSet chains to its header's state checksum, and Vilmo equals the genesis plus
//! every ChangeSet replayed into a fresh store, batch for batch (same Vilmo checksum).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, Bytes, TxKind, B256, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_rpc_types_eth::BlockNumberOrTag;
use alloy_signer_local::PrivateKeySigner;
use common::NodeProcess;
use gigas_chain::{dev_signer, ChainConfig};

/// A transaction that got a hash.
#[derive(Debug, Clone)]
struct Accepted {
    hash: B256,
    sender: Address,
    nonce: u64,
}

use gigas_test_support::XorShift as Rng;

fn transfer(signer: &PrivateKeySigner, nonce: u64, to: Address) -> Bytes {
    let tx = TxEip1559 {
        chain_id: 1337,
        nonce,
        gas_limit: 21_000,
        max_fee_per_gas: 100_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TxKind::Call(to),
        value: U256::from(1),
        access_list: Default::default(),
        input: Bytes::new(),
    };
    gigas_test_support::sign_raw(signer, tx)
}

/// Sends transfers from `signer` until `stop`, recording what was accepted.
async fn load(
    url: String,
    signer: PrivateKeySigner,
    accepted: Arc<Mutex<Vec<Accepted>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let provider = ProviderBuilder::new().connect_http(url.parse().unwrap());
    let Ok(mut nonce) = provider
        .get_transaction_count(signer.address())
        .pending()
        .await
    else {
        return;
    };
    let to = Address::repeat_byte(0x77);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let raw = transfer(&signer, nonce, to);
        match provider.send_raw_transaction(&raw).await {
            Ok(pending) => {
                accepted.lock().unwrap().push(Accepted {
                    hash: *pending.tx_hash(),
                    sender: signer.address(),
                    nonce,
                });
                nonce += 1;
            }
            // The node is gone (killed) or refused: stop this round.
            Err(_) => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_nothing() {
    let points: usize = std::env::var("GIGAS_KILL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let mut rng = Rng(std::env::var("GIGAS_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x9e3779b97f4a7c15));
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("node");
    let senders: Vec<PrivateKeySigner> = (0..4).map(|i| dev_signer(i).unwrap()).collect();
    let accepted = Arc::new(Mutex::new(Vec::<Accepted>::new()));
    // Accepted transactions not yet seen in a served block; one found in a block leaves the
    // set (a served block is durable, and the test checks that served blocks never change).
    let mut unconfirmed: Vec<Accepted> = Vec::new();
    let mut checked = 0usize;
    // Every block ever served: number -> (hash, state checksum).
    let mut served: BTreeMap<u64, (B256, B256)> = BTreeMap::new();
    let started = Instant::now();

    for point in 0..points {
        // Alternately the history's indexer every 2 blocks, durable every 200 ms (kills land
        // inside its batches and its syncs, and log segments go), and at its defaults (kills
        // leave up to 24 blocks only in the block log, which the restart indexes).
        let (index_batch, index_sync) = if point % 2 == 0 {
            ("2", "200ms")
        } else {
            ("24", "10s")
        };
        let mut node = NodeProcess::start(
            &datadir,
            &[
                "--block-time",
                "50ms",
                "--history.index-batch",
                index_batch,
                "--history.index-sync-period",
                index_sync,
            ],
        );
        let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
        let new = accepted.lock().unwrap()[checked..].to_vec();
        checked += new.len();
        check_after_restart(&provider, &served, &mut unconfirmed, new, point).await;

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks: Vec<_> = senders
            .iter()
            .map(|s| {
                tokio::spawn(load(
                    node.url.clone(),
                    s.clone(),
                    accepted.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        // Watch blocks while the load runs, then kill at a random instant.
        let kill_at = Instant::now() + Duration::from_millis(50 + rng.next_u64() % 700);
        while Instant::now() < kill_at {
            if let Ok(Some(block)) = provider.get_block_by_number(BlockNumberOrTag::Latest).await {
                let h = &block.header;
                let prev = served.insert(h.number, (h.hash, h.state_root));
                assert!(
                    prev.is_none() || prev == Some((h.hash, h.state_root)),
                    "block {} changed while running",
                    h.number
                );
            }
            tokio::time::sleep(Duration::from_millis(5 + rng.next_u64() % 20)).await;
        }
        node.kill();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
    }

    // A last start: every accepted transaction is eventually included, nonces contiguous.
    let node = NodeProcess::start(&datadir, &["--block-time", "50ms"]);
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    let accepted = accepted.lock().unwrap().clone();
    check_after_restart(
        &provider,
        &served,
        &mut unconfirmed,
        accepted[checked..].to_vec(),
        points,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    for tx in &unconfirmed {
        loop {
            if provider
                .get_transaction_receipt(tx.hash)
                .await
                .unwrap()
                .is_some()
            {
                break;
            }
            assert!(Instant::now() < deadline, "{} was never included", tx.hash);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut by_sender: HashMap<Address, Vec<u64>> = HashMap::new();
    for tx in &accepted {
        by_sender.entry(tx.sender).or_default().push(tx.nonce);
    }
    for (sender, mut nonces) in by_sender {
        // A send in flight at a kill may have been journaled without its hash reaching us, so
        // accepted nonces can skip; they can never repeat, and all are below the head's.
        let count = nonces.len();
        nonces.sort_unstable();
        nonces.dedup();
        assert_eq!(nonces.len(), count, "{sender}: a nonce was accepted twice");
        let head_nonce = provider.get_transaction_count(sender).await.unwrap();
        assert!(nonces.last().is_none_or(|n| *n < head_nonce));
    }
    let head = provider.get_block_number().await.unwrap();
    // The diff writer, restarted as often as the node, catches up with the chain.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let archived = reqwest::get(format!("{}/diffs/head", node.url))
            .await
            .ok()
            .map(|r| r.json::<serde_json::Value>());
        let archived = match archived {
            Some(json) => json.await.ok().and_then(|j| j["number"].as_u64()),
            None => None,
        };
        if archived.is_some_and(|n| n >= head) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the diff archive did not reach block {head}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(provider);
    drop(node);
    let checked = verify_stores(&datadir, head);
    let archived = verify_archive(&datadir);
    assert!(
        archived >= head,
        "diffs verified through {archived}, head {head}"
    );
    println!(
        "{points} kills in {:.0}s: {} transactions accepted, all included; {} blocks served and unchanged; head {head}; checksum chain and Vilmo replay checked over {checked} blocks; the diff archive verified by a follower through block {archived}",
        started.elapsed().as_secs_f64(),
        accepted.len(),
        served.len()
    );
}

async fn check_after_restart(
    provider: &impl Provider,
    served: &BTreeMap<u64, (B256, B256)>,
    unconfirmed: &mut Vec<Accepted>,
    accepted: Vec<Accepted>,
    point: usize,
) {
    let head = provider.get_block_number().await.unwrap();
    if let Some((&last, _)) = served.last_key_value() {
        assert!(
            head >= last,
            "restart {point}: head {head} is behind block {last}, which was served before the kill"
        );
    }
    for (&number, &(hash, root)) in served {
        let block = provider
            .get_block_by_number(number.into())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("restart {point}: served block {number} is gone"));
        assert_eq!(
            (block.header.hash, block.header.state_root),
            (hash, root),
            "restart {point}: block {number} changed"
        );
    }
    // Everything accepted since the last check joins the unconfirmed set; each must be in a
    // block or back in the pool.
    unconfirmed.extend(accepted);
    let mut still = Vec::new();
    for tx in unconfirmed.drain(..) {
        if provider
            .get_transaction_receipt(tx.hash)
            .await
            .unwrap()
            .is_some()
        {
            continue;
        }
        assert!(
            provider
                .get_transaction_by_hash(tx.hash)
                .await
                .unwrap()
                .is_some(),
            "restart {point}: accepted transaction {} (sender {}, nonce {}) is lost",
            tx.hash,
            tx.sender,
            tx.nonce
        );
        still.push(tx);
    }
    *unconfirmed = still;
}

/// Follows the archive's diff files on disk from genesis, as a full node would, checking each
/// block hash against the history; returns the last block verified.
fn verify_archive(datadir: &std::path::Path) -> u64 {
    let archive = gigas_statediff::archive::Archive::open(&datadir.join("archive")).unwrap();
    let kind = gigas_statediff::archive::FileKind::Diff;
    let history =
        gigas_history::History::open(&datadir.join("history"), Default::default()).unwrap();
    let mut follower = common::Follower::from_genesis(&archive.read(kind, 0).unwrap().unwrap());
    let mut number = 1;
    while let Some(bytes) = archive.read(kind, number).unwrap() {
        let hash = follower.apply(&bytes);
        assert_eq!(hash, history.sealed_header(number).unwrap().unwrap().hash);
        number += 1;
    }
    number - 1
}

/// Opens the stopped node's stores and checks every header's stateRoot (the root of a
/// replay's state from scratch, alloy-trie) and Vilmo against a replay.
fn verify_stores(datadir: &std::path::Path, head: u64) -> u64 {
    use gigas_primitives::state_keys::changeset_writes;
    use gigas_primitives::ChangeSet;
    let root_of = |store: &gigas_vilmo::Vilmo| {
        gigas_sequencer::state::scratch_state(store, |_| {})
            .unwrap()
            .root()
            .unwrap()
    };
    let history =
        gigas_history::History::open(&datadir.join("history"), Default::default()).unwrap();
    let vilmo = gigas_vilmo::Vilmo::open(datadir.join("state"), Default::default()).unwrap();
    let stored_head = history.head().unwrap().unwrap();
    assert!(stored_head >= head);
    let chain = ChainConfig::dev(50).unwrap();
    let genesis = chain.genesis_writes().unwrap();
    let g = history.sealed_header(0).unwrap().unwrap();
    let replay_dir = tempfile::tempdir().unwrap();
    let mut replay = gigas_vilmo::Vilmo::open(
        replay_dir.path(),
        gigas_vilmo::Options {
            durable: false,
            ..Default::default()
        },
    )
    .unwrap();
    let commit = |store: &mut gigas_vilmo::Vilmo,
                  writes: Vec<gigas_primitives::state_keys::Write>| {
        let mut batch = gigas_vilmo::Batch::new();
        for (k, v) in writes {
            match v {
                Some(v) => batch.put(&k, &v).unwrap(),
                None => batch.delete(&k).unwrap(),
            }
        }
        store.commit(batch).unwrap();
    };
    commit(&mut replay, genesis);
    assert_eq!(
        g.header.state_root,
        root_of(&replay),
        "the genesis stateRoot"
    );
    for number in 1..=stored_head {
        let header = history.sealed_header(number).unwrap().unwrap();
        let bytes = history.changeset(number).unwrap().unwrap();
        // The signature recovers to the sequencer.
        let signer = header
            .signature
            .recover_address_from_prehash(&header.hash)
            .unwrap();
        assert_eq!(signer, header.header.beneficiary);
        let changes = ChangeSet::decode(&bytes).unwrap();
        let writes = changeset_writes(&changes, &replay).unwrap();
        commit(&mut replay, writes);
        assert_eq!(
            header.header.state_root,
            root_of(&replay),
            "block {number}'s stateRoot is its state's root"
        );
    }
    assert_eq!(
        replay.last_commit(),
        vilmo.last_commit(),
        "Vilmo equals the genesis plus every ChangeSet, batch for batch"
    );
    stored_head
}

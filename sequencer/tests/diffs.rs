//! The state-diff archive of a real sequencer, read as a follower reads it: over HTTP with a
//! real client and over the WebSocket stream, verified block by block from the published
//! files and the chain spec alone.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use alloy_consensus::{TxEip1559, TxLegacy};
use alloy_primitives::{Address, TxKind, B256, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use common::{Follower, NodeProcess};
use futures::StreamExt;
use gigas_chain::dev_signer;
use gigas_statediff::{
    verify_and_decode, BlockFile, ChainTip, DiffErrorKind, DiffFile, PriorState,
};
use gigas_test_support::sign_raw;
use rand::{Rng, SeedableRng};

const CHAIN_ID: u64 = 1337;

/// Runtime code: SSTORE(calldata[0..32], calldata[32..64]).
const STORE: [u8; 8] = [0x60, 0x20, 0x35, 0x60, 0x00, 0x35, 0x55, 0x00];

/// Splits a `/diffs?from=A&to=B` body into its files.
fn split_range(mut body: &[u8]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    while !body.is_empty() {
        let len = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
        files.push(body[4..4 + len].to_vec());
        body = &body[4 + len..];
    }
    files
}

async fn archive_head(http: &reqwest::Client, url: &str) -> Option<u64> {
    let response = http.get(format!("{url}/diffs/head")).send().await.ok()?;
    let json: serde_json::Value = response.json().await.ok()?;
    json["number"].as_u64()
}

async fn wait_for_archive(http: &reqwest::Client, url: &str, number: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while archive_head(http, url)
        .await
        .is_none_or(|head| head < number)
    {
        assert!(
            Instant::now() < deadline,
            "the archive did not reach block {number}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signer(i: u32) -> PrivateKeySigner {
    dev_signer(i).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_reproduces_the_chain_from_the_published_files() {
    const BLOCKS: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "100ms"]);
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    let http = reqwest::Client::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);

    // A contract whose slots the load writes, rewrites and clears.
    let deployer = signer(9);
    let deploy = TxLegacy {
        chain_id: Some(CHAIN_ID),
        nonce: 0,
        gas_price: 10_000_000_000,
        gas_limit: 200_000,
        to: TxKind::Create,
        value: U256::ZERO,
        input: gigas_test_support::init_code(&STORE).into(),
    };
    let pending = provider
        .send_raw_transaction(&sign_raw(&deployer, deploy))
        .await
        .unwrap();
    let contract = pending
        .get_receipt()
        .await
        .unwrap()
        .contract_address
        .unwrap();
    let mut deployer_nonce = 1;

    // Transfers among the dev accounts and to fresh addresses, and slot writes, until the
    // chain has BLOCKS blocks.
    let senders: Vec<PrivateKeySigner> = (0..8).map(signer).collect();
    let mut nonces = vec![0u64; senders.len()];
    let fresh: Vec<Address> = (0..40)
        .map(|_| Address::from(rng.random::<[u8; 20]>()))
        .collect();
    let mut slots_written = BTreeMap::new();
    while provider.get_block_number().await.unwrap() < BLOCKS {
        for _ in 0..6 {
            let i = rng.random_range(0..senders.len());
            let to = if rng.random_bool(0.5) {
                fresh[rng.random_range(0..fresh.len())]
            } else {
                senders[rng.random_range(0..senders.len())].address()
            };
            let tx = TxEip1559 {
                chain_id: CHAIN_ID,
                nonce: nonces[i],
                gas_limit: 21_000,
                max_fee_per_gas: 20_000_000_000,
                max_priority_fee_per_gas: rng.random_range(0..3_000_000_000u128),
                to: TxKind::Call(to),
                value: U256::from(rng.random_range(1..10u64.pow(15))),
                ..Default::default()
            };
            let _ = provider
                .send_raw_transaction(&sign_raw(&senders[i], tx))
                .await
                .unwrap();
            nonces[i] += 1;
        }
        let slot = U256::from(rng.random_range(0..12u64));
        let value = if rng.random_bool(0.25) {
            U256::ZERO
        } else {
            U256::from(rng.random::<u64>())
        };
        slots_written.insert(slot, ());
        let mut input = slot.to_be_bytes::<32>().to_vec();
        input.extend_from_slice(&value.to_be_bytes::<32>());
        let call = TxEip1559 {
            chain_id: CHAIN_ID,
            nonce: deployer_nonce,
            gas_limit: 60_000,
            max_fee_per_gas: 20_000_000_000,
            max_priority_fee_per_gas: 1,
            to: TxKind::Call(contract),
            input: input.into(),
            ..Default::default()
        };
        let _ = provider
            .send_raw_transaction(&sign_raw(&deployer, call))
            .await
            .unwrap();
        deployer_nonce += 1;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    wait_for_archive(&http, &node.url, BLOCKS).await;

    // The whole range in one request, as a catching-up follower asks for it.
    let response = http
        .get(format!("{}/diffs?from=0&to={BLOCKS}", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-gigas-range"],
        format!("0-{BLOCKS}").as_str()
    );
    let files = split_range(&response.bytes().await.unwrap());
    assert_eq!(files.len() as u64, BLOCKS + 1);

    let mut follower = Follower::from_genesis(&files[0]);
    let mut changed_blocks = 0;
    let mut transactions = 0;
    for (n, bytes) in files.iter().enumerate().skip(1) {
        let n = n as u64;
        let hash = follower.apply(bytes);
        let block = provider
            .get_block_by_number(n.into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(hash, block.header.hash, "block {n}: the follower's hash");
        assert_eq!(
            follower.tip.state_root, block.header.state_root,
            "block {n}: the follower's checksum chain"
        );
        // The transactions-and-receipts file belongs to the same header.
        let block_file = http
            .get(format!("{}/blocks/{n}", node.url))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let block_file = BlockFile::decode(&block_file).unwrap();
        let header = DiffFile::decode(bytes).unwrap().header;
        block_file.check(&header).unwrap();
        transactions += block_file.transactions.len();
        if !block_file.transactions.is_empty() {
            changed_blocks += 1;
        }
    }
    assert!(
        changed_blocks > 50,
        "{changed_blocks} blocks carried transactions"
    );
    assert!(transactions > 500, "{transactions} transactions");

    // The follower's state is the sequencer's at that block.
    let at = BLOCKS.into();
    for address in senders
        .iter()
        .map(|s| s.address())
        .chain(fresh.iter().copied())
    {
        let expected = provider.get_balance(address).block_id(at).await.unwrap();
        let held = follower
            .state
            .account(&address)
            .unwrap()
            .map_or(U256::ZERO, |a| a.balance);
        assert_eq!(held, expected, "balance of {address}");
    }
    for slot in slots_written.keys() {
        let expected = provider
            .get_storage_at(contract, *slot)
            .block_id(at)
            .await
            .unwrap();
        assert_eq!(
            follower.state.slot(&contract, slot).unwrap(),
            expected,
            "slot {slot}"
        );
    }

    // Corruptions of real files, each refused with its reason and the block named.
    let mut tip_follower = Follower::from_genesis(&files[0]);
    for bytes in &files[1..100] {
        tip_follower.apply(bytes);
    }
    let next = &files[100];
    let refuse = |bytes: &[u8], tip: &ChainTip, sequencer: Address| {
        verify_and_decode(
            tip,
            sequencer,
            bytes,
            &tip_follower.index,
            &tip_follower.state,
        )
        .expect_err("a corrupt diff is refused")
    };
    let tip = tip_follower.tip;
    let sequencer = tip_follower.sequencer;
    for at in [10, next.len() / 2, next.len() - 1] {
        let mut flipped = next.clone();
        flipped[at] ^= 0x40;
        let e = refuse(&flipped, &tip, sequencer);
        // The byte may be the block number itself; the offset is always named.
        assert!(
            e.to_string().contains("byte") || e.block == Some(100),
            "flipped byte {at}: {e}"
        );
    }
    let e = refuse(&next[..next.len() - 7], &tip, sequencer);
    assert!(e.to_string().contains("100"), "truncated: {e}");
    let e = refuse(&files[101], &tip, sequencer);
    assert!(
        matches!(e.kind, DiffErrorKind::NotNext { .. }),
        "skipped: {e}"
    );
    let other_chain = ChainTip {
        hash: B256::repeat_byte(7),
        ..tip
    };
    let e = refuse(next, &other_chain, sequencer);
    assert!(
        matches!(e.kind, DiffErrorKind::WrongParent { .. }),
        "other chain: {e}"
    );
    // The same header signed by a key that is not the sequencer's.
    let mut forged = DiffFile::decode(next).unwrap();
    forged.signature = signer(3)
        .sign_hash_sync(&forged.header.hash_slow())
        .unwrap();
    let forged = forged
        .encode(&gigas_statediff::Compression::default())
        .unwrap();
    let e = refuse(&forged, &tip, sequencer);
    assert!(
        matches!(e.kind, DiffErrorKind::WrongSigner { .. }),
        "forged: {e}"
    );
    // And the untouched file still applies.
    tip_follower.apply(next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_speaks_plain_cacheable_http() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "50ms"]);
    let http = reqwest::Client::new();
    wait_for_archive(&http, &node.url, 5).await;

    for path in ["diffs/3", "blocks/3", "diffs?from=1&to=4"] {
        let url = format!("{}/{path}", node.url);
        let first = http.get(&url).send().await.unwrap();
        assert_eq!(first.status(), 200, "{path}");
        assert_eq!(
            first.headers()["cache-control"],
            "public, max-age=31536000, immutable",
            "{path}"
        );
        let etag = first.headers()["etag"].to_str().unwrap().to_string();
        assert!(
            etag.starts_with('"') && etag.ends_with('"'),
            "a strong ETag: {etag}"
        );
        // Ranges are streamed; their length is known before the first byte all the same.
        let length = first.content_length();
        let body = first.bytes().await.unwrap();
        assert!(!body.is_empty());
        assert_eq!(length, Some(body.len() as u64), "{path}: Content-Length");
        let again = http
            .get(&url)
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path} with If-None-Match");
        assert!(again.bytes().await.unwrap().is_empty());
        let other = http
            .get(&url)
            .header("if-none-match", "\"something-else\"")
            .send()
            .await
            .unwrap();
        assert_eq!(other.status(), 200);
        assert_eq!(
            other.bytes().await.unwrap(),
            body,
            "{path}: the same bytes again"
        );
    }

    let head = http
        .get(format!("{}/diffs/head", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(head.headers()["cache-control"], "no-cache");
    let head: serde_json::Value = head.json().await.unwrap();
    let number = head["number"].as_u64().unwrap();
    assert!(head["hash"].as_str().unwrap().starts_with("0x"));
    assert!(head["stateRoot"].as_str().unwrap().starts_with("0x"));

    let future = http
        .get(format!("{}/diffs/{}", node.url, number + 100_000))
        .send()
        .await
        .unwrap();
    assert_eq!(future.status(), 404);
    assert_eq!(future.headers()["content-type"], "application/json");
    let error: serde_json::Value = future.json().await.unwrap();
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("not produced yet"),
        "{error}"
    );
    // A range reaching past the head is clipped and not cached.
    let clipped = http
        .get(format!("{}/diffs?from=1&to={}", node.url, number + 500))
        .send()
        .await
        .unwrap();
    assert_eq!(clipped.status(), 200);
    assert_eq!(clipped.headers()["cache-control"], "no-store");
    for bad in ["diffs/xyz", "diffs?from=5&to=1", "diffs?from=0&to=5000"] {
        let response = http
            .get(format!("{}/{bad}", node.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
    }
    // JSON-RPC still answers on the same port.
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    assert_eq!(provider.get_chain_id().await.unwrap(), CHAIN_ID);
}

/// Reads `count` binary messages from a diff stream and applies them.
async fn follow_stream(
    ws_url: &str,
    from: u64,
    follower: &mut Follower,
    count: usize,
) -> Vec<Vec<u8>> {
    let (mut socket, _) =
        tokio_tungstenite::connect_async(format!("{ws_url}/diffs/stream?from={from}"))
            .await
            .expect("connect to the diff stream");
    let mut received = Vec::new();
    while received.len() < count {
        let message = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .expect("a diff within 30 s")
            .expect("the stream stays open")
            .expect("a message");
        if let tokio_tungstenite::tungstenite::Message::Binary(bytes) = message {
            let number = DiffFile::decode(&bytes).unwrap().header.number;
            assert_eq!(number, follower.tip.number + 1, "diffs arrive in order");
            follower.apply(&bytes);
            received.push(bytes.to_vec());
        }
    }
    let _ = socket.close(None).await;
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_subscriber_gets_every_block_in_order_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("node");
    let mut node = NodeProcess::start(&datadir, &["--block-time", "50ms"]);
    let http = reqwest::Client::new();
    wait_for_archive(&http, &node.url, 0).await;
    let diff0 = http
        .get(format!("{}/diffs/0", node.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut follower = Follower::from_genesis(&diff0);

    // Traffic, so that the streamed diffs carry changes.
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    let alice = signer(0);
    for nonce in 0..20 {
        let tx = TxEip1559 {
            chain_id: CHAIN_ID,
            nonce,
            gas_limit: 21_000,
            max_fee_per_gas: 20_000_000_000,
            max_priority_fee_per_gas: 1,
            to: TxKind::Call(Address::with_last_byte(nonce as u8 + 1)),
            value: U256::from(1_000 + nonce),
            ..Default::default()
        };
        let _ = provider
            .send_raw_transaction(&sign_raw(&alice, tx))
            .await
            .unwrap();
    }
    let before = follow_stream(&node.ws, 1, &mut follower, 40).await;

    // A SIGKILL, then a restart on the same data directory; the follower resumes where it
    // stopped.
    node.kill();
    let node = NodeProcess::start(&datadir, &["--block-time", "50ms"]);
    let resume = follower.tip.number + 1;
    follow_stream(&node.ws, resume, &mut follower, 40).await;
    assert!(follower.tip.number >= 80);

    // What was streamed before the kill is still what the archive serves.
    for (i, bytes) in before.iter().enumerate() {
        let served = http
            .get(format!("{}/diffs/{}", node.url, i + 1))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(&served[..], &bytes[..], "diff {} after the restart", i + 1);
    }
    // Alice's transfers are in the followed state.
    let held = follower.state.account(&alice.address()).unwrap().unwrap();
    assert_eq!(held.nonce, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_bounds_the_archive() {
    const RETAIN: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(
        &dir.path().join("node"),
        &[
            "--block-time",
            "20ms",
            "--diffs.retain",
            &RETAIN.to_string(),
        ],
    );
    let http = reqwest::Client::new();
    wait_for_archive(&http, &node.url, 3 * RETAIN).await;
    let head = archive_head(&http, &node.url).await.unwrap();

    let gone = http
        .get(format!("{}/diffs/1", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 410);
    let error: serde_json::Value = gone.json().await.unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("retention"),
        "{error}"
    );
    let kept = http
        .get(format!("{}/diffs/{head}", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), 200);
    // On disk: at most the retained blocks (plus the ones written since the head was read).
    for kind in ["diffs", "blocks"] {
        let files = std::fs::read_dir(dir.path().join("node/archive").join(kind))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .collect::<Vec<_>>();
        let lowest = files.iter().min().copied().unwrap();
        assert!(
            lowest + RETAIN >= head,
            "{kind}: block {lowest} kept at head {head}"
        );
        assert!(
            files.len() as u64 <= RETAIN + 50,
            "{kind}: {} files",
            files.len()
        );
    }
}

//! `gigas-profiler fetch` against a real dev sequencer on 127.0.0.1: transfers of every
//! transaction type, a contract deployed and called (several calls to one slot in flight
//! together), a contract that logs BLOCKHASH, and an EIP-7702 delegation; then the fetched
//! range must replay with every header's gasUsed and receipts root, each prestate must equal
//! the node's state at the parent block, and each BLOCKHASH block must carry its hash.
//!
//! The sequencer is another package's binary, so `CARGO_BIN_EXE_` cannot name it: it is
//! looked up beside this test's executable (`target/release/gigas-sequencer`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEip2930, TxEip7702, TxEnvelope, TxLegacy};
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip7702::Authorization;
use alloy_primitives::{address, Bytes, TxKind, B256, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_rpc_types_eth::{BlockId, BlockNumberOrTag, TransactionReceipt};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use gigas_evm::fixture::{fixture_dirs, load_fixture, BLOCK_HASHES_FILE};
use gigas_primitives::{ChainSpec, Hardfork};

const CHAIN_ID: u64 = 1337;
/// Dev accounts 0, 1 and 2 of the test mnemonic.
const KEYS: [&str; 3] = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
];

/// The sequencer binary the workspace build made beside this test.
fn sequencer_binary() -> PathBuf {
    gigas_test_support::workspace_binary("gigas-sequencer")
}

/// A dev sequencer, killed when dropped.
struct Node {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Node {
    fn start(datadir: &Path) -> Self {
        let log = datadir.with_extension("log");
        let log_file = std::fs::File::create(&log).expect("node log");
        let mut child = Command::new(sequencer_binary())
            .args([
                "--dev",
                "--http.port",
                "0",
                "--block-time",
                "200ms",
                "--datadir",
            ])
            .arg(datadir)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn gigas-sequencer");
        let stdout = child.stdout.take().expect("stdout");
        // Drained after the URL too, so that the node never blocks on the pipe.
        let lines = gigas_launch::tee_lines("node", stdout, None).expect("the log thread");
        match gigas_launch::wait_for_rpc(&lines, Duration::from_secs(120)) {
            Ok(ready) => Self {
                child,
                url: ready.url,
                log,
            },
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "gigas-sequencer did not start ({e}); its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signer(i: usize) -> PrivateKeySigner {
    KEYS[i].parse().expect("dev key")
}

fn raw<T: SignableTransaction<alloy_primitives::Signature>>(
    signer: &PrivateKeySigner,
    tx: T,
) -> Bytes
where
    TxEnvelope: From<alloy_consensus::Signed<T>>,
{
    gigas_test_support::sign_raw(signer, tx)
}

/// Creation code returning `runtime`.
fn init_code(runtime: &[u8]) -> Bytes {
    gigas_test_support::init_code(runtime).into()
}

/// With calldata: LOG1(0xdeadbeef) of the calldata, then slot 0 += its first word (so each
/// call reads what the previous one wrote). Without: returns slot 0.
fn counter_runtime() -> Vec<u8> {
    let mut code = vec![0x36, 0x15, 0x60, 0x00, 0x57]; // CALLDATASIZE ISZERO PUSH1 read JUMPI
    code.extend([0x36, 0x5f, 0x5f, 0x37]); // CALLDATACOPY(0, 0, CALLDATASIZE)
    code.extend([0x63, 0xde, 0xad, 0xbe, 0xef]); // PUSH4 topic
    code.extend([0x36, 0x5f, 0xa1]); // LOG1(0, CALLDATASIZE, topic)
    code.extend([0x5f, 0x35, 0x5f, 0x54, 0x01, 0x5f, 0x55]); // SSTORE(0, SLOAD(0) + word)
    code.push(0x00); // STOP
    let read = code.len() as u8;
    code.extend([0x5b, 0x5f, 0x54, 0x5f, 0x52, 0x60, 0x20, 0x5f, 0xf3]); // return SLOAD(0)
    code[3] = read;
    code
}

/// LOG0 of BLOCKHASH(NUMBER - 1): a wrong hash in the fixture changes the receipts root.
fn blockhash_runtime() -> Vec<u8> {
    vec![
        0x43, 0x60, 0x01, 0x90, 0x03, 0x40, // BLOCKHASH(NUMBER - 1)
        0x5f, 0x52, // MSTORE(0, hash)
        0x60, 0x20, 0x5f, 0xa0, // LOG0(0, 32)
        0x00,
    ]
}

async fn receipt(provider: &impl Provider, hash: B256) -> TransactionReceipt {
    for _ in 0..600 {
        if let Some(r) = provider
            .get_transaction_receipt(hash)
            .await
            .expect("receipt")
        {
            assert!(r.status(), "transaction {hash} failed");
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no receipt for {hash}");
}

fn profiler(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gigas-profiler"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run gigas-profiler")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_sequencer_blocks_replay_with_their_headers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&tmp.path().join("node"));
    let provider = ProviderBuilder::new().connect_http(node.url.parse().expect("url"));
    let (alice, bob, carol) = (signer(0), signer(1), signer(2));
    assert_eq!(provider.get_chain_id().await.expect("chain id"), CHAIN_ID);

    let base = provider
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await
        .expect("latest")
        .expect("a block")
        .header
        .base_fee_per_gas
        .expect("base fee") as u128;
    let price = base * 4 + 1_000_000_000;
    let tip = 1_000_000_000;
    let eip1559 = |nonce, to: TxKind, value: u64, input: Bytes, gas_limit| TxEip1559 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit,
        max_fee_per_gas: price,
        max_priority_fee_per_gas: tip,
        to,
        value: U256::from(value),
        access_list: AccessList::default(),
        input,
    };
    let mut sent = Vec::new();
    let send = |bytes: Bytes| {
        let provider = &provider;
        async move {
            *provider
                .send_raw_transaction(&bytes)
                .await
                .expect("accepted")
                .tx_hash()
        }
    };

    // Alice deploys both contracts; the counter then gets three calls in flight together.
    let a0 = provider
        .get_transaction_count(alice.address())
        .await
        .expect("nonce");
    let counter = alice.address().create(a0);
    let blockhash = alice.address().create(a0 + 1);
    let code = init_code(&counter_runtime());
    sent.push(send(raw(&alice, eip1559(a0, TxKind::Create, 0, code, 200_000))).await);
    let code = init_code(&blockhash_runtime());
    sent.push(
        send(raw(
            &alice,
            eip1559(a0 + 1, TxKind::Create, 0, code, 200_000),
        ))
        .await,
    );
    for (i, word) in [1u8, 2, 3].into_iter().enumerate() {
        let input = Bytes::from(B256::with_last_byte(word).to_vec());
        let tx = eip1559(a0 + 2 + i as u64, TxKind::Call(counter), 0, input, 100_000);
        sent.push(send(raw(&alice, tx)).await);
    }
    sent.push(
        send(raw(
            &alice,
            eip1559(a0 + 5, TxKind::Call(blockhash), 0, Bytes::new(), 100_000),
        ))
        .await,
    );

    // Bob: legacy, EIP-2930 and EIP-1559 transfers, and an EIP-7702 transaction that makes
    // carol's account run the counter.
    let to = address!("0x00000000000000000000000000000000000f0f01");
    let b0 = provider
        .get_transaction_count(bob.address())
        .await
        .expect("nonce");
    sent.push(
        send(raw(
            &bob,
            TxLegacy {
                chain_id: Some(CHAIN_ID),
                nonce: b0,
                gas_price: price,
                gas_limit: 21_000,
                to: TxKind::Call(to),
                value: U256::from(1),
                input: Bytes::new(),
            },
        ))
        .await,
    );
    sent.push(
        send(raw(
            &bob,
            TxEip2930 {
                chain_id: CHAIN_ID,
                nonce: b0 + 1,
                gas_price: price,
                gas_limit: 30_000,
                to: TxKind::Call(to),
                value: U256::from(2),
                input: Bytes::new(),
                access_list: AccessList(vec![AccessListItem {
                    address: to,
                    storage_keys: vec![B256::ZERO],
                }]),
            },
        ))
        .await,
    );
    sent.push(
        send(raw(
            &bob,
            eip1559(b0 + 2, TxKind::Call(to), 3, Bytes::new(), 21_000),
        ))
        .await,
    );
    let auth = Authorization {
        chain_id: U256::from(CHAIN_ID),
        address: counter,
        nonce: provider
            .get_transaction_count(carol.address())
            .await
            .expect("nonce"),
    };
    let auth_sig = carol.sign_hash_sync(&auth.signature_hash()).expect("sign");
    sent.push(
        send(raw(
            &bob,
            TxEip7702 {
                chain_id: CHAIN_ID,
                nonce: b0 + 3,
                gas_limit: 150_000,
                max_fee_per_gas: price,
                max_priority_fee_per_gas: tip,
                to: carol.address(),
                value: U256::ZERO,
                access_list: AccessList::default(),
                authorization_list: vec![auth.into_signed(auth_sig)],
                input: Bytes::from(B256::with_last_byte(9).to_vec()),
            },
        ))
        .await,
    );
    // A second BLOCKHASH call, after the delegation.
    sent.push(
        send(raw(
            &alice,
            eip1559(a0 + 6, TxKind::Call(blockhash), 0, Bytes::new(), 100_000),
        ))
        .await,
    );

    let mut blockhash_blocks = Vec::new();
    let mut last = 0;
    for (i, hash) in sent.iter().enumerate() {
        let r = receipt(&provider, *hash).await;
        let number = r.block_number.expect("mined");
        last = last.max(number);
        if i == 5 || i == sent.len() - 1 {
            blockhash_blocks.push(number);
        }
    }
    assert_eq!(
        provider
            .get_storage_at(counter, U256::ZERO)
            .await
            .expect("slot"),
        U256::from(6),
        "the three calls added 1 + 2 + 3"
    );
    // One more block, so that the range ends with an empty block too.
    while provider.get_block_number().await.expect("head") <= last {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let head = last + 1;

    // Fetch blocks 1..=head.
    let out = tmp.path().join("fixtures");
    let out_str = out.to_str().expect("utf-8 path");
    let head_str = head.to_string();
    let run = profiler(&[
        "fetch", "--rpc", &node.url, "--from", "1", "--to", &head_str, "--out", out_str,
    ]);
    assert!(
        run.status.success(),
        "fetch failed:\n{}\nthe node's log:\n{}",
        text(&run),
        std::fs::read_to_string(&node.log).unwrap_or_default()
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains(&format!("{head} blocks")), "{stdout}");

    assert_eq!(
        gigas_profiler::fetch::load_chain(&out).expect("chain.json"),
        Some(ChainSpec::single_fork(CHAIN_ID, Hardfork::Prague))
    );
    let dirs = fixture_dirs(&out).expect("fixture dirs");
    assert_eq!(dirs.len() as u64, head);
    let mut transactions = 0;
    for dir in &dirs {
        let fixture = load_fixture(dir).expect("the fixture loads");
        let number = fixture.number();
        transactions += fixture.block.transactions.len();
        let rpc = provider
            .get_block_by_number(number.into())
            .await
            .expect("block")
            .expect("exists");
        assert_eq!(fixture.block.header.hash, rpc.header.hash, "block {number}");

        // The merged prestate is the node's own state at the parent block.
        let parent: BlockId = (number - 1).into();
        for (address, account) in &fixture.prestate {
            let at = format!("block {number}, account {address}");
            assert_eq!(
                account.balance,
                provider
                    .get_balance(*address)
                    .block_id(parent)
                    .await
                    .expect("balance"),
                "{at}: balance"
            );
            assert_eq!(
                account.nonce,
                provider
                    .get_transaction_count(*address)
                    .block_id(parent)
                    .await
                    .expect("nonce"),
                "{at}: nonce"
            );
            let code = provider
                .get_code_at(*address)
                .block_id(parent)
                .await
                .expect("code");
            assert_eq!(account.code.clone().unwrap_or_default(), code, "{at}: code");
            for (slot, value) in account.storage.iter().flatten() {
                let node_value = provider
                    .get_storage_at(*address, *slot)
                    .block_id(parent)
                    .await
                    .expect("storage");
                assert_eq!(*value, node_value, "{at}: slot {slot}");
            }
        }
        if fixture.block.transactions.is_empty() {
            assert!(fixture.prestate.is_empty(), "block {number} reads nothing");
        }

        // BLOCKHASH blocks carry the parent's hash, the others no hashes file.
        if blockhash_blocks.contains(&number) {
            assert_eq!(
                fixture.block_hashes.get(&(number - 1)),
                Some(&fixture.block.header.parent_hash),
                "block {number}: {:?}",
                fixture.block_hashes
            );
        } else {
            assert!(
                !dir.join(BLOCK_HASHES_FILE).exists(),
                "block {number} calls no BLOCKHASH but has {:?}",
                fixture.block_hashes
            );
        }
    }
    assert_eq!(transactions, sent.len());
    let counter_dir = out.join(
        provider
            .get_transaction_receipt(sent[2])
            .await
            .expect("receipt")
            .expect("mined")
            .block_number
            .expect("number")
            .to_string(),
    );
    let counter_pre = &load_fixture(&counter_dir).expect("fixture").prestate[&counter];
    assert_eq!(
        counter_pre
            .storage
            .as_ref()
            .and_then(|s| s.get(&U256::ZERO)),
        Some(&U256::ZERO),
        "slot 0 before the first call's block is 0 whichever call wrote it later"
    );

    // Every block replays with its header's gasUsed and receipts root.
    let check = profiler(&["--blocks", out_str, "--check-only"]);
    assert!(check.status.success(), "check failed:\n{}", text(&check));
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        stdout.contains(&format!(
            "checked      : {head} blocks match their header's gasUsed; {head} (Byzantium on) also receipts root and logs bloom"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("chain        : id 1337"), "{stdout}");

    // Fetching again into the same directory overwrites it.
    let again = profiler(&[
        "fetch", "--rpc", &node.url, "--from", "1", "--to", "2", "--out", out_str,
    ]);
    assert!(again.status.success(), "second fetch:\n{}", text(&again));

    // A block the node does not have, a chain.json of another chain, no node at all.
    let far = (head + 1000).to_string();
    let missing = profiler(&[
        "fetch", "--rpc", &node.url, "--from", &far, "--to", &far, "--out", out_str,
    ]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains(&format!("has no block {far}")), "{err}");

    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(
        other.join("chain.json"),
        serde_json::to_vec(&ChainSpec::mainnet()).expect("json"),
    )
    .expect("write");
    let mixed = profiler(&[
        "fetch",
        "--rpc",
        &node.url,
        "--from",
        "1",
        "--to",
        "1",
        "--out",
        other.to_str().expect("utf-8"),
    ]);
    assert!(!mixed.status.success());
    let err = String::from_utf8_lossy(&mixed.stderr);
    assert!(
        err.contains("Ethereum mainnet") && err.contains("chain 1337"),
        "{err}"
    );

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let nobody = format!("http://127.0.0.1:{closed}");
    let unreachable = profiler(&[
        "fetch",
        "--rpc",
        &nobody,
        "--from",
        "1",
        "--to",
        "1",
        "--out",
        out_str,
        "--retries",
        "1",
    ]);
    assert!(!unreachable.status.success());
    let err = String::from_utf8_lossy(&unreachable.stderr);
    assert!(
        err.contains(&format!("no answer from {nobody}")) && err.contains("after 2 attempts"),
        "{err}"
    );
}

/// A geth-shaped archive node over the shipped mainnet fixtures: blocks with full
/// transactions, headers by number for BLOCKHASH, and `debug_traceBlockByNumber` with the
/// prestate tracer (each fixture's prestate split over the block's transactions, with geth's
/// `codeHash` field added). Plain HTTP/1.1, one request per connection.
struct MockArchive {
    url: String,
}

impl MockArchive {
    fn start(numbers: &[u64], serve_tracer: bool) -> Self {
        use std::collections::BTreeMap;
        use std::io::{Read, Write};
        let mainnet = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/mainnet");
        assert!(
            mainnet.is_dir(),
            "shared data missing: expected the mainnet fixtures at {}",
            mainnet.display()
        );
        let read_zstd = |path: PathBuf| -> serde_json::Value {
            let raw = std::fs::read(&path).expect("fixture file");
            serde_json::from_slice(&zstd::decode_all(raw.as_slice()).expect("zstd")).expect("json")
        };
        let mut blocks = BTreeMap::new();
        let mut traces = BTreeMap::new();
        let mut hashes = BTreeMap::new();
        for &n in numbers {
            let dir = mainnet.join(n.to_string());
            let block = read_zstd(dir.join("block.json.zst"));
            let prestate = read_zstd(dir.join("prestate.json.zst"));
            let txs = block["transactions"].as_array().expect("full txs").clone();
            // Accounts dealt round-robin over the transactions: every account and slot is
            // listed by exactly one transaction, so the merge must bring them all back.
            let slots = txs.len().max(1);
            let mut per_tx = vec![serde_json::Map::new(); slots];
            for (i, (address, account)) in prestate.as_object().expect("object").iter().enumerate()
            {
                let mut account = account.clone();
                if let Some(code) = account.get("code").and_then(|c| c.as_str()) {
                    let bytes = hex::decode(code.trim_start_matches("0x")).expect("hex");
                    account["codeHash"] =
                        serde_json::Value::String(alloy_primitives::keccak256(bytes).to_string());
                }
                per_tx[i % slots].insert(address.clone(), account);
            }
            let trace: Vec<serde_json::Value> = txs
                .iter()
                .zip(per_tx)
                .map(|(tx, result)| serde_json::json!({"txHash": tx["hash"], "result": result}))
                .collect();
            if let Ok(text) = std::fs::read_to_string(dir.join("block_hashes.json")) {
                let shipped: BTreeMap<String, String> =
                    serde_json::from_str(&text).expect("hashes");
                for (k, v) in shipped {
                    hashes.insert(k.parse::<u64>().expect("number"), v);
                }
            }
            hashes.insert(n, block["hash"].as_str().expect("hash").to_string());
            blocks.insert(n, block);
            traces.insert(n, serde_json::Value::Array(trace));
        }
        let answer = move |request: &serde_json::Value| -> serde_json::Value {
            let number = |i: usize| {
                request["params"][i]
                    .as_str()
                    .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            };
            let result = match request["method"].as_str().unwrap_or_default() {
                "eth_chainId" => serde_json::json!("0x1"),
                "eth_blockNumber" => serde_json::json!("0x1400000"),
                "eth_getBlockByNumber" => match number(0) {
                    Some(n) if request["params"][1] == true => {
                        blocks.get(&n).cloned().unwrap_or(serde_json::Value::Null)
                    }
                    Some(n) => hashes
                        .get(&n)
                        .map(|h| serde_json::json!({"number": format!("{n:#x}"), "hash": h}))
                        .unwrap_or(serde_json::Value::Null),
                    None => serde_json::Value::Null,
                },
                "debug_traceBlockByNumber"
                    if serve_tracer && request["params"][1]["tracer"] == "prestateTracer" =>
                {
                    number(0)
                        .and_then(|n| traces.get(&n).cloned())
                        .unwrap_or(serde_json::Value::Null)
                }
                other => {
                    return serde_json::json!({"jsonrpc": "2.0", "id": request["id"],
                        "error": {"code": -32601, "message": format!("the method {other} does not exist/is not available")}})
                }
            };
            serde_json::json!({"jsonrpc": "2.0", "id": request["id"], "result": result})
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 8192];
                let body = loop {
                    let Ok(n) = stream.read(&mut chunk) else {
                        break None;
                    };
                    if n == 0 {
                        break None;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buffer.len() >= end + 4 + length {
                        break Some(buffer[end + 4..end + 4 + length].to_vec());
                    }
                };
                let Some(body) = body else { continue };
                let response = match serde_json::from_slice::<serde_json::Value>(&body) {
                    Ok(serde_json::Value::Array(batch)) => {
                        serde_json::Value::Array(batch.iter().map(&answer).collect())
                    }
                    Ok(request) => answer(&request),
                    Err(_) => serde_json::json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32700, "message": "parse error"}}),
                };
                let body = serde_json::to_vec(&response).expect("json");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        Self { url }
    }
}

/// Shipped mainnet blocks served the way geth serves them come back as the same fixtures:
/// the prestate merged from per-transaction results equals the shipped one, and the
/// BLOCKHASH numbers found by replaying 11114732 are exactly the shipped ones.
#[test]
fn a_geth_shaped_archive_node_gives_back_the_shipped_fixtures() {
    let numbers = [46_147u64, 4_370_000, 11_114_732, 19_426_587];
    let mock = MockArchive::start(&numbers, true);
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("fixtures");
    let out_str = out.to_str().expect("utf-8 path");
    for n in numbers {
        let n = n.to_string();
        let run = profiler(&[
            "fetch", "--rpc", &mock.url, "--from", &n, "--to", &n, "--out", out_str,
        ]);
        assert!(run.status.success(), "fetch {n}:\n{}", text(&run));
    }
    assert_eq!(
        gigas_profiler::fetch::load_chain(&out).expect("chain.json"),
        Some(ChainSpec::mainnet())
    );
    let mainnet = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/mainnet");
    for n in numbers {
        let fetched = load_fixture(out.join(n.to_string())).expect("fetched fixture");
        let shipped = load_fixture(mainnet.join(n.to_string())).expect("shipped fixture");
        assert_eq!(fetched.block.header.hash, shipped.block.header.hash);
        assert_eq!(fetched.block_hashes, shipped.block_hashes, "block {n}");
        assert_eq!(fetched.prestate.len(), shipped.prestate.len(), "block {n}");
        for (address, want) in &shipped.prestate {
            let got = &fetched.prestate[address];
            assert_eq!(
                (got.balance, got.nonce, &got.code, &got.storage),
                (want.balance, want.nonce, &want.code, &want.storage),
                "block {n}, account {address}"
            );
        }
    }
    let check = profiler(&["--blocks", out_str, "--check-only"]);
    assert!(check.status.success(), "check failed:\n{}", text(&check));
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        stdout.contains("checked      : 4 blocks match their header's gasUsed; 3 (Byzantium on)"),
        "{stdout}"
    );

    // A node without the prestate tracer is named as such, with its own words.
    let bare = MockArchive::start(&[46_147], false);
    let no_tracer = profiler(&[
        "fetch", "--rpc", &bare.url, "--from", "46147", "--to", "46147", "--out", out_str,
    ]);
    assert!(!no_tracer.status.success());
    let err = String::from_utf8_lossy(&no_tracer.stderr);
    assert!(
        err.contains(&format!(
            "the node at {} does not serve debug_traceBlockByNumber with prestateTracer",
            bare.url
        )) && err.contains("does not exist/is not available"),
        "{err}"
    );
}

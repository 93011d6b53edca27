//! Executions a client asks for are bounded, on a real `gigas-sequencer --dev`: gas by
//! `--rpc.gascap` whatever the request and its block overrides say, EVM memory, and wall-clock
//! time by `--rpc.evmtimeout`; and the errors are in the words Ethereum tools match.
//!
//! Before these bounds, the first request below (a 1 TB `MSTORE` with 2^64 - 1 gas and a block
//! gas limit lifted by an override) made the node allocate until the kernel killed it.

mod common;

use std::time::{Duration, Instant};

use common::NodeProcess;
use serde_json::{json, Value};

/// Posts one JSON-RPC request and returns its `result` or `error` object.
fn rpc(client: &reqwest::blocking::Client, url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    client
        .post(url)
        .json(&body)
        .send()
        .unwrap_or_else(|e| panic!("{method}: the node did not answer: {e}"))
        .json::<Value>()
        .unwrap_or_else(|e| panic!("{method}: not JSON: {e}"))
}

fn error_of(answer: &Value) -> (i64, String) {
    let error = answer
        .get("error")
        .unwrap_or_else(|| panic!("expected an error, got {answer}"));
    (
        error["code"].as_i64().unwrap_or_default(),
        error["message"].as_str().unwrap_or_default().to_string(),
    )
}

fn head(client: &reqwest::blocking::Client, url: &str) -> u64 {
    let answer = rpc(client, url, "eth_blockNumber", json!([]));
    let hex = answer["result"].as_str().expect("a block number");
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("hex")
}

/// `JUMPDEST PUSH1 0 JUMP`: a loop that never ends, 12 gas an iteration.
const ENDLESS: &str = "0x5b600056";
/// Where the loop is put by a state override.
const LOOP_AT: &str = "0x00000000000000000000000000000000000000aa";
/// The dev chain's first account (10,000 ETH).
const RICH: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

#[test]
fn calls_and_estimates_are_held_to_gas_memory_and_time() {
    let dir = tempfile::tempdir().unwrap();
    // A gas cap far above the default makes the endless loop run out of time, not gas.
    let node = NodeProcess::start(
        &dir.path().join("node"),
        &["--rpc.gascap", "100000000000", "--rpc.evmtimeout", "300ms"],
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let url = node.url.as_str();

    // The report's request: 2^64 - 1 gas, a block gas limit override of 2^64 - 1, and
    // `PUSH1 1 PUSH5 0xffffffffff MSTORE` (memory to a terabyte).
    let t = Instant::now();
    let answer = rpc(
        &client,
        url,
        "eth_estimateGas",
        json!([{"gas": "0xffffffffffffffff", "input": "0x600164ffffffffff52"}, "latest", null,
               {"gasLimit": "0xffffffffffffffff"}]),
    );
    let (code, message) = error_of(&answer);
    println!(
        "1 TB MSTORE estimate: {code} {message} in {:?}",
        t.elapsed()
    );
    assert_eq!(code, -32000, "{message}");
    // With a cap of 10^11 gas the memory's cost can be paid up to the memory limit, which
    // then stops it (with the default cap, gas runs out first).
    assert_eq!(message, "out of gas: memory limit exceeded");
    assert!(node_is_up(&client, url), "the node died on the estimate");

    // The same as eth_call.
    let answer = rpc(
        &client,
        url,
        "eth_call",
        json!([{"gas": "0xffffffffffffffff", "input": "0x600164ffffffffff52"}, "latest", null,
               {"gasLimit": "0xffffffffffffffff"}]),
    );
    let (code, message) = error_of(&answer);
    println!("1 TB MSTORE call: {code} {message}");
    assert!(node_is_up(&client, url), "the node died on the call");

    // An endless loop injected by a state override ends within the budget, as an error.
    let overrides = override_of(LOOP_AT, json!({"code": ENDLESS}));
    for method in ["eth_call", "eth_estimateGas"] {
        let t = Instant::now();
        let answer = rpc(
            &client,
            url,
            method,
            json!([{"to": LOOP_AT, "gas": "0xffffffffffffffff"}, "latest", overrides]),
        );
        let took = t.elapsed();
        let (code, message) = error_of(&answer);
        println!("endless loop, {method}: {code} {message} in {took:?}");
        assert_eq!(code, -32000, "{message}");
        assert_eq!(message, "execution aborted (timeout = 300ms)");
        // The budget, plus the wait for a permit and the round trip; never the loop's 8 s.
        assert!(took < Duration::from_secs(5), "{method} took {took:?}");
    }

    let before = head(&client, url);
    let deadline = Instant::now() + Duration::from_secs(30);
    while head(&client, url) <= before {
        assert!(Instant::now() < deadline, "the head stopped at {before}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_gas_cap_holds_whatever_the_request_says() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--rpc.gascap", "1000000"]);
    let client = reqwest::blocking::Client::new();
    let url = node.url.as_str();
    let overrides = override_of(LOOP_AT, json!({"code": ENDLESS}));
    // The loop uses all the gas it has: the estimate says how much it was allowed.
    let answer = rpc(
        &client,
        url,
        "eth_estimateGas",
        json!([{"to": LOOP_AT, "gas": "0xffffffffffffffff"}, "latest", overrides,
               {"gasLimit": "0xffffffffffffffff"}]),
    );
    let (code, message) = error_of(&answer);
    assert_eq!(
        (code, message.as_str()),
        (-32000, "gas required exceeds allowance (1000000)")
    );
    // GAS (0x5a) reports what the call runs with: the cap.
    let gas_reporter = override_of(LOOP_AT, json!({"code": "0x5a60005260206000f3"}));
    let answer = rpc(
        &client,
        url,
        "eth_call",
        json!([{"to": LOOP_AT, "gas": "0xffffffffffffffff"}, "latest", gas_reporter,
               {"gasLimit": "0xffffffffffffffff"}]),
    );
    let word = answer["result"].as_str().expect("the call returns GAS");
    let gas = u64::from_str_radix(&word[word.len() - 16..], 16).unwrap();
    assert!(gas < 1_000_000, "the call ran with {gas} gas, over the cap");
    assert!(gas > 1_000_000 - 30_000, "{gas}");
}

#[test]
fn estimate_errors_are_in_the_words_tools_match() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &[]);
    let client = reqwest::blocking::Client::new();
    let url = node.url.as_str();
    let poor = "0x000000000000000000000000000000000000dEaD";

    // An account that cannot pay: geth's "insufficient funds" (ethers reports
    // INSUFFICIENT_FUNDS on it, viem InsufficientFundsError).
    let answer = rpc(
        &client,
        url,
        "eth_estimateGas",
        json!([{"from": poor, "to": RICH, "value": "0x1", "maxFeePerGas": "0x3b9aca00"}]),
    );
    let (code, message) = error_of(&answer);
    println!("estimate from an empty account: {code} {message}");
    assert_eq!(code, -32000);
    assert!(
        message.starts_with("insufficient funds for gas * price + value"),
        "{message}"
    );
    let answer = rpc(
        &client,
        url,
        "eth_call",
        json!([{"from": poor, "to": RICH, "value": "0x1", "gas": "0x5208"}]),
    );
    let (_, message) = error_of(&answer);
    assert!(
        message.starts_with("insufficient funds for gas * price + value"),
        "{message}"
    );

    // 0.01 ETH with a fee cap of 1 gwei pays for 10M gas, less than the block's limit: the
    // estimate is capped by the balance (geth's DoEstimateGas), and a transfer gets 21,000.
    let small = "0x00000000000000000000000000000000000000bb";
    let funded = override_of(small, json!({"balance": "0x2386f26fc10000"}));
    let answer = rpc(
        &client,
        url,
        "eth_estimateGas",
        json!([{"from": small, "to": RICH, "value": "0x1", "maxFeePerGas": "0x3b9aca00",
                "maxPriorityFeePerGas": "0x1"}, "latest", funded]),
    );
    assert_eq!(answer["result"], json!("0x5208"), "{answer}");

    // Not enough gas allowed for the loop: "gas required exceeds allowance".
    let overrides = override_of(LOOP_AT, json!({"code": ENDLESS}));
    let answer = rpc(
        &client,
        url,
        "eth_estimateGas",
        json!([{"to": LOOP_AT, "gas": "0x30000"}, "latest", overrides]),
    );
    assert_eq!(
        error_of(&answer),
        (
            -32000,
            "gas required exceeds allowance (196608)".to_string()
        )
    );

    // A block that does not exist: geth's -32000 "header not found".
    let answer = rpc(&client, url, "eth_getBalance", json!([RICH, "0xffffff"]));
    assert_eq!(error_of(&answer), (-32000, "header not found".to_string()));
}

/// A state override object for one account.
fn override_of(address: &str, account: Value) -> Value {
    let mut map = serde_json::Map::new();
    map.insert(address.to_string(), account);
    Value::Object(map)
}

fn node_is_up(client: &reqwest::blocking::Client, url: &str) -> bool {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []});
    client
        .post(url)
        .json(&body)
        .send()
        .and_then(|r| r.json::<Value>())
        .is_ok_and(|v| v["result"] == json!("0x539"))
}

/// `size` is the block's RLP length (geth), not its header's: checked on a block with a
/// transaction, recomputed from the transactions the node returns.
#[test]
fn block_size_is_the_rlp_length_of_the_block() {
    use alloy_consensus::TxEnvelope;
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "100ms"]);
    let client = reqwest::blocking::Client::new();
    let url = node.url.as_str();
    let signer = gigas_chain::dev_signer(0).unwrap();
    let raw = gigas_test_support::sign_raw(
        &signer,
        alloy_consensus::TxEip1559 {
            chain_id: 1337,
            nonce: 0,
            gas_limit: 21_000,
            max_fee_per_gas: 10_000_000_000,
            max_priority_fee_per_gas: 1,
            to: alloy_primitives::TxKind::Call(alloy_primitives::Address::repeat_byte(7)),
            value: alloy_primitives::U256::from(1),
            ..Default::default()
        },
    );
    let hash = rpc(&client, url, "eth_sendRawTransaction", json!([raw]))["result"].clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    let block_number = loop {
        let receipt = rpc(&client, url, "eth_getTransactionReceipt", json!([hash]));
        if let Some(n) = receipt["result"]["blockNumber"].as_str() {
            break n.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the transaction was not included"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let answer = rpc(
        &client,
        url,
        "eth_getBlockByNumber",
        json!([block_number, true]),
    );
    let block: alloy_rpc_types_eth::Block = serde_json::from_value(answer["result"].clone())
        .unwrap_or_else(|e| panic!("a block: {e}: {answer}"));
    let txs: Vec<TxEnvelope> = block
        .transactions
        .txns()
        .map(|tx| tx.inner.inner().clone())
        .collect();
    assert_eq!(txs.len(), 1);
    let rlp = alloy_consensus::Block {
        header: block.header.inner.clone(),
        body: alloy_consensus::BlockBody {
            transactions: txs,
            ommers: Vec::new(),
            withdrawals: Some(Default::default()),
        },
    };
    let expected = alloy_rlp::Encodable::length(&rlp);
    let header_only = alloy_rlp::Encodable::length(&block.header.inner);
    assert_eq!(
        block.header.size,
        Some(alloy_primitives::U256::from(expected)),
        "size {:?}: the block's RLP is {expected} bytes, its header's {header_only}",
        block.header.size
    );
}

/// A state history shorter than recovery and the diff writer need would brick the node after
/// a restart: it is refused up front, saying the least it takes. (Before, any window was
/// taken, down to 1.)
#[test]
fn a_state_history_too_short_for_recovery_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gigas-sequencer"))
        .args([
            "--dev",
            "--http.port",
            "0",
            "--state-history",
            "100",
            "--datadir",
        ])
        .arg(dir.path().join("node"))
        .output()
        .expect("run gigas-sequencer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted --state-history 100");
    assert!(
        stderr.contains("too short: at least 1288"),
        "the refusal says the least window: {stderr}"
    );
}

/// A client that sends one transfer after another, asking for the `pending` nonce before
/// each (as ethers and viem do), is never refused "nonce too low": the count includes
/// transactions of blocks sealed and not yet published. Before the fix it read the published
/// head, and about one send in six failed on a 250 ms chain (here, with 20 ms blocks, 13 of
/// 200 were refused).
#[test]
fn the_pending_nonce_counts_sealed_blocks() {
    let dir = tempfile::tempdir().unwrap();
    // Short blocks: more moments at which a block is sealed and not yet published.
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "20ms"]);
    let client = reqwest::blocking::Client::new();
    let url = node.url.as_str();
    let signer = gigas_chain::dev_signer(3).unwrap();
    let from = format!("{:#x}", signer.address());
    let mut refused = Vec::new();
    for i in 0..200 {
        let answer = rpc(
            &client,
            url,
            "eth_getTransactionCount",
            json!([from, "pending"]),
        );
        let nonce = u64::from_str_radix(
            answer["result"]
                .as_str()
                .expect("a count")
                .trim_start_matches("0x"),
            16,
        )
        .unwrap();
        let raw = gigas_test_support::sign_raw(
            &signer,
            alloy_consensus::TxEip1559 {
                chain_id: 1337,
                nonce,
                gas_limit: 21_000,
                max_fee_per_gas: 100_000_000_000,
                max_priority_fee_per_gas: 1,
                to: alloy_primitives::TxKind::Call(alloy_primitives::Address::repeat_byte(9)),
                value: alloy_primitives::U256::from(1),
                ..Default::default()
            },
        );
        let answer = rpc(&client, url, "eth_sendRawTransaction", json!([raw]));
        if answer.get("error").is_some() {
            refused.push(format!(
                "send {i} with nonce {nonce}: {}",
                answer["error"]["message"]
            ));
        }
        // A client that waits a little between sends, so that sends fall at every moment of
        // the block pipeline.
        std::thread::sleep(Duration::from_millis(3 + i % 7));
    }
    assert!(
        refused.is_empty(),
        "{} of 200 sends refused: {refused:#?}",
        refused.len()
    );
}

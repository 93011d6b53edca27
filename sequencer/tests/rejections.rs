//! Every rejection of `eth_sendRawTransaction`, with the words Ethereum tools match on and the
//! numbers a person needs, and bad requests that get JSON-RPC errors while the node keeps
//! serving.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEip4844, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Bytes, Signature, TxKind, B256, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_signer_local::PrivateKeySigner;
use common::NodeProcess;
use gigas_chain::dev_signer;

use gigas_test_support::sign_raw as sign;

fn tx1559(nonce: u64, max_fee: u128, tip: u128, gas: u64) -> TxEip1559 {
    TxEip1559 {
        chain_id: 1337,
        nonce,
        gas_limit: gas,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: tip,
        to: TxKind::Call(Address::repeat_byte(9)),
        value: U256::from(1),
        access_list: Default::default(),
        input: Bytes::new(),
    }
}

/// The JSON-RPC error `eth_sendRawTransaction` answers, as (code, message).
async fn rejection(provider: &impl Provider, raw: &Bytes) -> (i64, String) {
    match provider.send_raw_transaction(raw).await {
        Ok(p) => panic!(
            "accepted {} (raw starts {:?})",
            p.tx_hash(),
            &raw[..raw.len().min(4)]
        ),
        Err(e) => {
            let payload = e
                .as_error_resp()
                .unwrap_or_else(|| panic!("not a JSON-RPC error: {e}"));
            (payload.code, payload.message.to_string())
        }
    }
}

async fn expect(provider: &impl Provider, raw: &Bytes, words: &[&str]) {
    eprintln!("expecting {words:?}");
    let (code, message) = rejection(provider, raw).await;
    for w in words {
        assert!(
            message.contains(w),
            "expected {w:?} in the rejection, got {code}: {message}"
        );
    }
    assert!(code < 0, "{code}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rejection_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    // Long blocks, so that pending transactions stay in the pool during the test; a small
    // pool and a minimum tip.
    let node = NodeProcess::start(
        &dir.path().join("node"),
        &[
            "--block-time",
            "600s",
            "--txpool.max-txs",
            "4",
            "--txpool.min-priority-fee",
            "2",
        ],
    );
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    let alice = dev_signer(0).unwrap();
    let gwei = 1_000_000_000u128;
    let fee = 10 * gwei;

    // Accepted, then the same bytes again.
    let first = sign(&alice, tx1559(0, fee, 2 * gwei, 21_000));
    let _ = provider.send_raw_transaction(&first).await.unwrap();
    expect(&provider, &first, &["already known"]).await;

    // A gapped transaction (queued), then a replacement with too small a bump.
    let queued = sign(&alice, tx1559(2, fee, 2 * gwei, 21_000));
    let _ = provider.send_raw_transaction(&queued).await.unwrap();
    let cheap_bump = sign(
        &alice,
        tx1559(2, fee + fee / 20, 2 * gwei + gwei / 20, 21_000),
    );
    expect(
        &provider,
        &cheap_bump,
        &["replacement transaction underpriced"],
    )
    .await;
    // A 10% bump of both fees replaces it.
    let bump = sign(
        &alice,
        tx1559(2, fee + fee / 10, 2 * gwei + gwei / 5, 21_000),
    );
    let _ = provider.send_raw_transaction(&bump).await.unwrap();

    // Below the minimum tip.
    let bob = dev_signer(1).unwrap();
    expect(
        &provider,
        &sign(&bob, tx1559(0, fee, 1, 21_000)),
        &["transaction underpriced"],
    )
    .await;

    // Fee cap under the base fee (1 gwei at genesis, 7/8 of it after an empty block).
    expect(
        &provider,
        &sign(&bob, tx1559(0, 1_000, 2, 21_000)),
        &["max fee per gas less than block base fee"],
    )
    .await;

    // Intrinsic gas, block gas limit.
    expect(
        &provider,
        &sign(&bob, tx1559(0, fee, 2 * gwei, 20_000)),
        &["intrinsic gas too low"],
    )
    .await;
    expect(
        &provider,
        &sign(&bob, tx1559(0, fee, 2 * gwei, 1_000_000_000)),
        &["exceeds block gas limit"],
    )
    .await;

    // Wrong chain id.
    let mut wrong_chain = tx1559(0, fee, 2 * gwei, 21_000);
    wrong_chain.chain_id = 1;
    expect(&provider, &sign(&bob, wrong_chain), &["invalid chain id"]).await;

    // An account without funds: the numbers say what it has and what it needs.
    let poor = PrivateKeySigner::random();
    let (code, message) =
        rejection(&provider, &sign(&poor, tx1559(0, fee, 2 * gwei, 21_000))).await;
    assert!(
        message.contains("insufficient funds for gas * price + value")
            && message.contains("have 0")
            && message.contains(&(21_000 * fee + 1).to_string()),
        "{code}: {message}"
    );

    // A signature that recovers to no key.
    let bad: Bytes =
        TxEnvelope::from(tx1559(0, fee, 2 * gwei, 21_000).into_signed(Signature::new(
            U256::ZERO,
            U256::from(1),
            false,
        )))
        .encoded_2718()
        .into();
    expect(&provider, &bad, &["invalid sender"]).await;

    // Oversized data.
    let mut big = tx1559(0, fee, 2 * gwei, 30_000_000);
    big.input = vec![1u8; 200 * 1024].into();
    expect(&provider, &sign(&bob, big), &["oversized data"]).await;

    // Blob transactions are refused by name.
    let blob = TxEip4844 {
        chain_id: 1337,
        nonce: 0,
        gas_limit: 21_000,
        max_fee_per_gas: fee,
        max_priority_fee_per_gas: 2 * gwei,
        to: Address::repeat_byte(9),
        value: U256::ZERO,
        access_list: Default::default(),
        blob_versioned_hashes: vec![B256::repeat_byte(1)],
        max_fee_per_blob_gas: 1,
        input: Bytes::new(),
    };
    let (_, message) = rejection(&provider, &sign(&bob, blob)).await;
    assert!(
        message.contains("4844") || message.contains("blob"),
        "{message}"
    );

    // Bad RLP.
    let (code, message) = rejection(&provider, &Bytes::from_static(&[0x02, 0xc1, 0xff])).await;
    assert!(code < 0 && !message.is_empty(), "{code}: {message}");

    // Fill the gap (alice 1) and add carol 0: the pool holds four pending transactions, and
    // a fifth that pays less than any of them is refused.
    let _ = provider
        .send_raw_transaction(&sign(&alice, tx1559(1, fee, 3 * gwei, 21_000)))
        .await
        .unwrap();
    let carol = dev_signer(2).unwrap();
    let _ = provider
        .send_raw_transaction(&sign(&carol, tx1559(0, fee, 3 * gwei, 21_000)))
        .await
        .unwrap();
    let dave = dev_signer(3).unwrap();
    let (code, message) =
        rejection(&provider, &sign(&dave, tx1559(0, fee, 2 * gwei, 21_000))).await;
    assert!(
        message.contains("txpool is full") || message.contains("transaction underpriced"),
        "{code}: {message}"
    );

    // The node still serves.
    assert_eq!(provider.get_chain_id().await.unwrap(), 1337);
}

/// A nonce below the committed one, on a node with fast blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonce_too_low_names_both_nonces() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "50ms"]);
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    let alice = dev_signer(0).unwrap();
    let fee = 10_000_000_000u128;
    for nonce in 0..3 {
        provider
            .send_raw_transaction(&sign(&alice, tx1559(nonce, fee, 1_000_000_000, 21_000)))
            .await
            .unwrap()
            .get_receipt()
            .await
            .unwrap();
    }
    let (_, message) = rejection(
        &provider,
        &sign(&alice, tx1559(1, fee * 2, 2_000_000_000, 21_000)),
    )
    .await;
    assert!(
        message.contains("nonce too low: next nonce 3, tx nonce 1"),
        "{message}"
    );
}

/// Raw HTTP: malformed JSON, an unknown method, bad hex, a huge body, a batch over the limit;
/// the node answers each with a JSON-RPC error (or 413 for the body) and keeps serving.
#[test]
fn malformed_requests_get_errors_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(
        &dir.path().join("node"),
        &[
            "--block-time",
            "1s",
            "--rpc.max-batch",
            "10",
            "--rpc.max-request-size",
            "100000",
        ],
    );
    let addr = node.url.trim_start_matches("http://").to_string();
    let post = |body: &[u8]| -> (u16, String) {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = format!(
            "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        let _ = s.write_all(body);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        let status = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, out)
    };
    let ok = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

    let (_, out) = post(b"{not json");
    assert!(out.contains("-32700"), "parse error: {out}");
    let (_, out) = post(br#"{"jsonrpc":"2.0","id":1,"method":"eth_fooBar","params":[]}"#);
    assert!(
        out.contains("-32601") && out.contains("eth_fooBar"),
        "unknown method: {out}"
    );
    let (_, out) =
        post(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0xzz","latest"]}"#);
    assert!(out.contains("-32602"), "bad hex: {out}");
    let (_, out) = post(
        br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x02c1ff"]}"#,
    );
    assert!(out.contains("\"error\""), "bad RLP: {out}");
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x{}"]}}"#,
        "ab".repeat(200_000)
    );
    let (status, out) = post(huge.as_bytes());
    assert!(
        status == 413 || out.contains("\"error\""),
        "huge body: {status} {out}"
    );
    let batch = format!("[{}]", [ok; 11].join(","));
    let (_, out) = post(batch.as_bytes());
    assert!(out.contains("\"error\""), "batch over the limit: {out}");
    let batch = format!("[{}]", [ok; 10].join(","));
    let (_, out) = post(batch.as_bytes());
    assert_eq!(
        out.matches("0x539").count(),
        10,
        "a batch within the limit: {out}"
    );
    let (status, out) = post(ok.as_bytes());
    assert_eq!(status, 200);
    assert!(out.contains("0x539"), "still serving: {out}");
}

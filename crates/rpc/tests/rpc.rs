//! The RPC layer end to end over loopback: the real alloy provider over HTTP and WebSocket for
//! every method and subscription, and hand-made HTTP requests for the error paths.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use alloy_eips::eip2718::Encodable2718;
use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_provider::{Provider, ProviderBuilder, WsConnect};
use alloy_rpc_types_eth::state::{AccountOverride, StateOverride};
use alloy_rpc_types_eth::{
    BlockOverrides, BlockTransactions, Filter, SyncStatus, TransactionRequest,
};
use alloy_sol_types::{Revert, SolError};
use common::*;
use futures::StreamExt;
use gigas_rpc::{HttpRoutes, PrestateTrace, RpcConfig, RpcHandle, RpcServer, SubscriptionBuffers};
use serde_json::json;

async fn start(config: RpcConfig, backend: Arc<TestBackend>) -> RpcHandle {
    RpcServer::start(config, backend)
        .await
        .expect("the server starts on a free port")
}

fn config() -> RpcConfig {
    RpcConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..RpcConfig::default()
    }
}

fn code_of(err: &alloy_provider::transport::TransportError) -> (i64, String) {
    let resp = err
        .as_error_resp()
        .unwrap_or_else(|| panic!("a JSON-RPC error answer, got {err}"));
    (resp.code, resp.message.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_through_the_alloy_provider_over_http() {
    let backend = TestBackend::new(3, SubscriptionBuffers::default());
    let handle = start(config(), backend.clone()).await;
    let url = handle.http_url().parse().expect("a valid URL");
    let provider = ProviderBuilder::new().connect_http(url);
    let sender = signer().address();

    // Identity and head.
    assert_eq!(
        provider.get_client_version().await.expect("clientVersion"),
        CLIENT
    );
    assert_eq!(
        provider.get_net_version().await.expect("net_version"),
        CHAIN_ID
    );
    assert_eq!(provider.get_chain_id().await.expect("chainId"), CHAIN_ID);
    assert_eq!(provider.get_block_number().await.expect("blockNumber"), 3);
    assert_eq!(provider.syncing().await.expect("syncing"), SyncStatus::None);
    assert!(provider.get_accounts().await.expect("accounts").is_empty());

    // State at the head and at older blocks.
    let cost = U256::from(VALUE + 21_000 * GAS_PRICE as u64);
    let at = |n: u64| U256::from(INITIAL) - cost * U256::from(n);
    assert_eq!(provider.get_balance(sender).await.expect("balance"), at(3));
    for n in 0..=3u64 {
        let balance = provider
            .get_balance(sender)
            .block_id(BlockId::number(n))
            .await
            .expect("balance at an older block");
        assert_eq!(balance, at(n), "balance after block {n}");
    }
    let by_hash = provider
        .get_balance(sender)
        .block_id(BlockId::hash(backend.block_hash(1)))
        .await
        .expect("balance by block hash");
    assert_eq!(by_hash, at(1));
    let future = provider
        .get_balance(sender)
        .block_id(BlockId::number(50))
        .await
        .expect_err("no state beyond the head");
    assert_eq!(code_of(&future), (-32000, "header not found".into()));
    assert_eq!(
        provider.get_transaction_count(sender).await.expect("nonce"),
        3
    );
    assert_eq!(
        provider
            .get_transaction_count(sender)
            .block_id(BlockId::number(1))
            .await
            .expect("nonce at block 1"),
        1
    );
    assert_eq!(
        provider.get_code_at(CONTRACT).await.expect("code"),
        contract_code()
    );
    assert_eq!(
        provider
            .get_storage_at(CONTRACT, U256::from(1))
            .await
            .expect("storage"),
        U256::from(0x99)
    );

    // eth_call: plain, at a block, with state and block overrides, and a revert with its data.
    let call = TransactionRequest::default().from(sender).to(sender);
    let out = provider
        .call(call.clone())
        .block(BlockId::number(2))
        .await
        .expect("eth_call at block 2");
    assert_eq!(U256::from_be_slice(&out), at(2));
    let overridden = Bytes::from_static(&[0xfe, 0xed]);
    let mut state = StateOverride::default();
    state.insert(
        sender,
        AccountOverride {
            code: Some(overridden.clone()),
            ..Default::default()
        },
    );
    let out = provider
        .call(call.clone())
        .overrides(state)
        .await
        .expect("eth_call with a state override");
    assert_eq!(out, overridden);
    let out = provider
        .call(call.clone())
        .with_block_overrides(BlockOverrides {
            number: Some(U256::from(77)),
            ..Default::default()
        })
        .await
        .expect("eth_call with a block override");
    assert_eq!(U256::from_be_slice(&out), U256::from(77));
    let reverting = call.clone().input(Bytes::from_static(&REVERT_INPUT).into());
    let err = provider
        .call(reverting.clone())
        .await
        .expect_err("the call reverts");
    assert_eq!(code_of(&err), (3, "execution reverted: boom".into()));
    let data = err
        .as_error_resp()
        .and_then(|e| e.as_revert_data())
        .expect("revert data");
    assert_eq!(data, Bytes::from(Revert::from("boom").abi_encode()));

    // Gas and fees.
    assert_eq!(
        provider
            .estimate_gas(call.clone().input(Bytes::from_static(&[1, 2]).into()))
            .await
            .expect("estimateGas"),
        21_032
    );
    let err = provider
        .estimate_gas(reverting)
        .await
        .expect_err("estimating a reverting call fails");
    assert_eq!(code_of(&err).0, 3);
    assert_eq!(provider.get_gas_price().await.expect("gasPrice"), GAS_PRICE);
    assert_eq!(
        provider
            .get_max_priority_fee_per_gas()
            .await
            .expect("maxPriorityFeePerGas"),
        TIP
    );
    let history = provider
        .get_fee_history(2, BlockNumberOrTag::Latest, &[25.0, 75.0])
        .await
        .expect("feeHistory");
    assert_eq!(history.oldest_block, 2);
    assert_eq!(history.base_fee_per_gas.len(), 3);
    assert_eq!(history.reward, Some(vec![vec![TIP, TIP]; 2]));
    // Asking for more blocks than exist is clamped, as geth does.
    let history = provider
        .get_fee_history(100, BlockNumberOrTag::Number(1), &[])
        .await
        .expect("feeHistory clamped");
    assert_eq!((history.oldest_block, history.gas_used_ratio.len()), (0, 2));
    assert_eq!(history.reward, None);
    let err = provider
        .get_fee_history(2, BlockNumberOrTag::Latest, &[75.0, 25.0])
        .await
        .expect_err("percentiles must ascend");
    assert_eq!(code_of(&err).0, -32602);

    // Blocks by number (every tag), by hash, with hashes or full transactions.
    let latest = provider
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await
        .expect("latest block")
        .expect("latest exists");
    assert_eq!(latest.header.number, 3);
    assert_eq!(latest.header.hash, backend.head_hash());
    assert!(matches!(latest.transactions, BlockTransactions::Hashes(ref h) if h.len() == 1));
    let full = provider
        .get_block_by_number(BlockNumberOrTag::Number(2))
        .full()
        .await
        .expect("full block")
        .expect("block 2 exists");
    let BlockTransactions::Full(txs) = &full.transactions else {
        panic!("full transactions asked for, got {:?}", full.transactions)
    };
    assert_eq!(txs[0].inner.signer(), sender);
    assert_eq!(*txs[0].inner.tx_hash(), backend.tx_hash(2));
    for (tag, number) in [
        (BlockNumberOrTag::Earliest, 0),
        (BlockNumberOrTag::Pending, 3),
        (BlockNumberOrTag::Safe, 3),
        (BlockNumberOrTag::Finalized, 3),
    ] {
        let block = provider
            .get_block_by_number(tag)
            .await
            .expect("block by tag")
            .expect("tagged block exists");
        assert_eq!(block.header.number, number, "{tag}");
    }
    assert!(provider
        .get_block_by_number(BlockNumberOrTag::Number(99))
        .await
        .expect("a block beyond the head is null")
        .is_none());
    let by_hash = provider
        .get_block_by_hash(backend.block_hash(1))
        .full()
        .await
        .expect("block by hash")
        .expect("block 1 exists");
    assert_eq!(by_hash.header.number, 1);
    assert!(provider
        .get_block_by_hash(B256::repeat_byte(0xab))
        .await
        .expect("an unknown hash is null")
        .is_none());
    assert_eq!(
        provider
            .get_block_transaction_count_by_number(BlockNumberOrTag::Number(1))
            .await
            .expect("count by number"),
        Some(1)
    );
    assert_eq!(
        provider
            .get_block_transaction_count_by_number(BlockNumberOrTag::Earliest)
            .await
            .expect("count of genesis"),
        Some(0)
    );
    assert_eq!(
        provider
            .get_block_transaction_count_by_hash(backend.block_hash(2))
            .await
            .expect("count by hash"),
        Some(1)
    );

    // Transactions and receipts.
    let hash = backend.tx_hash(1);
    let tx = provider
        .get_transaction_by_hash(hash)
        .await
        .expect("tx by hash")
        .expect("mined tx");
    assert_eq!((tx.block_number, tx.inner.signer()), (Some(1), sender));
    assert!(provider
        .get_transaction_by_hash(B256::repeat_byte(1))
        .await
        .expect("unknown tx")
        .is_none());
    let receipt = provider
        .get_transaction_receipt(hash)
        .await
        .expect("receipt")
        .expect("mined receipt");
    assert!(receipt.status());
    assert_eq!((receipt.block_number, receipt.gas_used), (Some(1), 21_000));
    assert_eq!(receipt.inner.logs().len(), 1);
    let receipts = provider
        .get_block_receipts(BlockId::number(2))
        .await
        .expect("block receipts")
        .expect("block 2 exists");
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0].transaction_hash, backend.tx_hash(2));
    assert!(provider
        .get_block_receipts(BlockId::number(42))
        .await
        .expect("receipts beyond the head")
        .is_none());

    // Logs: range, address, topics, block hash, bounds.
    let all = provider
        .get_logs(
            &Filter::new()
                .from_block(0)
                .to_block(BlockNumberOrTag::Latest),
        )
        .await
        .expect("all logs");
    assert_eq!(all.len(), 3);
    assert_eq!(
        all.iter().map(|l| l.block_number).collect::<Vec<_>>(),
        vec![Some(1), Some(2), Some(3)]
    );
    let second = provider
        .get_logs(
            &Filter::new()
                .from_block(0)
                .address(EMITTER)
                .event_signature(TOPIC)
                .topic1(B256::from(U256::from(2))),
        )
        .await
        .expect("logs by topic");
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].transaction_hash, Some(backend.tx_hash(2)));
    let none = provider
        .get_logs(&Filter::new().from_block(0).address(Address::repeat_byte(7)))
        .await
        .expect("logs of another address");
    assert!(none.is_empty());
    let at_hash = provider
        .get_logs(&Filter::new().at_block_hash(backend.block_hash(3)))
        .await
        .expect("logs by block hash");
    assert_eq!(at_hash.len(), 1);
    // An end beyond the head is clamped to the head, as geth does.
    let clamped = provider
        .get_logs(&Filter::new().from_block(2).to_block(20_000))
        .await
        .expect("logs up to beyond the head");
    assert_eq!(clamped.len(), 2);

    // debug_traceBlockByNumber with the prestate tracer, and a clear error for other tracers.
    let traces: Vec<PrestateTrace> = provider
        .raw_request(
            "debug_traceBlockByNumber".into(),
            (
                BlockNumberOrTag::Number(2),
                json!({"tracer": "prestateTracer"}),
            ),
        )
        .await
        .expect("prestate trace");
    assert_eq!(traces.len(), 1);
    assert_eq!(traces[0].tx_hash, backend.tx_hash(2));
    assert_eq!(traces[0].result[&sender].nonce, 1);
    assert_eq!(traces[0].result[&sender].balance, at(1));
    let err = provider
        .raw_request::<_, serde_json::Value>(
            "debug_traceBlockByNumber".into(),
            (BlockNumberOrTag::Number(2), json!({"tracer": "callTracer"})),
        )
        .await
        .expect_err("only the prestate tracer");
    let (code, message) = code_of(&err);
    assert_eq!(code, -32602);
    assert!(
        message.contains("callTracer") && message.contains("prestateTracer"),
        "{message}"
    );

    // eth_sendRawTransaction: accepted (pending nonce moves), then a rejection in the pool's words.
    let raw = signed_transfer(&signer(), 3).encoded_2718();
    let pending = provider
        .send_raw_transaction(&raw)
        .await
        .expect("a fresh transaction is accepted");
    assert_eq!(
        provider
            .get_transaction_count(sender)
            .pending()
            .await
            .expect("pending nonce"),
        4
    );
    assert_eq!(
        provider.get_transaction_count(sender).await.expect("nonce"),
        3
    );
    assert_eq!(backend.mine(), 4);
    let receipt = provider
        .get_transaction_receipt(*pending.tx_hash())
        .await
        .expect("receipt of the sent tx")
        .expect("mined");
    assert_eq!(receipt.block_number, Some(4));
    let stale = signed_transfer(&signer(), 1).encoded_2718();
    let err = provider
        .send_raw_transaction(&stale)
        .await
        .expect_err("a used nonce is refused");
    assert_eq!(
        code_of(&err),
        (-32000, "nonce too low: next nonce 4, tx nonce 1".into())
    );
    handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_bounds_answer_limit_exceeded() {
    let backend = TestBackend::new(4, SubscriptionBuffers::default());
    let handle = start(
        RpcConfig {
            max_log_block_range: 2,
            max_log_results: 2,
            ..config()
        },
        backend,
    )
    .await;
    let provider = ProviderBuilder::new().connect_http(handle.http_url().parse().expect("URL"));
    let err = provider
        .get_logs(&Filter::new().from_block(1).to_block(3))
        .await
        .expect_err("three blocks over a bound of two");
    assert_eq!(
        code_of(&err),
        (-32005, "query exceeds max block range 2".into())
    );
    let ok = provider
        .get_logs(&Filter::new().from_block(2).to_block(3))
        .await
        .expect("two blocks");
    assert_eq!(ok.len(), 2);
    let err = provider
        .get_logs(&Filter::new().from_block(3).to_block(4).address(EMITTER))
        .await;
    assert_eq!(err.expect("two logs are within the bound").len(), 2);
    let handle2 = start(
        RpcConfig {
            max_log_results: 1,
            ..config()
        },
        TestBackend::new(4, SubscriptionBuffers::default()),
    )
    .await;
    let provider2 = ProviderBuilder::new().connect_http(handle2.http_url().parse().expect("URL"));
    let err = provider2
        .get_logs(&Filter::new().from_block(0))
        .await
        .expect_err("four logs over a bound of one");
    assert_eq!(
        code_of(&err),
        (-32005, "query returned more than 1 results".into())
    );
    let err = provider2
        .get_logs(&Filter::new().from_block(3).to_block(1))
        .await
        .expect_err("from after to");
    assert_eq!(code_of(&err).0, -32602);
    // A range that starts beyond the head finds nothing.
    assert!(provider2
        .get_logs(&Filter::new().from_block(100).to_block(200))
        .await
        .expect("empty")
        .is_empty());
    handle.stop();
    handle2.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_over_websocket() {
    let backend = TestBackend::new(2, SubscriptionBuffers::default());
    let handle = start(config(), backend.clone()).await;
    let provider = ProviderBuilder::new()
        .connect_ws(WsConnect::new(handle.ws_url()))
        .await
        .expect("WebSocket connects");

    // Plain calls work over WebSocket too.
    assert_eq!(provider.get_block_number().await.expect("blockNumber"), 2);

    let mut heads = provider
        .subscribe_blocks()
        .await
        .expect("newHeads")
        .into_stream();
    let mut logs = provider
        .subscribe_logs(&Filter::new().address(EMITTER).event_signature(TOPIC))
        .await
        .expect("logs")
        .into_stream();
    let mut other_logs = provider
        .subscribe_logs(&Filter::new().address(Address::repeat_byte(9)))
        .await
        .expect("logs of another address")
        .into_stream();
    let mut pending = provider
        .subscribe_pending_transactions()
        .await
        .expect("newPendingTransactions")
        .into_stream();
    assert_eq!(handle.metrics().active_subscriptions("newHeads"), 1);
    assert_eq!(handle.metrics().active_subscriptions("logs"), 2);
    assert!(handle.metrics().open_connections() >= 1);

    let raw = signed_transfer(&signer(), 2).encoded_2718();
    let sent = provider
        .send_raw_transaction(&raw)
        .await
        .expect("send over WebSocket");
    let wait = Duration::from_secs(60);
    let hash = tokio::time::timeout(wait, pending.next())
        .await
        .expect("a pending hash arrives")
        .expect("stream open");
    assert_eq!(hash, *sent.tx_hash());

    assert_eq!(backend.mine(), 3);
    let head = tokio::time::timeout(wait, heads.next())
        .await
        .expect("a head arrives")
        .expect("stream open");
    assert_eq!(head.number, 3);
    assert_eq!(head.hash, backend.head_hash());
    let log = tokio::time::timeout(wait, logs.next())
        .await
        .expect("a log arrives")
        .expect("stream open");
    assert_eq!(log.transaction_hash, Some(*sent.tx_hash()));
    assert_eq!(log.block_number, Some(3));

    // An empty block: a head, no logs; the next block's log is the next one received.
    assert_eq!(backend.mine(), 4);
    let head = tokio::time::timeout(wait, heads.next())
        .await
        .expect("a head arrives")
        .expect("stream open");
    assert_eq!(head.number, 4);
    let raw = signed_transfer(&signer(), 3).encoded_2718();
    let _sent = provider.send_raw_transaction(&raw).await.expect("send");
    assert_eq!(backend.mine(), 5);
    let log = tokio::time::timeout(wait, logs.next())
        .await
        .expect("a log arrives")
        .expect("stream open");
    assert_eq!(log.block_number, Some(5));
    // The filter of the other subscription matched nothing in blocks 3..=5.
    assert!(futures::FutureExt::now_or_never(other_logs.next()).is_none());

    // Bad subscription parameters are refused, the connection keeps serving.
    let err = provider
        .raw_request::<_, serde_json::Value>("eth_subscribe".into(), ("syncing",))
        .await
        .expect_err("syncing is not served");
    assert!(code_of(&err).1.contains("syncing"), "{err}");
    let err = provider
        .raw_request::<_, serde_json::Value>("eth_foo".into(), ())
        .await
        .expect_err("no such method");
    assert_eq!(
        code_of(&err),
        (
            -32601,
            "the method eth_foo does not exist/is not available".into()
        )
    );
    assert_eq!(provider.get_block_number().await.expect("still serving"), 5);
    handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_json_rpc_errors_and_the_server_keeps_serving() {
    let backend = TestBackend::new(2, SubscriptionBuffers::default());
    let handle = start(
        RpcConfig {
            max_request_body_bytes: 16 * 1024,
            max_batch_size: 5,
            ..config()
        },
        backend,
    )
    .await;
    let addr = handle.local_addr();
    let rpc = |addr, v: serde_json::Value| tokio::task::spawn_blocking(move || rpc_json(addr, &v));

    // Unknown method: -32601 naming it.
    let (status, v) = rpc(
        addr,
        json!({"jsonrpc":"2.0","id":1,"method":"eth_foo","params":[]}),
    )
    .await
    .expect("request");
    assert_eq!(status, 200);
    assert_eq!(v["error"]["code"], -32601, "{v}");
    assert_eq!(
        v["error"]["message"],
        "the method eth_foo does not exist/is not available"
    );
    assert_eq!(v["id"], 1);
    assert_serving(addr);

    // Malformed JSON: -32700.
    let (_, body) =
        tokio::task::spawn_blocking(move || http_post(addr, b"{\"jsonrpc\":\"2.0\",\"id\":1,"))
            .await
            .expect("request");
    let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON answer");
    assert_eq!(v["error"]["code"], -32700, "{v}");
    let (status, body) = tokio::task::spawn_blocking(move || http_post(addr, b"not json at all"))
        .await
        .expect("request");
    let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON answer");
    assert_eq!(
        (status, v["error"]["code"].clone()),
        (400, json!(-32700)),
        "{v}"
    );
    assert_serving(addr);

    // Bad hex: -32602.
    let (_, v) = rpc(
        addr,
        json!({"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":["0xzz", "latest"]}),
    )
    .await
    .expect("request");
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let (_, v) = rpc(
        addr,
        json!({"jsonrpc":"2.0","id":3,"method":"eth_sendRawTransaction","params":["0x12g4"]}),
    )
    .await
    .expect("request");
    assert_eq!(v["error"]["code"], -32602, "{v}");
    // Bytes that are hex but no transaction: the backend's decode error, also -32602.
    let (_, v) = rpc(
        addr,
        json!({"jsonrpc":"2.0","id":4,"method":"eth_sendRawTransaction","params":["0x02c0ffee"]}),
    )
    .await
    .expect("request");
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_serving(addr);

    // An oversized body: HTTP 413 with a JSON-RPC error.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"eth_sendRawTransaction\",\"params\":[\"0x{}\"]}}",
        "00".repeat(20 * 1024)
    );
    let (status, body) = tokio::task::spawn_blocking(move || http_post(addr, huge.as_bytes()))
        .await
        .expect("request");
    assert_eq!(status, 413, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON answer");
    assert!(v["error"]["code"].is_i64(), "{v}");
    assert_serving(addr);

    // A batch over the limit: one error; a batch within it: one answer each, unknown methods
    // named in theirs.
    let call = |id: u64, method: &str| json!({"jsonrpc":"2.0","id":id,"method":method,"params":[]});
    let too_many: Vec<_> = (0..6).map(|i| call(i, "eth_blockNumber")).collect();
    let (_, v) = rpc(addr, json!(too_many)).await.expect("request");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("batch")),
        "{v}"
    );
    let batch = json!([
        call(1, "eth_chainId"),
        call(2, "eth_nope"),
        call(3, "eth_blockNumber")
    ]);
    let (_, v) = rpc(addr, batch).await.expect("request");
    let answers = v.as_array().expect("a batch answer");
    assert_eq!(answers.len(), 3, "{v}");
    let by_id = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("answer {id} in {v}"))
    };
    assert_eq!(by_id(1)["result"], "0x539");
    assert_eq!(
        by_id(2)["error"]["message"],
        "the method eth_nope does not exist/is not available"
    );
    assert_eq!(by_id(3)["result"], "0x2");
    assert_serving(addr);

    // A revert: code 3, the decoded reason, the output as data.
    let (_, v) = rpc(
        addr,
        json!({"jsonrpc":"2.0","id":6,"method":"eth_call","params":[{"to": format!("{CONTRACT}"), "data":"0xdead"}, "latest"]}),
    )
    .await
    .expect("request");
    assert_eq!(v["error"]["code"], 3, "{v}");
    assert_eq!(v["error"]["message"], "execution reverted: boom");
    assert_eq!(
        v["error"]["data"],
        alloy_primitives::hex::encode_prefixed(Revert::from("boom").abi_encode())
    );
    assert_serving(addr);

    // Metrics saw the calls, by method and by error code.
    assert!(handle.metrics().requests("eth_blockNumber") >= 5);
    assert!(handle.metrics().requests("unknown") >= 2);
    assert!(handle.metrics().errors(-32601) >= 2);
    assert!(handle.metrics().errors(3) >= 1);
    let mut registry = prometheus_client::registry::Registry::default();
    handle.metrics().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode metrics");
    for needle in [
        "gigas_rpc_requests_total{method=\"eth_blockNumber\"}",
        "gigas_rpc_request_duration_seconds_bucket{",
        "gigas_rpc_errors_total{code=\"-32601\"}",
        "gigas_rpc_open_connections",
    ] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
    handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_routes_share_the_port() {
    let backend = TestBackend::new(1, SubscriptionBuffers::default());
    let routes = axum::Router::new().route(
        "/diffs/{n}",
        axum::routing::get(
            |axum::extract::Path(n): axum::extract::Path<u64>| async move { format!("diff {n}") },
        ),
    );
    let handle = RpcServer::start_with_routes(config(), backend, HttpRoutes::new(routes))
        .await
        .expect("start");
    let addr = handle.local_addr();
    let (status, body) =
        tokio::task::spawn_blocking(move || http_request(addr, "GET", "/diffs/17", b""))
            .await
            .expect("request");
    assert_eq!((status, body.as_str()), (200, "diff 17"));
    let (status, _) =
        tokio::task::spawn_blocking(move || http_request(addr, "GET", "/nothing", b""))
            .await
            .expect("request");
    assert_eq!(status, 404);
    // JSON-RPC over HTTP and WebSocket still answer on the same port.
    assert_serving(addr);
    let ws = ProviderBuilder::new()
        .connect_ws(WsConnect::new(handle.ws_url()))
        .await
        .expect("WebSocket connects");
    assert_eq!(ws.get_block_number().await.expect("blockNumber"), 1);
    // The raw HTTP connections close; the upgraded WebSocket one stays counted.
    let mut open = handle.metrics().open_connections();
    for _ in 0..600 {
        if open == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        open = handle.metrics().open_connections();
    }
    assert_eq!(open, 1, "the open WebSocket connection is not counted");
    // Once every client is gone, the WebSocket connection included, the gauge is back at zero.
    drop(ws);
    open = handle.metrics().open_connections();
    for _ in 0..600 {
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        open = handle.metrics().open_connections();
    }
    assert_eq!(open, 0, "connections still counted after every client left");
    handle.stop();
}

/// A raw WebSocket connection to `addr` that sends the `eth_subscribe` calls `params` (each a
/// JSON array of the call's params), reads their answers, and is then never read again: a
/// client that stopped reading.
async fn stuck_subscriber(addr: SocketAddr, params: Vec<String>) -> std::net::TcpStream {
    use std::io::{Read, Write};
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        let upgrade = format!(
            "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        s.write_all(upgrade.as_bytes()).expect("handshake");
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).expect("handshake answer");
        let answer = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
        for (id, params) in params.iter().enumerate() {
            let payload = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_subscribe","params":{params}}}"#
            );
            assert!(payload.len() < 126, "one short frame");
            // One masked text frame (client frames must be masked; a zero mask keeps it
            // readable).
            let mut frame = vec![0x81, 0x80 | payload.len() as u8, 0, 0, 0, 0];
            frame.extend_from_slice(payload.as_bytes());
            s.write_all(&frame).expect("subscribe");
        }
        // The answers: unmasked text frames whose results are geth-style hex ids.
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut answers = Vec::new();
        let count = |a: &[u8]| a.windows(11).filter(|w| w == br#""result":"0"#).count();
        while count(&answers) < params.len() || !answers.ends_with(b"}") {
            let n = s.read(&mut buf).expect("subscription answers");
            assert!(n > 0, "connection closed");
            answers.extend_from_slice(&buf[..n]);
        }
        s
    })
    .await
    .expect("connect task")
}

/// Waits up to 30 s for `kind`'s active subscriptions to reach `n`.
async fn wait_active(handle: &RpcHandle, kind: &'static str, n: i64) {
    for _ in 0..600 {
        if handle.metrics().active_subscriptions(kind) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} active {kind} subscriptions, not {n}",
        handle.metrics().active_subscriptions(kind)
    );
}

/// A WebSocket client that subscribes to newHeads and then never reads, while heads come at
/// block rate: the server must drop the subscription once its notification has waited for
/// the client for the send timeout, not wait forever. (Published faster than the socket
/// fills, the broadcast buffer's overflow alone would drop it; at block rate the subscription
/// sits in its send and never sees the overflow.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_dropped() {
    use std::io::Read;

    let backend = TestBackend::new(
        1,
        SubscriptionBuffers {
            heads: 4,
            ..SubscriptionBuffers::default()
        },
    );
    let handle = start(
        RpcConfig {
            message_buffer_capacity: 4,
            subscription_send_timeout: Duration::from_millis(500),
            ..config()
        },
        backend.clone(),
    )
    .await;
    let addr = handle.local_addr();
    let mut stream = stuck_subscriber(addr, vec![r#"["newHeads"]"#.to_string()]).await;
    wait_active(&handle, "newHeads", 1).await;

    // Heads of 512 KiB of JSON each at 20 blocks a second, for at most 60 s: loopback's socket
    // buffers (a few MiB) and the connection's 4 messages fill within a second or two.
    let mut header = backend
        .subscribe_heads_for_test()
        .expect("a head to republish");
    header.inner.extra_data = Bytes::from(vec![0x55; 256 << 10]);
    let mut dropped = false;
    for round in 0..1_200u64 {
        header.inner.number = round;
        backend.hub.publish_head(header.clone());
        tokio::time::sleep(Duration::from_millis(50)).await;
        if handle.metrics().active_subscriptions("newHeads") == 0 {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "a subscriber that does not read was kept");
    assert_eq!(handle.metrics().dropped_subscriptions("newHeads"), 1);
    assert_serving(addr);
    // The client can still read what was sent before the drop.
    let _ = stream.set_nonblocking(true);
    let mut sink = vec![0u8; 1 << 16];
    let _ = stream.read(&mut sink);
    handle.stop();
}

/// 1,000 logs subscriptions (10 connections of 100) that never read, while blocks of 3,000
/// logs come four a second: every subscription is dropped, and the process's resident memory
/// stays within a bound. Before, each subscription waited forever in its send holding its own
/// copy of a block's matching logs (a dev sequencer's grew from 47 MiB to 1,289 MiB so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_stuck_log_subscriptions_are_dropped_within_a_memory_bound() {
    const CONNECTIONS: usize = 10;
    const PER_CONNECTION: usize = 100;
    const LOGS: usize = 3_000;
    /// The bound on the resident memory the run may add: the broadcast channel's 64 blocks
    /// of logs (about 0.5 KiB each in memory, so some 100 MiB), the connections' buffers (1,024
    /// notifications of under 1 KiB each) and the sockets', and the allocator's slack.
    const BOUND: u64 = 384 << 20;

    let backend = TestBackend::new(1, SubscriptionBuffers::default());
    let handle = start(
        RpcConfig {
            subscription_send_timeout: Duration::from_secs(1),
            ..config()
        },
        backend.clone(),
    )
    .await;
    let addr = handle.local_addr();
    let mut streams = Vec::new();
    for _ in 0..CONNECTIONS {
        let params = vec![r#"["logs",{}]"#.to_string(); PER_CONNECTION];
        streams.push(stuck_subscriber(addr, params).await);
    }
    wait_active(&handle, "logs", (CONNECTIONS * PER_CONNECTION) as i64).await;

    let log = |i: usize| alloy_rpc_types_eth::Log {
        inner: alloy_primitives::Log {
            address: EMITTER,
            data: alloy_primitives::LogData::new_unchecked(
                vec![TOPIC, B256::from(U256::from(i))],
                Bytes::from(vec![0xab; 64]),
            ),
        },
        block_hash: Some(B256::repeat_byte(0x11)),
        block_number: Some(7),
        block_timestamp: Some(1),
        transaction_hash: Some(B256::from(U256::from(i))),
        transaction_index: Some(i as u64),
        log_index: Some(i as u64),
        removed: false,
    };
    let block: Vec<_> = (0..LOGS).map(log).collect();
    let resident = || gigas_primitives::machine::resident_bytes().expect("VmRSS");
    let before = resident();
    let mut peak = before;
    let mut all_dropped = false;
    // Four blocks a second for at most 60 s.
    for _ in 0..240 {
        backend.hub.publish_logs(block.clone());
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            peak = peak.max(resident());
        }
        if handle.metrics().active_subscriptions("logs") == 0 {
            all_dropped = true;
            break;
        }
    }
    let grew = peak.saturating_sub(before);
    eprintln!(
        "resident {} MiB before, peak {} MiB (+{} MiB); {} of {} subscriptions dropped",
        before >> 20,
        peak >> 20,
        grew >> 20,
        handle.metrics().dropped_subscriptions("logs"),
        CONNECTIONS * PER_CONNECTION
    );
    assert!(
        all_dropped,
        "{} stuck logs subscriptions still held",
        handle.metrics().active_subscriptions("logs")
    );
    assert_eq!(
        handle.metrics().dropped_subscriptions("logs"),
        (CONNECTIONS * PER_CONNECTION) as u64
    );
    assert!(
        grew <= BOUND,
        "resident memory grew by {} MiB, over the {} MiB bound",
        grew >> 20,
        BOUND >> 20
    );
    assert_serving(addr);
    drop(streams);
    handle.stop();
}

/// `Header` of the current head, for the lag test.
trait HeadForTest {
    fn subscribe_heads_for_test(&self) -> Option<alloy_rpc_types_eth::Header>;
}

impl HeadForTest for TestBackend {
    fn subscribe_heads_for_test(&self) -> Option<alloy_rpc_types_eth::Header> {
        use gigas_rpc::Backend;
        self.block(self.latest(), false)
            .ok()
            .flatten()
            .map(|b| b.header)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_zero_reports_the_bound_port_and_a_taken_port_is_a_typed_error() {
    let backend = TestBackend::new(0, SubscriptionBuffers::default());
    let handle = start(config(), backend.clone()).await;
    assert_ne!(handle.local_addr().port(), 0);
    let err = RpcServer::start(
        RpcConfig {
            listen: handle.local_addr(),
            ..RpcConfig::default()
        },
        backend,
    )
    .await
    .expect_err("the port is taken");
    assert!(matches!(err, gigas_rpc::RpcError::Bind { .. }), "{err}");
    handle.stop();
}

/// Each client address holds at most `max_connections_per_address` connections, a JSON-RPC
/// WebSocket among them for its whole session; one more is answered 429 and closed, and a
/// place comes back when a connection closes. Loopback is exempt unless configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded_per_client_address() {
    let backend = TestBackend::new(2, SubscriptionBuffers::default());
    let handle = start(
        RpcConfig {
            max_connections_per_address: 3,
            limit_loopback: true,
            ..config()
        },
        backend.clone(),
    )
    .await;
    let addr = handle.local_addr();
    let ws = ProviderBuilder::new()
        .connect_ws(WsConnect::new(handle.ws_url()))
        .await
        .expect("WebSocket connects");
    assert_eq!(ws.get_block_number().await.unwrap(), 2);
    let idle: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let ask = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}"#;
    let post = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{ask}",
        ask.len()
    );
    let answer = tokio::task::spawn_blocking({
        let post = post.clone();
        move || raw_request(addr, &post)
    })
    .await
    .unwrap();
    assert!(answer.starts_with("http/1.1 429"), "{answer}");
    assert!(answer.contains("too many connections"), "{answer}");
    assert_eq!(handle.metrics().connections_refused(), 1);
    // The WebSocket still holds its place and works.
    assert_eq!(ws.get_block_number().await.unwrap(), 2);
    drop(idle);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let post = post.clone();
        let answer = tokio::task::spawn_blocking(move || raw_request(addr, &post))
            .await
            .unwrap();
        if answer.starts_with("http/1.1 200") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no place came back: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.stop();

    // Loopback exempt (the default): many connections from 127.0.0.1 are served.
    let handle = start(
        RpcConfig {
            max_connections_per_address: 3,
            ..config()
        },
        backend,
    )
    .await;
    let addr = handle.local_addr();
    let _idle: Vec<std::net::TcpStream> = (0..10)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let answer = tokio::task::spawn_blocking(move || raw_request(addr, &post))
        .await
        .unwrap();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert_eq!(handle.metrics().connections_refused(), 0);
    handle.stop();
}

/// One HTTP request over a plain socket: the status line and headers, lower-cased.
fn raw_request(addr: SocketAddr, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.to_ascii_lowercase()
}

/// `--http.corsdomain`: a browser page of an allowed origin gets its preflight answered and
/// the CORS headers on the call; another origin gets none, so the browser refuses it; with
/// no origin configured nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_headers_follow_the_configured_origins() {
    let backend = TestBackend::new(1, SubscriptionBuffers::default());
    let handle = start(
        RpcConfig {
            cors_origins: vec!["https://app.example".into()],
            ..config()
        },
        backend.clone(),
    )
    .await;
    let addr = handle.local_addr();
    let preflight = move |origin: &str| {
        format!(
            "OPTIONS / HTTP/1.1\r\nHost: {addr}\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\nConnection: close\r\n\r\n"
        )
    };
    let allowed =
        tokio::task::spawn_blocking(move || raw_request(addr, &preflight("https://app.example")))
            .await
            .unwrap();
    assert!(
        allowed.contains("access-control-allow-origin: https://app.example"),
        "{allowed}"
    );
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    let call = move |origin: &'static str| {
        format!(
            "POST / HTTP/1.1\r\nHost: {addr}\r\nOrigin: {origin}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let answer =
        tokio::task::spawn_blocking(move || raw_request(addr, &call("https://app.example")))
            .await
            .unwrap();
    assert!(
        answer.contains("access-control-allow-origin: https://app.example"),
        "{answer}"
    );
    assert!(answer.contains("\"result\""), "{answer}");
    let other =
        tokio::task::spawn_blocking(move || raw_request(addr, &call("https://evil.example")))
            .await
            .unwrap();
    assert!(!other.contains("access-control-allow-origin"), "{other}");

    let plain = start(config(), backend).await;
    let addr = plain.local_addr();
    let answer = tokio::task::spawn_blocking(move || {
        raw_request(
            addr,
            &format!(
                "POST / HTTP/1.1\r\nHost: {addr}\r\nOrigin: https://app.example\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    })
    .await
    .unwrap();
    assert!(!answer.contains("access-control-allow-origin"), "{answer}");
}

/// Issue 66, item 10, end to end: filters count against the client that installed them (its
/// address reaches the handler through the request), so one client filling its share leaves
/// the others theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_are_bounded_per_client() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let backend = TestBackend::new(1, SubscriptionBuffers::default());
    let handle = start(
        RpcConfig {
            limit_loopback: true,
            ..config()
        },
        backend.clone(),
    )
    .await;
    let addr = handle.local_addr();
    let per_client = gigas_rpc::FilterLimits::default().max_per_client;
    // One batch of `n` eth_newBlockFilter calls from `from`; the answers' errors.
    let install = move |from: &'static str, n: usize| async move {
        let calls: Vec<_> = (0..n)
            .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_newBlockFilter"}))
            .collect();
        let body = serde_json::to_vec(&calls).expect("JSON");
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(from.parse().expect("an address"))
            .expect("bind");
        let mut stream = socket.connect(addr).await.expect("connect");
        let head = format!(
            "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("send");
        stream.write_all(&body).await.expect("send");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.expect("answer");
        let text = String::from_utf8_lossy(&answer).to_string();
        let (_, body) = text.split_once("\r\n\r\n").expect("a body");
        let answers: Vec<serde_json::Value> = serde_json::from_str(body).expect("a batch answer");
        assert_eq!(answers.len(), n);
        answers
            .into_iter()
            .filter_map(|a| a.get("error").map(|e| e["message"].to_string()))
            .collect::<Vec<_>>()
    };
    let refused = install("127.0.0.2:0", per_client + 10).await;
    assert_eq!(
        refused.len(),
        10,
        "a client installed more than its {per_client} filters"
    );
    assert!(refused[0].contains("by this client"), "{}", refused[0]);
    let other = install("127.0.0.3:0", 5).await;
    assert!(other.is_empty(), "another client was refused: {other:?}");
    handle.stop();
}

/// Issue 66, item 7: a route's answer held its permit only until it was built, so clients
/// that never read pinned any number of answers; and cleartext HTTP/2 let one connection
/// hold 200 of them. Now the permit goes with the body, a connection that takes no byte for
/// the send timeout is cut (freeing its answers), files stream a piece at a time, and the
/// port speaks HTTP/1.1 only. Measured: 16 readers that never read a 64 MiB file, four of
/// them served at a time, add little resident memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_never_read_hold_bounded_memory_and_permits_only_until_cut() {
    use std::io::{Read, Write};

    const FILE: usize = 64 << 20;
    const PERMITS: u32 = 4;
    const STUCK: usize = 16;
    /// Each answer holds a piece of its file and the sockets' buffers (a few MiB each way
    /// on loopback); nothing holds a whole file.
    const BOUND: u64 = 96 << 20;

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("big");
    std::fs::write(&path, vec![0x5a; FILE]).expect("writes");
    let routes = axum::Router::new().route(
        "/file",
        axum::routing::get(move |headers: http::HeaderMap| {
            let path = path.clone();
            async move {
                let file = tokio::task::spawn_blocking(move || {
                    gigas_rpc::files::OpenFile::open(&path, b"")
                })
                .await
                .expect("opens")
                .expect("reads")
                .expect("exists");
                file.respond(&headers, "application/octet-stream", None)
            }
        }),
    );
    let handle = RpcServer::start_with_routes(
        RpcConfig {
            max_connections: PERMITS,
            send_timeout: Duration::from_secs(2),
            ..config()
        },
        TestBackend::new(1, SubscriptionBuffers::default()),
        HttpRoutes::new(routes),
    )
    .await
    .expect("start");
    let addr = handle.local_addr();
    let get = move |read: bool| {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.write_all(
            format!("GET /file HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .expect("send");
        let mut head = [0u8; 12];
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        s.read_exact(&mut head).expect("an answer");
        let status = String::from_utf8_lossy(&head[9..12]).to_string();
        if read {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        }
        (status, s)
    };

    let resident = || gigas_primitives::machine::resident_bytes().expect("VmRSS");
    let before = resident();
    // The first PERMITS readers get the file and stop reading; the rest find every permit
    // held by an answer still being sent.
    let mut stuck = Vec::new();
    let mut refused = 0;
    for _ in 0..STUCK {
        let (status, socket) = tokio::task::spawn_blocking(move || get(false))
            .await
            .expect("request");
        match status.as_str() {
            "200" => stuck.push(socket),
            "503" => refused += 1,
            other => panic!("answered {other}"),
        }
    }
    let peak = resident();
    eprintln!(
        "resident {} MiB before, {} MiB with {} stuck readers (+{} MiB); {refused} refused",
        before >> 20,
        peak >> 20,
        stuck.len(),
        peak.saturating_sub(before) >> 20
    );
    assert_eq!(
        stuck.len(),
        PERMITS as usize,
        "answers that were never read stopped holding their permits"
    );
    assert_eq!(refused, STUCK - PERMITS as usize);
    assert!(
        peak.saturating_sub(before) <= BOUND,
        "resident memory grew by {} MiB with stuck readers, over the {} MiB bound",
        peak.saturating_sub(before) >> 20,
        BOUND >> 20
    );
    // Cut at the send timeout, the stuck answers give their permits back.
    let mut served = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, _) = tokio::task::spawn_blocking(move || get(true))
            .await
            .expect("request");
        if status == "200" {
            served = true;
            break;
        }
    }
    assert!(served, "the stuck answers were never cut");
    drop(stuck);

    assert_serving(addr);
    handle.stop();
}

/// Issue 66, item 7: cleartext HTTP/2 (prior knowledge) was accepted on the port, 200
/// streams a connection, each able to hold an answer. The port speaks HTTP/1.1 only: no
/// SETTINGS frame comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_speaks_http1_only() {
    use std::io::{Read, Write};

    let handle = start(
        config(),
        TestBackend::new(1, SubscriptionBuffers::default()),
    )
    .await;
    let addr = handle.local_addr();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .expect("preface");
        // An empty SETTINGS frame.
        s.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).expect("settings");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        answer
    })
    .await
    .expect("request");
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1"),
        "the server answered HTTP/2: {:?}",
        &answer[..answer.len().min(32)]
    );
    assert_serving(addr);
    handle.stop();
}

//! `--jit.hotlist`: a real dev sequencer compiles a listed contract at its first call, far
//! below the 300,000 gas the threshold waits for, and nothing else; a malformed list stops it
//! at startup with the file and line named.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use alloy_network::{EthereumWallet, TransactionBuilder};
use alloy_primitives::{keccak256, Bytes, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_rpc_types_eth::TransactionRequest;
use common::NodeProcess;
use gigas_chain::dev_signer;

/// Runtime code: adds 1 to slot 0 and returns nothing (a few hundred gas per call).
fn runtime_code() -> Vec<u8> {
    // PUSH0 SLOAD PUSH1 1 ADD PUSH0 SSTORE STOP
    vec![0x5f, 0x54, 0x60, 0x01, 0x01, 0x5f, 0x55, 0x00]
}

/// Sends `request` through the wallet and waits for its receipt, which must be a success.
async fn send(
    provider: &impl Provider,
    request: TransactionRequest,
) -> alloy_rpc_types_eth::TransactionReceipt {
    let receipt = provider
        .send_transaction(request)
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    receipt
}

/// The value of `name` (a counter without labels) in a Prometheus text scrape.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_contract_is_compiled_at_its_first_call() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("jit-hotlist.txt");
    let runtime = runtime_code();
    std::fs::write(
        &list,
        format!(
            "# as gigas-profiler writes it\n{:#x} 0x00 counter 1.0 1.0 2.00x 8\n",
            keccak256(&runtime)
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", gigas_launch::free_port().unwrap());
    let node = NodeProcess::start(
        &dir.path().join("node"),
        &[
            "--block-time",
            "100ms",
            "--jit",
            "on",
            "--metrics",
            &addr,
            "--jit.hotlist",
            list.to_str().unwrap(),
        ],
    );
    let alice = dev_signer(0).unwrap();
    let provider = ProviderBuilder::new()
        .wallet(EthereumWallet::from(alice))
        .connect_http(node.url.parse().unwrap());
    let deploy = send(
        &provider,
        TransactionRequest::default()
            .with_deploy_code(Bytes::from(gigas_test_support::init_code(&runtime))),
    )
    .await;
    let contract = deploy.contract_address.expect("a contract was created");
    let compiled = || {
        metric(
            &common::scrape_metrics(&addr),
            "gigas_jit_contracts_compiled_total",
        )
    };
    assert_eq!(
        compiled(),
        Some(0),
        "nothing is compiled before the first call"
    );

    let call = send(&provider, TransactionRequest::default().with_to(contract)).await;
    assert!(call.gas_used < 50_000, "far below the threshold");
    // The compile runs in the background after the first call.
    let deadline = Instant::now() + Duration::from_secs(60);
    while compiled() != Some(1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(compiled(), Some(1), "the listed contract, and only it");
    // Compiled code gives the interpreter's answers.
    send(&provider, TransactionRequest::default().with_to(contract)).await;
    assert_eq!(
        provider.get_storage_at(contract, U256::ZERO).await.unwrap(),
        U256::from(2)
    );
    let scrape = common::scrape_metrics(&addr);
    assert!(
        metric(&scrape, "gigas_jit_compiled_frames_total").unwrap_or(0) >= 1,
        "the second call ran compiled code:\n{scrape}"
    );
}

#[test]
fn a_malformed_hot_list_stops_the_node_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("bad.txt");
    std::fs::write(&list, "# fine\n0x1234 not a code hash\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gigas-sequencer"))
        .args(["--dev", "--http.port", "0", "--datadir"])
        .arg(dir.path().join("node"))
        .arg("--jit.hotlist")
        .arg(&list)
        .output()
        .expect("run gigas-sequencer");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.txt") && stderr.contains("line 2"),
        "the error names the file and the line: {stderr}"
    );
}

//! A dev sequencer driven by alloy's provider over HTTP and WebSocket on 127.0.0.1, as a
//! Rust user of Gigas would drive it: every accepted transaction type, a contract deployed,
//! called and read, receipts, balances (also at an older block), blocks, logs, estimates,
//! fees, and `newHeads` / `logs` subscriptions.

mod common;

use std::time::Duration;

use alloy_consensus::{TxEip1559, TxEip2930, TxEip7702, TxLegacy};
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip7702::Authorization;
use alloy_network::{EthereumWallet, TransactionBuilder};
use alloy_primitives::{address, b256, Address, Bytes, TxKind, B256, U256};
use alloy_provider::{Provider, ProviderBuilder, WsConnect};
use alloy_rpc_types_eth::{BlockNumberOrTag, Filter, TransactionRequest};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use common::NodeProcess;
use futures::StreamExt;
use gigas_chain::dev_signer;

const CHAIN_ID: u64 = 1337;
const TOPIC: B256 = b256!("0x00000000000000000000000000000000000000000000000000000000deadbeef");

/// Runtime code: with calldata, emits LOG2(TOPIC, caller) carrying the calldata and stores
/// its first word in slot 0; always returns slot 0.
fn runtime_code() -> Vec<u8> {
    let mut code = vec![0x36, 0x15, 0x60, 0x00, 0x57]; // CALLDATASIZE ISZERO PUSH1 read JUMPI
    code.extend([0x36, 0x5f, 0x5f, 0x37]); // CALLDATACOPY(0, 0, CALLDATASIZE)
    code.push(0x33); // CALLER (topic 1)
    code.push(0x7f); // PUSH32 TOPIC (topic 0)
    code.extend_from_slice(TOPIC.as_slice());
    code.extend([0x36, 0x5f, 0xa2]); // LOG2(0, CALLDATASIZE, TOPIC, CALLER)
    code.extend([0x5f, 0x35, 0x5f, 0x55]); // SSTORE(0, CALLDATALOAD(0))
    let read = code.len() as u8;
    code.extend([0x5b, 0x5f, 0x54, 0x5f, 0x52, 0x60, 0x20, 0x5f, 0xf3]); // return SLOAD(0)
    code[3] = read;
    code
}

/// Creation code that returns [`runtime_code`].
fn init_code() -> Vec<u8> {
    gigas_test_support::init_code(&runtime_code())
}

fn signer(i: u32) -> PrivateKeySigner {
    dev_signer(i).expect("dev key")
}

fn eth(n: u64) -> U256 {
    U256::from(n) * U256::from(10u64).pow(U256::from(18))
}

use gigas_test_support::sign_raw as raw;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alloy_drives_a_dev_sequencer() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "100ms"]);
    assert!(
        node.banner
            .iter()
            .any(|l| l.contains("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266")),
        "the first dev account is printed: {:?}",
        node.banner
    );
    let alice = signer(0);
    let bob = signer(1);
    let provider = ProviderBuilder::new()
        .wallet(EthereumWallet::from(alice.clone()))
        .connect_http(node.url.parse().unwrap());

    assert_eq!(provider.get_chain_id().await.unwrap(), CHAIN_ID);
    let genesis_balance = provider
        .get_balance(bob.address())
        .block_id(0.into())
        .await
        .unwrap();
    assert_eq!(genesis_balance, eth(10_000));
    let client_version = provider.get_client_version().await.unwrap();
    assert!(client_version.starts_with("gigas"), "{client_version}");

    // Subscriptions first, so that they see the blocks below.
    let ws = ProviderBuilder::new()
        .connect_ws(WsConnect::new(node.ws.clone()))
        .await
        .unwrap();
    let mut heads = ws.subscribe_blocks().await.unwrap().into_stream();

    // 1. An EIP-1559 transfer through the wallet filler.
    let to = address!("0x00000000000000000000000000000000000b0b01");
    let receipt = provider
        .send_transaction(
            TransactionRequest::default()
                .with_to(to)
                .with_value(U256::from(7)),
        )
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    assert_eq!(receipt.gas_used, 21_000);
    assert_eq!(receipt.from, alice.address());
    let transfer_block = receipt.block_number.unwrap();
    assert_eq!(provider.get_balance(to).await.unwrap(), U256::from(7));
    assert_eq!(
        provider
            .get_balance(to)
            .block_id((transfer_block - 1).into())
            .await
            .unwrap(),
        U256::ZERO,
        "the balance at the block before the transfer"
    );

    // 2. Signed by hand: legacy with EIP-155, EIP-2930, EIP-1559, EIP-7702, from bob.
    let base_fee = provider
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await
        .unwrap()
        .unwrap()
        .header
        .base_fee_per_gas
        .unwrap() as u128;
    let price = base_fee * 2 + 1_000_000_000;
    let nonce = provider.get_transaction_count(bob.address()).await.unwrap();
    let legacy = raw(
        &bob,
        TxLegacy {
            chain_id: Some(CHAIN_ID),
            nonce,
            gas_price: price,
            gas_limit: 21_000,
            to: TxKind::Call(to),
            value: U256::from(1),
            input: Bytes::new(),
        },
    );
    let access = raw(
        &bob,
        TxEip2930 {
            chain_id: CHAIN_ID,
            nonce: nonce + 1,
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
    );
    let dynamic = raw(
        &bob,
        TxEip1559 {
            chain_id: CHAIN_ID,
            nonce: nonce + 2,
            gas_limit: 21_000,
            max_fee_per_gas: price,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(to),
            value: U256::from(3),
            access_list: AccessList::default(),
            input: Bytes::new(),
        },
    );
    // Carol delegates her account to the contract deployed below (its address is known in
    // advance: alice's next CREATE); bob pays.
    let carol = signer(2);
    let alice_nonce = provider
        .get_transaction_count(alice.address())
        .await
        .unwrap();
    let contract = alice.address().create(alice_nonce);
    let auth = Authorization {
        chain_id: U256::from(CHAIN_ID),
        address: contract,
        nonce: provider
            .get_transaction_count(carol.address())
            .await
            .unwrap(),
    };
    let auth_sig = carol.sign_hash_sync(&auth.signature_hash()).unwrap();
    let delegation = raw(
        &bob,
        TxEip7702 {
            chain_id: CHAIN_ID,
            nonce: nonce + 3,
            gas_limit: 100_000,
            max_fee_per_gas: price,
            max_priority_fee_per_gas: 1_000_000_000,
            to: carol.address(),
            value: U256::ZERO,
            access_list: AccessList::default(),
            authorization_list: vec![auth.into_signed(auth_sig)],
            input: Bytes::new(),
        },
    );
    let mut hashes = Vec::new();
    for bytes in [&legacy, &access, &dynamic, &delegation] {
        let pending = provider.send_raw_transaction(bytes).await.unwrap();
        hashes.push(*pending.tx_hash());
    }
    // The deployment, through the wallet.
    let deploy = provider
        .send_transaction(TransactionRequest::default().with_deploy_code(Bytes::from(init_code())))
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(deploy.status());
    assert_eq!(deploy.contract_address, Some(contract));
    assert_eq!(
        provider.get_code_at(contract).await.unwrap(),
        Bytes::from(runtime_code())
    );
    for (hash, ty) in hashes.iter().zip([0u8, 1, 2, 4]) {
        let receipt = wait_receipt(&provider, *hash).await;
        assert!(receipt.status(), "type {ty} succeeded");
        assert_eq!(receipt.inner.tx_type() as u8, ty);
        let tx = provider
            .get_transaction_by_hash(*hash)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(tx.inner.signer(), bob.address());
        assert_eq!(tx.block_number, receipt.block_number);
    }
    assert_eq!(
        provider.get_balance(to).await.unwrap(),
        U256::from(7 + 1 + 2 + 3)
    );
    // Carol's account now delegates to the contract: 0xef0100 ‖ address.
    let carol_code = provider.get_code_at(carol.address()).await.unwrap();
    assert_eq!(&carol_code[..3], &[0xef, 0x01, 0x00]);
    assert_eq!(&carol_code[3..], contract.as_slice());

    // 3. Call the contract: a log, a stored word, read back by eth_call and eth_getStorageAt.
    let word = B256::repeat_byte(0x42);
    let mut logs = ws
        .subscribe_logs(&Filter::new().address(contract).event_signature(TOPIC))
        .await
        .unwrap()
        .into_stream();
    let call = TransactionRequest::default()
        .with_to(contract)
        .with_input(Bytes::copy_from_slice(word.as_slice()));
    let estimate = provider.estimate_gas(call.clone()).await.unwrap();
    assert!(
        estimate > 21_000 && estimate < 100_000,
        "estimate {estimate}"
    );
    let receipt = provider
        .send_transaction(call.clone().with_gas_limit(estimate))
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status(), "the estimate is enough");
    assert_eq!(receipt.inner.logs().len(), 1);
    let log = &receipt.inner.logs()[0];
    assert_eq!(log.address(), contract);
    assert_eq!(log.topics(), &[TOPIC, alice.address().into_word()]);
    assert_eq!(log.data().data.as_ref(), word.as_slice());
    assert_eq!(
        provider.get_storage_at(contract, U256::ZERO).await.unwrap(),
        U256::from_be_bytes(word.0)
    );
    let returned = provider
        .call(TransactionRequest::default().with_to(contract))
        .await
        .unwrap();
    assert_eq!(returned.as_ref(), word.as_slice());
    let pushed = tokio::time::timeout(Duration::from_secs(20), logs.next())
        .await
        .expect("a logs subscription event")
        .unwrap();
    assert_eq!(pushed.transaction_hash, Some(receipt.transaction_hash));

    // 4. eth_getLogs by address and topic over the whole chain.
    let head = provider.get_block_number().await.unwrap();
    let found = provider
        .get_logs(
            &Filter::new()
                .from_block(0)
                .to_block(head)
                .address(contract)
                .event_signature(TOPIC),
        )
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].transaction_hash, Some(receipt.transaction_hash));
    assert_eq!(found[0].block_number, receipt.block_number);

    // 5. Blocks by number and hash, with full transactions; receipts of a block.
    let number = receipt.block_number.unwrap();
    let block = provider
        .get_block_by_number(number.into())
        .full()
        .await
        .unwrap()
        .unwrap();
    let by_hash = provider
        .get_block_by_hash(block.header.hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_hash.header.hash, block.header.hash);
    assert!(block
        .transactions
        .txns()
        .any(|t| *t.inner.tx_hash() == receipt.transaction_hash));
    let receipts = provider
        .get_block_receipts(number.into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(receipts.len(), block.transactions.len());
    let parent = provider
        .get_block_by_number((number - 1).into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(block.header.parent_hash, parent.header.hash);

    // 6. Fees.
    let history = provider
        .get_fee_history(4, BlockNumberOrTag::Latest, &[25.0, 75.0])
        .await
        .unwrap();
    assert_eq!(history.base_fee_per_gas.len(), 5);
    assert!(provider.get_gas_price().await.unwrap() > 0);
    assert!(provider.get_max_priority_fee_per_gas().await.unwrap() > 0);

    // 7. New heads arrive in order.
    let first = tokio::time::timeout(Duration::from_secs(20), heads.next())
        .await
        .unwrap()
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(20), heads.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.number, first.number + 1);
    assert_eq!(second.parent_hash, first.hash);
}

async fn wait_receipt(
    provider: &impl Provider,
    hash: B256,
) -> alloy_rpc_types_eth::TransactionReceipt {
    for _ in 0..400 {
        if let Some(r) = provider.get_transaction_receipt(hash).await.unwrap() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no receipt for {hash}");
}

/// The header's signature recovers to the sequencer, and the block hash is the RLP hash of
/// the header a client receives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_hash_as_ethereum_headers() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("node"), &["--block-time", "100ms"]);
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let block = provider
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(block.header.inner.hash_slow(), block.header.hash);
    assert!(block.header.number >= 1);
    let _: Address = block.header.beneficiary;
}

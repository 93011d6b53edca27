//! `--verify-execution` against the real sequencer: an in-process sequencer node (the
//! library's own block production, Block-STM and JIT as configured by default) executes signed
//! transactions from the dev accounts (transfers, a contract deployed with storage, calls that
//! change its storage and log); the full node's state database holds the state before the
//! block; re-executing the block over it gives the sequencer's ChangeSet and receipts, and
//! tampered diffs, receipts and block files are each caught, naming what differs.

use std::sync::Arc;
use std::time::Duration;

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, Bytes, TxKind, U256};
use gigas_chain::{dev_signer, ChainConfig};
use gigas_fullnode::reexec::{
    check_receipts, compare, reexecute, verify_block, MismatchKey, ReexecError, Source, VerifyError,
};
use gigas_primitives::{ChangeSet, ChangeSetBuilder};
use gigas_sequencer::{CommittedBlock, Node, NodeConfig};
use gigas_statedb::{BlockToApply, GenesisBlock, StateDb, StateDbOptions, WriterOptions};
use gigas_statediff::BlockFile;

/// Runtime: slot 0 += 1, then an empty LOG0.
const INCREMENT: [u8; 11] = [
    0x5f, 0x54, 0x60, 0x01, 0x01, 0x5f, 0x55, 0x5f, 0x5f, 0xa0, 0x00,
];

/// Creation code: slot 0 = 42, slot 1 = 7, then deploy [`INCREMENT`].
fn init_code() -> Bytes {
    let mut code = vec![0x60, 42, 0x5f, 0x55, 0x60, 7, 0x60, 1, 0x55];
    let offset = code.len() as u8 + 9;
    code.extend_from_slice(&[
        0x60,
        INCREMENT.len() as u8,
        0x80,
        0x60,
        offset,
        0x5f,
        0x39,
        0x5f,
        0xf3,
    ]);
    code.extend_from_slice(&INCREMENT);
    code.into()
}

fn eth(n: u64) -> U256 {
    U256::from(n) * U256::from(10u64).pow(U256::from(18))
}

fn tx(chain: &ChainConfig, from: u32, nonce: u64, to: TxKind, value: U256, input: Bytes) -> Bytes {
    gigas_test_support::sign_raw(
        &dev_signer(from).unwrap(),
        TxEip1559 {
            chain_id: chain.chain_id,
            nonce,
            gas_limit: 300_000,
            max_fee_per_gas: 5_000_000_000,
            // Lower accounts pay more, so the pool orders the deployment first.
            max_priority_fee_per_gas: 2_000_000_000 - u128::from(from),
            to,
            value,
            input,
            ..TxEip1559::default()
        },
    )
}

/// A copy of `changes` with `edit` applied to the builder that rebuilds it.
fn edited(changes: &ChangeSet, edit: impl FnOnce(&mut ChangeSetBuilder)) -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    for (address, change) in changes.accounts() {
        match change.state {
            Some(state) => b.account(*address, state, change.storage_wiped),
            None => b.destroyed(*address),
        }
    }
    for (address, slot, value) in changes.storage() {
        b.slot(*address, *slot, *value);
    }
    for (_, code) in changes.bytecodes() {
        b.bytecode(code.clone());
    }
    edit(&mut b);
    b.build()
}

/// Runs a sequencer until it has committed every one of `raws`; returns its genesis and the
/// committed blocks.
fn sequence(
    dir: &std::path::Path,
    chain: &ChainConfig,
    raws: &[Bytes],
) -> (gigas_sequencer::HeadBlock, Vec<Arc<CommittedBlock>>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The journal's writer runs on the runtime.
    let _enter = rt.enter();
    let node = Node::open(NodeConfig {
        threads: 2,
        recovery_threads: 1,
        ..NodeConfig::new(dir.to_path_buf(), chain.clone())
    })
    .unwrap();
    let genesis = node.head();
    for raw in raws {
        rt.block_on(node.submit(raw.clone()))
            .unwrap_or_else(|e| panic!("the sequencer refused a transaction: {e}"));
    }
    let mut committed = node.subscribe_committed();
    let producer = {
        let node = node.clone();
        std::thread::spawn(move || node.run_producer())
    };
    let mut blocks = Vec::new();
    let mut included = 0;
    while included < raws.len() {
        let block = rt
            .block_on(tokio::time::timeout(
                Duration::from_secs(60),
                committed.recv(),
            ))
            .expect("a block within a minute")
            .expect("the node publishes blocks");
        included += block.transactions.len();
        blocks.push(block);
    }
    node.stop();
    producer.join().unwrap().unwrap();
    (genesis, blocks)
}

#[test]
fn reexecuting_a_sequencer_block_gives_its_changeset_and_tampering_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let chain = ChainConfig::dev(50).unwrap();
    let carol = Address::repeat_byte(0xca);
    let contract = dev_signer(0).unwrap().address().create(0);
    let raws = vec![
        tx(&chain, 0, 0, TxKind::Create, U256::ZERO, init_code()),
        tx(
            &chain,
            0,
            1,
            TxKind::Call(contract),
            U256::ZERO,
            Bytes::new(),
        ),
        tx(
            &chain,
            2,
            0,
            TxKind::Call(contract),
            U256::ZERO,
            Bytes::new(),
        ),
        tx(&chain, 1, 0, TxKind::Call(carol), eth(1), Bytes::new()),
        tx(&chain, 3, 0, TxKind::Call(carol), eth(2), Bytes::new()),
        tx(
            &chain,
            4,
            0,
            TxKind::Call(dev_signer(1).unwrap().address()),
            eth(3),
            Bytes::new(),
        ),
    ];
    let (genesis, blocks) = sequence(&dir.path().join("sequencer"), &chain, &raws);

    // The full node's state: the genesis, then every block before the last one.
    let db = StateDb::open(
        &dir.path().join("fullnode"),
        StateDbOptions {
            max_size_bytes: 4 << 30,
            growth_step_bytes: 16 << 20,
            ..StateDbOptions::default()
        },
    )
    .unwrap();
    db.apply_genesis(
        GenesisBlock {
            header: &genesis.header,
            hash: genesis.hash,
            signature: Some(genesis.signature),
            commitment: None,
            verify_root: false,
        },
        gigas_fullnode::genesis::genesis_entries(&chain).unwrap(),
        1000,
    )
    .unwrap();
    let spec = chain.spec();
    let mut writer = db.writer(WriterOptions::default()).unwrap();
    let mut checked = 0;
    for block in &blocks {
        let file = BlockFile {
            number: block.header.number,
            hash: block.hash,
            transactions: block
                .transactions
                .iter()
                .map(|t| t.inner().clone())
                .collect(),
            receipts: block.receipts.clone(),
        };
        // Over the writer's open group, as the follower runs it.
        let got = verify_block(&writer, &spec, &block.header, &file, &block.changes)
            .unwrap_or_else(|e| panic!("block {}: {e}", block.header.number));
        gigas_test_support::assert_same_changes("re-execution", &got.changes, &block.changes);
        assert_eq!(got.gas_used(), block.header.gas_used);
        if !block.transactions.is_empty() {
            checked += 1;
            assert!(
                block
                    .changes
                    .storage()
                    .iter()
                    .any(|(a, _, _)| *a == contract)
                    || block.changes.accounts().iter().any(|(a, _)| *a == carol),
                "the block changes what the test sent"
            );
        }
        writer
            .apply(BlockToApply {
                header: &block.header,
                hash: block.hash,
                signature: Some(block.signature),
                changes: &block.changes,
                hashed: None,
                new_keys: &[],
                lattice: None,
                commitment: None,
            })
            .unwrap();
    }
    assert!(checked >= 1);
    writer.commit().unwrap();
    drop(writer);

    // The block with the contract, over a fresh database holding the state before it (so
    // the committed view is the pre-state this time).
    let last = blocks
        .iter()
        .find(|b| b.changes.bytecodes().len() == 1)
        .expect("a block deployed the contract")
        .clone();
    let pre_dir = dir.path().join("pre");
    let pre = StateDb::open(
        &pre_dir,
        StateDbOptions {
            max_size_bytes: 4 << 30,
            growth_step_bytes: 16 << 20,
            ..StateDbOptions::default()
        },
    )
    .unwrap();
    pre.apply_genesis(
        GenesisBlock {
            header: &genesis.header,
            hash: genesis.hash,
            signature: Some(genesis.signature),
            commitment: None,
            verify_root: false,
        },
        gigas_fullnode::genesis::genesis_entries(&chain).unwrap(),
        1000,
    )
    .unwrap();
    {
        let mut w = pre.writer(WriterOptions::default()).unwrap();
        for block in blocks
            .iter()
            .take_while(|b| b.header.number < last.header.number)
        {
            w.apply(BlockToApply {
                header: &block.header,
                hash: block.hash,
                signature: Some(block.signature),
                changes: &block.changes,
                hashed: None,
                new_keys: &[],
                lattice: None,
                commitment: None,
            })
            .unwrap();
        }
        w.commit().unwrap();
    }
    let view = pre.view().unwrap();
    let number = last.header.number;
    let file = BlockFile {
        number,
        hash: last.hash,
        transactions: last
            .transactions
            .iter()
            .map(|t| t.inner().clone())
            .collect(),
        receipts: last.receipts.clone(),
    };
    let got = reexecute(&view, &spec, &last.header, &file).unwrap();
    assert_eq!(got.changes, last.changes);
    assert_eq!(compare(number, &last.changes, &got.changes), Ok(()));
    check_receipts(&last.header, &file, &got).unwrap();

    // A diff with one balance changed: the mismatch names that account and field.
    let carol_after = last
        .changes
        .accounts()
        .iter()
        .find(|(a, _)| *a == carol)
        .and_then(|(_, c)| c.state)
        .expect("carol is paid in the block");
    let tampered = edited(&last.changes, |b| {
        let mut state = carol_after;
        state.balance += U256::from(1);
        b.account(carol, state, false);
    });
    let mismatch = compare(number, &tampered, &got.changes).unwrap_err();
    assert_eq!(
        mismatch.key,
        MismatchKey::Account {
            address: carol,
            field: "balance"
        }
    );
    assert_eq!(mismatch.origin, Source::Diff);
    assert_eq!(
        mismatch.to_string(),
        format!(
            "block {number}: account {carol} balance: diff says {}, re-execution gives {}",
            carol_after.balance + U256::from(1),
            carol_after.balance
        )
    );
    match verify_block(&view, &spec, &last.header, &file, &tampered) {
        Err(VerifyError::Mismatch(m)) => assert_eq!(m, mismatch),
        other => panic!("expected the mismatch, got {other:?}"),
    }

    // A slot the diff gets wrong, and one it invents.
    let slot0 = last
        .changes
        .storage()
        .iter()
        .find(|(a, s, _)| *a == contract && s.is_zero())
        .map(|(_, _, v)| *v)
        .expect("the contract's slot 0 is written");
    if last.transactions.len() == raws.len() {
        // Deployed with 42, then incremented by two calls in the same block.
        assert_eq!(slot0, U256::from(44));
    }
    let wrong_slot = edited(&last.changes, |b| {
        b.slot(contract, U256::ZERO, slot0 + U256::from(5))
    });
    let m = compare(number, &wrong_slot, &got.changes).unwrap_err();
    assert_eq!(
        m.key,
        MismatchKey::Slot {
            address: contract,
            slot: U256::ZERO
        }
    );
    assert!(
        m.to_string().ends_with(&format!(
            "diff says {}, re-execution gives {slot0}",
            slot0 + U256::from(5)
        )),
        "{m}"
    );
    let invented = edited(&last.changes, |b| {
        b.slot(carol, U256::from(9), U256::from(1))
    });
    let m = compare(number, &invented, &got.changes).unwrap_err();
    assert_eq!(
        m.key,
        MismatchKey::Slot {
            address: carol,
            slot: U256::from(9)
        }
    );
    assert!(
        m.to_string()
            .ends_with("diff says 1, re-execution gives no change"),
        "{m}"
    );

    // A receipt the block file gets wrong.
    let mut bad_receipts = file.clone();
    if let Some(r) = bad_receipts.receipts[0].as_receipt_with_bloom_mut() {
        r.receipt.cumulative_gas_used += 1;
    }
    let m = check_receipts(&last.header, &bad_receipts, &got).unwrap_err();
    assert_eq!(
        m.key,
        MismatchKey::Receipt {
            index: 0,
            field: "cumulative gas used"
        }
    );
    assert_eq!(m.origin, Source::BlockFile);
    // --verify-execution checks the file against the signed header first: a damaged receipt
    // is a bad file (fetched again), not a disagreement with the sequencer (the node halts
    // for good on those). Before the check it came back as the Mismatch above.
    match verify_block(&view, &spec, &last.header, &bad_receipts, &last.changes) {
        Err(VerifyError::Reexec(e @ ReexecError::Receipts { .. })) => {
            assert!(e.is_bad_file(), "{e}");
        }
        other => panic!("expected a receipts root error, got {other:?}"),
    }

    // A block file that is not the header's block, or whose transactions are not its own.
    let mut missing = file.clone();
    missing.transactions.pop();
    match reexecute(&view, &spec, &last.header, &missing) {
        Err(ReexecError::Transactions { block, .. }) => assert_eq!(block, number),
        other => panic!("expected a transactions root error, got {other:?}"),
    }
    let mut other_block = file.clone();
    other_block.number += 1;
    assert!(matches!(
        reexecute(&view, &spec, &last.header, &other_block),
        Err(ReexecError::WrongBlock { .. })
    ));
}

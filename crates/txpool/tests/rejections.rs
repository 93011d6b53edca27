//! Every rejection, with its exact message, from real signed transactions.

mod common;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_network::TxSignerSync;
use alloy_primitives::{Address, Bytes, Signature, TxKind, U256};
use common::*;
use gigas_txpool::{decode_and_recover, AddOutcome, HeadAccounts, TxPool, TxPoolError};

fn stateless(raw: &[u8]) -> String {
    match decode_and_recover(raw, &config()) {
        Ok(tx) => panic!("accepted {:?}", tx.hash),
        Err(err) => err.to_string(),
    }
}

fn with_input(nonce: u64, to: TxKind, input: Vec<u8>, gas_limit: u64) -> Bytes {
    let mut tx = TxEip1559 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit,
        max_fee_per_gas: 10,
        max_priority_fee_per_gas: 1,
        to,
        input: input.into(),
        ..Default::default()
    };
    sign(&signer(0), &mut tx)
}

#[test]
fn every_accepted_type_decodes_to_its_signer() {
    let key = signer(3);
    let raws = [
        legacy(&key, 0, Some(CHAIN_ID), 10),
        legacy(&key, 1, None, 10),
        eip2930(&key, 2, 10),
        transfer(&key, 3, 10, 1),
        eip7702(&key, 4, true),
    ];
    for (nonce, raw) in raws.iter().enumerate() {
        let tx = decode_and_recover(raw, &config()).expect("valid");
        assert_eq!(tx.sender, key.address());
        assert_eq!(tx.nonce, nonce as u64);
        assert_eq!(&tx.encoded, raw);
        assert_eq!(tx.hash, alloy_primitives::keccak256(raw));
        assert_eq!(
            tx.cost,
            U256::from(tx.gas_limit) * U256::from(tx.max_fee_per_gas) + U256::from(1u8)
                - U256::from(u8::from(nonce == 4))
        );
    }
    let legacy = decode_and_recover(&raws[0], &config()).expect("valid");
    assert_eq!(legacy.max_priority_fee_per_gas, 10);
    assert_eq!(legacy.effective_tip(4), Some(6));
    let dynamic = decode_and_recover(&raws[3], &config()).expect("valid");
    assert_eq!(dynamic.effective_tip(4), Some(1));
    assert_eq!(dynamic.effective_tip(10), Some(0));
    assert_eq!(dynamic.effective_tip(11), None);
}

#[test]
fn stateless_rejections_have_exact_messages() {
    let key = signer(0);

    let mut small = config();
    small.max_tx_bytes = 200;
    let big = with_input(0, TxKind::Call(Address::ZERO), vec![1; 300], 100_000);
    assert_eq!(
        decode_and_recover(&big, &small).unwrap_err().to_string(),
        format!("oversized data: size {}, max 200", big.len())
    );

    assert_eq!(
        stateless(&eip4844(&key, 0)),
        "transaction type not supported: EIP-4844 blob transactions are not accepted by this sequencer"
    );
    assert_eq!(
        stateless(&[0x03]),
        "transaction type not supported: EIP-4844 blob transactions are not accepted by this sequencer"
    );
    assert_eq!(
        stateless(&[0x05, 0xc0]),
        "transaction type not supported: type 0x05"
    );
    assert_eq!(
        stateless(&[]),
        "failed to decode signed transaction: empty input"
    );
    let garbage = stateless(&[0xc0]);
    assert!(
        garbage.starts_with("failed to decode signed transaction: rlp: "),
        "{garbage}"
    );
    let mut trailing = transfer(&key, 0, 10, 1).to_vec();
    trailing.push(0);
    let trailing = stateless(&trailing);
    assert!(
        trailing.starts_with("failed to decode signed transaction: rlp: "),
        "{trailing}"
    );
    let truncated = transfer(&key, 0, 10, 1);
    let truncated = stateless(&truncated[..truncated.len() - 3]);
    assert!(
        truncated.starts_with("failed to decode signed transaction: rlp: "),
        "{truncated}"
    );

    // Signed for mainnet, sent to chain 1337.
    let mut foreign = TxEip1559 {
        chain_id: 1,
        nonce: 0,
        gas_limit: 21_000,
        max_fee_per_gas: 10,
        max_priority_fee_per_gas: 1,
        to: TxKind::Call(Address::ZERO),
        ..Default::default()
    };
    assert_eq!(
        stateless(&sign(&key, &mut foreign)),
        "invalid chain id: expected 1337, got 1"
    );
    assert_eq!(
        stateless(&legacy(&key, 0, Some(1), 10)),
        "invalid chain id: expected 1337, got 1"
    );

    // r = 0 is no signature; a high s is a malleated one (EIP-2).
    let unsigned = TxEip1559 {
        chain_id: CHAIN_ID,
        nonce: 0,
        gas_limit: 21_000,
        max_fee_per_gas: 10,
        max_priority_fee_per_gas: 1,
        to: TxKind::Call(Address::ZERO),
        ..Default::default()
    };
    let zero_r = unsigned
        .clone()
        .into_signed(Signature::new(U256::ZERO, U256::from(1u8), false));
    assert_eq!(
        stateless(&TxEnvelope::from(zero_r).encoded_2718()),
        "invalid sender"
    );
    let mut to_sign = unsigned.clone();
    let good = key.sign_transaction_sync(&mut to_sign).expect("signing");
    let n = U256::from_str_radix(
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
        16,
    )
    .expect("the curve order");
    let high_s = Signature::new(good.r(), n - good.s(), !good.v());
    assert_eq!(
        stateless(&TxEnvelope::from(unsigned.into_signed(high_s)).encoded_2718()),
        "invalid sender"
    );

    assert_eq!(
        stateless(&eip1559(&key, 0, 10, 1, 20_000, 1)),
        "intrinsic gas too low: have 20000, want 21000"
    );
    // EIP-7623 (Prague): 1,000 non-zero calldata bytes cost 37,000 gas, but the floor is
    // 21,000 + 10 * 4 * 1,000.
    assert_eq!(
        stateless(&with_input(
            0,
            TxKind::Call(Address::ZERO),
            vec![0xff; 1000],
            40_000
        )),
        "intrinsic gas too low: have 40000, want 61000"
    );
    assert_eq!(
        stateless(&eip1559(&key, 0, 10, 1, BLOCK_GAS + 1, 1)),
        "exceeds block gas limit: gas limit 30000001, block gas limit 30000000"
    );
    assert_eq!(
        stateless(&eip1559(&key, 0, 10, 11, 21_000, 1)),
        "max priority fee per gas higher than max fee per gas: maxPriorityFeePerGas: 11, maxFeePerGas: 10"
    );
    assert_eq!(
        stateless(&eip7702(&key, 0, false)),
        "EIP-7702 transaction with empty auth list"
    );
    assert_eq!(
        stateless(&with_input(0, TxKind::Create, vec![0; 49_153], 10_000_000)),
        "max initcode size exceeded: code size 49153, limit 49152"
    );
    assert_eq!(
        stateless(&eip1559(&key, u64::MAX, 10, 1, 21_000, 1)),
        "nonce has max value"
    );
}

struct Broken;

impl HeadAccounts for Broken {
    fn account(&self, _: Address) -> Result<(u64, U256), String> {
        Err("disk on fire".to_string())
    }
}

#[test]
fn stateful_rejections_have_exact_messages() {
    let key = signer(1);
    let address = key.address();
    let state = MemState::default();
    let pool = TxPool::new(config());
    let err = |raw: &Bytes, state: &MemState, base_fee: u64| {
        pool.add(pooled(raw), state, base_fee)
            .unwrap_err()
            .to_string()
    };

    state.set(address, 7, U256::from(ETH));
    assert_eq!(
        err(&transfer(&key, 5, 10, 1), &state, 1),
        "nonce too low: next nonce 7, tx nonce 5"
    );
    assert_eq!(
        err(&transfer(&key, 7 + 256, 10, 1), &state, 1),
        "nonce too high: next nonce 7, tx nonce 263, highest accepted 262"
    );
    assert_eq!(
        err(&transfer(&key, 7, 7, 1), &state, 8),
        format!(
            "max fee per gas less than block base fee: address {address}, maxFeePerGas: 7, baseFee: 8"
        )
    );
    assert!(format!("{address}").starts_with("0x"));

    // 21,000 gas at 1 wei plus 1 wei of value.
    state.set(address, 7, U256::from(21_000u64));
    assert_eq!(
        err(&eip1559(&key, 7, 1, 1, 21_000, 1), &state, 1),
        format!(
            "insufficient funds for gas * price + value: address {address} have 21000 want 21001"
        )
    );
    // The balance covers one transaction, not the next one after it.
    state.set(address, 7, U256::from(42_001u64));
    assert_eq!(
        pool.add(pooled(&eip1559(&key, 7, 1, 1, 21_000, 1)), &state, 1),
        Ok(AddOutcome::Pending)
    );
    assert_eq!(
        err(&eip1559(&key, 8, 1, 1, 21_000, 1), &state, 1),
        format!(
            "insufficient funds for gas * price + value: address {address} have 42001 want 42002"
        )
    );

    state.set(address, 7, U256::from(ETH));
    let first = transfer(&key, 8, 100, 10);
    assert_eq!(pool.add(pooled(&first), &state, 1), Ok(AddOutcome::Pending));
    assert_eq!(err(&first, &state, 1), "already known");
    assert_eq!(
        err(&transfer(&key, 8, 109, 11), &state, 1),
        "replacement transaction underpriced"
    );

    let mut picky = config();
    picky.min_priority_fee = 2;
    let picky = TxPool::new(picky);
    assert_eq!(
        picky
            .add(pooled(&transfer(&key, 7, 10, 1)), &state, 1)
            .unwrap_err()
            .to_string(),
        "transaction underpriced: gas tip cap 1, minimum needed 2"
    );
    assert_eq!(
        picky
            .add(pooled(&transfer(&key, 7, 10, 1)), &Broken, 1)
            .unwrap_err()
            .to_string(),
        "failed to read account state: disk on fire"
    );

    let metrics = pool.metrics();
    assert_eq!(metrics.rejected_count("nonce_too_low"), 1);
    assert_eq!(metrics.rejected_count("nonce_too_high"), 1);
    assert_eq!(metrics.rejected_count("fee_cap_below_base_fee"), 1);
    assert_eq!(metrics.rejected_count("insufficient_funds"), 2);
    assert_eq!(metrics.rejected_count("already_known"), 1);
    assert_eq!(metrics.rejected_count("replacement_underpriced"), 1);
    assert_eq!(metrics.accepted.get(), 2);
    assert_eq!(picky.metrics().rejected_count("underpriced"), 1);
    assert_eq!(picky.metrics().rejected_count("state"), 1);
}

#[test]
fn a_full_pool_refuses_what_pays_no_more_than_it_could_evict() {
    let keys: Vec<_> = (0..4).map(signer).collect();
    let state = MemState::funded(keys.iter().map(|k| k.address()), U256::from(ETH));
    let mut small = config();
    small.max_txs = 3;
    let pool = TxPool::new(small);
    for (i, key) in keys.iter().take(3).enumerate() {
        let tip = 5 + i as u128;
        assert_eq!(
            pool.add(pooled(&transfer(key, 0, 100, tip)), &state, 1),
            Ok(AddOutcome::Pending)
        );
    }
    // Tip 5 is the cheapest held: paying 5 again does not displace it.
    assert_eq!(
        pool.add(pooled(&transfer(&keys[3], 0, 100, 5)), &state, 1)
            .unwrap_err()
            .to_string(),
        "transaction underpriced: the pool is full and its cheapest evictable transaction pays a tip of 5, this one 5"
    );
    // A gapped transaction is worth less than any pending one.
    assert_eq!(
        pool.add(pooled(&transfer(&keys[3], 3, 100, 50)), &state, 1)
            .unwrap_err(),
        TxPoolError::PoolFull
    );
    assert_eq!(TxPoolError::PoolFull.to_string(), "txpool is full");
    assert_eq!(pool.metrics().rejected_count("underpriced_pool_full"), 1);
    assert_eq!(pool.metrics().rejected_count("pool_full"), 1);
}

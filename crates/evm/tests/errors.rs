//! Execution errors keep their kind: a transaction that is invalid in the block (what a block
//! builder drops before going on) carries revm's reason, and a failing state database is not
//! mistaken for one (a builder stops on it).

use std::fmt;

use alloy_primitives::{Address, B256, U256};
use gigas_evm::revm::context::result::InvalidTransaction;
use gigas_evm::revm::context::{BlockEnv, TxEnv};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::database_interface::{DBErrorMarker, Database, DatabaseCommit};
use gigas_evm::revm::primitives::TxKind;
use gigas_evm::revm::state::{AccountInfo, Bytecode, EvmState};
use gigas_evm::{execute_block, ExecutionError, PlainEvm, PreparedBlock, PreparedTx, TxError};
use gigas_primitives::ChainSpec;

const SENDER: Address = Address::repeat_byte(0x11);
const BROKEN: Address = Address::repeat_byte(0xbb);

/// The error of a database whose disk went away.
#[derive(Debug, Clone)]
struct DiskGone;

impl fmt::Display for DiskGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("read error on the state file")
    }
}

impl std::error::Error for DiskGone {}
impl DBErrorMarker for DiskGone {}

/// A database that fails to read one account.
struct Failing(CacheDB<EmptyDB>);

impl Database for Failing {
    type Error = DiskGone;
    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, DiskGone> {
        if address == BROKEN {
            return Err(DiskGone);
        }
        Ok(self.0.basic(address).unwrap_or_default())
    }
    fn code_by_hash(&mut self, hash: B256) -> Result<Bytecode, DiskGone> {
        Ok(self.0.code_by_hash(hash).unwrap_or_default())
    }
    fn storage(&mut self, address: Address, slot: U256) -> Result<U256, DiskGone> {
        Ok(self.0.storage(address, slot).unwrap_or_default())
    }
    fn block_hash(&mut self, number: u64) -> Result<B256, DiskGone> {
        Ok(self.0.block_hash(number).unwrap_or_default())
    }
}

impl DatabaseCommit for Failing {
    fn commit(&mut self, changes: EvmState) {
        self.0.commit(changes)
    }
}

fn db() -> CacheDB<EmptyDB> {
    let mut db = CacheDB::new(EmptyDB::default());
    db.insert_account_info(
        SENDER,
        AccountInfo {
            balance: U256::from(10u64).pow(U256::from(18)),
            ..Default::default()
        },
    );
    db
}

fn transfer(nonce: u64, to: Address, value: U256, gas_limit: u64) -> PreparedTx {
    PreparedTx::from_env(TxEnv {
        caller: SENDER,
        kind: TxKind::Call(to),
        value,
        nonce,
        gas_limit,
        gas_price: 10,
        chain_id: Some(1),
        ..Default::default()
    })
    .expect("a legacy transaction")
}

fn block(txs: Vec<PreparedTx>) -> PreparedBlock {
    let env = BlockEnv {
        number: U256::from(20_000_000u64),
        timestamp: U256::from(1_720_000_000u64),
        gas_limit: 30_000_000,
        basefee: 7,
        prevrandao: Some(B256::with_last_byte(1)),
        ..Default::default()
    };
    PreparedBlock::synthetic(&ChainSpec::mainnet(), env, txs)
}

fn failure(block: &PreparedBlock) -> (usize, TxError, bool) {
    let err =
        execute_block(&mut PlainEvm::new(db(), block), block).expect_err("the block must fail");
    let (index, error) = err.transaction().expect("one transaction is to blame");
    (index, error.clone(), err.is_invalid_transaction())
}

#[test]
fn invalid_transactions_carry_revms_reason_and_are_droppable() {
    let to = Address::repeat_byte(0x22);
    let one = U256::from(1u64);
    let cases = [
        (transfer(1, to, one, 21_000), "nonce too high"),
        (
            transfer(0, to, U256::from(2u64).pow(U256::from(60)), 21_000),
            "insufficient funds",
        ),
        (
            transfer(0, to, one, 40_000_000),
            "gas limit above the block's",
        ),
        (transfer(0, to, one, 20_000), "intrinsic gas"),
    ];
    for (tx, what) in cases {
        let (index, error, droppable) = failure(&block(vec![tx]));
        assert_eq!(index, 0);
        assert!(droppable, "{what}: {error}");
        let TxError::Invalid(reason) = &error else {
            panic!("{what}: {error:?} is not an invalid transaction");
        };
        let expected = match what {
            "nonce too high" => {
                matches!(reason, InvalidTransaction::NonceTooHigh { tx: 1, state: 0 })
            }
            "insufficient funds" => {
                matches!(reason, InvalidTransaction::LackOfFundForMaxFee { .. })
            }
            "gas limit above the block's" => {
                matches!(reason, InvalidTransaction::CallerGasLimitMoreThanBlock)
            }
            _ => matches!(
                reason,
                InvalidTransaction::CallGasCostMoreThanGasLimit { .. }
            ),
        };
        assert!(expected, "{what}: revm said {reason:?}");
    }
    // A nonce already used, after a first transaction that succeeded: the second is to blame.
    let (index, error, droppable) = failure(&block(vec![
        transfer(0, to, one, 21_000),
        transfer(0, to, one, 21_000),
    ]));
    assert_eq!(index, 1);
    assert!(droppable);
    assert_eq!(
        error,
        TxError::Invalid(InvalidTransaction::NonceTooLow { tx: 0, state: 1 })
    );
    // A fee cap below the base fee.
    let mut cheap = transfer(0, to, one, 21_000);
    cheap.env.gas_price = 6;
    let (_, error, _) = failure(&block(vec![cheap]));
    assert!(
        matches!(
            error,
            TxError::Invalid(InvalidTransaction::GasPriceLessThanBasefee)
        ),
        "{error:?}"
    );
    // Another chain's transaction.
    let mut foreign = transfer(0, to, one, 21_000);
    foreign.env.chain_id = Some(10);
    let (_, error, _) = failure(&block(vec![foreign]));
    assert_eq!(error, TxError::Invalid(InvalidTransaction::InvalidChainId));
}

#[test]
fn a_failing_database_stops_the_block_and_is_not_an_invalid_transaction() {
    let block = block(vec![
        transfer(0, Address::repeat_byte(0x22), U256::from(1u64), 21_000),
        transfer(1, BROKEN, U256::from(1u64), 21_000),
    ]);
    let err = execute_block(&mut PlainEvm::new(Failing(db()), &block), &block)
        .expect_err("the second transaction reads the broken account");
    assert!(!err.is_invalid_transaction(), "{err}");
    match &err {
        ExecutionError::Transaction {
            index: 1,
            error: TxError::Database(message),
            ..
        } => assert!(message.contains("read error"), "{message}"),
        other => panic!("expected a database error of transaction 1, got {other:?}"),
    }
    assert!(err.to_string().contains("state database"), "{err}");
}

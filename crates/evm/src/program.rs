//! A block that makes one call into a contract: how benchmark programs (snailtracer and the
//! other evm-bench contracts) and hand-written bytecode are run through the same executor as
//! mainnet blocks.

use alloy_primitives::{address, Address, Bytes, U256};
use gigas_primitives::ChainSpec;
use revm::context::{BlockEnv, TxEnv};
use revm::database::{CacheDB, EmptyDB};
use revm::primitives::TxKind;
use revm::state::{AccountInfo, Bytecode};

use crate::executor::{PreparedBlock, PreparedTx};

/// Where the program's code is deployed.
pub const PROGRAM_ADDRESS: Address = address!("0000000000000000000000000000000000c0ffee");
/// The account that calls it (funded with 1 ether; the call pays no gas price).
pub const PROGRAM_CALLER: Address = address!("0000000000000000000000000000000000ca11e7");

/// A Cancun block on mainnet rules whose one legacy transaction calls `code` with `calldata`
/// and `gas_limit`, and the database holding the code and a funded caller.
pub fn call_block(
    code: Bytes,
    calldata: Bytes,
    gas_limit: u64,
) -> (PreparedBlock, CacheDB<EmptyDB>) {
    let mut db = CacheDB::new(EmptyDB::default());
    let bytecode = Bytecode::new_raw(code);
    db.insert_account_info(
        PROGRAM_ADDRESS,
        AccountInfo {
            code_hash: bytecode.hash_slow(),
            code: Some(bytecode),
            ..Default::default()
        },
    );
    db.insert_account_info(
        PROGRAM_CALLER,
        AccountInfo {
            balance: U256::from(10u64).pow(U256::from(18)),
            ..Default::default()
        },
    );
    let env = TxEnv {
        caller: PROGRAM_CALLER,
        kind: TxKind::Call(PROGRAM_ADDRESS),
        data: calldata,
        gas_limit,
        gas_price: 0,
        chain_id: Some(1),
        ..Default::default()
    };
    let block_env = BlockEnv {
        number: U256::from(20_000_000u64),
        timestamp: U256::from(1_720_000_000u64),
        gas_limit: gas_limit.saturating_mul(2).max(30_000_000),
        ..Default::default()
    };
    let tx = PreparedTx {
        hash: alloy_primitives::B256::ZERO,
        tx_type: alloy_consensus::TxType::Legacy,
        env,
    };
    (
        PreparedBlock::synthetic(&ChainSpec::mainnet(), block_env, vec![tx]),
        db,
    )
}

/// One call frame running `code` on its own, outside a transaction: an interpreter over
/// `calldata` and `call_value` with `gas_limit`, and the context it runs against (a block at
/// `timestamp` on mainnet rules, the program's account loaded, holding 12345 wei and slot 1 =
/// 99). How compiled code is compared with the interpreter and timed against it, frame for
/// frame.
pub fn frame(
    code: &[u8],
    calldata: &[u8],
    call_value: U256,
    gas_limit: u64,
    timestamp: u64,
) -> (
    revm::interpreter::Interpreter,
    crate::executor::BlockContext<CacheDB<EmptyDB>>,
) {
    use revm::context_interface::{ContextTr, JournalTr};
    use revm::interpreter::interpreter::ExtBytecode;
    use revm::interpreter::{CallInput, InputsImpl, Interpreter, SharedMemory};

    let mut db = CacheDB::new(EmptyDB::default());
    // Legacy analysis whatever the bytes: `new_raw` would reject an EIP-7702 prefix, which a
    // deployed contract cannot start with anyway (EIP-3541).
    let bytecode = Bytecode::new_legacy(Bytes::copy_from_slice(code));
    db.insert_account_info(
        PROGRAM_ADDRESS,
        AccountInfo {
            code_hash: bytecode.hash_slow(),
            code: Some(bytecode.clone()),
            balance: U256::from(12345),
            ..Default::default()
        },
    );
    // An in-memory database cannot fail.
    let _ = db.insert_account_storage(PROGRAM_ADDRESS, U256::from(1), U256::from(99));
    let block_env = BlockEnv {
        number: U256::from(20_000_000u64),
        timestamp: U256::from(timestamp),
        gas_limit: 30_000_000,
        prevrandao: Some(alloy_primitives::B256::with_last_byte(7)),
        ..Default::default()
    };
    let block = PreparedBlock::synthetic(&ChainSpec::mainnet(), block_env, Vec::new());
    let mut host = crate::executor::block_context(db, &block, ());
    let _ = host.journal_mut().load_account(PROGRAM_ADDRESS);
    let input = InputsImpl {
        target_address: PROGRAM_ADDRESS,
        bytecode_address: None,
        caller_address: PROGRAM_CALLER,
        input: CallInput::Bytes(Bytes::copy_from_slice(calldata)),
        call_value,
        depth: 0,
    };
    let interpreter = Interpreter::new(
        SharedMemory::new(),
        ExtBytecode::new(bytecode),
        input,
        false,
        block.spec(),
        gas_limit,
    );
    (interpreter, host)
}

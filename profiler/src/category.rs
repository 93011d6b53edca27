//! Opcode names and categories.

use revm::bytecode::opcode::{self, OpCode};
use serde::Serialize;

/// What kind of work an opcode (or a row outside opcodes) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// POP, PUSH0..PUSH32, DUP, SWAP.
    Stack,
    /// ADD, MUL, SUB, DIV, SDIV, MOD, SMOD, ADDMOD, MULMOD, EXP, SIGNEXTEND.
    Arithmetic,
    /// LT, GT, SLT, SGT, EQ, ISZERO, AND, OR, XOR, NOT, BYTE, SHL, SHR, SAR, CLZ.
    ComparisonBitwise,
    /// MLOAD, MSTORE, MSTORE8, MSIZE, MCOPY.
    Memory,
    /// JUMP, JUMPI, JUMPDEST, PC.
    ControlFlow,
    /// Reads of the call, transaction and block environment (CALLER, CALLDATALOAD, CODECOPY,
    /// RETURNDATACOPY, TIMESTAMP, GAS, ...).
    Environment,
    /// State and the host: SLOAD, SSTORE, TLOAD, TSTORE, BALANCE, SELFBALANCE, EXTCODE*,
    /// BLOCKHASH, LOG*.
    Host,
    /// KECCAK256, the CALL and CREATE families, frame ends (STOP, RETURN, REVERT, INVALID),
    /// SELFDESTRUCT.
    System,
    /// Work outside any opcode: transaction validation and set-up, post-execution, commit.
    OutsideOpcodes,
    /// Precompiled contracts.
    Precompile,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 10] = [
        Category::Stack,
        Category::Arithmetic,
        Category::ComparisonBitwise,
        Category::Memory,
        Category::ControlFlow,
        Category::Environment,
        Category::Host,
        Category::System,
        Category::OutsideOpcodes,
        Category::Precompile,
    ];

    /// A name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Category::Stack => "stack",
            Category::Arithmetic => "arithmetic",
            Category::ComparisonBitwise => "comparison/bitwise",
            Category::Memory => "memory",
            Category::ControlFlow => "control flow",
            Category::Environment => "environment/block info",
            Category::Host => "host/state",
            Category::System => "system",
            Category::OutsideOpcodes => "outside opcodes",
            Category::Precompile => "precompiles",
        }
    }

    /// Whether a JIT compiler cannot make this work cheaper, because it is already native
    /// code in the client (the talk's argument for its 2x ceiling).
    pub fn beyond_jit(self) -> bool {
        matches!(
            self,
            Category::Host | Category::System | Category::OutsideOpcodes | Category::Precompile
        )
    }
}

/// The category of an opcode byte. Undefined bytes halt like INVALID and count as system.
pub fn opcode_category(op: u8) -> Category {
    use opcode::*;
    match op {
        POP | PUSH0..=PUSH32 | DUP1..=DUP16 | SWAP1..=SWAP16 => Category::Stack,
        ADD | MUL | SUB | DIV | SDIV | MOD | SMOD | ADDMOD | MULMOD | EXP | SIGNEXTEND => {
            Category::Arithmetic
        }
        LT | GT | SLT | SGT | EQ | ISZERO | AND | OR | XOR | NOT | BYTE | SHL | SHR | SAR | CLZ => {
            Category::ComparisonBitwise
        }
        MLOAD | MSTORE | MSTORE8 | MSIZE | MCOPY => Category::Memory,
        JUMP | JUMPI | JUMPDEST | PC => Category::ControlFlow,
        ADDRESS | ORIGIN | CALLER | CALLVALUE | CALLDATALOAD | CALLDATASIZE | CALLDATACOPY
        | CODESIZE | CODECOPY | GASPRICE | RETURNDATASIZE | RETURNDATACOPY | COINBASE
        | TIMESTAMP | NUMBER | DIFFICULTY | GASLIMIT | CHAINID | BASEFEE | BLOBHASH
        | BLOBBASEFEE | GAS => Category::Environment,
        SLOAD
        | SSTORE
        | TLOAD
        | TSTORE
        | BALANCE
        | SELFBALANCE
        | EXTCODESIZE
        | EXTCODECOPY
        | EXTCODEHASH
        | BLOCKHASH
        | LOG0..=LOG4 => Category::Host,
        _ => Category::System,
    }
}

/// The mnemonic of an opcode byte, or `UNDEFINED(0x..)`.
pub fn opcode_name(op: u8) -> String {
    match OpCode::new(op) {
        Some(code) => code.as_str().to_string(),
        None => format!("UNDEFINED(0x{op:02x})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_follow_the_issue() {
        assert_eq!(opcode_category(opcode::PUSH1), Category::Stack);
        assert_eq!(opcode_category(opcode::SWAP16), Category::Stack);
        assert_eq!(opcode_category(opcode::SLOAD), Category::Host);
        assert_eq!(opcode_category(opcode::LOG3), Category::Host);
        assert_eq!(opcode_category(opcode::KECCAK256), Category::System);
        assert_eq!(opcode_category(opcode::STATICCALL), Category::System);
        assert_eq!(opcode_category(opcode::CREATE2), Category::System);
        assert_eq!(opcode_category(opcode::REVERT), Category::System);
        assert_eq!(
            opcode_category(0x0c),
            Category::System,
            "undefined bytes halt"
        );
        assert_eq!(opcode_category(opcode::JUMPI), Category::ControlFlow);
        assert_eq!(opcode_category(opcode::MSTORE), Category::Memory);
        assert_eq!(opcode_category(opcode::CALLDATALOAD), Category::Environment);
        assert_eq!(opcode_name(opcode::STATICCALL), "STATICCALL");
        assert_eq!(opcode_name(0x0c), "UNDEFINED(0x0c)");
        assert!(Category::Host.beyond_jit() && !Category::Stack.beyond_jit());
    }
}

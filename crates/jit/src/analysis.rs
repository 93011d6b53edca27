//! One pass over a contract's bytecode: valid jump destinations, basic blocks, each block's
//! static gas and stack requirements, and whether the compiler can translate it.
//!
//! A basic block starts at offset 0, at every JUMPDEST and after every JUMPI; it ends after a
//! JUMP, JUMPI or terminating instruction, or before the next JUMPDEST. Compiled code checks a
//! block's gas and stack bounds once, on entry; the numbers here are what those checks use.

use revm::bytecode::opcode::{self, OpCode};
use revm::interpreter::GasTable;
use revm::primitives::hardfork::SpecId;

/// The most items the EVM stack holds.
pub const STACK_LIMIT: usize = 1024;

/// A basic block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Offset of its first instruction.
    pub start: usize,
    /// Offset after its last instruction (immediates included); may pass the code's end,
    /// where the EVM reads an implicit STOP.
    pub end: usize,
    /// Sum of the static gas of its instructions.
    pub static_gas: u64,
    /// Items the stack must hold on entry for no instruction of the block to underflow.
    pub min_height: usize,
    /// Most items the block holds above its entry height at any point: on entry the height
    /// must be at most `STACK_LIMIT - max_growth` for no instruction to overflow.
    pub max_growth: usize,
    /// Whether the compiler translates the block. Every instruction is translated (inline,
    /// or as a call of the interpreter's own instruction function) except those with an
    /// immediate other than PUSH's (see [`has_stack_immediate`]), which start a block of
    /// their own left to the interpreter; a block that pushes past the stack limit whatever
    /// the entry height is left to the interpreter too, which reports the overflow at its
    /// exact instruction.
    pub compilable: bool,
    /// Whether the block can continue into the next one (it does not end with a JUMP or a
    /// terminating instruction).
    pub falls_through: bool,
    /// Whether the block starts right after a CALL or CREATE: where a frame resumes when its
    /// child frame returns.
    pub resumes: bool,
}

/// The analysis of one contract for one spec.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// The blocks, in code order.
    pub blocks: Vec<Block>,
    /// For each code offset, the index of the block starting there at a JUMPDEST.
    jumpdest_block: Vec<Option<u32>>,
}

impl Analysis {
    /// The block a jump to `offset` enters, if `offset` is a valid JUMPDEST.
    pub fn jump_target(&self, offset: usize) -> Option<usize> {
        self.jumpdest_block
            .get(offset)
            .copied()
            .flatten()
            .map(|b| b as usize)
    }

    /// Whether every block can be compiled.
    pub fn fully_compilable(&self) -> bool {
        self.blocks.iter().all(|b| b.compilable)
    }
}

/// Whether `op` is active in `spec` (instructions added by later forks halt with
/// `NotActivated` before them).
pub fn active(op: u8, spec: SpecId) -> bool {
    use opcode::*;
    let since = match op {
        DELEGATECALL => SpecId::HOMESTEAD,
        REVERT | RETURNDATASIZE | RETURNDATACOPY | STATICCALL => SpecId::BYZANTIUM,
        SHL | SHR | SAR | CREATE2 | EXTCODEHASH => SpecId::PETERSBURG,
        CHAINID | SELFBALANCE => SpecId::ISTANBUL,
        BASEFEE => SpecId::LONDON,
        PUSH0 => SpecId::SHANGHAI,
        TLOAD | TSTORE | MCOPY | BLOBHASH | BLOBBASEFEE => SpecId::CANCUN,
        CLZ => SpecId::OSAKA,
        DUPN | SWAPN | EXCHANGE | SLOTNUM => SpecId::AMSTERDAM,
        _ => SpecId::FRONTIER,
    };
    spec.is_enabled_in(since)
}

/// Whether `op` reads a one-byte immediate after it (DUPN, SWAPN and EXCHANGE, from
/// Amsterdam on) where it is active.
///
/// The immediate is not skipped the way PUSH data is: jump destination analysis treats it as
/// an instruction (EIP-8024 keeps that analysis unchanged, and a JUMPDEST byte there stays a
/// valid destination), but execution steps over it. Compiled code does not translate these
/// instructions: a block starts at each and is left to the interpreter, so that no
/// immediate ever runs as an instruction of its own.
pub fn has_stack_immediate(op: u8, spec: SpecId) -> bool {
    use opcode::*;
    matches!(op, DUPN | SWAPN | EXCHANGE) && active(op, spec)
}

/// Whether `op` starts a new frame (the CALL and CREATE families): compiled code suspends
/// there while revm runs the child frame, and resumes at the next instruction, which starts
/// a block of its own.
pub fn creates_frame(op: u8) -> bool {
    use opcode::*;
    matches!(
        op,
        CALL | CALLCODE | DELEGATECALL | STATICCALL | CREATE | CREATE2
    )
}

/// Stack items `op` pops and pushes, as the interpreter checks them (DUPn needs n items and
/// pushes one; SWAPn needs n + 1 and leaves the height unchanged).
fn stack_io(op: u8) -> (usize, usize) {
    match OpCode::new(op) {
        Some(info) => (info.inputs() as usize, info.outputs() as usize),
        None => (0, 0),
    }
}

/// Analyses `code` (the original bytes, without padding) for `spec` with its static gas table.
pub fn analyze(code: &[u8], spec: SpecId, gas: &GasTable) -> Analysis {
    let mut blocks = Vec::new();
    let mut jumpdest_block = vec![None; code.len()];
    let mut pc = 0;
    let mut current: Option<Block> = None;
    // Height relative to the open block's entry.
    let mut growth: isize = 0;
    let mut after_frame = false;
    // Past the end the EVM executes STOP; a block running off the end ends there.
    while pc < code.len() || current.is_some() {
        let op = code.get(pc).copied().unwrap_or(opcode::STOP);
        let stack_immediate = pc < code.len() && has_stack_immediate(op, spec);
        if (op == opcode::JUMPDEST || stack_immediate) && pc < code.len() {
            if let Some(mut block) = current.take() {
                block.falls_through = true;
                blocks.push(block);
            }
        }
        if current.is_none() {
            growth = 0;
        }
        let block = current.get_or_insert(Block {
            start: pc,
            end: pc,
            static_gas: 0,
            min_height: 0,
            max_growth: 0,
            compilable: true,
            falls_through: false,
            resumes: std::mem::take(&mut after_frame),
        });
        if op == opcode::JUMPDEST && pc == block.start && pc < code.len() {
            jumpdest_block[pc] = Some(blocks.len() as u32);
        }
        let known = OpCode::new(op).is_some();
        let (inputs, outputs) = stack_io(op);
        let needed = inputs as isize - growth;
        if needed > 0 {
            block.min_height = block.min_height.max(needed as usize);
        }
        let after = growth - inputs as isize + outputs as isize;
        if after > 0 {
            block.max_growth = block.max_growth.max(after as usize);
        }
        growth = after;
        block.static_gas += gas[op as usize] as u64;
        // Unknown and inactive opcodes run through the interpreter's instruction function,
        // which halts with its own error.
        block.compilable &= block.max_growth <= STACK_LIMIT && !stack_immediate;
        let immediate = if (opcode::PUSH1..=opcode::PUSH32).contains(&op) {
            (op - opcode::PUSH0) as usize
        } else {
            0
        };
        pc += 1 + immediate;
        block.end = pc;
        let ends = !known
            || matches!(
                op,
                opcode::JUMP
                    | opcode::JUMPI
                    | opcode::STOP
                    | opcode::RETURN
                    | opcode::REVERT
                    | opcode::INVALID
                    | opcode::SELFDESTRUCT
            )
            || creates_frame(op)
            || pc > code.len();
        if ends {
            if let Some(mut block) = current.take() {
                block.falls_through = op == opcode::JUMPI || creates_frame(op);
                blocks.push(block);
            }
            after_frame = creates_frame(op) && pc < code.len();
        }
    }
    Analysis {
        blocks,
        jumpdest_block,
    }
}

/// The static gas table of `spec`.
pub fn gas_table(spec: SpecId) -> GasTable {
    revm::interpreter::instructions::gas_table_spec(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcode::*;

    fn run(code: &[u8]) -> Analysis {
        analyze(code, SpecId::CANCUN, &gas_table(SpecId::CANCUN))
    }

    #[test]
    fn blocks_split_at_jumps_and_jumpdests() {
        // 0: PUSH1 4, 2: JUMP, 3: INVALID, 4: JUMPDEST, 5: PUSH1 1, 7: PUSH1 2, 9: ADD, 10: STOP
        let code = [
            PUSH1, 4, JUMP, INVALID, JUMPDEST, PUSH1, 1, PUSH1, 2, ADD, STOP,
        ];
        let a = run(&code);
        let spans: Vec<(usize, usize)> = a.blocks.iter().map(|b| (b.start, b.end)).collect();
        assert_eq!(spans, vec![(0, 3), (3, 4), (4, 11)]);
        assert_eq!(a.jump_target(4), Some(2));
        assert_eq!(a.jump_target(5), None);
        assert_eq!(a.jump_target(0), None);
        let b = &a.blocks[2];
        // JUMPDEST 1 + PUSH1 3 + PUSH1 3 + ADD 3 + STOP 0
        assert_eq!(b.static_gas, 10);
        assert_eq!((b.min_height, b.max_growth), (0, 2));
        assert!(a.fully_compilable());
    }

    #[test]
    fn push_data_is_not_a_jumpdest_and_truncated_push_reads_past_the_end() {
        let code = [PUSH2, JUMPDEST, JUMPDEST, PUSH1];
        let a = run(&code);
        assert_eq!(a.jump_target(1), None);
        assert_eq!(a.jump_target(2), None);
        assert_eq!(a.blocks.len(), 1);
        assert_eq!(a.blocks[0].end, 5);
    }

    #[test]
    fn stack_requirements() {
        // SWAP2 needs 3 items; POP POP leaves -2; DUP1 then needs 1 more.
        let code = [SWAP2, POP, POP, DUP1, STOP];
        let b = &run(&code).blocks[0];
        assert_eq!(b.min_height, 3);
        assert_eq!(b.max_growth, 0);
    }

    #[test]
    fn frame_creating_opcodes_end_a_block_and_the_next_one_resumes() {
        let call = [
            PUSH0, PUSH0, PUSH0, PUSH0, PUSH0, PUSH0, GAS, CALL, POP, STOP,
        ];
        let a = run(&call);
        let spans: Vec<(usize, usize, bool)> = a
            .blocks
            .iter()
            .map(|b| (b.start, b.end, b.resumes))
            .collect();
        assert_eq!(spans, vec![(0, 8, false), (8, 10, true)]);
        assert!(a.blocks[0].falls_through);
        assert!(a.fully_compilable());
        // A CALL as the last byte: the frame resumes at the implicit STOP past the end,
        // which no block covers (the interpreter runs it).
        let a = run(&[GAS, CALL]);
        assert_eq!(a.blocks.len(), 1);
    }

    #[test]
    fn dupn_swapn_and_exchange_start_a_block_left_to_the_interpreter_where_active() {
        for op in [DUPN, SWAPN, EXCHANGE] {
            // 0: PUSH1 1, 2: op 0x5b (an invalid immediate, and a JUMPDEST byte), 4: STOP
            let code = [PUSH1, 1, op, JUMPDEST, STOP];
            let amsterdam = analyze(&code, SpecId::AMSTERDAM, &gas_table(SpecId::AMSTERDAM));
            let blocks: Vec<(usize, bool, bool)> = amsterdam
                .blocks
                .iter()
                .map(|b| (b.start, b.compilable, b.falls_through))
                .collect();
            assert_eq!(
                blocks,
                vec![(0, true, true), (2, false, true), (3, true, false)]
            );
            // Jump destination analysis does not skip the immediate.
            assert_eq!(amsterdam.jump_target(3), Some(2));
            // Before Amsterdam the opcode halts like any undefined one, compiled or not.
            let prague = analyze(&code, SpecId::PRAGUE, &gas_table(SpecId::PRAGUE));
            assert!(prague.fully_compilable());
            assert_eq!(prague.blocks[0].start, 0);
        }
    }

    #[test]
    fn a_block_pushing_past_the_limit_is_left_to_the_interpreter() {
        let mut code = vec![PUSH0; STACK_LIMIT + 1];
        code.push(STOP);
        assert!(!run(&code).blocks[0].compilable);
        code.remove(0);
        assert!(run(&code).blocks[0].compilable);
    }
}

//! WETH9, the ERC-20 the benchmarks run: its mainnet address and its real bytecode, taken from
//! the shipped fixtures' pre-state rather than embedded, so the code measured is mainnet's.

use std::path::Path;

use alloy_primitives::{address, Address, Bytes};
use eyre::{eyre, Result};
use gigas_evm::load_fixtures_dir;

/// WETH9 on mainnet.
pub const WETH: Address = address!("c02aaa39b223fe8d0a0e5c4f27ead9083c756cc2");

/// WETH9's runtime code from the first fixture under `blocks_dir` whose pre-state holds it.
pub fn weth_code(blocks_dir: &Path) -> Result<Bytes> {
    for fixture in load_fixtures_dir(blocks_dir)? {
        if let Some(code) = fixture.prestate.get(&WETH).and_then(|a| a.code.clone()) {
            if !code.is_empty() {
                return Ok(code);
            }
        }
    }
    Err(eyre!(
        "no fixture in {} holds WETH9's code",
        blocks_dir.display()
    ))
}

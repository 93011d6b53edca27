//! `gigas-fullnode`: follows a Gigas sequencer by applying its state diffs.

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {}

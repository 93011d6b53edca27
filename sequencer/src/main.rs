//! `gigas-sequencer`: see [`gigas_sequencer::cli`].

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> eyre::Result<()> {
    gigas_sequencer::cli::main_with_args(std::env::args_os())
}

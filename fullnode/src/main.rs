//! `gigas-fullnode`: see [`gigas_fullnode::cli`].

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> eyre::Result<()> {
    gigas_fullnode::cli::main_with_args(std::env::args_os())
}

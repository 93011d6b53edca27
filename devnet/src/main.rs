//! `gigas-devnet`: see [`gigas_devnet`].

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> eyre::Result<()> {
    gigas_devnet::main_with_args(std::env::args_os())
}

//! `gigas-profiler`: see [`gigas_profiler::cli`].

fn main() -> eyre::Result<()> {
    gigas_profiler::cli::main_with_args(std::env::args_os())
}

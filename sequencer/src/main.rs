//! `gigas-sequencer`: see [`gigas_sequencer::cli`].

// `--features system-alloc` leaves the system allocator in place, so that a heap profiler that
// intercepts `malloc` (heaptrack) sees every allocation by site.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> eyre::Result<()> {
    gigas_sequencer::cli::main_with_args(std::env::args_os())
}

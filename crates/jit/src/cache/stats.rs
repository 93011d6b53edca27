//! What the code cache counts: the counters shared with `/metrics`, and their values at
//! one moment.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::compiler::CodeMemoryMetrics;

/// Counters of the code cache, shared with the `/metrics` registry.
#[derive(Debug, Default)]
pub struct JitStats {
    /// Contracts compiled.
    pub compiled: Counter,
    /// Contracts that could not be compiled (they run in the interpreter), panics of the
    /// compiler and contracts larger than the budget included.
    pub failed: Counter,
    /// Compiles that ended in a panic of the compiler (counted in `failed` too).
    pub compile_panics: Counter,
    /// Seconds spent compiling (`gigas_jit_compile_seconds_total`).
    pub compile_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Bytes of machine code compiled, in total (evicted code included).
    pub code_bytes: Counter,
    /// Bytes of EVM code compiled.
    pub evm_bytes: Counter,
    /// Frames that started in compiled code.
    pub compiled_frames: Counter,
    /// Times compiled code handed a frame to the interpreter before its end (or its next
    /// CALL).
    pub bailed_frames: Counter,
    /// Times compiled code stopped at a CALL or CREATE for a child frame.
    pub suspensions: Counter,
    /// Compiled contracts evicted to stay within the budget.
    pub evictions: Counter,
    /// Evictions of code that an EVM still held (a running frame, or a transaction's table
    /// of code found): its memory was freed only once they let go.
    pub evicted_in_use: Counter,
    /// Compile requests dropped because the queue was full.
    pub dropped_requests: Counter,
    /// Bytes of machine code the cache holds (at most the budget).
    pub resident_bytes: Gauge,
    /// Compiled contracts the cache holds.
    pub resident_contracts: Gauge,
    /// Contracts counted towards hotness or remembered as not compilable.
    pub tracked_contracts: Gauge,
    /// The budget in bytes (`i64::MAX`: none).
    pub budget_bytes: Gauge,
    /// Machine code mapped, by the cache and by evicted code that running frames still hold.
    pub memory: CodeMemoryMetrics,
}

impl JitStats {
    /// Registers the counters as `gigas_jit_*` for the node's `/metrics` (they are shared:
    /// the registry reads the live values).
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_jit");
        for (name, help, counter) in [
            ("contracts_compiled", "Contracts compiled", &self.compiled),
            (
                "contracts_not_compiled",
                "Contracts the compiler failed on, found nothing to compile in or that exceed the budget (interpreted)",
                &self.failed,
            ),
            (
                "compile_panics",
                "Compiles that ended in a panic of the compiler (caught; counted as not compiled)",
                &self.compile_panics,
            ),
            (
                "compiled_code_bytes",
                "Bytes of machine code compiled, evicted code included",
                &self.code_bytes,
            ),
            (
                "evm_code_bytes",
                "Bytes of EVM code compiled",
                &self.evm_bytes,
            ),
            (
                "compiled_frames",
                "Frames that started in compiled code",
                &self.compiled_frames,
            ),
            (
                "handovers",
                "Times compiled code handed a frame to the interpreter",
                &self.bailed_frames,
            ),
            (
                "suspensions",
                "Times compiled code stopped at a CALL or CREATE",
                &self.suspensions,
            ),
            (
                "evictions",
                "Compiled contracts evicted to keep the machine code within the budget",
                &self.evictions,
            ),
            (
                "evictions_in_use",
                "Evictions of code an EVM still held (freed once it let go)",
                &self.evicted_in_use,
            ),
            (
                "compile_requests_dropped",
                "Compile requests dropped because the compiler's queue was full",
                &self.dropped_requests,
            ),
            (
                "freed_code_modules",
                "Compiled contracts whose machine code was unmapped",
                &self.memory.freed_modules,
            ),
        ] {
            sub.register(name, help, counter.clone());
        }
        sub.register(
            "compile_seconds",
            "Time spent compiling",
            self.compile_seconds.clone(),
        );
        for (name, help, gauge) in [
            (
                "resident_code_bytes",
                "Bytes of machine code the code cache holds (pages)",
                &self.resident_bytes,
            ),
            (
                "resident_contracts",
                "Compiled contracts the code cache holds",
                &self.resident_contracts,
            ),
            (
                "tracked_contracts",
                "Contracts counted towards hotness or remembered as not compilable",
                &self.tracked_contracts,
            ),
            (
                "budget_bytes",
                "The code cache's budget of machine code",
                &self.budget_bytes,
            ),
            (
                "mapped_code_bytes",
                "Bytes of machine code mapped: the cache's and evicted code running frames still hold",
                &self.memory.mapped_bytes,
            ),
            (
                "mapped_code_modules",
                "Compiled contracts whose machine code is mapped",
                &self.memory.mapped_modules,
            ),
        ] {
            sub.register(name, help, gauge.clone());
        }
    }

    /// The counters' values now.
    pub fn snapshot(&self) -> JitCounts {
        let gauge = |g: &Gauge| u64::try_from(g.get()).unwrap_or(0);
        JitCounts {
            compiled: self.compiled.get(),
            failed: self.failed.get(),
            compile_panics: self.compile_panics.get(),
            compile_ns: (self.compile_seconds.get() * 1e9).round() as u64,
            code_bytes: self.code_bytes.get(),
            evm_bytes: self.evm_bytes.get(),
            compiled_frames: self.compiled_frames.get(),
            bailed_frames: self.bailed_frames.get(),
            suspensions: self.suspensions.get(),
            evictions: self.evictions.get(),
            evicted_in_use: self.evicted_in_use.get(),
            dropped_requests: self.dropped_requests.get(),
            resident_bytes: gauge(&self.resident_bytes),
            resident_contracts: gauge(&self.resident_contracts),
            tracked_contracts: gauge(&self.tracked_contracts),
            mapped_bytes: gauge(&self.memory.mapped_bytes),
            mapped_modules: gauge(&self.memory.mapped_modules),
            freed_modules: self.memory.freed_modules.get(),
        }
    }
}

/// The values of [`JitStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitCounts {
    /// Contracts compiled.
    pub compiled: u64,
    /// Contracts that could not be compiled.
    pub failed: u64,
    /// Compiles that ended in a panic of the compiler.
    pub compile_panics: u64,
    /// Nanoseconds spent compiling.
    pub compile_ns: u64,
    /// Bytes of machine code compiled, in total.
    pub code_bytes: u64,
    /// Bytes of EVM code compiled.
    pub evm_bytes: u64,
    /// Frames that started in compiled code.
    pub compiled_frames: u64,
    /// Times compiled code handed a frame to the interpreter.
    pub bailed_frames: u64,
    /// Times compiled code stopped at a CALL or CREATE.
    pub suspensions: u64,
    /// Compiled contracts evicted.
    pub evictions: u64,
    /// Evictions of code an EVM still held.
    pub evicted_in_use: u64,
    /// Compile requests dropped on a full queue.
    pub dropped_requests: u64,
    /// Bytes of machine code the cache holds.
    pub resident_bytes: u64,
    /// Compiled contracts the cache holds.
    pub resident_contracts: u64,
    /// Contracts counted towards hotness or remembered as not compilable.
    pub tracked_contracts: u64,
    /// Bytes of machine code mapped (the cache's and what running frames hold).
    pub mapped_bytes: u64,
    /// Compiled contracts whose machine code is mapped.
    pub mapped_modules: u64,
    /// Compiled contracts whose machine code was unmapped.
    pub freed_modules: u64,
}

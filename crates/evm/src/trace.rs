//! Geth-style traces of one transaction or call (`debug_traceTransaction`,
//! `debug_traceCall`): the `callTracer` (the call tree Foundry, Tenderly and Blockscout read)
//! and the default struct logger, recorded by revm-inspectors' `TracingInspector` on revm's
//! inspect path.
//!
//! A trace is an execution a client asked for, so it is held like a call ([`crate::budget`]):
//! the caller's deadline stops its loops, and what the inspector records is bounded. The
//! struct logger records a step per instruction with a copy of the stack, which a hostile
//! contract can make 32 KiB a step: [`TraceCaps::max_steps`] and
//! [`TraceCaps::max_recorded_bytes`] stop the recording (and the execution) with
//! [`TraceError::TooLarge`] instead of growing without end.

use std::fmt;

use alloy_rpc_types_trace::geth::{
    CallConfig, GethDebugBuiltInTracerType, GethDebugTracerType, GethDebugTracingOptions,
    GethDefaultTracingOptions, GethTrace, NoopFrame,
};
use revm::context::result::{ExecutionResult, ResultAndState};
use revm::context::{ContextError, TxEnv};
use revm::context_interface::ContextTr;
use revm::database_interface::Database;
use revm::inspector::{InspectEvm, Inspector};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::{CallInputs, CallOutcome, CreateInputs, CreateOutcome, Interpreter};
use revm::primitives::{Address, Log, U256};
use revm::MainBuilder;
use revm_inspectors::tracing::{
    TraceLimitBehavior, TraceLimits, TracingInspector, TracingInspectorConfig,
};

use crate::executor::{block_context, PreparedBlock, TxError};

/// What one trace may record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceCaps {
    /// Most instructions the struct logger records (each is one `structLogs` entry).
    pub max_steps: u64,
    /// Most bytes of inputs, memory and return data the inspector copies.
    pub max_recorded_bytes: usize,
}

impl Default for TraceCaps {
    /// 100,000 steps and 64 MiB: a struct log of some tens of MiB of JSON at most.
    fn default() -> Self {
        Self {
            max_steps: 100_000,
            max_recorded_bytes: 64 << 20,
        }
    }
}

/// Why a trace could not be made (a transaction that ran and failed is traced as it ran).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The tracer asked for is not served.
    #[error("{0}")]
    Unsupported(String),
    /// The trace outgrew its caps.
    #[error(
        "the trace is larger than this node records ({what}); trace with the callTracer, or \
         with {{\"disableStack\": true}} and a \"limit\""
    )]
    TooLarge {
        /// Which cap.
        what: String,
    },
    /// revm refused or failed the transaction.
    #[error(transparent)]
    Tx(#[from] TxError),
}

/// What [`trace`] should record, from a request's tracing options.
#[derive(Debug, Clone)]
pub enum Tracer {
    /// The default struct logger with its options.
    StructLog(GethDefaultTracingOptions),
    /// The `callTracer` with its configuration.
    Call(CallConfig),
    /// The `noopTracer`: nothing, `{}`.
    Noop,
}

impl Tracer {
    /// The tracer a `debug_trace*` request's options ask for. The prestate tracer of one
    /// transaction, the 4-byte, flat-call, mux and JavaScript tracers are not served.
    pub fn from_options(options: &GethDebugTracingOptions) -> Result<Self, TraceError> {
        match &options.tracer {
            None => Ok(Tracer::StructLog(options.config)),
            Some(GethDebugTracerType::BuiltInTracer(GethDebugBuiltInTracerType::CallTracer)) => {
                let config = options
                    .tracer_config
                    .clone()
                    .into_call_config()
                    .map_err(|e| TraceError::Unsupported(format!("callTracer config: {e}")))?;
                Ok(Tracer::Call(config))
            }
            Some(GethDebugTracerType::BuiltInTracer(GethDebugBuiltInTracerType::NoopTracer)) => {
                Ok(Tracer::Noop)
            }
            Some(other) => Err(TraceError::Unsupported(format!(
                "tracer {:?} is not served here: this node serves the callTracer, the default \
                 struct logger (no tracer) and the noopTracer",
                other.as_str()
            ))),
        }
    }

    fn config(&self) -> TracingInspectorConfig {
        match self {
            Tracer::StructLog(options) => TracingInspectorConfig::from_geth_config(options),
            Tracer::Call(config) => TracingInspectorConfig::from_geth_call_config(config),
            Tracer::Noop => TracingInspectorConfig::none(),
        }
    }
}

/// Runs `tx` in `block` over `db` under `tracer` without committing, and returns the trace
/// and what the transaction did (the caller commits it to trace a later transaction of the
/// same block). Loops and calls check this thread's deadline ([`crate::budget::Deadline`]).
pub fn trace<DB>(
    db: DB,
    block: &PreparedBlock,
    tx: TxEnv,
    tracer: &Tracer,
    caps: TraceCaps,
) -> Result<(GethTrace, ResultAndState), TraceError>
where
    DB: Database,
    DB::Error: fmt::Display,
{
    let inspector = Capped {
        inner: TracingInspector::new(tracer.config()).with_limits(
            TraceLimits::default()
                .set_max_recorded_bytes(Some(caps.max_recorded_bytes))
                .set_behavior(TraceLimitBehavior::Halt),
        ),
        steps: 0,
        max_steps: match tracer {
            Tracer::StructLog(_) => caps.max_steps,
            // The call tracer records no steps: frames are bounded by gas and depth.
            _ => u64::MAX,
        },
        exceeded: false,
    };
    let (outcome, inspector) = inspect(db, block, tx, inspector);
    if inspector.exceeded {
        return Err(TraceError::TooLarge {
            what: format!("{} steps", inspector.max_steps),
        });
    }
    if inspector.inner.limit_exceeded() {
        return Err(TraceError::TooLarge {
            what: format!("{} bytes recorded", caps.max_recorded_bytes),
        });
    }
    let outcome = outcome.map_err(TxError::from)?;
    let result = &outcome.result;
    let gas_used = result.tx_gas_used();
    let trace = match tracer {
        Tracer::StructLog(options) => {
            let output = match result {
                ExecutionResult::Success { output, .. } => output.data().clone(),
                ExecutionResult::Revert { output, .. } => output.clone(),
                ExecutionResult::Halt { .. } => Default::default(),
            };
            GethTrace::Default(
                inspector
                    .inner
                    .into_geth_builder()
                    .geth_traces(gas_used, output, *options),
            )
        }
        Tracer::Call(config) => GethTrace::CallTracer(
            inspector
                .inner
                .into_geth_builder()
                .geth_call_traces(*config, gas_used),
        ),
        Tracer::Noop => GethTrace::NoopTracer(NoopFrame::default()),
    };
    Ok((trace, outcome))
}

/// Runs `tx` in `block` over `db` on revm's inspect path with `inspector`, without
/// committing; returns the outcome and the inspector. Loops and calls check this thread's
/// deadline ([`crate::budget::Deadline`]).
#[allow(clippy::type_complexity)]
pub fn inspect<DB, I>(
    db: DB,
    block: &PreparedBlock,
    tx: TxEnv,
    inspector: I,
) -> (
    Result<ResultAndState, revm::context::result::EVMError<DB::Error>>,
    I,
)
where
    DB: Database,
    I: Inspector<crate::executor::BlockContext<DB>, EthInterpreter>,
{
    let mut evm = block_context(db, block, ()).build_mainnet_with_inspector(inspector);
    crate::budget::guard_instructions(&mut evm.instruction);
    let outcome = evm.inspect_tx(tx);
    (outcome, evm.inspector)
}

/// The tracing inspector with a cap on the steps it records: at the cap the transaction is
/// stopped with an error, as revm-inspectors stops it at its byte cap.
#[derive(Debug)]
struct Capped<I> {
    inner: I,
    steps: u64,
    max_steps: u64,
    exceeded: bool,
}

impl<CTX, I> Inspector<CTX, EthInterpreter> for Capped<I>
where
    CTX: ContextTr,
    I: Inspector<CTX, EthInterpreter>,
{
    fn initialize_interp(&mut self, interp: &mut Interpreter<EthInterpreter>, context: &mut CTX) {
        self.inner.initialize_interp(interp, context);
    }

    fn step(&mut self, interp: &mut Interpreter<EthInterpreter>, context: &mut CTX) {
        self.steps += 1;
        if self.steps > self.max_steps {
            if !self.exceeded {
                self.exceeded = true;
                *context.error() = Err(ContextError::Custom(format!(
                    "trace step limit of {} reached",
                    self.max_steps
                )));
            }
            interp.halt(revm::interpreter::InstructionResult::OutOfGas);
            return;
        }
        self.inner.step(interp, context);
    }

    fn step_end(&mut self, interp: &mut Interpreter<EthInterpreter>, context: &mut CTX) {
        if !self.exceeded {
            self.inner.step_end(interp, context);
        }
    }

    fn log(&mut self, context: &mut CTX, log: Log) {
        self.inner.log(context, log);
    }

    fn log_full(&mut self, interp: &mut Interpreter<EthInterpreter>, context: &mut CTX, log: Log) {
        self.inner.log_full(interp, context, log);
    }

    fn call(&mut self, context: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        self.inner.call(context, inputs)
    }

    fn call_end(&mut self, context: &mut CTX, inputs: &CallInputs, outcome: &mut CallOutcome) {
        self.inner.call_end(context, inputs, outcome);
    }

    fn create(&mut self, context: &mut CTX, inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        self.inner.create(context, inputs)
    }

    fn create_end(
        &mut self,
        context: &mut CTX,
        inputs: &CreateInputs,
        outcome: &mut CreateOutcome,
    ) {
        self.inner.create_end(context, inputs, outcome);
    }

    fn selfdestruct(&mut self, contract: Address, target: Address, value: U256) {
        Inspector::<CTX, EthInterpreter>::selfdestruct(&mut self.inner, contract, target, value);
    }
}

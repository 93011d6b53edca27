//! Calls over a state: `eth_call`, `eth_estimateGas`, `eth_createAccessList` and
//! `debug_traceCall`, each held to a [`CallBudget`], with errors in the words Ethereum tools
//! match. Both nodes answer these four with the same functions over their own state.

use alloy_consensus::Header;
use alloy_primitives::{Bytes, U256};
use alloy_rpc_types_eth::state::StateOverride;
use alloy_rpc_types_eth::{AccessListResult, BlockOverrides, TransactionRequest};
use alloy_rpc_types_trace::geth::{GethDebugTracingCallOptions, GethTrace};
use gigas_evm::budget::CallBudget;
use gigas_evm::call::{CallError, CallRequest, Estimate};
use gigas_evm::revm::context::result::{ExecutionResult, InvalidTransaction};
use gigas_evm::revm::database_interface::DatabaseRef;
use gigas_evm::trace::{TraceCaps, Tracer};
use gigas_evm::TxError;
use gigas_primitives::ChainSpec;
use gigas_rpc::RpcError;

/// The state a call runs over: `db`, the state after `header`'s block, under `spec`, every
/// execution held to `budget` (gas, memory, time). Both nodes answer `eth_call`,
/// `eth_estimateGas`, `eth_createAccessList` and `debug_traceCall` through it, over their
/// own state.
pub struct StateCalls<'a, DB> {
    spec: &'a ChainSpec,
    header: &'a Header,
    db: &'a DB,
    budget: CallBudget,
}

impl<DB> std::fmt::Debug for StateCalls<'_, DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCalls")
            .field("block", &self.header.number)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl<'a, DB> StateCalls<'a, DB>
where
    DB: DatabaseRef,
    DB::Error: std::fmt::Display,
{
    /// Calls over `db`, the state after `header`'s block.
    pub fn new(spec: &'a ChainSpec, header: &'a Header, db: &'a DB, budget: CallBudget) -> Self {
        Self {
            spec,
            header,
            db,
            budget,
        }
    }

    fn request<'r>(
        &self,
        req: &'r TransactionRequest,
        state: Option<&'r StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> CallRequest<'r> {
        CallRequest::new(self.spec, self.header, req, state, block, self.budget)
    }

    /// `eth_call` of `req`.
    pub fn call(
        &self,
        req: &TransactionRequest,
        state: Option<&StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Result<Bytes, RpcError> {
        let call = self.request(req, state, block);
        let result = call
            .run(self.db, call.call_gas())
            .map_err(|e| call_error(req, e))?;
        call_outcome(result).map(|(out, _)| out)
    }

    /// `eth_estimateGas` of `req` (see [`CallRequest::estimate`]): every probe over the one
    /// state, all within one budget.
    pub fn estimate_gas(
        &self,
        req: &TransactionRequest,
        state: Option<&StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Result<u64, RpcError> {
        match self
            .request(req, state, block)
            .estimate(self.db)
            .map_err(|e| call_error(req, e))?
        {
            Estimate::Gas(gas) => Ok(gas),
            // geth's words: ethers, viem and web3.py show them as they are.
            Estimate::ExceedsAllowance(allowance) => Err(RpcError::ExecutionFailed(format!(
                "gas required exceeds allowance ({allowance})"
            ))),
            // A call that fails with all the gas it may have: answer its error.
            Estimate::Failed(failed) => call_outcome(failed).map(|(_, used)| used),
        }
    }

    /// `eth_createAccessList` of `req`: the list, the gas with it, and the call's failure
    /// beside them when it reverted or halted (as geth answers).
    pub fn access_list(
        &self,
        req: &TransactionRequest,
        state: Option<&StateOverride>,
    ) -> Result<AccessListResult, RpcError> {
        let found = self
            .request(req, state, None)
            .access_list(self.db)
            .map_err(|e| call_error(req, e))?;
        let error = match call_outcome(found.result) {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        Ok(AccessListResult {
            access_list: found.access_list,
            gas_used: U256::from(found.gas_used),
            error,
        })
    }

    /// `debug_traceCall` of `req`, with the options' state and block overrides; the trace
    /// within `caps`.
    pub fn trace(
        &self,
        req: &TransactionRequest,
        options: &GethDebugTracingCallOptions,
    ) -> Result<GethTrace, RpcError> {
        if options.tx_index.is_some() {
            return Err(RpcError::InvalidParams(
                "debug_traceCall with txIndex is not supported: the call runs on the state \
                 after the block"
                    .into(),
            ));
        }
        let tracer = Tracer::from_options(&options.tracing_options)
            .map_err(|e| RpcError::InvalidParams(e.to_string()))?;
        self.request(
            req,
            options.state_overrides.as_ref(),
            options.block_overrides.as_ref(),
        )
        .trace(self.db, &tracer, TraceCaps::default())
        .map_err(|e| call_error(req, e))
    }
}

/// The output and gas of a call that succeeded; its revert reason or halt as an RPC error.
fn call_outcome(result: ExecutionResult) -> Result<(Bytes, u64), RpcError> {
    let used = result.tx_gas_used();
    match result {
        ExecutionResult::Success { output, .. } => Ok((output.into_data(), used)),
        ExecutionResult::Revert { output, .. } => Err(RpcError::revert(output)),
        // geth answers a halt with the EVM's error alone ("out of gas", "invalid jump
        // destination", ...).
        ExecutionResult::Halt { reason, .. } => Err(RpcError::ExecutionFailed(reason.to_string())),
    }
}

/// A call that could not run, in the words Ethereum tools match: geth's "insufficient funds
/// for gas * price + value" (ethers reports INSUFFICIENT_FUNDS on it, viem
/// InsufficientFundsError), its timeout message, revm's reason otherwise.
fn call_error(req: &TransactionRequest, e: CallError) -> RpcError {
    match e {
        CallError::Tx(TxError::Invalid(InvalidTransaction::LackOfFundForMaxFee {
            fee,
            balance,
        })) => RpcError::ExecutionFailed(format!(
            "insufficient funds for gas * price + value: address {} have {balance} want {fee}",
            req.from.unwrap_or_default()
        )),
        CallError::Tx(TxError::Invalid(reason)) => RpcError::ExecutionFailed(reason.to_string()),
        timeout @ CallError::Timeout(_) => RpcError::Timeout(timeout.to_string()),
        CallError::Trace(reason) => RpcError::LimitExceeded(reason),
        // A state override that cannot be laid is the request's fault.
        CallError::Override(reason) => RpcError::InvalidParams(format!("state override: {reason}")),
        other => RpcError::Internal(other.to_string()),
    }
}

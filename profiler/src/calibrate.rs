//! Calibrating the probe's own cost per instruction.
//!
//! The probe of a timed pass adds a relaxed store to every dispatched instruction.
//! Its cost is measured on a compute-bound program (snailtracer: about 8 million cheap
//! instructions per call, no state access), plain and probed runs alternated in this process
//! with the sampler running as it does on the blocks. The report subtracts
//! `count x cost` from each opcode row; how well the corrected rows then add up to the plain
//! blocks' time is the check that the calibration transfers.

use std::path::Path;
use std::time::{Duration, Instant};

use alloy_primitives::Bytes;
use gigas_evm::probe::{Probe, ProbedEvm};
use gigas_evm::program::call_block;
use gigas_evm::{execute_block, PlainEvm};
use serde::Serialize;

use crate::report::Stat;
use crate::sampler::sampled_block;

/// Errors of the calibration.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The program file could not be read or is not hex.
    #[error("{file}: {reason}")]
    Program {
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The program did not run to success.
    #[error("calibration program failed: {0}")]
    Execution(String),
    /// The sampler could not start.
    #[error("cannot start the sampler: {0}")]
    Sampler(std::io::Error),
}

/// The measured cost of the probe.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// The program's file.
    pub program: String,
    /// Instructions one call executes.
    pub instructions: u64,
    /// Plain run times, milliseconds.
    pub plain_ms: Stat,
    /// Probed run times (sampler running), milliseconds.
    pub probed_ms: Stat,
    /// Plain nanoseconds per instruction (median run).
    pub plain_ns_per_instruction: f64,
    /// The probe's cost per instruction: the median over pairs of back-to-back runs of
    /// (probed - plain) / instructions.
    pub probe_ns_per_instruction: f64,
}

/// Reads a hex file of runtime bytecode.
pub fn read_hex(file: &Path) -> Result<Bytes, CalibrationError> {
    let text = std::fs::read_to_string(file).map_err(|e| CalibrationError::Program {
        file: file.display().to_string(),
        reason: format!("cannot read: {e}"),
    })?;
    let text = text.trim();
    let bytes = hex::decode(text.strip_prefix("0x").unwrap_or(text)).map_err(|e| {
        CalibrationError::Program {
            file: file.display().to_string(),
            reason: format!("not hex: {e}"),
        }
    })?;
    Ok(bytes.into())
}

/// Measures the probe's cost per instruction on `program` called with `calldata`, over
/// `runs` alternated pairs of plain and probed runs.
pub fn calibrate(
    program: &Path,
    calldata: Bytes,
    runs: usize,
    interval: Duration,
) -> Result<Calibration, CalibrationError> {
    let code = read_hex(program)?;
    let (block, db) = call_block(code, calldata, 1_000_000_000);
    if block.txs.len() != 1 {
        return Err(CalibrationError::Execution(
            "cannot build the calibration transaction".into(),
        ));
    }
    let mut plain = Vec::with_capacity(runs);
    let mut probed = Vec::with_capacity(runs);
    let run_plain = || -> Result<Duration, CalibrationError> {
        let mut evm = PlainEvm::new(db.clone(), &block);
        let start = Instant::now();
        let outcome = execute_block(&mut evm, &block)
            .map_err(|e| CalibrationError::Execution(e.to_string()))?;
        let elapsed = start.elapsed();
        if !outcome.receipts.iter().all(|r| r.success) {
            return Err(CalibrationError::Execution("the program reverted".into()));
        }
        Ok(elapsed)
    };
    // The timed runs probe as the profiler's timed passes do, publishing without counting;
    // the instructions come from one counting run.
    let run_probed = || -> Result<Duration, CalibrationError> {
        let mut evm = ProbedEvm::new(db.clone(), &block, Probe::new().without_counts());
        let run = sampled_block(&mut evm, &block, interval).map_err(CalibrationError::Sampler)?;
        run.outcome
            .map_err(|e| CalibrationError::Execution(e.to_string()))?;
        Ok(run.elapsed)
    };
    let mut counting = ProbedEvm::new(db.clone(), &block, Probe::new());
    execute_block(&mut counting, &block).map_err(|e| CalibrationError::Execution(e.to_string()))?;
    let instructions: u64 = counting.probe().counts.iter().sum();
    // One untimed run of each warms caches and allocator.
    run_plain()?;
    run_probed()?;
    for i in 0..runs {
        if i % 2 == 0 {
            plain.push(run_plain()?);
            probed.push(run_probed()?);
        } else {
            probed.push(run_probed()?);
            plain.push(run_plain()?);
        }
    }
    let plain_ms = Stat::of(plain.iter().map(|d| d.as_secs_f64() * 1e3).collect());
    let probed_ms = Stat::of(probed.iter().map(|d| d.as_secs_f64() * 1e3).collect());
    let per = |ms: f64| {
        if instructions > 0 {
            ms * 1e6 / instructions as f64
        } else {
            0.0
        }
    };
    Ok(Calibration {
        program: program.display().to_string(),
        instructions,
        plain_ns_per_instruction: per(plain_ms.median),
        probe_ns_per_instruction: per(Stat::of(
            plain
                .iter()
                .zip(&probed)
                .map(|(a, b)| (b.as_secs_f64() - a.as_secs_f64()) * 1e3)
                .collect(),
        )
        .median)
        .max(0.0),
        plain_ms,
        probed_ms,
    })
}

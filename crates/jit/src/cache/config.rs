//! What a code cache is configured with: the JIT mode and its parsing, when a contract is
//! hot, and the bounds on machine code, tracked contracts and queued compiles.

use std::fmt;
use std::str::FromStr;

/// When compiled code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JitMode {
    /// Never: the interpreter runs everything.
    #[default]
    Off,
    /// Contracts become hot by calls and by the gas their interpreted frames spend (see
    /// [`Hotness`]) and are then compiled in the background; frames are interpreted until
    /// their code is ready.
    On,
    /// Every contract is compiled when first called, before its frame runs.
    Eager,
}

/// A JIT mode that is not `off`, `on` or `eager`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown JIT mode {0:?}: expected off, on or eager")]
pub struct ParseJitModeError(String);

impl FromStr for JitMode {
    type Err = ParseJitModeError;
    fn from_str(s: &str) -> Result<Self, ParseJitModeError> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "eager" => Ok(Self::Eager),
            other => Err(ParseJitModeError(other.to_string())),
        }
    }
}

impl fmt::Display for JitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Eager => "eager",
        })
    }
}

/// When `JitMode::On` compiles a contract: once it has been called at least `calls` times
/// and its interpreted frames have spent at least `gas` on their own instructions (gas
/// passed on to child frames is not theirs).
///
/// Gas is the better measure of what compiling saves: a contract called a thousand times to
/// run forty instructions gains less than one that loops for a million gas, and compiled code
/// that runs rarely only takes room in the instruction cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hotness {
    /// Calls (frames started) before compiling.
    pub calls: u32,
    /// Gas spent by interpreted frames of the contract before compiling.
    pub gas: u64,
}

impl Default for Hotness {
    /// 300,000 gas, whatever the calls: on the 50 shipped mainnet blocks it compiles 243
    /// contracts (88 MB of machine code) and replays 1.09x to 1.14x faster than the
    /// interpreter, where 8 calls compiled 612 (156 MB) for 1.03x, 100,000 gas 765 for 1.04x
    /// and 1,000,000 gas 62 for 1.08x to 1.09x.
    fn default() -> Self {
        Self {
            calls: 1,
            gas: 300_000,
        }
    }
}

impl Hotness {
    /// A threshold no contract reaches: with a [`HotList`](super::HotList), the list alone
    /// is compiled.
    pub const NEVER: Self = Self {
        calls: u32::MAX,
        gas: u64::MAX,
    };

    pub(super) fn reached(&self, calls: u32, gas: u64) -> bool {
        calls >= self.calls && gas >= self.gas
    }
}

/// The default budget of machine code: 64 MiB (see the crate documentation for how it was
/// chosen).
pub const DEFAULT_BUDGET_BYTES: u64 = 64 << 20;

/// The default bound on contracts counted towards hotness or remembered as not compilable.
pub const DEFAULT_MAX_TRACKED: usize = 1 << 16;

/// The default bound on compile requests waiting for the compiler thread.
pub const DEFAULT_MAX_QUEUED: usize = 256;

/// How a [`CodeCache`](super::CodeCache) compiles and how much it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// When compiled code runs.
    pub mode: JitMode,
    /// When `JitMode::On` compiles.
    pub hotness: Hotness,
    /// Bytes of machine code the cache keeps at most (`u64::MAX`: no limit).
    pub budget_bytes: u64,
    /// Contracts counted towards hotness or remembered as not compilable, at most.
    pub max_tracked: usize,
    /// Compile requests waiting for the compiler thread, at most (`On` drops requests
    /// beyond; `Eager` waits for room).
    pub max_queued: usize,
}

impl CacheConfig {
    /// The defaults, for `mode`.
    pub fn new(mode: JitMode) -> Self {
        Self {
            mode,
            hotness: Hotness::default(),
            budget_bytes: DEFAULT_BUDGET_BYTES,
            max_tracked: DEFAULT_MAX_TRACKED,
            max_queued: DEFAULT_MAX_QUEUED,
        }
    }
}

//! Names for what a call-stack profile shows in hex: contracts by address, functions by their
//! 4-byte selector.
//!
//! The label file is plain text, one entry per line, `#` starting a comment:
//!
//! ```text
//! 0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2 WETH9     # an address and its name
//! transfer(address,uint256)                          # a signature; its selector is hashed
//! 0x022c0d9f swap                                    # a bare selector and a name
//! ```
//!
//! The profiler ships one ([`DEFAULT_LABELS`], `profiler/labels.txt`) with the precompiles and
//! the well-known contracts of the shipped mainnet blocks; `--labels FILE` adds entries (a
//! later entry replaces an earlier one). Owns: the file format and the lookups. Must not:
//! guess a name that is not in a file.

use std::collections::HashMap;
use std::path::Path;

use alloy_primitives::{keccak256, Address};

use crate::stacks::Label;

/// The labels shipped with the profiler.
pub const DEFAULT_LABELS: &str = include_str!("../labels.txt");

/// A label file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    /// The file cannot be read.
    #[error("cannot read the label file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is neither an address with a name, a signature, nor a selector with a name.
    #[error(
        "{origin}, line {line}: `{text}` is not `0xADDRESS name`, `name(types)` or `0xSELECTOR name`"
    )]
    Line {
        /// The file.
        origin: String,
        /// The line number (from 1).
        line: usize,
        /// The line.
        text: String,
    },
}

/// Names of contracts and functions.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    contracts: HashMap<Address, String>,
    functions: HashMap<[u8; 4], String>,
}

impl Labels {
    /// The shipped labels.
    pub fn shipped() -> Self {
        let mut labels = Self::default();
        // The shipped file is checked by a test; a bad line in it is a build defect, so
        // the entries that parse are kept rather than failing a profile over it.
        let _ = labels.add_text(DEFAULT_LABELS, "the shipped labels");
        labels
    }

    /// Adds the entries of a label file.
    pub fn add_file(&mut self, path: &Path) -> Result<(), LabelError> {
        let text = std::fs::read_to_string(path).map_err(|source| LabelError::Read {
            path: path.display().to_string(),
            source,
        })?;
        self.add_text(&text, &path.display().to_string())
    }

    /// Adds the entries of a label file's text; `origin` names it in errors.
    pub fn add_text(&mut self, text: &str, origin: &str) -> Result<(), LabelError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = || LabelError::Line {
                origin: origin.to_string(),
                line: i + 1,
                text: raw.trim().to_string(),
            };
            let (first, rest) = match line.split_once(char::is_whitespace) {
                Some((first, rest)) => (first, rest.trim()),
                None => (line, ""),
            };
            if first.contains('(') {
                // A signature has no spaces: `transfer(address,uint256)`.
                if !rest.is_empty() || !first.ends_with(')') {
                    return Err(bad());
                }
                let hash = keccak256(first.as_bytes());
                let selector = [hash[0], hash[1], hash[2], hash[3]];
                self.functions.insert(selector, first.to_string());
                continue;
            }
            let hex = first
                .strip_prefix("0x")
                .or_else(|| first.strip_prefix("0X"))
                .ok_or_else(bad)?;
            if rest.is_empty() {
                return Err(bad());
            }
            let bytes = hex::decode(hex).map_err(|_| bad())?;
            match bytes.len() {
                20 => {
                    self.contracts
                        .insert(Address::from_slice(&bytes), rest.to_string());
                }
                4 => {
                    self.functions
                        .insert([bytes[0], bytes[1], bytes[2], bytes[3]], rest.to_string());
                }
                _ => return Err(bad()),
            }
        }
        Ok(())
    }

    /// Entries: contracts, functions.
    pub fn len(&self) -> (usize, usize) {
        (self.contracts.len(), self.functions.len())
    }

    /// A contract's name, if known.
    pub fn contract(&self, address: &Address) -> Option<&str> {
        self.contracts.get(address).map(String::as_str)
    }

    /// A function's signature or name, if known.
    pub fn function(&self, selector: &[u8; 4]) -> Option<&str> {
        self.functions.get(selector).map(String::as_str)
    }

    /// A contract's name, else its address in hex.
    pub fn contract_name(&self, address: &Address) -> String {
        match self.contract(address) {
            Some(name) => name.to_string(),
            None => format!("{address:#x}"),
        }
    }

    /// A function's name, else its selector in hex; `fallback` without a selector.
    pub fn function_name(&self, selector: Option<&[u8; 4]>) -> String {
        match selector {
            Some(s) => match self.function(s) {
                Some(name) => name.to_string(),
                None => format!("0x{}", hex::encode(s)),
            },
            None => "fallback".to_string(),
        }
    }

    /// `contract:function` for a code row (`contract` alone without a selector column).
    pub fn code_name(
        &self,
        code: &Address,
        selector: Option<&[u8; 4]>,
        precompile: bool,
        with_function: bool,
    ) -> String {
        let contract = self.contract_name(code);
        if precompile {
            return format!("{contract} (precompile)");
        }
        if with_function {
            format!("{contract}:{}", self.function_name(selector))
        } else {
            contract
        }
    }

    /// A node's frame name in stacks and flame graphs.
    pub fn frame_name(&self, label: &Label) -> String {
        use gigas_evm::callstack::CallKind;
        match label {
            Label::All => "all".to_string(),
            Label::Block(number) => format!("block {number}"),
            Label::Tx { index, hash } => {
                format!("tx {index} {}", &format!("{hash:#x}")[..12])
            }
            Label::Frame(f) => {
                let base = match f.kind {
                    CallKind::Create | CallKind::Create2 => {
                        format!("{} (new)", self.contract_name(&f.code))
                    }
                    _ => self.code_name(&f.code, f.selector.as_ref(), f.precompile, true),
                };
                match f.kind {
                    CallKind::Call | CallKind::Create => base,
                    kind => format!("{base} [{}]", kind.name()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::address;

    #[test]
    fn the_shipped_labels_parse_and_name_well_known_code() {
        let mut labels = Labels::default();
        labels
            .add_text(DEFAULT_LABELS, "labels.txt")
            .expect("every shipped line parses");
        assert_eq!(
            labels.contract(&address!("c02aaa39b223fe8d0a0e5c4f27ead9083c756cc2")),
            Some("WETH9")
        );
        // transfer(address,uint256) hashes to the ERC-20 selector everyone knows.
        assert_eq!(
            labels.function(&[0xa9, 0x05, 0x9c, 0xbb]),
            Some("transfer(address,uint256)")
        );
        assert_eq!(
            labels.contract(&Address::with_last_byte(1)),
            Some("ecrecover")
        );
    }

    #[test]
    fn bad_lines_are_errors_naming_the_line() {
        for text in [
            "0x1234 name",
            "0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2",
            "transfer(address, uint256)",
            "hello world",
            "0xzz2aaa39b223fe8d0a0e5c4f27ead9083c756cc2 x",
        ] {
            let err = Labels::default()
                .add_text(&format!("# ok\n\n{text}\n"), "t")
                .expect_err(text);
            assert!(err.to_string().contains("line 3"), "{err}");
        }
        let mut labels = Labels::default();
        labels
            .add_text(
                "0xa9059cbb send   # a comment\n0xAbC0000000000000000000000000000000000001 Thing",
                "t",
            )
            .expect("parses");
        assert_eq!(labels.function(&[0xa9, 0x05, 0x9c, 0xbb]), Some("send"));
        assert_eq!(labels.function_name(None), "fallback");
        assert_eq!(
            labels.contract_name(&address!("abc0000000000000000000000000000000000001")),
            "Thing"
        );
    }
}

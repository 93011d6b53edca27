//! The block's prestate: the per-transaction prestates of geth's `prestateTracer` merged into
//! the state the block reads.

use std::collections::BTreeMap;

use alloy_primitives::{Address, Bytes, B256, U256};
use serde::Serialize;
use serde_json::Value;

use super::{kind, parse_u256, quantity};

/// One account of the merged prestate, as `shared/data/README.md` describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MergedAccount {
    /// Balance before the block.
    pub balance: U256,
    /// Nonce before the block.
    pub nonce: u64,
    /// Code before the block; absent when empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Bytes>,
    /// Slots the block touches, with their values before it; absent when none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub storage: BTreeMap<B256, B256>,
}

/// Merges `debug_traceBlockByNumber(N, {"tracer": "prestateTracer"})` (a list of
/// `{txHash, result: {addr: account}}`, in transaction order) into the block's prestate.
///
/// Accounts and slots are the union over transactions. The first transaction that lists an
/// account decides its balance, nonce and code, a field it omits being zero or empty (geth
/// omits a zero nonce and empty code: taking a later transaction's value would give an
/// account created in the block the code it got there). Each slot takes the value of the
/// first transaction that lists it. Both are the values before the block, since a
/// transaction's prestate lists everything it reads or writes as it was before it.
/// Fields other than these four (geth's `codeHash`) are ignored.
pub fn merge_prestates(traces: &Value) -> Result<BTreeMap<Address, MergedAccount>, String> {
    let list = traces.as_array().ok_or_else(|| {
        format!(
            "expected a list of per-transaction results, got {}",
            kind(traces)
        )
    })?;
    let mut merged: BTreeMap<Address, MergedAccount> = BTreeMap::new();
    for (index, entry) in list.iter().enumerate() {
        if let Some(error) = entry.get("error") {
            return Err(format!("transaction {index}: the tracer failed: {error}"));
        }
        let result = entry
            .get("result")
            .ok_or_else(|| format!("transaction {index}: no `result`"))?;
        let accounts = result.as_object().ok_or_else(|| {
            format!(
                "transaction {index}: `result` is {}, not an object",
                kind(result)
            )
        })?;
        for (address, account) in accounts {
            let at = |what: String| format!("transaction {index}, account {address}: {what}");
            let address: Address = address
                .parse()
                .map_err(|e| at(format!("not an address: {e}")))?;
            let fields = account
                .as_object()
                .ok_or_else(|| at(format!("{} instead of an object", kind(account))))?;
            let slot_map = match fields.get("storage") {
                None | Some(Value::Null) => None,
                Some(Value::Object(slots)) => Some(slots),
                Some(other) => return Err(at(format!("storage is {}", kind(other)))),
            };
            let entry = match merged.entry(address) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    let code = match fields.get("code") {
                        None | Some(Value::Null) => None,
                        Some(Value::String(hex)) => {
                            let bytes: Bytes = hex.parse().map_err(|e| at(format!("code: {e}")))?;
                            (!bytes.is_empty()).then_some(bytes)
                        }
                        Some(other) => return Err(at(format!("code is {}", kind(other)))),
                    };
                    v.insert(MergedAccount {
                        balance: quantity(fields.get("balance"))
                            .map_err(|e| at(format!("balance: {e}")))?,
                        nonce: quantity(fields.get("nonce"))
                            .map_err(|e| at(format!("nonce: {e}")))?
                            .try_into()
                            .map_err(|_| at("nonce over 64 bits".into()))?,
                        code,
                        storage: BTreeMap::new(),
                    })
                }
            };
            for (slot, value) in slot_map.into_iter().flatten() {
                let slot = B256::from(
                    parse_u256(slot).map_err(|e| at(format!("storage key {slot}: {e}")))?,
                );
                let value = B256::from(
                    quantity(Some(value)).map_err(|e| at(format!("storage {slot}: {e}")))?,
                );
                entry.storage.entry(slot).or_insert(value);
            }
        }
    }
    Ok(merged)
}

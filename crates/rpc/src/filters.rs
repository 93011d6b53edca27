//! Installed filters: `eth_newFilter`, `eth_newBlockFilter`, `eth_newPendingTransactionFilter`,
//! polled with `eth_getFilterChanges` (web3.py's `create_filter`, viem's `watchEvent` over
//! HTTP), as geth keeps them.
//!
//! A filter is state a client leaves on the node between requests, over HTTP where the node
//! cannot tell one client from another: so the store has a bound ([`FilterLimits::max_filters`],
//! a new filter beyond it is refused), every filter expires after
//! [`FilterLimits::expiry`] without a poll (geth's five minutes), and no filter holds data of
//! its own that grows between polls:
//!
//! - a **block filter** keeps the next block number; a poll answers the hashes from there to
//!   the head, at most [`FilterLimits::max_hashes`] (the newest; older ones are skipped with
//!   the poll saying nothing of them, as geth's buffer drops them);
//! - a **log filter** keeps its filter and next block; a poll runs `eth_getLogs` over the
//!   blocks since, under the same bounds as `eth_getLogs`;
//! - a **pending-transaction filter** reads the node's bounded broadcast of admitted hashes
//!   from where it last read; a filter that falls further behind than the channel holds
//!   skips what it missed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use alloy_primitives::B256;
use alloy_rpc_types_eth::Filter;
use tokio::sync::broadcast;

use crate::RpcError;

/// The bounds of the filter store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterLimits {
    /// Most filters installed at once, all clients together.
    pub max_filters: usize,
    /// Most filters one client ([`crate::accept::client_key`]: an IPv4 address, an IPv6 /64)
    /// may hold at once, so that one client cannot take every place of `max_filters`.
    /// Loopback clients are held to it only with `limit_loopback` (a proxy on the same host
    /// brings every client in from 127.0.0.1).
    pub max_per_client: usize,
    /// How long a filter lives without a poll.
    pub expiry: Duration,
    /// Most block hashes (or pending hashes) one poll answers.
    pub max_hashes: usize,
}

impl Default for FilterLimits {
    /// 10,000 filters, 500 a client, geth's five minutes, 4,096 hashes a poll.
    fn default() -> Self {
        Self {
            max_filters: 10_000,
            max_per_client: 500,
            expiry: Duration::from_secs(300),
            max_hashes: 4_096,
        }
    }
}

/// What a filter follows.
#[derive(Debug)]
pub(crate) enum FilterKind {
    /// New blocks, from `next` on.
    Blocks { next: u64 },
    /// Logs matching `filter`, from block `next` on.
    Logs { filter: Box<Filter>, next: u64 },
    /// Hashes of admitted transactions.
    Pending { hashes: broadcast::Receiver<B256> },
}

#[derive(Debug)]
struct Installed {
    kind: FilterKind,
    polled: Instant,
    /// The client that installed it, where it is held to the per-client bound.
    owner: Option<IpAddr>,
}

/// The installed filters.
#[derive(Debug)]
pub(crate) struct FilterStore {
    limits: FilterLimits,
    filters: Mutex<HashMap<String, Installed>>,
}

impl FilterStore {
    pub(crate) fn new(limits: FilterLimits) -> Self {
        Self {
            limits,
            filters: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn limits(&self) -> FilterLimits {
        self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Installed>> {
        self.filters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops every filter not polled within the expiry.
    fn expire(&self, filters: &mut HashMap<String, Installed>, now: Instant) {
        let expiry = self.limits.expiry;
        filters.retain(|_, f| now.duration_since(f.polled) < expiry);
    }

    /// Installs a filter for `owner` (the client, where it is held to the per-client bound)
    /// and returns its id (geth's form: "0x" and 16 random bytes in hex).
    pub(crate) fn install(
        &self,
        kind: FilterKind,
        owner: Option<IpAddr>,
    ) -> Result<String, RpcError> {
        let now = Instant::now();
        let mut filters = self.lock();
        self.expire(&mut filters, now);
        if let Some(owner) = owner {
            // A scan of at most `max_filters` under the lock: installs are rare next to
            // polls, and a count kept beside the map would have to follow every expiry.
            let held = filters.values().filter(|f| f.owner == Some(owner)).count();
            if held >= self.limits.max_per_client {
                return Err(RpcError::LimitExceeded(format!(
                    "too many filters installed by this client ({}); uninstall unused ones \
                     with eth_uninstallFilter or let them expire ({} s without a poll)",
                    self.limits.max_per_client,
                    self.limits.expiry.as_secs()
                )));
            }
        }
        if filters.len() >= self.limits.max_filters {
            return Err(RpcError::LimitExceeded(format!(
                "too many filters installed ({}); uninstall unused ones with eth_uninstallFilter \
                 or let them expire ({} s without a poll)",
                self.limits.max_filters,
                self.limits.expiry.as_secs()
            )));
        }
        let id = loop {
            let id = format!("{:#034x}", rand::random::<u128>());
            if !filters.contains_key(&id) {
                break id;
            }
        };
        filters.insert(
            id.clone(),
            Installed {
                kind,
                polled: now,
                owner,
            },
        );
        Ok(id)
    }

    /// Removes a filter; whether it was there.
    pub(crate) fn uninstall(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    /// Runs `f` on filter `id`'s kind (marking it polled), or "filter not found" (geth's
    /// words) when it is unknown or expired. `f` must not block: it runs under the lock.
    pub(crate) fn with<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut FilterKind) -> T,
    ) -> Result<T, RpcError> {
        let now = Instant::now();
        let mut filters = self.lock();
        self.expire(&mut filters, now);
        let installed = filters
            .get_mut(id)
            .ok_or_else(|| RpcError::ResourceNotFound("filter not found".into()))?;
        installed.polled = now;
        Ok(f(&mut installed.kind))
    }

    /// How many filters are installed (expired ones not yet swept included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Takes what a pending-transaction filter's receiver holds, at most `max`, skipping what it
/// missed by lagging.
pub(crate) fn drain_pending(hashes: &mut broadcast::Receiver<B256>, max: usize) -> Vec<B256> {
    let mut out = Vec::new();
    while out.len() < max {
        match hashes.try_recv() {
            Ok(hash) => out.push(hash),
            Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_bounded_and_expire() {
        let store = FilterStore::new(FilterLimits {
            max_filters: 2,
            max_per_client: 2,
            expiry: Duration::from_millis(50),
            max_hashes: 8,
        });
        let a = store.install(FilterKind::Blocks { next: 1 }, None).unwrap();
        let b = store.install(FilterKind::Blocks { next: 1 }, None).unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("0x") && a.len() == 34, "{a}");
        let err = store
            .install(FilterKind::Blocks { next: 1 }, None)
            .unwrap_err();
        assert!(err.to_string().contains("too many filters"), "{err}");
        assert!(store.uninstall(&b));
        assert!(!store.uninstall(&b));
        store.install(FilterKind::Blocks { next: 1 }, None).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let err = store.with(&a, |_| ()).unwrap_err();
        assert_eq!(err.to_string(), "filter not found");
        assert_eq!(store.len(), 0, "expired filters are swept");
    }

    /// Issue 66, item 10: one global cap shared by every client let one client fill it and
    /// refuse every other client's filters.
    #[test]
    fn one_client_cannot_take_every_filter() {
        let store = FilterStore::new(FilterLimits {
            max_filters: 10,
            max_per_client: 3,
            ..FilterLimits::default()
        });
        let greedy: IpAddr = "203.0.113.7".parse().unwrap();
        let polite: IpAddr = "203.0.113.8".parse().unwrap();
        let mut installed = 0;
        for _ in 0..10 {
            if store
                .install(FilterKind::Blocks { next: 1 }, Some(greedy))
                .is_ok()
            {
                installed += 1;
            }
        }
        assert_eq!(
            installed, 3,
            "one client installed {installed} of 10 filters"
        );
        let err = store
            .install(FilterKind::Blocks { next: 1 }, Some(greedy))
            .unwrap_err();
        assert!(err.to_string().contains("by this client"), "{err}");
        store
            .install(FilterKind::Blocks { next: 1 }, Some(polite))
            .expect("another client still installs");
    }

    #[test]
    fn a_lagging_pending_filter_skips_what_it_missed() {
        let (tx, mut rx) = broadcast::channel(4);
        for i in 0..10u8 {
            let _ = tx.send(B256::with_last_byte(i));
        }
        let got = drain_pending(&mut rx, 100);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], B256::with_last_byte(6));
        assert!(drain_pending(&mut rx, 100).is_empty());
    }
}

//! The port's accept loop: who is connected, and how many connections each client address
//! may hold.
//!
//! jsonrpsee's own loop bounds requests in flight, not TCP connections, and does not show a
//! connection's peer to the layers above it. A client that opens thousands of sockets, sends
//! one request on each and keeps them alive would hold thousands of file descriptors; one that
//! opens the archive's push stream hundreds of times would take every stream. So the server
//! accepts itself: each address may hold at most [`ClientLimits::max_per_address`]
//! connections (beyond it the connection is answered 429 and closed), and every request
//! carries its [`ClientAddr`], which routes use for their own per-client bounds.
//!
//! Loopback addresses are exempt unless configured otherwise: a reverse proxy or cache on the
//! same host (the nginx in front of a sequencer's archive) brings every remote client in from
//! 127.0.0.1, and local tools (the benchmark's load) open many connections on purpose.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

/// The peer of the connection a request came on, in the request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

impl ClientAddr {
    /// The client per-client bounds count by (the port does not matter): see
    /// [`client_key`].
    pub fn ip(&self) -> IpAddr {
        client_key(self.0.ip())
    }
}

/// Whether a client at `ip` is held to per-client bounds (connections, filters): every
/// client but loopback ones, which are held only with `limit_loopback` (a proxy on the same
/// host brings every remote client in from 127.0.0.1).
pub fn held_to_client_bounds(ip: IpAddr, limit_loopback: bool) -> bool {
    limit_loopback || !ip.to_canonical().is_loopback()
}

/// The client an address belongs to, as per-client bounds count: an IPv4 address on its own
/// (an IPv4-mapped IPv6 address, as a dual-stack listener reports IPv4 peers, as that IPv4
/// address), an IPv6 address by its /64 (with the rest zero). A host is given a whole /64
/// and can take any address in it (SLAAC privacy addresses change by themselves), so
/// counting IPv6 addresses one by one would give one host 2^64 places. Loopback stays itself.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) if !v6.is_loopback() => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        other => other,
    }
}

/// Connections per client address.
#[derive(Debug)]
pub struct ClientLimits {
    max_per_address: usize,
    limit_loopback: bool,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl ClientLimits {
    /// At most `max_per_address` per address (0: no bound); loopback addresses are bounded
    /// only with `limit_loopback`.
    pub fn new(max_per_address: usize, limit_loopback: bool) -> Arc<Self> {
        Arc::new(Self {
            max_per_address,
            limit_loopback,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The bound per address (0: none).
    pub fn max_per_address(&self) -> usize {
        self.max_per_address
    }

    /// Whether `ip` is held to the bound.
    pub fn applies_to(&self, ip: IpAddr) -> bool {
        self.max_per_address > 0 && held_to_client_bounds(ip, self.limit_loopback)
    }

    /// Takes one of the places of `ip`'s client ([`client_key`]: IPv6 addresses count by
    /// their /64), or `None` when it holds all of them. The place is given back when the
    /// returned guard drops.
    pub fn try_open(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let ip = client_key(ip);
        if self.applies_to(ip) {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let count = open.entry(ip).or_insert(0);
            if *count >= self.max_per_address {
                return None;
            }
            *count += 1;
        }
        Some(ClientSlot {
            limits: Arc::clone(self),
            ip,
        })
    }

    /// Places `ip`'s client holds now.
    pub fn open_for(&self, ip: IpAddr) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&client_key(ip))
            .copied()
            .unwrap_or(0)
    }
}

/// One place of a client address, given back on drop.
#[derive(Debug)]
pub struct ClientSlot {
    limits: Arc<ClientLimits>,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if !self.limits.applies_to(self.ip) {
            return;
        }
        let mut open = self
            .limits
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// What a connection over its address's bound is told before it is closed.
pub(crate) const TOO_MANY: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 68\r\n\r\n\
{\"error\":\"too many connections from this address; close some first\"}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_counted_per_address_and_given_back() {
        let limits = ClientLimits::new(2, false);
        let remote: IpAddr = "203.0.113.7".parse().unwrap();
        let other: IpAddr = "203.0.113.8".parse().unwrap();
        let a = limits.try_open(remote).unwrap();
        let _b = limits.try_open(remote).unwrap();
        assert!(limits.try_open(remote).is_none(), "a third place");
        assert!(limits.try_open(other).is_some(), "another address");
        drop(a);
        assert_eq!(limits.open_for(remote), 1);
        assert!(limits.try_open(remote).is_some());
        // Loopback is exempt unless asked.
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..10).filter_map(|_| limits.try_open(local)).collect();
        assert_eq!(held.len(), 10);
        let strict = ClientLimits::new(2, true);
        let held: Vec<_> = (0..10).filter_map(|_| strict.try_open(local)).collect();
        assert_eq!(held.len(), 2);
        drop(held);
        assert_eq!(strict.open_for(local), 0);
        // No bound at all.
        let open = ClientLimits::new(0, true);
        assert_eq!((0..10).filter_map(|_| open.try_open(remote)).count(), 10);
    }

    /// Issue 66, item 10: IPv6 clients were counted address by address, so one host could
    /// take any number of places with the 2^64 addresses of its /64.
    #[test]
    fn ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        let limits = ClientLimits::new(2, false);
        let host: Vec<IpAddr> = (1..=3u16)
            .map(|i| format!("2001:db8:aa:bb::{i:x}").parse().unwrap())
            .collect();
        let _a = limits.try_open(host[0]).unwrap();
        let _b = limits.try_open(host[1]).unwrap();
        assert!(
            limits.try_open(host[2]).is_none(),
            "a third address of the same /64 took a third place"
        );
        assert_eq!(limits.open_for(host[2]), 2);
        let next: IpAddr = "2001:db8:aa:bc::1".parse().unwrap();
        assert!(
            limits.try_open(next).is_some(),
            "the next /64 is another client"
        );
        // A dual-stack listener reports IPv4 peers as mapped addresses: the IPv4 address.
        let v4: IpAddr = "203.0.113.9".parse().unwrap();
        let mapped: IpAddr = "::ffff:203.0.113.9".parse().unwrap();
        let _c = limits.try_open(v4).unwrap();
        let _d = limits.try_open(mapped).unwrap();
        assert!(
            limits.try_open(v4).is_none(),
            "mapped and plain are one client"
        );
        assert!(
            limits
                .try_open("::ffff:203.0.113.10".parse().unwrap())
                .is_some(),
            "another IPv4 client"
        );
        // IPv6 loopback stays loopback, exempt unless asked.
        let local: IpAddr = "::1".parse().unwrap();
        assert_eq!((0..5).filter_map(|_| limits.try_open(local)).count(), 5);
        assert_eq!(
            client_key("2001:db8:aa:bb:1:2:3:4".parse().unwrap()),
            "2001:db8:aa:bb::".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn the_refusal_is_a_whole_http_response() {
        let text = std::str::from_utf8(TOO_MANY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }
}

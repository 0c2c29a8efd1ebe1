//! Who a [`UdpLink`](crate::UdpLink) talks to beyond the peers it was
//! opened with: an admission policy for senders not in its table (first
//! contact), and a handle through which its owner adds peers while the
//! link sits inside a runtime.
//!
//! Admission ([`UdpAdmission`]): a datagram from a UDP address not in the
//! table is taken only when its frame's source MAC is the one
//! [`derived_mac`](crate::derived_mac) gives its address (anything else
//! is a forgery, whoever sends it), it is addressed to this link, and
//! either its sender's IPv4 address lies in one of the admitted networks
//! or the frame passes the owner's check (a cluster key's authentication
//! tag, which only key holders can make). The sender then joins the
//! table, bounded by [`MAX_PEERS`]; everything else is
//! counted and dropped, changing no state.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxHashMap;

use crate::eth::MacAddr;

/// Most peers in a [`UdpLink`](crate::UdpLink)'s table (and waiting to
/// join it through [`UdpPeers`]).
pub const MAX_PEERS: usize = 4096;

/// An IPv4 network: an address and a prefix length (`10.0.0.0/8`; a bare
/// address is a /32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Net {
    addr: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Net {
    /// The network of `addr` with `prefix` leading bits (0..=32; more is
    /// taken as 32); host bits are cleared.
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Self {
        let prefix = prefix.min(32);
        Ipv4Net {
            addr: Ipv4Addr::from(u32::from(addr) & Self::mask(prefix)),
            prefix,
        }
    }

    fn mask(prefix: u8) -> u32 {
        match prefix {
            0 => 0,
            p => u32::MAX << (32 - u32::from(p.min(32))),
        }
    }

    /// Whether `ip` lies in the network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.prefix) == u32::from(self.addr)
    }

    /// The network address.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The prefix length, bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why a network did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseNetError(String);

impl fmt::Display for ParseNetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an IPv4 network (give ADDRESS/PREFIX such as 10.0.0.0/8, or an address)",
            self.0
        )
    }
}

impl std::error::Error for ParseNetError {}

impl FromStr for Ipv4Net {
    type Err = ParseNetError;

    /// `A.B.C.D/N` (N in 0..=32) or `A.B.C.D` (a /32).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseNetError(s.to_string());
        let (a, p) = match s.trim().split_once('/') {
            Some((a, p)) => (
                a,
                p.parse::<u8>().ok().filter(|p| *p <= 32).ok_or_else(bad)?,
            ),
            None => (s.trim(), 32),
        };
        Ok(Ipv4Net::new(a.parse().map_err(|_| bad())?, p))
    }
}

/// A check of a whole received frame (its bytes as they arrived), true
/// when the frame may open the way for its sender: e.g. a valid cluster
/// key tag (`runtime::auth::AuthKey::tag_valid`). It must not change
/// state: the runtime checks every frame again, replay window included.
pub type FrameCheck = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Which senders not in a [`UdpLink`](crate::UdpLink)'s table it admits
/// (see the module documentation). The default admits none.
#[derive(Clone, Default)]
pub struct UdpAdmission {
    /// Senders whose IPv4 address lies in one of these networks.
    pub nets: Vec<Ipv4Net>,
    /// Senders whose frame passes this check.
    pub check: Option<FrameCheck>,
}

impl fmt::Debug for UdpAdmission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpAdmission")
            .field("nets", &self.nets)
            .field("check", &self.check.is_some())
            .finish()
    }
}

impl UdpAdmission {
    /// Whether it admits no one (the default).
    pub fn admits_none(&self) -> bool {
        self.nets.is_empty() && self.check.is_none()
    }

    /// Whether the sender at `src` of `frame` (source MAC checked already)
    /// is admitted.
    pub(crate) fn admits(&self, src: SocketAddr, frame: &[u8]) -> bool {
        let in_nets = match src {
            SocketAddr::V4(a) => self.nets.iter().any(|n| n.contains(*a.ip())),
            SocketAddr::V6(_) => false,
        };
        in_nets || self.check.as_ref().is_some_and(|c| c(frame))
    }
}

/// A [`UdpLink`](crate::UdpLink)'s peer table as its owner sees it while
/// the link itself is inside a runtime: peers added here join the table
/// at the link's next send or receive (one atomic load when none waits),
/// and [`UdpPeers::lookup`] finds every peer of the table, those the link
/// admitted on first contact included. Bounded like the table
/// ([`MAX_PEERS`]).
#[derive(Debug, Default)]
pub struct UdpPeers {
    pending: Mutex<Vec<(MacAddr, SocketAddr)>>,
    dirty: AtomicBool,
    known: Mutex<FxHashMap<MacAddr, SocketAddr>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl UdpPeers {
    /// Queues `mac` at `addr` for the link's table (a peer already there
    /// with the same address is no change).
    ///
    /// Errors: `InvalidInput` for a group MAC, or when
    /// [`MAX_PEERS`] wait already.
    pub fn add(&self, mac: MacAddr, addr: SocketAddr) -> std::io::Result<()> {
        if mac.is_group() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("peer MAC {mac} is a group address"),
            ));
        }
        if self.lookup(mac) == Some(addr) {
            return Ok(());
        }
        let mut p = lock(&self.pending);
        if p.len() >= MAX_PEERS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} UDP link peers wait to be added", MAX_PEERS),
            ));
        }
        p.push((mac, addr));
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// The UDP address of peer `mac`, when it is in the link's table.
    pub fn lookup(&self, mac: MacAddr) -> Option<SocketAddr> {
        lock(&self.known).get(&mac).copied()
    }

    /// The peers queued since the last call, if any (the link's side).
    pub(crate) fn take_pending(&self) -> Option<Vec<(MacAddr, SocketAddr)>> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return None;
        }
        Some(std::mem::take(&mut *lock(&self.pending)))
    }

    /// `mac` at `addr` joined the link's table (the link's side).
    pub(crate) fn joined(&self, mac: MacAddr, addr: SocketAddr) {
        lock(&self.known).insert(mac, addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_parse_and_contain() {
        let n: Ipv4Net = "10.1.2.3/8".parse().unwrap();
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert!(n.contains("10.255.0.1".parse().unwrap()));
        assert!(!n.contains("11.0.0.1".parse().unwrap()));
        let h: Ipv4Net = "192.168.1.7".parse().unwrap();
        assert_eq!(h.prefix(), 32);
        assert!(h.contains("192.168.1.7".parse().unwrap()));
        assert!(!h.contains("192.168.1.8".parse().unwrap()));
        let all: Ipv4Net = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        for bad in ["10.0.0.0/33", "10.0.0/8", "x", "10.0.0.0/"] {
            assert!(bad.parse::<Ipv4Net>().is_err(), "{bad}");
        }
    }

    #[test]
    fn admission_by_network_or_check() {
        let frame = [0u8; 20];
        let a: SocketAddr = "10.0.0.5:9".parse().unwrap();
        let b: SocketAddr = "172.16.0.5:9".parse().unwrap();
        let none = UdpAdmission::default();
        assert!(!none.admits(a, &frame));
        let nets = UdpAdmission {
            nets: vec!["10.0.0.0/24".parse().unwrap()],
            check: None,
        };
        assert!(nets.admits(a, &frame) && !nets.admits(b, &frame));
        let keyed = UdpAdmission {
            nets: Vec::new(),
            check: Some(Arc::new(|f: &[u8]| f[0] == 1)),
        };
        assert!(!keyed.admits(b, &frame));
        let mut f = frame;
        f[0] = 1;
        assert!(keyed.admits(b, &f));
    }

    #[test]
    fn the_handle_queues_and_bounds() {
        let p = UdpPeers::default();
        assert!(p.take_pending().is_none());
        let a: SocketAddr = "10.0.0.5:9".parse().unwrap();
        p.add(MacAddr([2, 0, 0, 0, 0, 1]), a).unwrap();
        assert!(p.add(MacAddr([1, 0, 0, 0, 0, 1]), a).is_err());
        assert_eq!(p.take_pending().unwrap().len(), 1);
        assert!(p.take_pending().is_none());
        p.joined(MacAddr([2, 0, 0, 0, 0, 1]), a);
        assert_eq!(p.lookup(MacAddr([2, 0, 0, 0, 0, 1])), Some(a));
        // Already in the table: nothing to queue.
        p.add(MacAddr([2, 0, 0, 0, 0, 1]), a).unwrap();
        assert!(p.take_pending().is_none());
    }
}

//! `--link udp`: edp, esp and ctp-edp on a [`UdpLink`] (our Ethernet frames
//! carried whole in UDP datagrams) instead of an AF_PACKET socket, so they
//! run without CAP_NET_RAW, on loopback or across routed networks.
//!
//! Addresses. The client binds 0.0.0.0:(P+1) unless `--link-bind`, and its
//! link's only peer is `-R HOST[:P]`. The server binds 0.0.0.0:P unless
//! `--link-bind`, and its peers are the `--link-peer` addresses (a UDP link
//! takes frames only from the peers in its table: there is no learning, so
//! a stranger on the network cannot join the session). Each end's MAC is
//! [`derived_mac`] of its UDP address as its peers see it: the bind address
//! when it names an IP, else the local address the kernel routes from toward
//! the first peer (127.0.0.1 toward a loopback peer).
//!
//! One runtime per process, opened at the first socket and kept for every
//! later session of the process (a server without `--once`), like the
//! shared packet runtime of `--link packet`.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Mutex;

use ::edp::MacAddr;
use ::link::fault::FaultLink;
use ::link::Link;
use ::link::{derived_mac, UdpConfig, UdpLink};
use ::runtime::{Runtime, RuntimeConfig};

/// Where the UDP link of a session binds and whom it talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpLinkSpec {
    /// This end's UDP address.
    pub bind: SocketAddr,
    /// The peers' UDP addresses (client: the server; server: its clients).
    pub peers: Vec<SocketAddr>,
}

/// Resolves `HOST[:PORT]` (port `default_port` when absent; a bare IPv6
/// address takes the default port too) to one socket address, the host
/// through [`super::resolve_host`] (IPv4 first).
///
/// Errors: `InvalidInput` naming `what` when the port or the name is bad.
pub fn resolve(s: &str, default_port: u16, what: &str) -> io::Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidInput, format!("{what} {s:?}: {e}"));
    // "host:port" (one colon) or a host alone ("name", "10.0.0.1", "::1").
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (
            h,
            p.parse::<u16>()
                .map_err(|e| bad(format!("port {p:?}: {e}")))?,
        ),
        _ => (
            s.trim_start_matches('[').trim_end_matches(']'),
            default_port,
        ),
    };
    let ip = super::resolve_host(host).map_err(|e| bad(e.to_string()))?;
    Ok(SocketAddr::new(ip, port))
}

impl UdpLinkSpec {
    /// This end's address as its peers see it (see the module docs).
    pub fn seen_address(&self) -> io::Result<SocketAddr> {
        if !self.bind.ip().is_unspecified() {
            return Ok(self.bind);
        }
        let Some(peer) = self.peers.first() else {
            return Ok(SocketAddr::new(
                IpAddr::from([127, 0, 0, 1]),
                self.bind.port(),
            ));
        };
        // connect(2) on a UDP socket sends nothing: it asks the kernel for
        // the route, whose source address getsockname then reports.
        let any: SocketAddr = if peer.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            "[::]:0".parse().expect("valid address")
        };
        let probe = UdpSocket::bind(any)?;
        probe.connect(peer).map_err(|e| {
            io::Error::new(e.kind(), format!("no route to UDP link peer {peer}: {e}"))
        })?;
        Ok(SocketAddr::new(probe.local_addr()?.ip(), self.bind.port()))
    }

    /// The MAC the server of a session answers to: [`derived_mac`] of the
    /// client's only peer.
    pub fn first_peer_mac(&self) -> io::Result<MacAddr> {
        self.peers
            .first()
            .map(|a| derived_mac(*a))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the UDP link has no peer"))
    }

    fn open_link(
        &self,
        mtu: usize,
        fault: Option<::link::fault::FaultConfig>,
    ) -> io::Result<Box<dyn Link>> {
        let me = self.seen_address()?;
        let mut cfg = UdpConfig::new(self.bind, derived_mac(me));
        cfg.mtu = mtu;
        let mut link = UdpLink::open(&cfg)
            .map_err(|e| io::Error::new(e.kind(), format!("UDP link on {}: {e}", self.bind)))?;
        for p in &self.peers {
            link.add_peer(derived_mac(*p), *p)?;
        }
        Ok(match fault {
            Some(f) => Box::new(FaultLink::new(link, f)),
            None => Box::new(link),
        })
    }
}

/// The process's UDP-link runtime (see the module docs).
static RUNTIME: Mutex<Option<(UdpLinkSpec, Runtime)>> = Mutex::new(None);

/// The runtime on `spec`'s UDP link: opened at the first call, the same one
/// after. `mtu` is the link's Ethernet payload in bytes.
///
/// Errors: those of binding the UDP socket (`AddrInUse` names the address),
/// an unresolvable route to a peer, and `InvalidInput` when a later session
/// of the process asks for another link than the first.
pub fn runtime(
    spec: &UdpLinkSpec,
    mtu: usize,
    fault: Option<::link::fault::FaultConfig>,
) -> io::Result<Runtime> {
    let mut g = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((s, rt)) = g.as_ref() {
        if s != spec {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("this process already runs a UDP link {s:?}; it cannot open {spec:?}"),
            ));
        }
        return Ok(rt.clone());
    }
    let rt = Runtime::with_link(spec.open_link(mtu, fault)?, RuntimeConfig::default())?;
    *g = Some((spec.clone(), rt.clone()));
    Ok(rt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_without_port_take_the_default() {
        assert_eq!(
            resolve("127.0.0.1", 7, "-R").unwrap(),
            "127.0.0.1:7".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            resolve("127.0.0.1:9", 7, "-R").unwrap(),
            "127.0.0.1:9".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            resolve("::1", 7, "-R").unwrap(),
            "[::1]:7".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(resolve("localhost:9", 7, "-R").unwrap().port(), 9);
        let e = resolve("no-such-host.invalid", 7, "-R").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("-R"), "{e}");
    }

    #[test]
    fn an_unbound_end_is_seen_by_its_route_to_the_peer() {
        let spec = UdpLinkSpec {
            bind: "0.0.0.0:4000".parse().unwrap(),
            peers: vec!["127.0.0.1:4001".parse().unwrap()],
        };
        assert_eq!(
            spec.seen_address().unwrap(),
            "127.0.0.1:4000".parse::<SocketAddr>().unwrap()
        );
        let bound = UdpLinkSpec {
            bind: "127.0.0.2:4000".parse().unwrap(),
            peers: vec![],
        };
        assert_eq!(bound.seen_address().unwrap(), bound.bind);
    }
}

//! The carrier of an endpoint: an EDP socket (FI_EP_DGRAM) or a CTP socket
//! over EDP (FI_EP_RDM), in the process's runtime for the domain's
//! interface (packet link), or on a UDP link of its own.
//!
//! A UDP link delivers only frames of the peers in its table, given when it
//! is opened (`link::udp`), while libfabric inserts peers one
//! `fi_av_insert` at a time after the endpoint exists. [`UdpPeerLink`]
//! wraps the link so that peers inserted later reach its table: the
//! address vector's subscriber queues them ([`PeerQueue`]) and the link
//! takes them before its next send or receive, inside the runtime's turn.

use std::io::{self, IoSlice};
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ctp::{CtpConfig, CtpSocket, EdpTransport};
use edp::socket::Binding;
use edp::{EdpConfig, EdpSocket, MacAddr};
use link::KernelStats;
use link::Link;
use link::{derived_mac, UdpConfig, UdpLink};
use runtime::auth::{AuthKey, AuthSetting};
use runtime::{LinkConfig, Runtime, RuntimeConfig};

use crate::addr::{Name, UDP_LINK_PORT};
use crate::av::PeerSink;
use crate::config::{Config, LinkKind};
use crate::error::{FiError, FiResult};
use crate::nic::{link_mtu, Nic};

/// Peers inserted since the link last looked.
#[derive(Debug, Default)]
pub struct PeerQueue {
    pending: Mutex<Vec<(MacAddr, SocketAddr)>>,
    dirty: AtomicBool,
}

impl PeerSink for PeerQueue {
    fn peer_added(&self, _addr: u64, name: &Name) -> FiResult<()> {
        if let Name::Udp(a) = name {
            let a = SocketAddr::V4(*a);
            self.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((derived_mac(a), a));
            self.dirty.store(true, Ordering::Release);
        }
        Ok(())
    }
}

/// A [`UdpLink`] whose peer table grows as [`PeerQueue`] fills.
#[derive(Debug)]
pub struct UdpPeerLink {
    link: UdpLink,
    peers: Arc<PeerQueue>,
}

impl UdpPeerLink {
    /// Wraps `link`, taking new peers from `peers`.
    pub fn new(link: UdpLink, peers: Arc<PeerQueue>) -> Self {
        UdpPeerLink { link, peers }
    }

    /// Adds the queued peers to the table (one atomic load when none).
    fn take_peers(&mut self) {
        if !self.peers.dirty.swap(false, Ordering::AcqRel) {
            return;
        }
        let new =
            std::mem::take(&mut *self.peers.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for (mac, addr) in new {
            if self.link.peer(mac) == Some(addr) {
                continue;
            }
            if let Err(e) = self.link.add_peer(mac, addr) {
                tracing::warn!(%mac, %addr, error = %e, "clusternet: UDP link refused a peer");
            }
        }
    }
}

impl Link for UdpPeerLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.take_peers();
        self.link.send(frame)
    }
    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        self.take_peers();
        self.link.send_batch(frames)
    }
    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        self.take_peers();
        self.link.send_batch_vectored(frames)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.take_peers();
        self.link.recv(buf)
    }
    fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        self.take_peers();
        self.link.recv_batch(bufs, lens)
    }
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        self.take_peers();
        self.link.recv_with(max, f)
    }
    fn set_filter(&mut self, prog: &[netcore::bpf::Insn]) -> io::Result<()> {
        self.link.set_filter(prog)
    }
    fn kernel_stats(&self) -> Option<KernelStats> {
        self.link.kernel_stats()
    }
    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.link.join_group(group)
    }
    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.link.leave_group(group)
    }
    fn on_timeout(&mut self, now: Instant) -> io::Result<()> {
        self.link.on_timeout(now)
    }
    fn max_frame(&self) -> usize {
        self.link.max_frame()
    }
    fn mac(&self) -> MacAddr {
        self.link.mac()
    }
    fn mtu(&self) -> usize {
        self.link.mtu()
    }
    fn raw_fd(&self) -> Option<RawFd> {
        self.link.raw_fd()
    }
    fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        Link::as_fd(&self.link)
    }
    fn rx_ready(&self) -> Option<bool> {
        self.link.rx_ready()
    }
    fn poll_at(&self) -> Option<Instant> {
        self.link.poll_at()
    }
    fn frame_integrity(&self) -> bool {
        self.link.frame_integrity()
    }
}

/// The runtime configuration of the provider's sockets: the cluster key
/// from `FI_CLUSTERNET_KEY_FILE` when set, else from the environment
/// (`CLUSTERNET_KEY` / `CLUSTERNET_KEY_FILE`).
///
/// Errors: `FI_EINVAL` when the key file cannot be read or parsed.
pub fn runtime_config(config: &Config) -> FiResult<RuntimeConfig> {
    let auth =
        match &config.key_file {
            Some(p) => AuthSetting::Key(AuthKey::from_file(p).map_err(|e| {
                FiError::inval(format!("FI_CLUSTERNET_KEY_FILE={}: {e}", p.display()))
            })?),
            None => AuthSetting::FromEnv,
        };
    Ok(RuntimeConfig {
        link: LinkConfig {
            auth,
            ..LinkConfig::default()
        },
        ..RuntimeConfig::default()
    })
}

/// Whether frames are authenticated under `config` (the MTU is then 24
/// bytes smaller).
///
/// Errors: those of [`runtime_config`] and of reading the environment's key.
pub fn keyed(config: &Config) -> FiResult<bool> {
    let rc = runtime_config(config)?;
    rc.link
        .auth
        .resolve()
        .map(|k| k.is_some())
        .map_err(|e| FiError::inval(format!("cluster key: {e}")))
}

/// An open carrier: the socket, its name, and the UDP link's peer queue.
#[derive(Debug)]
pub struct Carrier {
    /// The EDP socket (nonblocking).
    pub sock: EdpSocket,
    /// The endpoint's name.
    pub name: Name,
    /// Over a UDP link: where the address vector's names go.
    pub peers: Option<Arc<PeerQueue>>,
}

/// Tries to bind a UDP link this many times when a free port found by a
/// probe is taken before the link binds it.
const UDP_BIND_ATTEMPTS: usize = 8;

/// Opens the carrier of an endpoint on `nic`: over the packet link an EDP
/// socket on `src`'s port (0 or absent: an ephemeral one) in the process's
/// runtime for the interface; over the UDP link a UDP link of its own on
/// the interface's IPv4 address (or `src`'s), its MAC derived from that
/// address.
///
/// Errors: `FI_EACCES` naming CAP_NET_RAW and setcap when the packet socket
/// is refused; `FI_EADDRINUSE` when `src`'s port is taken; other socket
/// errors mapped by [`FiError::io`].
pub fn open(nic: &Nic, config: &Config, src: Option<Name>) -> FiResult<Carrier> {
    let edp_config = EdpConfig {
        runtime: runtime_config(config)?,
        wait: config.wait,
        ..EdpConfig::default()
    };
    match config.link {
        LinkKind::Packet => {
            let port = match src {
                Some(Name::Edp { port, .. }) => port,
                _ => 0,
            };
            let mut sock = EdpSocket::bind_with((nic.name.as_str(), port), &edp_config)
                .map_err(|e| FiError::io(&format!("EDP socket on {}", nic.name), &e))?;
            sock.set_nonblocking(true)
                .map_err(|e| FiError::io("set_nonblocking", &e))?;
            let (_, mac, port) = sock
                .local_addr()
                .map_err(|e| FiError::io("local_addr", &e))?;
            Ok(Carrier {
                sock,
                name: Name::Edp { mac, port },
                peers: None,
            })
        }
        LinkKind::Udp => {
            let (wrapped, addr, peers) = udp_link(nic, src)?;
            let mut sock = EdpSocket::from_link_with(
                Box::new(wrapped),
                Binding::Port(UDP_LINK_PORT),
                &edp_config,
            )
            .map_err(|e| FiError::io("EDP socket on the UDP link", &e))?;
            sock.set_nonblocking(true)
                .map_err(|e| FiError::io("set_nonblocking", &e))?;
            Ok(Carrier {
                sock,
                name: Name::Udp(addr),
                peers: Some(peers),
            })
        }
    }
}

/// A UDP link for an endpoint on `nic` (at `src` when given), wrapped to
/// take its peers from the returned queue; and its address.
///
/// Errors: `FI_ENODATA` when `nic` has no IPv4 address; those of binding.
fn udp_link(nic: &Nic, src: Option<Name>) -> FiResult<(UdpPeerLink, SocketAddrV4, Arc<PeerQueue>)> {
    let want = match src {
        Some(Name::Udp(a)) if !a.ip().is_unspecified() => a,
        Some(Name::Udp(a)) => SocketAddrV4::new(nic.ipv4.unwrap_or(*a.ip()), a.port()),
        _ => SocketAddrV4::new(
            nic.ipv4
                .ok_or_else(|| FiError::nodata(format!("{} has no IPv4 address", nic.name)))?,
            0,
        ),
    };
    let (link, addr) = bind_udp_link(want, link_mtu(nic, LinkKind::Udp))?;
    let peers = Arc::new(PeerQueue::default());
    Ok((UdpPeerLink::new(link, peers.clone()), addr, peers))
}

/// The carrier of a reliable endpoint: a CTP socket over EDP.
#[derive(Debug)]
pub struct CtpCarrier {
    /// The CTP socket.
    pub sock: CtpSocket<EdpTransport>,
    /// The endpoint's name.
    pub name: Name,
    /// Over a UDP link: where the address vector's names go.
    pub peers: Option<Arc<PeerQueue>>,
}

/// Opens the carrier of an FI_EP_RDM endpoint on `nic`: a CTP socket over
/// EDP on `src`'s port (0 or absent: ephemeral) in the process's runtime
/// for the interface, or on a UDP link of its own (as [`open`]).
///
/// Errors: as [`open`].
pub fn open_ctp(nic: &Nic, config: &Config, src: Option<Name>) -> FiResult<CtpCarrier> {
    let ctp_config = CtpConfig {
        runtime: runtime_config(config)?,
        wait: config.wait,
        ..CtpConfig::default()
    };
    match config.link {
        LinkKind::Packet => {
            let port = match src {
                Some(Name::Edp { port, .. }) => port,
                _ => 0,
            };
            let sock = CtpSocket::bind_edp(&nic.name, port, ctp_config)
                .map_err(|e| FiError::io(&format!("CTP socket on {}", nic.name), &e))?;
            let (_, mac, port) = sock
                .local_addr()
                .map_err(|e| FiError::io("local_addr", &e))?;
            Ok(CtpCarrier {
                sock,
                name: Name::Edp { mac, port },
                peers: None,
            })
        }
        LinkKind::Udp => {
            let (wrapped, addr, peers) = udp_link(nic, src)?;
            let rt = Runtime::with_link(Box::new(wrapped), ctp_config.runtime.clone())
                .map_err(|e| FiError::io("runtime on the UDP link", &e))?;
            let sock = CtpSocket::bind_on(&rt, UDP_LINK_PORT, ctp_config)
                .map_err(|e| FiError::io("CTP socket on the UDP link", &e))?;
            Ok(CtpCarrier {
                sock,
                name: Name::Udp(addr),
                peers: Some(peers),
            })
        }
    }
}

/// Binds a UDP link at `want` (port 0: a free one, found by a probe
/// socket, since the link's MAC is derived from its final address).
fn bind_udp_link(want: SocketAddrV4, mtu: usize) -> FiResult<(UdpLink, SocketAddrV4)> {
    let mut last = None;
    for _ in 0..UDP_BIND_ATTEMPTS {
        let addr = if want.port() != 0 {
            want
        } else {
            let probe = UdpSocket::bind(want).map_err(|e| FiError::io("UDP bind", &e))?;
            match probe
                .local_addr()
                .map_err(|e| FiError::io("UDP bind", &e))?
            {
                SocketAddr::V4(a) => a,
                SocketAddr::V6(_) => return Err(FiError::inval("the UDP link is IPv4")),
            }
        };
        let mut c = UdpConfig::new(SocketAddr::V4(addr), derived_mac(SocketAddr::V4(addr)));
        c.mtu = mtu;
        match UdpLink::open(&c) {
            Ok(l) => return Ok((l, addr)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && want.port() == 0 => last = Some(e),
            Err(e) => return Err(FiError::io(&format!("UDP link on {addr}"), &e)),
        }
    }
    let e = last.unwrap_or_else(|| io::ErrorKind::AddrInUse.into());
    Err(FiError::io(&format!("UDP link on {}", want.ip()), &e))
}

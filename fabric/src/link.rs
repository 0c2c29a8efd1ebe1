//! The carrier of an endpoint: an EDP socket (FI_EP_DGRAM) or a CTP socket
//! over EDP (FI_EP_RDM), in the process's runtime for the domain's
//! interface (packet link), or on a UDP link of its own.
//!
//! A UDP link delivers only frames of the peers in its table. It learns
//! them two ways: the names the application inserts into the address
//! vector reach the table through the link's [`UdpPeers`] handle (the
//! link takes them before its next send or receive, inside the runtime's
//! turn), and a sender the endpoint never heard of joins it on first
//! contact when admission allows ([`admission`]): its frames carry the
//! cluster key's tag, or its address lies in `FI_CLUSTERNET_ACCEPT`
//! (default: the interface's subnet). A connectionless FI_EP_RDM
//! endpoint receives from any such peer before the application inserts
//! it (fi_endpoint(3), FI_SOURCE).

use std::io;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;

use ctp::{CtpConfig, CtpSocket, EdpTransport};
use edp::socket::Binding;
use edp::{EdpConfig, EdpSocket};
use link::{derived_mac, FrameCheck, Ipv4Net, UdpAdmission, UdpConfig, UdpLink, UdpPeers};
use runtime::auth::{wall_ns, AuthKey, AuthSetting};
use runtime::{LinkConfig, RuntimeConfig};

use crate::addr::{KeyMark, Name, UDP_LINK_PORT};
use crate::config::{Config, LinkKind};
use crate::error::{FiError, FiResult};
use crate::nic::{link_mtu, Nic, UDP_LINK_MAX_MTU};

/// Adds `name` to a UDP link's table through its handle (names of the
/// packet link are no concern of a UDP link).
///
/// Errors: `FI_EINVAL` when the link's queue of new peers is full.
pub fn add_udp_peer(peers: &UdpPeers, name: &Name) -> FiResult<()> {
    if let Name::Udp(a) = name {
        let a = SocketAddr::V4(*a);
        peers
            .add(derived_mac(a), a)
            .map_err(|e| FiError::io(&format!("UDP link peer {a}"), &e))?;
    }
    Ok(())
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

/// The cluster key in force under `config`, if any.
///
/// Errors: those of [`runtime_config`] and of reading the environment's key.
pub fn cluster_key(config: &Config) -> FiResult<Option<AuthKey>> {
    let rc = runtime_config(config)?;
    rc.link
        .auth
        .resolve()
        .map_err(|e| FiError::inval(format!("cluster key: {e}")))
}

/// Whether frames are authenticated under `config` (the MTU is then 24
/// bytes smaller).
///
/// Errors: those of [`cluster_key`].
pub fn keyed(config: &Config) -> FiResult<bool> {
    Ok(cluster_key(config)?.is_some())
}

/// What the endpoints' names tell of the key under `config`: none, or
/// the first 4 bytes of its fingerprint (`AuthKey::fingerprint`, which
/// reveals nothing of the key).
///
/// Errors: those of [`cluster_key`].
pub fn key_mark(config: &Config) -> FiResult<KeyMark> {
    Ok(match cluster_key(config)? {
        None => KeyMark::NoKey,
        Some(k) => {
            let f = k.fingerprint();
            KeyMark::Key([f[0], f[1], f[2], f[3]])
        }
    })
}

/// Who a UDP link on `nic` admits on first contact under `config`: the
/// networks of `FI_CLUSTERNET_ACCEPT` (default: `nic`'s subnet), and with
/// a cluster key every sender whose frame carries its valid tag.
///
/// Errors: those of [`cluster_key`].
pub fn admission(config: &Config, nic: &Nic) -> FiResult<UdpAdmission> {
    let nets = match &config.accept {
        Some(n) => n.clone(),
        None => nic
            .ipv4
            .map(|ip| vec![Ipv4Net::new(ip, nic.ipv4_prefix)])
            .unwrap_or_default(),
    };
    let check = cluster_key(config)?.map(|k| {
        let f: FrameCheck = Arc::new(move |frame: &[u8]| k.tag_valid(frame, wall_ns()));
        f
    });
    Ok(UdpAdmission { nets, check })
}

/// An open carrier: the socket, its name, and the UDP link's peer table.
#[derive(Debug)]
pub struct Carrier {
    /// The EDP socket (nonblocking).
    pub sock: EdpSocket,
    /// The endpoint's name.
    pub name: Name,
    /// Over a UDP link: its peer table (names inserted go there).
    pub peers: Option<Arc<UdpPeers>>,
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
            let (link, addr) = udp_link(nic, config, src)?;
            let peers = link.peers();
            let mut sock = EdpSocket::from_link_with(
                Box::new(link),
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

/// A UDP link for an endpoint on `nic` (at `src` when given), admitting
/// first contact as `config` says; and its address.
///
/// Errors: `FI_ENODATA` when `nic` has no IPv4 address; those of binding.
fn udp_link(nic: &Nic, config: &Config, src: Option<Name>) -> FiResult<(UdpLink, SocketAddrV4)> {
    let want = match src {
        Some(Name::Udp(a)) if !a.ip().is_unspecified() => a,
        Some(Name::Udp(a)) => SocketAddrV4::new(nic.ipv4.unwrap_or(*a.ip()), a.port()),
        _ => SocketAddrV4::new(
            nic.ipv4
                .ok_or_else(|| FiError::nodata(format!("{} has no IPv4 address", nic.name)))?,
            0,
        ),
    };
    let admit = admission(config, nic)?;
    bind_udp_link(want, link_mtu(nic, LinkKind::Udp), admit)
}

/// The carrier of a reliable endpoint: a CTP socket over EDP.
#[derive(Debug)]
pub struct CtpCarrier {
    /// The CTP socket.
    pub sock: CtpSocket<EdpTransport>,
    /// The endpoint's name.
    pub name: Name,
    /// Over a UDP link: its peer table (names inserted go there).
    pub peers: Option<Arc<UdpPeers>>,
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
            let (link, addr) = udp_link(nic, config, src)?;
            let peers = link.peers();
            let sock = CtpSocket::from_link(Box::new(link), UDP_LINK_PORT, ctp_config)
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
/// socket, since the link's MAC is derived from its final address) that
/// sends frames of `mtu` bytes of payload, hears every provider link (up
/// to [`UDP_LINK_MAX_MTU`]) and admits first contact per `admit`.
fn bind_udp_link(
    want: SocketAddrV4,
    mtu: usize,
    admit: UdpAdmission,
) -> FiResult<(UdpLink, SocketAddrV4)> {
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
        c.rx_mtu = Some(UDP_LINK_MAX_MTU.max(mtu));
        c.admission = admit.clone();
        match UdpLink::open(&c) {
            Ok(l) => return Ok((l, addr)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && want.port() == 0 => last = Some(e),
            Err(e) => return Err(FiError::io(&format!("UDP link on {addr}"), &e)),
        }
    }
    let e = last.unwrap_or_else(|| io::ErrorKind::AddrInUse.into());
    Err(FiError::io(&format!("UDP link on {}", want.ip()), &e))
}

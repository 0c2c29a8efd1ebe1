//! The transports netgauge measures, behind one interface.
//!
//! An [`Endpoint`] moves whole messages between client and server:
//! stream transports (TCP, ESP) write and read exact byte counts; datagram
//! transports (UDP, EDP) carry a message larger than one datagram as a train
//! of datagrams of at most [`Endpoint::max_datagram`] bytes; CTP sends one
//! command per message; comm one tag-matched communicator message.

use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::modes::{Mode, KERNEL_BUSY_POLL_US};

pub mod comm;
pub mod ctp;
pub mod edp;
pub mod esp;
pub mod eth;
pub mod tcp;
pub mod udp;
pub mod udp_link;

/// One end of an established measurement session.
pub trait Endpoint {
    /// Sends one message of `buf.len()` bytes.
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()>;

    /// Receives one message of exactly `buf.len()` bytes (the caller knows
    /// the size from the control exchange). Errors: `TimedOut` after the
    /// session timeout without data.
    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()>;

    /// For datagram transports: the largest payload of one datagram, bytes;
    /// `None` for transports that carry messages of any size.
    fn max_datagram(&self) -> Option<usize> {
        None
    }

    /// For datagram transports: sends each of `dgrams` as one datagram, in
    /// order; transports that can put several into one system call
    /// (sendmmsg) do. Used by the stream pattern, whose datagrams each carry
    /// their own sequence number.
    fn send_datagrams(&mut self, dgrams: &[&[u8]]) -> io::Result<()> {
        dgrams.iter().try_for_each(|d| self.send_msg(d))
    }

    /// For datagram transports: receives one datagram into `buf`, returning
    /// its length, or `TimedOut` if none arrives within `timeout`.
    fn recv_datagram(&mut self, _buf: &mut [u8], _timeout: Duration) -> io::Result<usize> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "not a datagram transport",
        ))
    }

    /// True for reliable transports that do not order separate messages
    /// (CTP delivers each command when complete): the stream pattern then
    /// checks that every message arrives exactly once, in any order.
    fn unordered(&self) -> bool {
        false
    }

    /// Orderly end of the session before the process exits: the client
    /// (`initiator`, after its BYE) waits at most `timeout` until the server
    /// shows it got everything; the server (after reading the BYE) closes
    /// its side. Kernel transports return at once (the kernel keeps
    /// retransmitting for a closed socket); a user-space transport's
    /// retransmissions die with the process. Errors: `TimedOut`, the
    /// connection's error.
    fn finish(&mut self, _timeout: Duration, _initiator: bool) -> io::Result<()> {
        Ok(())
    }

    /// The transport's own counters, for `-v` (e.g. ESP's sent,
    /// retransmitted, out-of-sequence), one line; None if it has none.
    fn stats_line(&mut self) -> Option<String> {
        None
    }
}

/// The link under edp, esp, ctp-edp and comm-edp (`--link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// AF_PACKET on an interface (CAP_NET_RAW).
    Packet,
    /// Ethernet frames inside UDP datagrams (no privilege).
    Udp,
}

/// How both ends of a session are set up (from the command line).
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub mode: Mode,
    /// Interface for Ethernet modes.
    pub iface: Option<String>,
    /// The server's address: MAC (Ethernet modes) or IP (IP modes). On the
    /// server only eth uses it: the one client it serves.
    pub remote: Option<String>,
    pub port: u16,
    /// How our modes wait (`--wait`); udp and tcp spin in user space when
    /// it is `BusyPoll`, else block.
    pub wait_policy: ::runtime::WaitPolicy,
    /// Fault injection wrapped around Ethernet links.
    pub fault: Option<::link::fault::FaultConfig>,
    /// How long a receive may wait before the session fails.
    pub timeout: Duration,
    /// `--link udp`: our modes run on this UDP link instead of AF_PACKET.
    pub udp_link: Option<udp_link::UdpLinkSpec>,
    /// `--link udp`: the link's MTU (Ethernet payload), bytes.
    pub mtu: usize,
    /// `--esp-checksum`: when ESP computes its checksum.
    pub esp_checksum: ::esp::Checksum,
    /// `--eth-type`: the ethertype of eth-mode frames.
    pub eth_type: u16,
    /// `--user-timeout`: ESP's and CTP's user timeout (`Some(None)`: the
    /// thesis's and the spec's rule; `None`: the protocols' default).
    pub user_timeout: Option<Option<Duration>>,
}

impl SessionConfig {
    pub(crate) fn iface(&self) -> io::Result<&str> {
        self.iface.as_deref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("mode {} needs an interface: -I IFACE", self.mode.name()),
            )
        })
    }

    pub(crate) fn remote_mac(&self) -> io::Result<::edp::MacAddr> {
        if let Some(spec) = &self.udp_link {
            return spec.first_peer_mac();
        }
        let r = self.remote.as_deref().unwrap_or_default();
        r.parse().map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("mode {} needs -R <server MAC>: {e}", self.mode.name()),
            )
        })
    }

    /// `-R` for IP modes: an address or a host name (resolved).
    pub(crate) fn remote_ip(&self) -> io::Result<IpAddr> {
        let r = self.remote.as_deref().unwrap_or_default();
        resolve_host(r).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "mode {} needs -R <server IP or host name>: {e}",
                    self.mode.name()
                ),
            )
        })
    }
}

/// Resolves `-R` for an IP mode: an address as is, else a host name
/// through the system resolver (getaddrinfo(3)), IPv4 first. Errors:
/// `InvalidInput` naming the name and the resolver's answer.
pub fn resolve_host(name: &str) -> io::Result<IpAddr> {
    if let Ok(ip) = name.parse() {
        return Ok(ip);
    }
    let addrs: Vec<IpAddr> = (name, 0)
        .to_socket_addrs()
        .map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("-R {name:?}: not an IP address, and the host name does not resolve: {e}"),
            )
        })?
        .map(|a| a.ip())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("-R {name:?}: the host name resolves to no address"),
            )
        })
}

impl SessionConfig {
    /// The runtime every Ethernet mode's sockets join: one packet socket,
    /// qdisc bypass (veth has no qdisc to respect), the RX ring (spinning
    /// waits watch its status word instead of calling recvmmsg(2) on every
    /// turn), and the run's fault injection.
    pub(crate) fn runtime(&self) -> ::runtime::RuntimeConfig {
        use ::runtime::{LinkConfig, RuntimeConfig, DEFAULT_RX_RING};
        RuntimeConfig {
            link: LinkConfig {
                rx_ring: Some(DEFAULT_RX_RING),
                qdisc_bypass: true,
                fault: self.fault.clone(),
                ..LinkConfig::default()
            },
            ..RuntimeConfig::default()
        }
    }

    /// The runtime this session's edp/esp/ctp-edp sockets open on: the
    /// process's shared packet runtime on -I ([`Self::runtime`]), or with
    /// `--link udp` its UDP-link runtime ([`udp_link::runtime`]).
    ///
    /// Errors: no -I with `--link packet`; opening the link.
    pub(crate) fn open_runtime(&self) -> io::Result<::runtime::Runtime> {
        match &self.udp_link {
            Some(spec) => udp_link::runtime(spec, self.mtu, self.fault.clone()),
            None => ::runtime::Runtime::shared(self.iface()?, &self.runtime()),
        }
    }

    /// How every one of our modes' sockets waits (`--wait`, `--busy-poll`).
    pub(crate) fn wait(&self) -> ::runtime::WaitPolicy {
        self.wait_policy
    }

    /// Whether the session busy-polls (`--wait busy`): the runtime reads
    /// from the RX ring, udp and tcp spin on nonblocking sockets.
    pub(crate) fn busy_poll(&self) -> bool {
        self.wait_policy == ::runtime::WaitPolicy::BusyPoll
    }
}

/// Sets `SO_BUSY_POLL` to [`KERNEL_BUSY_POLL_US`] on a kernel socket of
/// udp-bp or tcp-bp (`what` names it in errors): the kernel then polls the
/// device queue for up to that long in a blocking receive before sleeping
/// (socket(7); it works only on devices with NAPI).
///
/// Errors: `PermissionDenied` when the process lacks CAP_NET_ADMIN and the
/// value is above sysctl `net.core.busy_read`, saying so; other
/// setsockopt(2) errors, named.
pub(crate) fn set_kernel_busy_poll(sock: socket2::SockRef<'_>, what: &str) -> io::Result<()> {
    let us = KERNEL_BUSY_POLL_US;
    sock.set_busy_poll(us).map_err(|e| {
        let msg = if e.kind() == io::ErrorKind::PermissionDenied {
            let sysctl = std::fs::read_to_string("/proc/sys/net/core/busy_read")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into());
            format!(
                "SO_BUSY_POLL {us} us on the {what} socket: {e}: a value above sysctl \
                 net.core.busy_read ({sysctl} us) needs CAP_NET_ADMIN; run as root, or \
                 `sysctl -w net.core.busy_read={us}`"
            )
        } else {
            format!("SO_BUSY_POLL {us} us on the {what} socket: {e}")
        };
        io::Error::new(e.kind(), msg)
    })?;
    let got = sock.busy_poll()?;
    if got != us {
        return Err(io::Error::other(format!(
            "SO_BUSY_POLL on the {what} socket reads back {got} us after setting {us} us"
        )));
    }
    Ok(())
}

/// Opens the client end of a session for `cfg.mode`.
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    match cfg.mode {
        Mode::Eth => eth::connect(cfg),
        Mode::Udp | Mode::UdpBp => udp::connect(cfg),
        Mode::Tcp | Mode::TcpBp => tcp::connect(cfg),
        Mode::Edp => edp::connect(cfg),
        Mode::Esp => esp::connect(cfg),
        Mode::CtpUdp | Mode::CtpEdp => ctp::connect(cfg),
        Mode::CommUdp | Mode::CommEdp => comm::connect(cfg),
    }
}

/// Opens the server end and waits for one client.
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    match cfg.mode {
        Mode::Eth => eth::accept(cfg),
        Mode::Udp | Mode::UdpBp => udp::accept(cfg),
        Mode::Tcp | Mode::TcpBp => tcp::accept(cfg),
        Mode::Edp => edp::accept(cfg),
        Mode::Esp => esp::accept(cfg),
        Mode::CtpUdp | Mode::CtpEdp => ctp::accept(cfg),
        Mode::CommUdp | Mode::CommEdp => comm::accept(cfg),
    }
}

/// Calls `op` until it stops returning `WouldBlock`/`Interrupted`, spinning
/// (busy poll) — or `TimedOut` once `timeout` has passed.
pub(crate) fn spin<T>(timeout: Duration, mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut deadline: Option<Instant> = None;
    let mut n: u32 = 0;
    loop {
        match op() {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                n = n.wrapping_add(1);
                if n & 1023 == 0 {
                    let now = Instant::now();
                    let d = *deadline.get_or_insert(now + timeout);
                    if now >= d {
                        return Err(timed_out(timeout));
                    }
                }
                std::hint::spin_loop();
            }
            r => return r,
        }
    }
}

/// The error a receive returns after waiting `timeout` for nothing.
pub(crate) fn timed_out(timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no data from the peer for {:.1} s", timeout.as_secs_f64()),
    )
}

/// Maps a blocking read timeout (`WouldBlock`/`TimedOut` from a socket with
/// SO_RCVTIMEO) to a `TimedOut` that names the wait.
pub(crate) fn map_timeout(e: io::Error, timeout: Duration) -> io::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(timeout),
        _ => e,
    }
}

/// Messages shorter than this many bytes are received through a scratch
/// buffer by [`recv_train`]: room for a control message padded to the
/// minimum Ethernet payload.
const SMALL_MESSAGE: usize = 64;

/// Sends `buf` as a train of datagrams of at most `max` bytes each.
pub(crate) fn send_train(
    buf: &[u8],
    max: usize,
    mut send: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    if buf.is_empty() {
        return send(buf);
    }
    for chunk in buf.chunks(max) {
        send(chunk)?;
    }
    Ok(())
}

/// Receives a message of `buf.len()` bytes sent by [`send_train`]: datagrams
/// are appended in order until the message is complete; `recv` receives one
/// datagram into the slice it is given and returns the bytes it wrote.
///
/// A stale control datagram (a repeated HELLO or END) between messages is
/// skipped: control messages never travel through recv_msg on datagram
/// transports. Messages shorter than [`SMALL_MESSAGE`] bytes are received
/// through a scratch buffer of that size so that such a datagram is seen
/// whole (with Ethernet padding) instead of truncated into a data message.
pub(crate) fn recv_train(
    buf: &mut [u8],
    mut recv: impl FnMut(&mut [u8]) -> io::Result<usize>,
) -> io::Result<()> {
    let total = buf.len();
    let mut got = 0;
    loop {
        let n = if got == 0 && total < SMALL_MESSAGE {
            let mut scratch = [0u8; SMALL_MESSAGE];
            let n = recv(&mut scratch)?;
            if crate::control::wire::Ctrl::decode(&scratch[..n]).is_some() {
                continue;
            }
            let k = n.min(total);
            buf[..k].copy_from_slice(&scratch[..k]);
            k
        } else {
            let n = recv(&mut buf[got..])?;
            if got == 0 && crate::control::wire::Ctrl::decode(&buf[..n]).is_some() {
                continue;
            }
            n
        };
        got += n;
        if got >= total {
            return Ok(());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("empty datagram inside a {total}-byte message"),
            ));
        }
    }
}

/// The runtime's counters of frames refused before any socket saw them
/// and of the host responder (`-v`): what an attacker's frames show up as.
pub(crate) fn runtime_line(rt: &::runtime::Runtime) -> String {
    let s = rt.stats();
    format!(
        "runtime rx_frames {} malformed {} foreign {} bad_source {} unclaimed {} kernel_filter_errors {} \
         link outages {} recoveries {} rebinds {} mtu_changes {} down_ms {} tx_unsent {} link_errors {} \
         responder echo_replies {} resets {} ignored {} rate_limited {} rst_pauses {} auth verified {} failures {}",
        s.rx_frames,
        s.malformed,
        s.foreign,
        s.bad_source,
        s.unclaimed,
        s.filter_errors,
        s.link.outages,
        s.link.recoveries,
        s.link.rebinds,
        s.link.mtu_changes,
        (s.link.down_us + s.link.down_now_us) / 1000,
        s.tx_unsent,
        s.link_errors,
        s.responder.echo_replies,
        s.responder.resets,
        s.responder.ignored,
        s.responder.rate_limited,
        s.responder.rst_pauses,
        s.auth.verified,
        s.auth.failures()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses_resolve() {
        assert_eq!(
            resolve_host("10.1.2.3").unwrap(),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
        assert!(resolve_host("localhost").unwrap().is_loopback());
        let e = resolve_host("no-such-host.invalid").unwrap_err();
        assert!(e.to_string().contains("does not resolve"), "{e}");
    }
}

//! Raw Ethernet frames (`-m eth`): the floor under every protocol of this
//! project, the thesis's baseline. Whole Ethernet frames of a dedicated
//! ethertype ([`ETHERTYPE`]) with no header beyond Ethernet's, on an
//! AF_PACKET socket of their own ([`PacketLink`], not the runtime: no
//! demultiplexing table, no protocol, no service thread), configured as the
//! runtime configures its link ([`SessionConfig::runtime`]): the TPACKET_V2
//! RX ring when busy polling and recv(2) otherwise, `PACKET_QDISC_BYPASS`,
//! the same socket buffers, and the run's fault injection.
//!
//! Having no header, a frame carries neither a length nor a port:
//! - Ethernet pads frames shorter than 60 bytes (payloads under
//!   [`MIN_PAYLOAD`] bytes; veth does not, real NICs do). The receiver knows
//!   each message's size from netgauge's control exchange and drops the
//!   padding; control messages and the stream pattern tolerate it.
//! - A session is told apart by MAC addresses and its ethertype: frames of
//!   the session's ethertype not addressed to this interface, or (once the
//!   peer is known) not from the peer, are counted as foreign and dropped.
//!   The server learns its peer from the first frame, or is told it (`-R
//!   CLIENT_MAC` on the server). Every packet socket of the ethertype on an
//!   interface sees every frame, so two sessions between the same two
//!   interfaces at once (one_one_bidir: each host is the client of the
//!   other) need different ethertypes (`--eth-type`, [`SECOND_ETHERTYPE`]):
//!   otherwise each end also takes the other session's pings and echoes for
//!   its own.
//! - A message larger than the MTU goes as a train of frames, sent with
//!   sendmmsg(2) [`MAX_BATCH`] at a time, like EDP's.
//!
//! Waiting follows `--wait` as the runtime's driver does: spin on the ring's
//! status word (or on recv(2) without a ring) in busy mode, yielding the CPU
//! every few microseconds ([`YieldPacer`]), sleep in
//! ppoll(2) on the socket when blocking, spin up to the budget and then
//! sleep when adaptive.

use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use ::edp::MacAddr;
use ::link::fault::FaultLink;
use ::link::Link;
use ::link::ETH_HEADER_LEN;
use ::link::{PacketConfig, PacketLink, MAX_BATCH};
use ::runtime::{WaitPolicy, YieldPacer};
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;

use super::{recv_train, timed_out, Endpoint, SessionConfig};

/// Default ethertype of eth-mode frames (`--eth-type`). IEEE 802 has two
/// local experimental ethertypes, 0x88B5 and 0x88B6, and EDP and ESP use
/// them; 0x88B7 is the next value (IEEE 802a's OUI Extended Ethertype, whose
/// 5-byte protocol identifier these frames do not carry): a departure,
/// harmless on the virtual cluster's private links, that keeps the floor's
/// frames out of EDP's and ESP's filters.
pub const ETHERTYPE: u16 = 0x88B7;

/// Ethertype of a second eth session between the same two interfaces
/// (one_one_bidir's reverse pair). 0x88B8 is registered to IEC 61850 GOOSE:
/// the same departure as [`ETHERTYPE`], on the virtual cluster's private
/// links only.
pub const SECOND_ETHERTYPE: u16 = 0x88B8;

/// Parses `--eth-type`: hexadecimal with `0x` (`0x88B7`) or decimal; an
/// Ethernet II type (at least 0x0600: smaller values are IEEE 802.3
/// lengths) other than EDP's and ESP's. Errors: a message for the user.
pub fn parse_ethertype(s: &str) -> Result<u16, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => t.parse::<u16>(),
    }
    .map_err(|_| format!("--eth-type {s:?}: expected an ethertype such as 0x88B7"))?;
    if v < 0x0600 {
        return Err(format!(
            "--eth-type {s}: values below 0x0600 are IEEE 802.3 lengths, not ethertypes"
        ));
    }
    if v == ::runtime::ETHERTYPE_EDP || v == ::runtime::ETHERTYPE_ESP {
        return Err(format!(
            "--eth-type {s}: that is EDP's or ESP's ethertype; eth frames need their own"
        ));
    }
    Ok(v)
}

/// Smallest Ethernet payload, bytes (IEEE 802.3: a 64-byte minimum frame
/// minus the 14-byte header and 4-byte FCS). Shorter payloads arrive padded
/// up to this length on real NICs.
pub const MIN_PAYLOAD: usize = 46;

/// Spins on the ring between two looks at the clock (busy and adaptive).
const SPINS_PER_LOOK: u32 = 256;

/// Longest sleep while the socket's send buffer is full, before retrying.
const SEND_RETRY: Duration = Duration::from_millis(1);

/// What the endpoint counted (`-v`).
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    /// Frames sent.
    sent: u64,
    /// Frames of the peer received.
    received: u64,
    /// Frames of the ethertype from someone else, or to someone else, or
    /// shorter than an Ethernet header: dropped.
    foreign: u64,
    /// Sends retried because the socket's buffer was full.
    send_retries: u64,
}

/// One end of an eth session.
pub struct Eth {
    link: Box<dyn Link>,
    local: MacAddr,
    /// The session's ethertype (`--eth-type`).
    ethertype: u16,
    /// The other end; the server learns it from the first frame unless
    /// told (`-R`).
    peer: Option<MacAddr>,
    /// Destination, source, ethertype of every frame sent (valid once
    /// `peer` is known).
    header: [u8; ETH_HEADER_LEN],
    wait: WaitPolicy,
    timeout: Duration,
    mtu: usize,
    n: Counters,
    /// A server without `-R`: its claim on the interface and ethertype.
    _lease: Option<::runtime::ports::PortLease>,
}

/// Opens the packet socket on `cfg`'s interface with the runtime's link
/// settings.
///
/// Errors: those of [`PacketLink::open`] (`PermissionDenied` naming
/// CAP_NET_RAW, `NotFound` for an unknown interface); `InvalidInput` for a
/// bad fault configuration.
fn open(cfg: &SessionConfig, peer: Option<MacAddr>) -> io::Result<Eth> {
    let iface = cfg.iface()?;
    let lc = cfg.runtime().link;
    let pc = PacketConfig {
        ethertype: cfg.eth_type,
        rcvbuf: lc.socket_buffer,
        sndbuf: lc.socket_buffer,
        rx_ring: lc.rx_ring,
        qdisc_bypass: lc.qdisc_bypass,
        filter: None,
        ..PacketConfig::default()
    };
    let packet = PacketLink::open(iface, &pc)?;
    let local = packet.iface().mac;
    let mtu = packet.iface().mtu;
    let link: Box<dyn Link> = match &cfg.fault {
        Some(f) => Box::new(FaultLink::try_new(packet, f.clone()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("fault injection: {e}"))
        })?),
        None => Box::new(packet),
    };
    let mut eth = Eth {
        link,
        local,
        ethertype: cfg.eth_type,
        peer: None,
        header: [0; ETH_HEADER_LEN],
        wait: cfg.wait(),
        timeout: cfg.timeout,
        mtu,
        n: Counters::default(),
        _lease: None,
    };
    if let Some(p) = peer {
        eth.set_peer(p);
    }
    Ok(eth)
}

/// Client: frames to `-R MAC`.
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let peer = cfg.remote_mac()?;
    Ok(Box::new(open(cfg, Some(peer))?))
}

/// Server: serves the client `-R MAC` when given, else the source of the
/// first frame becomes the peer.
///
/// Errors: `InvalidInput` for a `-R` that is not a MAC address; as
/// [`open`].
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let peer = match cfg.remote.as_deref() {
        Some(_) => Some(cfg.remote_mac()?),
        None => None,
    };
    // A server that takes any client must be the only one on the interface
    // for this ethertype (eth frames carry no port): it holds the
    // ethertype's control-port lease (runtime::ports) for the session.
    let lease = match peer {
        None => Some(::runtime::ports::PortLease::control(
            cfg.iface()?,
            cfg.eth_type,
        )?),
        Some(_) => None,
    };
    let mut eth = open(cfg, peer)?;
    eth._lease = lease;
    Ok(Box::new(eth))
}

/// Whether a send error means "the socket's buffer is full, retry".
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    ) || e.raw_os_error() == Some(libc::ENOBUFS)
}

impl Eth {
    fn set_peer(&mut self, peer: MacAddr) {
        self.peer = Some(peer);
        self.header[0..6].copy_from_slice(&peer.0);
        self.header[6..12].copy_from_slice(&self.local.0);
        self.header[12..14].copy_from_slice(&self.ethertype.to_be_bytes());
    }

    /// Sends each of `payloads` as one frame, in order, [`MAX_BATCH`] per
    /// sendmmsg(2), waiting while the socket's buffer is full.
    ///
    /// Errors: `NotConnected` before the server knows its client;
    /// `InvalidInput` for a payload over the MTU; `TimedOut` when the link
    /// accepts nothing for the session timeout; device errors.
    fn send_frames(&mut self, payloads: &[&[u8]]) -> io::Result<()> {
        if self.peer.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "eth server has no client yet",
            ));
        }
        let header = self.header;
        let mut off = 0;
        let mut stalled_since: Option<Instant> = None;
        while off < payloads.len() {
            let chunk = &payloads[off..payloads.len().min(off + MAX_BATCH)];
            let r = if let [one] = chunk {
                // One frame (a ping-pong message): header and payload
                // gathered by one sendmsg(2), nothing else built.
                let frame = [IoSlice::new(&header), IoSlice::new(one)];
                self.link.send_batch_vectored(&[&frame[..]])
            } else {
                let pieces: [[IoSlice<'_>; 2]; MAX_BATCH] = std::array::from_fn(|i| {
                    [
                        IoSlice::new(&header),
                        IoSlice::new(chunk.get(i).copied().unwrap_or_default()),
                    ]
                });
                let frames: [&[IoSlice<'_>]; MAX_BATCH] = std::array::from_fn(|i| &pieces[i][..]);
                self.link.send_batch_vectored(&frames[..chunk.len()])
            };
            let sent = match r {
                Ok(n) => n,
                Err(e) if transient(&e) => 0,
                Err(e) => return Err(e),
            };
            off += sent;
            self.n.sent += sent as u64;
            if sent == chunk.len() {
                stalled_since = None;
                continue;
            }
            // The send buffer is full: wait until it drains a little.
            self.n.send_retries += 1;
            let now = Instant::now();
            let since = *stalled_since.get_or_insert(now);
            if now.duration_since(since) >= self.timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "eth: the link accepted no frame for {:.1} s (send buffer full)",
                        self.timeout.as_secs_f64()
                    ),
                ));
            }
            if self.wait == WaitPolicy::BusyPoll {
                std::hint::spin_loop();
            } else {
                self.sleep(PollFlags::POLLOUT, now + SEND_RETRY)?;
            }
        }
        Ok(())
    }

    /// Sleeps in ppoll(2) on the socket for `events` until `until` (or
    /// until the link's own next deadline).
    fn sleep(&mut self, events: PollFlags, until: Instant) -> io::Result<()> {
        let now = Instant::now();
        let until = match self.link.poll_at() {
            Some(t) => until.min(t),
            None => until,
        };
        let Some(fd) = self.link.as_fd() else {
            return Err(io::Error::other(
                "eth: the link has no descriptor to sleep on",
            ));
        };
        let mut fds = [PollFd::new(fd, events)];
        let ts = TimeSpec::from_duration(until.saturating_duration_since(now));
        match ppoll(&mut fds, Some(ts), None) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(io::Error::new(
                io::Error::from(e).kind(),
                format!("eth: ppoll on the packet socket: {e}"),
            )),
        }
    }

    /// Waits for the next frame from the peer (any sender's, for a server
    /// without a client yet), at most `timeout`, and hands its payload
    /// (Ethernet padding included) and source to `f`.
    ///
    /// Errors: `TimedOut` after `timeout`; device errors.
    fn recv_payload<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&[u8], MacAddr) -> T,
    ) -> io::Result<T> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut pacer = YieldPacer::starting(start);
        let spin_until = match self.wait {
            WaitPolicy::BusyPoll => None,
            WaitPolicy::Block => Some(start),
            WaitPolicy::Adaptive { spin } => Some(start + spin),
        };
        loop {
            let mut out = None;
            let (local, peer, n) = (self.local, self.peer, &mut self.n);
            let ethertype = self.ethertype.to_be_bytes();
            let r = self.link.recv_with(1, &mut |frame: &[u8]| {
                if frame.len() < ETH_HEADER_LEN
                    || frame[0..6] != local.0
                    || frame[12..14] != ethertype
                    || peer.is_some_and(|p| frame[6..12] != p.0)
                {
                    n.foreign += 1;
                    return;
                }
                n.received += 1;
                let src = MacAddr(frame[6..12].try_into().expect("6 bytes"));
                out = Some(f(&frame[ETH_HEADER_LEN..], src));
            });
            match r {
                Ok(_) => {
                    if let Some(v) = out {
                        return Ok(v);
                    }
                    continue;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timed_out(timeout));
            }
            if self.link.poll_at().is_some_and(|t| now >= t) {
                // The fault injector's held frames are due.
                self.link.on_timeout(now)?;
                continue;
            }
            let spinning = match spin_until {
                None => true,
                Some(t) => now < t,
            };
            if spinning {
                // Spin on the ring's status word (without a ring, go back
                // to recv(2) at once), yielding the CPU as the runtime's
                // spins do: a peer on the same CPU must get to answer.
                for _ in 0..SPINS_PER_LOOK {
                    if self.link.rx_ready() != Some(false) {
                        break;
                    }
                    std::hint::spin_loop();
                }
                pacer.tick(now);
            } else {
                self.sleep(PollFlags::POLLIN, deadline)?;
            }
        }
    }

    /// Receives the next payload into `buf` (at most `buf.len()` bytes,
    /// Ethernet padding beyond the message dropped); returns its length.
    ///
    /// Errors: `InvalidData` for a payload longer than `buf` that is not
    /// padding (a lost frame shifted a train); as [`Eth::recv_payload`].
    fn recv_into(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        let room = buf.len();
        let n = self.recv_payload(timeout, |p, _| {
            let k = p.len().min(room);
            buf[..k].copy_from_slice(&p[..k]);
            p.len()
        })?;
        if n > room && n > MIN_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("eth: a {n}-byte frame where at most {room} bytes of the message were left (a lost frame shifted the train)"),
            ));
        }
        Ok(n.min(room))
    }
}

impl Endpoint for Eth {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.len() <= self.mtu {
            return self.send_frames(&[buf]);
        }
        let chunks: Vec<&[u8]> = buf.chunks(self.mtu).collect();
        self.send_frames(&chunks)
    }

    fn send_datagrams(&mut self, dgrams: &[&[u8]]) -> io::Result<()> {
        self.send_frames(dgrams)
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let timeout = self.timeout;
        recv_train(buf, |b| self.recv_into(b, timeout))
    }

    fn max_datagram(&self) -> Option<usize> {
        Some(self.mtu)
    }

    fn recv_datagram(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        let room = buf.len();
        let (n, src) = self.recv_payload(timeout, |p, src| {
            let k = p.len().min(room);
            buf[..k].copy_from_slice(&p[..k]);
            (k, src)
        })?;
        if self.peer.is_none() {
            self.set_peer(src);
        }
        Ok(n)
    }

    fn stats_line(&mut self) -> Option<String> {
        let c = self.n;
        let k = self.link.kernel_stats().unwrap_or_default();
        Some(format!(
            "eth sent {} received {} foreign {} send_retries {} kernel_packets {} kernel_drops {}",
            c.sent, c.received, c.foreign, c.send_retries, k.packets, k.drops
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethertype_is_neither_edp_nor_esp() {
        assert_ne!(ETHERTYPE, ::runtime::ETHERTYPE_EDP);
        assert_ne!(ETHERTYPE, ::runtime::ETHERTYPE_ESP);
        // The minimum frame: header + minimum payload + FCS = 64 bytes.
        assert_eq!(ETH_HEADER_LEN + MIN_PAYLOAD + 4, 64);
    }

    #[test]
    fn ethertypes_are_checked() {
        assert_eq!(parse_ethertype("0x88B7"), Ok(ETHERTYPE));
        assert_eq!(parse_ethertype("0x88b8"), Ok(SECOND_ETHERTYPE));
        assert_eq!(parse_ethertype("34999"), Ok(0x88B7));
        assert!(parse_ethertype("0x0100").unwrap_err().contains("802.3"));
        assert!(parse_ethertype("0x88B5").unwrap_err().contains("EDP"));
        assert!(parse_ethertype("0x88B6").is_err());
        assert!(parse_ethertype("eth").is_err());
    }

    #[test]
    fn full_buffers_are_transient() {
        assert!(transient(&io::ErrorKind::WouldBlock.into()));
        assert!(transient(&io::Error::from_raw_os_error(libc::ENOBUFS)));
        assert!(!transient(&io::Error::from_raw_os_error(libc::ENETDOWN)));
    }
}

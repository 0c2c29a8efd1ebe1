//! EDP echo: control frames on port 0 (thesis ch. 4.2.5 and af_enet.h; used
//! in ch. 6.3 to find which interface reaches a peer's MAC), and [`ping`]
//! for fast dead-host detection (a short echo timeout instead of a long
//! connect(), as the LAM journal recommends).
//!
//! Control payload (network byte order), 8 bytes then optional data:
//!
//! ```text
//!  0       1       2               4                               8
//! +-------+-------+---------------+-------------------------------+------
//! | type  |  0    |  identifier   |        sequence number        | data
//! +-------+-------+---------------+-------------------------------+------
//! type 1 = echo request, 2 = echo reply
//! ```
//!
//! A reply is the request with type 2 and addresses and ports swapped: the
//! same size, never larger. Control frames sent to a group (multicast or
//! broadcast) destination are never answered.
//!
//! One responder per host and interface: the runtime that holds the
//! control port's lease ([`crate::ports::PortLease::control`]) answers
//! ([`crate::runtime::responder`]); the others retry the lease every
//! second, so when the holder exits or crashes another process takes over
//! within about a second. [`answer`] is the rule, without I/O.

use std::io;
use std::time::{Duration, Instant};

use crate::runtime::{Deadline, Runtime, RuntimeConfig};
use crate::socket::{EdpConfig, EdpSocket};
use crate::wire::{
    emit_edp_frame, EdpFrame, EthernetRepr, MacAddr, WireError, CONTROL_PORT, ETH_HEADER_LEN,
};

/// Control type: echo request.
pub const ECHO_REQUEST: u8 = 1;
/// Control type: echo reply.
pub const ECHO_REPLY: u8 = 2;
/// Length of the echo header in bytes.
pub const ECHO_HEADER_LEN: usize = 8;
/// Echo requests one [`Pinger::ping`] sends, spread over its timeout.
pub const PING_ATTEMPTS: u32 = 3;

/// The echo header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRepr {
    /// [`ECHO_REQUEST`] or [`ECHO_REPLY`].
    pub kind: u8,
    /// Identifier chosen by the requester (per pinger).
    pub ident: u16,
    /// Sequence number chosen by the requester (per request).
    pub seq: u32,
}

impl EchoRepr {
    /// Parses a control payload; returns the header and the data after it.
    ///
    /// Errors: `Truncated` when shorter than 8 bytes; `Inconsistent` for a
    /// type other than 1 or 2.
    pub fn parse(payload: &[u8]) -> Result<(Self, &[u8]), WireError> {
        if payload.len() < ECHO_HEADER_LEN {
            return Err(WireError::Truncated {
                need: ECHO_HEADER_LEN,
                have: payload.len(),
            });
        }
        let kind = payload[0];
        if kind != ECHO_REQUEST && kind != ECHO_REPLY {
            return Err(WireError::Inconsistent("unknown control message type"));
        }
        Ok((
            Self {
                kind,
                ident: u16::from_be_bytes([payload[2], payload[3]]),
                seq: u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
            },
            &payload[ECHO_HEADER_LEN..],
        ))
    }

    /// Writes the 8-byte header at the start of `buf` (panics if shorter: a
    /// caller bug).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.kind;
        buf[1] = 0;
        buf[2..4].copy_from_slice(&self.ident.to_be_bytes());
        buf[4..8].copy_from_slice(&self.seq.to_be_bytes());
    }
}

/// What the responder decided about one received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Answer with the reply frame of this many bytes written to the output buffer.
    Reply(usize),
    /// Not answered: malformed, not a request, or not for us.
    Ignore,
    /// Not answered: sent to a group address.
    Group,
}

/// The responder's rule, without I/O: given a received control frame,
/// writes the reply into `out` (at least as long as `frame`).
pub fn answer(
    frame: &[u8],
    ethertype: u16,
    mac: MacAddr,
    max_frame: usize,
    out: &mut [u8],
) -> Verdict {
    let f = match EdpFrame::parse(frame, ethertype, max_frame) {
        Ok(f) => f,
        Err(_) => return Verdict::Ignore,
    };
    if f.header.dst_port != CONTROL_PORT {
        return Verdict::Ignore;
    }
    if f.eth.dst.is_group() {
        return Verdict::Group;
    }
    if f.eth.dst != mac || f.eth.src.is_group() {
        return Verdict::Ignore;
    }
    match EchoRepr::parse(f.payload) {
        Ok((r, _)) if r.kind == ECHO_REQUEST => {}
        _ => return Verdict::Ignore,
    }
    let eth = EthernetRepr {
        dst: f.eth.src,
        src: mac,
        ethertype,
    };
    match emit_edp_frame(out, &eth, CONTROL_PORT, f.header.src_port, f.payload) {
        Ok(n) => {
            out[ETH_HEADER_LEN + crate::wire::EDP_HEADER_LEN] = ECHO_REPLY;
            Verdict::Reply(n)
        }
        Err(_) => Verdict::Ignore,
    }
}

/// Sends echo requests from an ephemeral EDP port of its runtime and waits
/// for the replies.
#[derive(Debug)]
pub struct Pinger {
    sock: EdpSocket,
    ident: u16,
    seq: u32,
}

impl Pinger {
    /// A pinger on the process's default runtime for `iface`.
    ///
    /// Errors: those of [`EdpSocket::bind`] (no interface, no CAP_NET_RAW,
    /// no free ephemeral port).
    pub fn new(iface: &str) -> io::Result<Self> {
        let rt = Runtime::shared(iface, &RuntimeConfig::default())?;
        Self::on(&rt)
    }

    /// A pinger on `rt`.
    ///
    /// Errors: those of [`EdpSocket::bind_on`].
    pub fn on(rt: &Runtime) -> io::Result<Self> {
        let sock = EdpSocket::bind_on(rt, 0, &EdpConfig::default())?;
        Ok(Self {
            sock,
            ident: rand::random(),
            seq: rand::random(),
        })
    }

    /// Round-trip time to the echo responder of `mac`. Sends up to
    /// [`PING_ATTEMPTS`] requests, evenly spread over `timeout`, and returns
    /// the RTT of the first reply (measured from the request it answers).
    ///
    /// Errors: `TimedOut` when no reply arrives within about `timeout`
    /// (the host is down, unreachable on this interface, or runs no EDP
    /// process); `InvalidInput` for a group `mac` or a zero timeout; link
    /// errors.
    pub fn ping(&mut self, mac: MacAddr, timeout: Duration) -> io::Result<Duration> {
        if mac.is_group() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot ping group address {mac}: responders never answer group-addressed control frames"),
            ));
        }
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ping timeout must not be zero",
            ));
        }
        let start = Instant::now();
        // A timeout too large to represent is capped at a day.
        let timeout = timeout.min(Duration::from_secs(86_400));
        let deadline = start + timeout;
        let interval = timeout / PING_ATTEMPTS;
        let first_seq = self.seq;
        let mut sent_at = [start; PING_ATTEMPTS as usize];
        let mut sent = 0u32;
        let mut buf = vec![0u8; self.sock.mtu()];
        loop {
            let now = Instant::now();
            if sent < PING_ATTEMPTS && now >= start + interval * sent {
                let mut payload = [0u8; ECHO_HEADER_LEN];
                EchoRepr {
                    kind: ECHO_REQUEST,
                    ident: self.ident,
                    seq: first_seq.wrapping_add(sent),
                }
                .emit(&mut payload);
                sent_at[sent as usize] = Instant::now();
                match self.sock.send_control(&payload, mac) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                sent += 1;
            }
            let next_send = if sent < PING_ATTEMPTS {
                start + interval * sent
            } else {
                deadline
            };
            match self
                .sock
                .recv_until(&mut buf, Deadline::At(next_send.min(deadline)))
            {
                Ok((n, from, port)) => {
                    let at = Instant::now();
                    if from != mac || port != CONTROL_PORT {
                        continue;
                    }
                    let Ok((r, _)) = EchoRepr::parse(&buf[..n]) else {
                        continue;
                    };
                    let k = r.seq.wrapping_sub(first_seq);
                    if r.kind == ECHO_REPLY && r.ident == self.ident && k < sent {
                        self.seq = first_seq.wrapping_add(sent);
                        return Ok(at - sent_at[k as usize]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                self.seq = first_seq.wrapping_add(sent);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no echo reply from {mac} on {} within {timeout:?} ({sent} requests sent)",
                        self.sock.runtime().iface().unwrap_or("this link")
                    ),
                ));
            }
        }
    }
}

/// Round-trip time of one echo exchange with `mac` through `iface` (EDP
/// ethertype); see [`Pinger::ping`] for the rules and errors. Opens a
/// [`Pinger`] per call: use one `Pinger` for repeated pings.
pub fn ping(iface: &str, mac: MacAddr, timeout: Duration) -> io::Result<Duration> {
    Pinger::new(iface)?.ping(mac, timeout)
}

/// Which of `ifaces` reaches `mac`: pings it through every interface at
/// once (thesis ch. 6.3: the Open MPI port found the interface to a peer by
/// EDP echo) and returns the first interface that gets a reply, with its
/// round-trip time, without waiting for the others (their pings end by
/// themselves within `timeout`). Interfaces that cannot be opened count as
/// not reaching `mac`.
///
/// Errors: `NotFound` naming `mac` and each interface's failure when none
/// got a reply within about `timeout`.
pub fn find_interface(
    mac: MacAddr,
    ifaces: &[&str],
    timeout: Duration,
) -> io::Result<(String, Duration)> {
    let (tx, rx) = std::sync::mpsc::channel();
    for &i in ifaces {
        let (tx, name) = (tx.clone(), i.to_string());
        // Threads inherit the caller's network namespace.
        std::thread::Builder::new()
            .name(format!("edp-find-{i}"))
            .spawn(move || {
                let r = ping(&name, mac, timeout);
                let _ = tx.send((name, r));
            })?;
    }
    drop(tx);
    let mut why = Vec::new();
    for (name, r) in rx {
        match r {
            Ok(rtt) => return Ok((name, rtt)),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface reaches {mac}: {}", why.join("; ")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EDP_HEADER_LEN, ETHERTYPE_EDP};

    const ME: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const PEER: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn request(dst: MacAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 1514];
        let eth = EthernetRepr {
            dst,
            src: PEER,
            ethertype: ETHERTYPE_EDP,
        };
        let n = emit_edp_frame(&mut b, &eth, sport, dport, payload).unwrap();
        b.truncate(n);
        b
    }

    fn echo_payload(kind: u8, extra: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; ECHO_HEADER_LEN];
        EchoRepr {
            kind,
            ident: 0xbeef,
            seq: 0x01020304,
        }
        .emit(&mut p);
        p.extend_from_slice(extra);
        p
    }

    #[test]
    fn reply_mirrors_request() {
        let req = request(ME, 50000, 0, &echo_payload(ECHO_REQUEST, b"data"));
        let mut out = [0u8; 1514];
        let Verdict::Reply(n) = answer(&req, ETHERTYPE_EDP, ME, 1514, &mut out) else {
            panic!("no reply");
        };
        assert_eq!(n, req.len(), "a reply is exactly as large as its request");
        let f = EdpFrame::parse(&out[..n], ETHERTYPE_EDP, 1514).unwrap();
        assert_eq!(f.eth.dst, PEER);
        assert_eq!(f.eth.src, ME);
        assert_eq!(f.header.src_port, 0);
        assert_eq!(f.header.dst_port, 50000);
        let (r, data) = EchoRepr::parse(f.payload).unwrap();
        assert_eq!(
            r,
            EchoRepr {
                kind: ECHO_REPLY,
                ident: 0xbeef,
                seq: 0x01020304
            }
        );
        assert_eq!(data, b"data");
    }

    #[test]
    fn group_and_foreign_frames_are_not_answered() {
        let mut out = [0u8; 1514];
        let p = echo_payload(ECHO_REQUEST, b"");
        let ok = request(ME, 50000, 0, &p);
        let cases: [(&str, Vec<u8>, Verdict); 8] = [
            (
                "broadcast",
                request(MacAddr::BROADCAST, 50000, 0, &p),
                Verdict::Group,
            ),
            (
                "multicast",
                request(MacAddr([0x01, 0, 0x5e, 0, 0, 1]), 50000, 0, &p),
                Verdict::Group,
            ),
            (
                "for another host",
                request(PEER, 50000, 0, &p),
                Verdict::Ignore,
            ),
            (
                "a reply",
                request(ME, 50000, 0, &echo_payload(ECHO_REPLY, b"")),
                Verdict::Ignore,
            ),
            (
                "not the control port",
                request(ME, 50000, 7, &p),
                Verdict::Ignore,
            ),
            (
                "truncated echo header",
                request(ME, 50000, 0, &[ECHO_REQUEST, 0, 0]),
                Verdict::Ignore,
            ),
            (
                "unknown type",
                request(ME, 50000, 0, &echo_payload(9, b"")),
                Verdict::Ignore,
            ),
            (
                "malformed frame",
                ok[..ETH_HEADER_LEN + EDP_HEADER_LEN + 3].to_vec(),
                Verdict::Ignore,
            ),
        ];
        for (what, frame, want) in cases {
            assert_eq!(
                answer(&frame, ETHERTYPE_EDP, ME, 1514, &mut out),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn echo_codec_round_trip() {
        let r = EchoRepr {
            kind: ECHO_REQUEST,
            ident: 7,
            seq: u32::MAX,
        };
        let mut b = [0u8; 8];
        r.emit(&mut b);
        assert_eq!(b, [1, 0, 0, 7, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(EchoRepr::parse(&b).unwrap(), (r, &[][..]));
    }
}

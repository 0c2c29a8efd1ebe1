//! The control exchange between client and server, carried in-band on the
//! measured transport: before each size step the client announces the
//! pattern, size and count (HELLO) and the server answers READY; a stream
//! step ends with the server's REPORT; after each step the client asks for
//! the server's CPU time of the step (STATS, answered with STATS); BYE ends
//! the session.
//!
//! Control messages are [`CTRL_LEN`] bytes starting with [`MAGIC`]. On
//! datagram transports a control message may be lost or duplicated, so the
//! client repeats HELLO and END until answered and both sides skip stale
//! control datagrams (an older step number, or an unexpected kind).

use std::io;
use std::time::{Duration, Instant};

use crate::patterns::Pattern;
use crate::transport::eth::MIN_PAYLOAD;
use crate::transport::Endpoint;

/// First bytes of every control message.
pub const MAGIC: [u8; 4] = *b"NGv1";
/// Size of a control message, bytes.
pub const CTRL_LEN: usize = 40;
/// First interval after which a datagram client repeats an unanswered
/// request (HELLO, END, STATS); doubled on every repeat up to
/// [`MAX_RETRY`].
const RETRY: Duration = Duration::from_millis(20);
/// Longest interval between repeats of an unanswered request: a client
/// waiting for a server that is not up yet probes at most 4 times per
/// second, whatever the network answers (an ICMP port unreachable returns
/// at once and must not make the loop spin).
pub const MAX_RETRY: Duration = Duration::from_millis(250);
/// After this long without an answer the client says on stderr what it is
/// waiting for.
const SAY_WAITING_AFTER: Duration = Duration::from_secs(1);

/// Kind of a control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Client: the next step's parameters.
    Hello = 1,
    /// Server: ready for the step.
    Ready = 2,
    /// Client (datagram stream): all datagrams of the step were sent.
    End = 3,
    /// Server: what the stream step received.
    Report = 4,
    /// Client: the session is over.
    Bye = 5,
    /// Client: asks for the server's CPU time of step `step`. Server: the
    /// answer: `count` iterations served, `extra` CPU time (user + system,
    /// getrusage) in ns.
    Stats = 6,
}

/// A control message. Fields not used by a kind are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctrl {
    pub kind: Kind,
    /// Step number, from 1; stale messages carry an older one.
    pub step: u32,
    pub pattern: Pattern,
    /// Message size of the step, bytes.
    pub size: u64,
    /// Messages in the step (warm-up included) for HELLO; datagrams or
    /// messages received intact for REPORT.
    pub count: u64,
    /// Warm-up iterations (HELLO); bytes received intact (REPORT).
    pub extra: u64,
}

impl Ctrl {
    pub fn new(kind: Kind, step: u32, pattern: Pattern) -> Self {
        Ctrl {
            kind,
            step,
            pattern,
            size: 0,
            count: 0,
            extra: 0,
        }
    }

    /// Encodes into 40 bytes: magic, kind u8, pattern u8, 2 zero bytes,
    /// step u32, size u64, count u64, extra u64, 4 zero bytes; little-endian.
    pub fn encode(&self) -> [u8; CTRL_LEN] {
        let mut b = [0u8; CTRL_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.kind as u8;
        // Multi-host patterns travel as the session pattern of each pair.
        b[5] = match self.pattern.session() {
            Pattern::Stream => 2,
            _ => 1,
        };
        b[8..12].copy_from_slice(&self.step.to_le_bytes());
        b[12..20].copy_from_slice(&self.size.to_le_bytes());
        b[20..28].copy_from_slice(&self.count.to_le_bytes());
        b[28..36].copy_from_slice(&self.extra.to_le_bytes());
        b
    }

    /// Decodes a control message; None if `b` is not one. Trailing bytes
    /// up to the minimum Ethernet payload ([`MIN_PAYLOAD`], 46 bytes) are
    /// padding (eth mode carries no length) and ignored.
    pub fn decode(b: &[u8]) -> Option<Ctrl> {
        if !(CTRL_LEN..=CTRL_LEN.max(MIN_PAYLOAD)).contains(&b.len()) || b[0..4] != MAGIC {
            return None;
        }
        let kind = match b[4] {
            1 => Kind::Hello,
            2 => Kind::Ready,
            3 => Kind::End,
            4 => Kind::Report,
            5 => Kind::Bye,
            6 => Kind::Stats,
            _ => return None,
        };
        let pattern = match b[5] {
            1 => Pattern::OneOne,
            2 => Pattern::Stream,
            _ => return None,
        };
        let u64at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(Ctrl {
            kind,
            step: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            pattern,
            size: u64at(12),
            count: u64at(20),
            extra: u64at(28),
        })
    }
}

/// Sends a control message.
pub fn send(ep: &mut dyn Endpoint, c: &Ctrl) -> io::Result<()> {
    ep.send_msg(&c.encode())
}

/// Receives the next control message accepted by `want`, waiting at most
/// `timeout`. On datagram transports other datagrams (stale control, stray
/// data) are skipped; on reliable transports anything else is an error.
pub fn recv(
    ep: &mut dyn Endpoint,
    timeout: Duration,
    want: impl Fn(&Ctrl) -> bool,
) -> io::Result<Ctrl> {
    if let Some(max) = ep.max_datagram() {
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; max.max(CTRL_LEN)];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(crate::transport::timed_out(timeout));
            }
            let n = ep.recv_datagram(&mut buf, left)?;
            if let Some(c) = Ctrl::decode(&buf[..n]) {
                if want(&c) {
                    return Ok(c);
                }
            }
        }
    }
    let mut b = [0u8; CTRL_LEN];
    ep.recv_msg(&mut b)?;
    match Ctrl::decode(&b) {
        Some(c) if want(&c) => Ok(c),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("protocol error: expected a control message, got {other:?}"),
        )),
    }
}

/// Sends `msg` and waits for the answer accepted by `want`; on datagram
/// transports repeats `msg` every 20 ms until answered or `timeout` passes.
pub fn request(
    ep: &mut dyn Endpoint,
    msg: &Ctrl,
    timeout: Duration,
    want: impl Fn(&Ctrl) -> bool,
) -> io::Result<Ctrl> {
    if ep.max_datagram().is_none() {
        send(ep, msg)?;
        return recv(ep, timeout, want);
    }
    let start = Instant::now();
    let deadline = start + timeout;
    let mut interval = RETRY;
    let mut said = false;
    let mut refused = false;
    loop {
        let probe_at = Instant::now();
        match send(ep, msg) {
            Ok(()) => {}
            // The server's port is not open yet (ICMP port unreachable).
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => refused = true,
            Err(e) => return Err(e),
        }
        if !said && probe_at.duration_since(start) >= SAY_WAITING_AFTER {
            said = true;
            eprintln!(
                "netgauge: waiting for the server: no answer to {:?} for {:.1} s{}; probing {} times per second until {:.0} s have passed (--timeout)",
                msg.kind,
                probe_at.duration_since(start).as_secs_f64(),
                if refused {
                    " (its port is closed: is `netgauge -a` started there with the same -m and -P?)"
                } else {
                    ""
                },
                (1.0 / MAX_RETRY.as_secs_f64()).round(),
                timeout.as_secs_f64()
            );
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no answer from the server to {:?} for {:.1} s: is `netgauge -a` running with the same mode and port?",
                    msg.kind,
                    timeout.as_secs_f64()
                ),
            ));
        }
        let next_probe = probe_at + interval;
        interval = (interval * 2).min(MAX_RETRY);
        // Listen until the next probe is due; an early error (port
        // unreachable) does not bring the probe forward.
        loop {
            let left = next_probe
                .min(deadline)
                .saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match recv(ep, left, &want) {
                Ok(c) => return Ok(c),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    refused = true;
                    // Nothing will come before the next probe's answer.
                    std::thread::sleep(
                        next_probe
                            .min(deadline)
                            .saturating_duration_since(Instant::now()),
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let c = Ctrl {
            kind: Kind::Report,
            step: 7,
            pattern: Pattern::Stream,
            size: 1400,
            count: 12345,
            extra: 1 << 40,
        };
        let b = c.encode();
        assert_eq!(Ctrl::decode(&b), Some(c));
        assert_eq!(Ctrl::decode(&b[..CTRL_LEN - 1]), None);
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(Ctrl::decode(&bad), None);
        let mut bad = b;
        bad[4] = 99;
        assert_eq!(Ctrl::decode(&bad), None);
        let stats = Ctrl {
            kind: Kind::Stats,
            count: 1100,
            extra: 5_000_000,
            ..Ctrl::new(Kind::Stats, 3, Pattern::OneOne)
        };
        assert_eq!(Ctrl::decode(&stats.encode()), Some(stats));
    }

    /// A datagram endpoint whose peer port is closed: every send and
    /// receive fails at once with ConnectionRefused (ICMP port unreachable
    /// on a connected UDP socket).
    struct Refused {
        sends: usize,
    }

    impl Endpoint for Refused {
        fn send_msg(&mut self, _: &[u8]) -> io::Result<()> {
            self.sends += 1;
            Err(io::ErrorKind::ConnectionRefused.into())
        }
        fn recv_msg(&mut self, _: &mut [u8]) -> io::Result<()> {
            Err(io::ErrorKind::ConnectionRefused.into())
        }
        fn max_datagram(&self) -> Option<usize> {
            Some(1500)
        }
        fn recv_datagram(&mut self, _: &mut [u8], _: Duration) -> io::Result<usize> {
            Err(io::ErrorKind::ConnectionRefused.into())
        }
    }

    #[test]
    fn a_client_waiting_for_its_server_backs_off() {
        let mut ep = Refused { sends: 0 };
        let hello = Ctrl::new(Kind::Hello, 1, Pattern::OneOne);
        let t0 = Instant::now();
        let e = request(&mut ep, &hello, Duration::from_secs(2), |_| true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= Duration::from_secs(2));
        // 20, 40, 80, 160 ms, then every 250 ms: about 11 probes in 2 s
        // (the old loop sent one per refused receive: ~10^5).
        assert!((5..=14).contains(&ep.sends), "{} probes in 2 s", ep.sends);
    }

    #[test]
    fn ethernet_padding_is_tolerated() {
        let c = Ctrl::new(Kind::Hello, 2, Pattern::OneOne);
        let mut padded = c.encode().to_vec();
        // A 40-byte payload arrives padded to 46 bytes on real Ethernet.
        padded.resize(MIN_PAYLOAD, 0);
        assert_eq!(Ctrl::decode(&padded), Some(c));
        // Longer than any padding: not a control message.
        padded.resize(MIN_PAYLOAD + 1, 0);
        assert_eq!(Ctrl::decode(&padded), None);
    }
}

//! The control exchange between client and server, carried in-band on the
//! measured transport: before each size step the client announces the
//! pattern, size and count (HELLO) and the server answers READY; a stream
//! step ends with the server's REPORT; after each step the client asks for
//! the server's CPU time of the step (STATS, answered with STATS); BYE ends
//! the session.
//!
//! Control messages ([`wire`]) are [`CTRL_LEN`] bytes starting with
//! [`wire::MAGIC`]. On datagram transports a control message may be lost or
//! duplicated, so the client repeats HELLO and END until answered and both
//! sides skip stale control datagrams (an older step number, or an
//! unexpected kind).

use std::io;
use std::time::{Duration, Instant};

use crate::transport::Endpoint;

pub mod wire;

pub use wire::{Ctrl, Kind, CTRL_LEN};

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
    use crate::patterns::Pattern;

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
}

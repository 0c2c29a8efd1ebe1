//! `one_one` over datagram transports (eth, EDP, UDP): ping-pong that
//! survives loss. A ping whose echo does not arrive within the
//! retransmission timeout is sent again (same sequence number) and counted;
//! the run never aborts on a lost datagram, only when the peer stays silent
//! for the whole session timeout.
//!
//! Rules:
//! - The retransmission timeout is RFC 6298's (netcore's [`Rto`]: SRTT +
//!   4 RTTVAR, doubled on each expiry), clamped to [`MIN_RTO`, `MAX_RTO`],
//!   fed only with round trips whose ping was sent once (Karn's rule,
//!   RFC 6298 sec. 3). Departure from RFC 6298: 5 ms minimum instead of 1 s
//!   (cluster links, as netcore's callers).
//! - Round trips that needed a resend are not latency samples (their time
//!   includes the timeout); they are counted in [`ResendStats`].
//! - A message larger than one datagram travels as a train; each message's
//!   first datagram starts with the message's sequence number
//!   ([`Payload`]'s stamp), so a receiver (re)starts assembling a message at
//!   a datagram carrying the expected stamp and drops datagrams of stale or
//!   partly lost messages; a later datagram of a train must carry the
//!   payload bytes of its position (both ends know the pattern), else a
//!   datagram before it was lost and the message is dropped. The server echoes a duplicate of the ping it
//!   echoed last again (its echo was lost), and answers a repeated HELLO of
//!   the running step with READY again (the READY was lost).

use std::io;
use std::time::{Duration, Instant};

use netcore::rtt::{Rto, RtoConfig};

use super::Payload;
use crate::control::{self, Ctrl, Kind};
use crate::patterns::Pattern;
use crate::stats::Samples;
use crate::transport::{timed_out, Endpoint};

/// Lower bound of the retransmission timeout: above the scheduling delays of
/// a loaded host, so that a slow echo is rarely mistaken for a lost one.
pub const MIN_RTO: Duration = Duration::from_millis(5);
/// Upper bound of the retransmission timeout (backoff stops there).
pub const MAX_RTO: Duration = Duration::from_secs(1);
/// Timeout before the first round trip of a step was measured.
const INITIAL_RTO: Duration = Duration::from_millis(50);

/// What the resends of one step cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResendStats {
    /// Pings sent again after a timeout.
    pub resends: u64,
    /// Round trips (warm-up included) that needed at least one resend.
    pub round_trips_resent: u64,
    /// Datagrams dropped as stale (an echo of an earlier round trip, a
    /// datagram of a partly lost train).
    pub stale: u64,
}

impl ResendStats {
    /// Fraction of pings sent that got no echo in time: resends / (round
    /// trips + resends), 0..1.
    pub fn loss(&self, round_trips: u64) -> f64 {
        let sent = round_trips + self.resends;
        if sent == 0 {
            0.0
        } else {
            self.resends as f64 / sent as f64
        }
    }
}

/// Whether datagram `d` starts message `seq` of `size` bytes (its first
/// `min(size, 8)` bytes are the stamp).
fn starts(d: &[u8], seq: u64, size: usize) -> bool {
    let k = size.min(super::STAMP);
    d.len() >= k && d[..k] == seq.to_le_bytes()[..k]
}

/// Rounds `d` up to whole milliseconds: the receive timeout changes rarely,
/// so a kernel socket's SO_RCVTIMEO is rarely set again.
fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(
        d.as_millis() as u64 + u64::from(!d.subsec_nanos().is_multiple_of(1_000_000)),
    )
}

/// Client side of one size step over a datagram endpoint: `warmup + count`
/// round trips of `size` bytes with resends. Returns the half round-trip
/// and send-blocking samples (ns) of the measured round trips sent once,
/// and the resend counters. Errors: `TimedOut` when no echo arrived for
/// `timeout` despite resends (the server is gone); `InvalidData` on a
/// damaged echo.
pub fn client(
    ep: &mut dyn Endpoint,
    payload: &Payload,
    size: usize,
    warmup: usize,
    count: usize,
    timeout: Duration,
) -> io::Result<(Samples, Samples, ResendStats)> {
    let max = ep
        .max_datagram()
        .ok_or_else(|| io::Error::other("resending ping-pong needs a datagram transport"))?;
    let mut rto = Rto::new(RtoConfig::rfc6298(INITIAL_RTO, MIN_RTO, MAX_RTO));
    let mut msg = vec![0u8; size];
    let mut echo = vec![0u8; size];
    let mut dgram = vec![0u8; max.max(control::CTRL_LEN).max(64)];
    payload.fill(&mut msg, 0);
    let mut half_rtt = Samples::new();
    let mut blocking = Samples::new();
    let mut st = ResendStats::default();
    for it in 0..(warmup + count) {
        let seq = it as u64;
        payload.stamp(&mut msg, seq);
        let t0 = Instant::now();
        ep.send_msg(&msg)?;
        let t1 = Instant::now();
        let mut sent_at = t0;
        let mut tries = 0u64;
        let mut got = 0usize;
        let mut last_progress = t0;
        loop {
            let wait = whole_ms(rto.rto());
            let deadline = sent_at + wait;
            let left = deadline.saturating_duration_since(Instant::now());
            let r = if left.is_zero() {
                Err(io::Error::from(io::ErrorKind::TimedOut))
            } else {
                ep.recv_datagram(&mut dgram, wait)
            };
            match r {
                Ok(n) => {
                    let d = &dgram[..n];
                    if Ctrl::decode(d).is_some() {
                        // A repeated READY of this step.
                        continue;
                    }
                    if starts(d, seq, size) {
                        got = 0; // a new copy of the echo starts here
                    } else if got == 0 {
                        st.stale += 1;
                        continue;
                    } else if !payload.matches_at(got, &d[..n.min(size - got)]) {
                        // A datagram of the train was lost: wait for the
                        // whole echo again.
                        st.stale += 1;
                        got = 0;
                        continue;
                    }
                    let k = n.min(size - got);
                    echo[got..got + k].copy_from_slice(&d[..k]);
                    got += k;
                    last_progress = Instant::now();
                    if got >= size {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    let now = Instant::now();
                    if now.duration_since(last_progress) >= timeout {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "round trip {it}: {} after {tries} resends: the server is gone",
                                timed_out(timeout)
                            ),
                        ));
                    }
                    if now < deadline {
                        continue;
                    }
                    tries += 1;
                    st.resends += 1;
                    rto.back_off();
                    tracing::debug!(
                        round_trip = it,
                        tries,
                        rto_us = rto.rto().as_micros() as u64,
                        "ping resent"
                    );
                    got = 0;
                    sent_at = Instant::now();
                    ep.send_msg(&msg)?;
                }
                Err(e) => return Err(e),
            }
        }
        let t2 = Instant::now();
        payload
            .verify(&echo, seq)
            .map_err(|e| io::Error::new(e.kind(), format!("echo of round trip {it}: {e}")))?;
        if tries == 0 {
            rto.on_sample(t2, t2 - t0);
            if it >= warmup {
                half_rtt.record_ns(((t2 - t0).as_nanos() / 2) as u64);
                blocking.record_ns((t1 - t0).as_nanos() as u64);
            }
        } else {
            st.round_trips_resent += 1;
            rto.reset_backoff();
        }
    }
    Ok((half_rtt, blocking, st))
}

/// Server side of one size step over a datagram endpoint: echoes pings
/// 0..`total`, echoes a repeated ping again, answers a repeated HELLO of
/// `step` with READY again, and returns the first control message that
/// `want` accepts once every ping was echoed (the client's next request:
/// STATS, HELLO of the next step, BYE). Errors: `TimedOut` after `timeout`
/// without a datagram; `InvalidData` on a damaged ping.
pub fn server(
    ep: &mut dyn Endpoint,
    payload: &Payload,
    size: usize,
    total: usize,
    (step, pattern): (u32, Pattern),
    timeout: Duration,
    want: impl Fn(&Ctrl) -> bool,
) -> io::Result<(Ctrl, ResendStats)> {
    let max = ep
        .max_datagram()
        .ok_or_else(|| io::Error::other("resending ping-pong needs a datagram transport"))?;
    let mut buf = vec![0u8; size];
    let mut dgram = vec![0u8; max.max(control::CTRL_LEN).max(64)];
    let mut st = ResendStats::default();
    // Next ping expected; the message being assembled: its seq and bytes.
    let mut next = 0u64;
    let mut cur: Option<u64> = None;
    let mut got = 0usize;
    loop {
        let n = ep.recv_datagram(&mut dgram, timeout)?;
        let d = &dgram[..n];
        if let Some(c) = Ctrl::decode(d) {
            if c.kind == Kind::Hello && c.step == step {
                control::send(ep, &Ctrl::new(Kind::Ready, step, pattern))?;
            } else if next as usize >= total && want(&c) {
                return Ok((c, st));
            }
            continue;
        }
        // The first datagram of the next ping, or of a repeat of the last.
        let candidates = [Some(next), next.checked_sub(1)];
        if let Some(seq) = candidates
            .into_iter()
            .flatten()
            .find(|&s| (s as usize) < total && starts(d, s, size))
        {
            cur = Some(seq);
            got = 0;
        } else if cur.is_none() {
            st.stale += 1;
            continue;
        } else if !payload.matches_at(got, &d[..n.min(size - got)]) {
            // A datagram of the train was lost: the client sends it again.
            st.stale += 1;
            cur = None;
            got = 0;
            continue;
        }
        let k = n.min(size - got);
        buf[got..got + k].copy_from_slice(&d[..k]);
        got += k;
        if got < size {
            continue;
        }
        let seq = cur.take().expect("assembling a message");
        got = 0;
        ep.send_msg(&buf)?;
        if seq == next {
            payload
                .verify(&buf, seq)
                .map_err(|e| io::Error::new(e.kind(), format!("server, round trip {seq}: {e}")))?;
            next += 1;
        } else {
            st.resends += 1;
        }
    }
}

#[cfg(test)]
#[path = "resend_tests.rs"]
mod tests;

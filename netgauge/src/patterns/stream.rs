//! `stream`: one-way bulk transfer. The client sends `count` messages of
//! `size` bytes back to back; the server receives and verifies every byte and
//! answers with a REPORT of what arrived intact. Throughput is bytes
//! received intact over the time from the first send to the REPORT.
//!
//! On datagram transports (UDP, EDP) each datagram carries its own sequence
//! number; lost datagrams are counted and reported as loss instead of
//! failing the run, while corrupted or duplicated ones are counted apart.

use std::io;
use std::time::{Duration, Instant};

use super::Payload;
use crate::control::{self, Ctrl, Kind};
use crate::transport::eth::MIN_PAYLOAD;
use crate::transport::Endpoint;

/// Datagrams handed to the transport per call on datagram modes (one
/// sendmmsg(2) for EDP and UDP), bytes of each at most the transport's
/// `max_datagram`.
const DATAGRAM_BATCH: usize = 64;

/// What one stream step moved.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamResult {
    /// Bytes the client sent.
    pub sent_bytes: u64,
    /// Bytes the server received intact.
    pub recv_bytes: u64,
    /// Units sent: messages (reliable modes) or datagrams (datagram modes).
    pub sent_units: u64,
    /// Units received intact.
    pub recv_units: u64,
    /// First send to REPORT received.
    pub elapsed: Duration,
}

impl StreamResult {
    /// Fraction of units lost (0 for reliable modes).
    pub fn loss(&self) -> f64 {
        if self.sent_units == 0 {
            0.0
        } else {
            1.0 - self.recv_units as f64 / self.sent_units as f64
        }
    }
}

/// Datagram lengths of one message of `size` bytes on a transport carrying
/// at most `max` bytes per datagram.
fn chunks(size: usize, max: usize) -> impl Iterator<Item = usize> {
    let n = size.div_ceil(max).max(1);
    (0..n).map(move |i| (size - i * max).min(max))
}

/// Client side of one step.
pub fn client(
    ep: &mut dyn Endpoint,
    payload: &Payload,
    step: u32,
    size: usize,
    count: usize,
    timeout: Duration,
) -> io::Result<StreamResult> {
    let mut msg = vec![0u8; size];
    payload.fill(&mut msg, 0);
    let is_report = move |c: &Ctrl| c.kind == Kind::Report && c.step == step;
    let t0 = Instant::now();
    let mut r = StreamResult::default();
    let report = match ep.max_datagram() {
        None => {
            for i in 0..count {
                payload.stamp(&mut msg, i as u64);
                ep.send_msg(&msg)?;
            }
            r.sent_units = count as u64;
            control::recv(ep, timeout, is_report)?
        }
        Some(max) => {
            // Each datagram carries its own sequence number, so a batch
            // needs one buffer per datagram.
            let mut bufs: Vec<Vec<u8>> = (0..DATAGRAM_BATCH)
                .map(|_| {
                    let mut b = vec![0u8; size.min(max)];
                    payload.fill(&mut b, 0);
                    b
                })
                .collect();
            let mut lens = [0usize; DATAGRAM_BATCH];
            let mut queued = 0;
            let mut seq = 0u64;
            let flush = |ep: &mut dyn Endpoint, bufs: &[Vec<u8>], lens: &[usize]| {
                let batch: Vec<&[u8]> = bufs.iter().zip(lens).map(|(b, &l)| &b[..l]).collect();
                ep.send_datagrams(&batch)
            };
            for _ in 0..count {
                for len in chunks(size, max) {
                    payload.stamp(&mut bufs[queued][..len], seq);
                    lens[queued] = len;
                    queued += 1;
                    seq += 1;
                    if queued == DATAGRAM_BATCH {
                        flush(ep, &bufs, &lens)?;
                        queued = 0;
                    }
                }
            }
            flush(ep, &bufs[..queued], &lens[..queued])?;
            r.sent_units = seq;
            let end = Ctrl::new(Kind::End, step, crate::patterns::Pattern::Stream);
            control::request(ep, &end, timeout, is_report)?
        }
    };
    r.elapsed = t0.elapsed();
    r.sent_bytes = (size * count) as u64;
    r.recv_units = report.count;
    r.recv_bytes = report.extra;
    if ep.max_datagram().is_none() && (r.recv_bytes != r.sent_bytes) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "stream of {} bytes: the server received only {} intact",
                r.sent_bytes, r.recv_bytes
            ),
        ));
    }
    Ok(r)
}

/// Server side of one step: receives, verifies, sends the REPORT.
pub fn server(
    ep: &mut dyn Endpoint,
    payload: &Payload,
    hello: &Ctrl,
    timeout: Duration,
) -> io::Result<()> {
    let size = hello.size as usize;
    let count = hello.count as usize;
    let mut report = Ctrl::new(Kind::Report, hello.step, hello.pattern);
    match ep.max_datagram() {
        None => {
            let mut buf = vec![0u8; size];
            // An unordered transport (CTP) may deliver messages in any
            // order: each must still arrive exactly once and intact.
            let mut seen = if ep.unordered() && size >= 8 {
                vec![false; count]
            } else {
                Vec::new()
            };
            for i in 0..count {
                ep.recv_msg(&mut buf)?;
                let seq = if seen.is_empty() {
                    i as u64
                } else {
                    let s = Payload::seq_of(&buf).unwrap_or(u64::MAX);
                    match seen.get_mut(s as usize) {
                        Some(flag) if !*flag => {
                            *flag = true;
                            s
                        }
                        Some(_) => {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("stream message {s} delivered twice"),
                            ))
                        }
                        // Out of range: verify() reports the bad sequence.
                        None => i as u64,
                    }
                };
                payload
                    .verify(&buf, seq)
                    .map_err(|e| io::Error::new(e.kind(), format!("stream message {i}: {e}")))?;
            }
            report.count = count as u64;
            report.extra = (size * count) as u64;
        }
        Some(max) => {
            let lens: Vec<usize> = chunks(size, max).collect();
            let min_len = lens.iter().copied().min().unwrap_or(0);
            let total = lens.len() * count;
            let mut seen = vec![false; total];
            let mut buf = vec![0u8; max.max(control::CTRL_LEN)];
            let (mut ok, mut bytes, mut bad, mut dup) = (0u64, 0u64, 0u64, 0u64);
            loop {
                let n = ep.recv_datagram(&mut buf, timeout)?;
                let d = &buf[..n];
                if let Some(c) = control::Ctrl::decode(d) {
                    if c.kind == Kind::End && c.step == hello.step {
                        break;
                    }
                    continue;
                }
                // Datagrams shorter than a sequence number are counted in
                // order; so is one that may be such a datagram with
                // Ethernet padding (eth mode carries no length).
                let in_order = n < 8 || (n <= MIN_PAYLOAD && min_len < 8);
                let seq = if in_order {
                    ok + bad + dup
                } else {
                    Payload::seq_of(d).unwrap_or(u64::MAX)
                };
                let idx = seq as usize;
                let expected = if idx < total {
                    lens[idx % lens.len()]
                } else {
                    0
                };
                let d = if n > expected && n <= MIN_PAYLOAD {
                    &d[..expected]
                } else {
                    d
                };
                if idx >= total || d.len() != expected || payload.verify(d, seq).is_err() {
                    bad += 1;
                } else if seen[idx] {
                    dup += 1;
                } else {
                    seen[idx] = true;
                    ok += 1;
                    bytes += d.len() as u64;
                }
            }
            if bad > 0 || dup > 0 {
                tracing::warn!(
                    "stream step {}: {bad} corrupted and {dup} duplicated datagrams dropped",
                    hello.step
                );
            }
            report.count = ok;
            report.extra = bytes;
        }
    }
    control::send(ep, &report)
}

#[cfg(test)]
mod tests {
    use super::chunks;

    #[test]
    fn chunking() {
        assert_eq!(chunks(1400, 1494).collect::<Vec<_>>(), vec![1400]);
        assert_eq!(chunks(3000, 1494).collect::<Vec<_>>(), vec![1494, 1494, 12]);
        assert_eq!(chunks(2988, 1494).collect::<Vec<_>>(), vec![1494, 1494]);
    }
}

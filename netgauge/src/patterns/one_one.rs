//! `one_one`: ping-pong (spcl/netgauge ptrn_one_one). The client sends a
//! message and waits for the server's echo; half the round-trip time is the
//! latency sample. Warm-up iterations are excluded. Both ends verify the
//! payload outside the timed section: the server after echoing, the client
//! after the clock stopped. A mismatch is an error, not a measurement.

use std::io;
use std::time::Instant;

use super::Payload;
use crate::stats::Samples;
use crate::transport::Endpoint;

/// Client side of one size step: `warmup + count` round trips of `size`
/// bytes. Returns the half round-trip and send-blocking samples (ns) of the
/// measured iterations.
pub fn client(
    ep: &mut dyn Endpoint,
    payload: &Payload,
    size: usize,
    warmup: usize,
    count: usize,
) -> io::Result<(Samples, Samples)> {
    let mut msg = vec![0u8; size];
    let mut echo = vec![0u8; size];
    payload.fill(&mut msg, 0);
    let mut half_rtt = Samples::new();
    let mut blocking = Samples::new();
    for it in 0..(warmup + count) {
        let seq = it as u64;
        payload.stamp(&mut msg, seq);
        let t0 = Instant::now();
        ep.send_msg(&msg)?;
        let t1 = Instant::now();
        ep.recv_msg(&mut echo)?;
        let t2 = Instant::now();
        payload
            .verify(&echo, seq)
            .map_err(|e| io::Error::new(e.kind(), format!("echo of round trip {it}: {e}")))?;
        if it >= warmup {
            half_rtt.record_ns(((t2 - t0).as_nanos() / 2) as u64);
            blocking.record_ns((t1 - t0).as_nanos() as u64);
        }
    }
    Ok((half_rtt, blocking))
}

/// Server side of one size step: receive, echo, then verify.
pub fn server(
    ep: &mut dyn Endpoint,
    payload: &Payload,
    size: usize,
    total: usize,
) -> io::Result<()> {
    let mut buf = vec![0u8; size];
    for it in 0..total {
        ep.recv_msg(&mut buf)?;
        ep.send_msg(&buf)?;
        payload
            .verify(&buf, it as u64)
            .map_err(|e| io::Error::new(e.kind(), format!("server, round trip {it}: {e}")))?;
    }
    Ok(())
}

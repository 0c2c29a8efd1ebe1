//! The resending ping-pong over an in-memory datagram pair that drops
//! chosen datagrams: every loss is recovered by a resend and counted.

use std::collections::HashSet;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread;

use super::*;

/// One end of an in-memory datagram link. Datagrams this end sends are
/// numbered from 0; those whose number is in `drop` are lost.
struct MemEnd {
    tx: Sender<Vec<u8>>,
    rx: Receiver<Vec<u8>>,
    max: usize,
    sent: u64,
    drop: HashSet<u64>,
    dropped: u64,
}

fn pair(max: usize, drop_a: &[u64], drop_b: &[u64]) -> (MemEnd, MemEnd) {
    let (ta, rb) = channel();
    let (tb, ra) = channel();
    let end = |tx, rx, drop: &[u64]| MemEnd {
        tx,
        rx,
        max,
        sent: 0,
        drop: drop.iter().copied().collect(),
        dropped: 0,
    };
    (end(ta, ra, drop_a), end(tb, rb, drop_b))
}

impl Endpoint for MemEnd {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        for c in buf.chunks(self.max) {
            let n = self.sent;
            self.sent += 1;
            if self.drop.contains(&n) {
                self.dropped += 1;
                continue;
            }
            let _ = self.tx.send(c.to_vec());
        }
        Ok(())
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let d = self.recv_datagram(buf, Duration::from_secs(5))?;
        assert_eq!(d, buf.len());
        Ok(())
    }

    fn max_datagram(&self) -> Option<usize> {
        Some(self.max)
    }

    fn recv_datagram(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        match self.rx.recv_timeout(timeout) {
            Ok(d) => {
                buf[..d.len()].copy_from_slice(&d);
                Ok(d.len())
            }
            Err(RecvTimeoutError::Timeout) => Err(timed_out(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
}

/// Runs one step of `total` round trips of `size` bytes; returns the
/// client's samples and counters and the server's counters.
fn run(
    size: usize,
    total: usize,
    max: usize,
    drop_client: &[u64],
    drop_server: &[u64],
) -> (Samples, ResendStats, ResendStats, u64) {
    let (mut c, mut s) = pair(max, drop_client, drop_server);
    let server = thread::spawn(move || {
        let payload = Payload::new(size);
        let r = server(
            &mut s,
            &payload,
            size,
            total,
            (1, Pattern::OneOne),
            Duration::from_secs(5),
            |c| c.kind == Kind::Stats,
        );
        (r, s.dropped)
    });
    let payload = Payload::new(size);
    let (lat, _, st) = client(&mut c, &payload, size, 0, total, Duration::from_secs(5))
        .expect("client survives the losses");
    control::send(&mut c, &Ctrl::new(Kind::Stats, 1, Pattern::OneOne)).unwrap();
    let (r, server_dropped) = server.join().unwrap();
    let (ctrl, sst) = r.expect("server survives the losses");
    assert_eq!(ctrl.kind, Kind::Stats);
    (lat, st, sst, c.dropped + server_dropped)
}

#[test]
fn lost_pings_and_echoes_are_resent_and_counted() {
    // Ping 3 (client datagram 3) and the echo of ping 6 (server datagram 6)
    // are lost: two resends, two round trips without a latency sample.
    let (lat, st, sst, dropped) = run(32, 10, 1500, &[3], &[6]);
    assert_eq!(dropped, 2);
    assert_eq!(st.resends, 2, "{st:?}");
    assert_eq!(st.round_trips_resent, 2);
    assert_eq!(lat.summary().map(|_| ()), Some(()));
    // The server saw ping 6 twice (its echo was lost) and echoed it again.
    assert_eq!(sst.resends, 1, "{sst:?}");
    assert!((st.loss(10) - 2.0 / 12.0).abs() < 1e-9);
}

#[test]
fn the_last_echo_lost_is_recovered_before_the_next_request() {
    // The echo of the last ping is lost: the server, already done, must
    // still echo the repeated ping before it takes the STATS request.
    let (_, st, sst, _) = run(16, 5, 1500, &[], &[4]);
    assert_eq!(st.resends, 1);
    assert_eq!(sst.resends, 1);
}

#[test]
fn trains_with_a_lost_datagram_are_reassembled_from_the_resend() {
    // 1000-byte messages in 300-byte datagrams: 4 per message. Client
    // datagram 5 (second of ping 1) and server datagram 10 (third of echo
    // 2) are lost; the partial messages are dropped, not spliced.
    let (lat, st, sst, dropped) = run(1000, 6, 300, &[5], &[10]);
    assert_eq!(dropped, 2);
    assert_eq!(st.resends, 2, "{st:?}");
    assert_eq!(sst.resends, 1, "{sst:?}");
    assert!(lat.summary().is_some());
}

#[test]
fn a_silent_server_is_an_error_after_the_session_timeout() {
    let (mut c, _s) = pair(1500, &[], &[]);
    let payload = Payload::new(8);
    let t0 = Instant::now();
    let Err(e) = client(&mut c, &payload, 8, 0, 1, Duration::from_millis(300)) else {
        panic!("a silent server must fail the step");
    };
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert!(e.to_string().contains("resends"), "{e}");
    assert!(
        c.sent >= 3,
        "pings were resent before giving up: {}",
        c.sent
    );
    assert!(t0.elapsed() < Duration::from_secs(3));
}

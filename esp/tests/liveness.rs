//! The death policy on the virtual clock (`esp::conn` liveness): two ESP
//! endpoints over a `SimLink` pair whose path the test cuts (a partition,
//! as a link flap or a blackhole makes it). The peer is suspected after
//! `max_retransmissions` unanswered retransmissions or probes (about a
//! second), the connection keeps retransmitting at the maximum RTO, a
//! partition shorter than the user timeout is survived byte-exact, and a
//! longer one ends both ends with `UserTimeout` at the user timeout. The
//! thesis's rule (`user_timeout: None`) is tested in `sim.rs` and
//! `trace.rs`.

mod harness;

use std::time::{Duration, Instant};

use esp::conn::{ConnectionError, Error, Liveness, State};
use esp::TransportConfig;
use harness::*;

/// What one end saw of the partition.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    /// First instant the end reported `Unresponsive`.
    suspected: Option<Instant>,
    /// First instant it reported `Responsive` again after that.
    recovered: Option<Instant>,
    /// The error that ended it, and when.
    died: Option<(Error, Instant)>,
}

impl Seen {
    fn watch(&mut self, l: Liveness, now: Instant) {
        match l {
            Liveness::Unresponsive { .. } if self.suspected.is_none() => self.suspected = Some(now),
            Liveness::Responsive if self.suspected.is_some() && self.recovered.is_none() => {
                self.recovered = Some(now)
            }
            _ => {}
        }
    }
}

/// Streams from A to B, cutting the path once `cut_after` bytes were read
/// for `outage` of virtual time (`None`: for good), until B read `len`
/// bytes and both ends closed, or both died. Returns what each end saw,
/// the bytes read and the instant of the cut.
fn stream_through_cut(
    cfg: &TransportConfig,
    len: usize,
    cut_after: usize,
    outage: Option<Duration>,
) -> (Seen, Seen, usize, Instant) {
    let mut sim = connect(cfg, faults(31), faults(32));
    let (mut written, mut read) = (0usize, 0usize);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut rbuf = vec![0u8; 64 * 1024];
    let mut expect = vec![0u8; 64 * 1024];
    let (mut a, mut b) = (Seen::default(), Seen::default());
    let mut cut_at: Option<Instant> = None;
    let mut eof = false;
    sim.run(Duration::from_secs(600), |s| {
        let now = s.clock.now();
        if let (Some(c), Some(o)) = (cut_at, outage) {
            if now >= c + o {
                s.plug(0);
            }
        }
        while a.died.is_none() && written < len {
            let n = (len - written).min(chunk.len());
            fill(&mut chunk[..n], written as u64);
            match s.a.conn.send(&chunk[..n]) {
                Ok(k) => written += k,
                Err(Error::Blocked) => break,
                Err(e) => {
                    a.died = Some((e, now));
                    break;
                }
            }
        }
        if written == len {
            s.a.conn.close();
        }
        while b.died.is_none() {
            match s.b.conn.recv(&mut rbuf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    fill(&mut expect[..n], read as u64);
                    assert!(rbuf[..n] == expect[..n], "corrupt data at offset {read}");
                    read += n;
                }
                Err(Error::Blocked) => break,
                Err(e) => b.died = Some((e, now)),
            }
        }
        if a.died.is_none() {
            if let Some(e) = s.a.conn.error() {
                a.died = Some((Error::ConnectionLost(e), now));
            }
        }
        a.watch(s.a.conn.liveness(), now);
        b.watch(s.b.conn.liveness(), now);
        if cut_at.is_none() && read >= cut_after {
            s.unplug(0);
            cut_at = Some(now);
            if let Some(o) = outage {
                s.wake_at(now + o);
            }
        }
        if eof && s.b.conn.state() == State::CloseWait {
            s.b.conn.close();
        }
        let done = eof && s.a.conn.state() == State::Closed && s.b.conn.state() == State::Closed;
        done || (a.died.is_some() && b.died.is_some())
    });
    (a, b, read, cut_at.expect("the path was cut"))
}

fn cfg(user_timeout: Duration) -> TransportConfig {
    TransportConfig {
        user_timeout: Some(user_timeout),
        ..Default::default()
    }
}

#[test]
fn a_partition_is_suspected_at_the_bound_and_fatal_at_the_user_timeout() {
    let ut = Duration::from_secs(20);
    let (a, b, read, cut) = stream_through_cut(&cfg(ut), 64 * MB, MB, None);
    assert!(read < 64 * MB);
    // Suspected at the retransmission bound: the sender after 8
    // retransmissions with the RTO doubling from 1 ms (< 0.6 s), the
    // receiver after 1 s of keepalive idle and 8 probes (< 4.3 s).
    let sa = a.suspected.expect("the sender suspects its peer") - cut;
    let sb = b.suspected.expect("the receiver suspects its peer") - cut;
    eprintln!("suspected after: sender {sa:?}, receiver {sb:?}");
    assert!(
        sa < Duration::from_millis(600),
        "sender suspected after {sa:?}"
    );
    assert!(sb < Duration::from_millis(4300), "receiver after {sb:?}");
    // Not dead at the suspicion: dead at the user timeout, within one
    // maximum RTO (1 s) of it. The sender's clock starts when its oldest
    // unacknowledged segment was sent (before the cut), the receiver's at
    // its first unanswered probe (after 1 s of silence).
    let (ea, ta) = a.died.expect("the sender died");
    let (eb, tb) = b.died.expect("the receiver died");
    eprintln!("dead after: sender {:?}, receiver {:?}", ta - cut, tb - cut);
    assert_eq!(ea, Error::ConnectionLost(ConnectionError::UserTimeout(ut)));
    assert_eq!(eb, Error::ConnectionLost(ConnectionError::UserTimeout(ut)));
    assert!(ta - cut >= ut - Duration::from_millis(10) && ta - cut <= ut + Duration::from_secs(1));
    assert!(tb - cut >= ut && tb - cut <= ut + Duration::from_secs(3));
    assert!(a.recovered.is_none() && b.recovered.is_none());
}

#[test]
fn suspected_ends_keep_retransmitting_at_the_maximum_rto() {
    let ut = Duration::from_secs(30);
    let mut sim = connect(&cfg(ut), faults(41), faults(42));
    sim.a.conn.send(&[1u8; 10_000]).unwrap();
    sim.unplug(0);
    let cut = sim.clock.now();
    let mut suspected_at = None;
    let mut sent_then = 0;
    sim.run(Duration::from_secs(120), |s| {
        if suspected_at.is_none() && s.a.conn.liveness() != Liveness::Responsive {
            suspected_at = Some(s.clock.now());
            sent_then = s.a.conn.stats().sent;
        }
        s.a.conn.error().is_some()
    });
    let suspected_at = suspected_at.expect("suspected");
    let retx = sim.a.conn.stats().sent - sent_then;
    let span = sim.clock.now() - suspected_at;
    eprintln!(
        "suspected {:?} after the cut, dead {span:?} later, {retx} retransmissions meanwhile",
        suspected_at - cut
    );
    // One retransmission per maximum RTO (1 s) while suspected: a learning
    // switch relearns the path within a second of the outage's end.
    let per_s = retx as f64 / span.as_secs_f64();
    assert!((0.8..=1.2).contains(&per_s), "{per_s} retransmissions/s");
    assert_eq!(sim.a.conn.stats().unresponsive, 1);
}

#[test]
fn a_partition_shorter_than_the_user_timeout_is_survived_byte_exact() {
    let ut = Duration::from_secs(20);
    for outage in [Duration::from_secs(3), Duration::from_secs(10)] {
        let (a, b, read, cut) = stream_through_cut(&cfg(ut), 8 * MB, MB, Some(outage));
        assert_eq!(read, 8 * MB, "the stream completes (checked byte by byte)");
        assert!(a.died.is_none() && b.died.is_none(), "{a:?} {b:?}");
        let (sa, ra) = (
            a.suspected.expect("suspected"),
            a.recovered.expect("recovered"),
        );
        eprintln!(
            "outage {outage:?}: sender suspected after {:?}, responsive {:?} after the path returned",
            sa - cut,
            ra - (cut + outage)
        );
        assert!(sa - cut < Duration::from_millis(600));
        // Back within one maximum RTO of the path's return.
        assert!(ra >= cut + outage && ra - (cut + outage) <= Duration::from_millis(1100));
        assert!(b.suspected.is_some(), "the receiver suspected too");
    }
}

#[test]
fn a_peer_answering_probes_is_never_declared_dead() {
    // A receiver whose peer is idle but answers its keepalives stays up
    // far beyond the user timeout.
    let ut = Duration::from_secs(5);
    let mut sim = connect(&cfg(ut), faults(51), faults(52));
    let start = sim.clock.now();
    sim.run(Duration::from_secs(120), |s| {
        assert_eq!(s.a.conn.error(), None);
        assert_eq!(s.b.conn.error(), None);
        assert_eq!(s.a.conn.liveness(), Liveness::Responsive);
        s.clock.now() - start >= Duration::from_secs(60)
    });
    assert!(sim.a.conn.stats().probes > 0);
}

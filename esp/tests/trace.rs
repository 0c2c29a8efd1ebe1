//! State-machine traces at explicit instants (smoltcp `socket/tcp.rs` style):
//! two sans-IO connections, frames moved by hand, time = T0 + microseconds.

use std::time::{Duration, Instant};

use esp::conn::{reset_frame, Connection, ConnectionError, Error, IsnGenerator, State};
use esp::listener::{DropReason, Listener, SynOutcome};
use esp::wire::{EspFrame, EspRepr, Flags, MacAddr, Seq, ETHERTYPE_ESP};
use esp::TransportConfig;

const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xa]);
const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xb]);
const PA: u16 = 40000;
const PB: u16 = 80;
const MTU: usize = 1500;
const MSS: usize = MTU - 20;

#[derive(Debug, Clone)]
struct Seg {
    repr: EspRepr,
    payload: Vec<u8>,
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Every frame `c` wants to send at `now`, parsed.
fn out(c: &mut Connection, now: Instant) -> Vec<Seg> {
    let mut buf = [0u8; MTU + 14];
    let mut v = Vec::new();
    while let Some(n) = c.poll_transmit(now, &mut buf) {
        let f = EspFrame::parse(&buf[..n], ETHERTYPE_ESP, MTU + 14).expect("own frame parses");
        assert_eq!(f.eth.src, c.local().0);
        assert_eq!(f.eth.dst, c.remote().0);
        v.push(Seg {
            repr: f.header,
            payload: f.payload.to_vec(),
        });
        assert!(v.len() < 100_000, "poll_transmit never returns None");
    }
    v
}

fn deliver(c: &mut Connection, now: Instant, segs: &[Seg]) {
    for s in segs {
        c.handle_segment(now, &s.repr, &s.payload);
    }
}

fn isn() -> IsnGenerator {
    IsnGenerator::with_key([7; 16])
}

struct Pair {
    t0: Instant,
    a: Connection,
    b: Connection,
}

/// Client `a` (initial sequence number `iss`) after sending its SYN at
/// `t0`, and the server connection `b` the listener made of that SYN at
/// `t0 + syn_delay` (SYN_RCVD, its SYN-ACK not yet taken).
fn syn_received(
    cfg_a: &TransportConfig,
    cfg_b: TransportConfig,
    iss: Seq,
    t0: Instant,
    syn_delay: Duration,
) -> (Connection, Connection) {
    let mut a = Connection::connect(cfg_a, MTU, (A, PA), (B, PB), iss, t0);
    let syn = out(&mut a, t0);
    assert_eq!(syn.len(), 1);
    assert_eq!(syn[0].repr.flags, Flags::SYN);
    let mut l: Listener<()> = Listener::new(cfg_b, MTU, (B, PB), isn());
    let b = match l.on_segment(t0 + syn_delay, 0, A, &syn[0].repr, |_| false) {
        SynOutcome::Accept(c) => *c,
        o => panic!("listener refused the SYN: {o:?}"),
    };
    assert_eq!(b.state(), State::SynRcvd);
    (a, b)
}

/// Client `a` and server `b` after a clean handshake at t = 0..20 us.
fn established(cfg_a: TransportConfig, cfg_b: TransportConfig) -> Pair {
    let t0 = Instant::now();
    let (mut a, mut b) = syn_received(&cfg_a, cfg_b, Seq(1000), t0, us(5));
    let synack = out(&mut b, t0 + us(5));
    assert_eq!(synack.len(), 1);
    assert_eq!(synack[0].repr.flags, Flags::SYN | Flags::ACK);
    assert_eq!(synack[0].repr.ack, Seq(1001));
    deliver(&mut a, t0 + us(10), &synack);
    assert_eq!(a.state(), State::Established);
    let ack = out(&mut a, t0 + us(10));
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].repr.flags, Flags::ACK);
    deliver(&mut b, t0 + us(15), &ack);
    assert_eq!(b.state(), State::Established);
    assert!(out(&mut b, t0 + us(15)).is_empty());
    Pair { t0, a, b }
}

fn pair() -> Pair {
    established(TransportConfig::default(), TransportConfig::default())
}

#[test]
fn handshake_and_first_rtt_sample() {
    let p = pair();
    // The SYN was acknowledged 10 us after it was sent: first RTT sample.
    assert_eq!(p.a.rtt().srtt(), Some(us(10)));
    assert_eq!(p.b.rtt().srtt(), Some(us(10)));
    assert_eq!(p.a.rcv_nxt(), p.b.snd_nxt());
    assert_eq!(p.b.rcv_nxt(), Seq(1001));
    // Nothing is pending but the keepalive.
    assert_eq!(
        p.a.poll_timeout(),
        Some((p.t0 + us(10)) + Duration::from_secs(1))
    );
}

#[test]
fn lost_syn_is_retransmitted_after_initial_rto() {
    let t0 = Instant::now();
    let cfg = TransportConfig::default();
    let mut a = Connection::connect(&cfg, MTU, (A, PA), (B, PB), Seq(1), t0);
    let lost = out(&mut a, t0);
    assert_eq!(lost.len(), 1);
    assert_eq!(a.poll_timeout(), Some(t0 + ms(10)));
    a.handle_timeout(t0 + ms(10) - us(1));
    assert!(out(&mut a, t0 + ms(10) - us(1)).is_empty());
    a.handle_timeout(t0 + ms(10));
    let syn = out(&mut a, t0 + ms(10));
    assert_eq!(syn.len(), 1);
    assert_eq!(syn[0].repr.flags, Flags::SYN);
    assert_eq!(syn[0].repr.seq, Seq(1));
    assert_eq!(a.stats().retransmitted, 1);
    // Backoff: next after 20 ms.
    assert_eq!(a.poll_timeout(), Some(t0 + ms(30)));
    let mut l: Listener<()> = Listener::new(cfg, MTU, (B, PB), isn());
    let SynOutcome::Accept(mut b) = l.on_segment(t0 + ms(11), 0, A, &syn[0].repr, |_| false) else {
        panic!()
    };
    let synack = out(&mut b, t0 + ms(11));
    deliver(&mut a, t0 + ms(12), &synack);
    assert_eq!(a.state(), State::Established);
    // Karn: the retransmitted SYN gave no RTT sample.
    assert_eq!(a.rtt().srtt(), None);
}

#[test]
fn lost_synack_answered_by_syn_retransmit() {
    let t0 = Instant::now();
    let cfg = TransportConfig::default();
    let (mut a, mut b) = syn_received(&cfg, cfg.clone(), Seq(1), t0, Duration::ZERO);
    let _lost = out(&mut b, t0);
    a.handle_timeout(t0 + ms(10));
    let syn2 = out(&mut a, t0 + ms(10));
    assert_eq!(syn2.len(), 1);
    // The half-open connection answers the repeated SYN with its SYN-ACK.
    deliver(&mut b, t0 + ms(10), &syn2);
    let synack = out(&mut b, t0 + ms(10));
    assert_eq!(synack.len(), 1);
    assert_eq!(synack[0].repr.flags, Flags::SYN | Flags::ACK);
    assert_eq!(b.stats().retransmitted, 1);
    deliver(&mut a, t0 + ms(10) + us(5), &synack);
    let ack = out(&mut a, t0 + ms(10) + us(5));
    deliver(&mut b, t0 + ms(10) + us(10), &ack);
    assert_eq!(a.state(), State::Established);
    assert_eq!(b.state(), State::Established);
}

#[test]
fn lost_final_ack_recovered_by_synack_retransmit_or_data() {
    let t0 = Instant::now();
    let cfg = TransportConfig::default();
    let (mut a, mut b) = syn_received(&cfg, cfg.clone(), Seq(1), t0, Duration::ZERO);
    let synack = out(&mut b, t0);
    deliver(&mut a, t0 + us(10), &synack);
    let _lost_ack = out(&mut a, t0 + us(10));
    assert_eq!(b.poll_timeout(), Some(t0 + ms(10)));
    b.handle_timeout(t0 + ms(10));
    let synack2 = out(&mut b, t0 + ms(10));
    assert_eq!(synack2.len(), 1);
    // The established client answers the old SYN-ACK with a (challenge) ACK.
    deliver(&mut a, t0 + ms(10), &synack2);
    let ack = out(&mut a, t0 + ms(10));
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].repr.flags, Flags::ACK);
    deliver(&mut b, t0 + ms(10), &ack);
    assert_eq!(b.state(), State::Established);

    // Second variant: the first data segment completes the handshake.
    let (mut a, mut b) = syn_received(&cfg, cfg.clone(), Seq(1), t0, Duration::ZERO);
    deliver(&mut a, t0, &out(&mut b, t0));
    let _lost_ack = out(&mut a, t0);
    a.send(b"hello").unwrap();
    let data = out(&mut a, t0 + us(1));
    assert_eq!(data.len(), 1);
    deliver(&mut b, t0 + us(2), &data);
    assert_eq!(b.state(), State::Established);
    let mut buf = [0u8; 16];
    assert_eq!(b.recv(&mut buf), Ok(5));
    assert_eq!(&buf[..5], b"hello");
}

#[test]
fn data_is_segmented_and_delayed_ack_timed() {
    let mut p = pair();
    let msg = vec![0x5au8; MSS * 2 + 100];
    assert_eq!(p.a.send(&msg), Ok(msg.len()));
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(
        segs.iter().map(|s| s.payload.len()).collect::<Vec<_>>(),
        vec![MSS, MSS, 100]
    );
    assert_eq!(segs[0].repr.seq, Seq(1001));
    assert_eq!(segs[2].repr.seq, Seq(1003));
    // One segment: the ACK is delayed by 100 us.
    deliver(&mut p.b, p.t0 + us(110), &segs[..1]);
    assert!(out(&mut p.b, p.t0 + us(110)).is_empty());
    assert_eq!(p.b.poll_timeout(), Some(p.t0 + us(210)));
    p.b.handle_timeout(p.t0 + us(209));
    assert!(out(&mut p.b, p.t0 + us(209)).is_empty());
    p.b.handle_timeout(p.t0 + us(210));
    let ack = out(&mut p.b, p.t0 + us(210));
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].repr.ack, Seq(1002));
    // Two more segments: the second draws an immediate ACK.
    deliver(&mut p.b, p.t0 + us(220), &segs[1..2]);
    assert!(out(&mut p.b, p.t0 + us(220)).is_empty());
    deliver(&mut p.b, p.t0 + us(221), &segs[2..3]);
    let ack2 = out(&mut p.b, p.t0 + us(221));
    assert_eq!(ack2.len(), 1);
    assert_eq!(ack2[0].repr.ack, Seq(1004));
    deliver(&mut p.a, p.t0 + us(230), &ack);
    deliver(&mut p.a, p.t0 + us(231), &ack2);
    assert_eq!(p.a.snd_una(), p.a.snd_nxt());
    let mut got = vec![0u8; msg.len() + 10];
    assert_eq!(p.b.recv(&mut got), Ok(msg.len()));
    assert_eq!(&got[..msg.len()], &msg[..]);
    assert_eq!(p.b.recv(&mut got), Err(Error::Blocked));
}

#[test]
fn ack_piggybacks_on_data() {
    let mut p = pair();
    p.a.send(b"ping").unwrap();
    let ping = out(&mut p.a, p.t0 + us(100));
    deliver(&mut p.b, p.t0 + us(110), &ping);
    p.b.send(b"pong").unwrap();
    let pong = out(&mut p.b, p.t0 + us(111));
    assert_eq!(pong.len(), 1, "the reply carries the ACK: no separate ACK");
    assert_eq!(pong[0].repr.ack, p.b.rcv_nxt());
    assert!(
        p.b.poll_timeout().unwrap() >= p.t0 + us(111) + ms(1),
        "no delayed-ACK timer armed"
    );
    deliver(&mut p.a, p.t0 + us(120), &pong);
    assert_eq!(p.a.snd_una(), p.a.snd_nxt());
}

/// `transmit_due` says when `poll_transmit` may have a frame: after an
/// in-order segment whose ACK is delayed it is false (a driver skips the
/// transmit call); a write, the second segment (immediate ACK), the
/// delayed-ACK timer and a close make it true. (Every `poll_transmit` call
/// checks that a false `transmit_due` builds no frame, in debug builds.)
#[test]
fn transmit_due_follows_what_is_owed() {
    let mut p = pair();
    assert!(
        !p.a.transmit_due() && !p.b.transmit_due(),
        "idle after the handshake"
    );
    p.a.send(b"ping").unwrap();
    assert!(p.a.transmit_due(), "unsent bytes");
    let ping = out(&mut p.a, p.t0 + us(100));
    assert!(!p.a.transmit_due(), "sent, nothing lost");
    deliver(&mut p.b, p.t0 + us(110), &ping);
    assert!(!p.b.transmit_due(), "one segment: the ACK waits");
    p.b.send(b"pong").unwrap();
    assert!(p.b.transmit_due());
    assert_eq!(out(&mut p.b, p.t0 + us(111)).len(), 1);
    assert!(!p.b.transmit_due());
    // Two segments: the second is acknowledged at once.
    p.a.send(&[1u8; MSS + 1]).unwrap();
    let two = out(&mut p.a, p.t0 + us(200));
    assert_eq!(two.len(), 2);
    deliver(&mut p.b, p.t0 + us(210), &two[..1]);
    assert!(!p.b.transmit_due());
    deliver(&mut p.b, p.t0 + us(211), &two[1..]);
    assert!(p.b.transmit_due(), "second segment: ACK now");
    assert_eq!(out(&mut p.b, p.t0 + us(211)).len(), 1);
    // The delayed-ACK timer.
    p.a.send(b"x").unwrap();
    let x = out(&mut p.a, p.t0 + us(300));
    deliver(&mut p.b, p.t0 + us(310), &x);
    assert!(!p.b.transmit_due());
    p.b.handle_timeout(p.t0 + us(410));
    assert!(p.b.transmit_due(), "delayed ACK due");
    assert_eq!(out(&mut p.b, p.t0 + us(410)).len(), 1);
    // A close owes the FIN.
    p.b.close();
    assert!(p.b.transmit_due(), "FIN owed");
}

/// A pair under the thesis's death rule: dead after `max_retransmissions`
/// (no user timeout).
fn thesis_pair() -> Pair {
    let cfg = TransportConfig {
        user_timeout: None,
        ..Default::default()
    };
    established(cfg.clone(), cfg)
}

#[test]
fn rto_backoff_sequence_then_dead_with_errors_on_both_calls() {
    let mut p = thesis_pair();
    p.a.send(b"lost forever").unwrap();
    let first = out(&mut p.a, p.t0 + us(100));
    assert_eq!(first.len(), 1);
    // SRTT 10 us, RTTVAR 5 us: RTO clamped to the 1 ms minimum.
    let mut t = p.t0 + us(100);
    let mut gaps = vec![];
    loop {
        let dl = p.a.poll_timeout().unwrap();
        gaps.push((dl - t).as_millis() as u64);
        t = dl;
        p.a.handle_timeout(t);
        let o = out(&mut p.a, t);
        if p.a.state() == State::Closed {
            assert!(o.iter().all(|s| s.repr.flags.rst()));
            break;
        }
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].payload, b"lost forever");
    }
    assert_eq!(gaps, vec![1, 2, 4, 8, 16, 32, 64, 128, 256]);
    assert_eq!(p.a.stats().retransmitted, 8);
    assert_eq!(p.a.error(), Some(ConnectionError::TimedOut));
    assert_eq!(
        p.a.send(b"x"),
        Err(Error::ConnectionLost(ConnectionError::TimedOut))
    );
    assert_eq!(
        p.a.recv(&mut [0u8; 4]),
        Err(Error::ConnectionLost(ConnectionError::TimedOut))
    );
}

#[test]
fn karn_rule_ignores_retransmitted_samples() {
    let mut p = pair();
    p.a.send(b"x").unwrap();
    let seg = out(&mut p.a, p.t0 + us(100));
    p.a.handle_timeout(p.t0 + us(1100));
    let re = out(&mut p.a, p.t0 + us(1100));
    assert_eq!(re.len(), 1);
    let before = p.a.rtt().srtt();
    deliver(&mut p.b, p.t0 + us(1200), &seg);
    p.b.handle_timeout(p.t0 + us(1300));
    let ack = out(&mut p.b, p.t0 + us(1300));
    deliver(&mut p.a, p.t0 + us(1400), &ack);
    assert_eq!(p.a.snd_una(), p.a.snd_nxt());
    assert_eq!(p.a.rtt().srtt(), before, "ambiguous sample must be ignored");
    // A segment sent once gives a sample again.
    p.a.send(b"y").unwrap();
    let seg = out(&mut p.a, p.t0 + us(2000));
    deliver(&mut p.b, p.t0 + us(2000), &seg);
    p.b.handle_timeout(p.t0 + us(2100));
    deliver(&mut p.a, p.t0 + us(2200), &out(&mut p.b, p.t0 + us(2100)));
    assert_eq!(p.a.rtt().last_sample(), Some(us(200)));
}

#[test]
fn fast_retransmit_costs_one_retransmission() {
    let mut p = pair();
    p.a.send(&vec![1u8; MSS * 8]).unwrap();
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 8);
    let mut acks = vec![];
    for (i, s) in segs.iter().enumerate() {
        if i == 1 {
            continue; // lost
        }
        deliver(&mut p.b, p.t0 + us(110 + i as u64), std::slice::from_ref(s));
        acks.extend(out(&mut p.b, p.t0 + us(110 + i as u64)));
    }
    // After the hole every segment draws an immediate duplicate ACK + SACK.
    let dups: Vec<_> = acks.iter().filter(|s| s.repr.ack == Seq(1002)).collect();
    assert_eq!(dups.len(), 6);
    assert!(!dups[0].repr.sack.is_empty());
    assert_eq!(p.b.stats().out_of_sequence, 6);
    let mut re = vec![];
    for (i, a) in acks.iter().enumerate() {
        deliver(&mut p.a, p.t0 + us(200 + i as u64), std::slice::from_ref(a));
        re.extend(out(&mut p.a, p.t0 + us(200 + i as u64)));
    }
    assert_eq!(re.len(), 1, "only the lost segment is resent: {re:?}");
    assert_eq!(re[0].repr.seq, Seq(1002));
    assert_eq!(p.a.stats().fast_retransmits, 1);
    assert_eq!(p.a.stats().timeouts, 0);
    deliver(&mut p.b, p.t0 + us(300), &re);
    let ack = out(&mut p.b, p.t0 + us(300));
    assert_eq!(ack.len(), 1, "gap fill is acknowledged at once");
    assert_eq!(ack[0].repr.ack, Seq(1009));
    deliver(&mut p.a, p.t0 + us(310), &ack);
    assert_eq!(p.a.snd_una(), p.a.snd_nxt());
    let mut buf = vec![0u8; MSS * 9];
    assert_eq!(p.b.recv(&mut buf), Ok(MSS * 8));
}

#[test]
fn spurious_timeout_is_undone_by_dsack() {
    let mut p = pair();
    p.a.send(&vec![3u8; MSS * 20]).unwrap();
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 10, "initial window of 10 segments");
    let cwnd_before = p.a.cwnd();
    // The receiver stalls: the sender times out and resends the head.
    p.a.handle_timeout(p.t0 + us(100) + ms(1));
    let re = out(&mut p.a, p.t0 + us(100) + ms(1));
    assert_eq!(re.len(), 1);
    assert_eq!(p.a.cwnd(), 1);
    // The stall ends: the originals arrive and are acknowledged, then the
    // retransmission arrives as a duplicate and draws a DSACK.
    deliver(&mut p.b, p.t0 + ms(2), &segs);
    deliver(&mut p.a, p.t0 + ms(2), &out(&mut p.b, p.t0 + ms(2)));
    deliver(&mut p.b, p.t0 + ms(2) + us(10), &re);
    let dsack = out(&mut p.b, p.t0 + ms(2) + us(10));
    assert_eq!(dsack.len(), 1);
    assert_eq!(dsack[0].repr.sack.as_slice()[0].0, re[0].repr.seq);
    deliver(&mut p.a, p.t0 + ms(2) + us(20), &dsack);
    assert_eq!(p.a.stats().spurious, 1);
    assert!(p.a.cwnd() >= cwnd_before, "cwnd restored");
}

#[test]
fn zero_window_probes_and_window_update() {
    let small = TransportConfig {
        recv_buffer: 4 * MSS,
        ..Default::default()
    };
    let mut p = established(TransportConfig::default(), small);
    let total = MSS * 10;
    let data: Vec<u8> = (0..total).map(|i| i as u8).collect();
    assert_eq!(p.a.send(&data), Ok(total));
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(
        segs.len(),
        4,
        "the sender never exceeds the 4-segment window"
    );
    deliver(&mut p.b, p.t0 + us(110), &segs);
    let acks = out(&mut p.b, p.t0 + us(110));
    assert_eq!(acks.last().unwrap().repr.window, 0);
    deliver(&mut p.a, p.t0 + us(120), &acks);
    assert!(out(&mut p.a, p.t0 + us(120)).is_empty());
    // Persist timer: a probe after the RTO (1 ms), then doubling.
    let t1 = p.a.poll_timeout().unwrap();
    assert_eq!(t1, (p.t0 + us(120)) + ms(1));
    p.a.handle_timeout(t1);
    let probe = out(&mut p.a, t1);
    assert_eq!(probe.len(), 1);
    assert!(probe[0].payload.is_empty());
    assert_eq!(p.a.stats().probes, 1);
    deliver(&mut p.b, t1, &probe);
    let answer = out(&mut p.b, t1);
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].repr.window, 0);
    deliver(&mut p.a, t1, &answer);
    assert_eq!(p.a.state(), State::Established);
    let t2 = p.a.poll_timeout().unwrap();
    assert_eq!(t2, t1 + ms(2));
    // The reader drains: a window update reopens the flow.
    let mut buf = vec![0u8; total];
    let mut got = p.b.recv(&mut buf).unwrap();
    let upd = out(&mut p.b, t1 + us(10));
    assert_eq!(upd.len(), 1);
    assert_eq!(upd[0].repr.window, 4);
    deliver(&mut p.a, t1 + us(20), &upd);
    let mut t = t1 + us(20);
    for _ in 0..10 {
        let s = out(&mut p.a, t);
        deliver(&mut p.b, t, &s);
        got += p.b.recv(&mut buf[got..]).unwrap_or(0);
        let a = out(&mut p.b, t);
        deliver(&mut p.a, t, &a);
        t += us(10);
    }
    assert_eq!(got, total);
    assert_eq!(buf, data);
}

fn drain_close(p: &mut Pair, mut t: u64) -> u64 {
    for _ in 0..10 {
        let x = out(&mut p.a, p.t0 + us(t));
        deliver(&mut p.b, p.t0 + us(t), &x);
        let y = out(&mut p.b, p.t0 + us(t));
        deliver(&mut p.a, p.t0 + us(t), &y);
        t += 10;
    }
    t
}

#[test]
fn close_active_then_passive() {
    let mut p = pair();
    p.a.send(b"bye").unwrap();
    p.a.close();
    assert_eq!(p.a.state(), State::FinWait1);
    assert_eq!(p.a.send(b"more"), Err(Error::WriteShutdown));
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 2);
    assert!(segs[1].repr.flags.fin());
    deliver(&mut p.b, p.t0 + us(110), &segs);
    assert_eq!(p.b.state(), State::CloseWait);
    deliver(&mut p.a, p.t0 + us(120), &out(&mut p.b, p.t0 + us(110)));
    assert_eq!(p.a.state(), State::FinWait2);
    let mut buf = [0u8; 8];
    assert_eq!(p.b.recv(&mut buf), Ok(3));
    assert_eq!(p.b.recv(&mut buf), Ok(0), "EOF after the data");
    // The passive side can still send.
    p.b.send(b"last words").unwrap();
    p.b.close();
    assert_eq!(p.b.state(), State::LastAck);
    let segs = out(&mut p.b, p.t0 + us(130));
    deliver(&mut p.a, p.t0 + us(140), &segs);
    assert_eq!(p.a.state(), State::Closed);
    assert_eq!(p.a.recv(&mut buf), Ok(8));
    assert_eq!(p.a.recv(&mut buf), Ok(2));
    assert_eq!(p.a.recv(&mut buf), Ok(0));
    deliver(&mut p.b, p.t0 + us(150), &out(&mut p.a, p.t0 + us(140)));
    assert_eq!(p.b.state(), State::Closed);
    assert_eq!(p.a.error(), None);
    assert_eq!(p.b.error(), None);
}

#[test]
fn close_passive_side_first() {
    let mut p = pair();
    p.b.close();
    drain_close(&mut p, 100);
    assert_eq!(p.b.state(), State::FinWait2);
    assert_eq!(p.a.state(), State::CloseWait);
    p.a.close();
    drain_close(&mut p, 300);
    assert_eq!(p.a.state(), State::Closed);
    assert_eq!(p.b.state(), State::Closed);
}

#[test]
fn simultaneous_close_goes_through_closing() {
    let mut p = pair();
    p.a.close();
    p.b.close();
    let fa = out(&mut p.a, p.t0 + us(100));
    let fb = out(&mut p.b, p.t0 + us(100));
    deliver(&mut p.a, p.t0 + us(110), &fb);
    deliver(&mut p.b, p.t0 + us(110), &fa);
    assert_eq!(p.a.state(), State::Closing);
    assert_eq!(p.b.state(), State::Closing);
    let aa = out(&mut p.a, p.t0 + us(110));
    let ab = out(&mut p.b, p.t0 + us(110));
    deliver(&mut p.a, p.t0 + us(120), &ab);
    deliver(&mut p.b, p.t0 + us(120), &aa);
    assert_eq!(p.a.state(), State::Closed);
    assert_eq!(p.b.state(), State::Closed);
    assert_eq!(p.a.error(), None);
}

#[test]
fn lost_last_ack_is_repeated_after_close() {
    let mut p = pair();
    p.b.close();
    drain_close(&mut p, 100);
    p.a.close();
    let fin = out(&mut p.a, p.t0 + us(300));
    deliver(&mut p.b, p.t0 + us(310), &fin);
    assert_eq!(p.b.state(), State::Closed);
    let _lost = out(&mut p.b, p.t0 + us(310));
    p.a.handle_timeout((p.t0 + us(300)) + ms(1));
    let fin2 = out(&mut p.a, (p.t0 + us(300)) + ms(1));
    assert_eq!(fin2.len(), 1);
    deliver(&mut p.b, (p.t0 + us(300)) + ms(1), &fin2);
    deliver(
        &mut p.a,
        (p.t0 + us(300)) + ms(1),
        &out(&mut p.b, (p.t0 + us(300)) + ms(1)),
    );
    assert_eq!(p.a.state(), State::Closed);
    assert_eq!(p.a.error(), None);
}

fn rst(b: &Connection, seq: Seq) -> Seg {
    Seg {
        repr: EspRepr {
            src_port: PB,
            dst_port: PA,
            flags: Flags::RST,
            seq,
            ..Default::default()
        },
        payload: vec![],
    }
    .with_ack(b.rcv_nxt())
}

impl Seg {
    fn with_ack(mut self, ack: Seq) -> Seg {
        self.repr.ack = ack;
        self
    }
}

#[test]
fn rfc5961_rst_exact_resets_in_window_challenges_outside_drops() {
    let mut p = pair();
    let nxt = p.a.rcv_nxt();
    // In window but not exact: challenge ACK, the connection survives.
    deliver(&mut p.a, p.t0 + us(100), &[rst(&p.b, nxt.add(5))]);
    assert_eq!(p.a.state(), State::Established);
    let ch = out(&mut p.a, p.t0 + us(100));
    assert_eq!(ch.len(), 1);
    assert_eq!(ch[0].repr.flags, Flags::ACK);
    assert_eq!(ch[0].repr.ack, nxt);
    assert_eq!(p.a.stats().challenge_acks, 1);
    // Outside the window: silently dropped.
    deliver(&mut p.a, p.t0 + us(110), &[rst(&p.b, nxt.add(100_000))]);
    assert!(out(&mut p.a, p.t0 + us(110)).is_empty());
    deliver(&mut p.a, p.t0 + us(111), &[rst(&p.b, nxt.sub(1))]);
    assert!(out(&mut p.a, p.t0 + us(111)).is_empty());
    assert_eq!(p.a.state(), State::Established);
    // Exact: reset.
    deliver(&mut p.a, p.t0 + us(120), &[rst(&p.b, nxt)]);
    assert_eq!(p.a.state(), State::Closed);
    assert_eq!(p.a.error(), Some(ConnectionError::Reset));
    assert_eq!(
        p.a.recv(&mut [0u8; 4]),
        Err(Error::ConnectionLost(ConnectionError::Reset))
    );
    assert_eq!(
        p.a.send(b"x"),
        Err(Error::ConnectionLost(ConnectionError::Reset))
    );
}

#[test]
fn rfc5961_syn_in_established_draws_rate_limited_challenge_acks() {
    let mut p = pair();
    let syn = Seg {
        repr: EspRepr {
            src_port: PB,
            dst_port: PA,
            flags: Flags::SYN,
            seq: Seq(0xdead),
            ..Default::default()
        },
        payload: vec![],
    };
    let mut acks = 0;
    for i in 0..300 {
        deliver(&mut p.a, p.t0 + us(100 + i), std::slice::from_ref(&syn));
        acks += out(&mut p.a, p.t0 + us(100 + i)).len();
    }
    assert_eq!(p.a.state(), State::Established);
    assert_eq!(acks, 100, "at most challenge_ack_limit per second");
    // A second later the budget is back.
    deliver(&mut p.a, p.t0 + us(2_000_000), &[syn]);
    assert_eq!(out(&mut p.a, p.t0 + us(2_000_000)).len(), 1);
}

#[test]
fn syn_to_closed_port_draws_rst_and_connect_is_refused() {
    let t0 = Instant::now();
    let mut a = Connection::connect(
        &TransportConfig::default(),
        MTU,
        (A, PA),
        (B, 9),
        Seq(5),
        t0,
    );
    let syn = out(&mut a, t0);
    // Nobody listens on port 9 at B: the host's responder answers.
    let mut buf = [0u8; 128];
    let n = reset_frame(&mut buf, B, A, ETHERTYPE_ESP, &syn[0].repr).unwrap();
    let f = EspFrame::parse(&buf[..n], ETHERTYPE_ESP, 1514).unwrap();
    assert_eq!(f.header.flags, Flags::RST | Flags::ACK);
    assert_eq!(f.header.ack, Seq(6));
    assert_eq!(f.eth.dst, A);
    a.handle_segment(t0 + us(10), &f.header, f.payload);
    assert_eq!(a.state(), State::Closed);
    assert_eq!(a.error(), Some(ConnectionError::Refused));
    // An RST is never answered.
    let esp = f.header;
    assert!(reset_frame(&mut buf, A, B, ETHERTYPE_ESP, &esp).is_none());
}

#[test]
fn listener_answers_stray_segments_with_rst() {
    let t0 = Instant::now();
    let mut l: Listener<()> = Listener::new(TransportConfig::default(), MTU, (B, PB), isn());
    let stray = EspRepr {
        src_port: PA,
        dst_port: PB,
        flags: Flags::ACK,
        seq: Seq(10),
        ack: Seq(77),
        ..Default::default()
    };
    match l.on_segment(t0, 0, A, &stray, |_| false) {
        SynOutcome::Reset(r) => {
            assert_eq!(r.flags, Flags::RST);
            assert_eq!(r.seq, Seq(77));
        }
        o => panic!("{o:?}"),
    }
}

fn syn_from(port: u16) -> EspRepr {
    EspRepr {
        src_port: port,
        dst_port: PB,
        flags: Flags::SYN,
        seq: Seq(u32::from(port) * 1000),
        window: 64,
        ..Default::default()
    }
}

#[test]
fn full_backlog_drops_syn_until_accept() {
    let t0 = Instant::now();
    let cfg = TransportConfig {
        backlog: 2,
        ..Default::default()
    };
    let mut l: Listener<()> = Listener::new(cfg.clone(), MTU, (B, PB), isn());
    let mut clients = vec![];
    for port in [1001u16, 1002, 1003] {
        let mut c = Connection::connect(&cfg, MTU, (A, port), (B, PB), Seq(u32::from(port)), t0);
        let syn = out(&mut c, t0);
        match l.on_segment(t0, 0, A, &syn[0].repr, |_| false) {
            SynOutcome::Accept(mut s) => {
                deliver(&mut c, t0, &out(&mut s, t0));
                deliver(&mut s, t0, &out(&mut c, t0));
                assert_eq!(s.state(), State::Established);
                l.insert(*s, ());
            }
            SynOutcome::Drop(r) => {
                assert_eq!(port, 1003);
                assert_eq!(r, DropReason::BacklogFull);
            }
            o => panic!("{o:?}"),
        }
        clients.push(c);
    }
    assert_eq!(l.ready(), 2);
    assert_eq!(l.stats().syns_dropped, 1);
    // A repeated SYN of a queued connection is a duplicate, not a new one.
    assert!(matches!(
        l.on_segment(t0, 0, A, &syn_from(1001), |_| false),
        SynOutcome::Drop(DropReason::Duplicate)
    ));
    let first = l.accept().unwrap();
    assert_eq!(first.conn.remote(), (A, 1001));
    // The third client's retransmitted SYN now gets in.
    clients[2].handle_timeout(t0 + ms(10));
    let syn = out(&mut clients[2], t0 + ms(10));
    assert!(matches!(
        l.on_segment(t0 + ms(10), 0, A, &syn[0].repr, |_| false),
        SynOutcome::Accept(_)
    ));
}

#[test]
fn half_open_connections_are_bounded_and_reaped() {
    let t0 = Instant::now();
    let cfg = TransportConfig {
        max_half_open: 3,
        max_syn_retransmissions: 1,
        syn_cookies: false,
        ..Default::default()
    };
    let mut l: Listener<()> = Listener::new(cfg, MTU, (B, PB), isn());
    for port in 1..=3u16 {
        let SynOutcome::Accept(c) = l.on_segment(t0, 0, A, &syn_from(port), |_| false) else {
            panic!()
        };
        l.insert(*c, ());
    }
    assert!(matches!(
        l.on_segment(t0, 0, A, &syn_from(4), |_| false),
        SynOutcome::Drop(DropReason::HalfOpenFull)
    ));
    // Spoofed SYNs never complete: the SYN-ACKs time out and are reaped.
    let mut t = t0;
    for _ in 0..5 {
        for e in l.entries_mut() {
            out(&mut e.conn, t);
        }
        t += ms(100);
        for e in l.entries_mut() {
            e.conn.handle_timeout(t);
        }
    }
    for e in l.entries_mut() {
        out(&mut e.conn, t);
    }
    assert_eq!(l.reap().len(), 3);
    assert_eq!(l.half_open(), 0);
    assert!(matches!(
        l.on_segment(t, 0, A, &syn_from(4), |_| false),
        SynOutcome::Accept(_)
    ));
}

#[test]
fn old_incarnation_segments_are_rejected() {
    let g = IsnGenerator::with_key([1; 16]);
    let i1 = g.isn((A, PA), (B, PB), 1_000_000);
    let i2 = g.isn((A, PA), (B, PB), 1_000_000 + 4);
    let other = g.isn((A, PA + 1), (B, PB), 1_000_000);
    assert_eq!(i2, i1.add(1), "clock term: one tick per 4 us");
    assert!(
        other.diff(i1).unsigned_abs() > 1,
        "another port gives another ISN"
    );
    assert_ne!(
        IsnGenerator::with_key([2; 16]).isn((A, PA), (B, PB), 0),
        IsnGenerator::with_key([3; 16]).isn((A, PA), (B, PB), 0)
    );
    // A data segment of an earlier connection on the same ports is outside
    // the new connection's window: dropped, answered with an ACK.
    let mut p = pair();
    let old = Seg {
        repr: EspRepr {
            src_port: PB,
            dst_port: PA,
            flags: Flags::ACK,
            seq: p.a.rcv_nxt().add(0x4000_0000),
            ack: p.a.snd_nxt().sub(0x4000_0000),
            window: 10,
            ..Default::default()
        },
        payload: b"stale".to_vec(),
    };
    deliver(&mut p.a, p.t0 + us(100), &[old]);
    assert_eq!(p.a.recv_available(), 0);
    assert_eq!(p.a.stats().dropped, 1);
    assert_eq!(p.a.state(), State::Established);
}

#[test]
fn abort_sends_rst_and_peer_sees_reset() {
    let mut p = pair();
    p.a.send(b"unsent").unwrap();
    p.a.abort();
    let r = out(&mut p.a, p.t0 + us(100));
    assert_eq!(r.len(), 1);
    assert!(r[0].repr.flags.rst());
    deliver(&mut p.b, p.t0 + us(110), &r);
    assert_eq!(p.b.error(), Some(ConnectionError::Reset));
    assert_eq!(p.a.error(), Some(ConnectionError::Aborted));
    assert_eq!(
        p.a.send(b"x"),
        Err(Error::ConnectionLost(ConnectionError::Aborted))
    );
}

#[test]
fn keepalive_detects_a_silent_peer() {
    let mut p = thesis_pair();
    // The peer vanishes: keepalive after 1 s, then probes with backoff.
    let mut t = p.t0 + us(10);
    let mut probes = 0;
    while p.a.state() != State::Closed {
        t = p.a.poll_timeout().expect("a timer is armed");
        p.a.handle_timeout(t);
        probes += out(&mut p.a, t)
            .iter()
            .filter(|s| !s.repr.flags.rst())
            .count();
        assert!(t < (p.t0 + us(10)) + Duration::from_secs(10));
    }
    assert_eq!(probes, 8);
    assert_eq!(p.a.error(), Some(ConnectionError::TimedOut));
    assert!(t - (p.t0 + us(10)) < Duration::from_secs(3));
}

#[test]
fn keepalive_answered_keeps_the_connection() {
    let mut p = pair();
    let mut t = p.t0 + us(10);
    for _ in 0..5 {
        t = p.a.poll_timeout().unwrap();
        p.a.handle_timeout(t);
        let probe = out(&mut p.a, t);
        assert_eq!(probe.len(), 1);
        deliver(&mut p.b, t, &probe);
        deliver(&mut p.a, t, &out(&mut p.b, t));
    }
    assert_eq!(p.a.state(), State::Established);
    assert_eq!(p.a.stats().probes, 5);
    assert!(t >= (p.t0 + us(10)) + Duration::from_secs(5));
}

/// A segment from A to B as an off-path attacker (or a buggy A) would forge
/// it: ports and addresses right, sequence numbers chosen.
fn forged_to_b(flags: Flags, seq: Seq, ack: Seq, window: u16, payload: &[u8]) -> Seg {
    Seg {
        repr: EspRepr {
            src_port: PA,
            dst_port: PB,
            flags,
            seq,
            ack,
            window,
            payload_len: payload.len() as u16,
            ..Default::default()
        },
        payload: payload.to_vec(),
    }
}

/// Fuzz finding `esp_connection/data-accepted-after-forged-fin`: a FIN
/// queued out of order ends the stream when the gap fills; a data segment
/// after it must not reach the reader (RFC 9293 sec. 3.10.7.4, "seventh,
/// process the segment text": CLOSE-WAIT ignores segment text).
#[test]
fn no_data_after_a_received_fin_reaches_the_reader() {
    let mut p = pair();
    let base = p.b.rcv_nxt();
    let t = p.t0 + us(100);
    // A forged FIN|ACK ten segments ahead is queued out of order.
    let fin = forged_to_b(
        Flags::FIN | Flags::ACK,
        base.add(10),
        p.b.snd_una(),
        100,
        &[],
    );
    deliver(&mut p.b, t, &[fin]);
    assert_eq!(p.b.state(), State::Established);
    let _sack = out(&mut p.b, t);

    // A's ten segments fill the gap: B consumes the FIN, CLOSE_WAIT.
    let data: Vec<u8> = (0..10 * MSS).map(|i| (i / MSS) as u8).collect();
    assert_eq!(p.a.send(&data), Ok(data.len()));
    let segs = out(&mut p.a, t + us(10));
    assert_eq!(segs.len(), 10);
    deliver(&mut p.b, t + us(20), &segs);
    assert_eq!(p.b.state(), State::CloseWait);
    assert_eq!(p.b.rcv_nxt(), base.add(11));
    let _ = out(&mut p.b, t + us(20));

    // A's next data segment (seq = the FIN's + 1) is in the window, but its
    // text comes after the end of the stream: ignored, counted as dropped.
    let after = forged_to_b(
        Flags::ACK,
        base.add(11),
        p.b.snd_una(),
        100,
        b"after the FIN",
    );
    let dropped = p.b.stats().dropped;
    deliver(&mut p.b, t + us(30), std::slice::from_ref(&after));
    assert_eq!(p.b.recv_available(), data.len());
    assert_eq!(p.b.rcv_nxt(), base.add(11));
    assert_eq!(p.b.stats().dropped, dropped + 1);
    // A second FIN does not move the end of the stream either.
    let fin2 = forged_to_b(
        Flags::FIN | Flags::ACK,
        base.add(11),
        p.b.snd_una(),
        100,
        &[],
    );
    deliver(&mut p.b, t + us(40), &[fin2]);
    assert_eq!(p.b.rcv_nxt(), base.add(11));
    assert_eq!(p.b.state(), State::CloseWait);

    let mut buf = vec![0u8; data.len() + 100];
    assert_eq!(p.b.recv(&mut buf), Ok(data.len()));
    assert_eq!(&buf[..data.len()], &data[..]);
    assert_eq!(p.b.recv(&mut buf), Ok(0), "end of stream at the FIN");
    assert_eq!(p.b.stats().bytes_received, data.len() as u64);
}

/// A FIN whose sequence number lies at or below data already received out
/// of order would move the end of the stream backwards over that data: it
/// is dropped. A FIN after the stored data is queued, and data beyond a
/// queued FIN is not stored.
#[test]
fn fin_before_stored_data_does_not_end_the_stream() {
    let mut p = pair();
    let base = p.b.rcv_nxt();
    let t = p.t0 + us(100);
    let data: Vec<u8> = (0..4 * MSS).map(|i| (i / MSS) as u8 + 1).collect();
    p.a.send(&data).unwrap();
    p.a.close();
    let segs = out(&mut p.a, t);
    assert_eq!(segs.len(), 5);
    assert!(segs[4].repr.flags.fin());
    // Segments 1 and 3 arrive; 0 and 2 are late.
    deliver(&mut p.b, t + us(10), &[segs[1].clone(), segs[3].clone()]);
    let _sack = out(&mut p.b, t + us(10));
    let una = p.b.snd_una();
    // FIN at RCV.NXT (below both stored segments), in the hole at 2, on
    // the stored segment 3: each would cut off received data.
    for at in [base, base.add(2), base.add(3)] {
        let dropped = p.b.stats().dropped;
        let fin = forged_to_b(Flags::FIN | Flags::ACK, at, una, 100, &[]);
        deliver(&mut p.b, t + us(20), &[fin]);
        assert_eq!(p.b.state(), State::Established, "FIN at {at:?}");
        assert_eq!(p.b.stats().dropped, dropped + 1, "FIN at {at:?}");
    }
    let _ = out(&mut p.b, t + us(20));
    // A's real FIN, early (reordered), is queued after the data...
    deliver(&mut p.b, t + us(30), &segs[4..]);
    assert_eq!(p.b.stats().out_of_sequence, 3);
    // ... and nothing beyond it is stored.
    let beyond = forged_to_b(Flags::ACK, base.add(5), una, 100, b"beyond");
    let dropped = p.b.stats().dropped;
    deliver(&mut p.b, t + us(30), &[beyond]);
    assert_eq!(p.b.stats().dropped, dropped + 1);
    assert_eq!(p.b.stats().out_of_sequence, 3);
    let _ = out(&mut p.b, t + us(30));
    // The late segments complete the stream and the FIN ends it.
    deliver(&mut p.b, t + us(40), &[segs[2].clone(), segs[0].clone()]);
    assert_eq!(p.b.state(), State::CloseWait);
    assert_eq!(p.b.rcv_nxt(), base.add(5));
    let mut buf = vec![0u8; data.len() + 10];
    assert_eq!(p.b.recv(&mut buf), Ok(data.len()));
    assert_eq!(&buf[..data.len()], &data[..]);
    assert_eq!(p.b.recv(&mut buf), Ok(0));
}

/// Fuzz finding `esp_connection/ack-storm-after-forged-fin`: one forged
/// in-window FIN leaves B's RCV.NXT one past A's SND.NXT. B's ACKs then
/// acknowledge data A never sent and A's ACKs are old to B; answering each
/// with an ACK is an endless exchange (a livelock on a zero-delay link).
/// RFC 5961 sec. 5.2 and 7: the ACK for unsent data is a rate-limited
/// challenge ACK; B answers an old pure ACK at most once per instant.
#[test]
fn forged_fin_does_not_start_an_endless_ack_exchange() {
    let mut p = pair();
    let t = p.t0 + us(100);
    let fin = forged_to_b(
        Flags::FIN | Flags::ACK,
        p.b.rcv_nxt(),
        p.b.snd_una(),
        0,
        &[],
    );
    deliver(&mut p.b, t, &[fin]);
    assert_eq!(p.b.state(), State::CloseWait);
    assert_eq!(p.b.rcv_nxt(), p.a.snd_nxt().add(1));
    // Zero-delay link, one instant: move frames until both are quiet.
    let (mut from_a, mut from_b) = (0, 0);
    for round in 0.. {
        assert!(round < 1000, "ACK exchange does not end");
        let x = out(&mut p.b, t);
        deliver(&mut p.a, t, &x);
        let y = out(&mut p.a, t);
        deliver(&mut p.b, t, &y);
        from_b += x.len();
        from_a += y.len();
        if x.is_empty() && y.is_empty() {
            break;
        }
    }
    assert!(from_a <= 2 && from_b <= 3, "A sent {from_a}, B {from_b}");
    assert!(p.a.stats().challenge_acks >= 1);
    assert_eq!(p.a.state(), State::Established);
}

/// RFC 5961 sec. 5.2 with sec. 7 throttling: an ACK of data not yet sent
/// is dropped and draws at most `challenge_ack_limit` ACKs per second.
#[test]
fn ack_of_unsent_data_draws_rate_limited_challenge_acks() {
    let mut p = pair();
    let bogus = Seg {
        repr: EspRepr {
            src_port: PB,
            dst_port: PA,
            flags: Flags::ACK,
            seq: p.a.rcv_nxt(),
            ack: p.a.snd_nxt().add(1),
            window: 100,
            ..Default::default()
        },
        payload: vec![],
    };
    let mut acks = 0;
    for i in 0..300 {
        deliver(&mut p.a, p.t0 + us(100 + i), std::slice::from_ref(&bogus));
        acks += out(&mut p.a, p.t0 + us(100 + i)).len();
    }
    assert_eq!(p.a.snd_una(), p.a.snd_nxt());
    assert_eq!(acks, 100, "at most challenge_ack_limit per second");
    assert_eq!(p.a.stats().challenge_acks, 100);
    assert_eq!(p.a.stats().dropped, 300);
}

/// A pure ACK carries no new data and is not answered; an old one (a probe
/// or a reordered ACK) is answered, but at most once per instant, so two
/// ends that disagree about the sequence numbers cannot ping-pong ACKs.
#[test]
fn pure_acks_are_not_acknowledged_and_old_ones_rate_limited() {
    let mut p = pair();
    let t = p.t0 + us(100);
    let cur = forged_to_b(Flags::ACK, p.b.rcv_nxt(), p.b.snd_nxt(), 100, &[]);
    for _ in 0..10 {
        deliver(&mut p.b, t, std::slice::from_ref(&cur));
    }
    assert!(out(&mut p.b, t).is_empty(), "a pure ACK draws no ACK");
    let old = forged_to_b(Flags::ACK, p.b.rcv_nxt().sub(1), p.b.snd_nxt(), 100, &[]);
    let mut answers = 0;
    for _ in 0..10 {
        deliver(&mut p.b, t, std::slice::from_ref(&old));
        answers += out(&mut p.b, t).len();
    }
    assert_eq!(answers, 1, "one answer per instant");
    // A probe one RTO (here the 1 ms minimum) later is answered again.
    let t2 = t + ms(1);
    deliver(&mut p.b, t2, std::slice::from_ref(&old));
    let ack = out(&mut p.b, t2);
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].repr.ack, p.b.rcv_nxt());
}

#[test]
fn reordering_raises_the_duplicate_ack_threshold() {
    let mut p = pair();
    assert_eq!(p.a.stats().reordering, esp::conn::DUP_THRESH);
    p.a.send(&vec![5u8; MSS * 8]).unwrap();
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 8);
    // Segments 1..=4 are held back in the network: 0, 5 and 6 arrive first
    // (two SACKed segments: below the threshold, no retransmission).
    let mut t = 110;
    let mut step = |p: &mut Pair, i: usize| -> Vec<Seg> {
        t += 1;
        deliver(&mut p.b, p.t0 + us(t), std::slice::from_ref(&segs[i]));
        let acks = out(&mut p.b, p.t0 + us(t));
        deliver(&mut p.a, p.t0 + us(t + 1), &acks);
        out(&mut p.a, p.t0 + us(t + 1))
    };
    for i in [0, 5, 6, 1, 2, 3, 4, 7] {
        let sent = step(&mut p, i);
        assert!(sent.is_empty(), "nothing is resent: {sent:?}");
    }
    p.b.flush_delayed_ack();
    deliver(&mut p.a, p.t0 + us(200), &out(&mut p.b, p.t0 + us(200)));
    assert_eq!(p.a.snd_una(), p.a.snd_nxt());
    let s = p.a.stats();
    assert_eq!((s.retransmitted, s.fast_retransmits), (0, 0));
    // Segment 1 arrived after segments up to 6 were SACKed: reordered by 6.
    assert_eq!(s.reordering, 6);

    // A real loss is still repaired by fast retransmit, once more than 3
    // segments above the hole are SACKed.
    p.a.send(&vec![6u8; MSS * 16]).unwrap();
    let segs = out(&mut p.a, p.t0 + us(300));
    // The threshold is bounded by half the flight (cwnd-limited here).
    let thresh = 6.min((segs.len() / 2).max(3));
    assert!(thresh > 3, "flight of {} too short to show it", segs.len());
    let mut resent = Vec::new();
    for (i, s) in segs.iter().enumerate().skip(1) {
        let now = p.t0 + us(310 + i as u64);
        deliver(&mut p.b, now, std::slice::from_ref(s));
        let acks = out(&mut p.b, now);
        deliver(&mut p.a, now, &acks);
        // New data may follow as SACKs free the pipe: count resends only.
        let last = segs.last().unwrap().repr.seq;
        let re: Vec<Seg> = out(&mut p.a, now)
            .into_iter()
            .filter(|r| r.repr.seq.diff(last) <= 0)
            .collect();
        if i < thresh {
            assert!(re.is_empty(), "{i} SACKed above the hole: not yet lost");
        }
        resent.extend(re);
    }
    assert_eq!(resent.len(), 1, "one retransmission: {resent:?}");
    assert_eq!(resent[0].repr.seq, segs[0].repr.seq);
    assert_eq!(p.a.stats().fast_retransmits, 1);
}

#[test]
fn gathered_frames_equal_copied_frames() {
    // Two identical connections: one emits whole frames, the other headers
    // plus payload slices of its send buffer; the bytes must be the same,
    // also when a segment's payload wraps around the buffer's end.
    let mut p = pair();
    let mut q = pair();
    let mut wrapped = 0;
    let mut t = 100;
    let mut held: [Option<Vec<u8>>; 2] = [None, None];
    for round in 0..6u8 {
        let len = MSS * 7 + 333 + 777 * round as usize;
        let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ round).collect();
        p.a.send(&data).unwrap();
        q.a.send(&data).unwrap();
        t += 100;
        let now = p.t0 + us(t);
        let copied = {
            let mut buf = [0u8; MTU + 14];
            let mut v = Vec::new();
            while let Some(n) = p.a.poll_transmit(now, &mut buf) {
                v.push(buf[..n].to_vec());
            }
            v
        };
        let qnow = q.t0 + us(t);
        let mut gathered = Vec::new();
        let mut hdr = [0u8; MTU + 14];
        while let Some(f) = q.a.poll_transmit_gather(qnow, &mut hdr) {
            let (x, y) = q.a.payload(f.payload_off, f.payload_len);
            assert_eq!(x.len() + y.len(), f.payload_len);
            if !x.is_empty() && !y.is_empty() {
                wrapped += 1;
            }
            let mut frame = hdr[..f.header_len].to_vec();
            frame.extend_from_slice(x);
            frame.extend_from_slice(y);
            gathered.push(frame);
        }
        assert_eq!(copied.len(), gathered.len(), "round {round}");
        for (c, g) in copied.iter().zip(&gathered) {
            assert_eq!(c, g, "round {round}: frames differ");
            EspFrame::parse(g, ETHERTYPE_ESP, MTU + 14).expect("checksum and layout valid");
        }
        // Acknowledge all but the last segment (delivered next round), so
        // the send buffer never empties and its contents wrap around.
        let withheld = [copied.last().cloned(), gathered.last().cloned()];
        let (pc, qc) = (&copied[..copied.len() - 1], &gathered[..gathered.len() - 1]);
        for (k, (pair, frames)) in [(&mut p, pc), (&mut q, qc)].into_iter().enumerate() {
            let now = pair.t0 + us(t + 10);
            let late = held[k].take();
            held[k] = withheld[k].clone();
            for f in late.iter().chain(frames) {
                let s = EspFrame::parse(f, ETHERTYPE_ESP, MTU + 14).unwrap();
                pair.b.handle_segment(now, &s.header, s.payload);
            }
            pair.b.flush_delayed_ack();
            let acks = out(&mut pair.b, now);
            deliver(&mut pair.a, now, &acks);
            let mut sink = vec![0u8; MSS * 16];
            while pair.b.recv(&mut sink).is_ok_and(|n| n > 0) {}
        }
    }
    assert!(wrapped > 0, "no payload wrapped around the send buffer");
}

#[test]
fn no_reordering_is_inferred_at_any_initial_sequence_number() {
    // The SACK high-water mark starts at the ISS: an ISN on either side of
    // the sequence space midpoint must not look like a reordered head.
    for iss in [Seq(1), Seq(0x7fff_fff0), Seq(0x8000_0010), Seq(0xffff_fff0)] {
        let t0 = Instant::now();
        let cfg = TransportConfig::default();
        let (mut a, mut b) = syn_received(&cfg, cfg.clone(), iss, t0, Duration::ZERO);
        deliver(&mut a, t0 + us(5), &out(&mut b, t0 + us(5)));
        deliver(&mut b, t0 + us(10), &out(&mut a, t0 + us(10)));
        a.send(&vec![1u8; MSS * 4]).unwrap();
        deliver(&mut b, t0 + us(20), &out(&mut a, t0 + us(20)));
        b.flush_delayed_ack();
        deliver(&mut a, t0 + us(30), &out(&mut b, t0 + us(30)));
        assert_eq!(a.snd_una(), a.snd_nxt(), "iss {iss:?}");
        assert_eq!(a.stats().reordering, esp::conn::DUP_THRESH, "iss {iss:?}");
    }
}

#[test]
fn dsack_of_a_network_duplicate_does_not_undo_recovery() {
    // Only a DSACK for a segment that was retransmitted shows a spurious
    // retransmission (RFC 3708); a duplicate the network made proves
    // nothing. (Undoing on it cancelled real loss recovery: with 5 %
    // duplication the sender fell back to backed-off timeouts.)
    let mut p = pair();
    p.a.send(&vec![7u8; MSS * 10]).unwrap();
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 10);
    let cwnd_before = p.a.cwnd();
    let mut t = 110;
    let mut hop = |p: &mut Pair, s: &Seg| -> Vec<Seg> {
        t += 2;
        deliver(&mut p.b, p.t0 + us(t), std::slice::from_ref(s));
        let acks = out(&mut p.b, p.t0 + us(t));
        deliver(&mut p.a, p.t0 + us(t + 1), &acks);
        out(&mut p.a, p.t0 + us(t + 1))
    };
    let mut resent = Vec::new();
    for i in [0, 1, 2, 3, 4, 6, 7, 8] {
        resent.extend(hop(&mut p, &segs[i]));
    }
    // Segment 5 was lost: resent once, by fast retransmit.
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].repr.seq, segs[5].repr.seq);
    assert!(p.a.cwnd() < cwnd_before, "cwnd reduced");
    let reduced = p.a.cwnd();
    hop(&mut p, &resent[0]);
    // The network duplicates segment 6 (already delivered): a DSACK.
    hop(&mut p, &segs[6]);
    let s = p.a.stats();
    assert_eq!(
        s.spurious, 0,
        "a network duplicate is not a spurious retransmission"
    );
    assert!(p.a.cwnd() <= reduced + 2, "no undo: cwnd {}", p.a.cwnd());
}

// ------------------------------------------------- zero-copy receive path

/// Delivers `segs` to `c` with `handle_segment_into`, each into a fresh
/// reader buffer of `room` bytes; returns the bytes placed.
fn deliver_into(c: &mut Connection, now: Instant, segs: &[Seg], room: usize) -> Vec<u8> {
    let mut placed = Vec::new();
    for s in segs {
        let mut dst = vec![0u8; room];
        let n = c.handle_segment_into(now, &s.repr, &s.payload, &mut dst);
        assert!(n <= room.min(s.payload.len()));
        placed.extend_from_slice(&dst[..n]);
    }
    placed
}

#[test]
fn segment_into_places_in_order_payload_and_acks_as_after_recv() {
    // Twin connections: one receives with handle_segment + recv, the other
    // with handle_segment_into; what they send afterwards must be equal.
    // A receive buffer of 4 segments makes every read open the window
    // enough for an update (RFC 1122 receiver-side SWS avoidance).
    let small = || TransportConfig {
        recv_buffer: 4 * MSS,
        ..Default::default()
    };
    let mut x = established(TransportConfig::default(), small());
    let mut y = established(TransportConfig::default(), small());
    let msg: Vec<u8> = (0..3 * MSS as u32).map(|i| (i % 251) as u8).collect();
    x.a.send(&msg).unwrap();
    y.a.send(&msg).unwrap();
    let sx = out(&mut x.a, x.t0 + us(100));
    let sy = out(&mut y.a, y.t0 + us(100));
    assert_eq!(sx.len(), 3);
    let mut got_x = Vec::new();
    let mut got_y = Vec::new();
    for (k, (a, b)) in sx.iter().zip(&sy).enumerate() {
        let t = us(110 + k as u64);
        deliver(&mut x.b, x.t0 + t, std::slice::from_ref(a));
        let mut buf = vec![0u8; 2 * MSS];
        let n = x.b.recv(&mut buf).unwrap();
        got_x.extend_from_slice(&buf[..n]);
        got_y.extend(deliver_into(
            &mut y.b,
            y.t0 + t,
            std::slice::from_ref(b),
            2 * MSS,
        ));
        assert_eq!(
            y.b.recv_available(),
            0,
            "nothing left in the receive buffer"
        );
        let (ox, oy) = (out(&mut x.b, x.t0 + t), out(&mut y.b, y.t0 + t));
        assert_eq!(
            ox.iter().map(|s| s.repr).collect::<Vec<_>>(),
            oy.iter().map(|s| s.repr).collect::<Vec<_>>(),
            "segment {k}: same ACKs and windows"
        );
        assert_eq!(
            x.b.poll_timeout().map(|d| d - x.t0),
            y.b.poll_timeout().map(|d| d - y.t0)
        );
    }
    assert_eq!(got_x, msg);
    assert_eq!(got_y, msg);
    assert_eq!(x.b.stats(), y.b.stats());
    assert_eq!(y.b.recv(&mut [0u8; 8]), Err(Error::Blocked));
}

#[test]
fn segment_into_partial_fit_buffers_the_rest_in_order() {
    let mut p = pair();
    p.a.send(&[7u8; 100]).unwrap();
    p.a.send(&[8u8; 50]).unwrap();
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 1);
    let placed = deliver_into(&mut p.b, p.t0 + us(110), &segs, 40);
    assert_eq!(placed, vec![7u8; 40]);
    assert_eq!(p.b.recv_available(), 110);
    // Data is waiting now: the next segment is buffered behind it, none
    // placed, so the reader sees the bytes in order.
    p.a.send(&[9u8; 10]).unwrap();
    let more = out(&mut p.a, p.t0 + us(120));
    assert!(deliver_into(&mut p.b, p.t0 + us(130), &more, 1000).is_empty());
    let mut buf = [0u8; 200];
    assert_eq!(p.b.recv(&mut buf), Ok(120));
    assert_eq!(&buf[..60], &[7u8; 60][..]);
    assert_eq!(&buf[60..110], &[8u8; 50][..]);
    assert_eq!(&buf[110..120], &[9u8; 10][..]);
    assert_eq!(p.b.stats().bytes_received, 160);
}

#[test]
fn segment_into_out_of_order_goes_to_the_buffer_and_the_gap_fill_is_placed() {
    let mut p = pair();
    let msg: Vec<u8> = (0..2 * MSS as u32).map(|i| (i % 253) as u8).collect();
    p.a.send(&msg).unwrap();
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 2);
    // The second segment first: out of order, nothing placed, SACKed.
    assert!(deliver_into(&mut p.b, p.t0 + us(110), &segs[1..], 4 * MSS).is_empty());
    let sack = out(&mut p.b, p.t0 + us(110));
    assert_eq!(sack.len(), 1);
    assert_eq!(sack[0].repr.sack.as_slice(), &[(Seq(1002), Seq(1003))]);
    // The gap fill: its own payload is placed; the stored segment becomes
    // in order and waits in the receive buffer.
    let placed = deliver_into(&mut p.b, p.t0 + us(120), &segs[..1], 4 * MSS);
    assert_eq!(placed, &msg[..MSS]);
    assert_eq!(p.b.recv_available(), MSS);
    let ack = out(&mut p.b, p.t0 + us(120));
    assert_eq!(ack.len(), 1, "a gap fill is acknowledged at once");
    assert_eq!(ack[0].repr.ack, Seq(1003));
    let mut buf = vec![0u8; 2 * MSS];
    assert_eq!(p.b.recv(&mut buf), Ok(MSS));
    assert_eq!(&buf[..MSS], &msg[MSS..]);
}

#[test]
fn segment_into_fin_places_nothing_and_ends_the_stream() {
    let mut p = pair();
    p.a.send(b"last").unwrap();
    p.a.close();
    let segs = out(&mut p.a, p.t0 + us(100));
    assert_eq!(segs.len(), 2);
    assert!(segs[1].repr.flags.fin());
    let placed = deliver_into(&mut p.b, p.t0 + us(110), &segs, 64);
    assert_eq!(placed, b"last");
    assert_eq!(p.b.state(), State::CloseWait);
    assert!(p.b.is_eof());
    assert_eq!(p.b.recv(&mut [0u8; 8]), Ok(0), "EOF");
    // The FIN's ACK goes at once and closes A's side.
    deliver(&mut p.a, p.t0 + us(120), &out(&mut p.b, p.t0 + us(110)));
    assert_eq!(p.a.state(), State::FinWait2);
    // An empty reader buffer is handle_segment.
    let mut q = pair();
    q.a.send(b"x").unwrap();
    let s = out(&mut q.a, q.t0 + us(100));
    assert!(deliver_into(&mut q.b, q.t0 + us(110), &s, 0).is_empty());
    assert_eq!(q.b.recv_available(), 1);
}

#[test]
fn thesis_rto_timeout_conn_kills_once_the_doubled_rto_passes_the_maximum() {
    // Thesis ch. 5.2.8: RTO = 2 x SRTT within [min, max], ESP_DOUBLE_RTO
    // doubling, ESP_TIMEOUT_CONN death once the doubled RTO exceeds max
    // (before the retransmission limit).
    use esp::config::RtoConfig;
    let cfg = TransportConfig {
        rto: RtoConfig::thesis(ms(10), ms(1), ms(8), true, true),
        max_retransmissions: 100,
        ..Default::default()
    };
    let mut p = established(cfg.clone(), cfg);
    // SRTT 10 us from the handshake: 2 x SRTT is below the 1 ms minimum.
    assert_eq!(p.a.rtt().rto(), ms(1));
    p.a.send(b"lost").unwrap();
    let mut t = p.t0 + us(100);
    assert_eq!(out(&mut p.a, t).len(), 1);
    let mut gaps = vec![];
    while p.a.error().is_none() {
        let next = p.a.poll_timeout().unwrap();
        gaps.push((next - t).as_millis() as u64);
        t = next;
        p.a.handle_timeout(t);
        out(&mut p.a, t);
    }
    // 1, 2, 4, 8 ms; the next doubling (16 ms) passes the 8 ms maximum.
    assert_eq!(gaps, vec![1, 2, 4, 8]);
    assert_eq!(p.a.error(), Some(ConnectionError::TimedOut));
}

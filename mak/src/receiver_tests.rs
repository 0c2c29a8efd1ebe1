//! Traces of the receiver at explicit instants (smoltcp style).

use super::*;
use crate::reassembly::{DropReason, Message};
use crate::wire::DATA_HEADER_LEN;

const G: GroupId = GroupId(5);
const SRC: u8 = 0;
const ME: u16 = 1;

fn at(t0: Instant, us: u64) -> Instant {
    t0 + Duration::from_micros(us)
}

/// W = 8, 100-byte payloads, Dmax = 100 us, Ts = 1 ms, K = 3, no min_silence.
fn cfg(strategy: Strategy) -> Config {
    Config {
        strategy,
        window: 8,
        mtu: DATA_HEADER_LEN + 100,
        nak_delay_max: Duration::from_micros(100),
        suppression: Duration::from_millis(1),
        max_expiries: 3,
        min_silence: Duration::ZERO,
        ..Config::default()
    }
}

fn receiver(cfg: Config, seed: u64) -> Receiver<u8> {
    Receiver::new(cfg, G, MemberId(ME), Member::new(0, SRC), Seq(0), seed).unwrap()
}

/// Feeds DATA `seq` of a stream of one-packet... messages: each packet is
/// message `seq` of 1 byte (value `seq`) unless `flags` says otherwise.
fn data(r: &mut Receiver<u8>, now: Instant, seq: u32, flags: Flags) {
    let payload = [seq as u8];
    let f = Repr::Data {
        header: Header {
            strategy: r.cfg.strategy,
            group: G,
            source: MemberId(0),
            member: MemberId(0),
        },
        flags: flags.union(Flags::START).union(Flags::END),
        seq: Seq(seq),
        msg: seq,
        msg_len: 1,
        payload: &payload,
    };
    let mut b = vec![0u8; f.frame_len()];
    f.emit(&mut b);
    r.handle_frame(now, SRC, &b);
}

fn overheard_nak(r: &mut Receiver<u8>, now: Instant, member: u16, list: &[u32]) {
    let list: Vec<Seq> = list.iter().map(|&x| Seq(x)).collect();
    let f = Repr::Nak {
        header: Header {
            strategy: r.cfg.strategy,
            group: G,
            source: MemberId(0),
            member: MemberId(member),
        },
        cum: Seq(0),
        missing: SeqList::Slice(&list),
    };
    let mut b = vec![0u8; f.frame_len()];
    f.emit(&mut b);
    r.handle_frame(now, member as u8, &b);
}

#[derive(Debug, PartialEq, Eq)]
enum Out {
    Ack(Dest<u8>, u32),
    Nak(Dest<u8>, Vec<u32>),
}

fn drain(r: &mut Receiver<u8>, now: Instant) -> Vec<Out> {
    let mut buf = vec![0u8; r.cfg.mtu];
    let mut out = Vec::new();
    while let Some(t) = r.poll_transmit(now, &mut buf) {
        match Repr::parse(&buf[..t.len]).unwrap() {
            Repr::Ack { header, seq } => {
                assert_eq!((header.member, header.source), (MemberId(ME), MemberId(0)));
                out.push(Out::Ack(t.dest, seq.0))
            }
            Repr::Nak { missing, .. } => {
                out.push(Out::Nak(t.dest, missing.iter().map(|s| s.0).collect()))
            }
            d => panic!("a receiver sent {d:?}"),
        }
    }
    out
}

fn delivered(r: &mut Receiver<u8>) -> Vec<u32> {
    std::iter::from_fn(|| r.poll_event())
        .map(|e| match e {
            ReceiverEvent::Message(Message { msg, data }) => {
                assert_eq!(data, [msg as u8]);
                msg
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

const REQ: Flags = Flags::ACK_REQ;
const LAST: Flags = Flags::ACK_REQ.union(Flags::LAST);

#[test]
fn in_order_packets_are_delivered_and_an_ack_request_acknowledged() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 1);
    data(&mut r, t0, 0, Flags::empty());
    assert!(drain(&mut r, t0).is_empty(), "no ACK unless asked");
    data(&mut r, t0, 1, REQ);
    assert_eq!(drain(&mut r, t0), [Out::Ack(Dest::Member(SRC), 1)]);
    assert_eq!(delivered(&mut r), [0, 1]);
    // The source resends the request (our ACK was lost): ACK again.
    data(&mut r, at(t0, 1000), 1, REQ.union(Flags::RETX));
    assert_eq!(
        drain(&mut r, at(t0, 1000)),
        [Out::Ack(Dest::Member(SRC), 1)]
    );
    assert!(delivered(&mut r).is_empty(), "delivered once");
    let st = r.stats();
    assert_eq!((st.duplicates, st.acks_sent, st.retx_received), (1, 2, 1));
    assert_eq!(r.state(), ReceiverState::Receiving);
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn a_gap_is_naked_after_the_random_delay() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 7);
    data(&mut r, t0, 0, Flags::empty());
    data(&mut r, at(t0, 10), 3, LAST);
    assert_eq!(r.state(), ReceiverState::Waiting);
    assert_eq!(r.missing(), [Seq(1), Seq(2)]);
    assert!(
        drain(&mut r, at(t0, 10)).is_empty(),
        "no ACK with a gap below the request"
    );
    let tr = r.poll_timeout().expect("Tr armed");
    assert!(tr >= at(t0, 10) && tr <= at(t0, 110), "Tr in [0, Dmax]");
    // Same seed, same delay (deterministic); another seed, another delay.
    let mut twin = receiver(cfg(Strategy::Mak), 7);
    let mut other = receiver(cfg(Strategy::Mak), 8);
    for x in [&mut twin, &mut other] {
        data(x, t0, 0, Flags::empty());
        data(x, at(t0, 10), 3, LAST);
    }
    assert_eq!(twin.poll_timeout(), Some(tr));
    assert_ne!(other.poll_timeout(), Some(tr));

    r.handle_timeout(tr - Duration::from_nanos(1));
    assert!(drain(&mut r, tr).is_empty(), "not before Tr");
    r.handle_timeout(tr);
    assert_eq!(drain(&mut r, tr), [Out::Nak(Dest::Group, vec![1, 2])]);
    assert_eq!(r.stats().naks_sent, 1);
    // The retransmissions arrive: FIX, then the ACK covering the request.
    data(&mut r, tr + Duration::from_micros(20), 1, Flags::RETX);
    assert!(drain(&mut r, tr).is_empty());
    data(&mut r, tr + Duration::from_micros(21), 2, Flags::RETX);
    assert_eq!(drain(&mut r, tr), [Out::Ack(Dest::Member(SRC), 3)]);
    assert_eq!(delivered(&mut r), [0, 1, 2, 3]);
    assert_eq!(r.state(), ReceiverState::Receiving);
    assert_eq!(r.poll_timeout(), None, "Tr stopped with E empty");
    assert_eq!(r.stats().fixed, 2);
}

#[test]
fn an_overheard_nak_suppresses_ours() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 3);
    data(&mut r, t0, 0, Flags::empty());
    data(&mut r, t0, 3, Flags::empty());
    let tr = r.poll_timeout().unwrap();
    // Another receiver naks 1 and 2 before our Tr: ours is cancelled.
    overheard_nak(&mut r, t0, 2, &[1, 2]);
    r.handle_timeout(tr);
    assert!(drain(&mut r, tr).is_empty());
    let st = r.stats();
    assert_eq!(
        (st.naks_suppressed, st.naks_sent, st.nak_entries_suppressed),
        (1, 0, 2)
    );
    assert_eq!(
        r.missing(),
        [Seq(1), Seq(2)],
        "still missing, only not naked"
    );
    // The retransmissions were lost for us too: after Ts (+ a random delay)
    // we nak ourselves.
    let again = r.poll_timeout().unwrap();
    assert!(
        again >= at(t0, 1000) && again <= at(t0, 1100),
        "{:?}",
        again - t0
    );
    r.handle_timeout(again);
    assert_eq!(drain(&mut r, again), [Out::Nak(Dest::Group, vec![1, 2])]);
}

#[test]
fn an_overheard_nak_shrinks_ours_as_in_the_paper() {
    // Paper §3.1: Recv-1 would send nak[2,4,5]; Recv-2's nak of packet 4
    // turns it into nak[1,5].
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 4);
    for s in [0, 1, 2, 3, 6] {
        data(&mut r, t0, s, Flags::empty());
    }
    assert_eq!(r.missing(), [Seq(4), Seq(5)]);
    overheard_nak(&mut r, t0, 2, &[4]);
    let tr = r.poll_timeout().unwrap();
    r.handle_timeout(tr);
    assert_eq!(drain(&mut r, tr), [Out::Nak(Dest::Group, vec![5])]);
    // Our own NAK coming back (multicast loopback) suppresses nothing.
    overheard_nak(&mut r, tr, ME, &[5]);
    assert_eq!(r.stats().naks_overheard, 1);
}

#[test]
fn a_new_gap_gets_its_own_delay_while_old_entries_are_suppressed() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 5);
    data(&mut r, t0, 1, Flags::empty());
    overheard_nak(&mut r, t0, 2, &[0]);
    assert!(r.poll_timeout().unwrap() <= at(t0, 100));
    let tr = r.poll_timeout().unwrap();
    r.handle_timeout(tr);
    assert!(drain(&mut r, tr).is_empty());
    assert!(r.poll_timeout().unwrap() >= at(t0, 1000));
    // Packet 3 shows that 2 is missing too: naked within Dmax, not after Ts.
    data(&mut r, at(t0, 200), 3, Flags::empty());
    let tr2 = r.poll_timeout().unwrap();
    assert!(tr2 <= at(t0, 300));
    r.handle_timeout(tr2);
    assert_eq!(drain(&mut r, tr2), [Out::Nak(Dest::Group, vec![2])]);
}

#[test]
fn a_silent_source_is_reported_after_k_rounds() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 6);
    data(&mut r, t0, 1, Flags::empty());
    let mut naks = 0;
    let mut now = t0;
    while let Some(t) = r.poll_timeout() {
        now = t;
        r.handle_timeout(now);
        naks += drain(&mut r, now).len();
        assert!(naks < 10);
    }
    assert_eq!(naks, 3, "K rounds");
    assert!(now >= at(t0, 2000), "rounds spaced by Ts");
    assert_eq!(
        r.poll_event(),
        Some(ReceiverEvent::SenderSilent {
            first_missing: Seq(0)
        })
    );
    // New data (the source is back): naking resumes, no second report.
    data(&mut r, at(t0, 9000), 2, Flags::empty());
    let t = r.poll_timeout().unwrap();
    r.handle_timeout(t);
    assert_eq!(drain(&mut r, t), [Out::Nak(Dest::Group, vec![0])]);
    assert_eq!(r.poll_event(), None);
}

#[test]
fn data_beyond_the_window_means_abandoned() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 1);
    data(&mut r, t0, 1, Flags::empty());
    data(&mut r, t0, 8, Flags::empty()); // next = 0, W = 8
    assert_eq!(r.state(), ReceiverState::Abandoned);
    assert_eq!(
        r.poll_event(),
        Some(ReceiverEvent::Abandoned {
            first_missing: Seq(0)
        })
    );
    data(&mut r, t0, 0, Flags::empty());
    assert_eq!(
        r.poll_event(),
        None,
        "nothing delivered out of a broken stream"
    );
    assert_eq!(r.poll_timeout(), None);
    assert_eq!(r.stats().beyond_window, 1);
}

#[test]
fn nak_baseline_naks_at_once_by_unicast_and_never_acks() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Nak), 1);
    data(&mut r, t0, 0, Flags::empty());
    data(&mut r, t0, 3, LAST);
    assert_eq!(drain(&mut r, t0), [Out::Nak(Dest::Member(SRC), vec![1, 2])]);
    // Another gap: naked at once too, only the new entry.
    data(&mut r, at(t0, 5), 5, LAST);
    assert_eq!(
        drain(&mut r, at(t0, 5)),
        [Out::Nak(Dest::Member(SRC), vec![4])]
    );
    // Nobody else's NAK is heard under NAK (they are unicast).
    overheard_nak(&mut r, at(t0, 6), 2, &[1]);
    assert_eq!(r.stats().ignored, 1);
    // A lost retransmission is naked again after Ts.
    assert_eq!(r.poll_timeout(), Some(at(t0, 1000)));
    r.handle_timeout(at(t0, 1000));
    assert_eq!(
        drain(&mut r, at(t0, 1000)),
        [Out::Nak(Dest::Member(SRC), vec![1, 2])]
    );
    for s in [1, 2, 4] {
        data(&mut r, at(t0, 1010), s, Flags::RETX);
    }
    assert_eq!(drain(&mut r, at(t0, 1010)), [], "no ACKs under NAK");
    assert_eq!(delivered(&mut r), [0, 1, 2, 3, 4, 5]);
}

#[test]
fn a_full_receive_buffer_holds_packets_and_acks() {
    let t0 = Instant::now();
    let mut c = cfg(Strategy::Mak);
    c.max_message_bytes = 1;
    c.recv_buffer_bytes = 2 * (1 + 64); // two queued one-byte messages
    let mut r = receiver(c, 1);
    for s in 0..3 {
        data(&mut r, t0, s, if s == 2 { REQ } else { Flags::empty() });
    }
    assert!(
        drain(&mut r, t0).is_empty(),
        "packet 2 is held, not acknowledged"
    );
    assert_eq!(r.next_expected(), Seq(2));
    assert_eq!(r.stats().buffer_full, 1);
    assert!(matches!(r.poll_event(), Some(ReceiverEvent::Message(m)) if m.msg == 0));
    // Reading made room: packet 2 is consumed and acknowledged.
    assert_eq!(drain(&mut r, t0), [Out::Ack(Dest::Member(SRC), 2)]);
    assert_eq!(delivered(&mut r), [1, 2]);
}

#[test]
fn messages_are_reassembled_and_bad_ones_reported() {
    let t0 = Instant::now();
    let mut c = cfg(Strategy::Mak);
    c.max_message_bytes = 150;
    let mut r = receiver(c, 1);
    let hdr = Header {
        strategy: Strategy::Mak,
        group: G,
        source: MemberId(0),
        member: MemberId(0),
    };
    let mut seq = 0;
    let mut feed = |r: &mut Receiver<u8>, flags: Flags, msg: u32, msg_len: u32, p: &[u8]| {
        let f = Repr::Data {
            header: hdr,
            flags,
            seq: Seq(seq),
            msg,
            msg_len,
            payload: p,
        };
        seq += 1;
        let mut b = vec![0u8; f.frame_len()];
        f.emit(&mut b);
        r.handle_frame(t0, SRC, &b);
    };
    // A 150-byte message in two packets, fed out of order.
    let m: Vec<u8> = (0..150).map(|i| i as u8).collect();
    feed(&mut r, Flags::START, 0, 150, &m[..100]);
    feed(&mut r, Flags::END, 0, 150, &m[100..]);
    // Too large for this receiver: reported, skipped.
    feed(&mut r, Flags::START, 1, 200, &[0; 100]);
    feed(&mut r, Flags::END, 1, 200, &[0; 100]);
    // A continuation without a start: reported.
    feed(&mut r, Flags::END, 2, 5, &[1; 5]);
    // Shorter than announced: reported.
    feed(&mut r, Flags::START, 3, 50, &[1; 10]);
    feed(&mut r, Flags::END, 3, 50, &[1; 10]);
    let ev: Vec<_> = std::iter::from_fn(|| r.poll_event()).collect();
    let dropped = |msg, len, reason| ReceiverEvent::MessageDropped { msg, len, reason };
    assert_eq!(
        ev,
        [
            ReceiverEvent::Message(Message { msg: 0, data: m }),
            dropped(1, 200, DropReason::TooLarge),
            dropped(2, 5, DropReason::Inconsistent),
            dropped(3, 50, DropReason::Inconsistent),
        ]
    );
    assert_eq!(r.stats().messages_dropped, 3);
}

#[test]
fn forged_and_foreign_frames_change_nothing() {
    let t0 = Instant::now();
    let mut r = receiver(cfg(Strategy::Mak), 1);
    let f = Repr::Data {
        header: Header {
            strategy: Strategy::Mak,
            group: G,
            source: MemberId(0),
            member: MemberId(0),
        },
        flags: Flags::START.union(Flags::END),
        seq: Seq(0),
        msg: 0,
        msg_len: 1,
        payload: &[1],
    };
    let mut b = vec![0u8; f.frame_len()];
    f.emit(&mut b);
    r.handle_frame(t0, 9, &b); // our source's id from another address
    assert_eq!(r.stats().forged, 1);
    b[5] = 6; // another group
    r.handle_frame(t0, SRC, &b);
    b[5] = 5;
    b[3] = Strategy::Ack as u8; // another strategy
    r.handle_frame(t0, SRC, &b);
    assert_eq!(r.stats().foreign, 2);
    r.handle_frame(t0, SRC, &b[..10]);
    assert_eq!(r.stats().malformed, 1);
    assert_eq!(r.next_expected(), Seq(0));
    assert_eq!(r.poll_event(), None);
}

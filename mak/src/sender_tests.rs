//! Traces of the sender at explicit instants (smoltcp style).

use std::time::Duration;

use super::*;
use crate::wire::{SeqList, DATA_HEADER_LEN};

const G: GroupId = GroupId(5);
const ME: MemberId = MemberId(0);

fn at(t0: Instant, us: u64) -> Instant {
    t0 + Duration::from_micros(us)
}

/// W = 4, 100-byte payloads, Tw = 1 ms, δ = 100 us, K = 3, no min_silence.
fn cfg(strategy: Strategy) -> Config {
    Config {
        strategy,
        window: 4,
        mtu: DATA_HEADER_LEN + 100,
        ack_timeout: Duration::from_millis(1),
        resend_dedup: Duration::from_micros(100),
        max_expiries: 3,
        min_silence: Duration::ZERO,
        ..Config::default()
    }
}

fn sender(cfg: Config, n: u8) -> Sender<u8> {
    let members = (1..=n).map(|i| Member::new(u16::from(i), i)).collect();
    Sender::new(cfg, G, ME, members, Seq(0)).unwrap()
}

/// What a DATA frame said, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Out {
    dest: Dest<u8>,
    seq: u32,
    flags: Flags,
    msg: u32,
    len: usize,
}

fn drain(s: &mut Sender<u8>, now: Instant) -> Vec<Out> {
    let mut buf = vec![0u8; s.config().mtu];
    let mut out = Vec::new();
    while let Some(t) = s.poll_transmit(now, &mut buf) {
        match Repr::parse(&buf[..t.len]).unwrap() {
            Repr::Data {
                flags,
                seq,
                msg,
                payload,
                header,
                ..
            } => {
                assert_eq!((header.group, header.source, header.member), (G, ME, ME));
                out.push(Out {
                    dest: t.dest,
                    seq: seq.0,
                    flags,
                    msg,
                    len: payload.len(),
                })
            }
            other => panic!("a sender sent {other:?}"),
        }
        assert!(out.len() < 1000, "runaway transmit");
    }
    out
}

fn seqs(out: &[Out]) -> Vec<u32> {
    out.iter().map(|o| o.seq).collect()
}

fn header(s: &Sender<u8>, member: u16) -> Header {
    Header {
        strategy: s.config().strategy,
        group: G,
        source: ME,
        member: MemberId(member),
    }
}

fn ack(s: &mut Sender<u8>, now: Instant, member: u16, seq: u32) {
    let r = Repr::Ack {
        header: header(s, member),
        seq: Seq(seq),
    };
    let mut b = vec![0u8; r.frame_len()];
    r.emit(&mut b);
    s.handle_frame(now, member as u8, &b);
}

fn nak(s: &mut Sender<u8>, now: Instant, member: u16, list: &[u32]) {
    let list: Vec<Seq> = list.iter().map(|&x| Seq(x)).collect();
    let r = Repr::Nak {
        header: header(s, member),
        cum: Seq(0),
        missing: SeqList::Slice(&list),
    };
    let mut b = vec![0u8; r.frame_len()];
    r.emit(&mut b);
    s.handle_frame(now, member as u8, &b);
}

fn events(s: &mut Sender<u8>) -> Vec<SenderEvent<u8>> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

const REQ: Flags = Flags::ACK_REQ;
const LAST: Flags = Flags::ACK_REQ.union(Flags::LAST);

#[test]
fn window_full_asks_for_acks_and_waits() {
    let t0 = Instant::now();
    let mut s = sender(cfg(Strategy::Mak), 2);
    assert_eq!(s.send(vec![1u8; 600]).unwrap(), 0); // 6 packets
    assert_eq!(s.state(), SenderState::Sending);
    let out = drain(&mut s, t0);
    assert_eq!(seqs(&out), [0, 1, 2, 3]);
    assert!(out.iter().all(|o| o.dest == Dest::Group && o.len == 100));
    assert_eq!(out[0].flags, Flags::START);
    assert_eq!(out[1].flags, Flags::empty());
    assert_eq!(
        out[3].flags, REQ,
        "the packet filling the window asks for ACKs"
    );
    assert_eq!(s.state(), SenderState::Waiting);
    assert_eq!(s.poll_timeout(), Some(at(t0, 1000)), "Tw runs");
    assert_eq!(s.stats().ack_requests, 1);

    // One member acks: the window stays (every member must ack).
    ack(&mut s, at(t0, 40), 1, 3);
    assert!(drain(&mut s, at(t0, 40)).is_empty());
    assert_eq!(s.window(), (Seq(0), Seq(4)));
    // A partial ack frees what both have.
    ack(&mut s, at(t0, 50), 2, 1);
    assert_eq!(s.window(), (Seq(2), Seq(4)));
    let out = drain(&mut s, at(t0, 50));
    assert_eq!(seqs(&out), [4, 5], "room for two more");
    assert_eq!(out[1].flags, LAST.union(Flags::END));
    assert_eq!(
        s.poll_timeout(),
        Some(at(t0, 1050)),
        "Tw restarted by the new request"
    );
    ack(&mut s, at(t0, 90), 2, 5);
    ack(&mut s, at(t0, 95), 1, 5);
    assert_eq!(
        events(&mut s),
        [SenderEvent::MessageDone {
            msg: 0,
            confirmed: true
        }]
    );
    assert!(s.is_idle());
    assert_eq!(s.state(), SenderState::Idle);
    assert_eq!(s.poll_timeout(), None, "Tw stopped once every member acked");
    let st = s.stats();
    assert_eq!((st.data_sent, st.ack_requests, st.acks_received), (6, 2, 4));
    assert_eq!(st.retx_timeout + st.retx_nak, 0);
}

#[test]
fn lost_last_packet_is_resent_on_the_timer() {
    let t0 = Instant::now();
    let mut s = sender(cfg(Strategy::Mak), 2);
    s.send(vec![2u8; 150]).unwrap(); // 2 packets
    let out = drain(&mut s, t0);
    assert_eq!(seqs(&out), [0, 1]);
    assert_eq!(out[1].flags, LAST.union(Flags::END));
    ack(&mut s, at(t0, 30), 1, 1);
    // Member 2 lost packet 1 and cannot know it: no ACK, no NAK.
    assert!(drain(&mut s, at(t0, 999)).is_empty());
    s.handle_timeout(at(t0, 999));
    assert!(drain(&mut s, at(t0, 999)).is_empty(), "not before Tw");
    s.handle_timeout(at(t0, 1000));
    let out = drain(&mut s, at(t0, 1000));
    assert_eq!(
        out,
        [Out {
            dest: Dest::Group,
            seq: 1,
            flags: LAST.union(Flags::END).union(Flags::RETX),
            msg: 0,
            len: 50
        }],
        "the window's last packet, asking for ACKs again"
    );
    assert_eq!(s.stats().retx_timeout, 1);
    assert_eq!(s.poll_timeout(), Some(at(t0, 2000)), "fixed Tw, no backoff");
    ack(&mut s, at(t0, 1020), 2, 1);
    assert!(s.is_idle());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn retransmission_once_per_nak_with_dedup() {
    let t0 = Instant::now();
    let mut c = cfg(Strategy::Mak);
    c.window = 8;
    let mut s = sender(c, 3);
    s.send(vec![3u8; 500]).unwrap(); // packets 0..=4
    assert_eq!(seqs(&drain(&mut s, t0)), [0, 1, 2, 3, 4]);
    nak(&mut s, at(t0, 200), 1, &[1, 3]);
    assert_eq!(s.state(), SenderState::Resending);
    let out = drain(&mut s, at(t0, 200));
    assert_eq!(seqs(&out), [1, 3]);
    assert!(out
        .iter()
        .all(|o| o.flags.contains(Flags::RETX) && o.dest == Dest::Group));
    // A second NAK for the same packets within δ (they crossed): ignored.
    nak(&mut s, at(t0, 250), 2, &[1, 3]);
    assert!(drain(&mut s, at(t0, 250)).is_empty());
    // After δ, a NAK means the retransmission was lost: once more.
    nak(&mut s, at(t0, 300), 3, &[3]);
    assert_eq!(seqs(&drain(&mut s, at(t0, 300))), [3]);
    // A packet listed twice in one NAK goes once.
    nak(&mut s, at(t0, 500), 3, &[2, 2]);
    assert_eq!(seqs(&drain(&mut s, at(t0, 500))), [2]);
    let st = s.stats();
    assert_eq!((st.naks_received, st.nak_entries), (4, 7));
    assert_eq!((st.retx_nak, st.nak_entries_dedup), (4, 3));
    // A NAK of a packet never sent is forged: dropped whole.
    nak(&mut s, at(t0, 600), 1, &[2, 9]);
    assert!(drain(&mut s, at(t0, 600)).is_empty());
    assert_eq!(s.stats().forged, 1);
    assert_eq!(s.stats().naks_received, 4);
}

#[test]
fn silent_member_is_reported_after_k_expiries_and_the_rest_completes() {
    let t0 = Instant::now();
    let mut s = sender(cfg(Strategy::Mak), 3);
    s.send(vec![4u8; 10]).unwrap();
    drain(&mut s, t0);
    ack(&mut s, at(t0, 20), 1, 0);
    ack(&mut s, at(t0, 25), 3, 0);
    for k in 1..=2u64 {
        s.handle_timeout(at(t0, 1000 * k));
        assert_eq!(seqs(&drain(&mut s, at(t0, 1000 * k))), [0]);
        assert!(
            events(&mut s).is_empty(),
            "silent only after K = 3 expiries"
        );
    }
    s.handle_timeout(at(t0, 3000));
    assert_eq!(
        events(&mut s),
        [
            SenderEvent::MemberSilent {
                member: Member::new(2, 2),
                acked: Seq(u32::MAX),
            },
            SenderEvent::MessageDone {
                msg: 0,
                confirmed: true
            }
        ]
    );
    assert!(
        drain(&mut s, at(t0, 3000)).is_empty(),
        "no resend for nobody"
    );
    assert!(s.is_idle());
    assert_eq!(s.stats().members_silent, 1);
    let active: Vec<_> = s
        .members()
        .filter(|m| m.active)
        .map(|m| m.member.id.0)
        .collect();
    assert_eq!(active, [1, 3]);
    // Its late ACK is counted, changes nothing.
    ack(&mut s, at(t0, 3100), 2, 0);
    assert_eq!(s.stats().acks_stale, 1);
}

#[test]
fn min_silence_delays_the_verdict() {
    let t0 = Instant::now();
    let mut c = cfg(Strategy::Mak);
    c.min_silence = Duration::from_micros(5500);
    let mut s = sender(c, 1);
    s.send(vec![0u8; 1]).unwrap();
    drain(&mut s, t0);
    for k in 1..=5u64 {
        s.handle_timeout(at(t0, 1000 * k));
        assert!(events(&mut s).is_empty(), "expiry {k}");
        assert_eq!(drain(&mut s, at(t0, 1000 * k)).len(), 1);
    }
    s.handle_timeout(at(t0, 6000));
    assert!(matches!(
        events(&mut s)[0],
        SenderEvent::MemberSilent { .. }
    ));
    // The only member is gone: nothing more can be sent.
    assert_eq!(s.send(vec![1]), Err(SendError::NoMembers));
}

#[test]
fn iterative_serves_one_member_after_the_other() {
    let t0 = Instant::now();
    let mut s = sender(cfg(Strategy::Iterative), 2);
    s.send(vec![5u8; 150]).unwrap();
    let out = drain(&mut s, t0);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].dest, out[0].seq), (Dest::Member(1), 0));
    assert!(out[0].flags.contains(REQ), "every packet is acknowledged");
    ack(&mut s, at(t0, 30), 1, 0);
    let out = drain(&mut s, at(t0, 30));
    assert_eq!((out[0].dest, out[0].seq), (Dest::Member(2), 0));
    assert!(
        !out[0].flags.contains(Flags::RETX),
        "first copy to member 2"
    );
    // Member 2's copy is lost: resent to it alone after Tw.
    s.handle_timeout(at(t0, 1030));
    let out = drain(&mut s, at(t0, 1030));
    assert_eq!((out[0].dest, out[0].seq), (Dest::Member(2), 0));
    assert!(out[0].flags.contains(Flags::RETX));
    ack(&mut s, at(t0, 1050), 2, 0);
    let out = drain(&mut s, at(t0, 1050));
    assert_eq!((out[0].dest, out[0].seq), (Dest::Member(1), 1));
    ack(&mut s, at(t0, 1080), 1, 1);
    assert_eq!(seqs(&drain(&mut s, at(t0, 1080))), [1]);
    ack(&mut s, at(t0, 1100), 2, 1);
    assert!(s.is_idle());
    assert_eq!(s.stats().data_sent, 4);
    assert_eq!(s.stats().retx_timeout, 1);
}

#[test]
fn ack_baseline_is_stop_and_wait_multicast() {
    let t0 = Instant::now();
    let mut s = sender(cfg(Strategy::Ack), 2);
    s.send(vec![6u8; 250]).unwrap(); // 3 packets
    let out = drain(&mut s, t0);
    assert_eq!(seqs(&out), [0]);
    assert_eq!(
        (out[0].dest, out[0].flags),
        (Dest::Group, REQ.union(Flags::START))
    );
    ack(&mut s, at(t0, 10), 1, 0);
    assert!(drain(&mut s, at(t0, 10)).is_empty(), "waits for every ACK");
    ack(&mut s, at(t0, 12), 2, 0);
    assert_eq!(seqs(&drain(&mut s, at(t0, 12))), [1]);
    // Under the ACK baseline a NAK is not expected.
    nak(&mut s, at(t0, 13), 1, &[1]);
    assert_eq!(s.stats().unexpected, 1);
    assert!(drain(&mut s, at(t0, 13)).is_empty());
}

#[test]
fn nak_baseline_never_frees_without_linger_and_resends_per_nak() {
    let t0 = Instant::now();
    let mut c = cfg(Strategy::Nak);
    c.nak_linger = None;
    c.nak_tail_repeats = 0;
    let mut s = sender(c, 2);
    s.send(vec![7u8; 1000]).unwrap(); // 10 packets, W = 4
    let out = drain(&mut s, t0);
    assert_eq!(seqs(&out), [0, 1, 2, 3]);
    assert!(
        out.iter().all(|o| !o.flags.contains(REQ)),
        "no ACK requests"
    );
    // ACKs do not exist under NAK: the window never frees (paper's flaw 1).
    ack(&mut s, at(t0, 10), 1, 3);
    assert_eq!(s.stats().unexpected, 1);
    s.handle_timeout(at(t0, 1_000_000));
    assert!(drain(&mut s, at(t0, 1_000_000)).is_empty());
    assert_eq!(s.poll_timeout(), None, "nothing will ever free it");
    assert_eq!(s.state(), SenderState::Waiting);
    // Every NAK is served, even two crossing ones (no δ).
    nak(&mut s, at(t0, 20), 1, &[2]);
    nak(&mut s, at(t0, 21), 2, &[2]);
    assert_eq!(seqs(&drain(&mut s, at(t0, 21))), [2]);
    nak(&mut s, at(t0, 22), 2, &[2]);
    assert_eq!(seqs(&drain(&mut s, at(t0, 22))), [2]);
}

#[test]
fn nak_baseline_linger_frees_and_the_tail_repeats() {
    let t0 = Instant::now();
    let mut c = cfg(Strategy::Nak);
    c.nak_linger = Some(Duration::from_millis(5));
    c.nak_tail_repeats = 2;
    let mut s = sender(c, 1);
    s.send(vec![8u8; 150]).unwrap();
    let out = drain(&mut s, t0);
    assert_eq!(out[1].flags, LAST.union(Flags::END));
    assert_eq!(s.poll_timeout(), Some(at(t0, 1000)));
    for k in 1..=2u64 {
        s.handle_timeout(at(t0, 1000 * k));
        let out = drain(&mut s, at(t0, 1000 * k));
        assert_eq!(seqs(&out), [1]);
        assert!(out[0].flags.contains(Flags::RETX));
    }
    s.handle_timeout(at(t0, 3000));
    assert!(drain(&mut s, at(t0, 3000)).is_empty(), "only 2 repeats");
    assert_eq!(s.stats().retx_tail, 2);
    // Packet 0 lingers 5 ms after its send; packet 1 after its last repeat.
    assert_eq!(s.poll_timeout(), Some(at(t0, 5000)));
    s.handle_timeout(at(t0, 5000));
    assert_eq!(s.window(), (Seq(1), Seq(2)));
    assert_eq!(s.poll_timeout(), Some(at(t0, 7000)));
    s.handle_timeout(at(t0, 7000));
    assert_eq!(
        events(&mut s),
        [SenderEvent::MessageDone {
            msg: 0,
            confirmed: false
        }]
    );
    assert!(s.is_idle());
}

#[test]
fn forged_and_foreign_frames_change_nothing() {
    let t0 = Instant::now();
    let mut s = sender(cfg(Strategy::Mak), 2);
    s.send(vec![9u8; 10]).unwrap();
    drain(&mut s, t0);
    let r = Repr::Ack {
        header: header(&s, 1),
        seq: Seq(0),
    };
    let mut b = vec![0u8; r.frame_len()];
    r.emit(&mut b);
    s.handle_frame(t0, 2, &b); // member 1's id from member 2's address
    s.handle_frame(t0, 7, &b); // from a stranger
    ack(&mut s, t0, 9, 0); // unknown member id
    ack(&mut s, t0, 1, 5); // acknowledges packets never sent
    assert_eq!(s.stats().forged, 4);
    let mut other = header(&s, 1);
    other.group = GroupId(6);
    let r = Repr::Ack {
        header: other,
        seq: Seq(0),
    };
    r.emit(&mut b);
    s.handle_frame(t0, 1, &b);
    assert_eq!(s.stats().foreign, 1);
    s.handle_frame(t0, 1, &[0x4d, 0x11]);
    s.handle_frame(t0, 1, &[]);
    assert_eq!(s.stats().malformed, 2);
    // Our own DATA looped back by a carrier.
    let mut own = vec![0u8; s.config().mtu];
    s.send(vec![1u8; 3]).unwrap();
    let t = s.poll_transmit(t0, &mut own).unwrap();
    s.handle_frame(t0, 0, &own[..t.len]);
    assert_eq!(s.stats().unexpected, 1);
    assert_eq!(s.window(), (Seq(0), Seq(2)));
    assert_eq!(s.stats().acks_received, 0);
}

#[test]
fn send_limits_and_membership() {
    let mut c = cfg(Strategy::Mak);
    c.max_message_bytes = 1000;
    c.send_buffer_bytes = 2200;
    let mut s = sender(c, 1);
    assert_eq!(
        s.send(vec![0u8; 1001]),
        Err(SendError::TooLarge {
            size: 1001,
            max: 1000
        })
    );
    s.send(vec![0u8; 1000]).unwrap();
    s.send(vec![0u8; 1000]).unwrap();
    assert!(matches!(
        s.send(vec![0u8; 100]),
        Err(SendError::Full { .. })
    ));
    assert_eq!(s.add_member(Member::new(4, 4)), Err(MembershipError::Busy));
    // Removing the only member completes what it owed.
    let t0 = Instant::now();
    drain(&mut s, t0);
    assert_eq!(s.remove_member(t0, MemberId(1)), Some(Member::new(1, 1)));
    assert_eq!(s.remove_member(t0, MemberId(1)), None);
    assert_eq!(s.window(), (Seq(4), Seq(4)), "what it owed is freed");
    // With nobody left, the rest is sent and completes unconfirmed.
    while !drain(&mut s, t0).is_empty() {}
    assert!(s.is_idle());
    assert_eq!(
        events(&mut s),
        [0, 1].map(|msg| SenderEvent::MessageDone {
            msg,
            confirmed: false
        })
    );
    assert_eq!(s.add_member(Member::new(4, 4)), Ok(Seq(20)));
    assert_eq!(
        s.add_member(Member::new(4, 4)),
        Err(MembershipError::Duplicate(4))
    );
    assert_eq!(
        s.add_member(Member::new(0, 0)),
        Err(MembershipError::SelfMember(0))
    );
    assert!(Sender::new(
        cfg(Strategy::Mak),
        G,
        ME,
        vec![Member::new(1, 1u8), Member::new(1, 2)],
        Seq(0)
    )
    .is_err());
}

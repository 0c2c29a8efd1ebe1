//! Unit tests of the endpoint's internals (the public behaviour is traced in
//! tests/core.rs).

use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::wire::Options;

/// Endpoints 1 and 2 with `cfg`, made at `t0`.
fn pair(cfg: &Config, t0: Instant) -> (Endpoint<u8>, Endpoint<u8>) {
    let ep = |seed| Endpoint::new(cfg.clone(), t0, SystemTime::UNIX_EPOCH, seed, None);
    (ep(1), ep(2))
}

/// Resends to a peer that confirms nothing do not grow the send-order
/// queue of early resend without bound.
#[test]
fn send_order_queue_stays_bounded_for_a_dead_peer() {
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 10,
        default_timeout: Duration::from_millis(1),
        max_resend_multiplier: 4,
        ..Config::default()
    };
    let mut e: Endpoint<u8> = Endpoint::new(cfg, t0, SystemTime::UNIX_EPOCH, 1, None);
    e.send(t0, 1, 2, &[0u8; 100], Options::NONE).unwrap();
    let mut buf = vec![0u8; e.config().max_packet_len()];
    let mut now = t0;
    let mut transmissions = 0;
    while now - t0 < Duration::from_secs(60) {
        now = e.poll_timeout().unwrap();
        e.handle_timeout(now);
        while e.poll_transmit(&mut buf).is_some() {
            transmissions += 1;
        }
    }
    let s = e.send_sessions.get(&Dest::Peer(2)).expect("session");
    assert!(transmissions > 10_000, "{transmissions}");
    assert!(
        s.sent_order.len() <= 2 * s.in_flight_pkts + 65,
        "{} entries for {} packets in flight",
        s.sent_order.len(),
        s.in_flight_pkts
    );
}

/// `payload` borrows the stored message: the data part of a gathered
/// transmit is the message's own bytes, not a copy.
#[test]
fn gathered_payload_is_the_stored_message() {
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 4,
        ..Config::default()
    };
    let mut e: Endpoint<u8> = Endpoint::new(cfg, t0, SystemTime::UNIX_EPOCH, 1, None);
    let key = e.send(t0, 1, 2, b"0123456789", Options::NONE).unwrap();
    let base = e.sent.get(&key).expect("stored").data.as_ptr();
    let mut hdr = [0u8; crate::wire::CTP_HEADER_LEN];
    let mut offsets = Vec::new();
    while let Some(t) = e.poll_transmit_gather(&mut hdr) {
        let body = e.payload(t.payload);
        offsets.push((body.as_ptr() as usize - base as usize, body.len()));
    }
    assert_eq!(offsets, vec![(0, 4), (4, 4), (8, 2)]);
}

/// A released packet has one timer entry, whose time is its earliest
/// deadline: with a measured SRTT the tail probe (RFC 8985 7.2) is set
/// before the entry is queued, not queued as a second entry.
#[test]
fn a_released_packet_queues_one_timer_entry() {
    let t0 = Instant::now();
    let (mut a, mut b) = pair(&Config::default(), t0);
    let mut buf = vec![0u8; a.config().max_packet_len()];
    // One exchange gives `a` its SRTT for `b`.
    a.send(t0, 1, 2, b"ping", Options::NONE).unwrap();
    let t = a.poll_transmit(&mut buf).expect("the ping");
    let t1 = t0 + Duration::from_micros(50);
    b.handle_datagram(t1, 1, &buf[..t.len]);
    let t = b.poll_transmit(&mut buf).expect("its confirmation");
    let t2 = t0 + Duration::from_micros(100);
    a.handle_datagram(t2, 2, &buf[..t.len]);
    assert!(a.peer_srtt(2).is_some(), "sampled");
    let _ = a.poll_timeout(); // drops the confirmed packet's entry
    assert_eq!(a.timers.len(), 0);
    let key = a.send(t2, 1, 2, b"tail", Options::NONE).unwrap();
    let p = a.sent.get(&key).expect("stored").pkt(0);
    let probe = p.probe_at.expect("tail probe armed");
    assert!(p.resend_at.is_some_and(|r| probe < r));
    assert_eq!(p.due, probe);
    assert_eq!(a.timers.len(), 1, "one entry, at the earliest deadline");
    assert_eq!(a.poll_timeout(), Some(probe));
}

/// A message of 130 packets queues one timer entry per group of
/// `TIMER_GROUP` packets (3), and when one packet of the middle group is
/// lost, the timers resend that packet alone, at its own deadline: the
/// group's entry may wake the endpoint early, never late.
#[test]
fn timer_entries_are_per_group_and_fire_only_due_packets() {
    use crate::sender::TIMER_GROUP;
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 4,
        tail_probe: false,
        early_resend: false,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&cfg, t0);
    let n = 2 * TIMER_GROUP + 2;
    let key = a
        .send(t0, 1, 2, &vec![7u8; 4 * n as usize], Options::NONE)
        .unwrap();
    assert_eq!(a.timers.len(), 3, "one entry per group, not per packet");
    let lost = TIMER_GROUP + 6;
    let mut buf = vec![0u8; a.config().max_packet_len()];
    let mut sent = 0;
    while let Some(t) = a.poll_transmit(&mut buf) {
        if sent != lost {
            b.handle_datagram(t0, 1, &buf[..t.len]);
        }
        sent += 1;
    }
    assert_eq!(sent, n);
    let t1 = t0 + Duration::from_micros(100);
    while let Some(t) = b.poll_transmit(&mut buf) {
        a.handle_datagram(t1, 2, &buf[..t.len]);
    }
    let m = a.sent.get(&key).expect("one packet unconfirmed");
    assert_eq!(m.unconfirmed, 1);
    let at = m.pkt(lost).resend_at.expect("resend armed");
    let mut wakes = 0;
    let mut now = t1;
    while a.stats().data_packets_resent == 0 {
        now = a.poll_timeout().expect("the lost packet's timer");
        assert!(now <= at, "woke {:?} after the deadline", now - at);
        a.handle_timeout(now);
        while a.poll_transmit(&mut buf).is_some() {}
        wakes += 1;
        assert!(wakes <= 3, "{wakes} wakes");
    }
    assert_eq!(now, at, "resent at its own deadline");
    assert_eq!(a.stats().data_packets_resent, 1);
    let m = a.sent.get(&key).expect("still unconfirmed");
    assert_eq!(m.pkt(lost).transmissions, 2);
    // At most one live and one stale entry per group (the first
    // confirmation rebased every packet's deadline, pushing anew).
    assert!(a.timers.len() <= 6, "{} entries", a.timers.len());
}

/// Exchanges packets between `a` (sending) and `b` (confirming) until
/// nothing moves; returns the command numbers of `a`'s data packets in
/// transmission order. `cancel` drops a message of `a` after `after`
/// packets were sent.
fn command_order(
    a: &mut Endpoint<u8>,
    b: &mut Endpoint<u8>,
    t0: Instant,
    cancel: Option<(usize, MsgId)>,
) -> Vec<u16> {
    let mut buf = vec![0u8; a.config().max_packet_len()];
    let mut order = Vec::new();
    for round in 0..100u64 {
        let now = t0 + Duration::from_micros(10 * round);
        let mut moved = false;
        while let Some(t) = a.poll_transmit(&mut buf) {
            let (r, _) = crate::wire::Repr::parse(&buf[..t.len]).expect("valid");
            order.push(r.command);
            b.handle_datagram(now, 1, &buf[..t.len]);
            moved = true;
            if let Some((after, key)) = cancel {
                if order.len() == after {
                    assert!(a.cancel(now, key));
                }
            }
        }
        while let Some(t) = b.poll_transmit(&mut buf) {
            a.handle_datagram(now, 2, &buf[..t.len]);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    order
}

/// `Config::max_active_large`: with one active multi-packet message per
/// destination, a second one is released only after every packet of the
/// first, while a single-packet message sent after both takes its turn at
/// once; a message dropped before its release ended hands its turn on.
#[test]
fn multi_packet_messages_take_turns_at_most_max_active_large_at_once() {
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 4,
        window_packets: 2,
        max_active_large: 1,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&cfg, t0);
    a.send(t0, 1, 2, &[1u8; 20], Options::NONE).unwrap();
    a.send(t0, 2, 2, &[2u8; 20], Options::NONE).unwrap();
    a.send(t0, 3, 2, b"ping", Options::NONE).unwrap();
    let order = command_order(&mut a, &mut b, t0, None);
    assert_eq!(order.iter().filter(|&&c| c == 1).count(), 5, "{order:?}");
    let last_of_1 = order.iter().rposition(|&c| c == 1).unwrap();
    let first_of_2 = order.iter().position(|&c| c == 2).unwrap();
    let single = order.iter().position(|&c| c == 3).unwrap();
    assert!(last_of_1 < first_of_2, "interleaved: {order:?}");
    assert!(single < last_of_1, "the single packet waited: {order:?}");
    assert_eq!(a.storage_sizes().awaiting_confirmation, 0);

    let (mut a, mut b) = pair(&cfg, t0);
    let first = a.send(t0, 1, 2, &[1u8; 20], Options::NONE).unwrap();
    a.send(t0, 2, 2, &[2u8; 20], Options::NONE).unwrap();
    let order = command_order(&mut a, &mut b, t0, Some((1, first)));
    assert_eq!(order.iter().filter(|&&c| c == 2).count(), 5, "{order:?}");
    assert_eq!(a.storage_sizes().awaiting_confirmation, 0);
}

/// A NoResend message kept after its "not confirmed" error (no
/// DelAfterError) gives its lost packets up: they leave the send window,
/// so a message queued behind a window full of them is still sent and
/// delivered. Before, nothing further went to that destination and the
/// queued message never timed out either (found by the ctp_endpoints
/// fuzz target).
#[test]
fn lost_no_resend_packets_leave_the_window_after_their_error() {
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 4,
        window_packets: 4,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&cfg, t0);
    a.set_peer_timeout(2, Duration::from_millis(1));
    a.send(t0, 1, 2, &[1u8; 16], Options::NO_RESEND).unwrap();
    let mut buf = vec![0u8; a.config().max_packet_len()];
    let mut lost = Vec::new();
    while let Some(t) = a.poll_transmit(&mut buf) {
        lost.push(buf[..t.len].to_vec());
    }
    assert_eq!(lost.len(), 4, "the window's worth, all lost");
    a.send(t0, 2, 2, b"behind", Options::NONE).unwrap();
    assert!(a.poll_transmit(&mut buf).is_none(), "the window is full");
    let mut now = t0;
    let mut got = Vec::new();
    let mut errors = Vec::new();
    while now - t0 < Duration::from_secs(5) {
        let Some(t) = a.poll_timeout() else { break };
        now = t.max(now);
        a.handle_timeout(now);
        while let Some(t) = a.poll_transmit(&mut buf) {
            b.handle_datagram(now, 1, &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(&mut buf) {
            a.handle_datagram(now, 2, &buf[..t.len]);
        }
        got.extend(std::iter::from_fn(|| b.poll_delivery()));
        errors.extend(std::iter::from_fn(|| a.poll_delivery()));
    }
    assert!(
        matches!(errors.as_slice(), [Delivery::Error(e)] if e.kind == ErrorType::NotConfirmed && e.command == Some(1)),
        "{errors:?}"
    );
    assert!(
        matches!(got.as_slice(), [Delivery::Data(d)] if d.data == b"behind"),
        "{got:?}"
    );
    assert_eq!(
        a.send_sessions.get(&Dest::Peer(2)).unwrap().in_flight_pkts,
        0
    );
    // The lost packets turn up after all: their confirmations still count
    // (the message leaves the storage), and the window is not left twice.
    for p in &lost {
        b.handle_datagram(now, 1, p);
    }
    while let Some(t) = b.poll_transmit(&mut buf) {
        a.handle_datagram(now, 2, &buf[..t.len]);
    }
    let s = a.send_sessions.get(&Dest::Peer(2)).unwrap();
    assert_eq!((s.in_flight_pkts, s.in_flight_bytes), (0, 0));
    assert_eq!(a.storage_sizes().awaiting_confirmation, 0);
}

/// Unsent bytes per destination (`Config::notsent_lowat`): a message
/// counts until its packets are released to the window, a destination at
/// the mark has no room while another has, confirmations that open the
/// window bring it under the mark (with news for a waiting sender), and a
/// cancelled message's unreleased bytes leave the count.
#[test]
fn unsent_bytes_follow_the_window_and_gate_has_room_to() {
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 100,
        window_packets: 2,
        notsent_lowat: 500,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&cfg, t0);
    let unsent = |e: &Endpoint<u8>| e.send_sessions.get(&Dest::Peer(2)).map(|s| s.unsent_bytes);
    assert!(a.has_room_to(2, 1000));
    // 1000 bytes: 10 packets, 2 released at once.
    a.send(t0, 1, 2, &[7u8; 1000], Options::NONE).unwrap();
    assert_eq!(unsent(&a), Some(800));
    assert!(!a.has_room_to(2, 1), "at the mark");
    assert!(a.has_room_to(3, 1), "another destination");
    assert!(a.has_room(1), "the storage itself has room");
    assert!(!a.take_unsent_news());
    // Confirm what is in flight until the count falls under the mark.
    let mut buf = vec![0u8; a.config().max_packet_len()];
    let mut now = t0;
    let mut news = false;
    while unsent(&a).unwrap() >= 500 {
        now += Duration::from_micros(10);
        while let Some(t) = a.poll_transmit(&mut buf) {
            b.handle_datagram(now, 1, &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(&mut buf) {
            a.handle_datagram(now, 2, &buf[..t.len]);
        }
        news |= a.take_unsent_news();
    }
    assert_eq!(unsent(&a), Some(400));
    assert!(news, "crossing the mark is news");
    assert!(a.has_room_to(2, 1));
    // A second message, then cancelled: its bytes leave the count.
    let key = a.send(now, 1, 2, &[8u8; 1000], Options::NONE).unwrap();
    assert_eq!(unsent(&a), Some(1400));
    assert!(a.cancel(now, key));
    assert!(a.take_unsent_news());
    assert_eq!(unsent(&a), Some(400));
}

/// A peer whose link carries less gets parts of its own size, which its
/// endpoint reassembles; other peers keep the configured size.
#[test]
fn a_peer_with_a_smaller_data_size_gets_smaller_parts() {
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 40,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&cfg, t0);
    assert!(a.set_peer_data_size(2, 10));
    assert_eq!(a.data_size_to(2), 10);
    assert_eq!(a.data_size_to(3), 40);
    let msg: Vec<u8> = (0..95u8).collect();
    a.send(t0, 1, 2, &msg, Options::NONE).unwrap();
    a.send(t0, 1, 3, &msg, Options::NONE).unwrap();
    let mut buf = vec![0u8; a.config().max_packet_len()];
    let (mut to_b, mut to_c) = (0, 0);
    while let Some(t) = a.poll_transmit(&mut buf) {
        if t.dest == 2 {
            assert!(t.len <= crate::wire::CTP_HEADER_LEN + 10, "{}", t.len);
            to_b += 1;
            b.handle_datagram(t0, 1, &buf[..t.len]);
        } else {
            to_c += 1;
        }
    }
    assert_eq!((to_b, to_c), (10, 3));
    let got: Vec<_> = std::iter::from_fn(|| b.poll_delivery()).collect();
    match &got[..] {
        [Delivery::Data(d)] => assert_eq!(d.data, msg),
        other => panic!("{other:?}"),
    }
    // Back to the configured size; never above it.
    assert!(a.set_peer_data_size(2, 1000));
    assert_eq!(a.data_size_to(2), 40);
    assert!(a.peer_data_size.is_empty());
}

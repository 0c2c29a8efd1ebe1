//! Unit tests of `state.rs`.
use super::*;

fn msg(n: u64) -> MsgId {
    n
}

/// The window bounds the span of sequence numbers in flight: with
/// fragment 0 unconfirmed, fragment `window` must wait even when all
/// between were confirmed (CTP confirms out of order).
#[test]
fn window_is_a_span_from_the_oldest_unconfirmed_fragment() {
    let cfg = CommConfig {
        window_fragments: 4,
        ..CommConfig::default()
    };
    let mut st = State::new(0, &[1u8, 2], cfg).unwrap();
    let reqs: Vec<u64> = (0..6)
        .map(|_| st.isend(1, 0, &[b"x"], false).unwrap())
        .collect();
    st.tx[1].intro = Intro::Done;
    let mut handed = Vec::new();
    while let Some((dest, _)) = st.peek_sendable() {
        let s = st.take_sendable(dest).unwrap();
        st.handed(&s, msg(s.seq));
        handed.push(s.seq);
    }
    assert_eq!(handed, vec![0, 1, 2, 3]);
    assert_eq!(st.blocked_in_flight(), Some(msg(0)));
    // 1..=3 confirmed, 0 not: still nothing may go.
    st.reap(|m| m == msg(0));
    assert_eq!(st.peek_sendable(), None);
    assert_eq!(st.blocked_in_flight(), Some(msg(0)));
    // 0 confirmed: 4 and 5 go.
    st.reap(|_| false);
    let mut more = Vec::new();
    while let Some((dest, _)) = st.peek_sendable() {
        let s = st.take_sendable(dest).unwrap();
        st.handed(&s, msg(s.seq));
        more.push(s.seq);
    }
    assert_eq!(more, vec![4, 5]);
    assert!(reqs.iter().all(|r| st.is_complete(*r).unwrap()));
}

#[test]
fn fragments_carry_the_gathered_parts_in_order() {
    let cfg = CommConfig {
        fragment_bytes: 3,
        ..CommConfig::default()
    };
    let mut st = State::new(0, &[1u8, 2], cfg).unwrap();
    st.isend(1, 7, &[b"ab", b"", b"cdefg"], false).unwrap();
    st.tx[1].intro = Intro::Done;
    let mut rx = PeerRx::new(8, 100);
    let mut out = Vec::new();
    let mut n = 0;
    while let Some((dest, _)) = st.peek_sendable() {
        let s = st.take_sendable(dest).unwrap();
        let (h, p) = Header::decode(&s.bytes).unwrap();
        rx.accept(h, p, &mut out).unwrap();
        st.handed(&s, msg(s.seq));
        n += 1;
    }
    assert_eq!(n, 3);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].tag, &out[0].data[..]), (7, &b"abcdefg"[..]));
}

/// A restarted rank's first fragments must not overtake the message that
/// tells its peers it is a new process: nothing goes to a peer before the
/// introduction (CONNECT with our incarnation) is confirmed.
#[test]
fn nothing_goes_to_a_peer_before_its_introduction_is_confirmed() {
    let mut st = State::new(0, &[1u8, 2], CommConfig::default()).unwrap();
    st.isend(1, 0, &[b"x"], false).unwrap();
    assert_eq!(st.tx[1].intro, Intro::Queued);
    let inc = st.incarnation;
    assert_ne!(inc, 0);
    assert_eq!(
        st.ctl_out.front(),
        Some(&(1, Control::Connect { incarnation: inc }))
    );
    assert_eq!(st.peek_sendable(), None);
    // Handed to CTP: a blocked sender waits for its confirmation.
    st.tx[1].intro = Intro::InFlight(msg(99));
    st.tx[1].ctl_in_flight.push(msg(99));
    assert_eq!(st.blocked_in_flight(), Some(msg(99)));
    assert_eq!(st.peek_sendable(), None);
    st.reap(|_| false);
    assert_eq!(st.tx[1].intro, Intro::Done);
    assert!(st.peek_sendable().is_some());
    // A control message to a peer not yet introduced goes behind a PROBE
    // carrying the incarnation.
    st.push_ctl(0, Control::Expel);
    let to0: Vec<_> = st.ctl_out.iter().filter(|c| c.0 == 0).collect();
    assert_eq!(
        to0,
        vec![
            &(0, Control::Probe { incarnation: inc }),
            &(0, Control::Expel)
        ]
    );
}

/// A process that restarted at a rank's address and has not joined yet
/// answers the old rank's traffic with `control::restart_notice`: a rank
/// that knew the earlier process's incarnation fails its sends to it at
/// once ("restarted"), and takes the address back as a peer.
#[test]
fn a_restart_notice_fails_the_sends_to_the_old_process() {
    let cfg = CommConfig::default();
    let mut st = State::new(0, &[1u8, 2], cfg.clone()).unwrap();
    let ctx = cfg.context & !COLLECTIVE_CONTEXT;
    st.on_control(1, &Control::Probe { incarnation: 77 }.encode(ctx));
    let req = st.isend(1, 0, &[b"to the old process"], false).unwrap();
    assert!(!st.is_complete(req).unwrap());
    st.on_control(1, &crate::control::restart_notice(&cfg));
    let e = st.take_complete(req).unwrap().finish().unwrap_err();
    assert!(
        matches!(&e, CommError::PeerFailed { rank: 1, reason } if reason.contains("restarted")),
        "{e}"
    );
    assert_eq!(st.snapshot().rejoins, 1);
    assert_ne!(st.peer_state(1).unwrap(), crate::flow::PeerState::Failed);
    // A rank that never heard of the old process records the new one.
    let mut fresh = State::new(0, &[1u8, 2], cfg.clone()).unwrap();
    fresh.on_control(1, &crate::control::restart_notice(&cfg));
    assert_eq!(fresh.snapshot().rejoins, 0);
    assert!(fresh.peer_incarnation[1].is_some());
}

/// A failure no request carried (nothing was pending when the old
/// process's restart was noticed) is reported by the next send naming the
/// rank, once, although the rank rejoined meanwhile.
#[test]
fn a_restart_with_nothing_pending_is_reported_by_the_next_call() {
    let cfg = CommConfig::default();
    let mut st = State::new(0, &[1u8, 2], cfg.clone()).unwrap();
    let ctx = cfg.context & !COLLECTIVE_CONTEXT;
    st.on_control(1, &Control::Probe { incarnation: 77 }.encode(ctx));
    st.on_control(1, &crate::control::restart_notice(&cfg));
    assert_eq!(st.snapshot().rejoins, 1);
    let e = st.isend(1, 0, &[b"after the restart"], false).unwrap_err();
    assert!(
        matches!(&e, CommError::PeerFailed { rank: 1, reason } if reason.contains("restarted")),
        "{e}"
    );
    // Reported once: the rank is a peer again.
    st.isend(1, 0, &[b"to the new process"], false).unwrap();
    // A receive naming a rank whose failure no call carried reports it too.
    let mut st = State::new(0, &[1u8, 2], cfg.clone()).unwrap();
    st.on_control(1, &Control::Probe { incarnation: 78 }.encode(ctx));
    st.on_control(1, &crate::control::restart_notice(&cfg));
    let e = st
        .irecv(SourceSel::Rank(1), TagSel::Any, false)
        .unwrap_err();
    assert!(matches!(e, CommError::PeerFailed { rank: 1, .. }), "{e}");
}

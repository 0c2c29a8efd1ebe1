//! ULFC over CTP on kernel UDP loopback (unprivileged): explicit
//! disconnect makes writes fail at once, and the messages accepted before
//! arrive exactly once, in order, after reconnect; `through` and `rapid`
//! change the window the peer grants.

mod common;

use std::time::Duration;

use comm::{CommConfig, CommError, PeerState, ANY_TAG};
use common::{ranks, LIMIT};

fn body(i: usize) -> Vec<u8> {
    (0..3000).map(|k| (i * 13 + k) as u8).collect()
}

#[test]
fn disconnect_then_reconnect_delivers_exactly_once() {
    const MSGS: usize = 50;
    let cfg = CommConfig {
        wait_timeout: Some(LIMIT),
        recv_budget_bytes: 8192,
        ..CommConfig::default()
    };
    let mut comms = ranks(2, cfg);
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let reqs: Vec<_> = (0..MSGS)
        .map(|i| c0.isend(1, 9, &body(i)).unwrap())
        .collect();
    c0.disconnect(1).unwrap();
    // One fragment per message (3024 bytes fit the 8192-byte window).
    let handed = c0.stats().fragments_sent as usize;
    assert!(handed < MSGS, "all handed before disconnect: raise MSGS");
    assert_eq!(c0.state(1).unwrap(), PeerState::ExplicitDisconnect);
    let e = c0.send(1, 9, b"refused").unwrap_err();
    assert!(matches!(e, CommError::Disconnected { rank: 1 }), "{e}");
    // While disconnected only what was handed to CTP before arrives.
    std::thread::sleep(Duration::from_millis(300));
    c0.progress().unwrap();
    let mut got = Vec::new();
    while c1.iprobe(0, ANY_TAG).unwrap().is_some() {
        got.push(c1.recv(0, ANY_TAG).unwrap().1);
    }
    assert_eq!(
        c0.stats().fragments_sent as usize,
        handed,
        "fragments went while disconnected"
    );
    assert!(
        got.len() <= handed,
        "{} messages arrived, {handed} handed",
        got.len()
    );
    c0.reconnect(1).unwrap();
    c0.wait_all(reqs).unwrap();
    while got.len() < MSGS {
        got.push(c1.recv(0, 9).unwrap().1);
    }
    c0.flush(LIMIT).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c1.iprobe(0, ANY_TAG).unwrap(), None, "a duplicate arrived");
    for (i, d) in got.iter().enumerate() {
        assert!(d == &body(i), "message #{i} differs");
    }
    assert_eq!(c0.state(1).unwrap(), PeerState::Connected);
    assert!(c0.dest_buf(1).unwrap() <= 8192);
}

#[test]
fn through_and_rapid_change_the_granted_window() {
    let cfg = CommConfig {
        wait_timeout: Some(LIMIT),
        recv_budget_bytes: 3 << 20,
        rapid_window_bytes: 64 << 10,
        ..CommConfig::default()
    };
    let comms = ranks(4, cfg);
    // Contact first: every rank sends rank 0 a message.
    for c in &comms[1..] {
        c.send(0, 1, b"hi").unwrap();
    }
    for _ in 1..4 {
        comms[0].recv(comm::ANY_SOURCE, 1).unwrap();
    }
    let share = 1 << 20;
    assert_eq!(comms[1].dest_buf(0).unwrap(), share);
    let windows = || -> Vec<usize> {
        comms[0].progress().unwrap();
        comms[1..].iter().map(|c| c.dest_buf(0).unwrap()).collect()
    };
    comms[1].through(0).unwrap();
    let ok = testkit::wait_until(LIMIT, || {
        let w = windows();
        w[0] > share && w[1] < share && w[2] < share
    });
    let w = windows();
    assert!(ok, "windows {w:?}");
    assert_eq!(w[0] + w[1] + w[2], 3 << 20, "{w:?}");
    // Rapid: the small window for 2, and while it lasts the others are
    // capped at it too (response priority, flow.rs): 1 (through) at the
    // rapid window, 3 (normal, beside a through peer) at the minimum.
    comms[2].rapid(0).unwrap();
    let want = vec![64 << 10, 64 << 10, comm::flow::MIN_WINDOW_BYTES as usize];
    let ok = testkit::wait_until(LIMIT, || windows() == want);
    assert!(ok, "windows {:?}", windows());
}

/// A communicator registered with mio wakes its event loop when a message
/// for it arrives; the loop's `progress` and `test` then complete the
/// posted receive.
#[test]
fn a_registered_communicator_wakes_a_mio_loop() {
    use runtime::mio::{Events, Interest, Poll, Token};
    let cfg = CommConfig {
        wait_timeout: Some(LIMIT),
        ..CommConfig::default()
    };
    let mut comms = ranks(2, cfg);
    let c1 = comms.pop().unwrap();
    let mut c0 = comms.pop().unwrap();
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut c0, Token(7), Interest::READABLE)
        .unwrap();
    let r = c0.irecv(1, 5u32).unwrap();
    assert!(!c0.test(&r).unwrap());
    c1.send(0, 5, b"wake up").unwrap();
    let mut events = Events::with_capacity(4);
    let start = std::time::Instant::now();
    loop {
        poll.poll(&mut events, Some(LIMIT)).unwrap();
        if events
            .iter()
            .any(|e| e.token() == Token(7) && e.is_readable())
        {
            break;
        }
        assert!(start.elapsed() < LIMIT, "no readable event");
    }
    c0.progress().unwrap();
    assert!(
        c0.test(&r).unwrap(),
        "readable, but the receive is not complete"
    );
    let (_, data) = c0.wait(r).unwrap().into_received().unwrap();
    assert_eq!(data, b"wake up");
    poll.registry().deregister(&mut c0).unwrap();
}

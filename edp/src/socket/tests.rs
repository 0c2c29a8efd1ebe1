//! Unit tests of EDP sockets over in-memory links.

use std::io;
use std::time::{Duration, Instant};

use super::*;
use crate::wire::{emit_edp_frame, ETHERTYPE_EDP};
use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink};

fn pair(mtu: usize) -> (EdpSocket, EdpSocket) {
    let clock = SimClock::new();
    let (la, lb) = SimLink::pair(&clock, mtu, FaultConfig::default(), FaultConfig::default());
    let mut a = EdpSocket::from_link(Box::new(la), 10u16).unwrap();
    let mut b = EdpSocket::from_link(Box::new(lb), 20u16).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

fn mac(s: &EdpSocket) -> MacAddr {
    s.local_addr().unwrap().1
}

#[test]
fn datagrams_over_a_sim_link() {
    let (mut a, mut b) = pair(1500);
    assert_eq!(a.mtu(), 1494);
    let bm = mac(&b);
    for len in [0usize, 1, 100, 1494] {
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        assert_eq!(a.send_to(&data, (bm, 20)).unwrap(), len);
        let mut buf = [0u8; 1494];
        let (n, from, port) = b.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from, port), (&data[..], mac(&a), 10));
    }
    let e = a.send_to(&[0u8; 1495], (bm, 20)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("1494"), "{e}");
    let mut buf = [0u8; 16];
    assert_eq!(
        b.recv_from(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    let sa = a.stats();
    assert_eq!((sa.sent, sa.send_errors), (4, 0));
    let sb = b.stats();
    assert_eq!((sb.received, sb.dropped, sb.kernel_drops), (4, 0, 0));
}

/// A call served from what is buffered still receives the frames waiting
/// on the link (one batch): a reader or writer that never has to wait must
/// not leave the ring to overflow.
#[test]
fn a_call_served_from_the_buffer_drains_waiting_frames() {
    let (mut a, mut b) = pair(1500);
    let bm = mac(&b);
    a.send_to(b"one", (bm, 20)).unwrap();
    a.send_to(b"two", (bm, 20)).unwrap();
    let mut buf = [0u8; 16];
    // One receive turn takes both frames: "two" stays queued.
    assert_eq!(b.recv_from(&mut buf).unwrap().0, 3);
    assert_eq!(b.runtime().stats().rx_frames, 2);
    a.send_to(b"three", (bm, 20)).unwrap();
    // Served from the queue; "three", waiting on the link, is received too.
    let (n, _, _) = b.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"two");
    assert_eq!(b.runtime().stats().rx_frames, 3);
    let (n, _, _) = b.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"three");
}

#[test]
fn frames_for_other_ports_and_peers_are_dropped_and_counted() {
    let (mut a, mut b) = pair(1500);
    let bm = mac(&b);
    // no kernel filter on a sim link: the socket itself must check
    a.send_to(b"other port", (bm, 21)).unwrap();
    a.send_to(b"other host", (MacAddr([2, 9, 9, 9, 9, 9]), 20))
        .unwrap_or(0);
    a.send_to(b"mine", (bm, 20)).unwrap();
    let mut buf = [0u8; 64];
    let (n, _, _) = b.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"mine");
    // The runtime found no socket for port 21: counted and dropped there.
    assert!(b.runtime().stats().unclaimed >= 1);
    // connected: a datagram from another source port is dropped
    let dropped = b.stats().dropped;
    b.connect(mac(&a), 11).unwrap();
    a.send_to(b"from port 10", (bm, 20)).unwrap();
    assert_eq!(
        b.recv(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    assert_eq!(b.stats().dropped, dropped + 1);
    b.connect(mac(&a), 10).unwrap();
    a.send_to(b"from port 10", (bm, 20)).unwrap();
    assert_eq!(b.recv(&mut buf).unwrap(), 12);
}

#[test]
fn malformed_frames_are_counted() {
    let clock = SimClock::new();
    let (mut raw, lb) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let mut b = EdpSocket::from_link(Box::new(lb), 20u16).unwrap();
    b.set_nonblocking(true).unwrap();
    let bm = b.local_addr().unwrap().1;
    let mut f = [0u8; 64];
    let eth = EthernetRepr {
        dst: bm,
        src: raw.mac(),
        ethertype: ETHERTYPE_EDP,
    };
    let n = emit_edp_frame(&mut f, &eth, 1, 20, b"abc").unwrap();
    f[ETH_HEADER_LEN + 4..ETH_HEADER_LEN + 6].copy_from_slice(&999u16.to_be_bytes());
    raw.send(&f[..n]).unwrap(); // length field beyond the frame
    raw.send(&f[..16]).unwrap(); // truncated EDP header
    let other = EthernetRepr {
        ethertype: 0x88B6,
        ..eth
    };
    let n = emit_edp_frame(&mut f, &other, 1, 20, b"esp").unwrap();
    raw.send(&f[..n]).unwrap(); // another ethertype
    let mut buf = [0u8; 64];
    assert_eq!(
        b.recv_from(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    // The bad length reaches the socket (its port is right) and is dropped
    // there; the truncated frame and the ESP frame for a port nobody holds
    // are dropped and counted by the runtime.
    assert_eq!(b.stats().dropped, 1);
    assert_eq!(b.stats().received, 0);
    let rs = b.runtime().stats();
    assert_eq!((rs.malformed, rs.unclaimed), (1, 1), "{rs:?}");
}

#[test]
fn send_batch_and_errors() {
    let (mut a, mut b) = pair(1500);
    let bm = mac(&b);
    let one = [1u8; 10];
    assert_eq!(
        a.send_batch(&[&one]).unwrap_err().kind(),
        io::ErrorKind::NotConnected
    );
    a.connect(bm, 20).unwrap();
    let big = [0u8; 1495];
    assert_eq!(
        a.send_batch(&[&one, &big]).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    let many: Vec<&[u8]> = (0..100).map(|_| &one[..]).collect();
    let mut sent = 0;
    while sent < many.len() {
        sent += a.send_batch(&many[sent..]).unwrap();
    }
    let mut buf = [0u8; 32];
    for _ in 0..100 {
        assert_eq!(b.recv_from(&mut buf).unwrap().0, 10);
    }
    assert_eq!(a.stats().sent, 100);
    // port 0 is control
    assert_eq!(
        a.send_to(b"x", (bm, 0)).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        a.connect(bm, 0).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    let clock = SimClock::new();
    let (l, _) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    assert_eq!(
        EdpSocket::from_link(Box::new(l), 0u16).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn mio_readiness_comes_from_the_queue() {
    // Readiness is protocol state, so even an in-memory link (no
    // descriptor) works with mio, and buffered data stays readable.
    let (mut a, mut b) = pair(1500);
    let bm = mac(&b);
    let mut poll = mio::Poll::new().unwrap();
    let mut events = mio::Events::with_capacity(8);
    poll.registry()
        .register(&mut b, mio::Token(7), mio::Interest::READABLE)
        .unwrap();
    poll.poll(&mut events, Some(Duration::from_millis(20)))
        .unwrap();
    assert!(events.is_empty(), "nothing queued yet");
    a.send_to(b"one", (bm, 20)).unwrap();
    a.send_to(b"two", (bm, 20)).unwrap();
    // The service thread drives b's runtime while nobody waits in it.
    let start = Instant::now();
    while events.is_empty() && start.elapsed() < Duration::from_secs(5) {
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
    }
    assert_eq!(events.iter().next().map(|e| e.token()), Some(mio::Token(7)));
    let mut buf = [0u8; 8];
    assert_eq!(b.recv_from(&mut buf).unwrap().0, 3);
    // The second datagram is still queued: readable again without new input.
    poll.registry()
        .reregister(&mut b, mio::Token(7), mio::Interest::READABLE)
        .unwrap();
    poll.poll(&mut events, Some(Duration::from_millis(200)))
        .unwrap();
    assert!(!events.is_empty(), "buffered data must stay readable");
    assert_eq!(b.recv_from(&mut buf).unwrap().0, 3);
    assert_eq!(
        b.recv_from(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    poll.registry().deregister(&mut b).unwrap();
}

#[test]
fn blocking_receive_times_out_on_a_quiet_link() {
    let (_a, mut b) = pair(1500);
    b.set_nonblocking(false).unwrap();
    b.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let mut buf = [0u8; 8];
    let start = Instant::now();
    let e = b.recv_from(&mut buf).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert!(start.elapsed() >= Duration::from_millis(5));
}

#[test]
fn huge_timeouts_mean_no_deadline() {
    let (mut a, mut b) = pair(1500);
    b.set_nonblocking(false).unwrap();
    b.set_read_timeout(Some(Duration::MAX)).unwrap();
    a.set_write_timeout(Some(Duration::MAX)).unwrap();
    let bm = mac(&b);
    a.send_to(b"x", (bm, 20)).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(b.recv_from(&mut buf).unwrap().0, 1);
}

#[test]
fn socket_is_send() {
    fn is_send<T: Send>() {}
    is_send::<EdpSocket>();
}

//! `UdpLink` on loopback, without privileges.

use std::time::{Duration, Instant};

use super::*;
use crate::eth::testing::ETHERTYPE_EDP;

fn mac(n: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, n])
}

/// `n` links on 127.0.0.1 that all know each other (and themselves).
fn mesh(n: u8) -> Vec<UdpLink> {
    let mut links: Vec<UdpLink> = (1..=n)
        .map(|i| UdpLink::open(&UdpConfig::new("127.0.0.1:0".parse().unwrap(), mac(i))).unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = links.iter().map(|l| l.local_addr().unwrap()).collect();
    for l in links.iter_mut() {
        for (i, a) in addrs.iter().enumerate() {
            l.add_peer(mac(i as u8 + 1), *a).unwrap();
        }
    }
    links
}

fn frame(dst: MacAddr, src: MacAddr, seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(18)];
    f[..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f[12..14].copy_from_slice(&ETHERTYPE_EDP.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Every frame `l` receives within a short bound, in order (loopback
/// delivers at once; the bound only ends the wait for frames that must
/// not come).
fn drain(l: &mut UdpLink, want: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while out.len() < want && Instant::now() < until {
        match l.recv_with(16, &mut |f| out.push(f.to_vec())) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("{e}"),
        }
    }
    // Anything else that arrived by now.
    std::thread::sleep(Duration::from_millis(20));
    let _ = l.recv_with(64, &mut |f| out.push(f.to_vec()));
    out
}

#[test]
fn unicast_batches_both_ways() {
    let mut l = mesh(2);
    let (a, b) = l.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let frames: Vec<Vec<u8>> = (0..100)
        .map(|i| frame(mac(2), mac(1), i, 64 + i as usize))
        .collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    let mut sent = 0;
    while sent < refs.len() {
        sent += a.send_batch(&refs[sent..]).unwrap();
    }
    assert_eq!(drain(b, 100), frames);
    // Gathered, and back the other way with send.
    let f = frame(mac(1), mac(2), 7, 1514);
    let pieces = [
        IoSlice::new(&f[..3]),
        IoSlice::new(&f[3..20]),
        IoSlice::new(&f[20..]),
    ];
    assert_eq!(b.send_batch_vectored(&[&pieces]).unwrap(), 1);
    b.send(&frame(mac(1), mac(2), 8, 60)).unwrap();
    assert_eq!(drain(a, 2), vec![f, frame(mac(1), mac(2), 8, 60)]);
    assert_eq!(a.stats().sent, 100);
    assert_eq!(b.stats().received, 100);
    assert_eq!((a.mtu(), a.max_frame()), (1500, 1514));
}

#[test]
fn broadcast_goes_to_every_peer_and_multicast_to_members() {
    let mut l = mesh(3);
    let g = MacAddr([0x01, 0, 0x5e, 0, 0, 7]);
    l[2].join_group(g).unwrap();
    l[0].send(&frame(MacAddr::BROADCAST, mac(1), 1, 64))
        .unwrap();
    l[0].send(&frame(g, mac(1), 2, 64)).unwrap();
    assert_eq!(l[0].stats().sent, 4, "two frames to two peers each");
    let seqs = |v: Vec<Vec<u8>>| -> Vec<u8> { v.iter().map(|f| f[17]).collect() };
    assert_eq!(seqs(drain(&mut l[1], 1)), vec![1]);
    assert_eq!(seqs(drain(&mut l[2], 2)), vec![1, 2]);
    assert_eq!(
        l[1].stats().not_for_us,
        1,
        "multicast to a group not joined"
    );
    // The sender itself receives nothing of its own group frames.
    assert!(drain(&mut l[0], 0).is_empty());
    l[2].leave_group(g).unwrap();
    assert_eq!(
        l[2].leave_group(g).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        l[2].join_group(mac(1)).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn bad_datagrams_are_counted_and_dropped() {
    let mut l = mesh(2);
    let b_addr = l[1].local_addr().unwrap();
    // From an address not in the table.
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger
        .send_to(&frame(mac(2), mac(1), 1, 64), b_addr)
        .unwrap();
    // From a peer's socket: too short, forged source MAC, someone else's MAC,
    // too long for the MTU.
    let a_sock = &l[0].sock;
    a_sock.send_to(&[0u8; 13], b_addr).unwrap();
    a_sock
        .send_to(&frame(mac(2), mac(9), 2, 64), b_addr)
        .unwrap();
    a_sock
        .send_to(&frame(mac(5), mac(1), 3, 64), b_addr)
        .unwrap();
    a_sock
        .send_to(&frame(mac(2), mac(1), 4, 1515), b_addr)
        .unwrap();
    // And one good frame, which alone gets through.
    l[0].send(&frame(mac(2), mac(1), 5, 64)).unwrap();
    let got = drain(&mut l[1], 1);
    assert_eq!(got, vec![frame(mac(2), mac(1), 5, 64)]);
    let st = l[1].stats();
    assert_eq!(
        (
            st.unknown_source,
            st.malformed,
            st.forged,
            st.not_for_us,
            st.received
        ),
        (1, 2, 1, 1, 1)
    );
}

#[test]
fn send_errors_and_limits() {
    let mut l = mesh(2);
    let a = &mut l[0];
    let e = a.send(&frame(mac(9), mac(1), 1, 64)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable);
    assert!(e.to_string().contains("02:00:00:00:00:09"), "{e}");
    assert_eq!(a.stats().unroutable, 1);
    assert_eq!(
        a.send(&[0u8; 1515]).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        a.send(&[0u8; 13]).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    // A bad frame after good ones ends the batch before it.
    let good = frame(mac(2), mac(1), 1, 64);
    let bad = frame(mac(9), mac(1), 2, 64);
    assert_eq!(a.send_batch(&[&good, &good, &bad, &good]).unwrap(), 2);
    // Config checks.
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut c = UdpConfig::new(any, MacAddr::BROADCAST);
    assert_eq!(
        UdpLink::open(&c).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    c.mac = mac(1);
    c.mtu = MAX_UDP_PAYLOAD;
    assert_eq!(
        UdpLink::open(&c).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    c.mtu = 9000;
    c.peers = vec![(mac(2), any), (mac(3), any)];
    let e = UdpLink::open(&c).unwrap_err();
    assert!(e.to_string().contains("already"), "{e}");
    c.peers.truncate(1);
    let jumbo = UdpLink::open(&c).unwrap();
    assert_eq!(jumbo.max_frame(), 9014);
}

#[test]
fn jumbo_frames_and_mio_readiness() {
    use mio::unix::SourceFd;
    use mio::{Events, Interest, Poll, Token};
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut cfg = UdpConfig::new(any, mac(1));
    cfg.mtu = 9000;
    let mut a = UdpLink::open(&cfg).unwrap();
    cfg.mac = mac(2);
    let mut b = UdpLink::open(&cfg).unwrap();
    a.add_peer(mac(2), b.local_addr().unwrap()).unwrap();
    b.add_peer(mac(1), a.local_addr().unwrap()).unwrap();
    let mut poll = Poll::new().unwrap();
    let fd = b.raw_fd().unwrap();
    poll.registry()
        .register(&mut SourceFd(&fd), Token(1), Interest::READABLE)
        .unwrap();
    let f = frame(mac(2), mac(1), 1, 9014);
    a.send(&f).unwrap();
    let mut events = Events::with_capacity(4);
    poll.poll(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    assert!(events
        .iter()
        .any(|e| e.token() == Token(1) && e.is_readable()));
    let mut buf = vec![0u8; 9014];
    assert_eq!(b.recv(&mut buf).unwrap(), 9014);
    assert_eq!(buf, f);
    assert_eq!(
        b.recv(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

#[test]
fn derived_macs_are_local_unicast_and_name_address_and_port() {
    let a: SocketAddr = "127.0.0.1:19470".parse().unwrap();
    let m = derived_mac(a);
    assert_eq!(m, MacAddr([0x02, 0, 0, 1, 0x4c, 0x0e]));
    assert!(!m.is_group());
    // Another port, another MAC; another host, another MAC.
    assert_ne!(derived_mac("127.0.0.1:19471".parse().unwrap()), m);
    assert_ne!(
        derived_mac("10.0.0.2:19470".parse().unwrap()),
        derived_mac("10.0.0.3:19470".parse().unwrap())
    );
    // fe80::1:2:3 ends in bytes .. 00 02 00 03: the last three are 02 00 03.
    let v6 = derived_mac("[fe80::1:2:3]:7".parse().unwrap());
    assert_eq!(v6, MacAddr([0x02, 0x02, 0x00, 0x03, 0, 7]));
}

#[test]
fn a_udp_link_guarantees_frame_integrity_and_a_fault_injector_around_it_does_not() {
    let mut links = mesh(1);
    let l = links.pop().unwrap();
    assert!(l.frame_integrity(), "UDP's checksum guards every datagram");
    let boxed: Box<dyn Link> = Box::new(l);
    assert!(boxed.frame_integrity(), "Box forwards the answer");
    let faulty = crate::fault::FaultLink::new(boxed, crate::fault::FaultConfig::seeded(1));
    assert!(
        !faulty.frame_integrity(),
        "the fault injector may flip bits"
    );
}

/// A link with `admission`, bound on loopback, its MAC derived from its
/// address (as first contact requires).
fn open_admitting(admission: UdpAdmission) -> UdpLink {
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let mut c = UdpConfig::new(addr, derived_mac(addr));
    c.admission = admission;
    UdpLink::open(&c).unwrap()
}

#[test]
fn first_contact_is_admitted_by_network_and_learned_both_ways() {
    let mut server = open_admitting(UdpAdmission {
        nets: vec!["127.0.0.0/8".parse().unwrap()],
        check: None,
    });
    let s_addr = server.local_addr().unwrap();
    let s_mac = derived_mac(s_addr);
    let mut client = open_admitting(UdpAdmission::default());
    let c_addr = client.local_addr().unwrap();
    let c_mac = derived_mac(c_addr);
    // The client knows the server (as fabtests' client does); the server
    // knows no one.
    client.peers().add(s_mac, s_addr).unwrap();
    client.send(&frame(s_mac, c_mac, 1, 64)).unwrap();
    assert_eq!(drain(&mut server, 1), vec![frame(s_mac, c_mac, 1, 64)]);
    assert_eq!(server.stats().admitted, 1);
    assert_eq!(server.peers().lookup(c_mac), Some(c_addr));
    // The server answers its new peer without being told its address.
    server.send(&frame(c_mac, s_mac, 2, 64)).unwrap();
    assert_eq!(drain(&mut client, 1), vec![frame(c_mac, s_mac, 2, 64)]);
    assert_eq!(client.stats().admitted, 0, "the client knew the server");
}

#[test]
fn first_contact_outside_the_networks_needs_the_check_and_the_derived_mac() {
    let mut l = open_admitting(UdpAdmission {
        nets: vec!["10.0.0.0/8".parse().unwrap()],
        check: Some(std::sync::Arc::new(|f: &[u8]| {
            f.len() > 14 && f[14] == 0xAA
        })),
    });
    let to = l.local_addr().unwrap();
    let me = derived_mac(to);
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let s_mac = derived_mac(stranger.local_addr().unwrap());
    // Not in 10/8, the check fails: counted, dropped, not learned.
    stranger.send_to(&frame(me, s_mac, 1, 64), to).unwrap();
    // Another source MAC than the address gives: a forgery.
    let mut forged = frame(me, mac(7), 2, 64);
    forged[14] = 0xAA;
    stranger.send_to(&forged, to).unwrap();
    // Passes the check: admitted.
    let mut good = frame(me, s_mac, 3, 64);
    good[14] = 0xAA;
    stranger.send_to(&good, to).unwrap();
    assert_eq!(drain(&mut l, 1), vec![good]);
    let st = l.stats();
    assert_eq!(
        (st.unknown_source, st.forged, st.admitted, st.received),
        (1, 1, 1, 1)
    );
    // Known now: the check no longer applies.
    stranger.send_to(&frame(me, s_mac, 4, 64), to).unwrap();
    assert_eq!(drain(&mut l, 1).len(), 1);
}

#[test]
fn a_larger_receive_mtu_hears_peers_of_larger_links() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut small = UdpConfig::new(any, mac(1));
    small.mtu = 1400;
    small.rx_mtu = Some(9000);
    let mut a = UdpLink::open(&small).unwrap();
    assert_eq!((a.max_frame(), a.max_rx_frame()), (1414, 9014));
    let mut big = UdpConfig::new(any, mac(2));
    big.mtu = 9000;
    let mut b = UdpLink::open(&big).unwrap();
    a.add_peer(mac(2), b.local_addr().unwrap()).unwrap();
    b.add_peer(mac(1), a.local_addr().unwrap()).unwrap();
    b.send(&frame(mac(1), mac(2), 1, 9014)).unwrap();
    assert_eq!(drain(&mut a, 1), vec![frame(mac(1), mac(2), 1, 9014)]);
    // What a sends stays within its own MTU.
    assert!(a.send(&frame(mac(2), mac(1), 2, 1415)).is_err());
}

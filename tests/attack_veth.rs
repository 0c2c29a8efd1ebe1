//! An attacker on the same Ethernet segment: forged frames from
//! a raw packet socket in one namespace against EDP/ESP sockets in
//! another, over veth pairs and bridges (`vcluster` through `testkit`).
//! Needs root; without it each test prints why and returns, except under
//! CI=true where it fails.

use std::io::{ErrorKind, Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use edp::echo::{EchoRepr, ECHO_HEADER_LEN, ECHO_REPLY, ECHO_REQUEST};
use edp::wire::emit_edp_frame;
use edp::{EdpConfig, EdpSocket, MacAddr, ETHERTYPE_EDP};
use esp::wire::{emit_esp_frame, EspFrame, EspRepr, Flags, Seq};
use esp::{EspConfig, EspListener, EspStream};
use link::eth::EthernetRepr;
use link::Link;
use link::{PacketConfig, PacketLink, ETH_P_ALL};
use runtime::auth::{AuthKey, AuthSetting};
use runtime::CONTROL_PORT;
use runtime::ETHERTYPE_ESP;
use testkit::{setup, wait_until, Host, TestHost};

/// Liveness bound for something that must happen (not a timing check).
const PATIENCE: Duration = Duration::from_secs(10);
/// How long the attacker waits for an answer that must not come.
const QUIET: Duration = Duration::from_millis(300);

/// The attacker's raw socket on `host`: sends any bytes, sees every frame.
fn raw(host: &Host) -> PacketLink {
    host.run(|| {
        PacketLink::open(
            &host.iface,
            &PacketConfig {
                ethertype: ETH_P_ALL,
                ..PacketConfig::default()
            },
        )
        .unwrap()
    })
}

/// Frames from `from` that `link` receives within `limit` and that `pred`
/// accepts.
fn frames_from(
    link: &mut PacketLink,
    from: MacAddr,
    limit: Duration,
    pred: impl Fn(&[u8]) -> bool,
) -> usize {
    let end = Instant::now() + limit;
    let mut buf = vec![0u8; 2048];
    let mut n = 0;
    while Instant::now() < end {
        match link.recv(&mut buf) {
            Ok(len) => {
                let f = &buf[..len];
                if len >= 14 && f[6..12] == from.0 && pred(f) {
                    n += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(200))
            }
            Err(e) => panic!("{e}"),
        }
    }
    n
}

/// An echo request frame from (`src`, port 9) to `dst`'s control port.
fn echo_request(dst: MacAddr, src: MacAddr, ident: u16) -> Vec<u8> {
    let mut payload = [0u8; ECHO_HEADER_LEN + 8];
    EchoRepr {
        kind: ECHO_REQUEST,
        ident,
        seq: 1,
    }
    .emit(&mut payload);
    let mut f = vec![0u8; 128];
    let eth = EthernetRepr {
        dst,
        src,
        ethertype: ETHERTYPE_EDP,
    };
    let n = emit_edp_frame(&mut f, &eth, 9, CONTROL_PORT, &payload).unwrap();
    f.truncate(n.max(60));
    f
}

/// Offset of the echo kind byte: Ethernet and EDP headers.
const ECHO_KIND_AT: usize = 14 + 6;

fn is_echo_reply(f: &[u8]) -> bool {
    f.len() > ECHO_KIND_AT
        && u16::from_be_bytes([f[12], f[13]]) == ETHERTYPE_EDP
        && f[ECHO_KIND_AT] == ECHO_REPLY
}

/// `frame` with an IEEE 802.1Q tag for VLAN `vid` inserted after the MACs.
fn tagged(frame: &[u8], vid: u16) -> Vec<u8> {
    let mut v = frame[..12].to_vec();
    v.extend_from_slice(&0x8100u16.to_be_bytes());
    v.extend_from_slice(&vid.to_be_bytes());
    v.extend_from_slice(&frame[12..]);
    v
}

fn esp_frame(dst: MacAddr, src: MacAddr, repr: &EspRepr, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 2048];
    let eth = EthernetRepr {
        dst,
        src,
        ethertype: ETHERTYPE_ESP,
    };
    let n = emit_esp_frame(&mut f, &eth, repr, payload).unwrap();
    f.truncate(n.max(60));
    f
}

fn esp_flags(f: &[u8]) -> Option<Flags> {
    EspFrame::parse(f, ETHERTYPE_ESP, 2048)
        .ok()
        .map(|e| e.header.flags)
}

// ---------------------------------------------------------------- break 6

/// Break 6: frames tagged with a VLAN the host does not use were accepted
/// (echo answered, ESP SYN answered): the kernel strips the tag into the
/// packet's metadata and the runtime never looked. Now the runtime's kernel
/// filter drops frames whose VLAN tag is present with a nonzero VLAN id
/// (a socket on a VLAN interface sees its frames untagged).
#[test]
fn frames_tagged_for_a_foreign_vlan_are_not_answered() {
    let Some(net) = setup("vlan_foreign", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let l = EspListener::bind((bi.iface.as_str(), 7600)).unwrap();
        let rt = l.runtime().clone();
        ready_tx
            .send(wait_until(PATIENCE, || rt.holds_echo_lease()))
            .unwrap();
        stop_rx.recv().unwrap();
        (l.stats(), rt.stats())
    });
    assert!(ready_rx.recv().unwrap());
    let mut link = raw(&a);
    // Untagged: answered (the harness works).
    link.send(&echo_request(b.mac, a.mac, 1)).unwrap();
    assert_eq!(
        frames_from(&mut link, b.mac, QUIET, is_echo_reply),
        1,
        "untagged echo answered"
    );
    // Tagged for VLAN 42: not answered.
    link.send(&tagged(&echo_request(b.mac, a.mac, 2), 42))
        .unwrap();
    assert_eq!(
        frames_from(&mut link, b.mac, QUIET, is_echo_reply),
        0,
        "VLAN 42 echo answered"
    );
    let syn = EspRepr {
        src_port: 999,
        dst_port: 7600,
        flags: Flags::SYN,
        seq: Seq(1),
        window: 10,
        ..Default::default()
    };
    link.send(&tagged(&esp_frame(b.mac, a.mac, &syn, &[]), 42))
        .unwrap();
    let synacks = frames_from(&mut link, b.mac, QUIET, |f| {
        esp_flags(f) == Some(Flags::SYN | Flags::ACK)
    });
    assert_eq!(synacks, 0, "VLAN 42 SYN answered");
    stop_tx.send(()).unwrap();
    let (ls, _) = server.join().unwrap();
    assert_eq!(ls.syns_accepted + ls.cookies_sent, 0, "{ls:?}");
}

/// Break 6: a frame whose source MAC is the receiver's own is never
/// answered (a forged or looped frame), and is counted.
#[test]
fn frames_from_our_own_mac_are_not_answered() {
    let Some(net) = setup("own_mac_src", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let s = EdpSocket::bind((bi.iface.as_str(), 7601)).unwrap();
        let rt = s.runtime().clone();
        ready_tx
            .send(wait_until(PATIENCE, || rt.holds_echo_lease()))
            .unwrap();
        stop_rx.recv().unwrap();
        rt.stats()
    });
    assert!(ready_rx.recv().unwrap());
    let mut link = raw(&a);
    link.send(&echo_request(b.mac, b.mac, 3)).unwrap();
    assert_eq!(frames_from(&mut link, b.mac, QUIET, is_echo_reply), 0);
    stop_tx.send(()).unwrap();
    let st = server.join().unwrap();
    assert!(st.bad_source >= 1, "{st:?}");
    assert_eq!(st.responder.echo_replies, 0, "{st:?}");
}

/// Break 6: segments sent to a group (broadcast) destination are never
/// taken by an ESP stream, nor datagrams by an EDP socket connected to a
/// unicast peer; both are counted.
#[test]
fn group_addressed_segments_and_datagrams_are_dropped() {
    let Some(net) = setup("group_dst", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let bi = b.clone();
    let server = b.spawn(move || {
        let l = EspListener::bind((bi.iface.as_str(), 7602)).unwrap();
        let mut d = EdpSocket::bind((bi.iface.as_str(), 7603)).unwrap();
        tx.send(()).unwrap();
        let (mut s, peer) = l.accept_timeout(Some(PATIENCE)).unwrap();
        d.connect(peer.0, 5).unwrap();
        let mut buf = [0u8; 64];
        s.read_exact(&mut buf[..4]).unwrap();
        let rcv_nxt_info = s.stats();
        tx.send(()).unwrap();
        go_rx.recv().unwrap();
        // The stream still works; the forged segment left no trace.
        s.write_all(b"pong").unwrap();
        d.set_read_timeout(Some(QUIET)).unwrap();
        let got = d.recv_from(&mut buf);
        (
            rcv_nxt_info,
            s.slot_stats(),
            got.map(|x| x.0).map_err(|e| e.kind()),
            d.stats(),
            s.stats(),
        )
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let mut c = a.run(|| EspStream::connect_timeout((ai.as_str(), bmac, 7602), PATIENCE).unwrap());
    c.write_all(b"ping").unwrap();
    rx.recv().unwrap();
    let local_port = c.local_addr().unwrap().2;
    let mut link = raw(&a);
    // A data segment to broadcast with the stream's ports; and an EDP
    // datagram to broadcast from the connected peer's address.
    let seg = EspRepr {
        src_port: local_port,
        dst_port: 7602,
        flags: Flags::ACK,
        seq: Seq(0),
        ack: Seq(0),
        window: 10,
        ..Default::default()
    };
    link.send(&esp_frame(MacAddr::BROADCAST, a.mac, &seg, b"evil"))
        .unwrap();
    let mut f = vec![0u8; 128];
    let eth = EthernetRepr {
        dst: MacAddr::BROADCAST,
        src: a.mac,
        ethertype: ETHERTYPE_EDP,
    };
    let n = emit_edp_frame(&mut f, &eth, 5, 7603, b"evil").unwrap();
    link.send(&f[..n.max(60)]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    go_tx.send(()).unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"pong");
    let (_, slot, got, dstats, _) = server.join().unwrap();
    assert_eq!(slot.group_addressed, 1, "{slot:?}");
    assert_eq!(
        got,
        Err(ErrorKind::TimedOut),
        "group datagram delivered to a connected socket"
    );
    assert!(dstats.group_dropped >= 1, "{dstats:?}");
}

// ---------------------------------------------------------------- break 5

/// Role of a child process (`ATTACK_ROLE`), run by `child_role`.
const ROLE: &str = "ATTACK_ROLE";

#[test]
#[ignore = "child process of other tests"]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let iface = std::env::var("ATTACK_IFACE").unwrap();
    let port: u16 = std::env::var("ATTACK_PORT").unwrap().parse().unwrap();
    match role.as_str() {
        // an ESP server: accept one connection, echo what it reads
        "esp_echo" => {
            let l = EspListener::bind((iface.as_str(), port)).unwrap();
            println!("READY");
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
                println!("ECHOED {n}");
            }
        }
        r => panic!("unknown role {r}"),
    }
}

fn env(role: &str, host: &Host, port: u16) -> Vec<(&'static str, String)> {
    vec![
        (ROLE, role.to_string()),
        ("ATTACK_IFACE", host.iface.clone()),
        ("ATTACK_PORT", port.to_string()),
    ]
}

/// Break 5: only SYNs to ports nobody owns drew RST; a client whose server
/// process died (kill -9) waited for its retransmission limit. Now the
/// host's RST responder answers every segment (but RSTs) to a port no
/// process owns: the client learns at once that the connection is gone.
#[test]
fn segments_to_a_dead_servers_port_draw_rst() {
    let Some(net) = setup("dead_server_rst", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    // This process holds b's responder role (an ESP listener on another
    // port), then the server starts in a child process.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let bi = b.clone();
    let holder = b.spawn(move || {
        let l = EspListener::bind((bi.iface.as_str(), 7700)).unwrap();
        let rt = l.runtime().clone();
        ready_tx
            .send(wait_until(PATIENCE, || rt.holds_rst_lease()))
            .unwrap();
        stop_rx.recv().unwrap();
        rt.stats()
    });
    assert!(ready_rx.recv().unwrap(), "no RST responder on b");
    let mut server = b.spawn_test_child("child_role", &env("esp_echo", &b, 7701));
    server.expect_line("READY");
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let (err, took) = a.run(move || {
        let mut c = EspStream::connect_timeout((ai.as_str(), bmac, 7701), PATIENCE).unwrap();
        c.write_all(b"one").unwrap();
        let mut buf = [0u8; 3];
        c.read_exact(&mut buf).unwrap();
        server.expect_line("ECHOED");
        server.kill();
        let start = Instant::now();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = c.write_all(b"two");
        let e = c.read(&mut buf).unwrap_err();
        (e.kind(), start.elapsed())
    });
    stop_tx.send(()).unwrap();
    let st = holder.join().unwrap();
    assert_eq!(
        err,
        ErrorKind::ConnectionReset,
        "after {took:?}, responder {st:?}"
    );
    assert!(st.responder.resets >= 1, "{st:?}");
    eprintln!("reset {took:?} after the server's death");
}

// ---------------------------------------------------------------- authentication

fn keyed(key: Option<AuthKey>) -> EspConfig {
    let mut cfg = EspConfig::default();
    cfg.runtime.link.auth = match key {
        Some(k) => AuthSetting::Key(k),
        None => AuthSetting::Off,
    };
    cfg
}

/// Frames from `from` of `ethertype` that `link` receives within `limit`.
fn capture(link: &mut PacketLink, from: MacAddr, ethertype: u16, limit: Duration) -> Vec<Vec<u8>> {
    let end = Instant::now() + limit;
    let mut buf = vec![0u8; 2048];
    let mut got = Vec::new();
    while Instant::now() < end {
        match link.recv(&mut buf) {
            Ok(len)
                if len >= 14
                    && buf[6..12] == from.0
                    && u16::from_be_bytes([buf[12], buf[13]]) == ethertype =>
            {
                got.push(buf[..len].to_vec())
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(200))
            }
            Err(e) => panic!("{e}"),
        }
    }
    got
}

/// With a cluster key, an on-path attacker (who sees every frame but has
/// no key) can neither inject in-window data nor reset the stream with an
/// exact RST (sequence number read off the wire), nor replay a captured
/// frame; all are counted and dropped before any socket sees them. A host
/// without the key cannot connect at all.
#[test]
fn authenticated_stream_drops_forged_and_replayed_frames() {
    let Some(net) = setup("auth_stream", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let key = AuthKey::new([7; 16]);
    let total = 2 << 20;
    let (tx, rx) = mpsc::channel();
    let bi = b.clone();
    let k = key.clone();
    let server = b.spawn(move || {
        let l = EspListener::bind_with(&bi.iface, 7800, keyed(Some(k))).unwrap();
        tx.send(()).unwrap();
        let (mut s, _) = l.accept_timeout(Some(PATIENCE)).unwrap();
        let mut got = vec![0u8; total];
        s.read_exact(&mut got).unwrap();
        s.write_all(b"done").unwrap();
        let ok = got == testkit::pattern::pattern(total, 5);
        (ok, s.stats(), l.runtime().stats())
    });
    rx.recv().unwrap();
    let mut link = raw(&a);
    // The on-path observer also sees what a sends.
    let mut tap = a.run(|| {
        PacketLink::open(
            &a.iface,
            &PacketConfig {
                ethertype: ETH_P_ALL,
                ignore_outgoing: false,
                ..PacketConfig::default()
            },
        )
        .unwrap()
    });
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let k = key.clone();
    let mut c = a.run(|| {
        EspStream::connect_timeout_with(&ai, bmac, 7800, keyed(Some(k)), PATIENCE).unwrap()
    });
    let data = testkit::pattern::pattern(total, 5);
    c.write_all(&data[..total / 2]).unwrap();
    // The attacker reads the server's ACKs off the wire: the last one
    // carries the server's RCV.NXT, the exact sequence number of an RST.
    let acks = capture(&mut link, b.mac, ETHERTYPE_ESP, Duration::from_millis(200));
    let last = acks.last().expect("saw the server's ACKs").clone();
    let body = &last[..last.len() - runtime::auth::TRAILER_LEN];
    let seen = EspFrame::parse(body, ETHERTYPE_ESP, 2048).unwrap().header;
    let forge = |flags: Flags, payload: &[u8]| {
        let repr = EspRepr {
            src_port: seen.dst_port,
            dst_port: seen.src_port,
            flags,
            seq: seen.ack,
            ack: seen.seq,
            window: 100,
            ..Default::default()
        };
        let mut f = esp_frame(b.mac, a.mac, &repr, payload);
        f.extend_from_slice(&[0x5a; 24]); // a guessed trailer
        f
    };
    link.send(&forge(Flags::ACK, b"evil data in the window"))
        .unwrap();
    link.send(&forge(Flags::RST, &[])).unwrap();
    link.send(&forge(Flags::FIN | Flags::ACK, &[])).unwrap();
    // A captured data segment with a valid tag, sent again.
    let sent = capture(&mut tap, a.mac, ETHERTYPE_ESP, Duration::from_millis(100));
    let replay = sent
        .iter()
        .max_by_key(|f| f.len())
        .expect("saw a's segments");
    link.send(replay).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    c.write_all(&data[total / 2..]).unwrap();
    let mut done = [0u8; 4];
    c.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done");
    let (ok, sstats, rts) = server.join().unwrap();
    assert!(ok, "stream corrupted: {sstats:?}");
    assert!(rts.auth.bad_tag >= 3, "{:?}", rts.auth);
    assert!(rts.auth.verified > 0, "{:?}", rts.auth);
    assert!(rts.auth.replayed >= 1, "{:?}", rts.auth);

    // Without the key: no connection (its SYNs fail authentication).
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let (tx, rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let l = EspListener::bind_with(&bi.iface, 7801, keyed(Some(key))).unwrap();
        tx.send(()).unwrap();
        let r = l.accept_timeout(Some(Duration::from_secs(2))).map(|_| ());
        (r.map_err(|e| e.kind()), l.runtime().stats().auth)
    });
    rx.recv().unwrap();
    let r = a.run(|| {
        EspStream::connect_timeout_with(&ai, bmac, 7801, keyed(None), Duration::from_secs(1))
            .map(|_| ())
    });
    assert!(r.is_err(), "a host without the key connected");
    let (accepted, auth) = server.join().unwrap();
    assert!(accepted.is_err());
    assert!(auth.bad_tag + auth.short >= 1, "{auth:?}");
}

// The config types are used by later tests.
#[allow(dead_code)]
fn _configs() -> (EdpConfig, EspConfig) {
    (EdpConfig::default(), EspConfig::default())
}

// The blind-attacker goodput measurement (three hosts: client, server,
// attacker; clean, CPU floor and attacked runs) is tests/attack_goodput.rs.

/// With a cluster key, EDP datagrams (the runtime's direct send path)
/// carry the trailer too: keyed sockets exchange datagrams, a forged
/// datagram from the peer's address is dropped and counted.
#[test]
fn authenticated_edp_datagrams() {
    let Some(net) = setup("auth_edp", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let key = AuthKey::new([3; 16]);
    let cfg = |k: &AuthKey| {
        let mut c = EdpConfig::default();
        c.runtime.link.auth = AuthSetting::Key(k.clone());
        c
    };
    let (tx, rx) = mpsc::channel();
    let (bi, k) = (b.clone(), key.clone());
    let server = b.spawn(move || {
        let mut s = EdpSocket::bind_with((bi.iface.as_str(), 7810), cfg(&k)).unwrap();
        assert_eq!(
            s.mtu(),
            1500 - runtime::auth::TRAILER_LEN - 6,
            "largest datagram"
        );
        tx.send(()).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = [0u8; 2048];
        let mut got = Vec::new();
        for _ in 0..2 {
            let (n, _, _) = s.recv_from(&mut buf).unwrap();
            got.push(buf[..n].to_vec());
        }
        (got, s.runtime().stats().auth)
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let mut c = a.run(|| EdpSocket::bind_with((ai.as_str(), 7811), cfg(&key)).unwrap());
    c.connect(bmac, 7810).unwrap();
    c.send(b"first").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // Forged, from the client's address and port, with a guessed trailer.
    let mut link = raw(&a);
    let mut f = vec![0u8; 128];
    let eth = EthernetRepr {
        dst: b.mac,
        src: a.mac,
        ethertype: ETHERTYPE_EDP,
    };
    let n = emit_edp_frame(&mut f, &eth, 7811, 7810, b"forged").unwrap();
    f.truncate(n.max(36));
    f.extend_from_slice(&[0xa5; 24]);
    link.send(&f).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let big = vec![0x42u8; 1500 - runtime::auth::TRAILER_LEN - 6];
    c.send(&big).unwrap();
    let (got, auth) = server.join().unwrap();
    assert_eq!(got, vec![b"first".to_vec(), big]);
    assert_eq!(auth.bad_tag, 1, "{auth:?}");
    assert_eq!(auth.verified, 2, "{auth:?}");
}

/// The RST responder answers at most `RESETS_PER_SEC` segments to closed
/// ports per second (a flood of them must not become an equal flood of
/// RSTs); the rest are counted.
#[test]
fn rsts_for_closed_ports_are_rate_limited() {
    let Some(net) = setup("rst_limit", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let bi = b.clone();
    let holder = b.spawn(move || {
        let l = EspListener::bind((bi.iface.as_str(), 7950)).unwrap();
        let rt = l.runtime().clone();
        ready_tx
            .send(wait_until(PATIENCE, || rt.holds_rst_lease()))
            .unwrap();
        stop_rx.recv().unwrap();
        rt.stats()
    });
    assert!(ready_rx.recv().unwrap());
    let mut link = raw(&a);
    let limit = runtime::RESETS_PER_SEC as usize;
    let n = 3 * limit;
    let start = Instant::now();
    for i in 0..n {
        let seg = EspRepr {
            src_port: 1000 + (i % 50) as u16,
            dst_port: 30000 + (i % 1000) as u16,
            flags: Flags::ACK,
            seq: Seq(i as u32),
            ack: Seq(1),
            window: 10,
            ..Default::default()
        };
        link.send(&esp_frame(b.mac, a.mac, &seg, b"x")).unwrap();
    }
    let sent_in = start.elapsed();
    let rsts = frames_from(&mut link, b.mac, Duration::from_millis(500), |f| {
        esp_flags(f).is_some_and(|fl| fl.rst())
    });
    stop_tx.send(()).unwrap();
    let st = holder.join().unwrap();
    assert!(
        sent_in < Duration::from_millis(900),
        "flood took {sent_in:?}: not one window"
    );
    assert!(rsts >= 1 && rsts <= limit, "{rsts} RSTs, {st:?}");
    assert_eq!(st.responder.resets as usize, rsts, "{st:?}");
    // Every frame that reached the runtime was answered or counted.
    assert_eq!(
        (st.responder.resets + st.responder.rate_limited) as usize,
        st.rx_frames as usize,
        "{st:?}"
    );
    assert!(st.responder.rate_limited as usize >= st.rx_frames as usize - limit);
}

/// The lease holder rescans the ports held elsewhere about once a second
/// even when nothing calls into its runtime (its service thread keeps the
/// responder's deadline).
#[test]
fn idle_lease_holder_rescans_every_second() {
    let Some(net) = setup("rescan_idle", 2, 1500) else {
        return;
    };
    let b = net.host(0).clone();
    let bi = b.clone();
    let st = b.spawn(move || {
        let l = EspListener::bind((bi.iface.as_str(), 7960)).unwrap();
        let rt = l.runtime().clone();
        assert!(wait_until(PATIENCE, || rt.holds_rst_lease()));
        let first = rt.stats().responder.rescans;
        std::thread::sleep(Duration::from_millis(3500));
        (first, rt.stats().responder.rescans)
    });
    let (first, last) = st.join().unwrap();
    assert!(last - first >= 3, "{first} -> {last} rescans in 3.5 s");
}

/// An accepted stream whose listener is gone: its port is used by the
/// connection only. A flood of forged ACKs from the attacker's own MAC to
/// that port matches no connection; once a second's RSTs are spent, the
/// server's kernel filter keeps only the connection's peer on that port,
/// so the rest of the flood never reaches user space (`rst_pauses`), and
/// the stream goes on.
#[test]
fn a_flood_to_a_connections_port_stops_at_the_kernel_filter() {
    let Some(net) = setup("conn_port_flood", 3, 1500) else {
        return;
    };
    let (a, b, c) = (
        net.host(0).clone(),
        net.host(1).clone(),
        net.host(2).clone(),
    );
    let (ready_tx, ready_rx) = mpsc::channel();
    let (flooded_tx, flooded_rx) = mpsc::channel::<()>();
    let bi = b.clone();
    let server = b.spawn(move || {
        let l = EspListener::bind((bi.iface.as_str(), 7960)).unwrap();
        let (mut s, _) = l.accept().unwrap();
        drop(l);
        let rt = s.runtime().clone();
        ready_tx.send(()).unwrap();
        flooded_rx.recv().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        (buf, rt.stats())
    });
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let client = a.spawn(move || {
        let mut s = EspStream::connect_timeout((ai.as_str(), bmac, 7960), PATIENCE).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s
    });
    ready_rx.recv().unwrap();
    let mut s = client.join().unwrap();
    let mut link = raw(&c);
    let limit = runtime::RESETS_PER_SEC as usize;
    let n = 20 * limit;
    for i in 0..n {
        let seg = EspRepr {
            src_port: 1000 + (i % 5000) as u16,
            dst_port: 7960,
            flags: Flags::ACK,
            seq: Seq(i as u32),
            ack: Seq(7),
            window: 10,
            ..Default::default()
        };
        link.send(&esp_frame(b.mac, c.mac, &seg, &[])).unwrap();
    }
    flooded_tx.send(()).unwrap();
    let echoed = a.run(move || {
        s.write_all(b"hello").unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        buf
    });
    let (got, st) = server.join().unwrap();
    assert_eq!((&got, &echoed), (b"hello", b"hello"));
    let reached = (st.responder.resets + st.responder.rate_limited) as usize;
    eprintln!("{n} forged ACKs sent, {reached} reached the server's runtime: {st:?}");
    assert!(st.responder.rst_pauses >= 1, "{st:?}");
    assert!(st.responder.resets as usize <= 2 * limit, "{st:?}");
    assert!(
        reached <= n / 2,
        "{reached} of {n} reached user space: {st:?}"
    );
}

//! Link outages on real links (`link::health`): two network
//! namespaces joined by a veth pair (harness in testkit), whose link the
//! test takes down and up again, or deletes and re-creates under the same
//! names and MACs (new interface indexes), while an ESP stream runs or an
//! EDP receiver sleeps. The stream completes byte-exact and the runtimes
//! count the outage; datagrams sent meanwhile are counted, not failed.
//! Needs root; without it each test prints why and returns, except under
//! CI=true. Bounded: every wait has a limit; the namespaces go with the
//! cluster, also on a panic.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use edp::{EdpConfig, EdpSocket};
use esp::{EspConfig, EspListener, EspStream};
use runtime::{EngineStats, LinkConfig, Runtime, RuntimeConfig, WaitPolicy};
use testkit::ip;
use testkit::pattern::{check, fill, Digest};
use testkit::{setup, wait_until, Cluster, Host};

/// Liveness bound of a stream or an arrival (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);
/// How long the link stays out.
const OUTAGE: Duration = Duration::from_millis(1500);
const STREAM: usize = 48 << 20;

/// What the test does to the link once the stream is under way.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// `ip link set <host 0's end> down`, then up.
    DownUp,
    /// The veth pair deleted, then created again with the same names and
    /// MACs (both ends get new indexes).
    Recreate,
}

/// Applies `fault` to the pair of `net` for [`OUTAGE`].
fn outage(net: &Cluster, fault: Fault) {
    let (a, b) = (net.host(0), net.host(1));
    match fault {
        Fault::DownUp => {
            ip(&["-n", &a.ns, "link", "set", &a.iface, "down"]);
            std::thread::sleep(OUTAGE);
            ip(&["-n", &a.ns, "link", "set", &a.iface, "up"]);
        }
        Fault::Recreate => {
            ip(&["-n", &a.ns, "link", "del", &a.iface]);
            std::thread::sleep(OUTAGE);
            recreate_pair(a, b, net.mtu());
        }
    }
}

/// Creates the veth pair between `a` and `b` again, with the same names,
/// MACs and `mtu` (new ifindexes), and sets both ends up.
fn recreate_pair(a: &Host, b: &Host, mtu: usize) {
    let mtu = mtu.to_string();
    ip(&[
        "link",
        "add",
        &a.iface,
        "netns",
        &a.ns,
        "address",
        &a.mac.to_string(),
        "mtu",
        &mtu,
        "type",
        "veth",
        "peer",
        "name",
        &b.iface,
        "netns",
        &b.ns,
        "address",
        &b.mac.to_string(),
        "mtu",
        &mtu,
    ]);
    for h in [a, b] {
        ip(&["-n", &h.ns, "link", "set", &h.iface, "up"]);
    }
}

/// An ESP stream of [`STREAM`] bytes from host 0 to host 1 with `fault`
/// applied once 8 MiB are written; returns both runtimes and the server's
/// counters when it read the stream's end.
fn stream_through(test: &str, fault: Fault) -> Option<(Runtime, Runtime, EngineStats)> {
    let net = setup(test, 2, 1500)?;
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (tx, rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let l = EspListener::bind_with(&bi.iface, 7400, EspConfig::default()).unwrap();
        tx.send(()).unwrap();
        let (mut s, _) = l.accept_timeout(Some(PATIENCE)).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut h = Digest::new();
        loop {
            let n = s.read(&mut buf).expect("read through the outage");
            if n == 0 {
                break;
            }
            check(&buf[..n], h.len(), 5).unwrap_or_else(|e| panic!("{e}"));
            h.update(&buf[..n]);
        }
        let at_end = s.runtime().stats();
        s.write_all(&h.report()).unwrap();
        s.close(Some(PATIENCE)).unwrap();
        (s.runtime().clone(), at_end)
    });
    rx.recv().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let (ai, bmac, w) = (a.iface.clone(), b.mac, written.clone());
    let client = a.spawn(move || {
        let mut s =
            EspStream::connect_timeout_with(&ai, bmac, 7400, EspConfig::default(), PATIENCE)
                .unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        let mut chunk = vec![0u8; 256 * 1024];
        let mut h = Digest::new();
        let mut sent = 0usize;
        while sent < STREAM {
            let n = (STREAM - sent).min(chunk.len());
            fill(&mut chunk[..n], sent as u64, 5);
            h.update(&chunk[..n]);
            s.write_all(&chunk[..n]).expect("write through the outage");
            sent += n;
            w.store(sent as u64, Ordering::Relaxed);
        }
        s.shutdown(Shutdown::Write).unwrap();
        let mut report = [0u8; 16];
        s.read_exact(&mut report).expect("the receiver's report");
        (
            h.hash(),
            Digest::parse_report(&report),
            s.stats(),
            s.runtime().clone(),
        )
    });
    assert!(
        wait_until(PATIENCE, || written.load(Ordering::Relaxed) >= 8 << 20),
        "the stream did not start"
    );
    outage(&net, fault);
    let (hash, (len, got_hash), conn, rta) = client.join().expect("client");
    let (rtb, server_at_end) = server.join().expect("server");
    eprintln!(
        "{test}: client {conn:?}\nclient runtime {:?}\nserver runtime {:?}",
        rta.stats(),
        rtb.stats()
    );
    assert_eq!(len, STREAM as u64, "stream length");
    assert_eq!(got_hash, hash, "stream bytes");
    Some((rta, rtb, server_at_end))
}

/// Waits (bounded) until `rt` counted a recovery of its link (the check
/// after the kernel reports the interface running again; the stream may
/// end before it), and returns its counters. The runtime is driven
/// meanwhile, as an application still using it would: once its sockets
/// are idle nothing else runs its link checks.
fn recovered(rt: &Runtime) -> EngineStats {
    assert!(
        wait_until(PATIENCE, || {
            let _ = rt.drive();
            rt.stats().link.recoveries >= 1
        }),
        "no recovery counted: {:?}",
        rt.stats().link
    );
    rt.stats()
}

#[test]
fn an_esp_stream_survives_its_link_going_down_and_up() {
    let Some((a, _b, _)) = stream_through("outage_down_up", Fault::DownUp) else {
        return;
    };
    let a = recovered(&a);
    assert!(a.link.outages >= 1, "{:?}", a.link);
    assert!(a.link.recoveries >= 1, "{:?}", a.link);
    assert_eq!(a.send_errors, 0, "no fatal send error");
}

#[test]
fn an_esp_stream_survives_its_interface_being_recreated() {
    let Some((a, _b, server)) = stream_through("outage_recreate", Fault::Recreate) else {
        return;
    };
    let s = recovered(&a);
    assert!(
        s.link.rebinds >= 1,
        "client: socket not bound again: {:?}",
        s.link
    );
    assert!(s.link.recoveries >= 1, "client: {:?}", s.link);
    // The server's interface was deleted and re-created too: its socket
    // was bound again, and the link counted itself back up before the
    // stream's last bytes were read through the new interface (frames
    // arriving while it counts as down make it check the carrier at once).
    let s = server.link;
    assert!(s.rebinds >= 1, "server: socket not bound again: {s:?}");
    assert!(
        s.outages >= 1 && s.recoveries >= 1 && !s.down,
        "server: link still counted down at the stream's end: {s:?}"
    );
}

/// An EDP socket on `host` with a receive ring, sleeping when it waits.
fn edp_socket(host: &Host, port: u16) -> EdpSocket {
    let cfg = EdpConfig {
        runtime: RuntimeConfig {
            link: LinkConfig {
                rx_ring: Some(1 << 20),
                ..LinkConfig::default()
            },
            ..RuntimeConfig::default()
        },
        wait: WaitPolicy::Block,
        ..EdpConfig::default()
    };
    let iface = host.iface.clone();
    host.run(move || EdpSocket::bind_with((iface.as_str(), port), cfg).unwrap())
}

#[test]
fn edp_datagrams_during_an_outage_are_counted_and_a_sleeping_reader_wakes_up() {
    for fault in [Fault::DownUp, Fault::Recreate] {
        let Some(net) = setup("outage_edp", 2, 1500) else {
            return;
        };
        let (a, b) = (net.host(0).clone(), net.host(1).clone());
        let mut tx = edp_socket(&a, 7500);
        let mut rx = edp_socket(&b, 7501);
        let dst = (b.mac, 7501);
        // B sleeps in its receive (ring, blocking wait) through the outage.
        let reader = std::thread::spawn(move || {
            rx.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut buf = [0u8; 64];
            let got = rx.recv_from(&mut buf).map(|(n, _, _)| buf[..n].to_vec());
            (got, rx.runtime().clone())
        });
        std::thread::sleep(Duration::from_millis(100));
        let before = tx.runtime().stats();
        match fault {
            Fault::DownUp => ip(&["-n", &a.ns, "link", "set", &a.iface, "down"]),
            Fault::Recreate => ip(&["-n", &a.ns, "link", "del", &a.iface]),
        }
        // Sending on a link that is out: the datagram is counted, the call
        // succeeds (kernel UDP counts what a device drops the same way).
        assert_eq!(tx.send_to(b"during", dst).unwrap(), 6);
        let during = tx.runtime().stats();
        assert!(during.tx_unsent > before.tx_unsent, "{during:?}");
        // Back: a datagram reaches the reader, which slept through it all.
        std::thread::sleep(OUTAGE);
        match fault {
            Fault::DownUp => ip(&["-n", &a.ns, "link", "set", &a.iface, "up"]),
            Fault::Recreate => recreate_pair(&a, &b, net.mtu()),
        }
        let mut sends = 0;
        while !reader.is_finished() && sends < 600 {
            let _ = tx.send_to(b"after", dst);
            sends += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        let (got, rtb) = reader.join().unwrap();
        let sa = recovered(tx.runtime());
        let sb = if fault == Fault::Recreate {
            recovered(&rtb)
        } else {
            rtb.stats()
        };
        eprintln!("{fault:?}: sender {:?}, receiver {:?}", sa.link, sb.link);
        assert_eq!(got.expect("a datagram after the outage"), b"after");
        assert!(
            sa.link.outages >= 1 && sa.link.recoveries >= 1,
            "{:?}",
            sa.link
        );
        if fault == Fault::Recreate {
            // The reader's interface was deleted too: its socket was bound
            // again (found through POLLERR or the periodic check).
            assert!(sb.link.rebinds >= 1, "{:?}", sb.link);
            assert!(sa.link.rebinds >= 1, "{:?}", sa.link);
        }
    }
}

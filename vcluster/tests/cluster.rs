//! The harness itself on real namespaces: 8 hosts on a bridge reach each
//! other (kernel UDP and TCP, raw AF_PACKET frames), names are unique,
//! threads and processes land in their namespace, and nothing is left
//! behind after drop, a panic, SIGTERM/SIGINT or rootless operation. Needs
//! root; without it each test prints why and returns, except under CI=true.

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use edp::MacAddr;
use link::Link;
use link::PacketLink;
use link::ETH_HEADER_LEN;
use testkit::pattern::{check, pattern};
use testkit::vcluster::{Cluster, Process, Signal, Topology};
use testkit::{setup, skip};

/// Liveness bound for anything that must arrive (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(10);

/// IEEE 802 "local experimental" ethertype: nothing else uses it.
const ETHERTYPE_TEST: u16 = 0x88b5;

fn ns_exists(name: &str) -> bool {
    Path::new(&format!("/run/netns/{name}")).exists()
}

fn listed_namespaces() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_gone(names: &[String]) {
    let list = listed_namespaces();
    for n in names {
        assert!(!ns_exists(n), "namespace {n} survived");
        assert!(
            !list.lines().any(|l| l.split_whitespace().next() == Some(n)),
            "ip netns list still shows {n}"
        );
    }
}

/// `ip -o <args>` run inside `host` (through `Host::command`).
fn ip_in(host: &testkit::Host, args: &[&str]) -> String {
    let out = host.command("ip").arg("-o").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn eight_hosts_on_a_bridge_reach_each_other() {
    let Some(net) = setup("vc_bridge8", 8, 9000) else {
        return;
    };
    assert_eq!(net.len(), 8);
    let sw = net.switch_ns().expect("8 hosts use a bridge");
    // Every host: its interface with the MAC, MTU and address announced.
    for h in net.hosts() {
        assert!(h.ns.starts_with(net.name()), "{}", h.ns);
        let link = ip_in(h, &["link", "show", "dev", &h.iface]);
        assert!(link.contains("mtu 9000"), "{link}");
        assert!(link.contains(&h.mac.to_string()), "{link}");
        assert!(link.contains("state UP"), "{link}");
        let addr = ip_in(h, &["-4", "addr", "show", "dev", &h.iface]);
        assert!(addr.contains(&h.cidr()), "{addr}");
        assert!(addr.contains(&format!("brd {}", net.broadcast())), "{addr}");
        // IPv6 is off: no link-local address
        let v6 = ip_in(h, &["-6", "addr", "show", "dev", &h.iface]);
        assert!(v6.trim().is_empty(), "{v6}");
        // only lo and the one interface
        assert_eq!(ip_in(h, &["link", "show"]).lines().count(), 2);
    }
    let distinct = |f: &dyn Fn(&testkit::Host) -> String| {
        net.hosts().iter().map(f).collect::<BTreeSet<_>>().len()
    };
    assert_eq!(distinct(&|h| h.ns.clone()), 8);
    assert_eq!(distinct(&|h| h.iface.clone()), 8);
    assert_eq!(distinct(&|h| h.mac.to_string()), 8);
    assert_eq!(distinct(&|h| h.ip.to_string()), 8);
    for h in net.hosts() {
        assert_eq!(h.mac.0[0] & 0b11, 0b10, "locally administered unicast");
    }
    let ports = Command::new("ip")
        .args(["-n", sw, "-o", "link", "show", "master", "br0"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&ports.stdout).lines().count(), 8);

    // Kernel UDP between every ordered pair, 8000-byte datagrams (jumbo,
    // unfragmented). Sockets made inside run() stay in their namespace.
    let socks: Vec<UdpSocket> = net
        .hosts()
        .iter()
        .map(|h| {
            h.run(|| {
                let s = UdpSocket::bind((h.ip, 7000)).unwrap();
                s.set_read_timeout(Some(PATIENCE)).unwrap();
                s
            })
        })
        .collect();
    for (i, s) in socks.iter().enumerate() {
        for (j, h) in net.hosts().iter().enumerate() {
            if i != j {
                let mut d = pattern(8000, (i * 8 + j) as u64);
                d[..2].copy_from_slice(&[i as u8, j as u8]);
                assert_eq!(s.send_to(&d, (h.ip, 7000)).unwrap(), 8000);
            }
        }
    }
    let mut buf = vec![0u8; 9000];
    for (j, s) in socks.iter().enumerate() {
        let mut from = BTreeSet::new();
        for _ in 0..7 {
            let (n, addr) = s
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("host {j} got datagrams from {from:?} only: {e}"));
            assert_eq!(n, 8000);
            let i = buf[0] as usize;
            assert_eq!(buf[1] as usize, j);
            assert_eq!(addr.ip(), net.host(i).ip);
            check(&buf[2..n], 2, (i * 8 + j) as u64).unwrap();
            from.insert(i);
        }
        assert_eq!(from.len(), 7, "host {j}: {from:?}");
    }

    // Kernel TCP from the first host to the last.
    let (h0, h7) = (net.host(0), net.host(7));
    let listener = h7.run(|| TcpListener::bind((h7.ip, 7001)).unwrap());
    let mut c = h0.run(|| TcpStream::connect_timeout(&(h7.ip, 7001).into(), PATIENCE).unwrap());
    let (mut srv, peer) = listener.accept().unwrap();
    assert_eq!(peer.ip(), h0.ip);
    let data = pattern(1 << 20, 99);
    let writer = std::thread::spawn(move || c.write_all(&data).map(|_| c));
    let mut got = vec![0u8; 1 << 20];
    srv.read_exact(&mut got).unwrap();
    writer.join().unwrap().unwrap();
    check(&got, 0, 99).unwrap();

    // Raw Ethernet (AF_PACKET) across the bridge: unicast to one host,
    // broadcast to every other.
    let mut links: Vec<PacketLink> = net
        .hosts()
        .iter()
        .map(|h| h.run(|| PacketLink::new(&h.iface, ETHERTYPE_TEST).unwrap()))
        .collect();
    for (h, l) in net.hosts().iter().zip(&links) {
        assert_eq!(l.mac(), h.mac);
    }
    let frame = |dst: MacAddr, src: MacAddr, body: &[u8]| {
        let mut f = Vec::new();
        f.extend_from_slice(&dst.0);
        f.extend_from_slice(&src.0);
        f.extend_from_slice(&ETHERTYPE_TEST.to_be_bytes());
        f.extend_from_slice(body);
        f
    };
    let (m3, m6) = (net.host(3).mac, net.host(6).mac);
    links[3].send(&frame(m6, m3, b"unicast 3->6")).unwrap();
    links[3]
        .send(&frame(MacAddr::BROADCAST, m3, b"broadcast from 3"))
        .unwrap();
    let mut buf = vec![0u8; 9100];
    let mut recv_body = |l: &mut PacketLink| {
        let until = std::time::Instant::now() + PATIENCE;
        let n = loop {
            match l.recv(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < until, "no frame");
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(buf[6..12], m3.0, "source MAC");
        let body = &buf[ETH_HEADER_LEN..n];
        // short frames are padded to 60 bytes
        let end = body.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        String::from_utf8_lossy(&body[..end]).into_owned()
    };
    assert_eq!(recv_body(&mut links[6]), "unicast 3->6");
    for (i, l) in links.iter_mut().enumerate() {
        if i != 3 {
            assert_eq!(recv_body(l), "broadcast from 3", "host {i}");
        }
    }
    // The bridge learned every MAC from the UDP traffic above: the unicast
    // frame reached host 6 only (checked above for the others, whose first
    // frame was the broadcast), and host 6 got nothing else.
    assert_eq!(
        links[6].recv(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}

#[test]
fn threads_and_processes_land_in_the_namespace() {
    let Some(net) = setup("vc_landing", 2, 1500) else {
        return;
    };
    let h = net.host(1);
    let expect = format!("net:[{}]", h.netns_inode().unwrap());
    let ours = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    assert_ne!(ours.to_string_lossy(), expect, "the test thread is outside");
    // a closure on a thread
    let inside = h.run(|| std::fs::read_link("/proc/thread-self/ns/net").unwrap());
    assert_eq!(inside.to_string_lossy(), expect);
    let t = h
        .spawn(|| std::fs::read_link("/proc/thread-self/ns/net").unwrap())
        .join()
        .unwrap();
    assert_eq!(t.to_string_lossy(), expect);
    // a child process
    let out = h
        .command("readlink")
        .arg("/proc/self/ns/net")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expect);
    // a registered child process: the pid is the program's own
    // (until `ip netns exec` has entered the namespace and exec'd, the pid
    // is still `ip`)
    let p = Process::spawn(h.command("sleep").arg("30")).unwrap();
    let exe = |p: &Process| std::fs::read_link(format!("/proc/{}/exe", p.id())).unwrap();
    assert!(
        testkit::wait_until(PATIENCE, || exe(&p).to_string_lossy().ends_with("sleep")),
        "{:?}",
        exe(&p)
    );
    let link = std::fs::read_link(format!("/proc/{}/ns/net", p.id())).unwrap();
    assert_eq!(link.to_string_lossy(), expect);
    let pid = p.id();
    drop(p);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "killed and reaped on drop"
    );
    // the host's address exists only inside
    let e = UdpSocket::bind((h.ip, 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrNotAvailable, "{e}");
    h.run(|| UdpSocket::bind((h.ip, 0)).unwrap());
    // a moved thread cannot come back: enter() is for good, run() is scoped
    let back = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    assert_eq!(back, ours);
}

#[test]
fn names_are_unique_across_clusters_built_at_once() {
    if !testkit::vcluster::userns::can_build_directly() {
        skip("names_are_unique", "needs root");
        return;
    }
    let build = |hosts| {
        std::thread::spawn(move || {
            Cluster::builder("vc_twin")
                .hosts(hosts)
                .topology(Topology::Bridge)
                .build()
                .unwrap()
        })
    };
    let (a, b) = (build(2), build(3));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert_ne!(a.name(), b.name());
    assert_eq!(a.namespaces().len(), 3, "2 hosts and the switch");
    assert_eq!(b.namespaces().len(), 4);
    let all: Vec<String> = a
        .namespaces()
        .iter()
        .chain(b.namespaces())
        .cloned()
        .collect();
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), 7);
    let ifaces: BTreeSet<_> = a
        .hosts()
        .iter()
        .chain(b.hosts())
        .map(|h| &h.iface)
        .collect();
    assert_eq!(ifaces.len(), 5);
    for n in &all {
        assert!(ns_exists(n), "{n}");
        assert!(n.starts_with(&format!("cn{}x", std::process::id())), "{n}");
    }
    // the same addresses in both: separate segments
    assert_eq!(a.host(0).ip, b.host(0).ip);
    drop((a, b));
    assert_gone(&all);
}

#[test]
fn namespaces_are_gone_after_drop_and_after_a_panic_in_a_host() {
    let Some(net) = setup("vc_drop", 3, 1500) else {
        return;
    };
    let names = net.namespaces().to_vec();
    assert_eq!(names.len(), 4);
    names.iter().for_each(|n| assert!(ns_exists(n), "{n}"));
    drop(net);
    assert_gone(&names);

    let (tx, rx) = std::sync::mpsc::channel();
    let r = std::panic::catch_unwind(move || {
        let net = setup("vc_panic", 2, 1500).unwrap();
        tx.send(net.namespaces().to_vec()).unwrap();
        net.host(1).run(|| panic!("boom inside the host"));
    });
    let msg = r.unwrap_err();
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"boom inside the host"));
    let names = rx.recv().unwrap();
    assert_eq!(names.len(), 2);
    assert_gone(&names);
}

const CHILD_ENV: &str = "VCLUSTER_TEST_CHILD";

/// Not a test by itself: the body of the child process of the signal test;
/// builds a cluster, starts a process in it, reports, waits to be killed.
#[test]
#[ignore = "helper run as a child process by other tests"]
fn child_builds_a_cluster_and_waits() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let net = Cluster::new("vc_sig", 3, 1500).unwrap();
    let mut sleeper = Process::spawn(net.host(0).command("sleep").arg("600")).unwrap();
    println!("READY {} {}", sleeper.id(), net.namespaces().join(" "));
    std::thread::sleep(Duration::from_secs(120));
    sleeper.kill();
    panic!("not killed within 120 s");
}

#[test]
fn sigterm_and_sigint_remove_the_cluster_of_the_signalled_process() {
    if !testkit::vcluster::userns::can_build_directly() {
        skip("sigterm_and_sigint", "needs root");
        return;
    }
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "child_builds_a_cluster_and_waits",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = Process::spawn(&mut cmd).unwrap();
        let ready = child.expect_line("READY");
        let mut words = ready.split_whitespace();
        let sleeper: u32 = words.next().unwrap().parse().unwrap();
        let names: Vec<String> = words.map(String::from).collect();
        assert_eq!(names.len(), 4, "{ready}");
        names.iter().for_each(|n| assert!(ns_exists(n), "{n}"));
        assert!(Path::new(&format!("/proc/{sleeper}")).exists());
        child.signal(sig).unwrap();
        let st = child
            .wait_timeout(Duration::from_secs(30))
            .unwrap()
            .unwrap_or_else(|| panic!("child ignored {sig:?}"));
        let err = child.read_stderr();
        assert_eq!(st.code(), Some(130), "{sig:?}: {st}; {err}");
        assert!(
            err.contains("removed the virtual cluster (4 namespaces, 1 processes stopped)"),
            "{err}"
        );
        assert_gone(&names);
        assert!(
            !Path::new(&format!("/proc/{sleeper}")).exists(),
            "the process inside the cluster survived {sig:?}"
        );
    }
}

/// Not a test by itself: rootless build, run as an unprivileged user.
#[test]
#[ignore = "helper run as a child process by other tests"]
fn rootless_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    use testkit::vcluster::userns;
    if !userns::can_build_directly() {
        let st = userns::reexec().unwrap();
        assert!(st.success(), "inside the user namespace: {st}");
        return;
    }
    assert!(userns::in_user_namespace(), "not root, yet privileged?");
    let net = Cluster::new("vc_rootless", 3, 1500).unwrap();
    let (a, b) = (net.host(0), net.host(2));
    let s = b.run(|| UdpSocket::bind((b.ip, 7000)).unwrap());
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    a.run(|| {
        let c = UdpSocket::bind((a.ip, 0)).unwrap();
        c.send_to(b"rootless", (b.ip, 7000)).unwrap();
    });
    let mut buf = [0u8; 16];
    let n = s.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"rootless");
    let out = b
        .command("readlink")
        .arg("/proc/self/ns/net")
        .output()
        .unwrap();
    let expect = format!("net:[{}]", b.netns_inode().unwrap());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expect);
    println!("ROOTLESS OK {}", net.namespaces().join(" "));
}

#[test]
fn rootless_through_a_user_namespace() {
    if !testkit::is_root() {
        skip("rootless", "needs root to drop to an unprivileged user");
        return;
    }
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        // The kernel's policy, not a fault of ours: also under CI.
        eprintln!("SKIPPED rootless: user namespaces are disabled (user.max_user_namespaces=0)");
        return;
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["rootless_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut p = Process::spawn(&mut cmd).unwrap();
    let line = p.read_line_with("ROOTLESS OK").unwrap();
    let st = p.wait().unwrap();
    let err = p.read_stderr();
    let line = line.unwrap_or_else(|| panic!("rootless child failed ({st}): {err}"));
    assert!(st.success(), "{st}: {err}");
    // Its namespaces lived in its own mount namespace: never on the host.
    for n in line.split_whitespace() {
        assert!(!ns_exists(n), "{n} appeared in the host's /run/netns");
    }
}

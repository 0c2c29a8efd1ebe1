//! clusternetd on a virtual cluster: with the daemon running and no
//! application of the stack on its host, `ping` (EDP echo) answers and a
//! segment to a closed port draws RST (before, a host answered
//! only while some local process ran the stack, so reachability discovery
//! reported idle hosts as dead). Needs root; without it the test prints why
//! and returns, except under CI=true where it fails.

use std::io::ErrorKind;
use std::process::Stdio;
use std::time::{Duration, Instant};

use edp::MacAddr;
use esp::wire::{emit_esp_frame, EspFrame, EspRepr, Flags, Seq};
use link::eth::EthernetRepr;
use link::Link;
use link::{PacketConfig, PacketLink, ETH_P_ALL};
use runtime::ETHERTYPE_ESP;
use testkit::setup;
use vcluster::{Process, Signal};

fn rsts_from(link: &mut PacketLink, from: MacAddr, limit: Duration) -> usize {
    let end = Instant::now() + limit;
    let mut buf = vec![0u8; 2048];
    let mut n = 0;
    while Instant::now() < end {
        match link.recv(&mut buf) {
            Ok(len) => {
                let f = &buf[..len];
                if len >= 14
                    && f[6..12] == from.0
                    && EspFrame::parse(f, ETHERTYPE_ESP, 2048).is_ok_and(|e| e.header.flags.rst())
                {
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

#[test]
fn daemon_answers_echo_and_rst_with_no_application_running() {
    let Some(net) = setup("clusternetd", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (ai, bmac) = (a.iface.clone(), b.mac);
    // Nothing runs on b: no answer.
    let before = a.run(|| edp::echo::ping(&ai, bmac, Duration::from_millis(300)));
    assert!(
        before.is_err(),
        "b answered with nothing running: {before:?}"
    );

    let mut cmd = b.command(env!("CARGO_BIN_EXE_clusternetd"));
    cmd.args(["-i", &b.iface, "--ready", "--stats-every", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut daemon = Process::spawn(&mut cmd).unwrap();
    daemon.expect_line("READY");

    let rtt = a.run(|| edp::echo::ping(&ai, bmac, Duration::from_secs(5)));
    assert!(rtt.is_ok(), "no echo reply from the daemon: {rtt:?}");

    // A segment (not a SYN) to a port nobody holds draws RST.
    let mut link = a.run(|| {
        PacketLink::open(
            &a.iface,
            &PacketConfig {
                ethertype: ETH_P_ALL,
                ..PacketConfig::default()
            },
        )
        .unwrap()
    });
    let seg = EspRepr {
        src_port: 999,
        dst_port: 4242,
        flags: Flags::ACK,
        seq: Seq(100),
        ack: Seq(200),
        window: 10,
        ..Default::default()
    };
    let mut f = vec![0u8; 128];
    let eth = EthernetRepr {
        dst: b.mac,
        src: a.mac,
        ethertype: ETHERTYPE_ESP,
    };
    let n = emit_esp_frame(&mut f, &eth, &seg, b"data").unwrap();
    link.send(&f[..n.max(60)]).unwrap();
    assert_eq!(rsts_from(&mut link, b.mac, Duration::from_millis(500)), 1);

    // SIGTERM ends it cleanly, and b is silent again.
    daemon.signal(Signal::SIGTERM).unwrap();
    let st = daemon.wait_timeout(Duration::from_secs(5)).unwrap();
    assert!(st.is_some_and(|s| s.success()), "{st:?}");
    let after = a.run(|| edp::echo::ping(&ai, bmac, Duration::from_millis(300)));
    assert!(after.is_err());
}

/// The role goes back and forth through the control lease: while the
/// daemon holds it an application's runtime does not answer for the host;
/// when the daemon stops, the application's runtime takes the lease within
/// about a second (its retry period) and answers.
#[test]
fn applications_take_over_when_the_daemon_stops() {
    let Some(net) = setup("clusternetd_handoff", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let mut cmd = b.command(env!("CARGO_BIN_EXE_clusternetd"));
    cmd.args(["-i", &b.iface, "--ready", "--stats-every", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut daemon = Process::spawn(&mut cmd).unwrap();
    daemon.expect_line("READY");
    let bi = b.clone();
    let l = b.run(|| esp::EspListener::bind((bi.iface.as_str(), 7000)).unwrap());
    let rt = l.runtime().clone();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !rt.holds_rst_lease() && !rt.holds_echo_lease(),
        "the daemon holds the role"
    );
    daemon.signal(Signal::SIGTERM).unwrap();
    daemon.wait_timeout(Duration::from_secs(5)).unwrap();
    let start = Instant::now();
    assert!(
        testkit::wait_until(Duration::from_secs(5), || rt.holds_rst_lease()
            && rt.holds_echo_lease()),
        "the application did not take over"
    );
    let took = start.elapsed();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let rtt = a.run(|| edp::echo::ping(&ai, bmac, Duration::from_secs(2)));
    assert!(
        rtt.is_ok(),
        "no echo after the take-over ({took:?}): {rtt:?}"
    );
    eprintln!("take-over after {took:?}");
}

/// And the other way: an application holds the role when the daemon
/// starts; when the application ends, the daemon (whose runtime only its
/// service thread drives) takes the role over.
#[test]
fn daemon_takes_over_when_the_application_ends() {
    let Some(net) = setup("clusternetd_takeover", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let bi = b.clone();
    let l = b.run(|| esp::EspListener::bind((bi.iface.as_str(), 7000)).unwrap());
    let rt = l.runtime().clone();
    assert!(testkit::wait_until(Duration::from_secs(5), || rt.holds_echo_lease()));
    let mut cmd = b.command(env!("CARGO_BIN_EXE_clusternetd"));
    cmd.args(["-i", &b.iface, "--ready", "--stats-every", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut daemon = Process::spawn(&mut cmd).unwrap();
    daemon.expect_line("READY");
    drop((l, rt));
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let start = Instant::now();
    let answered = a.run(|| {
        testkit::wait_until(Duration::from_secs(5), || {
            edp::echo::ping(&ai, bmac, Duration::from_millis(200)).is_ok()
        })
    });
    eprintln!("daemon answered after {:?}", start.elapsed());
    assert!(answered, "the daemon did not take over");
    daemon.signal(Signal::SIGTERM).unwrap();
    daemon.wait_timeout(Duration::from_secs(5)).unwrap();
}

//! A communicator stream over EDP through a link flap longer than the
//! suspicion bound (`CommConfig::suspect_timeout`, 3 s) and far shorter
//! than the failure timeout (60 s): two network namespaces on a veth pair
//! (testkit), rank 0 sends numbered 64 KiB messages to rank 1, and once the
//! stream runs, rank 0's end of the link goes down for 4 s and up again.
//! Every message arrives once, in order, byte-exact; the ranks suspect
//! each other and declare nothing failed. Needs root; without it the test
//! prints why and returns, except under CI=true. Bounded: every wait has a
//! limit; the namespaces go with the cluster, also on a panic.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use comm::{CommConfig, CommStats, Communicator};
use ctp::{CtpConfig, CtpSocket, EthAddr};
use testkit::ip;
use testkit::{setup, wait_until};

const PORT: u16 = 4300;
/// Liveness bound of every wait (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);
/// How long the link stays out: above the 3 s suspicion bound.
const OUTAGE: Duration = Duration::from_secs(4);
const MESSAGES: u64 = 400;
const LEN: usize = 64 << 10;
/// Messages sent before the link goes down; the rest are sent into the
/// outage.
const BEFORE: u64 = 100;

/// Message `i`'s bytes.
fn body(i: u64) -> Vec<u8> {
    (0..LEN)
        .map(|k| (i as usize * 131 + k * 7 + k / 251) as u8)
        .collect()
}

fn communicator(iface: &str, rank: usize, hosts: Vec<EthAddr>) -> Communicator<ctp::EdpTransport> {
    let sock = CtpSocket::bind_edp(iface, PORT, CtpConfig::default()).unwrap();
    let cfg = CommConfig {
        wait_timeout: Some(PATIENCE),
        ..CommConfig::default()
    };
    Communicator::new(sock, rank, hosts, cfg).unwrap()
}

#[test]
fn a_comm_stream_rides_out_a_link_flap_longer_than_the_suspicion_bound() {
    let Some(net) = setup("comm_flap", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let hosts: Vec<EthAddr> = [&a, &b]
        .iter()
        .map(|h| runtime::EthAddr::new(h.mac, PORT))
        .collect();
    // 0: streaming; 1: the link is down; 2: sent everything.
    let stage = Arc::new(AtomicU8::new(0));

    let (bi, hb) = (b.iface.clone(), hosts.clone());
    let receiver = b.spawn(move || -> CommStats {
        let c = communicator(&bi, 1, hb);
        for i in 0..MESSAGES {
            let (st, d) = c.recv(0, 1).expect("receive through the outage");
            assert_eq!(st.source, 0);
            assert!(d == body(i), "message {i}: wrong bytes");
        }
        c.send(0, 2, b"all received").unwrap();
        let stats = c.stats();
        c.finalize(PATIENCE).unwrap();
        stats
    });
    let (ai, ha, st) = (a.iface.clone(), hosts.clone(), stage.clone());
    let sender = a.spawn(move || -> CommStats {
        let c = communicator(&ai, 0, ha);
        for i in 0..MESSAGES {
            if i == BEFORE {
                st.store(1, Ordering::SeqCst);
                // Bounded: the test takes the link down at once.
                assert!(wait_until(PATIENCE, || st.load(Ordering::SeqCst) == 2));
            }
            c.send(1, 1, &body(i)).expect("send through the outage");
        }
        let (_, d) = c.recv(1, 2).expect("the receiver's report");
        assert_eq!(d, b"all received");
        let stats = c.stats();
        c.finalize(PATIENCE).unwrap();
        stats
    });
    assert!(
        wait_until(PATIENCE, || stage.load(Ordering::SeqCst) == 1),
        "the stream did not start"
    );
    ip(&["-n", &a.ns, "link", "set", &a.iface, "down"]);
    stage.store(2, Ordering::SeqCst);
    std::thread::sleep(OUTAGE);
    ip(&["-n", &a.ns, "link", "set", &a.iface, "up"]);
    let s0 = sender.join().expect("sender");
    let s1 = receiver.join().expect("receiver");
    eprintln!("sender {s0:?}\nreceiver {s1:?}");
    assert_eq!(s1.messages_received, MESSAGES);
    assert!(
        s0.suspicions + s1.suspicions >= 1,
        "a 4 s outage went unsuspected"
    );
    assert_eq!(s0.detected_failures + s1.detected_failures, 0);
    assert_eq!(s0.peer_failures + s1.peer_failures, 0);
}

//! L2: CTP broadcast over UDP between network namespaces on a bridge. Needs
//! root: runs under CI=true, otherwise may skip with a printed reason.
//! Namespaces are removed by the harness's Drop guard (`vcluster`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use ctp::{CtpConfig, CtpSocket, Delivery, Options};

const WAIT: Option<Duration> = Some(Duration::from_secs(60));

/// Broadcast to the subnet's broadcast address: both receivers deliver each command once and
/// each confirms it (the sender's group); the sender hears its own
/// broadcasts too (bound to the broadcast port) and delivers them once.
#[test]
fn broadcast_over_udp_on_a_bridge() {
    let Some(net) = testkit::setup("ctp_udp_bcast", 3, 1500) else {
        return;
    };
    // Host i's address (the harness gives each host one on the subnet).
    let addrs: [SocketAddr; 3] = std::array::from_fn(|i| (net.host(i).ip, 1515).into());
    let addr = move |i: usize| addrs[i];
    let cfg = CtpConfig {
        udp_broadcast: Some((net.broadcast(), 1515).into()),
        ..CtpConfig::default()
    };
    let receivers: Vec<_> = (1..3)
        .map(|i| {
            let (tx, rx) = std::sync::mpsc::channel();
            let c = cfg.clone();
            let j = net.host(i).spawn(move || {
                let s = CtpSocket::bind_udp("0.0.0.0:1515", c).unwrap();
                tx.send(()).unwrap();
                let mut got = HashMap::new();
                while got.len() < 10 {
                    let Delivery::Data(d) = s.recv_delivery(WAIT).unwrap() else {
                        panic!("error delivery at a receiver")
                    };
                    assert!(d.broadcast);
                    assert_eq!(d.from, addr(0));
                    *got.entry(d.data[0]).or_insert(0) += 1;
                }
                std::thread::sleep(Duration::from_millis(200));
                while let Ok(Delivery::Data(d)) = s.recv_delivery(Some(Duration::from_millis(1))) {
                    *got.entry(d.data[0]).or_insert(0) += 1;
                }
                got
            });
            rx.recv().unwrap();
            j
        })
        .collect();
    let c = cfg.clone();
    let own = net.host(0).run(move || {
        let s = CtpSocket::bind_udp("0.0.0.0:1515", c).unwrap();
        s.with_endpoint(|e| e.set_broadcast_group(vec![addr(1), addr(2)]))
            .unwrap();
        for i in 0..10u8 {
            s.broadcast(3, &vec![i; 100 + 3000 * i as usize], Options::NONE)
                .unwrap();
        }
        assert!(
            s.flush(WAIT).unwrap(),
            "both receivers confirmed everything"
        );
        let mut own = 0;
        while let Ok(d) = s.recv_delivery(Some(Duration::from_millis(200))) {
            match d {
                Delivery::Data(d) => {
                    assert!(d.broadcast);
                    own += 1;
                }
                Delivery::Error(e) => panic!("{e}"),
            }
        }
        own
    });
    assert_eq!(own, 10, "the sender delivers its own broadcasts once");
    for r in receivers {
        let got = r.join().expect("receiver");
        assert_eq!(got.len(), 10);
        assert!(got.values().all(|&n| n == 1), "each exactly once: {got:?}");
    }
}

//! A dropped runtime frees its link before the drop returns: its service
//! thread (which sleeps on a duplicate of the link's descriptor) is joined
//! first, so a UDP link's port can be bound again at once. libfabric
//! programs close an endpoint and open one on the same port right after
//! (fabtests' fi_av_xfer), and libfabric unloads the provider at exit: no
//! thread of a dropped runtime may still be running then.

use std::net::UdpSocket;
use std::time::Duration;

use link::{MacAddr, UdpConfig, UdpLink};
use runtime::{Progress, Runtime, RuntimeConfig};

#[test]
fn a_dropped_runtime_frees_its_udp_port_at_once() {
    let cfg = RuntimeConfig {
        // The service thread from the start (idle progress).
        progress: Progress::WhenIdle {
            after: Duration::from_micros(50),
        },
        ..RuntimeConfig::default()
    };
    for round in 0..50 {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let link = UdpLink::open(&UdpConfig::new("127.0.0.1:0".parse().unwrap(), mac)).unwrap();
        let addr = link.local_addr().unwrap();
        let rt = Runtime::with_link(Box::new(link), cfg.clone()).unwrap();
        // Let the service thread reach its sleep on the link.
        std::thread::sleep(Duration::from_millis(1));
        drop(rt);
        if let Err(e) = UdpSocket::bind(addr) {
            panic!("round {round}: {addr} still bound after the runtime was dropped: {e}");
        }
    }
}

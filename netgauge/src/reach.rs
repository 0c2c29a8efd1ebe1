//! Which local interface reaches a peer: EDP echo, as the thesis's Open MPI
//! port (ch. 6.3: the `eth` BTL pings each peer's MAC through every local
//! interface, `btl_eth_echo_attempts` times with `btl_eth_echo_timeout`
//! each, and uses the interface that answers).
//!
//! Used by the MPI launch (`--mpi`): ranks exchange their interfaces' MACs
//! and IPs over MPI, then decide the route to each peer here.

use std::io;
use std::time::{Duration, Instant};

use edp::MacAddr;

/// How hard to try a peer (the thesis's `btl_eth_echo_attempts` and
/// `btl_eth_echo_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoConfig {
    /// Echo rounds per peer address, each through every local interface
    /// at once.
    pub attempts: u32,
    /// Wait for a reply per round (edp's `Pinger` spreads 3 requests over
    /// it).
    pub timeout: Duration,
}

/// The route to one peer: our interface, the peer's MAC that answered, the
/// echo round-trip time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub iface: String,
    pub mac: MacAddr,
    pub rtt: Duration,
}

/// Finds which of `ifaces` reaches one of `macs` (the peer's interfaces,
/// tried in order): `cfg.attempts` rounds of `edp::echo::find_interface`
/// per MAC. Returns within about `macs.len() x attempts x timeout`.
///
/// Errors: `NotFound` naming every MAC and interface tried, and how long.
pub fn route(macs: &[MacAddr], ifaces: &[&str], cfg: EchoConfig) -> io::Result<Route> {
    let t0 = Instant::now();
    let mut why = Vec::new();
    for &mac in macs {
        for attempt in 1..=cfg.attempts.max(1) {
            match edp::echo::find_interface(mac, ifaces, cfg.timeout) {
                Ok((iface, rtt)) => {
                    tracing::debug!(%mac, iface, attempt, rtt_us = rtt.as_micros() as u64, "peer reached by EDP echo");
                    return Ok(Route {
                        iface: iface.to_string(),
                        mac,
                        rtt,
                    });
                }
                Err(e) => {
                    if attempt == cfg.attempts.max(1) {
                        why.push(format!("{mac}: {e}"));
                    }
                }
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "no EDP echo reply in {:.2} s ({} attempts of {} ms per address through {}): {}",
            t0.elapsed().as_secs_f64(),
            cfg.attempts,
            cfg.timeout.as_millis(),
            ifaces.join(", "),
            why.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vcluster::Cluster;

    /// Host A reaches B (whose EDP runtime answers echo) and not a MAC that
    /// nobody has; the silent one costs attempts x timeout, not more.
    #[test]
    fn a_host_that_answers_and_one_that_does_not() {
        if !testkit::is_root() {
            testkit::skip("reach", "not root (network namespaces need root)");
            return;
        }
        let vc = Cluster::builder("ngreach").hosts(3).build().unwrap();
        let (a, b) = (vc.host(0), vc.host(1));
        let cfg = EchoConfig {
            attempts: 2,
            timeout: Duration::from_millis(150),
        };
        // B's responder: any EDP runtime on its interface.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let bi = b.iface.clone();
        let responder = b.spawn(move || {
            let _p = edp::echo::Pinger::new(&bi).unwrap();
            ready_tx.send(()).unwrap();
            let _ = done_rx.recv_timeout(Duration::from_secs(20));
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let ai = a.iface.clone();
        let nobody = MacAddr([2, 0x55, 0, 0, 0, 0x99]);
        let bmac = b.mac;
        let (hit, miss, miss_time) = a.run(move || {
            let hit = route(&[nobody, bmac], &[&ai], cfg);
            let t0 = Instant::now();
            let miss = route(&[nobody], &[&ai], cfg);
            (hit, miss, t0.elapsed())
        });
        done_tx.send(()).unwrap();
        let _ = responder.join();
        let hit = hit.unwrap();
        assert_eq!(hit.mac, b.mac);
        assert_eq!(hit.iface, a.iface);
        let e = miss.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("2 attempts of 150 ms"), "{e}");
        // 2 x 150 ms, with room for a loaded host, far below a TCP connect
        // timeout.
        assert!(
            miss_time >= Duration::from_millis(300) && miss_time < Duration::from_secs(2),
            "{miss_time:?}"
        );
    }
}

//! Builds a virtual cluster, prints its hosts and keeps it until Enter or
//! Ctrl-C, for trying things by hand (`ip netns exec <ns> ...`) or timing a
//! build:
//!
//! `cargo run -p vcluster --example vcluster -- [hosts] [mtu]` (as root).
#![forbid(unsafe_code)]

use std::time::Instant;

fn main() -> Result<(), vcluster::Error> {
    let mut args = std::env::args().skip(1);
    let hosts = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    let mtu = args.next().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let t = Instant::now();
    let net = vcluster::Cluster::new("example", hosts, mtu)?;
    let built = t.elapsed();
    println!(
        "{} hosts, MTU {mtu}, built in {:.0} ms{}",
        net.len(),
        built.as_secs_f64() * 1e3,
        net.switch_ns()
            .map(|s| format!(", bridge in {s}"))
            .unwrap_or_default()
    );
    for h in net.hosts() {
        println!(
            "{:>3} {:<32} {:<8} {} {}",
            h.index,
            h.ns,
            h.iface,
            h.mac,
            h.cidr()
        );
    }
    println!("Enter (or Ctrl-C) removes it");
    let _ = std::io::stdin().read_line(&mut String::new());
    let t = Instant::now();
    drop(net);
    println!("removed in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

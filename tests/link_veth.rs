//! Links on real interfaces: `PacketLink` between two network namespaces
//! joined by a veth pair (harness in testkit), for what the I/O runtime
//! needs from it: one socket for several ethertypes (`ETH_P_ALL`) with a
//! replaceable port filter, `recv_with` with and without the RX ring,
//! accumulated kernel counters, and Ethernet group memberships. Needs root;
//! without it each test prints why and returns, except under CI=true.

use std::collections::BTreeSet;
use std::io;
use std::time::Duration;

use edp::{MacAddr, ETHERTYPE_EDP};
use link::Link;
use link::{PacketConfig, PacketLink, ETH_P_ALL};
use netcore::bpf::FrameFilter;
use runtime::ETHERTYPE_ESP;

use testkit::{setup, wait_until, Host};

/// Liveness bound for frames that must arrive (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(10);
const SYN: u8 = 0x02;

/// A frame `src -> dst` of `ethertype` to destination `port` with flags
/// byte `flags` (ESP's offset 20) and `tag` at bytes 22..26.
fn frame(dst: MacAddr, src: MacAddr, ethertype: u16, port: u16, flags: u8, tag: u32) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    f[14..16].copy_from_slice(&1u16.to_be_bytes());
    f[16..18].copy_from_slice(&port.to_be_bytes());
    f[20] = flags;
    f[22..26].copy_from_slice(&tag.to_be_bytes());
    f
}

fn tag_of(f: &[u8]) -> u32 {
    u32::from_be_bytes([f[22], f[23], f[24], f[25]])
}

/// Receives with `recv_with` until `want` tags arrived (or the bound), then
/// a little longer for frames that must not come; returns the tags.
fn collect(rx: &mut PacketLink, want: usize) -> BTreeSet<u32> {
    let mut got = BTreeSet::new();
    let take = |rx: &mut PacketLink, got: &mut BTreeSet<u32>| match rx.recv_with(16, &mut |f| {
        assert!(
            f.len() >= 26 && f.len() <= rx_max(),
            "frame of {} bytes",
            f.len()
        );
        got.insert(tag_of(f));
    }) {
        Ok(n) => assert!(n <= 16),
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
    };
    wait_until(PATIENCE, || {
        take(rx, &mut got);
        got.len() >= want
    });
    std::thread::sleep(Duration::from_millis(50));
    take(rx, &mut got);
    got
}

fn rx_max() -> usize {
    1514
}

#[test]
fn one_socket_for_all_ethertypes_with_a_replaceable_port_filter() {
    let Some(net) = setup("link_eth_p_all", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    for ring in [None, Some(1 << 20)] {
        let mut filter = FrameFilter::new();
        filter
            .ports(ETHERTYPE_EDP, [7001, 7002])
            .ports(ETHERTYPE_ESP, [7003])
            .syn_any_port(ETHERTYPE_ESP);
        let mut rx = b.run(|| {
            PacketLink::open(
                &b.iface,
                &PacketConfig {
                    ethertype: ETH_P_ALL,
                    program: Some(filter.compile().unwrap()),
                    rx_ring: ring,
                    ..PacketConfig::default()
                },
            )
            .unwrap()
        });
        assert_eq!(rx.ethertype(), ETH_P_ALL);
        assert_eq!(rx.rx_ready().is_some(), ring.is_some());
        let mut tx = a.run(|| PacketLink::new(&a.iface, ETHERTYPE_EDP).unwrap());
        // (ethertype, port, flags, accepted by the first filter, by the second)
        let cases = [
            (ETHERTYPE_EDP, 7001, 0, true, false),
            (ETHERTYPE_EDP, 7002, 0, true, true),
            (ETHERTYPE_EDP, 7003, 0, false, false),
            (ETHERTYPE_ESP, 7003, 0, true, false),
            (ETHERTYPE_ESP, 9999, SYN, true, false),
            (ETHERTYPE_ESP, 9999, SYN | 0x10, false, false),
            (0x0800, 7001, 0, false, false),
        ];
        let send_all = |tx: &mut PacketLink, round: u32| {
            let frames: Vec<Vec<u8>> = cases
                .iter()
                .enumerate()
                .map(|(i, &(et, port, flags, _, _))| {
                    frame(b.mac, a.mac, et, port, flags, round * 100 + i as u32)
                })
                .collect();
            let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
            let mut sent = 0;
            while sent < refs.len() {
                sent += tx.send_batch(&refs[sent..]).unwrap();
            }
        };
        send_all(&mut tx, 1);
        let want: BTreeSet<u32> = cases
            .iter()
            .enumerate()
            .filter(|c| c.1 .3)
            .map(|(i, _)| 100 + i as u32)
            .collect();
        assert_eq!(
            collect(&mut rx, want.len()),
            want,
            "ring={ring:?}, first filter"
        );
        let first = rx.kernel_stats().unwrap();
        assert!(first.packets >= want.len() as u64, "{first:?}");

        // The runtime's filter changes as ports come and go.
        let mut second = FrameFilter::new();
        second.port(ETHERTYPE_EDP, 7002);
        rx.set_filter(&second.compile().unwrap()).unwrap();
        send_all(&mut tx, 2);
        let want2: BTreeSet<u32> = cases
            .iter()
            .enumerate()
            .filter(|c| c.1 .4)
            .map(|(i, _)| 200 + i as u32)
            .collect();
        assert_eq!(
            collect(&mut rx, want2.len()),
            want2,
            "ring={ring:?}, second filter"
        );
        // Accumulated since open (PACKET_STATISTICS itself resets on read).
        let total = rx.kernel_stats().unwrap();
        assert!(
            total.packets >= first.packets + want2.len() as u64,
            "{first:?} then {total:?}"
        );
        assert_eq!(total.drops, 0);
        assert_eq!(rx.truncated(), 0);
    }
}

#[test]
fn recv_with_hands_out_batches_in_order() {
    let Some(net) = setup("link_recv_with", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    for ring in [None, Some(1 << 20)] {
        let mut filter = FrameFilter::new();
        filter.port(ETHERTYPE_EDP, 7010);
        let mut rx = b.run(|| {
            PacketLink::open(
                &b.iface,
                &PacketConfig {
                    program: Some(filter.compile().unwrap()),
                    rx_ring: ring,
                    ..PacketConfig::default()
                },
            )
            .unwrap()
        });
        let mut tx = a.run(|| PacketLink::new(&a.iface, ETHERTYPE_EDP).unwrap());
        let count = 300u32;
        let frames: Vec<Vec<u8>> = (0..count)
            .map(|i| {
                let mut f = frame(b.mac, a.mac, ETHERTYPE_EDP, 7010, 0, i);
                f.resize(60 + (i as usize % 1400), (i % 251) as u8);
                f
            })
            .collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        let mut sent = 0;
        while sent < refs.len() {
            sent += tx.send_batch(&refs[sent..]).unwrap();
        }
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut calls = 0;
        let ok = wait_until(PATIENCE, || {
            match rx.recv_with(64, &mut |f| got.push(f.to_vec())) {
                Ok(n) => {
                    assert!(n <= 64);
                    calls += 1;
                }
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
            got.len() >= count as usize
        });
        assert!(ok, "ring={ring:?}: got {} of {count}", got.len());
        assert_eq!(got, frames, "ring={ring:?}: byte-exact, in order");
        assert!(calls >= (count as usize).div_ceil(64), "{calls} calls");
        // Nothing left: WouldBlock, and max = 0 asks for nothing.
        assert_eq!(
            rx.recv_with(64, &mut |_| panic!("extra frame"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(rx.recv_with(0, &mut |_| panic!("max 0")).unwrap(), 0);
        if ring.is_some() {
            assert_eq!(rx.rx_ready(), Some(false));
        }
    }
}

/// The link-layer multicast addresses of `iface` in `host`'s namespace
/// (`ip maddr show`).
fn maddrs(host: &Host, iface: &str) -> String {
    let out = host
        .command("ip")
        .args(["maddr", "show", "dev", iface])
        .output()
        .expect("run ip maddr");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn group_memberships_are_counted_and_reach_the_device() {
    let Some(net) = setup("link_groups", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let g = MacAddr([0x01, 0x00, 0x5e, 0x42, 0x00, 0x07]);
    let shown = "01:00:5e:42:00:07";
    let mut rx = b.run(|| PacketLink::new(&b.iface, ETHERTYPE_EDP).unwrap());
    assert!(!maddrs(&b, &b.iface).contains(shown));
    rx.join_group(g).unwrap();
    rx.join_group(g).unwrap();
    assert!(
        maddrs(&b, &b.iface).contains(shown),
        "{}",
        maddrs(&b, &b.iface)
    );
    assert_eq!(rx.groups().collect::<Vec<_>>(), vec![(g, 2)]);
    rx.leave_group(g).unwrap();
    assert!(maddrs(&b, &b.iface).contains(shown), "still joined once");
    // A frame to the group arrives.
    let mut tx = a.run(|| PacketLink::new(&a.iface, ETHERTYPE_EDP).unwrap());
    tx.send(&frame(g, a.mac, ETHERTYPE_EDP, 5, 0, 77)).unwrap();
    let mut got = Vec::new();
    assert!(wait_until(PATIENCE, || {
        let _ = rx.recv_with(8, &mut |f| got.push(tag_of(f)));
        got.contains(&77)
    }));
    rx.leave_group(g).unwrap();
    assert!(
        !maddrs(&b, &b.iface).contains(shown),
        "{}",
        maddrs(&b, &b.iface)
    );
    assert_eq!(
        rx.leave_group(g).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        rx.join_group(b.mac).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    rx.join_group(MacAddr::BROADCAST).unwrap();
    rx.leave_group(MacAddr::BROADCAST).unwrap();
}

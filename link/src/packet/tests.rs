//! Tests of `PacketLink` that need no privilege: the per-socket filter (run
//! in the netcore interpreter and accepted by the kernel's verifier),
//! error messages. The link itself is tested on veth pairs in
//! tests/edp_veth.rs and tests/link_veth.rs.

use std::os::fd::AsFd;

use netcore::bpf::{interp, ACCEPT};

use super::*;
use crate::eth::testing::{emit_edp_frame, ETHERTYPE_EDP, ETHERTYPE_ESP};
use crate::eth::EthernetRepr;

fn run(prog: &[Insn], pkt: &[u8]) -> u32 {
    interp::run(prog, pkt).unwrap()
}

const ME: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
const PEER: MacAddr = MacAddr([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
const OTHER: MacAddr = MacAddr([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xef]);

fn frame(ethertype: u16, src: MacAddr, sport: u16, dport: u16) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    let n = emit_edp_frame(
        &mut b,
        &EthernetRepr {
            dst: ME,
            src,
            ethertype,
        },
        sport,
        dport,
        b"payload",
    )
    .unwrap();
    b.truncate(n);
    b
}

#[test]
fn filter_matches_ethertype_and_port() {
    let prog = FilterSpec::port(ETHERTYPE_EDP, 5000).program().unwrap();
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 1, 5000)), ACCEPT);
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 1, 5001)), 0);
    assert_eq!(run(&prog, &frame(ETHERTYPE_ESP, PEER, 1, 5000)), 0);
    // control port not accepted unless listed
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 1, 0)), 0);
    // frames too short to hold the port are dropped
    let f = frame(ETHERTYPE_EDP, PEER, 1, 5000);
    assert_eq!(run(&prog, &f[..17]), 0);
    assert_eq!(run(&prog, &f[..13]), 0);
}

#[test]
fn filter_extra_ports() {
    let spec = FilterSpec {
        ethertype: ETHERTYPE_EDP,
        port: 7,
        extra_ports: vec![0, 9],
        peer: Some((PEER, 100)),
    };
    let prog = spec.program().unwrap();
    // extra ports are accepted from anyone
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 3, 0)), ACCEPT);
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 3, 9)), ACCEPT);
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 3, 8)), 0);
    // the main port only from the peer
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 100, 7)), ACCEPT);
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 101, 7)), 0);
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 100, 7)), 0);
    // differing only in the first four MAC bytes
    let m = MacAddr([0x06, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
    assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, m, 100, 7)), 0);
    assert_eq!(run(&prog, &frame(ETHERTYPE_ESP, PEER, 100, 7)), 0);
}

#[test]
fn filter_jumps_stay_in_program() {
    // The old builder's limit of 64 extra ports is gone (the binary search
    // with trampolines takes thousands); a program beyond the kernel's
    // 4096 instructions is still refused with InvalidInput.
    let spec = FilterSpec {
        ethertype: ETHERTYPE_ESP,
        port: 65535,
        extra_ports: (1..=64).collect(),
        peer: Some((PEER, 1)),
    };
    let prog = spec.program().unwrap();
    // Every jump stays inside the program (the verifier's rule).
    interp::validate(&prog).unwrap();
    assert_eq!(run(&prog, &frame(ETHERTYPE_ESP, OTHER, 1, 64)), ACCEPT);
    assert_eq!(run(&prog, &frame(ETHERTYPE_ESP, PEER, 1, 65535)), ACCEPT);
    let mut too_many = spec.clone();
    too_many.extra_ports = (1..=5000).collect();
    assert_eq!(
        too_many.program().unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

/// What the filter must accept, written directly from the FilterSpec docs.
fn reference(spec: &FilterSpec, f: &[u8]) -> bool {
    if f.len() < 18 {
        return false;
    }
    let be = |i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
    if be(12) != spec.ethertype {
        return false;
    }
    let dport = be(16);
    if spec.extra_ports.contains(&dport) {
        return true;
    }
    if dport != spec.port {
        return false;
    }
    match spec.peer {
        None => true,
        Some((mac, port)) => f[6..12] == mac.0 && be(14) == port,
    }
}

proptest::proptest! {
    #[test]
    fn filter_agrees_with_its_specification(
        ethertype in proptest::sample::select(vec![ETHERTYPE_EDP, ETHERTYPE_ESP, 0x0800]),
        port in 0u16..8,
        extra in proptest::collection::vec(0u16..8, 0..4),
        peer in proptest::option::of((0u8..3, 0u16..4)),
        frame in proptest::collection::vec(0u8..4, 0..40),
        f_ethertype in proptest::sample::select(vec![ETHERTYPE_EDP, ETHERTYPE_ESP, 0x0800]),
    ) {
        // Small value ranges make matches likely.
        let spec = FilterSpec {
            ethertype,
            port,
            extra_ports: extra,
            peer: peer.map(|(m, p)| (MacAddr([m, 0, 0, 0, 0, m]), p)),
        };
        let mut f = frame;
        if f.len() >= 14 {
            f[12..14].copy_from_slice(&f_ethertype.to_be_bytes());
            f[6] = f[11];
            f[7..11].fill(0);
        }
        let prog = spec.program().unwrap();
        let got = run(&prog, &f) == ACCEPT;
        proptest::prop_assert_eq!(got, reference(&spec, &f));
    }
}

#[test]
fn filter_is_accepted_by_the_kernel() {
    // Attach to an unprivileged socket to prove the kernel's verifier
    // accepts the program (SO_ATTACH_FILTER works on any socket).
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let spec = FilterSpec {
        ethertype: ETHERTYPE_EDP,
        port: 7,
        extra_ports: vec![0],
        peer: Some((PEER, 100)),
    };
    attach_filter(s.as_fd(), &spec).unwrap();
}

#[test]
fn unknown_interface_is_named() {
    let e = PacketLink::new("nosuchif7", ETHERTYPE_EDP).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("nosuchif7"), "{e}");
}

#[test]
fn filter_and_program_are_exclusive() {
    let cfg = PacketConfig {
        filter: Some(FilterSpec::port(ETHERTYPE_EDP, 1)),
        program: Some(vec![Insn::new(0x06, 0, 0, 0)]),
        ..PacketConfig::default()
    };
    let e = PacketLink::open("lo", &cfg).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn permission_error_names_capability_and_command() {
    let e = permission_error("opening", &io::Error::from_raw_os_error(libc::EPERM));
    let s = e.to_string();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(s.contains("CAP_NET_RAW"), "{s}");
    let exe = std::env::current_exe().unwrap();
    assert!(
        s.contains(&format!("setcap cap_net_raw+ep {}", exe.display())),
        "{s}"
    );
}

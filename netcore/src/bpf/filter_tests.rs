//! Tests of [`FrameFilter`]: snapshots of small programs, the interpreter's
//! verdict against the filter's own rule on random sets and frames, and the
//! cost of the binary search.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::bpf::{disassemble, interp, ACCEPT, DROP, MAX_INSNS};

const EDP: u16 = 0x88b5;
const ESP: u16 = 0x88b6;
const PEER: [u8; 6] = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];

fn frame(et: u16, src: [u8; 6], sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut f = vec![0u8; 40];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&et.to_be_bytes());
    f[14..16].copy_from_slice(&sport.to_be_bytes());
    f[16..18].copy_from_slice(&dport.to_be_bytes());
    f[20] = flags;
    f
}

fn verdict(prog: &[Insn], f: &[u8]) -> u32 {
    interp::run(prog, f).unwrap()
}

#[test]
fn snapshot_one_port() {
    let prog = FrameFilter::new().port(EDP, 5000).compile().unwrap();
    assert_eq!(
        disassemble(&prog),
        "(000) ldh      [12]\n\
         (001) jeq      #0x88b5          jt 2\tjf 7\n\
         (002) ldh      [16]\n\
         (003) jeq      #0x1388          jt 5\tjf 4\n\
         (004) ja       7\n\
         (005) ret      #4294967295\n\
         (006) ret      #4294967295\n\
         (007) ret      #0\n"
    );
    assert_eq!(verdict(&prog, &frame(EDP, PEER, 1, 5000, 0)), ACCEPT);
    assert_eq!(verdict(&prog, &frame(EDP, PEER, 1, 5001, 0)), DROP);
    assert_eq!(verdict(&prog, &frame(ESP, PEER, 1, 5000, 0)), DROP);
    // Frames too short to hold the port are dropped.
    let f = frame(EDP, PEER, 1, 5000, 0);
    assert_eq!(verdict(&prog, &f[..17]), DROP);
    assert_eq!(verdict(&prog, &f[..13]), DROP);
}

#[test]
fn snapshot_listener_and_rst_responder() {
    // esp/src/bpf.rs's syn_filter(ESP, Some(80)) and syn_filter(ESP, None).
    let listener = FrameFilter::new().syn_port(ESP, 80).compile().unwrap();
    assert_eq!(
        disassemble(&listener),
        "(000) ldh      [12]\n\
         (001) jeq      #0x88b6          jt 2\tjf 11\n\
         (002) ldh      [16]\n\
         (003) jeq      #0x50            jt 5\tjf 4\n\
         (004) ja       11\n\
         (005) ld       #pktlen\n\
         (006) jgt      #0x14            jt 7\tjf 11\n\
         (007) ldb      [20]\n\
         (008) and      #0x12\n\
         (009) jeq      #0x2             jt 10\tjf 11\n\
         (010) ret      #4294967295\n\
         (011) ret      #0\n"
    );
    let any = FrameFilter::new().syn_any_port(ESP).compile().unwrap();
    // The cases of esp/src/bpf.rs's test.
    const SYN: u8 = ESP_SYN;
    const ACK: u8 = ESP_ACK;
    assert_eq!(verdict(&listener, &frame(ESP, PEER, 1, 80, SYN)), ACCEPT);
    assert_eq!(
        verdict(&listener, &frame(ESP, PEER, 1, 80, SYN | ACK)),
        DROP
    );
    assert_eq!(verdict(&listener, &frame(ESP, PEER, 1, 80, ACK)), DROP);
    assert_eq!(verdict(&listener, &frame(ESP, PEER, 1, 81, SYN)), DROP);
    assert_eq!(verdict(&listener, &frame(EDP, PEER, 1, 80, SYN)), DROP);
    assert_eq!(
        verdict(&listener, &frame(ESP, PEER, 1, 80, SYN)[..16]),
        DROP
    );
    assert_eq!(verdict(&any, &frame(ESP, PEER, 1, 1234, SYN)), ACCEPT);
    assert_eq!(verdict(&any, &frame(ESP, PEER, 1, 1234, 0x01 | ACK)), DROP);
}

#[test]
fn peer_ports_and_extras() {
    // edp's old FilterSpec { port 7 from (PEER, 100), extra ports 0 and 9 }.
    let other = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xef];
    let prog = FrameFilter::new()
        .peer_port(EDP, 7, PEER, 100)
        .port(EDP, 0)
        .port(EDP, 9)
        .compile()
        .unwrap();
    assert_eq!(verdict(&prog, &frame(EDP, other, 3, 0, 0)), ACCEPT);
    assert_eq!(verdict(&prog, &frame(EDP, other, 3, 9, 0)), ACCEPT);
    assert_eq!(verdict(&prog, &frame(EDP, other, 3, 8, 0)), DROP);
    assert_eq!(verdict(&prog, &frame(EDP, PEER, 100, 7, 0)), ACCEPT);
    assert_eq!(verdict(&prog, &frame(EDP, PEER, 101, 7, 0)), DROP);
    assert_eq!(verdict(&prog, &frame(EDP, other, 100, 7, 0)), DROP);
    // Differing only in the first four MAC bytes.
    let m = [0x06, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
    assert_eq!(verdict(&prog, &frame(EDP, m, 100, 7, 0)), DROP);
    assert_eq!(verdict(&prog, &frame(ESP, PEER, 100, 7, 0)), DROP);
}

#[test]
fn several_ethertypes_with_control_and_syn_extras() {
    let mut f = FrameFilter::new();
    f.ports(EDP, [10, 20, 30]).control_port(EDP);
    f.ports(ESP, [10, 40]).control_port(ESP).syn_any_port(ESP);
    let prog = f.compile().unwrap();
    for (et, port, flags, want) in [
        (EDP, 10, 0, true),
        (EDP, 0, 0, true),
        (EDP, 40, ESP_SYN, false),
        (ESP, 40, 0, true),
        (ESP, 0, 0, true),
        (ESP, 20, 0, false),
        (ESP, 20, ESP_SYN, true),
        (ESP, 20, ESP_SYN | ESP_ACK, false),
        (0x0800, 10, 0, false),
    ] {
        let fr = frame(et, PEER, 1, port, flags);
        assert_eq!(f.accepts(&fr), want, "{et:#x} {port} {flags:#x}");
        assert_eq!(
            interp::accepts(&prog, &fr),
            want,
            "{et:#x} {port} {flags:#x}"
        );
    }
    // No rule: nothing passes.
    let none = FrameFilter::new().compile().unwrap();
    assert_eq!(verdict(&none, &frame(EDP, PEER, 1, 10, 0)), DROP);
}

#[test]
fn a_thousand_ports_cost_a_dozen_comparisons() {
    // Every third port of 3000: members and neighbours alternate.
    let ports: BTreeSet<u16> = (0..1000u16).map(|i| 7 + 3 * i).collect();
    let mut f = FrameFilter::new();
    f.ports(EDP, ports.iter().copied());
    let prog = f.compile().unwrap();
    assert!(prog.len() <= MAX_INSNS);
    let mut worst = 0;
    for port in 0..3100u16 {
        let fr = frame(EDP, PEER, 1, port, 0);
        let (v, steps) = interp::run_counted(&prog, &fr).unwrap();
        assert_eq!(v != 0, ports.contains(&port), "port {port}");
        worst = worst.max(steps);
    }
    // ldh, jeq ethertype, ldh, ~8 jge, <= 4 jeq, trampolines, ja, ret.
    assert!(worst <= 20, "worst case {worst} instructions");
    let jge = prog.iter().filter(|i| i.code == JGE_K).count();
    assert!(jge < 400, "{jge} jge");
}

#[test]
fn too_many_ports_is_an_error() {
    let mut f = FrameFilter::new();
    f.ports(EDP, 0..4000);
    match f.compile() {
        Err(BpfError::TooLong { len }) => assert!(len > MAX_INSNS),
        other => panic!("{other:?}"),
    }
}

fn arb_match() -> impl Strategy<Value = PortMatch> {
    prop_oneof![
        Just(PortMatch::Any),
        Just(PortMatch::Syn),
        Just(PortMatch::NoRst),
        Just(PortMatch::Never),
        proptest::collection::vec((0u8..3, 0u16..3), 0..4).prop_map(|v| PortMatch::Peers(
            v.into_iter()
                .map(|(m, port)| ([2, 0, 0, 0, 0, m], port))
                .collect()
        )),
    ]
}

fn arb_filter() -> impl Strategy<Value = FrameFilter> {
    proptest::collection::btree_map(
        prop_oneof![Just(EDP), Just(ESP), Just(0x0800u16)],
        (
            proptest::collection::btree_map(0u16..48, arb_match(), 0..40),
            proptest::option::of(arb_match()),
        ),
        0..3,
    )
    .prop_flat_map(|m| {
        any::<bool>().prop_map(move |untagged_only| FrameFilter {
            rules: m
                .clone()
                .into_iter()
                .map(|(et, (ports, any_port))| (et, EthertypeRule { ports, any_port }))
                .collect(),
            untagged_only,
        })
    })
}

proptest! {
    #[test]
    fn interpreter_verdict_equals_the_filter_rule(
        filter in arb_filter(),
        frames in proptest::collection::vec(
            (
                prop_oneof![Just(EDP), Just(ESP), Just(0x0800u16)],
                0u8..2,
                0u16..3,
                0u16..50,
                any::<u8>(),
                0usize..30,
                proptest::option::of(prop_oneof![Just(0u16), Just(5u16), Just(0x3005u16)]),
            ),
            1..40,
        ),
    ) {
        let prog = filter.compile().unwrap();
        for (et, m, sport, dport, flags, len, tci) in frames {
            let mut f = frame(et, [2, 0, 0, 0, 0, m], sport, dport, flags);
            f.truncate(len.max(12));
            let meta = interp::Meta { vlan_tci: tci };
            prop_assert_eq!(
                interp::accepts_meta(&prog, &f, &meta),
                filter.accepts_tagged(&f, tci),
                "frame {:02x?}\n{}", f, disassemble(&prog)
            );
        }
    }

    #[test]
    fn random_port_sets_match_membership(
        ports in proptest::collection::btree_set(any::<u16>(), 0..1500),
        probes in proptest::collection::vec(any::<u16>(), 1..200),
    ) {
        let mut f = FrameFilter::new();
        f.ports(ESP, ports.iter().copied());
        let prog = f.compile().unwrap();
        for p in probes.iter().chain(ports.iter().take(200)) {
            let fr = frame(ESP, PEER, 1, *p, 0);
            prop_assert_eq!(interp::accepts(&prog, &fr), ports.contains(p), "port {}", p);
        }
    }
}

#[test]
fn untagged_only_drops_frames_of_other_vlans() {
    let mut f = FrameFilter::new();
    f.port(EDP, 0).untagged();
    let prog = f.compile().unwrap();
    let fr = frame(EDP, PEER, 1, 0, 0);
    let meta = |tci| interp::Meta { vlan_tci: tci };
    for (tci, want) in [
        (None, true),
        (Some(42u16), false),
        (Some(0x2000), true),
        (Some(0x202a), false),
    ] {
        assert_eq!(
            interp::accepts_meta(&prog, &fr, &meta(tci)),
            want,
            "{tci:?}"
        );
        assert_eq!(f.accepts_tagged(&fr, tci), want, "{tci:?}");
    }
    // Without the flag the tag is not looked at.
    let plain = FrameFilter::new().port(EDP, 0).compile().unwrap();
    assert!(interp::accepts_meta(&plain, &fr, &meta(Some(42))));
    assert_eq!(
        disassemble(&prog).lines().count(),
        disassemble(&plain).lines().count() + 5
    );
}

#[test]
fn no_rst_any_port_except_the_excluded() {
    let mut f = FrameFilter::new();
    f.port(ESP, 7)
        .peer_port(ESP, 8, PEER, 9)
        .no_rst_any_port_except(ESP, [100u16, 200, 300, 400, 500, 600]);
    let prog = f.compile().unwrap();
    let other = [2, 9, 9, 9, 9, 9];
    for (src, dport, flags, want) in [
        (PEER, 7, 0x04, true),   // owned port: even an RST
        (PEER, 8, 0x04, true),   // the connected peer
        (other, 8, 0x10, true),  // another peer of a connected port: answered RST
        (other, 8, 0x14, false), // ... unless it is an RST
        (PEER, 9999, 0x10, true),
        (PEER, 9999, 0x02, true),
        (PEER, 9999, 0x04, false),
        (PEER, 300, 0x10, false), // owned by another process
        (PEER, 600, 0x02, false),
    ] {
        let fr = frame(ESP, src, 9, dport, flags);
        assert_eq!(
            verdict(&prog, &fr) != 0,
            want,
            "port {dport} flags {flags:#x}"
        );
        assert_eq!(f.accepts(&fr), want, "port {dport} flags {flags:#x}");
    }
    assert!(!f.accepts(&frame(EDP, PEER, 1, 9999, 0)));
}

#[test]
fn a_port_of_several_connections_accepts_each_peer_and_no_one_else() {
    let (a, b) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);
    let mut f = FrameFilter::new();
    f.peer_port(ESP, 80, a, 1000)
        .peer_port(ESP, 80, b, 2000)
        .peer_port(ESP, 80, a, 1001)
        .peer_port(ESP, 80, a, 1000);
    assert_eq!(
        f.rules[&ESP].ports[&80],
        PortMatch::Peers(vec![(a, 1000), (b, 2000), (a, 1001)])
    );
    let prog = f.compile().unwrap();
    for (src, sport, want) in [
        (a, 1000, true),
        (b, 2000, true),
        (a, 1001, true),
        (a, 2000, false),
        (b, 1000, false),
        (PEER, 1000, false),
    ] {
        let fr = frame(ESP, src, sport, 80, ESP_ACK);
        assert_eq!(verdict(&prog, &fr) != 0, want, "{src:02x?} {sport}");
        assert_eq!(f.accepts(&fr), want, "{src:02x?} {sport}");
    }
    assert_eq!(verdict(&prog, &frame(ESP, a, 1000, 81, ESP_ACK)), DROP);
    // A peer list replaced by a port rule accepts everyone.
    f.port(ESP, 80);
    assert!(f.accepts(&frame(ESP, PEER, 7, 80, ESP_ACK)));
}

//! Tests of the sim links: delivery, faults, bounds, partitions, group
//! delivery on a switch, `recv_with`.

use std::io;
use std::time::Duration;

use super::*;
use crate::eth::testing::{emit_edp_frame, EdpFrame, ETHERTYPE_EDP};
use crate::eth::{EthernetRepr, ETH_MIN_FRAME_LEN};
use crate::fault::FaultConfig;
use crate::Link;

const US: Duration = Duration::from_micros(1);

fn assert_send<T: Send>() {}
fn assert_send_sync<T: Send + Sync + Clone>() {}

/// An EDP frame from `src` to `dst` whose payload is `seq` (4 bytes BE)
/// padded with zeros to `len` payload bytes.
fn frame(src: MacAddr, dst: MacAddr, seq: u32, len: usize) -> Vec<u8> {
    let mut payload = vec![0u8; len.max(4)];
    payload[..4].copy_from_slice(&seq.to_be_bytes());
    let mut buf = vec![0u8; 20 + payload.len()];
    let eth = EthernetRepr {
        dst,
        src,
        ethertype: ETHERTYPE_EDP,
    };
    let n = emit_edp_frame(&mut buf, &eth, 1, 2, &payload).unwrap();
    buf.truncate(n);
    buf
}

fn seq_of(f: &[u8]) -> u32 {
    let p = EdpFrame::parse(f, ETHERTYPE_EDP, 9014).unwrap().payload;
    u32::from_be_bytes([p[0], p[1], p[2], p[3]])
}

fn recv_all(l: &mut SimLink) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; l.mtu() + 14];
    let mut out = Vec::new();
    loop {
        match l.recv(&mut buf) {
            Ok(n) => out.push(buf[..n].to_vec()),
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                return out;
            }
        }
    }
}

#[test]
fn types_are_send() {
    assert_send::<SimLink>();
    assert_send_sync::<SimClock>();
    assert_send_sync::<SimControl>();
    assert_send::<crate::fault::FaultLink<SimLink>>();
}

#[test]
fn pair_delivers_both_ways_at_send_instant() {
    let clock = SimClock::new();
    let (mut a, mut b) =
        SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    assert_eq!(a.mac().to_string(), "02:00:00:00:00:01");
    assert_eq!(b.mac().to_string(), "02:00:00:00:00:02");
    assert_eq!((a.mtu(), a.raw_fd()), (1500, None));
    let f = frame(a.mac(), b.mac(), 7, 10);
    a.send(&f).unwrap();
    assert_eq!(b.poll_at(), Some(clock.now()));
    assert!(recv_all(&mut a).is_empty());
    assert_eq!(recv_all(&mut b), vec![f.clone()]);
    b.send(&f).unwrap();
    assert_eq!(recv_all(&mut a), vec![f]);
    assert_eq!(a.stats().sent, 1);
    assert_eq!(a.stats().received, 1);
    assert_eq!(a.fault_stats().frames, 1);
    assert_eq!(next_event(&[&a, &b]), None);
}

#[test]
fn vectored_batch_sends_each_frame_as_its_pieces_concatenated() {
    use std::io::IoSlice;
    let clock = SimClock::new();
    let (mut a, mut b) =
        SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let f1 = frame(a.mac(), b.mac(), 1, 100);
    let f2 = frame(a.mac(), b.mac(), 2, 1400);
    // f1 in three pieces (one empty, one of odd length), f2 whole.
    let p1 = [
        IoSlice::new(&f1[..17]),
        IoSlice::new(&[]),
        IoSlice::new(&f1[17..]),
    ];
    let p2 = [IoSlice::new(&f2)];
    assert_eq!(a.send_batch_vectored(&[&p1, &p2]).unwrap(), 2);
    assert_eq!(recv_all(&mut b), vec![f1, f2]);
    // An oversized first frame is an error; after a good one it ends the batch.
    let big = vec![0u8; 1515];
    let pb = [IoSlice::new(&big)];
    assert!(a.send_batch_vectored(&[&pb]).is_err());
    let f3 = frame(a.mac(), b.mac(), 3, 10);
    let p3 = [IoSlice::new(&f3)];
    assert_eq!(a.send_batch_vectored(&[&p3, &pb, &p3]).unwrap(), 1);
    assert_eq!(recv_all(&mut b), vec![f3]);
}

#[test]
fn delay_holds_frame_until_due() {
    let clock = SimClock::new();
    let d = Duration::from_micros(100);
    let (mut a, mut b) = SimLink::pair(
        &clock,
        1500,
        FaultConfig::default().with_delay(d, Duration::ZERO),
        FaultConfig::default(),
    );
    let t0 = clock.now();
    a.send(&frame(a.mac(), b.mac(), 1, 10)).unwrap();
    assert_eq!(b.next_delivery(), Some(t0 + d));
    assert_eq!(next_event(&[&a, &b]), Some(t0 + d));
    clock.advance(d - Duration::from_nanos(1));
    assert!(
        recv_all(&mut b).is_empty(),
        "not receivable before now + delay"
    );
    assert_eq!(b.pending(), 1);
    clock.advance_to(t0 + d);
    let got = recv_all(&mut b);
    assert_eq!(got.len(), 1);
    assert_eq!(seq_of(&got[0]), 1);
}

#[test]
fn rate_limit_spacing_on_pair() {
    let clock = SimClock::new();
    // 1514-byte frames at 100 Mbit/s: 12112 bits = 121.12 us each.
    let (mut a, mut b) = SimLink::pair(
        &clock,
        1500,
        FaultConfig::default().with_rate(100_000_000),
        FaultConfig::default(),
    );
    for i in 0..20 {
        a.send(&frame(a.mac(), b.mac(), i, 1494)).unwrap();
    }
    let t0 = clock.now();
    let mut arrivals = Vec::new();
    while let Some(t) = next_event(&[&a, &b]) {
        clock.advance_to(t);
        for f in recv_all(&mut b) {
            arrivals.push((clock.now() - t0, seq_of(&f)));
        }
    }
    assert_eq!(arrivals.len(), 20);
    for (k, (at, seq)) in arrivals.iter().enumerate() {
        assert_eq!(*seq, k as u32);
        assert_eq!(*at, Duration::from_nanos(121_120) * (k as u32 + 1));
    }
}

/// Drives a pair with every fault in both directions and returns the
/// receive trace of b: (virtual time, bytes).
fn trace(seed: u64) -> Vec<(Duration, Vec<u8>)> {
    let clock = SimClock::new();
    let cfg = FaultConfig::seeded(seed)
        .with_loss(0.05)
        .with_duplicate(0.05)
        .with_reorder(0.05, Duration::from_micros(20))
        .with_corrupt(0.05)
        .with_delay(Duration::from_micros(5), Duration::from_micros(3));
    let (mut a, mut b) = SimLink::pair(&clock, 1500, cfg.clone(), cfg);
    let mut out = Vec::new();
    for i in 0..2_000 {
        a.send(&frame(a.mac(), b.mac(), i, 32)).unwrap();
        clock.advance(US);
        for f in recv_all(&mut b) {
            out.push((clock.elapsed(), f));
        }
    }
    while let Some(t) = b.next_delivery() {
        clock.advance_to(t);
        for f in recv_all(&mut b) {
            out.push((clock.elapsed(), f));
        }
    }
    out
}

#[test]
fn determinism_same_seed_same_trace() {
    let t1 = trace(99);
    assert!(t1.len() > 1_500);
    assert_eq!(t1, trace(99));
    assert_ne!(t1, trace(100));
}

/// Sequence numbers `rx` receives from `from` after both `senders` sent
/// 200 frames each to `rx` through a 50% loss.
fn survivors(ports: &mut [SimLink], senders: [usize; 2], rx: usize) -> [Vec<u32>; 2] {
    let macs: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
    for i in 0..200 {
        for &s in &senders {
            ports[s].send(&frame(macs[s], macs[rx], i, 8)).unwrap();
        }
    }
    let got = recv_all(&mut ports[rx]);
    senders.map(|s| {
        got.iter()
            .filter(|f| f[6..12] == macs[s].0)
            .map(|f| seq_of(f))
            .collect()
    })
}

#[test]
fn ports_get_independent_seeds() {
    // One seed for every port: each direction or port still loses
    // different frames, and every frame is accounted for.
    let clock = SimClock::new();
    let cfg = FaultConfig::seeded(5).with_loss(0.5);
    let (a, b) = SimLink::pair(&clock, 1500, cfg.clone(), cfg.clone());
    let cases: Vec<(&str, Vec<SimLink>, [usize; 2], usize)> = vec![
        ("pair directions", vec![a, b], [0, 1], usize::MAX),
        (
            "switch ports",
            SimSwitch::new(&clock, 3, 1500, cfg),
            [0, 1],
            2,
        ),
    ];
    for (what, mut ports, senders, rx) in cases {
        let [x, y] = if rx == usize::MAX {
            // A pair: each end receives the other's frames.
            let macs: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
            for i in 0..200 {
                ports[0].send(&frame(macs[0], macs[1], i, 8)).unwrap();
                ports[1].send(&frame(macs[1], macs[0], i, 8)).unwrap();
            }
            let ab: Vec<u32> = recv_all(&mut ports[1]).iter().map(|f| seq_of(f)).collect();
            let ba: Vec<u32> = recv_all(&mut ports[0]).iter().map(|f| seq_of(f)).collect();
            [ab, ba]
        } else {
            survivors(&mut ports, senders, rx)
        };
        assert_ne!(x, y, "{what}");
        assert_eq!(
            ports[senders[0]].fault_stats().lost + x.len() as u64,
            200,
            "{what}"
        );
    }
}

#[test]
fn switch_unicast_broadcast_multicast() {
    let clock = SimClock::new();
    let mut ports = SimSwitch::new(&clock, 4, 1500, FaultConfig::default());
    let macs: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
    assert_eq!(macs[3].to_string(), "02:00:00:00:00:04");

    // Unicast 0 -> 2 reaches only port 2.
    let f = frame(macs[0], macs[2], 1, 8);
    ports[0].send(&f).unwrap();
    let got: Vec<usize> = ports.iter_mut().map(|p| recv_all(p).len()).collect();
    assert_eq!(got, vec![0, 0, 1, 0]);

    // Broadcast from 1 reaches every other port, not the sender.
    ports[1]
        .send(&frame(macs[1], MacAddr::BROADCAST, 2, 8))
        .unwrap();
    let got: Vec<usize> = ports.iter_mut().map(|p| recv_all(p).len()).collect();
    assert_eq!(got, vec![1, 0, 1, 1]);

    // Multicast (I/G bit) likewise, to the ports that joined the group
    // (here all but the sender; the sender's own membership is ignored).
    let group = MacAddr([0x01, 0, 0x5e, 0, 0, 1]);
    for p in ports.iter_mut() {
        p.join_group(group).unwrap();
    }
    ports[3].send(&frame(macs[3], group, 3, 8)).unwrap();
    let got: Vec<usize> = ports.iter_mut().map(|p| recv_all(p).len()).collect();
    assert_eq!(got, vec![1, 1, 1, 0]);
    for p in ports.iter_mut() {
        p.leave_group(group).unwrap();
    }

    // Unknown unicast and frames to oneself go nowhere, counted.
    ports[0]
        .send(&frame(macs[0], MacAddr([2, 9, 9, 9, 9, 9]), 4, 8))
        .unwrap();
    ports[0].send(&frame(macs[0], macs[0], 5, 8)).unwrap();
    assert!(ports.iter_mut().all(|p| recv_all(p).is_empty()));
    assert_eq!(ports[0].stats().unroutable, 2);
    assert_eq!(ports[0].stats().sent, 3);
}

#[test]
fn oversize_and_runt_rejected() {
    let clock = SimClock::new();
    let (mut a, mut b) =
        SimLink::pair(&clock, 1000, FaultConfig::default(), FaultConfig::default());
    let ok = frame(a.mac(), b.mac(), 1, 1000 - 6);
    assert_eq!(ok.len(), 1014);
    a.send(&ok).unwrap();
    let big = frame(a.mac(), b.mac(), 1, 1000 - 5);
    let e = a.send(&big).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("1015"), "{e}");
    let e = a.send(&[0u8; 13]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let st = a.stats();
    assert_eq!((st.sent, st.oversize, st.runt), (1, 1, 1));
    assert_eq!(recv_all(&mut b), vec![ok]);
}

#[test]
fn queues_are_bounded() {
    let clock = SimClock::new();
    let opts = SimOptions {
        queue_limit: 8,
        ..SimOptions::default()
    };
    let (mut a, mut b) = SimLink::pair_with(
        &clock,
        opts.clone(),
        FaultConfig::default(),
        FaultConfig::default(),
    );
    for i in 0..8 {
        a.send(&frame(a.mac(), b.mac(), i, 8)).unwrap();
    }
    let e = a.send(&frame(a.mac(), b.mac(), 8, 8)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    assert_eq!(a.stats().would_block, 1);
    assert_eq!(recv_all(&mut b).len(), 8);
    a.send(&frame(a.mac(), b.mac(), 9, 8)).unwrap();

    // Broadcast is tail-dropped at a full port, delivered elsewhere.
    let mut ports = SimSwitch::with_options(&clock, opts, vec![FaultConfig::default(); 3]);
    let m: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
    for i in 0..8 {
        ports[0].send(&frame(m[0], m[1], i, 8)).unwrap();
    }
    ports[2]
        .send(&frame(m[2], MacAddr::BROADCAST, 99, 8))
        .unwrap();
    assert_eq!(ports[1].stats().queue_dropped, 1);
    assert_eq!(recv_all(&mut ports[0]).len(), 1);
    assert_eq!(recv_all(&mut ports[1]).len(), 8);
}

#[test]
fn padding_and_truncation() {
    let clock = SimClock::new();
    let opts = SimOptions {
        pad_short_frames: true,
        ..SimOptions::default()
    };
    let (mut a, mut b) =
        SimLink::pair_with(&clock, opts, FaultConfig::default(), FaultConfig::default());
    let f = frame(a.mac(), b.mac(), 3, 4);
    assert_eq!(f.len(), 24);
    a.send(&f).unwrap();
    let got = recv_all(&mut b);
    assert_eq!(got[0].len(), ETH_MIN_FRAME_LEN);
    assert_eq!(
        seq_of(&got[0]),
        3,
        "receiver trims padding by the length field"
    );

    a.send(&f).unwrap();
    let mut small = [0u8; 10];
    assert_eq!(b.recv(&mut small).unwrap(), 10);
    assert_eq!(small[..], got[0][..10]);
    assert_eq!(b.stats().truncated, 1);
}

#[test]
fn loss_and_reorder_through_pair() {
    let clock = SimClock::new();
    let (mut a, mut b) = SimLink::pair(
        &clock,
        1500,
        FaultConfig::seeded(8)
            .with_loss(0.1)
            .with_reorder(0.1, Duration::from_micros(30)),
        FaultConfig::default(),
    );
    let n = 4_000;
    let mut seqs = Vec::new();
    for i in 0..n {
        a.send(&frame(a.mac(), b.mac(), i, 8)).unwrap();
        clock.advance(Duration::from_micros(10));
        seqs.extend(recv_all(&mut b).iter().map(|f| seq_of(f)));
    }
    while let Some(t) = b.poll_at() {
        clock.advance_to(t);
        seqs.extend(recv_all(&mut b).iter().map(|f| seq_of(f)));
    }
    let st = a.fault_stats();
    assert_eq!(seqs.len() as u64, n as u64 - st.lost);
    let lost = st.lost as f64 / n as f64;
    assert!((lost - 0.1).abs() < 0.015, "loss {lost}");
    let inversions = seqs.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    assert!(inversions > 0 && inversions <= st.reordered);
}

#[test]
fn partition_and_heal() {
    let clock = SimClock::new();
    let (mut a, mut b) =
        SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let ctl = a.control();
    assert_eq!(ctl.ports(), 2);
    a.send(&frame(a.mac(), b.mac(), 1, 8)).unwrap(); // in flight before the cut
    ctl.set_up(1, false).unwrap();
    assert!(!ctl.is_up(1));
    a.send(&frame(a.mac(), b.mac(), 2, 8)).unwrap();
    b.send(&frame(b.mac(), a.mac(), 3, 8)).unwrap();
    assert_eq!(
        recv_all(&mut b)
            .iter()
            .map(|f| seq_of(f))
            .collect::<Vec<_>>(),
        vec![1]
    );
    assert!(recv_all(&mut a).is_empty());
    assert_eq!(a.stats().partitioned, 1);
    assert_eq!(ctl.stats(1).partitioned, 1);
    ctl.set_up(1, true).unwrap();
    a.send(&frame(a.mac(), b.mac(), 4, 8)).unwrap();
    assert_eq!(recv_all(&mut b).len(), 1);
    assert_eq!(
        ctl.set_up(2, false).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );

    // Hub: a broadcast still reaches the ports that are up.
    let mut ports = SimSwitch::new(&clock, 3, 1500, FaultConfig::default());
    let ctl = ports[0].control();
    ctl.set_up(2, false).unwrap();
    let m0 = ports[0].mac();
    ports[0].send(&frame(m0, MacAddr::BROADCAST, 5, 8)).unwrap();
    assert_eq!(recv_all(&mut ports[1]).len(), 1);
    assert!(recv_all(&mut ports[2]).is_empty());
    assert_eq!(ports[0].stats().partitioned, 1);
}

#[test]
fn faults_change_mid_run_keeping_fifo() {
    let clock = SimClock::new();
    let d = Duration::from_micros(100);
    let (mut a, mut b) = SimLink::pair(
        &clock,
        1500,
        FaultConfig::default().with_delay(d, Duration::ZERO),
        FaultConfig::default(),
    );
    let ctl = b.control();
    let t0 = clock.now();
    a.send(&frame(a.mac(), b.mac(), 1, 8)).unwrap();
    // Heal: no delay from now on, but the next frame must not overtake.
    ctl.set_faults(0, FaultConfig::default()).unwrap();
    clock.advance(US);
    a.send(&frame(a.mac(), b.mac(), 2, 8)).unwrap();
    assert!(recv_all(&mut b).is_empty());
    clock.advance_to(t0 + d);
    assert_eq!(
        recv_all(&mut b)
            .iter()
            .map(|f| seq_of(f))
            .collect::<Vec<_>>(),
        vec![1, 2]
    );
    // Once the link is idle, frames go through at their send instant again.
    a.send(&frame(a.mac(), b.mac(), 3, 8)).unwrap();
    assert_eq!(recv_all(&mut b).len(), 1);
    assert_eq!(a.fault_stats().frames, 3, "counters kept across the change");
    // Degrade: lose everything.
    ctl.set_faults(0, FaultConfig::default().with_loss(1.0))
        .unwrap();
    a.send(&frame(a.mac(), b.mac(), 4, 8)).unwrap();
    assert!(recv_all(&mut b).is_empty());
    assert_eq!(a.fault_stats().lost, 1);
    let e = ctl
        .set_faults(0, FaultConfig::default().with_loss(7.0))
        .unwrap_err();
    assert!(e.to_string().contains("loss"), "{e}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Under any faults and any interleaving of sends, clock steps and
    /// receives: nothing is delivered early, and every frame is accounted
    /// for (received = accepted - lost - tail-dropped + duplicated).
    #[test]
    fn every_frame_accounted_for(
        seed in proptest::prelude::any::<u64>(),
        loss in 0.0..0.5f64,
        dup in 0.0..0.5f64,
        reorder in 0.0..0.5f64,
        corrupt in 0.0..0.5f64,
        delay_us in 0u64..50,
        jitter_us in 0u64..50,
        rate in proptest::option::of(1_000_000u64..10_000_000_000),
        queue in proptest::option::of(1usize..64),
        ops in proptest::collection::vec((0u8..3, 0usize..1600), 0..400),
    ) {
        let mut cfg = FaultConfig::seeded(seed)
            .with_loss(loss)
            .with_duplicate(dup)
            .with_reorder(reorder, Duration::from_micros(20))
            .with_corrupt(corrupt)
            .with_delay(Duration::from_micros(delay_us), Duration::from_micros(jitter_us));
        cfg.rate_bps = rate;
        cfg.queue_limit = queue;
        let clock = SimClock::new();
        let (mut a, mut b) = SimLink::pair(&clock, 1500, cfg, FaultConfig::default());
        let mut buf = vec![0u8; 1514];
        let (mut accepted, mut received) = (0u64, 0u64);
        let mut lens = std::collections::BTreeMap::<usize, i64>::new();
        for (op, x) in ops {
            match op {
                0 => match a.send(&vec![0x5a; x]) {
                    Ok(()) => {
                        proptest::prop_assert!((14..=1514).contains(&x));
                        accepted += 1;
                    }
                    Err(e) => proptest::prop_assert_eq!(e.kind(), io::ErrorKind::InvalidInput),
                },
                1 => clock.advance(Duration::from_nanos(x as u64 * 50)),
                _ => {
                    let due = b.next_delivery();
                    match b.recv(&mut buf) {
                        Ok(n) => {
                            proptest::prop_assert!(due.unwrap() <= clock.now());
                            *lens.entry(n).or_default() += 1;
                            received += 1;
                        }
                        Err(_) => proptest::prop_assert!(!matches!(due, Some(t) if t <= clock.now())),
                    }
                }
            }
        }
        while let Some(t) = b.next_delivery() {
            clock.advance_to(t);
            while let Ok(n) = b.recv(&mut buf) {
                *lens.entry(n).or_default() += 1;
                received += 1;
            }
        }
        let st = a.fault_stats();
        proptest::prop_assert_eq!(st.frames, accepted);
        proptest::prop_assert_eq!(received, accepted - st.lost - st.queue_dropped + st.duplicated);
        proptest::prop_assert!(lens.keys().all(|n| (14..=1514).contains(n)));
    }
}

#[test]
fn switch_delivers_groups_to_members_only() {
    let clock = SimClock::new();
    let mut ports = SimSwitch::new(&clock, 4, 1500, FaultConfig::default());
    let m: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
    let g1 = MacAddr([0x01, 0, 0x5e, 0, 0, 1]);
    let g2 = MacAddr([0x33, 0x33, 0, 0, 0, 2]);
    ports[1].join_group(g1).unwrap();
    ports[2].join_group(g1).unwrap();
    ports[2].join_group(g1).unwrap(); // counted: needs two leaves
    ports[3].join_group(g2).unwrap();
    assert_eq!(
        ports[1].join_group(m[0]).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    // (sender, destination, frames received per port)
    let cases = [
        (0, g1, [0, 1, 1, 0]),
        (1, g1, [0, 0, 1, 0]),
        (0, g2, [0, 0, 0, 1]),
        (3, g2, [0, 0, 0, 0]),
        (0, MacAddr::BROADCAST, [0, 1, 1, 1]),
        (2, m[0], [1, 0, 0, 0]),
    ];
    for (from, dst, want) in cases {
        ports[from].send(&frame(m[from], dst, 1, 8)).unwrap();
        let got: Vec<usize> = ports.iter_mut().map(|p| recv_all(p).len()).collect();
        assert_eq!(got, want, "{from} -> {dst}");
    }
    assert_eq!(ports[3].stats().unroutable, 1, "g2 from its only member");
    ports[2].leave_group(g1).unwrap();
    ports[0].send(&frame(m[0], g1, 2, 8)).unwrap();
    assert_eq!(recv_all(&mut ports[2]).len(), 1, "still a member once");
    ports[2].leave_group(g1).unwrap();
    ports[0].send(&frame(m[0], g1, 3, 8)).unwrap();
    assert!(recv_all(&mut ports[2]).is_empty());
    assert_eq!(
        ports[2].leave_group(g1).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn recv_with_borrows_due_frames_up_to_max() {
    let clock = SimClock::new();
    let (mut a, mut b) =
        SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let e = b.recv_with(4, &mut |_| panic!("no frame")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    for i in 0..5 {
        a.send(&frame(a.mac(), b.mac(), i, 8)).unwrap();
    }
    let mut seen = Vec::new();
    assert_eq!(b.recv_with(3, &mut |f| seen.push(seq_of(f))).unwrap(), 3);
    assert_eq!(b.recv_with(8, &mut |f| seen.push(seq_of(f))).unwrap(), 2);
    assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    assert_eq!(b.stats().received, 5);
    // The callback may send on the same segment (no lock held).
    a.send(&frame(a.mac(), b.mac(), 9, 8)).unwrap();
    let mut echo = Vec::new();
    b.recv_with(1, &mut |f| echo.push(f.to_vec())).unwrap();
    for f in &echo {
        b.send(f).unwrap();
    }
    assert_eq!(recv_all(&mut a).len(), 1);
}

//! The sockets over in-memory links (no root needed): EDP members on a
//! `SimSwitch` whose clock is not advanced (no delay faults, frames are
//! deliverable at once; the members use the real clock for timers), one
//! runtime per member and a thread per receiver.

use std::io::ErrorKind;
use std::time::Duration;

use link::fault::FaultConfig;
use link::sim::{SimClock, SimSwitch};
use link::Link;
use runtime::{EthAddr, Runtime, RuntimeConfig};

use super::*;
use crate::Strategy;

const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));
const PORT: u16 = 7400;

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(131) ^ (i >> 8)) as u8)
        .collect()
}

/// Runtimes on the ports of a fresh switch (`n` members).
fn switch(n: usize) -> Vec<Runtime> {
    let clock = SimClock::new();
    SimSwitch::new(&clock, n, 1500, FaultConfig::default())
        .into_iter()
        .map(|l| {
            Runtime::with_link(Box::new(l) as Box<dyn Link>, RuntimeConfig::default()).unwrap()
        })
        .collect()
}

fn members(rts: &[Runtime]) -> Vec<Peer<EthAddr>> {
    rts.iter()
        .enumerate()
        .map(|(i, rt)| {
            Peer::new(
                i as u16,
                runtime::EthAddr::new(rt.mac(), PORT),
                format!("node{i}"),
            )
        })
        .collect()
}

fn config(strategy: Strategy, loss: f64, seed: u64) -> MakConfig {
    let mut c = MakConfig::default().with_strategy(strategy);
    c.seed = Some(seed);
    c.protocol.min_silence = Duration::from_millis(300);
    if loss > 0.0 {
        c.link_fault = Some(FaultConfig::seeded(seed).with_loss(loss));
    }
    c
}

/// Member 0 sends `count` messages of varied sizes to members 1..n, whose
/// links lose `loss` of the frames in each direction; every receiver must
/// get every message once, in order, byte-exact.
fn one_to_many(strategy: Strategy, n: usize, count: usize, loss: f64) -> MakStats {
    let rts = switch(n);
    let peers = members(&rts);
    let group = EdpGroup::new(3, PORT);
    let mut rx = Vec::new();
    for (i, rt) in rts.iter().enumerate().skip(1) {
        let spec = GroupSpec::new(3, i as u16, peers.clone()).receive_from(0);
        let mut s = MakSocket::bind_edp_on(rt, group, spec, config(strategy, loss, 100 + i as u64))
            .unwrap();
        s.set_read_timeout(PATIENCE).unwrap();
        rx.push(std::thread::spawn(move || {
            for k in 0..count {
                let m = s
                    .recv()
                    .unwrap_or_else(|e| panic!("receiver {i}, message {k}: {e}"));
                assert_eq!(m.source, MemberId(0));
                assert_eq!(m.msg, k as u32, "receiver {i}: in order, exactly once");
                assert!(
                    m.data == pattern(size(k), k),
                    "receiver {i}, message {k}: bytes differ"
                );
            }
            // Nothing more: no duplicate delivery.
            let mut s = s;
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            assert_eq!(s.recv().unwrap_err().kind(), ErrorKind::TimedOut);
            s.stats()
        }));
    }
    let spec = GroupSpec::new(3, 0, peers).sender();
    let tx = MakSocket::bind_edp_on(&rts[0], group, spec, config(strategy, 0.0, 1)).unwrap();
    for k in 0..count {
        assert_eq!(tx.send(&pattern(size(k), k)).unwrap(), k as u32);
    }
    assert!(tx.flush(PATIENCE).unwrap(), "every message acknowledged");
    let mut naks = 0;
    for h in rx {
        naks += h.join().unwrap().naks_sent();
    }
    let st = tx.stats();
    assert!(st.done.messages == count as u64);
    if loss > 0.0 && strategy == Strategy::Mak {
        assert!(naks > 0, "losses were repaired through NAKs");
        assert!(st.sender.unwrap().retx_nak > 0);
    }
    st
}

fn size(k: usize) -> usize {
    [0, 1, 100, 1470, 1471, 3000, 9000, 20_000][k % 8]
}

#[test]
fn mak_over_edp_one_to_three() {
    let st = one_to_many(Strategy::Mak, 4, 64, 0.0);
    assert_eq!(st.done.confirmed, 64);
}

#[test]
fn mak_over_edp_repairs_loss_on_every_receiver_link() {
    one_to_many(Strategy::Mak, 4, 64, 0.05);
}

#[test]
fn baselines_over_edp_deliver_under_loss() {
    for s in [Strategy::Ack, Strategy::Iterative, Strategy::Nak] {
        one_to_many(s, 3, 24, 0.03);
    }
}

#[test]
fn a_member_that_never_answers_is_reported_by_name() {
    let rts = switch(3);
    let peers = members(&rts);
    let group = EdpGroup::new(4, PORT);
    // node2 is in the membership but nothing runs there.
    let spec = GroupSpec::new(4, 1, peers.clone()).receive_from(0);
    let mut r =
        MakSocket::bind_edp_on(&rts[1], group, spec, config(Strategy::Mak, 0.0, 7)).unwrap();
    r.set_read_timeout(PATIENCE).unwrap();
    let spec = GroupSpec::new(4, 0, peers).sender();
    let mut tx =
        MakSocket::bind_edp_on(&rts[0], group, spec, config(Strategy::Mak, 0.0, 8)).unwrap();
    for k in 0..10 {
        tx.send(&pattern(2000, k)).unwrap();
    }
    for k in 0..10 {
        assert!(r.recv().unwrap().data == pattern(2000, k));
    }
    assert!(tx.flush(PATIENCE).unwrap());
    tx.set_read_timeout(PATIENCE).unwrap();
    match tx.next_event().unwrap() {
        MakEvent::MemberSilent { member, .. } => {
            assert_eq!(member.name, "node2");
            assert_eq!(member.id, MemberId(2));
        }
        e => panic!("expected node2 reported silent, got {e:?}"),
    }
    assert_eq!(tx.silent_members().len(), 1);
    let st = tx.stats();
    assert_eq!(st.sender.unwrap().members_silent, 1);
    // The one left completes its messages and a new one still works.
    tx.send(b"after").unwrap();
    assert_eq!(r.recv().unwrap().data, b"after");
    assert!(tx.flush(PATIENCE).unwrap());
}

#[test]
fn spec_and_config_errors_say_what_is_wrong() {
    let rts = switch(2);
    let peers = members(&rts);
    let group = EdpGroup::new(5, PORT);
    let e = MakSocket::bind_edp_on(
        &rts[0],
        group,
        GroupSpec::new(5, 0, peers.clone()),
        MakConfig::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("neither sends nor follows"), "{e}");
    let mut wrong = peers.clone();
    wrong[1].addr.port = PORT + 1;
    let e = MakSocket::bind_edp_on(
        &rts[0],
        group,
        GroupSpec::new(5, 0, wrong).sender(),
        MakConfig::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("not the group's port"), "{e}");
    let e = MakSocket::bind_edp_on(
        &rts[1],
        group,
        GroupSpec::new(5, 0, peers.clone()).sender(),
        MakConfig::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("this interface's MAC"), "{e}");
    let unicast = EdpGroup {
        mac: rts[1].mac(),
        port: PORT,
    };
    let e = MakSocket::bind_edp_on(
        &rts[0],
        unicast,
        GroupSpec::new(5, 0, peers.clone()).sender(),
        MakConfig::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a multicast MAC"), "{e}");
    let cfg = MakConfig {
        frame: Some(1495),
        ..MakConfig::default()
    };
    let e = MakSocket::bind_edp_on(
        &rts[0],
        group,
        GroupSpec::new(5, 0, peers.clone()).sender(),
        cfg,
    )
    .unwrap_err();
    assert!(e.to_string().contains("exceeds what EDP"), "{e}");
    let cfg = MakConfig {
        link_fault: Some(FaultConfig::seeded(1).with_corrupt(0.1)),
        ..MakConfig::default()
    };
    let e = MakSocket::bind_edp_on(
        &rts[0],
        group,
        GroupSpec::new(5, 0, peers.clone()).sender(),
        cfg,
    )
    .unwrap_err();
    assert!(e.to_string().contains("no checksum"), "{e}");
    // A receiver cannot send; a sender alone has nothing to read.
    let r = MakSocket::bind_edp_on(
        &rts[0],
        group,
        GroupSpec::new(5, 0, peers).receive_from(1),
        MakConfig::default(),
    )
    .unwrap();
    let e = r.send(b"x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("does not send"), "{e}");
}

#[test]
fn nonblocking_calls_and_readiness() {
    let rts = switch(2);
    let peers = members(&rts);
    let group = EdpGroup::new(6, PORT);
    let mut r = MakSocket::bind_edp_on(
        &rts[1],
        group,
        GroupSpec::new(6, 1, peers.clone()).receive_from(0),
        config(Strategy::Mak, 0.0, 3),
    )
    .unwrap();
    r.set_nonblocking(true);
    assert_eq!(r.recv().unwrap_err().kind(), ErrorKind::WouldBlock);
    let mut poll = mio::Poll::new().unwrap();
    let mut events = mio::Events::with_capacity(4);
    poll.registry()
        .register(&mut r, mio::Token(1), mio::Interest::READABLE)
        .unwrap();
    let tx = MakSocket::bind_edp_on(
        &rts[0],
        group,
        GroupSpec::new(6, 0, peers).sender(),
        config(Strategy::Mak, 0.0, 4),
    )
    .unwrap();
    tx.send(b"ready?").unwrap();
    let mut got = None;
    for _ in 0..200 {
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        match r.recv() {
            Ok(m) => {
                got = Some(m);
                break;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(got.expect("readable within 10 s").data, b"ready?");
    assert!(tx.flush(PATIENCE).unwrap());
}

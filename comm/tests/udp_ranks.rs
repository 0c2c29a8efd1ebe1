//! Communicators of N ranks in one process over CTP on kernel UDP loopback
//! (unprivileged; runs everywhere): all-to-all traffic with tags and
//! wildcards, byte-exact and in order per (source, tag); fragmentation and
//! the send window; held messages on a full unexpected queue; malformed and
//! foreign messages; a failed peer; collectives.

mod common;

use std::io::IoSlice;
use std::time::{Duration, Instant};

use comm::{CommConfig, CommError, Communicator, Completion, PeerState, ANY_SOURCE, ANY_TAG};
use common::{all_to_all, ranks, ranks_with, run, LIMIT, PER_TAG};
use ctp::{CtpConfig, CtpSocket, Options};
use testkit::pattern::pattern;

fn cfg() -> CommConfig {
    CommConfig {
        wait_timeout: Some(LIMIT),
        ..CommConfig::default()
    }
}

#[test]
fn four_ranks_all_to_all_with_tags_and_wildcards() {
    let got = run(ranks(4, cfg()), all_to_all);
    assert_eq!(got, vec![4 * 4 * PER_TAG; 4]);
}

#[test]
fn small_fragments_and_window_keep_order() {
    // 1000-byte fragments and 4 in flight per peer: the 20 KB messages are
    // 21 fragments each, so senders wait for the window and receivers
    // join fragments that CTP may deliver out of order.
    let c = CommConfig {
        fragment_bytes: 1000,
        window_fragments: 4,
        ..cfg()
    };
    let got = run(ranks(3, c), |c| {
        let n = all_to_all(c);
        let st = c.stats();
        assert!(st.fragments_sent > st.messages_sent, "{st:?}");
        n
    });
    assert_eq!(got, vec![3 * 4 * PER_TAG; 3]);
}

#[test]
fn nonblocking_wait_any_vectored_and_large() {
    let got = run(ranks(4, cfg()), |c| {
        let (me, n) = (c.rank(), c.size());
        let mut recvs: Vec<_> = (0..n).map(|src| c.irecv(src, 9u32).unwrap()).collect();
        // Our own message to ourselves is not sent yet.
        assert!(!c.test(&recvs[me]).unwrap());
        let big = pattern(3 << 20 | 17, me as u64);
        let head = [me as u8; 5];
        let mut sends = Vec::new();
        for dst in 0..n {
            let parts = [IoSlice::new(&head), IoSlice::new(&[]), IoSlice::new(&big)];
            sends.push(c.isend_vectored(dst, 9, &parts).unwrap());
        }
        let mut from = Vec::new();
        while !recvs.is_empty() {
            let before = recvs.len();
            let (i, done) = c.wait_any(&mut recvs).unwrap();
            assert!(i < before);
            assert_eq!(recvs.len(), before - 1);
            let (s, d) = done.into_received().unwrap();
            assert_eq!(d.len(), 5 + big.len());
            assert_eq!(&d[..5], &[s.source as u8; 5]);
            assert!(d[5..] == pattern(3 << 20 | 17, s.source as u64));
            from.push(s.source);
        }
        while !sends.is_empty() {
            let (_, done) = c.wait_any(&mut sends).unwrap();
            assert!(matches!(done, Completion::Sent { tag: 9, .. }));
        }
        c.send_vectored(
            (me + 1) % n,
            10,
            &[IoSlice::new(b"ab"), IoSlice::new(b"cd")],
        )
        .unwrap();
        let mut buf = [0u8; 4];
        let s = c.recv_into((me + n - 1) % n, 10u32, &mut buf).unwrap();
        assert_eq!((&buf, s.len), (b"abcd", 4));
        from.sort();
        from
    });
    for f in got {
        assert_eq!(f, vec![0, 1, 2, 3]);
    }
}

#[test]
fn full_unexpected_queue_holds_messages_without_loss() {
    let c = CommConfig {
        limits: comm::matching::MatchLimits {
            max_unexpected_messages: 5,
            ..Default::default()
        },
        ..cfg()
    };
    let mut comms = ranks(2, c);
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    for i in 0..50u32 {
        c0.send(1, i, &i.to_be_bytes()).unwrap();
    }
    c0.flush(LIMIT).unwrap();
    // Wanting the last one first cannot finish: five are queued, the sixth
    // is held, and the rest wait in CTP.
    let e = c1.recv(0, 49u32).unwrap_err();
    assert!(
        matches!(e, CommError::UnexpectedQueueFull { queued: 5, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("raise CommConfig::limits"), "{e}");
    // The failed receive was withdrawn; in order, every message arrives
    // exactly once.
    let st = c1.stats();
    assert_eq!((st.unexpected, st.held, st.posted), (5, 1, 0), "{st:?}");
    assert!(st.unexpected_overflows >= 1);
    for i in 0..50u32 {
        let (s, d) = c1.recv(0, ANY_TAG).unwrap();
        assert_eq!((s.tag, d), (i, i.to_be_bytes().to_vec()));
    }
    let st = c1.stats();
    assert_eq!((st.unexpected, st.held), (0, 0), "{st:?}");
    assert_eq!(
        st.messages_received, 50,
        "the posted tag-49 receive took the last"
    );
}

#[test]
fn malformed_unknown_and_foreign_messages_are_counted_and_dropped() {
    let mut comms = ranks(2, cfg());
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let to1 = c1.hosts()[1];
    // Malformed comm header from a known rank.
    c0.socket()
        .send(comm::wire::COMM_COMMAND, to1, b"garbage", Options::NONE)
        .unwrap();
    // Another CTP command from a known rank.
    c0.socket().send(77, to1, b"other", Options::NONE).unwrap();
    // Another context.
    let mut other = comm::wire::Header {
        flags: comm::wire::FLAG_LAST,
        context: 99,
        tag: 0,
        seq: 0,
        len: 0,
        cq_data: None,
    }
    .to_bytes()
    .to_vec();
    c0.socket()
        .send(comm::wire::COMM_COMMAND, to1, &other, Options::NONE)
        .unwrap();
    // A valid header from an address not in the host list.
    other[2..4].copy_from_slice(&1u16.to_be_bytes());
    let stranger = CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default()).unwrap();
    stranger
        .send(comm::wire::COMM_COMMAND, to1, &other, Options::NONE)
        .unwrap();
    stranger.flush(Some(LIMIT)).unwrap();
    c0.socket().flush(Some(LIMIT)).unwrap();
    // A valid message still comes through, with sequence number 0.
    c0.send(1, 3, b"valid").unwrap();
    let (s, d) = c1.recv(0, 3u32).unwrap();
    assert_eq!((s.source, &d[..]), (0, &b"valid"[..]));
    let st = c1.stats();
    assert_eq!(
        (
            st.malformed,
            st.foreign_command,
            st.foreign_context,
            st.unknown_source
        ),
        (1, 1, 1, 1),
        "{st:?}"
    );
    assert_eq!(st.messages_received, 1);
}

#[test]
fn bad_arguments_are_refused_with_errors() {
    let mut comms = ranks(2, cfg());
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    assert!(matches!(
        c0.send(2, 0, b""),
        Err(CommError::InvalidRank { rank: 2, size: 2 })
    ));
    assert!(matches!(
        c0.send(1, 1 << 31, b""),
        Err(CommError::InvalidTag(_))
    ));
    assert!(matches!(
        c0.irecv(5, ANY_TAG),
        Err(CommError::InvalidRank { .. })
    ));
    let small = Communicator::new(
        CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default()).unwrap(),
        0,
        vec!["127.0.0.1:1".parse().unwrap()],
        CommConfig {
            max_message_bytes: 10,
            ..cfg()
        },
    )
    .unwrap();
    assert!(matches!(
        small.send(0, 0, &[0; 11]),
        Err(CommError::TooLarge { len: 11, max: 10 })
    ));
    // Self-send works without the network.
    small.send(0, 1, b"me").unwrap();
    assert_eq!(small.recv(0, 1u32).unwrap().1, b"me");
    // Truncation consumes the message and says so.
    c0.send(1, 4, b"too long").unwrap();
    let mut buf = [0u8; 3];
    let e = c1.recv_into(0, 4u32, &mut buf).unwrap_err();
    assert!(
        matches!(e, CommError::Truncated { len: 8, buf: 3, .. }),
        "{e}"
    );
    assert_eq!(&buf, b"too");
    // Cancel a posted receive; a matched one cannot be cancelled.
    let r = c1.irecv(0, 5u32).unwrap();
    assert!(c1.cancel(r).is_ok());
    c0.send(1, 6, b"x").unwrap();
    // Probe sees it without taking it.
    let mut seen = None;
    assert!(testkit::wait_until(LIMIT, || {
        seen = c1.iprobe(ANY_SOURCE, 6u32).unwrap();
        seen.is_some()
    }));
    let s = seen.unwrap();
    assert_eq!((s.source, s.tag, s.len), (0, 6, 1));
    assert_eq!(c1.iprobe(0, 7u32).unwrap(), None);
    let r = c1.irecv(0, 6u32).unwrap();
    let r = loop {
        if c1.test(&r).unwrap() {
            break c1.cancel(r).unwrap_err();
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(c1.wait(r).unwrap().into_received().unwrap().1, b"x");
    let dup = Communicator::new(
        CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default()).unwrap(),
        0,
        vec![c0.hosts()[0], c0.hosts()[0]],
        cfg(),
    );
    assert!(matches!(dup, Err(CommError::Bootstrap(_))));
    let mut none = Vec::new();
    assert!(matches!(c0.wait_any(&mut none), Err(CommError::NoRequests)));
}

#[test]
fn a_dead_peer_is_reported() {
    // Short CTP timeouts so "not confirmed" comes within about 0.3 s, and
    // a short failure bound.
    let mut ctp = CtpConfig::default();
    ctp.protocol.default_timeout = Duration::from_millis(1);
    ctp.protocol.min_error_delay = Duration::from_millis(200);
    let bound = Duration::from_millis(500);
    let cfg = CommConfig {
        failure_timeout: Some(bound),
        ..cfg()
    };
    let mut comms = ranks_with(2, cfg, ctp);
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    drop(c1);
    let t0 = Instant::now();
    let r = c0.isend(1, 0, b"into the void").unwrap();
    let failed = testkit::wait_until(Duration::from_secs(20), || {
        c0.progress().unwrap();
        c0.state(1).unwrap() == PeerState::Failed
    });
    assert!(failed, "no failure reported: {:?}", c0.stats());
    eprintln!(
        "rank 1 declared failed after {:?} (bound {bound:?})",
        t0.elapsed()
    );
    let e = c0.wait(r).unwrap_err();
    assert!(matches!(e, CommError::PeerFailed { rank: 1, .. }), "{e}");
    assert!(e.to_string().contains("no answer"), "{e}");
    let e = c0.send(1, 0, b"again").unwrap_err();
    assert!(matches!(e, CommError::PeerFailed { rank: 1, .. }), "{e}");
    let e = c0.recv(1, ANY_TAG).unwrap_err();
    assert!(matches!(e, CommError::PeerFailed { rank: 1, .. }), "{e}");
    let st = c0.stats();
    assert_eq!((st.detected_failures, st.rejoins), (1, 0), "{st:?}");
}

#[test]
fn collectives_on_five_ranks() {
    let got = run(ranks(5, cfg()), |c| {
        let (me, n) = (c.rank(), c.size());
        c.barrier().unwrap();
        let mut out = Vec::new();
        for root in 0..n {
            let mut data = if me == root {
                pattern(100_000 + root, root as u64)
            } else {
                Vec::new()
            };
            c.bcast(root, &mut data).unwrap();
            assert!(
                data == pattern(100_000 + root, root as u64),
                "bcast from {root}"
            );
        }
        let mut ints = [me as i64, 1, -(me as i64) * 1000];
        c.allreduce_sum(&mut ints).unwrap();
        out.push(ints.to_vec());
        let mut floats = [me as f64 * 0.5, 1.25];
        c.allreduce_sum(&mut floats).unwrap();
        for root in [0, n - 1] {
            let mut part = [1i64, me as i64];
            c.reduce_sum(root, &mut part).unwrap();
            if me == root {
                assert_eq!(
                    part,
                    [n as i64, (n * (n - 1) / 2) as i64],
                    "reduce to {root}"
                );
            }
            let mine = vec![me as u8; me * 1000];
            match c.gather(root, &mine).unwrap() {
                Some(all) => {
                    assert_eq!(me, root);
                    for (r, p) in all.iter().enumerate() {
                        assert_eq!(p, &vec![r as u8; r * 1000], "gather to {root}");
                    }
                }
                None => assert_ne!(me, root),
            }
        }
        let all = c.allgather(format!("rank {me}").as_bytes()).unwrap();
        let want: Vec<Vec<u8>> = (0..n).map(|r| format!("rank {r}").into_bytes()).collect();
        assert_eq!(all, want);
        c.barrier().unwrap();
        // Point-to-point traffic is not mixed up with the collectives'.
        c.send((me + 1) % n, 0, &[me as u8]).unwrap();
        let (s, d) = c.recv(ANY_SOURCE, ANY_TAG).unwrap();
        assert_eq!(
            (s.source, d),
            ((me + n - 1) % n, vec![((me + n - 1) % n) as u8])
        );
        (out, floats.to_vec())
    });
    for (ints, floats) in &got {
        assert_eq!(ints[0], vec![10, 5, -10_000]);
        assert_eq!(floats, &vec![5.0, 6.25]);
    }
}

/// Recursive-doubling allreduce on every size from 1 to 7 ranks (powers of
/// two and the folded extra ranks): exact integer sums, and floating-point
/// sums whose order would show in the last bits, identical on every rank.
#[test]
fn allreduce_gives_every_rank_the_same_bits_on_1_to_7_ranks() {
    for n in 1..=7usize {
        let got = run(ranks(n, cfg()), move |c| {
            let me = c.rank() as i64;
            let mut ints = [me, 1, me * me - 7];
            c.allreduce_sum(&mut ints).unwrap();
            let sign = if me % 2 == 0 { 1.0 } else { -1.0 };
            let mut floats = [sign * 1e16 + me as f64 * 0.3, 0.1 * (me + 1) as f64];
            c.allreduce_sum(&mut floats).unwrap();
            (ints, floats.map(f64::to_bits))
        });
        let m = n as i64;
        let want = [m * (m - 1) / 2, m, (0..m).map(|r| r * r - 7).sum::<i64>()];
        for (r, (ints, bits)) in got.iter().enumerate() {
            assert_eq!(ints, &want, "{n} ranks, rank {r}");
            assert_eq!(
                bits, &got[0].1,
                "{n} ranks: rank {r}'s sums differ from rank 0's"
            );
        }
    }
}

/// A rank that joins late does not lose what a faster rank sent before it
/// joined: rank 0's message reaches rank 1's CTP socket (and is confirmed
/// by it, on idle progress) while rank 1 is still between binding its
/// socket and creating its communicator (under `mpirun`, between the
/// address exchange and `Communicator::new`); the communicator then takes
/// it.
#[test]
fn a_message_sent_before_the_receiver_joined_is_received() {
    let socks: Vec<_> = (0..2)
        .map(|_| CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default()).unwrap())
        .collect();
    let hosts: Vec<_> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
    let mut socks = socks.into_iter();
    let (s0, s1) = (socks.next().unwrap(), socks.next().unwrap());
    let c0 = Communicator::new(s0, 0, hosts.clone(), cfg()).unwrap();
    let payload = pattern(1013, 7);
    let req = c0.isend(1, 5, &payload).unwrap();
    let deadline = Instant::now() + LIMIT;
    while c0.socket().stats().messages_confirmed == 0 {
        assert!(
            Instant::now() < deadline,
            "rank 1's socket never confirmed the message without a communicator (idle progress)"
        );
        let _ = c0.test(&req).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let c1 = Communicator::new(
        s1,
        1,
        hosts,
        CommConfig {
            wait_timeout: Some(Duration::from_secs(10)),
            ..CommConfig::default()
        },
    )
    .unwrap();
    let (st, data) = c1
        .recv(0usize, 5u32)
        .expect("the message sent before rank 1 joined");
    assert_eq!((st.source, st.tag), (0, 5));
    assert!(data == payload, "not byte-exact");
    c0.wait(req).unwrap();
}

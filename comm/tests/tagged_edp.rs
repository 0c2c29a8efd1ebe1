//! The tagged endpoint (`comm::tagged`) over CTP over EDP, as root: two
//! network namespaces on a bridge (`vcluster`), each endpoint on its
//! host's interface in the process's shared runtime; skipped with a printed
//! reason without root unless `CI=true`. Names exchanged as bytes (the
//! interface MAC and the port), a ping-pong with CQ data under an ignore
//! mask, 0 B to 16 MiB byte-exact, truncation and cancel.

use std::time::{Duration, Instant};

use comm::tagged::{OpError, PeerName, TaggedConfig, TaggedEndpoint};
use comm::TaggedCompletion;
use ctp::{CtpConfig, EdpTransport, EthAddr};

const PORT: u16 = 4300;
const LIMIT: Duration = Duration::from_secs(30);

fn completions(e: &TaggedEndpoint<EdpTransport>, n: usize) -> Vec<TaggedCompletion> {
    let deadline = Instant::now() + LIMIT;
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} completions",
            out.len()
        );
        e.wait_completion(Some(Duration::from_millis(200))).unwrap();
        let want = n - out.len();
        e.poll_completions(&mut out, want).unwrap();
    }
    out
}

/// Runs `f(index, interface, names)` on a thread in each host's namespace,
/// `names` being every host's endpoint name (MAC, `port`) as bytes; the
/// results in host order.
fn on_each_host<R: Send + 'static>(
    net: &testkit::Cluster,
    port: u16,
    f: impl Fn(usize, &str, &[Vec<u8>]) -> R + Clone + Send + 'static,
) -> Vec<R> {
    let names: Vec<Vec<u8>> = net
        .hosts()
        .iter()
        .map(|h| EthAddr::new(h.mac, port).to_name())
        .collect();
    let threads: Vec<_> = net
        .hosts()
        .iter()
        .map(|h| {
            let (iface, me, names, f) = (h.iface.clone(), h.index, names.clone(), f.clone());
            h.spawn(move || f(me, &iface, &names))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn two_namespaces_exchange_tagged_messages_over_edp() {
    let Some(net) = testkit::setup("comm_tagged_edp", 2, 1500) else {
        return;
    };
    let done = on_each_host(&net, PORT, |me, iface, names| {
        let e =
            TaggedEndpoint::bind_edp(iface, PORT, TaggedConfig::default(), CtpConfig::default())
                .expect("bind on the namespace's interface");
        assert_eq!(
            e.local_name(),
            names[me],
            "the name is the MAC and the port"
        );
        let peer = e.insert_name(&names[1 - me]).unwrap();
        let addr: EthAddr = TaggedEndpoint::<EdpTransport>::parse_name(&names[1 - me]).unwrap();
        assert_eq!(e.peer_addr(peer), Some(addr));
        // Ping-pong: protocol bits 1 in the high half, round in the low.
        for round in 0..200u64 {
            let tag = (1 << 32) | round;
            if me == 0 {
                e.send(peer, tag, &round.to_le_bytes(), Some(round * 3), 1, false)
                    .unwrap();
                e.recv(Some(peer), 1 << 32, 0xffff_ffff, Box::new(vec![0u8; 8]), 2)
                    .unwrap();
            } else {
                e.recv(None, 1 << 32, 0xffff_ffff, Box::new(vec![0u8; 8]), 2)
                    .unwrap();
            }
            let mut c = completions(&e, 1);
            assert_eq!(
                (c[0].tag, c[0].data, c[0].error.clone()),
                (tag, Some(round * 3), None)
            );
            assert_eq!(c[0].buf.as_mut().unwrap().bytes_mut(), round.to_le_bytes());
            if me == 1 {
                e.send(peer, tag, &round.to_le_bytes(), Some(round * 3), 1, false)
                    .unwrap();
            }
        }
        // Sizes across fragments and CTP's large messages.
        let sizes = [0usize, 1500, 100_000, 16 << 20];
        if me == 0 {
            for (i, &n) in sizes.iter().enumerate() {
                let data = testkit::pattern::pattern(n, i as u64);
                e.send(peer, 7, &data, None, 10 + i as u64, true).unwrap();
            }
            // One more, longer than the receiver's buffer.
            e.send(peer, 8, &[5u8; 3000], None, 20, true).unwrap();
            let done = completions(&e, sizes.len() + 1);
            assert!(done.iter().all(|c| c.error.is_none()), "{done:?}");
        } else {
            for (i, &n) in sizes.iter().enumerate() {
                e.recv(None, 7, 0, Box::new(vec![0u8; n]), i as u64)
                    .unwrap();
            }
            e.recv(None, 99, 0, Box::new(vec![0u8; 1]), 50).unwrap();
            assert!(e.cancel(50));
            e.recv(None, 8, 0, Box::new(vec![0u8; 1000]), 51).unwrap();
            let mut got = completions(&e, sizes.len() + 2);
            // Matched in send order (MPI's non-overtaking rule),
            // completed as they finish: a pulled message (above
            // the eager limit) after eager ones sent behind it.
            got.sort_by_key(|c| (c.context != 50, c.context));
            assert_eq!(
                (got[0].context, got[0].error.clone()),
                (50, Some(OpError::Canceled))
            );
            for (i, &n) in sizes.iter().enumerate() {
                let c = &mut got[i + 1];
                assert_eq!((c.context, c.len), (i as u64, n as u64));
                let want = testkit::pattern::pattern(n, i as u64);
                assert!(
                    c.buf.as_mut().unwrap().bytes_mut() == &want[..],
                    "{n} bytes"
                );
            }
            let t = &got[sizes.len() + 1];
            assert_eq!(
                (t.len, t.error.clone()),
                (1000, Some(OpError::Truncated { olen: 3000 }))
            );
        }
        e.flush(LIMIT).unwrap();
        // Let the peer's last confirmations in.
        e.socket().poll(Duration::from_millis(200)).unwrap();
        me
    });
    assert_eq!(done, [0, 1]);
}

/// The next completion, read as fi_cq_read(3) is: nonblocking polls.
fn spin(e: &TaggedEndpoint<EdpTransport>) -> TaggedCompletion {
    let deadline = Instant::now() + LIMIT;
    let mut out = Vec::new();
    while e.poll_completions(&mut out, 1).unwrap() == 0 {
        assert!(Instant::now() < deadline, "no completion");
    }
    out.pop().expect("one")
}

/// A rank that posts its next receive before it replies (libfabric's
/// fabtests pingpong does; `CtpSocket::with_upper_no_reply`) still sends
/// one frame per message: posting the receive leaves the confirmation of
/// the last message held, and the reply carries it. Before, posting the
/// receive sent the confirmation in a frame of its own: two frames per
/// message (`runtime` counts the frames its host sent).
#[test]
fn a_receive_posted_before_the_reply_leaves_one_frame_per_message() {
    const ROUNDS: u64 = 400;
    let Some(net) = testkit::setup("comm_tagged_edp_one_frame", 2, 1500) else {
        return;
    };
    let done = on_each_host(&net, PORT + 1, |me, iface, names| {
        // Busy-polling, as MPI ranks and fabtests poll: the
        // waiting thread takes the frame (the hold is its).
        let e = TaggedEndpoint::bind_edp(
            iface,
            PORT + 1,
            TaggedConfig::default(),
            CtpConfig {
                wait: runtime::WaitPolicy::BusyPoll,
                ..CtpConfig::default()
            },
        )
        .expect("bind on the namespace's interface");
        let peer = e.insert_name(&names[1 - me]).unwrap();
        let recv = |round: u64| {
            e.recv(Some(peer), round, 0, Box::new(vec![0u8; 8]), round)
                .unwrap()
        };
        // A first exchange: both ends know each other (the
        // introduction's frames are not counted).
        recv(0);
        e.send(peer, 0, &[0; 8], None, 0, false).unwrap();
        assert_eq!(spin(&e).error, None);
        let rt = e.socket().runtime();
        let before = rt.stats().tx_frames;
        for round in 1..=ROUNDS {
            if me == 0 {
                recv(round);
                e.send(peer, round, &round.to_le_bytes(), None, 0, false)
                    .unwrap();
                assert_eq!(spin(&e).error, None);
            } else {
                if round == 1 {
                    recv(1);
                }
                assert_eq!(spin(&e).error, None);
                // The next receive first, then the reply.
                if round < ROUNDS {
                    recv(round + 1);
                }
                // As fabtests' pingpong, which reads its transmit
                // CQ before it sends: an empty poll.
                let mut none = Vec::new();
                assert_eq!(e.poll_completions(&mut none, 1).unwrap(), 0);
                e.send(peer, round, &round.to_le_bytes(), None, 0, false)
                    .unwrap();
            }
        }
        let frames = rt.stats().tx_frames - before;
        e.flush(LIMIT).unwrap();
        e.socket().poll(Duration::from_millis(200)).unwrap();
        (me, frames)
    });
    for (me, frames) in done {
        eprintln!("rank {me}: {frames} frames for {ROUNDS} messages");
        if me == 1 {
            // One per reply; a confirmation alone only when the replier
            // was off the CPU for the hold's 100 us (DEFER_MAX).
            assert!(
                frames <= ROUNDS + ROUNDS / 4,
                "{frames} frames for {ROUNDS} replies: the receive posted first sent the confirmation alone"
            );
        }
    }
}

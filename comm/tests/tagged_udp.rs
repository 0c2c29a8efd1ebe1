//! The tagged endpoint (`comm::tagged`) over CTP on UDP, unprivileged:
//! 64-bit tags with ignore masks, source-less and directed receives, CQ
//! data, messages of 0 B to 64 MiB copied into caller buffers, truncation
//! with the real length, peek / claim / discard, cancel, peers inserted and
//! removed at run time, peers learned on first contact (bounded), messages
//! to oneself, the completion queue's bound, a dead peer's explicit error,
//! threads waiting on one endpoint, and a large reply that keeps its
//! sender answering.

use std::sync::Arc;
use std::time::{Duration, Instant};

use comm::tagged::{OpError, OpKind, PeekMode, TaggedConfig, TaggedEndpoint};
use comm::{CommConfig, CommError, TaggedCompletion};
use ctp::{CtpConfig, UdpTransport};

type Ep = TaggedEndpoint<UdpTransport>;

const LIMIT: Duration = Duration::from_secs(30);

fn ep(cfg: TaggedConfig) -> Ep {
    TaggedEndpoint::bind_udp("127.0.0.1:0", cfg, CtpConfig::default()).unwrap()
}

/// Two endpoints that know each other: (a, b, b's id at a, a's id at b).
fn pair(cfg: TaggedConfig) -> (Ep, Ep, usize, usize) {
    let (a, b) = (ep(cfg.clone()), ep(cfg));
    let ab = a.insert_name(&b.local_name()).unwrap();
    let ba = b.insert_name(&a.local_name()).unwrap();
    (a, b, ab, ba)
}

/// The next `n` completions of `e`, waiting at most `LIMIT`.
fn completions(e: &Ep, n: usize) -> Vec<TaggedCompletion> {
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

fn bytes(c: &mut TaggedCompletion) -> Vec<u8> {
    let n = c.len as usize;
    c.buf.as_mut().expect("a receive's buffer").bytes_mut()[..n].to_vec()
}

#[test]
fn endpoints_are_send_and_sync() {
    fn send_sync<X: Send + Sync>() {}
    send_sync::<Ep>();
    send_sync::<TaggedEndpoint<ctp::EdpTransport>>();
}

#[test]
fn tags_masks_sources_and_cq_data() {
    let (a, b, ab, ba) = pair(TaggedConfig::default());
    // Protocol 7 in the high bits, any low bits, from anyone.
    b.recv(None, 0x7 << 32, 0xffff_ffff, Box::new(vec![0u8; 64]), 1)
        .unwrap();
    // Exactly tag 5 from a.
    b.recv(Some(ba), 5, 0, Box::new(vec![0u8; 64]), 2).unwrap();
    a.send(ab, 5, b"five", None, 10, true).unwrap();
    a.send(ab, (0x7 << 32) | 42, b"seven", Some(0xdead), 11, true)
        .unwrap();
    let mut got = completions(&b, 2);
    got.sort_by_key(|c| c.context);
    assert_eq!(
        (got[0].tag, got[0].data, got[0].source, got[0].kind),
        ((0x7 << 32) | 42, Some(0xdead), Some(ba), OpKind::Recv)
    );
    assert_eq!(bytes(&mut got[0]), b"seven");
    assert_eq!(
        (got[1].tag, got[1].data, got[1].error.clone()),
        (5, None, None)
    );
    assert_eq!(bytes(&mut got[1]), b"five");
    let sent = completions(&a, 2);
    let mut ctx: Vec<_> = sent.iter().map(|c| (c.context, c.kind, c.len)).collect();
    ctx.sort();
    assert_eq!(ctx, vec![(10, OpKind::Send, 4), (11, OpKind::Send, 5)]);
    // An inject makes no completion; a message to ourselves goes straight
    // to matching.
    let me = a.insert_name(&a.local_name()).unwrap();
    a.recv(None, 9, 0, Box::new(vec![0u8; 8]), 3).unwrap();
    a.send(me, 9, b"self", None, 12, false).unwrap();
    let mut c = completions(&a, 1);
    assert_eq!((c[0].context, c[0].source), (3, Some(me)));
    assert_eq!(bytes(&mut c[0]), b"self");
    assert_eq!(a.completion_counts().0 + a.completion_counts().1, 0);
}

#[test]
fn zero_bytes_to_64_mib_arrive_byte_exact_in_send_order() {
    let (a, b, ab, _) = pair(TaggedConfig::default());
    let sizes = [0usize, 1, 4000, 1 << 20, 64 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        b.recv(None, 3, 0, Box::new(vec![0u8; n]), i as u64)
            .unwrap();
    }
    for (i, &n) in sizes.iter().enumerate() {
        let data = testkit::pattern::pattern(n, i as u64);
        a.send(ab, 3, &data, None, 100 + i as u64, true).unwrap();
    }
    let mut got = completions(&b, sizes.len());
    for (i, c) in got.iter_mut().enumerate() {
        assert_eq!(c.context, i as u64, "receives complete in send order");
        assert_eq!(c.error, None);
        let want = testkit::pattern::pattern(sizes[i], i as u64);
        assert!(bytes(c) == want, "message {i} of {} bytes", sizes[i]);
    }
    completions(&a, sizes.len());
}

#[test]
fn truncation_reports_the_message_length() {
    let (a, b, ab, _) = pair(TaggedConfig::default());
    // Posted before, and unexpected (arrived before the receive).
    b.recv(None, 1, 0, Box::new(vec![0u8; 4]), 1).unwrap();
    a.send(ab, 1, b"0123456789", None, 0, false).unwrap();
    a.send(ab, 2, &[7u8; 100], None, 0, false).unwrap();
    let mut c = completions(&b, 1);
    assert_eq!(c[0].error, Some(OpError::Truncated { olen: 10 }));
    assert_eq!(bytes(&mut c[0]), b"0123");
    // Wait until the second is unexpected at b, then receive it short.
    b.peek(None, 2, 0, 5, PeekMode::Peek).unwrap();
    while completions(&b, 1)[0].error.is_some() {
        std::thread::sleep(Duration::from_millis(5));
        b.peek(None, 2, 0, 5, PeekMode::Peek).unwrap();
    }
    b.recv(None, 2, 0, Box::new(vec![0u8; 30]), 2).unwrap();
    let c = completions(&b, 1);
    assert_eq!(
        (c[0].len, c[0].error.clone()),
        (30, Some(OpError::Truncated { olen: 100 }))
    );
}

/// Peeks until a message matching `tag` is unexpected at `b`; returns the
/// peek's completion.
fn peek_until(b: &Ep, tag: u64, ctx: u64, mode: PeekMode) -> TaggedCompletion {
    let deadline = Instant::now() + LIMIT;
    loop {
        b.peek(None, tag, 0, ctx, mode).unwrap();
        let c = completions(b, 1).pop().unwrap();
        if c.error != Some(OpError::NoMessage) {
            return c;
        }
        assert!(Instant::now() < deadline, "no message with tag {tag}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn peek_claim_and_discard() {
    let (a, b, ab, ba) = pair(TaggedConfig::default());
    // Nothing yet: FI_ENOMSG.
    b.peek(None, 1, 0, 9, PeekMode::Peek).unwrap();
    let c = completions(&b, 1);
    assert_eq!(
        (c[0].context, c[0].error.clone()),
        (9, Some(OpError::NoMessage))
    );
    a.send(ab, 1, b"first", Some(1), 0, false).unwrap();
    a.send(ab, 2, b"second", None, 0, false).unwrap();
    a.send(ab, 3, b"third", None, 0, false).unwrap();
    // Peek leaves it.
    let p = peek_until(&b, 1, 20, PeekMode::Peek);
    assert_eq!((p.len, p.tag, p.data, p.source), (5, 1, Some(1), Some(ba)));
    let p = peek_until(&b, 1, 21, PeekMode::Peek);
    assert_eq!(p.len, 5, "a peek takes nothing");
    // Claim keys it by the context; a plain receive no longer sees it.
    let p = peek_until(&b, 1, 22, PeekMode::Claim);
    assert_eq!(p.context, 22);
    b.peek(None, 1, 0, 23, PeekMode::Peek).unwrap();
    assert_eq!(completions(&b, 1)[0].error, Some(OpError::NoMessage));
    b.recv_claimed(22, Box::new(vec![0u8; 16])).unwrap();
    let mut c = completions(&b, 1);
    assert_eq!((c[0].context, c[0].tag), (22, 1));
    assert_eq!(bytes(&mut c[0]), b"first");
    assert!(matches!(
        b.recv_claimed(22, Box::new(vec![0u8; 16])),
        Err(CommError::UnknownRequest(22))
    ));
    // Discard of the first match, and of a claimed message.
    let p = peek_until(&b, 2, 30, PeekMode::Discard);
    assert_eq!((p.len, p.tag), (6, 2));
    peek_until(&b, 3, 31, PeekMode::Claim);
    b.discard_claimed(31).unwrap();
    assert_eq!(completions(&b, 1)[0].context, 31);
    let s = b.stats();
    assert_eq!((s.unexpected, s.unexpected_bytes), (0, 0), "{s:?}");
}

#[test]
fn cancel_completes_a_posted_receive_once() {
    let (a, b, ab, _) = pair(TaggedConfig::default());
    b.recv(None, 4, 0, Box::new(vec![0u8; 8]), 77).unwrap();
    assert!(b.cancel(77));
    assert!(!b.cancel(77), "cancelled already");
    let c = completions(&b, 1);
    assert_eq!(
        (c[0].context, c[0].error.clone()),
        (77, Some(OpError::Canceled))
    );
    // The message goes to the next receive instead.
    a.send(ab, 4, b"x", None, 0, false).unwrap();
    b.recv(None, 4, 0, Box::new(vec![0u8; 8]), 78).unwrap();
    let c = completions(&b, 1);
    assert_eq!((c[0].context, c[0].len, c[0].error.clone()), (78, 1, None));
    assert!(!b.cancel(78), "completed: nothing to cancel");
}

#[test]
fn peers_join_and_leave_at_run_time() {
    let cfg = TaggedConfig {
        max_peers: 3,
        ..TaggedConfig::default()
    };
    let (a, b, ab, ba) = pair(cfg.clone());
    assert_eq!(
        a.insert_name(&b.local_name()).unwrap(),
        ab,
        "same address, same id"
    );
    assert_eq!(a.peer_addr(ab), Some(b.local_addr()));
    let c = ep(cfg.clone());
    let ac = a.insert_name(&c.local_name()).unwrap();
    let ca = c.insert_name(&a.local_name()).unwrap();
    assert_ne!(ac, ab);
    // The budget holds max_peers windows.
    let d = ep(cfg);
    a.insert_name(&d.local_name()).unwrap();
    assert!(matches!(
        a.insert_name(&ep(TaggedConfig::default()).local_name()),
        Err(CommError::Bootstrap(_))
    ));
    // A receive naming a removed peer completes with an error; the id is
    // not reused and refused afterwards.
    a.recv(Some(ab), 1, 0, Box::new(vec![0u8; 4]), 5).unwrap();
    a.remove_peer(ab).unwrap();
    let e = completions(&a, 1);
    assert!(
        matches!(&e[0].error, Some(OpError::PeerUnreachable { peer, .. }) if *peer == ab),
        "{e:?}"
    );
    assert_eq!(a.peer_addr(ab), None);
    assert!(matches!(
        a.send(ab, 1, b"", None, 0, true),
        Err(CommError::UnknownPeer(_))
    ));
    assert!(matches!(a.remove_peer(ab), Err(CommError::UnknownPeer(_))));
    // Messages from the removed peer's address are counted, not matched.
    b.send(ba, 1, b"gone", None, 0, false).unwrap();
    // The others still talk.
    c.send(ca, 2, b"still", None, 0, true).unwrap();
    a.recv(Some(ac), 2, 0, Box::new(vec![0u8; 8]), 6).unwrap();
    let mut got = completions(&a, 1);
    assert_eq!((got[0].context, got[0].source), (6, Some(ac)));
    assert_eq!(bytes(&mut got[0]), b"still");
    b.flush(LIMIT).unwrap();
    a.progress().unwrap();
    assert!(a.stats().unknown_source >= 1, "{:?}", a.stats());
    assert!(matches!(
        TaggedEndpoint::<UdpTransport>::parse_name(&[9, 9]),
        Err(CommError::Bootstrap(_))
    ));
}

/// fabtests' address exchange: the server receives from a client it has
/// no address for, answers only after inserting the name the message
/// carried, and that insertion binds to the peer learned on first
/// contact. The table's bound holds for strangers too.
#[test]
fn a_sender_not_inserted_is_heard_and_its_insertion_binds_to_it() {
    let cfg = TaggedConfig {
        max_peers: 2,
        ..TaggedConfig::default()
    };
    let (server, client) = (ep(cfg.clone()), ep(cfg.clone()));
    let to_server = client.insert_name(&server.local_name()).unwrap();
    server
        .recv(None, 1, 0, Box::new(vec![0u8; 64]), 10)
        .unwrap();
    client
        .send(to_server, 1, &client.local_name(), None, 11, true)
        .unwrap();
    let mut got = completions(&server, 1);
    let learned = got[0].source.expect("a source");
    let name = bytes(&mut got[0]);
    assert_eq!(server.peer_addr(learned), Some(client.local_addr()));
    assert_eq!(server.stats().first_contacts, 1);
    // The insertion of the name the message carried: the same peer.
    assert_eq!(server.insert_name(&name).unwrap(), learned);
    server.send(learned, 2, b"pong", None, 12, true).unwrap();
    client
        .recv(Some(to_server), 2, 0, Box::new(vec![0u8; 8]), 13)
        .unwrap();
    let c = completions(&client, 2);
    assert!(
        c.iter().any(|c| c.context == 13 && c.error.is_none()),
        "{c:?}"
    );
    // A second stranger fits (2 peers), a third does not: its message is
    // dropped and counted.
    for (i, other) in [ep(cfg.clone()), ep(cfg)].iter().enumerate() {
        let id = other.insert_name(&server.local_name()).unwrap();
        other.send(id, 3, b"hi", None, 0, false).unwrap();
        other.flush(LIMIT).unwrap();
        let _ = i;
    }
    let deadline = Instant::now() + LIMIT;
    while server.stats().first_contacts_refused == 0 {
        assert!(Instant::now() < deadline, "{:?}", server.stats());
        server.progress().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    // The refused stranger's sender resends, so each of its frames is
    // counted again: at least one refusal, exactly two peers learned.
    let st = server.stats();
    assert_eq!(st.first_contacts, 2, "{st:?}");
    assert!(st.first_contacts_refused >= 1, "{st:?}");
}

/// Messages to the endpoint's own address: sends, a synchronous-send
/// style acknowledgement back to oneself, probes and cancel (MPI_COMM_SELF
/// over pml cm).
#[test]
fn messages_to_oneself_send_probe_claim_and_cancel() {
    let e = ep(TaggedConfig::default());
    let me = e.insert_name(&e.local_name()).unwrap();
    // The sender posts the acknowledgement's receive first, then sends.
    e.recv(Some(me), 0x2_0000_0007, 0, Box::new(Vec::new()), 1)
        .unwrap();
    e.send(me, 0x1_0000_0007, b"sync", Some(5), 2, true)
        .unwrap();
    // The receiver probes, claims, receives the claimed message, and
    // answers with an empty acknowledgement without completion.
    e.peek(Some(me), 0x1_0000_0007, 0, 3, PeekMode::Claim)
        .unwrap();
    let mut c = completions(&e, 2);
    c.sort_by_key(|c| c.context);
    assert_eq!((c[0].context, c[0].kind), (2, OpKind::Send));
    assert_eq!((c[1].context, c[1].len, c[1].data), (3, 4, Some(5)));
    e.recv_claimed(3, Box::new(vec![0u8; 8])).unwrap();
    let mut c = completions(&e, 1);
    assert_eq!(bytes(&mut c[0]), b"sync");
    e.send(me, 0x2_0000_0007, b"", None, 4, false).unwrap();
    let c = completions(&e, 1);
    assert_eq!((c[0].context, c[0].len, c[0].error.clone()), (1, 0, None));
    // A probe that finds nothing, and a cancelled receive from oneself.
    e.peek(Some(me), 9, 0, 5, PeekMode::Peek).unwrap();
    let c = completions(&e, 1);
    assert_eq!(c[0].error, Some(OpError::NoMessage));
    e.recv(Some(me), 9, 0, Box::new(vec![0u8; 4]), 6).unwrap();
    assert!(e.cancel(6));
    let c = completions(&e, 1);
    assert_eq!(
        (c[0].context, c[0].error.clone()),
        (6, Some(OpError::Canceled))
    );
    assert!(!e.cancel(6));
}

#[test]
fn the_completion_queue_is_bounded() {
    let cfg = TaggedConfig {
        cq_size: 3,
        ..TaggedConfig::default()
    };
    let (a, b, ab, _) = pair(cfg);
    for i in 0..3 {
        b.recv(None, 1, 0, Box::new(vec![0u8; 1]), i).unwrap();
    }
    // Three receives due: no room for a fourth completion.
    assert!(matches!(
        b.recv(None, 1, 0, Box::new(vec![0u8; 1]), 3),
        Err(CommError::CompletionQueueFull(3))
    ));
    assert!(matches!(
        b.peek(None, 1, 0, 3, PeekMode::Peek),
        Err(CommError::CompletionQueueFull(3))
    ));
    for _ in 0..3 {
        a.send(ab, 1, b"m", None, 0, false).unwrap();
    }
    // Completed but not read: still no room.
    while b.completion_counts().0 < 3 {
        b.wait_completion(Some(LIMIT)).unwrap();
    }
    assert!(!b.cancel(99));
    assert!(b.recv(None, 1, 0, Box::new(vec![0u8; 1]), 4).is_err());
    let got = completions(&b, 3);
    assert_eq!(got.iter().map(|c| c.context).collect::<Vec<_>>(), [0, 1, 2]);
    b.recv(None, 1, 0, Box::new(vec![0u8; 1]), 5).unwrap();
    // Injects need no room; sends with completions do.
    let sends: Vec<_> = (0..4).map(|i| a.send(ab, 9, b"", None, i, true)).collect();
    assert!(sends[..3].iter().all(|r| r.is_ok()), "{sends:?}");
    assert!(matches!(sends[3], Err(CommError::CompletionQueueFull(_))));
    a.send(ab, 9, b"", None, 0, false).unwrap();
}

#[test]
fn a_dead_peer_fails_the_receives_naming_it() {
    let cfg = TaggedConfig {
        comm: CommConfig {
            failure_timeout: Some(Duration::from_millis(500)),
            ..CommConfig::default()
        },
        ..TaggedConfig::default()
    };
    let (a, b, ab, ba) = pair(cfg);
    a.send(ab, 1, b"hello", None, 0, false).unwrap();
    b.recv(Some(ba), 1, 0, Box::new(vec![0u8; 8]), 1).unwrap();
    assert_eq!(completions(&b, 1)[0].error, None);
    drop(a);
    let t0 = Instant::now();
    b.recv(Some(ba), 2, 0, Box::new(vec![0u8; 8]), 2).unwrap();
    let c = completions(&b, 1);
    assert!(
        matches!(&c[0].error, Some(OpError::PeerUnreachable { peer, .. }) if *peer == ba),
        "{c:?}"
    );
    assert!(t0.elapsed() < LIMIT);
}

#[test]
fn threads_waiting_on_one_endpoint_each_get_their_message() {
    let (a, b, ab, _) = pair(TaggedConfig::default());
    let b = Arc::new(b);
    const N: u64 = 4;
    const PER: u64 = 200;
    let waiters: Vec<_> = (0..N)
        .map(|t| {
            let b = b.clone();
            std::thread::spawn(move || {
                for i in 0..PER {
                    let ctx = t * 1000 + i;
                    b.recv(None, t, 0, Box::new(vec![0u8; 8]), ctx).unwrap();
                }
            })
        })
        .collect();
    for w in waiters {
        w.join().unwrap();
    }
    for i in 0..PER {
        for t in 0..N {
            a.send(ab, t, &i.to_be_bytes(), None, 0, false).unwrap();
        }
    }
    // Readers on several threads drain the one queue.
    let readers: Vec<_> = (0..N)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let deadline = Instant::now() + LIMIT;
                while Instant::now() < deadline {
                    b.wait_completion(Some(Duration::from_millis(50))).unwrap();
                    let mut out = Vec::new();
                    b.poll_completions(&mut out, 16).unwrap();
                    mine.extend(out.into_iter().map(|mut c| (c.context, bytes(&mut c))));
                    let (q, due, _) = b.completion_counts();
                    if q == 0 && due == 0 {
                        break;
                    }
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<_> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    all.sort();
    assert_eq!(all.len() as u64, N * PER);
    for (ctx, data) in all {
        assert_eq!(data, (ctx % 1000).to_be_bytes(), "context {ctx}");
    }
}

/// A rank that replies with a large message stays alive to its peer: the
/// copy is made before the engine lock is taken, so the confirmation held
/// for the reply (and every other one) goes out meanwhile. Before, the
/// copy of 512 MiB held the lock for seconds on a loaded host with the
/// confirmation of the peer's last packet behind it, and the peer's CTP
/// suspected it (or its failure detector declared it dead). CTP's error
/// deadline here is short (2 resends, 150 ms floor) so that a copy of
/// 384 MiB under the lock outlasts it: without the change this test fails
/// with `PeerUnreachable` ("peer unresponsive").
#[test]
fn a_large_reply_does_not_silence_the_replier() {
    let cfg = TaggedConfig {
        comm: CommConfig {
            failure_timeout: Some(Duration::from_millis(300)),
            ..CommConfig::default()
        },
        ..TaggedConfig::default()
    };
    let mut ctp = CtpConfig::default();
    ctp.protocol.max_resends = 2;
    ctp.protocol.min_error_delay = Duration::from_millis(150);
    let ep = || TaggedEndpoint::bind_udp("127.0.0.1:0", cfg.clone(), ctp.clone()).unwrap();
    let (a, b) = (ep(), ep());
    let ab = a.insert_name(&b.local_name()).unwrap();
    let ba = b.insert_name(&a.local_name()).unwrap();
    let n = 384 << 20;
    let data = testkit::pattern::pattern(n, 7);
    a.recv(Some(ab), 6, 0, Box::new(vec![0u8; n]), 1).unwrap();
    b.recv(Some(ba), 5, 0, Box::new(vec![0u8; 16]), 2).unwrap();
    a.send(ab, 5, b"ping", None, 0, false).unwrap();
    assert_eq!(completions(&b, 1)[0].error, None);
    // The reply at once, while the ping's confirmation is held for it.
    b.send(ba, 6, &data, None, 3, true).unwrap();
    let mut c = completions(&a, 1);
    assert_eq!(c[0].error, None, "{:?}", a.socket().stats());
    assert!(bytes(&mut c[0]) == data, "the message arrived changed");
    assert_eq!(a.stats().peer_failures, 0, "{:?}", a.stats());
    assert_eq!(completions(&b, 1)[0].error, None);
}

/// Rendezvous (messages above the eager limit): the sender's own buffer
/// (`send_buf`) is offered without a copy and its send completes only
/// when the receiver has pulled it; the receiver's posted buffer takes the
/// front of a longer message (truncation reported with the length); an
/// unexpected one can be claimed and received, or discarded (which
/// releases its sender too).
#[test]
fn rendezvous_pulls_from_the_senders_buffer_into_the_posted_one() {
    let cfg = TaggedConfig {
        comm: CommConfig {
            eager_limit: 64 << 10,
            ..CommConfig::default()
        },
        ..TaggedConfig::default()
    };
    let (a, b, ab, _) = pair(cfg);
    let body: Vec<u8> = (0..3u32 << 20).map(|i| (i * 31 + i / 977) as u8).collect();
    a.send_buf(ab, 8, body.clone(), None, 80, true).unwrap();
    // Nothing can complete the send before the receiver takes it.
    assert!(!a.wait_completion(Some(Duration::from_millis(200))).unwrap());
    b.recv(None, 8, 0, Box::new(vec![0u8; 1 << 20]), 81)
        .unwrap();
    let mut c = completions(&b, 1);
    assert_eq!(c[0].len, 1 << 20);
    assert_eq!(
        c[0].error,
        Some(OpError::Truncated {
            olen: body.len() as u64
        })
    );
    assert!(bytes(&mut c[0]) == body[..1 << 20]);
    let s = completions(&a, 1);
    assert_eq!(
        (s[0].context, s[0].kind, s[0].error.clone()),
        (80, OpKind::Send, None)
    );
    // Unexpected rendezvous: a handle, claimed and received; another
    // discarded.
    a.send_buf(ab, 9, body.clone(), None, 90, true).unwrap();
    a.send_buf(ab, 10, vec![7u8; 200_000], None, 100, true)
        .unwrap();
    let p = peek_until(&b, 9, 91, PeekMode::Claim);
    assert_eq!(p.len, body.len() as u64);
    let s = b.stats();
    assert_eq!(s.unexpected_bytes, 0, "a handle, not a copy: {s:?}");
    b.recv_claimed(91, Box::new(vec![0u8; body.len()])).unwrap();
    let mut c = completions(&b, 1);
    assert_eq!((c[0].context, c[0].error.clone()), (91, None));
    assert!(bytes(&mut c[0]) == body);
    let p = peek_until(&b, 10, 101, PeekMode::Discard);
    assert_eq!(p.len, 200_000);
    let mut done: Vec<u64> = completions(&a, 2).iter().map(|c| c.context).collect();
    done.sort();
    assert_eq!(
        done,
        [90, 100],
        "both sends complete: pulled, and discarded"
    );
    assert_eq!(a.stats().rendezvous_sent, 3);
}

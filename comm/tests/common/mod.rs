//! Shared by the multi-rank tests: running ranks on threads, the
//! all-to-all exchange and its expected messages.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use comm::{CommConfig, Communicator, Completion, ANY_SOURCE, ANY_TAG};
use ctp::{CtpConfig, CtpSocket, Transport, UdpTransport};
use testkit::pattern::pattern;

/// Bound of every blocking call and flush in the tests.
pub const LIMIT: Duration = Duration::from_secs(60);

/// `n` ranks over CTP on UDP loopback (ephemeral ports), one process.
pub fn ranks_with(n: usize, cfg: CommConfig, ctp: CtpConfig) -> Vec<Communicator<UdpTransport>> {
    let socks: Vec<_> = (0..n)
        .map(|_| CtpSocket::bind_udp("127.0.0.1:0", ctp.clone()).unwrap())
        .collect();
    let hosts: Vec<SocketAddr> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
    socks
        .into_iter()
        .enumerate()
        .map(|(r, s)| Communicator::new(s, r, hosts.clone(), cfg.clone()).unwrap())
        .collect()
}

/// [`ranks_with`] with CTP's defaults.
pub fn ranks(n: usize, cfg: CommConfig) -> Vec<Communicator<UdpTransport>> {
    ranks_with(n, cfg, CtpConfig::default())
}

/// Runs `f(comm)` for every rank on its own thread; returns the results
/// in rank order.
pub fn run<T: Transport, R: Send + 'static>(
    comms: Vec<Communicator<T>>,
    f: impl Fn(&Communicator<T>) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let threads: Vec<_> = comms
        .into_iter()
        .map(|c| {
            let f = f.clone();
            std::thread::spawn(move || {
                let r = f(&c);
                c.finalize(LIMIT).unwrap();
                r
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Messages per (source, dest, tag).
pub const PER_TAG: usize = 12;

/// Length of message `i` of (src, dst, tag): 0, small, and some over the
/// fragment size.
pub fn len_of(src: usize, dst: usize, tag: u32, i: usize) -> usize {
    match (src + dst + tag as usize + i) % 6 {
        0 => 0,
        1 => 1,
        2 => 100 + i,
        3 => 5000 + 7 * i,
        4 => 20_000 + src * 1000 + i,
        _ => 64,
    }
}

pub fn seed_of(src: usize, dst: usize, tag: u32, i: usize) -> u64 {
    ((src as u64) << 48) | ((dst as u64) << 32) | ((tag as u64) << 16) | i as u64
}

pub fn expected(src: usize, dst: usize, tag: u32, i: usize) -> Vec<u8> {
    pattern(len_of(src, dst, tag, i), seed_of(src, dst, tag, i))
}

/// Every rank sends PER_TAG messages of tags 0..4 to every rank (itself
/// too), all nonblocking, then receives them: tag 0 by (source, 0), tag 1
/// by (ANY_SOURCE, 1), the rest by (ANY_SOURCE, ANY_TAG). Each message is
/// checked byte for byte against the one its (source, tag) order says must
/// come next.
pub fn all_to_all<T: Transport>(c: &Communicator<T>) -> usize {
    let (me, n) = (c.rank(), c.size());
    let mut sends = Vec::new();
    for i in 0..PER_TAG {
        for tag in 0..4u32 {
            for dst in 0..n {
                sends.push(c.isend(dst, tag, &expected(me, dst, tag, i)).unwrap());
            }
        }
    }
    let mut next: HashMap<(usize, u32), usize> = HashMap::new();
    let mut check = |src: usize, tag: u32, data: &[u8]| {
        let i = next.entry((src, tag)).or_default();
        assert!(*i < PER_TAG, "rank {me}: too many from {src} tag {tag}");
        assert!(
            data == expected(src, me, tag, *i),
            "rank {me}: message from {src} tag {tag} is not #{i} (len {})",
            data.len()
        );
        *i += 1;
    };
    for src in 0..n {
        for _ in 0..PER_TAG {
            let (s, d) = c.recv(src, 0).unwrap_or_else(|e| fail(c, e));
            assert_eq!((s.source, s.tag, s.len), (src, 0, d.len()));
            check(src, 0, &d);
        }
    }
    for _ in 0..n * PER_TAG {
        let (s, d) = c.recv(ANY_SOURCE, 1u32).unwrap_or_else(|e| fail(c, e));
        assert_eq!(s.tag, 1);
        check(s.source, 1, &d);
    }
    for _ in 0..2 * n * PER_TAG {
        let (s, d) = c.recv(ANY_SOURCE, ANY_TAG).unwrap_or_else(|e| fail(c, e));
        assert!(s.tag == 2 || s.tag == 3, "tag {}", s.tag);
        check(s.source, s.tag, &d);
    }
    let done = c.wait_all(sends).unwrap();
    assert!(done.iter().all(|d| matches!(d, Completion::Sent { .. })));
    // Nothing left over in point-to-point (a faster rank's collective
    // message may already wait in the collective context).
    assert_eq!(c.iprobe(ANY_SOURCE, ANY_TAG).unwrap(), None);
    let st = c.stats();
    assert_eq!((st.posted, st.held), (0, 0), "{st:?}");
    assert_eq!(st.malformed + st.refused_fragments + st.unknown_source, 0);
    next.values().sum()
}

/// Panics with `e` and the rank's counters.
pub fn fail<T: Transport, R>(c: &Communicator<T>, e: comm::CommError) -> R {
    panic!(
        "rank {}: {e}\n  comm {:?}\n  ctp {:?}\n  storage {:?}",
        c.rank(),
        c.stats(),
        c.socket().stats(),
        c.socket().status()
    )
}

//! Tests of fault injection: the injector's distributions and
//! determinism, the spec grammar, and `FaultLink` around a sim link and
//! around a mock link that records the calls it receives.

use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use super::*;
use crate::eth::testing::ETHERTYPE_EDP;
use crate::eth::MacAddr;
use crate::sim::SimLink;
use crate::time::SimClock;
use crate::{KernelStats, Link};

const US: Duration = Duration::from_micros(1);

/// A 64-byte frame 02..02 <- 02..01 carrying sequence number `seq`.
fn frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(18)];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&ETHERTYPE_EDP.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

fn seq_of(f: &[u8]) -> u32 {
    u32::from_be_bytes([f[14], f[15], f[16], f[17]])
}

/// Sends `n` frames, one every `gap`, and returns every delivery as
/// (sent index, delivery offset from base, bytes) in call order.
fn run(
    cfg: FaultConfig,
    n: u32,
    len: usize,
    gap: Duration,
) -> (Vec<(u32, Duration, Vec<u8>)>, FaultStats) {
    let base = Instant::now();
    let mut inj = FaultInjector::new(cfg);
    let mut out = Vec::new();
    for i in 0..n {
        let now = base + gap * i;
        inj.on_send(now, &frame(i, len), &mut |at, b| {
            assert!(at >= now, "delivery before send");
            out.push((i, at - base, b.to_vec()));
        });
    }
    (out, inj.stats().clone())
}

/// Asserts `x` lies within `tol` of `expect` (absolute).
fn near(what: &str, x: f64, expect: f64, tol: f64) {
    assert!(
        (x - expect).abs() <= tol,
        "{what}: {x} not within {tol} of {expect}"
    );
}

#[test]
fn transparent_delivers_once_unchanged_now() {
    let cfg = FaultConfig::seeded(3);
    assert!(cfg.is_transparent());
    let (out, st) = run(cfg, 100, 64, US);
    assert_eq!(out.len(), 100);
    for (i, at, b) in &out {
        assert_eq!(*at, US * *i);
        assert_eq!(b, &frame(*i, 64));
    }
    assert_eq!(
        st,
        FaultStats {
            frames: 100,
            ..Default::default()
        }
    );
    assert!(!FaultConfig::default().with_loss(0.1).is_transparent());
    assert!(!FaultConfig::default().with_rate(1_000).is_transparent());
}

#[test]
fn independent_loss_rate() {
    let n = 20_000;
    let (out, st) = run(FaultConfig::seeded(1).with_loss(0.1), n, 64, US);
    assert_eq!(st.frames, n as u64);
    assert_eq!(out.len() as u64, st.frames - st.lost);
    // 3 sigma of a binomial(20000, 0.1) share is 0.0064.
    near("loss rate", st.lost as f64 / n as f64, 0.1, 0.0064);
    // Each frame delivered at most once, in order, intact.
    for w in out.windows(2) {
        assert!(w[0].0 < w[1].0);
    }
}

/// Mean length of runs of consecutive lost frames.
fn mean_loss_run(out: &[(u32, Duration, Vec<u8>)], n: u32) -> f64 {
    let mut delivered = vec![false; n as usize];
    for (i, _, _) in out {
        delivered[*i as usize] = true;
    }
    let (mut runs, mut lost, mut in_run) = (0u64, 0u64, false);
    for d in delivered {
        if !d {
            lost += 1;
            if !in_run {
                runs += 1;
            }
        }
        in_run = !d;
    }
    lost as f64 / runs.max(1) as f64
}

#[test]
fn burst_loss_produces_runs() {
    let n = 50_000;
    // Stationary Bad share p/(p+r) = 0.01/0.21 = 0.0476; mean burst 1/r = 5 frames.
    let (out, st) = run(FaultConfig::seeded(2).with_burst(0.01, 0.2, 1.0), n, 64, US);
    near("burst loss rate", st.lost as f64 / n as f64, 0.0476, 0.012);
    let burst_run = mean_loss_run(&out, n);
    near("mean burst length", burst_run, 5.0, 1.0);
    // Independent loss of the same average rate has runs of about 1/(1-p) = 1.05.
    let (out_i, _) = run(FaultConfig::seeded(2).with_loss(0.0476), n, 64, US);
    let indep_run = mean_loss_run(&out_i, n);
    assert!(indep_run < 1.2, "independent runs {indep_run}");
    assert!(burst_run > 3.0 * indep_run);
}

#[test]
fn duplication() {
    let n = 10_000;
    let (out, st) = run(FaultConfig::seeded(4).with_duplicate(0.05), n, 64, US);
    near("dup rate", st.duplicated as f64 / n as f64, 0.05, 0.0066);
    assert_eq!(out.len() as u64, n as u64 + st.duplicated);
    let mut copies = vec![0u32; n as usize];
    for (i, _, b) in &out {
        copies[*i as usize] += 1;
        assert_eq!(b, &frame(*i, 64));
    }
    assert!(copies.iter().all(|&c| c == 1 || c == 2));
    assert_eq!(
        copies.iter().filter(|&&c| c == 2).count() as u64,
        st.duplicated
    );
}

#[test]
fn reordering_delivers_sequence_numbers_out_of_order() {
    let n = 5_000;
    let cfg = FaultConfig::seeded(5)
        .with_reorder(0.1, Duration::from_micros(50))
        .with_delay(Duration::from_micros(20), Duration::ZERO);
    let (mut out, st) = run(cfg, n, 64, Duration::from_micros(10));
    near("reorder rate", st.reordered as f64 / n as f64, 0.1, 0.013);
    assert_eq!(out.len(), n as usize, "reordering loses nothing");
    // Arrival order at the receiver: by delivery instant, then call order.
    out.sort_by_key(|(_, at, _)| *at);
    let seqs: Vec<u32> = out.iter().map(|(_, _, b)| seq_of(b)).collect();
    let inversions = seqs.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(
        inversions as u64 >= st.reordered * 9 / 10,
        "{inversions} inversions"
    );
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..n).collect::<Vec<_>>());
}

#[test]
fn reorder_without_delay_uses_default_hold_back() {
    let (out, st) = run(
        FaultConfig::seeded(6).with_reorder(1.0, Duration::ZERO),
        3,
        64,
        US,
    );
    assert_eq!(st.reordered, 3);
    for (i, at, _) in out {
        assert_eq!(at, US * i + DEFAULT_REORDER_DELAY);
    }
}

#[test]
fn corruption_flips_one_bit_keeps_length_and_header() {
    let n = 5_000;
    let (out, st) = run(FaultConfig::seeded(7).with_corrupt(0.1), n, 100, US);
    near("corrupt rate", st.corrupted as f64 / n as f64, 0.1, 0.013);
    let mut differing = 0;
    for (i, _, b) in &out {
        let orig = frame(*i, 100);
        assert_eq!(b.len(), orig.len());
        assert_eq!(b[..14], orig[..14], "Ethernet header spared");
        let bits: u32 = b.iter().zip(&orig).map(|(x, y)| (x ^ y).count_ones()).sum();
        assert!(bits <= 1);
        differing += bits as u64;
    }
    assert_eq!(differing, st.corrupted);
}

#[test]
fn fixed_delay() {
    let d = Duration::from_micros(250);
    let (out, _) = run(
        FaultConfig::seeded(8).with_delay(d, Duration::ZERO),
        50,
        64,
        US,
    );
    for (i, at, _) in out {
        assert_eq!(at, US * i + d);
    }
}

#[test]
fn jitter_stays_in_range_and_fifo() {
    let d = Duration::from_micros(100);
    let j = Duration::from_micros(40);
    let (out, st) = run(
        FaultConfig::seeded(9).with_delay(d, j),
        5_000,
        64,
        Duration::from_micros(5),
    );
    assert_eq!(st.reordered, 0);
    let mut distinct = std::collections::HashSet::new();
    for w in out.windows(2) {
        assert!(w[1].1 >= w[0].1, "jitter reordered frames");
    }
    for (i, at, _) in &out {
        let sent = Duration::from_micros(5) * *i;
        assert!(*at >= sent + d);
        // FIFO clamp can push a frame behind its predecessor, never
        // beyond the largest delay.
        assert!(*at <= sent + d + j, "frame {i} at {at:?}");
        distinct.insert(*at - sent);
    }
    assert!(distinct.len() > 100, "jitter varies the delay");
}

#[test]
fn rate_limit_spaces_deliveries() {
    // 1000-byte frames at 1 Gbit/s take 8 us each; all sent at once.
    let (out, _) = run(
        FaultConfig::seeded(10).with_rate(1_000_000_000),
        100,
        1000,
        Duration::ZERO,
    );
    for (k, (_, at, _)) in out.iter().enumerate() {
        assert_eq!(*at, Duration::from_micros(8) * (k as u32 + 1));
    }
    // An inexact rate: 64-byte frames at 3 Mbit/s, 512 bits = 170666.67 ns;
    // the remainder is carried, so frame k ends at floor(k * 512e9 / 3e6) ns.
    let (out, _) = run(
        FaultConfig::seeded(10).with_rate(3_000_000),
        1000,
        64,
        Duration::ZERO,
    );
    for (k, (_, at, _)) in out.iter().enumerate() {
        let k = k as u128 + 1;
        assert_eq!(at.as_nanos(), k * 512_000_000_000 / 3_000_000);
    }
    // An idle link sends at once: the frame takes only its own time.
    let (out, _) = run(
        FaultConfig::seeded(10).with_rate(1_000_000_000),
        3,
        1000,
        Duration::from_millis(1),
    );
    for (i, at, _) in out {
        assert_eq!(at, Duration::from_millis(1) * i + Duration::from_micros(8));
    }
}

#[test]
fn queue_limit_tail_drops() {
    // 1000-byte frames at 1 Mbit/s take 8 ms each: 100 at once overflow a 10-frame queue.
    let cfg = FaultConfig::seeded(11)
        .with_rate(1_000_000)
        .with_queue_limit(10);
    let (out, st) = run(cfg, 100, 1000, Duration::ZERO);
    assert_eq!(out.len(), 10);
    assert_eq!(st.queue_dropped, 90);
    assert_eq!(
        out.iter().map(|o| o.0).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    // Spaced at the rate, the queue never fills.
    let cfg = FaultConfig::seeded(11)
        .with_rate(1_000_000)
        .with_queue_limit(2);
    let (out, st) = run(cfg, 100, 1000, Duration::from_millis(8));
    assert_eq!((out.len(), st.queue_dropped), (100, 0));
}

fn everything(seed: u64) -> FaultConfig {
    FaultConfig::seeded(seed)
        .with_loss(0.05)
        .with_burst(0.01, 0.3, 0.8)
        .with_duplicate(0.05)
        .with_reorder(0.05, Duration::from_micros(30))
        .with_corrupt(0.05)
        .with_delay(Duration::from_micros(10), Duration::from_micros(5))
        .with_rate(10_000_000_000)
        .with_queue_limit(64)
}

#[test]
fn determinism_same_seed_same_trace() {
    let (a, sa) = run(everything(42), 3_000, 200, US);
    let (b, sb) = run(everything(42), 3_000, 200, US);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    let (c, _) = run(everything(43), 3_000, 200, US);
    assert_ne!(a, c);
}

#[test]
fn validate_and_parse_spec() {
    assert!(FaultConfig::default().validate().is_ok());
    assert!(matches!(
        FaultConfig::default().with_loss(1.5).validate(),
        Err(FaultConfigError::Probability { name: "loss", .. })
    ));
    assert!(FaultConfig::default()
        .with_loss(f64::NAN)
        .validate()
        .is_err());
    assert!(FaultConfig::default()
        .with_burst(0.1, -0.1, 1.0)
        .validate()
        .is_err());
    assert_eq!(
        FaultConfig::default().with_rate(0).validate(),
        Err(FaultConfigError::ZeroRate)
    );
    assert_eq!(
        FaultConfig::default().with_queue_limit(0).validate(),
        Err(FaultConfigError::ZeroQueue)
    );
    assert!(FaultInjector::try_new(FaultConfig::default().with_duplicate(2.0)).is_err());

    let c = FaultConfig::parse_spec(
        "loss=0.01, dup=0.002,reorder=0.03,reorder_delay=200us,corrupt=0.001,delay=1.5ms,jitter=10,rate=2.5G,queue=100,burst=0.01/0.3/1,seed=7",
    )
    .unwrap();
    assert_eq!(
        c,
        FaultConfig {
            loss: 0.01,
            burst: Some(BurstLoss {
                p_good_to_bad: 0.01,
                p_bad_to_good: 0.3,
                loss_in_bad: 1.0
            }),
            duplicate: 0.002,
            reorder: 0.03,
            reorder_delay: Duration::from_micros(200),
            corrupt: 0.001,
            delay: Duration::from_micros(1500),
            jitter: Duration::from_micros(10),
            rate_bps: Some(2_500_000_000),
            queue_limit: Some(100),
            seed: 7,
        }
    );
    assert_eq!(FaultConfig::parse_spec("").unwrap(), FaultConfig::default());
    assert_eq!(
        FaultConfig::parse_spec("none").unwrap(),
        FaultConfig::default()
    );
    assert_eq!(FaultConfig::default().to_string(), "none");
    // Display writes the spec back.
    assert_eq!(FaultConfig::parse_spec(&c.to_string()).unwrap(), c);
    let odd = everything(9).with_delay(Duration::from_nanos(1_234_567), Duration::from_secs(2));
    assert_eq!(FaultConfig::parse_spec(&odd.to_string()).unwrap(), odd);
    assert_eq!(
        FaultConfig::seeded(3)
            .with_loss(0.25)
            .with_delay(Duration::from_millis(2), Duration::ZERO)
            .to_string(),
        "loss=0.25,delay=2ms,seed=3"
    );
    for bad in [
        "loss",
        "loss=x",
        "loss=2",
        "bogus=1",
        "delay=5h",
        "rate=0",
        "burst=0.1/0.2",
        "queue=-1",
    ] {
        let e = FaultConfig::parse_spec(bad).unwrap_err();
        assert!(!e.to_string().is_empty(), "{bad}");
    }
}

/// A link that records what it sends and can refuse with WouldBlock.
struct RecLink {
    sent: Vec<Vec<u8>>,
    refuse: usize,
}

impl Link for RecLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.refuse > 0 {
            self.refuse -= 1;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.sent.push(frame.to_vec());
        Ok(())
    }
    fn recv(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn mac(&self) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, 1])
    }
    fn mtu(&self) -> usize {
        1500
    }
}

#[test]
fn fault_link_releases_delayed_frames_via_poll_at() {
    let clock = SimClock::new();
    let (a, mut b) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let d = Duration::from_micros(100);
    let c2 = clock.clone();
    let mut fl = FaultLink::with_clock(
        a,
        FaultConfig::seeded(1).with_delay(d, Duration::ZERO),
        move || c2.now(),
    );
    let t0 = clock.now();
    fl.send(&frame(1, 64)).unwrap();
    fl.send(&frame(2, 64)).unwrap();
    assert_eq!(fl.queued(), 2);
    assert_eq!(fl.poll_at(), Some(t0 + d));
    let mut buf = [0u8; 1514];
    assert_eq!(
        b.recv(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    clock.advance(d - Duration::from_nanos(1));
    assert_eq!(fl.release_due().unwrap(), 0);
    assert_eq!(b.next_delivery(), None);
    clock.advance_to(fl.poll_at().unwrap());
    // A recv on the wrapper releases due frames too.
    assert_eq!(
        fl.recv(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    assert_eq!(fl.queued(), 0);
    assert_eq!(fl.poll_at(), None);
    for want in [1, 2] {
        let n = b.recv(&mut buf).unwrap();
        assert_eq!(seq_of(&buf[..n]), want);
    }
    assert_eq!(fl.stats().frames, 2);
    assert_eq!(fl.link_stats().released, 2);
    assert_eq!(fl.mac(), sim_mac_1());
}

fn sim_mac_1() -> MacAddr {
    crate::sim::sim_mac(0)
}

#[test]
fn fault_link_keeps_frames_the_inner_link_refuses() {
    let clock = SimClock::new();
    let c2 = clock.clone();
    let inner = RecLink {
        sent: vec![],
        refuse: 1,
    };
    let mut fl = FaultLink::with_clock(
        inner,
        FaultConfig::seeded(1).with_duplicate(1.0),
        move || c2.now(),
    );
    // Both copies are due now; the first send is refused and both stay queued.
    fl.send(&frame(1, 64)).unwrap();
    assert_eq!(fl.queued(), 2);
    assert!(fl.poll_at().unwrap() <= clock.now());
    assert_eq!(fl.release_due().unwrap(), 2);
    assert_eq!(fl.inner().sent, vec![frame(1, 64), frame(1, 64)]);
    // Oversize is rejected before any fault.
    let e = fl.send(&vec![0u8; 1515]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(fl.link_stats().oversize, 1);
    assert_eq!(fl.stats().frames, 1);
    // Backlog bound.
    let mut fl = FaultLink::with_clock(
        RecLink {
            sent: vec![],
            refuse: 0,
        },
        FaultConfig::seeded(1).with_delay(Duration::from_secs(1), Duration::ZERO),
        Instant::now,
    );
    fl.set_backlog(3);
    for i in 0..3 {
        fl.send(&frame(i, 64)).unwrap();
    }
    assert_eq!(
        fl.send(&frame(3, 64)).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    assert_eq!(fl.link_stats().backlog_full, 1);
    // Transparent: straight through, inner errors propagate.
    let mut fl = FaultLink::new(
        RecLink {
            sent: vec![],
            refuse: 1,
        },
        FaultConfig::default(),
    );
    assert_eq!(
        fl.send(&frame(0, 64)).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    fl.send(&frame(0, 64)).unwrap();
    assert_eq!(fl.inner_mut().sent.len(), 1);
    assert_eq!(fl.queued(), 0);
}

/// A link that counts the calls it receives and records what it sends.
#[derive(Default)]
struct CountLink {
    /// `send_batch_vectored` calls.
    batches: usize,
    /// `send` calls.
    singles: usize,
    /// `send_batch` calls.
    batch_calls: usize,
    sent: Vec<Vec<u8>>,
    recv_with_calls: usize,
    filters: usize,
    groups: Vec<MacAddr>,
}

impl Link for CountLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.singles += 1;
        self.sent.push(frame.to_vec());
        Ok(())
    }
    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        self.batch_calls += 1;
        for f in frames {
            self.sent.push(f.to_vec());
        }
        Ok(frames.len())
    }
    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        self.batches += 1;
        for pieces in frames {
            self.sent
                .push(pieces.iter().flat_map(|p| p.iter().copied()).collect());
        }
        Ok(frames.len())
    }
    fn recv(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        self.recv_with_calls += 1;
        assert!(max >= 1);
        f(&[1, 2, 3]);
        Ok(1)
    }
    fn set_filter(&mut self, _prog: &[netcore::bpf::Insn]) -> io::Result<()> {
        self.filters += 1;
        Ok(())
    }
    fn kernel_stats(&self) -> Option<KernelStats> {
        Some(KernelStats {
            packets: 7,
            drops: 1,
        })
    }
    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.groups.push(group);
        Ok(())
    }
    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.groups.retain(|g| *g != group);
        Ok(())
    }
    fn rx_ready(&self) -> Option<bool> {
        Some(true)
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(42)
    }
    fn mac(&self) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, 1])
    }
    fn mtu(&self) -> usize {
        1500
    }
}

#[test]
fn transparent_fault_link_uses_the_inner_batch_path() {
    let mut fl = FaultLink::new(CountLink::default(), FaultConfig::default());
    let frames: Vec<Vec<u8>> = (0..10).map(|i| frame(i, 64)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    assert_eq!(fl.send_batch(&refs).unwrap(), 10);
    assert_eq!((fl.inner().batch_calls, fl.inner().singles), (1, 0));
    // A gathered frame and a single send go the same way.
    let f = frame(10, 64);
    let pieces = [IoSlice::new(&f[..14]), IoSlice::new(&f[14..])];
    assert_eq!(fl.send_batch_vectored(&[&pieces]).unwrap(), 1);
    fl.send(&frame(11, 64)).unwrap();
    assert_eq!(
        (
            fl.inner().batch_calls,
            fl.inner().batches,
            fl.inner().singles
        ),
        (1, 1, 1)
    );
    let want: Vec<Vec<u8>> = (0..12).map(|i| frame(i, 64)).collect();
    assert_eq!(fl.inner().sent, want);
    assert_eq!(fl.stats().frames, 12);
    assert_eq!(fl.queued(), 0);
}

#[test]
fn fault_link_forwards_every_method() {
    let mut fl = FaultLink::new(CountLink::default(), FaultConfig::seeded(1).with_loss(0.5));
    let mut seen = Vec::new();
    assert_eq!(fl.recv_with(8, &mut |f| seen.push(f.to_vec())).unwrap(), 1);
    assert_eq!(seen, vec![vec![1, 2, 3]]);
    assert_eq!(fl.inner().recv_with_calls, 1);
    assert_eq!(fl.rx_ready(), Some(true));
    assert_eq!(fl.raw_fd(), Some(42));
    assert_eq!(fl.max_frame(), 1514);
    fl.set_filter(&[netcore::bpf::Insn::new(0x06, 0, 0, 0)])
        .unwrap();
    assert_eq!(fl.inner().filters, 1);
    assert_eq!(fl.kernel_stats().unwrap().packets, 7);
    let g = MacAddr([0x01, 0, 0x5e, 0, 0, 9]);
    fl.join_group(g).unwrap();
    assert_eq!(fl.inner().groups, vec![g]);
    fl.leave_group(g).unwrap();
    assert!(fl.inner().groups.is_empty());
    assert_eq!(fl.poll_at(), None);
}

#[test]
fn lossy_fault_link_still_sends_one_batch_without_holding() {
    // Loss and duplication decide fates but hold nothing back: the
    // survivors (and their copies) go to the inner link as one batch.
    let cfg = FaultConfig::seeded(3).with_loss(0.3).with_duplicate(0.2);
    let mut fl = FaultLink::new(CountLink::default(), cfg);
    let frames: Vec<Vec<u8>> = (0..64).map(|i| frame(i, 100)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    assert_eq!(fl.send_batch(&refs).unwrap(), 64);
    let st = fl.stats();
    assert!(st.lost > 0 && st.duplicated > 0, "{st:?}");
    assert_eq!(
        (
            fl.inner().batch_calls,
            fl.inner().batches,
            fl.inner().singles
        ),
        (0, 1, 0)
    );
    assert_eq!(fl.queued(), 0);
    assert_eq!(fl.inner().sent.len() as u64, 64 - st.lost + st.duplicated);
    // In order: sequence numbers never go down.
    let seqs: Vec<u32> = fl.inner().sent.iter().map(|f| seq_of(f)).collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "{seqs:?}");
    assert_eq!(fl.link_stats().released, fl.inner().sent.len() as u64);
}

#[test]
fn delayed_frames_in_a_batch_are_held_and_released_in_order() {
    let clock = SimClock::new();
    let d = Duration::from_micros(50);
    let mut fl = FaultLink::with_clock(
        CountLink::default(),
        FaultConfig::seeded(1).with_delay(d, Duration::ZERO),
        clock.clone(),
    );
    let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(i, 64)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    assert_eq!(fl.send_batch(&refs).unwrap(), 5);
    assert_eq!(fl.queued(), 5);
    assert!(fl.inner().sent.is_empty());
    assert_eq!(fl.poll_at(), Some(clock.now() + d));
    clock.advance(d);
    assert_eq!(fl.release_due().unwrap(), 5);
    assert_eq!(fl.inner().sent, frames);
}

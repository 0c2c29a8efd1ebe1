//! L0 tests of loss recovery: a scripted sequence of ACKs and SACKs in,
//! lost segments (the retransmission order) and congestion state out.

use std::time::{Duration, Instant};

use netcore::congestion::{Controller, NewReno};

use super::*;

const ISS: u32 = 100;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

struct Script {
    t0: Instant,
    r: Recovery,
    cc: NewReno,
}

/// `n` data segments (100, 101, ...) of 10 bytes each, sent once at t0;
/// congestion window 20.
fn sent(n: usize) -> Script {
    let t0 = Instant::now();
    let mut r = Recovery::new(Seq(ISS));
    for i in 0..n {
        let idx = r.push_new(SegmentKind::Data, 10 * i as u64, 10, t0);
        assert!(!r.on_transmit(idx, t0));
    }
    Script {
        t0,
        r,
        cc: NewReno::new(20, 1000),
    }
}

fn sack(blocks: &[(u32, u32)]) -> SackBlocks {
    let mut s = SackBlocks::new();
    for &(a, b) in blocks {
        assert!(s.push(Seq(a), Seq(b)));
    }
    s
}

impl Script {
    /// A pure ACK `ack` with SACK `blocks` at t0 + `t` us.
    fn ack(&mut self, t: u64, ack: u32, blocks: &[(u32, u32)]) -> (Acked, AckEvents) {
        let now = self.t0 + us(t);
        self.r
            .on_ack(now, Seq(ack), &sack(blocks), true, &mut self.cc)
    }

    /// The sequence numbers the sender retransmits now (window-limited),
    /// transmitted at t0 + `t` us.
    fn retransmit(&mut self, t: u64) -> Vec<u32> {
        let mut out = vec![];
        while let Some(idx) = self.r.next_lost(self.cc.window()) {
            assert!(self.r.on_transmit(idx, self.t0 + us(t)));
            out.push(self.r.una().add(idx as u32).0);
        }
        out
    }
}

/// Duplicate ACKs as ESP's receiver sends them: each newly SACKs the
/// segment that arrived above the hole (101, 102, 103).
fn dup_ack(s: &mut Script, t: u64, k: u32) -> AckEvents {
    s.ack(t, ISS, &[(ISS + 1, ISS + 2 + k)]).1
}

#[test]
fn three_duplicate_acks_retransmit_the_head_once() {
    let mut s = sent(10);
    for k in 0..2 {
        let ev = dup_ack(&mut s, 10 + k as u64, k);
        assert!(!ev.fast_retransmit);
        assert_eq!(s.retransmit(10), Vec::<u32>::new());
    }
    let ev = dup_ack(&mut s, 12, 2);
    assert!(ev.fast_retransmit);
    assert_eq!(s.r.fast_retransmits, 1);
    assert_eq!(s.r.recovery_point(), Some(Seq(ISS + 10)));
    // ssthresh = pipe / 2 = (10 - 3 SACKed) / 2 = 3 = the window.
    assert_eq!((s.cc.window(), s.cc.ssthresh()), (3, 3));
    assert_eq!(s.retransmit(13), vec![ISS]);
    // More duplicate ACKs do not resend it again in this episode.
    for k in 0..5 {
        dup_ack(&mut s, 20 + k as u64, 3 + k);
    }
    assert_eq!(s.retransmit(30), Vec::<u32>::new());
}

#[test]
fn duplicate_acks_without_new_sack_information_are_not_counted() {
    // An attacker's junk makes the receiver answer with ACKs that are
    // duplicates by RFC 5681's definition but carry no new SACK block
    // (RFC 6675 sec. 2): they never start a loss episode.
    let mut s = sent(10);
    for k in 0..50 {
        let (_, ev) = s.ack(10 + k, ISS, &[]);
        assert!(!ev.fast_retransmit);
    }
    dup_ack(&mut s, 70, 0);
    for k in 0..50 {
        let (_, ev) = s.ack(80 + k, ISS, &[(ISS + 1, ISS + 2)]);
        assert!(!ev.fast_retransmit, "the same SACK block again");
    }
    assert_eq!(s.r.fast_retransmits, 0);
    assert_eq!(s.retransmit(200), Vec::<u32>::new());
}

#[test]
fn sack_marks_holes_with_dupthresh_segments_above_them() {
    let mut s = sent(12);
    // 101..=102 SACKed: two above 100, not yet lost.
    let (_, ev) = s.ack(10, ISS, &[(101, 103)]);
    assert!(!ev.fast_retransmit);
    assert_eq!(s.retransmit(10), Vec::<u32>::new());
    // 103 too: three above 100.
    let (_, ev) = s.ack(11, ISS, &[(101, 104)]);
    assert!(ev.fast_retransmit);
    assert_eq!(s.retransmit(11), vec![100]);
    // ssthresh = pipe / 2 = 9 / 2.
    assert_eq!(s.cc.window(), 4);
    // Another hole at 104, with 105..=107 SACKed above it: lost, but held
    // back while pipe (12 - 6 SACKed - 1 lost = 5) >= cwnd 4.
    s.ack(12, ISS, &[(105, 108), (101, 104)]);
    assert_eq!(s.r.sacked_count(), 6);
    assert_eq!(s.r.lost_count(), 1);
    assert_eq!(s.retransmit(12), Vec::<u32>::new());
    // Two more SACKed: pipe 3 < 4, the retransmission goes.
    s.ack(13, ISS, &[(108, 110), (105, 108), (101, 104)]);
    assert_eq!(s.retransmit(13), vec![104]);
    assert_eq!(s.r.fast_retransmits, 1, "one episode per window");
    assert_eq!(s.r.pipe(), 12 - 8);
}

#[test]
fn partial_ack_marks_the_next_hole_lost() {
    let mut s = sent(10);
    for k in 0..3 {
        dup_ack(&mut s, 10 + k as u64, k);
    }
    assert_eq!(s.retransmit(13), vec![100]);
    assert_eq!(s.cc.window(), 3);
    // The retransmitted 100 arrives (101..=103 were SACKed): partial ACK
    // (RFC 6582), the new head 104 is lost too and goes at once.
    let (acked, _) = s.ack(20, 104, &[]);
    assert_eq!(acked.segments, 4);
    assert_eq!(acked.rtt_sample, None, "a retransmitted segment: Karn");
    assert_eq!(s.retransmit(20), vec![104]);
    // An ACK up to 106, still below the recovery point 110: 106 next.
    let (acked, _) = s.ack(30, 106, &[]);
    assert_eq!(acked.segments, 2);
    assert_eq!(s.retransmit(30), vec![106]);
    // The window does not grow in fast recovery.
    assert_eq!(s.cc.window(), 3);
    // Past the recovery point the episode ends.
    let (acked, _) = s.ack(40, 110, &[]);
    assert_eq!(acked.segments, 4);
    assert_eq!(s.r.recovery_point(), None);
    assert!(s.r.is_empty());
}

#[test]
fn timeout_presumes_every_unsacked_segment_lost() {
    let mut s = sent(6);
    s.ack(10, ISS, &[(102, 103)]);
    s.r.on_timeout(&mut s.cc);
    assert_eq!((s.cc.window(), s.cc.ssthresh()), (1, 2));
    assert_eq!(s.r.lost_count(), 5);
    // The head goes at once; then the window (1) is full.
    assert_eq!(s.retransmit(20), vec![100]);
    // Its ACK: a timeout episode grows the window in slow start (partial
    // ACKs included), so two segments go next.
    let (acked, _) = s.ack(30, 101, &[(102, 103)]);
    assert_eq!(acked.segments, 1);
    assert_eq!(s.cc.window(), 2);
    assert_eq!(s.retransmit(30), vec![101, 103]);
    assert_eq!(s.r.lost_count(), 2, "104 and 105 wait for the window");
}

#[test]
fn dsack_of_every_retransmission_undoes_the_episode() {
    let mut s = sent(8);
    let before = s.cc.snapshot();
    for k in 0..3 {
        dup_ack(&mut s, 10 + k as u64, k);
    }
    assert_eq!(s.retransmit(13), vec![ISS]);
    assert!(s.cc.window() < before.window);
    // Everything arrives; the DSACK reports the retransmitted 100 as a
    // duplicate: the original was only delayed.
    let (acked, ev) = s.ack(20, ISS + 8, &[(ISS, ISS + 1)]);
    assert_eq!(acked.segments, 8);
    assert!(ev.undone);
    assert_eq!(s.r.spurious, 1);
    assert_eq!(s.cc.snapshot(), before, "window and threshold restored");
    assert_eq!(
        s.r.dup_thresh(),
        2 * DUP_THRESH,
        "fast retransmit was spurious"
    );
}

#[test]
fn dsack_of_a_segment_never_retransmitted_undoes_nothing() {
    let mut s = sent(8);
    for k in 0..3 {
        dup_ack(&mut s, 10 + k as u64, k);
    }
    assert_eq!(s.retransmit(13), vec![ISS]);
    // The network duplicated 103: its DSACK proves nothing about 100.
    let (_, ev) = s.ack(20, ISS, &[(103, 104), (101, 105)]);
    assert!(!ev.undone);
    assert_eq!(s.r.spurious, 0);
    assert_eq!(s.r.recovery_point(), Some(Seq(ISS + 8)));
}

#[test]
fn late_head_raises_the_duplicate_ack_threshold() {
    let mut s = sent(10);
    // 101..=105 SACKed: 100 is marked lost...
    s.ack(10, ISS, &[(101, 106)]);
    assert_eq!(s.r.lost_count(), 1);
    // ...but its original arrives before the retransmission went out.
    let (acked, ev) = s.ack(11, 106, &[]);
    assert!(ev.reordering);
    assert_eq!(s.r.dup_thresh(), 6);
    assert_eq!(acked.rtt_sample, None, "SACKed segments make it ambiguous");
    // 100 is not resent; the episode goes on (partial ACK: 106 is next).
    assert_eq!(s.retransmit(12), vec![106]);
}

#[test]
fn karn_rule_samples_only_segments_sent_once() {
    let mut s = sent(3);
    let (acked, _) = s.ack(40, ISS + 1, &[]);
    assert_eq!(acked.rtt_sample, Some(us(40)));
    s.r.on_timeout(&mut s.cc);
    assert_eq!(s.retransmit(50), vec![ISS + 1]);
    let (acked, _) = s.ack(60, ISS + 2, &[]);
    assert_eq!(acked.rtt_sample, None);
    assert_eq!(acked.bytes, 10);
}

#[test]
fn syn_and_fin_are_tracked_like_data() {
    let t0 = Instant::now();
    let mut r = Recovery::new(Seq(7));
    let mut cc = NewReno::new(10, 1000);
    r.push_control(SegmentKind::Syn, 0, t0);
    assert_eq!(r.nxt(), Seq(8));
    assert_eq!(r.next_lost(cc.window()), Some(0), "the SYN goes first");
    assert!(!r.on_transmit(0, t0));
    // The peer's retransmitted SYN: our SYN-ACK is resent.
    r.resend_syn();
    assert_eq!(r.next_lost(cc.window()), Some(0));
    assert!(r.on_transmit(0, t0));
    let acked = r.on_cumulative_ack(t0 + us(5), Seq(8), &mut cc);
    assert_eq!(
        (acked.segments, acked.fin, acked.rtt_sample),
        (1, false, None)
    );
    let i = r.push_new(SegmentKind::Fin, 0, 0, t0);
    r.on_transmit(i, t0);
    let acked = r.on_cumulative_ack(t0 + us(9), Seq(9), &mut cc);
    assert!(acked.fin);
    assert_eq!(acked.rtt_sample, Some(us(9)));
}

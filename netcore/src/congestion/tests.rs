//! Controllers driven by scripted acknowledgement sequences.

use super::*;

/// A sender that keeps the window full: each step acknowledges `acked`
/// segments with `window()` segments in flight before the ACK.
fn ack_full(cc: &mut dyn Controller, acks: &[u32]) -> Vec<u32> {
    acks.iter()
        .map(|&n| {
            let in_flight = cc.window();
            cc.on_ack(n, in_flight, false);
            cc.window()
        })
        .collect()
}

#[test]
fn slow_start_grows_by_the_segments_acknowledged() {
    let mut cc = NewReno::new(10, 1000);
    assert_eq!(cc.ssthresh(), u32::MAX);
    // Delayed ACKs: every ACK covers two segments.
    assert_eq!(
        ack_full(&mut cc, &[2, 2, 2, 2, 2]),
        vec![12, 14, 16, 18, 20]
    );
}

#[test]
fn fast_retransmit_halves_and_recovery_does_not_grow() {
    let mut cc = NewReno::new(10, 1000);
    ack_full(&mut cc, &[10]);
    assert_eq!(cc.window(), 20);
    cc.on_congestion_event(CongestionEvent::FastRetransmit, 20);
    assert_eq!((cc.window(), cc.ssthresh()), (10, 10));
    // Partial ACKs during recovery (RFC 6582): no growth.
    for _ in 0..5 {
        cc.on_ack(1, 10, true);
    }
    assert_eq!(cc.window(), 10);
    // After recovery: congestion avoidance, +1 per window of segments.
    let w: Vec<u32> = ack_full(&mut cc, &[1; 21]);
    assert_eq!(w[8], 10, "9 segments acknowledged: no increase yet");
    assert_eq!(w[9], 11, "a full window of 10 acknowledged: +1");
    assert_eq!(w[20], 12, "then 11 more: +1");
}

#[test]
fn timeout_restarts_from_one_segment_in_slow_start() {
    let mut cc = NewReno::new(10, 1000);
    ack_full(&mut cc, &[14]);
    assert_eq!(cc.window(), 24);
    cc.on_congestion_event(CongestionEvent::Timeout, 24);
    assert_eq!((cc.window(), cc.ssthresh()), (1, 12));
    // Slow start up to ssthresh, then avoidance.
    let w = ack_full(&mut cc, &[1, 2, 4, 8]);
    assert_eq!(w, vec![2, 4, 8, 16]);
    let w = ack_full(&mut cc, &[8, 8]);
    assert_eq!(w, vec![16, 17], "above ssthresh: one per window");
}

#[test]
fn threshold_is_at_least_two_segments() {
    let mut cc = NewReno::new(10, 1000);
    cc.on_congestion_event(CongestionEvent::FastRetransmit, 1);
    assert_eq!((cc.window(), cc.ssthresh()), (2, 2));
}

#[test]
fn application_limited_sender_does_not_grow() {
    let mut cc = NewReno::new(10, 1000);
    // 4 of 10 in flight: less than half the window used.
    cc.on_ack(4, 4, false);
    assert_eq!(cc.window(), 10);
    // 5 of 10: used.
    cc.on_ack(4, 5, false);
    assert_eq!(cc.window(), 14);
}

#[test]
fn window_is_capped() {
    let mut cc = NewReno::new(10, 16);
    ack_full(&mut cc, &[5, 5, 5]);
    assert_eq!(cc.window(), 16);
}

#[test]
fn spurious_episode_is_undone_without_shrinking() {
    let mut cc = NewReno::new(10, 1000);
    ack_full(&mut cc, &[10]);
    let before = cc.snapshot();
    assert_eq!(
        before,
        Snapshot {
            window: 20,
            ssthresh: u32::MAX
        }
    );
    cc.on_congestion_event(CongestionEvent::Timeout, 20);
    assert_eq!(cc.window(), 1);
    cc.on_spurious_congestion_event(before);
    assert_eq!((cc.window(), cc.ssthresh()), (20, u32::MAX));
    // A window that grew past the snapshot meanwhile is kept.
    let mut cc = NewReno::new(10, 1000);
    let before = cc.snapshot();
    cc.on_congestion_event(CongestionEvent::Timeout, 100);
    assert_eq!(ack_full(&mut cc, &[1, 2, 4, 8, 16]), vec![2, 4, 8, 16, 32]);
    let grown = cc.window();
    cc.on_spurious_congestion_event(before);
    assert_eq!((cc.window(), cc.ssthresh()), (grown, u32::MAX));
}

#[test]
fn no_control_never_limits() {
    let mut cc = NoControl;
    assert_eq!(cc.window(), u32::MAX);
    cc.on_congestion_event(CongestionEvent::Timeout, 100);
    cc.on_ack(10, 100, false);
    assert_eq!(cc.window(), u32::MAX);
    let s = cc.snapshot();
    cc.on_spurious_congestion_event(s);
    assert_eq!(cc.window(), u32::MAX);
}

#[test]
fn controllers_are_usable_as_trait_objects() {
    let mut ccs: Vec<Box<dyn Controller>> =
        vec![Box::new(NewReno::new(3, 100)), Box::new(NoControl)];
    for cc in &mut ccs {
        let w = cc.window();
        cc.on_ack(1, w, false);
    }
    assert_eq!(ccs[0].window(), 4);
}

#[test]
fn any_controller_forwards() {
    let mut a = AnyController::NewReno(NewReno::new(10, 100));
    let mut b = NewReno::new(10, 100);
    for cc in [&mut a as &mut dyn Controller, &mut b] {
        cc.on_ack(4, 10, false);
        cc.on_congestion_event(CongestionEvent::FastRetransmit, 14);
    }
    assert_eq!(a.snapshot(), b.snapshot());
    assert_eq!(AnyController::NoControl(NoControl).window(), u32::MAX);
}

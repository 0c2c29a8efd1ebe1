//! Per-peer session state (CTP spec v1.2, "Storages", session information
//! storage): the next packet id and the adaptive timeout for sending, and the
//! received-id list for duplicate detection when receiving.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use netcore::rtt::{PeerTimeout, RtoPolicy};

use crate::wire::id_less;

/// Outcome of [`RecvIdList::insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdStatus {
    /// The id was not received before; it is now recorded.
    New,
    /// The id was received before: confirm again, do not deliver.
    Duplicate,
    /// The id is new but the list is full (too many ids beyond the in-sequence
    /// one): the packet must be dropped unconfirmed, the sender will resend.
    Full,
}

/// The received-id list of one peer (spec, "Storages"): the highest id received
/// in sequence, then the ids received beyond it, truncated as gaps fill
/// (`{7, 9, 10, 11, 13, 14}` + 8 -> `{11, 13, 14}`). Comparison with wraparound
/// ([`id_less`]).
///
/// Until the peer's StartSession packet arrives the starting id is unknown and
/// the list is *provisional*: ids are remembered exactly (the `minwasset` flag
/// of the original `SessionInfo`), so a StartSession packet overtaken by later
/// packets is still delivered.
#[derive(Debug, Clone)]
pub struct RecvIdList {
    /// Highest id received in sequence; `None` while provisional.
    first: Option<u32>,
    /// Ids beyond `first`, sorted by wraparound distance from `first`.
    beyond: VecDeque<u32>,
    /// Ids seen while provisional.
    provisional: HashSet<u32>,
    /// The StartSession id that established the list, if one did.
    start_id: Option<u32>,
    /// Most ids kept beyond `first` (or provisionally).
    cap: usize,
}

impl RecvIdList {
    /// A provisional list that keeps at most `cap` ids beyond the in-sequence one.
    pub fn new(cap: usize) -> Self {
        Self {
            first: None,
            beyond: VecDeque::new(),
            provisional: HashSet::new(),
            start_id: None,
            cap: cap.max(1),
        }
    }

    /// The list as the spec writes it: `[first, beyond...]` (empty while provisional).
    pub fn as_vec(&self) -> Vec<u32> {
        match self.first {
            Some(f) => std::iter::once(f)
                .chain(self.beyond.iter().copied())
                .collect(),
            None => Vec::new(),
        }
    }

    /// True once the starting id is known.
    pub fn is_established(&self) -> bool {
        self.first.is_some()
    }

    /// Number of ids kept besides the in-sequence one.
    pub fn pending_len(&self) -> usize {
        self.beyond.len() + self.provisional.len()
    }

    /// A StartSession packet with id `id` arrived (before [`Self::insert`] of that
    /// id). Establishes the list at `id - 1`; a *different* start id on an
    /// established list means the peer restarted: the list is reset.
    pub fn start_session(&mut self, id: u32) {
        match (self.first, self.start_id) {
            (Some(_), Some(s)) if s == id => {}
            (Some(_), Some(_)) => {
                // The peer started a new session (restart): forget the old one.
                self.first = Some(id.wrapping_sub(1));
                self.beyond.clear();
                self.start_id = Some(id);
            }
            (Some(_), None) => self.start_id = Some(id),
            (None, _) => {
                self.establish(id.wrapping_sub(1));
                self.start_id = Some(id);
            }
        }
    }

    fn establish(&mut self, first: u32) {
        self.first = Some(first);
        self.beyond.clear();
        let ids: Vec<u32> = self.provisional.drain().collect();
        for id in ids {
            // moved, not added: the ids are counted already
            let _ = self.insert_established(id, usize::MAX);
        }
    }

    /// True if `id` was received before.
    pub fn contains(&self, id: u32) -> bool {
        match self.first {
            None => self.provisional.contains(&id),
            Some(f) => {
                if !id_less(f, id) {
                    return true;
                }
                let d = id.wrapping_sub(f);
                self.beyond
                    .binary_search_by_key(&d, |x| x.wrapping_sub(f))
                    .is_ok()
            }
        }
    }

    /// Records `id`; says whether it is new, a duplicate, or refused (list full).
    pub fn insert(&mut self, id: u32) -> IdStatus {
        self.insert_within(id, usize::MAX)
    }

    /// As [`insert`](Self::insert), but the list may grow by at most `room`
    /// ids besides its own cap (the endpoint's budget over all lists,
    /// `Config::max_out_of_order_ids_total`): an id that would need more is
    /// [`IdStatus::Full`]. An in-sequence id never needs room.
    pub fn insert_within(&mut self, id: u32, room: usize) -> IdStatus {
        if self.first.is_none() {
            if self.provisional.contains(&id) {
                return IdStatus::Duplicate;
            }
            if self.provisional.len() >= self.cap {
                // The StartSession packet is long gone (the sender gave up on
                // it or we restarted): adopt the oldest id seen as the start.
                let any = *self.provisional.iter().next().unwrap_or(&id);
                let oldest = self
                    .provisional
                    .iter()
                    .copied()
                    .chain(std::iter::once(id))
                    .min_by_key(|x| x.wrapping_sub(any).wrapping_add(0x8000_0000))
                    .unwrap_or(id);
                self.establish(oldest.wrapping_sub(1));
                return self.insert_established(id, room);
            }
            if room == 0 {
                return IdStatus::Full;
            }
            self.provisional.insert(id);
            return IdStatus::New;
        }
        self.insert_established(id, room)
    }

    fn insert_established(&mut self, id: u32, room: usize) -> IdStatus {
        let f = self.first.expect("established");
        if !id_less(f, id) {
            return IdStatus::Duplicate;
        }
        let d = id.wrapping_sub(f);
        if d == 1 {
            let mut f = id;
            while self.beyond.front() == Some(&f.wrapping_add(1)) {
                f = f.wrapping_add(1);
                self.beyond.pop_front();
            }
            self.first = Some(f);
            return IdStatus::New;
        }
        match self.beyond.binary_search_by_key(&d, |x| x.wrapping_sub(f)) {
            Ok(_) => IdStatus::Duplicate,
            Err(pos) => {
                if self.beyond.len() >= self.cap || room == 0 {
                    return IdStatus::Full;
                }
                self.beyond.insert(pos, id);
                IdStatus::New
            }
        }
    }
}

/// The timing half of a sending session: the adaptive resend timeout `T` of
/// one destination and the evidence it is based on (spec, "Storages": 100 ms
/// until the first exchange, then the measured time x 3).
///
/// The estimator and the timeout rule are [`netcore::rtt::PeerTimeout`]
/// with the CTP policy [`RtoPolicy::CtpSpec`]: an RFC 6298 section 2
/// smoother (SRTT and RTTVAR, gains 1/8 and 1/4) fed only by confirmations
/// of packets sent once (Karn's rule, RFC 6298 section 3), and
/// `T = max(multiplier x SRTT, SRTT + 4 x RTTVAR)` clamped to
/// `[min_timeout, max_timeout]`. After the first sample both terms equal
/// `3 x sample` (RTTVAR starts at sample / 2), the spec's rule; later the
/// RFC 6298 variance term keeps a jittery peer (a loaded host's wakeups)
/// from drawing spurious resends. Karn backoff only without a fresh sample
/// ([`SendTiming::expired`]).
#[derive(Debug, Clone)]
pub struct SendTiming {
    /// The estimator and the current timeout `T` (zero = resending disabled).
    pub rtt: PeerTimeout,
    /// When this destination last confirmed a packet in flight (any
    /// transmission of it): evidence the peer and the path work (the
    /// live-link resend cap, `Config::max_resend_period`).
    pub last_confirm: Option<Instant>,
    /// Since when the destination is suspected: silent at a packet's spec
    /// error deadline (`Config::user_timeout`); cleared by its next
    /// confirmation.
    pub suspected_since: Option<Instant>,
    /// When the last suspicion ended.
    pub recovered_at: Option<Instant>,
    /// Since when the destination is silent, as its user timeout counts
    /// (set at the first postponed error, cleared by a confirmation).
    pub stall_start: Option<Instant>,
    /// The longest delay of a confirmation proven by a spurious resend
    /// (every copy of a resent packet was confirmed, so the first
    /// confirmation answered the first transmission: RFC 3708's test with
    /// CTP's duplicate confirmations in place of DSACK), and when it was
    /// last proven. See [`SendTiming::prove_stall`].
    stall: Option<(Duration, Instant)>,
}

impl SendTiming {
    /// Timing starting at `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            rtt: PeerTimeout::new(timeout),
            last_confirm: None,
            suspected_since: None,
            recovered_at: None,
            stall_start: None,
            stall: None,
        }
    }

    /// Current resend timeout `T` of new packets (0 = resending disabled):
    /// the estimator's, at least twice the proven stall
    /// ([`SendTiming::prove_stall`]) unless fixed.
    #[inline]
    pub fn timeout(&self) -> Duration {
        let t = self.rtt.timeout;
        match self.stall {
            Some((d, _)) if !t.is_zero() && !self.rtt.fixed => t.max(d.saturating_mul(2)),
            _ => t,
        }
    }

    /// The proven stall of the destination (zero if none): the longest
    /// time it took to confirm a packet whose resend was spurious. A tail
    /// probe waits at least this long (`Config::tail_probe`).
    #[inline]
    pub fn stall(&self) -> Duration {
        self.stall.map_or(Duration::ZERO, |(d, _)| d)
    }

    /// A resend proved spurious: the destination confirmed the packet's
    /// first transmission `delay` after it was sent (its host descheduled
    /// the receiving process, or held it behind other work). Not in the
    /// spec; wire-compatible. The timeout of new packets becomes at least
    /// `2 x delay` and a tail probe waits at least `delay`, until no
    /// spurious resend was proven for `window`
    /// ([`SendTiming::expire_stall`]). A stall counts as at most `cap`,
    /// so that a forged or freak confirmation cannot stretch `T` far.
    ///
    /// Departure from RFC 4015 (the Eifel response), which answers a
    /// spurious timeout by re-seeding SRTT and RTTVAR from the late sample:
    /// on an oversubscribed host the stalls recur every scheduler period,
    /// and the smoother forgets one within about ten ordinary samples, so
    /// every period drew its spurious resends again (4 ranks on 2 vCPUs:
    /// 14 % of the small packets resent, nearly all confirmed twice). A
    /// windowed maximum, as BBR keeps its min_rtt over a 10 s window
    /// (draft-ietf-ccwg-bbr), remembers the stall without bending the
    /// estimate of the scheduled path.
    pub fn prove_stall(&mut self, now: Instant, delay: Duration, cap: Duration) {
        let delay = delay.min(cap);
        let longest = match self.stall {
            Some((d, _)) => d.max(delay),
            None => delay,
        };
        self.stall = Some((longest, now));
    }

    /// Forgets the proven stall if none was proven for `window` before `now`.
    #[inline]
    pub fn expire_stall(&mut self, now: Instant, window: Duration) {
        if self
            .stall
            .is_some_and(|(_, at)| now.saturating_duration_since(at) > window)
        {
            self.stall = None;
        }
    }

    /// Smoothed time between sending a packet and its confirmation (RFC 6298
    /// SRTT), from packets sent once only (Karn's rule).
    #[inline]
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }

    /// Round-trip variation, RFC 6298 RTTVAR (0 before the first sample).
    #[cfg(test)]
    pub fn rttvar(&self) -> Duration {
        self.rtt.est.rttvar()
    }

    /// True when the timeout was set explicitly and does not adapt.
    #[inline]
    pub fn is_fixed(&self) -> bool {
        self.rtt.fixed
    }

    /// Fixes `T` at `timeout` (no adaptation, no backoff; zero disables
    /// resending).
    pub fn fix(&mut self, timeout: Duration) {
        self.rtt.fix(timeout);
    }

    /// A new measurement `sample` taken at `now` (confirmation time minus
    /// send time of a packet sent once). RFC 6298 2.2/2.3: the first sets
    /// SRTT = sample, RTTVAR = sample / 2; later ones RTTVAR = 3/4 RTTVAR +
    /// 1/4 |SRTT - sample|, then SRTT = 7/8 SRTT + 1/8 sample. The timeout
    /// becomes `max(multiplier x SRTT, SRTT + 4 x RTTVAR)` (spec: measured
    /// time x 3; RFC 6298: SRTT + 4 RTTVAR) clamped to `[min, max]`, unless
    /// fixed or disabled.
    pub fn sample(
        &mut self,
        now: Instant,
        sample: Duration,
        multiplier: u32,
        min: Duration,
        max: Duration,
    ) {
        self.rtt
            .sample(now, sample, RtoPolicy::CtpSpec { multiplier }, min, max);
    }

    /// The resend timer of a packet first sent at `first_sent` with timeout
    /// `base` expired. If no valid sample arrived since that packet was sent,
    /// the estimate may be stale (the round trip grew and every packet is now
    /// resent, so Karn's rule starves the estimator): back the timeout off to
    /// `2 x base` (RFC 6298 5.5 and Karn's algorithm: the backed-off value
    /// stays until the next valid sample), at most `max`. If a sample did
    /// arrive since, the estimate is current and the expiry is a loss: no
    /// backoff, since the packet's own doubling period already backs off —
    /// backing off the destination too compounded across messages (each lost
    /// packet doubled the timeout its successors were sent with: a 10 s stall
    /// at 5 % loss).
    pub fn expired(&mut self, first_sent: Instant, base: Duration, max: Duration) {
        self.rtt.expired(first_sent, base, max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn established(ids: &[u32]) -> RecvIdList {
        let mut l = RecvIdList::new(1024);
        l.start_session(ids[0]);
        for &i in ids {
            assert_eq!(l.insert(i), IdStatus::New, "id {i}");
        }
        l
    }

    #[test]
    fn spec_example_truncates() {
        // {7, 9, 10, 11, 13, 14} + 8 -> {11, 13, 14}
        let mut l = established(&[5, 6, 7, 9, 10, 11, 13, 14]);
        assert_eq!(l.as_vec(), vec![7, 9, 10, 11, 13, 14]);
        assert_eq!(l.insert(8), IdStatus::New);
        assert_eq!(l.as_vec(), vec![11, 13, 14]);
        for d in [5, 7, 8, 11, 13, 14, 0, 1] {
            assert_eq!(l.insert(d), IdStatus::Duplicate, "{d}");
            assert!(l.contains(d));
        }
        assert!(!l.contains(12));
        assert_eq!(l.insert(12), IdStatus::New);
        assert_eq!(l.as_vec(), vec![14]);
    }

    #[test]
    fn in_sequence_keeps_one_element() {
        let mut l = established(&[100]);
        for i in 101..200 {
            assert_eq!(l.insert(i), IdStatus::New);
            assert_eq!(l.as_vec(), vec![i]);
        }
    }

    #[test]
    fn wraparound_around_u32_max() {
        let start = u32::MAX - 3;
        let mut l = RecvIdList::new(64);
        l.start_session(start);
        // out of order across the wrap: 0xfffffffc, then 1, 0xffffffff, 0, ...
        let order = [start, 1, u32::MAX, 0, u32::MAX - 2, u32::MAX - 1, 2];
        for &i in &order {
            assert_eq!(l.insert(i), IdStatus::New, "{i:#x}");
        }
        assert_eq!(l.as_vec(), vec![2]);
        for &i in &order {
            assert_eq!(l.insert(i), IdStatus::Duplicate, "{i:#x}");
        }
        // an id just past the wrap with a gap
        assert_eq!(l.insert(5), IdStatus::New);
        assert_eq!(l.as_vec(), vec![2, 5]);
        assert_eq!(l.insert(4), IdStatus::New);
        assert_eq!(l.insert(3), IdStatus::New);
        assert_eq!(l.as_vec(), vec![5]);
    }

    #[test]
    fn provisional_until_start_session() {
        let mut l = RecvIdList::new(64);
        // packets 11 and 12 overtake the StartSession packet 10
        assert_eq!(l.insert(12), IdStatus::New);
        assert_eq!(l.insert(11), IdStatus::New);
        assert_eq!(l.insert(12), IdStatus::Duplicate);
        assert!(!l.is_established());
        l.start_session(10);
        assert_eq!(l.insert(10), IdStatus::New);
        assert_eq!(l.as_vec(), vec![12]);
        assert_eq!(l.insert(11), IdStatus::Duplicate);
    }

    #[test]
    fn restart_with_new_start_id_resets() {
        let mut l = established(&[1000, 1001]);
        l.start_session(1000); // a resent StartSession packet: no reset
        assert_eq!(l.insert(1000), IdStatus::Duplicate);
        l.start_session(500); // new random start after a restart
        assert_eq!(l.insert(500), IdStatus::New);
        assert_eq!(l.as_vec(), vec![500]);
    }

    #[test]
    fn cap_refuses_far_ids() {
        let mut l = RecvIdList::new(2);
        l.start_session(0);
        assert_eq!(l.insert(5), IdStatus::New);
        assert_eq!(l.insert(6), IdStatus::New);
        assert_eq!(l.insert(8), IdStatus::Full);
        assert_eq!(l.insert(0), IdStatus::New);
        assert_eq!(l.insert(1), IdStatus::New);
        assert_eq!(l.as_vec(), vec![1, 5, 6]);
    }

    #[test]
    fn timing_adapts() {
        let t0 = Instant::now();
        let us = Duration::from_micros;
        let mut t = SendTiming::new(Duration::from_millis(100));
        let min = us(10);
        let max = Duration::from_secs(10);
        // first sample: SRTT 200, RTTVAR 100: 3 x 200 = 200 + 4 x 100 = 600 (spec)
        t.sample(t0, us(200), 3, min, max);
        assert_eq!((t.timeout(), t.rttvar()), (us(600), us(100)));
        // RTTVAR 3/4 x 100 + 1/4 x 0 = 75: SRTT + 4 RTTVAR = 500 < 3 x SRTT
        t.sample(t0, us(200), 3, min, max);
        assert_eq!((t.timeout(), t.rttvar()), (us(600), us(75)));
        // a jump: RTTVAR = 56.25 + 200 = 256.25, SRTT = 300: the variance
        // term (1325 us) exceeds 3 x SRTT (900 us)
        t.sample(t0, us(1000), 3, min, max);
        assert_eq!(t.srtt(), Some(us(300)));
        assert_eq!(t.rttvar(), Duration::from_nanos(256_250));
        assert_eq!(t.timeout(), us(1325));
        let mut z = SendTiming::new(Duration::ZERO);
        z.sample(t0, us(5), 3, min, max);
        assert!(z.timeout().is_zero());
    }

    #[test]
    fn expiry_backs_off_only_without_a_fresh_sample() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let max = Duration::from_secs(10);
        let mut t = SendTiming::new(ms(100));
        // no sample yet: back off to twice the packet's timeout, once per
        // generation of packets (not per expiry)
        t.expired(t0, ms(100), max);
        t.expired(t0, ms(100), max);
        assert_eq!(t.timeout(), ms(200));
        t.expired(t0, ms(200), max);
        assert_eq!(t.timeout(), ms(400));
        // a valid sample after the packet was sent: the expiry is a loss
        t.sample(t0 + ms(1), ms(1), 3, ms(1), max);
        assert_eq!(t.timeout(), ms(3));
        t.expired(t0, ms(400), max);
        assert_eq!(t.timeout(), ms(3));
        // a packet sent after the last sample: stale estimate, back off
        t.expired(t0 + ms(2), ms(3), max);
        assert_eq!(t.timeout(), ms(6));
        // capped; a fixed timeout never moves
        t.expired(t0 + ms(2), ms(8000), max);
        assert_eq!(t.timeout(), max);
        let mut f = SendTiming::new(ms(5));
        f.fix(ms(5));
        f.expired(t0, ms(5), max);
        assert_eq!(f.timeout(), ms(5));
    }
}

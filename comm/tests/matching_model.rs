//! Property tests of `comm::matching` against a straightforward model: the
//! whole history of messages and receives with a state flag each, matched by
//! scanning the history (first unmatched message in arrival order, first
//! open receive in posting order). Also checks MPI's non-overtaking rule
//! (MPI 4.0 section 3.5) directly on the matches: two messages with the same
//! envelope are received by receives in the order they arrived.

use comm::matching::{Envelope, MatchLimits, Matched, Matcher, PostError, SourceSel, Tag, TagSel};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Post(Option<usize>, Option<Tag>),
    Arrive(usize, Tag, usize),
    Cancel(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            proptest::option::of(0usize..3),
            proptest::option::of(0u32..3)
        )
            .prop_map(|(s, t)| Op::Post(s, t)),
        (0usize..3, 0u32..3, 0usize..6).prop_map(|(s, t, l)| Op::Arrive(s, t, l)),
        (0usize..40).prop_map(Op::Cancel),
    ]
}

fn sel(s: Option<usize>, t: Option<Tag>) -> (SourceSel, TagSel) {
    (
        s.map_or(SourceSel::Any, SourceSel::Rank),
        t.map_or(TagSel::Any, TagSel::Tag),
    )
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum MsgState {
    Queued,
    Matched(usize),
}

#[derive(Default)]
struct Model {
    /// (envelope, payload, state); arrival order. Refused arrivals are not kept.
    msgs: Vec<(Envelope, Vec<u8>, MsgState)>,
    /// (source, tag, open, matched message index); posting order. Refused
    /// posts are not kept.
    recvs: Vec<(SourceSel, TagSel, bool, Option<usize>)>,
}

impl Model {
    fn queued(&self) -> (usize, u64) {
        let q = self.msgs.iter().filter(|m| m.2 == MsgState::Queued);
        q.fold((0, 0), |(n, b), m| (n + 1, b + m.1.len() as u64))
    }

    fn post(&mut self, s: SourceSel, t: TagSel, l: &MatchLimits) -> Result<Option<usize>, ()> {
        let rid = self.recvs.len();
        for (i, m) in self.msgs.iter_mut().enumerate() {
            if m.2 == MsgState::Queued && s.accepts(m.0.source) && t.accepts(m.0.tag) {
                m.2 = MsgState::Matched(rid);
                self.recvs.push((s, t, false, Some(i)));
                return Ok(Some(i));
            }
        }
        if self.recvs.iter().filter(|r| r.2).count() >= l.max_posted {
            return Err(());
        }
        self.recvs.push((s, t, true, None));
        Ok(None)
    }

    fn arrive(&mut self, e: Envelope, data: Vec<u8>, l: &MatchLimits) -> Result<Option<usize>, ()> {
        let mid = self.msgs.len();
        for (i, r) in self.recvs.iter_mut().enumerate() {
            if r.2 && r.0.accepts(e.source) && r.1.accepts(e.tag) {
                r.2 = false;
                r.3 = Some(mid);
                self.msgs.push((e, data, MsgState::Matched(i)));
                return Ok(Some(i));
            }
        }
        let (n, b) = self.queued();
        let room = if n == 0 {
            l.max_unexpected_messages > 0
        } else {
            n < l.max_unexpected_messages && b + data.len() as u64 <= l.max_unexpected_bytes
        };
        if !room {
            return Err(());
        }
        self.msgs.push((e, data, MsgState::Queued));
        Ok(None)
    }
}

fn limits() -> impl Strategy<Value = MatchLimits> {
    (1usize..6, 0u64..16, 1usize..6).prop_map(|(m, b, p)| MatchLimits {
        max_unexpected_messages: m,
        max_unexpected_bytes: b,
        max_posted: p,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matcher_agrees_with_the_model(l in limits(), ops in proptest::collection::vec(op(), 0..80)) {
        let mut m = Matcher::<usize>::new(l);
        let mut model = Model::default();
        let mut overflows = 0u64;
        let mut refused_posts = 0u64;
        for op in ops {
            match op {
                Op::Post(s, t) => {
                    let (s, t) = sel(s, t);
                    let rid = model.recvs.len();
                    let want = model.post(s, t, &l);
                    match (m.post(rid, s, t), want) {
                        (Ok(None), Ok(None)) => {}
                        (Ok(Some(Matched { id, envelope, data })), Ok(Some(mi))) => {
                            prop_assert_eq!(id, rid);
                            prop_assert_eq!(envelope, model.msgs[mi].0);
                            prop_assert_eq!(&data, &model.msgs[mi].1);
                        }
                        (Err(PostError::TooManyPosted(n)), Err(())) => {
                            prop_assert_eq!(n, l.max_posted);
                            refused_posts += 1;
                        }
                        (got, want) => prop_assert!(false, "post: engine {:?}, model {:?}", got, want),
                    }
                }
                Op::Arrive(src, tag, len) => {
                    let e = Envelope { source: src, tag };
                    let data: Vec<u8> = (0..len).map(|i| (model.msgs.len() * 7 + i) as u8).collect();
                    let want = model.arrive(e, data.clone(), &l);
                    match (m.arrive(e, data.clone()), want) {
                        (Ok(None), Ok(None)) => {}
                        (Ok(Some(got)), Ok(Some(ri))) => {
                            prop_assert_eq!(got.id, ri);
                            prop_assert_eq!(got.envelope, e);
                            prop_assert_eq!(got.data, data);
                        }
                        (Err(o), Err(())) => {
                            prop_assert_eq!(o.data, data, "the refused message is given back whole");
                            overflows += 1;
                        }
                        (got, want) => prop_assert!(false, "arrive: engine {:?}, model {:?}", got, want),
                    }
                }
                Op::Cancel(k) => {
                    let want = model.recvs.get(k).is_some_and(|r| r.2);
                    if want {
                        model.recvs[k].2 = false;
                    }
                    prop_assert_eq!(m.cancel(&k), want);
                }
            }
            let (n, b) = model.queued();
            prop_assert_eq!(m.unexpected_len(), n);
            prop_assert_eq!(m.unexpected_bytes(), b);
            prop_assert_eq!(m.posted_len(), model.recvs.iter().filter(|r| r.2).count());
            prop_assert!(n <= l.max_unexpected_messages);
            prop_assert!(n <= 1 || b <= l.max_unexpected_bytes);
        }
        prop_assert_eq!(m.stats().overflows, overflows);
        prop_assert_eq!(m.stats().posted_refused, refused_posts);
        // Non-overtaking: same envelope => receives in arrival order.
        let matched: Vec<(usize, Envelope, usize)> = model
            .msgs
            .iter()
            .enumerate()
            .filter_map(|(i, msg)| match msg.2 {
                MsgState::Matched(r) => Some((i, msg.0, r)),
                MsgState::Queued => None,
            })
            .collect();
        for a in &matched {
            for b in &matched {
                if a.1 == b.1 && a.0 < b.0 {
                    prop_assert!(a.2 < b.2, "message {} overtaken by {} ({:?})", a.0, b.0, a.1);
                }
            }
        }
        // No message matched twice, none lost: each is queued or matched once.
        let mut seen = std::collections::HashSet::new();
        for (_, _, r) in &matched {
            prop_assert!(seen.insert(*r), "receive {} matched twice", r);
        }
    }
}

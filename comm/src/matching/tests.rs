use super::*;
use proptest::prelude::*;

fn env(source: usize, tag: Tag) -> Envelope {
    Envelope { source, tag }
}

#[test]
fn posted_receive_takes_the_first_matching_arrival() {
    let mut m = Matcher::<u32>::new(MatchLimits::default());
    assert_eq!(m.post(1, SourceSel::Rank(2), TagSel::Tag(7)).unwrap(), None);
    // Wrong tag, wrong source: queued as unexpected.
    assert_eq!(m.arrive(env(2, 8), vec![1]).unwrap(), None);
    assert_eq!(m.arrive(env(3, 7), vec![2]).unwrap(), None);
    let got = m.arrive(env(2, 7), vec![3]).unwrap().unwrap();
    assert_eq!((got.id, got.data), (1, vec![3]));
    assert_eq!((m.posted_len(), m.unexpected_len()), (0, 2));
    assert_eq!(m.unexpected_bytes(), 2);
}

#[test]
fn wildcards_take_unexpected_messages_in_arrival_order() {
    let mut m = Matcher::<u32>::new(MatchLimits::default());
    m.arrive(env(1, 5), b"a".to_vec()).unwrap();
    m.arrive(env(0, 6), b"b".to_vec()).unwrap();
    m.arrive(env(1, 6), b"c".to_vec()).unwrap();
    let a = m.post(1, ANY_SOURCE, TagSel::Tag(6)).unwrap().unwrap();
    assert_eq!((a.envelope, a.data), (env(0, 6), b"b".to_vec()));
    let b = m.post(2, SourceSel::Rank(1), ANY_TAG).unwrap().unwrap();
    assert_eq!((b.envelope, b.data), (env(1, 5), b"a".to_vec()));
    let c = m.post(3, ANY_SOURCE, ANY_TAG).unwrap().unwrap();
    assert_eq!((c.envelope, c.data), (env(1, 6), b"c".to_vec()));
    assert_eq!(m.post(4, ANY_SOURCE, ANY_TAG).unwrap(), None);
    assert_eq!(m.posted_len(), 1);
}

#[test]
fn full_unexpected_queue_gives_the_message_back_and_counts() {
    let limits = MatchLimits {
        max_unexpected_messages: 2,
        max_unexpected_bytes: 10,
        max_posted: 1,
    };
    let mut m = Matcher::<u32>::new(limits);
    // One message larger than the byte bound fits an empty queue.
    m.arrive(env(0, 0), vec![0; 20]).unwrap();
    let o = m.arrive(env(0, 1), vec![9; 1]).unwrap_err();
    assert_eq!((o.envelope, o.data.clone()), (env(0, 1), vec![9]));
    assert_eq!((o.queued, o.queued_bytes), (1, 20));
    assert!(o.to_string().contains("from rank 0 tag 1"), "{o}");
    assert_eq!(m.stats().overflows, 1);
    // A posted receive still takes a message although the queue is full.
    m.post(7, ANY_SOURCE, TagSel::Tag(3)).unwrap();
    assert_eq!(m.arrive(env(1, 3), vec![1]).unwrap().unwrap().id, 7);
    // Taking the big one makes room again.
    assert_eq!(
        m.post(8, ANY_SOURCE, ANY_TAG).unwrap().unwrap().data.len(),
        20
    );
    m.arrive(env(0, 1), vec![9; 5]).unwrap();
    m.arrive(env(0, 2), vec![9; 5]).unwrap();
    assert!(m.arrive(env(0, 3), vec![]).is_err(), "count bound");
    // Posted bound.
    m.post(9, SourceSel::Rank(5), ANY_TAG).unwrap();
    assert_eq!(
        m.post(10, SourceSel::Rank(5), ANY_TAG),
        Err(PostError::TooManyPosted(1))
    );
    assert_eq!(m.stats().posted_refused, 1);
}

#[test]
fn cancel_and_cancel_source() {
    let mut m = Matcher::<u32>::new(MatchLimits::default());
    m.post(1, SourceSel::Rank(3), ANY_TAG).unwrap();
    m.post(2, ANY_SOURCE, ANY_TAG).unwrap();
    m.post(3, SourceSel::Rank(3), TagSel::Tag(1)).unwrap();
    m.post(4, SourceSel::Rank(4), TagSel::Tag(1)).unwrap();
    assert_eq!(m.cancel_source(3), vec![1, 3]);
    assert!(m.cancel(&4));
    assert!(!m.cancel(&4));
    assert_eq!(m.posted_len(), 1);
    assert_eq!(m.arrive(env(3, 1), vec![]).unwrap().unwrap().id, 2);
}

#[test]
fn probe_does_not_take() {
    let mut m = Matcher::<u32>::new(MatchLimits::default());
    assert_eq!(m.probe(ANY_SOURCE, ANY_TAG), None);
    m.arrive(env(2, 4), vec![1, 2, 3]).unwrap();
    assert_eq!(m.probe(ANY_SOURCE, TagSel::Tag(4)), Some((env(2, 4), 3)));
    assert_eq!(m.probe(SourceSel::Rank(1), ANY_TAG), None);
    assert_eq!(m.unexpected_len(), 1);
}

fn tenv(source: usize, tag: u64, data: Option<u64>) -> TagEnvelope {
    TagEnvelope { source, tag, data }
}

/// libfabric's example layout: the high bits name a protocol, the low
/// ones a tag; ignoring the low 32 bits takes any tag of one protocol.
#[test]
fn ignore_masks_select_bits_and_data_travels_with_the_message() {
    let mut m = TagMatcher::<u32>::new(MatchLimits::default());
    m.arrive(tenv(0, 0x1_0000_0005, Some(9)), b"a".to_vec())
        .unwrap();
    m.arrive(tenv(1, 0x2_0000_0005, None), b"b".to_vec())
        .unwrap();
    let sel = Selector {
        source: None,
        tag: 0x2_0000_0000,
        ignore: 0xffff_ffff,
    };
    let got = m.post(1, sel).unwrap().unwrap();
    assert_eq!((got.envelope.source, got.data), (1, b"b".to_vec()));
    let got = m.post(2, Selector::exact(Some(0), 0x1_0000_0005)).unwrap();
    assert_eq!(got.unwrap().envelope.data, Some(9));
    // A bit outside the mask decides.
    m.post(3, Selector::exact(None, 0x3_0000_0000)).unwrap();
    m.arrive(tenv(0, 0x3_0000_0001, None), vec![]).unwrap();
    assert_eq!((m.posted_len(), m.unexpected_len()), (1, 1));
}

#[test]
fn peek_claim_take_and_discard() {
    let mut m = TagMatcher::<u32>::new(MatchLimits::default());
    let any = Selector {
        source: None,
        tag: 0,
        ignore: u64::MAX,
    };
    assert_eq!(m.peek(&any), None);
    m.arrive(tenv(0, 1, None), b"one".to_vec()).unwrap();
    m.arrive(tenv(0, 2, Some(7)), b"two!".to_vec()).unwrap();
    m.arrive(tenv(1, 3, None), b"3".to_vec()).unwrap();
    // Peek takes nothing.
    assert_eq!(m.peek(&any), Some((tenv(0, 1, None), 3)));
    assert_eq!(m.unexpected_len(), 3);
    // Claim keys the first match by the context; it leaves matching but
    // stays in the bounds.
    assert_eq!(m.claim(&any, 100), Some((tenv(0, 1, None), 3)));
    assert_eq!(m.claim(&any, 100), None, "the key holds one already");
    assert_eq!((m.unexpected_len(), m.unexpected_bytes()), (3, 8));
    assert_eq!(m.peek(&any), Some((tenv(0, 2, Some(7)), 4)));
    // A later receive does not see the claimed message.
    let r = m.post(1, Selector::exact(Some(0), 1)).unwrap();
    assert_eq!(r, None);
    assert!(m.cancel(&1));
    assert_eq!(
        m.take_claimed(100),
        Some((tenv(0, 1, None), b"one".to_vec()))
    );
    assert_eq!(m.take_claimed(100), None);
    // Discard of a claimed message, and of the first match.
    assert_eq!(m.claim(&any, 5), Some((tenv(0, 2, Some(7)), 4)));
    assert_eq!(
        m.discard_claimed(5),
        Some((tenv(0, 2, Some(7)), b"two!".to_vec()))
    );
    assert_eq!(m.discard(&any), Some((tenv(1, 3, None), b"3".to_vec())));
    assert_eq!((m.unexpected_len(), m.unexpected_bytes()), (0, 0));
    assert_eq!(m.stats().discarded, 2);
}

#[derive(Debug, Clone)]
enum Op {
    Post(Option<usize>, u64, u64),
    Arrive(usize, u64, usize),
    Cancel(usize),
    Claim(Option<usize>, u64, u64, u64),
    TakeClaimed(u64),
}

/// Tags and masks over 4 bits spread across the 64 (bits 0, 1, 32, 63), so
/// that random selectors match often.
fn bits() -> impl Strategy<Value = u64> {
    (0u8..16).prop_map(|b| {
        [0u32, 1, 32, 63]
            .iter()
            .enumerate()
            .filter(|(i, _)| b & (1 << i) != 0)
            .fold(0u64, |t, (_, &s)| t | (1u64 << s))
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (proptest::option::of(0usize..3), bits(), bits()).prop_map(|(s, t, i)| Op::Post(s, t, i)),
        (0usize..3, bits(), 0usize..6).prop_map(|(s, t, l)| Op::Arrive(s, t, l)),
        (0usize..40).prop_map(Op::Cancel),
        (proptest::option::of(0usize..3), bits(), bits(), 0u64..3)
            .prop_map(|(s, t, i, k)| Op::Claim(s, t, i, k)),
        (0u64..3).prop_map(Op::TakeClaimed),
    ]
}

/// The model: libfabric's rule written out, over the whole history.
#[derive(Default)]
struct Model {
    /// (envelope, payload, queued?, claimed key); arrival order.
    msgs: Vec<(TagEnvelope, Vec<u8>, bool, Option<u64>)>,
    /// (selector, open?); posting order.
    recvs: Vec<(Selector, bool)>,
}

fn model_accepts(s: &Selector, e: &TagEnvelope) -> bool {
    (s.source.is_none() || s.source == Some(e.source))
        && (0..64).all(|b| s.ignore >> b & 1 == 1 || (s.tag >> b & 1) == (e.tag >> b & 1))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The engine against the model with unbounded queues: every post,
    /// arrival, cancel, claim and take agrees, and the queue sizes too.
    #[test]
    fn tag_matcher_agrees_with_the_model(ops in proptest::collection::vec(op(), 0..80)) {
        let mut m = TagMatcher::<usize>::new(MatchLimits::default());
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Post(s, t, i) => {
                    let sel = Selector { source: s, tag: t, ignore: i };
                    let rid = model.recvs.len();
                    let want = model.msgs.iter().position(|x| x.2 && model_accepts(&sel, &x.0));
                    let got = m.post(rid, sel).unwrap();
                    match want {
                        Some(mi) => {
                            model.msgs[mi].2 = false;
                            model.recvs.push((sel, false));
                            let g = got.expect("engine matched nothing");
                            prop_assert_eq!(g.envelope, model.msgs[mi].0);
                            prop_assert_eq!(&g.data, &model.msgs[mi].1);
                        }
                        None => {
                            prop_assert!(got.is_none());
                            model.recvs.push((sel, true));
                        }
                    }
                }
                Op::Arrive(src, tag, len) => {
                    let e = tenv(src, tag, Some(model.msgs.len() as u64));
                    let data: Vec<u8> = (0..len).map(|i| (model.msgs.len() * 7 + i) as u8).collect();
                    let want = model.recvs.iter().position(|r| r.1 && model_accepts(&r.0, &e));
                    let got = m.arrive(e, data.clone()).unwrap();
                    match want {
                        Some(ri) => {
                            model.recvs[ri].1 = false;
                            model.msgs.push((e, data.clone(), false, None));
                            let g = got.expect("engine matched nothing");
                            prop_assert_eq!(g.id, ri);
                            prop_assert_eq!(g.data, data);
                        }
                        None => {
                            prop_assert!(got.is_none());
                            model.msgs.push((e, data, true, None));
                        }
                    }
                }
                Op::Cancel(k) => {
                    let want = model.recvs.get(k).is_some_and(|r| r.1);
                    if want {
                        model.recvs[k].1 = false;
                    }
                    prop_assert_eq!(m.cancel(&k), want);
                }
                Op::Claim(s, t, i, key) => {
                    let sel = Selector { source: s, tag: t, ignore: i };
                    let held = model.msgs.iter().any(|x| x.3 == Some(key));
                    let want = if held {
                        None
                    } else {
                        model.msgs.iter().position(|x| x.2 && model_accepts(&sel, &x.0))
                    };
                    let got = m.claim(&sel, key);
                    match want {
                        Some(mi) => {
                            model.msgs[mi].2 = false;
                            model.msgs[mi].3 = Some(key);
                            prop_assert_eq!(got, Some((model.msgs[mi].0, model.msgs[mi].1.len())));
                        }
                        None => prop_assert_eq!(got, None),
                    }
                }
                Op::TakeClaimed(key) => {
                    let want = model.msgs.iter().position(|x| x.3 == Some(key));
                    let got = m.take_claimed(key);
                    match want {
                        Some(mi) => {
                            model.msgs[mi].3 = None;
                            prop_assert_eq!(got, Some((model.msgs[mi].0, model.msgs[mi].1.clone())));
                        }
                        None => prop_assert_eq!(got, None),
                    }
                }
            }
            let held: Vec<_> = model.msgs.iter().filter(|x| x.2 || x.3.is_some()).collect();
            prop_assert_eq!(m.unexpected_len(), held.len());
            prop_assert_eq!(m.unexpected_bytes(), held.iter().map(|x| x.1.len() as u64).sum::<u64>());
            prop_assert_eq!(m.posted_len(), model.recvs.iter().filter(|r| r.1).count());
        }
    }
}

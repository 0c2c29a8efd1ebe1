//! Negotiation traces (`esp::auth`): two sans-IO ends, frames
//! moved by hand through the wire codec, each frame's authentication
//! verdict (`TagStatus`) given as the runtime would give it.

use std::time::{Duration, Instant};

use esp::auth::{AuthMethod, AuthPolicy, MethodList, TagStatus};
use esp::conn::{Connection, IsnGenerator, State};
use esp::listener::{DropReason, Listener, SynOutcome};
use esp::wire::{EspFrame, EspRepr, Flags, MacAddr, Nego, Seq, ETHERTYPE_ESP, OPT_NEGO};
use esp::{ConnectionError, TransportConfig};

const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xa]);
const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xb]);
const PA: u16 = 40000;
const PB: u16 = 80;
const MTU: usize = 1500;
const N: AuthMethod = AuthMethod::NONE;
const S: AuthMethod = AuthMethod::SIPHASH24_128;
const V: TagStatus = TagStatus::Verified;
const U: TagStatus = TagStatus::Unverified;

fn cfg(methods: &[AuthMethod]) -> TransportConfig {
    TransportConfig {
        auth: AuthPolicy::Methods(MethodList::of(methods).unwrap()),
        ..Default::default()
    }
}

/// Every frame `c` sends now, each parsed back from its bytes.
fn out(c: &mut Connection, now: Instant) -> Vec<(EspRepr, Vec<u8>)> {
    let mut buf = [0u8; MTU + 14];
    let mut v = Vec::new();
    while let Some(n) = c.poll_transmit(now, &mut buf) {
        let f = EspFrame::parse(&buf[..n], ETHERTYPE_ESP, MTU + 14).expect("own frame parses");
        v.push((f.header, f.payload.to_vec()));
        assert!(v.len() < 1000);
    }
    v
}

fn listener(methods: &[AuthMethod]) -> Listener<()> {
    Listener::new(cfg(methods), MTU, (B, PB), IsnGenerator::with_key([7; 16]))
}

/// The SYN of a client offering `offer`, as sent.
fn client(offer: &[AuthMethod], t0: Instant) -> (Connection, EspRepr) {
    let mut a = Connection::connect(&cfg(offer), MTU, (A, PA), (B, PB), Seq(1000), t0);
    let syn = out(&mut a, t0);
    assert_eq!(syn.len(), 1);
    (a, syn[0].0)
}

fn syn_to(l: &mut Listener<()>, now: Instant, syn: &EspRepr, tag: TagStatus) -> SynOutcome {
    l.on_segment_tagged(now, 0, A, syn, &[], tag, |_| false)
}

/// Runs the handshake of a client offering `offer` with a listener
/// governed by `prefs`, every frame carrying tag status `tag`; returns
/// both ends, established, and the method each bound.
fn handshake(
    offer: &[AuthMethod],
    prefs: &[AuthMethod],
    tag: TagStatus,
) -> (Instant, Connection, Connection) {
    let t0 = Instant::now();
    let (mut a, syn) = client(offer, t0);
    assert_eq!(
        syn.nego.expect("the SYN carries the offer").auth,
        MethodList::of(offer).unwrap()
    );
    let mut l = listener(prefs);
    let SynOutcome::Accept(b) = syn_to(&mut l, t0, &syn, tag) else {
        panic!("refused")
    };
    let mut b = *b;
    let synack = out(&mut b, t0);
    let choice = synack[0].0.nego.expect("the SYN-ACK carries the choice");
    assert_eq!(choice.auth.len(), 1, "one method chosen");
    for (r, p) in &synack {
        a.handle_segment_tagged(t0, r, p, tag, &mut []);
    }
    for (r, p) in out(&mut a, t0) {
        b.handle_segment_tagged(t0, &r, &p, tag, &mut []);
    }
    assert_eq!(
        (a.state(), b.state()),
        (State::Established, State::Established)
    );
    assert_eq!(a.auth_method(), b.auth_method());
    assert_eq!(a.auth_method(), Some(AuthMethod(choice.auth.as_slice()[0])));
    (t0, a, b)
}

#[test]
fn agreeing_ends_bind_the_method_and_untagged_segments_are_dropped() {
    let (t0, mut a, mut b) = handshake(&[S, N], &[S, N], V);
    assert_eq!(a.auth_method(), Some(S));
    assert!(!a.accepts_unverified() && !b.accepts_unverified());
    a.send(b"hello").unwrap();
    let data = out(&mut a, t0);
    assert_eq!(data.len(), 1);
    let (r, p) = &data[0];
    // The same segment without a valid tag: counted, dropped, no state.
    let before = (b.rcv_nxt(), b.recv_available());
    b.handle_segment_tagged(t0, r, p, U, &mut []);
    b.handle_segment_tagged(t0, r, p, TagStatus::Off, &mut []);
    assert_eq!((b.rcv_nxt(), b.recv_available()), before);
    assert_eq!(b.stats().auth_dropped, 2);
    // With its tag it is taken.
    b.handle_segment_tagged(t0, r, p, V, &mut []);
    let mut buf = [0u8; 16];
    assert_eq!(b.recv(&mut buf), Ok(5));
    assert_eq!(&buf[..5], b"hello");
    // An untagged RST with the exact sequence number does not kill it.
    let rst = EspRepr {
        src_port: PA,
        dst_port: PB,
        flags: Flags::RST,
        seq: b.rcv_nxt(),
        ..Default::default()
    };
    b.handle_segment_tagged(t0 + Duration::from_millis(1), &rst, &[], U, &mut []);
    assert_eq!(b.state(), State::Established);
    assert_eq!(b.stats().auth_dropped, 3);
}

#[test]
fn under_method_none_segments_pass_with_or_without_a_tag() {
    let (t0, mut a, mut b) = handshake(&[N], &[N], U);
    assert_eq!(b.auth_method(), Some(N));
    assert!(a.accepts_unverified() && b.accepts_unverified());
    a.send(b"x").unwrap();
    for (r, p) in out(&mut a, t0) {
        b.handle_segment_tagged(t0, &r, &p, U, &mut []);
    }
    assert_eq!(b.recv_available(), 1);
    assert_eq!(b.stats().auth_dropped, 0);
}

#[test]
fn the_acceptors_order_wins_over_the_initiators() {
    let (_, a, _) = handshake(&[S, N], &[N, S], V);
    assert_eq!(a.auth_method(), Some(N), "listener prefers none");
    let (_, a, _) = handshake(&[N, S], &[S, N], V);
    assert_eq!(a.auth_method(), Some(S), "listener prefers the tag");
    // An unsealed SYN offering the tag: the tag is not offered in truth.
    let (_, a, _) = handshake(&[S, N], &[S, N], U);
    assert_eq!(a.auth_method(), Some(N));
}

/// The listener refuses `syn`; the RST it answers with, delivered to the
/// client without a tag, gives the client's error.
fn refused(
    l: &mut Listener<()>,
    a: &mut Connection,
    syn: &EspRepr,
    tag: TagStatus,
) -> ConnectionError {
    let t0 = Instant::now();
    let before = l.stats().auth_refused;
    let SynOutcome::Refused(rst) = syn_to(l, t0, syn, tag) else {
        panic!("not refused")
    };
    assert_eq!(l.stats().auth_refused, before + 1);
    assert_eq!(l.half_open(), 0, "a refusal keeps no state");
    assert!(rst.flags.rst());
    assert!(rst.nego.is_some(), "the RST carries the listener's lists");
    // Through the wire codec, as the client receives it.
    let mut buf = [0u8; 128];
    let n = rst.emit(&mut buf);
    esp::wire::fill_checksum(&mut buf[..n], true);
    let (r, _) = EspRepr::parse(&buf[..n]).unwrap();
    assert_eq!(r, rst);
    assert!(a.accepts_unverified(), "SYN_SENT takes an untagged refusal");
    a.handle_segment_tagged(t0, &r, &[], U, &mut []);
    assert_eq!(a.state(), State::Closed);
    a.error().expect("refusal is an error")
}

#[test]
fn no_common_method_is_refused_with_an_explicit_error() {
    let t0 = Instant::now();
    // A client without the key, a listener that requires the tag.
    let (mut a, syn) = client(&[N], t0);
    let e = refused(&mut listener(&[S]), &mut a, &syn, U);
    assert_eq!(e, ConnectionError::AuthRequired(S));
    let msg = std::io::Error::from(e).to_string();
    assert!(
        msg.contains("siphash-2-4-128") && msg.contains("CLUSTERNET_KEY_FILE"),
        "{msg}"
    );
    // A client that requires the tag, a listener without a key.
    let (mut a, syn) = client(&[S], t0);
    let e = refused(&mut listener(&[N]), &mut a, &syn, V);
    assert_eq!(e, ConnectionError::AuthUnavailable(N));
    // Both require the tag, the SYN's tag fails: keys differ.
    let (mut a, syn) = client(&[S], t0);
    let e = refused(&mut listener(&[S]), &mut a, &syn, U);
    assert_eq!(e, ConnectionError::AuthFailed);
    assert!(e.to_string().contains("keys differ"));
}

#[test]
fn a_listener_requiring_auth_refuses_a_syn_without_the_option() {
    let t0 = Instant::now();
    let (mut a, mut syn) = client(&[N], t0);
    syn.nego = None; // a client from before negotiation
    let e = refused(&mut listener(&[S]), &mut a, &syn, V);
    assert_eq!(e, ConnectionError::AuthRequired(S));
    // A listener that also serves `none` takes it, bound to none.
    let mut l = listener(&[S, N]);
    let SynOutcome::Accept(b) = syn_to(&mut l, t0, &syn, V) else {
        panic!("refused")
    };
    assert_eq!(b.auth_method(), Some(N));
}

#[test]
fn a_syn_ack_choosing_what_was_not_offered_is_refused_in_turn() {
    let t0 = Instant::now();
    let (mut a, syn) = client(&[S], t0);
    // An old listener without negotiation or key: SYN-ACK without option,
    // untagged.
    let synack = EspRepr {
        src_port: PB,
        dst_port: PA,
        flags: Flags::SYN | Flags::ACK,
        seq: Seq(5),
        ack: syn.seq.add(1),
        window: 10,
        ..Default::default()
    };
    a.handle_segment_tagged(t0, &synack, &[], U, &mut []);
    assert_eq!(a.error(), Some(ConnectionError::AuthUnavailable(N)));
    let rst = out(&mut a, t0);
    assert!(rst.iter().any(|(r, _)| r.flags.rst()), "the peer is told");
    // A forged SYN-ACK choosing the tag, untagged: dropped, counted.
    let (mut a, syn) = client(&[S, N], t0);
    let forged = EspRepr {
        nego: Some(Nego {
            auth: MethodList::one(S.0),
            enc: MethodList::one(0),
        }),
        ack: syn.seq.add(1),
        ..synack
    };
    a.handle_segment_tagged(t0, &forged, &[], U, &mut []);
    assert_eq!(a.state(), State::SynSent);
    assert_eq!(a.stats().auth_dropped, 1);
    a.handle_segment_tagged(t0, &forged, &[], V, &mut []);
    assert_eq!((a.state(), a.auth_method()), (State::Established, Some(S)));
}

#[test]
fn cookies_bind_the_method_chosen() {
    let t0 = Instant::now();
    let c = TransportConfig {
        max_half_open: 0,
        ..cfg(&[S, N])
    };
    let mut l: Listener<()> = Listener::new(c, MTU, (B, PB), IsnGenerator::with_key([7; 16]));
    let (mut a, syn) = client(&[S, N], t0);
    let SynOutcome::Cookie(synack) = syn_to(&mut l, t0, &syn, V) else {
        panic!("no cookie")
    };
    assert_eq!(synack.nego.unwrap().auth, MethodList::one(S.0));
    a.handle_segment_tagged(t0, &synack, &[], V, &mut []);
    assert_eq!(a.auth_method(), Some(S));
    let ack = out(&mut a, t0);
    let (r, p) = &ack[0];
    // The final ACK without its tag completes nothing, draws no RST.
    match l.on_segment_tagged(t0, 0, A, r, p, U, |_| false) {
        SynOutcome::Drop(DropReason::Unauthenticated) => {}
        o => panic!("{o:?}"),
    }
    assert_eq!(l.stats().auth_dropped, 1);
    let SynOutcome::Accept(b) = l.on_segment_tagged(t0, 0, A, r, p, V, |_| false) else {
        panic!("cookie refused")
    };
    assert_eq!(b.auth_method(), Some(S));
}

#[test]
fn a_listener_requiring_the_tag_answers_only_syns_without_one() {
    let t0 = Instant::now();
    let mut l = listener(&[S]);
    let ack = EspRepr {
        src_port: PA,
        dst_port: PB,
        flags: Flags::ACK,
        seq: Seq(9),
        ack: Seq(99),
        ..Default::default()
    };
    match syn_to(&mut l, t0, &ack, U) {
        SynOutcome::Drop(DropReason::Unauthenticated) => {}
        o => panic!("{o:?}"),
    }
    assert_eq!(l.stats().auth_dropped, 1);
    assert_eq!(l.stats().resets, 0, "no RST for an untagged segment");
    // Tagged, the same segment draws the RST of RFC 793's LISTEN rules.
    assert!(matches!(syn_to(&mut l, t0, &ack, V), SynOutcome::Reset(_)));
}

#[test]
fn malformed_option_lists_are_errors_and_change_nothing() {
    let t0 = Instant::now();
    let (_, syn) = client(&[S, N], t0);
    let mut buf = [0u8; 64];
    let n = syn.emit(&mut buf);
    let at = buf[20..n].iter().position(|&b| b == OPT_NEGO).unwrap() + 20;
    assert_eq!(&buf[at..at + 7], &[OPT_NEGO, 7, 2, S.0, N.0, 1, 0]);
    let bad = |f: &dyn Fn(&mut [u8])| {
        let mut b = buf;
        f(&mut b[..n]);
        EspRepr::parse(&b[..n]).is_err()
    };
    assert!(bad(&|b| b[at + 2] = 0), "no auth method");
    assert!(bad(&|b| b[at + 2] = 9), "auth count beyond the option");
    assert!(bad(&|b| b[at + 5] = 2), "enc count beyond the option");
    assert!(bad(&|b| b[at + 1] = 6), "length disagrees with the counts");
    assert!(bad(&|b| b[at + 1] = 40), "length beyond the header");
    assert!(
        bad(&|b| b[6] = Flags::ACK.bits()),
        "negotiation option on a segment other than SYN/RST"
    );
    // A malformed SYN never reaches the listener: the slot counts it
    // (`SlotStats::malformed`) and drops it; the listener is untouched.
    let mut l = listener(&[S]);
    assert_eq!(l.stats(), Default::default());
    assert_eq!(l.half_open(), 0);
    // The same SYN well formed is negotiated.
    let (r, _) = EspRepr::parse(&buf[..n]).unwrap();
    assert!(matches!(syn_to(&mut l, t0, &r, V), SynOutcome::Accept(_)));
}

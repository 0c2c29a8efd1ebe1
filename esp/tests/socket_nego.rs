//! Negotiation through the socket layer and the runtime, over an in-memory
//! link (no root): a listener's runtime with a cluster key, and on the other
//! end raw frames (sealed or not) or a runtime with or without the key.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use esp::auth::{AuthMethod, AuthPolicy, MethodList};
use esp::wire::{EspFrame, Flags, Nego, ETHERTYPE_ESP, OPT_NEGO};
use esp::{EspConfig, EspListener, EspStream};
use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink};
use link::Link;
use link::ETH_HEADER_LEN;
use runtime::auth::{AuthKey, AuthSetting, Sealer, Verifier};
use runtime::Runtime;

mod raw_peer;
use raw_peer::{next_frame, syn_frame};

const PATIENCE: Option<Duration> = Some(Duration::from_secs(30));
const N: u8 = AuthMethod::NONE.0;
const S: u8 = AuthMethod::SIPHASH24_128.0;

fn key() -> AuthKey {
    AuthKey::new([0x5a; 16])
}

fn cfg(auth: AuthSetting) -> EspConfig {
    let mut c = EspConfig::default();
    c.runtime.link.auth = auth;
    c
}

fn pair() -> (SimLink, SimLink) {
    let clock = SimClock::new();
    SimLink::pair(&clock, 1500, FaultConfig::seeded(1), FaultConfig::seeded(2))
}

fn offer(ids: &[u8]) -> Option<Nego> {
    Some(Nego {
        auth: MethodList::from_ids(ids).unwrap(),
        enc: MethodList::one(0),
    })
}

#[test]
fn a_keyed_listener_negotiates_with_raw_frames() {
    let (mut raw, lb) = pair();
    let rt =
        Runtime::with_link(Box::new(lb), cfg(AuthSetting::Key(key())).runtime_config()).unwrap();
    assert!(rt.authenticated());
    let l = EspListener::bind_on(&rt, 80, cfg(AuthSetting::Key(key()))).unwrap();
    let drive = || rt.drive().unwrap();
    let dst = rt.mac();

    // 1. A malformed option (auth count 0), unsealed: counted, no state.
    let mut f = syn_frame(&raw, dst, offer(&[N]));
    let at = f[ETH_HEADER_LEN + 20..]
        .iter()
        .position(|&b| b == OPT_NEGO)
        .unwrap()
        + ETH_HEADER_LEN
        + 20;
    f[at + 2] = 0;
    esp::wire::fill_checksum(&mut f[ETH_HEADER_LEN..], true);
    raw.send(&f).unwrap();
    for _ in 0..20 {
        drive();
    }
    assert_eq!(l.slot_stats().malformed, 1);
    assert_eq!(l.stats(), Default::default(), "the listener never saw it");

    // 2. An unsealed SYN offering none: refused, the RST says why.
    raw.send(&syn_frame(&raw, dst, offer(&[N]))).unwrap();
    let rst = next_frame(&mut raw, drive);
    let rst = EspFrame::parse(&rst, ETHERTYPE_ESP, 1514 + 24).unwrap();
    assert!(rst.header.flags.rst());
    assert_eq!(
        rst.header.nego.unwrap().auth,
        MethodList::one(S),
        "the listener's list: the tag required"
    );
    assert_eq!(l.stats().auth_refused, 1);
    assert_eq!(l.stats().syns_accepted, 0);

    // 3. A sealed SYN offering the tag: accepted, the SYN-ACK (sealed,
    // verifiable) carries the choice.
    let mut sealer = Sealer::new(key());
    let mut f = syn_frame(&raw, dst, offer(&[S, N]));
    let len = f.len();
    f.resize(len + 60, 0);
    let n = sealer.seal_in_place(&mut f, len, runtime::auth::wall_ns());
    f.truncate(n);
    raw.send(&f).unwrap();
    let synack = next_frame(&mut raw, drive);
    let body = Verifier::new(key())
        .verify(&synack, runtime::auth::wall_ns())
        .expect("the SYN-ACK is sealed");
    let sa = EspFrame::parse(&synack[..body], ETHERTYPE_ESP, 1514).unwrap();
    assert_eq!(sa.header.flags, Flags::SYN | Flags::ACK);
    assert_eq!(sa.header.nego.unwrap().auth, MethodList::one(S));
    assert_eq!(l.stats().syns_accepted, 1);
    assert!(rt.stats().auth_unverified_delivered >= 2);
}

/// A server on a keyed runtime (policy `policy`) and a client runtime with
/// `client_auth`: the client's connect result and, when it connected, the
/// method and the bytes echoed back byte-exact.
fn connect(policy: AuthPolicy, client_auth: AuthSetting) -> std::io::Result<Option<AuthMethod>> {
    let (la, lb) = pair();
    let peer = lb.mac();
    let mut server_cfg = cfg(AuthSetting::Key(key()));
    server_cfg.transport.auth = policy;
    let server = std::thread::spawn(move || {
        let rt = Runtime::with_link(Box::new(lb), server_cfg.runtime_config()).unwrap();
        let l = EspListener::bind_on(&rt, 80, server_cfg).unwrap();
        match l.accept_timeout(Some(Duration::from_secs(3))) {
            Ok((mut s, _)) => {
                s.set_read_timeout(PATIENCE).unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).unwrap();
                s.write_all(&got).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
                (l.stats(), s.auth_method())
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
                (l.stats(), None)
            }
        }
    });
    let ccfg = cfg(client_auth);
    let rt = Runtime::with_link(Box::new(la), ccfg.runtime_config()).unwrap();
    let r = EspStream::connect_on(&rt, (peer, 80), ccfg, PATIENCE);
    let r = r.map(|mut s| {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        s.set_read_timeout(PATIENCE).unwrap();
        s.write_all(&data).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        if let Err(e) = s.read_to_end(&mut back) {
            panic!("{e}: {:?} {:?} {:?}", s.stats(), s.slot_stats(), rt.stats());
        }
        assert!(back == data, "byte-exact echo");
        s.auth_method()
    });
    let (stats, server_method) = server.join().unwrap();
    if let Ok(m) = &r {
        assert_eq!(*m, server_method);
    } else {
        assert!(stats.auth_refused >= 1, "{stats:?}");
    }
    r
}

#[test]
fn a_client_without_the_key_is_refused_with_a_clear_error() {
    let e = connect(AuthPolicy::Cluster, AuthSetting::Off).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("requires authentication method siphash-2-4-128")
            && msg.contains("CLUSTERNET_KEY_FILE"),
        "{msg}"
    );
}

#[test]
fn clients_with_the_key_connect_authenticated_and_without_under_a_lenient_policy() {
    let m = connect(AuthPolicy::Cluster, AuthSetting::Key(key())).unwrap();
    assert_eq!(m, Some(AuthMethod::SIPHASH24_128));
    let lenient = AuthPolicy::Methods(MethodList::from_ids(&[S, N]).unwrap());
    let m = connect(lenient, AuthSetting::Off).unwrap();
    assert_eq!(m, Some(AuthMethod::NONE));
}

#[test]
fn a_client_with_another_key_is_told_the_keys_differ() {
    let e = connect(AuthPolicy::Cluster, AuthSetting::Key(AuthKey::new([1; 16]))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    assert!(e.to_string().contains("keys differ"), "{e}");
}

#[test]
fn a_policy_with_the_tag_needs_a_key() {
    let (la, _lb) = pair();
    let mut c = cfg(AuthSetting::Off);
    c.transport.auth = AuthPolicy::Methods(MethodList::one(S));
    let rt = Runtime::with_link(Box::new(la), c.runtime_config()).unwrap();
    let e = EspListener::bind_on(&rt, 80, c).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("CLUSTERNET_KEY_FILE"), "{e}");
}

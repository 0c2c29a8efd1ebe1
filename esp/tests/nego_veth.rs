//! Negotiation of the authentication method through real packet sockets:
//! two network namespaces on veth (`vcluster`, through
//! `testkit`). A listener whose runtime has the cluster key (default
//! policy: authentication required) refuses a client without the key with
//! an explicit error and serves a client with it, byte-exact. Needs root;
//! without it the test prints why and returns (fails under CI=true).

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::mpsc;
use std::time::Duration;

use esp::auth::AuthMethod;
use esp::{EspConfig, EspListener, EspStream};
use runtime::auth::{AuthKey, AuthSetting};
use testkit::pattern::{check, fill, Digest};
use testkit::setup;

/// Liveness bound (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);
const LEN: usize = 4 << 20;

fn cfg(auth: AuthSetting) -> EspConfig {
    let mut c = EspConfig::default();
    c.runtime.link.auth = auth;
    c
}

#[test]
fn a_client_without_the_key_is_refused_and_one_with_it_connects() {
    let Some(net) = setup("nego_veth", 2, 1500) else {
        return;
    };
    let key = AuthKey::new([0x3c; 16]);
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (tx, rx) = mpsc::channel();
    let (bi, k) = (b.clone(), key.clone());
    let server = b.spawn(move || {
        let l = EspListener::bind_with(&bi.iface, 7300, cfg(AuthSetting::Key(k))).unwrap();
        tx.send(()).unwrap();
        let (mut s, _) = l.accept_timeout(Some(PATIENCE)).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut h = Digest::new();
        loop {
            let n = s.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            check(&buf[..n], h.len(), 13).unwrap_or_else(|e| panic!("{e}"));
            h.update(&buf[..n]);
        }
        s.write_all(&h.report()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        (l.stats(), s.auth_method(), l.runtime().stats())
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let (refusal, sent_hash, report, method) = a.run(move || {
        // Without the key: refused, with the reason and the remedy.
        let e = EspStream::connect_timeout_with(&ai, bmac, 7300, cfg(AuthSetting::Off), PATIENCE)
            .expect_err("a client without the key must be refused");
        // With the key: authenticated, byte-exact.
        let mut s =
            EspStream::connect_timeout_with(&ai, bmac, 7300, cfg(AuthSetting::Key(key)), PATIENCE)
                .unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        let mut chunk = vec![0u8; 256 * 1024];
        let mut h = Digest::new();
        let mut sent = 0;
        while sent < LEN {
            let n = (LEN - sent).min(chunk.len());
            fill(&mut chunk[..n], sent as u64, 13);
            h.update(&chunk[..n]);
            s.write_all(&chunk[..n]).unwrap();
            sent += n;
        }
        s.shutdown(Shutdown::Write).unwrap();
        let mut report = [0u8; 16];
        s.read_exact(&mut report).unwrap();
        (e, h.hash(), report, s.auth_method())
    });
    assert_eq!(refusal.kind(), ErrorKind::ConnectionRefused, "{refusal}");
    let msg = refusal.to_string();
    assert!(
        msg.contains("requires authentication method siphash-2-4-128")
            && msg.contains("CLUSTERNET_KEY_FILE"),
        "{msg}"
    );
    let (got_len, got_hash) = Digest::parse_report(&report);
    assert_eq!((got_len, got_hash), (LEN as u64, sent_hash), "byte-exact");
    assert_eq!(method, Some(AuthMethod::SIPHASH24_128));
    let (lstats, server_method, rt) = server.join().unwrap();
    assert_eq!(server_method, Some(AuthMethod::SIPHASH24_128));
    assert!(lstats.auth_refused >= 1, "{lstats:?}");
    assert_eq!(lstats.syns_accepted, 1, "{lstats:?}");
    assert!(
        rt.auth.verified > 0 && rt.auth_unverified_delivered >= 1,
        "{rt:?}"
    );
}

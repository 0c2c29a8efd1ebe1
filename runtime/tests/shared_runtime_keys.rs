//! `Runtime::shared` must not hand a socket keyed with one cluster key the
//! runtime of another key: the registry used the config's Debug form, which
//! hides the key (`AuthKey(..)`), so every key shared the first one's
//! runtime. Needs CAP_NET_RAW (a packet socket on `lo`); without root the
//! test prints why and returns, except under CI=true where it fails.

use runtime::auth::{AuthKey, AuthSetting};
use runtime::{LinkConfig, Runtime, RuntimeConfig};

fn config(key: [u8; 16]) -> RuntimeConfig {
    RuntimeConfig {
        link: LinkConfig {
            auth: AuthSetting::Key(AuthKey::new(key)),
            ..LinkConfig::default()
        },
        ..RuntimeConfig::default()
    }
}

#[test]
fn two_keys_never_share_a_runtime() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: this test must run as root (packet socket on lo)"
        );
        eprintln!("SKIP two_keys_never_share_a_runtime: not root (packet socket on lo)");
        return;
    }
    let a = Runtime::shared("lo", &config([1; 16])).expect("runtime with key 1");
    let b = Runtime::shared("lo", &config([2; 16])).expect("runtime with key 2");
    let a2 = Runtime::shared("lo", &config([1; 16])).expect("key 1 again");
    assert!(!a.same(&b), "two cluster keys got one runtime");
    assert!(a.same(&a2), "the same key got two runtimes");
    assert!(a.authenticated() && b.authenticated());
}

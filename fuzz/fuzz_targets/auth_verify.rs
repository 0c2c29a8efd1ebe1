//! Fuzzes frame authentication (`runtime::auth::Verifier::verify`) on
//! arbitrary bytes: no input may panic or pass (a 128-bit tag), and a
//! sealed copy of the input must pass exactly once (a second time is a
//! replay).
#![no_main]

use runtime::auth::{AuthKey, MIN_SEALED_BODY, Refused, Sealer, TRAILER_LEN, Verifier};
use libfuzzer_sys::fuzz_target;

const NOW: u64 = 1_800_000_000_000_000_000;

fuzz_target!(|data: &[u8]| {
    let key = AuthKey::new([0x42; 16]);
    let mut v = Verifier::new(key.clone());
    assert!(v.verify(data, NOW).is_err());
    assert_eq!(v.sources(), 0);
    if data.len() >= 16 {
        let mut buf = data.to_vec();
        buf.resize(data.len().max(MIN_SEALED_BODY) + TRAILER_LEN, 0);
        let n = Sealer::new(key).seal_in_place(&mut buf, data.len(), NOW);
        assert_eq!(v.verify(&buf[..n], NOW), Ok(n - TRAILER_LEN));
        assert_eq!(v.verify(&buf[..n], NOW), Err(Refused::Replayed));
    }
});

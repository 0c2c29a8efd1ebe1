//! Frame authentication: a per-cluster key, a MAC tag and a replay counter
//! on every EDP/ESP/CTP-over-EDP frame a runtime sends, checked on every
//! frame it receives before any socket sees it. Beyond TCP,
//! which has only TCP-AO (RFC 5925) and TCP-MD5: here the whole frame is
//! covered, Ethernet addresses and ethertype included.
//!
//! Wire: the frame as the protocol built it (padded to at least
//! [`MIN_SEALED_BODY`] bytes, so that a NIC's padding to 60 bytes can never
//! land behind the trailer), followed by a [`TRAILER_LEN`]-byte trailer:
//! a 64-bit big-endian counter and a 128-bit SipHash-2-4 tag (the
//! `siphasher` crate) keyed with the cluster key over the frame bytes and
//! the counter.
//!
//! Replay protection (the sliding window of IPsec, RFC 4303 sec. 3.4.3):
//! a sender's counter is the wall clock in ns, forced strictly increasing
//! (one frame per ns is far beyond any link), so it survives process
//! restarts without stored state. The receiver keeps per source (MAC,
//! ethertype, port) the highest counter seen and a bitmap of the
//! [`REPLAY_WINDOW`] below it, and refuses frames older than
//! [`MAX_AGE`] against its own clock. Departure from RFC 4303: the
//! counter is time-based, so the cluster's clocks must agree within
//! [`MAX_AGE`] (NTP does far better); the age bound lets the table forget
//! a source idle beyond it without reopening a replay hole.
//!
//! Every check happens before the frame reaches a socket and every refusal
//! is counted ([`AuthStats`]): forged or replayed frames change no state.
//!
//! The key: 16 bytes, given as 32 hex digits in the environment variable
//! [`KEY_ENV`] or in the file named by [`KEY_FILE_ENV`] (which must not be
//! readable by group or others), never on a command line (visible in
//! `ps`). Every host of the cluster uses the same key; a host without it
//! is not heard, except where a protocol negotiated per connection to
//! accept unauthenticated frames: ESP's handshake (`esp::auth`, the LAM
//! journal's rule, the acceptor's list governs) can bind a connection to
//! method `none`, and the runtime then delivers that connection's frames
//! without a valid tag marked [`TagStatus::Unverified`]. EDP and
//! CTP-over-EDP have no session setup: for them the method is fixed per
//! cluster by this key.

use std::collections::hash_map::Entry;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;
use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher24};

/// Bytes the trailer adds to every frame: counter (8) + tag (16).
pub const TRAILER_LEN: usize = 24;
/// Frames shorter than this (before the trailer) are zero-padded to it, so
/// that sealed frames are at least 60 bytes and never padded on the wire.
pub const MIN_SEALED_BODY: usize = 60 - TRAILER_LEN;
/// Environment variable holding the cluster key (32 hex digits).
pub const KEY_ENV: &str = "CLUSTERNET_KEY";
/// Environment variable naming a file holding the cluster key.
pub const KEY_FILE_ENV: &str = "CLUSTERNET_KEY_FILE";
/// Frames accepted behind the newest of their source (reordering), frames.
pub const REPLAY_WINDOW: u64 = 128;
/// Oldest counter accepted, against the receiver's clock.
pub const MAX_AGE: Duration = Duration::from_secs(30);
/// Most sources with a replay window; beyond, windows older than
/// [`MAX_AGE`] are dropped, and if none is, frames of new sources are
/// refused (counted in `table_full`). Only frames with a valid tag create
/// windows, so only key holders can fill the table.
pub const MAX_SOURCES: usize = 16384;

/// A cluster key (16 bytes). `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthKey([u8; 16]);

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKey(..)")
    }
}

impl AuthKey {
    /// A key from its 16 bytes.
    pub fn new(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// A key from 32 hex digits (surrounding whitespace ignored).
    ///
    /// Errors: `InvalidData` saying what is wrong (not the key).
    pub fn from_hex(s: &str) -> io::Result<Self> {
        let s = s.trim();
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("cluster key: {why}; expected 32 hex digits (16 bytes), e.g. from `openssl rand -hex 16`"),
            )
        };
        if s.len() != 32 {
            return Err(bad(&format!("{} characters", s.len())));
        }
        let mut k = [0u8; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad("not hex"))?;
        }
        Ok(Self(k))
    }

    /// The key in file `path` (32 hex digits).
    ///
    /// Errors: the file cannot be read; `PermissionDenied` when group or
    /// others may read it (`chmod 600`); `InvalidData` as
    /// [`AuthKey::from_hex`].
    pub fn from_file(path: &Path) -> io::Result<Self> {
        let meta = std::fs::metadata(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cluster key file {}: {e}", path.display()),
            )
        })?;
        if meta.mode() & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "cluster key file {} is readable by group or others (mode {:o}): chmod 600 it",
                    path.display(),
                    meta.mode() & 0o777
                ),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cluster key file {}: {e}", path.display()),
            )
        })?;
        Self::from_hex(&text).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cluster key file {}: {e}", path.display()),
            )
        })
    }

    /// The key from the environment: [`KEY_ENV`], else the file named by
    /// [`KEY_FILE_ENV`], else `None` (authentication off).
    ///
    /// Errors: as [`AuthKey::from_hex`] and [`AuthKey::from_file`].
    pub fn from_env() -> io::Result<Option<Self>> {
        if let Some(v) = std::env::var_os(KEY_ENV) {
            let v = v.to_str().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{KEY_ENV} is not UTF-8"),
                )
            })?;
            return Self::from_hex(v).map(Some);
        }
        match std::env::var_os(KEY_FILE_ENV) {
            Some(p) => Self::from_file(Path::new(&p)).map(Some),
            None => Ok(None),
        }
    }

    /// A value that tells keys apart without revealing them: the key's
    /// tag of a fixed string (SipHash-2-4, 128 bits). [`crate::Runtime::shared`]
    /// keys its registry with it, so that two keys never share one runtime;
    /// processes may publish a part of it to find out whether their keys
    /// agree before any frame is sent.
    pub fn fingerprint(&self) -> [u8; 16] {
        self.tag(&[b"clusternet runtime registry"], 0)
    }

    /// Whether `frame` (as received, trailer last) carries this key's valid
    /// tag and a counter no older than [`MAX_AGE`] at wall time `now_ns`:
    /// the checks of [`Verifier::verify`] that need no state (no replay
    /// window is kept or changed). For a link deciding whether an unknown
    /// sender may open the way (`link::UdpAdmission`); the runtime verifies
    /// every frame again.
    pub fn tag_valid(&self, frame: &[u8], now_ns: u64) -> bool {
        if frame.len() < MIN_SEALED_BODY + TRAILER_LEN {
            return false;
        }
        let body = frame.len() - TRAILER_LEN;
        let counter = u64::from_be_bytes(frame[body..body + 8].try_into().expect("8 bytes"));
        self.tag(&[&frame[..body]], counter)[..] == frame[body + 8..]
            && counter >= now_ns.saturating_sub(MAX_AGE.as_nanos() as u64)
    }

    fn tag(&self, pieces: &[&[u8]], counter: u64) -> [u8; 16] {
        let mut h = SipHasher24::new_with_key(&self.0);
        for p in pieces {
            h.write(p);
        }
        h.write(&counter.to_be_bytes());
        h.finish128().as_bytes()
    }
}

/// Nanoseconds since the Unix epoch.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The sending half: builds trailers with strictly increasing counters.
#[derive(Debug, Clone)]
pub struct Sealer {
    key: AuthKey,
    last: u64,
}

impl Sealer {
    /// A sealer for `key`.
    pub fn new(key: AuthKey) -> Self {
        Self { key, last: 0 }
    }

    /// The trailer of the frame made of `pieces` (their concatenation,
    /// already padded to [`MIN_SEALED_BODY`]), sent at wall time `now_ns`.
    pub fn trailer(&mut self, pieces: &[&[u8]], now_ns: u64) -> [u8; TRAILER_LEN] {
        let counter = now_ns.max(self.last + 1);
        self.last = counter;
        let mut t = [0u8; TRAILER_LEN];
        t[..8].copy_from_slice(&counter.to_be_bytes());
        t[8..].copy_from_slice(&self.key.tag(pieces, counter));
        t
    }

    /// Seals the frame in `buf[..len]` in place: pads it to
    /// [`MIN_SEALED_BODY`] and appends the trailer; returns the new length.
    ///
    /// Panics if `buf` has no room for the padding and trailer.
    pub fn seal_in_place(&mut self, buf: &mut [u8], len: usize, now_ns: u64) -> usize {
        let body = len.max(MIN_SEALED_BODY);
        buf[len..body].fill(0);
        let t = self.trailer(&[&buf[..body]], now_ns);
        buf[body..body + TRAILER_LEN].copy_from_slice(&t);
        body + TRAILER_LEN
    }
}

/// Counters of the receiving half.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuthStats {
    /// Frames whose tag and counter passed.
    pub verified: u64,
    /// Frames too short for a trailer.
    pub short: u64,
    /// Frames whose tag did not match (forged, corrupted, other key, no
    /// key): an attacker's frames land here.
    pub bad_tag: u64,
    /// Frames with a valid tag seen before (replays) or behind the window.
    pub replayed: u64,
    /// Frames with a valid tag older than [`MAX_AGE`].
    pub stale: u64,
    /// Frames of new sources refused because the table was full.
    pub table_full: u64,
}

impl AuthStats {
    /// Every refused frame.
    pub fn failures(&self) -> u64 {
        self.short + self.bad_tag + self.replayed + self.stale + self.table_full
    }
}

/// What frame authentication established about a frame handed to a
/// socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TagStatus {
    /// The runtime has no cluster key: nothing was checked.
    #[default]
    Off,
    /// The frame's tag and counter passed ([`Verifier::verify`]).
    Verified,
    /// The runtime has a key and the frame carried no valid tag (none, or
    /// a bad one); it is delivered only to sockets that asked for such
    /// frames (`Socket::accepts_unverified`: an ESP listener, an ESP
    /// connection bound to method `none`), which check it before any state
    /// changes. Already counted in [`AuthStats`] (`short` or `bad_tag`).
    Unverified,
}

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Too short for a trailer.
    Short,
    /// Tag mismatch.
    BadTag,
    /// Seen before, or behind the window.
    Replayed,
    /// Older than [`MAX_AGE`].
    Stale,
    /// No room for a new source.
    TableFull,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    top: u64,
    /// Bit i: counter `top - i` seen.
    seen: u128,
}

/// Source of a frame: MAC, ethertype and port (bytes 6..16).
type SourceKey = [u8; 10];

/// The receiving half: checks tags, counters and age.
#[derive(Debug)]
pub struct Verifier {
    key: AuthKey,
    windows: FxHashMap<SourceKey, Window>,
    max_sources: usize,
    stats: AuthStats,
}

impl Verifier {
    /// A verifier for `key`.
    pub fn new(key: AuthKey) -> Self {
        Self::with_max_sources(key, MAX_SOURCES)
    }

    /// A verifier keeping at most `max` replay windows.
    pub fn with_max_sources(key: AuthKey, max: usize) -> Self {
        Self {
            key,
            windows: FxHashMap::default(),
            max_sources: max.max(1),
            stats: AuthStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> AuthStats {
        self.stats
    }

    /// Sources with a replay window.
    pub fn sources(&self) -> usize {
        self.windows.len()
    }

    /// Checks `frame` (as received, trailer last) at wall time `now_ns`;
    /// returns the length of the frame without its trailer. Nothing is
    /// recorded for a refused frame but its count.
    ///
    /// Errors: [`Refused`], also counted in [`Verifier::stats`].
    pub fn verify(&mut self, frame: &[u8], now_ns: u64) -> Result<usize, Refused> {
        let r = self.check(frame, now_ns);
        match r {
            Ok(_) => self.stats.verified += 1,
            Err(Refused::Short) => self.stats.short += 1,
            Err(Refused::BadTag) => self.stats.bad_tag += 1,
            Err(Refused::Replayed) => self.stats.replayed += 1,
            Err(Refused::Stale) => self.stats.stale += 1,
            Err(Refused::TableFull) => self.stats.table_full += 1,
        }
        r
    }

    fn check(&mut self, frame: &[u8], now_ns: u64) -> Result<usize, Refused> {
        if frame.len() < MIN_SEALED_BODY + TRAILER_LEN {
            return Err(Refused::Short);
        }
        let body = frame.len() - TRAILER_LEN;
        let counter = u64::from_be_bytes(frame[body..body + 8].try_into().expect("8 bytes"));
        let tag = self.key.tag(&[&frame[..body]], counter);
        // Not constant-time: a timing oracle on a 128-bit tag over the
        // network would need ~2^64 tries per byte position on average.
        if tag[..] != frame[body + 8..] {
            return Err(Refused::BadTag);
        }
        let max_age = MAX_AGE.as_nanos() as u64;
        if counter < now_ns.saturating_sub(max_age) {
            return Err(Refused::Stale);
        }
        let src: SourceKey = frame[6..16].try_into().expect("10 bytes");
        if self.windows.len() >= self.max_sources && !self.windows.contains_key(&src) {
            let floor = now_ns.saturating_sub(max_age);
            self.windows.retain(|_, w| w.top >= floor);
            if self.windows.len() >= self.max_sources {
                return Err(Refused::TableFull);
            }
        }
        match self.windows.entry(src) {
            Entry::Vacant(v) => {
                v.insert(Window {
                    top: counter,
                    seen: 1,
                });
            }
            Entry::Occupied(mut o) => {
                let w = o.get_mut();
                if counter > w.top {
                    let shift = counter - w.top;
                    w.seen = if shift >= 128 { 0 } else { w.seen << shift };
                    w.seen |= 1;
                    w.top = counter;
                } else {
                    let back = w.top - counter;
                    if back >= REPLAY_WINDOW || w.seen & (1u128 << back) != 0 {
                        return Err(Refused::Replayed);
                    }
                    w.seen |= 1u128 << back;
                }
            }
        }
        Ok(body)
    }
}

/// Zero bytes for padding short frames before their trailer.
pub(crate) static ZEROS: [u8; MIN_SEALED_BODY] = [0; MIN_SEALED_BODY];

/// Both halves as a runtime holds them, with the trailers of the transmit
/// batch being sent.
#[derive(Debug)]
pub struct FrameAuth {
    /// Sending half.
    pub sealer: Sealer,
    /// Receiving half.
    pub verifier: Verifier,
    /// Per frame of the batch: its padding length and trailer.
    pub(crate) tails: Vec<(usize, [u8; TRAILER_LEN])>,
}

impl FrameAuth {
    /// Both halves for `key`.
    pub fn new(key: AuthKey) -> Self {
        Self {
            sealer: Sealer::new(key.clone()),
            verifier: Verifier::new(key),
            tails: Vec::new(),
        }
    }

    /// Computes the padding and trailer of frame `i` made of `pieces`.
    pub(crate) fn seal_pieces(&mut self, i: usize, pieces: [&[u8]; 3], now_ns: u64) {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        let pad = MIN_SEALED_BODY.saturating_sub(len);
        let t = self
            .sealer
            .trailer(&[pieces[0], pieces[1], pieces[2], &ZEROS[..pad]], now_ns);
        if self.tails.len() <= i {
            self.tails.resize(i + 1, (0, [0; TRAILER_LEN]));
        }
        self.tails[i] = (pad, t);
    }

    /// The padding and trailer of frame `i` (after [`Self::seal_pieces`]).
    pub(crate) fn tail(&self, i: usize) -> (&[u8], &[u8]) {
        let (pad, t) = &self.tails[i];
        (&ZEROS[..*pad], &t[..])
    }
}

/// How a runtime gets its cluster key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AuthSetting {
    /// From the environment ([`AuthKey::from_env`]); off when unset.
    #[default]
    FromEnv,
    /// Off, whatever the environment says.
    Off,
    /// This key.
    Key(AuthKey),
}

impl AuthSetting {
    /// The key in force.
    ///
    /// Errors: those of [`AuthKey::from_env`].
    pub fn resolve(&self) -> io::Result<Option<AuthKey>> {
        match self {
            AuthSetting::FromEnv => AuthKey::from_env(),
            AuthSetting::Off => Ok(None),
            AuthSetting::Key(k) => Ok(Some(k.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000_000_000;

    fn key() -> AuthKey {
        AuthKey::from_hex("000102030405060708090a0b0c0d0e0f").unwrap()
    }

    fn frame(src_mac: u8, port: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 16];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src_mac]);
        f[12..14].copy_from_slice(&0x88b6u16.to_be_bytes());
        f[14..16].copy_from_slice(&port.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn seal(s: &mut Sealer, f: &[u8], now: u64) -> Vec<u8> {
        let mut buf = f.to_vec();
        buf.resize(f.len() + MIN_SEALED_BODY + TRAILER_LEN, 0);
        let n = s.seal_in_place(&mut buf, f.len(), now);
        buf.truncate(n);
        buf
    }

    #[test]
    fn sealed_frames_verify_and_strip_to_their_padded_body() {
        let (mut s, mut v) = (Sealer::new(key()), Verifier::new(key()));
        let f = frame(1, 7, b"hello");
        let sealed = seal(&mut s, &f, NOW);
        assert_eq!(sealed.len(), 60);
        let body = v.verify(&sealed, NOW).unwrap();
        assert_eq!(&sealed[..f.len()], &f[..]);
        assert_eq!(body, MIN_SEALED_BODY);
        let big = frame(1, 7, &[0xab; 1500]);
        let sealed = seal(&mut s, &big, NOW + 5);
        assert_eq!(v.verify(&sealed, NOW + 5), Ok(big.len()));
        assert_eq!(v.stats().verified, 2);
    }

    #[test]
    fn any_changed_bit_or_another_key_fails() {
        let mut s = Sealer::new(key());
        let sealed = seal(&mut s, &frame(1, 7, b"payload bytes"), NOW);
        let mut v = Verifier::new(key());
        for i in 0..sealed.len() {
            let mut f = sealed.clone();
            f[i] ^= 0x10;
            assert_eq!(v.verify(&f, NOW), Err(Refused::BadTag), "byte {i}");
        }
        let mut other = Verifier::new(AuthKey::new([9; 16]));
        assert_eq!(other.verify(&sealed, NOW), Err(Refused::BadTag));
        assert_eq!(v.verify(&sealed[..40], NOW), Err(Refused::Short));
        assert_eq!(v.stats().bad_tag, sealed.len() as u64);
        assert_eq!(v.sources(), 0, "refused frames create no state");
        assert_eq!(v.verify(&sealed, NOW), Ok(MIN_SEALED_BODY));
    }

    #[test]
    fn the_stateless_check_takes_valid_recent_frames_only() {
        let mut s = Sealer::new(key());
        let sealed = seal(&mut s, &frame(1, 7, b"first contact"), NOW);
        assert!(key().tag_valid(&sealed, NOW));
        assert!(key().tag_valid(&sealed, NOW), "no state: again");
        assert!(!AuthKey::new([9; 16]).tag_valid(&sealed, NOW));
        let late = NOW + MAX_AGE.as_nanos() as u64 + 1;
        assert!(!key().tag_valid(&sealed, late));
        let mut bad = sealed.clone();
        bad[20] ^= 1;
        assert!(!key().tag_valid(&bad, NOW));
        assert!(!key().tag_valid(&sealed[..40], NOW));
        // The runtime's verifier still takes it once.
        let mut v = Verifier::new(key());
        assert!(v.verify(&sealed, NOW).is_ok());
    }

    #[test]
    fn replays_and_frames_behind_the_window_are_refused() {
        let (mut s, mut v) = (Sealer::new(key()), Verifier::new(key()));
        let f = frame(1, 7, b"x");
        // The sender's counter increases even when the clock stands still.
        let sealed: Vec<Vec<u8>> = (0..300).map(|_| seal(&mut s, &f, NOW)).collect();
        // Reordered: accepted once each within the window, refused behind.
        assert!(v.verify(&sealed[299], NOW).is_ok());
        for i in (0..299).rev() {
            let want = if 299 - (i as u64) < REPLAY_WINDOW {
                Ok(MIN_SEALED_BODY)
            } else {
                Err(Refused::Replayed)
            };
            assert_eq!(v.verify(&sealed[i], NOW), want, "{i}");
        }
        for i in [299, 250, 200, 0] {
            assert_eq!(v.verify(&sealed[i], NOW), Err(Refused::Replayed), "{i}");
        }
        // Another source has its own window.
        let g = seal(&mut s, &frame(2, 7, b"x"), NOW);
        assert!(v.verify(&g, NOW).is_ok());
        assert_eq!(v.sources(), 2);
    }

    #[test]
    fn old_frames_are_stale_and_the_table_is_bounded() {
        let mut s = Sealer::new(key());
        let mut v = Verifier::with_max_sources(key(), 2);
        let old = seal(&mut s, &frame(1, 1, b"a"), NOW);
        let late = NOW + MAX_AGE.as_nanos() as u64 + 1;
        assert_eq!(v.verify(&old, late), Err(Refused::Stale));
        let a = seal(&mut s, &frame(1, 1, b"a"), NOW);
        let b = seal(&mut s, &frame(2, 1, b"b"), NOW);
        let c = seal(&mut s, &frame(3, 1, b"c"), NOW);
        assert!(v.verify(&a, NOW).is_ok());
        assert!(v.verify(&b, NOW).is_ok());
        assert_eq!(v.verify(&c, NOW), Err(Refused::TableFull));
        // Once the others are older than MAX_AGE their windows go.
        let later = late + 10;
        let c2 = seal(&mut s, &frame(3, 1, b"c"), later);
        assert!(v.verify(&c2, later).is_ok());
        assert_eq!(v.sources(), 1);
        assert_eq!(v.stats().failures(), 2);
    }

    #[test]
    fn keys_parse_from_hex_and_files_must_be_private() {
        assert!(AuthKey::from_hex("00").is_err());
        assert!(AuthKey::from_hex(&"zz".repeat(16)).is_err());
        assert_eq!(format!("{:?}", key()), "AuthKey(..)");
        let dir = std::env::temp_dir().join(format!("cn-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("key");
        std::fs::write(&p, "000102030405060708090a0b0c0d0e0f\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = AuthKey::from_file(&p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(AuthKey::from_file(&p).unwrap(), key());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest::proptest! {
        /// Arbitrary bytes never pass, never panic, and leave no state;
        /// a sealed frame with any one byte changed never passes.
        #[test]
        fn arbitrary_frames_fail_without_state(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            flip in 0usize..200,
        ) {
            let mut v = Verifier::new(key());
            proptest::prop_assert!(v.verify(&bytes, NOW).is_err());
            proptest::prop_assert_eq!(v.sources(), 0);
            let mut s = Sealer::new(key());
            let body = frame(1, 2, &bytes);
            let mut sealed = seal(&mut s, &body, NOW);
            let i = flip % sealed.len();
            sealed[i] ^= 0x01;
            proptest::prop_assert_eq!(v.verify(&sealed, NOW), Err(Refused::BadTag));
        }
    }
}

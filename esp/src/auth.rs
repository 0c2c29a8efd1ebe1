//! Negotiation of a connection's authentication (and, later, encryption)
//! method in ESP's handshake, where the acceptor's list governs: the LAM
//! journal's rule (`../shared/seeds/`): authentication methods
//! first, then encryption methods; both ends must agree or the connection
//! is refused.
//!
//! - The initiator's SYN carries its offered lists in the negotiation
//!   option ([`crate::wire::Nego`], option kind 6, layout in
//!   `esp/PROTOCOL.md`), in its own order of preference.
//! - The listener picks the FIRST method of ITS OWN configured list
//!   ([`AuthPolicy`]) that the initiator offered ([`choose`]); the
//!   initiator's order only breaks no tie. A method that needs a frame tag
//!   counts as offered only when the SYN itself carried a valid tag
//!   ([`TagStatus::Verified`]): an unsealed SYN offering `siphash-2-4-128`
//!   comes from a host with another key, or from a forger.
//! - The SYN-ACK carries the choice (one authentication and one encryption
//!   id). Without a common method the listener answers with an RST that
//!   carries its own lists; the initiator turns it into an explicit error
//!   ([`crate::ConnectionError::AuthRequired`],
//!   [`crate::ConnectionError::AuthUnavailable`],
//!   [`crate::ConnectionError::AuthFailed`]). Refusals are counted
//!   (`ListenerStats::auth_refused`).
//! - A SYN without the option (a client from before negotiation) offers
//!   `none` only: a listener that requires authentication refuses it.
//! - Encryption: the option has an encryption list; the only method is
//!   `none` (id 0), an empty list means `none`. A listener refuses a SYN
//!   whose encryption list lacks `none` (stage 2 of the rule). No cipher is
//!   implemented.
//!
//! Binding: the method chosen binds the connection for its life. Under a
//! method with a tag every later segment must arrive with a valid tag
//! under it; segments without are counted (`Stats::auth_dropped`) and
//! dropped before any state changes (the runtime drops them even earlier,
//! counted in `EngineStats::auth`, unless the connection asked for
//! unverified frames). Under `none` segments are taken with or without a
//! tag (a keyed peer's runtime seals every frame; the trailer is then
//! padding). Exception, as RFC 793's SYN-SENT rules: before the choice, an
//! RST acknowledging our SYN is taken without a tag (an on-path attacker
//! can drop the SYN anyway; the tag does not protect availability), so
//! that a refusal reaches a client whose key the listener lacks.
//!
//! Departures from the journal (lam-mpi-developer-journal.txt, "minime"
//! authentication): there the acceptor sends its list and the connector
//! answers with the index of the first entry it also has; here the
//! initiator's offer rides in the SYN and the listener picks the first of
//! its own list that was offered: the same choice, one round trip fewer
//! (a SYN is all ESP has before state). Methods are 1-byte ids, not string
//! names (frame space; `Display` gives the names). An acceptor with no
//! methods does not pass everyone: `none` is an explicit method, and an
//! empty list is a configuration error ([`AuthPolicy::check`]).
//!
//! The tag itself is frame authentication of the runtime ([`runtime::auth`]:
//! SipHash-2-4-128 over the whole frame with the per-cluster key, a replay
//! counter and window), so method `siphash-2-4-128` needs a runtime with a
//! cluster key. EDP and CTP-over-EDP have no session setup to negotiate
//! in: for them the method is fixed per cluster (the key present or not).

use std::fmt;

pub use runtime::auth::TagStatus;

/// Most methods in one list of the negotiation option.
pub const MAX_METHODS: usize = 8;

/// An authentication method id (one byte on the wire; unknown ids are kept
/// and shown by number, so the list is extensible).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AuthMethod(pub u8);

impl AuthMethod {
    /// No authentication: segments are taken with or without a tag.
    pub const NONE: AuthMethod = AuthMethod(0);
    /// SipHash-2-4 with a 128-bit tag keyed with the per-cluster key
    /// (`runtime::auth`: the 24-byte frame trailer with replay counter).
    pub const SIPHASH24_128: AuthMethod = AuthMethod(1);

    /// Whether segments under this method must carry a valid tag.
    pub fn requires_tag(self) -> bool {
        self != AuthMethod::NONE
    }

    /// Whether this end implements the method.
    pub fn is_known(self) -> bool {
        self == AuthMethod::NONE || self == AuthMethod::SIPHASH24_128
    }
}

impl fmt::Display for AuthMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AuthMethod::NONE => f.write_str("none"),
            AuthMethod::SIPHASH24_128 => f.write_str("siphash-2-4-128"),
            AuthMethod(n) => write!(f, "#{n} (unknown)"),
        }
    }
}

impl fmt::Debug for AuthMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An encryption method id. Only `none` exists; the option carries a list
/// so that ciphers can be added without a new layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EncMethod(pub u8);

impl EncMethod {
    /// No encryption.
    pub const NONE: EncMethod = EncMethod(0);
}

/// A list of up to [`MAX_METHODS`] method ids, in order of preference.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct MethodList {
    len: u8,
    ids: [u8; MAX_METHODS],
}

impl MethodList {
    /// The empty list.
    pub const fn new() -> Self {
        Self {
            len: 0,
            ids: [0; MAX_METHODS],
        }
    }

    /// A list of one id.
    pub const fn one(id: u8) -> Self {
        let mut ids = [0; MAX_METHODS];
        ids[0] = id;
        Self { len: 1, ids }
    }

    /// The list of `ids`; `None` if longer than [`MAX_METHODS`].
    pub fn from_ids(ids: &[u8]) -> Option<Self> {
        let mut l = Self::new();
        for &i in ids {
            if !l.push(i) {
                return None;
            }
        }
        Some(l)
    }

    /// The list of authentication methods `m`; `None` if too long.
    pub fn of(m: &[AuthMethod]) -> Option<Self> {
        let ids: Vec<u8> = m.iter().map(|m| m.0).collect();
        Self::from_ids(&ids)
    }

    /// Appends `id`; false (list unchanged) when full.
    pub fn push(&mut self, id: u8) -> bool {
        if (self.len as usize) < MAX_METHODS {
            self.ids[self.len as usize] = id;
            self.len += 1;
            true
        } else {
            false
        }
    }

    /// The ids.
    pub fn as_slice(&self) -> &[u8] {
        &self.ids[..self.len as usize]
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `id` is in the list.
    pub fn contains(&self, id: u8) -> bool {
        self.as_slice().contains(&id)
    }

    /// The ids as authentication methods.
    pub fn auth_methods(&self) -> impl Iterator<Item = AuthMethod> + '_ {
        self.as_slice().iter().map(|&i| AuthMethod(i))
    }
}

impl fmt::Debug for MethodList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.auth_methods()).finish()
    }
}

/// A connection's authentication policy: the methods this end accepts,
/// in its order of preference (offered in the SYN by an initiator; the
/// governing list of a listener).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthPolicy {
    /// By the runtime's cluster key (`CLUSTERNET_KEY` /
    /// `CLUSTERNET_KEY_FILE`): with a key `[siphash-2-4-128]` (authentication
    /// required: hosts without the key are refused), without `[none]`. The
    /// sans-IO core, which knows no runtime, reads it as `[none]`.
    #[default]
    Cluster,
    /// These methods, in order (e.g. `[siphash-2-4-128, none]`: prefer
    /// authentication, still serve hosts without the key, for a migration).
    Methods(MethodList),
}

impl AuthPolicy {
    /// The list in force for a runtime with (`keyed`) or without a cluster
    /// key.
    pub fn resolve(&self, keyed: bool) -> MethodList {
        match self {
            AuthPolicy::Cluster if keyed => MethodList::one(AuthMethod::SIPHASH24_128.0),
            AuthPolicy::Cluster => MethodList::one(AuthMethod::NONE.0),
            AuthPolicy::Methods(l) => *l,
        }
    }

    /// Checks the policy against a runtime with or without a key.
    ///
    /// Errors: a message saying what to change: an empty list, an unknown
    /// method, or a method with a tag while the runtime has no key.
    pub fn check(&self, keyed: bool) -> Result<MethodList, String> {
        let l = self.resolve(keyed);
        if l.is_empty() {
            return Err("ESP authentication policy: empty method list".into());
        }
        for m in l.auth_methods() {
            if !m.is_known() {
                return Err(format!("ESP authentication policy: method {m} is not implemented (known: none, siphash-2-4-128)"));
            }
            if m.requires_tag() && !keyed {
                return Err(format!(
                    "ESP authentication policy lists method {m} but this runtime has no cluster key: set {} (or {}) to the cluster key, or configure method none",
                    runtime::auth::KEY_FILE_ENV,
                    runtime::auth::KEY_ENV
                ));
            }
        }
        Ok(l)
    }
}

/// The stage of the LAM rule at which negotiation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// No common authentication method.
    Authentication,
    /// No common encryption method.
    Encryption,
}

/// The listener's choice for a SYN that offered `offer_auth` and
/// `offer_enc` (both from the SYN's option; a SYN without the option
/// offers `[none]` and `[none]`), with the SYN's frame `tag`: the first
/// method of `prefs` (the listener's list) that the initiator offered, a
/// method with a tag counting as offered only if the SYN's tag verified;
/// then `none` for encryption.
///
/// Errors: the [`Stage`] at which no common method exists.
pub fn choose(
    prefs: &MethodList,
    offer_auth: &MethodList,
    offer_enc: &MethodList,
    tag: TagStatus,
) -> Result<(AuthMethod, EncMethod), Stage> {
    let auth = prefs
        .auth_methods()
        .find(|m| {
            m.is_known()
                && offer_auth.contains(m.0)
                && (!m.requires_tag() || tag == TagStatus::Verified)
        })
        .ok_or(Stage::Authentication)?;
    if !offer_enc.is_empty() && !offer_enc.contains(EncMethod::NONE.0) {
        return Err(Stage::Encryption);
    }
    Ok((auth, EncMethod::NONE))
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: u8 = AuthMethod::NONE.0;
    const S: u8 = AuthMethod::SIPHASH24_128.0;

    fn l(ids: &[u8]) -> MethodList {
        MethodList::from_ids(ids).unwrap()
    }

    #[test]
    fn the_acceptors_order_governs() {
        let none = l(&[N]);
        let v = TagStatus::Verified;
        assert_eq!(
            choose(&l(&[S, N]), &l(&[N, S]), &none, v),
            Ok((AuthMethod::SIPHASH24_128, EncMethod::NONE))
        );
        assert_eq!(
            choose(&l(&[N, S]), &l(&[S, N]), &none, v),
            Ok((AuthMethod::NONE, EncMethod::NONE))
        );
        // A tagged method counts as offered only with a verified SYN.
        assert_eq!(
            choose(&l(&[S, N]), &l(&[S, N]), &none, TagStatus::Unverified),
            Ok((AuthMethod::NONE, EncMethod::NONE))
        );
        assert_eq!(
            choose(&l(&[S]), &l(&[S]), &none, TagStatus::Unverified),
            Err(Stage::Authentication)
        );
        assert_eq!(
            choose(&l(&[S]), &l(&[N]), &none, v),
            Err(Stage::Authentication)
        );
        // Unknown ids in either list are skipped, never chosen.
        assert_eq!(
            choose(&l(&[9, N]), &l(&[9, N]), &none, v),
            Ok((AuthMethod::NONE, EncMethod::NONE))
        );
        // Encryption: none, or an empty list, or refusal.
        assert!(choose(&l(&[N]), &l(&[N]), &MethodList::new(), v).is_ok());
        assert_eq!(
            choose(&l(&[N]), &l(&[N]), &l(&[7]), v),
            Err(Stage::Encryption)
        );
    }

    #[test]
    fn policies_resolve_by_the_key_and_say_what_is_wrong() {
        assert_eq!(AuthPolicy::Cluster.resolve(true), l(&[S]));
        assert_eq!(AuthPolicy::Cluster.resolve(false), l(&[N]));
        let e = AuthPolicy::Methods(l(&[S, N])).check(false).unwrap_err();
        assert!(e.contains("CLUSTERNET_KEY_FILE"), "{e}");
        assert!(AuthPolicy::Methods(l(&[S, N])).check(true).is_ok());
        assert!(AuthPolicy::Methods(l(&[])).check(true).is_err());
        assert!(AuthPolicy::Methods(l(&[5])).check(true).is_err());
        assert!(MethodList::from_ids(&[0; 9]).is_none());
        assert_eq!(
            format!("{:?}", l(&[S, N, 7])),
            "[siphash-2-4-128, none, #7 (unknown)]"
        );
    }
}

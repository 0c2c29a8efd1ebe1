//! The initiator's side of the handshake (SYN_SENT, RFC 793 sec. 3.4 and
//! 3.9) with the negotiation of the authentication method
//! (`crate::auth`): the SYN's offer, the SYN-ACK's choice, a refusal RST
//! turned into an explicit error.

use std::time::Instant;

use super::{Connection, ConnectionError, State};
use crate::auth::{AuthMethod, EncMethod, MethodList, TagStatus};
use crate::wire::{EspRepr, Nego};

impl Connection {
    /// The negotiation option of this end's SYN (its offer) or SYN-ACK (its
    /// choice).
    pub(super) fn nego_out(&self) -> Nego {
        let auth = match self.auth {
            Some(m) => MethodList::one(m.0),
            None => self.auth_offer,
        };
        Nego {
            auth,
            enc: MethodList::one(EncMethod::NONE.0),
        }
    }

    /// Binds a passively opened connection to the method its listener
    /// chose (`crate::listener`); the SYN-ACK carries it.
    pub(crate) fn bind_auth(&mut self, m: AuthMethod) {
        tracing::debug!(method = %m, "authentication method bound");
        self.auth = Some(m);
    }

    /// The negotiated authentication method (`None` before the SYN-ACK).
    pub fn auth_method(&self) -> Option<AuthMethod> {
        self.auth
    }

    /// Whether segments without a valid frame tag may reach this
    /// connection (the runtime asks, `Socket::accepts_unverified`): in
    /// SYN_SENT (a refusal RST, a SYN-ACK choosing `none` are checked here)
    /// and under method `none`.
    pub fn accepts_unverified(&self) -> bool {
        match self.auth {
            None => self.state == State::SynSent,
            Some(m) => !m.requires_tag(),
        }
    }

    /// The error a refusal RST carrying the listener's lists `peer` means.
    fn refusal(&self, peer: &Nego) -> ConnectionError {
        let common = peer
            .auth
            .auth_methods()
            .find(|m| self.auth_offer.contains(m.0));
        match common {
            // We offered a method the peer accepts: our SYN's tag failed.
            Some(m) if m.requires_tag() => ConnectionError::AuthFailed,
            _ => match peer.auth.auth_methods().find(|m| m.requires_tag()) {
                Some(m) => ConnectionError::AuthRequired(m),
                None => ConnectionError::AuthUnavailable(AuthMethod::NONE),
            },
        }
    }

    /// The method a SYN-ACK chose: its option's single id, or for a peer
    /// without negotiation, the cluster-wide tag when its frame verified
    /// (the runtime-level authentication of before), else `none`.
    fn chosen(&self, repr: &EspRepr, tag: TagStatus) -> Option<AuthMethod> {
        match &repr.nego {
            Some(n) => {
                let enc_ok = n.enc.is_empty() || n.enc.as_slice() == [EncMethod::NONE.0];
                (n.auth.len() == 1 && enc_ok).then(|| AuthMethod(n.auth.as_slice()[0]))
            }
            None if tag == TagStatus::Verified => Some(AuthMethod::SIPHASH24_128),
            None => Some(AuthMethod::NONE),
        }
    }

    pub(super) fn on_syn_sent(&mut self, now: Instant, repr: &EspRepr, tag: TagStatus) {
        let f = repr.flags;
        if f.ack() && repr.ack != self.iss.add(1) {
            // RFC 793 SYN-SENT: unacceptable ACK draws RST seq = SEG.ACK.
            self.stats.dropped += 1;
            if !f.rst() {
                self.rst_pending = repr.reset_reply();
            }
            return;
        }
        if f.rst() {
            // Taken with or without a tag (`crate::auth`: a refusal must
            // reach a client whose key the listener lacks).
            if f.ack() {
                let e = match &repr.nego {
                    Some(n) => self.refusal(n),
                    None => ConnectionError::Refused,
                };
                tracing::debug!(error = %e, "SYN refused");
                self.die(e);
            } else {
                self.stats.dropped += 1;
            }
            return;
        }
        if !f.syn() || !f.ack() {
            // Simultaneous open (SYN without ACK) is not supported: ESP
            // has no cross-connects (thesis ch. 5.2.2).
            self.stats.dropped += 1;
            return;
        }
        let Some(m) = self.chosen(repr, tag) else {
            // A "choice" of several methods: not a valid answer.
            self.stats.auth_dropped += 1;
            self.stats.dropped += 1;
            return;
        };
        if m.requires_tag() && tag != TagStatus::Verified {
            // A choice that needs a tag, on a frame without one: forged,
            // or not our cluster's key. Counted; the SYN is retransmitted.
            self.stats.auth_dropped += 1;
            self.stats.dropped += 1;
            return;
        }
        if !self.auth_offer.contains(m.0) {
            // The peer chose what we did not offer (or, without the
            // option, cannot authenticate): refuse it in turn.
            self.stats.dropped += 1;
            self.rst_pending = repr.reset_reply();
            let e = if m.requires_tag() {
                ConnectionError::AuthRequired(m)
            } else {
                ConnectionError::AuthUnavailable(m)
            };
            tracing::debug!(error = %e, "SYN-ACK refused");
            self.die(e);
            return;
        }
        self.bind_auth(m);
        self.recv.irs = repr.seq;
        self.recv.nxt = repr.seq.add(1);
        self.recv.adv = self.recv.nxt;
        self.snd_wnd.wl1 = repr.seq;
        self.snd_wnd.wl2 = repr.ack;
        self.snd_wnd.wnd = u32::from(repr.window);
        self.snd_wnd.edge = repr.ack.add(self.snd_wnd.wnd);
        self.on_new_ack(now, repr.ack);
        self.set_state(State::Established);
        self.established_once = true;
        self.ack.now = true;
        self.probes.unanswered = 0;
        if self.send.fin_requested {
            self.set_state(State::FinWait1);
        }
    }
}

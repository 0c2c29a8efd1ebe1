//! Reliable multicast without I/O: the MAK algorithm of Shen Jun, Zheng
//! Weimin et al., "A New Reliable Multicast Algorithm on Ethernet" (Journal
//! of Software, 1998; `seeds/mak-reliable-multicast-ethernet-zh.txt`), and
//! the three baselines the paper measures it against (iterative unicast,
//! ACK, NAK), behind one API.
//!
//! One [`Sender`] per stream (a group and a source member) and one
//! [`Receiver`] per member and source. Both are sans-IO, as
//! `esp::conn::Connection` and `ctp::Endpoint`: they take `now` and frames
//! (`handle_frame(now, from, bytes)`, `handle_timeout(now)`) and yield
//! frames (`poll_transmit(now, buf)` with a [`Dest`]: the group or one
//! member), their next deadline (`poll_timeout()`) and events
//! (`poll_event()`); they make no syscall and read no clock. A carrier
//! (EDP to a group MAC, UDP to an IP multicast group, the simulated switch
//! of the tests) only moves datagrams:
//!
//! ```
//! use std::time::Instant;
//! use mak::{Config, Dest, GroupId, Member, MemberId, Receiver, ReceiverEvent, Sender, Seq};
//!
//! let now = Instant::now();
//! let cfg = Config::default();
//! // Member 0 sends to members 1 and 2; addresses are the carrier's (here: u8).
//! let members = vec![Member::new(1, 1u8), Member::new(2, 2u8)];
//! let mut s = Sender::new(cfg.clone(), GroupId(9), MemberId(0), members, Seq(0)).unwrap();
//! let mut r: Vec<Receiver<u8>> = (1..=2)
//!     .map(|i| Receiver::new(cfg.clone(), GroupId(9), MemberId(i), Member::new(0, 0u8), Seq(0), i as u64).unwrap())
//!     .collect();
//! s.send(vec![7u8; 5000]).unwrap();
//! let mut buf = vec![0u8; cfg.mtu];
//! // A lossless carrier: deliver every frame at once.
//! loop {
//!     let mut moved = false;
//!     while let Some(t) = s.poll_transmit(now, &mut buf) {
//!         moved = true;
//!         for (i, rx) in r.iter_mut().enumerate() {
//!             if t.dest == Dest::Group || t.dest == Dest::Member(i as u8 + 1) {
//!                 rx.handle_frame(now, 0, &buf[..t.len]);
//!             }
//!         }
//!     }
//!     for (i, rx) in r.iter_mut().enumerate() {
//!         while let Some(t) = rx.poll_transmit(now, &mut buf) {
//!             moved = true;
//!             s.handle_frame(now, i as u8 + 1, &buf[..t.len]);
//!         }
//!     }
//!     if !moved { break; }
//! }
//! assert!(s.is_idle());
//! for rx in &mut r {
//!     assert!(matches!(rx.poll_event(), Some(ReceiverEvent::Message(m)) if m.data == vec![7u8; 5000]));
//! }
//! ```
//!
//! Wire format and rules: `mak/PROTOCOL.md`. Departures from the paper are
//! documented where they are made ([`Config`] fields, [`sender`],
//! [`receiver`] module docs).
//!
//! Tracing: each [`Sender`], [`Receiver`] and socket member carries a
//! `tracing` span (`mak_sender`, `mak_receiver`, `mak_member`: group, own
//! id, source, carrier) entered by its entry points; events at losses
//! (gaps, NAKs, retransmissions, Tw expiries: debug and trace), silent
//! members and sources (warn) and state changes (trace). Without a
//! subscriber a span costs one branch per call.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod member;
mod reassembly;
pub mod receiver;
pub mod sender;
pub mod socket;
mod stats;
pub mod wire;

pub use config::{Config, ConfigError, MAX_WINDOW};
pub use member::{Addr, Dest, GroupId, Member, MemberId, Transmit};
pub use reassembly::{DropReason, Message, ReceiverEvent};
pub use receiver::{Receiver, ReceiverState, ReceiverStats};
pub use sender::{
    MemberStatus, MembershipError, SendError, Sender, SenderEvent, SenderState, SenderStats,
};
pub use wire::{Seq, Strategy, WireError};

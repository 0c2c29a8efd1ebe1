//! [`MakSocket`]: a member of a reliable multicast group on a real link,
//! with a `std::net`-like API (blocking, nonblocking, timeouts) and
//! `mio::event::Source` readiness, like `edp::EdpSocket` and
//! `ctp::CtpSocket`.
//!
//! Two carriers move the sans-IO cores' frames:
//!
//! - **EDP to a group MAC** ([`EdpCarrier`], [`MakSocket::bind_edp`]): the
//!   member is a slot of the process's I/O runtime for the interface
//!   (`runtime`: one packet socket per process, RX ring, sendmmsg
//!   batches), on the group's EDP port; the runtime joins the group MAC
//!   (`PACKET_ADD_MEMBERSHIP`). DATA and NAKs go to `(group MAC, port)`,
//!   ACKs and iterative DATA to the member's `(MAC, port)`.
//! - **UDP to an IPv4 multicast group** ([`UdpCarrier`],
//!   [`MakSocket::bind_udp`]): one kernel UDP socket bound to the group's
//!   port, `IP_ADD_MEMBERSHIP` on the member's interface,
//!   `IP_MULTICAST_LOOP` off, a TTL; recvmmsg/sendmmsg batches, driven by
//!   the same driver as the runtime (`runtime::driver`).
//!
//! Either way a member may send (one [`Sender`](crate::Sender), to every
//! other member) and follow any number of sources (one
//! [`Receiver`](crate::Receiver) each); frames about its own stream go to
//! its sender, others to the receiver of their source. Membership is
//! configured ([`GroupSpec`]; there is no JOIN exchange on the wire,
//! `PROTOCOL.md` "Membership"), with a name per member so that reports say
//! who: a member that stays silent past the limit is reported to the
//! sender by name ([`MakEvent::MemberSilent`]) and the rest of the group
//! completes.
//!
//! While no caller waits, the runtime's service thread keeps the protocol
//! going (ACKs, NAKs, retransmissions: `runtime::Progress`).
//!
//! ```no_run
//! use mak::socket::{EdpGroup, GroupSpec, MakConfig, MakSocket, Peer};
//! use runtime::EthAddr;
//! # fn main() -> std::io::Result<()> {
//! let port = 7400;
//! let at = |s: &str| s.parse::<EthAddr>().unwrap();
//! let members = vec![
//!     Peer::new(0, at("02:00:00:00:00:01/7400"), "node0"),
//!     Peer::new(1, at("02:00:00:00:00:02/7400"), "node1"),
//! ];
//! // On node1: follow node0's stream.
//! let spec = GroupSpec::new(9, 1, members).receive_from(0);
//! let rx = MakSocket::bind_edp("eth0", EdpGroup::new(9, port), spec, MakConfig::default())?;
//! let m = rx.recv()?;
//! println!("message {} from member {}: {} bytes", m.msg, m.source.0, m.data.len());
//! # Ok(()) }
//! ```

use std::io;
use std::time::{Duration, Instant};

use link::fault::FaultConfig;
use runtime::{Deadline, RuntimeConfig, WaitPolicy};

use crate::member::Addr;
use crate::reassembly::DropReason;
use crate::{Config, GroupId, MemberId, SendError, Seq};

mod core;
mod over_edp;
mod over_udp;

pub use self::core::{CarrierStats, DoneStats, GroupCore, MakStats, MAX_LOST_RECORD};
pub use self::over_edp::{group_mac, EdpCarrier, EdpGroup};
pub use self::over_udp::{UdpCarrier, UdpEngine, UdpGroup, UdpMember, UDP_SOCKET_BUFFER};

/// A member of the group as the sockets know it: its id on the wire, its
/// unicast address on the carrier, and a name for reports (a host name, an
/// MPI rank).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer<A> {
    /// Id in the group.
    pub id: MemberId,
    /// Unicast address: `(MAC, group port)` over EDP, `(IP, group port)`
    /// over UDP.
    pub addr: A,
    /// Name used in reports and logs.
    pub name: String,
}

impl<A> Peer<A> {
    /// Member `id` at `addr`, called `name`.
    pub fn new(id: u16, addr: A, name: impl Into<String>) -> Self {
        Self {
            id: MemberId(id),
            addr,
            name: name.into(),
        }
    }
}

/// Who is in the group and what this member does in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec<A> {
    /// Group id (in every frame).
    pub group: GroupId,
    /// This member's id.
    pub me: MemberId,
    /// Every member, this one included (its entry gives its own address).
    pub members: Vec<Peer<A>>,
    /// Whether this member sends (its stream goes to every other member).
    pub sends: bool,
    /// The members whose streams this member receives.
    pub sources: Vec<MemberId>,
    /// First sequence number of every stream (the same at every member).
    pub start: Seq,
}

impl<A: Addr> GroupSpec<A> {
    /// Member `me` of group `group` with `members`; neither sending nor
    /// receiving yet (see [`GroupSpec::sender`], [`GroupSpec::receive_from`]).
    pub fn new(group: u16, me: u16, members: Vec<Peer<A>>) -> Self {
        Self {
            group: GroupId(group),
            me: MemberId(me),
            members,
            sends: false,
            sources: Vec::new(),
            start: Seq(0),
        }
    }

    /// This member sends to every other member.
    pub fn sender(mut self) -> Self {
        self.sends = true;
        self
    }

    /// This member follows the stream of `source`.
    pub fn receive_from(mut self, source: u16) -> Self {
        self.sources.push(MemberId(source));
        self
    }

    /// The member with id `id`.
    pub fn peer(&self, id: MemberId) -> Option<&Peer<A>> {
        self.members.iter().find(|p| p.id == id)
    }

    /// This member's own entry.
    pub fn me_peer(&self) -> Option<&Peer<A>> {
        self.peer(self.me)
    }

    /// Checks the spec.
    ///
    /// Errors: `InvalidInput` naming the problem: duplicate member ids,
    /// `me` not among the members, an unknown or self source, a member
    /// that neither sends nor receives, a sender alone in its group.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        for (i, p) in self.members.iter().enumerate() {
            if self.members[..i].iter().any(|o| o.id == p.id) {
                return bad(format!(
                    "MAK group {}: member id {} listed twice",
                    self.group.0, p.id.0
                ));
            }
        }
        if self.me_peer().is_none() {
            return bad(format!(
                "MAK group {}: this member's id {} is not among the members",
                self.group.0, self.me.0
            ));
        }
        for (i, s) in self.sources.iter().enumerate() {
            if *s == self.me {
                return bad(format!(
                    "MAK group {}: member {} cannot follow its own stream",
                    self.group.0, s.0
                ));
            }
            if self.peer(*s).is_none() {
                return bad(format!(
                    "MAK group {}: source {} is not a member",
                    self.group.0, s.0
                ));
            }
            if self.sources[..i].contains(s) {
                return bad(format!(
                    "MAK group {}: source {} listed twice",
                    self.group.0, s.0
                ));
            }
        }
        if !self.sends && self.sources.is_empty() {
            return bad(format!(
                "MAK group {}: member {} neither sends nor follows a source (use .sender() or .receive_from(id))",
                self.group.0, self.me.0
            ));
        }
        if self.sends && self.members.len() < 2 {
            return bad(format!(
                "MAK group {}: a sender needs at least one other member",
                self.group.0
            ));
        }
        Ok(())
    }
}

/// A message delivered from the group: exactly once, in order per source,
/// byte-exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMessage {
    /// The source member.
    pub source: MemberId,
    /// The id its `send` returned.
    pub msg: u32,
    /// The message.
    pub data: Vec<u8>,
}

/// Something a member reports: a message, or news about a member or a
/// stream (members named by their [`Peer`] entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MakEvent<A> {
    /// A message.
    Message(GroupMessage),
    /// Sender side: `member` let K ACK timeouts (and `min_silence`) pass
    /// without acknowledging; the rest of the group goes on without it.
    MemberSilent {
        /// Who.
        member: Peer<A>,
        /// The last packet it acknowledged.
        acked: Seq,
    },
    /// Receiver side: `source`'s missing packets never came (K NAK rounds
    /// and `min_silence`): it seems dead.
    SourceSilent {
        /// Who.
        source: Peer<A>,
        /// The first packet still missing.
        first_missing: Seq,
    },
    /// Receiver side: `source` freed packets this member never got (it
    /// declared this member silent); its stream ends here for this member.
    Abandoned {
        /// Who.
        source: Peer<A>,
        /// The first packet this member lacks.
        first_missing: Seq,
    },
    /// Receiver side: a message of `source` that will not be delivered.
    MessageDropped {
        /// Who sent it.
        source: Peer<A>,
        /// Message id.
        msg: u32,
        /// Announced length, bytes.
        len: u32,
        /// Why.
        reason: DropReason,
    },
}

impl<A: Addr> MakEvent<A> {
    /// The report as an `io::Error` (what `recv` returns for it): kind
    /// `ConnectionAborted` for a silent or abandoning source, `InvalidData`
    /// for a dropped message, `Other` otherwise; the message names the
    /// member.
    pub fn into_error(self) -> io::Error {
        match self {
            MakEvent::SourceSilent { source, first_missing } => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "MAK source {} (member {}, {:?}) is silent: packet {} never came after K NAK rounds",
                    source.name, source.id.0, source.addr, first_missing
                ),
            ),
            MakEvent::Abandoned { source, first_missing } => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "MAK source {} (member {}) went on without this member (it declared us silent): \
                     packet {} and later are lost to us",
                    source.name, source.id.0, first_missing
                ),
            ),
            MakEvent::MessageDropped { source, msg, len, reason } => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "MAK message {msg} ({len} bytes) from {} (member {}) dropped: {reason:?}",
                    source.name, source.id.0
                ),
            ),
            MakEvent::MemberSilent { member, acked } => io::Error::other(format!(
                "MAK member {} (member {}, {:?}) is silent (last acknowledged packet {acked})",
                member.name, member.id.0, member.addr
            )),
            MakEvent::Message(m) => io::Error::other(format!(
                "MAK message {} from member {} is not an error",
                m.msg, m.source.0
            )),
        }
    }
}

/// Options of a [`MakSocket`].
#[derive(Debug, Clone, PartialEq)]
pub struct MakConfig {
    /// Protocol tunables (strategy, window, timers, buffers). Its `mtu` is
    /// set by the carrier (see `frame`).
    pub protocol: Config,
    /// Largest MAK frame, bytes; `None` = what the carrier carries (EDP:
    /// link MTU - 6; UDP over IPv4: interface MTU - 28). Larger values are
    /// refused.
    pub frame: Option<usize>,
    /// How blocking calls wait (busy-poll, blocking, adaptive).
    pub wait: WaitPolicy,
    /// EDP: the runtime the member joins (link options, send-side faults,
    /// progress). UDP: its `progress` only.
    pub runtime: RuntimeConfig,
    /// Seed of the receivers' random NAK delays; `None` = from the OS.
    pub seed: Option<u64>,
    /// How long `send` waits (driving the protocol) for room in a full
    /// send buffer before failing with `TimedOut`; `None` = without limit.
    /// Default 60 s. A write timeout set on the socket takes precedence.
    pub send_timeout: Option<Duration>,
    /// Faults on this member's own link, independent of every other
    /// member's (a receiver's link in the paper's bus, its veth in a
    /// virtual cluster): loss and burst loss in both directions, duplication
    /// of received frames, each direction with its own generator seeded
    /// from `seed`. Delay, reordering and rate limits are refused here (put
    /// them in the EDP runtime's `LinkConfig::fault`, which applies to the
    /// frames the runtime sends); corruption is refused (MAK frames carry
    /// no checksum: the Ethernet FCS turns corruption into loss).
    pub link_fault: Option<FaultConfig>,
    /// UDP: multicast TTL (1 = the local network). Default 1.
    pub udp_ttl: u32,
}

impl Default for MakConfig {
    fn default() -> Self {
        Self {
            protocol: Config::default(),
            frame: None,
            wait: WaitPolicy::DEFAULT,
            runtime: RuntimeConfig::default(),
            seed: None,
            send_timeout: Some(Duration::from_secs(60)),
            link_fault: None,
            udp_ttl: 1,
        }
    }
}

impl MakConfig {
    /// This configuration with strategy `s`.
    pub fn with_strategy(mut self, s: crate::Strategy) -> Self {
        self.protocol.strategy = s;
        self
    }

    /// The protocol configuration for a carrier moving `carrier_max`-byte
    /// frames.
    ///
    /// Errors: `InvalidInput` when `frame` exceeds what the carrier moves.
    pub(crate) fn protocol_for(&self, carrier_max: usize, carrier: &str) -> io::Result<Config> {
        let frame = self.frame.unwrap_or(carrier_max);
        if frame > carrier_max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MAK frame of {frame} bytes exceeds what {carrier} carries ({carrier_max} bytes)"),
            ));
        }
        let mut p = self.protocol.clone();
        p.mtu = frame.min(crate::wire::MAX_FRAME_LEN);
        p.validate().map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MAK configuration: {e}"),
            )
        })?;
        Ok(p)
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(rand::random)
    }
}

/// What carries a member's frames: the runtime's
/// [`Carrier`](runtime::protocol::Carrier) (the engine holding the member, its
/// slot, `touched`, `release`) with a [`GroupCore`] for core. Implemented
/// by every such carrier.
pub trait Carrier:
    runtime::protocol::Carrier<Core = GroupCore<<Self as runtime::protocol::Carrier>::Addr>>
{
}

impl<T> Carrier for T where
    T: runtime::protocol::Carrier<Core = GroupCore<<T as runtime::protocol::Carrier>::Addr>>
{
}

/// A member of a reliable multicast group. See the module documentation.
pub struct MakSocket<C: Carrier> {
    carrier: C,
    name: String,
    nonblocking: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    send_timeout: Option<Duration>,
    wait: WaitPolicy,
}

impl<C: Carrier> std::fmt::Debug for MakSocket<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MakSocket")
            .field("local", &self.name)
            .field("nonblocking", &self.nonblocking)
            .field("wait", &self.wait)
            .finish()
    }
}

impl<C: Carrier> MakSocket<C> {
    fn wrap(carrier: C, cfg: &MakConfig) -> Self {
        Self {
            name: carrier.local_name(),
            carrier,
            nonblocking: false,
            read_timeout: None,
            write_timeout: None,
            send_timeout: cfg.send_timeout,
            wait: cfg.wait,
        }
    }

    /// Human-readable local address (carrier, interface, address, group).
    pub fn local_name(&self) -> &str {
        &self.name
    }

    /// The carrier (runtime, UDP socket address).
    pub fn carrier(&self) -> &C {
        &self.carrier
    }

    /// Runs `f` on the member, then sends what it queued.
    pub fn with_core<R>(&self, f: impl FnOnce(&mut GroupCore<C::Addr>, Instant) -> R) -> R {
        let slot = self.carrier.slot();
        self.carrier.driver().with(|e, now| {
            let c = C::core(e, slot).expect("a MAK socket's member lives as long as the socket");
            let r = f(c, now);
            let _ = C::touched(e, slot, now);
            r
        })
    }

    /// Nonblocking mode: `send`, `recv` and `next_event` return
    /// `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&mut self, nonblocking: bool) {
        self.nonblocking = nonblocking;
    }

    /// How blocking calls wait.
    pub fn set_wait_policy(&mut self, wait: WaitPolicy) {
        self.wait = wait;
    }

    /// Longest a blocking `recv`/`next_event` waits (`None` = forever).
    ///
    /// Errors: `InvalidInput` for zero (as `std::net`).
    pub fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.read_timeout = edp::socket::checked_timeout(t, "read")?;
        Ok(())
    }

    /// Longest a blocking `send` waits for room in the send buffer
    /// (`None` = the configuration's `send_timeout`).
    ///
    /// Errors: `InvalidInput` for zero.
    pub fn set_write_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.write_timeout = edp::socket::checked_timeout(t, "write")?;
        Ok(())
    }

    fn read_deadline(&self) -> Deadline {
        if self.nonblocking {
            Deadline::Now
        } else {
            Deadline::after(Instant::now(), self.read_timeout)
        }
    }

    /// Drives the engine until `check` on the member returns a value.
    fn wait<R>(
        &self,
        deadline: Deadline,
        what: &str,
        mut check: impl FnMut(&mut GroupCore<C::Addr>) -> Option<R>,
    ) -> io::Result<R> {
        let slot = self.carrier.slot();
        let what = format!("MAK {what} on {}", self.name);
        let r = self
            .carrier
            .driver()
            .wait(slot, self.wait, deadline, None, &what, |e, _| {
                let c = C::core(e, slot).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotConnected, "MAK member gone")
                })?;
                let r = check(c);
                if r.is_some() {
                    // Reading may free receive buffer: held packets are
                    // consumed and acknowledged.
                    C::touched(e, slot, Instant::now())?;
                }
                Ok(r)
            });
        if let Err(e) = &r {
            if e.kind() == io::ErrorKind::WouldBlock {
                self.carrier.driver().rearm_slot(slot);
            }
        }
        r
    }

    /// Sends `data` to every other member (copied). Returns the message id
    /// the receivers' [`GroupMessage::msg`] carries. When the send buffer
    /// is full it drives the protocol until acknowledgements make room.
    ///
    /// Errors: `InvalidInput` when this member does not send or the
    /// message exceeds `max_message_bytes`; `NotConnected` when every
    /// member was declared silent or removed; `WouldBlock` (nonblocking)
    /// or `TimedOut` (after the write timeout) while the buffer stays
    /// full; link errors.
    pub fn send(&self, data: &[u8]) -> io::Result<u32> {
        self.send_vec(data.to_vec())
    }

    /// As [`MakSocket::send`], without copying `data`.
    pub fn send_vec(&self, data: Vec<u8>) -> io::Result<u32> {
        let len = data.len();
        let mut data = Some(data);
        let mut attempt = |c: &mut GroupCore<C::Addr>| -> Option<io::Result<u32>> {
            if !c.sends() {
                return Some(Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "MAK member {} of group {} does not send (GroupSpec::sender)",
                        c.me().0,
                        c.group().0
                    ),
                )));
            }
            if !c.has_room(len) {
                return None;
            }
            let r = c.send(data.take().expect("sent once")).expect("a sender");
            Some(r.map_err(|e| send_error(e, c)))
        };
        let slot = self.carrier.slot();
        if let Some(r) = self.carrier.driver().with(|e, now| {
            let c = C::core(e, slot)?;
            let r = attempt(c)?;
            let _ = C::touched(e, slot, now);
            Some(r)
        }) {
            return r;
        }
        let deadline = if self.nonblocking {
            Deadline::Now
        } else {
            Deadline::after(Instant::now(), self.write_timeout.or(self.send_timeout))
        };
        match self.wait(deadline, "send", |c| c.has_room(len).then_some(())) {
            Ok(()) => self.with_core(|c, _| attempt(c).expect("room checked under the lock")),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "MAK send on {}: the send buffer stayed full (a member is slow or silent)",
                    self.name
                ),
            )),
            Err(e) => Err(e),
        }
    }

    /// Receives the next message from any source followed (round-robin
    /// between sources), driving the protocol while it waits.
    ///
    /// Errors: a report about a source's stream, consumed and returned as
    /// an error naming the source ([`MakEvent::into_error`]:
    /// `ConnectionAborted` for a silent or abandoning source,
    /// `InvalidData` for a dropped message); `WouldBlock`; `TimedOut`
    /// after the read timeout; link errors. Sender reports
    /// ([`MakEvent::MemberSilent`]) are left for [`MakSocket::next_event`].
    pub fn recv(&self) -> io::Result<GroupMessage> {
        self.wait(self.read_deadline(), "receive", |c| c.pop_received())?
            .map_err(MakEvent::into_error)
    }

    /// The next event of any kind: sender reports first, then messages and
    /// reports about the sources' streams.
    ///
    /// Errors: `WouldBlock`; `TimedOut`; link errors.
    pub fn next_event(&self) -> io::Result<MakEvent<C::Addr>> {
        self.wait(self.read_deadline(), "event", |c| c.pop_event())
    }

    /// Drives the protocol until every message sent left the window
    /// (acknowledged by every member still in the group, or by none left)
    /// or `timeout` passes; returns whether it did. A member that does not
    /// send is always flushed.
    ///
    /// Errors: link errors.
    pub fn flush(&self, timeout: Option<Duration>) -> io::Result<bool> {
        match self.wait(Deadline::after(Instant::now(), timeout), "flush", |c| {
            c.is_idle().then_some(())
        }) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Drives the protocol for `timeout` (receiving, acknowledging,
    /// retransmitting).
    ///
    /// Errors: link errors.
    pub fn poll(&self, timeout: Duration) -> io::Result<()> {
        match self.wait(
            Deadline::after(Instant::now(), Some(timeout)),
            "poll",
            |_| None::<()>,
        ) {
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(()),
            r => r,
        }
    }

    /// Stops waiting for member `id` (it left the group); returns its entry
    /// if it was an active member of this member's stream.
    pub fn remove_member(&self, id: u16) -> Option<Peer<C::Addr>> {
        self.with_core(|c, now| c.remove_member(now, MemberId(id)))
    }

    /// The members this member's sender declared silent.
    pub fn silent_members(&self) -> Vec<Peer<C::Addr>> {
        self.with_core(|c, _| c.silent())
    }

    /// Every counter.
    pub fn stats(&self) -> MakStats {
        self.with_core(|c, _| c.stats())
    }
}

/// A core send error as an `io::Error`.
fn send_error<A: Addr>(e: SendError, c: &GroupCore<A>) -> io::Error {
    let kind = match e {
        SendError::TooLarge { .. } => io::ErrorKind::InvalidInput,
        SendError::Full { .. } => io::ErrorKind::WouldBlock,
        SendError::NoMembers => io::ErrorKind::NotConnected,
    };
    let silent: Vec<String> = c.silent().into_iter().map(|p| p.name).collect();
    let detail = if silent.is_empty() {
        String::new()
    } else {
        format!(" (silent: {})", silent.join(", "))
    };
    io::Error::new(kind, format!("MAK group {}: {e}{detail}", c.group().0))
}

impl<C: Carrier> Drop for MakSocket<C> {
    fn drop(&mut self) {
        self.carrier.release();
    }
}

impl<C: Carrier> mio::event::Source for MakSocket<C> {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.carrier
            .driver()
            .register(self.carrier.slot(), registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.carrier
            .driver()
            .reregister(self.carrier.slot(), registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        self.carrier
            .driver()
            .deregister(self.carrier.slot(), registry)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

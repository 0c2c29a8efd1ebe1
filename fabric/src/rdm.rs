//! The FI_EP_RDM endpoint (fi_endpoint(3), fi_tagged(3), fi_msg(3)):
//! reliable tagged messages of any size on `comm`'s tagged core
//! ([`comm::tagged::TaggedEndpoint`]) over a CTP socket on EDP (packet
//! link) or on a UDP link.
//!
//! What the core gives is used as it is: 64-bit tags with ignore masks,
//! source-directed and source-less receives, MPI's per-peer order
//! (FI_ORDER_SAS), 8 bytes of remote CQ data, peek / claim / discard,
//! cancel, truncation, flow control and failure detection, a bounded
//! completion queue, one wait path; the runtime's service thread keeps it
//! going while nobody calls (FI_PROGRESS_AUTO), and reading a CQ gives
//! the endpoint one turn (FI_PROGRESS_MANUAL). This module maps
//! libfabric's side onto it:
//!
//! - `fi_addr_t` (the address vector's index) to the core's peer id and
//!   back (FI_SOURCE): the endpoint subscribes to its address vector and
//!   inserts each name into the core (and, over a UDP link, into the
//!   link's peer table);
//! - connectionless receives (libfabric's rxm, `util_get_peer`): a sender
//!   not in the address vector becomes a peer of the core on first
//!   contact (bounded by `FI_CLUSTERNET_MAX_PEERS`), its completions
//!   report `FI_ADDR_NOTAVAIL`, or with `FI_SOURCE_ERR` an error entry
//!   `FI_EADDRNOTAVAIL` whose `err_data` is its name (fi_cq(3)); a later
//!   `fi_av_insert` of that name binds to the same peer;
//! - the core's completions into the bound CQs, never more than they have
//!   room for (so the core's queue, bounded, pushes back: FI_EAGAIN);
//! - FI_MSG on the same endpoint: untagged messages travel with tag bit 63
//!   set, which `mem_tag_format` reserves (a departure from providers that
//!   keep two queues: one matching engine serves both);
//! - FI_SELECTIVE_COMPLETION: sends without FI_COMPLETION go as injects
//!   (no completion); receives without it complete silently unless they
//!   fail.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

use comm::tagged::{OpKind, PeekMode, TaggedConfig, TaggedEndpoint};
use comm::{PeerId, RecvBuf, SendBuf, TaggedCompletion};
use ctp::EdpTransport;

use crate::addr::{Name, NameInfo, UDP_LINK_PORT};
use crate::av::{Av, PeerSink, FI_ADDR_NOTAVAIL};
use crate::cq::{Completion, Cq, CqSource, Entry, ErrCompletion};
use crate::error::{op_error, FiError, FiResult};
use crate::fi;
use crate::limits::MSG_TAG;
use crate::link::{add_udp_peer, CtpCarrier};

/// How long `fi_close` waits for the endpoint's sent messages to be
/// confirmed before the socket goes (a peer that died costs this much).
pub const FLUSH_ON_CLOSE: Duration = Duration::from_secs(2);

/// How an operation completes (`fi_send`/`fi_tsend`: the endpoint's op
/// flags; `fi_*msg`: the call's flags; `fi_*inject`: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpFlags {
    /// The endpoint's default op flags.
    Default,
    /// These flags.
    Flags(u64),
    /// No completion (inject).
    Inject,
}

#[derive(Default)]
struct PeerMap {
    /// fi_addr -> peer id.
    to_peer: Vec<Option<PeerId>>,
    /// peer id -> fi_addr.
    to_addr: Vec<u64>,
}

#[derive(Default)]
struct Binding {
    av: Option<Arc<Av>>,
    tx_cq: Option<(Arc<Cq>, bool)>,
    rx_cq: Option<(Arc<Cq>, bool)>,
}

struct Bound {
    tx_cq: Arc<Cq>,
    rx_cq: Arc<Cq>,
    tx_selective: bool,
    rx_selective: bool,
}

/// An FI_EP_RDM endpoint. See the module documentation.
pub struct RdmEp {
    name: Name,
    /// What its name tells (fi_getname).
    info: NameInfo,
    core: TaggedEndpoint<EdpTransport>,
    /// Over a UDP link: its peer table.
    link_peers: Option<Arc<link::UdpPeers>>,
    /// FI_SOURCE_ERR: a receive from a sender not in the address vector
    /// completes with FI_EADDRNOTAVAIL and the sender's name.
    source_err: bool,
    /// FI_DIRECTED_RECV: a receive's source address selects the sender;
    /// without it the address is ignored (fi_tagged(3)).
    directed: bool,
    map: RwLock<PeerMap>,
    binding: Mutex<Binding>,
    bound: OnceLock<Bound>,
    tx_op_flags: u64,
    rx_op_flags: u64,
    scratch: Mutex<Vec<TaggedCompletion>>,
    /// Receives whose success makes no completion (selective completion).
    quiet: Mutex<HashSet<u64>>,
    any_quiet: AtomicBool,
}

impl std::fmt::Debug for RdmEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmEp")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RdmEp {
    /// An endpoint on `carrier` with the core's tunables `cfg` (its
    /// `max_message_bytes` bounds a message), whose name tells `info`,
    /// with the capabilities `caps` (FI_SOURCE_ERR) and the default op
    /// flags of its fi_info.
    ///
    /// Errors: those of `TaggedEndpoint::new` (FI_EINVAL).
    pub fn new(
        carrier: CtpCarrier,
        cfg: TaggedConfig,
        info: NameInfo,
        caps: u64,
        tx_op_flags: u64,
        rx_op_flags: u64,
    ) -> FiResult<Arc<RdmEp>> {
        let CtpCarrier { sock, name, peers } = carrier;
        let core = TaggedEndpoint::new(sock, name.wire(), cfg)?;
        Ok(Arc::new(RdmEp {
            name,
            info,
            core,
            link_peers: peers,
            source_err: caps & fi::FI_SOURCE_ERR != 0,
            directed: caps & fi::FI_DIRECTED_RECV != 0,
            map: RwLock::new(PeerMap::default()),
            binding: Mutex::new(Binding::default()),
            bound: OnceLock::new(),
            tx_op_flags,
            rx_op_flags,
            scratch: Mutex::new(Vec::new()),
            quiet: Mutex::new(HashSet::new()),
            any_quiet: AtomicBool::new(false),
        }))
    }

    /// The endpoint's name as `fi_getname` gives it, telling its link MTU
    /// and cluster key.
    pub fn name_bytes(&self) -> Vec<u8> {
        self.name.encode_with(&self.info)
    }

    /// The name of the peer whose frames come from `wire`: over a UDP
    /// link the address the link knows for its MAC.
    fn name_of(&self, wire: runtime::EthAddr) -> Option<Name> {
        match &self.link_peers {
            None => Some(Name::Edp {
                mac: wire.mac,
                port: wire.port,
            }),
            Some(p) if wire.port == UDP_LINK_PORT => match p.lookup(wire.mac)? {
                std::net::SocketAddr::V4(a) => Some(Name::Udp(a)),
                std::net::SocketAddr::V6(_) => None,
            },
            Some(_) => None,
        }
    }

    fn binding(&self) -> std::sync::MutexGuard<'_, Binding> {
        self.binding.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Binds the address vector: its names, present and future, become the
    /// core's peers.
    ///
    /// Errors: `FI_EINVAL` when one is bound already, for another address
    /// format, or when the core refuses a name (its peer table is full).
    pub fn bind_av(self: &Arc<Self>, av: Arc<Av>) -> FiResult<()> {
        if av.format != self.name.format() {
            return Err(FiError::inval("address vector of another address format"));
        }
        let mut b = self.binding();
        if b.av.is_some() {
            return Err(FiError::inval("an address vector is bound already"));
        }
        let me: Weak<dyn PeerSink> = Arc::downgrade(self) as Weak<dyn PeerSink>;
        for (a, n, i) in av.subscribe(me) {
            self.peer_added(a, &n, &i)?;
        }
        b.av = Some(av);
        Ok(())
    }

    /// Binds `cq` for the directions in `flags` (FI_TRANSMIT, FI_RECV,
    /// FI_SELECTIVE_COMPLETION).
    ///
    /// Errors: `FI_EINVAL` when a direction has a CQ already, when none is
    /// named, or after fi_enable.
    pub fn bind_cq(self: &Arc<Self>, cq: Arc<Cq>, flags: u64) -> FiResult<()> {
        let (tx, rx) = (flags & fi::FI_TRANSMIT != 0, flags & fi::FI_RECV != 0);
        if !tx && !rx {
            return Err(FiError::inval(
                "fi_ep_bind of a CQ needs FI_TRANSMIT and/or FI_RECV",
            ));
        }
        if self.bound.get().is_some() {
            return Err(FiError::inval("fi_ep_bind after fi_enable"));
        }
        let sel = flags & fi::FI_SELECTIVE_COMPLETION != 0;
        let mut b = self.binding();
        if (tx && b.tx_cq.is_some()) || (rx && b.rx_cq.is_some()) {
            return Err(FiError::inval("a CQ is bound for that direction already"));
        }
        if tx {
            b.tx_cq = Some((cq.clone(), sel));
        }
        if rx {
            b.rx_cq = Some((cq.clone(), sel));
        }
        drop(b);
        let me: Weak<dyn CqSource> = Arc::downgrade(self) as Weak<dyn CqSource>;
        cq.add_source(me);
        Ok(())
    }

    /// fi_enable.
    ///
    /// Errors: `FI_ENOCQ` / `FI_ENOAV` when a CQ or the address vector is
    /// missing.
    pub fn enable(&self) -> FiResult<()> {
        let b = self.binding();
        let (Some((tx, txs)), Some((rx, rxs))) = (&b.tx_cq, &b.rx_cq) else {
            return Err(FiError::new(
                fi::FI_ENOCQ,
                "bind a CQ for FI_TRANSMIT and FI_RECV before fi_enable",
            ));
        };
        if b.av.is_none() {
            return Err(FiError::new(
                fi::FI_ENOAV,
                "bind an address vector before fi_enable",
            ));
        }
        let _ = self.bound.set(Bound {
            tx_cq: tx.clone(),
            rx_cq: rx.clone(),
            tx_selective: *txs,
            rx_selective: *rxs,
        });
        Ok(())
    }

    fn bound(&self) -> FiResult<&Bound> {
        self.bound
            .get()
            .ok_or_else(|| FiError::new(fi::FI_EOPBADSTATE, "operation before fi_enable"))
    }

    /// The core's peer for `addr`.
    fn peer(&self, addr: u64) -> FiResult<PeerId> {
        let m = self.map.read().unwrap_or_else(|p| p.into_inner());
        m.to_peer
            .get(addr as usize)
            .copied()
            .flatten()
            .ok_or_else(|| FiError::inval(format!("fi_addr {addr} is not in the address vector")))
    }

    /// The source of a receive: any for FI_ADDR_UNSPEC, and any whatever
    /// the address without FI_DIRECTED_RECV.
    fn source(&self, addr: u64) -> FiResult<Option<PeerId>> {
        if addr == FI_ADDR_NOTAVAIL || !self.directed {
            return Ok(None);
        }
        self.peer(addr).map(Some)
    }

    /// Sends `data` to `dest` with `tag` and optional remote CQ data
    /// (fi_tsend, fi_tsenddata, fi_tinject, fi_send ...).
    ///
    /// Errors: `FI_EAGAIN` when a queue is full (progress and retry);
    /// `FI_EINVAL` for an address not in the vector or a tag with the
    /// reserved bit; `FI_EMSGSIZE`; `FI_EHOSTUNREACH` for a failed peer.
    pub fn send(
        &self,
        data: &[u8],
        dest: u64,
        tag: u64,
        cq_data: Option<u64>,
        context: u64,
        flags: OpFlags,
    ) -> FiResult<()> {
        let b = self.bound()?;
        let completion = match flags {
            OpFlags::Inject => false,
            OpFlags::Default => !b.tx_selective || self.tx_op_flags & fi::FI_COMPLETION != 0,
            // FI_INJECT only frees the buffer at return, which every send
            // of this provider does (the data is copied).
            OpFlags::Flags(f) => !b.tx_selective || f & fi::FI_COMPLETION != 0,
        };
        let peer = self.peer(dest)?;
        self.core
            .send(peer, tag, data, cq_data, context, completion)?;
        Ok(())
    }

    /// As [`RdmEp::send`], keeping `buf`, the application's buffer (valid
    /// until the send completes), when the send makes a completion: a
    /// message longer than the core's eager limit is then pulled by its
    /// receiver straight from it, without a copy, and completes when the
    /// receiver has it. Injects (and sends without a completion, whose
    /// buffer the application may reuse at once) are copied.
    ///
    /// Errors: as [`RdmEp::send`].
    pub fn send_buf(
        &self,
        buf: impl SendBuf,
        dest: u64,
        tag: u64,
        cq_data: Option<u64>,
        context: u64,
        flags: OpFlags,
    ) -> FiResult<()> {
        let b = self.bound()?;
        let completion = match flags {
            OpFlags::Inject => false,
            OpFlags::Default => !b.tx_selective || self.tx_op_flags & fi::FI_COMPLETION != 0,
            OpFlags::Flags(f) => {
                f & fi::FI_INJECT == 0 && (!b.tx_selective || f & fi::FI_COMPLETION != 0)
            }
        };
        if !completion {
            return self.send(buf.bytes(), dest, tag, cq_data, context, flags);
        }
        let peer = self.peer(dest)?;
        self.core
            .send_buf(peer, tag, buf, cq_data, context, completion)?;
        Ok(())
    }

    /// Posts a receive into `buf` from `src` (FI_ADDR_UNSPEC: any) of a
    /// message whose tag matches `tag` outside `ignore`.
    ///
    /// Errors: `FI_EAGAIN` when the posted queue or the completion queue is
    /// full; `FI_EINVAL` for an address not in the vector.
    pub fn recv(
        &self,
        buf: Box<dyn RecvBuf>,
        src: u64,
        tag: u64,
        ignore: u64,
        context: u64,
        flags: OpFlags,
    ) -> FiResult<()> {
        let b = self.bound()?;
        let source = self.source(src)?;
        let f = match flags {
            OpFlags::Flags(f) => f,
            _ => self.rx_op_flags,
        };
        let quiet = b.rx_selective && f & fi::FI_COMPLETION == 0;
        if quiet {
            self.quiet
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(context);
            self.any_quiet.store(true, Ordering::Release);
        }
        let r = self.core.recv(source, tag, ignore, buf, context);
        if r.is_err() && quiet {
            self.quiet
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&context);
        }
        r.map_err(FiError::from)
    }

    /// fi_trecvmsg with FI_PEEK (and FI_CLAIM or FI_DISCARD per `mode`):
    /// completes at once, with the message's tag, length, data and source,
    /// or with FI_ENOMSG.
    ///
    /// Errors: `FI_EAGAIN` when the completion queue is full.
    pub fn peek(
        &self,
        src: u64,
        tag: u64,
        ignore: u64,
        context: u64,
        mode: PeekMode,
    ) -> FiResult<()> {
        self.bound()?;
        let source = self.source(src)?;
        self.core.peek(source, tag, ignore, context, mode)?;
        Ok(())
    }

    /// fi_trecvmsg with FI_CLAIM (into `buf`) or FI_CLAIM | FI_DISCARD
    /// (`buf` None) of the message claimed with `context`.
    ///
    /// Errors: `FI_EINVAL` when nothing is claimed with `context`.
    pub fn claimed(&self, context: u64, buf: Option<Box<dyn RecvBuf>>) -> FiResult<()> {
        self.bound()?;
        match buf {
            Some(b) => self.core.recv_claimed(context, b)?,
            None => self.core.discard_claimed(context)?,
        }
        Ok(())
    }

    /// fi_cancel: the posted receive with `context` completes with
    /// FI_ECANCELED. Returns whether one was found.
    pub fn cancel(&self, context: u64) -> bool {
        self.core.cancel(context)
    }

    /// Waits (the core's one wait, with the socket's wait policy) until a
    /// completion is queued or `timeout` passes; true if one is.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        self.core.wait_completion(timeout).unwrap_or(false)
    }

    /// Before closing: waits up to [`FLUSH_ON_CLOSE`] until the messages
    /// sent are confirmed.
    pub fn flush(&self) {
        if let Err(e) = self.core.flush(FLUSH_ON_CLOSE) {
            tracing::debug!(error = %e, "clusternet: close without every send confirmed");
        }
    }

    /// The core's and CTP's counters that are not zero, one line each
    /// (libfabric's log at close).
    pub fn counters(&self) -> [String; 2] {
        fn nonzero(d: String) -> String {
            d.split(", ")
                .filter(|f| !f.ends_with(": 0") && !f.ends_with(": 0 }"))
                .collect::<Vec<_>>()
                .join(", ")
        }
        [
            format!(
                "{:?}: {}",
                self.name,
                nonzero(format!("{:?}", self.core.stats()))
            ),
            format!(
                "{:?}: CTP {}",
                self.name,
                nonzero(format!("{:?}", self.core.socket().stats()))
            ),
        ]
    }

    /// The completion entry of core completion `c`.
    fn entry(&self, c: TaggedCompletion) -> Option<(bool, Entry)> {
        let send = c.kind == OpKind::Send;
        let msg = c.tag & MSG_TAG != 0;
        let src = c.source.map_or(FI_ADDR_NOTAVAIL, |p| {
            let m = self.map.read().unwrap_or_else(|p| p.into_inner());
            m.to_addr.get(p).copied().unwrap_or(FI_ADDR_NOTAVAIL)
        });
        let mut flags = if send {
            fi::FI_SEND | fi::FI_TAGGED
        } else if msg {
            fi::FI_RECV | fi::FI_MSG
        } else {
            fi::FI_RECV | fi::FI_TAGGED
        };
        if c.data.is_some() && !send {
            flags |= fi::FI_REMOTE_CQ_DATA;
        }
        let base = Completion {
            context: c.context,
            flags,
            len: c.len as usize,
            buf: 0,
            data: c.data.unwrap_or(0),
            tag: if msg || send { 0 } else { c.tag },
            src,
        };
        let quiet = !send && self.any_quiet.load(Ordering::Acquire) && {
            let mut q = self.quiet.lock().unwrap_or_else(|p| p.into_inner());
            let was = q.remove(&c.context);
            if q.is_empty() {
                self.any_quiet.store(false, Ordering::Release);
            }
            was
        };
        let unknown = !send && src == FI_ADDR_NOTAVAIL;
        let e = match c.error {
            None if quiet => return None,
            None if unknown && self.source_err => {
                // fi_cq(3), FI_SOURCE_ERR: the data arrived; the entry says
                // whose it is by name.
                let name = c.source.and_then(|p| self.core.peer_addr(p));
                let data = name
                    .and_then(|w| self.name_of(w))
                    .map_or_else(Vec::new, |n| n.encode());
                Entry::Err(ErrCompletion {
                    base,
                    err: fi::FI_EADDRNOTAVAIL,
                    olen: 0,
                    prov: crate::error::ProvErrno::None,
                    msg: match name {
                        Some(w) => format!("message from {w}, not in the address vector"),
                        None => "message from a sender not in the address vector".into(),
                    },
                    data,
                })
            }
            None => Entry::Ok(base),
            Some(e) => {
                let (err, prov) = op_error(&e);
                if err == fi::FI_EHOSTUNREACH {
                    tracing::warn!(error = %e, context = c.context, "clusternet: operation failed");
                    crate::log::warn(&format!("operation failed: {e}"));
                }
                let olen = match e {
                    comm::tagged::OpError::Truncated { olen } => {
                        (olen as usize).saturating_sub(base.len)
                    }
                    _ => 0,
                };
                Entry::Err(ErrCompletion {
                    base,
                    err,
                    olen,
                    prov,
                    msg: e.to_string(),
                    data: Vec::new(),
                })
            }
        };
        Some((send, e))
    }
}

impl CqSource for RdmEp {
    /// One turn: the core's completions into the bound CQs, as many as they
    /// have room for.
    fn progress(&self) {
        let Some(b) = self.bound.get() else {
            return;
        };
        let room = b.tx_cq.room().min(b.rx_cq.room());
        if room == 0 {
            let _ = self.core.progress();
            return;
        }
        let mut s = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = self.core.poll_completions(&mut s, room) {
            tracing::warn!(error = %e, "clusternet: progress failed");
        }
        for c in s.drain(..) {
            let Some((send, e)) = self.entry(c) else {
                continue;
            };
            let cq = if send { &b.tx_cq } else { &b.rx_cq };
            if cq.push(e).is_err() {
                tracing::warn!("clusternet: CQ overrun, completion lost");
            }
        }
    }

    fn wait(&self, timeout: Duration) -> bool {
        RdmEp::wait(self, Some(timeout))
    }
}

impl PeerSink for RdmEp {
    fn peer_added(&self, addr: u64, name: &Name, info: &NameInfo) -> FiResult<()> {
        if let Some(p) = &self.link_peers {
            add_udp_peer(p, name)?;
        }
        let id = self.core.insert_peer(name.wire())?;
        if let (Some(peer), Some(own)) = (info.mtu, self.info.mtu) {
            // A peer on a link of smaller frames gets frames its size.
            if peer < own && !self.core.set_peer_mtu(id, peer.into(), own.into())? {
                tracing::warn!(%name, "clusternet: no room to size frames to a peer's MTU");
            }
        }
        let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
        let a = addr as usize;
        if m.to_peer.len() <= a {
            m.to_peer.resize(a + 1, None);
        }
        m.to_peer[a] = Some(id);
        if m.to_addr.len() <= id {
            m.to_addr.resize(id + 1, FI_ADDR_NOTAVAIL);
        }
        // The first address of a name keeps it for FI_SOURCE.
        if m.to_addr[id] == FI_ADDR_NOTAVAIL {
            m.to_addr[id] = addr;
        }
        Ok(())
    }

    fn peer_removed(&self, addr: u64) {
        let id = {
            let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
            let Some(id) = m.to_peer.get_mut(addr as usize).and_then(Option::take) else {
                return;
            };
            if m.to_peer.contains(&Some(id)) {
                return;
            }
            if let Some(a) = m.to_addr.get_mut(id) {
                *a = FI_ADDR_NOTAVAIL;
            }
            id
        };
        if let Err(e) = self.core.remove_peer(id) {
            tracing::debug!(error = %e, "clusternet: remove_peer");
        }
    }
}

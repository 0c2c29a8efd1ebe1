//! [`TaggedEndpoint`]: tagged messages between peers that join at run
//! time, over one CTP endpoint, with libfabric's semantics (`fi_tagged(3)`,
//! `fi_cq(3)`, `fi_av(3)`, `fi_cancel(3)`): the surface a libfabric
//! provider stands on.
//!
//! It is the communicator's core (`state.rs`: per-peer order, fragments,
//! ULFC grants, failure detection; `matching.rs`; CTP's upper layer in
//! `layer.rs`) without ranks: peers are inserted and removed at run time
//! and named by a dense [`PeerId`]; a message from an address never
//! inserted makes its sender a peer on first contact (connectionless, as
//! libfabric's FI_EP_RDM: [`TaggedEndpoint::insert_peer`] of that address
//! later gives the same id), within [`TaggedConfig::max_peers`]; tags are
//! 64 bits with ignore masks;
//! receives name a source or none; each message may carry 8 bytes of
//! remote CQ data; operations carry a caller context and complete into a
//! bounded queue of [`TaggedCompletion`]s; a receive's message is copied
//! straight into the caller's [`RecvBuf`] inside the engine turn that
//! completed it. [`Communicator`](crate::Communicator) is the same core
//! with ranks from a host list: the two share one wait path.
//!
//! Progress: every call runs under the engine lock, the only lock;
//! [`TaggedEndpoint::progress`] is one nonblocking turn of the runtime,
//! [`TaggedEndpoint::poll_completions`] a turn and a drain (`fi_cq_read`),
//! [`TaggedEndpoint::wait_completion`] the runtime driver's one wait with
//! the socket's wait policy (`fi_cq_sread`). The runtime's service thread
//! keeps confirming, resending and matching while nobody calls (auto
//! progress).
//!
//! Over UDP (no privilege):
//!
//! ```
//! use comm::tagged::{TaggedConfig, TaggedEndpoint};
//! use ctp::CtpConfig;
//! use std::time::Duration;
//!
//! let a = TaggedEndpoint::bind_udp("127.0.0.1:0", TaggedConfig::default(), CtpConfig::default())?;
//! let b = TaggedEndpoint::bind_udp("127.0.0.1:0", TaggedConfig::default(), CtpConfig::default())?;
//! let to_b = a.insert_name(&b.local_name())?;
//! b.insert_name(&a.local_name())?;
//! b.recv(None, 0x7_0000_0000, 0xffff_ffff, Box::new(vec![0u8; 16]), 1)?;
//! a.send(to_b, 0x7_0000_0042, b"hello", Some(99), 2, true)?;
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     b.wait_completion(Some(Duration::from_secs(10)))?;
//!     b.poll_completions(&mut got, 8)?;
//! }
//! assert_eq!((got[0].context, got[0].len, got[0].tag, got[0].data), (1, 5, 0x7_0000_0042, Some(99)));
//! # Ok::<(), comm::CommError>(())
//! ```

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use ctp::{CtpConfig, CtpSocket, EdpTransport, EthAddr, Transport, UdpTransport};

use crate::completion::{PeerId, RecvBuf, SendBuf, TaggedCompletion};
use crate::config::CommConfig;
use crate::layer::{block, turn};
use crate::matching::Selector;
use crate::request::TaggedOp;
use crate::state::State;
use crate::stats::CommStats;

/// Messages longer than this, bytes, are copied before the engine lock is
/// taken ([`TaggedEndpoint::send`]); shorter ones into a buffer of CTP's
/// pool under it (no fresh pages to fault in). At a few GB/s the copy of
/// 4 MiB holds the lock about a millisecond, the length of CTP's shortest
/// resend timeout.
pub const COPY_UNLOCKED: usize = 4 << 20;
use crate::CommError;

#[path = "tagged/name.rs"]
pub mod name;

pub use crate::completion::{OpError, OpKind};
pub use crate::state::PeekMode;
pub use name::{PeerName, MAX_NAME};

/// Tunables of a [`TaggedEndpoint`].
#[derive(Debug, Clone)]
pub struct TaggedConfig {
    /// The communicator's tunables (fragments, windows, budget, bounds,
    /// failure detection); `context` separates applications on one port.
    /// Every process must use the same `recv_budget_bytes`, `max_peers`
    /// and `context`.
    pub comm: CommConfig,
    /// Most peers in the table at once; each starts with a window of
    /// `comm.recv_budget_bytes / max_peers` bytes (ULFC's default share,
    /// `flow.rs`), which must be at least `flow::MIN_WINDOW_BYTES`.
    /// Default 64 (32 KiB each of the 2 MiB default budget).
    pub max_peers: usize,
    /// Most completions queued and due (operations posted that will make
    /// one): beyond it, posting fails with
    /// [`CommError::CompletionQueueFull`] (libfabric's `FI_EAGAIN` under
    /// `FI_RM_ENABLED`). Default 4096.
    pub cq_size: usize,
}

impl Default for TaggedConfig {
    fn default() -> Self {
        Self {
            comm: CommConfig::default(),
            max_peers: 64,
            cq_size: 4096,
        }
    }
}

/// A tagged-message endpoint. See the module documentation. `Send + Sync`
/// (`FI_THREAD_SAFE`): every call takes the runtime's engine lock, and no
/// other.
pub struct TaggedEndpoint<T: Transport> {
    sock: CtpSocket<T>,
    local: T::Addr,
    /// `CommConfig::eager_limit`, bytes.
    eager_limit: usize,
}

impl<T: Transport> std::fmt::Debug for TaggedEndpoint<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaggedEndpoint")
            .field("local", &self.local)
            .field("socket", &self.sock)
            .finish()
    }
}

impl TaggedEndpoint<UdpTransport> {
    /// Binds a tagged endpoint over CTP on UDP at `addr`.
    ///
    /// Errors: socket errors ([`CommError::Io`]), and those of
    /// [`TaggedEndpoint::new`].
    pub fn bind_udp(
        addr: impl ToSocketAddrs,
        cfg: TaggedConfig,
        ctp: CtpConfig,
    ) -> Result<Self, CommError> {
        let sock = CtpSocket::bind_udp(addr, ctp)?;
        let local: SocketAddr = sock.local_addr()?;
        Self::new(sock, local, cfg)
    }
}

impl TaggedEndpoint<EdpTransport> {
    /// Binds a tagged endpoint over CTP on EDP at `port` (0: ephemeral) of
    /// `iface`, in the process's runtime for the interface.
    ///
    /// Errors: those of `CtpSocket::bind_edp` (EPERM names CAP_NET_RAW),
    /// and those of [`TaggedEndpoint::new`].
    pub fn bind_edp(
        iface: &str,
        port: u16,
        cfg: TaggedConfig,
        ctp: CtpConfig,
    ) -> Result<Self, CommError> {
        let sock = CtpSocket::bind_edp(iface, port, ctp)?;
        let (_, mac, port) = sock.local_addr()?;
        let local = EthAddr::new(mac, port);
        Self::new(sock, local, cfg)
    }
}

impl<T: Transport> TaggedEndpoint<T>
where
    T::Addr: PeerName,
{
    /// A tagged endpoint over `sock`, whose address is `local`: the
    /// endpoint's state becomes the socket's upper layer, so the socket
    /// must have no other users. No peer yet.
    ///
    /// Errors: [`CommError::Bootstrap`] for a budget too small for
    /// `max_peers`, or a socket that already serves an upper layer.
    pub fn new(sock: CtpSocket<T>, local: T::Addr, cfg: TaggedConfig) -> Result<Self, CommError> {
        let eager_limit = cfg.comm.eager_limit;
        let state = State::<T::Addr>::new_dynamic(cfg.comm, cfg.max_peers, cfg.cq_size)?;
        sock.set_upper(Box::new(state))
            .map_err(|e| CommError::Bootstrap(e.to_string()))?;
        Ok(Self {
            sock,
            local,
            eager_limit,
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut State<T::Addr>) -> R) -> R {
        self.sock
            .with_upper(|st: &mut State<T::Addr>, _, _| netcore::in_span!(st, f(st)))
    }

    /// This endpoint's address.
    pub fn local_addr(&self) -> T::Addr {
        self.local
    }

    /// This endpoint's address as bytes (`fi_getname(3)`; [`name`]).
    pub fn local_name(&self) -> Vec<u8> {
        self.local.to_name()
    }

    /// The address of a name ([`name`]).
    ///
    /// Errors: [`CommError::Bootstrap`] for bytes that are no address.
    pub fn parse_name(name: &[u8]) -> Result<T::Addr, CommError> {
        T::Addr::from_name(name)
    }

    /// Adds the peer at `addr` (`fi_av_insert(3)`) and returns its id; the
    /// same address again gives the same id, as does the address of a peer
    /// learned on first contact. Our own address is a peer too (messages to
    /// it go straight to matching).
    ///
    /// Errors: [`CommError::Bootstrap`] when `max_peers` are in the table.
    pub fn insert_peer(&self, addr: T::Addr) -> Result<PeerId, CommError> {
        let me = addr == self.local;
        self.with(|st| st.insert_peer(addr, me))
    }

    /// [`TaggedEndpoint::insert_peer`] of a name.
    ///
    /// Errors: those of [`TaggedEndpoint::parse_name`] and
    /// [`TaggedEndpoint::insert_peer`].
    pub fn insert_name(&self, name: &[u8]) -> Result<PeerId, CommError> {
        self.insert_peer(T::Addr::from_name(name)?)
    }

    /// Removes peer `id` (`fi_av_remove(3)`): its pending operations
    /// complete with [`OpError::PeerUnreachable`]; the id is not reused,
    /// and its later messages are dropped (counted) until its address is
    /// inserted again.
    ///
    /// Errors: [`CommError::UnknownPeer`].
    pub fn remove_peer(&self, id: PeerId) -> Result<(), CommError> {
        self.with(|st| st.remove_peer(id))
    }

    /// Peer `id`'s link carries frames of `peer_mtu` bytes of Ethernet
    /// payload where ours carries `own_mtu` (a name told it): CTP packets
    /// to it shrink by the difference (never grow beyond ours), so ranks on
    /// links of different MTU talk. Returns false when CTP's table of such
    /// peers is full (`ctp::MAX_PEER_DATA_SIZES`): the peer then gets our
    /// size.
    ///
    /// Errors: [`CommError::UnknownPeer`].
    pub fn set_peer_mtu(
        &self,
        id: PeerId,
        peer_mtu: usize,
        own_mtu: usize,
    ) -> Result<bool, CommError> {
        self.sock.with_upper(|st: &mut State<T::Addr>, ep, _| {
            let addr = st.peer_addr(id).ok_or(CommError::UnknownPeer(id))?;
            let less = own_mtu.saturating_sub(peer_mtu);
            let size = ep.config().data_size.saturating_sub(less);
            Ok(ep.set_peer_data_size(addr, size))
        })
    }

    /// The address of peer `id` (`fi_av_lookup(3)`), if in the table.
    pub fn peer_addr(&self, id: PeerId) -> Option<T::Addr> {
        self.with(|st| st.peer_addr(id))
    }

    /// Sends `data` (copied: free at once; 0 B up to
    /// `CommConfig::max_message_bytes`) to `dest` with `tag` and, if given,
    /// 8 bytes of remote CQ data (`fi_tsenddata(3)`). With `completion`
    /// it completes with `context` once its last fragment is handed to
    /// CTP, which then delivers it reliably; without (`fi_tinject(3)`) it
    /// makes no completion, not even on failure. Messages to one peer
    /// match in send order (`FI_ORDER_SAS`).
    ///
    /// Errors: [`CommError::CompletionQueueFull`], [`CommError::UnknownPeer`],
    /// [`CommError::TooLarge`], [`CommError::PeerFailed`],
    /// [`CommError::SendQueueFull`], [`CommError::TooManyRequests`].
    pub fn send(
        &self,
        dest: PeerId,
        tag: u64,
        data: &[u8],
        cq_data: Option<u64>,
        context: u64,
        completion: bool,
    ) -> Result<(), CommError> {
        let len = crate::wire::HEADER_LEN + data.len();
        let op = TaggedOp {
            context,
            completion,
        };
        if data.len() > COPY_UNLOCKED {
            // Built before the engine lock is taken: copying (and faulting
            // in) hundreds of MiB under it would keep the service thread
            // from confirming anything meanwhile, and a peer waiting on
            // this rank would see it silent.
            let mut buf = Vec::with_capacity(len);
            buf.resize(crate::wire::HEADER_LEN, 0);
            buf.extend_from_slice(data);
            return self.sock.with_upper(|st: &mut State<T::Addr>, ep, now| {
                netcore::in_span!(st, {
                    st.tagged_send_built(dest, tag, cq_data, buf, op)?;
                    crate::layer::step(st, ep, now);
                    Ok(())
                })
            });
        }
        self.sock.with_upper(|st: &mut State<T::Addr>, ep, now| {
            let buf = if len >= ctp::MIN_POOLED {
                ep.take_buffer(len).unwrap_or_default()
            } else {
                Vec::new()
            };
            netcore::in_span!(st, {
                st.tagged_send(dest, tag, cq_data, data, buf, op)?;
                crate::layer::step(st, ep, now);
                Ok(())
            })
        })
    }

    /// Sends the bytes of `buf`, the caller's own buffer, as
    /// [`TaggedEndpoint::send`] sends a slice: a message longer than
    /// `CommConfig::eager_limit` goes by rendezvous straight from `buf`
    /// (no copy; the receiver pulls it), and then completes (with
    /// `context`) only when the receiver has it, `buf` being dropped then;
    /// a shorter one is copied and completes as `send`'s. A libfabric
    /// provider wraps the application's pointer, valid until the
    /// completion (`fi_msg(3)`).
    ///
    /// Errors: as [`TaggedEndpoint::send`].
    pub fn send_buf(
        &self,
        dest: PeerId,
        tag: u64,
        buf: impl SendBuf,
        cq_data: Option<u64>,
        context: u64,
        completion: bool,
    ) -> Result<(), CommError> {
        if buf.bytes().len() <= self.eager_limit {
            // Copied at once, through `send`'s pooled buffers: nothing to
            // keep, and the handle is never boxed (no allocation per
            // message for it).
            return self.send(dest, tag, buf.bytes(), cq_data, context, completion);
        }
        let buf: Box<dyn SendBuf> = Box::new(buf);
        let op = TaggedOp {
            context,
            completion,
        };
        self.sock.with_upper(|st: &mut State<T::Addr>, ep, now| {
            netcore::in_span!(st, {
                st.tagged_send_buf(dest, tag, cq_data, buf, op)?;
                crate::layer::step(st, ep, now);
                Ok(())
            })
        })
    }

    /// Posts a receive into `buf` of a message from `source` (`None`: any,
    /// `FI_ADDR_UNSPEC`) whose tag matches `tag` outside the bits of
    /// `ignore` (`fi_trecv(3)`). It completes with `context`, the
    /// message's tag, CQ data, source and length; a message longer than
    /// `buf` fills it and completes with [`OpError::Truncated`] carrying
    /// the message's length.
    ///
    /// Errors: [`CommError::CompletionQueueFull`], [`CommError::UnknownPeer`],
    /// [`CommError::Post`] (posted queue full), [`CommError::TooManyRequests`].
    pub fn recv(
        &self,
        source: Option<PeerId>,
        tag: u64,
        ignore: u64,
        buf: Box<dyn RecvBuf>,
        context: u64,
    ) -> Result<(), CommError> {
        let sel = Selector {
            source,
            tag,
            ignore,
        };
        // Posting a receive is no reply: the confirmation held behind the
        // last delivery waits for the send that follows (one frame).
        self.sock
            .with_upper_no_reply(|st: &mut State<T::Addr>, _, _| {
                netcore::in_span!(st, st.tagged_recv(sel, context, buf))
            })
    }

    /// Peeks at the first message a receive for `(source, tag, ignore)`
    /// would take, after one progress turn (`fi_trecvmsg(3)` with
    /// `FI_PEEK`, and `FI_CLAIM` or `FI_DISCARD` per `mode`): completes at
    /// once with `context` and the message's tag, length, CQ data and
    /// source, or with [`OpError::NoMessage`].
    ///
    /// Errors: [`CommError::CompletionQueueFull`], link errors.
    pub fn peek(
        &self,
        source: Option<PeerId>,
        tag: u64,
        ignore: u64,
        context: u64,
        mode: PeekMode,
    ) -> Result<(), CommError> {
        self.progress()?;
        let sel = Selector {
            source,
            tag,
            ignore,
        };
        self.with(|st| st.tagged_peek(sel, context, mode))
    }

    /// Receives the message claimed with `context` into `buf`
    /// (`FI_CLAIM`); completes at once.
    ///
    /// Errors: [`CommError::UnknownRequest`] when nothing is claimed with
    /// `context`; [`CommError::CompletionQueueFull`].
    pub fn recv_claimed(&self, context: u64, buf: Box<dyn RecvBuf>) -> Result<(), CommError> {
        self.with(|st| st.tagged_claimed(context, Some(buf)))
    }

    /// Drops the message claimed with `context` (`FI_CLAIM |
    /// FI_DISCARD`); completes at once, without data.
    ///
    /// Errors: as [`TaggedEndpoint::recv_claimed`].
    pub fn discard_claimed(&self, context: u64) -> Result<(), CommError> {
        self.with(|st| st.tagged_claimed(context, None))
    }

    /// Cancels the posted receive with `context` (`fi_cancel(3)`): it
    /// completes with [`OpError::Canceled`]. False if no receive with
    /// `context` is posted (it completed already). Sends cannot be
    /// cancelled.
    pub fn cancel(&self, context: u64) -> bool {
        self.with(|st| st.tagged_cancel(context))
    }

    /// One nonblocking turn of the runtime: frames received go through CTP
    /// into matching (into the receives' buffers), fragments the windows
    /// let go are handed to CTP, the failure detector runs if due.
    ///
    /// Errors: link errors.
    pub fn progress(&self) -> Result<(), CommError> {
        turn(&self.sock, |_| None::<()>)?;
        Ok(())
    }

    /// Moves up to `max` completions into `out`, oldest first, after one
    /// progress turn when none is queued (`fi_cq_read(3)` with manual
    /// progress); returns how many.
    ///
    /// Errors: link errors.
    pub fn poll_completions(
        &self,
        out: &mut Vec<TaggedCompletion>,
        max: usize,
    ) -> Result<usize, CommError> {
        let got = turn(&self.sock, |st| {
            st.has_completion().then(|| st.take_completions(out, max))
        })?;
        Ok(got.unwrap_or(0))
    }

    /// Waits until a completion is queued or `timeout` passes (`None`:
    /// without limit), through the runtime driver's one wait with the
    /// socket's wait policy (`fi_cq_sread(3)`); true if one is queued.
    ///
    /// Errors: link errors.
    pub fn wait_completion(&self, timeout: Option<Duration>) -> Result<bool, CommError> {
        match block(&self.sock, timeout, "tagged completion", |st| {
            st.has_completion().then_some(())
        }) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until every message sent so far is confirmed by its
    /// receiver's CTP endpoint, at most `timeout` (before closing).
    ///
    /// Errors: [`CommError::TimedOut`]; link errors.
    pub fn flush(&self, timeout: Duration) -> Result<(), CommError> {
        let r = self.sock.wait_upper(
            runtime::Deadline::from_timeout(Some(timeout)),
            "tagged flush",
            |st: &mut State<T::Addr>, ep, now| {
                netcore::in_span!(st, crate::layer::step(st, ep, now));
                (st.snapshot().pending_fragments == 0
                    && ep.storage_sizes().awaiting_confirmation == 0)
                    .then_some(())
            },
        );
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(CommError::TimedOut {
                what: format!("flush of tagged endpoint {:?}", self.local),
                after: timeout,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Counters and queue sizes.
    pub fn stats(&self) -> CommStats {
        self.with(|st| st.snapshot())
    }

    /// Completions queued, operations due to make one, and the queue's
    /// capacity ([`TaggedConfig::cq_size`]).
    pub fn completion_counts(&self) -> (usize, usize, usize) {
        self.with(|st| st.completion_counts())
    }

    /// The CTP socket underneath (its counters; its wait policy:
    /// `set_wait_policy`).
    pub fn socket(&self) -> &CtpSocket<T> {
        &self.sock
    }
}

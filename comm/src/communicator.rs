//! [`Communicator`]: N ranks over one CTP endpoint per process.
//!
//! Sources: MPI 4.0 chapter 3 (point-to-point: blocking and nonblocking
//! calls, requests, status, matching, order) and the thesis's Open MPI
//! transport (ch. 6: one endpoint per process, a private header of length
//! and tag, lazy connection on first send). The protocol state lives in
//! `state.rs` (no I/O), which lives in the CTP core as its upper layer
//! (`layer.rs`): deliveries reach matching inside the engine turn that
//! received them, and this file's calls run on the state under the engine
//! lock, the only lock (`ctp::CtpSocket::with_upper`).
//!
//! Progress is made by the calling thread inside every call (MPI's usual
//! "progress on call" model), and every blocking call waits through the
//! runtime driver's one wait (`ctp::CtpSocket::wait_upper`, the socket's
//! wait policy: busy-poll, adaptive or block) with its condition checked
//! after each engine turn. The runtime's service thread keeps confirming,
//! resending and feeding matching while this process computes (auto
//! progress).

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ctp::{CtpConfig, CtpSocket, EdpTransport, Endpoint, EthAddr, Transport, UdpTransport};
use runtime::Deadline;
use tracing::Span;

use crate::config::CommConfig;
use crate::flow::Mode;
use crate::flow::PeerState;
use crate::matching::{SourceSel, Tag, TagSel};
use crate::mcast::Mcast;
use crate::request::{Completion, Request, Status};
use crate::state::State;
use crate::stats::CommStats;
use crate::wire::HEADER_LEN;
use crate::CommError;

/// A communicator (MPI 4.0 chapter 6 terms): `size` ranks, this process
/// being `rank`, each reachable at its address in the host list, all over
/// one CTP socket. See the module documentation.
///
/// Over UDP (no privilege; one process playing two ranks here):
///
/// ```
/// use comm::{Communicator, CommConfig, ANY_SOURCE, ANY_TAG};
/// use ctp::{CtpConfig, CtpSocket};
///
/// let s0 = CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default())?;
/// let s1 = CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default())?;
/// let hosts = vec![s0.local_addr()?, s1.local_addr()?];
/// let c0 = Communicator::new(s0, 0, hosts.clone(), CommConfig::default())?;
/// let c1 = Communicator::new(s1, 1, hosts, CommConfig::default())?;
/// c0.send(1, 42, b"hello")?;
/// let (status, data) = c1.recv(ANY_SOURCE, ANY_TAG)?;
/// assert_eq!((status.source, status.tag, &data[..]), (0, 42, &b"hello"[..]));
/// # Ok::<(), comm::CommError>(())
/// ```
pub struct Communicator<T: Transport> {
    sock: CtpSocket<T>,
    hosts: Vec<T::Addr>,
    rank: usize,
    /// `CommConfig::wait_timeout`.
    wait_timeout: Option<Duration>,
    /// `CommConfig::linger`.
    linger: Duration,
    /// `bcast` over MAK, once enabled (`mcast.rs`).
    mcast: OnceLock<Mcast>,
    /// The state's span (`comm`: rank, size; `span.rs`), for the work
    /// outside the state.
    span: Span,
}

impl<T: Transport> std::fmt::Debug for Communicator<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("size", &self.hosts.len())
            .field("socket", &self.sock)
            .finish()
    }
}

impl Communicator<UdpTransport> {
    /// Binds rank `rank`'s CTP-over-UDP endpoint at `hosts[rank]` and joins
    /// the communicator of `hosts` (rank i at `hosts[i]`).
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::Bootstrap`] for
    /// duplicate addresses, socket errors ([`CommError::Io`]).
    pub fn bind_udp(
        rank: usize,
        hosts: Vec<SocketAddr>,
        cfg: CommConfig,
        ctp: CtpConfig,
    ) -> Result<Self, CommError> {
        let addr = *hosts.get(rank).ok_or(CommError::InvalidRank {
            rank,
            size: hosts.len(),
        })?;
        let sock = CtpSocket::bind_udp(addr, ctp)?;
        Self::new(sock, rank, hosts, cfg)
    }
}

impl Communicator<EdpTransport> {
    /// Binds rank `rank`'s CTP-over-EDP endpoint on `iface` at the port of
    /// `hosts[rank]` (in the process's shared runtime for `iface`) and joins
    /// the communicator of `hosts` (rank i at MAC and port `hosts[i]`).
    ///
    /// Errors: [`CommError::InvalidRank`]; [`CommError::Bootstrap`] when
    /// `iface`'s MAC is not `hosts[rank]`'s or addresses repeat; those of
    /// `CtpSocket::bind_edp` (EPERM names CAP_NET_RAW).
    pub fn bind_edp(
        iface: &str,
        rank: usize,
        hosts: Vec<EthAddr>,
        cfg: CommConfig,
        ctp: CtpConfig,
    ) -> Result<Self, CommError> {
        let EthAddr { mac, port } = *hosts.get(rank).ok_or(CommError::InvalidRank {
            rank,
            size: hosts.len(),
        })?;
        let sock = CtpSocket::bind_edp(iface, port, ctp)?;
        let (_, local_mac, _) = sock.local_addr()?;
        if local_mac != mac {
            return Err(CommError::Bootstrap(format!(
                "rank {rank} is listed at MAC {mac} but {iface} has {local_mac}"
            )));
        }
        Self::new(sock, rank, hosts, cfg)
    }

    /// From now on `bcast` goes over MAK reliable multicast (`mcast.rs`):
    /// this rank joins MAK group `group` (EDP port `port`, group MAC
    /// `mak::socket::group_mac(group)`) in the communicator's runtime, as a
    /// sender and a follower of every other rank. Collective: every rank
    /// must call it, with the same group and port, before the next
    /// broadcast (it sends nothing).
    ///
    /// Errors: [`CommError::Collective`] if already enabled; those of
    /// `mak::socket::MakSocket::bind_edp_on` as [`CommError::Io`]
    /// (`AddrInUse`: the port is taken).
    pub fn enable_multicast_bcast(&self, group: u16, port: u16) -> Result<(), CommError> {
        if self.mcast.get().is_some() {
            return Err(CommError::Collective(
                "multicast bcast is already enabled on this communicator".into(),
            ));
        }
        let (rank, timeout) = (self.rank, self.wait_timeout);
        // In the communicator's span: the MAK member's is its child.
        let m = self.span.in_scope(|| {
            Mcast::join(
                self.sock.runtime(),
                rank,
                &self.hosts,
                group,
                port,
                self.sock.wait_policy(),
                timeout,
            )
        })?;
        self.mcast
            .set(m)
            .map_err(|_| CommError::Collective("multicast bcast enabled twice at once".into()))
    }
}

impl<T: Transport> Communicator<T> {
    /// Joins the communicator of `hosts` (rank i at address `hosts[i]`) as
    /// `rank`, over `sock` (bound at `hosts[rank]`): the communicator's
    /// state becomes the socket's upper layer (`ctp::UpperLayer`) and takes
    /// every delivery no subscriber takes, so the socket must have no other
    /// users. No message is sent: peers are connected lazily on first send
    /// (thesis ch. 6).
    ///
    /// Errors: [`CommError::InvalidRank`]; [`CommError::Bootstrap`] for
    /// duplicate addresses, or a socket that already serves a communicator.
    pub fn new(
        sock: CtpSocket<T>,
        rank: usize,
        hosts: Vec<T::Addr>,
        cfg: CommConfig,
    ) -> Result<Self, CommError> {
        let (wait_timeout, linger) = (cfg.wait_timeout, cfg.linger);
        let state = State::new(rank, &hosts, cfg)?;
        let span = state.span.clone();
        sock.set_upper(Box::new(state))
            .map_err(|e| CommError::Bootstrap(e.to_string()))?;
        span.in_scope(|| {
            tracing::debug!(
                rank,
                size = hosts.len(),
                local = sock.local_name(),
                "comm: joined"
            )
        });
        Ok(Self {
            sock,
            hosts,
            rank,
            wait_timeout,
            linger,
            mcast: OnceLock::new(),
            span,
        })
    }

    /// Runs `f` on the state and the endpoint under the engine lock (the
    /// only lock), in the state's span, then sends what it queued.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut State<T::Addr>, &mut Endpoint<T::Addr>, Instant) -> R,
    ) -> R {
        self.sock
            .with_upper(|st: &mut State<T::Addr>, ep, now| netcore::in_span!(st, f(st, ep, now)))
    }

    /// One nonblocking turn of the engine with `f` checked before and after
    /// it; `None` when it gave nothing.
    ///
    /// Errors: link errors.
    fn turn<R>(
        &self,
        f: impl FnMut(&mut State<T::Addr>) -> Option<R>,
    ) -> Result<Option<R>, CommError> {
        Ok(crate::layer::turn(&self.sock, f)?)
    }

    /// This process's rank, `0..size()` (MPI_Comm_rank).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks (MPI_Comm_size).
    pub fn size(&self) -> usize {
        self.hosts.len()
    }

    /// The addresses of the ranks.
    pub fn hosts(&self) -> &[T::Addr] {
        &self.hosts
    }

    /// The CTP socket underneath (for its counters).
    pub fn socket(&self) -> &CtpSocket<T> {
        &self.sock
    }

    /// Counters and queue sizes.
    pub fn stats(&self) -> CommStats {
        self.with(|st, _, _| st.snapshot())
    }

    /// The counters of the MAK member `bcast` uses, if multicast bcast is
    /// enabled (`Communicator::enable_multicast_bcast`).
    pub fn multicast_stats(&self) -> Option<mak::socket::MakStats> {
        self.mcast.get().map(Mcast::stats)
    }

    /// One nonblocking progress step: one turn of the runtime's engine
    /// (frames received go through CTP into matching), the failure
    /// detector's check if due, and the fragments the windows let go handed
    /// to CTP (MPI's progress rule, section 3.7.4).
    ///
    /// Errors: transport errors.
    pub fn progress(&self) -> Result<(), CommError> {
        self.turn(|_| None::<()>).map(|_| ())
    }

    /// Drives progress until `check` gives a value, the wait cannot finish
    /// (held messages, nothing in flight), or `CommConfig::wait_timeout`:
    /// through the runtime driver's one wait, `check` run after each engine
    /// turn and each wake-up, with no lock but the engine's.
    fn block_on<R>(
        &self,
        what: impl Fn(&State<T::Addr>) -> String,
        mut check: impl FnMut(&mut State<T::Addr>) -> Option<Result<R, CommError>>,
    ) -> Result<R, CommError> {
        let limit = self.wait_timeout;
        let r = crate::layer::block(&self.sock, limit, "comm wait", |st| {
            if let Some(r) = check(st) {
                return Some(r);
            }
            (st.holding() && st.blocked_in_flight().is_none()).then(|| Err(st.held_error()))
        });
        match r {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(CommError::TimedOut {
                what: self.with(|st, _, _| what(st)),
                after: limit.unwrap_or_default(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Starts a send of `data` to `dest` with `tag` (MPI_Isend, section
    /// 3.7.2); the bytes are copied, so `data` is free at once. Messages of
    /// any length up to `CommConfig::max_message_bytes` (split into
    /// fragments of `CommConfig::fragment_bytes`).
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::InvalidTag`],
    /// [`CommError::TooLarge`], [`CommError::PeerFailed`],
    /// [`CommError::SendQueueFull`], [`CommError::TooManyRequests`].
    pub fn isend(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<Request, CommError> {
        self.isend_parts(dest, tag, &[data])
    }

    /// As [`Communicator::isend`] with the message gathered from `bufs`
    /// (MPI's derived datatypes' common case: several buffers, one message).
    ///
    /// Errors: as [`Communicator::isend`].
    pub fn isend_vectored(
        &self,
        dest: usize,
        tag: Tag,
        bufs: &[IoSlice<'_>],
    ) -> Result<Request, CommError> {
        let parts: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
        self.isend_parts(dest, tag, &parts)
    }

    fn isend_parts(&self, dest: usize, tag: Tag, parts: &[&[u8]]) -> Result<Request, CommError> {
        let len = HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
        if len - HEADER_LEN > crate::tagged::COPY_UNLOCKED {
            // Copied before the engine lock is taken (see
            // `TaggedEndpoint::send`).
            let mut buf = Vec::with_capacity(len);
            buf.resize(HEADER_LEN, 0);
            for p in parts {
                buf.extend_from_slice(p);
            }
            return self.with(|st, ep, now| {
                let id = st.isend_built(dest, tag, buf, false)?;
                crate::layer::step(st, ep, now);
                Ok(Request { id })
            });
        }
        self.with(|st, ep, now| {
            // A large message goes in a spent buffer of CTP's pool if it
            // has one.
            let buf = if len >= ctp::MIN_POOLED {
                ep.take_buffer(len).unwrap_or_default()
            } else {
                Vec::new()
            };
            let id = st.isend_in(dest, tag, parts, false, buf)?;
            crate::layer::step(st, ep, now);
            Ok(Request { id })
        })
    }

    /// Sends `data` to `dest` with `tag` (MPI_Send, standard mode, section
    /// 3.2.1): returns once every fragment is handed to CTP, which then
    /// delivers it reliably (a failure marks the peer failed).
    ///
    /// Errors: as [`Communicator::isend`], and [`CommError::TimedOut`].
    pub fn send(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        let r = self.isend(dest, tag, data)?;
        self.wait_internal(r.id).map(|_| ())
    }

    /// As [`Communicator::send`] with the message gathered from `bufs`.
    ///
    /// Errors: as [`Communicator::send`].
    pub fn send_vectored(
        &self,
        dest: usize,
        tag: Tag,
        bufs: &[IoSlice<'_>],
    ) -> Result<(), CommError> {
        let r = self.isend_vectored(dest, tag, bufs)?;
        self.wait_internal(r.id).map(|_| ())
    }

    /// Posts a receive for a message from `source` (a rank or
    /// [`ANY_SOURCE`](crate::ANY_SOURCE)) with `tag` (or
    /// [`ANY_TAG`](crate::ANY_TAG)) (MPI_Irecv, section 3.7.2).
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::InvalidTag`],
    /// [`CommError::Post`] (posted queue full),
    /// [`CommError::TooManyRequests`].
    pub fn irecv(
        &self,
        source: impl Into<SourceSel>,
        tag: impl Into<TagSel>,
    ) -> Result<Request, CommError> {
        // No engine turn here: messages CTP delivered are in matching
        // already (the engine feeds it), and frames still in the ring are
        // taken by the next call (test, wait); except for a failed or
        // disconnected source, whose receive fails at once unless a message
        // of it matches: its last messages may still wait in the ring.
        let (source, tag) = (source.into(), tag.into());
        let failed =
            |st: &State<T::Addr>| matches!(source, SourceSel::Rank(r) if st.failure(r).is_some());
        // Posting a receive is no reply: the confirmation held behind the
        // last delivery waits for the send that follows (one frame).
        let posted = self
            .sock
            .with_upper_no_reply(|st: &mut State<T::Addr>, _, _| {
                netcore::in_span!(st, (!failed(st)).then(|| st.irecv(source, tag, false)))
            });
        let id = match posted {
            Some(r) => r?,
            None => {
                self.progress()?;
                self.with(|st, _, _| st.irecv(source, tag, false))?
            }
        };
        Ok(Request { id })
    }

    /// Receives a message from `source` with `tag` (wildcards allowed;
    /// MPI_Recv, section 3.2.4), in send order per (source, tag).
    ///
    /// Errors: as [`Communicator::irecv`], [`CommError::PeerFailed`] (a
    /// named source failed), [`CommError::UnexpectedQueueFull`],
    /// [`CommError::TimedOut`].
    pub fn recv(
        &self,
        source: impl Into<SourceSel>,
        tag: impl Into<TagSel>,
    ) -> Result<(Status, Vec<u8>), CommError> {
        let r = self.irecv(source, tag)?;
        let c = self.wait_internal(r.id)?;
        Ok(c.into_received()
            .expect("a receive request yields a message"))
    }

    /// Receives into `buf` (MPI_Recv with a buffer); returns the status.
    ///
    /// Errors: as [`Communicator::recv`], and [`CommError::Truncated`]
    /// when the message is longer than `buf` (the message is consumed; the
    /// first `buf.len()` bytes are copied).
    pub fn recv_into(
        &self,
        source: impl Into<SourceSel>,
        tag: impl Into<TagSel>,
        buf: &mut [u8],
    ) -> Result<Status, CommError> {
        let (s, data) = self.recv(source, tag)?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        let len = data.len();
        self.recycle(data);
        if len > buf.len() {
            return Err(CommError::Truncated {
                len,
                buf: buf.len(),
                from: s.source,
                tag: s.tag,
            });
        }
        Ok(s)
    }

    /// Hands back the buffer of a received message the caller is done with,
    /// for later sends and receptions of about its size (CTP's pool of
    /// spent buffers, `ctp::Config::max_spare_bytes`; buffers under
    /// `ctp::MIN_POOLED` bytes are simply freed). Optional: without it a
    /// large message's buffer is allocated afresh, its pages faulting in
    /// one by one (11 % to 45 % of the CPU time at 1 MiB, docs/measurements).
    /// [`Communicator::recv_into`] does it itself.
    pub fn recycle(&self, buf: Vec<u8>) {
        if buf.capacity() >= ctp::MIN_POOLED {
            self.sock.with_endpoint(|ep| ep.recycle(buf));
        }
    }

    /// The status of the first message a receive for `(source, tag)` would
    /// take now, without taking it (MPI_Iprobe, section 3.8.1), after one
    /// progress step.
    ///
    /// Errors: transport errors.
    pub fn iprobe(
        &self,
        source: impl Into<SourceSel>,
        tag: impl Into<TagSel>,
    ) -> Result<Option<Status>, CommError> {
        let (source, tag) = (source.into(), tag.into());
        self.turn(|st| st.probe(source, tag))
    }

    /// True if `req` is complete (MPI_Test, section 3.7.3, without freeing:
    /// [`Communicator::wait`] then returns at once), after one progress step.
    ///
    /// Errors: [`CommError::UnknownRequest`], transport errors.
    pub fn test(&self, req: &Request) -> Result<bool, CommError> {
        let id = req.id;
        match self.turn(|st| match st.is_complete(id) {
            Ok(false) => None,
            r => Some(r),
        })? {
            Some(r) => r,
            None => Ok(false),
        }
    }

    /// Waits for `req` and returns its completion (MPI_Wait, section 3.7.3).
    ///
    /// Errors: the request's own ([`CommError::PeerFailed`]),
    /// [`CommError::UnknownRequest`], [`CommError::UnexpectedQueueFull`],
    /// [`CommError::TimedOut`], transport errors.
    pub fn wait(&self, req: Request) -> Result<Completion, CommError> {
        self.wait_id(req.id)
    }

    /// [`Communicator::wait`] for a request the caller never saw (the
    /// blocking calls): when the wait fails, a receive still posted is
    /// cancelled (it must not take a later message), a receive that
    /// completed meanwhile is returned, and a send's request is forgotten
    /// (its fragments still go).
    fn wait_internal(&self, id: u64) -> Result<Completion, CommError> {
        match self.wait_id(id) {
            Ok(c) => Ok(c),
            Err(e) => self.with(|st, _, _| {
                if st.cancel_recv(id) {
                    return Err(e);
                }
                match st.take_complete(id) {
                    Some(r @ crate::request::ReqState::Recv { .. }) => r.finish(),
                    _ => {
                        st.forget(id);
                        Err(e)
                    }
                }
            }),
        }
    }

    fn wait_id(&self, id: u64) -> Result<Completion, CommError> {
        self.block_on(
            |st| st.describe(id),
            |st| match st.is_complete(id) {
                Err(e) => Some(Err(e)),
                Ok(false) => None,
                Ok(true) => Some(st.take_complete(id).expect("complete").finish()),
            },
        )
    }

    /// Waits until one of `reqs` completes; removes it from `reqs` and
    /// returns its former index and completion (MPI_Waitany, section 3.7.5).
    ///
    /// Errors: [`CommError::NoRequests`] for an empty `reqs`; a failed
    /// request's error (that request is removed too); as
    /// [`Communicator::wait`].
    pub fn wait_any(&self, reqs: &mut Vec<Request>) -> Result<(usize, Completion), CommError> {
        if reqs.is_empty() {
            return Err(CommError::NoRequests);
        }
        let ids: Vec<u64> = reqs.iter().map(|r| r.id).collect();
        let (i, r) = self.block_on(
            |_| format!("any of {} requests", ids.len()),
            |st| {
                for (i, &id) in ids.iter().enumerate() {
                    match st.is_complete(id) {
                        Err(e) => return Some(Err(e)),
                        Ok(true) => {
                            let done = st.take_complete(id).expect("complete").finish();
                            return Some(Ok((i, done)));
                        }
                        Ok(false) => {}
                    }
                }
                None
            },
        )?;
        let _completed = reqs.remove(i);
        r.map(|c| (i, c))
    }

    /// Waits for all of `reqs`, in order (MPI_Waitall, section 3.7.5).
    ///
    /// Errors: the first failure; the requests after it are still pending
    /// and dropped from the caller's view, but their state stays until
    /// the communicator is dropped.
    pub fn wait_all(&self, reqs: Vec<Request>) -> Result<Vec<Completion>, CommError> {
        reqs.into_iter().map(|r| self.wait(r)).collect()
    }

    /// Cancels receive `req` if no message has matched it (MPI_Cancel,
    /// section 3.8.4). Gives the request back when it cannot be cancelled
    /// (a send, or a receive already matched): complete it with `wait`.
    pub fn cancel(&self, req: Request) -> Result<(), Request> {
        if self.with(|st, _, _| st.cancel_recv(req.id)) {
            Ok(())
        } else {
            Err(req)
        }
    }

    /// Waits until every message sent so far is confirmed by its receiver's
    /// CTP endpoint (MPI_Finalize's duty: nothing still in flight is lost
    /// when the socket closes), at most `timeout`.
    ///
    /// Errors: [`CommError::TimedOut`]; transport errors.
    pub fn flush(&self, timeout: Duration) -> Result<(), CommError> {
        let r = self.sock.wait_upper(
            Deadline::from_timeout(Some(timeout)),
            "comm flush",
            |st: &mut State<T::Addr>, ep, now| {
                netcore::in_span!(st, crate::layer::step(st, ep, now));
                (st.snapshot().pending_fragments == 0
                    && ep.storage_sizes().awaiting_confirmation == 0)
                    .then_some(())
            },
        );
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(self.flush_timeout(timeout)),
            Err(e) => Err(e.into()),
        }
    }

    /// Ends this rank's part in the communicator (MPI_Finalize, MPI 4.0
    /// section 11.2.2): waits until its messages are confirmed, then for
    /// every rank to get there (a barrier), confirms the barrier's messages,
    /// and keeps answering for `CommConfig::linger` so that a peer's last
    /// resend is confirmed. All ranks must call it; messages sent to this
    /// rank and not received are lost when it returns, as in MPI.
    ///
    /// Errors: [`CommError::TimedOut`] when a flush exceeds `timeout`; those
    /// of [`Communicator::barrier`].
    pub fn finalize(self, timeout: Duration) -> Result<(), CommError> {
        self.flush(timeout)?;
        if let Some(m) = self.mcast.get() {
            if !m.flush(timeout)? {
                return Err(CommError::TimedOut {
                    what: "flush of this rank's multicast broadcasts".into(),
                    after: timeout,
                });
            }
        }
        self.barrier()?;
        self.flush(timeout)?;
        self.sock.poll(self.linger)?;
        Ok(())
    }

    fn flush_timeout(&self, after: Duration) -> CommError {
        CommError::TimedOut {
            what: format!(
                "flush of rank {} ({} fragments waiting, {} unconfirmed in CTP)",
                self.rank(),
                self.stats().pending_fragments,
                self.sock.status().awaiting_confirmation
            ),
            after,
        }
    }

    /// The window `peer` granted us, bytes: how much we may have
    /// unconfirmed toward it (the paper's `datagram_getdestbuf`; ULFC,
    /// `notes-mak-ulfc.md`). Before `peer`'s first grant, the default share
    /// `recv_budget_bytes / (size - 1)`; 0 for ourselves.
    ///
    /// Errors: [`CommError::InvalidRank`].
    pub fn dest_buf(&self, peer: usize) -> Result<usize, CommError> {
        self.progress()?;
        Ok(self.with(|st, _, _| st.dest_buf(peer))? as usize)
    }

    /// Asks `peer` for throughput priority (the paper's `datagram_through`):
    /// `peer` grants us the largest window it can, lowering its other
    /// peers' windows to `flow::MIN_WINDOW_BYTES` (each only once that peer
    /// has applied the lower grant, so the sum of its grants stays within
    /// its budget). [`Communicator::dest_buf`] shows the result once the
    /// grant arrives. Departure: the paper's "fewer ACKs" has no
    /// counterpart, CTP confirms every packet.
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::Disconnected`],
    /// [`CommError::SendQueueFull`] (16 control messages already queued).
    pub fn through(&self, peer: usize) -> Result<(), CommError> {
        self.request_mode(peer, Mode::Through)
    }

    /// Asks `peer` for response priority (the paper's `datagram_rapid`): a
    /// small window, `CommConfig::rapid_window_bytes`, so our messages to it
    /// wait behind few of ours. The paper's "ACK every packet" is what CTP
    /// always does (it confirms each packet at once, no delayed ACK), so no
    /// CTP option is needed.
    ///
    /// Errors: as [`Communicator::through`].
    pub fn rapid(&self, peer: usize) -> Result<(), CommError> {
        self.request_mode(peer, Mode::Rapid)
    }

    /// Asks `peer` for the default priority again (an equal share of its
    /// budget; not in the paper).
    ///
    /// Errors: as [`Communicator::through`].
    pub fn normal(&self, peer: usize) -> Result<(), CommError> {
        self.request_mode(peer, Mode::Normal)
    }

    fn request_mode(&self, peer: usize, mode: Mode) -> Result<(), CommError> {
        self.with(|st, ep, now| {
            st.request_mode(peer, mode)?;
            crate::layer::step(st, ep, now);
            Ok(())
        })
    }

    /// Explicitly suspends the connection to `peer` (the paper's
    /// `datagram_disconnect`): from now on every write to `peer` fails at
    /// once with [`CommError::Disconnected`]; messages accepted before are
    /// kept (those already handed to CTP are still delivered) and the rest
    /// go after [`Communicator::reconnect`], each exactly once. `peer` is
    /// told (`DISCONNECT`) and grants us nothing more until then. Only
    /// `reconnect` ends it (it wins over an implicit disconnect).
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::SendQueueFull`].
    pub fn disconnect(&self, peer: usize) -> Result<(), CommError> {
        self.with(|st, ep, now| {
            st.disconnect(peer)?;
            crate::layer::step(st, ep, now);
            Ok(())
        })
    }

    /// Ends an explicit disconnect from `peer` (the paper's
    /// `datagram_reconnect`): sends `CONNECT`, and the messages kept go.
    /// Does nothing on a connected peer.
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::SendQueueFull`].
    pub fn reconnect(&self, peer: usize) -> Result<(), CommError> {
        self.with(|st, ep, now| {
            st.reconnect(peer)?;
            crate::layer::step(st, ep, now);
            Ok(())
        })
    }

    /// Restarts the numbering of our messages to `peer` (the paper's
    /// sequence reset; `SEQ_RESET`): `peer` drops what it holds of our
    /// unfinished messages and expects our next message as the first. Use
    /// it after this rank restarted, toward each peer before sending, so
    /// that peers that knew the previous process accept the new one's
    /// messages; the next message to `peer` waits until the reset is
    /// confirmed.
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::Disconnected`],
    /// [`CommError::ResetBusy`] while messages to `peer` are queued or
    /// unconfirmed (call [`Communicator::flush`] first),
    /// [`CommError::SendQueueFull`].
    pub fn reset_seq(&self, peer: usize) -> Result<(), CommError> {
        self.progress()?;
        self.with(|st, ep, now| {
            st.reset_seq(peer)?;
            crate::layer::step(st, ep, now);
            Ok(())
        })
    }

    /// `peer`'s connection state (the paper's `datagram_state`), after one
    /// progress step.
    ///
    /// Errors: [`CommError::InvalidRank`], transport errors.
    pub fn state(&self, peer: usize) -> Result<PeerState, CommError> {
        self.progress()?;
        self.with(|st, _, _| st.peer_state(peer))
    }

    /// How long `peer` has been silent if it is *suspected*, after one
    /// progress step: it answered nothing (no message, no confirmation)
    /// for `CommConfig::suspect_timeout` while this rank waited on it, or
    /// CTP found it silent at a message's error deadline. Nothing fails
    /// while a peer is only suspected: it is probed, and its calls fail
    /// with [`CommError::PeerFailed`] only at `CommConfig::failure_timeout`
    /// (then [`Communicator::state`] says [`PeerState::Failed`] and this
    /// returns `None`). `None` also while it answers, and for ourselves.
    /// Units: the duration is the silence so far.
    ///
    /// Errors: [`CommError::InvalidRank`], transport errors.
    pub fn unresponsive(&self, peer: usize) -> Result<Option<Duration>, CommError> {
        self.progress()?;
        self.with(|st, _, _| st.unresponsive(peer))
    }

    /// Sends on the collective context (for `collective.rs`).
    pub(crate) fn coll_send(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        let id = self.with(|st, ep, now| {
            let id = st.isend(dest, tag, &[data], true)?;
            crate::layer::step(st, ep, now);
            Ok::<_, CommError>(id)
        })?;
        self.wait_internal(id).map(|_| ())
    }

    /// Receives on the collective context (for `collective.rs`).
    pub(crate) fn coll_recv(&self, source: usize, tag: Tag) -> Result<Vec<u8>, CommError> {
        let id = self.with(|st, _, _| st.irecv(SourceSel::Rank(source), TagSel::Tag(tag), true))?;
        let c = self.wait_internal(id)?;
        Ok(c.into_received().expect("a receive").1)
    }

    /// The MAK member of `bcast`, if enabled.
    pub(crate) fn mcast(&self) -> Option<&Mcast> {
        self.mcast.get()
    }

    /// `root`'s next broadcast from the group; meanwhile progress with
    /// `root` watched by the failure detector, within
    /// `CommConfig::wait_timeout`.
    ///
    /// Errors: [`CommError::PeerFailed`] when `root` fails,
    /// [`CommError::TimedOut`], those of [`Mcast::recv_from`].
    pub(crate) fn await_multicast(&self, m: &Mcast, root: usize) -> Result<Vec<u8>, CommError> {
        let limit = self.wait_timeout;
        self.with(|st, _, _| st.awaited = Some(root));
        let deadline = limit.map(|t| Instant::now() + t);
        let r = m.recv_from(root, || {
            if let Some(e) = self.turn(|st| st.failure(root))? {
                return Err(e);
            }
            match deadline {
                Some(d) if Instant::now() >= d => Err(CommError::TimedOut {
                    what: format!("broadcast from rank {root} over multicast"),
                    after: limit.unwrap_or_default(),
                }),
                _ => Ok(()),
            }
        });
        self.with(|st, _, _| st.awaited = None);
        r
    }

    /// The next collective's tag (all ranks call collectives in the same
    /// order, MPI 4.0 section 6.12, so their counters agree).
    pub(crate) fn next_coll_tag(&self) -> Tag {
        self.with(|st, _, _| st.next_coll_tag())
    }
}

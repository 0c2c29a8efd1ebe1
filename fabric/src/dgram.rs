//! The FI_EP_DGRAM endpoint (fi_endpoint(3), fi_msg(3)): unreliable
//! datagrams of at most `max_msg_size` bytes over one EDP socket, each
//! received into the oldest posted buffer.
//!
//! - Send (`fi_send`, `fi_inject`): the datagram is handed to the link
//!   before the call returns (so every send is an inject); its completion,
//!   when one is asked for, is written at once. A full link queue is
//!   FI_EAGAIN, as is a full transmit CQ (FI_RM_ENABLED).
//! - Receive (`fi_recv`): buffers wait in post order; reading a CQ bound
//!   to the endpoint takes datagrams from the socket straight into them
//!   (the EDP socket copies from the RX ring into the buffer) and writes
//!   their completions, with the sender's `fi_addr_t` (FI_SOURCE). A
//!   datagram longer than its buffer fills it and completes with FI_ETRUNC
//!   and the overflow length (olen). Datagrams arriving while no buffer is
//!   posted wait in the socket's bounded queue.
//! - Datagrams to the endpoint's own name never reach the wire (AF_PACKET
//!   does not loop a host's frames back): they go to a bounded local queue
//!   that feeds the receive side the same way.
//! - `fi_cancel` completes a posted receive with FI_ECANCELED.

use runtime::EthAddr;
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use comm::RecvBuf;
use edp::EdpSocket;

use crate::addr::{Name, NameInfo};
use crate::av::{Av, PeerSink, FI_ADDR_NOTAVAIL};
use crate::cq::{Completion, Cq, CqSource, Entry, ErrCompletion};
use crate::error::{FiError, FiResult, ProvErrno};
use crate::fi;
use crate::limits::RX_SIZE;
use crate::link::Carrier;

struct Posted {
    buf: Box<dyn RecvBuf>,
    context: u64,
    completion: bool,
}

/// Datagrams to ourselves waiting for a receive, at most this many.
pub const LOOPBACK_QUEUE: usize = RX_SIZE;

struct State {
    sock: EdpSocket,
    posted: VecDeque<Posted>,
    loopback: VecDeque<Vec<u8>>,
    scratch: Vec<u8>,
    av: Option<Arc<Av>>,
    tx_cq: Option<Arc<Cq>>,
    rx_cq: Option<Arc<Cq>>,
    tx_selective: bool,
    rx_selective: bool,
    enabled: bool,
}

/// How a send completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// As the endpoint's binding says (`fi_send`: completion unless the
    /// CQ was bound with FI_SELECTIVE_COMPLETION and the op flags lack
    /// FI_COMPLETION).
    Default,
    /// `fi_sendmsg` with these flags.
    Flags(u64),
    /// `fi_inject`: no completion.
    Inject,
}

/// A DGRAM endpoint. See the module documentation.
pub struct DgramEp {
    name: Name,
    /// What its name tells (fi_getname).
    info: NameInfo,
    max: usize,
    tx_op_flags: u64,
    rx_op_flags: u64,
    rx_size: usize,
    /// Over a UDP link: its peer table, which the address vector's names
    /// join.
    peers: Option<Arc<link::UdpPeers>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for DgramEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DgramEp")
            .field("name", &self.name)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl DgramEp {
    /// An endpoint on `carrier` taking datagrams of at most `max` bytes,
    /// whose name tells `info`, with the default op flags of its fi_info
    /// and `rx_size` posted receives at most.
    pub fn new(
        carrier: Carrier,
        info: NameInfo,
        max: usize,
        tx_op_flags: u64,
        rx_op_flags: u64,
        rx_size: usize,
    ) -> Arc<DgramEp> {
        let Carrier { sock, name, peers } = carrier;
        Arc::new(DgramEp {
            name,
            info,
            max,
            tx_op_flags,
            rx_op_flags,
            rx_size: rx_size.clamp(1, RX_SIZE),
            peers,
            state: Mutex::new(State {
                sock,
                posted: VecDeque::new(),
                loopback: VecDeque::new(),
                scratch: vec![0u8; max],
                av: None,
                tx_cq: None,
                rx_cq: None,
                tx_selective: false,
                rx_selective: false,
                enabled: false,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The endpoint's name as `fi_getname` gives it.
    pub fn name_bytes(&self) -> Vec<u8> {
        self.name.encode_with(&self.info)
    }

    /// Binds the address vector sends resolve through (over a UDP link
    /// its names, present and future, join the link's peer table).
    ///
    /// Errors: `FI_EINVAL` when one is bound already or its format differs.
    pub fn bind_av(self: &Arc<Self>, av: Arc<Av>) -> FiResult<()> {
        if av.format != self.name.format() {
            return Err(FiError::inval("address vector of another address format"));
        }
        let mut s = self.lock();
        if s.av.is_some() {
            return Err(FiError::inval("an address vector is bound already"));
        }
        if self.peers.is_some() {
            let sink: Weak<dyn PeerSink> = Arc::downgrade(self) as Weak<dyn PeerSink>;
            for (a, n, i) in av.subscribe(sink) {
                self.peer_added(a, &n, &i)?;
            }
        }
        s.av = Some(av);
        Ok(())
    }

    /// Binds `cq` for the directions in `flags` (FI_TRANSMIT, FI_RECV,
    /// FI_SELECTIVE_COMPLETION).
    ///
    /// Errors: `FI_EINVAL` when a direction has a CQ already or `flags`
    /// names none.
    pub fn bind_cq(self: &Arc<Self>, cq: Arc<Cq>, flags: u64) -> FiResult<()> {
        let (tx, rx) = (flags & fi::FI_TRANSMIT != 0, flags & fi::FI_RECV != 0);
        if !tx && !rx {
            return Err(FiError::inval(
                "fi_ep_bind of a CQ needs FI_TRANSMIT and/or FI_RECV",
            ));
        }
        let sel = flags & fi::FI_SELECTIVE_COMPLETION != 0;
        let mut s = self.lock();
        if (tx && s.tx_cq.is_some()) || (rx && s.rx_cq.is_some()) {
            return Err(FiError::inval("a CQ is bound for that direction already"));
        }
        if tx {
            s.tx_cq = Some(cq.clone());
            s.tx_selective = sel;
        }
        if rx {
            s.rx_cq = Some(cq.clone());
            s.rx_selective = sel;
        }
        drop(s);
        let me: Weak<dyn CqSource> = Arc::downgrade(self) as Weak<dyn CqSource>;
        cq.add_source(me);
        Ok(())
    }

    /// fi_enable.
    ///
    /// Errors: `FI_ENOCQ`/`FI_ENOAV`-style `FI_EINVAL` when a CQ or the
    /// address vector is missing.
    pub fn enable(&self) -> FiResult<()> {
        let mut s = self.lock();
        if s.tx_cq.is_none() || s.rx_cq.is_none() {
            return Err(FiError::new(
                fi::FI_ENOCQ,
                "bind a CQ for FI_TRANSMIT and FI_RECV before fi_enable",
            ));
        }
        if s.av.is_none() {
            return Err(FiError::new(
                fi::FI_ENOAV,
                "bind an address vector before fi_enable",
            ));
        }
        s.enabled = true;
        Ok(())
    }

    /// Posts a receive (fi_recv / fi_recvmsg).
    ///
    /// Errors: `FI_EOPBADSTATE` before fi_enable; `FI_EAGAIN` when
    /// `rx_size` receives are posted.
    pub fn post_recv(
        &self,
        buf: Box<dyn RecvBuf>,
        context: u64,
        flags: Option<u64>,
    ) -> FiResult<()> {
        let mut s = self.lock();
        if !s.enabled {
            return Err(FiError::new(fi::FI_EOPBADSTATE, "fi_recv before fi_enable"));
        }
        if s.posted.len() >= self.rx_size {
            return Err(FiError::again(format!(
                "{} receives posted already",
                self.rx_size
            )));
        }
        let flags = flags.unwrap_or(self.rx_op_flags);
        let completion = !s.rx_selective || flags & fi::FI_COMPLETION != 0;
        s.posted.push_back(Posted {
            buf,
            context,
            completion,
        });
        Ok(())
    }

    /// Sends `data` to `dest` (an `fi_addr_t` of the bound address vector).
    ///
    /// Errors: `FI_EMSGSIZE` above `max_msg_size`; `FI_EINVAL` for an
    /// address not in the vector; `FI_EAGAIN` when the link's queue or the
    /// transmit CQ is full; `FI_EOPBADSTATE` before fi_enable; link errors.
    pub fn send(&self, data: &[u8], dest: u64, context: u64, mode: SendMode) -> FiResult<()> {
        if data.len() > self.max {
            return Err(FiError::new(
                fi::FI_EMSGSIZE,
                format!(
                    "datagram of {} bytes exceeds max_msg_size {}",
                    data.len(),
                    self.max
                ),
            ));
        }
        let mut s = self.lock();
        if !s.enabled {
            return Err(FiError::new(fi::FI_EOPBADSTATE, "fi_send before fi_enable"));
        }
        let to =
            s.av.as_ref()
                .ok_or_else(|| FiError::new(fi::FI_ENOAV, "no address vector bound"))?
                .lookup(dest)?;
        let completion = match mode {
            SendMode::Inject => false,
            SendMode::Default => !s.tx_selective || self.tx_op_flags & fi::FI_COMPLETION != 0,
            SendMode::Flags(f) => !s.tx_selective || f & fi::FI_COMPLETION != 0,
        };
        let cq = s
            .tx_cq
            .clone()
            .expect("enabled endpoints have a transmit CQ");
        if completion && !cq.has_room(1) {
            return Err(FiError::again("transmit CQ full: read it"));
        }
        if to == self.name {
            // A full local queue drops the datagram, as a full receive queue
            // of the socket does.
            if s.loopback.len() < LOOPBACK_QUEUE {
                s.loopback.push_back(data.to_vec());
            }
        } else {
            let wire = to.wire();
            match s.sock.send_to(data, wire) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(FiError::again("link transmit queue full"))
                }
                Err(e) => return Err(FiError::io(&format!("send to {to}"), &e)),
            }
        }
        drop(s);
        if completion {
            let c = Completion {
                context,
                flags: fi::FI_MSG | fi::FI_SEND,
                ..Completion::default()
            };
            // Room was checked; a racing writer can only make this fail
            // under FI_RM_DISABLED-style misuse, and then the entry is lost
            // with a warning rather than blocking a send that went out.
            if cq.push(Entry::Ok(c)).is_err() {
                tracing::warn!("clusternet: transmit CQ overrun, send completion lost");
            }
        }
        Ok(())
    }

    /// Cancels the posted receive with `context`: it completes with
    /// FI_ECANCELED. Returns whether one was found.
    pub fn cancel(&self, context: u64) -> bool {
        let mut s = self.lock();
        let Some(i) = s.posted.iter().position(|p| p.context == context) else {
            return false;
        };
        s.posted.remove(i);
        let cq = s.rx_cq.clone();
        drop(s);
        if let Some(cq) = cq {
            let e = ErrCompletion {
                base: Completion {
                    context,
                    flags: fi::FI_MSG | fi::FI_RECV,
                    src: FI_ADDR_NOTAVAIL,
                    ..Completion::default()
                },
                err: fi::FI_ECANCELED,
                olen: 0,
                prov: ProvErrno::Canceled,
                msg: "receive canceled by fi_cancel".into(),
                data: Vec::new(),
            };
            let _ = cq.push(Entry::Err(e));
        }
        true
    }

    /// Receives what is ready into posted buffers, completing them.
    fn receive(&self) {
        let mut s = self.lock();
        let Some(cq) = s.rx_cq.clone() else {
            return;
        };
        while !s.posted.is_empty() && cq.has_room(1) {
            let State {
                sock,
                posted,
                loopback,
                scratch,
                av,
                ..
            } = &mut *s;
            let p = posted.front_mut().expect("checked non-empty");
            let cap = p.buf.bytes_mut().len();
            let (len, src) = if let Some(d) = loopback.pop_front() {
                let n = d.len().min(cap);
                p.buf.bytes_mut()[..n].copy_from_slice(&d[..n]);
                (d.len(), self.name.wire())
            } else {
                let direct = cap >= self.max;
                let r = if direct {
                    sock.recv_from(p.buf.bytes_mut())
                } else {
                    sock.recv_from(scratch)
                };
                match r {
                    Ok((n, mac, port)) => {
                        if !direct {
                            let k = n.min(cap);
                            p.buf.bytes_mut()[..k].copy_from_slice(&scratch[..k]);
                        }
                        (n, EthAddr::new(mac, port))
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "clusternet: DGRAM receive failed");
                        break;
                    }
                }
            };
            let src = av.as_ref().map_or(FI_ADDR_NOTAVAIL, |a| a.reverse(src));
            let p = posted.pop_front().expect("checked non-empty");
            let base = Completion {
                context: p.context,
                flags: fi::FI_MSG | fi::FI_RECV,
                len: len.min(cap),
                src,
                ..Completion::default()
            };
            let entry = if len > cap {
                Entry::Err(ErrCompletion {
                    base,
                    err: fi::FI_ETRUNC,
                    olen: len - cap,
                    prov: ProvErrno::Truncated,
                    msg: format!("datagram of {len} bytes into a {cap}-byte buffer"),
                    data: Vec::new(),
                })
            } else if p.completion {
                Entry::Ok(base)
            } else {
                continue;
            };
            if cq.push(entry).is_err() {
                tracing::warn!("clusternet: receive CQ overrun, completion lost");
            }
        }
    }
}

impl PeerSink for DgramEp {
    fn peer_added(&self, _addr: u64, name: &Name, _info: &NameInfo) -> FiResult<()> {
        match &self.peers {
            Some(p) => crate::link::add_udp_peer(p, name),
            None => Ok(()),
        }
    }
}

impl CqSource for DgramEp {
    fn progress(&self) {
        self.receive();
    }
}

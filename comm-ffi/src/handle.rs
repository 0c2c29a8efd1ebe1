//! The safe side of the C ABI: a communicator over CTP on UDP or on EDP,
//! the calls C reaches, and the mapping of [`CommError`] to the ABI's error
//! codes. No pointer is touched here (that is `ffi`'s job).

use std::net::SocketAddr;
use std::time::Duration;

use comm::{CommConfig, CommError, Communicator, PeerState, SourceSel, Status, TagSel};
use ctp::{CtpConfig, EdpTransport, UdpTransport};

use crate::codes;

/// An error on its way to C: a `codes::COMM_ERR_*` code and the message
/// `comm_last_error` returns.
#[derive(Debug)]
pub(crate) struct FfiError {
    pub code: i32,
    pub msg: String,
    /// A truncated receive's message: (source, tag, length in bytes).
    pub truncated: Option<(usize, u32, usize)>,
}

impl FfiError {
    pub fn arg(msg: impl Into<String>) -> Self {
        FfiError {
            code: codes::COMM_ERR_ARG,
            msg: msg.into(),
            truncated: None,
        }
    }
}

impl From<CommError> for FfiError {
    fn from(e: CommError) -> Self {
        let code = match &e {
            CommError::InvalidRank { .. }
            | CommError::InvalidTag(_)
            | CommError::TooLarge { .. }
            | CommError::Bootstrap(_) => codes::COMM_ERR_ARG,
            CommError::Truncated { .. } => codes::COMM_ERR_TRUNCATED,
            CommError::PeerFailed { .. } => codes::COMM_ERR_PEER,
            CommError::Disconnected { .. } => codes::COMM_ERR_DISCONNECTED,
            CommError::TimedOut { .. } => codes::COMM_ERR_TIMEOUT,
            CommError::Io(_) => codes::COMM_ERR_IO,
            _ => codes::COMM_ERR_OTHER,
        };
        let truncated = match e {
            CommError::Truncated { len, from, tag, .. } => Some((from, tag, len)),
            _ => None,
        };
        FfiError {
            code,
            msg: e.to_string(),
            truncated,
        }
    }
}

/// The ULFC calls that take a peer and return nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FlowOp {
    Through,
    Rapid,
    Normal,
    Disconnect,
    Reconnect,
    ResetSeq,
}

/// A communicator of either carrier.
pub(crate) enum Handle {
    Udp(Communicator<UdpTransport>),
    Edp(Communicator<EdpTransport>),
}

/// Runs `$e` with `$c` bound to the communicator, whatever its carrier.
macro_rules! each {
    ($h:expr, $c:ident => $e:expr) => {
        match $h {
            Handle::Udp($c) => $e,
            Handle::Edp($c) => $e,
        }
    };
}

fn rank_of(rank: i32, size: usize) -> Result<usize, FfiError> {
    usize::try_from(rank)
        .ok()
        .filter(|&r| r < size)
        .ok_or_else(|| FfiError::arg(format!("rank {rank} is not in 0..{size}")))
}

impl Handle {
    /// Rank `rank` of the communicator of `addrs` ("IP:PORT" each, rank i
    /// at `addrs[i]`) over CTP on UDP.
    pub fn udp(rank: i32, addrs: &[String]) -> Result<Self, FfiError> {
        let hosts = addrs
            .iter()
            .map(|a| {
                a.parse::<SocketAddr>()
                    .map_err(|e| FfiError::arg(format!("address {a:?} is not IP:PORT: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rank = rank_of(rank, hosts.len())?;
        Ok(Handle::Udp(Communicator::bind_udp(
            rank,
            hosts,
            CommConfig::default(),
            CtpConfig::default(),
        )?))
    }

    /// Rank `rank` of the communicator of `addrs` ("MAC/PORT" each) over
    /// CTP on EDP on `iface` (needs CAP_NET_RAW).
    pub fn edp(iface: &str, rank: i32, addrs: &[String]) -> Result<Self, FfiError> {
        let hosts = addrs
            .iter()
            .map(|a| {
                a.parse::<runtime::EthAddr>()
                    .map_err(|_| FfiError::arg(format!("address {a:?} is not MAC/PORT")))
            })
            .collect::<Result<Vec<_>, FfiError>>()?;
        let rank = rank_of(rank, hosts.len())?;
        Ok(Handle::Edp(Communicator::bind_edp(
            iface,
            rank,
            hosts,
            CommConfig::default(),
            CtpConfig::default(),
        )?))
    }

    pub fn rank(&self) -> usize {
        each!(self, c => c.rank())
    }

    pub fn size(&self) -> usize {
        each!(self, c => c.size())
    }

    pub fn send(&self, dest: i32, tag: i32, data: &[u8]) -> Result<(), FfiError> {
        let dest = rank_of(dest, self.size())?;
        let tag =
            u32::try_from(tag).map_err(|_| FfiError::arg(format!("tag {tag} is negative")))?;
        Ok(each!(self, c => c.send(dest, tag, data))?)
    }

    /// Receives into `buf`; `source`/`tag` -1 are the wildcards.
    pub fn recv(&self, source: i32, tag: i32, buf: &mut [u8]) -> Result<Status, FfiError> {
        let source = if source == codes::COMM_ANY_SOURCE {
            SourceSel::Any
        } else {
            SourceSel::Rank(rank_of(source, self.size())?)
        };
        let tag = match tag {
            codes::COMM_ANY_TAG => TagSel::Any,
            t => TagSel::Tag(
                u32::try_from(t).map_err(|_| FfiError::arg(format!("tag {t} is negative")))?,
            ),
        };
        Ok(each!(self, c => c.recv_into(source, tag, buf))?)
    }

    pub fn barrier(&self) -> Result<(), FfiError> {
        Ok(each!(self, c => c.barrier())?)
    }

    /// Broadcasts root's `buf` into every rank's `buf` (all of one length).
    pub fn bcast(&self, root: i32, buf: &mut [u8]) -> Result<(), FfiError> {
        let root = rank_of(root, self.size())?;
        let mut v = buf.to_vec();
        each!(self, c => c.bcast(root, &mut v))?;
        if v.len() != buf.len() {
            return Err(FfiError {
                code: codes::COMM_ERR_TRUNCATED,
                msg: format!(
                    "bcast from rank {root} carried {} bytes into a buffer of {}",
                    v.len(),
                    buf.len()
                ),
                truncated: None,
            });
        }
        buf.copy_from_slice(&v);
        Ok(())
    }

    pub fn allreduce_i64(&self, v: &mut [i64]) -> Result<(), FfiError> {
        Ok(each!(self, c => c.allreduce_sum(v))?)
    }

    pub fn allreduce_f64(&self, v: &mut [f64]) -> Result<(), FfiError> {
        Ok(each!(self, c => c.allreduce_sum(v))?)
    }

    /// The ULFC call `op` on `peer` (notes-mak-ulfc.md, "ULFC").
    pub fn flow(&self, peer: i32, op: FlowOp) -> Result<(), FfiError> {
        let p = rank_of(peer, self.size())?;
        each!(self, c => match op {
            FlowOp::Through => c.through(p),
            FlowOp::Rapid => c.rapid(p),
            FlowOp::Normal => c.normal(p),
            FlowOp::Disconnect => c.disconnect(p),
            FlowOp::Reconnect => c.reconnect(p),
            FlowOp::ResetSeq => c.reset_seq(p),
        })?;
        Ok(())
    }

    /// The window `peer` granted us, bytes.
    pub fn dest_buf(&self, peer: i32) -> Result<usize, FfiError> {
        let p = rank_of(peer, self.size())?;
        Ok(each!(self, c => c.dest_buf(p))?)
    }

    /// `peer`'s state as the ABI's `COMM_STATE_*` number.
    pub fn state(&self, peer: i32) -> Result<i32, FfiError> {
        let p = rank_of(peer, self.size())?;
        Ok(match each!(self, c => c.state(p))? {
            PeerState::Unconnected => codes::COMM_STATE_UNCONNECTED,
            PeerState::Connecting => codes::COMM_STATE_CONNECTING,
            PeerState::Connected => codes::COMM_STATE_CONNECTED,
            PeerState::ExplicitDisconnect => codes::COMM_STATE_EXPLICIT_DISCONNECT,
            PeerState::ImplicitDisconnect => codes::COMM_STATE_IMPLICIT_DISCONNECT,
            PeerState::Failed => codes::COMM_STATE_FAILED,
        })
    }

    /// `bcast` over MAK multicast from now on (EDP only).
    pub fn enable_multicast_bcast(&self, group: u16, port: u16) -> Result<(), FfiError> {
        match self {
            Handle::Edp(c) => Ok(c.enable_multicast_bcast(group, port)?),
            Handle::Udp(_) => Err(FfiError::arg(
                "multicast bcast needs a communicator over EDP (comm_init_edp)",
            )),
        }
    }

    pub fn finalize(self, timeout: Duration) -> Result<(), FfiError> {
        Ok(each!(self, c => c.finalize(timeout))?)
    }
}

//! `bcast` over MAK reliable multicast where the link has it: every rank is a
//! member of one MAK group on the communicator's interface (`mak::socket`,
//! EDP to a group MAC), sending its own stream and following every other
//! rank's. The root of a broadcast sends the data once, to the group MAC;
//! the switch (here the bridge) copies the frames; each other rank takes
//! the root's next message from the group.
//!
//! Order: MPI requires every rank to call the collectives in the same order
//! (MPI 4.0 section 6.14), so a rank's k-th broadcast from root `r` is `r`'s
//! k-th group message; a message from another root that arrives first (a
//! later broadcast of a faster rank) is kept, per source, until its
//! broadcast is called. At most `MAX_STASHED` are kept per source; more
//! means the ranks do not call the same collectives, and the broadcast
//! fails with `CommError::Collective`.
//!
//! Failures: a rank waiting for a root's broadcast waits in slices of
//! [`SLICE`]; between slices the communicator makes progress with the root
//! watched by the failure detector (`liveness.rs`), so a root that died is
//! reported as `PeerFailed` within `CommConfig::failure_timeout`, as for a
//! receive naming it; `CommConfig::wait_timeout` bounds the whole wait.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use ctp::EthAddr;
use mak::socket::{EdpCarrier, EdpGroup, GroupSpec, MakConfig, MakSocket, Peer};
use runtime::{Runtime, WaitPolicy};

use crate::CommError;

/// Most messages kept per source for broadcasts not yet called.
pub const MAX_STASHED: usize = 64;

/// How long one wait for the group lasts before the caller's check runs.
pub const SLICE: Duration = Duration::from_millis(10);

/// The communicator's MAK member (see the module documentation).
pub(crate) struct Mcast {
    sock: MakSocket<EdpCarrier>,
    stash: Mutex<Vec<VecDeque<Vec<u8>>>>,
    group: u16,
}

impl std::fmt::Debug for Mcast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mcast").field("group", &self.group).finish()
    }
}

impl Mcast {
    /// Joins MAK group `group` at EDP `port` on `rt` as rank `rank` of
    /// `hosts` (member id = rank; every member at `(MAC of hosts[i], port)`).
    ///
    /// Errors: those of `MakSocket::bind_edp_on` (`AddrInUse` for a taken
    /// port, `InvalidInput` for more than 65535 ranks).
    pub fn join(
        rt: &Runtime,
        rank: usize,
        hosts: &[EthAddr],
        group: u16,
        port: u16,
        wait: WaitPolicy,
        timeout: Option<Duration>,
    ) -> Result<Self, CommError> {
        let id = |r: usize| {
            u16::try_from(r).map_err(|_| {
                CommError::Bootstrap(format!(
                    "MAK groups have at most 65536 members; rank {r} does not fit"
                ))
            })
        };
        let members = hosts
            .iter()
            .enumerate()
            .map(|(r, h)| {
                Ok(Peer::new(
                    id(r)?,
                    EthAddr::new(h.mac, port),
                    format!("rank {r}"),
                ))
            })
            .collect::<Result<Vec<_>, CommError>>()?;
        let mut spec = GroupSpec::new(group, id(rank)?, members).sender();
        for r in (0..hosts.len()).filter(|&r| r != rank) {
            spec = spec.receive_from(id(r)?);
        }
        let cfg = MakConfig {
            wait,
            ..MakConfig::default()
        };
        let mut sock = MakSocket::bind_edp_on(rt, EdpGroup::new(group, port), spec, cfg)?;
        sock.set_read_timeout(Some(SLICE))?;
        sock.set_write_timeout(timeout)?;
        Ok(Self {
            sock,
            stash: Mutex::new(vec![VecDeque::new(); hosts.len()]),
            group,
        })
    }

    /// The root's side: `data` to every other rank, once.
    ///
    /// Errors: MAK's send errors (`TimedOut` when the window stays full).
    pub fn send(&self, data: &[u8]) -> Result<(), CommError> {
        self.sock.send(data)?;
        Ok(())
    }

    /// The next message of `root`'s stream; `between` runs after every
    /// [`SLICE`] without it (the caller's progress and failure check: its
    /// error ends the wait).
    ///
    /// Errors: `CommError::Collective` when more than [`MAX_STASHED`]
    /// messages of other roots wait; those of `between`; MAK's receive
    /// errors (`ConnectionAborted` for an abandoned stream).
    pub fn recv_from(
        &self,
        root: usize,
        mut between: impl FnMut() -> Result<(), CommError>,
    ) -> Result<Vec<u8>, CommError> {
        let mut stash = self.stash.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = stash[root].pop_front() {
            return Ok(d);
        }
        loop {
            let m = match self.sock.recv() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    between()?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let src = usize::from(m.source.0);
            if src == root {
                return Ok(m.data);
            }
            let q = stash.get_mut(src).ok_or_else(|| {
                CommError::Collective(format!("MAK message from unknown member {src}"))
            })?;
            if q.len() >= MAX_STASHED {
                return Err(CommError::Collective(format!(
                    "waiting for rank {root}'s broadcast, {MAX_STASHED} broadcasts of rank {src} \
                     arrived first: do all ranks call the same collectives in the same order?"
                )));
            }
            q.push_back(m.data);
        }
    }

    /// Waits until every rank acknowledged this rank's broadcasts (at
    /// `finalize`); returns whether they did within `timeout`.
    ///
    /// Errors: link errors.
    pub fn flush(&self, timeout: Duration) -> Result<bool, CommError> {
        Ok(self.sock.flush(Some(timeout))?)
    }

    /// MAK's counters.
    pub fn stats(&self) -> mak::socket::MakStats {
        self.sock.stats()
    }
}

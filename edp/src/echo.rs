//! EDP echo, the requesting side: [`Pinger`] and [`ping`] for fast
//! dead-host detection (a short echo timeout instead of a long connect(),
//! as the LAM journal recommends), and [`find_interface`] (thesis ch. 6.3:
//! which interface reaches a peer's MAC).
//!
//! The control port's codec and the answering rule are the runtime's
//! (`runtime::control`): the runtime that holds the host's control lease
//! answers requests whatever sockets its process has, as the protocol
//! module in the thesis's kernel does. They are re-exported here.

use std::io;
use std::time::{Duration, Instant};

pub use runtime::control::{answer, EchoRepr, Verdict, ECHO_HEADER_LEN, ECHO_REPLY, ECHO_REQUEST};
use runtime::{Deadline, Runtime, RuntimeConfig, CONTROL_PORT};

use crate::socket::{EdpConfig, EdpSocket};
use crate::wire::MacAddr;

/// Echo requests one [`Pinger::ping`] sends, spread over its timeout.
pub const PING_ATTEMPTS: u32 = 3;

/// Sends echo requests from an ephemeral EDP port of its runtime and waits
/// for the replies.
#[derive(Debug)]
pub struct Pinger {
    sock: EdpSocket,
    ident: u16,
    seq: u32,
}

impl Pinger {
    /// A pinger on the process's default runtime for `iface`.
    ///
    /// Errors: those of [`EdpSocket::bind`] (no interface, no CAP_NET_RAW,
    /// no free ephemeral port).
    pub fn new(iface: &str) -> io::Result<Self> {
        let rt = Runtime::shared(iface, &RuntimeConfig::default())?;
        Self::on(&rt)
    }

    /// A pinger on `rt`.
    ///
    /// Errors: those of [`EdpSocket::bind_on`].
    pub fn on(rt: &Runtime) -> io::Result<Self> {
        let sock = EdpSocket::bind_on(rt, 0, &EdpConfig::default())?;
        Ok(Self {
            sock,
            ident: rand::random(),
            seq: rand::random(),
        })
    }

    /// Round-trip time to the echo responder of `mac`. Sends up to
    /// [`PING_ATTEMPTS`] requests, evenly spread over `timeout`, and returns
    /// the RTT of the first reply (measured from the request it answers).
    ///
    /// Errors: `TimedOut` when no reply arrives within about `timeout`
    /// (the host is down, unreachable on this interface, or runs no EDP
    /// process); `InvalidInput` for a group `mac` or a zero timeout; link
    /// errors.
    pub fn ping(&mut self, mac: MacAddr, timeout: Duration) -> io::Result<Duration> {
        if mac.is_group() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot ping group address {mac}: responders never answer group-addressed control frames"),
            ));
        }
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ping timeout must not be zero",
            ));
        }
        let start = Instant::now();
        // A timeout too large to represent is capped at a day.
        let timeout = timeout.min(Duration::from_secs(86_400));
        let deadline = start + timeout;
        let interval = timeout / PING_ATTEMPTS;
        let first_seq = self.seq;
        let mut sent_at = [start; PING_ATTEMPTS as usize];
        let mut sent = 0u32;
        let mut buf = vec![0u8; self.sock.mtu()];
        loop {
            let now = Instant::now();
            if sent < PING_ATTEMPTS && now >= start + interval * sent {
                let mut payload = [0u8; ECHO_HEADER_LEN];
                EchoRepr {
                    kind: ECHO_REQUEST,
                    ident: self.ident,
                    seq: first_seq.wrapping_add(sent),
                }
                .emit(&mut payload);
                sent_at[sent as usize] = Instant::now();
                match self.sock.send_control(&payload, mac) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                sent += 1;
            }
            let next_send = if sent < PING_ATTEMPTS {
                start + interval * sent
            } else {
                deadline
            };
            match self
                .sock
                .recv_until(&mut buf, Deadline::At(next_send.min(deadline)))
            {
                Ok((n, from, port)) => {
                    let at = Instant::now();
                    if from != mac || port != CONTROL_PORT {
                        continue;
                    }
                    let Ok((r, _)) = EchoRepr::parse(&buf[..n]) else {
                        continue;
                    };
                    let k = r.seq.wrapping_sub(first_seq);
                    if r.kind == ECHO_REPLY && r.ident == self.ident && k < sent {
                        self.seq = first_seq.wrapping_add(sent);
                        return Ok(at - sent_at[k as usize]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                self.seq = first_seq.wrapping_add(sent);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no echo reply from {mac} on {} within {timeout:?} ({sent} requests sent)",
                        self.sock.runtime().iface().unwrap_or("this link")
                    ),
                ));
            }
        }
    }
}

/// Round-trip time of one echo exchange with `mac` through `iface` (EDP
/// ethertype); see [`Pinger::ping`] for the rules and errors. Opens a
/// [`Pinger`] per call: use one `Pinger` for repeated pings.
pub fn ping(iface: &str, mac: MacAddr, timeout: Duration) -> io::Result<Duration> {
    Pinger::new(iface)?.ping(mac, timeout)
}

/// Which of `ifaces` reaches `mac`: pings it through every interface at
/// once (thesis ch. 6.3: the Open MPI port found the interface to a peer by
/// EDP echo) and returns the first interface that gets a reply, with its
/// round-trip time, without waiting for the others (their pings end by
/// themselves within `timeout`). Interfaces that cannot be opened count as
/// not reaching `mac`.
///
/// Errors: `NotFound` naming `mac` and each interface's failure when none
/// got a reply within about `timeout`.
pub fn find_interface(
    mac: MacAddr,
    ifaces: &[&str],
    timeout: Duration,
) -> io::Result<(String, Duration)> {
    let (tx, rx) = std::sync::mpsc::channel();
    for &i in ifaces {
        let (tx, name) = (tx.clone(), i.to_string());
        // Threads inherit the caller's network namespace.
        std::thread::Builder::new()
            .name(format!("edp-find-{i}"))
            .spawn(move || {
                let r = ping(&name, mac, timeout);
                let _ = tx.send((name, r));
            })?;
    }
    drop(tx);
    let mut why = Vec::new();
    for (name, r) in rx {
        match r {
            Ok(rtt) => return Ok((name, rtt)),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface reaches {mac}: {}", why.join("; ")),
    ))
}

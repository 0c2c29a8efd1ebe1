//! ESP streams over AF_PACKET (`-m esp`): the reliable counterpart of EDP,
//! measured against kernel TCP. With `--loss/--dup/--reorder` every
//! stream's link is wrapped in the fault-injecting link.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use ::esp::config::EspConfig;
use ::esp::socket::{EspListener, EspStream};

use super::{map_timeout, Endpoint, SessionConfig};

/// How long the server waits for the acknowledgement of its FIN at the end
/// of a session.
const SERVER_LINGER: Duration = Duration::from_millis(200);

pub struct Esp {
    stream: EspStream,
    timeout: Duration,
}

/// The ESP configuration of a session: its wait policy and runtime.
pub(crate) fn config(cfg: &SessionConfig) -> EspConfig {
    let mut c = EspConfig {
        wait: cfg.wait(),
        runtime: cfg.runtime(),
        ..EspConfig::default()
    };
    c.transport.checksum = cfg.esp_checksum;
    if let Some(u) = cfg.user_timeout {
        c.transport.user_timeout = u;
    }
    c
}

fn setup(mut stream: EspStream, cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    stream.set_read_timeout(Some(cfg.timeout))?;
    stream.set_write_timeout(Some(cfg.timeout))?;
    Ok(Box::new(Esp {
        stream,
        timeout: cfg.timeout,
    }))
}

/// Client: connects to `-R MAC`, port `-P`, retrying while the server is
/// not listening yet (RST answers: connection refused).
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let rt = cfg.open_runtime()?;
    let mac = cfg.remote_mac()?;
    let deadline = Instant::now() + cfg.timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match EspStream::connect_on(
            &rt,
            (mac, cfg.port),
            config(cfg),
            Some(left.max(Duration::from_millis(1))),
        ) {
            Ok(s) => return setup(s, cfg),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("esp connect to {mac} port {}: {e}", cfg.port),
                ))
            }
        }
    }
}

/// Server: listens on `-P` and accepts one stream.
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let l = EspListener::bind_on(&cfg.open_runtime()?, cfg.port, config(cfg))?;
    let (s, _) = l.accept()?;
    setup(s, cfg)
}

impl Endpoint for Esp {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        self.stream.write_all(buf).map_err(|e| match e.kind() {
            // ESP's timeout errors say what the connection was waiting for.
            io::ErrorKind::TimedOut => e,
            _ => map_timeout(e, self.timeout),
        })
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.stream.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => io::Error::new(e.kind(), "esp peer closed the stream"),
            // ESP's timeout error carries the connection's state: keep it.
            io::ErrorKind::TimedOut => io::Error::new(
                e.kind(),
                format!(
                    "{}; {e}",
                    map_timeout(io::ErrorKind::TimedOut.into(), self.timeout)
                ),
            ),
            _ => map_timeout(e, self.timeout),
        })
    }

    /// Both ends close (FIN) and wait for the other's FIN: the server sends
    /// its FIN only after it read the BYE, so when the client's close
    /// returns nothing it sent can still be in flight. The server's wait is
    /// short and its timeout ignored: the client's last ACK may be lost
    /// after the client exited (there is no TIME_WAIT).
    fn finish(&mut self, timeout: Duration, initiator: bool) -> io::Result<()> {
        if initiator {
            return self.stream.close(Some(timeout));
        }
        match self.stream.close(Some(timeout.min(SERVER_LINGER))) {
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                tracing::debug!("esp: closing after BYE: {e}");
                Ok(())
            }
            r => r,
        }
    }

    /// ESP's per-connection statistics (the thesis's esp_stats), what
    /// the connection refused (attack counters), and its runtime's.
    fn stats_line(&mut self) -> Option<String> {
        let s = self.stream.stats();
        let slot = self.stream.slot_stats();
        Some(format!(
            "esp sent {} retransmitted {} send_errors {} received {} out_of_sequence {} dropped {} duplicates {} fast_retransmits {} timeouts {} spurious {} reordering {} srtt_us {} rto_us {} cwnd {} \
             unresponsive {} unresponsive_ms {} challenge_acks {} out_of_window {} rate_limited {} malformed {} group_addressed {}; {}",
            s.sent,
            s.retransmitted,
            s.send_errors,
            s.received,
            s.out_of_sequence,
            s.dropped,
            s.duplicates,
            s.fast_retransmits,
            s.timeouts,
            s.spurious,
            s.reordering,
            s.srtt_us,
            s.rto_us,
            s.cwnd,
            s.unresponsive,
            s.unresponsive_us / 1000,
            s.challenge_acks,
            s.out_of_window,
            s.rate_limited,
            slot.malformed,
            slot.group_addressed,
            super::runtime_line(self.stream.runtime())
        ))
    }
}

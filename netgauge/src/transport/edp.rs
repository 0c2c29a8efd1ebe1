//! EDP datagrams over AF_PACKET (`-m edp`).
//!
//! Busy-poll mode reads from a TPACKET_V2 RX ring (DESIGN.md: 0.5 us less
//! than plain recv on veth). With `--loss/--dup/--reorder` the runtime's
//! link is wrapped in the fault-injecting link (same batched I/O path).

use std::io;
use std::time::Duration;

use ::edp::socket::{EdpConfig, EdpSocket, SEND_BATCH};

use super::{map_timeout, recv_train, Endpoint, SessionConfig};

pub struct Edp {
    sock: EdpSocket,
    connected: bool,
    timeout: Duration,
    /// Server: datagrams dropped before the peer was fixed (not a HELLO).
    strays: u64,
}

/// Whether a server's first datagram may fix its peer: only the client's
/// control HELLO does (were it the first datagram from anyone, one forged
/// 5-byte frame could take over or kill a run).
fn fixes_peer(datagram: &[u8]) -> bool {
    crate::control::wire::Ctrl::decode(datagram)
        .is_some_and(|c| c.kind == crate::control::wire::Kind::Hello)
}

/// Opens an EDP socket on `port` (0 = ephemeral) in the session's runtime
/// ([`SessionConfig::open_runtime`]: -I's packet socket, or the UDP link).
pub fn open_socket(cfg: &SessionConfig, port: u16) -> io::Result<EdpSocket> {
    let ecfg = EdpConfig {
        runtime: cfg.runtime(),
        wait: cfg.wait(),
        ..EdpConfig::default()
    };
    let mut sock = EdpSocket::bind_on(&cfg.open_runtime()?, port, &ecfg)?;
    sock.set_read_timeout(Some(cfg.timeout))?;
    sock.set_write_timeout(Some(cfg.timeout))?;
    Ok(sock)
}

/// Client: an ephemeral port connected to `-R MAC`, port `-P`.
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let mut sock = open_socket(cfg, 0)?;
    sock.connect(cfg.remote_mac()?, cfg.port)?;
    Ok(Box::new(Edp {
        sock,
        connected: true,
        timeout: cfg.timeout,
        strays: 0,
    }))
}

/// Server: binds port `-P`; the client's first HELLO fixes the peer
/// (other datagrams before it are dropped and counted).
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let sock = open_socket(cfg, cfg.port)?;
    Ok(Box::new(Edp {
        sock,
        connected: false,
        timeout: cfg.timeout,
        strays: 0,
    }))
}

impl Endpoint for Edp {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        let mtu = self.sock.mtu();
        if buf.len() <= mtu {
            return self.sock.send(buf).map(|_| ());
        }
        // A train of datagrams goes out with sendmmsg, SEND_BATCH at a time.
        let mut batch: [&[u8]; SEND_BATCH] = [&[]; SEND_BATCH];
        let mut chunks = buf.chunks(mtu).peekable();
        while chunks.peek().is_some() {
            let mut n = 0;
            for (slot, c) in batch.iter_mut().zip(&mut chunks) {
                *slot = c;
                n += 1;
            }
            self.send_datagrams(&batch[..n])?;
        }
        Ok(())
    }

    fn send_datagrams(&mut self, dgrams: &[&[u8]]) -> io::Result<()> {
        let mut off = 0;
        while off < dgrams.len() {
            let end = dgrams.len().min(off + SEND_BATCH);
            off += self.sock.send_batch(&dgrams[off..end])?;
        }
        Ok(())
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let timeout = self.timeout;
        let sock = &mut self.sock;
        recv_train(buf, |b| sock.recv(b).map_err(|e| map_timeout(e, timeout)))
    }

    fn max_datagram(&self) -> Option<usize> {
        Some(self.sock.mtu())
    }

    fn recv_datagram(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_micros(1))))?;
            let r = self
                .sock
                .recv_from(buf)
                .map_err(|e| map_timeout(e, timeout));
            self.sock.set_read_timeout(Some(self.timeout))?;
            let (n, mac, port) = r?;
            if !self.connected {
                if !fixes_peer(&buf[..n]) {
                    self.strays += 1;
                    tracing::debug!(%mac, port, len = n, "netgauge EDP server: datagram before HELLO dropped");
                    continue;
                }
                self.sock.connect(mac, port)?;
                self.connected = true;
            }
            return Ok(n);
        }
    }

    fn stats_line(&mut self) -> Option<String> {
        let s = self.sock.stats();
        Some(format!(
            "edp sent {} send_errors {} received {} dropped {} queue_full {} group_dropped {} kernel_drops {} strays {}; {}",
            s.sent, s.send_errors, s.received, s.dropped, s.queue_full, s.group_dropped, s.kernel_drops, self.strays,
            super::runtime_line(self.sock.runtime())
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::fixes_peer;
    use crate::control::wire::{Ctrl, Kind};
    use crate::patterns::Pattern;

    #[test]
    fn only_a_hello_fixes_the_servers_peer() {
        assert!(fixes_peer(
            &Ctrl::new(Kind::Hello, 1, Pattern::OneOne).encode()
        ));
        // The forged 5-byte frame of the report, a stray data datagram,
        // and other control kinds do not.
        assert!(!fixes_peer(b"evil!"));
        assert!(!fixes_peer(&[0u8; 64]));
        assert!(!fixes_peer(
            &Ctrl::new(Kind::Bye, 1, Pattern::OneOne).encode()
        ));
        assert!(!fixes_peer(
            &Ctrl::new(Kind::Ready, 1, Pattern::OneOne).encode()
        ));
    }
}

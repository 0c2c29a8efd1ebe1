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
}

/// Opens an EDP socket on `cfg`'s interface and `port` (0 = ephemeral) in
/// the session's runtime ([`SessionConfig::runtime`]).
pub fn open_socket(cfg: &SessionConfig, port: u16) -> io::Result<EdpSocket> {
    let iface = cfg.iface()?;
    let ecfg = EdpConfig {
        runtime: cfg.runtime(),
        wait: cfg.wait(),
        ..EdpConfig::default()
    };
    let mut sock = EdpSocket::bind_with((iface, port), &ecfg)?;
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
    }))
}

/// Server: binds port `-P`; the client's first datagram fixes the peer.
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let sock = open_socket(cfg, cfg.port)?;
    Ok(Box::new(Edp {
        sock,
        connected: false,
        timeout: cfg.timeout,
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
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))?;
        let r = self
            .sock
            .recv_from(buf)
            .map_err(|e| map_timeout(e, timeout));
        self.sock.set_read_timeout(Some(self.timeout))?;
        let (n, mac, port) = r?;
        if !self.connected {
            self.sock.connect(mac, port)?;
            self.connected = true;
        }
        Ok(n)
    }

    fn stats_line(&mut self) -> Option<String> {
        let s = self.sock.stats();
        Some(format!(
            "edp sent {} send_errors {} received {} dropped {} queue_full {} kernel_drops {}",
            s.sent, s.send_errors, s.received, s.dropped, s.queue_full, s.kernel_drops
        ))
    }
}

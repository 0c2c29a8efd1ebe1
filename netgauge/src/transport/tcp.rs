//! Kernel TCP with TCP_NODELAY: the baseline for ESP (`-m tcp`), and with
//! `SO_BUSY_POLL` and blocking receives (`-m tcp-bp`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::{map_timeout, set_kernel_busy_poll, spin, Endpoint, SessionConfig};

pub struct Tcp {
    stream: TcpStream,
    busy_poll: bool,
    timeout: Duration,
}

fn setup(stream: TcpStream, cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    stream.set_nodelay(true)?;
    // udp-bp's counterpart blocks and lets the kernel spin; tcp spins in
    // user space with --wait busy.
    let user_spin = cfg.busy_poll() && !cfg.mode.is_kernel_busy_poll();
    if cfg.mode.is_kernel_busy_poll() {
        set_kernel_busy_poll(socket2::SockRef::from(&stream), "tcp")?;
    }
    if user_spin {
        stream.set_nonblocking(true)?;
    } else {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(cfg.timeout))?;
        stream.set_write_timeout(Some(cfg.timeout))?;
    }
    Ok(Box::new(Tcp {
        stream,
        busy_poll: user_spin,
        timeout: cfg.timeout,
    }))
}

/// Client: connects to `-R IP:-P port`, retrying while the server starts.
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let peer = SocketAddr::new(cfg.remote_ip()?, cfg.port);
    let deadline = Instant::now() + cfg.timeout;
    loop {
        match TcpStream::connect_timeout(&peer, cfg.timeout) {
            Ok(s) => return setup(s, cfg),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("tcp connect to {peer}: {e}"),
                ))
            }
        }
    }
}

/// Server: listens on `-P port` and accepts one client.
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let l = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], cfg.port)))?;
    let (s, _) = l.accept()?;
    setup(s, cfg)
}

impl Endpoint for Tcp {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        if !self.busy_poll {
            return self
                .stream
                .write_all(buf)
                .map_err(|e| map_timeout(e, self.timeout));
        }
        let mut off = 0;
        while off < buf.len() {
            let s = &mut self.stream;
            off += spin(self.timeout, || s.write(&buf[off..]))?;
        }
        Ok(())
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut off = 0;
        while off < buf.len() {
            let n = if self.busy_poll {
                let s = &mut self.stream;
                spin(self.timeout, || s.read(&mut buf[off..]))?
            } else {
                self.stream
                    .read(&mut buf[off..])
                    .map_err(|e| map_timeout(e, self.timeout))?
            };
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "tcp peer closed the connection",
                ));
            }
            off += n;
        }
        Ok(())
    }
}

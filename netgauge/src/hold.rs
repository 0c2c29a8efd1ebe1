//! `--idle-procs P`: P processes per host, each holding one EDP socket and
//! one ESP listener, so the measured pair shares each host with P-1 other
//! processes of the stack. Each process has its own runtime, hence its own
//! packet socket, and the kernel offers every frame of the interface to
//! every packet socket (and runs its filter): the cost this option shows.
//!
//! The extra processes are netgauge itself with the hidden `--hold`
//! option ([`hold`]): they bind, print `ready`, and hold their sockets until
//! their stdin reaches end of file, which happens when the parent closes it
//! or dies however it dies, so none outlives its run. The parent's
//! [`Holders`] also kills them when dropped, and registers them for the
//! Ctrl-C handler of `--local`.

use std::io::{self, BufRead, BufReader, Read, Write};

use std::process::{Command, Stdio};

use ::esp::socket::EspListener;

use crate::transport::{self, SessionConfig};

/// Most processes per host (`--idle-procs`).
pub const MAX_PROCS: usize = 256;

/// The first line a holding process prints once its sockets are bound.
const READY: &str = "ready";

/// Body of `netgauge --hold -I IFACE`: binds one EDP socket and one ESP
/// listener on ephemeral ports with the session's runtime configuration
/// (`--wait`), prints `ready edp PORT esp PORT`, and returns when stdin
/// reaches end of file.
///
/// Errors: those of binding (e.g. `PermissionDenied` naming CAP_NET_RAW);
/// stdin and stdout errors.
pub fn hold(cfg: &SessionConfig) -> io::Result<()> {
    let iface = cfg.iface()?.to_string();
    let edp = transport::edp::open_socket(cfg, 0)?;
    let esp = EspListener::bind_with(&iface, 0, transport::esp::config(cfg))?;
    crate::privilege::drop_after_open();
    let (_, _, edp_port) = edp.local_addr()?;
    let (_, _, esp_port) = esp.local_addr()?;
    {
        let mut out = io::stdout().lock();
        writeln!(out, "{READY} edp {edp_port} esp {esp_port}")?;
        out.flush()?;
    }
    let mut sink = [0u8; 64];
    let mut stdin = io::stdin().lock();
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Holding processes started by `--local`; stopped when dropped.
#[derive(Default)]
pub struct Holders {
    children: Vec<vcluster::Process>,
}

impl Holders {
    /// Starts `n` holding processes, each from a fresh `command()` (the
    /// program and its namespace; `--hold` and `extra` arguments are
    /// added), and waits until each has bound its sockets.
    ///
    /// Errors: spawn errors; `Other` when one exits before it is ready
    /// (its own message went to stderr).
    pub fn spawn(
        &mut self,
        n: usize,
        mut command: impl FnMut() -> Command,
        extra: &[String],
    ) -> io::Result<()> {
        let first = self.children.len();
        for _ in 0..n {
            let mut c = command();
            c.arg("--hold")
                .args(extra)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                // Inherited: their errors reach the user as they happen,
                // and a pipe nobody drains could never block them.
                .stderr(Stdio::inherit());
            // Registered for Ctrl-C, killed when dropped.
            self.children.push(vcluster::Process::spawn(&mut c)?);
        }
        for (i, p) in self.children[first..].iter_mut().enumerate() {
            let mut line = String::new();
            if let Some(out) = p.take_stdout() {
                BufReader::new(out).read_line(&mut line)?;
            }
            if !line.starts_with(READY) {
                p.kill();
                let status = p.wait()?;
                return Err(io::Error::other(format!(
                    "holding process {} of {n} ended ({status}) before binding its sockets; its error is above",
                    i + 1,
                )));
            }
            tracing::debug!("holding process {}: {}", p.id(), line.trim());
        }
        Ok(())
    }

    /// How many holding processes run.
    pub fn count(&self) -> usize {
        self.children.len()
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        // End of file first (they exit on their own); each Process is
        // killed and reaped when dropped anyway.
        for p in &mut self.children {
            drop(p.child_mut().stdin.take());
        }
    }
}

//! Ctrl-C (SIGINT, also SIGTERM and SIGHUP) during `--local`: the first
//! signal stops the sessions that run (their processes are killed) and
//! lets the run print the tables of what it measured, remove its virtual
//! cluster and exit with status 130; a second one, a second or more
//! later, removes the cluster and exits at once.
//!
//! The handler is `ctrlc`'s (one per process): installing it replaces
//! vcluster's own cleanup handler, whose work it does on the second signal
//! ([`vcluster::remove_all`]). A terminal's Ctrl-C reaches the children of
//! the foreground process group as well; SIGTERM to netgauge alone reaches
//! them through [`track`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// When the first signal came; the pids of the sessions' processes.
struct State {
    first: Option<Instant>,
    pids: Vec<u32>,
}

static STATE: Mutex<State> = Mutex::new(State {
    first: None,
    pids: Vec::new(),
});

/// A second signal within this time of the first is taken as the same
/// Ctrl-C (a terminal signals the whole process group, and a re-executing
/// parent forwards it as SIGTERM), not as "stop at once".
const SAME_INTERRUPT: Duration = Duration::from_secs(1);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs the handler, once. Errors: another handler was installed
/// first (the caller keeps going without table-printing interrupts).
pub fn install() -> Result<(), ctrlc::Error> {
    ctrlc::set_handler(|| {
        let mut s = state();
        match s.first {
            None => {
                s.first = Some(Instant::now());
                INTERRUPTED.store(true, Ordering::SeqCst);
                for &pid in &s.pids {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                }
                eprintln!(
                    "\nnetgauge: interrupted: printing what was measured (Ctrl-C again to stop at once)"
                );
            }
            Some(t) if t.elapsed() >= SAME_INTERRUPT => {
                drop(s);
                let (procs, n) = vcluster::remove_all();
                eprintln!(
                    "netgauge: interrupted again: removed the virtual cluster ({n} namespaces, {procs} processes stopped)"
                );
                std::process::exit(130);
            }
            Some(_) => {}
        }
    })
}

/// Whether the run was interrupted.
pub fn requested() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Records a session's process, killed by the first signal. A process
/// started after the signal is killed at once.
pub fn track(pid: u32) {
    let mut s = state();
    if s.first.is_some() {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    s.pids.push(pid);
}

/// Forgets a process once it was reaped (its pid may be reused).
pub fn untrack(pid: u32) {
    state().pids.retain(|&p| p != pid);
}

/// The error of an interrupted run: `Interrupted`, which `main` turns into
/// exit status 130 without a message of its own.
pub fn error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted")
}

/// A session's process, known to the handler while this lives
/// ([`track`], [`untrack`] on drop).
pub struct Tracked(u32);

impl Tracked {
    pub fn new(pid: u32) -> Self {
        track(pid);
        Tracked(pid)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        untrack(self.0);
    }
}

//! What the process must remove when it ends: the namespaces it created and
//! the processes it started inside them.
//!
//! Three ways out are covered: `Drop` of [`crate::Cluster`] and
//! [`crate::Process`] (normal return and unwinding panics), the SIGINT /
//! SIGTERM / SIGHUP handler installed by [`install_signal_cleanup`] (a
//! signal runs no destructor), and [`sweep_stale`] at the next build for
//! namespaces of processes that died by SIGKILL.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::error::Result;
use crate::ip::ip;

/// Prefix of every namespace this crate creates: `cn<pid>x<n>-<name>-...`.
pub(crate) const PREFIX: &str = "cn";

#[derive(Default)]
struct Registry {
    /// Namespaces that exist now, in creation order.
    namespaces: Vec<String>,
    /// Processes started inside the cluster, with the signal that stops them.
    processes: Vec<(u32, Signal)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    namespaces: Vec::new(),
    processes: Vec::new(),
});

/// The registry, also after a panic elsewhere poisoned it (the data stays
/// consistent: every update is one push or retain).
fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates namespace `name` (`ip netns add`) and records it. The registry
/// lock is held across the command, so a signal arriving meanwhile deletes
/// the namespace once it exists.
pub(crate) fn create_namespace(name: &str) -> Result<()> {
    let mut r = registry();
    ip(&["netns", "add", name])?;
    r.namespaces.push(name.to_string());
    tracing::debug!(ns = name, "namespace created");
    Ok(())
}

/// Deletes namespace `name` (`ip netns del`) and forgets it.
pub(crate) fn delete_namespace(name: &str) -> Result<()> {
    let mut r = registry();
    r.namespaces.retain(|n| n != name);
    ip(&["netns", "del", name]).map(|_| tracing::debug!(ns = name, "namespace deleted"))
}

/// Forgets namespace `name` without deleting it (`keep`).
pub(crate) fn forget_namespace(name: &str) {
    registry().namespaces.retain(|n| n != name);
}

/// Records a process that the signal handler stops with `signal`.
pub(crate) fn register_process(pid: u32, signal: Signal) {
    registry().processes.push((pid, signal));
}

/// Forgets a process once it has been reaped (its pid may be reused).
pub(crate) fn unregister_process(pid: u32) {
    registry().processes.retain(|&(p, _)| p != pid);
}

/// Installs, once per process, the handler that on SIGINT, SIGTERM or SIGHUP
/// stops every registered process, deletes every registered namespace,
/// prints one line to stderr and exits with status 130 (the shell's code for
/// an interrupted program). Every cluster build calls it.
///
/// Returns false when the program has installed its own `ctrlc` handler;
/// that handler should then call [`remove_all`].
pub fn install_signal_cleanup() -> bool {
    static ONCE: Once = Once::new();
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    ONCE.call_once(|| {
        let r = ctrlc::set_handler(|| {
            let (procs, n) = remove_all();
            eprintln!(
                "interrupted: removed the virtual cluster ({n} namespaces, {procs} processes stopped)"
            );
            std::process::exit(130);
        });
        match r {
            Ok(()) => INSTALLED.store(true, Ordering::Release),
            // The program's own handler (see above): nothing to warn about.
            Err(ctrlc::Error::MultipleHandlers) => {
                tracing::debug!("the program handles SIGINT/SIGTERM itself")
            }
            Err(e) => tracing::warn!(
                "cannot install the SIGINT/SIGTERM cleanup ({e}); call vcluster::remove_all from the program's own handler"
            ),
        }
    });
    INSTALLED.load(Ordering::Acquire)
}

/// Stops every registered process (SIGKILL, or SIGTERM with up to 5 s to
/// exit for processes that clean up themselves, such as a re-executed
/// program in a user namespace) and deletes every registered namespace.
/// Returns how many processes were signalled and namespaces deleted. For
/// signal handlers; `Drop` does the same for one cluster.
pub fn remove_all() -> (usize, usize) {
    let mut r = registry();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut procs = 0;
    for &(pid, sig) in &r.processes {
        let pid = Pid::from_raw(pid as i32);
        if kill(pid, sig).is_err() {
            continue;
        }
        procs += 1;
        // Reap (or, for SIGTERM, wait a bounded time for) our own children.
        loop {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => break,
            }
        }
    }
    r.processes.clear();
    let mut n = 0;
    for ns in r.namespaces.drain(..).rev() {
        if ip(&["netns", "del", &ns]).is_ok() {
            n += 1;
        }
    }
    (procs, n)
}

/// Deletes namespaces of this crate whose creating process no longer exists
/// (a process killed with SIGKILL or by a test timeout runs no cleanup).
/// Namespaces of live processes are left alone.
pub(crate) fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = creator_pid(&name) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            match ip(&["netns", "del", &name]) {
                Ok(_) => {
                    tracing::info!(ns = %name, pid, "removed stale namespace of a dead process")
                }
                Err(e) => tracing::warn!(ns = %name, "cannot remove stale namespace: {e}"),
            }
        }
    }
}

/// The pid in a name `cn<pid>x...`, if it is one of ours.
pub(crate) fn creator_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, _) = rest.split_once('x')?;
    pid.parse().ok()
}

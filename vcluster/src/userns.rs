//! Rootless operation: a program without CAP_SYS_ADMIN/CAP_NET_ADMIN
//! re-executes itself inside new user, network and mount namespaces
//! (`unshare --user --map-root-user --net --mount`, user_namespaces(7)),
//! where it is root of namespaces it owns and may build a cluster. Whatever
//! it builds there vanishes with its last process, whatever happens.
//!
//! ```no_run
//! if !vcluster::userns::can_build_directly() {
//!     let status = vcluster::userns::reexec()?;
//!     std::process::exit(status.code().unwrap_or(1));
//! }
//! // root, or inside the user namespace: build the cluster
//! # Ok::<(), vcluster::Error>(())
//! ```

use std::process::{Command, ExitStatus};
use std::sync::OnceLock;

use nix::mount::{mount, MsFlags};
use nix::sys::signal::Signal;

use crate::cleanup;
use crate::error::{Error, Result, MISSING_PRIVILEGE};

/// Environment variable marking the re-executed program inside the user
/// namespace (value `1`).
pub const MARKER_ENV: &str = "VCLUSTER_IN_USERNS";

/// Whether this process may build a cluster as it is: effective
/// CAP_SYS_ADMIN and CAP_NET_ADMIN (root has both; so has the root of a user
/// namespace, inside it).
pub fn can_build_directly() -> bool {
    use caps::{CapSet, Capability};
    let has = |c| caps::has_cap(None, CapSet::Effective, c).unwrap_or(false);
    has(Capability::CAP_SYS_ADMIN) && has(Capability::CAP_NET_ADMIN)
}

/// Whether this process is the one [`reexec`] started.
pub fn in_user_namespace() -> bool {
    std::env::var_os(MARKER_ENV).is_some()
}

/// Re-executes the current program with the same arguments inside new user,
/// network and mount namespaces, waits for it and returns its exit status
/// (the caller usually exits with it). SIGINT/SIGTERM to this process are
/// forwarded to it as SIGTERM, so that it removes what it built and stops
/// the processes it started.
///
/// Errors: [`Error::Privilege`] when already inside such a namespace and
/// still unprivileged, or when the kernel forbids unprivileged user
/// namespaces (sysctl `user.max_user_namespaces=0` or
/// `kernel.unprivileged_userns_clone=0`, or an AppArmor policy);
/// [`Error::Spawn`] when `unshare` (util-linux) is missing.
pub fn reexec() -> Result<ExitStatus> {
    if in_user_namespace() {
        return Err(Error::Privilege(format!(
            "inside the user namespace this process still lacks CAP_SYS_ADMIN/CAP_NET_ADMIN; {MISSING_PRIVILEGE}"
        )));
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let max = read("/proc/sys/user/max_user_namespaces");
    let clone = read("/proc/sys/kernel/unprivileged_userns_clone");
    if max.as_deref() == Some("0") || clone.as_deref() == Some("0") {
        return Err(Error::Privilege(
            "without root this needs user namespaces, which this kernel forbids to unprivileged \
             users (sysctl user.max_user_namespaces=0 or kernel.unprivileged_userns_clone=0); \
             run as root (sudo), or enable them"
                .into(),
        ));
    }
    let exe = std::env::current_exe().map_err(|source| Error::Spawn {
        program: "the current executable".into(),
        source,
        hint: "the program's own path must be readable (/proc/self/exe)",
    })?;
    cleanup::install_signal_cleanup();
    let mut child = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--net",
            "--mount",
            "--propagation",
            "private",
        ])
        .arg(&exe)
        .args(std::env::args_os().skip(1))
        .env(MARKER_ENV, "1")
        .spawn()
        .map_err(|source| Error::Spawn {
            program: "unshare".into(),
            source,
            hint: "install util-linux (`apt-get install util-linux`) to enter a user namespace",
        })?;
    // unshare execs the program in place: this pid is the program itself.
    cleanup::register_process(child.id(), Signal::SIGTERM);
    let status = child.wait();
    cleanup::unregister_process(child.id());
    let status = status.map_err(|source| Error::Spawn {
        program: "unshare".into(),
        source,
        hint: "waiting for the re-executed program failed",
    })?;
    tracing::debug!(%status, "re-executed program in the user namespace ended");
    Ok(status)
}

/// Inside the user namespace (and only there): gives `ip netns` a private,
/// writable /run/netns (a tmpfs), as only the real root could create
/// entries in the host's. Done once per process; later calls return the
/// first result.
pub(crate) fn prepare() -> Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    if !in_user_namespace() {
        return Ok(());
    }
    DONE.get_or_init(|| {
        let dir = "/run/netns";
        let _ = std::fs::create_dir_all(dir);
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| {
            format!("cannot mount a private tmpfs on {dir} inside the user namespace: {e}")
        })
    })
    .clone()
    .map_err(Error::Privilege)
}

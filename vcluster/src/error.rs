//! The one error type of the crate: every variant names what failed and, where
//! it can tell, what to install or which privilege is missing.

use std::io;

/// Why a cluster could not be built, entered or removed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A helper program could not be started at all.
    #[error("cannot run `{program}`: {source}; {hint}")]
    Spawn {
        /// The program, e.g. `ip`.
        program: String,
        /// The spawn error.
        source: io::Error,
        /// What to install.
        hint: &'static str,
    },
    /// A helper program ran and failed.
    #[error("`{command}` failed ({status}): {stderr}{}", hint_suffix(hint))]
    Command {
        /// The whole command line (batch input included).
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
        /// What to do about it, when the error says so.
        hint: Option<&'static str>,
    },
    /// The process lacks a privilege the operation needs.
    #[error("{0}")]
    Privilege(String),
    /// A namespace could not be opened or entered.
    #[error("network namespace {ns}: {op}: {source}{}", hint_suffix(hint))]
    Namespace {
        /// The namespace name (`ip netns`).
        ns: String,
        /// What was attempted.
        op: &'static str,
        /// The system error.
        source: io::Error,
        /// What to do about it, when known.
        hint: Option<&'static str>,
    },
    /// An interface or bridge port did not become ready in time.
    #[error("{what} in namespace {ns} was not ready within {limit_s} s: {state}")]
    NotReady {
        /// The interface (or bridge port) waited for.
        what: String,
        /// The namespace it lives in.
        ns: String,
        /// The bound, seconds.
        limit_s: u64,
        /// What was last seen (an `ip link` line).
        state: String,
    },
    /// The requested cluster cannot exist (host count, MTU, subnet).
    #[error("invalid virtual cluster: {0}")]
    Config(String),
}

fn hint_suffix(hint: &Option<&'static str>) -> String {
    hint.map(|h| format!("; {h}")).unwrap_or_default()
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Spawn { source, .. } => source.kind(),
            Error::Privilege(_) => io::ErrorKind::PermissionDenied,
            Error::Namespace { source, .. } => source.kind(),
            Error::NotReady { .. } => io::ErrorKind::TimedOut,
            Error::Config(_) => io::ErrorKind::InvalidInput,
            Error::Command { .. } => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// What to do when a command's standard error shows a known cause.
pub(crate) fn hint_for(stderr: &str) -> Option<&'static str> {
    let s = stderr.to_ascii_lowercase();
    if s.contains("operation not permitted") || s.contains("permission denied") {
        Some(MISSING_PRIVILEGE)
    } else if s.contains("unknown device type") || s.contains("not supported") {
        if s.contains("bridge") {
            Some("the kernel lacks Linux bridge support: `modprobe bridge` (CONFIG_BRIDGE)")
        } else {
            Some("the kernel lacks veth or bridge support: `modprobe veth` / `modprobe bridge` (CONFIG_VETH, CONFIG_BRIDGE)")
        }
    } else if s.contains("file exists") {
        Some("a namespace or interface of that name exists already (left by a killed run? `ip netns list`)")
    } else {
        None
    }
}

/// The privilege message shared by the checks and the hints.
pub(crate) const MISSING_PRIVILEGE: &str =
    "network namespaces need root, or CAP_SYS_ADMIN and CAP_NET_ADMIN (run as root, or re-execute \
     inside a user namespace with vcluster::userns::reexec, as netgauge --local does)";

/// The install hint for iproute2.
pub(crate) const INSTALL_IPROUTE2: &str =
    "install iproute2 (`apt-get install iproute2`, `dnf install iproute`)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_to_do() {
        let e = Error::Command {
            command: "ip netns add x".into(),
            status: "exit status: 1".into(),
            stderr: "mount --make-shared /run/netns failed: Operation not permitted".into(),
            hint: hint_for("mount --make-shared /run/netns failed: Operation not permitted"),
        };
        let s = e.to_string();
        assert!(
            s.starts_with("`ip netns add x` failed (exit status: 1): mount"),
            "{s}"
        );
        assert!(s.contains("CAP_SYS_ADMIN"), "{s}");
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::Other);
        let bridge = hint_for("Error: Unknown device type.\n... type bridge").unwrap();
        assert!(bridge.contains("modprobe"), "{bridge}");
        assert_eq!(hint_for("Cannot find device \"x\""), None);
        let e = Error::Spawn {
            program: "ip".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
            hint: INSTALL_IPROUTE2,
        };
        assert!(e.to_string().contains("apt-get install iproute2"), "{e}");
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::NotFound);
    }
}

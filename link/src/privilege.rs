//! Capabilities: a raw-Ethernet program needs CAP_NET_RAW to open its packet
//! sockets (and CAP_NET_ADMIN only to create virtual links or force large
//! buffers), and nothing once they are open (DESIGN.md, principle 8).
//!
//! Grant the capability to a binary instead of running it as root:
//! `scripts/setcap.sh` runs `setcap cap_net_raw+ep target/release/netgauge`.
//!
//! Linux capabilities belong to threads: dropping them affects the calling
//! thread and the threads it creates afterwards, not threads already running.
//! Call [`drop_capabilities`] from the main thread right after opening the
//! sockets and before spawning workers. The threads the libraries start
//! drop their own capabilities as soon as they start (the runtime's service
//! thread, CTP's deliverers), so a thread started by a privileged caller
//! before its drop keeps none.

use std::io;

pub use caps::Capability;
use caps::{CapSet, CapsHashSet};

fn to_io(e: caps::errors::CapsError, what: &str) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// Drops every capability of the calling thread except `keep`, from the
/// effective, permitted, inheritable and ambient sets (a dropped permitted
/// capability cannot come back). Capabilities in `keep` stay as they were.
///
/// Errors: `Other` with the `caps` crate's message when capget/capset fail.
pub fn drop_capabilities_except(keep: &[Capability]) -> io::Result<()> {
    // Ambient first: it may only hold capabilities still permitted and inheritable.
    for set in [
        CapSet::Ambient,
        CapSet::Effective,
        CapSet::Inheritable,
        CapSet::Permitted,
    ] {
        let have = match caps::read(None, set) {
            Ok(h) => h,
            // Kernels without ambient capabilities (< 4.3).
            Err(_) if matches!(set, CapSet::Ambient) => continue,
            Err(e) => return Err(to_io(e, "reading capabilities")),
        };
        let want: CapsHashSet = have.iter().copied().filter(|c| keep.contains(c)).collect();
        if want != have {
            caps::set(None, set, &want)
                .map_err(|e| to_io(e, &format!("dropping {set:?} capabilities")))?;
        }
    }
    Ok(())
}

/// Drops every capability of the calling thread (see
/// [`drop_capabilities_except`]).
pub fn drop_capabilities() -> io::Result<()> {
    drop_capabilities_except(&[])
}

/// True when the calling thread has `cap` in its effective set.
#[cfg(test)]
fn has_capability(cap: Capability) -> bool {
    caps::has_cap(None, CapSet::Effective, cap).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_in_a_thread_leaves_others_alone() {
        let before = has_capability(Capability::CAP_NET_RAW);
        std::thread::spawn(|| {
            drop_capabilities_except(&[Capability::CAP_NET_BIND_SERVICE]).unwrap();
            assert!(!has_capability(Capability::CAP_NET_RAW));
            assert!(!has_capability(Capability::CAP_NET_ADMIN));
            let eff = caps::read(None, CapSet::Effective).unwrap();
            assert!(eff.iter().all(|c| *c == Capability::CAP_NET_BIND_SERVICE));
            drop_capabilities().unwrap();
            assert!(caps::read(None, CapSet::Permitted).unwrap().is_empty());
        })
        .join()
        .unwrap();
        // capabilities are per thread: this one keeps what it had
        assert_eq!(has_capability(Capability::CAP_NET_RAW), before);
    }
}

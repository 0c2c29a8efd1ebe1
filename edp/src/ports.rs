//! Exclusive port ownership across processes.
//!
//! A port on an (interface, ethertype) is owned by whoever holds the abstract
//! Unix socket named `"\0clusternet/<iface>/<ethertype hex>/<port>"`
//! (unix(7), "abstract namespace"). Binding that name is atomic and exclusive
//! among all processes of the network namespace; the kernel releases it when
//! the socket is closed, including when its process crashes or is killed. No
//! daemon, no lock file, no cleanup. Abstract names live per network
//! namespace, like the interfaces they name.
//!
//! EDP and ESP share this module, each with its own ethertype, so their port
//! spaces are independent (as TCP and UDP ports are).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use crate::wire::CONTROL_PORT;

/// First ephemeral port (RFC 6335 dynamic range: 49152..=65535).
pub const EPHEMERAL_FIRST: u16 = 49152;
/// Last ephemeral port.
pub const EPHEMERAL_LAST: u16 = 65535;

/// Ownership of one port; the port is released when the last clone is
/// dropped (or the process exits, however it exits). Clones share the
/// lease: an ESP listener and the connections it accepted hold one port.
#[derive(Debug, Clone)]
pub struct PortLease {
    _sock: std::sync::Arc<UnixDatagram>,
    iface: String,
    ethertype: u16,
    port: u16,
}

impl PortLease {
    /// The leased port.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// Interface name the lease is for.
    pub fn iface(&self) -> &str {
        &self.iface
    }
    /// Ethertype (protocol) the lease is for.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// Tries to take the control port (port 0) of `iface` / `ethertype`:
    /// only its holder answers echo requests (see [`crate::echo`]).
    ///
    /// Errors: `AddrInUse` when another socket holds it.
    pub fn control(iface: &str, ethertype: u16) -> io::Result<PortLease> {
        try_lease(iface, ethertype, CONTROL_PORT)
    }
}

/// The abstract socket name (without the leading NUL) for a port.
pub fn lease_name(iface: &str, ethertype: u16, port: u16) -> String {
    format!("clusternet/{iface}/{ethertype:04x}/{port}")
}

/// Takes `port` on `iface` for `ethertype`; port 0 means the next free
/// ephemeral port (49152..=65535, scanned upward from a random start so that
/// a port just released is not handed out again at once: ESP has no
/// TIME_WAIT). Use [`PortLease::control`] for the control port itself.
///
/// Errors: `AddrInUse` naming the port, interface and ethertype when another
/// socket (in any process of this network namespace) owns it, or when every
/// ephemeral port is taken; other errors from socket(2)/bind(2).
pub fn allocate(iface: &str, ethertype: u16, port: u16) -> io::Result<PortLease> {
    if port != 0 {
        return try_lease(iface, ethertype, port);
    }
    let span = (EPHEMERAL_LAST - EPHEMERAL_FIRST) as u32 + 1;
    let start = rand::random::<u32>() % span;
    for i in 0..span {
        let p = EPHEMERAL_FIRST + ((start + i) % span) as u16;
        match try_lease(iface, ethertype, p) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "no free ephemeral port ({EPHEMERAL_FIRST}..={EPHEMERAL_LAST}) on {iface} for ethertype {ethertype:#06x}"
        ),
    ))
}

fn try_lease(iface: &str, ethertype: u16, port: u16) -> io::Result<PortLease> {
    let name = lease_name(iface, ethertype, port);
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    match UnixDatagram::bind_addr(&addr) {
        Ok(sock) => Ok(PortLease {
            _sock: std::sync::Arc::new(sock),
            iface: iface.to_string(),
            ethertype,
            port,
        }),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "port {port} on {iface} (ethertype {ethertype:#06x}) is already in use by another socket"
            ),
        )),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("taking port {port} on {iface}: binding abstract socket {name:?}: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ETHERTYPE_EDP, ETHERTYPE_ESP};

    // Abstract sockets need no privilege; names include the test's port so
    // tests in this binary do not collide (each uses distinct ports).

    #[test]
    fn exclusive_until_dropped() {
        let a = allocate("lo", ETHERTYPE_EDP, 4101).unwrap();
        assert_eq!(a.port(), 4101);
        let e = allocate("lo", ETHERTYPE_EDP, 4101).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("4101"), "{e}");
        assert!(e.to_string().contains("lo"), "{e}");
        drop(a);
        let b = allocate("lo", ETHERTYPE_EDP, 4101).unwrap();
        assert_eq!(b.port(), 4101);
    }

    #[test]
    fn ethertypes_and_interfaces_are_separate_spaces() {
        let _a = allocate("lo", ETHERTYPE_EDP, 4102).unwrap();
        let _b = allocate("lo", ETHERTYPE_ESP, 4102).unwrap();
        let _c = allocate("lo2", ETHERTYPE_EDP, 4102).unwrap();
    }

    #[test]
    fn ephemeral_ports_are_distinct_and_in_range() {
        let leases: Vec<_> = (0..50)
            .map(|_| allocate("ephem-test", ETHERTYPE_EDP, 0).unwrap())
            .collect();
        let mut ports: Vec<u16> = leases.iter().map(|l| l.port()).collect();
        assert!(ports.iter().all(|&p| p >= EPHEMERAL_FIRST));
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn control_port_is_exclusive() {
        let c = PortLease::control("ctl-test", ETHERTYPE_EDP).unwrap();
        assert_eq!(c.port(), 0);
        assert_eq!(
            PortLease::control("ctl-test", ETHERTYPE_EDP)
                .unwrap_err()
                .kind(),
            io::ErrorKind::AddrInUse
        );
    }

    #[test]
    fn name_layout() {
        assert_eq!(lease_name("eth0", 0x88b5, 7), "clusternet/eth0/88b5/7");
    }
}

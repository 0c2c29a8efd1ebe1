//! [`EthAddr`]: where a socket of the runtime lives or sends to.

use std::fmt;

use link::eth::MacAddr;

/// A socket address on an Ethernet segment: a MAC address and a 16-bit
/// port of one ethertype (thesis ch. 4.1: EDP and ESP address sockets as
/// (interface, MAC, port); the interface is the runtime's).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthAddr {
    /// The host's MAC address.
    pub mac: MacAddr,
    /// The port.
    pub port: u16,
}

impl EthAddr {
    /// `mac`, `port`.
    pub const fn new(mac: MacAddr, port: u16) -> Self {
        EthAddr { mac, port }
    }
}

impl From<(MacAddr, u16)> for EthAddr {
    fn from((mac, port): (MacAddr, u16)) -> Self {
        EthAddr { mac, port }
    }
}

impl From<EthAddr> for (MacAddr, u16) {
    fn from(a: EthAddr) -> Self {
        (a.mac, a.port)
    }
}

/// `02:00:00:00:00:01:5000`, the form netgauge prints.
impl fmt::Display for EthAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.mac, self.port)
    }
}

impl fmt::Debug for EthAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

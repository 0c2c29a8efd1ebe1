//! [`EthAddr`]: where a socket of the runtime lives or sends to.

use std::fmt;
use std::str::FromStr;

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

/// `02:00:00:00:00:01/5000`: MAC, slash, port (the form host lists,
/// comm's C ABI and netgauge's handshake use).
impl fmt::Display for EthAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.mac, self.port)
    }
}

/// Error of [`EthAddr::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid address {0:?}: expected MAC/PORT like 02:00:00:00:00:01/5000")]
pub struct ParseEthAddrError(pub String);

impl FromStr for EthAddr {
    type Err = ParseEthAddrError;
    /// Parses `MAC/PORT` (the [`Display`](fmt::Display) form).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseEthAddrError(s.to_string());
        let (mac, port) = s.split_once('/').ok_or_else(bad)?;
        Ok(EthAddr {
            mac: mac.parse().map_err(|_| bad())?,
            port: port.parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Debug for EthAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips() {
        let a = EthAddr::new(MacAddr([2, 0, 0, 0, 0, 1]), 5000);
        assert_eq!(a.to_string(), "02:00:00:00:00:01/5000");
        assert_eq!("02:00:00:00:00:01/5000".parse::<EthAddr>(), Ok(a));
        for bad in [
            "02:00:00:00:00:01",
            "02:00:00:00:00:01/",
            "x/1",
            "02:00:00:00:00:01/70000",
        ] {
            assert!(bad.parse::<EthAddr>().is_err(), "{bad}");
        }
    }
}

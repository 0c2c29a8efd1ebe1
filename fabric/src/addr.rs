//! Endpoint names: what `fi_getname` returns and `fi_av_insert` takes
//! (fi_cm(3), fi_av(3)).
//!
//! - Over the packet link (`FI_FORMAT_UNSPEC`, the provider's own format,
//!   8 bytes): the interface's MAC address (6 bytes) and the endpoint's EDP
//!   port (2 bytes, network order), exactly what an EDP frame carries.
//! - Over the UDP link (`FI_SOCKADDR_IN`, 16 bytes): the endpoint's UDP
//!   link address as a `struct sockaddr_in` (ip(7)). Its frames use the MAC
//!   `link::derived_mac` derives from that address and EDP port
//!   [`UDP_LINK_PORT`] (each endpoint has its own UDP link).

use runtime::EthAddr;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use edp::MacAddr;
use link::derived_mac;

use crate::error::{FiError, FiResult};
use crate::fi;

/// EDP port of every endpoint over a UDP link (the link is the endpoint's
/// own, so one port suffices).
pub const UDP_LINK_PORT: u16 = 0x4346;

/// Bytes of a packet-link name.
pub const EDP_NAME_LEN: usize = 8;

/// Bytes of a UDP-link name (`sizeof(struct sockaddr_in)`).
pub const UDP_NAME_LEN: usize = 16;

/// The address format of a domain's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrFormat {
    /// MAC + EDP port (`EDP_NAME_LEN`, 8 bytes), `FI_FORMAT_UNSPEC`.
    Edp,
    /// `struct sockaddr_in` (`UDP_NAME_LEN`, 16 bytes), `FI_SOCKADDR_IN`.
    Udp,
}

impl AddrFormat {
    /// Bytes of one name.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            AddrFormat::Edp => EDP_NAME_LEN,
            AddrFormat::Udp => UDP_NAME_LEN,
        }
    }

    /// The `fi_info::addr_format` value.
    pub fn fi_format(self) -> u32 {
        match self {
            AddrFormat::Edp => fi::FI_FORMAT_UNSPEC,
            AddrFormat::Udp => fi::FI_SOCKADDR_IN,
        }
    }

    /// Whether hints' `addr_format` `f` accepts this format: unspecified,
    /// or the same (FI_SOCKADDR, the generic socket address, accepts
    /// FI_SOCKADDR_IN).
    pub fn accepts_hint(self, f: u32) -> bool {
        f == fi::FI_FORMAT_UNSPEC
            || f == self.fi_format()
            || (self == AddrFormat::Udp && f == fi::FI_SOCKADDR)
    }

    /// Parses one name of this format.
    ///
    /// Errors: `FI_EINVAL` for a name of the wrong length, a group MAC, port
    /// 0, or a socket address that is not IPv4.
    pub fn decode(self, b: &[u8]) -> FiResult<Name> {
        if b.len() < self.len() {
            return Err(FiError::inval(format!(
                "address of {} bytes: a clusternet {self:?} name has {}",
                b.len(),
                self.len()
            )));
        }
        match self {
            AddrFormat::Edp => {
                let mut m = [0u8; 6];
                m.copy_from_slice(&b[..6]);
                let mac = MacAddr(m);
                let port = u16::from_be_bytes([b[6], b[7]]);
                if mac.is_group() || port == 0 {
                    return Err(FiError::inval(format!(
                        "address {mac} port {port}: a clusternet name has a unicast MAC and a \
                         port other than 0"
                    )));
                }
                Ok(Name::Edp { mac, port })
            }
            AddrFormat::Udp => {
                let family = u16::from_ne_bytes([b[0], b[1]]);
                if family != libc::AF_INET as u16 {
                    return Err(FiError::inval(format!(
                        "address family {family}: the UDP link takes IPv4 socket addresses \
                         (AF_INET)"
                    )));
                }
                let port = u16::from_be_bytes([b[2], b[3]]);
                let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
                Ok(Name::Udp(SocketAddrV4::new(ip, port)))
            }
        }
    }
}

/// An endpoint's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Name {
    /// Over the packet link.
    Edp {
        /// The interface's MAC.
        mac: MacAddr,
        /// The endpoint's EDP port.
        port: u16,
    },
    /// Over the UDP link: the link's UDP address.
    Udp(SocketAddrV4),
}

impl Name {
    /// The name's bytes ([`AddrFormat::len`] of them).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Name::Edp { mac, port } => {
                let mut v = mac.0.to_vec();
                v.extend_from_slice(&port.to_be_bytes());
                v
            }
            Name::Udp(a) => {
                let mut v = vec![0u8; UDP_NAME_LEN];
                v[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
                v[2..4].copy_from_slice(&a.port().to_be_bytes());
                v[4..8].copy_from_slice(&a.ip().octets());
                v
            }
        }
    }

    /// Its format.
    pub fn format(&self) -> AddrFormat {
        match self {
            Name::Edp { .. } => AddrFormat::Edp,
            Name::Udp(_) => AddrFormat::Udp,
        }
    }

    /// The (MAC, EDP port) its frames carry as source.
    pub fn wire(&self) -> EthAddr {
        match self {
            Name::Edp { mac, port } => EthAddr::new(*mac, *port),
            Name::Udp(a) => EthAddr::new(derived_mac(SocketAddr::V4(*a)), UDP_LINK_PORT),
        }
    }
}

impl fmt::Display for Name {
    /// `fi_av_straddr`'s form: `fi_clusternet://MAC/PORT` or
    /// `fi_sockaddr_in://IP:PORT` (the URL style of fi_av(3)).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Name::Edp { mac, port } => write!(f, "fi_clusternet://{mac}/{port}"),
            Name::Udp(a) => write!(f, "fi_sockaddr_in://{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edp_names_round_trip() {
        let n = Name::Edp {
            mac: MacAddr([2, 1, 2, 3, 4, 5]),
            port: 0x1234,
        };
        let b = n.encode();
        assert_eq!(b, [2, 1, 2, 3, 4, 5, 0x12, 0x34]);
        assert_eq!(AddrFormat::Edp.decode(&b).unwrap(), n);
        assert_eq!(n.wire(), EthAddr::new(MacAddr([2, 1, 2, 3, 4, 5]), 0x1234));
        assert_eq!(n.to_string(), "fi_clusternet://02:01:02:03:04:05/4660");
    }

    #[test]
    fn udp_names_are_sockaddr_in() {
        let a: SocketAddrV4 = "127.0.0.1:4000".parse().unwrap();
        let n = Name::Udp(a);
        let b = n.encode();
        assert_eq!(b.len(), 16);
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), libc::AF_INET as u16);
        assert_eq!(AddrFormat::Udp.decode(&b).unwrap(), n);
        assert_eq!(n.wire().port, UDP_LINK_PORT);
        assert_eq!(n.wire().mac, derived_mac(SocketAddr::V4(a)));
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(AddrFormat::Edp.decode(&[2, 0, 0, 0, 0, 1, 0]).is_err());
        assert!(AddrFormat::Edp.decode(&[1, 0, 0, 0, 0, 1, 0, 7]).is_err());
        assert!(AddrFormat::Edp.decode(&[2, 0, 0, 0, 0, 1, 0, 0]).is_err());
        let mut b = Name::Udp("10.0.0.1:1".parse().unwrap()).encode();
        b[0] = 10;
        b[1] = 0;
        assert!(AddrFormat::Udp.decode(&b).is_err());
    }

    #[test]
    fn hint_formats() {
        assert!(AddrFormat::Edp.accepts_hint(fi::FI_FORMAT_UNSPEC));
        assert!(!AddrFormat::Edp.accepts_hint(fi::FI_SOCKADDR_IN));
        assert!(AddrFormat::Udp.accepts_hint(fi::FI_SOCKADDR));
        assert!(AddrFormat::Udp.accepts_hint(fi::FI_SOCKADDR_IN));
        assert!(!AddrFormat::Udp.accepts_hint(fi::FI_SOCKADDR_IN6));
    }
}

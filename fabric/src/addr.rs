//! Endpoint names: what `fi_getname` returns and `fi_av_insert` takes
//! (fi_cm(3), fi_av(3)), 16 bytes in both formats.
//!
//! - Over the packet link (`FI_FORMAT_UNSPEC`, the provider's own format):
//!   the interface's MAC address (6 bytes) and the endpoint's EDP port (2
//!   bytes, network order), exactly what an EDP frame carries, then the
//!   [`NameInfo`] (8 bytes).
//! - Over the UDP link (`FI_SOCKADDR_IN`): the endpoint's UDP link address
//!   as a `struct sockaddr_in` (ip(7)), whose 8 bytes of `sin_zero` carry
//!   the [`NameInfo`]. Its frames use the MAC `link::derived_mac` derives
//!   from that address and EDP port [`UDP_LINK_PORT`] (each endpoint has
//!   its own UDP link).
//!
//! [`NameInfo`], bytes 8..16 of either: byte 8 `0xC0 | udp << 1 | keyed`
//! (0xC0..=0xC3; anything else: nothing told, as in a name built from a
//! node and a service), byte 9 zero, bytes 10..12 the endpoint's link MTU
//! (bytes of Ethernet payload it receives, network order), bytes 12..16
//! the fingerprint of its cluster key (`runtime::auth::AuthKey::fingerprint`;
//! zero without a key). Peers compare link and key at `fi_av_insert`, so
//! ranks started with different `FI_CLUSTERNET_LINK` or cluster keys learn
//! it there instead of never hearing each other, and each side sizes its
//! frames to the other's MTU.

use runtime::EthAddr;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};

use edp::MacAddr;
use link::derived_mac;

use crate::error::{FiError, FiResult};
use crate::fi;

/// EDP port of every endpoint over a UDP link (the link is the endpoint's
/// own, so one port suffices).
pub const UDP_LINK_PORT: u16 = 0x4346;

/// Bytes of a packet-link name.
pub const EDP_NAME_LEN: usize = 16;

/// Bytes of a UDP-link name (`sizeof(struct sockaddr_in)`).
pub const UDP_NAME_LEN: usize = 16;

/// Byte 8 of a name that tells its [`NameInfo`] (bit 0: keyed; bit 1: a
/// UDP-link name).
const INFO_TAG: u8 = 0xC0;

/// The cluster key an endpoint's frames carry, as its name tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyMark {
    /// The name does not tell (built from a node and a service).
    #[default]
    Untold,
    /// No key: frames are not authenticated.
    NoKey,
    /// The key with this fingerprint.
    Key([u8; 4]),
}

impl KeyMark {
    /// Whether a peer marked `peer` can talk to this endpoint: equal
    /// marks, or one that does not tell.
    pub fn agrees(self, peer: KeyMark) -> bool {
        self == peer || self == KeyMark::Untold || peer == KeyMark::Untold
    }
}

impl fmt::Display for KeyMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyMark::Untold => f.write_str("an unknown cluster key"),
            KeyMark::NoKey => f.write_str("no cluster key"),
            KeyMark::Key(k) => write!(
                f,
                "the cluster key with fingerprint {:02x}{:02x}{:02x}{:02x}",
                k[0], k[1], k[2], k[3]
            ),
        }
    }
}

/// What a name tells besides the address (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NameInfo {
    /// The link the endpoint uses (its format); `None` when the name does
    /// not tell.
    pub format: Option<AddrFormat>,
    /// The endpoint's link MTU, bytes of Ethernet payload it receives;
    /// `None` when the name does not tell.
    pub mtu: Option<u16>,
    /// Its cluster key.
    pub key: KeyMark,
}

impl NameInfo {
    /// Bytes 8..16 of a name.
    fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        if *self == NameInfo::default() {
            return b;
        }
        let key = match self.key {
            KeyMark::Key(k) => {
                b[4..].copy_from_slice(&k);
                1
            }
            _ => 0,
        };
        let udp = if self.format == Some(AddrFormat::Udp) {
            2
        } else {
            0
        };
        b[0] = INFO_TAG | udp | key;
        b[2..4].copy_from_slice(&self.mtu.unwrap_or(0).to_be_bytes());
        b
    }

    /// From bytes 8..16 of a name: nothing told unless byte 8 says so.
    fn decode(b: &[u8]) -> NameInfo {
        if b.len() < 8 || b[0] & !3 != INFO_TAG {
            return NameInfo::default();
        }
        let mtu = u16::from_be_bytes([b[2], b[3]]);
        NameInfo {
            format: Some(if b[0] & 2 != 0 {
                AddrFormat::Udp
            } else {
                AddrFormat::Edp
            }),
            mtu: (mtu != 0).then_some(mtu),
            key: if b[0] & 1 == 0 {
                KeyMark::NoKey
            } else {
                KeyMark::Key([b[4], b[5], b[6], b[7]])
            },
        }
    }
}

/// The first IPv4 address of `node`: a dotted quad, or a host name
/// resolved by the system (getaddrinfo(3): /etc/hosts, DNS).
pub fn resolve_ipv4(node: &str) -> Option<Ipv4Addr> {
    if let Ok(ip) = node.parse() {
        return Some(ip);
    }
    (node, 0).to_socket_addrs().ok()?.find_map(|a| match a {
        SocketAddr::V4(a) => Some(*a.ip()),
        SocketAddr::V6(_) => None,
    })
}

/// The address format of a domain's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrFormat {
    /// MAC + EDP port + [`NameInfo`] (`EDP_NAME_LEN`, 16 bytes),
    /// `FI_FORMAT_UNSPEC`.
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

    /// Parses one peer's name of this format.
    ///
    /// Errors: `FI_EINVAL` for a name of the wrong length, a group MAC, port
    /// 0, or a socket address that is not IPv4.
    pub fn decode(self, b: &[u8]) -> FiResult<Name> {
        let n = self.decode_source(b)?;
        match n {
            Name::Edp { mac, port: 0 } => Err(FiError::inval(format!(
                "address {mac} port 0: a clusternet name has a port other than 0"
            ))),
            n => Ok(n),
        }
    }

    /// Parses a source address of this format: as [`AddrFormat::decode`],
    /// and port 0 means "any free port" (an endpoint's `src_addr`).
    ///
    /// Errors: as [`AddrFormat::decode`], but for port 0.
    pub fn decode_source(self, b: &[u8]) -> FiResult<Name> {
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
                if mac.is_group() {
                    return Err(FiError::inval(format!(
                        "address {mac}: a clusternet name has a unicast MAC"
                    )));
                }
                Ok(Name::Edp { mac, port })
            }
            AddrFormat::Udp => {
                let family = u16::from_ne_bytes([b[0], b[1]]);
                if family != libc::AF_INET as u16 {
                    return Err(FiError::inval(format!(
                        "address family {family}: not a name of the UDP link, which takes IPv4 \
                         socket addresses (AF_INET); every process of a job needs the same \
                         FI_CLUSTERNET_LINK"
                    )));
                }
                let port = u16::from_be_bytes([b[2], b[3]]);
                let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
                Ok(Name::Udp(SocketAddrV4::new(ip, port)))
            }
        }
    }

    /// The [`NameInfo`] a name of this format tells (nothing for bytes too
    /// short to hold it).
    pub fn decode_info(self, b: &[u8]) -> NameInfo {
        b.get(8..16)
            .map_or_else(NameInfo::default, NameInfo::decode)
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
    /// The name's bytes ([`AddrFormat::len`] of them), telling nothing
    /// besides the address.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(&NameInfo::default())
    }

    /// The name's bytes, telling `info` (what `fi_getname` gives).
    pub fn encode_with(&self, info: &NameInfo) -> Vec<u8> {
        let mut v = match self {
            Name::Edp { mac, port } => {
                let mut v = mac.0.to_vec();
                v.extend_from_slice(&port.to_be_bytes());
                v
            }
            Name::Udp(a) => {
                let mut v = vec![0u8; 8];
                v[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
                v[2..4].copy_from_slice(&a.port().to_be_bytes());
                v[4..8].copy_from_slice(&a.ip().octets());
                v
            }
        };
        v.extend_from_slice(&info.encode());
        v
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
        assert_eq!(b[..8], [2, 1, 2, 3, 4, 5, 0x12, 0x34]);
        assert_eq!(b.len(), EDP_NAME_LEN);
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
        let pad = |b: &[u8]| {
            let mut v = b.to_vec();
            v.resize(EDP_NAME_LEN, 0);
            v
        };
        assert!(AddrFormat::Edp.decode(&[2, 0, 0, 0, 0, 1, 0, 7]).is_err());
        assert!(AddrFormat::Edp
            .decode(&pad(&[1, 0, 0, 0, 0, 1, 0, 7]))
            .is_err());
        assert!(AddrFormat::Edp
            .decode(&pad(&[2, 0, 0, 0, 0, 1, 0, 0]))
            .is_err());
        assert!(AddrFormat::Edp
            .decode_source(&pad(&[2, 0, 0, 0, 0, 1, 0, 0]))
            .is_ok());
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

    #[test]
    fn names_tell_mtu_and_key_and_names_without_tell_nothing() {
        for n in [
            Name::Edp {
                mac: MacAddr([2, 1, 2, 3, 4, 5]),
                port: 7,
            },
            Name::Udp("10.1.2.3:4000".parse().unwrap()),
        ] {
            let f = n.format();
            assert_eq!(f.decode_info(&n.encode()), NameInfo::default());
            for key in [KeyMark::NoKey, KeyMark::Key([1, 2, 3, 4])] {
                let info = NameInfo {
                    format: Some(f),
                    mtu: Some(9000),
                    key,
                };
                let b = n.encode_with(&info);
                assert_eq!(b.len(), f.len());
                assert_eq!(f.decode(&b).unwrap(), n);
                assert_eq!(f.decode_info(&b), info);
            }
        }
        // Another program's sin_zero bytes tell nothing.
        let mut b = Name::Udp("10.1.2.3:4000".parse().unwrap()).encode();
        b[8..].copy_from_slice(&[0xff; 8]);
        assert_eq!(AddrFormat::Udp.decode_info(&b), NameInfo::default());
    }

    #[test]
    fn a_name_of_the_packet_link_is_no_udp_name() {
        let edp = Name::Edp {
            mac: MacAddr([2, 0xfc, 0, 0, 0, 1]),
            port: 7,
        };
        let b = edp.encode();
        let e = AddrFormat::Udp.decode(&b).unwrap_err();
        assert!(e.msg.contains("FI_CLUSTERNET_LINK"), "{}", e.msg);
        let told = edp.encode_with(&NameInfo {
            format: Some(AddrFormat::Edp),
            mtu: Some(1500),
            key: KeyMark::NoKey,
        });
        assert_eq!(
            AddrFormat::Udp.decode_info(&told).format,
            Some(AddrFormat::Edp)
        );
    }

    #[test]
    fn keys_agree_when_equal_or_untold() {
        let (a, b) = (KeyMark::Key([1; 4]), KeyMark::Key([2; 4]));
        assert!(a.agrees(a) && a.agrees(KeyMark::Untold) && KeyMark::Untold.agrees(b));
        assert!(!a.agrees(b) && !a.agrees(KeyMark::NoKey) && !KeyMark::NoKey.agrees(b));
        assert!(KeyMark::NoKey.to_string().contains("no cluster key"));
        assert!(a.to_string().contains("01010101"));
    }
}

//! Peer addresses as bytes (`fi_getname(3)` / `fi_av_insert(3)`: at most
//! 64 bytes, exchanged by the launcher).
//!
//! - EDP (`ctp::EthAddr`): 8 bytes, the MAC address then the EDP port,
//!   big-endian.
//! - UDP (`SocketAddr`): 7 bytes for IPv4 (`4`, address, port) or 19 for
//!   IPv6 (`6`, address, port), big-endian.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ctp::EthAddr;
use edp::MacAddr;

use crate::CommError;

/// Longest name, bytes (libfabric's `FI_NAME_MAX`).
pub const MAX_NAME: usize = 64;

/// A transport address with a byte form.
pub trait PeerName: Sized {
    /// The address as bytes.
    fn to_name(&self) -> Vec<u8>;

    /// The address of `name`.
    ///
    /// Errors: [`CommError::Bootstrap`] naming what is wrong.
    fn from_name(name: &[u8]) -> Result<Self, CommError>;
}

fn bad(name: &[u8], what: &str) -> CommError {
    CommError::Bootstrap(format!("address of {} bytes is not {what}", name.len()))
}

impl PeerName for EthAddr {
    fn to_name(&self) -> Vec<u8> {
        let mut v = self.mac.0.to_vec();
        v.extend_from_slice(&self.port.to_be_bytes());
        v
    }

    fn from_name(name: &[u8]) -> Result<Self, CommError> {
        let b: [u8; 8] = name
            .try_into()
            .map_err(|_| bad(name, "an EDP address (6-byte MAC, 2-byte port)"))?;
        let mac = MacAddr(b[..6].try_into().expect("6 bytes"));
        Ok(EthAddr::new(mac, u16::from_be_bytes([b[6], b[7]])))
    }
}

impl PeerName for SocketAddr {
    fn to_name(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(19);
        match self.ip() {
            IpAddr::V4(a) => {
                v.push(4);
                v.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                v.push(6);
                v.extend_from_slice(&a.octets());
            }
        }
        v.extend_from_slice(&self.port().to_be_bytes());
        v
    }

    fn from_name(name: &[u8]) -> Result<Self, CommError> {
        let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        match name {
            [4, rest @ ..] if rest.len() == 6 => {
                let ip: [u8; 4] = rest[..4].try_into().expect("4 bytes");
                Ok(SocketAddr::new(Ipv4Addr::from(ip).into(), port(&rest[4..])))
            }
            [6, rest @ ..] if rest.len() == 18 => {
                let ip: [u8; 16] = rest[..16].try_into().expect("16 bytes");
                Ok(SocketAddr::new(
                    Ipv6Addr::from(ip).into(),
                    port(&rest[16..]),
                ))
            }
            _ => Err(bad(
                name,
                "a UDP address (4 + IPv4 + port, or 6 + IPv6 + port)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_junk_is_refused() {
        let e: EthAddr = runtime::EthAddr::new(MacAddr([2, 0, 0, 0, 0, 9]), 1600);
        assert_eq!(e.to_name(), [2, 0, 0, 0, 0, 9, 6, 64]);
        assert_eq!(EthAddr::from_name(&e.to_name()).unwrap(), e);
        for a in ["127.0.0.1:5000", "[::1]:7"] {
            let a: SocketAddr = a.parse().unwrap();
            assert!(a.to_name().len() <= MAX_NAME);
            assert_eq!(SocketAddr::from_name(&a.to_name()).unwrap(), a);
        }
        assert!(EthAddr::from_name(&[1, 2, 3]).is_err());
        assert!(SocketAddr::from_name(&[4, 1, 2]).is_err());
        assert!(SocketAddr::from_name(&[]).is_err());
    }
}

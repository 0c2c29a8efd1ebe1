//! Bootstrap under an MPI launcher (feature `mpi`): the ranks of a job
//! started by Open MPI's `mpirun` or Slurm's `srun` (PMI) find each other
//! with one `MPI_Allgather` of their endpoint addresses, then talk only
//! over CTP. MPI is used for nothing else (the role of Open MPI's modex
//! for its transports; the thesis's BTL exchanged its addresses the same
//! way, ch. 6).
//!
//! Every rank binds its endpoint first (an ephemeral port), gathers every
//! rank's address in rank order, and joins with [`Communicator::new`];
//! ranks are MPI's `MPI_COMM_WORLD` ranks.

use std::net::{IpAddr, SocketAddr};

use ctp::{CtpConfig, CtpSocket, EdpTransport, UdpTransport};
use edp::MacAddr;
use mpi::traits::Communicator as MpiCommunicator;
use mpi::traits::CommunicatorCollectives;

use crate::{CommConfig, CommError, Communicator};

/// Bytes of one UDP address in the exchange: family (4 or 6), 16 address
/// bytes, port (big-endian).
const UDP_ADDR_BYTES: usize = 19;
/// Bytes of one EDP address in the exchange: MAC, port (big-endian).
const EDP_ADDR_BYTES: usize = 8;

/// Joins the communicator of every rank of `world` over CTP on UDP: binds
/// `ip`:0 (the address the other ranks reach this one at), gathers every
/// rank's address, and joins as `world`'s rank.
///
/// Errors: [`CommError::Bootstrap`] for an unspecified `ip` (0.0.0.0 or
/// :: names no address the peers could use) or an address that does not
/// decode; socket errors ([`CommError::Io`]); those of
/// [`Communicator::new`].
pub fn from_mpi_udp<W: MpiCommunicator>(
    world: &W,
    ip: IpAddr,
    cfg: CommConfig,
    ctp: CtpConfig,
) -> Result<Communicator<UdpTransport>, CommError> {
    if ip.is_unspecified() {
        return Err(CommError::Bootstrap(format!(
            "{ip} names no address the other ranks could reach: give this host's address on the cluster network"
        )));
    }
    let sock = CtpSocket::bind_udp(SocketAddr::new(ip, 0), ctp)?;
    let mine = encode_udp(sock.local_addr()?);
    let mut all = vec![0u8; UDP_ADDR_BYTES * world.size() as usize];
    world.all_gather_into(&mine[..], &mut all[..]);
    let hosts = all
        .chunks(UDP_ADDR_BYTES)
        .enumerate()
        .map(|(r, b)| decode_udp(b).ok_or_else(|| bad(r)))
        .collect::<Result<Vec<_>, _>>()?;
    Communicator::new(sock, world.rank() as usize, hosts, cfg)
}

/// Joins the communicator of every rank of `world` over CTP on EDP on
/// `iface` (an ephemeral EDP port in the process's runtime for `iface`),
/// gathering every rank's MAC and port. All ranks must share one Ethernet
/// segment.
///
/// Errors: those of `CtpSocket::bind_edp` (EPERM names CAP_NET_RAW) and
/// of [`Communicator::new`].
pub fn from_mpi_edp<W: MpiCommunicator>(
    world: &W,
    iface: &str,
    cfg: CommConfig,
    ctp: CtpConfig,
) -> Result<Communicator<EdpTransport>, CommError> {
    let sock = CtpSocket::bind_edp(iface, 0, ctp)?;
    let (_, mac, port) = sock.local_addr()?;
    let mut mine = [0u8; EDP_ADDR_BYTES];
    mine[..6].copy_from_slice(&mac.0);
    mine[6..].copy_from_slice(&port.to_be_bytes());
    let mut all = vec![0u8; EDP_ADDR_BYTES * world.size() as usize];
    world.all_gather_into(&mine[..], &mut all[..]);
    let hosts = all
        .chunks(EDP_ADDR_BYTES)
        .map(|b| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[..6]);
            runtime::EthAddr::new(MacAddr(m), u16::from_be_bytes([b[6], b[7]]))
        })
        .collect();
    Communicator::new(sock, world.rank() as usize, hosts, cfg)
}

fn bad(rank: usize) -> CommError {
    CommError::Bootstrap(format!("rank {rank} sent an address that does not decode"))
}

fn encode_udp(a: SocketAddr) -> [u8; UDP_ADDR_BYTES] {
    let mut b = [0u8; UDP_ADDR_BYTES];
    match a.ip() {
        IpAddr::V4(v4) => {
            b[0] = 4;
            b[1..5].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            b[0] = 6;
            b[1..17].copy_from_slice(&v6.octets());
        }
    }
    b[17..].copy_from_slice(&a.port().to_be_bytes());
    b
}

fn decode_udp(b: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_be_bytes([b[17], b[18]]);
    let ip: IpAddr = match b[0] {
        4 => <[u8; 4]>::try_from(&b[1..5]).ok()?.into(),
        6 => <[u8; 16]>::try_from(&b[1..17]).ok()?.into(),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_addresses_round_trip_and_bad_families_are_refused() {
        for a in ["10.1.2.3:4567", "[fe80::1]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(decode_udp(&encode_udp(a)), Some(a));
        }
        let mut b = encode_udp("10.1.2.3:4".parse().unwrap());
        b[0] = 5;
        assert_eq!(decode_udp(&b), None);
    }
}

//! The control port (port 0 of EDP's ethertype): echo requests and
//! replies (thesis ch. 4.2.5 and af_enet.h; used in ch. 6.3 to find which
//! interface reaches a peer's MAC). In the thesis the protocol module in
//! the kernel answers them; here the runtime does, for the host, while it
//! holds the control lease (the responder role), whatever sockets the
//! process has (smoltcp's interface answers ICMP echo the same way). The
//! requesting side, `edp::echo::Pinger`, lives with EDP's sockets.
//!
//! Control payload (network byte order), 8 bytes then optional data:
//!
//! ```text
//!  0       1       2               4                               8
//! +-------+-------+---------------+-------------------------------+------
//! | type  |  0    |  identifier   |        sequence number        | data
//! +-------+-------+---------------+-------------------------------+------
//! type 1 = echo request, 2 = echo reply
//! ```
//!
//! A reply is the request with type 2 and addresses and ports swapped: the
//! same size, never larger. Control frames sent to a group (multicast or
//! broadcast) destination are never answered. [`answer`] is the rule,
//! without I/O.

use link::eth::{EthernetRepr, MacAddr, WireError, ETH_HEADER_LEN};

use crate::port::{PortHeader, PORT_HEADER_LEN};
use crate::ports::CONTROL_PORT;

/// Control type: echo request.
pub const ECHO_REQUEST: u8 = 1;
/// Control type: echo reply.
pub const ECHO_REPLY: u8 = 2;
/// Length of the echo header in bytes.
pub const ECHO_HEADER_LEN: usize = 8;

/// The echo header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRepr {
    /// [`ECHO_REQUEST`] or [`ECHO_REPLY`].
    pub kind: u8,
    /// Identifier chosen by the requester (per pinger).
    pub ident: u16,
    /// Sequence number chosen by the requester (per request).
    pub seq: u32,
}

impl EchoRepr {
    /// Parses a control payload; returns the header and the data after it.
    ///
    /// Errors: `Truncated` when shorter than 8 bytes; `Inconsistent` for a
    /// type other than 1 or 2.
    pub fn parse(payload: &[u8]) -> Result<(Self, &[u8]), WireError> {
        if payload.len() < ECHO_HEADER_LEN {
            return Err(WireError::Truncated {
                need: ECHO_HEADER_LEN,
                have: payload.len(),
            });
        }
        let kind = payload[0];
        if kind != ECHO_REQUEST && kind != ECHO_REPLY {
            return Err(WireError::Inconsistent("unknown control message type"));
        }
        Ok((
            Self {
                kind,
                ident: u16::from_be_bytes([payload[2], payload[3]]),
                seq: u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
            },
            &payload[ECHO_HEADER_LEN..],
        ))
    }

    /// Writes the 8-byte header at the start of `buf` (panics if shorter: a
    /// caller bug).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.kind;
        buf[1] = 0;
        buf[2..4].copy_from_slice(&self.ident.to_be_bytes());
        buf[4..8].copy_from_slice(&self.seq.to_be_bytes());
    }
}

/// What the responder decided about one received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Answer with the reply frame of this many bytes written to the output buffer.
    Reply(usize),
    /// Not answered: malformed, not a request, or not for us.
    Ignore,
    /// Not answered: sent to a group address.
    Group,
}

/// The responder's rule, without I/O: given a received control frame of
/// `ethertype` (EDP's), writes the reply into `out` (at least as long as
/// `frame`): the request with type 2 and addresses and ports swapped, the
/// same size (padding trimmed).
pub fn answer(
    frame: &[u8],
    ethertype: u16,
    mac: MacAddr,
    max_frame: usize,
    out: &mut [u8],
) -> Verdict {
    let Ok((eth, packet)) = EthernetRepr::parse_for(frame, ethertype, max_frame) else {
        return Verdict::Ignore;
    };
    let Ok((ports, payload)) = PortHeader::parse(packet) else {
        return Verdict::Ignore;
    };
    if ports.dst_port != CONTROL_PORT {
        return Verdict::Ignore;
    }
    if eth.dst.is_group() {
        return Verdict::Group;
    }
    if eth.dst != mac || eth.src.is_group() {
        return Verdict::Ignore;
    }
    match EchoRepr::parse(payload) {
        Ok((r, _)) if r.kind == ECHO_REQUEST => {}
        _ => return Verdict::Ignore,
    }
    let n = ETH_HEADER_LEN + PORT_HEADER_LEN + payload.len();
    if out.len() < n {
        return Verdict::Ignore;
    }
    EthernetRepr {
        dst: eth.src,
        src: mac,
        ethertype,
    }
    .emit(out);
    PortHeader {
        src_port: CONTROL_PORT,
        dst_port: ports.src_port,
        payload_len: ports.payload_len,
    }
    .emit(&mut out[ETH_HEADER_LEN..]);
    out[ETH_HEADER_LEN + PORT_HEADER_LEN..n].copy_from_slice(payload);
    out[ETH_HEADER_LEN + PORT_HEADER_LEN] = ECHO_REPLY;
    Verdict::Reply(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ETHERTYPE_EDP;

    const ME: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const PEER: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn request(dst: MacAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 1514];
        let eth = EthernetRepr {
            dst,
            src: PEER,
            ethertype: ETHERTYPE_EDP,
        };
        eth.emit(&mut b);
        PortHeader {
            src_port: sport,
            dst_port: dport,
            payload_len: payload.len() as u16,
        }
        .emit(&mut b[ETH_HEADER_LEN..]);
        let n = ETH_HEADER_LEN + PORT_HEADER_LEN + payload.len();
        b[ETH_HEADER_LEN + PORT_HEADER_LEN..n].copy_from_slice(payload);
        b.truncate(n);
        b
    }

    fn echo_payload(kind: u8, extra: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; ECHO_HEADER_LEN];
        EchoRepr {
            kind,
            ident: 0xbeef,
            seq: 0x01020304,
        }
        .emit(&mut p);
        p.extend_from_slice(extra);
        p
    }

    #[test]
    fn reply_mirrors_request() {
        let req = request(ME, 50000, 0, &echo_payload(ECHO_REQUEST, b"data"));
        let mut out = [0u8; 1514];
        let Verdict::Reply(n) = answer(&req, ETHERTYPE_EDP, ME, 1514, &mut out) else {
            panic!("no reply");
        };
        assert_eq!(n, req.len(), "a reply is exactly as large as its request");
        let (eth, packet) = EthernetRepr::parse(&out[..n]).unwrap();
        assert_eq!((eth.dst, eth.src), (PEER, ME));
        let (ports, payload) = PortHeader::parse(packet).unwrap();
        assert_eq!((ports.src_port, ports.dst_port), (0, 50000));
        let (r, data) = EchoRepr::parse(payload).unwrap();
        assert_eq!(
            r,
            EchoRepr {
                kind: ECHO_REPLY,
                ident: 0xbeef,
                seq: 0x01020304
            }
        );
        assert_eq!(data, b"data");
    }

    #[test]
    fn group_and_foreign_frames_are_not_answered() {
        let mut out = [0u8; 1514];
        let p = echo_payload(ECHO_REQUEST, b"");
        let ok = request(ME, 50000, 0, &p);
        let cases: [(&str, Vec<u8>, Verdict); 8] = [
            (
                "broadcast",
                request(MacAddr::BROADCAST, 50000, 0, &p),
                Verdict::Group,
            ),
            (
                "multicast",
                request(MacAddr([0x01, 0, 0x5e, 0, 0, 1]), 50000, 0, &p),
                Verdict::Group,
            ),
            (
                "for another host",
                request(PEER, 50000, 0, &p),
                Verdict::Ignore,
            ),
            (
                "a reply",
                request(ME, 50000, 0, &echo_payload(ECHO_REPLY, b"")),
                Verdict::Ignore,
            ),
            (
                "not the control port",
                request(ME, 50000, 7, &p),
                Verdict::Ignore,
            ),
            (
                "truncated echo header",
                request(ME, 50000, 0, &[ECHO_REQUEST, 0, 0]),
                Verdict::Ignore,
            ),
            (
                "unknown type",
                request(ME, 50000, 0, &echo_payload(9, b"")),
                Verdict::Ignore,
            ),
            (
                "malformed frame",
                ok[..ETH_HEADER_LEN + PORT_HEADER_LEN + 3].to_vec(),
                Verdict::Ignore,
            ),
        ];
        for (what, frame, want) in cases {
            assert_eq!(
                answer(&frame, ETHERTYPE_EDP, ME, 1514, &mut out),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn echo_codec_round_trip() {
        let r = EchoRepr {
            kind: ECHO_REQUEST,
            ident: 7,
            seq: u32::MAX,
        };
        let mut b = [0u8; 8];
        r.emit(&mut b);
        assert_eq!(b, [1, 0, 0, 7, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(EchoRepr::parse(&b).unwrap(), (r, &[][..]));
    }
}

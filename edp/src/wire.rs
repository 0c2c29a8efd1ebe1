//! EDP's wire: the EDP header (thesis ch. 4.1; PROTOCOL.md) is the
//! runtime's port header (`runtime::port`: source port, destination port,
//! payload length, 6 bytes in network byte order), which ESP's header
//! starts with and on which the runtime demultiplexes; an EDP frame is an
//! Ethernet II header (`link::eth`), that header and the payload, padding
//! trimmed. The codecs follow smoltcp's style (checked views over named
//! byte ranges, a `Repr` with `parse`/`emit`); malformed input is a
//! [`WireError`], never a panic.

use link::eth::emit_frame;
pub use link::eth::{EthernetRepr, Frame};
pub use link::eth::{MacAddr, WireError, ETH_HEADER_LEN, ETH_MIN_FRAME_LEN};
/// EDP's header is the runtime's port header, which ESP's starts with.
pub use runtime::port::{
    field, PortHeader as EdpRepr, PortPacket as EdpPacket, PORT_HEADER_LEN as EDP_HEADER_LEN,
};
pub use runtime::{CONTROL_PORT, ETHERTYPE_EDP, ETHERTYPE_ESP};

/// A parsed EDP frame.
pub type EdpFrame<'a> = Frame<'a, EdpRepr>;

/// Builds a complete EDP frame into `buf` and returns its length in bytes:
/// [`emit_frame`] with an [`EdpRepr`] of the two ports.
///
/// Errors: [`WireError::Oversized`] if the payload exceeds `u16::MAX` or does
/// not fit in `buf`.
pub fn emit_edp_frame(
    buf: &mut [u8],
    eth: &EthernetRepr,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Result<usize, WireError> {
    let edp = EdpRepr {
        src_port,
        dst_port,
        payload_len: 0,
    };
    emit_frame(buf, eth, &edp, payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use link::eth::EthernetFrame;
    use proptest::prelude::*;

    const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 2]);

    fn eth() -> EthernetRepr {
        EthernetRepr {
            dst: B,
            src: A,
            ethertype: ETHERTYPE_EDP,
        }
    }

    #[test]
    fn mac_parse_and_display() {
        let m: MacAddr = "02:00:0a:ff:00:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0xff, 0, 1]);
        assert_eq!(m.to_string(), "02:00:0a:ff:00:01");
        assert!("02:00:0a:ff:00".parse::<MacAddr>().is_err());
        assert!("02:00:0a:ff:00:01:02".parse::<MacAddr>().is_err());
        assert!("zz:00:0a:ff:00:01".parse::<MacAddr>().is_err());
        assert!("002:0:0a:ff:00:01".parse::<MacAddr>().is_err());
        assert!(MacAddr::BROADCAST.is_group());
        assert!(MacAddr([0x01, 0, 0x5e, 0, 0, 1]).is_group());
        assert!(!A.is_group());
    }

    #[test]
    fn header_bytes_are_network_order() {
        let mut buf = [0u8; 64];
        let n = emit_edp_frame(&mut buf, &eth(), 0x1234, 0xabcd, b"hi").unwrap();
        assert_eq!(n, 22);
        assert_eq!(&buf[12..14], &[0x88, 0xb5]);
        assert_eq!(&buf[14..20], &[0x12, 0x34, 0xab, 0xcd, 0x00, 0x02]);
        assert_eq!(&buf[20..22], b"hi");
    }

    #[test]
    fn views_write_through_the_ranges_they_read() {
        let mut buf = [0u8; 32];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        f.set_dst(B);
        f.set_src(A);
        f.set_ethertype(ETHERTYPE_EDP);
        let mut p = EdpPacket::new_unchecked(f.payload_mut());
        p.set_src_port(7);
        p.set_dst_port(9);
        p.set_payload_len(3);
        p.payload_mut()[..3].copy_from_slice(b"xyz");
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!((f.dst(), f.src(), f.ethertype()), (B, A, ETHERTYPE_EDP));
        let p = EdpPacket::new_checked(f.payload()).unwrap();
        assert_eq!(
            (p.src_port(), p.dst_port(), p.payload()),
            (7, 9, &b"xyz"[..])
        );
        // Repr::emit goes through the same setters.
        let mut again = [0u8; 32];
        let n = emit_frame(
            &mut again,
            &eth(),
            &EdpRepr {
                src_port: 7,
                dst_port: 9,
                payload_len: 0,
            },
            b"xyz",
        )
        .unwrap();
        assert_eq!(&again[..n], &buf[..n]);
        let parsed = EdpFrame::parse(&again[..n], ETHERTYPE_EDP, 1514).unwrap();
        assert_eq!(parsed.emit(&mut [0u8; 32]), Ok(n));
    }

    #[test]
    fn padding_is_trimmed() {
        let mut buf = [0u8; ETH_MIN_FRAME_LEN];
        emit_edp_frame(&mut buf, &eth(), 7, 9, b"abc").unwrap();
        let f = EdpFrame::parse(&buf, ETHERTYPE_EDP, 1514).unwrap();
        assert_eq!(f.payload, b"abc");
        assert_eq!(f.header.src_port, 7);
        assert_eq!(f.header.dst_port, 9);
    }

    #[test]
    fn malformed_frames_are_errors() {
        let mut buf = [0u8; 64];
        let n = emit_edp_frame(&mut buf, &eth(), 7, 9, b"abcdef").unwrap();
        // truncated Ethernet header
        assert!(matches!(
            EdpFrame::parse(&buf[..10], ETHERTYPE_EDP, 1514),
            Err(WireError::Truncated { .. })
        ));
        // truncated EDP header
        assert!(matches!(
            EdpFrame::parse(&buf[..17], ETHERTYPE_EDP, 1514),
            Err(WireError::Truncated { .. })
        ));
        // length field larger than the frame
        assert!(matches!(
            EdpFrame::parse(&buf[..n - 1], ETHERTYPE_EDP, 1514),
            Err(WireError::Truncated { need: 12, have: 11 })
        ));
        // wrong ethertype
        assert!(matches!(
            EdpFrame::parse(&buf[..n], ETHERTYPE_ESP, 1514),
            Err(WireError::Ethertype { .. })
        ));
        // oversized
        assert!(matches!(
            EdpFrame::parse(&buf[..n], ETHERTYPE_EDP, 20),
            Err(WireError::Oversized { .. })
        ));
        // payload too large for buffer
        assert!(emit_edp_frame(&mut buf, &eth(), 1, 2, &[0u8; 100]).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(src in any::<u16>(), dst in any::<u16>(),
                      payload in proptest::collection::vec(any::<u8>(), 0..2000),
                      pad in 0usize..64) {
            let mut buf = vec![0u8; ETH_HEADER_LEN + EDP_HEADER_LEN + payload.len() + pad];
            let n = emit_edp_frame(&mut buf, &eth(), src, dst, &payload).unwrap();
            prop_assert_eq!(n + pad, buf.len());
            let f = EdpFrame::parse(&buf, ETHERTYPE_EDP, 9014 + 64).unwrap();
            prop_assert_eq!(f.eth, eth());
            prop_assert_eq!(f.header.src_port, src);
            prop_assert_eq!(f.header.dst_port, dst);
            prop_assert_eq!(f.payload, &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(f) = EdpFrame::parse(&bytes, ETHERTYPE_EDP, 1514) {
                // Whatever parses must be self-consistent.
                prop_assert_eq!(f.payload.len(), f.header.payload_len as usize);
                prop_assert!(ETH_HEADER_LEN + EDP_HEADER_LEN + f.payload.len() <= bytes.len());
            }
        }
    }
}

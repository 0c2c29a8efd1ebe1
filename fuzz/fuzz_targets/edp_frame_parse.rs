//! Fuzzes the EDP frame parser (`edp::wire::EdpFrame::parse`) and the
//! Ethernet/EDP header codecs on arbitrary bytes: no input may panic, and
//! whatever parses must be self-consistent and re-emit to the same bytes.
#![no_main]

use edp::wire::{EDP_HEADER_LEN, EdpFrame, EdpPacket, emit_edp_frame};

use link::ETH_HEADER_LEN;

use link::eth::EthernetFrame;

use runtime::{ETHERTYPE_EDP, ETHERTYPE_ESP};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the frame limit (MTU 1500, 9000 or a tiny one) so
    // the Oversized path is reached as well.
    let (limit, frame) = match data.split_first() {
        Some((sel, rest)) => {
            let limit = match sel % 3 {
                0 => 1514,
                1 => 9014,
                _ => 14 + (*sel as usize),
            };
            (limit, rest)
        }
        None => (1514, data),
    };

    let _ = EthernetFrame::new_checked(frame)
        .map(|f| (f.dst(), f.src(), f.ethertype(), f.payload().len()));
    if frame.len() >= ETH_HEADER_LEN {
        let _ = EdpPacket::new_checked(&frame[ETH_HEADER_LEN..])
            .map(|p| (p.src_port(), p.dst_port(), p.payload().len()));
    }

    for ethertype in [ETHERTYPE_EDP, ETHERTYPE_ESP] {
        if let Ok(f) = EdpFrame::parse(frame, ethertype, limit) {
            assert!(frame.len() <= limit);
            assert_eq!(f.eth.ethertype, ethertype);
            assert_eq!(f.payload.len(), f.header.payload_len as usize);
            let used = ETH_HEADER_LEN + EDP_HEADER_LEN + f.payload.len();
            assert!(used <= frame.len());
            // Re-emitting the parsed fields gives back the frame without padding.
            let mut buf = vec![0u8; used];
            let n = emit_edp_frame(&mut buf, &f.eth, f.header.src_port, f.header.dst_port, f.payload)
                .expect("a parsed frame re-emits");
            assert_eq!(n, used);
            assert_eq!(&buf[..], &frame[..used]);
        }
    }
});

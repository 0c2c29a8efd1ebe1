//! Fuzzes the CTP header parser (`ctp::wire::Repr::parse`, the 25-byte
//! little-endian header of the CTP spec) on arbitrary datagrams: no input may
//! panic; a parsed packet re-emits to the same bytes (up to its packet size),
//! and its confirmation is itself a valid packet.
#![no_main]

use ctp::wire::{Packet, Repr, CTP_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Packet::new_checked(data).map(|p| (p.id(), p.number(), p.amount(), p.message_size()));
    let Ok((repr, body)) = Repr::parse(data) else {
        return;
    };
    assert_eq!(body.len(), repr.payload_len as usize);
    assert_eq!(repr.packet_len(), CTP_HEADER_LEN + body.len());
    assert!(repr.packet_len() <= data.len());

    let mut buf = vec![0u8; repr.packet_len()];
    repr.emit(&mut buf);
    buf[CTP_HEADER_LEN..].copy_from_slice(body);
    assert_eq!(&buf[..], &data[..repr.packet_len()]);

    let c = repr.confirmation();
    let mut cbuf = vec![0u8; c.packet_len()];
    c.emit(&mut cbuf);
    let (back, cbody) = Repr::parse(&cbuf).expect("a confirmation parses");
    assert!(back.confirm && cbody.is_empty());
    assert_eq!(
        (back.command, back.id, back.number),
        (repr.command, repr.id, repr.number)
    );
});

//! Fuzzes the ESP frame parser (`esp::wire::EspFrame::parse`: header, flags,
//! options incl. SACK, checksum) on arbitrary bytes: no input may panic; a
//! parsed segment is self-consistent, and emitting its fields and parsing
//! again gives the same fields and payload (options are normalised, so bytes
//! may differ).
#![no_main]

use link::ETH_HEADER_LEN;
use esp::wire::{emit_esp_frame, EspFrame, EspPacket, ETHERTYPE_ESP};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte: bit 0 picks the frame limit; bit 1 zeroes the checksum
    // field ("not computed") so the fuzzer gets past the checksum into the
    // flags and options checks.
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let limit = if sel & 1 == 0 { 1514 } else { 9014 };
    let mut owned = rest.to_vec();
    if sel & 2 != 0 && owned.len() >= ETH_HEADER_LEN + 20 {
        owned[ETH_HEADER_LEN + 18] = 0;
        owned[ETH_HEADER_LEN + 19] = 0;
    }
    let frame = &owned[..];
    if frame.len() >= ETH_HEADER_LEN {
        let _ = EspPacket::new_checked(&frame[ETH_HEADER_LEN..]).map(|p| {
            (
                p.seq(),
                p.ack(),
                p.window(),
                p.options().len(),
                p.payload().len(),
            )
        });
    }
    let Ok(f) = EspFrame::parse(frame, ETHERTYPE_ESP, limit) else {
        return;
    };
    assert!(frame.len() <= limit);
    assert_eq!(f.payload.len(), f.header.payload_len as usize);
    let _ = f.header.reset_reply();
    let _ = f.header.seq_len();

    let mut buf = vec![0u8; ETH_HEADER_LEN + f.header.header_len() + f.payload.len()];
    let n = emit_esp_frame(&mut buf, &f.eth, &f.header, f.payload).expect("a parsed segment re-emits");
    let again =
        EspFrame::parse(&buf[..n], ETHERTYPE_ESP, usize::MAX).expect("re-emitted segment parses");
    assert_eq!(again.eth, f.eth);
    assert_eq!(again.header, f.header);
    assert_eq!(again.payload, f.payload);
});

//! Byte-exact header vectors (CTP spec v1.2, table 1: packed little-endian
//! 25-byte header; "Confirmations"; "Options").

use ctp::wire::{Options, Packet, Repr, WireError, CTP_HEADER_LEN};

/// Builds the expected bytes field by field, independently of the codec.
#[allow(clippy::too_many_arguments)]
fn bytes(size: u16, cmd: u16, number: u32, amount: u32, id: u32, msize: u64, opts: u8) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&size.to_le_bytes());
    v.extend_from_slice(&cmd.to_le_bytes());
    v.extend_from_slice(&number.to_le_bytes());
    v.extend_from_slice(&amount.to_le_bytes());
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&msize.to_le_bytes());
    v.push(opts);
    assert_eq!(v.len(), 25);
    v
}

fn emit(r: &Repr) -> Vec<u8> {
    let mut b = vec![0u8; CTP_HEADER_LEN];
    r.emit(&mut b);
    b
}

#[test]
fn normal_command_vector() {
    // Command 7, 5-byte body "hello", id 0x11223344, first packet to the peer.
    let r = Repr {
        command: 7,
        confirm: false,
        number: 0,
        amount: 1,
        id: 0x1122_3344,
        message_size: 5,
        options: Options::START_SESSION,
        payload_len: 5,
    };
    let expected: [u8; 25] = [
        0x1e, 0x00, // size 30
        0x07, 0x00, // command 7
        0x00, 0x00, 0x00, 0x00, // number 0
        0x01, 0x00, 0x00, 0x00, // amount 1
        0x44, 0x33, 0x22, 0x11, // id
        0x05, 0, 0, 0, 0, 0, 0, 0,    // message size 5
        0x10, // StartSession
    ];
    assert_eq!(emit(&r), expected);
    let mut pkt = expected.to_vec();
    pkt.extend_from_slice(b"hello");
    let (p, body) = Repr::parse(&pkt).unwrap();
    assert_eq!(p, r);
    assert_eq!(body, b"hello");
    let view = Packet::new_checked(&pkt[..]).unwrap();
    assert_eq!(view.packet_size(), 30);
    assert_eq!(view.command_field(), 7);
    assert_eq!(view.id(), 0x1122_3344);
}

#[test]
fn confirmation_vector() {
    let data = Repr {
        command: 0x1234,
        confirm: false,
        number: 0,
        amount: 1,
        id: 0xdead_beef,
        message_size: 100,
        options: Options::NONE,
        payload_len: 100,
    };
    let c = data.confirmation();
    let expected: [u8; 25] = [
        0x19, 0x00, // size 25 = header only
        0x34, 0x92, // command 0x1234 | 0x8000
        0, 0, 0, 0, // number
        1, 0, 0, 0, // amount
        0xef, 0xbe, 0xad, 0xde, // id
        0, 0, 0, 0, 0, 0, 0, 0, // message size 0
        0x00,
    ];
    assert_eq!(emit(&c), expected);
    let (p, body) = Repr::parse(&expected).unwrap();
    assert!(p.confirm);
    assert_eq!(p.command, 0x1234);
    assert_eq!(p.id, 0xdead_beef);
    assert!(body.is_empty());
    assert_eq!(p, c);
}

#[test]
fn large_message_three_packets_vector() {
    // A 10-byte message split in parts of 4 bytes: 4 + 4 + 2, ids 0xfffffffe,
    // 0xffffffff, 0 (wrapping), command 300, UniqueCommand.
    let msg = b"0123456789";
    let ids = [0xffff_fffeu32, 0xffff_ffff, 0];
    let parts: [&[u8]; 3] = [&msg[0..4], &msg[4..8], &msg[8..10]];
    for (n, part) in parts.iter().enumerate() {
        let r = Repr {
            command: 300,
            confirm: false,
            number: n as u32,
            amount: 3,
            id: ids[n],
            message_size: 10,
            options: Options::UNIQUE_COMMAND,
            payload_len: part.len() as u16,
        };
        let mut expected = bytes(25 + part.len() as u16, 300, n as u32, 3, ids[n], 10, 0x04);
        assert_eq!(emit(&r), expected);
        expected.extend_from_slice(part);
        let (p, body) = Repr::parse(&expected).unwrap();
        assert_eq!(p, r);
        assert_eq!(body, *part);
        // the confirmation of each part
        let c = emit(&r.confirmation());
        assert_eq!(c, bytes(25, 300 | 0x8000, n as u32, 3, ids[n], 0, 0x04));
    }
    // spot-check the literal bytes of part 1
    let p1 = bytes(29, 300, 1, 3, 0xffff_ffff, 10, 4);
    assert_eq!(
        p1,
        [
            0x1d, 0x00, 0x2c, 0x01, 1, 0, 0, 0, 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 10, 0, 0, 0, 0,
            0, 0, 0, 4
        ]
    );
}

#[test]
fn each_option_bit() {
    let cases = [
        (Options::DEL_AFTER_ERROR, 0x01u8),
        (Options::NO_RESEND, 0x02),
        (Options::UNIQUE_COMMAND, 0x04),
        (Options::BROADCAST, 0x08),
        (Options::START_SESSION, 0x10),
        (Options::PING, 0x07),
        (Options::from_bits_retain(0x1f), 0x1f),
    ];
    for (opt, byte) in cases {
        let r = Repr {
            command: 1,
            confirm: false,
            number: 0,
            amount: 0, // "zero or unity" for a normal command
            id: 42,
            message_size: 0,
            options: opt,
            payload_len: 0,
        };
        let b = emit(&r);
        assert_eq!(b, bytes(25, 1, 0, 0, 42, 0, byte));
        assert_eq!(b[24], byte);
        let (p, _) = Repr::parse(&b).unwrap();
        assert_eq!(p.options, opt);
    }
}

#[test]
fn trailing_padding_is_ignored() {
    // Over EDP on Ethernet a short frame is padded; the size field governs.
    let mut b = bytes(27, 5, 0, 1, 9, 2, 0);
    b.extend_from_slice(b"ok");
    b.extend_from_slice(&[0u8; 20]);
    let (r, body) = Repr::parse(&b).unwrap();
    assert_eq!(r.payload_len, 2);
    assert_eq!(body, b"ok");
}

#[test]
fn malformed_inputs_are_errors() {
    assert_eq!(
        Repr::parse(&[0u8; 10]).unwrap_err(),
        WireError::Truncated { need: 25, have: 10 }
    );
    // size field below the header
    assert!(matches!(
        Repr::parse(&bytes(10, 1, 0, 1, 1, 0, 0)),
        Err(WireError::Inconsistent(_))
    ));
    // size field beyond the datagram
    assert_eq!(
        Repr::parse(&bytes(40, 1, 0, 1, 1, 15, 0)).unwrap_err(),
        WireError::Truncated { need: 40, have: 25 }
    );
    // confirmation with a body
    let mut c = bytes(26, 0x8001, 0, 1, 1, 0, 0);
    c.push(0);
    assert!(Repr::parse(&c).is_err());
    // normal command: message size differs from body
    assert!(Repr::parse(&bytes(25, 1, 0, 1, 1, 3, 0)).is_err());
    // number beyond count
    let mut l = bytes(26, 1, 3, 3, 1, 10, 0);
    l.push(0);
    assert!(Repr::parse(&l).is_err());
    // message size beyond 48 bits
    let mut big = bytes(26, 1, 0, 2, 1, 1 << 48, 0);
    big.push(0);
    assert!(Repr::parse(&big).is_err());
}

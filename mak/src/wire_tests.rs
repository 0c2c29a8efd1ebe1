use super::*;
use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

fn hdr(strategy: Strategy, source: u16, member: u16) -> Header {
    Header {
        strategy,
        group: GroupId(7),
        source: MemberId(source),
        member: MemberId(member),
    }
}

fn emit(r: &Repr) -> Vec<u8> {
    let mut b = vec![0u8; r.frame_len()];
    assert_eq!(r.emit(&mut b), b.len());
    b
}

#[test]
fn data_layout_is_the_documented_one() {
    let r = Repr::Data {
        header: hdr(Strategy::Mak, 3, 3),
        flags: Flags::START.union(Flags::ACK_REQ),
        seq: Seq(0x0102_0304),
        msg: 9,
        msg_len: 5,
        payload: b"hi",
    };
    let b = emit(&r);
    assert_eq!(
        b,
        [
            0x4d, 0x11, 0x05, 1, 0, 7, 0, 3, 0, 3, 0, 2, 1, 2, 3, 4, 0, 0, 0, 9, 0, 0, 0, 5, b'h',
            b'i'
        ]
    );
    assert_eq!(Repr::parse(&b).unwrap(), r);
}

#[test]
fn ack_and_nak_round_trip_with_padding() {
    let ack = Repr::Ack {
        header: hdr(Strategy::Ack, 1, 2),
        seq: Seq(41),
    };
    let mut b = emit(&ack);
    assert_eq!(b.len(), HEADER_LEN);
    b.resize(60, 0); // Ethernet padding is ignored
    assert_eq!(Repr::parse(&b).unwrap(), ack);

    let list = [Seq(4), Seq(5), Seq(9)];
    let nak = Repr::Nak {
        header: hdr(Strategy::Mak, 1, 2),
        cum: Seq(3),
        missing: SeqList::Slice(&list),
    };
    let b = emit(&nak);
    assert_eq!(b.len(), HEADER_LEN + 12);
    assert_eq!(&b[10..12], &[0, 3]); // the paper's count
    let back = Repr::parse(&b).unwrap();
    assert_eq!(back, nak);
    let Repr::Nak { missing, .. } = back else {
        panic!()
    };
    assert_eq!(missing.iter().collect::<Vec<_>>(), list);
}

#[test]
fn malformed_frames_are_errors() {
    let good = emit(&Repr::Data {
        header: hdr(Strategy::Mak, 3, 3),
        flags: Flags::empty(),
        seq: Seq(1),
        msg: 1,
        msg_len: 10,
        payload: b"abc",
    });
    assert!(Repr::parse(&good).is_ok());
    // Truncated anywhere.
    for n in 0..good.len() {
        assert!(Repr::parse(&good[..n]).is_err(), "{n}");
    }
    let bad = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        Repr::parse(&b).unwrap_err()
    };
    assert_eq!(bad(0, 0x45), WireError::NotMak(0x45));
    assert_eq!(bad(1, 0x21), WireError::Version(2));
    assert!(matches!(bad(1, 0x14), WireError::Inconsistent(_)));
    assert!(matches!(bad(2, 0x20), WireError::Inconsistent(_))); // undefined flag
    assert!(matches!(bad(2, 0x02), WireError::Inconsistent(_))); // LAST without ACK_REQ
    assert!(matches!(bad(3, 0), WireError::Inconsistent(_))); // strategy
    assert!(matches!(bad(9, 4), WireError::Inconsistent(_))); // DATA from a non-source
    assert!(matches!(bad(23, 2), WireError::Inconsistent(_))); // payload > msg_len
    assert!(matches!(bad(11, 200), WireError::Truncated { .. }));

    let ack = emit(&Repr::Ack {
        header: hdr(Strategy::Mak, 1, 2),
        seq: Seq(0),
    });
    let mut b = ack.clone();
    b[8..10].copy_from_slice(&[0, 1]);
    assert!(Repr::parse(&b).is_err(), "ACK from the source");
    let mut b = ack.clone();
    b[11] = 1;
    assert!(Repr::parse(&b).is_err(), "ACK with a length");
    let mut b = ack;
    b[1] = 0x13; // a NAK with count 0
    assert!(Repr::parse(&b).is_err(), "empty NAK");
}

#[test]
fn accessors_of_short_frames_do_not_read_past_them() {
    // Found by the fuzzer: a 23-byte NAK (one entry, padding) whose DATA
    // accessors read bytes 16..24.
    let b = [
        0x4d, 0x13, 0, 1, 0, 0x31, 0, 0x5d, 0x17, 0x13, 0, 1, 0, 0x31, 0, 0, 0x51, 0x51, 0x51, 0,
        0, 0, 3,
    ];
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!((p.msg(), p.msg_len(), p.payload().len()), (0, 0, 0));
    assert_eq!(p.nak_bytes(), &b[16..20]);
    let ack = Packet::new_checked(&b[..16]).map(|p| (p.msg(), p.msg_len()));
    assert!(ack.is_err(), "a NAK cut to 16 bytes is truncated");
}

#[test]
fn seq_compares_with_wraparound() {
    assert!(Seq(u32::MAX) < Seq(0));
    assert!(Seq(5) > Seq(u32::MAX - 5));
    assert_eq!(Seq(u32::MAX).add(2), Seq(1));
    assert_eq!(Seq(1).diff(Seq(u32::MAX)), 2);
    assert_eq!(Seq(1).max(Seq(u32::MAX)), Seq(1));
}

#[test]
fn size_helpers() {
    assert_eq!(max_payload(1472), 1448);
    assert_eq!(max_nak_entries(1472), 364);
    assert_eq!(max_nak_entries(HEADER_LEN + 3), 0);
}

proptest! {
    #[test]
    fn parse_never_panics_and_re_emits(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok(r) = Repr::parse(&bytes) {
            let n = r.frame_len();
            prop_assert!(n <= bytes.len());
            let mut out = vec![0u8; n];
            r.emit(&mut out);
            prop_assert_eq!(&out[..], &bytes[..n]);
        }
    }

    #[test]
    fn data_round_trips(seq in any::<u32>(), msg in any::<u32>(), extra in 0u32..1000,
                        payload in proptest::collection::vec(any::<u8>(), 0..64),
                        src in any::<u16>(), flags in 0u8..0x20) {
        let mut flags = Flags::from_bits_retain(flags);
        if flags.contains(Flags::LAST) { flags = flags.union(Flags::ACK_REQ); }
        let msg_len = if flags.contains(Flags::START) && flags.contains(Flags::END) {
            payload.len() as u32
        } else {
            payload.len() as u32 + extra
        };
        let r = Repr::Data { header: hdr(Strategy::Nak, src, src), flags, seq: Seq(seq), msg, msg_len, payload: &payload };
        let b = emit(&r);
        prop_assert_eq!(Repr::parse(&b).unwrap(), r);
    }
}

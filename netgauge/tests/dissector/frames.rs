//! Frames for the dissector tests, built with the project's codecs (edp,
//! esp, ctp), broken variants of them, pseudo-random frames, and the codecs'
//! verdict on each.

use ctp::wire::{Options, Repr as CtpRepr};
use edp::echo::EchoRepr;
use edp::wire::{emit_edp_frame, EdpRepr};
use edp::{MacAddr, ETHERTYPE_EDP};
use esp::auth::MethodList;
use esp::wire::{emit_esp_frame, EspRepr, Flags, Nego, SackBlocks, Seq};
use link::eth::EthernetRepr;
use runtime::ETHERTYPE_ESP;

use super::{MSG, PORT};

/// EDP port the handcrafted test forces to CTP through the dissector's
/// "CTP ports (EDP)" preference (other CTP frames are found by the heuristic).
pub const FORCED_CTP_PORT: u16 = 7777;

const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 2]);

fn eth(ethertype: u16) -> EthernetRepr {
    EthernetRepr {
        dst: B,
        src: A,
        ethertype,
    }
}

/// Pads to the 60-byte Ethernet minimum, as a NIC does.
fn padded(mut f: Vec<u8>) -> Vec<u8> {
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

pub fn edp_frame(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + 6 + payload.len()];
    let n = emit_edp_frame(&mut buf, &eth(ETHERTYPE_EDP), src, dst, payload).unwrap();
    buf.truncate(n);
    padded(buf)
}

pub fn esp_frame(repr: &EspRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + repr.header_len() + payload.len()];
    let n = emit_esp_frame(&mut buf, &eth(ETHERTYPE_ESP), repr, payload).unwrap();
    buf.truncate(n);
    padded(buf)
}

pub fn esp(flags: Flags, seq: u32, ack: u32, window: u16) -> EspRepr {
    EspRepr {
        src_port: 49152,
        dst_port: PORT,
        flags,
        seq: Seq(seq),
        ack: Seq(ack),
        window,
        ..Default::default()
    }
}

fn sack(blocks: &[(u32, u32)]) -> SackBlocks {
    let mut s = SackBlocks::new();
    for &(a, b) in blocks {
        assert!(s.push(Seq(a), Seq(b)));
    }
    s
}

fn ctp_packet(repr: &CtpRepr, body: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; repr.packet_len()];
    repr.emit(&mut p);
    p[25..].copy_from_slice(body);
    p
}

fn ctp_cmd(command: u16, id: u32, body: &[u8], options: Options) -> CtpRepr {
    CtpRepr {
        command,
        confirm: false,
        number: 0,
        amount: 1,
        id,
        message_size: body.len() as u64,
        options,
        payload_len: body.len() as u16,
    }
}

/// A netgauge control message (netgauge/src/control/wire.rs `Ctrl::encode`).
fn netgauge_ctrl(kind: u8, pattern: u8, step: u32, size: u64, count: u64, extra: u64) -> Vec<u8> {
    let mut b = b"NGv1".to_vec();
    b.extend_from_slice(&[kind, pattern, 0, 0]);
    b.extend_from_slice(&step.to_le_bytes());
    b.extend_from_slice(&size.to_le_bytes());
    b.extend_from_slice(&count.to_le_bytes());
    b.extend_from_slice(&extra.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b
}

/// Sets an ESP frame's checksum field to 0 (not computed), so that a
/// structural defect is the only one.
fn no_checksum(mut f: Vec<u8>) -> Vec<u8> {
    f[14 + 18] = 0;
    f[14 + 19] = 0;
    f
}

/// The Rust codecs' verdict on a frame, as the stack receives it: ESP by
/// `EspRepr::parse`; EDP by `EdpRepr::parse`, then its control message
/// (port 0) by `EchoRepr::parse` and CTP on [`FORCED_CTP_PORT`] by
/// `ctp::wire::Repr::parse`.
pub fn rust_accepts(frame: &[u8]) -> bool {
    let Ok((e, rest)) = EthernetRepr::parse(frame) else {
        return false;
    };
    match e.ethertype {
        ETHERTYPE_ESP => EspRepr::parse(rest).is_ok(),
        ETHERTYPE_EDP => match EdpRepr::parse(rest) {
            Err(_) => false,
            Ok((h, payload)) if h.src_port == 0 || h.dst_port == 0 => {
                EchoRepr::parse(payload).is_ok()
            }
            Ok((h, payload)) if h.src_port == FORCED_CTP_PORT || h.dst_port == FORCED_CTP_PORT => {
                CtpRepr::parse(payload).is_ok()
            }
            Ok(_) => true,
        },
        other => panic!("test frame with ethertype {other:#06x}"),
    }
}

/// A handcrafted frame and the fields tshark must show for it.
pub struct Case {
    pub name: String,
    pub frame: Vec<u8>,
    pub expect: Vec<(&'static str, String)>,
    /// Fields that must be absent (e.g. `ctp.command` for a non-CTP payload).
    pub absent: Vec<&'static str>,
}

fn case(name: &str, frame: Vec<u8>, expect: &[(&'static str, String)]) -> Case {
    Case {
        name: name.to_string(),
        frame,
        expect: expect.to_vec(),
        absent: Vec::new(),
    }
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

pub fn handcrafted_cases() -> Vec<Case> {
    let mut v = Vec::new();

    // ESP, as the stack emits it.
    let syn = esp(Flags::SYN, 1000, 0, 64);
    v.push(case(
        "ESP SYN",
        esp_frame(&syn, &[]),
        &[
            ("cnesp.srcport", s(49152)),
            ("cnesp.dstport", s(PORT)),
            ("cnesp.flags", s("0x02")),
            ("cnesp.flags.syn", s(1)),
            ("cnesp.flags.ack", s(0)),
            ("cnesp.seq", s(1000)),
            ("cnesp.nxtseq", s(1001)),
            ("cnesp.window", s(64)),
            ("cnesp.len", s(0)),
            ("cnesp.hdrlen", s(20)),
            ("cnesp.checksum.status", s(1)),
        ],
    ));
    let mut synack = esp(Flags::SYN | Flags::ACK, 7000, 1001, 32);
    synack.src_port = PORT;
    synack.dst_port = 49152;
    v.push(case(
        "ESP SYN-ACK",
        esp_frame(&synack, &[]),
        &[
            ("cnesp.flags", s("0x12")),
            ("cnesp.seq", s(7000)),
            ("cnesp.ack", s(1001)),
            ("cnesp.window", s(32)),
            ("cnesp.checksum.status", s(1)),
        ],
    ));
    let data: Vec<u8> = (0..MSG).map(|i| (i * 7 + 3) as u8).collect();
    let seg = esp(Flags::ACK, 1001, 7001, 64);
    v.push(case(
        "ESP data",
        esp_frame(&seg, &data),
        &[
            ("cnesp.flags", s("0x10")),
            ("cnesp.seq", s(1001)),
            ("cnesp.nxtseq", s(1002)),
            ("cnesp.ack", s(7001)),
            ("cnesp.len", s(MSG)),
            ("cnesp.checksum.status", s(1)),
        ],
    ));
    // An odd payload length exercises the checksum's padding byte.
    v.push(case(
        "ESP data, odd length",
        esp_frame(&seg, &data[..333]),
        &[("cnesp.len", s(333)), ("cnesp.checksum.status", s(1))],
    ));
    let mut sacked = esp(Flags::ACK, 7001, 1003, 60);
    sacked.sack = sack(&[(1005, 1007), (1010, 1012)]);
    v.push(case(
        "ESP ACK with two SACK blocks",
        esp_frame(&sacked, &[]),
        &[
            ("cnesp.hdrlen", s(sacked.header_len())),
            ("cnesp.sack.count", s(2)),
            ("cnesp.sack.left", s("1005;1010")),
            ("cnesp.sack.right", s("1007;1012")),
            ("cnesp.checksum.status", s(1)),
        ],
    ));
    let mut dsack = esp(Flags::ACK, 7001, 1003, 60);
    dsack.sack = sack(&[(1001, 1002), (1005, 1006)]);
    v.push(case(
        "ESP ACK with a D-SACK",
        esp_frame(&dsack, &[]),
        &[
            ("cnesp.sack.left", s("1001;1005")),
            ("cnesp.sack.dsack", s(1)),
        ],
    ));
    let mut offer = esp(Flags::SYN, 1000, 0, 64);
    offer.nego = Some(Nego {
        auth: MethodList::from_ids(&[1, 0]).unwrap(),
        enc: MethodList::one(0),
    });
    v.push(case(
        "ESP SYN offering authentication methods",
        esp_frame(&offer, &[]),
        &[
            ("cnesp.hdrlen", s(offer.header_len())),
            ("cnesp.nego.auth_count", s(2)),
            ("cnesp.nego.auth", s("1;0")),
            ("cnesp.nego.enc_count", s(1)),
            ("cnesp.nego.enc", s(0)),
            ("cnesp.checksum.status", s(1)),
        ],
    ));
    v.push(case(
        "ESP FIN-ACK",
        esp_frame(&esp(Flags::FIN | Flags::ACK, 1010, 7001, 64), &[]),
        &[("cnesp.flags", s("0x11")), ("cnesp.nxtseq", s(1011))],
    ));
    v.push(case(
        "ESP RST-ACK",
        esp_frame(&esp(Flags::RST | Flags::ACK, 0, 1001, 0), &[]),
        &[("cnesp.flags", s("0x14")), ("cnesp.flags.rst", s(1))],
    ));
    let ng = netgauge_ctrl(1, 1, 3, MSG as u64, 120, 20);
    v.push(case(
        "ESP carrying a netgauge HELLO",
        esp_frame(&esp(Flags::ACK, 1001, 7001, 64), &ng),
        &[
            ("netgauge.kind", s(1)),
            ("netgauge.step", s(3)),
            ("netgauge.size", s(MSG)),
            ("netgauge.count", s(120)),
        ],
    ));

    // ESP, broken.
    let good = esp_frame(&seg, &data[..100]);
    let mut f = good.clone();
    f[14 + 20 + 5] ^= 0x40;
    v.push(case(
        "ESP payload bit flip (bad checksum)",
        f,
        &[("cnesp.checksum.status", s(0))],
    ));
    let mut f = no_checksum(good.clone());
    f[14 + 20 + 5] ^= 0x40;
    v.push(case(
        "ESP checksum not computed",
        f,
        &[("cnesp.checksum.status", s(3))],
    ));
    let mut f = no_checksum(good.clone());
    f[14 + 4..14 + 6].copy_from_slice(&1100u16.to_be_bytes());
    v.push(case("ESP payload length beyond the frame", f, &[]));
    let mut f = no_checksum(good.clone());
    f[14 + 7] = 12;
    v.push(case("ESP header length below 20", f, &[]));
    let mut f = no_checksum(esp_frame(&esp(Flags::ACK, 1, 1, 1), &[]));
    f[14 + 7] = 250;
    f.truncate(14 + 40);
    v.push(case("ESP options truncated by the frame", f, &[]));
    let mut f = no_checksum(esp_frame(&sacked, &[]));
    f[14 + 21] = 30; // SACK option longer than the option room
    v.push(case("ESP SACK option length out of range", f, &[]));
    let mut f = no_checksum(esp_frame(&sacked, &[]));
    f[14 + 21] = 12; // 2 + 10: not 2 + 8 n
    v.push(case("ESP SACK option of a bad length", f, &[]));
    let mut one = esp(Flags::ACK, 7001, 1003, 60);
    one.sack = sack(&[(1005, 1007)]);
    let mut f = no_checksum(esp_frame(&one, &[]));
    f[14 + 26..14 + 30].copy_from_slice(&1005u32.to_be_bytes()); // right = left
    v.push(case("ESP empty SACK block", f, &[]));
    let mut f = no_checksum(esp_frame(&one, &[]));
    f[14 + 26..14 + 30].copy_from_slice(&1004u32.to_be_bytes()); // right < left
    v.push(case("ESP reversed SACK block", f, &[]));
    let mut f = no_checksum(esp_frame(&one, &[]));
    f[14 + 30] = 1; // NOP, then an option kind without its length byte
    f[14 + 31] = 9;
    v.push(case("ESP option length missing", f, &[]));
    let mut two = esp(Flags::ACK, 7001, 1003, 60);
    two.sack = sack(&[(1005, 1007), (1009, 1011)]);
    let mut f = no_checksum(esp_frame(&two, &[]));
    // Turn the one option with two blocks into two options with one block each.
    let opts = [
        5u8, 10, 0, 0, 3, 237, 0, 0, 3, 239, 5, 10, 0, 0, 3, 241, 0, 0, 3, 243,
    ];
    f[14 + 20..14 + 40].copy_from_slice(&opts);
    v.push(case("ESP two SACK options", f, &[]));
    let mut f = no_checksum(esp_frame(&offer, &[]));
    f[14 + 22] = 0; // no authentication method
    v.push(case("ESP negotiation option without a method", f, &[]));
    let mut f = no_checksum(esp_frame(&offer, &[]));
    f[14 + 25] = 3; // encryption count beyond the option
    v.push(case("ESP negotiation option of a bad length", f, &[]));
    let mut f = no_checksum(esp_frame(&offer, &[]));
    f[14 + 6] = Flags::ACK.bits(); // not a SYN, SYN-ACK or RST
    v.push(case("ESP negotiation option on an ACK", f, &[]));
    let mut f = no_checksum(good.clone());
    f[14 + 6] = 0x50;
    v.push(case("ESP undefined flag bit", f, &[]));
    let mut f = no_checksum(esp_frame(&syn, &[]));
    f[14 + 6] = 0x06;
    v.push(case("ESP SYN with RST", f, &[]));
    let mut f = no_checksum(good.clone());
    f[14 + 6] = 0x12;
    v.push(case("ESP SYN with payload", f, &[]));
    let mut f = good.clone();
    f.truncate(14 + 13);
    v.push(case("ESP header truncated", f, &[]));

    // EDP.
    v.push(case(
        "EDP datagram",
        edp_frame(49152, PORT, b"hello"),
        &[
            ("cnedp.srcport", s(49152)),
            ("cnedp.dstport", s(PORT)),
            ("cnedp.len", s(5)),
        ],
    ));
    let echo = |kind: u8, ident: u16, seq: u32, data: &[u8]| {
        let mut p = vec![0u8; 8];
        EchoRepr { kind, ident, seq }.emit(&mut p);
        p.extend_from_slice(data);
        p
    };
    v.push(case(
        "EDP echo request",
        edp_frame(49153, 0, &echo(1, 0x1234, 7, b"probe")),
        &[
            ("cnedp.control.type", s(1)),
            ("cnedp.control.seq", s(7)),
            ("cnedp.len", s(13)),
        ],
    ));
    v.push(case(
        "EDP echo reply",
        edp_frame(0, 49153, &echo(2, 0x1234, 7, b"probe")),
        &[("cnedp.control.type", s(2))],
    ));
    v.push(case(
        "EDP unknown control type",
        edp_frame(0, 49153, &echo(9, 1, 1, b"")),
        &[],
    ));
    v.push(case(
        "EDP control message truncated",
        edp_frame(49153, 0, &[1, 0]),
        &[],
    ));
    let mut f = edp_frame(49152, PORT, b"hello");
    f[14 + 4..14 + 6].copy_from_slice(&100u16.to_be_bytes());
    v.push(case("EDP length beyond the frame", f, &[]));
    let mut f = edp_frame(49152, PORT, b"");
    f.truncate(14 + 4);
    v.push(case("EDP header truncated", f, &[]));
    v.push(case(
        "EDP carrying a netgauge READY",
        edp_frame(PORT, 49152, &netgauge_ctrl(2, 2, 5, 64, 0, 0)),
        &[
            ("netgauge.kind", s(2)),
            ("netgauge.pattern", s(2)),
            ("netgauge.step", s(5)),
        ],
    ));

    // CTP over EDP, found by the heuristic.
    let first = ctp_cmd(7, 0x1122_3344, b"hello", Options::START_SESSION);
    v.push(case(
        "CTP command (ctp/PROTOCOL.md example)",
        edp_frame(49152, PORT, &ctp_packet(&first, b"hello")),
        &[
            ("ctp.size", s(30)),
            ("ctp.command", s(7)),
            ("ctp.confirmation", s(0)),
            ("ctp.number", s(0)),
            ("ctp.count", s(1)),
            ("ctp.id", s("0x11223344")),
            ("ctp.msgsize", s(5)),
            ("ctp.options", s("0x10")),
            ("ctp.options.startsession", s(1)),
            ("ctp.datalen", s(5)),
        ],
    ));
    v.push(case(
        "CTP confirmation",
        edp_frame(PORT, 49152, &ctp_packet(&first.confirmation(), &[])),
        &[
            ("ctp.size", s(25)),
            ("ctp.command", s(7)),
            ("ctp.confirmation", s(1)),
            ("ctp.id", s("0x11223344")),
            ("ctp.msgsize", s(0)),
        ],
    ));
    // CTP over EDP packs the confirmations due to one peer in one frame.
    let second = ctp_cmd(7, 99, b"hi", Options::NONE);
    let mut packed = ctp_packet(&first.confirmation(), &[]);
    packed.extend(ctp_packet(&second.confirmation(), &[]));
    v.push(case(
        "CTP confirmations packed in one frame",
        edp_frame(PORT, 49152, &packed),
        &[
            ("cnedp.len", s(50)),
            ("ctp.size", s("25;25")),
            ("ctp.confirmation", s("1;1")),
            ("ctp.id", s("0x11223344;0x00000063")),
        ],
    ));
    // ... and in front of a data packet to the same peer, which comes last.
    let reply = ctp_cmd(8, 100, b"ok", Options::NONE);
    let mut conf_data = ctp_packet(&first.confirmation(), &[]);
    conf_data.extend(ctp_packet(&reply, b"ok"));
    v.push(case(
        "CTP confirmation packed in front of a data packet",
        edp_frame(PORT, 49152, &conf_data),
        &[
            ("cnedp.len", s(52)),
            ("ctp.size", s("25;27")),
            ("ctp.confirmation", s("1;0")),
            ("ctp.id", s("0x11223344;0x00000064")),
            ("ctp.datalen", s("0;2")),
        ],
    ));
    let part = CtpRepr {
        number: 2,
        amount: 5,
        message_size: 500,
        ..ctp_cmd(1, 99, &[0x78; 100], Options::NONE)
    };
    v.push(case(
        "CTP part of a large message",
        edp_frame(49152, PORT, &ctp_packet(&part, &[0x78; 100])),
        &[
            ("ctp.number", s(2)),
            ("ctp.count", s(5)),
            ("ctp.msgsize", s(500)),
        ],
    ));
    let ng = netgauge_ctrl(4, 2, 2, 8000, 50, 400_000);
    let cmd = ctp_cmd(1, 100, &ng, Options::NONE);
    v.push(case(
        "CTP carrying a netgauge REPORT",
        edp_frame(49152, PORT, &ctp_packet(&cmd, &ng)),
        &[
            ("ctp.command", s(1)),
            ("netgauge.kind", s(4)),
            ("netgauge.extra", s(400_000)),
        ],
    ));
    // Not self-consistent (size field != payload length): EDP data, not CTP.
    let mut p = ctp_packet(&first, b"hello");
    p[0] = 29;
    let mut c = case(
        "EDP payload that is not CTP",
        edp_frame(49152, PORT, &p),
        &[("cnedp.len", s(30))],
    );
    c.absent = vec!["ctp.command"];
    v.push(c);

    // CTP forced by the port preference, broken.
    let forced = |p: Vec<u8>| edp_frame(49152, FORCED_CTP_PORT, &p);
    let mut p = ctp_packet(&first, b"hello");
    p[0..2].copy_from_slice(&20u16.to_le_bytes());
    v.push(case("CTP size below the header", forced(p), &[]));
    let mut p = ctp_packet(&first, b"hello");
    p[0..2].copy_from_slice(&300u16.to_le_bytes());
    v.push(case("CTP size beyond the datagram", forced(p), &[]));
    let mut conf_body = ctp_packet(&first, b"hello");
    conf_body[3] |= 0x80;
    v.push(case(
        "CTP confirmation with a body",
        forced(conf_body),
        &[("ctp.confirmation", s(1))],
    ));
    let mut p = ctp_packet(&first, b"hello");
    p[4] = 1;
    v.push(case("CTP normal command with number 1", forced(p), &[]));
    let mut p = ctp_packet(&first, b"hello");
    p[22] = 1;
    v.push(case("CTP message size over 48 bits", forced(p), &[]));
    let mut p = ctp_packet(&first, b"hello");
    p[16] = 9;
    v.push(case(
        "CTP message size differs from its body",
        forced(p),
        &[],
    ));
    let mut p = ctp_packet(&part, &[0x78; 100]);
    p[4] = 5;
    v.push(case("CTP part number not below count", forced(p), &[]));
    v.push(case(
        "CTP empty datagram on a CTP port",
        forced(Vec::new()),
        &[],
    ));
    v.push(case(
        "EDP empty datagram",
        edp_frame(49152, PORT, b""),
        &[("cnedp.len", s(0))],
    ));
    v.push(case(
        "CTP header truncated",
        forced(ctp_packet(&first, b"hello")[..10].to_vec()),
        &[],
    ));
    // Accepted by the codec: undefined option bits (a warning), bytes after
    // the packet (ignored).
    let mut p = ctp_packet(&first, b"hello");
    p[24] |= 0x40;
    v.push(case(
        "CTP undefined option bit",
        forced(p),
        &[("ctp.options", s("0x50"))],
    ));
    let mut p = ctp_packet(&first, b"hello");
    p.extend_from_slice(b"trailer");
    v.push(case(
        "CTP with bytes after the packet",
        forced(p),
        &[("ctp.datalen", s(5))],
    ));
    v
}

/// Pseudo-random frames (xorshift, fixed seed), biased towards nearly valid
/// headers so that every check is reached.
pub fn random_frames(count: usize) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..count)
        .map(|_| {
            let ethertype = if next() % 2 == 0 {
                ETHERTYPE_EDP
            } else {
                ETHERTYPE_ESP
            };
            let n = 1 + (next() % if next() % 2 == 0 { 64 } else { 400 }) as usize;
            let mut p: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            if n >= 6 && next() % 2 == 0 {
                // Plausible EDP/ESP payload length.
                let len = (next() as usize % n) as u16;
                p[4..6].copy_from_slice(&len.to_be_bytes());
            }
            if ethertype == ETHERTYPE_ESP && n >= 22 && next() % 3 != 0 {
                p[6] = [0x10, 0x02, 0x12, 0x11, 0x14, p[6]][next() as usize % 6];
                p[7] = [20, 24, 28, 32, 44, p[7]][next() as usize % 6];
                if next() % 2 == 0 {
                    p[18] = 0;
                    p[19] = 0;
                }
                if next() % 2 == 0 {
                    p[20] = 5;
                    p[21] = [10, 18, 34, 42, 2, 3][next() as usize % 6];
                }
            }
            if ethertype == ETHERTYPE_EDP && n >= 31 && next() % 2 == 0 {
                // A nearly consistent CTP packet on a random or CTP port.
                let len = (n - 6) as u16;
                p[4..6].copy_from_slice(&len.to_be_bytes());
                if next() % 2 == 0 {
                    p[2..4].copy_from_slice(&FORCED_CTP_PORT.to_be_bytes());
                }
                p[6..8].copy_from_slice(&len.to_le_bytes());
                p[30] = [0, 0x10, 0x1f, 0xe0][next() as usize % 4];
            }
            let mut f = vec![0u8; 14];
            eth(ethertype).emit(&mut f);
            f.extend_from_slice(&p);
            f
        })
        .collect()
}

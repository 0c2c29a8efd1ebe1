//! The Wireshark dissector (`dissector/clusternet.lua`) read by tshark.
//!
//! - `handcrafted_frames_decode_and_malformed_ones_are_flagged` (no root):
//!   frames built with the project's own codecs (edp, esp, ctp), broken
//!   variants of them and pseudo-random frames go into a pcap file; tshark
//!   decodes it with the dissector, and for every frame the dissector's
//!   verdict (expert info of group Malformed or Checksum) must equal the
//!   Rust codec's (parse error), the fields must be the values the frame
//!   was built from, and no Lua error may occur.
//! - `esp_session`, `edp_session`, `ctp_session` (root): a short netgauge
//!   run between two network namespaces, captured by tshark on the server's
//!   interface, then decoded: one ESP handshake with consistent sequence
//!   numbers, data segments with their length and a verified checksum, EDP
//!   ports and lengths, CTP commands and their confirmations.
//!
//! Without tshark (scripts/install-deps.sh installs it) or root the tests
//! print why and return, except under CI=true, where they fail.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ctp::wire::{Options, Repr as CtpRepr};
use edp::echo::EchoRepr;
use edp::wire::{emit_edp_frame, EdpRepr, EthernetRepr};
use edp::{EdpSocket, MacAddr, ETHERTYPE_EDP, ETHERTYPE_ESP};
use esp::wire::{emit_esp_frame, EspRepr, Flags, SackBlocks, Seq};

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");
const DISSECTOR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../dissector/clusternet.lua");

/// Expert info groups as tshark prints them (epan/proto.h PI_MALFORMED,
/// PI_CHECKSUM).
const GROUP_MALFORMED: &str = "117440512";
const GROUP_CHECKSUM: &str = "16777216";

/// EDP port the handcrafted test forces to CTP through the dissector's
/// "CTP ports (EDP)" preference (other CTP frames are found by the heuristic).
const FORCED_CTP_PORT: u16 = 7777;
/// netgauge's port in the session tests.
const PORT: u16 = 5201;
/// Message size of the session tests: one segment, datagram or CTP packet
/// at MTU 1500.
const MSG: usize = 1000;

const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 2]);

// ---------------------------------------------------------------------------
// tshark
// ---------------------------------------------------------------------------

/// True when tshark runs; otherwise skips (or fails under CI=true).
fn have_tshark(test: &str) -> bool {
    match Command::new("tshark").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            common::skip(
                test,
                &format!(
                    "`tshark --version` failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            );
            false
        }
        Err(e) => {
            common::skip(
                test,
                &format!("cannot run tshark ({e}): scripts/install-deps.sh installs it"),
            );
            false
        }
    }
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "cn-dissector-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("home")).expect("create temp dir");
        TempDir(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// HOME for tshark: no personal plugins or preferences of the user (an
    /// installed copy of the dissector would shadow the one under test).
    fn home(&self) -> PathBuf {
        self.0.join("home")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One decoded frame: field name -> values (several for repeated fields).
#[derive(Debug, Clone)]
struct Row(HashMap<String, Vec<String>>);

impl Row {
    fn all(&self, f: &str) -> &[String] {
        self.0.get(f).map(Vec::as_slice).unwrap_or(&[])
    }
    fn get(&self, f: &str) -> Option<&str> {
        self.all(f).first().map(String::as_str)
    }
    fn num(&self, f: &str) -> Option<u64> {
        let s = self.get(f)?;
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    }
    /// Rejected by the dissector: expert info of group Malformed (which
    /// tshark also marks as `_ws.malformed`) or Checksum.
    fn rejected(&self) -> bool {
        let groups = self.all("_ws.expert.group");
        let malformed = groups.iter().any(|g| g == GROUP_MALFORMED);
        assert_eq!(
            malformed,
            !self.all("_ws.malformed").is_empty(),
            "tshark marks expert info of group Malformed as _ws.malformed: {self:?}"
        );
        malformed || groups.iter().any(|g| g == GROUP_CHECKSUM)
    }
}

/// Fields every decode asks for, besides the test's own.
const BASE_FIELDS: &[&str] = &[
    "frame.number",
    "eth.src",
    "_ws.col.Info",
    "_ws.expert.group",
    "_ws.expert.message",
    "_ws.lua.error",
    "_ws.malformed",
    "_ws.malformed.expert",
    "_ws.malformed.dissector_bug",
];

/// Decodes `file` with the dissector; returns one row per frame. Panics
/// when tshark fails or reports a Lua error anywhere.
fn decode(tmp: &TempDir, file: &Path, prefs: &[&str], fields: &[&str]) -> Vec<Row> {
    let fields: Vec<&str> = BASE_FIELDS.iter().chain(fields).copied().collect();
    let mut cmd = Command::new("tshark");
    cmd.env("HOME", tmp.home())
        .args(["-n", "-r"])
        .arg(file)
        .args(["-X", &format!("lua_script:{DISSECTOR}")])
        .args(["-T", "fields", "-E", "separator=/t", "-E", "aggregator=;"]);
    for p in prefs {
        cmd.args(["-o", p]);
    }
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tshark -r {} failed ({}): {stderr}",
        file.display(),
        out.status
    );
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains("Lua: Error") && !text.contains("Lua Error"),
            "tshark reported a Lua error:\n{stderr}\n{stdout}"
        );
    }
    stdout
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), fields.len(), "tshark line {line:?}");
            let mut m = HashMap::new();
            for (f, v) in fields.iter().zip(cols) {
                let vals: Vec<String> = v
                    .split(';')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                m.insert(f.to_string(), vals);
            }
            let row = Row(m);
            // (`_ws.malformed` itself marks expert info of group Malformed;
            // these two mark exceptions and dissector bugs.)
            assert!(
                row.all("_ws.lua.error").is_empty()
                    && row.all("_ws.malformed.expert").is_empty()
                    && row.all("_ws.malformed.dissector_bug").is_empty(),
                "Lua error or exception in frame: {row:?}"
            );
            row
        })
        .collect()
}

/// Writes `frames` as a classic pcap file (LINKTYPE_ETHERNET), one per
/// second.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).expect("write pcap");
}

// ---------------------------------------------------------------------------
// Frames built with the project's codecs
// ---------------------------------------------------------------------------

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

fn edp_frame(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + 6 + payload.len()];
    let n = emit_edp_frame(&mut buf, &eth(ETHERTYPE_EDP), src, dst, payload).unwrap();
    buf.truncate(n);
    padded(buf)
}

fn esp_frame(repr: &EspRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + repr.header_len() + payload.len()];
    let n = emit_esp_frame(&mut buf, &eth(ETHERTYPE_ESP), repr, payload).unwrap();
    buf.truncate(n);
    padded(buf)
}

fn esp(flags: Flags, seq: u32, ack: u32, window: u16) -> EspRepr {
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

/// A netgauge control message (netgauge/src/control.rs `Ctrl::encode`).
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
fn rust_accepts(frame: &[u8]) -> bool {
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
struct Case {
    name: String,
    frame: Vec<u8>,
    expect: Vec<(&'static str, String)>,
    /// Fields that must be absent (e.g. `ctp.command` for a non-CTP payload).
    absent: Vec<&'static str>,
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

fn handcrafted_cases() -> Vec<Case> {
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
fn random_frames(count: usize) -> Vec<Vec<u8>> {
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

#[test]
fn handcrafted_frames_decode_and_malformed_ones_are_flagged() {
    const TEST: &str = "handcrafted_frames_decode_and_malformed_ones_are_flagged";
    if !have_tshark(TEST) {
        return;
    }
    let tmp = TempDir::new("unit");
    let cases = handcrafted_cases();
    let random = random_frames(3000);
    let frames: Vec<Vec<u8>> = cases
        .iter()
        .map(|c| c.frame.clone())
        .chain(random.iter().cloned())
        .collect();
    let file = tmp.path("frames.pcap");
    write_pcap(&file, &frames);
    let mut fields: Vec<&str> = cases
        .iter()
        .flat_map(|c| c.expect.iter().map(|(f, _)| *f).chain(c.absent.iter().copied()))
        .collect();
    fields.sort_unstable();
    fields.dedup();
    let pref = format!("ctp.edp_ports:{FORCED_CTP_PORT}");
    let rows = decode(&tmp, &file, &[&pref], &fields);
    assert_eq!(rows.len(), frames.len(), "one row per frame");

    let mut rejected = 0;
    for (c, row) in cases.iter().zip(&rows) {
        let accepts = rust_accepts(&c.frame);
        assert_eq!(
            row.rejected(),
            !accepts,
            "{}: the Rust codec {} it, the dissector {}: {row:?}",
            c.name,
            if accepts { "accepts" } else { "rejects" },
            if row.rejected() {
                "flags it"
            } else {
                "does not"
            }
        );
        if !accepts {
            rejected += 1;
            let info = row.get("_ws.col.Info").unwrap_or_default();
            assert!(
                info.contains("[Malformed: "),
                "{}: info column {info:?}",
                c.name
            );
        }
        for (f, want) in &c.expect {
            assert_eq!(
                row.all(f).join(";"),
                *want,
                "{}: field {f} in {row:?}",
                c.name
            );
        }
        for f in &c.absent {
            assert!(row.all(f).is_empty(), "{}: field {f} in {row:?}", c.name);
        }
    }
    assert!(
        rejected >= 20,
        "the handcrafted set has its malformed frames"
    );

    let mut random_rejected = 0;
    for (i, (f, row)) in random.iter().zip(&rows[cases.len()..]).enumerate() {
        let accepts = rust_accepts(f);
        assert_eq!(
            row.rejected(),
            !accepts,
            "random frame {i} {f:02x?}: Rust accepts: {accepts}; tshark: {row:?}"
        );
        random_rejected += usize::from(!accepts);
    }
    eprintln!(
        "{} handcrafted frames ({rejected} malformed) and {} random frames ({random_rejected} malformed): dissector and codecs agree, no Lua error",
        cases.len(),
        random.len()
    );
}

#[test]
fn ethertype_preferences_move_the_protocols() {
    const TEST: &str = "ethertype_preferences_move_the_protocols";
    if !have_tshark(TEST) {
        return;
    }
    let tmp = TempDir::new("prefs");
    let file = tmp.path("frames.pcap");
    let edp = edp_frame(49152, PORT, b"hello");
    let esp = esp_frame(&esp(Flags::SYN, 1000, 0, 64), &[]);
    write_pcap(&file, &[edp, esp]);
    let fields = ["cnedp.srcport", "cnesp.srcport"];
    let rows = decode(&tmp, &file, &[], &fields);
    assert_eq!(rows[0].get("cnedp.srcport"), Some("49152"));
    assert_eq!(rows[1].get("cnesp.srcport"), Some("49152"));
    assert!(rows[0].get("cnesp.srcport").is_none() && rows[1].get("cnedp.srcport").is_none());
    // Swapped: each frame is now read as the other protocol.
    let rows = decode(
        &tmp,
        &file,
        &["cnedp.ethertype:0x88B6", "cnesp.ethertype:0x88B5"],
        &fields,
    );
    assert!(rows[0].get("cnesp.srcport").is_some(), "{:?}", rows[0]);
    assert!(rows[1].get("cnedp.srcport").is_some(), "{:?}", rows[1]);
    // Elsewhere: neither is decoded.
    let rows = decode(
        &tmp,
        &file,
        &["cnedp.ethertype:0x9000", "cnesp.ethertype:0x9001"],
        &fields,
    );
    for r in &rows {
        assert!(
            r.get("cnedp.srcport").is_none() && r.get("cnesp.srcport").is_none(),
            "{r:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Captured netgauge sessions (root)
// ---------------------------------------------------------------------------

/// EDP port of the capture probes; their payload.
const PROBE_PORT: u16 = 9;
const PROBE: &[u8] = b"clusternet dissector test probe";
/// Liveness bound for each step of a session (not a timing check).
const PATIENCE: Duration = Duration::from_secs(30);

/// tshark capturing on a host's interface into a file, printing a summary
/// line per frame (with the dissector) so the test can tell what it has seen.
struct Capture {
    child: Child,
    lines: mpsc::Receiver<String>,
    probes_seen: usize,
}

impl Capture {
    fn start(host: &common::Host, file: &Path, tmp: &TempDir) -> Capture {
        let mut child = host
            .command("tshark")
            .env("HOME", tmp.home())
            .args(["-n", "-l", "-P", "-i", &host.iface, "-w"])
            .arg(file)
            .args(["-X", &format!("lua_script:{DISSECTOR}")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tshark");
        let (tx, lines) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Capture {
            child,
            lines,
            probes_seen: 0,
        }
    }

    /// Sends a probe from `probe` to `dst` every 100 ms until tshark shows
    /// one more than before: everything sent earlier has been captured.
    fn sync(&mut self, probe: &mut EdpSocket, dst: MacAddr) {
        let want = format!("→ {PROBE_PORT} Len={}", PROBE.len());
        let deadline = Instant::now() + PATIENCE;
        let mut log = Vec::new();
        loop {
            probe
                .send_to(PROBE, (dst, PROBE_PORT))
                .expect("send probe");
            let until = Instant::now() + Duration::from_millis(100);
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                match self.lines.recv_timeout(left) {
                    Ok(line) => {
                        if line.contains(&want) {
                            self.probes_seen += 1;
                            return;
                        }
                        log.push(line);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => break,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        panic!("tshark exited: {}", log.join("\n"))
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "tshark showed no probe within {PATIENCE:?}: {}",
                log.join("\n")
            );
        }
    }

    /// Stops the capture with SIGINT (tshark then completes the file).
    fn stop(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, which is not yet reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait tshark") {
                assert!(
                    st.success() || st.code().is_none(),
                    "tshark capture exited with {st}"
                );
                return;
            }
            assert!(Instant::now() < deadline, "tshark did not stop on SIGINT");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A child process killed on drop (a test that fails leaves nothing behind).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs a netgauge session of `mode` (server on host 0, client on host 1,
/// `-s 1000 -c 4`) while tshark captures on host 0, then decodes the
/// capture with `fields`. None when the test is skipped.
fn captured_session(test: &str, mode: &str, fields: &[&str]) -> Option<(Vec<Row>, MacAddr)> {
    if !have_tshark(test) {
        return None;
    }
    let net = common::setup(test, 2, 1500)?;
    let (server, client) = (net.host(0).clone(), net.host(1).clone());
    let tmp = TempDir::new(mode);
    let file = tmp.path("session.pcapng");

    let iface = client.iface.clone();
    let mut probe = client.run(move || EdpSocket::bind((iface.as_str(), 0)).expect("probe socket"));
    let mut cap = Capture::start(&server, &file, &tmp);
    cap.sync(&mut probe, server.mac);

    let port = PORT.to_string();
    let srv = server
        .command(NETGAUGE)
        .args(["-m", mode, "-a", "-I", &server.iface, "-P", &port])
        .args(["--timeout", "10"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netgauge server");
    let mut srv = Proc(srv);
    let out = client
        .command(NETGAUGE)
        .args(["-m", mode, "-I", &client.iface, "-R", &server.mac.to_string()])
        .args(["-P", &port, "-s", &MSG.to_string(), "-c", "4", "--warmup", "1"])
        .args(["--timeout", "10"])
        .output()
        .expect("run netgauge client");
    assert!(
        out.status.success(),
        "netgauge -m {mode} client failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + PATIENCE;
    while srv.0.try_wait().expect("wait server").is_none() {
        assert!(Instant::now() < deadline, "netgauge server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = srv.0.wait().expect("wait server");
    assert!(st.success(), "netgauge -m {mode} server failed: {st}");

    cap.sync(&mut probe, server.mac);
    cap.stop();
    let rows = decode(&tmp, &file, &[], fields);
    // Everything captured decodes cleanly.
    for r in &rows {
        assert!(
            r.all("_ws.expert.message").is_empty(),
            "{mode} session frame with expert info: {r:?}"
        );
    }
    Some((rows, client.mac))
}

/// Prints rows for the test log (`--nocapture`): the decoded fields.
fn show(title: &str, rows: &[&Row], fields: &[&str]) {
    eprintln!("{title}\n{}", fields.join("\t"));
    for r in rows {
        let cols: Vec<String> = fields.iter().map(|f| r.all(f).join(",")).collect();
        eprintln!("{}", cols.join("\t"));
    }
}

#[test]
fn esp_session() {
    let fields = [
        "cnesp.srcport",
        "cnesp.dstport",
        "cnesp.flags",
        "cnesp.flags.str",
        "cnesp.seq",
        "cnesp.ack",
        "cnesp.window",
        "cnesp.len",
        "cnesp.checksum",
        "cnesp.checksum.status",
        "netgauge.kind",
        "netgauge.size",
    ];
    let Some((rows, client_mac)) = captured_session("dissector_esp", "esp", &fields) else {
        return;
    };
    let client = client_mac.to_string();
    let esp: Vec<&Row> = rows.iter().filter(|r| r.get("cnesp.flags").is_some()).collect();
    assert!(!esp.is_empty(), "no ESP frame captured: {rows:?}");
    // netgauge's ESP computes checksums: every segment verifies.
    for r in &esp {
        assert_eq!(r.get("cnesp.checksum.status"), Some("1"), "{r:?}");
    }
    let from_client = |r: &Row| r.get("eth.src") == Some(client.as_str());
    let flags = |r: &Row| r.num("cnesp.flags").unwrap();
    let at = |r: &Row, f: &str| r.num(f).unwrap();

    let syn_i = esp
        .iter()
        .position(|r| from_client(r) && flags(r) == 0x02 && at(r, "cnesp.dstport") == u64::from(PORT))
        .unwrap_or_else(|| panic!("no SYN from the client: {esp:?}"));
    let syn = esp[syn_i];
    let cport = at(syn, "cnesp.srcport");
    let iss = at(syn, "cnesp.seq");
    let synack_i = syn_i
        + esp[syn_i..]
            .iter()
            .position(|r| !from_client(r) && flags(r) == 0x12 && at(r, "cnesp.dstport") == cport)
            .unwrap_or_else(|| panic!("no SYN-ACK after the SYN: {esp:?}"));
    let synack = esp[synack_i];
    assert_eq!(at(synack, "cnesp.ack"), (iss + 1) % (1 << 32), "SYN-ACK acknowledges the SYN");
    let irs = at(synack, "cnesp.seq");
    let ack_i = synack_i
        + esp[synack_i..]
            .iter()
            .position(|r| from_client(r) && at(r, "cnesp.srcport") == cport)
            .unwrap_or_else(|| panic!("no segment from the client after the SYN-ACK: {esp:?}"));
    let ack = esp[ack_i];
    assert_eq!(flags(ack) & 0x17, 0x10, "third segment of the handshake: ACK only: {ack:?}");
    assert_eq!(at(ack, "cnesp.seq"), (iss + 1) % (1 << 32), "{ack:?}");
    assert_eq!(at(ack, "cnesp.ack"), (irs + 1) % (1 << 32), "{ack:?}");

    // Data: the measured messages, one segment each, both ways.
    let data: Vec<&Row> = esp
        .iter()
        .copied()
        .filter(|r| at(r, "cnesp.len") == MSG as u64)
        .collect();
    assert!(
        data.iter().any(|r| from_client(r)) && data.iter().any(|r| !from_client(r)),
        "data segments of {MSG} bytes both ways: {esp:?}"
    );
    // netgauge's HELLO for the step, decoded inside the stream.
    assert!(
        esp.iter()
            .any(|r| r.get("netgauge.kind") == Some("1") && r.num("netgauge.size") == Some(MSG as u64)),
        "netgauge HELLO in the ESP stream: {esp:?}"
    );
    let mut shown = vec![syn, synack, ack];
    shown.push(data[0]);
    let cols: Vec<&str> = ["frame.number", "eth.src"]
        .into_iter()
        .chain(fields.iter().copied().take(10))
        .collect();
    show("ESP handshake and a data segment (tshark -T fields):", &shown, &cols);
    for r in &shown {
        eprintln!("{}", r.get("_ws.col.Info").unwrap_or_default());
    }
}

#[test]
fn edp_session() {
    let fields = [
        "cnedp.srcport",
        "cnedp.dstport",
        "cnedp.len",
        "netgauge.kind",
        "netgauge.size",
        "ctp.command",
    ];
    let Some((rows, client_mac)) = captured_session("dissector_edp", "edp", &fields) else {
        return;
    };
    let client = client_mac.to_string();
    let edp: Vec<&Row> = rows
        .iter()
        .filter(|r| r.get("cnedp.dstport").is_some())
        .filter(|r| r.num("cnedp.dstport") != Some(u64::from(PROBE_PORT)))
        .collect();
    let port = u64::from(PORT);
    let to_server: Vec<&Row> = edp
        .iter()
        .copied()
        .filter(|r| r.get("eth.src") == Some(client.as_str()) && r.num("cnedp.dstport") == Some(port))
        .collect();
    let to_client: Vec<&Row> = edp
        .iter()
        .copied()
        .filter(|r| r.get("eth.src") != Some(client.as_str()) && r.num("cnedp.srcport") == Some(port))
        .collect();
    assert!(!to_server.is_empty() && !to_client.is_empty(), "{edp:?}");
    // The client's ephemeral port is the server's destination.
    let cport = to_server[0].num("cnedp.srcport").unwrap();
    assert!(to_client.iter().all(|r| r.num("cnedp.dstport") == Some(cport)), "{to_client:?}");
    for dir in [&to_server, &to_client] {
        assert!(
            dir.iter().any(|r| r.num("cnedp.len") == Some(MSG as u64)),
            "datagrams of {MSG} bytes each way: {dir:?}"
        );
    }
    assert!(
        to_server
            .iter()
            .any(|r| r.get("netgauge.kind") == Some("1") && r.num("netgauge.size") == Some(MSG as u64)),
        "netgauge HELLO: {to_server:?}"
    );
    assert!(
        to_client.iter().any(|r| r.get("netgauge.kind") == Some("2")),
        "netgauge READY: {to_client:?}"
    );
    // netgauge's payloads are not mistaken for CTP.
    assert!(edp.iter().all(|r| r.get("ctp.command").is_none()), "{edp:?}");
    show(
        "EDP datagrams (first two):",
        &edp[..2.min(edp.len())],
        &["frame.number", "eth.src", "cnedp.srcport", "cnedp.dstport", "cnedp.len", "_ws.col.Info"],
    );
}

#[test]
fn ctp_session() {
    let fields = [
        "cnedp.srcport",
        "cnedp.dstport",
        "cnedp.len",
        "ctp.size",
        "ctp.command",
        "ctp.confirmation",
        "ctp.number",
        "ctp.count",
        "ctp.id",
        "ctp.msgsize",
        "ctp.options",
        "ctp.datalen",
        "netgauge.kind",
    ];
    let Some((rows, client_mac)) = captured_session("dissector_ctp", "ctp", &fields) else {
        return;
    };
    let client = client_mac.to_string();
    let ctp: Vec<&Row> = rows.iter().filter(|r| r.get("ctp.command").is_some()).collect();
    assert!(!ctp.is_empty(), "no CTP packet decoded: {rows:?}");
    for r in &ctp {
        // The CTP packet is the whole EDP payload.
        assert_eq!(r.num("ctp.size"), r.num("cnedp.len"), "{r:?}");
    }
    let data: Vec<&Row> = ctp
        .iter()
        .copied()
        .filter(|r| r.get("ctp.confirmation") == Some("0"))
        .collect();
    let confirmations: Vec<&Row> = ctp
        .iter()
        .copied()
        .filter(|r| r.get("ctp.confirmation") == Some("1"))
        .collect();
    assert!(!data.is_empty() && !confirmations.is_empty(), "{ctp:?}");
    // Every data packet of the client is confirmed by the server: same
    // command and id, size 25, no message size.
    for d in data.iter().filter(|r| r.get("eth.src") == Some(client.as_str())) {
        assert!(
            confirmations.iter().any(|c| c.get("eth.src") != d.get("eth.src")
                && c.get("ctp.id") == d.get("ctp.id")
                && c.get("ctp.command") == d.get("ctp.command")
                && c.num("ctp.size") == Some(25)
                && c.num("ctp.msgsize") == Some(0)),
            "no confirmation of {d:?}"
        );
    }
    assert!(
        data.iter().any(|r| r.num("ctp.datalen") == Some(MSG as u64)
            && r.num("ctp.msgsize") == Some(MSG as u64)),
        "a {MSG}-byte command: {data:?}"
    );
    // The client's first packet opens its session with the server.
    let first = data
        .iter()
        .find(|r| r.get("eth.src") == Some(client.as_str()))
        .unwrap();
    assert_eq!(
        first.num("ctp.options").map(|o| o & 0x10),
        Some(0x10),
        "StartSession on the first packet: {first:?}"
    );
    assert!(
        data.iter().any(|r| r.get("netgauge.kind") == Some("1")),
        "netgauge HELLO inside CTP: {data:?}"
    );
    let mut shown: Vec<&Row> = vec![*first];
    if let Some(c) = confirmations
        .iter()
        .find(|c| c.get("ctp.id") == first.get("ctp.id"))
    {
        shown.push(*c);
    }
    show(
        "CTP over EDP: the client's first command and its confirmation:",
        &shown,
        &[
            "frame.number",
            "cnedp.srcport",
            "cnedp.dstport",
            "ctp.size",
            "ctp.command",
            "ctp.confirmation",
            "ctp.id",
            "ctp.options",
            "_ws.col.Info",
        ],
    );
}

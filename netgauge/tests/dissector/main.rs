//! The Wireshark dissector (`dissector/clusternet.lua`) read by tshark.
//!
//! - `handcrafted_frames_decode_and_malformed_ones_are_flagged` (no root):
//!   frames built with the project's own codecs (edp, esp, ctp), broken
//!   variants of them and pseudo-random frames go into a pcap file; tshark
//!   decodes it with the dissector, and for every frame the dissector's
//!   verdict (expert info of group Malformed or Checksum) must equal the
//!   Rust codec's (parse error), the fields must be the values the frame
//!   was built from, and no Lua error may occur.
//! - `ethertype_preferences_move_the_protocols` (no root): the ethertype
//!   preferences decide which frames are EDP and ESP.
//! - `esp_session`, `edp_session`, `ctp_session` (root): a short netgauge
//!   run between two network namespaces (the vcluster harness via testkit), captured by
//!   tshark on both hosts (received frames) and merged, then decoded: one
//!   ESP handshake with consistent sequence numbers, data segments with
//!   their length and a verified checksum, EDP ports and lengths, CTP
//!   commands and their confirmations, netgauge's control messages.
//!
//! Without tshark (scripts/install-deps.sh installs it) or root the tests
//! print why and return, except under CI=true, where they fail.
//! `DISSECTOR_KEEP=1` keeps the pcap files (their folder is printed).
//!
//! Files: this one (tshark helpers, the frame tests), `frames.rs` (frames
//! built with the codecs, broken and random ones), `sessions.rs` (captured
//! netgauge sessions).

use testkit as common;
mod frames;
mod sessions;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use esp::wire::Flags;

use frames::{
    edp_frame, esp, esp_frame, handcrafted_cases, random_frames, rust_accepts, FORCED_CTP_PORT,
};

const DISSECTOR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../dissector/clusternet.lua");

/// Expert info groups as tshark prints them (epan/proto.h PI_MALFORMED,
/// PI_CHECKSUM).
const GROUP_MALFORMED: &str = "117440512";
const GROUP_CHECKSUM: &str = "16777216";

/// netgauge's port in the session tests.
const PORT: u16 = 5201;
/// Message size of the session tests: one segment, datagram or CTP packet
/// at MTU 1500.
const MSG: usize = 1000;

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
        if std::env::var_os("DISSECTOR_KEEP").is_some() {
            eprintln!("kept {}", self.0.display());
            return;
        }
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
    /// The last value of `f` (a frame of packed CTP packets lists each
    /// field once per packet; the data packet, if any, is last).
    fn last(&self, f: &str) -> Option<&str> {
        self.all(f).last().map(String::as_str)
    }
    fn num(&self, f: &str) -> Option<u64> {
        parse_num(self.get(f)?)
    }
    fn last_num(&self, f: &str) -> Option<u64> {
        parse_num(self.last(f)?)
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

/// Prints rows for the test log (`--nocapture`): the decoded fields.
fn show(title: &str, rows: &[&Row], fields: &[&str]) {
    eprintln!("{title}\n{}", fields.join("\t"));
    for r in rows {
        let cols: Vec<String> = fields.iter().map(|f| r.all(f).join(",")).collect();
        eprintln!("{}", cols.join("\t"));
    }
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
        .flat_map(|c| {
            c.expect
                .iter()
                .map(|(f, _)| *f)
                .chain(c.absent.iter().copied())
        })
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

/// A tshark field value as a number (decimal or 0x-hex).
fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

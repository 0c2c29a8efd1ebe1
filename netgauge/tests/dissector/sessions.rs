//! Captured netgauge sessions (root): tshark on both hosts while netgauge
//! runs, then the merged capture decoded with the dissector.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use edp::{EdpSocket, MacAddr};

use super::{common, decode, have_tshark, show, Row, TempDir, DISSECTOR, MSG, PORT};

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

/// EDP port of the first capture probe (each sync uses the next one, so a
/// late summary line of an earlier sync cannot be taken for this one's);
/// their payload.
const PROBE_PORT: u16 = 9;
const PROBE: &[u8] = b"clusternet dissector test probe";
/// Liveness bound for each step of a session (not a timing check).
const PATIENCE: Duration = Duration::from_secs(30);

/// tshark capturing the frames a host's interface receives into a file,
/// printing a summary line per frame (with the dissector) so the test can
/// tell what it has seen. Only received frames: netgauge sends with
/// PACKET_QDISC_BYPASS, which the kernel's capture taps do not see, so each
/// frame is captured where it arrives (and only there).
struct Capture {
    child: Child,
    lines: mpsc::Receiver<String>,
    syncs: u16,
}

impl Capture {
    fn start(host: &common::Host, file: &Path, tmp: &TempDir) -> Capture {
        let mut child = host
            .command("tshark")
            .env("HOME", tmp.home())
            .args(["-n", "-l", "-P", "-i", &host.iface, "-f", "inbound", "-w"])
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
            syncs: 0,
        }
    }

    /// Sends a probe from `probe` to `dst` every 100 ms until tshark shows
    /// one: everything that arrived earlier has been captured and written
    /// (tshark reads what dumpcap wrote to the file).
    fn sync(&mut self, probe: &mut EdpSocket, dst: MacAddr) {
        let port = PROBE_PORT + self.syncs;
        self.syncs += 1;
        let want = format!("→ {port} Len={}", PROBE.len());
        let deadline = Instant::now() + PATIENCE;
        let mut log = Vec::new();
        loop {
            probe.send_to(PROBE, (dst, port)).expect("send probe");
            let until = Instant::now() + Duration::from_millis(100);
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                match self.lines.recv_timeout(left) {
                    Ok(line) => {
                        if line.contains(&want) {
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

/// Runs a netgauge session (server `-m server_mode -a` on host 0, client
/// `-m client_mode -R <server MAC> -s 1000 -c 4` on host 1, each with its
/// `extra` arguments) while tshark captures on both hosts, merges the two
/// captures (mergecap) and decodes them with `fields`. None when the test
/// is skipped.
fn captured_session(
    test: &str,
    (server_mode, server_extra): (&str, &[&str]),
    (client_mode, client_extra): (&str, &[&str]),
    fields: &[&str],
) -> Option<(Vec<Row>, MacAddr)> {
    let mode = client_mode;
    if !have_tshark(test) {
        return None;
    }
    let net = common::setup(test, 2, 1500)?;
    let (server, client) = (net.host(0).clone(), net.host(1).clone());
    let tmp = TempDir::new(mode);
    let bind = |h: &common::Host| {
        let iface = h.iface.clone();
        h.run(move || EdpSocket::bind((iface.as_str(), 0)).expect("probe socket"))
    };
    // A probe from one host syncs the capture on the other.
    let (mut probe_to_server, mut probe_to_client) = (bind(&client), bind(&server));
    let (file_s, file_c) = (tmp.path("server.pcapng"), tmp.path("client.pcapng"));
    let mut cap_s = Capture::start(&server, &file_s, &tmp);
    let mut cap_c = Capture::start(&client, &file_c, &tmp);
    cap_s.sync(&mut probe_to_server, server.mac);
    cap_c.sync(&mut probe_to_client, client.mac);

    let port = PORT.to_string();
    let srv = server
        .command(NETGAUGE)
        .args([
            "-m",
            server_mode,
            "-a",
            "--once",
            "-I",
            &server.iface,
            "-P",
            &port,
        ])
        .args(["--timeout", "10"])
        .args(server_extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netgauge server");
    let mut srv = Proc(srv);
    let out = client
        .command(NETGAUGE)
        .args([
            "-m",
            mode,
            "-I",
            &client.iface,
            "-R",
            &server.mac.to_string(),
        ])
        .args([
            "-P",
            &port,
            "-s",
            &MSG.to_string(),
            "-c",
            "4",
            "--warmup",
            "1",
        ])
        .args(["--timeout", "10"])
        .args(client_extra)
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
    assert!(
        st.success(),
        "netgauge -m {server_mode} server failed: {st}"
    );

    cap_s.sync(&mut probe_to_server, server.mac);
    cap_c.sync(&mut probe_to_client, client.mac);
    cap_s.stop();
    cap_c.stop();
    let merged = tmp.path("session.pcapng");
    let m = Command::new("mergecap")
        .arg("-w")
        .arg(&merged)
        .args([&file_s, &file_c])
        .output()
        .expect("run mergecap (package wireshark-common, installed with tshark)");
    assert!(
        m.status.success(),
        "mergecap failed: {}",
        String::from_utf8_lossy(&m.stderr)
    );
    let rows = decode(&tmp, &merged, &[], fields);
    // Everything captured decodes cleanly.
    for r in &rows {
        assert!(
            r.all("_ws.expert.message").is_empty(),
            "{mode} session frame with expert info: {r:?}"
        );
    }
    Some((rows, client.mac))
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
    // The server computes checksums (`always`); the client leaves them out
    // (`auto` on veth, which cannot corrupt a frame).
    let Some((rows, client_mac)) = captured_session(
        "dissector_esp",
        ("esp", &["--esp-checksum", "always"]),
        ("esp", &[]),
        &fields,
    ) else {
        return;
    };
    let client = client_mac.to_string();
    let esp: Vec<&Row> = rows
        .iter()
        .filter(|r| r.get("cnesp.flags").is_some())
        .collect();
    assert!(!esp.is_empty(), "no ESP frame captured: {rows:?}");
    let from_client = |r: &Row| r.get("eth.src") == Some(client.as_str());
    // Every server segment carries a checksum that verifies (status 1);
    // every client segment carries none (field 0, status 3: not present).
    for r in &esp {
        if from_client(r) {
            assert_eq!(r.get("cnesp.checksum.status"), Some("3"), "{r:?}");
            assert_eq!(r.num("cnesp.checksum"), Some(0), "{r:?}");
        } else {
            assert_eq!(r.get("cnesp.checksum.status"), Some("1"), "{r:?}");
            assert_ne!(r.num("cnesp.checksum"), Some(0), "{r:?}");
        }
    }
    let flags = |r: &Row| r.num("cnesp.flags").unwrap();
    let at = |r: &Row, f: &str| r.num(f).unwrap();

    // The frames as tshark's info column shows them, for failure messages.
    let infos = || -> String {
        esp.iter()
            .map(|r| {
                format!(
                    "{} {}",
                    r.get("frame.number").unwrap_or_default(),
                    r.get("_ws.col.Info").unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // The handshake that made the connection: the SYN-ACK (the client may
    // have tried a connection before the server listened), then its SYN.
    let synack_i = esp
        .iter()
        .position(|r| {
            !from_client(r) && flags(r) == 0x12 && at(r, "cnesp.srcport") == u64::from(PORT)
        })
        .unwrap_or_else(|| panic!("no SYN-ACK from the server:\n{}", infos()));
    let synack = esp[synack_i];
    let cport = at(synack, "cnesp.dstport");
    let syn = esp[..synack_i]
        .iter()
        .rev()
        .find(|r| from_client(r) && flags(r) == 0x02 && at(r, "cnesp.srcport") == cport)
        .unwrap_or_else(|| panic!("no SYN before the SYN-ACK:\n{}", infos()));
    assert_eq!(at(syn, "cnesp.dstport"), u64::from(PORT));
    let iss = at(syn, "cnesp.seq");
    assert_eq!(
        at(synack, "cnesp.ack"),
        (iss + 1) % (1 << 32),
        "SYN-ACK acknowledges the SYN:\n{}",
        infos()
    );
    let irs = at(synack, "cnesp.seq");
    let ack_i = synack_i
        + esp[synack_i..]
            .iter()
            .position(|r| from_client(r) && at(r, "cnesp.srcport") == cport)
            .unwrap_or_else(|| {
                panic!("no segment from the client after the SYN-ACK:\n{}", infos())
            });
    let ack = esp[ack_i];
    assert_eq!(
        flags(ack) & 0x17,
        0x10,
        "third segment of the handshake: ACK only: {ack:?}"
    );
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
            .any(|r| r.get("netgauge.kind") == Some("1")
                && r.num("netgauge.size") == Some(MSG as u64)),
        "netgauge HELLO in the ESP stream: {esp:?}"
    );
    let mut shown = vec![syn, synack, ack];
    shown.push(data[0]);
    let cols: Vec<&str> = ["frame.number", "eth.src"]
        .into_iter()
        .chain(fields.iter().copied().take(10))
        .collect();
    show(
        "ESP handshake and a data segment (tshark -T fields):",
        &shown,
        &cols,
    );
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
    let Some((rows, client_mac)) =
        captured_session("dissector_edp", ("edp", &[]), ("edp", &[]), &fields)
    else {
        return;
    };
    let client = client_mac.to_string();
    let edp: Vec<&Row> = rows
        .iter()
        .filter(|r| r.get("cnedp.dstport").is_some())
        .filter(|r| r.num("cnedp.dstport").unwrap() >= u64::from(PROBE_PORT + 100))
        .collect();
    let port = u64::from(PORT);
    let to_server: Vec<&Row> = edp
        .iter()
        .copied()
        .filter(|r| {
            r.get("eth.src") == Some(client.as_str()) && r.num("cnedp.dstport") == Some(port)
        })
        .collect();
    let to_client: Vec<&Row> = edp
        .iter()
        .copied()
        .filter(|r| {
            r.get("eth.src") != Some(client.as_str()) && r.num("cnedp.srcport") == Some(port)
        })
        .collect();
    assert!(!to_server.is_empty() && !to_client.is_empty(), "{edp:?}");
    // The client's ephemeral port is the server's destination.
    let cport = to_server[0].num("cnedp.srcport").unwrap();
    assert!(
        to_client
            .iter()
            .all(|r| r.num("cnedp.dstport") == Some(cport)),
        "{to_client:?}"
    );
    for dir in [&to_server, &to_client] {
        assert!(
            dir.iter().any(|r| r.num("cnedp.len") == Some(MSG as u64)),
            "datagrams of {MSG} bytes each way: {dir:?}"
        );
    }
    assert!(
        to_server
            .iter()
            .any(|r| r.get("netgauge.kind") == Some("1")
                && r.num("netgauge.size") == Some(MSG as u64)),
        "netgauge HELLO: {to_server:?}"
    );
    assert!(
        to_client
            .iter()
            .any(|r| r.get("netgauge.kind") == Some("2")),
        "netgauge READY: {to_client:?}"
    );
    // netgauge's payloads are not mistaken for CTP.
    assert!(
        edp.iter().all(|r| r.get("ctp.command").is_none()),
        "{edp:?}"
    );
    show(
        "EDP datagrams (first two):",
        &edp[..2.min(edp.len())],
        &[
            "frame.number",
            "eth.src",
            "cnedp.srcport",
            "cnedp.dstport",
            "cnedp.len",
            "_ws.col.Info",
        ],
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
    // The client's `-m ctp` runs over EDP because -R is a MAC; the server,
    // without -R, needs the explicit mode.
    let Some((rows, client_mac)) =
        captured_session("dissector_ctp", ("ctp-edp", &[]), ("ctp", &[]), &fields)
    else {
        return;
    };
    let client = client_mac.to_string();
    let ctp: Vec<&Row> = rows
        .iter()
        .filter(|r| r.get("ctp.command").is_some())
        .collect();
    assert!(!ctp.is_empty(), "no CTP packet decoded: {rows:?}");
    for r in &ctp {
        // The CTP packet is the whole EDP payload, or confirmations are
        // packed in front of another packet (ctp/PROTOCOL.md
        // "Confirmations share a frame").
        let sizes: u64 = r
            .all("ctp.size")
            .iter()
            .map(|v| v.parse::<u64>().unwrap())
            .sum();
        assert_eq!(Some(sizes), r.num("cnedp.len"), "{r:?}");
    }
    // A data packet is the last packet of its frame; confirmations may
    // stand in front of it.
    let data: Vec<&Row> = ctp
        .iter()
        .copied()
        .filter(|r| r.last("ctp.confirmation") == Some("0"))
        .collect();
    let confirmations: Vec<&Row> = ctp
        .iter()
        .copied()
        .filter(|r| r.all("ctp.confirmation").iter().any(|c| c == "1"))
        .collect();
    assert!(
        ctp.iter().all(|r| {
            let c = r.all("ctp.confirmation");
            c.iter().rev().skip(1).all(|c| c == "1")
        }),
        "a data packet in front of another: {ctp:?}"
    );
    assert!(!data.is_empty() && !confirmations.is_empty(), "{ctp:?}");
    // Every data packet of the client is confirmed by the server: same
    // command and id, size 25, no message size.
    for d in data
        .iter()
        .filter(|r| r.get("eth.src") == Some(client.as_str()))
    {
        // (A frame of packed confirmations lists each field once per
        // packet, in order.)
        let confirms = |c: &Row| {
            (0..c.all("ctp.id").len()).any(|i| {
                c.all("ctp.id")[i] == d.last("ctp.id").unwrap()
                    && c.all("ctp.command")[i] == d.last("ctp.command").unwrap()
                    && c.all("ctp.confirmation")[i] == "1"
                    && c.all("ctp.size")[i] == "25"
                    && c.all("ctp.msgsize")[i] == "0"
            })
        };
        assert!(
            confirmations
                .iter()
                .any(|c| c.get("eth.src") != d.get("eth.src") && confirms(c)),
            "no confirmation of {d:?}"
        );
    }
    assert!(
        data.iter()
            .any(|r| r.last_num("ctp.datalen") == Some(MSG as u64)
                && r.last_num("ctp.msgsize") == Some(MSG as u64)),
        "a {MSG}-byte command: {data:?}"
    );
    // The client's first packet opens its session with the server.
    let first = data
        .iter()
        .find(|r| r.get("eth.src") == Some(client.as_str()))
        .unwrap();
    assert_eq!(
        first.last_num("ctp.options").map(|o| o & 0x10),
        Some(0x10),
        "StartSession on the first packet: {first:?}"
    );
    assert!(
        data.iter().any(|r| r.get("netgauge.kind") == Some("1")),
        "netgauge HELLO inside CTP: {data:?}"
    );
    let mut shown: Vec<&Row> = vec![*first];
    if let Some(c) = confirmations.iter().find(|c| {
        c.all("ctp.id")
            .iter()
            .any(|i| Some(i.as_str()) == first.last("ctp.id"))
    }) {
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

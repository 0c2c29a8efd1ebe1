//! End-to-end: `netgauge --local` builds the two-host virtual cluster, runs
//! server and client for each mode over the veth pair, and prints JSON that
//! we parse and check. Needs root (network namespaces): elsewhere the tests
//! print why they skip, except under CI=true, where they fail.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

/// The project's rule (testkit::setup): without root or `ip netns`, print
/// why and skip, except under CI=true, where the test fails.
fn can_run() -> bool {
    if !testkit::is_root() {
        testkit::skip(
            "netgauge --local",
            "not root (network namespaces need root)",
        );
        return false;
    }
    let ip_ok = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ip_ok {
        testkit::skip(
            "netgauge --local",
            "`ip netns` unavailable (install iproute2)",
        );
    }
    ip_ok
}

/// The namespaces of `netgauge --local` runs: `cn<pid>x<n>-netgauge-...`,
/// with the pid of the netgauge process that built them.
fn netgauge_namespaces() -> Vec<(String, u32)> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (pid, rest) = name.strip_prefix("cn")?.split_once('x')?;
            let pid = pid.parse().ok()?;
            rest.contains("-netgauge-").then_some((name, pid))
        })
        .collect()
}

fn run_json(args: &[&str]) -> Vec<Value> {
    let out = Command::new(NETGAUGE)
        .args(["--local", "--json"])
        .args(args)
        .output()
        .expect("run netgauge");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "netgauge {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    records_after_header(&stdout)
}

/// The JSON lines of `stdout`: a metadata header object first, then the
/// records, which are returned.
fn records_after_header(stdout: &str) -> Vec<Value> {
    let mut lines = stdout.lines().map(|l| {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}"))
    });
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no output: {stdout}"));
    let md = &header["metadata"];
    assert_eq!(
        md["netgauge_version"],
        env!("CARGO_PKG_VERSION"),
        "{header}"
    );
    assert!(
        md["kernel"]
            .as_str()
            .is_some_and(|k| k.starts_with("Linux")),
        "{header}"
    );
    assert!(
        md["date"].as_str().is_some_and(|d| d.ends_with('Z')),
        "{header}"
    );
    assert!(
        md["command_line"].as_array().is_some_and(|a| a.len() > 1),
        "{header}"
    );
    let records: Vec<Value> = lines.collect();
    assert!(
        records.iter().all(|r| r.get("metadata").is_none()),
        "{stdout}"
    );
    records
}

fn check_one_one(r: &Value, mode: &str, size: u64, iterations: u64) {
    assert_eq!(r["mode"], mode, "{r}");
    assert_eq!(r["pattern"], "one_one");
    assert_eq!(r["size"], size);
    assert_eq!(r["iterations"], iterations);
    let lat = &r["lat_us"];
    let f = |k: &str| {
        lat[k]
            .as_f64()
            .unwrap_or_else(|| panic!("lat_us.{k} missing in {r}"))
    };
    let (min, p50, p90, p99, max, avg) =
        (f("min"), f("p50"), f("p90"), f("p99"), f("max"), f("avg"));
    assert!(
        min > 0.0 && min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= max,
        "{r}"
    );
    assert!(avg >= min && avg <= max, "{r}");
    let mbit = r["mbit_s"].as_f64().unwrap();
    let mb = r["mb_s"].as_f64().unwrap();
    // throughput is derived from the size and the median half round-trip
    assert!((mbit - size as f64 * 8.0 / p50).abs() / mbit < 1e-6, "{r}");
    assert!((mb * 8.0 - mbit).abs() / mbit < 1e-6, "{r}");
    check_cpu(r);
}

/// Both ends report their CPU time per iteration: present and positive
/// (every round trip costs each end some system time at least).
fn check_cpu(r: &Value) {
    for k in ["cpu_us_per_iter_client", "cpu_us_per_iter_server"] {
        let v = r[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} missing in {r}"));
        assert!(v > 0.0 && v.is_finite(), "{k} = {v} in {r}");
    }
    assert!(r["wait"].as_str().is_some_and(|w| !w.is_empty()), "{r}");
}

/// Process ids of netgauge `--hold` processes of this test binary's
/// netgauge.
fn hold_processes() -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if args.first() == Some(&NETGAUGE.as_bytes()) && args.contains(&&b"--hold"[..]) {
            out.push(pid);
        }
    }
    out
}

/// Waits up to 5 s for every hold process not in `before` to be gone.
fn no_new_hold_processes(before: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<u32> = hold_processes()
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "holding processes {left:?} outlived their run"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn no_leftover_namespaces() {
    // Namespaces of finished netgauge runs (dead pid) must be gone.
    for (name, pid) in netgauge_namespaces() {
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "namespace {name} left behind by finished run {pid}"
        );
    }
}

#[test]
fn local_one_one_all_modes() {
    if !can_run() {
        return;
    }
    let records = run_json(&["-s", "1-256", "-g", "1", "-c", "200", "--warmup", "20"]);
    // The default list: the raw floor first, and the kernel busy-poll
    // modes since the default wait policy (adaptive) spins.
    let modes = [
        "eth", "edp", "udp", "udp-bp", "tcp", "tcp-bp", "esp", "ctp-udp", "ctp-edp", "comm-udp",
        "comm-edp",
    ];
    let sizes = [1u64, 2, 4, 8, 16, 32, 64, 128, 256];
    assert_eq!(records.len(), modes.len() * sizes.len(), "{records:?}");
    for (i, r) in records.iter().enumerate() {
        check_one_one(r, modes[i / sizes.len()], sizes[i % sizes.len()], 200);
        assert_eq!(r["busy_poll"], false);
    }
    no_leftover_namespaces();
}

#[test]
fn local_stream_busy_poll_jumbo() {
    if !can_run() {
        return;
    }
    let records = run_json(&[
        "-x",
        "stream",
        "-m",
        "tcp,udp,edp,esp",
        "-s",
        "8000",
        "-c",
        "2000",
        "--mtu",
        "9000",
        "--busy-poll",
    ]);
    assert_eq!(records.len(), 4, "{records:?}");
    for r in &records {
        assert_eq!(r["pattern"], "stream");
        assert_eq!(r["size"], 8000);
        assert_eq!(r["busy_poll"], true);
        assert!(r["lat_us"].is_null());
        assert!(r["mbit_s"].as_f64().unwrap() > 0.0, "{r}");
        let lossy = matches!(r["mode"].as_str(), Some("udp" | "edp"));
        assert_eq!(
            r.get("loss").is_some(),
            lossy,
            "loss is reported for datagram modes only: {r}"
        );
        if let Some(l) = r.get("loss") {
            let l = l.as_f64().unwrap();
            assert!((0.0..1.0).contains(&l), "{r}");
        }
    }
    no_leftover_namespaces();
}

#[test]
fn long_form_output_file() {
    if !can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ng-long-{}", std::process::id()));
    let out = Command::new(NETGAUGE)
        .args([
            "--local", "-m", "udp", "-s", "1-4", "-g", "1", "-c", "50", "-o",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\n4 "), "no 4-byte row: {text}");
    assert!(
        text.contains("# fastest"),
        "comparison table missing: {text}"
    );
    let long = std::fs::read_to_string(&dir).unwrap();
    let _ = std::fs::remove_file(&dir);
    assert!(long.contains("# Sysname : "), "{long}");
    assert!(long.contains("## A  -  B  C  D  E  (F G) - H  I  J  K  (L M)  -  N  O  P  Q"));
    let rows: Vec<&str> = long.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 3, "{long}");
    assert!(rows[2].starts_with("4 - "), "{long}");
    // one_one rows carry the send blocking time and the latency (columns
    // B-Q) and both ends' CPU time per iteration (R, S).
    let cols: Vec<&str> = rows[2].split_whitespace().collect();
    assert_eq!(cols.len(), 23, "{long}");
    assert!(
        cols[21..]
            .iter()
            .all(|&c| c.parse::<f64>().is_ok_and(|v| v > 0.0)),
        "{long}"
    );
}

#[test]
fn ctrl_c_removes_the_cluster() {
    if !can_run() {
        return;
    }
    let mut child = Command::new(NETGAUGE)
        .args(["--local", "-m", "udp", "-s", "64", "-c", "100000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let ours = || -> Vec<String> {
        netgauge_namespaces()
            .into_iter()
            .filter(|&(_, p)| p == pid)
            .map(|(n, _)| n)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let names = loop {
        let names = ours();
        if names.len() == 2 {
            break names;
        }
        assert!(
            Instant::now() < deadline,
            "cluster never appeared: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    for n in &names {
        assert!(
            !std::path::Path::new(&format!("/run/netns/{n}")).exists(),
            "namespace {n} survived Ctrl-C"
        );
    }
}

/// Runs netgauge as an unprivileged user (uid 65534): it re-executes itself
/// in a user namespace and builds the cluster there.
fn as_nobody(args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(NETGAUGE)
        .args(args);
    c
}

fn userns_allowed() -> bool {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        // The kernel's policy, not a fault of netgauge: also under CI.
        eprintln!("skipping: user namespaces are disabled (user.max_user_namespaces=0)");
        return false;
    }
    true
}

#[test]
fn local_without_root_through_a_user_namespace() {
    if !can_run() || !userns_allowed() {
        return;
    }
    let out = as_nobody(&["--local", "--json", "-m", "udp,edp", "-s", "64", "-c", "50"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = records_after_header(&stdout);
    assert_eq!(records.len(), 2, "{stdout}");
    check_one_one(&records[0], "udp", 64, 50);
    check_one_one(&records[1], "edp", 64, 50);
}

#[test]
fn sigterm_without_root_stops_the_user_namespace_run() {
    if !can_run() || !userns_allowed() {
        return;
    }
    let mut child = as_nobody(&["--local", "-m", "udp", "-s", "64", "-c", "100000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // setpriv execs netgauge in place: the child is the outer netgauge.
    let outer = child.id();
    let inner = || -> Option<u32> {
        let out = Command::new("pgrep")
            .args(["-P", &outer.to_string()])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    // Wait until the measurement runs (the header line is printed).
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.contains("netgauge --local"), "{line}");
    let inner = inner().expect("the re-executed netgauge");
    unsafe { libc::kill(outer as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    // The inner netgauge got the signal (forwarded as SIGTERM), printed
    // what it had measured (nothing: one endless size) and removed its
    // cluster on the way out, within the outer one's 5 s.
    assert!(err.contains("netgauge: interrupted"), "{err}");
    assert!(rest.contains("# interrupted (Ctrl-C)"), "{rest}");
    assert!(
        !std::path::Path::new(&format!("/proc/{inner}")).exists(),
        "the re-executed netgauge survived"
    );
}

/// A size that fails is a FAIL cell with its reason; the mode goes on
/// from the next size in a new session, the other modes run, and the exit
/// status says that something failed.
#[test]
fn a_failed_size_is_reported_and_the_run_goes_on() {
    if !can_run() {
        return;
    }
    let child = Command::new(NETGAUGE)
        .args([
            "--local",
            "-m",
            "edp,udp,tcp",
            "-s",
            "1-16",
            "-g",
            "1",
            "-c",
            "50",
        ])
        .args(["--warmup", "5"])
        .env("NETGAUGE_INJECT_FAILURE", "udp:4")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}\n{stdout}");
    assert!(
        stderr.contains("1 of 15 measurements failed: udp at 4 B"),
        "{stderr}"
    );
    assert!(testkit::namespaces_of(pid).is_empty());
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    // Sizes 1, 2, 4, 8, 16; edp, udp, tcp: a value and a ratio each, or FAIL.
    assert_eq!(rows.len(), 5, "{stdout}");
    for row in &rows {
        if row[0] == "4" {
            assert_eq!(row[3], "FAIL[1]", "{stdout}");
            assert_eq!(row.len(), 6, "{stdout}");
        } else {
            assert_eq!(row.len(), 7, "every other cell measured: {stdout}");
        }
    }
    assert!(
        stdout.contains("# [1] udp at 4 B: client failed (exit status: 1): netgauge: mode udp: 4 bytes: failure injected"),
        "{stdout}"
    );
}

/// Ctrl-C (SIGINT) ends the run with the table of what was measured, the
/// cluster removed and exit status 130.
#[test]
fn ctrl_c_prints_what_was_measured() {
    if !can_run() {
        return;
    }
    let mut child = Command::new(NETGAUGE)
        .args([
            "--local", "-m", "udp,tcp", "-s", "1-2", "-g", "1", "-c", "50000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Once udp is done (its line on stderr), interrupt tcp.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("netgauge: udp: 2 of 2 sizes measured") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(n > 0, "netgauge ended before udp was measured");
    }
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130));
    assert!(testkit::namespaces_of(pid).is_empty());
    assert!(
        stdout.contains("# one_one: p50 half round-trip"),
        "{stdout}"
    );
    let one: Vec<&str> = stdout
        .lines()
        .find(|l| l.starts_with("1 "))
        .unwrap_or_else(|| panic!("no 1-byte row: {stdout}"))
        .split_whitespace()
        .collect();
    // Only udp's figure, the reference then (tcp was not measured).
    assert_eq!(one.len(), 3, "{stdout}");
    assert_eq!(one[2], "1.00x", "{stdout}");
    assert!(stdout.contains("# interrupted (Ctrl-C)"), "{stdout}");
}

#[test]
fn bad_arguments_are_explained() {
    let out = Command::new(NETGAUGE)
        .args(["-m", "carrier-pigeon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode"));
    let out = Command::new(NETGAUGE).args(["-m", "udp"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs -R"));
    let out = Command::new(NETGAUGE)
        .args(["--local", "--wait", "sometimes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown wait policy"));
    let out = Command::new(NETGAUGE)
        .args(["--local", "--busy-poll", "--wait", "block"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--busy-poll means --wait busy"));
    let out = Command::new(NETGAUGE)
        .args(["-m", "udp", "-R", "198.18.0.1", "--idle-procs", "4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--idle-procs"));
}

#[test]
fn eth_floor_one_one_and_stream() {
    if !can_run() {
        return;
    }
    // Sizes below the minimum Ethernet payload (padding), around the MTU
    // and above it (trains of frames).
    let records = run_json(&[
        "-m",
        "eth",
        "-s",
        "1-4096",
        "-g",
        "1",
        "-c",
        "200",
        "--busy-poll",
    ]);
    let sizes = [1u64, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
    assert_eq!(records.len(), sizes.len(), "{records:?}");
    for (r, &size) in records.iter().zip(&sizes) {
        check_one_one(r, "eth", size, 200);
        assert_eq!(r["busy_poll"], true);
        assert_eq!(r["wait"], "busy");
    }
    // Blocking waits in ppoll; a stream of trains reports its loss.
    let records = run_json(&[
        "-m", "eth", "-x", "stream", "-s", "3000", "-c", "500", "--wait", "block",
    ]);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(r["mode"], "eth");
    assert_eq!(r["wait"], "block");
    assert!(r["mbit_s"].as_f64().unwrap() > 0.0, "{r}");
    let loss = r["loss"]
        .as_f64()
        .expect("eth is a datagram mode: loss reported");
    assert!((0.0..1.0).contains(&loss), "{r}");
    check_cpu(r);
    no_leftover_namespaces();
}

#[test]
fn kernel_busy_poll_modes_run_or_explain() {
    if !can_run() {
        return;
    }
    let out = Command::new(NETGAUGE)
        .args([
            "--local",
            "--json",
            "-m",
            "udp-bp,tcp-bp",
            "-s",
            "64",
            "-c",
            "200",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // Refused (no CAP_NET_ADMIN above net.core.busy_read): the error
        // names the option and what to do.
        assert!(stderr.contains("SO_BUSY_POLL"), "{stderr}");
        assert!(stderr.contains("CAP_NET_ADMIN"), "{stderr}");
        return;
    }
    let records = records_after_header(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(records.len(), 2, "{records:?}");
    for (r, mode) in records.iter().zip(["udp-bp", "tcp-bp"]) {
        check_one_one(r, mode, 64, 200);
        assert_eq!(r["wait"], "so_busy_poll:50", "{r}");
    }
}

#[test]
fn idle_sockets_and_processes() {
    if !can_run() {
        return;
    }
    let before = hold_processes();
    let records = run_json(&[
        "-m",
        "edp,esp",
        "-s",
        "64",
        "-c",
        "200",
        "--idle-edp",
        "100",
        "--idle-esp",
        "30",
        "--idle-procs",
        "3",
    ]);
    assert_eq!(records.len(), 2, "{records:?}");
    for (r, mode) in records.iter().zip(["edp", "esp"]) {
        check_one_one(r, mode, 64, 200);
        assert_eq!(r["idle_edp_sockets"], 100, "{r}");
        assert_eq!(r["idle_esp_listeners"], 30, "{r}");
        assert_eq!(r["procs_per_host"], 3, "{r}");
    }
    no_new_hold_processes(&before);
    no_leftover_namespaces();
    // Without the options: none open, one process per host.
    let r = &run_json(&["-m", "edp", "-s", "64", "-c", "50"])[0];
    assert_eq!(r["idle_edp_sockets"], 0, "{r}");
    assert_eq!(r["idle_esp_listeners"], 0, "{r}");
    assert_eq!(r["procs_per_host"], 1, "{r}");
}

#[test]
fn ctrl_c_stops_the_holding_processes() {
    if !can_run() {
        return;
    }
    let before = hold_processes();
    let mut child = Command::new(NETGAUGE)
        .args([
            "--local",
            "-m",
            "udp",
            "-s",
            "64",
            "-c",
            "100000000",
            "--idle-procs",
            "3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // 2 extra processes per host.
    while hold_processes()
        .iter()
        .filter(|p| !before.contains(p))
        .count()
        < 4
    {
        assert!(
            Instant::now() < deadline,
            "holding processes never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    no_new_hold_processes(&before);
}

//! libfabric's own tools (libfabric-bin) over the provider: `fi_info`
//! lists it, its attributes and its variables; `fi_pingpong -e dgram`
//! checks every byte over the UDP link on loopback (no privilege) and over
//! EDP between the two hosts of a virtual cluster (root).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Scratch;
use vcluster::Process;

fn can_run(test: &str) -> bool {
    if !Command::new("fi_info")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        testkit::skip(
            test,
            "no fi_info / fi_pingpong (libfabric-bin: scripts/install-deps.sh)",
        );
        return false;
    }
    true
}

fn fi_info(fi: &Path, args: &[&str]) -> String {
    let out = Command::new("fi_info")
        .args(args)
        .env("FI_PROVIDER_PATH", fi)
        .env("FI_CLUSTERNET_LINK", "udp")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "fi_info {args:?}: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn fi_info_lists_the_provider_its_attributes_and_variables() {
    if !can_run("fi_info") {
        return;
    }
    let scratch = Scratch::new("fi-info");
    let fi = common::install_provider(&scratch);
    let l = fi_info(&fi, &["-l"]);
    assert!(l.contains("clusternet:"), "{l}");
    let p = fi_info(&fi, &["-p", "clusternet", "-v"]);
    assert!(p.contains("type: FI_EP_DGRAM"), "{p}");
    assert!(p.contains("name: clusternet"), "{p}");
    assert!(p.contains("prov_name: clusternet\n"), "{p}");
    assert!(p.contains("addr_format: FI_SOCKADDR_IN"), "{p}");
    // The reliable endpoint is the provider's own, not a utility
    // provider's layered over its datagrams.
    assert!(p.contains("type: FI_EP_RDM"), "{p}");
    assert!(!p.contains("prov_name: clusternet;"), "{p}");
    // The variables, with their help.
    let out = Command::new("fi_info")
        .arg("-e")
        .env("FI_PROVIDER_PATH", &fi)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stdout);
    for v in ["IFACE", "LINK", "WAIT", "KEY_FILE", "MAX_PEERS", "ACCEPT"] {
        assert!(
            e.contains(&format!("FI_CLUSTERNET_{v}: String")),
            "no FI_CLUSTERNET_{v}:\n{e}"
        );
    }
    // A bad value is refused with a reason, not a crash.
    let out = Command::new("fi_info")
        .args(["-p", "clusternet"])
        .env("FI_PROVIDER_PATH", &fi)
        .env("FI_CLUSTERNET_LINK", "carrier-pigeon")
        .env("FI_LOG_LEVEL", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("FI_CLUSTERNET_LINK"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the server, then the client (retrying while the server's control
/// port is not up yet); returns the client's output.
fn pingpong(server: Command, client: impl Fn() -> Command) -> String {
    let mut server = server;
    server.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut srv = Process::spawn(&mut server).unwrap();
    let end = Instant::now() + Duration::from_secs(120);
    let out: Output = loop {
        let out = client().output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("connect") || Instant::now() > end {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let st = srv.wait_timeout(Duration::from_secs(60)).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "fi_pingpong client: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        st.is_some_and(|s| s.success()),
        "fi_pingpong server: {st:?}"
    );
    text
}

fn check_table(out: &str) {
    // "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec", one row
    // per size; -c verified every byte.
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("100"))
        .collect();
    assert!(rows.len() >= 3, "{out}");
    eprintln!("{out}");
}

#[test]
fn fi_pingpong_over_the_udp_link_on_loopback() {
    if !can_run("fi_pingpong over the UDP link") {
        return;
    }
    let scratch = Scratch::new("pp-udp");
    let fi = common::install_provider(&scratch);
    let cmd = |server: bool| {
        let mut c = Command::new("fi_pingpong");
        c.args(["-p", "clusternet", "-e", "dgram", "-I", "100", "-c"])
            .env("FI_PROVIDER_PATH", &fi)
            .env("FI_CLUSTERNET_LINK", "udp")
            .env("FI_CLUSTERNET_IFACE", "lo");
        if !server {
            c.arg("127.0.0.1");
        }
        c
    };
    // A control port from the process id: parallel runs do not collide.
    let port = (40000 + std::process::id() % 20000).to_string();
    let mut srv = cmd(true);
    srv.args(["-B", &port]);
    check_table(&pingpong(srv, || {
        let mut c = cmd(false);
        c.args(["-P", &port]);
        c
    }));
}

#[test]
fn fi_pingpong_over_edp_between_two_namespaces() {
    if !can_run("fi_pingpong over EDP") {
        return;
    }
    let Some(cluster) = testkit::setup("fi_pingpong_edp", 2, 1500) else {
        return;
    };
    let scratch = Scratch::new("pp-edp");
    let fi = common::install_provider(&scratch);
    let cmd = |h: usize| {
        let mut c = cluster.host(h).command("fi_pingpong");
        c.args(["-p", "clusternet", "-e", "dgram", "-I", "100", "-c"])
            .env("FI_PROVIDER_PATH", &fi);
        c
    };
    let server_ip = cluster.host(0).ip.to_string();
    check_table(&pingpong(cmd(0), || {
        let mut c = cmd(1);
        c.arg(&server_ip);
        c
    }));
}

//! A connectionless FI_EP_RDM endpoint through libfabric's C API
//! (`tests/c/fi_connless.c`, compiled with `cc -lfabric`), addressed as
//! fabtests address it: the server takes its address from
//! `fi_getinfo(NULL, PORT, FI_SOURCE)`, the client from
//! `fi_getinfo(NODE, PORT)` and sends its own name in band, and the server
//! receives it before it inserts the client (FI_ADDR_NOTAVAIL, or with
//! FI_SOURCE_ERR an FI_EADDRNOTAVAIL entry carrying the name). Over the
//! UDP link on loopback (no privilege) and over EDP between the two hosts
//! of a virtual cluster (root; must run under CI=true). And the C side's
//! checks of what callers hand it (`fi_connless checks`): bogus error
//! entries, lengths no buffer has, fids not ours, a name of another
//! cluster key, fi_eq_sread's wait.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{start, Scratch, Side};

/// Most a run may take (the program's own waits are 20 s each).
const LIMIT: Duration = Duration::from_secs(120);

fn build(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let fi = common::install_provider(scratch);
    let bin = common::compile(scratch, "cc", "c/fi_connless.c", &["-lfabric"]);
    (fi, bin)
}

/// Waits for `s` to end; its stdout lines and stderr; panics unless it
/// succeeded and printed `ok`.
fn finish(mut s: Side, who: &str, ok: &str) -> (Vec<String>, String) {
    let st = s.proc.wait_timeout(LIMIT).unwrap();
    if st.is_none() {
        s.proc.kill();
    }
    let err = s.stderr.join().unwrap();
    let mut out = Vec::new();
    while let Ok(l) = s.lines.recv_timeout(LIMIT) {
        out.push(l);
    }
    eprintln!("{who}: {}", err.trim_end());
    assert!(
        st.is_some_and(|st| st.success()) && out.iter().any(|l| l == ok),
        "{who} failed ({st:?}): {err}\nstdout: {out:?}"
    );
    (out, err)
}

/// The server's name line (`name HEX`), after which it prints `ready`.
fn server_name(s: &Side) -> Vec<u8> {
    let l = s
        .lines
        .recv_timeout(LIMIT)
        .expect("the server printed its name");
    let hex = l.strip_prefix("name ").expect("a name line");
    let name = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert_eq!(s.lines.recv_timeout(LIMIT).as_deref(), Ok("ready"));
    name
}

/// Runs server and client: `server(args)` and `client(node, args)` give
/// each one's command; `node` turns the server's name into the node the
/// client gives fi_getinfo.
fn run_pair(
    server: impl Fn(&[&str]) -> Command,
    client: impl Fn(&[&str]) -> Command,
    node: impl Fn(&[u8]) -> String,
    port: u16,
    err: bool,
) {
    let port = port.to_string();
    let mut sargs = vec!["server", port.as_str()];
    if err {
        sargs.push("err");
    }
    let srv = start(server(&sargs), Stdio::null());
    let name = server_name(&srv);
    let node = node(&name);
    let mut cargs = vec!["client", node.as_str(), port.as_str()];
    if err {
        cargs.push("err");
    }
    let cli = start(client(&cargs), Stdio::null());
    finish(cli, "client", "fi_connless: client ok");
    finish(srv, "server", "fi_connless: server ok");
}

/// A UDP port free on loopback now.
fn free_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

fn over_udp(what: &str, err: bool) {
    let scratch = Scratch::new(what);
    let (fi, bin) = build(&scratch);
    let cmd = |args: &[&str]| {
        let mut c = Command::new(&bin);
        c.args(args)
            .env("FI_PROVIDER_PATH", &fi)
            .env("FI_CLUSTERNET_LINK", "udp")
            .env("FI_CLUSTERNET_IFACE", "lo");
        c
    };
    run_pair(cmd, cmd, |_| "127.0.0.1".into(), free_port(), err);
}

fn over_edp(what: &str, err: bool) {
    let Some(cluster) = testkit::setup(what, 2, 1500) else {
        return;
    };
    let scratch = Scratch::new(what);
    let (fi, bin) = build(&scratch);
    let (fi, bin) = (&fi, &bin);
    let cmd = |h: usize| {
        let host = cluster.host(h);
        move |args: &[&str]| {
            let mut c = host.command(bin);
            c.args(args)
                .env("FI_PROVIDER_PATH", fi)
                .env("FI_CLUSTERNET_IFACE", &host.iface);
            c
        }
    };
    // Over the packet link a node is a MAC address: the server's name's
    // first six bytes.
    let mac = |name: &[u8]| {
        name[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    run_pair(cmd(0), cmd(1), mac, 9228, err);
}

#[test]
fn fabtests_addressing_over_the_udp_link() {
    over_udp("connless-udp", false);
}

#[test]
fn fabtests_addressing_with_source_err_over_the_udp_link() {
    over_udp("connless-udp-err", true);
}

#[test]
fn fabtests_addressing_over_edp_between_two_namespaces() {
    over_edp("connless-edp", false);
}

#[test]
fn fabtests_addressing_with_source_err_over_edp() {
    over_edp("connless-edp-err", true);
}

#[test]
fn what_callers_hand_the_c_side_is_checked() {
    let scratch = Scratch::new("connless-checks");
    let (fi, bin) = build(&scratch);
    let mut c = Command::new(&bin);
    c.arg("checks")
        .env("FI_PROVIDER_PATH", &fi)
        .env("FI_CLUSTERNET_LINK", "udp")
        .env("FI_CLUSTERNET_IFACE", "lo");
    let (_, err) = finish(start(c, Stdio::null()), "checks", "fi_connless: checks ok");
    // The key mismatch is said where the user looks, with the fix.
    assert!(err.contains("cluster key mismatch"), "{err}");
    assert!(err.contains("FI_CLUSTERNET_KEY_FILE"), "{err}");
}

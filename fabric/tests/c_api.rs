//! The provider through libfabric's public C API: `tests/c/fi_check.c`,
//! compiled with `cc -lfabric`, runs as two processes that exchange their
//! endpoint names through this harness (fi_getinfo ... fi_tsend / fi_trecv
//! / fi_cq_read, truncation, cancel, AV lookups, and on FI_EP_RDM ignore
//! masks, CQ data, peek / claim / discard, self; see the program's header),
//! for FI_EP_RDM and FI_EP_DGRAM:
//!
//! - over the UDP link on loopback: no privilege, runs everywhere;
//! - over EDP between the two hosts of a virtual cluster: needs root (under
//!   CI=true it must run);
//! - over the UDP link between two interfaces of one host whose MTUs
//!   differ (1400 and loopback's): root.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{start, Scratch, Side};

/// Most a run may take (the program's own waits are 20 s each).
const LIMIT: Duration = Duration::from_secs(120);

fn name_of(s: &mut Side, who: &str) -> String {
    let l = s
        .lines
        .recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("{who} printed no name"));
    l.strip_prefix("name ")
        .unwrap_or_else(|| panic!("{who}: expected its name, got {l:?}"))
        .to_string()
}

/// Runs the two roles, `cmd(role)` giving each one's command.
fn run_pair(cmd: impl Fn(usize) -> Command) {
    let mut sides: Vec<Side> = (0..2).map(|r| start(cmd(r), Stdio::piped())).collect();
    let names: Vec<String> = sides
        .iter_mut()
        .enumerate()
        .map(|(r, s)| name_of(s, &format!("role {r}")))
        .collect();
    let mut stdins: Vec<_> = sides
        .iter_mut()
        .map(|s| s.proc.child_mut().stdin.take().unwrap())
        .collect();
    for (r, stdin) in stdins.iter_mut().enumerate() {
        writeln!(stdin, "{}", names[1 - r]).unwrap();
    }
    // The barrier: both inserted the other's name.
    for (r, s) in sides.iter_mut().enumerate() {
        let l = s.lines.recv_timeout(LIMIT).unwrap_or_default();
        assert_eq!(l, "inserted", "role {r}");
    }
    for stdin in &mut stdins {
        writeln!(stdin, "go").unwrap();
    }
    for (r, mut s) in sides.into_iter().enumerate() {
        let st = s.proc.wait_timeout(LIMIT).unwrap();
        if st.is_none() {
            s.proc.kill();
        }
        let err = s.stderr.join().unwrap();
        // The reader thread may pass the last lines on after the exit:
        // read until it ends (EOF closes the channel).
        let mut out: Vec<String> = Vec::new();
        while let Ok(l) = s.lines.recv_timeout(LIMIT) {
            out.push(l);
        }
        eprintln!("role {r}: {}", err.trim_end());
        assert!(
            st.is_some_and(|st| st.success()),
            "fi_check role {r} failed ({st:?}): {err}\nstdout: {out:?}"
        );
        assert!(
            out.iter().any(|l| l == &format!("fi_check: role {r} ok")),
            "role {r}: {out:?}"
        );
    }
}

fn build(scratch: &Scratch) -> (std::path::PathBuf, std::path::PathBuf) {
    let fi = common::install_provider(scratch);
    let bin = common::compile(scratch, "cc", "c/fi_check.c", &["-lfabric"]);
    (fi, bin)
}

fn over_udp(what: &str, mode: &str) {
    let scratch = Scratch::new(what);
    let (fi, bin) = build(&scratch);
    run_pair(|r| {
        let mut c = Command::new(&bin);
        c.arg(r.to_string())
            .arg(mode)
            .env("FI_PROVIDER_PATH", &fi)
            .env("FI_CLUSTERNET_LINK", "udp")
            .env("FI_CLUSTERNET_IFACE", "lo");
        c
    });
}

fn over_edp(what: &str, mode: &str) {
    let Some(cluster) = testkit::setup(what, 2, 1500) else {
        return;
    };
    let scratch = Scratch::new(what);
    let (fi, bin) = build(&scratch);
    run_pair(|r| {
        let mut c = cluster.host(r).command(&bin);
        c.arg(r.to_string())
            .arg(mode)
            .env("FI_PROVIDER_PATH", &fi)
            .env("FI_CLUSTERNET_IFACE", &cluster.host(r).iface);
        c
    });
}

#[test]
fn rdm_over_the_udp_link_on_loopback() {
    over_udp("capi-rdm-udp", "rdm");
}

#[test]
fn rdm_over_edp_between_two_namespaces() {
    over_edp("capi-rdm-edp", "rdm");
}

#[test]
fn dgram_over_the_udp_link_on_loopback() {
    over_udp("capi-dgram-udp", "dgram");
}

#[test]
fn dgram_over_edp_between_two_namespaces() {
    over_edp("capi-dgram-edp", "dgram");
}

/// Two processes of one host on interfaces of different MTU over the UDP
/// link: role 0 on the host's Ethernet interface (MTU 1400), role 1 on
/// loopback (the link's 9000). Each sizes its frames to the other's MTU
/// (the names tell it) and hears the other's larger frames: every size up
/// to max_msg_size arrives (root: the namespace with the 1400-byte link).
#[test]
fn rdm_between_interfaces_of_different_mtu() {
    let Some(cluster) = testkit::setup("capi-rdm-mtu", 2, 1400) else {
        return;
    };
    let scratch = Scratch::new("capi-rdm-mtu");
    let (fi, bin) = build(&scratch);
    let host = cluster.host(0);
    run_pair(|r| {
        let mut c = host.command(&bin);
        c.arg(r.to_string())
            .arg("rdm")
            .env("FI_PROVIDER_PATH", &fi)
            .env("FI_CLUSTERNET_LINK", "udp")
            .env(
                "FI_CLUSTERNET_IFACE",
                if r == 0 { host.iface.as_str() } else { "lo" },
            );
        c
    });
}

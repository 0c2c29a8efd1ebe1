//! `netgauge --local --link udp`: edp, esp and ctp-edp on UDP links between
//! two processes on 127.0.0.1, with no namespace and no privilege. These
//! tests run everywhere; as root, one of them drops to user nobody with no
//! capabilities at all (setpriv), as an unprivileged user would run it.

use std::process::Command;

use serde_json::Value;

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

/// A base port of its own per test and process (each mode takes two).
fn port(test: u16) -> String {
    (30_000 + (std::process::id() % 500) as u16 * 40 + test * 20).to_string()
}

/// The records of a `--json` run's stdout (the metadata line apart),
/// asserting the run succeeded.
fn records(out: &std::process::Output) -> (Value, Vec<Value>) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "netgauge failed ({}): {}\nstdout: {stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON line"));
    let meta = lines.next().expect("metadata line");
    assert!(meta.get("metadata").is_some(), "first line: {meta}");
    (meta, lines.collect())
}

fn check_modes(recs: &[Value], modes: &[&str]) {
    for m in modes {
        let r = recs
            .iter()
            .find(|r| r["mode"] == *m)
            .unwrap_or_else(|| panic!("no record for {m} in {recs:?}"));
        let lat = r["lat_us"]["p50"]
            .as_f64()
            .unwrap_or_else(|| panic!("{m}: no p50 in {r}"));
        assert!(lat > 0.0 && lat < 100_000.0, "{m}: p50 {lat} us");
        assert_eq!(r["size"], 64, "{m}: {r}");
    }
}

#[test]
fn local_udp_link_runs_our_modes_without_namespaces() {
    let out = Command::new(NETGAUGE)
        .args([
            "--local",
            "--link",
            "udp",
            "--json",
            "-m",
            "edp,esp,ctp-edp,udp",
        ])
        .args(["-s", "64", "-c", "200", "-P", &port(0)])
        .output()
        .expect("run netgauge");
    let (meta, recs) = records(&out);
    let hosts = meta["metadata"]["hosts"].as_array().expect("hosts");
    assert!(hosts.iter().all(|h| h["link"] == "udp"), "{meta}");
    check_modes(&recs, &["edp", "esp", "ctp-edp", "udp"]);
}

#[test]
fn unprivileged_user_runs_local_udp_link() {
    let exe = if testkit::is_root() {
        // nobody must reach the binary: a copy in a world-readable place.
        let dir = std::env::temp_dir().join(format!("netgauge-unpriv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("netgauge");
        std::fs::copy(NETGAUGE, &exe).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some((dir, exe))
    } else {
        None
    };
    let mut cmd = match &exe {
        Some((_, exe)) => {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ])
            .arg(exe);
            c
        }
        None => Command::new(NETGAUGE),
    };
    let out = cmd
        .args([
            "--local",
            "--link",
            "udp",
            "--json",
            "-m",
            "edp,esp,ctp-edp",
        ])
        .args(["-s", "64", "-c", "200", "-P", &port(1)])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run netgauge (setpriv from util-linux when root)");
    if let Some((dir, _)) = &exe {
        let _ = std::fs::remove_dir_all(dir);
    }
    let (_, recs) = records(&out);
    check_modes(&recs, &["edp", "esp", "ctp-edp"]);
}

#[test]
fn link_udp_refuses_what_it_cannot_run() {
    for (args, want) in [
        (
            &["--local", "--link", "udp", "-m", "eth"][..],
            "no UDP link",
        ),
        (&["-a", "--link", "udp", "-m", "edp"][..], "--link-peer"),
        (
            &[
                "--local", "--link", "udp", "--hosts", "4", "-x", "1toN", "-m", "edp",
            ][..],
            "multi-host",
        ),
        (
            &[
                "-m",
                "edp",
                "--link-peer",
                "127.0.0.1:1",
                "-R",
                "02:00:00:00:00:01",
            ][..],
            "--link udp",
        ),
        (
            &["--link", "udp", "-m", "edp", "-R", "no-such-host.invalid"][..],
            "-R",
        ),
    ] {
        let out = Command::new(NETGAUGE)
            .args(args)
            .output()
            .expect("run netgauge");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    }
}

#[test]
fn hostnames_lists_both_ends() {
    let out = Command::new(NETGAUGE)
        .args(["--local", "--link", "udp", "--hostnames", "-m", "edp"])
        .args(["-s", "64", "-c", "50", "-P", &port(2)])
        .output()
        .expect("run netgauge");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    for rank in ["# rank 0 (server): host ", "# rank 1 (client): host "] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(rank) && l.contains(&host)),
            "no {rank:?}{host} line in {stdout}"
        );
    }
}

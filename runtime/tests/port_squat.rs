//! Regression: a user without any capability could hold EDP/ESP port
//! leases (abstract Unix socket names anyone may bind), so a root server
//! could not bind its port. With a privileged lease directory (mode 2770,
//! root's group) such a user gets `PermissionDenied` and root keeps every
//! port. The lease space is chosen once per process, so this binary sets
//! `CLUSTERNET_LEASE_DIR` before its first lease and holds one test.
//! Needs root (to run a child as `nobody`); without it the test prints why
//! and returns, except under CI=true where it fails.

use std::io::{BufRead, BufReader, ErrorKind};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use runtime::ports;

use runtime::ports::{LeaseSpace, LEASE_DIR_ENV};
use runtime::ETHERTYPE_ESP;

const IFACE: &str = "squat0";
const NOBODY: u32 = 65534;

/// Child role: takes port `SQUAT_PORT` and holds it until stdin closes.
#[test]
#[ignore = "child process of unprivileged_users_cannot_squat_ports"]
fn child_take_port() {
    let Ok(port) = std::env::var("SQUAT_PORT") else {
        return;
    };
    match ports::allocate(IFACE, ETHERTYPE_ESP, port.parse().unwrap()) {
        Ok(lease) => {
            println!("HELD {}", lease.port());
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
        }
        Err(e) => println!("REFUSED {:?}: {e}", e.kind()),
    }
}

// The callers wait for (or kill) the child; a failed assertion here ends
// the test process, and the child with its stdin.
#[allow(clippy::zombie_processes)]
fn child(port: u16, uid: Option<u32>) -> (Child, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_take_port",
        "--ignored",
        "--nocapture",
        "-q",
    ])
    .env("SQUAT_PORT", port.to_string())
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let mut c = cmd.spawn().unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child said nothing");
        if line.starts_with("HELD") || line.starts_with("REFUSED") {
            // The rest of the child's output (the harness's summary).
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
            return (c, line.trim().to_string());
        }
    }
}

#[test]
fn unprivileged_users_cannot_squat_ports() {
    if !nix::unistd::geteuid().is_root() {
        assert!(std::env::var("CI").is_err(), "needs root under CI");
        eprintln!("skipped: needs root (runs a child as nobody)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cn-leases-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2770)).unwrap();
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    std::env::set_var(LEASE_DIR_ENV, &dir);
    assert_eq!(ports::lease_space(), &LeaseSpace::Directory(dir.clone()));

    // A user without privilege cannot take a server's port ...
    let (mut c, line) = child(7000, Some(NOBODY));
    assert!(line.starts_with("REFUSED PermissionDenied"), "{line}");
    assert!(
        line.contains(&dir.display().to_string()),
        "error names the directory: {line}"
    );
    c.wait().unwrap();
    // ... so root takes it, and the ephemeral range and control port too.
    let server = ports::allocate(IFACE, ETHERTYPE_ESP, 7000).unwrap();
    let eph = ports::allocate(IFACE, ETHERTYPE_ESP, 0).unwrap();
    assert!(eph.port() >= ports::EPHEMERAL_FIRST);
    let control = runtime::PortLease::control(IFACE, ETHERTYPE_ESP).unwrap();

    // Leases stay exclusive among privileged holders, visible without
    // being taken, and are released on drop.
    assert_eq!(
        ports::allocate(IFACE, ETHERTYPE_ESP, 7000)
            .unwrap_err()
            .kind(),
        ErrorKind::AddrInUse
    );
    assert!(ports::is_held(IFACE, ETHERTYPE_ESP, 7000));
    let mut want = vec![0, 7000, eph.port()];
    want.sort_unstable();
    assert_eq!(ports::held_ports(IFACE, ETHERTYPE_ESP).unwrap(), want);
    drop((server, control));
    assert!(!ports::is_held(IFACE, ETHERTYPE_ESP, 7000));
    assert_eq!(
        ports::held_ports(IFACE, ETHERTYPE_ESP).unwrap(),
        vec![eph.port()]
    );

    // A privileged process that dies (kill -9) releases its lease.
    let (mut c, line) = child(7001, None);
    assert_eq!(line, "HELD 7001");
    assert_eq!(
        ports::allocate(IFACE, ETHERTYPE_ESP, 7001)
            .unwrap_err()
            .kind(),
        ErrorKind::AddrInUse
    );
    c.kill().unwrap();
    c.wait().unwrap();
    ports::allocate(IFACE, ETHERTYPE_ESP, 7001).unwrap();
}

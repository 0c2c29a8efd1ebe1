//! `--local`: run every requested mode between the two hosts of a virtual
//! cluster built for the run, and compare them in one table.
//!
//! For each mode a server (`netgauge -a`) starts in host A and a client
//! (`netgauge --json`) in host B; the client's JSON records are collected.
//! Without root, netgauge re-executes itself in a new user + network + mount
//! namespace (`unshare`), where it may build the cluster; where the kernel
//! forbids that, it says what is missing.

use std::io::{self, BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::cli::{Args, Mode, Pattern};
use crate::report::{self, Record};
use crate::vcluster::{self, VCluster};

/// Environment variable marking the re-executed child inside a user namespace.
const IN_USERNS: &str = "NETGAUGE_IN_USERNS";

/// Runs `--local`. Returns every record, already printed.
pub fn run(args: &Args) -> io::Result<Vec<Record>> {
    if !vcluster::can_build_directly() {
        return reexec_in_userns();
    }
    if std::env::var_os(IN_USERNS).is_some() {
        prepare_userns_mounts()?;
    }
    vcluster::install_signal_cleanup();
    let mut vc = VCluster::create(args.mtu)?;
    if args.keep {
        vc.keep();
    }
    let exe = std::env::current_exe()?;
    let exe = exe
        .to_str()
        .ok_or_else(|| io::Error::other("netgauge's path is not UTF-8"))?;
    let modes = args.resolve_modes();
    // --idle-procs: P-1 holding processes per host, for the whole run.
    let mut holders = crate::hold::Holders::default();
    if args.idle_procs > 1 {
        let extra = hold_args(args);
        for h in [&vc.a, &vc.b] {
            holders.spawn(
                args.idle_procs - 1,
                || {
                    let mut c = vc.command(h, exe);
                    c.args(["-I", &h.iface]);
                    c
                },
                &extra,
            )?;
        }
    }
    if !args.json {
        println!(
            "# netgauge --local: hosts {} ({}, {}) and {} ({}, {}), veth MTU {}, pattern {}, {} iterations per size, wait {}",
            vc.a.netns, vc.a.mac, vc.a.ip, vc.b.netns, vc.b.mac, vc.b.ip, vc.mtu,
            args.pattern.name(), args.count, args.wait().label()
        );
        println!(
            "# per host: {} netgauge process(es) ({} holding one EDP socket and one ESP listener each); per process {} idle EDP sockets, {} idle ESP listeners",
            args.idle_procs,
            holders.count() / 2,
            args.idle_edp,
            args.idle_esp
        );
    }
    let mut all = Vec::new();
    let mut runs: Vec<Vec<Record>> = Vec::new();
    for rep in 0..args.repeat {
        // Alternate the order so that no mode always runs first (warm caches,
        // frequency scaling, neighbours' load).
        let order: Vec<(usize, Mode)> = if rep % 2 == 0 {
            modes.iter().copied().enumerate().collect()
        } else {
            modes.iter().copied().enumerate().rev().collect()
        };
        let mut this_run = Vec::new();
        for (i, mode) in order {
            let port = args
                .port
                .wrapping_add(((rep * modes.len() + i) % 1000) as u16);
            let mut records = run_mode(args, &vc, exe, mode, port)
                .map_err(|e| io::Error::new(e.kind(), format!("mode {}: {e}", mode.name())))?;
            for r in &mut records {
                r.procs_per_host = args.idle_procs;
            }
            this_run.extend(records.iter().cloned());
            print_records(args, &records)?;
            all.extend(records);
        }
        runs.push(this_run);
    }
    if !args.json {
        println!();
        if args.repeat > 1 {
            println!(
                "# median over {} runs of each mode's p50 half round-trip and throughput",
                args.repeat
            );
            print!(
                "{}",
                report::comparison(&report::median_over_runs(
                    &runs,
                    &modes.iter().map(|m| m.name()).collect::<Vec<_>>()
                ))
            );
        } else {
            print!("{}", report::comparison(&all));
        }
    }
    if let Some(path) = &args.output {
        let mut f = std::fs::File::create(path)?;
        for mode in &modes {
            let rs: Vec<Record> = all
                .iter()
                .filter(|r| r.mode == mode.name())
                .cloned()
                .collect();
            report::write_long_form(&mut f, &rs)?;
        }
    }
    Ok(all)
}

fn print_records(args: &Args, records: &[Record]) -> io::Result<()> {
    {
        for r in records {
            if args.json {
                println!("{}", serde_json::to_string(r).map_err(io::Error::other)?);
            } else if !args.verbose {
                println!("{:<8} {}", r.mode, report::short_line(r));
            } else {
                println!(
                    "{:<8} {}{}",
                    r.mode,
                    report::short_line(r),
                    r.transport_stats
                        .as_deref()
                        .map(|s| format!("   [{s}]"))
                        .unwrap_or_default()
                );
            }
        }
    }
    Ok(())
}

/// The arguments both ends share.
fn common_args(args: &Args, mode: Mode, port: u16) -> Vec<String> {
    let mut v = vec![
        "-m".into(),
        mode.name().into(),
        "-P".into(),
        port.to_string(),
        "-x".into(),
        args.pattern.name().into(),
        "--timeout".into(),
        args.timeout_s.to_string(),
        "--seed".into(),
        args.seed.to_string(),
    ];
    v.push("--wait".into());
    v.push(args.wait().label());
    for (flag, n) in [("--idle-edp", args.idle_edp), ("--idle-esp", args.idle_esp)] {
        if n > 0 {
            v.push(flag.into());
            v.push(n.to_string());
        }
    }
    if args.verbose {
        v.push("-v".into());
    }
    for (flag, p) in [
        ("--loss", args.loss),
        ("--dup", args.dup),
        ("--reorder", args.reorder),
    ] {
        if p > 0.0 {
            v.push(flag.into());
            v.push(p.to_string());
        }
    }
    v
}

/// The arguments of a holding process (`--idle-procs`): the session's
/// wait policy, hence its runtime configuration.
fn hold_args(args: &Args) -> Vec<String> {
    vec!["--wait".into(), args.wait().label()]
}

/// A process inside the cluster: registered for Ctrl-C, killed if dropped
/// while still owned (an error path).
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    fn spawn(cmd: &mut std::process::Command) -> io::Result<Self> {
        let c = cmd.spawn()?;
        vcluster::register_child(c.id());
        Ok(KillOnDrop(Some(c)))
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
            vcluster::unregister_child(c.id());
        }
    }
}

fn run_mode(
    args: &Args,
    vc: &VCluster,
    exe: &str,
    mode: Mode,
    port: u16,
) -> io::Result<Vec<Record>> {
    let common = common_args(args, mode, port);
    let mut server = vc.command(&vc.a, exe);
    server.arg("-a").args(&common).args(["-I", &vc.a.iface]);
    server
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = KillOnDrop::spawn(&mut server)?;

    let remote = if mode.is_ethernet() {
        vc.a.mac.to_string()
    } else {
        vc.a.ip.to_string()
    };
    let mut client = vc.command(&vc.b, exe);
    client
        .args(&common)
        .args(["-I", &vc.b.iface, "-R", &remote, "--json"])
        .args(["-s", &format!("{}-{}", args.size.min, args.size.max)])
        .args(["-c", &args.count.to_string(), "-g", &args.grade.to_string()])
        .args(["--warmup", &args.warmup.to_string()]);
    client
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut client = KillOnDrop::spawn(&mut client)?;

    let stdout = client
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .expect("piped stdout");
    let mut records = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line.trim_start().starts_with('{') {
            let r: Record = serde_json::from_str(&line).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("client printed bad JSON {line:?}: {e}"),
                )
            })?;
            records.push(r);
        }
    }
    let mut c = client.0.take().expect("client");
    let status = c.wait()?;
    let client_err = read_stderr(&mut c);
    if !status.success() {
        let mut msg = format!("client failed ({status}): {}", client_err.trim());
        if let Some(mut s) = server.0.take() {
            std::thread::sleep(Duration::from_millis(100));
            if s.try_wait()?.is_none() {
                let _ = s.kill();
            }
            let _ = s.wait();
            let e = read_stderr(&mut s);
            if !e.trim().is_empty() {
                msg.push_str(&format!("; server: {}", e.trim()));
            }
        }
        return Err(io::Error::other(msg));
    }
    // The server ends after the client's BYE; give it a moment, then stop it.
    let mut s = server.0.take().expect("server");
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(st) = s.try_wait()? {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = s.kill();
            let _ = s.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let server_err = read_stderr(&mut s);
    match status {
        Some(st) if st.success() => {}
        Some(st) => {
            return Err(io::Error::other(format!(
                "server failed ({st}): {}",
                server_err.trim()
            )))
        }
        None => log::warn!("{} server did not exit after BYE; stopped it", mode.name()),
    }
    if args.verbose && !server_err.trim().is_empty() {
        eprintln!("{}", server_err.trim_end());
    }
    let expected = crate::cli::size_steps(args.size, args.grade).len();
    if records.len() != expected {
        return Err(io::Error::other(format!(
            "client reported {} of {expected} sizes",
            records.len()
        )));
    }
    if args.pattern == Pattern::OneOne && records.iter().any(|r| r.lat_us.is_none()) {
        return Err(io::Error::other("one_one record without latency"));
    }
    Ok(records)
}

fn read_stderr(c: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = c.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Without privileges: re-executes netgauge in new user, network and mount
/// namespaces (`unshare --user --map-root-user --net --mount`), where it is
/// root of its own namespaces and may build the cluster.
fn reexec_in_userns() -> io::Result<Vec<Record>> {
    if std::env::var_os(IN_USERNS).is_some() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "inside the user namespace netgauge still lacks CAP_SYS_ADMIN/CAP_NET_ADMIN",
        ));
    }
    let max_userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let unpriv = std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
        .ok()
        .map(|s| s.trim() == "1");
    if max_userns == Some(0) || unpriv == Some(false) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "--local needs root, or user namespaces: this kernel forbids them to unprivileged users \
             (sysctl user.max_user_namespaces=0 or kernel.unprivileged_userns_clone=0); \
             run as root (sudo), or enable them",
        ));
    }
    let exe = std::env::current_exe()?;
    let status = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--mount", "--propagation", "private"])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(IN_USERNS, "1")
        .status()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("--local without root needs `unshare` (util-linux) to enter a user namespace: {e}"),
            )
        })?;
    // The child printed everything; mirror its exit status.
    std::process::exit(status.code().unwrap_or(1));
}

/// Inside a fresh user + mount namespace: give `ip netns` a private, writable
/// /run/netns (and /var/run/netns), as only root could otherwise create it.
fn prepare_userns_mounts() -> io::Result<()> {
    let dir = "/run/netns";
    let _ = std::fs::create_dir_all(dir);
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs", dir])
        .status()?;
    if !status.success() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("cannot mount a private tmpfs on {dir} inside the user namespace"),
        ));
    }
    Ok(())
}

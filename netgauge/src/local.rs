//! `--local`: run every requested mode between the two hosts of a virtual
//! cluster built for the run, and compare them in one table.
//!
//! For each mode a server (`netgauge -a`) starts in host A and a client
//! (`netgauge --json`) in host B; the client's JSON records are collected.
//! The cluster is a `vcluster::Cluster` of two hosts on a veth pair, removed
//! on exit, on error and on Ctrl-C/SIGTERM (exit status 130). Without root,
//! netgauge re-executes itself in a new user + network + mount namespace
//! (`vcluster::userns::reexec`), where it may build the cluster; where the
//! kernel forbids that, it says what is missing.

use std::io::{self, BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use vcluster::{Cluster, Process};

use crate::cli::{Args, Mode, Pattern};
use crate::report::{self, Record};

/// Runs `--local`. Returns every record, already printed.
pub fn run(args: &Args) -> io::Result<Vec<Record>> {
    if !vcluster::userns::can_build_directly() {
        // The re-executed netgauge printed everything; mirror its status.
        let status = vcluster::userns::reexec()?;
        std::process::exit(status.code().unwrap_or(1));
    }
    if args.pattern.is_multi_host() {
        crate::cluster::run(args)?;
        return Ok(Vec::new());
    }
    let vc = Cluster::builder("netgauge")
        .hosts(2)
        .mtu(args.mtu)
        .keep(args.keep)
        .build()?;
    let (a, b) = (vc.host(0), vc.host(1));
    let exe = std::env::current_exe()?;
    let exe = exe
        .to_str()
        .ok_or_else(|| io::Error::other("netgauge's path is not UTF-8"))?;
    let modes = args.resolve_modes();
    // --idle-procs: P-1 holding processes per host, for the whole run.
    let mut holders = crate::hold::Holders::default();
    if args.idle_procs > 1 {
        let extra = hold_args(args);
        for h in [a, b] {
            holders.spawn(
                args.idle_procs - 1,
                || {
                    let mut c = h.command(exe);
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
            a.ns, a.mac, a.ip, b.ns, b.mac, b.ip, vc.mtu(),
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
pub(crate) fn common_args(args: &Args, mode: Mode, port: u16) -> Vec<String> {
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

fn run_mode(
    args: &Args,
    vc: &Cluster,
    exe: &str,
    mode: Mode,
    port: u16,
) -> io::Result<Vec<Record>> {
    let (a, b) = (vc.host(0), vc.host(1));
    let common = common_args(args, mode, port);
    let mut server = a.command(exe);
    server
        .args(["-a", "--once"])
        .args(&common)
        .args(["-I", &a.iface]);
    server
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // Killed when dropped (an error path) and on Ctrl-C.
    let mut server = Process::spawn(&mut server)?;

    let remote = if mode.is_ethernet() {
        a.mac.to_string()
    } else {
        a.ip.to_string()
    };
    let mut client = b.command(exe);
    client
        .args(&common)
        .args(["-I", &b.iface, "-R", &remote, "--json"])
        .args(["-s", &format!("{}-{}", args.size.min, args.size.max)])
        .args(["-c", &args.count.to_string(), "-g", &args.grade.to_string()])
        .args(["--warmup", &args.warmup.to_string()]);
    client
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut client = Process::spawn(&mut client)?;

    let stdout = client.take_stdout().expect("piped stdout");
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
    let status = client.wait()?;
    let client_err = client.read_stderr();
    if !status.success() {
        let mut msg = format!("client failed ({status}): {}", client_err.trim());
        if server.wait_timeout(Duration::from_millis(100))?.is_none() {
            server.kill();
        }
        let e = server.read_stderr();
        if !e.trim().is_empty() {
            msg.push_str(&format!("; server: {}", e.trim()));
        }
        return Err(io::Error::other(msg));
    }
    // The server ends after the client's BYE; give it a moment, then stop it.
    let status = server.wait_timeout(Duration::from_secs(5))?;
    if status.is_none() {
        server.kill();
    }
    let server_err = server.read_stderr();
    match status {
        Some(st) if st.success() => {}
        Some(st) => {
            return Err(io::Error::other(format!(
                "server failed ({st}): {}",
                server_err.trim()
            )))
        }
        None => tracing::warn!("{} server did not exit after BYE; stopped it", mode.name()),
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

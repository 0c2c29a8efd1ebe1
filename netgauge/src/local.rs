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
use std::process::{Command, Stdio};
use std::time::Duration;

use vcluster::{Cluster, Process};

use std::path::PathBuf;

use crate::idle::IdleConfig;
use crate::modes::{Mode, Wait};
use crate::output as out;
use crate::patterns::Pattern;
use crate::report::{self, Failure, Record};
use crate::sweep::Sweep;
use crate::transport::LinkKind;

/// A `--local` run of two hosts, converted from the command line by `cli`.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The modes (run in order, alternated under `repeat`), the pattern
    /// (one_one or stream), the client's sizes (`-s`, `-g`) and the
    /// iterations per size.
    pub sweep: Sweep,
    /// First port; each session takes two of its own after it.
    pub port: u16,
    /// The veth pair's MTU, bytes.
    pub mtu: usize,
    /// Keep the namespaces after the run.
    pub keep: bool,
    /// Join the two hosts by a bridge instead of a veth pair (`--bridge`).
    pub bridge: bool,
    /// Our modes on AF_PACKET in a virtual cluster, or on UDP links on
    /// loopback.
    pub link: LinkKind,
    /// How our modes wait (for the header line and the holders).
    pub wait: Wait,
    /// Runs of the whole comparison.
    pub repeat: usize,
    /// Idle sockets per process, and processes per host.
    pub idle: IdleConfig,
    pub idle_procs: usize,
    /// Print JSON records instead of text; `verbose` > 0 adds the
    /// per-size lines and logs.
    pub json: bool,
    pub verbose: u8,
    /// Print the participants' host names first.
    pub hostnames: bool,
    /// Outputs: every sample (`-f`), CSV, netgauge's long form, charts.
    pub full_log: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub long_form: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    /// The options both ends of a session get after `-m -P -x` (see
    /// [`session_args`]).
    pub child_args: Vec<String>,
}

/// Prepares this process for a `--local` run over `link`: without the
/// privilege to build a virtual cluster, netgauge re-executes itself in a
/// new user + network + mount namespace and exits with its status (the
/// re-executed netgauge prints everything); otherwise Ctrl-C prints what
/// was measured. Errors: re-executing.
pub fn enter(link: LinkKind) -> io::Result<()> {
    if link != LinkKind::Udp && !vcluster::userns::can_build_directly() {
        // The re-executing parent keeps vcluster's handler, which forwards
        // the signal to the child and waits for it.
        let status = vcluster::userns::reexec()?;
        std::process::exit(status.code().unwrap_or(1));
    }
    if let Err(e) = crate::interrupt::install() {
        tracing::debug!("no Ctrl-C handler of netgauge's own: {e}");
    }
    Ok(())
}

/// Runs `--local` with two hosts (after [`enter`]). Returns every record,
/// already printed. Errors: see [`run_on`] (failed sizes, `Interrupted`,
/// `BrokenPipe`); building the cluster.
pub fn run(args: &LocalConfig) -> io::Result<Vec<Record>> {
    if args.link == LinkKind::Udp {
        return run_on(args, &Ends::Loopback);
    }
    let vc = Cluster::builder("netgauge")
        .hosts(2)
        .mtu(args.mtu)
        .topology(crate::cluster::topology(args.bridge))
        .keep(args.keep)
        .build()?;
    run_on(args, &Ends::Cluster(&vc))
}

/// Where `--local` runs its two ends.
enum Ends<'a> {
    /// Host 0 (server) and host 1 (client) of a virtual cluster.
    Cluster(&'a Cluster),
    /// `--link udp`: both ends as plain processes of this host on
    /// 127.0.0.1, no namespace and no privilege; our modes on UDP links
    /// (server port P, client port P+1), the kernel's on loopback.
    Loopback,
}

impl Ends<'_> {
    /// The server's and the client's command for `mode` on `port`.
    fn commands(&self, exe: &str, mode: Mode, port: u16) -> (Command, Command) {
        match self {
            Ends::Cluster(vc) => {
                let (a, b) = (vc.host(0), vc.host(1));
                let mut server = a.command(exe);
                server.args(["-I", &a.iface]);
                let remote = if mode.is_ethernet() {
                    a.mac.to_string()
                } else {
                    a.ip.to_string()
                };
                if mode == Mode::Eth {
                    // eth has no ports: the server serves this client only.
                    server.args(["-R", &b.mac.to_string()]);
                }
                let mut client = b.command(exe);
                client.args(["-I", &b.iface, "-R", &remote]);
                (server, client)
            }
            Ends::Loopback => {
                let mut server = Command::new(exe);
                let mut client = Command::new(exe);
                client.args(["-R", "127.0.0.1"]);
                if mode.is_ethernet() {
                    let (s, c) = (
                        format!("127.0.0.1:{port}"),
                        format!("127.0.0.1:{}", port.wrapping_add(1)),
                    );
                    server.args(["--link", "udp", "--link-bind", &s, "--link-peer", &c]);
                    client.args(["--link", "udp", "--link-bind", &c]);
                }
                (server, client)
            }
        }
    }
}

/// Runs every mode between `ends` and prints the records and the table.
///
/// A size that fails is reported in its cell and the run goes on with the
/// next size (in a new session) and the other modes; a mode whose sessions
/// fail twice in a row without a record is given up. Errors: a message
/// naming the failed sizes once everything was printed; `Interrupted`
/// after Ctrl-C (what was measured is printed first); `BrokenPipe` when
/// stdout closed.
fn run_on(args: &LocalConfig, ends: &Ends<'_>) -> io::Result<Vec<Record>> {
    let exe = std::env::current_exe()?;
    let exe = exe
        .to_str()
        .ok_or_else(|| io::Error::other("netgauge's path is not UTF-8"))?;
    let modes = args.sweep.modes.clone();
    // --idle-procs: P-1 holding processes per host, for the whole run.
    let mut holders = crate::hold::Holders::default();
    if let (true, Ends::Cluster(vc)) = (args.idle_procs > 1, ends) {
        let (a, b) = (vc.host(0), vc.host(1));
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
    if args.hostnames {
        out::print(&hostnames(ends))?;
    }
    if let Ends::Loopback = ends {
        let hosts = serde_json::json!([
            {"role": "server", "ip": "127.0.0.1", "udp_link": format!("127.0.0.1:{}", args.port), "link": "udp"},
            {"role": "client", "ip": "127.0.0.1", "udp_link": format!("127.0.0.1:{}", args.port.wrapping_add(1)), "link": "udp"},
        ]);
        if args.json {
            out::println(&crate::output::json::metadata(hosts, Some(args.mtu)).to_string())?;
        } else {
            out::println(&format!(
                "# netgauge --local --link udp: both ends on 127.0.0.1 without privilege; edp, esp, ctp-edp, comm-edp on UDP links \
                 (server UDP port P, client P+1; MTU {}), udp/tcp on loopback; pattern {}, {} iterations per size, wait {}",
                args.mtu,
                args.sweep.pattern.name(),
                args.sweep.count,
                args.wait.label()
            ))?;
        }
    }
    if let Ends::Cluster(vc) = ends {
        let (a, b) = (vc.host(0), vc.host(1));
        if args.json {
            let hosts = serde_json::json!([
                {"namespace": a.ns.to_string(), "mac": a.mac.to_string(), "ip": a.ip.to_string(), "interface": a.iface, "link": "packet"},
                {"namespace": b.ns.to_string(), "mac": b.mac.to_string(), "ip": b.ip.to_string(), "interface": b.iface, "link": "packet"},
            ]);
            out::println(&crate::output::json::metadata(hosts, Some(vc.mtu())).to_string())?;
        } else {
            out::println(&format!(
                "# netgauge --local: hosts {} ({}, {}) and {} ({}, {}), veth MTU {}, pattern {}, {} iterations per size, wait {}",
                a.ns, a.mac, a.ip, b.ns, b.mac, b.ip, vc.mtu(),
                args.sweep.pattern.name(), args.sweep.count, args.wait.label()
            ))?;
            if args.idle_procs > 1 || args.idle.edp > 0 || args.idle.esp > 0 {
                out::println(&format!(
                    "# per host: {} netgauge process(es) ({} holding one EDP socket and one ESP listener each); per process {} idle EDP sockets, {} idle ESP listeners",
                    args.idle_procs,
                    holders.count() / 2,
                    args.idle.edp,
                    args.idle.esp
                ))?;
            }
        }
    }
    if let Some(p) = &args.full_log {
        // The header; each mode's client appends its rows.
        crate::output::raw::RawLog::open(p, false)?;
    }
    let sizes = crate::sizes::size_steps(args.sweep.size, args.sweep.grade);
    let steps = sizes.len() * modes.len() * args.repeat;
    let progress = crate::output::progress::Progress::new(
        crate::output::progress::wanted(args.json),
        steps as u64,
    );
    let mut all = Vec::new();
    let mut failures: Vec<Failure> = Vec::new();
    let mut runs: Vec<Vec<Record>> = Vec::new();
    // Sessions started so far: each takes two ports of its own (the UDP
    // links of --link udp take P and P+1), so that a session never meets
    // an earlier one's socket.
    let mut sessions = 0usize;
    'runs: for rep in 0..args.repeat {
        // Alternate the order so that no mode always runs first (warm caches,
        // frequency scaling, neighbours' load).
        let order: Vec<Mode> = if rep % 2 == 0 {
            modes.clone()
        } else {
            modes.iter().rev().copied().collect()
        };
        let mut this_run = Vec::new();
        for mode in order {
            if crate::interrupt::requested() {
                break 'runs;
            }
            progress.running(&format!(
                "run {} of {}: {}",
                rep + 1,
                args.repeat,
                mode.name()
            ));
            let started = std::time::Instant::now();
            let (records, failed) =
                run_mode(args, ends, exe, mode, &sizes, &mut sessions, rep, &progress)?;
            if !args.json && !progress.shown() {
                progress.eprintln(&format!(
                    "netgauge: {}: {} of {} sizes measured in {:.1} s{}",
                    mode.name(),
                    records.len(),
                    sizes.len(),
                    started.elapsed().as_secs_f64(),
                    if failed.is_empty() {
                        String::new()
                    } else {
                        format!(", {} failed", failed.len())
                    }
                ));
            }
            this_run.extend(records.iter().cloned());
            all.extend(records);
            failures.extend(failed);
        }
        runs.push(this_run);
    }
    progress.finish();
    if !args.json {
        let shown = if args.repeat > 1 {
            report::median_over_runs(&runs, &modes.iter().map(|m| m.name()).collect::<Vec<_>>())
        } else {
            all.clone()
        };
        out::println("")?;
        if args.verbose > 0 {
            out::print(&report::comparison(&shown))?;
            out::println("")?;
        }
        if args.repeat > 1 {
            out::println(&format!(
                "# median over {} runs of each mode's p50 half round-trip and throughput",
                args.repeat
            ))?;
        }
        out::print(&crate::output::pivot::pivot(&shown, &failures))?;
        if crate::interrupt::requested() {
            out::println("# interrupted (Ctrl-C): the sizes and modes after the last result were not measured")?;
        }
    }
    if let Some(path) = &args.csv {
        crate::output::csv::write_runs(path, &runs)?;
    }
    if let Some(path) = &args.plot {
        let shown = if args.repeat > 1 {
            report::median_over_runs(&runs, &modes.iter().map(|m| m.name()).collect::<Vec<_>>())
        } else {
            all.clone()
        };
        crate::output::plot::plot(&shown, path)?;
    }
    if let Some(path) = &args.long_form {
        let mut f = std::fs::File::create(path)?;
        for mode in &modes {
            let rs: Vec<Record> = all
                .iter()
                .filter(|r| r.mode == mode.name())
                .cloned()
                .collect();
            if !rs.is_empty() {
                report::write_long_form(&mut f, &rs)?;
            }
        }
    }
    if crate::interrupt::requested() {
        return Err(crate::interrupt::error());
    }
    if !failures.is_empty() {
        return Err(io::Error::other(failure_summary(&failures, steps)));
    }
    Ok(all)
}

/// The error of a run with failed sizes: how many, and where.
pub(crate) fn failure_summary(failures: &[Failure], steps: usize) -> String {
    let mut by_mode: Vec<(&str, Vec<usize>)> = Vec::new();
    for f in failures {
        match by_mode.iter_mut().find(|(m, _)| *m == f.mode) {
            Some((_, v)) => v.push(f.size),
            None => by_mode.push((&f.mode, vec![f.size])),
        }
    }
    let list: Vec<String> = by_mode
        .iter()
        .map(|(m, sizes)| {
            if sizes.len() == 1 {
                format!("{m} at {} B", sizes[0])
            } else {
                format!(
                    "{m} at {} sizes ({} B and up)",
                    sizes.len(),
                    sizes.iter().min().unwrap_or(&0)
                )
            }
        })
        .collect();
    format!(
        "{} of {steps} measurements failed: {} (the tables mark them FAIL, with the reasons)",
        failures.len(),
        list.join(", ")
    )
}

/// Prints the records of run `run` as they come: JSON lines (with the
/// run index), or with -v netgauge's per-size lines.
fn print_records(
    args: &LocalConfig,
    records: &[Record],
    run: usize,
    progress: &crate::output::progress::Progress,
) -> io::Result<()> {
    for r in records {
        if args.json {
            progress.println(&crate::output::json::record_line(r, Some(run)))?;
        } else if args.verbose > 0 {
            progress.println(&format!(
                "{:<8} {}{}",
                r.mode,
                report::short_line(r),
                r.transport_stats
                    .as_deref()
                    .map(|s| format!("   [{s}]"))
                    .unwrap_or_default()
            ))?;
        }
    }
    Ok(())
}

/// The arguments both ends of a session of `mode` on `port` share:
/// `-m MODE -P PORT -x PATTERN` and `child_args`.
pub(crate) fn session_args(
    child_args: &[String],
    mode: Mode,
    pattern: Pattern,
    port: u16,
) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "-m".into(),
        mode.name().into(),
        "-P".into(),
        port.to_string(),
        "-x".into(),
        pattern.name().into(),
    ];
    v.extend(child_args.iter().cloned());
    v
}

/// The arguments of a holding process (`--idle-procs`): the session's
/// wait policy, hence its runtime configuration.
fn hold_args(args: &LocalConfig) -> Vec<String> {
    vec!["--wait".into(), args.wait.label()]
}

/// Runs `mode` over `sizes`: a session from the first size on, and after
/// a failure a new session from the size after the failed one. Prints the
/// records as they come (JSON, -v) and returns them with the failures.
/// Gives the mode up after two sessions in a row that failed without a
/// record (its remaining sizes fail with that reason), and stops at
/// Ctrl-C. Errors: only those of printing (`BrokenPipe`).
#[allow(clippy::too_many_arguments)]
fn run_mode(
    args: &LocalConfig,
    ends: &Ends<'_>,
    exe: &str,
    mode: Mode,
    sizes: &[usize],
    sessions: &mut usize,
    rep: usize,
    progress: &crate::output::progress::Progress,
) -> io::Result<(Vec<Record>, Vec<Failure>)> {
    let mut records: Vec<Record> = Vec::new();
    let mut failures: Vec<Failure> = Vec::new();
    let fail = |size: usize, error: String| Failure {
        mode: mode.name().into(),
        pattern: args.sweep.pattern.name().into(),
        size,
        error,
    };
    let mut next = 0;
    let mut empty_failures = 0;
    while next < sizes.len() && !crate::interrupt::requested() {
        // Two ports a session: the UDP links of --link udp take P and P+1.
        let port = args.port.wrapping_add((2 * (*sessions % 1000)) as u16);
        *sessions += 1;
        let (mut got, error) = session(args, ends, exe, mode, port, &sizes[next..], progress);
        for r in &mut got {
            r.procs_per_host = args.idle_procs;
        }
        print_records(args, &got, rep, progress)?;
        next += got.len();
        let measured = !got.is_empty();
        records.extend(got);
        let Some(error) = error else { continue };
        if crate::interrupt::requested() {
            break;
        }
        // The size the session was at; a session that failed after its last
        // size (BYE, the server's exit) blames the last one.
        let size = sizes[next.min(sizes.len() - 1)];
        let f = fail(size, error);
        if args.json {
            progress.println(&serde_json::json!({ "failure": &f, "run": rep }).to_string())?;
        } else if args.verbose > 0 {
            progress.println(&format!(
                "{:<8} {size} bytes \t -> FAILED: {}",
                f.mode, f.error
            ))?;
        }
        tracing::debug!(mode = mode.name(), size, "{}", f.error);
        failures.push(f);
        next += 1;
        empty_failures = if measured { 1 } else { empty_failures + 1 };
        if empty_failures >= 2 && next < sizes.len() {
            let why = format!(
                "not run: the mode's last two sessions failed without a result (see the sizes before {})",
                sizes[next]
            );
            failures.extend(sizes[next..].iter().map(|&s| fail(s, why.clone())));
            break;
        }
    }
    Ok((records, failures))
}

/// One session of `mode` on `port` over `sizes` (a server in one end, a
/// client in the other): the records the client reported, and what went
/// wrong if the session did not complete them all.
fn session(
    args: &LocalConfig,
    ends: &Ends<'_>,
    exe: &str,
    mode: Mode,
    port: u16,
    sizes: &[usize],
    progress: &crate::output::progress::Progress,
) -> (Vec<Record>, Option<String>) {
    let mut records = Vec::new();
    let error = session_into(args, ends, exe, mode, port, sizes, progress, &mut records).err();
    let error = match error {
        Some(e) => Some(e.to_string()),
        None if records.len() != sizes.len() => Some(format!(
            "the client reported {} of {} sizes",
            records.len(),
            sizes.len()
        )),
        None if args.sweep.pattern == Pattern::OneOne
            && records.iter().any(|r| r.lat_us.is_none()) =>
        {
            Some("a one_one record without latency".into())
        }
        None => None,
    };
    (records, error)
}

#[allow(clippy::too_many_arguments)]
fn session_into(
    args: &LocalConfig,
    ends: &Ends<'_>,
    exe: &str,
    mode: Mode,
    port: u16,
    sizes: &[usize],
    progress: &crate::output::progress::Progress,
    records: &mut Vec<Record>,
) -> io::Result<()> {
    let common = session_args(&args.child_args, mode, args.sweep.pattern, port);
    let (mut server, mut client) = ends.commands(exe, mode, port);
    server.args(["-a", "--once"]).args(&common);
    server
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // Killed when dropped (an error path), on Ctrl-C, and by the cluster's
    // removal.
    let mut server = Process::spawn(&mut server)?;
    let _server_tracked = crate::interrupt::Tracked::new(server.id());
    let server_stderr = drain_stderr(&mut server);

    let (first, last) = (sizes[0], sizes[sizes.len() - 1]);
    client
        .args(&common)
        .arg("--json")
        .args(["-s", &format!("{first}-{last}")])
        .args([
            "-c",
            &args.sweep.count.to_string(),
            "-g",
            &args.sweep.grade.to_string(),
        ])
        .args(["--warmup", &args.sweep.warmup.to_string()]);
    client
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut client = Process::spawn(&mut client)?;
    let _client_tracked = crate::interrupt::Tracked::new(client.id());
    let client_stderr = drain_stderr(&mut client);

    let stdout = client.take_stdout().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line.trim_start().starts_with('{') {
            let bad = |e: serde_json::Error| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("client printed bad JSON {line:?}: {e}"),
                )
            };
            let v: serde_json::Value = serde_json::from_str(&line).map_err(bad)?;
            // The client's own header: --local prints its own.
            if !crate::output::json::is_metadata(&v) {
                let r: Record = serde_json::from_value(v).map_err(bad)?;
                progress.step_done(&r);
                records.push(r);
            }
        }
    }
    let status = client.wait()?;
    let client_err = client_stderr.join();
    if !status.success() {
        let mut msg = format!("client failed ({status}): {}", last_words(&client_err));
        if server.wait_timeout(Duration::from_millis(100))?.is_none() {
            server.kill();
        }
        let e = server_stderr.join();
        if !e.trim().is_empty() {
            msg.push_str(&format!("; server: {}", last_words(&e)));
        }
        return Err(io::Error::other(msg));
    }
    // The server ends after the client's BYE; give it a moment, then stop it.
    let status = server.wait_timeout(Duration::from_secs(5))?;
    if status.is_none() {
        server.kill();
    }
    let server_err = server_stderr.join();
    if args.verbose > 0 {
        for (end, err) in [("server", &server_err), ("client", &client_err)] {
            if !err.trim().is_empty() {
                eprintln!("# {} {end}'s log:\n{}", mode.name(), err.trim_end());
            }
        }
    }
    match status {
        Some(st) if st.success() => Ok(()),
        Some(st) => Err(io::Error::other(format!(
            "server failed ({st}): {}",
            last_words(&server_err)
        ))),
        None => {
            tracing::warn!("{} server did not exit after BYE; stopped it", mode.name());
            Ok(())
        }
    }
}

/// The error a failed child printed last (its `netgauge: ...` line), not
/// its whole log (-v shows that).
fn last_words(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    match lines
        .iter()
        .rev()
        .find(|l| l.starts_with("netgauge") || l.contains("panicked"))
    {
        Some(l) => l.trim().to_string(),
        None => lines
            .last()
            .map(|l| l.trim().to_string())
            .unwrap_or_default(),
    }
}

/// A child's piped stderr, read on a thread of its own while the child runs:
/// a child that writes more than the pipe holds (64 KiB; `-v` prints a line
/// per step) would otherwise block in write(2) until the run ends, and its
/// peer time out.
struct StderrDrain(Option<std::thread::JoinHandle<String>>);

impl StderrDrain {
    /// Everything the child wrote to stderr, once its stderr closed (the
    /// child exited or was killed); empty when not piped.
    fn join(self) -> String {
        self.0.and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

/// Starts reading `p`'s piped stderr (see [`StderrDrain`]).
fn drain_stderr(p: &mut Process) -> StderrDrain {
    StderrDrain(p.child_mut().stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = Vec::new();
            let _ = e.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    }))
}

/// `--hostnames`: one line per end, netgauge's `--hostnames` listing
/// (rank, host name, address) for the two ends of `--local`.
fn hostnames(ends: &Ends<'_>) -> String {
    let me = crate::output::hostname();
    match ends {
        Ends::Cluster(vc) => (0..2)
            .map(|r| {
                let h = vc.host(r);
                format!(
                    "# rank {r} ({}): host {me}, namespace {}, {} {} {}\n",
                    if r == 0 { "server" } else { "client" },
                    h.ns,
                    h.iface,
                    h.mac,
                    h.ip
                )
            })
            .collect(),
        Ends::Loopback => format!(
            "# rank 0 (server): host {me}, 127.0.0.1\n# rank 1 (client): host {me}, 127.0.0.1\n"
        ),
    }
}

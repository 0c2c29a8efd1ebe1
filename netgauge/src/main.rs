//! netgauge: measures half round-trip latency and throughput of EDP, ESP,
//! CTP and kernel UDP/TCP on the same Ethernet link, with spcl/netgauge's
//! command line and output conventions. See README.md.
#![forbid(unsafe_code)]

mod cli;
mod cluster;
mod control;
mod cpu;
mod flood;
mod hold;
mod hostlist;
mod idle;
mod interrupt;
mod local;
mod mcast;
mod modes;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "mpi")]
mod mpi_launch;
mod output;
mod patterns;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod reach;
mod report;
mod run;
mod sizes;
mod stats;
mod sweep;
mod transport;

use std::process::ExitCode;

use clap::Parser;

use cli::Args;

mod privilege {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Sessions of the run that still have to open their sockets.
    static SESSIONS_TO_OPEN: AtomicUsize = AtomicUsize::new(0);

    /// Announces that the run opens `n` sessions one after the other (one
    /// per mode): capabilities are kept until the last one is open.
    pub fn expect_sessions(n: usize) {
        SESSIONS_TO_OPEN.store(n, Ordering::SeqCst);
    }

    /// Called once a session's sockets are open: drops every capability
    /// (link::privilege) when it was the last session of the run, since the
    /// benchmark needs no privilege after that; keeps them while later modes
    /// still have packet sockets to open.
    pub fn drop_after_open() {
        let left = SESSIONS_TO_OPEN
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            })
            .unwrap_or(0)
            .saturating_sub(1);
        if left > 0 {
            return;
        }
        if let Err(e) = link::drop_capabilities() {
            tracing::debug!("could not drop capabilities: {e}");
        }
    }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("plot") {
        let cmd = output::plot::PlotCmd::parse_from(std::env::args().skip(1));
        return match cmd.run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("netgauge plot: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if std::env::args().nth(1).as_deref() == Some("flood") {
        let cmd = flood::FloodCmd::parse_from(std::env::args().skip(1));
        return match cmd.run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("netgauge flood: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut args = Args::parse();
    match args.apply_max_count() {
        Ok(Some(note)) => eprintln!("{note}"),
        Ok(None) => {}
        Err(msg) => {
            eprintln!("netgauge: {msg}");
            return ExitCode::from(2);
        }
    }
    // RUST_LOG (e.g. `RUST_LOG=edp=debug,esp=trace`), else the level of
    // -v/-vv/-vvv (warn without), on stderr so the results on stdout stay
    // clean.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(args.log_level())),
        )
        .with_writer(std::io::stderr)
        .init();
    if args.man_page {
        return match cli::write_man_page(&mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("netgauge: writing the man page: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(msg) = args.validate() {
        eprintln!("netgauge: {msg}");
        return ExitCode::from(2);
    }
    match run_main(&args) {
        Ok(()) => ExitCode::SUCCESS,
        // Ctrl-C: what was measured is printed; the shell's code for it.
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted && interrupt::requested() => {
            ExitCode::from(130)
        }
        // The reader of stdout went away (`| head`): end quietly, as a
        // program killed by SIGPIPE would (128 + 13).
        Err(_) if output::stdout_closed() => ExitCode::from(141),
        Err(e) => {
            eprintln!("netgauge: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_main(args: &Args) -> std::io::Result<()> {
    if args.hold {
        return hold::hold(&args.session(modes::Mode::Edp));
    }
    if args.is_mcast() {
        return match mcast::run(&args.mcast_config())? {
            true => Ok(()),
            false => Err(std::io::Error::other(
                "some multicast runs did not complete (see the counters)",
            )),
        };
    }
    #[cfg(feature = "mpi")]
    {
        if args.mpi {
            return mpi::rank_main(&args.rank_config());
        }
        if args.mpirun || args.srun {
            return mpi_launch::run(&args.launch_config());
        }
    }
    if args.local {
        local::enter(args.link)?;
        if args.pattern.is_multi_host() {
            cluster::run(&args.cluster_config())?;
        } else {
            local::run(&args.local_config())?;
        }
        return Ok(());
    }
    let modes = args.resolve_modes();
    privilege::expect_sessions(modes.len());
    if args.hostnames {
        let me = output::hostname();
        if args.server {
            output::println(&format!("# server: host {me}"))?;
        } else {
            output::println(&format!(
                "# client: host {me}; server: {} (its host name is printed by the server's --hostnames)",
                args.remote.as_deref().unwrap_or("?")
            ))?;
        }
    }
    if args.server {
        let sessions: Vec<_> = modes.iter().map(|&m| args.session(m)).collect();
        return hostlist::serve(&args.serve_config(), &args.run_config(), &sessions);
    }
    let mut long_form = match args.long_form_path() {
        Some(path) => Some(std::fs::File::create(path)?),
        None => None,
    };
    if args.json {
        let mtu = args.iface.as_deref().and_then(|i| {
            std::fs::read_to_string(format!("/sys/class/net/{i}/mtu"))
                .ok()
                .and_then(|m| m.trim().parse::<usize>().ok())
        });
        let hosts = serde_json::json!([
            {"role": "client", "interface": args.iface},
            {"role": "server", "remote": args.remote, "remote_ip": args.remote_ip},
        ]);
        output::println(&output::json::metadata(hosts, mtu).to_string())?;
    }
    let mut all = Vec::new();
    let progress = output::progress::Progress::new(
        output::progress::wanted(args.json),
        (sizes::size_steps(args.size(), args.grade).len() * modes.len()) as u64,
    );
    let run_config = args.run_config();
    for &mode in &modes {
        progress.running(mode.name());
        // The first error printing a record (stdout closed) ends the run
        // once the session is over.
        let mut printed = Ok(());
        let records = run::client(&run_config, &args.session(mode), &mut |r| {
            progress.step_done(r);
            let line = if args.json {
                serde_json::to_string(r).expect("records serialize")
            } else {
                match &r.transport_stats {
                    Some(s) => format!("{}\n# {s}", report::short_line(r)),
                    None => report::short_line(r),
                }
            };
            if printed.is_ok() {
                printed = progress.println(&line);
            }
        })
        .map_err(|e| with_mode(e, mode))?;
        printed?;
        if !args.json {
            progress.println(&format!("\n{}", report::table(&records).trim_end()))?;
        }
        if let Some(f) = &mut long_form {
            report::write_long_form(f, &records)?;
        }
        all.extend(records);
    }
    progress.finish();
    if let Some(path) = &args.plot {
        output::plot::plot(&all, path)?;
    }
    if let Some(path) = args.csv_path() {
        output::csv::write_runs(path, &[all])?;
    }
    Ok(())
}

fn with_mode(e: std::io::Error, mode: modes::Mode) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("mode {}: {e}", mode.name()))
}

//! `clusternetd`: the host's responder while no application runs (issue
//! 13, break 5; thesis ch. 6.3 reachability discovery).
//!
//! On each interface given with `-i`, it opens the stack's runtime (one
//! packet socket) and takes the host responder role: EDP echo replies on
//! the control port, ESP RSTs for segments to ports no process holds
//! (`runtime::responder`). The role goes with the *control lease*
//! (port 0 of each ethertype): while the daemon holds it, applications'
//! runtimes leave answering to it; when it stops, the next runtime takes
//! the lease within a second (and back). Its kernel filter passes only
//! echo requests and segments to ports nobody holds, so the daemon sleeps
//! while applications talk.
//!
//! It needs CAP_NET_RAW only to open its sockets, and drops every
//! capability right after. Frame authentication follows the environment
//! (`CLUSTERNET_KEY_FILE`, see `runtime::auth`), never the command line.
//! SIGINT/SIGTERM end it cleanly. Install: `scripts/install-clusternetd.sh`
//! (systemd unit `clusternetd/clusternetd.service`).

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use clap::Parser;
use runtime::{Runtime, RuntimeConfig};

/// Command line.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Answers EDP echo and ESP RSTs for the host while no application runs"
)]
struct Args {
    /// Interface to serve (repeat for several).
    #[arg(short, long = "iface", required = true)]
    ifaces: Vec<String>,
    /// Log the counters every this many seconds (0 = never).
    #[arg(long, default_value_t = 60)]
    stats_every: u64,
    /// Print READY on stdout once every interface is served (for tests
    /// and supervisors).
    #[arg(long)]
    ready: bool,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut runtimes = Vec::new();
    for iface in &args.ifaces {
        match Runtime::shared(iface, &RuntimeConfig::default()) {
            Ok(rt) => {
                esp::serve_resets(&rt);
                runtimes.push((iface.clone(), rt));
            }
            Err(e) => {
                eprintln!("clusternetd: cannot serve {iface}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Err(e) = link::drop_capabilities() {
        tracing::warn!(error = %e, "could not drop capabilities");
    }
    let (stop_tx, stop_rx) = mpsc::channel();
    if let Err(e) = ctrlc::set_handler(move || {
        let _ = stop_tx.send(());
    }) {
        eprintln!("clusternetd: cannot install the signal handler: {e}");
        return ExitCode::FAILURE;
    }
    for (iface, rt) in &runtimes {
        tracing::info!(
            iface,
            mac = %rt.mac(),
            echo = rt.holds_echo_lease(),
            rst = rt.holds_rst_lease(),
            "serving (a role another process holds is taken over when it ends)"
        );
    }
    if args.ready {
        println!("READY");
    }
    let every = match args.stats_every {
        0 => Duration::MAX,
        s => Duration::from_secs(s),
    };
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(every) {
        for (iface, rt) in &runtimes {
            let s = rt.stats();
            tracing::info!(
                iface,
                echo = rt.holds_echo_lease(),
                rst = rt.holds_rst_lease(),
                echo_replies = s.responder.echo_replies,
                resets = s.responder.resets,
                rate_limited = s.responder.rate_limited,
                malformed = s.malformed,
                bad_source = s.bad_source,
                auth_failures = s.auth.failures(),
                "counters"
            );
        }
    }
    tracing::info!("stopping");
    ExitCode::SUCCESS
}

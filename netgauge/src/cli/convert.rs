//! The command line converted into each feature's configuration: the
//! sessions (`transport::SessionConfig`, `run::RunConfig`), the server
//! (`hostlist::ServeConfig`), `--local` (`local::LocalConfig`), the
//! multi-host patterns (`cluster::ClusterConfig`), MPI (`mpi`), the
//! multicast modes (`mcast::McastConfig`), and the options a child
//! netgauge gets.

use std::time::Duration;

use runtime::WaitPolicy;

use super::{Args, ModeArg, MAX_COUNT_ENV};
use crate::cluster::ClusterConfig;
use crate::hostlist::ServeConfig;
use crate::idle::IdleConfig;
use crate::local::LocalConfig;
use crate::mcast::{McastConfig, McastMode};
use crate::modes::{Mode, Wait};
use crate::run::RunConfig;
use crate::sizes::{size_steps, SizeRange};
use crate::sweep::Sweep;
use crate::transport::udp_link::{resolve, UdpLinkSpec};
use crate::transport::{LinkKind, SessionConfig};

/// `--timeout` of the two-host and multi-host runs, seconds.
const TIMEOUT_S: f64 = 10.0;

/// `--timeout` of the multicast modes, seconds: a bound of each run.
const MCAST_TIMEOUT_S: f64 = 60.0;

impl Args {
    /// Seconds without progress before a session is abandoned (`--timeout`).
    pub fn timeout_s(&self) -> f64 {
        self.timeout_s.unwrap_or(TIMEOUT_S)
    }

    /// The size range: `-s`, else 1-65536 (1024 for the multicast modes).
    pub fn size(&self) -> SizeRange {
        self.size.unwrap_or(if self.is_mcast() {
            SizeRange {
                min: 1024,
                max: 1024,
            }
        } else {
            SizeRange { min: 1, max: 65536 }
        })
    }

    /// Hosts of the virtual cluster (`--hosts`; the last of a list).
    pub fn hosts(&self) -> usize {
        self.hosts_list.last().copied().unwrap_or(2)
    }

    /// Whether `-m` names a multicast mode.
    pub fn is_mcast(&self) -> bool {
        self.modes.iter().any(|m| matches!(m, ModeArg::Mcast(_)))
    }

    /// The multicast modes of `-m`, in order, without duplicates; `esp`
    /// among them is the 1 -> 1 ESP reference stream.
    pub fn mcast_modes(&self) -> Vec<McastMode> {
        let mut out = Vec::new();
        for m in &self.modes {
            let m = match m {
                ModeArg::Mcast(m) => *m,
                ModeArg::One(Mode::Esp) => McastMode::Esp,
                _ => continue,
            };
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }

    /// The multicast run of these options (see [`Args::validate`] first).
    pub fn mcast_config(&self) -> McastConfig {
        McastConfig {
            modes: self.mcast_modes(),
            carriers: self.carrier.clone(),
            receivers: self.hosts_list.iter().map(|h| h - 1).collect(),
            sizes: size_steps(self.size(), self.grade),
            count: self.count,
            measure: self.measure.clone(),
            mtu: self.mtu,
            loss: self.loss / 100.0,
            window: self.window,
            nak_window: self.nak_window,
            nak_linger: Duration::from_millis(self.nak_linger_ms),
            tw: Duration::from_micros(self.tw_us),
            dmax: Duration::from_micros(self.dmax_us),
            wait: self.wait().0,
            pace: self.pace,
            verify: self.verify,
            norm_rate_mbps: self.norm_rate_mbps,
            timeout: Duration::from_secs_f64(self.timeout_s.unwrap_or(MCAST_TIMEOUT_S)),
            json: self.json,
            csv: self.csv_path().map(Into::into),
            plot: self.plot.clone(),
        }
    }

    /// Where to write CSV: `--csv FILE`, or `-o FILE` ending in `.csv`.
    pub fn csv_path(&self) -> Option<&std::path::Path> {
        self.csv.as_deref().or(self
            .output
            .as_deref()
            .filter(|p| crate::output::csv::is_csv_path(p)))
    }

    /// Where to write netgauge's long form: `-o FILE` not ending in `.csv`.
    pub fn long_form_path(&self) -> Option<&std::path::Path> {
        self.output
            .as_deref()
            .filter(|p| !crate::output::csv::is_csv_path(p))
    }

    /// The tracing filter of `-v` repetitions: warn, info, debug, trace.
    pub fn log_level(&self) -> &'static str {
        match self.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    }

    /// The concrete modes to run, in `--local` order, without duplicates.
    ///
    /// `ctp` resolves to ctp-edp when `-R` parses as a MAC, else ctp-udp;
    /// with `--local` it means both; `comm` likewise.
    pub fn resolve_modes(&self) -> Vec<Mode> {
        let remote_is_mac = self
            .remote
            .as_deref()
            .is_some_and(|r| r.parse::<edp::MacAddr>().is_ok());
        let mut out: Vec<Mode> = Vec::new();
        let mut push = |m: Mode| {
            if !out.contains(&m) {
                out.push(m)
            }
        };
        // udp-bp and tcp-bp are the fair kernel comparison when our side
        // spins; without spinning they are left out of the default list.
        let spins = self.wait().spins();
        let all = Mode::ALL
            .into_iter()
            .filter(move |m| spins || !m.is_kernel_busy_poll());
        if self.modes.is_empty() {
            if self.local {
                all.clone().for_each(&mut push);
            } else {
                push(Mode::Edp);
            }
        }
        for m in &self.modes {
            match m {
                ModeArg::One(m) => push(*m),
                ModeArg::All => all.clone().for_each(&mut push),
                ModeArg::Ctp if self.local => {
                    push(Mode::CtpUdp);
                    push(Mode::CtpEdp)
                }
                ModeArg::Ctp if remote_is_mac => push(Mode::CtpEdp),
                ModeArg::Ctp => push(Mode::CtpUdp),
                ModeArg::Comm if self.local => {
                    push(Mode::CommUdp);
                    push(Mode::CommEdp)
                }
                ModeArg::Comm if remote_is_mac => push(Mode::CommEdp),
                ModeArg::Comm => push(Mode::CommUdp),
                ModeArg::Mcast(_) => {}
            }
        }
        out
    }

    /// How our modes wait: `--wait`, `--busy-poll` (busy), or the
    /// runtime's default (adaptive, 50 us).
    pub fn wait(&self) -> Wait {
        if self.busy_poll {
            return Wait(WaitPolicy::BusyPoll);
        }
        self.wait.unwrap_or(Wait(WaitPolicy::DEFAULT))
    }

    /// The fault injection configured by --loss/--dup/--reorder (percent),
    /// or None if no fault is asked for.
    pub fn fault(&self) -> Option<link::fault::FaultConfig> {
        if self.loss <= 0.0 && self.dup <= 0.0 && self.reorder <= 0.0 {
            return None;
        }
        Some(link::fault::FaultConfig {
            loss: self.loss / 100.0,
            duplicate: self.dup / 100.0,
            reorder: self.reorder / 100.0,
            reorder_delay: std::time::Duration::from_micros(50),
            seed: self.seed,
            ..Default::default()
        })
    }

    /// Applies [`MAX_COUNT_ENV`]: caps -c and --warmup at its value, for
    /// runs that must be short (CI runs the README's commands so) without
    /// changing the command. Returns the note to print when it changed
    /// anything. Errors: a value that is not a count of at least 1.
    pub fn apply_max_count(&mut self) -> Result<Option<String>, String> {
        let Ok(v) = std::env::var(MAX_COUNT_ENV) else {
            return Ok(None);
        };
        let max: usize = v
            .trim()
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("{MAX_COUNT_ENV}={v:?}: expected a count of at least 1"))?;
        if self.count <= max && self.warmup <= max {
            return Ok(None);
        }
        let note = format!(
            "netgauge: {MAX_COUNT_ENV}={max}: -c {} and --warmup {} capped at {max}",
            self.count, self.warmup
        );
        self.count = self.count.min(max);
        self.warmup = self.warmup.min(max);
        Ok(Some(note))
    }

    /// The measurement plan of this process's sessions.
    pub fn run_config(&self) -> RunConfig {
        RunConfig {
            pattern: self.pattern,
            size: self.size(),
            grade: self.grade,
            count: self.count,
            warmup: self.warmup,
            time_limit: self.time_limit_s.map(Duration::from_secs_f64),
            full_log: self.full_log.clone(),
            full_log_append: self.full_log_append,
            idle: self.idle(),
            start_at_ms: self.start_at_ms,
            verbose: self.verbose > 0,
        }
    }

    /// Idle sockets per process.
    pub fn idle(&self) -> IdleConfig {
        IdleConfig {
            edp: self.idle_edp,
            esp: self.idle_esp,
        }
    }

    /// The server of `-a`.
    pub fn serve_config(&self) -> ServeConfig {
        ServeConfig {
            port: self.port,
            once: self.once,
            iface: self.iface.clone(),
            eth_type: self.eth_type,
            link: self.link,
            link_peers: self.link_peers.clone(),
        }
    }

    /// What `--local` sweeps, with two hosts or more.
    pub fn sweep(&self) -> Sweep {
        Sweep {
            modes: self.resolve_modes(),
            pattern: self.pattern,
            size: self.size(),
            grade: self.grade,
            count: self.count,
            warmup: self.warmup,
        }
    }

    /// `--local` with two hosts.
    pub fn local_config(&self) -> LocalConfig {
        LocalConfig {
            sweep: self.sweep(),
            port: self.port,
            mtu: self.mtu,
            keep: self.keep,
            bridge: self.bridge,
            link: self.link,
            wait: self.wait(),
            repeat: self.repeat,
            idle: self.idle(),
            idle_procs: self.idle_procs,
            json: self.json,
            verbose: self.verbose,
            hostnames: self.hostnames,
            full_log: self.full_log.clone(),
            csv: self.csv_path().map(Into::into),
            long_form: self.long_form_path().map(Into::into),
            plot: self.plot.clone(),
            child_args: self.child_args(),
        }
    }

    /// `--local --hosts N` with a multi-host pattern.
    pub fn cluster_config(&self) -> ClusterConfig {
        ClusterConfig {
            hosts: self.hosts(),
            sweep: self.sweep(),
            seed: self.seed,
            port: self.port,
            eth_type: self.eth_type,
            mtu: self.mtu,
            keep: self.keep,
            bridge: self.bridge,
            json: self.json,
            verbose: self.verbose,
            hostnames: self.hostnames,
            wait: self.wait(),
            child_args: self.child_args(),
        }
    }

    /// `--local --hosts N --mpirun|--srun`.
    #[cfg(feature = "mpi")]
    pub fn launch_config(&self) -> crate::mpi_launch::LaunchConfig {
        crate::mpi_launch::LaunchConfig {
            hosts: self.hosts(),
            mtu: self.mtu,
            keep: self.keep,
            srun: self.srun,
            json: self.json,
            anchor: self.anchor.clone(),
            count: self.count,
            max_size: self.size().max,
            rank_args: self.rank_args(),
        }
    }

    /// One rank of `--mpi`.
    #[cfg(feature = "mpi")]
    pub fn rank_config(&self) -> crate::mpi::RankConfig {
        crate::mpi::RankConfig {
            rank_netns: self.rank_netns.clone(),
            iface: self.iface.clone(),
            hostnames: self.hostnames,
            echo_attempts: self.echo_attempts,
            echo_timeout: Duration::from_millis(self.echo_timeout_ms),
            json: self.json,
            verbose: self.verbose,
            pattern: self.pattern,
            seed: self.seed,
            port: self.port,
            run: self.run_config(),
            sessions: self
                .resolve_modes()
                .into_iter()
                .map(|m| self.session(m))
                .collect(),
        }
    }

    /// The session parameters of `mode` (the modes' configuration).
    pub fn session(&self, mode: Mode) -> SessionConfig {
        let args = self;
        let remote = if mode.is_ethernet() {
            args.remote.clone()
        } else {
            args.remote_ip.clone().or_else(|| args.remote.clone())
        };
        SessionConfig {
            mode,
            iface: args.iface.clone(),
            remote,
            port: args.port,
            wait_policy: args.wait().0,
            fault: args.fault(),
            timeout: Duration::from_secs_f64(args.timeout_s()),
            udp_link: args.udp_link_spec(),
            mtu: args.mtu,
            esp_checksum: args.esp_checksum,
            eth_type: args.eth_type,
            user_timeout: args.user_timeout.map(|u| u.0),
        }
    }

    /// `--link udp`: the UDP link of this end (see `transport::udp_link`); the
    /// remote or a peer that does not resolve leaves it out of the table, and
    /// the session's socket then reports the bad -R / --link-peer.
    fn udp_link_spec(&self) -> Option<UdpLinkSpec> {
        let args = self;
        if args.link != LinkKind::Udp {
            return None;
        }
        let (default_port, peers) = if args.server {
            let peers = args
                .link_peers
                .iter()
                .filter_map(|p| resolve(p, args.port.wrapping_add(1), "--link-peer").ok())
                .collect();
            (args.port, peers)
        } else {
            let peers = args
                .remote
                .as_deref()
                .and_then(|r| resolve(r, args.port, "-R").ok())
                .into_iter()
                .collect();
            (args.port.wrapping_add(1), peers)
        };
        Some(UdpLinkSpec {
            bind: args
                .link_bind
                .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], default_port))),
            peers,
        })
    }

    /// The options both ends of a `--local` session get after `-m -P -x`
    /// (see [`crate::local::session_args`]): the session's timeouts, seed,
    /// wait policy, checksum, idle sockets, logs, time limit, verbosity
    /// and faults.
    fn child_args(&self) -> Vec<String> {
        let args = self;
        let mut v: Vec<String> = vec![
            "--timeout".into(),
            args.timeout_s().to_string(),
            "--seed".into(),
            args.seed.to_string(),
        ];
        v.push("--wait".into());
        v.push(args.wait().label());
        if args.esp_checksum != ::esp::Checksum::Auto {
            v.push("--esp-checksum".into());
            v.push(args.esp_checksum.to_string());
        }
        if let Some(u) = args.user_timeout {
            v.push("--user-timeout".into());
            v.push(u.to_string());
        }
        for (flag, n) in [("--idle-edp", args.idle_edp), ("--idle-esp", args.idle_esp)] {
            if n > 0 {
                v.push(flag.into());
                v.push(n.to_string());
            }
        }
        if let Some(p) = &args.full_log {
            v.push("-f".into());
            let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
            v.push(abs.display().to_string());
            v.push("--full-log-append".into());
        }
        if let Some(t) = args.time_limit_s {
            v.push("-t".into());
            v.push(t.to_string());
        }
        for _ in 0..args.verbose {
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

    /// The rank arguments: everything of the run but the launch options
    /// and `--json`.
    #[cfg(feature = "mpi")]
    fn rank_args(&self) -> Vec<String> {
        let args = self;
        let modes: Vec<&str> = args.resolve_modes().iter().map(|m| m.name()).collect();
        let mut v: Vec<String> = vec![
            "--mpi".into(),
            "-m".into(),
            modes.join(","),
            "-x".into(),
            args.pattern.name().into(),
            "-s".into(),
            format!("{}-{}", args.size().min, args.size().max),
            "-g".into(),
            args.grade.to_string(),
            "-c".into(),
            args.count.to_string(),
            "--warmup".into(),
            args.warmup.to_string(),
            "-P".into(),
            args.port.to_string(),
            "--timeout".into(),
            args.timeout_s().to_string(),
            "--seed".into(),
            args.seed.to_string(),
            "--wait".into(),
            args.wait().label(),
            "--echo-attempts".into(),
            args.echo_attempts.to_string(),
            "--echo-timeout-ms".into(),
            args.echo_timeout_ms.to_string(),
        ];
        if let Some(i) = &args.iface {
            v.extend(["-I".into(), i.clone()]);
        }
        for (flag, p) in [
            ("--loss", args.loss),
            ("--dup", args.dup),
            ("--reorder", args.reorder),
        ] {
            if p > 0.0 {
                v.extend([flag.into(), p.to_string()]);
            }
        }
        v
    }
}

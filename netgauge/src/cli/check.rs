//! Checks of combinations of options that clap cannot express, each
//! failing with a message that names the fix.

use runtime::WaitPolicy;

use super::{Args, ModeArg, MIN_MTU};
use crate::mcast;
use crate::modes::Mode;
use crate::patterns::Pattern;
use crate::transport::LinkKind;

impl Args {
    /// Checks the options of a multicast run. Returns a message for the
    /// user.
    fn validate_mcast(&self) -> Result<(), String> {
        let others: Vec<String> = self
            .modes
            .iter()
            .filter_map(|m| match m {
                ModeArg::Mcast(_) | ModeArg::One(Mode::Esp) => None,
                ModeArg::One(m) => Some(m.name().to_string()),
                ModeArg::Ctp => Some("ctp".into()),
                ModeArg::Comm => Some("comm".into()),
                ModeArg::All => Some("all".into()),
            })
            .collect();
        if !others.is_empty() {
            return Err(format!(
                "-m {}: the multicast modes (mak, mak-ack, mak-nak, mak-iter, norm, raw) run on their own; \
                 measure {} in a separate run",
                self.modes_text(),
                others.join(", ")
            ));
        }
        if self.pattern != Pattern::OneToN {
            return Err(format!(
                "-x {}: the multicast modes run pattern 1toN (host 0 sends to every other host): use -x 1toN",
                self.pattern.name()
            ));
        }
        let max = mcast::MAX_RECEIVERS + 1;
        if let Some(h) = self.hosts_list.iter().find(|&&h| !(2..=max).contains(&h)) {
            return Err(format!(
                "--hosts {h}: the multicast modes take 2..={max} hosts (1..={} receivers)",
                mcast::MAX_RECEIVERS
            ));
        }
        if self.count < mcast::MIN_COUNT {
            return Err(format!(
                "-c {}: the multicast modes need at least {} messages (a tenth warm up)",
                self.count,
                mcast::MIN_COUNT
            ));
        }
        if !(0.0..mcast::MAX_LOSS_PERCENT).contains(&self.loss) {
            return Err(format!(
                "--loss {}: the multicast modes take 0 <= P < {} (percent)",
                self.loss,
                mcast::MAX_LOSS_PERCENT
            ));
        }
        if self.dup > 0.0 || self.reorder > 0.0 {
            return Err(
                "--dup and --reorder: the multicast modes inject loss only (--loss)".into(),
            );
        }
        if !(MIN_MTU..=65535).contains(&self.mtu) {
            return Err(format!(
                "--mtu {}: expected {MIN_MTU}..65535 bytes",
                self.mtu
            ));
        }
        if self.server
            || self.remote.is_some()
            || self.iface.is_some()
            || self.mpi
            || self.mpirun
            || self.srun
            || self.link != LinkKind::Packet
        {
            return Err(
                "the multicast modes run on a virtual cluster built for the run: drop -a, -R, -I, \
                 --link udp and --mpi/--mpirun/--srun"
                    .into(),
            );
        }
        if self
            .output
            .as_ref()
            .is_some_and(|p| !crate::output::csv::is_csv_path(p))
            || self.repeat > 1
            || self.full_log.is_some()
        {
            return Err(
                "-o FILE (long form), -f and --repeat are two-host options; the multicast modes write \
                 --json, --csv FILE and --plot FILE"
                    .into(),
            );
        }
        if let Some(p) = &self.plot {
            crate::output::plot::check_target(p)?;
        }
        Ok(())
    }

    /// `-m` as given, comma-separated.
    fn modes_text(&self) -> String {
        self.modes
            .iter()
            .map(|m| match m {
                ModeArg::One(m) => m.name(),
                ModeArg::Ctp => "ctp",
                ModeArg::Comm => "comm",
                ModeArg::All => "all",
                ModeArg::Mcast(m) => m.name(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `Some(smallest MTU)` when `--local` would run kernel TCP on a link
    /// whose `--mtu` is below it: 40 bytes of IPv4 and TCP headers plus
    /// the kernel's smallest MSS (`net.ipv4.tcp_min_snd_mss`, 48 unless
    /// set; tcp(7)). Segments never shrink below that, so over a smaller
    /// MTU they are dropped and the session stalls.
    fn tcp_min_mtu(&self) -> Option<usize> {
        let tcp = self
            .resolve_modes()
            .iter()
            .any(|m| matches!(m, Mode::Tcp | Mode::TcpBp));
        if !self.local || self.link != LinkKind::Packet || !tcp {
            return None;
        }
        let mss = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_min_snd_mss")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(48);
        let min = 40 + mss;
        (self.mtu < min).then_some(min)
    }

    /// Checks combinations clap cannot express. Returns a message for the user.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = self.timeout_s.filter(|t| !(*t > 0.0 && t.is_finite())) {
            return Err(format!(
                "--timeout {t}: expected a number of seconds above 0"
            ));
        }
        if self.is_mcast() {
            return self.validate_mcast();
        }
        if self.hosts_list.len() != 1 {
            return Err(format!(
                "--hosts {}: one number of hosts (a list sweeps the multicast modes only)",
                self.hosts_list
                    .iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        for (name, p) in [
            ("--loss", self.loss),
            ("--dup", self.dup),
            ("--reorder", self.reorder),
        ] {
            if !(0.0..=100.0).contains(&p) {
                return Err(format!(
                    "{name} {p}: expected a percentage between 0 and 100"
                ));
            }
        }
        if self
            .time_limit_s
            .is_some_and(|t| !(t > 0.0 && t.is_finite()))
        {
            return Err("-t SECONDS: expected a time limit per size above 0".into());
        }
        if self.count == 0 {
            return Err("-c 0: need at least one iteration per size".into());
        }
        if self.grade == 0 {
            return Err("-g 0: the grade (--grad) is at least 1".into());
        }
        if self.fault().is_some() {
            // Fault injection wraps our AF_PACKET link (link::FaultLink):
            // kernel sockets never see it.
            let kernel: Vec<&str> = self
                .resolve_modes()
                .into_iter()
                .filter(|m| !m.is_ethernet())
                .map(|m| m.name())
                .collect();
            if !kernel.is_empty() {
                return Err(format!(
                    "--loss/--dup/--reorder inject faults on our Ethernet link and cannot apply to {} \
                     (kernel sockets); pick Ethernet modes, e.g. -m eth,edp,esp,ctp-edp",
                    kernel.join(", ")
                ));
            }
        }
        if !(MIN_MTU..=65535).contains(&self.mtu) {
            return Err(format!(
                "--mtu {}: expected {MIN_MTU}..65535 bytes (IPv4's minimum datagram)",
                self.mtu
            ));
        }
        if let Some(min) = self.tcp_min_mtu() {
            return Err(format!(
                "--mtu {}: kernel TCP sends at least {} data bytes a segment \
                 (net.ipv4.tcp_min_snd_mss) plus 40 of headers, so its segments would not fit \
                 and tcp/tcp-bp would stall: use --mtu {min} or more, or leave tcp and tcp-bp out (-m)",
                self.mtu,
                min - 40
            ));
        }
        if self.local && self.iface.is_some() {
            return Err(format!(
                "-I {}: --local builds its own interfaces (the virtual cluster's{}); drop -I",
                self.iface.as_deref().unwrap_or_default(),
                if self.link == LinkKind::Udp {
                    ", or none with --link udp"
                } else {
                    ""
                }
            ));
        }
        if let Some(p) = &self.plot {
            crate::output::plot::check_target(p)?;
        }
        if self.repeat == 0 || (self.repeat > 1 && !self.local) {
            return Err("--repeat N needs N >= 1 and --local".into());
        }
        if let Some(e) = self.validate_cluster() {
            return Err(e);
        }
        if self.local && self.server {
            return Err("--local runs both ends itself: drop -a".into());
        }
        if self.busy_poll && self.wait.is_some_and(|w| w.0 != WaitPolicy::BusyPoll) {
            return Err(format!(
                "--busy-poll means --wait busy, not --wait {}: give one of them",
                self.wait.unwrap().label()
            ));
        }
        if self.idle_procs == 0 || (self.idle_procs > 1 && !self.local) {
            return Err(
                "--idle-procs P needs P >= 1 and --local (P processes per host of the virtual cluster)"
                    .into(),
            );
        }
        if self.idle_procs > crate::hold::MAX_PROCS {
            return Err(format!(
                "--idle-procs {}: at most {} processes per host",
                self.idle_procs,
                crate::hold::MAX_PROCS
            ));
        }
        for (flag, n, max) in [
            ("--idle-edp", self.idle_edp, crate::idle::MAX_IDLE_EDP),
            ("--idle-esp", self.idle_esp, crate::idle::MAX_IDLE_ESP),
        ] {
            if n > max {
                return Err(format!("{flag} {n}: at most {max}"));
            }
        }
        if self.hold {
            if self.local || self.server || self.iface.is_none() {
                return Err("--hold (internal) needs -I IFACE, without --local or -a".into());
            }
            return Ok(());
        }
        if self.link == LinkKind::Udp {
            if let Some(m) = self.resolve_modes().into_iter().find(|m| *m == Mode::Eth) {
                return Err(format!(
                    "-m {} sends raw frames with no protocol and has no UDP link: drop it with --link udp",
                    m.name()
                ));
            }
            if self.pattern.is_multi_host()
                || self.mpi
                || self.mpirun
                || self.srun
                || self.hosts() > 2
            {
                return Err(
                    "--link udp runs one pair (one_one or stream, client/server or --local); \
                     the multi-host patterns, --hosts and --mpirun/--srun run on AF_PACKET: drop --link udp"
                        .into(),
                );
            }
            if self.idle_edp > 0 || self.idle_esp > 0 || self.idle_procs > 1 {
                return Err(
                    "--idle-edp/--idle-esp/--idle-procs measure the packet socket's demultiplexing \
                     and need --link packet"
                        .into(),
                );
            }
            if self.server && !self.local && self.link_peers.is_empty() {
                return Err(
                    "netgauge -a --link udp needs --link-peer CLIENT_HOST:PORT (the client's UDP \
                     address; a client binds port P+1 unless --link-bind): a UDP link takes frames \
                     only from the peers in its table"
                        .into(),
                );
            }
            for p in &self.link_peers {
                crate::transport::udp_link::resolve(p, self.port.wrapping_add(1), "--link-peer")
                    .map_err(|e| e.to_string())?;
            }
            if let (false, false, Some(r)) = (self.server, self.local, &self.remote) {
                crate::transport::udp_link::resolve(
                    r,
                    self.port,
                    "-R (the server's UDP link address)",
                )
                .map_err(|e| e.to_string())?;
            }
        } else if self.link_bind.is_some() || !self.link_peers.is_empty() {
            return Err("--link-bind and --link-peer apply to --link udp".into());
        }
        if !self.local && !self.server && !self.mpi && self.remote.is_none() {
            return Err(
                "the client needs -R: the server's MAC (edp, esp, ctp-edp, comm-edp) or IP (udp, tcp, ctp-udp, comm-udp); \
                 start the server with -a, or use --local"
                    .into(),
            );
        }
        Ok(())
    }
    /// Checks the multi-host options; `Some(message)` when they do not fit.
    fn validate_cluster(&self) -> Option<String> {
        let args = self;
        let p = args.pattern;
        if !(2..=crate::cluster::MAX_HOSTS).contains(&args.hosts()) {
            return Some(format!(
                "--hosts {}: expected 2..={}",
                args.hosts(),
                crate::cluster::MAX_HOSTS
            ));
        }
        if args.hosts() > 2 && !p.is_multi_host() && !args.mpirun && !args.srun {
            return Some(format!(
            "--hosts {} with -x {}: a two-host pattern; use -x 1toN, Nto1, one_one_bidir, ebb, msgrate or stream_bidir",
            args.hosts(),
            p.name()
        ));
        }
        if args.bridge
            && (!args.local
                || args.hosts() != 2
                || args.mpirun
                || args.srun
                || args.link == LinkKind::Udp)
        {
            return Some(
                "--bridge joins the two hosts of a --local run (AF_PACKET links) by a bridge; \
                 clusters of more hosts and mpirun's always have one"
                    .into(),
            );
        }
        if !p.is_multi_host() && !args.mpirun && !args.srun {
            return None;
        }
        if (args.mpi || args.mpirun || args.srun) && !cfg!(feature = "mpi") {
            return Some(
                "--mpi, --mpirun and --srun need netgauge built with the mpi feature: \
             cargo build --release -p netgauge --features mpi, then run target/release/netgauge \
             (Open MPI and libclang: scripts/install-deps.sh)"
                    .into(),
            );
        }
        if args.mpirun && !args.local {
            return Some(
                "--mpirun launches the ranks on the virtual cluster of --local --hosts N".into(),
            );
        }
        if args.mpi || args.mpirun {
            return None;
        }
        if !args.local {
            return Some(format!(
                "-x {} runs on several hosts: use --local --hosts N (a virtual cluster)",
                p.name()
            ));
        }
        if args.output.is_some() || args.repeat > 1 || args.idle_procs > 1 {
            return Some(format!(
            "-x {}: -o, --repeat and --idle-procs are two-host options; use --json for the per-rank records",
            p.name()
        ));
        }
        None
    }
}

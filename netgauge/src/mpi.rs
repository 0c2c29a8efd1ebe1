//! `netgauge --mpi`: one rank of a job started by `mpirun -np N` (or
//! `srun -n N`). Feature `mpi` (the `mpi` crate on the system's MPI).
//!
//! 1. Each rank lists its interfaces that are up and have a MAC (`-I` picks
//!    one), opens an EDP runtime on each (its echo responder answers the
//!    peers), and all ranks exchange MACs and IPv4 addresses with
//!    MPI_Allgather.
//! 2. After a barrier each rank decides by EDP echo which of its interfaces
//!    reaches each peer ([`crate::reach`], `--echo-attempts`,
//!    `--echo-timeout-ms`: the thesis's `btl_eth_echo_attempts` and
//!    `btl_eth_echo_timeout`); the reachability matrix is gathered and
//!    rank 0 prints it.
//! 3. For every mode and size the pattern's pairs ([`crate::cluster::pairs`])
//!    run at once, each rank running its sessions on threads (servers and
//!    clients, one per pair it is in) with the route found in 2: no `-R`.
//!    Rank 0 gathers the clients' records over MPI and prints them as
//!    `--local --hosts N` does. A pair whose ranks do not reach each other
//!    fails the run, naming them.

use std::io;
use std::time::Duration;

use mpi::traits::*;

use crate::cluster::{self, PairRecord, StepRecord};
use crate::hostlist;
use crate::patterns::Pattern;
use crate::reach::{self, EchoConfig};
use crate::run::RunConfig;
use crate::sizes::{size_steps, SizeRange};
use crate::transport::SessionConfig;

/// Interfaces per rank exchanged (the first ones that have a MAC).
const MAX_IFACES: usize = 4;
/// Bytes per interface in the exchange: MAC (6), IPv4 (4, zero = none).
const IFACE_BYTES: usize = 10;
/// Bytes per rank: the interface count, then the interfaces.
const RANK_BYTES: usize = 1 + MAX_IFACES * IFACE_BYTES;

/// Bytes of a host name exchanged for `--hostnames` (longer names are cut;
/// HOST_NAME_MAX is 64 on Linux).
const HOSTNAME_BYTES: usize = 64;

/// One rank's addresses as exchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    pub ifaces: Vec<(edp::MacAddr, Option<std::net::Ipv4Addr>)>,
}

impl RankInfo {
    fn encode(&self) -> [u8; RANK_BYTES] {
        let mut b = [0u8; RANK_BYTES];
        let n = self.ifaces.len().min(MAX_IFACES);
        b[0] = n as u8;
        for (i, (mac, ip)) in self.ifaces.iter().take(n).enumerate() {
            let o = 1 + i * IFACE_BYTES;
            b[o..o + 6].copy_from_slice(&mac.0);
            if let Some(ip) = ip {
                b[o + 6..o + 10].copy_from_slice(&ip.octets());
            }
        }
        b
    }

    fn decode(b: &[u8]) -> RankInfo {
        let n = usize::from(b[0]).min(MAX_IFACES);
        let ifaces = (0..n)
            .map(|i| {
                let o = 1 + i * IFACE_BYTES;
                let mac = edp::MacAddr(b[o..o + 6].try_into().expect("6 bytes"));
                let ip: [u8; 4] = b[o + 6..o + 10].try_into().expect("4 bytes");
                (mac, (ip != [0; 4]).then(|| ip.into()))
            })
            .collect();
        RankInfo { ifaces }
    }
}

/// One rank of an MPI job (`--mpi`), converted from the command line by
/// `cli`.
#[derive(Debug, Clone)]
pub struct RankConfig {
    /// After MPI_Init, enter network namespace PREFIXr (`--rank-netns`).
    pub rank_netns: Option<String>,
    /// The interface to use (`-I`), else every one that is up.
    pub iface: Option<String>,
    /// Print every participant's host name first.
    pub hostnames: bool,
    /// EDP echo rounds per peer address, and the wait for each reply.
    pub echo_attempts: u32,
    pub echo_timeout: Duration,
    /// Rank 0 prints JSON records instead of text; `verbose` > 0 adds a
    /// row per pair.
    pub json: bool,
    pub verbose: u8,
    /// The multi-host pattern and the seed of ebb's pairings.
    pub pattern: Pattern,
    pub seed: u64,
    /// First port; each step's pairs take ports after it.
    pub port: u16,
    /// The sessions' plan (its pattern and size are set per step).
    pub run: RunConfig,
    /// One session template per mode, in order (interface, remote and
    /// port are set per pair).
    pub sessions: Vec<SessionConfig>,
}

/// Runs one rank. Errors end every rank (MPI_Abort) after printing.
pub fn rank_main(args: &RankConfig) -> io::Result<()> {
    let universe =
        ::mpi::initialize().ok_or_else(|| io::Error::other("MPI was initialized twice"))?;
    let world = universe.world();
    if let Some(prefix) = &args.rank_netns {
        if let Err(e) = enter_netns(&format!("{prefix}{}", world.rank())) {
            eprintln!("netgauge: rank {}: {e}", world.rank());
            world.abort(1)
        }
    }
    match run(args, &world) {
        Ok(()) => Ok(()),
        Err(e) => {
            eprintln!("netgauge: rank {}: {e}", world.rank());
            world.abort(1)
        }
    }
}

fn run(args: &RankConfig, world: &impl Communicator) -> io::Result<()> {
    let rank = world.rank() as usize;
    let n = world.size() as usize;
    // Every session opens sockets anew: keep the capabilities.
    crate::privilege::expect_sessions(usize::MAX);
    let ifs: Vec<hostlist::Iface> = hostlist::interfaces(args.iface.as_deref())?
        .into_iter()
        .filter(|i| i.mac.is_some())
        .take(MAX_IFACES)
        .collect();
    if ifs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no Ethernet interface up{}",
                args.iface
                    .as_deref()
                    .map(|i| format!(" named {i}"))
                    .unwrap_or_default()
            ),
        ));
    }
    // Responders: an EDP runtime per interface, for the whole run.
    let _responders: Vec<edp::echo::Pinger> = ifs
        .iter()
        .map(|i| edp::echo::Pinger::new(&i.name))
        .collect::<io::Result<_>>()?;
    let me = RankInfo {
        ifaces: ifs
            .iter()
            .map(|i| {
                let v4 = i.ips.iter().find_map(|a| match a {
                    std::net::IpAddr::V4(v) => Some(*v),
                    _ => None,
                });
                (i.mac.expect("filtered"), v4)
            })
            .collect(),
    };
    let mut all = vec![0u8; RANK_BYTES * n];
    world.all_gather_into(&me.encode()[..], &mut all[..]);
    let infos: Vec<RankInfo> = all.chunks(RANK_BYTES).map(RankInfo::decode).collect();
    if args.hostnames {
        // netgauge's --hostnames: rank 0 prints every rank's host name.
        let mut mine = [0u8; HOSTNAME_BYTES];
        let h = crate::output::hostname();
        let l = h.len().min(HOSTNAME_BYTES);
        mine[..l].copy_from_slice(&h.as_bytes()[..l]);
        let mut names = vec![0u8; HOSTNAME_BYTES * world.size() as usize];
        world.all_gather_into(&mine[..], &mut names[..]);
        if world.rank() == 0 {
            for (j, c) in names.chunks(HOSTNAME_BYTES).enumerate() {
                println!(
                    "# rank {j}: host {}",
                    String::from_utf8_lossy(c).trim_end_matches('\0')
                );
            }
        }
    }
    world.barrier();

    // Routes by EDP echo.
    let cfg = EchoConfig {
        attempts: args.echo_attempts,
        timeout: args.echo_timeout,
    };
    let names: Vec<&str> = ifs.iter().map(|i| i.name.as_str()).collect();
    let mut routes: Vec<Option<reach::Route>> = vec![None; n];
    let mut why: Vec<String> = vec![String::new(); n];
    for (j, info) in infos.iter().enumerate() {
        if j == rank {
            continue;
        }
        let macs: Vec<edp::MacAddr> = info.ifaces.iter().map(|(m, _)| *m).collect();
        match reach::route(&macs, &names, cfg) {
            Ok(r) => routes[j] = Some(r),
            Err(e) => why[j] = e.to_string(),
        }
    }
    let row: Vec<u8> = (0..n)
        .map(|j| u8::from(j == rank || routes[j].is_some()))
        .collect();
    let mut matrix = vec![0u8; n * n];
    world.all_gather_into(&row[..], &mut matrix[..]);
    if rank == 0 && args.json {
        // How the ranks found each other, first line of the JSON output.
        let ranks: Vec<serde_json::Value> = infos
            .iter()
            .enumerate()
            .map(|(j, info)| {
                serde_json::json!({
                    "rank": j,
                    "macs": info.ifaces.iter().map(|(m, _)| m.to_string()).collect::<Vec<_>>(),
                    "ips": info.ifaces.iter().filter_map(|(_, ip)| ip.map(|i| i.to_string())).collect::<Vec<_>>(),
                    "reaches": (0..n).filter(|&k| k != j && matrix[j * n + k] == 1).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "discovery": "MPI_Allgather of addresses, routes by EDP echo",
                "echo_attempts": cfg.attempts,
                "echo_timeout_ms": cfg.timeout.as_millis() as u64,
                "ranks": ranks,
            })
        );
    }
    if rank == 0 && !args.json {
        println!("# netgauge --mpi: {n} ranks; addresses exchanged over MPI, routes found by EDP echo ({} attempts x {} ms)", cfg.attempts, cfg.timeout.as_millis());
        for (j, info) in infos.iter().enumerate() {
            let reaches: Vec<String> = (0..n)
                .filter(|&k| k != j && matrix[j * n + k] == 1)
                .map(|k| k.to_string())
                .collect();
            let addrs: Vec<String> = info
                .ifaces
                .iter()
                .map(|(m, ip)| {
                    format!(
                        "{m} {}",
                        ip.map(|i| i.to_string()).unwrap_or_else(|| "-".into())
                    )
                })
                .collect();
            println!(
                "#   rank {j}: {}; reaches ranks [{}]",
                addrs.join(", "),
                reaches.join(", ")
            );
        }
    }
    for j in 0..n {
        if routes[j].is_some() || j == rank {
            continue;
        }
        tracing::warn!(rank, peer = j, "peer unreachable: {}", why[j]);
    }

    let sizes = size_steps(args.run.size, args.run.grade);
    let mut steps = Vec::new();
    // No bar: ranks share the terminal.
    let progress = crate::output::progress::Progress::new(false, 0);
    for (mi, template) in args.sessions.iter().enumerate() {
        let mode = template.mode;
        for (si, &size) in sizes.iter().enumerate() {
            let pairs = cluster::pairs(args.pattern, n, args.seed, si);
            for &(s, c) in &pairs {
                if matrix[s * n + c] == 0 || matrix[c * n + s] == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "ranks {c} and {s} do not reach each other by EDP echo: {}",
                            why[if rank == c { s } else { c }]
                        ),
                    ));
                }
            }
            let base = ((mi * sizes.len() + si) * pairs.len()) % 20_000;
            quiet_barrier(world);
            let mine = run_sessions(
                args,
                template,
                size,
                &pairs,
                base as u16,
                rank,
                &infos,
                &routes,
            );
            let mine = match mine {
                Ok(m) => m,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("mode {}, {size} bytes: {e}", mode.name()),
                    ))
                }
            };
            // Every rank is done measuring before any MPI call that spins.
            quiet_barrier(world);
            // Gather the client records on rank 0.
            let text = serde_json::to_vec(&mine).map_err(io::Error::other)?;
            if rank == 0 {
                let mut recs = mine;
                for r in 1..n {
                    let (b, _) = world.process_at_rank(r as i32).receive_vec::<u8>();
                    let theirs: Vec<PairRecord> =
                        serde_json::from_slice(&b).map_err(io::Error::other)?;
                    recs.extend(theirs);
                }
                let order = |p: &PairRecord| {
                    pairs
                        .iter()
                        .position(|&(s, c)| s == p.server && c == p.client)
                };
                recs.sort_by_key(order);
                let step = StepRecord {
                    pattern: args.pattern.name().into(),
                    mode: mode.name().into(),
                    size,
                    hosts: n,
                    aggregate: cluster::aggregate(&recs),
                    pairs: recs,
                    error: None,
                };
                cluster::print_step(args.json, args.verbose, &step, &progress)?;
                steps.push(step);
            } else {
                world.process_at_rank(0).send(&text[..]);
            }
        }
    }
    if rank == 0 && !args.json {
        println!();
        if args.verbose > 0 {
            print!("{}", cluster::summary(&steps));
            println!();
        }
        print!("{}", cluster::table(args.pattern, &steps, &[]));
    }
    world.barrier();
    Ok(())
}

/// Moves the calling thread (the main thread, before any session thread
/// starts: those inherit it) into network namespace `name` of `ip netns`
/// (setns(2)). The MPI library's threads and sockets opened in MPI_Init
/// stay where they were.
///
/// Errors: the namespace does not exist; setns refused (needs
/// CAP_SYS_ADMIN).
fn enter_netns(name: &str) -> io::Result<()> {
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {path}: {e}")))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| io::Error::other(format!("setns({path}): {e}")))
}

/// A barrier that sleeps instead of spinning: Open MPI's blocking calls
/// poll at full speed, which would take the CPU from the ranks still
/// measuring (MPI_Ibarrier tested every 200 us).
fn quiet_barrier(world: &impl Communicator) {
    let mut req = world.immediate_barrier();
    loop {
        match req.test() {
            Ok(_) => return,
            Err(r) => {
                req = r;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// Runs this rank's sessions of one step on threads: a server for each pair
/// it serves, a client for each pair it is the client of. Returns the
/// client records.
#[allow(clippy::too_many_arguments)]
fn run_sessions(
    args: &RankConfig,
    template: &SessionConfig,
    size: usize,
    pairs: &[(usize, usize)],
    base: u16,
    rank: usize,
    infos: &[RankInfo],
    routes: &[Option<reach::Route>],
) -> io::Result<Vec<PairRecord>> {
    let mode = template.mode;
    let mut run = args.run.clone();
    run.pattern = args.pattern.session();
    run.size = SizeRange {
        min: size,
        max: size,
    };
    let run = &run;
    let session = |k: usize, peer: usize| -> io::Result<SessionConfig> {
        let route = routes[peer].as_ref().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no route to rank {peer}"))
        })?;
        let mut a = template.clone();
        a.port = args.port.wrapping_add(base).wrapping_add(k as u16);
        a.iface = Some(route.iface.clone());
        let ip = infos[peer]
            .ifaces
            .iter()
            .find(|(m, _)| *m == route.mac)
            .and_then(|(_, ip)| *ip);
        a.remote = Some(if mode.is_ethernet() {
            route.mac.to_string()
        } else {
            ip.map(|i| i.to_string()).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "rank {peer} has no IPv4 address on {} for mode {}",
                        route.mac,
                        mode.name()
                    ),
                )
            })?
        });
        Ok(a)
    };
    std::thread::scope(|s| {
        let mut servers = Vec::new();
        let mut clients = Vec::new();
        for (k, &(srv, cli)) in pairs.iter().enumerate() {
            if srv == rank {
                let a = session(k, cli)?;
                servers.push(s.spawn(move || crate::run::server(run, &a)));
            }
        }
        for (k, &(srv, cli)) in pairs.iter().enumerate() {
            if cli == rank {
                let a = session(k, srv)?;
                clients.push((
                    srv,
                    s.spawn(move || crate::run::client(run, &a, &mut |_| {})),
                ));
            }
        }
        let mut out = Vec::new();
        for (srv, h) in clients {
            let recs = h
                .join()
                .map_err(|_| io::Error::other("client thread panicked"))?
                .map_err(|e| io::Error::new(e.kind(), format!("client of rank {srv}: {e}")))?;
            let rec = recs
                .into_iter()
                .next()
                .ok_or_else(|| io::Error::other(format!("client of rank {srv}: no record")))?;
            out.push(PairRecord {
                client: rank,
                server: srv,
                msgs_per_s: cluster::msgs_per_s(&rec),
                record: rec,
            });
        }
        for h in servers {
            h.join()
                .map_err(|_| io::Error::other("server thread panicked"))??;
        }
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_info_round_trip() {
        let r = RankInfo {
            ifaces: vec![
                (edp::MacAddr([2, 0, 0, 0, 0, 1]), Some([10, 0, 0, 1].into())),
                (edp::MacAddr([2, 0, 0, 0, 0, 2]), None),
            ],
        };
        assert_eq!(RankInfo::decode(&r.encode()), r);
    }
}

//! Checks `comm`'s MPI bootstrap under a real launcher:
//! `mpirun -np N comm-mpi-check [IP]` (UDP; default 127.0.0.1 for one
//! host) or `mpirun -np N comm-mpi-check --edp IFACE`. Every rank sends a
//! tagged message to every other rank, receives N-1 with ANY_SOURCE and
//! checks each byte, then runs an allreduce and a barrier. Prints one
//! `rank R of N: ok` line per rank; exits 1 on any mismatch or error.
//!
//! `mpirun -np 2 comm-mpi-check --pingpong ITERS [IP]`: instead, ranks 0
//! and 1 ping-pong messages of 8 B .. 1 MiB (doubling) and rank 0 prints
//! the p50 half round trip per size, as scripts/ompi-pingpong.c does for
//! Open MPI, so the two run under one launcher on the same hosts.

use std::time::Duration;

use comm::bootstrap::{from_mpi_edp, from_mpi_udp};
use comm::{CommConfig, CommError, Communicator, ANY_SOURCE};
use ctp::{CtpConfig, Transport};
use mpi::traits::Communicator as _;

const TAG: u32 = 77;

fn payload(from: usize, to: usize) -> Vec<u8> {
    (0..1000 + 13 * from)
        .map(|i| (i * 31 + from * 7 + to) as u8)
        .collect()
}

fn check<T: Transport>(c: &Communicator<T>) -> Result<(), String> {
    let (rank, n) = (c.rank(), c.size());
    let e = |e: CommError| e.to_string();
    let mut reqs = Vec::new();
    for to in (0..n).filter(|&to| to != rank) {
        reqs.push(c.isend(to, TAG, &payload(rank, to)).map_err(e)?);
    }
    for _ in 1..n {
        let (st, data) = c.recv(ANY_SOURCE, TAG).map_err(e)?;
        if data != payload(st.source, rank) {
            return Err(format!("message from rank {} is not byte-exact", st.source));
        }
    }
    c.wait_all(reqs).map_err(e)?;
    let mut sum = [rank as i64];
    c.allreduce_sum(&mut sum).map_err(e)?;
    let want = (n * (n - 1) / 2) as i64;
    if sum[0] != want {
        return Err(format!("allreduce gave {} instead of {want}", sum[0]));
    }
    c.barrier().map_err(e)
}

/// Ranks 0 and 1: p50 half round trip per size, printed by rank 0.
fn pingpong<T: Transport>(c: &Communicator<T>, iters: usize) -> Result<(), String> {
    let e = |e: CommError| e.to_string();
    let rank = c.rank();
    if rank == 0 {
        println!("# size(B)  p50(us)  min(us)   (comm over CTP, ranks 0<->1)");
    }
    let mut n = 8usize;
    while n <= 1 << 20 {
        let buf = vec![0xa5u8; n];
        let mut lat = Vec::with_capacity(iters);
        c.barrier().map_err(e)?;
        for i in 0..iters + iters / 10 + 1 {
            if rank == 0 {
                let t0 = std::time::Instant::now();
                c.send(1, 1, &buf).map_err(e)?;
                c.recv(1usize, 1).map_err(e)?;
                if i > iters / 10 {
                    lat.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
                }
            } else if rank == 1 {
                let (_, d) = c.recv(0usize, 1).map_err(e)?;
                c.send(0, 1, &d).map_err(e)?;
            }
        }
        if rank == 0 {
            lat.sort_by(f64::total_cmp);
            println!("{n:>9} {:>8.2} {:>8.2}", lat[lat.len() / 2], lat[0]);
        }
        n *= 4;
    }
    Ok(())
}

fn main() {
    let universe = mpi::initialize().expect("MPI_Init");
    let world = universe.world();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let (cfg, ctp) = (CommConfig::default(), CtpConfig::default());
    if args.first().map(String::as_str) == Some("--pingpong") {
        let iters: usize = args
            .get(1)
            .and_then(|s| s.parse().ok())
            .expect("--pingpong ITERS");
        let ip = args
            .get(2)
            .map(String::as_str)
            .unwrap_or("127.0.0.1")
            .parse()
            .expect("an IP address");
        let r = from_mpi_udp(&world, ip, cfg, ctp)
            .map_err(|e| e.to_string())
            .and_then(|c| {
                pingpong(&c, iters)?;
                c.finalize(Duration::from_secs(5))
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = r {
            eprintln!("rank {}: {e}", world.rank());
            std::process::exit(1);
        }
        return;
    }
    args.truncate(2);
    let result = match args.first().map(String::as_str) {
        Some("--edp") => {
            let iface = args.get(1).map(String::as_str).unwrap_or("eth0");
            from_mpi_edp(&world, iface, cfg, ctp)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    check(&c)?;
                    c.finalize(Duration::from_secs(5))
                        .map_err(|e| e.to_string())
                })
        }
        ip => {
            let ip = ip.unwrap_or("127.0.0.1").parse().expect("an IP address");
            from_mpi_udp(&world, ip, cfg, ctp)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    check(&c)?;
                    c.finalize(Duration::from_secs(5))
                        .map_err(|e| e.to_string())
                })
        }
    };
    match result {
        Ok(()) => println!("rank {} of {}: ok", world.rank(), world.size()),
        Err(e) => {
            eprintln!("rank {}: {e}", world.rank());
            std::process::exit(1);
        }
    }
}

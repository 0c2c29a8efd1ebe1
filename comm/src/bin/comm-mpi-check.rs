//! Checks `comm`'s MPI bootstrap under a real launcher:
//! `mpirun -np N comm-mpi-check [IP]` (UDP; default 127.0.0.1 for one
//! host) or `mpirun -np N comm-mpi-check --edp IFACE`. Every rank sends a
//! tagged message to every other rank, receives N-1 with ANY_SOURCE and
//! checks each byte, then runs an allreduce and a barrier. Prints one
//! `rank R of N: ok` line per rank; exits 1 on any mismatch or error.

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

fn main() {
    let universe = mpi::initialize().expect("MPI_Init");
    let world = universe.world();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cfg, ctp) = (CommConfig::default(), CtpConfig::default());
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

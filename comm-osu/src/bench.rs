//! The five benchmarks, as the OSU micro-benchmarks (OMB 7.x, Ohio State
//! University: `osu_latency`, `osu_bw`, `osu_bibw`, `osu_bcast`,
//! `osu_allreduce`) define them, on a [`Communicator`] of any transport.
//!
//! - latency: ranks 0 and 1 ping-pong; half the mean round trip, us;
//! - latency-p50: the same ping-pong, half the median (p50) round trip, us
//!   (not in OMB, which reports means; the project judges latency by
//!   p50s, and a mean moves with a few descheduled iterations);
//! - bw: rank 0 posts a window of nonblocking sends, rank 1 a window of
//!   receives, then a 4-byte ack; MB/s (10^6 bytes/s) of payload;
//! - bibw: both post a window of receives and of sends each round; MB/s of
//!   payload in both directions;
//! - bcast: from rank 0, a barrier between iterations; the mean over ranks
//!   of each rank's mean time, us;
//! - allreduce: sum of `size / 8` doubles (OMB sums floats; this
//!   communicator sums i64 and f64), same timing as bcast.
//!
//! Sizes double from `min` to `max` (OMB's `-m`); iterations and warm-up
//! iterations drop tenfold above 8192 bytes (OMB's LARGE_MESSAGE_SIZE).
//! Only rank 0 prints. Departure from OMB: each receive returns a fresh
//! buffer (the communicator's `recv` allocates), which OMB's C does not.

use std::time::Instant;

use comm::{CommError, Communicator};
use ctp::Transport;

/// Above this many bytes OMB runs a tenth of the iterations (LARGE_MESSAGE_SIZE).
pub const LARGE_MESSAGE_SIZE: usize = 8192;

/// The benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Bench {
    /// Ping-pong latency between ranks 0 and 1 (osu_latency).
    Latency,
    /// The same ping-pong, reported as the p50 (median) of the per-iteration
    /// half round trips instead of OMB's mean.
    LatencyP50,
    /// Unidirectional bandwidth from rank 0 to 1 (osu_bw).
    Bw,
    /// Bidirectional bandwidth between ranks 0 and 1 (osu_bibw).
    Bibw,
    /// Broadcast latency from rank 0 (osu_bcast).
    Bcast,
    /// All-reduce latency of a sum of doubles (osu_allreduce).
    Allreduce,
}

impl Bench {
    /// The subcommand's name (also the Open MPI program's argument).
    pub fn name(self) -> &'static str {
        match self {
            Bench::Latency => "latency",
            Bench::LatencyP50 => "latency-p50",
            Bench::Bw => "bw",
            Bench::Bibw => "bibw",
            Bench::Bcast => "bcast",
            Bench::Allreduce => "allreduce",
        }
    }

    /// OMB's title line, without the version.
    pub fn title(self) -> &'static str {
        match self {
            Bench::Latency => "OSU MPI Latency Test",
            Bench::LatencyP50 => "OSU MPI Latency Test, p50",
            Bench::Bw => "OSU MPI Bandwidth Test",
            Bench::Bibw => "OSU MPI Bi-Directional Bandwidth Test",
            Bench::Bcast => "OSU MPI Broadcast Latency Test",
            Bench::Allreduce => "OSU MPI Allreduce Latency Test",
        }
    }

    /// OMB's column heading of the value.
    pub fn column(self) -> &'static str {
        match self {
            Bench::Latency => "Latency (us)",
            Bench::LatencyP50 => "p50 Latency (us)",
            Bench::Bw | Bench::Bibw => "Bandwidth (MB/s)",
            Bench::Bcast | Bench::Allreduce => "Avg Latency(us)",
        }
    }

    /// True when larger values are better (bandwidths).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Bench::Bw | Bench::Bibw)
    }

    /// The smallest size OMB reports (0 for latency; 8 for allreduce here:
    /// one double).
    pub fn min_size(self) -> usize {
        match self {
            Bench::Latency | Bench::LatencyP50 => 0,
            Bench::Allreduce => 8,
            _ => 1,
        }
    }

    /// Ranks needed.
    pub fn min_ranks(self) -> usize {
        match self {
            Bench::Bcast | Bench::Allreduce => 1,
            _ => 2,
        }
    }
}

/// What one run measures.
#[derive(Debug, Clone)]
pub struct Params {
    /// The benchmark.
    pub bench: Bench,
    /// Smallest message, bytes.
    pub min: usize,
    /// Largest message, bytes.
    pub max: usize,
    /// Iterations per size up to 8192 bytes (a tenth above).
    pub iters: usize,
    /// Warm-up iterations per size up to 8192 bytes (a tenth above).
    pub warmup: usize,
    /// Messages in flight per round of bw and bibw (OMB's window size).
    pub window: usize,
}

impl Params {
    /// The sizes measured: `min` (raised to the benchmark's smallest), then
    /// doubling up to `max`; 0 is followed by 1.
    pub fn sizes(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut s = self.min.max(self.bench.min_size());
        while s <= self.max {
            out.push(s);
            s = if s == 0 { 1 } else { s * 2 };
        }
        out
    }

    fn counts(&self, size: usize) -> (usize, usize) {
        if size > LARGE_MESSAGE_SIZE {
            ((self.iters / 10).max(1), self.warmup / 10)
        } else {
            (self.iters.max(1), self.warmup)
        }
    }
}

/// The header lines of OMB's output.
pub fn header(bench: Bench) -> String {
    format!(
        "# {} (comm {})\n{:<10}{:>18}\n",
        bench.title(),
        env!("CARGO_PKG_VERSION"),
        "# Size",
        bench.column()
    )
}

/// One row of OMB's output (`%-10d%18.2f`).
pub fn row(size: usize, value: f64) -> String {
    format!("{size:<10}{value:>18.2}")
}

/// Runs `p` on this rank; rank 0 prints the header and one row per size
/// as it goes (other ranks print nothing) and returns the rows.
///
/// Errors: the communicator's (a failed or silent peer gives
/// `PeerFailed` or `TimedOut` per `CommConfig::wait_timeout`).
pub fn run<T: Transport>(c: &Communicator<T>, p: &Params) -> Result<Vec<(usize, f64)>, CommError> {
    let me = c.rank();
    if c.size() < p.bench.min_ranks() {
        return Err(CommError::Bootstrap(format!(
            "{} needs at least {} ranks, the communicator has {}",
            p.bench.name(),
            p.bench.min_ranks(),
            c.size()
        )));
    }
    if me == 0 {
        print!("{}", header(p.bench));
    }
    let mut rows = Vec::new();
    for size in p.sizes() {
        let (iters, warmup) = p.counts(size);
        let v = match p.bench {
            Bench::Latency => latency(c, size, iters, warmup, false)?,
            Bench::LatencyP50 => latency(c, size, iters, warmup, true)?,
            Bench::Bw => bandwidth(c, size, iters, warmup, p.window, false)?,
            Bench::Bibw => bandwidth(c, size, iters, warmup, p.window, true)?,
            Bench::Bcast | Bench::Allreduce => collective(c, p.bench, size, iters, warmup)?,
        };
        if me == 0 {
            println!("{}", row(size, v));
            rows.push((size, v));
        }
    }
    c.barrier()?;
    Ok(rows)
}

/// Half the mean round trip, or with `p50` half the median one, us (rank
/// 0's clock).
fn latency<T: Transport>(
    c: &Communicator<T>,
    size: usize,
    iters: usize,
    warmup: usize,
    p50: bool,
) -> Result<f64, CommError> {
    let buf = vec![b'a'; size];
    let mut rtts = Vec::with_capacity(if p50 { iters } else { 0 });
    c.barrier()?;
    let mut start = Instant::now();
    let mut last = start;
    for i in 0..iters + warmup {
        if i == warmup {
            start = Instant::now();
            last = start;
        }
        if p50 && i > warmup {
            let now = Instant::now();
            rtts.push(now - last);
            last = now;
        }
        match c.rank() {
            0 => {
                c.send(1, 1, &buf)?;
                c.recv(1, 1u32)?;
            }
            1 => {
                c.recv(0, 1u32)?;
                c.send(0, 1, &buf)?;
            }
            _ => {}
        }
    }
    if p50 {
        rtts.push(last.elapsed());
        rtts.sort_unstable();
        return Ok(rtts[rtts.len() / 2].as_secs_f64() * 1e6 / 2.0);
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64))
}

fn bandwidth<T: Transport>(
    c: &Communicator<T>,
    size: usize,
    iters: usize,
    warmup: usize,
    window: usize,
    both: bool,
) -> Result<f64, CommError> {
    let buf = vec![b'a'; size];
    let me = c.rank();
    c.barrier()?;
    let mut start = Instant::now();
    for i in 0..iters + warmup {
        if i == warmup {
            start = Instant::now();
        }
        if me > 1 {
            continue;
        }
        let peer = 1 - me;
        let mut reqs = Vec::with_capacity(2 * window);
        if both || me == 1 {
            for _ in 0..window {
                reqs.push(c.irecv(peer, 100u32)?);
            }
        }
        if both || me == 0 {
            for _ in 0..window {
                reqs.push(c.isend(peer, 100, &buf)?);
            }
        }
        // The received buffers go back to CTP's pool for the next round, as
        // osu_bw receives into one buffer (Communicator::recycle).
        for done in c.wait_all(reqs)? {
            if let Some((_, data)) = done.into_received() {
                c.recycle(data);
            }
        }
        // OMB's ack of 4 bytes after each window (osu_bw; osu_bibw has none).
        if !both {
            if me == 0 {
                c.recv(1, 101u32)?;
            } else {
                c.send(0, 101, &[0; 4])?;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let dirs = if both { 2.0 } else { 1.0 };
    Ok(dirs * (size * window * iters) as f64 / secs / 1e6)
}

fn collective<T: Transport>(
    c: &Communicator<T>,
    bench: Bench,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Result<f64, CommError> {
    let me = c.rank();
    let mut total = 0.0;
    c.barrier()?;
    for i in 0..iters + warmup {
        let t = Instant::now();
        if bench == Bench::Bcast {
            let mut data = if me == 0 {
                vec![b'a'; size]
            } else {
                Vec::new()
            };
            c.bcast(0, &mut data)?;
        } else {
            let mut v = vec![1.0f64; size / 8];
            c.allreduce_sum(&mut v)?;
        }
        if i >= warmup {
            total += t.elapsed().as_secs_f64();
        }
        c.barrier()?;
    }
    // OMB: the mean over ranks of each rank's mean latency.
    let mut mean = [total * 1e6 / iters as f64];
    c.reduce_sum(0, &mut mean)?;
    Ok(mean[0] / c.size() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(bench: Bench, min: usize, max: usize) -> Params {
        Params {
            bench,
            min,
            max,
            iters: 100,
            warmup: 10,
            window: 4,
        }
    }

    #[test]
    fn sizes_double_from_the_benchmarks_smallest() {
        assert_eq!(p(Bench::Latency, 0, 8).sizes(), vec![0, 1, 2, 4, 8]);
        assert_eq!(p(Bench::Bw, 0, 4).sizes(), vec![1, 2, 4]);
        assert_eq!(p(Bench::Allreduce, 0, 32).sizes(), vec![8, 16, 32]);
        assert_eq!(p(Bench::Bcast, 64, 32).sizes(), Vec::<usize>::new());
    }

    #[test]
    fn large_messages_run_a_tenth() {
        let q = p(Bench::Latency, 0, 1 << 20);
        assert_eq!(q.counts(LARGE_MESSAGE_SIZE), (100, 10));
        assert_eq!(q.counts(LARGE_MESSAGE_SIZE + 1), (10, 1));
    }

    #[test]
    fn output_is_omb_format() {
        assert_eq!(
            header(Bench::Latency).lines().nth(1),
            Some("# Size          Latency (us)")
        );
        assert_eq!(row(8, 1.234), "8                       1.23");
    }
}

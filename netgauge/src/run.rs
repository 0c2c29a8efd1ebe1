//! One measurement session of one mode: the client walks the size steps and
//! produces [`Record`]s; the server answers until the client says BYE.

use std::io;
use std::time::Duration;

use crate::control::{self, Ctrl, Kind};
use crate::cpu::{self, CpuClock};
use crate::idle::IdleConfig;
use crate::idle::IdleSockets;
use crate::modes::{wait_label, Mode, Wait};
use crate::patterns::Pattern;
use crate::patterns::{one_one, resend, stream, Payload};
use crate::report::Record;
use crate::sizes::{size_steps, SizeRange};
use crate::transport::{self, SessionConfig};

/// Environment variable that makes a client fail on purpose at one size of
/// one mode, `MODE:SIZE` (e.g. `edp:1024`), to see how a run reports a
/// failed measurement (tests, and the README check).
pub const INJECT_FAILURE_ENV: &str = "NETGAUGE_INJECT_FAILURE";

/// The measurement plan of one session, converted from the command line
/// by `cli`: what the client asks of its server, step by step.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The two-host pattern of the session (one_one or stream).
    pub pattern: Pattern,
    /// Sizes of the sweep (`-s`) and its grade (`-g`).
    pub size: SizeRange,
    pub grade: u32,
    /// Measured iterations per size (`-c`) and warm-up ones (`--warmup`).
    pub count: usize,
    pub warmup: usize,
    /// Time limit per size (`-t`).
    pub time_limit: Option<Duration>,
    /// Every sample to this file (`-f`), appended without a header when
    /// `full_log_append`.
    pub full_log: Option<std::path::PathBuf>,
    pub full_log_append: bool,
    /// Idle sockets beside the measured one.
    pub idle: IdleConfig,
    /// Start the first step at this time, ms since the Unix epoch.
    pub start_at_ms: Option<u64>,
    /// `-v`: the transports' statistics in the records and on stderr.
    pub verbose: bool,
}

/// Runs the client side of `mode`: every size step, then BYE. `on_record`
/// sees each record as soon as its step finished.
///
/// CPU time: the process's user + system time over each step (warm-up
/// included) divided by the step's iterations, here and, asked for with a
/// STATS request after the step, on the server.
pub fn client(
    args: &RunConfig,
    cfg: &SessionConfig,
    on_record: &mut dyn FnMut(&Record),
) -> io::Result<Vec<Record>> {
    let mode = cfg.mode;
    // Before the measured socket, in its runtime; kept for the session.
    let idle = IdleSockets::open(cfg, args.idle.edp, args.idle.esp)?;
    let mut ep = transport::connect(cfg)?;
    crate::privilege::drop_after_open();
    if let Some(ms) = args.start_at_ms {
        crate::cluster::sleep_until_unix_ms(ms);
    }
    let sizes = size_steps(args.size, args.grade);
    let payload = Payload::new(args.size.max);
    // -t: the previous step's (size, time per iteration).
    let mut last_step: Option<(usize, std::time::Duration)> = None;
    let mut raw_log = match &args.full_log {
        Some(p) => Some(crate::output::raw::RawLog::open(p, args.full_log_append)?),
        None => None,
    };
    let mut records = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let step = i as u32 + 1;
        let (count, warmup) = match args.pattern.session() {
            Pattern::OneOne => (args.count, args.warmup),
            _ => (args.count, 0),
        };
        let count = match (args.time_limit, last_step) {
            (Some(t), Some((prev_size, per_iter))) => iterations_within(
                t,
                per_iter.mul_f64((size as f64 / prev_size.max(1) as f64).max(1.0)),
                warmup,
                count,
            ),
            _ => count,
        };
        if injected_failure(mode, size) {
            return Err(io::Error::other(format!(
                "{size} bytes: failure injected by {}",
                INJECT_FAILURE_ENV
            )));
        }
        let step_start = std::time::Instant::now();
        let hello = Ctrl {
            kind: Kind::Hello,
            step,
            pattern: args.pattern,
            size: size as u64,
            count: (count + warmup) as u64,
            extra: warmup as u64,
        };
        control::request(ep.as_mut(), &hello, cfg.timeout, |c| {
            c.kind == Kind::Ready && c.step == step
        })?;
        let cpu_clock = CpuClock::start()?;
        let mut resends = None;
        // (latency summary, bytes per us, loss, send-call summary)
        let (lat_us, bytes_per_us, loss, send_us) = match args.pattern.session() {
            Pattern::OneOne if ep.max_datagram().is_some() => {
                let (half_rtt, blocking, st) =
                    resend::client(ep.as_mut(), &payload, size, warmup, count, cfg.timeout)?;
                if let Some(log) = &mut raw_log {
                    log.write_step(mode.name(), size, &half_rtt, &blocking)?;
                }
                resends = Some(st.resends);
                let lat = half_rtt.summary().ok_or_else(|| {
                    io::Error::other(format!(
                        "{size} bytes: every measured round trip needed a resend ({} resends): the link loses too much to measure latency",
                        st.resends
                    ))
                })?;
                let loss = st.loss((count + warmup) as u64);
                (
                    Some(lat),
                    size as f64 / lat.p50,
                    Some(loss),
                    blocking.summary(),
                )
            }
            Pattern::OneOne => {
                let (half_rtt, blocking) =
                    one_one::client(ep.as_mut(), &payload, size, warmup, count)?;
                if let Some(log) = &mut raw_log {
                    log.write_step(mode.name(), size, &half_rtt, &blocking)?;
                }
                let lat = half_rtt.summary().expect("count >= 1 samples");
                (Some(lat), size as f64 / lat.p50, None, blocking.summary())
            }
            _ => {
                let r = stream::client(ep.as_mut(), &payload, step, size, count, cfg.timeout)?;
                let us = r.elapsed.as_secs_f64() * 1e6;
                let loss = mode.is_lossy().then(|| r.loss());
                (None, r.recv_bytes as f64 / us, loss, None)
            }
        };
        let client_cpu = cpu::us_per_iter(cpu_clock.elapsed()?, (count + warmup) as u64);
        last_step = Some((size, step_start.elapsed() / (count + warmup).max(1) as u32));
        let ask = Ctrl::new(Kind::Stats, step, args.pattern);
        let stats = control::request(ep.as_mut(), &ask, cfg.timeout, |c| {
            c.kind == Kind::Stats && c.step == step
        })?;
        let server_cpu =
            cpu::us_per_iter(std::time::Duration::from_nanos(stats.extra), stats.count);
        let mut rec = Record {
            mode: mode.name().into(),
            pattern: args.pattern.name().into(),
            size,
            iterations: count,
            busy_poll: cfg.busy_poll(),
            wait: wait_label(Wait(cfg.wait_policy), mode),
            lat_us,
            cpu_us_per_iter_client: Some(client_cpu),
            cpu_us_per_iter_server: Some(server_cpu),
            mbit_s: bytes_per_us * 8.0,
            mb_s: bytes_per_us,
            loss,
            idle_edp_sockets: idle.edp(),
            idle_esp_listeners: idle.esp(),
            procs_per_host: 1,
            send_us,
            transport_stats: None,
            resends,
        };
        if args.verbose {
            rec.transport_stats = ep.stats_line();
        }
        on_record(&rec);
        records.push(rec);
    }
    let bye = Ctrl::new(Kind::Bye, sizes.len() as u32 + 1, args.pattern);
    // A datagram BYE may be lost; the server also ends on its idle timeout.
    let repeats = if ep.max_datagram().is_some() { 3 } else { 1 };
    for i in 0..repeats {
        match control::send(ep.as_mut(), &bye) {
            Ok(()) => {}
            // The server left after an earlier BYE (ICMP port unreachable).
            Err(e) if i > 0 && e.kind() == io::ErrorKind::ConnectionRefused => break,
            Err(e) => return Err(e),
        }
    }
    // A user-space transport's retransmissions end with the process: make
    // sure the BYE arrived before exiting.
    ep.finish(cfg.timeout, true)?;
    Ok(records)
}

/// Whether [`INJECT_FAILURE_ENV`] asks the client of `mode` to
/// fail at `size`.
fn injected_failure(mode: Mode, size: usize) -> bool {
    std::env::var(INJECT_FAILURE_ENV).is_ok_and(|v| {
        v.split(',').any(|one| {
            one.split_once(':')
                .is_some_and(|(m, s)| m.trim() == mode.name() && s.trim().parse() == Ok(size))
        })
    })
}

/// Runs the server side of `mode` for one client session. Answers each
/// STATS request with its CPU time over the step (from READY to the end of
/// the step's pattern) and the step's iterations.
pub fn server(args: &RunConfig, cfg: &SessionConfig) -> io::Result<()> {
    let mode = cfg.mode;
    let _idle = IdleSockets::open(cfg, args.idle.edp, args.idle.esp)?;
    let mut ep = transport::accept(cfg)?;
    crate::privilege::drop_after_open();
    let mut last_step = 0u32;
    // Of the last step: iterations served, CPU time in ns.
    let mut last_cpu = (0u64, 0u64);
    let mut payload = Payload::new(0);
    // The control message that ended a resending ping-pong step.
    let mut pending: Option<Ctrl> = None;
    let wanted = |last_step: u32| {
        move |c: &Ctrl| {
            (c.kind == Kind::Hello && c.step > last_step)
                || c.kind == Kind::Bye
                || (c.kind == Kind::Stats && last_step > 0 && c.step == last_step)
        }
    };
    let idle_timeout = cfg.timeout.max(Duration::from_secs(30));
    loop {
        let c = match pending.take() {
            Some(c) => c,
            None => control::recv(ep.as_mut(), idle_timeout, wanted(last_step))?,
        };
        if c.kind == Kind::Bye {
            ep.finish(cfg.timeout, false)?;
            break;
        }
        if c.kind == Kind::Stats {
            // Repeated requests (datagram transports) get the same answer.
            let reply = Ctrl {
                count: last_cpu.0,
                extra: last_cpu.1,
                ..Ctrl::new(Kind::Stats, c.step, c.pattern)
            };
            control::send(ep.as_mut(), &reply)?;
            continue;
        }
        last_step = c.step;
        let size = usize::try_from(c.size)
            .ok()
            .filter(|&s| s <= 1 << 30)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "HELLO asks for {} byte messages: over the 1 GiB limit",
                        c.size
                    ),
                )
            })?;
        if size > payload.capacity() {
            payload = Payload::new(size);
        }
        control::send(ep.as_mut(), &Ctrl::new(Kind::Ready, c.step, c.pattern))?;
        let cpu_clock = CpuClock::start()?;
        match c.pattern {
            Pattern::OneOne if ep.max_datagram().is_some() => {
                let (next, st) = resend::server(
                    ep.as_mut(),
                    &payload,
                    size,
                    c.count as usize,
                    (c.step, c.pattern),
                    idle_timeout,
                    wanted(c.step),
                )?;
                if st.resends > 0 {
                    tracing::info!(
                        step = c.step,
                        echoed_again = st.resends,
                        "lost echoes resent"
                    );
                }
                pending = Some(next);
            }
            Pattern::OneOne => one_one::server(ep.as_mut(), &payload, size, c.count as usize)?,
            _ => stream::server(ep.as_mut(), &payload, &c, cfg.timeout)?,
        }
        let ns = u64::try_from(cpu_clock.elapsed()?.as_nanos()).unwrap_or(u64::MAX);
        last_cpu = (c.count, ns);
        if args.verbose {
            if let Some(s) = ep.stats_line() {
                eprintln!("# server {} step {}: {s}", mode.name(), c.step);
            }
        }
    }
    Ok(())
}

/// The measured iterations of a size step that fit `budget` (-t) when one
/// iteration is expected to take `per_iter`, with `warmup` iterations
/// first: at most `count`, at least 1.
pub fn iterations_within(
    budget: std::time::Duration,
    per_iter: std::time::Duration,
    warmup: usize,
    count: usize,
) -> usize {
    if per_iter.is_zero() {
        return count;
    }
    let fit = (budget.as_secs_f64() / per_iter.as_secs_f64()) as usize;
    fit.saturating_sub(warmup).clamp(1, count.max(1))
}

#[cfg(test)]
mod time_limit_tests {
    use super::iterations_within;
    use std::time::Duration;

    #[test]
    fn the_budget_cuts_iterations() {
        let ms = Duration::from_millis;
        // 1 s at 1 ms per iteration: 1000, minus 100 warm-up.
        assert_eq!(iterations_within(ms(1000), ms(1), 100, 5000), 900);
        // Within budget: the full count.
        assert_eq!(iterations_within(ms(1000), ms(1), 0, 200), 200);
        // Over budget even for the warm-up: still one measured iteration.
        assert_eq!(iterations_within(ms(10), ms(1), 100, 5000), 1);
        assert_eq!(iterations_within(ms(10), Duration::ZERO, 0, 77), 77);
    }
}

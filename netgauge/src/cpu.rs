//! CPU time of this process: user + system time of every thread (the
//! runtime's service thread included) from getrusage(2) `RUSAGE_SELF`, as
//! qperf reports CPU use. netgauge prints it per iteration beside every
//! latency, on both ends, so that spinning is never free in the numbers.

use std::io;
use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;

/// User + system CPU time the process has used so far (microsecond
/// resolution, getrusage's).
///
/// Errors: those of getrusage(2) (none expected on Linux).
pub fn process_cpu() -> io::Result<Duration> {
    let u = getrusage(UsageWho::RUSAGE_SELF).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("getrusage(RUSAGE_SELF): {e}"),
        )
    })?;
    Ok(duration(u.user_time()) + duration(u.system_time()))
}

fn duration(t: TimeVal) -> Duration {
    Duration::from_secs(t.tv_sec().max(0) as u64) + Duration::from_micros(t.tv_usec().max(0) as u64)
}

/// A stopwatch of the process's CPU time.
#[derive(Debug, Clone, Copy)]
pub struct CpuClock(Duration);

impl CpuClock {
    /// Starts at the process's current CPU time.
    ///
    /// Errors: as [`process_cpu`].
    pub fn start() -> io::Result<Self> {
        process_cpu().map(CpuClock)
    }

    /// CPU time used since [`CpuClock::start`].
    ///
    /// Errors: as [`process_cpu`].
    pub fn elapsed(&self) -> io::Result<Duration> {
        Ok(process_cpu()?.saturating_sub(self.0))
    }
}

/// CPU time per iteration in us (0 iterations count as 1).
pub fn us_per_iter(cpu: Duration, iterations: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / iterations.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinning_shows_up_as_cpu_time() {
        let clock = CpuClock::start().unwrap();
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let cpu = clock.elapsed().unwrap();
        // At least part of 30 ms of spinning is charged to the process (on
        // a loaded machine the thread may not run all of it; other test
        // threads only add to the figure).
        assert!(cpu >= Duration::from_millis(5), "{cpu:?}");
        assert_eq!(us_per_iter(Duration::from_millis(3), 1000), 3.0);
        assert_eq!(us_per_iter(Duration::from_millis(3), 0), 3000.0);
    }
}

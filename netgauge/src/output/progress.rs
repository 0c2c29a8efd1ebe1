//! Progress of long runs on stderr (indicatif): one tick per size step,
//! with the elapsed time, an estimate of the time left and the last
//! result. Off when stderr is not a terminal and with `--json`, so that
//! pipes, files and scripts see only the results.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::Record;

/// A progress bar over `total` size steps, or nothing when disabled.
pub struct Progress {
    bar: Option<ProgressBar>,
}

/// Whether a run shows progress: stderr is a terminal and the output is
/// not JSON.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

impl Progress {
    /// A bar over `total` size steps when `enabled`.
    pub fn new(enabled: bool, total: u64) -> Self {
        if !enabled || total == 0 {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "[{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} sizes, ETA {eta} {msg}",
            )
            .expect("static template is valid")
            .progress_chars("=> "),
        );
        // Redraw while a long size step runs, so the clock keeps moving.
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar: Some(bar) }
    }

    /// The message naming what runs now, e.g. `edp 65536 B`.
    pub fn running(&self, what: &str) {
        if let Some(b) = &self.bar {
            b.set_message(what.to_string());
        }
    }

    /// One size step done: tick and show its result.
    pub fn step_done(&self, r: &Record) {
        if let Some(b) = &self.bar {
            b.inc(1);
            b.set_message(last_result(r));
        }
    }

    /// Whether a bar is shown (stderr is a terminal).
    pub fn shown(&self) -> bool {
        self.bar.is_some()
    }

    /// One step done: tick and show `what`.
    pub fn tick(&self, what: &str) {
        if let Some(b) = &self.bar {
            b.inc(1);
            b.set_message(what.to_string());
        }
    }

    /// Prints `line` on stdout without tearing the bar. Errors: as
    /// [`super::print`] (`BrokenPipe`).
    pub fn println(&self, line: &str) -> std::io::Result<()> {
        match &self.bar {
            Some(b) => b.suspend(|| super::println(line)),
            None => super::println(line),
        }
    }

    /// Prints `line` on stderr without tearing the bar (what runs now,
    /// when no bar shows it).
    pub fn eprintln(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Removes the bar (the results follow on stdout).
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The bar's message after a step: mode, size and its headline figure.
pub fn last_result(r: &Record) -> String {
    match r.lat_us {
        Some(l) => format!("{} {} B: p50 {:.2} us", r.mode, r.size, l.p50),
        None => format!("{} {} B: {:.1} Mbit/s", r.mode, r.size, r.mbit_s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_mode_size_and_figure() {
        let r: Record = serde_json::from_value(serde_json::json!({
            "mode": "esp", "pattern": "one_one", "size": 4096, "iterations": 1,
            "busy_poll": false, "mbit_s": 1.0, "mb_s": 0.125,
            "lat_us": {"min": 1.0, "p50": 7.25, "p90": 8.0, "p99": 9.0, "max": 10.0, "avg": 7.0}
        }))
        .unwrap();
        assert_eq!(last_result(&r), "esp 4096 B: p50 7.25 us");
        let mut s = r.clone();
        s.lat_us = None;
        s.mbit_s = 812.34;
        assert_eq!(last_result(&s), "esp 4096 B: 812.3 Mbit/s");
        // JSON output never shows a bar; a disabled bar is inert.
        assert!(!wanted(true));
        let p = Progress::new(false, 10);
        assert!(p.bar.is_none());
        p.step_done(&r);
        p.finish();
    }
}

//! Raw samples (`-f FILE`, netgauge's and sockperf's `--full-log`): one CSV
//! row per measured round trip with its half round-trip and send-call
//! time, ns, so that any statistic or plot can be redone from the file.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::stats::Samples;

/// The header row.
pub const HEADER: &str = "mode,size_bytes,iteration,half_rtt_ns,send_ns";

/// An open raw-sample file.
pub struct RawLog {
    w: BufWriter<File>,
}

impl RawLog {
    /// Creates (truncates) `path` and writes the header row; with `append`
    /// (the clients of `--local`, after the parent created the file) opens
    /// it for appending rows instead.
    pub fn open(path: &Path, append: bool) -> io::Result<Self> {
        let f = if append {
            OpenOptions::new().append(true).open(path)
        } else {
            File::create(path)
        }
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot open the raw-sample file {} (-f): {e}",
                    path.display()
                ),
            )
        })?;
        let mut w = BufWriter::new(f);
        if !append {
            writeln!(w, "{HEADER}")?;
        }
        Ok(RawLog { w })
    }

    /// Writes the samples of one size step: `half_rtt[i]` and `send[i]`
    /// belong to measured iteration `i`.
    pub fn write_step(
        &mut self,
        mode: &str,
        size: usize,
        half_rtt: &Samples,
        send: &Samples,
    ) -> io::Result<()> {
        for (i, (h, s)) in half_rtt.raw().iter().zip(send.raw()).enumerate() {
            writeln!(self.w, "{mode},{size},{i},{h},{s}")?;
        }
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_iteration_and_append_keeps_the_header_once() {
        let dir = std::env::temp_dir().join(format!("netgauge-raw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("raw.csv");
        let (mut h, mut s) = (Samples::new(), Samples::new());
        for i in 1..=3u64 {
            h.record_ns(i * 1000);
            s.record_ns(i * 10);
        }
        RawLog::open(&path, false)
            .unwrap()
            .write_step("edp", 64, &h, &s)
            .unwrap();
        RawLog::open(&path, true)
            .unwrap()
            .write_step("udp", 128, &h, &s)
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines.len(), 7, "{text}");
        assert_eq!(lines[1], "edp,64,0,1000,10");
        assert_eq!(lines[3], "edp,64,2,3000,30");
        assert_eq!(lines[6], "udp,128,2,3000,30");
        assert!(RawLog::open(&dir.join("missing/x"), true).is_err());
    }
}

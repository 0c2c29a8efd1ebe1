//! Latency statistics over the samples of one size step (hdrhistogram,
//! nanosecond resolution with 3 significant digits).

use hdrhistogram::Histogram;

/// Latency samples in nanoseconds.
pub struct Samples {
    hist: Histogram<u64>,
}

impl Default for Samples {
    fn default() -> Self {
        Self::new()
    }
}

/// Summary of a set of samples, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub avg: f64,
    /// Standard deviation, us (netgauge's long form). Serialized so that
    /// records read back from JSON (`--local -o`) keep it.
    #[serde(default)]
    pub stddev: f64,
    /// Samples outside avg +- 2 stddev (netgauge's long form).
    #[serde(default)]
    pub outliers: u64,
}

impl Samples {
    pub fn new() -> Self {
        // 1 ns .. 1000 s, 3 significant digits.
        Samples {
            hist: Histogram::new_with_bounds(1, 1_000_000_000_000, 3)
                .expect("static histogram bounds are valid"),
        }
    }

    /// Records one sample (ns); values beyond 1000 s are clamped.
    pub fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
    }

    /// Summary in microseconds; None without samples.
    pub fn summary(&self) -> Option<Summary> {
        if self.hist.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let h = &self.hist;
        let avg = h.mean();
        let sd = h.stdev();
        let lo = avg - 2.0 * sd;
        let hi = avg + 2.0 * sd;
        let outliers = h
            .iter_recorded()
            .filter(|v| {
                let x = v.value_iterated_to() as f64;
                x < lo || x > hi
            })
            .map(|v| v.count_at_value())
            .sum();
        Some(Summary {
            min: us(h.min()),
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
            avg: avg / 1000.0,
            stddev: sd / 1000.0,
            outliers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_known_samples() {
        let mut s = Samples::new();
        for i in 1..=1000u64 {
            s.record_ns(i * 1000); // 1..1000 us
        }
        let m = s.summary().unwrap();
        assert!((m.min - 1.0).abs() < 0.01);
        assert!((m.p50 - 500.0).abs() / 500.0 < 0.005, "{m:?}");
        assert!((m.p99 - 990.0).abs() / 990.0 < 0.005, "{m:?}");
        assert!((m.max - 1000.0).abs() / 1000.0 < 0.005);
        assert!((m.avg - 500.5).abs() < 1.0);
        assert!(Samples::new().summary().is_none());
    }
}

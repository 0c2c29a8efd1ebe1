//! The fault spec grammar (`loss=0.01,delay=50us,...`, netgauge's
//! `--fault`): [`FaultConfig::parse_spec`] and its inverse, `Display`.

use std::fmt;
use std::time::Duration;

use super::{BurstLoss, FaultConfig, FaultConfigError};

impl FaultConfig {
    /// Parses a comma-separated spec such as
    /// `loss=0.01,dup=0.001,reorder=0.02,reorder_delay=200us,corrupt=0.001,delay=50us,jitter=10us,rate=1G,queue=1000,burst=0.01/0.3/1,seed=7`.
    ///
    /// Probabilities are fractions in [0, 1] (`loss`, `dup`/`duplicate`,
    /// `reorder`, `corrupt`); `burst=P/R/H` gives Good->Bad, Bad->Good and the
    /// loss in Bad. Durations take a unit `ns`, `us`, `ms` or `s` (no unit:
    /// microseconds). `rate` is in bits/s with an optional `k`, `M` or `G`
    /// (powers of 1000) suffix. `queue`/`limit` is in frames. The empty string
    /// and `none` are the transparent config. [`FaultConfig`]'s `Display`
    /// writes this format.
    ///
    /// Errors: [`FaultConfigError::Spec`] for an unknown key or bad value, and
    /// the errors of [`FaultConfig::validate`].
    pub fn parse_spec(spec: &str) -> Result<Self, FaultConfigError> {
        let mut cfg = FaultConfig::default();
        if spec.trim() == "none" {
            return Ok(cfg);
        }
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = |reason: &str| FaultConfigError::Spec {
                item: item.to_string(),
                reason: reason.to_string(),
            };
            let (key, val) = item
                .split_once('=')
                .ok_or_else(|| bad("expected key=value"))?;
            let (key, val) = (key.trim(), val.trim());
            let prob = || -> Result<f64, FaultConfigError> {
                val.parse::<f64>()
                    .map_err(|_| bad("expected a probability (a fraction in [0, 1])"))
            };
            match key {
                "loss" => cfg.loss = prob()?,
                "dup" | "duplicate" => cfg.duplicate = prob()?,
                "reorder" => cfg.reorder = prob()?,
                "corrupt" => cfg.corrupt = prob()?,
                "reorder_delay" => cfg.reorder_delay = parse_duration(val).map_err(|r| bad(&r))?,
                "delay" => cfg.delay = parse_duration(val).map_err(|r| bad(&r))?,
                "jitter" => cfg.jitter = parse_duration(val).map_err(|r| bad(&r))?,
                "rate" => cfg.rate_bps = Some(parse_rate(val).map_err(|r| bad(&r))?),
                "queue" | "limit" => {
                    cfg.queue_limit = Some(
                        val.parse::<usize>()
                            .map_err(|_| bad("expected a frame count"))?,
                    )
                }
                "seed" => cfg.seed = val.parse::<u64>().map_err(|_| bad("expected a u64"))?,
                "burst" => {
                    let parts: Vec<&str> = val.split('/').collect();
                    if parts.len() != 3 {
                        return Err(bad("expected P/R/H (good->bad, bad->good, loss in bad)"));
                    }
                    let mut v = [0.0; 3];
                    for (slot, p) in v.iter_mut().zip(parts) {
                        *slot = p
                            .trim()
                            .parse::<f64>()
                            .map_err(|_| bad("expected three probabilities P/R/H"))?;
                    }
                    cfg.burst = Some(BurstLoss {
                        p_good_to_bad: v[0],
                        p_bad_to_good: v[1],
                        loss_in_bad: v[2],
                    });
                }
                _ => return Err(bad("unknown key (loss, dup, reorder, reorder_delay, corrupt, delay, jitter, rate, queue, burst, seed)")),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Formats `d` exactly with the largest of the units s, ms, us, ns that divides it.
fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0us".to_string();
    }
    for (unit, name) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        let whole = ns / unit;
        if whole * unit == ns {
            return format!("{whole}{name}");
        }
    }
    format!("{ns}ns")
}

impl fmt::Display for FaultConfig {
    /// The spec accepted by [`FaultConfig::parse_spec`], listing only the
    /// faults set (and the seed), e.g. `loss=0.01,delay=50us,seed=7`;
    /// `none` for a transparent config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = Vec::new();
        if self.loss != 0.0 {
            items.push(format!("loss={}", self.loss));
        }
        if let Some(b) = &self.burst {
            items.push(format!(
                "burst={}/{}/{}",
                b.p_good_to_bad, b.p_bad_to_good, b.loss_in_bad
            ));
        }
        if self.duplicate != 0.0 {
            items.push(format!("dup={}", self.duplicate));
        }
        if self.reorder != 0.0 {
            items.push(format!("reorder={}", self.reorder));
        }
        if !self.reorder_delay.is_zero() {
            items.push(format!(
                "reorder_delay={}",
                fmt_duration(self.reorder_delay)
            ));
        }
        if self.corrupt != 0.0 {
            items.push(format!("corrupt={}", self.corrupt));
        }
        if !self.delay.is_zero() {
            items.push(format!("delay={}", fmt_duration(self.delay)));
        }
        if !self.jitter.is_zero() {
            items.push(format!("jitter={}", fmt_duration(self.jitter)));
        }
        if let Some(r) = self.rate_bps {
            items.push(format!("rate={r}"));
        }
        if let Some(q) = self.queue_limit {
            items.push(format!("queue={q}"));
        }
        if items.is_empty() && self.seed == 0 {
            return f.write_str("none");
        }
        items.push(format!("seed={}", self.seed));
        f.write_str(&items.join(","))
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit_ns: u64 = match unit.trim() {
        "ns" => 1,
        "" | "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        u => return Err(format!("unknown duration unit {u:?} (ns, us, ms, s)")),
    };
    // Integers are exact; fractions go through f64 (rounded to the nanosecond).
    if let Ok(n) = num.parse::<u64>() {
        return n
            .checked_mul(unit_ns)
            .map(Duration::from_nanos)
            .ok_or_else(|| format!("duration {s:?} is too large"));
    }
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected a duration like 50us, got {s:?}"))?;
    let ns = (n * unit_ns as f64).round();
    if !(0.0..1.8e19).contains(&ns) {
        return Err(format!("duration {s:?} is out of range"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1e3),
        Some('m' | 'M') => (&s[..s.len() - 1], 1e6),
        Some('g' | 'G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected a rate in bit/s like 1G, got {s:?}"))?;
    let v = n * mult;
    if !(v >= 1.0 && v < u64::MAX as f64) {
        return Err(format!("rate {s:?} is out of range"));
    }
    Ok(v as u64)
}

//! `netgauge flood`: the attacker of the outage and flood measurements
//! (docs/measurements/outages.txt, `scripts/outage.sh`): raw frames from a
//! packet socket at a given rate or as fast as the machine sends them.
//!
//! Frames are ESP pure ACKs with random sequence, acknowledgement and
//! window (the blind attacker of RFC 5961), sent round-robin to the
//! `--to` destinations, from this host's own MAC (`--from own`, the
//! default), from a forged source (`--from MAC`: a learning switch then
//! moves that station's entry to this port, a blackhole for its traffic)
//! or with a foreign ethertype (`--ethertype foreign`, 0x88B4: the same
//! frames that no socket of the stack receives, the CPU and link cost of
//! the flood without its aim, the floor a flood is compared with).
//!
//! Bounded: `--seconds` (default 5) and `--count` (default unlimited)
//! stop it; sends are paced per millisecond below `--rate max`.

use std::io;
use std::time::{Duration, Instant};

use clap::Parser;
use edp::MacAddr;
use esp::wire::{emit_esp_frame, EspRepr, Flags, Seq, ETHERTYPE_ESP};
use link::eth::EthernetRepr;
use link::Link;
use link::{PacketConfig, PacketLink};
use rand::Rng;

/// An ethertype no socket of the stack receives (the floor's frames).
pub const FOREIGN: u16 = 0x88B4;
/// The ethertype the flood's own socket is bound to (it receives nothing:
/// nobody sends it).
const QUIET: u16 = 0x88B3;
/// Frames per sendmmsg(2).
const BATCH: usize = 64;

/// `netgauge flood` (see the module documentation).
#[derive(Debug, Parser)]
#[command(
    name = "netgauge flood",
    about = "send a flood of raw frames (outage and attack measurements)"
)]
pub struct FloodCmd {
    /// Interface to send on.
    #[arg(short = 'I', long = "iface")]
    pub iface: String,
    /// Destinations, `MAC[:PORT]` (ESP destination port; random when not
    /// given), comma separated; frames go to them in turn.
    #[arg(long = "to", value_delimiter = ',', required = true)]
    pub to: Vec<String>,
    /// Source MAC: `own` (the interface's) or a MAC to forge.
    #[arg(long = "from", default_value = "own")]
    pub from: String,
    /// `esp` (0x88B6), `foreign` (0x88B4, the floor) or a number.
    #[arg(long = "ethertype", default_value = "esp")]
    pub ethertype: String,
    /// Frames per second, or `max`.
    #[arg(long = "rate", default_value = "max")]
    pub rate: String,
    /// Stop after this many seconds.
    #[arg(long = "seconds", default_value_t = 5.0)]
    pub seconds: f64,
    /// Stop after this many frames (0: no limit).
    #[arg(long = "count", default_value_t = 0)]
    pub count: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// `MAC[:PORT]`.
fn target(s: &str) -> io::Result<(MacAddr, Option<u16>)> {
    let (mac, port) = match s.rsplit_once(':') {
        // A MAC has five colons; a port makes six.
        Some((m, p)) if s.matches(':').count() == 6 => (
            m,
            Some(
                p.parse::<u16>()
                    .map_err(|e| invalid(format!("port of {s:?}: {e}")))?,
            ),
        ),
        _ => (s, None),
    };
    let mac = mac
        .parse::<MacAddr>()
        .map_err(|e| invalid(format!("--to {s:?}: {e}")))?;
    Ok((mac, port))
}

impl FloodCmd {
    /// Sends the flood; prints what it sent.
    ///
    /// Errors: bad arguments; opening the packet socket (needs
    /// CAP_NET_RAW); a send error other than a full queue.
    pub fn run(&self) -> io::Result<()> {
        let targets = self
            .to
            .iter()
            .map(|s| target(s))
            .collect::<io::Result<Vec<_>>>()?;
        let ethertype = match self.ethertype.as_str() {
            "esp" => ETHERTYPE_ESP,
            "foreign" => FOREIGN,
            n => u16::from_str_radix(n.trim_start_matches("0x"), 16)
                .map_err(|e| invalid(format!("--ethertype {n:?}: {e}")))?,
        };
        let rate =
            match self.rate.as_str() {
                "max" => None,
                r => Some(r.parse::<u64>().ok().filter(|&r| r > 0).ok_or_else(|| {
                    invalid(format!("--rate {r:?}: frames per second > 0, or max"))
                })?),
            };
        let mut link = PacketLink::open(
            &self.iface,
            &PacketConfig {
                ethertype: QUIET,
                ..PacketConfig::default()
            },
        )?;
        let src = match self.from.as_str() {
            "own" => link.mac(),
            m => m
                .parse::<MacAddr>()
                .map_err(|e| invalid(format!("--from {m:?}: {e}")))?,
        };
        let mut rng = rand::rng();
        let mut bufs = vec![[0u8; 64]; BATCH];
        let limit = Duration::from_secs_f64(self.seconds.max(0.0));
        let start = Instant::now();
        let (mut sent, mut full, mut next) = (0u64, 0u64, 0usize);
        loop {
            let elapsed = start.elapsed();
            if elapsed >= limit || (self.count > 0 && sent >= self.count) {
                break;
            }
            let due = match rate {
                None => BATCH as u64,
                Some(r) => {
                    let owed = (r as f64 * elapsed.as_secs_f64()) as u64;
                    owed.saturating_sub(sent).min(BATCH as u64)
                }
            };
            let due = if self.count > 0 {
                due.min(self.count - sent)
            } else {
                due
            };
            if due == 0 {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
            let mut lens = [0usize; BATCH];
            for (i, b) in bufs.iter_mut().take(due as usize).enumerate() {
                let (dst, port) = targets[next % targets.len()];
                next += 1;
                let repr = EspRepr {
                    src_port: rng.random_range(1024..=u16::MAX),
                    dst_port: port.unwrap_or_else(|| rng.random_range(1024..=u16::MAX)),
                    flags: Flags::ACK,
                    seq: Seq(rng.random()),
                    ack: Seq(rng.random()),
                    window: rng.random(),
                    ..Default::default()
                };
                let eth = EthernetRepr {
                    dst,
                    src,
                    ethertype,
                };
                lens[i] = emit_esp_frame(b, &eth, &repr, &[])
                    .map_err(|e| invalid(format!("building a frame: {e}")))?;
            }
            let frames: Vec<&[u8]> = bufs
                .iter()
                .zip(&lens)
                .take(due as usize)
                .map(|(b, &l)| &b[..l])
                .collect();
            match link.send_batch(&frames) {
                Ok(k) => sent += k as u64,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    full += 1;
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "flood: {sent} frames in {secs:.2} s ({:.0} frames/s), from {src}, ethertype {ethertype:#06x}, to {}; queue full {full} times",
            sent as f64 / secs.max(1e-9),
            self.to.join(",")
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_and_without_a_port() {
        let (m, p) = target("02:00:00:00:00:01").unwrap();
        assert_eq!((m, p), ("02:00:00:00:00:01".parse().unwrap(), None));
        let (m, p) = target("02:00:00:00:00:01:19470").unwrap();
        assert_eq!((m, p), ("02:00:00:00:00:01".parse().unwrap(), Some(19470)));
        assert!(target("02:00:00:00:00:01:x").is_err());
        assert!(target("nonsense").is_err());
    }
}

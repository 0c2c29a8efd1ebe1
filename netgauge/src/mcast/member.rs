//! One MAK run on a cluster: host 0 sends, hosts 1..=n receive, each member
//! a thread inside its host's namespace (`vcluster::Host::spawn`), all on
//! one monotonic clock, so "until the last receiver has it" is measured
//! directly: every receiver stamps each message as `recv` returns it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use link::fault::FaultConfig;
use mak::socket::{
    EdpCarrier, EdpGroup, GroupMessage, GroupSpec, MakConfig, MakSocket, MakStats, Peer,
    UdpCarrier, UdpGroup,
};
use mak::Strategy;
use runtime::EthAddr;
use vcluster::{Cluster, Host};

use super::config::{Carrier, McastConfig, Measure, Run};
use super::outcome::{Counters, Outcome};

/// A member socket over either carrier.
pub enum Member {
    Edp(MakSocket<EdpCarrier>),
    Udp(MakSocket<UdpCarrier>),
}

impl Member {
    fn send(&self, d: &[u8]) -> std::io::Result<u32> {
        match self {
            Member::Edp(s) => s.send(d),
            Member::Udp(s) => s.send(d),
        }
    }
    fn recv(&self) -> std::io::Result<GroupMessage> {
        match self {
            Member::Edp(s) => s.recv(),
            Member::Udp(s) => s.recv(),
        }
    }
    fn flush(&self, t: Duration) -> std::io::Result<bool> {
        match self {
            Member::Edp(s) => s.flush(Some(t)),
            Member::Udp(s) => s.flush(Some(t)),
        }
    }
    fn poll(&self, t: Duration) -> std::io::Result<()> {
        match self {
            Member::Edp(s) => s.poll(t),
            Member::Udp(s) => s.poll(t),
        }
    }
    fn stats(&self) -> MakStats {
        match self {
            Member::Edp(s) => s.stats(),
            Member::Udp(s) => s.stats(),
        }
    }
    fn lost_seqs(&self) -> Vec<u32> {
        match self {
            Member::Edp(s) => s.with_core(|c, _| c.fault_lost().to_vec()),
            Member::Udp(s) => s.with_core(|c, _| c.fault_lost().to_vec()),
        }
    }
    fn silent(&self) -> Vec<String> {
        let names = |v: Vec<String>| v;
        match self {
            Member::Edp(s) => names(s.silent_members().into_iter().map(|p| p.name).collect()),
            Member::Udp(s) => names(s.silent_members().into_iter().map(|p| p.name).collect()),
        }
    }
    fn set_read_timeout(&mut self, t: Duration) {
        let _ = match self {
            Member::Edp(s) => s.set_read_timeout(Some(t)),
            Member::Udp(s) => s.set_read_timeout(Some(t)),
        };
    }
}

/// The protocol configuration of strategy `s` for this run.
pub fn config(o: &McastConfig, s: Strategy, seed: u64, loss: f64) -> MakConfig {
    let mut c = MakConfig::default().with_strategy(s);
    c.seed = Some(seed);
    c.wait = o.wait;
    c.protocol.window = match s {
        // The paper's NAK needs a large buffer (§3.1): its window frees only
        // by the linger, W packets per linger.
        Strategy::Nak => o.nak_window,
        _ => o.window,
    };
    c.protocol.ack_timeout = o.tw;
    c.protocol.suppression = o.tw;
    c.protocol.nak_delay_max = o.dmax;
    c.protocol.resend_dedup = o.dmax;
    c.protocol.nak_linger = Some(o.nak_linger);
    c.protocol.send_buffer_bytes = 256 << 20;
    c.protocol.recv_buffer_bytes = 64 << 20;
    if loss > 0.0 {
        c.link_fault = Some(FaultConfig::seeded(seed).with_loss(loss));
    }
    c
}

fn bind(
    hosts: &[Host],
    i: usize,
    via: Carrier,
    group: u16,
    port: u16,
    cfg: MakConfig,
) -> std::io::Result<Member> {
    let me = i as u16;
    fn role<A: mak::Addr>(i: usize, spec: GroupSpec<A>) -> GroupSpec<A> {
        if i == 0 {
            spec.sender()
        } else {
            spec.receive_from(0)
        }
    }
    let h = &hosts[i];
    match via {
        Carrier::Edp => {
            let peers: Vec<Peer<EthAddr>> = hosts
                .iter()
                .map(|h| {
                    Peer::new(
                        h.index as u16,
                        EthAddr::new(h.mac, port),
                        format!("h{}", h.index),
                    )
                })
                .collect();
            MakSocket::bind_edp(
                &h.iface,
                EdpGroup::new(group, port),
                role(i, GroupSpec::new(group, me, peers)),
                cfg,
            )
            .map(Member::Edp)
        }
        Carrier::Udp => {
            let peers: Vec<Peer<SocketAddr>> = hosts
                .iter()
                .map(|h| {
                    Peer::new(
                        h.index as u16,
                        SocketAddr::from((h.ip, port)),
                        format!("h{}", h.index),
                    )
                })
                .collect();
            MakSocket::bind_udp(
                UdpGroup::new(super::GROUP_IP, port),
                role(i, GroupSpec::new(group, me, peers)),
                cfg,
            )
            .map(Member::Udp)
        }
    }
}

/// Payloads: 16 distinct patterns, each stamped with its message number in
/// its first 8 bytes when it has room (checked by the receivers).
pub struct Payloads {
    bufs: Vec<Vec<u8>>,
}

impl Payloads {
    pub fn new(size: usize) -> Self {
        Self {
            bufs: (0..16)
                .map(|i| testkit::pattern::pattern(size, i as u64))
                .collect(),
        }
    }
    pub fn get(&self, k: usize) -> Vec<u8> {
        let mut b = self.bufs[k % 16].clone();
        if b.len() >= 8 {
            b[..8].copy_from_slice(&(k as u64).to_le_bytes());
        }
        b
    }
    pub fn check(&self, k: usize, data: &[u8]) -> bool {
        let want = &self.bufs[k % 16];
        if data.len() != want.len() {
            return false;
        }
        if data.len() >= 8 {
            data[..8] == (k as u64).to_le_bytes() && data[8..] == want[8..]
        } else {
            data == &want[..]
        }
    }
}

/// Deliveries so far per receiver, for a sender waiting in latency mode.
struct Progress {
    counts: Mutex<Vec<usize>>,
    cv: Condvar,
}

/// Runs strategy `s` from host 0 to hosts 1..=n.
pub fn run(
    net: &Cluster,
    o: &McastConfig,
    via: Carrier,
    s: Strategy,
    r: &Run,
) -> std::io::Result<Outcome> {
    let Run {
        n,
        size,
        count,
        measure,
        loss,
        run_id,
    } = *r;
    let port = r.port();
    let group = run_id;
    let start = Arc::new(Barrier::new(n + 1));
    let done = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress {
        counts: Mutex::new(vec![0; n]),
        cv: Condvar::new(),
    });
    let payloads = Arc::new(Payloads::new(size));
    let limit = o.timeout;
    let mut rx = Vec::new();
    for i in 1..=n {
        let (start, done, progress, payloads) = (
            start.clone(),
            done.clone(),
            progress.clone(),
            payloads.clone(),
        );
        let hosts = net.hosts()[..=n].to_vec();
        let cfg = config(o, s, 7919 * u64::from(run_id) + i as u64, loss);
        let verify = o.verify;
        rx.push(net.host(i).spawn(move || -> std::io::Result<ReceiverOut> {
            let mut m = match bind(&hosts, i, via, group, port, cfg) {
                Ok(m) => m,
                Err(e) => {
                    start.wait();
                    return Err(e);
                }
            };
            m.set_read_timeout(limit);
            start.wait();
            let mut stamps = Vec::with_capacity(count);
            let mut bad = 0usize;
            for k in 0..count {
                let msg = m.recv()?;
                let t = Instant::now();
                if msg.msg != k as u32 || (verify && !payloads.check(k, &msg.data)) {
                    bad += 1;
                }
                stamps.push(t);
                if measure == Measure::Latency {
                    let mut c = progress.counts.lock().unwrap();
                    c[i - 1] = k + 1;
                    progress.cv.notify_all();
                }
            }
            if measure != Measure::Latency {
                progress.counts.lock().unwrap()[i - 1] = count;
                progress.cv.notify_all();
            }
            // Keep acknowledging until the sender is done.
            let until = Instant::now() + limit;
            while !done.load(Ordering::Acquire) && Instant::now() < until {
                m.poll(Duration::from_millis(2))?;
            }
            Ok(ReceiverOut {
                stamps,
                bad,
                stats: m.stats(),
                lost: m.lost_seqs(),
            })
        }));
    }
    let hosts = net.hosts()[..=n].to_vec();
    let cfg = config(o, s, 7919 * u64::from(run_id), 0.0);
    let drive = o.pace == super::config::Pace::Drive;
    let (prog, pay, st, dn) = (
        progress.clone(),
        payloads.clone(),
        start.clone(),
        done.clone(),
    );
    let sent = net.host(0).spawn(move || -> std::io::Result<SenderOut> {
        let m = bind(&hosts, 0, via, group, port, cfg);
        st.wait();
        let m = m?;
        let mut send_at = Vec::with_capacity(count);
        let t0 = Instant::now();
        let all_have = |k: usize| prog.counts.lock().unwrap().iter().all(|&x| x >= k);
        let wait_all = |k: usize| -> bool {
            let mut c = prog.counts.lock().unwrap();
            let until = Instant::now() + limit;
            while c.iter().any(|&x| x < k) {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                c = prog.cv.wait_timeout(c, left).unwrap().0;
            }
            true
        };
        for k in 0..count {
            let d = pay.get(k);
            send_at.push(Instant::now());
            m.send(&d)?;
            if measure == Measure::Latency && drive {
                // Keep the protocol going (ACKs in, the next packet of a
                // stop-and-wait baseline out) while the receivers take it.
                let until = Instant::now() + limit;
                while !all_have(k + 1) && Instant::now() < until {
                    m.poll(Duration::from_micros(20))?;
                }
            }
            if measure == Measure::Latency && !wait_all(k + 1) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("message {k} did not reach every receiver within {limit:?}"),
                ));
            }
        }
        let all = wait_all(count);
        let flushed = m.flush(limit)?;
        dn.store(true, Ordering::Release);
        Ok(SenderOut {
            t0,
            send_at,
            all,
            flushed,
            stats: m.stats(),
            silent: m.silent(),
        })
    });
    let so = sent.join().expect("sender thread");
    done.store(true, Ordering::Release);
    let mut outs = Vec::new();
    for h in rx {
        outs.push(h.join().expect("receiver thread"));
    }
    let so = so?;
    let outs: Vec<ReceiverOut> = outs.into_iter().collect::<Result<_, _>>()?;
    Ok(summarize(so, outs, s, via, n, size, count, measure, loss))
}

struct ReceiverOut {
    stamps: Vec<Instant>,
    bad: usize,
    stats: MakStats,
    lost: Vec<u32>,
}

struct SenderOut {
    t0: Instant,
    send_at: Vec<Instant>,
    all: bool,
    flushed: bool,
    stats: MakStats,
    silent: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    so: SenderOut,
    outs: Vec<ReceiverOut>,
    s: Strategy,
    via: Carrier,
    n: usize,
    size: usize,
    count: usize,
    measure: Measure,
    loss: f64,
) -> Outcome {
    let last = |k: usize| outs.iter().map(|o| o.stamps[k]).max().expect("receivers");
    let mut lat_ns: Vec<u64> = Vec::new();
    if measure == Measure::Latency {
        let warm = count / 10;
        for k in warm..count {
            lat_ns.push(last(k).saturating_duration_since(so.send_at[k]).as_nanos() as u64);
        }
    }
    let end = last(count - 1);
    let elapsed = end.saturating_duration_since(so.t0);
    let mut c = Counters::default();
    let ss = so.stats.sender.unwrap_or_default();
    c.data = ss.data_sent;
    c.retx_nak = ss.retx_nak;
    c.retx_timeout = ss.retx_timeout;
    c.retx_tail = ss.retx_tail;
    c.acks_received = ss.acks_received;
    let mut distinct: Vec<u32> = Vec::new();
    for o in &outs {
        c.acks_sent += o.stats.acks_sent();
        c.naks_sent += o.stats.naks_sent();
        c.naks_suppressed += o.stats.naks_suppressed();
        c.nak_entries_suppressed += o
            .stats
            .receivers
            .iter()
            .map(|(_, r)| r.nak_entries_suppressed)
            .sum::<u64>();
        c.lost_frames += o.stats.carrier.fault_rx_data_lost;
        c.lost_retx += o.stats.carrier.fault_rx_retx_lost;
        distinct.extend_from_slice(&o.lost);
        c.bad += o.bad as u64;
    }
    distinct.sort_unstable();
    distinct.dedup();
    c.lost_distinct = distinct.len() as u64;
    Outcome {
        mode: super::config::mode_name(s),
        carrier: via,
        receivers: n,
        size,
        count,
        measure,
        loss,
        elapsed,
        latency_ns: lat_ns,
        complete: so.all && so.flushed && c.bad == 0,
        silent: so.silent,
        counters: c,
    }
}

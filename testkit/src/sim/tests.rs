use std::time::{Duration, Instant};

use super::*;

const GROUP: MacAddr = MacAddr([0x01, 0, 0x5e, 0, 0, 7]);

/// Sends `count` frames to `to`, one every `gap`; counts what it receives.
struct Pinger {
    port: Port,
    to: MacAddr,
    count: usize,
    gap: Duration,
    next: Option<Instant>,
    sent: usize,
    got: usize,
}

impl Pinger {
    fn new(port: Port, to: MacAddr, count: usize, gap: Duration) -> Self {
        Self {
            port,
            to,
            count,
            gap,
            next: None,
            sent: 0,
            got: 0,
        }
    }
}

impl Node for Pinger {
    fn step(&mut self, now: Instant) -> bool {
        let mut moved = false;
        let mut buf = [0u8; 1514];
        while let Ok(n) = self.port.recv(&mut buf) {
            tracing::debug!(len = n, "got a frame");
            self.got += 1;
            moved = true;
        }
        let next = *self.next.get_or_insert(now);
        if self.sent < self.count && next <= now {
            let mut frame = [0u8; 60];
            frame[..6].copy_from_slice(&self.to.octets());
            frame[6..12].copy_from_slice(&self.port.mac().octets());
            frame[14] = self.sent as u8;
            self.port.send(&frame).unwrap();
            tracing::debug!(n = self.sent, "sent a frame");
            self.sent += 1;
            self.next = Some(now + self.gap);
            moved = true;
        }
        moved
    }

    fn poll_at(&mut self) -> Option<Instant> {
        let own = self.next.filter(|_| self.sent < self.count);
        [own, self.port.next_delivery()].into_iter().flatten().min()
    }

    fn summary(&self) -> String {
        format!("sent {} got {}", self.sent, self.got)
    }
}

fn delay(seed: u64, us: u64) -> FaultConfig {
    FaultConfig::seeded(seed).with_delay(Duration::from_micros(us), Duration::ZERO)
}

fn pair(count: usize, ab: FaultConfig, ba: FaultConfig) -> Sim<Vec<Pinger>> {
    let mut sim = Sim::new(["a", "b"]);
    let ports = sim.pair(mtu(1500), ab, ba);
    let macs = [ports[0].mac(), ports[1].mac()];
    let gap = Duration::from_micros(100);
    sim.populate(ports, |i, p| Pinger::new(p, macs[1 - i], count, gap))
}

#[test]
fn a_pair_runs_until_idle_on_the_virtual_clock() {
    let mut sim = pair(10, delay(1, 30), delay(2, 30));
    assert_eq!(sim.drive(Duration::from_secs(1)), Stop::Idle);
    assert_eq!((sim[0].got, sim[1].got), (10, 10));
    // The last frame left at 900 us and took 30 us.
    assert_eq!(sim.elapsed(), Duration::from_micros(930));
    assert_eq!(sim.link_stats(0).sent, 10);
}

#[test]
fn a_run_stops_at_its_condition_or_its_limit() {
    let mut sim = pair(10, delay(1, 30), delay(2, 30));
    let stop = sim.run_until(Duration::from_secs(1), |s| s[1].got == 3);
    assert_eq!((stop, sim[1].got), (Stop::Done, 3));
    assert_eq!(sim.elapsed(), Duration::from_micros(230));
    let stop = sim.run_until(Duration::from_micros(100), |_| false);
    assert_eq!(stop, Stop::TimeLimit);
    assert!(sim.elapsed() < Duration::from_micros(330));
}

#[test]
#[should_panic(expected = "simulation stalled with nothing pending")]
fn run_panics_when_the_simulation_stalls() {
    let mut sim = pair(1, delay(1, 30), delay(2, 30));
    sim.run(Duration::from_secs(1), |_| false);
}

#[test]
fn same_seeds_same_wire_different_seeds_another() {
    let run = |seed| {
        let lossy = |s| {
            delay(s, 20)
                .with_loss(0.3)
                .with_reorder(0.2, Duration::ZERO)
        };
        let mut sim = pair(200, lossy(seed), lossy(seed + 1));
        sim.drive(Duration::from_secs(1));
        (sim.wire_hash(0), sim.wire_hash(1), sim[0].got, sim[1].got)
    };
    assert_eq!(run(5), run(5));
    let (x, y) = (run(5), run(6));
    assert_ne!((x.2, x.3), (y.2, y.3), "the seed decides the losses");
}

#[test]
fn each_nodes_events_are_kept_under_its_name() {
    if std::env::var_os("SIM_TRACE").is_some() {
        return; // the filter is the caller's
    }
    let mut sim = pair(2, delay(1, 10), delay(2, 10));
    sim.tracer()
        .in_sim(|| tracing::debug!("an event outside any node"));
    sim.drive(Duration::from_secs(1));
    let a = sim.tracer().lines(Some(0));
    let b = sim.tracer().lines(Some(1));
    assert_eq!(a.len(), 4, "{a:?}");
    assert!(
        a[0].starts_with("   0.000000s DEBUG testkit::sim::tests: sent a frame n=0"),
        "{a:?}"
    );
    assert!(a[1].contains("got a frame len=60"), "{a:?}");
    assert!(b[3].starts_with("   0.000110s DEBUG"), "{b:?}");
    assert_eq!(sim.tracer().lines(None).len(), 1);
}

#[test]
fn a_pulled_cable_loses_frames_until_plugged_back() {
    let mut sim = pair(10, delay(1, 0), delay(2, 0));
    sim.run(Duration::from_secs(1), |s| s[1].got == 2);
    sim.unplug(0);
    let t = sim.now() + Duration::from_micros(450);
    sim.run(Duration::from_secs(1), |s| s.now() >= t);
    sim.plug(0);
    sim.drive(Duration::from_secs(1));
    // Frames 2..=6 (at 200..600 us) were lost, each way.
    assert_eq!((sim[0].got, sim[1].got), (5, 5));
    assert_eq!(sim.link_stats(0).partitioned, 5);
}

#[test]
fn a_stopped_node_is_not_stepped_and_its_frames_wait() {
    let mut sim = pair(3, delay(1, 10), delay(2, 10));
    sim.set_running(&[0]);
    assert!(!sim.is_running(1));
    assert_eq!(sim.drive(Duration::from_secs(1)), Stop::Idle);
    assert_eq!((sim[0].sent, sim[1].sent, sim[1].got), (3, 0, 0));
    assert_eq!(sim[1].port.pending(), 3);
    sim.set_running(&[0, 1]);
    sim.drive(Duration::from_secs(1));
    assert_eq!((sim[0].got, sim[1].got), (3, 3));
}

#[test]
fn cables_give_each_receiver_its_own_fates() {
    const N: usize = 6;
    let mut sim = Sim::new((0..N).map(|i| format!("n{i}")));
    let cables = (0..N)
        .map(|i| Cable {
            up: delay(10 + i as u64, 5),
            down: delay(20 + i as u64, 5).with_loss(if i == 0 { 0.0 } else { 0.5 }),
        })
        .collect();
    let mut ports = sim.cabled_switch(mtu(1500), cables);
    for p in &mut ports[1..] {
        p.join_group(GROUP).unwrap();
    }
    let mut sim = sim.populate(ports, |i, p| {
        let count = if i == 0 { 100 } else { 0 };
        Pinger::new(p, GROUP, count, Duration::from_micros(10))
    });
    sim.drive(Duration::from_secs(1));
    let got: Vec<usize> = sim.iter().map(|n| n.got).collect();
    assert_eq!(got[0], 0, "the sender did not join");
    assert!(got[1..].iter().all(|&g| (25..75).contains(&g)), "{got:?}");
    assert!(got[1..].windows(2).any(|w| w[0] != w[1]), "{got:?}");
    let (up, down) = sim.fault_stats(1);
    assert_eq!(up.frames, 0);
    assert_eq!(down.frames, 100);
    assert_eq!(down.lost as usize, 100 - got[1]);
    // Through the cable and the switch: 5 us up and 5 us down.
    assert_eq!(sim.elapsed(), Duration::from_micros(990 + 10));
}

#[test]
fn pace_max_and_min_steps() {
    let mut sim = pair(2, delay(1, 0), delay(2, 0));
    sim.pace.max_step = Some(Duration::from_micros(30));
    sim.pace.min_step = Duration::from_micros(1);
    let mut visits = Vec::new();
    sim.run_until(Duration::from_micros(200), |s| {
        visits.push(s.elapsed().as_micros());
        false
    });
    // Never idle: the clock moves by at most 30 us, and by 1 us when the
    // next event is due at once (the frames sent at 0 arrive at 0).
    assert_eq!(&visits[..6], &[0, 1, 31, 61, 91, 100]);
}

#[test]
fn settle_runs_one_instant_until_quiet() {
    let mut sim = pair(1, delay(1, 0), delay(2, 0));
    sim.pace.settle = true;
    sim.settle();
    assert_eq!((sim[0].got, sim[1].got), (1, 1));
    assert_eq!(sim.elapsed(), Duration::ZERO);
    assert_eq!(sim.next_event(), None);
    sim.wake_at(sim.now() + Duration::from_millis(1));
    assert_eq!(sim.next_event(), Some(sim.now() + Duration::from_millis(1)));
}

//! The references measured beside the reliable modes in the same run:
//!
//! - `raw`: unreliable multicast on the same carrier (EDP datagrams to the
//!   group MAC, or UDP datagrams to the IPv4 group), receivers only count
//!   and stamp. It is the floor of this machine: what N receiver processes
//!   sharing its CPUs can take, with no protocol at all. In latency mode a
//!   frame lost is waited for at most 20 ms and counted; in stream mode the
//!   sender does not wait, and each receiver's rate is what it could take.
//! - `esp`: one 1 -> 1 ESP stream from host 0 to host 1, the reliable
//!   unicast throughput of the same link.

use std::io::{self, Read, Write};
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use edp::{EdpConfig, EdpSocket, MacAddr};
use esp::config::EspConfig;
use esp::socket::{EspListener, EspStream};
use mak::socket::group_mac;
use socket2::{Domain, Protocol, Socket, Type};
use vcluster::{Cluster, Host};

use super::config::{Carrier, McastConfig, Measure, Run};
use super::outcome::{Counters, Outcome};

enum Raw {
    Edp(EdpSocket, MacAddr),
    Udp(UdpSocket),
}

fn open(h: &Host, via: Carrier, port: u16, o: &McastConfig) -> io::Result<Raw> {
    match via {
        Carrier::Edp => {
            let cfg = EdpConfig {
                wait: o.wait,
                recv_buffer: 64 << 20,
                ..EdpConfig::default()
            };
            let s = EdpSocket::bind_with((h.iface.as_str(), port), cfg)?;
            let g = group_mac(port);
            s.runtime().join_group(g)?;
            Ok(Raw::Edp(s, g))
        }
        Carrier::Udp => {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            let _ = s.set_recv_buffer_size(8 << 20);
            s.bind(&SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, port).into())?;
            s.join_multicast_v4(&super::GROUP_IP, &h.ip)?;
            s.set_multicast_if_v4(&h.ip)?;
            s.set_multicast_loop_v4(false)?;
            s.set_multicast_all_v4(false)?;
            Ok(Raw::Udp(s.into()))
        }
    }
}

impl Raw {
    fn send(&mut self, d: &[u8], port: u16) -> io::Result<()> {
        match self {
            Raw::Edp(s, g) => s.send_to(d, (*g, port)).map(|_| ()),
            Raw::Udp(s) => s
                .send_to(d, SocketAddrV4::new(super::GROUP_IP, port))
                .map(|_| ()),
        }
    }
    fn recv(&mut self, buf: &mut [u8], t: Duration) -> io::Result<usize> {
        match self {
            Raw::Edp(s, _) => {
                s.set_read_timeout(Some(t))?;
                s.recv_from(buf).map(|r| r.0)
            }
            Raw::Udp(s) => {
                s.set_read_timeout(Some(t))?;
                s.recv(buf)
            }
        }
    }
}

/// Unreliable multicast of `count` messages (frames of at most one
/// datagram) from host 0 to hosts 1..=n.
pub fn raw(net: &Cluster, o: &McastConfig, via: Carrier, r: &Run) -> io::Result<Outcome> {
    let Run {
        n,
        size,
        count,
        measure,
        ..
    } = *r;
    let port = r.port();
    let max = match via {
        Carrier::Edp => net.mtu() - 6,
        Carrier::Udp => net.mtu() - 28,
    };
    let frame = size.clamp(8, max);
    // A stream of large messages is sent as that many bytes of full frames.
    let frames = if measure == Measure::Stream {
        (count * size).div_ceil(frame)
    } else {
        count
    };
    let start = Arc::new(Barrier::new(n + 1));
    let done = Arc::new(AtomicBool::new(false));
    let got = Arc::new((Mutex::new(vec![0usize; n]), Condvar::new()));
    let mut rx = Vec::new();
    for i in 1..=n {
        let (h, start, done, got, o2) = (
            net.host(i).clone(),
            start.clone(),
            done.clone(),
            got.clone(),
            o.clone(),
        );
        rx.push(
            net.host(i)
                .spawn(move || -> io::Result<Vec<Option<Instant>>> {
                    let s = open(&h, via, port, &o2);
                    start.wait();
                    let mut s = s?;
                    let mut stamps = vec![None; frames];
                    let mut buf = vec![0u8; 65536];
                    let mut have = 0;
                    while have < frames {
                        match s.recv(&mut buf, Duration::from_millis(50)) {
                            Ok(len) if len >= 8 => {
                                let k = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"))
                                    as usize;
                                if k < frames && stamps[k].is_none() {
                                    stamps[k] = Some(Instant::now());
                                    have += 1;
                                    if measure == Measure::Latency {
                                        got.0.lock().unwrap()[i - 1] = k + 1;
                                        got.1.notify_all();
                                    }
                                }
                            }
                            Ok(_) => {}
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                                ) =>
                            {
                                if done.load(Ordering::Acquire) {
                                    break;
                                }
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(stamps)
                }),
        );
    }
    let (h0, o2, start2, got2) = (net.host(0).clone(), o.clone(), start.clone(), got.clone());
    let sender = net
        .host(0)
        .spawn(move || -> io::Result<(Instant, Vec<Instant>, u64)> {
            let s = open(&h0, via, port, &o2);
            start2.wait();
            let mut s = s?;
            let mut buf = testkit::pattern::pattern(frame, 3);
            let mut at = Vec::with_capacity(frames);
            let mut lost_waits = 0;
            let t0 = Instant::now();
            for k in 0..frames {
                buf[..8].copy_from_slice(&(k as u64).to_le_bytes());
                at.push(Instant::now());
                s.send(&buf, port)?;
                if measure == Measure::Latency {
                    let until = Instant::now() + Duration::from_millis(20);
                    let mut c = got2.0.lock().unwrap();
                    while c.iter().any(|&x| x < k + 1) {
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            lost_waits += 1;
                            break;
                        }
                        c = got2.1.wait_timeout(c, left).unwrap().0;
                    }
                }
            }
            Ok((t0, at, lost_waits))
        });
    let (t0, send_at, lost_waits) = sender.join().expect("raw sender")?;
    std::thread::sleep(Duration::from_millis(100));
    done.store(true, Ordering::Release);
    let mut stamps = Vec::new();
    for h in rx {
        stamps.push(h.join().expect("raw receiver")?);
    }
    let mut c = Counters {
        data: frames as u64,
        ..Counters::default()
    };
    let received: Vec<usize> = stamps.iter().map(|s| s.iter().flatten().count()).collect();
    c.lost_frames = received.iter().map(|r| (frames - r) as u64).sum();
    let _ = lost_waits;
    let mut latency_ns = Vec::new();
    let elapsed;
    let mut count_eff = count;
    match measure {
        Measure::Latency => {
            for k in count / 10..count {
                let all: Option<Vec<Instant>> = stamps.iter().map(|s| s[k]).collect();
                if let Some(all) = all {
                    let last = all.into_iter().max().expect("receivers");
                    latency_ns.push(last.saturating_duration_since(send_at[k]).as_nanos() as u64);
                }
            }
            elapsed = stamps
                .iter()
                .filter_map(|s| s.iter().flatten().max())
                .max()
                .map_or(Duration::ZERO, |t| t.saturating_duration_since(t0));
        }
        Measure::Stream => {
            // The slowest receiver's own rate: what it took, over the time
            // it took it, scaled to the whole stream.
            let worst = stamps
                .iter()
                .zip(&received)
                .map(|(s, &r)| {
                    let last = s.iter().flatten().max().copied().unwrap_or(t0);
                    let took = last.saturating_duration_since(t0).as_secs_f64();
                    took / (r.max(1) as f64 / frames as f64)
                })
                .fold(0.0, f64::max);
            elapsed = Duration::from_secs_f64(worst);
            count_eff = count;
        }
    }
    Ok(Outcome {
        mode: "raw",
        carrier: via,
        receivers: n,
        size,
        count: count_eff,
        measure,
        loss: 0.0,
        elapsed,
        latency_ns,
        complete: c.lost_frames == 0,
        silent: Vec::new(),
        counters: c,
    })
}

/// One ESP stream of `count * size` bytes from host 0 to host 1, written in
/// `size`-byte pieces: time until the receiver read the last byte.
pub fn esp(net: &Cluster, o: &McastConfig, r: &Run) -> io::Result<Outcome> {
    let Run { size, count, .. } = *r;
    let port = r.port();
    let total = count * size;
    let cfg = EspConfig {
        wait: o.wait,
        ..EspConfig::default()
    };
    let (b, cfg2) = (net.host(1).clone(), cfg.clone());
    let listening = Arc::new(Barrier::new(2));
    let l2 = listening.clone();
    let server = net.host(1).spawn(move || -> io::Result<Instant> {
        let l = EspListener::bind_with(&b.iface, port, cfg2);
        l2.wait();
        let (mut s, _) = l?.accept()?;
        let mut buf = vec![0u8; 1 << 16];
        let mut left = total;
        while left > 0 {
            let k = s.read(&mut buf[..left.min(1 << 16)])?;
            if k == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "esp stream ended early",
                ));
            }
            left -= k;
        }
        let t = Instant::now();
        let _ = s.close(Some(Duration::from_millis(200)));
        Ok(t)
    });
    let (a, mac) = (net.host(0).clone(), net.host(1).mac);
    let timeout = o.timeout;
    let client = net.host(0).spawn(move || -> io::Result<Instant> {
        listening.wait();
        let mut s = EspStream::connect_timeout_with(&a.iface, mac, port, cfg, timeout)?;
        let data = testkit::pattern::pattern(size.max(1), 5);
        let t0 = Instant::now();
        for _ in 0..count {
            s.write_all(&data[..size])?;
        }
        let _ = s.close(Some(timeout));
        Ok(t0)
    });
    let t0 = client.join().expect("esp client")?;
    let t1 = server.join().expect("esp server")?;
    Ok(Outcome {
        mode: "esp",
        carrier: Carrier::Edp,
        receivers: 1,
        size,
        count,
        measure: Measure::Stream,
        loss: 0.0,
        elapsed: t1.saturating_duration_since(t0),
        latency_ns: Vec::new(),
        complete: true,
        silent: Vec::new(),
        counters: Counters::default(),
    })
}

//! CTP request/reply over EDP, unprivileged: a server answers each request
//! (command 1) with a reply (command 2) carrying the request's bytes
//! reversed. The EDP frames ride in UDP datagrams on loopback (`UdpLink`);
//! on a real interface use `CtpSocket::bind_edp(iface, port, cfg)`, or
//! `CtpSocket::bind_udp(addr, cfg)` for CTP over kernel UDP.
//!
//! Run: `cargo run -p ctp --example ctp_request_reply [COUNT]`

use std::time::{Duration, Instant};

use ctp::{CtpConfig, CtpSocket, Delivery, Options};
use edp::MacAddr;
use link::{UdpConfig, UdpLink};
use runtime::Runtime;

const REQUEST: u16 = 1;
const REPLY: u16 = 2;
const QUIT: u16 = 3;
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn socket(link: UdpLink, port: u16) -> std::io::Result<CtpSocket<ctp::EdpTransport>> {
    let cfg = CtpConfig::default();
    let rt = Runtime::with_link(Box::new(link), cfg.runtime.clone())?;
    CtpSocket::bind_on(&rt, port, cfg)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let count: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("COUNT: a number of requests"))
        .unwrap_or(100);
    let (mac_s, mac_c) = (
        MacAddr([0x02, 0, 0, 0, 2, 1]),
        MacAddr([0x02, 0, 0, 0, 2, 2]),
    );
    let loopback = "127.0.0.1:0".parse().unwrap();
    let mut link_s = UdpLink::open(&UdpConfig::new(loopback, mac_s))?;
    let mut link_c = UdpLink::open(&UdpConfig::new(loopback, mac_c))?;
    link_s.add_peer(mac_c, link_c.local_addr()?)?;
    link_c.add_peer(mac_s, link_s.local_addr()?)?;

    let server = socket(link_s, 5000)?;
    let server_thread = std::thread::spawn(move || -> Result<usize, String> {
        let mut answered = 0;
        loop {
            match server.recv_delivery(WAIT).map_err(|e| e.to_string())? {
                Delivery::Data(d) if d.command == REQUEST => {
                    let reply: Vec<u8> = d.data.iter().rev().copied().collect();
                    server
                        .send(REPLY, d.from, &reply, Options::NONE)
                        .map_err(|e| e.to_string())?;
                    answered += 1;
                }
                Delivery::Data(d) if d.command == QUIT => {
                    server.flush(WAIT).map_err(|e| e.to_string())?;
                    return Ok(answered);
                }
                Delivery::Data(d) => return Err(format!("unexpected command {}", d.command)),
                Delivery::Error(e) => return Err(format!("error delivery: {e}")),
            }
        }
    });

    let client = socket(link_c, 5001)?;
    let mut rtts = Vec::with_capacity(count);
    for i in 0..count {
        let request = format!("request {i}: {}", "x".repeat(i % 50));
        let t0 = Instant::now();
        client.send(
            REQUEST,
            runtime::EthAddr::new(mac_s, 5000),
            request.as_bytes(),
            Options::NONE,
        )?;
        match client.recv_delivery(WAIT)? {
            Delivery::Data(d) => {
                rtts.push(t0.elapsed());
                assert_eq!(d.command, REPLY);
                let expect: Vec<u8> = request.bytes().rev().collect();
                assert_eq!(d.data, expect, "reply {i}");
            }
            Delivery::Error(e) => return Err(format!("request {i}: {e}").into()),
        }
    }
    client.send(QUIT, runtime::EthAddr::new(mac_s, 5000), b"", Options::NONE)?;
    client.flush(WAIT)?;
    let answered = server_thread.join().expect("server thread")?;
    rtts.sort();
    println!(
        "{count} CTP requests over EDP/UdpLink (loopback): {answered} replies, each checked; request-to-reply min {:?}, p50 {:?}, max {:?}",
        rtts[0],
        rtts[rtts.len() / 2],
        rtts[rtts.len() - 1]
    );
    Ok(())
}

//! An EDP echo server and a client in one process, unprivileged: EDP frames
//! ride in UDP datagrams on loopback (`UdpLink`), so no CAP_NET_RAW is
//! needed. On a real interface use `EdpSocket::bind(iface, port)` instead.
//!
//! Run: `cargo run -p edp --example edp_echo [COUNT]`

use std::time::{Duration, Instant};

use edp::{EdpSocket, MacAddr};
use link::{UdpConfig, UdpLink};

const SERVER_PORT: u16 = 7;
const CLIENT_PORT: u16 = 40000;

fn main() -> std::io::Result<()> {
    let count: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("COUNT: a number of round trips"))
        .unwrap_or(1000);
    let (mac_s, mac_c) = (
        MacAddr([0x02, 0, 0, 0, 0, 1]),
        MacAddr([0x02, 0, 0, 0, 0, 2]),
    );
    let loopback = "127.0.0.1:0".parse().unwrap();
    let mut link_s = UdpLink::open(&UdpConfig::new(loopback, mac_s))?;
    let mut link_c = UdpLink::open(&UdpConfig::new(loopback, mac_c))?;
    link_s.add_peer(mac_c, link_c.local_addr()?)?;
    link_c.add_peer(mac_s, link_s.local_addr()?)?;

    // The server: echo every datagram to its sender until the "bye".
    let mut server = EdpSocket::from_link(Box::new(link_s), SERVER_PORT)?;
    let echo = std::thread::spawn(move || -> std::io::Result<usize> {
        let mut buf = vec![0u8; 2048];
        let mut echoed = 0;
        loop {
            let (n, mac, port) = server.recv_from(&mut buf)?;
            if &buf[..n] == b"bye" {
                return Ok(echoed);
            }
            server.send_to(&buf[..n], (mac, port))?;
            echoed += 1;
        }
    });

    let mut client = EdpSocket::from_link(Box::new(link_c), CLIENT_PORT)?;
    client.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = vec![0u8; 2048];
    let mut rtts = Vec::with_capacity(count);
    for i in 0..count {
        let msg = format!("ping {i}");
        let t0 = Instant::now();
        client.send_to(msg.as_bytes(), (mac_s, SERVER_PORT))?;
        let (n, from, port) = client.recv_from(&mut buf)?;
        rtts.push(t0.elapsed());
        assert_eq!((from, port), (mac_s, SERVER_PORT));
        assert_eq!(&buf[..n], msg.as_bytes(), "echo of round trip {i}");
    }
    client.send_to(b"bye", (mac_s, SERVER_PORT))?;
    let echoed = echo.join().expect("server thread")?;
    rtts.sort();
    println!(
        "{count} EDP round trips over UdpLink (loopback): server echoed {echoed}, RTT min {:?}, p50 {:?}, max {:?}",
        rtts[0],
        rtts[rtts.len() / 2],
        rtts[rtts.len() - 1]
    );
    Ok(())
}

//! Copies a file through an ESP stream, unprivileged: the segments ride in
//! UDP datagrams on loopback (`UdpLink`). The receiver writes the copy and
//! answers with the byte count; the sender checks it. On a real interface
//! use `EspStream::connect(iface, ...)` / `EspListener::bind(iface, ...)`.
//!
//! Run: `cargo run -p esp --example esp_file_copy SRC DST`
//! (without arguments: copies 4 MiB of generated data between temporary
//! files, removed afterwards).

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use edp::MacAddr;
use esp::{EspConfig, EspStream};
use link::{UdpConfig, UdpLink};

const PORT: u16 = 80;
const PATIENCE: Option<Duration> = Some(Duration::from_secs(10));

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (src, dst, generated) = match (args.next(), args.next()) {
        (Some(s), Some(d)) => (s.into(), std::path::PathBuf::from(d), false),
        _ => {
            let dir = std::env::temp_dir();
            let src = dir.join(format!("esp-copy-src-{}", std::process::id()));
            let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
            std::fs::write(&src, data)?;
            let dst = dir.join(format!("esp-copy-dst-{}", std::process::id()));
            (src, dst, true)
        }
    };
    let data = std::fs::read(&src)?;

    let (mac_r, mac_s) = (
        MacAddr([0x02, 0, 0, 0, 1, 1]),
        MacAddr([0x02, 0, 0, 0, 1, 2]),
    );
    let loopback = "127.0.0.1:0".parse().unwrap();
    let mut link_r = UdpLink::open(&UdpConfig::new(loopback, mac_r))?;
    let mut link_s = UdpLink::open(&UdpConfig::new(loopback, mac_s))?;
    link_r.add_peer(mac_s, link_s.local_addr()?)?;
    link_s.add_peer(mac_r, link_r.local_addr()?)?;

    // The receiver: accept, read to EOF into DST, answer the byte count.
    let dst_path = dst.clone();
    let receiver = std::thread::spawn(move || -> std::io::Result<u64> {
        let mut s = EspStream::accept_link(Box::new(link_r), PORT, EspConfig::default(), PATIENCE)?;
        s.set_read_timeout(PATIENCE)?;
        let mut out = std::fs::File::create(&dst_path)?;
        let n = std::io::copy(&mut s, &mut out)?;
        out.sync_all()?;
        s.write_all(&n.to_be_bytes())?;
        s.shutdown(Shutdown::Write)?;
        Ok(n)
    });

    let t0 = Instant::now();
    let mut s = EspStream::connect_link(
        Box::new(link_s),
        40000,
        (mac_r, PORT),
        EspConfig::default(),
        PATIENCE,
    )?;
    s.set_read_timeout(PATIENCE)?;
    s.write_all(&data)?;
    s.shutdown(Shutdown::Write)?;
    let mut count = [0u8; 8];
    s.read_exact(&mut count)?;
    let elapsed = t0.elapsed();
    let received = receiver.join().expect("receiver thread")?;
    let copy = std::fs::read(&dst)?;
    assert_eq!(u64::from_be_bytes(count), data.len() as u64);
    assert_eq!(received, data.len() as u64);
    assert!(copy == data, "the copy differs from the source");
    println!(
        "copied {} bytes {} -> {} over ESP/UdpLink in {:.1} ms ({:.0} Mbit/s), byte-exact",
        data.len(),
        src.display(),
        dst.display(),
        elapsed.as_secs_f64() * 1e3,
        data.len() as f64 * 8.0 / elapsed.as_secs_f64() / 1e6
    );
    if generated {
        std::fs::remove_file(&src)?;
        std::fs::remove_file(&dst)?;
    }
    Ok(())
}

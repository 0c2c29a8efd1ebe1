//! A raw peer of a runtime under test: frames built and read by hand on
//! the other end of an in-memory link (shared by the socket-layer tests).

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use esp::wire::{emit_esp_frame, EspRepr, Flags, Nego, Seq, ETHERTYPE_ESP};
use link::eth::EthernetRepr;
use link::sim::SimLink;
use link::Link;

/// A SYN frame from `raw` to port 80 of `dst`, offering `nego`.
pub fn syn_frame(raw: &SimLink, dst: esp::wire::MacAddr, nego: Option<Nego>) -> Vec<u8> {
    let eth = EthernetRepr {
        dst,
        src: raw.mac(),
        ethertype: ETHERTYPE_ESP,
    };
    let syn = EspRepr {
        src_port: 41000,
        dst_port: 80,
        flags: Flags::SYN,
        seq: Seq(77),
        window: 100,
        nego,
        ..Default::default()
    };
    let mut buf = vec![0u8; 200];
    let n = emit_esp_frame(&mut buf, &eth, &syn, &[]).unwrap();
    buf.truncate(n);
    buf
}

/// The next frame `raw` receives, waiting up to 5 s while `drive` runs.
pub fn next_frame(raw: &mut SimLink, drive: impl Fn()) -> Vec<u8> {
    let end = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; 2000];
    loop {
        drive();
        match raw.recv(&mut buf) {
            Ok(n) => return buf[..n].to_vec(),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < end, "no answer");
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

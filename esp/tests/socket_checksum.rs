//! `esp::Checksum` through the socket layer: `Auto` leaves the checksum
//! out on a link that guarantees frame integrity and computes it on one
//! that does not; `Always` and `Never` override the link. Over an
//! in-memory link (no root); the frames are read raw at the other end.

use std::io;

use esp::wire::{EspFrame, ETHERTYPE_ESP};
use esp::{Checksum, EspConfig, EspListener};
use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink};
use link::Link;
use link::MacAddr;
use runtime::Runtime;

mod raw_peer;
use raw_peer::{next_frame, syn_frame};

/// A simulated link that claims frame integrity (as a packet or UDP link
/// does); the simulation link itself does not.
struct Trusted(SimLink);

impl Link for Trusted {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.0.send(frame)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.recv(buf)
    }
    fn mac(&self) -> MacAddr {
        self.0.mac()
    }
    fn mtu(&self) -> usize {
        self.0.mtu()
    }
    fn frame_integrity(&self) -> bool {
        true
    }
}

/// The checksum field of the SYN-ACK a listener answers a raw SYN with,
/// on a runtime over a link that does (`trusted`) or does not guarantee
/// frame integrity, with the listener's `mode`.
fn syn_ack_checksum(trusted: bool, mode: Checksum) -> u16 {
    let clock = SimClock::new();
    let (mut raw, lb) = SimLink::pair(&clock, 1500, FaultConfig::seeded(1), FaultConfig::seeded(2));
    let link: Box<dyn Link> = if trusted {
        Box::new(Trusted(lb))
    } else {
        Box::new(lb)
    };
    assert_eq!(link.frame_integrity(), trusted);
    let mut cfg = EspConfig::default();
    cfg.transport.checksum = mode;
    let rt = Runtime::with_link(link, cfg.runtime_config()).unwrap();
    assert_eq!(rt.frame_integrity(), trusted);
    let _l = EspListener::bind_on(&rt, 80, cfg).unwrap();

    raw.send(&syn_frame(&raw, rt.mac(), None)).unwrap();
    let answer = next_frame(&mut raw, || rt.drive().unwrap());
    // Parsing verifies a checksum that is not 0.
    let seg = EspFrame::parse(&answer, ETHERTYPE_ESP, 1514).expect("a valid answer");
    let h = seg.header;
    assert!(h.flags.syn() && h.flags.ack(), "{h:?}");
    u16::from_be_bytes([answer[14 + 18], answer[14 + 19]])
}

#[test]
fn auto_leaves_the_checksum_out_only_where_the_link_guarantees_integrity() {
    assert_eq!(syn_ack_checksum(true, Checksum::Auto), 0);
    assert_ne!(syn_ack_checksum(false, Checksum::Auto), 0);
}

#[test]
fn always_and_never_override_the_link() {
    assert_ne!(syn_ack_checksum(true, Checksum::Always), 0);
    assert_eq!(syn_ack_checksum(false, Checksum::Never), 0);
}

#[test]
fn modes_parse_and_print() {
    for m in [Checksum::Auto, Checksum::Always, Checksum::Never] {
        assert_eq!(m.to_string().parse::<Checksum>(), Ok(m));
    }
    assert_eq!("on".parse::<Checksum>(), Ok(Checksum::Always));
    assert!("sometimes".parse::<Checksum>().is_err());
    assert_eq!(Checksum::Auto.resolve(true), Checksum::Never);
    assert_eq!(Checksum::Auto.resolve(false), Checksum::Always);
    assert_eq!(Checksum::Never.resolve(false), Checksum::Never);
    assert!(Checksum::Auto.computed() && !Checksum::Never.computed());
}

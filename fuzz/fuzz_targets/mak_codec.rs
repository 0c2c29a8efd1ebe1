//! Fuzzes the MAK codec (`mak::wire`) and the two sans-IO state machines
//! behind it.
//!
//! 1. `Packet::new_checked` / `Repr::parse` on arbitrary bytes: no panic; a
//!    parsed frame re-emits to the same bytes (padding excluded).
//! 2. The input, cut into frames, fed to a `mak::Receiver` and a
//!    `mak::Sender` (one of the four strategies, input-chosen) with clock
//!    steps and timeouts in between; the sender also has messages to send.
//!    A control byte per frame can patch the header (magic, version, group,
//!    source) so that inputs reach the state machines. Checks: no panic, no
//!    livelock (bounded transmit bursts), every frame they emit parses and
//!    names the right group and source.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use mak::wire::{Packet, Repr};
use mak::{Config, GroupId, Member, MemberId, Receiver, Sender, Seq, Strategy};

const GROUP: GroupId = GroupId(3);

fn check_emitted(frame: &[u8], source: MemberId) {
    let r = Repr::parse(frame).expect("a core emitted an unparsable frame");
    assert_eq!(r.header().group, GROUP);
    assert_eq!(r.header().source, source);
    assert_eq!(r.frame_len(), frame.len());
}

fuzz_target!(|data: &[u8]| {
    // 1. The codec.
    let _ = Packet::new_checked(data).map(|p| {
        (
            p.frame_type(),
            p.seq(),
            p.msg(),
            p.msg_len(),
            p.payload().len(),
            p.nak_bytes().len(),
        )
    });
    if let Ok(r) = Repr::parse(data) {
        let n = r.frame_len();
        assert!(n <= data.len());
        let mut out = vec![0u8; n];
        assert_eq!(r.emit(&mut out), n);
        assert_eq!(&out[..], &data[..n]);
    }

    // 2. The state machines.
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let strategy = [Strategy::Mak, Strategy::Ack, Strategy::Nak, Strategy::Iterative]
        [usize::from(mode & 3)];
    let cfg = Config {
        strategy,
        window: 1 + u16::from(mode >> 4),
        mtu: 64,
        max_message_bytes: 4096,
        send_buffer_bytes: 8192,
        recv_buffer_bytes: 4096,
        min_silence: Duration::ZERO,
        ..Config::default()
    };
    let mut now = Instant::now();
    let members = vec![Member::new(1, 1u8), Member::new(2, 2u8)];
    let mut sender = Sender::new(cfg.clone(), GROUP, MemberId(0), members, Seq(7)).unwrap();
    let mut receiver =
        Receiver::new(cfg.clone(), GROUP, MemberId(1), Member::new(0, 0u8), Seq(7), 1).unwrap();
    let _ = sender.send(vec![0x5a; 300]);
    let _ = sender.send(Vec::new());
    let mut buf = vec![0u8; cfg.mtu];
    // Frames: [ctl, from, dt, len, bytes...]
    while rest.len() >= 4 {
        let (ctl, from, dt, len) = (rest[0], rest[1], rest[2], usize::from(rest[3]));
        rest = &rest[4..];
        let len = len.min(rest.len());
        let mut frame = rest[..len].to_vec();
        rest = &rest[len..];
        if ctl & 1 != 0 && frame.len() >= 8 {
            frame[0] = 0x4d;
            frame[1] = 0x10 | (frame[1] & 0x0f);
            frame[3] = strategy as u8;
            frame[4..6].copy_from_slice(&GROUP.0.to_be_bytes());
            frame[6..8].copy_from_slice(&0u16.to_be_bytes());
        }
        now += Duration::from_micros(u64::from(dt) * 20);
        if ctl & 2 != 0 {
            let _ = sender.send(vec![ctl; usize::from(dt) * 7]);
        }
        sender.handle_timeout(now);
        receiver.handle_timeout(now);
        sender.handle_frame(now, from % 4, &frame);
        receiver.handle_frame(now, from % 4, &frame);
        for _ in 0..10_000 {
            match sender.poll_transmit(now, &mut buf) {
                Some(t) => {
                    check_emitted(&buf[..t.len], MemberId(0));
                    // Loop the sender's own DATA into the receiver.
                    if ctl & 4 == 0 {
                        let f = buf[..t.len].to_vec();
                        receiver.handle_frame(now, 0, &f);
                    }
                }
                None => break,
            }
        }
        assert!(sender.poll_transmit(now, &mut buf).is_none(), "sender livelock");
        for _ in 0..10_000 {
            match receiver.poll_transmit(now, &mut buf) {
                Some(t) => {
                    check_emitted(&buf[..t.len], MemberId(0));
                    let f = buf[..t.len].to_vec();
                    sender.handle_frame(now, 1, &f);
                }
                None => break,
            }
        }
        while sender.poll_event().is_some() {}
        while receiver.poll_event().is_some() {}
        if let Some(t) = sender.poll_timeout() {
            assert!(t >= now - Duration::from_secs(1));
        }
    }
});

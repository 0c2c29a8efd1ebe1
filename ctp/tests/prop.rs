//! Property tests: the codec round-trips and never panics on arbitrary
//! bytes; the received-id list matches a set model across the 2^32 wrap;
//! two endpoints over a lossy, duplicating, reordering in-memory wire deliver
//! every message exactly once or tell the sender.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use ctp::wire::{Options, Repr};
use ctp::{Config, Delivery, Endpoint, ErrorType};
use ctp::{IdStatus, RecvIdList};
use proptest::prelude::*;

proptest! {
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Repr::parse(&bytes);
    }

    #[test]
    fn emit_parse_round_trip(
        command in 0u16..0x8000, confirm: bool, number in 0u32..10, extra in 1u32..10,
        id: u32, opts in 0u8..0x20, len in 0usize..300,
    ) {
        let large = !confirm && len > 0 && extra > 1;
        let amount = if large { number + extra } else { 1 };
        let number = if large { number } else { 0 };
        let payload_len = if confirm { 0 } else { len as u16 };
        let r = Repr {
            command, confirm, number, amount, id,
            message_size: if confirm { 0 } else if large { len as u64 * 3 } else { len as u64 },
            options: Options::from_bits_retain(opts),
            payload_len,
        };
        let mut buf = vec![0xAAu8; r.packet_len()];
        r.emit(&mut buf);
        let (p, body) = Repr::parse(&buf).unwrap();
        prop_assert_eq!(p, r);
        prop_assert_eq!(body.len(), payload_len as usize);
    }

    #[test]
    fn recv_list_matches_set_model(
        start in prop_oneof![any::<u32>(), (u32::MAX - 300)..=u32::MAX],
        offsets in proptest::collection::vec(0u32..400, 1..300),
        late_start: bool,
    ) {
        let mut l = RecvIdList::new(1 << 16);
        let mut seen = HashSet::new();
        if !late_start {
            l.start_session(start);
        }
        for (k, off) in offsets.iter().enumerate() {
            if late_start && k == offsets.len() / 2 {
                l.start_session(start);
            }
            let id = start.wrapping_add(*off);
            let expect_dup = seen.contains(&id);
            prop_assert_eq!(l.contains(id), expect_dup);
            let st = l.insert(id);
            prop_assert_eq!(st == IdStatus::Duplicate, expect_dup, "id {:#x}", id);
            seen.insert(id);
        }
        // the first element is the highest id received in sequence
        if l.is_established() {
            let v = l.as_vec();
            let mut f = start.wrapping_sub(1);
            while seen.contains(&f.wrapping_add(1)) {
                f = f.wrapping_add(1);
            }
            prop_assert_eq!(v[0], f);
        }
    }

    #[test]
    fn exactly_once_or_sender_told(
        sizes in proptest::collection::vec(0usize..5000, 1..25),
        fates in proptest::collection::vec(0u8..20, 64..512),
        start_id in prop_oneof![any::<u32>(), (u32::MAX - 50)..=u32::MAX],
        del_after_error: bool,
    ) {
        run_pair(&sizes, &fates, start_id, del_after_error)?;
    }
}

/// Fate of a datagram from the fate tape: 0-1 lost, 2 duplicated, 3-4
/// delayed (reordered), else delivered.
fn run_pair(
    sizes: &[usize],
    fates: &[u8],
    start_id: u32,
    del_after_error: bool,
) -> Result<(), TestCaseError> {
    let t0 = Instant::now();
    let cfg = Config {
        data_size: 700,
        window_packets: 8,
        ..Config::default()
    };
    let mut eps = [
        Endpoint::new(cfg.clone(), t0, SystemTime::UNIX_EPOCH, 1, None),
        Endpoint::new(cfg, t0, SystemTime::UNIX_EPOCH, 2, None),
    ];
    eps[0].set_next_id(ctp::Dest::Peer(1u8), start_id);
    let opts = if del_after_error {
        Options::DEL_AFTER_ERROR
    } else {
        Options::NONE
    };
    let mut sent = HashMap::new();
    for (i, &len) in sizes.iter().enumerate() {
        let mut m = vec![i as u8; len];
        if len >= 1 {
            m[0] = i as u8;
        }
        let id = eps[0].send_vec(t0, i as u16, 1u8, m, opts).unwrap();
        sent.insert(id, i as u16);
    }
    // in-flight datagrams: (deliver at, to, bytes)
    let mut wire: VecDeque<(Instant, u8, Vec<u8>)> = VecDeque::new();
    let mut delayed: Vec<(Instant, u8, Vec<u8>)> = Vec::new();
    let mut tape = fates.iter().cycle();
    let mut now = t0;
    let mut got: [Vec<Delivery<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; 1000];
    for _round in 0..200_000 {
        for (k, ep) in eps.iter_mut().enumerate() {
            while let Some(t) = ep.poll_transmit(&mut buf) {
                let bytes = buf[..t.len].to_vec();
                let to = t.dest;
                debug_assert_eq!(to as usize, 1 - k);
                match tape.next().copied().unwrap_or(9) {
                    0 | 1 => {}
                    2 => {
                        wire.push_back((now, to, bytes.clone()));
                        wire.push_back((now, to, bytes));
                    }
                    3 | 4 => delayed.push((now + Duration::from_micros(300), to, bytes)),
                    _ => wire.push_back((now + Duration::from_micros(50), to, bytes)),
                }
            }
            got[k].extend(std::iter::from_fn(|| ep.poll_delivery()));
        }
        // next event: a datagram, a delayed datagram or a timer
        let next_wire = wire.front().map(|w| w.0);
        let next_delayed = delayed.iter().map(|d| d.0).min();
        let next_timer = eps.iter_mut().filter_map(|e| e.poll_timeout()).min();
        let Some(next) = [next_wire, next_delayed, next_timer]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        now = now.max(next);
        if next_wire == Some(next) {
            let (_, to, b) = wire.pop_front().unwrap();
            eps[to as usize].handle_datagram(now, 1 - to, &b);
        } else if next_delayed == Some(next) {
            let k = delayed.iter().position(|d| d.0 == next).unwrap();
            let (_, to, b) = delayed.swap_remove(k);
            eps[to as usize].handle_datagram(now, 1 - to, &b);
        } else {
            for ep in eps.iter_mut() {
                ep.handle_timeout(now);
            }
        }
        if eps[0].storage_sizes().awaiting_confirmation == 0
            && wire.is_empty()
            && delayed.is_empty()
        {
            break;
        }
        if !del_after_error && got[0].len() == sent.len() {
            // every message errored and is kept for further resends: stop
            break;
        }
    }
    for ep in eps.iter_mut() {
        ep.handle_timeout(now);
    }
    got[1].extend(std::iter::from_fn(|| eps[1].poll_delivery()));
    let failed: HashSet<u16> = got[0]
        .iter()
        .map(|d| match d {
            Delivery::Error(e) => {
                assert_eq!(e.kind, ErrorType::NotConfirmed);
                sent[&e.msg.unwrap()]
            }
            d => panic!("sender got {d:?}"),
        })
        .collect();
    let mut seen = HashSet::new();
    for d in &got[1] {
        let Delivery::Data(d) = d else {
            panic!("{d:?}")
        };
        prop_assert!(
            seen.insert(d.command),
            "command {} delivered twice",
            d.command
        );
        let len = sizes[d.command as usize];
        prop_assert_eq!(d.data.len(), len);
        prop_assert!(d.data.iter().all(|&b| b == d.command as u8));
    }
    for &c in sent.values() {
        prop_assert!(
            seen.contains(&c) || failed.contains(&c),
            "command {} neither delivered nor failed",
            c
        );
    }
    Ok(())
}

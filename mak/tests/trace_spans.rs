//! The spans of the sans-IO cores, in their own test binary: tracing
//! caches each callsite's interest process-wide, and a callsite first hit
//! by a concurrently running test (no subscriber) can miss the scoped
//! subscriber installed here.

use std::time::{Duration, Instant};

use mak::{Config, Dest, GroupId, Member, MemberId, Receiver, ReceiverEvent, Sender, Seq};

use testkit::Lines;

/// Member 0 sends three packets to members 1 and 2; member 1 loses the
/// second. The gap and the NAK are member 1's receiver's events, the
/// retransmission and the state changes the sender's: each inside its own
/// span. Run `cargo test -p mak --test trace_spans -- --nocapture` to see
/// the trace.
#[test]
fn events_carry_the_span_of_their_sender_or_receiver() {
    let lines = Lines::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(lines.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let cfg = Config {
            mtu: 124,
            ..Config::default()
        };
        let t0 = Instant::now();
        let members = vec![Member::new(1, 1u8), Member::new(2, 2u8)];
        let mut s = Sender::new(cfg.clone(), GroupId(9), MemberId(0), members, Seq(0)).unwrap();
        let mut r: Vec<Receiver<u8>> = (1..=2)
            .map(|i| {
                let src = Member::new(0, 0u8);
                Receiver::new(cfg.clone(), GroupId(9), MemberId(i), src, Seq(0), i.into()).unwrap()
            })
            .collect();
        s.send(vec![7u8; 250]).unwrap();
        let mut buf = vec![0u8; cfg.mtu];
        let mut data = 0;
        // Deliver every frame at once, but DATA 1 not to member 1 the
        // first time; time moves on so that the NAK timers fire.
        for step in 0..200u32 {
            let now = t0 + Duration::from_millis(u64::from(step));
            while let Some(t) = s.poll_transmit(now, &mut buf) {
                data += 1;
                for (i, rx) in r.iter_mut().enumerate() {
                    let to_me = t.dest == Dest::Group || t.dest == Dest::Member(i as u8 + 1);
                    if to_me && !(i == 0 && data == 2) {
                        rx.handle_frame(now, 0, &buf[..t.len]);
                    }
                }
            }
            for (i, rx) in r.iter_mut().enumerate() {
                rx.handle_timeout(now);
                while let Some(t) = rx.poll_transmit(now, &mut buf) {
                    s.handle_frame(now, i as u8 + 1, &buf[..t.len]);
                }
            }
            s.handle_timeout(now);
            if s.is_idle() {
                break;
            }
        }
        assert!(s.is_idle(), "the sender finished");
        for rx in &mut r {
            assert!(
                matches!(rx.poll_event(), Some(ReceiverEvent::Message(m)) if m.data == vec![7u8; 250])
            );
        }
    });
    let text = lines.text();
    print!("{text}");
    let inside =
        |span: &str, what: &str| text.lines().any(|l| l.contains(span) && l.contains(what));
    let rx1 = "mak_receiver{group=9 me=1 source=0}";
    let tx = "mak_sender{group=9 me=0}";
    assert!(inside(rx1, "MAK gap"), "{text}");
    assert!(inside(rx1, "MAK NAK"), "{text}");
    assert!(inside(tx, "MAK retransmission"), "{text}");
    assert!(inside(tx, "MAK state"), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.contains("mak_receiver{group=9 me=2") && l.contains("MAK gap")),
        "member 2 lost nothing: {text}"
    );
}

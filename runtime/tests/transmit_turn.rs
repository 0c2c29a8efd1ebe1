//! The runtime gives a socket a transmit turn after an event only when the
//! socket says something may be due (`Socket::transmit_due`), and then
//! sends what it queued. A counting socket on an in-memory link.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink};
use link::Link;
use runtime::protocol::{Cx, DemuxKey, Ready, RxFrame, Socket, TxQueue};
use runtime::{Runtime, RuntimeConfig};

/// Counts its transmit turns; queues one frame per turn while `frames`
/// is positive.
struct Counting {
    due: Arc<AtomicBool>,
    turns: Arc<AtomicUsize>,
    frames: Arc<AtomicUsize>,
    peer: link::MacAddr,
}

impl Socket for Counting {
    fn on_frame(&mut self, _cx: &mut Cx<'_>, _frame: RxFrame<'_>) {}

    fn on_timeout(&mut self, _cx: &mut Cx<'_>) {}

    fn poll_transmit(&mut self, cx: &mut Cx<'_>, tx: &mut TxQueue) {
        self.turns.fetch_add(1, Ordering::SeqCst);
        if self.frames.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.frames.fetch_sub(1, Ordering::SeqCst);
        let buf = tx.next_buf();
        buf[..6].copy_from_slice(&self.peer.0);
        buf[6..12].copy_from_slice(&cx.mac.0);
        buf[12..14].copy_from_slice(&runtime::ETHERTYPE_EDP.to_be_bytes());
        buf[14..60].fill(0);
        tx.commit(60, None);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn readiness(&self) -> Ready {
        Ready::NONE
    }

    fn transmit_due(&self) -> bool {
        self.due.load(Ordering::SeqCst)
    }
}

#[test]
fn a_socket_with_nothing_due_gets_no_transmit_turn() {
    let clock = SimClock::new();
    let (la, mut lb) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let peer = lb.mac();
    let rt = Runtime::with_link(Box::new(la), RuntimeConfig::default()).unwrap();
    let due = Arc::new(AtomicBool::new(false));
    let turns = Arc::new(AtomicUsize::new(0));
    let frames = Arc::new(AtomicUsize::new(0));
    let sock = Counting {
        due: due.clone(),
        turns: turns.clone(),
        frames: frames.clone(),
        peer,
    };
    let key = DemuxKey::Port {
        ethertype: runtime::ETHERTYPE_EDP,
        port: 9,
    };
    let slot = rt.insert(key, Box::new(sock), None).unwrap();
    let base = turns.load(Ordering::SeqCst);

    // Nothing due: a handle's call and a runtime turn leave it alone.
    rt.with_engine(|e, now| e.touched(slot, now)).unwrap();
    rt.drive().unwrap();
    assert_eq!(
        turns.load(Ordering::SeqCst),
        base,
        "a turn with nothing due"
    );

    // Something due: one turn, and its frame goes out on the link.
    due.store(true, Ordering::SeqCst);
    frames.store(1, Ordering::SeqCst);
    rt.with_engine(|e, now| e.touched(slot, now)).unwrap();
    assert_eq!(turns.load(Ordering::SeqCst), base + 1);
    let mut buf = [0u8; 2048];
    let n = lb.recv(&mut buf).expect("the queued frame was sent");
    assert_eq!(n, 60);
    assert_eq!(&buf[..6], &peer.0);
}

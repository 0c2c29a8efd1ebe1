//! The socket layer over in-memory links (no root needed): `EspStream`
//! connect/accept, Read/Write, shutdown, timeouts and the progress thread on
//! a `SimLink` pair whose clock is not advanced (no delay faults, so frames
//! are deliverable at once; the sockets use the real clock for timers).

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use esp::{EspConfig, EspStream};
use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink};
use link::Link;

const PATIENCE: Option<Duration> = Some(Duration::from_secs(30));

fn pair() -> (Box<dyn Link>, Box<dyn Link>) {
    let clock = SimClock::new();
    let (a, b) = SimLink::pair(&clock, 1500, FaultConfig::seeded(1), FaultConfig::seeded(2));
    (Box::new(a), Box::new(b))
}

/// A server thread on port 80 of `link`: accepts, reads to EOF, runs `then`
/// on the stream, returns what it read.
fn read_all_then(
    link: Box<dyn Link>,
    then: impl FnOnce(&mut EspStream) + Send + 'static,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut s = EspStream::accept_link(link, 80, EspConfig::default(), PATIENCE).unwrap();
        s.set_read_timeout(PATIENCE).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        then(&mut s);
        got
    })
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn stream_over_a_sim_link() {
    let (la, lb) = pair();
    let (ma, mb) = (la.mac(), lb.mac());
    let server = std::thread::spawn(move || {
        let mut s = EspStream::accept_link(lb, 80, EspConfig::default(), PATIENCE).unwrap();
        assert_eq!(s.peer_addr().unwrap(), (ma, 40000));
        s.set_read_timeout(PATIENCE).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        s.write_all(&(got.len() as u64).to_be_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        got
    });
    let mut c =
        EspStream::connect_link(la, 40000, (mb, 80), EspConfig::default(), PATIENCE).unwrap();
    c.set_read_timeout(PATIENCE).unwrap();
    let data = pattern(3 << 20);
    c.write_all(&data).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(c.write(b"x").unwrap_err().kind(), ErrorKind::BrokenPipe);
    let mut n = [0u8; 8];
    c.read_exact(&mut n).unwrap();
    assert_eq!(u64::from_be_bytes(n), data.len() as u64);
    assert_eq!(c.read(&mut n).unwrap(), 0, "EOF after the peer's FIN");
    let got = server.join().unwrap();
    assert!(got == data);
    let st = c.stats();
    assert_eq!(st.bytes_sent, data.len() as u64);
}

#[test]
fn read_timeout_and_nonblocking() {
    let (la, lb) = pair();
    let mb = lb.mac();
    let server = std::thread::spawn(move || {
        let mut s = EspStream::accept_link(lb, 80, EspConfig::default(), PATIENCE).unwrap();
        let mut b = [0u8; 1];
        s.set_read_timeout(PATIENCE).unwrap();
        s.read_exact(&mut b).unwrap();
        s.write_all(&b).unwrap();
        s
    });
    let mut c =
        EspStream::connect_link(la, 40000, (mb, 80), EspConfig::default(), PATIENCE).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(c.read(&mut b).unwrap_err().kind(), ErrorKind::TimedOut);
    c.set_nonblocking(true).unwrap();
    assert_eq!(c.read(&mut b).unwrap_err().kind(), ErrorKind::WouldBlock);
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(PATIENCE).unwrap();
    c.write_all(b"q").unwrap();
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"q");
    drop(server.join().unwrap());
}

#[test]
fn idle_progress_acknowledges_while_the_application_computes() {
    let (la, lb) = pair();
    let mb = lb.mac();
    let (acked_tx, acked_rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        // The default progress (Progress::WhenIdle): the runtime's service
        // thread takes the link while no caller waits in it.
        let mut s = EspStream::accept_link(lb, 80, EspConfig::default(), PATIENCE).unwrap();
        // "Compute" without calling into the stream until the client saw
        // every byte acknowledged: only the service thread can ACK.
        acked_rx
            .recv_timeout(PATIENCE.unwrap())
            .expect("client never saw its data acknowledged");
        s.set_read_timeout(PATIENCE).unwrap();
        let mut got = vec![0u8; 256 * 1024];
        s.read_exact(&mut got).unwrap();
        got
    });
    let mut c =
        EspStream::connect_link(la, 40000, (mb, 80), EspConfig::default(), PATIENCE).unwrap();
    let data = pattern(256 * 1024);
    c.write_all(&data).unwrap();
    c.wait_acked(PATIENCE).unwrap();
    acked_tx.send(()).unwrap();
    assert!(server.join().unwrap() == data);
}

#[test]
fn drop_delivers_buffered_data_in_the_background() {
    let (la, lb) = pair();
    let mb = lb.mac();
    let server = read_all_then(lb, |_| {});
    let data = pattern(3 << 20);
    {
        let mut c =
            EspStream::connect_link(la, 40000, (mb, 80), EspConfig::default(), PATIENCE).unwrap();
        // The send buffer takes the data; most of it is not even sent yet.
        c.set_nonblocking(true).unwrap();
        let mut off = 0;
        while off < data.len() {
            match c.write(&data[off..]) {
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    c.set_nonblocking(false).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
        // Dropped here: the runtime keeps the connection closing (data and
        // FIN) in the background.
    }
    assert!(server.join().unwrap() == data);
}

#[test]
fn close_returns_once_the_peer_has_everything() {
    // The link loses 20 % of the frames each way (the retransmissions use
    // the real clock): close() still returns only when both FINs are
    // through, so the data, the BYE-like last write and the FIN all arrived.
    let clock = SimClock::new();
    let (la, lb) = SimLink::pair(
        &clock,
        1500,
        FaultConfig::seeded(3).with_loss(0.2),
        FaultConfig::seeded(4).with_loss(0.2),
    );
    let (la, lb): (Box<dyn Link>, Box<dyn Link>) = (Box::new(la), Box::new(lb));
    let mb = lb.mac();
    // The peer's FIN is in: the server's close completes when its FIN is acked.
    let server = read_all_then(lb, |s| s.close(PATIENCE).unwrap());
    let mut c =
        EspStream::connect_link(la, 40000, (mb, 80), EspConfig::default(), PATIENCE).unwrap();
    let data = pattern(200_000);
    c.write_all(&data).unwrap();
    c.close(PATIENCE).unwrap();
    assert_eq!(c.state(), esp::State::Closed);
    assert_eq!(c.write(b"x").unwrap_err().kind(), ErrorKind::BrokenPipe);
    let got = server.join().unwrap();
    assert!(got == data, "{} of {} bytes", got.len(), data.len());
    assert!(c.stats().retransmitted > 0, "the loss was exercised");
}

/// Polls `poll` until `token` is reported (readable), at most `PATIENCE`.
fn wait_event(poll: &mut runtime::mio::Poll, token: runtime::mio::Token) -> bool {
    let mut events = runtime::mio::Events::with_capacity(16);
    let until = std::time::Instant::now() + PATIENCE.unwrap();
    while std::time::Instant::now() < until {
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        if events.iter().any(|e| e.token() == token && e.is_readable()) {
            return true;
        }
    }
    false
}

#[test]
fn mio_readiness_of_listener_and_stream_comes_from_protocol_state() {
    use runtime::mio::{Interest, Poll, Token};
    use runtime::{Runtime, RuntimeConfig};
    let (la, lb) = pair();
    let mb = lb.mac();
    let rt_b = Runtime::with_link(lb, RuntimeConfig::default()).unwrap();
    let mut l = esp::EspListener::bind_on(&rt_b, 80, EspConfig::default()).unwrap();
    l.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut l, Token(1), Interest::READABLE)
        .unwrap();
    assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    let client = std::thread::spawn(move || {
        let mut c =
            EspStream::connect_link(la, 40000, (mb, 80), EspConfig::default(), PATIENCE).unwrap();
        c.write_all(b"first second").unwrap();
        c.wait_acked(PATIENCE).unwrap();
        c
    });
    // An established connection waiting for accept makes the listener readable.
    assert!(wait_event(&mut poll, Token(1)), "listener never readable");
    let (mut s, _) = l.accept().unwrap();
    s.set_nonblocking(true).unwrap();
    let c = client.join().unwrap();
    // The data arrived before the stream was registered: registering an
    // already-readable stream reports it at once.
    poll.registry()
        .register(&mut s, Token(2), Interest::READABLE)
        .unwrap();
    assert!(
        wait_event(&mut poll, Token(2)),
        "buffered data not readable"
    );
    let mut buf = [0u8; 6];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"first ");
    // Still buffered, no new frame: readable again after re-registering.
    poll.registry()
        .reregister(&mut s, Token(2), Interest::READABLE)
        .unwrap();
    assert!(wait_event(&mut poll, Token(2)), "the rest is not readable");
    let mut rest = [0u8; 6];
    s.read_exact(&mut rest).unwrap();
    assert_eq!(&rest, b"second");
    assert_eq!(s.read(&mut rest).unwrap_err().kind(), ErrorKind::WouldBlock);
    drop(c);
}

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Cntr, Waited};

#[test]
fn counts_move_only_by_add_and_set() {
    let c = Cntr::new();
    assert_eq!((c.read(), c.read_err()), (0, 0));
    c.add(3);
    c.add(4);
    assert_eq!(c.read(), 7);
    c.set(1);
    assert_eq!(c.read(), 1);
    c.add_err(2);
    assert_eq!(c.read_err(), 2);
    c.set_err(0);
    assert_eq!(c.read_err(), 0);
    c.set(u64::MAX);
    c.add(2);
    assert_eq!(c.read(), 1, "wraps at 2^64");
}

#[test]
fn wait_returns_at_the_threshold_at_an_error_or_at_the_timeout() {
    let c = Arc::new(Cntr::new());
    c.set(5);
    assert_eq!(c.wait(5, Some(Duration::ZERO)), Waited::Reached);
    let t0 = Instant::now();
    assert_eq!(c.wait(6, Some(Duration::from_millis(30))), Waited::TimedOut);
    assert!(t0.elapsed() >= Duration::from_millis(30));

    let adder = {
        let c = c.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            c.add(3);
        })
    };
    assert_eq!(c.wait(8, None), Waited::Reached);
    adder.join().unwrap();

    let failer = {
        let c = c.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            c.add_err(1);
        })
    };
    assert_eq!(c.wait(100, Some(Duration::from_secs(10))), Waited::Error);
    failer.join().unwrap();
}

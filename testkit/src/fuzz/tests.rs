use super::*;

#[test]
fn zero_bytes_mean_no_fault() {
    let f = fault_config(&[], 7, &FaultSpace::ALL);
    assert_eq!(f, FaultConfig::seeded(7).with_reorder(0.0, Duration::ZERO));
    assert!(f.validate().is_ok());
}

#[test]
fn every_byte_maps_into_a_valid_config() {
    for b in 0..=255u8 {
        let f = fault_config(&[b; FAULT_BYTES], u64::from(b), &FaultSpace::ALL);
        assert!(f.validate().is_ok(), "byte {b}: {f:?}");
    }
    let space = FaultSpace {
        max_probability: 0.25,
        corrupt: false,
        rate_step_bps: 0,
        ..FaultSpace::ALL
    };
    let f = fault_config(&[255; FAULT_BYTES], 1, &space);
    let expect = FaultConfig::seeded(1)
        .with_loss(0.25)
        .with_duplicate(0.25)
        .with_reorder(0.25, Duration::from_nanos(100 * 255))
        .with_delay(Duration::from_micros(4 * 63), Duration::from_micros(8 * 3))
        .with_burst(1.0, 1.0, 1.0)
        .with_queue_limit(255);
    assert_eq!(f, expect);
}

#[test]
fn probabilities_scale() {
    assert_eq!(probability(0, 1.0), 0.0);
    assert_eq!(probability(127, 1.0), 0.0);
    assert_eq!(probability(128, 1.0), 0.0);
    assert_eq!(probability(255, 0.3), 0.3);
}

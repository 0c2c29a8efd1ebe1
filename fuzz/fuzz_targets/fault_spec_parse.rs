//! Fuzzes `FaultConfig::parse_spec` (the `--fault` spec of netgauge): no input
//! may panic, whatever parses is valid, and its `Display` parses back to the
//! same config.
#![no_main]

use link::fault::FaultConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = FaultConfig::parse_spec(s) {
        assert!(cfg.validate().is_ok());
        let again = FaultConfig::parse_spec(&cfg.to_string()).expect("Display output parses");
        assert_eq!(again, cfg);
    }
});

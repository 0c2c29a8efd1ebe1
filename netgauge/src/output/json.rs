//! JSON lines: a metadata header object first (`{"metadata": {...}}`:
//! netgauge version, date, command line, kernel, CPU, hosts, MTU), then one
//! record per mode and size, with `"run": N` under `--repeat`.

use serde_json::{json, Value};

use crate::report::Record;

/// The header object of a JSON-lines output. `hosts` describes the hosts
/// of the run (the two of `--local`, or this host and the remote);
/// `mtu` is the link MTU in bytes when known.
pub fn metadata(hosts: Value, mtu: Option<usize>) -> Value {
    let uname = nix::sys::utsname::uname().ok();
    let f = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
    json!({
        "metadata": {
            "netgauge_version": env!("CARGO_PKG_VERSION"),
            "date": jiff::Timestamp::now().to_string(),
            "command_line": std::env::args().collect::<Vec<_>>(),
            "kernel": uname.as_ref().map(|u| format!("{} {}", f(u.sysname()), f(u.release()))),
            "kernel_version": uname.as_ref().map(|u| f(u.version())),
            "machine": uname.as_ref().map(|u| f(u.machine())),
            "nodename": uname.as_ref().map(|u| f(u.nodename())),
            "cpu_model": cpu_model(),
            "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
            "hosts": hosts,
            "mtu": mtu,
        }
    })
}

/// The CPU model of /proc/cpuinfo (`model name` on x86, else `Model` or
/// `CPU part`), None where it is not given.
fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    ["model name", "Model", "CPU part"].iter().find_map(|key| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == *key).then(|| v.trim().to_string())
        })
    })
}

/// True for the header object (readers of records skip it).
pub fn is_metadata(v: &Value) -> bool {
    v.get("metadata").is_some()
}

/// One record as a JSON line, with `"run": N` when `run` is given.
pub fn record_line(r: &Record, run: Option<usize>) -> String {
    let mut v = serde_json::to_value(r).expect("records serialize");
    if let (Some(n), Some(obj)) = (run, v.as_object_mut()) {
        obj.insert("run".into(), json!(n));
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_the_run_and_records_carry_the_run_index() {
        let m = metadata(json!([{"name": "a"}, {"name": "b"}]), Some(1500));
        assert!(is_metadata(&m));
        let md = &m["metadata"];
        assert_eq!(md["netgauge_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(md["mtu"], 1500);
        assert_eq!(md["hosts"][1]["name"], "b");
        assert!(md["kernel"].as_str().unwrap().starts_with("Linux "), "{m}");
        // RFC 3339 UTC, e.g. 2026-11-23T06:07:00.123Z
        let date = md["date"].as_str().unwrap();
        assert!(
            date.len() >= 20 && date.ends_with('Z') && &date[4..5] == "-",
            "{date}"
        );
        assert!(date.parse::<jiff::Timestamp>().is_ok(), "{date}");
        assert!(md["command_line"].as_array().is_some_and(|a| !a.is_empty()));

        let r: Record = serde_json::from_value(json!({
            "mode": "edp", "pattern": "one_one", "size": 64, "iterations": 10,
            "busy_poll": false, "lat_us": null, "mbit_s": 1.0, "mb_s": 0.125
        }))
        .unwrap();
        let with: Value = serde_json::from_str(&record_line(&r, Some(2))).unwrap();
        assert_eq!(with["run"], 2);
        assert!(!is_metadata(&with));
        let without: Value = serde_json::from_str(&record_line(&r, None)).unwrap();
        assert!(without.get("run").is_none());
        // A record line still reads back as a Record.
        let back: Record = serde_json::from_value(with).unwrap();
        assert_eq!(back.size, 64);
    }
}

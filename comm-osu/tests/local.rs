//! `comm-osu BENCH --local N` over UDP loopback (unprivileged): every
//! benchmark runs its ranks as processes, exits 0, and prints the OSU
//! header and one row per size with a positive finite value; a rank whose
//! peer never comes fails within its bound.

use std::process::Command;

fn run(bench: &str, ranks: usize, sizes: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_comm-osu"))
        .args([bench, "--local", &ranks.to_string(), "-m", sizes])
        .args(["-i", "4", "-x", "1", "-W", "4", "--timeout", "30"])
        .output()
        .expect("run comm-osu");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "comm-osu {bench}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn check(bench: &str, ranks: usize, title: &str, column: &str, sizes: &[usize]) {
    let out = run(bench, ranks, "0:2048");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with(&format!("# {title}")), "{out}");
    assert_eq!(lines[1], format!("{:<10}{:>18}", "# Size", column), "{out}");
    let rows: Vec<(usize, f64)> = lines[2..]
        .iter()
        .map(|l| {
            let mut w = l.split_whitespace();
            let s = w.next().unwrap().parse().unwrap();
            let v = w.next().unwrap().parse().unwrap();
            assert_eq!(w.next(), None, "{l}");
            (s, v)
        })
        .collect();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), sizes, "{out}");
    for &(s, v) in &rows {
        assert!(v.is_finite() && v >= 0.0, "size {s}: {v}\n{out}");
    }
    // OSU prints two decimals: a bandwidth below 0.005 MB/s (1-byte
    // messages on a loaded machine) reads 0.00. The largest size's figure
    // must be positive.
    let (s, v) = rows[rows.len() - 1];
    assert!(v > 0.0, "size {s}: {v}\n{out}");
}

const FROM_ONE: [usize; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048];

#[test]
fn latency_two_ranks() {
    let mut sizes = vec![0];
    sizes.extend(FROM_ONE);
    check("latency", 2, "OSU MPI Latency Test", "Latency (us)", &sizes);
    check(
        "latency-p50",
        2,
        "OSU MPI Latency Test, p50",
        "p50 Latency (us)",
        &sizes,
    );
}

#[test]
fn bandwidths_two_ranks() {
    check(
        "bw",
        2,
        "OSU MPI Bandwidth Test",
        "Bandwidth (MB/s)",
        &FROM_ONE,
    );
    check(
        "bibw",
        2,
        "OSU MPI Bi-Directional Bandwidth Test",
        "Bandwidth (MB/s)",
        &FROM_ONE,
    );
}

#[test]
fn collectives_three_ranks() {
    check(
        "bcast",
        3,
        "OSU MPI Broadcast Latency Test",
        "Avg Latency(us)",
        &FROM_ONE,
    );
    check(
        "allreduce",
        3,
        "OSU MPI Allreduce Latency Test",
        "Avg Latency(us)",
        &FROM_ONE[3..],
    );
}

#[test]
fn a_missing_rank_is_an_error_not_a_hang() {
    // Rank 0 of two whose peer (a port nobody serves) never answers: the
    // bounded wait fails instead of hanging.
    let free = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let hosts = format!("127.0.0.1:0,{}", free.local_addr().unwrap());
    drop(free);
    let out = Command::new(env!("CARGO_BIN_EXE_comm-osu"))
        .args([
            "latency",
            "-m",
            "8:8",
            "-i",
            "2",
            "-x",
            "0",
            "--timeout",
            "2",
        ])
        .args(["--hosts", &hosts, "--rank", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("comm-osu: rank 0:"), "{err}");
}

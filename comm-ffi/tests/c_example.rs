//! The C ABI from C: compiles `examples/c/pingpong.c` with the system C
//! compiler (`cc`) against include/comm.h and this build's
//! libclusternet_comm.so, runs 3 ranks over UDP loopback (no privilege)
//! and checks each exits 0 with "rank R: ok" (the program checks every
//! byte it receives, bcast, allreduce, truncation and the NULL handle).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn c_pingpong_runs_three_ranks() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // `cargo test` builds this crate's rlib, not its cdylib: build the
    // library C links against, in this test's profile and target dir.
    // target/<profile>/deps/c_example-<hash> -> target/<profile>
    let exe = std::env::current_exe().unwrap();
    let libdir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    // The profile's directory is its name, except dev's (`debug`).
    let profile = match libdir.file_name().and_then(|p| p.to_str()) {
        Some("debug") | None => "dev",
        Some(p) => p,
    };
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "-p", "comm-ffi", "--lib", "--profile", profile])
        .arg("--manifest-path")
        .arg(manifest.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", libdir.parent().unwrap());
    let out = build.output().expect("run cargo build -p comm-ffi");
    assert!(
        out.status.success(),
        "cargo build -p comm-ffi: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        libdir.join("libclusternet_comm.so").exists(),
        "no libclusternet_comm.so in {}",
        libdir.display()
    );
    let dir = std::env::temp_dir().join(format!("comm-ffi-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("pingpong");
    let out = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(manifest.join("include"))
        .arg(manifest.join("examples/c/pingpong.c"))
        .arg("-o")
        .arg(&bin)
        .arg("-L")
        .arg(&libdir)
        .arg("-lclusternet_comm")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .output()
        .expect("run cc (install gcc: scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = 42_000 + (std::process::id() % 2000) as u16 * 3;
    let addrs: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", base + i)).collect();
    let mut ranks: Vec<_> = (0..3)
        .map(|r| {
            Command::new(&bin)
                .arg(r.to_string())
                .args(&addrs)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ranks.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        if Instant::now() > deadline {
            for c in &mut ranks {
                let _ = c.kill();
            }
            panic!("the C ranks did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for (r, c) in ranks.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("rank {r}: ok")),
            "rank {r}: {} {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

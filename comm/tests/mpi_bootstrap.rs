//! `comm`'s MPI bootstrap under Open MPI's real launcher: `mpirun -np 4
//! comm-mpi-check` on this host (CTP over UDP on 127.0.0.1; no privilege
//! needed). Every rank exchanges byte-checked messages with every other,
//! then allreduce and barrier. Built only with the `mpi` feature
//! (`cargo test -p comm --features mpi --test mpi_bootstrap`, run by
//! scripts/test.sh); without mpirun the test prints why and returns,
//! except under CI=true where it fails.
#![cfg(feature = "mpi")]

use std::process::Command;

const CHECK: &str = env!("CARGO_BIN_EXE_comm-mpi-check");

#[test]
fn four_ranks_under_mpirun_find_each_other_and_talk() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        testkit::skip(
            "comm MPI bootstrap",
            "no mpirun (install openmpi-bin: scripts/install-deps.sh)",
        );
        return;
    }
    let out = Command::new("mpirun")
        // Bounded: mpirun ends the job (and fails) after 120 s, so a hang
        // is a failure naming itself, not a stalled test run.
        .args(["--oversubscribe", "--timeout", "120", "-np", "4", CHECK])
        // mpirun refuses root unless told; CI runs as root.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("run mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mpirun failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..4 {
        assert!(
            stdout.contains(&format!("rank {r} of 4: ok")),
            "rank {r} did not report ok: {stdout}"
        );
    }
}

//! Open MPI over the provider: `tests/mpi/mpi_check.c` (see its header)
//! under `mpirun --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include
//! clusternet`, libfabric loading libclusternet-fi.so from FI_PROVIDER_PATH.
//!
//! - the program itself first, under Open MPI's TCP BTL (`pml ob1`, `btl
//!   tcp,self`), so that a failure below is the provider's, not the test's;
//! - the provider's FI_EP_RDM endpoint over EDP with 2, 4 and 8 ranks, one
//!   per host of a bridged virtual cluster (vcluster's mpirun launch;
//!   root), messages up to 64 MiB; over the UDP link on loopback as user
//!   `nobody` (as the current user when not root);
//! - a rank killed with SIGKILL: the job ends with Open MPI's error within
//!   the bound, nothing hangs (root);
//! - ranks started with different cluster keys: MPI_Init fails within a
//!   bound, the output naming the key mismatch and the fix;
//! - mpi4py's bench (`python3 -m mpi4py.bench helloworld`, `ringtest`,
//!   `pingpong` up to 64 MiB) on 2 ranks over EDP (root);
//! - the first stage, kept as a baseline: libfabric's ofi_rxd over the
//!   provider's FI_EP_DGRAM (`FI_PROVIDER="clusternet;ofi_rxd"`), 2 ranks
//!   over EDP. ofi_rxd 1.17 itself mishandles three things the program
//!   checks (FI_CLAIM for MPI_Mprobe/Mrecv, MPI_Ssend's zero-byte
//!   acknowledgement, truncation of unexpected messages: the same failures
//!   with libfabric's own `udp;ofi_rxd`), so those are skipped there.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{assert_passed, run, Scratch};
use vcluster::LaunchCluster;

/// One mpirun at a time: vcluster's launch cluster takes its subnet and
/// link names from the process id, and the runs share two CPUs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The checks ofi_rxd cannot pass (see the module documentation).
const RXD_SKIP: &str = "probes,ssend,truncation";

/// Largest message of the ofi_rxd runs (its large messages are slow).
const RXD_MAX: &str = "4194304";

fn can_run(test: &str) -> bool {
    if !common::have("mpirun") || !common::have("mpicc") {
        testkit::skip(
            test,
            "no mpirun/mpicc (openmpi-bin, libopenmpi-dev: scripts/install-deps.sh)",
        );
        return false;
    }
    true
}

/// `mpirun` as `nobody` when root (the run needs no privilege), with
/// `home` made its own; otherwise as this user, unprivileged already.
fn mpirun_as_nobody(home: &Path) -> Command {
    if !testkit::is_root() {
        return Command::new("mpirun");
    }
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    nix::unistd::chown(home, nobody, Some(nix::unistd::Gid::from_raw(65534))).unwrap();
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "mpirun"]);
    c
}

/// Open MPI's MCA settings and libfabric's for the provider.
fn over_provider(cmd: &mut Command, fi: &Path) {
    cmd.env("OMPI_MCA_pml", "cm")
        .env("OMPI_MCA_mtl", "ofi")
        .env("OMPI_MCA_mtl_ofi_provider_include", "clusternet")
        .env("FI_PROVIDER_PATH", fi);
}

/// The same through ofi_rxd over the provider's FI_EP_DGRAM.
fn over_rxd(cmd: &mut Command, fi: &Path) {
    over_provider(cmd, fi);
    cmd.env("FI_PROVIDER", "clusternet;ofi_rxd");
}

#[test]
fn the_mpi_program_passes_under_open_mpi_tcp() {
    if !can_run("mpi_check over TCP") {
        return;
    }
    let _one = serial();
    let scratch = Scratch::new("mpi-tcp");
    let bin = common::compile(&scratch, "mpicc", "mpi/mpi_check.c", &[]);
    let mut c = vcluster::mpirun_base(2);
    c.args(["--mca", "pml", "ob1"])
        .arg(&bin)
        .args(["--max", "16777216"]);
    let (st, out, _) = run(&scratch, c, Duration::from_secs(300));
    assert_passed(st, &out, 2, "TCP BTL");
}

#[test]
fn over_edp_on_the_virtual_cluster_2_4_8_ranks() {
    if !can_run("mpi_check over clusternet") || !testkit::root_or_skip("mpi_check over EDP") {
        return;
    }
    let _one = serial();
    let scratch = Scratch::new("mpi-edp");
    let fi = common::install_provider(&scratch);
    let bin = common::compile(&scratch, "mpicc", "mpi/mpi_check.c", &[]);
    let bin = bin.to_str().unwrap();
    for n in [2, 4, 8] {
        let job = LaunchCluster::build("fimpi", n, 1500, false).unwrap();
        let mut c = job.mpirun(n, bin, &[]);
        over_provider(&mut c, &fi);
        let (st, out, took) = run(&scratch, c, Duration::from_secs(900));
        eprintln!("{n} ranks over EDP: {took:?}");
        assert_passed(st, &out, n, &format!("{n} ranks over EDP"));
        assert!(out.contains("ok sizes_0_to_67108864_byte_exact"), "{out}");
    }
}

#[test]
fn rxd_over_the_dgram_endpoint_2_ranks() {
    if !can_run("mpi_check over clusternet;ofi_rxd")
        || !testkit::root_or_skip("mpi_check over ofi_rxd")
    {
        return;
    }
    let _one = serial();
    let scratch = Scratch::new("mpi-rxd");
    let fi = common::install_provider(&scratch);
    let bin = common::compile(&scratch, "mpicc", "mpi/mpi_check.c", &[]);
    let job = LaunchCluster::build("firxd", 2, 1500, false).unwrap();
    let args = [
        "--max".into(),
        RXD_MAX.into(),
        "--skip".into(),
        RXD_SKIP.into(),
    ];
    let mut c = job.mpirun(2, bin.to_str().unwrap(), &args);
    over_rxd(&mut c, &fi);
    let (st, out, took) = run(&scratch, c, Duration::from_secs(600));
    eprintln!("2 ranks over clusternet;ofi_rxd: {took:?}");
    assert_passed(st, &out, 2, "clusternet;ofi_rxd");
}

/// The Python interpreter with mpi4py (scripts/install-deps.sh installs
/// it with pip), or None.
fn python_with_mpi4py() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import sys, mpi4py; print(sys.executable)"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn mpi4py_bench_over_edp() {
    if !can_run("mpi4py bench") || !testkit::root_or_skip("mpi4py bench") {
        return;
    }
    let Some(python) = python_with_mpi4py() else {
        testkit::skip(
            "mpi4py bench",
            "no python3 with mpi4py (pip install mpi4py: scripts/install-deps.sh)",
        );
        return;
    };
    let _one = serial();
    let scratch = Scratch::new("mpi4py");
    let fi = common::install_provider(&scratch);
    let job = LaunchCluster::build("fipy", 2, 1500, false).unwrap();
    for (bench, want) in [
        ("helloworld", "Hello, World! I am process 1 of 2"),
        ("ringtest", "time for 1 loops"),
        ("pingpong", "67108864"),
    ] {
        let mut args: Vec<String> = vec!["-m".into(), "mpi4py.bench".into(), bench.into()];
        if bench == "pingpong" {
            args.extend(["-n".into(), "67108864".into(), "-l".into(), "1000".into()]);
        }
        let mut c = job.mpirun(2, &python, &args);
        over_provider(&mut c, &fi);
        let (st, out, took) = run(&scratch, c, Duration::from_secs(600));
        eprintln!("mpi4py.bench {bench}: {took:?}\n{out}");
        assert!(
            st.is_some_and(|s| s.success()),
            "mpi4py.bench {bench}: {st:?}\n{out}"
        );
        assert!(out.contains(want), "mpi4py.bench {bench}:\n{out}");
    }
}

#[test]
fn a_killed_rank_ends_the_job() {
    if !can_run("mpi_check --kill") || !testkit::root_or_skip("mpi_check --kill") {
        return;
    }
    let _one = serial();
    let scratch = Scratch::new("mpi-kill");
    let fi = common::install_provider(&scratch);
    let bin = common::compile(&scratch, "mpicc", "mpi/mpi_check.c", &[]);
    let job = LaunchCluster::build("fikill", 4, 1500, false).unwrap();
    let mut c = job.mpirun(4, bin.to_str().unwrap(), &["--kill".into()]);
    over_provider(&mut c, &fi);
    // Open MPI's runtime sees the rank die and aborts the job: well within
    // this bound; a hang would run into it.
    let bound = Duration::from_secs(60);
    let (st, out, took) = run(&scratch, c, bound);
    eprintln!("killed rank: the job ended after {took:?}");
    let st =
        st.unwrap_or_else(|| panic!("the job hung past {bound:?} after a rank was killed:\n{out}"));
    assert!(
        !st.success(),
        "the job succeeded although a rank was killed:\n{out}"
    );
    assert!(out.contains("killing myself"), "{out}");
    assert!(
        out.contains("signal 9") || out.contains("Killed"),
        "no report of the killed rank:\n{out}"
    );
    assert!(!out.contains("FAIL kill"), "{out}");
}

#[test]
fn over_the_udp_link_as_nobody() {
    if !can_run("mpi_check over the UDP link") {
        return;
    }
    let _one = serial();
    let scratch = Scratch::new("mpi-udp");
    let fi = common::install_provider(&scratch);
    let bin = common::compile(&scratch, "mpicc", "mpi/mpi_check.c", &[]);
    // As root: drop to nobody (the run needs no privilege), with a home
    // and session folder of its own; otherwise this user is unprivileged
    // already.
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut c = mpirun_as_nobody(&home);
    c.args(["--oversubscribe", "-np", "2"])
        .arg(&bin)
        .env("HOME", &home)
        .env("TMPDIR", &home)
        .env("FI_CLUSTERNET_LINK", "udp")
        .env("FI_CLUSTERNET_IFACE", "lo");
    over_provider(&mut c, &fi);
    let (st, out, took) = run(&scratch, c, Duration::from_secs(300));
    eprintln!("2 ranks over the UDP link: {took:?}");
    assert_passed(st, &out, 2, "UDP link");
}

/// Two ranks, one started with a cluster key and one without, over the
/// UDP link as nobody: MPI_Init ends in an error that names the key
/// mismatch and the fix (each rank's name tells its key), within a bound,
/// instead of ranks that never hear each other.
#[test]
fn ranks_with_different_cluster_keys_are_told_so() {
    if !can_run("mpi_check with different keys") {
        return;
    }
    let _one = serial();
    let scratch = Scratch::new("mpi-keys");
    let fi = common::install_provider(&scratch);
    let bin = common::compile(&scratch, "mpicc", "mpi/mpi_check.c", &[]);
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Rank 1 alone gets a key (from the environment, as CLUSTERNET_KEY).
    let script = format!(
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then export CLUSTERNET_KEY={}; fi; exec {}",
        "00112233445566778899aabbccddeeff",
        bin.display()
    );
    let mut c = mpirun_as_nobody(&home);
    c.args(["--oversubscribe", "-np", "2", "sh", "-c", &script])
        .env("HOME", &home)
        .env("TMPDIR", &home)
        .env_remove("CLUSTERNET_KEY")
        .env_remove("CLUSTERNET_KEY_FILE")
        .env("FI_CLUSTERNET_LINK", "udp")
        .env("FI_CLUSTERNET_IFACE", "lo");
    over_provider(&mut c, &fi);
    let bound = Duration::from_secs(120);
    let (st, out, took) = run(&scratch, c, bound);
    eprintln!("different keys: the job ended after {took:?}");
    let st = st.unwrap_or_else(|| panic!("the job hung past {bound:?}:\n{out}"));
    assert!(!st.success(), "ranks with different keys passed:\n{out}");
    assert!(out.contains("cluster key mismatch"), "{out}");
    assert!(out.contains("FI_CLUSTERNET_KEY_FILE"), "{out}");
}

/// Runs `ip ARGS`, panicking with its output when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two hosts joined by two links, the cluster's bridge (MTU 1500) and a
/// direct veth (MTU 9000), ranks on different interfaces over the UDP
/// link: rank 0 on the 1500-byte link, rank 1 on the 9000-byte one. Each
/// name tells its MTU, so rank 1 cuts its frames to rank 0 at 1500 bytes
/// while rank 0's reach it over the 9000-byte link; mpi_check's ping-pong
/// of 0 B .. 64 MiB must arrive byte-exact both ways (root).
#[test]
fn ranks_on_interfaces_of_different_mtu() {
    if !can_run("mpi_check on two interfaces") || !testkit::root_or_skip("two interfaces") {
        return;
    }
    let _one = serial();
    let scratch = Scratch::new("mpi-mtu");
    let fi = common::install_provider(&scratch);
    let bin = common::compile(&scratch, "mpicc", "mpi/mpi_check.c", &[]);
    let job = LaunchCluster::build("fimtu", 2, 1500, false).unwrap();
    let (h0, h1) = (job.cluster().host(0), job.cluster().host(1));
    // The second link: a veth between the two hosts' namespaces (gone with
    // them), on a subnet of its own.
    let pid = std::process::id() % 1_000_000;
    let (a, b) = (format!("j{pid}a"), format!("j{pid}b"));
    ip(&[
        "link", "add", &a, "netns", &h0.ns, "mtu", "9000", "type", "veth", "peer", "name", &b,
        "netns", &h1.ns, "mtu", "9000",
    ]);
    let third = (pid % 250 + 1).to_string();
    for (ns, dev, host) in [(&h0.ns, &a, "1"), (&h1.ns, &b, "2")] {
        let addr = format!("10.99.{third}.{host}/24");
        ip(&["-n", ns, "addr", "add", &addr, "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
    }
    let script = format!(
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then export FI_CLUSTERNET_IFACE={}; \
         else export FI_CLUSTERNET_IFACE={b}; fi; exec {}",
        h0.iface,
        bin.display()
    );
    let mut c = job.mpirun(2, "sh", &["-c".into(), script]);
    c.env("FI_CLUSTERNET_LINK", "udp");
    over_provider(&mut c, &fi);
    let (st, out, took) = run(&scratch, c, Duration::from_secs(600));
    eprintln!("2 ranks on links of MTU 1500 and 9000: {took:?}");
    assert_passed(st, &out, 2, "ranks on links of different MTU");
    assert!(out.contains("ok sizes_0_to_67108864_byte_exact"), "{out}");
}

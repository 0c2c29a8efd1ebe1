//! What the provider's C and MPI tests share: the provider library built
//! and installed under its libfabric name, C programs compiled with `cc`
//! or `mpicc`, MPI launchers run with a time bound, and a scratch folder
//! removed at the end.
#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use vcluster::Process;

/// A folder under the system temp folder (mode 755: tests that run as
/// `nobody` read the provider and programs from it), removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new scratch folder named after `what` and the process id.
    pub fn new(what: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("cnfi-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(d)
    }

    /// A path inside it.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The folder of this test binary's profile (`target/<profile>`) and the
/// profile's name (the folder's, except dev's: `debug`).
fn profile_dir() -> (PathBuf, String) {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    let profile = match dir.file_name().and_then(|p| p.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(p) => p.to_string(),
    };
    (dir, profile)
}

/// The cargo target folder of this build (`target`, or CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    profile_dir().0.parent().unwrap().to_path_buf()
}

/// The provider's cdylib of this build (`cargo test` builds the rlib
/// only): built once per test process in this test's profile.
fn cdylib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let (dir, profile) = profile_dir();
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut build = Command::new(env!("CARGO"));
        build
            .args([
                "build",
                "-p",
                "clusternet-fi",
                "--lib",
                "--profile",
                &profile,
            ])
            .arg("--manifest-path")
            .arg(manifest.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", dir.parent().unwrap());
        let out = build.output().expect("run cargo build -p clusternet-fi");
        assert!(
            out.status.success(),
            "cargo build -p clusternet-fi: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = dir.join("libclusternet_fi.so");
        assert!(lib.exists(), "no {}", lib.display());
        lib
    })
}

/// Installs the provider in `scratch` as libfabric wants it named
/// (`libclusternet-fi.so`); returns the folder for FI_PROVIDER_PATH.
pub fn install_provider(scratch: &Scratch) -> PathBuf {
    let dir = scratch.join("fi");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(cdylib(), dir.join("libclusternet-fi.so")).unwrap();
    dir
}

/// Compiles the C program `tests/<src>` with `compiler` (`cc` or
/// `mpicc`) into `scratch`, linking `libs`; returns the binary.
pub fn compile(scratch: &Scratch, compiler: &str, src: &str, libs: &[&str]) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = manifest.join("tests").join(src);
    let bin = scratch.join(src.file_stem().unwrap().to_str().unwrap());
    let out = Command::new(compiler)
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler} (scripts/install-deps.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{compiler} {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// Whether `program` runs (`program --version`).
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `cmd` (an MPI launcher) for at most `limit`; returns its status
/// (None when it had to be stopped), its output (stdout then stderr) and
/// how long it ran.
pub fn run(
    scratch: &Scratch,
    mut cmd: Command,
    limit: Duration,
) -> (Option<ExitStatus>, String, Duration) {
    let out = scratch.join("mpirun.out");
    let err = scratch.join("mpirun.err");
    // A process group of its own: on a hang, the launcher and every rank
    // it started are stopped together.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap());
    let t0 = Instant::now();
    let mut p = Process::spawn(&mut cmd).unwrap();
    let mut st = p.wait_timeout(limit).unwrap();
    if st.is_none() {
        let group = nix::unistd::Pid::from_raw(p.id() as i32);
        let _ = nix::sys::signal::killpg(group, vcluster::Signal::SIGTERM);
        let _ = p.wait_timeout(Duration::from_secs(10));
        let _ = nix::sys::signal::killpg(group, vcluster::Signal::SIGKILL);
        p.kill();
        st = None;
    }
    let elapsed = t0.elapsed();
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    (st, text, elapsed)
}

/// Asserts that `tests/mpi/mpi_check.c` passed on `ranks` ranks (`what`
/// names the run).
pub fn assert_passed(st: Option<ExitStatus>, out: &str, ranks: usize, what: &str) {
    assert!(
        st.is_some_and(|s| s.success()),
        "{what}: mpirun {st:?}\n{out}"
    );
    assert!(!out.contains("FAIL"), "{what}:\n{out}");
    assert!(
        out.contains(&format!("mpi_check: all checks passed ({ranks} ranks")),
        "{what}:\n{out}"
    );
    for r in 0..ranks {
        assert!(
            out.contains(&format!("hello from rank {r} of {ranks}")),
            "{what}: no hello from {r}\n{out}"
        );
    }
}

/// A started process whose stdout lines arrive on a channel and whose
/// stderr is collected (C programs that print as they go).
pub struct Side {
    /// The process (killed on drop).
    pub proc: Process,
    /// Its stdout, line by line.
    pub lines: mpsc::Receiver<String>,
    /// Its whole stderr, once it ends.
    pub stderr: std::thread::JoinHandle<String>,
}

/// Starts `cmd` with `stdin` (piped, to end it by closing, or null) and
/// its stdout and stderr read as [`Side`] says.
pub fn start(mut cmd: Command, stdin: Stdio) -> Side {
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut proc = Process::spawn(&mut cmd).unwrap();
    let out = proc.take_stdout().unwrap();
    let err = proc.child_mut().stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(err), &mut s);
        s
    });
    Side {
        proc,
        lines,
        stderr,
    }
}

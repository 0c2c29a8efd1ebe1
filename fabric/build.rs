//! Generates the libfabric bindings (`$OUT_DIR/fabric.rs`) with bindgen from
//! the installed headers (`wrapper.h`: rdma/fabric.h ... providers/fi_prov.h,
//! libfabric-dev), and links libfabric (`fi_dupinfo`, `fi_param_define`,
//! `fi_log`, `fi_version`: the calls of libfabric.so a provider may make).
//!
//! The bindings are those of the installed 1.17 headers; the provider also
//! runs under libfabric 2.x cores, whose layouts `src/abi.rs` pins down
//! against these types.

/// Flag and size macros (`FI_MSG`, `FI_ORDER_SAS`, ...) become `u64`, as the
/// fields they go into; the errno macros (`FI_EAGAIN`, ...) stay `u32`, like
/// libfabric's own error enum (`FI_ETRUNC`, ...), so all error codes share a
/// type.
#[derive(Debug)]
struct MacroTypes;

impl bindgen::callbacks::ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        let errno = name.starts_with("FI_E") && name != "FI_EVENT";
        (!errno && name.starts_with("FI_")).then_some(bindgen::callbacks::IntKind::U64)
    }
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rustc-link-lib=dylib=fabric");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // Bindings for the workspace's rust-version, not for the newest Rust
    // bindgen knows.
    let msrv = std::env::var("CARGO_PKG_RUST_VERSION").unwrap_or_default();
    let minor: u64 = msrv
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(88);
    let target = bindgen::RustTarget::stable(minor, 0).expect("a Rust version bindgen knows");
    bindgen::Builder::default()
        .rust_target(target)
        .header("wrapper.h")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_function(
            "fi_dupinfo|fi_freeinfo|fi_param_define|fi_param_get|fi_log|fi_log_enabled|fi_strerror|fi_tostr|fi_version",
        )
        .allowlist_var("FI_.*|FID_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .parse_callbacks(Box::new(MacroTypes))
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen over the libfabric headers failed ({e}): install libfabric-dev and \
                 libclang (scripts/install-deps.sh)"
            )
        })
        .write_to_file(out.join("fabric.rs"))
        .expect("write the libfabric bindings");
}

//! Writes include/comm.h from src/codes.rs and src/ffi.rs with cbindgen,
//! so that the header C programs include is always the one of this build.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=src/codes.rs");
    println!("cargo:rerun-if-changed=src/ffi.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml"))
        .expect("comm-ffi/cbindgen.toml parses");
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{dir}/src/codes.rs"))
        .with_src(format!("{dir}/src/ffi.rs"))
        .generate()
        .expect("cbindgen reads src/codes.rs and src/ffi.rs")
        .write_to_file(format!("{dir}/include/comm.h"));
}

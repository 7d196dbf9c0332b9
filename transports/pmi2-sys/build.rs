//! Finds Slurm's PMI-2 header and library (no pkg-config file ships with
//! them: `PMI2_INCLUDE_DIR` and `PMI2_LIB_DIR` name other places than
//! Debian's `/usr/include/slurm` and the linker's own) and generates the
//! bindings.

fn main() {
    #[cfg(feature = "link")]
    link();
}

#[cfg(feature = "link")]
fn link() {
    use std::path::PathBuf;

    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PMI2_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=PMI2_LIB_DIR");

    let include = std::env::var_os("PMI2_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include/slurm"));
    if !include.join("pmi2.h").exists() {
        eprintln!(
            "pmi2-sys: {} has no pmi2.h (set PMI2_INCLUDE_DIR to where Slurm's pmi2.h is)\n\
             On Debian or Ubuntu: apt-get install libpmi2-0-dev",
            include.display()
        );
        std::process::exit(1);
    }
    if let Some(dir) = std::env::var_os("PMI2_LIB_DIR") {
        println!(
            "cargo:rustc-link-search=native={}",
            PathBuf::from(dir).display()
        );
    }
    println!("cargo:rustc-link-lib=pmi2");

    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{}", include.display()))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function(
            "PMI2_Init|PMI2_Finalize|PMI2_Job_GetId|PMI2_KVS_Put|PMI2_KVS_Fence|PMI2_KVS_Get",
        )
        .allowlist_var("PMI2_SUCCESS|PMI2_MAX_KEYLEN|PMI2_MAX_VALLEN|PMI2_MAX_ATTRVALUE")
        .layout_tests(false)
        .generate_comments(false)
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => {
            eprintln!("pmi2-sys: bindgen failed (is libclang installed? apt-get install libclang-dev): {e}");
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    if let Err(e) = bindings.write_to_file(out.join("bindings.rs")) {
        eprintln!("pmi2-sys: writing the bindings: {e}");
        std::process::exit(1);
    }
}

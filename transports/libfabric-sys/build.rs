//! Finds the system libfabric with pkg-config, compiles the C shim for the
//! calls libfabric defines as `static inline`, and generates the bindings.

fn main() {
    #[cfg(feature = "link")]
    link();
}

#[cfg(feature = "link")]
fn link() {
    use std::path::PathBuf;

    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=build.rs");

    let lib = match pkg_config::Config::new()
        .atleast_version("1.10")
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "libfabric-sys: libfabric (>= 1.10) was not found with pkg-config: {e}\n\
                 On Debian or Ubuntu: apt-get install libfabric-dev pkg-config"
            );
            std::process::exit(1);
        }
    };

    let mut shim = cc::Build::new();
    shim.file("shim/shim.c").warnings(true);
    for dir in &lib.include_paths {
        shim.include(dir);
    }
    shim.compile("taskfold_fi_shim");

    let mut builder = bindgen::Builder::default()
        .header("shim/shim.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function(
            "fi_getinfo|fi_freeinfo|fi_dupinfo|fi_fabric|fi_strerror|fi_version|fi_tostr",
        )
        .allowlist_function("tf_fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .generate_comments(false);
    for dir in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    let bindings = match builder.generate() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("libfabric-sys: bindgen failed (is libclang installed? apt-get install libclang-dev): {e}");
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    if let Err(e) = bindings.write_to_file(out.join("bindings.rs")) {
        eprintln!("libfabric-sys: writing the bindings: {e}");
        std::process::exit(1);
    }
}

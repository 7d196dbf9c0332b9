//! Finds the system PMIx with pkg-config, compiles the C shim over it and
//! generates the bindings of the shim.

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

    let lib = match pkg_config::Config::new().atleast_version("4").probe("pmix") {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "pmix-sys: PMIx (>= 4) was not found with pkg-config: {e}\n\
                 On Debian or Ubuntu: apt-get install libpmix-dev pkg-config"
            );
            std::process::exit(1);
        }
    };

    let mut shim = cc::Build::new();
    shim.file("shim/shim.c").warnings(true);
    for dir in &lib.include_paths {
        shim.include(dir);
    }
    shim.compile("taskfold_pmix_shim");

    let bindings = bindgen::Builder::default()
        .header("shim/shim.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("tf_pmix_.*")
        .allowlist_var("TF_PMIX_.*")
        .layout_tests(false)
        .generate_comments(false)
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => {
            eprintln!("pmix-sys: bindgen failed (is libclang installed? apt-get install libclang-dev): {e}");
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    if let Err(e) = bindings.write_to_file(out.join("bindings.rs")) {
        eprintln!("pmix-sys: writing the bindings: {e}");
        std::process::exit(1);
    }
}

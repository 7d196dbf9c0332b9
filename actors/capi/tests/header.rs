//! The checked-in header is exactly what cbindgen generates from the
//! source: a change of the ABI that forgot the header fails here.

use std::path::Path;

#[test]
fn the_checked_in_header_is_the_generated_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let path = dir.join("include/taskfold.h");
    if std::env::var_os("TASKFOLD_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("writing the header");
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} differs from the header cbindgen generates from the source; \
         regenerate it with `TASKFOLD_BLESS=1 cargo test -p taskfold-capi --test header`",
        path.display()
    );
}

/// The Fortran module's constants are the header's: every `TF_*` code,
/// datatype, operation and option value with the same number.
#[test]
fn the_fortran_module_has_every_constant_of_the_header() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(dir.join("include/taskfold.h")).unwrap();
    let module = std::fs::read_to_string(dir.join("fortran/taskfold.f90")).unwrap();
    let mut n = 0;
    for line in header.lines() {
        let Some(def) = line.strip_prefix("#define TF_") else {
            continue;
        };
        let mut parts = def.split_whitespace();
        let (name, value) = (parts.next().unwrap(), parts.next().unwrap());
        let plain = format!(":: TF_{name} = {value}\n");
        let wide = format!(":: TF_{name} = {value}_c_int64_t\n");
        assert!(
            module.contains(&plain) || module.contains(&wide),
            "fortran/taskfold.f90 lacks TF_{name} = {value}"
        );
        n += 1;
    }
    assert!(n >= 50, "only {n} constants in the header");
}

/// The header is C++ too: a C++ translation unit that includes it and
/// calls through it compiles cleanly with `g++` (its declarations sit in
/// `extern "C"`, as a C++ seismic code includes them).
#[test]
fn the_header_compiles_as_cpp() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("uses.cpp");
    std::fs::write(
        &src,
        "#include <taskfold.h>\n\
         #include <vector>\n\
         int reduce(std::vector<double> &v, std::vector<double> &out) {\n\
           tf_request req;\n\
           int rc = tf_ireduce(v.data(), out.data(), v.size(), TF_F64, TF_SUM, 0, nullptr, &req);\n\
           if (rc == TF_SUCCESS) rc = tf_wait(&req, nullptr);\n\
           return rc == TF_SUCCESS ? 0 : (tf_strerror(rc) != nullptr);\n\
         }\n",
    )
    .unwrap();
    let out = std::process::Command::new("g++")
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(dir.join("include"))
        .arg(&src)
        .output()
        .expect("g++ (installed by .ci/run)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // C linkage for a C++ caller: the declarations are wrapped.
    let header = std::fs::read_to_string(dir.join("include/taskfold.h")).unwrap();
    assert!(
        header.contains("#ifdef __cplusplus\nextern \"C\" {"),
        "no extern \"C\" block in the header"
    );
}

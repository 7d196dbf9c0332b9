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

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

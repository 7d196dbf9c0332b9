//! The `psdm` rank program.
fn main() {}

//! cargo-fuzz entry of the `libfabric_sealed` target (see taskfold-fuzz).
#![no_main]

#[global_allocator]
static ALLOC: taskfold_fuzz::alloc::Counting = taskfold_fuzz::alloc::Counting;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let t = taskfold_fuzz::target("libfabric_sealed").expect("a target of this build");
    if let Err(f) = taskfold_fuzz::run_case(&t, data) {
        panic!("libfabric_sealed: {f}");
    }
});

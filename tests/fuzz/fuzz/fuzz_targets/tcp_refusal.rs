//! cargo-fuzz entry of the `tcp_refusal` target (see taskfold-fuzz).
#![no_main]

#[global_allocator]
static ALLOC: taskfold_fuzz::alloc::Counting = taskfold_fuzz::alloc::Counting;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let t = taskfold_fuzz::target("tcp_refusal").expect("a target of this build");
    if let Err(f) = taskfold_fuzz::run_case(&t, data) {
        panic!("tcp_refusal: {f}");
    }
});

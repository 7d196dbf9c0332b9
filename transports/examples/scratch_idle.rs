//! Scratch (not committed): CPU used by idle transports.
use std::time::Duration;
fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}
fn main() {
    let prov = std::env::args().nth(1).unwrap();
    let auto = std::env::args().nth(2).is_some();
    let ts = taskfold_transports::conformance::libfabric_ranks(4, &prov, &|c| {
        if auto {
            c.wait = taskfold_transports::libfabric::WaitMode::Auto;
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    let c0 = cpu();
    std::thread::sleep(Duration::from_secs(4));
    println!(
        "{prov} auto={auto}: 4 idle ranks use {:.1}% of a core",
        (cpu() - c0) / 4.0 * 100.0
    );
    drop(ts);
}

//! The conformance suite against the libfabric transport, once per
//! provider: `tcp;ofi_rxm`, `sockets` and `shm`, and once more over
//! `tcp;ofi_rxm` with the progress thread blocking in `fi_cq_sread`
//! (`WaitMode::Auto`). A provider this machine lacks fails its tests under
//! CI (env `CI` set) and skips them otherwise.

#![cfg(feature = "libfabric")]

use std::sync::Arc;
use taskfold_transports::conformance::{self, libfabric_ranks, Cluster};
use taskfold_transports::libfabric::{provider_available, WaitMode};
use taskfold_transports::Transport;

fn cluster(n: u32, provider: &str, wait: WaitMode) -> Cluster {
    let ts = libfabric_ranks(n, provider, &|c| c.wait = wait);
    let killers = ts.clone();
    Cluster {
        transports: ts.into_iter().map(|t| t as Arc<dyn Transport>).collect(),
        crash: Box::new(move |r| {
            if let Some(t) = killers.get(r.0 as usize) {
                t.abort();
            }
        }),
    }
}

fn run(provider: &str, wait: WaitMode, case: fn(conformance::Factory<'_>)) {
    // RUST_LOG=taskfold_transports=debug shows what the transport does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    if !provider_available(provider) {
        assert!(
            std::env::var_os("CI").is_none(),
            "libfabric provider `{provider}` is not available on this machine (CI is set)"
        );
        eprintln!("skipped: libfabric provider `{provider}` is not available here");
        return;
    }
    case(&|n| cluster(n, provider, wait));
}

macro_rules! cases {
    ($provider:expr, $wait:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                super::run($provider, $wait, taskfold_transports::conformance::$case);
            }
        )*
    };
}

macro_rules! provider {
    ($module:ident, $provider:expr, $wait:ident) => {
        mod $module {
            use taskfold_transports::libfabric::WaitMode;
            cases!(
                $provider, WaitMode::$wait;
                ordered_delivery,
                send_to_self,
                send_to_unknown_rank,
                get_sizes,
    segmented_gets,
                loans,
                get_not_exposed,
                withdraw_then_get,
                expose_replaces,
                concurrent_gets,
                crash_reports_link_down,
                graceful_shutdown,
            );
        }
    };
}

provider!(tcp_rxm, "tcp;ofi_rxm", Poll);
provider!(tcp_rxm_sread, "tcp;ofi_rxm", Auto);
provider!(sockets, "sockets", Poll);
provider!(shm, "shm", Poll);

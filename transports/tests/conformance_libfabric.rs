//! The conformance suite against the libfabric transport, once per
//! provider: `tcp;ofi_rxm`, `sockets` and `shm`. A provider this machine
//! lacks fails its tests under CI (env `CI` set) and skips them otherwise.

#![cfg(feature = "libfabric")]

use taskfold_transports::conformance::{self, libfabric_cluster, Cluster};
use taskfold_transports::libfabric::provider_available;

fn run(provider: &str, case: fn(conformance::Factory<'_>)) {
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
    case(&|n| -> Cluster { libfabric_cluster(n, provider) });
}

macro_rules! cases {
    ($provider:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                super::run($provider, taskfold_transports::conformance::$case);
            }
        )*
    };
}

macro_rules! provider {
    ($module:ident, $provider:expr) => {
        mod $module {
            cases!(
                $provider;
                ordered_delivery,
                send_to_self,
                send_to_unknown_rank,
                get_sizes,
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

provider!(tcp_rxm, "tcp;ofi_rxm");
provider!(sockets, "sockets");
provider!(shm, "shm");

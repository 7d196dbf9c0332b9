//! The conformance suite against the loopback transport.

use taskfold_transports::conformance::{self, loopback_cluster};

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                conformance::$case(&loopback_cluster);
            }
        )*
    };
}

cases!(
    ordered_delivery,
    send_to_self,
    nodes_known,
    send_to_unknown_rank,
    get_sizes,
    segmented_gets,
    loans,
    get_not_exposed,
    gets_within,
    withdraw_then_get,
    expose_replaces,
    concurrent_gets,
    crash_reports_link_down,
    graceful_shutdown,
    same_node_refusals,
);

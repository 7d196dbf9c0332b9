//! The conformance suite against the tcp transport: with same-node loans
//! (the default between processes of one node; here all ranks share a
//! process, which reads its own memory) and with every get streamed.

use taskfold_transports::conformance::{self, tcp_cluster, tcp_streamed_cluster};

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                conformance::$case(&tcp_cluster);
            }
        )*
        mod streamed {
            use super::*;
            $(
                #[test]
                fn $case() {
                    conformance::$case(&tcp_streamed_cluster);
                }
            )*
        }
    };
}

cases!(
    ordered_delivery,
    send_to_self,
    send_to_unknown_rank,
    get_sizes,
    loans,
    get_not_exposed,
    withdraw_then_get,
    expose_replaces,
    concurrent_gets,
    crash_reports_link_down,
    graceful_shutdown,
);

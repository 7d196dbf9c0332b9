//! The conformance suite against the tcp transport: with same-node loans
//! (the default between processes of one node; here all ranks share a
//! process, which reads its own memory), with every get streamed, and
//! with no threads of its own (run by a caller's thread, as the runtime
//! runs it), and with every frame sealed (`TASKFOLD_INTEGRITY=mac`,
//! streamed and driven, so that every frame crosses the socket).

use taskfold_transports::conformance::{
    self, tcp_cluster, tcp_driven_cluster, tcp_sealed_cluster, tcp_streamed_cluster,
};

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
        mod driven {
            use super::*;
            $(
                #[test]
                fn $case() {
                    conformance::$case(&tcp_driven_cluster);
                }
            )*
        }
        mod sealed {
            use super::*;
            $(
                #[test]
                fn $case() {
                    conformance::$case(&tcp_sealed_cluster);
                }
            )*
        }
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

/// Streamed, a segmented get hands over each chunk (1 MiB by default) as it
/// is read: 3 MiB + 64 bytes come in four segments.
#[test]
fn streamed_gets_come_in_chunks() {
    let c = tcp_streamed_cluster(2);
    let data: Vec<u8> = (0..(3 << 20) + 64).map(|i| (i % 251) as u8).collect();
    c.transports[1].expose(taskfold_transports::BufferKey(7), data.clone().into());
    let got = conformance::segments(&c.transports[0], 1, 7).expect("segmented get");
    let lens: Vec<usize> = got.iter().map(|s| s.bytes.len()).collect();
    assert_eq!(lens, vec![1 << 20, 1 << 20, 1 << 20, 64]);
    let joined: Vec<u8> = got.iter().flat_map(|s| s.bytes.iter().copied()).collect();
    assert!(joined == data);
}

//! Kept results at the master: second copies that come before the
//! record they belong to.
use super::*;
use crate::master::{ResultAlsoKeptIn, ResultKeptIn};

/// A second copy of a live root's result (made at once, see
/// `Config::second_result_copies`) announced before the reduction
/// completed here: a spare of the record the completion makes, not a
/// record of its own (two records of one id would both be dropped).
#[test]
fn a_second_copy_before_the_completion_is_the_records_spare() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        let mut master = Master::new(4, Outbox::of(t), 1000);
        master.set_keep_results(true);
        let m = master.start();
        joined(&m).await;
        m.send(ResultAlsoKeptIn {
            from: Rank(3),
            root: 1,
            key: KEY,
        })
        .await
        .unwrap();
        m.send(ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 2,
        })
        .await
        .unwrap();
        let ends = run_to_end(&m, &ts).await;
        assert!(ends.iter().all(|(_, e)| e.is_none()), "{ends:?}");
        assert_eq!(result_counts(&m).await, (1, 0, 1));
    });
}

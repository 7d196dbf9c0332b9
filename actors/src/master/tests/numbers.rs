//! The master numbers its completions: every member of one reduction is
//! told the same number, and the next use of the key a higher one (the
//! book's Architecture chapter, Copies of a reused key).

use super::*;

/// Runs one use of `KEY` over every rank to its end; the completion
/// numbers its members were told.
async fn one_use(m: &Addr<Master>, ts: &[Arc<LoopbackTransport>]) -> Vec<(u32, Option<u64>)> {
    for r in 0..4 {
        m.send(join(r, None)).await.unwrap();
    }
    run_until_notices(m, ts, |to, msg| match msg {
        Msg::Complete {
            key: KEY,
            error: None,
            number,
        } => Some((to, *number)),
        _ => None,
    })
    .await
}

#[test]
fn each_use_of_a_key_is_completed_with_a_higher_number() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        let mut last = 0;
        for round in 0..3 {
            let ends = one_use(&m, &ts).await;
            assert_eq!(ends.len(), 4, "round {round}: {ends:?}");
            let number = ends[0].1.expect("a completion is numbered");
            assert!(ends.iter().all(|(_, n)| *n == Some(number)), "{ends:?}");
            assert!(number > last, "round {round}: {number} after {last}");
            last = number;
        }
    });
}

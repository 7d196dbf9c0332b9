//! The slot and the futures over it: fills, waits, the notice board.

use super::*;
use taskfold_transports::board::Board;

#[test]
fn fill_then_get() {
    let slot = Arc::new(Slot::default());
    let mut f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
    assert!(!f.is_done());
    assert!(matches!(
        f.wait_timeout(Duration::from_millis(1)),
        Err(ReduceError::Timeout(_))
    ));
    let s2 = slot.clone();
    let t = std::thread::spawn(move || s2.fill(Ok(Some(Box::new(7u32)))));
    assert_eq!(f.get().unwrap(), Some(7));
    t.join().unwrap();
}

#[test]
fn safe_once_marked_or_filled_never_before() {
    let slot = Arc::new(Slot::default());
    let f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
    assert!(!f.is_safe());
    assert_eq!(
        f.wait_safe_timeout(Duration::from_millis(1)),
        Err(ReduceError::Timeout(Duration::from_millis(1)))
    );
    let s2 = slot.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        s2.mark_safe();
    });
    f.wait_safe();
    assert!(f.is_safe());
    assert!(!f.is_done(), "safe is not done");
    t.join().unwrap();
    // The async form, and a fill that makes it safe.
    let slot = Arc::new(Slot::default());
    let f = ReduceFuture::<u32>::new(slot.clone(), "y".into());
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        slot.fill(Err(ReduceError::Shutdown));
    });
    futures::executor::block_on(f.safe());
    assert!(f.is_safe());
    t.join().unwrap();
    assert_eq!(f.get(), Err(ReduceError::Shutdown));
}

#[test]
fn errors_and_wrong_types() {
    let slot = Arc::new(Slot::default());
    slot.fill(Err(ReduceError::Shutdown));
    slot.fill(Ok(None)); // ignored: filled once
    assert_eq!(
        ReduceFuture::<u32>::new(slot, "x".into()).get(),
        Err(ReduceError::Shutdown)
    );
    let slot = Arc::new(Slot::default());
    slot.fill(Ok(Some(Box::new("str"))));
    assert!(matches!(
        ReduceFuture::<u32>::new(slot, "x".into()).get(),
        Err(ReduceError::Decode(_))
    ));
}

/// A slot linked to a fresh board, for reduction `key` (live).
fn linked(key: u64) -> (Arc<Slot>, Arc<Board>, Arc<Mutex<HashSet<u64>>>) {
    let board = Arc::new(Board::create().unwrap());
    let notices = crate::notices::Notices::default();
    notices.set(board.clone());
    let live = Arc::new(Mutex::new(HashSet::from([key])));
    let slot = Arc::new(Slot::with_board(BoardLink {
        notices,
        live: live.clone(),
        key,
        rank: 3,
    }));
    (slot, board, live)
}

#[test]
fn a_post_completes_an_armed_future_and_frees_its_id() {
    let (slot, board, live) = linked(5);
    slot.arm();
    let f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
    let b = board.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        b.post_complete(4); // another reduction: not this one
        std::thread::sleep(Duration::from_millis(30));
        b.post_complete(5);
    });
    assert_eq!(f.get(), Ok(None));
    t.join().unwrap();
    assert!(slot.by_board());
    assert!(!live.lock().unwrap().contains(&5), "the id is free again");
    // The worker's own end comes later: it neither fills the taken
    // slot nor frees the id a second time (it may name a new
    // reduction by then).
    live.lock().unwrap().insert(5);
    slot.release_key(&live, 5);
    assert!(live.lock().unwrap().contains(&5));
    slot.fill(Err(ReduceError::Shutdown));
    assert!(!slot.is_filled());
}

#[test]
fn a_fenced_rank_takes_nothing_from_the_board() {
    let (slot, board, _live) = linked(5);
    slot.arm();
    board.fence(3); // this rank (see `linked`)
    board.post_complete(5);
    let mut f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
    assert!(!f.is_done());
    assert!(matches!(
        f.wait_timeout(Duration::from_millis(20)),
        Err(ReduceError::Timeout(_))
    ));
    slot.fill(Err(ReduceError::Fenced));
    assert_eq!(f.get(), Err(ReduceError::Fenced));
}

#[test]
fn posts_before_arming_are_not_this_futures_and_a_fill_still_wakes_it() {
    let (slot, board, live) = linked(5);
    // An earlier reduction with the same key, posted before this one
    // started here.
    board.post_complete(5);
    slot.arm();
    let mut f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
    assert!(!f.is_done());
    assert!(matches!(
        f.wait_timeout(Duration::from_millis(20)),
        Err(ReduceError::Timeout(_))
    ));
    // The worker's answer (here a failure) wakes the waiter on the
    // board, which rings for every fill of a linked slot.
    let s2 = slot.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        s2.fill(Err(ReduceError::Shutdown));
    });
    let start = Instant::now();
    assert_eq!(f.get(), Err(ReduceError::Shutdown));
    assert!(start.elapsed() < Duration::from_secs(5));
    t.join().unwrap();
    assert!(!slot.by_board());
    slot.release_key(&live, 5);
    assert!(!live.lock().unwrap().contains(&5));
}

#[test]
fn await_works() {
    let slot = Arc::new(Slot::default());
    let f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        slot.fill(Ok(None));
    });
    assert_eq!(futures::executor::block_on(f), Ok(None));
    t.join().unwrap();
}

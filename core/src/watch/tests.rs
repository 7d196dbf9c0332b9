use super::*;
use proptest::prelude::*;

const T: Timing = Timing {
    period: Duration::from_millis(100),
    timeout: Duration::from_millis(1000),
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Checks every period from `from` (exclusive) to `to` (inclusive);
/// returns the time of the first check that declared the master lost.
fn checks(w: &mut MasterWatch, t0: Instant, from: u64, to: u64) -> Option<u64> {
    let mut at = from + 100;
    while at <= to {
        if w.check(t0 + ms(at), T).is_some() {
            return Some(at);
        }
        at += 100;
    }
    None
}

#[test]
fn a_master_that_pings_is_never_lost() {
    let t0 = Instant::now();
    let mut w = MasterWatch::new(t0);
    for k in 1..100 {
        w.heard(t0 + ms(k * 100 - 30));
        assert_eq!(w.check(t0 + ms(k * 100), T), None);
    }
}

#[test]
fn silence_is_declared_once_within_the_timeout_and_one_period() {
    let t0 = Instant::now();
    let mut w = MasterWatch::new(t0);
    w.heard(t0 + ms(250));
    let at = checks(&mut w, t0, 0, 5000).expect("declared lost");
    assert!(at > 250 + 1000, "not before the timeout: {at}");
    assert!(at <= 250 + 1000 + 100, "within timeout + period: {at}");
    assert!(matches!(&w, MasterWatch::Lost(Lost::Silent(d)) if *d > T.timeout));
    // Once: later checks, pings and link failures change nothing.
    assert_eq!(w.check(t0 + ms(9000), T), None);
    w.heard(t0 + ms(9100));
    assert!(w.is_lost());
    assert_eq!(w.link_down("reset"), None);
    assert_eq!(w.deadline(T), None);
}

#[test]
fn a_broken_link_is_a_loss_at_once() {
    let t0 = Instant::now();
    let mut w = MasterWatch::new(t0);
    let lost = w.link_down("connection reset").expect("lost");
    assert_eq!(lost, Lost::LinkDown("connection reset".into()));
    assert!(lost.to_string().contains("connection reset"), "{lost}");
    assert_eq!(w.check(t0 + ms(100), T), None, "declared once");
}

#[test]
fn time_this_rank_did_not_run_is_not_silence() {
    // Heard at 0, checked at 100, then this rank stops for 5 s: the
    // first check after it resumes does not blame the master, and the
    // pings waiting in its socket are read before the next.
    let t0 = Instant::now();
    let mut w = MasterWatch::new(t0);
    assert_eq!(w.check(t0 + ms(100), T), None);
    assert_eq!(w.check(t0 + ms(5100), T), None);
    w.heard(t0 + ms(5120));
    assert_eq!(checks(&mut w, t0, 5100, 6000), None);
    // A master that is really gone is still declared, a timeout later.
    let at = checks(&mut w, t0, 6000, 9000).expect("declared lost");
    assert!(at <= 5120 + 1100, "{at}");
}

#[test]
fn the_deadline_follows_the_last_ping() {
    let t0 = Instant::now();
    let mut w = MasterWatch::new(t0);
    assert_eq!(w.deadline(T), Some(t0 + ms(1100)));
    w.heard(t0 + ms(400));
    assert_eq!(w.deadline(T), Some(t0 + ms(1500)));
    // A ping reported out of order does not move it back.
    w.heard(t0 + ms(300));
    assert_eq!(w.deadline(T), Some(t0 + ms(1500)));
    assert_eq!(T.silence_bound(), ms(1100));
}

proptest! {
    /// With regular checks, the master is declared lost exactly when a
    /// check finds it silent past the timeout, and never later than
    /// timeout + one period after the last ping.
    #[test]
    fn regular_checks_decide_silence_exactly(
        pings in proptest::collection::vec(0u64..3000, 0..30),
    ) {
        let t0 = Instant::now();
        let mut pings = pings;
        pings.sort_unstable();
        let mut w = MasterWatch::new(t0);
        let mut last = 0;
        let mut declared = None;
        let mut at = 100;
        while at <= 6000 && declared.is_none() {
            for &p in pings.iter().filter(|&&p| p > at - 100 && p <= at) {
                w.heard(t0 + ms(p));
                last = p;
            }
            if w.check(t0 + ms(at), T).is_some() {
                declared = Some(at);
            } else {
                prop_assert!(at - last <= 1000, "silent {} ms at {at}", at - last);
            }
            at += 100;
        }
        let at = declared.expect("pings stop at 3 s: declared by 6 s");
        prop_assert!(at - last > 1000 && at - last <= 1100, "last {last}, declared {at}");
    }
}

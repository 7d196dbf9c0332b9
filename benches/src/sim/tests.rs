use super::*;

const US: f64 = 1e-6;

fn model(bytes: f64) -> Model {
    Model {
        intra: Link {
            alpha: 0.5 * US,
            beta: 0.1e-9,
        },
        inter: Link {
            alpha: 2.0 * US,
            beta: 0.1e-9,
        },
        gamma: 0.2e-9,
        mu: 1.0 * US,
        bytes,
        gather_max: 256.0 * 1024.0,
    }
}

fn one_node(ranks: usize) -> Layout {
    Layout {
        ranks,
        per_node: ranks,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 + 1e-9 * b.abs()
}

#[test]
fn two_ranks_flat_cost_two_joins_a_task_and_one_fold() {
    let m = model(1024.0);
    let l = one_node(2);
    let a = Pattern::Quiet.arrivals(2, 0.0, 1);
    let got = ready::run(&m, &l, &a, Shape::Flat);
    let step = m.step(&l, 0, 1, &a.slow);
    // Rank 0's join is handled at μ, rank 1's (α away) after it, the task
    // goes out μ later to the master's own rank, which folds.
    let want = m.intra.alpha.max(m.mu) + 2.0 * m.mu + step;
    assert!(close(got.makespan, want), "{} != {want}", got.makespan);
    assert_eq!(got.master_messages, 4 * 2 - 2);
    assert_eq!(got.decisions, 2, "one task, one completion");
}

#[test]
fn trees_receive_their_children_one_after_the_other() {
    let m = model(4096.0);
    let l = one_node(4);
    let a = Pattern::Quiet.arrivals(4, 0.0, 1);
    let step = m.step(&l, 0, 1, &a.slow);
    assert!(close(tree::makespan(&m, &l, &a, 2), 2.0 * step));
    assert!(close(tree::makespan(&m, &l, &a, 4), 3.0 * step));
    assert_eq!(tree::best(&m, &l, &a).0, 2);
}

#[test]
fn a_flat_master_handles_four_messages_per_rank() {
    for ranks in [3, 64, 1000] {
        let l = one_node(ranks);
        let a = Pattern::Staggered.arrivals(ranks, 1e-3, 7);
        let got = ready::run(&model(64.0), &l, &a, Shape::Flat);
        let n = ranks as u64;
        assert_eq!(got.master_messages, 4 * n - 2, "{ranks} ranks");
        assert_eq!(
            got.decisions, n,
            "{ranks} ranks: n - 1 tasks, one completion"
        );
        assert_eq!(got.node_messages, 0);
    }
}

#[test]
fn by_node_the_master_handles_four_messages_per_node() {
    for (ranks, per_node) in [(256, 16), (1000, 16), (4096, 64)] {
        let l = Layout { ranks, per_node };
        let a = Pattern::Load.arrivals(ranks, 0.0, 3);
        let got = ready::run(&model(8.0), &l, &a, Shape::ByNode);
        let nodes = l.nodes() as u64;
        assert_eq!(got.master_messages, 4 * nodes - 2, "{ranks}/{per_node}");
        assert_eq!(got.node_messages, 4 * per_node as u64 - 2);
        assert_eq!(got.decisions, ranks as u64 + nodes, "{ranks}/{per_node}");
    }
}

#[test]
fn a_slow_rank_is_folded_last_in_one_step() {
    let m = model(1048576.0);
    let l = one_node(64);
    let delay = 0.05;
    let a = Pattern::Slow.arrivals(64, delay, 1);
    let got = ready::run(&m, &l, &a, Shape::Flat);
    let step = m.step(&l, 0, 1, &a.slow);
    // Its join, the task to the root, the root's fold of its data.
    let bound = delay + m.intra.alpha + 3.0 * m.mu + step;
    assert!(got.makespan <= bound, "{} > {bound}", got.makespan);
    assert!(got.makespan >= delay + step);
    // The binomial tree folds it first at the root, then every other
    // subtree after it: log2(64) = 6 steps past the delay.
    let binomial = tree::makespan(&m, &l, &a, 2);
    assert!(close(binomial, delay + 6.0 * step), "{binomial}");
}

#[test]
fn a_loaded_rank_receives_less_under_the_faster_rank_rule() {
    // Quiet but loaded: the outcome differs from the same arrivals
    // unloaded, and stays deterministic.
    let m = model(1048576.0);
    let l = one_node(32);
    let loaded = Pattern::Load.arrivals(32, 0.0, 5);
    assert!(loaded.slow.iter().any(|&s| s > 1.0));
    let a = ready::run(&m, &l, &loaded, Shape::Flat);
    let b = ready::run(&m, &l, &loaded, Shape::Flat);
    assert_eq!(a.makespan, b.makespan);
    let quiet = ready::run(&m, &l, &Pattern::Quiet.arrivals(32, 0.0, 5), Shape::Flat);
    assert!(a.makespan > quiet.makespan);
}

#[test]
fn a_comparison_runs_every_shape_under_one_pattern() {
    let l = Layout {
        ranks: 300,
        per_node: 16,
    };
    for p in Pattern::ALL {
        let c = compare(&model(8.0), &l, p, 11);
        assert!(c.best_tree <= c.binomial || p != Pattern::Quiet);
        assert!((2..=tree::MAX_K).contains(&c.best_k));
        assert!(c.flat.makespan > 0.0 && c.by_node.makespan > 0.0);
    }
}

#[test]
fn gathering_by_node_cuts_the_masters_tasks_below_its_bound_only() {
    let l = Layout {
        ranks: 256,
        per_node: 16,
    };
    let a = Pattern::Quiet.arrivals(256, 0.0, 1);
    let small = model(8.0);
    let flat = ready::run(&small, &l, &a, Shape::Flat);
    let gathered = ready::run(&small, &l, &a, Shape::Gathered);
    // Joins and completions are 2p either way; paired, the tasks are
    // p - 1 more round trips.
    assert_eq!(flat.master_messages, 4 * 256 - 2);
    assert!(
        gathered.master_messages <= 2 * 256 + 2 * 4 * 16,
        "at most 4 tasks per node: {}",
        gathered.master_messages
    );
    assert!(gathered.makespan < flat.makespan);
    // Above the bound the schedule is the flat one.
    let large = model(1024.0 * 1024.0);
    let (f, g) = (
        ready::run(&large, &l, &a, Shape::Flat),
        ready::run(&large, &l, &a, Shape::Gathered),
    );
    assert_eq!(
        (f.master_messages, f.makespan),
        (g.master_messages, g.makespan)
    );
}

#[test]
fn the_gathered_schedule_runs_at_65536_ranks_in_three_tasks_per_node() {
    // Each decision reads the queue's index, so a reduction of 65,536
    // ranks takes the master's code a fraction of a second here; a scan
    // of the queue per decision took minutes.
    let l = Layout {
        ranks: 65_536,
        per_node: 16,
    };
    let a = Pattern::Quiet.arrivals(l.ranks, 0.0, 1);
    let g = ready::run(&model(8.0), &l, &a, Shape::Gathered);
    let nodes = (l.ranks / l.per_node) as u64;
    assert!(g.decisions <= 3 * nodes, "{} decisions", g.decisions);
    assert!(g.master_messages < 2 * l.ranks as u64 + 2 * 3 * nodes);
}

#[test]
fn no_schedule_ends_before_the_lower_bound() {
    let l = Layout {
        ranks: 200,
        per_node: 16,
    };
    for bytes in [8.0, 1048576.0] {
        for p in Pattern::ALL {
            let c = compare(&model(bytes), &l, p, 5);
            let ends = [
                c.flat.makespan,
                c.gathered.makespan,
                c.by_node.makespan,
                c.binomial,
                c.best_tree_here,
            ];
            for end in ends {
                assert!(end >= c.bound, "{p:?}, {bytes} B: {end} < {}", c.bound);
            }
            // A master over nodes hears each node before the result.
            let floor = model(bytes).master_floor(l.nodes());
            assert!(c.by_node.makespan >= floor, "{p:?}, {bytes} B");
        }
    }
}

#[test]
fn one_slow_rank_doubles_the_binomial_tree_and_no_schedule_halves_it() {
    // The pattern's delay is the binomial tree's quiet makespan, and the
    // late rank is the root's first child: the tree takes twice that. Any
    // schedule still moves the late data once after the delay, so none
    // ends within half of the tree's time.
    for (ranks, bytes) in [(64, 8.0), (4096, 8.0), (4096, 8388608.0)] {
        let l = Layout {
            ranks,
            per_node: 16,
        };
        let c = compare(&model(bytes), &l, Pattern::Slow, 1);
        assert!(close(c.binomial, 2.0 * c.delay), "{ranks}, {bytes} B");
        assert!(c.bound > 0.5 * c.binomial, "{ranks}, {bytes} B");
        assert!(close(c.bound, c.delay + model(bytes).cheapest_step()));
    }
}

use super::ip::{creator, Names};
use super::*;

#[test]
fn rates_read_as_tc_reads_them() {
    let bits = |s: &str| s.parse::<LinkRate>().map(LinkRate::bits_per_sec);
    assert_eq!(bits("1gbit"), Ok(1_000_000_000));
    assert_eq!(bits("100Mbit"), Ok(100_000_000));
    assert_eq!(bits("125mbps"), Ok(1_000_000_000));
    assert_eq!(bits("64000bit"), Ok(64_000));
    for bad in [
        "", "gbit", "1.5gbit", "10", "10 mbit", "-1gbit", "1gbits", "10bit",
    ] {
        let e = bad.parse::<LinkRate>().expect_err(bad);
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
    assert!("99999999999999999gbps".parse::<LinkRate>().is_err());
}

#[test]
fn a_bucket_holds_10_ms_and_at_least_one_offloaded_packet() {
    let burst = |s: &str| s.parse::<LinkRate>().unwrap().burst_bytes();
    assert_eq!(burst("1gbit"), 1_250_000);
    assert_eq!(burst("10mbit"), 64 << 10);
}

#[test]
fn ranks_are_placed_in_blocks_with_every_node_used() {
    let spec = |nodes| NodeSpec {
        nodes,
        link_rate: None,
    };
    let placed =
        |nodes, ranks| -> Vec<u32> { (0..ranks).map(|r| spec(nodes).node_of(r, ranks)).collect() };
    assert_eq!(placed(2, 4), [0, 0, 1, 1]);
    assert_eq!(placed(3, 3), [0, 1, 2]);
    assert_eq!(placed(2, 5), [0, 0, 0, 1, 1]);
    assert_eq!(placed(1, 3), [0, 0, 0]);
    for nodes in 1..=7 {
        for ranks in nodes..=20 {
            let p = placed(nodes, ranks);
            let counts: Vec<usize> = (0..nodes)
                .map(|k| p.iter().filter(|&&n| n == k).count())
                .collect();
            let (lo, hi) = (counts.iter().min(), counts.iter().max());
            assert!(lo >= Some(&1) && hi <= lo.map(|l| l + 1).as_ref(), "{p:?}");
            assert!(p.windows(2).all(|w| w[0] <= w[1]), "blocks: {p:?}");
        }
    }
}

#[test]
fn fewer_ranks_than_nodes_or_a_bad_count_is_refused() {
    let spec = |nodes| NodeSpec {
        nodes,
        link_rate: None,
    };
    let e = spec(3).check(2).unwrap_err().to_string();
    assert_eq!(
        e,
        "--sim-nodes 3 needs at least one rank per node: -n 2 is fewer"
    );
    assert!(spec(0).check(2).is_err());
    assert!(spec(MAX_NODES + 1).check(1000).is_err());
    assert!(spec(MAX_NODES).check(MAX_NODES).is_ok());
    assert_eq!(node_address(0), Ipv4Addr::new(198, 18, 0, 1));
    assert_eq!(node_address(MAX_NODES - 1), Ipv4Addr::new(198, 18, 0, 250));
}

#[test]
fn names_say_which_process_made_them_and_never_repeat() {
    let (a, b) = (Names::fresh(), Names::fresh());
    assert_ne!(a, b);
    let me = std::process::id();
    for name in [a.switch(), a.node(0), b.node(17)] {
        assert_eq!(creator(&name), Some(me), "{name}");
    }
    assert_ne!(a.node(1), a.node(2));
    for other in ["tf-", "tf-12", "tf-x1-n0", "tf-12-", "ns1", "taskfold-1-n0"] {
        assert_eq!(creator(other), None, "{other}");
    }
}

#[test]
fn a_missing_program_is_named() {
    let e = find_program(OsStr::new("./no/such/program"));
    assert_eq!(e, None);
    assert!(find_program(OsStr::new("sh")).is_some());
    let e = NodesError::NoProgram("psdm-x".into()).to_string();
    assert_eq!(e, "cannot start \"psdm-x\": no such program");
}

//! Fault tolerance across real processes over TCP (DESIGN.md §2): the
//! scenarios of `taskfold_tests::faults` — SIGKILL at the three places a
//! failure can strike, a rank with its buddy, the root, and a SIGSTOPped
//! rank fenced — under `taskfold run` with the default transport.

use std::path::PathBuf;
use taskfold_tests::faults::{self, Job};
use taskfold_tests::taskfold_bin;

fn job() -> Job {
    Job {
        taskfold: taskfold_bin(),
        tf_check: PathBuf::from(env!("CARGO_BIN_EXE_tf_check")),
        env: Vec::new(),
    }
}

#[test]
fn place_2_sigkill_of_a_receiver_while_it_folds() {
    faults::place_2_receiver_killed_while_it_folds(&job());
}

#[test]
fn place_3_sigkill_of_a_provider_while_the_receiver_fetches() {
    faults::place_3_provider_killed_while_the_receiver_fetches(&job());
}

#[test]
fn place_1_sigkill_before_the_task_reaches_its_receiver() {
    faults::place_1_killed_before_the_task_reaches_it(&job());
}

#[test]
fn sigkill_of_a_rank_and_its_buddy_is_a_typed_error_everywhere() {
    faults::rank_and_buddy_killed(&job());
}

#[test]
fn sigkill_of_the_root_is_a_typed_error_everywhere() {
    faults::root_killed(&job());
}

#[test]
fn a_stopped_rank_is_declared_failed_fenced_and_changes_nothing_when_resumed() {
    faults::stopped_rank_fenced(&job());
}

//! Fault tolerance across real processes over TCP (the book's Architecture
//! chapter, Failures during a reduction): the scenarios of
//! `taskfold_tests::faults` — SIGKILL at the three places a failure can strike,
//! a rank with its buddy, the root, a SIGSTOPped rank fenced, and a rank killed
//! with only its (unannounced) disk copy left — under `taskfold run` with the
//! default transport.

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

/// The same with `Completion::Contributed` on every rank: the provider's
/// future completes once its data is folded in, the runtime keeps serving
/// its original, and shutdown waits for the reduction to end everywhere.
#[test]
fn place_2_sigkill_with_early_completion() {
    let mut job = job();
    job.env
        .push(("TASKFOLD_COMPLETION".into(), "contributed".into()));
    faults::place_2_receiver_killed_while_it_folds(&job);
}

#[test]
fn place_3_sigkill_of_a_provider_while_the_receiver_fetches() {
    faults::place_3_provider_killed_while_the_receiver_fetches(&job());
}

#[test]
fn place_3_sigkill_of_a_provider_in_the_middle_of_a_streamed_get() {
    faults::place_3_provider_killed_in_the_middle_of_a_streamed_get(&job());
}

#[test]
fn place_1_sigkill_before_the_task_reaches_its_receiver() {
    faults::place_1_killed_before_the_task_reaches_it(&job());
}

#[test]
fn place_1_sigkill_of_a_rank_whose_original_is_only_in_memory() {
    faults::place_1_killed_with_its_original_only_in_memory(&job());
}

#[test]
fn async_sigkill_after_a_join_with_a_standing_copy_is_recovered_from_the_buddys_view() {
    faults::place_1_killed_after_a_join_with_a_standing_copy(&job());
}

#[test]
fn async_sigkill_of_a_small_contribution_after_its_join_is_recovered_from_the_buddys_view() {
    faults::small_killed_after_a_join_with_a_standing_copy(&job());
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

#[test]
fn a_stopped_rank_with_standing_copies_is_recovered_from_its_buddys_mapping() {
    faults::stopped_rank_with_standing_copies_fenced(&job());
}

#[test]
fn async_sigkill_after_the_disk_write_before_the_join_is_recovered_from_the_inferred_disk_copy() {
    faults::killed_after_its_disk_write_before_its_join(&job());
}

#[test]
fn async_sigkill_after_the_disk_write_before_anyone_joined_is_recovered_too() {
    faults::killed_after_its_disk_write_before_anyone_joined(&job());
}

#[test]
fn a_stale_unannounced_disk_copy_is_refused_with_a_typed_error() {
    faults::a_stale_disk_copy_is_refused(&job());
}

#[test]
fn a_corrupt_unannounced_disk_copy_is_a_typed_error_not_a_wrong_result() {
    faults::a_corrupt_disk_copy_is_a_typed_error(&job());
}

#[test]
fn sigkill_of_the_master_is_master_lost_everywhere_and_ends_the_job() {
    faults::master_killed(&job());
}

#[test]
fn a_stopped_master_is_master_lost_everywhere_after_the_failure_timeout() {
    faults::master_stopped(&job());
}

#[test]
fn a_rank_that_finalizes_without_joining_ends_the_others_reductions_at_once() {
    faults::rank_left_without_joining(&job());
}

#[test]
fn sync_sigkill_right_after_reduce_returned_is_always_recovered() {
    faults::killed_once_sync_reduce_returned(&job());
}

#[test]
fn async_sigkill_inside_the_durability_window_is_recovered_or_a_typed_error() {
    faults::killed_inside_the_async_window(&job());
}

#[test]
fn sigkill_of_a_gathered_provider_before_the_root_reads_it() {
    faults::gathered_provider_killed_while_the_root_gathers(&job());
}

#[test]
fn sigkill_of_a_gathered_provider_after_the_root_read_it() {
    faults::gathered_provider_killed_while_the_root_folds(&job());
}

#[test]
fn sigkill_of_the_root_while_it_gathers_is_a_typed_error_everywhere() {
    faults::root_killed_while_it_gathers(&job());
}

#[test]
fn sigkill_of_a_member_gathering_its_node_is_survived() {
    faults::member_killed_while_it_gathers_its_node(&job());
}

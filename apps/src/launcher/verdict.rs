//! How a job ended, from its ranks' exits: a job whose ranks all exited 0
//! ended cleanly; one that lost ranks to signals (killed, crashed) while
//! every other rank exited 0 survived them (taskfold recovered, or the
//! application went on without them); one whose time limit came was
//! stopped; anything else failed. Each way has its exit code and one line.

use super::{ranks_list, RankExit, Stopped};

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every rank exited 0.
    Clean,
    /// These ranks were killed by a signal, and every other rank exited 0.
    Survived(Vec<u32>),
    /// The job did not end well: why, in words (a rank exited with a
    /// non-zero code, the application's own failure; the master died with
    /// no standby to take over; every rank was lost).
    Failed(String),
    /// `--timeout` came: the ranks still running were stopped.
    TimedOut,
}

impl Verdict {
    /// The verdict on `exits`.
    pub fn of(exits: &[RankExit]) -> Verdict {
        if exits.iter().any(|e| e.stopped == Some(Stopped::TimeLimit)) {
            return Verdict::TimedOut;
        }
        if let Some(m) = exits.iter().find(|e| e.ended_job) {
            return Verdict::Failed(format!(
                "the master, rank {}, {} and no standby took over",
                m.rank,
                m.how()
            ));
        }
        let coded: Vec<u32> = exits
            .iter()
            .filter(|e| e.code_and_signal().1 == 0 && !e.success())
            .map(|e| e.rank)
            .collect();
        match coded.as_slice() {
            [] => {}
            [r] => {
                let e = exits.iter().find(|e| e.rank == *r).expect("the rank");
                return Verdict::Failed(format!("rank {r} {}", e.how()));
            }
            many => {
                return Verdict::Failed(format!(
                    "ranks {} exited with non-zero codes",
                    ranks_list(many)
                ))
            }
        }
        if !exits.iter().any(RankExit::success) {
            return Verdict::Failed("every rank was lost".into());
        }
        let mut lost: Vec<u32> = exits
            .iter()
            .filter(|e| !e.success())
            .map(|e| e.rank)
            .collect();
        lost.dedup();
        match lost.is_empty() {
            true => Verdict::Clean,
            false => Verdict::Survived(lost),
        }
    }

    /// The launcher's exit code: 0 clean or survived, 1 failed, 124 timed
    /// out (2, the job could not run, is not a verdict).
    pub fn exit_code(&self) -> u8 {
        match self {
            Verdict::Clean | Verdict::Survived(_) => 0,
            Verdict::Failed(_) => 1,
            Verdict::TimedOut => 124,
        }
    }

    /// The job's one line (after `taskfold run: `).
    pub fn line(&self, exits: &[RankExit]) -> String {
        let ranks = {
            let mut r: Vec<u32> = exits.iter().map(|e| e.rank).collect();
            r.dedup();
            r.len()
        };
        match self {
            Verdict::Clean if ranks == 1 => "done: the rank exited 0".into(),
            Verdict::Clean => format!("done: all {ranks} ranks exited 0"),
            Verdict::Survived(lost) => {
                let replaced: Vec<u32> = exits
                    .iter()
                    .filter(|e| e.replaced)
                    .map(|e| e.rank)
                    .collect();
                let replaced = match replaced.is_empty() {
                    true => String::new(),
                    false => format!(" (replaced: {})", ranks_list(&replaced)),
                };
                format!(
                    "done: the job survived the loss of rank{} {}{replaced}; every other \
                     process exited 0",
                    if lost.len() == 1 { "" } else { "s" },
                    ranks_list(lost)
                )
            }
            Verdict::Failed(why) => format!("failed: {why}"),
            Verdict::TimedOut => "failed: the time limit (--timeout) was reached".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn exit(rank: u32, raw: i32) -> RankExit {
        RankExit {
            rank,
            status: ExitStatus::from_raw(raw),
            ended_job: false,
            incarnation: 0,
            replaced: false,
            stopped: None,
        }
    }

    #[test]
    fn a_loss_to_a_signal_is_survived_if_every_other_rank_exits_0() {
        let (ok, code1, killed) = (0, 1 << 8, 9);
        let clean = [exit(0, ok), exit(1, ok)];
        assert_eq!(Verdict::of(&clean), Verdict::Clean);
        assert_eq!(Verdict::Clean.line(&clean), "done: all 2 ranks exited 0");
        let survived = [exit(0, killed), exit(1, ok), exit(2, ok)];
        assert_eq!(Verdict::of(&survived), Verdict::Survived(vec![0]));
        assert_eq!(Verdict::of(&survived).exit_code(), 0);
        // An application's own failure, or nobody left.
        let coded = [exit(0, killed), exit(1, code1)];
        assert_eq!(
            Verdict::of(&coded),
            Verdict::Failed("rank 1 exited with code 1".into())
        );
        assert_eq!(Verdict::of(&coded).exit_code(), 1);
        assert_eq!(
            Verdict::of(&[exit(0, killed), exit(1, killed)]),
            Verdict::Failed("every rank was lost".into())
        );
        // A master that died with no standby ends the job, whatever the
        // others did then; it died only if killed by a signal.
        let mut master = exit(0, killed);
        master.ended_job = true;
        assert_eq!(
            Verdict::of(&[master, exit(1, ok)]).line(&[]),
            "failed: the master, rank 0, died (killed by signal 9, SIGKILL) and no standby took over"
        );
        let mut master = exit(0, 3 << 8);
        master.ended_job = true;
        assert_eq!(
            Verdict::of(&[master, exit(1, ok)]).line(&[]),
            "failed: the master, rank 0, exited with code 3 and no standby took over"
        );
    }

    #[test]
    fn a_time_limit_has_its_own_exit_code() {
        let mut stopped = exit(1, 9);
        stopped.stopped = Some(Stopped::TimeLimit);
        let v = Verdict::of(&[exit(0, 0), stopped]);
        assert_eq!(v, Verdict::TimedOut);
        assert_eq!(v.exit_code(), 124);
    }
}

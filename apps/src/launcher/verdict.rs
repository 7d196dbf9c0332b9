//! How a job ended, from its ranks' exits: a job whose ranks all exited 0
//! ended cleanly; one that lost ranks to signals (killed, crashed) while
//! every other rank exited 0 survived them (taskfold recovered, or the
//! application went on without them); anything else failed.

use super::RankExit;

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every rank exited 0.
    Clean,
    /// These ranks were killed by a signal, and every other rank exited 0.
    Survived(Vec<u32>),
    /// A rank exited with a non-zero code (the application's own failure),
    /// every rank was lost, or the master died with no standby to take
    /// over: the job did not end well.
    Failed,
}

impl Verdict {
    /// The verdict on `exits`.
    pub fn of(exits: &[RankExit]) -> Verdict {
        if exits.iter().any(|e| e.ended_job) || !exits.iter().any(RankExit::success) {
            return Verdict::Failed;
        }
        let mut lost = Vec::new();
        for e in exits.iter().filter(|e| !e.success()) {
            match e.code_and_signal() {
                (_, 0) => return Verdict::Failed,
                _ => lost.push(e.rank),
            }
        }
        match lost.is_empty() {
            true => Verdict::Clean,
            false => Verdict::Survived(lost),
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
        }
    }

    #[test]
    fn a_loss_to_a_signal_is_survived_if_every_other_rank_exits_0() {
        let (ok, code1, killed) = (0, 1 << 8, 9);
        assert_eq!(Verdict::of(&[exit(0, ok), exit(1, ok)]), Verdict::Clean);
        assert_eq!(
            Verdict::of(&[exit(0, killed), exit(1, ok), exit(2, ok)]),
            Verdict::Survived(vec![0])
        );
        // An application's own failure, or nobody left.
        assert_eq!(
            Verdict::of(&[exit(0, killed), exit(1, code1)]),
            Verdict::Failed
        );
        assert_eq!(Verdict::of(&[exit(0, code1), exit(1, ok)]), Verdict::Failed);
        assert_eq!(
            Verdict::of(&[exit(0, killed), exit(1, killed)]),
            Verdict::Failed
        );
        // A master that died with no standby ends the job, whatever the
        // others did then.
        let mut master = exit(0, killed);
        master.ended_job = true;
        assert_eq!(Verdict::of(&[master, exit(1, ok)]), Verdict::Failed);
    }
}

//! How a job ended, from its ranks' exits: a job whose ranks all exited 0
//! ended cleanly; one that lost ranks and whose survivors then all exited
//! 0 survived them (taskfold recovered, or the application went on
//! without them); anything else failed.

use super::RankExit;

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every rank exited 0.
    Clean,
    /// These ranks failed (killed, or a non-zero exit) while the others
    /// ran on, and every rank that outlived them exited 0.
    Survived(Vec<u32>),
    /// A rank failed after another had exited 0, no rank exited 0, or the
    /// master died with no standby to take over: the job did not end well.
    Failed,
}

impl Verdict {
    /// The verdict on `exits`, in the order the launcher saw them.
    pub fn of(exits: &[RankExit]) -> Verdict {
        let mut seen: Vec<&RankExit> = exits.iter().collect();
        seen.sort_by_key(|e| e.order);
        if seen.iter().any(|e| e.ended_job) {
            return Verdict::Failed;
        }
        let first_clean = seen.iter().position(|e| e.success());
        let failed: Vec<u32> = seen
            .iter()
            .filter(|e| !e.success())
            .map(|e| e.rank)
            .collect();
        match first_clean {
            None => Verdict::Failed,
            Some(_) if failed.is_empty() => Verdict::Clean,
            Some(i) if seen[i..].iter().all(|e| e.success()) => Verdict::Survived(failed),
            Some(_) => Verdict::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn exit(rank: u32, order: usize, raw: i32) -> RankExit {
        RankExit {
            rank,
            status: ExitStatus::from_raw(raw),
            order,
            ended_job: false,
        }
    }

    #[test]
    fn a_loss_is_survived_only_if_every_later_exit_is_clean() {
        let (ok, code1, killed) = (0, 1 << 8, 9);
        assert_eq!(
            Verdict::of(&[exit(0, 0, ok), exit(1, 1, ok)]),
            Verdict::Clean
        );
        assert_eq!(
            Verdict::of(&[exit(1, 1, ok), exit(0, 0, killed), exit(2, 2, ok)]),
            Verdict::Survived(vec![0])
        );
        // A failure after a clean exit, or no clean exit at all.
        assert_eq!(
            Verdict::of(&[exit(0, 0, ok), exit(1, 1, code1)]),
            Verdict::Failed
        );
        assert_eq!(
            Verdict::of(&[exit(0, 0, killed), exit(1, 1, code1)]),
            Verdict::Failed
        );
        // A master that died with no standby ends the job, whatever the
        // others did then.
        let mut master = exit(0, 0, killed);
        master.ended_job = true;
        assert_eq!(Verdict::of(&[master, exit(1, 1, ok)]), Verdict::Failed);
    }
}

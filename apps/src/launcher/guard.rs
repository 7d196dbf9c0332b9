//! `taskfold guard -- PROGRAM ARGS...`: one rank's process under a parent
//! that outlives it.
//!
//! MPICH's `mpiexec` (hydra 4.0) ends the whole job when one of its
//! processes is killed by a signal, even with `-disable-auto-cleanup`; a
//! process that *exits* with a code leaves the others running. Spares can
//! take a dead rank's place only if the others live on, so each rank runs
//! under this guard: it starts the program, passes SIGINT, SIGTERM and
//! SIGHUP on to it, and exits with the program's code, or 128 plus the
//! signal's number if a signal ended it (the shell's convention).
//!
//! The guard holds nothing of the job: the environment, the standard
//! streams and every inherited descriptor (a PMI socket among them) go to
//! the program unchanged, and the program's own pid is the rank's.

use rustix::process::{kill_process, Pid, Signal};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode, ExitStatus};
use tokio::signal::unix::{signal, SignalKind};

/// Examples of `taskfold guard --help`.
const EXAMPLES: &str = "\
Examples:
  mpiexec -n 8 -disable-auto-cleanup taskfold guard -- ./app     each rank under a guard
  TASKFOLD_SPARES=2 mpiexec -n 10 -disable-auto-cleanup taskfold guard -- ./app";

/// `taskfold guard`'s arguments.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct GuardArgs {
    /// The program to run, and its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "PROGRAM"
    )]
    program: Vec<OsString>,
}

/// Runs the program; its exit code, or 128 plus the signal that ended it.
pub fn main(args: GuardArgs) -> ExitCode {
    let Some((program, rest)) = args.program.split_first() else {
        eprintln!("taskfold guard: no program to run");
        return ExitCode::from(2);
    };
    let mut child = match Command::new(program).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "taskfold guard: cannot start {}: {e}",
                program.to_string_lossy()
            );
            return ExitCode::from(127);
        }
    };
    if let Err(e) = forward_signals(child.id()) {
        // The program runs regardless: only the launcher's stop signals
        // would not reach it through the guard.
        eprintln!("taskfold guard: signals are not passed on: {e}");
    }
    match child.wait() {
        Ok(status) => ExitCode::from(exit_code(status)),
        Err(e) => {
            eprintln!(
                "taskfold guard: cannot wait for {}: {e}",
                program.to_string_lossy()
            );
            ExitCode::from(1)
        }
    }
}

/// The guard's exit code for the program's `status`.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal.clamp(0, 127) as u8),
        (None, None) => 1,
    }
}

/// Passes SIGINT, SIGTERM and SIGHUP on to `pid`, from a thread of its
/// own for as long as the guard lives.
fn forward_signals(pid: u32) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let (mut int, mut term, mut hup) = {
        let _guard = rt.enter();
        (
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
            signal(SignalKind::hangup())?,
        )
    };
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Ok(());
    };
    std::thread::Builder::new()
        .name("taskfold-guard".into())
        .spawn(move || {
            rt.block_on(async {
                loop {
                    let sig = tokio::select! {
                        _ = int.recv() => Signal::INT,
                        _ = term.recv() => Signal::TERM,
                        _ = hup.recv() => Signal::HUP,
                    };
                    // Gone already: its status is the guard's answer.
                    let _ = kill_process(pid, sig);
                }
            })
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::exit_code;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    #[test]
    fn a_code_is_kept_and_a_signal_becomes_128_plus_its_number() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        // Killed by SIGKILL (9): the raw status is the signal number.
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
    }
}

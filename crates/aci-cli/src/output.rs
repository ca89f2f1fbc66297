//! Writing results to stdout, where a closed pipe is a normal end.
//!
//! `aci inspect … | head` closes the pipe while `aci` still writes. That is
//! how a reader says it has seen enough, so it ends the command quietly with
//! exit status 141 (128 + SIGPIPE, what a shell reports for a program killed
//! by the signal), never with a panic.

use std::fmt;
use std::io::Write as _;

use crate::error::CliError;

/// Writes `args` to stdout; a closed stdout is [`CliError::closed_stdout`].
pub(crate) fn write_stdout(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_fmt(args)
        .and_then(|()| stdout.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => CliError::closed_stdout(),
            kind => CliError::config(format!("cannot write to stdout: {kind}")),
        })
}

/// `print!` that returns `Result<(), CliError>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` that returns `Result<(), CliError>` instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

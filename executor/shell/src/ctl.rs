//! Control flow that unwinds the executor (`break`, `continue`, `return`, `exit`, a failed
//! expansion), on its own so the budget, the fd table and the shell state can all stop a
//! run without importing each other.

/// Control flow that unwinds the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctl {
    Break(usize),
    Continue(usize),
    Return(i32),
    /// Ends the shell (or the subshell) with this status.
    Exit(i32),
    /// The current command failed before running (expansion or redirection error).
    Fail(i32),
}

pub(crate) type R = Result<i32, Ctl>;

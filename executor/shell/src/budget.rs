//! The budgets of one shell run (issue 19): a deadline and a memory budget shared by the
//! script, its subshells, pipeline stages, substitutions and background jobs.
//!
//! Memory is counted where the shell holds growable data across an `await`: variable values
//! ([`Text`], shared by reference between subshells, so a copy of the state costs nothing),
//! positional parameters, function bodies, the words of the command being expanded, the
//! output captured by `$(...)` and here-document bodies ([`Charge`]). Copies made inside
//! one synchronous step are not counted but are checked against what is left ([`Budget::fits`]),
//! so the real footprint stays within a small constant factor of the budget.
//!
//! Once a budget trips, the run is over: the reason is sticky, every later check fails and
//! the interpreter unwinds with [`Stop::status`]. This module owns no I/O; the message is
//! written once by the caller of the run ([`crate::run`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Instant;

use super::ctl::Ctl;

/// Default memory budget of one run: 64 MiB.
pub const DEFAULT_MEMORY: usize = 64 << 20;

/// Default limit on the argument list (argv + environment) of one program, like Linux's
/// `ARG_MAX` (2 MiB).
pub const DEFAULT_ARGS: usize = 2 << 20;

/// How often the sync loops of long expansions look at the clock (in iterations).
pub(crate) const CLOCK_EVERY: usize = 1024;

/// The limits of one run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most bytes the shell's values may hold at once (`--wasm-shell-memory`).
    pub memory: usize,
    /// Most bytes of argv + environment handed to one program (E2BIG beyond).
    pub args: usize,
    /// When the run must end (checked in loops, commands and long expansions).
    pub deadline: Option<Instant>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: DEFAULT_MEMORY,
            args: DEFAULT_ARGS,
            deadline: None,
        }
    }
}

/// Why a run was stopped by its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    /// The deadline passed (the caller reports it as a timeout, status 124).
    #[error("msc-shell: timed out")]
    Deadline,
    /// The values would have exceeded the memory budget (status 137, like a process the
    /// kernel's OOM killer ends, and like a WASM program at `--wasm-max-memory`).
    #[error(
        "msc-shell: out of memory: the shell's values would exceed {} (--wasm-shell-memory); write large data to a file instead",
        size_text(*limit)
    )]
    Memory { limit: usize },
}

impl Stop {
    /// The exit status of a run that ended this way.
    pub fn status(self) -> i32 {
        match self {
            Stop::Deadline => 124,
            Stop::Memory { .. } => 128 + 9,
        }
    }
}

/// `64 MiB`, `512 KiB` or `1000 bytes`.
pub fn size_text(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

const RUNNING: u8 = 0;
const DEADLINE: u8 = 1;
const MEMORY: u8 = 2;

/// The shared counters of one run.
#[derive(Debug)]
pub(crate) struct Budget {
    limits: Limits,
    held: AtomicUsize,
    stop: AtomicU8,
}

impl Budget {
    pub(crate) fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            held: AtomicUsize::new(0),
            stop: AtomicU8::new(RUNNING),
        })
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Why the run was stopped, if it was.
    pub(crate) fn stopped(&self) -> Option<Stop> {
        match self.stop.load(Ordering::Relaxed) {
            DEADLINE => Some(Stop::Deadline),
            MEMORY => Some(Stop::Memory {
                limit: self.limits.memory,
            }),
            _ => None,
        }
    }

    /// Records the first reason to stop; returns the unwinding signal of the run.
    fn trip(&self, code: u8) -> Ctl {
        let _ = self
            .stop
            .compare_exchange(RUNNING, code, Ordering::Relaxed, Ordering::Relaxed);
        Ctl::Exit(self.stopped().map_or(2, Stop::status))
    }

    /// Fails once the run was stopped or its deadline passed (one clock read).
    pub(crate) fn check(&self) -> Result<(), Ctl> {
        if let Some(s) = self.stopped() {
            return Err(Ctl::Exit(s.status()));
        }
        match self.limits.deadline {
            Some(d) if Instant::now() >= d => Err(self.trip(DEADLINE)),
            _ => Ok(()),
        }
    }

    /// For sync loops: true when the run must stop, looking at the clock every
    /// [`CLOCK_EVERY`] iterations (`i` counts them) and at the stop flag every time.
    pub(crate) fn halted(&self, i: usize) -> bool {
        self.stopped().is_some() || (i.is_multiple_of(CLOCK_EVERY) && self.check().is_err())
    }

    /// Bytes still free.
    pub(crate) fn available(&self) -> usize {
        self.limits
            .memory
            .saturating_sub(self.held.load(Ordering::Relaxed))
    }

    /// Fails (and stops the run) unless `n` more bytes fit, without holding them.
    pub(crate) fn fits(&self, n: usize) -> Result<(), Ctl> {
        if let Some(s) = self.stopped() {
            return Err(Ctl::Exit(s.status()));
        }
        if n > self.available() {
            return Err(self.trip(MEMORY));
        }
        Ok(())
    }

    fn take(&self, n: usize) -> Result<(), Ctl> {
        if let Some(s) = self.stopped() {
            return Err(Ctl::Exit(s.status()));
        }
        let before = self.held.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) > self.limits.memory {
            self.held.fetch_sub(n, Ordering::Relaxed);
            return Err(self.trip(MEMORY));
        }
        Ok(())
    }

    fn give_back(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::Relaxed);
    }
}

/// Bytes held against the budget while this lives.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<Budget>,
    n: usize,
}

impl Charge {
    pub(crate) fn new(budget: &Arc<Budget>) -> Self {
        Self {
            budget: budget.clone(),
            n: 0,
        }
    }

    /// A charge of `n` bytes (fails, and stops the run, when they do not fit).
    pub(crate) fn of(budget: &Arc<Budget>, n: usize) -> Result<Self, Ctl> {
        let mut c = Self::new(budget);
        c.grow(n)?;
        Ok(c)
    }

    pub(crate) fn grow(&mut self, n: usize) -> Result<(), Ctl> {
        self.budget.take(n)?;
        self.n += n;
        Ok(())
    }

    pub(crate) fn shrink(&mut self, n: usize) {
        let n = n.min(self.n);
        self.budget.give_back(n);
        self.n -= n;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give_back(self.n);
    }
}

/// A value counted against the budget while it lives (function bodies, parameters).
#[derive(Debug)]
pub(crate) struct Counted<T> {
    value: T,
    _charge: Charge,
}

impl<T> Counted<T> {
    /// Counts `n` bytes for `value` (fails, and stops the run, when they do not fit).
    pub(crate) fn new(budget: &Arc<Budget>, value: T, n: usize) -> Result<Self, Ctl> {
        Ok(Self {
            value,
            _charge: Charge::of(budget, n)?,
        })
    }
}

impl<T> std::ops::Deref for Counted<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// A variable's value: counted once, shared by reference between the copies of the state
/// that subshells, pipeline stages and background jobs make.
#[derive(Clone, Default)]
pub(crate) struct Text(Option<Arc<Counted<String>>>);

impl Text {
    /// Counts `s` against the budget (fails, and stops the run, when it does not fit).
    pub(crate) fn new(budget: &Arc<Budget>, s: String) -> Result<Self, Ctl> {
        if s.is_empty() {
            return Ok(Self(None));
        }
        let n = s.len();
        Ok(Self(Some(Arc::new(Counted::new(budget, s, n)?))))
    }

    pub(crate) fn as_str(&self) -> &str {
        self.0.as_ref().map_or("", |a| a.as_str())
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// The positional parameters, counted and shared like [`Text`].
#[derive(Clone, Default, Debug)]
pub(crate) struct Params(Option<Arc<Counted<Vec<String>>>>);

impl Params {
    pub(crate) fn new(budget: &Arc<Budget>, list: Vec<String>) -> Result<Self, Ctl> {
        if list.is_empty() {
            return Ok(Self(None));
        }
        let n = list.iter().map(|s| s.len() + 8).sum();
        Ok(Self(Some(Arc::new(Counted::new(budget, list, n)?))))
    }
}

impl std::ops::Deref for Params {
    type Target = [String];
    fn deref(&self) -> &[String] {
        self.0.as_ref().map_or(&[], |a| a.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_counted_and_given_back() {
        let b = Budget::new(Limits {
            memory: 100,
            ..Limits::default()
        });
        let t = Text::new(&b, "x".repeat(60)).unwrap();
        let shared = t.clone();
        assert_eq!(b.available(), 40);
        let mut c = Charge::new(&b);
        c.grow(40).unwrap();
        assert_eq!(b.available(), 0);
        drop(c);
        drop(t);
        assert_eq!(
            b.available(),
            40,
            "a shared value is held while one copy lives"
        );
        drop(shared);
        assert_eq!(b.available(), 100);
        assert!(b.stopped().is_none());
        assert!(Text::new(&b, "x".repeat(101)).is_err());
        assert_eq!(b.stopped(), Some(Stop::Memory { limit: 100 }));
        assert!(
            Text::new(&b, "y".into()).is_err(),
            "a tripped budget stays tripped"
        );
    }

    #[test]
    fn the_messages_name_the_limit_and_the_flag() {
        let m = Stop::Memory { limit: 64 << 20 }.to_string();
        assert_eq!(
            m,
            "msc-shell: out of memory: the shell's values would exceed 64 MiB \
             (--wasm-shell-memory); write large data to a file instead"
        );
        assert_eq!(Stop::Memory { limit: 1 }.status(), 137);
        assert_eq!(Stop::Deadline.status(), 124);
        assert_eq!(size_text(1536), "1536 bytes");
        assert_eq!(size_text(512 << 10), "512 KiB");
    }
}

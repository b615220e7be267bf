//! Background jobs kept between runs: a computer's job table, owned by the host.
//!
//! A WASM computer has no processes of its own, so a job started with `&` is a task of the
//! server. With a [`Jobs`] table in [`crate::ShellConfig`], the jobs still running when a
//! run ends are handed to the table instead of being cancelled, and the next run on the
//! computer takes them back: `jobs`, `wait`, `kill %1` and `$!` see them. A kept job still
//! ends at the deadline of the run that started it (every command has a timeout); its
//! output after that run returned is dropped. [`Jobs::clear`] (restart, factory reset,
//! delete) cancels every job.

use std::sync::Mutex;

use super::state::Job;

/// One computer's background jobs between runs.
#[derive(Default)]
pub struct Jobs {
    inner: Mutex<Kept>,
}

#[derive(Default)]
pub(crate) struct Kept {
    pub(crate) jobs: Vec<Job>,
    /// The next job number and process id to hand out (they keep counting across runs).
    pub(crate) next_job_id: usize,
    pub(crate) next_pid: u32,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").field("kept", &self.len()).finish()
    }
}

impl Jobs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every kept job.
    pub fn clear(&self) {
        let jobs = std::mem::take(&mut self.lock().jobs);
        drop(jobs);
    }

    /// How many jobs are kept (running or not yet reported).
    pub fn len(&self) -> usize {
        self.lock().jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the kept jobs and counters for a run.
    pub(crate) fn take(&self) -> Kept {
        let mut k = self.lock();
        Kept {
            jobs: std::mem::take(&mut k.jobs),
            next_job_id: k.next_job_id.max(1),
            next_pid: k.next_pid.max(1000),
        }
    }

    /// Keeps the jobs of an ended run that are still running (finished ones were seen by
    /// that run and are dropped).
    pub(crate) fn keep(&self, jobs: Vec<Job>, next_job_id: usize, next_pid: u32) {
        let mut k = self.lock();
        k.jobs.extend(
            jobs.into_iter()
                .filter(|j| j.handle.as_ref().is_some_and(|h| !h.is_finished())),
        );
        k.next_job_id = if k.jobs.is_empty() {
            1
        } else {
            next_job_id.max(k.next_job_id)
        };
        k.next_pid = next_pid.max(k.next_pid);
    }
}

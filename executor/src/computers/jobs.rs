//! Jobs on this server's computers (SPEC §3.8): a `terminal_execute` with `yield_ms`
//! that outlives its call, and `terminal_job`, which reads, writes, signals and lists.
//!
//! The backend keeps each job (on Docker, the in-computer supervisor), so a job outlives
//! the call, the session and this process. This module adds only what the server knows:
//! which computer a job id it handed out runs on (so `terminal_job` needs no
//! `computer_id` in the session that started it), when its timeout ends it (so an idle
//! temporary is not reaped under a running job), and the history entry once it ended.
//! Access is the computer's: whoever may reach the computer may reach its jobs; anyone
//! else gets "no such job", whatever the id.

use shared::answer::Answer;
use shared::history::{HistoryEntry, rfc3339_utc};
use shared::jobs::{JobCall, JobOutput, job_id_from, job_list_structured, job_structured};
use shared::registry::Claimant;

use super::{Computers, SessionHost, now_ms};
use crate::error::ComputerError;
use crate::place::{BackendError, Failure, Place};
use crate::spec::{ExecSpec, JobPoll, JobStart};

/// A job this server started.
#[derive(Debug, Clone)]
pub(super) struct JobRecord {
    /// The computer's backend key and the caller's id for it.
    key: String,
    id: String,
    command: String,
    started_ms: u64,
    /// When its timeout ends it, at the latest.
    deadline_ms: u64,
    /// Its network refusals before this were in an earlier answer (SPEC §3.11).
    blocked_from: std::time::Instant,
}

fn no_such_job(job_id: &str) -> ComputerError {
    ComputerError::Backend(BackendError::new(
        Failure::NoSuchJob,
        format!(
            "no job {job_id} on this computer (it never existed, is another session's, or ended and was read); pass the `computer_id` it runs on if another session or server process started it"
        ),
    ))
}

impl Computers {
    fn job_table(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, JobRecord>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Since when job `job_id`'s network refusals were not in an answer yet (its start,
    /// or its previous answer); `None` for a job this server did not start.
    pub(super) fn job_blocked_from(&self, job_id: &str) -> Option<std::time::Instant> {
        self.job_table().get(job_id).map(|r| r.blocked_from)
    }

    /// What computer `key`'s network policy refused since `from`, for an answer about
    /// job `job_id` (SPEC §3.11: `network_blocked`); the next answer starts after them.
    pub(super) fn job_blocked(
        &self,
        key: &str,
        job_id: &str,
        from: Option<std::time::Instant>,
    ) -> Vec<shared::egress::Blocked> {
        let Some(from) = from else {
            return Vec::new();
        };
        let now = std::time::Instant::now();
        if let Some(r) = self.job_table().get_mut(job_id) {
            r.blocked_from = now;
        }
        self.backend.blocked_since(key, from)
    }

    /// Forgets the jobs of computer `key` (it was restarted, reset or removed: they ended).
    pub(super) fn forget_jobs_of(&self, key: &str) {
        self.job_table().retain(|_, r| r.key != key);
    }

    /// Does computer `key` run a job that may still be running (its timeout not passed)?
    pub(super) fn runs_jobs(&self, key: &str, now: u64) -> bool {
        self.job_table()
            .values()
            .any(|r| r.key == key && r.deadline_ms > now)
    }

    /// Jobs started here whose end was not seen yet and whose timeout has not passed.
    pub fn jobs_running(&self) -> i64 {
        let now = now_ms();
        let n = self
            .job_table()
            .values()
            .filter(|r| r.deadline_ms > now)
            .count();
        i64::try_from(n).unwrap_or(i64::MAX)
    }

    /// A job ended and its last output was read: record it in the history, forget it.
    fn job_ended(&self, job_id: &str, out: &JobOutput) {
        let Some(r) = self.job_table().remove(job_id) else {
            return;
        };
        let entry = HistoryEntry {
            command: r.command,
            started_at: rfc3339_utc(r.started_ms),
            exit_code: out.exit_code.unwrap_or_default(),
            duration_ms: out.duration_ms,
            timed_out: out.timed_out_after.is_some(),
            truncated: false,
        };
        let Ok(()) = self.registry().ran(&r.key, entry);
    }

    /// Starts `spec` on `key` as a job and waits up to `yield_ms` for it to end: the first
    /// read of it (`running: false` when it ended in time).
    pub(super) async fn start_job_on(
        &self,
        key: &str,
        id: &str,
        spec: &ExecSpec,
        command: String,
        yield_ms: u64,
    ) -> Result<JobOutput, ComputerError> {
        let job = JobStart {
            job_id: job_id_from(rand::random::<[u8; 12]>()),
            command,
        };
        let mut started_ms = now_ms();
        let mut started = self.backend.job_start(key, spec, &job).await;
        if matches!(&started, Err(e) if e.failure == Failure::NotRunning)
            && self.backend.start(key).await.is_ok()
        {
            started_ms = now_ms();
            started = self.backend.job_start(key, spec, &job).await;
        }
        started?;
        crate::metrics::job_started(self.backend.name());
        let timeout_ms = u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX);
        self.job_table().insert(
            job.job_id.clone(),
            JobRecord {
                key: key.to_owned(),
                id: id.to_owned(),
                command: job.command.clone(),
                started_ms,
                deadline_ms: started_ms.saturating_add(timeout_ms),
                blocked_from: std::time::Instant::now(),
            },
        );
        // Given `stdin` is the whole input, as in the foreground; without it, stdin stays
        // open for terminal_job.
        let poll = JobPoll {
            close_stdin: spec.stdin.is_some(),
            stdin: spec.stdin.clone().map(String::into_bytes),
            signal: None,
            // The yield counts from the launch: a start that took long (a provider's
            // slow exec) does not lengthen it.
            wait_ms: yield_ms
                .min(timeout_ms)
                .saturating_sub(now_ms().saturating_sub(started_ms)),
            until_exit: true,
            max_bytes: self.defaults.output_limit,
            peek: false,
        };
        let out = self.backend.job_poll(key, &job.job_id, &poll).await?;
        if !out.running {
            self.job_ended(&job.job_id, &out);
        }
        Ok(out)
    }

    /// Reads job `job_id` on `key` (the rules of a `terminal_job` poll); a job the backend
    /// no longer has is forgotten and named.
    pub(super) async fn read_job(
        &self,
        key: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, ComputerError> {
        let out = match self.backend.job_poll(key, job_id, poll).await {
            Ok(out) => out,
            Err(e) if e.failure == Failure::NoSuchJob => {
                self.job_table().remove(job_id);
                return Err(no_such_job(job_id));
            }
            // The backend says what became of it (it ended with the server that ran it).
            Err(e) if e.failure == Failure::JobGone => {
                self.job_table().remove(job_id);
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        // A peek of an ended job leaves it for the read that takes its output.
        if !out.running && !out.peek {
            self.job_ended(job_id, &out);
        }
        Ok(out)
    }
}

impl SessionHost {
    /// The backend key of computer `id` if this caller may reach it (without creating it).
    pub(super) async fn reachable(&self, id: &str) -> Result<String, ComputerError> {
        let c = &self.computers;
        let key = self.key(id);
        let claimant = Claimant {
            requested: None,
            owner: &self.owner,
            stateless: self.stateless,
            scope: self.scope.as_deref(),
        };
        let known = c.registry().check(&key, &claimant)?.is_some();
        if known {
            let Ok(()) = c.registry().touch(&key, now_ms());
        } else {
            c.visible_record(id, &self.owner, self.team()).await?;
        }
        Ok(key)
    }

    /// The computer a `terminal_job` call is about: the one named, else the one this
    /// server started the job on (if it is this team's), else the session default.
    async fn job_computer(
        &self,
        named: Option<&str>,
        job_id: Option<&str>,
    ) -> Result<String, ComputerError> {
        if let Some(id) = named {
            return Ok(id.to_owned());
        }
        if let Some(job_id) = job_id {
            let record = self.computers.job_table().get(job_id).cloned();
            if let Some(r) = record
                && shared::teams::id_of(self.team(), &r.key) == Some(r.id.as_str())
            {
                return Ok(r.id);
            }
        }
        if let Some(id) = self.default.lock().await.clone() {
            return Ok(id);
        }
        Err(match job_id {
            Some(job_id) => no_such_job(job_id),
            None => ComputerError::Backend(BackendError::new(
                Failure::NotFound,
                "this session has no computer yet: pass the `computer_id` whose jobs to list",
            )),
        })
    }

    /// Runs a validated `terminal_job` call.
    pub(super) async fn job(&self, call: JobCall) -> Result<Answer, ComputerError> {
        let job_id = match &call {
            JobCall::Poll(p) => Some(p.job_id.as_str()),
            JobCall::List { .. } => None,
        };
        let id = self.job_computer(call.computer_id(), job_id).await?;
        let key = self.reachable(&id).await.map_err(|e| match job_id {
            // A computer the caller may not reach hides its jobs too.
            Some(j) if e.is_not_found() => no_such_job(j),
            _ => e,
        })?;
        let c = &self.computers;
        match call {
            JobCall::List { .. } => {
                let jobs = c.backend.job_list(&key).await?;
                Ok(job_list_structured(&id, jobs).into())
            }
            JobCall::Poll(p) => {
                let job_id = p.job_id.clone();
                let from = c.job_blocked_from(&job_id);
                let out = self.poll_job(&key, p).await?;
                let blocked = c.job_blocked(&key, &job_id, from);
                Ok(job_structured(&id, out).with_blocked(blocked).into())
            }
        }
    }

    /// `Op::JobRead`: a `terminal_job` poll answered as the read itself (the serde form of
    /// `JobOutput`, output in base64), for a gateway that keeps the job's task.
    pub(super) async fn job_read(
        &self,
        p: shared::jobs::JobPoll,
    ) -> Result<JobOutput, ComputerError> {
        let id = self
            .job_computer(p.computer_id.as_deref(), Some(&p.job_id))
            .await?;
        let key = self.reachable(&id).await.map_err(|e| {
            if e.is_not_found() {
                no_such_job(&p.job_id)
            } else {
                e
            }
        })?;
        self.poll_job(&key, p).await
    }

    async fn poll_job(
        &self,
        key: &str,
        p: shared::jobs::JobPoll,
    ) -> Result<JobOutput, ComputerError> {
        let c = &self.computers;
        let poll = JobPoll {
            stdin: p.stdin,
            close_stdin: p.close_stdin,
            signal: p.signal,
            wait_ms: p.wait_ms,
            until_exit: false,
            max_bytes: c.defaults.output_limit,
            peek: p.peek,
        };
        c.read_job(key, &p.job_id, &poll).await
    }
}

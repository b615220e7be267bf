//! The MCP Tasks extension on this server (`shared::tasks`, SPEC §3.8): a
//! `terminal_execute` from a client that declared the extension runs as a job, and when
//! it is still running after its yield, the call answers with a task instead of a result.
//!
//! The task is its job: `tasks/get` reads the job's new output into the task record kept
//! here (in memory, up to the output limit) and answers `completed` with the whole exec
//! result once the job ended; `tasks/cancel` kills the job's process tree. Access is the
//! computer's, as for jobs: a caller that may not reach the computer gets "unknown task"
//! (the caller that started it may still read it once its computer is gone). A task is
//! kept 10 minutes after it ended, or after its timeout when nobody read it.
//! A backend that keeps no jobs runs the command in the foreground and answers with its
//! result, which the extension allows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shared::answer::Answer;
use shared::capabilities::Capability;
use shared::jobs::yielded_structured;
use shared::mcp::TaskAnswer;
use shared::tasks::{
    DEFAULT_YIELD_MS, Done, KEEP_MS, Task, TaskError, TaskMethod, TaskReply, unknown_task,
};
use shared::validate::ExecRequest;

use super::{InUse, SessionHost, now_ms};
use crate::error::ComputerError;
use crate::place::{Failure, Place};
use crate::progress::Progress;
use crate::spec::JobPoll;

/// One task, the backend key of its computer, and who started it.
#[derive(Debug)]
struct Entry {
    key: String,
    /// The caller that started it: it may read the result after its computer is gone.
    owner: String,
    /// When the command's timeout ends it, at the latest.
    deadline_ms: u64,
    task: Task,
}

impl Entry {
    /// May it be forgotten? Ended and kept long enough, or never read for that long
    /// after its timeout.
    fn expired(&self, now: u64) -> bool {
        self.task.expired(now) || now.saturating_sub(self.deadline_ms) > KEEP_MS
    }
}

/// The tasks this server handed out, by task id (each behind its own lock, so two polls
/// of one task read its job one after the other).
#[derive(Debug, Default)]
pub(super) struct TaskTable(Mutex<HashMap<String, Arc<tokio::sync::Mutex<Entry>>>>);

impl TaskTable {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<Entry>>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn insert(&self, entry: Entry) {
        let mut map = self.map();
        // Tasks past their keeping time go first.
        let now = now_ms();
        map.retain(|_, e| match e.try_lock() {
            Ok(e) => !e.expired(now),
            Err(_) => true,
        });
        map.insert(
            entry.task.task_id.clone(),
            Arc::new(tokio::sync::Mutex::new(entry)),
        );
    }

    fn get(&self, task_id: &str) -> Option<Arc<tokio::sync::Mutex<Entry>>> {
        self.map().get(task_id).cloned()
    }

    fn remove(&self, task_id: &str) {
        self.map().remove(task_id);
    }
}

impl SessionHost {
    /// Runs `req` as a job; answers with its result when it ends within its yield
    /// (`yield_ms`, else `shared::tasks::DEFAULT_YIELD_MS`), else with a task.
    pub(super) async fn exec_as_task(
        &self,
        mut req: ExecRequest,
        progress: &Progress,
    ) -> Result<TaskAnswer, ComputerError> {
        let c = &self.computers;
        // No jobs on this backend: the foreground answer is a valid one.
        if !c.backend.capabilities().has(Capability::Jobs) {
            req.yield_ms = None;
            return Ok(TaskAnswer::Complete(
                self.exec(req, progress).await?.into_result(),
            ));
        }
        let (id, at) = self
            .target(
                req.computer_id.as_deref(),
                req.temporary,
                req.network.as_ref(),
                progress,
            )
            .await?;
        let temporary = at.temporary;
        let key = self.key(&id);
        let yield_ms = req.yield_ms.unwrap_or(DEFAULT_YIELD_MS);
        let (spec, command) = c.spec_of(&req, progress);
        let started = {
            let _in_use = InUse::new(c, &key);
            c.job_on(&key, &id, &spec, command, yield_ms).await
        };
        let out = match started {
            Ok(out) => out,
            // No jobs on this backend: the foreground answer is a valid one.
            Err(e) if e.failure() == Some(Failure::Unsupported) => {
                req.yield_ms = None;
                let a = c.exec_on(&key, &id, temporary, &req, progress).await?;
                return Ok(TaskAnswer::Complete(Answer::Exec(a).into_result()));
            }
            Err(e) => return Err(e),
        };
        if !out.running {
            let a = yielded_structured(&id, temporary, out);
            return Ok(TaskAnswer::Complete(Answer::Exec(a).into_result()));
        }
        let now = now_ms();
        let limit = c.defaults.output_limit as u64;
        let task = Task::new(&id, temporary, limit, now, out);
        let created = task.created();
        let timeout_ms = u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX);
        c.tasks.insert(Entry {
            key,
            owner: self.owner.clone(),
            deadline_ms: now.saturating_add(timeout_ms),
            task,
        });
        Ok(TaskAnswer::Task(created))
    }

    /// `tasks/get`, `tasks/update` and `tasks/cancel`.
    pub(super) async fn task_call(
        &self,
        method: TaskMethod,
        task_id: &str,
    ) -> Result<TaskReply, TaskError> {
        let c = &self.computers;
        let entry = c.tasks.get(task_id).ok_or_else(|| unknown_task(task_id))?;
        let mut entry = entry.lock().await;
        // The computer's rule decides, as for jobs (its starter may also read it after the
        // computer is gone); another team's key never matches.
        let id = entry.task.computer_id.clone();
        if entry.key != self.key(&id)
            || (entry.owner != self.owner && self.reachable(&id).await.is_err())
        {
            return Err(unknown_task(task_id));
        }
        if entry.expired(now_ms()) {
            c.tasks.remove(task_id);
            return Err(unknown_task(task_id));
        }
        match method {
            TaskMethod::Update => return Ok(TaskReply::Done(Done {})),
            TaskMethod::Cancel => {
                if entry.task.ended.is_none() {
                    entry.task.cancel_requested = true;
                    self.read_task(&mut entry, Some(9)).await;
                }
                return Ok(TaskReply::Done(Done {}));
            }
            TaskMethod::Get => {}
        }
        if entry.task.ended.is_none() {
            self.read_task(&mut entry, None).await;
            if entry.task.over_limit() {
                // The output limit stops the command, as in the foreground.
                self.read_task(&mut entry, Some(9)).await;
            }
        }
        Ok(TaskReply::Task(Box::new(entry.task.detailed())))
    }

    /// Reads the task's job once (sending `signal` first): its news goes into the task.
    async fn read_task(&self, entry: &mut Entry, signal: Option<i32>) {
        let c = &self.computers;
        let poll = JobPoll {
            stdin: None,
            close_stdin: false,
            signal,
            // A signal's effect (the exit) is worth a short wait; a plain poll answers now.
            wait_ms: if signal.is_some() { 2_000 } else { 0 },
            until_exit: signal.is_some(),
            max_bytes: c.defaults.output_limit,
            peek: false,
        };
        let task_id = entry.task.task_id.clone();
        match c.read_job(&entry.key, &task_id, &poll).await {
            Ok(out) => entry.task.absorb(out, now_ms()),
            // The job, or its whole computer, is gone (restart, reset, delete; or it ended
            // with the server process that ran it: the backend's word says so).
            Err(e)
                if matches!(
                    e.failure(),
                    Some(Failure::NoSuchJob | Failure::JobGone | Failure::NotFound)
                ) =>
            {
                entry.task.lost(now_ms(), Some(&e.to_string()))
            }
            // The computer removed behind it answers as its backend does; look.
            Err(e) => match c.backend.find(&entry.key).await {
                Ok(None) => entry.task.lost(now_ms(), None),
                // A passing failure (the engine busy): the task stays as it was.
                _ => tracing::warn!(task_id, error = %e, "reading a task's job failed"),
            },
        }
    }
}

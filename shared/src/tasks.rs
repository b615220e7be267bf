//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, 2026-07-28) over jobs
//! (SPEC §3.8).
//!
//! A client that declares the extension in a request's `_meta` capabilities may get a task
//! handle (`resultType: "task"`) instead of the exec result, when its `terminal_execute`
//! is still running after `yield_ms` (or [`DEFAULT_YIELD_MS`] when it gave none). The task
//! is that command's job: `tasks/get` reads the job's new output into the task, and once
//! the job ended answers `completed` with the exec result the call would have given (all
//! the output, up to the output limit); `tasks/cancel` kills the job's process tree;
//! `tasks/update` is acknowledged (these tasks never ask for input).
//!
//! [`Task`] is the record a server keeps: the binary in memory, the Worker in its team's
//! Durable Object (its serde form, output in base64), written once here. No clock, no I/O.

use rmcp::model::CallToolResult;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::answer::Answer;
use crate::history::rfc3339_utc;
use crate::jobs::JobOutput;
use crate::result::{ExecOutcome, exec_structured};

/// The extension's identifier.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// How long a task-capable `terminal_execute` without `yield_ms` waits before it answers
/// with a task.
pub const DEFAULT_YIELD_MS: u64 = 5_000;
/// The polling interval suggested to clients.
pub const POLL_INTERVAL_MS: u64 = 1_000;
/// How long an ended task is kept (SPEC §3.8: ended jobs are kept 10 minutes).
pub const KEEP_MS: u64 = 600_000;

/// Do a request's client capabilities (`_meta["io.modelcontextprotocol/clientCapabilities"]`)
/// declare the extension?
pub fn declared(params: &crate::jsonrpc::Params) -> bool {
    params
        .meta()
        .and_then(|m| m.client_capabilities.get())
        .is_some_and(|c| c.declares(EXTENSION))
}

/// The three methods of the extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskMethod {
    Get,
    Update,
    Cancel,
}

impl TaskMethod {
    pub fn from_method(method: &str) -> Option<Self> {
        Some(match method {
            "tasks/get" => Self::Get,
            "tasks/update" => Self::Update,
            "tasks/cancel" => Self::Cancel,
            _ => return None,
        })
    }
}

/// Why a tasks/* request's `taskId` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskIdError {
    #[error("`taskId` (a string) is required")]
    Missing,
    #[error("unknown task {0:?}: `taskId` must be the id a terminal_execute task handle carried")]
    Malformed(String),
}

/// The `taskId` of a tasks/* request, checked.
pub fn task_id_param(params: &crate::jsonrpc::Params) -> Result<&str, TaskIdError> {
    let id = params.task_id.as_str().ok_or(TaskIdError::Missing)?;
    crate::jobs::validate_job_id(id)
        .map_err(|_| TaskIdError::Malformed(crate::history::cut(id, 40)))?;
    Ok(id)
}

/// Why a `tasks/*` request failed: the message of its JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The id names no task of this caller.
    #[error(
        "unknown task {0:?}: it never existed, is another caller's, or ended more than {minutes} minutes ago",
        minutes = KEEP_MS / 60_000
    )]
    Unknown(String),
    /// The task exists but the request cannot be served now (the caller's scope, the
    /// store, another request holding it): why, and what to do.
    #[error("{0}")]
    Refused(String),
}

/// The error for a task id that names no task of this caller.
pub fn unknown_task(id: &str) -> TaskError {
    TaskError::Unknown(id.to_owned())
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ended {
    /// The command ended: its exit, as the job's last read told.
    Exited {
        exit_code: i64,
        duration_ms: u64,
        timed_out_after: Option<u64>,
        oom_killed: bool,
    },
    /// Cancelled (`tasks/cancel`), or its computer was restarted, reset or deleted.
    Cancelled { reason: String },
}

/// A task: one `terminal_execute` that outlived its call, and the output read so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// The task id, which is the job id (unguessable, SPEC §3.8).
    pub task_id: String,
    pub computer_id: String,
    pub temporary: bool,
    pub created_ms: u64,
    pub updated_ms: u64,
    #[serde(with = "crate::jobs::base64_bytes")]
    pub stdout: Vec<u8>,
    #[serde(with = "crate::jobs::base64_bytes")]
    pub stderr: Vec<u8>,
    /// The output limit in bytes: past it the command is stopped, as in the foreground.
    pub limit: u64,
    pub truncated: bool,
    /// Output the job's buffer dropped before it was read.
    pub dropped_bytes: u64,
    pub cancel_requested: bool,
    pub ended: Option<Ended>,
}

impl Task {
    /// A task for the job `first` was the first read of (still running).
    pub fn new(
        computer_id: &str,
        temporary: bool,
        limit: u64,
        now_ms: u64,
        first: JobOutput,
    ) -> Self {
        let mut t = Self {
            task_id: first.job_id.clone(),
            computer_id: computer_id.to_owned(),
            temporary,
            created_ms: now_ms,
            updated_ms: now_ms,
            stdout: Vec::new(),
            stderr: Vec::new(),
            limit,
            truncated: false,
            dropped_bytes: 0,
            cancel_requested: false,
            ended: None,
        };
        t.absorb(first, now_ms);
        t
    }

    /// Takes one read of the job: its new output (kept up to the limit) and, when it
    /// ended, how.
    pub fn absorb(&mut self, out: JobOutput, now_ms: u64) {
        if self.ended.is_some() {
            return;
        }
        let before = (self.stdout.len(), self.stderr.len());
        let mut room = self
            .limit
            .saturating_sub((self.stdout.len() + self.stderr.len()) as u64);
        for (into, bytes) in [
            (&mut self.stdout, out.stdout),
            (&mut self.stderr, out.stderr),
        ] {
            let take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            into.extend_from_slice(&bytes[..take]);
            room -= take as u64;
            if take < bytes.len() {
                self.truncated = true;
            }
        }
        self.dropped_bytes += out.dropped_bytes;
        if before != (self.stdout.len(), self.stderr.len()) || !out.running {
            self.updated_ms = now_ms;
        }
        if !out.running {
            self.ended = Some(if self.cancel_requested {
                Ended::Cancelled {
                    reason:
                        "cancelled by tasks/cancel: the command and its child processes were killed"
                            .into(),
                }
            } else {
                Ended::Exited {
                    exit_code: out.exit_code.unwrap_or_default(),
                    duration_ms: out.duration_ms,
                    timed_out_after: out.timed_out_after,
                    oom_killed: out.oom_killed,
                }
            });
        }
    }

    /// Its job is gone without a last read. `known` is what its backend said: when that
    /// says the job ended with the server process that ran it (a WebAssembly computer's,
    /// [`crate::jobs::tells_server_stopped`]), the task says so; otherwise the computer was
    /// restarted, reset or deleted, which ends its jobs.
    pub fn lost(&mut self, now_ms: u64, known: Option<&str>) {
        if self.ended.is_none() {
            let reason = match known {
                Some(m) if crate::jobs::tells_server_stopped(m) => {
                    format!("the command's job is gone: {m}")
                }
                _ => "the command's job is gone: its computer was restarted, reset or deleted, which ends its jobs".into(),
            };
            self.updated_ms = now_ms;
            self.ended = Some(Ended::Cancelled { reason });
        }
    }

    /// Has the output limit been reached while the command still runs (stop it)?
    pub fn over_limit(&self) -> bool {
        self.truncated && self.ended.is_none()
    }

    /// May the server forget it now?
    pub fn expired(&self, now_ms: u64) -> bool {
        self.ended.is_some() && now_ms.saturating_sub(self.updated_ms) > KEEP_MS
    }

    /// The exec result of the ended command, as `terminal_execute` would have answered.
    fn result(&self) -> Option<CallToolResult> {
        let Some(Ended::Exited {
            exit_code,
            duration_ms,
            timed_out_after,
            oom_killed,
        }) = &self.ended
        else {
            return None;
        };
        let outcome = ExecOutcome {
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            exit_code: *exit_code,
            duration_ms: *duration_ms,
            truncated_at: self.truncated.then_some(self.limit),
            timed_out_after: *timed_out_after,
            oom_killed: *oom_killed,
        };
        let mut a = exec_structured(&self.computer_id, self.temporary, outcome);
        a.dropped_bytes = self.dropped_bytes;
        Some(Answer::Exec(a).into_result())
    }

    /// The newest non-empty output line, for `statusMessage` while it works.
    fn last_line(&self) -> Option<String> {
        let pick = |bytes: &[u8]| {
            String::from_utf8_lossy(bytes)
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(|l| crate::history::cut(l, 200))
        };
        pick(&self.stdout).or_else(|| pick(&self.stderr))
    }

    fn status(&self) -> &'static str {
        match &self.ended {
            None => "working",
            Some(Ended::Exited { .. }) => "completed",
            Some(Ended::Cancelled { .. }) => "cancelled",
        }
    }

    /// The task's common fields (SPEC's `Task`).
    fn base(&self) -> TaskView {
        let status_message = match &self.ended {
            None => self
                .last_line()
                .map(|l| format!("running on {}: {l}", self.computer_id))
                .unwrap_or_else(|| format!("running on {}", self.computer_id)),
            Some(Ended::Exited { exit_code, .. }) => format!("exited with code {exit_code}"),
            Some(Ended::Cancelled { reason }) => reason.clone(),
        };
        TaskView {
            task_id: self.task_id.clone(),
            status: self.status(),
            created_at: rfc3339_utc(self.created_ms),
            last_updated_at: rfc3339_utc(self.updated_ms),
            // Kept this long after it ended.
            ttl_ms: self
                .ended
                .as_ref()
                .map(|_| self.updated_ms.saturating_sub(self.created_ms) + KEEP_MS),
            poll_interval_ms: POLL_INTERVAL_MS,
            status_message,
            result_type: None,
            result: None,
        }
    }

    /// `CreateTaskResult`: the answer to the `tools/call` that made it.
    pub fn created(&self) -> TaskView {
        TaskView {
            result_type: Some("task"),
            ..self.base()
        }
    }

    /// `GetTaskResult` (a `DetailedTask`): with `result` once completed.
    pub fn detailed(&self) -> TaskView {
        TaskView {
            result: self.result(),
            ..self.base()
        }
    }
}

/// SPEC's `Task` as a `CreateTaskResult` and `tasks/get` show it: built by
/// [`Task::created`] and [`Task::detailed`] only.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub task_id: String,
    pub status: &'static str,
    pub created_at: String,
    pub last_updated_at: String,
    /// How long it is kept after it ended (`null` while it works).
    pub ttl_ms: Option<u64>,
    pub poll_interval_ms: u64,
    pub status_message: String,
    /// `"task"` in a `CreateTaskResult`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_type: Option<&'static str>,
    /// The command's result once it completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<CallToolResult>,
}

impl TaskView {
    /// Its JSON form.
    pub fn to_value(&self) -> Value {
        // Plain data with string keys: encoding cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// What a `tasks/*` request answers: the task (`tasks/get`), or `{}` (`tasks/update`,
/// `tasks/cancel`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum TaskReply {
    Task(Box<TaskView>),
    Done(Done),
}

/// `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Done {}

impl TaskReply {
    /// Its JSON form.
    pub fn to_value(&self) -> Value {
        // Plain data with string keys: encoding cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;

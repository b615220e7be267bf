//! The MCP Tasks extension at the edge (`shared::tasks`, SPEC §3.8): a `terminal_execute`
//! from a client that declared the extension runs as a job wherever its computer lives
//! (an executor, Fly or E2B), and when it still runs after its yield the call answers with
//! a task.
//!
//! The task's record (`shared::tasks::Task`, the same record the local server keeps in
//! memory) lives in the team's Durable Object, keyed by the task id, which is the job id.
//! A `tasks/get` carries that id in its `Mcp-Name` header (checked against the body by
//! `shared::transport`), and the caller's token names the team, so it goes straight to
//! the one object that holds it: no lookup elsewhere. The request reads the job's new
//! output as bytes ([`Op::JobRead`]) into the record and writes it back. A lease in the
//! object lets one request at a time read the job, so two polls never split its output;
//! a poll that finds it leased answers from the record as it stands.
//!
//! Access is the computer's, as for jobs: the starter, or whoever may reach the computer;
//! anyone else (another user's temporary, another team) gets "unknown task". A record is
//! one SQLite row, which holds at most 2 MB: a task keeps at most [`TASK_OUTPUT_LIMIT`]
//! of output, and past it the command is stopped, as the output limit does in the
//! foreground.

use super::*;
use shared::jobs::{JobOutput, JobPoll};
use shared::mcp::TaskAnswer;
use shared::tasks::{DEFAULT_YIELD_MS, Done, Task, TaskError, TaskMethod, TaskReply, unknown_task};
use shared::validate::ExecRequest;

/// The most output (stdout and stderr together) a task at the edge keeps: 1 MiB, about
/// 1.4 MB in the record's base64, inside a Durable Object row's 2 MB.
pub(crate) const TASK_OUTPUT_LIMIT: u64 = 1 << 20;

/// How often a `tasks/cancel` looks for the read lease, 200 ms apart, before it asks the
/// caller to retry (a read holds it for about 2 s at most).
const CANCEL_TRIES: u32 = 25;

/// A task's row as the team's object answers it.
struct Kept {
    task: Task,
    /// Where its computer lives, if the caller still reaches it.
    place: Option<String>,
    owner: String,
    deadline: u64,
    /// This request's read lease, if it got it.
    lease: Option<String>,
}

impl Host {
    /// Runs `req` as a job (yielding after `yield_ms`, else
    /// [`shared::tasks::DEFAULT_YIELD_MS`]); the exec result when it ended in time, else a
    /// task.
    pub(crate) async fn exec_as_task(
        &self,
        mut req: ExecRequest,
    ) -> std::result::Result<TaskAnswer, GatewayError> {
        req.yield_ms = Some(req.yield_ms.unwrap_or(DEFAULT_YIELD_MS));
        let timeout_ms = req.timeout_secs.unwrap_or(cloud::DEFAULT_TIMEOUT_SECS) * 1000;
        let answer = self.run(Op::Exec(req)).await?;
        let Some((a, first)) = answer
            .as_exec()
            .and_then(|a| Some((a, JobOutput::of_running(a)?)))
        else {
            return Ok(TaskAnswer::Complete(answer.into_result()));
        };
        let now = now_ms();
        let temporary = a.temporary.unwrap_or(true);
        let task = Task::new(&a.computer_id, temporary, TASK_OUTPUT_LIMIT, now, first);
        let deadline = now.saturating_add(timeout_ms);
        if let Err(e) = self.keep(&task, &self.owner, deadline, None).await {
            // The job runs either way: answer it as a job, which terminal_job follows.
            tracing::warn!(error = %e, "could not record a task in the team inventory");
            return Ok(TaskAnswer::Complete(answer.into_result()));
        }
        Ok(TaskAnswer::Task(task.created()))
    }

    /// `tasks/get`, `tasks/update` and `tasks/cancel`; `Err` is the JSON-RPC error's
    /// message.
    pub(crate) async fn task_call(
        &self,
        method: TaskMethod,
        task_id: &str,
    ) -> std::result::Result<TaskReply, TaskError> {
        if !self.caller.can_exec {
            return Err(TaskError::Refused(
                GatewayError::Scope {
                    action: "follow tasks",
                    scope: "exec",
                }
                .to_string(),
            ));
        }
        let reads = method != TaskMethod::Update;
        let mut kept = match self.find(task_id, reads).await {
            Ok(Some(k)) => k,
            Ok(None) => return Err(unknown_task(task_id)),
            Err(e) => return Err(TaskError::Refused(e.to_string())),
        };
        if method == TaskMethod::Update {
            return Ok(TaskReply::Done(Done {}));
        }
        let answer = |task: &Task| match method {
            TaskMethod::Get => TaskReply::Task(Box::new(task.detailed())),
            _ => TaskReply::Done(Done {}),
        };
        // A cancel is never dropped: it waits (a few seconds at most) for another
        // request's read to give the lease back.
        let mut tries = 0;
        while method == TaskMethod::Cancel && kept.lease.is_none() && kept.task.ended.is_none() {
            tries += 1;
            if tries > CANCEL_TRIES {
                return Err(TaskError::Refused(format!(
                    "task {task_id} is being read by another request: retry tasks/cancel"
                )));
            }
            worker::Delay::from(std::time::Duration::from_millis(200)).await;
            kept = match self.find(task_id, true).await {
                Ok(Some(k)) => k,
                Ok(None) => return Err(unknown_task(task_id)),
                Err(e) => return Err(TaskError::Refused(e.to_string())),
            };
        }
        // Ended (nothing left to read), or leased by another request reading its job now:
        // the record as it stands.
        let Some(lease) = kept.lease.clone().filter(|_| kept.task.ended.is_none()) else {
            return Ok(answer(&kept.task));
        };
        if method == TaskMethod::Cancel {
            kept.task.cancel_requested = true;
            self.read(&mut kept, Some(9)).await;
        } else {
            self.read(&mut kept, None).await;
            if kept.task.over_limit() {
                // The output limit stops the command, as in the foreground.
                self.read(&mut kept, Some(9)).await;
            }
        }
        // Written back (and the lease given back) whether or not it changed.
        self.keep(&kept.task, &kept.owner, kept.deadline, Some(&lease))
            .await
            .map_err(|e| TaskError::Refused(e.to_string()))?;
        if kept.task.ended.is_some() {
            // Its job no longer holds the computer busy (idle reaping may have it).
            let done = inventory::Request::JobDone {
                job_id: kept.task.task_id.clone(),
            };
            let _ = team_call::<inventory::Done>(&self.env, &self.caller.team, done).await;
        }
        Ok(answer(&kept.task))
    }

    /// The task `task_id` if this caller may reach it (with the read lease when `lease`
    /// and it is free).
    async fn find(
        &self,
        task_id: &str,
        lease: bool,
    ) -> std::result::Result<Option<Kept>, GatewayError> {
        let get = inventory::Request::TaskGet {
            task_id: task_id.to_owned(),
            owner: self.owner.clone(),
            lease,
        };
        let found = team_call::<inventory::TaskFound>(&self.env, &self.caller.team, get).await;
        let row = match found {
            Ok(row) => row,
            Err(GatewayError::Inventory { status: 404, .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let task: Task = serde_json::from_str(&row.record)
            .map_err(|e| GatewayError::Transport(format!("task record: {e}")))?;
        Ok(Some(Kept {
            task,
            place: row.place,
            owner: row.owner,
            deadline: u64::try_from(row.deadline).unwrap_or_default(),
            lease: row.lease,
        }))
    }

    /// Writes the task's record (giving `lease` back).
    async fn keep(
        &self,
        task: &Task,
        owner: &str,
        deadline: u64,
        lease: Option<&str>,
    ) -> std::result::Result<(), GatewayError> {
        let record = serde_json::to_string(task)
            .map_err(|e| GatewayError::Transport(format!("task record: {e}")))?;
        let put = inventory::Request::TaskPut {
            task_id: task.task_id.clone(),
            id: task.computer_id.clone(),
            owner: owner.to_owned(),
            deadline: i64::try_from(deadline).unwrap_or(i64::MAX),
            record,
            lease: lease.map(str::to_owned),
            // Kept 10 minutes from its end (the end's time, not the last read's).
            ended_ms: task
                .ended
                .as_ref()
                .map(|_| i64::try_from(task.updated_ms).unwrap_or(i64::MAX)),
        };
        team_call::<inventory::Done>(&self.env, &self.caller.team, put)
            .await
            .map(|_| ())
    }

    /// Reads the task's job once where its computer lives (sending `signal` first, then
    /// waiting a little for its effect): the news goes into the task.
    async fn read(&self, kept: &mut Kept, signal: Option<i32>) {
        let task = &mut kept.task;
        let Some(place) = kept.place.as_deref() else {
            // The computer is gone (deleted), and its jobs with it.
            task.lost(now_ms(), None);
            return;
        };
        let poll = JobPoll {
            job_id: task.task_id.clone(),
            computer_id: Some(task.computer_id.clone()),
            stdin: None,
            close_stdin: false,
            signal,
            wait_ms: if signal.is_some() { 2_000 } else { 0 },
            peek: false,
        };
        let answer = self
            .gw
            .op(
                place,
                &self.caller.team,
                &self.owner,
                &self.scope(),
                Op::JobRead(poll),
            )
            .await;
        match answer {
            Ok(Answer::JobRead(out)) => task.absorb(out, now_ms()),
            Ok(other) => tracing::warn!(answer = ?other, "a task's job read was not a job read"),
            // The job, or its whole computer, is gone (restart, reset, delete; or, on a
            // WebAssembly executor, the executor's process stopped: its answer says so).
            Err(GatewayError::Api(e)) if e.error.code == ErrorCode::NotFound => {
                task.lost(now_ms(), Some(&e.error.message))
            }
            // A passing failure (an executor down): the task stays as it was.
            Err(e) => tracing::warn!(error = %e, "reading a task's job failed"),
        }
    }
}

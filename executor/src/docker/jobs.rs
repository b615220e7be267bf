//! Jobs (SPEC §3.8) on Docker: kept jobs of the in-computer supervisor, reached over the
//! same relay connection as every exec.
//!
//! The supervisor holds each job, its bounded output and its exit status, so a job
//! outlives the call, the session and this server process: a new server reads it through
//! its own relay. Computers without the supervisor (another architecture, a read-only
//! image, or one made by a server too old to run it with jobs) refuse jobs with a clear
//! error; Engine API exec cannot keep a process's output once its stream closes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use shared::jobs::{BUFFER_BYTES, JobInfo, JobOutput, PEEK_BYTES};
use supervisor::frame::{Frame, JobControl, JobStatus, Kind, StartSpec, job_stdin_payload};
use tokio::sync::mpsc;

use super::supervised::{Connection, lock};
use super::{Docker, DockerError};
use crate::spec::{ExecSpec, JobPoll, JobStart};

/// Most stdin bytes per frame.
const STDIN_CHUNK: usize = 64 * 1024;

/// The output and answer of one request.
struct Answer {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    done: Vec<u8>,
}

impl Docker {
    /// The relay to `container`, if its supervisor serves jobs.
    async fn job_connection(&self, container: &str) -> Result<Arc<Connection>, DockerError> {
        if !self.is_supervised(container).await {
            return Err(DockerError::NoJobs(
                "this computer runs without the in-computer supervisor (Engine API exec only), so it cannot keep a command running past its call; run it in the foreground, or use a computer made with the supervisor".into(),
            ));
        }
        let conn = match self.connection(container).await {
            Ok(c) => c,
            Err(DockerError::NotFound(id)) => return Err(DockerError::NotFound(id)),
            Err(e) => return Err(DockerError::SupervisorUnavailable(e.to_string())),
        };
        if !conn.serves_jobs.load(Ordering::SeqCst) {
            return Err(DockerError::NoJobs(
                "this computer's supervisor predates jobs; computer_factory_reset recreates it with the current one".into(),
            ));
        }
        Ok(conn)
    }

    /// Sends `frame` (its number is set here) and waits up to `wait` (+ a margin) for its
    /// `Done`, gathering the output frames before it.
    async fn job_request(
        &self,
        container: &str,
        conn: &Connection,
        kind: Kind,
        payload: Vec<u8>,
        wait: Duration,
    ) -> Result<Answer, DockerError> {
        let req = conn.next_job.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = mpsc::unbounded_channel();
        lock(&conn.jobs).insert(req, tx);
        struct Unregister<'a>(&'a Connection, u32);
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                lock(&self.0.jobs).remove(&self.1);
            }
        }
        let _registered = Unregister(conn, req);
        conn.send(&Frame::new(kind, req, payload)).await?;
        let deadline = tokio::time::Instant::now() + wait + Duration::from_secs(10);
        let mut answer = Answer {
            stdout: Vec::new(),
            stderr: Vec::new(),
            done: Vec::new(),
        };
        loop {
            let frame = tokio::select! {
                f = rx.recv() => f,
                _ = tokio::time::sleep_until(deadline) => {
                    self.drop_connection(container);
                    return Err(DockerError::Supervisor("the supervisor did not answer in time".into()));
                }
            };
            let Some(frame) = frame else {
                self.drop_connection(container);
                return Err(DockerError::Supervisor(
                    "the supervisor connection closed during the request".into(),
                ));
            };
            match frame.kind {
                Kind::Stdout => answer.stdout.extend_from_slice(&frame.payload),
                Kind::Stderr => answer.stderr.extend_from_slice(&frame.payload),
                Kind::Done => {
                    answer.done = frame.payload;
                    return Ok(answer);
                }
                Kind::Error => {
                    let text = String::from_utf8_lossy(&frame.payload).into_owned();
                    return Err(if text.starts_with("no job ") {
                        DockerError::NoSuchJob(text)
                    } else {
                        DockerError::Job(text)
                    });
                }
                _ => {}
            }
        }
    }

    async fn control(
        &self,
        container: &str,
        conn: &Connection,
        control: &JobControl,
        wait: Duration,
    ) -> Result<Answer, DockerError> {
        let body =
            serde_json::to_vec(control).map_err(|e| DockerError::Supervisor(e.to_string()))?;
        self.job_request(container, conn, Kind::Job, body, wait)
            .await
    }

    /// Starts `spec` as kept job `job.job_id` (stdin open until closed).
    pub async fn job_start(
        &self,
        container: &str,
        spec: &ExecSpec,
        job: &JobStart,
    ) -> Result<(), DockerError> {
        self.ensure_confined(container).await?;
        let conn = self.job_connection(container).await?;
        let start = JobControl::Start {
            job_id: job.job_id.clone(),
            command: job.command.clone(),
            spec: StartSpec {
                argv: spec.program(supervisor::server::AUTO_SHELL),
                cwd: spec.working_directory.clone(),
                env: spec.env_pairs(),
                stdin: true,
                timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
                output_limit: 0,
                quiet: true,
            },
            buffer_bytes: BUFFER_BYTES,
        };
        self.control(container, &conn, &start, Duration::ZERO)
            .await?;
        Ok(())
    }

    /// Writes, closes, signals, then waits and reads, as `poll` says.
    pub async fn job_poll(
        &self,
        container: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, DockerError> {
        let conn = self.job_connection(container).await?;
        if let Some(bytes) = &poll.stdin {
            for chunk in bytes.chunks(STDIN_CHUNK) {
                let payload = job_stdin_payload(job_id, chunk);
                self.job_request(container, &conn, Kind::JobStdin, payload, Duration::ZERO)
                    .await?;
            }
        }
        let id = job_id.to_owned();
        if poll.close_stdin {
            let close = JobControl::CloseStdin { job_id: id.clone() };
            self.control(container, &conn, &close, Duration::ZERO)
                .await?;
        }
        if let Some(signal) = poll.signal {
            let sig = JobControl::Signal {
                job_id: id.clone(),
                signal,
            };
            self.control(container, &conn, &sig, Duration::ZERO).await?;
        }
        let (read, wait) = if poll.peek {
            let peek = JobControl::Peek {
                job_id: id,
                max_bytes: PEEK_BYTES as u64,
            };
            (peek, Duration::ZERO)
        } else {
            let read = JobControl::Read {
                job_id: id,
                wait_ms: poll.wait_ms,
                until_exit: poll.until_exit,
                max_bytes: poll.max_bytes as u64,
            };
            (read, Duration::from_millis(poll.wait_ms))
        };
        let answer = self
            .control(container, &conn, &read, wait)
            .await
            .map_err(|e| match e {
                // A computer made by an older server runs an older supervisor.
                DockerError::Supervisor(m) if poll.peek && m.contains("unknown variant") => {
                    DockerError::Supervisor(format!(
                        "this computer's supervisor predates `peek` (the computer was made by an older server; a new computer has it): {m}"
                    ))
                }
                other => other,
            })?;
        let status: JobStatus = serde_json::from_slice(&answer.done)
            .map_err(|e| DockerError::Supervisor(format!("bad job status: {e}")))?;
        Ok(JobOutput {
            peek: poll.peek,
            ..output(status, answer.stdout, answer.stderr)
        })
    }

    /// The jobs the computer's supervisor keeps.
    pub async fn job_list(&self, container: &str) -> Result<Vec<JobInfo>, DockerError> {
        let conn = self.job_connection(container).await?;
        let answer = self
            .control(container, &conn, &JobControl::List {}, Duration::ZERO)
            .await?;
        let list: Vec<JobStatus> = serde_json::from_slice(&answer.done)
            .map_err(|e| DockerError::Supervisor(format!("bad job list: {e}")))?;
        Ok(list
            .into_iter()
            .map(|s| {
                let exit = s.exit.map(|e| i64::from(e.code));
                JobInfo::new(s.job_id, s.command, s.running, s.started_at_ms, exit)
            })
            .collect())
    }
}

/// The neutral read of a supervisor's status.
fn output(status: JobStatus, stdout: Vec<u8>, stderr: Vec<u8>) -> JobOutput {
    let timed_out = status.exit.as_ref().is_some_and(|e| e.timed_out);
    let oom_killed = status.exit.as_ref().is_some_and(|e| e.oom_killed);
    JobOutput {
        job_id: status.job_id,
        stdout,
        stderr,
        running: status.running,
        exit_code: status.exit.map(|e| i64::from(e.code)),
        duration_ms: status.duration_ms,
        dropped_bytes: status.dropped_bytes,
        timed_out_after: timed_out.then(|| status.timeout_ms.div_ceil(1000)),
        oom_killed,
        peek: false,
    }
}

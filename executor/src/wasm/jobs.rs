//! Jobs (SPEC §3.8) on WASM computers: a `yield_ms` command that outlives its call, kept
//! by this server (a WASM computer has no supervisor; its "processes" are this server's
//! tasks, so a job ends with the server).
//!
//! Each job is one command run as in [`Wasm::exec`] on a task of its own: its stdin is a
//! channel that `terminal_job` writes and closes, its output goes into the same bounded
//! ring the in-computer supervisor uses (the oldest bytes dropped and counted), metered
//! against the server's budget for all jobs' unread output ([`budget`]: past it, the
//! biggest buffers lose their oldest bytes, counted the same way), and
//! its timeout bounds its whole life (124, `timed_out`). A signal ends it at once (there
//! are no signal handlers in WASI): status 128 + the signal, as a killed process's. Its
//! exit is kept until the read that takes its last output, or [`KEEP_ENDED`] after it
//! ended; at most [`MAX_JOBS`] are kept per computer. Restart, factory reset and delete
//! end the computer's jobs.
//!
//! What the computer's directory shows of a job while it is kept (issue 46): its marker
//! ([`super::marks`], so a later server tells what became of a job this one held when it
//! stopped) and, while it runs, its `/proc/<n>` ([`super::procs`]). One write each when
//! the job starts and ends; nothing on the exec path.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use msc_shell::{Input, Output, Stdio};
use shared::jobs::{BUFFER_BYTES, JobInfo, JobOutput, MAX_JOBS, PEEK_BYTES};
use shared::result::TIMEOUT_EXIT_CODE;
use supervisor::ring::Stream;
use tokio::sync::{mpsc, watch};

use super::budget::{self, MeteredRing, OutputBudget};
use super::marks::{self, Fate, Mark};
use super::{Wasm, WasmError, procs};
use crate::spec::{ExecSpec, JobPoll, JobStart};

/// How long an ended job's exit and unread output are kept.
const KEEP_ENDED: Duration = Duration::from_secs(600);

/// The longest a read may wait.
const MAX_WAIT: Duration = Duration::from_secs(600);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How a job ended.
#[derive(Debug, Clone, Copy)]
struct Ended {
    code: i64,
    timed_out: bool,
    at: Instant,
}

/// A job's output and exit, behind one lock.
#[derive(Debug)]
struct State {
    ring: MeteredRing,
    ended: Option<Ended>,
}

/// One kept job.
#[derive(Debug)]
struct Kept {
    id: String,
    command: String,
    started_at_ms: u64,
    started: Instant,
    timeout: Duration,
    state: Mutex<State>,
    /// Bumped on output and on the exit (wakes readers).
    news: watch::Sender<u64>,
    /// Its stdin, until closed or ended.
    stdin: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    /// Ends its task (a signal, restart, reset, delete).
    task: Mutex<Option<tokio::task::AbortHandle>>,
    /// Its marker and `/proc` entry, when they could be written.
    trace: Option<Trace>,
}

/// Where the computer's directory shows a kept job.
#[derive(Debug)]
struct Trace {
    computer_dir: std::path::PathBuf,
    mark: Mark,
}

impl Trace {
    /// Writes the job's `/proc` entry, then its marker; `None` (logged) when the disk
    /// refuses (the job runs all the same).
    fn write(computer_dir: &std::path::Path, mut mark: Mark) -> Option<Self> {
        let shown = procs::add(&computer_dir.join("proc"), &mark.command).and_then(|pid| {
            mark.pid = pid;
            marks::write(computer_dir, &mark).inspect_err(|_| {
                procs::remove(&computer_dir.join("proc"), pid);
            })
        });
        match shown {
            Ok(()) => Some(Self {
                computer_dir: computer_dir.to_owned(),
                mark,
            }),
            Err(e) => {
                tracing::warn!(error = %e, job_id = mark.job_id, "cannot mark a WASM job in its computer's directory");
                None
            }
        }
    }

    /// The job ended: off `/proc`, its status in the marker.
    fn ended(&self, code: i64) {
        procs::remove(&self.computer_dir.join("proc"), self.mark.pid);
        let mark = Mark {
            exit_code: Some(code),
            ..self.mark.clone()
        };
        if let Err(e) = marks::write(&self.computer_dir, &mark) {
            tracing::debug!(error = %e, "cannot note a WASM job's end in its marker");
        }
    }

    /// The job is forgotten (its end read, expired, or the computer's jobs ended).
    fn forget(&self) {
        procs::remove(&self.computer_dir.join("proc"), self.mark.pid);
        marks::remove(&self.computer_dir, &self.mark.job_id);
    }
}

impl Kept {
    fn bump(&self) {
        self.news.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn push(&self, stream: Stream, bytes: &[u8]) {
        lock(&self.state).ring.push(stream, bytes);
        self.bump();
    }

    /// Records the exit once (a later end, e.g. the task finishing after a signal, is
    /// ignored) and closes stdin.
    fn end(&self, code: i64, timed_out: bool) {
        {
            let mut s = lock(&self.state);
            if s.ended.is_some() {
                return;
            }
            // On disk before a reader can see the exit (and forget the job, marker and all).
            if let Some(t) = &self.trace {
                t.ended(code);
            }
            s.ended = Some(Ended {
                code,
                timed_out,
                at: Instant::now(),
            });
        }
        *lock(&self.stdin) = None;
        self.bump();
    }

    /// This server forgets the job: so does the computer's directory.
    fn forget(&self) {
        if let Some(t) = &self.trace {
            t.forget();
        }
    }

    /// Ends the job now with status `code` (its task is dropped, and every instance and
    /// background command of it with the task).
    fn kill(&self, code: i64) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
        self.end(code, false);
    }

    fn expired(&self) -> bool {
        lock(&self.state)
            .ended
            .is_some_and(|e| e.at.elapsed() >= KEEP_ENDED)
    }

    fn info(&self) -> JobInfo {
        let s = lock(&self.state);
        JobInfo::new(
            self.id.clone(),
            self.command.clone(),
            s.ended.is_none(),
            self.started_at_ms,
            s.ended.map(|e| e.code),
        )
    }

    /// Waits as `poll` says, then takes what is unread. The exit is told only by the read
    /// that takes the last output (the caller then forgets the job).
    async fn read(&self, wait: Duration, until_exit: bool, max: usize) -> JobOutput {
        let deadline = tokio::time::Instant::now() + wait.min(MAX_WAIT);
        let mut news = self.news.subscribe();
        loop {
            news.borrow_and_update();
            {
                let s = lock(&self.state);
                if s.ended.is_some() || (!until_exit && s.ring.has_news()) {
                    break;
                }
            }
            match tokio::time::timeout_at(deadline, news.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let mut s = lock(&self.state);
        let ended = s.ended;
        let taken = s.ring.take(max.max(1), ended.is_none());
        let exit = ended.filter(|_| s.ring.is_empty());
        self.output(ended, exit, taken.stdout, taken.stderr, taken.dropped)
    }

    /// The newest output of each stream, taking nothing; `running: false` once the
    /// program ended (the job stays until a read takes its output).
    fn peek(&self) -> JobOutput {
        let s = lock(&self.state);
        let (stdout, stderr) = s.ring.recent(PEEK_BYTES, s.ended.is_none());
        JobOutput {
            peek: true,
            ..self.output(s.ended, s.ended, stdout, stderr, 0)
        }
    }

    /// A read's answer: `exit` is told (`running: false`), `ended` dates it.
    fn output(
        &self,
        ended: Option<Ended>,
        exit: Option<Ended>,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
        dropped: u64,
    ) -> JobOutput {
        let duration = match ended {
            Some(e) => e.at.duration_since(self.started),
            None => self.started.elapsed(),
        };
        JobOutput {
            job_id: self.id.clone(),
            stdout,
            stderr,
            running: exit.is_none(),
            exit_code: exit.map(|e| e.code),
            duration_ms: duration.as_millis() as u64,
            dropped_bytes: dropped,
            timed_out_after: exit
                .filter(|e| e.timed_out)
                .map(|_| self.timeout.as_secs().max(1)),
            oom_killed: false,
            peek: false,
        }
    }
}

/// Every computer's kept jobs, by computer id, oldest first, and the budget their
/// unread output shares.
#[derive(Debug)]
pub(super) struct KeptJobs {
    by_computer: Mutex<HashMap<String, Vec<Arc<Kept>>>>,
    budget: Arc<OutputBudget>,
    /// One shedder at a time ([`KeptJobs::keep_budget`]).
    shedding: Mutex<()>,
}

impl KeptJobs {
    /// No jobs yet; their unread output may hold `budget` bytes in all.
    pub(super) fn new(budget: u64) -> Self {
        Self {
            by_computer: Mutex::default(),
            budget: Arc::new(OutputBudget::new(budget)),
            shedding: Mutex::new(()),
        }
    }

    /// The unread output held now, and the budget, in bytes.
    pub(super) fn buffered(&self) -> (u64, u64) {
        (self.budget.used(), self.budget.limit())
    }

    /// Past the budget, drops the oldest bytes of the biggest buffers (counted in their
    /// `dropped_bytes`) until it holds again.
    fn keep_budget(&self) {
        if !self.budget.over() {
            return;
        }
        let _one = lock(&self.shedding);
        if !self.budget.over() {
            return; // another writer shed meanwhile
        }
        let all: Vec<Arc<Kept>> = lock(&self.by_computer)
            .values()
            .flatten()
            .cloned()
            .collect();
        let shed = budget::shed(&self.budget, &all, |k, f| {
            let mut s = lock(&k.state);
            let before = s.ring.len();
            f(&mut s.ring);
            let shed = s.ring.len() != before;
            drop(s);
            if shed {
                k.bump(); // a waiting reader learns of the drop
            }
        });
        tracing::debug!(
            shed,
            used = self.budget.used(),
            "WASM job output over its budget: dropped the oldest bytes"
        );
    }

    fn get(&self, id: &str, job_id: &str) -> Option<Arc<Kept>> {
        lock(&self.by_computer)
            .get(id)?
            .iter()
            .find(|k| k.id == job_id)
            .cloned()
    }

    fn remove(&self, id: &str, job_id: &str) {
        let mut all = lock(&self.by_computer);
        if let Some(list) = all.get_mut(id) {
            forget_where(list, |k| k.id == job_id);
            if list.is_empty() {
                all.remove(id);
            }
        }
    }

    fn held(&self, id: &str, job_id: &str) -> bool {
        self.get(id, job_id).is_some()
    }

    fn insert(&self, id: &str, kept: Arc<Kept>) -> Result<(), WasmError> {
        let mut all = lock(&self.by_computer);
        let list = all.entry(id.to_owned()).or_default();
        forget_where(list, Kept::expired);
        if list.iter().any(|k| k.id == kept.id) {
            return Err(WasmError::Job(format!(
                "job id {} is already in use",
                kept.id
            )));
        }
        if list.len() >= MAX_JOBS {
            return Err(WasmError::Job(format!(
                "this computer already keeps {MAX_JOBS} jobs (running, or ended with output not read yet); read or signal some of them (terminal_job), or wait for ended ones to expire after {} minutes",
                KEEP_ENDED.as_secs() / 60
            )));
        }
        list.push(kept);
        Ok(())
    }

    /// Ends and forgets every job of computer `id`.
    pub(super) fn end_all(&self, id: &str) {
        let list = lock(&self.by_computer).remove(id).unwrap_or_default();
        for k in list {
            k.kill(128 + 9);
            k.forget();
        }
    }

    fn list(&self, id: &str) -> Vec<JobInfo> {
        let mut all = lock(&self.by_computer);
        let Some(list) = all.get_mut(id) else {
            return Vec::new();
        };
        forget_where(list, Kept::expired);
        list.iter().map(|k| k.info()).collect()
    }
}

/// Takes the jobs `gone` names out of `list`, forgetting them (their markers go).
fn forget_where(list: &mut Vec<Arc<Kept>>, gone: impl Fn(&Kept) -> bool) {
    list.retain(|k| {
        let g = gone(k);
        if g {
            k.forget();
        }
        !g
    });
}

fn no_job(job_id: &str) -> WasmError {
    WasmError::NoSuchJob(format!(
        "no job {job_id} on this computer (it never existed, or it ended and was read)"
    ))
}

impl Wasm {
    /// Starts `spec` on computer `id` as kept job `job.job_id`, its stdin open until
    /// closed (the caller writes a given `stdin` and closes it).
    pub async fn job_start(
        &self,
        id: &str,
        spec: &ExecSpec,
        job: &JobStart,
    ) -> Result<(), WasmError> {
        self.ready().await?;
        let dir = self.computer_dir(id);
        if !dir.join("fs").is_dir() {
            return Err(WasmError::NotFound(id.to_owned()));
        }
        self.prepare(id).await?;
        if self.kept.held(id, &job.job_id) {
            return Err(WasmError::Job(format!(
                "job id {} is already in use",
                job.job_id
            )));
        }
        let started_at_ms = super::now_ms();
        let mark = Mark {
            job_id: job.job_id.clone(),
            command: job.command.clone(),
            started_at_ms,
            instance: self.instance.clone(),
            host: self.host.clone(),
            pid: 0,
            exit_code: None,
        };
        let trace = tokio::task::spawn_blocking(move || Trace::write(&dir, mark))
            .await
            .ok()
            .flatten();
        let (tx, rx) = mpsc::unbounded_channel();
        let kept = Arc::new(Kept {
            id: job.job_id.clone(),
            command: job.command.clone(),
            started_at_ms,
            started: Instant::now(),
            timeout: spec.timeout,
            state: Mutex::new(State {
                ring: MeteredRing::new(BUFFER_BYTES as usize, self.kept.budget.clone()),
                ended: None,
            }),
            news: watch::channel(0).0,
            stdin: Mutex::new(Some(tx)),
            task: Mutex::new(None),
            trace,
        });
        if let Err(e) = self.kept.insert(id, kept.clone()) {
            kept.forget();
            return Err(e);
        }
        let (kept_jobs, dir) = (self.kept.clone(), self.computer_dir(id));
        let id3 = id.to_owned();
        tokio::task::spawn_blocking(move || {
            marks::prune(&dir, &|job_id| kept_jobs.held(&id3, job_id));
        });
        let io = Stdio {
            stdin: Box::new(ChannelReader {
                rx,
                pending: Vec::new(),
            }) as Input,
            stdout: Box::new(JobWriter {
                kept: kept.clone(),
                jobs: self.kept.clone(),
                stream: Stream::Stdout,
            }) as Output,
            stderr: Box::new(JobWriter {
                kept: kept.clone(),
                jobs: self.kept.clone(),
                stream: Stream::Stderr,
            }) as Output,
        };
        let (this, id2, spec2, k) = (self.clone(), id.to_owned(), spec.clone(), kept.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let outcome = this.run_command(&id2, &spec2, io, started, false).await;
            match outcome {
                Ok(Some(code)) => k.end(i64::from(code), false),
                Ok(None) => k.end(TIMEOUT_EXIT_CODE, true),
                Err(e) => {
                    k.push(Stream::Stderr, format!("{e}\n").as_bytes());
                    k.end(126, false);
                }
            }
        });
        *lock(&kept.task) = Some(task.abort_handle());
        if lock(&kept.state).ended.is_some() {
            // It ended before its handle was kept: nothing to end later.
            lock(&kept.task).take();
        }
        Ok(())
    }

    /// Writes, closes, signals, then waits and reads job `job_id`, as `poll` says.
    pub async fn job_poll(
        &self,
        id: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, WasmError> {
        let Some(kept) = self.kept.get(id, job_id) else {
            return Err(self.not_held(id, job_id));
        };
        if let Some(bytes) = &poll.stdin {
            let sent = lock(&kept.stdin)
                .as_ref()
                .is_some_and(|tx| tx.send(bytes.clone()).is_ok());
            if !sent {
                return Err(WasmError::Job(format!(
                    "job {job_id} takes no more input: its stdin was closed, or it ended"
                )));
            }
        }
        if poll.close_stdin {
            *lock(&kept.stdin) = None;
        }
        if let Some(signal) = poll.signal {
            kept.kill(128 + i64::from(signal));
        }
        if poll.peek {
            return Ok(kept.peek());
        }
        let wait = Duration::from_millis(poll.wait_ms);
        let out = kept.read(wait, poll.until_exit, poll.max_bytes).await;
        if !out.running {
            self.kept.remove(id, job_id);
        }
        Ok(out)
    }

    /// Why computer `id` has no job `job_id` in this server: its marker may say it ended
    /// with the server process that ran it (told once: the marker goes), or runs in
    /// another ([`marks`]).
    fn not_held(&self, id: &str, job_id: &str) -> WasmError {
        let dir = self.computer_dir(id);
        let Some(mark) = marks::read(&dir, job_id) else {
            return no_job(job_id);
        };
        match marks::fate(&mark, &self.instance, &self.host) {
            Fate::Forgotten => {
                marks::remove(&dir, job_id);
                no_job(job_id)
            }
            Fate::Stopped => {
                marks::remove(&dir, job_id);
                WasmError::JobGone(shared::jobs::gone_with_its_server(
                    job_id,
                    &mark.command,
                    mark.exit_code,
                ))
            }
            Fate::Elsewhere => WasmError::JobGone(marks::elsewhere(&mark)),
        }
    }

    /// The jobs computer `id` keeps, oldest first.
    pub fn job_list(&self, id: &str) -> Vec<JobInfo> {
        self.kept.list(id)
    }
}

/// A job's stdin: the chunks `terminal_job` sends, until the sender is dropped (EOF).
struct ChannelReader {
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    pending: Vec<u8>,
}

impl tokio::io::AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        while self.pending.is_empty() {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => self.pending = chunk,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.pending.len().min(buf.remaining());
        buf.put_slice(&self.pending[..n]);
        self.pending.drain(..n);
        Poll::Ready(Ok(()))
    }
}

/// A job's stdout or stderr: into its ring, never blocking and never failing; past the
/// server's budget, the biggest buffers shed their oldest bytes. (The writer holds the
/// table, the table never holds a writer: no cycle keeps a deleted computer's jobs.)
struct JobWriter {
    kept: Arc<Kept>,
    jobs: Arc<KeptJobs>,
    stream: Stream,
}

impl tokio::io::AsyncWrite for JobWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.kept.push(self.stream, buf);
        self.jobs.keep_budget();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

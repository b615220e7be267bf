//! Kept jobs: commands that outlive the connection that started them, so a server can
//! return while they run, and a later connection (another session, or a new server
//! process after a restart) reads their output, writes their stdin and signals them.
//!
//! Each job's output waits in its own bounded [`Ring`]; its exit status is kept until the
//! read that takes its last output, or [`KEEP_ENDED`] after it ended. At most [`MAX_JOBS`]
//! are kept; beyond that a new one is refused. The job id is the server's (unguessable):
//! whoever holds it may reach the job, and the server decides who may learn it.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::Signal;

use crate::frame::{CHUNK, ExitInfo, Frame, JobControl, JobStatus, Kind, split_job_stdin};
use crate::ring::{Ring, Stream};
use crate::server::{JobCtl, Sink, State, Writer, kill_group, lock, send, start_job};

/// Most jobs kept per computer, running or ended and unread.
pub const MAX_JOBS: usize = 64;
/// How long an ended job's exit and unread output are kept.
pub const KEEP_ENDED: Duration = Duration::from_secs(600);
/// The largest output buffer a job may ask for.
const MAX_BUFFER: u64 = 64 << 20;
/// The longest a read may wait.
const MAX_WAIT: Duration = Duration::from_secs(600);

/// How a kept job stands.
struct Inner {
    ring: Ring,
    exit: Option<ExitInfo>,
    ended: Option<Instant>,
}

/// One kept job.
pub(crate) struct Kept {
    id: String,
    command: String,
    started_at_ms: u64,
    started: Instant,
    timeout_ms: u64,
    ctl: Mutex<Option<JobCtl>>,
    inner: Mutex<Inner>,
    /// Wakes readers on output and on the exit.
    news: Condvar,
}

impl Kept {
    pub(crate) fn push(&self, stream: Stream, bytes: &[u8]) {
        lock(&self.inner).ring.push(stream, bytes);
        self.news.notify_all();
    }

    pub(crate) fn end(&self, info: ExitInfo) {
        {
            let mut inner = lock(&self.inner);
            inner.exit = Some(info);
            inner.ended = Some(Instant::now());
        }
        // Its process group is gone: nothing may signal that pgid again.
        *lock(&self.ctl) = None;
        self.news.notify_all();
    }

    fn status(&self, inner: &Inner, exit: Option<ExitInfo>, dropped: u64) -> JobStatus {
        let duration = match inner.ended {
            Some(at) => at.duration_since(self.started),
            None => self.started.elapsed(),
        };
        JobStatus {
            job_id: self.id.clone(),
            command: self.command.clone(),
            started_at_ms: self.started_at_ms,
            duration_ms: duration.as_millis() as u64,
            running: exit.is_none(),
            exit,
            dropped_bytes: dropped,
            unread_bytes: inner.ring.len() as u64,
            timeout_ms: self.timeout_ms,
        }
    }

    /// Waits as asked, then takes what is unread. The status carries `exit` only on the
    /// read that took the last output (then the job is done with).
    fn read(&self, wait: Duration, until_exit: bool, max: usize) -> (Vec<u8>, Vec<u8>, JobStatus) {
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let mut inner = lock(&self.inner);
        loop {
            let ready = inner.exit.is_some() || (!until_exit && inner.ring.has_news());
            let now = Instant::now();
            if ready || now >= deadline {
                break;
            }
            inner = self
                .news
                .wait_timeout(inner, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        let ended = inner.exit.is_some();
        let taken = inner.ring.take(max, !ended);
        let exit = if ended && inner.ring.is_empty() {
            inner.exit.clone()
        } else {
            None
        };
        let status = self.status(&inner, exit, taken.dropped);
        (taken.stdout, taken.stderr, status)
    }

    /// The newest output of each stream, taking nothing; the status says whether the
    /// program ended (its `exit` then set, unread output or not).
    fn peek(&self, max: usize) -> (Vec<u8>, Vec<u8>, JobStatus) {
        let inner = lock(&self.inner);
        let ended = inner.exit.is_some();
        let (stdout, stderr) = inner.ring.recent(max, !ended);
        let status = self.status(&inner, inner.exit.clone(), 0);
        (stdout, stderr, status)
    }

    fn expired(&self) -> bool {
        lock(&self.inner)
            .ended
            .is_some_and(|at| at.elapsed() >= KEEP_ENDED)
    }
}

/// The kept jobs of this computer, oldest first.
#[derive(Default)]
pub(crate) struct Jobs {
    list: Mutex<Vec<Arc<Kept>>>,
}

impl Jobs {
    fn get(&self, id: &str) -> Option<Arc<Kept>> {
        lock(&self.list).iter().find(|k| k.id == id).cloned()
    }

    fn remove(&self, id: &str) {
        lock(&self.list).retain(|k| k.id != id);
    }

    /// Adds a job unless the id is taken or the table is full (after forgetting expired ones).
    fn insert(&self, kept: Arc<Kept>) -> Result<(), String> {
        let mut list = lock(&self.list);
        list.retain(|k| !k.expired());
        if list.iter().any(|k| k.id == kept.id) {
            return Err(format!("job id {} is already in use", kept.id));
        }
        if list.len() >= MAX_JOBS {
            return Err(format!(
                "this computer already keeps {MAX_JOBS} jobs (running, or ended with output not read yet); read or signal some of them (terminal_job), or wait for ended ones to expire after {} minutes",
                KEEP_ENDED.as_secs() / 60
            ));
        }
        list.push(kept);
        Ok(())
    }

    fn list(&self) -> Vec<JobStatus> {
        let mut list = lock(&self.list);
        list.retain(|k| !k.expired());
        list.iter()
            .map(|k| {
                let inner = lock(&k.inner);
                let mut s = k.status(&inner, None, 0);
                // A list shows how a job ended without consuming the exit.
                s.running = inner.exit.is_none();
                s.exit = inner.exit.clone();
                s
            })
            .collect()
    }
}

fn error(w: &Writer, req: u32, message: impl Into<String>) {
    send(
        w,
        &Frame::new(Kind::Error, req, message.into().into_bytes()),
    );
}

fn done(w: &Writer, req: u32, body: &impl serde::Serialize) {
    match serde_json::to_vec(body) {
        Ok(bytes) => send(w, &Frame::new(Kind::Done, req, bytes)),
        Err(e) => error(w, req, e.to_string()),
    }
}

fn unknown(w: &Writer, req: u32, id: &str) {
    error(
        w,
        req,
        format!("no job {id} on this computer (it never existed, or it ended and was read)"),
    );
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Serves one `Job` request (`req` is the connection's number for it).
pub(crate) fn control(state: &Arc<State>, w: &Writer, req: u32, control: JobControl) {
    match control {
        JobControl::Start {
            job_id,
            command,
            spec,
            buffer_bytes,
        } => {
            if job_id.is_empty() || job_id.len() > 128 {
                return error(w, req, "a job id has 1 to 128 bytes");
            }
            let kept = Arc::new(Kept {
                id: job_id,
                command,
                started_at_ms: now_ms(),
                started: Instant::now(),
                timeout_ms: spec.timeout_ms,
                ctl: Mutex::new(None),
                inner: Mutex::new(Inner {
                    ring: Ring::new(buffer_bytes.clamp(1, MAX_BUFFER) as usize),
                    exit: None,
                    ended: None,
                }),
                news: Condvar::new(),
            });
            if let Err(why) = state.kept.insert(kept.clone()) {
                return error(w, req, why);
            }
            let ctl = start_job(state, spec, Sink::Kept(kept.clone()));
            // It may have ended already (a missing program, or a quick one): then it keeps
            // no controls. `end` sets the exit before it clears the controls, so checking
            // the exit while holding them leaves no window for a stale process group.
            {
                let mut slot = lock(&kept.ctl);
                if lock(&kept.inner).exit.is_none() {
                    *slot = ctl;
                }
            }
            let status = kept.status(&lock(&kept.inner), None, 0);
            done(w, req, &status);
        }
        JobControl::Read {
            job_id,
            wait_ms,
            until_exit,
            max_bytes,
        } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            let (w, state) = (w.clone(), state.clone());
            // A read may wait: never on the connection's own thread.
            crate::workers::spawn(move || {
                let max = usize::try_from(max_bytes.max(1)).unwrap_or(usize::MAX);
                let (stdout, stderr, status) =
                    kept.read(Duration::from_millis(wait_ms), until_exit, max);
                for (kind, bytes) in [(Kind::Stdout, stdout), (Kind::Stderr, stderr)] {
                    for chunk in bytes.chunks(CHUNK) {
                        send(&w, &Frame::new(kind, req, chunk.to_vec()));
                    }
                }
                if status.exit.is_some() {
                    state.kept.remove(&job_id);
                }
                done(&w, req, &status);
            });
        }
        JobControl::Peek { job_id, max_bytes } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
            let (stdout, stderr, status) = kept.peek(max);
            for (kind, bytes) in [(Kind::Stdout, stdout), (Kind::Stderr, stderr)] {
                for chunk in bytes.chunks(CHUNK) {
                    send(w, &Frame::new(kind, req, chunk.to_vec()));
                }
            }
            done(w, req, &status);
        }
        JobControl::CloseStdin { job_id } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            if let Some(ctl) = lock(&kept.ctl).as_mut() {
                ctl.stdin = None;
            }
            done(w, req, &serde_json::json!({}));
        }
        JobControl::Signal { job_id, signal } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            let Some(sig) = Signal::from_named_raw(signal) else {
                return error(w, req, format!("{signal} is not a signal number"));
            };
            // An ended job has no group left: signalling it is a no-op, not an error.
            if let Some(ctl) = lock(&kept.ctl).as_ref() {
                kill_group(ctl.pgid, sig);
            }
            done(w, req, &serde_json::json!({}));
        }
        JobControl::List {} => done(w, req, &state.kept.list()),
    }
}

/// Serves one `JobStdin` frame.
pub(crate) fn stdin(state: &Arc<State>, w: &Writer, req: u32, payload: &[u8]) {
    let Some((job_id, bytes)) = split_job_stdin(payload) else {
        return error(w, req, "bad stdin frame");
    };
    let Some(kept) = state.kept.get(job_id) else {
        return unknown(w, req, job_id);
    };
    let sent = lock(&kept.ctl)
        .as_ref()
        .and_then(|c| c.stdin.as_ref())
        .is_some_and(|tx| tx.send(Some(bytes.to_vec())).is_ok());
    if sent {
        done(w, req, &serde_json::json!({}));
    } else {
        error(
            w,
            req,
            format!("job {job_id} takes no more input: its stdin was closed, or it ended"),
        );
    }
}

//! Kept jobs, the data: commands that outlive the connection that started them, so a
//! server can return while they run, and a later connection (another session, or a new
//! server process after a restart) reads their output, writes their stdin and signals
//! them (the frames that do it are `jobs.rs`).
//!
//! Each job's output waits in its own bounded [`Ring`]; its exit status is kept until the
//! read that takes its last output, or [`KEEP_ENDED`] after it ended. At most [`MAX_JOBS`]
//! are kept; beyond that a new one is refused. The job id is the server's (unguessable):
//! whoever holds it may reach the job, and the server decides who may learn it.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::Signal;

use crate::frame::{ExitInfo, JobStatus};
use crate::proc::{JobCtl, kill_group, lock};
use crate::ring::{Ring, Stream};

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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Kept {
    /// A job `id` about to start, running `command` (as lists show it), whose output waits
    /// in a buffer of `buffer_bytes` (clamped to what a job may ask for).
    pub(crate) fn new(id: String, command: String, timeout_ms: u64, buffer_bytes: u64) -> Self {
        Self {
            id,
            command,
            started_at_ms: now_ms(),
            started: Instant::now(),
            timeout_ms,
            ctl: Mutex::new(None),
            inner: Mutex::new(Inner {
                ring: Ring::new(buffer_bytes.clamp(1, MAX_BUFFER) as usize),
                exit: None,
                ended: None,
            }),
            news: Condvar::new(),
        }
    }

    /// Keeps the controls of the job just started, unless it ended already (a missing
    /// program, or a quick one): `end` sets the exit before it clears the controls, so
    /// checking the exit while holding them leaves no window for a stale process group.
    pub(crate) fn attach(&self, ctl: Option<JobCtl>) {
        let mut slot = lock(&self.ctl);
        if lock(&self.inner).exit.is_none() {
            *slot = ctl;
        }
    }

    /// How it stands now, taking nothing.
    pub(crate) fn current(&self) -> JobStatus {
        self.status(&lock(&self.inner), None, 0)
    }

    /// Closes its stdin (a no-op once closed or ended).
    pub(crate) fn close_stdin(&self) {
        if let Some(ctl) = lock(&self.ctl).as_mut() {
            ctl.stdin = None;
        }
    }

    /// Signals its whole tree; an ended job has no group left, so this is then a no-op.
    pub(crate) fn signal(&self, sig: Signal) {
        if let Some(ctl) = lock(&self.ctl).as_ref() {
            kill_group(ctl.pgid, sig);
        }
    }

    /// Queues `bytes` for its stdin; `false` when its stdin was closed or it ended.
    pub(crate) fn send_stdin(&self, bytes: &[u8]) -> bool {
        lock(&self.ctl)
            .as_ref()
            .and_then(|c| c.stdin.as_ref())
            .is_some_and(|tx| tx.send(Some(bytes.to_vec())).is_ok())
    }

    pub(crate) fn push(&self, stream: Stream, bytes: &[u8]) {
        lock(&self.inner).ring.push(stream, bytes);
        self.news.notify_all();
    }

    /// Whether its reader fell behind: the buffer dropped bytes since the last read.
    pub(crate) fn behind(&self) -> bool {
        lock(&self.inner).ring.behind()
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
    pub(crate) fn read(
        &self,
        wait: Duration,
        until_exit: bool,
        max: usize,
    ) -> (Vec<u8>, Vec<u8>, JobStatus) {
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
    pub(crate) fn peek(&self, max: usize) -> (Vec<u8>, Vec<u8>, JobStatus) {
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
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Kept>> {
        lock(&self.list).iter().find(|k| k.id == id).cloned()
    }

    pub(crate) fn remove(&self, id: &str) {
        lock(&self.list).retain(|k| k.id != id);
    }

    /// Adds a job unless the id is taken or the table is full (after forgetting expired ones).
    pub(crate) fn insert(&self, kept: Arc<Kept>) -> Result<(), String> {
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

    pub(crate) fn list(&self) -> Vec<JobStatus> {
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

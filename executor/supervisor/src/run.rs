//! A job's start ([`launch`], [`start_job`]: its program resolved like a shell, spawned in
//! its own process group and audit session with its tag, its controls registered) and its
//! remaining work: read its output as it comes (bounded by its limit), keep its deadline,
//! see its end and report it.
//!
//! A [`Run`] is run on one thread from start to end, and may be stopped half-way and moved:
//! a connection's thread runs a command inline (no hand-off to another thread between the
//! command's exit and its `Exit` frame) until the connection has something to say, and
//! then hands the rest to a worker. Its end is seen through a pidfd and reaped here, as
//! soon as it comes (even while its output is still open, so no zombie waits for it);
//! where the kernel refuses pidfds, the reaper thread reports it instead, and the run never
//! runs inline (it could not watch the connection while it waits for the exit).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, Signal};

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use crate::frame::{CHUNK, ExitInfo, Frame, Kind, StartSpec};
use crate::proc::{
    JobCtl, MARKS, Mark, NEXT_TAG, StdinTx, TAG_VAR, code_of, job_session, kill_group, lock, send,
    settle_group,
};
use crate::sink::Sink;
use crate::state::{State, Waiter};

/// argv[0] marker: run bash if the image has it, else /bin/sh.
pub const AUTO_SHELL: &str = "@auto-shell";

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where `program` would be run from, or why not (126/127 like a shell).
pub(crate) fn resolve(program: &str) -> Result<PathBuf, (i32, String)> {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return match std::fs::metadata(&p) {
            Err(_) => Err((127, format!("{program}: No such file or directory"))),
            Ok(_) if !executable(&p) => Err((126, format!("{program}: Permission denied"))),
            Ok(_) => Ok(p),
        };
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned());
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
        .ok_or_else(|| (127, format!("{program}: not found")))
}

fn finish(sink: &Sink, code: i32, stderr_note: Option<&str>) {
    if let Some(note) = stderr_note {
        sink.output(Kind::Stderr, format!("{note}\n").as_bytes());
    }
    sink.exit(ExitInfo {
        code,
        timed_out: false,
        truncated: false,
        oom_killed: false,
    });
}

/// Starts a kept job: it runs on a thread of its own, and its controls are returned.
/// `None` also when it could not start (the sink then has the shell's answer: 126, 127).
pub(crate) fn start_job(state: &Arc<State>, spec: StartSpec, sink: Sink) -> Option<JobCtl> {
    let (ctl, run) = launch(state, spec, sink)?;
    crate::workers::spawn(move || {
        run.run(None);
    });
    ctl
}

/// Starts a job: spawns it in its own process group and registers its controls (a
/// streamed job's in its connection's map, a kept job's returned). What is left to do (its
/// output, its deadline, its end) is the returned [`Run`]. `None` when it could not start:
/// the sink already has the shell's answer (126, 127).
pub(crate) fn launch(
    state: &Arc<State>,
    spec: StartSpec,
    sink: Sink,
) -> Option<(Option<JobCtl>, Run)> {
    let Some(program) = spec.argv.first() else {
        finish(&sink, 127, Some("msc-supervisor: empty argv"));
        return None;
    };
    if let Some(cwd) = &spec.cwd
        && !Path::new(cwd).is_dir()
    {
        finish(
            &sink,
            126,
            Some(&format!("cd: {cwd}: No such file or directory")),
        );
        return None;
    }
    // `@auto-shell`: bash when the image has it, else /bin/sh (the server's default shell).
    let program = if program == AUTO_SHELL {
        if resolve("/bin/bash").is_ok() {
            "/bin/bash"
        } else {
            "/bin/sh"
        }
    } else {
        program.as_str()
    };
    let path = match resolve(program) {
        Ok(p) => p,
        Err((code, msg)) => {
            finish(&sink, code, Some(&msg));
            return None;
        }
    };
    // Unique among the supervisors that share a /proc (one per computer; several in tests).
    let tag = format!(
        "{}-{}",
        rustix::process::getpid().as_raw_nonzero(),
        NEXT_TAG.fetch_add(1, Ordering::Relaxed)
    );
    let cmd = crate::spawn::Command {
        path: &path,
        argv: std::iter::once(program)
            .chain(spec.argv[1..].iter().map(String::as_str))
            .collect(),
        cwd: spec.cwd.as_deref(),
        env: spec
            .env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .chain([(TAG_VAR, tag.as_str())])
            .collect(),
        stdin: spec.stdin,
    };
    let oom_before = crate::oom::kills();
    let (exit_tx, exit_rx) = mpsc::channel();
    // Spawn, open its pidfd and register under the reaper's lock: the reaper cannot reap
    // it before the pidfd is open (so the pidfd names this process, never a later one with
    // the same pid), and it leaves a watched process to its run. Where the kernel or a
    // seccomp profile refuses pidfds, the reaper reaps it and tells.
    let (child, pidfd) = {
        let mut reaped = lock(&state.reaped);
        match crate::spawn::spawn(&cmd) {
            Ok(c) => {
                let pidfd = Pid::from_raw(c.pid).and_then(|pid| {
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                });
                reaped.waiters.insert(
                    c.pid,
                    Waiter {
                        tx: exit_tx,
                        watched: pidfd.is_some(),
                    },
                );
                (c, pidfd)
            }
            Err(e) => {
                drop(reaped);
                finish(&sink, 126, Some(&format!("{program}: {e}")));
                return None;
            }
        }
    };
    let pgid = child.pid;
    let session = job_session(pgid);
    lock(&MARKS).insert(pgid, Mark { session, tag });
    lock(&state.groups).insert(pgid, ());
    if let Sink::Stream { w, job, .. } = &sink
        && !spec.quiet
    {
        send(
            w,
            &Frame::new(Kind::Started, *job, pgid.to_string().into_bytes()),
        );
    }
    // A kept job's buffer bounds its output; only a streamed one is stopped at the limit.
    let limit = match &sink {
        Sink::Stream { .. } => spec.output_limit,
        Sink::Kept(_) => u64::MAX,
    };
    let pipes: Vec<(Kind, std::fs::File)> = vec![
        (Kind::Stdout, std::fs::File::from(child.stdout)),
        (Kind::Stderr, std::fs::File::from(child.stderr)),
    ];
    let stdin_tx = child.stdin.map(std::fs::File::from).map(|mut stdin| {
        let (tx, rx): (StdinTx, Receiver<Option<Vec<u8>>>) = mpsc::channel();
        crate::workers::spawn(move || {
            while let Ok(Some(bytes)) = rx.recv() {
                // A job that never reads its stdin is not an error.
                if stdin.write_all(&bytes).is_err() {
                    break;
                }
            }
        });
        tx
    });
    let ctl = JobCtl {
        pgid,
        stdin: stdin_tx,
    };
    // A streamed job's controls go to its connection before anything can end it.
    let ctl = match &sink {
        Sink::Stream { job, jobs, .. } => {
            lock(jobs).insert(*job, ctl);
            None
        }
        Sink::Kept(_) => Some(ctl),
    };
    // A timeout past what an Instant can hold is no deadline at all (a year will do).
    let now = std::time::Instant::now();
    let deadline = now
        .checked_add(Duration::from_millis(spec.timeout_ms.max(1)))
        .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
    let run = Run::new(crate::run::Job {
        state: state.clone(),
        sink,
        pgid,
        pidfd,
        exit_rx,
        pipes,
        limit,
        deadline,
        oom_before,
    });
    Some((ctl, run))
}

/// Everything a started job's run needs.
pub(crate) struct Job {
    pub(crate) state: Arc<State>,
    pub(crate) sink: Sink,
    /// The job's process group, which is also its first process's pid.
    pub(crate) pgid: i32,
    /// A pidfd of the job's first process, where the kernel gives one.
    pub(crate) pidfd: Option<OwnedFd>,
    /// Its exit status, from the reaper (when there is no pidfd, or waiting on it failed).
    pub(crate) exit_rx: Receiver<i32>,
    /// Its stdout and stderr, until each is closed.
    pub(crate) pipes: Vec<(Kind, std::fs::File)>,
    /// Output bytes allowed in all; past it the job is truncated and killed.
    pub(crate) limit: u64,
    pub(crate) deadline: Instant,
    /// The cgroup's out-of-memory kill count when it started.
    pub(crate) oom_before: Option<u64>,
}

/// A job being run; see the module's docs.
pub(crate) struct Run {
    job: Job,
    /// Its first process's exit code, once reaped.
    code: Option<i32>,
    used: u64,
    killed_at: Option<Instant>,
    timed_out: bool,
    truncated: bool,
}

/// Polls wake at least this often while the job is killed (to give up on escaped holders
/// of its pipes) and never sleep past the deadline.
const TICK: Duration = Duration::from_millis(100);
/// A killed job's pipes held by a process that escaped its mark are let go after this.
const ESCAPE_GRACE: Duration = Duration::from_secs(1);
/// While a kept job's reader is behind (its buffer drops the oldest bytes), its pipes are
/// read at most this often: the pipe fills and the job's writes block, so output nobody
/// reads costs neither it nor us a CPU, and the buffer still ends with the newest bytes.
const BEHIND_PAUSE: Duration = Duration::from_millis(50);

/// What [`Run::reap`] found.
enum Reap {
    Code(i32),
    /// Still running.
    NotYet,
    /// This kernel cannot wait on a pidfd.
    Unsupported,
}

impl Run {
    pub(crate) fn new(job: Job) -> Self {
        Self {
            job,
            code: None,
            used: 0,
            killed_at: None,
            timed_out: false,
            truncated: false,
        }
    }

    /// Whether it can run on a thread that must also watch another descriptor: only when
    /// it can wait for its exit on a descriptor too.
    pub(crate) fn can_watch(&self) -> bool {
        self.job.pidfd.is_some()
    }

    /// Runs the job to its end and reports it. With `watch`, it stops as soon as `watch`
    /// is readable (or hung up) and returns itself, to be run on elsewhere.
    pub(crate) fn run(mut self, watch: Option<BorrowedFd<'_>>) -> Option<Self> {
        if self.pump(watch) {
            return Some(self);
        }
        let status = match self.code {
            Some(code) => Some(code),
            None => self.wait_exit(watch),
        };
        let status = match status {
            Some(code) => code,
            None => return Some(self),
        };
        self.end(status);
        None
    }

    fn left(&self) -> Duration {
        self.job.deadline.saturating_duration_since(Instant::now())
    }

    fn killed(&self) -> bool {
        self.timed_out || self.truncated
    }

    /// Past the deadline: the job timed out, and its group is killed (once).
    fn check_deadline(&mut self) {
        if !self.timed_out && self.left().is_zero() {
            self.timed_out = true;
            kill_group(self.job.pgid, Signal::KILL);
        }
    }

    /// How long a poll may sleep.
    fn tick(&self) -> Timespec {
        let wait = if self.killed() {
            TICK
        } else {
            self.left().min(TICK)
        };
        Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(wait.subsec_nanos()),
        }
    }

    /// Reads the pipes until each is closed, handing their bytes to the sink as they come,
    /// `limit` bytes in all: past it the job is truncated, its group killed and reading
    /// stops (the limit is enforced here, at the source). Once the job was killed (timeout
    /// or limit), a holder that escaped its mark (a job without a session of its own, whose
    /// process cleared its environment) gets a second to go, and is then left to itself:
    /// the answer does not wait for it. While a kept job's reader is behind, the pipes
    /// are read once per [`BEHIND_PAUSE`] (back-pressure: the job's writes block).
    /// `true`: stopped because `watch` became readable.
    fn pump(&mut self, watch: Option<BorrowedFd<'_>>) -> bool {
        let mut buf = [0u8; CHUNK];
        while !self.job.pipes.is_empty() {
            self.check_deadline();
            let tick = self.tick();
            let (ready, ended, watched) = {
                let mut fds: Vec<PollFd<'_>> = self
                    .job
                    .pipes
                    .iter()
                    .map(|(_, f)| PollFd::new(f, PollFlags::IN))
                    .collect();
                let pidfd = self.job.pidfd.as_ref().filter(|_| self.code.is_none());
                if let Some(p) = pidfd {
                    fds.push(PollFd::new(p, PollFlags::IN));
                }
                if let Some(w) = &watch {
                    fds.push(PollFd::from_borrowed_fd(*w, PollFlags::IN));
                }
                match rustix::event::poll(&mut fds, Some(&tick)) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => {
                        self.job.pipes.clear();
                        break;
                    }
                }
                let mut ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
                let watched = watch.is_some() && ready.pop() == Some(true);
                let ended = pidfd.is_some() && ready.pop() == Some(true);
                (ready, ended, watched)
            };
            if watched {
                return true;
            }
            if ended {
                self.reap_now();
            }
            if !ready.contains(&true) {
                if self.killed()
                    && self.killed_at.get_or_insert_with(Instant::now).elapsed() >= ESCAPE_GRACE
                {
                    self.job.pipes.clear();
                }
                continue;
            }
            let mut closed = Vec::new();
            for (i, (kind, pipe)) in self.job.pipes.iter_mut().enumerate() {
                if !ready[i] {
                    continue;
                }
                let n = match pipe.read(&mut buf) {
                    Ok(0) => {
                        closed.push(i);
                        continue;
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        closed.push(i);
                        continue;
                    }
                };
                let room =
                    usize::try_from(self.job.limit.saturating_sub(self.used)).unwrap_or(usize::MAX);
                self.used = self.used.saturating_add(n as u64);
                let keep = n.min(room);
                if keep > 0 {
                    self.job.sink.output(*kind, &buf[..keep]);
                }
                if keep < n {
                    self.truncated = true;
                    kill_group(self.job.pgid, Signal::KILL);
                    break;
                }
            }
            if self.truncated {
                self.job.pipes.clear();
                break;
            }
            for i in closed.into_iter().rev() {
                self.job.pipes.remove(i);
            }
            if watch.is_none() && !self.killed() && self.job.sink.behind() {
                std::thread::sleep(BEHIND_PAUSE.min(self.left()));
            }
        }
        false
    }

    /// Reaps the first process, which has ended, keeping its code for the report.
    fn reap_now(&mut self) {
        let Some(pidfd) = self.job.pidfd.take() else {
            return;
        };
        match self.reap(&pidfd) {
            Reap::Code(code) => self.code = Some(code),
            Reap::NotYet => self.job.pidfd = Some(pidfd),
            Reap::Unsupported => self.leave_to_reaper(),
        }
    }

    /// This kernel cannot wait on a pidfd (5.3): the reaper reaps the process and tells.
    fn leave_to_reaper(&mut self) {
        self.job.pidfd = None;
        if let Some(w) = lock(&self.job.state.reaped).waiters.get_mut(&self.job.pgid) {
            w.watched = false;
        }
    }

    /// The exit code as the reaper tells it, waited for only on a thread that need not
    /// watch anything else (`None` with `watch`: the run moves to a worker).
    fn by_reaper(&mut self, watch: Option<BorrowedFd<'_>>) -> Option<i32> {
        if watch.is_some() {
            None
        } else {
            Some(self.wait_reaper())
        }
    }

    /// The job's exit code (output closed; the deadline still holds until it exits).
    /// `None`: `watch` became readable first.
    fn wait_exit(&mut self, watch: Option<BorrowedFd<'_>>) -> Option<i32> {
        let Some(pidfd) = self.job.pidfd.take() else {
            return self.by_reaper(watch);
        };
        let code = loop {
            match self.reap(&pidfd) {
                Reap::Code(code) => break Some(code),
                Reap::NotYet => {}
                // A kernel with pidfds but no waitid on them (5.3): the reaper tells, on a
                // thread that need not watch anything else.
                Reap::Unsupported => {
                    self.leave_to_reaper();
                    return self.by_reaper(watch);
                }
            }
            self.check_deadline();
            let tick = self.tick();
            let mut fds = vec![PollFd::new(&pidfd, PollFlags::IN)];
            if let Some(w) = &watch {
                fds.push(PollFd::from_borrowed_fd(*w, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, Some(&tick)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                // No way to watch it any more: the reaper tells.
                Err(_) => {
                    self.leave_to_reaper();
                    return Some(self.wait_reaper());
                }
            }
            if fds.get(1).is_some_and(|f| !f.revents().is_empty()) {
                break None;
            }
        };
        if code.is_none() {
            self.job.pidfd = Some(pidfd);
        }
        code
    }

    /// Reaps the job's first process if it has exited. Through the pidfd, never the pid: a
    /// pid freed by the reaper may already name another job's process. The reaper leaves a
    /// watched process alone; should it have reaped this one anyway, it sent the code
    /// before it let go of the lock.
    fn reap(&self, pidfd: &OwnedFd) -> Reap {
        use rustix::process::{WaitId, WaitIdOptions};
        // Under the reaper's lock: no new process can be registered under this pid
        // between the reaping and the removal of our waiter.
        let mut reaped = lock(&self.job.state.reaped);
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
        match rustix::process::waitid(WaitId::PidFd(pidfd.as_fd()), options) {
            Ok(Some(status)) => {
                reaped.waiters.remove(&self.job.pgid);
                Reap::Code(code_of(status.exit_status(), status.terminating_signal()))
            }
            Ok(None) => Reap::NotYet,
            Err(rustix::io::Errno::CHILD) => {
                drop(reaped);
                Reap::Code(self.job.exit_rx.try_recv().unwrap_or(255))
            }
            Err(_) => Reap::Unsupported,
        }
    }

    /// Waits for the reaper's report, keeping the deadline.
    fn wait_reaper(&mut self) -> i32 {
        loop {
            if self.timed_out {
                return self.job.exit_rx.recv().unwrap_or(255);
            }
            match self.job.exit_rx.recv_timeout(self.left()) {
                Ok(code) => return code,
                Err(RecvTimeoutError::Timeout) => self.check_deadline(),
                Err(RecvTimeoutError::Disconnected) => return 255,
            }
        }
    }

    /// Reports the end: the group is killed first when the job was (e.g. `cmd &` whose
    /// output was closed), and its registrations are removed.
    fn end(self, status: i32) {
        let Job {
            state, sink, pgid, ..
        } = &self.job;
        if self.killed() {
            kill_group(*pgid, Signal::KILL);
            settle_group(*pgid);
        }
        lock(&state.groups).remove(pgid);
        lock(&MARKS).remove(pgid);
        if let Sink::Stream { job, jobs, .. } = sink {
            lock(jobs).remove(job);
        }
        let oom_killed = !self.killed()
            // Read the count again only for a SIGKILL: a warm exec reads it once.
            && status == 128 + 9
            && crate::oom::killed(status, self.job.oom_before, crate::oom::kills());
        sink.exit(ExitInfo {
            code: if self.timed_out { 124 } else { status },
            timed_out: self.timed_out,
            truncated: self.truncated,
            oom_killed,
        });
    }
}

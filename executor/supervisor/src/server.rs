//! The supervisor: serves framed connections on a unix socket, runs each job in its own
//! process group, streams its output, enforces its timeout and output limit at the source,
//! and reaps every child (it is PID 1 in a computer).
//!
//! Threads, not async: a job is a handful of blocking reads and one wait, and the binary
//! must stay small and static. A job's run reaps its own first process through a pidfd;
//! the reaper thread reaps everything else (orphans, whose parent was us or who were
//! reparented to us, and jobs where the kernel gave no pidfd), woken by `SIGCHLD` through a
//! signalfd, and never takes a process a run watches, so a run never waits for a hand-off.
//! A connection that ends (the server went away) kills the jobs it started. Frames from
//! the socket are untrusted: malformed ones end that connection, never the supervisor.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use rustix::process::{Pid, Signal};

use crate::frame::{CHUNK, ExitInfo, Frame, FrameError, JobControl, Kind, PONG_FILES, StartSpec};
use crate::jobs::{Jobs, Kept};
use crate::ring::Stream;
use crate::run::Run;

/// argv[0] marker: run bash if the image has it, else /bin/sh.
pub const AUTO_SHELL: &str = "@auto-shell";

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Who waits for a job's first process to end, by its pid.
pub(crate) struct Waiter {
    /// Where the reaper sends the exit code when it reaps the process.
    pub(crate) tx: Sender<i32>,
    /// Its run reaps it through a pidfd: the reaper leaves it alone.
    pub(crate) watched: bool,
}

/// Exit statuses, handed from the reaper to whoever waits for a pid. Spawning, reaping and
/// the registration of waiters all happen under its lock, so no pid is reaped between its
/// spawn and its registration.
#[derive(Default)]
pub(crate) struct Reaped {
    pub(crate) waiters: HashMap<i32, Waiter>,
}

/// Shared state of the supervisor.
#[derive(Default)]
pub(crate) struct State {
    /// Kept jobs: they outlive the connection that started them.
    pub(crate) kept: Jobs,
    pub(crate) reaped: Mutex<Reaped>,
    /// Process groups of every running job, for shutdown.
    pub(crate) groups: Mutex<HashMap<i32, ()>>,
}

/// Shell-style code of a process's end: its exit status, or 128+N for signal N.
pub(crate) fn code_of(exit_status: Option<i32>, signal: Option<i32>) -> i32 {
    match (exit_status, signal) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 255,
    }
}

/// The environment variable that marks every process of a job: a process that leaves the
/// job's process group (`setsid`, `setpgid`) still inherits it, so a kill finds it.
const TAG_VAR: &str = "MSC_JOB";

/// Each running job's tag, by its process group.
pub(crate) static TAGS: std::sync::LazyLock<Mutex<HashMap<i32, String>>> =
    std::sync::LazyLock::new(Mutex::default);
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// Processes (other than us) whose environment carries `MSC_JOB=<tag>`.
fn tagged(tag: &str) -> Vec<Pid> {
    let me = rustix::process::getpid();
    let needle = format!("{TAG_VAR}={tag}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(Pid::from_raw)
        .filter(|p| *p != me)
        .filter(|p| {
            std::fs::read(format!("/proc/{}/environ", p.as_raw_nonzero()))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

/// Signals a job's whole tree: its process group, and every process that left the group
/// but carries the job's tag.
pub(crate) fn kill_group(pgid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
    let tag = lock(&TAGS).get(&pgid).cloned();
    if let Some(tag) = tag {
        for pid in tagged(&tag) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Waits (at most a second) until a killed group has no live member, so a job's exit is
/// reported only once its tree is gone. Members killed outright die within milliseconds;
/// the cap keeps a member stuck in the kernel from holding the answer.
pub(crate) fn settle_group(pgid: i32) {
    let Some(pid) = Pid::from_raw(pgid) else {
        return;
    };
    let tag = lock(&TAGS).get(&pgid).cloned();
    for _ in 0..500 {
        let group_gone = rustix::process::test_kill_process_group(pid).is_err();
        if group_gone && tag.as_deref().is_none_or(|t| tagged(t).is_empty()) {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// How soon the reaper looks again past an ended process whose run has not reaped it yet.
const REAPER_RETRY: Duration = Duration::from_millis(5);
/// After a `SIGCHLD`, how long the reaper lets more ends gather before it looks, when
/// nobody waits for its report (orphans only): a burst of commands then wakes it once,
/// not once per command (each such wake-up cost a warm exec about 15 µs).
const REAPER_BATCH: Duration = Duration::from_millis(50);

/// Blocks `SIGCHLD` in the calling thread (and so in every thread it starts): the reaper
/// takes it from a signalfd, and no handler interrupts a job's thread. Spawned processes
/// start with an empty mask.
pub(crate) fn block_sigchld() {
    let _ = nix::sys::signal::SigSet::from(nix::sys::signal::Signal::SIGCHLD).thread_block();
}

fn reaper(state: Arc<State>) {
    use nix::sys::signal::{SigSet, Signal as NixSignal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let sigchld = SignalFd::with_flags(
        &SigSet::from(NixSignal::SIGCHLD),
        SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
    )
    .ok();
    loop {
        let blocked = reap_unwatched(&state);
        match &sigchld {
            Some(fd) => {
                // SIGCHLD is blocked in every thread, so none is lost: no tick is needed
                // unless an ended process is left to its run.
                let retry = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: i64::from(REAPER_RETRY.subsec_nanos()),
                };
                let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                let _ = rustix::event::poll(&mut fds, blocked.then_some(&retry));
                while let Ok(Some(_)) = fd.read_signal() {}
            }
            None => thread::sleep(REAPER_RETRY),
        }
        let someone_waits = lock(&state.reaped).waiters.values().any(|w| !w.watched);
        if !someone_waits {
            thread::sleep(REAPER_BATCH);
        }
    }
}

/// Reaps every ended child that no run watches, and hands its code to its waiter if it has
/// one. `true` when it stopped at an ended process whose run will reap it (the kernel shows
/// ended children oldest first, so the ones behind it wait for the next look).
fn reap_unwatched(state: &State) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    loop {
        let mut reaped = lock(&state.reaped);
        let peek = waitid(
            Id::All,
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        );
        let pid = match peek {
            Ok(WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, ..)) => pid,
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return false,
        };
        if reaped.waiters.get(&pid.as_raw()).is_some_and(|w| w.watched) {
            return true;
        }
        let code = match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
            Ok(WaitStatus::Exited(_, code)) => code,
            Ok(WaitStatus::Signaled(_, sig, _)) => 128 + sig as i32,
            _ => continue,
        };
        if let Some(w) = reaped.waiters.remove(&pid.as_raw()) {
            let _ = w.tx.send(code);
        }
    }
}

/// Where `program` would be run from, or why not (126/127 like a shell).
fn resolve(program: &str) -> Result<PathBuf, (i32, String)> {
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

/// One connection's writer, shared by the threads that answer on it.
pub(crate) type Writer = Arc<Mutex<UnixStream>>;

pub(crate) fn send(w: &Writer, frame: &Frame) {
    let _ = frame.write_to(&mut *lock(w));
}

/// Feeds a job's stdin: `Some(bytes)` to write, `None` (or dropping it) to close.
pub(crate) type StdinTx = Sender<Option<Vec<u8>>>;

/// The foreground jobs of one connection, by the connection's job number.
pub(crate) type ConnJobs = Arc<Mutex<HashMap<u32, JobCtl>>>;

/// A running job's controls: its process group and its stdin.
pub(crate) struct JobCtl {
    pub(crate) pgid: i32,
    pub(crate) stdin: Option<StdinTx>,
}

/// Where a job's output and exit go.
#[derive(Clone)]
pub(crate) enum Sink {
    /// Streamed as frames to the connection that started it (a foreground command), which
    /// holds its controls in `jobs` until it ends.
    Stream { w: Writer, job: u32, jobs: ConnJobs },
    /// Kept in the job's bounded buffer until read (a kept job).
    Kept(Arc<Kept>),
}

impl Sink {
    pub(crate) fn output(&self, kind: Kind, bytes: &[u8]) {
        match self {
            Sink::Stream { w, job, .. } => send(w, &Frame::new(kind, *job, bytes.to_vec())),
            Sink::Kept(k) => k.push(
                if kind == Kind::Stderr {
                    Stream::Stderr
                } else {
                    Stream::Stdout
                },
                bytes,
            ),
        }
    }

    pub(crate) fn exit(&self, info: ExitInfo) {
        match self {
            Sink::Stream { w, job, .. } => send(
                w,
                &Frame::new(
                    Kind::Exit,
                    *job,
                    serde_json::to_vec(&info).unwrap_or_default(),
                ),
            ),
            Sink::Kept(k) => k.end(info),
        }
    }
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
    let mut cmd = Command::new(path);
    cmd.arg0(program).args(&spec.argv[1..]).process_group(0);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    for kv in &spec.env {
        if let Some((k, v)) = kv.split_once('=') {
            cmd.env(k, v);
        }
    }
    // Unique among the supervisors that share a /proc (one per computer; several in tests).
    let tag = format!(
        "{}-{}",
        rustix::process::getpid().as_raw_nonzero(),
        NEXT_TAG.fetch_add(1, Ordering::Relaxed)
    );
    cmd.env(TAG_VAR, &tag);
    let oom_before = crate::oom::kills();
    cmd.stdin(if spec.stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let (exit_tx, exit_rx) = mpsc::channel();
    // Spawn, open its pidfd and register under the reaper's lock: the reaper cannot reap
    // it before the pidfd is open (so the pidfd names this process, never a later one with
    // the same pid), and it leaves a watched process to its run. Where the kernel or a
    // seccomp profile refuses pidfds, the reaper reaps it and tells.
    let (mut child, pidfd) = {
        let mut reaped = lock(&state.reaped);
        match cmd.spawn() {
            Ok(c) => {
                let pidfd = Pid::from_raw(c.id() as i32).and_then(|pid| {
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                });
                reaped.waiters.insert(
                    c.id() as i32,
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
    let pgid = child.id() as i32;
    lock(&TAGS).insert(pgid, tag);
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
    let pipes: Vec<(Kind, std::fs::File)> = [
        (
            Kind::Stdout,
            child.stdout.take().map(std::os::fd::OwnedFd::from),
        ),
        (
            Kind::Stderr,
            child.stderr.take().map(std::os::fd::OwnedFd::from),
        ),
    ]
    .into_iter()
    .filter_map(|(kind, pipe)| pipe.map(|p| (kind, std::fs::File::from(p))))
    .collect();
    let stdin_tx = child.stdin.take().map(|mut stdin| {
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
    drop(child);
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

/// Runs a foreground command on the connection's own thread while the connection is
/// quiet (a short command then ends with no hand-off between threads), and hands the rest
/// to a worker as soon as the connection has something to say (its stdin, a kill, another
/// command) or already had.
fn run_streamed(run: Run, reader: &io::BufReader<UnixStream>) {
    use std::os::fd::AsFd;
    let rest = if run.can_watch() && reader.buffer().is_empty() {
        run.run(Some(reader.get_ref().as_fd()))
    } else {
        Some(run)
    };
    if let Some(rest) = rest {
        crate::workers::spawn(move || {
            rest.run(None);
        });
    }
}

fn serve_connection(state: Arc<State>, stream: UnixStream) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let w: Writer = Arc::new(Mutex::new(write_half));
    let jobs: ConnJobs = Arc::default();
    // Dropped with the connection: uploads still open are aborted.
    let mut uploads = crate::files::Uploads::default();
    let mut reader = io::BufReader::new(stream);
    loop {
        let frame = match Frame::read_from(&mut reader) {
            Ok(f) => f,
            Err(FrameError::Closed) => break,
            Err(e) => {
                send(&w, &Frame::new(Kind::Error, 0, e.to_string().into_bytes()));
                break;
            }
        };
        match frame.kind {
            Kind::Start => {
                if lock(&jobs).contains_key(&frame.job) {
                    send(
                        &w,
                        &Frame::new(Kind::Error, frame.job, b"job id already in use".to_vec()),
                    );
                    continue;
                }
                match serde_json::from_slice::<StartSpec>(&frame.payload) {
                    Ok(spec) => {
                        let sink = Sink::Stream {
                            w: w.clone(),
                            job: frame.job,
                            jobs: jobs.clone(),
                        };
                        if let Some((_, run)) = launch(&state, spec, sink) {
                            run_streamed(run, &reader);
                        }
                    }
                    Err(e) => send(
                        &w,
                        &Frame::new(
                            Kind::Error,
                            frame.job,
                            format!("bad start: {e}").into_bytes(),
                        ),
                    ),
                }
            }
            Kind::Stdin => {
                if let Some(tx) = lock(&jobs).get(&frame.job).and_then(|j| j.stdin.as_ref()) {
                    let _ = tx.send(Some(frame.payload));
                }
            }
            Kind::StdinClose => {
                if let Some(j) = lock(&jobs).get_mut(&frame.job) {
                    j.stdin = None;
                }
            }
            Kind::Kill => {
                let sig = frame.payload.first().copied().unwrap_or(9);
                let signal = Signal::from_named_raw(i32::from(sig)).unwrap_or(Signal::KILL);
                if let Some(j) = lock(&jobs).get(&frame.job) {
                    kill_group(j.pgid, signal);
                }
            }
            Kind::Job => match serde_json::from_slice::<JobControl>(&frame.payload) {
                Ok(control) => crate::jobs::control(&state, &w, frame.job, control),
                Err(e) => send(
                    &w,
                    &Frame::new(
                        Kind::Error,
                        frame.job,
                        format!("bad job request: {e}").into_bytes(),
                    ),
                ),
            },
            Kind::JobStdin => crate::jobs::stdin(&state, &w, frame.job, &frame.payload),
            Kind::File => uploads.control(&w, frame.job, &frame.payload),
            Kind::FileData => uploads.data(frame.job, frame.payload),
            Kind::Ping => send(&w, &Frame::new(Kind::Pong, frame.job, PONG_FILES.to_vec())),
            // Supervisor-to-client kinds are not accepted from a client.
            _ => {
                send(
                    &w,
                    &Frame::new(Kind::Error, frame.job, b"unexpected frame kind".to_vec()),
                );
                break;
            }
        }
    }
    // The server went away: what it started goes too.
    let groups: Vec<i32> = lock(&jobs).values().map(|j| j.pgid).collect();
    for g in groups {
        kill_group(g, Signal::KILL);
    }
}

/// Binds the direct channel's socket in the host directory mounted at `path`'s parent,
/// owned by `owner` (the server's uid on the host) and 0600. The directory (0700, the
/// server's, one per computer) keeps every other computer out; [`from_outside`] keeps out
/// every process of this one, whatever its uid. `None` (said on stderr) when it cannot be
/// made, e.g. a user namespace that does not map the directory's owner: the server then
/// uses the relay.
fn bind_host_socket(path: &Path, owner: u32) -> Option<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let made = UnixListener::bind(path).and_then(|l| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        std::os::unix::fs::chown(path, Some(owner), None)?;
        Ok(l)
    });
    match made {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!(
                "msc-supervisor: no direct channel at {} ({e}); the server will relay",
                path.display()
            );
            None
        }
    }
}

/// The peer is outside this computer: the kernel reports its pid as 0 when the peer's
/// process is not in our pid namespace. A process in the computer (even root, even with the
/// server's uid number) has a pid here, and is hung up on.
fn from_outside(stream: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(stream, PeerCredentials).is_ok_and(|c| c.pid() == 0)
}

/// Serves every connection of `listener`, each on its own thread; `outside_only`: only
/// peers outside the computer ([`from_outside`]).
fn serve(state: &Arc<State>, listener: &UnixListener, outside_only: bool) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) if outside_only && !from_outside(&stream) => drop(stream),
            Ok(stream) => {
                let state = state.clone();
                thread::spawn(move || serve_connection(state, stream));
            }
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Runs the supervisor on `socket` (and, for the server's direct channel, on
/// `host_socket`, owned by the given uid) until SIGTERM/SIGINT/SIGHUP.
pub fn run(socket: &Path, host_socket: Option<(&Path, u32)>) -> io::Result<()> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)?;
    let host_listener = host_socket.and_then(|(path, owner)| bind_host_socket(path, owner));
    // PID 1 reaps every orphan anyway; anywhere else (tests, a nested init), become the
    // subreaper so a job's orphaned children are still ours to reap.
    if rustix::process::getpid().as_raw_nonzero().get() != 1 {
        let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    }
    // Before any thread is started, so that every thread blocks it.
    block_sigchld();
    let state = Arc::new(State::default());
    {
        let state = state.clone();
        thread::spawn(move || reaper(state));
    }
    {
        let state = state.clone();
        let socket = socket.to_owned();
        let host_socket = host_listener
            .as_ref()
            .and(host_socket)
            .map(|(path, _)| path.to_owned());
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGHUP,
        ])?;
        thread::spawn(move || {
            if signals.forever().next().is_some() {
                // Quickly, and only the groups: as PID 1 our exit ends every process of
                // the computer anyway, and a slow goodbye would let a connection take one
                // more answer from a supervisor about to vanish.
                let groups: Vec<i32> = lock(&state.groups).keys().copied().collect();
                for g in groups {
                    if let Some(pid) = Pid::from_raw(g) {
                        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                    }
                }
                let _ = std::fs::remove_file(&socket);
                if let Some(host_socket) = &host_socket {
                    let _ = std::fs::remove_file(host_socket);
                }
                std::process::exit(0);
            }
        });
    }
    if let Some(host_listener) = host_listener {
        let state = state.clone();
        thread::spawn(move || serve(&state, &host_listener, true));
    }
    serve(&state, &listener, false);
    Ok(())
}

/// The benchmark's floor for an exec: `n` spawns of `true` (fork, exec, wait) from this
/// process, inside the computer; prints their median in microseconds.
pub fn spawn_floor(n: usize) -> io::Result<()> {
    let program = resolve("true").map_err(|(_, why)| io::Error::other(why))?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = std::time::Instant::now();
        Command::new(&program).status()?;
        times.push(started.elapsed().as_micros());
    }
    times.sort_unstable();
    println!("{}", times[n / 2]);
    Ok(())
}

/// Pipes stdin/stdout to the supervisor's socket (what the server execs once per computer).
pub fn relay(socket: &Path) -> io::Result<()> {
    let stream = UnixStream::connect(socket)?;
    let mut to_socket = stream.try_clone()?;
    let mut from_socket = stream;
    let up = thread::spawn(move || {
        let _ = io::copy(&mut io::stdin().lock(), &mut to_socket);
        let _ = to_socket.shutdown(std::net::Shutdown::Write);
    });
    // Not `io::copy`: stdout is line-buffered, and frames are not lines.
    let mut out = io::stdout().lock();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from_socket.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                    break;
                }
            }
        }
    }
    drop(up);
    Ok(())
}

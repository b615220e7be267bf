//! The supervisor's process primitives, below every other module: the lock that shrugs
//! off poisoning, a job's exit code, the marks that find a job's whole tree (its audit
//! session, else its tag) and the kills that use them, `SIGCHLD` blocking, and a
//! connection's writer. No job, no run, no state.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use rustix::process::{Pid, Signal};

use crate::frame::Frame;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
/// job's process group (`setsid`, `setpgid`) still inherits it, so a kill finds it where
/// the job has no audit session of its own ([`Mark::session`]).
pub(crate) const TAG_VAR: &str = "MSC_JOB";

/// What `/proc/<pid>/sessionid` reads for a process that never set its login uid.
const NO_SESSION: u32 = u32::MAX;

/// How a job's processes are found beyond its process group.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    /// The audit session the job's first process opened between fork and exec
    /// ([`open_session`]). Every descendant inherits it, and no process can leave it: a new
    /// one needs `CAP_AUDIT_CONTROL`, which computers do not have. `None` where the kernel
    /// has no audit (`CONFIG_AUDIT`), or where the computer's processes already carry a login
    /// uid (an engine started from a login session, e.g. rootless Podman): only `tag` then.
    pub(crate) session: Option<u32>,
    /// `MSC_JOB=<tag>` in the environment: survives `setsid`, not `env -i`.
    pub(crate) tag: String,
}

/// Each running job's mark, by its process group.
pub(crate) static MARKS: std::sync::LazyLock<Mutex<HashMap<i32, Mark>>> =
    std::sync::LazyLock::new(Mutex::default);
pub(crate) static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// Runs in a job's first process between clone and exec ([`crate::spawn`]): sets its login
/// uid, which opens a new audit session that its whole tree inherits for good. Only raw
/// system calls (no allocation, no lock): the child still shares our memory. A refusal (a
/// login uid set already, no audit in the kernel) leaves the job to its tag.
pub(crate) fn open_session() -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    if let Ok(fd) = rustix::fs::open(
        c"/proc/self/loginuid",
        OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = rustix::io::write(&fd, b"0");
    }
    Ok(())
}

/// The audit session of `pid`, as `/proc` shows it.
fn session_of(pid: &str) -> Option<u32> {
    let raw = std::fs::read_to_string(format!("/proc/{pid}/sessionid")).ok()?;
    raw.trim().parse().ok()
}

/// The session a job started as `pid` opened: `None` when it has none of its own (it
/// shares ours, or no one has one).
pub(crate) fn job_session(pid: i32) -> Option<u32> {
    static OURS: std::sync::LazyLock<Option<u32>> = std::sync::LazyLock::new(|| session_of("self"));
    session_of(&pid.to_string()).filter(|s| *s != NO_SESSION && Some(*s) != *OURS)
}

/// Live processes (other than us; zombies are gone already) that carry `mark`.
fn members(mark: &Mark) -> Vec<Pid> {
    let me = rustix::process::getpid();
    let needle = format!("{TAG_VAR}={}", mark.tag);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter(|name| match mark.session {
            Some(s) => session_of(name) == Some(s),
            None => std::fs::read(format!("/proc/{name}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())),
        })
        .filter(|name| !zombie(name))
        .filter_map(|name| Pid::from_raw(name.parse().ok()?))
        .filter(|p| *p != me)
        .collect()
}

/// Whether `/proc/<pid>/stat` shows a zombie (or the process is gone).
fn zombie(pid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the command's closing parenthesis (the command may hold any byte).
    stat.rsplit_once(')')
        .is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
}

/// Rounds of a tree kill: a member that forked while the previous round killed it leaves
/// a child, which the next round finds.
const KILL_ROUNDS: usize = 3;

/// Signals a job's whole tree: its process group, and every process that carries its mark
/// (its audit session, or else its tag). A `SIGKILL` looks again for what forked meanwhile.
pub(crate) fn kill_group(pgid: i32, signal: Signal) {
    // The mark first: once the group's leader dies, its run may drop the mark at any time.
    let mark = lock(&MARKS).get(&pgid).cloned();
    if let Some(pid) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
    let Some(mark) = mark else {
        return;
    };
    let rounds = if signal == Signal::KILL {
        KILL_ROUNDS
    } else {
        1
    };
    for _ in 0..rounds {
        let found = members(&mark);
        if found.is_empty() {
            return;
        }
        for pid in found {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Waits (at most a second) until a killed job has no live member, killing again what is
/// left, so a job's exit is reported only once its tree is gone. Members killed outright
/// die within milliseconds; the cap keeps a member stuck in the kernel from holding the
/// answer.
pub(crate) fn settle_group(pgid: i32) {
    let Some(pid) = Pid::from_raw(pgid) else {
        return;
    };
    let mark = lock(&MARKS).get(&pgid).cloned();
    for _ in 0..500 {
        let group_gone = rustix::process::test_kill_process_group(pid).is_err();
        let left = mark.as_ref().map(members).unwrap_or_default();
        if group_gone && left.is_empty() {
            return;
        }
        for p in left {
            let _ = rustix::process::kill_process(p, Signal::KILL);
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Blocks `SIGCHLD` in the calling thread (and so in every thread it starts): the reaper
/// takes it from a signalfd, and no handler interrupts a job's thread. Spawned processes
/// start with an empty mask.
pub(crate) fn block_sigchld() {
    let _ = nix::sys::signal::SigSet::from(nix::sys::signal::Signal::SIGCHLD).thread_block();
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

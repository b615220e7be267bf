//! The supervisor's process primitives, below every other module: the lock that shrugs
//! off poisoning, a job's exit code, the tags that find a job's whole tree and the kills
//! that use them, `SIGCHLD` blocking, and a connection's writer. No job, no run, no state.

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
/// job's process group (`setsid`, `setpgid`) still inherits it, so a kill finds it.
pub(crate) const TAG_VAR: &str = "MSC_JOB";

/// Each running job's tag, by its process group.
pub(crate) static TAGS: std::sync::LazyLock<Mutex<HashMap<i32, String>>> =
    std::sync::LazyLock::new(Mutex::default);
pub(crate) static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

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

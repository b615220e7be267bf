//! The supervisor's shared state (kept jobs, who waits for which pid, the running
//! groups) and the reaper thread: it reaps every ended child that no run watches (orphans,
//! and jobs where the kernel gave no pidfd), woken by `SIGCHLD` through a signalfd, and
//! never takes a process a run watches.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::kept::Jobs;
use crate::proc::lock;

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

/// How soon the reaper looks again past an ended process whose run has not reaped it yet.
const REAPER_RETRY: Duration = Duration::from_millis(5);
/// After a `SIGCHLD`, how long the reaper lets more ends gather before it looks, when
/// nobody waits for its report (orphans only): a burst of commands then wakes it once,
/// not once per command (each such wake-up cost a warm exec about 15 µs).
const REAPER_BATCH: Duration = Duration::from_millis(50);

pub(crate) fn reaper(state: Arc<State>) {
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

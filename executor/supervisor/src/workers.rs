//! Reused threads for the short tasks of every command (its output readers, its stdin
//! writer, its timeout, its end): a thread that finished a task waits a while for the next
//! instead of exiting, so a warm exec spawns no thread (a new one costs a stack, a guard
//! page and a signal stack: about a fifth of a warm `true`). Tasks never wait for each
//! other in the pool: a task with no idle thread gets a new one, as before.

use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::Duration;

type Task = Box<dyn FnOnce() + Send + 'static>;

/// Idle threads kept at most; past it a thread that finishes exits.
const MAX_IDLE: usize = 32;
/// An idle thread exits after this long without a task.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// The idle threads, each waiting on its own channel.
static IDLE: Mutex<Vec<Sender<Task>>> = Mutex::new(Vec::new());

fn idle() -> std::sync::MutexGuard<'static, Vec<Sender<Task>>> {
    IDLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on an idle thread, or on a new one.
pub fn spawn(f: impl FnOnce() + Send + 'static) {
    let mut task: Task = Box::new(f);
    loop {
        let Some(tx) = idle().pop() else { break };
        match tx.send(task) {
            Ok(()) => return,
            // That thread timed out meanwhile: the task comes back, try the next.
            Err(mpsc::SendError(t)) => task = t,
        }
    }
    thread::spawn(move || work(task));
}

fn work(first: Task) {
    let mut task = first;
    loop {
        task();
        let (tx, rx): (Sender<Task>, Receiver<Task>) = mpsc::channel();
        {
            let mut idle = idle();
            if idle.len() >= MAX_IDLE {
                return;
            }
            idle.push(tx);
        }
        match rx.recv_timeout(IDLE_FOR) {
            Ok(next) => task = next,
            // Our sender stays in the list until a spawn finds it closed.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_on_reused_threads_and_never_wait_for_each_other() {
        let (tx, rx) = mpsc::channel();
        for _ in 0..3 {
            let tx = tx.clone();
            spawn(move || {
                let _ = tx.send(thread::current().id());
            });
            let _ = rx.recv_timeout(Duration::from_secs(5));
            thread::sleep(Duration::from_millis(20));
        }
        // A blocked task does not hold up the next one.
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        spawn(move || {
            let _ = hold_rx.recv();
        });
        let (done_tx, done_rx) = mpsc::channel();
        spawn(move || {
            let _ = done_tx.send(thread::current().id());
        });
        assert!(done_rx.recv_timeout(Duration::from_secs(5)).is_ok());
        drop(hold_tx);
        // Sequential tasks reuse one thread.
        let mut ids = Vec::new();
        for _ in 0..3 {
            let tx = tx.clone();
            spawn(move || {
                let _ = tx.send(thread::current().id());
            });
            ids.push(rx.recv_timeout(Duration::from_secs(5)).unwrap());
            thread::sleep(Duration::from_millis(20));
        }
        assert!(ids.windows(2).any(|w| w[0] == w[1]), "{ids:?}");
    }
}

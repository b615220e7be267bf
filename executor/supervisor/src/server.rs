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

use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rustix::process::{Pid, Signal};

use crate::frame::{CHUNK, Frame, FrameError, JobControl, Kind, PONG_FILES, StartSpec};
use crate::proc::{ConnJobs, Writer, block_sigchld, kill_group, lock, send};
use crate::run::{Run, launch, resolve};
use crate::sink::Sink;
use crate::state::{State, reaper};

pub use crate::run::AUTO_SHELL;

mod door;

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

/// Runs the supervisor on `socket` (and, for the server's direct channel, on every
/// listener the server hands over through `host_door`, [`door`]) until SIGTERM/SIGINT/SIGHUP.
pub fn run(socket: &Path, host_door: Option<&Path>) -> io::Result<()> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)?;
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
                std::process::exit(0);
            }
        });
    }
    if let Some(host_door) = host_door {
        let state = state.clone();
        let host_door = host_door.to_owned();
        thread::spawn(move || {
            door::watch(&host_door, |listener| {
                let state = state.clone();
                thread::spawn(move || serve(&state, &listener, true));
            });
        });
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

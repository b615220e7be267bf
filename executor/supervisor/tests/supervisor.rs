//! The supervisor binary, run natively (not as PID 1), driven over its socket.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{connect, start};

use supervisor::frame::{
    ExitInfo, Frame, JobControl, JobStatus, Kind, PONG_FILES, StartSpec, job_stdin_payload,
};

fn spec(argv: &[&str], timeout_ms: u64, output_limit: u64) -> StartSpec {
    StartSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: None,
        env: vec![],
        stdin: false,
        timeout_ms,
        output_limit,
        quiet: false,
    }
}

struct Outcome {
    pid: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: ExitInfo,
}

fn send_start(s: &mut UnixStream, job: u32, spec: &StartSpec) {
    Frame::new(Kind::Start, job, serde_json::to_vec(spec).unwrap())
        .write_to(s)
        .unwrap();
}

fn collect(s: &mut UnixStream, job: u32) -> Outcome {
    let (mut pid, mut stdout, mut stderr) = (None, Vec::new(), Vec::new());
    loop {
        let f = Frame::read_from(s).unwrap();
        assert_eq!(f.job, job);
        match f.kind {
            Kind::Started => pid = String::from_utf8(f.payload).unwrap().parse().ok(),
            Kind::Stdout => stdout.extend(f.payload),
            Kind::Stderr => stderr.extend(f.payload),
            Kind::Exit => {
                return Outcome {
                    pid,
                    stdout,
                    stderr,
                    exit: serde_json::from_slice(&f.payload).unwrap(),
                };
            }
            other => panic!(
                "unexpected {other:?}: {:?}",
                String::from_utf8_lossy(&f.payload)
            ),
        }
    }
}

fn run(s: &mut UnixStream, job: u32, spec: &StartSpec) -> Outcome {
    send_start(s, job, spec);
    collect(s, job)
}

/// Every process's (state, parent pid, process group), from `/proc/*/stat`.
fn processes() -> Vec<(String, i32, i32)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            // Fields after the name: state ppid pgrp …
            let rest = stat.rsplit_once(')')?.1;
            let mut f = rest.split_whitespace();
            let state = f.next()?.to_owned();
            let ppid = f.next()?.parse().ok()?;
            let pgrp = f.next()?.parse().ok()?;
            Some((state, ppid, pgrp))
        })
        .collect()
}

/// Live processes whose process group is `pgid`.
fn group_members(pgid: i32) -> usize {
    processes()
        .into_iter()
        .filter(|(state, _, pgrp)| *pgrp == pgid && state != "Z")
        .count()
}

#[test]
fn issue_3_runs_commands_with_shell_exit_codes() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let o = run(
        &mut s,
        1,
        &spec(
            &["sh", "-c", "echo hi; echo err >&2; exit 3"],
            10_000,
            1 << 20,
        ),
    );
    assert_eq!(
        (o.stdout.as_slice(), o.stderr.as_slice(), o.exit.code),
        (&b"hi\n"[..], &b"err\n"[..], 3)
    );
    assert!(o.pid.is_some());
    assert_eq!(
        run(&mut s, 2, &spec(&["no-such-program"], 1000, 100))
            .exit
            .code,
        127
    );
    assert_eq!(
        run(&mut s, 3, &spec(&["sh", "-c", "kill -TERM $$"], 1000, 100))
            .exit
            .code,
        143
    );
    let mut in_dir = spec(&["pwd"], 1000, 100);
    in_dir.cwd = Some("/nope".into());
    let o = run(&mut s, 4, &in_dir);
    assert_eq!(o.exit.code, 126);
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nope"));
    in_dir.cwd = Some("/tmp".into());
    assert_eq!(run(&mut s, 5, &in_dir).stdout, b"/tmp\n");
    let o = run(
        &mut s,
        6,
        &spec(&["@auto-shell", "-c", "echo $0"], 1000, 100),
    );
    let shell = String::from_utf8_lossy(&o.stdout);
    assert!(shell == "/bin/bash\n" || shell == "/bin/sh\n", "{shell}");
}

#[test]
fn issue_3_timeout_kills_the_whole_group_and_keeps_output() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let started = Instant::now();
    let o = run(
        &mut s,
        1,
        &spec(
            &["sh", "-c", "echo before; sleep 1000 & sleep 1000"],
            300,
            1 << 20,
        ),
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        o.exit,
        ExitInfo {
            code: 124,
            timed_out: true,
            truncated: false,
            oom_killed: false,
        }
    );
    assert_eq!(o.stdout, b"before\n");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        group_members(o.pid.unwrap()),
        0,
        "children survived the timeout"
    );
}

#[test]
fn issue_3_output_limit_is_enforced_at_the_source() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let o = run(&mut s, 1, &spec(&["sh", "-c", "yes"], 20_000, 100_000));
    assert!(o.exit.truncated);
    assert_eq!(o.stdout.len() + o.stderr.len(), 100_000);
    // The exit is reported once the killed group is gone.
    assert_eq!(
        group_members(o.pid.unwrap()),
        0,
        "the group outlived its exit"
    );
}

#[test]
fn issue_3_stdin_and_kill_frames() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let mut wc = spec(&["wc", "-c"], 10_000, 1000);
    wc.stdin = true;
    send_start(&mut s, 1, &wc);
    Frame::new(Kind::Stdin, 1, b"abc".to_vec())
        .write_to(&mut s)
        .unwrap();
    Frame::new(Kind::StdinClose, 1, Vec::new())
        .write_to(&mut s)
        .unwrap();
    assert_eq!(
        String::from_utf8(collect(&mut s, 1).stdout).unwrap().trim(),
        "3"
    );
    // A job that never reads a large stdin is not an error.
    let mut t = spec(&["true"], 10_000, 1000);
    t.stdin = true;
    send_start(&mut s, 2, &t);
    for _ in 0..40 {
        Frame::new(Kind::Stdin, 2, vec![b'x'; 64 * 1024])
            .write_to(&mut s)
            .unwrap();
    }
    Frame::new(Kind::StdinClose, 2, Vec::new())
        .write_to(&mut s)
        .unwrap();
    assert_eq!(collect(&mut s, 2).exit.code, 0);
    // Kill by frame.
    send_start(&mut s, 3, &spec(&["sleep", "1000"], 60_000, 1000));
    let first = Frame::read_from(&mut s).unwrap();
    assert_eq!(first.kind, Kind::Started);
    Frame::new(Kind::Kill, 3, vec![9]).write_to(&mut s).unwrap();
    let o = collect(&mut s, 3);
    assert_eq!(o.exit.code, 137);
    // Ping.
    Frame::new(Kind::Ping, 9, b"p".to_vec())
        .write_to(&mut s)
        .unwrap();
    let pong = Frame::read_from(&mut s).unwrap();
    assert_eq!(
        (pong.kind, pong.payload.as_slice()),
        (Kind::Pong, PONG_FILES)
    );
}

#[test]
fn issue_3_concurrent_jobs_and_a_vanished_client() {
    let sup = start();
    let mut s = connect(&sup.socket);
    for job in 1..=4 {
        send_start(
            &mut s,
            job,
            &spec(&["sh", "-c", "sleep 0.3; echo done"], 10_000, 1000),
        );
    }
    let started = Instant::now();
    let mut done = 0;
    while done < 4 {
        let f = Frame::read_from(&mut s).unwrap();
        if f.kind == Kind::Exit {
            done += 1;
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "jobs ran one after another"
    );
    // A client that goes away takes its jobs with it.
    let mut gone = connect(&sup.socket);
    send_start(
        &mut gone,
        1,
        &spec(&["sh", "-c", "sleep 1000 & sleep 1000"], 60_000, 1000),
    );
    let f = Frame::read_from(&mut gone).unwrap();
    let pgid: i32 = String::from_utf8(f.payload).unwrap().parse().unwrap();
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(5);
    while group_members(pgid) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(group_members(pgid), 0);
}

#[test]
fn issue_3_hostile_frames_end_only_that_connection() {
    let sup = start();
    let mut bad = connect(&sup.socket);
    bad.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).unwrap();
    let f = Frame::read_from(&mut bad).unwrap();
    assert_eq!(f.kind, Kind::Error);
    let mut bad2 = connect(&sup.socket);
    Frame::new(Kind::Start, 1, b"{not json".to_vec())
        .write_to(&mut bad2)
        .unwrap();
    assert_eq!(Frame::read_from(&mut bad2).unwrap().kind, Kind::Error);
    Frame::new(Kind::Exit, 1, Vec::new())
        .write_to(&mut bad2)
        .unwrap();
    assert_eq!(Frame::read_from(&mut bad2).unwrap().kind, Kind::Error);
    // The supervisor still serves others.
    let mut s = connect(&sup.socket);
    assert_eq!(
        run(&mut s, 1, &spec(&["echo", "still here"], 1000, 1000)).stdout,
        b"still here\n"
    );
}

/// Zombie processes whose parent is `pid`.
fn zombie_children(pid: u32) -> usize {
    processes()
        .into_iter()
        .filter(|(state, ppid, _)| state == "Z" && u32::try_from(*ppid) == Ok(pid))
        .count()
}

/// A foreground command runs on its connection's thread until the connection speaks; its
/// end is reaped there. What must still hold: every exit code, in any order of races with
/// the reaper; a command that closed its output but still runs keeps its deadline; and the
/// connection stays served while such a command waits to end.
#[test]
fn issue_18_a_command_run_inline_keeps_codes_deadlines_and_the_connection() {
    let sup = start();
    let mut s = connect(&sup.socket);
    for i in 0..200u32 {
        let code = i % 7;
        let o = run(
            &mut s,
            i + 1,
            &spec(&["sh", "-c", &format!("exit {code}")], 10_000, 100),
        );
        assert_eq!(o.exit.code, code as i32, "run {i}");
    }
    assert_eq!(
        run(
            &mut s,
            300,
            &spec(&["sh", "-c", "kill -KILL $$"], 1000, 100)
        )
        .exit
        .code,
        137
    );
    // A quiet start sends no `Started` frame: the output and the exit only.
    let mut quiet = spec(&["echo", "hi"], 10_000, 100);
    quiet.quiet = true;
    let o = run(&mut s, 301, &quiet);
    assert_eq!(
        (o.pid, o.stdout.as_slice(), o.exit.code),
        (None, &b"hi\n"[..], 0)
    );
    // Every one was reaped, by its run or by the reaper.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(zombie_children(sup.child.id()), 0, "zombies left behind");

    // Output closed, still running: the deadline ends it.
    let started = Instant::now();
    let o = run(
        &mut s,
        400,
        &spec(&["sh", "-c", "exec >/dev/null 2>&1; sleep 30"], 300, 100),
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!((o.exit.code, o.exit.timed_out), (124, true));

    // While one waits (output closed) for its end, the connection starts and answers
    // another, which ends first.
    send_start(
        &mut s,
        500,
        &spec(&["sh", "-c", "exec >/dev/null 2>&1; sleep 1"], 10_000, 100),
    );
    std::thread::sleep(Duration::from_millis(200));
    send_start(&mut s, 501, &spec(&["echo", "second"], 10_000, 100));
    let mut order = Vec::new();
    while order.len() < 2 {
        let f = Frame::read_from(&mut s).unwrap();
        if f.kind == Kind::Exit {
            order.push(f.job);
        }
    }
    assert_eq!(order, [501, 500]);
}

/// A run reaps its own process through a pidfd, as soon as it ends, even while its output
/// is still held open; the reaper takes the rest (orphans) when `SIGCHLD` comes, and never
/// a process a run watches. No zombie is left waiting in either case.
#[test]
fn issue_18_ends_are_reaped_at_once_by_their_run_or_the_reaper() {
    let sup = start();
    let mut s = connect(&sup.socket);
    // The shell ends at once; the `sleep` it leaves holds the output for a second.
    let started = Instant::now();
    send_start(
        &mut s,
        600,
        &spec(&["sh", "-c", "sleep 1 & exit 5"], 10_000, 100),
    );
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        zombie_children(sup.child.id()),
        0,
        "the ended shell waits as a zombie for its output to close"
    );
    let o = collect(&mut s, 600);
    assert_eq!(o.exit.code, 5);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the output was not awaited"
    );
    // An orphan (its parent ended; it is ours now) is reaped by the reaper when it ends.
    let o = run(
        &mut s,
        601,
        &spec(
            &["sh", "-c", "(sleep 0.7 >/dev/null 2>&1 &); exit 0"],
            10_000,
            100,
        ),
    );
    assert_eq!(o.exit.code, 0);
    assert!(
        running(&["sleep", "0.7"]) >= 1,
        "the orphan was not running: this test proves nothing"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(running(&["sleep", "0.7"]), 0);
    assert_eq!(
        zombie_children(sup.child.id()),
        0,
        "an orphan was left a zombie"
    );
    // Codes still come back right, interleaved with orphans ending.
    for i in 0..50u32 {
        let code = i % 5;
        let o = run(
            &mut s,
            700 + i,
            &spec(
                &["sh", "-c", &format!("(sleep 0.01 &); exit {code}")],
                10_000,
                100,
            ),
        );
        assert_eq!(o.exit.code, code as i32, "run {i}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(zombie_children(sup.child.id()), 0, "zombies left behind");
}

#[test]
fn issue_3_sigterm_stops_everything() {
    let mut sup = start();
    let mut s = connect(&sup.socket);
    send_start(&mut s, 1, &spec(&["sleep", "1000"], 60_000, 1000));
    let f = Frame::read_from(&mut s).unwrap();
    let pgid: i32 = String::from_utf8(f.payload).unwrap().parse().unwrap();
    let t = Instant::now();
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(sup.child.id().to_string())
        .status();
    let status = sup.child.wait().unwrap();
    assert!(status.success());
    assert!(t.elapsed() < Duration::from_millis(500));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(group_members(pgid), 0);
}

// Kept jobs (issue 14): they outlive their connection, and their output waits in a
// bounded buffer until read.

/// Sends a job request and returns (stdout, stderr, the `Done` payload or the error text).
fn job(
    s: &mut UnixStream,
    req: u32,
    control: &JobControl,
) -> (Vec<u8>, Vec<u8>, Result<Vec<u8>, String>) {
    Frame::new(Kind::Job, req, serde_json::to_vec(control).unwrap())
        .write_to(s)
        .unwrap();
    answer(s, req)
}

fn answer(s: &mut UnixStream, req: u32) -> (Vec<u8>, Vec<u8>, Result<Vec<u8>, String>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        let f = Frame::read_from(s).unwrap();
        assert_eq!(f.job, req, "answers come back under their request's number");
        match f.kind {
            Kind::Stdout => out.extend(f.payload),
            Kind::Stderr => err.extend(f.payload),
            Kind::Done => return (out, err, Ok(f.payload)),
            Kind::Error => return (out, err, Err(String::from_utf8_lossy(&f.payload).into())),
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn keep(
    s: &mut UnixStream,
    req: u32,
    id: &str,
    argv: &[&str],
    timeout_ms: u64,
    buffer: u64,
) -> Result<JobStatus, String> {
    let mut sp = spec(argv, timeout_ms, 0);
    sp.stdin = true;
    let control = JobControl::Start {
        job_id: id.into(),
        command: argv.join(" "),
        spec: sp,
        buffer_bytes: buffer,
    };
    job(s, req, &control)
        .2
        .map(|b| serde_json::from_slice(&b).unwrap())
}

fn read(
    s: &mut UnixStream,
    req: u32,
    id: &str,
    wait_ms: u64,
    until_exit: bool,
) -> (Vec<u8>, Vec<u8>, JobStatus) {
    let control = JobControl::Read {
        job_id: id.into(),
        wait_ms,
        until_exit,
        max_bytes: 1 << 20,
    };
    let (o, e, done) = job(s, req, &control);
    (o, e, serde_json::from_slice(&done.unwrap()).unwrap())
}

fn write_stdin(s: &mut UnixStream, req: u32, id: &str, bytes: &[u8]) -> Result<Vec<u8>, String> {
    Frame::new(Kind::JobStdin, req, job_stdin_payload(id, bytes))
        .write_to(s)
        .unwrap();
    answer(s, req).2
}

#[test]
fn issue_14_a_kept_job_outlives_its_connection() {
    let sup = start();
    let mut first = connect(&sup.socket);
    let st = keep(
        &mut first,
        1,
        "job-a",
        &["sh", "-c", "echo one; sleep 0.5; echo two; exit 3"],
        30_000,
        1 << 20,
    )
    .unwrap();
    assert!(st.running);
    let (o, _, st) = read(&mut first, 2, "job-a", 5_000, false);
    assert_eq!(o, b"one\n");
    assert!(st.running && st.exit.is_none());
    drop(first);
    // A new connection (a new server process) finds it and reads what is left.
    let mut second = connect(&sup.socket);
    let (o, _, st) = read(&mut second, 1, "job-a", 5_000, true);
    assert_eq!(o, b"two\n");
    assert!(!st.running);
    assert_eq!(st.exit.unwrap().code, 3);
    // Read to the end, it is forgotten.
    let (_, _, e) = job(
        &mut second,
        2,
        &JobControl::Read {
            job_id: "job-a".into(),
            wait_ms: 0,
            until_exit: false,
            max_bytes: 10,
        },
    );
    assert!(e.unwrap_err().contains("no job job-a"));
}

#[test]
fn issue_14_stdin_drives_a_repl_and_close_ends_it() {
    let sup = start();
    let mut s = connect(&sup.socket);
    keep(
        &mut s,
        1,
        "repl",
        &[
            "sh",
            "-c",
            "while read l; do echo \"got $l\"; done; echo bye",
        ],
        30_000,
        1 << 20,
    )
    .unwrap();
    write_stdin(&mut s, 2, "repl", b"a\n").unwrap();
    let (o, _, _) = read(&mut s, 3, "repl", 5_000, false);
    assert_eq!(o, b"got a\n");
    write_stdin(&mut s, 4, "repl", b"b\n").unwrap();
    let (o, _, _) = read(&mut s, 5, "repl", 5_000, false);
    assert_eq!(o, b"got b\n");
    job(
        &mut s,
        6,
        &JobControl::CloseStdin {
            job_id: "repl".into(),
        },
    )
    .2
    .unwrap();
    let (o, _, st) = read(&mut s, 7, "repl", 5_000, true);
    assert_eq!(o, b"bye\n");
    assert_eq!(st.exit.unwrap().code, 0);
    assert!(
        write_stdin(&mut s, 8, "repl", b"late")
            .unwrap_err()
            .contains("no job")
    );
}

fn peek(s: &mut UnixStream, req: u32, id: &str) -> (Vec<u8>, Vec<u8>, JobStatus) {
    let control = JobControl::Peek {
        job_id: id.into(),
        max_bytes: 1 << 20,
    };
    let (o, e, done) = job(s, req, &control);
    (o, e, serde_json::from_slice(&done.unwrap()).unwrap())
}

#[test]
fn issue_14_a_peek_shows_the_newest_output_and_takes_nothing() {
    let sup = start();
    let mut s = connect(&sup.socket);
    keep(
        &mut s,
        1,
        "tail",
        &[
            "sh",
            "-c",
            "echo one; echo err >&2; read x; echo \"after $x\"",
        ],
        30_000,
        1 << 20,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (o, e, st) = loop {
        let got = peek(&mut s, 2, "tail");
        if !got.1.is_empty() || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!((o.as_slice(), e.as_slice()), (&b"one\n"[..], &b"err\n"[..]));
    assert!(st.running && st.exit.is_none());
    assert_eq!(st.unread_bytes, 8, "a peek takes nothing");
    // The read still gets all of it; a later peek still shows it (read or not).
    let (o, e, _) = read(&mut s, 3, "tail", 5_000, false);
    assert_eq!((o.as_slice(), e.as_slice()), (&b"one\n"[..], &b"err\n"[..]));
    let (o, _, st) = peek(&mut s, 4, "tail");
    assert_eq!((o.as_slice(), st.unread_bytes), (&b"one\n"[..], 0));
    // Once the program ended, a peek says how, and the job waits for its last read.
    write_stdin(&mut s, 5, "tail", b"x\n").unwrap();
    let st = loop {
        let (_, _, st) = peek(&mut s, 6, "tail");
        if !st.running || Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(st.exit.map(|x| x.code), Some(0));
    let (o, _, st) = read(&mut s, 7, "tail", 5_000, false);
    assert_eq!(o, b"after x\n");
    assert!(!st.running);
    let (_, _, e) = job(
        &mut s,
        8,
        &JobControl::Peek {
            job_id: "tail".into(),
            max_bytes: 10,
        },
    );
    assert!(e.unwrap_err().contains("no job tail"));
}

#[test]
fn issue_14_signals_end_the_whole_group() {
    let sup = start();
    let mut s = connect(&sup.socket);
    keep(
        &mut s,
        1,
        "tree",
        &["sh", "-c", "sleep 1000 & sleep 1000 & echo $$; wait"],
        60_000,
        1 << 20,
    )
    .unwrap();
    let (o, _, _) = read(&mut s, 2, "tree", 5_000, false);
    let pgid: i32 = String::from_utf8(o).unwrap().trim().parse().unwrap();
    assert_eq!(group_members(pgid), 3);
    job(
        &mut s,
        3,
        &JobControl::Signal {
            job_id: "tree".into(),
            signal: 15,
        },
    )
    .2
    .unwrap();
    let (_, _, st) = read(&mut s, 4, "tree", 5_000, true);
    assert_eq!(st.exit.unwrap().code, 128 + 15);
    let deadline = Instant::now() + Duration::from_secs(2);
    while group_members(pgid) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(group_members(pgid), 0, "a child survived TERM");
    let e = job(
        &mut s,
        5,
        &JobControl::Signal {
            job_id: "tree".into(),
            signal: 99,
        },
    )
    .2;
    assert!(e.unwrap_err().contains("no job"));
    keep(&mut s, 6, "k", &["sleep", "100"], 60_000, 100).unwrap();
    assert!(
        job(
            &mut s,
            7,
            &JobControl::Signal {
                job_id: "k".into(),
                signal: 999
            }
        )
        .2
        .unwrap_err()
        .contains("not a signal")
    );
    job(
        &mut s,
        8,
        &JobControl::Signal {
            job_id: "k".into(),
            signal: 9,
        },
    )
    .2
    .unwrap();
    assert_eq!(read(&mut s, 9, "k", 5_000, true).2.exit.unwrap().code, 137);
}

#[test]
fn issue_14_the_buffer_drops_the_oldest_and_says_how_much() {
    let sup = start();
    let mut s = connect(&sup.socket);
    keep(
        &mut s,
        1,
        "loud",
        &[
            "sh",
            "-c",
            "head -c 100000 /dev/zero | tr '\\0' x; echo END",
        ],
        30_000,
        1000,
    )
    .unwrap();
    let (o, _, st) = read(&mut s, 2, "loud", 5_000, true);
    assert_eq!(st.exit.unwrap().code, 0);
    assert_eq!(o.len(), 1000, "the buffer's size is what is left");
    assert!(o.ends_with(b"xxxEND\n"), "the newest bytes are kept");
    assert_eq!(st.dropped_bytes, 100_004 - 1000);
}

#[test]
fn issue_14_at_most_64_jobs_and_lists_show_them() {
    let sup = start();
    let mut s = connect(&sup.socket);
    for i in 0..64 {
        keep(
            &mut s,
            i + 1,
            &format!("j{i}"),
            &["sleep", "100"],
            60_000,
            100,
        )
        .unwrap();
    }
    let e = keep(&mut s, 100, "j64", &["sleep", "100"], 60_000, 100).unwrap_err();
    assert!(e.contains("64 jobs"), "{e}");
    assert!(
        keep(&mut s, 101, "j0", &["true"], 1000, 100)
            .unwrap_err()
            .contains("in use")
    );
    let (_, _, list) = job(&mut s, 102, &JobControl::List {});
    let list: Vec<JobStatus> = serde_json::from_slice(&list.unwrap()).unwrap();
    assert_eq!(list.len(), 64);
    assert_eq!(list[0].job_id, "j0");
    assert!(list.iter().all(|j| j.running && j.command == "sleep 100"));
    // Ending one and reading it to the end makes room.
    job(
        &mut s,
        103,
        &JobControl::Signal {
            job_id: "j5".into(),
            signal: 9,
        },
    )
    .2
    .unwrap();
    read(&mut s, 104, "j5", 5_000, true);
    keep(&mut s, 105, "j64", &["true"], 1000, 100).unwrap();
    assert_eq!(
        read(&mut s, 107, "j64", 5_000, true).2.exit.unwrap().code,
        0
    );
    // A missing program is an ended job with the shell's answer, not a failed request.
    let st = keep(&mut s, 106, "nope", &["/no/such/program"], 1000, 100)
        .expect("a start that cannot run still makes a job");
    let (_, e, st2) = read(&mut s, 200, &st.job_id, 1000, true);
    assert_eq!(st2.exit.unwrap().code, 127);
    assert!(String::from_utf8_lossy(&e).contains("No such file"));
}

#[test]
fn issue_14_hostile_job_requests_are_refused() {
    let sup = start();
    let mut s = connect(&sup.socket);
    for bad in [
        &b"{}"[..],
        b"{\"op\":\"read\"}",
        b"{\"op\":\"list\",\"x\":1}",
        b"\xff",
    ] {
        Frame::new(Kind::Job, 1, bad.to_vec())
            .write_to(&mut s)
            .unwrap();
        assert!(answer(&mut s, 1).2.is_err());
    }
    for bad in [&b""[..], &[200u8, b'a'][..], &[1u8, 0xff][..]] {
        Frame::new(Kind::JobStdin, 2, bad.to_vec())
            .write_to(&mut s)
            .unwrap();
        assert!(answer(&mut s, 2).2.is_err());
    }
    assert!(keep(&mut s, 3, "", &["true"], 1000, 100).is_err());
    assert!(keep(&mut s, 4, &"x".repeat(200), &["true"], 1000, 100).is_err());
    // The connection still works.
    assert_eq!(
        run(&mut s, 5, &spec(&["echo", "ok"], 1000, 1000)).stdout,
        b"ok\n"
    );
}

/// Processes whose command line is exactly `argv`.
fn running(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want)
                && std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                    s.rsplit_once(')')
                        .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
                })
        })
        .count()
}

fn gone_within(argv: &[&str], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while running(argv) > 0 {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn issue_19_setsid_does_not_escape_the_timeout() {
    let sup = start();
    let mut s = connect(&sup.socket);
    // Left its process group, output closed: killed all the same.
    let started = Instant::now();
    let o = run(
        &mut s,
        1,
        &spec(
            &[
                "sh",
                "-c",
                "setsid sleep 1901.5 >/dev/null 2>&1 & sleep 1000",
            ],
            1000,
            1000,
        ),
    );
    assert_eq!((o.exit.code, o.exit.timed_out), (124, true));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        gone_within(&["sleep", "1901.5"], Duration::from_secs(2)),
        "the setsid child survived"
    );
    // Left its group and kept stdout open: the answer comes on time, output kept.
    let started = Instant::now();
    let o = run(
        &mut s,
        2,
        &spec(
            &["sh", "-c", "echo before; setsid sleep 1902.5 & sleep 1000"],
            1000,
            1000,
        ),
    );
    assert_eq!((o.exit.code, o.stdout.as_slice()), (124, &b"before\n"[..]));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        gone_within(&["sleep", "1902.5"], Duration::from_secs(2)),
        "the setsid child survived"
    );
}

#[test]
fn issue_19_a_kept_jobs_signal_reaches_what_left_its_group() {
    let sup = start();
    let mut s = connect(&sup.socket);
    keep(
        &mut s,
        1,
        "esc",
        &["sh", "-c", "setsid sleep 1903.5 & echo up; wait"],
        60_000,
        1 << 20,
    )
    .unwrap();
    let (o, _, _) = read(&mut s, 2, "esc", 5_000, false);
    assert_eq!(o, b"up\n");
    // `echo up` may run before the background child has become `sleep`.
    let deadline = Instant::now() + Duration::from_secs(2);
    while running(&["sleep", "1903.5"]) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(running(&["sleep", "1903.5"]), 1);
    job(
        &mut s,
        3,
        &JobControl::Signal {
            job_id: "esc".into(),
            signal: 15,
        },
    )
    .2
    .unwrap();
    let (_, _, st) = read(&mut s, 4, "esc", 5_000, true);
    assert!(st.exit.is_some());
    assert!(
        gone_within(&["sleep", "1903.5"], Duration::from_secs(2)),
        "TERM missed the setsid child"
    );
}

/// Waits until `sleep <secs>` runs (a shell may start it a little after its `&`).
fn started(secs: &str) {
    started_argv(&["sleep", secs]);
}

/// Where the test runs without a login uid (a service, a container), every job opens its
/// own audit session, and that is what the kills follow.
fn without_a_login_uid() {
    let uid = std::fs::read_to_string("/proc/self/loginuid").unwrap();
    assert_eq!(
        uid.trim(),
        "4294967295",
        "these tests need a process without a login uid (run them from a service or a \
         container, not a login shell): the job's audit session is what they check"
    );
}

#[test]
fn issue_46_a_tree_that_sheds_its_tag_dies_at_the_timeout_and_on_cancel() {
    without_a_login_uid();
    let sup = start();
    let mut s = connect(&sup.socket);
    for (i, command) in supervisor::escapes::escapes("4601.5").iter().enumerate() {
        let o = run(
            &mut s,
            i as u32 + 1,
            &spec(&["sh", "-c", command], 1500, 1000),
        );
        assert_eq!((o.exit.code, o.exit.timed_out), (124, true), "{command}");
        assert!(
            gone_within(&["sleep", "4601.5"], Duration::from_secs(2)),
            "the timeout missed what {command} left"
        );
    }
    // A cancelled call (a kill frame) ends the whole tree too.
    for (i, command) in supervisor::escapes::escapes("4602.5").iter().enumerate() {
        let job = i as u32 + 10;
        send_start(&mut s, job, &spec(&["sh", "-c", command], 60_000, 1000));
        started("4602.5");
        Frame::new(Kind::Kill, job, vec![9])
            .write_to(&mut s)
            .unwrap();
        assert_eq!(collect(&mut s, job).exit.code, 137, "{command}");
        assert!(
            gone_within(&["sleep", "4602.5"], Duration::from_secs(2)),
            "the kill frame missed what {command} left"
        );
    }
}

#[test]
fn issue_46_a_kept_jobs_kill_ends_what_shed_its_tag_and_spares_its_neighbour() {
    without_a_login_uid();
    let sup = start();
    let mut s = connect(&sup.socket);
    for (i, command) in supervisor::escapes::escapes("4603.5").iter().enumerate() {
        let req = 10 * i as u32;
        // A neighbour on the same computer, escaped the same way, started first.
        let neighbour = command.replace("4603.5", "4604.5");
        keep(
            &mut s,
            req + 1,
            "b",
            &["sh", "-c", &neighbour],
            60_000,
            1 << 20,
        )
        .unwrap();
        started("4604.5");
        keep(
            &mut s,
            req + 2,
            "a",
            &["sh", "-c", command],
            60_000,
            1 << 20,
        )
        .unwrap();
        started("4603.5");
        let kill = |s: &mut UnixStream, req, id: &str| {
            let control = JobControl::Signal {
                job_id: id.into(),
                signal: 9,
            };
            job(s, req, &control).2.unwrap();
            let (_, _, st) = read(s, req + 1, id, 5_000, true);
            assert!(st.exit.is_some(), "{command}");
        };
        kill(&mut s, req + 3, "a");
        assert!(
            gone_within(&["sleep", "4603.5"], Duration::from_secs(2)),
            "KILL missed what {command} left"
        );
        assert_eq!(
            running(&["sleep", "4604.5"]),
            1,
            "killing one job reached its neighbour's tree ({command})"
        );
        kill(&mut s, req + 5, "b");
        assert!(gone_within(&["sleep", "4604.5"], Duration::from_secs(2)));
    }
}

/// CPU time (user + system, clock ticks) `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    // After the name: state(3) … utime(14) stime(15).
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The pid of the process whose command line is `argv`.
fn pid_of(argv: &[&str]) -> u32 {
    let want = argv.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .unwrap()
}

#[test]
fn issue_46_output_nobody_reads_blocks_the_job_instead_of_burning_a_cpu() {
    let sup = start();
    let mut s = connect(&sup.socket);
    keep(&mut s, 1, "loud", &["yes", "4650"], 60_000, 1 << 20).unwrap();
    started_argv(&["yes", "4650"]);
    let yes = pid_of(&["yes", "4650"]);
    // Let the 1 MiB buffer fill, then watch both sides for two seconds.
    std::thread::sleep(Duration::from_millis(500));
    let (sup0, yes0) = (cpu_ticks(sup.child.id()), cpu_ticks(yes));
    std::thread::sleep(Duration::from_secs(2));
    let (sup1, yes1) = (cpu_ticks(sup.child.id()), cpu_ticks(yes));
    // 200 ticks are two seconds of one CPU; reading flat out costs both sides most of it.
    assert!(
        sup1 - sup0 < 30 && yes1 - yes0 < 30,
        "an unread `yes` still costs CPU: supervisor {} ticks, yes {} ticks in 2 s",
        sup1 - sup0,
        yes1 - yes0
    );
    // What a reader gets is still the newest output, and it says what it missed.
    let (o, _, st) = read(&mut s, 2, "loud", 1_000, false);
    assert!(st.dropped_bytes > 0, "{st:?}");
    assert!(o.len() <= 1 << 20 && o.ends_with(b"4650\n"), "{}", o.len());
    job(
        &mut s,
        3,
        &JobControl::Signal {
            job_id: "loud".into(),
            signal: 9,
        },
    )
    .2
    .unwrap();
    let (_, _, st) = read(&mut s, 4, "loud", 5_000, true);
    assert_eq!(st.exit.map(|e| e.code), Some(137));
}

fn started_argv(argv: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while running(argv) == 0 {
        assert!(Instant::now() < deadline, "{argv:?} never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

//! The supervisor binary, run natively (not as PID 1), driven over its socket.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use supervisor::frame::{ExitInfo, Frame, Kind, StartSpec};

struct Sup {
    child: Child,
    socket: PathBuf,
}

impl Drop for Sup {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Sup {
    let dir = std::env::temp_dir().join(format!(
        "msc-sup-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("sup.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_msc-supervisor"))
        .args(["init", "--socket"])
        .arg(&socket)
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if UnixStream::connect(&socket).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Sup { child, socket }
}

fn connect(socket: &Path) -> UnixStream {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn spec(argv: &[&str], timeout_ms: u64, output_limit: u64) -> StartSpec {
    StartSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: None,
        env: vec![],
        stdin: false,
        timeout_ms,
        output_limit,
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

/// Processes whose process group is `pgid`.
fn group_members(pgid: i32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            // Fields after the name: state ppid pgrp …
            rest.split_whitespace()
                .nth(2)
                .and_then(|g| g.parse::<i32>().ok())
                == Some(pgid)
                && rest.split_whitespace().next() != Some("Z")
        })
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
            truncated: false
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
    assert_eq!(Frame::read_from(&mut s).unwrap().kind, Kind::Pong);
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

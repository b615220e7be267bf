//! Jobs (SPEC §3.8) through a computer's exec, for the providers whose computers have no
//! supervisor of ours (Fly, E2B, Modal): the executor's backends and the gateway's direct
//! placements use these calls over their own exec ([`Shell`]).
//!
//! A POSIX `sh` script on the computer ([`RUNNER`], `runner.sh`) keeps each job in a
//! directory of `/tmp/.msc-jobs`:
//! - the program runs in a session of its own, whose leader outlives the signals sent to
//!   the group and records the exit status; `terminal_job`'s signals go to the group;
//! - its stdin is a FIFO held open until `close_stdin`; writes go in the background and
//!   in order, so a program that does not read never blocks a call;
//! - its stdout and stderr are plain files the program writes itself (output shows at
//!   once), read by offset; a reader that falls more than [`BUFFER_BYTES`] behind loses
//!   the oldest bytes (counted in `dropped_bytes`), and a watchdog frees all but the newest
//!   40 MiB of each file once a second (`fallocate -p`, where util-linux has it);
//! - the watchdog also ends the whole group at the timeout (124, `timed_out`);
//! - the status is kept until the read that takes the last output, or 10 minutes;
//!   at most [`MAX_JOBS`] per computer; [`end_all`] ends them all (a restart).
//!
//! A job survives the server, and the session that started it, for as long as the
//! computer runs. Each call is one exec: a poll waits inside the computer (every 5 ms at
//! first, then every 50 ms) for at most [`POLL_SLICE_MS`], so a provider's exec timeout
//! never cuts it; longer waits take several polls.
//!
//! Limits of this path: a process that leaves the group with `setsid` is not signalled
//! (on Docker the supervisor's cgroup reaches it); a signal sent within a few
//! milliseconds of the start may find the program not yet exec'd; on images whose `env`
//! lacks `--default-signal` (BusyBox, coreutils before 8.31), a job started from a
//! background shell (Fly's exec runner is one) keeps SIGINT ignored, and one started
//! under `nohup` SIGHUP. Where `env` has it, the program gets every signal with its
//! default action, whatever the exec that started the runner ignored.

use base64::Engine;

use super::{BUFFER_BYTES, JobInfo, JobOutput, MAX_JOBS, PEEK_BYTES, peek_tidy};
use crate::files::over_exec::Shell;

/// The script (see the module docs).
pub const RUNNER: &str = include_str!("runner.sh");

/// The longest one poll waits inside the computer.
pub const POLL_SLICE_MS: u64 = 20_000;
/// Most output bytes one poll takes (about 1.4 MB of base64 in the exec's stdout).
pub const READ_MAX: usize = 1 << 20;

/// Why a job call through exec failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobsOverExec<E> {
    /// The exec itself failed (the computer is gone, the provider refused).
    #[error(transparent)]
    Shell(E),
    /// The computer has no such job (never started here, or ended and read).
    #[error("{0}")]
    NoSuchJob(String),
    /// Refused, nothing changed: too many jobs, or stdin already closed.
    #[error("{0}")]
    Refused(String),
    /// The computer's shell did not answer as the runner does (no `sh`, a full disk…).
    #[error("{0}")]
    Failed(String),
    /// The runner's answer could not be read.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
}

/// The job runner's answer is not in its format; the part that was not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the job runner's answer is unreadable ({0})")]
pub struct Unreadable(&'static str);

/// A job to start.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    pub job_id: &'a str,
    /// The command line, as lists show it.
    pub command: &'a str,
    /// What to run (argv; the providers' `program_argv`, which enters the working
    /// directory and adds the call's environment).
    pub program: &'a [String],
    /// Its whole life.
    pub timeout_ms: u64,
}

/// One `terminal_job` read: write, close, signal (in that order), then wait and read.
#[derive(Debug, Clone, Default)]
pub struct Poll {
    pub stdin: Option<Vec<u8>>,
    pub close_stdin: bool,
    pub signal: Option<i32>,
    pub wait_ms: u64,
    /// Wait for the exit (a `yield_ms` start), not just for news.
    pub until_exit: bool,
    /// Most output bytes to take.
    pub max_bytes: usize,
    /// Only look (after `signal`): the newest output of each stream, taking nothing, at
    /// once (`stdin`, `close_stdin` and the waits are not used).
    pub peek: bool,
}

fn runner(mode: &str, args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        RUNNER.to_owned(),
        "msc-job".to_owned(),
        mode.to_owned(),
    ];
    argv.extend(args);
    argv
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The runner's answer: its stdout, or the refusal it reported.
async fn call<S: Shell>(
    sh: &S,
    job_id: &str,
    argv: Vec<String>,
    stdin: Option<String>,
) -> Result<String, JobsOverExec<S::Error>> {
    let out = sh.run(argv, stdin).await.map_err(JobsOverExec::Shell)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let has = |marker: &str| stderr.contains(marker);
    if out.exit_code == 0 {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(if has("msc:no_job") {
        JobsOverExec::NoSuchJob(format!(
            "no job {job_id} on this computer (it never existed, ended and was read, or the computer was reset)"
        ))
    } else if has("msc:too_many") {
        JobsOverExec::Refused(format!(
            "this computer already keeps {MAX_JOBS} jobs: read the ended ones to the end (terminal_job), or end running ones with `signal`, then start again"
        ))
    } else if has("msc:stdin_closed") {
        JobsOverExec::Refused(format!(
            "the stdin of job {job_id} is already closed: nothing was written"
        ))
    } else {
        JobsOverExec::Failed(format!(
            "the computer's shell could not run the job runner (exit {}): {}",
            out.exit_code,
            crate::history::cut(stderr.trim(), 300)
        ))
    })
}

/// Starts `job` (stdin open until closed).
pub async fn start<S: Shell>(sh: &S, job: &Start<'_>) -> Result<(), JobsOverExec<S::Error>> {
    let timeout_s = job.timeout_ms.div_ceil(1000).max(1);
    let mut args = vec![
        job.job_id.to_owned(),
        timeout_s.to_string(),
        b64().encode(job.command),
    ];
    args.extend(job.program.iter().cloned());
    let out = call(sh, job.job_id, runner("start", args), None).await?;
    if out.trim_end() != "started" {
        return Err(JobsOverExec::Failed(format!(
            "the job runner did not say the job started: {}",
            crate::history::cut(out.trim(), 200)
        )));
    }
    Ok(())
}

/// One poll's answer, as the runner printed it.
#[derive(Debug, PartialEq, Eq)]
struct Read {
    running: bool,
    code: i64,
    timed_out_after: Option<u64>,
    dropped: u64,
    duration_ms: u64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Parses `msc-job STATE CODE TIMEOUT DROPPED DURATION N_OUT N_ERR`, the stdout bytes as
/// base64 lines, a `.` line, the stderr bytes.
fn parse_read(text: &str) -> Result<Read, Unreadable> {
    let bad = Unreadable;
    let (head, rest) = text.split_once('\n').ok_or_else(|| bad("no status line"))?;
    let f: Vec<&str> = head.split(' ').collect();
    let [tag, state, code, tmo, dropped, dur, n_out, n_err] = f[..] else {
        return Err(bad("status line"));
    };
    if tag != "msc-job" {
        return Err(bad("status line"));
    }
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad("a count"));
    let (out, err) = match rest.split_once("\n.\n") {
        Some(parts) => parts,
        // Empty stdout: the "." line comes first.
        None => match rest.strip_prefix(".\n") {
            Some(err) => ("", err),
            None => (rest.strip_suffix("\n.").unwrap_or(rest), ""),
        },
    };
    let decode = |s: &str| -> Result<Vec<u8>, Unreadable> {
        let joined: String = s.split_ascii_whitespace().collect();
        b64().decode(joined).map_err(|_| bad("base64"))
    };
    let (stdout, stderr) = (decode(out)?, decode(err)?);
    if stdout.len() as u64 != num(n_out)? || stderr.len() as u64 != num(n_err)? {
        return Err(bad("lengths"));
    }
    Ok(Read {
        running: match state {
            "running" => true,
            "ended" => false,
            _ => return Err(bad("state")),
        },
        code: code.parse().map_err(|_| bad("exit code"))?,
        timed_out_after: (tmo != "-").then(|| num(tmo)).transpose()?,
        dropped: num(dropped)?,
        duration_ms: num(dur)?,
        stdout,
        stderr,
    })
}

/// Signals (if asked), then shows the newest output of job `job_id`, taking nothing.
async fn peek<S: Shell>(
    sh: &S,
    job_id: &str,
    signal: Option<i32>,
) -> Result<JobOutput, JobsOverExec<S::Error>> {
    let args = vec![
        job_id.to_owned(),
        signal.unwrap_or(0).to_string(),
        PEEK_BYTES.to_string(),
    ];
    let text = call(sh, job_id, runner("peek", args), None).await?;
    let read = parse_read(&text)?;
    let tidy = |b: &[u8]| peek_tidy(b, b.len() == PEEK_BYTES, read.running).to_vec();
    Ok(JobOutput {
        job_id: job_id.to_owned(),
        stdout: tidy(&read.stdout),
        stderr: tidy(&read.stderr),
        running: read.running,
        exit_code: (!read.running).then_some(read.code),
        duration_ms: read.duration_ms,
        timed_out_after: read.timed_out_after,
        peek: true,
        ..JobOutput::default()
    })
}

/// Writes, closes, signals, then waits and reads job `job_id` as `poll` says. A wait past
/// [`POLL_SLICE_MS`] takes several execs; their output is joined. A peek only signals and
/// looks.
pub async fn poll<S: Shell>(
    sh: &S,
    job_id: &str,
    poll: &Poll,
) -> Result<JobOutput, JobsOverExec<S::Error>> {
    if poll.peek {
        return peek(sh, job_id, poll.signal).await;
    }
    let mut out = JobOutput {
        job_id: job_id.to_owned(),
        running: true,
        ..JobOutput::default()
    };
    let mut left = poll.wait_ms;
    let mut first = true;
    loop {
        let wait = left.min(POLL_SLICE_MS);
        left -= wait;
        let taken = out.stdout.len() + out.stderr.len();
        let max = poll.max_bytes.min(READ_MAX).saturating_sub(taken);
        let (stdin, signal, close) = if first {
            (poll.stdin.as_ref(), poll.signal, poll.close_stdin)
        } else {
            (None, None, false)
        };
        let args = vec![
            job_id.to_owned(),
            wait.to_string(),
            u8::from(poll.until_exit).to_string(),
            max.to_string(),
            signal.unwrap_or(0).to_string(),
            u8::from(close).to_string(),
            u8::from(stdin.is_some()).to_string(),
        ];
        let text = call(
            sh,
            job_id,
            runner("poll", args),
            stdin.map(|b| b64().encode(b)),
        )
        .await?;
        let read = parse_read(&text)?;
        first = false;
        let news = !read.stdout.is_empty() || !read.stderr.is_empty();
        out.stdout.extend_from_slice(&read.stdout);
        out.stderr.extend_from_slice(&read.stderr);
        out.dropped_bytes += read.dropped;
        out.duration_ms = read.duration_ms;
        if !read.running {
            out.running = false;
            out.exit_code = Some(read.code);
            out.timed_out_after = read.timed_out_after;
            return Ok(out);
        }
        let full = out.stdout.len() + out.stderr.len() >= poll.max_bytes.min(READ_MAX);
        if left == 0 || full || (news && !poll.until_exit) {
            return Ok(out);
        }
    }
}

/// The jobs the computer keeps, oldest first (`started_at` by the computer's clock).
pub async fn list<S: Shell>(sh: &S) -> Result<Vec<JobInfo>, JobsOverExec<S::Error>> {
    let text = call(sh, "", runner("list", []), None).await?;
    let mut jobs: Vec<(u64, JobInfo)> = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let bad = || JobsOverExec::Failed(format!("the job runner's list is unreadable: {line:?}"));
        let f: Vec<&str> = line.split(' ').collect();
        let [id, t0, state, code, cmd] = f[..] else {
            return Err(bad());
        };
        let t0: u64 = t0.parse().map_err(|_| bad())?;
        let running = state == "running";
        let command = b64().decode(cmd).map_err(|_| bad())?;
        let exit = if running {
            None
        } else {
            Some(code.parse().map_err(|_| bad())?)
        };
        let command = String::from_utf8_lossy(&command).into_owned();
        jobs.push((t0, JobInfo::new(id.to_owned(), command, running, t0, exit)));
    }
    jobs.sort_by_key(|(t0, _)| *t0);
    Ok(jobs.into_iter().map(|(_, j)| j).collect())
}

/// Ends every job on the computer with its process group and forgets them all (before a
/// restart; best effort is the caller's call).
pub async fn end_all<S: Shell>(sh: &S) -> Result<(), JobsOverExec<S::Error>> {
    call(sh, "", runner("end", []), None).await.map(|_| ())
}

/// The ring a reader may fall behind by, as the runner keeps it.
const _: () = assert!(BUFFER_BYTES == 8 << 20);

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(b: &[u8]) -> String {
        b64().encode(b)
    }

    /// The runner on this machine's `sh` (native only: wasm32 has no processes).
    #[cfg(not(target_arch = "wasm32"))]
    mod host {
        use super::*;

        /// This machine's `sh`, as a computer's shell would run the runner.
        struct HostSh;

        impl Shell for HostSh {
            type Error = String;
            async fn run(
                &self,
                argv: Vec<String>,
                stdin: Option<String>,
            ) -> Result<crate::result::ExecOutcome, String> {
                use std::io::Write;
                use std::process::{Command, Stdio};
                let mut child = Command::new(&argv[0])
                    .args(&argv[1..])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| e.to_string())?;
                {
                    // Closed at the end of this block: EOF for the runner.
                    let mut input = child.stdin.take().ok_or("no stdin")?;
                    input
                        .write_all(stdin.unwrap_or_default().as_bytes())
                        .map_err(|e| e.to_string())?;
                }
                let out = child.wait_with_output().map_err(|e| e.to_string())?;
                Ok(crate::result::ExecOutcome {
                    stdout: out.stdout,
                    stderr: out.stderr,
                    exit_code: i64::from(out.status.code().unwrap_or(-1)),
                    ..Default::default()
                })
            }
        }

        /// This machine's `sh`, started the way `nohup` or a background shell starts a
        /// program: SIGHUP, SIGINT and SIGQUIT ignored on entry, which no `trap` undoes.
        struct HostShIgnoring;

        impl Shell for HostShIgnoring {
            type Error = String;
            async fn run(
                &self,
                argv: Vec<String>,
                stdin: Option<String>,
            ) -> Result<crate::result::ExecOutcome, String> {
                let mut wrapped = vec![
                    "/bin/sh".to_owned(),
                    "-c".to_owned(),
                    "trap '' 1 2 3; exec \"$@\"".to_owned(),
                    "sh".to_owned(),
                ];
                wrapped.extend(argv);
                HostSh.run(wrapped, stdin).await
            }
        }

        fn block<F: std::future::Future>(f: F) -> F::Output {
            futures_executor::block_on(f)
        }

        fn new_id() -> String {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or_default();
            format!(
                "job-test{}x{nanos}x{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            )
        }

        fn start_sh(script: &str, timeout_ms: u64) -> String {
            start_sh_on(&HostSh, script, timeout_ms)
        }

        fn start_sh_on<S: Shell>(shell: &S, script: &str, timeout_ms: u64) -> String
        where
            S::Error: std::fmt::Debug,
        {
            let id = new_id();
            let program = ["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
            let job = Start {
                job_id: &id,
                command: script,
                program: &program,
                timeout_ms,
            };
            block(start(shell, &job)).unwrap();
            id
        }

        fn read(id: &str, p: Poll) -> JobOutput {
            block(poll(&HostSh, id, &p)).unwrap()
        }

        fn wait_end(id: &str) -> JobOutput {
            let p = Poll {
                wait_ms: 10_000,
                until_exit: true,
                max_bytes: READ_MAX,
                ..Poll::default()
            };
            read(id, p)
        }

        #[test]
        fn a_job_on_this_machines_sh_answers_stdin_twice_and_ends_with_its_status() {
            let id = start_sh(
                "echo ready; while read l; do echo \"got $l\"; done; echo bye >&2; exit 3",
                30_000,
            );
            let news = Poll {
                wait_ms: 5_000,
                max_bytes: READ_MAX,
                ..Poll::default()
            };
            let first = read(&id, news.clone());
            assert_eq!(
                (first.stdout.as_slice(), first.running),
                (&b"ready\n"[..], true)
            );
            let one = read(
                &id,
                Poll {
                    stdin: Some(b"one\n".to_vec()),
                    ..news.clone()
                },
            );
            assert_eq!(one.stdout, b"got one\n");
            let two = read(
                &id,
                Poll {
                    stdin: Some(b"two\n".to_vec()),
                    close_stdin: true,
                    ..news.clone()
                },
            );
            let end = if two.running {
                wait_end(&id)
            } else {
                two.clone()
            };
            let (mut out, mut err) = (two.stdout.clone(), two.stderr.clone());
            if two.running {
                out.extend_from_slice(&end.stdout);
                err.extend_from_slice(&end.stderr);
            }
            assert_eq!(out, b"got two\n");
            assert_eq!(err, b"bye\n");
            assert_eq!((end.running, end.exit_code), (false, Some(3)));
            // Read to its end: it is gone.
            let gone = block(poll(&HostSh, &id, &news));
            assert!(matches!(gone, Err(JobsOverExec::NoSuchJob(_))), "{gone:?}");
            let closed = block(poll(
                &HostSh,
                &id,
                &Poll {
                    stdin: Some(b"x".to_vec()),
                    ..news
                },
            ));
            assert!(closed.is_err());
        }

        #[test]
        fn signals_end_it_with_the_shells_status_and_the_timeout_with_124() {
            // A signal 200 ms after the start, then the end: (running, exit status).
            let signalled = |id: &str, signal| {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let p = Poll {
                    signal: Some(signal),
                    max_bytes: READ_MAX,
                    ..Poll::default()
                };
                let sent = read(id, p);
                let end = if sent.running { wait_end(id) } else { sent };
                (end.running, end.exit_code)
            };
            for (signal, code) in [(15, 143), (9, 137), (1, 129), (2, 130), (3, 131)] {
                let id = start_sh("sleep 30 & sleep 30", 60_000);
                assert_eq!(
                    signalled(&id, signal),
                    (false, Some(code)),
                    "signal {signal}"
                );
            }
            // Started by an exec that ignores HUP, INT and QUIT (nohup, a background
            // shell): the program still gets them with their default action.
            for (signal, code) in [(1, 129), (2, 130), (3, 131)] {
                let id = start_sh_on(&HostShIgnoring, "sleep 30", 60_000);
                assert_eq!(
                    signalled(&id, signal),
                    (false, Some(code)),
                    "signal {signal}, ignored on entry"
                );
            }
            let id = start_sh("sleep 30", 1_000);
            let end = wait_end(&id);
            assert_eq!(end.exit_code, Some(124));
            assert_eq!(end.timed_out_after, Some(1));
        }

        #[test]
        fn a_reader_far_behind_loses_the_oldest_bytes_and_is_told_how_many() {
            let id = start_sh(
                "head -c 10000000 /dev/zero | tr '\\0' a; echo; echo end",
                60_000,
            );
            let mut all = Vec::new();
            let mut dropped = 0;
            std::thread::sleep(std::time::Duration::from_millis(1500));
            loop {
                let out = wait_end(&id);
                all.extend_from_slice(&out.stdout);
                dropped += out.dropped_bytes;
                if !out.running {
                    assert_eq!(out.exit_code, Some(0));
                    break;
                }
            }
            let total = 10_000_000 + 5;
            assert_eq!(dropped + all.len() as u64, total);
            assert_eq!(all.len() as u64, BUFFER_BYTES);
            assert!(all.ends_with(b"aaa\nend\n"));
        }

        #[test]
        fn a_peek_shows_the_newest_output_takes_nothing_and_may_signal() {
            let id = start_sh(
                "seq 1 20000; echo err >&2; read x; echo \"after $x\"; exit 5",
                30_000,
            );
            let look = |signal| {
                let p = Poll {
                    peek: true,
                    signal,
                    max_bytes: READ_MAX,
                    ..Poll::default()
                };
                read(&id, p)
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let mut seen = look(None);
            while seen.stderr.is_empty() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
                seen = look(None);
            }
            // One peek reads stdout, then stderr: the one that first showed `err` may have
            // read stdout while `seq` still wrote. `seq` had ended by then, so look again.
            seen = look(None);
            assert!(seen.peek && seen.running);
            assert!(seen.stdout.ends_with(b"19999\n20000\n"), "the newest bytes");
            assert!(seen.stdout.len() <= PEEK_BYTES);
            assert_eq!(seen.stderr, b"err\n");
            // It took nothing: a read gets all of it, from the start.
            let all = read(
                &id,
                Poll {
                    wait_ms: 5_000,
                    max_bytes: READ_MAX,
                    ..Poll::default()
                },
            );
            assert!(all.stdout.starts_with(b"1\n2\n3\n") && all.stdout.ends_with(b"20000\n"));
            // A peek with a signal ends it; the job stays for its last read.
            let mut seen = look(Some(15));
            while seen.running && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
                seen = look(None);
            }
            assert_eq!((seen.running, seen.exit_code), (false, Some(143)));
            assert!(seen.stdout.ends_with(b"20000\n"), "read or not, it shows");
            let end = wait_end(&id);
            assert_eq!((end.running, end.exit_code), (false, Some(143)));
            let gone = block(poll(
                &HostSh,
                &id,
                &Poll {
                    peek: true,
                    ..Poll::default()
                },
            ));
            assert!(matches!(gone, Err(JobsOverExec::NoSuchJob(_))), "{gone:?}");
        }

        #[test]
        fn lists_show_running_jobs_with_their_command() {
            let id = start_sh("sleep 5", 30_000);
            let jobs = block(list(&HostSh)).unwrap();
            let me = jobs.iter().find(|j| j.job_id == id).expect("listed");
            assert!(me.running);
            assert_eq!(me.command, "sleep 5");
            let p = Poll {
                signal: Some(9),
                max_bytes: READ_MAX,
                ..Poll::default()
            };
            let sent = read(&id, p);
            let end = if sent.running { wait_end(&id) } else { sent };
            assert_eq!(end.exit_code, Some(137));
            let unknown = block(poll(&HostSh, &new_id(), &Poll::default()));
            assert!(matches!(unknown, Err(JobsOverExec::NoSuchJob(_))));
        }
    }

    #[test]
    fn reads_are_parsed_with_both_streams_and_either_empty() {
        let text = format!(
            "msc-job running 0 - 5 12 3 2\n{}\n.\n{}\n",
            enc(b"a\0b"),
            enc(b"e\n")
        );
        let r = parse_read(&text).unwrap();
        assert_eq!(
            (r.stdout.as_slice(), r.stderr.as_slice()),
            (&b"a\0b"[..], &b"e\n"[..])
        );
        assert!(r.running);
        assert_eq!((r.dropped, r.duration_ms), (5, 12));
        let only_err = format!("msc-job ended 124 30 0 30001 0 2\n.\n{}\n", enc(b"e\n"));
        let r = parse_read(&only_err).unwrap();
        assert!(!r.running);
        assert_eq!((r.code, r.timed_out_after), (124, Some(30)));
        assert_eq!(r.stderr, b"e\n");
        let none = "msc-job ended 3 - 0 7 0 0\n.\n";
        assert_eq!(parse_read(none).unwrap().code, 3);
        // Wrapped base64 (76 columns) is joined.
        let big = vec![7u8; 200];
        let wrapped: String = enc(&big)
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
            .collect();
        let text = format!("msc-job running 0 - 0 0 200 0\n{wrapped}.\n");
        assert_eq!(parse_read(&text).unwrap().stdout, big);
    }

    #[test]
    fn unreadable_answers_are_errors_never_panics() {
        for bad in [
            "",
            "msc-job",
            "hello\n.\n",
            "msc-job running 0 - 0 0 1 0\n!!\n.\n",
            "msc-job running 0 - 0 0 9 0\nYQ==\n.\n",
            "msc-job sleeping 0 - 0 0 0 0\n.\n",
            "msc-job ended x - 0 0 0 0\n.\n",
            "msc-job ended 1 - -3 0 0 0\n.\n",
        ] {
            assert!(parse_read(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn any_composed_answer_parses_or_is_refused() {
        let pieces = [
            "msc-job",
            " ",
            "running",
            "ended",
            "\n",
            ".",
            "\n.\n",
            "-1",
            "0",
            "99999999999999999999",
            "YQ==",
            "é",
            "\0",
            "-",
            "3",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    for d in pieces {
                        let _ = parse_read(&format!("{a}{b}{c}{d}"));
                        let _ = parse_read(&format!("msc-job running {a} {b} {c} {d} 0 0\n.\n"));
                    }
                }
            }
        }
    }
}

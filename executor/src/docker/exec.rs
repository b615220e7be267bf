//! One command on a container, through the Engine API, with real process control.
//!
//! Every exec runs under a tiny `/bin/sh` wrapper that opens an audit session of its own
//! (it sets its login uid, as the supervisor does for its jobs), prints its PID (runc makes
//! each exec a session and process-group leader), changes directory (126 with the shell's
//! reason on failure), runs the program and reports its exit status in-band (see
//! [`WRAPPER`]). On timeout, output limit or cancellation (the future is dropped) the whole
//! tree is killed inside the container with a second exec: the process group, so
//! `sleep 1000 &` children die too, and every process of the wrapper's audit session, which
//! none can leave (`setsid`, `env -i` and double forks included). Where the exec has no
//! session of its own (a kernel without audit, an engine whose processes carry a login
//! uid), the exec's tag stands in: `MSC_JOB=e<nonce>` in the environment, inherited across
//! `setsid` but not `env -i`. The answer never waits for an escaped holder of the output
//! pipes: the deadline ends the read. Output is capped at the source of our memory: past
//! the limit nothing more is kept.

use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use shared::result::{ExecOutcome, OutputCollector, Push, Stream};
use tokio::io::AsyncWriteExt;

use super::{Docker, DockerError};

/// Marker argument: run bash if the image has it, else /bin/sh.
const AUTO_SHELL: &str = "@auto-shell";

/// `$0`=wrapper name, `$1`=nonce, `$2`=working directory (may be empty), `$3…`=argv.
/// The program runs in a subshell that `exec`s it (so `args` never hit a shell builtin);
/// the wrapper then writes the exit status on stderr, tagged with a per-exec nonce, which
/// saves the engine round trip of an exec inspect. The tag is removed from the output
/// wherever it lands (background children may write after it). Without it (the wrapper
/// was killed), the exit code comes from the engine. A program killed by SIGKILL while the
/// memory cgroup's `oom_kill` count rose (read with `read`, no extra process) is tagged
/// ` oom`: the out-of-memory killer ended it.
const WRAPPER: &str = r#"echo 0 2>/dev/null >/proc/self/loginuid
echo $$
n=$1; d=$2; shift 2
if [ -n "$d" ]; then cd -- "$d" || { printf '\036msc-exit-%s 126\036' "$n" >&2; exit 126; }; fi
if [ "$1" = "@auto-shell" ]; then shift; if [ -x /bin/bash ]; then set -- /bin/bash "$@"; else set -- /bin/sh "$@"; fi; fi
k() { o=; for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do if [ -r "$f" ]; then while read -r a b; do [ "$a" = oom_kill ] && o=$b; done < "$f"; return; fi; done; }
k; o0=$o
(exec "$@")
rc=$?
m=
if [ "$rc" -eq 137 ]; then k; [ -n "$o0" ] && [ "$o" != "$o0" ] && m=' oom'; fi
printf '\036msc-exit-%s %d%s\036' "$n" "$rc" "$m" >&2
exit $rc"#;

/// `$1`=process group (may be empty), `$2`=`MSC_JOB=<tag>`: kills the group, its leader,
/// and every process of the leader's audit session when it has one of its own (not unset,
/// not PID 1's), else every process whose environment holds the tag; three rounds, for
/// what forked meanwhile (found through `/proc`; the script's own processes carry neither).
/// Prints `killed` once done.
const KILL_SCRIPT: &str = r#"s=
if [ -n "$1" ]; then
  read -r s 2>/dev/null </proc/$1/sessionid; read -r o 2>/dev/null </proc/1/sessionid
  if [ "$s" = 4294967295 ] || [ "$s" = "$o" ]; then s=; fi
  kill -9 -$1 2>/dev/null; kill -9 $1 2>/dev/null
fi
for r in 1 2 3; do
  for p in /proc/[0-9]*; do
    if [ -n "$s" ]; then
      q=; read -r q 2>/dev/null <$p/sessionid; [ "$q" = "$s" ] && kill -9 "${p#/proc/}" 2>/dev/null
    else
      grep -qF "$2" "$p/environ" 2>/dev/null && kill -9 "${p#/proc/}" 2>/dev/null
    fi
  done
done
echo killed"#;

/// Removes the wrapper's exit tag (`\x1emsc-exit-<nonce> <code>[ oom]\x1e`, the last one)
/// from `stderr` and returns the code, and whether the out-of-memory killer ended it.
fn take_exit_tag(stderr: &mut Vec<u8>, nonce: &str) -> Option<(i64, bool)> {
    let marker = format!("\x1emsc-exit-{nonce} ");
    let m = marker.as_bytes();
    let start = stderr.windows(m.len()).rposition(|w| w == m)?;
    let digits_at = start + m.len();
    let len = stderr[digits_at..].iter().position(|b| *b == 0x1e)?;
    let field = &stderr[digits_at..digits_at + len];
    let (digits, oom) = match field.strip_suffix(b" oom") {
        Some(d) => (d, true),
        None => (field, false),
    };
    if digits.is_empty() || digits.len() > 3 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let code = std::str::from_utf8(digits).ok()?.parse().ok()?;
    stderr.drain(start..digits_at + len + 1);
    Some((code, oom))
}

pub use crate::spec::ExecSpec;

fn wrapper_cmd(spec: &ExecSpec, nonce: &str) -> Vec<String> {
    let mut cmd = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        WRAPPER.to_owned(),
        "msc-exec".to_owned(),
        nonce.to_owned(),
        spec.working_directory.clone().unwrap_or_default(),
    ];
    match &spec.shell_command {
        Some((shell, command)) => {
            cmd.push(shell.clone().unwrap_or_else(|| AUTO_SHELL.to_owned()));
            cmd.push("-c".to_owned());
            cmd.push(command.clone());
        }
        None => cmd.extend(spec.argv.iter().cloned()),
    }
    cmd
}

/// The environment variable that tags a command's processes (the supervisor's name).
const TAG_VAR: &str = "MSC_JOB";

/// Kills the process group `pid`, and the processes tagged `tag`, inside `container` when
/// dropped unarmed.
struct KillGuard {
    docker: Option<Docker>,
    container: String,
    exec_id: String,
    pid: Option<u32>,
    tag: String,
}

impl KillGuard {
    fn disarm(&mut self) {
        self.docker = None;
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if let Some(docker) = self.docker.take() {
            let container = std::mem::take(&mut self.container);
            let exec_id = std::mem::take(&mut self.exec_id);
            let pid = self.pid;
            let tag = std::mem::take(&mut self.tag);
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    tracing::info!(container, "command cancelled: stopping it");
                    docker.stop_exec(&container, &exec_id, pid, &tag).await;
                });
            }
        }
    }
}

/// What the front of stdout held.
#[derive(Debug, PartialEq, Eq)]
enum Header {
    /// The wrapper's PID, and the output after it.
    Pid(u32, Vec<u8>),
    /// No full line yet.
    Incomplete,
    /// Not a PID line (treat the bytes as output; process control is then unavailable).
    NotAPid,
}

/// Parses the wrapper's PID line off the front of stdout.
fn take_pid(header: &mut Vec<u8>, chunk: &[u8]) -> Header {
    header.extend_from_slice(chunk);
    let Some(nl) = header.iter().position(|b| *b == b'\n') else {
        return if header.len() > 16 {
            Header::NotAPid
        } else {
            Header::Incomplete
        };
    };
    let pid = std::str::from_utf8(&header[..nl])
        .ok()
        .and_then(|s| s.trim().parse().ok());
    match pid {
        Some(pid) if pid > 0 => Header::Pid(pid, header[nl + 1..].to_vec()),
        _ => Header::NotAPid,
    }
}

impl Docker {
    /// Kills process group `pid` (and `pid` itself, when known) and every process whose
    /// environment carries `MSC_JOB=<tag>` (what left the group with `setsid`) inside the
    /// container. `Ok(true)` when the kill script ran (it cannot start while a fork bomb
    /// holds every pid slot).
    pub async fn kill_group(
        &self,
        container: &str,
        pid: Option<u32>,
        tag: &str,
    ) -> Result<bool, DockerError> {
        let opts = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                KILL_SCRIPT.to_owned(),
                "msc-kill".to_owned(),
                pid.map(|p| p.to_string()).unwrap_or_default(),
                format!("{TAG_VAR}={tag}"),
            ]),
            ..Default::default()
        };
        let exec = self
            .client
            .create_exec(container, opts)
            .await
            .map_err(DockerError::from_bollard)?;
        let mut confirmed = false;
        if let StartExecResults::Attached { mut output, .. } = self
            .client
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await
            .map_err(DockerError::from_bollard)?
        {
            while let Some(item) = output.next().await {
                if let Ok(LogOutput::StdOut { message }) = item
                    && message.starts_with(b"killed")
                {
                    confirmed = true;
                }
            }
        }
        Ok(confirmed)
    }

    /// Stops a running exec and its whole process group, escalating: an in-container kill
    /// (works with remote engines), then a kill of the group from this host (local engines,
    /// when the in-container kill cannot even start, e.g. under a fork bomb), then a restart
    /// of the computer (keeps its filesystem). Returns a note for stderr when it had to
    /// restart.
    pub async fn stop_exec(
        &self,
        container: &str,
        exec_id: &str,
        pid: Option<u32>,
        tag: &str,
    ) -> Option<String> {
        for attempt in 0..3u64 {
            match self.kill_group(container, pid, tag).await {
                // Without a pid the group may still be starting: the engine is asked below.
                Ok(true) if pid.is_some() => return None,
                Ok(true) => break,
                Ok(false) => tracing::debug!(attempt, "in-container kill did not run"),
                Err(e) => tracing::debug!(error = %e, "in-container kill failed"),
            }
            tokio::time::sleep(Duration::from_millis(20 * (attempt + 1))).await;
        }
        if let Ok(info) = self.client.inspect_exec(exec_id).await {
            tracing::debug!(running = ?info.running, host_pid = ?info.pid, "exec state before host kill");
            if info.running != Some(true) {
                return None;
            }
            if let Some(host_pid) = info.pid.filter(|p| *p > 1) {
                let status = tokio::process::Command::new("kill")
                    .args(["-KILL", "--", &format!("-{host_pid}")])
                    .stdin(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .await;
                if status.map(|s| s.success()).unwrap_or(false) {
                    tracing::info!(container, host_pid, "stopped a command from the host");
                    return None;
                }
            }
        }
        tracing::warn!(
            container,
            "could not kill a command inside the computer; restarting it"
        );
        let id = container.trim_start_matches(super::NAME_PREFIX);
        match self.restart(id).await {
            Ok(()) => Some(
                "[the command could not be stopped inside the computer (it had exhausted the process limit), so the computer was restarted; files are kept]".to_owned(),
            ),
            Err(e) => Some(format!("[the command could not be stopped: {e}]")),
        }
    }

    /// Runs one command: through the supervisor when the computer has one and its relay
    /// opens, else through the Engine API (same results).
    pub async fn exec(&self, container: &str, spec: &ExecSpec) -> Result<ExecOutcome, DockerError> {
        self.ensure_confined(container).await?;
        if self.is_supervised(container).await {
            match self.exec_supervised(container, spec).await {
                Err(DockerError::SupervisorUnavailable(why)) => {
                    // PID 1 gone (stopped from inside, or the engine stopping it): the
                    // container is on its way down; let the caller start it again.
                    if !self.settles_running(container).await {
                        return Err(DockerError::NotRunning(
                            container.trim_start_matches(super::NAME_PREFIX).into(),
                        ));
                    }
                    tracing::info!(
                        container,
                        why,
                        "supervisor unavailable; using Engine API exec"
                    );
                }
                other => return other,
            }
        }
        self.exec_plain(container, spec).await
    }

    /// Is `container` running, and still running a moment later? (A container whose PID 1
    /// just exited is reported running until the engine notices.)
    async fn settles_running(&self, container: &str) -> bool {
        for attempt in 0..3 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            let running = self
                .client
                .inspect_container(container, None)
                .await
                .ok()
                .and_then(|c| c.state)
                .and_then(|s| s.running)
                .unwrap_or(false);
            if !running {
                return false;
            }
        }
        true
    }

    /// Runs one command through the Engine API and collects its outcome.
    pub async fn exec_plain(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutcome, DockerError> {
        let started = Instant::now();
        let nonce = format!("{:016x}", rand::random::<u64>());
        let tag = format!("e{nonce}");
        let mut env = spec.env_pairs();
        env.push(format!("{TAG_VAR}={tag}"));
        let opts = CreateExecOptions {
            attach_stdin: Some(spec.stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(env),
            cmd: Some(wrapper_cmd(spec, &nonce)),
            ..Default::default()
        };
        let exec = match self.client.create_exec(container, opts).await {
            Ok(e) => e,
            Err(e) if super::status_of(&e) == Some(404) => {
                return Err(DockerError::NotFound(
                    container.trim_start_matches(super::NAME_PREFIX).into(),
                ));
            }
            Err(e) if super::status_of(&e) == Some(409) => {
                return Err(DockerError::NotRunning(
                    container.trim_start_matches(super::NAME_PREFIX).into(),
                ));
            }
            Err(e) => return Err(DockerError::from_bollard(e)),
        };
        let start_opts = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: Some(64 * 1024),
        };
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = self
            .client
            .start_exec(&exec.id, Some(start_opts))
            .await
            .map_err(DockerError::from_bollard)?
        else {
            return Err(DockerError::Stream(
                "the engine did not attach to the command".into(),
            ));
        };
        let writer = spec.stdin.clone().map(|data| {
            tokio::spawn(async move {
                // A command that never reads its stdin is not an error: ignore write failures.
                let _ = input.write_all(data.as_bytes()).await;
                let _ = input.shutdown().await;
            })
        });
        let mut guard = KillGuard {
            docker: Some(self.clone()),
            container: container.to_owned(),
            exec_id: exec.id.clone(),
            pid: None,
            tag: tag.clone(),
        };
        let mut collector = OutputCollector::new(spec.output_limit);
        let mut ticker = crate::progress::LineTicker::new(spec.progress.clone());
        let mut header = Vec::new();
        // The wrapper's PID line has been taken off stdout (or stdout did not start with one).
        let mut header_done = false;
        let deadline = tokio::time::Instant::now() + spec.timeout;
        let mut timed_out = false;
        let mut stream_error = None;
        loop {
            let item = tokio::select! {
                item = output.next() => item,
                _ = tokio::time::sleep_until(deadline) => { timed_out = true; break; }
            };
            let (stream, bytes) = match item {
                None => break,
                Some(Ok(LogOutput::StdOut { message })) => (Stream::Stdout, message),
                Some(Ok(LogOutput::StdErr { message })) => (Stream::Stderr, message),
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    stream_error = Some(e.to_string());
                    break;
                }
            };
            let bytes: &[u8] = &bytes;
            let rest;
            let bytes = match stream {
                Stream::Stdout if !header_done => match take_pid(&mut header, bytes) {
                    Header::Pid(pid, r) => {
                        guard.pid = Some(pid);
                        header_done = true;
                        rest = r;
                        &rest[..]
                    }
                    Header::Incomplete => continue,
                    Header::NotAPid => {
                        header_done = true;
                        rest = std::mem::take(&mut header);
                        &rest[..]
                    }
                },
                _ => bytes,
            };
            ticker.push(bytes);
            if collector.push(stream, bytes) == Push::LimitHit {
                break;
            }
        }
        if let Some(w) = writer {
            w.abort();
        }
        let truncated = collector.is_truncated();
        if timed_out || truncated {
            tracing::debug!(timed_out, truncated, pid = ?guard.pid, "stopping the command");
            drop(output);
            guard.disarm();
            let note = self.stop_exec(container, &exec.id, guard.pid, &tag).await;
            let (stdout, mut stderr, _) = collector.finish();
            take_exit_tag(&mut stderr, &nonce);
            if let Some(note) = note {
                if !stderr.is_empty() && !stderr.ends_with(b"\n") {
                    stderr.push(b'\n');
                }
                stderr.extend_from_slice(note.as_bytes());
            }
            return Ok(ExecOutcome {
                stdout,
                stderr,
                exit_code: if timed_out {
                    shared::result::TIMEOUT_EXIT_CODE
                } else {
                    128 + 9
                },
                duration_ms: started.elapsed().as_millis() as u64,
                truncated_at: truncated.then_some(spec.output_limit as u64),
                timed_out_after: timed_out.then_some(spec.timeout.as_secs()),
                oom_killed: false,
            });
        }
        guard.disarm();
        if let Some(e) = stream_error {
            return Err(DockerError::Stream(e));
        }
        let (stdout, mut stderr, _) = collector.finish();
        let (exit_code, oom_killed) = match take_exit_tag(&mut stderr, &nonce) {
            Some(tag) => tag,
            None => (self.exit_code(&exec.id).await?, false),
        };
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code,
            duration_ms: started.elapsed().as_millis() as u64,
            truncated_at: None,
            timed_out_after: None,
            oom_killed,
        })
    }

    /// The exit code of a finished exec (the stream can end a moment before the engine
    /// records the exit, so poll briefly).
    async fn exit_code(&self, exec_id: &str) -> Result<i64, DockerError> {
        for attempt in 0..200u32 {
            let info = self
                .client
                .inspect_exec(exec_id)
                .await
                .map_err(DockerError::from_bollard)?;
            if info.running != Some(true)
                && let Some(code) = info.exit_code
            {
                return Ok(code);
            }
            tokio::time::sleep(Duration::from_millis(if attempt < 10 { 2 } else { 10 })).await;
        }
        Err(DockerError::Stream(
            "the engine did not report an exit code".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_header_is_split_off() {
        let mut h = Vec::new();
        assert_eq!(take_pid(&mut h, b"12"), Header::Incomplete);
        assert_eq!(
            take_pid(&mut h, b"3\nhello"),
            Header::Pid(123, b"hello".to_vec())
        );
        let mut h = Vec::new();
        assert_eq!(take_pid(&mut h, b"x\n"), Header::NotAPid);
        let mut h = Vec::new();
        assert_eq!(take_pid(&mut h, &[b'1'; 40]), Header::NotAPid);
    }

    #[test]
    fn exit_tag_is_found_and_removed() {
        let mut e = b"err\n\x1emsc-exit-ab 3\x1elate\n".to_vec();
        assert_eq!(take_exit_tag(&mut e, "ab"), Some((3, false)));
        assert_eq!(e, b"err\nlate\n");
        let mut e = b"\x1emsc-exit-ab 137 oom\x1e".to_vec();
        assert_eq!(take_exit_tag(&mut e, "ab"), Some((137, true)));
        assert!(e.is_empty());
        let mut e = b"\x1emsc-exit-zz 9\x1e".to_vec();
        assert_eq!(
            take_exit_tag(&mut e, "ab"),
            None,
            "another nonce is user output"
        );
        assert_eq!(e.len(), 15);
        for bad in [
            &b"\x1emsc-exit-ab \x1e"[..],
            b"\x1emsc-exit-ab 1234\x1e",
            b"\x1emsc-exit-ab 12",
            b"\x1emsc-exit-ab 1 om\x1e",
            b"\x1emsc-exit-ab  oom\x1e",
            b"",
        ] {
            let mut e = bad.to_vec();
            assert_eq!(take_exit_tag(&mut e, "ab"), None);
            assert_eq!(e, bad);
        }
    }

    #[test]
    fn wrapper_argv() {
        let spec = ExecSpec {
            argv: vec![],
            shell_command: Some((None, "ls".into())),
            stdin: None,
            working_directory: Some("/tmp".into()),
            timeout: Duration::from_secs(1),
            output_limit: 1,
            env: vec![],
            progress: Default::default(),
        };
        let cmd = wrapper_cmd(&spec, "n1");
        assert_eq!(
            &cmd[3..],
            ["msc-exec", "n1", "/tmp", AUTO_SHELL, "-c", "ls"]
        );
    }
}

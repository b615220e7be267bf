//! Running a command through the command router ([`ModalClient::exec`]): the wrapper that
//! records its pid, stdin and the two output streams, the output cap and the timeout, and
//! killing the process tree (also when the call is dropped).

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::{Code, Request, Status};

use super::proto::modal::task_command_router as tcr;
use super::transport::{backoff, retryable};
use super::{KILLED_EXIT_CODE, ModalClient, ModalError, RETRY_ATTEMPTS};

const STDIN_CHUNK: usize = 1 << 20;
/// How long the output of a killed command is still drained, and its exit status awaited.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Records the pid (`$$`, kept by `exec`) under `/tmp/.msc-exec/<exec id>`, first pruning
/// records of processes that are gone. `$1` is the exec id; the command follows.
const WRAPPER: &str = "d=/tmp/.msc-exec; { mkdir -p $d; for f in $d/*; do read p < \"$f\" && [ -d /proc/$p ] || rm -f \"$f\"; done; echo $$ > $d/$1; } 2>/dev/null; shift; exec \"$@\"";
/// Freezes and kills the recorded process and its descendants. `$1` is the exec id.
const KILLER: &str = "kt() { kill -STOP $1 2>/dev/null; for c in $(cat /proc/$1/task/*/children 2>/dev/null); do kt $c; done; kill -9 $1 2>/dev/null; }; f=/tmp/.msc-exec/$1; [ -f \"$f\" ] && read p < \"$f\" && kt \"$p\"; rm -f \"$f\"";

/// Kills a started command when its call is dropped before the command ended (the MCP
/// call was cancelled): the kill runs as its own task.
struct KillOnDrop {
    client: ModalClient,
    sandbox_id: String,
    task_id: String,
    exec_id: String,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, sandbox_id) = (self.client.clone(), std::mem::take(&mut self.sandbox_id));
        let (task_id, exec_id) = (
            std::mem::take(&mut self.task_id),
            std::mem::take(&mut self.exec_id),
        );
        rt.spawn(async move { client.kill(&sandbox_id, &task_id, &exec_id).await });
    }
}

/// The outcome of [`ModalClient::exec`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecResult {
    /// Standard output (at most `output_cap` bytes).
    pub stdout: Vec<u8>,
    /// Standard error (at most `output_cap` bytes).
    pub stderr: Vec<u8>,
    /// Exit code; `128 + signal` when killed by a signal ([`KILLED_EXIT_CODE`] when the
    /// client killed it).
    pub exit_code: i32,
    /// The command exceeded its timeout and was killed; the output is what came before.
    pub timed_out: bool,
    /// A stream exceeded `output_cap`: it was cut there and the command was killed.
    pub truncated: bool,
}

impl ModalClient {
    /// Runs `argv` in the sandbox (see the module docs) with `stdin` (closed after it, or at
    /// once when `None`), in `workdir`, with `env` added. Keeps at most `output_cap` bytes
    /// of each stream; beyond that the command is killed and `truncated` set. After
    /// `timeout` the command is killed and what it printed is returned with `timed_out`.
    #[allow(clippy::too_many_arguments)]
    pub async fn exec(
        &self,
        sandbox_id: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        workdir: Option<&str>,
        env: &[(String, String)],
        timeout: Duration,
        output_cap: usize,
    ) -> Result<ExecResult, ModalError> {
        if argv.is_empty() || argv[0].is_empty() {
            return Err(ModalError::InvalidArgument("exec needs a program".into()));
        }
        let deadline = Instant::now() + timeout;
        let router = self.router(sandbox_id, deadline).await?;
        let exec_id = uuid_v4();
        let mut command_args = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            WRAPPER.to_owned(),
            "sh".to_owned(),
            exec_id.clone(),
        ];
        command_args.extend(argv.iter().cloned());
        let start = tcr::TaskExecStartRequest {
            task_id: router.task_id.clone(),
            exec_id: exec_id.clone(),
            command_args,
            stdout_config: tcr::TaskExecStdoutConfig::Pipe as i32,
            stderr_config: tcr::TaskExecStderrConfig::Pipe as i32,
            timeout_secs: Some(timeout.as_secs_f64().ceil().clamp(1.0, u32::MAX as f64) as u32),
            workdir: workdir.map(str::to_owned),
            env: env.iter().cloned().collect(),
            ..Default::default()
        };
        let started = self
            .router_call(sandbox_id, "TaskExecStart", start, |mut c, r| async move {
                c.task_exec_start(r).await
            })
            .await;
        if let Err(e) = started {
            // A cached router of a sandbox that has since ended: say so.
            self.inner.routers.lock().await.remove(sandbox_id);
            if matches!(e, ModalError::NotFound(_) | ModalError::InvalidArgument(_)) {
                self.task_id(sandbox_id, deadline).await?;
            }
            return Err(e);
        }
        // From here a cancelled call (this future dropped) kills the command.
        let mut guard = KillOnDrop {
            client: self.clone(),
            sandbox_id: sandbox_id.to_owned(),
            task_id: router.task_id.clone(),
            exec_id: exec_id.clone(),
            armed: true,
        };

        // Stdin, concurrently with the output (a command may print before it reads).
        let stdin_task = {
            let this = self.clone();
            let sandbox_id = sandbox_id.to_owned();
            let (task_id, exec_id) = (router.task_id.clone(), exec_id.clone());
            let data = stdin.map(<[u8]>::to_vec).unwrap_or_default();
            tokio::spawn(async move {
                let mut offset = 0usize;
                loop {
                    let end = (offset + STDIN_CHUNK).min(data.len());
                    let req = tcr::TaskExecStdinWriteRequest {
                        task_id: task_id.clone(),
                        exec_id: exec_id.clone(),
                        offset: offset as u64,
                        data: data[offset..end].to_vec(),
                        eof: end == data.len(),
                    };
                    this.router_call(
                        &sandbox_id,
                        "TaskExecStdinWrite",
                        req,
                        |mut c, r| async move { c.task_exec_stdin_write(r).await },
                    )
                    .await?;
                    if end == data.len() {
                        return Ok::<(), ModalError>(());
                    }
                    offset = end;
                }
            })
        };

        let (stop_tx, stop_rx) = watch::channel(false);
        let (cap_tx, mut cap_rx) = mpsc::channel::<()>(2);
        let reader = |fd: tcr::TaskExecStdioFileDescriptor| {
            let this = self.clone();
            let sandbox_id = sandbox_id.to_owned();
            let (task_id, exec_id) = (router.task_id.clone(), exec_id.clone());
            let (stop, cap_tx) = (stop_rx.clone(), cap_tx.clone());
            tokio::spawn(async move {
                this.read_stdio(&sandbox_id, task_id, exec_id, fd, output_cap, stop, cap_tx)
                    .await
            })
        };
        let mut out_task = reader(tcr::TaskExecStdioFileDescriptor::Stdout);
        let mut err_task = reader(tcr::TaskExecStdioFileDescriptor::Stderr);
        drop(cap_tx);

        let mut timed_out = false;
        let mut killed = false;
        let mut outs: [Option<Result<Stdio, ModalError>>; 2] = [None, None];
        let mut grace_end: Option<Instant> = None;
        while outs.iter().any(Option::is_none) {
            let wake = grace_end.unwrap_or(deadline);
            tokio::select! {
                r = &mut out_task, if outs[0].is_none() => outs[0] = Some(joined(r)),
                r = &mut err_task, if outs[1].is_none() => outs[1] = Some(joined(r)),
                Some(()) = cap_rx.recv(), if !killed => {
                    killed = true;
                    self.kill(sandbox_id, &router.task_id, &exec_id).await;
                    grace_end = Some(Instant::now() + KILL_GRACE);
                }
                _ = tokio::time::sleep_until(wake) => {
                    if grace_end.is_some() {
                        let _ = stop_tx.send(true);
                        grace_end = Some(Instant::now() + KILL_GRACE);
                    } else {
                        timed_out = true;
                        if !killed {
                            killed = true;
                            self.kill(sandbox_id, &router.task_id, &exec_id).await;
                        }
                        grace_end = Some(Instant::now() + KILL_GRACE);
                    }
                }
            }
        }
        let _ = stop_tx.send(true);
        stdin_task.abort();
        let [Some(out), Some(err)] = outs else {
            return Err(ModalError::Protocol("output readers vanished".into()));
        };
        let (out, err) = (out?, err?);

        let wait_until = if killed {
            Instant::now() + KILL_GRACE
        } else {
            deadline
        };
        let exit = match self
            .wait_exit(sandbox_id, &router.task_id, &exec_id, wait_until)
            .await?
        {
            Some(code) => code,
            None if killed => KILLED_EXIT_CODE,
            None => {
                // Output ended but the process outlived the deadline.
                timed_out = true;
                self.kill(sandbox_id, &router.task_id, &exec_id).await;
                self.wait_exit(
                    sandbox_id,
                    &router.task_id,
                    &exec_id,
                    Instant::now() + KILL_GRACE,
                )
                .await?
                .unwrap_or(KILLED_EXIT_CODE)
            }
        };
        guard.armed = false;
        Ok(ExecResult {
            stdout: out.data,
            stderr: err.data,
            exit_code: exit,
            timed_out,
            truncated: out.truncated || err.truncated,
        })
    }

    /// Reads one output stream until its end, `cap` exceeded (then signals `cap_tx`), or
    /// `stop`. Reopens the stream at its offset after transient errors.
    #[allow(clippy::too_many_arguments)]
    async fn read_stdio(
        &self,
        sandbox_id: &str,
        task_id: String,
        exec_id: String,
        fd: tcr::TaskExecStdioFileDescriptor,
        cap: usize,
        mut stop: watch::Receiver<bool>,
        cap_tx: mpsc::Sender<()>,
    ) -> Result<Stdio, ModalError> {
        let mut out = Stdio::default();
        let mut failures = 0;
        let mut refreshed = false;
        'open: loop {
            let access = self.cached_router(sandbox_id).await?;
            let mut req = Request::new(tcr::TaskExecStdioReadRequest {
                task_id: task_id.clone(),
                exec_id: exec_id.clone(),
                offset: out.offset,
                file_descriptor: fd as i32,
            });
            req.metadata_mut()
                .insert("authorization", access.bearer.clone());
            let mut client = access.client.clone();
            let opened = tokio::select! {
                r = client.task_exec_stdio_read(req) => r,
                _ = stop.wait_for(|s| *s) => return Ok(out),
            };
            let mut stream = match opened {
                Ok(s) => s.into_inner(),
                Err(e) => {
                    self.stdio_error(sandbox_id, &task_id, &e, &mut failures, &mut refreshed)
                        .await?;
                    continue 'open;
                }
            };
            loop {
                let item = tokio::select! {
                    r = stream.message() => r,
                    _ = stop.wait_for(|s| *s) => return Ok(out),
                };
                match item {
                    Ok(Some(chunk)) => {
                        failures = 0;
                        out.offset += chunk.data.len() as u64;
                        let room = cap.saturating_sub(out.data.len());
                        if chunk.data.len() > room {
                            out.data.extend_from_slice(&chunk.data[..room]);
                            out.truncated = true;
                            let _ = cap_tx.try_send(());
                            return Ok(out);
                        }
                        out.data.extend_from_slice(&chunk.data);
                    }
                    Ok(None) => return Ok(out),
                    Err(e) => {
                        self.stdio_error(sandbox_id, &task_id, &e, &mut failures, &mut refreshed)
                            .await?;
                        continue 'open;
                    }
                }
            }
        }
    }

    async fn stdio_error(
        &self,
        sandbox_id: &str,
        task_id: &str,
        e: &Status,
        failures: &mut u32,
        refreshed: &mut bool,
    ) -> Result<(), ModalError> {
        if e.code() == Code::Unauthenticated && !*refreshed {
            *refreshed = true;
            return self.refresh_router(sandbox_id, task_id).await;
        }
        *failures += 1;
        if retryable(e) && *failures < RETRY_ATTEMPTS {
            tokio::time::sleep(backoff(*failures)).await;
            return Ok(());
        }
        Err(ModalError::from_status("TaskExecStdioRead", e))
    }

    /// Waits for the exit status until `until`; `None` if it is still running then.
    async fn wait_exit(
        &self,
        sandbox_id: &str,
        task_id: &str,
        exec_id: &str,
        until: Instant,
    ) -> Result<Option<i32>, ModalError> {
        let req = tcr::TaskExecWaitRequest {
            task_id: task_id.to_owned(),
            exec_id: exec_id.to_owned(),
        };
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let call = self.router_call(
                sandbox_id,
                "TaskExecWait",
                req.clone(),
                |mut c, r| async move { c.task_exec_wait(r).await },
            );
            match tokio::time::timeout(left.min(Duration::from_secs(60)), call).await {
                Err(_) => continue,
                Ok(Err(ModalError::DeadlineExceeded(_))) => continue,
                Ok(Err(e)) => return Err(e),
                Ok(Ok(r)) => {
                    return match r.exit_status {
                        Some(tcr::task_exec_wait_response::ExitStatus::Code(c)) => Ok(Some(c)),
                        Some(tcr::task_exec_wait_response::ExitStatus::Signal(s)) => {
                            Ok(Some(128 + s))
                        }
                        None => Err(ModalError::Protocol(
                            "TaskExecWait returned no exit status".into(),
                        )),
                    };
                }
            }
        }
    }

    /// Kills the process tree of `exec_id` (best effort; see [`KILLER`]).
    async fn kill(&self, sandbox_id: &str, task_id: &str, exec_id: &str) {
        let kill_id = uuid_v4();
        let start = tcr::TaskExecStartRequest {
            task_id: task_id.to_owned(),
            exec_id: kill_id.clone(),
            command_args: vec![
                "/bin/sh".into(),
                "-c".into(),
                KILLER.into(),
                "sh".into(),
                exec_id.to_owned(),
            ],
            stdout_config: tcr::TaskExecStdoutConfig::Devnull as i32,
            stderr_config: tcr::TaskExecStderrConfig::Devnull as i32,
            timeout_secs: Some(10),
            ..Default::default()
        };
        let started = self
            .router_call(sandbox_id, "TaskExecStart", start, |mut c, r| async move {
                c.task_exec_start(r).await
            })
            .await;
        if started.is_err() {
            return;
        }
        let eof = tcr::TaskExecStdinWriteRequest {
            task_id: task_id.to_owned(),
            exec_id: kill_id.clone(),
            eof: true,
            ..Default::default()
        };
        let _ = self
            .router_call(
                sandbox_id,
                "TaskExecStdinWrite",
                eof,
                |mut c, r| async move { c.task_exec_stdin_write(r).await },
            )
            .await;
        let _ = self
            .wait_exit(
                sandbox_id,
                task_id,
                &kill_id,
                Instant::now() + Duration::from_secs(10),
            )
            .await;
    }
}

#[derive(Default)]
struct Stdio {
    data: Vec<u8>,
    offset: u64,
    truncated: bool,
}

fn joined(
    r: Result<Result<Stdio, ModalError>, tokio::task::JoinError>,
) -> Result<Stdio, ModalError> {
    r.map_err(|e| ModalError::Protocol(format!("output reader failed: {e}")))?
}

/// A random (version 4) UUID.
pub(super) fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

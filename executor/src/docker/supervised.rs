//! Exec through the in-computer supervisor: milliseconds instead of an Engine API exec.
//!
//! A computer created with the supervisor runs `/.msc/msc-supervisor init` as PID 1 (the
//! binary is uploaded with the archive API before start, so it works with remote engines).
//! The first exec on a computer opens one connection to it for this server process: the
//! direct channel (a unix socket in the computer's host directory, [`super::channel`]) when
//! the computer has one, else one long-lived `relay` exec (stdio ↔ the supervisor's unix
//! socket); every later exec is a few frames on it. Several server processes attached to
//! one permanent computer each have their own connection, so their frames never mix. Frames from the computer are hostile input: bounded, and a malformed
//! one ends the connection (the next exec opens a new one). When placement or the relay
//! fails, the caller falls back to plain Engine API exec.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use shared::result::{ExecOutcome, OutputCollector, Stream};
use supervisor::frame::{
    ExitInfo, Frame, Kind, MAX_FRAME, StartSpec, pong_serves_files, pong_serves_jobs,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::exec::ExecSpec;
use super::{Docker, DockerError};

/// Where the supervisor lives inside a computer.
pub const SUPERVISOR_PATH: &str = "/.msc/msc-supervisor";
/// Its socket inside a computer.
pub const SOCKET_PATH: &str = "/run/msc/sup.sock";
/// How long a running computer's supervisor may take to come to its door.
const ARM_LATER: Duration = Duration::from_secs(2);

/// Label on containers whose PID 1 is the supervisor.
pub const LABEL_SUPERVISOR: &str = "mcp-sandbox.supervisor";

/// Where the supervisor volume is mounted (read-only) in a computer.
pub const VOLUME_TARGET: &str = "/.msc";

/// The content-addressed name of the volume holding `binary` (FNV-1a, 64 bits: the binary
/// is ours, the hash only tells versions apart).
pub fn volume_name(binary: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in binary {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("msc-supervisor-{h:016x}")
}

/// A tar archive holding `msc-supervisor` (mode 0755), for the archive API.
pub fn supervisor_tar(binary: &[u8]) -> Vec<u8> {
    super::archive::one_file_tar("msc-supervisor", binary, 0o755, 0)
}

type Input = std::pin::Pin<Box<dyn AsyncWrite + Send>>;

/// One relay connection to one computer's supervisor.
pub struct Connection {
    input: tokio::sync::Mutex<Input>,
    /// Where frames for each request number go.
    pub(super) jobs: Mutex<HashMap<u32, mpsc::UnboundedSender<Frame>>>,
    pub(super) next_job: AtomicU32,
    alive: AtomicBool,
    /// The supervisor serves kept jobs (it answered the ping with `PONG_JOBS` or later).
    pub(super) serves_jobs: AtomicBool,
    /// The supervisor serves files (it answered the ping with `PONG_FILES`).
    pub(super) serves_files: AtomicBool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("alive", &self.alive)
            .finish()
    }
}

/// Relay connections of this server, by container name.
pub type Connections = Mutex<HashMap<String, Arc<Connection>>>;

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connection {
    fn new(input: Input) -> Self {
        Self {
            input: tokio::sync::Mutex::new(input),
            jobs: Mutex::new(HashMap::new()),
            next_job: AtomicU32::new(1),
            alive: AtomicBool::new(true),
            serves_jobs: AtomicBool::new(false),
            serves_files: AtomicBool::new(false),
        }
    }

    /// Hands the complete frames in `buf` + `bytes` to their requests. `false`: a
    /// malformed frame, and the connection must end.
    fn dispatch(&self, container: &str, buf: &mut Vec<u8>, bytes: &[u8]) -> bool {
        buf.extend_from_slice(bytes);
        match take_frames(buf) {
            Ok(frames) => {
                for f in frames {
                    let tx = lock(&self.jobs).get(&f.job).cloned();
                    if let Some(tx) = tx {
                        let _ = tx.send(f);
                    }
                }
                true
            }
            Err(why) => {
                tracing::warn!(
                    container,
                    %why,
                    "malformed frame from the supervisor; closing the connection"
                );
                false
            }
        }
    }

    /// Proves the supervisor answers before any command is trusted to this connection,
    /// and learns what it serves.
    async fn handshake(&self) -> Result<(), DockerError> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        lock(&self.jobs).insert(0, tx);
        self.send(&Frame::new(Kind::Ping, 0, b"hello".to_vec()))
            .await?;
        let pong = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        lock(&self.jobs).remove(&0);
        match pong {
            Ok(Some(f)) if f.kind == Kind::Pong => {
                self.serves_jobs
                    .store(pong_serves_jobs(&f.payload), Ordering::SeqCst);
                self.serves_files
                    .store(pong_serves_files(&f.payload), Ordering::SeqCst);
                Ok(())
            }
            _ => {
                self.close();
                Err(DockerError::Supervisor(
                    "the supervisor did not answer".into(),
                ))
            }
        }
    }

    pub(super) async fn send(&self, frame: &Frame) -> Result<(), DockerError> {
        let mut input = self.input.lock().await;
        let r = async {
            input.write_all(&frame.encode()).await?;
            input.flush().await
        }
        .await;
        r.map_err(|e| {
            self.alive.store(false, Ordering::SeqCst);
            DockerError::Supervisor(format!("supervisor connection lost: {e}"))
        })
    }

    fn close(&self) {
        self.alive.store(false, Ordering::SeqCst);
        lock(&self.jobs).clear();
    }
}

/// The supervisor's volume, once looked at: ready (its name), or why this engine cannot run
/// the supervisor at all (e.g. another architecture).
#[derive(Debug, Clone)]
pub(super) enum Volume {
    Ready(String),
    Unusable(String),
}

/// Splits complete frames off the front of `buf`. `Err` on a hostile frame.
fn take_frames(buf: &mut Vec<u8>) -> Result<Vec<Frame>, supervisor::frame::FrameError> {
    let mut frames = Vec::new();
    // Frames are cut by offset and the buffer shifted once: a message holding many frames
    // costs one move, not one per frame.
    let mut at = 0;
    let result = loop {
        let rest = &buf[at..];
        if rest.len() < 4 {
            break Ok(());
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > MAX_FRAME {
            break Err(supervisor::frame::FrameError::TooLarge(len));
        }
        if rest.len() < 4 + len {
            break Ok(());
        }
        match Frame::read_from(&mut &rest[..4 + len]) {
            Ok(frame) => frames.push(frame),
            Err(e) => break Err(e),
        }
        at += 4 + len;
    };
    buf.drain(..at);
    result.map(|()| frames)
}

impl Docker {
    /// The volume holding the supervisor, made ready on first use: created (content-addressed,
    /// so servers and versions never overwrite each other's) and filled through the archive
    /// API of a helper container that is never started. Mounting it read-only costs a new
    /// computer nothing, where an upload into each computer costs a tar extraction (~35 ms),
    /// and it works with remote engines, unlike a bind mount of a host path.
    pub(super) async fn supervisor_volume(&self, binary: &[u8]) -> Result<String, DockerError> {
        let mut ready = self.supervisor_volume.lock().await;
        match ready.as_ref() {
            Some(Volume::Ready(name)) => return Ok(name.clone()),
            Some(Volume::Unusable(why)) => {
                return Err(DockerError::SupervisorUnavailable(why.clone()));
            }
            None => {}
        }
        // The binary is static musl for one architecture (the release embeds the one of the
        // server's own): an engine on another cannot run it, so its computers use plain
        // Engine API exec from the start (said once).
        let arch = self
            .client
            .info()
            .await
            .map_err(DockerError::from_bollard)?
            .architecture
            .unwrap_or_default();
        let built_for = elf_machine(binary);
        if built_for.is_none() || built_for != engine_machine(&arch) {
            let why = format!(
                "the engine runs on {arch:?}; the embedded msc-supervisor is built for {}, so computers use Engine API exec",
                built_for.unwrap_or("an unknown architecture")
            );
            tracing::warn!("{why}");
            *ready = Some(Volume::Unusable(why.clone()));
            return Err(DockerError::SupervisorUnavailable(why));
        }
        let name = volume_name(binary);
        let labels = HashMap::from([(LABEL_SUPERVISOR.to_owned(), "volume".to_owned())]);
        self.client
            .create_volume(bollard::models::VolumeCreateRequest {
                name: Some(name.clone()),
                labels: Some(labels),
                ..Default::default()
            })
            .await
            .map_err(DockerError::from_bollard)?;
        let helper = format!("msc-supervisor-fill-{:08x}", rand::random::<u32>());
        let body = bollard::models::ContainerCreateBody {
            image: Some(self.cfg.image.clone()),
            entrypoint: Some(vec![SUPERVISOR_PATH.to_owned()]),
            labels: Some(HashMap::from([(
                LABEL_SUPERVISOR.to_owned(),
                "helper".to_owned(),
            )])),
            network_disabled: Some(true),
            host_config: Some(bollard::models::HostConfig {
                mounts: Some(vec![bollard::models::Mount {
                    target: Some(VOLUME_TARGET.to_owned()),
                    source: Some(name.clone()),
                    typ: Some(bollard::models::MountType::VOLUME),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.client
            .create_container(
                Some(bollard::query_parameters::CreateContainerOptions {
                    name: Some(helper.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(DockerError::from_bollard)?;
        let filled = async {
            let stat = self
                .client
                .get_container_archive_info(
                    &helper,
                    Some(bollard::query_parameters::ContainerArchiveInfoOptions {
                        path: SUPERVISOR_PATH.to_owned(),
                    }),
                )
                .await;
            if matches!(&stat, Ok(s) if usize::try_from(s.size).ok() == Some(binary.len())) {
                return Ok(());
            }
            self.client
                .upload_to_container(
                    &helper,
                    // Into the mount point itself: Podman writes through to the volume only
                    // when the target path is inside it.
                    Some(bollard::query_parameters::UploadToContainerOptions {
                        path: VOLUME_TARGET.into(),
                        ..Default::default()
                    }),
                    bollard::body_full(supervisor_tar(binary).into()),
                )
                .await
                .map_err(DockerError::from_bollard)
        }
        .await;
        let _ = self
            .client
            .remove_container(
                &helper,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
        filled?;
        tracing::info!(volume = name, "the supervisor volume is ready");
        *ready = Some(Volume::Ready(name.clone()));
        Ok(name)
    }

    /// The connection to `container`'s supervisor, opened on first use: the direct channel
    /// when the computer has one ([`super::channel`]), else the relay.
    pub(super) async fn connection(&self, container: &str) -> Result<Arc<Connection>, DockerError> {
        if let Some(c) = lock(&self.connections).get(container)
            && c.alive.load(Ordering::SeqCst)
        {
            return Ok(c.clone());
        }
        let mut direct_failed = None;
        if let Some(dir) = self.channel_of(container) {
            match self.open_direct(container, &dir).await {
                Ok(conn) => {
                    self.channel_learnt.works();
                    crate::metrics::supervisor_connection(true);
                    lock(&self.connections).insert(container.to_owned(), conn.clone());
                    return Ok(conn);
                }
                Err(why) => direct_failed = Some(why),
            }
        }
        let conn = self.open_relay(container).await?;
        // Only a relay that works proves the direct channel was at fault (and not a
        // computer that is down); a supervisor slow to come to its door proves nothing.
        if let Some((why, transient)) = direct_failed {
            match transient {
                true => tracing::info!(
                    container,
                    why,
                    "the direct channel was not armed in time: this computer relays"
                ),
                false => self.channel_learnt.failed(&why),
            }
        }
        crate::metrics::supervisor_connection(false);
        lock(&self.connections).insert(container.to_owned(), conn.clone());
        Ok(conn)
    }

    /// Connects to the socket in `container`'s host directory. `Err`: why not, and
    /// whether it is worth another try later ([`super::channel::DoorError::is_transient`]).
    async fn open_direct(
        &self,
        container: &str,
        dir: &std::path::Path,
    ) -> Result<Arc<Connection>, (String, bool)> {
        use super::channel::{OpenError, connect, connect_soon};
        let stream = match connect_soon(dir).await {
            // Nothing listens (the computer or its engine restarted): hand its supervisor
            // a new listener, then connect.
            Err(OpenError::Missing(_)) => {
                self.arm_channel(container, dir, ARM_LATER)
                    .await
                    .map_err(|e| (e.to_string(), e.is_transient()))?;
                connect(dir).await
            }
            other => other,
        }
        .map_err(|e| (e.to_string(), false))?;
        tracing::debug!(container, "opening the direct supervisor channel");
        let (mut read, write) = stream.into_split();
        let conn = Arc::new(Connection::new(Box::pin(write)));
        let reader = conn.clone();
        let name = container.to_owned();
        let task = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 256 * 1024];
            loop {
                match read.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if !reader.dispatch(&name, &mut buf, &chunk[..n]) {
                            break;
                        }
                    }
                }
            }
            reader.close();
        });
        if let Err(e) = conn.handshake().await {
            // Whatever listens there is not a supervisor: hang up on it.
            task.abort();
            return Err((e.to_string(), false));
        }
        Ok(conn)
    }

    /// Opens one long-lived `relay` exec (stdio to the supervisor's socket in the computer).
    async fn open_relay(&self, container: &str) -> Result<Arc<Connection>, DockerError> {
        let opts = CreateExecOptions {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec![
                SUPERVISOR_PATH.to_owned(),
                "relay".to_owned(),
                "--socket".to_owned(),
                SOCKET_PATH.to_owned(),
            ]),
            ..Default::default()
        };
        tracing::debug!(container, "opening the supervisor relay");
        let exec = self
            .client
            .create_exec(container, opts)
            .await
            .map_err(DockerError::from_bollard)?;
        let StartExecResults::Attached { mut output, input } = self
            .client
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(256 * 1024),
                }),
            )
            .await
            .map_err(DockerError::from_bollard)?
        else {
            return Err(DockerError::Supervisor(
                "the engine did not attach to the relay".into(),
            ));
        };
        let conn = Arc::new(Connection::new(input));
        let reader = conn.clone();
        let name = container.to_owned();
        let task = tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) => {
                        if !reader.dispatch(&name, &mut buf, &message) {
                            break;
                        }
                    }
                    Ok(LogOutput::StdErr { message }) => {
                        tracing::debug!(container = name, stderr = %String::from_utf8_lossy(&message), "relay");
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            reader.close();
        });
        if let Err(e) = conn.handshake().await {
            task.abort();
            return Err(e);
        }
        Ok(conn)
    }

    /// Forgets the relay to `container` (it was removed or restarted).
    pub fn drop_connection(&self, container: &str) {
        if let Some(c) = lock(&self.connections).remove(container) {
            c.close();
        }
    }

    /// Runs one command through the supervisor. `Err(Unavailable)`-like errors let the
    /// caller fall back to plain exec.
    pub async fn exec_supervised(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutcome, DockerError> {
        let started = Instant::now();
        let conn = match self.connection(container).await {
            Ok(c) => c,
            Err(DockerError::NotFound(id)) => return Err(DockerError::NotFound(id)),
            Err(e) => return Err(DockerError::SupervisorUnavailable(e.to_string())),
        };
        let job = conn.next_job.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = mpsc::unbounded_channel();
        lock(&conn.jobs).insert(job, tx);
        let argv = match &spec.shell_command {
            Some((shell, command)) => vec![
                shell
                    .clone()
                    .unwrap_or_else(|| supervisor::server::AUTO_SHELL.to_owned()),
                "-c".to_owned(),
                command.clone(),
            ],
            None => spec.argv.clone(),
        };
        let start = StartSpec {
            argv,
            cwd: spec.working_directory.clone(),
            env: spec.env_pairs(),
            stdin: spec.stdin.is_some(),
            timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
            output_limit: spec.output_limit as u64,
            // The pid is of no use here: one frame, and one wake-up, fewer per command.
            quiet: true,
        };
        let body =
            serde_json::to_vec(&start).map_err(|e| DockerError::Supervisor(e.to_string()))?;
        conn.send(&Frame::new(Kind::Start, job, body)).await?;
        // Cancellation (this future dropped) kills the job inside the computer.
        struct KillOnDrop(Option<(Arc<Connection>, u32)>);
        impl Drop for KillOnDrop {
            fn drop(&mut self) {
                if let Some((conn, job)) = self.0.take() {
                    lock(&conn.jobs).remove(&job);
                    if let Ok(h) = tokio::runtime::Handle::try_current() {
                        h.spawn(async move {
                            let _ = conn.send(&Frame::new(Kind::Kill, job, vec![9])).await;
                        });
                    }
                }
            }
        }
        let mut guard = KillOnDrop(Some((conn.clone(), job)));
        if let Some(stdin) = &spec.stdin {
            for chunk in stdin.as_bytes().chunks(64 * 1024) {
                conn.send(&Frame::new(Kind::Stdin, job, chunk.to_vec()))
                    .await?;
            }
            conn.send(&Frame::new(Kind::StdinClose, job, Vec::new()))
                .await?;
        }
        let mut collector = OutputCollector::new(spec.output_limit);
        let mut ticker = crate::progress::LineTicker::new(spec.progress.clone());
        // The supervisor enforces the timeout; this deadline only guards against a hung one.
        let deadline = tokio::time::Instant::now() + spec.timeout + Duration::from_secs(10);
        let exit: ExitInfo = loop {
            let frame = tokio::select! {
                f = rx.recv() => f,
                _ = tokio::time::sleep_until(deadline) => {
                    conn.close();
                    self.drop_connection(container);
                    return Err(DockerError::Supervisor("the supervisor did not answer in time".into()));
                }
            };
            let Some(frame) = frame else {
                guard.0 = None;
                self.drop_connection(container);
                return Err(DockerError::Supervisor(
                    "the supervisor connection closed during the command".into(),
                ));
            };
            match frame.kind {
                Kind::Stdout => {
                    ticker.push(&frame.payload);
                    collector.push(Stream::Stdout, &frame.payload);
                }
                Kind::Stderr => {
                    ticker.push(&frame.payload);
                    collector.push(Stream::Stderr, &frame.payload);
                }
                Kind::Exit => match serde_json::from_slice(&frame.payload) {
                    Ok(info) => break info,
                    Err(e) => return Err(DockerError::Supervisor(format!("bad exit frame: {e}"))),
                },
                Kind::Error => {
                    return Err(DockerError::Supervisor(
                        String::from_utf8_lossy(&frame.payload).into_owned(),
                    ));
                }
                _ => {}
            }
        };
        guard.0 = None;
        lock(&conn.jobs).remove(&job);
        let (stdout, stderr, truncated) = collector.finish();
        let truncated = truncated || exit.truncated;
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code: if truncated && !exit.timed_out {
                128 + 9
            } else {
                i64::from(exit.code)
            },
            duration_ms: started.elapsed().as_millis() as u64,
            truncated_at: truncated.then_some(spec.output_limit as u64),
            timed_out_after: exit.timed_out.then_some(spec.timeout.as_secs()),
            oom_killed: exit.oom_killed,
        })
    }
}

/// The architecture of an ELF binary (`e_machine`), for the two we build.
fn elf_machine(binary: &[u8]) -> Option<&'static str> {
    if binary.get(..4) != Some(b"\x7fELF") || binary.get(5) != Some(&1) {
        return None; // not ELF, or not little-endian
    }
    match binary.get(18..20)? {
        [0x3e, 0] => Some("x86_64"),
        [0xb7, 0] => Some("aarch64"),
        _ => None,
    }
}

/// An engine's `Architecture` in the same names (Docker says x86_64/aarch64, Podman
/// amd64/arm64).
fn engine_machine(arch: &str) -> Option<&'static str> {
    match arch {
        "x86_64" | "amd64" => Some("x86_64"),
        "aarch64" | "arm64" => Some("aarch64"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn supervisor_architecture_is_read_from_its_elf_header() {
        let mut elf = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        elf.resize(20, 0);
        elf[18] = 0x3e;
        assert_eq!(elf_machine(&elf), Some("x86_64"));
        elf[18] = 0xb7;
        assert_eq!(elf_machine(&elf), Some("aarch64"));
        elf[18] = 0x28; // 32-bit ARM
        assert_eq!(elf_machine(&elf), None);
        assert_eq!(elf_machine(b"\0asm"), None);
        assert_eq!(elf_machine(&elf[..10]), None);
        assert_eq!(engine_machine("amd64"), Some("x86_64"));
        assert_eq!(engine_machine("arm64"), engine_machine("aarch64"));
        assert_eq!(engine_machine("s390x"), None);
    }

    use super::*;

    #[test]
    fn tar_is_well_formed() {
        let t = supervisor_tar(b"abc");
        assert_eq!(t.len() % 512, 0);
        assert_eq!(&t[257..262], b"ustar");
        assert_eq!(&t[..15], b"msc-supervisor\0");
        assert_eq!(&t[512..515], b"abc");
    }

    #[test]
    fn frames_are_split_and_bounded() {
        let mut buf = Frame::new(Kind::Stdout, 1, b"ab".to_vec()).encode();
        buf.extend(Frame::new(Kind::Exit, 1, b"{}".to_vec()).encode());
        buf.extend_from_slice(&[9, 0]);
        let frames = take_frames(&mut buf).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(buf, [9, 0]);
        let mut bad = vec![0xff, 0xff, 0xff, 0xff];
        assert!(take_frames(&mut bad).is_err());
        let mut unknown = vec![5, 0, 0, 0, 99, 0, 0, 0, 0];
        assert!(take_frames(&mut unknown).is_err());
    }
}

//! A local simulator of the part of Modal's gRPC API the executor uses
//! (`modal.client.ModalClient` and `modal.task_command_router.TaskCommandRouter`, from
//! `specs/modal/modal_proto/`), backed by real Docker containers.
//!
//! The server is tonic, generated from the same protos by `executor/modal_codegen.rs`
//! (server side only, via `tests/build.rs`), on `127.0.0.1:<random port>`; both services
//! share the port, so `TaskGetCommandRouterAccess` answers the simulator's own URL.
//!
//! Every request is checked against the proto's semantics before it is served. What a
//! correct client never sends is recorded as a violation (see [`ModalSim::violations`])
//! and answered with the code Modal would use:
//! - control-plane auth: `x-modal-token-id` and `x-modal-token-secret` must match the
//!   options, else `UNAUTHENTICATED` (not a violation: wrong credentials are a user error);
//!   a missing `x-modal-client-version` is `FAILED_PRECONDITION` (as Modal answers
//!   outdated clients) and a violation, so is a missing/unknown `x-modal-client-type`.
//! - router auth: `authorization: Bearer <jwt>` with a JWT this simulator issued for the
//!   request's `task_id`, else `UNAUTHENTICATED` / `PERMISSION_DENIED`. Modal tokens sent
//!   to the router (which runs on a worker) are a violation.
//! - unknown app / image / sandbox / task / exec ids are `NOT_FOUND` with Modal-like
//!   messages; missing required fields are `INVALID_ARGUMENT` and violations; fields that
//!   are valid but not simulated (mounts, secrets, PTYs, ports, proxies, probes, V2-only
//!   options…) are violations "unsimulated: …".
//!
//! Served RPCs (the codegen lists; the server has no others, tonic answers
//! `UNIMPLEMENTED`): `AppGetOrCreate`, `ImageGetOrCreate`, `ImageJoinStreaming`,
//! `SandboxCreate`, `SandboxGetCommandRouterAccess`, `SandboxGetTaskId`, `SandboxList`,
//! `SandboxSnapshotFs`, `SandboxTagsSet`, `SandboxTerminate`, `SandboxWait`,
//! `TaskGetCommandRouterAccess`; router: `TaskExecStart`, `TaskExecStdinWrite`,
//! `TaskExecStdioRead`, `TaskExecWait`.
//!
//! Behaviour (*choice* marks what the protos and SDKs leave open):
//! - apps: `AppGetOrCreate` with `OBJECT_CREATION_TYPE_CREATE_IF_MISSING` creates, with
//!   `UNSPECIFIED` only looks up. Names (apps and sandboxes): letters, digits, `-_.`, at
//!   most 64 characters. Environments are not simulated: a non-empty
//!   `environment_name` is `NOT_FOUND`.
//! - images: only registry images (`dockerfile_commands == ["FROM <ref>"]`, no base images,
//!   context files or secrets). `<ref>` is mapped through `image_map` to a local Docker
//!   image (no pulls); a missing local image makes the build fail. The same ref gives the
//!   same image id. The first `ImageGetOrCreate` answers without `result` (building), so
//!   the client must follow with `ImageJoinStreaming`, which answers the result at once.
//! - sandboxes: a container per sandbox (Docker's init; `entrypoint_args`, or a keep-alive
//!   shell when empty as Modal keeps such sandboxes up), labels `docker_label`,
//!   `modalsim.instance`, `modalsim.sandbox`; `milli_cpu` → CPU quota, `memory_mb` →
//!   memory limit; GPUs and regions are accepted and ignored. `timeout_secs` (1..=86400;
//!   0 is a violation since the SDKs always send it) ends the sandbox (`TIMEOUT`); a main
//!   process that exits ends it (`SUCCESS`/`FAILURE` with its exit code); terminate ends it
//!   (`TERMINATED`) and removes the container. Names are unique among the app's running
//!   sandboxes (`ALREADY_EXISTS`).
//! - `SandboxList`: running sandboxes (plus finished with `include_finished`) having all
//!   the given tags, newest first, pages of [`LIST_PAGE`] (*choice*) below
//!   `before_timestamp` when it is non-zero.
//! - `SandboxGetTaskId` needs `timeout` (the proto: "new clients must always provide a
//!   timeout"); a finished sandbox answers its `task_result`.
//! - `SandboxSnapshotFs` = `docker commit`; the new image id works for `SandboxCreate`.
//! - exec: `TaskExecStart` starts `command_args` at once via a Docker exec (through
//!   `/bin/sh -c 'echo $$ > pidfile; exec "$@"'`, so the image needs `/bin/sh`) with `env`
//!   and `workdir`; the same `exec_id` again is idempotent. Stdin arrives with
//!   `TaskExecStdinWrite` (offsets must not leave gaps; a resent prefix is skipped; `eof`
//!   closes it). Output is buffered (at most [`OUTPUT_LIMIT`] per stream, *choice*) and
//!   served from any offset by `TaskExecStdioRead`, which ends once the process has closed
//!   its output. `timeout_secs` kills the process tree; `TaskExecWait` then answers
//!   `signal: 9`, otherwise `code` (Docker cannot tell a signal death from `exit 128+n`, so
//!   those come back as codes, *choice*).
//! - faults: every request that passes auth and validation is counted; every
//!   `resource_exhausted_every`-th answers `RESOURCE_EXHAUSTED`, else every
//!   `unavailable_every`-th `UNAVAILABLE`, before doing anything. `latency_ms` delays
//!   every answer. The first `lost_create_answers` successful creates answer
//!   `UNAVAILABLE` after creating the sandbox (a lost answer).

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use base64::Engine;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, RemoveContainerOptions, RemoveImageOptions,
};
use futures_util::{Stream, StreamExt};
use rand::Rng;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::{close, injected_fault, lock, remove_labelled};

/// Code generated by `executor/modal_codegen.rs` (server and client, pruned to the simulated RPCs).
#[allow(clippy::all, missing_docs, unreachable_pub)]
pub mod proto {
    /// Modal's packages.
    pub mod modal {
        /// `modal.client`.
        pub mod client {
            tonic::include_proto!("modal.client");
        }
        /// `modal.task_command_router`.
        pub mod task_command_router {
            tonic::include_proto!("modal.task_command_router");
        }
    }
}

use proto::modal::client as pb;
use proto::modal::client::generic_result::GenericStatus;
use proto::modal::client::modal_client_server::{ModalClient, ModalClientServer};
use proto::modal::task_command_router as tcr;
use proto::modal::task_command_router::task_command_router_server::{
    TaskCommandRouter, TaskCommandRouterServer,
};

/// Keeps a sandbox up when `entrypoint_args` is empty.
const KEEPALIVE: &str = "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done";
/// Sandboxes per `SandboxList` page.
pub const LIST_PAGE: usize = 10;
/// Output kept per exec stream; more is dropped.
pub const OUTPUT_LIMIT: usize = 64 << 20;
/// Bytes per `TaskExecStdioRead` message.
const CHUNK: usize = 64 << 10;
const MAX_SANDBOX_TIMEOUT: u32 = 86_400;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// How the simulator behaves.
#[derive(Clone, Debug)]
pub struct ModalSimOptions {
    /// The accepted `x-modal-token-id`.
    pub token_id: String,
    /// The accepted `x-modal-token-secret`.
    pub token_secret: String,
    /// A label put on every backing container, e.g. `("msc-test", tag)`.
    pub docker_label: (String, String),
    /// Registry reference → local Docker image (unlisted references are used as given).
    pub image_map: Vec<(String, String)>,
    /// Added to every answer.
    pub latency_ms: u64,
    /// Every Nth served request answers `UNAVAILABLE`.
    pub unavailable_every: Option<u32>,
    /// Every Nth served request answers `RESOURCE_EXHAUSTED`.
    pub resource_exhausted_every: Option<u32>,
    /// The first N successful `SandboxCreate`s answer `UNAVAILABLE` anyway (the sandbox
    /// exists: a lost answer).
    pub lost_create_answers: u32,
}

impl Default for ModalSimOptions {
    fn default() -> Self {
        Self {
            token_id: "ak-modalsim".to_owned(),
            token_secret: "as-modalsim-secret".to_owned(),
            docker_label: ("msc-test".to_owned(), "modalsim".to_owned()),
            image_map: Vec::new(),
            latency_ms: 0,
            unavailable_every: None,
            resource_exhausted_every: None,
            lost_create_answers: 0,
        }
    }
}

/// A running simulator. Call [`ModalSim::stop`] to remove its containers and images.
pub struct ModalSim {
    /// Base URL, `http://127.0.0.1:PORT` (plain HTTP/2).
    pub url: String,
    inner: Arc<Inner>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    stopped: bool,
}

impl ModalSim {
    /// Binds a port on 127.0.0.1 and serves both services.
    pub async fn start(opts: ModalSimOptions) -> Result<ModalSim> {
        let docker = Docker::connect_with_unix_defaults()
            .context("connecting to the Docker daemon")?
            .negotiate_version()
            .await
            .context("negotiating the Docker API version")?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let (changed, _) = watch::channel(0u64);
        let inner = Arc::new(Inner {
            opts,
            docker,
            url: url.clone(),
            instance: random_id("", 12),
            world: Mutex::new(World::default()),
            changed,
            violations: Mutex::new(Vec::new()),
            counts: Mutex::new(BTreeMap::new()),
            served: AtomicU64::new(0),
            lost_answers: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            background: Mutex::new(Vec::new()),
        });
        let (tx, rx) = oneshot::channel::<()>();
        let cp = ModalClientServer::new(Cp(inner.clone()))
            .max_decoding_message_size(100 << 20)
            .max_encoding_message_size(100 << 20);
        let router = TaskCommandRouterServer::new(Router(inner.clone()))
            .max_decoding_message_size(100 << 20);
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(cp)
                .add_service(router)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(ModalSim {
            url,
            inner,
            shutdown: Some(tx),
            server,
            stopped: false,
        })
    }

    /// The `network_access` the live sandbox tagged `mcp_computer=computer` was created
    /// with: its type's name (`OPEN`, `BLOCKED`, `ALLOWLIST`; `None`: not set), CIDRs and
    /// domains.
    pub fn network_of(&self, computer: &str) -> Option<Option<SimNetwork>> {
        let w = lock(&self.inner.world);
        w.sandboxes
            .values()
            .filter(|x| x.finished.is_none())
            .find(|x| {
                x.tags
                    .iter()
                    .any(|(k, v)| k == "mcp_computer" && v == computer)
            })
            .map(|x| {
                x.network.as_ref().map(|n| {
                    (
                        n.network_access_type()
                            .as_str_name()
                            .trim_start_matches("NETWORK_ACCESS_TYPE_")
                            .to_owned(),
                        n.allowed_cidrs.clone(),
                        n.allowed_domains.clone(),
                    )
                })
            })
    }

    /// Every problem seen so far in requests (and unsimulated features used).
    pub fn violations(&self) -> Vec<String> {
        lock(&self.inner.violations).clone()
    }

    /// Requests received, by RPC name (before auth, validation and faults).
    pub fn request_counts(&self) -> BTreeMap<String, u32> {
        lock(&self.inner.counts).clone()
    }

    /// Sandboxes that have not finished.
    pub fn live_sandboxes(&self) -> usize {
        lock(&self.inner.world)
            .sandboxes
            .values()
            .filter(|s| s.finished.is_none())
            .count()
    }

    /// Stops serving and removes every backing container and snapshot image.
    pub async fn stop(mut self) {
        close(&self.inner.closing, &self.inner.background);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(Duration::from_secs(2), &mut self.server)
            .await
            .is_err()
        {
            self.server.abort();
        }
        cleanup(
            &self.inner.docker,
            &self.inner.instance,
            self.snapshot_images(),
        )
        .await;
        self.stopped = true;
    }

    fn snapshot_images(&self) -> Vec<String> {
        lock(&self.inner.world).snapshots.clone()
    }
}

impl Drop for ModalSim {
    /// Without [`ModalSim::stop`] (e.g. a test panicked): stop serving and clean up from a
    /// helper thread, so no runtime is needed.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        close(&self.inner.closing, &self.inner.background);
        self.server.abort();
        let instance = self.inner.instance.clone();
        let images = self.snapshot_images();
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(docker) = Docker::connect_with_unix_defaults()
                    && let Ok(docker) = docker.negotiate_version().await
                {
                    cleanup(&docker, &instance, images).await;
                }
            });
        });
        let _ = thread.join();
    }
}

async fn cleanup(docker: &Docker, instance: &str, images: Vec<String>) {
    remove_labelled(docker, &format!("modalsim.instance={instance}")).await;
    for image in images {
        let opts = RemoveImageOptions {
            force: true,
            ..Default::default()
        };
        let _ = docker.remove_image(&image, Some(opts), None).await;
    }
}

// ----- state -----

struct Inner {
    opts: ModalSimOptions,
    docker: Docker,
    url: String,
    instance: String,
    world: Mutex<World>,
    /// Bumped on every change of a sandbox's state (waiters watch it).
    changed: watch::Sender<u64>,
    violations: Mutex<Vec<String>>,
    counts: Mutex<BTreeMap<String, u32>>,
    served: AtomicU64,
    lost_answers: AtomicU64,
    closing: AtomicBool,
    background: Mutex<Vec<AbortHandle>>,
}

#[derive(Default)]
struct World {
    apps: HashMap<String, String>,
    app_by_name: HashMap<String, String>,
    images: HashMap<String, SimImage>,
    image_by_ref: HashMap<String, String>,
    sandboxes: HashMap<String, Sandbox>,
    tasks: HashMap<String, String>,
    jwts: HashMap<String, String>,
    execs: HashMap<String, Arc<Exec>>,
    snapshots: Vec<String>,
}

struct SimImage {
    /// Docker image to run.
    local: String,
    result: pb::GenericResult,
    /// Whether the build result was reported yet (the first answer says "building").
    reported: bool,
}

/// A sandbox's `network_access` as [`ModalSim::network_of`] gives it: the type's name,
/// CIDRs and domains.
pub type SimNetwork = (String, Vec<String>, Vec<String>);

struct Sandbox {
    app_id: String,
    name: String,
    tags: Vec<(String, String)>,
    created_at: f64,
    task_id: String,
    image_id: String,
    container: String,
    timeout_secs: u32,
    finished: Option<pb::GenericResult>,
    finished_at: f64,
    /// `definition.network_access` as created.
    network: Option<pb::NetworkAccess>,
}

struct Exec {
    task_id: String,
    request: tcr::TaskExecStartRequest,
    state: Mutex<ExecState>,
    changed: watch::Sender<u64>,
    stdin: mpsc::UnboundedSender<StdinMsg>,
}

#[derive(Default)]
struct ExecState {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    output_done: bool,
    exit: Option<tcr::task_exec_wait_response::ExitStatus>,
    stdin_written: u64,
    stdin_closed: bool,
}

enum StdinMsg {
    Data(Vec<u8>),
    Eof,
}

impl Exec {
    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

impl Inner {
    fn violation(&self, v: String) {
        lock(&self.violations).push(v);
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(fut);
        let mut bg = lock(&self.background);
        bg.retain(|h| !h.is_finished());
        bg.push(h.abort_handle());
    }

    /// Counts the call, checks the control-plane metadata, delays, injects faults.
    async fn admit_cp(&self, rpc: &str, md: &MetadataMap) -> Result<(), Status> {
        *lock(&self.counts).entry(rpc.to_owned()).or_default() += 1;
        let get = |k: &str| md.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if get("x-modal-token-id").is_empty() || get("x-modal-token-secret").is_empty() {
            return Err(Status::unauthenticated(
                "Token missing. Could not authenticate client. If you have token credentials, \
                 see modal.com/docs/reference/modal.config for setup help. If you are a new \
                 user, register an account at modal.com, then run `modal token new`.",
            ));
        }
        if get("x-modal-token-id") != self.opts.token_id
            || get("x-modal-token-secret") != self.opts.token_secret
        {
            return Err(Status::unauthenticated(
                "Token ID or secret is invalid. Please check your Modal token credentials.",
            ));
        }
        if get("x-modal-client-version").is_empty() {
            self.violation(format!("{rpc}: x-modal-client-version missing"));
            return Err(Status::failed_precondition(
                "Unsupported client version: the x-modal-client-version header is missing",
            ));
        }
        match get("x-modal-client-type").parse::<i32>() {
            Ok(1..=3 | 5..=9) => {}
            _ => self.violation(format!(
                "{rpc}: x-modal-client-type {:?} is not a ClientType",
                get("x-modal-client-type")
            )),
        }
        self.delay_and_fault().await
    }

    /// Counts the call, checks the router JWT against `task_id`, delays, injects faults.
    async fn admit_router(&self, rpc: &str, md: &MetadataMap, task_id: &str) -> Result<(), Status> {
        *lock(&self.counts).entry(rpc.to_owned()).or_default() += 1;
        if md.get("x-modal-token-secret").is_some() || md.get("x-modal-token-id").is_some() {
            self.violation(format!(
                "{rpc}: Modal token credentials sent to the command router (a worker)"
            ));
        }
        let auth = md
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let Some(jwt) = auth.strip_prefix("Bearer ") else {
            self.violation(format!("{rpc}: no `authorization: Bearer <jwt>`"));
            return Err(Status::unauthenticated("missing bearer token"));
        };
        let owner = lock(&self.world).jwts.get(jwt).cloned();
        match owner {
            None => return Err(Status::unauthenticated("invalid or expired JWT")),
            Some(t) if t != task_id => {
                self.violation(format!("{rpc}: JWT of task {t} used for task {task_id:?}"));
                return Err(Status::permission_denied("JWT is not valid for this task"));
            }
            Some(_) => {}
        }
        self.delay_and_fault().await
    }

    async fn delay_and_fault(&self) -> Result<(), Status> {
        if self.opts.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.opts.latency_ms)).await;
        }
        let n = self.served.fetch_add(1, Ordering::SeqCst) + 1;
        match injected_fault(
            n,
            self.opts.resource_exhausted_every,
            self.opts.unavailable_every,
        ) {
            Some(429) => Err(Status::resource_exhausted(
                "simulator: injected RESOURCE_EXHAUSTED (rate limit)",
            )),
            Some(_) => Err(Status::unavailable("simulator: injected UNAVAILABLE")),
            None => Ok(()),
        }
    }

    /// An INVALID_ARGUMENT the client should never cause.
    fn invalid(&self, rpc: &str, msg: impl Into<String>) -> Status {
        let msg = msg.into();
        self.violation(format!("{rpc}: {msg}"));
        Status::invalid_argument(msg)
    }

    fn unsimulated(&self, rpc: &str, what: &str) {
        self.violation(format!("{rpc}: unsimulated: {what}"));
    }

    fn check_env(&self, rpc: &str, env: &str) -> Result<(), Status> {
        if env.is_empty() {
            Ok(())
        } else {
            self.unsimulated(rpc, "environment_name");
            Err(Status::not_found(format!("Environment '{env}' not found")))
        }
    }

    /// Ends a sandbox once (later results are ignored) and removes its container.
    async fn finish(self: &Arc<Self>, sandbox_id: &str, result: pb::GenericResult) {
        let container = {
            let mut w = lock(&self.world);
            let Some(s) = w.sandboxes.get_mut(sandbox_id) else {
                return;
            };
            if s.finished.is_none() {
                s.finished = Some(result);
                s.finished_at = now();
            }
            s.container.clone()
        };
        self.bump();
        // Stop the execs' waiters: a removed container ends their output.
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let _ = self.docker.remove_container(&container, Some(opts)).await;
    }

    fn local_image(&self, reference: &str) -> String {
        self.opts
            .image_map
            .iter()
            .find(|(from, _)| from == reference)
            .map(|(_, to)| to.clone())
            .unwrap_or_else(|| reference.to_owned())
    }

    async fn start_container(
        self: &Arc<Self>,
        sandbox_id: &str,
        image: &str,
        def: &pb::Sandbox,
    ) -> Result<String> {
        let name = format!("modalsim-{}-{}", self.instance, sandbox_id.to_lowercase());
        let labels = HashMap::from([
            (
                self.opts.docker_label.0.clone(),
                self.opts.docker_label.1.clone(),
            ),
            ("modalsim.instance".to_owned(), self.instance.clone()),
            ("modalsim.sandbox".to_owned(), sandbox_id.to_owned()),
        ]);
        let entrypoint = if def.entrypoint_args.is_empty() {
            vec!["/bin/sh".to_owned(), "-c".to_owned(), KEEPALIVE.to_owned()]
        } else {
            def.entrypoint_args.clone()
        };
        let res = def.resources.clone().unwrap_or_default();
        let env: Vec<String> = def
            .environment_variables
            .as_ref()
            .map(|m| m.contents.iter().map(|(k, v)| format!("{k}={v}")).collect())
            .unwrap_or_default();
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint: Some(entrypoint),
            cmd: Some(Vec::new()),
            env: Some(env),
            labels: Some(labels),
            working_dir: def.workdir.clone(),
            host_config: Some(HostConfig {
                init: Some(true),
                // BLOCKED is enforced (no network at all); allow lists are checked and kept.
                network_mode: def
                    .network_access
                    .as_ref()
                    .filter(|n| {
                        n.network_access_type() == pb::network_access::NetworkAccessType::Blocked
                    })
                    .map(|_| "none".to_owned()),
                nano_cpus: (res.milli_cpu > 0).then(|| i64::from(res.milli_cpu) * 1_000_000),
                memory: (res.memory_mb > 0).then(|| i64::from(res.memory_mb) << 20),
                ..Default::default()
            }),
            ..Default::default()
        };
        let opts = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        self.docker
            .create_container(Some(opts), body)
            .await
            .with_context(|| format!("creating a container from image {image:?}"))?;
        self.docker
            .start_container(&name, None)
            .await
            .context("starting the container")?;
        Ok(name)
    }

    /// Ends the sandbox when its main process exits or its timeout passes.
    fn watch_sandbox(self: &Arc<Self>, sandbox_id: String, container: String, timeout_secs: u32) {
        let this = self.clone();
        let id = sandbox_id.clone();
        self.spawn(async move {
            let mut wait = this.docker.wait_container(&container, None);
            let code = match wait.next().await {
                Some(Ok(r)) => r.status_code,
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
                _ => -1,
            };
            let status = if code == 0 {
                GenericStatus::Success
            } else {
                GenericStatus::Failure
            };
            let result = pb::GenericResult {
                status: status as i32,
                exitcode: code as i32,
                exception: if code == 0 {
                    String::new()
                } else {
                    format!("Sandbox's main process exited with code {code}")
                },
                ..Default::default()
            };
            this.finish(&id, result).await;
        });
        let this = self.clone();
        self.spawn(async move {
            tokio::time::sleep(Duration::from_secs(u64::from(timeout_secs))).await;
            let result = pb::GenericResult {
                status: GenericStatus::Timeout as i32,
                exception: format!("Sandbox timed out after {timeout_secs}s"),
                ..Default::default()
            };
            this.finish(&sandbox_id, result).await;
        });
    }

    fn sandbox_info(&self, id: &str, s: &Sandbox) -> pb::SandboxInfo {
        pb::SandboxInfo {
            id: id.to_owned(),
            created_at: s.created_at,
            task_info: Some(pb::TaskInfo {
                id: s.task_id.clone(),
                started_at: s.created_at,
                finished_at: s.finished_at,
                result: s.finished.clone(),
                sandbox_id: id.to_owned(),
                ..Default::default()
            }),
            app_id: s.app_id.clone(),
            tags: s
                .tags
                .iter()
                .map(|(k, v)| pb::SandboxTag {
                    tag_name: k.clone(),
                    tag_value: v.clone(),
                })
                .collect(),
            name: s.name.clone(),
            image_id: s.image_id.clone(),
            timeout_secs: s.timeout_secs,
            ..Default::default()
        }
    }

    fn issue_jwt(&self, task_id: &str) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let exp = now() as u64 + 3600;
        let payload = b64.encode(format!(r#"{{"task_id":"{task_id}","exp":{exp}}}"#));
        let sig = b64.encode(random_id("", 32));
        let jwt = format!("{header}.{payload}.{sig}");
        lock(&self.world)
            .jwts
            .insert(jwt.clone(), task_id.to_owned());
        jwt
    }

    /// The exec `exec_id` of `task_id`.
    fn exec(&self, rpc: &str, task_id: &str, exec_id: &str) -> Result<Arc<Exec>, Status> {
        if exec_id.is_empty() {
            return Err(self.invalid(rpc, "exec_id is empty"));
        }
        let e = lock(&self.world).execs.get(exec_id).cloned();
        match e {
            Some(e) if e.task_id == task_id => Ok(e),
            _ => Err(Status::not_found(format!("Exec {exec_id} not found"))),
        }
    }

    /// Runs an exec's process (see the module docs).
    async fn run_exec(
        self: Arc<Self>,
        exec: Arc<Exec>,
        container: String,
        mut stdin_rx: mpsc::UnboundedReceiver<StdinMsg>,
    ) {
        let req = exec.request.clone();
        let pidfile = format!("/dev/shm/.modalsim-exec-{}", random_id("", 16));
        let mut cmd = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            format!("{{ echo $$ > {pidfile}; }} 2>/dev/null; exec \"$@\""),
            "sh".to_owned(),
        ];
        cmd.extend(req.command_args.iter().cloned());
        let opts = CreateExecOptions::<String> {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(cmd),
            env: Some(req.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: req.workdir.clone(),
            ..Default::default()
        };
        let finish = |code: tcr::task_exec_wait_response::ExitStatus, msg: Option<String>| {
            let mut st = lock(&exec.state);
            if let Some(m) = msg {
                st.stderr.extend_from_slice(m.as_bytes());
            }
            st.output_done = true;
            st.exit = Some(code);
            drop(st);
            exec.bump();
        };
        use tcr::task_exec_wait_response::ExitStatus;
        let started = match self.docker.create_exec(&container, opts).await {
            Ok(e) => match self.docker.start_exec(&e.id, None).await {
                Ok(StartExecResults::Attached { output, input }) => Ok((e.id, output, input)),
                Ok(StartExecResults::Detached) => Err("exec started detached".to_owned()),
                Err(err) => Err(err.to_string()),
            },
            Err(err) => Err(err.to_string()),
        };
        let (docker_exec, mut output, mut input) = match started {
            Ok(x) => x,
            Err(e) => {
                finish(
                    ExitStatus::Code(126),
                    Some(format!("modalsim: exec failed: {e}\n")),
                );
                return;
            }
        };
        let writer = tokio::spawn(async move {
            while let Some(m) = stdin_rx.recv().await {
                match m {
                    StdinMsg::Data(d) => {
                        if input.write_all(&d).await.is_err() {
                            break;
                        }
                        let _ = input.flush().await;
                    }
                    StdinMsg::Eof => break,
                }
            }
            let _ = input.shutdown().await;
        });
        let deadline = req
            .timeout_secs
            .map(|s| tokio::time::Instant::now() + Duration::from_secs(u64::from(s)));
        let push = |chunk: LogOutput| {
            let mut st = lock(&exec.state);
            let (is_err, bytes) = match chunk {
                LogOutput::StdOut { message } | LogOutput::Console { message } => (false, message),
                LogOutput::StdErr { message } => (true, message),
                LogOutput::StdIn { .. } => return,
            };
            let to_stdout =
                !is_err || req.stderr_config == tcr::TaskExecStderrConfig::Stdout as i32;
            let keep = if to_stdout {
                is_err || req.stdout_config == tcr::TaskExecStdoutConfig::Pipe as i32
            } else {
                req.stderr_config == tcr::TaskExecStderrConfig::Pipe as i32
            };
            if keep {
                let buf = if to_stdout {
                    &mut st.stdout
                } else {
                    &mut st.stderr
                };
                let room = OUTPUT_LIMIT.saturating_sub(buf.len());
                buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            drop(st);
            exec.bump();
        };
        let mut timed_out = false;
        loop {
            let next = match deadline {
                Some(d) => match tokio::time::timeout_at(d, output.next()).await {
                    Ok(x) => x,
                    Err(_) => {
                        timed_out = true;
                        break;
                    }
                },
                None => output.next().await,
            };
            match next {
                Some(Ok(chunk)) => push(chunk),
                Some(Err(_)) | None => break,
            }
        }
        if timed_out {
            let kill = format!(
                "kt() {{ kill -STOP $1 2>/dev/null; for c in $(cat /proc/$1/task/*/children 2>/dev/null); do kt $c; done; kill -9 $1 2>/dev/null; }}; \
                 p=$(cat {pidfile} 2>/dev/null); [ -n \"$p\" ] && kt $p; rm -f {pidfile}"
            );
            let _ = self.run_quiet(&container, &kill).await;
            let grace = tokio::time::Instant::now() + Duration::from_secs(2);
            while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(grace, output.next()).await {
                push(chunk);
            }
            writer.abort();
            finish(ExitStatus::Signal(9), None);
            return;
        }
        writer.abort();
        // The output can end before the process does (it closed its pipes).
        let code = loop {
            match self.docker.inspect_exec(&docker_exec).await {
                Ok(info) if info.running != Some(true) => break info.exit_code.unwrap_or(-1),
                Ok(_) => {}
                Err(_) => break -1,
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() > d) {
                break 137;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        finish(ExitStatus::Code(code as i32), None);
        let _ = self
            .run_quiet(&container, &format!("rm -f {pidfile}"))
            .await;
    }

    /// Runs a shell snippet in the container and waits for it (output discarded).
    async fn run_quiet(&self, container: &str, script: &str) -> Result<()> {
        let opts = CreateExecOptions::<String> {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
            ..Default::default()
        };
        let exec = self.docker.create_exec(container, opts).await?;
        if let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec.id, None).await?
        {
            while output.next().await.is_some() {}
        }
        Ok(())
    }
}

// ----- control plane -----

struct Cp(Arc<Inner>);

#[tonic::async_trait]
impl ModalClient for Cp {
    async fn app_get_or_create(
        &self,
        req: Request<pb::AppGetOrCreateRequest>,
    ) -> Result<Response<pb::AppGetOrCreateResponse>, Status> {
        const RPC: &str = "AppGetOrCreate";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        s.check_env(RPC, &r.environment_name)?;
        if !valid_name(&r.app_name) {
            return Err(s.invalid(RPC, format!("Invalid App name {:?}", r.app_name)));
        }
        let create = match pb::ObjectCreationType::try_from(r.object_creation_type) {
            Ok(pb::ObjectCreationType::Unspecified) => false,
            Ok(pb::ObjectCreationType::CreateIfMissing) => true,
            _ => {
                s.unsimulated(
                    RPC,
                    "object_creation_type other than UNSPECIFIED/CREATE_IF_MISSING",
                );
                return Err(Status::invalid_argument("unsupported object_creation_type"));
            }
        };
        let mut w = lock(&s.world);
        if let Some(id) = w.app_by_name.get(&r.app_name) {
            return Ok(Response::new(pb::AppGetOrCreateResponse {
                app_id: id.clone(),
            }));
        }
        if !create {
            return Err(Status::not_found(format!(
                "App '{}' not found in environment 'main'",
                r.app_name
            )));
        }
        let id = random_id("ap-", 22);
        w.apps.insert(id.clone(), r.app_name.clone());
        w.app_by_name.insert(r.app_name, id.clone());
        Ok(Response::new(pb::AppGetOrCreateResponse { app_id: id }))
    }

    async fn image_get_or_create(
        &self,
        req: Request<pb::ImageGetOrCreateRequest>,
    ) -> Result<Response<pb::ImageGetOrCreateResponse>, Status> {
        const RPC: &str = "ImageGetOrCreate";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        if !lock(&s.world).apps.contains_key(&r.app_id) {
            return Err(Status::not_found(format!("App {} not found", r.app_id)));
        }
        let Some(image) = r.image else {
            return Err(s.invalid(RPC, "image is required"));
        };
        if r.builder_version.is_empty() {
            s.violation(format!(
                "{RPC}: builder_version is empty (the SDKs always send one)"
            ));
        }
        if !image.base_images.is_empty()
            || !image.context_files.is_empty()
            || !image.secret_ids.is_empty()
            || !image.context_mount_id.is_empty()
            || image.build_function.is_some()
            || !image.volume_mounts.is_empty()
            || !image.build_args.is_empty()
            || r.force_build
            || !r.build_function_id.is_empty()
        {
            s.unsimulated(RPC, "image layers other than a bare registry image");
        }
        if image.image_registry_config.as_ref().is_some_and(|c| {
            !matches!(
                c.registry_auth_type(),
                pb::RegistryAuthType::Unspecified | pb::RegistryAuthType::Public
            )
        }) {
            s.unsimulated(RPC, "private registry auth");
        }
        let reference = match image.dockerfile_commands.as_slice() {
            [one] => match one.strip_prefix("FROM ") {
                Some(r) if !r.trim().is_empty() => r.trim().to_owned(),
                _ => return Err(s.invalid(RPC, format!("unsupported Dockerfile command {one:?}"))),
            },
            other => {
                return Err(s.invalid(
                    RPC,
                    format!("expected exactly [\"FROM <image>\"], got {other:?}"),
                ));
            }
        };
        let existing = lock(&s.world).image_by_ref.get(&reference).cloned();
        if let Some(id) = existing {
            let mut w = lock(&s.world);
            let img = w
                .images
                .get_mut(&id)
                .ok_or_else(|| Status::internal("image vanished"))?;
            let result = img.reported.then(|| img.result.clone());
            return Ok(Response::new(pb::ImageGetOrCreateResponse {
                image_id: id,
                result,
                metadata: None,
            }));
        }
        let local = s.local_image(&reference);
        let result = match s.docker.inspect_image(&local).await {
            Ok(_) => pb::GenericResult {
                status: GenericStatus::Success as i32,
                ..Default::default()
            },
            Err(e) => pb::GenericResult {
                status: GenericStatus::Failure as i32,
                exception: format!(
                    "Image build failed: could not pull {reference:?} (simulator: local image \
                     {local:?} is not available: {e})"
                ),
                ..Default::default()
            },
        };
        let id = random_id("im-", 22);
        let mut w = lock(&s.world);
        w.images.insert(
            id.clone(),
            SimImage {
                local,
                result,
                reported: false,
            },
        );
        w.image_by_ref.insert(reference, id.clone());
        Ok(Response::new(pb::ImageGetOrCreateResponse {
            image_id: id,
            result: None,
            metadata: None,
        }))
    }

    type ImageJoinStreamingStream = BoxStream<pb::ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        req: Request<pb::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        const RPC: &str = "ImageJoinStreaming";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        let result = {
            let mut w = lock(&s.world);
            let Some(img) = w.images.get_mut(&r.image_id) else {
                return Err(Status::not_found(format!("Image {} not found", r.image_id)));
            };
            img.reported = true;
            img.result.clone()
        };
        let item = pb::ImageJoinStreamingResponse {
            result: Some(result),
            entry_id: "1".to_owned(),
            eof: true,
            ..Default::default()
        };
        Ok(Response::new(Box::pin(futures_util::stream::iter([Ok(
            item,
        )]))))
    }

    async fn sandbox_create(
        &self,
        req: Request<pb::SandboxCreateRequest>,
    ) -> Result<Response<pb::SandboxCreateResponse>, Status> {
        const RPC: &str = "SandboxCreate";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        if !r.environment_name.is_empty() {
            s.violation(format!("{RPC}: environment_name is deprecated"));
        }
        let Some(def) = r.definition else {
            return Err(s.invalid(RPC, "definition is required"));
        };
        check_definition(s, RPC, &def)?;
        if def.timeout_secs == 0 {
            s.violation(format!(
                "{RPC}: timeout_secs is 0 (the SDKs always send one)"
            ));
        }
        if def.timeout_secs > MAX_SANDBOX_TIMEOUT {
            return Err(Status::invalid_argument(format!(
                "Sandbox timeout must be at most {MAX_SANDBOX_TIMEOUT} seconds (24 hours)"
            )));
        }
        for t in &r.tags {
            if t.tag_name.is_empty() {
                return Err(s.invalid(RPC, "a tag has an empty name"));
            }
        }
        let name = def.name.clone().unwrap_or_default();
        if def.name.is_some() && !valid_name(&name) {
            return Err(Status::invalid_argument(format!(
                "Invalid Sandbox name {name:?}: names may contain only alphanumeric characters, \
                 dashes, periods, and underscores, and must be at most 64 characters"
            )));
        }
        let local = {
            let w = lock(&s.world);
            if !w.apps.contains_key(&r.app_id) {
                return Err(Status::not_found(format!("App {} not found", r.app_id)));
            }
            let Some(img) = w.images.get(&def.image_id) else {
                return Err(Status::not_found(format!(
                    "Image {} not found",
                    def.image_id
                )));
            };
            if img.result.status() != GenericStatus::Success {
                return Err(Status::failed_precondition(format!(
                    "Image {} failed to build",
                    def.image_id
                )));
            }
            if !name.is_empty()
                && w.sandboxes
                    .values()
                    .any(|x| x.app_id == r.app_id && x.name == name && x.finished.is_none())
            {
                return Err(Status::already_exists(format!(
                    "Sandbox with name '{name}' already exists in the app"
                )));
            }
            img.local.clone()
        };
        let id = random_id("sb-", 22);
        let task_id = random_id("ta-", 22);
        let timeout_secs = if def.timeout_secs == 0 {
            300
        } else {
            def.timeout_secs
        };
        let container = s
            .start_container(&id, &local, &def)
            .await
            .map_err(|e| Status::internal(format!("simulator: {e:#}")))?;
        {
            let mut w = lock(&s.world);
            w.tasks.insert(task_id.clone(), id.clone());
            w.sandboxes.insert(
                id.clone(),
                Sandbox {
                    app_id: r.app_id.clone(),
                    name,
                    tags: r
                        .tags
                        .into_iter()
                        .map(|t| (t.tag_name, t.tag_value))
                        .collect(),
                    created_at: now(),
                    task_id,
                    image_id: def.image_id.clone(),
                    container: container.clone(),
                    timeout_secs,
                    finished: None,
                    finished_at: 0.0,
                    network: def.network_access.clone(),
                },
            );
        }
        s.watch_sandbox(id.clone(), container, timeout_secs);
        if s.lost_answers.fetch_add(1, Ordering::SeqCst) < u64::from(s.opts.lost_create_answers) {
            return Err(Status::unavailable("simulator: injected lost answer"));
        }
        Ok(Response::new(pb::SandboxCreateResponse {
            sandbox_id: id,
            metadata: Some(pb::SandboxHandleMetadata {
                result: None,
                app_id: r.app_id,
            }),
        }))
    }

    async fn sandbox_get_command_router_access(
        &self,
        req: Request<pb::SandboxGetCommandRouterAccessRequest>,
    ) -> Result<Response<pb::SandboxGetCommandRouterAccessResponse>, Status> {
        const RPC: &str = "SandboxGetCommandRouterAccess";
        use pb::sandbox_get_command_router_access_request::Target;
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let task_id = {
            let w = lock(&s.world);
            match req.into_inner().target {
                Some(Target::SandboxId(id)) => w
                    .sandboxes
                    .get(&id)
                    .map(|x| x.task_id.clone())
                    .ok_or_else(|| Status::not_found(format!("Sandbox {id} not found")))?,
                Some(Target::TaskId(t)) if w.tasks.contains_key(&t) => t,
                Some(Target::TaskId(t)) => {
                    return Err(Status::not_found(format!("Task {t} not found")));
                }
                None => return Err(s.invalid(RPC, "target is required")),
            }
        };
        Ok(Response::new(pb::SandboxGetCommandRouterAccessResponse {
            jwt: s.issue_jwt(&task_id),
            url: s.url.clone(),
            worker_ipv4_address: String::new(),
        }))
    }

    async fn sandbox_get_task_id(
        &self,
        req: Request<pb::SandboxGetTaskIdRequest>,
    ) -> Result<Response<pb::SandboxGetTaskIdResponse>, Status> {
        const RPC: &str = "SandboxGetTaskId";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        if r.timeout.is_none() {
            s.violation(format!(
                "{RPC}: timeout missing (new clients must always provide one)"
            ));
        }
        let w = lock(&s.world);
        let Some(sb) = w.sandboxes.get(&r.sandbox_id) else {
            return Err(Status::not_found(format!(
                "Sandbox {} not found",
                r.sandbox_id
            )));
        };
        Ok(Response::new(pb::SandboxGetTaskIdResponse {
            task_id: Some(sb.task_id.clone()),
            task_result: sb.finished.clone(),
        }))
    }

    async fn sandbox_list(
        &self,
        req: Request<pb::SandboxListRequest>,
    ) -> Result<Response<pb::SandboxListResponse>, Status> {
        const RPC: &str = "SandboxList";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        s.check_env(RPC, &r.environment_name)?;
        let w = lock(&s.world);
        if !r.app_id.is_empty() && !w.apps.contains_key(&r.app_id) {
            return Err(Status::not_found(format!("App {} not found", r.app_id)));
        }
        let mut found: Vec<(&String, &Sandbox)> = w
            .sandboxes
            .iter()
            .filter(|(_, x)| r.app_id.is_empty() || x.app_id == r.app_id)
            .filter(|(_, x)| r.include_finished || x.finished.is_none())
            .filter(|(_, x)| r.before_timestamp == 0.0 || x.created_at < r.before_timestamp)
            .filter(|(_, x)| {
                r.tags.iter().all(|t| {
                    x.tags
                        .iter()
                        .any(|(k, v)| *k == t.tag_name && *v == t.tag_value)
                })
            })
            .collect();
        found.sort_by(|a, b| b.1.created_at.total_cmp(&a.1.created_at));
        let sandboxes = found
            .into_iter()
            .take(LIST_PAGE)
            .map(|(id, x)| s.sandbox_info(id, x))
            .collect();
        Ok(Response::new(pb::SandboxListResponse { sandboxes }))
    }

    async fn sandbox_snapshot_fs(
        &self,
        req: Request<pb::SandboxSnapshotFsRequest>,
    ) -> Result<Response<pb::SandboxSnapshotFsResponse>, Status> {
        const RPC: &str = "SandboxSnapshotFs";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        let container = {
            let w = lock(&s.world);
            let Some(sb) = w.sandboxes.get(&r.sandbox_id) else {
                return Err(Status::not_found(format!(
                    "Sandbox {} not found",
                    r.sandbox_id
                )));
            };
            if sb.finished.is_some() {
                return Err(Status::failed_precondition(format!(
                    "Sandbox {} has already finished",
                    r.sandbox_id
                )));
            }
            sb.container.clone()
        };
        // Not paused: with commands still streaming, pausing for the commit can deadlock
        // this Docker (an exec cleaned up while the container is frozen).
        let opts = CommitContainerOptions {
            container: Some(container),
            pause: false,
            ..Default::default()
        };
        let committed = s
            .docker
            .commit_container(opts, ContainerConfig::default())
            .await
            .map_err(|e| Status::internal(format!("simulator: docker commit failed: {e}")))?;
        let id = random_id("im-", 22);
        let mut w = lock(&s.world);
        w.snapshots.push(committed.id.clone());
        w.images.insert(
            id.clone(),
            SimImage {
                local: committed.id,
                result: pb::GenericResult {
                    status: GenericStatus::Success as i32,
                    ..Default::default()
                },
                reported: true,
            },
        );
        Ok(Response::new(pb::SandboxSnapshotFsResponse {
            image_id: id,
            result: Some(pb::GenericResult {
                status: GenericStatus::Success as i32,
                ..Default::default()
            }),
            image_metadata: None,
        }))
    }

    async fn sandbox_tags_set(
        &self,
        req: Request<pb::SandboxTagsSetRequest>,
    ) -> Result<Response<()>, Status> {
        const RPC: &str = "SandboxTagsSet";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        s.check_env(RPC, &r.environment_name)?;
        if r.tags.iter().any(|t| t.tag_name.is_empty()) {
            return Err(s.invalid(RPC, "a tag has an empty name"));
        }
        let mut w = lock(&s.world);
        let Some(sb) = w.sandboxes.get_mut(&r.sandbox_id) else {
            return Err(Status::not_found(format!(
                "Sandbox {} not found",
                r.sandbox_id
            )));
        };
        sb.tags = r
            .tags
            .into_iter()
            .map(|t| (t.tag_name, t.tag_value))
            .collect();
        Ok(Response::new(()))
    }

    async fn sandbox_terminate(
        &self,
        req: Request<pb::SandboxTerminateRequest>,
    ) -> Result<Response<pb::SandboxTerminateResponse>, Status> {
        const RPC: &str = "SandboxTerminate";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let id = req.into_inner().sandbox_id;
        let existing = {
            let w = lock(&s.world);
            let Some(sb) = w.sandboxes.get(&id) else {
                return Err(Status::not_found(format!("Sandbox {id} not found")));
            };
            sb.finished.clone()
        };
        if existing.is_none() {
            let result = pb::GenericResult {
                status: GenericStatus::Terminated as i32,
                exception: "Sandbox was terminated".to_owned(),
                ..Default::default()
            };
            s.finish(&id, result).await;
        }
        Ok(Response::new(pb::SandboxTerminateResponse {
            existing_result: existing,
        }))
    }

    async fn sandbox_wait(
        &self,
        req: Request<pb::SandboxWaitRequest>,
    ) -> Result<Response<pb::SandboxWaitResponse>, Status> {
        const RPC: &str = "SandboxWait";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let r = req.into_inner();
        let secs = if r.timeout.is_finite() {
            r.timeout.clamp(0.0, 55.0)
        } else {
            0.0
        };
        let timeout = Duration::from_secs_f32(secs);
        let mut rx = s.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (result, app_id) = {
                let w = lock(&s.world);
                let Some(sb) = w.sandboxes.get(&r.sandbox_id) else {
                    return Err(Status::not_found(format!(
                        "Sandbox {} not found",
                        r.sandbox_id
                    )));
                };
                (sb.finished.clone(), sb.app_id.clone())
            };
            let timed_out = result.is_none()
                && tokio::time::timeout_at(deadline, rx.changed())
                    .await
                    .is_err();
            if result.is_some() || timed_out {
                return Ok(Response::new(pb::SandboxWaitResponse {
                    result: result.clone(),
                    metadata: Some(pb::SandboxHandleMetadata { result, app_id }),
                }));
            }
        }
    }

    async fn task_get_command_router_access(
        &self,
        req: Request<pb::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<pb::TaskGetCommandRouterAccessResponse>, Status> {
        const RPC: &str = "TaskGetCommandRouterAccess";
        let s = &self.0;
        s.admit_cp(RPC, req.metadata()).await?;
        let task_id = req.into_inner().task_id;
        if task_id.is_empty() {
            return Err(s.invalid(RPC, "task_id is empty"));
        }
        if !lock(&s.world).tasks.contains_key(&task_id) {
            return Err(Status::not_found(format!("Task {task_id} not found")));
        }
        Ok(Response::new(pb::TaskGetCommandRouterAccessResponse {
            jwt: s.issue_jwt(&task_id),
            url: s.url.clone(),
        }))
    }
}

/// `definition.network_access` as Modal checks it: a known type; lists only with
/// `ALLOWLIST`, CIDRs that parse and domain names; not with the deprecated `block_network`.
#[allow(deprecated)]
fn check_network(s: &Inner, rpc: &str, d: &pb::Sandbox) -> Result<(), Status> {
    use pb::network_access::NetworkAccessType as T;
    let Some(n) = &d.network_access else {
        return Ok(());
    };
    if d.block_network {
        return Err(s.invalid(rpc, "block_network and network_access are both set"));
    }
    let lists = !n.allowed_cidrs.is_empty() || !n.allowed_domains.is_empty();
    match T::try_from(n.network_access_type) {
        Ok(T::Allowlist) => {}
        Ok(T::Open | T::Blocked) if !lists => {}
        Ok(T::Open | T::Blocked) => {
            return Err(s.invalid(
                rpc,
                "allowed_cidrs/allowed_domains need network_access_type ALLOWLIST",
            ));
        }
        _ => return Err(s.invalid(rpc, "network_access.network_access_type is unspecified")),
    }
    for c in &n.allowed_cidrs {
        let (ip, bits) = c.split_once('/').unwrap_or((c, ""));
        if ip.parse::<std::net::IpAddr>().is_err() || bits.parse::<u8>().map_or(true, |b| b > 128) {
            return Err(Status::invalid_argument(format!(
                "Invalid CIDR {c:?} in allowed_cidrs"
            )));
        }
    }
    for dom in &n.allowed_domains {
        let bare = dom.strip_prefix("*.").unwrap_or(dom);
        let ok = bare.contains('.')
            && bare.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !ok {
            return Err(Status::invalid_argument(format!(
                "Invalid domain {dom:?} in allowed_domains"
            )));
        }
    }
    Ok(())
}

/// Records the definition fields a correct client of ours never sets.
#[allow(deprecated)]
fn check_definition(s: &Inner, rpc: &str, d: &pb::Sandbox) -> Result<(), Status> {
    if d.image_id.is_empty() {
        return Err(s.invalid(rpc, "definition.image_id is empty"));
    }
    check_network(s, rpc, d)?;
    let unsimulated: [(&str, bool); 19] = [
        ("mount_ids", !d.mount_ids.is_empty()),
        ("secret_ids", !d.secret_ids.is_empty()),
        ("nfs_mounts", !d.nfs_mounts.is_empty()),
        ("s3_mounts", !d.s3_mounts.is_empty()),
        ("cloud_bucket_mounts", !d.cloud_bucket_mounts.is_empty()),
        ("volume_mounts", !d.volume_mounts.is_empty()),
        ("pty_info", d.pty_info.is_some()),
        ("open_ports", d.open_ports_oneof.is_some()),
        ("block_network", d.block_network),
        ("proxy_id", d.proxy_id.is_some()),
        ("enable_snapshot", d.enable_snapshot),
        ("readiness_probe", d.readiness_probe.is_some()),
        ("idle_timeout_secs", d.idle_timeout_secs.is_some()),
        ("i6pn_enabled", d.i6pn_enabled),
        ("runtime", d.runtime.is_some()),
        ("custom_domain", !d.custom_domain.is_empty()),
        ("include_oidc_identity_token", d.include_oidc_identity_token),
        (
            "inbound_cidr_allowlist",
            !d.inbound_cidr_allowlist.is_empty(),
        ),
        (
            "experimental_options",
            !d.experimental_options.is_empty() || !d.experimental_options_v2.is_empty(),
        ),
    ];
    for (name, set) in unsimulated {
        if set {
            s.unsimulated(rpc, &format!("definition.{name}"));
        }
    }
    let internal: [(&str, bool); 6] = [
        ("runtime_debug", d.runtime_debug),
        ("worker_id", !d.worker_id.is_empty()),
        ("snapshot_version", d.snapshot_version.is_some()),
        ("runsc_runtime_version", d.runsc_runtime_version.is_some()),
        (
            "_restore_instance_type",
            !d.restore_instance_type.is_empty(),
        ),
        ("preload_path_prefixes", !d.preload_path_prefixes.is_empty()),
    ];
    for (name, set) in internal {
        if set {
            s.violation(format!("{rpc}: definition.{name} is internal to Modal"));
        }
    }
    if d.direct_sandbox_commands_enabled {
        s.violation(format!(
            "{rpc}: definition.direct_sandbox_commands_enabled is deprecated"
        ));
    }
    if d.cloud_provider != 0 {
        s.violation(format!(
            "{rpc}: definition.cloud_provider is deprecated (cloud_provider_str)"
        ));
    }
    if let Some(g) = d.resources.as_ref().and_then(|r| r.gpu_config.as_ref())
        && g.count > 0
        && g.gpu_type.is_empty()
    {
        return Err(s.invalid(rpc, "gpu_config.count without gpu_type"));
    }
    Ok(())
}

// ----- command router -----

struct Router(Arc<Inner>);

#[tonic::async_trait]
impl TaskCommandRouter for Router {
    async fn task_exec_start(
        &self,
        req: Request<tcr::TaskExecStartRequest>,
    ) -> Result<Response<tcr::TaskExecStartResponse>, Status> {
        const RPC: &str = "TaskExecStart";
        let s = &self.0;
        s.admit_router(RPC, req.metadata(), &req.get_ref().task_id)
            .await?;
        let r = req.into_inner();
        if r.exec_id.is_empty() {
            return Err(s.invalid(RPC, "exec_id is empty"));
        }
        if !looks_like_uuid(&r.exec_id) {
            s.violation(format!(
                "{RPC}: exec_id {:?} is not a UUID (the SDKs send one)",
                r.exec_id
            ));
        }
        if r.command_args.is_empty() {
            return Err(s.invalid(RPC, "command_args is empty"));
        }
        if tcr::TaskExecStdoutConfig::try_from(r.stdout_config).is_err()
            || tcr::TaskExecStderrConfig::try_from(r.stderr_config).is_err()
        {
            return Err(s.invalid(RPC, "unknown stdout_config/stderr_config"));
        }
        if !r.secret_ids.is_empty() {
            s.unsimulated(RPC, "secret_ids");
        }
        if r.pty_info.is_some() {
            s.unsimulated(RPC, "pty_info");
        }
        if r.runtime_debug {
            s.violation(format!("{RPC}: runtime_debug is internal to Modal"));
        }
        if !r.container_id.is_empty() {
            return Err(Status::not_found(format!(
                "Container {} not found",
                r.container_id
            )));
        }
        if r.timeout_secs == Some(0) {
            return Err(s.invalid(RPC, "timeout_secs is 0"));
        }
        let (container, finished) = {
            let w = lock(&s.world);
            let sb = w
                .tasks
                .get(&r.task_id)
                .and_then(|id| w.sandboxes.get(id))
                .ok_or_else(|| Status::not_found(format!("Task {} not found", r.task_id)))?;
            (sb.container.clone(), sb.finished.is_some())
        };
        if finished {
            return Err(Status::failed_precondition(format!(
                "Task {} has already finished",
                r.task_id
            )));
        }
        let (stdin_tx, stdin_rx) = mpsc::unbounded_channel();
        let (changed, _) = watch::channel(0u64);
        let exec = Arc::new(Exec {
            task_id: r.task_id.clone(),
            request: r.clone(),
            state: Mutex::new(ExecState::default()),
            changed,
            stdin: stdin_tx,
        });
        {
            let mut w = lock(&s.world);
            if let Some(e) = w.execs.get(&r.exec_id) {
                if e.request != r {
                    s.violation(format!(
                        "{RPC}: exec_id {} reused for another command",
                        r.exec_id
                    ));
                    return Err(Status::already_exists(format!(
                        "Exec {} already exists",
                        r.exec_id
                    )));
                }
                return Ok(Response::new(tcr::TaskExecStartResponse {}));
            }
            w.execs.insert(r.exec_id.clone(), exec.clone());
        }
        s.spawn(s.clone().run_exec(exec, container, stdin_rx));
        Ok(Response::new(tcr::TaskExecStartResponse {}))
    }

    async fn task_exec_stdin_write(
        &self,
        req: Request<tcr::TaskExecStdinWriteRequest>,
    ) -> Result<Response<tcr::TaskExecStdinWriteResponse>, Status> {
        const RPC: &str = "TaskExecStdinWrite";
        let s = &self.0;
        s.admit_router(RPC, req.metadata(), &req.get_ref().task_id)
            .await?;
        let r = req.into_inner();
        let exec = s.exec(RPC, &r.task_id, &r.exec_id)?;
        let mut st = lock(&exec.state);
        let end = r.offset + r.data.len() as u64;
        if r.offset > st.stdin_written {
            drop(st);
            return Err(s.invalid(
                RPC,
                format!(
                    "offset {} leaves a gap after byte {}",
                    r.offset,
                    exec_written(&exec)
                ),
            ));
        }
        if st.stdin_closed {
            if end > st.stdin_written {
                drop(st);
                return Err(s.invalid(RPC, "write after EOF"));
            }
            return Ok(Response::new(tcr::TaskExecStdinWriteResponse {}));
        }
        if end > st.stdin_written {
            let skip = (st.stdin_written - r.offset) as usize;
            let _ = exec.stdin.send(StdinMsg::Data(r.data[skip..].to_vec()));
            st.stdin_written = end;
        }
        if r.eof {
            st.stdin_closed = true;
            let _ = exec.stdin.send(StdinMsg::Eof);
        }
        Ok(Response::new(tcr::TaskExecStdinWriteResponse {}))
    }

    type TaskExecStdioReadStream = BoxStream<tcr::TaskExecStdioReadResponse>;

    async fn task_exec_stdio_read(
        &self,
        req: Request<tcr::TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        const RPC: &str = "TaskExecStdioRead";
        let s = &self.0;
        s.admit_router(RPC, req.metadata(), &req.get_ref().task_id)
            .await?;
        let r = req.into_inner();
        let exec = s.exec(RPC, &r.task_id, &r.exec_id)?;
        let stderr = match tcr::TaskExecStdioFileDescriptor::try_from(r.file_descriptor) {
            Ok(tcr::TaskExecStdioFileDescriptor::Stdout) => false,
            Ok(tcr::TaskExecStdioFileDescriptor::Stderr) => true,
            Err(_) => return Err(s.invalid(RPC, "unknown file_descriptor")),
        };
        let rx = exec.changed.subscribe();
        let stream = futures_util::stream::unfold(
            (exec, rx, r.offset as usize),
            move |(exec, mut rx, offset)| async move {
                loop {
                    let (chunk, done) = {
                        let st = lock(&exec.state);
                        let buf = if stderr { &st.stderr } else { &st.stdout };
                        let end = buf.len().min(offset.saturating_add(CHUNK));
                        let chunk = buf.get(offset..end).map(<[u8]>::to_vec).unwrap_or_default();
                        (chunk, st.output_done)
                    };
                    if !chunk.is_empty() {
                        let next = offset + chunk.len();
                        let item = tcr::TaskExecStdioReadResponse { data: chunk };
                        return Some((Ok(item), (exec, rx, next)));
                    }
                    if done {
                        return None;
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn task_exec_wait(
        &self,
        req: Request<tcr::TaskExecWaitRequest>,
    ) -> Result<Response<tcr::TaskExecWaitResponse>, Status> {
        const RPC: &str = "TaskExecWait";
        let s = &self.0;
        s.admit_router(RPC, req.metadata(), &req.get_ref().task_id)
            .await?;
        let r = req.into_inner();
        let exec = s.exec(RPC, &r.task_id, &r.exec_id)?;
        let mut rx = exec.changed.subscribe();
        loop {
            if let Some(exit) = lock(&exec.state).exit {
                return Ok(Response::new(tcr::TaskExecWaitResponse {
                    exit_status: Some(exit),
                }));
            }
            if rx.changed().await.is_err() {
                return Err(Status::unavailable("exec vanished"));
            }
        }
    }
}

fn exec_written(e: &Exec) -> u64 {
    lock(&e.state).stdin_written
}

// ----- helpers -----

/// Modal's object names: letters, digits, `-`, `_`, `.`, 1 to 64 characters.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn looks_like_uuid(s: &str) -> bool {
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn random_id(prefix: &str, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let body: String = (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{body}")
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

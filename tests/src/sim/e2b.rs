//! A local simulator of E2B: the control plane REST API (`https://api.e2b.app`) and envd's
//! Connect-RPC `process.Process` service as reached through the shared sandbox host
//! (`https://sandbox.e2b.app` plus `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers), backed
//! by real Docker containers.
//!
//! Two listeners on 127.0.0.1: [`E2bSim::api_url`] serves the control plane,
//! [`E2bSim::sandbox_url`] serves envd for every sandbox (routed by `E2b-Sandbox-Id`).
//!
//! ## Control plane
//!
//! Every request is validated against the published OpenAPI description
//! (`specs/e2b/openapi.yml`, YAML, see [`super::openapi`]) before it is served: unknown
//! paths or methods, missing or mistyped parameters, undeclared query parameters, request
//! bodies that do not match their schema (wrong types, missing required fields, undeclared
//! or deprecated properties), and calls of operations the document marks `deprecated`
//! (e.g. `POST /sandboxes/{sandboxID}/resume`; `connect` replaces it) are recorded (see
//! [`E2bSim::violations`]); all but the deprecated-operation case are answered
//! `400 {"code": 400, "message": "simulator: ..."}`. Query parameters declared as arrays
//! with `explode: false` (`state=running,paused`) are checked item by item. Answers are
//! validated too (error statuses the document does not list against `Error`).
//!
//! Served: `POST /sandboxes`, `GET /v2/sandboxes`, `GET /sandboxes` (v1, running only),
//! `GET /sandboxes/{id}`, `DELETE /sandboxes/{id}`, `POST /sandboxes/{id}/timeout`,
//! `/refreshes`, `/pause`, `/resume`, `/connect`, `GET /health`. Other operations answer
//! `501` and are recorded as unsimulated.
//!
//! Behaviour (from the spec, the SDKs and e2b-dev/infra; choices are marked *choice*):
//! - auth: `X-API-Key: <api_key>`, else `401 {"code": 401, "message": "Invalid API key"}`.
//! - create: `templateID` must be a key of `template_images` (else
//!   `404 template '<id>' not found`, as infra's template cache answers; the spec lists no
//!   404 there). The container is created and started before the answer (`201 Sandbox`).
//!   `timeout` seconds (default 15, at most 86 400, else 400 — *choice*: the Pro limit)
//!   from now; `envdAccessToken` only when `secure: true` (envd then requires it);
//!   `domain` is `null` (the default domain); `envdVersion` is [`ENVD_VERSION`]. `envVars`
//!   become the environment of every command. `network`, `mcp`, `iam`, `volumeMounts`
//!   are accepted but not simulated (using them is recorded). Sandbox ids are 20
//!   lower-case alphanumerics.
//! - capacity: the first `capacity_errors` creates fail `503 {"error_code":
//!   "sandbox_capacity_unavailable"}`.
//! - list v2: `metadata` is the SDK's encoding (`k=v&k2=v2` with each key and value
//!   URL-encoded, the whole string URL-encoded again as the parameter value); every pair
//!   must match; a pair without `=` is `400`. `state` defaults to running and paused.
//!   `template` filters by template id. `order` by start (default `desc`). `limit`
//!   (1..=100, default 100) and `nextToken` (opaque; an unknown one is `400`): when more
//!   items follow, the `X-Next-Token` header carries the token of the next page.
//!   `X-Total-Running` counts the matching running sandboxes when running ones were asked
//!   for. `startedAfter` is not simulated (recorded).
//! - get: `SandboxDetail` with `state`, `endAt`, `lifecycle {autoResume, onTimeout}`,
//!   `cpuCount` 2, `memoryMB` 512, `diskSizeMB` 10240 (*choice*: sizes are not enforced).
//!   A killed sandbox is gone: `404`.
//! - timeout: `POST /timeout {timeout}` sets the end to now + timeout (shorter too);
//!   `refreshes {duration}` (default 15 s) only extends. When a running sandbox reaches its
//!   end it is killed, or paused (memory kept) when created with `autoPause: true`. A timer
//!   checks every 200 ms. Paused sandboxes do not expire.
//! - pause: `204`; `{memory: false}` stops the container (files kept, processes gone) and
//!   otherwise `docker pause` keeps everything; `409` when already paused; `404` unknown.
//! - connect `{timeout}`: running → `200 Sandbox`, end = max(end, now + timeout); paused →
//!   resumed, `201 Sandbox`, end = now + timeout. resume `{timeout}` (deprecated): paused →
//!   `201`, running → `409`. A resumed secure sandbox gets a fresh `envdAccessToken` and
//!   the old one stops working (*choice*: stricter than needed, so clients take the token
//!   from every connect answer).
//! - kill: `DELETE` → `204` (running or paused); unknown → `404`.
//! - faults (control plane only): every request that passes validation and auth is counted;
//!   every `rate_limit_every`-th answers `429 {"code": 429, "message": "Rate limit
//!   exceeded..."}` with `Retry-After: 1`, every `error_5xx_every`-th `503`.
//!   `latency_ms` delays every answer of both listeners.
//!
//! ## envd (`process.Process`, Connect protocol, JSON codec)
//!
//! - routing (the edge proxy): `E2b-Sandbox-Id` names the sandbox and `E2b-Sandbox-Port`
//!   must be `49983`. Missing id → violation + `400`; another port → violation + `502`
//!   (nothing listens there); unknown or killed sandbox → `404 {"sandboxId", "message":
//!   "The sandbox was not found"}` (current infra; older proxies answered `502`); a paused
//!   sandbox → `409 {"sandboxId", "message": "The sandbox is paused", "code": 409,
//!   "canAutoResume"}`, unless it was created with `autoResume: {enabled: true}`, then it
//!   is resumed first.
//! - auth (envd): a secure sandbox needs `X-Access-Token: <envdAccessToken>`, else `401
//!   {"code": 401, "message": "unauthorized access, please provide a valid access token or
//!   method signing if supported"}`. `GET /health` is exempt and answers `204`.
//! - `POST /process.Process/Start`: `Content-Type: application/connect+json` (else `415` and
//!   a violation); the body must be exactly one uncompressed envelope
//!   `[0x00][u32 BE length][JSON StartRequest]`. The JSON is checked against
//!   `process.proto` with proto3-JSON rules (lowerCamelCase or original field names, no
//!   field twice, types, at most one member of a oneof, base64 for bytes). Unknown fields
//!   are violations (connect-go would silently drop them). Any violation is answered with
//!   an `invalid_argument` end-of-stream error. `pty` is not simulated (recorded);
//!   `stdin: true` is accepted but input is never delivered (stdin is not attached).
//!   The command runs in the container as `cmd args...` (`docker exec`), with the
//!   sandbox's `envVars` plus `envs`, in `cwd` (a missing directory is an
//!   `invalid_argument` error, like envd's failing `chdir`; default: the image's working
//!   directory, *choice*), as the `Authorization: Basic` user when given (default: the
//!   image's user, *choice*: real sandboxes default to `user`). A missing executable
//!   exits 127 with a shell message on stderr (*choice*: envd fails the start instead).
//!   Answer: `200 application/connect+json`, envelopes `{"event":{"start":{"pid":N}}}`,
//!   `{"event":{"data":{"stdout"|"stderr":"<base64>"}}}` as output arrives, then
//!   `{"event":{"end":{...}}}` exactly as envd builds it from Go's `ProcessState`:
//!   exit 0 → `{"exited":true,"status":"exit status 0"}` (no `exitCode`: proto3 JSON
//!   omits zero values); exit N → `{"exitCode":N,"exited":true,"status":"exit status N",
//!   "error":"exit status N"}`; killed through `SendSignal` → `{"exitCode":-1,"status":
//!   "signal: killed","error":"signal: killed"}` (no `exited`). Then the end-of-stream
//!   envelope (flag `0x02`) `{}`. With `Keepalive-Ping-Interval: <s>` a
//!   `{"event":{"keepalive":{}}}` is sent after that many seconds without output.
//! - `Connect-Timeout-Ms`: when it passes, the process (and its descendants) is killed
//!   and the stream ends, without an end event, with the end-of-stream error
//!   `{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}` — what
//!   envd does, since connect-go's request deadline fires before the process context's.
//! - a sandbox killed (or stopped by a filesystem-only pause) under a running stream ends
//!   it with an `unavailable` end-of-stream error (*choice*; the real connection drops).
//! - files (`envd.yaml`): `GET /files?path=P` → `200 application/octet-stream` with the
//!   whole file; a directory → `400 {"message": "path 'P' is a directory", "code": 400}`;
//!   missing → `404 {"message": "path 'P' does not exist", "code": 404}`; another failure
//!   (permission) → `500`. `POST /files?path=P` with `Content-Type:
//!   application/octet-stream` (multipart is not simulated: a violation) writes the body
//!   to P whole, making missing parents (`mkdir -p`), as the user of the `username` query
//!   or the image's: `200 [{"path", "name", "type": "file"}]`; a directory at P → `400`; a
//!   full disk → `507`. A missing `path` is a violation and `400`. Both run `docker exec`
//!   in the sandbox's container.
//! - unary `filesystem.Filesystem/Stat` (`{"path"}`): `200 {"entry": EntryInfo}` in
//!   proto3 JSON (`size` an int64 string, `mode` Go's `os.FileMode` bits: the permission
//!   bits, plus `1<<31` for a directory and `1<<27` for a symlink), from `stat` without
//!   following a symlink (its `type` is `FILE_TYPE_SYMLINK`); missing → Connect
//!   `not_found`.
//! - unary `process.Process/List` and `SendSignal` (`Content-Type: application/json`,
//!   plain JSON body, checked like Start): `200 {...}` or a Connect error (`404
//!   {"code":"not_found",...}` for an unknown pid, `400 invalid_argument`).
//!   `SIGNAL_SIGKILL` kills the process tree, `SIGNAL_SIGTERM` sends SIGTERM to the pid.
//!   Other envd methods (`Connect`, `SendInput`, `StreamInput`, `Update`, `CloseStdin`,
//!   `filesystem.*`, `/files`) answer `501` and are recorded as unsimulated.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, RemoveContainerOptions, StopContainerOptions,
};
use futures_util::StreamExt;
use rand::Rng;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinHandle};

use super::openapi::{Matched, RequestParts, Spec};
use super::{close, injected_fault, lock, path, query, remove_labelled, shut_down};

/// The E2B control plane description saved in `specs/` (YAML).
const E2B_SPEC: &str = include_str!("../../../specs/e2b/openapi.yml");

/// The envd version the simulator reports (`envdVersion`).
pub const ENVD_VERSION: &str = "0.5.4";

/// The port envd listens on inside a sandbox (`E2b-Sandbox-Port`).
pub const ENVD_PORT: &str = "49983";

/// Keeps a sandbox's container up.
const KEEPALIVE: &str = "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done";

const UNAUTHORIZED_ENVD: &str =
    "unauthorized access, please provide a valid access token or method signing if supported";

/// How the simulator behaves.
#[derive(Clone, Debug)]
pub struct E2bSimOptions {
    /// The only accepted API key (`X-API-Key`).
    pub api_key: String,
    /// A label put on every backing container, e.g. `("msc-test", tag)`.
    pub docker_label: (String, String),
    /// Template id → local Docker image, e.g. `("base", "debian:bookworm-slim")`. Images
    /// are never pulled.
    pub template_images: Vec<(String, String)>,
    /// Added to every answer.
    pub latency_ms: u64,
    /// Every Nth served control-plane request answers 429.
    pub rate_limit_every: Option<u32>,
    /// Every Nth served control-plane request answers 503.
    pub error_5xx_every: Option<u32>,
    /// The first N sandbox creates fail with `sandbox_capacity_unavailable`.
    pub capacity_errors: u32,
}

impl Default for E2bSimOptions {
    fn default() -> Self {
        Self {
            api_key: "e2b_simulator_key".to_owned(),
            docker_label: ("msc-test".to_owned(), "e2bsim".to_owned()),
            template_images: vec![("base".to_owned(), "debian:bookworm-slim".to_owned())],
            latency_ms: 0,
            rate_limit_every: None,
            error_5xx_every: None,
            capacity_errors: 0,
        }
    }
}

impl E2bSimOptions {
    /// What the tests use: `api_key`, containers labelled `msc-test=tag`, the `base`
    /// template served by the local `debian:bookworm-slim`, no faults.
    pub fn debian(api_key: &str, tag: &str) -> Self {
        Self {
            api_key: api_key.to_owned(),
            docker_label: ("msc-test".to_owned(), tag.to_owned()),
            template_images: vec![("base".to_owned(), "debian:bookworm-slim".to_owned())],
            latency_ms: 0,
            rate_limit_every: None,
            error_5xx_every: None,
            capacity_errors: 0,
        }
    }
}

/// `SandboxNetworkConfig`'s egress lists as the API checks them: `allowOut` entries are
/// CIDRs, addresses or domain names (`*.` allowed); `denyOut` entries CIDRs or addresses
/// only ("Domain names are not supported for deny rules").
fn check_network(n: &Value) -> std::result::Result<(), String> {
    let obj = n.as_object().ok_or("network must be an object")?;
    let list = |key: &str| -> std::result::Result<Vec<String>, String> {
        match obj.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("network.{key} entries must be strings"))
                })
                .collect(),
            Some(_) => Err(format!("network.{key} must be an array of strings")),
        }
    };
    let is_net = |e: &str| {
        let (ip, bits) = e.split_once('/').unwrap_or((e, "32"));
        ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok_and(|b| b <= 128)
    };
    let is_domain = |e: &str| {
        let e = e.strip_prefix("*.").unwrap_or(e);
        !e.is_empty()
            && e.contains('.')
            && e.split('.')
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    for e in list("allowOut")? {
        if !is_net(&e) && !is_domain(&e) {
            return Err(format!(
                "invalid allowOut entry {e:?}: expected a CIDR block, an IP address or a domain name"
            ));
        }
    }
    for e in list("denyOut")? {
        if !is_net(&e) {
            return Err(format!(
                "invalid denyOut entry {e:?}: Domain names are not supported for deny rules"
            ));
        }
    }
    Ok(())
}

/// A running simulator. Call [`E2bSim::stop`] to remove its containers.
pub struct E2bSim {
    /// Control plane base URL, e.g. `http://127.0.0.1:PORT` (paths start with `/sandboxes`).
    pub api_url: String,
    /// The shared envd host, e.g. `http://127.0.0.1:PORT`; requests carry
    /// `E2b-Sandbox-Id` and `E2b-Sandbox-Port: 49983`.
    pub sandbox_url: String,
    inner: Arc<Inner>,
    shutdown: Vec<oneshot::Sender<()>>,
    servers: Vec<JoinHandle<()>>,
    stopped: bool,
}

impl E2bSim {
    /// Binds two ports on 127.0.0.1 and serves the control plane and envd.
    pub async fn start(opts: E2bSimOptions) -> Result<E2bSim> {
        let loaded = loaded()?;
        let docker = Docker::connect_with_unix_defaults()
            .context("connecting to the Docker daemon")?
            .negotiate_version()
            .await
            .context("negotiating the Docker API version")?;
        let inner = Arc::new(Inner {
            opts,
            spec: &loaded.spec,
            doc: &loaded.doc,
            docker,
            instance: hex_id(12),
            world: Mutex::new(World::default()),
            violations: Mutex::new(Vec::new()),
            counts: Mutex::new(BTreeMap::new()),
            served: AtomicU64::new(0),
            creates: AtomicU32::new(0),
            closing: AtomicBool::new(false),
            background: Mutex::new(Vec::new()),
        });
        let mut shutdown = Vec::new();
        let mut servers = Vec::new();
        let mut urls = Vec::new();
        for envd in [false, true] {
            let app = if envd {
                Router::new().fallback(handle_envd)
            } else {
                Router::new().fallback(handle_api)
            }
            .with_state(inner.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            urls.push(format!("http://{}", listener.local_addr()?));
            let (tx, rx) = oneshot::channel::<()>();
            shutdown.push(tx);
            servers.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await;
            }));
        }
        let me = inner.clone();
        inner.spawn(async move { me.expiry_loop().await });
        let sandbox_url = urls.pop().unwrap_or_default();
        let api_url = urls.pop().unwrap_or_default();
        Ok(E2bSim {
            api_url,
            sandbox_url,
            inner,
            shutdown,
            servers,
            stopped: false,
        })
    }

    /// Every validation failure seen so far (requests that do not match the API
    /// description or `process.proto`, unsimulated features, and answers of the simulator
    /// that do not match).
    /// The network settings the live sandbox of computer `computer` (its `mcp_computer`
    /// tag) was created with: `allow_internet_access` and `network`.
    pub fn network_of(&self, computer: &str) -> Option<(Option<bool>, Option<Value>)> {
        let w = lock(&self.inner.world);
        w.sandboxes
            .values()
            .find(|s| s.metadata.get("mcp_computer").and_then(Value::as_str) == Some(computer))
            .map(|s| (s.allow_internet_access, s.network.clone()))
    }

    pub fn violations(&self) -> Vec<String> {
        lock(&self.inner.violations).clone()
    }

    /// Requests by `METHOD /path/template` (envd: `POST /process.Process/Start`, ...;
    /// unmatched paths are counted as sent).
    pub fn request_counts(&self) -> BTreeMap<String, u32> {
        lock(&self.inner.counts).clone()
    }

    /// Stops serving and removes every backing container.
    pub async fn stop(mut self) {
        let inner = self.inner.clone();
        let op_locks: Vec<_> = lock(&inner.world)
            .sandboxes
            .values()
            .map(|s| s.op.clone())
            .collect();
        shut_down(&inner.closing, &inner.background, op_locks).await;
        remove_labelled(
            &inner.docker,
            &format!("e2bsim.instance={}", inner.instance),
        )
        .await;
        for tx in self.shutdown.drain(..) {
            let _ = tx.send(());
        }
        for server in &mut self.servers {
            if tokio::time::timeout(Duration::from_secs(2), &mut *server)
                .await
                .is_err()
            {
                server.abort();
            }
        }
        self.stopped = true;
    }
}

impl Drop for E2bSim {
    /// Without [`E2bSim::stop`] (e.g. a test panicked): stop serving and remove the
    /// containers from a helper thread, so no runtime is needed.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        close(&self.inner.closing, &self.inner.background);
        for s in &self.servers {
            s.abort();
        }
        let instance = self.inner.instance.clone();
        let cleanup = std::thread::spawn(move || {
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
                    remove_labelled(&docker, &format!("e2bsim.instance={instance}")).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// The bundled E2B description, parsed once. Array query parameters with
/// `explode: false` are rewritten to comma-separated strings of their item schema, which
/// is how [`Spec`] checks such lists.
pub fn spec() -> Result<&'static Spec> {
    loaded().map(|l| &l.spec)
}

/// The parsed description and the document it came from.
struct Loaded {
    spec: Spec,
    doc: Value,
}

fn loaded() -> Result<&'static Loaded> {
    static LOADED: OnceLock<std::result::Result<Loaded, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| load_spec(E2B_SPEC).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("bundled E2B OpenAPI document: {e}"))
}

fn load_spec(yaml: &str) -> Result<Loaded> {
    let mut doc: Value = serde_norway::from_str(yaml).context("E2B OpenAPI YAML")?;
    let rewrite = |p: &mut Value| {
        let array = p.pointer("/schema/type").and_then(Value::as_str) == Some("array");
        if p.get("in").and_then(Value::as_str) == Some("query")
            && array
            && p.get("explode").and_then(Value::as_bool) == Some(false)
            && let Some(items) = p.pointer("/schema/items").cloned()
            && let Some(obj) = p.as_object_mut()
        {
            obj.insert("schema".to_owned(), items);
            let d = obj
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let d = format!("{d} (comma-separated)");
            obj.insert("description".to_owned(), Value::String(d));
        }
    };
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for item in paths.values_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for (_, op) in item.iter_mut() {
                let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
                    continue;
                };
                params.iter_mut().for_each(rewrite);
            }
        }
    }
    if let Some(params) = doc
        .pointer_mut("/components/parameters")
        .and_then(Value::as_object_mut)
    {
        params.values_mut().for_each(rewrite);
    }
    let spec = Spec::from_json(&serde_json::to_string(&doc)?)?;
    Ok(Loaded { spec, doc })
}

/// Shared state of one simulator.
struct Inner {
    opts: E2bSimOptions,
    spec: &'static Spec,
    /// The description as JSON (for what [`Spec`] does not expose).
    doc: &'static Value,
    docker: Docker,
    /// Labels this simulator's containers (`e2bsim.instance`).
    instance: String,
    world: Mutex<World>,
    violations: Mutex<Vec<String>>,
    counts: Mutex<BTreeMap<String, u32>>,
    served: AtomicU64,
    creates: AtomicU32,
    closing: AtomicBool,
    background: Mutex<Vec<AbortHandle>>,
}

#[derive(Default)]
struct World {
    sandboxes: BTreeMap<String, Sandbox>,
    seq: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SbState {
    Running,
    Paused,
}

struct Sandbox {
    id: String,
    template_id: String,
    container: String,
    state: SbState,
    /// Paused with `docker pause` (memory kept) rather than stopped.
    paused_memory: bool,
    metadata: Map<String, Value>,
    env_vars: Vec<String>,
    started_at: SystemTime,
    end_at: SystemTime,
    auto_pause: bool,
    auto_resume: bool,
    token: Option<String>,
    allow_internet_access: Option<bool>,
    /// `network` as created (its egress lists), returned by `GET /sandboxes/{id}`.
    network: Option<Value>,
    seq: u64,
    /// Serializes the Docker lifecycle operations of this sandbox.
    op: Arc<tokio::sync::Mutex<()>>,
    /// Running processes by pid.
    processes: BTreeMap<u32, Proc>,
}

struct Proc {
    config: Value,
    tag: Option<String>,
    /// Set when `SendSignal` signalled it.
    signalled: Option<&'static str>,
}

impl Sandbox {
    fn state_str(&self) -> &'static str {
        match self.state {
            SbState::Running => "running",
            SbState::Paused => "paused",
        }
    }

    fn sandbox_json(&self) -> Value {
        let mut v = json!({
            "templateID": self.template_id,
            "sandboxID": self.id,
            "clientID": "6532622b",
            "envdVersion": ENVD_VERSION,
            "domain": Value::Null,
        });
        if let Some(t) = &self.token {
            v["envdAccessToken"] = json!(t);
        }
        v
    }

    fn listed_json(&self) -> Value {
        json!({
            "templateID": self.template_id,
            "sandboxID": self.id,
            "clientID": "6532622b",
            "startedAt": rfc3339(self.started_at),
            "endAt": rfc3339(self.end_at),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 10240,
            "metadata": self.metadata,
            "state": self.state_str(),
            "envdVersion": ENVD_VERSION,
        })
    }

    fn detail_json(&self) -> Value {
        let mut v = self.listed_json();
        v["domain"] = Value::Null;
        v["lifecycle"] = json!({
            "autoResume": self.auto_resume,
            "onTimeout": if self.auto_pause { "pause" } else { "kill" },
        });
        if let Some(t) = &self.token {
            v["envdAccessToken"] = json!(t);
        }
        if let Some(a) = self.allow_internet_access {
            v["allowInternetAccess"] = json!(a);
        }
        if let Some(n) = &self.network {
            v["network"] = n.clone();
        }
        v
    }
}

/// One control-plane answer before it becomes an HTTP response.
struct Reply {
    status: u16,
    body: Option<Value>,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body: Some(body),
            headers: Vec::new(),
        }
    }

    fn error(status: u16, msg: impl Into<String>) -> Reply {
        Reply::json(status, json!({ "code": status, "message": msg.into() }))
    }

    fn empty(status: u16) -> Reply {
        Reply {
            status,
            body: None,
            headers: Vec::new(),
        }
    }
}

fn json_response(status: u16, body: &Value, content_type: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", content_type)
        .body(Body::from(serde_json::to_vec(body).unwrap_or_default()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn handle_api(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let reply = inner.serve_api(req).await;
    if inner.opts.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(inner.opts.latency_ms)).await;
    }
    let mut b = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for (k, v) in reply.headers {
        b = b.header(k, v);
    }
    let body = match reply.body {
        Some(v) => {
            b = b.header("content-type", "application/json; charset=utf-8");
            Body::from(serde_json::to_vec(&v).unwrap_or_default())
        }
        None => Body::empty(),
    };
    b.body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn handle_envd(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    if inner.opts.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(inner.opts.latency_ms)).await;
    }
    inner.serve_envd(req).await
}

impl Inner {
    fn violation(&self, v: String) {
        lock(&self.violations).push(v);
    }

    fn count(&self, key: &str) {
        *lock(&self.counts).entry(key.to_owned()).or_default() += 1;
    }

    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(fut);
        let mut bg = lock(&self.background);
        bg.retain(|h| !h.is_finished());
        bg.push(h.abort_handle());
    }

    // ----- control plane -----

    async fn serve_api(self: &Arc<Self>, req: Request) -> Reply {
        let (parts, body) = req.into_parts();
        let body = match axum::body::to_bytes(body, 16 << 20).await {
            Ok(b) => b,
            Err(e) => return Reply::error(400, format!("simulator: unreadable body: {e}")),
        };
        let headers = parts.headers.clone();
        let header = move |name: &str| -> Option<String> {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let method = parts.method.as_str().to_owned();
        let path = parts.uri.path().to_owned();
        let checked = self.spec.check_request(&RequestParts {
            method: &method,
            path: &path,
            query: parts.uri.query(),
            header: &header,
            body: &body,
        });
        let matched = match checked {
            Ok(m) => m,
            Err(r) => {
                let key = r.template.unwrap_or_else(|| format!("{method} {path}"));
                self.count(&key);
                let what = r.problems.join("; ");
                self.violation(format!("{key}: {what}"));
                return Reply::error(400, format!("simulator: {what}"));
            }
        };
        let key = format!("{} {}", matched.op.method, matched.op.template);
        self.count(&key);
        if self.operation_deprecated(&matched) {
            self.violation(format!(
                "{key}: the operation is deprecated in the API description"
            ));
        }

        if header("x-api-key").as_deref() != Some(self.opts.api_key.as_str()) {
            return self.checked(&matched, Reply::error(401, "Invalid API key"));
        }

        let n = self.served.fetch_add(1, Ordering::SeqCst) + 1;
        match injected_fault(n, self.opts.rate_limit_every, self.opts.error_5xx_every) {
            Some(429) => {
                let mut r = Reply::error(429, "Rate limit exceeded, please try again later.");
                r.headers.push(("retry-after", "1".to_owned()));
                return self.checked(&matched, r);
            }
            Some(status) => {
                return self.checked(&matched, Reply::error(status, "service unavailable"));
            }
            None => {}
        }

        let reply = match (matched.op.method.as_str(), matched.op.template.as_str()) {
            ("GET", "/health") => Reply::empty(204),
            ("POST", "/sandboxes") => self.create(&matched).await,
            ("GET", "/v2/sandboxes") => self.list(&matched, false),
            ("GET", "/sandboxes") => self.list(&matched, true),
            ("GET", "/sandboxes/{sandboxID}") => self.get(&matched),
            ("DELETE", "/sandboxes/{sandboxID}") => self.kill_api(&matched).await,
            ("POST", "/sandboxes/{sandboxID}/timeout") => self.set_timeout(&matched),
            ("POST", "/sandboxes/{sandboxID}/refreshes") => self.refresh(&matched),
            ("POST", "/sandboxes/{sandboxID}/pause") => self.pause_api(&matched).await,
            ("POST", "/sandboxes/{sandboxID}/resume") => self.resume_api(&matched, false).await,
            ("POST", "/sandboxes/{sandboxID}/connect") => self.resume_api(&matched, true).await,
            _ => {
                self.violation(format!("{key}: unsimulated operation"));
                Reply::error(501, format!("simulator: {key} is not simulated"))
            }
        };
        self.checked(&matched, reply)
    }

    /// The operation's entry in the document (`paths.<template>.<method>`).
    fn operation(&self, m: &Matched<'_>) -> Option<&'static Value> {
        let template = m.op.template.replace('~', "~0").replace('/', "~1");
        self.doc
            .pointer(&format!("/paths/{template}/{}", m.op.method.to_lowercase()))
    }

    fn operation_deprecated(&self, m: &Matched<'_>) -> bool {
        self.operation(m)
            .and_then(|op| op.get("deprecated"))
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// Validates an answer against the response schema; mismatches are recorded. Error
    /// statuses the operation does not declare are checked against `Error` (the schema
    /// every E2B error response uses).
    fn checked(&self, m: &Matched<'_>, reply: Reply) -> Reply {
        let mut problems = self
            .spec
            .check_response(m.op, reply.status, reply.body.as_ref());
        let declared = self
            .operation(m)
            .and_then(|op| op.get("responses"))
            .is_some_and(|r| r.get(reply.status.to_string()).is_some());
        if reply.status >= 400
            && !declared
            && let Some(b) = &reply.body
        {
            problems.extend(self.spec.check_schema("Error", b));
        }
        for p in problems {
            self.violation(format!(
                "simulator answer to {} {} ({}): {p}",
                m.op.method, m.op.template, reply.status
            ));
        }
        reply
    }

    async fn create(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let body = m.body.clone().unwrap_or_default();
        let template = body
            .get("templateID")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let Some(image) = self
            .opts
            .template_images
            .iter()
            .find(|(t, _)| *t == template)
            .map(|(_, i)| i.clone())
        else {
            return Reply::error(404, format!("template '{template}' not found"));
        };
        let timeout = body.get("timeout").and_then(Value::as_u64).unwrap_or(15);
        if timeout > 86_400 {
            return Reply::error(400, "Timeout cannot be greater than 24 hours");
        }
        for unsimulated in ["mcp", "iam", "volumeMounts"] {
            if body.get(unsimulated).is_some_and(|v| !v.is_null()) {
                self.violation(format!("POST /sandboxes: `{unsimulated}` is not simulated"));
            }
        }
        let network = body.get("network").filter(|v| !v.is_null()).cloned();
        if let Some(n) = &network {
            if let Err(why) = check_network(n) {
                return Reply::error(400, why);
            }
            for unsimulated in ["egressProxy", "rules", "maskRequestHost"] {
                if n.get(unsimulated).is_some() {
                    self.violation(format!(
                        "POST /sandboxes: `network.{unsimulated}` is not simulated"
                    ));
                }
            }
        }
        let offline = body.get("allow_internet_access").and_then(Value::as_bool) == Some(false);
        if self.creates.fetch_add(1, Ordering::SeqCst) < self.opts.capacity_errors {
            let mut r = Reply::error(
                503,
                "Failed to place sandbox: no node has capacity for the sandbox, please try again later",
            );
            if let Some(b) = r.body.as_mut() {
                b["error_code"] = json!("sandbox_capacity_unavailable");
            }
            return r;
        }
        let id = sandbox_id();
        let env_vars: Vec<String> = body
            .get("envVars")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let container = match self
            .create_container(&id, &image, env_vars.clone(), offline)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                return Reply::error(500, format!("Failed to create sandbox: {e:#}"));
            }
        };
        let now = SystemTime::now();
        let secure = body.get("secure").and_then(Value::as_bool) == Some(true);
        let sandbox = {
            let mut w = lock(&self.world);
            w.seq += 1;
            Sandbox {
                id: id.clone(),
                template_id: template,
                container,
                state: SbState::Running,
                paused_memory: false,
                metadata: body
                    .get("metadata")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                env_vars,
                started_at: now,
                end_at: now + Duration::from_secs(timeout),
                auto_pause: body.get("autoPause").and_then(Value::as_bool) == Some(true),
                auto_resume: body.pointer("/autoResume/enabled").and_then(Value::as_bool)
                    == Some(true),
                token: secure.then(|| hex_id(64)),
                allow_internet_access: body.get("allow_internet_access").and_then(Value::as_bool),
                network,
                seq: w.seq,
                op: Arc::new(tokio::sync::Mutex::new(())),
                processes: BTreeMap::new(),
            }
        };
        let v = sandbox.sandbox_json();
        if self.closing.load(Ordering::SeqCst) {
            return Reply::error(503, "service unavailable");
        }
        lock(&self.world).sandboxes.insert(id, sandbox);
        Reply::json(201, v)
    }

    fn list(&self, m: &Matched<'_>, v1: bool) -> Reply {
        let mut filters = Vec::new();
        if let Some(meta) = query(m, "metadata")
            && !meta.is_empty()
        {
            for pair in meta.split('&') {
                let Some((k, v)) = pair.split_once('=') else {
                    return Reply::error(400, "invalid key value pair in query");
                };
                filters.push((query_unescape(k), query_unescape(v)));
            }
        }
        let states: Vec<&str> = if v1 {
            vec!["running"]
        } else {
            match query(m, "state") {
                Some(s) => s.split(',').filter(|s| !s.is_empty()).collect(),
                None => vec!["running", "paused"],
            }
        };
        if query(m, "startedAfter").is_some() {
            self.violation("GET /v2/sandboxes: `startedAfter` is not simulated".to_owned());
        }
        let template = query(m, "template");
        let asc = query(m, "order") == Some("asc");
        let limit = query(m, "limit")
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(100);
        let w = lock(&self.world);
        let mut list: Vec<&Sandbox> = w
            .sandboxes
            .values()
            .filter(|s| states.contains(&s.state_str()))
            .filter(|s| template.is_none_or(|t| t == s.template_id))
            .filter(|s| {
                filters
                    .iter()
                    .all(|(k, v)| s.metadata.get(k).and_then(Value::as_str) == Some(v.as_str()))
            })
            .collect();
        list.sort_by_key(|s| s.seq);
        if !asc {
            list.reverse();
        }
        let running = list.iter().filter(|s| s.state == SbState::Running).count();
        if v1 {
            return Reply::json(
                200,
                Value::Array(list.iter().map(|s| s.listed_json()).collect()),
            );
        }
        let start = match query(m, "nextToken") {
            None => 0,
            Some(t) => match t
                .parse::<u64>()
                .ok()
                .and_then(|seq| list.iter().position(|s| s.seq == seq))
            {
                Some(i) => i,
                None => return Reply::error(400, "invalid next token"),
            },
        };
        let end = (start + limit).min(list.len());
        let mut reply = Reply::json(
            200,
            Value::Array(list[start..end].iter().map(|s| s.listed_json()).collect()),
        );
        if let Some(next) = list.get(end) {
            reply.headers.push(("x-next-token", next.seq.to_string()));
        }
        if states.contains(&"running") {
            reply.headers.push(("x-total-running", running.to_string()));
        }
        reply
    }

    fn get(&self, m: &Matched<'_>) -> Reply {
        let id = path(m, "sandboxID");
        match lock(&self.world).sandboxes.get(id) {
            Some(s) => Reply::json(200, s.detail_json()),
            None => not_found(id),
        }
    }

    async fn kill_api(&self, m: &Matched<'_>) -> Reply {
        let id = path(m, "sandboxID");
        if self.kill(id).await {
            Reply::empty(204)
        } else {
            not_found(id)
        }
    }

    fn set_timeout(&self, m: &Matched<'_>) -> Reply {
        let id = path(m, "sandboxID");
        let Some(timeout) = m
            .body
            .as_ref()
            .and_then(|b| b.get("timeout"))
            .and_then(Value::as_u64)
        else {
            return Reply::error(400, "timeout is required");
        };
        if timeout > 86_400 {
            return Reply::error(400, "Timeout cannot be greater than 24 hours");
        }
        let mut w = lock(&self.world);
        match w.sandboxes.get_mut(id) {
            Some(s) if s.state == SbState::Running => {
                s.end_at = SystemTime::now() + Duration::from_secs(timeout);
                Reply::empty(204)
            }
            _ => not_found(id),
        }
    }

    fn refresh(&self, m: &Matched<'_>) -> Reply {
        let id = path(m, "sandboxID");
        let duration = m
            .body
            .as_ref()
            .and_then(|b| b.get("duration"))
            .and_then(Value::as_u64)
            .unwrap_or(15);
        let mut w = lock(&self.world);
        match w.sandboxes.get_mut(id) {
            Some(s) if s.state == SbState::Running => {
                s.end_at = s
                    .end_at
                    .max(SystemTime::now() + Duration::from_secs(duration));
                Reply::empty(204)
            }
            _ => not_found(id),
        }
    }

    async fn pause_api(&self, m: &Matched<'_>) -> Reply {
        let id = path(m, "sandboxID");
        let memory = m
            .body
            .as_ref()
            .and_then(|b| b.get("memory"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        match self.pause(id, memory).await {
            Ok(()) => Reply::empty(204),
            Err(r) => r,
        }
    }

    async fn resume_api(&self, m: &Matched<'_>, connect: bool) -> Reply {
        let id = path(m, "sandboxID");
        let timeout = m
            .body
            .as_ref()
            .and_then(|b| b.get("timeout"))
            .and_then(Value::as_u64)
            .unwrap_or(15);
        if timeout > 86_400 {
            return Reply::error(400, "Timeout cannot be greater than 24 hours");
        }
        let state = lock(&self.world).sandboxes.get(id).map(|s| s.state);
        match state {
            None => not_found(id),
            Some(SbState::Running) if !connect => {
                Reply::error(409, format!("Sandbox {id} is already running"))
            }
            Some(SbState::Running) => {
                let mut w = lock(&self.world);
                match w.sandboxes.get_mut(id) {
                    Some(s) => {
                        s.end_at = s
                            .end_at
                            .max(SystemTime::now() + Duration::from_secs(timeout));
                        Reply::json(200, s.sandbox_json())
                    }
                    None => not_found(id),
                }
            }
            Some(SbState::Paused) => match self.resume(id, timeout).await {
                Ok(v) => Reply::json(201, v),
                Err(r) => r,
            },
        }
    }

    // ----- lifecycle -----

    fn op_lock(&self, id: &str) -> Option<Arc<tokio::sync::Mutex<()>>> {
        lock(&self.world).sandboxes.get(id).map(|s| s.op.clone())
    }

    /// Kills a sandbox (running or paused); false when unknown.
    async fn kill(&self, id: &str) -> bool {
        let Some(op) = self.op_lock(id) else {
            return false;
        };
        let _g = op.lock().await;
        let Some(s) = lock(&self.world).sandboxes.remove(id) else {
            return false;
        };
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let _ = self.docker.remove_container(&s.container, Some(opts)).await;
        true
    }

    async fn pause(&self, id: &str, memory: bool) -> std::result::Result<(), Reply> {
        let Some(op) = self.op_lock(id) else {
            return Err(not_found(id));
        };
        let _g = op.lock().await;
        let container = match lock(&self.world).sandboxes.get(id) {
            None => return Err(not_found(id)),
            Some(s) if s.state == SbState::Paused => {
                return Err(Reply::error(409, format!("Sandbox {id} is already paused")));
            }
            Some(s) => s.container.clone(),
        };
        let result = if memory {
            self.docker
                .pause_container(&container)
                .await
                .map_err(anyhow::Error::from)
        } else {
            let opts = StopContainerOptions {
                t: Some(1),
                ..Default::default()
            };
            self.docker
                .stop_container(&container, Some(opts))
                .await
                .map_err(anyhow::Error::from)
        };
        if let Err(e) = result {
            self.violation(format!("simulator: pausing sandbox {id} failed: {e:#}"));
            return Err(Reply::error(500, format!("Error pausing sandbox: {e:#}")));
        }
        if let Some(s) = lock(&self.world).sandboxes.get_mut(id) {
            s.state = SbState::Paused;
            s.paused_memory = memory;
            s.end_at = SystemTime::now();
        }
        Ok(())
    }

    /// Resumes a paused sandbox; answers its `Sandbox` JSON.
    async fn resume(&self, id: &str, timeout: u64) -> std::result::Result<Value, Reply> {
        let Some(op) = self.op_lock(id) else {
            return Err(not_found(id));
        };
        let _g = op.lock().await;
        let (container, memory) = match lock(&self.world).sandboxes.get(id) {
            None => return Err(not_found(id)),
            Some(s) if s.state == SbState::Running => {
                return Err(Reply::error(
                    409,
                    format!("Sandbox {id} is already running"),
                ));
            }
            Some(s) => (s.container.clone(), s.paused_memory),
        };
        let result = if memory {
            self.docker.unpause_container(&container).await
        } else {
            self.docker.start_container(&container, None).await
        };
        if let Err(e) = result {
            self.violation(format!("simulator: resuming sandbox {id} failed: {e}"));
            return Err(Reply::error(500, format!("Error resuming sandbox: {e}")));
        }
        let mut w = lock(&self.world);
        let Some(s) = w.sandboxes.get_mut(id) else {
            return Err(not_found(id));
        };
        let now = SystemTime::now();
        s.state = SbState::Running;
        s.started_at = now;
        s.end_at = now + Duration::from_secs(timeout);
        if s.token.is_some() {
            s.token = Some(hex_id(64));
        }
        if !memory {
            s.processes.clear();
        }
        Ok(s.sandbox_json())
    }

    /// Kills or pauses running sandboxes whose time is up.
    async fn expiry_loop(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            let now = SystemTime::now();
            let due: Vec<(String, bool)> = lock(&self.world)
                .sandboxes
                .values()
                .filter(|s| s.state == SbState::Running && s.end_at <= now)
                .map(|s| (s.id.clone(), s.auto_pause))
                .collect();
            for (id, auto_pause) in due {
                let me = self.clone();
                self.spawn(async move {
                    // Re-check: a refresh may have come in meanwhile.
                    let still_due = lock(&me.world).sandboxes.get(&id).is_some_and(|s| {
                        s.state == SbState::Running && s.end_at <= SystemTime::now()
                    });
                    if !still_due {
                        return;
                    }
                    if auto_pause {
                        let _ = me.pause(&id, true).await;
                    } else {
                        me.kill(&id).await;
                    }
                });
            }
        }
    }

    // ----- docker -----

    /// `offline`: `allow_internet_access: false`, which the simulator enforces (no network
    /// at all); allow lists are checked and kept, not enforced.
    async fn create_container(
        &self,
        id: &str,
        image: &str,
        env: Vec<String>,
        offline: bool,
    ) -> Result<String> {
        let labels = HashMap::from([
            (
                self.opts.docker_label.0.clone(),
                self.opts.docker_label.1.clone(),
            ),
            ("e2bsim.instance".to_owned(), self.instance.clone()),
            ("e2bsim.sandbox".to_owned(), id.to_owned()),
        ]);
        let name = format!("e2bsim-{}-{id}", self.instance);
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint: Some(vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                KEEPALIVE.to_owned(),
            ]),
            env: Some(env),
            labels: Some(labels),
            hostname: Some(id.to_owned()),
            host_config: Some(HostConfig {
                init: Some(true),
                network_mode: offline.then(|| "none".to_owned()),
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
        if let Err(e) = self.docker.start_container(&name, None).await {
            let opts = RemoveContainerOptions {
                force: true,
                ..Default::default()
            };
            let _ = self.docker.remove_container(&name, Some(opts)).await;
            return Err(e).context("starting the container");
        }
        Ok(name)
    }

    /// Runs a shell snippet in the container and waits for it; true when it exited 0.
    async fn run_quiet(&self, container: &str, argv: Vec<String>) -> Result<bool> {
        let opts = CreateExecOptions::<String> {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv),
            ..Default::default()
        };
        let exec = self.docker.create_exec(container, opts).await?;
        if let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec.id, None).await?
        {
            while output.next().await.is_some() {}
        }
        let info = self.docker.inspect_exec(&exec.id).await?;
        Ok(info.exit_code == Some(0))
    }

    async fn kill_tree(&self, container: &str, pid: u32) {
        let script = format!(
            "kt() {{ kill -STOP $1 2>/dev/null; for c in $(cat /proc/$1/task/*/children 2>/dev/null); do kt $c; done; kill -9 $1 2>/dev/null; }}; kt {pid}"
        );
        let _ = self
            .run_quiet(container, vec!["/bin/sh".into(), "-c".into(), script])
            .await;
    }

    // ----- envd -----

    async fn serve_envd(self: &Arc<Self>, req: Request) -> Response {
        let (parts, body) = req.into_parts();
        let method = parts.method.as_str().to_owned();
        let path = parts.uri.path().to_owned();
        let key = format!("{method} {path}");
        self.count(&key);
        let header = |name: &str| -> Option<String> {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let body = match axum::body::to_bytes(body, 16 << 20).await {
            Ok(b) => b,
            Err(e) => {
                return json_response(400, &json!({"message": e.to_string()}), "application/json");
            }
        };

        // The edge proxy.
        let Some(id) = header("e2b-sandbox-id") else {
            self.violation(format!("{key}: the E2b-Sandbox-Id header is missing"));
            return json_response(
                400,
                &json!({"message": "simulator: missing E2b-Sandbox-Id header"}),
                "application/json",
            );
        };
        if header("e2b-sandbox-port").as_deref() != Some(ENVD_PORT) {
            self.violation(format!(
                "{key}: E2b-Sandbox-Port is {:?}, envd listens on {ENVD_PORT}",
                header("e2b-sandbox-port")
            ));
            return json_response(
                502,
                &json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "port": 0}),
                "application/json; charset=utf-8",
            );
        }
        let found = lock(&self.world)
            .sandboxes
            .get(&id)
            .map(|s| (s.state, s.auto_resume));
        match found {
            None => {
                return json_response(
                    404,
                    &json!({"sandboxId": id, "message": "The sandbox was not found"}),
                    "application/json; charset=utf-8",
                );
            }
            Some((SbState::Paused, true)) => {
                if let Err(r) = self.resume(&id, 15).await {
                    return json_response(
                        r.status,
                        &r.body.unwrap_or_default(),
                        "application/json",
                    );
                }
            }
            Some((SbState::Paused, false)) => {
                return json_response(
                    409,
                    &json!({"sandboxId": id, "message": "The sandbox is paused", "code": 409, "canAutoResume": false}),
                    "application/json; charset=utf-8",
                );
            }
            Some((SbState::Running, _)) => {}
        }

        // envd.
        if method == "GET" && path == "/health" {
            return Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Body::empty())
                .unwrap_or_else(|_| Response::new(Body::empty()));
        }
        let token = lock(&self.world)
            .sandboxes
            .get(&id)
            .and_then(|s| s.token.clone());
        if let Some(t) = token
            && header("x-access-token").as_deref() != Some(t.as_str())
        {
            return json_response(
                401,
                &json!({"code": 401, "message": UNAUTHORIZED_ENVD}),
                "application/json",
            );
        }
        let user = match header("authorization") {
            None => None,
            Some(a) => match basic_user(&a) {
                Some(u) => Some(u),
                None => {
                    self.violation(format!(
                        "{key}: Authorization must be `Basic base64(user:)`, got {a:?}"
                    ));
                    return connect_unary_error("invalid_argument", "invalid Authorization header");
                }
            },
        };
        if path == "/files" {
            return self
                .files(
                    &id,
                    &key,
                    &method,
                    parts.uri.query().unwrap_or(""),
                    header("content-type"),
                    body,
                )
                .await;
        }
        if method != "POST" {
            self.violation(format!("{key}: Connect RPCs are POST requests"));
            return json_response(
                405,
                &json!({"code": "unimplemented", "message": "method not allowed"}),
                "application/json",
            );
        }
        let ct = header("content-type").unwrap_or_default().to_lowercase();
        match path.as_str() {
            "/process.Process/Start" => {
                if ct != "application/connect+json" {
                    self.violation(format!(
                        "{key}: Content-Type must be application/connect+json (Connect streaming, JSON codec), got {ct:?}"
                    ));
                    return Response::builder()
                        .status(StatusCode::UNSUPPORTED_MEDIA_TYPE)
                        .header(
                            "accept-post",
                            "application/connect+json, application/connect+proto",
                        )
                        .body(Body::empty())
                        .unwrap_or_else(|_| Response::new(Body::empty()));
                }
                let timeout = match header("connect-timeout-ms") {
                    None => None,
                    Some(t) => match t.parse::<u64>() {
                        Ok(ms) if t.len() <= 10 => Some(Duration::from_millis(ms)),
                        _ => {
                            self.violation(format!(
                                "{key}: Connect-Timeout-Ms must be a positive integer of at most 10 digits, got {t:?}"
                            ));
                            return stream_response(vec![end_stream(Some((
                                "invalid_argument",
                                "invalid Connect-Timeout-Ms",
                            )))]);
                        }
                    },
                };
                let keepalive = header("keepalive-ping-interval")
                    .and_then(|k| k.parse::<u64>().ok())
                    .filter(|k| *k > 0)
                    .map(Duration::from_secs);
                let msg = match unenvelope(&body) {
                    Ok(m) => m,
                    Err(e) => {
                        self.violation(format!("{key}: {e}"));
                        return stream_response(vec![end_stream(Some((
                            "invalid_argument",
                            &e.to_string(),
                        )))]);
                    }
                };
                let req = match self.check_proto(&key, "StartRequest", &msg) {
                    Ok(v) => v,
                    Err(e) => {
                        return stream_response(vec![end_stream(Some(("invalid_argument", &e)))]);
                    }
                };
                self.start_process(id, req, user, timeout, keepalive).await
            }
            "/filesystem.Filesystem/Stat" => {
                if !ct.starts_with("application/json") {
                    self.violation(format!(
                        "{key}: Content-Type must be application/json (Connect unary, JSON codec), got {ct:?}"
                    ));
                    return connect_unary_error("invalid_argument", "bad content type");
                }
                let v: Value = match serde_json::from_slice(&body) {
                    Ok(v) => v,
                    Err(e) => {
                        self.violation(format!("{key}: the body is not JSON: {e}"));
                        return connect_unary_error("invalid_argument", &e.to_string());
                    }
                };
                let req = match self.check_proto(&key, "StatRequest", &v) {
                    Ok(v) => v,
                    Err(e) => return connect_unary_error("invalid_argument", &e),
                };
                let p = req.get("path").and_then(Value::as_str).unwrap_or_default();
                self.stat(&id, p).await
            }
            "/process.Process/List" | "/process.Process/SendSignal" => {
                if !ct.starts_with("application/json") {
                    self.violation(format!(
                        "{key}: Content-Type must be application/json (Connect unary, JSON codec), got {ct:?}"
                    ));
                    return Response::builder()
                        .status(StatusCode::UNSUPPORTED_MEDIA_TYPE)
                        .body(Body::empty())
                        .unwrap_or_else(|_| Response::new(Body::empty()));
                }
                let v: Value = match serde_json::from_slice(&body) {
                    Ok(v) => v,
                    Err(e) => {
                        self.violation(format!("{key}: the body is not JSON: {e}"));
                        return connect_unary_error("invalid_argument", &e.to_string());
                    }
                };
                let list = path.ends_with("/List");
                let msg = if list {
                    "ListRequest"
                } else {
                    "SendSignalRequest"
                };
                let req = match self.check_proto(&key, msg, &v) {
                    Ok(v) => v,
                    Err(e) => return connect_unary_error("invalid_argument", &e),
                };
                if list {
                    self.list_processes(&id)
                } else {
                    self.send_signal(&id, &req).await
                }
            }
            _ => {
                self.violation(format!("{key}: unsimulated envd endpoint"));
                connect_unary_error("unimplemented", &format!("{path} is not simulated"))
            }
        }
    }

    /// `GET` / `POST /files` (see the module docs).
    async fn files(
        &self,
        id: &str,
        key: &str,
        method: &str,
        query_text: &str,
        content_type: Option<String>,
        body: Bytes,
    ) -> Response {
        let mut file = None;
        let mut user = None;
        for (k, v) in query_text.split('&').filter_map(|kv| kv.split_once('=')) {
            match k {
                "path" => file = Some(query_unescape(v)),
                "username" => user = Some(query_unescape(v)),
                "signature" | "signature_expiration" => {}
                other => self.violation(format!("{key}: unknown query parameter {other:?}")),
            }
        }
        let Some(file) = file.filter(|f| !f.is_empty()) else {
            self.violation(format!("{key}: the `path` query parameter is missing"));
            return json_response(
                400,
                &json!({"message": "path is required", "code": 400}),
                "application/json",
            );
        };
        let Some(container) = lock(&self.world)
            .sandboxes
            .get(id)
            .map(|s| s.container.clone())
        else {
            return json_response(
                404,
                &json!({"sandboxId": id, "message": "The sandbox was not found"}),
                "application/json; charset=utf-8",
            );
        };
        let file_error = |status: u16, message: String| {
            json_response(
                status,
                &json!({"message": message, "code": status}),
                "application/json",
            )
        };
        match method {
            "GET" => {
                let script = r#"if [ -d "$1" ]; then exit 40; fi; if [ ! -e "$1" ]; then exit 41; fi; exec cat -- "$1""#;
                match self.run_io(&container, script, &file, user, None).await {
                    Ok((0, out, _)) => Response::builder()
                        .status(StatusCode::OK)
                        .header("content-type", "application/octet-stream")
                        .body(Body::from(out))
                        .unwrap_or_else(|_| Response::new(Body::empty())),
                    Ok((40, _, _)) => file_error(400, format!("path '{file}' is a directory")),
                    Ok((41, _, _)) => file_error(404, format!("path '{file}' does not exist")),
                    Ok((_, _, err)) => file_error(
                        500,
                        format!(
                            "error opening file '{file}': {}",
                            String::from_utf8_lossy(&err).trim()
                        ),
                    ),
                    Err(e) => file_error(500, format!("{e:#}")),
                }
            }
            "POST" => {
                if content_type
                    .as_deref()
                    .map(str::to_ascii_lowercase)
                    .as_deref()
                    != Some("application/octet-stream")
                {
                    self.violation(format!("{key}: only application/octet-stream uploads are simulated, got {content_type:?}"));
                    return file_error(400, "unsupported content type".into());
                }
                let script = r#"if [ -d "$1" ]; then exit 40; fi; d=${1%/*}; [ -n "$d" ] || d=/; mkdir -p "$d" || exit 42; err=$(cat 2>&1 > "$1") || { case $err in *"No space"*) exit 43;; esac; echo "$err" >&2; exit 44; }"#;
                match self
                    .run_io(&container, script, &file, user, Some(body))
                    .await
                {
                    Ok((0, _, _)) => {
                        let name = file.rsplit('/').next().unwrap_or_default().to_owned();
                        json_response(
                            200,
                            &json!([{"path": file, "name": name, "type": "file"}]),
                            "application/json",
                        )
                    }
                    Ok((40, _, _)) => file_error(400, format!("path '{file}' is a directory")),
                    Ok((43, _, _)) => file_error(507, "not enough disk space".into()),
                    Ok((_, _, err)) => file_error(
                        500,
                        format!(
                            "error writing file '{file}': {}",
                            String::from_utf8_lossy(&err).trim()
                        ),
                    ),
                    Err(e) => file_error(500, format!("{e:#}")),
                }
            }
            _ => {
                self.violation(format!("{key}: /files takes GET or POST"));
                file_error(405, "method not allowed".into())
            }
        }
    }

    /// `filesystem.Filesystem/Stat` of `file` (not following a symlink).
    async fn stat(&self, id: &str, file: &str) -> Response {
        let Some(container) = lock(&self.world)
            .sandboxes
            .get(id)
            .map(|s| s.container.clone())
        else {
            return connect_unary_error("unavailable", "sandbox not found");
        };
        let script =
            r#"[ -e "$1" ] || [ -L "$1" ] || exit 41; exec stat -c '%F|%s|%a|%Y|%U|%G|%A' -- "$1""#;
        let out = match self.run_io(&container, script, file, None, None).await {
            Ok((0, out, _)) => String::from_utf8_lossy(&out).trim().to_owned(),
            Ok((41, _, _)) => {
                return connect_unary_error("not_found", &format!("path '{file}' does not exist"));
            }
            Ok((_, _, err)) => {
                return connect_unary_error("internal", &String::from_utf8_lossy(&err));
            }
            Err(e) => return connect_unary_error("internal", &format!("{e:#}")),
        };
        let f: Vec<&str> = out.splitn(7, '|').collect();
        let [kind, size, perm, mtime, owner, group, perms] = f[..] else {
            return connect_unary_error("internal", &format!("stat said {out:?}"));
        };
        let perm = u32::from_str_radix(perm, 8).unwrap_or(0);
        let (ty, mode) = match kind {
            "directory" => ("FILE_TYPE_DIRECTORY", perm | 1 << 31),
            "symbolic link" => ("FILE_TYPE_SYMLINK", perm | 1 << 27),
            "regular file" | "regular empty file" => ("FILE_TYPE_FILE", perm),
            _ => ("FILE_TYPE_UNSPECIFIED", perm),
        };
        let secs = mtime.parse::<u64>().unwrap_or(0);
        let name = file.rsplit('/').next().unwrap_or_default();
        let mut entry = json!({
            "name": name,
            "type": ty,
            "path": file,
            "size": size,
            "mode": mode,
            "permissions": perms,
            "owner": owner,
            "group": group,
            "modifiedTime": rfc3339(UNIX_EPOCH + Duration::from_secs(secs)),
        });
        if size == "0" {
            // proto3 JSON leaves zero values out.
            if let Some(m) = entry.as_object_mut() {
                m.remove("size");
            }
        }
        json_response(200, &json!({"entry": entry}), "application/json")
    }

    /// Runs `script` with `$1` = `arg` in the container as `user` (default: the image's),
    /// with `stdin` fed when given: (exit code, stdout, stderr).
    async fn run_io(
        &self,
        container: &str,
        script: &str,
        arg: &str,
        user: Option<String>,
        stdin: Option<Bytes>,
    ) -> Result<(i64, Vec<u8>, Vec<u8>)> {
        use tokio::io::AsyncWriteExt;
        let opts = CreateExecOptions::<String> {
            attach_stdin: Some(stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec![
                "/bin/sh".into(),
                "-c".into(),
                script.into(),
                "sh".into(),
                arg.into(),
            ]),
            user,
            ..Default::default()
        };
        let exec = self.docker.create_exec(container, opts).await?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = self.docker.start_exec(&exec.id, None).await?
        else {
            bail!("exec started detached");
        };
        let writer = tokio::spawn(async move {
            if let Some(b) = stdin {
                let _ = input.write_all(&b).await;
                let _ = input.flush().await;
            }
            let _ = input.shutdown().await;
        });
        let (mut out, mut err) = (Vec::new(), Vec::new());
        while let Some(item) = output.next().await {
            match item? {
                LogOutput::StdOut { message } => out.extend_from_slice(&message),
                LogOutput::StdErr { message } => err.extend_from_slice(&message),
                _ => {}
            }
        }
        let _ = writer.await;
        let code = loop {
            let info = self.docker.inspect_exec(&exec.id).await?;
            if info.running != Some(true) {
                break info.exit_code.unwrap_or(-1);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        Ok((code, out, err))
    }

    /// Checks a proto3-JSON message; problems are recorded and returned joined.
    fn check_proto(&self, key: &str, msg: &str, v: &Value) -> std::result::Result<Value, String> {
        let mut problems = Vec::new();
        check_proto_json(msg, v, msg, true, &mut problems);
        if problems.is_empty() {
            Ok(v.clone())
        } else {
            let what = problems.join("; ");
            self.violation(format!("{key}: {what}"));
            Err(what)
        }
    }

    fn list_processes(&self, id: &str) -> Response {
        let w = lock(&self.world);
        let processes: Vec<Value> = w
            .sandboxes
            .get(id)
            .map(|s| {
                s.processes
                    .iter()
                    .map(|(pid, p)| {
                        let mut v = json!({"config": p.config, "pid": pid});
                        if let Some(t) = &p.tag {
                            v["tag"] = json!(t);
                        }
                        v
                    })
                    .collect()
            })
            .unwrap_or_default();
        let body = json!({ "processes": processes });
        self.check_own("ListResponse", &body);
        json_response(200, &body, "application/json")
    }

    async fn send_signal(&self, id: &str, req: &Value) -> Response {
        let selector = req.get("process").cloned().unwrap_or_default();
        let signal = match req.get("signal") {
            Some(Value::String(s)) if s == "SIGNAL_SIGKILL" => "SIGKILL",
            Some(Value::Number(n)) if n.as_i64() == Some(9) => "SIGKILL",
            Some(Value::String(s)) if s == "SIGNAL_SIGTERM" => "SIGTERM",
            Some(Value::Number(n)) if n.as_i64() == Some(15) => "SIGTERM",
            other => {
                return connect_unary_error(
                    "invalid_argument",
                    &format!("unsupported signal {other:?}"),
                );
            }
        };
        let (container, pid) = {
            let mut w = lock(&self.world);
            let Some(s) = w.sandboxes.get_mut(id) else {
                return connect_unary_error("not_found", "sandbox not found");
            };
            let pid = match (selector.get("pid"), selector.get("tag")) {
                (Some(p), _) if !p.is_null() => p
                    .as_u64()
                    .or_else(|| p.as_str().and_then(|s| s.parse().ok()))
                    .and_then(|p| u32::try_from(p).ok()),
                (_, Some(Value::String(t))) => s
                    .processes
                    .iter()
                    .find(|(_, p)| p.tag.as_deref() == Some(t.as_str()))
                    .map(|(pid, _)| *pid),
                _ => None,
            };
            let Some(proc_) = pid.and_then(|p| s.processes.get_mut(&p)) else {
                return connect_unary_error(
                    "not_found",
                    &format!("process with {selector} not found"),
                );
            };
            proc_.signalled = Some(if signal == "SIGKILL" {
                "signal: killed"
            } else {
                "signal: terminated"
            });
            (s.container.clone(), pid.unwrap_or_default())
        };
        if signal == "SIGKILL" {
            self.kill_tree(&container, pid).await;
        } else {
            let _ = self
                .run_quiet(
                    &container,
                    vec!["kill".into(), "-TERM".into(), pid.to_string()],
                )
                .await;
        }
        json_response(200, &json!({}), "application/json")
    }

    /// Validates an envd message the simulator produced.
    fn check_own(&self, msg: &str, v: &Value) {
        let mut problems = Vec::new();
        check_proto_json(msg, v, msg, false, &mut problems);
        for p in problems {
            self.violation(format!("simulator envd answer: {p}"));
        }
    }

    async fn start_process(
        self: &Arc<Self>,
        id: String,
        req: Value,
        user: Option<String>,
        timeout: Option<Duration>,
        keepalive: Option<Duration>,
    ) -> Response {
        let config = req.get("process").cloned().unwrap_or_else(|| json!({}));
        let field = |json_name: &str, proto_name: &str| {
            config
                .get(json_name)
                .or_else(|| config.get(proto_name))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let cmd = field("cmd", "cmd").as_str().unwrap_or_default().to_owned();
        if cmd.is_empty() {
            return stream_response(vec![end_stream(Some((
                "invalid_argument",
                "process.cmd is required",
            )))]);
        }
        if req.get("pty").is_some_and(|p| !p.is_null()) {
            self.violation("POST /process.Process/Start: `pty` is not simulated".to_owned());
        }
        let mut argv = vec![cmd];
        if let Some(args) = field("args", "args").as_array() {
            argv.extend(args.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        let cwd = field("cwd", "cwd").as_str().map(str::to_owned);
        let tag = req.get("tag").and_then(Value::as_str).map(str::to_owned);
        let (container, mut env) = {
            let w = lock(&self.world);
            match w.sandboxes.get(&id) {
                Some(s) => (s.container.clone(), s.env_vars.clone()),
                None => {
                    return stream_response(vec![end_stream(Some((
                        "unavailable",
                        "sandbox not found",
                    )))]);
                }
            }
        };
        if let Some(envs) = field("envs", "envs").as_object() {
            env.extend(
                envs.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())),
            );
        }
        if let Some(dir) = &cwd {
            match self
                .run_quiet(&container, vec!["test".into(), "-d".into(), dir.clone()])
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    return stream_response(vec![end_stream(Some((
                        "invalid_argument",
                        &format!(
                            "error starting process '{}': chdir {dir}: no such file or directory",
                            argv.join(" ")
                        ),
                    )))]);
                }
                Err(e) => {
                    return stream_response(vec![end_stream(Some((
                        "unavailable",
                        &format!("{e:#}"),
                    )))]);
                }
            }
        }
        let marker = format!("\x1e{}:", hex_id(16));
        let mut full = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            format!("printf '\\036%s%s\\036' '{}' $$; exec \"$@\"", &marker[1..]),
            "sh".to_owned(),
        ];
        full.extend(argv);
        let opts = CreateExecOptions::<String> {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(full),
            env: Some(env),
            working_dir: cwd.clone(),
            user,
            ..Default::default()
        };
        let started = async {
            let exec = self.docker.create_exec(&container, opts).await?;
            let res = self
                .docker
                .start_exec(&exec.id, Some(StartExecOptions::default()))
                .await?;
            Ok::<_, anyhow::Error>((exec.id, res))
        }
        .await;
        let (exec_id, output) = match started {
            Ok((exec_id, StartExecResults::Attached { output, .. })) => (exec_id, output),
            Ok(_) => {
                return stream_response(vec![end_stream(Some((
                    "internal",
                    "exec started detached",
                )))]);
            }
            Err(e) => {
                return stream_response(vec![end_stream(Some((
                    "invalid_argument",
                    &format!("error starting process: {e:#}"),
                )))]);
            }
        };
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        let run = Run {
            inner: self.clone(),
            id,
            container,
            exec_id,
            config,
            tag,
            marker,
            timeout,
            keepalive,
            tx,
        };
        self.spawn(run.pump(output));
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<Bytes, std::io::Error>(b), rx))
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/connect+json")
            .body(Body::from_stream(stream))
            .unwrap_or_else(|_| Response::new(Body::empty()))
    }
}

/// One running `Start` stream.
struct Run {
    inner: Arc<Inner>,
    id: String,
    container: String,
    exec_id: String,
    config: Value,
    tag: Option<String>,
    marker: String,
    timeout: Option<Duration>,
    keepalive: Option<Duration>,
    tx: mpsc::Sender<Bytes>,
}

type ExecOutput = std::pin::Pin<
    Box<
        dyn futures_util::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>>
            + Send,
    >,
>;

impl Run {
    async fn send(&self, event: Value) {
        let msg = json!({ "event": event });
        self.inner.check_own("StartResponse", &msg);
        // A client that went away does not stop the process (as in envd).
        let _ = self.tx.send(envelope(0, &msg)).await;
    }

    async fn data(&self, stream: &str, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.send(json!({"data": {stream: STANDARD.encode(bytes)}}))
                .await;
        }
    }

    async fn pump(self, mut output: ExecOutput) {
        let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut pid: Option<u32> = None;
        let mut pending_out: Vec<u8> = Vec::new();
        let mut pending_err: Vec<u8> = Vec::new();
        let mut last_activity = tokio::time::Instant::now();
        let outcome = loop {
            let wake = [
                deadline,
                self.keepalive
                    .filter(|_| pid.is_some())
                    .map(|k| last_activity + k),
            ]
            .into_iter()
            .flatten()
            .min();
            let next = match wake {
                Some(at) => match tokio::time::timeout_at(at, output.next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                            break Outcome::Deadline;
                        }
                        self.send(json!({"keepalive": {}})).await;
                        last_activity = tokio::time::Instant::now();
                        continue;
                    }
                },
                None => output.next().await,
            };
            let chunk = match next {
                None => break Outcome::Ended,
                Some(Err(e)) => break Outcome::Failed(e.to_string()),
                Some(Ok(c)) => c,
            };
            last_activity = tokio::time::Instant::now();
            let (is_out, bytes) = match chunk {
                LogOutput::StdOut { message } | LogOutput::Console { message } => (true, message),
                LogOutput::StdErr { message } => (false, message),
                LogOutput::StdIn { .. } => continue,
            };
            if pid.is_some() {
                self.data(if is_out { "stdout" } else { "stderr" }, &bytes)
                    .await;
                continue;
            }
            if is_out {
                pending_out.extend_from_slice(&bytes);
            } else {
                pending_err.extend_from_slice(&bytes);
            }
            if let Some((p, rest)) = take_marker(&pending_out, &self.marker) {
                pid = Some(p);
                pending_out = rest;
                {
                    let mut w = lock(&self.inner.world);
                    if let Some(s) = w.sandboxes.get_mut(&self.id) {
                        s.processes.insert(
                            p,
                            Proc {
                                config: self.config.clone(),
                                tag: self.tag.clone(),
                                signalled: None,
                            },
                        );
                    }
                }
                self.send(json!({"start": {"pid": p}})).await;
                let out = std::mem::take(&mut pending_out);
                let err = std::mem::take(&mut pending_err);
                self.data("stdout", &out).await;
                self.data("stderr", &err).await;
            }
        };
        let Some(pid) = pid else {
            let msg = match outcome {
                Outcome::Failed(e) => e,
                _ => String::from_utf8_lossy(&pending_err).trim().to_owned(),
            };
            let _ = self
                .tx
                .send(end_stream(Some((
                    "invalid_argument",
                    &format!("error starting process: {msg}"),
                ))))
                .await;
            return;
        };
        match outcome {
            Outcome::Deadline => {
                self.inner.kill_tree(&self.container, pid).await;
                self.forget(pid);
                let _ = self
                    .tx
                    .send(end_stream(Some((
                        "deadline_exceeded",
                        "context deadline exceeded",
                    ))))
                    .await;
            }
            Outcome::Failed(e) => {
                self.forget(pid);
                let _ = self.tx.send(end_stream(Some(("unavailable", &e)))).await;
            }
            Outcome::Ended => {
                // The output can end before the process does (it closed its pipes).
                let code = loop {
                    match self.inner.docker.inspect_exec(&self.exec_id).await {
                        Ok(info) if info.running != Some(true) => break info.exit_code,
                        Ok(_) => {}
                        Err(_) => break None,
                    }
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        self.inner.kill_tree(&self.container, pid).await;
                        self.forget(pid);
                        let _ = self
                            .tx
                            .send(end_stream(Some((
                                "deadline_exceeded",
                                "context deadline exceeded",
                            ))))
                            .await;
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                let signalled = self.forget(pid);
                let alive = lock(&self.inner.world)
                    .sandboxes
                    .get(&self.id)
                    .is_some_and(|s| s.state == SbState::Running);
                let end = match (signalled, code) {
                    (Some(status), _) => json!({"exitCode": -1, "status": status, "error": status}),
                    (None, Some(0)) => json!({"exited": true, "status": "exit status 0"}),
                    (None, Some(c)) if alive => {
                        let status = format!("exit status {c}");
                        json!({"exitCode": c, "exited": true, "status": status, "error": status})
                    }
                    _ => {
                        let _ = self
                            .tx
                            .send(end_stream(Some((
                                "unavailable",
                                "the sandbox went away while the process was running",
                            ))))
                            .await;
                        return;
                    }
                };
                self.send(json!({ "end": end })).await;
                let _ = self.tx.send(end_stream(None)).await;
            }
        }
    }

    /// Drops the process from the sandbox's table; answers how it was signalled.
    fn forget(&self, pid: u32) -> Option<&'static str> {
        lock(&self.inner.world)
            .sandboxes
            .get_mut(&self.id)
            .and_then(|s| s.processes.remove(&pid))
            .and_then(|p| p.signalled)
    }
}

enum Outcome {
    Ended,
    Deadline,
    Failed(String),
}

/// Finds `marker` + digits + `\x1e` at the start of `buf`; answers the pid and the rest.
fn take_marker(buf: &[u8], marker: &str) -> Option<(u32, Vec<u8>)> {
    let rest = buf.strip_prefix(marker.as_bytes())?;
    let end = rest.iter().position(|b| *b == 0x1e)?;
    let pid = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((pid, rest[end + 1..].to_vec()))
}

// ----- Connect framing -----

/// One Connect envelope: flags, big-endian length, payload.
pub fn envelope(flags: u8, msg: &Value) -> Bytes {
    let payload = serde_json::to_vec(msg).unwrap_or_default();
    let mut out = Vec::with_capacity(payload.len() + 5);
    out.push(flags);
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&payload);
    Bytes::from(out)
}

/// The end-of-stream envelope (flag `0x02`), with a Connect error when given.
fn end_stream(error: Option<(&str, &str)>) -> Bytes {
    let v = match error {
        None => json!({}),
        Some((code, message)) => json!({"error": {"code": code, "message": message}}),
    };
    envelope(0x02, &v)
}

/// Parses a request body that must be exactly one uncompressed message envelope.
fn unenvelope(body: &[u8]) -> Result<Value> {
    if body.len() < 5 {
        bail!(
            "the body must be one Connect envelope ([flags u8][length u32 BE][message]), got {} bytes",
            body.len()
        );
    }
    let flags = body[0];
    if flags != 0 {
        bail!("the request envelope has flags {flags:#04x}; expected 0x00 (uncompressed message)");
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if body.len() != 5 + len {
        bail!(
            "the envelope says {len} bytes but {} follow (exactly one message expected)",
            body.len() - 5
        );
    }
    serde_json::from_slice(&body[5..]).context("the message is not JSON")
}

/// Parses a whole Connect streaming response body into `(flags, message)` pairs.
pub fn parse_envelopes(mut body: &[u8]) -> Result<Vec<(u8, Value)>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            bail!("truncated envelope header");
        }
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if body.len() < 5 + len {
            bail!("truncated envelope");
        }
        out.push((body[0], serde_json::from_slice(&body[5..5 + len])?));
        body = &body[5 + len..];
    }
    Ok(out)
}

fn stream_response(envelopes: Vec<Bytes>) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/connect+json")
        .body(Body::from(envelopes.concat()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// A Connect unary error: HTTP status from the code, `{code, message}` body.
fn connect_unary_error(code: &str, message: &str) -> Response {
    let status = match code {
        "canceled" => 499,
        "invalid_argument" | "failed_precondition" | "out_of_range" => 400,
        "deadline_exceeded" => 504,
        "not_found" => 404,
        "already_exists" | "aborted" => 409,
        "permission_denied" => 403,
        "resource_exhausted" => 429,
        "unimplemented" => 501,
        "unavailable" => 503,
        "unauthenticated" => 401,
        _ => 500,
    };
    json_response(
        status,
        &json!({"code": code, "message": message}),
        "application/json",
    )
}

// ----- proto3 JSON checking (process.proto) -----

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Bool,
    U32,
    S32,
    Bytes,
    Enum(&'static [(&'static str, i64)]),
    Msg(&'static str),
    MapStrStr,
    RepStr,
    RepMsg(&'static str),
}

struct F {
    proto: &'static str,
    json: &'static str,
    ty: Ty,
    oneof: Option<&'static str>,
}

const fn f(proto: &'static str, json: &'static str, ty: Ty) -> F {
    F {
        proto,
        json,
        ty,
        oneof: None,
    }
}

const fn o(proto: &'static str, json: &'static str, ty: Ty, oneof: &'static str) -> F {
    F {
        proto,
        json,
        ty,
        oneof: Some(oneof),
    }
}

const SIGNALS: &[(&str, i64)] = &[
    ("SIGNAL_UNSPECIFIED", 0),
    ("SIGNAL_SIGTERM", 15),
    ("SIGNAL_SIGKILL", 9),
];

/// The messages of `process.proto` the simulator reads or writes.
fn proto_fields(msg: &str) -> Option<&'static [F]> {
    Some(match msg {
        "StartRequest" => {
            const {
                &[
                    f("process", "process", Ty::Msg("ProcessConfig")),
                    f("pty", "pty", Ty::Msg("PTY")),
                    f("tag", "tag", Ty::Str),
                    f("stdin", "stdin", Ty::Bool),
                ]
            }
        }
        "ProcessConfig" => {
            const {
                &[
                    f("cmd", "cmd", Ty::Str),
                    f("args", "args", Ty::RepStr),
                    f("envs", "envs", Ty::MapStrStr),
                    f("cwd", "cwd", Ty::Str),
                ]
            }
        }
        "PTY" => const { &[f("size", "size", Ty::Msg("PTY.Size"))] },
        "PTY.Size" => const { &[f("cols", "cols", Ty::U32), f("rows", "rows", Ty::U32)] },
        "ListRequest" | "SendSignalResponse" | "ProcessEvent.KeepAlive" => const { &[] },
        "StatRequest" => const { &[f("path", "path", Ty::Str)] },
        "ListResponse" => const { &[f("processes", "processes", Ty::RepMsg("ProcessInfo"))] },
        "ProcessInfo" => {
            const {
                &[
                    f("config", "config", Ty::Msg("ProcessConfig")),
                    f("pid", "pid", Ty::U32),
                    f("tag", "tag", Ty::Str),
                ]
            }
        }
        "SendSignalRequest" => {
            const {
                &[
                    f("process", "process", Ty::Msg("ProcessSelector")),
                    f("signal", "signal", Ty::Enum(SIGNALS)),
                ]
            }
        }
        "ProcessSelector" => {
            const {
                &[
                    o("pid", "pid", Ty::U32, "selector"),
                    o("tag", "tag", Ty::Str, "selector"),
                ]
            }
        }
        "StartResponse" => const { &[f("event", "event", Ty::Msg("ProcessEvent"))] },
        "ProcessEvent" => {
            const {
                &[
                    o(
                        "start",
                        "start",
                        Ty::Msg("ProcessEvent.StartEvent"),
                        "event",
                    ),
                    o("data", "data", Ty::Msg("ProcessEvent.DataEvent"), "event"),
                    o("end", "end", Ty::Msg("ProcessEvent.EndEvent"), "event"),
                    o(
                        "keepalive",
                        "keepalive",
                        Ty::Msg("ProcessEvent.KeepAlive"),
                        "event",
                    ),
                ]
            }
        }
        "ProcessEvent.StartEvent" => const { &[f("pid", "pid", Ty::U32)] },
        "ProcessEvent.DataEvent" => {
            const {
                &[
                    o("stdout", "stdout", Ty::Bytes, "output"),
                    o("stderr", "stderr", Ty::Bytes, "output"),
                    o("pty", "pty", Ty::Bytes, "output"),
                ]
            }
        }
        "ProcessEvent.EndEvent" => {
            const {
                &[
                    f("exit_code", "exitCode", Ty::S32),
                    f("exited", "exited", Ty::Bool),
                    f("status", "status", Ty::Str),
                    f("error", "error", Ty::Str),
                ]
            }
        }
        _ => return None,
    })
}

/// Checks `v` as the proto3-JSON form of `msg`. `request`: parsing rules (either field
/// name, numbers as strings); otherwise the canonical form a server writes (lowerCamelCase
/// names, no zero values of non-optional scalars, no nulls).
fn check_proto_json(msg: &str, v: &Value, at: &str, request: bool, out: &mut Vec<String>) {
    let Some(fields) = proto_fields(msg) else {
        out.push(format!("{at}: unknown message {msg}"));
        return;
    };
    let Some(obj) = v.as_object() else {
        out.push(format!("{at}: expected a JSON object for {msg}, got {v}"));
        return;
    };
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    let mut oneofs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, val) in obj {
        let here = format!("{at}.{k}");
        let Some(field) = fields
            .iter()
            .find(|fl| fl.json == k.as_str() || fl.proto == k.as_str())
        else {
            out.push(format!(
                "{here}: unknown field of {msg} (fields: {})",
                fields
                    .iter()
                    .map(|fl| fl.json)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        };
        if !request && field.json != k.as_str() {
            out.push(format!(
                "{here}: a server writes the JSON name `{}`",
                field.json
            ));
        }
        if let Some(prev) = seen.insert(field.proto, k.as_str()) {
            out.push(format!("{here}: field given twice (also as `{prev}`)"));
        }
        if val.is_null() {
            if !request {
                out.push(format!("{here}: null"));
            }
            continue;
        }
        if let Some(group) = field.oneof {
            oneofs.entry(group).or_default().push(k.as_str());
        }
        check_proto_value(field.ty, val, &here, request, out);
    }
    for (group, members) in oneofs {
        if members.len() > 1 {
            out.push(format!(
                "{at}: more than one member of oneof `{group}` is set: {}",
                members.join(", ")
            ));
        }
    }
}

fn check_proto_value(ty: Ty, v: &Value, at: &str, request: bool, out: &mut Vec<String>) {
    let int_in = |lo: i64, hi: i64| -> bool {
        let n = match v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
            Value::String(s) if request => s.parse::<i64>().ok(),
            _ => None,
        };
        n.is_some_and(|n| (lo..=hi).contains(&n))
    };
    let ok = match ty {
        Ty::Str => v.is_string(),
        Ty::Bool => v.is_boolean(),
        Ty::U32 => int_in(0, i64::from(u32::MAX)),
        Ty::S32 => int_in(i64::from(i32::MIN), i64::from(i32::MAX)),
        Ty::Bytes => v.as_str().is_some_and(|s| {
            let s: String = s
                .trim_end_matches('=')
                .chars()
                .map(|c| match c {
                    '-' => '+',
                    '_' => '/',
                    c => c,
                })
                .collect();
            STANDARD_NO_PAD.decode(s).is_ok()
        }),
        Ty::Enum(values) => match v {
            Value::String(s) => values.iter().any(|(name, _)| name == s),
            Value::Number(n) => n.as_i64().is_some(),
            _ => false,
        },
        Ty::Msg(m) => {
            check_proto_json(m, v, at, request, out);
            true
        }
        Ty::MapStrStr => match v.as_object() {
            Some(m) => {
                for (k, x) in m {
                    if !x.is_string() {
                        out.push(format!("{at}.{k}: expected a string, got {x}"));
                    }
                }
                true
            }
            None => false,
        },
        Ty::RepStr => match v.as_array() {
            Some(a) => {
                for (i, x) in a.iter().enumerate() {
                    if !x.is_string() {
                        out.push(format!("{at}[{i}]: expected a string, got {x}"));
                    }
                }
                true
            }
            None => false,
        },
        Ty::RepMsg(m) => match v.as_array() {
            Some(a) => {
                for (i, x) in a.iter().enumerate() {
                    check_proto_json(m, x, &format!("{at}[{i}]"), request, out);
                }
                true
            }
            None => false,
        },
    };
    if !ok {
        let want = match ty {
            Ty::Str => "a string",
            Ty::Bool => "a boolean",
            Ty::U32 => "a uint32",
            Ty::S32 => "a sint32",
            Ty::Bytes => "base64 bytes",
            Ty::Enum(_) => "an enum name or number",
            Ty::Msg(_) => "an object",
            Ty::MapStrStr => "an object of strings",
            Ty::RepStr | Ty::RepMsg(_) => "an array",
        };
        out.push(format!("{at}: expected {want}, got {v}"));
    }
}

// ----- small helpers -----

fn not_found(id: &str) -> Reply {
    Reply::error(
        404,
        format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
    )
}

/// Go's `url.QueryUnescape`: `+` is a space, `%XX` escapes.
fn query_unescape(s: &str) -> String {
    super::openapi::percent_decode(&s.replace('+', " "))
}

/// The user of `Authorization: Basic base64("user:")`.
fn basic_user(header: &str) -> Option<String> {
    let b64 = header.strip_prefix("Basic ")?;
    let raw = STANDARD.decode(b64.trim()).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, _) = text.split_once(':')?;
    (!user.is_empty()).then(|| user.to_owned())
}

/// An E2B-style sandbox id: 20 lower-case alphanumerics.
fn sandbox_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..20)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

fn hex_id(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
        .collect()
}

/// `2026-11-30T22:31:00.123Z`.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::query_parameters::ListContainersOptions;
    use std::time::Instant;

    const KEY: &str = "e2b_test_key";
    /// Counts `sleep 30` and `sleep 300` processes (the image has no `pgrep`).
    const SLEEPERS: &str = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null | grep -c '^sleep 300* $'; true";

    struct Client {
        http: reqwest::Client,
        api: String,
        envd: String,
        key: String,
    }

    /// What a `Start` stream carried.
    #[derive(Debug, Default)]
    struct Run {
        pid: Option<u64>,
        stdout: String,
        stderr: String,
        end: Option<Value>,
        /// The end-of-stream envelope's JSON.
        trailer: Value,
        keepalives: usize,
    }

    impl Client {
        fn new(sim: &E2bSim, key: &str) -> Client {
            Client {
                http: reqwest::Client::new(),
                api: sim.api_url.clone(),
                envd: sim.sandbox_url.clone(),
                key: key.to_owned(),
            }
        }

        async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
            let (s, _, v) = self.call_h(method, path, body).await;
            (s, v)
        }

        async fn call_h(
            &self,
            method: &str,
            path: &str,
            body: Option<Value>,
        ) -> (u16, reqwest::header::HeaderMap, Value) {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut req = self
                .http
                .request(method, format!("{}{path}", self.api))
                .header("X-API-Key", &self.key);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let text = resp.text().await.unwrap();
            let v = if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            };
            (status, headers, v)
        }

        async fn create(&self, body: Value) -> Value {
            let (s, v) = self.call("POST", "/sandboxes", Some(body)).await;
            assert_eq!(s, 201, "{v}");
            v
        }

        fn envd_req(&self, id: &str, token: Option<&str>, rpc: &str) -> reqwest::RequestBuilder {
            let mut r = self
                .http
                .post(format!("{}/process.Process/{rpc}", self.envd))
                .header("E2b-Sandbox-Id", id)
                .header("E2b-Sandbox-Port", "49983");
            if let Some(t) = token {
                r = r.header("X-Access-Token", t);
            }
            r
        }

        /// Starts `argv` (the raw `StartRequest` JSON when `raw` is given).
        async fn start(
            &self,
            id: &str,
            token: Option<&str>,
            request: Value,
            extra: &[(&str, &str)],
        ) -> (u16, Run) {
            let mut r = self
                .envd_req(id, token, "Start")
                .header("Content-Type", "application/connect+json")
                .body(envelope(0, &request).to_vec());
            for (k, v) in extra {
                r = r.header(*k, *v);
            }
            let resp = r.send().await.unwrap();
            let status = resp.status().as_u16();
            let body = resp.bytes().await.unwrap();
            let mut run = Run::default();
            if status != 200 {
                run.trailer = serde_json::from_slice(&body).unwrap_or(Value::Null);
                return (status, run);
            }
            let envelopes = parse_envelopes(&body).unwrap();
            let (last_flags, trailer) = envelopes.last().cloned().unwrap();
            assert_eq!(
                last_flags, 2,
                "the stream must end with an end-of-stream envelope"
            );
            run.trailer = trailer;
            for (flags, msg) in &envelopes[..envelopes.len() - 1] {
                assert_eq!(*flags, 0);
                let ev = &msg["event"];
                if let Some(p) = ev.pointer("/start/pid") {
                    assert!(run.pid.is_none() && run.stdout.is_empty(), "{envelopes:?}");
                    run.pid = p.as_u64();
                } else if let Some(d) = ev.get("data") {
                    assert!(run.pid.is_some(), "data before start: {envelopes:?}");
                    for (k, buf) in [("stdout", &mut run.stdout), ("stderr", &mut run.stderr)] {
                        if let Some(b) = d.get(k).and_then(Value::as_str) {
                            buf.push_str(&String::from_utf8(STANDARD.decode(b).unwrap()).unwrap());
                        }
                    }
                } else if let Some(e) = ev.get("end") {
                    run.end = Some(e.clone());
                } else if ev.get("keepalive").is_some() {
                    run.keepalives += 1;
                } else {
                    panic!("unexpected event {msg}");
                }
            }
            (status, run)
        }

        async fn bash(&self, id: &str, token: Option<&str>, script: &str) -> Run {
            let req = json!({
                "process": {"cmd": "/bin/bash", "args": ["-l", "-c", script]},
                "stdin": false
            });
            let (s, run) = self.start(id, token, req, &[]).await;
            assert_eq!(s, 200, "{run:?}");
            run
        }

        async fn unary(
            &self,
            id: &str,
            token: Option<&str>,
            rpc: &str,
            body: Value,
        ) -> (u16, Value) {
            let resp = self
                .envd_req(id, token, rpc)
                .header("Content-Type", "application/json")
                .header("Connect-Protocol-Version", "1")
                .json(&body)
                .send()
                .await
                .unwrap();
            (
                resp.status().as_u16(),
                resp.json().await.unwrap_or(Value::Null),
            )
        }
    }

    fn options(tag: &str) -> E2bSimOptions {
        E2bSimOptions {
            api_key: KEY.into(),
            docker_label: ("msc-test".into(), tag.into()),
            template_images: vec![("base".into(), "debian:bookworm-slim".into())],
            ..Default::default()
        }
    }

    async fn labelled(tag: &str) -> usize {
        let docker = Docker::connect_with_unix_defaults().unwrap();
        let filters = HashMap::from([("label".to_owned(), vec![format!("msc-test={tag}")])]);
        let opts = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        docker.list_containers(Some(opts)).await.unwrap().len()
    }

    /// The SDK's metadata query: each key and value URL-encoded, joined, encoded again.
    fn metadata_query(pairs: &[(&str, &str)]) -> String {
        fn enc(s: &str) -> String {
            s.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect()
        }
        let inner: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect();
        enc(&inner.join("&"))
    }

    #[test]
    fn helpers() {
        let s = spec().unwrap();
        assert!(
            s.operations()
                .iter()
                .any(|o| o.template == "/sandboxes/{sandboxID}/connect")
        );
        let parts = |q: &'static str| RequestParts {
            method: "GET",
            path: "/v2/sandboxes",
            query: Some(q),
            header: &|_: &str| None,
            body: b"",
        };
        assert!(
            s.check_request(&parts("state=running,paused&limit=5"))
                .is_ok()
        );
        assert!(s.check_request(&parts("state=stopped")).is_err());
        assert!(s.check_request(&parts("limit=500")).is_err());
        assert!(s.check_request(&parts("colour=red")).is_err());

        assert_eq!(
            take_marker(b"\x1eab:42\x1ehello", "\x1eab:"),
            Some((42, b"hello".to_vec()))
        );
        assert_eq!(take_marker(b"\x1eab:4", "\x1eab:"), None);
        assert_eq!(query_unescape("a%20b+c%3D"), "a b c=");
        assert_eq!(basic_user("Basic dXNlcjo="), Some("user".to_owned()));
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(sandbox_id().len(), 20);
        let e = envelope(0, &json!({"a": 1}));
        assert_eq!(&e[..5], &[0, 0, 0, 0, 7]);
        assert_eq!(unenvelope(&e).unwrap(), json!({"a": 1}));
        assert!(unenvelope(&[&e[..], &e[..]].concat()).is_err());
        assert!(unenvelope(b"{}").is_err());
        assert_eq!(
            parse_envelopes(&[&e[..], &e[..]].concat()).unwrap().len(),
            2
        );
    }

    #[test]
    fn proto_json_checker() {
        let check = |msg: &str, v: Value| {
            let mut out = Vec::new();
            check_proto_json(msg, &v, msg, true, &mut out);
            out
        };
        let ok = json!({"process": {"cmd": "/bin/bash", "args": ["-c", "x"], "envs": {"A": "1"}, "cwd": "/"}, "stdin": false, "tag": null});
        assert_eq!(check("StartRequest", ok), Vec::<String>::new());
        let p = check(
            "StartRequest",
            json!({"process": {"cmd": "x", "argv": ["y"]}}),
        );
        assert!(
            p[0].contains("StartRequest.process.argv: unknown field"),
            "{p:?}"
        );
        let p = check(
            "StartRequest",
            json!({"process": {"cmd": 5, "args": "x", "envs": {"A": 1}}}),
        );
        assert_eq!(p.len(), 3, "{p:?}");
        let p = check(
            "StartRequest",
            json!({"process": {"cmd": "x"}, "pty": {"size": {"cols": -1, "rows": "24"}}}),
        );
        assert_eq!(p.len(), 1, "{p:?}");
        let p = check(
            "SendSignalRequest",
            json!({"process": {"pid": 1, "tag": "t"}, "signal": "SIGNAL_SIGKILL"}),
        );
        assert!(p[0].contains("oneof"), "{p:?}");
        assert!(
            check(
                "SendSignalRequest",
                json!({"process": {"pid": "7"}, "signal": 9})
            )
            .is_empty()
        );
        assert!(!check("SendSignalRequest", json!({"signal": "SIGKILL"})).is_empty());
        // Original and JSON names are both accepted, but not both at once.
        let mut out = Vec::new();
        check_proto_json(
            "ProcessEvent.EndEvent",
            &json!({"exit_code": 1}),
            "e",
            true,
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
        check_proto_json(
            "ProcessEvent.EndEvent",
            &json!({"exit_code": 1, "exitCode": 1}),
            "e",
            true,
            &mut out,
        );
        assert!(out[0].contains("twice"), "{out:?}");
        // Server output must be canonical.
        let mut out = Vec::new();
        check_proto_json(
            "ProcessEvent.EndEvent",
            &json!({"exit_code": 1}),
            "e",
            false,
            &mut out,
        );
        assert_eq!(out.len(), 1, "{out:?}");
        let mut out = Vec::new();
        check_proto_json(
            "ProcessEvent.DataEvent",
            &json!({"stdout": "aGkK", "stderr": "!!"}),
            "d",
            false,
            &mut out,
        );
        assert_eq!(out.len(), 2, "{out:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sandboxes_and_commands_against_docker() {
        let tag = format!("e2bsim-{}", hex_id(8));
        let sim = E2bSim::start(options(&tag)).await.unwrap();
        let c = Client::new(&sim, KEY);

        // Auth.
        let (s, v) = Client::new(&sim, "e2b_wrong")
            .call("GET", "/v2/sandboxes", None)
            .await;
        assert_eq!((s, v["code"].as_i64()), (401, Some(401)), "{v}");
        assert!(v["message"].is_string());

        // Create: unknown template, then two sandboxes with metadata.
        let (s, v) = c
            .call("POST", "/sandboxes", Some(json!({"templateID": "nope"})))
            .await;
        assert_eq!(s, 404, "{v}");
        let a = c
            .create(json!({
                "templateID": "base", "timeout": 600, "secure": true, "autoPause": true,
                "metadata": {"mcp_computer": "alpha", "owner": "u 1&2"},
                "envVars": {"FROM_SANDBOX": "yes"}
            }))
            .await;
        let a_id = a["sandboxID"].as_str().unwrap().to_owned();
        let a_token = a["envdAccessToken"].as_str().unwrap().to_owned();
        assert_eq!(a["templateID"], "base");
        assert_eq!(a["envdVersion"], ENVD_VERSION);
        assert!(a["domain"].is_null());
        let b = c
            .create(json!({"templateID": "base", "timeout": 600, "metadata": {"mcp_computer": "beta", "owner": "u 1&2"}}))
            .await;
        let b_id = b["sandboxID"].as_str().unwrap().to_owned();
        assert!(b.get("envdAccessToken").is_none(), "{b}");
        assert_eq!(labelled(&tag).await, 2);

        // List by metadata, as the SDK encodes it.
        let q = metadata_query(&[("mcp_computer", "alpha")]);
        let (s, v) = c
            .call("GET", &format!("/v2/sandboxes?metadata={q}"), None)
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v[0]["sandboxID"].as_str(), Some(a_id.as_str()));
        assert_eq!(v[0]["state"], "running");
        let q = metadata_query(&[("owner", "u 1&2")]);
        let (_, v) = c
            .call(
                "GET",
                &format!("/v2/sandboxes?metadata={q}&state=running"),
                None,
            )
            .await;
        assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
        let q = metadata_query(&[("owner", "u 1&2"), ("mcp_computer", "beta")]);
        let (_, v) = c
            .call("GET", &format!("/v2/sandboxes?metadata={q}"), None)
            .await;
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v[0]["sandboxID"].as_str(), Some(b_id.as_str()));
        let (_, v) = c.call("GET", "/v2/sandboxes?state=paused", None).await;
        assert_eq!(v.as_array().unwrap().len(), 0, "{v}");
        // Paging: newest first.
        let (s, h, v) = c.call_h("GET", "/v2/sandboxes?limit=1", None).await;
        assert_eq!(s, 200);
        assert_eq!(v[0]["sandboxID"].as_str(), Some(b_id.as_str()), "{v}");
        assert_eq!(h["x-total-running"], "2");
        let next = h["x-next-token"].to_str().unwrap().to_owned();
        let (_, h, v) = c
            .call_h(
                "GET",
                &format!("/v2/sandboxes?limit=1&nextToken={next}"),
                None,
            )
            .await;
        assert_eq!(v[0]["sandboxID"].as_str(), Some(a_id.as_str()), "{v}");
        assert!(h.get("x-next-token").is_none());
        let (s, _) = c.call("GET", "/v2/sandboxes?nextToken=zzz", None).await;
        assert_eq!(s, 400);

        // Detail.
        let (s, v) = c.call("GET", &format!("/sandboxes/{a_id}"), None).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["state"], "running");
        assert_eq!(v["lifecycle"]["onTimeout"], "pause");
        assert_eq!(v["metadata"]["owner"], "u 1&2");

        // Commands.
        let t = Some(a_token.as_str());
        let r = c.bash(&a_id, t, "echo hi").await;
        assert_eq!(r.stdout, "hi\n");
        assert!(r.pid.is_some_and(|p| p > 1), "{r:?}");
        assert_eq!(
            r.end,
            Some(json!({"exited": true, "status": "exit status 0"})),
            "{r:?}"
        );
        assert_eq!(r.trailer, json!({}));
        let r = c.bash(&a_id, t, "echo oops >&2; exit 3").await;
        assert_eq!(r.stderr, "oops\n");
        assert_eq!(
            r.end,
            Some(
                json!({"exitCode": 3, "exited": true, "status": "exit status 3", "error": "exit status 3"})
            )
        );
        let req = json!({"process": {"cmd": "pwd", "cwd": "/tmp"}});
        let (_, r) = c.start(&a_id, t, req, &[]).await;
        assert_eq!(r.stdout, "/tmp\n", "{r:?}");
        let req = json!({"process": {"cmd": "pwd", "cwd": "/nope"}});
        let (_, r) = c.start(&a_id, t, req, &[]).await;
        assert_eq!(r.trailer["error"]["code"], "invalid_argument", "{r:?}");
        assert!(r.pid.is_none());
        let req = json!({"process": {"cmd": "/bin/sh", "args": ["-c", "echo $FOO-$FROM_SANDBOX"], "envs": {"FOO": "bar"}}});
        let (_, r) = c.start(&a_id, t, req, &[]).await;
        assert_eq!(r.stdout, "bar-yes\n", "{r:?}");
        let r = c
            .bash(&b_id, None, "echo insecure sandbox needs no token")
            .await;
        assert_eq!(r.end.unwrap()["exited"], true);

        // Deadline: killed, no end event, deadline_exceeded.
        let started = Instant::now();
        let req = json!({"process": {"cmd": "/bin/bash", "args": ["-c", "echo before; sleep 30; echo after"]}});
        let (s, r) = c
            .start(&a_id, t, req, &[("Connect-Timeout-Ms", "1000")])
            .await;
        assert_eq!(s, 200);
        assert_eq!(r.stdout, "before\n", "{r:?}");
        assert!(r.end.is_none(), "{r:?}");
        assert_eq!(r.trailer["error"]["code"], "deadline_exceeded", "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let r = c.bash(&a_id, t, SLEEPERS).await;
        assert_eq!(r.stdout, "0\n", "{r:?}");

        // Keepalives, List and SendSignal.
        let c2 = Client::new(&sim, KEY);
        let (id2, tok2) = (a_id.clone(), a_token.clone());
        let long = tokio::spawn(async move {
            let req = json!({"process": {"cmd": "sleep", "args": ["30"]}, "tag": "long"});
            c2.start(&id2, Some(&tok2), req, &[("Keepalive-Ping-Interval", "1")])
                .await
        });
        let mut listed = Value::Null;
        for _ in 0..100 {
            let (s, v) = c.unary(&a_id, t, "List", json!({})).await;
            assert_eq!(s, 200, "{v}");
            if v["processes"].as_array().is_some_and(|p| !p.is_empty()) {
                listed = v;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(listed["processes"][0]["tag"], "long", "{listed}");
        assert_eq!(listed["processes"][0]["config"]["cmd"], "sleep");
        let pid = listed["processes"][0]["pid"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (s, v) = c
            .unary(
                &a_id,
                t,
                "SendSignal",
                json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
            )
            .await;
        assert_eq!((s, &v), (200, &json!({})));
        let (s, r) = long.await.unwrap();
        assert_eq!(s, 200);
        assert_eq!(r.pid, Some(pid));
        assert!(r.keepalives >= 1, "{r:?}");
        assert_eq!(
            r.end,
            Some(json!({"exitCode": -1, "status": "signal: killed", "error": "signal: killed"})),
            "{r:?}"
        );
        let (s, v) = c
            .unary(
                &a_id,
                t,
                "SendSignal",
                json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
            )
            .await;
        assert_eq!((s, v["code"].as_str()), (404, Some("not_found")), "{v}");

        // envd auth and routing.
        let (s, r) = c
            .start(&a_id, None, json!({"process": {"cmd": "true"}}), &[])
            .await;
        assert_eq!(s, 401, "{r:?}");
        assert_eq!(r.trailer["message"], UNAUTHORIZED_ENVD);
        let (s, _) = c
            .start(
                &a_id,
                Some("wrong"),
                json!({"process": {"cmd": "true"}}),
                &[],
            )
            .await;
        assert_eq!(s, 401);
        let (s, r) = c
            .start(
                "nosuchsandbox",
                None,
                json!({"process": {"cmd": "true"}}),
                &[],
            )
            .await;
        assert_eq!(s, 404, "{r:?}");
        assert_eq!(r.trailer["sandboxId"], "nosuchsandbox");

        // Pause keeps files; envd refuses a paused sandbox; connect resumes it with a
        // fresh token.
        let r = c
            .bash(&a_id, t, "echo kept > /root/f; sleep 300 & echo started")
            .await;
        assert_eq!(r.stdout, "started\n");
        let (s, v) = c
            .call("POST", &format!("/sandboxes/{a_id}/pause"), None)
            .await;
        assert_eq!(s, 204, "{v}");
        let (s, v) = c
            .call("POST", &format!("/sandboxes/{a_id}/pause"), None)
            .await;
        assert_eq!(s, 409, "{v}");
        let (_, v) = c.call("GET", &format!("/sandboxes/{a_id}"), None).await;
        assert_eq!(v["state"], "paused");
        let (_, v) = c.call("GET", "/v2/sandboxes?state=paused", None).await;
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        let (s, r) = c
            .start(&a_id, t, json!({"process": {"cmd": "true"}}), &[])
            .await;
        assert_eq!(s, 409, "{r:?}");
        let (s, v) = c
            .call(
                "POST",
                &format!("/sandboxes/{a_id}/connect"),
                Some(json!({"timeout": 600})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let new_token = v["envdAccessToken"].as_str().unwrap().to_owned();
        assert_ne!(new_token, a_token);
        let (s, _) = c
            .start(&a_id, t, json!({"process": {"cmd": "true"}}), &[])
            .await;
        assert_eq!(s, 401);
        let r = c
            .bash(&a_id, Some(&new_token), &format!("cat /root/f; {SLEEPERS}"))
            .await;
        assert_eq!(r.stdout, "kept\n1\n", "{r:?}");
        let (s, v) = c
            .call(
                "POST",
                &format!("/sandboxes/{a_id}/connect"),
                Some(json!({"timeout": 600})),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["envdAccessToken"].as_str(), Some(new_token.as_str()));

        // Filesystem-only pause: files kept, processes gone.
        let (s, _) = c
            .call(
                "POST",
                &format!("/sandboxes/{a_id}/pause"),
                Some(json!({"memory": false})),
            )
            .await;
        assert_eq!(s, 204);
        let (s, v) = c
            .call(
                "POST",
                &format!("/sandboxes/{a_id}/connect"),
                Some(json!({"timeout": 600})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let tok = v["envdAccessToken"].as_str().unwrap().to_owned();
        let r = c
            .bash(&a_id, Some(&tok), &format!("cat /root/f; {SLEEPERS}"))
            .await;
        assert_eq!(r.stdout, "kept\n0\n", "{r:?}");

        // Timeout and refresh.
        let (s, _) = c
            .call(
                "POST",
                &format!("/sandboxes/{b_id}/timeout"),
                Some(json!({"timeout": 3600})),
            )
            .await;
        assert_eq!(s, 204);
        let (s, _) = c
            .call(
                "POST",
                &format!("/sandboxes/{b_id}/refreshes"),
                Some(json!({"duration": 60})),
            )
            .await;
        assert_eq!(s, 204);

        // Kill.
        let (s, _) = c.call("DELETE", &format!("/sandboxes/{b_id}"), None).await;
        assert_eq!(s, 204);
        let (s, _) = c.call("DELETE", &format!("/sandboxes/{b_id}"), None).await;
        assert_eq!(s, 404);
        let (s, v) = c.call("GET", &format!("/sandboxes/{b_id}"), None).await;
        assert_eq!(s, 404, "{v}");
        let (s, _) = c
            .start(&b_id, None, json!({"process": {"cmd": "true"}}), &[])
            .await;
        assert_eq!(s, 404);
        assert_eq!(labelled(&tag).await, 1);

        assert_eq!(sim.violations(), Vec::<String>::new());
        let counts = sim.request_counts();
        assert_eq!(counts["POST /sandboxes"], 3);
        assert!(counts["POST /process.Process/Start"] >= 15, "{counts:?}");
        sim.stop().await;
        assert_eq!(labelled(&tag).await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timeouts_kill_or_pause_and_drop_cleans_up() {
        let tag = format!("e2bsim-{}", hex_id(8));
        let sim = E2bSim::start(options(&tag)).await.unwrap();
        let c = Client::new(&sim, KEY);
        let killed = c.create(json!({"templateID": "base", "timeout": 1})).await;
        let paused = c
            .create(json!({"templateID": "base", "timeout": 1, "autoPause": true, "autoResume": {"enabled": true}}))
            .await;
        let pid = paused["sandboxID"].as_str().unwrap();
        let kid = killed["sandboxID"].as_str().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (k, _) = c.call("GET", &format!("/sandboxes/{kid}"), None).await;
            let (s, v) = c.call("GET", &format!("/sandboxes/{pid}"), None).await;
            assert_eq!(s, 200, "{v}");
            if k == 404 && v["state"] == "paused" {
                break;
            }
            assert!(Instant::now() < deadline, "{k} {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // autoResume: envd traffic resumes it.
        let r = c.bash(pid, None, "echo woke").await;
        assert_eq!(r.stdout, "woke\n");
        let (_, v) = c.call("GET", &format!("/sandboxes/{pid}"), None).await;
        assert_eq!(v["state"], "running", "{v}");
        // The killed sandbox answers 404 at once; its container may take a moment to go.
        let deadline = Instant::now() + Duration::from_secs(15);
        while labelled(&tag).await != 1 {
            assert!(
                Instant::now() < deadline,
                "the killed sandbox's container stays"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(sim.violations(), Vec::<String>::new());
        drop(sim);
        assert_eq!(labelled(&tag).await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn invalid_requests_are_violations() {
        let sim = E2bSim::start(options("e2bsim-invalid")).await.unwrap();
        let c = Client::new(&sim, KEY);
        // `template` is not a NewSandbox field (it is `templateID`).
        let (s, v) = c
            .call(
                "POST",
                "/sandboxes",
                Some(json!({"templateID": "base", "template": "base"})),
            )
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(
            v["message"].as_str().unwrap().starts_with("simulator: "),
            "{v}"
        );
        let (s, _) = c.call("GET", "/v2/sandboxes?metadata.owner=x", None).await;
        assert_eq!(s, 400);
        let (s, _) = c
            .call("POST", "/sandboxes/x/resume", Some(json!({"timeout": 5})))
            .await;
        assert_eq!(s, 404);
        let v = sim.violations();
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].starts_with("POST /sandboxes: "), "{v:?}");
        assert!(v[2].contains("deprecated"), "{v:?}");

        // envd: an unknown StartRequest field, a wrong content type, a missing routing
        // header.
        let sb = c.create(json!({"templateID": "base", "timeout": 60})).await;
        let id = sb["sandboxID"].as_str().unwrap();
        let (s, r) = c
            .start(
                id,
                None,
                json!({"process": {"cmd": "echo", "argv": ["x"]}}),
                &[],
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(r.trailer["error"]["code"], "invalid_argument", "{r:?}");
        let resp = c
            .envd_req(id, None, "Start")
            .header("Content-Type", "application/json")
            .body(r#"{"process":{"cmd":"true"}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 415);
        let resp = c
            .http
            .post(format!("{}/process.Process/List", c.envd))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        let v = sim.violations();
        assert_eq!(v.len(), 6, "{v:?}");
        assert!(v[3].contains("argv: unknown field"), "{v:?}");
        sim.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn injected_faults() {
        let mut opts = options("e2bsim-faults");
        opts.rate_limit_every = Some(3);
        opts.error_5xx_every = Some(5);
        opts.capacity_errors = 1;
        opts.latency_ms = 50;
        let sim = E2bSim::start(opts).await.unwrap();
        let c = Client::new(&sim, KEY);
        let mut statuses = Vec::new();
        let t = Instant::now();
        for _ in 0..6 {
            let (s, h, v) = c.call_h("GET", "/v2/sandboxes", None).await;
            if s == 429 {
                assert_eq!(h["retry-after"], "1");
                assert_eq!(v["code"], 429);
            }
            statuses.push(s);
        }
        assert_eq!(statuses, [200, 200, 429, 200, 503, 429]);
        assert!(t.elapsed() >= Duration::from_millis(300));
        let (s, v) = c
            .call("POST", "/sandboxes", Some(json!({"templateID": "base"})))
            .await;
        assert_eq!(s, 503, "{v}");
        assert_eq!(v["error_code"], "sandbox_capacity_unavailable");
        assert_eq!(sim.violations(), Vec::<String>::new());
        sim.stop().await;
    }
}

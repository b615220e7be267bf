//! A local simulator of the Fly Machines REST API (`https://api.machines.dev/v1`), backed by
//! real Docker containers.
//!
//! Every request is validated against the published OpenAPI description
//! (`specs/fly-machines-openapi.json`, see [`super::openapi`]) before it is served: unknown
//! paths or methods, missing or mistyped parameters, undeclared query parameters, and
//! request bodies that do not match their schema (wrong types, missing required fields,
//! undeclared or deprecated properties) are recorded (see [`FlySim::violations`]) and
//! answered `400 {"error": "simulator: ..."}`. Responses the simulator produces are
//! validated too; a mismatch is recorded as a violation of the simulator itself.
//!
//! Served operations (others answer `501` and are recorded as "unsimulated"):
//! `Apps_list`, `Apps_create`, `Apps_show`, `Apps_delete`, `Machines_list`,
//! `Machines_create`, `Machines_show`, `Machines_start`, `Machines_stop`,
//! `Machines_restart`, `Machines_suspend`, `Machines_delete`, `Machines_wait`,
//! `Machines_exec`, `Machines_list_events`.
//!
//! Behaviour (documented by the spec, the fly-go client, or observed answers; choices are
//! marked *choice*):
//! - auth: `Authorization: Bearer <token>` or `FlyV1 <token>`; otherwise `401`.
//! - app names are global: a taken name is `422 {"status": "name_taken"}`; an unknown
//!   `org_slug` is `404`; a missing one `400`. `idempotency_key` is honoured.
//! - machine names are unique per app among machines that are not destroyed:
//!   `409 "already_exists: unique machine name violation, machine ID <id> already exists
//!   with name \"<name>\""`. Ids are 14 hex characters; versions 26-character ULIDs.
//! - capacity: the first `capacity_errors` creates fail `422 {"status":
//!   "insufficient_capacity"}` (the code fly-go reads).
//! - states: create answers `created`, then `starting` → `started` in the background
//!   (unless `skip_launch`); stop `stopping` → `stopped`; restart `stopping` → `starting`
//!   → `started`; suspend `suspending` → `suspended` (docker pause); destroy `destroying` →
//!   `destroyed`. A main process that exits on its own makes the machine `stopped` (or
//!   `destroyed` with `auto_destroy`); restart policies are not simulated (*choice*).
//! - preconditions answer `412 failed_precondition: ...` (the flaps convention): delete of
//!   a machine that is not stopped/suspended/failed/created without `force=true`; start of
//!   an active machine ("machine still active, refusing to start"); exec on a machine that
//!   is not `started` ("machine not running"); stop/restart/suspend from a state they
//!   cannot apply to (*choice*: strict rather than a silent no-op). Actions on a destroyed
//!   machine are `404`; `GET` still shows it, and lists only with `include_deleted=true`.
//! - wait: `state` (repeated or comma-separated, default `started`; `settled` = any
//!   non-transitional state), `timeout` seconds 1..=60 (default 60; outside → `400`,
//!   *choice*); reached → `200 {ok, state, event_id, version}`; timed out → `408`; a
//!   destroyed machine that cannot reach the state → `400`.
//! - exec: `command` argv, `stdin` written then closed, `timeout` seconds (default 60,
//!   *choice*). On timeout the process is killed: `200 {exit_code: 137, exit_signal: 9}`
//!   with the output so far (*choice*; undocumented). The command runs through
//!   `/bin/sh -c 'exec "$@"'` so it can be killed (the image needs `/bin/sh`).
//! - rootfs: `config.rootfs.persist` `always`/`restart` keep the container's files across
//!   restart and stop/start; `never` or absent (Fly's default) recreate the container from
//!   the image on every restart and on start after stop. Suspend/resume keeps everything.
//! - the main process is `config.init.exec` (else `init.entrypoint`/`init.cmd` over the
//!   image's), and without any of them a keep-alive shell (*choice*, so a bare image stays
//!   up). Containers run with Docker's init, `config.env` plus `FLY_APP_NAME`,
//!   `FLY_MACHINE_ID`, `FLY_REGION`, `FLY_IMAGE_REF`, `FLY_MACHINE_VERSION`, hostname = id.
//!   Guest sizes are not enforced. `files`, `mounts`, `containers`, `processes` and
//!   `statics` are accepted by the validator but not simulated: using them is recorded.
//! - faults: every request that passes validation and auth is counted; every
//!   `rate_limit_every`-th answers `429 {"error": "rate limited"}` with `retry-after: 1`,
//!   every `error_5xx_every`-th `503`. `latency_ms` delays every answer.
//! - every answer carries a `fly-request-id` header.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, KillContainerOptions, RemoveContainerOptions, StopContainerOptions,
};
use futures_util::StreamExt;
use rand::Rng;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};

use super::openapi::{Matched, RequestParts, Spec};
use super::{close, injected_fault, lock, path, query, remove_labelled, shut_down};

/// Keeps a machine up when neither the request nor the image says what to run.
const KEEPALIVE: &str = "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done";

/// How the simulator behaves.
#[derive(Clone, Debug)]
pub struct FlySimOptions {
    /// The only accepted token (`Authorization: Bearer <token>` or `FlyV1 <token>`).
    pub token: String,
    /// The organization apps may be created in, e.g. `personal`.
    pub org_slug: String,
    /// A label put on every backing container, e.g. `("msc-test", tag)`.
    pub docker_label: (String, String),
    /// Fly image reference → local Docker image (unlisted references are used as given).
    pub image_map: Vec<(String, String)>,
    /// Added to every answer.
    pub latency_ms: u64,
    /// Every Nth served request answers 429.
    pub rate_limit_every: Option<u32>,
    /// Every Nth served request answers 503.
    pub error_5xx_every: Option<u32>,
    /// The first N machine creates fail with `insufficient_capacity`.
    pub capacity_errors: u32,
}

impl Default for FlySimOptions {
    fn default() -> Self {
        Self {
            token: "flysim-token".to_owned(),
            org_slug: "personal".to_owned(),
            docker_label: ("msc-test".to_owned(), "flysim".to_owned()),
            image_map: Vec::new(),
            latency_ms: 0,
            rate_limit_every: None,
            error_5xx_every: None,
            capacity_errors: 0,
        }
    }
}

impl FlySimOptions {
    /// What the tests use: `token`, containers labelled `msc-test=tag`, Fly's default
    /// image served by the local `debian:bookworm-slim`.
    pub fn debian(token: &str, tag: &str) -> Self {
        Self {
            token: token.to_owned(),
            docker_label: ("msc-test".to_owned(), tag.to_owned()),
            image_map: vec![(
                "docker.io/library/debian:bookworm-slim".to_owned(),
                "debian:bookworm-slim".to_owned(),
            )],
            ..Self::default()
        }
    }
}

/// A running simulator. Call [`FlySim::stop`] to remove its containers.
pub struct FlySim {
    /// Base URL, e.g. `http://127.0.0.1:PORT` (paths start with `/v1`).
    pub url: String,
    inner: Arc<Inner>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    stopped: bool,
}

impl FlySim {
    /// Binds a port on 127.0.0.1 and serves the API.
    pub async fn start(opts: FlySimOptions) -> Result<FlySim> {
        let docker = Docker::connect_with_unix_defaults()
            .context("connecting to the Docker daemon")?
            .negotiate_version()
            .await
            .context("negotiating the Docker API version")?;
        let (changed, _) = watch::channel(0u64);
        let inner = Arc::new(Inner {
            opts,
            spec: Spec::fly(),
            docker,
            instance: hex_id(12),
            world: Mutex::new(World::default()),
            changed,
            violations: Mutex::new(Vec::new()),
            counts: Mutex::new(BTreeMap::new()),
            faults: Mutex::new(BTreeMap::new()),
            served: AtomicU64::new(0),
            creates: AtomicU32::new(0),
            closing: AtomicBool::new(false),
            background: Mutex::new(Vec::new()),
        });
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(FlySim {
            url: format!("http://{addr}"),
            inner,
            shutdown: Some(tx),
            server,
            stopped: false,
        })
    }

    /// Every validation failure seen so far (requests that do not match the API
    /// description, unsimulated features, and answers of the simulator that do not match).
    pub fn violations(&self) -> Vec<String> {
        lock(&self.inner.violations).clone()
    }

    /// Requests by `METHOD /path/template` (unmatched paths are counted as sent).
    pub fn request_counts(&self) -> BTreeMap<String, u32> {
        lock(&self.inner.counts).clone()
    }

    /// Injected faults (429 and 5xx answers) by `METHOD /path/template`.
    pub fn fault_counts(&self) -> BTreeMap<String, u32> {
        lock(&self.inner.faults).clone()
    }

    /// Stops serving and removes every backing container.
    pub async fn stop(mut self) {
        let inner = self.inner.clone();
        // Let in-flight Docker operations finish; queued ones see `closing` and return.
        let op_locks: Vec<_> = lock(&inner.world)
            .machines
            .values()
            .map(|m| m.op.clone())
            .collect();
        shut_down(&inner.closing, &inner.background, op_locks).await;
        inner.remove_all_containers().await;
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(Duration::from_secs(2), &mut self.server)
            .await
            .is_err()
        {
            self.server.abort();
        }
        self.stopped = true;
    }
}

impl Drop for FlySim {
    /// Without [`FlySim::stop`] (e.g. a test panicked): stop serving and remove the
    /// containers from a helper thread, so no runtime is needed.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        close(&self.inner.closing, &self.inner.background);
        self.server.abort();
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
                    remove_labelled(&docker, &format!("flysim.instance={instance}")).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// Shared state of one simulator.
struct Inner {
    opts: FlySimOptions,
    spec: &'static Spec,
    docker: Docker,
    /// Labels this simulator's containers (`flysim.instance`).
    instance: String,
    world: Mutex<World>,
    /// Bumped on every machine state change (for `wait`).
    changed: watch::Sender<u64>,
    violations: Mutex<Vec<String>>,
    counts: Mutex<BTreeMap<String, u32>>,
    /// Injected 429s and 5xx, by the same keys as `counts`.
    faults: Mutex<BTreeMap<String, u32>>,
    served: AtomicU64,
    creates: AtomicU32,
    closing: AtomicBool,
    background: Mutex<Vec<AbortHandle>>,
}

#[derive(Default)]
struct World {
    apps: BTreeMap<String, App>,
    machines: BTreeMap<String, Machine>,
    seq: u64,
}

struct App {
    id: String,
    name: String,
    org_slug: String,
    numeric_id: u64,
    created_at_ms: u64,
    idempotency_key: Option<String>,
    seq: u64,
}

struct Machine {
    id: String,
    app: String,
    name: String,
    region: String,
    state: String,
    config: Value,
    version: String,
    created_at: String,
    updated_at: String,
    private_ip: String,
    /// Newest first.
    events: Vec<Value>,
    /// Docker container name (absent once removed).
    container: Option<String>,
    /// Created but never started: starting it does not count as a reboot.
    fresh: bool,
    /// Bumped whenever the simulator itself stops the main process.
    generation: u64,
    /// Serializes the Docker operations of this machine.
    op: Arc<tokio::sync::Mutex<()>>,
    seq: u64,
}

impl Machine {
    fn persist_rootfs(&self) -> bool {
        matches!(
            self.config
                .pointer("/rootfs/persist")
                .and_then(Value::as_str),
            Some("always" | "restart")
        )
    }

    fn auto_destroy(&self) -> bool {
        self.config.get("auto_destroy").and_then(Value::as_bool) == Some(true)
    }

    fn metadata(&self, key: &str) -> Option<&str> {
        self.config
            .get("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
    }

    fn last_event_id(&self) -> String {
        self.events
            .first()
            .and_then(|e| e.get("id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    fn to_json(&self, summary: bool) -> Value {
        let image = self
            .config
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut m = json!({
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "region": self.region,
            "instance_id": self.version,
            "version": self.version,
            "private_ip": self.private_ip,
            "image_ref": image_ref(image),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        });
        if !summary {
            m["config"] = self.config.clone();
            m["events"] = Value::Array(self.events.iter().take(20).cloned().collect());
            m["host_status"] = json!("ok");
            m["checks"] = json!([]);
        }
        m
    }
}

/// One answer before it becomes an HTTP response.
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
        Reply::json(status, json!({ "error": msg.into() }))
    }

    fn coded(status: u16, msg: impl Into<String>, code: &str) -> Reply {
        Reply::json(status, json!({ "error": msg.into(), "status": code }))
    }

    fn ok() -> Reply {
        Reply::json(200, json!({ "ok": true }))
    }
}

async fn handle(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let reply = inner.serve(req).await;
    if inner.opts.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(inner.opts.latency_ms)).await;
    }
    let mut b = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("fly-request-id", hex_id(20));
    for (k, v) in reply.headers {
        b = b.header(k, v);
    }
    let body = match reply.body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            Body::from(serde_json::to_vec(&v).unwrap_or_default())
        }
        None => Body::empty(),
    };
    b.body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

impl Inner {
    fn violation(&self, v: String) {
        lock(&self.violations).push(v);
    }

    async fn serve(self: &Arc<Self>, req: Request) -> Reply {
        let (parts, body) = req.into_parts();
        let body = match axum::body::to_bytes(body, 64 << 20).await {
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
                *lock(&self.counts).entry(key.clone()).or_default() += 1;
                let what = r.problems.join("; ");
                self.violation(format!("{key}: {what}"));
                return Reply::error(400, format!("simulator: {what}"));
            }
        };
        let key = format!("{} {}", matched.op.method, matched.op.template);
        *lock(&self.counts).entry(key.clone()).or_default() += 1;

        let token = &self.opts.token;
        let authorized = header("authorization").is_some_and(|a| {
            a.strip_prefix("Bearer ")
                .or_else(|| a.strip_prefix("FlyV1 "))
                .is_some_and(|t| t.trim() == token)
        });
        if !authorized {
            return self.checked(
                &matched,
                Reply::error(401, "You must be authenticated to view this."),
            );
        }

        let n = self.served.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = injected_fault(n, self.opts.rate_limit_every, self.opts.error_5xx_every);
        if fault.is_some() {
            *lock(&self.faults).entry(key.clone()).or_default() += 1;
        }
        match fault {
            Some(429) => {
                let mut r = Reply::error(429, "rate limited");
                r.headers.push(("retry-after", "1".to_owned()));
                return self.checked(&matched, r);
            }
            Some(status) => {
                return self.checked(&matched, Reply::error(status, "service unavailable"));
            }
            None => {}
        }

        let reply = match matched.op.operation_id.as_str() {
            "Apps_list" => self.apps_list(&matched),
            "Apps_create" => self.apps_create(&matched),
            "Apps_show" => self.apps_show(&matched),
            "Apps_delete" => self.apps_delete(&matched),
            "Machines_list" => self.machines_list(&matched),
            "Machines_create" => self.machines_create(&matched).await,
            "Machines_show" => self.machines_show(&matched),
            "Machines_start" => self.machines_start(&matched),
            "Machines_stop" => self.machines_stop(&matched),
            "Machines_restart" => self.machines_restart(&matched),
            "Machines_suspend" => self.machines_suspend(&matched),
            "Machines_delete" => self.machines_delete(&matched),
            "Machines_wait" => self.machines_wait(&matched).await,
            "Machines_exec" => self.machines_exec(&matched).await,
            "Machines_list_events" => self.machines_events(&matched),
            _ => {
                self.violation(format!(
                    "{key}: unsimulated operation {}",
                    matched.op.operation_id
                ));
                Reply::error(
                    501,
                    format!("simulator: {} is not simulated", matched.op.operation_id),
                )
            }
        };
        self.checked(&matched, reply)
    }

    /// Validates an answer against the response schema; mismatches are recorded.
    fn checked(&self, m: &Matched<'_>, reply: Reply) -> Reply {
        for p in self
            .spec
            .check_response(m.op, reply.status, reply.body.as_ref())
        {
            self.violation(format!(
                "simulator answer to {} {} ({}): {p}",
                m.op.method, m.op.template, reply.status
            ));
        }
        reply
    }

    // ----- apps -----

    fn app_json(&self, w: &World, a: &App) -> Value {
        let count = w
            .machines
            .values()
            .filter(|m| m.app == a.name && m.state != "destroyed")
            .count();
        json!({
            "id": a.id,
            "name": a.name,
            "internal_numeric_id": a.numeric_id,
            "machine_count": count,
            "volume_count": 0,
            "network": "default",
            "organization": { "name": a.org_slug, "slug": a.org_slug, "internal_numeric_id": 1 },
            "status": if count > 0 { "deployed" } else { "pending" },
        })
    }

    fn apps_list(&self, m: &Matched<'_>) -> Reply {
        let org = query(m, "org_slug").unwrap_or_default();
        let limit = query(m, "limit").and_then(|l| l.parse::<usize>().ok());
        let cursor = query(m, "cursor");
        if cursor.is_some() && limit.is_none() {
            return Reply::error(400, "invalid_argument: cursor requires limit");
        }
        if limit.is_some_and(|l| !(1..=5000).contains(&l)) {
            return Reply::error(400, "invalid_argument: limit must be between 1 and 5000");
        }
        let w = lock(&self.world);
        let mut apps: Vec<&App> = w
            .apps
            .values()
            .filter(|a| {
                a.org_slug == org || (org == "personal" && a.org_slug == self.opts.org_slug)
            })
            .collect();
        apps.sort_by_key(|a| a.seq);
        let total = apps.len();
        let after: u64 = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
        let page: Vec<&App> = apps.into_iter().filter(|a| a.seq > after).collect();
        let take = limit.unwrap_or(usize::MAX).min(page.len());
        let mut body = json!({
            "apps": page[..take].iter().map(|a| self.app_json(&w, a)).collect::<Vec<_>>(),
            "total_apps": total,
        });
        if take < page.len()
            && let Some(last) = page[..take].last()
        {
            body["next_cursor"] = json!(last.seq.to_string());
        }
        Reply::json(200, body)
    }

    fn apps_create(&self, m: &Matched<'_>) -> Reply {
        let body = m.body.clone().unwrap_or_default();
        let name = body.get("name").and_then(Value::as_str).unwrap_or_default();
        let org = body
            .get("org_slug")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let key = body.get("idempotency_key").and_then(Value::as_str);
        if org.is_empty() {
            return Reply::error(400, "invalid_argument: org_slug is required");
        }
        if org != self.opts.org_slug && org != "personal" {
            return Reply::error(404, format!("organization {org} not found"));
        }
        let mut w = lock(&self.world);
        if let Some(key) = key
            && let Some(prev) = w
                .apps
                .values()
                .find(|a| a.idempotency_key.as_deref() == Some(key))
        {
            if name.is_empty() || prev.name == name {
                return Reply::json(
                    201,
                    json!({"id": prev.id, "created_at": prev.created_at_ms}),
                );
            }
            return Reply::error(
                422,
                "Validation failed: idempotency_key was already used with a different name",
            );
        }
        if name.is_empty() {
            return Reply::error(400, "invalid_argument: name is required");
        }
        if !valid_app_name(name) {
            return Reply::error(
                422,
                "Validation failed: Name may only contain lowercase letters, numbers, and dashes",
            );
        }
        if w.apps.contains_key(name) {
            return Reply::coded(
                422,
                "Validation failed: Name has already been taken",
                "name_taken",
            );
        }
        w.seq += 1;
        let app = App {
            id: hex_id(16),
            name: name.to_owned(),
            org_slug: self.opts.org_slug.clone(),
            numeric_id: rand::rng().random_range(100_000..999_999),
            created_at_ms: now_ms(),
            idempotency_key: key.map(str::to_owned),
            seq: w.seq,
        };
        let reply = json!({"id": app.id, "created_at": app.created_at_ms});
        w.apps.insert(name.to_owned(), app);
        Reply::json(201, reply)
    }

    fn apps_show(&self, m: &Matched<'_>) -> Reply {
        let w = lock(&self.world);
        match w.apps.get(path(m, "app_name")) {
            Some(a) => Reply::json(200, self.app_json(&w, a)),
            None => Reply::error(404, "app not found"),
        }
    }

    fn apps_delete(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let app = path(m, "app_name");
        let ids: Vec<String> = {
            let mut w = lock(&self.world);
            if w.apps.remove(app).is_none() {
                return Reply::error(404, "app not found");
            }
            w.machines
                .values()
                .filter(|x| x.app == app && !matches!(x.state.as_str(), "destroyed" | "destroying"))
                .map(|x| x.id.clone())
                .collect()
        };
        for id in ids {
            self.set_state(&id, "destroying", "destroy", "user", |x| x.generation += 1);
            let me = self.clone();
            self.spawn(async move { me.destroy(id).await });
        }
        Reply {
            status: 202,
            body: None,
            headers: Vec::new(),
        }
    }

    // ----- machines -----

    /// The machine `machine_id` of `app_name` (404 when either is unknown).
    /// [`Self::with_machine`] for an action: a destroyed machine is not found.
    fn with_live_machine<T>(
        &self,
        m: &Matched<'_>,
        f: impl FnOnce(&mut Machine) -> std::result::Result<T, Reply>,
    ) -> std::result::Result<T, Reply> {
        self.with_machine(m, |x| {
            if x.state == "destroyed" {
                return Err(Reply::error(404, "not_found: machine not found"));
            }
            f(x)
        })
    }

    fn with_machine<T>(
        &self,
        m: &Matched<'_>,
        f: impl FnOnce(&mut Machine) -> std::result::Result<T, Reply>,
    ) -> std::result::Result<T, Reply> {
        let app = path(m, "app_name");
        let id = path(m, "machine_id");
        let mut w = lock(&self.world);
        if !w.apps.contains_key(app) {
            return Err(Reply::error(404, "app not found"));
        }
        match w.machines.get_mut(id) {
            Some(x) if x.app == app => f(x),
            _ => Err(Reply::error(404, "not_found: machine not found")),
        }
    }

    fn machines_list(&self, m: &Matched<'_>) -> Reply {
        let app = path(m, "app_name");
        let include_deleted = query_bool(m, "include_deleted");
        let summary = query_bool(m, "summary");
        let region = query(m, "region");
        let states: Vec<&str> = query(m, "state")
            .map(|s| s.split(',').filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        let limit = query(m, "limit").and_then(|l| l.parse::<usize>().ok());
        let cursor = query(m, "cursor");
        if cursor.is_some() && limit.is_none() {
            return Reply::error(400, "invalid_argument: cursor requires limit");
        }
        if limit.is_some_and(|l| !(1..=1000).contains(&l)) {
            return Reply::error(400, "invalid_argument: limit must be between 1 and 1000");
        }
        let after: u64 = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
        let filters: Vec<(&str, &str)> = m
            .query
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("metadata.").map(|k| (k, v.as_str())))
            .collect();
        let w = lock(&self.world);
        if !w.apps.contains_key(app) {
            return Reply::error(404, "app not found");
        }
        let mut list: Vec<&Machine> = w
            .machines
            .values()
            .filter(|x| x.app == app && x.seq > after)
            .filter(|x| include_deleted || x.state != "destroyed")
            .filter(|x| region.is_none_or(|r| r == x.region))
            .filter(|x| states.is_empty() || states.contains(&x.state.as_str()))
            .filter(|x| filters.iter().all(|(k, v)| x.metadata(k) == Some(*v)))
            .collect();
        list.sort_by_key(|x| x.seq);
        let take = limit.unwrap_or(usize::MAX).min(list.len());
        let mut reply = Reply::json(
            200,
            Value::Array(list[..take].iter().map(|x| x.to_json(summary)).collect()),
        );
        if take < list.len()
            && let Some(last) = list[..take].last()
        {
            reply
                .headers
                .push(("fly-next-cursor", last.seq.to_string()));
        }
        reply
    }

    async fn machines_create(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let app = path(m, "app_name").to_owned();
        let body = m.body.clone().unwrap_or_default();
        let mut config = body.get("config").cloned().unwrap_or_else(|| json!({}));
        let image = config
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let skip_launch = body.get("skip_launch").and_then(Value::as_bool) == Some(true);
        if !lock(&self.world).apps.contains_key(&app) {
            return Reply::error(404, "app not found");
        }
        if image.is_empty() {
            return Reply::error(400, "invalid_argument: config.image is required");
        }
        for unsimulated in ["files", "mounts", "containers", "processes", "statics"] {
            if config
                .get(unsimulated)
                .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()))
            {
                self.violation(format!(
                    "POST /v1/apps/{{app_name}}/machines: config.{unsimulated} is not simulated"
                ));
            }
        }
        if self.creates.fetch_add(1, Ordering::SeqCst) < self.opts.capacity_errors {
            return Reply::coded(
                422,
                "insufficient resources available to fulfill request: could not reserve resource for machine",
                "insufficient_capacity",
            );
        }
        let id = hex_id(14);
        let name = body
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("machine-{}", hex_id(6)));
        let region = body
            .get("region")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .unwrap_or("iad")
            .to_owned();
        if let Some(obj) = config.as_object_mut()
            && !obj.contains_key("guest")
        {
            obj.insert(
                "guest".to_owned(),
                json!({"cpu_kind": "shared", "cpus": 1, "memory_mb": 256}),
            );
        }
        // Name check and reservation (the container is created outside the lock).
        let op = Arc::new(tokio::sync::Mutex::new(()));
        let guard = op.clone().lock_owned().await;
        {
            let mut w = lock(&self.world);
            if let Some(other) = w
                .machines
                .values()
                .find(|x| x.app == app && x.name == name && x.state != "destroyed")
            {
                return Reply::error(
                    409,
                    format!(
                        "already_exists: unique machine name violation, machine ID {} already exists with name \"{name}\"",
                        other.id
                    ),
                );
            }
            w.seq += 1;
            let now = rfc3339(SystemTime::now());
            let machine = Machine {
                id: id.clone(),
                app: app.clone(),
                name,
                region,
                state: "created".to_owned(),
                config,
                version: ulid(),
                created_at: now.clone(),
                updated_at: now,
                private_ip: format!(
                    "fdaa:0:{:x}:a7b:{:x}:{:x}:{:x}:2",
                    rand::rng().random_range(1..0xffff_u32),
                    rand::rng().random_range(1..0xffff_u32),
                    rand::rng().random_range(1..0xffff_u32),
                    rand::rng().random_range(1..0xffff_u32)
                ),
                events: Vec::new(),
                container: None,
                fresh: true,
                generation: 0,
                op: op.clone(),
                seq: w.seq,
            };
            w.machines.insert(id.clone(), machine);
        }
        if self.closing.load(Ordering::SeqCst) {
            lock(&self.world).machines.remove(&id);
            return Reply::error(503, "service unavailable");
        }
        if let Err(e) = self.create_container(&id).await {
            lock(&self.world).machines.remove(&id);
            return Reply::error(422, format!("failed to launch VM: {e:#}"));
        }
        let snapshot = self.set_state(&id, "created", "launch", "user", |_| {});
        drop(guard);
        if !skip_launch {
            let me = self.clone();
            let id2 = id.clone();
            self.spawn(async move { me.start(id2).await });
        }
        match snapshot {
            Some(v) => Reply::json(200, v),
            None => Reply::error(404, "not_found: machine not found"),
        }
    }

    fn machines_show(&self, m: &Matched<'_>) -> Reply {
        match self.with_machine(m, |x| Ok(x.to_json(false))) {
            Ok(v) => Reply::json(200, v),
            Err(r) => r,
        }
    }

    fn machines_events(&self, m: &Matched<'_>) -> Reply {
        let limit = query(m, "limit")
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(20)
            .min(50);
        match self.with_machine(m, |x| Ok(x.events.iter().take(limit).cloned().collect())) {
            Ok(v) => Reply::json(200, Value::Array(v)),
            Err(r) => r,
        }
    }

    fn machines_start(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let prev = self.with_live_machine(m, |x| match x.state.as_str() {
            "created" | "stopped" | "suspended" | "failed" => Ok(x.state.clone()),
            "destroying" => Err(Reply::error(
                412,
                "failed_precondition: machine is being destroyed",
            )),
            _ => Err(Reply::error(
                412,
                "failed_precondition: machine still active, refusing to start",
            )),
        });
        let prev = match prev {
            Ok(p) => p,
            Err(r) => return r,
        };
        let id = path(m, "machine_id").to_owned();
        self.set_state(&id, "starting", "start", "user", |_| {});
        let me = self.clone();
        self.spawn(async move { me.start(id).await });
        Reply::json(
            200,
            json!({"previous_state": prev, "migrated": false, "new_host": ""}),
        )
    }

    fn machines_stop(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let body = m.body.clone().unwrap_or_default();
        let (signal, timeout) = match self.stop_params(m, body.get("signal"), body.get("timeout")) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let prev = self.with_live_machine(m, |x| match x.state.as_str() {
            "started" | "starting" | "suspended" => {
                x.generation += 1;
                Ok(x.state.clone())
            }
            s => Err(Reply::error(
                412,
                format!("failed_precondition: unable to stop machine, not currently started (state: {s})"),
            )),
        });
        let prev = match prev {
            Ok(p) => p,
            Err(r) => return r,
        };
        let id = path(m, "machine_id").to_owned();
        self.set_state(&id, "stopping", "stop", "user", |_| {});
        let me = self.clone();
        self.spawn(async move {
            me.stop_machine(id, prev == "suspended", signal, timeout)
                .await
        });
        Reply::ok()
    }

    fn machines_restart(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let signal = query(m, "signal").map(|s| Value::String(s.to_owned()));
        let timeout = query(m, "timeout").map(|s| Value::String(s.to_owned()));
        let (signal, timeout) = match self.stop_params(m, signal.as_ref(), timeout.as_ref()) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let ok = self.with_live_machine(m, |x| match x.state.as_str() {
            "started" => {
                x.generation += 1;
                Ok(())
            }
            s => Err(Reply::error(
                412,
                format!("failed_precondition: unable to restart machine, not currently started (state: {s})"),
            )),
        });
        if let Err(r) = ok {
            return r;
        }
        let id = path(m, "machine_id").to_owned();
        self.set_state(&id, "stopping", "restart", "user", |_| {});
        let me = self.clone();
        self.spawn(async move { me.restart(id, signal, timeout).await });
        Reply::ok()
    }

    fn machines_suspend(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let ok = self.with_live_machine(m, |x| match x.state.as_str() {
            "started" => Ok(()),
            s => Err(Reply::error(
                412,
                format!("failed_precondition: unable to suspend machine, not currently started (state: {s})"),
            )),
        });
        if let Err(r) = ok {
            return r;
        }
        let id = path(m, "machine_id").to_owned();
        self.set_state(&id, "suspending", "suspend", "user", |_| {});
        let me = self.clone();
        self.spawn(async move { me.suspend(id).await });
        Reply::ok()
    }

    fn machines_delete(self: &Arc<Self>, m: &Matched<'_>) -> Reply {
        let force = query_bool(m, "force");
        let ok = self.with_live_machine(m, |x| match x.state.as_str() {
            "destroying" => Err(Reply::error(412, "failed_precondition: machine is being destroyed")),
            "stopped" | "suspended" | "failed" | "created" => Ok(()),
            _ if force => Ok(()),
            _ => Err(Reply::error(
                412,
                "failed_precondition: unable to destroy machine, not currently stopped, suspended, failed, or created",
            )),
        });
        if let Err(r) = ok {
            return r;
        }
        let id = path(m, "machine_id").to_owned();
        self.set_state(&id, "destroying", "destroy", "user", |x| x.generation += 1);
        let me = self.clone();
        self.spawn(async move { me.destroy(id).await });
        Reply::ok()
    }

    async fn machines_wait(&self, m: &Matched<'_>) -> Reply {
        let mut wanted: Vec<String> = m
            .query
            .iter()
            .filter(|(k, _)| k == "state")
            .flat_map(|(_, v)| v.split(',').map(str::to_owned).collect::<Vec<_>>())
            .filter(|s| !s.is_empty())
            .collect();
        if wanted.is_empty() {
            wanted.push("started".to_owned());
        }
        let timeout = match query(m, "timeout").map(str::parse::<u64>) {
            None => 60,
            Some(Ok(t)) if (1..=60).contains(&t) => t,
            Some(_) => {
                return Reply::error(
                    400,
                    "invalid_argument: timeout must be between 1 and 60 seconds",
                );
            }
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut rx = self.changed.subscribe();
        loop {
            let now = self.with_machine(m, |x| {
                Ok((x.state.clone(), x.last_event_id(), x.version.clone()))
            });
            let (state, event_id, version) = match now {
                Ok(t) => t,
                Err(r) => return r,
            };
            let reached = wanted.iter().any(|w| {
                *w == state
                    || (w == "settled"
                        && matches!(
                            state.as_str(),
                            "created"
                                | "started"
                                | "stopped"
                                | "suspended"
                                | "failed"
                                | "destroyed"
                        ))
            });
            if reached {
                return Reply::json(
                    200,
                    json!({"ok": true, "state": state, "event_id": event_id, "version": version}),
                );
            }
            if state == "destroyed" {
                return Reply::error(
                    400,
                    format!(
                        "failed_precondition: machine failed to reach desired state, {}, currently destroyed",
                        wanted.join(",")
                    ),
                );
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Reply::error(
                        408,
                        format!(
                            "deadline_exceeded: machine did not reach state {} within {timeout}s (currently {state})",
                            wanted.join(",")
                        ),
                    );
                }
            }
        }
    }

    async fn machines_exec(&self, m: &Matched<'_>) -> Reply {
        let body = m.body.clone().unwrap_or_default();
        let argv: Vec<String> = match body.get("command").and_then(Value::as_array) {
            Some(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            None => body
                .get("cmd")
                .and_then(Value::as_str)
                .map(|c| c.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
        };
        if argv.is_empty() {
            return Reply::error(400, "invalid_argument: command is required");
        }
        let stdin = body.get("stdin").and_then(Value::as_str).map(str::to_owned);
        let timeout = body
            .get("timeout")
            .and_then(Value::as_u64)
            .filter(|t| *t > 0)
            .unwrap_or(60);
        let container = self.with_machine(m, |x| match (x.state.as_str(), &x.container) {
            ("started", Some(c)) => Ok(c.clone()),
            ("destroyed", _) => Err(Reply::error(404, "not_found: machine not found")),
            _ => Err(Reply::error(
                412,
                "failed_precondition: machine not running",
            )),
        });
        let container = match container {
            Ok(c) => c,
            Err(r) => return r,
        };
        match self
            .exec(&container, argv, stdin, Duration::from_secs(timeout))
            .await
        {
            Ok(out) => {
                let mut v = json!({
                    "exit_code": out.exit_code,
                    "stdout": String::from_utf8_lossy(&out.stdout),
                    "stderr": String::from_utf8_lossy(&out.stderr),
                });
                if let Some(sig) = out.exit_signal {
                    v["exit_signal"] = json!(sig);
                }
                Reply::json(200, v)
            }
            Err(e) => Reply::error(500, format!("internal: exec failed: {e:#}")),
        }
    }

    /// Signal and stop timeout (seconds) from a request, else from `config.stop_config`.
    fn stop_params(
        &self,
        m: &Matched<'_>,
        signal: Option<&Value>,
        timeout: Option<&Value>,
    ) -> std::result::Result<(Option<String>, i32), Reply> {
        let stop_config = self
            .with_machine(m, |x| Ok(x.config.get("stop_config").cloned()))
            .ok()
            .flatten()
            .unwrap_or_default();
        let signal = signal
            .or_else(|| stop_config.get("signal"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let timeout = match timeout
            .or_else(|| stop_config.get("timeout"))
            .and_then(Value::as_str)
        {
            None => 5,
            Some(t) => match parse_go_duration(t) {
                Some(s) if s >= 0.0 => s.ceil().min(3600.0) as i32,
                _ => {
                    return Err(Reply::error(
                        400,
                        format!("invalid_argument: invalid timeout {t:?}"),
                    ));
                }
            },
        };
        Ok((signal, timeout))
    }

    // ----- state changes -----

    /// Sets a machine's state, records an event and wakes waiters; returns the machine.
    fn set_state(
        &self,
        id: &str,
        state: &str,
        kind: &str,
        source: &str,
        also: impl FnOnce(&mut Machine),
    ) -> Option<Value> {
        let v = {
            let mut w = lock(&self.world);
            let x = w.machines.get_mut(id)?;
            also(x);
            x.state = state.to_owned();
            x.updated_at = rfc3339(SystemTime::now());
            x.events.insert(
                0,
                json!({
                    "id": ulid(),
                    "type": kind,
                    "status": state,
                    "source": source,
                    "timestamp": now_ms(),
                }),
            );
            x.events.truncate(50);
            x.to_json(false)
        };
        self.changed.send_modify(|n| *n += 1);
        Some(v)
    }

    fn state_of(&self, id: &str) -> Option<String> {
        lock(&self.world).machines.get(id).map(|x| x.state.clone())
    }

    fn op_lock(&self, id: &str) -> Option<Arc<tokio::sync::Mutex<()>>> {
        lock(&self.world).machines.get(id).map(|x| x.op.clone())
    }

    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(fut);
        let mut bg = lock(&self.background);
        bg.retain(|h| !h.is_finished());
        bg.push(h.abort_handle());
    }

    /// Boots the machine: resumes a suspended one, recreates an ephemeral rootfs, starts.
    async fn start(self: Arc<Self>, id: String) {
        let Some(op) = self.op_lock(&id) else { return };
        let _g = op.lock().await;
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let (container, fresh, persist) = {
            let mut w = lock(&self.world);
            let Some(x) = w.machines.get_mut(&id) else {
                return;
            };
            if x.state == "created" {
                x.state = "starting".to_owned();
            }
            if x.state != "starting" {
                return;
            }
            (x.container.clone(), x.fresh, x.persist_rootfs())
        };
        self.changed.send_modify(|n| *n += 1);
        let result = async {
            let paused = match &container {
                Some(c) => self
                    .docker
                    .inspect_container(c, None)
                    .await
                    .ok()
                    .and_then(|i| i.state)
                    .and_then(|s| s.paused)
                    .unwrap_or(false),
                None => false,
            };
            if paused {
                if let Some(c) = &container {
                    self.docker.unpause_container(c).await?;
                }
                return Ok::<bool, anyhow::Error>(false);
            }
            let container = match container {
                Some(c) if fresh || persist => c,
                _ => {
                    self.remove_container(&id).await;
                    self.create_container(&id).await?
                }
            };
            self.docker.start_container(&container, None).await?;
            Ok(true)
        }
        .await;
        match result {
            Ok(booted) => {
                let generation = {
                    let mut w = lock(&self.world);
                    w.machines.get_mut(&id).map(|x| {
                        x.fresh = false;
                        if booted {
                            x.generation += 1;
                        }
                        x.generation
                    })
                };
                if self.state_of(&id).as_deref() == Some("starting") {
                    self.set_state(&id, "started", "start", "flyd", |_| {});
                }
                if booted && let Some(generation) = generation {
                    self.watch_exit(id, generation);
                }
            }
            Err(e) => {
                self.set_state(&id, "failed", "start", "flyd", |_| {});
                self.violation(format!("simulator: starting machine {id} failed: {e:#}"));
            }
        }
    }

    async fn stop_machine(
        self: Arc<Self>,
        id: String,
        paused: bool,
        signal: Option<String>,
        t: i32,
    ) {
        let Some(op) = self.op_lock(&id) else { return };
        let _g = op.lock().await;
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let container = lock(&self.world)
            .machines
            .get(&id)
            .and_then(|x| x.container.clone());
        if let Some(c) = container {
            if paused {
                let _ = self.docker.unpause_container(&c).await;
            }
            if let Some(sig) = signal.filter(|s| s != "SIGTERM") {
                let _ = self
                    .docker
                    .kill_container(&c, Some(KillContainerOptions { signal: sig }))
                    .await;
            }
            let opts = StopContainerOptions {
                t: Some(t),
                ..Default::default()
            };
            let _ = self.docker.stop_container(&c, Some(opts)).await;
        }
        if self.state_of(&id).as_deref() == Some("stopping") {
            self.set_state(&id, "stopped", "stop", "flyd", |_| {});
        }
    }

    async fn restart(self: Arc<Self>, id: String, signal: Option<String>, t: i32) {
        let Some(op) = self.op_lock(&id) else { return };
        let guard = op.lock().await;
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let (container, persist) = {
            let w = lock(&self.world);
            let Some(x) = w.machines.get(&id) else { return };
            (x.container.clone(), x.persist_rootfs())
        };
        if let Some(c) = &container {
            if let Some(sig) = signal.filter(|s| s != "SIGTERM") {
                let _ = self
                    .docker
                    .kill_container(c, Some(KillContainerOptions { signal: sig }))
                    .await;
            }
            let opts = StopContainerOptions {
                t: Some(t),
                ..Default::default()
            };
            let _ = self.docker.stop_container(c, Some(opts)).await;
        }
        if self.state_of(&id).as_deref() != Some("stopping") {
            return;
        }
        self.set_state(&id, "starting", "restart", "flyd", |x| {
            // Keep the files only when the rootfs persists across restarts.
            x.fresh = persist;
        });
        drop(guard);
        self.start(id).await;
    }

    async fn suspend(self: Arc<Self>, id: String) {
        let Some(op) = self.op_lock(&id) else { return };
        let _g = op.lock().await;
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let container = lock(&self.world)
            .machines
            .get(&id)
            .and_then(|x| x.container.clone());
        if let Some(c) = container
            && let Err(e) = self.docker.pause_container(&c).await
        {
            self.violation(format!("simulator: suspending machine {id} failed: {e}"));
        }
        if self.state_of(&id).as_deref() == Some("suspending") {
            self.set_state(&id, "suspended", "suspend", "flyd", |_| {});
        }
    }

    async fn destroy(self: Arc<Self>, id: String) {
        let Some(op) = self.op_lock(&id) else { return };
        let _g = op.lock().await;
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        self.remove_container(&id).await;
        self.set_state(&id, "destroyed", "destroy", "flyd", |_| {});
    }

    /// Marks the machine stopped (or destroyed) when its main process exits on its own.
    fn watch_exit(self: &Arc<Self>, id: String, generation: u64) {
        let Some(container) = lock(&self.world)
            .machines
            .get(&id)
            .and_then(|x| x.container.clone())
        else {
            return;
        };
        let me = self.clone();
        self.spawn(async move {
            let mut waiting = me.docker.wait_container(&container, None);
            let _ = waiting.next().await;
            let (current, auto_destroy) = {
                let w = lock(&me.world);
                match w.machines.get(&id) {
                    Some(x) => (
                        x.generation == generation && x.state == "started",
                        x.auto_destroy(),
                    ),
                    None => (false, false),
                }
            };
            if !current || me.closing.load(Ordering::SeqCst) {
                return;
            }
            if auto_destroy {
                me.set_state(&id, "destroying", "exit", "flyd", |x| x.generation += 1);
                me.clone().destroy(id).await;
            } else {
                me.set_state(&id, "stopped", "exit", "flyd", |x| x.generation += 1);
            }
        });
    }

    // ----- docker -----

    /// Creates the backing container of a machine (not started) and records its name.
    async fn create_container(&self, id: &str) -> Result<String> {
        let (app, config, region, version) = {
            let w = lock(&self.world);
            let x = w.machines.get(id).context("machine vanished")?;
            (
                x.app.clone(),
                x.config.clone(),
                x.region.clone(),
                x.version.clone(),
            )
        };
        let image = config
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let local = self
            .opts
            .image_map
            .iter()
            .find(|(from, _)| from == image)
            .map(|(_, to)| to.clone())
            .unwrap_or_else(|| image.to_owned());
        let strings = |p: &str| -> Option<Vec<String>> {
            config
                .pointer(p)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .filter(|v: &Vec<String>| !v.is_empty())
        };
        let (entrypoint, cmd) = match (
            strings("/init/exec"),
            strings("/init/entrypoint"),
            strings("/init/cmd"),
        ) {
            (Some(exec), _, _) => (Some(exec), None),
            (None, None, None) => (
                Some(vec![
                    "/bin/sh".to_owned(),
                    "-c".to_owned(),
                    KEEPALIVE.to_owned(),
                ]),
                None,
            ),
            (None, entrypoint, cmd) => (entrypoint, cmd),
        };
        let mut env: Vec<String> = config
            .get("env")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        env.extend([
            format!("FLY_APP_NAME={app}"),
            format!("FLY_MACHINE_ID={id}"),
            format!("FLY_ALLOC_ID={id}"),
            format!("FLY_REGION={region}"),
            format!("FLY_IMAGE_REF={image}"),
            format!("FLY_MACHINE_VERSION={version}"),
        ]);
        let labels = HashMap::from([
            (
                self.opts.docker_label.0.clone(),
                self.opts.docker_label.1.clone(),
            ),
            ("flysim.instance".to_owned(), self.instance.clone()),
            ("flysim.app".to_owned(), app.clone()),
            ("flysim.machine".to_owned(), id.to_owned()),
        ]);
        let name = format!("flysim-{}-{id}-{}", self.instance, hex_id(4));
        let body = ContainerCreateBody {
            image: Some(local.clone()),
            entrypoint,
            cmd,
            env: Some(env),
            labels: Some(labels),
            hostname: Some(id.to_owned()),
            tty: config.pointer("/init/tty").and_then(Value::as_bool),
            host_config: Some(HostConfig {
                init: Some(true),
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
            .with_context(|| format!("creating a container from image {local:?}"))?;
        if let Some(x) = lock(&self.world).machines.get_mut(id) {
            x.container = Some(name.clone());
            x.fresh = true;
        }
        Ok(name)
    }

    async fn remove_container(&self, id: &str) {
        let container = lock(&self.world)
            .machines
            .get_mut(id)
            .and_then(|x| x.container.take());
        if let Some(c) = container {
            let opts = RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            };
            let _ = self.docker.remove_container(&c, Some(opts)).await;
        }
    }

    async fn remove_all_containers(&self) {
        remove_labelled(&self.docker, &format!("flysim.instance={}", self.instance)).await;
    }

    /// Runs `argv` in the container with `stdin`, killing it after `timeout`.
    async fn exec(
        &self,
        container: &str,
        argv: Vec<String>,
        stdin: Option<String>,
        timeout: Duration,
    ) -> Result<ExecOutcome> {
        let token = hex_id(16);
        let pidfile = format!("/dev/shm/.flysim-exec-{token}");
        let mut cmd = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            format!("{{ echo $$ > {pidfile}; }} 2>/dev/null; exec \"$@\""),
            "sh".to_owned(),
        ];
        cmd.extend(argv);
        let opts = CreateExecOptions::<String> {
            attach_stdin: Some(stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(cmd),
            ..Default::default()
        };
        let exec = self.docker.create_exec(container, opts).await?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = self.docker.start_exec(&exec.id, None).await?
        else {
            anyhow::bail!("exec started detached");
        };
        let writer = tokio::spawn(async move {
            if let Some(s) = stdin {
                let _ = input.write_all(s.as_bytes()).await;
                let _ = input.flush().await;
            }
            let _ = input.shutdown().await;
        });
        let mut out = ExecOutcome::default();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timed_out = false;
        loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Ok(Some(Ok(chunk))) => out.push(chunk),
                Ok(Some(Err(e))) => return Err(e.into()),
                Ok(None) => break,
                Err(_) => {
                    timed_out = true;
                    break;
                }
            }
        }
        if timed_out {
            // Freeze and kill the process and its descendants (dash-compatible).
            let kill = format!(
                "kt() {{ kill -STOP $1 2>/dev/null; for c in $(cat /proc/$1/task/*/children 2>/dev/null); do kt $c; done; kill -9 $1 2>/dev/null; }}; \
                 p=$(cat {pidfile} 2>/dev/null); [ -n \"$p\" ] && kt $p; rm -f {pidfile}"
            );
            let _ = self.run_quiet(container, &kill).await;
            // Drain what the killed process left, briefly (children may hold the pipes).
            let grace = tokio::time::Instant::now() + Duration::from_secs(2);
            while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(grace, output.next()).await {
                out.push(chunk);
            }
            out.exit_code = 137;
            out.exit_signal = Some(9);
        } else {
            // The output can end before the process does (it closed its pipes).
            let info = loop {
                let info = self.docker.inspect_exec(&exec.id).await?;
                if info.running != Some(true) || tokio::time::Instant::now() > deadline {
                    break info;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            out.exit_code = info.exit_code.unwrap_or(-1);
            let docker = self.docker.clone();
            let container = container.to_owned();
            tokio::spawn(async move {
                let opts = CreateExecOptions::<String> {
                    cmd: Some(vec!["rm".into(), "-f".into(), pidfile]),
                    ..Default::default()
                };
                if let Ok(e) = docker.create_exec(&container, opts).await {
                    let _ = docker
                        .start_exec(
                            &e.id,
                            Some(bollard::exec::StartExecOptions {
                                detach: true,
                                ..Default::default()
                            }),
                        )
                        .await;
                }
            });
        }
        writer.abort();
        Ok(out)
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

#[derive(Default)]
struct ExecOutcome {
    exit_code: i64,
    exit_signal: Option<i64>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl ExecOutcome {
    fn push(&mut self, chunk: LogOutput) {
        match chunk {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                self.stdout.extend_from_slice(&message);
            }
            LogOutput::StdErr { message } => self.stderr.extend_from_slice(&message),
            LogOutput::StdIn { .. } => {}
        }
    }
}

// ----- small helpers -----

fn query_bool(m: &Matched<'_>, name: &str) -> bool {
    matches!(query(m, name), Some("true" | "1"))
}

/// Fly app names: lowercase letters, digits and dashes, starting with a letter or digit.
fn valid_app_name(name: &str) -> bool {
    name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Splits an image reference into the `ImageRef` fields.
fn image_ref(image: &str) -> Value {
    let (rest, digest) = image.split_once('@').unwrap_or((image, ""));
    let (registry, repo) = match rest.split_once('/') {
        Some((first, tail))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first, tail.to_owned())
        }
        _ => ("docker.io", rest.to_owned()),
    };
    let (repository, tag) = match repo.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r.to_owned(), t.to_owned()),
        _ => (repo.clone(), "latest".to_owned()),
    };
    let repository = if registry == "docker.io" && !repository.contains('/') {
        format!("library/{repository}")
    } else {
        repository
    };
    json!({
        "registry": registry,
        "repository": repository,
        "tag": tag,
        "digest": digest,
        "labels": Map::new(),
    })
}

/// Parses a Go duration (`"10s"`, `"1m30s"`, `"500ms"`) or plain seconds, in seconds.
fn parse_go_duration(s: &str) -> Option<f64> {
    if let Ok(n) = s.parse::<f64>() {
        return Some(n);
    }
    let mut total = 0.0;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|i| *i > 0)?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * unit;
        rest = &rest[unit_end..];
    }
    Some(total)
}

fn hex_id(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
        .collect()
}

/// A 26-character ULID (Crockford base32: 48-bit milliseconds + 80 random bits).
fn ulid() -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut rng = rand::rng();
    let value: u128 = (u128::from(now_ms() & 0xffff_ffff_ffff) << 80)
        | (rng.random::<u128>() & ((1u128 << 80) - 1));
    (0..26)
        .rev()
        .map(|i| char::from(ALPHABET[((value >> (i * 5)) & 31) as usize]))
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// `2026-11-30T22:31:00Z`.
fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::query_parameters::ListContainersOptions;
    use std::time::Instant;

    struct Client {
        http: reqwest::Client,
        base: String,
        token: String,
    }

    impl Client {
        fn new(sim: &FlySim, token: &str) -> Client {
            Client {
                http: reqwest::Client::new(),
                base: format!("{}/v1", sim.url),
                token: token.to_owned(),
            }
        }

        async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut req = self
                .http
                .request(method, format!("{}{path}", self.base))
                .bearer_auth(&self.token);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            let v = if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            };
            (status, v)
        }

        async fn wait(&self, app: &str, id: &str, state: &str) {
            let (s, v) = self
                .call(
                    "GET",
                    &format!("/apps/{app}/machines/{id}/wait?state={state}&timeout=60"),
                    None,
                )
                .await;
            assert_eq!(s, 200, "wait {state}: {v}");
            assert_eq!(v["state"], state);
        }

        async fn exec(&self, app: &str, id: &str, body: Value) -> (u16, Value) {
            self.call(
                "POST",
                &format!("/apps/{app}/machines/{id}/exec"),
                Some(body),
            )
            .await
        }
    }

    fn options(tag: &str) -> FlySimOptions {
        FlySimOptions {
            token: "secret-token".into(),
            docker_label: ("msc-test".into(), tag.into()),
            image_map: vec![(
                "registry.fly.io/sandbox:latest".into(),
                "debian:bookworm-slim".into(),
            )],
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

    fn machine_body(name: &str, persist: &str, computer: &str) -> Value {
        json!({
            "name": name,
            "region": "iad",
            "config": {
                "image": "registry.fly.io/sandbox:latest",
                "guest": { "cpu_kind": "shared", "cpus": 1, "memory_mb": 256 },
                "rootfs": { "persist": persist },
                "metadata": { "mcp_computer": computer, "owner": "u1" },
                "restart": { "policy": "no" },
                "auto_destroy": false
            }
        })
    }

    #[test]
    fn helpers() {
        assert_eq!(parse_go_duration("10s"), Some(10.0));
        assert_eq!(parse_go_duration("1m30s"), Some(90.0));
        assert_eq!(parse_go_duration("500ms"), Some(0.5));
        assert_eq!(parse_go_duration("7"), Some(7.0));
        assert_eq!(parse_go_duration("ten"), None);
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(ulid().len(), 26);
        assert_eq!(hex_id(14).len(), 14);
        let r = image_ref("debian:bookworm-slim");
        assert_eq!(r["repository"], "library/debian");
        assert_eq!(r["tag"], "bookworm-slim");
        let r = image_ref("registry.fly.io/app:deployment-1");
        assert_eq!(r["registry"], "registry.fly.io");
        assert!(valid_app_name("my-app-1"));
        assert!(!valid_app_name("My_App"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn machines_lifecycle_against_docker() {
        let tag = format!("flysim-{}", hex_id(8));
        let sim = FlySim::start(options(&tag)).await.unwrap();
        let c = Client::new(&sim, "secret-token");
        let app = format!("app-{}", hex_id(6));

        // Auth.
        let (s, v) = Client::new(&sim, "wrong")
            .call("GET", &format!("/apps/{app}"), None)
            .await;
        assert_eq!(s, 401, "{v}");

        // Apps.
        let (s, v) = c
            .call(
                "POST",
                "/apps",
                Some(json!({"name": app, "org_slug": "personal"})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let (s, v) = c
            .call(
                "POST",
                "/apps",
                Some(json!({"name": app, "org_slug": "personal"})),
            )
            .await;
        assert_eq!((s, v["status"].as_str()), (422, Some("name_taken")), "{v}");
        let (s, v) = c.call("GET", &format!("/apps/{app}"), None).await;
        assert_eq!((s, v["name"].as_str()), (200, Some(app.as_str())), "{v}");
        let (s, v) = c.call("GET", "/apps?org_slug=personal", None).await;
        assert_eq!((s, v["total_apps"].as_u64()), (200, Some(1)), "{v}");
        let (s, _) = c.call("GET", "/apps/nope-nope", None).await;
        assert_eq!(s, 404);

        // Two machines: the rootfs of `keep` persists, `fresh`'s does not.
        let (s, keep) = c
            .call(
                "POST",
                &format!("/apps/{app}/machines"),
                Some(machine_body("keep", "always", "a")),
            )
            .await;
        assert_eq!(s, 200, "{keep}");
        let keep = keep["id"].as_str().unwrap().to_owned();
        assert_eq!(keep.len(), 14);
        let mut body = machine_body("fresh", "never", "b");
        body["config"]["init"] = json!({"exec": ["/bin/sleep", "inf"]});
        let (s, fresh) = c
            .call("POST", &format!("/apps/{app}/machines"), Some(body))
            .await;
        assert_eq!(s, 200, "{fresh}");
        assert_eq!(fresh["state"], "created");
        let fresh = fresh["id"].as_str().unwrap().to_owned();
        let (s, v) = c
            .call(
                "POST",
                &format!("/apps/{app}/machines"),
                Some(machine_body("keep", "always", "c")),
            )
            .await;
        assert_eq!(s, 409, "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("unique machine name violation")
        );
        c.wait(&app, &keep, "started").await;
        c.wait(&app, &fresh, "started").await;

        // Exec.
        let (s, v) = c
            .exec(&app, &keep, json!({"command": ["echo", "hi"]}))
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            (v["stdout"].as_str(), v["exit_code"].as_i64()),
            (Some("hi\n"), Some(0))
        );
        let (s, v) = c
            .exec(
                &app,
                &keep,
                json!({"command": ["cat"], "stdin": "hello\nworld"}),
            )
            .await;
        assert_eq!(
            (s, v["stdout"].as_str()),
            (200, Some("hello\nworld")),
            "{v}"
        );
        let (_, v) = c
            .exec(
                &app,
                &keep,
                json!({"command": ["sh", "-c", "echo oops >&2; exit 3"]}),
            )
            .await;
        assert_eq!(
            (v["stderr"].as_str(), v["exit_code"].as_i64()),
            (Some("oops\n"), Some(3)),
            "{v}"
        );
        let (_, v) = c
            .exec(
                &app,
                &keep,
                json!({"command": ["sh", "-c", "echo $FLY_MACHINE_ID"]}),
            )
            .await;
        assert_eq!(v["stdout"].as_str(), Some(format!("{keep}\n").as_str()));
        let t = Instant::now();
        let (s, v) = c
            .exec(
                &app,
                &keep,
                json!({"command": ["sh", "-c", "echo started; sleep 30"], "timeout": 1}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            (v["exit_code"].as_i64(), v["exit_signal"].as_i64()),
            (Some(137), Some(9)),
            "{v}"
        );
        assert_eq!(v["stdout"].as_str(), Some("started\n"));
        assert!(t.elapsed() < Duration::from_secs(10));

        // Restart: files survive only with persist=always.
        for id in [&keep, &fresh] {
            let (s, v) = c
                .exec(
                    &app,
                    id,
                    json!({"command": ["sh", "-c", "echo kept > /root/f"]}),
                )
                .await;
            assert_eq!((s, v["exit_code"].as_i64()), (200, Some(0)), "{v}");
            let (s, v) = c
                .call("POST", &format!("/apps/{app}/machines/{id}/restart"), None)
                .await;
            assert_eq!(s, 200, "{v}");
        }
        for id in [&keep, &fresh] {
            c.wait(&app, id, "started").await;
        }
        let (_, v) = c
            .exec(&app, &keep, json!({"command": ["cat", "/root/f"]}))
            .await;
        assert_eq!(v["stdout"].as_str(), Some("kept\n"), "{v}");
        let (_, v) = c
            .exec(&app, &fresh, json!({"command": ["cat", "/root/f"]}))
            .await;
        assert_ne!(v["exit_code"].as_i64(), Some(0), "{v}");

        // Stop / start keeps the persistent rootfs too; exec needs a started machine.
        let (s, _) = c
            .call(
                "POST",
                &format!("/apps/{app}/machines/{keep}/stop"),
                Some(json!({"timeout": "5s"})),
            )
            .await;
        assert_eq!(s, 200);
        c.wait(&app, &keep, "stopped").await;
        let (s, v) = c.exec(&app, &keep, json!({"command": ["true"]})).await;
        assert_eq!(s, 412, "{v}");
        let (s, v) = c
            .call("POST", &format!("/apps/{app}/machines/{keep}/start"), None)
            .await;
        assert_eq!(
            (s, v["previous_state"].as_str()),
            (200, Some("stopped")),
            "{v}"
        );
        c.wait(&app, &keep, "started").await;
        let (_, v) = c
            .exec(&app, &keep, json!({"command": ["cat", "/root/f"]}))
            .await;
        assert_eq!(v["stdout"].as_str(), Some("kept\n"), "{v}");

        // Suspend / resume.
        let (s, _) = c
            .call(
                "POST",
                &format!("/apps/{app}/machines/{fresh}/suspend"),
                None,
            )
            .await;
        assert_eq!(s, 200);
        c.wait(&app, &fresh, "suspended").await;
        let (s, _) = c
            .call("POST", &format!("/apps/{app}/machines/{fresh}/start"), None)
            .await;
        assert_eq!(s, 200);
        c.wait(&app, &fresh, "started").await;

        // List by metadata (AND), state, summary.
        let (s, v) = c
            .call(
                "GET",
                &format!("/apps/{app}/machines?metadata.mcp_computer=a"),
                None,
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v[0]["id"].as_str(), Some(keep.as_str()));
        let (_, v) = c
            .call(
                "GET",
                &format!("/apps/{app}/machines?metadata.mcp_computer=a&metadata.owner=u2"),
                None,
            )
            .await;
        assert_eq!(v.as_array().unwrap().len(), 0, "{v}");
        let (_, v) = c
            .call(
                "GET",
                &format!("/apps/{app}/machines?metadata.owner=u1&summary=true"),
                None,
            )
            .await;
        assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
        assert!(v[0].get("config").is_none());
        let (_, v) = c
            .call("GET", &format!("/apps/{app}/machines?limit=1"), None)
            .await;
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");

        // Wait timeout.
        let (s, v) = c
            .call(
                "GET",
                &format!("/apps/{app}/machines/{keep}/wait?state=stopped&timeout=1"),
                None,
            )
            .await;
        assert_eq!(s, 408, "{v}");

        // Delete: a started machine needs force.
        let (s, v) = c
            .call("DELETE", &format!("/apps/{app}/machines/{keep}"), None)
            .await;
        assert_eq!(s, 412, "{v}");
        let (s, v) = c
            .call(
                "DELETE",
                &format!("/apps/{app}/machines/{keep}?force=true"),
                None,
            )
            .await;
        assert_eq!(s, 200, "{v}");
        c.wait(&app, &keep, "destroyed").await;
        let (_, v) = c.call("GET", &format!("/apps/{app}/machines"), None).await;
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        let (_, v) = c
            .call(
                "GET",
                &format!("/apps/{app}/machines?include_deleted=true"),
                None,
            )
            .await;
        assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
        let (s, v) = c
            .call("GET", &format!("/apps/{app}/machines/{keep}/events"), None)
            .await;
        assert_eq!(s, 200);
        assert_eq!(v[0]["status"], "destroyed");

        // The name is free again once destroyed.
        let mut body = machine_body("keep", "always", "a");
        body["skip_launch"] = json!(true);
        let (s, v) = c
            .call("POST", &format!("/apps/{app}/machines"), Some(body))
            .await;
        assert_eq!(s, 200, "{v}");

        assert_eq!(labelled(&tag).await, 2);
        assert_eq!(sim.violations(), Vec::<String>::new());
        let counts = sim.request_counts();
        assert_eq!(counts["POST /v1/apps/{app_name}/machines"], 4);
        assert!(counts["POST /v1/apps/{app_name}/machines/{machine_id}/exec"] >= 8);
        sim.stop().await;
        assert_eq!(labelled(&tag).await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn main_process_exit_and_drop_cleanup() {
        let tag = format!("flysim-{}", hex_id(8));
        let sim = FlySim::start(options(&tag)).await.unwrap();
        let c = Client::new(&sim, "secret-token");
        let (s, _) = c
            .call(
                "POST",
                "/apps",
                Some(json!({"name": "exits", "org_slug": "personal"})),
            )
            .await;
        assert_eq!(s, 201);
        let mut ids = Vec::new();
        for (name, auto_destroy) in [("short", false), ("oneshot", true)] {
            let mut body = machine_body(name, "never", name);
            body["config"]["init"] = json!({"exec": ["/bin/sh", "-c", "sleep 1"]});
            body["config"]["auto_destroy"] = json!(auto_destroy);
            let (s, v) = c.call("POST", "/apps/exits/machines", Some(body)).await;
            assert_eq!(s, 200, "{v}");
            ids.push(v["id"].as_str().unwrap().to_owned());
        }
        c.wait("exits", &ids[0], "stopped").await;
        c.wait("exits", &ids[1], "destroyed").await;
        let (_, v) = c
            .call("GET", &format!("/apps/exits/machines/{}", ids[0]), None)
            .await;
        assert_eq!(v["events"][0]["type"], "exit", "{v}");
        // A stopped machine boots again (a fresh rootfs: persist=never).
        let (s, _) = c
            .call(
                "POST",
                &format!("/apps/exits/machines/{}/start", ids[0]),
                None,
            )
            .await;
        assert_eq!(s, 200);
        c.wait("exits", &ids[0], "started").await;
        assert_eq!(labelled(&tag).await, 1);
        assert_eq!(sim.violations(), Vec::<String>::new());
        drop(sim);
        assert_eq!(labelled(&tag).await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn invalid_requests_are_violations() {
        let sim = FlySim::start(options("flysim-invalid")).await.unwrap();
        let c = Client::new(&sim, "secret-token");
        // `app_name` is not a CreateAppRequest field (it is `name`).
        let (s, v) = c
            .call(
                "POST",
                "/apps",
                Some(json!({"app_name": "x", "org_slug": "personal"})),
            )
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(
            v["error"].as_str().unwrap().starts_with("simulator: "),
            "{v}"
        );
        let (s, _) = c.call("GET", "/apps/x/machines?kill=true", None).await;
        assert_eq!(s, 400);
        let (s, _) = c.call("GET", "/apps/x/computers", None).await;
        assert_eq!(s, 400);
        let v = sim.violations();
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].starts_with("POST /v1/apps: "), "{v:?}");
        sim.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn injected_faults() {
        let mut opts = options("flysim-faults");
        opts.rate_limit_every = Some(3);
        opts.error_5xx_every = Some(5);
        opts.capacity_errors = 1;
        opts.latency_ms = 50;
        let sim = FlySim::start(opts).await.unwrap();
        let c = Client::new(&sim, "secret-token");
        let mut statuses = Vec::new();
        let t = Instant::now();
        for _ in 0..6 {
            let resp = c
                .http
                .get(format!("{}/apps?org_slug=personal", c.base))
                .bearer_auth("secret-token")
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            if status == 429 {
                assert_eq!(resp.headers()["retry-after"], "1");
                let v: Value = resp.json().await.unwrap();
                assert_eq!(v["error"], "rate limited");
            }
            statuses.push(status);
        }
        assert_eq!(statuses, [200, 200, 429, 200, 503, 429]);
        assert!(t.elapsed() >= Duration::from_millis(300));

        // Capacity: the first create fails with the documented status code (request 7).
        let (s, _) = c
            .call(
                "POST",
                "/apps",
                Some(json!({"name": "cap-app", "org_slug": "personal"})),
            )
            .await;
        assert_eq!(s, 201);
        let mut body = machine_body("m", "never", "x");
        body["skip_launch"] = json!(true);
        let (s, v) = c
            .call("POST", "/apps/cap-app/machines", Some(body.clone()))
            .await;
        assert_eq!(s, 422, "{v}");
        assert_eq!(v["status"], "insufficient_capacity");
        assert_eq!(sim.violations(), Vec::<String>::new());
        sim.stop().await;
    }
}

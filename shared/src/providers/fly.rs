//! Client of the Fly Machines REST API (`https://api.machines.dev/v1`), sans-I/O.
//!
//! Owns: the request shapes (written against `specs/fly-machines-openapi.json`; every body
//! carries only fields that document declares), the `Authorization` scheme (`FlyV1` for
//! macaroon tokens, `Bearer` otherwise), the retry policy ([`RetryPolicy::decide`], shared
//! with E2B in `providers::send`, as are the list pages), the mapping of Fly error responses to [`FlyError`], and lenient decoding of machines and exec
//! results. Bytes move through the caller's [`HttpTransport`]; backoff sleeps through it too.
//!
//! Rate limits (Fly docs): about 1 request/s per action and machine (burst 3), 5/s for
//! "get machine". Callers should serialize actions per machine; 429s are retried here.
//! Synchronous requests should finish within Fly's 60 s proxy limit: [`FlyClient::wait`]
//! asks for at most 60 s per request and loops; long commands belong in the background.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::send::{self, Sent, excerpt};

mod wire;
use super::{HttpRequest, HttpResponse, HttpTransport, encode_component, query_string};
use wire::*;

/// The public Machines API endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.machines.dev";

/// Longest `timeout` one `wait` request may ask for (the proxy gives up after 60 s).
pub const MAX_WAIT_SECS_PER_CALL: u64 = 60;

/// Page size asked of `list machines` (the spec allows 1..=1000).
const LIST_PAGE_LIMIT: u32 = 500;

/// Safety stop for a server that keeps handing out cursors.
const MAX_LIST_PAGES: usize = 200;

/// Prefixes of Fly macaroon tokens, which use the `FlyV1` scheme.
const MACAROON_PREFIXES: [&str; 3] = ["fm1r_", "fm1a_", "fm2_"];

/// `ErrorResponse.status` values that mean "no capacity for this machine here".
const CAPACITY_STATUSES: [&str; 2] = ["insufficient_capacity", "volume_placement_capacity"];

// ---------------------------------------------------------------------------------------
// Public data types
// ---------------------------------------------------------------------------------------

/// What to create: one machine of a computer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachineSpec {
    /// Machine name (unique in the app); empty = let Fly generate one.
    pub name: String,
    /// Fly region code (`iad`, `fra`, ...); `None` = Fly picks one.
    pub region: Option<String>,
    pub image: String,
    /// `shared` or `performance`.
    pub cpu_kind: String,
    pub cpus: u32,
    pub memory_mb: u32,
    /// `config.rootfs.persist`: `never`, `restart` or `always` (`always` for permanent
    /// computers).
    pub rootfs_persist: Option<String>,
    /// `config.rootfs.size_gb`.
    pub rootfs_size_gb: Option<u32>,
    /// `config.metadata` (used to tag and find computers).
    pub metadata: Vec<(String, String)>,
    /// `config.init.exec`: the main process (a sandbox needs a long-running one, e.g.
    /// `["/bin/sleep", "inf"]`).
    pub init_exec: Option<Vec<String>>,
}

/// The parts of a Fly `Machine` we use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Machine {
    pub id: String,
    pub name: String,
    /// created, starting, started, stopping, stopped, suspending, suspended, replacing,
    /// destroying, destroyed, failed (empty when the response had none).
    pub state: String,
    pub region: Option<String>,
    /// `config.image`, else `image_ref` as `registry/repository:tag`.
    pub image: Option<String>,
    /// `config.metadata`.
    pub metadata: BTreeMap<String, String>,
    pub created_at: Option<String>,
}

/// The parts of a Fly `App` we use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct App {
    pub id: String,
    pub name: String,
    pub status: Option<String>,
    /// `organization.slug`.
    pub org_slug: Option<String>,
    pub machine_count: Option<i64>,
}

/// Result of one exec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// 0 when the response carried none.
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
    /// The killing signal, when there was one (0 and negatives are reported as `None`).
    pub exit_signal: Option<i64>,
}

/// What to do about an API error of class `status`.
fn advice(status: u16) -> &'static str {
    if status >= 500 {
        "; the error is on Fly's side: try again in a moment (requests that may already have \
         run, such as a command, are not retried automatically)"
    } else {
        ""
    }
}

/// Why a Fly call failed. Messages are meant for an AI agent and operators; they never
/// contain the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlyError {
    #[error(
        "the Fly API refused the token (HTTP 401/403): check that the Fly API token is valid, \
         not expired, and has access to this app (creating apps needs an org token: \
         `fly tokens create org`)"
    )]
    Unauthorized,
    #[error("{0} was not found on Fly (it may have been destroyed)")]
    NotFound(String),
    #[error(
        "the Fly name {0:?} is already taken (Fly app names are global across all \
         organizations): choose another name"
    )]
    NameTaken(String),
    #[error(
        "the Fly API rate limit was hit (HTTP 429) and retrying did not help: wait a few \
         seconds and try again, and avoid many concurrent operations on one machine"
    )]
    RateLimited,
    #[error(
        "Fly has no capacity for this machine right now ({0}); it was retried already: try \
         another region (--fly-region) or a smaller machine size"
    )]
    Capacity(String),
    #[error("the Fly API refused the request because of the machine's current state: {0}")]
    Conflict(String),
    #[error("Fly API error (HTTP {status}): {message}{}", advice(*status))]
    Api { status: u16, message: String },
    #[error("could not reach the Fly API: {0}")]
    Transport(String),
    #[error("unexpected response from the Fly API: {0}")]
    Decode(String),
}

// ---------------------------------------------------------------------------------------
// Retry policy
// ---------------------------------------------------------------------------------------

pub use super::send::{Decision, Outcome, RetryPolicy};

// ---------------------------------------------------------------------------------------
// Names and tokens
// ---------------------------------------------------------------------------------------

/// A valid, globally-unique-ish Fly app name: `msc-computers-<8 lowercase hex>`. The seed
/// comes from the caller (e.g. a random number or a hash of the org), so this stays
/// deterministic; seeds are mixed so that neighbouring seeds give unrelated names.
pub fn default_app_name(seed: u64) -> String {
    // splitmix64 finalizer.
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    format!("msc-computers-{:08x}", z & 0xFFFF_FFFF)
}

/// The `Authorization` header value for a Fly token, as flyctl/fly-go send it: an existing
/// `Bearer`/`FlyV1` scheme is stripped, comma-separated parts are trimmed; macaroon tokens
/// (`fm1r_`, `fm1a_`, `fm2_`) go as `FlyV1 <macaroons>`, other tokens as `Bearer <token>`.
pub fn authorization_header(token: &str) -> String {
    let bare = strip_scheme(token);
    let parts: Vec<&str> = bare
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let macaroons: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| MACAROON_PREFIXES.iter().any(|pfx| p.starts_with(pfx)))
        .collect();
    if macaroons.is_empty() {
        format!("Bearer {}", parts.join(","))
    } else {
        format!("FlyV1 {}", macaroons.join(","))
    }
}

fn strip_scheme(token: &str) -> &str {
    let mut t = token.trim();
    loop {
        match t.split_once(' ') {
            Some((scheme, rest))
                if scheme.eq_ignore_ascii_case("bearer")
                    || scheme.eq_ignore_ascii_case("flyv1") =>
            {
                t = rest.trim();
            }
            _ => return t,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------

/// What a request is about, for error messages.
enum Subject<'a> {
    App(&'a str),
    Machine { app: &'a str, id: &'a str },
    NewMachine { app: &'a str, spec: &'a MachineSpec },
}

impl Subject<'_> {
    fn describe(&self) -> String {
        match self {
            Subject::App(app) => format!("Fly app {app:?}"),
            Subject::Machine { app, id } => format!("machine {id:?} in Fly app {app:?}"),
            Subject::NewMachine { app, .. } => format!("Fly app {app:?}"),
        }
    }
}

/// Fly Machines API client over a caller-supplied transport.
pub struct FlyClient<T: HttpTransport> {
    base_url: String,
    token: String,
    authorization: String,
    transport: T,
    retry: RetryPolicy,
}

/// Never prints the token.
impl<T: HttpTransport> fmt::Debug for FlyClient<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlyClient")
            .field("base_url", &self.base_url)
            .field("token", &"[redacted]")
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl<T: HttpTransport> FlyClient<T> {
    /// `base_url` without `/v1` (empty = [`DEFAULT_BASE_URL`]); `token` as printed by
    /// `fly tokens create ...` (with or without its `FlyV1 ` scheme).
    pub fn new(base_url: impl Into<String>, token: impl Into<String>, transport: T) -> Self {
        let base_url = base_url.into();
        let base_url = base_url.trim().trim_end_matches('/');
        let base_url = if base_url.is_empty() {
            DEFAULT_BASE_URL.to_owned()
        } else {
            base_url.to_owned()
        };
        let token = token.into();
        Self {
            base_url,
            authorization: authorization_header(&token),
            token,
            transport,
            retry: RetryPolicy::default(),
        }
    }

    /// Replaces the retry policy.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// `GET /v1/apps/{app}`; `None` on 404.
    pub async fn get_app(&self, app: &str) -> Result<Option<App>, FlyError> {
        let url = format!("{}/v1/apps/{}", self.base_url, encode_component(app));
        let sent = self.execute(self.request("GET", url, None), true).await?;
        if sent.resp.status == 404 {
            return Ok(None);
        }
        let subject = Subject::App(app);
        let resp = self.ok(sent, &subject)?;
        let raw: RawApp = decode(&resp, "app")?;
        Ok(Some(App {
            id: raw.id.unwrap_or_default(),
            name: raw.name.unwrap_or_else(|| app.to_owned()),
            status: raw.status,
            org_slug: raw.organization.and_then(|o| o.slug),
            machine_count: raw.machine_count,
        }))
    }

    /// `POST /v1/apps` `{name, org_slug}`. Needs an org-scoped token. A name in use anywhere
    /// on Fly gives [`FlyError::NameTaken`].
    pub async fn create_app(&self, app: &str, org_slug: &str) -> Result<(), FlyError> {
        let url = format!("{}/v1/apps", self.base_url);
        let body = json_body(&CreateAppBody {
            name: app,
            org_slug,
        })?;
        let sent = self
            .execute(self.request("POST", url, Some(body)), false)
            .await?;
        // The Machines API cannot list organizations, so `personal` (every user has it) is
        // the default; when the org is wrong, say how to pick another.
        match self.ok(sent, &Subject::App(app)) {
            Ok(_) => Ok(()),
            Err(FlyError::NotFound(what)) => Err(FlyError::Api {
                status: 404,
                message: format!(
                    "{what}: creating the app {app:?} in the Fly organization {org_slug:?} failed; set FLY_ORG (or --fly-org) to an organization of yours (`fly orgs list`)"
                ),
            }),
            Err(FlyError::Api { status, message }) if (400..500).contains(&status) => {
                Err(FlyError::Api {
                    status,
                    message: format!(
                        "{message}; check that the Fly organization {org_slug:?} exists and is yours (FLY_ORG or --fly-org; `fly orgs list`)"
                    ),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// `POST /v1/apps/{app}/machines`; the machine is launched (not `skip_launch`). Capacity
    /// errors are retried, then reported as [`FlyError::Capacity`].
    pub async fn create_machine(&self, app: &str, spec: &MachineSpec) -> Result<Machine, FlyError> {
        let url = format!(
            "{}/v1/apps/{}/machines",
            self.base_url,
            encode_component(app)
        );
        let body = json_body(&create_machine_body(spec))?;
        let sent = self
            .execute(self.request("POST", url, Some(body)), false)
            .await?;
        let resp = self.ok(sent, &Subject::NewMachine { app, spec })?;
        decode::<RawMachine>(&resp, "machine")?.into_machine()
    }

    /// `GET /v1/apps/{app}/machines/{id}`; `None` on 404. A destroyed machine may still be
    /// returned for a while, with state `destroyed`.
    pub async fn get_machine(&self, app: &str, id: &str) -> Result<Option<Machine>, FlyError> {
        let url = self.machine_url(app, id, "");
        let sent = self.execute(self.request("GET", url, None), true).await?;
        if sent.resp.status == 404 {
            return Ok(None);
        }
        let resp = self.ok(sent, &Subject::Machine { app, id })?;
        decode::<RawMachine>(&resp, "machine")?
            .into_machine()
            .map(Some)
    }

    /// `GET /v1/apps/{app}/machines?metadata.KEY=value&...` (all filters must match), every
    /// page (`limit` + the `fly-next-cursor` header). Destroyed machines are not listed.
    pub async fn list_machines(
        &self,
        app: &str,
        metadata: &[(&str, &str)],
    ) -> Result<Vec<Machine>, FlyError> {
        let mut pages = send::Pages::new(MAX_LIST_PAGES);
        while let Some(cursor) = pages.next_cursor() {
            let mut query: Vec<(String, String)> = metadata
                .iter()
                .map(|(k, v)| (format!("metadata.{k}"), (*v).to_owned()))
                .collect();
            query.push(("limit".into(), LIST_PAGE_LIMIT.to_string()));
            if let Some(c) = cursor {
                query.push(("cursor".into(), c));
            }
            let url = format!(
                "{}/v1/apps/{}/machines{}",
                self.base_url,
                encode_component(app),
                query_string(&query)
            );
            let sent = self.execute(self.request("GET", url, None), true).await?;
            let resp = self.ok(sent, &Subject::App(app))?;
            let page: Option<Vec<RawMachine>> = decode(&resp, "machine list")?;
            let machines = page
                .unwrap_or_default()
                .into_iter()
                .map(RawMachine::into_machine)
                .collect::<Result<Vec<_>, _>>()?;
            pages.add(machines, |m| m.id.clone(), resp.header("fly-next-cursor"));
        }
        Ok(pages.into_items())
    }

    /// `GET /v1/apps/{app}/machines/{id}/wait?state=...&timeout=...`, repeated in requests of
    /// at most 60 s until the machine is in `state` (started, stopped, suspended, destroyed,
    /// failed, settled) or `timeout_secs` (at least 1) have been asked for.
    pub async fn wait(
        &self,
        app: &str,
        id: &str,
        state: &str,
        timeout_secs: u64,
    ) -> Result<(), FlyError> {
        let mut remaining = timeout_secs.max(1);
        loop {
            let chunk = remaining.min(MAX_WAIT_SECS_PER_CALL);
            let query = query_string(&[
                ("state".into(), state.to_owned()),
                ("timeout".into(), chunk.to_string()),
            ]);
            let url = self.machine_url(app, id, &format!("/wait{query}"));
            let sent = self.execute(self.request("GET", url, None), true).await?;
            let reached = match sent.resp.status {
                408 => false,
                s if (200..300).contains(&s) => {
                    // A 200 means the state was reached; only an explicit `ok: false` says no.
                    serde_json::from_slice::<RawWait>(&sent.resp.body)
                        .ok()
                        .and_then(|w| w.ok)
                        != Some(false)
                }
                _ => return Err(self.error(&sent.resp, &Subject::Machine { app, id })),
            };
            if reached {
                return Ok(());
            }
            remaining -= chunk;
            if remaining == 0 {
                return Err(FlyError::Api {
                    status: 408,
                    message: format!(
                        "machine {id:?} in Fly app {app:?} did not reach state {state:?} within \
                         {timeout_secs} s; check its current state (and `fly logs -a {app}`) \
                         before retrying"
                    ),
                });
            }
        }
    }

    /// `POST .../{id}/start` (resumes a suspended machine).
    pub async fn start(&self, app: &str, id: &str) -> Result<(), FlyError> {
        self.machine_action("POST", app, id, "/start").await
    }

    /// `POST .../{id}/stop` (no body: Fly's default signal and timeout).
    pub async fn stop(&self, app: &str, id: &str) -> Result<(), FlyError> {
        self.machine_action("POST", app, id, "/stop").await
    }

    /// `POST .../{id}/restart`.
    pub async fn restart(&self, app: &str, id: &str) -> Result<(), FlyError> {
        self.machine_action("POST", app, id, "/restart").await
    }

    /// `DELETE .../{id}` (`?force=true` kills a running machine). A 404 on a retry (the
    /// first try went through) counts as success.
    pub async fn destroy(&self, app: &str, id: &str, force: bool) -> Result<(), FlyError> {
        let suffix = if force { "?force=true" } else { "" };
        self.machine_action("DELETE", app, id, suffix).await
    }

    /// `POST .../{id}/exec` with `{command: argv, stdin?, timeout?}`; the machine must be
    /// started. Only 429 (and capacity) are retried: the command may have run otherwise.
    /// `timeout_secs` 0 = Fly's default; keep it under Fly's 60 s proxy limit.
    pub async fn exec(
        &self,
        app: &str,
        id: &str,
        argv: &[String],
        stdin: Option<&str>,
        timeout_secs: u64,
    ) -> Result<ExecOutput, FlyError> {
        self.exec_with(app, id, argv, stdin, timeout_secs, false)
            .await
    }

    /// [`FlyClient::exec`] of a command that is safe to run twice (e.g. reading a file):
    /// server errors and transport failures are retried like a GET.
    pub async fn exec_idempotent(
        &self,
        app: &str,
        id: &str,
        argv: &[String],
        timeout_secs: u64,
    ) -> Result<ExecOutput, FlyError> {
        self.exec_with(app, id, argv, None, timeout_secs, true)
            .await
    }

    async fn exec_with(
        &self,
        app: &str,
        id: &str,
        argv: &[String],
        stdin: Option<&str>,
        timeout_secs: u64,
        idempotent: bool,
    ) -> Result<ExecOutput, FlyError> {
        let url = self.machine_url(app, id, "/exec");
        let body = json_body(&ExecBody {
            command: argv,
            stdin,
            timeout: (timeout_secs > 0).then_some(timeout_secs),
        })?;
        let sent = self
            .execute(self.request("POST", url, Some(body)), idempotent)
            .await?;
        let resp = self.ok(sent, &Subject::Machine { app, id })?;
        decode_exec(&resp)
    }

    // -- plumbing --------------------------------------------------------------------

    fn machine_url(&self, app: &str, id: &str, suffix: &str) -> String {
        format!(
            "{}/v1/apps/{}/machines/{}{suffix}",
            self.base_url,
            encode_component(app),
            encode_component(id)
        )
    }

    fn request(&self, method: &'static str, url: String, body: Option<Vec<u8>>) -> HttpRequest {
        HttpRequest::json(method, url, ("Authorization", &self.authorization), body)
    }

    /// Start/stop/restart/destroy: idempotent, no body, empty success.
    async fn machine_action(
        &self,
        method: &'static str,
        app: &str,
        id: &str,
        suffix: &str,
    ) -> Result<(), FlyError> {
        let url = self.machine_url(app, id, suffix);
        let sent = self.execute(self.request(method, url, None), true).await?;
        if method == "DELETE" && sent.resp.status == 404 && sent.attempts > 1 {
            return Ok(());
        }
        self.ok(sent, &Subject::Machine { app, id }).map(drop)
    }

    /// Sends with retries; returns the first success or the last failure response.
    async fn execute(&self, req: HttpRequest, idempotent: bool) -> Result<Sent, FlyError> {
        send::send(&self.transport, &self.retry, req, idempotent, is_capacity)
            .await
            .map_err(|e| FlyError::Transport(self.redact(e.0)))
    }

    /// The response if it is a success, else its [`FlyError`].
    fn ok(&self, sent: Sent, subject: &Subject<'_>) -> Result<HttpResponse, FlyError> {
        if sent.resp.is_success() {
            Ok(sent.resp)
        } else {
            Err(self.error(&sent.resp, subject))
        }
    }

    /// Maps a failure response to a [`FlyError`].
    fn error(&self, resp: &HttpResponse, subject: &Subject<'_>) -> FlyError {
        let body = error_body(resp);
        let mut message = body
            .error
            .clone()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| excerpt(&resp.body));
        if let Some(rid) = resp.header("fly-request-id") {
            message.push_str(&format!(" (fly-request-id {rid})"));
        }
        let message = self.redact(message);
        let status = body.status.as_deref().unwrap_or("");
        if status == "name_taken" {
            return FlyError::NameTaken(match subject {
                Subject::NewMachine { spec, .. } => spec.name.clone(),
                Subject::App(app) | Subject::Machine { app, .. } => (*app).to_owned(),
            });
        }
        if CAPACITY_STATUSES.contains(&status) {
            let region = match subject {
                Subject::NewMachine { spec, .. } => spec.region.as_deref(),
                _ => None,
            };
            return FlyError::Capacity(match region {
                Some(r) => format!("region {r}: {message}"),
                None => message,
            });
        }
        match resp.status {
            401 | 403 => FlyError::Unauthorized,
            404 => FlyError::NotFound(subject.describe()),
            409 | 412 => FlyError::Conflict(message),
            429 => FlyError::RateLimited,
            status => FlyError::Api { status, message },
        }
    }

    /// Removes the token (and each part of a comma-separated token) from a message.
    fn redact(&self, mut s: String) -> String {
        let bare = strip_scheme(&self.token);
        let parts = std::iter::once(bare).chain(bare.split(',').map(str::trim));
        for part in parts {
            if part.len() >= 8 && s.contains(part) {
                s = s.replace(part, "[redacted]");
            }
        }
        s
    }
}

fn create_machine_body(spec: &MachineSpec) -> CreateMachineBody<'_> {
    let rootfs =
        (spec.rootfs_persist.is_some() || spec.rootfs_size_gb.is_some()).then_some(RootfsBody {
            persist: spec.rootfs_persist.as_deref(),
            size_gb: spec.rootfs_size_gb,
        });
    CreateMachineBody {
        name: &spec.name,
        region: spec.region.as_deref().filter(|r| !r.is_empty()),
        config: MachineConfigBody {
            image: &spec.image,
            guest: GuestBody {
                cpu_kind: &spec.cpu_kind,
                cpus: spec.cpus,
                memory_mb: spec.memory_mb,
            },
            rootfs,
            metadata: spec
                .metadata
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
            init: spec.init_exec.as_deref().map(|exec| InitBody { exec }),
        },
    }
}

fn json_body<B: Serialize>(body: &B) -> Result<Vec<u8>, FlyError> {
    send::json_body(body).map_err(|e| FlyError::Decode(e.0))
}

fn decode<D: serde::de::DeserializeOwned>(resp: &HttpResponse, what: &str) -> Result<D, FlyError> {
    send::decode(resp, what).map_err(|e| FlyError::Decode(e.0))
}

/// `flydv1.ExecResponse` as JSON (declared as `application/json` and
/// `application/octet-stream`); a non-JSON, non-`json`-typed body is taken as raw stdout
/// (older API versions answered with the output bytes).
fn decode_exec(resp: &HttpResponse) -> Result<ExecOutput, FlyError> {
    match serde_json::from_slice::<RawExec>(&resp.body) {
        Ok(raw) => Ok(ExecOutput {
            exit_code: raw.exit_code.unwrap_or(0),
            stdout: raw.stdout.unwrap_or_default(),
            stderr: raw.stderr.unwrap_or_default(),
            exit_signal: raw.exit_signal.filter(|s| *s > 0),
        }),
        Err(_) if !is_json_type(resp) && !resp.body.is_empty() => Ok(ExecOutput {
            stdout: String::from_utf8_lossy(&resp.body).into_owned(),
            ..ExecOutput::default()
        }),
        Err(e) => Err(FlyError::Decode(format!(
            "exec result (HTTP {}): {e}; body starts {:?}",
            resp.status,
            excerpt(&resp.body)
        ))),
    }
}

fn is_json_type(resp: &HttpResponse) -> bool {
    resp.header("content-type")
        .is_some_and(|ct| ct.to_ascii_lowercase().contains("json"))
}

/// `ErrorResponse`, leniently (any content type; missing fields allowed).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    error: Option<String>,
    status: Option<String>,
}

fn error_body(resp: &HttpResponse) -> ErrorBody {
    serde_json::from_slice(&resp.body).unwrap_or_default()
}

fn is_capacity(resp: &HttpResponse) -> bool {
    error_body(resp)
        .status
        .is_some_and(|s| CAPACITY_STATUSES.contains(&s.as_str()))
}

#[cfg(test)]
mod tests;

//! Client of the E2B API, sans-I/O: the control plane (REST at `https://api.e2b.app`,
//! `specs/e2b/openapi.yml`) and commands through each sandbox's envd daemon
//! (`process.Process/Start`, Connect protocol with the JSON codec over HTTP/1.1,
//! `specs/e2b/envd/process/process.proto`).
//!
//! Owns: the request shapes (every body carries only fields the spec's schemas declare, with
//! the spec's names: `templateID`, `autoPause`, `envVars`, ...), authentication (`X-API-Key`
//! on the control plane, `X-Access-Token: <envdAccessToken>` on envd), the envd host
//! (`https://49983-{id}.{domain}`, or one shared host plus `E2b-Sandbox-Id` /
//! `E2b-Sandbox-Port` headers), the Connect envelope framing, the retry policy
//! (`providers::send`'s [`RetryPolicy`], as the Fly client's: 429 always, 5xx and transport failures only for idempotent
//! requests, capacity errors twice), and the mapping of failures to [`E2bError`]. Bytes move
//! through the caller's [`HttpTransport`]; backoff sleeps through it too.
//!
//! Commands: [`E2bClient::run`] sends one `StartRequest` and reads the whole buffered
//! response (the transport returns the body when the process has ended or the
//! `Connect-Timeout-Ms` deadline has passed). The process's stdin is closed; input is fed by
//! wrapping the command in `/bin/bash -c` with the bytes passed base64-encoded as arguments
//! (see [`E2bClient::run`]). Messages never contain the API key or an envd access token.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::send::{self, RetryPolicy, excerpt};

mod envd;
mod files;
pub use files::{Entry, EntryKind};
mod wire;
use super::{HttpRequest, HttpResponse, HttpTransport, WireError, encode_component};
use wire::*;

/// The public control-plane endpoint.
pub const DEFAULT_API_URL: &str = "https://api.e2b.app";

/// Sandbox domain used when neither the sandbox nor the API URL names one.
pub const DEFAULT_DOMAIN: &str = "e2b.app";

/// The port envd listens on inside every sandbox.
pub const ENVD_PORT: u16 = 49983;

/// Largest stdin [`E2bClient::run`] accepts (it travels base64-encoded on the command line,
/// which Linux caps at about 2 MiB in total).
pub const MAX_STDIN_BYTES: usize = 1024 * 1024;

/// Base64 characters per argument when stdin travels on the command line (Linux caps one
/// argument at 128 KiB).
const STDIN_CHUNK_CHARS: usize = 64 * 1024;

/// The shell script that feeds stdin: `$1` = number of base64 chunks, then the chunks, then
/// the program and its arguments. Every part of the pipeline is a subshell with its own copy
/// of the positional parameters; the pipeline's status is the program's.
const STDIN_SCRIPT: &str = r#"n=$1; shift; { i=0; while [ "$i" -lt "$n" ]; do printf %s "$1"; shift; i=$((i+1)); done; } | base64 -d | { shift "$n"; exec "$@"; }"#;

/// `$0` of the stdin wrapper (shows up in its error messages).
const STDIN_SCRIPT_NAME: &str = "e2b-stdin";

/// `denyOut` of an allow list: everything IPv4 (allowed entries win).
const ALL_IPV4: &str = "0.0.0.0/0";

/// Page size asked of `GET /v2/sandboxes` (the spec's maximum).
const LIST_PAGE_LIMIT: u32 = 100;

/// Safety stop for a server that keeps handing out cursors.
const MAX_LIST_PAGES: usize = 200;

/// `Error.error_code` values that mean "no capacity for a sandbox right now".
const CAPACITY_ERROR_CODES: [&str; 1] = ["sandbox_capacity_unavailable"];

/// envd emits a `keepalive` event this often (seconds), keeping long commands' connections
/// busy through proxies.
const KEEPALIVE_PING_INTERVAL_SECS: u32 = 50;

/// Connect envelope flag: the payload is compressed (never requested here).
const FLAG_COMPRESSED: u8 = 0x01;

/// Connect envelope flag: end of stream (the payload is the end-of-stream message).
const FLAG_END_STREAM: u8 = 0x02;

// ---------------------------------------------------------------------------------------
// Public data types
// ---------------------------------------------------------------------------------------

/// What to create (`NewSandbox`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewSandbox {
    /// `templateID`: a template ID or alias (`base`, ...).
    pub template_id: String,
    /// `timeout`: seconds until E2B kills (or, with `auto_pause`, pauses) the sandbox; capped
    /// at `i32::MAX` (the spec's `int32`).
    pub timeout_secs: u64,
    /// `metadata` (used to tag and find computers); omitted when empty.
    pub metadata: Vec<(String, String)>,
    /// `envVars` for every command; omitted when empty.
    pub env_vars: Vec<(String, String)>,
    /// `autoPause`: pause instead of kill when the timeout passes.
    pub auto_pause: bool,
    /// `secure`: envd then requires the sandbox's `envdAccessToken`.
    pub secure: bool,
    /// The sandbox's network policy (SPEC §3.11) as E2B's rules ([`NetworkRules`]).
    pub network: crate::egress::Policy,
}

/// A network policy as E2B's own rules: `none` is `allow_internet_access: false`; an allow
/// list is `network.allowOut` (names, `*.` domains, addresses and CIDRs) with
/// `denyOut: ["0.0.0.0/0"]` (E2B lets allowed entries win), so nothing else, private
/// ranges and the metadata address included, is reached unless listed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkRules {
    pub allow_internet_access: Option<bool>,
    pub allow_out: Option<Vec<String>>,
}

impl NetworkRules {
    /// `policy` as E2B's rules, or why they cannot hold it (a name with a port).
    pub fn of(policy: &crate::egress::Policy) -> Result<NetworkRules, crate::egress::PortedRule> {
        use crate::egress::Policy;
        match policy {
            Policy::All => Ok(NetworkRules::default()),
            Policy::None => Ok(NetworkRules {
                allow_internet_access: Some(false),
                allow_out: None,
            }),
            Policy::Allow(_) => {
                let d = policy.destinations("E2B")?.unwrap_or_default();
                let mut out = d.names;
                out.extend(d.nets);
                Ok(NetworkRules {
                    allow_internet_access: None,
                    allow_out: Some(out),
                })
            }
        }
    }
}

/// A sandbox as create/connect return it (`Sandbox`): what [`E2bClient::run`] needs.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Sandbox {
    pub sandbox_id: String,
    pub template_id: String,
    /// Sent as `X-Access-Token` to envd (present for `secure` sandboxes).
    pub envd_access_token: Option<String>,
    /// Base domain of the sandbox's traffic (`None` = derived from the API URL).
    pub domain: Option<String>,
}

/// Never prints the envd access token.
impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("sandbox_id", &self.sandbox_id)
            .field("template_id", &self.template_id)
            .field("envd_access_token", &redacted(&self.envd_access_token))
            .field("domain", &self.domain)
            .finish()
    }
}

/// One entry of `GET /v2/sandboxes` (`ListedSandbox`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedSandbox {
    pub sandbox_id: String,
    pub template_id: String,
    /// `running` or `paused` (empty when the response had none).
    pub state: String,
    pub metadata: BTreeMap<String, String>,
    /// RFC 3339.
    pub started_at: Option<String>,
    /// RFC 3339: when E2B will kill or pause the sandbox.
    pub end_at: Option<String>,
}

/// `GET /sandboxes/{id}` (`SandboxDetail`).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SandboxDetail {
    pub sandbox_id: String,
    pub template_id: String,
    /// `running` or `paused` (empty when the response had none).
    pub state: String,
    pub metadata: BTreeMap<String, String>,
    /// RFC 3339.
    pub started_at: Option<String>,
    /// RFC 3339: when E2B will kill or pause the sandbox.
    pub end_at: Option<String>,
    pub envd_access_token: Option<String>,
    pub domain: Option<String>,
}

impl SandboxDetail {
    /// The parts [`E2bClient::run`] needs. A paused sandbox must be resumed first
    /// ([`E2bClient::connect`], which also returns a fresh token).
    pub fn sandbox(&self) -> Sandbox {
        Sandbox {
            sandbox_id: self.sandbox_id.clone(),
            template_id: self.template_id.clone(),
            envd_access_token: self.envd_access_token.clone(),
            domain: self.domain.clone(),
        }
    }
}

/// Never prints the envd access token.
impl fmt::Debug for SandboxDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxDetail")
            .field("sandbox_id", &self.sandbox_id)
            .field("template_id", &self.template_id)
            .field("state", &self.state)
            .field("metadata", &self.metadata)
            .field("started_at", &self.started_at)
            .field("end_at", &self.end_at)
            .field("envd_access_token", &redacted(&self.envd_access_token))
            .field("domain", &self.domain)
            .finish()
    }
}

fn redacted(token: &Option<String>) -> Option<&'static str> {
    token.as_ref().map(|_| "[redacted]")
}

/// The input, limits and tag of one command ([`E2bClient::run_tagged`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunIo<'a> {
    pub stdin: Option<&'a [u8]>,
    /// `Connect-Timeout-Ms` (0 = none).
    pub timeout_ms: u64,
    /// Bytes kept per stream.
    pub output_limit: usize,
    /// `StartRequest.tag`.
    pub tag: Option<&'a str>,
}

/// Result of one command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunOutput {
    /// The process id from the `start` event (to kill it after a timeout).
    pub pid: Option<u32>,
    /// The `end` event's `exitCode` (missing = 0, proto3 JSON omits zeros; -1 = killed by a
    /// signal); -1 when the stream ended without an `end` event (see `error`).
    pub exit_code: i64,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Output beyond the `output_limit` of a stream was dropped.
    pub truncated: bool,
    /// Why the stream ended abnormally: the end-of-stream error as `code: message` (e.g.
    /// `deadline_exceeded: ...` after `Connect-Timeout-Ms`), else the `end` event's `error`,
    /// else a note that the stream was cut before the `end` event. `None` for a normal end.
    pub error: Option<String>,
}

/// What to do about an API error of class `status`.
fn advice(status: u16) -> &'static str {
    if status >= 500 {
        "; the error is on E2B's side: try again in a moment (requests that may already have \
         taken effect, such as creating a sandbox or running a command, are not retried \
         automatically)"
    } else {
        ""
    }
}

/// What to do about a Connect error code from envd.
fn rpc_advice(code: &str) -> &'static str {
    match code {
        "unauthenticated" | "permission_denied" => {
            "; the sandbox's access token was refused: reconnect to the sandbox to get a fresh \
             one"
        }
        "deadline_exceeded" => "; the command ran longer than its timeout",
        "unavailable" => {
            "; the sandbox may have been paused, killed or have timed out: reconnect to it (or \
             create a new one) and try again"
        }
        "not_found" => "; the sandbox, process or path was not found",
        "invalid_argument" => "; check the command, its working directory and its input",
        "resource_exhausted" => "; the sandbox ran out of a resource (memory, disk, processes)",
        _ => "",
    }
}

/// Why an E2B call failed. Messages are meant for an AI agent and operators; they never
/// contain the API key or an envd access token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum E2bError {
    /// A network policy E2B's rules cannot hold (nothing was sent).
    #[error(transparent)]
    Network(#[from] crate::egress::PortedRule),
    #[error(
        "the E2B API refused the API key (HTTP 401/403): check that the E2B API key (`e2b_...`) \
         is valid and belongs to the team that owns the sandbox"
    )]
    Unauthorized,
    #[error("{0} was not found on E2B (it may have been killed or have timed out)")]
    NotFound(String),
    #[error(
        "the E2B API rate limit was hit (HTTP 429) and retrying did not help: wait a few \
         seconds and try again, and avoid many concurrent operations"
    )]
    RateLimited,
    #[error(
        "E2B has no capacity for a new sandbox right now ({0}); it was retried already: try \
         again in a minute, and check the team's concurrent-sandbox limit"
    )]
    Capacity(String),
    #[error("E2B refused the request because of the sandbox's current state: {0}")]
    Conflict(String),
    #[error("E2B API error (HTTP {status}): {message}{}", advice(*status))]
    Api { status: u16, message: String },
    #[error(
        "the sandbox's command service (envd) failed: {code}: {message}{}",
        rpc_advice(code)
    )]
    Rpc { code: String, message: String },
    /// envd refused a file operation (400 a bad path or a directory, 404 missing, 507 a
    /// full disk, 500 another failure such as a denied permission).
    #[error("the sandbox's file service (envd) refused (HTTP {status}): {message}")]
    File { status: u16, message: String },
    #[error("could not reach E2B: {0}")]
    Transport(String),
    #[error("unexpected response from E2B: {0}")]
    Decode(String),
}

// ---------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------

/// What a request is about, for error messages.
enum Subject<'a> {
    Sandbox(&'a str),
    Template(&'a str),
    Sandboxes,
}

impl Subject<'_> {
    fn describe(&self) -> String {
        match self {
            Subject::Sandbox(id) => format!("E2B sandbox {id:?}"),
            Subject::Template(t) => format!("E2B template {t:?}"),
            Subject::Sandboxes => "the E2B sandbox list".to_owned(),
        }
    }
}

/// Which service a request goes to.
#[derive(Clone, Copy)]
enum Target<'a> {
    ControlPlane,
    /// A sandbox's envd, with the access token sent (if any).
    Envd {
        token: Option<&'a str>,
    },
}

impl<'a> Target<'a> {
    fn token(self) -> Option<&'a str> {
        match self {
            Target::ControlPlane => None,
            Target::Envd { token } => token,
        }
    }
}

/// E2B client over a caller-supplied transport.
pub struct E2bClient<T: HttpTransport> {
    api_url: String,
    sandbox_url: Option<String>,
    api_key: String,
    transport: T,
    retry: RetryPolicy,
}

/// Never prints the API key.
impl<T: HttpTransport> fmt::Debug for E2bClient<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("E2bClient")
            .field("api_url", &self.api_url)
            .field("sandbox_url", &self.sandbox_url)
            .field("api_key", &"[redacted]")
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

fn trim_url(url: &str) -> &str {
    url.trim().trim_end_matches('/')
}

impl<T: HttpTransport> E2bClient<T> {
    /// `api_url`: the control plane (empty = [`DEFAULT_API_URL`]). `sandbox_url`: `None` =
    /// each sandbox's own envd host `https://49983-{id}.{domain}`; `Some(url)` = one shared
    /// host for every sandbox, with `E2b-Sandbox-Id` / `E2b-Sandbox-Port: 49983` headers
    /// (what the SDK does for `https://sandbox.{domain}`, and what a local simulator needs).
    /// `api_key`: the team's `e2b_...` key.
    pub fn new(
        api_url: impl Into<String>,
        sandbox_url: Option<String>,
        api_key: impl Into<String>,
        transport: T,
    ) -> Self {
        let api_url = api_url.into();
        let api_url = match trim_url(&api_url) {
            "" => DEFAULT_API_URL.to_owned(),
            url => url.to_owned(),
        };
        let sandbox_url = sandbox_url
            .as_deref()
            .map(trim_url)
            .filter(|u| !u.is_empty())
            .map(str::to_owned);
        Self {
            api_url,
            sandbox_url,
            api_key: api_key.into().trim().to_owned(),
            transport,
            retry: RetryPolicy::default(),
        }
    }

    /// Replaces the retry policy.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// `POST /sandboxes` → 201 `Sandbox`. Not retried on 5xx or transport failures (a
    /// sandbox may have been created); capacity errors are retried, then reported as
    /// [`E2bError::Capacity`]. A 404 means the template does not exist.
    pub async fn create(&self, req: &NewSandbox) -> Result<Sandbox, E2bError> {
        let url = format!("{}/sandboxes", self.api_url);
        let rules = NetworkRules::of(&req.network)?;
        let body = json_body(&NewSandboxBody {
            template_id: &req.template_id,
            timeout: clamp_i32(req.timeout_secs),
            auto_pause: req.auto_pause,
            secure: req.secure,
            metadata: pairs_map(&req.metadata),
            env_vars: pairs_map(&req.env_vars),
            allow_internet_access: rules.allow_internet_access,
            network: rules.allow_out.as_deref().map(|allow| NetworkBody {
                allow_out: allow,
                deny_out: &[ALL_IPV4],
            }),
        })?;
        let sent = self
            .execute(self.api_request("POST", url, Some(body)), false)
            .await?;
        let resp = self.ok(sent, &Subject::Template(&req.template_id))?;
        decode::<RawSandbox>(&resp, "new sandbox")?.into_sandbox()
    }

    /// `GET /v2/sandboxes?metadata=...&state=...&limit=100&nextToken=...`, every page (the
    /// `X-Next-Token` header). All `metadata` pairs must match (encoded by
    /// [`metadata_query`]); `states` (`running`, `paused`) are sent comma-separated, none =
    /// the API's default.
    pub async fn list(
        &self,
        metadata: &[(&str, &str)],
        states: &[&str],
    ) -> Result<Vec<ListedSandbox>, E2bError> {
        let mut pages = send::Pages::new(MAX_LIST_PAGES);
        while let Some(next) = pages.next_cursor() {
            // Already-encoded `k=v` parts, in the SDK's order.
            let mut query: Vec<String> = Vec::new();
            if !metadata.is_empty() {
                query.push(format!(
                    "metadata={}",
                    encode_component(&metadata_query(metadata))
                ));
            }
            if !states.is_empty() {
                // `style: form, explode: false`: the values joined by a literal comma.
                let joined: Vec<String> = states.iter().map(|s| encode_component(s)).collect();
                query.push(format!("state={}", joined.join(",")));
            }
            query.push(format!("limit={LIST_PAGE_LIMIT}"));
            if let Some(token) = &next {
                query.push(format!("nextToken={}", encode_component(token)));
            }
            let url = format!("{}/v2/sandboxes?{}", self.api_url, query.join("&"));
            let sent = self
                .execute(self.api_request("GET", url, None), true)
                .await?;
            let resp = self.ok(sent, &Subject::Sandboxes)?;
            let page: Option<Vec<RawSandbox>> = decode(&resp, "sandbox list")?;
            let listed = page
                .unwrap_or_default()
                .into_iter()
                .map(RawSandbox::into_listed)
                .collect::<Result<Vec<_>, _>>()?;
            pages.add(
                listed,
                |s| s.sandbox_id.clone(),
                resp.header("x-next-token"),
            );
        }
        Ok(pages.into_items())
    }

    /// `GET /sandboxes/{id}`; `None` on 404 (killed, timed out, or never existed).
    pub async fn get(&self, id: &str) -> Result<Option<SandboxDetail>, E2bError> {
        let url = self.sandbox_path(id, "");
        let sent = self
            .execute(self.api_request("GET", url, None), true)
            .await?;
        if sent.status == 404 {
            return Ok(None);
        }
        let resp = self.ok(sent, &Subject::Sandbox(id))?;
        decode::<RawSandbox>(&resp, "sandbox")?
            .into_detail()
            .map(Some)
    }

    /// `DELETE /sandboxes/{id}` → 204; a 404 (already gone) is success too.
    pub async fn kill(&self, id: &str) -> Result<(), E2bError> {
        let url = self.sandbox_path(id, "");
        let sent = self
            .execute(self.api_request("DELETE", url, None), true)
            .await?;
        if sent.status == 404 {
            return Ok(());
        }
        self.ok(sent, &Subject::Sandbox(id)).map(drop)
    }

    /// `POST /sandboxes/{id}/timeout` `{timeout}` → 204: the sandbox now ends `secs` seconds
    /// from now (overwriting the previous deadline, shorter or longer).
    pub async fn set_timeout(&self, id: &str, secs: u64) -> Result<(), E2bError> {
        let url = self.sandbox_path(id, "/timeout");
        let body = json_body(&TimeoutBody {
            timeout: clamp_i32(secs),
        })?;
        let sent = self
            .execute(self.api_request("POST", url, Some(body)), true)
            .await?;
        self.ok(sent, &Subject::Sandbox(id)).map(drop)
    }

    /// `POST /sandboxes/{id}/pause` (no body: a full memory snapshot) → 204. A 409 (the
    /// sandbox is already paused, as the SDK reads it) is success too.
    pub async fn pause(&self, id: &str) -> Result<(), E2bError> {
        let url = self.sandbox_path(id, "/pause");
        let sent = self
            .execute(self.api_request("POST", url, None), true)
            .await?;
        if sent.status == 409 {
            return Ok(());
        }
        self.ok(sent, &Subject::Sandbox(id)).map(drop)
    }

    /// `POST /sandboxes/{id}/connect` `{timeout}` → 200 (was running) or 201 (resumed from
    /// pause). The timeout is only ever extended. Returns a current `envdAccessToken`: call
    /// this before running commands in a sandbox that may have been paused.
    pub async fn connect(&self, id: &str, timeout_secs: u64) -> Result<Sandbox, E2bError> {
        let url = self.sandbox_path(id, "/connect");
        let body = json_body(&TimeoutBody {
            timeout: clamp_i32(timeout_secs),
        })?;
        let sent = self
            .execute(self.api_request("POST", url, Some(body)), true)
            .await?;
        let resp = self.ok(sent, &Subject::Sandbox(id))?;
        decode::<RawSandbox>(&resp, "connected sandbox")?.into_sandbox()
    }

    async fn execute(&self, req: HttpRequest, idempotent: bool) -> Result<HttpResponse, E2bError> {
        self.execute_with(req, idempotent, Target::ControlPlane)
            .await
    }

    /// Sends with retries; returns the first success or the last failure response.
    /// For envd, its access token is redacted from transport errors too, and capacity errors
    /// (a control-plane notion) are not looked for.
    async fn execute_with(
        &self,
        req: HttpRequest,
        idempotent: bool,
        target: Target<'_>,
    ) -> Result<HttpResponse, E2bError> {
        let control_plane = matches!(target, Target::ControlPlane);
        let capacity = |resp: &HttpResponse| control_plane && is_capacity(resp);
        send::send(&self.transport, &self.retry, req, idempotent, capacity)
            .await
            .map(|sent| sent.resp)
            .map_err(|e| E2bError::Transport(self.redact(e.0, target.token())))
    }

    /// The response if it is a success, else its [`E2bError`].
    fn ok(&self, sent: HttpResponse, subject: &Subject<'_>) -> Result<HttpResponse, E2bError> {
        if sent.is_success() {
            Ok(sent)
        } else {
            Err(self.api_error(&sent, subject))
        }
    }

    /// Maps a control-plane failure response to an [`E2bError`].
    fn api_error(&self, resp: &HttpResponse, subject: &Subject<'_>) -> E2bError {
        let message = self.redact(error_message(resp), None);
        if is_capacity(resp) {
            return E2bError::Capacity(message);
        }
        match resp.status {
            401 | 403 => E2bError::Unauthorized,
            404 => E2bError::NotFound(subject.describe()),
            409 => E2bError::Conflict(message),
            429 => E2bError::RateLimited,
            status => E2bError::Api { status, message },
        }
    }

    /// Maps a non-2xx answer to `Start` (from envd or E2B's proxy) to an [`E2bError`]: a
    /// Connect error body (`{code: "...", message}`) gives [`E2bError::Rpc`].
    fn envd_error(&self, resp: &HttpResponse, id: &str, token: Option<&str>) -> E2bError {
        let body = error_body(resp);
        let message = self.redact(error_message(resp), token);
        if let Some(Value::String(code)) = body.code {
            return E2bError::Rpc { code, message };
        }
        match resp.status {
            401 | 403 => E2bError::Rpc {
                code: "unauthenticated".into(),
                message: format!("HTTP {}: {message}", resp.status),
            },
            404 => E2bError::NotFound(format!("E2B sandbox {id:?}")),
            // E2B's proxy: `The sandbox is paused` (connect to it first).
            409 => E2bError::Conflict(message),
            429 => E2bError::RateLimited,
            status => E2bError::Api { status, message },
        }
    }

    /// Removes the API key and `token` from a message.
    fn redact(&self, mut s: String, token: Option<&str>) -> String {
        for secret in [Some(self.api_key.as_str()), token].into_iter().flatten() {
            if secret.len() >= 8 && s.contains(secret) {
                s = s.replace(secret, "[redacted]");
            }
        }
        s
    }
}

fn clamp_i32(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn pairs_map(pairs: &[(String, String)]) -> BTreeMap<&str, &str> {
    pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn json_body<B: Serialize>(body: &B) -> Result<Vec<u8>, E2bError> {
    send::json_body(body).map_err(|e| E2bError::Decode(e.0))
}

fn decode<D: serde::de::DeserializeOwned>(resp: &HttpResponse, what: &str) -> Result<D, E2bError> {
    send::decode(resp, what).map_err(|e| E2bError::Decode(e.0))
}

fn error_body(resp: &HttpResponse) -> ErrorBody {
    serde_json::from_slice(&resp.body).unwrap_or_default()
}

/// The `message` of an error body, else an excerpt of the body.
fn error_message(resp: &HttpResponse) -> String {
    error_body(resp)
        .message
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| excerpt(&resp.body))
}

/// `error_code` `sandbox_capacity_unavailable`, or a message that mentions capacity.
fn is_capacity(resp: &HttpResponse) -> bool {
    let body = error_body(resp);
    body.error_code
        .is_some_and(|c| CAPACITY_ERROR_CODES.contains(&c.as_str()))
        || body
            .message
            .is_some_and(|m| m.to_ascii_lowercase().contains("capacity"))
}

#[cfg(test)]
mod tests;

//! Client of the E2B API, sans-I/O: the control plane (REST at `https://api.e2b.app`,
//! `specs/e2b/openapi.yml`) and commands through each sandbox's envd daemon
//! (`process.Process/Start`, Connect protocol with the JSON codec over HTTP/1.1,
//! `specs/e2b/envd/process/process.proto`).
//!
//! Owns: the request shapes (every body carries only fields the spec's schemas declare, with
//! the spec's names: `templateID`, `autoPause`, `envVars`, ...), authentication (`X-API-Key`
//! on the control plane, `X-Access-Token: <envdAccessToken>` on envd), the envd host
//! (`https://49983-{id}.{domain}`, or one shared host plus `E2b-Sandbox-Id` /
//! `E2b-Sandbox-Port` headers), the Connect envelope framing, the retry policy (the Fly
//! client's [`RetryPolicy`]: 429 always, 5xx and transport failures only for idempotent
//! requests, capacity errors twice), and the mapping of failures to [`E2bError`]. Bytes move
//! through the caller's [`HttpTransport`]; backoff sleeps through it too.
//!
//! Commands: [`E2bClient::run`] sends one `StartRequest` and reads the whole buffered
//! response (the transport returns the body when the process has ended or the
//! `Connect-Timeout-Ms` deadline has passed). The process's stdin is closed; input is fed by
//! wrapping the command in `/bin/bash -c` with the bytes passed base64-encoded as arguments
//! (see [`E2bClient::run`]). Messages never contain the API key or an envd access token.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fly::{Decision, Outcome, RetryPolicy};
use super::{HttpRequest, HttpResponse, HttpTransport, encode_component};

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

/// Page size asked of `GET /v2/sandboxes` (the spec's maximum).
const LIST_PAGE_LIMIT: u32 = 100;

/// Safety stop for a server that keeps handing out cursors.
const MAX_LIST_PAGES: usize = 200;

/// Longest error-body excerpt quoted in an error message.
const MAX_EXCERPT: usize = 300;

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
    #[error("could not reach E2B: {0}")]
    Transport(String),
    #[error("unexpected response from E2B: {0}")]
    Decode(String),
}

// ---------------------------------------------------------------------------------------
// Wire types (request bodies: only fields of the spec's schemas)
// ---------------------------------------------------------------------------------------

/// `NewSandbox`.
#[derive(Serialize)]
struct NewSandboxBody<'a> {
    #[serde(rename = "templateID")]
    template_id: &'a str,
    timeout: i32,
    #[serde(rename = "autoPause")]
    auto_pause: bool,
    secure: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<&'a str, &'a str>,
    #[serde(rename = "envVars", skip_serializing_if = "BTreeMap::is_empty")]
    env_vars: BTreeMap<&'a str, &'a str>,
}

/// `ConnectSandbox` and `SandboxTimeoutRequest` (both `{timeout}`).
#[derive(Serialize)]
struct TimeoutBody {
    timeout: i32,
}

/// `process.StartRequest` in proto3 JSON.
#[derive(Serialize)]
struct StartRequestBody<'a> {
    process: ProcessConfigBody<'a>,
    stdin: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tag: Option<&'a str>,
}

/// `process.ProcessConfig` in proto3 JSON (empty `args`/`envs` omitted, as proto3 does).
#[derive(Serialize)]
struct ProcessConfigBody<'a> {
    cmd: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    args: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    envs: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a str>,
}

// Response types: every field optional, unknown fields ignored.

/// `Sandbox`, `SandboxDetail` and `ListedSandbox` (the fields we use).
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawSandbox {
    #[serde(rename = "sandboxID")]
    sandbox_id: Option<String>,
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    #[serde(rename = "envdAccessToken")]
    envd_access_token: Option<String>,
    domain: Option<String>,
    state: Option<String>,
    metadata: Option<BTreeMap<String, Value>>,
    #[serde(rename = "startedAt")]
    started_at: Option<String>,
    #[serde(rename = "endAt")]
    end_at: Option<String>,
}

/// `Error` (any content type; missing fields allowed).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    /// An integer on the control plane, a string (the Connect code) from envd.
    code: Option<Value>,
    message: Option<String>,
    error_code: Option<String>,
}

/// `process.StartResponse`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawStartResponse {
    event: Option<RawEvent>,
}

/// `process.ProcessEvent` (a oneof: one field is set).
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEvent {
    start: Option<Value>,
    data: Option<RawData>,
    end: Option<RawEnd>,
}

/// `ProcessEvent.DataEvent`: base64 bytes.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawData {
    stdout: Option<String>,
    stderr: Option<String>,
}

/// `ProcessEvent.EndEvent`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEnd {
    #[serde(rename = "exitCode", alias = "exit_code")]
    exit_code: Option<Value>,
    error: Option<String>,
}

/// The Connect end-of-stream message.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEndStream {
    error: Option<RawConnectError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawConnectError {
    code: Option<String>,
    message: Option<String>,
}

impl RawSandbox {
    fn id(&mut self) -> Result<String, E2bError> {
        self.sandbox_id
            .take()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| E2bError::Decode("a sandbox without a `sandboxID`".into()))
    }

    fn into_sandbox(mut self) -> Result<Sandbox, E2bError> {
        Ok(Sandbox {
            sandbox_id: self.id()?,
            template_id: self.template_id.unwrap_or_default(),
            envd_access_token: self.envd_access_token.filter(|t| !t.is_empty()),
            domain: self.domain.filter(|d| !d.is_empty()),
        })
    }

    fn into_listed(mut self) -> Result<ListedSandbox, E2bError> {
        Ok(ListedSandbox {
            sandbox_id: self.id()?,
            template_id: self.template_id.unwrap_or_default(),
            state: self.state.unwrap_or_default(),
            metadata: metadata_map(self.metadata),
            started_at: self.started_at.filter(|s| !s.is_empty()),
            end_at: self.end_at.filter(|s| !s.is_empty()),
        })
    }

    fn into_detail(mut self) -> Result<SandboxDetail, E2bError> {
        Ok(SandboxDetail {
            sandbox_id: self.id()?,
            template_id: self.template_id.unwrap_or_default(),
            state: self.state.unwrap_or_default(),
            metadata: metadata_map(self.metadata),
            started_at: self.started_at.filter(|s| !s.is_empty()),
            end_at: self.end_at.filter(|s| !s.is_empty()),
            envd_access_token: self.envd_access_token.filter(|t| !t.is_empty()),
            domain: self.domain.filter(|d| !d.is_empty()),
        })
    }
}

fn metadata_map(raw: Option<BTreeMap<String, Value>>) -> BTreeMap<String, String> {
    raw.unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| match v {
            Value::String(s) => Some((k, s)),
            Value::Null => None,
            other => Some((k, other.to_string())),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Connect framing and the command stream
// ---------------------------------------------------------------------------------------

/// One Connect envelope: `[flags u8][length u32 big-endian][payload]`.
pub fn connect_envelope(flags: u8, payload: &[u8]) -> Result<Vec<u8>, E2bError> {
    let len = u32::try_from(payload.len())
        .map_err(|_| E2bError::Decode("a Connect message over 4 GiB".into()))?;
    let mut out = Vec::with_capacity(payload.len() + 5);
    out.push(flags);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// The `metadata` query value of `GET /v2/sandboxes`, encoded as the E2B SDK does: each key
/// and value percent-encoded, then form-encoded again as `k=v&k2=v2` (the API unescapes the
/// whole value, then each key and value). The URL encodes the result once more.
pub fn metadata_query(metadata: &[(&str, &str)]) -> String {
    metadata
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                encode_component(&encode_component(k)),
                encode_component(&encode_component(v))
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Program and arguments that run `cmd args...` with `input` on its stdin: `/bin/bash -c
/// <script> e2b-stdin <n> <chunk>... <cmd> <args>...`, the chunks being the base64 of
/// `input`. Nothing is interpolated into the script, so no quoting is involved.
fn stdin_wrapper(cmd: &str, args: &[String], input: &[u8]) -> (String, Vec<String>) {
    let b64 = STANDARD.encode(input);
    // Base64 is ASCII, so byte chunks are valid UTF-8.
    let chunks: Vec<String> = b64
        .as_bytes()
        .chunks(STDIN_CHUNK_CHARS)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let mut argv = Vec::with_capacity(chunks.len() + args.len() + 5);
    argv.push("-c".to_owned());
    argv.push(STDIN_SCRIPT.to_owned());
    argv.push(STDIN_SCRIPT_NAME.to_owned());
    argv.push(chunks.len().to_string());
    argv.extend(chunks);
    argv.push(cmd.to_owned());
    argv.extend(args.iter().cloned());
    ("/bin/bash".to_owned(), argv)
}

/// Proto3 JSON `bytes`: standard or URL-safe base64, padding optional.
fn decode_bytes(s: &str) -> Result<Vec<u8>, String> {
    let trimmed = s.trim_end_matches('=');
    let res = if trimmed.contains(['-', '_']) {
        URL_SAFE_NO_PAD.decode(trimmed)
    } else {
        STANDARD_NO_PAD.decode(trimmed)
    };
    res.map_err(|e| format!("invalid base64 in command output: {e}"))
}

/// Appends at most `limit - out.len()` bytes; says whether anything was dropped.
fn append_limited(out: &mut Vec<u8>, bytes: &[u8], limit: usize) -> bool {
    let room = limit.saturating_sub(out.len());
    let take = bytes.len().min(room);
    out.extend_from_slice(&bytes[..take]);
    take < bytes.len()
}

/// An integer that proto3 JSON may write as a number or a string.
fn json_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// What a `process.Process/Start` response stream said.
#[derive(Debug, Default, PartialEq, Eq)]
struct StartStream {
    started: bool,
    /// The process id from the `start` event.
    pid: Option<u32>,
    /// The `end` event's exit code (missing `exitCode` = 0), if an `end` event came.
    exit_code: Option<i64>,
    end_error: Option<String>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
    /// The end-of-stream message came.
    finished: bool,
    /// Its error, as (code, message).
    stream_error: Option<(String, String)>,
}

/// Parses a whole buffered `application/connect+json` server stream. Errors only on
/// malformed frames or JSON; a body cut short ends the parse (reported by the caller).
fn parse_start_stream(body: &[u8], output_limit: usize) -> Result<StartStream, String> {
    let mut s = StartStream::default();
    let mut rest = body;
    while rest.len() >= 5 {
        let flags = rest[0];
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let Some(payload) = rest.get(5..5 + len) else {
            break; // cut short
        };
        rest = &rest[5 + len..];
        if flags & FLAG_COMPRESSED != 0 {
            return Err("a compressed Connect message (compression was not requested)".into());
        }
        if flags & FLAG_END_STREAM != 0 {
            let end: RawEndStream = if payload.iter().all(u8::is_ascii_whitespace) {
                RawEndStream::default()
            } else {
                serde_json::from_slice(payload)
                    .map_err(|e| format!("end-of-stream message: {e}"))?
            };
            s.finished = true;
            s.stream_error = end.error.map(|e| {
                (
                    e.code
                        .filter(|c| !c.is_empty())
                        .unwrap_or_else(|| "unknown".into()),
                    e.message.unwrap_or_default(),
                )
            });
            break;
        }
        let msg: RawStartResponse =
            serde_json::from_slice(payload).map_err(|e| format!("stream message: {e}"))?;
        let Some(event) = msg.event else { continue };
        if let Some(start) = &event.start {
            s.started = true;
            s.pid = start
                .get("pid")
                .and_then(json_int)
                .and_then(|p| u32::try_from(p).ok());
        }
        if let Some(data) = event.data {
            if let Some(out) = data.stdout {
                let bytes = decode_bytes(&out)?;
                s.truncated |= append_limited(&mut s.stdout, &bytes, output_limit);
            }
            if let Some(err) = data.stderr {
                let bytes = decode_bytes(&err)?;
                s.truncated |= append_limited(&mut s.stderr, &bytes, output_limit);
            }
        }
        if let Some(end) = event.end {
            let code = match &end.exit_code {
                None | Some(Value::Null) => 0,
                Some(v) => json_int(v).ok_or_else(|| format!("an exitCode of {v}"))?,
            };
            s.exit_code = Some(code);
            s.end_error = end.error.filter(|e| !e.is_empty());
        }
    }
    Ok(s)
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
        let body = json_body(&NewSandboxBody {
            template_id: &req.template_id,
            timeout: clamp_i32(req.timeout_secs),
            auto_pause: req.auto_pause,
            secure: req.secure,
            metadata: pairs_map(&req.metadata),
            env_vars: pairs_map(&req.env_vars),
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
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
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
            for raw in page.unwrap_or_default() {
                let sbx = raw.into_listed()?;
                if seen.insert(sbx.sandbox_id.clone()) {
                    out.push(sbx);
                }
            }
            match resp.header("x-next-token").map(str::trim) {
                Some(token) if !token.is_empty() && next.as_deref() != Some(token) => {
                    next = Some(token.to_owned());
                }
                _ => return Ok(out),
            }
        }
        Ok(out)
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

    /// Runs `cmd` with `args` (exec'd directly, no shell: pass `/bin/bash`, `["-l", "-c",
    /// line]` for a shell line, as the SDK does) through envd `process.Process/Start`.
    ///
    /// - `envs` are added to the sandbox's environment; `cwd` `None` = the user's home.
    /// - `stdin`: envd's Start only takes a "keep stdin open" flag (input would need separate
    ///   `SendInput`/`CloseStdin` calls while the stream is open, which a buffered transport
    ///   cannot do). So the process always starts with stdin closed, and non-empty input is
    ///   fed by running `/bin/bash -c <fixed script> e2b-stdin <n> <base64 chunks...> cmd
    ///   args...`: the script pipes the decoded chunks (`base64 -d`, coreutils) into
    ///   `exec cmd args...`. Nothing is interpolated into the script, so any bytes are safe;
    ///   the exit code is the program's. Input is limited to [`MAX_STDIN_BYTES`] (the
    ///   command line's size limit); more is refused with an `invalid_argument`
    ///   [`E2bError::Rpc`] before anything is sent.
    /// - `timeout_ms` goes to `Connect-Timeout-Ms` (0 = none); envd then ends the stream
    ///   with `deadline_exceeded` (in [`RunOutput::error`], exit code -1). The process may
    ///   keep running in the sandbox after that.
    /// - At most `output_limit` bytes of each of stdout and stderr are kept
    ///   ([`RunOutput::truncated`] says when more was dropped).
    ///
    /// Only 429s are retried (the command may have run otherwise). A stream that fails
    /// before the process started is an [`E2bError::Rpc`]; once it started, failures are
    /// reported in [`RunOutput::error`] along with the output so far.
    #[allow(clippy::too_many_arguments)] // the brief's signature: one call, all of a command
    pub async fn run(
        &self,
        sandbox: &Sandbox,
        cmd: &str,
        args: &[String],
        envs: &[(String, String)],
        cwd: Option<&str>,
        stdin: Option<&[u8]>,
        timeout_ms: u64,
        output_limit: usize,
    ) -> Result<RunOutput, E2bError> {
        let io = RunIo {
            stdin,
            timeout_ms,
            output_limit,
            tag: None,
        };
        self.run_tagged(sandbox, cmd, args, envs, cwd, io).await
    }

    /// [`E2bClient::run`] with the process tagged (`StartRequest.tag`), so that it can be
    /// killed by its tag ([`E2bClient::kill_tagged`]) before its pid is known.
    pub async fn run_tagged(
        &self,
        sandbox: &Sandbox,
        cmd: &str,
        args: &[String],
        envs: &[(String, String)],
        cwd: Option<&str>,
        io: RunIo<'_>,
    ) -> Result<RunOutput, E2bError> {
        let RunIo {
            stdin,
            timeout_ms,
            output_limit,
            tag,
        } = io;
        let wrapped = match stdin {
            Some(input) if input.len() > MAX_STDIN_BYTES => {
                return Err(E2bError::Rpc {
                    code: "invalid_argument".into(),
                    message: format!(
                        "stdin of {} bytes is over the {MAX_STDIN_BYTES}-byte limit for E2B \
                         commands: write the data to a file in the sandbox first",
                        input.len()
                    ),
                });
            }
            Some(input) if !input.is_empty() => Some(stdin_wrapper(cmd, args, input)),
            _ => None,
        };
        let (cmd, args) = match &wrapped {
            Some((c, a)) => (c.as_str(), a.as_slice()),
            None => (cmd, args),
        };
        let body = json_body(&StartRequestBody {
            process: ProcessConfigBody {
                cmd,
                args,
                envs: envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
                cwd,
            },
            stdin: false,
            tag,
        })?;
        let req = self.start_request(sandbox, connect_envelope(0, &body)?, timeout_ms)?;
        let token = sandbox.envd_access_token.as_deref();
        let resp = self
            .execute_with(req, false, Target::Envd { token })
            .await?;
        if !resp.is_success() {
            return Err(self.envd_error(&resp, &sandbox.sandbox_id, token));
        }
        let stream = parse_start_stream(&resp.body, output_limit).map_err(|e| {
            E2bError::Decode(self.redact(
                format!(
                    "command stream (HTTP {}): {e}; body starts {:?}",
                    resp.status,
                    excerpt(&resp.body)
                ),
                token,
            ))
        })?;
        self.run_output(stream, &resp, token)
    }

    /// Kills process `pid` in the sandbox (`process.Process/SendSignal`, SIGKILL; a unary
    /// Connect call with a plain JSON body). A process that is already gone is not an error.
    pub async fn kill_process(&self, sandbox: &Sandbox, pid: u32) -> Result<(), E2bError> {
        self.kill_selected(sandbox, serde_json::json!({"pid": pid}))
            .await
    }

    /// Kills the process started with `tag` ([`E2bClient::run_tagged`]); one that is gone
    /// (or never started) is not an error.
    pub async fn kill_tagged(&self, sandbox: &Sandbox, tag: &str) -> Result<(), E2bError> {
        self.kill_selected(sandbox, serde_json::json!({"tag": tag}))
            .await
    }

    async fn kill_selected(
        &self,
        sandbox: &Sandbox,
        selector: serde_json::Value,
    ) -> Result<(), E2bError> {
        let body = serde_json::to_vec(&serde_json::json!({
            "process": selector,
            "signal": "SIGNAL_SIGKILL",
        }))
        .map_err(|e| E2bError::Decode(e.to_string()))?;
        let mut req = self.start_request(sandbox, body, 0)?;
        req.url = req
            .url
            .replace("/process.Process/Start", "/process.Process/SendSignal");
        for (k, v) in &mut req.headers {
            if k.eq_ignore_ascii_case("content-type") {
                *v = "application/json".to_owned();
            }
        }
        req.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case("keepalive-ping-interval"));
        let token = sandbox.envd_access_token.as_deref();
        let resp = self.execute_with(req, true, Target::Envd { token }).await?;
        if resp.is_success() || resp.status == 404 {
            return Ok(());
        }
        Err(self.envd_error(&resp, &sandbox.sandbox_id, token))
    }

    // -- plumbing --------------------------------------------------------------------

    fn run_output(
        &self,
        s: StartStream,
        resp: &HttpResponse,
        token: Option<&str>,
    ) -> Result<RunOutput, E2bError> {
        if !s.started && s.exit_code.is_none() {
            return Err(match s.stream_error {
                Some((code, message)) => E2bError::Rpc {
                    code,
                    message: self.redact(message, token),
                },
                None => E2bError::Decode(self.redact(
                    format!(
                        "the command stream (HTTP {}) ended before the process started; body \
                         starts {:?}",
                        resp.status,
                        excerpt(&resp.body)
                    ),
                    token,
                )),
            });
        }
        let error = match (&s.stream_error, &s.end_error, s.exit_code) {
            (Some((code, message)), _, _) => Some(format!("{code}: {message}")),
            (None, Some(e), _) => Some(e.clone()),
            (None, None, None) => Some(if s.finished {
                "the command stream ended without the process's end event".to_owned()
            } else {
                "the command stream was cut off before the process ended (connection lost?)"
                    .to_owned()
            }),
            (None, None, Some(_)) => None,
        };
        Ok(RunOutput {
            pid: s.pid,
            exit_code: s.exit_code.unwrap_or(-1),
            stdout: s.stdout,
            stderr: s.stderr,
            truncated: s.truncated,
            error: error.map(|e| self.redact(e, token)),
        })
    }

    fn sandbox_path(&self, id: &str, suffix: &str) -> String {
        format!(
            "{}/sandboxes/{}{suffix}",
            self.api_url,
            encode_component(id)
        )
    }

    fn api_request(&self, method: &'static str, url: String, body: Option<Vec<u8>>) -> HttpRequest {
        HttpRequest::json(method, url, ("X-API-Key", &self.api_key), body)
    }

    /// The sandbox domain when the sandbox names none: the API host without its `api.`
    /// prefix (`https://api.e2b.dev` → `e2b.dev`), else [`DEFAULT_DOMAIN`].
    fn default_domain(&self) -> String {
        let rest = self
            .api_url
            .split_once("://")
            .map_or(self.api_url.as_str(), |(_, r)| r);
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        match host.strip_prefix("api.") {
            Some(domain) if !domain.is_empty() => domain.to_owned(),
            _ => DEFAULT_DOMAIN.to_owned(),
        }
    }

    /// `POST {envd}/process.Process/Start` with the Connect streaming headers.
    fn start_request(
        &self,
        sandbox: &Sandbox,
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<HttpRequest, E2bError> {
        let id = sandbox.sandbox_id.as_str();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(E2bError::NotFound(format!(
                "E2B sandbox {id:?} (not a valid sandbox ID)"
            )));
        }
        let mut headers = Vec::new();
        let base = match &self.sandbox_url {
            Some(url) => {
                headers.push(("E2b-Sandbox-Id".to_owned(), id.to_owned()));
                headers.push(("E2b-Sandbox-Port".to_owned(), ENVD_PORT.to_string()));
                url.clone()
            }
            None => {
                let domain = sandbox
                    .domain
                    .as_deref()
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map_or_else(|| self.default_domain(), str::to_owned);
                if !domain
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':'))
                {
                    return Err(E2bError::Decode(format!(
                        "the sandbox domain {domain:?} is not a host name"
                    )));
                }
                format!("https://{ENVD_PORT}-{id}.{domain}")
            }
        };
        headers.push((
            "Content-Type".to_owned(),
            "application/connect+json".to_owned(),
        ));
        headers.push(("Connect-Protocol-Version".to_owned(), "1".to_owned()));
        if timeout_ms > 0 {
            headers.push(("Connect-Timeout-Ms".to_owned(), timeout_ms.to_string()));
        }
        headers.push((
            "Keepalive-Ping-Interval".to_owned(),
            KEEPALIVE_PING_INTERVAL_SECS.to_string(),
        ));
        if let Some(token) = sandbox
            .envd_access_token
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            headers.push(("X-Access-Token".to_owned(), token.to_owned()));
        }
        Ok(HttpRequest {
            method: "POST",
            url: format!("{base}/process.Process/Start"),
            headers,
            body: Some(body),
        })
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
        let mut attempts = 0u32;
        let mut capacity_failures = 0u32;
        loop {
            attempts += 1;
            let (outcome, failure) = match self.transport.send(req.clone()).await {
                Ok(resp) if resp.is_success() => return Ok(resp),
                Ok(resp) => {
                    let capacity = matches!(target, Target::ControlPlane) && is_capacity(&resp);
                    capacity_failures += u32::from(capacity);
                    let outcome = Outcome::Status {
                        status: resp.status,
                        retry_after_ms: retry_after_ms(&resp),
                        capacity,
                    };
                    (outcome, Ok(resp))
                }
                Err(e) => (
                    Outcome::Transport,
                    Err(E2bError::Transport(self.redact(e, target.token()))),
                ),
            };
            match self
                .retry
                .decide(idempotent, attempts, capacity_failures, outcome)
            {
                Decision::Retry { after_ms } => self.transport.sleep(after_ms).await,
                Decision::GiveUp => return failure,
            }
        }
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
    serde_json::to_vec(body).map_err(|e| E2bError::Decode(format!("encoding a request: {e}")))
}

fn decode<D: serde::de::DeserializeOwned>(resp: &HttpResponse, what: &str) -> Result<D, E2bError> {
    serde_json::from_slice(&resp.body).map_err(|e| {
        E2bError::Decode(format!(
            "{what} (HTTP {}): {e}; body starts {:?}",
            resp.status,
            excerpt(&resp.body)
        ))
    })
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

/// `retry-after` in its delay-seconds form (an HTTP date cannot be read without a clock).
fn retry_after_ms(resp: &HttpResponse) -> Option<u64> {
    let v = resp.header("retry-after")?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let secs = v.parse::<f64>().ok()?;
    // Truncation is intended: a finite, non-negative number of seconds to whole ms.
    (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).min(u64::MAX as f64) as u64)
}

/// The start of a body as text, for messages.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    match text.char_indices().nth(MAX_EXCERPT) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;

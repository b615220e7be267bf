//! What goes over the wire to E2B: request bodies (only fields of the spec's schemas),
//! lenient response types, and the Connect framing of envd's command stream.

use serde::de::IgnoredAny;

use super::*;

// ---------------------------------------------------------------------------------------
// Wire types (request bodies: only fields of the spec's schemas)
// ---------------------------------------------------------------------------------------

/// `NewSandbox`.
#[derive(Serialize)]
pub(super) struct NewSandboxBody<'a> {
    #[serde(rename = "templateID")]
    pub(super) template_id: &'a str,
    pub(super) timeout: i32,
    #[serde(rename = "autoPause")]
    pub(super) auto_pause: bool,
    pub(super) secure: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) metadata: BTreeMap<&'a str, &'a str>,
    #[serde(rename = "envVars", skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) env_vars: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) allow_internet_access: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) network: Option<NetworkBody<'a>>,
}

/// `SandboxNetworkConfig` (egress rules only).
#[derive(Serialize)]
pub(super) struct NetworkBody<'a> {
    #[serde(rename = "allowOut")]
    pub(super) allow_out: &'a [String],
    #[serde(rename = "denyOut")]
    pub(super) deny_out: &'a [&'a str],
}

/// `ConnectSandbox` and `SandboxTimeoutRequest` (both `{timeout}`).
#[derive(Serialize)]
pub(super) struct TimeoutBody {
    pub(super) timeout: i32,
}

/// `process.StartRequest` in proto3 JSON.
#[derive(Serialize)]
pub(super) struct StartRequestBody<'a> {
    pub(super) process: ProcessConfigBody<'a>,
    pub(super) stdin: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tag: Option<&'a str>,
}

/// `process.ProcessConfig` in proto3 JSON (empty `args`/`envs` omitted, as proto3 does).
#[derive(Serialize)]
pub(super) struct ProcessConfigBody<'a> {
    pub(super) cmd: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(super) args: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) envs: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cwd: Option<&'a str>,
}

/// `process.SendSignalRequest` in proto3 JSON.
#[derive(Serialize)]
pub(super) struct SendSignalBody<'a> {
    pub(super) process: ProcessSelector<'a>,
    /// A `process.Signal` name.
    pub(super) signal: &'static str,
}

/// `process.ProcessSelector` (a oneof: `{"pid": n}` or `{"tag": "..."}`).
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ProcessSelector<'a> {
    Pid(u32),
    Tag(&'a str),
}

// Response types: every field optional, unknown fields ignored.

/// `Sandbox`, `SandboxDetail` and `ListedSandbox` (the fields we use).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawSandbox {
    #[serde(rename = "sandboxID")]
    pub(super) sandbox_id: Option<String>,
    #[serde(rename = "templateID")]
    pub(super) template_id: Option<String>,
    #[serde(rename = "envdAccessToken")]
    pub(super) envd_access_token: Option<String>,
    pub(super) domain: Option<String>,
    pub(super) state: Option<String>,
    /// `SandboxMetadata`: string values (a `null` one is dropped).
    pub(super) metadata: Option<BTreeMap<String, Option<String>>>,
    #[serde(rename = "startedAt")]
    pub(super) started_at: Option<String>,
    #[serde(rename = "endAt")]
    pub(super) end_at: Option<String>,
}

/// `Error` (any content type; missing fields allowed).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ErrorBody {
    /// An integer on the control plane, a string (the Connect code) from envd.
    pub(super) code: Option<Value>,
    pub(super) message: Option<String>,
    pub(super) error_code: Option<String>,
}

/// `process.StartResponse`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawStartResponse {
    pub(super) event: Option<RawEvent>,
}

/// `process.ProcessEvent` (a oneof: one field is set).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawEvent {
    pub(super) start: Option<RawStart>,
    pub(super) data: Option<RawData>,
    pub(super) end: Option<RawEnd>,
}

/// `ProcessEvent.StartEvent`; any other shape still says the process started.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawStart {
    Event {
        #[serde(default)]
        pid: Option<IntOrText>,
    },
    Other(IgnoredAny),
}

/// `ProcessEvent.DataEvent`: base64 bytes.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawData {
    pub(super) stdout: Option<String>,
    pub(super) stderr: Option<String>,
}

/// `ProcessEvent.EndEvent`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawEnd {
    #[serde(rename = "exitCode", alias = "exit_code")]
    pub(super) exit_code: Option<IntOrText>,
    pub(super) error: Option<String>,
}

/// The Connect end-of-stream message.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawEndStream {
    pub(super) error: Option<RawConnectError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawConnectError {
    pub(super) code: Option<String>,
    pub(super) message: Option<String>,
}

impl RawSandbox {
    pub(super) fn id(&mut self) -> Result<String, E2bError> {
        self.sandbox_id
            .take()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| E2bError::Decode("a sandbox without a `sandboxID`".into()))
    }

    pub(super) fn into_sandbox(mut self) -> Result<Sandbox, E2bError> {
        Ok(Sandbox {
            sandbox_id: self.id()?,
            template_id: self.template_id.unwrap_or_default(),
            envd_access_token: self.envd_access_token.filter(|t| !t.is_empty()),
            domain: self.domain.filter(|d| !d.is_empty()),
        })
    }

    pub(super) fn into_listed(mut self) -> Result<ListedSandbox, E2bError> {
        Ok(ListedSandbox {
            sandbox_id: self.id()?,
            template_id: self.template_id.unwrap_or_default(),
            state: self.state.unwrap_or_default(),
            metadata: metadata_map(self.metadata),
            started_at: self.started_at.filter(|s| !s.is_empty()),
            end_at: self.end_at.filter(|s| !s.is_empty()),
        })
    }

    pub(super) fn into_detail(mut self) -> Result<SandboxDetail, E2bError> {
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

pub(super) fn metadata_map(
    raw: Option<BTreeMap<String, Option<String>>>,
) -> BTreeMap<String, String> {
    raw.unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
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
pub(super) fn stdin_wrapper(cmd: &str, args: &[String], input: &[u8]) -> (String, Vec<String>) {
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
pub(super) fn decode_bytes(s: &str) -> Result<Vec<u8>, WireError> {
    let trimmed = s.trim_end_matches('=');
    let res = if trimmed.contains(['-', '_']) {
        URL_SAFE_NO_PAD.decode(trimmed)
    } else {
        STANDARD_NO_PAD.decode(trimmed)
    };
    res.map_err(|e| WireError(format!("invalid base64 in command output: {e}")))
}

/// Appends at most `limit - out.len()` bytes; says whether anything was dropped.
pub(super) fn append_limited(out: &mut Vec<u8>, bytes: &[u8], limit: usize) -> bool {
    let room = limit.saturating_sub(out.len());
    let take = bytes.len().min(room);
    out.extend_from_slice(&bytes[..take]);
    take < bytes.len()
}

/// An integer as proto3 JSON writes one: a number, or a decimal string (64-bit types).
/// Any other JSON is kept apart, to be refused or ignored by the caller.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub(super) enum IntOrText {
    Number(serde_json::Number),
    Text(String),
    Bool(bool),
    /// An array or an object.
    Other(IgnoredAny),
}

impl IntOrText {
    /// The integer, if it is one (a string is trimmed first).
    pub(super) fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Number(n) => n.as_i64(),
            Self::Text(s) => s.trim().parse().ok(),
            Self::Bool(_) | Self::Other(_) => None,
        }
    }
}

/// The JSON text of a scalar; "an array or object" for the rest.
impl fmt::Display for IntOrText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = match self {
            Self::Number(n) => serde_json::to_string(n),
            Self::Text(s) => serde_json::to_string(s),
            Self::Bool(b) => return write!(f, "{b}"),
            Self::Other(_) => return f.write_str("an array or object"),
        };
        f.write_str(&json.map_err(|_| fmt::Error)?)
    }
}

/// What a `process.Process/Start` response stream said.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct StartStream {
    pub(super) started: bool,
    /// The process id from the `start` event.
    pub(super) pid: Option<u32>,
    /// The `end` event's exit code (missing `exitCode` = 0), if an `end` event came.
    pub(super) exit_code: Option<i64>,
    pub(super) end_error: Option<String>,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
    pub(super) truncated: bool,
    /// The end-of-stream message came.
    pub(super) finished: bool,
    /// Its error, as (code, message).
    pub(super) stream_error: Option<(String, String)>,
}

/// Parses a whole buffered `application/connect+json` server stream. Errors only on
/// malformed frames or JSON; a body cut short ends the parse (reported by the caller).
pub(super) fn parse_start_stream(
    body: &[u8],
    output_limit: usize,
) -> Result<StartStream, WireError> {
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
            s.pid = match start {
                RawStart::Event { pid: Some(pid) } => {
                    pid.as_i64().and_then(|p| u32::try_from(p).ok())
                }
                _ => None,
            };
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
                None => 0,
                Some(v) => v.as_i64().ok_or_else(|| format!("an exitCode of {v}"))?,
            };
            s.exit_code = Some(code);
            s.end_error = end.error.filter(|e| !e.is_empty());
        }
    }
    Ok(s)
}

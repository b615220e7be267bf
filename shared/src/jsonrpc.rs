//! JSON-RPC 2.0 framing, typed: the error codes, [`RequestId`], the [`Params`] this server
//! reads, parsing one incoming message into an [`Incoming`] (or the [`Response`] that
//! refuses a malformed one), and the responses.
//!
//! Request ids are echoed exactly: a number id is kept as the text sent, so
//! `18446744073709551617` or `1.50` (which `serde_json` would read as an `f64` and write as
//! another number) go back as they came.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// JSON-RPC and MCP error codes.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const RESOURCE_NOT_FOUND_LEGACY: i64 = -32002;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const MISSING_CAPABILITY: i64 = -32021;
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// A request id (or a progress token, which has the same shape) as the client sent it: a
/// string, or a number kept as its JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    /// The number's JSON text, exactly as sent.
    Number(Box<str>),
    Text(String),
}

/// A progress token: a string or a number, echoed exactly on each notification.
pub type ProgressToken = RequestId;

impl RequestId {
    /// The id of an integer (tests, and servers that number their own requests).
    pub fn number(n: i64) -> Self {
        Self::Number(n.to_string().into())
    }

    /// The id of `raw` JSON text, if it is a string or a number.
    fn of_raw(raw: &RawValue) -> Option<Self> {
        let text = raw.get().trim();
        match text.as_bytes().first()? {
            b'"' => serde_json::from_str(text).ok().map(Self::Text),
            b'-' | b'0'..=b'9' => Some(Self::Number(text.into())),
            _ => None,
        }
    }
}

impl fmt::Display for RequestId {
    /// The id's JSON text (`"abc"` quoted, a number as sent).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => f.write_str(n),
            Self::Text(s) => write!(f, "{}", serde_json::Value::String(s.clone())),
        }
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text(t) => s.serialize_str(t),
            Self::Number(n) => RawValue::from_string(n.to_string())
                .map_err(serde::ser::Error::custom)?
                .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Self::of_raw(&raw).ok_or_else(|| de::Error::custom("an id must be a string or a number"))
    }
}

/// A field MCP gives a type: absent, of that type, or of another (which each method turns
/// into its own message, as it does an absent one where the field is required).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Field<T> {
    #[default]
    Absent,
    Is(T),
    /// Present, of another type (`null` included).
    Other,
}

impl<T> Field<T> {
    /// The value, when it has the type MCP gives it.
    pub fn get(&self) -> Option<&T> {
        match self {
            Self::Is(t) => Some(t),
            _ => None,
        }
    }

    pub fn is_present(&self) -> bool {
        !matches!(self, Self::Absent)
    }
}

impl Field<String> {
    pub fn as_str(&self) -> Option<&str> {
        self.get().map(String::as_str)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(serde_json::from_str(raw.get()).map_or(Self::Other, Self::Is))
    }
}

/// A JSON object whose members this server does not read.
#[derive(Debug, Clone, PartialEq)]
pub struct AnObject;

impl<'de> Deserialize<'de> for AnObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = AnObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnObject, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(AnObject)
            }
        }
        d.deserialize_map(Members)
    }
}

/// The client capabilities of a 2026-07-28 request's `_meta`, as far as this server reads
/// them: the extensions it declares.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct ClientCapabilities {
    #[serde(default)]
    pub extensions: Field<std::collections::BTreeMap<String, Field<AnObject>>>,
}

impl ClientCapabilities {
    /// Whether the client declares the extension `name` (with an object, as MCP asks).
    pub fn declares(&self, name: &str) -> bool {
        self.extensions
            .get()
            .and_then(|e| e.get(name))
            .is_some_and(|e| e.get().is_some())
    }
}

/// A request's `_meta`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct Meta {
    #[serde(default, rename = "progressToken")]
    pub progress_token: Field<ProgressToken>,
    #[serde(default, rename = "io.modelcontextprotocol/protocolVersion")]
    pub protocol_version: Field<String>,
    #[serde(default, rename = "io.modelcontextprotocol/clientCapabilities")]
    pub client_capabilities: Field<ClientCapabilities>,
}

/// A message's `params`, by the members this server reads (MCP 2024-11-05 to 2026-07-28);
/// others are ignored.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Params {
    /// `tools/call`, `prompts/get`.
    #[serde(default)]
    pub name: Field<String>,
    /// `tools/call`: checked by the tool's own validation (`null` is absent).
    #[serde(default)]
    pub arguments: Option<Value>,
    /// `resources/read`.
    #[serde(default)]
    pub uri: Field<String>,
    /// `logging/setLevel`.
    #[serde(default)]
    pub level: Field<String>,
    /// `initialize`.
    #[serde(default)]
    pub protocol_version: Field<String>,
    /// `notifications/cancelled`.
    #[serde(default)]
    pub request_id: Field<RequestId>,
    /// The Tasks extension's `tasks/*`.
    #[serde(default)]
    pub task_id: Field<String>,
    #[serde(default, rename = "_meta")]
    pub meta: Field<Meta>,
}

impl Params {
    /// The `_meta` members, when `_meta` is an object.
    pub fn meta(&self) -> Option<&Meta> {
        self.meta.get()
    }

    /// The protocol version a 2026-07-28 request names in its `_meta`.
    pub fn meta_version(&self) -> Option<&str> {
        self.meta().and_then(|m| m.protocol_version.as_str())
    }

    /// The progress token the request asks notifications for.
    pub fn progress_token(&self) -> Option<&ProgressToken> {
        self.meta().and_then(|m| m.progress_token.get())
    }
}

/// A parsed incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: RequestId,
        method: String,
        params: Params,
    },
    Notification {
        method: String,
        params: Params,
    },
    /// A response from the client (we send no requests, so these are ignored).
    Response,
}

/// The members of a message, each as sent (`null` included, unlike `Option<&RawValue>`).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Parses one JSON-RPC message. `Err` holds the error response to send back.
pub fn parse_message(bytes: &[u8]) -> Result<Incoming, Response> {
    let invalid =
        |id: Option<RequestId>, message: &str| Response::error(id, codes::INVALID_REQUEST, message);
    let msg: Envelope = match serde_json::from_slice(bytes) {
        Ok(m) => m,
        Err(e) => {
            // Not an object: say why, once the text is known to be JSON at all.
            if let Err(e) = serde_json::from_slice::<IgnoredAny>(bytes) {
                return Err(Response::error(
                    None,
                    codes::PARSE_ERROR,
                    format!("parse error: {e}"),
                ));
            }
            return Err(match bytes.trim_ascii_start().first() {
                Some(b'{') => {
                    Response::error(None, codes::PARSE_ERROR, format!("parse error: {e}"))
                }
                Some(b'[') => invalid(
                    None,
                    "batches are not supported: send one JSON-RPC message per request",
                ),
                _ => invalid(None, "a JSON-RPC message must be an object"),
            });
        }
    };
    let id = msg.id.map(RequestId::of_raw);
    let echo = id.clone().flatten();
    let version = msg
        .jsonrpc
        .and_then(|v| serde_json::from_str::<&str>(v.get()).ok());
    if version != Some("2.0") {
        return Err(invalid(echo, "`jsonrpc` must be \"2.0\""));
    }
    let method = match msg.method {
        Some(m) => match serde_json::from_str::<String>(m.get()) {
            Ok(m) => m,
            Err(_) => return Err(invalid(echo, "`method` must be a string")),
        },
        None if msg.result.is_some() || msg.error.is_some() => return Ok(Incoming::Response),
        None => return Err(invalid(echo, "missing `method`")),
    };
    let params = match msg.params {
        None => Params::default(),
        Some(p) if p.get().starts_with('{') => serde_json::from_str(p.get())
            .map_err(|e| invalid(echo.clone(), &format!("`params` cannot be read: {e}")))?,
        Some(_) => return Err(invalid(echo, "`params` must be an object")),
    };
    match id {
        None => Ok(Incoming::Notification { method, params }),
        Some(Some(id)) => Ok(Incoming::Request { id, method, params }),
        Some(None) => Err(invalid(None, "`id` must be a string or a number")),
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// What a response carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The method's result (an MCP result object).
    Result(Value),
    Error(Box<RpcError>),
}

/// A JSON-RPC response. `id` is `None` (written `null`) where the request's id could not be
/// read.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: Option<RequestId>,
    pub outcome: Outcome,
}

impl Response {
    /// A success response.
    pub fn success(id: RequestId, result: Value) -> Self {
        Self {
            id: Some(id),
            outcome: Outcome::Result(result),
        }
    }

    /// An error response.
    pub fn error(id: Option<RequestId>, code: i64, message: impl Into<String>) -> Self {
        Self {
            id,
            outcome: Outcome::Error(Box::new(RpcError {
                code,
                message: message.into(),
                data: None,
            })),
        }
    }

    /// This error response with `data` (a success response is left as it is).
    pub fn with_data(mut self, data: Value) -> Self {
        if let Outcome::Error(e) = &mut self.outcome {
            e.data = Some(data);
        }
        self
    }

    /// The error code, for an error response.
    pub fn error_code(&self) -> Option<i64> {
        match &self.outcome {
            Outcome::Error(e) => Some(e.code),
            Outcome::Result(_) => None,
        }
    }

    /// Appends the compact JSON text of the response to `out` (the result through
    /// [`crate::json::write`], fast on long command output).
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        match &self.id {
            Some(RequestId::Number(n)) => out.extend_from_slice(n.as_bytes()),
            Some(RequestId::Text(t)) => crate::json::write_str(out, t),
            None => out.extend_from_slice(b"null"),
        }
        match &self.outcome {
            Outcome::Result(r) => {
                out.extend_from_slice(b",\"result\":");
                crate::json::write(out, r);
            }
            Outcome::Error(e) => {
                out.extend_from_slice(b",\"error\":{\"code\":");
                out.extend_from_slice(e.code.to_string().as_bytes());
                out.extend_from_slice(b",\"message\":");
                crate::json::write_str(out, &e.message);
                if let Some(data) = &e.data {
                    out.extend_from_slice(b",\"data\":");
                    crate::json::write(out, data);
                }
                out.push(b'}');
            }
        }
        out.push(b'}');
    }

    /// The compact JSON text of the response.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out);
        out
    }

    /// The compact JSON text of the response, as a `String`.
    pub fn to_json(&self) -> String {
        // Only JSON text of valid strings was written: always UTF-8.
        String::from_utf8(self.to_vec())
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RawValue::from_string(self.to_json())
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// Compact JSON text of a JSON array of responses (a batch's answer).
pub fn batch_to_vec(responses: &[Response]) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, r) in responses.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        r.write(&mut out);
    }
    out.push(b']');
    out
}

/// `notifications/progress`: `progress` grows with each one of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressNote {
    pub token: ProgressToken,
    pub progress: u64,
    pub message: String,
}

impl ProgressNote {
    /// The notification's compact JSON text.
    pub fn to_vec(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Note<'a> {
            jsonrpc: &'static str,
            method: &'static str,
            params: NoteParams<'a>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct NoteParams<'a> {
            progress_token: &'a ProgressToken,
            progress: u64,
            message: &'a str,
        }
        let note = Note {
            jsonrpc: "2.0",
            method: "notifications/progress",
            params: NoteParams {
                progress_token: &self.token,
                progress: self.progress,
                message: &self.message,
            },
        };
        // Serializing strings, an integer and an id written as sent cannot fail.
        serde_json::to_vec(&note).unwrap_or_default()
    }

    /// The notification's compact JSON text, as a `String`.
    pub fn to_json(&self) -> String {
        String::from_utf8(self.to_vec()).unwrap_or_default()
    }
}

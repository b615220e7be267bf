//! JSON-RPC 2.0 framing: the error codes, parsing one incoming message into an
//! [`Incoming`] (or the error response for a malformed one), and building responses.
//!
//! Request ids are echoed exactly. `serde_json` reads a number beyond 64-bit integers (or
//! one whose text a float does not give back, such as `1.50`) as an `f64`, which would
//! echo `18446744073709551617` as `1.8446744073709552e19`, another id. Such an id becomes
//! the one-entry object `{RAW_ID: "<the text sent>"}`, which no client can send (ids are
//! strings or numbers), and [`crate::json`] writes a message's marked id back as that text.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

pub use crate::json::{RAW_ID, raw_id_text};

/// The id and `params.requestId` of a message as sent.
#[derive(Deserialize)]
struct RawIds<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawRequestId<'a> {
    #[serde(borrow, default, rename = "requestId")]
    request_id: Option<&'a RawValue>,
}

/// Whether `v` is a number `serde_json` holds as a float whose text may differ from the
/// one sent.
fn inexact(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Number(n)) if n.is_f64())
}

/// `id` as sent, when its text is not what `id` writes.
fn exact(id: &mut Value, raw: Option<&RawValue>) {
    if let (Value::Number(n), Some(raw)) = (&*id, raw) {
        let text = raw.get().trim();
        if n.to_string() != text {
            *id = json!({ RAW_ID: text });
        }
    }
}

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

/// A parsed incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A response from the client (we send no requests, so these are ignored).
    Response,
}

/// Parses one JSON-RPC message. `Err` holds the error response to send back.
pub fn parse_message(bytes: &[u8]) -> Result<Incoming, Value> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        error_response(
            Value::Null,
            codes::PARSE_ERROR,
            &format!("parse error: {e}"),
            None,
        )
    })?;
    let id_inexact = inexact(value.get("id"));
    let cancel_inexact = inexact(value.get("params").and_then(|p| p.get("requestId")));
    let mut incoming = parse_value(value)?;
    if id_inexact || cancel_inexact {
        let raw: Option<RawIds> = serde_json::from_slice(bytes).ok();
        match &mut incoming {
            Incoming::Request { id, .. } => exact(id, raw.as_ref().and_then(|r| r.id)),
            Incoming::Notification {
                params: Some(p), ..
            } => {
                let sent = raw
                    .as_ref()
                    .and_then(|r| r.params)
                    .and_then(|p| serde_json::from_str::<RawRequestId>(p.get()).ok())
                    .and_then(|r| r.request_id);
                if let Some(request_id) = p.get_mut("requestId") {
                    exact(request_id, sent);
                }
            }
            _ => {}
        }
    }
    Ok(incoming)
}

/// Parses an already-decoded JSON-RPC message.
pub fn parse_value(value: Value) -> Result<Incoming, Value> {
    let Value::Object(mut obj) = value else {
        let msg = if value.is_array() {
            "batches are not supported: send one JSON-RPC message per request"
        } else {
            "a JSON-RPC message must be an object"
        };
        return Err(error_response(
            Value::Null,
            codes::INVALID_REQUEST,
            msg,
            None,
        ));
    };
    let id = obj.remove("id");
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(error_response(
            id.unwrap_or(Value::Null),
            codes::INVALID_REQUEST,
            "`jsonrpc` must be \"2.0\"",
            None,
        ));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Err(error_response(
                id.unwrap_or(Value::Null),
                codes::INVALID_REQUEST,
                "`method` must be a string",
                None,
            ));
        }
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Ok(Incoming::Response);
        }
        None => {
            return Err(error_response(
                id.unwrap_or(Value::Null),
                codes::INVALID_REQUEST,
                "missing `method`",
                None,
            ));
        }
    };
    let params = obj.remove("params");
    if let Some(p) = &params
        && !p.is_object()
    {
        return Err(error_response(
            id.unwrap_or(Value::Null),
            codes::INVALID_REQUEST,
            "`params` must be an object",
            None,
        ));
    }
    match id {
        None => Ok(Incoming::Notification { method, params }),
        Some(id @ (Value::String(_) | Value::Number(_))) => {
            Ok(Incoming::Request { id, method, params })
        }
        Some(_) => Err(error_response(
            Value::Null,
            codes::INVALID_REQUEST,
            "`id` must be a string or a number",
            None,
        )),
    }
}

/// A JSON-RPC error response.
pub fn error_response(id: Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

/// A JSON-RPC success response.
pub fn success_response(id: Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

//! Streamable HTTP rules both HTTP servers (the local one and the Worker) apply before the
//! dispatcher sees a request: the 2026-07-28 header checks, the `=?base64?…?=` header
//! encoding, what a stateless request without the right version header gets, and the HTTP
//! status of a stateless answer. Pure functions over a header lookup.

use crate::mcp::{
    LEGACY_VERSIONS, MODERN_VERSION, Params, RequestId, Response, codes, unsupported_version,
};

/// An HTTP status and a JSON-RPC error body.
pub type Refused = (u16, Response);

pub mod route;

/// Compares a presented token with the expected one in time independent of where they
/// differ (lengths leak, contents do not).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xff);
        diff |= u64::from(x ^ y);
    }
    diff == 0
}

/// The token of an `Authorization` header value `Bearer <token>`. The scheme is matched
/// case-insensitively (RFC 7235 §2.1: `bearer`, `BEARER`), spaces around the token are
/// ignored; anything else (another scheme, no token) is `None`.
pub fn bearer_token(header: &str) -> Option<&str> {
    let header = header.trim_start();
    let (scheme, rest) = header.split_once([' ', '\t'])?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim();
    (!token.is_empty() && !token.contains([' ', '\t'])).then_some(token)
}

/// Header values with non-ASCII content use the `=?base64?…?=` sentinel.
pub fn decode_header_value(v: &str) -> String {
    use base64::Engine as _;
    if let Some(inner) = v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(inner)
        && let Ok(s) = String::from_utf8(bytes)
    {
        return s;
    }
    v.to_owned()
}

/// 2026-07-28: `Mcp-Method` must equal the method, `Mcp-Name` the tool name, resource
/// uri or task id, and a `_meta` protocol version must equal the header's. `header` looks a header
/// up by lower-case name.
pub fn check_modern_headers<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    id: &RequestId,
    method: &str,
    params: &Params,
) -> Result<(), Refused> {
    let mismatch = |what: &str| {
        (
            400,
            Response::error(
                Some(id.clone()),
                codes::HEADER_MISMATCH,
                format!("header mismatch: {what}"),
            ),
        )
    };
    match header("mcp-method") {
        Some(m) if m == method => {}
        Some(_) => return Err(mismatch("Mcp-Method does not equal the request's method")),
        None => return Err(mismatch("the Mcp-Method header is required")),
    }
    let name_param = match method {
        "tools/call" | "prompts/get" => params.name.as_str(),
        "resources/read" => params.uri.as_str(),
        // The Tasks extension routes its requests by task id.
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.task_id.as_str(),
        _ => None,
    };
    if let Some(expected) = name_param {
        let given = header("mcp-name").map(decode_header_value);
        if given.as_deref() != Some(expected) {
            return Err(mismatch("Mcp-Name does not equal the request's name/uri"));
        }
    }
    if let Some(meta) = params.meta()
        && meta.protocol_version.is_present()
        && meta.protocol_version.as_str() != Some(MODERN_VERSION)
    {
        return Err(mismatch(
            "MCP-Protocol-Version does not equal _meta protocolVersion",
        ));
    }
    Ok(())
}

/// A request with no session: it must be 2026-07-28 (by `MCP-Protocol-Version`).
pub fn check_stateless_version(
    version_header: Option<&str>,
    id: Option<&RequestId>,
) -> Result<(), Refused> {
    let id = id.cloned();
    match version_header {
        Some(MODERN_VERSION) => Ok(()),
        Some(v) if LEGACY_VERSIONS.contains(&v) => Err((
            400,
            Response::error(
                id,
                codes::INVALID_REQUEST,
                "missing Mcp-Session-Id: send initialize first to open a session",
            ),
        )),
        Some(v) => Err((400, unsupported_version(id, v))),
        None => Err((
            400,
            Response::error(
                id,
                codes::HEADER_MISMATCH,
                "missing MCP-Protocol-Version header: send initialize to open a session, or use protocol 2026-07-28 with its headers",
            ),
        )),
    }
}

/// The HTTP status of a stateless answer: errors of method or version are HTTP errors too.
pub fn modern_status(response: &Response) -> u16 {
    match response.error_code() {
        Some(codes::METHOD_NOT_FOUND) => 404,
        Some(codes::UNSUPPORTED_VERSION) | Some(codes::HEADER_MISMATCH) => 400,
        _ => 200,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for (header, want) in [
            ("Bearer tok", Some("tok")),
            ("bearer tok", Some("tok")),
            ("BEARER tok", Some("tok")),
            ("bEaReR   tok  ", Some("tok")),
            ("Bearer\ttok", Some("tok")),
            ("Bearer", None),
            ("Bearer ", None),
            ("Bearer a b", None),
            ("Basic dXNlcjpwYXNz", None),
            ("Bearertok", None),
            ("", None),
        ] {
            assert_eq!(bearer_token(header), want, "{header:?}");
        }
    }
    use serde_json::json;

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn header_sentinel() {
        assert_eq!(decode_header_value("=?base64?w6k=?="), "é");
        assert_eq!(decode_header_value("plain"), "plain");
    }

    #[test]
    fn modern_header_rules() {
        let params: Params = serde_json::from_value(json!({"name": "é"})).unwrap();
        let h = |n: &str| match n {
            "mcp-method" => Some("tools/call"),
            "mcp-name" => Some("=?base64?w6k=?="),
            _ => None,
        };
        assert!(check_modern_headers(h, &RequestId::number(1), "tools/call", &params).is_ok());
        let wrong = |n: &str| (n == "mcp-method").then_some("tools/list");
        let (status, body) =
            check_modern_headers(wrong, &RequestId::number(1), "tools/call", &params).unwrap_err();
        assert_eq!(status, 400);
        assert_eq!(body.error_code(), Some(codes::HEADER_MISMATCH));
        assert!(check_stateless_version(Some(MODERN_VERSION), Some(&RequestId::number(1))).is_ok());
        assert_eq!(check_stateless_version(None, None).unwrap_err().0, 400);
        assert_eq!(
            modern_status(&Response::success(RequestId::number(1), json!({}))),
            200
        );
    }
}

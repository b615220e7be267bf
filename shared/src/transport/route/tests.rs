//! Data-driven tests of the `/mcp` state machine: each case is the headers and body of a
//! request and the one-line summary of what the machine decides.
//!
//! Headers are written `sid=…`, `v=…` (MCP-Protocol-Version), `m=…` (Mcp-Method),
//! `n=…` (Mcp-Name), `sse` (Accept: text/event-stream), space-separated, `-` for none.
//! Summaries: `refuse STATUS CODE`, `accept`, `initialize VERSION`,
//! `session SID call METHOD [stream]`, `session SID cancel ID`, `session SID accept`,
//! `stateless METHOD [stream]`.

use super::*;

const MODERN_META: &str = r#""_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {}}"#;

fn headers(spec: &str) -> Headers<'_> {
    let mut h = Headers::default();
    for w in spec.split_whitespace().filter(|w| *w != "-") {
        match w.split_once('=') {
            Some(("sid", v)) => h.session_id = Some(v),
            Some(("v", v)) => h.protocol_version = Some(v),
            Some(("m", v)) => h.mcp_method = Some(v),
            Some(("n", v)) => h.mcp_name = Some(v),
            None if w == "sse" => h.accept = Some("application/json, text/event-stream"),
            _ => panic!("header spec {w:?}"),
        }
    }
    h
}

fn code(body: &Response) -> String {
    body.error_code().map_or("none".into(), |c| c.to_string())
}

fn message(body: &Response) -> &str {
    match &body.outcome {
        crate::mcp::Outcome::Error(e) => &e.message,
        crate::mcp::Outcome::Result(_) => "",
    }
}

fn summary(p: &Post) -> String {
    let call = |c: &Call| {
        let stream = if c.stream { " stream" } else { "" };
        format!("{}{stream}", c.method)
    };
    match p {
        Post::Refuse((status, body)) => format!("refuse {status} {}", code(body)),
        Post::Accept => "accept".into(),
        Post::Initialize { version, .. } => format!("initialize {version}"),
        Post::Session { sid, message } => match message {
            InSession::Call(c) => format!("session {sid} call {}", call(c)),
            InSession::Cancel { request_id } => format!("session {sid} cancel {request_id}"),
            InSession::Accept => format!("session {sid} accept"),
        },
        Post::Stateless(c) => format!("stateless {}", call(c)),
        Post::SessionBatch { sid, messages } => {
            let each: Vec<String> = messages
                .iter()
                .map(|m| match m {
                    Ok(InSession::Call(c)) => format!("call {}", call(c)),
                    Ok(InSession::Cancel { request_id }) => format!("cancel {request_id}"),
                    Ok(InSession::Accept) => "accept".into(),
                    Err(body) => format!("error {}", code(body)),
                })
                .collect();
            format!("session {sid} batch [{}]", each.join(", "))
        }
    }
}

/// (headers, body, summary).
fn cases() -> Vec<(&'static str, String, &'static str)> {
    let req = |method: &str, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{{{params}}}}}"#)
    };
    let init = |v: &str| req("initialize", &format!(r#""protocolVersion":"{v}""#));
    let note = |method: &str, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{{params}}}}}"#)
    };
    let tool = format!(r#""name":"terminal_execute",{MODERN_META}"#);
    vec![
        ("-", "{not json".into(), "refuse 400 -32700"),
        ("-", "[]".into(), "refuse 400 -32600"),
        // Batches inside a session (2025-03-26 sessions take them; the server checks).
        ("sid=s1", "[]".into(), "refuse 400 -32600"),
        ("sid=s1", " [1,".into(), "refuse 400 -32700"),
        (
            "sid=s1 sse",
            format!(
                "[{}, {}, {}, 7, {}]",
                req("tools/list", ""),
                req("tools/call", r#""_meta":{"progressToken":1}"#),
                note("notifications/cancelled", r#""requestId":3"#),
                note("notifications/initialized", "")
            ),
            "session s1 batch [call tools/list, call tools/call, cancel 3, error -32600, accept]",
        ),
        (
            "sid=s1 v=garbage",
            format!("[{}]", req("tools/list", "")),
            "refuse 400 -32022",
        ),
        ("-", init("2025-06-18"), "initialize 2025-06-18"),
        ("-", init("1999-01-01"), "initialize 2025-11-25"),
        ("sid=old", init("2024-11-05"), "initialize 2024-11-05"),
        ("v=2025-03-26", init("2025-03-26"), "initialize 2025-03-26"),
        (
            "v=2026-07-28 m=initialize",
            req("initialize", MODERN_META),
            "stateless initialize",
        ),
        (
            "sid=s1",
            req("tools/list", ""),
            "session s1 call tools/list",
        ),
        (
            "sid=s1 sse",
            req("tools/call", r#""_meta":{"progressToken":1}"#),
            "session s1 call tools/call stream",
        ),
        (
            "sid=s1",
            req("tools/call", r#""_meta":{"progressToken":1}"#),
            "session s1 call tools/call",
        ),
        (
            "sid=s1",
            note("notifications/cancelled", r#""requestId":3"#),
            "session s1 cancel 3",
        ),
        // Issue 45: a version header inside a session is one of the session revisions.
        (
            "sid=s1 v=2025-06-18",
            req("tools/list", ""),
            "session s1 call tools/list",
        ),
        (
            "sid=s1 v=1999-01-01",
            req("tools/list", ""),
            "refuse 400 -32022",
        ),
        (
            "sid=s1 v=garbage",
            req("tools/list", ""),
            "refuse 400 -32022",
        ),
        (
            "sid=s1 v=2026-07-28",
            req("tools/list", ""),
            "refuse 400 -32022",
        ),
        (
            "sid=s1 v=garbage",
            note("notifications/initialized", ""),
            "refuse 400 -32022",
        ),
        (
            "sid=s1",
            note("notifications/cancelled", ""),
            "session s1 accept",
        ),
        (
            "sid=s1",
            note("notifications/initialized", ""),
            "session s1 accept",
        ),
        (
            "sid=s1",
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.into(),
            "session s1 accept",
        ),
        ("-", req("tools/list", ""), "refuse 400 -32020"),
        ("v=2025-06-18", req("tools/list", ""), "refuse 400 -32600"),
        ("v=2030-01-01", req("tools/list", ""), "refuse 400 -32022"),
        ("v=2026-07-28", note("notifications/x", ""), "accept"),
        ("-", note("notifications/x", ""), "refuse 400 -32020"),
        (
            "v=2026-07-28",
            req("tools/list", MODERN_META),
            "refuse 400 -32020",
        ),
        (
            "v=2026-07-28 m=tools/call",
            req("tools/list", MODERN_META),
            "refuse 400 -32020",
        ),
        (
            "v=2026-07-28 m=tools/call n=other",
            req("tools/call", &tool),
            "refuse 400 -32020",
        ),
        (
            "v=2026-07-28 m=tools/list",
            req("tools/list", ""),
            "refuse 400 -32602",
        ),
        (
            "v=2026-07-28 m=tools/list",
            req("tools/list", MODERN_META),
            "stateless tools/list",
        ),
        (
            "v=2026-07-28 m=tools/call n=terminal_execute sse",
            req(
                "tools/call",
                r#""name":"terminal_execute","_meta":{"progressToken":"p",
                    "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities":{}}"#,
            ),
            "stateless tools/call stream",
        ),
        (
            "v=2026-07-28 m=tools/call n=terminal_execute",
            req("tools/call", &tool),
            "stateless tools/call",
        ),
    ]
}

#[test]
fn post_cases() {
    for (spec, body, want) in cases() {
        let got = summary(&post(&headers(spec), body.as_bytes()));
        assert_eq!(got, want, "headers {spec:?}, body {body}");
    }
}

#[test]
fn delete_and_other_methods() {
    assert_eq!(delete(&headers("sid=abc")), Ok("abc".to_owned()));
    for spec in ["-", "sid="] {
        let (status, body) = delete(&headers(spec)).unwrap_err();
        assert_eq!(status, 400);
        assert!(message(&body).contains("Mcp-Session-Id"));
    }
    let (status, body) = unknown_session();
    assert_eq!(status, 404);
    assert!(message(&body).contains("initialize again"));
    let (status, body) = method_not_allowed("GET");
    assert_eq!(status, 405);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("GET is not supported")
    );
}

#[test]
fn headers_come_from_a_lookup() {
    let h = Headers::from_lookup(|n| match n {
        "mcp-session-id" => Some("s"),
        "accept" => Some("text/event-stream"),
        _ => None,
    });
    assert_eq!((h.session_id, h.protocol_version), (Some("s"), None));
    assert_eq!(Headers::NAMES.len(), 5);
}

#[test]
fn post_never_panics_on_junk() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let alphabet = br#"{}[]":,0123 idjsonrpcmethodparams_metainitialize/\"#;
    let specs = [
        "-",
        "sid=s",
        "v=2026-07-28 m=tools/call n=x sse",
        "v=2025-06-18",
    ];
    for _ in 0..5_000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = (seed % 60) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|i| alphabet[((seed >> (i % 50)) as usize + i) % alphabet.len()])
            .collect();
        for spec in specs {
            let _ = post(&headers(spec), &bytes);
        }
    }
}

#[test]
fn batches_belong_to_2025_03_26() {
    assert!(batch_refused("2025-03-26").is_none());
    for v in ["2024-11-05", "2025-06-18", "2025-11-25"] {
        let (status, body) = batch_refused(v).unwrap();
        assert_eq!((status, code(&body)), (400, "-32600".to_owned()), "{v}");
        assert!(message(&body).contains(v));
    }
}

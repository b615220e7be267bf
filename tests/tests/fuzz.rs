//! Issue 19: a fuzz target per parser, as proptest properties run for a bounded number of
//! cases by the test command (`PROPTEST_CASES` raises it): the JSON-RPC framing and the
//! dispatcher, the tools' argument validation (`shared::validate`), the executor API's
//! operation decoder (`shared::op`), the Team Durable Object's calls
//! (`gateway::inventory`), and the supervisor's frame decoder with the JSON payloads it
//! reads. The WASM shell's parser front-end has its own in `msc-shell`.
//!
//! Each property says more than "no panic" where it can: every request gets exactly one
//! answer with its own id, a decoded operation encodes back to itself, and a frame
//! decodes to what was encoded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use shared::catalogue::{Groups, ToolNames};
use shared::mcp::{
    CallContext, Dispatcher, Era, Incoming, LATEST_LEGACY, ServerConfig, ToolHost, parse_message,
};
use shared::op::Op;
use shared::op::parse_tool_call;
use shared::result::structured_result;
use supervisor::frame::{FileControl, Frame, FrameError, JobControl, StartSpec};

/// Argument and field names the parsers know, so generated objects reach deep branches.
const KEYS: &[&str] = &[
    "command",
    "args",
    "stdin",
    "timeout",
    "computer_id",
    "temporary",
    "working_directory",
    "env",
    "yield_ms",
    "job_id",
    "wait_ms",
    "signal",
    "close_stdin",
    "path",
    "content",
    "content_base64",
    "offset",
    "length",
    "encoding",
    "mode",
    "append",
    "create_only",
    "make_dirs",
    "old_string",
    "new_string",
    "expected_replacements",
    "name",
    "arguments",
    "_meta",
    "protocolVersion",
    "uri",
    "requestId",
    "progressToken",
    "op",
    "spec",
    "argv",
    "team",
    "request",
    "id",
    "owner",
    "executor",
    "stateless",
    "sid",
    "subject",
    "version",
    "busy",
    "mark",
    "until",
    "done",
    "deadline",
    "task_id",
    "record",
    "lease",
    "ended_ms",
    "fresh",
];

/// Strings the parsers treat specially.
const WORDS: &[&str] = &[
    "",
    "ls",
    "/tmp",
    "/tmp/f",
    "box-1",
    "a--b",
    "-x",
    "A",
    "exec",
    "manage",
    "TERM",
    "KILL",
    "base64",
    "text",
    "0644",
    "755",
    "2025-06-18",
    "2026-07-28",
    "ui://kilntainers/computers",
    "terminal_execute",
    "terminal_job",
    "computer_file_read",
    "computer_create",
    "a\u{0}b",
    "../..",
    "é☃",
    "claim",
    "touch",
    "session_open",
    "task_put",
    "exec:box-1:ab",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => "[a-zA-Z_]{0,8}",
    ]
}

/// Any JSON value, leaning on the names and words above.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        prop::sample::select(WORDS).prop_map(|s| json!(s)),
        "\\PC{0,16}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn names() -> ToolNames {
    ToolNames::with_groups("terminal_execute", Groups::ALL)
}

struct Echo;
impl ToolHost for Echo {
    async fn call_tool(&self, call: Op, ctx: &CallContext) -> rmcp::model::CallToolResult {
        structured_result(json!({ "call": format!("{call:?}"), "id": ctx.request_id }))
    }
}

fn dispatcher() -> Dispatcher {
    Dispatcher::new(ServerConfig {
        name: "fuzz".into(),
        version: "0".into(),
        names: names(),
        exec_description: "d".into(),
        instructions: None,
        dashboard_html: Some("<html></html>".into()),
        tasks: false,
    })
}

/// A JSON-RPC message made of likely parts (or not).
fn message() -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551617".to_owned()),
        Just("1.50".to_owned()),
        "\"[a-z0-9]{0,6}\"",
        Just("null".to_owned()),
        Just("{}".to_owned()),
    ];
    let method = prop_oneof![
        prop::sample::select(
            &[
                "initialize",
                "ping",
                "tools/list",
                "tools/call",
                "resources/list",
                "resources/read",
                "notifications/cancelled",
                "notifications/initialized",
                "logging/setLevel",
                "nope",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-z/]{0,12}",
    ];
    (id, method, json_value(), any::<bool>(), any::<bool>()).prop_map(
        |(id, method, params, with_id, with_version)| {
            let version = if with_version { "\"2.0\"" } else { "\"1.0\"" };
            let id = if with_id {
                format!(",\"id\":{id}")
            } else {
                String::new()
            };
            format!("{{\"jsonrpc\":{version}{id},\"method\":\"{method}\",\"params\":{params}}}")
                .into_bytes()
        },
    )
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// Every request gets one answer (a result or an error) with its own id, in both eras.
fn answer_each(msg: &[u8]) {
    let d = dispatcher();
    match parse_message(msg) {
        Err(resp) => assert!(resp.error_code().is_some(), "{resp:?}"),
        Ok(Incoming::Request { id, method, params }) => {
            for era in [Era::Modern, Era::Legacy(LATEST_LEGACY.into())] {
                let r = block(d.request(&Echo, &era, id.clone(), &method, &params));
                assert_eq!(r.id.as_ref(), Some(&id));
                let text = r.to_json();
                let v: Value =
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
                assert!(v.get("result").is_some() ^ v.get("error").is_some(), "{v}");
            }
        }
        Ok(_) => {}
    }
}

/// Cases per property: `PROPTEST_CASES`, else 2048 (about 4 s in all on 2 cores).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn jsonrpc_bytes(msg in prop::collection::vec(any::<u8>(), 0..200)) {
        answer_each(&msg);
    }

    #[test]
    fn jsonrpc_messages(msg in message()) {
        answer_each(&msg);
    }

    #[test]
    fn tool_arguments(
        tool in prop::sample::select(&[
            "terminal_execute", "terminal_job", "computer_file_read", "computer_file_write",
            "computer_file_edit", "computer_list", "computer_create", "computer_restart",
            "computer_factory_reset", "computer_delete", "nope",
        ][..]),
        arguments in json_value(),
    ) {
        // Refusals say something; a call that passes passes again (validation is pure).
        match parse_tool_call(&names(), tool, Some(&arguments)) {
            Err(e) => prop_assert!(!e.to_string().is_empty()),
            Ok(call) => {
                let again = parse_tool_call(&names(), tool, Some(&arguments)).ok();
                prop_assert_eq!(Some(format!("{call:?}")), again.map(|c| format!("{c:?}")));
            }
        }
    }

    #[test]
    fn executor_operations(
        method in prop::sample::select(&["GET", "POST", "DELETE", "PUT"][..]),
        segments in prop::collection::vec(
            prop_oneof![
                prop::sample::select(&[
                    "computers", "exec", "jobs", "files", "read", "write", "edit",
                    "restart", "factory-reset", "box-1", "job-1", "",
                ][..]).prop_map(str::to_owned),
                "[a-z0-9-]{0,10}",
            ],
            0..5,
        ),
        body in prop_oneof![
            json_value().prop_map(|v| v.to_string().into_bytes()),
            prop::collection::vec(any::<u8>(), 0..64),
        ],
    ) {
        let path = format!("/{}", segments.join("/"));
        if let Ok(op) = Op::decode(method, &path, &body) {
            let req = op.encode();
            let body = req.body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
            let back = Op::decode(req.method, &req.path, &body);
            prop_assert_eq!(back.as_ref().ok(), Some(&op), "{} {}", req.method, req.path);
        }
    }

    #[test]
    fn team_object_calls(
        team in prop::sample::select(WORDS),
        op in prop::sample::select(&[
            "claim", "claim_default", "get", "forget", "touch", "list", "session_open", "session_get",
            "session_default", "session_close", "job_put", "job_get", "job_done",
            "task_put", "task_get", "reboot",
        ][..]),
        fields in prop::collection::vec((key(), json_value()), 0..8),
    ) {
        use gateway::inventory::Call;
        let mut request: Map<String, Value> = fields.into_iter().collect();
        request.insert("op".into(), json!(op));
        let body = json!({"team": team, "request": request}).to_string();
        if let Ok(call) = Call::decode(body.as_bytes()) {
            prop_assert_eq!(Call::decode(call.encode().as_bytes()), Ok(call.clone()));
            prop_assert_eq!(call.request.name(), op);
        }
    }

    #[test]
    fn supervisor_frames(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        let mut r = Cursor::new(bytes);
        // Frames until the stream ends or breaks; never more frames than bytes.
        let mut n = 0;
        loop {
            match Frame::read_from(&mut r) {
                Ok(f) => {
                    n += 1;
                    prop_assert!(n <= 128);
                    // The JSON payloads the supervisor reads never panic it either.
                    let _ = serde_json::from_slice::<StartSpec>(&f.payload);
                    let _ = serde_json::from_slice::<JobControl>(&f.payload);
                    let _ = serde_json::from_slice::<FileControl>(&f.payload);
                }
                Err(FrameError::Closed | FrameError::Io(_)) => break,
                Err(e) => {
                    prop_assert!(!e.to_string().is_empty());
                    break;
                }
            }
        }
    }

    #[test]
    fn supervisor_frames_round_trip(
        kind in prop::sample::select(&[1u8, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23][..]),
        job in any::<u32>(),
        payload in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut wire = Vec::new();
        wire.extend_from_slice(&((5 + payload.len()) as u32).to_le_bytes());
        wire.push(kind);
        wire.extend_from_slice(&job.to_le_bytes());
        wire.extend_from_slice(&payload);
        let f = Frame::read_from(&mut Cursor::new(&wire)).expect("a valid frame");
        prop_assert_eq!(f.job, job);
        prop_assert_eq!(&f.payload, &payload);
        prop_assert_eq!(f.encode(), wire);
    }

    /// Network rules (SPEC §3.11): any text parses or is refused with a message, never a
    /// panic; a rule reads back from its canonical form; a narrowing that is granted lies
    /// inside the server's policy (every name and address it allows, the server allows).
    #[test]
    fn network_rules_and_narrowing(
        raw in prop::collection::vec(
            prop_oneof![
                "[a-z0-9.*:/\\[\\]_-]{0,24}",
                prop::sample::select(&[
                    "pypi.org", "*.npmjs.org", "github.com:22", "10.0.0.0/8", "10.1.2.3",
                    "::1", "fd00::/8", "*.cdn.npmjs.org", "npmjs.org", "a.pypi.org:443",
                ][..]).prop_map(str::to_owned),
            ],
            1..5,
        ),
        asked in prop::collection::vec(
            prop::sample::select(&[
                "pypi.org", "pypi.org:443", "pypi.org:22", "*.npmjs.org", "x.npmjs.org",
                "*.a.npmjs.org:80", "npmjs.org", "10.2.0.0/16", "10.0.0.0/7", "11.1.1.1",
                "github.com:22", "github.com",
            ][..]),
            1..4,
        ),
        probe in prop::sample::select(&[
            "pypi.org", "a.npmjs.org", "npmjs.org", "x.a.npmjs.org", "github.com", "10.2.3.4",
            "11.1.1.1", "example.com",
        ][..]),
        port in prop::sample::select(&[22u16, 80, 443, 8080][..]),
        arg in json_value(),
    ) {
        use shared::egress::{Policy, Rule};
        for r in &raw {
            match r.parse::<Rule>() {
                Ok(rule) => {
                    let again = rule.to_string().parse::<Rule>();
                    prop_assert_eq!(again.as_ref(), Ok(&rule), "{}", r);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
        let _ = Policy::of_argument(&arg);
        let server = match Policy::of_flags(true, &raw) {
            Ok(p) => p,
            Err(_) => return Ok(()),
        };
        let asked = Policy::allow(asked.iter().copied()).expect("valid rules");
        if let Ok(granted) = server.narrow(Some(&asked)) {
            prop_assert_eq!(&granted, &asked);
            if granted.allows_name(probe, port).is_ok() {
                prop_assert!(server.allows_name(probe, port).is_ok(), "{} {} {}", granted, probe, port);
            }
        }
    }
}

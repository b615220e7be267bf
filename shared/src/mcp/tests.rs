//! Unit tests of the dispatcher over an echoing [`ToolHost`]: both eras, `_meta` checks,
//! message parsing, tool-call validation, the dashboard resource, and a fuzz run.

use super::*;
use crate::result::structured_result;

struct Echo;
impl ToolHost for Echo {
    async fn call_tool(&self, call: Op, ctx: &CallContext) -> CallToolResult {
        structured_result(json!({ "call": format!("{call:?}"), "id": ctx.request_id }))
    }
}

fn dispatcher(lifecycle: bool) -> Dispatcher {
    Dispatcher::new(ServerConfig {
        name: "t".into(),
        version: "0".into(),
        names: ToolNames::new("terminal_execute", lifecycle),
        exec_description: "d".into(),
        instructions: None,
        dashboard_html: Some("<html></html>".into()),
        tasks: false,
    })
}

/// Runs one request; modern requests get the `_meta` every 2026-07-28 request carries.
fn run(d: &Dispatcher, era: Era, method: &str, mut params: Value) -> Value {
    if era == Era::Modern && params.get("_meta").is_none() {
        params["_meta"] =
            json!({META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {}});
    }
    let params = params_of(params);
    value(&futures_executor::block_on(d.request(
        &Echo,
        &era,
        RequestId::number(1),
        method,
        &params,
    )))
}

fn params_of(v: Value) -> Params {
    serde_json::from_value(v).unwrap()
}

fn value(r: &Response) -> Value {
    serde_json::to_value(r).unwrap()
}

#[test]
fn modern_requests_need_their_meta() {
    let d = dispatcher(false);
    for params in [
        json!({}),
        json!({"_meta": {}}),
        json!({"_meta": {META_PROTOCOL_VERSION: MODERN_VERSION}}),
        json!({"_meta": {META_CLIENT_CAPABILITIES: {}}}),
        json!({"_meta": {META_PROTOCOL_VERSION: 5, META_CLIENT_CAPABILITIES: {}}}),
    ] {
        let r = futures_executor::block_on(d.request(
            &Echo,
            &Era::Modern,
            RequestId::number(1),
            "tools/list",
            &params_of(params.clone()),
        ));
        assert_eq!(r.error_code(), Some(codes::INVALID_PARAMS), "{params}");
    }
    for removed in ["initialize", "ping", "logging/setLevel"] {
        let r = run(&d, Era::Modern, removed, json!({}));
        assert_eq!(r["error"]["code"], codes::METHOD_NOT_FOUND, "{removed}");
    }
    let r = run(
        &d,
        Era::Legacy(LATEST_LEGACY.into()),
        "logging/setLevel",
        json!({"level": "debug"}),
    );
    assert_eq!(r["result"], json!({}));
    let r = run(
        &d,
        Era::Legacy(LATEST_LEGACY.into()),
        "logging/setLevel",
        json!({"level": "loud"}),
    );
    assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
    let r = run(&d, Era::Modern, "resources/templates/list", json!({}));
    assert_eq!(r["result"]["cacheScope"], "public");
}

#[test]
fn parse_rejects_garbage() {
    for raw in [
        &b"{"[..],
        b"[]",
        b"3",
        b"{\"jsonrpc\":\"1.0\",\"method\":\"x\",\"id\":1}",
        b"{\"jsonrpc\":\"2.0\",\"id\":1}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"id\":{}}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":[1],\"id\":1}",
    ] {
        let err = parse_message(raw).unwrap_err();
        assert!(err.error_code().unwrap() <= -32600, "{err:?}");
    }
    assert_eq!(
        parse_message(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}").unwrap(),
        Incoming::Notification {
            method: "notifications/initialized".into(),
            params: Params::default()
        }
    );
    assert_eq!(
        parse_message(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}").unwrap(),
        Incoming::Response
    );
}

#[test]
fn initialize_echoes_known_versions() {
    let d = dispatcher(true);
    for v in LEGACY_VERSIONS {
        let r = run(
            &d,
            Era::Legacy((*v).into()),
            "initialize",
            json!({"protocolVersion": v}),
        );
        assert_eq!(r["result"]["protocolVersion"], *v);
    }
    let r = run(
        &d,
        Era::Legacy(LATEST_LEGACY.into()),
        "initialize",
        json!({"protocolVersion": "1999-01-01"}),
    );
    assert_eq!(r["result"]["protocolVersion"], LATEST_LEGACY);
    assert_eq!(
        r["result"]["capabilities"]["extensions"][UI_EXTENSION]["mimeTypes"][0],
        MCP_APP_MIME
    );
    let r = run(
        &dispatcher(false),
        Era::Legacy(LATEST_LEGACY.into()),
        "initialize",
        json!({}),
    );
    assert!(r["result"]["capabilities"].get("extensions").is_none());
}

#[test]
fn modern_results_carry_result_type_and_cache_fields() {
    let d = dispatcher(false);
    let r = run(&d, Era::Modern, "server/discover", json!({}));
    assert_eq!(r["result"]["resultType"], "complete");
    assert!(
        r["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!(MODERN_VERSION))
    );
    assert_eq!(r["result"]["_meta"][META_SERVER_INFO]["name"], "t");
    let r = run(&d, Era::Modern, "tools/list", json!({}));
    assert_eq!(r["result"]["cacheScope"], "public");
    assert!(r["result"]["ttlMs"].is_u64());
    let r = run(
        &d,
        Era::Legacy(LATEST_LEGACY.into()),
        "tools/list",
        json!({}),
    );
    assert!(r["result"].get("resultType").is_none());
    assert!(r["result"].get("ttlMs").is_none());
}

#[test]
fn modern_version_mismatch_is_refused() {
    let d = dispatcher(false);
    let r = run(
        &d,
        Era::Modern,
        "tools/list",
        json!({"_meta": {META_PROTOCOL_VERSION: "2030-01-01"}}),
    );
    assert_eq!(r["error"]["code"], codes::UNSUPPORTED_VERSION);
    assert_eq!(r["error"]["data"]["requested"], "2030-01-01");
}

#[test]
fn tool_calls_validate_before_the_host() {
    let d = dispatcher(false);
    let r = run(
        &d,
        Era::Modern,
        "tools/call",
        json!({"name": "terminal_execute", "arguments": {}}),
    );
    assert_eq!(r["result"]["isError"], true);
    assert!(r["result"].get("structuredContent").is_none());
    let r = run(
        &d,
        Era::Modern,
        "tools/call",
        json!({"name": "terminal_execute", "arguments": {"command": "ls"}}),
    );
    assert_eq!(r["result"]["isError"], false);
    assert_eq!(r["result"]["resultType"], "complete");
    let r = run(
        &d,
        Era::Modern,
        "tools/call",
        json!({"name": "computer_list"}),
    );
    assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
    let r = run(&d, Era::Modern, "tools/call", json!({}));
    assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
    let r = run(&d, Era::Modern, "nope/nope", json!({}));
    assert_eq!(r["error"]["code"], codes::METHOD_NOT_FOUND);
}

#[test]
fn dashboard_resource() {
    let d = dispatcher(true);
    let r = run(
        &d,
        Era::Legacy(LATEST_LEGACY.into()),
        "resources/read",
        json!({"uri": DASHBOARD_URI}),
    );
    assert_eq!(r["result"]["contents"][0]["mimeType"], MCP_APP_MIME);
    assert_eq!(
        r["result"]["contents"][0]["_meta"],
        json!({"ui": {"csp": {}, "prefersBorder": true}})
    );
    let r = run(
        &d,
        Era::Legacy(LATEST_LEGACY.into()),
        "resources/read",
        json!({"uri": "ui://x"}),
    );
    assert_eq!(r["error"]["code"], codes::RESOURCE_NOT_FOUND_LEGACY);
    let r = run(&d, Era::Modern, "resources/read", json!({"uri": "ui://x"}));
    assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
}

/// Structured fuzzing: random bytes and byte-level mutations of valid messages never
/// panic the parser or the dispatcher, and every request gets exactly one response.
#[test]
fn fuzz_parser_and_dispatcher() {
    let seeds: Vec<Vec<u8>> = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}),
        json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "terminal_execute",
            "arguments": {"command": "ls", "timeout": 5, "computer_id": "a-b", "stdin": "x"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "computer_create",
            "arguments": {"computer_id": "x", "temporary": false}, "_meta": {META_PROTOCOL_VERSION: MODERN_VERSION}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": DASHBOARD_URI}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
    ]
    .iter()
    .map(|v| v.to_string().into_bytes())
    .collect();
    let d = dispatcher(true);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alphabet = b"{}[]\":,0123456789-.eE+truefalsnl \\u\x00\xff\xc3\xa9abc";
    for i in 0..3000 {
        let mut msg = if i % 4 == 0 {
            (0..(next() % 64))
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect()
        } else {
            seeds[(next() % seeds.len() as u64) as usize].clone()
        };
        for _ in 0..(next() % 4) {
            if msg.is_empty() {
                break;
            }
            let at = (next() % msg.len() as u64) as usize;
            match next() % 3 {
                0 => msg[at] = alphabet[(next() % alphabet.len() as u64) as usize],
                1 => {
                    msg.remove(at);
                }
                _ => msg.insert(at, alphabet[(next() % alphabet.len() as u64) as usize]),
            }
        }
        match parse_message(&msg) {
            Err(resp) => assert!(resp.error_code().is_some()),
            Ok(Incoming::Request { id, method, params }) => {
                for era in [Era::Modern, Era::Legacy(LATEST_LEGACY.into())] {
                    let r = futures_executor::block_on(d.request(
                        &Echo,
                        &era,
                        id.clone(),
                        &method,
                        &params,
                    ));
                    assert_eq!(r.id.as_ref(), Some(&id));
                    let r = value(&r);
                    assert!(r.get("result").is_some() ^ r.get("error").is_some(), "{r}");
                }
            }
            Ok(_) => {}
        }
    }
}

#[test]
fn ids_are_echoed_exactly() {
    for sent in [
        "18446744073709551617",
        "-18446744073709551617",
        "1.50",
        "1e2",
        "123456789012345678901234567890",
        "7",
        "-3",
        "1.5",
        "\"a\"",
    ] {
        let msg = format!("{{\"jsonrpc\":\"2.0\",\"id\":{sent},\"method\":\"ping\"}}");
        let Incoming::Request { id, .. } = parse_message(msg.as_bytes()).unwrap() else {
            panic!("not a request: {msg}");
        };
        let resp = Response::success(id.clone(), json!({})).to_json();
        assert_eq!(
            resp,
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{sent},\"result\":{{}}}}"),
            "{sent}"
        );
        let err = Response::error(Some(id), codes::INTERNAL_ERROR, "x").to_json();
        assert!(err.contains(&format!("\"id\":{sent},")), "{err}");
    }
    // A cancellation names the request by the same key as the request itself.
    let req = parse_message(b"{\"jsonrpc\":\"2.0\",\"id\":18446744073709551617,\"method\":\"x\"}")
        .unwrap();
    let cancel = parse_message(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":18446744073709551617}}",
    )
    .unwrap();
    let other = parse_message(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":18446744073709551618}}",
    )
    .unwrap();
    let (Incoming::Request { id, .. }, Incoming::Notification { params: p, .. }) = (req, cancel)
    else {
        panic!("wrong kinds");
    };
    assert_eq!(p.request_id, Field::Is(id.clone()));
    let Incoming::Notification { params: q, .. } = other else {
        panic!("not a notification");
    };
    assert_ne!(q.request_id, Field::Is(id));
    // An object id is refused.
    let object = b"{\"jsonrpc\":\"2.0\",\"id\":{\"n\":\"1\"},\"method\":\"x\"}";
    assert!(parse_message(object).is_err());
}

/// A host that answers every task-capable exec with a task and knows task `job-1`.
struct Tasker;

/// Task `job-1`, working.
fn job_1() -> tasks::Task {
    let first = crate::jobs::JobOutput {
        job_id: "job-1".into(),
        running: true,
        ..Default::default()
    };
    tasks::Task::new("box", true, 1024, 0, first)
}
impl ToolHost for Tasker {
    async fn call_tool(&self, call: Op, _ctx: &CallContext) -> CallToolResult {
        structured_result(json!({ "plain": format!("{call:?}") }))
    }
    async fn call_tool_as_task(&self, _call: Op, _ctx: &CallContext) -> TaskAnswer {
        TaskAnswer::Task(job_1().created())
    }
    async fn task(
        &self,
        method: TaskMethod,
        task_id: &str,
        _ctx: &CallContext,
    ) -> Result<tasks::TaskReply, tasks::TaskError> {
        match (method, task_id) {
            (TaskMethod::Get, "job-1") => Ok(tasks::TaskReply::Task(Box::new(job_1().detailed()))),
            (_, "job-1") => Ok(tasks::TaskReply::Done(tasks::Done {})),
            (_, other) => Err(tasks::unknown_task(other)),
        }
    }
}

#[test]
fn tasks_are_routed_only_where_served_and_declared() {
    let names = ToolNames::with_groups(
        "terminal_execute",
        crate::catalogue::Groups {
            jobs: true,
            ..Default::default()
        },
    );
    let config = |tasks| ServerConfig {
        name: "t".into(),
        version: "0".into(),
        names: names.clone(),
        exec_description: "d".into(),
        instructions: None,
        dashboard_html: None,
        tasks,
    };
    let on = Dispatcher::new(config(true));
    let off = Dispatcher::new(config(false));
    let caps = |ext: bool| {
        let extensions = if ext {
            json!({ tasks::EXTENSION: {} })
        } else {
            json!({})
        };
        json!({META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {"extensions": extensions}})
    };
    let req = |d: &Dispatcher, era: Era, method: &str, params: Value| {
        value(&futures_executor::block_on(d.request(
            &Tasker,
            &era,
            RequestId::number(1),
            method,
            &params_of(params),
        )))
    };
    let exec = |ext| json!({"name": "terminal_execute", "arguments": {"command": "x"}, "_meta": caps(ext)});
    // Advertised where served.
    let d = req(
        &on,
        Era::Modern,
        "server/discover",
        json!({"_meta": caps(false)}),
    );
    assert_eq!(
        d["result"]["capabilities"]["extensions"][tasks::EXTENSION],
        json!({})
    );
    let d = req(
        &off,
        Era::Modern,
        "server/discover",
        json!({"_meta": caps(false)}),
    );
    assert!(
        d["result"]["capabilities"].get("extensions").is_none(),
        "{d}"
    );
    let i = req(
        &on,
        Era::Legacy(LATEST_LEGACY.into()),
        "initialize",
        json!({}),
    );
    assert!(
        i["result"]["capabilities"].get("extensions").is_none(),
        "{i}"
    );
    // A task only for a declaring client of a serving server, in 2026-07-28.
    let r = req(&on, Era::Modern, "tools/call", exec(true));
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    assert_eq!(r["result"]["_meta"][META_SERVER_INFO]["name"], "t");
    for (d, ext) in [(&on, false), (&off, true)] {
        let r = req(d, Era::Modern, "tools/call", exec(ext));
        assert_eq!(r["result"]["resultType"], "complete", "{r}");
        assert!(r["result"]["structuredContent"]["plain"].is_string());
    }
    let legacy = Era::Legacy(LATEST_LEGACY.into());
    let r = req(&on, legacy.clone(), "tools/call", exec(true));
    assert!(r["result"]["structuredContent"]["plain"].is_string(), "{r}");
    // tasks/*: answered, refused with a JSON-RPC error, or not a method at all.
    let get = |id: &str| json!({"taskId": id, "_meta": caps(true)});
    let r = req(&on, Era::Modern, "tasks/get", get("job-1"));
    assert_eq!(
        (
            r["result"]["status"].clone(),
            r["result"]["resultType"].clone()
        ),
        (json!("working"), json!("complete"))
    );
    let r = req(&on, Era::Modern, "tasks/cancel", get("job-1"));
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let r = req(&on, Era::Modern, "tasks/get", get("job-2"));
    assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
    assert_eq!(r["error"]["data"]["taskId"], "job-2");
    let r = req(&on, Era::Modern, "tasks/get", json!({"_meta": caps(true)}));
    assert!(
        r["error"]["message"].as_str().unwrap().contains("taskId"),
        "{r}"
    );
    for (d, era) in [(&off, Era::Modern), (&on, legacy)] {
        let r = req(d, era, "tasks/get", get("job-1"));
        assert_eq!(r["error"]["code"], codes::METHOD_NOT_FOUND, "{r}");
    }
}

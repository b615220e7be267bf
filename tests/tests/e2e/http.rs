//! Streamable HTTP: both eras on `/mcp`, sessions, auth, Host/Origin, service routes.

use std::time::Duration;

use serde_json::{Value, json};
use tests::*;

/// The `_meta` every 2026-07-28 request carries.
fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}})
}

fn raw() -> reqwest::Client {
    reqwest::Client::new()
}

/// A raw stateless (2026-07-28) `tools/call` of `terminal_execute`, accepting SSE.
async fn stateless_tool_call(url: &str, body: &Value) -> reqwest::Result<reqwest::Response> {
    raw()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "terminal_execute")
        .body(body.to_string())
        .send()
        .await
}

async fn post(
    s: &HttpServer,
    headers: &[(&str, &str)],
    body: Value,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Value)> {
    let mut req = raw()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.body(body.to_string()).send().await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    Ok((
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

#[tokio::test]
async fn issue_2_http_legacy_session_and_delete() -> anyhow::Result<()> {
    let t = tag("httplegacy");
    let s = HttpServer::start(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let c = s.legacy_client(None).await?;
    assert_eq!(c.list_all_tools().await?.len(), 7);
    let r = exec(&c, json!({"command": "echo over-http"})).await?;
    assert_eq!(r["stdout"], "over-http\n");
    let again = exec(&c, json!({"command": "true"})).await?;
    assert_eq!(
        again["computer_id"], r["computer_id"],
        "the session keeps its default computer"
    );
    assert_eq!(containers(&t).await?.len(), 1);
    c.cancel().await?; // rmcp sends DELETE for the session
    wait_for_count(&t, 0, Duration::from_secs(15)).await?;
    let status = s.terminate().await?;
    assert!(status.success());
    Ok(())
}

#[tokio::test]
async fn issue_2_http_modern_stateless() -> anyhow::Result<()> {
    let t = tag("httpmodern");
    let opts = ServerOpts::lifecycle().arg("--session-timeout=2");
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let c = s.modern_client(None).await?;
    assert_eq!(c.list_all_tools().await?.len(), 7);
    let id = format!("{t}-m");
    let r = exec(&c, json!({"command": "echo a > /tmp/a", "computer_id": id})).await?;
    assert_eq!(r["computer_id"], id.as_str());
    let r = exec(&c, json!({"command": "cat /tmp/a", "computer_id": id})).await?;
    assert_eq!(r["stdout"], "a\n");
    // Without an id there is no session: the default is the principal's (issue 45), made
    // by the first such call (which says `created`) and found again by the next ones.
    let r = exec(&c, json!({"command": "echo kept > /tmp/k"})).await?;
    assert_ne!(r["computer_id"], id.as_str());
    assert_eq!(r["created"], true, "{r}");
    let default = r["computer_id"].clone();
    let other = s.modern_client(None).await?;
    let r = exec(&other, json!({"command": "cat /tmp/k"})).await?;
    assert_eq!(
        (&r["computer_id"], &r["stdout"]),
        (&default, &json!("kept\n"))
    );
    assert_eq!(r.get("created"), None, "{r}");
    other.cancel().await?;
    // Unused stateless temporaries expire after --session-timeout.
    wait_for_count(&t, 0, Duration::from_secs(15)).await?;
    c.cancel().await?;
    s.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_http_protocol_rules() -> anyhow::Result<()> {
    let t = tag("httprules");
    let s = HttpServer::start(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    // Service routes.
    let root: Value = raw().get(&s.base).send().await?.json().await?;
    assert_eq!(root["mcp_endpoint"], "/mcp");
    assert_eq!(root["health"], "/healthz");
    assert_eq!(root["dashboard_resource"], "ui://kilntainers/computers");
    let health: Value = raw()
        .get(format!("{}/healthz", s.base))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health, json!({"status": "ok"}));
    // Legacy initialize always issues a session id and echoes each released revision.
    for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let (status, h, body) = post(&s, &[], json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": v, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await?;
        assert_eq!(status, 200);
        assert!(h.get("mcp-session-id").is_some());
        assert_eq!(body["result"]["protocolVersion"], v);
    }
    // Unknown session → 404; no session and no version header → 400.
    let list =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta()}});
    let (status, _, _) = post(&s, &[("mcp-session-id", "nope")], list.clone()).await?;
    assert_eq!(status, 404);
    let (status, _, _) = post(&s, &[], list.clone()).await?;
    assert_eq!(status, 400);
    // Modern: headers must match the body.
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let (status, _, body) = post(&s, &modern, list.clone()).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["resultType"], "complete");
    assert_eq!(body["result"]["cacheScope"], "public");
    let (status, _, body) = post(
        &s,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
        ],
        list.clone(),
    )
    .await?;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], -32020);
    let (status, _, body) = post(
        &s,
        &[
            ("mcp-protocol-version", "2031-01-01"),
            ("mcp-method", "tools/list"),
        ],
        list.clone(),
    )
    .await?;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], -32022);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "computer_list", "arguments": {}, "_meta": meta()}});
    let (status, _, _) = post(
        &s,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "other"),
        ],
        call.clone(),
    )
    .await?;
    assert_eq!(status, 400);
    let (status, _, body) = post(
        &s,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "computer_list"),
        ],
        call,
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = post(
        &s,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "nope/x"),
        ],
        json!({"jsonrpc": "2.0", "id": 4, "method": "nope/x", "params": {"_meta": meta()}}),
    )
    .await?;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], -32601);
    // A modern request must carry its _meta; methods 2026-07-28 removed are not found.
    let (status, _, body) = post(
        &s,
        &modern,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
    )
    .await?;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], -32602);
    for removed in ["initialize", "ping"] {
        let (status, _, body) = post(
            &s,
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", removed),
            ],
            json!({"jsonrpc": "2.0", "id": 6, "method": removed, "params": {"_meta": meta()}}),
        )
        .await?;
        assert_eq!(status, 404, "{removed}");
        assert_eq!(body["error"]["code"], -32601);
    }
    // Malformed JSON.
    let resp = raw()
        .post(&s.url)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await?;
    assert_eq!(resp.status().as_u16(), 400);
    // GET opens no stream here.
    assert_eq!(raw().get(&s.url).send().await?.status().as_u16(), 405);
    // DNS rebinding: a foreign Host or Origin is refused.
    let (status, _, _) = post(&s, &[("host", "evil.example:8435")], list.clone()).await?;
    assert_eq!(status, 403);
    let (status, _, _) = post(&s, &[("origin", "http://evil.example")], list.clone()).await?;
    assert_eq!(status, 403);
    let (status, _, _) = post(
        &s,
        &[
            ("origin", "http://localhost:3000"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ],
        list,
    )
    .await?;
    assert_eq!(status, 200);
    s.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_http_bearer_token() -> anyhow::Result<()> {
    let t = tag("httpauth");
    let mut opts = ServerOpts::default();
    opts.env
        .push(("KILNTAINERS_AUTH_TOKEN".into(), "s3cret-token".into()));
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}});
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret-toke"),
        Some("s3cret-token"),
    ] {
        let mut h = modern.to_vec();
        if let Some(a) = auth {
            h.push(("authorization", a));
        }
        let (status, headers, body) = post(&s, &h, list.clone()).await?;
        assert_eq!(status, 401, "{auth:?}");
        assert_eq!(body, json!({"error": "unauthorized"}));
        assert!(
            headers
                .get("www-authenticate")
                .unwrap()
                .to_str()?
                .starts_with("Bearer")
        );
    }
    let mut h = modern.to_vec();
    h.push(("authorization", "Bearer s3cret-token"));
    let (status, _, _) = post(&s, &h, list).await?;
    assert_eq!(status, 200);
    // Health stays open for probes.
    assert_eq!(
        raw()
            .get(format!("{}/healthz", s.base))
            .send()
            .await?
            .status()
            .as_u16(),
        200
    );
    let c = s.legacy_client(Some("s3cret-token")).await?;
    let r = exec(&c, json!({"command": "echo authed"})).await?;
    assert_eq!(r["stdout"], "authed\n");
    assert!(s.legacy_client(Some("nope")).await.is_err());
    c.cancel().await?;
    s.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_2_http_idle_session_expires() -> anyhow::Result<()> {
    let t = tag("httpidle");
    let opts = ServerOpts::default().arg("--session-timeout=2");
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let (status, h, _) = post(&s, &[], json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await?;
    assert_eq!(status, 200);
    let sid = h.get("mcp-session-id").unwrap().to_str()?.to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "terminal_execute", "arguments": {"command": "true"}}});
    let (status, _, body) = post(
        &s,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        call.clone(),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(containers(&t).await?.len(), 1);
    wait_for_count(&t, 0, Duration::from_secs(15)).await?;
    let (status, _, _) = post(&s, &[("mcp-session-id", &sid)], call).await?;
    assert_eq!(status, 404, "an expired session is gone");
    s.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_http_dropped_request_kills_the_command() -> anyhow::Result<()> {
    let t = tag("httpdrop");
    let s = HttpServer::start(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let id = format!("{t}-d");
    let body = |cmd: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "terminal_execute",
            "arguments": {"command": cmd, "computer_id": id}, "_meta": meta()}})
    };
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "terminal_execute"),
    ];
    let (status, _, _) = post(&s, &modern, body("true")).await?;
    assert_eq!(status, 200);
    // The client gives up after a second: closing the connection cancels the call.
    let slow = post(&s, &modern, body("sleep 1000 & sleep 1000"));
    assert!(
        tokio::time::timeout(Duration::from_millis(1000), slow)
            .await
            .is_err()
    );
    let count = COUNT_SLEEP_1000;
    let mut left = Value::Null;
    for _ in 0..40 {
        let (_, _, r) = post(&s, &modern, body(count)).await?;
        left = r["result"]["structuredContent"]["stdout"].clone();
        if left == "0\n" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, "0\n", "the command outlived its closed request");
    s.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

/// The `data:` payloads of an SSE body.
fn sse_messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

#[tokio::test]
async fn issue_2_http_progress_streams_as_sse() -> anyhow::Result<()> {
    let t = tag("httpsse");
    let s = HttpServer::start(&t, &state_dir(&t), &ServerOpts::default()).await?;
    // Legacy session.
    let (_, h, _) = post(&s, &[], json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await?;
    let sid = h.get("mcp-session-id").unwrap().to_str()?.to_owned();
    let call = |id: u32, token: &str, meta: Value| {
        let mut m = meta;
        m["progressToken"] = json!(token);
        // Long enough to outlast the grace window after its first notification: only then
        // is the answer a stream (issue 45).
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "terminal_execute",
            "arguments": {"command": "echo streamed; sleep 3"}, "_meta": m}})
    };
    let resp = raw()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .body(call(2, "p-legacy", json!({})).to_string())
        .send()
        .await?;
    assert!(
        resp.headers()["content-type"]
            .to_str()?
            .starts_with("text/event-stream")
    );
    let msgs = sse_messages(&resp.text().await?);
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{msgs:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "p-legacy")
    );
    let last = msgs.last().unwrap();
    assert_eq!(last["id"], 2);
    assert_eq!(last["result"]["structuredContent"]["stdout"], "streamed\n");
    // Stateless: the same, for a new computer named in the call.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "terminal_execute",
        "arguments": {"command": "echo modern; sleep 3", "computer_id": format!("{t}-m")},
        "_meta": {"progressToken": 7, "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let resp = stateless_tool_call(&s.url, &body).await?;
    let msgs = sse_messages(&resp.text().await?);
    assert!(
        msgs.iter()
            .any(|m| m["method"] == "notifications/progress" && m["params"]["progressToken"] == 7),
        "{msgs:?}"
    );
    assert_eq!(
        msgs.last().unwrap()["result"]["structuredContent"]["stdout"],
        "modern\n"
    );
    s.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_2_stateless_computer_is_not_reaped_while_a_command_runs() -> anyhow::Result<()> {
    let t = tag("httpbusy");
    let s = HttpServer::start(
        &t,
        &state_dir(&t),
        &ServerOpts::default().arg("--session-timeout=1"),
    )
    .await?;
    let c = s.modern_client(None).await?;
    let id = format!("{t}-busy");
    // Runs for three session timeouts: idleness must not count while it runs.
    let r = exec(
        &c,
        json!({"command": "sleep 3; echo finished", "computer_id": id}),
    )
    .await?;
    assert_eq!(r["stdout"], "finished\n");
    assert_eq!(r["exit_code"], 0);
    // Once unused, it does expire (the window allows for a loaded engine).
    wait_for_count(&t, 0, Duration::from_secs(30)).await?;
    c.cancel().await?;
    s.terminate().await?;
    Ok(())
}

/// Issue 45: a result over 1 MiB reaches a client that asked for progress. The newest
/// Python clients cap one SSE event at 1 MiB; a call whose result comes within the grace
/// window is answered as plain JSON, in both eras, so nothing is cut (this output has no
/// line end, so it sends no progress at all; a call that ends quickly drops what it sent).
#[tokio::test]
async fn issue_45_http_big_results_with_progress_come_as_json() -> anyhow::Result<()> {
    let t = tag("httpbigprog");
    let s = HttpServer::start(&t, &state_dir(&t), &wasm_opts()).await?;
    // 1.9 MB of output: under the 2 MiB output limit, about 2 MB once JSON-escaped.
    let command =
        "i=0; while [ $i -lt 19 ]; do head -c 100000 /dev/zero | tr '\\0' a; i=$((i+1)); done";
    let check = |resp: &reqwest::Response| {
        let ct = resp.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        assert!(ct.starts_with("application/json"), "content-type {ct}");
    };
    // Stateless, the progress token in `_meta`.
    let mut m = meta();
    m["progressToken"] = json!("big");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "terminal_execute",
        "arguments": {"command": command}, "_meta": m}});
    let resp = stateless_tool_call(&s.url, &body).await?;
    check(&resp);
    let v: Value = serde_json::from_str(&resp.text().await?)?;
    let out = &v["result"]["structuredContent"];
    assert_eq!(
        out["stdout"].as_str().map(str::len),
        Some(1_900_000),
        "{}",
        out["stderr"]
    );
    assert_eq!(out.get("truncated"), None);
    // A legacy session, the same.
    let (_, h, _) = post(&s, &[], json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await?;
    let sid = h.get("mcp-session-id").unwrap().to_str()?.to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "terminal_execute",
        "arguments": {"command": command}, "_meta": {"progressToken": "big"}}});
    let resp = raw()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
        .send()
        .await?;
    check(&resp);
    let v: Value = serde_json::from_str(&resp.text().await?)?;
    assert_eq!(v["id"], 2);
    assert_eq!(
        v["result"]["structuredContent"]["stdout"]
            .as_str()
            .map(str::len),
        Some(1_900_000)
    );
    s.terminate().await?;
    Ok(())
}

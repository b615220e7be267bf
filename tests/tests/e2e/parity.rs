//! Issue 13: the local HTTP server and the gateway behave alike. One table of Streamable
//! HTTP cases runs against both: the local server (`--transport http`, a token, lifecycle
//! tools) and the gateway under `wrangler dev` (static token) in front of a Docker executor.
//! A case that passes on one and fails on the other is a bug of the one core.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::{Value, json};
use tests::*;

const TOKEN: &str = "parity-token-0123456789abcdef";
const EXECUTOR_SECRET: &str = "parity-executor-secret-0123456789abcdef";

/// One server under test.
struct Target {
    name: &'static str,
    url: String,
    local: Option<HttpServer>,
    gateway: Option<Gateway>,
}

impl Target {
    async fn legacy(&self) -> anyhow::Result<Client> {
        match (&self.local, &self.gateway) {
            (Some(s), _) => s.legacy_client(Some(TOKEN)).await,
            (_, Some(g)) => g.legacy_client(TOKEN).await,
            _ => anyhow::bail!("no server"),
        }
    }

    async fn modern(&self) -> anyhow::Result<Client> {
        match (&self.local, &self.gateway) {
            (Some(s), _) => s.modern_client(Some(TOKEN)).await,
            (_, Some(g)) => g.modern_client(TOKEN).await,
            _ => anyhow::bail!("no server"),
        }
    }
}

type CaseFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Value>> + 'a>>;
/// A case: what it returns must be the same on both servers.
type Case = for<'a> fn(&'a Target, &'a str) -> CaseFuture<'a>;

/// `tools/list` with a given `Authorization` header, stateless.
async fn list_tools_with(url: &str, authorization: &str) -> anyhow::Result<u16> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .header("authorization", authorization)
        .body(body.to_string())
        .send()
        .await?;
    Ok(r.status().as_u16())
}

/// The auth scheme is case-insensitive (RFC 7235): `bearer`, `BEARER`, `Bearer`.
fn bearer_scheme_any_case<'a>(t: &'a Target, _tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let mut seen = Vec::new();
        for scheme in ["Bearer", "bearer", "BEARER", "Basic"] {
            let status = list_tools_with(&t.url, &format!("{scheme} {TOKEN}")).await?;
            seen.push(status);
        }
        anyhow::ensure!(seen == [200, 200, 200, 401], "statuses {seen:?}");
        Ok(json!(seen))
    })
}

/// Deleting the session's default computer, then running a command without an id, makes
/// a new default (not the deleted id again), which then stays the default.
fn deleted_default_is_replaced<'a>(t: &'a Target, _tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let c = t.legacy().await?;
        let first = exec(&c, json!({"command": "echo one"})).await?;
        let first_id = first["computer_id"].as_str().unwrap_or_default().to_owned();
        let r = call(&c, "computer_delete", json!({"computer_id": first_id})).await?;
        anyhow::ensure!(r.is_error == Some(false), "delete: {:?}", r.content);
        let second = exec(&c, json!({"command": "echo two"})).await?;
        let second_id = second["computer_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let third = exec(&c, json!({"command": "echo three"})).await?;
        let r = call(&c, "computer_delete", json!({"computer_id": second_id})).await?;
        anyhow::ensure!(r.is_error == Some(false), "delete: {:?}", r.content);
        anyhow::ensure!(
            second_id != first_id,
            "the deleted default {first_id} came back"
        );
        anyhow::ensure!(
            third["computer_id"] == json!(second_id),
            "the new default moved"
        );
        Ok(json!({
            "new_default": second_id != first_id,
            "default_kept": third["computer_id"] == json!(second_id),
            "outputs": [first["stdout"], second["stdout"], third["stdout"]],
        }))
    })
}

/// The longest valid id (63 characters) works, and the computer's hostname is that id.
fn longest_id_is_its_hostname<'a>(t: &'a Target, tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let c = t.modern().await?;
        let id: String = format!("{tag}-{}", "x".repeat(63))
            .chars()
            .take(63)
            .collect();
        let r = exec(&c, json!({"command": "hostname", "computer_id": id})).await?;
        let same_id = r["computer_id"] == json!(id);
        let hostname_is_id = r["stdout"].as_str() == Some(&format!("{id}\n"));
        let r = call(&c, "computer_delete", json!({"computer_id": id})).await?;
        anyhow::ensure!(same_id && hostname_is_id, "{id}: {r:?}");
        Ok(json!({"same_id": same_id, "hostname_is_id": hostname_is_id,
                  "deleted": r.structured_content.map(|v| v["deleted"].clone())}))
    })
}

/// Attaching to a permanent computer as temporary is refused with the same words.
fn temporary_mismatch_is_refused_alike<'a>(t: &'a Target, tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let c = t.modern().await?;
        let id = format!("{tag}-keep");
        let made = call(
            &c,
            "computer_create",
            json!({"computer_id": id, "temporary": false}),
        )
        .await?;
        let refused = call(
            &c,
            "terminal_execute",
            json!({"command": "true", "computer_id": id, "temporary": true}),
        )
        .await?;
        let missing = call(
            &c,
            "computer_restart",
            json!({"computer_id": format!("{tag}-none")}),
        )
        .await?;
        call(&c, "computer_delete", json!({"computer_id": id})).await?;
        anyhow::ensure!(
            made.is_error == Some(false)
                && refused.is_error == Some(true)
                && missing.is_error == Some(true),
            "{made:?} {refused:?} {missing:?}"
        );
        Ok(json!({
            "made": made.is_error,
            "refused": [refused.is_error, text(&refused).replace(&id, "ID")],
            "missing": [missing.is_error, missing.structured_content.map(|v| v["error"].is_string())],
        }))
    })
}

/// The `/mcp` state machine's refusals (`shared::transport::route`): other methods, DELETE
/// without or with an unknown session, a message to an unknown session, a stateless
/// request without its version header. Status, `Allow`, and JSON-RPC error code.
fn transport_refusals_alike<'a>(t: &'a Target, _tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let http = reqwest::Client::new();
        let auth = format!("Bearer {TOKEN}");
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        let mut seen = Vec::new();
        let requests = [
            ("GET", None, None),
            ("PUT", None, None),
            ("DELETE", None, None),
            ("DELETE", Some("no-such-session"), None),
            ("POST", Some("no-such-session"), Some(list.clone())),
            ("POST", None, Some(list.clone())),
        ];
        for (method, sid, body) in requests {
            let mut r = http
                .request(method.parse()?, &t.url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if let Some(sid) = sid {
                r = r.header("mcp-session-id", sid);
            }
            if let Some(body) = body {
                r = r.body(body);
            }
            let r = r.send().await?;
            let status = r.status().as_u16();
            let allow = r
                .headers()
                .get("allow")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let code = body["error"]["code"].clone();
            seen.push(json!([method, sid.is_some(), status, allow, code]));
        }
        Ok(json!(seen))
    })
}

/// Issue 45: inside a legacy session, an `MCP-Protocol-Version` this server does not
/// speak is a 400 (unsupported version); a session revision, or none, is answered.
fn session_version_header_alike<'a>(t: &'a Target, _tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let http = reqwest::Client::new();
        let auth = format!("Bearer {TOKEN}");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "parity", "version": "1"}}});
        let r = http
            .post(&t.url)
            .header("authorization", &auth)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init.to_string())
            .send()
            .await?;
        let sid = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        anyhow::ensure!(!sid.is_empty(), "no session id");
        let mut seen = Vec::new();
        for version in [
            Some("2025-06-18"),
            None,
            Some("1999-01-01"),
            Some("garbage"),
        ] {
            let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
            let mut r = http
                .post(&t.url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &sid);
            if let Some(v) = version {
                r = r.header("mcp-protocol-version", v);
            }
            let r = r.body(list.to_string()).send().await?;
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            seen.push(json!([version, status, body["error"]["code"]]));
        }
        let statuses: Vec<&Value> = seen.iter().map(|s| &s[1]).collect();
        anyhow::ensure!(
            statuses == [&json!(200), &json!(200), &json!(400), &json!(400)],
            "{seen:?}"
        );
        Ok(json!(seen))
    })
}

/// Issue 45: without sessions (2026-07-28) the default computer is the principal's: a
/// second client of the same token that omits `computer_id` finds the first one's files,
/// and only the call that made the computer says `created`.
fn stateless_default_is_the_principals<'a>(t: &'a Target, _tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let first = t.modern().await?;
        let a = exec(&first, json!({"command": "echo kept > /tmp/parity-kept"})).await?;
        let second = t.modern().await?;
        let b = exec(&second, json!({"command": "cat /tmp/parity-kept"})).await?;
        let same = a["computer_id"] == b["computer_id"];
        anyhow::ensure!(same, "{a} then {b}");
        let id = a["computer_id"].clone();
        let r = call(&first, "computer_delete", json!({"computer_id": id})).await?;
        anyhow::ensure!(r.is_error == Some(false), "delete: {:?}", r.content);
        let c = exec(&second, json!({"command": "true"})).await?;
        first.cancel().await?;
        second.cancel().await?;
        Ok(json!({
            "same_computer": same,
            "files_kept": b["stdout"],
            "created": [a.get("created"), b.get("created"), c.get("created")],
            "new_after_delete": c["computer_id"] != id,
        }))
    })
}

/// Issue 45: a 2025-03-26 session takes JSON-RPC batches (the one revision that has
/// them): one JSON array of the requests' responses, in order; a later revision's session
/// refuses a batch with 400.
fn batches_in_2025_03_26_sessions<'a>(t: &'a Target, _tag: &'a str) -> CaseFuture<'a> {
    Box::pin(async move {
        let http = reqwest::Client::new();
        let auth = format!("Bearer {TOKEN}");
        let post = |sid: Option<&str>, body: Value| {
            let mut r = http
                .post(&t.url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if let Some(sid) = sid {
                r = r.header("mcp-session-id", sid);
            }
            r.body(body.to_string()).send()
        };
        let mut seen = Vec::new();
        for version in ["2025-03-26", "2025-06-18"] {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "parity", "version": "1"}}});
            let r = post(None, init).await?;
            let sid = r
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let r = post(Some(&sid), Value::from(batch_fixture())).await?;
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let summary = match batch_summary(&body) {
                Some(items) => json!(items),
                None => json!(body["error"]["code"]),
            };
            seen.push(json!([version, status, summary]));
        }
        anyhow::ensure!(
            seen[0][1] == 200 && seen[1][1] == 400,
            "a 2025-03-26 batch is answered, a later one refused: {seen:?}"
        );
        Ok(json!(seen))
    })
}

const CASES: &[(&str, Case)] = &[
    (
        "batches in 2025-03-26 sessions",
        batches_in_2025_03_26_sessions,
    ),
    (
        "stateless default is the principal's",
        stateless_default_is_the_principals,
    ),
    ("session version header alike", session_version_header_alike),
    ("transport refusals alike", transport_refusals_alike),
    ("bearer scheme in any case", bearer_scheme_any_case),
    ("deleted default is replaced", deleted_default_is_replaced),
    ("longest id is its hostname", longest_id_is_its_hostname),
    (
        "temporary mismatch is refused alike",
        temporary_mismatch_is_refused_alike,
    ),
];

#[tokio::test]
async fn issue_13_local_server_and_gateway_answer_alike() -> anyhow::Result<()> {
    let t = tag("parity");
    let mut opts = ServerOpts::lifecycle();
    opts.env
        .push(("KILNTAINERS_AUTH_TOKEN".into(), TOKEN.into()));
    let local = HttpServer::start(&t, &state_dir(&format!("{t}-l")), &opts).await?;
    let x = HttpServer::start_executor(
        &t,
        &state_dir(&format!("{t}-x")),
        &ServerOpts::default(),
        EXECUTOR_SECRET,
    )
    .await?;
    let vars = vec![
        (
            "EXECUTORS",
            json!([{"name": "local", "url": x.base}]).to_string(),
        ),
        ("EXECUTOR_SECRET", EXECUTOR_SECRET.into()),
        ("STATIC_TOKEN", TOKEN.into()),
        ("STATIC_TEAM", "parity-team".into()),
    ];
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &vars).await?;
    let targets = [
        Target {
            name: "local",
            url: local.url.clone(),
            local: Some(local),
            gateway: None,
        },
        Target {
            name: "gateway",
            url: gw.url.clone(),
            local: None,
            gateway: Some(gw),
        },
    ];
    let mut failures = Vec::new();
    for (case, run) in CASES {
        let mut answers = Vec::new();
        for target in &targets {
            let answer = run(target, &t).await;
            answers.push((target.name, answer.map_err(|e| format!("{e:#}"))));
        }
        eprintln!("{case}: {answers:?}");
        let first = &answers[0].1;
        if first.is_err() || answers.iter().any(|(_, a)| a != first) {
            failures.push(format!("{case}: {answers:?}"));
        }
    }
    let [local, gateway] = targets;
    if let Some(g) = gateway.gateway {
        g.stop().await?;
    }
    x.terminate().await?;
    if let Some(l) = local.local {
        l.terminate().await?;
    }
    wait_for_count(&t, 0, Duration::from_secs(20)).await?;
    assert!(
        failures.is_empty(),
        "the servers differ:\n{}",
        failures.join("\n")
    );
    Ok(())
}

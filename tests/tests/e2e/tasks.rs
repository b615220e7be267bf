//! Issue 14: the MCP Tasks extension (`io.modelcontextprotocol/tasks`, 2026-07-28) over
//! jobs, spoken as raw Streamable HTTP (rmcp's client has no Tasks support): on the local
//! server with Docker, and through the gateway under `wrangler dev` (the task's record in
//! the team's Durable Object) to a Docker executor.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::*;

const EXT: &str = "io.modelcontextprotocol/tasks";

/// `_meta` of a 2026-07-28 request, with or without the Tasks extension.
fn meta(tasks: bool) -> Value {
    let extensions = if tasks { json!({ EXT: {} }) } else { json!({}) };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": extensions },
    })
}

/// Where requests go: an MCP URL, and the bearer token to send, if any.
#[derive(Clone)]
pub(crate) struct At {
    url: String,
    token: Option<String>,
}

impl At {
    pub(crate) fn with_token(url: &str, token: &str) -> Self {
        At {
            url: url.to_owned(),
            token: Some(token.to_owned()),
        }
    }

    fn local(s: &HttpServer) -> Self {
        At {
            url: s.url.clone(),
            token: None,
        }
    }
}

/// One 2026-07-28 request; `name` is the `Mcp-Name` header. Returns the status and the
/// JSON-RPC response (from JSON or from an SSE stream's last message).
async fn rpc(
    s: &At,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> anyhow::Result<(u16, Value)> {
    let mut req = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    if let Some(t) = &s.token {
        req = req.bearer_auth(t);
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let resp = req.body(body.to_string()).send().await?;
    let status = resp.status().as_u16();
    let text = resp.text().await?;
    let json = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|m| m.get("id").is_some())
            .unwrap_or(Value::String(text)),
    };
    Ok((status, json))
}

pub(crate) async fn run(s: &At, args: Value, tasks: bool) -> anyhow::Result<Value> {
    let mut params = json!({"name": "terminal_execute", "arguments": args});
    params["_meta"] = meta(tasks);
    let (status, r) = rpc(s, "tools/call", Some("terminal_execute"), params).await?;
    anyhow::ensure!(status == 200, "{status}: {r}");
    Ok(r["result"].clone())
}

async fn task(s: &At, method: &str, task_id: &str) -> anyhow::Result<Value> {
    let (status, r) = rpc(
        s,
        method,
        Some(task_id),
        json!({"taskId": task_id, "_meta": meta(true)}),
    )
    .await?;
    anyhow::ensure!(status == 200, "{method} {task_id}: {status} {r}");
    Ok(r)
}

/// The JSON-RPC error message a tasks/* request gets.
pub(crate) async fn task_error(s: &At, method: &str, task_id: &str) -> anyhow::Result<String> {
    let (_, r) = rpc(
        s,
        method,
        Some(task_id),
        json!({"taskId": task_id, "_meta": meta(true)}),
    )
    .await?;
    Ok(r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Polls `tasks/get` until the task leaves `working`.
pub(crate) async fn settle(s: &At, task_id: &str) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = task(s, "tasks/get", task_id).await?;
        let t = r["result"].clone();
        anyhow::ensure!(t["resultType"] == "complete", "{r}");
        if t["status"] != "working" {
            return Ok(t);
        }
        anyhow::ensure!(Instant::now() < deadline, "task {task_id} never ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What every host of the extension does (the local server, the gateway): `s` speaks as
/// a caller that may manage `id`, a permanent computer it makes. Answers a completed
/// task's id, for the host's own checks of who else may read it.
async fn scenario(s: &At, id: &str) -> anyhow::Result<String> {
    // Advertised in server/discover.
    let (_, d) = rpc(s, "server/discover", None, json!({"_meta": meta(false)})).await?;
    assert_eq!(
        d["result"]["capabilities"]["extensions"][EXT],
        json!({}),
        "{d}"
    );

    // A quick command answers with its result, task-capable client or not.
    let r = run(
        s,
        json!({"command": "echo hi", "computer_id": id, "temporary": false}),
        true,
    )
    .await?;
    assert_eq!(r["resultType"], "complete", "{r}");
    assert_eq!(r["structuredContent"]["stdout"], "hi\n");

    // Still running after its yield: a task handle, durable at once.
    let r = run(
        s,
        json!({"command": "echo one; sleep 2; echo two >&2; printf '\\377'; exit 3", "computer_id": id, "yield_ms": 300}),
        true,
    )
    .await?;
    assert_eq!(r["resultType"], "task", "{r}");
    assert_eq!(r["status"], "working");
    assert!(r["statusMessage"].as_str().unwrap().contains("one"), "{r}");
    assert!(r["pollIntervalMs"].as_u64().is_some() && r["createdAt"].is_string());
    let task_id = r["taskId"].as_str().unwrap().to_owned();
    assert!(
        task_id.starts_with("job-") && task_id.len() >= 28,
        "{task_id}"
    );
    let first = task(s, "tasks/get", &task_id).await?;
    assert_eq!(first["result"]["taskId"], task_id.as_str());

    // Without the extension the same call is a plain job (SPEC §3.8), never a task.
    let plain = run(
        s,
        json!({"command": "sleep 1", "computer_id": id, "yield_ms": 0}),
        false,
    )
    .await?;
    assert_eq!(plain["resultType"], "complete");
    assert_eq!(plain["structuredContent"]["running"], true);

    // Completed: the exec result the call would have given, all of its output.
    let done = settle(s, &task_id).await?;
    assert_eq!(done["status"], "completed", "{done}");
    let sc = &done["result"]["structuredContent"];
    assert_eq!(sc["stdout"], "one\n\u{fffd}");
    assert_eq!(sc["stdout_base64"], "b25lCv8=");
    assert_eq!(sc["stderr"], "two\n");
    assert_eq!(sc["exit_code"], 3);
    assert_eq!(done["result"]["isError"], false);
    // It stays readable after it ended.
    let again = settle(s, &task_id).await?;
    assert_eq!(again["result"], done["result"]);

    // tasks/update is acknowledged; unknown ids and a wrong Mcp-Name are refused.
    let u = task(s, "tasks/update", &task_id).await?;
    assert_eq!(u["result"]["resultType"], "complete", "{u}");
    let (status, e) = rpc(
        s,
        "tasks/get",
        Some("job-000000000000000000000000"),
        json!({"taskId": "job-000000000000000000000000", "_meta": meta(true)}),
    )
    .await?;
    assert_eq!(status, 200);
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown task")
    );
    let (status, e) = rpc(
        s,
        "tasks/get",
        Some("other"),
        json!({"taskId": task_id, "_meta": meta(true)}),
    )
    .await?;
    assert_eq!(
        (status, e["error"]["code"].clone()),
        (400, json!(-32020)),
        "{e}"
    );

    // tasks/cancel kills the whole tree: nothing survives in the computer.
    let r = run(
        s,
        json!({"command": "sleep 1000 & sleep 1000; wait", "computer_id": id, "yield_ms": 200}),
        true,
    )
    .await?;
    let cancel_id = r["taskId"].as_str().unwrap().to_owned();
    let c = task(s, "tasks/cancel", &cancel_id).await?;
    assert_eq!(c["result"]["resultType"], "complete", "{c}");
    let cancelled = settle(s, &cancel_id).await?;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert!(cancelled.get("result").is_none());
    let left = run(
        s,
        json!({"command": COUNT_SLEEP_1000, "computer_id": id}),
        false,
    )
    .await?;
    assert_eq!(left["structuredContent"]["stdout"], "0\n", "{left}");

    // A task whose computer is deleted ends with it.
    let r = run(
        s,
        json!({"command": "sleep 1000", "computer_id": id, "yield_ms": 100}),
        true,
    )
    .await?;
    let gone_id = r["taskId"].as_str().unwrap().to_owned();
    let mut params = json!({"name": "computer_delete", "arguments": {"computer_id": id}});
    params["_meta"] = meta(true);
    let (_, del) = rpc(s, "tools/call", Some("computer_delete"), params).await?;
    assert_eq!(del["result"]["structuredContent"]["deleted"], true, "{del}");
    // Its starter still reads how it ended.
    let gone = settle(s, &gone_id).await?;
    assert_eq!(gone["status"], "cancelled", "{gone}");
    assert!(
        gone["statusMessage"].as_str().unwrap().contains("deleted"),
        "{gone}"
    );

    Ok(task_id)
}

#[tokio::test]
async fn issue_14_tasks_extension_over_jobs() -> anyhow::Result<()> {
    let t = tag("tasks");
    let opts = ServerOpts::default().arg("--tools=jobs,lifecycle");
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let task_id = scenario(&At::local(&s), &format!("{t}-p")).await?;
    // Another server process knows none of these tasks.
    let other = HttpServer::start(&t, &state_dir(&format!("{t}-b")), &opts).await?;
    let other_at = At::local(&other);
    let (_, e) = rpc(
        &other_at,
        "tasks/get",
        Some(&task_id),
        json!({"taskId": task_id, "_meta": meta(true)}),
    )
    .await?;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown task"),
        "{e}"
    );
    other.terminate().await?;
    s.terminate().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_14_tasks_not_served_without_the_jobs_group() -> anyhow::Result<()> {
    let t = tag("tasksoff");
    let server = HttpServer::start(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let s = At::local(&server);
    let (_, d) = rpc(&s, "server/discover", None, json!({"_meta": meta(false)})).await?;
    assert!(
        d["result"]["capabilities"]["extensions"].get(EXT).is_none(),
        "{d}"
    );
    let (_, e) = rpc(
        &s,
        "tasks/get",
        Some("job-1"),
        json!({"taskId": "job-1", "_meta": meta(true)}),
    )
    .await?;
    assert_eq!(e["error"]["code"], -32601, "{e}");
    // A task-capable client gets the exec result.
    let r = run(
        &s,
        json!({"command": "sleep 1; echo late", "computer_id": format!("{t}-a")}),
        true,
    )
    .await?;
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["structuredContent"]["stdout"], "late\n");
    server.terminate().await?;
    remove_all(&t).await
}

/// The extension through the gateway: the task's record in the team's Durable Object, the
/// job on a Docker executor. The shared scenario, then who else may read a task, two polls
/// at once (the object's lease: no output split or lost), and the edge's 1 MiB task limit.
#[tokio::test]
async fn issue_14_gateway_tasks() -> anyhow::Result<()> {
    use crate::gateway::{EXECUTOR_SECRET, claims, sign, vars};
    let t = tag("gwtasks");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), EXECUTOR_SECRET)
        .await?;
    let mut v = vars(&x.base, 60);
    v.push(("TOOLS", "all".into()));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &v).await?;
    let caller = |team: &str, sub: &str| At {
        url: gw.url.clone(),
        token: Some(sign(&claims(team, sub))),
    };
    let (a1, a2, b1) = (
        caller("team-a", "u1"),
        caller("team-a", "u2"),
        caller("team-b", "u1"),
    );
    let done_id = scenario(&a1, &format!("{t}-p")).await?;
    let unknown = |r: &Value| {
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown task"))
    };

    // Its computer deleted, the completed task is its starter's alone; a task on a
    // temporary is its owner's alone; another team reaches neither, however it asks.
    let tmp = format!("{t}-tmp");
    let r = run(
        &a1,
        json!({"command": "sleep 1000", "computer_id": tmp, "yield_ms": 100}),
        true,
    )
    .await?;
    assert_eq!(r["resultType"], "task", "{r}");
    let running_id = r["taskId"].as_str().unwrap().to_owned();
    for (who, id) in [
        (&a2, &done_id),
        (&b1, &done_id),
        (&a2, &running_id),
        (&b1, &running_id),
    ] {
        for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
            let (status, e) = rpc(
                who,
                method,
                Some(id),
                json!({"taskId": id, "_meta": meta(true)}),
            )
            .await?;
            assert!(status == 200 && unknown(&e), "{method} {id}: {status} {e}");
        }
    }
    let still = task(&a1, "tasks/get", &running_id).await?;
    assert_eq!(still["result"]["status"], "working", "{still}");
    task(&a1, "tasks/cancel", &running_id).await?;
    assert_eq!(settle(&a1, &running_id).await?["status"], "cancelled");

    // Four polls at once, again and again: each output byte lands in the record once.
    let r = run(
        &a1,
        json!({"command": "for i in $(seq 1 40); do echo $i; sleep 0.05; done", "computer_id": tmp, "yield_ms": 100}),
        true,
    )
    .await?;
    let seq_id = r["taskId"].as_str().unwrap().to_owned();
    let pollers: Vec<_> = (0..4)
        .map(|_| {
            let (at, id) = (a1.clone(), seq_id.clone());
            tokio::spawn(async move { settle(&at, &id).await })
        })
        .collect();
    let want: String = (1..=40).map(|i| format!("{i}\n")).collect();
    for p in pollers {
        let done = p.await??;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["structuredContent"]["stdout"], want.as_str());
    }

    // A task at the edge keeps 1 MiB: past it the command is stopped, as in the foreground.
    let r = run(
        &a1,
        json!({"command": "head -c 3000000 /dev/zero | tr '\\0' a; sleep 1000", "computer_id": tmp, "yield_ms": 300}),
        true,
    )
    .await?;
    let big_id = r["taskId"].as_str().unwrap().to_owned();
    let big = settle(&a1, &big_id).await?;
    let sc = &big["result"]["structuredContent"];
    assert_eq!(big["status"], "completed", "{}", big["statusMessage"]);
    assert_eq!(sc["truncated"], true);
    assert_eq!(sc["stdout"].as_str().map(str::len), Some(1 << 20));
    let left = run(
        &a1,
        json!({"command": COUNT_SLEEP_1000, "computer_id": tmp}),
        false,
    )
    .await?;
    assert_eq!(left["structuredContent"]["stdout"], "0\n", "{left}");

    gw.stop().await?;
    x.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

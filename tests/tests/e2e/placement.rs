//! Issue 18: placement over several executors at the edge. The gateway under `wrangler dev`
//! in front of three real executors (WASM computers, so no engine is shared): new computers
//! spread by the load each executor's `/v1/health` reports; when one is killed, the next
//! new computers land elsewhere and none is lost, while its own computers answer at once
//! with "executor X is unreachable"; a `draining` executor takes no new computers but
//! still serves its own; `/metrics` counts placements and failovers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::*;

const SECRET: &str = "exec-secret-for-placement-tests-0123456789";
const JWT_SECRET: &str = "jwt-secret-for-placement-tests-0123456789ab";
const TEAM: &str = "team-p";

fn token() -> String {
    let now = unix_now();
    hs256(
        &json!({"iss": "https://issuer.test", "aud": "mcp-gateway-test", "sub": "u1",
                "team": TEAM, "iat": now, "exp": now + 900}),
        JWT_SECRET,
    )
    .expect("sign")
}

fn vars(executors: Value) -> Vec<(&'static str, String)> {
    vec![
        ("EXECUTORS", executors.to_string()),
        ("PLACEMENT", "wasm".into()),
        ("EXECUTOR_SECRET", SECRET.into()),
        ("JWT_HS256_SECRET", JWT_SECRET.into()),
        ("JWT_ISSUER", "https://issuer.test".into()),
        ("JWT_AUDIENCE", "mcp-gateway-test".into()),
    ]
}

/// The team's computers on the executor `name`, by its own API.
async fn on(xs: &BTreeMap<&str, HttpServer>, name: &str) -> anyhow::Result<Vec<String>> {
    let x = xs
        .get(name)
        .ok_or_else(|| anyhow::anyhow!("no executor {name}"))?;
    executor_computers_of(name, &x.base, SECRET, TEAM).await
}

async fn gateway_metric(gw: &Gateway, series: &str) -> anyhow::Result<f64> {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", gw.base))
        .bearer_auth(token())
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or("absent");
    v.parse()
        .map_err(|_| anyhow::anyhow!("{series}: {v} in\n{text}"))
}

/// The message of a failed tool call (its structured `error`, else its text).
fn error_of(r: &rmcp::model::CallToolResult) -> String {
    r.structured_content
        .as_ref()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text(r))
}

async fn create(c: &Client, id: &str) -> anyhow::Result<()> {
    let r = call(
        c,
        "computer_create",
        json!({"computer_id": id, "temporary": false}),
    )
    .await?;
    anyhow::ensure!(r.is_error == Some(false), "create {id}: {:?}", r.content);
    Ok(())
}

#[tokio::test]
async fn issue_18_placement_spreads_fails_over_and_drains() -> anyhow::Result<()> {
    let t = tag("place");
    let opts = wasm_opts();
    let mut xs = BTreeMap::new();
    for name in ["a", "b", "c"] {
        let tn = format!("{t}-{name}");
        xs.insert(
            name,
            HttpServer::start_named_executor(&tn, &state_dir(&tn), &opts, SECRET, name, &[])
                .await?,
        );
    }
    let urls: BTreeMap<&str, String> = xs.iter().map(|(n, x)| (*n, x.base.clone())).collect();
    let executors = |draining: &str| {
        let each: Vec<Value> = ["a", "b", "c"]
            .iter()
            .map(|n| json!({"name": n, "url": urls[n], "backends": ["wasm"], "draining": *n == draining}))
            .collect();
        Value::Array(each)
    };
    // a already holds two of the team's computers (made on it directly).
    for id in ["pre-1", "pre-2"] {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/computers", xs["a"].base))
            .bearer_auth(executor_token_for("a", SECRET, TEAM, "exec manage")?)
            .json(&json!({"computer_id": id, "temporary": false}))
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "{}", r.text().await?);
    }
    let persist = state_dir(&t).join("wrangler");
    let gw = Gateway::start(&t, &persist, &vars(executors(""))).await?;
    let c = gw.modern_client(&token()).await?;

    // Spread by load: the four new ones go to the two empty executors, two each.
    for i in 1..=4 {
        create(&c, &format!("p-{i}")).await?;
    }
    assert_eq!(on(&xs, "a").await?, ["pre-1", "pre-2"]);
    assert_eq!(on(&xs, "b").await?.len(), 2, "{:?}", on(&xs, "b").await?);
    assert_eq!(on(&xs, "c").await?.len(), 2, "{:?}", on(&xs, "c").await?);
    let placed = |x: &str| format!("msc_gateway_placements_total{{executor=\"{x}\"}}");
    assert_eq!(gateway_metric(&gw, &placed("a")).await?, 0.0);
    assert_eq!(gateway_metric(&gw, &placed("b")).await?, 2.0);
    assert_eq!(gateway_metric(&gw, &placed("c")).await?, 2.0);
    let on_b = on(&xs, "b").await?;

    // b dies. Its health was read a moment ago, so the gateway still takes it for up: the
    // next new computers must still land elsewhere, and none is lost.
    let b = xs.remove("b").expect("b");
    let pid = b
        .child
        .id()
        .ok_or_else(|| anyhow::anyhow!("executor b has no pid to kill"))?;
    signal(pid, "KILL");
    drop(b);
    for i in 5..=7 {
        create(&c, &format!("p-{i}")).await?;
    }
    let (a_now, c_now) = (on(&xs, "a").await?, on(&xs, "c").await?);
    for i in 5..=7 {
        let id = format!("p-{i}");
        assert!(
            a_now.contains(&id) || c_now.contains(&id),
            "{id} lost: {a_now:?} {c_now:?}"
        );
        let r = exec(&c, json!({"command": "echo here", "computer_id": id})).await?;
        assert_eq!(r["stdout"], "here\n");
    }
    assert_eq!(a_now.len() + c_now.len(), 2 + 2 + 3);
    let up = |x: &str| format!("msc_gateway_executor_up{{executor=\"{x}\"}}");
    assert_eq!(gateway_metric(&gw, &up("b")).await?, 0.0);
    assert_eq!(
        gateway_metric(&gw, "msc_gateway_failovers_total{executor=\"b\"}").await?,
        1.0
    );
    // b's own computers answer at once, and clearly.
    let started = Instant::now();
    let r = call(
        &c,
        "terminal_execute",
        json!({"command": "true", "computer_id": on_b[0]}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    let said = error_of(&r);
    assert!(said.contains("executor \"b\" is unreachable"), "{said}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The list still shows every computer: b's as unreachable, with why.
    let r = call(&c, "computer_list", json!({})).await?;
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);
    let list = r.structured_content.unwrap_or_default();
    let b0 = listed(&list, &on_b[0]).expect("b's computer listed");
    assert_eq!(b0["state"], "unreachable", "{b0}");
    assert!(
        listed(&list, "p-5").is_some_and(|p| p["state"] != "unreachable"),
        "{list}"
    );
    c.cancel().await?;
    gw.stop().await?;

    // An operator drains a: new computers go to c only (b is still down), while a's own
    // computers still answer.
    let gw = Gateway::start(&t, &persist, &vars(executors("a"))).await?;
    let c = gw.modern_client(&token()).await?;
    let before = on(&xs, "a").await?;
    for i in 8..=9 {
        create(&c, &format!("p-{i}")).await?;
    }
    assert_eq!(
        on(&xs, "a").await?,
        before,
        "a draining took a new computer"
    );
    let c_now = on(&xs, "c").await?;
    assert!(
        c_now.contains(&"p-8".to_owned()) && c_now.contains(&"p-9".to_owned()),
        "{c_now:?}"
    );
    // (b's failover put some of p-5..p-7 on a: it was the least loaded then, ties first.)
    let id = before
        .iter()
        .find(|id| id.starts_with("p-"))
        .ok_or_else(|| anyhow::anyhow!("a holds none of the gateway's computers: {before:?}"))?;
    let r = exec(&c, json!({"command": "echo still", "computer_id": id})).await?;
    assert_eq!(r["stdout"], "still\n");
    assert_eq!(
        gateway_metric(&gw, "msc_gateway_executor_draining{executor=\"a\"}").await?,
        1.0
    );
    // With every executor down or draining, a new computer is refused with why.
    let c_server = xs.remove("c").expect("c");
    c_server.terminate().await?;
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": "nowhere", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    let said = error_of(&r);
    assert!(
        said.contains("\"a\" is draining") && said.contains("\"b\" is unreachable"),
        "{said}"
    );
    c.cancel().await?;
    gw.stop().await?;
    for (_, x) in xs {
        x.terminate().await?;
    }
    Ok(())
}

//! Issue 18's failover figures: the gateway under `wrangler dev` in front of three real
//! executors (WASM computers, so no engine is shared), with new computers coming all along
//! from four callers while one executor is killed (SIGKILL). Reported: creates during the
//! run and how many failed (target 0), the time from the kill to the first new computer
//! that lands elsewhere (target: within one health-check interval, the floor printed
//! beside it), creates' latency before and across the kill, and how fast and how clearly a
//! computer on the dead executor answers, next to a warm exec on a live one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tests::*;

use super::{Row, gw_post, ms, pct};

const SECRET: &str = "bench-failover-executor-secret-0123456789";
const JWT: &str = "bench-failover-jwt-secret-0123456789abcdef";
const TEAM: &str = "bench-failover";
/// Callers creating computers at once, all through the run.
const CALLERS: usize = 4;
/// The run before the kill and after it.
const BEFORE: Duration = Duration::from_secs(3);
const AFTER: Duration = Duration::from_secs(8);
/// The gateway's health-check interval (`gateway::placement::HEALTH_TTL_MS`).
const HEALTH_INTERVAL_MS: f64 = 3_000.0;

fn call(name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
}

/// The team's computer ids on one executor, by its own API.
async fn on(x: &HttpServer) -> Result<Vec<String>> {
    executor_computers(&x.base, SECRET, TEAM).await
}

/// One create's record: when it started and ended, and its error if it failed.
struct Create {
    id: String,
    start: Instant,
    end: Instant,
    error: Option<String>,
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let opts = wasm_opts();
    let mut xs = Vec::new();
    for name in ["a", "b", "c"] {
        let tn = format!("{t}-fo-{name}");
        xs.push(HttpServer::start_executor(&tn, &state_dir(&tn), &opts, SECRET).await?);
    }
    let executors: Vec<Value> = ["a", "b", "c"]
        .iter()
        .zip(&xs)
        .map(|(n, x)| json!({"name": n, "url": x.base, "backends": ["wasm"]}))
        .collect();
    let gw = Gateway::start(
        &format!("{t}-fo"),
        &state_dir(t).join("failover-gw"),
        &[
            ("EXECUTORS", Value::Array(executors).to_string()),
            ("PLACEMENT", "wasm".into()),
            ("EXECUTOR_SECRET", SECRET.into()),
            ("JWT_HS256_SECRET", JWT.into()),
            ("JWT_ISSUER", "bench".into()),
            ("JWT_AUDIENCE", "bench".into()),
        ],
    )
    .await?;
    let token = hs256(
        &json!({"iss": "bench", "aud": "bench", "sub": "u1", "team": TEAM, "exp": unix_now() + 3600}),
        JWT,
    )?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let create = {
        let (http, url, token) = (http.clone(), gw.url.clone(), token.clone());
        move |id: String| {
            let (http, url, token) = (http.clone(), url.clone(), token.clone());
            async move {
                let start = Instant::now();
                let args = json!({"computer_id": id, "temporary": false});
                let error = match gw_post(&http, &url, &token, call("computer_create", args)).await
                {
                    Ok(r) if r["result"]["isError"] == false => None,
                    Ok(r) => Some(r.to_string()),
                    Err(e) => Some(e.to_string()),
                };
                Create {
                    id,
                    start,
                    end: Instant::now(),
                    error,
                }
            }
        }
    };
    // Warm: two computers on each executor (by load), each answering.
    for i in 0..6 {
        let c = create(format!("warm-{i}")).await;
        anyhow::ensure!(c.error.is_none(), "warm create: {:?}", c.error);
    }
    let exec_on = |id: String| {
        let (http, url, token) = (http.clone(), gw.url.clone(), token.clone());
        async move {
            let s = Instant::now();
            let r = gw_post(
                &http,
                &url,
                &token,
                call(
                    "terminal_execute",
                    json!({"args": ["true"], "computer_id": id}),
                ),
            )
            .await?;
            anyhow::Ok((ms(s.elapsed()), r))
        }
    };
    let mut live = Vec::new();
    for i in 0..40 {
        let (took, r) = exec_on(format!("warm-{}", i % 6)).await?;
        anyhow::ensure!(
            r["result"]["structuredContent"]["exit_code"] == 0,
            "warm exec: {r}"
        );
        live.push(took);
    }
    live.sort_by(f64::total_cmp);
    let on_b = on(&xs[1]).await?;
    let doomed = on_b
        .first()
        .cloned()
        .context("b holds none of the warm computers")?;

    // Four callers create computers one after another, all through the run.
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for k in 0..CALLERS {
        let (stop, create) = (stop.clone(), create.clone());
        callers.push(tokio::spawn(async move {
            let mut done = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                done.push(create(format!("fo-{k}-{i}")).await);
                i += 1;
            }
            done
        }));
    }
    tokio::time::sleep(BEFORE).await;
    let b = xs.remove(1);
    if let Some(pid) = b.child.id() {
        signal(pid, "KILL");
    }
    let killed = Instant::now();
    drop(b);
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    let mut all: Vec<Create> = Vec::new();
    for c in callers {
        all.extend(c.await?);
    }

    // The dead executor's computer answers at once, and clearly.
    let mut dead = Vec::new();
    let mut clear = true;
    for _ in 0..10 {
        let (took, r) = exec_on(doomed.clone()).await?;
        let said = r["result"]["structuredContent"]["error"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| r.to_string());
        clear &= r["result"]["isError"] == true && said.contains("executor \"b\" is unreachable");
        dead.push(took);
    }
    dead.sort_by(f64::total_cmp);

    let failed: Vec<&Create> = all.iter().filter(|c| c.error.is_some()).collect();
    if let Some(c) = failed.first() {
        eprintln!("failover: first failed create {}: {:?}", c.id, c.error);
    }
    // Every computer made after the kill is on a or c, and answers there.
    let (on_a, on_c) = (on(&xs[0]).await?, on(&xs[1]).await?);
    let after: Vec<&Create> = all
        .iter()
        .filter(|c| c.start >= killed && c.error.is_none())
        .collect();
    let elsewhere = after
        .iter()
        .all(|c| on_a.contains(&c.id) || on_c.contains(&c.id));
    let first_after = after
        .iter()
        .map(|c| ms(c.end - killed))
        .min_by(f64::total_cmp)
        .unwrap_or(f64::INFINITY);
    let mut before: Vec<f64> = all
        .iter()
        .filter(|c| c.end < killed)
        .map(|c| ms(c.end - c.start))
        .collect();
    let mut across: Vec<f64> = all
        .iter()
        .filter(|c| c.end >= killed)
        .map(|c| ms(c.end - c.start))
        .collect();
    before.sort_by(f64::total_cmp);
    across.sort_by(f64::total_cmp);
    let before50 = pct(&before, 0.5);

    rows.push(Row {
        name: "failover: new computers made during the run (3 executors, b killed)",
        value: all.len() as f64,
        unit: "creates",
        floor: None,
        target: format!(
            "(reported; {CALLERS} callers, {} s)",
            (BEFORE + AFTER).as_secs()
        ),
        pass: true,
    });
    rows.push(Row {
        name: "failover: new computers lost (failed creates)",
        value: failed.len() as f64,
        unit: "lost",
        floor: None,
        target: "0".into(),
        pass: failed.is_empty(),
    });
    rows.push(Row {
        name: "failover: kill -> first new computer done elsewhere",
        value: first_after,
        unit: "ms",
        floor: Some(HEALTH_INTERVAL_MS),
        target: "<= 1.0x (one health-check interval); all on a or c".into(),
        pass: first_after <= HEALTH_INTERVAL_MS && elsewhere && !after.is_empty(),
    });
    rows.push(Row {
        name: "failover: create p50 before the kill",
        value: before50,
        unit: "ms",
        floor: None,
        target: "(reported)".into(),
        pass: true,
    });
    rows.push(Row {
        name: "failover: create p99 from the kill on",
        value: pct(&across, 0.99),
        unit: "ms",
        floor: Some(before50),
        target: "(reported)".into(),
        pass: true,
    });
    rows.push(Row {
        name: "failover: exec on the dead executor's computer, p50 (clear error)",
        value: pct(&dead, 0.5),
        unit: "ms",
        floor: Some(pct(&live, 0.5)),
        target: "< 1 health-check interval, \"executor b is unreachable\"".into(),
        pass: clear && pct(&dead, 0.99) < HEALTH_INTERVAL_MS,
    });
    gw.stop().await?;
    for x in xs {
        x.terminate().await?;
    }
    Ok(())
}

//! Issue 18's failover figures: the gateway under `wrangler dev` in front of three real
//! executors (WASM computers, so no engine is shared), with new computers coming all along
//! from four callers while one executor is killed (SIGKILL). Reported: creates during the
//! run and how many failed (target 0), the time from the kill to the first new computer
//! that lands elsewhere (target: within one health-check interval, the floor printed
//! beside it: the interval measured in the same run, between the gateway's `GET
//! /v1/health` requests to a live executor, seen by a proxy in front of it), creates'
//! latency before and across the kill, and how fast and how clearly a computer on the dead
//! executor answers, next to a warm exec on a live one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
/// A request line the gateway's health checks start with.
const HEALTH_CHECK: &[u8] = b"GET /v1/health ";

fn call(name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
}

/// The team's computer ids on executor `name` (at `x`), by its own API.
async fn on(name: &str, x: &HttpServer) -> Result<Vec<String>> {
    executor_computers_of(name, &x.base, SECRET, TEAM).await
}

/// A TCP proxy on loopback in front of `target` (`http://host:port`) that notes when each
/// health check passes through it: its URL, and the times.
async fn health_watch(target: &str) -> Result<(String, Arc<Mutex<Vec<Instant>>>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = target.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = seen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (upstream, noted) = (upstream.clone(), noted.clone());
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = async move {
                    let mut buf = vec![0u8; 64 << 10];
                    while let Ok(n @ 1..) = cr.read(&mut buf).await {
                        let chunk = &buf[..n];
                        let checks = chunk
                            .windows(HEALTH_CHECK.len())
                            .filter(|w| *w == HEALTH_CHECK)
                            .count();
                        if checks > 0 {
                            let now = Instant::now();
                            let mut seen = noted.lock().unwrap_or_else(|p| p.into_inner());
                            seen.extend(std::iter::repeat_n(now, checks));
                        }
                        if sw.write_all(chunk).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    Ok((url, seen))
}

/// One create's record: when it started and ended, and its error if it failed.
struct Create {
    id: String,
    start: Instant,
    end: Instant,
    error: Option<String>,
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    // Hundreds of computers for one team: past the executors' default cap per principal.
    let opts = wasm_opts().arg("--max-computers-per-principal=100000");
    let mut xs = Vec::new();
    for name in ["a", "b", "c"] {
        let tn = format!("{t}-fo-{name}");
        let state = state_dir(&tn);
        let x = HttpServer::start_named_executor(&tn, &state, &opts, SECRET, name, &[]);
        xs.push(x.await?);
    }
    // The gateway reaches a through a proxy that times its health checks: the floor.
    let (a_url, checks) = health_watch(&xs[0].base).await?;
    let urls = [a_url, xs[1].base.clone(), xs[2].base.clone()];
    let executors: Vec<Value> = ["a", "b", "c"]
        .iter()
        .zip(&urls)
        .map(|(n, url)| json!({"name": n, "url": url, "backends": ["wasm"]}))
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
    let on_b = on("b", &xs[1]).await?;
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
    signal(
        b.child.id().context("executor b has no pid to kill")?,
        "KILL",
    );
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
    let (on_a, on_c) = (on("a", &xs[0]).await?, on("c", &xs[1]).await?);
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
    // The health-check interval, measured: the median gap between rounds of a's checks.
    // Callers whose placement finds the last check expired each fetch it before the first
    // answer is recorded, so a round is a burst of checks that start within one create of
    // each other (the longest create before the kill bounds that); creates came all
    // through the run, so each round began as soon as the last one expired.
    let burst = before.last().copied().unwrap_or_default();
    let seen: Vec<Instant> = checks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut rounds: Vec<Instant> = Vec::new();
    for (i, at) in seen.iter().enumerate() {
        if i == 0 || ms(*at - seen[i - 1]) > burst {
            rounds.push(*at);
        }
    }
    let mut gaps: Vec<f64> = rounds.windows(2).map(|w| ms(w[1] - w[0])).collect();
    gaps.sort_by(f64::total_cmp);
    anyhow::ensure!(
        gaps.len() >= 2,
        "{} health checks of a in {} rounds: too few to measure their interval",
        seen.len(),
        rounds.len()
    );
    let interval = pct(&gaps, 0.5);
    eprintln!(
        "failover: {} health checks of a in {} rounds (a round: checks within {burst:.0} ms); gaps between rounds {gaps:.0?} ms",
        seen.len(),
        rounds.len()
    );

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
        floor: Some(interval),
        target: "<= 1.0x (one health-check interval, measured); all on a or c".into(),
        pass: first_after <= interval && elsewhere && !after.is_empty(),
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
        pass: clear && pct(&dead, 0.99) < interval,
    });
    gw.stop().await?;
    for x in xs {
        x.terminate().await?;
    }
    Ok(())
}

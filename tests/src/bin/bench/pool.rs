//! The warm pool (issue 18): new computer → first result with and without `--warm-pool`,
//! one at a time and 100 at once, in the style of computesdk/benchmarks (each caller its
//! own MCP session over Streamable HTTP; its first `terminal_execute` makes its computer).
//! The floor of each figure is the same server without a pool, in the same run.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;
use tests::*;

use super::{Row, ms, pct};

const SEQUENTIAL: usize = 10;
const BURST: usize = 100;
const POOL: usize = 20;

/// Waits until `tag`'s pool holds `n` running members.
async fn wait_members(tag: &str, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let running = containers(tag)
            .await?
            .into_iter()
            .filter(|c| c.state.map(|s| s.to_string()).as_deref() == Some("running"))
            .flat_map(|c| c.names.unwrap_or_default())
            .filter(|n| n.starts_with("/msc-pool."))
            .count();
        if running >= n {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{tag}: the pool did not fill");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Milliseconds from each new session's first exec to its result, sorted: `n` one after
/// another (waiting for a full pool of `refill` before each) or all at once.
async fn first_results(
    server: &HttpServer,
    tag: &str,
    n: usize,
    at_once: bool,
    refill: usize,
) -> Result<Vec<f64>> {
    let mut clients = Vec::new();
    let mut times = Vec::new();
    if at_once {
        let opened = futures_util::future::join_all((0..n).map(|_| server.legacy_client(None)));
        for c in opened.await {
            clients.push(c?);
        }
        if refill > 0 {
            wait_members(tag, refill).await?;
        }
        let runs = clients.iter().map(|c| async move {
            let s = Instant::now();
            exec(c, json!({"args": ["true"]})).await?;
            anyhow::Ok(ms(s.elapsed()))
        });
        for t in futures_util::future::join_all(runs).await {
            times.push(t?);
        }
    } else {
        for _ in 0..n {
            let c = server.legacy_client(None).await?;
            if refill > 0 {
                wait_members(tag, refill).await?;
            }
            let s = Instant::now();
            exec(&c, json!({"args": ["true"]})).await?;
            times.push(ms(s.elapsed()));
            clients.push(c);
        }
    }
    futures_util::future::join_all(clients.into_iter().map(|c| c.cancel())).await;
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// The engine alone, no server: `n` containers created, started and given a first Engine
/// API exec of `true`, all at once; milliseconds from the burst's start to each one's
/// result, sorted. The floor of a burst: what the engine itself needs for that many.
async fn engine_burst(t: &str, n: usize) -> Result<Vec<f64>> {
    let d = docker()?;
    let tag = format!("{t}-engine{n}");
    let names: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
    let start = Instant::now();
    let runs = names.iter().map(|name| {
        let (d, tag) = (&d, &tag);
        async move {
            super::floor_container(d, name, tag).await?;
            anyhow::ensure!(super::floor_exec(d, name).await? == 0, "`true` failed");
            anyhow::Ok(ms(start.elapsed()))
        }
    });
    let results = futures_util::future::join_all(runs).await;
    remove_all(&tag).await?;
    let mut times = results.into_iter().collect::<Result<Vec<f64>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times)
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let bare_tag = format!("{t}-nopool");
    let pool_tag = format!("{t}-pool");
    let bare = HttpServer::start(&bare_tag, &state_dir(&bare_tag), &ServerOpts::default()).await?;
    let pooled = HttpServer::start(
        &pool_tag,
        &state_dir(&pool_tag),
        &ServerOpts::default().arg(&format!("--warm-pool={POOL}")),
    )
    .await?;
    wait_members(&pool_tag, POOL).await?;
    // Warm both (image cache, the supervisor volume, the HTTP paths).
    first_results(&bare, &bare_tag, 2, false, 0).await?;
    first_results(&pooled, &pool_tag, 2, false, POOL).await?;

    let seq_bare = first_results(&bare, &bare_tag, SEQUENTIAL, false, 0).await?;
    let seq_pool = first_results(&pooled, &pool_tag, SEQUENTIAL, false, POOL).await?;
    let (v, f) = (pct(&seq_pool, 0.5), pct(&seq_bare, 0.5));
    rows.push(Row {
        name: "new computer -> first result, no pool, p50",
        value: f,
        unit: "ms",
        floor: None,
        target: "(floor below)".into(),
        pass: true,
    });
    rows.push(Row {
        name: "new computer -> first result, pool, p50",
        value: v,
        unit: "ms",
        floor: Some(f),
        target: "<= 0.15x no pool".into(),
        pass: v <= 0.15 * f,
    });

    let burst_bare = first_results(&bare, &bare_tag, BURST, true, 0).await?;
    let burst_pool = first_results(&pooled, &pool_tag, BURST, true, POOL).await?;
    for (name, p) in [
        ("100 at once, no pool, p50", 0.5),
        ("100 at once, no pool, p95", 0.95),
        ("100 at once, no pool, p99", 0.99),
    ] {
        rows.push(Row {
            name,
            value: pct(&burst_bare, p),
            unit: "ms",
            floor: None,
            target: "(floor below)".into(),
            pass: true,
        });
    }
    for (name, p) in [
        ("100 at once, pool of 20, p50", 0.5),
        ("100 at once, pool of 20, p95", 0.95),
        ("100 at once, pool of 20, p99", 0.99),
    ] {
        let (v, f) = (pct(&burst_pool, p), pct(&burst_bare, p));
        let (target, pass) = if p == 0.95 {
            ("<= 0.5x no pool".to_owned(), v <= 0.5 * f)
        } else {
            ("-".to_owned(), true)
        };
        rows.push(Row {
            name,
            value: v,
            unit: "ms",
            floor: Some(f),
            target,
            pass,
        });
    }
    bare.terminate().await?;
    pooled.terminate().await?;
    remove_all(&bare_tag).await?;
    remove_all(&pool_tag).await?;

    // What the engine itself allows. With a pool of 20, the 95th of 100 callers is the
    // 75th of the 80 made on demand: the engine's own time for that, over its time for the
    // 95th of 100, is the best ratio any pool of 20 can reach on this machine.
    let engine_all = engine_burst(t, BURST).await?;
    let engine_rest = engine_burst(t, BURST - POOL).await?;
    let all_p95 = pct(&engine_all, 0.95);
    let rest_p95 = pct(
        &engine_rest,
        (0.95 * BURST as f64 - POOL as f64) / (BURST - POOL) as f64,
    );
    rows.push(Row {
        name: "engine alone: 100 at once (create+start+exec), p95",
        value: all_p95,
        unit: "ms",
        floor: None,
        target: "(floor of the no-pool p95)".into(),
        pass: true,
    });
    rows.push(Row {
        name: "engine alone: 80 at once, the 75th (what a pool of 20 leaves the p95)",
        value: rest_p95,
        unit: "ms",
        floor: Some(all_p95),
        target: "(the best pool p95 / no-pool p95 here)".into(),
        pass: true,
    });
    rows.push(Row {
        name: "100 at once, pool of 20, p95 over the engine's own 75th of 80",
        value: pct(&burst_pool, 0.95),
        unit: "ms",
        floor: Some(rest_p95),
        target: "(reported: how close to the engine)".into(),
        pass: true,
    });
    Ok(())
}

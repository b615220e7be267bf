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
    remove_all(&pool_tag).await
}

//! Issue 18's Docker soak: 100 computers, each its own MCP session over Streamable HTTP,
//! with 1,000 execs in flight at once (10 per computer), three rounds: execs per second,
//! latency p50/p99 next to a warm exec on an idle server (the floor, same run), errors and
//! wrong answers (target 0), and the server's RSS.

use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use tests::*;

use super::wasm::rss_mib;
use super::{Row, ms, pct};

const COMPUTERS: usize = 100;
const PER_COMPUTER: usize = 10;
const ROUNDS: usize = 3;

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let server = HttpServer::start(t, &state_dir(t), &ServerOpts::default()).await?;
    let pid = server.child.id().unwrap_or_default();
    // The floor: a warm exec, one at a time, on an idle server.
    let one = server.legacy_client(None).await?;
    exec(&one, json!({"args": ["true"]})).await?;
    let mut idle = Vec::new();
    for _ in 0..200 {
        let s = Instant::now();
        exec(&one, json!({"args": ["true"]})).await?;
        idle.push(ms(s.elapsed()));
    }
    idle.sort_by(f64::total_cmp);
    let floor = pct(&idle, 0.5);
    one.cancel().await?;

    // 100 sessions, each with its computer (made by its first exec).
    let opened = futures_util::future::join_all((0..COMPUTERS).map(|_| server.legacy_client(None)));
    let mut clients = Vec::new();
    for c in opened.await {
        clients.push(c?);
    }
    let made = futures_util::future::join_all(
        clients
            .iter()
            .map(|c| exec(c, json!({"command": "echo ready"}))),
    )
    .await;
    for m in made {
        m?;
    }
    let rss_before = rss_mib(pid);

    let (mut times, mut errors, mut wrong) = (Vec::new(), 0u32, 0u32);
    let started = Instant::now();
    for round in 0..ROUNDS {
        let calls = clients.iter().enumerate().flat_map(|(i, c)| {
            (0..PER_COMPUTER).map(move |k| async move {
                let want = format!("{round}-{i}-{k}");
                let s = Instant::now();
                let r = exec(c, json!({"args": ["echo", want]})).await;
                (
                    ms(s.elapsed()),
                    r.map(|v| v["stdout"] == format!("{want}\n")),
                )
            })
        });
        for (took, r) in futures_util::future::join_all(calls).await {
            match r {
                Ok(true) => times.push(took),
                Ok(false) => wrong += 1,
                Err(_) => errors += 1,
            }
        }
    }
    let wall = started.elapsed();
    let rss_peak = rss_mib(pid).max(rss_before);
    times.sort_by(f64::total_cmp);
    let total = (COMPUTERS * PER_COMPUTER * ROUNDS) as f64;
    rows.push(Row {
        name: "soak: warm exec, idle server, p50",
        value: floor,
        unit: "ms",
        floor: None,
        target: "(floor below)".into(),
        pass: true,
    });
    rows.push(Row {
        name: "soak: 1000 in flight on 100 computers, execs/s",
        value: total / wall.as_secs_f64(),
        unit: "/s",
        floor: Some(1000.0 / floor),
        target: "reported".into(),
        pass: true,
    });
    for (name, p) in [
        ("soak: 1000 in flight, p50", 0.5),
        ("soak: 1000 in flight, p99", 0.99),
    ] {
        rows.push(Row {
            name,
            value: pct(&times, p),
            unit: "ms",
            floor: Some(floor),
            target: "reported".into(),
            pass: true,
        });
    }
    rows.push(Row {
        name: "soak: errors + wrong answers (3000 execs)",
        value: f64::from(errors + wrong),
        unit: "",
        floor: None,
        target: "0".into(),
        pass: errors + wrong == 0,
    });
    rows.push(Row {
        name: "soak: server RSS with 100 computers",
        value: rss_peak,
        unit: "MiB",
        floor: None,
        target: "reported".into(),
        pass: true,
    });
    futures_util::future::join_all(clients.into_iter().map(|c| c.cancel())).await;
    server.terminate().await?;
    remove_all(t).await
}

//! Benchmark: each figure next to its floor, measured in the same run on the same daemon.
//!
//! `cargo run --release -p tests --bin bench` (needs Docker and debian:bookworm-slim).
//! Floors go straight through the Engine API with bollard: exec create + start + inspect
//! for an exec, create + start + one exec for a new computer. The server under test is the
//! release binary, driven by rmcp's client over stdio and Streamable HTTP.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptions;
use futures_util::StreamExt;
use serde_json::json;
use tests::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const WARM_EXECS: usize = 300;
const COMPUTERS: usize = 10;
const PER_COMPUTER: usize = 20;
const ROUNDS: usize = 3;
const NEW_COMPUTERS: usize = 6;

struct Row {
    name: &'static str,
    value: f64,
    unit: &'static str,
    floor: Option<f64>,
    target: String,
    pass: bool,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn floor_container(d: &bollard::Docker, name: &str, tag: &str) -> Result<()> {
    let body = ContainerCreateBody {
        image: Some("debian:bookworm-slim".into()),
        entrypoint: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done".into(),
        ]),
        labels: Some([("msc-test".to_owned(), tag.to_owned())].into()),
        host_config: Some(bollard::models::HostConfig {
            init: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    d.create_container(
        Some(CreateContainerOptions {
            name: Some(name.into()),
            ..Default::default()
        }),
        body,
    )
    .await?;
    d.start_container(
        name,
        None::<bollard::query_parameters::StartContainerOptions>,
    )
    .await?;
    Ok(())
}

/// One Engine API exec of `true`: create + start (attached, drained) + inspect.
async fn floor_exec(d: &bollard::Docker, container: &str) -> Result<i64> {
    let opts = CreateExecOptions::<String> {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["true".into()]),
        ..Default::default()
    };
    let exec = d.create_exec(container, opts).await?;
    if let StartExecResults::Attached { mut output, .. } = d.start_exec(&exec.id, None).await? {
        while output.next().await.is_some() {}
    }
    let info = d.inspect_exec(&exec.id).await?;
    info.exit_code.context("no exit code")
}

async fn floor_throughput(d: &bollard::Docker, containers: &[String]) -> Result<f64> {
    let t = Instant::now();
    for _ in 0..ROUNDS {
        let calls = containers
            .iter()
            .flat_map(|c| (0..PER_COMPUTER).map(move |_| floor_exec(d, c)));
        futures_util::future::try_join_all(calls).await?;
    }
    Ok((ROUNDS * containers.len() * PER_COMPUTER) as f64 / t.elapsed().as_secs_f64())
}

/// Process start → `initialize` answered, and the idle RSS afterwards.
async fn startup(tag: &str) -> Result<(f64, f64)> {
    let mut times = Vec::new();
    let mut rss = 0.0;
    for _ in 0..15 {
        let mut cmd = command(tag, &state_dir(tag), &ServerOpts::default());
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let t = Instant::now();
        let mut child = cmd.spawn()?;
        let mut stdin = child.stdin.take().context("stdin")?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
        stdin.write_all(format!("{init}\n").as_bytes()).await?;
        out.next_line().await?.context("no initialize answer")?;
        times.push(ms(t.elapsed()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Some(pid) = child.id() {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
            let kb: f64 = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN);
            rss = kb / 1024.0;
        }
        drop(stdin);
        child.wait().await?;
    }
    times.sort_by(f64::total_cmp);
    Ok((pct(&times, 0.5), rss))
}

/// A process spawn floor: `/bin/true` started and reaped.
async fn spawn_floor() -> Result<f64> {
    let mut v = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        tokio::process::Command::new("true").status().await?;
        v.push(ms(t.elapsed()));
    }
    v.sort_by(f64::total_cmp);
    Ok(pct(&v, 0.5))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    if std::env::var_os("MSC_RELEASE").is_none() {
        eprintln!(
            "note: benchmarking the debug server; run with MSC_RELEASE=1 for the release build"
        );
    }
    let d = docker()?;
    let t = tag("bench");
    let mut rows = Vec::new();

    // ---- warm exec latency, stdio vs the Engine API floor ----
    let floor_name = format!("{t}-floor");
    floor_container(&d, &floor_name, &t).await?;
    for _ in 0..20 {
        floor_exec(&d, &floor_name).await?;
    }
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let warm_id = format!("{t}-warm");
    exec(&c, json!({"args": ["true"], "computer_id": warm_id})).await?;
    for _ in 0..20 {
        exec(&c, json!({"args": ["true"], "computer_id": warm_id})).await?;
    }
    // Interleaved, so both see the same machine: one floor exec, then one of ours.
    let mut floor = Vec::with_capacity(WARM_EXECS);
    let mut ours = Vec::with_capacity(WARM_EXECS);
    for _ in 0..WARM_EXECS {
        let s = Instant::now();
        floor_exec(&d, &floor_name).await?;
        floor.push(ms(s.elapsed()));
        let s = Instant::now();
        exec(&c, json!({"args": ["true"], "computer_id": warm_id})).await?;
        ours.push(ms(s.elapsed()));
    }
    floor.sort_by(f64::total_cmp);
    ours.sort_by(f64::total_cmp);
    for (name, p) in [
        ("warm exec `true`, stdio, p50", 0.5),
        ("warm exec `true`, stdio, p99", 0.99),
    ] {
        let (v, f) = (pct(&ours, p), pct(&floor, p));
        rows.push(Row {
            name,
            value: v,
            unit: "ms",
            floor: Some(f),
            target: "<= 1.15x floor".into(),
            pass: v <= 1.15 * f,
        });
    }

    // ---- new computer -> first result ----
    let mut floor_new = Vec::new();
    for i in 0..NEW_COMPUTERS {
        let name = format!("{t}-fnew{i}");
        let s = Instant::now();
        floor_container(&d, &name, &t).await?;
        floor_exec(&d, &name).await?;
        floor_new.push(ms(s.elapsed()));
    }
    let mut ours_new = Vec::new();
    for i in 0..NEW_COMPUTERS {
        let s = Instant::now();
        exec(
            &c,
            json!({"args": ["true"], "computer_id": format!("{t}-new{i}")}),
        )
        .await?;
        ours_new.push(ms(s.elapsed()));
    }
    floor_new.sort_by(f64::total_cmp);
    ours_new.sort_by(f64::total_cmp);
    let (v, f) = (pct(&ours_new, 0.5), pct(&floor_new, 0.5));
    rows.push(Row {
        name: "new computer -> first result, p50",
        value: v,
        unit: "ms",
        floor: Some(f),
        target: "<= 1.10x floor".into(),
        pass: v <= 1.10 * f,
    });

    // ---- stopping a computer (restart = stop + start; stop must not wait out a grace) ----
    let s = Instant::now();
    let r = call(&c, "computer_restart", json!({"computer_id": warm_id})).await?;
    anyhow::ensure!(r.is_error != Some(true), "restart failed: {:?}", r.content);
    let restart = ms(s.elapsed());
    rows.push(Row {
        name: "computer_restart (stop + start)",
        value: restart,
        unit: "ms",
        floor: None,
        target: "<= 500 ms".into(),
        pass: restart <= 500.0,
    });
    let s = Instant::now();
    d.stop_container(
        &format!("kilntainer-{t}-new0"),
        None::<bollard::query_parameters::StopContainerOptions>,
    )
    .await?;
    let stop = ms(s.elapsed());
    rows.push(Row {
        name: "stop a computer (Engine API stop)",
        value: stop,
        unit: "ms",
        floor: None,
        target: "<= 500 ms".into(),
        pass: stop <= 500.0,
    });
    c.cancel().await?;

    // ---- throughput: 10 computers x 20 concurrent execs, HTTP vs the floor ----
    let mut floor_cs = Vec::new();
    for i in 0..COMPUTERS {
        let name = format!("{t}-tput{i}");
        floor_container(&d, &name, &t).await?;
        floor_cs.push(name);
    }
    floor_throughput(&d, &floor_cs).await?;
    let floor_tput = floor_throughput(&d, &floor_cs).await?;
    let s = HttpServer::start(&t, &state_dir(&t), &ServerOpts::default()).await?;
    // Raw HTTP/1.1 requests in the stateless revision: rmcp's client sends one request at a
    // time per transport, which would measure the client, not the server.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    let ids: Vec<String> = (0..COMPUTERS).map(|i| format!("{t}-h{i}")).collect();
    let post = |id: String| {
        let http = http.clone();
        let url = s.url.clone();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "terminal_execute", "arguments": {"args": ["true"], "computer_id": id},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
            let resp: serde_json::Value = http
                .post(&url)
                .header("content-type", "application/json")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "terminal_execute")
                .body(body.to_string())
                .send()
                .await?
                .json()
                .await?;
            anyhow::ensure!(
                resp["result"]["structuredContent"]["exit_code"] == 0,
                "exec failed: {resp}"
            );
            anyhow::Ok(())
        }
    };
    for id in &ids {
        post(id.clone()).await?;
    }
    let run_http = || async {
        let t0 = Instant::now();
        for _ in 0..ROUNDS {
            let calls = ids
                .iter()
                .flat_map(|id| (0..PER_COMPUTER).map(|_| post(id.clone())));
            futures_util::future::try_join_all(calls).await?;
        }
        anyhow::Ok((ROUNDS * COMPUTERS * PER_COMPUTER) as f64 / t0.elapsed().as_secs_f64())
    };
    run_http().await?;
    let ours_tput = run_http().await?;
    rows.push(Row {
        name: "10 computers x 20 concurrent, HTTP",
        value: ours_tput,
        unit: "exec/s",
        floor: Some(floor_tput),
        target: ">= 0.90x floor".into(),
        pass: ours_tput >= 0.9 * floor_tput,
    });
    s.terminate().await?;

    // ---- start-up and idle memory ----
    let (start_ms, rss) = startup(&t).await?;
    let spawn = spawn_floor().await?;
    rows.push(Row {
        name: "process start -> initialized, p50",
        value: start_ms,
        unit: "ms",
        floor: Some(spawn),
        target: "<= 30 ms".into(),
        pass: start_ms <= 30.0,
    });
    rows.push(Row {
        name: "idle RSS after initialize",
        value: rss,
        unit: "MiB",
        floor: None,
        target: "<= 15 MiB".into(),
        pass: rss <= 15.0,
    });

    remove_all(&t).await?;

    println!(
        "{:<40} {:>10} {:>8} {:>10} {:>7}  {:<16} ok",
        "metric", "value", "unit", "floor", "ratio", "target"
    );
    let mut all = true;
    for r in &rows {
        let (floor, ratio) = match r.floor {
            Some(f) => (format!("{f:.2}"), format!("{:.2}x", r.value / f)),
            None => ("-".into(), "-".into()),
        };
        all &= r.pass;
        println!(
            "{:<40} {:>10.2} {:>8} {:>10} {:>7}  {:<16} {}",
            r.name,
            r.value,
            r.unit,
            floor,
            ratio,
            r.target,
            if r.pass { "yes" } else { "NO" }
        );
    }
    println!(
        "{}",
        if all {
            "all targets met"
        } else {
            "some targets missed"
        }
    );
    Ok(())
}

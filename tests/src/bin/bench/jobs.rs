//! Jobs on Docker (issue 14): a poll that returns new output and a `yield_ms: 0` start,
//! each next to a warm exec of `true` on the same server; output throughput of a job read
//! by polling, with the server's RSS; 200 concurrent jobs on 10 computers polled round
//! robin.

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::json;
use tests::*;

use super::wasm::{rss_mib, server_pid_of};
use super::{Row, ms, pct};

const RUNS: usize = 300;
const GIB: u64 = 1 << 30;

/// The floor: 1 GiB of `yes` streamed straight out of the computer by one attached Engine
/// API exec (bollard), MB/s.
async fn stream_floor(container: &str) -> Result<f64> {
    use bollard::container::LogOutput;
    use bollard::exec::{CreateExecOptions, StartExecResults};
    use futures_util::StreamExt;
    let d = docker()?;
    let opts = CreateExecOptions::<String> {
        attach_stdout: Some(true),
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            format!("yes | head -c {GIB}"),
        ]),
        ..Default::default()
    };
    let exec = d
        .create_exec(&format!("kilntainer-{container}"), opts)
        .await?;
    let s = Instant::now();
    let mut n = 0u64;
    if let StartExecResults::Attached { mut output, .. } = d.start_exec(&exec.id, None).await? {
        while let Some(item) = output.next().await {
            if let Ok(LogOutput::StdOut { message }) = item {
                n += message.len() as u64;
            }
        }
    }
    anyhow::ensure!(n == GIB, "the floor read {n} bytes");
    Ok(n as f64 / s.elapsed().as_secs_f64() / 1e6)
}

/// The row of a 1 GiB read: `got` bytes read (the rest, `dropped`, counted as dropped) in
/// `secs`, next to the `floor`.
fn gib_row(
    rows: &mut Vec<Row>,
    name: &'static str,
    (got, dropped, secs): (u64, u64, f64),
    floor: f64,
) -> Result<()> {
    anyhow::ensure!(
        got + dropped == GIB,
        "{name}: {got} read + {dropped} dropped != 1 GiB"
    );
    rows.push(Row {
        name,
        value: got as f64 / secs / 1e6,
        unit: "MB/s",
        floor: Some(floor),
        target: ">= 100 MB/s".into(),
        pass: got as f64 / secs >= 100e6,
    });
    Ok(())
}

/// The 1 GiB again, read by a raw JSON-RPC client on the server's stdio (no SDK: each
/// answer parsed whole with `serde_json`, its `structuredContent.stdout` counted), and the
/// cost of that parse alone for one full poll: what a client pays per byte whatever the
/// server does (the answer carries the output twice, JSON-escaped, as SPEC §3.5 says).
async fn raw_rows(t: &str, floor: f64, rows: &mut Vec<Row>) -> Result<()> {
    use super::channel::Raw;
    let rt = format!("{t}r");
    let mut raw = Raw::start(&rt, &ServerOpts::default().arg("--tools=jobs")).await?;
    let id = format!("{rt}-jobs");
    let call = |name: &str, args: serde_json::Value| json!({"name": name, "arguments": args});
    let parse = |line: &str| -> Result<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(line)?;
        v.pointer("/result/structuredContent")
            .cloned()
            .with_context(|| format!("no structuredContent: {:.300}", line))
    };
    let r = parse(
        &raw.request(
            "tools/call",
            call("terminal_execute", json!({"command": format!("yes | head -c {GIB}"), "yield_ms": 0, "computer_id": id, "timeout": 600})),
        )
        .await?,
    )?;
    let j = r["job_id"].as_str().context("no job id")?.to_owned();
    let s = Instant::now();
    let (mut got, mut dropped, mut biggest) = (0u64, 0u64, String::new());
    loop {
        let line = raw
            .request(
                "tools/call",
                call(
                    "terminal_job",
                    json!({"job_id": j, "computer_id": id, "wait_ms": 5000}),
                ),
            )
            .await?;
        let r = parse(&line)?;
        got += r["stdout"].as_str().map_or(0, |o| o.len() as u64);
        dropped += r["dropped_bytes"].as_u64().unwrap_or(0);
        if line.len() > biggest.len() {
            biggest = line;
        }
        if r["running"] == false {
            break;
        }
    }
    let secs = s.elapsed().as_secs_f64();
    gib_row(
        rows,
        "jobs: 1 GiB by polling, raw JSON-RPC client",
        (got, dropped, secs),
        floor,
    )?;
    raw.stop().await?;
    // The client's parse alone, of the largest answer (a full poll).
    let mut parses = Vec::new();
    for _ in 0..20 {
        let s = Instant::now();
        let v: serde_json::Value = serde_json::from_str(&biggest)?;
        parses.push(ms(s.elapsed()));
        anyhow::ensure!(v.pointer("/result/structuredContent/stdout").is_some());
    }
    let mut typed = Vec::new();
    for _ in 0..20 {
        let s = Instant::now();
        let m: rmcp::model::ServerJsonRpcMessage = serde_json::from_str(&biggest)?;
        typed.push(ms(s.elapsed()));
        drop(m);
    }
    parses.sort_by(f64::total_cmp);
    typed.sort_by(f64::total_cmp);
    let poll_mb = 2.0 * 1_048_576.0 / 1e6;
    for (name, v) in [
        (
            "jobs: parse of one full poll answer (serde_json Value)",
            pct(&parses, 0.5),
        ),
        (
            "jobs: parse of one full poll answer (rmcp's message types)",
            pct(&typed, 0.5),
        ),
    ] {
        rows.push(Row {
            name,
            value: v,
            unit: "ms",
            floor: None,
            target: format!(
                "reported ({:.0} MB/s at most, {} bytes)",
                poll_mb / (v / 1e3),
                biggest.len()
            ),
            pass: true,
        });
    }
    Ok(())
}

/// The 1 GiB once more, read by polling the executor API's byte read (`POST
/// /v1/computers/{id}/jobs/{job_id}/read`, the read the gateway's tasks use): each answer
/// is the job's new output as base64, decoded by the client. No MCP tool result, so no
/// output carried twice and JSON-escaped.
async fn api_rows(t: &str, floor: f64, rows: &mut Vec<Row>) -> Result<()> {
    use base64::Engine as _;
    const SECRET: &str = "bench-jobs-executor-secret-0123456789abcd";
    const TEAM: &str = "bench-jobs";
    let at = format!("{t}a");
    let x =
        HttpServer::start_executor(&at, &state_dir(&at), &ServerOpts::default(), SECRET).await?;
    let http = reqwest::Client::new();
    let id = format!("{at}-jobs");
    let started: serde_json::Value = http
        .post(format!("{}/v1/computers/{id}/exec", x.base))
        .bearer_auth(executor_token(SECRET, TEAM)?)
        .json(&json!({"command": format!("yes | head -c {GIB}"), "yield_ms": 0, "timeout": 600}))
        .send()
        .await?
        .json()
        .await?;
    let j = started["job_id"]
        .as_str()
        .with_context(|| format!("no job id: {started}"))?
        .to_owned();
    let url = format!("{}/v1/computers/{id}/jobs/{j}/read", x.base);
    let s = Instant::now();
    let (mut got, mut dropped) = (0u64, 0u64);
    loop {
        let body = http
            .post(&url)
            .bearer_auth(executor_token(SECRET, TEAM)?)
            .json(&json!({"wait_ms": 5000}))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        let r: serde_json::Value = serde_json::from_slice(&body)?;
        let out = r["stdout"].as_str().with_context(|| format!("{r:.300}"))?;
        got += base64::engine::general_purpose::STANDARD
            .decode(out.as_bytes())?
            .len() as u64;
        dropped += r["dropped_bytes"].as_u64().unwrap_or(0);
        if r["running"] == false {
            break;
        }
    }
    let secs = s.elapsed().as_secs_f64();
    gib_row(
        rows,
        "jobs: 1 GiB by polling the executor API's byte read (base64)",
        (got, dropped, secs),
        floor,
    )?;
    rows.push(Row {
        name: "jobs: bytes dropped while reading 1 GiB by the byte read",
        value: dropped as f64 / 1e6,
        unit: "MB",
        floor: None,
        target: "reported".into(),
        pass: true,
    });
    x.terminate().await?;
    Ok(())
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let opts = ServerOpts::default().arg("--tools=jobs");
    let c = stdio_client(t, &state_dir(t), &opts).await?;
    let pid = server_pid_of(t)?;
    let id = format!("{t}-jobs");
    for _ in 0..20 {
        exec(&c, json!({"args": ["true"], "computer_id": id})).await?;
    }
    // A job that always has something new: a tick per millisecond.
    let r = exec(
        &c,
        json!({"command": "while :; do echo tick; sleep 0.001; done", "yield_ms": 0, "computer_id": id, "timeout": 600}),
    )
    .await?;
    let ticker = r["job_id"].as_str().context("no job id")?.to_owned();
    let (mut warm, mut poll, mut start) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..RUNS {
        for step in 0..3 {
            let s = Instant::now();
            match (i + step) % 3 {
                0 => {
                    exec(&c, json!({"args": ["true"], "computer_id": id})).await?;
                    warm.push(ms(s.elapsed()));
                }
                1 => {
                    let r = job(
                        &c,
                        json!({"job_id": ticker, "computer_id": id, "wait_ms": 1000}),
                    )
                    .await?;
                    poll.push(ms(s.elapsed()));
                    anyhow::ensure!(
                        r["stdout"].as_str().is_some_and(|o| o.contains("tick")),
                        "{r}"
                    );
                }
                _ => {
                    let r = exec(&c, json!({"args": ["sleep", "5"], "yield_ms": 0, "computer_id": format!("{id}-y")})).await?;
                    start.push(ms(s.elapsed()));
                    let j = r["job_id"].as_str().context("no job id")?;
                    // End it without waiting, so the 64-job cap is never near.
                    let mut r =
                        job(&c, json!({"job_id": j, "signal": "KILL", "wait_ms": 0})).await?;
                    while r["running"] == true {
                        r = job(&c, json!({"job_id": j, "wait_ms": 5000})).await?;
                    }
                }
            }
        }
    }
    for v in [&mut warm, &mut poll, &mut start] {
        v.sort_by(f64::total_cmp);
    }
    let w = pct(&warm, 0.5);
    for (name, v) in [
        ("jobs: poll with new output, p50", pct(&poll, 0.5)),
        ("jobs: yield_ms 0 start, p50", pct(&start, 0.5)),
    ] {
        rows.push(Row {
            name,
            value: v,
            unit: "ms",
            floor: Some(w),
            target: "<= 1.2x warm exec".into(),
            pass: v <= 1.2 * w,
        });
    }
    job(
        &c,
        json!({"job_id": ticker, "signal": "KILL", "wait_ms": 0}),
    )
    .await?;

    // 1 GiB of `yes` read by polling.
    let r = exec(
        &c,
        json!({"command": format!("yes | head -c {GIB}"), "yield_ms": 0, "computer_id": id, "timeout": 600}),
    )
    .await?;
    let j = r["job_id"].as_str().context("no job id")?.to_owned();
    let s = Instant::now();
    let (mut got, mut dropped, mut peak) = (0u64, 0u64, 0f64);
    loop {
        let r = job(&c, json!({"job_id": j, "computer_id": id, "wait_ms": 5000})).await?;
        got += r["stdout"].as_str().map_or(0, |o| o.len() as u64);
        dropped += r["dropped_bytes"].as_u64().unwrap_or(0);
        peak = peak.max(rss_mib(pid));
        if r["running"] == false {
            break;
        }
    }
    let secs = s.elapsed().as_secs_f64();
    let floor = stream_floor(&format!("{t}-jobs")).await?;
    gib_row(
        rows,
        "jobs: 1 GiB of output read by polling",
        (got, dropped, secs),
        floor,
    )?;
    raw_rows(t, floor, rows).await?;
    api_rows(t, floor, rows).await?;
    // The reader's own speed, with no producer competing for the CPUs: a full buffer.
    let r = exec(
        &c,
        json!({"command": "yes | head -c 8000000", "yield_ms": 0, "computer_id": id}),
    )
    .await?;
    let j = r["job_id"].as_str().context("no job id")?.to_owned();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let s = Instant::now();
    let mut read = r["stdout"].as_str().map_or(0, |o| o.len() as u64);
    loop {
        let r = job(&c, json!({"job_id": j, "computer_id": id, "wait_ms": 5000})).await?;
        read += r["stdout"].as_str().map_or(0, |o| o.len() as u64);
        if r["running"] == false {
            break;
        }
    }
    anyhow::ensure!(read == 8_000_000, "read {read} of 8000000");
    rows.push(Row {
        name: "jobs: reading a full 8 MB buffer",
        value: read as f64 / s.elapsed().as_secs_f64() / 1e6,
        unit: "MB/s",
        floor: Some(floor),
        target: "reported".into(),
        pass: true,
    });
    rows.push(Row {
        name: "jobs: bytes dropped while reading 1 GiB",
        value: dropped as f64 / 1e6,
        unit: "MB",
        floor: None,
        target: "reported".into(),
        pass: true,
    });
    rows.push(Row {
        name: "jobs: server RSS peak during the 1 GiB",
        value: peak,
        unit: "MiB",
        floor: None,
        target: "bounded (< 100 MiB)".into(),
        pass: peak < 100.0,
    });

    // 200 concurrent jobs on 10 computers, polled round robin.
    let per: usize = 20;
    let want: u64 = (1..=20_000u64)
        .map(|n| n.to_string().len() as u64 + 1)
        .sum();
    let mut jobs = Vec::new();
    for k in 0..10 {
        let cid = format!("{t}-many{k}");
        exec(&c, json!({"args": ["true"], "computer_id": cid})).await?;
        for _ in 0..per {
            let r = exec(&c, json!({"command": "for i in 1 2 3 4; do sleep 0.2; done; seq 1 20000", "yield_ms": 0, "computer_id": cid})).await?;
            jobs.push((
                cid.clone(),
                r["job_id"].as_str().context("no job id")?.to_owned(),
                0u64,
                false,
            ));
        }
    }
    let (mut errors, mut lost) = (0u64, 0u64);
    let s = Instant::now();
    while jobs.iter().any(|j| !j.3) {
        for j in jobs.iter_mut().filter(|j| !j.3) {
            match job(&c, json!({"job_id": j.1, "computer_id": j.0, "wait_ms": 0})).await {
                Ok(r) => {
                    j.2 += r["stdout"].as_str().map_or(0, |o| o.len() as u64);
                    lost += r["dropped_bytes"].as_u64().unwrap_or(0);
                    j.3 = r["running"] == false;
                }
                Err(_) => errors += 1,
            }
        }
        anyhow::ensure!(s.elapsed().as_secs() < 300, "the 200 jobs never ended");
    }
    let short = jobs.iter().filter(|j| j.2 != want).count() as u64;
    rows.push(Row {
        name: "jobs: 200 on 10 computers, errors+lost",
        value: (errors + lost + short) as f64,
        unit: "count",
        floor: None,
        target: "0".into(),
        pass: errors + lost + short == 0,
    });
    rows.push(Row {
        name: "jobs: 200 on 10 computers, server RSS",
        value: rss_mib(pid),
        unit: "MiB",
        floor: None,
        target: "reported".into(),
        pass: true,
    });
    c.cancel().await?;
    Ok(())
}

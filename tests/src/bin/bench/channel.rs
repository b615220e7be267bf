//! Issue 18: a warm exec of `true` over the direct supervisor channel and over the relay,
//! each a raw round trip (JSON-RPC lines on the server's stdio, no SDK in the way, timed by
//! a blocking client so that no async runtime's hand-offs are counted), next to
//! the floor: a fork+exec of `true` inside the same container, timed by the supervisor
//! (`msc-supervisor spawn-floor`).

use std::time::Instant;

use anyhow::{Context, Result};
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use serde_json::json;
use tests::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Row, ms, pct};

const RUNS: usize = 500;

/// The raw clients' `initialize` parameters, and the notification that follows it.
fn initialize_params() -> serde_json::Value {
    json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
}
const INITIALIZED: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

/// A server on stdio driven with raw JSON-RPC lines.
pub(super) struct Raw {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    out: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next: u64,
}

impl Raw {
    pub(super) async fn start(t: &str, opts: &ServerOpts) -> Result<Self> {
        let mut cmd = command(t, &state_dir(t), opts);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(log_file(t));
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().context("stdin")?;
        let out = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut raw = Self {
            child,
            stdin,
            out,
            next: 1,
        };
        raw.request("initialize", initialize_params()).await?;
        raw.stdin.write_all(INITIALIZED).await?;
        Ok(raw)
    }

    pub(super) async fn request(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<String> {
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        loop {
            let answer = self
                .out
                .next_line()
                .await?
                .context("the server closed stdout")?;
            // Notifications (progress, logs) may come first.
            if answer.contains(&format!("\"id\":{id}")) {
                return Ok(answer);
            }
        }
    }

    pub(super) async fn stop(mut self) -> Result<()> {
        drop(self.stdin);
        self.child.wait().await?;
        Ok(())
    }
}

/// The same raw client, blocking: one thread writes a request and blocks reading its
/// answer, so an async runtime's own hand-offs (its poller waking the awaiting task on
/// another thread) are not counted as the server's. The channel's rows use it.
struct Blocking {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::io::BufReader<std::process::ChildStdout>,
    next: u64,
    line: String,
}

impl Blocking {
    fn start(t: &str, opts: &ServerOpts) -> Result<Self> {
        let mut cmd = command(t, &state_dir(t), opts);
        let cmd = cmd
            .as_std_mut()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(log_file(t));
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().context("stdin")?;
        let out = std::io::BufReader::new(child.stdout.take().context("stdout")?);
        let mut raw = Self {
            child,
            stdin,
            out,
            next: 1,
            line: String::new(),
        };
        raw.request("initialize", initialize_params())?;
        use std::io::Write;
        raw.stdin.write_all(INITIALIZED)?;
        Ok(raw)
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> Result<&str> {
        use std::io::{BufRead, Write};
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin.write_all(format!("{line}\n").as_bytes())?;
        let want = format!("\"id\":{id}");
        loop {
            self.line.clear();
            anyhow::ensure!(
                self.out.read_line(&mut self.line)? > 0,
                "the server closed stdout"
            );
            // Notifications (progress, logs) may come first.
            if self.line.contains(&want) {
                return Ok(&self.line);
            }
        }
    }

    fn exec_true(&mut self, computer_id: &str) -> Result<()> {
        let answer = self.request(
            "tools/call",
            json!({"name": "terminal_execute", "arguments": {"args": ["true"], "computer_id": computer_id}}),
        )?;
        anyhow::ensure!(answer.contains("\"exit_code\":0"), "{answer}");
        Ok(())
    }

    fn stop(mut self) -> Result<()> {
        drop(self.stdin);
        self.child.wait()?;
        Ok(())
    }
}

/// The supervisor's own timing of `true` spawned inside `container` (ms, median).
async fn spawn_floor(d: &bollard::Docker, container: &str) -> Result<f64> {
    let opts = CreateExecOptions::<String> {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec![
            "/.msc/msc-supervisor".into(),
            "spawn-floor".into(),
            "500".into(),
        ]),
        ..Default::default()
    };
    let exec = d.create_exec(container, opts).await?;
    let mut text = String::new();
    if let StartExecResults::Attached { mut output, .. } = d.start_exec(&exec.id, None).await? {
        while let Some(item) = output.next().await {
            text.push_str(&item?.to_string());
        }
    }
    let us: f64 = text
        .trim()
        .parse()
        .with_context(|| format!("spawn-floor said {text:?}"))?;
    Ok(us / 1000.0)
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let d = docker()?;
    let (di, ri) = (format!("{t}-chand"), format!("{t}-chanr"));
    let (direct, relay, mut dv, mut rv) = {
        let (t, di, ri) = (t.to_owned(), di.clone(), ri.clone());
        tokio::task::spawn_blocking(move || -> Result<_> {
            let mut direct = Blocking::start(&t, &ServerOpts::default())?;
            let mut relay =
                Blocking::start(&t, &ServerOpts::default().arg("--supervisor-channel=relay"))?;
            for _ in 0..50 {
                direct.exec_true(&di)?;
                relay.exec_true(&ri)?;
            }
            let (mut dv, mut rv) = (Vec::with_capacity(RUNS), Vec::with_capacity(RUNS));
            for i in 0..RUNS * 2 {
                let s = Instant::now();
                if i % 2 == 0 {
                    direct.exec_true(&di)?;
                    dv.push(ms(s.elapsed()));
                } else {
                    relay.exec_true(&ri)?;
                    rv.push(ms(s.elapsed()));
                }
            }
            Ok((direct, relay, dv, rv))
        })
        .await??
    };
    let floor = spawn_floor(&d, &format!("kilntainer-{di}")).await?;
    dv.sort_by(f64::total_cmp);
    rv.sort_by(f64::total_cmp);
    let (d50, d99, r50) = (pct(&dv, 0.5), pct(&dv, 0.99), pct(&rv, 0.5));
    rows.push(Row {
        name: "warm exec `true`, direct channel, raw stdio, p50",
        value: d50,
        unit: "ms",
        floor: Some(floor),
        target: "<= 1.0 ms".into(),
        pass: d50 <= 1.0,
    });
    rows.push(Row {
        name: "warm exec `true`, direct channel, raw stdio, p99",
        value: d99,
        unit: "ms",
        floor: Some(floor),
        target: "(reported)".into(),
        pass: true,
    });
    rows.push(Row {
        name: "warm exec `true`, relay, raw stdio, p50",
        value: r50,
        unit: "ms",
        floor: Some(floor),
        target: "direct <= relay".into(),
        pass: d50 <= r50,
    });
    tokio::task::spawn_blocking(move || -> Result<()> {
        direct.stop()?;
        relay.stop()
    })
    .await??;
    Ok(())
}

//! WASM computers (issue 4): warm exec and pipelines through MCP stdio next to the stdio
//! round-trip floor (`ping`) and the reference implementation's WebAssembly backend (the
//! upstream Python package, when installed), first exec after start, cold compile, and
//! the memory of 100 idle computers, and 500 (issue 18's soak: RSS per computer, each
//! still answering).

use std::time::Instant;

use anyhow::{Context, Result};
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use tests::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Row, ms, pct};

const RUNS: usize = 400;

/// Where the reference implementation lives (a venv with the upstream PyPI package:
/// `python3 -m venv V && V/bin/pip install --ignore-requires-python mcp-sandbox-computer-vm-for-ai wasmtime`).
fn reference() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("MSC_REFERENCE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/cache/msc/refpy/bin/mcp-sandbox-computer-vm-for-ai".into());
    p.is_file().then_some(p)
}

async fn p50_of(c: &Client, args: serde_json::Value, n: usize) -> Result<f64> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let s = Instant::now();
        let r = exec(c, args.clone()).await?;
        v.push(ms(s.elapsed()));
        anyhow::ensure!(r["exit_code"] == 0, "{r}");
    }
    v.sort_by(f64::total_cmp);
    Ok(pct(&v, 0.5))
}

async fn ping_p50(c: &Client, n: usize) -> Result<f64> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let s = Instant::now();
        c.peer()
            .send_request(rmcp::model::ClientRequest::PingRequest(Default::default()))
            .await?;
        v.push(ms(s.elapsed()));
    }
    v.sort_by(f64::total_cmp);
    Ok(pct(&v, 0.5))
}

/// Process start → the first exec's result (`command`, printing `expect`), on a warm
/// compiled-module cache.
async fn first_exec(
    t: &str,
    cache: &std::path::Path,
    opts: &ServerOpts,
    command_line: &str,
    expect: &str,
) -> Result<f64> {
    let mut cmd = command(t, &state_dir(t), opts);
    cmd.env("MSC_WASM_CACHE_DIR", cache)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let s = Instant::now();
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut out = BufReader::new(child.stdout.take().context("stdout")?).lines();
    for l in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "terminal_execute", "arguments": {"command": command_line, "timeout": 300}}}),
    ] {
        stdin.write_all(format!("{l}\n").as_bytes()).await?;
    }
    while let Some(line) = out.next_line().await? {
        if line.contains(r#""id":2"#) {
            anyhow::ensure!(line.contains(expect), "{line}");
            break;
        }
    }
    let took = ms(s.elapsed());
    drop(stdin);
    child.wait().await?;
    Ok(took)
}

pub(super) fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let c = stdio_client(t, &state_dir(t), &wasm_opts()).await?;
    let echo = json!({"command": "echo hi"});
    let echo_args = json!({"args": ["echo", "hi"]});
    let one = json!({"args": ["seq", "1"]});
    let pipeline = json!({"command": "seq 100 | sort -r | head -n 1"});
    for _ in 0..30 {
        exec(&c, echo.clone()).await?;
        exec(&c, pipeline.clone()).await?;
    }
    let floor = ping_p50(&c, RUNS).await?;
    // `command` and `args` echo interleaved, so both see the same machine.
    let (mut ev, mut eav) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        for (args, into) in [(&echo, &mut ev), (&echo_args, &mut eav)] {
            let s = Instant::now();
            let r = exec(&c, args.clone()).await?;
            into.push(ms(s.elapsed()));
            anyhow::ensure!(r["exit_code"] == 0, "{r}");
        }
    }
    ev.sort_by(f64::total_cmp);
    eav.sort_by(f64::total_cmp);
    let (e50, ea50) = (pct(&ev, 0.5), pct(&eav, 0.5));
    let a50 = p50_of(&c, one.clone(), RUNS).await?;
    let p50 = p50_of(&c, pipeline.clone(), RUNS / 2).await?;
    rows.push(Row {
        name: "wasm: warm `echo hi` (command, builtin), p50",
        value: e50,
        unit: "ms",
        floor: Some(floor),
        target: "<= 1 ms".into(),
        pass: e50 <= 1.0,
    });
    rows.push(Row {
        name: "wasm: warm args [seq, 1] (one instance), p50",
        value: a50,
        unit: "ms",
        floor: Some(floor),
        target: "<= 1 ms".into(),
        pass: a50 <= 1.0,
    });
    rows.push(Row {
        name: "wasm: 3-stage pipeline (3 instances), p50",
        value: p50,
        unit: "ms",
        floor: Some(floor),
        target: "<= 3 ms".into(),
        pass: p50 <= 3.0,
    });
    // The reference implementation's WebAssembly backend, same machine, same client.
    match reference() {
        Some(bin) => {
            let mut cmd = tokio::process::Command::new(bin);
            cmd.args(["--backend", "go_busybox"])
                .kill_on_drop(true)
                .stderr(std::process::Stdio::null());
            let (transport, _) = TokioChildProcess::builder(cmd).spawn()?;
            let r = rmcp::model::ClientConfig::default()
                .serve(transport)
                .await?;
            for _ in 0..20 {
                exec(&r, echo_args.clone()).await?;
            }
            let ref50 = p50_of(&r, echo_args.clone(), RUNS / 2).await?;
            r.cancel().await?;
            rows.push(Row {
                name: "wasm: reference go_busybox [echo, hi], p50",
                value: ref50,
                unit: "ms",
                floor: Some(ea50),
                target: ">= 10x ours".into(),
                pass: ref50 >= 10.0 * ea50,
            });
        }
        None => {
            eprintln!(
                "reference implementation not installed (see bench/wasm.rs reference()); its row is not run"
            );
            rows.push(Row {
                name: "wasm: reference go_busybox (NOT RUN)",
                value: f64::NAN,
                unit: "ms",
                floor: None,
                target: ">= 10x ours".into(),
                pass: false,
            });
        }
    }
    // 100 idle computers.
    for i in 0..100 {
        exec(
            &c,
            json!({"computer_id": format!("{t}-idle{i}"), "command": "echo hi > /tmp/f"}),
        )
        .await?;
    }
    let server_pid = server_pid_of(t)?;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let rss = rss_mib(server_pid);
    rows.push(Row {
        name: "wasm: RSS with 100 idle computers",
        value: rss,
        unit: "MiB",
        floor: None,
        target: "<= 40 MiB".into(),
        pass: rss <= 40.0,
    });
    // Issue 18's soak: 500 computers in one server, each still answering.
    for i in 100..500 {
        exec(
            &c,
            json!({"computer_id": format!("{t}-idle{i}"), "command": "echo hi > /tmp/f"}),
        )
        .await?;
    }
    let mut wrong = 0;
    for i in 0..500 {
        let r = exec(
            &c,
            json!({"computer_id": format!("{t}-idle{i}"), "command": "cat /tmp/f"}),
        )
        .await;
        if !r.is_ok_and(|r| r["stdout"] == "hi\n") {
            wrong += 1;
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let rss500 = rss_mib(server_pid);
    rows.push(Row {
        name: "wasm soak: RSS with 500 computers",
        value: rss500,
        unit: "MiB",
        floor: Some(rss),
        target: "reported".into(),
        pass: true,
    });
    rows.push(Row {
        name: "wasm soak: RSS per computer (100 -> 500)",
        value: (rss500 - rss) * 1024.0 / 400.0,
        unit: "KiB",
        floor: None,
        target: "reported".into(),
        pass: true,
    });
    rows.push(Row {
        name: "wasm soak: 500 computers, wrong answers",
        value: f64::from(wrong),
        unit: "",
        floor: None,
        target: "0".into(),
        pass: wrong == 0,
    });
    c.cancel().await?;
    // First exec after start (warm cache), and a cold compile for reference.
    let cache = wasm_cache_dir();
    let mut firsts = Vec::new();
    for _ in 0..7 {
        firsts.push(first_exec(t, &cache, &wasm_opts(), "echo hi | tr a-z A-Z", "HI\\n").await?);
    }
    firsts.sort_by(f64::total_cmp);
    let first = pct(&firsts, 0.5);
    let spawn = super::spawn_floor().await?;
    rows.push(Row {
        name: "wasm: process start -> first exec, p50",
        value: first,
        unit: "ms",
        floor: Some(spawn),
        target: "<= 100 ms".into(),
        pass: first <= 100.0,
    });
    let cold = state_dir(&format!("{t}-cold-cache"));
    let _ = std::fs::remove_dir_all(&cold);
    let cold_ms = first_exec(t, &cold, &wasm_opts(), "echo hi | tr a-z A-Z", "HI\\n").await?;
    rows.push(Row {
        name: "wasm: first start on a machine (compile)",
        value: cold_ms,
        unit: "ms",
        floor: Some(first),
        target: "reported".into(),
        pass: true,
    });
    python_rows(t, a50, first, rows).await
}

/// `python3` (issue 16): warm `python3 -c 'print(1)'` next to one warm toolbox instance
/// (`seq_p50`), and process start → its first result on a warm compiled cache next to the
/// toolbox's first exec (`first`).
async fn python_rows(t: &str, seq_p50: f64, first: f64, rows: &mut Vec<Row>) -> Result<()> {
    let t = &format!("{t}-py");
    let opts = python_opts();
    let c = stdio_client(t, &state_dir(t), &opts).await?;
    let print1 = json!({"command": "python3 -c 'print(1)'"});
    for _ in 0..5 {
        exec(&c, print1.clone()).await?;
    }
    let p50 = p50_of(&c, print1, 40).await?;
    c.cancel().await?;
    rows.push(Row {
        name: "wasm: warm python3 -c 'print(1)', p50",
        value: p50,
        unit: "ms",
        floor: Some(seq_p50),
        target: "<= 100 ms (aim 30)".into(),
        pass: p50 <= 100.0,
    });
    let cache = wasm_cache_dir();
    let mut firsts = Vec::new();
    for _ in 0..5 {
        firsts.push(first_exec(t, &cache, &opts, "python3 -c 'print(6*7)'", "42\\n").await?);
    }
    firsts.sort_by(f64::total_cmp);
    let py_first = pct(&firsts, 0.5);
    rows.push(Row {
        name: "wasm: process start -> first python3, p50",
        value: py_first,
        unit: "ms",
        floor: Some(first),
        target: "<= 1500 ms".into(),
        pass: py_first <= 1500.0,
    });
    Ok(())
}

/// The PID of the newest server process started for `t` (the stdio child).
pub(super) fn server_pid_of(t: &str) -> Result<u32> {
    let mut best: Option<(u64, u32)> = None;
    for e in std::fs::read_dir("/proc")?.filter_map(Result::ok) {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("mcp-sandbox-computer-vm-for-ai") && cmdline.contains(t) {
            let start = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().nth(19).and_then(|v| v.parse().ok()))
                })
                .unwrap_or(0);
            if best.is_none_or(|(b, _)| start > b) {
                best = Some((start, pid));
            }
        }
    }
    best.map(|(_, p)| p)
        .context("the server process was not found")
}

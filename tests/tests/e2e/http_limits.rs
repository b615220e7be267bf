//! Issue 19, finding 4: the limits of both HTTP servers (the MCP server's `--transport
//! http` and the executor API), against the real binary on WASM computers: a 413 that a
//! client still sending 50 MB receives, slow headers and slow bodies cut, idle keep-alive
//! connections closed, a cap on live MCP sessions, and long calls that none of it cuts.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "limits-secret-0123456789abcdef0123456789abcdef";

/// `host:port` of a server.
fn addr(s: &HttpServer) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// Both servers, with the same extra flags.
async fn both(t: &str, flags: &[&str]) -> anyhow::Result<(HttpServer, HttpServer)> {
    let mut opts = wasm_opts();
    for f in flags {
        opts = opts.arg(f);
    }
    let mcp = HttpServer::start(t, &state_dir(t), &opts).await?;
    let x = HttpServer::start_executor(t, &state_dir(&format!("{t}-x")), &opts, SECRET).await?;
    Ok((mcp, x))
}

/// Reads until the server closes the connection (or `within` passes): what came, and when
/// the close came.
async fn until_closed(
    rd: &mut (impl AsyncReadExt + Unpin),
    started: Instant,
    within: Duration,
) -> anyhow::Result<(Duration, String)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(within, async {
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    if read.is_err() {
        bail!(
            "the connection was still open after {within:?}; got {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    Ok((
        started.elapsed(),
        String::from_utf8_lossy(&got).into_owned(),
    ))
}

/// The JSON body of a raw HTTP/1.1 answer.
fn json_of(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body.trim()).unwrap_or(Value::Null)
}

#[tokio::test]
async fn issue_19_http_big_body_gets_413() -> anyhow::Result<()> {
    let t = tag("lim413");
    let (mcp, x) = both(&t, &[]).await?;
    let token = executor_token(SECRET, "team-a")?;
    const BIG: u64 = 50_000_000;
    let http = reqwest::Client::new();
    for (url, bearer) in [
        (mcp.url.clone(), None),
        (format!("{}/v1/computers", x.base), Some(token.as_str())),
    ] {
        for chunked in [false, true] {
            let body = if chunked {
                reqwest::Body::wrap_stream(pattern_stream(BIG))
            } else {
                reqwest::Body::from(vec![b' '; BIG as usize])
            };
            let mut req = http
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if let Some(b) = bearer {
                req = req.bearer_auth(b);
            }
            let started = Instant::now();
            let r =
                req.body(body).send().await.with_context(|| {
                    format!("{url} (chunked: {chunked}): the client got no answer")
                })?;
            assert_eq!(r.status(), 413, "{url} (chunked: {chunked})");
            let e: Value = r.json().await?;
            let message = if bearer.is_some() {
                assert_eq!(e["error"]["code"], "too_large", "{e}");
                e["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            } else {
                e["error"].as_str().unwrap_or_default().to_owned()
            };
            assert!(message.contains("--http-max-body"), "{url}: {e}");
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{:?}",
                started.elapsed()
            );
        }
    }
    // A body under the limit is still served, and so are both servers.
    let big_stdin = "y".repeat(1_000_000);
    let r = http
        .post(format!("{}/v1/computers/{t}-ok/exec", x.base))
        .bearer_auth(&token)
        .json(&json!({"command": "wc -c", "stdin": big_stdin}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await?;
    assert_eq!(v["stdout"].as_str().map(str::trim), Some("1000000"), "{v}");
    let r = http.get(format!("{}/healthz", mcp.base)).send().await?;
    assert_eq!(r.status(), 200);
    assert!(mcp.terminate().await?.success());
    assert!(x.terminate().await?.success());
    Ok(())
}

/// A request head sent one line per second, from a fresh connection.
async fn slow_head(addr: &str, path: &str) -> anyhow::Result<Duration> {
    let s = TcpStream::connect(addr).await?;
    let started = Instant::now();
    let (mut rd, mut wr) = s.into_split();
    let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(head.as_bytes()).await;
        for i in 0..60 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if wr
                .write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let (after, _) = until_closed(&mut rd, started, Duration::from_secs(15)).await?;
    writer.abort();
    Ok(after)
}

#[tokio::test]
async fn issue_19_http_slow_headers_are_cut() -> anyhow::Result<()> {
    let t = tag("limhead");
    let (mcp, x) = both(&t, &["--http-header-timeout=2"]).await?;
    for (s, path) in [(&mcp, "/healthz"), (&x, "/v1/health")] {
        let a = addr(s);
        // 200 slowloris connections at once (the red team's 200 stayed open 40 s), each
        // cut at the header timeout.
        let cut = futures_util::future::join_all((0..200).map(|_| slow_head(&a, path))).await;
        for c in cut {
            let after = c?;
            assert!(
                after >= Duration::from_millis(1500) && after < Duration::from_secs(4),
                "{path}: closed after {after:?}"
            );
        }
        // A connection that never sends a byte goes the same way.
        let silent = TcpStream::connect(&a).await?;
        let started = Instant::now();
        let (mut rd, _wr) = silent.into_split();
        let (after, got) = until_closed(&mut rd, started, Duration::from_secs(10)).await?;
        assert!(after < Duration::from_secs(4), "{after:?}");
        assert!(got.is_empty(), "{got}");
        // And the server still answers.
        let r = reqwest::get(format!("{}{path}", s.base)).await?;
        assert_eq!(r.status(), 200);
    }
    assert!(mcp.terminate().await?.success());
    assert!(x.terminate().await?.success());
    Ok(())
}

/// A POST (a PUT for `/v1/files`) whose head says 1000 bytes; `drip` says how the body comes (a few bytes then
/// nothing, or a byte every 300 ms). Returns when the answer and the close came, and the
/// answer.
async fn slow_body(
    addr: &str,
    path: &str,
    bearer: Option<&str>,
    drip: bool,
) -> anyhow::Result<(Duration, String)> {
    let s = TcpStream::connect(addr).await?;
    let (mut rd, mut wr) = s.into_split();
    let method = if path.starts_with("/v1/files/") {
        "PUT"
    } else {
        "POST"
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n"
    );
    if let Some(b) = bearer {
        head.push_str(&format!("Authorization: Bearer {b}\r\n"));
    }
    head.push_str("\r\n{\"jsonrpc\"");
    wr.write_all(head.as_bytes()).await?;
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        if !drip {
            return std::future::pending::<()>().await;
        }
        for _ in 0..500 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if wr.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    let r = until_closed(&mut rd, started, Duration::from_secs(15)).await;
    writer.abort();
    r
}

#[tokio::test]
async fn issue_19_http_slow_body_is_cut() -> anyhow::Result<()> {
    let t = tag("limbody");
    let (mcp, x) = both(&t, &["--http-body-timeout=2", "--tools=files"]).await?;
    let token = executor_token(SECRET, "team-a")?;
    let cases = [
        (&mcp, "/mcp", None),
        (&mcp, "/v1/files/box/slow.txt", None),
        (&x, "/v1/computers", Some(token.as_str())),
        (&x, "/v1/files/box/slow.txt", Some(token.as_str())),
    ];
    for (s, path, bearer) in cases {
        for drip in [false, true] {
            let (after, answer) = slow_body(&addr(s), path, bearer, drip).await?;
            let what = format!("{path} (a byte at a time: {drip})");
            assert!(
                answer.starts_with("HTTP/1.1 408"),
                "{what}: {answer:?} after {after:?}"
            );
            assert!(
                after >= Duration::from_millis(1500) && after < Duration::from_secs(5),
                "{what}: answered after {after:?}"
            );
            let e = json_of(&answer);
            let message = match &e["error"] {
                Value::String(m) => m.clone(),
                v => {
                    assert_eq!(v["code"], "request_timeout", "{what}: {e}");
                    v["message"].as_str().unwrap_or_default().to_owned()
                }
            };
            assert!(message.contains("--http-body-timeout"), "{what}: {e}");
        }
    }
    // Nothing was written by the stalled uploads.
    let r = reqwest::Client::new()
        .get(format!("{}/v1/files/box/slow.txt", mcp.base))
        .send()
        .await?;
    assert_eq!(r.status(), 404);
    assert!(mcp.terminate().await?.success());
    assert!(x.terminate().await?.success());
    Ok(())
}

#[tokio::test]
async fn issue_19_http_idle_connection_is_closed() -> anyhow::Result<()> {
    let t = tag("limidle");
    let (mcp, x) = both(&t, &["--http-idle-timeout=3", "--http-header-timeout=1"]).await?;
    for (s, path) in [(&mcp, "/healthz"), (&x, "/v1/health")] {
        let conn = TcpStream::connect(addr(s)).await?;
        let (mut rd, mut wr) = conn.into_split();
        // Two requests on one keep-alive connection, then silence.
        for _ in 0..2 {
            wr.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
                .await?;
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&got).contains("\"ok\"") {
                let n = tokio::time::timeout(Duration::from_secs(5), rd.read(&mut buf)).await??;
                if n == 0 {
                    bail!("{path}: closed before the answer");
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got.starts_with(b"HTTP/1.1 200"));
        }
        let idle_from = Instant::now();
        let (after, rest) = until_closed(&mut rd, idle_from, Duration::from_secs(10)).await?;
        assert!(rest.is_empty(), "{rest}");
        // The idle timeout (3 s), not the header timeout (1 s), ends it.
        assert!(
            after >= Duration::from_millis(2500) && after < Duration::from_secs(5),
            "{path}: closed after {after:?}"
        );
    }
    assert!(mcp.terminate().await?.success());
    assert!(x.terminate().await?.success());
    Ok(())
}

async fn initialize(
    s: &HttpServer,
    token: &str,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Value)> {
    let r = reqwest::Client::new()
        .post(&s.url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        )
        .send()
        .await?;
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    Ok((status, headers, r.json().await.unwrap_or(Value::Null)))
}

#[tokio::test]
async fn issue_19_http_session_cap() -> anyhow::Result<()> {
    let t = tag("limsess");
    let token = "limits-token-0123456789";
    let start = |cap: &'static str, n: &str| {
        let opts = wasm_opts()
            .arg("--auth-token")
            .arg(token)
            .arg("--session-timeout=120")
            .arg(cap)
            .arg(n);
        let t = format!("{t}-{}", cap.len());
        async move { HttpServer::start(&t, &state_dir(&t), &opts).await }
    };
    for (flag, other) in [
        ("--http-max-sessions-per-principal", "--http-max-sessions "),
        ("--http-max-sessions", "--http-max-sessions-per-principal"),
    ] {
        let s = start(flag, "3").await?;
        let mut sids = Vec::new();
        for _ in 0..3 {
            let (status, h, body) = initialize(&s, token).await?;
            assert_eq!(status, 200, "{body}");
            sids.push(h["mcp-session-id"].to_str()?.to_owned());
        }
        let (status, h, body) = initialize(&s, token).await?;
        assert_eq!(status, 503, "{flag}: {body}");
        let retry: u64 = h["retry-after"].to_str()?.parse()?;
        assert!((1..=130).contains(&retry), "{retry}");
        let message = body["error"].as_str().unwrap_or_default();
        for needle in [flag, "--session-timeout (120 s)", "DELETE"] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        assert!(!message.contains(other), "{message}");
        // Stateless calls have no session, so the cap does not stop them.
        let c = s.modern_client(Some(token)).await?;
        assert!(!c.list_all_tools().await?.is_empty());
        c.cancel().await?;
        // A DELETE frees a slot.
        let r = reqwest::Client::new()
            .delete(&s.url)
            .bearer_auth(token)
            .header("mcp-session-id", &sids[0])
            .send()
            .await?;
        assert_eq!(r.status(), 204);
        let (status, _, body) = initialize(&s, token).await?;
        assert_eq!(status, 200, "{body}");
        assert!(s.terminate().await?.success());
    }
    Ok(())
}

/// A stateless `tools/call` of `command` (with a progress token when `progress`): the final
/// result. A WASM computer sends no notifications, so even a call that asked for progress
/// is answered as plain JSON (issue 45: a stream only when a notification must go first).
async fn stateless_call(s: &HttpServer, command: &str, progress: bool) -> anyhow::Result<Value> {
    let mut meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    if progress {
        meta["progressToken"] = json!("p");
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "terminal_execute", "arguments": {"command": command}, "_meta": meta}});
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "terminal_execute")
        .body(body.to_string())
        .send()
        .await?;
    let sse = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    assert!(
        !sse,
        "a WASM call (progress: {progress}) has nothing to stream"
    );
    let last: Value = serde_json::from_str(&r.text().await?)?;
    Ok(last["result"]["structuredContent"].clone())
}

#[tokio::test]
async fn issue_19_http_long_calls_outlive_the_timeouts() -> anyhow::Result<()> {
    let t = tag("limlong");
    let flags = [
        "--http-header-timeout=2",
        "--http-body-timeout=2",
        "--http-idle-timeout=2",
    ];
    let (mcp, x) = both(&t, &flags).await?;
    let token = executor_token(SECRET, "team-a")?;
    let command = "sleep 5; echo done";
    let started = Instant::now();
    let executor = async {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/computers/{t}-x/exec", x.base))
            .bearer_auth(&token)
            .json(&json!({"command": command}))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "{}", r.status());
        anyhow::Ok(r.json::<Value>().await?)
    };
    let (plain, streamed, executor) = tokio::join!(
        stateless_call(&mcp, command, false),
        stateless_call(&mcp, command, true),
        executor
    );
    for (what, r) in [
        ("JSON", plain?),
        ("JSON, progress asked", streamed?),
        ("executor", executor?),
    ] {
        assert_eq!(
            (r["stdout"].as_str(), r["exit_code"].as_i64()),
            (Some("done\n"), Some(0)),
            "{what}: {r}"
        );
    }
    assert!(started.elapsed() >= Duration::from_secs(5));
    assert!(mcp.terminate().await?.success());
    assert!(x.terminate().await?.success());
    Ok(())
}

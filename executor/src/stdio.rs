//! MCP over stdio: newline-delimited JSON-RPC on stdin/stdout, one caller (this process).
//!
//! Owns framing, concurrency (each request runs as its own task, so several execs run at
//! once and a slow one never blocks `ping`), `notifications/cancelled` (aborting a request
//! kills its command inside the computer) and the end of the session on EOF. Only JSON-RPC
//! goes to stdout; logs go to stderr.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use shared::mcp::{
    Dispatcher, Era, Incoming, MODERN_VERSION, negotiate, parse_message, success_response,
};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::computers::SessionHost;

/// Longest accepted line (stdin payloads are ≤ 2 MiB, JSON escaping can grow them 6×).
const MAX_LINE: usize = 16 * 1024 * 1024;

type InFlight = Arc<Mutex<HashMap<String, AbortHandle>>>;

fn key(id: &Value) -> String {
    id.to_string()
}

/// One line of stdin, read on the reader thread.
enum Line {
    Read(Vec<u8>),
    /// Over [`MAX_LINE`]; the rest of it was skipped.
    TooLarge,
}

/// Reads stdin lines on a thread of its own and hands them over (the channel closes at
/// EOF). A thread, not tokio's stdin: that one hands every read to the blocking pool,
/// which costs a warm exec two wake-ups more.
fn read_lines(tx: mpsc::UnboundedSender<std::io::Result<Line>>) {
    use std::io::{BufRead, Read};
    let stdin = std::io::stdin();
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, stdin.lock());
    loop {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line);
        let item = match read {
            Ok(0) => return,
            Ok(_) if line.len() > MAX_LINE => {
                // Skip the rest of the oversized line.
                if !line.ends_with(b"\n") {
                    let mut sink = Vec::new();
                    if let Err(e) = reader.read_until(b'\n', &mut sink) {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
                Ok(Line::TooLarge)
            }
            Ok(_) => Ok(Line::Read(line)),
            Err(e) => Err(e),
        };
        let failed = item.is_err();
        if tx.send(item).is_err() || failed {
            return;
        }
    }
}

/// Serves until stdin closes. Returns after the in-flight commands were stopped.
pub async fn serve(dispatcher: Arc<Dispatcher>, host: SessionHost) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    // Answers are written by a thread of its own, for the same reason as the reader.
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let stdout = std::io::stdout();
        while let Some(msg) = rx.blocking_recv() {
            let mut line = shared::json::to_vec(&msg);
            line.push(b'\n');
            let mut out = stdout.lock();
            if out.write_all(&line).and_then(|()| out.flush()).is_err() {
                break;
            }
        }
    });
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || read_lines(lines_tx));
    let host = host.with_notifier(tx.clone());
    let inflight: InFlight = Arc::default();
    let mut era: Option<Era> = None;
    while let Some(item) = lines.recv().await {
        let line = match item? {
            Line::Read(line) => line,
            Line::TooLarge => {
                let _ = tx.send(shared::mcp::error_response(
                    Value::Null,
                    shared::mcp::codes::INVALID_REQUEST,
                    "message too large (16 MiB at most)",
                    None,
                ));
                continue;
            }
        };
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            continue;
        }
        match parse_message(trimmed) {
            Err(resp) => {
                let _ = tx.send(resp);
            }
            Ok(Incoming::Response) => {}
            Ok(Incoming::Notification { method, params }) => {
                if method == "notifications/cancelled"
                    && let Some(id) = params.as_ref().and_then(|p| p.get("requestId"))
                {
                    let handle = inflight
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key(id));
                    if let Some(h) = handle {
                        tracing::info!(request_id = %id, "request cancelled by the client");
                        h.abort();
                    }
                }
            }
            Ok(Incoming::Request { id, method, params }) => {
                if method == "initialize" {
                    let requested = params
                        .as_ref()
                        .and_then(|p| p.get("protocolVersion"))
                        .and_then(Value::as_str);
                    let version = negotiate(requested);
                    era = Some(Era::Legacy(version.to_owned()));
                    let _ = tx.send(success_response(id, dispatcher.initialize_result(version)));
                    continue;
                }
                let request_era = match (&era, requested_modern(params.as_ref())) {
                    (_, true) | (None, _) => Era::Modern,
                    (Some(e), false) => e.clone(),
                };
                let tx = tx.clone();
                let d = dispatcher.clone();
                let h = host.clone();
                let k = key(&id);
                let flight = inflight.clone();
                let task = tokio::spawn(async move {
                    let resp = d
                        .request(&h, &request_era, id.clone(), &method, params.as_ref())
                        .await;
                    flight
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key(&id));
                    let _ = tx.send(resp);
                });
                inflight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(k, task.abort_handle());
            }
        }
    }
    // EOF: the client is gone. Stop what still runs; nobody will read the answers.
    let handles: Vec<AbortHandle> = inflight
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain()
        .map(|(_, h)| h)
        .collect();
    for h in handles {
        h.abort();
    }
    drop(host);
    drop(tx);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    Ok(())
}

fn requested_modern(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(shared::mcp::META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        == Some(MODERN_VERSION)
}

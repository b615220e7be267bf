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
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::computers::SessionHost;

/// Longest accepted line (stdin payloads are ≤ 2 MiB, JSON escaping can grow them 6×).
const MAX_LINE: usize = 16 * 1024 * 1024;

type InFlight = Arc<Mutex<HashMap<String, AbortHandle>>>;

fn key(id: &Value) -> String {
    id.to_string()
}

/// Serves until stdin closes. Returns after the in-flight commands were stopped.
pub async fn serve(dispatcher: Arc<Dispatcher>, host: SessionHost) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(msg) = rx.recv().await {
            let mut line = shared::json::to_vec(&msg);
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let host = host.with_notifier(tx.clone());
    let inflight: InFlight = Arc::default();
    let mut era: Option<Era> = None;
    let mut reader = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            break;
        }
        if line.len() > MAX_LINE {
            let _ = tx.send(shared::mcp::error_response(
                Value::Null,
                shared::mcp::codes::INVALID_REQUEST,
                "message too large (16 MiB at most)",
                None,
            ));
            // Skip the rest of the oversized line.
            if !line.ends_with(b"\n") {
                let mut sink = Vec::new();
                reader.read_until(b'\n', &mut sink).await?;
            }
            continue;
        }
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
    let _ = writer.await;
    Ok(())
}

fn requested_modern(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(shared::mcp::META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        == Some(MODERN_VERSION)
}

//! `cargo run -p tests --bin gateway-stack`: the gateway Worker under `wrangler dev`
//! (local workerd, real Durable Objects) in front of one WASM executor, for clients that
//! are not Rust tests (`scripts/clients` runs the Python and TypeScript clients against
//! it: issue 45's "locally and at the gateway").
//!
//! Prints one line, `<mcp url> <token> <token> …` ([`USERS`] bearer tokens: JWTs of one
//! team, a user each, so each client run has a principal, and so a default computer, of its
//! own), once both answer; stops both when its stdin closes or it gets SIGTERM/SIGINT. Logs
//! go to `target/test-logs/<tag>-*.log`.

use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use tests::{Gateway, HttpServer, hs256, state_dir, tag, unix_now, wasm_opts};
use tokio::io::AsyncReadExt;
use tokio::signal::unix::{SignalKind, signal};

/// Test secrets (the stack listens on loopback only).
const JWT_SECRET: &str = "gateway-stack-jwt-secret-0123456789abcdef";
const EXECUTOR_SECRET: &str = "gateway-stack-executor-secret-0123456789";
const ISSUER: &str = "https://issuer.gateway-stack.test";
const AUDIENCE: &str = "gateway-stack";
/// How many users' tokens are printed.
const USERS: usize = 16;

#[tokio::main]
async fn main() -> Result<()> {
    let t = tag("gwstack");
    let opts = wasm_opts().arg("--output-limit").arg("8388608");
    let executor = HttpServer::start_executor(&t, &state_dir(&t), &opts, EXECUTOR_SECRET).await?;
    let vars = [
        (
            "EXECUTORS",
            json!([{"name": "local", "url": executor.base}]).to_string(),
        ),
        ("EXECUTOR_SECRET", EXECUTOR_SECRET.to_owned()),
        ("JWT_HS256_SECRET", JWT_SECRET.to_owned()),
        ("JWT_ISSUER", ISSUER.to_owned()),
        ("JWT_AUDIENCE", AUDIENCE.to_owned()),
        ("TOOLS", "all".to_owned()),
    ];
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &vars).await?;
    let mut line = gw.url.clone();
    for user in 1..=USERS {
        let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": format!("user-{user}"),
            "team": "clients", "iat": unix_now(), "exp": unix_now() + 4 * 3600});
        line.push(' ');
        line.push_str(&hs256(&claims, JWT_SECRET)?);
    }
    println!("{line}");
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 256];
    let until_eof = async { while stdin.read(&mut sink).await.unwrap_or(0) > 0 {} };
    tokio::select! {
        () = until_eof => {}
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tokio::time::timeout(Duration::from_secs(15), gw.stop())
        .await
        .ok()
        .transpose()?;
    drop(executor);
    Ok(())
}

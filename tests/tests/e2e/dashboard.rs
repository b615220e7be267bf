//! Issue 5: the dashboard in a real browser (Debian's chromium, headless, driven by
//! playwright-core from `tests/browser/`), against the real server with real computers:
//! as the web page at `/dashboard`, and as an MCP App inside a test host page that answers
//! the postMessage protocol by forwarding to the server. Screenshots land in
//! `target/test-artifacts/`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tests::*;

const TOKEN: &str = "dash-3f9a1c7e5b2d";

/// `tests/browser` with its npm packages installed (once per run).
fn browser_dir() -> anyhow::Result<PathBuf> {
    let dir = workspace().join("tests/browser");
    if !dir.join("node_modules/playwright-core").is_dir() {
        let ok = std::process::Command::new("npm")
            .args(["ci", "--silent", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .context("npm")?
            .success();
        anyhow::ensure!(ok, "npm ci in tests/browser failed");
    }
    Ok(dir)
}

async fn drive(mode: &str, s: &HttpServer, prefix: &str) -> anyhow::Result<()> {
    drive_at(mode, &s.base, TOKEN, prefix, "").await
}

/// Screenshots go to `target/test-artifacts/<sub>`.
async fn drive_at(
    mode: &str,
    base: &str,
    token: &str,
    prefix: &str,
    sub: &str,
) -> anyhow::Result<()> {
    let dir = browser_dir()?;
    let artifacts = workspace().join("target/test-artifacts").join(sub);
    let out = tokio::process::Command::new("node")
        .arg(dir.join("dashboard.mjs"))
        .args([mode, base, token, prefix])
        .arg(&artifacts)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out)
        .await
        .context("the browser test hung")??;
    anyhow::ensure!(
        out.status.success(),
        "browser ({mode}) failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn issue_5_dashboard_in_a_real_browser() -> anyhow::Result<()> {
    let t = tag("dash");
    let mut opts = ServerOpts::lifecycle().arg("--tools=files,jobs");
    opts.env
        .push(("KILNTAINERS_AUTH_TOKEN".into(), TOKEN.into()));
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let (web, app) = tokio::join!(drive("web", &s, &t), drive("app", &s, &t));
    web?;
    app?;
    // Both computers the pages made were deleted through the pages.
    wait_for_count(&t, 0, Duration::from_secs(15)).await?;
    s.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn issue_5_dashboard_route_and_history() -> anyhow::Result<()> {
    let t = tag("dashroute");
    // Without the lifecycle tools there is no dashboard.
    let s = HttpServer::start(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let r = reqwest::get(format!("{}/dashboard", s.base)).await?;
    assert_eq!(r.status(), 404);
    assert!(r.text().await?.contains("ENABLE_LIFECYCLE_TOOLS=true"));
    s.terminate().await?;

    let s = HttpServer::start(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let r = reqwest::get(format!("{}/dashboard", s.base)).await?;
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"].to_str()?.to_owned();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    assert!(r.text().await?.contains("Sandbox Computer Dashboard"));
    let root: serde_json::Value = reqwest::get(format!("{}/", s.base)).await?.json().await?;
    assert_eq!(root["dashboard"], "/dashboard");
    // The same file is the MCP App resource.
    let c = s.legacy_client(None).await?;
    let read = c
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            shared_dashboard_uri(),
        ))
        .await?;
    let text = serde_json::to_value(&read.contents[0])?;
    assert!(text["text"].as_str().unwrap().contains("ui/initialize"));

    // History: what ran, newest last, cut to 1 KiB, no output; gone with the computer.
    let id = format!("{t}-h");
    exec(&c, json!({"command": "echo one", "computer_id": id})).await?;
    exec(
        &c,
        json!({"args": ["sh", "-c", "exit 7"], "computer_id": id}),
    )
    .await?;
    let long = format!("echo {}", "x".repeat(3000));
    exec(&c, json!({"command": long, "computer_id": id})).await?;
    let r = call(&c, "computer_list", json!({})).await?;
    assert_eq!(
        r.meta.as_ref().map(|m| m.0["mcp-sandbox/execTool"].clone()),
        Some(json!("terminal_execute"))
    );
    let list = r.structured_content.unwrap();
    let item = item_of(&list, &id);
    let h = item["history"].as_array().unwrap();
    assert_eq!(h.len(), 3, "{item}");
    assert_eq!(h[0]["command"], "echo one");
    assert_eq!(h[0]["exit_code"], 0);
    assert_eq!(h[1]["command"], "sh -c 'exit 7'");
    assert_eq!(h[1]["exit_code"], 7);
    assert!(h[2]["command"].as_str().unwrap().len() <= 1024);
    assert!(h[0]["started_at"].as_str().unwrap().ends_with('Z'));
    assert!(h[0].get("stdout").is_none());
    for _ in 0..50 {
        exec(&c, json!({"args": ["true"], "computer_id": id})).await?;
    }
    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    let h = item_of(&list, &id)["history"].as_array().unwrap().clone();
    assert_eq!(h.len(), 50);
    assert_eq!(h[49]["command"], "true");
    call(&c, "computer_delete", json!({"computer_id": id})).await?;
    exec(&c, json!({"args": ["true"], "computer_id": id})).await?;
    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert_eq!(item_of(&list, &id)["history"].as_array().unwrap().len(), 1);
    c.cancel().await?;
    s.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

/// The inventory item of `id` (other tests' permanent computers are listed too).
fn item_of(list: &serde_json::Value, id: &str) -> serde_json::Value {
    list["computers"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["computer_id"] == id))
        .cloned()
        .unwrap_or_default()
}

fn shared_dashboard_uri() -> String {
    "ui://kilntainers/computers".into()
}

/// The same page, served by the gateway Worker at /dashboard, driving computers on an
/// executor through the gateway's /mcp with a JWT the person pastes.
#[tokio::test]
async fn issue_6_dashboard_through_the_gateway() -> anyhow::Result<()> {
    const SECRET: &str = "dash-gw-executor-secret-0123456789abcdef";
    const JWT: &str = "dash-gw-jwt-secret-0123456789abcdef012345";
    let t = tag("dashgw");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), SECRET).await?;
    let gw = Gateway::start(
        &t,
        &state_dir(&t).join("wrangler"),
        &[
            (
                "EXECUTORS",
                json!([{"name": "local", "url": x.base}]).to_string(),
            ),
            ("EXECUTOR_SECRET", SECRET.into()),
            ("JWT_HS256_SECRET", JWT.into()),
            ("JWT_ISSUER", "dash-test".into()),
            ("JWT_AUDIENCE", "dash-test".into()),
            // The file browser through the gateway: the tools and /v1/files.
            ("TOOLS", "exec,files,lifecycle".into()),
        ],
    )
    .await?;
    let token = hs256(
        &json!({"iss": "dash-test", "aud": "dash-test", "sub": "person", "team": "ui", "exp": unix_now() + 600}),
        JWT,
    )?;
    drive_at("web", &gw.base, &token, &t, "gateway").await?;
    gw.stop().await?;
    x.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

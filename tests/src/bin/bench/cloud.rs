//! Cloud computers (issue 7): a warm command through our server (MCP over stdio) on Fly
//! and E2B, next to the floor of the same command sent straight to the provider's API
//! (the local simulators) with the shared clients: one `exec` request for Fly, one
//! `process.Process/Start` stream for E2B. The difference is what we add: the MCP round
//! trip, the cd wrapper, and on Fly the job runner that lets commands outlive the exec
//! endpoint's request limit.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use shared::providers::e2b::E2bClient;
use shared::providers::fly::FlyClient;
use shared::providers::{HttpRequest, HttpResponse, HttpTransport};
use tests::sim::e2b::{E2bSim, E2bSimOptions};
use tests::sim::fly::{FlySim, FlySimOptions};
use tests::*;

use super::{Row, ms, pct};

const RUNS: usize = 60;

/// reqwest for the floors' clients.
struct Reqwest(reqwest::Client);

impl HttpTransport for Reqwest {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, String> {
        let method =
            reqwest::Method::from_bytes(req.method.as_bytes()).map_err(|e| e.to_string())?;
        let mut b = self.0.request(method, &req.url);
        for (k, v) in &req.headers {
            b = b.header(k, v);
        }
        if let Some(body) = req.body {
            b = b.body(body);
        }
        let resp = b.send().await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = resp.bytes().await.map_err(|e| e.to_string())?.to_vec();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    async fn sleep(&self, millis: u64) {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }

    fn now_ms(&self) -> u64 {
        unix_now() * 1000
    }
}

async fn p50<F, Fut>(mut f: F) -> Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut v = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let s = Instant::now();
        f().await?;
        v.push(ms(s.elapsed()));
    }
    v.sort_by(f64::total_cmp);
    Ok(pct(&v, 0.5))
}

async fn ours(c: &Client, id: &str) -> Result<f64> {
    p50(|| async {
        let r = exec(c, json!({"computer_id": id, "args": ["true"]})).await?;
        anyhow::ensure!(r["exit_code"] == 0, "{r}");
        Ok(())
    })
    .await
}

fn row(name: &'static str, value: f64, floor: f64, factor: f64, extra_ms: f64) -> Row {
    Row {
        name,
        value,
        unit: "ms",
        floor: Some(floor),
        target: format!("<= {factor}x floor + {extra_ms} ms"),
        pass: value <= floor * factor + extra_ms,
    }
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    // ---- Fly ----
    let token = "fm2_bench-token";
    let sim = FlySim::start(FlySimOptions::debian(token, t)).await?;
    let state = state_dir(&format!("{t}-fly"));
    let mut opts = ServerOpts::default()
        .arg("--backend")
        .arg("fly")
        .arg("--fly-token")
        .arg(token);
    opts.env.push(("FLY_API_URL".into(), sim.url.clone()));
    let c = stdio_client(t, &state, &opts).await?;
    exec(&c, json!({"computer_id": "bench-fly", "command": "true"})).await?;
    let app: Value = serde_json::from_slice(&std::fs::read(state.join("fly.json"))?)?;
    let app = app["app"].as_str().context("app")?.to_owned();
    let fly = FlyClient::new(sim.url.clone(), token, Reqwest(reqwest::Client::new()));
    let machine = fly
        .list_machines(&app, &[])
        .await?
        .into_iter()
        .next()
        .context("no machine")?;
    let argv = vec!["true".to_owned()];
    let floor = p50(|| async {
        let out = fly.exec(&app, &machine.id, &argv, None, 30).await?;
        anyhow::ensure!(out.exit_code == 0, "{out:?}");
        Ok(())
    })
    .await?;
    let value = ours(&c, "bench-fly").await?;
    rows.push(row("fly: warm exec `true`, p50", value, floor, 1.3, 10.0));
    c.cancel().await?;
    sim.stop().await;

    // ---- E2B ----
    let key = "e2b_bench-key";
    let sim = E2bSim::start(E2bSimOptions::debian(key, t)).await?;
    let mut opts = ServerOpts::default().arg("--backend").arg("e2b");
    opts.env.push(("E2B_API_KEY".into(), key.into()));
    opts.env.push(("E2B_API_URL".into(), sim.api_url.clone()));
    opts.env
        .push(("E2B_SANDBOX_URL".into(), sim.sandbox_url.clone()));
    let c = stdio_client(t, &state_dir(&format!("{t}-e2b")), &opts).await?;
    exec(&c, json!({"computer_id": "bench-e2b", "command": "true"})).await?;
    let e2b = E2bClient::new(
        sim.api_url.clone(),
        Some(sim.sandbox_url.clone()),
        key,
        Reqwest(reqwest::Client::new()),
    );
    let listed = e2b
        .list(&[("mcp_computer", "bench-e2b")], &["running"])
        .await?
        .into_iter()
        .next()
        .context("no sandbox")?;
    let sandbox = e2b.connect(&listed.sandbox_id, 600).await?;
    let floor = p50(|| async {
        let out = e2b
            .run(&sandbox, "true", &[], &[], None, None, 30_000, 1 << 20)
            .await?;
        anyhow::ensure!(out.exit_code == 0, "{out:?}");
        Ok(())
    })
    .await?;
    let value = ours(&c, "bench-e2b").await?;
    rows.push(row("e2b: warm exec `true`, p50", value, floor, 1.3, 10.0));
    c.cancel().await?;
    sim.stop().await;
    remove_all(t).await
}

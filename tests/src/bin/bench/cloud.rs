//! Cloud computers (issue 7): a warm command through our server (MCP over stdio) on Fly,
//! E2B and Modal, next to the floor of the same command sent straight to the provider's
//! API (the local simulators): one `exec` request for Fly and one `process.Process/Start`
//! stream for E2B (the shared clients), and for Modal the router calls of one command
//! (TaskExecStart, the stdin EOF, both output streams, TaskExecWait) with the generated
//! gRPC client. The difference is what we add: the MCP round trip, the cd wrapper, on Fly
//! the job runner that lets commands outlive the exec endpoint's request limit, on Modal
//! the kill wrapper.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use shared::providers::e2b::E2bClient;
use shared::providers::fly::FlyClient;
use shared::providers::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use tests::sim::e2b::{E2bSim, E2bSimOptions};
use tests::sim::fly::{FlySim, FlySimOptions};
use tests::sim::modal::proto::modal::client as pb;
use tests::sim::modal::proto::modal::client::modal_client_client::ModalClientClient;
use tests::sim::modal::proto::modal::task_command_router as tcr;
use tests::sim::modal::proto::modal::task_command_router::task_command_router_client::TaskCommandRouterClient;
use tests::sim::modal::{ModalSim, ModalSimOptions};
use tests::*;

use super::{Row, ms, pct};

const RUNS: usize = 60;

/// reqwest for the floors' clients.
struct Reqwest(reqwest::Client);

impl HttpTransport for Reqwest {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, TransportError> {
        let method =
            reqwest::Method::from_bytes(req.method.as_bytes()).map_err(TransportError::of)?;
        let mut b = self.0.request(method, &req.url);
        for (k, v) in &req.headers {
            b = b.header(k, v);
        }
        if let Some(body) = req.body {
            b = b.body(body);
        }
        let resp = b.send().await.map_err(TransportError::of)?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = resp.bytes().await.map_err(TransportError::of)?.to_vec();
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

    // ---- Modal ----
    let (id, secret) = ("ak-bench", "as-bench-secret");
    let sim = ModalSim::start(ModalSimOptions {
        token_id: id.into(),
        token_secret: secret.into(),
        docker_label: ("msc-test".into(), t.into()),
        ..Default::default()
    })
    .await?;
    let mut opts = ServerOpts::default().arg("--backend").arg("modal");
    opts.env.push(("MODAL_SERVER_URL".into(), sim.url.clone()));
    opts.env.push(("MODAL_TOKEN_ID".into(), id.into()));
    opts.env.push(("MODAL_TOKEN_SECRET".into(), secret.into()));
    let c = stdio_client(t, &state_dir(&format!("{t}-modal")), &opts).await?;
    exec(&c, json!({"computer_id": "bench-modal", "command": "true"})).await?;
    let floor = modal_floor(&sim.url, id, secret, "bench-modal").await?;
    let value = ours(&c, "bench-modal").await?;
    rows.push(row("modal: warm exec `true`, p50", value, floor, 1.3, 10.0));
    c.cancel().await?;
    sim.stop().await;
    remove_all(t).await
}

/// A router request with the router's bearer token.
fn authed<M>(bearer: &tonic::metadata::AsciiMetadataValue, m: M) -> tonic::Request<M> {
    let mut r = tonic::Request::new(m);
    r.metadata_mut().insert("authorization", bearer.clone());
    r
}

/// The p50 of one command straight through Modal's command router (access fetched once).
async fn modal_floor(url: &str, id: &str, secret: &str, computer: &str) -> Result<f64> {
    use tonic::Request;
    let auth = |r: &mut tonic::metadata::MetadataMap| -> Result<()> {
        r.insert("x-modal-token-id", id.parse()?);
        r.insert("x-modal-token-secret", secret.parse()?);
        r.insert("x-modal-client-type", "9".parse()?);
        r.insert("x-modal-client-version", "1.0.0".parse()?);
        Ok(())
    };
    let channel = |u: String| async move {
        anyhow::Ok(
            tonic::transport::Endpoint::from_shared(u)?
                .connect()
                .await?,
        )
    };
    let mut cp = ModalClientClient::new(channel(url.to_owned()).await?);
    let mut req = Request::new(pb::AppGetOrCreateRequest {
        app_name: "kilntainers".into(),
        ..Default::default()
    });
    auth(req.metadata_mut())?;
    let app_id = cp.app_get_or_create(req).await?.into_inner().app_id;
    let mut req = Request::new(pb::SandboxListRequest {
        app_id,
        tags: vec![pb::SandboxTag {
            tag_name: "mcp_computer".into(),
            tag_value: computer.into(),
        }],
        ..Default::default()
    });
    auth(req.metadata_mut())?;
    let sandbox_id = cp
        .sandbox_list(req)
        .await?
        .into_inner()
        .sandboxes
        .into_iter()
        .next()
        .context("no sandbox")?
        .id;
    let mut req = Request::new(pb::SandboxGetTaskIdRequest {
        sandbox_id,
        timeout: Some(10.0),
        wait_until_ready: false,
    });
    auth(req.metadata_mut())?;
    let task_id = cp
        .sandbox_get_task_id(req)
        .await?
        .into_inner()
        .task_id
        .context("no task")?;
    let mut req = Request::new(pb::TaskGetCommandRouterAccessRequest {
        task_id: task_id.clone(),
    });
    auth(req.metadata_mut())?;
    let access = cp.task_get_command_router_access(req).await?.into_inner();
    let bearer: tonic::metadata::AsciiMetadataValue = format!("Bearer {}", access.jwt).parse()?;
    let router = TaskCommandRouterClient::new(channel(access.url).await?);
    let n = std::sync::atomic::AtomicU64::new(0);
    p50(|| {
        let (mut router, bearer, task_id) = (router.clone(), bearer.clone(), task_id.clone());
        let exec_id = format!(
            "00000000-0000-4000-8000-{:012x}",
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        async move {
            router
                .task_exec_start(authed(
                    &bearer,
                    tcr::TaskExecStartRequest {
                        task_id: task_id.clone(),
                        exec_id: exec_id.clone(),
                        command_args: vec!["true".into()],
                        stdout_config: tcr::TaskExecStdoutConfig::Pipe as i32,
                        stderr_config: tcr::TaskExecStderrConfig::Pipe as i32,
                        timeout_secs: Some(30),
                        ..Default::default()
                    },
                ))
                .await?;
            router
                .task_exec_stdin_write(authed(
                    &bearer,
                    tcr::TaskExecStdinWriteRequest {
                        task_id: task_id.clone(),
                        exec_id: exec_id.clone(),
                        eof: true,
                        ..Default::default()
                    },
                ))
                .await?;
            for fd in [
                tcr::TaskExecStdioFileDescriptor::Stdout,
                tcr::TaskExecStdioFileDescriptor::Stderr,
            ] {
                let mut stream = router
                    .task_exec_stdio_read(authed(
                        &bearer,
                        tcr::TaskExecStdioReadRequest {
                            task_id: task_id.clone(),
                            exec_id: exec_id.clone(),
                            offset: 0,
                            file_descriptor: fd as i32,
                        },
                    ))
                    .await?
                    .into_inner();
                while stream.message().await?.is_some() {}
            }
            let exit = router
                .task_exec_wait(authed(
                    &bearer,
                    tcr::TaskExecWaitRequest {
                        task_id: task_id.clone(),
                        exec_id: exec_id.clone(),
                    },
                ))
                .await?
                .into_inner();
            anyhow::ensure!(
                exit.exit_status == Some(tcr::task_exec_wait_response::ExitStatus::Code(0)),
                "{exit:?}"
            );
            Ok(())
        }
    })
    .await
}

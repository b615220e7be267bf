//! Files (issue 15): 64 MiB `PUT` then `GET /v1/files` over HTTP on Docker against the
//! Engine's archive API (what `docker cp` uses) moving the same bytes into and out of a
//! container; a 4 KiB `computer_file_read` against a warm exec of `true`; 256 MiB each way
//! through the gateway under `wrangler dev`, against the executor reached directly, with
//! workerd's peak memory before and after.

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::json;
use tests::*;

use super::{Row, ms, pct};

const MIB64: usize = 64 << 20;
const RUNS: usize = 300;
const REPEAT: usize = 3;

/// A one-file tar (ustar, with the size in the header) of `data` named `name`.
fn tar_of(name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |field: &mut [u8], value: u64| {
        let s = format!("{value:0width$o}\0", width = field.len() - 1);
        field.copy_from_slice(s.as_bytes());
    };
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut out = Vec::with_capacity(data.len() + 2048);
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// The floor, MB/s each way: the archive API uploads a tar of `data` into `/tmp` of
/// `container`, then downloads it (the tar stream read to the end).
async fn archive_floor(container: &str, data: &[u8]) -> Result<(f64, f64)> {
    use futures_util::StreamExt;
    let d = docker()?;
    let tar = tar_of("floor.bin", data);
    let mut up = Vec::new();
    let mut down = Vec::new();
    for _ in 0..REPEAT {
        let s = Instant::now();
        d.upload_to_container(
            container,
            Some(bollard::query_parameters::UploadToContainerOptions {
                path: "/tmp".into(),
                ..Default::default()
            }),
            bollard::body_full(tar.clone().into()),
        )
        .await?;
        up.push(data.len() as f64 / s.elapsed().as_secs_f64() / 1e6);
        let s = Instant::now();
        let mut n = 0usize;
        let mut stream = d.download_from_container(
            container,
            Some(bollard::query_parameters::DownloadFromContainerOptions {
                path: "/tmp/floor.bin".into(),
            }),
        );
        while let Some(chunk) = stream.next().await {
            n += chunk?.len();
        }
        anyhow::ensure!(n >= data.len(), "the floor downloaded {n} bytes");
        down.push(data.len() as f64 / s.elapsed().as_secs_f64() / 1e6);
    }
    up.sort_by(f64::total_cmp);
    down.sort_by(f64::total_cmp);
    Ok((pct(&up, 0.5), pct(&down, 0.5)))
}

/// Ours, MB/s each way: `PUT` then `GET /v1/files` of `data` (median of a few runs).
async fn http_files(base: &str, id: &str, data: &[u8], auth: Option<&str>) -> Result<(f64, f64)> {
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/files/{id}/tmp/ours.bin");
    let mut up = Vec::new();
    let mut down = Vec::new();
    for _ in 0..REPEAT {
        let mut req = http.put(&url).body(data.to_vec());
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let s = Instant::now();
        let r = req.send().await?;
        anyhow::ensure!(
            r.status() == 201,
            "PUT answered {}: {:?}",
            r.status(),
            r.text().await
        );
        up.push(data.len() as f64 / s.elapsed().as_secs_f64() / 1e6);
        let mut req = http.get(&url);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let s = Instant::now();
        let r = req.send().await?;
        anyhow::ensure!(r.status() == 200, "GET answered {}", r.status());
        let (_, n) = hash_body(r).await?;
        anyhow::ensure!(n == data.len() as u64, "GET read {n} bytes");
        down.push(data.len() as f64 / s.elapsed().as_secs_f64() / 1e6);
    }
    up.sort_by(f64::total_cmp);
    down.sort_by(f64::total_cmp);
    Ok((pct(&up, 0.5), pct(&down, 0.5)))
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let data: Vec<u8> = (0..MIB64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    // ---- 64 MiB over HTTP on Docker vs the archive API ----
    let server = HttpServer::start(
        t,
        &state_dir(t),
        &ServerOpts::default().arg("--tools=files"),
    )
    .await?;
    let id = format!("{t}-files");
    let c = server.modern_client(None).await?;
    exec(
        &c,
        json!({"args": ["true"], "computer_id": id, "temporary": false}),
    )
    .await?;
    let container = format!("kilntainer-{id}");
    archive_floor(&container, &data).await?; // warm-up
    let (floor_up, floor_down) = archive_floor(&container, &data).await?;
    let (up, down) = http_files(&server.base, &id, &data, None).await?;
    for (name, v, f) in [
        ("64 MiB PUT /v1/files, Docker", up, floor_up),
        ("64 MiB GET /v1/files, Docker", down, floor_down),
    ] {
        rows.push(Row {
            name,
            value: v,
            unit: "MB/s",
            floor: Some(f),
            target: ">= 0.8x floor (archive API)".into(),
            pass: v >= 0.8 * f,
        });
    }
    // ---- 4 KiB computer_file_read vs a warm exec of `true` ----
    let small = &data[..4096];
    call(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/4k.bin", "content_base64": base64_of(small)}),
    )
    .await?;
    for _ in 0..20 {
        exec(&c, json!({"args": ["true"], "computer_id": id})).await?;
        call(
            &c,
            "computer_file_read",
            json!({"computer_id": id, "path": "/tmp/4k.bin"}),
        )
        .await?;
    }
    let (mut warm, mut read) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        for step in 0..2 {
            let s = Instant::now();
            if (i + step) % 2 == 0 {
                exec(&c, json!({"args": ["true"], "computer_id": id})).await?;
                warm.push(ms(s.elapsed()));
            } else {
                let r = call(
                    &c,
                    "computer_file_read",
                    json!({"computer_id": id, "path": "/tmp/4k.bin"}),
                )
                .await?;
                anyhow::ensure!(r.is_error != Some(true), "read failed: {}", text(&r));
                read.push(ms(s.elapsed()));
            }
        }
    }
    warm.sort_by(f64::total_cmp);
    read.sort_by(f64::total_cmp);
    let (w50, r50) = (pct(&warm, 0.5), pct(&read, 0.5));
    rows.push(Row {
        name: "computer_file_read 4 KiB, Docker, p50",
        value: r50,
        unit: "ms",
        floor: Some(w50),
        target: "<= 1.5x warm exec".into(),
        pass: r50 <= 1.5 * w50,
    });
    call(&c, "computer_delete", json!({"computer_id": id}))
        .await
        .ok();
    c.cancel().await?;
    server.terminate().await?;
    gateway_rows(t, rows).await
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

const SECRET: &str = "bench-files-executor-secret-0123456789";
const JWT: &str = "bench-files-jwt-secret-0123456789abcdef";

/// 256 MiB each way through the Worker, against the executor reached directly.
async fn gateway_rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let x = HttpServer::start_executor(t, &state_dir(t), &wasm_opts(), SECRET).await?;
    let gw = Gateway::start(
        t,
        &state_dir(t).join("gwfiles"),
        &[
            (
                "EXECUTORS",
                json!([{"name": "local", "url": x.base}]).to_string(),
            ),
            ("EXECUTOR_SECRET", SECRET.into()),
            ("JWT_HS256_SECRET", JWT.into()),
            ("JWT_ISSUER", "bench".into()),
            ("JWT_AUDIENCE", "bench".into()),
            ("TOOLS", "exec,files".into()),
        ],
    )
    .await?;
    let team = "bench-team";
    let user = format!(
        "Bearer {}",
        hs256(
            &json!({"iss": "bench", "aud": "bench", "sub": "u1", "team": team, "exp": unix_now() + 3600}),
            JWT
        )?
    );
    let direct = format!(
        "Bearer {}",
        hs256(
            &json!({"iss": shared::executor_api::GATEWAY_ISSUER, "aud": EXECUTOR_NAME,
                    "sub": team, "scope": "exec manage", "iat": unix_now(), "exp": unix_now() + 600}),
            SECRET,
        )?
    );
    let data: Vec<u8> = (0..(256usize << 20))
        .map(|i| (i.wrapping_mul(40_503) >> 7) as u8)
        .collect();
    // The computer is made through the gateway (its inventory), then used both ways.
    let (_, peak_before) = gw.workerd_memory_mib();
    let (gw_up, gw_down) = http_files(&gw.base, "stream", &data, Some(&user)).await?;
    let (_, peak_after) = gw.workerd_memory_mib();
    let (x_up, x_down) = http_files(&x.base, "stream", &data, Some(&direct)).await?;
    for (name, v, f) in [
        ("256 MiB PUT through the gateway", gw_up, x_up),
        ("256 MiB GET through the gateway", gw_down, x_down),
    ] {
        rows.push(Row {
            name,
            value: v,
            unit: "MB/s",
            floor: Some(f),
            target: ">= 0.5x the executor direct".into(),
            pass: v >= 0.5 * f,
        });
    }
    let growth = peak_after.saturating_sub(peak_before) as f64;
    rows.push(Row {
        name: "workerd peak RSS growth over 6 x 256 MiB",
        value: growth,
        unit: "MiB",
        floor: None,
        target: "<= 32 MiB (flat)".into(),
        pass: growth <= 32.0,
    });
    gw.stop().await?;
    x.terminate().await.context("executor")?;
    Ok(())
}

//! Snapshots and forks on Docker (issue 39), each next to the engine doing the same thing
//! itself in the same run: `computer_snapshot` of a computer with 1 GiB written against
//! a bare commit (`pause=true`) of the same container; `computer_fork` of a computer with
//! 100 MiB written against a bare commit + create + start from it.

use std::time::Instant;

use anyhow::{Context, Result};
use bollard::models::{ContainerConfig, ContainerCreateBody};
use bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, RemoveContainerOptions, RemoveImageOptions,
};
use serde_json::{Value, json};
use tests::*;

use super::{Row, ms, pct};

/// Timed rounds of each.
const ROUNDS: usize = 5;

async fn ok(c: &Client, tool: &str, args: Value) -> Result<Value> {
    call_ok(c, tool, args).await
}

/// The engine alone: commit container `name` (paused), and with `start`, a container from
/// the image started; everything made is removed after the clock stops.
async fn engine_copy(name: &str, tag: &str, start: bool) -> Result<f64> {
    let d = docker()?;
    let t = Instant::now();
    let image = d
        .commit_container(
            CommitContainerOptions {
                container: Some(name.to_owned()),
                pause: true,
                ..Default::default()
            },
            ContainerConfig {
                labels: Some([("msc-test".to_owned(), tag.to_owned())].into()),
                ..Default::default()
            },
        )
        .await?
        .id;
    let mut made = None;
    if start {
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            entrypoint: Some(vec!["sleep".into(), "infinity".into()]),
            labels: Some([("msc-test".to_owned(), tag.to_owned())].into()),
            ..Default::default()
        };
        let c = d
            .create_container(None::<CreateContainerOptions>, body)
            .await?;
        d.start_container(
            &c.id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await?;
        made = Some(c.id);
    }
    let took = ms(t.elapsed());
    if let Some(id) = made {
        let rm = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        d.remove_container(&id, Some(rm)).await?;
    }
    let rm = RemoveImageOptions {
        force: true,
        ..Default::default()
    };
    d.remove_image(&image, Some(rm), None).await?;
    Ok(took)
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    pct(&v, 0.5)
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let tag = format!("{t}-snapshots");
    let opts = ServerOpts::default().arg("--tools=lifecycle,snapshots");
    let c = stdio_client(&tag, &state_dir(&tag), &opts).await?;
    for (id, mib) in [("big", 1024), ("mid", 100)] {
        ok(
            &c,
            "computer_create",
            json!({"computer_id": id, "temporary": false}),
        )
        .await?;
        let write = format!("head -c {}M /dev/urandom > /data.bin && sync", mib);
        exec(
            &c,
            json!({"computer_id": id, "command": write, "timeout": 600}),
        )
        .await?;
    }

    // A snapshot of 1 GiB written, in turns with the engine's own commit.
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        floor.push(engine_copy("kilntainer-big", &tag, false).await?);
        let s = Instant::now();
        let r = ok(&c, "computer_snapshot", json!({"computer_id": "big"})).await?;
        ours.push(ms(s.elapsed()));
        let sid = r["snapshot_id"].as_str().context("snapshot_id")?.to_owned();
        anyhow::ensure!(r["size_bytes"].as_u64().unwrap_or(0) >= 1 << 30, "{r}");
        ok(&c, "computer_snapshot_delete", json!({"snapshot_id": sid})).await?;
    }
    let (ours, floor) = (p50(ours), p50(floor));
    rows.push(Row {
        name: "snapshots: computer_snapshot of 1 GiB written, p50",
        value: ours,
        unit: "ms",
        floor: Some(floor),
        target: "<= 1.2x floor (the engine's commit)".into(),
        pass: ours <= 1.2 * floor,
    });

    // A fork of a computer with 100 MiB written, ready to run.
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        floor.push(engine_copy("kilntainer-mid", &tag, true).await?);
        let id = format!("fork-{i}");
        let s = Instant::now();
        ok(
            &c,
            "computer_fork",
            json!({"from": "mid", "computer_id": id}),
        )
        .await?;
        ours.push(ms(s.elapsed()));
        let r = exec(
            &c,
            json!({"computer_id": id, "command": "stat -c %s /data.bin"}),
        )
        .await?;
        anyhow::ensure!(r["stdout"].as_str() == Some("104857600\n"), "{r}");
        ok(&c, "computer_delete", json!({"computer_id": id})).await?;
    }
    let (ours, floor) = (p50(ours), p50(floor));
    rows.push(Row {
        name: "snapshots: computer_fork of a computer with 100 MiB written, p50",
        value: ours,
        unit: "ms",
        floor: Some(floor),
        target: "<= 1000 ms".into(),
        pass: ours <= 1000.0,
    });
    for id in ["big", "mid"] {
        ok(&c, "computer_delete", json!({"computer_id": id})).await?;
    }
    c.cancel().await?;
    remove_all(&tag).await
}

//! Issue 18: the warm pool (`--warm-pool N`). Members are started computers named
//! `msc-pool.<slug>` that no list shows; a new computer whose id the server picks is one
//! of them, renamed; the pool refills of the kind asked for; shutdown removes it, the next
//! start reaps a killed server's, and a member of an image the tag no longer names is
//! never handed out.

use std::time::{Duration, Instant};

use serde_json::json;
use tests::*;

/// The slugs of `tag`'s pool members not handed out yet, once there are `n` running.
async fn members(tag: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let slugs: Vec<String> = containers(tag)
            .await?
            .into_iter()
            .filter(|c| c.state.map(|s| s.to_string()).as_deref() == Some("running"))
            .flat_map(|c| c.names.unwrap_or_default())
            .filter_map(|n| n.strip_prefix("/msc-pool.").map(str::to_owned))
            .collect();
        if slugs.len() == n {
            return Ok(slugs);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{tag}: {} pool members running, expected {n}; log: {}",
            slugs.len(),
            log_tail(tag, 20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn labels(name: &str) -> anyhow::Result<std::collections::HashMap<String, String>> {
    let c = docker()?.inspect_container(name, None).await?;
    Ok(c.config.and_then(|c| c.labels).unwrap_or_default())
}

/// Waits until the server's ready gauge says `n` (a member runs a moment before it is
/// ready: its relay is opened first).
async fn wait_ready(base: &str, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(base, "msc_warm_pool_ready").await? != n as f64 {
        anyhow::ensure!(Instant::now() < deadline, "the ready gauge never said {n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test]
async fn issue_18_warm_pool_hands_out_refills_and_stays_out_of_sight() -> anyhow::Result<()> {
    let t = tag("pool");
    let opts = ServerOpts::lifecycle().arg("--warm-pool").arg("2");
    let server = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let c = server.legacy_client(None).await?;
    let ready = members(&t, 2).await?;
    wait_ready(&server.base, 2).await?;
    // Members are not computers: nothing lists them, and their slugs name nothing yet.
    // (Other tests' permanent computers may be listed: the list is checked by id.)
    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    for m in &ready {
        assert!(listed(&list, m).is_none(), "member {m} was listed");
    }
    let r = call(&c, "computer_restart", json!({"computer_id": ready[0]})).await?;
    assert_eq!(r.is_error, Some(true), "a member was reachable by its slug");

    // The session's first computer is a member: its slug, its hostname, its labels.
    let r = exec(&c, json!({"args": ["hostname"]})).await?;
    let s = r["computer_id"].as_str().unwrap().to_owned();
    assert!(ready.contains(&s), "{s} was not one of {ready:?}");
    assert_eq!(
        (r["stdout"].as_str(), r["temporary"].as_bool()),
        (Some(&*format!("{s}\n")), Some(true))
    );
    let l = labels(&format!("kilntainer-{s}")).await?;
    assert_eq!(l["kilntainers.computer-id"], s);
    assert_eq!(l["kilntainers.temporary"], "true");
    // It refills; the member handed out is no longer one.
    let refilled = members(&t, 2).await?;
    assert!(!refilled.contains(&s));
    assert_eq!(
        metric(&server.base, "msc_warm_pool_handouts_total{result=\"hit\"}").await?,
        1.0
    );

    // A permanent computer with a fresh slug: the pool held only temporaries, so the first
    // is made on demand and one temporary member makes room for a permanent one...
    let p1 = call(&c, "computer_create", json!({"temporary": false})).await?;
    let p1 = p1.structured_content.unwrap()["computer_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!refilled.contains(&p1));
    let deadline = Instant::now() + Duration::from_secs(60);
    let permanent_member = loop {
        let now = members(&t, 2).await.unwrap_or_default();
        let mut found = None;
        for m in &now {
            if labels(&format!("msc-pool.{m}")).await?["kilntainers.temporary"] == "false" {
                found = Some(m.clone());
            }
        }
        if let Some(m) = found {
            break m;
        }
        anyhow::ensure!(Instant::now() < deadline, "no permanent member was made");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // ...which the next one is (once it is ready).
    wait_ready(&server.base, 2).await?;
    let p2 = call(&c, "computer_create", json!({"temporary": false})).await?;
    let p2 = p2.structured_content.unwrap()["computer_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(p2, permanent_member);
    let r = exec(&c, json!({"args": ["hostname"], "computer_id": p2})).await?;
    assert_eq!(r["stdout"], format!("{p2}\n"));
    assert_eq!(r["temporary"], false);
    // A computer named by its caller is never a member (its name is its hostname).
    let named = format!("{t}-named");
    let r = exec(&c, json!({"args": ["hostname"], "computer_id": named})).await?;
    assert_eq!(r["stdout"], format!("{named}\n"));
    let now = members(&t, 2).await?;
    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    for id in [&s, &p1, &p2, &named] {
        assert!(listed(&list, id).is_some(), "{id} is not listed: {list}");
    }
    for m in &now {
        assert!(listed(&list, m).is_none(), "member {m} was listed");
    }

    // Shutdown removes the temporaries and the pool; the permanent ones stay, and a server
    // without a pool finds a former member again by its labels.
    drop(c);
    let status = server.terminate().await?;
    assert!(status.success(), "{status:?}");
    wait_for_count(&t, 2, Duration::from_secs(20)).await?;
    let next = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let r = exec(
        &next,
        json!({"args": ["hostname"], "computer_id": p2, "temporary": false}),
    )
    .await?;
    assert_eq!(r["stdout"], format!("{p2}\n"));
    next.cancel().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_18_warm_pool_of_a_killed_server_is_reaped_by_the_next_start() -> anyhow::Result<()> {
    let t = tag("poolkill");
    let mut cmd = command(
        &t,
        &state_dir(&t),
        &ServerOpts::default().arg("--warm-pool").arg("3"),
    );
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(log_file(&t)));
    let mut child = cmd.spawn()?;
    members(&t, 3).await?;
    child.kill().await?; // SIGKILL: no cleanup possible
    child.wait().await?;
    assert_eq!(containers(&t).await?.len(), 3);
    // A live server's pool is never touched by the reaper.
    let live_tag = tag("poolkill-live");
    let live = stdio_client(
        &live_tag,
        &state_dir(&t),
        &ServerOpts::default().arg("--warm-pool").arg("1"),
    )
    .await?;
    members(&live_tag, 1).await?;
    let next = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await?;
    assert_eq!(
        members(&live_tag, 1).await?.len(),
        1,
        "a live server's member was reaped"
    );
    live.cancel().await?;
    next.cancel().await?;
    wait_for_count(&live_tag, 0, Duration::from_secs(20)).await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_18_warm_pool_never_hands_out_a_member_of_another_image() -> anyhow::Result<()> {
    let t = tag("poolimg");
    let d = docker()?;
    let image = format!("msc-test/pool-{t}");
    let retag = |from: &'static str| {
        let (d, image) = (d.clone(), image.clone());
        async move {
            d.tag_image(
                from,
                Some(bollard::query_parameters::TagImageOptions {
                    repo: Some(image),
                    tag: Some("latest".into()),
                }),
            )
            .await
        }
    };
    retag("debian:bookworm-slim").await?;
    let opts = ServerOpts::default()
        .arg("--warm-pool")
        .arg("1")
        .arg("--image")
        .arg(&format!("{image}:latest"))
        .arg("--tool-instruction-override")
        .arg("a test image");
    let server = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let c = server.legacy_client(None).await?;
    let old = members(&t, 1).await?.remove(0);
    wait_ready(&server.base, 1).await?;
    let old_container = d
        .inspect_container(&format!("msc-pool.{old}"), None)
        .await?
        .id;
    // The tag now names another image: the member made from the old one is not handed out
    // (its slug may be: the computer is made from scratch under it).
    retag("msc-test/busybox:latest").await?;
    let busybox = d.inspect_image("msc-test/busybox:latest").await?.id;
    let r = exec(&c, json!({"args": ["ls", "/bin/bash"]})).await?;
    assert_ne!(r["exit_code"], 0, "the computer runs the old image: {r}");
    let id = r["computer_id"].as_str().unwrap();
    let made = d
        .inspect_container(&format!("kilntainer-{id}"), None)
        .await?;
    assert_ne!(
        made.id, old_container,
        "the old image's member was handed out"
    );
    assert_eq!(made.image, busybox);
    // The stale member goes, and its replacement is made from the new image.
    let deadline = Instant::now() + Duration::from_secs(20);
    while d
        .inspect_container(&format!("msc-pool.{old}"), None)
        .await
        .is_ok()
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the stale member was not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fresh = members(&t, 1).await?.remove(0);
    let member = d
        .inspect_container(&format!("msc-pool.{fresh}"), None)
        .await?;
    assert_eq!(member.image, busybox);
    drop(c);
    server.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await?;
    let _ = d
        .remove_image(
            &format!("{image}:latest"),
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    remove_all(&t).await
}

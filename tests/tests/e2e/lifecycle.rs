//! Temporary and permanent computers, ownership, lifecycle tools, server restarts.

use std::time::Duration;

use serde_json::json;
use tests::*;

#[tokio::test]
async fn issue_2_permanent_without_id_is_new_and_not_the_default() -> anyhow::Result<()> {
    let t = tag("permnoid");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let p = exec(
        &c,
        json!({"command": "echo kept > /root/f", "temporary": false}),
    )
    .await?;
    assert_eq!(p["temporary"], false);
    let d = exec(&c, json!({"command": "cat /root/f"})).await?;
    assert_ne!(
        d["computer_id"], p["computer_id"],
        "permanent computer became the default"
    );
    assert_eq!(d["temporary"], true);
    c.cancel().await?;
    // The permanent one survives the session; the temporary one does not.
    wait_for_count(&t, 1, Duration::from_secs(20)).await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_2_ownership_between_sessions() -> anyhow::Result<()> {
    let t = tag("owner");
    let state = state_dir(&t);
    let a = stdio_client(&t, &state, &ServerOpts::default()).await?;
    let b = stdio_client(&t, &state, &ServerOpts::default()).await?;
    let tmp = format!("{t}-tmp");
    let perm = format!("{t}-perm");
    exec(
        &a,
        json!({"command": "echo secret > /tmp/s", "computer_id": tmp}),
    )
    .await?;
    // Guessing another session's temporary id gets nowhere.
    let r = call(
        &b,
        "terminal_execute",
        json!({"command": "cat /tmp/s", "computer_id": tmp}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("another session"), "{}", text(&r));
    // Permanent computers are shared by id.
    exec(
        &a,
        json!({"command": "echo shared > /tmp/p", "computer_id": perm, "temporary": false}),
    )
    .await?;
    let r = exec(&b, json!({"command": "cat /tmp/p", "computer_id": perm})).await?;
    assert_eq!(r["stdout"], "shared\n");
    assert_eq!(r["temporary"], false);
    // The other lifecycle value is refused, never silently switched.
    let r = call(
        &b,
        "terminal_execute",
        json!({"command": "true", "computer_id": perm, "temporary": true}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("temporary=false"), "{}", text(&r));
    let r = call(
        &a,
        "terminal_execute",
        json!({"command": "true", "computer_id": tmp, "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    a.cancel().await?;
    b.cancel().await?;
    wait_for_count(&t, 1, Duration::from_secs(20)).await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_2_lifecycle_tools() -> anyhow::Result<()> {
    let t = tag("tools");
    let state = state_dir(&t);
    let mut opts = ServerOpts::lifecycle();
    opts.env
        .push(("ENABLE_LIFECYCLE_TOOLS".into(), "  TRUE\n".into()));
    let c = stdio_client(&t, &state, &opts).await?;
    let names: Vec<String> = c
        .list_all_tools()
        .await?
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        names,
        [
            "terminal_execute",
            "computer_dashboard",
            "computer_list",
            "computer_create",
            "computer_restart",
            "computer_factory_reset",
            "computer_delete"
        ]
    );
    let info = c.peer_info().unwrap();
    let caps = serde_json::to_value(&info.capabilities)?;
    assert_eq!(
        caps["extensions"]["io.modelcontextprotocol/ui"]["mimeTypes"][0],
        "text/html;profile=mcp-app"
    );

    let id = format!("{t}-box");
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": id, "temporary": false}),
    )
    .await?;
    let s = r.structured_content.clone().unwrap();
    assert_eq!(s["ok"], true);
    assert_eq!(s["computer_id"], id.as_str());
    assert_eq!(s["temporary"], false);
    assert!(s["sandbox_id"].as_str().unwrap().len() >= 12);
    // Attaching again is fine; with the other lifecycle value it is refused.
    let again = call(&c, "computer_create", json!({"computer_id": id})).await?;
    assert_eq!(
        again.structured_content.unwrap()["sandbox_id"],
        s["sandbox_id"]
    );
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": id, "temporary": true}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(
        r.structured_content.unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("permanent")
    );
    // A fresh slug each time without an id.
    let r1 = call(&c, "computer_create", json!({}))
        .await?
        .structured_content
        .unwrap();
    let r2 = call(&c, "computer_create", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert_ne!(r1["computer_id"], r2["computer_id"]);
    assert_eq!(r1["temporary"], true);

    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    let ids: Vec<&str> = list["computers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["computer_id"].as_str())
        .collect();
    assert_eq!(list["count"].as_u64().unwrap() as usize, ids.len());
    for want in [
        id.as_str(),
        r1["computer_id"].as_str().unwrap(),
        r2["computer_id"].as_str().unwrap(),
    ] {
        assert!(ids.contains(&want), "{want} not in {ids:?}");
    }
    let item = listed(&list, &id).unwrap();
    for key in [
        "computer_id",
        "sandbox_id",
        "backend",
        "state",
        "temporary",
        "image",
        "created_at",
        "network",
    ] {
        assert!(item.get(key).is_some(), "missing {key} in {item}");
    }
    assert_eq!(item["backend"], "docker");
    // SPEC §3.11: the effective policy; the server runs with the default `--network`.
    assert_eq!(item["network"], "all");
    assert_eq!(item["state"], "running");
    assert_eq!(item["image"], "debian:bookworm-slim");
    let dash = call(&c, "computer_dashboard", json!({}))
        .await?
        .structured_content
        .unwrap();
    // The same inventory as the list. Other tests running at the same time may add or remove
    // permanent computers (shared by id) between the two calls, so compare this test's
    // computers, not the counts.
    assert_eq!(
        dash["count"].as_u64().unwrap() as usize,
        dash["computers"].as_array().unwrap().len()
    );
    for want in [
        id.as_str(),
        r1["computer_id"].as_str().unwrap(),
        r2["computer_id"].as_str().unwrap(),
    ] {
        let (d, l) = (listed(&dash, want), listed(&list, want));
        assert!(
            d.is_some() && l.is_some(),
            "{want}: dashboard {d:?}, list {l:?}"
        );
    }

    exec(
        &c,
        json!({"command": "echo keep > /root/file", "computer_id": id}),
    )
    .await?;
    let r = call(&c, "computer_restart", json!({"computer_id": id})).await?;
    assert_eq!(r.structured_content.unwrap()["ok"], true);
    let r = exec(&c, json!({"command": "cat /root/file", "computer_id": id})).await?;
    assert_eq!(
        r["stdout"], "keep\n",
        "restart must keep the writable filesystem"
    );
    let r = call(&c, "computer_factory_reset", json!({"computer_id": id})).await?;
    assert_eq!(r.structured_content.unwrap()["temporary"], false);
    let r = exec(&c, json!({"command": "cat /root/file", "computer_id": id})).await?;
    assert_eq!(r["exit_code"], 1, "factory reset must erase the filesystem");
    let r = call(&c, "computer_delete", json!({"computer_id": id})).await?;
    assert_eq!(
        r.structured_content.unwrap(),
        json!({"ok": true, "computer_id": id, "deleted": true})
    );
    let r = call(&c, "computer_restart", json!({"computer_id": id})).await?;
    assert_eq!(r.is_error, Some(true));
    assert!(
        r.structured_content.unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("does not exist")
    );
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_2_permanent_found_again_after_server_restart() -> anyhow::Result<()> {
    let t = tag("rediscover");
    let state = state_dir(&t);
    let id = format!("{t}-keep");
    let c = stdio_client(&t, &state, &ServerOpts::lifecycle()).await?;
    exec(
        &c,
        json!({"command": "echo persisted > /root/p", "computer_id": id, "temporary": false}),
    )
    .await?;
    c.cancel().await?;
    let c = stdio_client(&t, &state, &ServerOpts::lifecycle()).await?;
    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    let item = listed(&list, &id);
    assert_eq!(
        item.expect("permanent computer listed after restart")["temporary"],
        false
    );
    let r = exec(
        &c,
        json!({"command": "cat /root/p", "computer_id": id, "temporary": false}),
    )
    .await?;
    assert_eq!(r["stdout"], "persisted\n");
    c.cancel().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_2_foreign_container_name_is_refused() -> anyhow::Result<()> {
    let t = tag("foreign");
    let d = docker()?;
    let name = format!("kilntainer-{t}-x");
    let body = bollard::models::ContainerCreateBody {
        image: Some("debian:bookworm-slim".into()),
        cmd: Some(vec!["true".into()]),
        labels: Some([("msc-test".to_owned(), t.clone())].into()),
        ..Default::default()
    };
    let opts = bollard::query_parameters::CreateContainerOptions {
        name: Some(name),
        ..Default::default()
    };
    d.create_container(Some(opts), body).await?;
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let r = call(
        &c,
        "terminal_execute",
        json!({"command": "true", "computer_id": format!("{t}-x")}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).contains("not created by this server"),
        "{}",
        text(&r)
    );
    c.cancel().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_2_a_stopped_computer_is_started_again() -> anyhow::Result<()> {
    let t = tag("stopped");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let id = format!("{t}-s");
    exec(
        &c,
        json!({"command": "echo kept > /root/k", "computer_id": id}),
    )
    .await?;
    docker()?
        .stop_container(
            &format!("kilntainer-{id}"),
            None::<bollard::query_parameters::StopContainerOptions>,
        )
        .await?;
    let r = exec(&c, json!({"command": "cat /root/k", "computer_id": id})).await?;
    assert_eq!(r["stdout"], "kept\n");
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

/// SPEC §3.5: every failure of a `computer_*` tool — validation (a bad, missing or
/// mistyped id, an unknown argument), an unknown id, the other `temporary` value — is
/// `isError: true` with exactly `{"error": "<message>"}` as structured content, and the
/// same JSON as its one text block. Clients of the older project read
/// `structuredContent.error`.
#[tokio::test]
async fn issue_17_every_lifecycle_failure_has_the_error_shape() -> anyhow::Result<()> {
    let t = tag("lcshape");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let perm = format!("{t}-perm");
    let tmp = format!("{t}-tmp");
    let nope = format!("{t}-nope");
    for (id, temporary) in [(&perm, false), (&tmp, true)] {
        let r = call(
            &c,
            "computer_create",
            json!({"computer_id": id, "temporary": temporary}),
        )
        .await?;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
    }
    let mut cases = vec![
        ("computer_list", json!({"all": true}), "takes no arguments"),
        (
            "computer_dashboard",
            json!({"computer_id": perm}),
            "takes no arguments",
        ),
        (
            "computer_create",
            json!({"computer_id": "Bad_Id"}),
            "lowercase",
        ),
        (
            "computer_create",
            json!({"computer_id": perm, "temporary": "yes"}),
            "true or false",
        ),
        (
            "computer_create",
            json!({"computer_id": perm, "temporary": true}),
            "permanent",
        ),
        (
            "computer_create",
            json!({"computer_id": tmp, "temporary": false}),
            "temporary",
        ),
        ("computer_create", json!({"image": "x"}), "unknown argument"),
    ];
    for tool in [
        "computer_restart",
        "computer_factory_reset",
        "computer_delete",
    ] {
        cases.extend([
            (tool, json!({}), "needs `computer_id`"),
            (tool, json!({"computer_id": "-bad"}), "start and end"),
            (tool, json!({"computer_id": 7}), "must be a string"),
            (tool, json!({"computer_id": nope}), "does not exist"),
            (
                tool,
                json!({"computer_id": perm, "temporary": false}),
                "unknown argument",
            ),
        ]);
    }
    for (tool, arguments, needle) in cases {
        let r = call(&c, tool, arguments.clone()).await?;
        let what = format!("{tool} {arguments}");
        assert_eq!(r.is_error, Some(true), "{what}");
        let s = r.structured_content.clone().unwrap_or_default();
        let msg = s["error"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{what}: {s}");
        assert_eq!(s, json!({"error": msg}), "{what}: only `error`");
        assert_eq!(r.content.len(), 1, "{what}");
        let block: serde_json::Value = serde_json::from_str(&text(&r))?;
        assert_eq!(block, s, "{what}: the text block is the structured content");
    }
    // Nothing was touched: the two computers are still there, nothing else was made.
    assert_eq!(containers(&t).await?.len(), 2);
    let r = call(&c, "computer_delete", json!({"computer_id": perm})).await?;
    assert_eq!(r.is_error, Some(false));
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

//! Issue 13: the rules of `shared::registry` end to end, on the real WASM backend (no
//! daemon) behind the local HTTP server: private temporaries, shared permanents, one
//! default for concurrent first calls, a deleted default replaced, history with its
//! computer, and stateless temporaries that go when idle but never while a command runs.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::*;

const TOKEN: &str = "registry-token-0123456789abcdef";

fn id_of(v: &Value) -> String {
    v["computer_id"].as_str().unwrap_or_default().to_owned()
}

async fn listed(c: &Client) -> anyhow::Result<Value> {
    let r = call(c, "computer_list", json!({})).await?;
    Ok(serde_json::from_str(&text(&r))?)
}

async fn gone(dir: &Path, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while dir.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    !dir.exists()
}

#[tokio::test]
async fn issue_13_registry_rules_on_wasm() -> anyhow::Result<()> {
    let t = tag("registry");
    let state = state_dir(&t);
    let mut opts = wasm_opts().arg("--session-timeout").arg("3");
    opts.lifecycle = true;
    opts.env
        .push(("KILNTAINERS_AUTH_TOKEN".into(), TOKEN.into()));
    let server = HttpServer::start(&t, &state, &opts).await?;
    let a = server.legacy_client(Some(TOKEN)).await?;
    let b = server.legacy_client(Some(TOKEN)).await?;

    // Concurrent first calls of one session share one new default computer.
    let firsts = futures_util::future::join_all(
        (0..4).map(|i| exec(&a, json!({"command": format!("echo {i}")}))),
    )
    .await;
    let mut defaults: Vec<String> = Vec::new();
    for r in firsts {
        defaults.push(id_of(&r?));
    }
    defaults.dedup();
    assert_eq!(
        defaults.len(),
        1,
        "one default for concurrent calls: {defaults:?}"
    );
    let da = defaults.remove(0);
    assert_eq!(listed(&a).await?["computers"][0]["temporary"], true);

    // A's temporary is private: B cannot attach, see, restart or delete it.
    let r = call(
        &b,
        "terminal_execute",
        json!({"computer_id": da, "command": "true"}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).contains("another session"), "{}", text(&r));
    for tool in ["computer_restart", "computer_delete"] {
        let r = call(&b, tool, json!({"computer_id": da})).await?;
        assert_eq!(r.is_error, Some(true), "{tool}: {}", text(&r));
        assert!(text(&r).contains("does not exist"), "{tool}: {}", text(&r));
    }
    assert!(!ids(&listed(&b).await?).contains(&da));

    // A permanent computer is shared by id; asking for the other lifecycle is refused.
    let r = call(
        &a,
        "computer_create",
        json!({"computer_id": "shared-box", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(
        &b,
        json!({"computer_id": "shared-box", "command": "echo hi > /root/from-b"}),
    )
    .await?;
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = call(
        &b,
        "terminal_execute",
        json!({"computer_id": "shared-box", "temporary": true, "command": "true"}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("temporary=false"), "{}", text(&r));
    let r = exec(
        &a,
        json!({"computer_id": "shared-box", "command": "cat /root/from-b"}),
    )
    .await?;
    assert_eq!(r["stdout"], "hi\n", "{r}");
    assert_eq!(ids(&listed(&b).await?), ["shared-box"]);
    let mut want = vec![da.clone(), "shared-box".to_owned()];
    want.sort();
    let list_a = listed(&a).await?;
    assert_eq!(ids(&list_a), want);

    // History goes with its computer: four echoes on the default, none on the other.
    let item = |list: &Value, id: &str| {
        list["computers"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["computer_id"] == id).cloned())
            .unwrap_or_default()
    };
    let history = item(&list_a, &da)["history"].clone();
    assert_eq!(history.as_array().map(Vec::len), Some(4), "{history}");
    assert_eq!(
        item(&list_a, "shared-box")["history"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Deleting the default makes the next call without an id make a new one.
    let r = call(&a, "computer_delete", json!({"computer_id": da})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let next = id_of(&exec(&a, json!({"command": "true"})).await?);
    assert_ne!(next, da);
    assert_eq!(id_of(&exec(&a, json!({"command": "true"})).await?), next);
    let r = call(&b, "computer_delete", json!({"computer_id": "shared-box"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));

    // Stateless callers' temporaries go when idle, never while a command runs.
    let m = server.modern_client(Some(TOKEN)).await?;
    let r = exec(&m, json!({"computer_id": "idle-box", "command": "true"})).await?;
    assert_eq!(r["temporary"], true, "{r}");
    let busy = exec(
        &m,
        json!({"computer_id": "busy-box", "command": "sleep 5; echo survived > /root/f && cat /root/f"}),
    );
    let idle_dir = state.join("wasm").join("idle-box");
    let (busy, idle_gone) = tokio::join!(busy, gone(&idle_dir, Duration::from_secs(10)));
    assert!(idle_gone, "an idle stateless temporary was not reaped");
    let busy = busy?;
    assert_eq!(busy["stdout"], "survived\n", "{busy}");
    assert!(
        gone(
            &state.join("wasm").join("busy-box"),
            Duration::from_secs(10)
        )
        .await,
        "the busy computer was not reaped once idle"
    );
    // Idle legacy sessions end too, and their temporaries with them.
    assert!(gone(&state.join("wasm").join(&next), Duration::from_secs(10)).await);
    for c in [a, b, m] {
        let _ = c.cancel().await;
    }
    server.terminate().await?;
    Ok(())
}

//! A team's network policy at the gateway (SPEC §3.11, §5; issue 38): `TEAM_NETWORK` under
//! `wrangler dev`, in front of a real executor with Docker, whose egress gate enforces it.
//! New computers of a team get its policy (through an exec, a create or a file call); an
//! agent narrows it, never widens it; another team's policy is its own.

use serde_json::json;
use tests::*;

use crate::egress::blocked_hosts;
use crate::gateway::{EXECUTOR_SECRET, claims, sign, vars};
use tests::upstream::Recorder;

#[tokio::test]
async fn issue_38_the_gateway_holds_a_network_policy_per_team() -> anyhow::Result<()> {
    let t = tag("gwnet");
    let allowed = Recorder::start(None).await?;
    let other = Recorder::start(None).await?;
    let gw_ip = bridge_gateway().await?;
    let (ap, op) = (allowed.port, other.port);
    // An open executor: the team's policy is what confines its computers.
    let opts = ServerOpts::default()
        .arg("--image")
        .arg("msc-test/net:latest")
        .arg("--tool-instruction-override")
        .arg("Debian bookworm with curl.")
        .arg(&format!("--egress-resolve=allowed.test={gw_ip}"))
        .arg(&format!("--egress-resolve=other.test={gw_ip}"));
    let x = HttpServer::start_executor(&t, &state_dir(&t), &opts, EXECUTOR_SECRET).await?;
    let mut v = vars(&x.base, 300);
    v.push(("TOOLS", "exec,files,lifecycle".into()));
    v.push((
        "TEAM_NETWORK",
        json!({"*": {"allow": [format!("allowed.test:{ap}")]}, "ops": "all"}).to_string(),
    ));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &v).await?;
    let dev = gw.modern_client(&sign(&claims("team-dev", "u1"))).await?;
    let ops = gw.modern_client(&sign(&claims("ops", "u2"))).await?;
    let probe = format!(
        "curl -s --max-time 5 http://allowed.test:{ap}/; echo \" a=$?\"; \
         curl -s --max-time 5 http://other.test:{op}/; echo \" o=$?\""
    );

    // The default team policy, through an exec that makes the computer.
    let r = exec(&dev, json!({"computer_id": "box", "command": probe})).await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("ok a=0"), "{r}");
    assert!(!out.contains("o=0"), "{r}");
    assert!(blocked_hosts(&r).iter().any(|h| h == "other.test"), "{r}");
    assert!(other.heads().is_empty(), "{:?}", other.heads());
    // ...through a file call that makes one, and through computer_create.
    call_ok(
        &dev,
        "computer_file_write",
        json!({"computer_id": "filed", "path": "/tmp/f", "content": "x"}),
    )
    .await?;
    call_ok(
        &dev,
        "computer_create",
        json!({"computer_id": "made", "temporary": false}),
    )
    .await?;
    for id in ["filed", "made"] {
        let r = exec(&dev, json!({"computer_id": id, "command": probe})).await?;
        let out = r["stdout"].as_str().unwrap_or_default();
        assert!(out.contains("ok a=0") && !out.contains("o=0"), "{id}: {r}");
    }
    let list = call_ok(&dev, "computer_list", json!({})).await?;
    for id in ["box", "filed", "made"] {
        assert_eq!(
            listed(&list, id).unwrap()["network"],
            json!({"allow": [format!("allowed.test:{ap}")]}),
            "{id}: {list}"
        );
    }
    // An agent narrows, never widens.
    let r = exec(
        &dev,
        json!({"computer_id": "quiet", "command": probe, "network": "none"}),
    )
    .await?;
    assert!(
        !r["stdout"].as_str().unwrap_or_default().contains("a=0"),
        "{r}"
    );
    let e = call_error(
        &dev,
        "computer_create",
        json!({"computer_id": "wide", "network": {"allow": [format!("other.test:{op}")]}}),
    )
    .await?;
    assert!(
        e.contains(&format!(
            "network other.test:{op}: outside team team-dev's policy"
        )),
        "{e}"
    );
    let list = call_ok(&dev, "computer_list", json!({})).await?;
    assert!(listed(&list, "wide").is_none(), "nothing made: {list}");

    // Another team's policy is its own: open (names resolve as usual there, so by address).
    let open = format!("curl -s --max-time 5 http://{gw_ip}:{op}/; echo \" o=$?\"");
    let r = exec(&ops, json!({"computer_id": "box", "command": open})).await?;
    assert!(
        r["stdout"].as_str().unwrap_or_default().contains("ok o=0"),
        "{r}"
    );
    remove_all(&t).await
}

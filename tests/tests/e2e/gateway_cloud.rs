//! Issue 7: the gateway Worker under `wrangler dev` placing computers directly on Fly
//! Machines and on E2B (no executor), against the local simulators of their APIs (which
//! validate every request against `specs/` and back each machine or sandbox with a real
//! container), driven by rmcp's Streamable HTTP client with JWTs of two teams.

use std::time::Duration;

use serde_json::{Value, json};
use tests::sim::e2b::{E2bSim, E2bSimOptions};
use tests::sim::fly::{FlySim, FlySimOptions};
use tests::*;

const JWT_SECRET: &str = "jwt-secret-for-gateway-cloud-tests-0123456789";
const FLY_TOKEN: &str = "fm2_gateway-test-token-for-the-fly-simulator";
const E2B_KEY: &str = "e2b_gateway-test-key-for-the-e2b-simulator";

fn token(team: &str, sub: &str) -> String {
    let c = json!({"iss": "https://issuer.test", "aud": "mcp-gateway-test", "sub": sub,
                   "team": team, "iat": unix_now(), "exp": unix_now() + 600});
    hs256(&c, JWT_SECRET).expect("sign")
}

fn auth_vars() -> Vec<(&'static str, String)> {
    vec![
        ("TOOLS", "exec,files,jobs,lifecycle".into()),
        ("JWT_HS256_SECRET", JWT_SECRET.into()),
        ("JWT_ISSUER", "https://issuer.test".into()),
        ("JWT_AUDIENCE", "mcp-gateway-test".into()),
    ]
}

async fn list(c: &Client) -> anyhow::Result<Value> {
    Ok(call(c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap_or_default())
}

/// Asserts that `path` does not exist on computer `id`.
async fn assert_missing(c: &Client, id: &str, path: &str) -> anyhow::Result<()> {
    let r = exec(
        c,
        json!({"computer_id": id, "command": format!("ls {path} 2>&1; true")}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("No such file"), "{path} on {id}: {r}");
    Ok(())
}

/// `GET`/`PUT /v1/files` on a computer the Worker placed itself (issue 15): 7 MiB up in
/// slices (E2B's through envd's file API) and back, the mode asked for, a missing file
/// (404), a directory and `create_only` over an existing file (400), and another team
/// refused (404).
async fn direct_files(gw: &Gateway, a: &str, b: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/files/box/{p}", gw.base);
    let data: Vec<u8> = (0..(7u32 << 20) + 5)
        .map(|i| (i.wrapping_mul(40_503) >> 7) as u8)
        .collect();
    let r = http
        .put(url("tmp/up/d.bin?make_dirs=true&mode=0600"))
        .bearer_auth(a)
        .body(data.clone())
        .send()
        .await?;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let v: Value = r.json().await?;
    assert_eq!(
        (v["size"].as_u64(), v["sha256"].as_str()),
        (
            Some(data.len() as u64),
            Some(shared::files::sha256_hex(&data).as_str())
        ),
        "{v}"
    );
    let r = http.get(url("tmp/up/d.bin")).bearer_auth(a).send().await?;
    assert_eq!(r.status(), 200);
    assert!(
        r.bytes().await?.as_ref() == data.as_slice(),
        "the bytes read back differ"
    );
    let c = gw.modern_client(a).await?;
    let r = exec(
        &c,
        json!({"computer_id": "box", "command": "stat -c %a /tmp/up/d.bin"}),
    )
    .await?;
    assert_eq!(r["stdout"], "600\n", "{r}");
    c.cancel().await?;
    for (p, status) in [("tmp/up/none", 404), ("tmp/up", 400)] {
        let r = http.get(url(p)).bearer_auth(a).send().await?;
        assert_eq!(r.status(), status, "{p}: {:?}", r.text().await);
    }
    let r = http
        .put(url("tmp/up/d.bin?create_only=true"))
        .bearer_auth(a)
        .body("x")
        .send()
        .await?;
    assert_eq!(r.status(), 400, "{:?}", r.text().await);
    let r = http.get(url("tmp/up/d.bin")).bearer_auth(b).send().await?;
    assert_eq!(r.status(), 404, "{:?}", r.text().await);
    Ok(())
}

/// What both providers must do the same through the gateway: exec shapes, stdin, working
/// directory, timeouts, two teams' `box` kept apart, permanent computers across restart,
/// factory reset, list, delete, temporaries removed with their legacy session, and no
/// gateway secret inside a computer.
async fn common(gw: &Gateway, t: &str, backend: &str, secrets: &[&str]) -> anyhow::Result<()> {
    let a = gw.modern_client(&token("team-a", "u1")).await?;
    let r = exec(
        &a,
        json!({"computer_id": "box", "command": "echo hi; echo err >&2; echo a-was-here > /root/mark; exit 3"}),
    )
    .await?;
    assert_eq!(
        (
            r["stdout"].as_str(),
            r["stderr"].as_str(),
            r["exit_code"].as_i64()
        ),
        (Some("hi\n"), Some("err\n"), Some(3)),
        "{r}"
    );
    assert_eq!(r["computer_id"], "box", "{r}");
    // The file tools, straight from the Worker through the provider's exec (issue 15).
    cloud_files(&a, "box").await?;
    cloud_big_files(&a, "box").await?;
    direct_files(gw, &token("team-a", "u1"), &token("team-b", "u1")).await?;
    // Jobs too (issue 14): started, read, written, signalled and listed from the Worker.
    let sleeping = tests::jobs::job_basics(&a, "box", false).await?;
    let r = exec(
        &a,
        json!({"computer_id": "box", "args": ["cat"], "stdin": "piped 'q' $(x)\n"}),
    )
    .await?;
    assert_eq!(r["stdout"], "piped 'q' $(x)\n", "{r}");
    let r = exec(
        &a,
        json!({"computer_id": "box", "command": "pwd", "working_directory": "/usr"}),
    )
    .await?;
    assert_eq!(r["stdout"], "/usr\n", "{r}");
    let r = exec(
        &a,
        json!({"computer_id": "box", "command": "pwd", "working_directory": "/nope"}),
    )
    .await?;
    assert_eq!(r["exit_code"], 126, "{r}");
    let r = exec(
        &a,
        json!({"computer_id": "box", "command": "echo before; sleep 30", "timeout": 3}),
    )
    .await?;
    assert_eq!(
        (
            r["exit_code"].as_i64(),
            r["timed_out"].as_bool(),
            r["stdout"].as_str()
        ),
        (Some(124), Some(true), Some("before\n")),
        "{r}"
    );
    // Output is byte-exact (Fly's exec API speaks strings: the job runner sends base64).
    let r = exec(
        &a,
        json!({"computer_id": "box", "command": "printf '\\377\\376'; printf '\\377' >&2"}),
    )
    .await?;
    assert_eq!(
        (r["stdout_base64"].as_str(), r["stderr_base64"].as_str()),
        (Some("//4="), Some("/w==")),
        "{r}"
    );
    // No secret of the gateway is visible inside a computer.
    let r = exec(
        &a,
        json!({"computer_id": "box", "command": "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; ls -la / /root"}),
    )
    .await?;
    let seen = r.to_string();
    for s in secrets.iter().chain([&JWT_SECRET]) {
        assert!(!seen.contains(s), "a gateway secret is visible: {seen}");
    }

    // Team b's `box` is another computer.
    let b = gw.modern_client(&token("team-b", "u2")).await?;
    assert_missing(&b, "box", "/root/mark").await?;
    // Team a's job is not team b's, by id alone or on b's own `box`.
    for args in [
        json!({"job_id": sleeping}),
        json!({"job_id": sleeping, "computer_id": "box"}),
        json!({"job_id": sleeping, "signal": "KILL", "computer_id": "box"}),
    ] {
        let e = tests::jobs::job_error(&b, args.clone()).await?;
        assert!(e.contains("no job"), "{args}: {e}");
    }
    let r = job(
        &a,
        json!({"job_id": sleeping, "signal": "KILL", "wait_ms": 5000}),
    )
    .await?;
    let last = if r["running"] == false {
        r
    } else {
        tests::jobs::drain(&a, &sleeping, "box").await?.1
    };
    assert_eq!(last["exit_code"], 137, "{last}");

    // The Tasks extension over the same jobs: the provider's job read as bytes into the
    // task's record in the team's object; another team cannot read it.
    let (at_a, at_b) = (
        crate::tasks::At::with_token(&gw.url, &token("team-a", "u1")),
        crate::tasks::At::with_token(&gw.url, &token("team-b", "u1")),
    );
    let r = crate::tasks::run(
        &at_a,
        json!({"command": "echo one; sleep 1; printf 'tw\\377o'; exit 4", "computer_id": "box", "yield_ms": 200}),
        true,
    )
    .await?;
    assert_eq!(r["resultType"], "task", "{r}");
    let task_id = r["taskId"].as_str().unwrap().to_owned();
    let e = crate::tasks::task_error(&at_b, "tasks/get", &task_id).await?;
    assert!(e.contains("unknown task"), "{e}");
    let done = crate::tasks::settle(&at_a, &task_id).await?;
    assert_eq!(done["status"], "completed", "{done}");
    let sc = &done["result"]["structuredContent"];
    assert_eq!(
        (sc["exit_code"].clone(), sc["stdout_base64"].clone()),
        (json!(4), json!("b25lCnR3/28=")),
        "{sc}"
    );

    // A permanent computer keeps its files across a restart; a factory reset empties it.
    let r = call(
        &a,
        "computer_create",
        json!({"computer_id": "keep", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    exec(
        &a,
        json!({"computer_id": "keep", "command": "echo kept > /root/note"}),
    )
    .await?;
    let r = call(&a, "computer_restart", json!({"computer_id": "keep"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(
        &a,
        json!({"computer_id": "keep", "args": ["cat", "/root/note"]}),
    )
    .await?;
    assert_eq!(r["stdout"], "kept\n", "{r}");
    let l = list(&a).await?;
    assert_eq!(ids(&l), ["box", "keep"], "{l}");
    assert!(
        l["computers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["backend"] == backend),
        "{l}"
    );
    assert_eq!(ids(&list(&b).await?), ["box"]);
    let r = call(&a, "computer_factory_reset", json!({"computer_id": "keep"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_missing(&a, "keep", "/root/note").await?;
    // Team b cannot reach team a's computer.
    let r = call(&b, "computer_delete", json!({"computer_id": "keep"})).await?;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(containers(t).await?.len(), 3);

    // A legacy session's temporary goes when the session is closed.
    let s = gw.legacy_client(&token("team-a", "u3")).await?;
    let r = exec(&s, json!({"command": "echo from-session"})).await?;
    assert_eq!(r["stdout"], "from-session\n", "{r}");
    assert_eq!(containers(t).await?.len(), 4);
    s.cancel().await?;
    wait_for_count(t, 3, Duration::from_secs(60)).await?;

    for (c, id) in [(&a, "keep"), (&a, "box"), (&b, "box")] {
        let r = call(c, "computer_delete", json!({"computer_id": id})).await?;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
    }
    assert!(ids(&list(&a).await?).is_empty());
    wait_for_count(t, 0, Duration::from_secs(60)).await
}

#[tokio::test]
async fn issue_7_gateway_places_computers_on_fly() -> anyhow::Result<()> {
    let t = tag("gwfly");
    let sim = FlySim::start(FlySimOptions::debian(FLY_TOKEN, &t)).await?;
    let mut vars = auth_vars();
    // No executors and no PLACEMENT: Fly, the one configured place, takes new computers.
    vars.extend([
        ("FLY_API_TOKEN", FLY_TOKEN.to_owned()),
        ("FLY_APP_NAME", format!("msc-gw-{}", &t[t.len() - 6..])),
        ("FLY_API_URL", sim.url.clone()),
        ("FLY_SYNC_EXEC_SECS", "2".to_owned()),
    ]);
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &vars).await?;
    common(&gw, &t, "fly", &[FLY_TOKEN]).await?;
    // A command longer than one exec request's window is polled to its end.
    let a = gw.modern_client(&token("team-a", "u1")).await?;
    let r = exec(
        &a,
        json!({"computer_id": "late", "command": "sleep 5; echo done-late", "timeout": 30}),
    )
    .await?;
    assert_eq!(r["stdout"], "done-late\n", "{r}");
    call(&a, "computer_delete", json!({"computer_id": "late"})).await?;
    let v = sim.violations();
    assert!(v.is_empty(), "requests off the Fly API description: {v:#?}");
    gw.stop().await?;
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(30)).await
}

#[tokio::test]
async fn issue_7_gateway_places_computers_on_e2b() -> anyhow::Result<()> {
    let t = tag("gwe2b");
    let sim = E2bSim::start(E2bSimOptions::debian(E2B_KEY, &t)).await?;
    let mut vars = auth_vars();
    vars.extend([
        ("PLACEMENT", "e2b".to_owned()),
        ("E2B_API_KEY", E2B_KEY.to_owned()),
        ("E2B_API_URL", sim.api_url.clone()),
        ("E2B_SANDBOX_URL", sim.sandbox_url.clone()),
    ]);
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &vars).await?;
    common(&gw, &t, "e2b", &[E2B_KEY]).await?;
    // Big file slices went through envd's file API from the Worker too (issue 15).
    let n = sim.request_counts();
    for key in [
        "POST /files",
        "GET /files",
        "POST /filesystem.Filesystem/Stat",
    ] {
        assert!(n.get(key).copied().unwrap_or(0) >= 2, "{key}: {n:?}");
    }
    let v = sim.violations();
    assert!(v.is_empty(), "requests off E2B's API descriptions: {v:#?}");
    gw.stop().await?;
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(30)).await
}

/// A gateway told to place computers on a provider it has no credentials for says what to
/// set, and changes nothing.
#[tokio::test]
async fn issue_7_gateway_without_provider_credentials_says_what_to_set() -> anyhow::Result<()> {
    let t = tag("gwnocred");
    let mut vars = auth_vars();
    vars.push(("PLACEMENT", "fly".to_owned()));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &vars).await?;
    let a = gw.modern_client(&token("team-a", "u1")).await?;
    let r = call(
        &a,
        "terminal_execute",
        json!({"computer_id": "box", "command": "true"}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).contains("FLY_API_TOKEN"), "{}", text(&r));
    assert!(ids(&list(&a).await?).is_empty());
    gw.stop().await
}

/// The team's alarm removes a stateless caller's idle temporary from Fly, and keeps the
/// permanent computer.
#[tokio::test]
async fn issue_7_gateway_alarm_reaps_idle_fly_temporaries() -> anyhow::Result<()> {
    let t = tag("gwflyidle");
    let sim = FlySim::start(FlySimOptions::debian(FLY_TOKEN, &t)).await?;
    let mut vars = auth_vars();
    vars.extend([
        ("PLACEMENT", "fly".to_owned()),
        ("FLY_API_TOKEN", FLY_TOKEN.to_owned()),
        ("FLY_APP_NAME", format!("msc-gw-{}", &t[t.len() - 6..])),
        ("FLY_API_URL", sim.url.clone()),
        ("SESSION_TIMEOUT_SECS", "2".to_owned()),
    ]);
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &vars).await?;
    let a = gw.modern_client(&token("team-a", "u1")).await?;
    exec(&a, json!({"computer_id": "idle-one", "command": "true"})).await?;
    exec(
        &a,
        json!({"computer_id": "kept", "command": "true", "temporary": false}),
    )
    .await?;
    assert_eq!(containers(&t).await?.len(), 2);
    wait_for_count(&t, 1, Duration::from_secs(30)).await?;
    assert_eq!(ids(&list(&a).await?), ["kept"]);
    call(&a, "computer_delete", json!({"computer_id": "kept"})).await?;
    let v = sim.violations();
    assert!(v.is_empty(), "requests off the Fly API description: {v:#?}");
    gw.stop().await?;
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(30)).await
}

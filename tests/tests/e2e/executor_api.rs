//! Issue 6 (executor side): `mcp-sandbox-computer-vm-for-ai executor`, the versioned REST
//! API a gateway calls, against the real Docker daemon: results identical to the MCP
//! tools, stable error codes, teams that cannot reach each other's temporaries, and an auth
//! attack set that must all be refused.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use shared::executor_api::{Claims, GATEWAY_ISSUER};
use tests::*;

const SECRET: &str = "exec-secret-0123456789abcdef0123456789abcdef";

fn claims(team: &str) -> Claims {
    Claims {
        iss: GATEWAY_ISSUER.into(),
        aud: EXECUTOR_NAME.into(),
        sub: team.into(),
        iat: unix_now(),
        exp: unix_now() + 60,
        scope: "exec manage".into(),
        owner: String::new(),
    }
}

fn sign(c: &Claims, secret: &str) -> String {
    hs256(&serde_json::to_value(c).expect("claims"), secret).expect("sign")
}

fn token(team: &str) -> String {
    sign(&claims(team), SECRET)
}

/// `c` under `header`, signed with HMAC-SHA256 keyed by `key` whatever the header says:
/// what a verifier that trusts the header's `alg` with the key it holds would accept.
fn hmac_signed(header: Value, c: &Claims, key: &[u8]) -> String {
    let unsigned = forged(header, c, "");
    let message = unsigned.trim_end_matches('.');
    let key = jsonwebtoken::EncodingKey::from_secret(key).expect("key");
    let sig = jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
        .expect("hmac");
    format!("{message}.{sig}")
}

/// A token with an arbitrary header and signature (for `alg: none` and key confusion).
fn forged(header: Value, c: &Claims, signature: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.{}",
        b64.encode(header.to_string()),
        b64.encode(serde_json::to_string(c).expect("claims")),
        signature
    )
}

async fn req(
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let mut r = reqwest::Client::new().request(method, url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await?;
    let status = resp.status().as_u16();
    let text = resp.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

#[tokio::test]
async fn issue_6_executor_api() -> anyhow::Result<()> {
    let t = tag("xapi");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), SECRET).await?;
    let v1 = format!("{}/v1", x.base);
    use reqwest::Method as M;

    let (s, h) = req(M::GET, format!("{v1}/health"), None, None).await?;
    assert_eq!((s, h["status"].as_str()), (200, Some("ok")));
    // issue 13: the truth about what it serves and how busy it is.
    assert_eq!(h["backends"], json!(["docker"]), "{h}");
    assert!(h["capacity"]["cpus"].as_u64().unwrap() >= 1, "{h}");
    assert_eq!(
        (h["load"]["computers"].as_u64(), h["load"]["execs"].as_u64()),
        (Some(0), Some(0)),
        "{h}"
    );

    // The auth attack set: every one refused with 401 and the stable code.
    let expired = Claims {
        iat: unix_now() - 120,
        exp: unix_now() - 60,
        ..claims("a")
    };
    let future = Claims {
        iat: unix_now() + 120,
        exp: unix_now() + 180,
        ..claims("a")
    };
    let long = Claims {
        exp: unix_now() + 3600,
        ..claims("a")
    };
    let wrong_aud = Claims {
        aud: "someone-else".into(),
        ..claims("a")
    };
    let wrong_iss = Claims {
        iss: "not-the-gateway".into(),
        ..claims("a")
    };
    let no_team = claims("");
    let attacks: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        ("garbage", Some("not.a.jwt".into())),
        (
            "alg none",
            Some(forged(
                json!({"alg": "none", "typ": "JWT"}),
                &claims("a"),
                "",
            )),
        ),
        (
            // issue 46: signed for real, with the only key the executor holds (a bogus
            // signature would be refused for that reason alone).
            "RS256 header (key confusion)",
            Some(hmac_signed(
                json!({"alg": "RS256", "typ": "JWT"}),
                &claims("a"),
                SECRET.as_bytes(),
            )),
        ),
        (
            "HS384 header (another HMAC)",
            Some(hmac_signed(
                json!({"alg": "HS384", "typ": "JWT"}),
                &claims("a"),
                SECRET.as_bytes(),
            )),
        ),
        (
            "wrong secret",
            Some(sign(
                &claims("a"),
                "another-secret-0123456789abcdef0123456789",
            )),
        ),
        ("expired", Some(sign(&expired, SECRET))),
        (
            "issued in the future (nbf/iat)",
            Some(sign(&Claims { ..future }, SECRET)),
        ),
        ("lifetime too long", Some(sign(&long, SECRET))),
        ("wrong audience", Some(sign(&wrong_aud, SECRET))),
        ("wrong issuer", Some(sign(&wrong_iss, SECRET))),
        ("no team", Some(sign(&no_team, SECRET))),
    ];
    for (what, tok) in &attacks {
        let (s, body) = req(M::GET, format!("{v1}/computers"), tok.as_deref(), None).await?;
        assert_eq!(s, 401, "{what}: {body}");
        assert_eq!(body["error"]["code"], "unauthorized", "{what}: {body}");
        // issue 19: the parser's reasons stay in the executor's log.
        let said = if tok.is_some() {
            "invalid token"
        } else {
            "missing bearer token"
        };
        assert_eq!(body["error"]["message"], said, "{what}: {body}");
    }
    // The forger signs correctly: the same HMAC under the right header is accepted.
    let honest = hmac_signed(
        json!({"alg": "HS256", "typ": "JWT"}),
        &claims("a"),
        SECRET.as_bytes(),
    );
    let (s, body) = req(M::GET, format!("{v1}/computers"), Some(&honest), None).await?;
    assert_eq!(s, 200, "{body}");

    // Team a: create, exec (the tool's exact result shape), list.
    let (a, b) = (token("team-a"), token("team-b"));
    let id = format!("{t}-a");
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers"),
        Some(&a),
        Some(json!({"computer_id": id})),
    )
    .await?;
    assert_eq!(
        (s, &r["ok"], &r["temporary"]),
        (200, &json!(true), &json!(true)),
        "{r}"
    );
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&a),
        Some(json!({"command": "echo hi; exit 3"})),
    )
    .await?;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        (
            r["computer_id"].as_str(),
            r["stdout"].as_str(),
            r["exit_code"].as_i64(),
            r["temporary"].as_bool()
        ),
        (Some(id.as_str()), Some("hi\n"), Some(3), Some(true))
    );
    assert!(r["exec_duration_ms"].is_u64());
    // The executor's secret never reaches a computer.
    let (_, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&a),
        Some(json!({"command": "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; grep -rs exec-secret /etc /root /tmp /run 2>/dev/null"})),
    )
    .await?;
    assert!(r["stdout"].as_str().unwrap().contains("PATH="), "{r}");
    assert!(
        !r.to_string().contains(SECRET),
        "the executor secret is visible in a computer"
    );
    let (s, r) = req(M::GET, format!("{v1}/computers"), Some(&a), None).await?;
    assert_eq!(s, 200);
    assert!(ids(&r).contains(&id), "{r}");

    // Bad input: the tool's validation, as 400 bad_request; nothing runs.
    for body in [
        json!({"command": "ls", "args": ["ls"]}),
        json!({"command": "ls", "bogus": 1}),
        json!({"command": "ls", "timeout": 0}),
        json!({}),
    ] {
        let (s, r) = req(
            M::POST,
            format!("{v1}/computers/{id}/exec"),
            Some(&a),
            Some(body.clone()),
        )
        .await?;
        assert_eq!(
            (s, r["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{body}: {r}"
        );
    }
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers"),
        Some(&a),
        Some(json!({"computer_id": "Bad_ID!"})),
    )
    .await?;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{r}"
    );
    let (s, r) = req(M::POST, format!("{v1}/computers/{id}/exec"), Some(&a), None).await?;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{r}"
    );

    // Team b cannot see, run on, restart or delete team a's temporary.
    let (_, r) = req(M::GET, format!("{v1}/computers"), Some(&b), None).await?;
    assert!(!ids(&r).contains(&id), "{r}");
    let (s, _) = req(
        M::POST,
        format!("{v1}/computers/{id}/restart"),
        Some(&b),
        None,
    )
    .await?;
    assert_eq!(s, 404);
    let (s, _) = req(M::DELETE, format!("{v1}/computers/{id}"), Some(&b), None).await?;
    assert_eq!(s, 404);
    // issue 13: each team has its own id space on the executor, so team b's `id` is a
    // computer of its own (never team a's), whose hostname is the id it asked for.
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&a),
        Some(json!({"command": "touch /tmp/team-a-was-here"})),
    )
    .await?;
    assert_eq!(s, 200, "{r}");
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&b),
        Some(json!({"command": "hostname; ls /tmp"})),
    )
    .await?;
    assert_eq!(
        (s, r["computer_id"].as_str(), r["stdout"].as_str()),
        (200, Some(id.as_str()), Some(format!("{id}\n").as_str())),
        "{r}"
    );
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers"),
        Some(&b),
        Some(json!({"computer_id": id})),
    )
    .await?;
    assert_eq!((s, &r["computer_id"]), (200, &json!(id)), "{r}");
    let (s, r) = req(M::DELETE, format!("{v1}/computers/{id}"), Some(&b), None).await?;
    assert_eq!((s, &r["deleted"]), (200, &json!(true)), "{r}");
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&a),
        Some(json!({"args": ["ls", "/tmp/team-a-was-here"]})),
    )
    .await?;
    assert_eq!(
        (s, r["exit_code"].as_i64()),
        (200, Some(0)),
        "team a's computer was touched: {r}"
    );

    // The other temporary value is a conflict, not a silent switch.
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers"),
        Some(&a),
        Some(json!({"computer_id": id, "temporary": false})),
    )
    .await?;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{r}"
    );

    // Lifecycle.
    for op in ["restart", "factory-reset"] {
        let (s, r) = req(M::POST, format!("{v1}/computers/{id}/{op}"), Some(&a), None).await?;
        assert_eq!((s, &r["ok"]), (200, &json!(true)), "{op}: {r}");
    }
    let (s, r) = req(M::DELETE, format!("{v1}/computers/{id}"), Some(&a), None).await?;
    assert_eq!((s, &r["deleted"]), (200, &json!(true)), "{r}");
    let (s, r) = req(M::DELETE, format!("{v1}/computers/{id}"), Some(&a), None).await?;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{r}"
    );
    let (s, r) = req(M::GET, format!("{v1}/nope"), Some(&a), None).await?;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{r}"
    );

    // A temporary of team b is removed when the executor stops.
    let (s, _) = req(
        M::POST,
        format!("{v1}/computers"),
        Some(&b),
        Some(json!({"computer_id": format!("{t}-b")})),
    )
    .await?;
    assert_eq!(s, 200);
    assert!(x.terminate().await?.success());
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_6_executor_refuses_to_start_without_a_secret() -> anyhow::Result<()> {
    let t = tag("xsecret");
    for secret in ["", "short"] {
        let out = command(&t, &state_dir(&t), &ServerOpts::default())
            .args(["executor", "--listen", "127.0.0.1:0"])
            .env("MSC_EXECUTOR_SECRET", secret)
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("openssl rand -hex 32"));
    }
    Ok(())
}

/// issue 13: a WASM executor says what it serves, and keeps each team's id space (the
/// typed operations end to end on the daemon-less backend).
#[tokio::test]
async fn issue_13_wasm_executor_health_and_team_spaces() -> anyhow::Result<()> {
    let t = tag("xwasm");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &wasm_opts(), SECRET).await?;
    let v1 = format!("{}/v1", x.base);
    use reqwest::Method as M;
    let (s, h) = req(M::GET, format!("{v1}/health"), None, None).await?;
    assert_eq!(s, 200, "{h}");
    assert_eq!(h["backends"], json!(["go_busybox", "wasm"]), "{h}");
    let (a, b) = (token("team-a"), token("team-b"));
    let id = "x".repeat(63);
    let exec_as = |tok: String, command: &'static str| {
        let url = format!("{v1}/computers/{id}/exec");
        async move {
            req(
                M::POST,
                url,
                Some(&tok),
                Some(json!({"command": command, "temporary": false})),
            )
            .await
        }
    };
    let (s, r) = exec_as(a.clone(), "echo a > /tmp/owner; cat /tmp/owner").await?;
    assert_eq!((s, r["stdout"].as_str()), (200, Some("a\n")), "{r}");
    assert_eq!(r["computer_id"], json!(id), "{r}");
    // Issue 46: its hostname is the caller's id, never the team's key prefix (as on Docker).
    let (s, r) = exec_as(a.clone(), "hostname; cat /etc/hostname").await?;
    let want = format!("{id}\n{id}\n");
    assert_eq!((s, r["stdout"].as_str()), (200, Some(want.as_str())), "{r}");
    let (s, r) = exec_as(b.clone(), "cat /tmp/owner 2>/dev/null || echo none").await?;
    assert_eq!((s, r["stdout"].as_str()), (200, Some("none\n")), "{r}");
    let (_, h) = req(M::GET, format!("{v1}/health"), None, None).await?;
    assert_eq!(h["load"]["computers"], json!(2), "{h}");
    for tok in [&a, &b] {
        let (s, r) = req(M::GET, format!("{v1}/computers"), Some(tok), None).await?;
        assert_eq!((s, r["count"].as_u64()), (200, Some(1)), "{r}");
        assert_eq!(r["computers"][0]["computer_id"], json!(id), "{r}");
        let (s, r) = req(M::DELETE, format!("{v1}/computers/{id}"), Some(tok), None).await?;
        assert_eq!((s, &r["deleted"]), (200, &json!(true)), "{r}");
    }
    assert!(x.terminate().await?.success());
    Ok(())
}

/// Issue 14: jobs through the executor API, in the team's own space.
#[tokio::test]
async fn issue_14_jobs_through_the_executor_api() -> anyhow::Result<()> {
    let t = tag("xjobs");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), SECRET).await?;
    let v1 = format!("{}/v1", x.base);
    use reqwest::Method as M;
    let (a, b) = (token("a"), token("b"));
    let id = format!("{t}-p");
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&a),
        Some(json!({"command": "read l; echo \"got $l\"", "yield_ms": 300, "temporary": false, "env": {"X": "1"}})),
    )
    .await?;
    assert_eq!((s, r["running"].as_bool()), (200, Some(true)), "{r}");
    let job = r["job_id"].as_str().unwrap().to_owned();
    let url = format!("{v1}/computers/{id}/jobs/{job}");
    // Another team cannot reach it, nor list the computer's jobs.
    let (s, e) = req(M::POST, url.clone(), Some(&b), Some(json!({"wait_ms": 0}))).await?;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{e}"
    );
    let (s, _) = req(M::GET, format!("{v1}/computers/{id}/jobs"), Some(&b), None).await?;
    assert_eq!(s, 404);
    let (s, l) = req(M::GET, format!("{v1}/computers/{id}/jobs"), Some(&a), None).await?;
    assert_eq!((s, l["count"].as_u64()), (200, Some(1)), "{l}");
    // Bad bodies are refused before anything runs.
    let (s, _) = req(M::POST, url.clone(), Some(&a), Some(json!({"job_id": "x"}))).await?;
    assert_eq!(s, 400);
    let (s, r) = req(
        M::POST,
        url.clone(),
        Some(&a),
        Some(json!({"stdin_base64": "aGkK", "close_stdin": true, "wait_ms": 5000})),
    )
    .await?;
    assert_eq!(s, 200, "{r}");
    let mut out = r["stdout"].as_str().unwrap().to_owned();
    let mut last = r;
    while last["running"] == true {
        let (_, r) = req(
            M::POST,
            url.clone(),
            Some(&a),
            Some(json!({"wait_ms": 5000})),
        )
        .await?;
        out.push_str(r["stdout"].as_str().unwrap());
        last = r;
    }
    assert_eq!(
        (out.as_str(), last["exit_code"].as_i64()),
        ("got hi\n", Some(0))
    );
    let (s, _) = req(M::DELETE, format!("{v1}/computers/{id}"), Some(&a), None).await?;
    assert_eq!(s, 200);
    assert!(x.terminate().await?.success());
    remove_all(&t).await
}

/// issue 19 finding 3: the executor checks the token's scope on every route, and reaches
/// only computers that carry the caller's team (label and key), permanent ones included:
/// never a local server's, never one whose team label is missing.
#[tokio::test]
async fn issue_19_executor_checks_scope_and_team() -> anyhow::Result<()> {
    use reqwest::Method as M;
    let t = tag("xscope");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), SECRET).await?;
    let v1 = format!("{}/v1", x.base);
    let scoped = |scope: &str| executor_token_scoped(SECRET, "team-s", scope);
    let (exec_only, manage_only, none) = (scoped("exec")?, scoped("manage")?, scoped("")?);
    let forbidden = |what: &str, (s, r): (u16, Value), scope: &str| {
        assert_eq!(
            (s, r["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{what}: {r}"
        );
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&format!("`{scope}` scope")), "{what}: {r}");
    };

    // `exec` runs commands (a new permanent computer needs `manage` too: issue 46, item
    // 8), lists and uses files...
    let id = format!("{t}-p");
    let exec_on_id = |token: String| {
        let url = format!("{v1}/computers/{id}/exec");
        async move {
            let body = json!({"command": "echo ok", "temporary": false});
            req(M::POST, url, Some(&token), Some(body)).await
        }
    };
    let r = exec_on_id(exec_only.clone()).await?;
    forbidden("a new permanent computer with exec", r, "manage");
    assert_eq!(containers(&t).await?.len(), 0, "a refused call made one");
    let (s, r) = exec_on_id(executor_token(SECRET, "team-s")?).await?;
    assert_eq!((s, r["stdout"].as_str()), (200, Some("ok\n")), "{r}");
    let (s, r) = exec_on_id(exec_only.clone()).await?;
    assert_eq!((s, r["stdout"].as_str()), (200, Some("ok\n")), "{r}");
    let (s, r) = req(M::GET, format!("{v1}/computers"), Some(&exec_only), None).await?;
    assert_eq!(s, 200, "{r}");
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/files/write"),
        Some(&exec_only),
        Some(json!({"path": "/tmp/f", "content": "x"})),
    )
    .await?;
    assert_eq!(s, 200, "{r}");
    // ...but may not create, restart, reset or delete, permanent computers included.
    let body = Some(json!({"computer_id": format!("{t}-q")}));
    let r = req(M::POST, format!("{v1}/computers"), Some(&exec_only), body).await?;
    forbidden("create with exec", r, "manage");
    for op in ["restart", "factory-reset"] {
        let r = req(
            M::POST,
            format!("{v1}/computers/{id}/{op}"),
            Some(&exec_only),
            None,
        )
        .await?;
        forbidden(op, r, "manage");
    }
    let r = req(
        M::DELETE,
        format!("{v1}/computers/{id}"),
        Some(&exec_only),
        None,
    )
    .await?;
    forbidden("delete with exec", r, "manage");
    // `manage` alone may not run commands or list; no scope may do nothing.
    let r = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&manage_only),
        Some(json!({"command": "true"})),
    )
    .await?;
    forbidden("exec with manage", r, "exec");
    let r = req(M::GET, format!("{v1}/computers"), Some(&none), None).await?;
    forbidden("list without scope", r, "exec");
    let r = req(M::DELETE, format!("{v1}/computers/{id}"), Some(&none), None).await?;
    forbidden("delete without scope", r, "manage");
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/files/{id}/tmp/f", x.base))
        .bearer_auth(&manage_only)
        .send()
        .await?;
    assert_eq!(resp.status().as_u16(), 403, "a file stream needs `exec`");
    // The refused calls changed nothing: the computer still runs.
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{id}/exec"),
        Some(&exec_only),
        Some(json!({"command": "cat /tmp/f"})),
    )
    .await?;
    assert_eq!((s, r["stdout"].as_str()), (200, Some("x")), "{r}");

    // A container with the team's key but without its team label (a forged or older
    // one) and a local server's permanent computer are never reached.
    let docker = |args: &[&str]| -> anyhow::Result<()> {
        let out = std::process::Command::new("docker").args(args).output()?;
        anyhow::ensure!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let stray = format!("{t}-s");
    let local = format!("{t}-l");
    for key in [shared::teams::key(Some("team-s"), &stray), local.clone()] {
        docker(&[
            "run",
            "-d",
            "--name",
            &format!("kilntainer-{key}"),
            "--label",
            "kilntainers=true",
            "--label",
            &format!("kilntainers.computer-id={key}"),
            "--label",
            "kilntainers.temporary=false",
            "--label",
            &format!("msc-test={t}"),
            "debian:bookworm-slim",
            "sleep",
            "infinity",
        ])?;
    }
    let (s, r) = req(
        M::POST,
        format!("{v1}/computers/{stray}/exec"),
        Some(&exec_only),
        Some(json!({"command": "true"})),
    )
    .await?;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (409, Some("conflict")),
        "a computer without the team label was used: {r}"
    );
    let both = executor_token(SECRET, "team-s")?;
    let (s, r) = req(M::GET, format!("{v1}/computers"), Some(&both), None).await?;
    assert_eq!(s, 200, "{r}");
    let listed: Vec<&str> = r["computers"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["computer_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(listed, vec![id.as_str()], "{r}");
    let (s, _) = req(
        M::DELETE,
        format!("{v1}/computers/{stray}"),
        Some(&both),
        None,
    )
    .await?;
    assert_eq!(s, 404, "a computer without the team label was deleted");
    assert_eq!(
        containers(&t).await?.len(),
        3,
        "a refused call removed something"
    );

    let (s, r) = req(M::DELETE, format!("{v1}/computers/{id}"), Some(&both), None).await?;
    assert_eq!((s, &r["deleted"]), (200, &json!(true)), "{r}");
    assert!(x.terminate().await?.success());
    for key in [shared::teams::key(Some("team-s"), &stray), local] {
        docker(&["rm", "-f", &format!("kilntainer-{key}")])?;
    }
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

/// Issue 46, items 11 and 7: tokens as the gateway mints them (`gateway::exec_token`) work
/// only on the executor they name; a temporary made for one caller answers no other caller
/// of the team; and a temporary nobody names for `--executor-idle-timeout` is removed by
/// the executor itself (its gateway stopped asking), while a permanent one stays.
#[tokio::test]
async fn issue_46_executor_tokens_callers_and_idle_temporaries() -> anyhow::Result<()> {
    use gateway::exec_token::{Grant, sign as mint};
    use reqwest::Method as M;
    let t = tag("x46");
    let mut xs = Vec::new();
    for name in ["exec-a", "exec-b"] {
        let tn = format!("{t}-{name}");
        let args = ["--executor-idle-timeout", "2"];
        xs.push(
            HttpServer::start_named_executor(
                &tn,
                &state_dir(&tn),
                &wasm_opts(),
                SECRET,
                name,
                &args,
            )
            .await?,
        );
    }
    let (a, b) = (format!("{}/v1", xs[0].base), format!("{}/v1", xs[1].base));
    let token = |executor: &str, owner: &str| {
        let grant = Grant {
            executor,
            team: "team-46",
            owner,
            scope: "exec manage",
        };
        mint(SECRET, grant, unix_now()).map_err(anyhow::Error::msg)
    };

    // Item 11: a token for exec-a is refused by exec-b, and the other way round.
    let (for_a, for_b) = (
        token("exec-a", "user:alice")?,
        token("exec-b", "user:alice")?,
    );
    for (url, tok, want) in [
        (&a, &for_a, 200),
        (&b, &for_a, 401),
        (&b, &for_b, 200),
        (&a, &for_b, 401),
    ] {
        let (s, body) = req(M::GET, format!("{url}/computers"), Some(tok), None).await?;
        assert_eq!(s, want, "{url}: {body}");
    }

    // Item 7: alice's temporary on exec-a answers only alice.
    let (alice, bob, team) = (for_a, token("exec-a", "session:bob")?, token("exec-a", "")?);
    let exec = |tok: String, id: &'static str, body: Value| {
        let url = format!("{a}/computers/{id}/exec");
        async move { req(M::POST, url, Some(&tok), Some(body)).await }
    };
    let (s, r) = exec(
        alice.clone(),
        "tmp",
        json!({"command": "echo secret > /tmp/f"}),
    )
    .await?;
    assert_eq!((s, &r["temporary"]), (200, &json!(true)), "{r}");
    let (s, r) = exec(
        alice.clone(),
        "keep",
        json!({"command": "true", "temporary": false}),
    )
    .await?;
    assert_eq!(s, 200, "{r}");
    for other in [&bob, &team] {
        let (s, r) = exec(other.clone(), "tmp", json!({"command": "cat /tmp/f"})).await?;
        assert!(
            s == 404 || s == 409,
            "another caller reached alice's temporary: {s} {r}"
        );
        let (s, r) = req(M::GET, format!("{a}/computers"), Some(other), None).await?;
        assert_eq!((s, r["count"].as_u64()), (200, Some(1)), "{r}");
        assert_eq!(r["computers"][0]["computer_id"], "keep", "{r}");
    }
    let listed = |tok: String| {
        let url = format!("{a}/computers");
        async move {
            let (_, r) = req(M::GET, url, Some(&tok), None).await?;
            let mut found = ids(&r);
            found.sort();
            anyhow::Ok(found)
        }
    };
    assert_eq!(listed(alice.clone()).await?, ["keep", "tmp"]);

    // Nobody names `tmp` any more: the executor removes it after its idle timeout (2 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while listed(alice.clone()).await? != ["keep"] {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the idle temporary is still there: {:?}",
            listed(alice.clone()).await?
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (s, _) = req(M::DELETE, format!("{a}/computers/keep"), Some(&alice), None).await?;
    assert_eq!(s, 200);
    for x in xs {
        assert!(x.terminate().await?.success());
    }
    Ok(())
}

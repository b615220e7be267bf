//! Issue 6: the gateway Worker under `wrangler dev` (real workerd, real Durable Objects with
//! SQLite storage) in front of a real executor with Docker, driven by rmcp's Streamable
//! HTTP client in both eras, with JWTs: teams with their own id spaces, sessions, scopes,
//! the auth attack set, inventory that survives a wrangler restart, and the alarm that
//! reaps idle temporaries.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tests::*;

pub(crate) const EXECUTOR_SECRET: &str = "exec-secret-for-gateway-tests-0123456789";
const JWT_SECRET: &str = "jwt-secret-for-gateway-tests-0123456789ab";
const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "mcp-gateway-test";

pub(crate) fn claims(team: &str, sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "team": team,
           "iat": unix_now(), "exp": unix_now() + 600})
}

/// `c` under a header saying `alg`, signed with HMAC-SHA256 keyed by the gateway's
/// secret whatever the header says (key confusion).
fn hmac_as(alg: &str, c: &Value) -> String {
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let message = format!(
        "{}.{}",
        b64(json!({"alg": alg, "typ": "JWT"})),
        b64(c.clone())
    );
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).expect("key");
    let sig = jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
        .expect("hmac");
    format!("{message}.{sig}")
}

pub(crate) fn sign(c: &Value) -> String {
    hs256(c, JWT_SECRET).expect("sign")
}

pub(crate) fn vars(executor: &str, idle_secs: u64) -> Vec<(&'static str, String)> {
    vec![
        (
            "EXECUTORS",
            json!([{"name": "local", "url": executor}]).to_string(),
        ),
        ("EXECUTOR_SECRET", EXECUTOR_SECRET.into()),
        ("JWT_HS256_SECRET", JWT_SECRET.into()),
        ("JWT_ISSUER", ISSUER.into()),
        ("JWT_AUDIENCE", AUDIENCE.into()),
        ("SESSION_TIMEOUT_SECS", idle_secs.to_string()),
    ]
}

async fn raw(
    gw: &Gateway,
    token: Option<&str>,
    body: Value,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Value)> {
    let mut r = reqwest::Client::new()
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap_or_default());
    if let Some(name) = body["params"]["name"].as_str() {
        r = r.header("mcp-name", name);
    }
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.body(body.to_string()).send().await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    Ok((
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

fn list_call() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "computer_list", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
}

fn names_of(r: &Value) -> String {
    r["computer_id"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn issue_6_gateway_end_to_end() -> anyhow::Result<()> {
    let t = tag("gw");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), EXECUTOR_SECRET)
        .await?;
    let persist = state_dir(&t).join("wrangler");
    let gw = Gateway::start(&t, &persist, &vars(&x.base, 300)).await?;

    // Team a, user u1, stateless 2026-07-28.
    let a1 = gw.modern_client(&sign(&claims("team-a", "u1"))).await?;
    assert_eq!(a1.list_all_tools().await?.len(), 7);
    let r = exec(
        &a1,
        json!({"command": "echo hi; echo marker > /tmp/mark", "computer_id": "box"}),
    )
    .await?;
    assert_eq!(
        (r["computer_id"].as_str(), r["stdout"].as_str()),
        (Some("box"), Some("hi\n")),
        "{r}"
    );
    let r = exec(
        &a1,
        json!({"args": ["cat", "/tmp/mark"], "computer_id": "box"}),
    )
    .await?;
    assert_eq!(r["stdout"], "marker\n");
    let r = call(
        &a1,
        "computer_create",
        json!({"computer_id": "shared-box", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);

    // Two concurrent creates of one id give one computer (the team's DO serialises them).
    let twin = gw.modern_client(&sign(&claims("team-a", "u9"))).await?;
    let (x1, x2) = tokio::join!(
        call(
            &a1,
            "computer_create",
            json!({"computer_id": "twin", "temporary": false})
        ),
        call(
            &twin,
            "computer_create",
            json!({"computer_id": "twin", "temporary": false})
        )
    );
    let (x1, x2) = (x1?, x2?);
    assert_eq!(
        (x1.is_error, x2.is_error),
        (Some(false), Some(false)),
        "{:?} {:?}",
        x1.content,
        x2.content
    );
    assert_eq!(
        x1.structured_content.unwrap()["sandbox_id"],
        x2.structured_content.unwrap()["sandbox_id"],
        "one computer"
    );
    call(&a1, "computer_delete", json!({"computer_id": "twin"})).await?;

    // Team a, user u2, legacy session: its default computer; the permanent one is shared.
    let a2 = gw.legacy_client(&sign(&claims("team-a", "u2"))).await?;
    let d1 = exec(&a2, json!({"command": "echo one"})).await?;
    let d2 = exec(&a2, json!({"command": "echo two"})).await?;
    assert_eq!(
        d1["computer_id"], d2["computer_id"],
        "the session keeps its default computer"
    );
    let list = call(&a2, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    let seen = ids(&list);
    assert!(seen.contains(&"shared-box".to_owned()), "{seen:?}");
    assert!(seen.contains(&d1["computer_id"].as_str().unwrap().to_owned()));
    assert!(
        !seen.contains(&"box".to_owned()),
        "u1's temporary is private: {seen:?}"
    );
    let r = call(
        &a2,
        "terminal_execute",
        json!({"command": "true", "computer_id": "box"}),
    )
    .await?;
    assert_eq!(
        r.is_error,
        Some(true),
        "another session's temporary is refused"
    );

    // Team b has its own id space: its `box` is another computer; it sees nothing of team a.
    let b = gw.modern_client(&sign(&claims("team-b", "u1"))).await?;
    let list = call(&b, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert!(ids(&list).is_empty(), "{list}");
    let r = exec(
        &b,
        json!({"command": "cat /tmp/mark || echo none", "computer_id": "box"}),
    )
    .await?;
    assert_eq!(r["stdout"], "none\n", "team b reached team a's computer");
    let r = call(&b, "computer_restart", json!({"computer_id": "shared-box"})).await?;
    assert_eq!(
        r.is_error,
        Some(true),
        "team b cannot name team a's computer"
    );

    // Scopes: an exec-only token cannot manage computers.
    let mut c = claims("team-a", "u3");
    c["scope"] = json!("exec");
    let limited = gw.modern_client(&sign(&c)).await?;
    let r = call(
        &limited,
        "computer_delete",
        json!({"computer_id": "shared-box"}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(format!("{:?}", r.content).contains("manage"));

    // The auth attack set, each refused with 401 and where to find the metadata.
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let with = |k: &str, v: Value| {
        let mut c = claims("team-a", "u1");
        c[k] = v;
        sign(&c)
    };
    let attacks = [
        ("missing", None),
        ("garbage", Some("garbage".to_owned())),
        (
            "alg none",
            Some(format!(
                "{}.{}.",
                b64(json!({"alg": "none"})),
                b64(claims("team-a", "u1"))
            )),
        ),
        (
            // issue 46: signed for real, with the only key the gateway holds under the
            // header's algorithm (a bogus signature is refused for that alone).
            "RS256 header, HS key (confusion)",
            Some(hmac_as("RS256", &claims("team-a", "u1"))),
        ),
        (
            "HS384 header, HS key",
            Some(hmac_as("HS384", &claims("team-a", "u1"))),
        ),
        ("expired", Some(with("exp", json!(unix_now() - 300)))),
        ("not yet valid", Some(with("nbf", json!(unix_now() + 600)))),
        ("wrong audience", Some(with("aud", json!("other")))),
        (
            "wrong issuer",
            Some(with("iss", json!("https://evil.test"))),
        ),
        ("no team", Some(with("team", json!("")))),
        (
            "wrong secret",
            Some(hs256(
                &claims("team-a", "u1"),
                "another-secret-0123456789abcdef0123456789",
            )?),
        ),
    ];
    for (what, token) in attacks {
        let (status, headers, body) = raw(&gw, token.as_deref(), list_call()).await?;
        assert_eq!(status, 401, "{what}: {body}");
        let www = headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        assert!(
            www.contains("/.well-known/oauth-protected-resource"),
            "{what}: {www}"
        );
    }
    // The forger signs correctly: the same HMAC under the right header is accepted.
    let honest = hmac_as("HS256", &claims("team-a", "u1"));
    let (status, _, body) = raw(&gw, Some(&honest), list_call()).await?;
    assert_eq!(status, 200, "{body}");
    // A browser page of another site cannot drive it with a stolen-by-ambient token.
    let r = reqwest::Client::new()
        .post(&gw.url)
        .bearer_auth(sign(&claims("team-a", "u1")))
        .header("origin", "http://evil.example")
        .header("content-type", "application/json")
        .body(list_call().to_string())
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 403);
    let meta: Value = reqwest::get(format!("{}/.well-known/oauth-protected-resource", gw.base))
        .await?
        .json()
        .await?;
    assert_eq!(meta["resource"], format!("{}/mcp", gw.base));
    assert_eq!(meta["authorization_servers"][0], ISSUER);
    let page = reqwest::get(format!("{}/dashboard", gw.base)).await?;
    assert!(
        page.headers()["content-security-policy"]
            .to_str()?
            .contains("script-src 'sha256-")
    );
    assert!(page.text().await?.contains("Sandbox Computer Dashboard"));

    // Lifecycle through the gateway.
    for tool in ["computer_restart", "computer_factory_reset"] {
        let r = call(&a1, tool, json!({"computer_id": "box"})).await?;
        assert_eq!(r.is_error, Some(false), "{tool}: {:?}", r.content);
        assert_eq!(r.structured_content.unwrap()["computer_id"], "box");
    }
    let r = exec(
        &a1,
        json!({"command": "cat /tmp/mark 2>/dev/null || echo reset", "computer_id": "box"}),
    )
    .await?;
    assert_eq!(r["stdout"], "reset\n");

    // The inventory lives in the Durable Object: it survives a wrangler restart.
    // Ending the legacy session (DELETE) removes its temporary at the executor.
    let session_box = names_of(&d1);
    let before = containers(&t).await?.len();
    a2.cancel().await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while containers(&t).await?.len() != before - 1 {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{session_box} outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop((a1, b, limited));
    gw.stop().await?;
    let gw = Gateway::start(&t, &persist, &vars(&x.base, 300)).await?;
    let a1 = gw.modern_client(&sign(&claims("team-a", "u1"))).await?;
    let list = call(&a1, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    let seen = ids(&list);
    assert!(
        seen.contains(&"shared-box".to_owned()) && seen.contains(&"box".to_owned()),
        "{seen:?}"
    );
    for id in ["box", "shared-box"] {
        let r = call(&a1, "computer_delete", json!({"computer_id": id})).await?;
        assert_eq!(r.is_error, Some(false), "{id}: {:?}", r.content);
    }
    let list = call(&a1, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert!(!ids(&list).contains(&"box".to_owned()));
    gw.stop().await?;
    x.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_6_gateway_alarm_reaps_idle_temporaries() -> anyhow::Result<()> {
    let t = tag("gwalarm");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), EXECUTOR_SECRET)
        .await?;
    // The one-team static-token mode (no JWT configured).
    let mut v: Vec<(&str, String)> = vars(&x.base, 2)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("JWT_"))
        .collect();
    v.push(("STATIC_TOKEN", "static-token-for-the-alarm-test".into()));
    v.push(("STATIC_TEAM", "team-r".into()));
    v.push(("BENCH_ROUTES", "true".into()));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &v).await?;
    // issue 13: the benchmark's route is not in a build without the `bench` feature, even
    // with BENCH_ROUTES set.
    let r = reqwest::get(format!("{}/__bench/jwt?op=verify&n=1", gw.base)).await?;
    assert_eq!(r.status().as_u16(), 404);
    let (status, _, _) = raw(&gw, Some(&sign(&claims("team-r", "u1"))), list_call()).await?;
    assert_eq!(status, 401, "no JWT configured: a JWT is refused");
    let c = gw.modern_client("static-token-for-the-alarm-test").await?;
    // A permanent computer's name is the team's across runs: one of this run's own, so a
    // run killed half-way leaves nothing a later run would attach to.
    let kept = format!("kept-{}", t.rsplit('-').next().unwrap_or("x"));
    exec(&c, json!({"command": "true", "computer_id": "idle-one"})).await?;
    exec(
        &c,
        json!({"command": "true", "computer_id": kept, "temporary": false}),
    )
    .await?;
    assert_eq!(containers(&t).await?.len(), 2);
    // The executor's own idle reaper is an hour away: what goes now is the alarm's work.
    wait_for_count(&t, 1, Duration::from_secs(20)).await?;
    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert_eq!(ids(&list), vec![kept.clone()]);
    call(&c, "computer_delete", json!({"computer_id": kept})).await?;
    gw.stop().await?;
    x.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

/// Issue 14: jobs at the edge. The DO records where each job runs (so `terminal_job` needs
/// no `computer_id`) and who may reach it, and its alarm does not reap a temporary under a
/// job that may still run, nor under the command in flight before it becomes a job (the
/// yield outlasts the 2 s idle window: the alarm once removed the computer mid-call).
#[tokio::test]
async fn issue_14_gateway_jobs() -> anyhow::Result<()> {
    let t = tag("gwjobs");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), EXECUTOR_SECRET)
        .await?;
    let mut v = vars(&x.base, 2);
    v.push(("TOOLS", "all".into()));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &v).await?;
    let a1 = gw.modern_client(&sign(&claims("team-a", "u1"))).await?;
    let names = tool_names(&a1).await?;
    assert_eq!(names.len(), 11);
    assert!(names.contains(&"terminal_job".to_owned()));
    let r = exec(
        &a1,
        json!({"command": "echo a; sleep 6; echo b", "computer_id": "jbox", "yield_ms": 2500}),
    )
    .await?;
    assert_eq!(
        (r["running"].as_bool(), r["stdout"].as_str()),
        (Some(true), Some("a\n")),
        "{r}"
    );
    let job = r["job_id"].as_str().unwrap().to_owned();
    // Another user's temporary, and another team: no such job, however it is asked.
    let a2 = gw.modern_client(&sign(&claims("team-a", "u2"))).await?;
    let b1 = gw.modern_client(&sign(&claims("team-b", "u1"))).await?;
    for c in [&a2, &b1] {
        for args in [
            json!({"job_id": job}),
            json!({"job_id": job, "computer_id": "jbox"}),
            json!({"job_id": job, "computer_id": "jbox", "peek": true}),
        ] {
            let r = call(c, "terminal_job", args.clone()).await?;
            assert_eq!(r.is_error, Some(true), "{args}");
            assert!(text(&r).contains("no job"), "{args}: {}", text(&r));
        }
    }
    let l = call(
        &a1,
        "terminal_job",
        json!({"list": true, "computer_id": "jbox"}),
    )
    .await?
    .structured_content
    .unwrap();
    assert_eq!(l["count"], 1, "{l}");
    // A peek shows the newest output (read already or not) and takes nothing; one of the
    // ended job leaves it, with the team's record of where it runs, for the owner's read.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = call(&a1, "terminal_job", json!({"job_id": job, "peek": true})).await?;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        let r = r.structured_content.unwrap();
        assert_eq!(r["peek"], true, "{r}");
        if r["running"] == false {
            assert_eq!(
                (r["stdout"].as_str(), r["exit_code"].as_i64()),
                (Some("a\nb\n"), Some(0)),
                "{r}"
            );
            break;
        }
        assert!(r["stdout"].as_str().unwrap().starts_with("a\n"), "{r}");
        assert!(Instant::now() < deadline, "the job never ended: {r}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The owner follows it without naming the computer; the idle alarm (2 s) waits for it.
    let mut out = String::new();
    loop {
        let r = call(
            &a1,
            "terminal_job",
            json!({"job_id": job, "wait_ms": 10000}),
        )
        .await?;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        let r = r.structured_content.unwrap();
        out.push_str(r["stdout"].as_str().unwrap());
        if r["running"] == false {
            assert_eq!(r["exit_code"], 0);
            break;
        }
    }
    assert_eq!(out, "b\n");
    gw.stop().await?;
    x.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

/// Issue 15: the file tools through the gateway to an executor (WASM here, so the bytes
/// path is the executor API's): exact bytes, the counted edit, a permanent computer shared
/// in the team, and another user's temporary or another team refused.
#[tokio::test]
async fn issue_15_gateway_files() -> anyhow::Result<()> {
    let t = tag("gwfiles");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &wasm_opts(), EXECUTOR_SECRET).await?;
    let mut v = vars(&x.base, 60);
    v.push(("TOOLS", "exec,files".into()));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &v).await?;
    let a1 = gw.modern_client(&sign(&claims("team-a", "u1"))).await?;
    let a2 = gw.legacy_client(&sign(&claims("team-a", "u2"))).await?;
    let b1 = gw.modern_client(&sign(&claims("team-b", "u1"))).await?;
    let names = tool_names(&a1).await?;
    assert_eq!(
        names,
        [
            "terminal_execute",
            "computer_file_read",
            "computer_file_write",
            "computer_file_edit"
        ]
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 0xff]).collect();
    let w = call(
        &a1,
        "computer_file_write",
        json!({"computer_id": "fbox", "path": "/d/bin", "content_base64": b64.encode(&bytes), "make_dirs": true}),
    )
    .await?;
    assert_eq!(w.is_error, Some(false), "{}", text(&w));
    let w = w.structured_content.unwrap();
    assert_eq!(w["sha256"], shared::files::sha256_hex(&bytes));
    let r = call(
        &a1,
        "computer_file_read",
        json!({"computer_id": "fbox", "path": "/d/bin"}),
    )
    .await?
    .structured_content
    .unwrap();
    assert_eq!(b64.decode(r["content_base64"].as_str().unwrap())?, bytes);
    // The exec tool sees the same computer.
    let r = exec(
        &a1,
        json!({"command": "wc -c < /d/bin", "computer_id": "fbox"}),
    )
    .await?;
    assert_eq!(r["stdout"].as_str().map(str::trim), Some("259"), "{r}");
    // Another user's temporary and another team's computer: refused, nothing leaks.
    for c in [&a2, &b1] {
        let r = call(
            c,
            "computer_file_read",
            json!({"computer_id": "fbox", "path": "/d/bin"}),
        )
        .await?;
        assert_eq!(r.is_error, Some(true), "{}", text(&r));
        assert!(r.structured_content.unwrap()["content_base64"].is_null());
    }
    // A permanent computer is shared in the team, not across teams.
    let w = call(
        &a1,
        "computer_file_write",
        json!({"computer_id": "team-share", "temporary": false, "path": "/notes.txt", "content": "v=1\n"}),
    )
    .await?;
    assert_eq!(w.is_error, Some(false), "{}", text(&w));
    let e = call(
        &a2,
        "computer_file_edit",
        json!({"computer_id": "team-share", "path": "/notes.txt", "old_text": "v=1", "new_text": "v=2"}),
    )
    .await?;
    assert_eq!(e.is_error, Some(false), "{}", text(&e));
    assert_eq!(e.structured_content.unwrap()["replacements"], 1);
    let r = call(
        &b1,
        "computer_file_read",
        json!({"computer_id": "team-share", "path": "/notes.txt"}),
    )
    .await?;
    // team-b has no such computer: its call makes its own (empty) one, never team-a's.
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).contains("does not exist"), "{}", text(&r));
    let r = call(
        &a1,
        "computer_file_read",
        json!({"computer_id": "team-share", "path": "/notes.txt"}),
    )
    .await?
    .structured_content
    .unwrap();
    assert_eq!(r["content"], "v=2\n");
    // GET/PUT /v1/files through the Worker: 256 MiB each way, the Worker's memory flat.
    let http = reqwest::Client::new();
    let bearer = format!("Bearer {}", sign(&claims("team-a", "u1")));
    let file_url = |path: &str| format!("{}/v1/files/{path}", gw.base);
    let (_, peak_before) = gw.workerd_memory_mib();
    let n: u64 = 256 << 20;
    let r = http
        .put(file_url("stream-box/data/big.bin?make_dirs=true"))
        .header("authorization", &bearer)
        .body(reqwest::Body::wrap_stream(pattern_stream(n)))
        .send()
        .await?;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let v: Value = r.json().await?;
    let want = pattern_digest(n).await;
    assert_eq!(v["sha256"].as_str(), Some(want.0.as_str()), "{v}");
    let r = http
        .get(file_url("stream-box/data/big.bin"))
        .header("authorization", &bearer)
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    assert_eq!(hash_body(r).await?, want);
    let (_, peak_after) = gw.workerd_memory_mib();
    eprintln!("workerd peak RSS: {peak_before} MiB before, {peak_after} MiB after 2 x 256 MiB");
    assert!(
        peak_after < peak_before + 96,
        "the Worker buffered the stream: peak {peak_before} -> {peak_after} MiB"
    );
    // The same rules as the tools: another user's temporary, another team, no token.
    let other = format!("Bearer {}", sign(&claims("team-b", "u1")));
    for auth in [Some(&other), None] {
        let mut req = http.get(file_url("stream-box/data/big.bin"));
        if let Some(a) = auth {
            req = req.header("authorization", a.as_str());
        }
        let r = req.send().await?;
        assert!(matches!(r.status().as_u16(), 401 | 404), "{}", r.status());
    }
    let r = http
        .get(file_url("stream-box/data/big.bin"))
        .header(
            "authorization",
            format!("Bearer {}", sign(&claims("team-a", "u2"))),
        )
        .send()
        .await?;
    assert!(matches!(r.status().as_u16(), 404 | 409), "{}", r.status());
    let r = http
        .get(file_url("team-share/notes.txt"))
        .header(
            "authorization",
            format!("Bearer {}", sign(&claims("team-a", "u2"))),
        )
        .header("range", "bytes=0-2")
        .send()
        .await?;
    assert_eq!(r.status(), 206);
    assert_eq!(r.bytes().await?.as_ref(), b"v=2");
    for c in [a1, a2, b1] {
        c.cancel().await?;
    }
    gw.stop().await?;
    x.terminate().await?;
    Ok(())
}

/// Issue 46, item 8: at the gateway, a token with `exec` alone makes temporaries but no
/// permanent computer, whatever the path (exec, a file tool, `PUT /v1/files`): the team's
/// object refuses it before recording anything (403, the scope refusal's words), and the
/// executor never sees it. It uses a permanent computer a token with `manage` made, and
/// such a token's upload to a new permanent computer still works (the executor gets the
/// caller's scopes).
#[tokio::test]
async fn issue_46_gateway_exec_alone_makes_no_permanent_computer() -> anyhow::Result<()> {
    let t = tag("gwperm");
    let x = HttpServer::start_executor(&t, &state_dir(&t), &wasm_opts(), EXECUTOR_SECRET).await?;
    let mut v = vars(&x.base, 300);
    v.push(("TOOLS", "exec,files,lifecycle".into()));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &v).await?;
    let mut c = claims("team-p", "u1");
    c["scope"] = json!("exec");
    let exec_only = sign(&c);
    let limited = gw.modern_client(&exec_only).await?;
    let full = gw.modern_client(&sign(&claims("team-p", "u2"))).await?;
    let refused = |what: &str, r: &rmcp::model::CallToolResult| {
        assert_eq!(r.is_error, Some(true), "{what}: {}", text(r));
        let words = r
            .structured_content
            .as_ref()
            .map_or(json!(null), |v| v["error"].clone());
        let words = words.as_str().unwrap_or_default();
        assert!(
            words.contains(
                "creating a permanent computer needs the `manage` scope (this token has \"exec\")"
            ) && words.contains("omit temporary:false"),
            "{what}: {words}"
        );
    };
    for (what, tool, args) in [
        (
            "exec",
            "terminal_execute",
            json!({"command": "true", "computer_id": "perm", "temporary": false}),
        ),
        (
            "exec without an id",
            "terminal_execute",
            json!({"command": "true", "temporary": false}),
        ),
        // Named again below without `temporary`: a temporary then, had nothing been
        // recorded (a recorded permanent id would be refused by the executor instead).
        (
            "exec on scratch",
            "terminal_execute",
            json!({"command": "true", "computer_id": "scratch", "temporary": false}),
        ),
        (
            "file write",
            "computer_file_write",
            json!({"computer_id": "perm", "temporary": false, "path": "/f", "content": "x"}),
        ),
    ] {
        refused(what, &call(&limited, tool, args).await?);
    }
    let http = reqwest::Client::new();
    let put = |id: &str, token: &str| {
        http.put(format!("{}/v1/files/{id}/f?temporary=false", gw.base))
            .bearer_auth(token)
            .body("x")
            .send()
    };
    let r = put("perm", &exec_only).await?;
    assert_eq!(r.status().as_u16(), 403);
    let body = r.text().await?;
    assert!(body.contains("needs the `manage` scope"), "{body}");
    // Nothing recorded at the gateway, nothing made at the executor.
    let list = call(&full, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert!(ids(&list).is_empty(), "{list}");
    let at_executor: Value = reqwest::Client::new()
        .get(format!("{}/v1/computers", x.base))
        .bearer_auth(executor_token(EXECUTOR_SECRET, "team-p")?)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(at_executor["count"], 0, "{at_executor}");
    // A temporary is `exec`'s to make (`scratch` was recorded as nothing above).
    let r = exec(
        &limited,
        json!({"command": "true", "computer_id": "scratch"}),
    )
    .await?;
    assert_eq!(r["temporary"], true, "{r}");
    // `manage` makes the permanent one; `exec` then uses it, by any path.
    let r = exec(
        &full,
        json!({"command": "true", "computer_id": "perm", "temporary": false}),
    )
    .await?;
    assert_eq!(r["temporary"], false, "{r}");
    let r = exec(
        &limited,
        json!({"command": "echo used", "computer_id": "perm", "temporary": false}),
    )
    .await?;
    assert_eq!(r["stdout"], "used\n", "{r}");
    let r = put("perm", &exec_only).await?;
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    let r = put("perm-2", &sign(&claims("team-p", "u2"))).await?;
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    let list = call(&full, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert_eq!(ids(&list), vec!["perm".to_owned(), "perm-2".to_owned()]);
    for id in ["perm", "perm-2"] {
        let r = call(&full, "computer_delete", json!({"computer_id": id})).await?;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
    }
    for c in [limited, full] {
        c.cancel().await?;
    }
    gw.stop().await?;
    x.terminate().await?;
    Ok(())
}

/// Issue 19 at the edge: a `/mcp` body over 16 MiB gets 413 (declared or streamed, never
/// held whole in the isolate), legacy sessions are capped per user and per team (503 with
/// `Retry-After`; a DELETE frees a place), and JSON-RPC ids are echoed exactly.
#[tokio::test]
async fn issue_19_gateway_http_limits() -> anyhow::Result<()> {
    let t = tag("gwlimits");
    // No call reaches an executor here.
    let mut v = vars("http://127.0.0.1:9", 300);
    v.push(("MAX_SESSIONS", "3".into()));
    v.push(("MAX_SESSIONS_PER_USER", "2".into()));
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &v).await?;
    let (u1, u2) = (sign(&claims("team-l", "u1")), sign(&claims("team-l", "u2")));
    let http = reqwest::Client::new();
    let initialize = |token: &str, id: &str| {
        http.post(&gw.url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
            ))
            .send()
    };
    let big = "18446744073709551617";
    let r = initialize(&u1, big).await?;
    assert_eq!(r.status().as_u16(), 200);
    let first = r.headers()["mcp-session-id"].to_str()?.to_owned();
    let text = r.text().await?;
    assert!(text.contains(&format!("\"id\":{big},")), "{text}");
    assert_eq!(initialize(&u1, "2").await?.status().as_u16(), 200);
    // The user's cap.
    let r = initialize(&u1, "3").await?;
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.headers().get("retry-after").is_some());
    let text = r.text().await?;
    assert!(text.contains("MAX_SESSIONS_PER_USER"), "{text}");
    // The team's cap.
    assert_eq!(initialize(&u2, "4").await?.status().as_u16(), 200);
    let r = initialize(&u2, "5").await?;
    assert_eq!(r.status().as_u16(), 503);
    let text = r.text().await?;
    assert!(text.contains("this team has 3"), "{text}");
    // Ending a session frees a place.
    let r = http
        .delete(&gw.url)
        .bearer_auth(&u1)
        .header("mcp-session-id", &first)
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(initialize(&u2, "6").await?.status().as_u16(), 200);

    // 413, with a declared length and streamed without one.
    let body = vec![b' '; 20 << 20];
    let r = http
        .post(&gw.url)
        .bearer_auth(&u1)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 413);
    assert!(r.text().await?.contains("16 MiB"));
    // The refusal comes while the body is still being sent, and the proxy in front of the
    // Worker (wrangler dev) may hang up before the client has read it: then the client
    // sees "connection closed before message completed" instead of the 413. So a closed
    // connection is tried again (a few times); what must come is a 413, never a 2xx.
    let mut refused = None;
    for _ in 0..5 {
        let chunks = futures_util::stream::iter(
            body.chunks(1 << 20)
                .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
                .collect::<Vec<_>>(),
        );
        match http
            .post(&gw.url)
            .bearer_auth(&u1)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(chunks))
            .send()
            .await
        {
            Ok(r) => {
                refused = Some(r.status().as_u16());
                break;
            }
            Err(e) if e.is_request() => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    assert_eq!(refused, Some(413), "a streamed 20 MiB body was not refused");
    // A normal call still works.
    let (status, _, _) = raw(
        &gw,
        Some(&u1),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}}),
    )
    .await?;
    assert_eq!(status, 200);
    gw.stop().await
}

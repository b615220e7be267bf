//! The executor API through its router (`app(state).oneshot(request)`), over the
//! in-memory backend: tokens, scopes, routes, codes and the answers' shapes, no daemon.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Value, json};
use shared::capabilities::{Capabilities, Capability};
use shared::executor_api::{Claims, GATEWAY_ISSUER};
use tower::ServiceExt;

use super::{ApiState, app};
use crate::computers::Computers;
use crate::fake::Fake;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test";
const AUDIENCE: &str = "exec-1";

fn state(fake: Fake) -> Arc<ApiState> {
    match ApiState::new(Computers::over_fake(fake), SECRET, AUDIENCE) {
        Ok(s) => Arc::new(s),
        Err(e) => panic!("api state: {e}"),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn token_with(team: &str, scope: &str, secret: &[u8], aud: &str) -> String {
    sign(
        &Claims {
            iss: GATEWAY_ISSUER.into(),
            aud: aud.into(),
            sub: team.into(),
            iat: now(),
            exp: now() + 60,
            scope: scope.into(),
            owner: String::new(),
        },
        secret,
    )
}

fn sign(claims: &Claims, secret: &[u8]) -> String {
    let key = EncodingKey::from_secret(secret).unwrap_or_else(|e| panic!("key: {e}"));
    jsonwebtoken::encode(&Header::default(), claims, &key).unwrap_or_else(|e| panic!("token: {e}"))
}

/// A token of team `t1` for caller `owner` (`""`: the team itself), with every scope.
fn token_of(owner: &str) -> String {
    sign(
        &Claims {
            owner: owner.into(),
            ..claims("t1", "exec manage")
        },
        SECRET,
    )
}

/// A good token's claims.
fn claims(team: &str, scope: &str) -> Claims {
    Claims {
        iss: GATEWAY_ISSUER.into(),
        aud: AUDIENCE.into(),
        sub: team.into(),
        iat: now(),
        exp: now() + 60,
        scope: scope.into(),
        owner: String::new(),
    }
}

fn token(team: &str, scope: &str) -> String {
    token_with(team, scope, SECRET, AUDIENCE)
}

/// One request: its status, its JSON body, and whether it asked for a bearer token.
async fn send(
    s: &Arc<ApiState>,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, Value, bool) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap_or_else(|e| panic!("request: {e}"));
    let resp = app(s.clone())
        .oneshot(req)
        .await
        .unwrap_or_else(|e| panic!("router: {e}"));
    let status = resp.status();
    let challenge = resp.headers().contains_key(header::WWW_AUTHENTICATE);
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap_or_else(|e| panic!("body: {e}"));
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, v, challenge)
}

#[tokio::test]
async fn health_says_the_backend_and_what_it_can_do_without_a_token() {
    let s = state(Fake::default());
    let (status, v, _) = send(&s, "GET", "/v1/health", None, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["backends"], json!(["go_busybox", "wasm"]));
    assert_eq!(
        v["capabilities"],
        json!(["jobs", "files", "snapshots", "fork"])
    );
    assert_eq!(v["load"], json!({"computers": 0, "execs": 0}));
}

#[tokio::test]
async fn tokens_are_checked_and_their_reasons_stay_in_the_log() {
    let s = state(Fake::default());
    let (status, v, challenge) = send(&s, "GET", "/v1/computers", None, "").await;
    assert_eq!((status, challenge), (StatusCode::UNAUTHORIZED, true));
    assert_eq!(v["error"]["code"], "unauthorized");
    for bad in [
        token_with(
            "t1",
            "exec",
            b"another-secret-of-enough-length-000",
            AUDIENCE,
        ),
        token_with("t1", "exec", SECRET, "another-executor"),
        token_with("", "exec", SECRET, AUDIENCE),
        "not.a.jwt".to_owned(),
    ] {
        let (status, v, _) = send(&s, "GET", "/v1/computers", Some(&bad), "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}");
        assert_eq!(v["error"]["message"], "invalid token");
    }
}

#[tokio::test]
async fn scopes_hold_on_every_route() {
    let s = state(Fake::default());
    let exec = token("t1", "exec");
    let manage = token("t1", "manage");
    let create = r#"{"computer_id": "box", "temporary": false}"#;
    let (status, v, _) = send(&s, "POST", "/v1/computers", Some(&exec), create).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(v["error"]["code"], "forbidden");
    let (status, _, _) = send(&s, "POST", "/v1/computers", Some(&manage), create).await;
    assert_eq!(status, StatusCode::OK);
    for path in [
        "/v1/computers/box/restart",
        "/v1/computers/box/factory-reset",
    ] {
        let (status, _, _) = send(&s, "POST", path, Some(&exec), "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    let (status, _, _) = send(&s, "DELETE", "/v1/computers/box", Some(&exec), "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let exec_body = r#"{"command": "echo hi"}"#;
    let (status, _, _) = send(
        &s,
        "POST",
        "/v1/computers/box/exec",
        Some(&manage),
        exec_body,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, v, _) = send(&s, "POST", "/v1/computers/box/exec", Some(&exec), exec_body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["stdout"], "hi\n");
}

#[tokio::test]
async fn answers_have_the_tools_shapes_and_failures_their_codes() {
    let s = state(Fake::default());
    let all = token("t1", "exec manage");
    let t = Some(all.as_str());
    let (status, v, _) = send(&s, "POST", "/v1/computers", t, r#"{"computer_id": "box"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec![
            "ok".into(),
            "computer_id".into(),
            "sandbox_id".into(),
            "temporary".into()
        ])
    );
    assert_eq!(
        (v["computer_id"].clone(), v["temporary"].clone()),
        (json!("box"), json!(true))
    );
    let (status, v, _) = send(&s, "GET", "/v1/computers", t, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["count"], 1);
    assert_eq!(v["computers"][0]["computer_id"], "box");
    assert_eq!(v["computers"][0]["state"], "running");
    let (status, v, _) = send(
        &s,
        "POST",
        "/v1/computers/box/exec",
        t,
        r#"{"command": "exit 7"}"#,
    )
    .await;
    assert_eq!((status, v["exit_code"].clone()), (StatusCode::OK, json!(7)));
    let (status, v, _) = send(&s, "DELETE", "/v1/computers/box", t, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"ok": true, "computer_id": "box", "deleted": true})
    );
    for (method, path, body, want, code) in [
        (
            "DELETE",
            "/v1/computers/box",
            "",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "POST",
            "/v1/computers/box/restart",
            "",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "POST",
            "/v1/computers/box/exec",
            r#"{"command": "ls", "bogus": 1}"#,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "POST",
            "/v1/computers/Bad_Id/exec",
            r#"{"command": "ls"}"#,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "POST",
            "/v1/computers/box/exec",
            "not json",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "POST",
            "/v1/computers/box/reboot",
            "",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "GET",
            "/v2/computers",
            "",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "POST",
            "/v1/computers/box/exec",
            r#"{"command": "fail"}"#,
            StatusCode::BAD_GATEWAY,
            "engine",
        ),
    ] {
        let (status, v, _) = send(&s, method, path, t, body).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (want, Some(code)),
            "{method} {path} {body}: {v}"
        );
    }
}

#[tokio::test]
async fn a_team_reaches_only_its_own_computers() {
    let s = state(Fake::default());
    let t1 = token("t1", "exec manage");
    let t2 = token("t2", "exec manage");
    let create = r#"{"computer_id": "box", "temporary": false}"#;
    let (status, _, _) = send(&s, "POST", "/v1/computers", Some(&t1), create).await;
    assert_eq!(status, StatusCode::OK);
    let (_, v, _) = send(&s, "GET", "/v1/computers", Some(&t2), "").await;
    assert_eq!(v["count"], 0);
    for (method, path) in [
        ("POST", "/v1/computers/box/restart"),
        ("DELETE", "/v1/computers/box"),
        ("GET", "/v1/computers/box/jobs"),
    ] {
        let (status, _, _) = send(&s, method, path, Some(&t2), "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    // Team 2's own `box` is another computer; team 1's is still there.
    let (status, _, _) = send(&s, "POST", "/v1/computers", Some(&t2), create).await;
    assert_eq!(status, StatusCode::OK);
    let (_, v, _) = send(&s, "GET", "/v1/computers", Some(&t1), "").await;
    assert_eq!(v["count"], 1);
}

#[tokio::test]
async fn what_the_backend_cannot_do_is_501_and_changes_nothing() {
    let s = state(Fake::new(Capabilities::NONE.with(Capability::Files)));
    let all = token("t1", "exec manage");
    let body = r#"{"command": "echo", "yield_ms": 0}"#;
    let (status, v, _) = send(&s, "POST", "/v1/computers/box/exec", Some(&all), body).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{v}");
    assert_eq!(v["error"]["code"], "unsupported");
    let (_, v, _) = send(&s, "GET", "/v1/computers", Some(&all), "").await;
    assert_eq!(v["count"], 0);
}

/// Issue 46, item 11: a token minted for one executor, an expired one, and one minted to
/// live as long as the gateway's used to (five minutes) are all refused.
#[tokio::test]
async fn issue_46_tokens_for_another_executor_expired_or_long_lived_are_refused() {
    let s = state(Fake::default());
    let good = sign(&claims("t1", "exec"), SECRET);
    let (status, _, _) = send(&s, "GET", "/v1/computers", Some(&good), "").await;
    assert_eq!(status, StatusCode::OK);
    let for_a = Claims {
        aud: "exec-a".into(),
        ..claims("t1", "exec")
    };
    let expired = Claims {
        iat: now() - 90,
        exp: now() - 30,
        ..claims("t1", "exec")
    };
    let five_minutes = Claims {
        exp: now() + 300,
        ..claims("t1", "exec")
    };
    for (what, c) in [
        ("another executor's", for_a),
        ("expired", expired),
        ("five minutes long", five_minutes),
    ] {
        let (status, v, _) = send(&s, "GET", "/v1/computers", Some(&sign(&c, SECRET)), "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
        assert_eq!(v["error"]["message"], "invalid token", "{what}");
    }
}

/// Issue 46, item 7 (defence in depth): a temporary made for one caller of a team answers
/// no other caller of that team, nor the team's owner-less token, whatever route names it;
/// the team's permanent computers stay shared.
#[tokio::test]
async fn issue_46_a_temporary_answers_only_the_caller_it_was_made_for() {
    let s = state(Fake::default());
    let (alice, bob, team) = (token_of("user:alice"), token_of("session:s2"), token_of(""));
    let exec = r#"{"command": "echo mine"}"#;
    let (status, v, _) = send(&s, "POST", "/v1/computers/box/exec", Some(&alice), exec).await;
    assert_eq!(
        (status, v["temporary"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    let shared = r#"{"computer_id": "shared", "temporary": false}"#;
    let (status, _, _) = send(&s, "POST", "/v1/computers", Some(&alice), shared).await;
    assert_eq!(status, StatusCode::OK);
    for other in [&bob, &team] {
        for (method, path, body) in [
            ("POST", "/v1/computers/box/exec", exec),
            ("POST", "/v1/computers", r#"{"computer_id": "box"}"#),
            ("POST", "/v1/computers/box/restart", ""),
            ("POST", "/v1/computers/box/factory-reset", ""),
            ("GET", "/v1/computers/box/jobs", ""),
            (
                "POST",
                "/v1/computers/box/files/write",
                r#"{"path": "/tmp/x", "content": "x"}"#,
            ),
            ("DELETE", "/v1/computers/box", ""),
        ] {
            let (status, v, _) = send(&s, method, path, Some(other), body).await;
            assert!(
                status == StatusCode::NOT_FOUND || status == StatusCode::CONFLICT,
                "{method} {path}: {status} {v}"
            );
        }
        let (_, v, _) = send(&s, "GET", "/v1/computers", Some(other), "").await;
        assert_eq!(v["count"], 1, "{v}");
        assert_eq!(v["computers"][0]["computer_id"], "shared");
        let (status, _, _) = send(&s, "POST", "/v1/computers/shared/exec", Some(other), exec).await;
        assert_eq!(status, StatusCode::OK);
    }
    // Alice's temporary is untouched, and hers to delete.
    let (_, v, _) = send(&s, "GET", "/v1/computers", Some(&alice), "").await;
    assert_eq!(v["count"], 2, "{v}");
    let (status, _, _) = send(&s, "DELETE", "/v1/computers/box", Some(&alice), "").await;
    assert_eq!(status, StatusCode::OK);
}

/// Issue 46, item 8: a token with `exec` alone makes temporaries, but no permanent
/// computer on any route (exec, a job, a file call, the file stream, create): 403 with
/// what to do, nothing made. It uses the permanent computer a token with `manage` made.
#[tokio::test]
async fn issue_46_exec_alone_makes_no_permanent_computer_on_any_route() {
    let fake = Fake::default();
    let s = state(fake.clone());
    let (exec, all) = (token("t1", "exec"), token("t1", "exec manage"));
    let forbidden = |what: &str, status: StatusCode, v: &Value| {
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("forbidden")),
            "{what}: {v}"
        );
        let m = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            m.starts_with(
                "creating a permanent computer needs the `manage` scope (this token has \"exec\")"
            ) || what == "create",
            "{what}: {m}"
        );
    };
    for (what, path, body) in [
        (
            "exec",
            "/v1/computers/web/exec",
            r#"{"command": "echo", "temporary": false}"#,
        ),
        (
            "job",
            "/v1/computers/web/exec",
            r#"{"command": "echo", "temporary": false, "yield_ms": 0}"#,
        ),
        (
            "file write",
            "/v1/computers/web/files/write",
            r#"{"path": "/f", "content": "x", "temporary": false}"#,
        ),
        (
            "create",
            "/v1/computers",
            r#"{"computer_id": "web", "temporary": false}"#,
        ),
    ] {
        let (status, v, _) = send(&s, "POST", path, Some(&exec), body).await;
        forbidden(what, status, &v);
    }
    let put = |token: &str, id: &str| {
        Request::builder()
            .method("PUT")
            .uri(format!("/v1/files/{id}/f?temporary=false"))
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::from("x"))
            .unwrap_or_else(|e| panic!("request: {e}"))
    };
    let upload = |req: Request<Body>| {
        let s = s.clone();
        async move {
            let resp = app(s)
                .oneshot(req)
                .await
                .unwrap_or_else(|e| panic!("router: {e}"));
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap_or_else(|e| panic!("body: {e}"));
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            (status, v)
        }
    };
    let (status, v) = upload(put(&exec, "web")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "file stream: {v}");
    assert!(
        v.to_string().contains("needs the `manage` scope"),
        "file stream: {v}"
    );
    assert!(fake.keys().is_empty(), "{:?}", fake.keys());
    let (_, v, _) = send(&s, "GET", "/v1/computers", Some(&all), "").await;
    assert_eq!(v["count"], 0, "{v}");
    // A temporary is `exec`'s to make; a permanent one made with `manage` is `exec`'s to use.
    let (status, v, _) = send(
        &s,
        "POST",
        "/v1/computers/scratch/exec",
        Some(&exec),
        r#"{"command": "echo"}"#,
    )
    .await;
    assert_eq!(
        (status, v["temporary"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    let (status, v) = upload(put(&all, "web")).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let (status, v) = upload(put(&exec, "web")).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let (status, v, _) = send(
        &s,
        "POST",
        "/v1/computers/web/exec",
        Some(&exec),
        r#"{"command": "echo used", "temporary": false}"#,
    )
    .await;
    assert_eq!(
        (status, v["stdout"].clone()),
        (StatusCode::OK, json!("used\n")),
        "{v}"
    );
    assert_eq!(fake.keys().len(), 2, "{:?}", fake.keys());
}

/// Issue 39: the snapshot routes, over a backend that keeps snapshots: a team's are its
/// own, listing needs `exec` and the rest `manage`, bad ids are 400.
#[tokio::test]
async fn issue_39_snapshot_routes_keep_teams_and_scopes() {
    let s = state(Fake::new(
        shared::capabilities::BackendKind::Docker.capabilities(),
    ));
    let t1 = token("t1", "exec manage");
    let t2 = token("t2", "exec manage");
    let exec_only = token("t1", "exec");
    let create = r#"{"computer_id": "box", "temporary": false}"#;
    let (status, _, _) = send(&s, "POST", "/v1/computers", Some(&t1), create).await;
    assert_eq!(status, StatusCode::OK);
    let label = r#"{"label": "v1"}"#;
    let (status, _, _) = send(
        &s,
        "POST",
        "/v1/computers/box/snapshots",
        Some(&exec_only),
        label,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, v, _) = send(&s, "POST", "/v1/computers/box/snapshots", Some(&t1), label).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        (v["computer_id"].as_str(), v["label"].as_str()),
        (Some("box"), Some("v1"))
    );
    let sid = v["snapshot_id"].as_str().unwrap_or_default().to_owned();
    let (status, v, _) = send(
        &s,
        "GET",
        "/v1/computers/box/snapshots",
        Some(&exec_only),
        "",
    )
    .await;
    assert_eq!(
        (status, v["count"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    // Another team reaches none of it.
    let (status, _, _) = send(&s, "GET", "/v1/computers/box/snapshots", Some(&t2), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let fork = format!(r#"{{"from": "{sid}", "temporary": false}}"#);
    let (status, _, _) = send(&s, "POST", "/v1/computers/copy/fork", Some(&t2), &fork).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let delete = format!("/v1/snapshots/{sid}");
    let (status, _, _) = send(&s, "DELETE", &delete, Some(&t2), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The team forks, restores, deletes.
    let (status, v, _) = send(&s, "POST", "/v1/computers/copy/fork", Some(&t1), &fork).await;
    assert_eq!(
        (status, v["computer_id"].as_str()),
        (StatusCode::OK, Some("copy")),
        "{v}"
    );
    let (status, _, _) = send(&s, "POST", "/v1/computers/copy/fork", Some(&t1), &fork).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let restore = format!(r#"{{"snapshot_id": "{sid}"}}"#);
    let (status, _, _) = send(&s, "POST", "/v1/computers/box/restore", Some(&t1), &restore).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(
        &s,
        "POST",
        "/v1/computers/copy/restore",
        Some(&t1),
        &restore,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, v, _) = send(&s, "DELETE", &delete, Some(&t1), "").await;
    assert_eq!(
        (status, v["deleted"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{v}"
    );
    let (status, _, _) = send(&s, "DELETE", "/v1/snapshots/box", Some(&t1), "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

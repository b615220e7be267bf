//! Unit tests of the Fly client over the scripted transport: request shapes (checked
//! against hand-transcribed schemas and against `specs/fly-machines-openapi.json`), retries,
//! error mapping and decoding.

use serde_json::{Value, json};

use super::*;
use crate::providers::testing::{Reply, ScriptedTransport, json, raw};

const BASE: &str = "https://fly.test";
const TOKEN: &str = "plain-secret-token-123";

fn client(script: impl IntoIterator<Item = Reply>) -> FlyClient<ScriptedTransport> {
    FlyClient::new(BASE, TOKEN, ScriptedTransport::new(script))
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    futures_executor::block_on(f)
}

fn body_json(req: &HttpRequest) -> Value {
    serde_json::from_slice(req.body.as_deref().expect("a body")).expect("JSON body")
}

fn spec_machine() -> MachineSpec {
    MachineSpec {
        name: "computer-alpha".into(),
        region: Some("iad".into()),
        image: "docker.io/library/debian:bookworm-slim".into(),
        cpu_kind: "shared".into(),
        cpus: 1,
        memory_mb: 512,
        rootfs_persist: Some("always".into()),
        rootfs_size_gb: Some(4),
        metadata: vec![
            ("mcp_computer".into(), "alpha".into()),
            ("mcp_owner".into(), "user-123".into()),
        ],
        init_exec: Some(vec!["/bin/sleep".into(), "inf".into()]),
    }
}

/// A realistic `Machine` with fields we ignore (and some we do not know).
fn machine_json(id: &str, state: &str) -> Value {
    json!({
        "id": id,
        "name": format!("name-{id}"),
        "state": state,
        "region": "iad",
        "instance_id": "01HZZZ",
        "version": "01HZZZ",
        "private_ip": "fdaa:0:1::3",
        "created_at": "2026-11-30T10:00:00Z",
        "updated_at": "2026-11-30T10:00:05Z",
        "config": {
            "image": "docker.io/library/debian:bookworm-slim",
            "init": {"exec": ["/bin/sleep", "inf"]},
            "guest": {"cpu_kind": "shared", "cpus": 1, "memory_mb": 512},
            "rootfs": {"persist": "always"},
            "metadata": {"mcp_computer": "alpha", "mcp_owner": "user-123"},
            "restart": {"policy": "on-failure"}
        },
        "image_ref": {"registry": "docker.io", "repository": "library/debian", "tag": "bookworm-slim", "digest": "sha256:abc", "labels": {}},
        "events": [{"id": "01HE", "type": "launch", "status": "created", "source": "user", "timestamp": 1764496800000_u64}],
        "checks": [],
        "host_status": "ok",
        "some_future_field": {"nested": [1, 2, 3]}
    })
}

// -------------------------------------------------------------------------------------
// Hand-transcribed request schemas (from specs/fly-machines-openapi.json)
// -------------------------------------------------------------------------------------

/// A JSON schema, as far as these tests need one.
enum Ty {
    Str,
    Int,
    Bool,
    StrEnum(&'static [&'static str]),
    ArrOf(&'static Ty),
    MapOf(&'static Ty),
    Obj(&'static [(&'static str, Ty)]),
    /// Declared by the spec but never sent by us (its shape is not transcribed).
    NotSent,
}

const PERSIST: &[&str] = &["never", "always", "restart"];

/// `fly.MachineGuest`.
const GUEST: &[(&str, Ty)] = &[
    ("cpu_kind", Ty::Str),
    ("cpus", Ty::Int),
    ("gpu_kind", Ty::Str),
    ("gpus", Ty::Int),
    ("host_dedication_id", Ty::Str),
    ("kernel_args", Ty::ArrOf(&Ty::Str)),
    ("max_memory_mb", Ty::Int),
    ("memory_mb", Ty::Int),
    // Deprecated ("use MachineConfig.Rootfs instead"): must not be sent.
    ("persist_rootfs", Ty::NotSent),
    ("required_host_features", Ty::ArrOf(&Ty::Str)),
];

/// `fly.MachineRootfs`.
const ROOTFS: &[(&str, Ty)] = &[("persist", Ty::StrEnum(PERSIST)), ("size_gb", Ty::Int)];

/// `fly.MachineInit`.
const INIT: &[(&str, Ty)] = &[
    ("cmd", Ty::ArrOf(&Ty::Str)),
    ("entrypoint", Ty::ArrOf(&Ty::Str)),
    ("exec", Ty::ArrOf(&Ty::Str)),
    ("kernel_args", Ty::ArrOf(&Ty::Str)),
    ("swap_size_mb", Ty::Int),
    ("tty", Ty::Bool),
];

/// `fly.MachineConfig`.
const MACHINE_CONFIG: &[(&str, Ty)] = &[
    ("auto_destroy", Ty::Bool),
    ("cache_drive", Ty::NotSent),
    ("checks", Ty::NotSent),
    ("containers", Ty::NotSent),
    ("disable_machine_autostart", Ty::NotSent),
    ("dns", Ty::NotSent),
    ("env", Ty::MapOf(&Ty::Str)),
    ("files", Ty::NotSent),
    ("guest", Ty::Obj(GUEST)),
    ("image", Ty::Str),
    ("init", Ty::Obj(INIT)),
    ("metadata", Ty::MapOf(&Ty::Str)),
    ("metrics", Ty::NotSent),
    ("mounts", Ty::NotSent),
    ("processes", Ty::NotSent),
    ("restart", Ty::NotSent),
    ("rootfs", Ty::Obj(ROOTFS)),
    ("schedule", Ty::Str),
    ("services", Ty::NotSent),
    ("size", Ty::NotSent),
    ("spot", Ty::NotSent),
    ("standbys", Ty::ArrOf(&Ty::Str)),
    ("statics", Ty::NotSent),
    ("stop_config", Ty::NotSent),
];

/// `CreateMachineRequest`.
const CREATE_MACHINE_REQUEST: &[(&str, Ty)] = &[
    ("config", Ty::Obj(MACHINE_CONFIG)),
    ("lease_ttl", Ty::Int),
    ("min_secrets_version", Ty::Int),
    ("name", Ty::Str),
    ("region", Ty::Str),
    ("skip_launch", Ty::Bool),
    ("skip_secrets", Ty::Bool),
    ("skip_service_registration", Ty::Bool),
];

/// `MachineExecRequest` (`cmd` is deprecated: must not be sent).
const MACHINE_EXEC_REQUEST: &[(&str, Ty)] = &[
    ("cmd", Ty::NotSent),
    ("command", Ty::ArrOf(&Ty::Str)),
    ("container", Ty::Str),
    ("machine", Ty::Bool),
    ("stdin", Ty::Str),
    ("timeout", Ty::Int),
];

/// `CreateAppRequest`.
const CREATE_APP_REQUEST: &[(&str, Ty)] = &[
    ("enable_subdomains", Ty::Bool),
    ("idempotency_key", Ty::Str),
    ("name", Ty::Str),
    ("network", Ty::Str),
    ("org_slug", Ty::Str),
];

fn check(ty: &Ty, v: &Value, at: &str, problems: &mut Vec<String>) {
    let ok = match ty {
        Ty::Str => v.is_string(),
        Ty::Int => v.is_i64() || v.is_u64(),
        Ty::Bool => v.is_boolean(),
        Ty::StrEnum(allowed) => v.as_str().is_some_and(|s| allowed.contains(&s)),
        Ty::ArrOf(item) => match v.as_array() {
            Some(items) => {
                for (i, x) in items.iter().enumerate() {
                    check(item, x, &format!("{at}[{i}]"), problems);
                }
                true
            }
            None => false,
        },
        Ty::MapOf(item) => match v.as_object() {
            Some(map) => {
                for (k, x) in map {
                    check(item, x, &format!("{at}.{k}"), problems);
                }
                true
            }
            None => false,
        },
        Ty::Obj(props) => match v.as_object() {
            Some(map) => {
                for (k, x) in map {
                    match props.iter().find(|(name, _)| name == k) {
                        Some((_, t)) => check(t, x, &format!("{at}.{k}"), problems),
                        None => problems.push(format!("{at}.{k}: not declared by the spec")),
                    }
                }
                true
            }
            None => false,
        },
        Ty::NotSent => {
            problems.push(format!("{at}: we never send this"));
            true
        }
    };
    if !ok {
        problems.push(format!("{at}: wrong type: {v}"));
    }
}

fn assert_matches(schema: &'static [(&'static str, Ty)], body: &Value) {
    let mut problems = Vec::new();
    check(&Ty::Obj(schema), body, "$", &mut problems);
    assert!(problems.is_empty(), "{problems:?} in {body}");
}

// -------------------------------------------------------------------------------------
// The same check driven by the saved spec itself (properties, types, enums, $ref, allOf)
// -------------------------------------------------------------------------------------

const SPEC: &str = include_str!("../../../../specs/fly-machines-openapi.json");

fn spec_check(doc: &Value, schema: &Value, v: &Value, at: &str, problems: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if let Some(desc) = schema.get("description").and_then(Value::as_str)
        && desc.starts_with("Deprecated")
    {
        problems.push(format!("{at}: deprecated"));
    }
    // `allOf` members carry the real shape (the outer `type` may be a generator artefact).
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for member in all {
            spec_check(doc, member, v, at, problems);
        }
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        problems.push(format!("{at}: {v} not in {allowed:?}"));
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") if !v.is_string() => problems.push(format!("{at}: not a string")),
        Some("integer") if !(v.is_i64() || v.is_u64()) => {
            problems.push(format!("{at}: not an integer"));
        }
        Some("boolean") if !v.is_boolean() => problems.push(format!("{at}: not a boolean")),
        Some("array") => match (v.as_array(), schema.get("items")) {
            (Some(items), Some(item_schema)) => {
                for (i, x) in items.iter().enumerate() {
                    spec_check(doc, item_schema, x, &format!("{at}[{i}]"), problems);
                }
            }
            _ => problems.push(format!("{at}: not an array")),
        },
        Some("object") => {
            let Some(map) = v.as_object() else {
                problems.push(format!("{at}: not an object"));
                return;
            };
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, x) in map {
                let here = format!("{at}.{k}");
                match (props.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) => spec_check(doc, s, x, &here, problems),
                    (None, Some(s)) if s.is_object() => spec_check(doc, s, x, &here, problems),
                    (None, _) => problems.push(format!("{here}: not declared")),
                }
            }
        }
        _ => {}
    }
}

fn resolve<'a>(doc: &'a Value, mut schema: &'a Value) -> &'a Value {
    while let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/components/schemas/");
        schema = &doc["components"]["schemas"][name];
    }
    schema
}

fn assert_spec_schema(name: &str, body: &Value) {
    let doc: Value = serde_json::from_str(SPEC).unwrap();
    let schema = &doc["components"]["schemas"][name];
    assert!(schema.is_object(), "no schema {name}");
    let mut problems = Vec::new();
    spec_check(&doc, schema, body, "$", &mut problems);
    assert!(problems.is_empty(), "{name}: {problems:?} in {body}");
}

// -------------------------------------------------------------------------------------
// Tokens, names, URLs
// -------------------------------------------------------------------------------------

#[test]
fn bearer_for_plain_tokens_flyv1_for_macaroons() {
    assert_eq!(authorization_header("abc123"), "Bearer abc123");
    assert_eq!(authorization_header(" Bearer abc123 "), "Bearer abc123");
    assert_eq!(authorization_header("fm2_lJPE"), "FlyV1 fm2_lJPE");
    assert_eq!(authorization_header("fm1r_xx"), "FlyV1 fm1r_xx");
    assert_eq!(authorization_header("fm1a_xx"), "FlyV1 fm1a_xx");
    // `fly tokens create` prints the scheme; comma-separated macaroons stay together.
    assert_eq!(
        authorization_header("FlyV1 fm2_aaa,fm2_bbb"),
        "FlyV1 fm2_aaa,fm2_bbb"
    );
    assert_eq!(
        authorization_header("flyv1 fm2_aaa, fm2_bbb"),
        "FlyV1 fm2_aaa,fm2_bbb"
    );
    // Only the macaroons are sent when user tokens are mixed in (as fly-go does).
    assert_eq!(authorization_header("fm2_aaa,usertok"), "FlyV1 fm2_aaa");
}

#[test]
fn requests_carry_the_right_scheme() {
    let t = ScriptedTransport::new([json(200, json!({"name": "a"}))]);
    let c = FlyClient::new(BASE, "FlyV1 fm2_macaroon-secret", &t);
    run(c.get_app("a")).unwrap();
    let t2 = ScriptedTransport::new([json(200, json!({"name": "a"}))]);
    let c2 = FlyClient::new(BASE, TOKEN, &t2);
    run(c2.get_app("a")).unwrap();
    assert_eq!(
        t.requests()[0].header("authorization"),
        Some("FlyV1 fm2_macaroon-secret")
    );
    assert_eq!(
        t2.requests()[0].header("authorization"),
        Some("Bearer plain-secret-token-123")
    );
    assert!(!format!("{c:?}").contains("secret"));
}

#[test]
fn default_app_names_are_valid_and_vary() {
    let a = default_app_name(0);
    let b = default_app_name(1);
    assert_ne!(a, b);
    for name in [&a, &b, &default_app_name(u64::MAX)] {
        assert_eq!(name.len(), "msc-computers-".len() + 8, "{name}");
        let hex = name.strip_prefix("msc-computers-").unwrap();
        assert!(
            hex.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{name}"
        );
    }
    assert_eq!(default_app_name(42), default_app_name(42));
}

#[test]
fn base_url_defaults_and_trailing_slash() {
    let t = ScriptedTransport::default();
    assert_eq!(FlyClient::new("", TOKEN, &t).base_url(), DEFAULT_BASE_URL);
    assert_eq!(
        FlyClient::new("https://x.test/", TOKEN, &t).base_url(),
        "https://x.test"
    );
}

// -------------------------------------------------------------------------------------
// Apps
// -------------------------------------------------------------------------------------

#[test]
fn get_app_decodes_and_404_is_none() {
    let c = client([
        json(
            200,
            json!({"id": "app_1", "name": "msc-computers-1", "status": "deployed",
                   "organization": {"slug": "personal", "name": "Me"}, "machine_count": 2,
                   "network": "default", "extra": true}),
        ),
        json(404, json!({"error": "app not found"})),
    ]);
    let app = run(c.get_app("msc-computers-1")).unwrap().unwrap();
    assert_eq!(
        app,
        App {
            id: "app_1".into(),
            name: "msc-computers-1".into(),
            status: Some("deployed".into()),
            org_slug: Some("personal".into()),
            machine_count: Some(2),
        }
    );
    assert_eq!(run(c.get_app("gone")).unwrap(), None);
    let reqs = c.transport().requests();
    assert_eq!(reqs[0].method, "GET");
    assert_eq!(reqs[0].url, "https://fly.test/v1/apps/msc-computers-1");
    assert_eq!(reqs[0].header("accept"), Some("application/json"));
    assert!(reqs[0].body.is_none());
    assert!(reqs[0].header("content-type").is_none());
}

#[test]
fn create_app_body_and_name_taken() {
    let c = client([
        json(201, json!({"id": "app_1", "created_at": 1764496800})),
        json(
            422,
            json!({"error": "Name has already been taken", "status": "name_taken"}),
        ),
    ]);
    run(c.create_app("msc-computers-1", "personal")).unwrap();
    let err = run(c.create_app("taken", "personal")).unwrap_err();
    assert_eq!(err, FlyError::NameTaken("taken".into()));
    assert!(err.to_string().contains("choose another name"));
    let req = &c.transport().requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, "https://fly.test/v1/apps");
    assert_eq!(req.header("content-type"), Some("application/json"));
    let body = body_json(req);
    assert_eq!(
        body,
        json!({"name": "msc-computers-1", "org_slug": "personal"})
    );
    assert_matches(CREATE_APP_REQUEST, &body);
    assert_spec_schema("CreateAppRequest", &body);
    // Not idempotent: exactly two requests, no sleeps.
    assert_eq!(c.transport().requests().len(), 2);
    assert!(c.transport().sleeps().is_empty());
}

#[test]
fn create_app_in_an_unknown_org_says_how_to_pick_one() {
    let c = client([
        json(404, json!({"error": "organization not found"})),
        json(400, json!({"error": "invalid org_slug"})),
    ]);
    for _ in 0..2 {
        let err = run(c.create_app("x", "acme")).unwrap_err().to_string();
        assert!(err.contains("\"acme\"") && err.contains("FLY_ORG"), "{err}");
    }
}

#[test]
fn create_app_with_a_deploy_token_is_unauthorized() {
    let c = client([json(403, json!({"error": "unauthorized"}))]);
    let err = run(c.create_app("x", "personal")).unwrap_err();
    assert_eq!(err, FlyError::Unauthorized);
    assert!(err.to_string().contains("fly tokens create org"));
}

// -------------------------------------------------------------------------------------
// Machines
// -------------------------------------------------------------------------------------

#[test]
fn create_machine_body_matches_the_spec() {
    let c = client([json(200, machine_json("3d8d9e1b", "created"))]);
    let m = run(c.create_machine("my-computers", &spec_machine())).unwrap();
    assert_eq!(m.id, "3d8d9e1b");
    let req = &c.transport().requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, "https://fly.test/v1/apps/my-computers/machines");
    assert_eq!(req.header("content-type"), Some("application/json"));
    let body = body_json(req);
    assert_eq!(
        body,
        json!({
            "name": "computer-alpha",
            "region": "iad",
            "config": {
                "image": "docker.io/library/debian:bookworm-slim",
                "guest": {"cpu_kind": "shared", "cpus": 1, "memory_mb": 512},
                "rootfs": {"persist": "always", "size_gb": 4},
                "metadata": {"mcp_computer": "alpha", "mcp_owner": "user-123"},
                "init": {"exec": ["/bin/sleep", "inf"]}
            }
        })
    );
    assert_matches(CREATE_MACHINE_REQUEST, &body);
    assert_spec_schema("CreateMachineRequest", &body);
}

#[test]
fn create_machine_minimal_body_omits_optional_parts() {
    let c = client([json(200, machine_json("m1", "created"))]);
    let spec = MachineSpec {
        image: "alpine:3".into(),
        cpu_kind: "performance".into(),
        cpus: 2,
        memory_mb: 4096,
        ..MachineSpec::default()
    };
    run(c.create_machine("app", &spec)).unwrap();
    let body = body_json(&c.transport().requests()[0]);
    assert_eq!(
        body,
        json!({"config": {"image": "alpine:3",
                          "guest": {"cpu_kind": "performance", "cpus": 2, "memory_mb": 4096}}})
    );
    assert_matches(CREATE_MACHINE_REQUEST, &body);
    assert_spec_schema("CreateMachineRequest", &body);
}

#[test]
fn machines_decode_leniently() {
    let c = client([json(200, machine_json("3d8d9e1b", "started"))]);
    let m = run(c.get_machine("app", "3d8d9e1b")).unwrap().unwrap();
    assert_eq!(
        m,
        Machine {
            id: "3d8d9e1b".into(),
            name: "name-3d8d9e1b".into(),
            state: "started".into(),
            region: Some("iad".into()),
            image: Some("docker.io/library/debian:bookworm-slim".into()),
            metadata: [
                ("mcp_computer".to_owned(), "alpha".to_owned()),
                ("mcp_owner".to_owned(), "user-123".to_owned()),
            ]
            .into_iter()
            .collect(),
            created_at: Some("2026-11-30T10:00:00Z".into()),
        }
    );
    // Summary-like answer: no config, image from image_ref, nulls tolerated.
    let raw: RawMachine = serde_json::from_value(json!({
        "id": "m2", "state": "stopped", "region": null, "config": null,
        "image_ref": {"registry": "registry.fly.io", "repository": "my-img", "tag": "v1"}
    }))
    .unwrap();
    let m2 = raw.into_machine().unwrap();
    assert_eq!(m2.image.as_deref(), Some("registry.fly.io/my-img:v1"));
    assert_eq!(m2.name, "");
    assert!(m2.metadata.is_empty());
    // No id: a decode error, not a machine with an empty id.
    let raw: RawMachine = serde_json::from_value(json!({"state": "started"})).unwrap();
    assert!(matches!(raw.into_machine(), Err(FlyError::Decode(_))));
}

#[test]
fn get_machine_404_is_none_and_paths_are_encoded() {
    let c = client([json(404, json!({"error": "machine not found"}))]);
    assert_eq!(run(c.get_machine("my app", "a/b")).unwrap(), None);
    assert_eq!(
        c.transport().requests()[0].url,
        "https://fly.test/v1/apps/my%20app/machines/a%2Fb"
    );
}

#[test]
fn list_machines_filters_and_follows_pages() {
    let c = client([
        raw(
            200,
            &[
                ("content-type", "application/json"),
                ("fly-next-cursor", "cur 1"),
            ],
            json!([machine_json("m1", "started"), machine_json("m2", "stopped")])
                .to_string()
                .as_bytes(),
        ),
        // An advisory-empty page that still has a cursor.
        raw(200, &[("Fly-Next-Cursor", "cur2")], b"[]"),
        // Last page (no cursor); m2 again must not be duplicated.
        json(
            200,
            json!([
                machine_json("m2", "stopped"),
                machine_json("m3", "suspended")
            ]),
        ),
    ]);
    let ms = run(c.list_machines("app", &[("mcp_computer", "alpha"), ("owner", "a b&c")])).unwrap();
    let ids: Vec<&str> = ms.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2", "m3"]);
    let urls: Vec<String> = c
        .transport()
        .requests()
        .into_iter()
        .map(|r| r.url)
        .collect();
    let first = "https://fly.test/v1/apps/app/machines?metadata.mcp_computer=alpha&metadata.owner=a%20b%26c&limit=500";
    assert_eq!(urls[0], first);
    assert_eq!(urls[1], format!("{first}&cursor=cur%201"));
    assert_eq!(urls[2], format!("{first}&cursor=cur2"));
}

#[test]
fn list_machines_of_a_missing_app() {
    let c = client([json(404, json!({"error": "app not found"}))]);
    let err = run(c.list_machines("nope", &[])).unwrap_err();
    assert_eq!(err, FlyError::NotFound("Fly app \"nope\"".into()));
    assert_eq!(
        c.transport().requests()[0].url,
        "https://fly.test/v1/apps/nope/machines?limit=500"
    );
}

#[test]
fn lifecycle_actions_have_the_right_shapes() {
    let ok = || raw(200, &[], b"");
    let c = client([ok(), ok(), ok(), ok(), ok()]);
    run(c.start("app", "m1")).unwrap();
    run(c.stop("app", "m1")).unwrap();
    run(c.restart("app", "m1")).unwrap();
    run(c.destroy("app", "m1", true)).unwrap();
    run(c.destroy("app", "m1", false)).unwrap();
    let got: Vec<(&str, String, bool)> = c
        .transport()
        .requests()
        .into_iter()
        .map(|r| (r.method, r.url, r.body.is_some()))
        .collect();
    let m = "https://fly.test/v1/apps/app/machines/m1";
    assert_eq!(
        got,
        vec![
            ("POST", format!("{m}/start"), false),
            ("POST", format!("{m}/stop"), false),
            ("POST", format!("{m}/restart"), false),
            ("DELETE", format!("{m}?force=true"), false),
            ("DELETE", m.to_owned(), false),
        ]
    );
}

#[test]
fn destroy_404_first_time_is_not_found_after_a_retry_is_done() {
    let c = client([json(404, json!({"error": "not found"}))]);
    assert_eq!(
        run(c.destroy("app", "m1", false)).unwrap_err(),
        FlyError::NotFound("machine \"m1\" in Fly app \"app\"".into())
    );
    let c = client([
        json(503, json!({"error": "unavailable"})),
        json(404, json!({"error": "not found"})),
    ]);
    run(c.destroy("app", "m1", false)).unwrap();
}

#[test]
fn conflict_and_other_errors() {
    let c = client([
        raw(
            412,
            &[("fly-request-id", "req-1")],
            br#"{"error":"machine not in a startable state"}"#,
        ),
        raw(400, &[], b"plain text failure"),
    ]);
    assert_eq!(
        run(c.start("app", "m1")).unwrap_err(),
        FlyError::Conflict("machine not in a startable state (fly-request-id req-1)".into())
    );
    assert_eq!(
        run(c.stop("app", "m1")).unwrap_err(),
        FlyError::Api {
            status: 400,
            message: "plain text failure".into()
        }
    );
}

// -------------------------------------------------------------------------------------
// Wait
// -------------------------------------------------------------------------------------

#[test]
fn wait_asks_at_most_60_s_per_request_and_loops() {
    let timeout = || json(408, json!({"error": "deadline_exceeded: timed out"}));
    let c = client([
        timeout(),
        timeout(),
        json(200, json!({"ok": true, "state": "started"})),
    ]);
    run(c.wait("app", "m1", "started", 150)).unwrap();
    let urls: Vec<String> = c
        .transport()
        .requests()
        .into_iter()
        .map(|r| r.url)
        .collect();
    let w = "https://fly.test/v1/apps/app/machines/m1/wait?state=started";
    assert_eq!(
        urls,
        [
            format!("{w}&timeout=60"),
            format!("{w}&timeout=60"),
            format!("{w}&timeout=30")
        ]
    );
    assert!(c.transport().sleeps().is_empty());
}

#[test]
fn wait_gives_up_after_the_total_timeout() {
    let c = client([json(408, json!({"error": "timeout"}))]);
    let err = run(c.wait("app", "m1", "stopped", 0)).unwrap_err();
    let FlyError::Api { status, message } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*status, 408);
    assert!(
        message.contains("did not reach state \"stopped\""),
        "{message}"
    );
    assert!(c.transport().requests()[0].url.ends_with("timeout=1"));
}

#[test]
fn wait_is_retried_on_503_and_reports_other_errors() {
    let c = client([
        json(503, json!({"error": "unavailable"})),
        json(200, json!({"ok": true})),
        json(400, json!({"error": "invalid state"})),
    ]);
    run(c.wait("app", "m1", "started", 10)).unwrap();
    assert_eq!(c.transport().sleeps(), [100]);
    let err = run(c.wait("app", "m1", "bogus", 10)).unwrap_err();
    assert_eq!(
        err,
        FlyError::Api {
            status: 400,
            message: "invalid state".into()
        }
    );
}

// -------------------------------------------------------------------------------------
// Exec
// -------------------------------------------------------------------------------------

fn argv() -> Vec<String> {
    vec!["/bin/sh".into(), "-lc".into(), "echo hi; ls /nope".into()]
}

#[test]
fn exec_body_matches_the_spec_and_decodes() {
    let c = client([json(
        200,
        json!({"exit_code": 2, "stdout": "hi\n", "stderr": "ls: /nope: No such file or directory\n"}),
    )]);
    let out = run(c.exec("my-computers", "3d8d9e1b", &argv(), Some("input\n"), 30)).unwrap();
    assert_eq!(
        out,
        ExecOutput {
            exit_code: 2,
            stdout: "hi\n".into(),
            stderr: "ls: /nope: No such file or directory\n".into(),
            exit_signal: None,
        }
    );
    let req = &c.transport().requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.url,
        "https://fly.test/v1/apps/my-computers/machines/3d8d9e1b/exec"
    );
    let body = body_json(req);
    assert_eq!(
        body,
        json!({"command": ["/bin/sh", "-lc", "echo hi; ls /nope"], "stdin": "input\n", "timeout": 30})
    );
    assert_matches(MACHINE_EXEC_REQUEST, &body);
    assert_spec_schema("MachineExecRequest", &body);
}

#[test]
fn exec_without_stdin_or_timeout_sends_only_the_command() {
    let c = client([json(200, json!({"stdout": "x"}))]);
    let out = run(c.exec("a", "m", &argv(), None, 0)).unwrap();
    assert_eq!(out.exit_code, 0, "missing exit_code means 0");
    let body = body_json(&c.transport().requests()[0]);
    assert_eq!(
        body,
        json!({"command": ["/bin/sh", "-lc", "echo hi; ls /nope"]})
    );
    assert_matches(MACHINE_EXEC_REQUEST, &body);
}

#[test]
fn exec_octet_stream_json_and_raw_bytes() {
    let c = client([
        raw(
            200,
            &[("content-type", "application/octet-stream")],
            br#"{"exit_code":137,"exit_signal":9,"stdout":"","stderr":"killed","unknown":1}"#,
        ),
        raw(
            200,
            &[("content-type", "application/octet-stream")],
            b"raw output\n",
        ),
        raw(200, &[("content-type", "application/json")], b"not json"),
        json(
            200,
            json!({"exit_code": 0, "exit_signal": 0, "stdout": "ok"}),
        ),
    ]);
    let a = run(c.exec("a", "m", &argv(), None, 5)).unwrap();
    assert_eq!(
        (a.exit_code, a.exit_signal, a.stderr.as_str()),
        (137, Some(9), "killed")
    );
    let b = run(c.exec("a", "m", &argv(), None, 5)).unwrap();
    assert_eq!((b.exit_code, b.stdout.as_str()), (0, "raw output\n"));
    assert!(matches!(
        run(c.exec("a", "m", &argv(), None, 5)),
        Err(FlyError::Decode(_))
    ));
    let d = run(c.exec("a", "m", &argv(), None, 5)).unwrap();
    assert_eq!(d.exit_signal, None);
}

#[test]
fn exec_is_not_retried_on_503_or_transport_errors() {
    let c = client([json(503, json!({"error": "upstream unavailable"}))]);
    let err = run(c.exec("a", "m", &argv(), None, 5)).unwrap_err();
    assert_eq!(
        err,
        FlyError::Api {
            status: 503,
            message: "upstream unavailable".into()
        }
    );
    assert_eq!(c.transport().requests().len(), 1);
    assert!(c.transport().sleeps().is_empty());

    let c = client([Err("connection reset".into())]);
    let err = run(c.exec("a", "m", &argv(), None, 5)).unwrap_err();
    assert_eq!(err, FlyError::Transport("connection reset".into()));
    assert_eq!(c.transport().requests().len(), 1);
}

#[test]
fn exec_is_retried_on_429() {
    let c = client([
        raw(
            429,
            &[("retry-after", "1")],
            b"{\"error\":\"rate limited\"}",
        ),
        json(200, json!({"exit_code": 0, "stdout": "ok"})),
    ]);
    let out = run(c.exec("a", "m", &argv(), None, 5)).unwrap();
    assert_eq!(out.stdout, "ok");
    assert_eq!(c.transport().requests().len(), 2);
    assert_eq!(c.transport().sleeps(), [1000]);
}

#[test]
fn exec_on_a_stopped_machine_reports_the_server_message() {
    let c = client([raw(
        400,
        &[("content-type", "application/octet-stream")],
        br#"{"error":"machine is not started"}"#,
    )]);
    assert_eq!(
        run(c.exec("a", "m", &argv(), None, 5)).unwrap_err(),
        FlyError::Api {
            status: 400,
            message: "machine is not started".into()
        }
    );
}

// -------------------------------------------------------------------------------------
// Retries and capacity
// -------------------------------------------------------------------------------------

#[test]
fn get_is_retried_on_429_and_503_with_backoff() {
    let c = client([
        json(429, json!({"error": "slow down"})),
        json(503, json!({"error": "unavailable"})),
        Err("dns failure".into()),
        json(200, machine_json("m1", "started")),
    ]);
    let m = run(c.get_machine("app", "m1")).unwrap().unwrap();
    assert_eq!(m.id, "m1");
    assert_eq!(c.transport().sleeps(), [100, 200, 400]);
    assert_eq!(c.transport().remaining(), 0);
}

#[test]
fn retry_after_is_honoured_and_capped() {
    let c = client([
        raw(429, &[("Retry-After", "3")], b""),
        raw(503, &[("retry-after", "0.5")], b""),
        raw(429, &[("retry-after", "86400")], b""),
        raw(
            429,
            &[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")],
            b"",
        ),
        raw(200, &[], b""),
    ]);
    run(c.start("app", "m1")).unwrap();
    assert_eq!(c.transport().sleeps(), [3000, 500, 30_000, 800]);
}

#[test]
fn persistent_429_becomes_rate_limited_after_six_tries() {
    let c = client((0..6).map(|_| json(429, json!({"error": "rate limited"}))));
    let err = run(c.list_machines("app", &[])).unwrap_err();
    assert_eq!(err, FlyError::RateLimited);
    assert_eq!(c.transport().requests().len(), 6);
    assert_eq!(c.transport().sleeps(), [100, 200, 400, 800, 1600]);
}

#[test]
fn persistent_503_is_an_api_error_with_the_request_id() {
    let c = client((0..6).map(|_| {
        raw(
            503,
            &[("fly-request-id", "01ABC")],
            br#"{"error":"overloaded"}"#,
        )
    }));
    let err = run(c.get_app("app")).unwrap_err();
    assert_eq!(
        err,
        FlyError::Api {
            status: 503,
            message: "overloaded (fly-request-id 01ABC)".into()
        }
    );
}

#[test]
fn create_is_not_retried_on_503_but_is_on_429() {
    let c = client([json(503, json!({"error": "unavailable"}))]);
    assert!(matches!(
        run(c.create_machine("app", &spec_machine())),
        Err(FlyError::Api { status: 503, .. })
    ));
    assert_eq!(c.transport().requests().len(), 1);

    let c = client([
        json(429, json!({"error": "rate limited"})),
        json(200, machine_json("m1", "created")),
    ]);
    run(c.create_machine("app", &spec_machine())).unwrap();
    assert_eq!(c.transport().requests().len(), 2);
}

#[test]
fn capacity_is_retried_twice_then_reported_with_advice() {
    let cap = || {
        json(
            412,
            json!({"error": "insufficient resources available to fulfill request",
                   "status": "insufficient_capacity"}),
        )
    };
    let c = client([cap(), cap(), cap()]);
    let err = run(c.create_machine("app", &spec_machine())).unwrap_err();
    assert_eq!(
        err,
        FlyError::Capacity(
            "region iad: insufficient resources available to fulfill request".into()
        )
    );
    assert!(err.to_string().contains("--fly-region"));
    assert_eq!(c.transport().requests().len(), 3);
    assert_eq!(c.transport().sleeps(), [100, 200]);

    let c = client([cap(), json(200, machine_json("m1", "created"))]);
    assert_eq!(
        run(c.create_machine("app", &spec_machine())).unwrap().id,
        "m1"
    );
}

#[test]
fn retry_policy_decisions() {
    let p = RetryPolicy::default();
    let st = |status, retry_after_ms| Outcome::Status {
        status,
        retry_after_ms,
        capacity: false,
    };
    let cap = Outcome::Status {
        status: 503,
        retry_after_ms: None,
        capacity: true,
    };
    use Decision::{GiveUp, Retry};
    // Backoff doubles from 100 ms and is capped at 2 s; 6 tries in all.
    let delays: Vec<Decision> = (1..=6)
        .map(|a| p.decide(true, a, 0, st(503, None)))
        .collect();
    assert_eq!(
        delays,
        [
            Retry { after_ms: 100 },
            Retry { after_ms: 200 },
            Retry { after_ms: 400 },
            Retry { after_ms: 800 },
            Retry { after_ms: 1600 },
            GiveUp
        ]
    );
    let long = RetryPolicy {
        max_attempts: 10,
        ..p
    };
    assert_eq!(
        long.decide(true, 6, 0, st(500, None)),
        Retry { after_ms: 2000 }
    );
    assert_eq!(
        long.decide(true, 9, 0, st(500, None)),
        Retry { after_ms: 2000 }
    );
    // Idempotent: 429, 5xx and transport errors.
    assert_eq!(
        p.decide(true, 1, 0, Outcome::Transport),
        Retry { after_ms: 100 }
    );
    assert_eq!(p.decide(true, 1, 0, st(429, None)), Retry { after_ms: 100 });
    assert_eq!(
        p.decide(true, 1, 0, st(502, Some(1500))),
        Retry { after_ms: 1500 }
    );
    // Not idempotent: only 429.
    assert_eq!(p.decide(false, 1, 0, Outcome::Transport), GiveUp);
    assert_eq!(p.decide(false, 1, 0, st(503, None)), GiveUp);
    assert_eq!(
        p.decide(false, 2, 0, st(429, Some(4000))),
        Retry { after_ms: 4000 }
    );
    assert_eq!(
        p.decide(false, 1, 0, st(429, Some(99_000))),
        Retry { after_ms: 30_000 }
    );
    // Other statuses never.
    for s in [400, 401, 403, 404, 408, 409, 412, 422] {
        assert_eq!(p.decide(true, 1, 0, st(s, None)), GiveUp, "{s}");
    }
    // Capacity: twice, for any request.
    assert_eq!(p.decide(false, 1, 1, cap), Retry { after_ms: 100 });
    assert_eq!(p.decide(false, 2, 2, cap), Retry { after_ms: 200 });
    assert_eq!(p.decide(false, 3, 3, cap), GiveUp);
}

// -------------------------------------------------------------------------------------
// Secrets and Send
// -------------------------------------------------------------------------------------

#[test]
fn error_messages_never_contain_the_token() {
    let echo = format!("bad token {TOKEN} for app");
    let c = client([
        json(400, json!({"error": echo})),
        Err(format!("connect failed; sent Bearer {TOKEN}").into()),
    ]);
    let err = run(c.exec("a", "m", &argv(), None, 5)).unwrap_err();
    assert!(!err.to_string().contains(TOKEN), "{err}");
    assert!(err.to_string().contains("[redacted]"));
    let err = run(c.exec("a", "m", &argv(), None, 5)).unwrap_err();
    assert!(!err.to_string().contains(TOKEN), "{err}");
    assert!(!format!("{:?}", c.transport().requests()).contains(TOKEN));
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn futures_are_send_natively() {
    fn assert_send<F: Send>(_: &F) {}
    let c = client([]);
    let argv = argv();
    let spec = spec_machine();
    assert_send(&c.exec("a", "m", &argv, None, 1));
    assert_send(&c.create_machine("a", &spec));
    assert_send(&c.list_machines("a", &[]));
    assert_send(&c.wait("a", "m", "started", 1));
    assert_send(&c.destroy("a", "m", true));
    assert_send(&c.get_app("a"));
}

#[test]
fn the_schema_checks_catch_violations() {
    let bad = json!({
        "name": 7,
        "config": {
            "image": "x",
            "guest": {"cpus": "1", "persist_rootfs": "always"},
            "rootfs": {"persist": "forever"},
            "bogus": true
        }
    });
    let mut hand = Vec::new();
    check(&Ty::Obj(CREATE_MACHINE_REQUEST), &bad, "$", &mut hand);
    let doc: Value = serde_json::from_str(SPEC).unwrap();
    let mut spec = Vec::new();
    spec_check(
        &doc,
        &doc["components"]["schemas"]["CreateMachineRequest"],
        &bad,
        "$",
        &mut spec,
    );
    for problems in [&hand, &spec] {
        let all = problems.join("\n");
        for at in [
            "$.name",
            "$.config.guest.cpus",
            "$.config.guest.persist_rootfs",
            "$.config.rootfs.persist",
            "$.config.bogus",
        ] {
            assert!(all.contains(at), "{at} missing from {all}");
        }
    }
}

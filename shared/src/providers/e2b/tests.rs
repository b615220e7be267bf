//! Unit tests of the E2B client over the scripted transport: request shapes (checked
//! against hand-transcribed schemas and mechanically against `specs/e2b/openapi.yml` and
//! `specs/e2b/envd/process/process.proto`), Connect framing, stream decoding, retries, error
//! mapping and redaction.

use serde_json::{Value, json};

use super::*;
use crate::providers::testing::{Reply, ScriptedTransport, json, raw};

const API: &str = "https://api.e2b.test";
const KEY: &str = "e2b_0123456789abcdef-secret";
const TOKEN: &str = "envd-token-fedcba9876543210";
const SHARED: &str = "http://127.0.0.1:3049";

fn client(script: impl IntoIterator<Item = Reply>) -> E2bClient<ScriptedTransport> {
    E2bClient::new(API, None, KEY, ScriptedTransport::new(script))
}

fn shared_client(script: impl IntoIterator<Item = Reply>) -> E2bClient<ScriptedTransport> {
    E2bClient::new(
        format!("{API}/"),
        Some(format!("{SHARED}/")),
        KEY,
        ScriptedTransport::new(script),
    )
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    futures_executor::block_on(f)
}

fn body_json(req: &HttpRequest) -> Value {
    serde_json::from_slice(req.body.as_deref().expect("a body")).expect("JSON body")
}

fn sandbox() -> Sandbox {
    Sandbox {
        sandbox_id: "i1a2b3c4d5e6f".into(),
        template_id: "rki5dems9wqfm4r03t7g".into(),
        envd_access_token: Some(TOKEN.into()),
        domain: Some("e2b.app".into()),
    }
}

fn new_sandbox() -> NewSandbox {
    NewSandbox {
        template_id: "base".into(),
        timeout_secs: 600,
        metadata: vec![
            ("mcp_computer".into(), "alpha".into()),
            ("mcp_owner".into(), "user-123".into()),
        ],
        env_vars: vec![("LANG".into(), "C.UTF-8".into())],
        auto_pause: true,
        secure: true,
        network: crate::egress::Policy::All,
    }
}

/// A realistic `Sandbox` response (create/connect), with fields we ignore.
fn sandbox_json(id: &str) -> Value {
    json!({
        "sandboxID": id,
        "templateID": "rki5dems9wqfm4r03t7g",
        "alias": "base",
        "clientID": "6532622b",
        "envdVersion": "0.4.2",
        "envdAccessToken": TOKEN,
        "trafficAccessToken": null,
        "domain": "e2b.app"
    })
}

/// A realistic `ListedSandbox`.
fn listed_json(id: &str, state: &str) -> Value {
    json!({
        "sandboxID": id,
        "templateID": "rki5dems9wqfm4r03t7g",
        "alias": "base",
        "clientID": "6532622b",
        "startedAt": "2026-11-30T10:00:00Z",
        "endAt": "2026-11-30T11:00:00Z",
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 10240,
        "metadata": {"mcp_computer": "alpha", "mcp_owner": "user-123"},
        "state": state,
        "envdVersion": "0.4.2",
        "volumeMounts": []
    })
}

fn empty(status: u16) -> Reply {
    raw(status, &[], b"")
}

fn api_error(status: u16, message: &str) -> Reply {
    json(status, json!({"code": status, "message": message}))
}

// -------------------------------------------------------------------------------------
// Connect stream helpers
// -------------------------------------------------------------------------------------

fn frame(flags: u8, msg: &Value) -> Vec<u8> {
    connect_envelope(flags, msg.to_string().as_bytes()).expect("envelope")
}

fn event(ev: Value) -> Vec<u8> {
    frame(0, &json!({ "event": ev }))
}

fn b64(s: &[u8]) -> String {
    STANDARD.encode(s)
}

/// A stream: the given event envelopes, then an end-of-stream envelope with `trailer`.
fn stream(events: &[Value], trailer: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for ev in events {
        out.extend(event(ev.clone()));
    }
    out.extend(frame(FLAG_END_STREAM, trailer));
    out
}

fn stream_reply(body: Vec<u8>) -> Reply {
    raw(200, &[("content-type", "application/connect+json")], &body)
}

/// A captured-style successful run of `echo hi; echo oops >&2`.
fn ok_stream() -> Vec<u8> {
    stream(
        &[
            json!({"start": {"pid": 412}}),
            json!({"keepalive": {}}),
            json!({"data": {"stdout": b64(b"hi\n")}}),
            json!({"data": {"stderr": b64(b"oops\n")}}),
            json!({"end": {"exited": true, "status": "exit status 0"}}),
        ],
        &json!({}),
    )
}

fn run_simple(
    c: &E2bClient<ScriptedTransport>,
    sbx: &Sandbox,
    stdin: Option<&[u8]>,
    limit: usize,
) -> Result<RunOutput, E2bError> {
    block(c.run(
        sbx,
        "/bin/bash",
        &["-l".into(), "-c".into(), "echo hi".into()],
        &[],
        None,
        stdin,
        30_000,
        limit,
    ))
}

/// Splits a request body into envelopes (flags, payload).
fn envelopes(body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        assert!(rest.len() >= 5, "short envelope header");
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        out.push((rest[0], rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
    out
}

fn start_request_json(req: &HttpRequest) -> Value {
    let envs = envelopes(req.body.as_deref().expect("a body"));
    assert_eq!(envs.len(), 1, "exactly one request envelope");
    assert_eq!(envs[0].0, 0, "flags 0");
    serde_json::from_slice(&envs[0].1).expect("JSON StartRequest")
}

// -------------------------------------------------------------------------------------
// Hand-transcribed request schemas (from specs/e2b/openapi.yml)
// -------------------------------------------------------------------------------------

/// A JSON schema, as far as these tests need one.
enum Ty {
    Str,
    Int { min: i64, max: i64 },
    Bool,
    StrMap,
    StrList,
    Object(&'static [(&'static str, Ty)], &'static [&'static str]),
}

/// `NewSandbox` (the properties we may send; `required: [templateID]`).
const NEW_SANDBOX: Ty = Ty::Object(
    &[
        ("templateID", Ty::Str),
        (
            "timeout",
            Ty::Int {
                min: 0,
                max: i32::MAX as i64,
            },
        ),
        ("autoPause", Ty::Bool),
        ("autoPauseMemory", Ty::Bool),
        ("secure", Ty::Bool),
        ("allow_internet_access", Ty::Bool),
        ("metadata", Ty::StrMap),
        ("envVars", Ty::StrMap),
        (
            "network",
            Ty::Object(&[("allowOut", Ty::StrList), ("denyOut", Ty::StrList)], &[]),
        ),
    ],
    &["templateID"],
);

/// `ConnectSandbox` and `SandboxTimeoutRequest`.
const TIMEOUT_REQUEST: Ty = Ty::Object(
    &[(
        "timeout",
        Ty::Int {
            min: 0,
            max: i32::MAX as i64,
        },
    )],
    &["timeout"],
);

fn check(ty: &Ty, v: &Value, path: &str) {
    match ty {
        Ty::Str => assert!(v.is_string(), "{path}: expected a string, got {v}"),
        Ty::Bool => assert!(v.is_boolean(), "{path}: expected a boolean, got {v}"),
        Ty::Int { min, max } => {
            let n = v
                .as_i64()
                .unwrap_or_else(|| panic!("{path}: expected an integer, got {v}"));
            assert!((*min..=*max).contains(&n), "{path}: {n} out of range");
        }
        Ty::StrList => {
            let a = v
                .as_array()
                .unwrap_or_else(|| panic!("{path}: expected an array, got {v}"));
            assert!(a.iter().all(Value::is_string), "{path}: {v}");
        }
        Ty::StrMap => {
            let m = v
                .as_object()
                .unwrap_or_else(|| panic!("{path}: expected an object"));
            for (k, x) in m {
                assert!(x.is_string(), "{path}.{k}: expected a string");
            }
        }
        Ty::Object(props, required) => {
            let m = v
                .as_object()
                .unwrap_or_else(|| panic!("{path}: expected an object"));
            for r in *required {
                assert!(m.contains_key(*r), "{path}: missing required {r}");
            }
            for (k, x) in m {
                let (_, t) = props
                    .iter()
                    .find(|(name, _)| name == k)
                    .unwrap_or_else(|| panic!("{path}: undeclared property {k}"));
                check(t, x, &format!("{path}.{k}"));
            }
        }
    }
}

// -------------------------------------------------------------------------------------
// Mechanical checks against the saved spec files
// -------------------------------------------------------------------------------------

const OPENAPI: &str = include_str!("../../../../specs/e2b/openapi.yml");
const PROCESS_PROTO: &str = include_str!("../../../../specs/e2b/envd/process/process.proto");

/// `components.schemas.<name>` of the OpenAPI YAML: (property → its `type` or `$ref`
/// target, required names). A line scanner for this file's layout (2-space indentation).
fn yaml_schema(name: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let header = format!("    {name}:");
    let mut lines = OPENAPI.lines().skip_while(|l| *l != header).skip(1);
    let mut props = BTreeMap::new();
    let mut required = Vec::new();
    let mut section = "";
    let mut current: Option<String> = None;
    for line in lines.by_ref() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if indent <= 4 {
            break;
        }
        if indent == 6 {
            section = if t == "properties:" {
                "properties"
            } else if t == "required:" {
                "required"
            } else {
                ""
            };
            continue;
        }
        match section {
            "required" if indent == 8 => {
                required.push(t.trim_start_matches("- ").to_owned());
            }
            "properties" if indent == 8 => {
                let key = t.trim_end_matches(':').to_owned();
                props.insert(key.clone(), String::new());
                current = Some(key);
            }
            "properties" if indent == 10 => {
                if let Some(key) = &current {
                    if let Some(ty) = t.strip_prefix("type: ") {
                        props.insert(key.clone(), ty.to_owned());
                    } else if let Some(r) = t.strip_prefix("$ref: ") {
                        let target = r.trim_matches('"').rsplit('/').next().unwrap_or("");
                        props.insert(key.clone(), format!("$ref {target}"));
                    }
                }
            }
            _ => {}
        }
    }
    assert!(!props.is_empty(), "schema {name} not found in openapi.yml");
    (props, required)
}

/// The JSON type a spec type allows, for comparison with a value.
fn json_matches(spec_ty: &str, v: &Value) -> bool {
    match spec_ty {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "$ref SandboxMetadata" | "$ref EnvVars" => v
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string)),
        // Its egress lists (checked against their own schema below).
        "$ref SandboxNetworkConfig" => v.as_object().is_some_and(|m| {
            let (props, _) = yaml_schema("SandboxNetworkConfig");
            m.iter().all(|(k, list)| {
                props.get(k).is_some_and(|t| t == "array")
                    && list
                        .as_array()
                        .is_some_and(|a| a.iter().all(Value::is_string))
            })
        }),
        other => panic!("no rule for spec type {other}"),
    }
}

fn assert_matches_spec_schema(schema: &str, body: &Value) {
    let (props, required) = yaml_schema(schema);
    let obj = body.as_object().expect("an object body");
    for r in &required {
        assert!(
            obj.contains_key(r),
            "{schema}: required {r} missing from {body}"
        );
    }
    for (k, v) in obj {
        let ty = props
            .get(k)
            .unwrap_or_else(|| panic!("{schema}: {k} is not a property in openapi.yml"));
        assert!(json_matches(ty, v), "{schema}.{k}: {v} does not match {ty}");
    }
}

/// The fields of `message <name>` in the proto, as proto3 JSON names (lowerCamelCase).
fn proto_fields(name: &str) -> Vec<String> {
    let start = PROCESS_PROTO
        .find(&format!("message {name} {{"))
        .unwrap_or_else(|| panic!("message {name} not in process.proto"));
    let body = &PROCESS_PROTO[start..];
    let end = body.find("\n}").expect("message end");
    body[..end]
        .lines()
        .skip(1)
        .filter_map(|l| {
            let l = l.trim();
            let (decl, _) = l.split_once('=')?;
            let field = decl.split_whitespace().last()?;
            let mut camel = String::new();
            let mut up = false;
            for ch in field.chars() {
                if ch == '_' {
                    up = true;
                } else if up {
                    camel.push(ch.to_ascii_uppercase());
                    up = false;
                } else {
                    camel.push(ch);
                }
            }
            Some(camel)
        })
        .collect()
}

#[test]
fn spec_declares_the_paths_we_call() {
    for path in [
        "  /sandboxes:",
        "  /v2/sandboxes:",
        "  /sandboxes/{sandboxID}:",
        "  /sandboxes/{sandboxID}/timeout:",
        "  /sandboxes/{sandboxID}/pause:",
        "  /sandboxes/{sandboxID}/connect:",
    ] {
        assert!(
            OPENAPI.lines().any(|l| l == path),
            "{path} not in openapi.yml"
        );
    }
    assert!(OPENAPI.contains("name: X-API-Key"));
    assert!(OPENAPI.contains("name: nextToken"));
    assert!(OPENAPI.contains("X-Next-Token:"));
    assert!(PROCESS_PROTO.contains("rpc Start(StartRequest) returns (stream StartResponse);"));
    let fields = proto_fields("EndEvent");
    assert!(fields.contains(&"exitCode".to_owned()), "{fields:?}");
}

#[test]
fn spec_scanner_reads_new_sandbox() {
    let (props, required) = yaml_schema("NewSandbox");
    assert_eq!(required, vec!["templateID".to_owned()]);
    assert_eq!(props.get("timeout").map(String::as_str), Some("integer"));
    assert_eq!(props.get("autoPause").map(String::as_str), Some("boolean"));
    assert_eq!(
        props.get("metadata").map(String::as_str),
        Some("$ref SandboxMetadata")
    );
    assert_eq!(
        props.get("envVars").map(String::as_str),
        Some("$ref EnvVars")
    );
}

// -------------------------------------------------------------------------------------
// Control plane: request shapes
// -------------------------------------------------------------------------------------

#[test]
fn create_sends_new_sandbox() {
    let c = client([json(201, sandbox_json("i1a2b3c4d5e6f"))]);
    let sbx = block(c.create(&new_sandbox())).expect("created");
    assert_eq!(sbx, sandbox());

    let reqs = c.transport().requests();
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, "https://api.e2b.test/sandboxes");
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("accept"), Some("application/json"));
    assert_eq!(req.header("authorization"), None);
    let body = body_json(req);
    assert_eq!(
        body,
        json!({
            "templateID": "base",
            "timeout": 600,
            "autoPause": true,
            "secure": true,
            "metadata": {"mcp_computer": "alpha", "mcp_owner": "user-123"},
            "envVars": {"LANG": "C.UTF-8"}
        })
    );
    check(&NEW_SANDBOX, &body, "NewSandbox");
    assert_matches_spec_schema("NewSandbox", &body);
}

#[test]
fn create_minimal_body_omits_empty_maps_and_clamps_timeout() {
    let c = client([json(201, sandbox_json("sbx1"))]);
    let req = NewSandbox {
        template_id: "base".into(),
        timeout_secs: u64::MAX,
        ..NewSandbox::default()
    };
    block(c.create(&req)).expect("created");
    let body = body_json(&c.transport().requests()[0]);
    assert_eq!(
        body,
        json!({"templateID": "base", "timeout": i32::MAX, "autoPause": false, "secure": false})
    );
    check(&NEW_SANDBOX, &body, "NewSandbox");
    assert_matches_spec_schema("NewSandbox", &body);
}

#[test]
fn issue_38_a_network_policy_goes_as_e2bs_own_rules() {
    use crate::egress::Policy;
    let c = client([
        json(201, sandbox_json("sbx1")),
        json(201, sandbox_json("sbx2")),
    ]);
    let req = NewSandbox {
        template_id: "base".into(),
        network: Policy::allow(["pypi.org", "*.npmjs.org", "10.0.0.0/8"]).unwrap(),
        ..NewSandbox::default()
    };
    block(c.create(&req)).expect("created");
    let body = body_json(&c.transport().requests()[0]);
    assert_eq!(
        body["network"],
        json!({"allowOut": ["pypi.org", "*.npmjs.org", "10.0.0.0/8"], "denyOut": ["0.0.0.0/0"]})
    );
    assert!(body.get("allow_internet_access").is_none(), "{body}");
    check(&NEW_SANDBOX, &body, "NewSandbox");
    assert_matches_spec_schema("NewSandbox", &body);
    let req = NewSandbox {
        template_id: "base".into(),
        network: Policy::None,
        ..NewSandbox::default()
    };
    block(c.create(&req)).expect("created");
    let body = body_json(&c.transport().requests()[1]);
    assert_eq!(body["allow_internet_access"], json!(false));
    assert!(body.get("network").is_none(), "{body}");
    assert_matches_spec_schema("NewSandbox", &body);
    // A rule E2B cannot hold is refused before anything is sent.
    let req = NewSandbox {
        template_id: "base".into(),
        network: Policy::allow(["github.com:22"]).unwrap(),
        ..NewSandbox::default()
    };
    let e = block(c.create(&req)).expect_err("refused");
    assert!(e.to_string().contains("network rule github.com:22"), "{e}");
    assert_eq!(c.transport().requests().len(), 2);
}

#[test]
fn create_decodes_null_domain_and_missing_token() {
    let c = client([json(
        201,
        json!({"sandboxID": "sbx1", "templateID": "t", "clientID": "x", "envdVersion": "0.1.1", "domain": null}),
    )]);
    let sbx = block(c.create(&new_sandbox())).expect("created");
    assert_eq!(sbx.envd_access_token, None);
    assert_eq!(sbx.domain, None);
}

#[test]
fn create_without_sandbox_id_is_a_decode_error() {
    let c = client([json(201, json!({"templateID": "t"}))]);
    let err = block(c.create(&new_sandbox())).expect_err("no id");
    assert!(matches!(err, E2bError::Decode(_)), "{err:?}");
}

#[test]
fn list_encodes_metadata_like_the_sdk_and_pages() {
    let c = client([
        raw(
            200,
            &[
                ("x-next-token", "MjAyNi0xMS0zMFQxMDowMDowMFpfX2k="),
                ("x-total-running", "3"),
            ],
            json!([listed_json("a1", "running"), listed_json("b2", "paused")])
                .to_string()
                .as_bytes(),
        ),
        json(
            200,
            json!([listed_json("b2", "paused"), listed_json("c3", "running")]),
        ),
    ]);
    let got = block(c.list(
        &[("mcp_computer", "alpha"), ("mcp_owner", "user-123")],
        &["running", "paused"],
    ))
    .expect("listed");
    assert_eq!(
        got.iter()
            .map(|s| s.sandbox_id.as_str())
            .collect::<Vec<_>>(),
        ["a1", "b2", "c3"]
    );
    assert_eq!(got[1].state, "paused");
    assert_eq!(
        got[0].metadata.get("mcp_owner").map(String::as_str),
        Some("user-123")
    );
    assert_eq!(got[0].started_at.as_deref(), Some("2026-11-30T10:00:00Z"));
    assert_eq!(got[0].end_at.as_deref(), Some("2026-11-30T11:00:00Z"));
    assert_eq!(got[0].template_id, "rki5dems9wqfm4r03t7g");

    let reqs = c.transport().requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.method == "GET" && r.body.is_none()));
    assert!(reqs.iter().all(|r| r.header("x-api-key") == Some(KEY)));
    assert_eq!(
        reqs[0].url,
        "https://api.e2b.test/v2/sandboxes?metadata=mcp_computer%3Dalpha%26mcp_owner%3Duser-123\
         &state=running,paused&limit=100"
    );
    assert_eq!(
        reqs[1].url,
        "https://api.e2b.test/v2/sandboxes?metadata=mcp_computer%3Dalpha%26mcp_owner%3Duser-123\
         &state=running,paused&limit=100&nextToken=MjAyNi0xMS0zMFQxMDowMDowMFpfX2k%3D"
    );
}

/// Mirrors the API's decoding (`packages/api/internal/utils/sandboxes_list.go`): the query
/// value is URL-decoded, then `QueryUnescape`d as a whole, split on `&` and `=`, and each
/// part `QueryUnescape`d again.
fn server_decode_metadata(url: &str) -> Vec<(String, String)> {
    fn unescape(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'%' => {
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("hex");
                    out.push(u8::from_str_radix(hex, 16).expect("hex"));
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                c => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).expect("utf-8")
    }
    let query = url.split_once('?').expect("a query").1;
    let value = query
        .split('&')
        .find_map(|p| p.strip_prefix("metadata="))
        .expect("a metadata parameter");
    let whole = unescape(&unescape(value));
    whole
        .split('&')
        .map(|pair| {
            let parts: Vec<&str> = pair.split('=').collect();
            assert_eq!(parts.len(), 2, "pair {pair:?} of {whole:?}");
            (unescape(parts[0]), unescape(parts[1]))
        })
        .collect()
}

#[test]
fn list_metadata_with_special_characters_round_trips_through_the_server_decoding() {
    let pairs = [("a b&c=d", "x+y%z/é"), ("k", "v=1&w=2")];
    let c = client([json(200, json!([]))]);
    block(c.list(&pairs, &["running"])).expect("listed");
    let url = &c.transport().requests()[0].url;
    // Each key and value encoded twice inside the parameter, the parameter once more.
    assert!(
        url.contains("metadata=a%252520b%252526c%25253Dd%3Dx%25252By%252525z%25252F%2525C3%2525A9%26k%3Dv%25253D1%252526w%25253D2&"),
        "{url}"
    );
    let decoded = server_decode_metadata(url);
    assert_eq!(
        decoded,
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn list_without_filters_and_with_a_repeated_token_stops() {
    let c = client([
        raw(200, &[("X-Next-Token", "tok1")], b"[]"),
        raw(200, &[("X-Next-Token", "tok1")], b"null"),
    ]);
    let got = block(c.list(&[], &[])).expect("listed");
    assert!(got.is_empty());
    let reqs = c.transport().requests();
    assert_eq!(reqs[0].url, "https://api.e2b.test/v2/sandboxes?limit=100");
    assert_eq!(
        reqs[1].url,
        "https://api.e2b.test/v2/sandboxes?limit=100&nextToken=tok1"
    );
    assert_eq!(c.transport().remaining(), 0);
}

#[test]
fn get_decodes_detail_and_404_is_none() {
    let mut detail = listed_json("i1a2b3c4d5e6f", "paused");
    detail["envdAccessToken"] = json!(TOKEN);
    detail["domain"] = json!("e2b.app");
    detail["lifecycle"] = json!({"autoResume": false, "onTimeout": "pause"});
    let c = client([json(200, detail), api_error(404, "sandbox not found")]);
    let got = block(c.get("i1a2b3c4d5e6f")).expect("ok").expect("found");
    assert_eq!(got.state, "paused");
    assert_eq!(got.envd_access_token.as_deref(), Some(TOKEN));
    assert_eq!(got.sandbox(), sandbox());
    assert_eq!(block(c.get("gone")).expect("ok"), None);

    let reqs = c.transport().requests();
    assert_eq!(reqs[0].method, "GET");
    assert_eq!(reqs[0].url, "https://api.e2b.test/sandboxes/i1a2b3c4d5e6f");
    assert_eq!(reqs[1].url, "https://api.e2b.test/sandboxes/gone");
}

#[test]
fn ids_are_path_encoded() {
    let c = client([empty(204)]);
    block(c.kill("a/b?c")).expect("killed");
    assert_eq!(
        c.transport().requests()[0].url,
        "https://api.e2b.test/sandboxes/a%2Fb%3Fc"
    );
}

#[test]
fn kill_is_delete_and_404_is_ok() {
    let c = client([empty(204), api_error(404, "not found")]);
    block(c.kill("sbx1")).expect("killed");
    block(c.kill("sbx2")).expect("already gone");
    let reqs = c.transport().requests();
    assert_eq!(reqs[0].method, "DELETE");
    assert_eq!(reqs[0].url, "https://api.e2b.test/sandboxes/sbx1");
    assert!(reqs[0].body.is_none());
    assert_eq!(reqs[0].header("content-type"), None);
}

#[test]
fn set_timeout_sends_timeout_request() {
    let c = client([empty(204), api_error(404, "sandbox not found")]);
    block(c.set_timeout("sbx1", 900)).expect("set");
    let err = block(c.set_timeout("sbx2", 900)).expect_err("404");
    assert_eq!(err, E2bError::NotFound("E2B sandbox \"sbx2\"".into()));
    let req = &c.transport().requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, "https://api.e2b.test/sandboxes/sbx1/timeout");
    assert_eq!(req.header("content-type"), Some("application/json"));
    let body = body_json(req);
    assert_eq!(body, json!({"timeout": 900}));
    check(&TIMEOUT_REQUEST, &body, "SandboxTimeoutRequest");
    assert_matches_spec_schema("SandboxTimeoutRequest", &body);
}

#[test]
fn pause_has_no_body_and_409_is_ok() {
    let c = client([
        empty(204),
        api_error(409, "sandbox is already paused"),
        api_error(404, "x"),
    ]);
    block(c.pause("sbx1")).expect("paused");
    block(c.pause("sbx1")).expect("already paused");
    assert!(matches!(block(c.pause("sbx9")), Err(E2bError::NotFound(_))));
    let req = &c.transport().requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, "https://api.e2b.test/sandboxes/sbx1/pause");
    assert!(req.body.is_none());
}

#[test]
fn connect_sends_connect_sandbox_and_returns_a_fresh_token() {
    let c = client([
        json(201, sandbox_json("i1a2b3c4d5e6f")),
        json(200, sandbox_json("i1a2b3c4d5e6f")),
    ]);
    assert_eq!(
        block(c.connect("i1a2b3c4d5e6f", 3600)).expect("resumed"),
        sandbox()
    );
    assert_eq!(
        block(c.connect("i1a2b3c4d5e6f", 3600)).expect("running"),
        sandbox()
    );
    let req = &c.transport().requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.url,
        "https://api.e2b.test/sandboxes/i1a2b3c4d5e6f/connect"
    );
    let body = body_json(req);
    assert_eq!(body, json!({"timeout": 3600}));
    check(&TIMEOUT_REQUEST, &body, "ConnectSandbox");
    assert_matches_spec_schema("ConnectSandbox", &body);
}

#[test]
fn new_defaults_and_trims_urls() {
    let c = E2bClient::new(" ", Some("  ".into()), KEY, ScriptedTransport::new([]));
    assert_eq!(c.api_url(), DEFAULT_API_URL);
    assert_eq!(c.sandbox_url, None);
    let c = shared_client([]);
    assert_eq!(c.api_url(), API);
    assert_eq!(c.sandbox_url.as_deref(), Some(SHARED));
}

// -------------------------------------------------------------------------------------
// Control plane: errors and retries
// -------------------------------------------------------------------------------------

#[test]
fn maps_errors() {
    let cases: Vec<(Reply, E2bError)> = vec![
        (api_error(401, "Invalid API key"), E2bError::Unauthorized),
        (api_error(403, "forbidden"), E2bError::Unauthorized),
        (
            api_error(404, "not found"),
            E2bError::NotFound("E2B sandbox \"sbx1\"".into()),
        ),
        (
            api_error(409, "sandbox sbx1 is not running"),
            E2bError::Conflict("sandbox sbx1 is not running".into()),
        ),
        (
            api_error(400, "timeout must be positive"),
            E2bError::Api {
                status: 400,
                message: "timeout must be positive".into(),
            },
        ),
        (
            raw(400, &[], b"<html>bad</html>"),
            E2bError::Api {
                status: 400,
                message: "<html>bad</html>".into(),
            },
        ),
    ];
    for (reply, want) in cases {
        let c = client([reply]);
        let err = block(c.connect("sbx1", 60)).expect_err("an error");
        assert_eq!(err, want);
    }
}

#[test]
fn create_404_names_the_template() {
    let c = client([api_error(404, "template 'nope' not found")]);
    let req = NewSandbox {
        template_id: "nope".into(),
        ..new_sandbox()
    };
    let err = block(c.create(&req)).expect_err("404");
    assert_eq!(err, E2bError::NotFound("E2B template \"nope\"".into()));
}

#[test]
fn rate_limits_are_retried_honouring_retry_after() {
    let c = client([
        raw(
            429,
            &[("retry-after", "2")],
            br#"{"code":429,"message":"slow down"}"#,
        ),
        raw(429, &[("Retry-After", "0.5")], b""),
        json(201, sandbox_json("sbx1")),
    ]);
    block(c.create(&new_sandbox())).expect("created after 429s");
    assert_eq!(c.transport().sleeps(), vec![2000, 500]);
    assert_eq!(c.transport().requests().len(), 3);
}

#[test]
fn persistent_rate_limit_is_reported() {
    let c = client((0..6).map(|_| api_error(429, "slow down")));
    let err = block(c.get("sbx1")).expect_err("429");
    assert_eq!(err, E2bError::RateLimited);
    assert_eq!(c.transport().requests().len(), 6);
    assert_eq!(c.transport().sleeps(), vec![100, 200, 400, 800, 1600]);
}

#[test]
fn create_is_not_retried_on_5xx_or_transport_failure() {
    let c = client([api_error(500, "internal error")]);
    let err = block(c.create(&new_sandbox())).expect_err("500");
    assert_eq!(
        err,
        E2bError::Api {
            status: 500,
            message: "internal error".into()
        }
    );
    assert!(
        err.to_string().contains("not retried automatically"),
        "{err}"
    );
    assert_eq!(c.transport().requests().len(), 1);

    let c = client([Err("connection reset".into())]);
    let err = block(c.create(&new_sandbox())).expect_err("transport");
    assert_eq!(err, E2bError::Transport("connection reset".into()));
    assert_eq!(c.transport().requests().len(), 1);
    assert!(c.transport().sleeps().is_empty());
}

#[test]
fn idempotent_calls_retry_5xx_and_transport_failures() {
    let c = client([
        api_error(502, "bad gateway"),
        Err("reset".into()),
        empty(204),
        api_error(503, "unavailable"),
        empty(204),
        api_error(500, "x"),
        json(200, sandbox_json("sbx1")),
        api_error(504, "x"),
        empty(204),
        api_error(500, "x"),
        json(200, json!([])),
    ]);
    block(c.kill("sbx1")).expect("killed");
    block(c.pause("sbx1")).expect("paused");
    block(c.connect("sbx1", 60)).expect("connected");
    block(c.set_timeout("sbx1", 60)).expect("timeout set");
    block(c.list(&[], &["running"])).expect("listed");
    assert_eq!(c.transport().remaining(), 0);
    assert_eq!(c.transport().sleeps(), vec![100, 200, 100, 100, 100, 100]);
}

#[test]
fn kill_retried_after_a_lost_response_then_404_is_ok() {
    let c = client([Err("timeout".into()), api_error(404, "not found")]);
    block(c.kill("sbx1")).expect("gone");
}

#[test]
fn capacity_is_retried_twice_then_reported() {
    let cap = || {
        json(
            503,
            json!({"code": 503, "message": "no node available", "error_code": "sandbox_capacity_unavailable"}),
        )
    };
    let c = client([cap(), cap(), cap()]);
    let err = block(c.create(&new_sandbox())).expect_err("capacity");
    assert_eq!(err, E2bError::Capacity("no node available".into()));
    assert_eq!(c.transport().requests().len(), 3);
    assert!(err.to_string().contains("try again in a minute"), "{err}");

    // A message mentioning capacity counts too; the second retry succeeds.
    let c = client([
        api_error(500, "Not enough capacity to create the sandbox"),
        api_error(500, "Not enough capacity to create the sandbox"),
        json(201, sandbox_json("sbx1")),
    ]);
    block(c.create(&new_sandbox())).expect("created on the third try");
}

// -------------------------------------------------------------------------------------
// envd: the Start request
// -------------------------------------------------------------------------------------

#[test]
fn connect_envelope_frames_messages() {
    assert_eq!(
        connect_envelope(0, b"{}").expect("ok"),
        [0, 0, 0, 0, 2, b'{', b'}']
    );
    let big = vec![b'x'; 0x0001_0203];
    let env = connect_envelope(2, &big).expect("ok");
    assert_eq!(&env[..5], &[2, 0, 1, 2, 3]);
    assert_eq!(env.len(), 5 + big.len());
}

#[test]
fn run_sends_start_request_to_the_sandbox_host() {
    let c = client([stream_reply(ok_stream())]);
    let out = block(c.run(
        &sandbox(),
        "/bin/bash",
        &["-l".into(), "-c".into(), "echo hi; echo oops >&2".into()],
        &[("FOO".into(), "1".into()), ("BAR".into(), "x y".into())],
        Some("/home/user"),
        None,
        45_000,
        1024,
    ))
    .expect("ran");
    assert_eq!(
        out,
        RunOutput {
            pid: Some(412),
            exit_code: 0,
            stdout: b"hi\n".to_vec(),
            stderr: b"oops\n".to_vec(),
            truncated: false,
            error: None,
        }
    );

    let reqs = c.transport().requests();
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.url,
        "https://49983-i1a2b3c4d5e6f.e2b.app/process.Process/Start"
    );
    assert_eq!(req.header("content-type"), Some("application/connect+json"));
    assert_eq!(req.header("connect-protocol-version"), Some("1"));
    assert_eq!(req.header("connect-timeout-ms"), Some("45000"));
    assert_eq!(req.header("x-access-token"), Some(TOKEN));
    assert_eq!(req.header("keepalive-ping-interval"), Some("50"));
    assert_eq!(
        req.header("x-api-key"),
        None,
        "the API key stays on the control plane"
    );
    assert_eq!(req.header("e2b-sandbox-id"), None);

    // Exact bytes: one envelope, flags 0, big-endian length, the JSON.
    let json_bytes = br#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi; echo oops >&2"],"envs":{"BAR":"x y","FOO":"1"},"cwd":"/home/user"},"stdin":false}"#;
    let mut want = vec![0u8];
    want.extend_from_slice(&u32::try_from(json_bytes.len()).expect("len").to_be_bytes());
    want.extend_from_slice(json_bytes);
    assert_eq!(req.body.as_deref(), Some(want.as_slice()));
}

#[test]
fn start_request_uses_only_proto_fields() {
    let c = client([stream_reply(ok_stream())]);
    block(c.run(
        &sandbox(),
        "ls",
        &["-la".into()],
        &[("A".into(), "1".into())],
        Some("/tmp"),
        None,
        0,
        10,
    ))
    .expect("ran");
    let body = start_request_json(&c.transport().requests()[0]);
    let start_fields = proto_fields("StartRequest");
    let config_fields = proto_fields("ProcessConfig");
    for k in body.as_object().expect("object").keys() {
        assert!(
            start_fields.contains(k),
            "StartRequest has no {k}: {start_fields:?}"
        );
    }
    for k in body["process"].as_object().expect("object").keys() {
        assert!(
            config_fields.contains(k),
            "ProcessConfig has no {k}: {config_fields:?}"
        );
    }
    assert!(body["process"]["args"].is_array());
    assert!(body["process"]["envs"].is_object());
    assert_eq!(body["stdin"], json!(false));
}

#[test]
fn run_minimal_request_and_no_timeout_header() {
    let sbx = Sandbox {
        envd_access_token: None,
        domain: None,
        ..sandbox()
    };
    let c = client([stream_reply(ok_stream())]);
    block(c.run(&sbx, "true", &[], &[], None, None, 0, 10)).expect("ran");
    let req = &c.transport().requests()[0];
    // No domain from the sandbox: the API host without `api.`.
    assert_eq!(
        req.url,
        "https://49983-i1a2b3c4d5e6f.e2b.test/process.Process/Start"
    );
    assert_eq!(req.header("connect-timeout-ms"), None);
    assert_eq!(req.header("x-access-token"), None);
    assert_eq!(
        start_request_json(req),
        json!({"process": {"cmd": "true"}, "stdin": false})
    );

    // An API URL without `api.` falls back to e2b.app.
    let c = E2bClient::new(
        "http://localhost:3000",
        None,
        KEY,
        ScriptedTransport::new([stream_reply(ok_stream())]),
    );
    block(c.run(&sbx, "true", &[], &[], None, None, 0, 10)).expect("ran");
    assert_eq!(
        c.transport().requests()[0].url,
        "https://49983-i1a2b3c4d5e6f.e2b.app/process.Process/Start"
    );
}

#[test]
fn run_through_a_shared_sandbox_host() {
    let c = shared_client([stream_reply(ok_stream())]);
    run_simple(&c, &sandbox(), None, 100).expect("ran");
    let req = &c.transport().requests()[0];
    assert_eq!(req.url, "http://127.0.0.1:3049/process.Process/Start");
    assert_eq!(req.header("E2b-Sandbox-Id"), Some("i1a2b3c4d5e6f"));
    assert_eq!(req.header("E2b-Sandbox-Port"), Some("49983"));
    assert_eq!(req.header("x-access-token"), Some(TOKEN));
}

#[test]
fn run_refuses_ids_and_domains_that_are_not_host_names() {
    let c = client([]);
    for id in ["", "a.evil.com/x", "a b"] {
        let sbx = Sandbox {
            sandbox_id: id.into(),
            ..sandbox()
        };
        let err = run_simple(&c, &sbx, None, 10).expect_err("bad id");
        assert!(matches!(err, E2bError::NotFound(_)), "{err:?}");
    }
    let sbx = Sandbox {
        domain: Some("evil.com/x?".into()),
        ..sandbox()
    };
    assert!(matches!(
        run_simple(&c, &sbx, None, 10),
        Err(E2bError::Decode(_))
    ));
    assert!(c.transport().requests().is_empty());
}

// -------------------------------------------------------------------------------------
// envd: stdin
// -------------------------------------------------------------------------------------

/// Runs the wrapper's logic on its argv: checks the shape and returns (decoded stdin,
/// program + args).
fn unwrap_stdin(body: &Value) -> (Vec<u8>, Vec<String>) {
    assert_eq!(body["process"]["cmd"], json!("/bin/bash"));
    assert_eq!(body["stdin"], json!(false));
    let args: Vec<String> = body["process"]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_owned())
        .collect();
    assert_eq!(args[0], "-c");
    assert_eq!(args[1], STDIN_SCRIPT);
    assert_eq!(args[2], STDIN_SCRIPT_NAME);
    let n: usize = args[3].parse().expect("chunk count");
    let chunks = &args[4..4 + n];
    assert!(chunks.iter().all(|c| c.len() <= STDIN_CHUNK_CHARS));
    let decoded = STANDARD.decode(chunks.concat()).expect("base64");
    (decoded, args[4 + n..].to_vec())
}

#[test]
fn stdin_is_piped_in_through_a_fixed_script() {
    let input = b"line 1\n'quotes' \"and\" $(dollars) `ticks`\n\x00\xff binary";
    let c = client([stream_reply(ok_stream())]);
    block(c.run(
        &sandbox(),
        "python3",
        &["-c".into(), "import sys; print(sys.stdin.read())".into()],
        &[("K".into(), "V".into())],
        Some("/work"),
        Some(input),
        1000,
        100,
    ))
    .expect("ran");
    let body = start_request_json(&c.transport().requests()[0]);
    let (decoded, argv) = unwrap_stdin(&body);
    assert_eq!(decoded, input);
    assert_eq!(
        argv,
        ["python3", "-c", "import sys; print(sys.stdin.read())"]
    );
    assert_eq!(body["process"]["envs"], json!({"K": "V"}));
    assert_eq!(body["process"]["cwd"], json!("/work"));
    // The script interpolates nothing from the request.
    assert!(!STDIN_SCRIPT.contains("python3"));
}

#[test]
fn large_stdin_is_split_into_argument_sized_chunks() {
    let input: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let c = client([stream_reply(ok_stream())]);
    block(c.run(
        &sandbox(),
        "wc",
        &["-c".into()],
        &[],
        None,
        Some(&input),
        0,
        10,
    ))
    .expect("ran");
    let body = start_request_json(&c.transport().requests()[0]);
    let (decoded, argv) = unwrap_stdin(&body);
    assert_eq!(decoded, input);
    assert_eq!(argv, ["wc", "-c"]);
    let n: usize = body["process"]["args"][3]
        .as_str()
        .expect("n")
        .parse()
        .expect("n");
    assert_eq!(n, 5, "266,668 base64 characters in 64 KiB chunks");
}

#[test]
fn empty_stdin_is_no_stdin_and_oversized_stdin_is_refused() {
    let c = client([stream_reply(ok_stream())]);
    run_simple(&c, &sandbox(), Some(b""), 10).expect("ran");
    let body = start_request_json(&c.transport().requests()[0]);
    assert_eq!(body["process"]["cmd"], json!("/bin/bash"));
    assert_eq!(body["process"]["args"], json!(["-l", "-c", "echo hi"]));

    let big = vec![0u8; MAX_STDIN_BYTES + 1];
    let err = run_simple(&c, &sandbox(), Some(&big), 10).expect_err("too big");
    assert!(
        matches!(&err, E2bError::Rpc { code, .. } if code == "invalid_argument"),
        "{err:?}"
    );
    assert_eq!(c.transport().requests().len(), 1, "nothing sent");
}

// -------------------------------------------------------------------------------------
// envd: decoding the stream
// -------------------------------------------------------------------------------------

#[test]
fn decodes_exit_codes_and_base64_variants() {
    let body = stream(
        &[
            json!({"start": {"pid": 7}}),
            json!({"data": {"stdout": "aGk"}}),  // unpadded
            json!({"data": {"stdout": "_-8="}}), // URL-safe
            json!({"data": {"stderr": b64(b"e\xffrr")}}), // binary
            json!({"end": {"exitCode": -1, "exited": false, "status": "signal: killed"}}),
        ],
        &json!({}),
    );
    let c = client([stream_reply(body)]);
    let out = run_simple(&c, &sandbox(), None, 100).expect("ran");
    assert_eq!(out.exit_code, -1);
    assert_eq!(out.stdout, b"hi\xff\xef");
    assert_eq!(out.stderr, b"e\xffrr");
    assert_eq!(out.error, None);

    for (end, code) in [
        (json!({"exitCode": 3, "exited": true}), 3),
        (json!({"exitCode": "42"}), 42),
        (json!({"exit_code": 5}), 5),
        (json!({}), 0),
    ] {
        let body = stream(
            &[json!({"start": {"pid": 1}}), json!({ "end": end })],
            &json!({}),
        );
        let c = client([stream_reply(body)]);
        assert_eq!(
            run_simple(&c, &sandbox(), None, 10).expect("ran").exit_code,
            code
        );
    }
}

#[test]
fn output_beyond_the_limit_is_dropped_and_reported() {
    let body = stream(
        &[
            json!({"start": {"pid": 1}}),
            json!({"data": {"stdout": b64(b"0123456789")}}),
            json!({"data": {"stdout": b64(b"abcdef")}}),
            json!({"data": {"stderr": b64(b"short")}}),
            json!({"end": {"exitCode": 0, "exited": true}}),
        ],
        &json!({}),
    );
    let c = client([stream_reply(body.clone())]);
    let out = run_simple(&c, &sandbox(), None, 12).expect("ran");
    assert_eq!(out.stdout, b"0123456789ab");
    assert_eq!(out.stderr, b"short");
    assert!(out.truncated);

    let c = client([stream_reply(body)]);
    let out = run_simple(&c, &sandbox(), None, 16).expect("ran");
    assert_eq!(out.stdout, b"0123456789abcdef");
    assert!(!out.truncated, "exactly at the limit is not truncated");

    let c = client([stream_reply(ok_stream())]);
    let out = run_simple(&c, &sandbox(), None, 0).expect("ran");
    assert!(out.stdout.is_empty() && out.stderr.is_empty() && out.truncated);
}

#[test]
fn error_trailer_after_start_keeps_the_output() {
    let body = stream(
        &[
            json!({"start": {"pid": 9}}),
            json!({"data": {"stdout": b64(b"partial")}}),
        ],
        &json!({"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}}),
    );
    let c = client([stream_reply(body)]);
    let out = run_simple(&c, &sandbox(), None, 100).expect("partial result");
    assert_eq!(out.exit_code, -1);
    assert_eq!(out.stdout, b"partial");
    assert_eq!(
        out.error.as_deref(),
        Some("deadline_exceeded: context deadline exceeded")
    );
}

#[test]
fn error_trailer_before_start_is_an_rpc_error() {
    let body = stream(
        &[],
        &json!({"error": {"code": "invalid_argument", "message": "cwd '/nope' does not exist"}, "metadata": {}}),
    );
    let c = client([stream_reply(body)]);
    let err = run_simple(&c, &sandbox(), None, 100).expect_err("rpc error");
    assert_eq!(
        err,
        E2bError::Rpc {
            code: "invalid_argument".into(),
            message: "cwd '/nope' does not exist".into()
        }
    );
    assert!(err.to_string().contains("working directory"), "{err}");
}

#[test]
fn end_event_error_and_cut_streams_are_reported() {
    // The end event carries an error; the trailer is clean.
    let body = stream(
        &[
            json!({"start": {"pid": 1}}),
            json!({"end": {"exitCode": 1, "error": "failed to wait for process"}}),
        ],
        &json!({}),
    );
    let c = client([stream_reply(body)]);
    let out = run_simple(&c, &sandbox(), None, 10).expect("ran");
    assert_eq!(out.exit_code, 1);
    assert_eq!(out.error.as_deref(), Some("failed to wait for process"));

    // Cut off mid-envelope before the end event.
    let mut body = event(json!({"start": {"pid": 1}}));
    body.extend(event(json!({"data": {"stdout": b64(b"so far")}})));
    let full = event(json!({"end": {"exited": true}}));
    body.extend_from_slice(&full[..full.len() - 3]);
    let c = client([stream_reply(body)]);
    let out = run_simple(&c, &sandbox(), None, 10).expect("partial");
    assert_eq!(out.exit_code, -1);
    assert_eq!(out.stdout, b"so far");
    assert!(
        out.error.as_deref().is_some_and(|e| e.contains("cut off")),
        "{out:?}"
    );

    // An end event but no end-of-stream envelope: everything needed arrived.
    let mut body = event(json!({"start": {"pid": 1}}));
    body.extend(event(json!({"end": {"exitCode": 2}})));
    let c = client([stream_reply(body)]);
    let out = run_simple(&c, &sandbox(), None, 10).expect("ran");
    assert_eq!((out.exit_code, out.error), (2, None));

    // Nothing at all.
    let c = client([stream_reply(Vec::new())]);
    let err = run_simple(&c, &sandbox(), None, 10).expect_err("empty");
    assert!(matches!(err, E2bError::Decode(_)), "{err:?}");
}

#[test]
fn malformed_streams_are_decode_errors() {
    let bad_json = {
        let mut b = connect_envelope(0, b"{not json").expect("env");
        b.extend(frame(FLAG_END_STREAM, &json!({})));
        b
    };
    let compressed = connect_envelope(FLAG_COMPRESSED, b"\x1f\x8b").expect("env");
    let bad_b64 = stream(
        &[
            json!({"start": {"pid": 1}}),
            json!({"data": {"stdout": "!!!"}}),
        ],
        &json!({}),
    );
    let bad_code = stream(
        &[
            json!({"start": {"pid": 1}}),
            json!({"end": {"exitCode": "x"}}),
        ],
        &json!({}),
    );
    for body in [bad_json, compressed, bad_b64, bad_code] {
        let c = client([stream_reply(body)]);
        let err = run_simple(&c, &sandbox(), None, 10).expect_err("malformed");
        assert!(matches!(err, E2bError::Decode(_)), "{err:?}");
    }
}

#[test]
fn parse_ignores_unknown_events_and_data_after_the_trailer() {
    let mut body = stream(
        &[
            json!({"start": {"pid": 1}}),
            json!({"data": {"pty": b64(b"tty")}}),
            json!({"somethingNew": {}}),
            json!({}),
            json!({"end": {"exited": true}}),
        ],
        &json!({"metadata": {"x": ["y"]}}),
    );
    body.extend(b"trailing garbage");
    let s = parse_start_stream(&body, 10).expect("parsed");
    assert!(s.started && s.finished);
    assert_eq!(s.exit_code, Some(0));
    assert!(s.stdout.is_empty());
    assert_eq!(s.stream_error, None);
}

// -------------------------------------------------------------------------------------
// envd: HTTP errors and retries
// -------------------------------------------------------------------------------------

#[test]
fn run_is_not_retried_on_5xx_or_transport_failure() {
    let c = client([api_error(502, "upstream error")]);
    let err = run_simple(&c, &sandbox(), None, 10).expect_err("502");
    assert_eq!(
        err,
        E2bError::Api {
            status: 502,
            message: "upstream error".into()
        }
    );
    assert_eq!(c.transport().requests().len(), 1);

    // "capacity" in an envd answer is not a control-plane capacity error: not retried.
    let c = client([api_error(503, "no capacity")]);
    let err = run_simple(&c, &sandbox(), None, 10).expect_err("503");
    assert!(matches!(err, E2bError::Api { status: 503, .. }), "{err:?}");
    assert_eq!(c.transport().requests().len(), 1);

    let c = client([Err("connection reset by peer".into())]);
    let err = run_simple(&c, &sandbox(), None, 10).expect_err("transport");
    assert!(matches!(err, E2bError::Transport(_)), "{err:?}");
    assert_eq!(c.transport().requests().len(), 1);
    assert!(c.transport().sleeps().is_empty());
}

#[test]
fn run_retries_429() {
    let c = client([
        raw(429, &[("retry-after", "1")], b"too many requests"),
        stream_reply(ok_stream()),
    ]);
    let out = run_simple(&c, &sandbox(), None, 10).expect("ran");
    assert_eq!(out.stdout, b"hi\n");
    assert_eq!(c.transport().sleeps(), vec![1000]);
}

#[test]
fn envd_http_errors_are_mapped() {
    let cases: Vec<(Reply, E2bError)> = vec![
        (
            json(
                401,
                json!({"code": "unauthenticated", "message": "invalid access token"}),
            ),
            E2bError::Rpc {
                code: "unauthenticated".into(),
                message: "invalid access token".into(),
            },
        ),
        (
            raw(401, &[], b"Unauthorized"),
            E2bError::Rpc {
                code: "unauthenticated".into(),
                message: "HTTP 401: Unauthorized".into(),
            },
        ),
        (
            json(
                404,
                json!({"sandboxId": "i1a2b3c4d5e6f", "message": "The sandbox was not found"}),
            ),
            E2bError::NotFound("E2B sandbox \"i1a2b3c4d5e6f\"".into()),
        ),
        (
            json(
                409,
                json!({"sandboxId": "i1a2b3c4d5e6f", "message": "The sandbox is paused", "code": 409}),
            ),
            E2bError::Conflict("The sandbox is paused".into()),
        ),
        (
            json(
                401,
                json!({"code": 401, "message": "unauthorized access, please provide a valid access token"}),
            ),
            E2bError::Rpc {
                code: "unauthenticated".into(),
                message: "HTTP 401: unauthorized access, please provide a valid access token"
                    .into(),
            },
        ),
        (
            json(
                415,
                json!({"code": "unknown", "message": "unsupported content-type"}),
            ),
            E2bError::Rpc {
                code: "unknown".into(),
                message: "unsupported content-type".into(),
            },
        ),
    ];
    for (reply, want) in cases {
        let c = client([reply]);
        assert_eq!(
            run_simple(&c, &sandbox(), None, 10).expect_err("error"),
            want
        );
    }
    let err = E2bError::Rpc {
        code: "unauthenticated".into(),
        message: "x".into(),
    };
    assert!(err.to_string().contains("reconnect"), "{err}");
}

// -------------------------------------------------------------------------------------
// Secrets
// -------------------------------------------------------------------------------------

#[test]
fn secrets_never_appear_in_messages_or_debug() {
    let echo = format!("bad key {KEY} / token {TOKEN}");

    // The control plane knows the API key (envd tokens only travel in its answers).
    let mut api_errors = Vec::new();
    let c = client([api_error(400, &echo)]);
    api_errors.push(block(c.connect("sbx1", 60)).expect_err("400"));
    let c = client([api_error(409, &echo)]);
    api_errors.push(block(c.connect("sbx1", 60)).expect_err("409"));
    let c = client((0..3).map(|_| api_error(503, &format!("capacity {echo}"))));
    api_errors.push(block(c.create(&new_sandbox())).expect_err("capacity"));
    let c = client([Err(format!("could not send: {echo}").into())]);
    api_errors.push(block(c.create(&new_sandbox())).expect_err("transport"));
    for err in &api_errors {
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.contains(KEY), "key leaked: {text}");
        }
    }

    // envd requests know both.
    let mut errors = Vec::new();
    let c = client([Err(format!("could not send: {echo}").into())]);
    errors.push(run_simple(&c, &sandbox(), None, 10).expect_err("transport"));
    let c = client([json(
        401,
        json!({"code": "unauthenticated", "message": echo}),
    )]);
    errors.push(run_simple(&c, &sandbox(), None, 10).expect_err("401"));
    let c = client([raw(500, &[], echo.as_bytes())]);
    errors.push(run_simple(&c, &sandbox(), None, 10).expect_err("500"));
    let c = client([stream_reply(stream(
        &[],
        &json!({"error": {"code": "internal", "message": echo}}),
    ))]);
    errors.push(run_simple(&c, &sandbox(), None, 10).expect_err("trailer"));
    let c = client([stream_reply(
        connect_envelope(0, echo.as_bytes()).expect("env"),
    )]);
    errors.push(run_simple(&c, &sandbox(), None, 10).expect_err("decode"));

    for err in &errors {
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.contains(KEY), "key leaked: {text}");
            assert!(!text.contains(TOKEN), "token leaked: {text}");
        }
    }

    let c = client([stream_reply(stream(
        &[json!({"start": {"pid": 1}})],
        &json!({"error": {"code": "internal", "message": echo}}),
    ))]);
    let out = run_simple(&c, &sandbox(), None, 10).expect("partial");
    let e = out.error.expect("an error");
    assert!(!e.contains(KEY) && !e.contains(TOKEN), "{e}");

    for text in [
        format!("{c:?}"),
        format!("{:?}", sandbox()),
        format!(
            "{:?}",
            SandboxDetail {
                envd_access_token: Some(TOKEN.into()),
                ..SandboxDetail::default()
            }
        ),
    ] {
        assert!(!text.contains(KEY) && !text.contains(TOKEN), "{text}");
        assert!(text.contains("[redacted]"), "{text}");
    }
    // The transport's request log redacts the envd token (the header name has "token").
    let req = format!("{:?}", c.transport().requests()[0]);
    assert!(!req.contains(TOKEN), "{req}");
}

#[test]
fn messages_give_advice() {
    assert!(E2bError::Unauthorized.to_string().contains("API key"));
    assert!(E2bError::RateLimited.to_string().contains("429"));
    assert!(
        E2bError::Api {
            status: 400,
            message: "m".into()
        }
        .to_string()
        .ends_with(": m")
    );
    assert!(
        E2bError::Rpc {
            code: "unavailable".into(),
            message: "m".into()
        }
        .to_string()
        .contains("paused")
    );
}

//! The Worker itself (wasm32 only): routes, MCP over Streamable HTTP for both eras with the
//! shared dispatcher, the tool host that forwards to executors, and the per-team Durable
//! Object (`Team`) holding the inventory, placement, sessions and the reaping alarm.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shared::CallToolResult;
use shared::catalogue::{DASHBOARD_URI, EXEC_TOOL, ToolNames, usage_text};
use shared::executor_api::{ApiError, DEFAULT_AUDIENCE, ErrorCode};
use shared::ids::slug_from_random;
use shared::lifecycle::{Existing, check_attach, visible_to};
use shared::mcp::{
    CallContext, Dispatcher, Era, Incoming, ServerConfig, ToolHost, check_modern_meta, codes,
    error_response, negotiate, parse_message, success_response,
};
use shared::op::{Op, OpHandler};
use shared::providers::{HttpRequest, HttpResponse, HttpTransport};
use shared::result::{operation_error, structured_result};
use shared::transport::{check_modern_headers, check_stateless_version, modern_status};
use shared::validate::ToolCall;
use worker::{
    Context, Date, DurableObject, Env, Fetch, Headers, Method, Request, RequestInit, Response,
    Result, SqlStorageValue, State, durable_object, event,
};

use crate::auth::{Auth, Caller, Settings};
use crate::cloud::{self, Cloud};
use crate::error::GatewayError;
use crate::exec_token;
use shared::providers::computers::e2b::E2bComputers;
use shared::providers::computers::fly::FlyComputers;

const TEAM_BINDING: &str = "TEAM";
const DEFAULT_IDLE_SECS: u64 = 300;

/// One configured executor.
#[derive(Debug, Clone, Deserialize)]
struct ExecutorCfg {
    name: String,
    url: String,
    /// What it can run computers on (default: docker).
    #[serde(default = "docker_only")]
    backends: Vec<String>,
}

fn docker_only() -> Vec<String> {
    vec!["docker".into()]
}

/// A provider the Worker talks to itself: configured, not configured, or misconfigured.
type CloudSlot<C> = std::result::Result<Option<Cloud<C>>, String>;

/// What every request needs, read from the environment.
struct Gateway {
    auth: std::result::Result<Auth, String>,
    executors: Vec<ExecutorCfg>,
    /// Fly Machines and E2B, reached directly (`cloud`).
    fly: CloudSlot<FlyComputers<FetchTransport>>,
    e2b: CloudSlot<E2bComputers<FetchTransport>>,
    /// Where new computers go (`PLACEMENT`), or why that cannot be decided.
    placement: std::result::Result<String, String>,
    executor_secret: String,
    executor_audience: String,
    /// `SESSION_TIMEOUT_SECS`, in ms.
    idle_ms: u64,
    dispatcher: Dispatcher,
}

fn var(env: &Env, name: &str) -> Option<String> {
    env.var(name)
        .ok()
        .map(|v| v.to_string())
        .or_else(|| env.secret(name).ok().map(|v| v.to_string()))
        .filter(|v| !v.trim().is_empty())
}

fn now_ms() -> u64 {
    Date::now().as_millis()
}

impl Gateway {
    fn from_env(env: &Env) -> Self {
        let settings = Settings {
            static_token: var(env, "STATIC_TOKEN"),
            static_team: var(env, "STATIC_TEAM"),
            hs256_secret: var(env, "JWT_HS256_SECRET"),
            jwks: var(env, "JWT_JWKS"),
            issuer: var(env, "JWT_ISSUER"),
            audience: var(env, "JWT_AUDIENCE"),
            algorithms: var(env, "JWT_ALGORITHMS"),
            team_claim: var(env, "TEAM_CLAIM"),
            allow_unauthenticated_dev: var(env, "ALLOW_UNAUTHENTICATED_DEV").as_deref()
                == Some("true"),
        };
        let executors: Vec<ExecutorCfg> = var(env, "EXECUTORS")
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        let read = |name: &str| var(env, name);
        let fly = cloud::fly_cfg(read).map(|c| c.map(|c| cloud::fly(&c, FetchTransport)));
        let e2b = cloud::e2b_cfg(read).map(|c| c.map(|c| cloud::e2b(&c, FetchTransport)));
        let offers: Vec<(&str, &[String])> = executors
            .iter()
            .map(|e| (e.name.as_str(), e.backends.as_slice()))
            .collect();
        let placement = cloud::placement(
            var(env, "PLACEMENT").as_deref(),
            &offers,
            matches!(fly, Ok(Some(_))),
            matches!(e2b, Ok(Some(_))),
        );
        let what = match placement.as_deref() {
            Ok(cloud::FLY) => "a Fly Machine",
            Ok(cloud::E2B) => "an E2B sandbox",
            _ => "a container on a self-hosted executor",
        };
        let exec_description = format!(
            "Run a command on an isolated Linux computer ({what}) and get its output. {}",
            usage_text(cloud::DEFAULT_TIMEOUT_SECS, cloud::OUTPUT_LIMIT as u64)
        );
        Self {
            auth: Auth::new(&settings).map_err(|e| e.to_string()),
            executors,
            fly,
            e2b,
            placement,
            executor_secret: var(env, "EXECUTOR_SECRET").unwrap_or_default(),
            executor_audience: var(env, "EXECUTOR_AUDIENCE")
                .unwrap_or_else(|| DEFAULT_AUDIENCE.into()),
            idle_ms: var(env, "SESSION_TIMEOUT_SECS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_IDLE_SECS)
                * 1000,
            dispatcher: Dispatcher::new(ServerConfig {
                name: "mcp-sandbox-computer-gateway".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                names: ToolNames::new(EXEC_TOOL, true),
                exec_description,
                instructions: Some(
                    "Each computer is an isolated Linux machine with a stable id in your team. Run commands with the exec tool."
                        .into(),
                ),
                dashboard_html: Some(shared::dashboard::HTML.into()),
            }),
        }
    }

    fn executor(&self, name: &str) -> Option<&ExecutorCfg> {
        self.executors.iter().find(|e| e.name == name)
    }

    /// Why `place` cannot take computers now (a provider without valid configuration).
    fn unusable(&self, place: &str) -> Option<GatewayError> {
        match place {
            cloud::FLY => slot(&self.fly, place).err(),
            cloud::E2B => slot(&self.e2b, place).err(),
            _ => None,
        }
    }

    /// Does one operation where `place` says: on a provider directly, or through the
    /// executor API of the executor of that name. Failures keep their codes.
    async fn op(
        &self,
        place: &str,
        team: &str,
        op: Op,
    ) -> std::result::Result<Value, GatewayError> {
        let answer = match place {
            cloud::FLY => slot(&self.fly, place)?.handle(team, op).await,
            cloud::E2B => slot(&self.e2b, place)?.handle(team, op).await,
            _ => return self.call(place, team, &op).await,
        };
        answer.map_err(GatewayError::Api)
    }

    /// Sends `op` to an executor for `team`: the success body, or the executor's error.
    async fn call(
        &self,
        executor: &str,
        team: &str,
        op: &Op,
    ) -> std::result::Result<Value, GatewayError> {
        let ex = self.executor(executor).ok_or_else(|| {
            GatewayError::Config(format!(
                "executor {executor:?} is not configured on this gateway"
            ))
        })?;
        let token = exec_token::token(
            &self.executor_secret,
            &self.executor_audience,
            team,
            now_ms() / 1000,
        )
        .map_err(GatewayError::Config)?;
        let request = op.encode();
        let transport = |e: worker::Error| GatewayError::Transport(e.to_string());
        let headers = Headers::new();
        headers
            .set("content-type", "application/json")
            .map_err(transport)?;
        headers
            .set("authorization", &format!("Bearer {token}"))
            .map_err(transport)?;
        let mut init = RequestInit::new();
        init.with_method(Method::from(request.method.to_owned()))
            .with_headers(headers);
        if let Some(b) = &request.body {
            init.with_body(Some(b.to_string().into()));
        }
        let url = format!(
            "{}{}{}",
            ex.url.trim_end_matches('/'),
            shared::executor_api::PREFIX,
            request.path
        );
        let req = Request::new_with_init(&url, &init).map_err(transport)?;
        let mut resp = Fetch::Request(req).send().await.map_err(|e| {
            GatewayError::Api(ApiError::new(
                ErrorCode::Engine,
                format!("executor {executor:?} unreachable: {e}"),
            ))
        })?;
        let status = resp.status_code();
        let text = resp.text().await.map_err(transport)?;
        if status == 200 {
            return serde_json::from_str(&text)
                .map_err(|e| GatewayError::Transport(format!("executor answer: {e}")));
        }
        Err(GatewayError::Api(
            serde_json::from_str::<ApiError>(&text).unwrap_or_else(|_| {
                ApiError::new(
                    ErrorCode::Engine,
                    format!("executor {executor:?} answered {status}"),
                )
            }),
        ))
    }
}

/// The provider of a slot, or what to set to configure it.
fn slot<'a, C>(
    s: &'a CloudSlot<C>,
    place: &str,
) -> std::result::Result<&'a Cloud<C>, GatewayError> {
    match s {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(GatewayError::Config(format!(
            "{place} is not configured on this gateway ({} as Worker secrets/vars)",
            if place == cloud::FLY {
                "set FLY_API_TOKEN and FLY_APP_NAME"
            } else {
                "set E2B_API_KEY"
            }
        ))),
        Err(e) => Err(GatewayError::Config(e.clone())),
    }
}

/// `fetch` as the provider clients' transport.
struct FetchTransport;

impl HttpTransport for FetchTransport {
    async fn send(&self, req: HttpRequest) -> std::result::Result<HttpResponse, String> {
        let headers = Headers::new();
        for (k, v) in &req.headers {
            headers.set(k, v).map_err(|e| e.to_string())?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::from(req.method.to_owned()))
            .with_headers(headers);
        if let Some(body) = &req.body {
            init.with_body(Some(
                worker::js_sys::Uint8Array::from(body.as_slice()).into(),
            ));
        }
        let request = Request::new_with_init(&req.url, &init).map_err(|e| e.to_string())?;
        let mut resp = Fetch::Request(request)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status_code();
        let headers = resp.headers().entries().collect();
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    async fn sleep(&self, millis: u64) {
        worker::Delay::from(std::time::Duration::from_millis(millis)).await;
    }

    fn now_ms(&self) -> u64 {
        now_ms()
    }
}

/// (team, computer id, owner).
type PlacementKey = (String, String, String);

thread_local! {
    static GATEWAY: RefCell<Option<Rc<Gateway>>> = const { RefCell::new(None) };
    /// (team, id, owner) → where the computer lives, until a deadline (ms). Saves the
    /// Durable Object round trip on warm execs. Kept short (idle/4, at most 60 s) because
    /// another isolate may delete the computer meanwhile.
    static PLACEMENT: RefCell<HashMap<PlacementKey, (Record, u64)>> = RefCell::new(HashMap::new());
    /// (team, id) → when this isolate last told the DO about a use (ms).
    static TOUCHED: RefCell<HashMap<(String, String), u64>> = RefCell::new(HashMap::new());
}

fn cached_placement(team: &str, id: &str, owner: &str, temporary: Option<bool>) -> Option<Record> {
    let key = (team.to_owned(), id.to_owned(), owner.to_owned());
    PLACEMENT.with(|p| {
        p.borrow()
            .get(&key)
            .filter(|(r, until)| *until > now_ms() && temporary.is_none_or(|t| t == r.temporary))
            .map(|(r, _)| r.clone())
    })
}

fn cache_placement(team: &str, id: &str, owner: &str, r: &Record, ttl_ms: u64) {
    let key = (team.to_owned(), id.to_owned(), owner.to_owned());
    let until = now_ms() + ttl_ms.min(60_000);
    PLACEMENT.with(|p| p.borrow_mut().insert(key, (r.clone(), until)));
}

fn forget_cached(team: &str, id: &str) {
    PLACEMENT.with(|p| {
        p.borrow_mut()
            .retain(|(t, i, _), _| !(t == team && i == id))
    });
    TOUCHED.with(|t| t.borrow_mut().remove(&(team.to_owned(), id.to_owned())));
}

/// Is it time to record a use of (team, id) in the DO? Marks it done if so.
fn touch_due(team: &str, id: &str, every_ms: u64) -> bool {
    let now = now_ms();
    TOUCHED.with(|t| {
        let mut t = t.borrow_mut();
        let key = (team.to_owned(), id.to_owned());
        match t.get(&key) {
            Some(last) if now < last + every_ms.min(30_000) => false,
            _ => {
                t.insert(key, now);
                true
            }
        }
    })
}

fn gateway(env: &Env) -> Rc<Gateway> {
    GATEWAY.with(|g| {
        g.borrow_mut()
            .get_or_insert_with(|| Rc::new(Gateway::from_env(env)))
            .clone()
    })
}

fn random_hex() -> String {
    let mut buf = [0u8; 16];
    let _ = getrandom::fill(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let _ = getrandom::fill(&mut buf);
    u64::from_le_bytes(buf)
}

fn json_response(status: u16, body: &Value) -> Result<Response> {
    Ok(Response::from_json(body)?.with_status(status))
}

// ---------------------------------------------------------------- team Durable Object calls

/// One team's Durable Object.
async fn team_call(
    env: &Env,
    team: &str,
    path: &str,
    body: &Value,
) -> std::result::Result<Value, GatewayError> {
    let transport = |e: worker::Error| GatewayError::Transport(e.to_string());
    let stub = env
        .durable_object(TEAM_BINDING)
        .and_then(|ns| ns.id_from_name(team)?.get_stub())
        .map_err(transport)?;
    // The object learns its team's name from every call (its id is a one-way hash of it).
    let mut body = body.clone();
    body["team"] = json!(team);
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(body.to_string().into()));
    let req = Request::new_with_init(&format!("https://team.internal{path}"), &init)
        .map_err(transport)?;
    let mut resp = stub.fetch_with_request(req).await.map_err(transport)?;
    let status = resp.status_code();
    let v: Value = resp.json().await.map_err(transport)?;
    if status == 200 {
        Ok(v)
    } else {
        Err(GatewayError::Inventory {
            status,
            message: v["error"].as_str().unwrap_or("inventory error").to_owned(),
        })
    }
}

// ---------------------------------------------------------------- the tool host

struct Host {
    gw: Rc<Gateway>,
    env: Env,
    caller: Caller,
    /// `session:<sid>` (legacy) or `user:<sub>` (stateless): owner of temporaries.
    owner: String,
    session: Option<String>,
    default: RefCell<Option<String>>,
}

/// A record of the team's inventory.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct Record {
    id: String,
    executor: String,
    temporary: bool,
}

fn record_of(v: Value) -> std::result::Result<Record, GatewayError> {
    serde_json::from_value(v).map_err(|e| GatewayError::Transport(format!("inventory record: {e}")))
}

impl Host {
    /// Claims `id` for this caller (creating the record if new): where it lives.
    async fn claim(
        &self,
        id: &str,
        temporary: Option<bool>,
    ) -> std::result::Result<Record, GatewayError> {
        // New computers go where PLACEMENT says; a computer then stays where it was made
        // (its record names the executor or provider).
        let executor = self.gw.placement.clone().map_err(GatewayError::Config)?;
        // A provider without (valid) credentials: say so before recording anything.
        if let Some(e) = self.gw.unusable(&executor) {
            return Err(e);
        }
        let v = team_call(
            &self.env,
            &self.caller.team,
            "/claim",
            &json!({"id": id, "temporary": temporary, "owner": self.owner, "executor": executor}),
        )
        .await?;
        record_of(v)
    }

    async fn visible(&self, id: &str) -> std::result::Result<Record, GatewayError> {
        let v = team_call(
            &self.env,
            &self.caller.team,
            "/get",
            &json!({"id": id, "owner": self.owner}),
        )
        .await?;
        record_of(v)
    }

    /// Restart, factory reset or delete, where the computer lives.
    async fn on_computer(&self, op: Op) -> std::result::Result<(Record, Value), GatewayError> {
        let id = op.computer_id().unwrap_or_default().to_owned();
        let rec = self.visible(&id).await?;
        let v = self.gw.op(&rec.executor, &self.caller.team, op).await?;
        Ok((rec, v))
    }

    fn manage(&self) -> std::result::Result<(), GatewayError> {
        if self.caller.can_manage {
            Ok(())
        } else {
            Err(GatewayError::Scope {
                action: "manage computers",
                scope: "manage",
            })
        }
    }

    async fn run(&self, call: ToolCall) -> std::result::Result<Value, GatewayError> {
        let team = self.caller.team.clone();
        match call {
            ToolCall::Exec(req) => {
                if !self.caller.can_exec {
                    return Err(GatewayError::Scope {
                        action: "run commands",
                        scope: "exec",
                    });
                }
                let id = match (&req.computer_id, self.default.borrow().clone()) {
                    (Some(id), _) => id.clone(),
                    (None, Some(d)) if req.temporary != Some(false) => d,
                    (None, _) => slug_from_random(random_u64()),
                };
                let rec = match cached_placement(&team, &id, &self.owner, req.temporary) {
                    Some(r) => r,
                    None => {
                        let r = self.claim(&id, req.temporary).await?;
                        cache_placement(&team, &id, &self.owner, &r, self.gw.idle_ms / 4);
                        r
                    }
                };
                if req.computer_id.is_none() && rec.temporary && self.default.borrow().is_none() {
                    *self.default.borrow_mut() = Some(id.clone());
                    if let Some(sid) = &self.session {
                        team_call(
                            &self.env,
                            &team,
                            "/session/default",
                            &json!({"sid": sid, "id": id}),
                        )
                        .await?;
                    }
                }
                let mut req = req;
                req.temporary = Some(rec.temporary);
                let v = self.gw.op(&rec.executor, &team, Op::exec(&id, req)).await?;
                // Last use, at most every idle/4 per isolate: the warm path skips the DO.
                if touch_due(&team, &id, self.gw.idle_ms / 4) {
                    let _ = team_call(&self.env, &team, "/touch", &json!({"id": id})).await;
                }
                Ok(v)
            }
            ToolCall::List | ToolCall::Dashboard => {
                let v = team_call(&self.env, &team, "/list", &json!({"owner": self.owner})).await?;
                let records: Vec<Record> = serde_json::from_value(v["computers"].clone())
                    .map_err(|e| GatewayError::Transport(format!("inventory list: {e}")))?;
                let mut places: Vec<String> = records.iter().map(|r| r.executor.clone()).collect();
                places.sort();
                places.dedup();
                let mut items = Vec::new();
                for place in places {
                    let listed = self.gw.op(&place, &team, Op::List).await?;
                    for item in listed["computers"].as_array().cloned().unwrap_or_default() {
                        let id = item["computer_id"].as_str().unwrap_or_default();
                        // The place shows the team's computers; the DO says which of them
                        // this caller may see (its own temporaries, every permanent one).
                        if records.iter().any(|r| r.id == id && r.executor == place) {
                            items.push(item);
                        }
                    }
                }
                items.sort_by(|a, b| a["computer_id"].as_str().cmp(&b["computer_id"].as_str()));
                let n = items.len();
                Ok(json!({"computers": items, "count": n}))
            }
            ToolCall::Create {
                computer_id,
                temporary,
            } => {
                self.manage()?;
                let id = computer_id.unwrap_or_else(|| slug_from_random(random_u64()));
                let rec = self.claim(&id, temporary).await?;
                let op = Op::Create {
                    computer_id: id,
                    temporary: rec.temporary,
                };
                self.gw.op(&rec.executor, &team, op).await
            }
            ToolCall::Restart { computer_id } => {
                self.manage()?;
                Ok(self.on_computer(Op::Restart { computer_id }).await?.1)
            }
            ToolCall::FactoryReset { computer_id } => {
                self.manage()?;
                Ok(self.on_computer(Op::FactoryReset { computer_id }).await?.1)
            }
            ToolCall::Delete { computer_id } => {
                self.manage()?;
                let id = computer_id.clone();
                let v = match self.on_computer(Op::Delete { computer_id }).await {
                    Ok((_, v)) => v,
                    // Gone at its place already (the DO still had it): forget it all the same.
                    Err(GatewayError::Api(e)) if e.error.code == ErrorCode::NotFound => {
                        json!({"ok": true, "computer_id": id, "deleted": true})
                    }
                    Err(e) => return Err(e),
                };
                // The DO forgets it and clears every session default naming it, so the next
                // call without an id makes a new default (as on the local server).
                team_call(&self.env, &team, "/forget", &json!({"id": id})).await?;
                forget_cached(&team, &id);
                if self.default.borrow().as_deref() == Some(id.as_str()) {
                    *self.default.borrow_mut() = None;
                }
                Ok(v)
            }
        }
    }
}

impl ToolHost for Host {
    async fn call_tool(&self, call: ToolCall, _ctx: &CallContext) -> CallToolResult {
        match self.run(call).await {
            Ok(v) => structured_result(v),
            Err(e) => operation_error(&e.to_string()),
        }
    }
}

// ---------------------------------------------------------------- HTTP routes

fn unauthorized(origin: &str, why: &str) -> Result<Response> {
    let r = json_response(401, &json!({"error": "unauthorized", "detail": why}))?;
    r.headers().set(
        "www-authenticate",
        &format!("Bearer resource_metadata=\"{origin}/.well-known/oauth-protected-resource\""),
    )?;
    Ok(r)
}

#[event(fetch)]
async fn fetch(mut req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let url = req.url()?;
    let origin = url.origin().ascii_serialization();
    let gw = gateway(&env);
    match (req.method(), url.path()) {
        (Method::Get, "/healthz") => json_response(200, &json!({"status": "ok"})),
        (Method::Get, "/") => json_response(
            200,
            &json!({
                "name": "mcp-sandbox-computer-gateway",
                "version": env!("CARGO_PKG_VERSION"),
                "mcp_endpoint": "/mcp",
                "health": "/healthz",
                "dashboard_resource": DASHBOARD_URI,
                "dashboard": "/dashboard",
            }),
        ),
        (Method::Get, "/dashboard") => {
            let r = Response::from_html(shared::dashboard::HTML)?;
            r.headers()
                .set("content-security-policy", &shared::dashboard::web_csp())?;
            r.headers().set("x-content-type-options", "nosniff")?;
            r.headers().set("referrer-policy", "no-referrer")?;
            Ok(r)
        }
        (Method::Get, "/.well-known/oauth-protected-resource") => {
            let issuer = var(&env, "JWT_ISSUER");
            json_response(
                200,
                &json!({
                    "resource": format!("{origin}/mcp"),
                    "authorization_servers": issuer.into_iter().collect::<Vec<_>>(),
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["exec", "manage"],
                }),
            )
        }
        (Method::Get, "/__bench/jwt") if var(&env, "BENCH_ROUTES").as_deref() == Some("true") => {
            json_response(200, &jwt_bench(&url))
        }
        (Method::Post, "/mcp") | (Method::Delete, "/mcp") => {
            if let Err(why) = check_host_origin(&env, &url, req.headers().get("origin")?.as_deref())
            {
                return json_response(403, &json!({"error": why}));
            }
            let auth = match &gw.auth {
                Ok(a) => a,
                Err(e) => {
                    return json_response(
                        500,
                        &json!({"error": format!("gateway configuration: {e}")}),
                    );
                }
            };
            let authorization = req.headers().get("authorization")?;
            let caller = match auth.check(authorization.as_deref(), now_ms() / 1000) {
                Ok(c) => c,
                Err(e) => return unauthorized(&origin, &e.to_string()),
            };
            if req.method() == Method::Delete {
                return mcp_delete(&req, &env, &caller).await;
            }
            let body = req.bytes().await?;
            mcp_post(&req, body, &env, gw, caller).await
        }
        (_, "/mcp") => json_response(
            405,
            &json!({"error": "use POST (or DELETE to end a session) on /mcp"}),
        ),
        _ => json_response(404, &json!({"error": "not found"})),
    }
}

/// Benchmark only (`BENCH_ROUTES=true`): runs `n` verifications of a caller's HS256 token
/// (`op=verify`), `n` executor-token signatures (`op=sign`) or `n` cached executor tokens
/// (`op=cached`) with synthetic keys. The Worker's clock does not move during synchronous
/// work, so the benchmark times the request from outside and compares with `n=0`.
fn jwt_bench(url: &worker::Url) -> Value {
    let param = |k: &str| {
        url.query_pairs()
            .find(|(q, _)| q == k)
            .map(|(_, v)| v.into_owned())
    };
    let n: u32 = param("n")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
        .min(100_000);
    let op = param("op").unwrap_or_default();
    let secret = "bench-only-secret-0123456789abcdef0123456789";
    let now = now_ms() / 1000;
    let Ok(auth) = Auth::new(&Settings {
        hs256_secret: Some(secret.into()),
        issuer: Some("bench".into()),
        audience: Some("bench".into()),
        ..Default::default()
    }) else {
        return json!({"error": "bench auth"});
    };
    let claims = json!({"iss": "bench", "aud": "bench", "sub": "u", "team": "t", "exp": now + 60});
    let token = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes())
        .and_then(|k| jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &k));
    let Ok(token) = token else {
        return json!({"error": "bench token"});
    };
    let header = format!("Bearer {token}");
    let mut ok = 0u32;
    for i in 0..n {
        ok += u32::from(match op.as_str() {
            "verify" => auth.check(Some(&header), now).is_ok(),
            "sign" => exec_token::sign(secret, "bench", &format!("t{i}"), now).is_ok(),
            "cached" => exec_token::token(secret, "bench", "cached", now).is_ok(),
            _ => false,
        });
    }
    json!({"op": op, "n": n, "ok": ok})
}

/// DNS-rebinding and cross-site protection: the request's host, and its `Origin` when a
/// browser sends one, must be one of `PUBLIC_ORIGINS` (comma-separated, e.g.
/// `https://mcp.example.com`); with none configured only loopback names are accepted
/// (`wrangler dev`).
fn check_host_origin(
    env: &Env,
    url: &worker::Url,
    origin: Option<&str>,
) -> std::result::Result<(), String> {
    let allowed: Vec<String> = var(env, "PUBLIC_ORIGINS")
        .map(|v| {
            v.split(',')
                .map(|o| o.trim().trim_end_matches('/').to_owned())
                .filter(|o| !o.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let loopback = |host: &str| {
        let h = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        h == "localhost" || h.ends_with(".localhost") || h == "::1" || h.starts_with("127.")
    };
    let ok = |candidate: &worker::Url| {
        if allowed.is_empty() {
            candidate.host_str().is_some_and(loopback)
        } else {
            allowed
                .iter()
                .any(|a| *a == candidate.origin().ascii_serialization())
        }
    };
    if !ok(url) {
        return Err(format!(
            "host {:?} is not served here: add its origin to PUBLIC_ORIGINS",
            url.host_str().unwrap_or_default()
        ));
    }
    if let Some(o) = origin.filter(|o| *o != "null") {
        match worker::Url::parse(o) {
            Ok(u) if ok(&u) => {}
            _ => {
                return Err(format!(
                    "origin {o:?} is not allowed: add it to PUBLIC_ORIGINS"
                ));
            }
        }
    }
    Ok(())
}

async fn mcp_delete(req: &Request, env: &Env, caller: &Caller) -> Result<Response> {
    let Some(sid) = req.headers().get("mcp-session-id")? else {
        return json_response(400, &json!({"error": "DELETE needs Mcp-Session-Id"}));
    };
    match team_call(
        env,
        &caller.team,
        "/session/close",
        &json!({"sid": sid, "subject": caller.subject}),
    )
    .await
    {
        Ok(_) => Ok(Response::empty()?.with_status(204)),
        Err(e) => json_response(
            404,
            &error_response(Value::Null, codes::INVALID_REQUEST, &e.to_string(), None),
        ),
    }
}

async fn mcp_post(
    req: &Request,
    body: Vec<u8>,
    env: &Env,
    gw: Rc<Gateway>,
    caller: Caller,
) -> Result<Response> {
    let msg = match parse_message(&body) {
        Ok(m) => m,
        Err(resp) => return json_response(400, &resp),
    };
    let headers = req.headers();
    let session_id = headers.get("mcp-session-id")?;
    let version_header = headers.get("mcp-protocol-version")?;
    let team = caller.team.clone();

    // ---- legacy: initialize opens a session ----
    if let Incoming::Request { id, method, params } = &msg
        && method == "initialize"
        && version_header.as_deref() != Some(shared::mcp::MODERN_VERSION)
    {
        let requested = params
            .as_ref()
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = negotiate(requested);
        let sid = random_hex();
        if let Err(e) = team_call(
            env,
            &team,
            "/session/open",
            &json!({"sid": sid, "subject": caller.subject, "version": version}),
        )
        .await
        {
            return json_response(
                500,
                &error_response(id.clone(), codes::INTERNAL_ERROR, &e.to_string(), None),
            );
        }
        let r = json_response(
            200,
            &success_response(id.clone(), gw.dispatcher.initialize_result(version)),
        )?;
        r.headers().set("mcp-session-id", &sid)?;
        return Ok(r);
    }

    // ---- legacy: a request inside a session ----
    if let Some(sid) = session_id {
        let session = match team_call(
            env,
            &team,
            "/session/get",
            &json!({"sid": sid, "subject": caller.subject}),
        )
        .await
        {
            Ok(s) => s,
            Err(_) => {
                return json_response(
                    404,
                    &error_response(
                        Value::Null,
                        codes::INVALID_REQUEST,
                        "unknown or expired session: initialize again",
                        None,
                    ),
                );
            }
        };
        return match msg {
            Incoming::Response | Incoming::Notification { .. } => {
                Ok(Response::empty()?.with_status(202))
            }
            Incoming::Request { id, method, params } => {
                let host = Host {
                    gw: gw.clone(),
                    env: env.clone(),
                    caller,
                    owner: format!("session:{sid}"),
                    session: Some(sid),
                    default: RefCell::new(session["default_id"].as_str().map(str::to_owned)),
                };
                let version = session["version"]
                    .as_str()
                    .unwrap_or("2025-11-25")
                    .to_owned();
                let resp = gw
                    .dispatcher
                    .request(&host, &Era::Legacy(version), id, &method, params.as_ref())
                    .await;
                json_response(200, &resp)
            }
        };
    }

    // ---- stateless 2026-07-28 ----
    let id = match &msg {
        Incoming::Request { id, .. } => id.clone(),
        _ => Value::Null,
    };
    if let Err((status, body)) = check_stateless_version(version_header.as_deref(), &id) {
        return json_response(status, &body);
    }
    match msg {
        Incoming::Response | Incoming::Notification { .. } => {
            Ok(Response::empty()?.with_status(202))
        }
        Incoming::Request { id, method, params } => {
            let lookup: Vec<(String, Option<String>)> = ["mcp-method", "mcp-name"]
                .iter()
                .map(|n| (n.to_string(), headers.get(n).ok().flatten()))
                .collect();
            let header = |n: &str| {
                lookup
                    .iter()
                    .find(|(k, _)| k == n)
                    .and_then(|(_, v)| v.as_deref())
            };
            if let Err((status, body)) = check_modern_headers(header, &id, &method, params.as_ref())
            {
                return json_response(status, &body);
            }
            if let Err(body) = check_modern_meta(&id, params.as_ref()) {
                return json_response(400, &body);
            }
            let host = Host {
                gw: gw.clone(),
                env: env.clone(),
                owner: format!("user:{}", caller.subject),
                caller,
                session: None,
                default: RefCell::new(None),
            };
            let resp = gw
                .dispatcher
                .request(&host, &Era::Modern, id, &method, params.as_ref())
                .await;
            json_response(modern_status(&resp), &resp)
        }
    }
}

// ---------------------------------------------------------------- the team Durable Object

/// One team's inventory: computers (placement, owner, temporary, last use) and legacy
/// sessions, in the Durable Object's SQLite storage; its alarm reaps idle temporaries.
#[durable_object]
pub struct Team {
    state: State,
    env: Env,
}

#[derive(Debug, Deserialize)]
struct Row {
    id: String,
    executor: String,
    temporary: i64,
    owner: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SessionRow {
    sid: String,
    subject: String,
    version: String,
    default_id: Option<String>,
}

fn bad(status: u16, message: &str) -> Result<Response> {
    json_response(status, &json!({"error": message}))
}

impl Team {
    fn sql(&self, query: &str, args: Vec<SqlStorageValue>) -> Result<worker::SqlCursor> {
        self.state.storage().sql().exec(query, Some(args))
    }

    fn idle_ms(&self) -> u64 {
        var(&self.env, "SESSION_TIMEOUT_SECS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_IDLE_SECS)
            * 1000
    }

    fn row(&self, id: &str) -> Result<Option<Row>> {
        let rows: Vec<Row> = self
            .sql(
                "SELECT id, executor, temporary, owner FROM computers WHERE id = ?",
                vec![id.into()],
            )?
            .to_array()?;
        Ok(rows.into_iter().next())
    }

    async fn arm(&self) -> Result<()> {
        if self.state.storage().get_alarm().await?.is_none() {
            let every = (self.idle_ms() / 2).clamp(1000, 60_000) as i64;
            self.state.storage().set_alarm(every).await?;
        }
        Ok(())
    }

    fn record(r: &Row) -> Value {
        json!({"id": r.id, "executor": r.executor, "temporary": r.temporary != 0})
    }

    fn existing(r: &Row) -> Existing<'_> {
        Existing {
            computer_id: &r.id,
            temporary: r.temporary != 0,
            owner: r.owner.as_deref(),
        }
    }

    async fn remove_at_executor(&self, team: &str, r: &Row) {
        let gw = gateway(&self.env);
        let op = Op::Delete {
            computer_id: r.id.clone(),
        };
        let _ = gw.op(&r.executor, team, op).await;
    }
}

impl DurableObject for Team {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        let _ = sql.exec(
            "CREATE TABLE IF NOT EXISTS computers (id TEXT PRIMARY KEY, executor TEXT NOT NULL, \
             temporary INTEGER NOT NULL, owner TEXT, last_used INTEGER NOT NULL)",
            None,
        );
        let _ = sql.exec(
            "CREATE TABLE IF NOT EXISTS sessions (sid TEXT PRIMARY KEY, subject TEXT NOT NULL, \
             version TEXT NOT NULL, default_id TEXT, last_seen INTEGER NOT NULL)",
            None,
        );
        let _ = sql.exec(
            "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
            None,
        );
        Self { state, env }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let b: Value = req.json().await.unwrap_or(Value::Null);
        let s = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
        let now = now_ms() as i64;
        if !s("team").is_empty() {
            self.sql(
                "INSERT OR IGNORE INTO meta (k, v) VALUES ('team', ?)",
                vec![s("team").into()],
            )?;
        }
        match req.path().as_str() {
            "/claim" => {
                let (id, owner, executor) = (s("id"), s("owner"), s("executor"));
                let requested = b["temporary"].as_bool();
                if let Some(r) = self.row(&id)? {
                    // The same policy as the local server, in the same words.
                    return match check_attach(&Self::existing(&r), requested, &owner) {
                        Ok(()) => json_response(200, &Self::record(&r)),
                        Err(e) => bad(409, &e.to_string()),
                    };
                }
                let temporary = requested.unwrap_or(true);
                self.sql(
                    "INSERT INTO computers (id, executor, temporary, owner, last_used) VALUES (?, ?, ?, ?, ?)",
                    vec![
                        id.as_str().into(),
                        executor.as_str().into(),
                        i64::from(temporary).into(),
                        if temporary { owner.as_str().into() } else { SqlStorageValue::Null },
                        now.into(),
                    ],
                )?;
                if temporary {
                    self.arm().await?;
                }
                json_response(
                    200,
                    &json!({"id": id, "executor": executor, "temporary": temporary}),
                )
            }
            "/get" => match self.row(&s("id"))? {
                Some(r) if visible_to(&Self::existing(&r), &s("owner")) => {
                    json_response(200, &Self::record(&r))
                }
                _ => bad(
                    404,
                    &format!(
                        "computer {:?} does not exist (or is another session's temporary computer); see computer_list",
                        s("id")
                    ),
                ),
            },
            "/forget" => {
                self.sql("DELETE FROM computers WHERE id = ?", vec![s("id").into()])?;
                self.sql(
                    "UPDATE sessions SET default_id = NULL WHERE default_id = ?",
                    vec![s("id").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/touch" => {
                self.sql(
                    "UPDATE computers SET last_used = ? WHERE id = ?",
                    vec![now.into(), s("id").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/list" => {
                let rows: Vec<Row> = self
                    .sql(
                        "SELECT id, executor, temporary, owner FROM computers ORDER BY id",
                        vec![],
                    )?
                    .to_array()?;
                let owner = s("owner");
                let items: Vec<Value> = rows
                    .iter()
                    .filter(|r| visible_to(&Self::existing(r), &owner))
                    .map(Self::record)
                    .collect();
                json_response(200, &json!({"computers": items}))
            }
            "/session/open" => {
                self.sql(
                    "INSERT INTO sessions (sid, subject, version, default_id, last_seen) VALUES (?, ?, ?, NULL, ?)",
                    vec![s("sid").into(), s("subject").into(), s("version").into(), now.into()],
                )?;
                self.arm().await?;
                json_response(200, &json!({"ok": true}))
            }
            "/session/get" => {
                let rows: Vec<SessionRow> = self
                    .sql(
                        "SELECT sid, subject, version, default_id FROM sessions WHERE sid = ?",
                        vec![s("sid").into()],
                    )?
                    .to_array()?;
                match rows.into_iter().next() {
                    Some(r) if r.subject == s("subject") => {
                        self.sql(
                            "UPDATE sessions SET last_seen = ? WHERE sid = ?",
                            vec![now.into(), r.sid.as_str().into()],
                        )?;
                        json_response(
                            200,
                            &json!({"version": r.version, "default_id": r.default_id}),
                        )
                    }
                    _ => bad(404, "unknown session"),
                }
            }
            "/session/default" => {
                self.sql(
                    "UPDATE sessions SET default_id = ? WHERE sid = ?",
                    vec![s("id").into(), s("sid").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/session/close" => {
                let sid = s("sid");
                let rows: Vec<SessionRow> = self
                    .sql(
                        "SELECT sid, subject, version, default_id FROM sessions WHERE sid = ?",
                        vec![sid.as_str().into()],
                    )?
                    .to_array()?;
                if !rows.iter().any(|r| r.subject == s("subject")) {
                    return bad(404, "unknown session");
                }
                self.close_owner(&format!("session:{sid}")).await?;
                self.sql(
                    "DELETE FROM sessions WHERE sid = ?",
                    vec![sid.as_str().into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            _ => bad(404, "no such inventory route"),
        }
    }

    async fn alarm(&self) -> Result<Response> {
        let now = now_ms() as i64;
        let cutoff = now - self.idle_ms() as i64;
        // Idle sessions end; their temporaries go with them.
        let idle: Vec<SessionRow> = self
            .sql(
                "SELECT sid, subject, version, default_id FROM sessions WHERE last_seen < ?",
                vec![cutoff.into()],
            )?
            .to_array()?;
        for s in idle {
            self.close_owner(&format!("session:{}", s.sid)).await?;
            self.sql(
                "DELETE FROM sessions WHERE sid = ?",
                vec![s.sid.as_str().into()],
            )?;
        }
        // Stateless callers' temporaries go when idle.
        let stale: Vec<Row> = self
            .sql(
                "SELECT id, executor, temporary, owner FROM computers WHERE temporary = 1 AND owner LIKE 'user:%' AND last_used < ?",
                vec![cutoff.into()],
            )?
            .to_array()?;
        let team = self.team()?;
        for r in stale {
            self.remove_at_executor(&team, &r).await;
            self.sql(
                "DELETE FROM computers WHERE id = ?",
                vec![r.id.as_str().into()],
            )?;
        }
        let left: Vec<Row> = self
            .sql(
                "SELECT id, executor, temporary, owner FROM computers WHERE temporary = 1",
                vec![],
            )?
            .to_array()?;
        let sessions: Vec<SessionRow> = self
            .sql(
                "SELECT sid, subject, version, default_id FROM sessions",
                vec![],
            )?
            .to_array()?;
        if !left.is_empty() || !sessions.is_empty() {
            let every = (self.idle_ms() / 2).clamp(1000, 60_000) as i64;
            self.state.storage().set_alarm(every).await?;
        }
        Response::ok("reaped")
    }
}

impl Team {
    /// The team this object belongs to (stored at first use: ids from names are one-way).
    fn team(&self) -> Result<String> {
        #[derive(Deserialize)]
        struct Meta {
            v: String,
        }
        let rows: Vec<Meta> = self
            .sql("SELECT v FROM meta WHERE k = 'team'", vec![])?
            .to_array()?;
        Ok(rows.into_iter().next().map(|m| m.v).unwrap_or_default())
    }

    async fn close_owner(&self, owner: &str) -> Result<()> {
        let rows: Vec<Row> = self
            .sql("SELECT id, executor, temporary, owner FROM computers WHERE temporary = 1 AND owner = ?", vec![owner.into()])?
            .to_array()?;
        let team = self.team()?;
        for r in rows {
            self.remove_at_executor(&team, &r).await;
            self.sql(
                "DELETE FROM computers WHERE id = ?",
                vec![r.id.as_str().into()],
            )?;
        }
        Ok(())
    }
}

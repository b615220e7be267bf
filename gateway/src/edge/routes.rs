//! The Worker's routes: service info, health, the dashboard page, protected-resource
//! metadata, and MCP over Streamable HTTP in both eras with the shared dispatcher.

use super::*;
use shared::transport::Refused;
use shared::transport::route::{self, Call, InSession, Post};
use tracing::Instrument;

/// Largest `/mcp` body: the binary's `--http-max-body` default. Read as a stream and
/// refused once past it, so an oversized body never sits whole in the isolate's 128 MB.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The body of `req`, or the 413 answer once it is over [`MAX_BODY`].
async fn bounded_body(req: &mut Request) -> Result<std::result::Result<Vec<u8>, Response>> {
    use futures_util::StreamExt;
    let too_large = || {
        refusal(
            413,
            &format!(
                "request body over {MAX_BODY} bytes (16 MiB): send less per request (stdin is at most 2 MiB; move files in slices with computer_file_write or stream them with PUT /v1/files)"
            ),
        )
    };
    let declared = req
        .headers()
        .get("content-length")?
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large().map(Err);
    }
    // A declared length within the limit is read in one piece (the runtime holds the body
    // to it); only a body of unknown length is counted as it streams in.
    if declared.is_some() {
        return Ok(Ok(req.bytes().await?));
    }
    // No body at all is an empty one (the route then refuses it as JSON).
    let Ok(mut stream) = req.stream() else {
        return Ok(Ok(Vec::new()));
    };
    let mut body = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > MAX_BODY {
            return too_large().map(Err);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body))
}

// ---------------------------------------------------------------- HTTP routes

/// 401 with the `WWW-Authenticate` challenge; `e`'s detail goes to the log only.
pub(crate) fn unauthorized(origin: &str, e: &crate::auth::AuthError) -> Result<Response> {
    tracing::info!(why = %e, "request refused");
    let detail = e.public();
    let body = ErrorBody {
        error: "unauthorized",
        detail: Some(&detail),
    };
    let r = typed_response(401, &body)?;
    r.headers().set(
        "www-authenticate",
        &format!("Bearer resource_metadata=\"{origin}/.well-known/oauth-protected-resource\""),
    )?;
    Ok(r)
}

/// The caller of `req` by its token, or the answer that refuses it (401, or 500 when the
/// gateway's auth settings are broken).
fn authenticated(
    gw: &Gateway,
    req: &Request,
    origin: &str,
) -> Result<std::result::Result<Caller, Response>> {
    let auth = match &gw.auth {
        Ok(a) => a,
        Err(e) => {
            return refusal(500, &format!("gateway configuration: {e}")).map(Err);
        }
    };
    let authorization = req.headers().get("authorization")?;
    match auth.check(authorization.as_deref(), now_ms() / 1000) {
        Ok(c) => Ok(Ok(c)),
        Err(e) => unauthorized(origin, &e).map(Err),
    }
}

#[event(fetch)]
pub(crate) async fn fetch(mut req: Request, env: Env, _ctx: Context) -> Result<Response> {
    super::log::init(|| var(&env, "LOG_LEVEL"));
    let url = req.url()?;
    // The origin answers name: never a forged Host header (`Origins::public`).
    let origin =
        crate::origins::Origins::parse(var(&env, "PUBLIC_ORIGINS").as_deref()).public(&url);
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
                "tool_groups": gw.dispatcher.config().names.groups().names(),
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
        // Placement counters and executor health, for any valid caller token (per isolate).
        (Method::Get, "/metrics") => {
            if let Err(refused) = authenticated(&gw, &req, &origin)? {
                return Ok(refused);
            }
            let r = Response::ok(gw.metrics_text())?;
            r.headers()
                .set("content-type", "text/plain; version=0.0.4; charset=utf-8")?;
            Ok(r)
        }
        #[cfg(feature = "bench")]
        (Method::Get, "/__bench/jwt") if var(&env, "BENCH_ROUTES").as_deref() == Some("true") => {
            json_response(200, &jwt_bench(&url))
        }
        (Method::Post, "/mcp") | (Method::Delete, "/mcp") => {
            if let Err(why) = crate::origins::Origins::parse(var(&env, "PUBLIC_ORIGINS").as_deref())
                .check(&url, req.headers().get("origin")?.as_deref())
            {
                return refusal(403, &why.to_string());
            }
            let caller = match authenticated(&gw, &req, &origin)? {
                Ok(c) => c,
                Err(refused) => return Ok(refused),
            };
            if req.method() == Method::Delete {
                return mcp_delete(&req, &env, &caller).await;
            }
            let body = match bounded_body(&mut req).await? {
                Ok(b) => b,
                Err(refused) => return Ok(refused),
            };
            mcp_post(&req, body, &env, gw, caller).await
        }
        (_, path) if path.starts_with("/v1/files/") => {
            if let Err(why) = crate::origins::Origins::parse(var(&env, "PUBLIC_ORIGINS").as_deref())
                .check(&url, req.headers().get("origin")?.as_deref())
            {
                return refusal(403, &why.to_string());
            }
            let rest = path.trim_start_matches("/v1/files/").to_owned();
            let query = url.query().map(str::to_owned);
            super::files::files(req, &env, gw, &origin, &rest, query.as_deref()).await
        }
        (method, "/mcp") => {
            let (status, body) = route::method_not_allowed(method.as_ref());
            let r = json_response(status, &body)?;
            r.headers().set("allow", route::ALLOW)?;
            Ok(r)
        }
        _ => refusal(404, "not found"),
    }
}

#[cfg(feature = "bench")]
/// Benchmark builds only (cargo feature `bench`, `scripts/build-gateway --bench`, and
/// `BENCH_ROUTES=true`): runs `n` verifications of a caller's HS256 token
/// (`op=verify`), `n` executor-token signatures (`op=sign`) or `n` cached executor tokens
/// (`op=cached`) with synthetic keys. The Worker's clock does not move during synchronous
/// work, so the benchmark times the request from outside and compares with `n=0`.
pub(crate) fn jwt_bench(url: &worker::Url) -> Value {
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
            "sign" => {
                let team = format!("t{i}");
                let grant = exec_token::Grant {
                    executor: "bench",
                    team: &team,
                    owner: "user:u",
                    scope: "exec",
                };
                exec_token::sign(secret, grant, now).is_ok()
            }
            "cached" => {
                let grant = exec_token::Grant {
                    executor: "bench",
                    team: "cached",
                    owner: "user:u",
                    scope: "exec",
                };
                exec_token::token(secret, grant, now).is_ok()
            }
            _ => false,
        });
    }
    json!({"op": op, "n": n, "ok": ok})
}

/// The request headers `shared::transport::route` reads, copied out of the Worker's.
fn copied_headers(req: &Request) -> Vec<(&'static str, String)> {
    // One Headers object for all of them (each `req.headers()` is a call into JS).
    let headers = req.headers();
    route::Headers::NAMES
        .iter()
        .filter_map(|n| Some((*n, headers.get(n).ok().flatten()?)))
        .collect()
}

fn route_headers<'a>(copied: &'a [(&'static str, String)]) -> route::Headers<'a> {
    route::Headers::from_lookup(|n| {
        copied
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.as_str())
    })
}

fn refused((status, body): Refused) -> Result<Response> {
    rpc_response(status, &body)
}

pub(crate) async fn mcp_delete(req: &Request, env: &Env, caller: &Caller) -> Result<Response> {
    let copied = copied_headers(req);
    let sid = match route::delete(&route_headers(&copied)) {
        Ok(sid) => sid,
        Err(r) => return refused(r),
    };
    let close = inventory::Request::SessionClose {
        sid: sid.to_owned(),
        subject: caller.subject.clone(),
    };
    match team_call::<inventory::Done>(env, &caller.team, close).await {
        Ok(_) => Ok(Response::empty()?.with_status(204)),
        Err(GatewayError::Inventory { status: 404, .. }) => refused(route::unknown_session()),
        Err(e) => rpc_error(500, e.to_string()),
    }
}

/// POST /mcp: `shared::transport::route` decides; the team's DO keeps the sessions.
pub(crate) async fn mcp_post(
    req: &Request,
    body: Vec<u8>,
    env: &Env,
    gw: Rc<Gateway>,
    caller: Caller,
) -> Result<Response> {
    let copied = copied_headers(req);
    let team = caller.team.clone();
    let (call, era, host) = match route::post(&route_headers(&copied), &body) {
        Post::Refuse(r) => return refused(r),
        Post::Accept => return Ok(Response::empty()?.with_status(202)),
        Post::Initialize { id, version } => {
            let sid = random_hex();
            let open = inventory::Request::SessionOpen {
                sid: sid.clone(),
                subject: caller.subject.clone(),
                version: version.to_owned(),
            };
            if let Err(e) = team_call::<inventory::Done>(env, &team, open).await {
                // The team's session caps (the DO decides): 503 until a session ends.
                if let GatewayError::Inventory {
                    status: 503,
                    message,
                } = &e
                {
                    let r = refusal(503, message)?;
                    r.headers()
                        .set("retry-after", &gw.idle_ms.div_ceil(1000).to_string())?;
                    return Ok(r);
                }
                return rpc_response(
                    500,
                    &shared::mcp::Response::error(Some(id), codes::INTERNAL_ERROR, e.to_string()),
                );
            }
            let r = rpc_response(
                200,
                &shared::mcp::Response::success(id, gw.dispatcher.initialize_result(version)),
            )?;
            r.headers().set("mcp-session-id", &sid)?;
            return Ok(r);
        }
        Post::Session { sid, message } => {
            let (host, version) = match session_host(env, &gw, caller, sid).await? {
                Ok(found) => found,
                Err(answer) => return Ok(answer),
            };
            // Each request is its own fetch here: there is no running request of this
            // isolate to cancel, so a cancellation is accepted like any notification.
            let InSession::Call(call) = message else {
                return Ok(Response::empty()?.with_status(202));
            };
            (call, Era::Legacy(version), host)
        }
        Post::SessionBatch { sid, messages } => {
            return session_batch(env, gw, caller, sid, messages).await;
        }
        Post::Stateless(call) => {
            let host = Host {
                gw: gw.clone(),
                env: env.clone(),
                owner: format!("user:{}", caller.subject),
                caller,
                session: None,
                default: RefCell::new(None),
            };
            (call, Era::Modern, host)
        }
    };
    let Call {
        id, method, params, ..
    } = *call;
    let span = tracing::info_span!("mcp", team = %team, method = %method);
    let resp = gw
        .dispatcher
        .request(&host, &era, id, &method, &params)
        .instrument(span)
        .await;
    let status = match era {
        Era::Modern => modern_status(&resp),
        Era::Legacy(_) => 200,
    };
    rpc_response(status, &resp)
}

/// A JSON-RPC batch inside the legacy session `sid` (2025-03-26 sessions only): each
/// request in turn, the responses as one JSON array in the batch's order (202 when it held
/// no request). Each request is its own fetch here, so a cancellation has nothing to stop.
async fn session_batch(
    env: &Env,
    gw: Rc<Gateway>,
    caller: Caller,
    sid: String,
    messages: Vec<std::result::Result<InSession, shared::mcp::Response>>,
) -> Result<Response> {
    let team = caller.team.clone();
    let (host, version) = match session_host(env, &gw, caller, sid).await? {
        Ok(found) => found,
        Err(answer) => return Ok(answer),
    };
    if let Some(r) = route::batch_refused(&version) {
        return refused(r);
    }
    let era = Era::Legacy(version);
    let mut responses = Vec::new();
    for m in messages {
        match m {
            Err(resp) => responses.push(resp),
            Ok(InSession::Call(call)) => {
                let Call {
                    id, method, params, ..
                } = *call;
                let span = tracing::info_span!("mcp", team = %team, method = %method);
                let resp = gw
                    .dispatcher
                    .request(&host, &era, id, &method, &params)
                    .instrument(span)
                    .await;
                responses.push(resp);
            }
            Ok(InSession::Cancel { .. } | InSession::Accept) => {}
        }
    }
    match responses.is_empty() {
        true => Ok(Response::empty()?.with_status(202)),
        false => bytes_response(200, shared::mcp::batch_to_vec(&responses)),
    }
}

/// The tool host of the legacy session `sid` (kept by the team's object) and its revision,
/// or the answer for a session the object does not have (404) or cannot read (500).
async fn session_host(
    env: &Env,
    gw: &Rc<Gateway>,
    caller: Caller,
    sid: String,
) -> Result<std::result::Result<(Host, String), Response>> {
    let get = inventory::Request::SessionGet {
        sid: sid.clone(),
        subject: caller.subject.clone(),
    };
    let session = match team_call::<inventory::Session>(env, &caller.team, get).await {
        Ok(s) => s,
        Err(GatewayError::Inventory { status: 404, .. }) => {
            return refused(route::unknown_session()).map(Err);
        }
        Err(e) => {
            return rpc_error(500, e.to_string()).map(Err);
        }
    };
    let host = Host {
        gw: gw.clone(),
        env: env.clone(),
        caller,
        owner: format!("session:{sid}"),
        session: Some(sid),
        default: RefCell::new(session.default_id),
    };
    Ok(Ok((host, session.version)))
}

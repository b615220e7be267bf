//! MCP over Streamable HTTP at `/mcp`, both protocol eras on one endpoint, plus `/healthz`
//! and `/`.
//!
//! Owns: bearer-token auth (constant-time), Host/Origin checks against DNS rebinding, the
//! legacy sessions (create, expire when idle, DELETE), SSE answers, and cancellation (a
//! `notifications/cancelled` or a dropped connection kills the command). Which era a
//! request is, the 2026-07-28 header rules and every refusal are decided by
//! `shared::transport::route`, as in the Worker. The caps on live sessions are in
//! `http/limits.rs`; connection and body limits are `crate::serve`'s. `GET /metrics` serves
//! `crate::metrics` behind the same token.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use shared::mcp::{Dispatcher, Era, RequestId, codes};
use shared::transport::route::{self, Call, InSession, Post};
use shared::transport::{Refused, constant_time_eq, modern_status};
use tokio::task::{AbortHandle, JoinHandle};

use crate::computers::{Computers, SessionHost};

pub(crate) mod files;
pub mod limits;
mod stream;

pub use limits::SessionCaps;

/// One legacy MCP session.
struct Session {
    host: SessionHost,
    /// Who opened it (`principal`), for `--http-max-sessions-per-principal`.
    principal: String,
    version: String,
    last_seen: Instant,
    inflight: HashMap<RequestId, AbortHandle>,
}

/// Shared state of the HTTP server.
pub struct HttpState {
    pub dispatcher: Arc<Dispatcher>,
    pub computers: Arc<Computers>,
    pub auth_token: Option<String>,
    pub bind: IpAddr,
    pub lifecycle: bool,
    pub session_timeout: Duration,
    /// `--file-limit`: the largest file `/v1/files` streams.
    pub file_limit: u64,
    /// `--http-max-body`: the largest JSON body of the other routes.
    pub max_body: usize,
    /// `--http-max-sessions` and `--http-max-sessions-per-principal`.
    pub session_caps: SessionCaps,
    sessions: Mutex<HashMap<String, Session>>,
}

impl HttpState {
    pub fn new(
        dispatcher: Arc<Dispatcher>,
        computers: Arc<Computers>,
        auth_token: Option<String>,
        bind: IpAddr,
        lifecycle: bool,
        session_timeout: Duration,
    ) -> Self {
        Self {
            dispatcher,
            computers,
            auth_token,
            bind,
            lifecycle,
            session_timeout,
            file_limit: 1 << 30,
            max_body: crate::serve::HttpLimits::default().max_body,
            session_caps: SessionCaps::default(),
            sessions: Mutex::default(),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends sessions idle for longer than the session timeout and reaps idle stateless
    /// temporaries. Called periodically.
    pub async fn expire(&self) {
        let expired: Vec<(String, SessionHost)> = {
            let mut sessions = self.sessions();
            // A finished request whose bookkeeping raced its own end is not in flight.
            for s in sessions.values_mut() {
                s.inflight.retain(|_, h| !h.is_finished());
            }
            let dead: Vec<String> = sessions
                .iter()
                .filter(|(_, s)| {
                    s.last_seen.elapsed() >= self.session_timeout && s.inflight.is_empty()
                })
                .map(|(id, _)| id.clone())
                .collect();
            dead.into_iter()
                .filter_map(|id| sessions.remove(&id).map(|s| (id, s.host)))
                .collect()
        };
        for (id, host) in expired {
            tracing::info!(session = %short(&id), "session expired");
            host.close().await;
        }
        self.computers.reap_idle().await;
    }

    /// Sets `--file-limit`.
    pub fn with_file_limit(mut self, limit: u64) -> Self {
        self.file_limit = limit;
        self
    }

    /// Sets `--http-max-body` and the session caps.
    pub fn with_limits(mut self, max_body: usize, caps: SessionCaps) -> Self {
        self.max_body = max_body;
        self.session_caps = caps;
        self
    }

    /// Ends every session (shutdown).
    pub async fn close_all(&self) {
        let hosts: Vec<SessionHost> = self.sessions().drain().map(|(_, s)| s.host).collect();
        futures_util::future::join_all(hosts.iter().map(|h| h.close())).await;
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

fn json_response(status: StatusCode, body: Value) -> Response {
    bytes_response(status, shared::json::to_vec(&body))
}

/// A JSON-RPC answer (one response, or a batch's array).
fn rpc_response(status: StatusCode, resp: &shared::mcp::Response) -> Response {
    bytes_response(status, resp.to_vec())
}

fn bytes_response(status: StatusCode, json: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], json).into_response()
}

/// Why a request is refused before dispatch; the one place such refusals become replies.
#[derive(Debug)]
pub(crate) enum Refusal {
    Unauthorized,
    Forbidden(&'static str),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Unauthorized => unauthorized(),
            Refusal::Forbidden(why) => forbidden(why),
        }
    }
}

fn unauthorized() -> Response {
    let mut r = json_response(StatusCode::UNAUTHORIZED, json!({"error": "unauthorized"}));
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mcp-sandbox-computer\", error=\"invalid_token\""),
    );
    r
}

fn forbidden(why: &str) -> Response {
    json_response(
        StatusCode::FORBIDDEN,
        json!({"error": format!("forbidden: {why}")}),
    )
}

fn host_of(authority: &str) -> &str {
    let a = authority.trim();
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    a.rsplit_once(':').map(|(h, _)| h).unwrap_or(a)
}

fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

/// DNS-rebinding protection: on a loopback listener only loopback names are served, and a
/// browser Origin must match.
fn check_host_origin(state: &HttpState, headers: &HeaderMap) -> Result<(), Refusal> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(host_of)
        .unwrap_or("");
    if state.bind.is_loopback() && !is_loopback_name(host) {
        return Err(Refusal::Forbidden(
            "Host header is not a loopback name; this server only answers on localhost",
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if origin == "null" {
            return Err(Refusal::Forbidden("opaque Origin"));
        }
        let authority = origin.split_once("://").map(|(_, a)| a).unwrap_or("");
        let origin_host = host_of(authority.split('/').next().unwrap_or(""));
        let same_host = origin_host.eq_ignore_ascii_case(host);
        let ok = if state.bind.is_loopback() {
            is_loopback_name(origin_host)
        } else {
            same_host
        };
        if !ok {
            return Err(Refusal::Forbidden("Origin does not match this server"));
        }
    }
    Ok(())
}

fn check_auth(state: &HttpState, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(token) = &state.auth_token else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(shared::transport::bearer_token)
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        crate::metrics::auth_refused(crate::metrics::Server::Mcp);
        Err(Refusal::Unauthorized)
    }
}

/// The principal of a stateless caller: one static token is one principal.
fn principal(state: &HttpState) -> String {
    if state.auth_token.is_some() {
        "principal:token".into()
    } else {
        "principal:anonymous".into()
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST)
}

/// Aborts the task when the request future is dropped (client went away).
struct AbortOnDrop(AbortHandle);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn run_request(
    task: JoinHandle<shared::mcp::Response>,
    id: RequestId,
) -> shared::mcp::Response {
    let _guard = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(v) => v,
        Err(_) => {
            shared::mcp::Response::error(Some(id), codes::INTERNAL_ERROR, "request cancelled")
        }
    }
}

fn refused((status, body): Refused) -> Response {
    rpc_response(status_code(status), &body)
}

/// The request headers `shared::transport::route` reads.
fn route_headers(headers: &HeaderMap) -> route::Headers<'_> {
    route::Headers::from_lookup(|n| header_str(headers, n))
}

/// POST /mcp: `shared::transport::route` decides; this keeps the sessions and answers.
async fn mcp_post(
    State(state): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = check_host_origin(&state, &headers).and_then(|_| check_auth(&state, &headers)) {
        return r.into_response();
    }
    match route::post(&route_headers(&headers), &body) {
        Post::Refuse(r) => refused(r),
        Post::Accept => StatusCode::ACCEPTED.into_response(),
        Post::Initialize { id, version } => {
            let sid = format!("{:032x}", rand::random::<u128>());
            let host = SessionHost::new(state.computers.clone(), format!("session:{sid}"), false);
            let owner = principal(&state);
            {
                let mut sessions = state.sessions();
                if let Err(full) =
                    state
                        .session_caps
                        .admit(&sessions, &owner, state.session_timeout)
                {
                    return full.into_response();
                }
                sessions.insert(
                    sid.clone(),
                    Session {
                        host,
                        principal: owner,
                        version: version.to_owned(),
                        last_seen: Instant::now(),
                        inflight: HashMap::new(),
                    },
                );
            }
            tracing::info!(session = %short(&sid), version, "session opened");
            let mut r = rpc_response(
                StatusCode::OK,
                &shared::mcp::Response::success(id, state.dispatcher.initialize_result(version)),
            );
            if let Ok(v) = HeaderValue::from_str(&sid) {
                r.headers_mut().insert("mcp-session-id", v);
            }
            r
        }
        Post::Session { sid, message } => in_session(&state, sid, message).await,
        Post::SessionBatch { sid, messages } => in_session_batch(&state, sid, messages).await,
        Post::Stateless(call) => {
            let host = SessionHost::new(state.computers.clone(), principal(&state), true);
            let d = state.dispatcher.clone();
            let Call {
                id,
                method,
                params,
                stream,
            } = *call;
            if stream {
                let (pending, _) = stream::start(host, d, Era::Modern, id, method, params, || {});
                return pending.respond().await;
            }
            let rid = id.clone();
            let task =
                tokio::spawn(
                    async move { d.request(&host, &Era::Modern, rid, &method, &params).await },
                );
            let resp = run_request(task, id).await;
            let status = status_code(modern_status(&resp));
            rpc_response(status, &resp)
        }
    }
}

/// A message inside the legacy session `sid`.
/// The host and revision of the live session `sid`, marked as just used.
fn touch_session(state: &HttpState, sid: &str) -> Option<(SessionHost, String)> {
    let mut sessions = state.sessions();
    let s = sessions.get_mut(sid)?;
    s.last_seen = Instant::now();
    Some((s.host.clone(), s.version.clone()))
}

/// A JSON-RPC batch inside the legacy session `sid` (2025-03-26 sessions only): its
/// requests run concurrently, and their responses come back as one JSON array, in the
/// batch's order (202 when it held no request).
async fn in_session_batch(
    state: &Arc<HttpState>,
    sid: String,
    messages: Vec<Result<InSession, shared::mcp::Response>>,
) -> Response {
    let Some((host, version)) = touch_session(state, &sid) else {
        return refused(route::unknown_session());
    };
    if let Some(r) = route::batch_refused(&version) {
        return refused(r);
    }
    let era = Era::Legacy(version);
    let sid = &sid;
    let answers = messages.into_iter().map(|m| {
        let (host, d, era) = (host.clone(), state.dispatcher.clone(), era.clone());
        async move {
            match m {
                Err(resp) => Some(resp),
                Ok(InSession::Call(call)) => {
                    let Call {
                        id, method, params, ..
                    } = *call;
                    Some(d.request(&host, &era, id, &method, &params).await)
                }
                Ok(InSession::Cancel { request_id }) => {
                    if let Some(s) = state.sessions().get_mut(sid)
                        && let Some(h) = s.inflight.remove(&request_id)
                    {
                        h.abort();
                    }
                    None
                }
                Ok(InSession::Accept) => None,
            }
        }
    });
    let responses: Vec<shared::mcp::Response> = futures_util::future::join_all(answers)
        .await
        .into_iter()
        .flatten()
        .collect();
    if let Some(s) = state.sessions().get_mut(sid) {
        s.last_seen = Instant::now();
    }
    match responses.is_empty() {
        true => StatusCode::ACCEPTED.into_response(),
        false => bytes_response(StatusCode::OK, shared::mcp::batch_to_vec(&responses)),
    }
}

async fn in_session(state: &Arc<HttpState>, sid: String, message: InSession) -> Response {
    let Some((host, version)) = touch_session(state, &sid) else {
        return refused(route::unknown_session());
    };
    let call = match message {
        InSession::Accept => return StatusCode::ACCEPTED.into_response(),
        InSession::Cancel { request_id } => {
            if let Some(s) = state.sessions().get_mut(&sid)
                && let Some(h) = s.inflight.remove(&request_id)
            {
                h.abort();
            }
            return StatusCode::ACCEPTED.into_response();
        }
        InSession::Call(call) => call,
    };
    let Call {
        id,
        method,
        params,
        stream,
    } = *call;
    let d = state.dispatcher.clone();
    let era = Era::Legacy(version);
    if stream {
        let st = state.clone();
        let key = id.clone();
        let sid2 = sid.clone();
        let (pending, (key, handle)) = stream::start(host, d, era, id, method, params, move || {
            if let Some(s) = st.sessions().get_mut(&sid2) {
                s.inflight.remove(&key);
                s.last_seen = Instant::now();
            }
        });
        if let Some(s) = state.sessions().get_mut(&sid) {
            s.inflight.insert(key, handle);
        }
        return pending.respond().await;
    }
    let rid = id.clone();
    let task = tokio::spawn(async move { d.request(&host, &era, rid, &method, &params).await });
    if let Some(s) = state.sessions().get_mut(&sid) {
        s.inflight.insert(id.clone(), task.abort_handle());
    }
    let resp = run_request(task, id.clone()).await;
    if let Some(s) = state.sessions().get_mut(&sid) {
        s.inflight.remove(&id);
        s.last_seen = Instant::now();
    }
    rpc_response(StatusCode::OK, &resp)
}

async fn mcp_delete(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if let Err(r) = check_host_origin(&state, &headers).and_then(|_| check_auth(&state, &headers)) {
        return r.into_response();
    }
    let sid = match route::delete(&route_headers(&headers)) {
        Ok(sid) => sid,
        Err(r) => return refused(r),
    };
    let session = state.sessions().remove(&sid);
    match session {
        Some(s) => {
            for h in s.inflight.values() {
                h.abort();
            }
            tracing::info!(session = %short(&sid), "session closed by the client");
            s.host.close().await;
            StatusCode::NO_CONTENT.into_response()
        }
        None => refused(route::unknown_session()),
    }
}

async fn mcp_other(
    State(state): State<Arc<HttpState>>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = check_host_origin(&state, &headers).and_then(|_| check_auth(&state, &headers)) {
        return r.into_response();
    }
    let (status, body) = route::method_not_allowed(method.as_str());
    let mut r = json_response(status_code(status), body);
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(route::ALLOW));
    r
}

/// `GET /metrics`: Prometheus text, behind the bearer token like `/mcp`.
async fn metrics(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if let Err(r) = check_host_origin(&state, &headers).and_then(|_| check_auth(&state, &headers)) {
        return r.into_response();
    }
    let c = &state.computers;
    crate::metrics::response(&c.states(), c.jobs_running(), c.memory())
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, json!({"status": "ok"}))
}

async fn root(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if let Err(r) = check_host_origin(&state, &headers) {
        return r.into_response();
    }
    let mut info = json!({
        "name": state.dispatcher.config().name,
        "version": state.dispatcher.config().version,
        "mcp_endpoint": "/mcp",
        "health": "/healthz",
        "tool_groups": state.dispatcher.config().names.groups().names(),
    });
    if state.lifecycle {
        info["dashboard_resource"] = json!(shared::catalogue::DASHBOARD_URI);
        info["dashboard"] = json!("/dashboard");
    }
    json_response(StatusCode::OK, info)
}

/// The dashboard as a web page: the same file as the MCP App resource. It holds no secret
/// (the person's token stays in their tab), so it is served without auth; its calls to
/// `/mcp` carry the token.
async fn dashboard(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if let Err(r) = check_host_origin(&state, &headers) {
        return r.into_response();
    }
    if !state.lifecycle {
        return json_response(
            StatusCode::NOT_FOUND,
            json!({"error": "the dashboard needs the lifecycle tools: start the server with ENABLE_LIFECYCLE_TOOLS=true"}),
        );
    }
    let mut r = (StatusCode::OK, shared::dashboard::HTML).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(csp) = HeaderValue::from_str(&shared::dashboard::web_csp()) {
        h.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The router; tests call it directly.
pub fn app(state: Arc<HttpState>) -> Router {
    let limit = crate::serve::body::BodyLimit {
        max: state.max_body,
        reply: limits::body_refused,
    };
    Router::new()
        .route("/", get(root))
        .route("/healthz", get(healthz))
        .route("/dashboard", get(dashboard))
        .route("/metrics", get(metrics))
        .route(
            "/mcp",
            axum::routing::post(mcp_post)
                .delete(mcp_delete)
                .get(mcp_other)
                .put(mcp_other)
                .patch(mcp_other),
        )
        .layer(DefaultBodyLimit::max(state.max_body))
        .layer(axum::middleware::from_fn_with_state(
            limit,
            crate::serve::body::buffer,
        ))
        // Streamed, bounded by `--file-limit` (not the JSON body limit).
        .route(
            "/v1/files/{computer_id}/{*path}",
            get(files::get)
                .put(files::put)
                .layer(DefaultBodyLimit::disable()),
        )
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            crate::metrics::Server::Mcp,
            crate::metrics::count_requests,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_parsing() {
        assert_eq!(host_of("localhost:8435"), "localhost");
        assert_eq!(host_of("[::1]:80"), "::1");
        assert_eq!(host_of("127.0.0.1"), "127.0.0.1");
        assert!(is_loopback_name("LOCALHOST"));
        assert!(is_loopback_name("127.0.0.2"));
        assert!(!is_loopback_name("evil.example"));
    }
}

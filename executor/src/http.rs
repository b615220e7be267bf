//! MCP over Streamable HTTP at `/mcp`, both protocol eras on one endpoint, plus `/healthz`
//! and `/`.
//!
//! Owns: bearer-token auth (constant-time), Host/Origin checks against DNS rebinding,
//! choosing the era per request (an `initialize` or an `Mcp-Session-Id` means a legacy
//! session; `MCP-Protocol-Version: 2026-07-28` means stateless), the 2026-07-28 header
//! rules, legacy sessions (create, expire when idle, DELETE), and cancellation (a
//! `notifications/cancelled` or a dropped connection kills the command).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use shared::mcp::{
    Dispatcher, Era, Incoming, MODERN_VERSION, check_modern_meta, codes, error_response, negotiate,
    parse_message, success_response,
};
use shared::transport::{
    check_modern_headers, check_stateless_version, constant_time_eq, modern_status,
};
use tokio::task::{AbortHandle, JoinHandle};

use crate::computers::{Computers, SessionHost};

/// Largest request body.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// One legacy MCP session.
struct Session {
    host: SessionHost,
    version: String,
    last_seen: Instant,
    inflight: HashMap<String, AbortHandle>,
}

/// Shared state of the HTTP server.
pub struct HttpState {
    pub dispatcher: Arc<Dispatcher>,
    pub computers: Arc<Computers>,
    pub auth_token: Option<String>,
    pub bind: IpAddr,
    pub lifecycle: bool,
    pub session_timeout: Duration,
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
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Why a request is refused before dispatch; the one place such refusals become replies.
#[derive(Debug)]
enum Refusal {
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

fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    json_response(status, error_response(id, code, message, None))
}

/// Aborts the task when the request future is dropped (client went away).
struct AbortOnDrop(AbortHandle);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Does this request ask for progress, from a client that reads event streams?
fn wants_stream(headers: &HeaderMap, params: Option<&Value>) -> bool {
    let accepts = header_str(headers, "accept").is_some_and(|a| a.contains("text/event-stream"));
    let token = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("progressToken"))
        .is_some();
    accepts && token
}

/// Runs a request whose progress notifications and final response go out as one SSE
/// stream. Closing the stream cancels the request (and kills its command). Returns the
/// response and, for cancellation by id, the request's key and abort handle.
fn stream_request(
    host: SessionHost,
    d: Arc<Dispatcher>,
    era: Era,
    id: Value,
    method: String,
    params: Option<Value>,
    on_done: impl FnOnce() + Send + 'static,
) -> (Response, Option<(String, AbortHandle)>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let host = host.with_notifier(tx.clone());
    let key = id.to_string();
    let task = tokio::spawn(async move {
        let resp = d.request(&host, &era, id, &method, params.as_ref()).await;
        let _ = tx.send(resp);
        on_done();
    });
    let handle = task.abort_handle();
    let guard = AbortOnDrop(task.abort_handle());
    let events = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let msg = rx.recv().await?;
        let event = Event::default().event("message").data(msg.to_string());
        Some((Ok::<_, std::convert::Infallible>(event), (rx, guard)))
    });
    let mut resp = Sse::new(events).into_response();
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    (resp, Some((key, handle)))
}

async fn run_request(task: JoinHandle<Value>, id: Value) -> Value {
    let _guard = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(v) => v,
        Err(_) => error_response(id, codes::INTERNAL_ERROR, "request cancelled", None),
    }
}

/// The 2026-07-28 header rules: `Mcp-Method` and, where it applies, `Mcp-Name` must match.
async fn mcp_post(
    State(state): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = check_host_origin(&state, &headers).and_then(|_| check_auth(&state, &headers)) {
        return r.into_response();
    }
    let msg = match parse_message(&body) {
        Ok(m) => m,
        Err(resp) => return json_response(StatusCode::BAD_REQUEST, resp),
    };
    let session_id = header_str(&headers, "mcp-session-id").map(str::to_owned);
    let version_header = header_str(&headers, "mcp-protocol-version").map(str::to_owned);

    // ---- legacy: initialize opens a session ----
    if let Incoming::Request { id, method, params } = &msg
        && method == "initialize"
        && version_header.as_deref() != Some(MODERN_VERSION)
    {
        let requested = params
            .as_ref()
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = negotiate(requested);
        let sid = format!("{:032x}", rand::random::<u128>());
        let host = SessionHost::new(state.computers.clone(), format!("session:{sid}"), false);
        state.sessions().insert(
            sid.clone(),
            Session {
                host,
                version: version.to_owned(),
                last_seen: Instant::now(),
                inflight: HashMap::new(),
            },
        );
        tracing::info!(session = %short(&sid), version, "session opened");
        let mut r = json_response(
            StatusCode::OK,
            success_response(id.clone(), state.dispatcher.initialize_result(version)),
        );
        if let Ok(v) = HeaderValue::from_str(&sid) {
            r.headers_mut().insert("mcp-session-id", v);
        }
        return r.into_response();
    }

    // ---- legacy: a request inside a session ----
    if let Some(sid) = session_id {
        let (host, version) = {
            let mut sessions = state.sessions();
            let Some(s) = sessions.get_mut(&sid) else {
                return rpc_error(
                    StatusCode::NOT_FOUND,
                    Value::Null,
                    codes::INVALID_REQUEST,
                    "unknown or expired session: initialize again",
                );
            };
            s.last_seen = Instant::now();
            (s.host.clone(), s.version.clone())
        };
        return match msg {
            Incoming::Response => StatusCode::ACCEPTED.into_response(),
            Incoming::Notification { method, params } => {
                if method == "notifications/cancelled"
                    && let Some(rid) = params.as_ref().and_then(|p| p.get("requestId"))
                    && let Some(s) = state.sessions().get_mut(&sid)
                    && let Some(h) = s.inflight.remove(&rid.to_string())
                {
                    h.abort();
                }
                StatusCode::ACCEPTED.into_response()
            }
            Incoming::Request { id, method, params } => {
                let d = state.dispatcher.clone();
                let era = Era::Legacy(version);
                if wants_stream(&headers, params.as_ref()) {
                    let st = state.clone();
                    let key = id.to_string();
                    let sid2 = sid.clone();
                    let (resp, abort) =
                        stream_request(host, d, era, id, method, params, move || {
                            if let Some(s) = st.sessions().get_mut(&sid2) {
                                s.inflight.remove(&key);
                                s.last_seen = Instant::now();
                            }
                        });
                    if let Some((key, handle)) = abort
                        && let Some(s) = state.sessions().get_mut(&sid)
                    {
                        s.inflight.insert(key, handle);
                    }
                    return resp;
                }
                let rid = id.clone();
                let task = tokio::spawn(async move {
                    d.request(&host, &era, rid, &method, params.as_ref()).await
                });
                if let Some(s) = state.sessions().get_mut(&sid) {
                    s.inflight.insert(id.to_string(), task.abort_handle());
                }
                let resp = run_request(task, id.clone()).await;
                if let Some(s) = state.sessions().get_mut(&sid) {
                    s.inflight.remove(&id.to_string());
                    s.last_seen = Instant::now();
                }
                json_response(StatusCode::OK, resp)
            }
        };
    }

    // ---- stateless 2026-07-28 ----
    let id = match &msg {
        Incoming::Request { id, .. } => id.clone(),
        _ => Value::Null,
    };
    if let Err((status, body)) = check_stateless_version(version_header.as_deref(), &id) {
        return json_response(status_code(status), body);
    }
    match msg {
        Incoming::Response | Incoming::Notification { .. } => StatusCode::ACCEPTED.into_response(),
        Incoming::Request { id, method, params } => {
            if let Err((status, body)) =
                check_modern_headers(|n| header_str(&headers, n), &id, &method, params.as_ref())
            {
                return json_response(status_code(status), body);
            }
            if let Err(body) = check_modern_meta(&id, params.as_ref()) {
                return json_response(StatusCode::BAD_REQUEST, body);
            }
            let host = SessionHost::new(state.computers.clone(), principal(&state), true);
            let d = state.dispatcher.clone();
            if wants_stream(&headers, params.as_ref()) {
                return stream_request(host, d, Era::Modern, id, method, params, || {}).0;
            }
            let rid = id.clone();
            let task = tokio::spawn(async move {
                d.request(&host, &Era::Modern, rid, &method, params.as_ref())
                    .await
            });
            let resp = run_request(task, id).await;
            let status = status_code(modern_status(&resp));
            json_response(status, resp)
        }
    }
}

async fn mcp_delete(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if let Err(r) = check_host_origin(&state, &headers).and_then(|_| check_auth(&state, &headers)) {
        return r.into_response();
    }
    let Some(sid) = header_str(&headers, "mcp-session-id") else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            codes::INVALID_REQUEST,
            "missing Mcp-Session-Id",
        );
    };
    let session = state.sessions().remove(sid);
    match session {
        Some(s) => {
            for h in s.inflight.values() {
                h.abort();
            }
            tracing::info!(session = %short(sid), "session closed by the client");
            s.host.close().await;
            StatusCode::NO_CONTENT.into_response()
        }
        None => rpc_error(
            StatusCode::NOT_FOUND,
            Value::Null,
            codes::INVALID_REQUEST,
            "unknown or expired session",
        ),
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
    let mut r = json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        json!({"error": format!("{method} is not supported on /mcp: this server sends no unsolicited messages; use POST")}),
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    r
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
    Router::new()
        .route("/", get(root))
        .route("/healthz", get(healthz))
        .route("/dashboard", get(dashboard))
        .route(
            "/mcp",
            axum::routing::post(mcp_post)
                .delete(mcp_delete)
                .get(mcp_other)
                .put(mcp_other)
                .patch(mcp_other),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
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

//! `executor` mode: the versioned REST API the gateway calls (`shared::executor_api`).
//!
//! Every request but `/v1/health` carries the gateway's JWT: HS256 only (no `none`, no
//! RS/HS confusion), our audience (this executor's `--executor-name`: a token minted for
//! another executor is refused), the gateway's issuer, `exp`/`iat` required, `nbf` checked
//! when present, lifetime at most [`MAX_TOKEN_LIFETIME_SECS`]. `sub` is the team: the team
//! has its own id space here (`shared::teams`: backend names carry its key prefix, and
//! every computer its team in a label, metadata or tag), so a token of one team never
//! reaches another team's computers, permanent ones included, nor a local server's, nor one
//! that lacks the team's label. `scope` is checked on every route ([`Op::scope`]: `exec`
//! runs commands, jobs, files and the list; `manage` creates, restarts, resets and
//! deletes), whatever the gateway already checked. A command, file or job call (the file
//! streams included) that would make its computer makes a temporary one with `exec`; a new
//! permanent one (`temporary: false` on an id that does not exist) needs `manage` too (403,
//! nothing made: `Scope::may_create`), as `POST /v1/computers` does. A refused token is
//! answered "invalid token"; why is logged. Requests decode into typed operations
//! (`shared::op::Op`, validated by the same rules as the MCP tools) and run through the
//! same `Computers` registry, so results are identical.
//!
//! The token's `owner` (the caller at the gateway: `session:…` or `user:…`) owns the
//! temporaries made for it: no other caller of the team reaches them here, whatever the
//! gateway's records say (SPEC §3.6; a gateway that lost a record cannot hand one to
//! another user). Temporaries made here live until the gateway deletes them (its Team
//! Durable Object owns their lifetime), until no request named one for
//! `--executor-idle-timeout` (the gateway stopped asking: it deleted it while this
//! executor was out of reach, or lost it; `crate::run` runs the reaper), or until this
//! executor stops.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::json;
use shared::executor_api::{
    ApiError, Capacity, Claims, ErrorCode, GATEWAY_ISSUER, Health, Load, MAX_TOKEN_LIFETIME_SECS,
    PREFIX, Scope,
};
use shared::op::Op;

use crate::computers::{ComputerError, Computers, SessionHost};
use crate::place::Place;
use crate::progress::Progress;
use crate::serve::body::{BodyError, BodyLimit};

/// What the handlers share.
pub struct ApiState {
    computers: Arc<Computers>,
    key: DecodingKey,
    validation: Validation,
    /// `--file-limit` for `/v1/files` streams.
    file_limit: u64,
    /// `--http-max-body` for the JSON routes (stdin is at most 2 MiB of UTF-8, as JSON).
    max_body: usize,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").finish_non_exhaustive()
    }
}

impl ApiState {
    /// `secret`: the HS256 key shared with the gateway; `name`: this executor's name, the
    /// `aud` its tokens must carry.
    pub fn new(
        computers: Arc<Computers>,
        secret: &[u8],
        name: &str,
    ) -> Result<Self, jsonwebtoken::errors::Error> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[name]);
        validation.set_issuer(&[GATEWAY_ISSUER]);
        validation.set_required_spec_claims(&["exp", "iat", "aud", "iss", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        Ok(Self {
            computers,
            key: DecodingKey::from_secret(secret)?,
            validation,
            file_limit: 1 << 30,
            max_body: crate::serve::HttpLimits::default().max_body,
        })
    }

    /// Sets `--file-limit`.
    pub fn with_file_limit(mut self, limit: u64) -> Self {
        self.file_limit = limit;
        self
    }

    /// Sets `--http-max-body`.
    pub fn with_max_body(mut self, max: usize) -> Self {
        self.max_body = max;
        self
    }

    /// Who the request is for, or why it is refused. The reason a token fails stays in
    /// the log: the caller learns only that it is invalid.
    fn authorize(&self, headers: &HeaderMap) -> Result<Grant, Failure> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(shared::transport::bearer_token)
            .ok_or_else(|| {
                crate::metrics::auth_refused(crate::metrics::Server::Executor);
                Failure(ApiError::new(
                    ErrorCode::Unauthorized,
                    "missing bearer token",
                ))
            })?;
        self.verify(token).map_err(|why| {
            tracing::info!(why = %why, "executor token refused");
            crate::metrics::auth_refused(crate::metrics::Server::Executor);
            Failure(ApiError::new(ErrorCode::Unauthorized, "invalid token"))
        })
    }

    /// The token's grant, or why it is refused (for the log).
    fn verify(&self, token: &str) -> Result<Grant, BadToken> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation)
            .map_err(|e| BadToken::Jwt(e.to_string()))?;
        let c = data.claims;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        if c.iat > now + self.validation.leeway {
            return Err(BadToken::FutureIat);
        }
        if c.exp.saturating_sub(c.iat) > MAX_TOKEN_LIFETIME_SECS {
            return Err(BadToken::TooLong);
        }
        if c.sub.is_empty() {
            return Err(BadToken::NoTeam);
        }
        Ok(Grant {
            team: c.sub,
            owner: c.owner,
            scope: c.scope,
        })
    }

    fn host(&self, grant: &Grant) -> SessionHost {
        SessionHost::for_team(
            self.computers.clone(),
            &grant.team,
            &grant.owner,
            &grant.scope,
        )
    }
}

/// Why an executor token is refused (logged; the caller only hears "invalid token").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadToken {
    #[error("{0}")]
    Jwt(String),
    #[error("issued in the future (iat)")]
    FutureIat,
    #[error("lifetime over {MAX_TOKEN_LIFETIME_SECS} s")]
    TooLong,
    #[error("no team (sub)")]
    NoTeam,
}

/// What a verified token lets its holder do.
#[derive(Debug)]
struct Grant {
    team: String,
    /// The caller at the gateway (`""`: the team itself): the owner of its temporaries.
    owner: String,
    /// The `scope` claim (space separated).
    scope: String,
}

impl Grant {
    /// Refuses an operation outside the token's scope (403), whatever the gateway let
    /// through: the executor is an API of its own.
    fn allow(&self, need: Scope) -> Result<(), Failure> {
        if need.granted_by(&self.scope) {
            return Ok(());
        }
        let what = match need {
            Scope::Exec => "run commands, follow jobs, use files or list computers",
            Scope::Manage => "create, restart, factory-reset or delete computers",
        };
        crate::metrics::auth_refused(crate::metrics::Server::Executor);
        Err(Failure(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "this token may not {what}: it lacks the `{}` scope (it has {:?})",
                need.as_str(),
                self.scope
            ),
        )))
    }
}

/// An [`ApiError`] as a response.
#[derive(Debug)]
struct Failure(ApiError);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.error.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (status, axum::Json(self.0)).into_response();
        if status == StatusCode::UNAUTHORIZED
            && let Ok(v) = "Bearer".parse()
        {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }
}

fn code_of(e: &ComputerError) -> ErrorCode {
    e.api_code()
}

/// A refused body (`crate::serve::body`) with its stable code.
fn body_refused(e: &BodyError) -> Response {
    let code = match e {
        BodyError::TooLarge { .. } => ErrorCode::TooLarge,
        BodyError::Stalled(_) => ErrorCode::RequestTimeout,
        BodyError::Broken(_) => ErrorCode::BadRequest,
    };
    Failure(ApiError::new(code, e.to_string())).into_response()
}

/// `GET /v1/health` (no auth): the backend served here, the host's CPUs, and the load.
async fn health(State(s): State<Arc<ApiState>>) -> Response {
    let backend = s.computers.backend();
    let backends = backend
        .kind()
        .served_names()
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    let (computers, execs) = s.computers.load();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get() as u64);
    let h = Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        backends,
        capabilities: backend.capabilities(),
        capacity: Capacity { cpus },
        load: Load { computers, execs },
    };
    (StatusCode::OK, axum::Json(json!(h))).into_response()
}

/// `GET /metrics`: Prometheus text for any valid gateway token (any scope).
async fn metrics(State(s): State<Arc<ApiState>>, headers: HeaderMap) -> Result<Response, Failure> {
    s.authorize(&headers)?;
    let c = &s.computers;
    Ok(crate::metrics::response(
        &c.states(),
        c.jobs_running(),
        c.memory(),
    ))
}

/// Every other `/v1` route: the token's team, the typed operation, the registry.
async fn operation(
    State(s): State<Arc<ApiState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    let Some(path) = uri.path().strip_prefix(PREFIX) else {
        return Err(Failure(ApiError::new(
            ErrorCode::NotFound,
            "no such route; the executor API is under /v1",
        )));
    };
    let grant = s.authorize(&headers)?;
    let op = Op::decode(method.as_str(), path, &bytes).map_err(Failure)?;
    grant.allow(op.scope())?;
    let v = s
        .host(&grant)
        .run(op, &Progress::new(None, None))
        .await
        .map_err(|e| Failure(ApiError::new(code_of(&e), e.to_string())))?;
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

/// `GET` / `PUT /v1/files/{computer_id}/{path}` for the token's team: the streams of
/// the HTTP server (`crate::http::files`), as the gateway forwards them.
async fn file_stream(
    State(s): State<Arc<ApiState>>,
    Path((id, rest)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    use crate::http::files;
    // A refusal goes out before the body is read (an `Expect: 100-continue` client never
    // sends it).
    let refuse = |r: Response, body: axum::body::Body| {
        files::refuse_unread(&headers, body.into_data_stream(), r)
    };
    let grant = match s
        .authorize(&headers)
        .and_then(|g| g.allow(Scope::Exec).map(|()| g))
    {
        Ok(g) => g,
        Err(f) => return refuse(f.into_response(), body),
    };
    let path = match files::target(&id, &rest) {
        Ok(p) => p,
        Err(d) => return refuse(d.into_response(), body),
    };
    let host = s.host(&grant);
    let answer = if method == Method::PUT {
        files::upload(&host, &id, &path, &uri, &headers, body, s.file_limit).await
    } else {
        files::download(&host, &id, &path, &headers, s.file_limit).await
    };
    if answer.status().is_success() {
        host.used(&id);
    }
    answer
}

/// The router.
pub fn app(state: Arc<ApiState>) -> Router {
    let limit = BodyLimit {
        max: state.max_body,
        reply: body_refused,
    };
    Router::new()
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(operation)
        .layer(DefaultBodyLimit::max(state.max_body))
        .layer(axum::middleware::from_fn_with_state(
            limit,
            crate::serve::body::buffer,
        ))
        .route(
            "/v1/files/{computer_id}/{*path}",
            get(file_stream)
                .put(file_stream)
                .layer(DefaultBodyLimit::disable()),
        )
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            crate::metrics::Server::Executor,
            crate::metrics::count_requests,
        ))
}

#[cfg(test)]
mod tests;

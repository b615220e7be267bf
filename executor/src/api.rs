//! `executor` mode: the versioned REST API the gateway calls (`shared::executor_api`).
//!
//! Every request but `/v1/health` carries the gateway's JWT: HS256 only (no `none`, no
//! RS/HS confusion), our audience, the gateway's issuer, `exp`/`iat` required, `nbf` checked
//! when present, lifetime at most [`MAX_TOKEN_LIFETIME_SECS`]. `sub` is the team: it is the
//! owner of the temporaries made for it, so one team's temporaries cannot be reached with
//! another team's token even here. Bodies are validated by the same code as the MCP tools,
//! and the work is done by the same `Computers` registry, so results are identical.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};
use shared::catalogue::ToolNames;
use shared::executor_api::{
    ApiError, Claims, CreateBody, ErrorCode, ExecBody, GATEWAY_ISSUER, Health,
    MAX_TOKEN_LIFETIME_SECS,
};
use shared::validate::{ToolCall, ValidationError, parse_tool_call};

use crate::computers::{ComputerError, Computers, SessionHost};
use crate::docker::DockerError;
use crate::progress::Progress;
use crate::wasm::WasmError;

/// Largest request body (stdin is at most 2 MiB of UTF-8, as JSON).
const MAX_BODY: usize = 16 * 1024 * 1024;
/// Shortest accepted shared secret, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// What the handlers share.
pub struct ApiState {
    computers: Arc<Computers>,
    names: ToolNames,
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").finish_non_exhaustive()
    }
}

impl ApiState {
    /// `secret`: the HS256 key shared with the gateway; `audience`: this executor's `aud`.
    pub fn new(
        computers: Arc<Computers>,
        exec_tool: &str,
        secret: &[u8],
        audience: &str,
    ) -> Result<Self, jsonwebtoken::errors::Error> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[audience]);
        validation.set_issuer(&[GATEWAY_ISSUER]);
        validation.set_required_spec_claims(&["exp", "iat", "aud", "iss", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        Ok(Self {
            computers,
            names: ToolNames::new(exec_tool, true),
            key: DecodingKey::from_secret(secret)?,
            validation,
        })
    }

    /// The team the request is for, or why it is refused.
    fn authorize(&self, headers: &HeaderMap) -> Result<String, Failure> {
        let refused = |why: &str| Failure(ApiError::new(ErrorCode::Unauthorized, why));
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| refused("missing bearer token"))?;
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation)
            .map_err(|e| refused(&format!("token refused: {e}")))?;
        let c = data.claims;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        if c.iat > now + self.validation.leeway {
            return Err(refused("token issued in the future (iat)"));
        }
        if c.exp.saturating_sub(c.iat) > MAX_TOKEN_LIFETIME_SECS {
            return Err(refused(&format!(
                "token lifetime over {MAX_TOKEN_LIFETIME_SECS} s"
            )));
        }
        if c.sub.is_empty() {
            return Err(refused("token has no team (sub)"));
        }
        Ok(c.sub)
    }

    fn host(&self, team: &str) -> SessionHost {
        SessionHost::new(self.computers.clone(), format!("team:{team}"), true)
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
    match e {
        ComputerError::Unknown(_)
        | ComputerError::Docker(DockerError::NotFound(_))
        | ComputerError::Wasm(WasmError::NotFound(_))
        | ComputerError::Cloud(shared::providers::computers::ComputersError::NotFound(_))
        | ComputerError::Modal(crate::modal::ModalBackendError::NotFound(_)) => ErrorCode::NotFound,
        ComputerError::Policy(_) | ComputerError::Docker(DockerError::NotOurs { .. }) => {
            ErrorCode::Conflict
        }
        ComputerError::Docker(_)
        | ComputerError::Wasm(_)
        | ComputerError::Cloud(_)
        | ComputerError::Modal(_) => ErrorCode::Engine,
    }
}

/// Validates `args` as tool `tool` and runs it for `team`.
async fn run(state: &ApiState, team: &str, tool: &str, args: Value) -> Result<Value, Failure> {
    let call = match parse_tool_call(&state.names, tool, Some(&args)) {
        Ok(c) => c,
        Err(ValidationError::Invalid(m)) => {
            return Err(Failure(ApiError::new(ErrorCode::BadRequest, m)));
        }
        Err(e) => return Err(Failure(ApiError::new(ErrorCode::Internal, e.to_string()))),
    };
    if let ToolCall::Exec(req) = &call
        && req.computer_id.is_none()
    {
        return Err(Failure(ApiError::new(
            ErrorCode::BadRequest,
            "computer_id is required",
        )));
    }
    state
        .host(team)
        .run(call, &Progress::new(None, None))
        .await
        .map_err(|e| Failure(ApiError::new(code_of(&e), e.to_string())))
}

fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Failure> {
    serde_json::from_slice(bytes).map_err(|e| {
        Failure(ApiError::new(
            ErrorCode::BadRequest,
            format!("request body: {e}"),
        ))
    })
}

fn ok(v: Value) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

async fn health() -> Response {
    ok(json!(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        backends: vec!["docker".into()],
    }))
}

async fn list(State(s): State<Arc<ApiState>>, headers: HeaderMap) -> Result<Response, Failure> {
    let team = s.authorize(&headers)?;
    Ok(ok(run(&s, &team, "computer_list", json!({})).await?))
}

async fn create(
    State(s): State<Arc<ApiState>>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    let team = s.authorize(&headers)?;
    let b: CreateBody = body(&bytes)?;
    let args = json!({"computer_id": b.computer_id, "temporary": b.temporary});
    Ok(ok(run(&s, &team, "computer_create", args).await?))
}

async fn exec(
    State(s): State<Arc<ApiState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    let team = s.authorize(&headers)?;
    let b: ExecBody = body(&bytes)?;
    let mut args = serde_json::to_value(b)
        .map_err(|e| Failure(ApiError::new(ErrorCode::Internal, e.to_string())))?;
    args["computer_id"] = json!(id);
    let tool = s.names.exec.clone();
    Ok(ok(run(&s, &team, &tool, args).await?))
}

async fn on_computer(
    s: &ApiState,
    headers: &HeaderMap,
    tool: &str,
    id: String,
) -> Result<Response, Failure> {
    let team = s.authorize(headers)?;
    Ok(ok(run(s, &team, tool, json!({"computer_id": id})).await?))
}

/// `POST /v1/computers/{id}/restart` and `…/factory-reset`.
async fn lifecycle_op(
    State(s): State<Arc<ApiState>>,
    Path((id, op)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let tool = match op.as_str() {
        "restart" => "computer_restart",
        "factory-reset" => "computer_factory_reset",
        _ => return Err(not_found().await),
    };
    on_computer(&s, &headers, tool, id).await
}

async fn remove(
    State(s): State<Arc<ApiState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    on_computer(&s, &headers, "computer_delete", id).await
}

async fn not_found() -> Failure {
    Failure(ApiError::new(
        ErrorCode::NotFound,
        "no such route; see shared::executor_api for the /v1 routes",
    ))
}

/// The router.
pub fn app(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/computers", get(list).post(create))
        .route("/v1/computers/{id}", delete(remove))
        .route("/v1/computers/{id}/exec", post(exec))
        .route("/v1/computers/{id}/{op}", post(lifecycle_op))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Reaps idle temporaries (the gateway's teams are stateless callers) every `every`.
pub fn spawn_reaper(computers: Arc<Computers>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            computers.reap_idle().await;
        }
    })
}

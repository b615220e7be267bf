//! The executor API: what the gateway sends a self-hosted executor
//! (`mcp-sandbox-computer-vm-for-ai executor`) and what comes back. Versioned by path prefix.
//!
//! | method | path | body | 200 body |
//! | --- | --- | --- | --- |
//! | GET | `/v1/health` | – | [`Health`] (no auth) |
//! | GET | `/v1/computers` | – | `{"computers": [item…], "count": n}` (the team's view) |
//! | POST | `/v1/computers` | `{"computer_id", "temporary"}` | `{"ok", "computer_id", "sandbox_id", "temporary"}` |
//! | POST | `/v1/computers/{id}/exec` | the exec tool's arguments without `computer_id` | the exec result of SPEC §3.5 |
//! | POST | `/v1/computers/{id}/restart` | – | as create |
//! | POST | `/v1/computers/{id}/factory-reset` | – | as create |
//! | DELETE | `/v1/computers/{id}` | – | `{"ok", "computer_id", "deleted": true}` |
//! | GET | `/v1/computers/{id}/jobs` | – | `terminal_job`'s list result |
//! | POST | `/v1/computers/{id}/jobs/{job_id}` | `terminal_job`'s arguments without ids (`stdin_base64`, `close_stdin`, `signal`, `wait_ms`, `peek`) | `terminal_job`'s result |
//! | POST | `/v1/computers/{id}/jobs/{job_id}/read` | the same | the read itself: `JobOutput`'s serde form (`stdout`/`stderr` in base64, `running`, `exit_code`, `duration_ms`, `dropped_bytes`, `timed_out_after`, `oom_killed`), for a gateway keeping a task |
//! | POST | `/v1/computers/{id}/snapshots` | `{"label"}` | `computer_snapshot`'s result |
//! | GET | `/v1/computers/{id}/snapshots` | – | `computer_snapshots`'s result |
//! | POST | `/v1/computers/{id}/restore` | `{"snapshot_id"}` | as create |
//! | POST | `/v1/computers/{new id}/fork` | `{"from", "temporary"}` | as create |
//! | DELETE | `/v1/snapshots/{snapshot_id}` | – | `{"ok", "snapshot_id", "deleted": true}` |
//!
//! An exec with `yield_ms` starts a job (SPEC §3.8) the same way as the tool.
//!
//! Requests are [`crate::op::Op`]s ([`crate::op::Op::encode`], [`crate::op::Op::decode`]);
//! ids in paths are the caller's, and the executor keeps each team in its own id space.
//! Success bodies are exactly the `structuredContent` the local server returns for the same
//! tool, so the gateway can hand them on unchanged. Every failure is an HTTP status with an
//! [`ApiError`] body whose `code` is stable. Requests carry `Authorization: Bearer <JWT>`
//! signed by the gateway ([`Claims`], HS256, about a minute long, for one executor: `aud`
//! is its name); `sub` is the team: a team reaches only its own computers on the executor,
//! permanent ones included, and `owner` the caller: only it reaches its temporaries.

use serde::{Deserialize, Serialize};

/// The path prefix of this version of the API.
pub const PREFIX: &str = "/v1";
/// The `iss` the gateway puts in its tokens.
pub const GATEWAY_ISSUER: &str = "mcp-sandbox-gateway";
/// Shortest shared secret (gateway ↔ executor) an executor accepts, in bytes.
pub const MIN_SECRET_LEN: usize = 32;
/// Longest token lifetime (`exp - iat`) an executor accepts, in seconds: the gateway's
/// live about a minute (SPEC §5), so a token that leaks is soon worthless.
pub const MAX_TOKEN_LIFETIME_SECS: u64 = 120;

/// `GET /v1/health`: what this executor serves and how busy it is (placement reads it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
    pub version: String,
    /// The backends it runs computers on (`docker`, `wasm`, `modal`, …).
    pub backends: Vec<String>,
    /// What its backend can do here (absent from executors older than the field: read as
    /// nothing beyond commands).
    #[serde(default)]
    pub capabilities: crate::capabilities::Capabilities,
    #[serde(default)]
    pub capacity: Capacity,
    #[serde(default)]
    pub load: Load,
}

/// What an executor could take.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// CPUs of the executor's host (0: unknown).
    pub cpus: u64,
}

/// What an executor is doing now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// Computers this executor tracks (attached or created since it started).
    pub computers: u64,
    /// Commands running now.
    pub execs: u64,
}

/// Stable error codes; each has one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed or fails validation (400).
    BadRequest,
    /// Missing or refused token (401).
    Unauthorized,
    /// The token is good but lacks the scope the request needs (403).
    Forbidden,
    /// No such computer for this team (404).
    NotFound,
    /// The request contradicts the computer's state, e.g. the other `temporary` value (409).
    Conflict,
    /// The request body is over the executor's `--http-max-body` (413).
    TooLarge,
    /// The request body stalled (`--http-body-timeout`) (408).
    RequestTimeout,
    /// The computer's backend cannot do what was asked (jobs without a supervisor,
    /// snapshots where none are kept; `shared::capabilities`) (501).
    Unsupported,
    /// The container engine failed or refused (502).
    Engine,
    /// Anything else (500).
    Internal,
}

impl ErrorCode {
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::Unsupported => 501,
            ErrorCode::Engine => 502,
            ErrorCode::Internal => 500,
        }
    }
}

/// The body of every failed request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error: ErrorDetail {
                code,
                message: message.into(),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error.message)
    }
}

impl std::error::Error for ApiError {}

/// The claims of a gateway → executor token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The gateway ([`GATEWAY_ISSUER`]).
    pub iss: String,
    /// The executor's name (`--executor-name`, its `name` in the gateway's `EXECUTORS`):
    /// a token for one executor is refused by every other.
    pub aud: String,
    /// The team the request is for.
    pub sub: String,
    pub iat: u64,
    pub exp: u64,
    /// What the caller may do, space separated (SPEC §5): `exec` (run commands, jobs,
    /// files, list) and `manage` (create, restart, factory reset, delete). The executor
    /// checks it on every route; a token without it may do nothing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
    /// The caller at the gateway (`session:<sid>` or `user:<sub>`, SPEC §3.6): the owner
    /// of the temporaries made for it. The executor lets no one else reach them (a gateway
    /// that lost its record of one cannot hand it to another user of the team). Empty: the
    /// team itself, which owns only the temporaries made without an owner.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
}

/// A scope of [`Claims::scope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Run commands, follow jobs, read and write files, list computers.
    Exec,
    /// Create, restart, factory-reset and delete computers.
    Manage,
}

impl Scope {
    /// Its name in a token.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Exec => "exec",
            Scope::Manage => "manage",
        }
    }

    /// The `scope` claim granting what `exec` and `manage` say.
    pub fn claim(exec: bool, manage: bool) -> String {
        match (exec, manage) {
            (true, true) => "exec manage".into(),
            (true, false) => "exec".into(),
            (false, true) => "manage".into(),
            (false, false) => String::new(),
        }
    }

    /// Whether the space-separated `claim` grants this scope.
    pub fn granted_by(self, claim: &str) -> bool {
        claim.split_ascii_whitespace().any(|s| s == self.as_str())
    }

    /// May a caller holding `claim` create a new computer of kind `temporary` (SPEC §5)?
    /// A temporary one is the caller's scratch (removed with its session or when idle): a
    /// command or file call makes it with `exec` alone. A permanent one outlives the
    /// caller, and only `manage` deletes it: making it needs `manage`, whatever the path
    /// (`computer_create`, or a command, file or job call on a new id with
    /// `temporary: false`). Using an existing permanent computer needs `exec` only.
    pub fn may_create(claim: &str, temporary: bool) -> Result<(), NeedsManage> {
        match temporary || Scope::Manage.granted_by(claim) {
            true => Ok(()),
            false => Err(NeedsManage {
                has: claim.to_owned(),
            }),
        }
    }
}

/// A new permanent computer asked for by a caller without the `manage` scope
/// ([`Scope::may_create`]): refused (403 at the executor and the gateway, the tool's error
/// result), nothing created, nothing recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "creating a permanent computer needs the `manage` scope (this token has {has:?}): use an existing computer, omit temporary:false for a temporary one, or ask for a token with manage"
)]
pub struct NeedsManage {
    /// The caller's `scope` claim, as it was.
    pub has: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_have_stable_codes() {
        let err = ApiError::new(ErrorCode::NotFound, "no");
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            serde_json::json!({"error": {"code": "not_found", "message": "no"}})
        );
        assert_eq!(ErrorCode::Conflict.http_status(), 409);
        assert_eq!(ErrorCode::Forbidden.http_status(), 403);
    }

    #[test]
    fn scopes_are_read_from_the_claim() {
        assert!(Scope::Exec.granted_by("exec manage"));
        assert!(Scope::Manage.granted_by("manage"));
        assert!(!Scope::Manage.granted_by("exec"));
        assert!(!Scope::Exec.granted_by("executor"));
        assert!(!Scope::Exec.granted_by(""));
        assert_eq!(Scope::claim(true, false), "exec");
        assert!(Scope::Manage.granted_by(&Scope::claim(true, true)));
    }

    /// Issue 46, item 8: a temporary needs `exec` only; a permanent computer needs
    /// `manage`, in words that say what to do instead.
    #[test]
    fn issue_46_creating_a_permanent_computer_needs_manage() {
        assert_eq!(Scope::may_create("exec", true), Ok(()));
        assert_eq!(Scope::may_create("exec manage", false), Ok(()));
        assert_eq!(Scope::may_create("manage", false), Ok(()));
        for claim in ["exec", "", "executor", "managed"] {
            let e = Scope::may_create(claim, false).unwrap_err();
            assert_eq!(e.has, claim);
            let words = e.to_string();
            for part in [
                "creating a permanent computer needs the `manage` scope",
                &format!("(this token has {claim:?})"),
                "use an existing computer",
                "omit temporary:false",
            ] {
                assert!(words.contains(part), "{claim}: {words}");
            }
        }
    }
}

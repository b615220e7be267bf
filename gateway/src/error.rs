//! The gateway's errors, and the one place they become tool results.
//!
//! An executor's or provider's failure keeps its stable [`ErrorCode`] end to end
//! ([`GatewayError::Api`]), so the tool host decides on codes (a delete of a computer that
//! is already gone), never on message text.

use shared::executor_api::{ApiError, ErrorCode};

/// Why a tool call at the edge failed. Messages are for the agent: they say what to do and
/// never carry tokens or provider bodies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// An executor or a provider refused or failed the operation.
    #[error("{0}")]
    Api(ApiError),
    /// The team's Durable Object refused the request (policy) or failed.
    #[error("{message}")]
    Inventory { status: u16, message: String },
    /// The caller's token lacks a scope.
    #[error("this token may not {action} (it lacks the `{scope}` scope)")]
    Scope {
        action: &'static str,
        scope: &'static str,
    },
    /// The gateway's configuration cannot serve the request (said with what to set).
    #[error("{0}")]
    Config(String),
    /// The executor holding the computer does not answer (its process or host is down).
    #[error(
        "executor {executor:?} is unreachable ({detail}): its computers answer again when it does; new computers go to other executors"
    )]
    Unreachable { executor: String, detail: String },
    /// No executor can take a new computer now (all down, draining or refused).
    #[error("{0}")]
    Placement(String),
    /// Talking to the Durable Object or an executor failed below HTTP.
    #[error("{0}")]
    Transport(String),
}

impl GatewayError {
    /// The stable code of this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            GatewayError::Api(e) => e.error.code,
            GatewayError::Inventory { status: 404, .. } => ErrorCode::NotFound,
            GatewayError::Inventory { status: 409, .. } => ErrorCode::Conflict,
            GatewayError::Inventory { status: 400, .. } => ErrorCode::BadRequest,
            // The object's scope refusal (a new permanent computer without `manage`).
            GatewayError::Inventory { status: 403, .. } => ErrorCode::Forbidden,
            GatewayError::Inventory { .. } | GatewayError::Transport(_) => ErrorCode::Internal,
            GatewayError::Scope { .. } => ErrorCode::Forbidden,
            GatewayError::Config(_) => ErrorCode::Internal,
            GatewayError::Unreachable { .. } | GatewayError::Placement(_) => ErrorCode::Engine,
        }
    }
}

impl From<ApiError> for GatewayError {
    fn from(e: ApiError) -> Self {
        GatewayError::Api(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_survive_and_messages_are_the_callers() {
        let e = GatewayError::from(ApiError::new(
            ErrorCode::NotFound,
            "computer \"x\" does not exist",
        ));
        assert_eq!(e.code(), ErrorCode::NotFound);
        assert_eq!(e.to_string(), "computer \"x\" does not exist");
        let e = GatewayError::Inventory {
            status: 409,
            message: "taken".into(),
        };
        assert_eq!(e.code(), ErrorCode::Conflict);
        let e = GatewayError::Scope {
            action: "manage computers",
            scope: "manage",
        };
        assert!(e.to_string().contains("`manage` scope"), "{e}");
        assert_eq!(
            GatewayError::Transport("x".into()).code(),
            ErrorCode::Internal
        );
    }

    /// Issue 46, item 8: the team object's refusal of a new permanent computer (403) is a
    /// scope refusal like the Worker's own, not an internal error.
    #[test]
    fn issue_46_the_objects_scope_refusal_is_forbidden() {
        let refused = GatewayError::Inventory {
            status: 403,
            message: "creating a permanent computer needs the `manage` scope".into(),
        };
        let scope = GatewayError::Scope {
            action: "manage computers",
            scope: "manage",
        };
        assert_eq!(refused.code(), ErrorCode::Forbidden);
        assert_eq!(refused.code(), scope.code());
        assert_eq!(refused.code().http_status(), 403);
    }

    #[test]
    fn every_failure_maps_to_the_code_the_tool_host_decides_on() {
        let inventory = |status| GatewayError::Inventory {
            status,
            message: "m".into(),
        };
        for (e, code) in [
            (inventory(404), ErrorCode::NotFound),
            (inventory(400), ErrorCode::BadRequest),
            (inventory(500), ErrorCode::Internal),
            (inventory(503), ErrorCode::Internal),
            (GatewayError::Config("set X".into()), ErrorCode::Internal),
            (GatewayError::Placement("none".into()), ErrorCode::Engine),
            (
                GatewayError::Unreachable {
                    executor: "a".into(),
                    detail: "refused".into(),
                },
                ErrorCode::Engine,
            ),
            (
                ApiError::new(ErrorCode::TooLarge, "big").into(),
                ErrorCode::TooLarge,
            ),
            (
                ApiError::new(ErrorCode::Unsupported, "no jobs").into(),
                ErrorCode::Unsupported,
            ),
        ] {
            assert_eq!(e.code(), code, "{e:?}");
        }
    }

    #[test]
    fn an_unreachable_executor_is_named_with_what_happens_next() {
        let e = GatewayError::Unreachable {
            executor: "exec-b".into(),
            detail: "connection refused".into(),
        };
        let m = e.to_string();
        assert!(
            m.starts_with("executor \"exec-b\" is unreachable (connection refused)"),
            "{m}"
        );
        assert!(m.contains("new computers go to other executors"), "{m}");
        let e = GatewayError::Inventory {
            status: 503,
            message: "too many sessions: close one".into(),
        };
        assert_eq!(e.to_string(), "too many sessions: close one");
    }
}

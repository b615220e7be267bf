//! [`ModalError`]: what went wrong, with a message meant for the user; gRPC statuses are
//! mapped to it once, in `ModalError::from_status`.

use tonic::{Code, Status};

/// What went wrong, with a message meant for the user.
#[derive(Debug, thiserror::Error)]
pub enum ModalError {
    /// Bad settings (URL, token, resources…), found before calling Modal.
    #[error("Modal settings: {0}")]
    Config(String),
    /// A network policy Modal's rules cannot hold (nothing was sent).
    #[error(transparent)]
    Network(#[from] shared::egress::PortedRule),
    /// Modal rejected the credentials.
    #[error(
        "Modal rejected the credentials ({0}). Create a token with `modal token new` (or at \
         https://modal.com/settings/tokens) and pass it with --modal-token-id/--modal-token-secret \
         or MODAL_TOKEN_ID/MODAL_TOKEN_SECRET"
    )]
    Unauthenticated(String),
    /// The credentials are valid but not allowed to do this.
    #[error("Modal denied the request: {0}")]
    PermissionDenied(String),
    /// An app, image or sandbox does not exist.
    #[error("not found on Modal: {0}")]
    NotFound(String),
    /// The sandbox has ended (terminated, timed out, or its main process exited).
    #[error("Modal sandbox {sandbox_id} has finished ({reason}); create it again")]
    SandboxFinished {
        /// The sandbox.
        sandbox_id: String,
        /// Why, as Modal reports it.
        reason: String,
    },
    /// Modal refused the request's content.
    #[error("Modal rejected the request: {0}")]
    InvalidArgument(String),
    /// A name is taken.
    #[error("already exists on Modal: {0}")]
    AlreadyExists(String),
    /// Modal is unreachable or overloaded.
    #[error("Modal is unavailable ({0}); try again in a moment")]
    Unavailable(String),
    /// Quota or rate limit.
    #[error(
        "Modal refused for lack of resources or quota ({0}); try again later, or check your \
         workspace limits at https://modal.com/settings"
    )]
    ResourceExhausted(String),
    /// A call did not finish in time.
    #[error("Modal did not answer in time: {0}")]
    DeadlineExceeded(String),
    /// Building the image failed.
    #[error("Modal could not build the image {image:?}: {message}")]
    ImageBuild {
        /// The registry reference.
        image: String,
        /// Modal's explanation.
        message: String,
    },
    /// Connection-level failure (TLS, HTTP/2).
    #[error("cannot talk to Modal: {0}")]
    Transport(String),
    /// Modal answered something this client does not understand.
    #[error("unexpected answer from Modal: {0}")]
    Protocol(String),
}

impl ModalError {
    /// Maps a gRPC status of the call `what` (e.g. `SandboxCreate`).
    pub(super) fn from_status(what: &str, s: &Status) -> Self {
        let msg = if s.message().is_empty() {
            format!("{what}: {:?}", s.code())
        } else {
            format!("{what}: {}", s.message())
        };
        match s.code() {
            Code::Unauthenticated => ModalError::Unauthenticated(msg),
            Code::PermissionDenied => ModalError::PermissionDenied(msg),
            Code::NotFound => ModalError::NotFound(msg),
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                ModalError::InvalidArgument(msg)
            }
            Code::AlreadyExists => ModalError::AlreadyExists(msg),
            Code::Unavailable => ModalError::Unavailable(msg),
            Code::ResourceExhausted => ModalError::ResourceExhausted(msg),
            Code::DeadlineExceeded | Code::Cancelled => ModalError::DeadlineExceeded(msg),
            Code::Unknown | Code::Internal | Code::DataLoss | Code::Unimplemented => {
                ModalError::Transport(msg)
            }
            _ => ModalError::Protocol(msg),
        }
    }
}

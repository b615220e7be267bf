//! [`ModalSettings`]: how to reach Modal and what sandboxes to make, with the checks
//! they pass before anything is sent (tokens, names, timeout, resources, GPU spec).

use std::fmt;

use super::{DEFAULT_IMAGE, DEFAULT_SERVER_URL, MAX_SANDBOX_TIMEOUT_SECS, ModalError, pb};

/// How to reach Modal and what sandboxes to make.
#[derive(Clone, PartialEq)]
pub struct ModalSettings {
    /// Control-plane URL, default [`DEFAULT_SERVER_URL`].
    pub server_url: String,
    /// `MODAL_TOKEN_ID` (`ak-…`).
    pub token_id: String,
    /// `MODAL_TOKEN_SECRET` (`as-…`).
    pub token_secret: String,
    /// The app sandboxes belong to (created if missing).
    pub app_name: String,
    /// Registry image reference, default [`DEFAULT_IMAGE`].
    pub image: String,
    /// Image builder version; `None` = [`DEFAULT_IMAGE_BUILDER_VERSION`].
    ///
    /// [`DEFAULT_IMAGE_BUILDER_VERSION`]: super::DEFAULT_IMAGE_BUILDER_VERSION
    pub image_builder_version: Option<String>,
    /// CPU cores requested (fractional); `None` = Modal's default.
    pub cpu: Option<f64>,
    /// Memory in MiB; `None` = Modal's default.
    pub memory_mb: Option<u32>,
    /// GPU, `TYPE` or `TYPE:COUNT` (e.g. `A10G`, `H100:2`).
    pub gpu: Option<String>,
    /// Region (e.g. `us-east`).
    pub region: Option<String>,
    /// Sandbox lifetime in seconds (1..=86400).
    pub sandbox_timeout_secs: u64,
}

impl Default for ModalSettings {
    fn default() -> Self {
        Self {
            server_url: DEFAULT_SERVER_URL.to_owned(),
            token_id: String::new(),
            token_secret: String::new(),
            app_name: "kilntainers".to_owned(),
            image: DEFAULT_IMAGE.to_owned(),
            image_builder_version: None,
            cpu: None,
            memory_mb: None,
            gpu: None,
            region: None,
            sandbox_timeout_secs: 3600,
        }
    }
}

impl fmt::Debug for ModalSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |s: &str| {
            if s.is_empty() {
                "<unset>"
            } else {
                "<redacted>"
            }
        };
        f.debug_struct("ModalSettings")
            .field("server_url", &self.server_url)
            .field("token_id", &redact(&self.token_id))
            .field("token_secret", &redact(&self.token_secret))
            .field("app_name", &self.app_name)
            .field("image", &self.image)
            .field("image_builder_version", &self.image_builder_version)
            .field("cpu", &self.cpu)
            .field("memory_mb", &self.memory_mb)
            .field("gpu", &self.gpu)
            .field("region", &self.region)
            .field("sandbox_timeout_secs", &self.sandbox_timeout_secs)
            .finish()
    }
}

pub(super) fn validate(s: &ModalSettings) -> Result<(), ModalError> {
    if s.token_id.is_empty() || s.token_secret.is_empty() {
        return Err(ModalError::Unauthenticated(
            "no token id or token secret was given".into(),
        ));
    }
    if s.app_name.is_empty() {
        return Err(ModalError::Config("the app name is empty".into()));
    }
    if s.image.is_empty() {
        return Err(ModalError::Config("the image is empty".into()));
    }
    if !(1..=MAX_SANDBOX_TIMEOUT_SECS).contains(&s.sandbox_timeout_secs) {
        return Err(ModalError::Config(format!(
            "the sandbox timeout must be 1..={MAX_SANDBOX_TIMEOUT_SECS} seconds, not {}",
            s.sandbox_timeout_secs
        )));
    }
    if let Some(c) = s.cpu
        && !(c.is_finite() && c > 0.0 && c <= 1000.0)
    {
        return Err(ModalError::Config(format!(
            "the CPU request must be positive, not {c}"
        )));
    }
    if s.memory_mb == Some(0) {
        return Err(ModalError::Config(
            "the memory request must be positive".into(),
        ));
    }
    if let Some(g) = &s.gpu {
        parse_gpu(g)?;
    }
    Ok(())
}

/// `TYPE` or `TYPE:COUNT`, like the SDKs' `parseGPUConfig`.
pub(super) fn parse_gpu(gpu: &str) -> Result<pb::GpuConfig, ModalError> {
    let (ty, count) = match gpu.split_once(':') {
        Some((t, c)) => match c.parse::<u32>() {
            Ok(n) if n >= 1 => (t, n),
            _ => {
                return Err(ModalError::Config(format!(
                    "invalid GPU count {c:?} in {gpu:?}: a positive integer is needed"
                )));
            }
        },
        None => (gpu, 1),
    };
    if ty.is_empty() {
        return Err(ModalError::Config(format!("invalid GPU {gpu:?}")));
    }
    Ok(pb::GpuConfig {
        count,
        gpu_type: ty.to_uppercase(),
        ..Default::default()
    })
}

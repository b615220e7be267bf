//! Fly Machines computers from the local binary (`--backend fly`): the shared sans-I/O
//! client (`shared::providers::fly`) over reqwest.
//!
//! Owns the token lookup (flags, env, the flyctl login cache), the app (given, or generated
//! once and remembered in `<state-dir>/fly.json`) and the reqwest transport; the mapping
//! computer ↔ machine and exec (long commands polled as jobs) are
//! `shared::providers::computers::fly`, which the Worker uses too.

use std::path::Path;

use shared::providers::computers::Owner;
use shared::providers::computers::fly::{FlyComputers, FlySettings};
use shared::providers::fly::{FlyClient, FlyError, default_app_name};

use crate::cloud::{Cloud, Reqwest};

/// The Fly backend.
pub type Fly = Cloud<FlyComputers<Reqwest>>;

pub use shared::providers::computers::fly::DEFAULT_IMAGE;

/// Errors of the Fly backend.
#[derive(Debug, thiserror::Error)]
pub enum FlyBackendError {
    #[error(transparent)]
    Api(#[from] FlyError),
    #[error("cannot read or write {path}: {detail}")]
    State { path: String, detail: String },
}

/// Fly settings from the command line.
#[derive(Clone, PartialEq, Eq)]
pub struct FlyConfig {
    pub api_url: String,
    pub token: String,
    pub app: Option<String>,
    pub org: String,
    /// What new machines look like.
    pub machines: FlySettings,
}

impl std::fmt::Debug for FlyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlyConfig")
            .field("api_url", &self.api_url)
            .field("token", &"<redacted>")
            .field("app", &self.app)
            .field("org", &self.org)
            .field("machines", &self.machines)
            .finish()
    }
}

/// The token and where it came from (for the start-up log).
pub fn find_token(flag: Option<&str>, home: Option<&Path>) -> Option<(String, &'static str)> {
    let from_env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if let Some(t) = flag.filter(|t| !t.trim().is_empty()) {
        return Some((t.trim().to_owned(), "--fly-token"));
    }
    if let Some(t) = from_env("FLY_API_TOKEN") {
        return Some((t.trim().to_owned(), "FLY_API_TOKEN"));
    }
    if let Some(t) = from_env("FLY_TOKEN") {
        return Some((t.trim().to_owned(), "FLY_TOKEN"));
    }
    let config = home?.join(".fly").join("config.yml");
    let text = std::fs::read_to_string(config).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("access_token:"))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
        .filter(|v| !v.is_empty())
        .map(|t| (t, "the flyctl login (~/.fly/config.yml)"))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FlyState {
    app: String,
    org: String,
}

/// The Fly backend. Connects: checks the token and makes sure the app exists (creating
/// and remembering a generated one on first use).
pub async fn open(
    cfg: FlyConfig,
    state_dir: &Path,
    instance: String,
    host: String,
) -> Result<Fly, FlyBackendError> {
    let client = FlyClient::new(cfg.api_url.clone(), cfg.token.clone(), Reqwest::new());
    let state_file = state_dir.join("fly.json");
    let app = match &cfg.app {
        Some(app) => app.clone(),
        None => match read_state(&state_file)? {
            Some(s) if client.get_app(&s.app).await?.is_some() => s.app,
            _ => {
                let app = default_app_name(rand::random());
                client.create_app(&app, &cfg.org).await?;
                write_state(
                    &state_file,
                    &FlyState {
                        app: app.clone(),
                        org: cfg.org.clone(),
                    },
                )?;
                tracing::info!(
                    app,
                    org = cfg.org,
                    "created a Fly app for computers (remembered in fly.json)"
                );
                app
            }
        },
    };
    let settings = cfg.machines.clone();
    let owner = Owner {
        instance: instance.clone(),
        host,
    };
    let inner = FlyComputers::new(client, app, settings, owner);
    if cfg.app.is_some() && inner.ensure_app(&cfg.org).await? {
        tracing::info!(app = inner.app(), org = cfg.org, "created the Fly app");
    }
    Ok(Cloud::new(inner, instance))
}

fn read_state(path: &Path) -> Result<Option<FlyState>, FlyBackendError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| FlyBackendError::State {
                path: path.display().to_string(),
                detail: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FlyBackendError::State {
            path: path.display().to_string(),
            detail: e.to_string(),
        }),
    }
}

fn write_state(path: &Path, s: &FlyState) -> Result<(), FlyBackendError> {
    let err = |e: &dyn std::fmt::Display| FlyBackendError::State {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
    }
    let bytes = serde_json::to_vec_pretty(s).map_err(|e| err(&e))?;
    std::fs::write(path, bytes).map_err(|e| err(&e))
}

/// The exact command that logs in, for the start-up error.
pub fn login_hint(fly_cli: &str) -> String {
    format!("{fly_cli} auth login")
}

//! Modal computers (`--backend modal`): each computer is a Modal sandbox of `--image`
//! (resolved like the SDKs' `Image.from_registry`) in the app `--modal-app-name`, named
//! after the computer and tagged like Fly machines and E2B sandboxes
//! (`shared::providers::computers::tags`). Modal speaks gRPC only ([`client`], tonic over
//! the saved protos in `specs/modal`), which a Worker cannot do: the gateway reaches Modal
//! computers through an executor started with this backend.
//!
//! Lifecycle: a sandbox lives at most `--sandbox-timeout` (Modal's limit is 24 h) and
//! cannot be stopped and started again. Restart therefore snapshots the filesystem
//! (`SandboxSnapshotFs`), ends the sandbox and starts a new one from the snapshot with the
//! same name and tags, so files survive; factory reset starts a new one from the base
//! image; delete terminates it. A permanent computer whose sandbox reached its timeout is
//! gone with its files (said in the tool description).

pub mod client;
mod place;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shared::egress::Policy;
use shared::lifecycle::ComputerState;
use shared::providers::computers::{Owner, tags};
use shared::result::{ExecOutcome, OutputCollector, Stream, TIMEOUT_EXIT_CODE};

use crate::spec::{ContainerRecord, ExecSpec};
use client::{ModalClient, ModalError, ModalSettings, SandboxInfo};

/// Errors of the Modal backend.
#[derive(Debug, thiserror::Error)]
pub enum ModalBackendError {
    #[error(transparent)]
    Api(#[from] ModalError),
    #[error(
        "computer {0:?} does not exist; create it with computer_create or pass it to the exec tool"
    )]
    NotFound(String),
}

/// The token and where it came from (for the start-up log): `--modal-token-id/-secret`,
/// `MODAL_TOKEN_ID`/`MODAL_TOKEN_SECRET`, or the active profile of `~/.modal.toml` (what
/// `modal token new` writes).
pub fn find_token(
    flag_id: Option<&str>,
    flag_secret: Option<&str>,
    home: Option<&Path>,
) -> Option<(String, String, &'static str)> {
    let nonempty = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    if let (Some(id), Some(secret)) = (
        nonempty(flag_id.map(str::to_owned)),
        nonempty(flag_secret.map(str::to_owned)),
    ) {
        return Some((id, secret, "--modal-token-id/--modal-token-secret"));
    }
    if let (Some(id), Some(secret)) = (
        nonempty(std::env::var("MODAL_TOKEN_ID").ok()),
        nonempty(std::env::var("MODAL_TOKEN_SECRET").ok()),
    ) {
        return Some((id, secret, "MODAL_TOKEN_ID/MODAL_TOKEN_SECRET"));
    }
    let text = std::fs::read_to_string(home?.join(".modal.toml")).ok()?;
    let (id, secret) = profile_token(&text)?;
    Some((id, secret, "the Modal CLI login (~/.modal.toml)"))
}

/// The token of the active profile of a `.modal.toml` (the first profile when none is
/// marked `active = true`). A small reader for the file's flat `[profile]` tables.
fn profile_token(text: &str) -> Option<(String, String)> {
    #[derive(Default)]
    struct Profile {
        id: Option<String>,
        secret: Option<String>,
        active: bool,
    }
    let mut profiles: Vec<Profile> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            profiles.push(Profile::default());
            continue;
        }
        let (Some(p), Some((k, v))) = (profiles.last_mut(), line.split_once('=')) else {
            continue;
        };
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_owned();
        match k.trim() {
            "token_id" => p.id = Some(v),
            "token_secret" => p.secret = Some(v),
            "active" => p.active = v == "true",
            _ => {}
        }
    }
    let usable = |p: &&Profile| p.id.is_some() && p.secret.is_some();
    let p = profiles
        .iter()
        .filter(usable)
        .find(|p| p.active)
        .or_else(|| profiles.iter().find(usable))?;
    Some((p.id.clone()?, p.secret.clone()?))
}

/// The exact command that logs in, for the start-up error.
pub const LOGIN_HINT: &str = "modal token new";

/// The Modal backend.
#[derive(Debug, Clone)]
pub struct Modal {
    client: ModalClient,
    image: String,
    instance: String,
    owner: Owner,
    /// Sandbox ids by computer id (a computer's sandbox changes on restart and reset).
    ids: Arc<Mutex<HashMap<String, String>>>,
}

/// A sandbox's network policy, from its tag (none: the open network).
fn network_of(tags: &HashMap<String, String>) -> Policy {
    tags.get(tags::NETWORK)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Policy::All)
}

impl Modal {
    /// Connects: checks the token, gets or creates the app, resolves the image.
    pub async fn open(
        settings: ModalSettings,
        instance: String,
        host: String,
    ) -> Result<Self, ModalBackendError> {
        let image = settings.image.clone();
        let client = ModalClient::connect(settings).await?;
        Ok(Self {
            client,
            image,
            owner: Owner {
                instance: instance.clone(),
                host,
            },
            instance,
            ids: Arc::default(),
        })
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, s: &SandboxInfo) -> Option<ContainerRecord> {
        Some(ContainerRecord {
            computer_id: s.tags.get(tags::ID)?.clone(),
            provider_id: s.sandbox_id.clone(),
            temporary: s.tags.get(tags::TEMPORARY).map(String::as_str) == Some("true"),
            instance: s.tags.get(tags::INSTANCE).cloned(),
            host: s.tags.get(tags::HOST).cloned(),
            image: self.image.clone(),
            state: match s.running {
                true => ComputerState::Running,
                false => ComputerState::Stopped,
            },
            created_at: shared::history::rfc3339_utc((s.created_at.max(0.0) * 1000.0) as u64),
            team: s.tags.get(tags::TEAM).cloned(),
            network: Some(network_of(&s.tags)),
        })
    }

    async fn sandbox(&self, id: &str) -> Result<Option<SandboxInfo>, ModalBackendError> {
        let found = self
            .client
            .list(&[(tags::ID.to_owned(), id.to_owned())])
            .await?
            .into_iter()
            .find(|s| s.running);
        let mut ids = self.ids();
        match &found {
            Some(s) => ids.insert(id.to_owned(), s.sandbox_id.clone()),
            None => ids.remove(id),
        };
        Ok(found)
    }

    async fn sandbox_id(&self, id: &str) -> Result<String, ModalBackendError> {
        let cached = self.ids().get(id).cloned();
        match cached {
            Some(s) => Ok(s),
            None => self
                .sandbox(id)
                .await?
                .map(|s| s.sandbox_id)
                .ok_or_else(|| ModalBackendError::NotFound(id.to_owned())),
        }
    }

    pub async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, ModalBackendError> {
        Ok(self.sandbox(id).await?.and_then(|s| self.record(&s)))
    }

    pub async fn list(&self) -> Result<Vec<ContainerRecord>, ModalBackendError> {
        Ok(self
            .client
            .list(&[(tags::MANAGED.to_owned(), "true".to_owned())])
            .await?
            .iter()
            .filter(|s| s.running)
            .filter_map(|s| self.record(s))
            .collect())
    }

    /// A new sandbox for computer `id`, from the base image or a snapshot.
    async fn make(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        image_id: Option<&str>,
        network: &Policy,
    ) -> Result<ContainerRecord, ModalBackendError> {
        let mut t = tags::of(id, temporary, &self.owner, team);
        if *network != Policy::All {
            t.push((
                tags::NETWORK.to_owned(),
                serde_json::to_string(network).unwrap_or_default(),
            ));
        }
        let sandbox_id = match image_id {
            Some(image) => {
                self.client
                    .create_from_image(id, &t, image, network)
                    .await?
            }
            None => self.client.create(id, &t, network).await?,
        };
        self.ids().insert(id.to_owned(), sandbox_id.clone());
        Ok(ContainerRecord {
            computer_id: id.to_owned(),
            provider_id: sandbox_id,
            temporary,
            instance: temporary.then(|| self.owner.instance.clone()),
            host: temporary.then(|| self.owner.host.clone()),
            image: self.image.clone(),
            state: ComputerState::Running,
            created_at: String::new(),
            team: team.map(str::to_owned),
            network: Some(network.clone()),
        })
    }

    pub async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
    ) -> Result<ContainerRecord, ModalBackendError> {
        match self.make(id, temporary, team, None, network).await {
            // Another server made it first (names are unique among running sandboxes).
            Err(ModalBackendError::Api(ModalError::AlreadyExists(_))) => self
                .find(id)
                .await?
                .ok_or_else(|| ModalBackendError::NotFound(id.to_owned())),
            other => other,
        }
    }

    /// A sandbox that ended cannot be started again: the computer is gone.
    pub async fn start(&self, id: &str) -> Result<(), ModalBackendError> {
        self.sandbox_id(id).await.map(|_| ())
    }

    /// Snapshot, terminate, and a new sandbox from the snapshot (files survive).
    pub async fn restart(&self, id: &str) -> Result<(), ModalBackendError> {
        let old = self
            .sandbox(id)
            .await?
            .ok_or_else(|| ModalBackendError::NotFound(id.to_owned()))?;
        let temporary = old.tags.get(tags::TEMPORARY).map(String::as_str) == Some("true");
        let team = old.tags.get(tags::TEAM).cloned();
        let network = network_of(&old.tags);
        let image = self.client.snapshot_fs(&old.sandbox_id).await?;
        self.client.terminate(&old.sandbox_id).await?;
        self.ids().remove(id);
        self.make(id, temporary, team.as_deref(), Some(&image), &network)
            .await
            .map(|_| ())
    }

    pub async fn remove(&self, id: &str) -> Result<(), ModalBackendError> {
        if let Some(s) = self.sandbox(id).await? {
            self.client.terminate(&s.sandbox_id).await?;
        }
        self.ids().remove(id);
        Ok(())
    }

    pub async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
    ) -> Result<ContainerRecord, ModalBackendError> {
        self.remove(id).await?;
        self.make(id, temporary, team, None, network).await
    }

    pub async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, ModalBackendError> {
        let argv = spec.provider_argv();
        let stdin = spec.stdin.as_deref().map(str::as_bytes);
        let started = std::time::Instant::now();
        let run = |sandbox: String| {
            let argv = &argv;
            async move {
                self.client
                    .exec(
                        &sandbox,
                        argv,
                        stdin,
                        None,
                        &[],
                        spec.timeout,
                        spec.output_limit + 1,
                    )
                    .await
            }
        };
        let out = match run(self.sandbox_id(id).await?).await {
            // The remembered sandbox ended (restarted or reset by another server): look
            // the computer up again.
            Err(ModalError::SandboxFinished { .. } | ModalError::NotFound(_)) => {
                self.ids().remove(id);
                run(self.sandbox_id(id).await?).await?
            }
            other => other?,
        };
        let mut collector = OutputCollector::new(spec.output_limit);
        collector.push(Stream::Stdout, &out.stdout);
        collector.push(Stream::Stderr, &out.stderr);
        let (stdout, stderr, truncated) = collector.finish();
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code: if out.timed_out {
                TIMEOUT_EXIT_CODE
            } else {
                i64::from(out.exit_code)
            },
            duration_ms: started.elapsed().as_millis() as u64,
            truncated_at: (truncated || out.truncated).then_some(spec.output_limit as u64),
            timed_out_after: out
                .timed_out
                .then_some(spec.timeout.as_secs().max(1))
                .filter(|_| spec.timeout > Duration::ZERO),
            oom_killed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_active_profile_of_modal_toml() {
        let text = "[old]\ntoken_id = \"ak-old\"\ntoken_secret = \"as-old\"\n\n[work]\ntoken_id = \"ak-work\"\ntoken_secret = \"as-work\"\nactive = true\n";
        assert_eq!(
            profile_token(text),
            Some(("ak-work".into(), "as-work".into()))
        );
        let text = "[only]\ntoken_id = 'ak-1'\ntoken_secret = 'as-1'\n";
        assert_eq!(profile_token(text), Some(("ak-1".into(), "as-1".into())));
        assert_eq!(profile_token("[p]\ntoken_id = \"x\"\n"), None);
        assert_eq!(profile_token("garbage = = ["), None);
    }
}

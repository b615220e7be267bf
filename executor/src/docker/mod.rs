//! Docker and Podman computers through the Engine API (bollard; no CLI subprocesses).
//!
//! Owns container naming and labels (compatible with the older project: container
//! `kilntainer-<id>`, labels `kilntainers*`), creation with default limits, discovery,
//! restart, factory reset, delete and the reaping of temporaries left by dead servers.
//! Exec lives in [`exec`], image pulls and container creation in `create.rs`. Must not
//! decide who may reach a computer: that is the lifecycle policy's job, applied by
//! `computers`.

mod archive;
mod archive_stream;
mod archive_write;
pub mod channel;
mod create;
pub mod disk;
pub mod exec;
mod files;
pub mod flags;
mod gate;
mod jobs;
mod place;
pub mod pool;
pub mod settings;
mod snapshots;
pub mod supervised;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    ListContainersOptions, RemoveContainerOptions, RestartContainerOptions, StartContainerOptions,
};

use crate::progress::Progress;
pub use settings::{DockerConfig, DockerEndpoint};

/// Container name prefix (compatible with the older project).
pub const NAME_PREFIX: &str = "kilntainer-";
pub const LABEL_OURS: &str = "kilntainers";
pub const LABEL_ID: &str = "kilntainers.computer-id";
pub const LABEL_TEMPORARY: &str = "kilntainers.temporary";
pub const LABEL_IMAGE: &str = "kilntainers.image";
/// The server instance that owns a temporary computer.
pub const LABEL_INSTANCE: &str = "mcp-sandbox.instance";
/// The machine that server runs on (reaping only judges its own machine's instances).
pub const LABEL_HOST: &str = "mcp-sandbox.host";
/// The team of a computer an executor made for the gateway (absent on a local server's).
pub const LABEL_TEAM: &str = "mcp-sandbox.team";
/// A computer's network policy (SPEC §3.11), its serde JSON text (absent on containers
/// made before it: the server's policy applies).
pub const LABEL_NETWORK: &str = "msc.network";

/// How long a new (or restarted) computer's supervisor may take to come to its door.
const ARM_AT_START: Duration = Duration::from_secs(5);

/// Errors of the Docker layer. Messages are for the agent: no host paths, no bodies.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error(
        "cannot reach the container engine ({0}); start Docker (or Podman) or pass --docker-host"
    )]
    Unreachable(String),
    #[error(
        "image {image:?} is not available locally and could not be pulled ({detail}); load or build it (docker pull / docker load) or choose another --image"
    )]
    ImageUnavailable { image: String, detail: String },
    #[error(
        "a container named {name:?} exists but was not created by this server (no kilntainers label); choose another computer_id or remove that container"
    )]
    NotOurs { name: String },
    #[error(
        "computer {0:?} does not exist; create it with computer_create or pass it to terminal_execute"
    )]
    NotFound(String),
    #[error(
        "computer {0:?} is not running and could not be started; try computer_restart or computer_factory_reset"
    )]
    NotRunning(String),
    #[error("the container engine refused the request: {0}")]
    Engine(String),
    /// No snapshot image of that id (deleted, or made on another engine).
    #[error(
        "snapshot {0:?} does not exist on this engine; computer_snapshots lists a computer's snapshots"
    )]
    NoSnapshot(String),
    /// The egress gate could not confine a computer with an allow list (it was not used).
    #[error("{0}")]
    Egress(String),
    /// `--disk` on an engine whose storage driver cannot limit a container's size.
    #[error(
        "--disk needs a storage driver that limits each container's size, and this engine's ({driver}) cannot: {detail}. Drivers that can: {}. Move the engine's data root to such a filesystem, or start without --disk (a computer can then fill the engine's disk)",
        disk::SUPPORTED
    )]
    DiskLimit { driver: String, detail: String },
    /// The computer's supervisor cannot be reached (nothing was run; plain exec may follow).
    #[error("the computer's supervisor is unavailable: {0}")]
    SupervisorUnavailable(String),
    #[error("the computer stopped while the command ran: {0}")]
    Stream(String),
    /// The supervisor failed during a command (its output so far is lost with it).
    #[error(
        "the computer's supervisor failed during the command ({0}); run it again: the next call reconnects, or uses Engine API exec"
    )]
    Supervisor(String),
    /// The supervisor has no such job.
    #[error("{0}")]
    NoSuchJob(String),
    /// The supervisor refused a job request (e.g. the 64-job cap), in its words.
    #[error("{0}")]
    Job(String),
    /// This computer cannot keep jobs, and why.
    #[error("{0}")]
    NoJobs(String),
    /// No such file or directory in the computer (the message says what to do).
    #[error("{0}")]
    NoSuchFile(String),
    /// A file operation was refused, changing nothing (a directory, an existing file with
    /// `create_only`, a read-only or full disk...), in the computer's words.
    #[error("{0}")]
    File(String),
}

impl DockerError {
    fn from_bollard(e: BollardError) -> Self {
        match e {
            BollardError::DockerResponseServerError {
                status_code,
                message,
            } => DockerError::Engine(format!("{status_code}: {message}")),
            other => DockerError::Unreachable(other.to_string()),
        }
    }
}

fn status_of(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// One of our computers as its backend shows it (a container here; `provider_id` is the
/// container id).
pub use crate::spec::ContainerRecord;

/// The Docker backend.
#[derive(Debug, Clone)]
pub struct Docker {
    client: bollard::Docker,
    cfg: DockerConfig,
    instance: String,
    host: String,
    /// Cleared when the engine says it has no init binary.
    init_available: Arc<AtomicBool>,
    /// The supervisor binary placed in new computers (None: plain Engine API exec).
    supervisor: Option<Arc<Vec<u8>>>,
    /// Relay connections to supervisors, by container name.
    connections: Arc<supervised::Connections>,
    /// Whether a container runs the supervisor, as learnt from its label or its creation.
    supervised_cache: Arc<std::sync::Mutex<HashMap<String, bool>>>,
    /// What is known of the volume holding the supervisor; `None` until first use.
    supervisor_volume: Arc<tokio::sync::Mutex<Option<supervised::Volume>>>,
    /// Started computers kept ready for new slugs (`--warm-pool`).
    pool: Option<Arc<pool::Pool>>,
    /// The supervisor understands `--host-door` (the direct channel, [`channel`]).
    supervisor_has_channel: bool,
    /// Whether the direct channel works with this engine, as learnt.
    channel_learnt: Arc<channel::Learnt>,
    /// Each container's host directory of the direct channel, by container name.
    channels: Arc<std::sync::Mutex<HashMap<String, PathBuf>>>,
    /// The egress gate and the computers it confines ([`gate`]).
    gatekeeper: Arc<gate::Gatekeeper>,
    /// This server committed a snapshot or fork image: a removal may leave one unused.
    images_made: Arc<AtomicBool>,
}

/// Formats unix seconds as RFC 3339 UTC (no clock crate needed).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// A container to create, and what it is for.
#[derive(Debug, Clone, Copy)]
struct Making<'a> {
    /// Its container name (a warm-pool member's is not yet its computer's).
    name: &'a str,
    computer_id: &'a str,
    temporary: bool,
    team: Option<&'a str>,
    /// Its network policy (SPEC §3.11).
    network: &'a shared::egress::Policy,
    /// A warm-pool member ([`pool`]).
    pooled: bool,
    /// The image it starts from when not the configured one: a snapshot's or a fork's
    /// ([`snapshots`]).
    image: Option<&'a str>,
}

/// Label `key`'s value when set and not empty: a computer made from a snapshot inherits
/// the labels of the container the snapshot was taken of, so those that only some
/// computers carry are set empty on the others.
fn label<'a>(labels: &'a HashMap<String, String>, key: &str) -> Option<&'a String> {
    labels.get(key).filter(|v| !v.is_empty())
}

/// The container name of a computer.
pub fn container_name(computer_id: &str) -> String {
    format!("{NAME_PREFIX}{computer_id}")
}

fn record_from_labels(
    labels: &HashMap<String, String>,
    container_id: String,
    state: String,
    created_at: String,
    fallback_image: &str,
) -> Option<ContainerRecord> {
    if labels.get(LABEL_OURS).map(String::as_str) != Some("true") {
        return None;
    }
    Some(ContainerRecord {
        computer_id: labels.get(LABEL_ID)?.clone(),
        provider_id: container_id,
        temporary: labels.get(LABEL_TEMPORARY).map(String::as_str) != Some("false"),
        instance: label(labels, LABEL_INSTANCE).cloned(),
        host: label(labels, LABEL_HOST).cloned(),
        image: labels
            .get(LABEL_IMAGE)
            .cloned()
            .unwrap_or_else(|| fallback_image.to_owned()),
        state: state.as_str().into(),
        created_at,
        team: label(labels, LABEL_TEAM).cloned(),
        network: labels
            .get(LABEL_NETWORK)
            .and_then(|text| serde_json::from_str(text).ok()),
    })
}

impl Docker {
    /// Connects, negotiates the API version and pings the engine.
    pub async fn connect(
        cfg: DockerConfig,
        instance: String,
        host: String,
    ) -> Result<Self, DockerError> {
        // Attached execs may stream for as long as the longest timeout.
        const TIMEOUT_SECS: u64 = 90_000;
        let version = bollard::API_DEFAULT_VERSION;
        let client = match &cfg.endpoint {
            DockerEndpoint::Default if cfg.podman => {
                bollard::Docker::connect_with_podman_defaults()
            }
            DockerEndpoint::Default => {
                bollard::Docker::connect_with_unix("/var/run/docker.sock", TIMEOUT_SECS, version)
            }
            DockerEndpoint::Unix(path) => {
                bollard::Docker::connect_with_unix(path, TIMEOUT_SECS, version)
            }
            DockerEndpoint::Http(addr) => {
                bollard::Docker::connect_with_http(addr, TIMEOUT_SECS, version)
            }
        }
        .map_err(|e| DockerError::Unreachable(e.to_string()))?
        .with_timeout(Duration::from_secs(TIMEOUT_SECS));
        let client = client
            .negotiate_version()
            .await
            .map_err(|e| DockerError::Unreachable(e.to_string()))?;
        client
            .ping()
            .await
            .map_err(|e| DockerError::Unreachable(e.to_string()))?;
        let gate = crate::egress::Gate::new(
            &cfg.egress_pins,
            cfg.egress_dns,
            &cfg.egress_secrets,
            cfg.egress_ca_file.as_deref(),
        )
        .map_err(|e| DockerError::Egress(e.to_string()))?;
        Ok(Self {
            client,
            cfg,
            instance,
            host,
            init_available: Arc::new(AtomicBool::new(true)),
            supervisor: None,
            connections: Arc::default(),
            supervised_cache: Arc::default(),
            supervisor_volume: Arc::default(),
            pool: None,
            supervisor_has_channel: false,
            channel_learnt: Arc::default(),
            channels: Arc::default(),
            gatekeeper: Arc::new(gate::Gatekeeper::new(gate)),
            images_made: Arc::default(),
        })
    }

    /// Keeps `size` started computers ready for new slugs (0: none); [`Docker::start_pool`]
    /// starts filling it.
    pub fn with_pool(mut self, size: usize) -> Self {
        self.pool = (size > 0).then(|| Arc::new(pool::Pool::new(size)));
        self
    }

    /// Does this server place the supervisor in the computers it makes?
    pub fn places_supervisor(&self) -> bool {
        self.supervisor.is_some()
    }

    /// Places `binary` (the static supervisor) in computers created from now on.
    pub fn with_supervisor(mut self, binary: Option<Vec<u8>>) -> Self {
        // A supervisor given with --supervisor may predate the direct channel's door: one
        // that does not know the flag would refuse to start as PID 1.
        self.supervisor_has_channel = binary
            .as_ref()
            .is_some_and(|b| b.windows(11).any(|w| w == b"--host-door"));
        self.supervisor = binary.map(Arc::new);
        self
    }

    fn remember_supervised(&self, container: &str, yes: bool) {
        self.supervised_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(container.to_owned(), yes);
    }

    /// Remembers what a container's labels say of its supervisor and its direct channel.
    fn remember_labels(&self, container: &str, labels: &HashMap<String, String>) {
        let yes = labels.get(supervised::LABEL_SUPERVISOR).map(String::as_str) == Some("1");
        self.remember_supervised(container, yes);
        let dir = self.cfg.channel_dir.as_deref().and_then(|base| {
            label(labels, channel::LABEL_CHANNEL).and_then(|l| channel::dir_from_label(base, l))
        });
        let mut channels = supervised::lock(&self.channels);
        match dir {
            Some(d) if yes => channels.insert(container.to_owned(), d),
            _ => channels.remove(container),
        };
    }

    /// The host directory of `container`'s direct channel, when it has one that is worth
    /// trying (known from its creation or its labels).
    pub(super) fn channel_of(&self, container: &str) -> Option<PathBuf> {
        if !self.channel_learnt.worth_trying() {
            return None;
        }
        supervised::lock(&self.channels).get(container).cloned()
    }

    fn forget(&self, container: &str) {
        self.supervised_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(container);
        self.drop_connection(container);
    }

    /// Does `container` run the supervisor? (One inspect per container, then cached.)
    pub async fn is_supervised(&self, container: &str) -> bool {
        if let Some(v) = self
            .supervised_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(container)
        {
            return *v;
        }
        match self.client.inspect_container(container, None).await {
            Ok(c) => {
                let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
                self.remember_labels(container, &labels);
                labels.get(supervised::LABEL_SUPERVISOR).map(String::as_str) == Some("1")
            }
            Err(_) => {
                self.remember_supervised(container, false);
                false
            }
        }
    }

    pub fn client(&self) -> &bollard::Docker {
        &self.client
    }

    pub fn image(&self) -> &str {
        &self.cfg.image
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Finds a computer's container. `Err(NotOurs)` when the name is held by something else.
    pub async fn find(&self, computer_id: &str) -> Result<Option<ContainerRecord>, DockerError> {
        self.find_named(&container_name(computer_id), computer_id)
            .await
    }

    /// [`Docker::find`] of container `name` (a warm-pool member's is not the computer's).
    async fn find_named(
        &self,
        name: &str,
        computer_id: &str,
    ) -> Result<Option<ContainerRecord>, DockerError> {
        let name = name.to_owned();
        match self.client.inspect_container(&name, None).await {
            Ok(c) => {
                let labels = c
                    .config
                    .as_ref()
                    .and_then(|c| c.labels.clone())
                    .unwrap_or_default();
                let state = c
                    .state
                    .as_ref()
                    .and_then(|s| s.status)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "unknown".into());
                let created = c.created.clone().unwrap_or_default();
                if labels.get(LABEL_OURS).map(String::as_str) == Some("true") {
                    // What the first exec would inspect for: learnt here for free.
                    self.remember_labels(&name, &labels);
                }
                record_from_labels(
                    &labels,
                    c.id.unwrap_or_default(),
                    state,
                    created,
                    &self.cfg.image,
                )
                .filter(|r| r.computer_id == computer_id)
                .map(Some)
                .ok_or(DockerError::NotOurs { name })
            }
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(DockerError::from_bollard(e)),
        }
    }

    /// Every container (running or not) with all of `labels` (`key` or `key=value`).
    pub(super) async fn list_labelled(
        &self,
        labels: Vec<String>,
    ) -> Result<Vec<bollard::models::ContainerSummary>, DockerError> {
        self.client
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([("label".to_owned(), labels)])),
                ..Default::default()
            }))
            .await
            .map_err(DockerError::from_bollard)
    }

    /// Lists all our containers.
    pub async fn list(&self) -> Result<Vec<ContainerRecord>, DockerError> {
        let list = self
            .list_labelled(vec![format!("{LABEL_OURS}=true")])
            .await?;
        Ok(list
            .into_iter()
            .filter(|c| {
                // A warm-pool member is not a computer until it is handed out.
                !c.names
                    .iter()
                    .flatten()
                    .any(|n| n.trim_start_matches('/').starts_with(pool::NAME_PREFIX))
            })
            .filter_map(|c| {
                let labels = c.labels.unwrap_or_default();
                let state = c
                    .state
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "unknown".into());
                record_from_labels(
                    &labels,
                    c.id.unwrap_or_default(),
                    state,
                    rfc3339(c.created.unwrap_or_default()),
                    &self.cfg.image,
                )
            })
            .collect())
    }

    /// Starts a stopped computer (e.g. after the engine restarted).
    pub async fn start(&self, computer_id: &str) -> Result<(), DockerError> {
        let name = container_name(computer_id);
        if self.start_named(&name, computer_id).await? {
            self.release(&name);
        }
        self.ensure_confined(&name).await
    }

    /// Starts container `name`: `true` when it was stopped (its network namespace is new).
    async fn start_named(&self, name: &str, computer_id: &str) -> Result<bool, DockerError> {
        match self
            .client
            .start_container(name, None::<StartContainerOptions>)
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if status_of(&e) == Some(304) => Ok(false),
            Err(e) if status_of(&e) == Some(404) => Err(DockerError::NotFound(computer_id.into())),
            Err(e) => Err(DockerError::from_bollard(e)),
        }
    }

    /// Restarts a computer, keeping its writable filesystem.
    pub async fn restart(&self, computer_id: &str) -> Result<(), DockerError> {
        let name = container_name(computer_id);
        self.drop_connection(&name);
        let opts = RestartContainerOptions {
            t: Some(2),
            ..Default::default()
        };
        match self.client.restart_container(&name, Some(opts)).await {
            Ok(()) => {}
            Err(e) if status_of(&e) == Some(404) => {
                return Err(DockerError::NotFound(computer_id.into()));
            }
            Err(e) => return Err(DockerError::from_bollard(e)),
        }
        // A new network namespace: an allow list holds again before anything runs.
        self.release(&name);
        self.ensure_confined(&name).await?;
        // The new supervisor waits at its door for a listener (else the next exec arms it).
        if let Some(dir) = self.channel_of(&name)
            && let Err(why) = self.arm_channel(&name, &dir, ARM_AT_START).await
        {
            tracing::debug!(
                computer_id,
                %why,
                "the direct channel was not armed after a restart"
            );
        }
        Ok(())
    }

    /// Binds a fresh listening socket in `container`'s host directory and hands it to its
    /// supervisor (PID 1) through the door, waiting up to `within`. `Err`: why not.
    pub(super) async fn arm_channel(
        &self,
        container: &str,
        dir: &Path,
        within: Duration,
    ) -> Result<(), channel::DoorError> {
        let d = dir.to_owned();
        let door = tokio::task::spawn_blocking(move || channel::open_door(&d))
            .await
            .map_err(|e| channel::DoorError::Io("open the door", std::io::Error::other(e)))??;
        let pid = self
            .pid_of(container)
            .await
            .ok_or(channel::DoorError::NotRunning)?;
        door.hand_over(pid, within).await
    }

    /// The host PID of `container`'s first process, while it runs.
    pub(super) async fn pid_of(&self, container: &str) -> Option<i32> {
        self.client
            .inspect_container(container, None)
            .await
            .ok()
            .and_then(|c| c.state?.pid)
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 0)
    }

    /// Removes a computer and its anonymous volumes. `Ok(false)` if it was already gone.
    pub async fn remove(&self, computer_id: &str) -> Result<bool, DockerError> {
        let name = container_name(computer_id);
        let removed = self.remove_container(&name).await;
        // A computer made from a snapshot or a fork held its image by a tag of its own.
        self.drop_image_of(&name).await;
        removed
    }

    async fn remove_container(&self, name: &str) -> Result<bool, DockerError> {
        self.forget(name);
        self.release(name);
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let removed = match self.client.remove_container(name, Some(opts)).await {
            Ok(()) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            // 409: removal already in progress.
            Err(e) if status_of(&e) == Some(409) => Ok(true),
            Err(e) => Err(DockerError::from_bollard(e)),
        };
        // Its host directory goes with it (one this server never saw goes in a sweep), off
        // the runtime's workers: other callers never wait for a big directory.
        let dir = removed
            .is_ok()
            .then(|| supervised::lock(&self.channels).remove(name))
            .flatten();
        if let Some(dir) = dir {
            channel::remove(dir).await;
        }
        removed
    }

    /// A fresh host directory for a new computer's direct channel, when it is worth one.
    async fn new_channel_dir(&self, supervised: bool, computer_id: &str) -> Option<channel::Held> {
        let base = self.cfg.channel_dir.clone()?;
        if !supervised || !self.supervisor_has_channel || !self.channel_learnt.worth_trying() {
            return None;
        }
        let id = computer_id.to_owned();
        let made = tokio::task::spawn_blocking(move || channel::make_dir(&base, &id))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        match made {
            Ok(held) => Some(held),
            Err(e) => {
                self.channel_learnt.failed(&format!(
                    "cannot make a directory in {}: {e}",
                    self.cfg
                        .channel_dir
                        .as_deref()
                        .unwrap_or(Path::new(""))
                        .display()
                ));
                None
            }
        }
    }

    /// Removes direct-channel directories that no container names (their computers were
    /// removed while no server of this state directory watched, or by a server killed
    /// before it could) and that no live server is making. Returns how many. The
    /// directories are locked first and the containers listed after, so one whose
    /// container is being created is either held by its maker or named in the list.
    pub async fn sweep_channels(&self) -> Result<usize, DockerError> {
        let Some(base) = self.cfg.channel_dir.clone() else {
            return Ok(0);
        };
        let held = tokio::task::spawn_blocking(move || channel::lock_all(&base))
            .await
            .unwrap_or_default();
        if held.is_empty() {
            return Ok(0);
        }
        let list = self
            .list_labelled(vec![channel::LABEL_CHANNEL.to_owned()])
            .await?;
        let in_use: Vec<PathBuf> = list
            .into_iter()
            .filter_map(|c| label(&c.labels?, channel::LABEL_CHANNEL).map(PathBuf::from))
            .collect();
        Ok(
            tokio::task::spawn_blocking(move || channel::remove_unnamed(held, &in_use))
                .await
                .unwrap_or(0),
        )
    }

    /// Erases the writable filesystem: remove, then create again from the image.
    pub async fn factory_reset(
        &self,
        computer_id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, DockerError> {
        self.remove(computer_id).await?;
        self.create(computer_id, temporary, team, network, progress)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_000_000), "2026-11-30T00:53:20Z");
    }

    #[test]
    fn labels_identify_ours() {
        let mut l = HashMap::new();
        assert!(record_from_labels(&l, "c".into(), "running".into(), "t".into(), "img").is_none());
        l.insert(LABEL_OURS.to_owned(), "true".to_owned());
        l.insert(LABEL_ID.to_owned(), "box".to_owned());
        l.insert(LABEL_TEMPORARY.to_owned(), "false".to_owned());
        let r = record_from_labels(&l, "c".into(), "running".into(), "t".into(), "img").unwrap();
        assert_eq!(
            (r.computer_id.as_str(), r.temporary, r.image.as_str()),
            ("box", false, "img")
        );
        // No network label (a container made before it): not known, the server's applies.
        assert_eq!(r.network, None);
        let allow = shared::egress::Policy::allow(["pypi.org"]).unwrap();
        l.insert(
            LABEL_NETWORK.to_owned(),
            serde_json::to_string(&allow).unwrap(),
        );
        let r = record_from_labels(&l, "c".into(), "running".into(), "t".into(), "img").unwrap();
        assert_eq!(r.network, Some(allow));
        l.insert(LABEL_NETWORK.to_owned(), "\"none\"".to_owned());
        let r = record_from_labels(&l, "c".into(), "running".into(), "t".into(), "img").unwrap();
        assert_eq!(r.network, Some(shared::egress::Policy::None));
    }
}

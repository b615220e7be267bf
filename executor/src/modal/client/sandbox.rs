//! Sandboxes on the control plane: create (retried; a create whose answer was lost is
//! found again by its unique name), list by tags, set tags, terminate, and filesystem
//! snapshots.

use std::collections::HashMap;

use tonic::Code;

use shared::egress::Policy;

use super::settings::parse_gpu;
use super::transport::{backoff, retryable};
use super::{ModalClient, ModalError, RETRY_ATTEMPTS, pb};

/// A sandbox as [`ModalClient::list`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxInfo {
    /// `sb-…`.
    pub sandbox_id: String,
    /// The name given at creation ("" if none).
    pub name: String,
    /// Its tags.
    pub tags: HashMap<String, String>,
    /// Creation time, Unix seconds.
    pub created_at: f64,
    /// Whether it is still running.
    pub running: bool,
}

/// A network policy as Modal's `NetworkAccess` (SPEC §3.11): `all` leaves it unset (open),
/// `none` is `BLOCKED`, an allow list is `ALLOWLIST` with its names as `allowed_domains`
/// and its addresses and networks as `allowed_cidrs`. A rule with a port is refused
/// (Modal's lists have none).
pub fn network_access(policy: &Policy) -> Result<Option<pb::NetworkAccess>, ModalError> {
    use pb::network_access::NetworkAccessType;
    Ok(match policy {
        Policy::All => None,
        Policy::None => Some(pb::NetworkAccess {
            network_access_type: NetworkAccessType::Blocked as i32,
            ..Default::default()
        }),
        Policy::Allow(_) => {
            let d = policy.destinations("Modal")?.unwrap_or_default();
            Some(pb::NetworkAccess {
                network_access_type: NetworkAccessType::Allowlist as i32,
                allowed_cidrs: d.nets,
                allowed_domains: d.names,
            })
        }
    })
}

impl ModalClient {
    /// Creates a sandbox from the configured image; returns its id (`sb-…`). `name` must
    /// be unique among the app's running sandboxes (Modal: letters, digits, `-`, `_`, `.`,
    /// at most 64) or empty.
    pub async fn create(
        &self,
        name: &str,
        tags: &[(String, String)],
        network: &Policy,
    ) -> Result<String, ModalError> {
        self.create_from_image(name, tags, &self.inner.image_id.clone(), network)
            .await
    }

    /// Like [`ModalClient::create`], from an image id (e.g. from [`ModalClient::snapshot_fs`]).
    pub async fn create_from_image(
        &self,
        name: &str,
        tags: &[(String, String)],
        image_id: &str,
        network: &Policy,
    ) -> Result<String, ModalError> {
        let network_access = network_access(network)?;
        let s = &self.inner.settings;
        let gpu_config = s.gpu.as_deref().map(parse_gpu).transpose()?;
        let resources = pb::Resources {
            milli_cpu: s.cpu.map(|c| (c * 1000.0).round() as u32).unwrap_or(0),
            memory_mb: s.memory_mb.unwrap_or(0),
            gpu_config,
            ..Default::default()
        };
        let definition = pb::Sandbox {
            image_id: image_id.to_owned(),
            timeout_secs: s.sandbox_timeout_secs as u32,
            resources: Some(resources),
            scheduler_placement: s.region.as_ref().map(|r| pb::SchedulerPlacement {
                regions: vec![r.clone()],
                ..Default::default()
            }),
            name: (!name.is_empty()).then(|| name.to_owned()),
            network_access,
            ..Default::default()
        };
        let req = pb::SandboxCreateRequest {
            app_id: self.inner.app_id.clone(),
            definition: Some(definition),
            tags: to_tags(tags),
            ..Default::default()
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut cp = self.inner.cp.clone();
            match cp.sandbox_create(self.request(req.clone())).await {
                Ok(r) => {
                    let id = r.into_inner().sandbox_id;
                    if id.is_empty() {
                        return Err(ModalError::Protocol(
                            "SandboxCreate returned no sandbox id".into(),
                        ));
                    }
                    return Ok(id);
                }
                Err(e) if attempt > 1 && e.code() == Code::AlreadyExists && !name.is_empty() => {
                    // An earlier attempt did create it before its answer was lost.
                    if let Some(found) = self.list(tags).await?.into_iter().find(|x| x.name == name)
                    {
                        return Ok(found.sandbox_id);
                    }
                    return Err(ModalError::from_status("SandboxCreate", &e));
                }
                Err(e) if retryable(&e) && attempt < RETRY_ATTEMPTS => {
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(ModalError::from_status("SandboxCreate", &e)),
            }
        }
    }

    /// The app's running sandboxes carrying all of `tags`, newest first.
    pub async fn list(&self, tags: &[(String, String)]) -> Result<Vec<SandboxInfo>, ModalError> {
        let mut out: Vec<SandboxInfo> = Vec::new();
        let mut before = 0.0;
        loop {
            let req = pb::SandboxListRequest {
                app_id: self.inner.app_id.clone(),
                before_timestamp: before,
                tags: to_tags(tags),
                ..Default::default()
            };
            let page = self
                .retry(
                    "SandboxList",
                    |mut cp, r| async move { cp.sandbox_list(r).await },
                    req,
                )
                .await?
                .sandboxes;
            let Some(oldest) = page.iter().map(|s| s.created_at).reduce(f64::min) else {
                break;
            };
            for s in page {
                if out.iter().any(|o| o.sandbox_id == s.id) {
                    continue;
                }
                let running = s
                    .task_info
                    .as_ref()
                    .is_none_or(|t| t.finished_at == 0.0 && t.result.is_none());
                out.push(SandboxInfo {
                    sandbox_id: s.id,
                    name: s.name,
                    tags: s
                        .tags
                        .into_iter()
                        .map(|t| (t.tag_name, t.tag_value))
                        .collect(),
                    created_at: s.created_at,
                    running,
                });
            }
            if oldest >= before && before != 0.0 {
                break; // The server ignored the cursor; stop rather than loop.
            }
            before = oldest;
        }
        Ok(out)
    }

    /// Replaces a sandbox's tags.
    pub async fn set_tags(
        &self,
        sandbox_id: &str,
        tags: &[(String, String)],
    ) -> Result<(), ModalError> {
        let req = pb::SandboxTagsSetRequest {
            sandbox_id: sandbox_id.to_owned(),
            tags: to_tags(tags),
            ..Default::default()
        };
        self.retry(
            "SandboxTagsSet",
            |mut cp, r| async move { cp.sandbox_tags_set(r).await },
            req,
        )
        .await
    }

    /// Terminates a sandbox (a no-op if it has finished) and waits up to 10 s for it to
    /// end, so that [`ModalClient::list`] no longer shows it.
    pub async fn terminate(&self, sandbox_id: &str) -> Result<(), ModalError> {
        let req = pb::SandboxTerminateRequest {
            sandbox_id: sandbox_id.to_owned(),
        };
        self.retry(
            "SandboxTerminate",
            |mut cp, r| async move { cp.sandbox_terminate(r).await },
            req,
        )
        .await?;
        self.inner.routers.lock().await.remove(sandbox_id);
        let req = pb::SandboxWaitRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: 10.0,
        };
        self.retry(
            "SandboxWait",
            |mut cp, r| async move { cp.sandbox_wait(r).await },
            req,
        )
        .await?;
        Ok(())
    }

    /// Saves the sandbox's filesystem as an image (`SandboxSnapshotFs`); returns its id.
    /// To restart with the same files: snapshot, terminate, [`ModalClient::create_from_image`].
    pub async fn snapshot_fs(&self, sandbox_id: &str) -> Result<String, ModalError> {
        let req = pb::SandboxSnapshotFsRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: 55.0,
        };
        let r = self
            .retry(
                "SandboxSnapshotFs",
                |mut cp, r| async move { cp.sandbox_snapshot_fs(r).await },
                req,
            )
            .await?;
        if let Some(res) = &r.result
            && res.status() != pb::generic_result::GenericStatus::Success
        {
            return Err(ModalError::InvalidArgument(format!(
                "SandboxSnapshotFs of {sandbox_id} failed: {}",
                result_text(res)
            )));
        }
        if r.image_id.is_empty() {
            return Err(ModalError::Protocol(
                "SandboxSnapshotFs returned no image id".into(),
            ));
        }
        Ok(r.image_id)
    }
}

fn to_tags(tags: &[(String, String)]) -> Vec<pb::SandboxTag> {
    tags.iter()
        .map(|(k, v)| pb::SandboxTag {
            tag_name: k.clone(),
            tag_value: v.clone(),
        })
        .collect()
}

pub(super) fn result_text(r: &pb::GenericResult) -> String {
    let status = r.status().as_str_name();
    let status = status.strip_prefix("GENERIC_STATUS_").unwrap_or(status);
    if r.exception.is_empty() {
        format!("{}, exit code {}", status.to_lowercase(), r.exitcode)
    } else {
        format!("{}: {}", status.to_lowercase(), r.exception)
    }
}

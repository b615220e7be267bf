//! The image and container-creation path: pulling the image, the create body (labels,
//! default limits, the supervisor's mounts and entrypoint), creation with its fallbacks
//! (no direct channel, no init binary) and the first start.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, DeviceMapping, HostConfig, Mount, MountType, ResourcesUlimits,
};
use bollard::query_parameters::{CreateContainerOptions, CreateImageOptions};
use futures_util::StreamExt;

use super::{
    ARM_AT_START, Docker, DockerError, LABEL_HOST, LABEL_ID, LABEL_IMAGE, LABEL_INSTANCE,
    LABEL_NETWORK, LABEL_OURS, LABEL_TEAM, LABEL_TEMPORARY, Making, channel, container_name, disk,
    pool, status_of, supervised,
};
use crate::progress::Progress;
use crate::spec::ContainerRecord;

/// PID 1's program: sleeps forever, exits at once on SIGTERM/SIGINT (so stop and restart
/// never wait out a grace period, with or without `--init`).
const KEEPALIVE: &str = "trap 'exit 0' TERM INT HUP; while :; do sleep 86400 & wait $!; done";

/// Does this error say the engine cannot provide `--init`?
fn init_missing(e: &BollardError) -> bool {
    match e {
        BollardError::DockerResponseServerError { message, .. } => {
            let m = message.to_ascii_lowercase();
            m.contains("container-init") || m.contains("docker-init") || m.contains("init binary")
        }
        _ => false,
    }
}

impl Docker {
    /// Makes sure the image exists locally, pulling it if needed. Returns its id.
    pub async fn ensure_image(&self, progress: &Progress) -> Result<String, DockerError> {
        let image = &self.cfg.image;
        match self.client.inspect_image(image).await {
            Ok(i) => return Ok(i.id.unwrap_or_default()),
            Err(e) if status_of(&e) == Some(404) => {}
            Err(e) => return Err(DockerError::from_bollard(e)),
        }
        tracing::info!(image, "pulling image");
        progress.report(&format!("pulling image {image}"));
        let mut last_status = String::new();
        let opts = CreateImageOptions {
            from_image: Some(image.clone()),
            ..Default::default()
        };
        let mut stream = self.client.create_image(Some(opts), None, None);
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(status) = info.status
                        && status != last_status
                    {
                        tracing::debug!(image, status, "pull");
                        progress.report(&format!("pulling image {image}: {status}"));
                        last_status = status;
                    }
                }
                Err(e) => {
                    return Err(DockerError::ImageUnavailable {
                        image: image.clone(),
                        detail: e.to_string(),
                    });
                }
            }
        }
        let pulled = self
            .client
            .inspect_image(image)
            .await
            .map_err(DockerError::from_bollard)?;
        Ok(pulled.id.unwrap_or_default())
    }

    fn create_body(
        &self,
        m: Making<'_>,
        init: bool,
        supervisor_volume: Option<&str>,
        channel: Option<&Path>,
    ) -> ContainerCreateBody {
        let Making {
            computer_id,
            temporary,
            team,
            network,
            pooled,
            image,
            ..
        } = m;
        let offline = *network == shared::egress::Policy::None;
        let supervised = supervisor_volume.is_some();
        let f = &self.cfg.run_flags;
        let mut labels: HashMap<String, String> = f.labels.iter().cloned().collect();
        // From a snapshot's image, which carries the labels of the container it was taken
        // of: the labels only some computers carry are cleared here, set below if they
        // apply (readers take an empty label for none, `super::label`).
        if image.is_some() {
            for key in [
                supervised::LABEL_SUPERVISOR,
                channel::LABEL_CHANNEL,
                LABEL_TEAM,
                LABEL_INSTANCE,
                LABEL_HOST,
                pool::LABEL_POOL,
            ] {
                labels.insert(key.into(), String::new());
            }
        }
        labels.insert(LABEL_OURS.into(), "true".into());
        labels.insert(LABEL_ID.into(), computer_id.into());
        labels.insert(LABEL_TEMPORARY.into(), temporary.to_string());
        labels.insert(LABEL_IMAGE.into(), self.cfg.image.clone());
        if supervised {
            labels.insert(supervised::LABEL_SUPERVISOR.into(), "1".into());
        }
        if let Some(dir) = channel {
            labels.insert(
                channel::LABEL_CHANNEL.into(),
                dir.to_string_lossy().into_owned(),
            );
        }
        if let Some(team) = team {
            labels.insert(LABEL_TEAM.into(), team.into());
        }
        // A pool member, permanent ones too, says whose it is until it is handed out.
        if temporary || pooled {
            labels.insert(LABEL_INSTANCE.into(), self.instance.clone());
            labels.insert(LABEL_HOST.into(), self.host.clone());
        }
        if pooled {
            labels.insert(pool::LABEL_POOL.into(), "1".into());
        }
        // Its policy, for the list, a factory reset and the egress gate.
        labels.insert(
            LABEL_NETWORK.into(),
            serde_json::to_string(network).unwrap_or_default(),
        );
        let network_mode = if offline {
            Some("none".to_owned())
        } else {
            f.network_mode.clone()
        };
        let host_config = HostConfig {
            init: Some(init),
            network_mode,
            nano_cpus: self.cfg.nano_cpus,
            memory: self.cfg.memory_bytes,
            memory_swap: f.memory_swap,
            pids_limit: f.pids_limit,
            readonly_rootfs: Some(f.read_only),
            cap_add: (!f.cap_add.is_empty()).then(|| f.cap_add.clone()),
            cap_drop: {
                // Behind the egress gate, root inside may neither change the rules
                // (NET_ADMIN) nor go around them with packet sockets (NET_RAW).
                let mut drop = f.cap_drop.clone();
                if matches!(network, shared::egress::Policy::Allow(_)) {
                    for cap in ["NET_ADMIN", "NET_RAW"] {
                        if !drop.iter().any(|c| c.trim_start_matches("CAP_") == cap) {
                            drop.push(cap.to_owned());
                        }
                    }
                }
                (!drop.is_empty()).then_some(drop)
            },
            security_opt: (!f.security_opt.is_empty()).then(|| f.security_opt.clone()),
            tmpfs: (!f.tmpfs.is_empty()).then(|| f.tmpfs.iter().cloned().collect()),
            shm_size: f.shm_size,
            storage_opt: self.cfg.disk_bytes.map(disk::storage_opt),
            binds: (!f.binds.is_empty()).then(|| f.binds.clone()),
            privileged: Some(f.privileged),
            extra_hosts: (!f.extra_hosts.is_empty()).then(|| f.extra_hosts.clone()),
            dns: (!f.dns.is_empty()).then(|| f.dns.clone()),
            cpuset_cpus: f.cpuset_cpus.clone(),
            ulimits: (!f.ulimits.is_empty()).then(|| {
                f.ulimits
                    .iter()
                    .map(|(name, soft, hard)| ResourcesUlimits {
                        name: Some(name.clone()),
                        soft: Some(*soft),
                        hard: Some(*hard),
                    })
                    .collect()
            }),
            runtime: f.runtime.clone(),
            mounts: supervisor_volume.map(|v| {
                let mut mounts = vec![Mount {
                    target: Some(supervised::VOLUME_TARGET.into()),
                    source: Some(v.into()),
                    typ: Some(MountType::VOLUME),
                    read_only: Some(true),
                    ..Default::default()
                }];
                // A bind mount, not `binds`: a source the engine cannot see fails the
                // create (and the relay serves) instead of being made on its host. Read-only:
                // nothing of the computer's lands on the host through it (the server binds
                // the socket and hands it over, `channel::Door`).
                if let Some(dir) = channel {
                    mounts.push(Mount {
                        target: Some(channel::MOUNT_TARGET.into()),
                        source: Some(dir.to_string_lossy().into_owned()),
                        typ: Some(MountType::BIND),
                        read_only: Some(true),
                        ..Default::default()
                    });
                }
                mounts
            }),
            devices: (!f.devices.is_empty()).then(|| {
                f.devices
                    .iter()
                    .map(|d| {
                        let mut parts = d.split(':');
                        let host = parts.next().unwrap_or_default().to_owned();
                        let inside = parts
                            .next()
                            .map(str::to_owned)
                            .unwrap_or_else(|| host.clone());
                        DeviceMapping {
                            path_on_host: Some(host),
                            path_in_container: Some(inside),
                            cgroup_permissions: Some(parts.next().unwrap_or("rwm").to_owned()),
                        }
                    })
                    .collect()
            }),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(image.unwrap_or(&self.cfg.image).to_owned()),
            // The caller's id, never the team's key prefix.
            hostname: Some(f.hostname.clone().unwrap_or_else(|| {
                shared::teams::id_of(team, computer_id)
                    .unwrap_or(computer_id)
                    .to_owned()
            })),
            labels: Some(labels),
            entrypoint: Some(if supervised {
                let mut argv: Vec<String> = vec![
                    supervised::SUPERVISOR_PATH.into(),
                    "init".into(),
                    "--socket".into(),
                    supervised::SOCKET_PATH.into(),
                ];
                if channel.is_some() {
                    argv.extend(["--host-door".into(), channel::DOOR_IN_COMPUTER.into()]);
                }
                argv
            } else {
                vec!["/bin/sh".into(), "-c".into(), KEEPALIVE.into()]
            }),
            cmd: Some(vec![]),
            env: Some(self.computer_env(network)),
            user: f.user.clone(),
            working_dir: f.workdir.clone(),
            network_disabled: offline.then_some(true),
            host_config: Some(host_config),
            ..Default::default()
        }
    }

    /// An allow list is kept by rules in the computer's own network namespace, which root
    /// inside must not be able to change: refused with `--privileged`, with NET_ADMIN,
    /// NET_RAW or ALL added back, and with the host's (or another container's) network.
    pub(super) fn gate_allows_flags(
        &self,
        network: &shared::egress::Policy,
    ) -> Result<(), DockerError> {
        if !matches!(network, shared::egress::Policy::Allow(_)) {
            return Ok(());
        }
        let f = &self.cfg.run_flags;
        let added = f.cap_add.iter().find(|c| {
            matches!(
                c.trim_start_matches("CAP_").to_ascii_uppercase().as_str(),
                "NET_ADMIN" | "NET_RAW" | "ALL"
            )
        });
        let shared_net = f
            .network_mode
            .as_deref()
            .filter(|m| *m == "host" || m.starts_with("container:"));
        let why = match (f.privileged, added, shared_net) {
            (true, _, _) => "--privileged".to_owned(),
            (_, Some(cap), _) => format!("--cap-add {cap}"),
            (_, _, Some(mode)) => format!("--network {mode}"),
            _ => return Ok(()),
        };
        Err(DockerError::Egress(format!(
            "a computer with a network allow list cannot be made with the docker run flag {why}: root inside could undo the egress gate; drop that flag, or ask for network \"all\" or \"none\""
        )))
    }

    /// Creates and starts a computer. If another process created it first, returns theirs.
    /// `team`: the gateway's team an executor makes it for (labelled; `computer_id` is then
    /// its key, `shared::teams`).
    pub async fn create(
        &self,
        computer_id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, DockerError> {
        self.gate_allows_flags(network)?;
        let image_id = self.ensure_image(progress).await?;
        if team.is_none()
            && let Some(r) = self
                .hand_out(computer_id, temporary, network, &image_id)
                .await
        {
            return Ok(r);
        }
        let _counted = self.on_demand();
        let name = container_name(computer_id);
        let m = Making {
            name: &name,
            computer_id,
            temporary,
            team,
            network,
            pooled: false,
            image: None,
        };
        self.create_named(m, progress).await
    }

    /// Creates and starts the container `m` says (the image is there).
    pub(super) async fn create_named(
        &self,
        m: Making<'_>,
        progress: &Progress,
    ) -> Result<ContainerRecord, DockerError> {
        let Making {
            name,
            computer_id,
            image,
            ..
        } = m;
        progress.report(&format!(
            "creating computer {computer_id} from {}",
            image.unwrap_or(&self.cfg.image)
        ));
        let f = &self.cfg.run_flags;
        // A supervisor needs to write its socket as root: --user and --read-only forbid it.
        if let Some(binary) = self.supervisor.clone()
            && f.user.is_none()
            && !f.read_only
        {
            match self.supervisor_volume(&binary).await {
                Ok(volume) => match self.create_with(m, progress, Some(&volume)).await {
                    Ok(r) => return Ok(r),
                    Err(e @ DockerError::ImageUnavailable { .. }) => return Err(e),
                    Err(e) => {
                        tracing::warn!(computer_id, error = %e, "the supervisor cannot run in this computer; using plain Engine API exec");
                        let _ = self.remove_container(name).await;
                    }
                },
                // Said once when it was learnt (another architecture).
                Err(DockerError::SupervisorUnavailable(_)) => {}
                Err(e) => {
                    tracing::warn!(computer_id, error = %e, "the supervisor volume is not ready; using plain Engine API exec");
                }
            }
        }
        self.create_with(m, progress, None).await
    }

    async fn create_with(
        &self,
        m: Making<'_>,
        progress: &Progress,
        supervisor_volume: Option<&str>,
    ) -> Result<ContainerRecord, DockerError> {
        let Making {
            name,
            computer_id,
            pooled,
            network,
            ..
        } = m;
        let supervised = supervisor_volume.is_some();
        let opts = CreateContainerOptions {
            name: Some(name.to_owned()),
            ..Default::default()
        };
        let init =
            !supervised && self.cfg.run_flags.init && self.init_available.load(Ordering::Relaxed);
        // Held (locked against sweeps) until the container that names it exists.
        let mut held = self.new_channel_dir(supervised, computer_id).await;
        let mut channel = held.as_ref().map(|h| h.dir.clone());
        let mut result = self
            .client
            .create_container(
                Some(opts.clone()),
                self.create_body(m, init, supervisor_volume, channel.as_deref()),
            )
            .await;
        // Refused for a reason other than the name or the image: the engine may not be
        // able to mount this host's directory (its host is not ours). Try without.
        let refused = match &result {
            Err(e) if disk::unsupported(&e.to_string()) => None,
            Err(e) if !matches!(status_of(e), Some(404 | 409)) => Some(e.to_string()),
            _ => None,
        };
        if let Some(why) = refused
            && let Some(dir) = channel.take()
        {
            channel::remove(dir).await;
            held = None;
            self.channel_learnt.failed(&why);
            result = self
                .client
                .create_container(
                    Some(opts.clone()),
                    self.create_body(m, init, supervisor_volume, None),
                )
                .await;
        }
        if init
            && let Err(e) = &result
            && init_missing(e)
        {
            // Podman without catatonit, or a Docker without docker-init: PID 1 is then our
            // own keep-alive shell, which still exits at once on SIGTERM.
            tracing::warn!(error = %e, "the engine has no init binary; computers run without --init");
            self.init_available.store(false, Ordering::Relaxed);
            result = self
                .client
                .create_container(
                    Some(opts),
                    self.create_body(m, false, supervisor_volume, None),
                )
                .await;
        }
        if result.is_err()
            && let Some(dir) = channel.take()
        {
            channel::remove(dir).await;
        }
        // The container names it now (or it is gone): a sweep may judge it.
        drop(held);
        if let Some(dir) = &channel {
            supervised::lock(&self.channels).insert(name.to_owned(), dir.clone());
        }
        match result {
            Ok(_) => {}
            Err(e) if status_of(&e) == Some(409) && !pooled => {
                // Lost a race with another creator: use what is there (the caller re-checks policy).
                return self
                    .find(computer_id)
                    .await?
                    .ok_or_else(|| DockerError::NotFound(computer_id.into()));
            }
            Err(e) if status_of(&e) == Some(404) => {
                return Err(DockerError::ImageUnavailable {
                    image: self.cfg.image.clone(),
                    detail: e.to_string(),
                });
            }
            Err(e) if self.cfg.disk_bytes.is_some() && disk::unsupported(&e.to_string()) => {
                return Err(self.disk_refused(&e.to_string()).await);
            }
            Err(e) => return Err(DockerError::from_bollard(e)),
        }
        progress.report(&format!("starting computer {computer_id}"));
        let started = match self.start_named(name, computer_id).await {
            // An allow list holds before anything of the computer's runs.
            Ok(_) => self.confine(name, network).await,
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            // Leave nothing behind for a computer that never ran.
            let _ = self.remove_container(name).await;
            return Err(e);
        }
        if let Some(dir) = &channel
            && let Err(e) = self.arm_channel(name, dir, ARM_AT_START).await
        {
            if e.is_transient() {
                // A supervisor slow to come (a loaded host): the first exec that finds
                // nothing listening arms it again.
                tracing::debug!(computer_id, why = %e, "the direct channel was not armed yet");
            } else {
                // This computer relays (and, if the channel never worked here, later ones
                // get no directory).
                supervised::lock(&self.channels).remove(name);
                self.channel_learnt.failed(&e.to_string());
            }
        }
        self.remember_supervised(name, supervised);
        self.find_named(name, computer_id)
            .await?
            .ok_or_else(|| DockerError::NotFound(computer_id.into()))
    }
}

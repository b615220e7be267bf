//! Snapshots and forks of Docker/Podman computers (SPEC §3.12): a snapshot is an image
//! committed from the computer's container with its processes paused for the copy
//! (`pause=true`: consistent, and the engine's own speed), tagged `msc-snapshot:<id>` and
//! labelled with what the controller needs, so snapshots survive restarts and outlive
//! their computer. A fork commits its source the same way into an untagged image of its
//! own and starts a container from it; a restore starts one from the snapshot under the
//! computer's name. Images nothing uses any more (a deleted snapshot's, once its last
//! fork is gone; a fork's, once the fork is) are pruned by label.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bollard::models::ContainerConfig;
use bollard::query_parameters::{
    CommitContainerOptions, ListImagesOptions, PruneImagesOptions, RemoveImageOptions,
};

use super::{Docker, DockerError, Making, container_name, label, status_of};
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ForkSource, SnapshotMeta, SnapshotRecord};

/// The repository of snapshot images (`msc-snapshot:<snapshot id>`).
const REPO: &str = "msc-snapshot";
/// A fork's image while its container is made (`msc-fork:<container name>`).
const FORK_REPO: &str = "msc-fork";
/// The snapshot's id: set on every image this module commits (empty on a fork's).
const LABEL_SNAPSHOT: &str = "msc.snapshot";
const LABEL_OF: &str = "msc.snapshot.of";
const LABEL_TEXT: &str = "msc.snapshot.label";
const LABEL_AT: &str = "msc.snapshot.created-ms";
const LABEL_TEAM: &str = "msc.snapshot.team";
const LABEL_OWNER: &str = "msc.snapshot.owner";

/// The labels of a snapshot's image (every key set: a later commit of a computer made
/// from it inherits them, so each is overwritten).
fn snapshot_labels(of: &str, meta: &SnapshotMeta<'_>) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_SNAPSHOT.into(), meta.snapshot_id.into()),
        (LABEL_OF.into(), of.into()),
        (LABEL_TEXT.into(), meta.label.into()),
        (LABEL_AT.into(), meta.created_ms.to_string()),
        (LABEL_TEAM.into(), meta.team.unwrap_or_default().into()),
        (LABEL_OWNER.into(), meta.owner.unwrap_or_default().into()),
        (
            super::LABEL_NETWORK.into(),
            serde_json::to_string(meta.network).unwrap_or_default(),
        ),
    ])
}

/// A fork's image: ours (pruned when unused), and no snapshot.
fn fork_labels() -> HashMap<String, String> {
    [
        LABEL_SNAPSHOT,
        LABEL_OF,
        LABEL_TEXT,
        LABEL_AT,
        LABEL_TEAM,
        LABEL_OWNER,
    ]
    .into_iter()
    .map(|k| (k.to_owned(), String::new()))
    .chain([(LABEL_OF.to_owned(), "fork".to_owned())])
    .collect()
}

/// The snapshot an image listed as `summary` is, if it is one.
fn record_of(
    summary: &bollard::models::ImageSummary,
    sizes: &HashMap<&str, i64>,
) -> Option<SnapshotRecord> {
    let labels = &summary.labels;
    let snapshot_id = label(labels, LABEL_SNAPSHOT)?;
    let tagged = summary
        .repo_tags
        .iter()
        .any(|t| t.strip_prefix(REPO).and_then(|t| t.strip_prefix(':')) == Some(snapshot_id));
    if !tagged || !shared::snapshots::is_id(snapshot_id) {
        return None;
    }
    // What it adds to its parent (the computer's image); the whole image where the engine
    // does not say which that is.
    let parent = sizes.get(summary.parent_id.as_str()).copied().unwrap_or(0);
    Some(SnapshotRecord {
        snapshot_id: snapshot_id.clone(),
        of: label(labels, LABEL_OF)?.clone(),
        team: label(labels, LABEL_TEAM).cloned(),
        owner: label(labels, LABEL_OWNER).cloned(),
        label: labels.get(LABEL_TEXT).cloned().unwrap_or_default(),
        created_ms: labels
            .get(LABEL_AT)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0),
        size_bytes: u64::try_from(summary.size.saturating_sub(parent)).unwrap_or(0),
        memory: false,
        network: labels
            .get(super::LABEL_NETWORK)
            .and_then(|text| serde_json::from_str(text).ok()),
    })
}

fn snapshot_ref(snapshot_id: &str) -> String {
    format!("{REPO}:{snapshot_id}")
}

impl Docker {
    /// Commits container `name` (paused for the copy) as `repo:tag` with `labels`.
    async fn commit(
        &self,
        name: &str,
        repo: &str,
        tag: &str,
        labels: HashMap<String, String>,
    ) -> Result<String, DockerError> {
        self.images_made.store(true, Ordering::Relaxed);
        let opts = CommitContainerOptions {
            container: Some(name.to_owned()),
            repo: Some(repo.to_owned()),
            tag: Some(tag.to_owned()),
            pause: true,
            ..Default::default()
        };
        let config = ContainerConfig {
            labels: Some(labels),
            ..Default::default()
        };
        match self.client.commit_container(opts, config).await {
            Ok(r) => Ok(r.id),
            Err(e) if status_of(&e) == Some(404) => Err(DockerError::NotFound(name.to_owned())),
            Err(e) => Err(DockerError::from_bollard(e)),
        }
    }

    /// Keeps computer `key`'s filesystem as snapshot `meta.snapshot_id`.
    pub async fn snapshot_take(
        &self,
        key: &str,
        meta: &SnapshotMeta<'_>,
    ) -> Result<SnapshotRecord, DockerError> {
        let name = container_name(key);
        self.commit(&name, REPO, meta.snapshot_id, snapshot_labels(key, meta))
            .await?;
        let listed = self.snapshot_list().await?;
        listed
            .into_iter()
            .find(|s| s.snapshot_id == meta.snapshot_id)
            .ok_or_else(|| DockerError::NoSnapshot(meta.snapshot_id.to_owned()))
    }

    /// Every snapshot image on the engine.
    pub async fn snapshot_list(&self) -> Result<Vec<SnapshotRecord>, DockerError> {
        let all = self
            .client
            .list_images(Some(ListImagesOptions {
                all: true,
                ..Default::default()
            }))
            .await
            .map_err(DockerError::from_bollard)?;
        let sizes: HashMap<&str, i64> = all.iter().map(|i| (i.id.as_str(), i.size)).collect();
        Ok(all.iter().filter_map(|i| record_of(i, &sizes)).collect())
    }

    /// Removes snapshot `snapshot_id`'s tag (its image goes once no computer uses it).
    pub async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, DockerError> {
        let opts = RemoveImageOptions {
            force: true,
            noprune: false,
            ..Default::default()
        };
        let removed = match self
            .client
            .remove_image(&snapshot_ref(snapshot_id), Some(opts), None)
            .await
        {
            Ok(_) => true,
            Err(e) if status_of(&e) == Some(404) => false,
            Err(e) => return Err(DockerError::from_bollard(e)),
        };
        self.prune_unused().await;
        Ok(removed)
    }

    /// Removes our images that nothing uses and no tag names (errors are logged: an
    /// engine pruning already, or one that cannot, leaves them for the next time).
    pub(super) async fn prune_unused(&self) {
        if !self.images_made.load(Ordering::Relaxed) {
            return;
        }
        let filters = HashMap::from([
            ("dangling".to_owned(), vec!["true".to_owned()]),
            ("label".to_owned(), vec![LABEL_OF.to_owned()]),
        ]);
        let opts = PruneImagesOptions {
            filters: Some(filters),
        };
        if let Err(e) = self.client.prune_images(Some(opts)).await {
            tracing::debug!(error = %e, "could not prune unused snapshot and fork images");
        }
    }

    /// At start: images of servers that are gone (forks removed since) are pruned, and
    /// later removals prune too when the engine holds any image of ours.
    pub(super) async fn sweep_images(&self) {
        let opts = ListImagesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![LABEL_OF.to_owned()],
            )])),
            ..Default::default()
        };
        if let Ok(ours) = self.client.list_images(Some(opts)).await
            && !ours.is_empty()
        {
            self.images_made.store(true, Ordering::Relaxed);
            self.prune_unused().await;
        }
    }

    /// Computer `key`, made from image `image` (a snapshot's or a fork's), as
    /// [`Docker::create`] makes one from the configured image (no warm-pool member).
    async fn create_from(
        &self,
        image: &str,
        key: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, DockerError> {
        self.gate_allows_flags(network)?;
        let _counted = self.on_demand();
        let name = container_name(key);
        let m = Making {
            name: &name,
            computer_id: key,
            temporary,
            team,
            network,
            pooled: false,
            image: Some(image),
        };
        self.create_named(m, progress).await
    }

    /// Computer `key` (new) with the files of `from`.
    pub async fn fork(
        &self,
        from: ForkSource<'_>,
        key: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, DockerError> {
        let image = match from {
            ForkSource::Snapshot(sid) => {
                self.snapshot_image(sid).await?;
                snapshot_ref(sid)
            }
            ForkSource::Computer(src) => {
                progress.report(&format!("copying the files of {src}"));
                let tag = container_name(key);
                self.commit(&container_name(src), FORK_REPO, &tag, fork_labels())
                    .await?;
                format!("{FORK_REPO}:{tag}")
            }
        };
        let made = self
            .create_from(&image, key, temporary, team, network, progress)
            .await;
        // The container holds a fork's image now (or nothing does): its tag goes.
        if matches!(from, ForkSource::Computer(_)) {
            let untag = RemoveImageOptions {
                noprune: true,
                ..Default::default()
            };
            let _ = self.client.remove_image(&image, Some(untag), None).await;
            if made.is_err() {
                self.prune_unused().await;
            }
        }
        made
    }

    /// Computer `key` starts again from snapshot `snapshot_id` (checked first: nothing
    /// changes when it is gone).
    pub async fn restore(
        &self,
        key: &str,
        snapshot_id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, DockerError> {
        self.snapshot_image(snapshot_id).await?;
        self.remove(key).await?;
        let image = snapshot_ref(snapshot_id);
        let made = self
            .create_from(&image, key, temporary, team, network, progress)
            .await;
        self.prune_unused().await;
        made
    }

    /// Fails unless snapshot `snapshot_id`'s image is on the engine.
    async fn snapshot_image(&self, snapshot_id: &str) -> Result<(), DockerError> {
        match self.client.inspect_image(&snapshot_ref(snapshot_id)).await {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => {
                Err(DockerError::NoSnapshot(snapshot_id.to_owned()))
            }
            Err(e) => Err(DockerError::from_bollard(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(labels: HashMap<String, String>, tags: &[&str]) -> bollard::models::ImageSummary {
        bollard::models::ImageSummary {
            id: "sha256:new".into(),
            parent_id: "sha256:base".into(),
            repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            size: 5000,
            labels,
            ..Default::default()
        }
    }

    #[test]
    fn an_image_is_a_snapshot_only_with_its_label_and_its_tag() {
        let sid = shared::snapshots::new_id(3);
        let network = shared::egress::Policy::None;
        let meta = SnapshotMeta {
            snapshot_id: &sid,
            label: "before",
            team: None,
            owner: Some("session:a"),
            created_ms: 1_700_000_000_000,
            network: &network,
        };
        let sizes = HashMap::from([("sha256:base", 1000)]);
        let tag = snapshot_ref(&sid);
        let r = record_of(&summary(snapshot_labels("box", &meta), &[&tag]), &sizes).unwrap();
        assert_eq!(r, meta.record("box", 4000, false));
        // A computer's later commit inherits the labels: without the tag it is no snapshot.
        assert!(record_of(&summary(snapshot_labels("box", &meta), &[]), &sizes).is_none());
        // A fork's image clears them.
        let mut inherited = snapshot_labels("box", &meta);
        inherited.extend(fork_labels());
        assert!(record_of(&summary(inherited, &["msc-fork:x"]), &sizes).is_none());
        // Parent unknown: the whole image.
        let r = record_of(
            &summary(snapshot_labels("box", &meta), &[&tag]),
            &HashMap::new(),
        );
        assert_eq!(r.unwrap().size_bytes, 5000);
    }
}

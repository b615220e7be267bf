//! Snapshots and forks of Docker/Podman computers (SPEC §3.12): a snapshot is an image
//! committed from the computer's container with its processes paused for the copy
//! (`pause=true`: consistent, and the engine's own speed), tagged `msc-snapshot:<id>` and
//! labelled with what the controller needs, so snapshots survive restarts and outlive
//! their computer. A fork commits its source the same way into an image of its own and
//! starts a container from it; a restore starts one from the snapshot under the
//! computer's name. Each computer made so holds its image by a tag of its own,
//! `msc-fork:<container name>`, removed with it: an image goes with its last tag (a
//! deleted snapshot's once its last fork is gone), and no removal is ever forced (Podman
//! would take the image's containers with it).
//!
//! The labels go in as `LABEL` changes, which Docker and Podman both apply (Podman's
//! compatible API ignores a commit's config); free text in them is base64url, so no
//! engine's Dockerfile parser has quotes to read. Podman names the image
//! `docker.io/library/msc-snapshot:<id>` or `localhost/…`: any registry prefix is taken.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bollard::models::ContainerConfig;
use bollard::query_parameters::{
    CommitContainerOptions, ListImagesOptions, RemoveImageOptions, TagImageOptions,
};

use super::{Docker, DockerError, Making, container_name, label, status_of};
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ForkSource, SnapshotMeta, SnapshotRecord};

/// The repository of snapshot images (`msc-snapshot:<snapshot id>`).
const REPO: &str = "msc-snapshot";
/// A fork's image while its container is made (`msc-fork:<container name>`).
const FORK_REPO: &str = "msc-fork";
/// The snapshot's id: set on every image this module commits (`-` on a fork's).
const LABEL_SNAPSHOT: &str = "msc.snapshot";
/// The computer's key (ids are `[a-z0-9-]`), or `fork`.
const LABEL_OF: &str = "msc.snapshot.of";
/// The rest: base64url (empty: none), and milliseconds.
const LABEL_TEXT: &str = "msc.snapshot.label";
const LABEL_AT: &str = "msc.snapshot.created-ms";
const LABEL_TEAM: &str = "msc.snapshot.team";
const LABEL_OWNER: &str = "msc.snapshot.owner";
const LABEL_POLICY: &str = "msc.snapshot.network";
/// The size of the image the computer ran (what the snapshot adds is the difference).
const LABEL_BASE: &str = "msc.snapshot.base-size";

/// What a label holds, as base64url.
fn enc(text: &str) -> String {
    B64.encode(text)
}

/// A label written by [`enc`] (`None`: absent, empty or not ours).
fn dec(labels: &HashMap<String, String>, key: &str) -> Option<String> {
    let bytes = B64.decode(label(labels, key)?).ok()?;
    String::from_utf8(bytes).ok().filter(|t| !t.is_empty())
}

/// The labels of a snapshot's image (every key set: a later commit of a computer made
/// from it inherits them, so each is overwritten).
fn snapshot_labels(
    of: &str,
    meta: &SnapshotMeta<'_>,
    base_size: i64,
) -> Vec<(&'static str, String)> {
    let network = serde_json::to_string(meta.network).unwrap_or_default();
    vec![
        (LABEL_BASE, base_size.to_string()),
        (LABEL_SNAPSHOT, meta.snapshot_id.into()),
        (LABEL_OF, of.into()),
        (LABEL_TEXT, enc(meta.label)),
        (LABEL_AT, meta.created_ms.to_string()),
        (LABEL_TEAM, enc(meta.team.unwrap_or_default())),
        (LABEL_OWNER, enc(meta.owner.unwrap_or_default())),
        (LABEL_POLICY, enc(&network)),
    ]
}

/// A fork's image: ours (pruned when unused), and no snapshot.
fn fork_labels() -> Vec<(&'static str, String)> {
    let cleared = [
        LABEL_SNAPSHOT,
        LABEL_TEXT,
        LABEL_AT,
        LABEL_TEAM,
        LABEL_OWNER,
        LABEL_POLICY,
        LABEL_BASE,
    ];
    let mut labels: Vec<(&'static str, String)> =
        cleared.into_iter().map(|k| (k, "-".to_owned())).collect();
    labels.push((LABEL_OF, "fork".to_owned()));
    labels
}

/// `labels` as `LABEL` changes, one a line (Podman reads a line's first `=` only; both
/// engines take lines). Values are digits, ids, keys or base64url: nothing to quote.
fn label_change(labels: &[(&str, String)]) -> String {
    let lines: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("LABEL {k}={v}"))
        .collect();
    lines.join("\n")
}

/// Does image tag `tag` name snapshot `snapshot_id` (`msc-snapshot:<id>`, with any
/// registry prefix an engine adds)?
fn names_snapshot(tag: &str, snapshot_id: &str) -> bool {
    let Some(repo) = tag
        .strip_suffix(snapshot_id)
        .and_then(|t| t.strip_suffix(':'))
    else {
        return false;
    };
    repo == REPO || repo.ends_with(&format!("/{REPO}"))
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
        .any(|t| names_snapshot(t, snapshot_id));
    if !tagged || !shared::snapshots::is_id(snapshot_id) {
        return None;
    }
    // What it adds to the computer's image (its size written at the commit, else its
    // parent's where the engine says which that is); else the whole image.
    let parent = labels
        .get(LABEL_BASE)
        .and_then(|n| n.parse::<i64>().ok())
        .or_else(|| sizes.get(summary.parent_id.as_str()).copied())
        .unwrap_or(0);
    Some(SnapshotRecord {
        snapshot_id: snapshot_id.clone(),
        of: label(labels, LABEL_OF)?.clone(),
        team: dec(labels, LABEL_TEAM),
        owner: dec(labels, LABEL_OWNER),
        label: dec(labels, LABEL_TEXT).unwrap_or_default(),
        created_ms: labels
            .get(LABEL_AT)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0),
        size_bytes: u64::try_from(summary.size.saturating_sub(parent)).unwrap_or(0),
        memory: false,
        network: dec(labels, LABEL_POLICY).and_then(|text| serde_json::from_str(&text).ok()),
    })
}

fn snapshot_ref(snapshot_id: &str) -> String {
    format!("{REPO}:{snapshot_id}")
}

/// The tag by which container `name` holds the image it was made from.
fn fork_ref(name: &str) -> String {
    format!("{FORK_REPO}:{name}")
}

/// The container a `msc-fork:<name>` tag (with any registry prefix) is held by.
fn held_by(tag: &str) -> Option<&str> {
    let (repo, name) = tag.rsplit_once(':')?;
    let ours = repo == FORK_REPO || repo.ends_with(&format!("/{FORK_REPO}"));
    ours.then_some(name)
}

impl Docker {
    /// Commits container `name` (paused for the copy) as `repo:tag` with `labels`.
    async fn commit(
        &self,
        name: &str,
        repo: &str,
        tag: &str,
        labels: &[(&str, String)],
    ) -> Result<String, DockerError> {
        self.images_made.store(true, Ordering::Relaxed);
        let opts = CommitContainerOptions {
            container: Some(name.to_owned()),
            repo: Some(repo.to_owned()),
            tag: Some(tag.to_owned()),
            pause: true,
            changes: Some(label_change(labels)),
            ..Default::default()
        };
        let config = ContainerConfig::default();
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
        let base = self.image_size_of(&name).await;
        let labels = snapshot_labels(key, meta, base);
        self.commit(&name, REPO, meta.snapshot_id, &labels).await?;
        let listed = self.snapshot_list().await?;
        listed
            .into_iter()
            .find(|s| s.snapshot_id == meta.snapshot_id)
            .ok_or_else(|| DockerError::NoSnapshot(meta.snapshot_id.to_owned()))
    }

    /// The size of the image container `name` runs (0 when the engine does not say).
    async fn image_size_of(&self, name: &str) -> i64 {
        let Ok(c) = self.client.inspect_container(name, None).await else {
            return 0;
        };
        let Some(image) = c.image else {
            return 0;
        };
        match self.client.inspect_image(&image).await {
            Ok(i) => i.size.unwrap_or(0),
            Err(_) => 0,
        }
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

    /// Removes snapshot `snapshot_id`'s tag: its image goes with it unless computers made
    /// from it hold it by their own tags (then it goes with the last of them).
    pub async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, DockerError> {
        match self.untag(&snapshot_ref(snapshot_id)).await {
            Ok(()) => Ok(true),
            Err(DockerError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes tag `reference`, never forced (a forced removal takes Podman's containers
    /// of the image with it); the image goes when it was its last tag.
    async fn untag(&self, reference: &str) -> Result<(), DockerError> {
        let opts = RemoveImageOptions {
            force: false,
            noprune: false,
            ..Default::default()
        };
        match self.client.remove_image(reference, Some(opts), None).await {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Err(DockerError::NotFound(reference.into())),
            Err(e) => Err(DockerError::from_bollard(e)),
        }
    }

    /// After container `name` is gone: the tag by which it held its image, if it was made
    /// from a snapshot or a fork (the image goes with its last tag).
    pub(super) async fn drop_image_of(&self, name: &str) {
        if !self.images_made.load(Ordering::Relaxed) {
            return;
        }
        match self.untag(&fork_ref(name)).await {
            Ok(()) | Err(DockerError::NotFound(_)) => {}
            Err(e) => tracing::debug!(name, error = %e, "could not remove a computer's image tag"),
        }
    }

    /// At start: the image tags of computers removed behind this server's back go, and
    /// later removals look for theirs when the engine holds any image of ours.
    pub(super) async fn sweep_images(&self) {
        let opts = ListImagesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![LABEL_OF.to_owned()],
            )])),
            ..Default::default()
        };
        let Ok(ours) = self.client.list_images(Some(opts)).await else {
            return;
        };
        if ours.is_empty() {
            return;
        }
        self.images_made.store(true, Ordering::Relaxed);
        let names: Vec<String> = ours
            .iter()
            .flat_map(|i| i.repo_tags.iter())
            .filter_map(|t| held_by(t).map(str::to_owned))
            .collect();
        for name in names {
            if matches!(self.find_named(&name, &name).await, Ok(None)) {
                self.drop_image_of(&name).await;
            }
        }
    }

    /// Computer `key`, made from image `image` (a snapshot's or a fork's) held by its own
    /// tag `msc-fork:<container name>`, as [`Docker::create`] makes one from the
    /// configured image (no warm-pool member).
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
        let own = fork_ref(&name);
        if image != own {
            let opts = TagImageOptions {
                repo: Some(FORK_REPO.to_owned()),
                tag: Some(name.clone()),
            };
            self.images_made.store(true, Ordering::Relaxed);
            match self.client.tag_image(image, Some(opts)).await {
                Ok(()) => {}
                Err(e) if status_of(&e) == Some(404) => {
                    return Err(DockerError::NotFound(image.to_owned()));
                }
                Err(e) => return Err(DockerError::from_bollard(e)),
            }
        }
        let m = Making {
            name: &name,
            computer_id: key,
            temporary,
            team,
            network,
            pooled: false,
            image: Some(&own),
        };
        let made = self.create_named(m, progress).await;
        if made.is_err() {
            self.drop_image_of(&name).await;
        }
        made
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
                let name = container_name(key);
                self.commit(&container_name(src), FORK_REPO, &name, &fork_labels())
                    .await?;
                fork_ref(&name)
            }
        };
        self.create_from(&image, key, temporary, team, network, progress)
            .await
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
        self.create_from(&image, key, temporary, team, network, progress)
            .await
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

    fn summary(labels: &[(&str, String)], tags: &[&str]) -> bollard::models::ImageSummary {
        bollard::models::ImageSummary {
            id: "sha256:new".into(),
            parent_id: "sha256:base".into(),
            repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            size: 5000,
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_image_is_a_snapshot_only_with_its_label_and_its_tag() {
        let sid = shared::snapshots::new_id(3);
        let network = shared::egress::Policy::allow(["pypi.org"]).unwrap();
        let meta = SnapshotMeta {
            snapshot_id: &sid,
            label: "before \"the\" upgrade = 'x'",
            team: Some("t1"),
            owner: Some("team:t1/user:a b"),
            created_ms: 1_700_000_000_000,
            network: &network,
        };
        let sizes = HashMap::from([("sha256:base", 1500)]);
        let tag = snapshot_ref(&sid);
        let labels = snapshot_labels("box", &meta, 1000);
        let r = record_of(&summary(&labels, &[&tag]), &sizes).unwrap();
        assert_eq!(r, meta.record("box", 4000, false));
        // Podman's names for the same tag.
        for podman in [
            format!("localhost/{tag}"),
            format!("docker.io/library/{tag}"),
        ] {
            assert!(record_of(&summary(&labels, &[&podman]), &sizes).is_some());
        }
        assert!(!names_snapshot(&format!("not-{tag}"), &sid));
        // The container that holds an image by its own tag.
        for t in [
            "msc-fork:kilntainer-a",
            "docker.io/library/msc-fork:kilntainer-a",
        ] {
            assert_eq!(held_by(t), Some("kilntainer-a"), "{t}");
        }
        assert_eq!(held_by("not-msc-fork:kilntainer-a"), None);
        assert_eq!(held_by(&tag), None);
        // A computer's later commit inherits the labels: without the tag it is no snapshot.
        assert!(record_of(&summary(&labels, &[]), &sizes).is_none());
        // A fork's image overwrites them.
        let mut inherited = labels.clone();
        inherited.extend(fork_labels());
        assert!(record_of(&summary(&inherited, &["msc-fork:x"]), &sizes).is_none());
        // Without the label: the parent's size, else the whole image.
        let without_base: Vec<_> = labels
            .iter()
            .filter(|(k, _)| *k != LABEL_BASE)
            .cloned()
            .collect();
        let r = record_of(&summary(&without_base, &[&tag]), &sizes);
        assert_eq!(r.unwrap().size_bytes, 3500);
        let r = record_of(&summary(&without_base, &[&tag]), &HashMap::new());
        assert_eq!(r.unwrap().size_bytes, 5000);
        // A LABEL line each, nothing an engine's parser would have to unquote.
        let change = label_change(&labels);
        assert_eq!(change.lines().count(), labels.len(), "{change}");
        for line in change.lines() {
            let pair = line.strip_prefix("LABEL ").unwrap();
            assert!(!pair.contains(['"', '\'', ' ', '\\']), "{line}");
        }
    }
}

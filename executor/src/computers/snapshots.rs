//! The snapshot tools on this server's computers (SPEC §3.12): who reaches a snapshot,
//! the limit per computer, and fork and restore under the registry's rules.
//!
//! A snapshot belongs to whoever may reach its computer: the team's (a local server's:
//! everyone's) for a permanent computer, its owner's alone for a temporary one. It
//! outlives its computer until deleted; a temporary computer's go with their owner
//! ([`Computers::release_snapshots_of`]), since nobody else could ever reach them.

use shared::answer::Answer;
use shared::egress::Policy;
use shared::registry::Claimant;
use shared::result::Created;
use shared::snapshots::{ForkFrom, Snapshot, SnapshotCall, SnapshotDeleted, SnapshotList};

use super::{ComputerError, Computers, SessionHost, now_ms};
use crate::place::Place;
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ForkSource, SnapshotMeta, SnapshotRecord};

impl Computers {
    /// The snapshots `owner` of `team` may reach.
    async fn snapshots_for(
        &self,
        owner: &str,
        team: Option<&str>,
    ) -> Result<Vec<SnapshotRecord>, ComputerError> {
        let mut all = self.backend.snapshot_list().await?;
        all.retain(|s| {
            s.team.as_deref() == team
                && shared::teams::id_of(team, &s.of).is_some()
                && s.owner.as_deref().is_none_or(|o| o == owner)
        });
        Ok(all)
    }

    /// Removes the snapshots of `owner`'s temporary computers (its session ended).
    pub(super) async fn release_snapshots_of(&self, owner: &str) {
        let Ok(all) = self.backend.snapshot_list().await else {
            return;
        };
        for s in all.iter().filter(|s| s.owner.as_deref() == Some(owner)) {
            if let Err(e) = self.backend.snapshot_delete(&s.snapshot_id).await {
                tracing::warn!(snapshot = %s.snapshot_id, error = %e, "could not remove a snapshot whose owner is gone");
            }
        }
    }

    /// Makes computer `key` (new) from `from` for `claimant`, as attaching makes one
    /// from the image: the same scope, quota and registry rules.
    async fn fork_new(
        &self,
        key: &str,
        from: ForkSource<'_>,
        claimant: &Claimant<'_>,
        team: Option<&str>,
        network: &Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, ComputerError> {
        let lock = self.id_lock(key);
        let _held = lock.lock().await;
        let id = shared::teams::id_of(team, key).unwrap_or(key);
        if self.registry().contains(key) == Ok(true) || self.backend.find(key).await?.is_some() {
            return Err(ComputerError::ForkExists(id.to_owned()));
        }
        let temporary = claimant.requested.unwrap_or(true);
        claimant
            .may_create(temporary)
            .map_err(shared::registry::RegistryError::from)?;
        let _admitted = self.admit_new(team).await?;
        let r = self
            .backend
            .fork(from, key, temporary, team, network, progress)
            .await?;
        let place = self.backend.name();
        let mut registry = self.registry();
        match r.temporary {
            true => registry.record_new(key, place, true, claimant, now_ms())?,
            false => registry.adopt(key, place, false, claimant, now_ms())?,
        };
        Ok(r)
    }
}

impl SessionHost {
    /// Runs a snapshot tool call.
    pub(super) async fn snapshot(
        &self,
        call: SnapshotCall,
        progress: &Progress,
    ) -> Result<Answer, ComputerError> {
        Ok(match call {
            SnapshotCall::Take { computer_id, label } => {
                self.take(&computer_id, &label).await?.into()
            }
            SnapshotCall::List { computer_id } => self.snapshot_list(&computer_id).await?.into(),
            SnapshotCall::Delete { snapshot_id } => {
                self.snapshot_delete(&snapshot_id).await?.into()
            }
            SnapshotCall::Restore {
                computer_id,
                snapshot_id,
            } => self
                .restore(&computer_id, &snapshot_id, progress)
                .await?
                .into(),
            SnapshotCall::Fork {
                from,
                computer_id,
                temporary,
            } => self
                .fork(&from, computer_id, temporary, progress)
                .await?
                .into(),
        })
    }

    /// The answer for `s` (the caller's ids).
    fn snapshot_of(&self, s: SnapshotRecord) -> Snapshot {
        let computer_id = shared::teams::id_of(self.team(), &s.of)
            .unwrap_or(&s.of)
            .to_owned();
        Snapshot {
            computer_id,
            snapshot_id: s.snapshot_id,
            label: s.label,
            created_at: shared::history::rfc3339_utc(s.created_ms),
            size_bytes: s.size_bytes,
            memory: s.memory,
        }
    }

    /// Snapshot `id` that this caller may reach.
    async fn reachable_snapshot(&self, snapshot_id: &str) -> Result<SnapshotRecord, ComputerError> {
        self.computers
            .snapshots_for(&self.owner, self.team())
            .await?
            .into_iter()
            .find(|s| s.snapshot_id == snapshot_id)
            .ok_or_else(|| ComputerError::NoSnapshot(snapshot_id.to_owned()))
    }

    async fn take(&self, id: &str, label: &str) -> Result<Snapshot, ComputerError> {
        let c = &self.computers;
        let r = c.visible_record(id, &self.owner, self.team()).await?;
        let key = self.key(id);
        // Serialised with deletes, restores and resets of the same computer.
        let lock = c.id_lock(&key);
        let _held = lock.lock().await;
        let limit = c.defaults.snapshot_limit;
        let kept = c
            .backend
            .snapshot_list()
            .await?
            .iter()
            .filter(|s| s.of == key)
            .count();
        if kept >= limit {
            return Err(ComputerError::SnapshotLimit {
                id: id.to_owned(),
                limit,
            });
        }
        let snapshot_id = shared::snapshots::new_id(rand::random::<u128>());
        let network = c.network_of(&r);
        let meta = SnapshotMeta {
            snapshot_id: &snapshot_id,
            label,
            team: self.team(),
            owner: r.temporary.then_some(self.owner.as_str()),
            created_ms: now_ms(),
            network: &network,
        };
        let record = c.backend.snapshot_take(&key, &meta).await?;
        tracing::info!(computer_id = id, snapshot = %snapshot_id, size = record.size_bytes, "took a snapshot");
        Ok(self.snapshot_of(record))
    }

    async fn snapshot_list(&self, id: &str) -> Result<SnapshotList, ComputerError> {
        let c = &self.computers;
        let key = self.key(id);
        let mine: Vec<SnapshotRecord> = c
            .snapshots_for(&self.owner, self.team())
            .await?
            .into_iter()
            .filter(|s| s.of == key)
            .collect();
        // Snapshots outlive their computer; with neither, the id names nothing.
        if mine.is_empty() {
            c.visible_record(id, &self.owner, self.team()).await?;
        }
        Ok(SnapshotList::new(
            mine.into_iter().map(|s| self.snapshot_of(s)).collect(),
        ))
    }

    async fn snapshot_delete(&self, snapshot_id: &str) -> Result<SnapshotDeleted, ComputerError> {
        let s = self.reachable_snapshot(snapshot_id).await?;
        match self
            .computers
            .backend
            .snapshot_delete(&s.snapshot_id)
            .await?
        {
            true => Ok(SnapshotDeleted::new(snapshot_id)),
            false => Err(ComputerError::NoSnapshot(snapshot_id.to_owned())),
        }
    }

    async fn restore(
        &self,
        id: &str,
        snapshot_id: &str,
        progress: &Progress,
    ) -> Result<Created, ComputerError> {
        let c = &self.computers;
        let r = c.visible_record(id, &self.owner, self.team()).await?;
        let key = self.key(id);
        let s = self.reachable_snapshot(snapshot_id).await?;
        if s.of != key {
            let of = shared::teams::id_of(self.team(), &s.of).unwrap_or(&s.of);
            return Err(ComputerError::OtherComputer {
                snapshot: snapshot_id.to_owned(),
                of: of.to_owned(),
                id: id.to_owned(),
            });
        }
        let lock = c.id_lock(&key);
        let _held = lock.lock().await;
        // It keeps its network policy, as a factory reset does.
        let network = c.network_of(&r);
        let fresh = c
            .backend
            .restore(
                &key,
                snapshot_id,
                r.temporary,
                self.team(),
                &network,
                progress,
            )
            .await?;
        c.forget_jobs_of(&key);
        Ok(self.created(id, &fresh))
    }

    async fn fork(
        &self,
        from: &ForkFrom,
        computer_id: Option<String>,
        temporary: Option<bool>,
        progress: &Progress,
    ) -> Result<Created, ComputerError> {
        let c = &self.computers;
        // The new computer gets its source's network policy.
        let (source_key, network) = match from {
            ForkFrom::Computer(src) => {
                let r = c.visible_record(src, &self.owner, self.team()).await?;
                (self.key(src), c.network_of(&r))
            }
            ForkFrom::Snapshot(sid) => {
                let s = self.reachable_snapshot(sid).await?;
                let network = s.network.unwrap_or_else(|| c.defaults.network.clone());
                (String::new(), network)
            }
        };
        let source = match from {
            ForkFrom::Computer(_) => ForkSource::Computer(&source_key),
            ForkFrom::Snapshot(sid) => ForkSource::Snapshot(sid),
        };
        // Never wider than what the server allows now.
        let network = c.defaults.network.narrow(Some(&network))?;
        // A fresh slug of its own (a warm-pool member's is for a computer from the image).
        let id =
            computer_id.unwrap_or_else(|| shared::ids::slug_from_random(rand::random::<u64>()));
        let claimant = Claimant {
            requested: Some(temporary.unwrap_or(true)),
            owner: &self.owner,
            stateless: self.stateless,
            scope: self.scope.as_deref(),
        };
        let made = c
            .fork_new(
                &self.key(&id),
                source,
                &claimant,
                self.team(),
                &network,
                progress,
            )
            .await?;
        Ok(self.created(&id, &made))
    }
}

//! The computers of one server: `shared::registry` over a map in memory, applied to the
//! backend.
//!
//! The registry decides (attach, defaults, ownership, visibility, idle, history); this
//! module does what it decides: it finds and creates computers at the backend, holds a lock
//! per id while it does, removes temporaries when their owner goes away (stdio EOF, HTTP
//! session end or idle, stateless idle, shutdown, or a dead server's leftovers at start),
//! and implements `shared::mcp::ToolHost` per caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use shared::egress::Policy;
use shared::history::{HistoryEntry, describe, rfc3339_utc};
use shared::ids::slug_from_random;
use shared::jobs::yielded_structured;
use shared::registry::{Claimant, MemoryStore, Registry};
use shared::result::{ComputerInfo, ExecAnswer, exec_structured};
use shared::validate::{ExecRequest, Program};
use tracing::Instrument;

use crate::backend::Backend;
use crate::place::{Failure, Place};
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ExecSpec};

pub use crate::error::ComputerError;
pub use session::SessionHost;

pub mod files;
mod jobs;
mod quota;
mod session;
mod snapshots;
mod tasks;
#[cfg(test)]
mod tests;

/// Does record `r` belong to `team` (`None`: a local server, whose computers have no team)?
/// A team's computers carry both its key prefix and its name (Docker label, WASM
/// metadata, cloud tag): one without the name (made by a local server, or by an executor
/// older than the team tags) belongs to no team and is never reached through the API.
fn of_team(r: &ContainerRecord, team: Option<&str>) -> bool {
    match team {
        None => r.team.is_none(),
        Some(t) => {
            shared::teams::id_of(Some(t), &r.computer_id).is_some() && r.team.as_deref() == Some(t)
        }
    }
}

/// Exec defaults from the command line.
#[derive(Debug, Clone)]
pub struct ExecDefaults {
    pub timeout_secs: u64,
    pub output_limit: usize,
    pub shell: Option<String>,
    pub session_timeout_secs: u64,
    /// The `jobs` group is on: `computer_list` items show each computer's jobs.
    pub list_jobs: bool,
    /// `--max-computers-per-principal` ([`quota`]).
    pub max_computers: usize,
    /// The server's network policy (SPEC §3.11): a new computer's, narrowed by its
    /// agent's `network`; and the policy of computers whose backend records none.
    pub network: Policy,
    /// `--snapshot-limit`: snapshots kept per computer (SPEC §3.12).
    pub snapshot_limit: usize,
}

/// A policy as messages show it: its wire form (`"none"`, `{"allow":[...]}`).
fn policy_text(p: &Policy) -> String {
    serde_json::to_string(p).unwrap_or_else(|_| p.to_string())
}

/// Are `a` and `b` the same policy (an allow list's order aside)?
fn same_policy(a: &Policy, b: &Policy) -> bool {
    match (a, b) {
        (Policy::Allow(x), Policy::Allow(y)) => {
            x.iter().all(|r| y.contains(r)) && y.iter().all(|r| x.contains(r))
        }
        _ => a == b,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// What attaching to a computer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attached {
    pub(crate) temporary: bool,
    /// This call made it (it did not exist before): the result says `created: true`.
    pub(crate) created: bool,
}

/// Counts a running command on a computer for as long as it lives.
struct InUse<'a> {
    computers: &'a Computers,
    id: &'a str,
}

impl<'a> InUse<'a> {
    fn new(computers: &'a Computers, id: &'a str) -> Self {
        computers.in_use(id, true);
        Self { computers, id }
    }
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.computers.in_use(self.id, false);
    }
}

/// The registry, shared by every session of this server.
#[derive(Debug)]
pub struct Computers {
    backend: Backend,
    defaults: ExecDefaults,
    host: String,
    /// Keyed by backend name (`shared::teams::key`).
    registry: Mutex<Registry<MemoryStore>>,
    id_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The jobs this server started, by job id.
    jobs: Mutex<HashMap<String, jobs::JobRecord>>,
    /// The tasks (MCP Tasks extension) this server handed out, by task id.
    tasks: tasks::TaskTable,
    /// Temporaries whose removal failed (a busy engine): retried by every idle sweep
    /// until they are gone, so a transient engine error does not leak a computer.
    unremoved: Mutex<std::collections::HashSet<String>>,
    /// Each stateless principal's default computer (SPEC §3.2: without a session the
    /// default belongs to the principal), shared by all its requests.
    principal_defaults: Mutex<HashMap<String, DefaultSlot>>,
    /// Creations under way, by principal scope ([`quota`]).
    creating: Mutex<HashMap<String, usize>>,
}

/// A caller's default computer (its id as the caller names it), held while a call that
/// reads it attaches, so concurrent first calls share one computer.
type DefaultSlot = Arc<tokio::sync::Mutex<Option<String>>>;

impl Computers {
    pub fn new(backend: Backend, defaults: ExecDefaults, host: String) -> Self {
        Self {
            backend,
            defaults,
            host,
            registry: Mutex::new(Registry::new(MemoryStore::default())),
            id_locks: Mutex::new(HashMap::new()),
            jobs: Mutex::new(HashMap::new()),
            tasks: tasks::TaskTable::default(),
            unremoved: Mutex::default(),
            principal_defaults: Mutex::default(),
            creating: Mutex::default(),
        }
    }

    /// The default slot of stateless principal `owner` (made on first use).
    fn principal_default(&self, owner: &str) -> DefaultSlot {
        let mut all = self
            .principal_defaults
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        all.entry(owner.to_owned()).or_default().clone()
    }

    /// The controller of a server whose backend is the in-memory `fake` (60 s timeout,
    /// 1 MiB of output, a 300 s session timeout, no jobs in lists).
    #[cfg(test)]
    pub(crate) fn over_fake(fake: crate::fake::Fake) -> Arc<Computers> {
        Self::over_fake_capped(fake, 64)
    }

    /// [`Computers::over_fake`] with `--max-computers-per-principal` at `max_computers`.
    #[cfg(test)]
    pub(crate) fn over_fake_capped(fake: crate::fake::Fake, max_computers: usize) -> Arc<Self> {
        Self::over_fake_with(fake, max_computers, Policy::All)
    }

    /// [`Computers::over_fake`] whose server's network policy is `network`.
    #[cfg(test)]
    pub(crate) fn over_fake_with(
        fake: crate::fake::Fake,
        max_computers: usize,
        network: Policy,
    ) -> Arc<Self> {
        let defaults = ExecDefaults {
            timeout_secs: 60,
            output_limit: 1 << 20,
            shell: None,
            session_timeout_secs: 300,
            list_jobs: false,
            max_computers,
            network,
            snapshot_limit: shared::snapshots::DEFAULT_LIMIT,
        };
        Arc::new(Computers::new(
            Backend::Fake(fake),
            defaults,
            "fake-host".into(),
        ))
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    fn registry(&self) -> MutexGuard<'_, Registry<MemoryStore>> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn id_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.id_locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(id.to_owned()).or_default().clone()
    }

    /// Marks a command starting (`true`) or ending (`false`) on `id`.
    fn in_use(&self, id: &str, starting: bool) {
        let Ok(()) = self.registry().running(id, starting, now_ms());
    }

    /// The effective network policy of `r`: its own where its backend records one, else
    /// the server's.
    fn network_of(&self, r: &ContainerRecord) -> Policy {
        r.network
            .clone()
            .unwrap_or_else(|| self.defaults.network.clone())
    }

    /// Refuses `asked` (a call's `network`) for `r`, a computer that exists, unless it is
    /// its effective policy: `network` applies only when a computer is made.
    fn same_network(
        &self,
        r: &ContainerRecord,
        asked: Option<&Policy>,
        team: Option<&str>,
    ) -> Result<(), ComputerError> {
        let Some(asked) = asked else {
            return Ok(());
        };
        let has = self.network_of(r);
        match same_policy(&has, asked) {
            true => Ok(()),
            false => Err(ComputerError::NetworkMismatch {
                id: shared::teams::id_of(team, &r.computer_id)
                    .unwrap_or(&r.computer_id)
                    .to_owned(),
                has: policy_text(&has),
                asked: policy_text(asked),
            }),
        }
    }

    /// [`Computers::same_network`] for computer `id` (a backend key) the registry knows
    /// (one engine round trip, only when a `network` was asked).
    async fn same_network_of(
        &self,
        id: &str,
        asked: Option<&Policy>,
        team: Option<&str>,
    ) -> Result<(), ComputerError> {
        if asked.is_none() {
            return Ok(());
        }
        match self.backend.find(id).await? {
            Some(r) => self.same_network(&r, asked, team),
            None => Ok(()),
        }
    }

    /// Attaches `claimant` to `id` (creating it if missing, with the server's network
    /// policy narrowed by `network`). `id` is the backend key (`shared::teams::key`).
    async fn attach(
        &self,
        id: &str,
        claimant: &Claimant<'_>,
        team: Option<&str>,
        network: Option<&Policy>,
        progress: &Progress,
    ) -> Result<Attached, ComputerError> {
        let known = |temporary| Attached {
            temporary,
            created: false,
        };
        // Fast path: a computer the registry knows needs no engine round trip.
        let entry = self.registry().check(id, claimant)?;
        if let Some(e) = entry {
            self.same_network_of(id, network, team).await?;
            return Ok(known(e.temporary));
        }
        let lock = self.id_lock(id);
        let _held = lock.lock().await;
        let entry = self.registry().check(id, claimant)?;
        if let Some(e) = entry {
            self.same_network_of(id, network, team).await?;
            return Ok(known(e.temporary));
        }
        let place = self.backend.name();
        // A slug reserved for a warm-pool member names no computer yet: no need to look.
        let found = match self.backend.reserved(id) {
            true => None,
            false => self.backend.find(id).await?,
        };
        let mut created = false;
        let record = match found {
            Some(r) => {
                self.same_network(&r, network, team)?;
                r
            }
            None => {
                // A new permanent computer needs `manage` where scopes apply (executor
                // mode), and its `network` must lie inside the server's policy: both
                // refused before anything is made or recorded.
                let temporary = claimant.requested.unwrap_or(true);
                claimant
                    .may_create(temporary)
                    .map_err(shared::registry::RegistryError::from)?;
                let network = self.defaults.network.narrow(network)?;
                let _admitted = self.admit_new(team).await?;
                let r = self
                    .backend
                    .create(id, temporary, team, &network, progress)
                    .await?;
                if r.temporary && r.instance.as_deref() == Some(self.backend.instance()) {
                    self.registry()
                        .record_new(id, place, true, claimant, now_ms())?;
                    return Ok(Attached {
                        temporary: true,
                        created: true,
                    });
                }
                // Permanent, or another server won the race: the registry decides below.
                created = r.instance.as_deref() == Some(self.backend.instance()) || !r.temporary;
                r
            }
        };
        // It exists and the registry did not know it: a permanent computer (shared by id),
        // or a temporary one of another server or a dead one (never ours to take).
        if !of_team(&record, team) {
            return Err(ComputerError::Taken(
                shared::teams::id_of(team, id).unwrap_or(id).to_owned(),
            ));
        }
        self.registry()
            .adopt(id, place, record.temporary, claimant, now_ms())?;
        if !record.state.is_running()
            && let Err(e) = self.backend.start(id).await
        {
            let Ok(()) = self.registry().forget(id);
            return Err(e.into());
        }
        Ok(Attached {
            temporary: record.temporary,
            created,
        })
    }

    /// A fresh id for a new computer of kind `temporary` made for `team`: a warm-pool
    /// member's when one is ready (a team's computer is never one: its team is a label).
    fn new_slug(&self, temporary: bool, team: Option<&str>) -> String {
        if team.is_none()
            && let Some(slug) = self.backend.fresh_slug(temporary)
        {
            return slug;
        }
        slug_from_random(rand::random::<u64>())
    }

    /// What the backend runs for `req`, and how the history names it.
    fn spec_of(&self, req: &ExecRequest, progress: &Progress) -> (ExecSpec, String) {
        let timeout = req.timeout_secs.unwrap_or(self.defaults.timeout_secs);
        let (argv, shell_command) = match &req.program {
            Program::Argv(argv) => (argv.clone(), None),
            Program::Shell(cmd) => (Vec::new(), Some((self.defaults.shell.clone(), cmd.clone()))),
        };
        let spec = ExecSpec {
            argv,
            shell_command,
            stdin: req.stdin.clone(),
            working_directory: req.working_directory.clone(),
            timeout: Duration::from_secs(timeout),
            output_limit: self.defaults.output_limit,
            env: req.env.clone(),
            progress: progress.clone(),
        };
        let command = match &req.program {
            Program::Shell(c) => describe(Some(c), None),
            Program::Argv(a) => describe(None, Some(a)),
        };
        (spec, command)
    }

    /// Starts `spec` on `key` as a job and waits up to `yield_ms` (its first read); a
    /// computer gone behind our back is forgotten.
    async fn job_on(
        &self,
        key: &str,
        id: &str,
        spec: &ExecSpec,
        command: String,
        yield_ms: u64,
    ) -> Result<shared::jobs::JobOutput, ComputerError> {
        let r = self.start_job_on(key, id, spec, command, yield_ms).await;
        if matches!(&r, Err(e) if e.failure() == Some(Failure::NotFound)) {
            let Ok(()) = self.registry().forget(key);
        }
        r
    }

    /// Runs `req` on the computer with backend key `key`; the result names it `id`.
    async fn exec_on(
        &self,
        key: &str,
        id: &str,
        temporary: bool,
        req: &ExecRequest,
        progress: &Progress,
    ) -> Result<ExecAnswer, ComputerError> {
        let (spec, command) = self.spec_of(req, progress);
        // Held across the command, also when the call is cancelled and this future dropped.
        let _in_use = InUse::new(self, key);
        if let Some(yield_ms) = req.yield_ms {
            let from = std::time::Instant::now();
            let out = self.job_on(key, id, &spec, command, yield_ms).await?;
            let blocked = self.job_blocked(key, &out.job_id, Some(from));
            return Ok(yielded_structured(id, temporary, out).with_blocked(blocked));
        }
        let started_ms = now_ms();
        let started = std::time::Instant::now();
        let timer = crate::metrics::ExecTimer::start(self.backend.name());
        let span = tracing::info_span!("exec", computer_id = key, backend = self.backend.name());
        let mut result = self.backend.exec(key, &spec).instrument(span.clone()).await;
        if matches!(&result, Err(e) if e.failure == Failure::NotRunning) {
            // Stopped behind our back (engine restart, `docker stop`): start it, try once more.
            tracing::info!(computer_id = key, "computer was stopped; starting it again");
            if self.backend.start(key).await.is_ok() {
                result = self.backend.exec(key, &spec).instrument(span).await;
            }
        }
        match result.map_err(ComputerError::from) {
            Ok(outcome) => {
                timer.finish(crate::metrics::outcome_of(
                    outcome.exit_code,
                    outcome.timed_out_after.is_some(),
                    outcome.truncated_at.is_some(),
                ));
                let entry = HistoryEntry {
                    command,
                    started_at: rfc3339_utc(started_ms),
                    exit_code: outcome.exit_code,
                    duration_ms: outcome.duration_ms,
                    timed_out: outcome.timed_out_after.is_some(),
                    truncated: outcome.truncated_at.is_some(),
                };
                let Ok(()) = self.registry().ran(key, entry);
                let blocked = self.backend.blocked_since(key, started);
                Ok(exec_structured(id, temporary, outcome).with_blocked(blocked))
            }
            Err(e) => {
                timer.finish(crate::metrics::Outcome::Error);
                if e.is_not_found() {
                    let Ok(()) = self.registry().forget(key);
                }
                Err(e)
            }
        }
    }

    /// Every computer tracked now: temporary or not, running a command or not (metrics).
    pub fn states(&self) -> Vec<crate::metrics::ComputerState> {
        let Ok(all) = self.registry().all();
        all.iter()
            .map(|e| crate::metrics::ComputerState {
                temporary: e.temporary,
                busy: e.running > 0,
            })
            .collect()
    }

    /// The kept jobs' output this server holds, and its budget (metrics).
    pub fn memory(&self) -> crate::metrics::Memory {
        let (buffered, budget) = self.backend.job_output().unwrap_or_default();
        crate::metrics::Memory {
            job_output_buffered: buffered,
            job_output_budget: budget,
        }
    }

    /// The list item of `r`, named as `team` sees it.
    fn info(&self, r: &ContainerRecord, team: Option<&str>) -> ComputerInfo {
        ComputerInfo {
            computer_id: shared::teams::id_of(team, &r.computer_id)
                .unwrap_or(&r.computer_id)
                .to_owned(),
            sandbox_id: r.provider_id.chars().take(12).collect(),
            backend: self.backend.name().into(),
            state: r.state.clone(),
            temporary: r.temporary,
            image: r.image.clone(),
            created_at: r.created_at.clone(),
            history: self.registry().history(&r.computer_id),
            jobs: None,
            error: None,
            network: Some(self.network_of(r)),
        }
    }

    /// May `owner` see `r`?
    fn visible(&self, r: &ContainerRecord, owner: &str) -> bool {
        let Ok(yes) = self.registry().may_see(&r.computer_id, r.temporary, owner);
        yes
    }

    /// The record of `team`'s computer `id`, if `owner` may see it.
    async fn visible_record(
        &self,
        id: &str,
        owner: &str,
        team: Option<&str>,
    ) -> Result<ContainerRecord, ComputerError> {
        match self.backend.find(&shared::teams::key(team, id)).await? {
            Some(r) if of_team(&r, team) && self.visible(&r, owner) => Ok(r),
            _ => Err(ComputerError::unknown(id)),
        }
    }

    /// What `owner` of `team` sees: the team's permanent computers and its own temporaries.
    pub async fn list(
        &self,
        owner: &str,
        team: Option<&str>,
    ) -> Result<Vec<ComputerInfo>, ComputerError> {
        let mut all = self.backend.list().await?;
        all.retain(|r| of_team(r, team) && self.visible(r, owner));
        let mut items: Vec<ComputerInfo> = all.iter().map(|r| self.info(r, team)).collect();
        if self.defaults.list_jobs {
            let lists = all.iter().map(|r| async move {
                if !r.state.is_running() {
                    return Some(Vec::new());
                }
                self.backend.job_list(&r.computer_id).await.ok()
            });
            for (item, jobs) in items.iter_mut().zip(join_all(lists).await) {
                item.jobs = jobs;
            }
        }
        items.sort_by(|a, b| a.computer_id.cmp(&b.computer_id));
        Ok(items)
    }

    /// Computers tracked and commands running now (`/v1/health`).
    pub fn load(&self) -> (u64, u64) {
        let Ok(load) = self.registry().load();
        load
    }

    async fn remove_ids(&self, ids: Vec<String>) {
        let removals = ids.iter().map(|id| async move {
            match self.backend.remove(id).await {
                Ok(()) => tracing::info!(computer_id = id, "removed temporary computer"),
                Err(e) => {
                    tracing::warn!(computer_id = id, error = %e, "could not remove temporary computer; will retry");
                    self.unremoved().insert(id.clone());
                }
            }
        });
        join_all(removals).await;
        let mut registry = self.registry();
        let mut locks = self.id_locks.lock().unwrap_or_else(|p| p.into_inner());
        for id in &ids {
            let Ok(()) = registry.forget(id);
            locks.remove(id);
            self.forget_jobs_of(id);
        }
    }

    fn ids(entries: Vec<shared::registry::Entry>) -> Vec<String> {
        entries.into_iter().map(|e| e.id).collect()
    }

    /// Removes every temporary computer of `owner` (its session ended).
    pub async fn release_owner(&self, owner: &str) {
        let Ok(owned) = self.registry().owned_by(owner);
        self.remove_ids(Self::ids(owned)).await;
        if self
            .backend
            .capabilities()
            .has(shared::capabilities::Capability::Snapshots)
        {
            self.release_snapshots_of(owner).await;
        }
    }

    fn unremoved(&self) -> MutexGuard<'_, std::collections::HashSet<String>> {
        self.unremoved.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Retries the removals that failed, skipping an id that is in use again (a new
    /// computer took the name; removing it would destroy the wrong one).
    async fn retry_removals(&self) {
        let ids: Vec<String> = {
            let registry = self.registry();
            let mut pending = self.unremoved();
            pending.retain(|id| registry.contains(id) == Ok(false));
            pending.drain().collect()
        };
        if !ids.is_empty() {
            self.remove_ids(ids).await;
        }
    }

    /// Removes stateless callers' temporaries unused for `--session-timeout`, and retries
    /// removals that failed.
    pub async fn reap_idle(&self) {
        self.retry_removals().await;
        let timeout = self.defaults.session_timeout_secs;
        let now = now_ms();
        let Ok(mut idle) = self.registry().idle(now, timeout);
        // A job still within its timeout is a use, even when nobody polls it.
        idle.retain(|e| !self.runs_jobs(&e.id, now));
        if !idle.is_empty() {
            self.remove_ids(Self::ids(idle)).await;
        }
    }

    /// Removes every temporary computer this server made (shutdown).
    pub async fn shutdown(&self) {
        let Ok(temporaries) = self.registry().temporaries();
        tokio::join!(
            self.remove_ids(Self::ids(temporaries)),
            self.backend.close()
        );
    }

    /// Removes temporaries left on this host by servers that are no longer running.
    pub async fn reap_orphans(&self) -> Result<usize, ComputerError> {
        let list = self.backend.list().await?;
        let orphans: Vec<String> = list
            .into_iter()
            .filter(|r| r.temporary && r.host.as_deref() == Some(self.host.as_str()))
            .filter(|r| match r.instance.as_deref() {
                Some(i) if i == self.backend.instance() => false,
                Some(i) => !crate::instance::is_alive(i),
                None => false,
            })
            .inspect(|r| {
                tracing::info!(computer_id = r.computer_id, instance = ?r.instance, "reaping a temporary computer of a server that is gone")
            })
            .map(|r| r.computer_id)
            .collect();
        let n = orphans.len();
        if n > 0 {
            tracing::info!(
                count = n,
                "reaping temporary computers of servers that are gone"
            );
        }
        self.remove_ids(orphans).await;
        self.backend.sweep().await;
        Ok(n)
    }
}

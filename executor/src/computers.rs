//! The computer registry of one server: attach/create, defaults, ownership, cleanup.
//!
//! Owns which computers this server tracks, who owns each temporary one, each session's
//! default computer, and removing temporaries when their owner goes away (stdio EOF, HTTP
//! session end or idle, stateless idle, shutdown, or a dead server's leftovers at start).
//! It applies `shared::lifecycle` and implements `shared::mcp::ToolHost` per caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use serde_json::json;
use shared::CallToolResult;
use shared::history::{History, HistoryEntry, describe, rfc3339_utc};
use shared::ids::slug_from_random;
use shared::lifecycle::{Existing, becomes_default, check_attach, idle_expired, visible_to};
use shared::mcp::{CallContext, ToolHost};
use shared::result::{
    ComputerInfo, exec_structured, inventory, operation_error, structured_result,
};
use shared::validate::{ExecRequest, Program, ToolCall};
use tracing::Instrument;

use crate::backend::Backend;
use crate::docker::exec::ExecSpec;
use crate::docker::{ContainerRecord, DockerError};
use crate::progress::Progress;
use tokio::sync::mpsc::UnboundedSender;

/// Errors a tool call can end in (each becomes an `isError` result).
#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    #[error(transparent)]
    Docker(#[from] DockerError),
    #[error(transparent)]
    Wasm(#[from] crate::wasm::WasmError),
    /// Fly Machines or E2B.
    #[error(transparent)]
    Cloud(#[from] shared::providers::computers::ComputersError),
    #[error(transparent)]
    Modal(#[from] crate::modal::ModalBackendError),
    #[error(transparent)]
    Policy(#[from] shared::lifecycle::LifecycleError),
    #[error(
        "computer {0:?} does not exist (or is another session's temporary computer); see computer_list"
    )]
    Unknown(String),
}

/// Exec defaults from the command line.
#[derive(Debug, Clone)]
pub struct ExecDefaults {
    pub timeout_secs: u64,
    pub output_limit: usize,
    pub shell: Option<String>,
    pub session_timeout_secs: u64,
}

#[derive(Debug, Clone)]
struct Tracked {
    temporary: bool,
    /// Owner key of a temporary computer.
    owner: Option<String>,
    /// Stateless owners have no session end: their temporaries expire when idle.
    stateless: bool,
    last_used_ms: u64,
    /// Commands running now: a computer in use is never idle, however long they run.
    running: u32,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
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
    tracked: Mutex<HashMap<String, Tracked>>,
    id_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Commands run through this server, per computer id (in memory; a deleted computer's
    /// history goes with it).
    history: Mutex<HashMap<String, History>>,
}

impl Computers {
    pub fn new(backend: Backend, defaults: ExecDefaults, host: String) -> Self {
        Self {
            backend,
            defaults,
            host,
            tracked: Mutex::new(HashMap::new()),
            id_locks: Mutex::new(HashMap::new()),
            history: Mutex::new(HashMap::new()),
        }
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    fn history(&self) -> std::sync::MutexGuard<'_, HashMap<String, History>> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tracked(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tracked>> {
        self.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn id_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.id_locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(id.to_owned()).or_default().clone()
    }

    /// Marks a command starting (`true`) or ending (`false`) on `id`.
    fn in_use(&self, id: &str, starting: bool) {
        if let Some(t) = self.tracked().get_mut(id) {
            t.running = if starting {
                t.running + 1
            } else {
                t.running.saturating_sub(1)
            };
            t.last_used_ms = now_ms();
        }
    }

    /// Attaches to `id` (creating it if missing) for `owner`. Returns its `temporary` flag.
    async fn attach(
        &self,
        id: &str,
        requested: Option<bool>,
        owner: &str,
        stateless: bool,
        progress: &Progress,
    ) -> Result<bool, ComputerError> {
        // Fast path: a computer this server already tracks needs no engine round trip.
        if let Some(known) = self.check_tracked(id, requested, owner) {
            return known;
        }
        let lock = self.id_lock(id);
        let _held = lock.lock().await;
        if let Some(known) = self.check_tracked(id, requested, owner) {
            return known;
        }
        let record = match self.backend.find(id).await? {
            Some(r) => r,
            None => {
                let r = self
                    .backend
                    .create(id, requested.unwrap_or(true), progress)
                    .await?;
                if r.temporary && r.instance.as_deref() == Some(self.backend.instance()) {
                    self.track_new(&r, owner, stateless);
                    return Ok(true);
                }
                // Permanent, or another server won the race: the policy below decides.
                r
            }
        };
        // It exists and we did not track it: a permanent computer (shared by id), or a
        // temporary one of another server or a dead one (never ours to take).
        let existing = Existing {
            computer_id: id,
            temporary: record.temporary,
            owner: None,
        };
        check_attach(&existing, requested, owner)?;
        if record.state != "running" {
            self.backend.start(id).await?;
        }
        self.track_new(&record, owner, stateless);
        Ok(record.temporary)
    }

    /// The policy's answer for a computer this server tracks; `None` if it is not tracked.
    fn check_tracked(
        &self,
        id: &str,
        requested: Option<bool>,
        owner: &str,
    ) -> Option<Result<bool, ComputerError>> {
        let t = self.tracked().get(id).cloned()?;
        let existing = Existing {
            computer_id: id,
            temporary: t.temporary,
            owner: t.owner.as_deref(),
        };
        Some(
            check_attach(&existing, requested, owner)
                .map(|()| t.temporary)
                .map_err(Into::into),
        )
    }

    fn track_new(&self, r: &ContainerRecord, owner: &str, stateless: bool) {
        self.tracked().insert(
            r.computer_id.clone(),
            Tracked {
                temporary: r.temporary,
                owner: r.temporary.then(|| owner.to_owned()),
                stateless,
                last_used_ms: now_ms(),
                running: 0,
            },
        );
    }

    fn new_slug(&self) -> String {
        slug_from_random(rand::random::<u64>())
    }

    async fn exec_on(
        &self,
        id: &str,
        temporary: bool,
        req: &ExecRequest,
    ) -> Result<serde_json::Value, ComputerError> {
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
        };
        // Held across the command, also when the call is cancelled and this future dropped.
        let _in_use = InUse::new(self, id);
        let started_ms = now_ms();
        let span = tracing::info_span!("exec", computer_id = id, backend = self.backend.name());
        let mut result = self.backend.exec(id, &spec).instrument(span.clone()).await;
        if matches!(
            result,
            Err(ComputerError::Docker(DockerError::NotRunning(_)))
        ) {
            // Stopped behind our back (engine restart, `docker stop`): start it, try once more.
            tracing::info!(computer_id = id, "computer was stopped; starting it again");
            if self.backend.start(id).await.is_ok() {
                result = self.backend.exec(id, &spec).instrument(span).await;
            }
        }
        match result {
            Ok(outcome) => {
                let command = match &req.program {
                    Program::Shell(c) => describe(Some(c), None),
                    Program::Argv(a) => describe(None, Some(a)),
                };
                self.history()
                    .entry(id.to_owned())
                    .or_default()
                    .push(HistoryEntry {
                        command,
                        started_at: rfc3339_utc(started_ms),
                        exit_code: outcome.exit_code,
                        duration_ms: outcome.duration_ms,
                        timed_out: outcome.timed_out_after.is_some(),
                        truncated: outcome.truncated_at.is_some(),
                    });
                Ok(exec_structured(id, temporary, outcome))
            }
            Err(e) => {
                if matches!(
                    e,
                    ComputerError::Docker(DockerError::NotFound(_))
                        | ComputerError::Wasm(crate::wasm::WasmError::NotFound(_))
                        | ComputerError::Cloud(
                            shared::providers::computers::ComputersError::NotFound(_)
                        )
                        | ComputerError::Modal(crate::modal::ModalBackendError::NotFound(_))
                ) {
                    self.tracked().remove(id);
                }
                Err(e)
            }
        }
    }

    fn info(&self, r: &ContainerRecord) -> ComputerInfo {
        ComputerInfo {
            computer_id: r.computer_id.clone(),
            sandbox_id: r.provider_id.chars().take(12).collect(),
            backend: self.backend.name().into(),
            state: r.state.clone(),
            temporary: r.temporary,
            image: r.image.clone(),
            created_at: r.created_at.clone(),
            history: self
                .history()
                .get(&r.computer_id)
                .map(History::entries)
                .unwrap_or_default(),
        }
    }

    /// May `owner` see `r`?
    fn visible(&self, r: &ContainerRecord, owner: &str) -> bool {
        let tracked = self.tracked().get(&r.computer_id).cloned();
        let owner_of = tracked.as_ref().and_then(|t| t.owner.clone());
        visible_to(
            &Existing {
                computer_id: &r.computer_id,
                temporary: r.temporary,
                owner: owner_of.as_deref(),
            },
            owner,
        )
    }

    async fn visible_record(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<ContainerRecord, ComputerError> {
        match self.backend.find(id).await? {
            Some(r) if self.visible(&r, owner) => Ok(r),
            _ => Err(ComputerError::Unknown(id.to_owned())),
        }
    }

    pub async fn list(&self, owner: &str) -> Result<Vec<ComputerInfo>, ComputerError> {
        let mut all = self.backend.list().await?;
        all.retain(|r| self.visible(r, owner));
        all.sort_by(|a, b| a.computer_id.cmp(&b.computer_id));
        Ok(all.iter().map(|r| self.info(r)).collect())
    }

    async fn remove_ids(&self, ids: Vec<String>) {
        let removals = ids.iter().map(|id| async move {
            match self.backend.remove(id).await {
                Ok(()) => tracing::info!(computer_id = id, "removed temporary computer"),
                Err(e) => tracing::warn!(computer_id = id, error = %e, "could not remove temporary computer"),
            }
        });
        join_all(removals).await;
        let mut tracked = self.tracked();
        let mut locks = self.id_locks.lock().unwrap_or_else(|p| p.into_inner());
        let mut history = self.history();
        for id in &ids {
            tracked.remove(id);
            locks.remove(id);
            history.remove(id);
        }
    }

    /// Removes every temporary computer of `owner` (its session ended).
    pub async fn release_owner(&self, owner: &str) {
        let ids: Vec<String> = self
            .tracked()
            .iter()
            .filter(|(_, t)| t.temporary && t.owner.as_deref() == Some(owner))
            .map(|(id, _)| id.clone())
            .collect();
        self.remove_ids(ids).await;
    }

    /// Removes stateless callers' temporaries unused for `--session-timeout`.
    pub async fn reap_idle(&self) {
        let now = now_ms();
        let ids: Vec<String> = self
            .tracked()
            .iter()
            .filter(|(_, t)| {
                t.temporary
                    && t.stateless
                    && t.running == 0
                    && idle_expired(t.last_used_ms, now, self.defaults.session_timeout_secs)
            })
            .map(|(id, _)| id.clone())
            .collect();
        if !ids.is_empty() {
            self.remove_ids(ids).await;
        }
    }

    /// Removes every temporary computer this server made (shutdown).
    pub async fn shutdown(&self) {
        let ids: Vec<String> = self
            .tracked()
            .iter()
            .filter(|(_, t)| t.temporary)
            .map(|(id, _)| id.clone())
            .collect();
        self.remove_ids(ids).await;
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
        Ok(n)
    }
}

/// One caller's view: an owner key, a default computer, and whether it is stateless.
#[derive(Debug, Clone)]
pub struct SessionHost {
    computers: Arc<Computers>,
    owner: String,
    stateless: bool,
    default: Arc<tokio::sync::Mutex<Option<String>>>,
    notifier: Option<UnboundedSender<serde_json::Value>>,
}

impl SessionHost {
    pub fn new(computers: Arc<Computers>, owner: impl Into<String>, stateless: bool) -> Self {
        Self {
            computers,
            owner: owner.into(),
            stateless,
            default: Arc::default(),
            notifier: None,
        }
    }

    /// Lets tool calls send progress notifications on this channel (stdio).
    pub fn with_notifier(mut self, tx: UnboundedSender<serde_json::Value>) -> Self {
        self.notifier = Some(tx);
        self
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Runs a validated exec or lifecycle call: the structured result, or why not. The MCP
    /// tools and the executor API both come through here.
    pub async fn run(
        &self,
        call: ToolCall,
        progress: &Progress,
    ) -> Result<serde_json::Value, ComputerError> {
        match call {
            ToolCall::Exec(req) => self.exec(req, progress).await,
            other => {
                let span = tracing::info_span!("lifecycle", tool = ?other);
                self.lifecycle(other, progress).instrument(span).await
            }
        }
    }

    async fn exec(
        &self,
        req: ExecRequest,
        progress: &Progress,
    ) -> Result<serde_json::Value, ComputerError> {
        let c = &self.computers;
        let attached = match &req.computer_id {
            Some(id) => c
                .attach(id, req.temporary, &self.owner, self.stateless, progress)
                .await
                .map(|t| (id.clone(), t)),
            None if !becomes_default(req.temporary) => {
                let id = c.new_slug();
                c.attach(&id, Some(false), &self.owner, self.stateless, progress)
                    .await
                    .map(|t| (id, t))
            }
            None => {
                // Hold the default slot while creating, so concurrent first calls share one computer.
                let mut default = self.default.lock().await;
                match default.clone() {
                    Some(id) => c
                        .attach(&id, None, &self.owner, self.stateless, progress)
                        .await
                        .map(|t| (id, t)),
                    None => {
                        let id = c.new_slug();
                        let r = c
                            .attach(&id, Some(true), &self.owner, self.stateless, progress)
                            .await;
                        if r.is_ok() {
                            *default = Some(id.clone());
                        }
                        r.map(|t| (id, t))
                    }
                }
            }
        };
        let (id, temporary) = attached?;
        c.exec_on(&id, temporary, &req).await
    }

    async fn lifecycle(
        &self,
        call: ToolCall,
        progress: &Progress,
    ) -> Result<serde_json::Value, ComputerError> {
        let c = &self.computers;
        match call {
            ToolCall::List | ToolCall::Dashboard => Ok(inventory(&c.list(&self.owner).await?)),
            ToolCall::Create {
                computer_id,
                temporary,
            } => {
                let id = computer_id.unwrap_or_else(|| c.new_slug());
                let temporary = c
                    .attach(&id, temporary, &self.owner, self.stateless, progress)
                    .await?;
                let r = c
                    .backend
                    .find(&id)
                    .await?
                    .ok_or_else(|| ComputerError::Unknown(id.clone()))?;
                Ok(
                    json!({"ok": true, "computer_id": id, "sandbox_id": c.info(&r).sandbox_id, "temporary": temporary}),
                )
            }
            ToolCall::Restart { computer_id } => {
                let r = c.visible_record(&computer_id, &self.owner).await?;
                c.backend.restart(&computer_id).await?;
                Ok(
                    json!({"ok": true, "computer_id": computer_id, "sandbox_id": c.info(&r).sandbox_id, "temporary": r.temporary}),
                )
            }
            ToolCall::FactoryReset { computer_id } => {
                let r = c.visible_record(&computer_id, &self.owner).await?;
                let lock = c.id_lock(&computer_id);
                let _held = lock.lock().await;
                let fresh = c
                    .backend
                    .factory_reset(&computer_id, r.temporary, progress)
                    .await?;
                Ok(
                    json!({"ok": true, "computer_id": computer_id, "sandbox_id": c.info(&fresh).sandbox_id, "temporary": fresh.temporary}),
                )
            }
            ToolCall::Delete { computer_id } => {
                c.visible_record(&computer_id, &self.owner).await?;
                let lock = c.id_lock(&computer_id);
                let _held = lock.lock().await;
                c.backend.remove(&computer_id).await?;
                c.tracked().remove(&computer_id);
                c.history().remove(&computer_id);
                let mut default = self.default.lock().await;
                if default.as_deref() == Some(computer_id.as_str()) {
                    *default = None;
                }
                Ok(json!({"ok": true, "computer_id": computer_id, "deleted": true}))
            }
            ToolCall::Exec(_) => Ok(json!({})),
        }
    }

    /// Ends this caller's session: its temporaries go away.
    pub async fn close(&self) {
        self.computers.release_owner(&self.owner).await;
    }
}

impl ToolHost for SessionHost {
    async fn call_tool(&self, call: ToolCall, ctx: &CallContext) -> CallToolResult {
        let progress = Progress::new(self.notifier.clone(), ctx.progress_token.clone());
        match self.run(call, &progress).await {
            Ok(v) => structured_result(v),
            Err(e) => operation_error(&e.to_string()),
        }
    }
}

//! Computers the gateway places directly on Fly Machines or E2B, without an executor: the
//! executor API's operations (create, exec, restart, factory reset, delete, list) done in
//! the Worker over the shared provider computers (`shared::providers::computers`) and a
//! fetch transport, as an [`OpHandler`] like an executor. Machines and sandboxes are named
//! by the team's keys ([`shared::teams`]), so two teams' `build-box` are two machines of the
//! one Fly app (or two E2B sandboxes); answers name computers by the caller's ids and have
//! exactly the shapes an executor gives, so the tool host treats every place alike.
//!
//! Configuration (Worker vars; tokens as secrets): Fly with `FLY_API_TOKEN` and
//! `FLY_APP_NAME` (created in `FLY_ORG`, default `personal`, when missing), optional
//! `FLY_REGION`, `FLY_IMAGE`, `FLY_CPU_KIND`, `FLY_CPUS`, `FLY_MEMORY_MB`; E2B with
//! `E2B_API_KEY`, optional `E2B_TEMPLATE`, `E2B_SANDBOX_TIMEOUT`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use shared::answer::Answer;
use shared::egress::Policy;
use shared::executor_api::{ApiError, ErrorCode};
use shared::files::over_exec::{self, OverExec, PathInfo, Shell, WriteHow};
use shared::files::{self, FileCall};
use shared::history::describe;
use shared::jobs::over_exec::{self as over_jobs, JobsOverExec};
use shared::jobs::{
    JobOutput, JobPoll, job_id_from, job_list_structured, job_structured, yielded_structured,
};
use shared::op::{Op, OpHandler};
use shared::providers::HttpTransport;
use shared::providers::computers::e2b::{E2bComputers, E2bSettings};
use shared::providers::computers::fly::{FlyComputers, FlySettings};
use shared::providers::computers::{
    CloudComputers, Computer, ComputersError, Owner, Program, ProviderExec, program_argv,
};
use shared::providers::e2b::E2bClient;
use shared::providers::fly::FlyClient;
use shared::result::{
    ComputerInfo, Created, Deleted, ExecAnswer, Listed, exec_structured, inventory,
};
use shared::teams;
use shared::validate::{ExecRequest, Program as ValidProgram};

/// Place names of the direct providers in the team inventory (an executor may not use them).
pub const FLY: &str = "fly";
pub const E2B: &str = "e2b";

/// Where a computer the gateway placed lives, read once from its inventory record's place:
/// a provider the Worker drives itself, or an executor by name. The closed set the edge
/// matches on, instead of comparing place strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgePlace<'a> {
    Fly,
    E2b,
    Executor(&'a str),
}

impl<'a> EdgePlace<'a> {
    /// The place a record names (`fly`, `e2b`, or an executor's name).
    pub fn of(place: &'a str) -> Self {
        match place {
            FLY => EdgePlace::Fly,
            E2B => EdgePlace::E2b,
            name => EdgePlace::Executor(name),
        }
    }

    /// A provider the Worker reaches itself (no executor in between).
    pub fn is_direct(self) -> bool {
        !matches!(self, EdgePlace::Executor(_))
    }
}

/// Default command timeout and output limit (as on executors).
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
pub const OUTPUT_LIMIT: usize = 2 * 1024 * 1024;

/// Who owns the gateway's temporaries (its Durable Objects reap them).
fn owner() -> Owner {
    Owner {
        instance: "gateway".to_owned(),
        host: "cloudflare".to_owned(),
    }
}

/// Fly settings from the Worker's vars (`var(name)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlyCfg {
    pub api_url: String,
    pub token: String,
    pub app: String,
    pub org: String,
    pub settings: FlySettings,
}

/// E2B settings from the Worker's vars.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bCfg {
    pub api_url: String,
    pub sandbox_url: Option<String>,
    pub api_key: String,
    pub settings: E2bSettings,
}

/// A Worker variable that is missing or malformed: which, and what to set (answered on
/// every request that needs it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSetting(pub String);

shared::message_error_from!(BadSetting);

/// Reads the Fly configuration: `Ok(None)` when no token is set, `Err` when it is set but
/// incomplete or malformed (said on use).
pub fn fly_cfg(var: impl Fn(&str) -> Option<String>) -> Result<Option<FlyCfg>, BadSetting> {
    let Some(token) = var("FLY_API_TOKEN") else {
        return Ok(None);
    };
    let app = var("FLY_APP_NAME").ok_or(
        "FLY_API_TOKEN is set but FLY_APP_NAME is not: name the Fly app that holds the gateway's computers (it is created when missing)",
    )?;
    let number = |name: &str, default: u32| -> Result<u32, BadSetting> {
        match var(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| BadSetting(format!("{name} {v:?} must be a positive integer"))),
        }
    };
    let cpu_kind = var("FLY_CPU_KIND").unwrap_or_else(|| "shared".into());
    if !matches!(cpu_kind.as_str(), "shared" | "performance") {
        return Err(BadSetting(format!(
            "FLY_CPU_KIND {cpu_kind:?} must be `shared` or `performance`"
        )));
    }
    let defaults = FlySettings::default();
    Ok(Some(FlyCfg {
        api_url: var("FLY_API_URL").unwrap_or_default(),
        token,
        app,
        org: var("FLY_ORG").unwrap_or_else(|| "personal".into()),
        settings: FlySettings {
            region: var("FLY_REGION"),
            image: var("FLY_IMAGE").unwrap_or(defaults.image),
            cpu_kind,
            cpus: number("FLY_CPUS", 1)?,
            memory_mb: number("FLY_MEMORY_MB", 512)?,
            rootfs_size_gb: None,
            sync_exec_secs: u64::from(number(
                "FLY_SYNC_EXEC_SECS",
                defaults.sync_exec_secs as u32,
            )?),
        },
    }))
}

/// Reads the E2B configuration: `Ok(None)` when no key is set.
pub fn e2b_cfg(var: impl Fn(&str) -> Option<String>) -> Result<Option<E2bCfg>, BadSetting> {
    let Some(api_key) = var("E2B_API_KEY") else {
        return Ok(None);
    };
    let defaults = E2bSettings::default();
    let timeout = match var("E2B_SANDBOX_TIMEOUT") {
        None => defaults.sandbox_timeout_secs,
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("E2B_SANDBOX_TIMEOUT {v:?} must be a positive integer"))?,
    };
    Ok(Some(E2bCfg {
        api_url: var("E2B_API_URL").unwrap_or_default(),
        sandbox_url: var("E2B_SANDBOX_URL"),
        api_key,
        settings: E2bSettings {
            template: var("E2B_TEMPLATE").unwrap_or(defaults.template),
            sandbox_timeout_secs: timeout,
            ..defaults
        },
    }))
}

/// Fly computers of the gateway: machines of `FLY_APP_NAME`, the app created on first use
/// when missing.
pub fn fly<T: HttpTransport>(cfg: &FlyCfg, transport: T) -> Cloud<FlyComputers<T>> {
    let client = FlyClient::new(cfg.api_url.clone(), cfg.token.clone(), transport);
    Cloud::new(
        FlyComputers::new(client, cfg.app.clone(), cfg.settings.clone(), owner())
            .creating_app_in(cfg.org.clone()),
    )
}

/// E2B computers of the gateway.
pub fn e2b<T: HttpTransport>(cfg: &E2bCfg, transport: T) -> Cloud<E2bComputers<T>> {
    let client = E2bClient::new(
        cfg.api_url.clone(),
        cfg.sandbox_url.clone(),
        cfg.api_key.clone(),
        transport,
    );
    Cloud::new(E2bComputers::new(client, cfg.settings.clone(), owner()))
}

/// One direct provider, as a place for computers.
pub struct Cloud<C> {
    computers: C,
    /// Computers this isolate has seen running (no lookup before their commands), with
    /// whether each is temporary.
    ready: Mutex<HashMap<String, bool>>,
}

impl<C: CloudComputers> Cloud<C> {
    pub fn new(computers: C) -> Self {
        Self {
            computers,
            ready: Mutex::default(),
        }
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The team's computers, named by the caller's ids.
    async fn list(&self, team: &str) -> Result<Listed, ComputersError> {
        self.computers.prepare().await?;
        let list = self.computers.list(&teams::prefix(team)).await?;
        let items: Vec<ComputerInfo> = list
            .iter()
            .filter_map(|r| Some(self.info(teams::id_of(Some(team), &r.computer_id)?, r)))
            .collect();
        Ok(inventory(items))
    }

    /// Creates computer `id` of `team`, or attaches to it if it exists.
    /// `network`: a new computer's policy (the team's, narrowed by the agent: the edge's
    /// [`crate::networks::TeamNetworks`]), held by the provider's own rules (E2B) or
    /// refused (Fly, anything but `all`).
    async fn create(
        &self,
        team: &str,
        id: &str,
        temporary: bool,
        network: &Policy,
    ) -> Result<Created, ComputersError> {
        self.computers.prepare().await?;
        let c = &self.computers;
        let k = teams::key(Some(team), id);
        let made = match c.find(&k).await? {
            Some(found) => found,
            None => c.create(&k, temporary, Some(team), network).await?,
        };
        self.ready().insert(k, made.temporary);
        Ok(created(id, &made))
    }

    /// A command in the foreground (made on first use).
    async fn exec(&self, team: &str, req: &ExecRequest) -> Result<ExecAnswer, ComputersError> {
        self.computers.prepare().await?;
        let id = req.computer_id.clone().unwrap_or_default();
        let k = teams::key(Some(team), &id);
        let network = req.network.clone().unwrap_or_default();
        let temporary = self
            .ensure(&k, req.temporary.unwrap_or(true), team, &network)
            .await?;
        let out = self.computers.exec(&k, &provider_exec(req)).await;
        if out.is_err() {
            // Gone, stopped, paused…: look again before the next command.
            self.ready().remove(&k);
        }
        Ok(exec_structured(&id, temporary, out?))
    }

    async fn restart(&self, team: &str, id: &str) -> Result<Created, ComputersError> {
        self.computers.prepare().await?;
        let k = teams::key(Some(team), id);
        self.get(&k, id).await?;
        self.computers.restart(&k).await?;
        Ok(created(id, &self.get(&k, id).await?))
    }

    async fn factory_reset(&self, team: &str, id: &str) -> Result<Created, ComputersError> {
        self.computers.prepare().await?;
        let k = teams::key(Some(team), id);
        let old = self.get(&k, id).await?;
        self.ready().remove(&k);
        // A fresh computer keeps the policy it was made with.
        let network = old.network.clone().unwrap_or_default();
        let fresh = self
            .computers
            .factory_reset(&k, old.temporary, Some(team), &network)
            .await?;
        self.ready().insert(k, fresh.temporary);
        Ok(created(id, &fresh))
    }

    async fn delete(&self, team: &str, id: &str) -> Result<Deleted, ComputersError> {
        self.computers.prepare().await?;
        let k = teams::key(Some(team), id);
        self.get(&k, id).await?;
        self.ready().remove(&k);
        self.computers.remove(&k).await?;
        Ok(Deleted::new(id))
    }

    /// Makes sure `key` exists and runs (creating it on first use, confined to `network`);
    /// its temporary flag.
    async fn ensure(
        &self,
        key: &str,
        temporary: bool,
        team: &str,
        network: &Policy,
    ) -> Result<bool, ComputersError> {
        if let Some(known) = self.ready().get(key) {
            return Ok(*known);
        }
        let c = match self.computers.find(key).await? {
            None => {
                self.computers
                    .create(key, temporary, Some(team), network)
                    .await?
            }
            Some(c) if !c.state.is_running() => {
                self.computers.start(key).await?;
                c
            }
            Some(c) => c,
        };
        self.ready().insert(key.to_owned(), c.temporary);
        Ok(c.temporary)
    }

    /// The computer with backend key `key`, or not found (named `id`, the caller's).
    async fn get(&self, key: &str, id: &str) -> Result<Computer, ComputersError> {
        self.computers
            .find(key)
            .await?
            .ok_or_else(|| ComputersError::NotFound(id.to_owned()))
    }

    fn info(&self, id: &str, c: &Computer) -> ComputerInfo {
        ComputerInfo {
            computer_id: id.to_owned(),
            sandbox_id: c.provider_id.chars().take(12).collect(),
            backend: self.computers.kind().name().to_owned(),
            state: c.state.clone(),
            temporary: c.temporary,
            image: c.image.clone(),
            created_at: c.created_at.clone(),
            history: Vec::new(),
            jobs: None,
            error: None,
            network: None,
        }
    }
}

impl<C: CloudComputers> OpHandler for Cloud<C> {
    /// Does `op` for `team` on keys of the team's id space ([`shared::teams`]); answers
    /// name computers by the caller's ids.
    async fn handle(&self, team: &str, op: Op) -> Result<Answer, ApiError> {
        op.named()?;
        if let Some(cap) = op.needs() {
            let kind = self.computers.kind();
            kind.capabilities()
                .require(kind.name(), cap)
                .map_err(|e| ApiError::new(ErrorCode::Unsupported, e.to_string()))?;
        }
        let answer = |r: Result<Answer, ComputersError>| r.map_err(computers_error);
        match op {
            Op::File(call) => self.file(team, call).await,
            Op::Exec(req) if req.yield_ms.is_some() => Ok(self.start_job(team, req).await?.into()),
            Op::Job(poll) => {
                let id = poll.computer_id.clone().unwrap_or_default();
                Ok(job_structured(&id, self.job(team, poll).await?).into())
            }
            // The read itself, for the team's task record (see `edge::tasks`).
            Op::JobRead(poll) => Ok(self.job(team, poll).await?.into()),
            Op::Jobs { computer_id } => {
                let computer_id = computer_id.unwrap_or_default();
                let k = teams::key(Some(team), &computer_id);
                let jobs = over_jobs::list(&self.shell(&k)).await.map_err(job_error)?;
                Ok(job_list_structured(&computer_id, jobs).into())
            }
            Op::List | Op::Dashboard => answer(self.list(team).await.map(Answer::from)),
            Op::Create {
                computer_id,
                temporary,
                network,
            } => {
                let id = computer_id.unwrap_or_default();
                let network = network.unwrap_or_default();
                let made = self
                    .create(team, &id, temporary.unwrap_or(true), &network)
                    .await;
                answer(made.map(Answer::from))
            }
            Op::Exec(req) => answer(self.exec(team, &req).await.map(Answer::from)),
            Op::Restart { computer_id } => {
                answer(self.restart(team, &computer_id).await.map(Answer::from))
            }
            Op::FactoryReset { computer_id } => answer(
                self.factory_reset(team, &computer_id)
                    .await
                    .map(Answer::from),
            ),
            Op::Delete { computer_id } => {
                answer(self.delete(team, &computer_id).await.map(Answer::from))
            }
            // Refused above: no provider reached from the Worker keeps snapshots yet.
            Op::Snapshot(_) => Err(ApiError::new(
                ErrorCode::Unsupported,
                "snapshots are not kept by this provider",
            )),
        }
    }
}

/// A cloud computer's exec as the shell of `shared::files::over_exec` and
/// `shared::jobs::over_exec`.
struct CloudShell<'a, C> {
    computers: &'a C,
    key: &'a str,
}

impl<C: CloudComputers> Shell for CloudShell<'_, C> {
    type Error = ComputersError;

    async fn run(
        &self,
        argv: Vec<String>,
        stdin: Option<String>,
    ) -> Result<shared::result::ExecOutcome, ComputersError> {
        let nonce = random_u64(|| format!("{argv:?}"));
        let ex = ProviderExec {
            argv,
            stdin,
            timeout_ms: over_exec::TIMEOUT_MS,
            output_limit: over_exec::OUTPUT_LIMIT,
            nonce,
        };
        self.computers.exec(self.key, &ex).await
    }

    fn moves_files(&self) -> bool {
        self.computers.moves_files()
    }

    async fn stat(&self, path: &str) -> Result<Option<PathInfo>, OverExec<ComputersError>> {
        self.computers.file_stat(self.key, path).await
    }

    async fn download(&self, path: &str) -> Result<Vec<u8>, OverExec<ComputersError>> {
        self.computers.file_download(self.key, path).await
    }

    async fn upload(&self, path: &str, bytes: Vec<u8>) -> Result<(), OverExec<ComputersError>> {
        self.computers.file_upload(self.key, path, bytes).await
    }
}

fn file_error(e: OverExec<ComputersError>) -> ApiError {
    match e {
        OverExec::Shell(e) => computers_error(e),
        OverExec::NoSuchFile(m) => ApiError::new(ErrorCode::NotFound, m),
        OverExec::Refused(m) => ApiError::new(ErrorCode::BadRequest, m),
    }
}

fn job_error(e: JobsOverExec<ComputersError>) -> ApiError {
    match e {
        JobsOverExec::Shell(e) => computers_error(e),
        JobsOverExec::NoSuchJob(m) => ApiError::new(ErrorCode::NotFound, m),
        JobsOverExec::Refused(m) => ApiError::new(ErrorCode::BadRequest, m),
        JobsOverExec::Failed(m) => ApiError::new(ErrorCode::Engine, m),
        JobsOverExec::Unreadable(e) => ApiError::new(ErrorCode::Engine, e.to_string()),
    }
}

fn computers_error(e: ComputersError) -> ApiError {
    let code = match e {
        ComputersError::NotFound(_) => ErrorCode::NotFound,
        ComputersError::Network(_)
        | ComputersError::E2b(shared::providers::e2b::E2bError::Network(_)) => {
            ErrorCode::BadRequest
        }
        ComputersError::Fly(_) | ComputersError::E2b(_) => ErrorCode::Engine,
    };
    ApiError::new(code, e.to_string())
}

impl<C: CloudComputers> Cloud<C> {
    fn shell<'a>(&'a self, key: &'a str) -> CloudShell<'a, C> {
        CloudShell {
            computers: &self.computers,
            key,
        }
    }

    /// A `yield_ms` exec: the command starts as a job (through the computer's exec, kept by
    /// the runner on the computer) and the first read waits up to `yield_ms` for its end.
    async fn start_job(&self, team: &str, req: ExecRequest) -> Result<ExecAnswer, ApiError> {
        let id = req.computer_id.clone().unwrap_or_default();
        let k = teams::key(Some(team), &id);
        self.computers.prepare().await.map_err(computers_error)?;
        let network = req.network.clone().unwrap_or_default();
        let temporary = self
            .ensure(&k, req.temporary.unwrap_or(true), team, &network)
            .await
            .map_err(computers_error)?;
        let ex = provider_exec(&req);
        let command = match &req.program {
            ValidProgram::Shell(c) => describe(Some(c), None),
            ValidProgram::Argv(a) => describe(None, Some(a)),
        };
        let job_id = job_id_from(random_bytes(&k));
        let start = over_jobs::Start {
            job_id: &job_id,
            command: &command,
            program: &ex.argv,
            timeout_ms: ex.timeout_ms,
        };
        let sh = self.shell(&k);
        let launched = self.computers.now_ms();
        if let Err(e) = over_jobs::start(&sh, &start).await {
            self.ready().remove(&k);
            return Err(job_error(e));
        }
        // Given `stdin` is the whole input, as in the foreground.
        let poll = over_jobs::Poll {
            stdin: req.stdin.clone().map(String::into_bytes),
            close_stdin: req.stdin.is_some(),
            signal: None,
            // The yield counts from the launch: a slow start does not lengthen it.
            wait_ms: req
                .yield_ms
                .unwrap_or_default()
                .min(ex.timeout_ms)
                .saturating_sub(self.computers.now_ms().saturating_sub(launched)),
            until_exit: true,
            max_bytes: OUTPUT_LIMIT,
            peek: false,
        };
        let out = over_jobs::poll(&sh, &job_id, &poll)
            .await
            .map_err(job_error)?;
        Ok(yielded_structured(&id, temporary, out))
    }

    /// A `terminal_job` read of one job.
    async fn job(&self, team: &str, p: JobPoll) -> Result<JobOutput, ApiError> {
        let id = p.computer_id.clone().unwrap_or_default();
        let k = teams::key(Some(team), &id);
        let poll = over_jobs::Poll {
            stdin: p.stdin,
            close_stdin: p.close_stdin,
            signal: p.signal,
            wait_ms: p.wait_ms,
            until_exit: false,
            max_bytes: OUTPUT_LIMIT,
            peek: p.peek,
        };
        over_jobs::poll(&self.shell(&k), &p.job_id, &poll)
            .await
            .map_err(job_error)
    }

    /// A file tool through the computer's exec (created on first use, like an exec).
    async fn file(&self, team: &str, call: FileCall) -> Result<Answer, ApiError> {
        let id = call.computer_id().unwrap_or_default().to_owned();
        let k = teams::key(Some(team), &id);
        self.computers.prepare().await.map_err(computers_error)?;
        // A new computer's policy came with the edge's create before this call.
        self.ensure(&k, call.temporary().unwrap_or(true), team, &Policy::All)
            .await
            .map_err(computers_error)?;
        let sh = CloudShell {
            computers: &self.computers,
            key: &k,
        };
        let how = |path, append, create_only, mode, make_dirs| {
            let nonce = random_u64(|| k.clone());
            WriteHow::new(path, append, create_only, mode, make_dirs, nonce)
        };
        let result = match &call {
            FileCall::Read(r) => over_exec::read(&sh, &r.path, r.offset, r.length)
                .await
                .map(|slice| files::read_structured(&id, &r.path, &slice).into()),
            FileCall::Write(w) => over_exec::write(
                &sh,
                how(&w.path, w.append, w.create_only, w.mode, w.make_dirs),
                &w.content,
            )
            .await
            .map(|written| files::write_structured(&id, &w.path, &written).into()),
            FileCall::Edit(e) => {
                let file = over_exec::read(&sh, &e.path, 0, files::MAX_EDIT_BYTES)
                    .await
                    .map_err(file_error)?;
                let (edited, n) = files::edit_file(e, &file)
                    .map_err(|m| ApiError::new(ErrorCode::BadRequest, m.to_string()))?;
                over_exec::write(
                    &sh,
                    how(&e.path, false, false, Some(file.mode), false),
                    &edited,
                )
                .await
                .map(|written| files::edit_structured(&id, &e.path, n, written.size).into())
            }
        };
        if result.is_err() {
            // Gone, stopped, paused…: look again before the next call.
            self.ready().remove(&k);
        }
        result.map_err(file_error)
    }
}

/// Most bytes one `PUT /v1/files` takes on a computer placed here (the executors'
/// `--file-limit` default).
pub const FILE_LIMIT: u64 = 1 << 30;

impl<C: CloudComputers> Cloud<C> {
    /// One slice of `GET /v1/files` on the team's computer `id`: bytes from `offset`, at
    /// most [`files::MAX_SLICE`] (the Worker holds one slice at a time).
    pub async fn file_slice(
        &self,
        team: &str,
        id: &str,
        path: &str,
        offset: u64,
    ) -> Result<files::Slice, ApiError> {
        let k = teams::key(Some(team), id);
        self.computers.prepare().await.map_err(computers_error)?;
        over_exec::read(&self.shell(&k), path, offset, files::MAX_SLICE)
            .await
            .map_err(|e| {
                self.ready().remove(&k);
                file_error(e)
            })
    }

    /// `PUT /v1/files` on the team's computer `id` (made on first use): the body's chunks
    /// staged beside the target a slice at a time, committed at its end; a body that
    /// breaks off or passes [`FILE_LIMIT`] leaves the old file as it was.
    pub async fn file_put<S>(
        &self,
        team: &str,
        id: &str,
        path: &str,
        how: files::PutQuery,
        mut body: S,
    ) -> Result<files::WriteAnswer, ApiError>
    where
        S: futures_util::Stream<Item = Result<Vec<u8>, files::BrokenStream>> + Unpin,
    {
        use futures_util::StreamExt;
        let k = teams::key(Some(team), id);
        self.computers.prepare().await.map_err(computers_error)?;
        self.ensure(&k, how.temporary.unwrap_or(true), team, &Policy::All)
            .await
            .map_err(computers_error)?;
        let sh = self.shell(&k);
        let nonce = random_u64(|| k.clone());
        let write = WriteHow::new(path, false, how.create_only, how.mode, how.make_dirs, nonce);
        let mut staged = over_exec::Staged::new(&sh, write);
        let mut total = 0u64;
        while let Some(chunk) = body.next().await {
            let failed = match chunk {
                Ok(bytes) => {
                    total += bytes.len() as u64;
                    if total > FILE_LIMIT {
                        Some(ApiError::new(
                            ErrorCode::TooLarge,
                            format!(
                                "{path}: the upload is over the {FILE_LIMIT}-byte file limit; the old file is unchanged"
                            ),
                        ))
                    } else {
                        staged.add(&bytes).await.err().map(file_error)
                    }
                }
                Err(why) => Some(ApiError::new(
                    ErrorCode::BadRequest,
                    format!("{path}: the upload broke off ({why}); the old file is unchanged"),
                )),
            };
            if let Some(e) = failed {
                staged.abort().await;
                return Err(e);
            }
        }
        let written = staged.commit().await.map_err(file_error)?;
        Ok(files::write_structured(id, path, &written))
    }
}

/// The answer to create, restart and factory reset.
fn created(id: &str, c: &Computer) -> Created {
    Created::new(id, &c.provider_id, c.temporary)
}

/// The provider command of a validated exec request.
pub fn provider_exec(req: &ExecRequest) -> ProviderExec {
    let program = match &req.program {
        ValidProgram::Shell(command) => Program::Shell {
            shell: None,
            command,
        },
        ValidProgram::Argv(args) => Program::Argv(args),
    };
    // A collision only matters for two commands started in the same millisecond on one
    // machine.
    let nonce = random_u64(|| format!("{req:?}"));
    ProviderExec {
        argv: program_argv(req.working_directory.as_deref(), &req.env, program),
        stdin: req.stdin.clone(),
        timeout_ms: req
            .timeout_secs
            .unwrap_or(DEFAULT_TIMEOUT_SECS)
            .saturating_mul(1000),
        output_limit: OUTPUT_LIMIT,
        nonce,
    }
}

#[cfg(target_arch = "wasm32")]
fn getrandom_fill(buf: &mut [u8]) -> Result<(), ()> {
    getrandom::fill(buf).map_err(|_| ())
}

#[cfg(not(target_arch = "wasm32"))]
fn getrandom_fill(_buf: &mut [u8]) -> Result<(), ()> {
    Err(())
}

/// A random number from the Worker's random source; without it (native tests), a hash of
/// `salt()` and a counter, so two calls never give the same.
fn random_u64(salt: impl FnOnce() -> String) -> u64 {
    let mut b = [0u8; 8];
    if getrandom_fill(&mut b).is_ok() {
        return u64::from_le_bytes(b);
    }
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    fnv(format!("{}/{n}", salt()).as_bytes())
}

/// 12 random bytes (a job id), from [`random_u64`].
fn random_bytes(salt: &str) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&random_u64(|| salt.to_owned()).to_le_bytes());
    b[8..].copy_from_slice(&random_u64(|| salt.to_owned()).to_le_bytes()[..4]);
    b
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn places_are_read_once_into_a_closed_set() {
        assert_eq!(EdgePlace::of("fly"), EdgePlace::Fly);
        assert_eq!(EdgePlace::of("e2b"), EdgePlace::E2b);
        assert_eq!(EdgePlace::of("exec-1"), EdgePlace::Executor("exec-1"));
        assert_eq!(EdgePlace::of("Fly"), EdgePlace::Executor("Fly"));
        assert!(EdgePlace::Fly.is_direct() && EdgePlace::E2b.is_direct());
        assert!(!EdgePlace::of("local").is_direct());
    }
    use std::collections::HashSet;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn fly_needs_a_token_and_an_app() {
        assert_eq!(fly_cfg(vars(&[])), Ok(None));
        let e = fly_cfg(vars(&[("FLY_API_TOKEN", "t")])).unwrap_err();
        assert!(e.0.contains("FLY_APP_NAME"), "{e}");
        let c = fly_cfg(vars(&[("FLY_API_TOKEN", "t"), ("FLY_APP_NAME", "a")]))
            .unwrap()
            .unwrap();
        assert_eq!((c.org.as_str(), c.settings.memory_mb), ("personal", 512));
        let e = fly_cfg(vars(&[
            ("FLY_API_TOKEN", "t"),
            ("FLY_APP_NAME", "a"),
            ("FLY_MEMORY_MB", "lots"),
        ]))
        .unwrap_err();
        assert!(e.0.contains("FLY_MEMORY_MB"), "{e}");
        let e = fly_cfg(vars(&[
            ("FLY_API_TOKEN", "t"),
            ("FLY_APP_NAME", "a"),
            ("FLY_CPU_KIND", "turbo"),
        ]))
        .unwrap_err();
        assert!(e.0.contains("FLY_CPU_KIND"), "{e}");
    }

    #[test]
    fn e2b_reads_its_key_and_timeout() {
        assert_eq!(e2b_cfg(vars(&[])), Ok(None));
        let c = e2b_cfg(vars(&[("E2B_API_KEY", "k"), ("E2B_TEMPLATE", "py")]))
            .unwrap()
            .unwrap();
        assert_eq!(c.settings.template, "py");
        assert_eq!(c.settings.sandbox_timeout_secs, 3600);
        assert!(
            e2b_cfg(vars(&[("E2B_API_KEY", "k"), ("E2B_SANDBOX_TIMEOUT", "0")]))
                .unwrap_err()
                .0
                .contains("E2B_SANDBOX_TIMEOUT")
        );
    }

    fn request(program: ValidProgram) -> ExecRequest {
        ExecRequest {
            program,
            stdin: None,
            working_directory: None,
            timeout_secs: None,
            computer_id: Some("box".into()),
            temporary: None,
            env: Vec::new(),
            yield_ms: None,
            network: None,
        }
    }

    #[test]
    fn exec_requests_become_provider_commands() {
        let mut req = request(ValidProgram::Argv(vec!["ls".into(), "-l".into()]));
        req.working_directory = Some("/tmp".into());
        req.timeout_secs = Some(5);
        req.stdin = Some("x".into());
        let ex = provider_exec(&req);
        assert_eq!(&ex.argv[ex.argv.len() - 2..], &["ls", "-l"]);
        assert!(ex.argv.contains(&"/tmp".to_owned()));
        assert_eq!(ex.timeout_ms, 5000);
        assert_eq!(ex.stdin.as_deref(), Some("x"));
        let ex = provider_exec(&request(ValidProgram::Shell("echo hi".into())));
        assert_eq!(ex.timeout_ms, DEFAULT_TIMEOUT_SECS * 1000);
        assert_eq!(ex.argv.last().map(String::as_str), Some("echo hi"));
    }

    #[test]
    fn every_fly_setting_is_read_from_its_var() {
        let c = fly_cfg(vars(&[
            ("FLY_API_TOKEN", "tok"),
            ("FLY_APP_NAME", "boxes"),
            ("FLY_ORG", "acme"),
            ("FLY_API_URL", "http://127.0.0.1:9"),
            ("FLY_REGION", "ams"),
            ("FLY_IMAGE", "ubuntu:24.04"),
            ("FLY_CPU_KIND", "performance"),
            ("FLY_CPUS", " 4 "),
            ("FLY_MEMORY_MB", "2048"),
            ("FLY_SYNC_EXEC_SECS", "7"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.token.as_str(), c.app.as_str(), c.org.as_str()),
            ("tok", "boxes", "acme")
        );
        assert_eq!(c.api_url, "http://127.0.0.1:9");
        let s = &c.settings;
        assert_eq!(s.region.as_deref(), Some("ams"));
        assert_eq!(
            (s.image.as_str(), s.cpu_kind.as_str()),
            ("ubuntu:24.04", "performance")
        );
        assert_eq!((s.cpus, s.memory_mb, s.sync_exec_secs), (4, 2048, 7));
        // Unset: the shared defaults, no region.
        let d = fly_cfg(vars(&[("FLY_API_TOKEN", "t"), ("FLY_APP_NAME", "a")]))
            .unwrap()
            .unwrap();
        let defaults = FlySettings::default();
        assert_eq!(d.settings.region, None);
        assert_eq!(d.settings.image, defaults.image);
        assert_eq!(d.settings.sync_exec_secs, defaults.sync_exec_secs);
        assert_eq!(
            (d.settings.cpu_kind.as_str(), d.settings.cpus),
            ("shared", 1)
        );
    }

    #[test]
    fn a_count_that_is_not_positive_is_refused_with_its_value() {
        for (name, bad) in [
            ("FLY_CPUS", "0"),
            ("FLY_CPUS", "-2"),
            ("FLY_MEMORY_MB", "1.5"),
            ("FLY_SYNC_EXEC_SECS", ""),
        ] {
            let e = fly_cfg(vars(&[
                ("FLY_API_TOKEN", "t"),
                ("FLY_APP_NAME", "a"),
                (name, bad),
            ]))
            .unwrap_err();
            assert!(
                e.0.contains(&format!("{name} {bad:?} must be a positive integer")),
                "{e}"
            );
        }
        let e = e2b_cfg(vars(&[("E2B_API_KEY", "k"), ("E2B_SANDBOX_TIMEOUT", "1h")])).unwrap_err();
        assert!(e.0.contains("\"1h\""), "{e}");
    }

    #[test]
    fn every_e2b_setting_is_read_from_its_var() {
        let c = e2b_cfg(vars(&[
            ("E2B_API_KEY", "key"),
            ("E2B_API_URL", "http://127.0.0.1:1"),
            ("E2B_SANDBOX_URL", "http://127.0.0.1:2"),
            ("E2B_SANDBOX_TIMEOUT", " 600 "),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.api_key, "key");
        assert_eq!(c.api_url, "http://127.0.0.1:1");
        assert_eq!(c.sandbox_url.as_deref(), Some("http://127.0.0.1:2"));
        assert_eq!(c.settings.sandbox_timeout_secs, 600);
        assert_eq!(c.settings.template, E2bSettings::default().template);
    }

    #[test]
    fn exec_env_goes_before_the_program_and_long_timeouts_saturate() {
        let mut req = request(ValidProgram::Argv(vec!["printenv".into(), "A".into()]));
        req.env = vec![("A".into(), "1 2".into())];
        req.timeout_secs = Some(u64::MAX);
        let ex = provider_exec(&req);
        let env = ex.argv.iter().position(|a| a == "env").unwrap();
        assert_eq!(&ex.argv[env..], &["env", "A=1 2", "printenv", "A"]);
        assert_eq!(ex.timeout_ms, u64::MAX);
        assert_eq!(ex.output_limit, OUTPUT_LIMIT);
    }

    #[test]
    fn nonces_and_job_ids_never_repeat_for_the_same_command() {
        let req = request(ValidProgram::Shell("make".into()));
        let nonces: HashSet<u64> = (0..100).map(|_| provider_exec(&req).nonce).collect();
        assert_eq!(nonces.len(), 100);
        let ids: HashSet<[u8; 12]> = (0..100).map(|_| random_bytes("same")).collect();
        assert_eq!(ids.len(), 100);
    }

    #[test]
    fn provider_and_runner_failures_keep_a_code_the_agent_can_act_on() {
        let fly = ComputersError::Fly(shared::providers::fly::FlyError::Unauthorized);
        assert_eq!(computers_error(fly.clone()).error.code, ErrorCode::Engine);
        assert_eq!(
            computers_error(ComputersError::NotFound("box".into()))
                .error
                .code,
            ErrorCode::NotFound
        );
        for (e, code) in [
            (OverExec::NoSuchFile("/x".into()), ErrorCode::NotFound),
            (
                OverExec::Refused("a directory".into()),
                ErrorCode::BadRequest,
            ),
            (OverExec::Shell(fly.clone()), ErrorCode::Engine),
        ] {
            assert_eq!(file_error(e).error.code, code);
        }
        for (e, code) in [
            (JobsOverExec::NoSuchJob("j".into()), ErrorCode::NotFound),
            (
                JobsOverExec::Refused("too many".into()),
                ErrorCode::BadRequest,
            ),
            (JobsOverExec::Failed("no sh".into()), ErrorCode::Engine),
            (
                JobsOverExec::Shell(ComputersError::NotFound("box".into())),
                ErrorCode::NotFound,
            ),
        ] {
            assert_eq!(job_error(e).error.code, code);
        }
        // The provider's message is the agent's, as it is.
        assert_eq!(computers_error(fly.clone()).error.message, fly.to_string());
    }

    /// Computers kept in memory, with every call recorded.
    #[derive(Default)]
    struct Fake {
        made: Mutex<HashMap<String, Computer>>,
        calls: Mutex<Vec<String>>,
    }

    impl Fake {
        fn call(&self, what: String) {
            self.calls.lock().unwrap().push(what);
        }
    }

    impl CloudComputers for Fake {
        fn kind(&self) -> shared::capabilities::BackendKind {
            shared::capabilities::BackendKind::Fly
        }

        fn now_ms(&self) -> u64 {
            0
        }

        async fn prepare(&self) -> Result<(), ComputersError> {
            Ok(())
        }

        async fn find(&self, id: &str) -> Result<Option<Computer>, ComputersError> {
            Ok(self.made.lock().unwrap().get(id).cloned())
        }

        async fn list(&self, prefix: &str) -> Result<Vec<Computer>, ComputersError> {
            let made = self.made.lock().unwrap();
            Ok(made
                .values()
                .filter(|c| c.computer_id.starts_with(prefix))
                .cloned()
                .collect())
        }

        async fn create(
            &self,
            id: &str,
            temporary: bool,
            team: Option<&str>,
            network: &Policy,
        ) -> Result<Computer, ComputersError> {
            self.call(match network {
                Policy::All => format!("create {id} {temporary} {team:?}"),
                p => format!("create {id} {temporary} {team:?} network {p}"),
            });
            let c = Computer {
                computer_id: id.to_owned(),
                provider_id: format!("m-{id}"),
                temporary,
                state: shared::lifecycle::ComputerState::Running,
                team: team.map(str::to_owned),
                ..Computer::default()
            };
            self.made.lock().unwrap().insert(id.to_owned(), c.clone());
            Ok(c)
        }

        async fn start(&self, id: &str) -> Result<(), ComputersError> {
            self.call(format!("start {id}"));
            Ok(())
        }

        async fn restart(&self, id: &str) -> Result<(), ComputersError> {
            self.call(format!("restart {id}"));
            Ok(())
        }

        async fn remove(&self, id: &str) -> Result<(), ComputersError> {
            self.call(format!("remove {id}"));
            self.made.lock().unwrap().remove(id);
            Ok(())
        }

        async fn exec(
            &self,
            id: &str,
            _ex: &ProviderExec,
        ) -> Result<shared::result::ExecOutcome, ComputersError> {
            self.call(format!("exec {id}"));
            Ok(shared::result::ExecOutcome {
                stdout: b"hi\n".to_vec(),
                ..Default::default()
            })
        }

        async fn kill(&self, _id: &str, _ex: &ProviderExec) {}
    }

    /// The answer in its JSON form (the shape the tests check).
    fn handle(cloud: &Cloud<Fake>, team: &str, op: Op) -> Result<Value, ApiError> {
        use futures_util::FutureExt as _;
        cloud
            .handle(team, op)
            .now_or_never()
            .expect("the fake answers at once")
            .map(|a| a.to_value())
    }

    fn calls(cloud: &Cloud<Fake>) -> Vec<String> {
        std::mem::take(&mut *cloud.computers.calls.lock().unwrap())
    }

    #[test]
    fn two_teams_with_the_same_id_get_two_computers_and_see_only_their_own() {
        let cloud = Cloud::new(Fake::default());
        let create = || Op::Create {
            computer_id: Some("build-box".into()),
            temporary: Some(false),
            network: None,
        };
        for team in ["a", "b"] {
            let v = handle(&cloud, team, create()).unwrap();
            assert_eq!(v["computer_id"], "build-box", "{v}");
        }
        let (ka, kb) = (
            teams::key(Some("a"), "build-box"),
            teams::key(Some("b"), "build-box"),
        );
        assert_ne!(ka, kb);
        assert_eq!(
            calls(&cloud),
            [
                format!("create {ka} false Some(\"a\")"),
                format!("create {kb} false Some(\"b\")")
            ]
        );
        let v = handle(&cloud, "a", Op::List).unwrap();
        assert_eq!(v["count"], 1, "{v}");
        assert_eq!(v["computers"][0]["computer_id"], "build-box", "{v}");
        assert_eq!(v["computers"][0]["backend"], "fly", "{v}");
        assert_eq!(handle(&cloud, "c", Op::List).unwrap()["count"], 0);
    }

    #[test]
    fn creating_an_existing_computer_attaches_to_it() {
        let cloud = Cloud::new(Fake::default());
        let create = || Op::Create {
            computer_id: Some("web".into()),
            temporary: Some(true),
            network: None,
        };
        let first = handle(&cloud, "a", create()).unwrap();
        let again = handle(&cloud, "a", create()).unwrap();
        assert_eq!(first, again);
        assert_eq!(calls(&cloud).len(), 1, "made once");
    }

    #[test]
    fn a_missing_computer_is_named_by_the_callers_id_never_the_teams_key() {
        let cloud = Cloud::new(Fake::default());
        let prefix = teams::prefix("a");
        for op in [
            Op::Delete {
                computer_id: "ghost".into(),
            },
            Op::Restart {
                computer_id: "ghost".into(),
            },
            Op::FactoryReset {
                computer_id: "ghost".into(),
            },
        ] {
            let e = handle(&cloud, "a", op).unwrap_err();
            assert_eq!(e.error.code, ErrorCode::NotFound);
            assert!(e.error.message.contains("\"ghost\""), "{e}");
            assert!(!e.error.message.contains(&prefix), "{e}");
        }
        assert!(
            calls(&cloud).is_empty(),
            "nothing removed, restarted or made"
        );
    }

    #[test]
    fn an_operation_that_names_no_computer_is_refused_before_any_call() {
        let cloud = Cloud::new(Fake::default());
        let mut req = request(ValidProgram::Shell("echo hi".into()));
        req.computer_id = None;
        let unnamed = [
            Op::Exec(req),
            Op::Create {
                computer_id: None,
                temporary: Some(true),
                network: None,
            },
            Op::Jobs { computer_id: None },
        ];
        for op in unnamed {
            let e = handle(&cloud, "a", op).unwrap_err();
            assert_eq!(e.error.code, ErrorCode::BadRequest, "{e}");
            assert!(e.error.message.contains("needs a computer_id"), "{e}");
        }
        assert!(calls(&cloud).is_empty(), "nothing made or run");
        assert_eq!(handle(&cloud, "a", Op::Dashboard).unwrap()["count"], 0);
    }

    #[test]
    fn the_first_command_makes_a_temporary_and_a_stopped_computer_is_started() {
        let cloud = Cloud::new(Fake::default());
        let v = handle(
            &cloud,
            "a",
            Op::Exec(request(ValidProgram::Shell("echo hi".into()))),
        )
        .unwrap();
        assert_eq!(
            (v["computer_id"].clone(), v["temporary"].clone()),
            (json!("box"), json!(true)),
            "{v}"
        );
        let k = teams::key(Some("a"), "box");
        assert_eq!(
            calls(&cloud),
            [format!("create {k} true Some(\"a\")"), format!("exec {k}")]
        );
        // Another isolate finds it stopped: it is started before the command runs.
        let other = Cloud::new(Fake::default());
        other.computers.made.lock().unwrap().insert(
            k.clone(),
            Computer {
                computer_id: k.clone(),
                temporary: false,
                state: shared::lifecycle::ComputerState::Stopped,
                ..Computer::default()
            },
        );
        let v = handle(
            &other,
            "a",
            Op::Exec(request(ValidProgram::Shell("ls".into()))),
        )
        .unwrap();
        assert_eq!(v["temporary"], false, "its own kind, not the default: {v}");
        assert_eq!(calls(&other), [format!("start {k}"), format!("exec {k}")]);
    }

    /// A computer this isolate has seen running answers with its own kind too, not the
    /// kind the command asked for (or defaulted to).
    #[test]
    fn a_command_on_a_computer_seen_running_answers_its_own_kind() {
        let cloud = Cloud::new(Fake::default());
        let create = Op::Create {
            computer_id: Some("box".into()),
            temporary: Some(false),
            network: None,
        };
        handle(&cloud, "a", create).unwrap();
        let exec = |temporary: Option<bool>| {
            let mut req = request(ValidProgram::Shell("true".into()));
            req.temporary = temporary;
            handle(&cloud, "a", Op::Exec(req)).unwrap()
        };
        for asked in [None, Some(true)] {
            let v = exec(asked);
            assert_eq!(v["temporary"], false, "asked {asked:?}: {v}");
        }
    }

    /// SPEC §3.11: a new computer's policy (the team's, narrowed by the agent, from the
    /// edge) goes to the provider with the create, which holds it (E2B) or refuses it
    /// (Fly's `ComputersError::Network`).
    #[test]
    fn issue_38_a_new_computers_network_policy_goes_to_the_provider() {
        let cloud = Cloud::new(Fake::default());
        let create = Op::Create {
            computer_id: Some("box".into()),
            temporary: Some(false),
            network: Some(Policy::None),
        };
        handle(&cloud, "a", create).unwrap();
        let mut req = request(ValidProgram::Shell("true".into()));
        req.computer_id = Some("other".into());
        req.network = Some(Policy::allow(["pypi.org"]).unwrap());
        handle(&cloud, "a", Op::Exec(req)).unwrap();
        let made: Vec<String> = calls(&cloud)
            .into_iter()
            .filter(|c| c.starts_with("create"))
            .collect();
        assert_eq!(made.len(), 2, "{made:?}");
        assert!(made[0].ends_with("network none"), "{made:?}");
        assert!(made[1].ends_with("network pypi.org"), "{made:?}");
    }
}

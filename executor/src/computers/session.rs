//! One caller's view of the computers ([`SessionHost`]): its owner key, its default
//! computer (its session's, or its principal's without one), and its team when an
//! executor serves the gateway. It picks the target of each call, attaches through
//! [`Computers`], and implements `shared::mcp::ToolHost`.

use std::sync::Arc;

use shared::CallToolResult;
use shared::answer::Answer;
use shared::egress::Policy;
use shared::jobs::JobCall;
use shared::mcp::{CallContext, TaskAnswer, ToolHost};
use shared::op::Op;
use shared::registry::{Claimant, Target};
use shared::result::{Created, Deleted, Listed, inventory, operation_error};
use shared::tasks::TaskMethod;
use shared::validate::ExecRequest;
use tracing::Instrument;

use super::{Attached, ComputerError, Computers, DefaultSlot};
use crate::place::Place;
use crate::progress::{Notifier, Progress};
use crate::spec::ContainerRecord;

/// One caller's view: an owner key, a default computer, whether it is stateless, and the
/// gateway's team when an executor serves it (the team's own id space, `shared::teams`).
#[derive(Debug, Clone)]
pub struct SessionHost {
    pub(super) computers: Arc<Computers>,
    pub(super) owner: String,
    pub(super) stateless: bool,
    pub(super) team: Option<String>,
    /// The caller's id of its default computer: the session's own, or (stateless) the
    /// principal's, shared by all its requests.
    pub(super) default: DefaultSlot,
    pub(super) notifier: Option<Notifier>,
    /// The caller's scopes (the gateway token's `scope` claim) in executor mode: a new
    /// permanent computer needs `manage` (`shared::executor_api::Scope::may_create`), on
    /// every path that may create one. `None`: a local server's caller (no scopes), who
    /// may make any computer.
    pub(super) scope: Option<String>,
}

impl SessionHost {
    pub fn new(computers: Arc<Computers>, owner: impl Into<String>, stateless: bool) -> Self {
        let owner = owner.into();
        let default = match stateless {
            true => computers.principal_default(&owner),
            false => DefaultSlot::default(),
        };
        Self {
            computers,
            owner,
            stateless,
            team: None,
            default,
            notifier: None,
            scope: None,
        }
    }

    /// The executor's view for the gateway's `team` and its caller `owner` (the token's
    /// `owner` claim; `""`: the team itself) holding `scope` (the token's `scope` claim):
    /// stateless, owner `team:<team>` or `team:<team>/<owner>`, so a temporary made for one
    /// caller answers no other, and only the team's computers (their backend names carry
    /// the team's key prefix); a new permanent computer only with `manage`. The gateway
    /// always names the computer, so this view keeps no default of its own (one per caller
    /// would pile up in [`Computers`] for every session the gateway ever had).
    pub fn for_team(computers: Arc<Computers>, team: &str, owner: &str, scope: &str) -> Self {
        let owner = match owner {
            "" => format!("team:{team}"),
            who => format!("team:{team}/{who}"),
        };
        Self {
            computers,
            owner,
            stateless: true,
            team: Some(team.to_owned()),
            default: DefaultSlot::default(),
            notifier: None,
            scope: Some(scope.to_owned()),
        }
    }

    /// Records a use of computer `id` (a request named it and succeeded): the executor's
    /// idle reaper removes only temporaries that no request named for a while.
    pub fn used(&self, id: &str) {
        let Ok(()) = self
            .computers
            .registry()
            .touch(&self.key(id), super::now_ms());
    }

    /// Lets tool calls send progress notifications through `tx` (stdio, an SSE stream).
    pub fn with_notifier(mut self, tx: Notifier) -> Self {
        self.notifier = Some(tx);
        self
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub(super) fn team(&self) -> Option<&str> {
        self.team.as_deref()
    }

    /// The backend key of this caller's computer `id`.
    pub(super) fn key(&self, id: &str) -> String {
        shared::teams::key(self.team(), id)
    }

    /// Attaches to this caller's computer `id`, making it if missing (with `network`
    /// narrowing the server's policy, SPEC §3.11).
    pub(super) async fn attach(
        &self,
        id: &str,
        requested: Option<bool>,
        network: Option<&Policy>,
        progress: &Progress,
    ) -> Result<Attached, ComputerError> {
        let claimant = Claimant {
            requested,
            owner: &self.owner,
            stateless: self.stateless,
            scope: self.scope.as_deref(),
        };
        self.computers
            .attach(&self.key(id), &claimant, self.team(), network, progress)
            .await
    }

    /// Runs an operation (a validated tool call, or a request of the executor API): the
    /// structured result, or why not. A call that names a computer and succeeds counts as
    /// a use of it (the idle reaper's clock).
    pub async fn run(&self, op: Op, progress: &Progress) -> Result<Answer, ComputerError> {
        let span = tracing::info_span!(
            "op",
            op = op.name(),
            computer_id = op.computer_id(),
            team = self.team()
        );
        if let Some(cap) = op.needs() {
            self.computers.backend.require(cap)?;
        }
        let named = op.computer_id().map(str::to_owned);
        let answer = async {
            Ok(match op {
                Op::Exec(req) => self.exec(req, progress).await?,
                Op::List | Op::Dashboard => self.list().await?.into(),
                Op::Create {
                    computer_id,
                    temporary,
                    network,
                } => self
                    .create(computer_id, temporary, network.as_ref(), progress)
                    .await?
                    .into(),
                Op::Restart { computer_id } => self.restart(&computer_id).await?.into(),
                Op::FactoryReset { computer_id } => {
                    self.factory_reset(&computer_id, progress).await?.into()
                }
                Op::Delete { computer_id } => self.delete(&computer_id).await?.into(),
                Op::Job(poll) => self.job(JobCall::Poll(poll)).await?,
                Op::JobRead(poll) => self.job_read(poll).await?.into(),
                Op::Jobs { computer_id } => self.job(JobCall::List { computer_id }).await?,
                Op::File(call) => self.file(call, progress).await?,
                Op::Snapshot(call) => self.snapshot(call, progress).await?,
            })
        }
        .instrument(span)
        .await;
        if let (Ok(_), Some(id)) = (&answer, named) {
            self.used(&id);
        }
        answer
    }

    /// The computer a call that may create it runs on (`computer_id`, `temporary` and
    /// `network` as the exec tool takes them): its id, and whether it is temporary and was
    /// made now.
    pub(super) async fn target(
        &self,
        computer_id: Option<&str>,
        temporary: Option<bool>,
        network: Option<&Policy>,
        progress: &Progress,
    ) -> Result<(String, Attached), ComputerError> {
        let c = &self.computers;
        // A call that reads the default holds it while attaching, so concurrent first
        // calls share one computer; named calls never wait for it.
        let mut slot = match Target::reads_default(computer_id, temporary) {
            true => Some(self.default.lock().await),
            false => None,
        };
        // A default that is gone (its idle time passed, or another request of the same
        // principal deleted it) is no default: the call makes a new one.
        if let Some(default) = slot.as_mut()
            && let Some(id) = default.as_deref()
            && c.registry().contains(&self.key(id)) != Ok(true)
        {
            **default = None;
        }
        let target = Target::of(
            computer_id,
            temporary,
            slot.as_ref().and_then(|d| d.as_deref()),
            // A new id is a permanent computer's only with `temporary: false` (SPEC §3.6).
            || c.new_slug(temporary != Some(false), self.team()),
        );
        let attached = self
            .attach(target.id(), target.requested(temporary), network, progress)
            .await;
        if let Some(default) = slot.as_mut()
            && attached.is_ok()
            && target.sets_default()
        {
            **default = Some(target.id().to_owned());
        }
        drop(slot);
        Ok((target.id().to_owned(), attached?))
    }

    pub(super) async fn exec(
        &self,
        req: ExecRequest,
        progress: &Progress,
    ) -> Result<Answer, ComputerError> {
        let (id, at) = self
            .target(
                req.computer_id.as_deref(),
                req.temporary,
                req.network.as_ref(),
                progress,
            )
            .await?;
        let answer = self
            .computers
            .exec_on(&self.key(&id), &id, at.temporary, &req, progress)
            .await?;
        Ok(Answer::Exec(answer).mark_created(at.created))
    }

    pub(super) async fn list(&self) -> Result<Listed, ComputerError> {
        Ok(inventory(
            self.computers.list(&self.owner, self.team()).await?,
        ))
    }

    pub(super) fn created(&self, id: &str, r: &ContainerRecord) -> Created {
        Created::new(id, &r.provider_id, r.temporary)
    }

    pub(super) async fn create(
        &self,
        computer_id: Option<String>,
        temporary: Option<bool>,
        network: Option<&Policy>,
        progress: &Progress,
    ) -> Result<Created, ComputerError> {
        let c = &self.computers;
        let id = computer_id.unwrap_or_else(|| c.new_slug(temporary.unwrap_or(true), self.team()));
        self.attach(&id, temporary, network, progress).await?;
        let r = c
            .backend
            .find(&self.key(&id))
            .await?
            .ok_or_else(|| ComputerError::unknown(&id))?;
        Ok(self.created(&id, &r))
    }

    pub(super) async fn restart(&self, id: &str) -> Result<Created, ComputerError> {
        let c = &self.computers;
        let r = c.visible_record(id, &self.owner, self.team()).await?;
        c.backend.restart(&self.key(id)).await?;
        c.forget_jobs_of(&self.key(id));
        Ok(self.created(id, &r))
    }

    pub(super) async fn factory_reset(
        &self,
        id: &str,
        progress: &Progress,
    ) -> Result<Created, ComputerError> {
        let c = &self.computers;
        let r = c.visible_record(id, &self.owner, self.team()).await?;
        let key = self.key(id);
        let lock = c.id_lock(&key);
        let _held = lock.lock().await;
        // It keeps its network policy.
        let network = c.network_of(&r);
        let fresh = c
            .backend
            .factory_reset(&key, r.temporary, self.team(), &network, progress)
            .await?;
        c.forget_jobs_of(&key);
        Ok(self.created(id, &fresh))
    }

    pub(super) async fn delete(&self, id: &str) -> Result<Deleted, ComputerError> {
        let c = &self.computers;
        c.visible_record(id, &self.owner, self.team()).await?;
        let key = self.key(id);
        let lock = c.id_lock(&key);
        let _held = lock.lock().await;
        c.backend.remove(&key).await?;
        let Ok(()) = c.registry().forget(&key);
        c.forget_jobs_of(&key);
        let mut default = self.default.lock().await;
        if default.as_deref() == Some(id) {
            *default = None;
        }
        Ok(Deleted::new(id))
    }

    /// Ends this caller's session: its temporaries go away.
    pub async fn close(&self) {
        self.computers.release_owner(&self.owner).await;
    }
}

impl ToolHost for SessionHost {
    async fn call_tool(&self, call: Op, ctx: &CallContext) -> CallToolResult {
        let progress = Progress::new(self.notifier.clone(), ctx.progress_token.clone());
        match self.run(call, &progress).await {
            Ok(answer) => answer.into_result(),
            Err(e) => operation_error(&e.to_string()),
        }
    }

    async fn call_tool_as_task(&self, call: Op, ctx: &CallContext) -> TaskAnswer {
        let Op::Exec(req) = call else {
            return TaskAnswer::Complete(self.call_tool(call, ctx).await);
        };
        let progress = Progress::new(self.notifier.clone(), ctx.progress_token.clone());
        match self.exec_as_task(req, &progress).await {
            Ok(answer) => answer,
            Err(e) => TaskAnswer::Complete(operation_error(&e.to_string())),
        }
    }

    async fn task(
        &self,
        method: TaskMethod,
        task_id: &str,
        _ctx: &CallContext,
    ) -> Result<shared::tasks::TaskReply, shared::tasks::TaskError> {
        self.task_call(method, task_id).await
    }
}

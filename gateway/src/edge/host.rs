//! The tool host of the edge: turns validated tool calls into `Op`s for the place each
//! computer lives, with the team's Durable Object deciding placement, ownership and
//! visibility (through `shared::registry`), and an isolate cache for warm execs.

use super::*;
use shared::executor_api::Scope;
use shared::lifecycle::ComputerState;
use shared::mcp::TaskAnswer;
use shared::registry::Target;
use shared::result::{ComputerInfo, inventory};
use shared::tasks::TaskMethod;
use tracing::Instrument;

pub(crate) type PlacementKey = (String, String, String);

thread_local! {
    pub(crate) static GATEWAY: RefCell<Option<Rc<Gateway>>> = const { RefCell::new(None) };
    /// (team, id, owner) → where the computer lives, until a deadline (ms). Saves the
    /// Durable Object round trip on warm execs. Kept short (idle/4, at most 60 s) because
    /// another isolate may delete the computer meanwhile.
    pub(crate) static PLACEMENT: RefCell<HashMap<PlacementKey, (Record, u64)>> = RefCell::new(HashMap::new());
    /// (team, id) → when this isolate last told the DO about a use (ms).
    pub(crate) static TOUCHED: RefCell<HashMap<(String, String), u64>> = RefCell::new(HashMap::new());
    /// (team, stateless owner) → its default computer, until a deadline (ms): warm calls
    /// without an id skip the DO, as with [`PLACEMENT`].
    pub(crate) static DEFAULTS: RefCell<HashMap<(String, String), (String, u64)>> = RefCell::new(HashMap::new());
}

fn cached_default(team: &str, owner: &str) -> Option<String> {
    let key = (team.to_owned(), owner.to_owned());
    DEFAULTS.with(|d| {
        d.borrow()
            .get(&key)
            .filter(|(_, until)| *until > now_ms())
            .map(|(id, _)| id.clone())
    })
}

fn cache_default(team: &str, owner: &str, id: &str, ttl_ms: u64) {
    let key = (team.to_owned(), owner.to_owned());
    let until = now_ms() + ttl_ms.min(60_000);
    DEFAULTS.with(|d| d.borrow_mut().insert(key, (id.to_owned(), until)));
}

pub(crate) fn cached_placement(
    team: &str,
    id: &str,
    owner: &str,
    temporary: Option<bool>,
) -> Option<Record> {
    let key = (team.to_owned(), id.to_owned(), owner.to_owned());
    PLACEMENT.with(|p| {
        p.borrow()
            .get(&key)
            .filter(|(r, until)| *until > now_ms() && temporary.is_none_or(|t| t == r.temporary))
            .map(|(r, _)| r.clone())
    })
}

pub(crate) fn cache_placement(team: &str, id: &str, owner: &str, r: &Record, ttl_ms: u64) {
    let key = (team.to_owned(), id.to_owned(), owner.to_owned());
    let until = now_ms() + ttl_ms.min(60_000);
    PLACEMENT.with(|p| p.borrow_mut().insert(key, (r.clone(), until)));
}

pub(crate) fn forget_cached(team: &str, id: &str) {
    PLACEMENT.with(|p| {
        p.borrow_mut()
            .retain(|(t, i, _), _| !(t == team && i == id))
    });
    TOUCHED.with(|t| t.borrow_mut().remove(&(team.to_owned(), id.to_owned())));
    DEFAULTS.with(|d| {
        d.borrow_mut()
            .retain(|(t, _), (default, _)| !(t == team && default == id))
    });
}

/// Is it time to record a use of (team, id) in the DO? Marks it done if so.
pub(crate) fn touch_due(team: &str, id: &str, every_ms: u64) -> bool {
    let now = now_ms();
    TOUCHED.with(|t| {
        let mut t = t.borrow_mut();
        let key = (team.to_owned(), id.to_owned());
        match t.get(&key) {
            Some(last) if now < last + every_ms.min(30_000) => false,
            _ => {
                t.insert(key, now);
                true
            }
        }
    })
}

// ---------------------------------------------------------------- the tool host

pub(crate) struct Host {
    pub(crate) gw: Rc<Gateway>,
    pub(crate) env: Env,
    pub(crate) caller: Caller,
    /// `session:<sid>` (legacy) or `user:<sub>` (stateless): owner of temporaries.
    pub(crate) owner: String,
    pub(crate) session: Option<String>,
    pub(crate) default: RefCell<Option<String>>,
}

impl Host {
    /// The `network` to send for a computer of this caller's team ([`crate::networks::TeamNetworks::for_call`]):
    /// a new one gets the team's policy; an ask outside it is refused (nothing is made).
    fn network_for(
        &self,
        asked: Option<shared::egress::Policy>,
        new: bool,
    ) -> std::result::Result<Option<shared::egress::Policy>, GatewayError> {
        self.gw
            .networks
            .for_call(&self.caller.team, asked, new)
            .map_err(|e| GatewayError::Api(ApiError::new(ErrorCode::Forbidden, e.to_string())))
    }

    /// Claims `id` for this caller (creating the record if new): where it lives.
    pub(crate) async fn claim(
        &self,
        id: &str,
        temporary: Option<bool>,
    ) -> std::result::Result<Record, GatewayError> {
        self.claim_avoiding(id, temporary, &[]).await
    }

    /// A stateless caller's default computer (SPEC §3.2), claimed in the team's object
    /// (which keeps it per principal), or a new one there.
    async fn claim_default(&self) -> std::result::Result<Record, GatewayError> {
        let executor = self.gw.place(&[]).await?;
        if let Some(e) = self.gw.unusable(&executor) {
            return Err(e);
        }
        let claim = inventory::Request::ClaimDefault {
            owner: self.owner.clone(),
            fresh: slug_from_random(random_u64()),
            executor,
        };
        team_call(&self.env, &self.caller.team, claim).await
    }

    /// [`Host::claim`], placing a new computer anywhere but on `avoid`.
    async fn claim_avoiding(
        &self,
        id: &str,
        temporary: Option<bool>,
        avoid: &[String],
    ) -> std::result::Result<Record, GatewayError> {
        // New computers go where PLACEMENT says (by strategy, over the executors that
        // answer); a computer then stays where it was made (its record names the place).
        let executor = match self.gw.place(avoid).await {
            Ok(e) => e,
            // Nowhere for a new one: a computer that exists still answers where it is.
            Err(e @ GatewayError::Placement(_)) => {
                return match self.visible(id).await {
                    Ok(r) => Ok(r),
                    Err(_) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        // A provider without (valid) credentials: say so before recording anything.
        if let Some(e) = self.gw.unusable(&executor) {
            return Err(e);
        }
        let claim = inventory::Request::Claim {
            id: id.to_owned(),
            temporary,
            owner: self.owner.clone(),
            stateless: self.session.is_none(),
            executor,
            // The object refuses a new permanent computer without `manage` (SPEC §5).
            scope: self.scope(),
        };
        team_call(&self.env, &self.caller.team, claim).await
    }

    /// Runs `op` (made by `make` for the record) where `rec` says. A computer this call
    /// just placed on an executor that turns out unreachable is placed again elsewhere
    /// (its record forgotten and re-made), until one answers or none is left: a new
    /// computer is never lost to an executor that died since its last health check.
    async fn fail_over(
        &self,
        id: &str,
        mut rec: Record,
        make: impl Fn() -> Op,
    ) -> std::result::Result<(Record, Answer), GatewayError> {
        let team = self.caller.team.clone();
        let mut avoid = Vec::new();
        loop {
            match self
                .gw
                .op(&rec.executor, &team, &self.owner, &self.scope(), make())
                .await
            {
                Err(e @ GatewayError::Unreachable { .. }) if rec.new => {
                    avoid.push(rec.executor.clone());
                    let forget = inventory::Request::Forget { id: id.to_owned() };
                    team_call::<inventory::Done>(&self.env, &team, forget).await?;
                    forget_cached(&team, id);
                    let next = match self.claim_avoiding(id, Some(rec.temporary), &avoid).await {
                        Ok(r) if r.new => r,
                        Ok(_) => return Err(e),
                        // Nowhere else: the placement error names every executor and why.
                        Err(nowhere) => return Err(nowhere),
                    };
                    tracing::warn!(
                        computer_id = id,
                        from = rec.executor.as_str(),
                        to = next.executor.as_str(),
                        "a new computer's executor did not answer; placed it elsewhere"
                    );
                    let mut cached = next.clone();
                    cached.new = false;
                    cache_placement(&team, id, &self.owner, &cached, self.gw.idle_ms / 4);
                    // The forget cleared session defaults naming it: this one names it again.
                    if self.default.borrow().as_deref() == Some(id)
                        && let Some(sid) = &self.session
                    {
                        self.name_default(sid, id).await?;
                    }
                    rec = next;
                }
                Err(e) => return Err(e),
                Ok(v) => return Ok((rec, v)),
            }
        }
    }

    pub(crate) async fn visible(&self, id: &str) -> std::result::Result<Record, GatewayError> {
        let get = inventory::Request::Get {
            id: id.to_owned(),
            owner: self.owner.clone(),
        };
        team_call(&self.env, &self.caller.team, get).await
    }

    /// Records `id` as session `sid`'s default computer in the team's object.
    async fn name_default(&self, sid: &str, id: &str) -> std::result::Result<(), GatewayError> {
        let named = inventory::Request::SessionDefault {
            sid: sid.to_owned(),
            id: id.to_owned(),
        };
        team_call::<inventory::Done>(&self.env, &self.caller.team, named)
            .await
            .map(|_| ())
    }

    /// Restart, factory reset or delete, where the computer lives.
    pub(crate) async fn on_computer(
        &self,
        op: Op,
    ) -> std::result::Result<(Record, Answer), GatewayError> {
        let id = op.computer_id().unwrap_or_default().to_owned();
        let rec = self.visible(&id).await?;
        let v = self
            .gw
            .op(
                &rec.executor,
                &self.caller.team,
                &self.owner,
                &self.scope(),
                op,
            )
            .await?;
        Ok((rec, v))
    }

    /// Before a call on `id` that may run `busy_ms`: tells the team's DO of the use (at
    /// most every idle/4 per isolate, so warm calls skip the DO). A call that could outlast
    /// the idle window from its last recorded use (`every + busy_ms >= idle`) also marks
    /// the computer busy until its timeout, under a mark of its own, so the DO's alarm does
    /// not reap it mid-call; [`Host::end_busy`] takes the mark away after the call (and
    /// records that use). Best effort: the call goes on if the DO cannot take it.
    async fn mark_busy(&self, id: &str, busy_ms: u64) -> Option<String> {
        let team = &self.caller.team;
        let every = (self.gw.idle_ms / 4).min(30_000);
        let (busy, mark) = if every + busy_ms < self.gw.idle_ms {
            if !touch_due(team, id, every) {
                return None;
            }
            (None, None)
        } else {
            let mark = format!("exec:{id}:{}", random_hex());
            let until = now_ms().saturating_add(busy_ms).saturating_add(every);
            let busy = inventory::Busy {
                mark: mark.clone(),
                until: i64::try_from(until).unwrap_or(i64::MAX),
            };
            (Some(busy), Some(mark))
        };
        let touch = inventory::Request::Touch {
            id: id.to_owned(),
            busy,
            done: None,
        };
        if let Err(e) = team_call::<inventory::Done>(&self.env, team, touch).await {
            tracing::warn!(error = %e, "could not record a use in the team inventory");
            return None;
        }
        mark
    }

    /// After the call [`Host::mark_busy`] marked: its end is the computer's last use, and
    /// the computer is no longer busy for it.
    async fn end_busy(&self, id: &str, mark: Option<String>) {
        if let Some(mark) = mark {
            let touch = inventory::Request::Touch {
                id: id.to_owned(),
                busy: None,
                done: Some(mark),
            };
            let done = team_call::<inventory::Done>(&self.env, &self.caller.team, touch).await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "could not clear a busy mark in the team inventory");
            }
        }
    }

    /// The caller's scopes as the executor token's `scope` claim.
    pub(crate) fn scope(&self) -> String {
        Scope::claim(self.caller.can_exec, self.caller.can_manage)
    }

    pub(crate) fn manage(&self) -> std::result::Result<(), GatewayError> {
        if self.caller.can_manage {
            Ok(())
        } else {
            Err(GatewayError::Scope {
                action: "manage computers",
                scope: "manage",
            })
        }
    }

    /// The computer a call that may create it uses (`computer_id` and `temporary` as the
    /// exec tool takes them): claimed in the team's inventory (cached per isolate), and
    /// made the session default when the call read the default.
    pub(crate) async fn target(
        &self,
        computer_id: Option<&str>,
        temporary: Option<bool>,
    ) -> std::result::Result<(String, Record), GatewayError> {
        let team = &self.caller.team;
        // Without a session the default is the principal's, kept by the team's object
        // (cached per isolate like placements).
        if self.session.is_none() && Target::reads_default(computer_id, temporary) {
            let cached = cached_default(team, &self.owner)
                .and_then(|id| cached_placement(team, &id, &self.owner, None).map(|r| (id, r)));
            if let Some((id, rec)) = cached {
                return Ok((id, rec));
            }
            let rec = self.claim_default().await?;
            let mut cached = rec.clone();
            cached.new = false;
            let ttl = self.gw.idle_ms / 4;
            cache_placement(team, &rec.id, &self.owner, &cached, ttl);
            cache_default(team, &self.owner, &rec.id, ttl);
            return Ok((rec.id.clone(), rec));
        }
        let target = Target::of(
            computer_id,
            temporary,
            self.default.borrow().as_deref(),
            || slug_from_random(random_u64()),
        );
        let id = target.id().to_owned();
        let requested = target.requested(temporary);
        let rec = match cached_placement(team, &id, &self.owner, requested) {
            Some(r) => r,
            None => {
                let r = self.claim(&id, requested).await?;
                let mut cached = r.clone();
                cached.new = false;
                cache_placement(team, &id, &self.owner, &cached, self.gw.idle_ms / 4);
                r
            }
        };
        if target.sets_default() {
            *self.default.borrow_mut() = Some(id.clone());
            if let Some(sid) = &self.session {
                self.name_default(sid, &id).await?;
            }
        }
        Ok((id, rec))
    }

    /// Runs `op` for this caller: picks and claims its target in the team's object (or
    /// the isolate's cache), then hands it to the place the computer lives.
    pub(crate) async fn run(&self, op: Op) -> std::result::Result<Answer, GatewayError> {
        let team = self.caller.team.clone();
        match op {
            Op::Exec(req) => {
                if !self.caller.can_exec {
                    return Err(GatewayError::Scope {
                        action: "run commands",
                        scope: "exec",
                    });
                }
                let (id, rec) = self
                    .target(req.computer_id.as_deref(), req.temporary)
                    .await?;
                let mut req = req;
                req.temporary = Some(rec.temporary);
                req.network = self.network_for(req.network.take(), rec.new)?;
                let timeout_ms = req.timeout_secs.unwrap_or(cloud::DEFAULT_TIMEOUT_SECS) * 1000;
                // Last use, and busy until the command's timeout where it could outlast the
                // idle window: the DO's alarm must not reap a computer under a command still
                // running (a command left running as a job is recorded below).
                let mark = self.mark_busy(&id, timeout_ms).await;
                let v = self
                    .fail_over(&id, rec, || Op::Exec(req.clone()).on(&id))
                    .await;
                self.end_busy(&id, mark).await;
                let (_, v) = v?;
                // A command left running is a job: the DO keeps where it runs and until
                // when it may, so terminal_job needs no id and idle reaping waits for it.
                if let Some(a) = v.as_exec()
                    && a.running == Some(true)
                    && let Some(job_id) = &a.job_id
                {
                    let deadline = now_ms().saturating_add(timeout_ms);
                    let put = inventory::Request::JobPut {
                        job_id: job_id.to_owned(),
                        id: id.clone(),
                        deadline: i64::try_from(deadline).unwrap_or(i64::MAX),
                    };
                    let put = team_call::<inventory::Done>(&self.env, &team, put).await;
                    // The job runs either way: its output is not lost for a record; the
                    // caller can still name the computer.
                    if let Err(e) = put {
                        tracing::warn!(error = %e, "could not record a job in the team inventory");
                    }
                }
                Ok(v)
            }
            Op::File(call) => {
                if !self.caller.can_exec {
                    return Err(GatewayError::Scope {
                        action: "read and write files",
                        scope: "exec",
                    });
                }
                let (id, mut rec) = self.target(call.computer_id(), call.temporary()).await?;
                let call = call.on(&id, Some(rec.temporary));
                // A new computer of a team with a policy is made with it first (a file
                // call carries no `network`).
                if let Some(network) = self.network_for(None, rec.new)? {
                    let temporary = Some(rec.temporary);
                    let make = || Op::Create {
                        computer_id: Some(id.clone()),
                        temporary,
                        network: Some(network.clone()),
                    };
                    rec = self.fail_over(&id, rec, make).await?.0;
                    rec.new = false;
                }
                let mark = self
                    .mark_busy(&id, cloud::DEFAULT_TIMEOUT_SECS * 1000)
                    .await;
                let v = self.fail_over(&id, rec, || Op::File(call.clone())).await;
                self.end_busy(&id, mark).await;
                v.map(|(_, v)| v)
            }
            op @ (Op::Job(_) | Op::JobRead(_) | Op::Jobs { .. }) => {
                if !self.caller.can_exec {
                    return Err(GatewayError::Scope {
                        action: "follow jobs",
                        scope: "exec",
                    });
                }
                let job_id = match &op {
                    Op::Job(p) | Op::JobRead(p) => Some(p.job_id.clone()),
                    _ => None,
                };
                let id = match (op.computer_id(), &job_id) {
                    (Some(id), _) => id.to_owned(),
                    (None, Some(job_id)) => {
                        let get = inventory::Request::JobGet {
                            job_id: job_id.clone(),
                            owner: self.owner.clone(),
                        };
                        let found = team_call::<inventory::JobPlace>(&self.env, &team, get).await;
                        match found {
                            Ok(place) => place.id,
                            Err(GatewayError::Inventory { status: 404, .. }) => {
                                self.default.borrow().clone().ok_or_else(|| no_job(job_id))?
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    (None, None) => self.default.borrow().clone().ok_or_else(|| {
                        GatewayError::Inventory {
                            status: 404,
                            message: "this session has no computer yet: pass the `computer_id` whose jobs to list".into(),
                        }
                    })?,
                };
                let rec = match self.visible(&id).await {
                    Ok(r) => r,
                    // A computer the caller may not reach hides its jobs too.
                    Err(GatewayError::Inventory { status: 404, .. }) if job_id.is_some() => {
                        return Err(no_job(job_id.as_deref().unwrap_or_default()));
                    }
                    Err(e) => return Err(e),
                };
                let v = self
                    .gw
                    .op(&rec.executor, &team, &self.owner, &self.scope(), op.on(&id))
                    .await?;
                // A peek of an ended job leaves it for the read that takes its output.
                let ended = match &v {
                    Answer::Exec(a) => a.running == Some(false) && !a.peek,
                    Answer::JobRead(out) => !out.running && !out.peek,
                    _ => false,
                };
                if ended && let Some(job_id) = &job_id {
                    let done = inventory::Request::JobDone {
                        job_id: job_id.clone(),
                    };
                    let _ = team_call::<inventory::Done>(&self.env, &team, done).await;
                }
                Ok(v)
            }
            // Not listed at the gateway (its `TOOLS` leaves the group out), so never parsed.
            Op::Snapshot(_) => Err(GatewayError::Api(shared::executor_api::ApiError::new(
                shared::executor_api::ErrorCode::Unsupported,
                "the gateway does not serve the snapshot tools yet; local servers and executors do",
            ))),
            Op::List | Op::Dashboard => {
                let list = inventory::Request::List {
                    owner: self.owner.clone(),
                };
                let records = team_call::<inventory::Listed>(&self.env, &team, list)
                    .await?
                    .computers;
                let mut places: Vec<String> = records.iter().map(|r| r.executor.clone()).collect();
                places.sort();
                places.dedup();
                let mut items = Vec::new();
                for place in places {
                    let listed = self
                        .gw
                        .op(&place, &team, &self.owner, &self.scope(), Op::List)
                        .await;
                    let listed = match listed {
                        Ok(Answer::Listed(l)) => l,
                        Ok(other) => {
                            let why = format!("{place} answered a list with {other:?}");
                            return Err(GatewayError::Transport(why));
                        }
                        // One executor down does not hide the rest: its computers are
                        // listed from the inventory, as unreachable, with why.
                        Err(e @ GatewayError::Unreachable { .. }) => {
                            let why = e.to_string();
                            for r in records.iter().filter(|r| r.executor == place) {
                                items.push(unreachable(r, &why));
                            }
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    // The place shows the team's computers; the DO says which of them this
                    // caller may see (its own temporaries, every permanent one).
                    items.extend(listed.computers.into_iter().filter(|item| {
                        records
                            .iter()
                            .any(|r| r.id == item.computer_id && r.executor == place)
                    }));
                }
                items.sort_by(|a, b| a.computer_id.cmp(&b.computer_id));
                Ok(inventory(items).into())
            }
            Op::Create {
                computer_id,
                temporary,
                network,
            } => {
                self.manage()?;
                let id = computer_id.unwrap_or_else(|| slug_from_random(random_u64()));
                let rec = self.claim(&id, temporary).await?;
                let temporary = Some(rec.temporary);
                // The team's policy, narrowed by the agent's ask (SPEC §3.11).
                let network = self.network_for(network, rec.new)?;
                // The place narrows its own policy by it (SPEC §3.11).
                let op = || Op::Create {
                    computer_id: Some(id.clone()),
                    temporary,
                    network: network.clone(),
                };
                Ok(self.fail_over(&id, rec, op).await?.1)
            }
            op @ (Op::Restart { .. } | Op::FactoryReset { .. }) => {
                self.manage()?;
                Ok(self.on_computer(op).await?.1)
            }
            Op::Delete { computer_id } => {
                self.manage()?;
                let id = computer_id.clone();
                let v = match self.on_computer(Op::Delete { computer_id }).await {
                    Ok((_, v)) => v,
                    // Gone at its place already (the DO still had it): forget it all the same.
                    Err(GatewayError::Api(e)) if e.error.code == ErrorCode::NotFound => {
                        shared::result::Deleted::new(&id).into()
                    }
                    Err(e) => return Err(e),
                };
                // The DO forgets it and clears every session default naming it, so the next
                // call without an id makes a new default (as on the local server).
                let forget = inventory::Request::Forget { id: id.clone() };
                team_call::<inventory::Done>(&self.env, &team, forget).await?;
                forget_cached(&team, &id);
                if self.default.borrow().as_deref() == Some(id.as_str()) {
                    *self.default.borrow_mut() = None;
                }
                Ok(v)
            }
        }
    }
}

/// A computer of the inventory whose place could not be asked, as lists show it.
fn unreachable(r: &Record, why: &str) -> ComputerInfo {
    ComputerInfo {
        computer_id: r.id.clone(),
        sandbox_id: String::new(),
        backend: "unknown".into(),
        state: ComputerState::Unreachable,
        temporary: r.temporary,
        image: String::new(),
        created_at: String::new(),
        history: Vec::new(),
        jobs: None,
        error: Some(why.to_owned()),
        network: None,
    }
}

fn no_job(job_id: &str) -> GatewayError {
    GatewayError::Inventory {
        status: 404,
        message: format!(
            "no job {job_id} in this team that you can reach (it never existed, is another session's, or ended and was read); pass the `computer_id` it runs on"
        ),
    }
}

/// Runs one tool call's work in its span and logs how long it took and how it ended
/// (never the arguments); a failure becomes the tool's error result.
async fn logged<T>(
    tool: &'static str,
    computer_id: Option<&str>,
    work: impl std::future::Future<Output = std::result::Result<T, GatewayError>>,
) -> std::result::Result<T, CallToolResult> {
    let span = tracing::info_span!("tool", tool, computer_id = computer_id.unwrap_or("-"));
    let started = now_ms();
    let result = work.instrument(span.clone()).await;
    let _entered = span.enter();
    let ms = now_ms().saturating_sub(started);
    match result {
        Ok(v) => {
            tracing::info!(ms, outcome = "ok");
            Ok(v)
        }
        Err(e) => {
            tracing::warn!(ms, outcome = ?e.code(), "tool call failed");
            Err(operation_error(&e.to_string()))
        }
    }
}

impl ToolHost for Host {
    async fn call_tool_as_task(&self, call: Op, ctx: &CallContext) -> TaskAnswer {
        let Op::Exec(req) = call else {
            return TaskAnswer::Complete(self.call_tool(call, ctx).await);
        };
        if !self.caller.can_exec {
            return TaskAnswer::Complete(self.call_tool(Op::Exec(req), ctx).await);
        }
        let computer_id = req.computer_id.clone();
        logged("exec_task", computer_id.as_deref(), self.exec_as_task(req))
            .await
            .unwrap_or_else(TaskAnswer::Complete)
    }

    async fn task(
        &self,
        method: TaskMethod,
        task_id: &str,
        _ctx: &CallContext,
    ) -> std::result::Result<shared::tasks::TaskReply, shared::tasks::TaskError> {
        let span = tracing::info_span!("task", method = ?method);
        self.task_call(method, task_id).instrument(span).await
    }

    async fn call_tool(&self, call: Op, _ctx: &CallContext) -> CallToolResult {
        let tool = call.name();
        let computer_id = call.computer_id().map(str::to_owned);
        match logged(tool, computer_id.as_deref(), self.run(call)).await {
            Ok(answer) => answer.into_result(),
            Err(failed) => failed,
        }
    }
}

//! The per-team Durable Object (`Team`): `shared::registry` over its SQLite inventory
//! (placement, owner, temporary flag, last use; `store.rs`), the legacy sessions, and the
//! alarm that reaps idle temporaries (the one owner of the lifetime of the computers the
//! gateway places).

use super::store::SqlStore;
use super::*;
use crate::schema::SchemaError;
use shared::executor_api::Scope;
use shared::registry::{Claimant, Entry, Registry, RegistryError};

// ---------------------------------------------------------------- the team Durable Object

/// One team's inventory: computers (placement, owner, temporary, last use) and legacy
/// sessions, in the Durable Object's SQLite storage; its alarm reaps idle temporaries.
#[durable_object]
pub struct Team {
    pub(crate) state: State,
    pub(crate) env: Env,
    /// Why the schema could not be brought up to date (answered on every request).
    pub(crate) schema_error: Option<SchemaError>,
}

/// Brings the object's schema to [`crate::schema::CURRENT`]: what failed, if anything.
fn migrate(sql: &worker::SqlStorage) -> std::result::Result<(), SchemaError> {
    use crate::schema::{MIGRATIONS, VERSION_KEY, pending, stored_version};
    #[derive(Deserialize)]
    struct Meta {
        v: String,
    }
    let fail = |what: &str, e: worker::Error| SchemaError::Storage {
        step: what.to_owned(),
        error: e.to_string(),
    };
    // The meta table holds the version itself, so it exists before the version is read.
    for stmt in MIGRATIONS[0].iter().take(1) {
        sql.exec(stmt, None).map_err(|e| fail("schema", e))?;
    }
    let rows: Vec<Meta> = sql
        .exec(
            "SELECT v FROM meta WHERE k = ?",
            Some(vec![VERSION_KEY.into()]),
        )
        .and_then(|c| c.to_array())
        .map_err(|e| fail("schema version", e))?;
    let version = stored_version(rows.first().map(|m| m.v.as_str()))?;
    for (to, statements) in pending(version)? {
        for stmt in statements {
            sql.exec(stmt, None)
                .map_err(|e| fail(&format!("migration to version {to}"), e))?;
        }
        sql.exec(
            "INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)",
            Some(vec![VERSION_KEY.into(), to.to_string().into()]),
        )
        .map_err(|e| fail("schema version", e))?;
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
pub(crate) struct SessionRow {
    pub(crate) sid: String,
    pub(crate) subject: String,
    pub(crate) version: String,
    pub(crate) default_id: Option<String>,
}

/// Counts of the sessions table.
#[derive(Debug, Deserialize)]
pub(crate) struct CountRow {
    n: u64,
    mine: u64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct JobRow {
    pub(crate) id: String,
}

#[derive(Deserialize)]
struct TaskRow {
    id: String,
    owner: String,
    deadline: i64,
    record: String,
    lease: Option<String>,
    lease_until: i64,
}

pub(crate) fn bad(status: u16, message: &str) -> Result<Response> {
    let refusal = inventory::Refusal {
        error: message.to_owned(),
    };
    typed_response(status, &refusal)
}

impl Team {
    pub(crate) fn sql(&self, query: &str, args: Vec<SqlStorageValue>) -> Result<worker::SqlCursor> {
        self.state.storage().sql().exec(query, Some(args))
    }

    /// Why one more legacy session may not open for `subject`: past `MAX_SESSIONS` in the
    /// team (default 1024) or `MAX_SESSIONS_PER_USER` for the user (default 256), as the
    /// binary's `--http-max-sessions` and `--http-max-sessions-per-principal`.
    pub(crate) fn sessions_full(&self, subject: &str) -> Result<Option<String>> {
        let cap = |name: &str, default: u64| {
            var(&self.env, name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        let (team_cap, user_cap) = (cap("MAX_SESSIONS", 1024), cap("MAX_SESSIONS_PER_USER", 256));
        let rows: Vec<CountRow> = self
            .sql(
                "SELECT COUNT(*) AS n, COALESCE(SUM(subject = ?), 0) AS mine FROM sessions",
                vec![subject.into()],
            )?
            .to_array()?;
        let (n, mine) = rows.first().map_or((0, 0), |r| (r.n, r.mine));
        let idle = self.idle_secs();
        let ends = format!(
            "idle sessions end after SESSION_TIMEOUT_SECS ({idle} s) and a client ends its own with DELETE /mcp (with its Mcp-Session-Id)"
        );
        Ok(if n >= team_cap {
            Some(format!(
                "too many live MCP sessions: this team has {n}, the limit of MAX_SESSIONS; {ends}; retry later, end unused sessions, or raise MAX_SESSIONS"
            ))
        } else if mine >= user_cap {
            Some(format!(
                "too many live MCP sessions: this user has {mine}, the limit of MAX_SESSIONS_PER_USER; {ends}; retry later, end unused sessions, or raise MAX_SESSIONS_PER_USER"
            ))
        } else {
            None
        })
    }

    pub(crate) fn idle_ms(&self) -> u64 {
        var(&self.env, "SESSION_TIMEOUT_SECS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_IDLE_SECS)
            * 1000
    }

    /// The registry over this object's inventory.
    pub(crate) fn registry(&self) -> Registry<SqlStore> {
        Registry::new(SqlStore(self.state.storage().sql()))
    }

    pub(crate) fn idle_secs(&self) -> u64 {
        self.idle_ms() / 1000
    }

    pub(crate) async fn arm(&self) -> Result<()> {
        if self.state.storage().get_alarm().await?.is_none() {
            let every = (self.idle_ms() / 2).clamp(1000, 60_000) as i64;
            self.state.storage().set_alarm(every).await?;
        }
        Ok(())
    }

    /// Where `e` lives, as the inventory's answers say it (`new`: this claim made it).
    pub(crate) fn record(e: &Entry, new: bool) -> Record {
        Record {
            id: e.id.clone(),
            executor: e.place.clone(),
            temporary: e.temporary,
            new,
        }
    }

    /// Removes `e` where it lives and forgets it (its session ended, or it idled out).
    /// When its place does not answer (an executor down), the computer may still be there:
    /// it stays as a tombstone no caller reaches (`Registry::retire`), and the next idle
    /// sweeps try again, so the id is never handed to another caller meanwhile.
    pub(crate) async fn remove(&self, team: &str, e: &Entry) -> Result<()> {
        let gw = gateway(&self.env);
        let op = Op::Delete {
            computer_id: e.id.clone(),
        };
        // The gateway's own housekeeping: it owns the lifetime of what it placed. The
        // executor lets only a temporary's owner reach it: the removal is in its name.
        let owner = e.principal().unwrap_or_default();
        match gw
            .op(&e.place, team, owner, Scope::Manage.as_str(), op)
            .await
        {
            Ok(_) => self.registry().forget(&e.id),
            Err(GatewayError::Api(a)) if a.error.code == ErrorCode::NotFound => {
                self.registry().forget(&e.id)
            }
            Err(why) => {
                tracing::warn!(computer_id = e.id.as_str(), place = e.place.as_str(), error = %why,
                    "could not remove a temporary computer; kept as a tombstone and tried again");
                self.registry().retire(&e.id)
            }
        }
    }
}

impl DurableObject for Team {
    fn new(state: State, env: Env) -> Self {
        let schema_error = migrate(&state.storage().sql()).err();
        if let Some(e) = &schema_error {
            worker::console_error!("{e}");
        }
        Self {
            state,
            env,
            schema_error,
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        if let Some(e) = &self.schema_error {
            return bad(500, &e.to_string());
        }
        let body = req.bytes().await?;
        let call = match inventory::Call::decode(&body) {
            Ok(c) => c,
            Err(e) => return bad(400, &e.to_string()),
        };
        let now = now_ms();
        let now_sql = i64::try_from(now).unwrap_or(i64::MAX);
        if !call.team.is_empty() {
            self.sql(
                "INSERT OR IGNORE INTO meta (k, v) VALUES ('team', ?)",
                vec![call.team.as_str().into()],
            )?;
        }
        let done = || typed_response(200, &inventory::Done::OK);
        match call.request {
            inventory::Request::Claim {
                id,
                temporary,
                owner,
                stateless,
                executor,
                scope,
            } => {
                // A new permanent computer needs `manage`: refused here, before anything
                // is recorded or placed (a temporary, or an existing computer, needs no more
                // than the `exec` the Worker checked).
                let claimant = Claimant {
                    requested: temporary,
                    owner: &owner,
                    stateless,
                    scope: Some(&scope),
                };
                match self.registry().claim(&id, &executor, &claimant, now) {
                    Ok((e, new)) => {
                        if new && e.temporary {
                            self.arm().await?;
                        }
                        typed_response(200, &Self::record(&e, new))
                    }
                    // The same policy as the local server, in the same words.
                    Err(RegistryError::Policy(e)) => bad(409, &e.to_string()),
                    // The executor's words and status for the same refusal.
                    Err(RegistryError::Forbidden(e)) => bad(403, &e.to_string()),
                    Err(e) => bad(500, &e.to_string()),
                }
            }
            inventory::Request::ClaimDefault {
                owner,
                fresh,
                executor,
            } => {
                // Kept in `meta` as `default:<owner>` (no schema change); a default the
                // inventory no longer holds (reaped when idle, deleted) is replaced.
                #[derive(Deserialize)]
                struct Meta {
                    v: String,
                }
                let key = format!("default:{owner}");
                let rows: Vec<Meta> = self
                    .sql("SELECT v FROM meta WHERE k = ?", vec![key.as_str().into()])?
                    .to_array()?;
                let held = rows.into_iter().next().map(|m| m.v);
                // Its default only while the principal still reaches it (not forgotten, not
                // a tombstone whose removal is pending).
                let id = match held {
                    Some(id) if self.registry().visible(&id, &owner).is_ok() => id,
                    _ => fresh,
                };
                // A default is always a temporary: `exec` makes it.
                let claimant = Claimant {
                    requested: None,
                    owner: &owner,
                    stateless: true,
                    scope: None,
                };
                match self.registry().claim(&id, &executor, &claimant, now) {
                    Ok((e, new)) => {
                        if new && e.temporary {
                            self.arm().await?;
                        }
                        self.sql(
                            "INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)",
                            vec![key.into(), id.as_str().into()],
                        )?;
                        typed_response(200, &Self::record(&e, new))
                    }
                    Err(RegistryError::Policy(e)) => bad(409, &e.to_string()),
                    Err(e) => bad(500, &e.to_string()),
                }
            }
            inventory::Request::Get { id, owner } => match self.registry().visible(&id, &owner) {
                Ok(e) => typed_response(200, &Self::record(&e, false)),
                Err(e @ RegistryError::Unknown(_)) => bad(404, &e.to_string()),
                Err(e) => bad(500, &e.to_string()),
            },
            inventory::Request::Forget { id } => {
                self.registry().forget(&id)?;
                self.sql("DELETE FROM jobs WHERE id = ?", vec![id.as_str().into()])?;
                // A forgotten computer is no session's or principal's default: the next call
                // without an id makes a new one.
                self.sql(
                    "UPDATE sessions SET default_id = NULL WHERE default_id = ?",
                    vec![id.as_str().into()],
                )?;
                self.sql(
                    "DELETE FROM meta WHERE k LIKE 'default:%' AND v = ?",
                    vec![id.as_str().into()],
                )?;
                done()
            }
            inventory::Request::Touch {
                id,
                busy,
                done: ended,
            } => {
                self.registry().touch(&id, now)?;
                // Busy until then (a call in flight, under its own mark): the alarm reaps
                // neither the computer nor its session before. Kept in the jobs table under
                // a name no job id takes (`exec:<id>:<nonce>`); the touch at the call's end
                // (`done`) removes it, and it is forgotten with the jobs.
                if let Some(mark) = ended.filter(|m| m.starts_with("exec:")) {
                    self.sql("DELETE FROM jobs WHERE job_id = ?", vec![mark.into()])?;
                }
                if let Some(busy) = busy.filter(|b| b.mark.starts_with("exec:")) {
                    self.sql(
                        "INSERT OR REPLACE INTO jobs (job_id, id, deadline) VALUES (?, ?, ?)",
                        vec![busy.mark.into(), id.into(), busy.until.into()],
                    )?;
                }
                done()
            }
            inventory::Request::List { owner } => {
                let computers = self
                    .registry()
                    .list(&owner)?
                    .iter()
                    .map(|e| Self::record(e, false))
                    .collect();
                typed_response(200, &inventory::Listed { computers })
            }
            inventory::Request::JobPut {
                job_id,
                id,
                deadline,
            } => {
                self.sql(
                    "INSERT OR REPLACE INTO jobs (job_id, id, deadline) VALUES (?, ?, ?)",
                    vec![job_id.into(), id.into(), deadline.into()],
                )?;
                done()
            }
            // The computer of a job, if the caller may reach that computer (else it is
            // "no such job", whatever the id).
            inventory::Request::JobGet { job_id, owner } => {
                let rows: Vec<JobRow> = self
                    .sql("SELECT id FROM jobs WHERE job_id = ?", vec![job_id.into()])?
                    .to_array()?;
                match rows.into_iter().next() {
                    Some(r) if self.registry().visible(&r.id, &owner).is_ok() => {
                        typed_response(200, &inventory::JobPlace { id: r.id })
                    }
                    _ => bad(404, "no such job"),
                }
            }
            inventory::Request::JobDone { job_id } => {
                self.sql("DELETE FROM jobs WHERE job_id = ?", vec![job_id.into()])?;
                done()
            }
            put @ inventory::Request::TaskPut { .. } => self.put_task(put, now_sql),
            inventory::Request::TaskGet {
                task_id,
                owner,
                lease,
            } => self.get_task(&task_id, &owner, lease, now_sql),
            inventory::Request::SessionOpen {
                sid,
                subject,
                version,
            } => {
                if let Some(full) = self.sessions_full(&subject)? {
                    return bad(503, &full);
                }
                self.sql(
                    "INSERT INTO sessions (sid, subject, version, default_id, last_seen) VALUES (?, ?, ?, NULL, ?)",
                    vec![sid.into(), subject.into(), version.into(), now_sql.into()],
                )?;
                self.arm().await?;
                done()
            }
            inventory::Request::SessionGet { sid, subject } => {
                let rows: Vec<SessionRow> = self
                    .sql(
                        "SELECT sid, subject, version, default_id FROM sessions WHERE sid = ?",
                        vec![sid.into()],
                    )?
                    .to_array()?;
                match rows.into_iter().next() {
                    Some(r) if r.subject == subject => {
                        self.sql(
                            "UPDATE sessions SET last_seen = ? WHERE sid = ?",
                            vec![now_sql.into(), r.sid.as_str().into()],
                        )?;
                        let session = inventory::Session {
                            version: r.version,
                            default_id: r.default_id,
                        };
                        typed_response(200, &session)
                    }
                    _ => bad(404, "unknown session"),
                }
            }
            inventory::Request::SessionDefault { sid, id } => {
                self.sql(
                    "UPDATE sessions SET default_id = ? WHERE sid = ?",
                    vec![id.into(), sid.into()],
                )?;
                done()
            }
            inventory::Request::SessionClose { sid, subject } => {
                let rows: Vec<SessionRow> = self
                    .sql(
                        "SELECT sid, subject, version, default_id FROM sessions WHERE sid = ?",
                        vec![sid.as_str().into()],
                    )?
                    .to_array()?;
                if !rows.iter().any(|r| r.subject == subject) {
                    return bad(404, "unknown session");
                }
                self.close_owner(&format!("session:{sid}")).await?;
                self.sql(
                    "DELETE FROM sessions WHERE sid = ?",
                    vec![sid.as_str().into()],
                )?;
                done()
            }
        }
    }

    async fn alarm(&self) -> Result<Response> {
        if let Some(e) = &self.schema_error {
            return Err(worker::Error::RustError(e.to_string()));
        }
        let now = now_ms() as i64;
        let cutoff = now - self.idle_ms() as i64;
        // Computers under a job or a command that may still run.
        let busy: Vec<JobRow> = self
            .sql("SELECT id FROM jobs WHERE deadline > ?", vec![now.into()])?
            .to_array()?;
        // Idle sessions end; their temporaries go with them (not while one is busy).
        let idle: Vec<SessionRow> = self
            .sql(
                "SELECT sid, subject, version, default_id FROM sessions WHERE last_seen < ?",
                vec![cutoff.into()],
            )?
            .to_array()?;
        for s in idle {
            let owner = format!("session:{}", s.sid);
            if self
                .registry()
                .owned_by(&owner)?
                .iter()
                .any(|e| busy.iter().any(|j| j.id == e.id))
            {
                continue;
            }
            self.close_owner(&owner).await?;
            self.sql(
                "DELETE FROM sessions WHERE sid = ?",
                vec![s.sid.as_str().into()],
            )?;
        }
        // Stateless callers' temporaries go when idle, unless a job may still run there;
        // jobs are forgotten 10 minutes after their timeout (an ended job's output is
        // kept that long).
        self.sql(
            "DELETE FROM jobs WHERE deadline < ?",
            vec![(now - 600_000).into()],
        )?;
        self.sql("DELETE FROM tasks WHERE expires < ?", vec![now.into()])?;
        let team = self.team()?;
        for e in self.registry().idle(now_ms(), self.idle_secs())? {
            if busy.iter().any(|j| j.id == e.id) {
                continue;
            }
            self.remove(&team, &e).await?;
        }
        let left = self.registry().temporaries()?;
        let sessions: Vec<SessionRow> = self
            .sql(
                "SELECT sid, subject, version, default_id FROM sessions",
                vec![],
            )?
            .to_array()?;
        if !left.is_empty() || !sessions.is_empty() {
            let every = (self.idle_ms() / 2).clamp(1000, 60_000) as i64;
            self.state.storage().set_alarm(every).await?;
        }
        Response::ok("reaped")
    }
}

/// A task's keeping time once it ended, or past its command's timeout (SPEC §3.8).
const TASK_KEEP_MS: i64 = shared::tasks::KEEP_MS as i64;
/// How long one request may hold a task's read before another may take it.
const TASK_LEASE_MS: i64 = 30_000;

impl Team {
    /// [`inventory::Request::TaskPut`]: keeps a task's record (`edge::tasks`). A record
    /// under a lease is written only by its holder (`lease`), which gives the lease back.
    fn put_task(&self, put: inventory::Request, now: i64) -> Result<Response> {
        let inventory::Request::TaskPut {
            task_id,
            id,
            owner,
            deadline,
            record,
            lease,
            ended_ms,
        } = put
        else {
            return bad(500, "put_task takes a task_put request");
        };
        let rows: Vec<TaskRow> = self
            .sql(
                "SELECT id, owner, deadline, record, lease, lease_until FROM tasks WHERE task_id = ?",
                vec![task_id.as_str().into()],
            )?
            .to_array()?;
        if let Some(row) = rows.first()
            && row.lease.is_some()
            && row.lease_until > now
            && row.lease != lease
        {
            return bad(409, "this task is being read by another request");
        }
        // Kept 10 minutes from its end, or past its command's timeout when never read.
        let expires = ended_ms.unwrap_or(deadline).saturating_add(TASK_KEEP_MS);
        // Expired tasks go here too: the alarm runs only while temporaries or sessions do.
        self.sql("DELETE FROM tasks WHERE expires < ?", vec![now.into()])?;
        self.sql(
            "INSERT OR REPLACE INTO tasks (task_id, id, owner, deadline, expires, record, lease, lease_until) \
             VALUES (?, ?, ?, ?, ?, ?, NULL, 0)",
            vec![
                task_id.into(),
                id.into(),
                owner.into(),
                deadline.into(),
                expires.into(),
                record.into(),
            ],
        )?;
        typed_response(200, &inventory::Done::OK)
    }

    /// [`inventory::Request::TaskGet`]: a task its starter asks for, or anyone who may
    /// reach its computer (else 404, whatever the id), with where the computer lives
    /// (`place`, none once it is gone). With `lease` the caller also gets the task's read
    /// lease when free.
    fn get_task(&self, task_id: &str, owner: &str, lease: bool, now: i64) -> Result<Response> {
        let rows: Vec<TaskRow> = self
            .sql(
                "SELECT id, owner, deadline, record, lease, lease_until FROM tasks \
                 WHERE task_id = ? AND expires >= ?",
                vec![task_id.into(), now.into()],
            )?
            .to_array()?;
        let Some(row) = rows.into_iter().next() else {
            return bad(404, "no such task");
        };
        let reach = self.registry().visible(&row.id, owner);
        if row.owner != owner && reach.is_err() {
            return bad(404, "no such task");
        }
        // Where the computer lives, if the caller still reaches it (its starter reads a
        // task whose computer was deleted: its job is gone with it).
        let place = reach.ok().map(|e| e.place);
        let mut taken = None;
        if lease && (row.lease.is_none() || row.lease_until <= now) {
            let token = random_hex();
            self.sql(
                "UPDATE tasks SET lease = ?, lease_until = ? WHERE task_id = ?",
                vec![
                    token.as_str().into(),
                    now.saturating_add(TASK_LEASE_MS).into(),
                    task_id.into(),
                ],
            )?;
            taken = Some(token);
        }
        let found = inventory::TaskFound {
            id: row.id,
            owner: row.owner,
            deadline: row.deadline,
            record: row.record,
            place,
            lease: taken,
        };
        typed_response(200, &found)
    }

    /// The team this object belongs to (stored at first use: ids from names are one-way).
    pub(crate) fn team(&self) -> Result<String> {
        #[derive(Deserialize)]
        struct Meta {
            v: String,
        }
        let rows: Vec<Meta> = self
            .sql("SELECT v FROM meta WHERE k = 'team'", vec![])?
            .to_array()?;
        Ok(rows.into_iter().next().map(|m| m.v).unwrap_or_default())
    }

    pub(crate) async fn close_owner(&self, owner: &str) -> Result<()> {
        let team = self.team()?;
        for e in self.registry().owned_by(owner)? {
            self.remove(&team, &e).await?;
        }
        Ok(())
    }
}

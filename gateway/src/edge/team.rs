//! The per-team Durable Object (`Team`): `shared::registry` over its SQLite inventory
//! (placement, owner, temporary flag, last use; `store.rs`), the legacy sessions, and the
//! alarm that reaps idle temporaries (the one owner of the lifetime of the computers the
//! gateway places).

use super::store::SqlStore;
use super::*;
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
    pub(crate) schema_error: Option<String>,
}

/// Brings the object's schema to [`crate::schema::CURRENT`]: what failed, if anything.
fn migrate(sql: &worker::SqlStorage) -> std::result::Result<(), String> {
    use crate::schema::{MIGRATIONS, VERSION_KEY, pending, stored_version};
    #[derive(Deserialize)]
    struct Meta {
        v: String,
    }
    let fail = |what: &str, e: worker::Error| format!("team inventory {what}: {e}");
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

/// The string field `k` of an inventory request, which must be there.
fn field(b: &Value, k: &str) -> std::result::Result<String, String> {
    match b[k].as_str() {
        Some(v) if !v.is_empty() => Ok(v.to_owned()),
        _ => Err(format!("inventory request without `{k}`")),
    }
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
    json_response(status, &json!({"error": message}))
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

    pub(crate) fn record(e: &Entry) -> Value {
        json!({"id": e.id, "executor": e.place, "temporary": e.temporary})
    }

    /// Removes `e` where it lives and forgets it (its session ended, or it idled out).
    pub(crate) async fn remove(&self, team: &str, e: &Entry) -> Result<()> {
        let gw = gateway(&self.env);
        let op = Op::Delete {
            computer_id: e.id.clone(),
        };
        // The gateway's own housekeeping: it owns the lifetime of what it placed.
        let _ = gw.op(&e.place, team, Scope::Manage.as_str(), op).await;
        self.registry().forget(&e.id)
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
            return bad(500, e);
        }
        let b: Value = match req.json().await {
            Ok(b) => b,
            Err(e) => return bad(400, &format!("inventory request body: {e}")),
        };
        let required: &[&str] = match req.path().as_str() {
            "/claim" => &["id", "owner", "executor"],
            "/get" => &["id", "owner"],
            "/forget" | "/touch" => &["id"],
            "/list" => &["owner"],
            "/session/open" => &["sid", "subject", "version"],
            "/session/get" | "/session/close" => &["sid", "subject"],
            "/session/default" => &["sid", "id"],
            "/job/put" => &["job_id", "id"],
            "/job/get" => &["job_id", "owner"],
            "/job/done" => &["job_id"],
            "/task/put" => &["task_id", "id", "owner", "record"],
            "/task/get" => &["task_id", "owner"],
            _ => &[],
        };
        for k in required {
            if let Err(e) = field(&b, k) {
                return bad(400, &e);
            }
        }
        let s = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
        let now = now_ms();
        let now_sql = i64::try_from(now).unwrap_or(i64::MAX);
        if !s("team").is_empty() {
            self.sql(
                "INSERT OR IGNORE INTO meta (k, v) VALUES ('team', ?)",
                vec![s("team").into()],
            )?;
        }
        match req.path().as_str() {
            "/claim" => {
                let (id, owner, executor) = (s("id"), s("owner"), s("executor"));
                let Some(stateless) = b["stateless"].as_bool() else {
                    return bad(400, "inventory request without `stateless`");
                };
                let claimant = Claimant {
                    requested: b["temporary"].as_bool(),
                    owner: &owner,
                    stateless,
                };
                match self.registry().claim(&id, &executor, &claimant, now) {
                    Ok((e, new)) => {
                        if new && e.temporary {
                            self.arm().await?;
                        }
                        let mut r = Self::record(&e);
                        r["new"] = json!(new);
                        json_response(200, &r)
                    }
                    // The same policy as the local server, in the same words.
                    Err(RegistryError::Policy(e)) => bad(409, &e.to_string()),
                    Err(e) => bad(500, &e.to_string()),
                }
            }
            "/get" => match self.registry().visible(&s("id"), &s("owner")) {
                Ok(e) => json_response(200, &Self::record(&e)),
                Err(e @ RegistryError::Unknown(_)) => bad(404, &e.to_string()),
                Err(e) => bad(500, &e.to_string()),
            },
            "/forget" => {
                self.registry().forget(&s("id"))?;
                self.sql("DELETE FROM jobs WHERE id = ?", vec![s("id").into()])?;
                // A forgotten computer is no session's default: the next call without an
                // id makes a new one.
                self.sql(
                    "UPDATE sessions SET default_id = NULL WHERE default_id = ?",
                    vec![s("id").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/touch" => {
                self.registry().touch(&s("id"), now)?;
                // Busy until then (a call in flight, under its own mark): the alarm reaps
                // neither the computer nor its session before. Kept in the jobs table under
                // a name no job id takes (`exec:<id>:<nonce>`); the touch at the call's end
                // (`done`) removes it, and it is forgotten with the jobs.
                if let Some(mark) = b["done"].as_str()
                    && mark.starts_with("exec:")
                {
                    self.sql("DELETE FROM jobs WHERE job_id = ?", vec![mark.into()])?;
                }
                if let (Some(mark), Some(until)) = (b["mark"].as_str(), b["busy_until"].as_i64())
                    && mark.starts_with("exec:")
                {
                    self.sql(
                        "INSERT OR REPLACE INTO jobs (job_id, id, deadline) VALUES (?, ?, ?)",
                        vec![mark.into(), s("id").into(), until.into()],
                    )?;
                }
                json_response(200, &json!({"ok": true}))
            }
            "/list" => {
                let items: Vec<Value> = self
                    .registry()
                    .list(&s("owner"))?
                    .iter()
                    .map(Self::record)
                    .collect();
                json_response(200, &json!({"computers": items}))
            }
            "/job/put" => {
                let deadline = b["deadline"].as_i64().unwrap_or(now_sql);
                self.sql(
                    "INSERT OR REPLACE INTO jobs (job_id, id, deadline) VALUES (?, ?, ?)",
                    vec![s("job_id").into(), s("id").into(), deadline.into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            // The computer of a job, if the caller may reach that computer (else it is
            // "no such job", whatever the id).
            "/job/get" => {
                let rows: Vec<JobRow> = self
                    .sql(
                        "SELECT id FROM jobs WHERE job_id = ?",
                        vec![s("job_id").into()],
                    )?
                    .to_array()?;
                match rows.into_iter().next() {
                    Some(r) if self.registry().visible(&r.id, &s("owner")).is_ok() => {
                        json_response(200, &json!({"id": r.id}))
                    }
                    _ => bad(404, "no such job"),
                }
            }
            "/job/done" => {
                self.sql(
                    "DELETE FROM jobs WHERE job_id = ?",
                    vec![s("job_id").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/task/put" => self.put_task(&b, now_sql),
            "/task/get" => self.get_task(&b, now_sql),
            "/session/open" => {
                if let Some(full) = self.sessions_full(&s("subject"))? {
                    return bad(503, &full);
                }
                self.sql(
                    "INSERT INTO sessions (sid, subject, version, default_id, last_seen) VALUES (?, ?, ?, NULL, ?)",
                    vec![s("sid").into(), s("subject").into(), s("version").into(), now_sql.into()],
                )?;
                self.arm().await?;
                json_response(200, &json!({"ok": true}))
            }
            "/session/get" => {
                let rows: Vec<SessionRow> = self
                    .sql(
                        "SELECT sid, subject, version, default_id FROM sessions WHERE sid = ?",
                        vec![s("sid").into()],
                    )?
                    .to_array()?;
                match rows.into_iter().next() {
                    Some(r) if r.subject == s("subject") => {
                        self.sql(
                            "UPDATE sessions SET last_seen = ? WHERE sid = ?",
                            vec![now_sql.into(), r.sid.as_str().into()],
                        )?;
                        json_response(
                            200,
                            &json!({"version": r.version, "default_id": r.default_id}),
                        )
                    }
                    _ => bad(404, "unknown session"),
                }
            }
            "/session/default" => {
                self.sql(
                    "UPDATE sessions SET default_id = ? WHERE sid = ?",
                    vec![s("id").into(), s("sid").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/session/close" => {
                let sid = s("sid");
                let rows: Vec<SessionRow> = self
                    .sql(
                        "SELECT sid, subject, version, default_id FROM sessions WHERE sid = ?",
                        vec![sid.as_str().into()],
                    )?
                    .to_array()?;
                if !rows.iter().any(|r| r.subject == s("subject")) {
                    return bad(404, "unknown session");
                }
                self.close_owner(&format!("session:{sid}")).await?;
                self.sql(
                    "DELETE FROM sessions WHERE sid = ?",
                    vec![sid.as_str().into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            _ => bad(404, "no such inventory route"),
        }
    }

    async fn alarm(&self) -> Result<Response> {
        if let Some(e) = &self.schema_error {
            return Err(worker::Error::RustError(e.clone()));
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
    /// `/task/put`: keeps a task's record (`edge::tasks`). A record under a lease is
    /// written only by its holder (`lease`), which gives the lease back.
    fn put_task(&self, b: &Value, now: i64) -> Result<Response> {
        let s = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
        let rows: Vec<TaskRow> = self
            .sql(
                "SELECT id, owner, deadline, record, lease, lease_until FROM tasks WHERE task_id = ?",
                vec![s("task_id").into()],
            )?
            .to_array()?;
        if let Some(row) = rows.first()
            && row.lease.is_some()
            && row.lease_until > now
            && row.lease.as_deref() != b["lease"].as_str()
        {
            return bad(409, "this task is being read by another request");
        }
        let deadline = b["deadline"].as_i64().unwrap_or(now);
        // Kept 10 minutes from its end, or past its command's timeout when never read.
        let expires = b["ended_ms"]
            .as_i64()
            .unwrap_or(deadline)
            .saturating_add(TASK_KEEP_MS);
        // Expired tasks go here too: the alarm runs only while temporaries or sessions do.
        self.sql("DELETE FROM tasks WHERE expires < ?", vec![now.into()])?;
        self.sql(
            "INSERT OR REPLACE INTO tasks (task_id, id, owner, deadline, expires, record, lease, lease_until) \
             VALUES (?, ?, ?, ?, ?, ?, NULL, 0)",
            vec![
                s("task_id").into(),
                s("id").into(),
                s("owner").into(),
                deadline.into(),
                expires.into(),
                s("record").into(),
            ],
        )?;
        json_response(200, &json!({"ok": true}))
    }

    /// `/task/get`: a task its starter asks for, or anyone who may reach its computer
    /// (else 404, whatever the id), with where the computer lives (`place`, null once it
    /// is gone). With `lease: true` the caller also gets the task's read lease when free.
    fn get_task(&self, b: &Value, now: i64) -> Result<Response> {
        let (task_id, owner) = (
            b["task_id"].as_str().unwrap_or_default(),
            b["owner"].as_str().unwrap_or_default(),
        );
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
        let mut lease = None;
        if b["lease"].as_bool() == Some(true) && (row.lease.is_none() || row.lease_until <= now) {
            let token = random_hex();
            self.sql(
                "UPDATE tasks SET lease = ?, lease_until = ? WHERE task_id = ?",
                vec![
                    token.as_str().into(),
                    now.saturating_add(TASK_LEASE_MS).into(),
                    task_id.into(),
                ],
            )?;
            lease = Some(token);
        }
        json_response(
            200,
            &json!({"id": row.id, "owner": row.owner, "deadline": row.deadline,
                    "record": row.record, "place": place, "lease": lease}),
        )
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

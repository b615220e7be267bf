//! The per-team Durable Object (`Team`): the inventory (placement, owner, temporary flag,
//! last use) and legacy sessions in SQLite, and the alarm that reaps idle temporaries (the
//! one owner of the lifetime of the computers the gateway places).

use super::*;

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
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) executor: String,
    pub(crate) temporary: i64,
    pub(crate) owner: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SessionRow {
    pub(crate) sid: String,
    pub(crate) subject: String,
    pub(crate) version: String,
    pub(crate) default_id: Option<String>,
}

pub(crate) fn bad(status: u16, message: &str) -> Result<Response> {
    json_response(status, &json!({"error": message}))
}

impl Team {
    pub(crate) fn sql(&self, query: &str, args: Vec<SqlStorageValue>) -> Result<worker::SqlCursor> {
        self.state.storage().sql().exec(query, Some(args))
    }

    pub(crate) fn idle_ms(&self) -> u64 {
        var(&self.env, "SESSION_TIMEOUT_SECS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_IDLE_SECS)
            * 1000
    }

    pub(crate) fn row(&self, id: &str) -> Result<Option<Row>> {
        let rows: Vec<Row> = self
            .sql(
                "SELECT id, executor, temporary, owner FROM computers WHERE id = ?",
                vec![id.into()],
            )?
            .to_array()?;
        Ok(rows.into_iter().next())
    }

    pub(crate) async fn arm(&self) -> Result<()> {
        if self.state.storage().get_alarm().await?.is_none() {
            let every = (self.idle_ms() / 2).clamp(1000, 60_000) as i64;
            self.state.storage().set_alarm(every).await?;
        }
        Ok(())
    }

    pub(crate) fn record(r: &Row) -> Value {
        json!({"id": r.id, "executor": r.executor, "temporary": r.temporary != 0})
    }

    pub(crate) fn existing(r: &Row) -> Existing<'_> {
        Existing {
            computer_id: &r.id,
            temporary: r.temporary != 0,
            owner: r.owner.as_deref(),
        }
    }

    pub(crate) async fn remove_at_executor(&self, team: &str, r: &Row) {
        let gw = gateway(&self.env);
        let op = Op::Delete {
            computer_id: r.id.clone(),
        };
        let _ = gw.op(&r.executor, team, op).await;
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
            _ => &[],
        };
        for k in required {
            if let Err(e) = field(&b, k) {
                return bad(400, &e);
            }
        }
        let s = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
        let now = now_ms() as i64;
        if !s("team").is_empty() {
            self.sql(
                "INSERT OR IGNORE INTO meta (k, v) VALUES ('team', ?)",
                vec![s("team").into()],
            )?;
        }
        match req.path().as_str() {
            "/claim" => {
                let (id, owner, executor) = (s("id"), s("owner"), s("executor"));
                let requested = b["temporary"].as_bool();
                if let Some(r) = self.row(&id)? {
                    // The same policy as the local server, in the same words.
                    return match check_attach(&Self::existing(&r), requested, &owner) {
                        Ok(()) => json_response(200, &Self::record(&r)),
                        Err(e) => bad(409, &e.to_string()),
                    };
                }
                let temporary = requested.unwrap_or(true);
                self.sql(
                    "INSERT INTO computers (id, executor, temporary, owner, last_used) VALUES (?, ?, ?, ?, ?)",
                    vec![
                        id.as_str().into(),
                        executor.as_str().into(),
                        i64::from(temporary).into(),
                        if temporary { owner.as_str().into() } else { SqlStorageValue::Null },
                        now.into(),
                    ],
                )?;
                if temporary {
                    self.arm().await?;
                }
                json_response(
                    200,
                    &json!({"id": id, "executor": executor, "temporary": temporary}),
                )
            }
            "/get" => match self.row(&s("id"))? {
                Some(r) if visible_to(&Self::existing(&r), &s("owner")) => {
                    json_response(200, &Self::record(&r))
                }
                _ => bad(
                    404,
                    &format!(
                        "computer {:?} does not exist (or is another session's temporary computer); see computer_list",
                        s("id")
                    ),
                ),
            },
            "/forget" => {
                self.sql("DELETE FROM computers WHERE id = ?", vec![s("id").into()])?;
                self.sql(
                    "UPDATE sessions SET default_id = NULL WHERE default_id = ?",
                    vec![s("id").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/touch" => {
                self.sql(
                    "UPDATE computers SET last_used = ? WHERE id = ?",
                    vec![now.into(), s("id").into()],
                )?;
                json_response(200, &json!({"ok": true}))
            }
            "/list" => {
                let rows: Vec<Row> = self
                    .sql(
                        "SELECT id, executor, temporary, owner FROM computers ORDER BY id",
                        vec![],
                    )?
                    .to_array()?;
                let owner = s("owner");
                let items: Vec<Value> = rows
                    .iter()
                    .filter(|r| visible_to(&Self::existing(r), &owner))
                    .map(Self::record)
                    .collect();
                json_response(200, &json!({"computers": items}))
            }
            "/session/open" => {
                self.sql(
                    "INSERT INTO sessions (sid, subject, version, default_id, last_seen) VALUES (?, ?, ?, NULL, ?)",
                    vec![s("sid").into(), s("subject").into(), s("version").into(), now.into()],
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
                            vec![now.into(), r.sid.as_str().into()],
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
        // Idle sessions end; their temporaries go with them.
        let idle: Vec<SessionRow> = self
            .sql(
                "SELECT sid, subject, version, default_id FROM sessions WHERE last_seen < ?",
                vec![cutoff.into()],
            )?
            .to_array()?;
        for s in idle {
            self.close_owner(&format!("session:{}", s.sid)).await?;
            self.sql(
                "DELETE FROM sessions WHERE sid = ?",
                vec![s.sid.as_str().into()],
            )?;
        }
        // Stateless callers' temporaries go when idle.
        let stale: Vec<Row> = self
            .sql(
                "SELECT id, executor, temporary, owner FROM computers WHERE temporary = 1 AND owner LIKE 'user:%' AND last_used < ?",
                vec![cutoff.into()],
            )?
            .to_array()?;
        let team = self.team()?;
        for r in stale {
            self.remove_at_executor(&team, &r).await;
            self.sql(
                "DELETE FROM computers WHERE id = ?",
                vec![r.id.as_str().into()],
            )?;
        }
        let left: Vec<Row> = self
            .sql(
                "SELECT id, executor, temporary, owner FROM computers WHERE temporary = 1",
                vec![],
            )?
            .to_array()?;
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

impl Team {
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
        let rows: Vec<Row> = self
            .sql("SELECT id, executor, temporary, owner FROM computers WHERE temporary = 1 AND owner = ?", vec![owner.into()])?
            .to_array()?;
        let team = self.team()?;
        for r in rows {
            self.remove_at_executor(&team, &r).await;
            self.sql(
                "DELETE FROM computers WHERE id = ?",
                vec![r.id.as_str().into()],
            )?;
        }
        Ok(())
    }
}

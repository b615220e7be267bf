//! The protocol between the Worker and a team's Durable Object (`Team`): one typed request
//! enum ([`Request`]) in one envelope ([`Call`]), and one typed answer per request, each
//! encoded once as JSON. The object decodes a [`Call`], checks it ([`Request::check`])
//! and answers `200` with the request's answer type, or another status with
//! [`Refusal`]. Native, so every shape is unit-tested without `workerd`.

use serde::{Deserialize, Serialize};

/// One call to a team's object: the team (the object learns its name from every call: its
/// id is a one-way hash of it) and what it is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub team: String,
    pub request: Request,
}

/// A command that could outlast the idle window from its last recorded use: the computer
/// is busy under `mark` (`exec:<id>:<nonce>`) until `until` (ms since the epoch), so the
/// alarm reaps neither it nor its session meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Busy {
    pub mark: String,
    pub until: i64,
}

/// What the Worker asks a team's object. Ids are the caller's computer ids; `owner` is
/// `session:<sid>` or `user:<sub>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Claims `id` for `owner` (recording it at `executor` when new): a [`Record`]. A new
    /// permanent computer needs `manage` in `scope` (else 403, nothing recorded).
    Claim {
        id: String,
        /// `None`: attach as it is, or make a temporary.
        temporary: Option<bool>,
        owner: String,
        stateless: bool,
        executor: String,
        /// The caller's scopes, space separated (as the executor token's `scope` claim).
        scope: String,
    },
    /// Claims stateless principal `owner`'s default computer (SPEC §3.2: without a session
    /// the default is the principal's): the one it has while the inventory still holds
    /// it, else `fresh` (recorded at `executor`), which becomes its default: a [`Record`].
    ClaimDefault {
        owner: String,
        fresh: String,
        executor: String,
    },
    /// Where `id` lives, if `owner` may see it: a [`Record`] (else 404).
    Get { id: String, owner: String },
    /// Forgets `id`, its jobs, and every session default naming it: [`Done`].
    Forget { id: String },
    /// Records a use of `id` (and sets or clears a busy mark): [`Done`].
    Touch {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        busy: Option<Busy>,
        /// The busy mark the call that just ended had set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        done: Option<String>,
    },
    /// What `owner` may see: [`Listed`].
    List { owner: String },
    /// Opens a legacy session (503 past the session caps): [`Done`].
    SessionOpen {
        sid: String,
        subject: String,
        version: String,
    },
    /// A live session of `subject`: [`Session`] (else 404).
    SessionGet { sid: String, subject: String },
    /// Makes `id` the session's default computer: [`Done`].
    SessionDefault { sid: String, id: String },
    /// Ends the session and removes its temporaries: [`Done`] (404 if not `subject`'s).
    SessionClose { sid: String, subject: String },
    /// Records where job `job_id` runs and until when it may: [`Done`].
    JobPut {
        job_id: String,
        id: String,
        deadline: i64,
    },
    /// The computer of job `job_id`, if `owner` may reach it: [`JobPlace`] (else 404).
    JobGet { job_id: String, owner: String },
    /// Forgets job `job_id` (it ended and was read): [`Done`].
    JobDone { job_id: String },
    /// Keeps a task's record; a record under a read lease is written only by its holder,
    /// which gives the lease back (else 409): [`Done`].
    TaskPut {
        task_id: String,
        id: String,
        owner: String,
        deadline: i64,
        /// The `shared::tasks::Task`, as JSON.
        record: String,
        lease: Option<String>,
        /// When it ended (kept 10 minutes from then), if it did.
        ended_ms: Option<i64>,
    },
    /// A task its starter or anyone who reaches its computer asks for, with its read lease
    /// when `lease` and it is free: [`TaskFound`] (else 404).
    TaskGet {
        task_id: String,
        owner: String,
        lease: bool,
    },
}

impl Request {
    /// The request's name, for logs and the request path (`claim`, `session_open`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Claim { .. } => "claim",
            Request::ClaimDefault { .. } => "claim_default",
            Request::Get { .. } => "get",
            Request::Forget { .. } => "forget",
            Request::Touch { .. } => "touch",
            Request::List { .. } => "list",
            Request::SessionOpen { .. } => "session_open",
            Request::SessionGet { .. } => "session_get",
            Request::SessionDefault { .. } => "session_default",
            Request::SessionClose { .. } => "session_close",
            Request::JobPut { .. } => "job_put",
            Request::JobGet { .. } => "job_get",
            Request::JobDone { .. } => "job_done",
            Request::TaskPut { .. } => "task_put",
            Request::TaskGet { .. } => "task_get",
        }
    }

    /// Refuses a request with an empty name where one is needed (the object answers 400).
    pub fn check(&self) -> Result<(), BadCall> {
        let named: &[(&str, &str)] = match self {
            Request::Claim {
                id,
                owner,
                executor,
                ..
            } => &[("id", id), ("owner", owner), ("executor", executor)],
            Request::ClaimDefault {
                owner,
                fresh,
                executor,
            } => &[("owner", owner), ("fresh", fresh), ("executor", executor)],
            Request::Get { id, owner } => &[("id", id), ("owner", owner)],
            Request::Forget { id } | Request::Touch { id, .. } => &[("id", id)],
            Request::List { owner } => &[("owner", owner)],
            Request::SessionOpen {
                sid,
                subject,
                version,
            } => &[("sid", sid), ("subject", subject), ("version", version)],
            Request::SessionGet { sid, subject } | Request::SessionClose { sid, subject } => {
                &[("sid", sid), ("subject", subject)]
            }
            Request::SessionDefault { sid, id } => &[("sid", sid), ("id", id)],
            Request::JobPut { job_id, id, .. } => &[("job_id", job_id), ("id", id)],
            Request::JobGet { job_id, owner } => &[("job_id", job_id), ("owner", owner)],
            Request::JobDone { job_id } => &[("job_id", job_id)],
            Request::TaskPut {
                task_id,
                id,
                owner,
                record,
                ..
            } => &[
                ("task_id", task_id),
                ("id", id),
                ("owner", owner),
                ("record", record),
            ],
            Request::TaskGet { task_id, owner, .. } => &[("task_id", task_id), ("owner", owner)],
        };
        match named.iter().find(|(_, v)| v.is_empty()) {
            Some((k, _)) => Err(BadCall::Missing(k)),
            None => Ok(()),
        }
    }
}

/// Why the team's object refuses a call (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadCall {
    #[error("inventory request body: {0}")]
    Body(String),
    #[error("inventory request without `{0}`")]
    Missing(&'static str),
}

impl Call {
    /// The call's body, as the object reads it.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The call in `body`, checked; why not, for a 400.
    pub fn decode(body: &[u8]) -> Result<Call, BadCall> {
        let call: Call = serde_json::from_slice(body).map_err(|e| BadCall::Body(e.to_string()))?;
        call.request.check()?;
        Ok(call)
    }
}

/// Where a computer lives: the answer to [`Request::Claim`] and [`Request::Get`], and an
/// item of [`Listed`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    /// An executor's name, or `fly`/`e2b` for a direct placement.
    pub executor: String,
    pub temporary: bool,
    /// Recorded by this very claim: nothing exists at its place yet, so a place that does
    /// not answer can be traded for another.
    #[serde(default)]
    pub new: bool,
}

/// The answer of the requests that only change something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    pub ok: bool,
}

impl Done {
    pub const OK: Done = Done { ok: true };
}

/// The answer to [`Request::List`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub computers: Vec<Record>,
}

/// The answer to [`Request::SessionGet`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub version: String,
    pub default_id: Option<String>,
}

/// The answer to [`Request::JobGet`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlace {
    pub id: String,
}

/// The answer to [`Request::TaskGet`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFound {
    /// Its computer.
    pub id: String,
    /// Who started it.
    pub owner: String,
    pub deadline: i64,
    /// The `shared::tasks::Task`, as JSON.
    pub record: String,
    /// Where its computer lives, if the caller still reaches it (`None` once deleted).
    pub place: Option<String>,
    /// The read lease this call took, if it asked and the lease was free.
    pub lease: Option<String>,
}

/// Any other status's body: why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_request() -> Vec<Request> {
        let s = |v: &str| v.to_owned();
        vec![
            Request::Claim {
                id: s("box"),
                temporary: None,
                owner: s("user:a"),
                stateless: true,
                executor: s("ex1"),
                scope: s("exec"),
            },
            Request::Claim {
                id: s("box"),
                temporary: Some(false),
                owner: s("session:1"),
                stateless: false,
                executor: s("fly"),
                scope: s("exec manage"),
            },
            Request::ClaimDefault {
                owner: s("user:a"),
                fresh: s("brave-otter-1a2b"),
                executor: s("ex1"),
            },
            Request::Get {
                id: s("box"),
                owner: s("user:a"),
            },
            Request::Forget { id: s("box") },
            Request::Touch {
                id: s("box"),
                busy: None,
                done: None,
            },
            Request::Touch {
                id: s("box"),
                busy: Some(Busy {
                    mark: s("exec:box:ab"),
                    until: 7,
                }),
                done: None,
            },
            Request::Touch {
                id: s("box"),
                busy: None,
                done: Some(s("exec:box:ab")),
            },
            Request::List { owner: s("user:a") },
            Request::SessionOpen {
                sid: s("s1"),
                subject: s("a"),
                version: s("2025-06-18"),
            },
            Request::SessionGet {
                sid: s("s1"),
                subject: s("a"),
            },
            Request::SessionDefault {
                sid: s("s1"),
                id: s("box"),
            },
            Request::SessionClose {
                sid: s("s1"),
                subject: s("a"),
            },
            Request::JobPut {
                job_id: s("job-1"),
                id: s("box"),
                deadline: i64::MAX,
            },
            Request::JobGet {
                job_id: s("job-1"),
                owner: s("user:a"),
            },
            Request::JobDone { job_id: s("job-1") },
            Request::TaskPut {
                task_id: s("job-1"),
                id: s("box"),
                owner: s("user:a"),
                deadline: 5,
                record: s("{}"),
                lease: Some(s("l")),
                ended_ms: None,
            },
            Request::TaskGet {
                task_id: s("job-1"),
                owner: s("user:a"),
                lease: true,
            },
        ]
    }

    #[test]
    fn every_request_round_trips_and_names_itself() {
        let mut names = std::collections::BTreeSet::new();
        for request in every_request() {
            let call = Call {
                team: "acme".into(),
                request,
            };
            let body = call.encode();
            assert_eq!(Call::decode(body.as_bytes()), Ok(call.clone()), "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["request"]["op"], call.request.name(), "{body}");
            names.insert(call.request.name());
        }
        assert_eq!(names.len(), 15, "every request has a name of its own");
    }

    #[test]
    fn bad_calls_are_refused_with_what_to_fix() {
        for (body, why) in [
            (r#"{"team":"t","request":{"op":"claim"}}"#, "missing field"),
            (
                r#"{"team":"t","request":{"op":"reboot","id":"x"}}"#,
                "unknown variant",
            ),
            (
                r#"{"team":"t","request":{"op":"forget","id":"x","extra":1}}"#,
                "unknown field",
            ),
            (
                r#"{"team":"t","request":{"op":"forget","id":"x"},"x":1}"#,
                "unknown field",
            ),
            (
                r#"{"team":"t","request":{"op":"forget","id":""}}"#,
                "without `id`",
            ),
            (
                r#"{"team":"t","request":{"op":"get","id":"x","owner":""}}"#,
                "without `owner`",
            ),
            (
                r#"{"request":{"op":"forget","id":"x"}}"#,
                "missing field `team`",
            ),
            (
                r#"{"team":"t","request":{"op":"job_put","job_id":"j","id":"x","deadline":"soon"}}"#,
                "invalid type",
            ),
            ("", "inventory request body"),
            ("[]", "inventory request body"),
        ] {
            let e = Call::decode(body.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(why), "{body}: {e}");
        }
    }

    /// Issue 46, item 8: a claim carries the caller's scopes, so the team's object can
    /// refuse a new permanent computer to a caller without `manage` before recording it
    /// (`shared::registry::Registry::claim`); a claim without them is not read as "every
    /// scope": it is refused.
    #[test]
    fn issue_46_a_claim_carries_the_callers_scopes_or_is_refused() {
        let body = r#"{"team":"t","request":{"op":"claim","id":"web","temporary":false,"owner":"user:a","stateless":true,"executor":"ex1"}}"#;
        let e = Call::decode(body.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("missing field `scope`"), "{e}");
        let body = body.replace(r#""executor":"ex1""#, r#""executor":"ex1","scope":"exec""#);
        let call = Call::decode(body.as_bytes()).unwrap();
        let Request::Claim {
            scope, temporary, ..
        } = &call.request
        else {
            panic!("{call:?}");
        };
        assert_eq!((scope.as_str(), *temporary), ("exec", Some(false)));
    }

    #[test]
    fn answers_read_the_shapes_the_object_writes() {
        let r: Record =
            serde_json::from_str(r#"{"id":"a","executor":"ex1","temporary":true}"#).unwrap();
        assert!(!r.new);
        let l: Listed = serde_json::from_str(
            r#"{"computers":[{"id":"a","executor":"fly","temporary":false,"new":false}]}"#,
        )
        .unwrap();
        assert_eq!(l.computers[0].executor, "fly");
        let s: Session =
            serde_json::from_str(r#"{"version":"2025-03-26","default_id":null}"#).unwrap();
        assert_eq!(s.default_id, None);
        assert_eq!(serde_json::to_string(&Done::OK).unwrap(), r#"{"ok":true}"#);
        let t: TaskFound = serde_json::from_str(
            r#"{"id":"a","owner":"user:x","deadline":1,"record":"{}","place":null,"lease":"z"}"#,
        )
        .unwrap();
        assert_eq!((t.place, t.lease.as_deref()), (None, Some("z")));
    }

    /// The names each request needs, by its `op`.
    fn needed(op: &str) -> &'static [&'static str] {
        match op {
            "claim" => &["id", "owner", "executor"],
            "claim_default" => &["owner", "fresh", "executor"],
            "get" => &["id", "owner"],
            "forget" | "touch" => &["id"],
            "list" => &["owner"],
            "session_open" => &["sid", "subject", "version"],
            "session_get" | "session_close" => &["sid", "subject"],
            "session_default" => &["sid", "id"],
            "job_put" => &["job_id", "id"],
            "job_get" => &["job_id", "owner"],
            "job_done" => &["job_id"],
            "task_put" => &["task_id", "id", "owner", "record"],
            "task_get" => &["task_id", "owner"],
            other => panic!("a request this test does not know: {other}"),
        }
    }

    #[test]
    fn every_needed_name_left_empty_is_named_in_the_refusal() {
        for request in every_request() {
            let call = Call {
                team: "acme".into(),
                request,
            };
            let body: serde_json::Value = serde_json::from_str(&call.encode()).unwrap();
            let op = call.request.name();
            for &field in needed(op) {
                let mut blank = body.clone();
                assert!(blank["request"].get(field).is_some(), "{op} has {field}");
                blank["request"][field] = serde_json::json!("");
                let e = Call::decode(blank.to_string().as_bytes()).unwrap_err();
                assert_eq!(e, BadCall::Missing(field), "{op}: {field}");
                assert_eq!(
                    e.to_string(),
                    format!("inventory request without `{field}`")
                );
            }
        }
    }

    #[test]
    fn a_claim_with_an_empty_scope_is_not_refused_as_a_call() {
        // An empty scope is a caller without scopes: the object refuses what needs one
        // (a new permanent computer), not the call.
        let claim = Request::Claim {
            id: "box".into(),
            temporary: Some(true),
            owner: "user:a".into(),
            stateless: false,
            executor: "ex1".into(),
            scope: String::new(),
        };
        assert_eq!(claim.check(), Ok(()));
    }

    #[test]
    fn a_touch_without_a_busy_mark_is_sent_without_the_keys() {
        let call = Call {
            team: "acme".into(),
            request: Request::Touch {
                id: "box".into(),
                busy: None,
                done: None,
            },
        };
        assert_eq!(
            call.encode(),
            r#"{"team":"acme","request":{"op":"touch","id":"box"}}"#
        );
        let busy = r#"{"team":"acme","request":{"op":"touch","id":"box","busy":{"mark":"exec:box:1","until":9,"why":"x"}}}"#;
        let e = Call::decode(busy.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("unknown field `why`"), "{e}");
    }

    #[test]
    fn optional_fields_of_a_claim_and_a_task_may_be_left_out() {
        let body = r#"{"team":"t","request":{"op":"claim","id":"web","owner":"user:a","stateless":false,"executor":"ex1","scope":""}}"#;
        let call = Call::decode(body.as_bytes()).unwrap();
        assert!(
            matches!(
                call.request,
                Request::Claim {
                    temporary: None,
                    ..
                }
            ),
            "{call:?}"
        );
        let body = r#"{"team":"t","request":{"op":"task_put","task_id":"j","id":"web","owner":"user:a","deadline":-1,"record":"{}"}}"#;
        let call = Call::decode(body.as_bytes()).unwrap();
        assert!(
            matches!(
                call.request,
                Request::TaskPut {
                    lease: None,
                    ended_ms: None,
                    deadline: -1,
                    ..
                }
            ),
            "{call:?}"
        );
    }

    #[test]
    fn a_record_reads_fields_a_newer_object_adds() {
        let r: Record = serde_json::from_str(
            r#"{"id":"a","executor":"ex1","temporary":false,"new":true,"region":"eu"}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            Record {
                id: "a".into(),
                executor: "ex1".into(),
                temporary: false,
                new: true
            }
        );
    }
}

//! The controller without a daemon: [`SessionHost`]s over the in-memory backend
//! ([`crate::fake`]), as tables of calls and the answers they must get.
//!
//! A step is `(who, tool, arguments, answer)`:
//! - `who` names a caller: `a`, `b` (legacy sessions, each its own owner), `p`, `q`
//!   (stateless principals), `t1:x`, `t2:x` (the gateway's teams `t1` and `t2` through
//!   the executor API, with a token of both scopes; stateless, so a team's callers are
//!   one owner), `t1:e` (team `t1` again, with a token of scope `exec` alone);
//! - the answer lists the keys that must be there: a value must be equal, `"*"` only
//!   present, `"~text"` a string containing `text`, `"$name"` equal to what `$name` was
//!   bound to (bound at its first use); `"!key": null` says `key` must be absent. An
//!   error answer is `{"error": …}` (SPEC §3.5's failure shape);
//! - strings `"$name"` in the arguments are replaced by what they were bound to.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use shared::capabilities::{Capabilities, Capability};
use shared::catalogue::{Groups, ToolNames};
use shared::mcp::{CallContext, Era, ToolHost};
use shared::op::parse_tool_call;
use shared::validate::ValidationError;

use super::{Computers, SessionHost};
use crate::fake::Fake;

mod snapshots;

type Step<'a> = (&'a str, &'a str, Value, Value);

struct World {
    computers: Arc<Computers>,
    fake: Fake,
    hosts: HashMap<String, SessionHost>,
    bound: HashMap<String, Value>,
    names: ToolNames,
}

impl World {
    fn new() -> Self {
        Self::with(Fake::default())
    }

    fn with(fake: Fake) -> Self {
        Self::with_network(fake, shared::egress::Policy::All)
    }

    /// A world whose server's network policy is `network` (SPEC §3.11).
    fn with_network(fake: Fake, network: shared::egress::Policy) -> Self {
        Self {
            computers: Computers::over_fake_with(fake.clone(), 64, network),
            fake,
            hosts: HashMap::new(),
            bound: HashMap::new(),
            names: ToolNames::with_groups("terminal_execute", Groups::ALL),
        }
    }

    fn host(&mut self, who: &str) -> SessionHost {
        let computers = self.computers.clone();
        self.hosts
            .entry(who.to_owned())
            .or_insert_with(|| match who.split_once(':') {
                Some((team, "e")) => SessionHost::for_team(computers, team, "", "exec"),
                Some((team, _)) => SessionHost::for_team(computers, team, "", "exec manage"),
                None if who.starts_with(['p', 'q']) => {
                    SessionHost::new(computers, format!("user:{who}"), true)
                }
                None => SessionHost::new(computers, format!("session:{who}"), false),
            })
            .clone()
    }

    fn substitute(&self, v: Value) -> Value {
        match v {
            Value::String(s) if s.starts_with('$') => self
                .bound
                .get(&s)
                .cloned()
                .unwrap_or_else(|| panic!("{s} is not bound yet")),
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| (k, self.substitute(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// One call's structured answer (`{"error": …}` for a refusal of any kind).
    async fn call(&mut self, who: &str, tool: &str, args: Value) -> Value {
        let args = self.substitute(args);
        let host = self.host(who);
        let call = match parse_tool_call(&self.names, tool, Some(&args)) {
            Ok(c) => c,
            Err(ValidationError::Invalid(m) | ValidationError::UnknownTool(m)) => {
                return json!({ "error": m });
            }
        };
        let ctx = CallContext {
            request_id: shared::mcp::RequestId::number(1),
            progress_token: None,
            era: Era::Modern,
        };
        let result = host.call_tool(call, &ctx).await;
        let v = result.structured_content.unwrap_or(Value::Null);
        assert_eq!(
            result.is_error == Some(true),
            v.get("error").is_some(),
            "an answer is an error exactly when it says so: {v}"
        );
        v
    }

    fn check(&mut self, step: usize, got: &Value, want: &Value) {
        let Value::Object(want) = want else {
            panic!("step {step}: an answer is an object of keys");
        };
        for (key, w) in want {
            if let Some(absent) = key.strip_prefix('!') {
                assert!(got.get(absent).is_none(), "step {step}: {absent} in {got}");
                continue;
            }
            let g = got
                .get(key)
                .unwrap_or_else(|| panic!("step {step}: no {key} in {got}"));
            match w.as_str() {
                Some("*") => {}
                Some(text) if text.starts_with('~') => {
                    let s = g.as_str().unwrap_or_default();
                    assert!(
                        s.contains(&text[1..]),
                        "step {step}: {key} = {s:?}, wants {text:?}"
                    );
                }
                Some(name) if name.starts_with('$') => match self.bound.get(name) {
                    Some(b) => assert_eq!(g, b, "step {step}: {key} is not {name}"),
                    None => {
                        self.bound.insert(name.to_owned(), g.clone());
                    }
                },
                _ => assert_eq!(g, w, "step {step}: {key} in {got}"),
            }
        }
    }

    async fn run(&mut self, steps: &[Step<'_>]) {
        for (i, (who, tool, args, want)) in steps.iter().enumerate() {
            let got = self.call(who, tool, args.clone()).await;
            self.check(i, &got, want);
        }
    }
}

const EXEC: &str = "terminal_execute";

#[tokio::test]
async fn a_session_keeps_its_default_and_never_reaches_anothers() {
    let mut w = World::new();
    w.run(&[
        // The first call without an id makes the session's temporary default...
        (
            "a",
            EXEC,
            json!({"command": "echo hi"}),
            json!({"computer_id": "$a1", "temporary": true, "stdout": "hi\n", "exit_code": 0}),
        ),
        // ...and every later one uses it.
        (
            "a",
            EXEC,
            json!({"command": "hostname"}),
            json!({"computer_id": "$a1"}),
        ),
        // Another session gets its own.
        (
            "b",
            EXEC,
            json!({"command": "echo b"}),
            json!({"computer_id": "$b1", "temporary": true}),
        ),
        // A session's temporary is nobody else's, by name or in a list.
        (
            "b",
            EXEC,
            json!({"command": "echo x", "computer_id": "$a1"}),
            json!({"error": "~is taken by a temporary computer of another session"}),
        ),
        (
            "b",
            "computer_restart",
            json!({"computer_id": "$a1"}),
            json!({"error": "~does not exist"}),
        ),
        (
            "b",
            "computer_delete",
            json!({"computer_id": "$a1"}),
            json!({"error": "~does not exist"}),
        ),
        ("a", "computer_list", json!({}), json!({"count": 1})),
        // The other `temporary` value is an error, not a switch.
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "$a1", "temporary": false}),
            json!({"error": "~you asked for temporary=false"}),
        ),
        // A named permanent computer is shared by id.
        (
            "a",
            "computer_create",
            json!({"computer_id": "shared-box", "temporary": false}),
            json!({"ok": true, "computer_id": "shared-box", "sandbox_id": "*", "temporary": false}),
        ),
        (
            "b",
            EXEC,
            json!({"command": "hostname", "computer_id": "shared-box"}),
            json!({"stdout": "shared-box\n", "temporary": false}),
        ),
        ("b", "computer_list", json!({}), json!({"count": 2})),
        // ...and naming it never changed b's default.
        (
            "b",
            EXEC,
            json!({"command": "hostname"}),
            json!({"computer_id": "$b1"}),
        ),
    ])
    .await;
    assert_eq!(w.fake.keys().len(), 3);
}

#[tokio::test]
async fn temporary_false_without_an_id_is_a_fresh_permanent_that_is_no_default() {
    let mut w = World::new();
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo", "temporary": false}),
            json!({"computer_id": "$p1", "temporary": false}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo", "temporary": false}),
            json!({"computer_id": "*", "temporary": false}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$t1", "temporary": true}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$t1"}),
        ),
    ])
    .await;
    let ids: Vec<Value> = ["$p1", "$t1"].iter().map(|n| w.bound[*n].clone()).collect();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(w.fake.keys().len(), 3, "two permanents and the default");
}

#[tokio::test]
async fn lifecycle_answers_have_their_shapes_and_delete_clears_the_default() {
    let mut w = World::new();
    w.run(&[
        (
            "a",
            "computer_create",
            json!({}),
            json!({"ok": true, "computer_id": "$c", "sandbox_id": "*", "temporary": true}),
        ),
        (
            "a",
            "computer_restart",
            json!({"computer_id": "$c"}),
            json!({"ok": true, "computer_id": "$c", "temporary": true}),
        ),
        (
            "a",
            "computer_factory_reset",
            json!({"computer_id": "$c"}),
            json!({"ok": true, "computer_id": "$c", "temporary": true}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$d"}),
        ),
        (
            "a",
            "computer_delete",
            json!({"computer_id": "$d"}),
            json!({"ok": true, "computer_id": "$d", "deleted": true, "!sandbox_id": null}),
        ),
        (
            "a",
            "computer_delete",
            json!({"computer_id": "$d"}),
            json!({"error": "~does not exist"}),
        ),
        // The default went with it: the next call makes a new one.
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$e"}),
        ),
        (
            "a",
            "computer_restart",
            json!({"computer_id": "no-such"}),
            json!({"error": "~does not exist"}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "Bad_Id"}),
            json!({"error": "*"}),
        ),
    ])
    .await;
    assert_ne!(w.bound["$d"], w.bound["$e"]);
    assert!(w.fake.keys().len() == 2, "{:?}", w.fake.keys());
}

#[tokio::test]
async fn a_closed_session_takes_its_temporaries_and_leaves_permanents() {
    let mut w = World::new();
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$t"}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "keep", "temporary": false}),
            json!({"temporary": false}),
        ),
        (
            "b",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$u"}),
        ),
    ])
    .await;
    w.host("a").close().await;
    let keys = w.fake.keys();
    let u = w.bound["$u"].as_str().unwrap_or_default().to_owned();
    assert_eq!(keys, {
        let mut k = vec!["keep".to_owned(), u];
        k.sort();
        k
    });
    // The name is free again, for anyone.
    let t = w.bound["$t"].clone();
    w.run(&[(
        "b",
        EXEC,
        json!({"command": "echo", "computer_id": t}),
        json!({"temporary": true}),
    )])
    .await;
}

#[tokio::test]
async fn stateless_principals_own_their_temporaries() {
    let mut w = World::new();
    w.run(&[
        (
            "p",
            EXEC,
            json!({"command": "echo", "computer_id": "mine"}),
            json!({"temporary": true}),
        ),
        (
            "q",
            EXEC,
            json!({"command": "echo", "computer_id": "mine"}),
            json!({"error": "~is taken by a temporary computer of another session"}),
        ),
        ("q", "computer_list", json!({}), json!({"count": 0})),
        ("p", "computer_list", json!({}), json!({"count": 1})),
    ])
    .await;
}

#[tokio::test]
async fn teams_never_see_each_other_nor_a_local_servers_computers() {
    let mut w = World::new();
    w.run(&[
        (
            "t1:x",
            "computer_create",
            json!({"computer_id": "box", "temporary": false}),
            json!({"computer_id": "box", "temporary": false}),
        ),
        // Team 2's "box" is another computer, under another backend key.
        (
            "t2:x",
            "computer_create",
            json!({"computer_id": "box", "temporary": false}),
            json!({"computer_id": "box", "temporary": false}),
        ),
        ("t1:x", "computer_list", json!({}), json!({"count": 1})),
        ("t2:x", "computer_list", json!({}), json!({"count": 1})),
        // The local server's callers see none of them, and the name is theirs to take.
        ("a", "computer_list", json!({}), json!({"count": 0})),
        (
            "a",
            EXEC,
            json!({"command": "hostname", "computer_id": "box", "temporary": false}),
            json!({"stdout": "box\n"}),
        ),
        (
            "t1:x",
            EXEC,
            json!({"command": "echo", "computer_id": "box"}),
            json!({"exit_code": 0}),
        ),
    ])
    .await;
    let keys = w.fake.keys();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.contains(&"box".to_owned()));
    // Each team's key carries its prefix, and the listed ids are the caller's.
    assert!(
        keys.iter()
            .filter(|k| k.ends_with("-box") && k.starts_with('g'))
            .count()
            == 2
    );
}

#[tokio::test]
async fn computers_made_elsewhere_are_adopted_or_refused() {
    let fake = Fake::default();
    // A permanent computer of an earlier server, stopped: attached and started.
    fake.plant("old-box", false, None, None);
    // A temporary of another (live or dead) server: never ours to take.
    fake.plant("their-tmp", true, Some("1-2"), None);
    // A team's computer, seen by a local server: taken.
    fake.plant("gffff-box", false, None, Some("t9"));
    let mut w = World::with(fake);
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "hostname", "computer_id": "old-box"}),
            json!({"stdout": "old-box\n", "temporary": false}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "their-tmp"}),
            json!({"error": "*"}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "gffff-box"}),
            json!({"error": "~is taken by a computer that is not yours"}),
        ),
    ])
    .await;
    let calls = w.fake.take_calls();
    assert!(calls.contains(&"start old-box".to_owned()), "{calls:?}");
    assert!(
        !calls
            .iter()
            .any(|c| c.ends_with("their-tmp") && !c.starts_with("create")),
        "{calls:?}"
    );
}

#[tokio::test]
async fn a_backend_without_a_capability_refuses_before_anything_is_made() {
    let fake = Fake::new(Capabilities::NONE.with(Capability::Files));
    let mut w = World::with(fake);
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo", "yield_ms": 0}),
            json!({"error": "~the go_busybox backend cannot keep commands running as jobs"}),
        ),
        (
            "a",
            "terminal_job",
            json!({"job_id": "job-1", "computer_id": "x"}),
            json!({"error": "~cannot keep commands running as jobs"}),
        ),
        ("a", "computer_list", json!({}), json!({"count": 0})),
        // Without `yield_ms` the command runs in the foreground as ever.
        (
            "a",
            EXEC,
            json!({"command": "echo fg"}),
            json!({"stdout": "fg\n"}),
        ),
        (
            "a",
            "computer_file_write",
            json!({"path": "/f", "content": "x"}),
            json!({"size": 1}),
        ),
    ])
    .await;
    let fake = Fake::new(Capabilities::NONE.with(Capability::Jobs));
    let mut w = World::with(fake);
    w.run(&[
        (
            "a",
            "computer_file_read",
            json!({"path": "/f"}),
            json!({"error": "~cannot read and write files through the file tools"}),
        ),
        ("a", "computer_list", json!({}), json!({"count": 0})),
    ])
    .await;
    assert!(w.fake.take_calls().is_empty());
}

#[tokio::test]
async fn jobs_and_files_go_through_the_computer_the_call_names() {
    let mut w = World::new();
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo started", "yield_ms": 0}),
            json!({"computer_id": "$c", "exit_code": 0, "stdout": "started\n"}),
        ),
        (
            "a",
            "computer_file_write",
            json!({"path": "/notes", "content": "one\n"}),
            json!({"computer_id": "$c", "size": 4}),
        ),
        (
            "a",
            "computer_file_write",
            json!({"path": "/notes", "content": "two\n", "append": true}),
            json!({"size": 8}),
        ),
        (
            "a",
            "computer_file_read",
            json!({"path": "/notes"}),
            json!({"computer_id": "$c", "content": "one\ntwo\n"}),
        ),
        (
            "a",
            "computer_file_edit",
            json!({"path": "/notes", "old_text": "two", "new_text": "2"}),
            json!({"replacements": 1}),
        ),
        (
            "a",
            "computer_file_read",
            json!({"path": "/notes"}),
            json!({"content": "one\n2\n"}),
        ),
        (
            "a",
            "computer_file_read",
            json!({"path": "/nothing"}),
            json!({"error": "*"}),
        ),
        // Another session reaches neither a's files nor its computer.
        (
            "b",
            "computer_file_read",
            json!({"path": "/notes", "computer_id": "$c"}),
            json!({"error": "~another session"}),
        ),
    ])
    .await;
}

#[tokio::test]
async fn a_backend_failure_is_an_error_answer_and_the_computer_stays() {
    let mut w = World::new();
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$c"}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "fail"}),
            json!({"error": "~the engine refused"}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "exit 3"}),
            json!({"computer_id": "$c", "exit_code": 3}),
        ),
    ])
    .await;
}

#[tokio::test]
async fn issue_45_a_stateless_principal_keeps_its_default_and_results_say_created() {
    let mut w = World::new();
    w.run(&[
        // Without a session the default is the principal's: every request finds it.
        (
            "p",
            EXEC,
            json!({"command": "echo one"}),
            json!({"computer_id": "$p1", "temporary": true, "created": true}),
        ),
        (
            "p",
            EXEC,
            json!({"command": "echo two"}),
            json!({"computer_id": "$p1", "!created": null}),
        ),
        (
            "p",
            "computer_file_write",
            json!({"path": "/f", "content": "x"}),
            json!({"computer_id": "$p1", "!created": null}),
        ),
        // Another principal has its own.
        (
            "q",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$q1", "created": true}),
        ),
        (
            "q",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$q1"}),
        ),
        // A deleted default is replaced by a new one, which says so.
        (
            "p",
            "computer_delete",
            json!({"computer_id": "$p1"}),
            json!({"deleted": true}),
        ),
        (
            "p",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$p2", "created": true}),
        ),
        (
            "p",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$p2", "!created": null}),
        ),
        // A session's first call says it made its computer too; a named existing one not.
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$a1", "created": true}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "named", "temporary": false}),
            json!({"created": true}),
        ),
        (
            "b",
            EXEC,
            json!({"command": "echo", "computer_id": "named"}),
            json!({"!created": null}),
        ),
        (
            "a",
            "computer_file_write",
            json!({"path": "/g", "content": "y", "computer_id": "fresh"}),
            json!({"computer_id": "fresh", "created": true}),
        ),
    ])
    .await;
    assert_ne!(w.bound["$p1"], w.bound["$q1"]);
    assert_ne!(w.bound["$p1"], w.bound["$p2"]);
    // Every request of a principal is a new host over the same controller.
    w.hosts.remove("p");
    w.run(&[(
        "p",
        EXEC,
        json!({"command": "echo"}),
        json!({"computer_id": "$p2"}),
    )])
    .await;
}

#[tokio::test]
async fn a_stateless_default_that_idled_out_is_replaced() {
    let mut w = World::new();
    w.run(&[(
        "p",
        EXEC,
        json!({"command": "echo"}),
        json!({"computer_id": "$p1"}),
    )])
    .await;
    // Its owner's temporaries go (as the idle sweep does).
    w.computers.release_owner("user:p").await;
    w.run(&[(
        "p",
        EXEC,
        json!({"command": "echo"}),
        json!({"computer_id": "$p2", "created": true}),
    )])
    .await;
    assert_ne!(w.bound["$p1"], w.bound["$p2"]);
}

#[tokio::test]
async fn issue_46_computers_per_principal_are_capped_on_every_path_that_creates() {
    let mut w = World::new();
    w.computers = Computers::over_fake_capped(w.fake.clone(), 3);
    // Another live server's temporary on the same host is not this principal's.
    w.fake.plant("theirs", true, Some("other-instance"), None);
    let refused = json!({"error": "~already has 3 computers, the quota of --max-computers-per-principal; delete computers"});
    w.run(&[
        // Exec, a file write and computer_create on new ids each make one.
        (
            "a",
            EXEC,
            json!({"command": "echo 1", "computer_id": "one"}),
            json!({"exit_code": 0, "created": true}),
        ),
        (
            "a",
            "computer_file_write",
            json!({"computer_id": "two", "path": "/f", "content": "x"}),
            json!({"size": 1}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "three", "temporary": false}),
            json!({"ok": true}),
        ),
        // The fourth is refused on every path, for every caller of the principal.
        (
            "a",
            EXEC,
            json!({"command": "echo 4", "computer_id": "four"}),
            refused.clone(),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo 4", "yield_ms": 0}),
            refused.clone(),
        ),
        (
            "a",
            "computer_file_write",
            json!({"computer_id": "four", "path": "/f", "content": "x"}),
            refused.clone(),
        ),
        (
            "b",
            "computer_create",
            json!({"computer_id": "four", "temporary": false}),
            refused.clone(),
        ),
        (
            "p",
            EXEC,
            json!({"command": "echo 4", "computer_id": "four"}),
            refused.clone(),
        ),
        // Its existing computers keep working, also a permanent one from another caller.
        (
            "a",
            EXEC,
            json!({"command": "echo again", "computer_id": "one"}),
            json!({"stdout": "again\n"}),
        ),
        (
            "b",
            EXEC,
            json!({"command": "echo shared", "computer_id": "three"}),
            json!({"stdout": "shared\n"}),
        ),
        // A team on an executor is its own principal.
        (
            "t1:x",
            "computer_create",
            json!({"computer_id": "box", "temporary": false}),
            json!({"ok": true}),
        ),
        // Deleting one makes room.
        (
            "a",
            "computer_delete",
            json!({"computer_id": "three"}),
            json!({"deleted": true}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo 4", "computer_id": "four"}),
            json!({"stdout": "4\n", "created": true}),
        ),
        (
            "b",
            EXEC,
            json!({"command": "echo 5", "computer_id": "five"}),
            refused,
        ),
    ])
    .await;
    let keys = w.fake.keys();
    assert_eq!(keys.len(), 5, "a refusal made nothing: {keys:?}");
    assert!(!keys.contains(&"five".to_owned()), "{keys:?}");
}

/// Issue 46, item 8: through the executor, a token with `exec` alone makes temporaries on
/// every path but no permanent computer, whatever the path (exec, a job, a file write,
/// `computer_create`): the refusal says what to do, and nothing is made. It uses a
/// permanent computer a token with `manage` made. A local server's callers have no scopes.
#[tokio::test]
async fn issue_46_an_exec_only_token_makes_no_permanent_computer() {
    let mut w = World::new();
    let refused = json!({"error": "~creating a permanent computer needs the `manage` scope (this token has \"exec\"): use an existing computer, omit temporary:false"});
    w.run(&[
        (
            "t1:e",
            EXEC,
            json!({"command": "echo", "computer_id": "web", "temporary": false}),
            refused.clone(),
        ),
        (
            "t1:e",
            EXEC,
            json!({"command": "echo", "computer_id": "web", "temporary": false, "yield_ms": 0}),
            refused.clone(),
        ),
        (
            "t1:e",
            EXEC,
            json!({"command": "echo", "temporary": false}),
            refused.clone(),
        ),
        (
            "t1:e",
            "computer_file_write",
            json!({"computer_id": "web", "temporary": false, "path": "/f", "content": "x"}),
            refused.clone(),
        ),
        (
            "t1:e",
            "computer_create",
            json!({"computer_id": "web", "temporary": false}),
            refused.clone(),
        ),
        ("t1:x", "computer_list", json!({}), json!({"count": 0})),
    ])
    .await;
    assert!(w.fake.keys().is_empty(), "{:?}", w.fake.keys());
    w.run(&[
        // A temporary is the caller's scratch: `exec` makes it.
        (
            "t1:e",
            EXEC,
            json!({"command": "echo t", "computer_id": "scratch"}),
            json!({"temporary": true, "created": true}),
        ),
        (
            "t1:e",
            "computer_file_write",
            json!({"computer_id": "notes", "path": "/f", "content": "x"}),
            json!({"size": 1}),
        ),
        // With `manage` the permanent one is made; then `exec` uses it, by any path.
        (
            "t1:x",
            EXEC,
            json!({"command": "echo", "computer_id": "web", "temporary": false}),
            json!({"temporary": false, "created": true}),
        ),
        (
            "t1:e",
            EXEC,
            json!({"command": "echo used", "computer_id": "web", "temporary": false}),
            json!({"stdout": "used\n", "temporary": false, "!created": null}),
        ),
        (
            "t1:e",
            "computer_file_write",
            json!({"computer_id": "web", "temporary": false, "path": "/f", "content": "x"}),
            json!({"size": 1}),
        ),
        // A local server's caller has no scopes to lack.
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "mine", "temporary": false}),
            json!({"temporary": false, "created": true}),
        ),
    ])
    .await;
    assert_eq!(w.fake.keys().len(), 4, "{:?}", w.fake.keys());
}

/// The `network` of each computer in `who`'s list, by id.
async fn networks(w: &mut World, who: &str) -> Vec<(String, Value)> {
    let v = w.call(who, "computer_list", json!({})).await;
    v["computers"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|c| {
            (
                c["computer_id"].as_str().unwrap().to_owned(),
                c["network"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn issue_38_an_agent_narrows_the_network_when_a_computer_is_made() {
    let mut w = World::new();
    w.run(&[
        (
            "a",
            "computer_create",
            json!({"computer_id": "offline", "network": "none"}),
            json!({"computer_id": "offline", "temporary": true}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "plain"}),
            json!({"computer_id": "plain"}),
        ),
        // A call's first exec narrows it too.
        (
            "a",
            EXEC,
            json!({"command": "echo hi", "computer_id": "pypi", "network": {"allow": ["pypi.org", "*.pythonhosted.org"]}}),
            json!({"stdout": "hi\n", "created": true}),
        ),
        // The same policy again is fine (the order of an allow list aside)...
        (
            "a",
            EXEC,
            json!({"command": "echo again", "computer_id": "pypi", "network": {"allow": ["*.pythonhosted.org", "pypi.org"]}}),
            json!({"stdout": "again\n", "!created": null}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "offline", "network": "none"}),
            json!({"computer_id": "offline"}),
        ),
        // ...another one is an error: `network` applies only when a computer is made.
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "offline", "network": {"allow": ["pypi.org"]}}),
            json!({"error": "~computer \"offline\" already exists with network \"none\"; `network` applies only when a computer is made"}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "plain", "network": "none"}),
            json!({"error": "~already exists with network \"all\""}),
        ),
        // A factory reset keeps the computer's policy.
        (
            "a",
            "computer_factory_reset",
            json!({"computer_id": "offline"}),
            json!({"computer_id": "offline"}),
        ),
    ])
    .await;
    assert_eq!(
        networks(&mut w, "a").await,
        [
            ("offline".to_owned(), json!("none")),
            ("plain".to_owned(), json!("all")),
            (
                "pypi".to_owned(),
                json!({"allow": ["pypi.org", "*.pythonhosted.org"]})
            ),
        ]
    );
    // A bad `network` is refused before anything runs.
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "bad", "network": "all"}),
            json!({"error": "~`network` must be \"none\" or {\"allow\": [rules]}"}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "bad", "network": {"allow": ["https://pypi.org/"]}}),
            json!({"error": "~network rule \"https://pypi.org/\" is not a host name"}),
        ),
    ])
    .await;
    assert_eq!(w.fake.keys().len(), 3, "{:?}", w.fake.keys());
}

#[tokio::test]
async fn issue_38_a_network_wider_than_the_servers_is_refused_and_nothing_is_made() {
    let server = shared::egress::Policy::allow(["pypi.org", "*.npmjs.org"]).unwrap();
    let mut w = World::with_network(Fake::default(), server);
    w.run(&[
        (
            "a",
            "computer_create",
            json!({"computer_id": "wide", "network": {"allow": ["pypi.org", "example.com"]}}),
            json!({"error": "~network rule example.com lies outside this server's allow list (pypi.org, *.npmjs.org)"}),
        ),
        (
            "a",
            EXEC,
            json!({"command": "echo", "network": {"allow": ["10.0.0.0/8"]}}),
            json!({"error": "~an operator can add --egress-allow 10.0.0.0/8"}),
        ),
        ("a", "computer_list", json!({}), json!({"count": 0})),
    ])
    .await;
    assert!(w.fake.keys().is_empty(), "{:?}", w.fake.keys());
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo", "computer_id": "npm", "network": {"allow": ["registry.npmjs.org"]}}),
            json!({"created": true}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "off", "network": "none"}),
            json!({"computer_id": "off"}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "default"}),
            json!({"computer_id": "default"}),
        ),
    ])
    .await;
    assert_eq!(
        networks(&mut w, "a").await,
        [
            (
                "default".to_owned(),
                json!({"allow": ["pypi.org", "*.npmjs.org"]})
            ),
            ("npm".to_owned(), json!({"allow": ["registry.npmjs.org"]})),
            ("off".to_owned(), json!("none")),
        ]
    );
    // A server without network gives none, and nothing more.
    let mut w = World::with_network(Fake::default(), shared::egress::Policy::None);
    w.run(&[
        (
            "a",
            "computer_create",
            json!({"computer_id": "x", "network": {"allow": ["pypi.org"]}}),
            json!({"error": "~this server allows no network"}),
        ),
        (
            "a",
            "computer_create",
            json!({"computer_id": "y", "network": "none"}),
            json!({"computer_id": "y"}),
        ),
    ])
    .await;
    assert_eq!(w.fake.keys(), ["y"]);
    // A computer whose backend records no policy (made before the label) has the server's.
    let fake = Fake::default();
    fake.plant("old", false, None, None);
    let mut w = World::with_network(fake, shared::egress::Policy::None);
    assert_eq!(
        networks(&mut w, "a").await,
        [("old".to_owned(), json!("none"))]
    );
}

//! Data-driven tests of the registry: each case is a script of steps over one
//! [`MemoryStore`], every step with the answer it must give.
//!
//! A step is `verb args... [@ms] => answer`. Verbs:
//! - `claim ID OWNER REQ [stateless] [scope=WORDS]`: `new temporary|permanent`,
//!   `known ...`, or the error; `scope=` gives the caller's scopes joined by `+` (`scope=`
//!   alone: none), as at the gateway; without it the caller has no scopes to check;
//! - `adopt ID OWNER TEMP REQ`: attach to a computer found at the backend;
//! - `see ID OWNER`: `yes`, or `unknown`; `may ID TEMP OWNER`: `yes|no`;
//! - `list OWNER`, `owned OWNER`, `idle TIMEOUT_SECS`, `temps`: ids, space-separated, or `-`;
//! - `start ID`, `end ID`, `touch ID`, `forget ID`, `ran ID`: `ok`; `history ID`: a count;
//! - `load`: `computers running`;
//! - `target ID|- REQ DEFAULT|-`: `named ID`, `default ID`, `new-default`, `fresh`, and the
//!   `temporary` it attaches with.
//!
//! `REQ`/`TEMP` are `t`, `f` or `-` (not given). Errors read `not-yours`, `mismatch`,
//! `unknown` or `forbidden`.

use super::*;

fn flag(s: &str) -> Option<bool> {
    match s {
        "t" => Some(true),
        "f" => Some(false),
        "-" => None,
        other => panic!("flag {other:?}: use t, f or -"),
    }
}

fn kind(temporary: bool) -> &'static str {
    if temporary { "temporary" } else { "permanent" }
}

fn ids(entries: Vec<Entry>) -> String {
    if entries.is_empty() {
        return "-".into();
    }
    entries
        .iter()
        .map(|e| e.id.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn error(e: RegistryError<Infallible>) -> String {
    match e {
        RegistryError::Policy(LifecycleError::NotYours { .. }) => "not-yours".into(),
        RegistryError::Policy(LifecycleError::TemporaryMismatch { .. }) => "mismatch".into(),
        RegistryError::Unknown(_) => "unknown".into(),
        RegistryError::Forbidden(_) => "forbidden".into(),
        RegistryError::Store(never) => match never {},
    }
}

fn plain<T>(r: Result<T, Infallible>) -> T {
    let Ok(v) = r;
    v
}

fn step(reg: &mut Registry<MemoryStore>, line: &str) -> String {
    let (words, now) = match line.split_once(" @") {
        Some((w, t)) => (w, t.trim().parse::<u64>().expect("@ms")),
        None => (line, 0),
    };
    let w: Vec<&str> = words.split_whitespace().collect();
    let flat = |r: Result<String, RegistryError<Infallible>>| r.unwrap_or_else(error);
    let ok = |r: Result<(), Infallible>| {
        plain(r);
        "ok".to_owned()
    };
    match w.as_slice() {
        ["claim", id, owner, req, rest @ ..] => {
            let scope = rest
                .iter()
                .find_map(|w| w.strip_prefix("scope="))
                .map(|s| s.replace('+', " "));
            let c = Claimant {
                requested: flag(req),
                owner,
                stateless: rest.contains(&"stateless"),
                scope: scope.as_deref(),
            };
            flat(reg.claim(id, "here", &c, now).map(|(e, new)| {
                format!(
                    "{} {}",
                    if new { "new" } else { "known" },
                    kind(e.temporary)
                )
            }))
        }
        ["adopt", id, owner, temp, req] => {
            let c = Claimant {
                requested: flag(req),
                owner,
                stateless: false,
                scope: None,
            };
            let temporary = flag(temp).expect("adopt needs TEMP t or f");
            flat(
                reg.adopt(id, "here", temporary, &c, now)
                    .map(|e| kind(e.temporary).to_owned()),
            )
        }
        ["see", id, owner] => flat(reg.visible(id, owner).map(|_| "yes".into())),
        ["may", id, temp, owner] => {
            let temporary = flag(temp).expect("may needs TEMP t or f");
            if plain(reg.may_see(id, temporary, owner)) {
                "yes"
            } else {
                "no"
            }
            .into()
        }
        ["list", owner] => ids(plain(reg.list(owner))),
        ["owned", owner] => ids(plain(reg.owned_by(owner))),
        ["idle", secs] => ids(plain(reg.idle(now, secs.parse().expect("secs")))),
        ["temps"] => ids(plain(reg.temporaries())),
        ["start", id] => ok(reg.running(id, true, now)),
        ["end", id] => ok(reg.running(id, false, now)),
        ["touch", id] => ok(reg.touch(id, now)),
        ["forget", id] => ok(reg.forget(id)),
        ["retire", id] => ok(reg.retire(id)),
        ["ran", id] => ok(reg.ran(
            id,
            HistoryEntry {
                command: "true".into(),
                started_at: "2026-01-01T00:00:00.000Z".into(),
                exit_code: 0,
                duration_ms: 1,
                timed_out: false,
                truncated: false,
            },
        )),
        ["history", id] => reg.history(id).len().to_string(),
        ["load"] => {
            let (c, r) = plain(reg.load());
            format!("{c} {r}")
        }
        ["target", id, req, default] => {
            let id = (*id != "-").then_some(*id);
            let default = (*default != "-").then_some(*default);
            let t = Target::of(id, flag(req), default, || "fresh-id".into());
            let attach = match t.requested(flag(req)) {
                Some(true) => "t",
                Some(false) => "f",
                None => "-",
            };
            let what = match &t {
                Target::Named(id) => format!("named {id}"),
                Target::Default(id) => format!("default {id}"),
                Target::NewDefault(id) => {
                    assert_eq!(id, "fresh-id");
                    assert!(t.sets_default());
                    "new-default".into()
                }
                Target::Fresh(id) => {
                    assert_eq!(id, "fresh-id");
                    "fresh".into()
                }
            };
            assert!(!t.id().is_empty());
            format!("{what} {attach}")
        }
        _ => panic!("unknown step {line:?}"),
    }
}

/// (name, script): each line `step => answer`.
const CASES: &[(&str, &str)] = &[
    (
        "a new computer is temporary and private to its owner",
        "claim box s1 - => new temporary
         claim box s1 - => known temporary
         claim box s1 t => known temporary
         claim box s2 - => not-yours
         claim box s2 f => not-yours
         claim box s1 f => mismatch
         see box s1 => yes
         see box s2 => unknown
         list s1 => box
         list s2 => -",
    ),
    (
        "a permanent computer is shared by id",
        "claim web s1 f => new permanent
         claim web s2 - => known permanent
         claim web s2 f => known permanent
         claim web s2 t => mismatch
         see web s2 => yes
         list s3 => web
         owned s1 => -",
    ),
    (
        "lists are in id order and mix permanents with the caller's temporaries",
        "claim c s1 - => new temporary
         claim a s2 - => new temporary
         claim b s1 f => new permanent
         list s1 => b c
         list s2 => a b
         temps => a c",
    ),
    (
        "a session's end takes its temporaries, nothing else",
        "claim t1 s1 - => new temporary
         claim t2 s1 t => new temporary
         claim p s1 f => new permanent
         claim o s2 - => new temporary
         owned s1 => t1 t2
         forget t1 => ok
         forget t2 => ok
         list s1 => p
         list s2 => o p",
    ),
    (
        "stateless temporaries go when idle, never while a command runs",
        "claim x u1 - stateless @1000 => new temporary
         claim y u1 - stateless @1000 => new temporary
         claim s s1 - @1000 => new temporary
         claim p u1 f stateless @1000 => new permanent
         idle 300 @300999 => -
         idle 300 @301000 => x y
         start x @2000 => ok
         idle 300 @400000 => y
         load => 4 1
         end x @5000 => ok
         idle 300 @304999 => y
         idle 300 @305000 => x y
         touch y @310000 => ok
         idle 300 @400000 => x",
    ),
    (
        "found at the backend: a permanent is adopted, a temporary is nobody's",
        "adopt shared s1 f - => permanent
         see shared s2 => yes
         adopt left s1 t - => not-yours
         adopt left s1 t t => not-yours
         adopt perm s1 f t => mismatch
         see left s1 => unknown
         may left t s1 => no
         may other f s1 => yes",
    ),
    (
        "issue 46: a temporary whose removal failed is nobody's until it is gone",
        "claim box s1 - @1000 => new temporary
         claim p s1 f @1000 => new permanent
         retire box => ok
         claim box s1 - => not-yours
         claim box s2 - => not-yours
         claim box s2 t stateless => not-yours
         see box s1 => unknown
         see box s2 => unknown
         list s1 => p
         owned s1 => -
         idle 300 @300000 => box
         temps => box
         retire nowhere => ok
         temps => box
         forget box => ok
         claim box s2 - => new temporary",
    ),
    (
        "issue 46: a new permanent computer needs manage; a temporary, or using one, does not",
        "claim web u1 f stateless scope=exec => forbidden
         claim web u1 f stateless scope= => forbidden
         list u1 => -
         claim tmp u1 - stateless scope=exec => new temporary
         claim tmp2 u1 t stateless scope=exec => new temporary
         claim web u2 f stateless scope=exec+manage => new permanent
         claim web u1 f stateless scope=exec => known permanent
         claim web u1 - stateless scope=exec => known permanent
         claim other s1 f scope=manage => new permanent
         claim local s1 f => new permanent
         list u1 => local other tmp tmp2 web",
    ),
    (
        "history belongs to a known computer and goes with it",
        "ran nowhere => ok
         history nowhere => 0
         claim h s1 - => new temporary
         ran h => ok
         ran h => ok
         history h => 2
         forget h => ok
         history h => 0
         see h s1 => unknown
         claim h s2 - => new temporary",
    ),
    (
        "which computer a call names (SPEC 3.6)",
        "target box - - => named box -
         target box t d1 => named box t
         target box f d1 => named box f
         target - - - => new-default t
         target - t - => new-default t
         target - - d1 => default d1 -
         target - t d1 => default d1 -
         target - f d1 => fresh f
         target - f - => fresh f",
    ),
];

#[test]
fn registry_cases() {
    for (name, script) in CASES {
        let mut reg = Registry::new(MemoryStore::default());
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (step_text, want) = line
                .split_once(" => ")
                .unwrap_or_else(|| panic!("{name}: no `=>` in {line:?}"));
            let got = step(&mut reg, step_text);
            assert_eq!(got, want, "case {name:?}, step {step_text:?}");
        }
    }
}

#[test]
fn refusals_change_nothing() {
    let mut reg = Registry::new(MemoryStore::default());
    let s1 = Claimant {
        requested: None,
        owner: "s1",
        stateless: false,
        scope: None,
    };
    reg.claim("box", "here", &s1, 5).unwrap();
    let before = plain(reg.list("s1"));
    let s2 = Claimant { owner: "s2", ..s1 };
    assert!(reg.claim("box", "elsewhere", &s2, 9).is_err());
    let mismatch = Claimant {
        requested: Some(false),
        ..s1
    };
    assert!(reg.claim("box", "elsewhere", &mismatch, 9).is_err());
    assert_eq!(plain(reg.list("s1")), before);
    assert_eq!(before[0].place, "here");
    assert_eq!(before[0].last_used_ms, 5);
}

#[test]
fn the_unknown_message_says_what_to_do() {
    let reg = Registry::new(MemoryStore::default());
    let msg = reg.visible("gone", "s1").unwrap_err().to_string();
    assert!(
        msg.contains("\"gone\"") && msg.contains("computer_list"),
        "{msg}"
    );
}

#[test]
fn issue_46_a_tombstone_keeps_the_owner_its_removal_is_retried_for() {
    let mut reg = Registry::new(MemoryStore::default());
    let alice = Claimant {
        requested: None,
        owner: "user:alice",
        stateless: true,
        scope: None,
    };
    reg.claim("box", "exec-a", &alice, 5).unwrap();
    reg.retire("box").unwrap();
    reg.retire("box").unwrap();
    let [e] = reg.temporaries().unwrap().try_into().unwrap();
    assert_eq!(e.principal(), Some("user:alice"));
    assert!(reg.visible("box", "user:alice").is_err());
    assert!(reg.visible("box", "(removal pending)").is_err());
    assert_eq!(reg.idle(300_000, 300).unwrap().len(), 1);
}

/// Issue 46, item 8: the gateway's Team object claims through [`Registry::claim`]: a new
/// permanent computer for a caller without `manage` is refused with the scope's words and
/// leaves no record; the same id is then made by a caller with `manage`, and used by the
/// first one.
#[test]
fn issue_46_a_new_permanent_computer_needs_manage_and_records_nothing() {
    let mut reg = Registry::new(MemoryStore::default());
    let exec_only = Claimant {
        requested: Some(false),
        owner: "user:u",
        stateless: true,
        scope: Some("exec"),
    };
    let e = reg.claim("web", "exec-a", &exec_only, 5).unwrap_err();
    assert!(matches!(e, RegistryError::Forbidden(_)), "{e}");
    assert!(e.to_string().contains("needs the `manage` scope"), "{e}");
    assert_eq!(plain(reg.store.entries()), vec![]);
    let manager = Claimant {
        scope: Some("exec manage"),
        ..exec_only
    };
    let (made, new) = reg.claim("web", "exec-a", &manager, 6).unwrap();
    assert!(new && !made.temporary);
    let (used, new) = reg.claim("web", "exec-b", &exec_only, 7).unwrap();
    assert!(!new && used.place == "exec-a");
}

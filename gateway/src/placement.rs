//! Where the gateway puts new computers when several executors could take them: the
//! strategy `PLACEMENT` names, each executor's health and load as its `/v1/health` says
//! (cached a few seconds per isolate), backoff for executors that fail, and `draining`.
//!
//! Pure rules, tested natively: the Worker (`edge`) fetches the health documents and
//! feeds them in with [`Health::checked`] and [`Health::failed`], and asks [`Health::choose`].
//! A computer, once placed, stays where it was made (the team's Durable Object records the
//! place); this module decides only for new ones.

use std::collections::HashMap;

/// How long a health document is trusted (ms): the health-check interval.
pub const HEALTH_TTL_MS: u64 = 3_000;
/// The first backoff after a failure (ms); it doubles with each failure after it.
pub const BACKOFF_FIRST_MS: u64 = 1_000;
/// The longest backoff (ms): an executor that is down is asked again at least this often.
pub const BACKOFF_MAX_MS: u64 = 30_000;

/// How a computer's place is chosen among executors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// The executor with the least load per CPU (ties: the first in `EXECUTORS`).
    LeastLoaded,
    /// The first healthy executor that is not draining, in `EXECUTORS` order.
    First,
    /// Exactly this one executor.
    Pinned,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::LeastLoaded => "least-loaded",
            Strategy::First => "first",
            Strategy::Pinned => "pinned",
        }
    }
}

/// Where new computers go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A provider the Worker reaches itself (`fly`, `e2b`).
    Provider(String),
    /// One of these executors (in `EXECUTORS` order), by `strategy`.
    Executors {
        strategy: Strategy,
        pool: Vec<String>,
    },
}

impl Placement {
    /// The only place, when there is no choice to make.
    pub fn fixed(&self) -> Option<&str> {
        match self {
            Placement::Provider(p) => Some(p),
            Placement::Executors { pool, .. } if pool.len() == 1 => Some(&pool[0]),
            Placement::Executors { .. } => None,
        }
    }
}

/// Why `PLACEMENT` (with `EXECUTORS` and the providers configured) names no place: what to
/// change. Answered on every request until it is fixed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadPlacement(pub String);

/// What is wrong with an executor's health document (it is then taken for down).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadHealth(pub String);

/// What `/v1/health` said of an executor's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    pub computers: u64,
    pub execs: u64,
    pub cpus: u64,
}

impl Load {
    /// Reads the executor API's health document (`{status, load: {computers, execs},
    /// capacity: {cpus}}`); `Err` says what is wrong with it.
    pub fn from_health(v: &serde_json::Value) -> Result<Self, BadHealth> {
        if v["status"] != "ok" {
            return Err(BadHealth(format!("its health says {}", v["status"])));
        }
        // An executor older than the load figures is healthy with an unknown load (0).
        let n = |x: &serde_json::Value| match x {
            serde_json::Value::Null => Ok(0),
            x => x
                .as_u64()
                .ok_or_else(|| BadHealth("a health document whose load is not a count".to_owned())),
        };
        Ok(Self {
            computers: n(&v["load"]["computers"])?,
            execs: n(&v["load"]["execs"])?,
            cpus: n(&v["capacity"]["cpus"])?.max(1),
        })
    }

    /// Work per CPU, in thousandths (computers count, and commands running count again).
    fn per_cpu(&self) -> u64 {
        (self.computers + self.execs).saturating_mul(1000) / self.cpus.max(1)
    }
}

/// What this isolate knows of one executor.
#[derive(Debug, Clone, Default)]
struct Known {
    load: Option<Load>,
    /// When `load` was read (ms).
    checked_ms: u64,
    /// Failures in a row, and not to be asked again before `retry_ms`.
    failures: u32,
    retry_ms: u64,
    why: String,
}

/// Why no executor can take a new computer; said to the caller as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoPlace(pub String);

/// The health of every executor, as this isolate last saw it.
#[derive(Debug, Default)]
pub struct Health {
    known: HashMap<String, Known>,
}

impl Health {
    /// The executors of `pool` whose health should be fetched before choosing: never
    /// checked, or checked longer ago than [`HEALTH_TTL_MS`], and not waiting out a backoff.
    pub fn due<'a>(&self, pool: &'a [String], draining: &[String], now_ms: u64) -> Vec<&'a str> {
        pool.iter()
            .filter(|name| !draining.contains(name))
            .filter(|name| match self.known.get(name.as_str()) {
                None => true,
                Some(k) if k.failures > 0 => now_ms >= k.retry_ms,
                Some(k) => now_ms >= k.checked_ms + HEALTH_TTL_MS,
            })
            .map(String::as_str)
            .collect()
    }

    /// `name` answered its health check with `load`.
    pub fn checked(&mut self, name: &str, load: Load, now_ms: u64) {
        let k = self.known.entry(name.to_owned()).or_default();
        *k = Known {
            load: Some(load),
            checked_ms: now_ms,
            ..Known::default()
        };
    }

    /// `name` failed (its health check, or a call to it): it takes no new computers until
    /// it answers again, asked after a backoff that doubles with each failure. Returns
    /// `true` when it was thought healthy until now (a failover).
    pub fn failed(&mut self, name: &str, why: &str, now_ms: u64) -> bool {
        let k = self.known.entry(name.to_owned()).or_default();
        let was_up = k.failures == 0;
        k.failures = k.failures.saturating_add(1);
        let backoff = BACKOFF_FIRST_MS
            .saturating_mul(1u64 << (k.failures - 1).min(16))
            .min(BACKOFF_MAX_MS);
        k.retry_ms = now_ms + backoff;
        k.load = None;
        k.why = why.to_owned();
        was_up
    }

    /// A computer was just placed on `name`: its load counts it until the next check, so a
    /// burst between two checks spreads too.
    pub fn placed(&mut self, name: &str) {
        if let Some(load) = self.known.get_mut(name).and_then(|k| k.load.as_mut()) {
            load.computers += 1;
        }
    }

    /// Is `name` taken for up (answered its last check)?
    pub fn up(&self, name: &str) -> Option<bool> {
        self.known
            .get(name)
            .map(|k| k.failures == 0 && k.load.is_some())
    }

    /// Its load as last read.
    pub fn load(&self, name: &str) -> Option<Load> {
        self.known.get(name).and_then(|k| k.load)
    }

    /// Chooses an executor of `pool` for a new computer by `strategy`, never one that is
    /// draining, down, or in `exclude` (failed for this very computer already).
    pub fn choose(
        &self,
        strategy: Strategy,
        pool: &[String],
        draining: &[String],
        exclude: &[String],
    ) -> Result<String, NoPlace> {
        let usable = |name: &&String| {
            !draining.contains(name)
                && !exclude.contains(name)
                && self.up(name.as_str()) == Some(true)
        };
        let chosen = match strategy {
            Strategy::First | Strategy::Pinned => pool.iter().find(usable),
            Strategy::LeastLoaded => pool
                .iter()
                .filter(usable)
                .enumerate()
                .min_by_key(|(i, name)| (self.load(name).map_or(u64::MAX, |l| l.per_cpu()), *i))
                .map(|(_, name)| name),
        };
        chosen.cloned().ok_or_else(|| self.why_none(pool, draining))
    }

    fn why_none(&self, pool: &[String], draining: &[String]) -> NoPlace {
        let each: Vec<String> = pool
            .iter()
            .map(|name| {
                if draining.contains(name) {
                    format!("executor {name:?} is draining")
                } else {
                    match self.known.get(name) {
                        Some(k) if k.failures > 0 => {
                            format!("executor {name:?} is unreachable ({})", k.why)
                        }
                        _ => format!("executor {name:?} has not answered yet"),
                    }
                }
            })
            .collect();
        NoPlace(format!(
            "no executor can take a new computer now: {}. Computers that exist answer where they are; try again when an executor is back, or set `draining: false` in EXECUTORS",
            each.join("; ")
        ))
    }
}

/// Reads `PLACEMENT`. `wanted` is one of: unset (least-loaded over the executors offering
/// Docker, else Fly, else E2B, whichever is configured); `fly` or `e2b`; an executor's name
/// (pinned there; `pinned:NAME` says the same); a backend (`docker`, `wasm`, `modal`: the
/// executors offering it, least-loaded); or `least-loaded` or `first`, alone (over the
/// Docker executors) or with a backend (`first:wasm`). `executors`: each executor's name
/// and backends, in `EXECUTORS` order.
pub fn parse(
    wanted: Option<&str>,
    executors: &[(&str, &[String])],
    fly: bool,
    e2b: bool,
) -> Result<Placement, BadPlacement> {
    use crate::cloud::{E2B, FLY};
    if let Some((name, _)) = executors.iter().find(|(n, _)| *n == FLY || *n == E2B) {
        return Err(BadPlacement(format!(
            "the executor name {name:?} is reserved for the provider the gateway reaches directly: rename it in EXECUTORS"
        )));
    }
    let offering = |backend: &str| -> Vec<String> {
        executors
            .iter()
            .filter(|(_, backends)| backends.iter().any(|b| b == backend))
            .map(|(n, _)| (*n).to_owned())
            .collect()
    };
    let over = |strategy: Strategy, backend: &str| -> Result<Placement, BadPlacement> {
        let pool = offering(backend);
        if pool.is_empty() {
            return Err(BadPlacement(format!(
                "PLACEMENT: no executor in EXECUTORS offers the {backend:?} backend"
            )));
        }
        Ok(Placement::Executors { strategy, pool })
    };
    let pinned = |name: &str| -> Result<Placement, BadPlacement> {
        if executors.iter().any(|(n, _)| *n == name) {
            Ok(Placement::Executors {
                strategy: Strategy::Pinned,
                pool: vec![name.to_owned()],
            })
        } else {
            Err(BadPlacement(format!(
                "PLACEMENT pins {name:?}, which is not an executor in EXECUTORS"
            )))
        }
    };
    let wanted = wanted.map(str::trim).filter(|w| !w.is_empty());
    let (strategy, target) = match wanted {
        Some(w) => match w.split_once(':') {
            Some((s, t)) => (Some(s.trim()), Some(t.trim())),
            None if matches!(w, "least-loaded" | "first") => (Some(w), None),
            None => (None, Some(w)),
        },
        None => (None, None),
    };
    let strategy = match strategy {
        None => None,
        Some("least-loaded") => Some(Strategy::LeastLoaded),
        Some("first") => Some(Strategy::First),
        Some("pinned") => Some(Strategy::Pinned),
        Some(other) => {
            return Err(BadPlacement(format!(
                "PLACEMENT strategy {other:?} is not `least-loaded`, `first` or `pinned`"
            )));
        }
    };
    match (strategy, target) {
        (Some(Strategy::Pinned), Some(name)) => pinned(name),
        (Some(Strategy::Pinned), None) => Err(BadPlacement(
            "PLACEMENT `pinned` needs the executor: `pinned:NAME`".to_owned(),
        )),
        (_, Some(p @ (FLY | E2B))) if strategy.is_none() => Ok(Placement::Provider(p.to_owned())),
        (None, Some(name)) if executors.iter().any(|(n, _)| *n == name) => pinned(name),
        (None, Some(backend)) => {
            if offering(backend).is_empty() {
                return Err(BadPlacement(format!(
                    "PLACEMENT {backend:?} is neither `fly`, `e2b`, a strategy (`least-loaded`, `first`, `pinned:NAME`), an executor name nor a backend of a configured executor (EXECUTORS)"
                )));
            }
            over(Strategy::LeastLoaded, backend)
        }
        (Some(s), Some(backend)) => over(s, backend),
        (Some(s), None) => over(s, "docker"),
        (None, None) => {
            if !offering("docker").is_empty() {
                over(Strategy::LeastLoaded, "docker")
            } else if fly {
                Ok(Placement::Provider(FLY.to_owned()))
            } else if e2b {
                Ok(Placement::Provider(E2B.to_owned()))
            } else {
                Err(BadPlacement("nowhere to put computers: configure EXECUTORS (with the docker backend), or Fly (FLY_API_TOKEN and FLY_APP_NAME), or E2B (E2B_API_KEY)".to_owned()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn load(computers: u64) -> Load {
        Load {
            computers,
            execs: 0,
            cpus: 2,
        }
    }

    #[test]
    fn placement_is_parsed_with_its_strategy() {
        let d = names(&["docker"]);
        let w = names(&["wasm"]);
        let ex: Vec<(&str, &[String])> = vec![("a", &d), ("b", &d), ("w", &w)];
        let exec = |s, p: &[&str]| Placement::Executors {
            strategy: s,
            pool: names(p),
        };
        assert_eq!(
            parse(None, &ex, true, true),
            Ok(exec(Strategy::LeastLoaded, &["a", "b"]))
        );
        assert_eq!(
            parse(Some("docker"), &ex, false, false),
            Ok(exec(Strategy::LeastLoaded, &["a", "b"]))
        );
        assert_eq!(
            parse(Some("first"), &ex, false, false),
            Ok(exec(Strategy::First, &["a", "b"]))
        );
        assert_eq!(
            parse(Some("first:wasm"), &ex, false, false),
            Ok(exec(Strategy::First, &["w"]))
        );
        assert_eq!(
            parse(Some(" b "), &ex, false, false),
            Ok(exec(Strategy::Pinned, &["b"]))
        );
        assert_eq!(
            parse(Some("pinned:a"), &ex, false, false),
            Ok(exec(Strategy::Pinned, &["a"]))
        );
        assert_eq!(
            parse(Some("fly"), &ex, false, false),
            Ok(Placement::Provider("fly".into()))
        );
        assert_eq!(
            parse(None, &[], false, true),
            Ok(Placement::Provider("e2b".into()))
        );
        for bad in [
            "gpu",
            "pinned:zz",
            "pinned",
            "fastest:docker",
            "first:modal",
            "least-loaded:fly",
        ] {
            assert!(parse(Some(bad), &ex, true, true).is_err(), "{bad}");
        }
        assert!(parse(None, &[], false, false).is_err());
        let reserved: Vec<(&str, &[String])> = vec![("fly", &d)];
        assert!(
            parse(None, &reserved, false, false)
                .unwrap_err()
                .0
                .contains("reserved")
        );
        assert_eq!(exec(Strategy::Pinned, &["b"]).fixed(), Some("b"));
        assert_eq!(exec(Strategy::First, &["a", "b"]).fixed(), None);
    }

    #[test]
    fn least_loaded_spreads_a_burst_and_skips_draining_and_down() {
        let pool = names(&["a", "b", "c"]);
        let mut h = Health::default();
        assert_eq!(h.due(&pool, &[], 0), ["a", "b", "c"]);
        h.checked("a", load(2), 0);
        h.checked("b", load(0), 0);
        h.checked("c", load(0), 0);
        assert!(h.due(&pool, &[], 100).is_empty());
        let mut got = Vec::new();
        for _ in 0..6 {
            let n = h.choose(Strategy::LeastLoaded, &pool, &[], &[]).unwrap();
            h.placed(&n);
            got.push(n);
        }
        assert_eq!(got, ["b", "c", "b", "c", "a", "b"]);
        // Draining and excluded executors take nothing; `first` takes the first usable.
        let draining = names(&["b"]);
        assert_eq!(
            h.choose(Strategy::LeastLoaded, &pool, &draining, &names(&["c"])),
            Ok("a".into())
        );
        assert_eq!(
            h.choose(Strategy::First, &pool, &names(&["a"]), &[]),
            Ok("b".into())
        );
        // Load per CPU: a bigger host takes more.
        h.checked(
            "a",
            Load {
                computers: 3,
                execs: 0,
                cpus: 8,
            },
            0,
        );
        h.checked("b", load(1), 0);
        assert_eq!(
            h.choose(Strategy::LeastLoaded, &pool, &[], &[]),
            Ok("a".into())
        );
    }

    #[test]
    fn a_failed_executor_is_skipped_with_backoff_until_it_answers() {
        let pool = names(&["a", "b"]);
        let mut h = Health::default();
        h.checked("a", load(0), 0);
        h.checked("b", load(5), 0);
        assert!(h.failed("a", "connection refused", 10), "a failover");
        assert!(!h.failed("a", "connection refused", 20), "already down");
        assert_eq!(
            h.choose(Strategy::LeastLoaded, &pool, &[], &[]),
            Ok("b".into())
        );
        // Two failures: asked again after 2 s, not before; b is due after its TTL.
        assert_eq!(h.due(&pool, &[], 2_000), Vec::<&str>::new());
        assert_eq!(h.due(&pool, &[], 2_020), ["a"]);
        assert_eq!(h.due(&pool, &[], HEALTH_TTL_MS), ["a", "b"]);
        for i in 0..40 {
            h.failed("a", "still refused", i);
        }
        assert_eq!(h.due(&pool, &[], 39 + BACKOFF_MAX_MS - 1), ["b"]);
        // Back: it answers, and takes computers again.
        h.checked("a", load(0), 50_000);
        assert_eq!(
            h.choose(Strategy::LeastLoaded, &pool, &[], &[]),
            Ok("a".into())
        );
        // Nobody usable: the error names each executor and why.
        h.failed("a", "connection refused", 60_000);
        let e = h
            .choose(Strategy::First, &pool, &names(&["b"]), &[])
            .unwrap_err()
            .0;
        assert!(
            e.contains("\"a\" is unreachable (connection refused)"),
            "{e}"
        );
        assert!(e.contains("\"b\" is draining"), "{e}");
    }

    #[test]
    fn any_placement_string_is_parsed_or_refused_with_a_reason() {
        // Every sequence of up to three of these pieces: no panic, and a refusal says why.
        let pieces = [
            "",
            "pinned",
            "first",
            "least-loaded",
            ":",
            "a",
            "docker",
            "fly",
            " ",
            "::",
            "é",
            "\0",
            "wasm:",
            ":a",
        ];
        let d = names(&["docker"]);
        let ex: Vec<(&str, &[String])> = vec![("a", &d)];
        for x in pieces {
            for y in pieces {
                for z in pieces {
                    let wanted = format!("{x}{y}{z}");
                    match parse(Some(&wanted), &ex, true, false) {
                        Ok(Placement::Executors { pool, .. }) => assert!(!pool.is_empty()),
                        Ok(Placement::Provider(p)) => assert!(p == "fly" || p == "e2b"),
                        Err(e) => assert!(e.0.contains("PLACEMENT"), "{wanted:?}: {e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn health_documents_are_read_strictly() {
        let ok = serde_json::json!({"status": "ok", "load": {"computers": 3, "execs": 1}, "capacity": {"cpus": 4}});
        assert_eq!(
            Load::from_health(&ok),
            Ok(Load {
                computers: 3,
                execs: 1,
                cpus: 4
            })
        );
        // An older executor, without the load: healthy, load unknown.
        assert_eq!(
            Load::from_health(&serde_json::json!({"status": "ok"})),
            Ok(Load {
                computers: 0,
                execs: 0,
                cpus: 1
            })
        );
        for bad in [
            serde_json::json!({"status": "starting"}),
            serde_json::json!({"status": "ok", "load": {"computers": "3", "execs": 0}}),
            serde_json::json!({"status": "ok", "capacity": {"cpus": -1}}),
            serde_json::json!([]),
        ] {
            assert!(Load::from_health(&bad).is_err(), "{bad}");
        }
    }

    fn docker_and_wasm() -> (Vec<String>, Vec<String>) {
        (names(&["docker"]), names(&["wasm"]))
    }

    #[test]
    fn a_placement_pinned_to_an_unknown_executor_names_it() {
        let (d, _) = docker_and_wasm();
        let ex: Vec<(&str, &[String])> = vec![("a", &d)];
        let e = parse(Some("pinned:zz"), &ex, false, false).unwrap_err().0;
        assert!(e.contains("\"zz\"") && e.contains("EXECUTORS"), "{e}");
        let e = parse(Some("pinned"), &ex, false, false).unwrap_err().0;
        assert!(e.contains("pinned:NAME"), "{e}");
    }

    #[test]
    fn an_unknown_strategy_is_named_with_the_ones_that_exist() {
        let (d, _) = docker_and_wasm();
        let ex: Vec<(&str, &[String])> = vec![("a", &d)];
        let e = parse(Some("fastest:docker"), &ex, false, false)
            .unwrap_err()
            .0;
        assert!(e.contains("\"fastest\""), "{e}");
        for known in ["least-loaded", "first", "pinned"] {
            assert!(e.contains(known), "{e}");
        }
    }

    #[test]
    fn a_backend_no_executor_offers_is_named_in_the_refusal() {
        let (d, _) = docker_and_wasm();
        let ex: Vec<(&str, &[String])> = vec![("a", &d)];
        let e = parse(Some("first:modal"), &ex, false, false).unwrap_err().0;
        assert!(e.contains("\"modal\"") && e.contains("EXECUTORS"), "{e}");
        let e = parse(Some("gpu"), &ex, false, false).unwrap_err().0;
        assert!(e.contains("\"gpu\"") && e.contains("fly"), "{e}");
    }

    #[test]
    fn without_docker_executors_the_default_is_fly_before_e2b() {
        let (_, w) = docker_and_wasm();
        let wasm_only: Vec<(&str, &[String])> = vec![("w", &w)];
        assert_eq!(
            parse(None, &wasm_only, true, true),
            Ok(Placement::Provider("fly".into()))
        );
        assert_eq!(
            parse(Some("   "), &wasm_only, false, true),
            Ok(Placement::Provider("e2b".into())),
            "a blank PLACEMENT is an unset one"
        );
        let e = parse(None, &wasm_only, false, false).unwrap_err().0;
        for what in ["EXECUTORS", "FLY_API_TOKEN", "E2B_API_KEY"] {
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn an_executor_named_like_a_backend_is_pinned_by_its_name() {
        let (d, w) = docker_and_wasm();
        let ex: Vec<(&str, &[String])> = vec![("a", &d), ("wasm", &d), ("b", &w)];
        assert_eq!(
            parse(Some("wasm"), &ex, false, false),
            Ok(Placement::Executors {
                strategy: Strategy::Pinned,
                pool: names(&["wasm"])
            })
        );
        // With a strategy, `wasm` is the backend again.
        assert_eq!(
            parse(Some(" first : wasm "), &ex, false, false),
            Ok(Placement::Executors {
                strategy: Strategy::First,
                pool: names(&["b"])
            })
        );
    }

    #[test]
    fn executors_may_not_take_the_provider_names() {
        let (d, _) = docker_and_wasm();
        let ex: Vec<(&str, &[String])> = vec![("a", &d), ("e2b", &d)];
        let e = parse(Some("a"), &ex, false, false).unwrap_err().0;
        assert!(e.contains("\"e2b\"") && e.contains("rename"), "{e}");
    }

    #[test]
    fn a_provider_or_a_single_executor_is_a_fixed_place() {
        let (d, _) = docker_and_wasm();
        let one: Vec<(&str, &[String])> = vec![("solo", &d)];
        let p = parse(None, &one, true, true).unwrap();
        assert_eq!(p.fixed(), Some("solo"));
        assert_eq!(Placement::Provider("e2b".into()).fixed(), Some("e2b"));
    }

    #[test]
    fn draining_and_fresh_executors_are_not_health_checked() {
        let pool = names(&["a", "b", "c"]);
        let mut h = Health::default();
        h.checked("a", load(0), 1_000);
        assert_eq!(h.due(&pool, &names(&["c"]), 1_000), ["b"]);
        assert_eq!(
            h.due(&pool, &names(&["c"]), 1_000 + HEALTH_TTL_MS - 1),
            ["b"]
        );
        assert_eq!(
            h.due(&pool, &names(&["c"]), 1_000 + HEALTH_TTL_MS),
            ["a", "b"]
        );
    }

    #[test]
    fn each_failure_doubles_the_backoff_up_to_thirty_seconds() {
        let pool = names(&["a"]);
        let mut h = Health::default();
        let mut waits = Vec::new();
        for _ in 0..8 {
            h.failed("a", "refused", 0);
            // The first moment it is due again.
            let wait = (0..=BACKOFF_MAX_MS)
                .step_by(500)
                .find(|t| !h.due(&pool, &[], *t).is_empty())
                .unwrap();
            waits.push(wait);
        }
        assert_eq!(
            waits,
            [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]
        );
    }

    #[test]
    fn an_executor_that_answers_again_fails_over_afresh_with_the_first_backoff() {
        let pool = names(&["a"]);
        let mut h = Health::default();
        assert_eq!(h.up("a"), None, "never seen");
        for t in 0..5 {
            h.failed("a", "refused", t);
        }
        assert_eq!(h.up("a"), Some(false));
        h.checked("a", load(0), 100_000);
        assert_eq!(h.up("a"), Some(true));
        assert!(h.failed("a", "reset", 100_000), "a failover again");
        assert_eq!(
            h.due(&pool, &[], 100_000 + BACKOFF_FIRST_MS - 1),
            Vec::<&str>::new()
        );
        assert_eq!(h.due(&pool, &[], 100_000 + BACKOFF_FIRST_MS), ["a"]);
        assert_eq!(h.load("a"), None, "a failure forgets the load");
    }

    #[test]
    fn least_loaded_counts_running_commands_and_breaks_ties_in_executors_order() {
        let pool = names(&["a", "b", "c"]);
        let mut h = Health::default();
        let l = |computers, execs| Load {
            computers,
            execs,
            cpus: 2,
        };
        h.checked("a", l(1, 3), 0);
        h.checked("b", l(2, 0), 0);
        h.checked("c", l(2, 0), 0);
        assert_eq!(
            h.choose(Strategy::LeastLoaded, &pool, &[], &[]),
            Ok("b".into()),
            "a runs commands; b and c tie, b comes first"
        );
        // `first` ignores load.
        assert_eq!(h.choose(Strategy::First, &pool, &[], &[]), Ok("a".into()));
    }

    #[test]
    fn placing_on_an_executor_not_yet_checked_makes_it_no_less_unknown() {
        let pool = names(&["a"]);
        let mut h = Health::default();
        h.placed("a");
        assert_eq!(h.up("a"), None);
        let e = h.choose(Strategy::Pinned, &pool, &[], &[]).unwrap_err().0;
        assert!(e.contains("\"a\" has not answered yet"), "{e}");
        assert!(e.contains("draining: false"), "{e}");
    }

    #[test]
    fn an_executor_excluded_for_this_computer_is_not_chosen_even_when_alone() {
        let pool = names(&["a"]);
        let mut h = Health::default();
        h.checked("a", load(0), 0);
        assert!(
            h.choose(Strategy::Pinned, &pool, &[], &names(&["a"]))
                .is_err()
        );
        assert_eq!(h.choose(Strategy::Pinned, &pool, &[], &[]), Ok("a".into()));
    }

    #[test]
    fn the_executors_own_health_document_is_read() {
        let health = shared::executor_api::Health {
            status: "ok".into(),
            version: "1".into(),
            backends: names(&["docker"]),
            capabilities: Default::default(),
            capacity: shared::executor_api::Capacity { cpus: 0 },
            load: shared::executor_api::Load {
                computers: 4,
                execs: 2,
            },
        };
        let v = serde_json::to_value(&health).unwrap();
        assert_eq!(
            Load::from_health(&v),
            Ok(Load {
                computers: 4,
                execs: 2,
                cpus: 1
            }),
            "an unknown CPU count (0) counts as one"
        );
        let e = Load::from_health(&serde_json::json!({"status": "draining"})).unwrap_err();
        assert!(e.0.contains("\"draining\""), "{e}");
        let e = Load::from_health(&serde_json::json!({"status": "ok", "load": {"computers": 1.5}}))
            .unwrap_err();
        assert!(e.0.contains("not a count"), "{e}");
    }
}

//! Placement at the edge: fetches executors' `/v1/health` (cached per isolate for
//! [`crate::placement::HEALTH_TTL_MS`], with backoff for those that fail), chooses by the
//! `PLACEMENT` strategy ([`crate::placement`]), notes executors that fail a call, and
//! counts placements and failovers for the log and `/metrics`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::placement::{BadHealth, Health, Load, Placement};

/// How long a health check may take before the executor counts as down (ms).
const HEALTH_TIMEOUT_MS: u64 = 2_000;

thread_local! {
    static HEALTH: RefCell<Health> = RefCell::new(Health::default());
    static COUNTS: RefCell<Counts> = RefCell::new(Counts::default());
}

/// This isolate's counters, by executor.
#[derive(Default)]
struct Counts {
    placements: BTreeMap<String, u64>,
    failovers: BTreeMap<String, u64>,
    failures: BTreeMap<String, u64>,
}

fn count(which: fn(&mut Counts) -> &mut BTreeMap<String, u64>, executor: &str) {
    COUNTS.with(|c| {
        *which(&mut c.borrow_mut())
            .entry(executor.to_owned())
            .or_default() += 1
    });
}

/// `GET {url}/v1/health`, bounded by [`HEALTH_TIMEOUT_MS`].
async fn fetch_health(url: &str) -> std::result::Result<Load, BadHealth> {
    let target = format!("{}/v1/health", url.trim_end_matches('/'));
    let failed = |e: worker::Error| BadHealth(e.to_string());
    let ask = async move {
        let req = Request::new(&target, Method::Get).map_err(failed)?;
        let mut resp = Fetch::Request(req).send().await.map_err(failed)?;
        if resp.status_code() != 200 {
            return Err(BadHealth(format!(
                "its health check answered {}",
                resp.status_code()
            )));
        }
        let v: Value = resp.json().await.map_err(failed)?;
        Load::from_health(&v)
    };
    let timeout = worker::Delay::from(Duration::from_millis(HEALTH_TIMEOUT_MS));
    match futures_util::future::select(Box::pin(ask), timeout).await {
        futures_util::future::Either::Left((r, _)) => r,
        futures_util::future::Either::Right(_) => Err(BadHealth(format!(
            "no answer to its health check within {HEALTH_TIMEOUT_MS} ms"
        ))),
    }
}

impl Gateway {
    /// The executors an operator is emptying (`"draining": true` in EXECUTORS).
    fn draining(&self) -> Vec<String> {
        self.executors
            .iter()
            .filter(|e| e.draining)
            .map(|e| e.name.clone())
            .collect()
    }

    /// Where a new computer goes: a provider, or an executor chosen by the strategy among
    /// those that answer their health check, are not draining and are not in `exclude`.
    pub(crate) async fn place(
        &self,
        exclude: &[String],
    ) -> std::result::Result<String, GatewayError> {
        let placement = self
            .placement
            .as_ref()
            .map_err(|e| GatewayError::Config(e.to_string()))?;
        let (strategy, pool) = match placement {
            Placement::Provider(p) => return Ok(p.clone()),
            Placement::Executors { strategy, pool } => (*strategy, pool),
        };
        let draining = self.draining();
        let due: Vec<String> = HEALTH.with(|h| {
            h.borrow()
                .due(pool, &draining, now_ms())
                .into_iter()
                .map(str::to_owned)
                .collect()
        });
        if !due.is_empty() {
            let checks = due.iter().map(|name| async move {
                let url = self
                    .executor(name)
                    .map(|e| e.url.clone())
                    .unwrap_or_default();
                (name, fetch_health(&url).await)
            });
            for (name, result) in futures_util::future::join_all(checks).await {
                match result {
                    Ok(load) => {
                        let back = HEALTH.with(|h| h.borrow().up(name) == Some(false));
                        if back {
                            tracing::info!(
                                executor = name.as_str(),
                                "executor answers again: it takes new computers"
                            );
                        }
                        HEALTH.with(|h| h.borrow_mut().checked(name, load, now_ms()));
                    }
                    Err(why) => self.unreachable(name, &why.0),
                }
            }
        }
        let chosen = HEALTH
            .with(|h| h.borrow().choose(strategy, pool, &draining, exclude))
            .map_err(|e| GatewayError::Placement(e.0))?;
        let load = HEALTH.with(|h| {
            let mut h = h.borrow_mut();
            let load = h.load(&chosen).unwrap_or_default();
            h.placed(&chosen);
            load
        });
        count(|c| &mut c.placements, &chosen);
        tracing::info!(
            executor = chosen.as_str(),
            strategy = strategy.name(),
            computers = load.computers,
            execs = load.execs,
            "placed a new computer"
        );
        Ok(chosen)
    }

    /// `name` failed a health check or a call: no new computers go there until it answers.
    pub(crate) fn unreachable(&self, name: &str, why: &str) {
        count(|c| &mut c.failures, name);
        if HEALTH.with(|h| h.borrow_mut().failed(name, why, now_ms())) {
            count(|c| &mut c.failovers, name);
            tracing::warn!(
                executor = name,
                why,
                "executor is unreachable: new computers go elsewhere until it answers"
            );
        }
    }

    /// Prometheus text of this isolate's placement counters and executor health.
    pub(crate) fn metrics_text(&self) -> String {
        let mut out = String::new();
        let mut series = |name: &str, help: &str, kind: &str, rows: Vec<(String, u64)>| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (executor, v) in rows {
                out.push_str(&format!("{name}{{executor=\"{executor}\"}} {v}\n"));
            }
        };
        let names: Vec<String> = self.executors.iter().map(|e| e.name.clone()).collect();
        let of = |which: fn(&Counts) -> &BTreeMap<String, u64>| -> Vec<(String, u64)> {
            COUNTS.with(|c| {
                let c = c.borrow();
                names
                    .iter()
                    .map(|n| (n.clone(), which(&c).get(n).copied().unwrap_or(0)))
                    .collect()
            })
        };
        series(
            "msc_gateway_placements_total",
            "New computers placed on each executor by this isolate.",
            "counter",
            of(|c| &c.placements),
        );
        series(
            "msc_gateway_failovers_total",
            "Times an executor this isolate took for up stopped answering (new computers went elsewhere).",
            "counter",
            of(|c| &c.failovers),
        );
        series(
            "msc_gateway_executor_failures_total",
            "Failed health checks and calls, by executor.",
            "counter",
            of(|c| &c.failures),
        );
        let health: Vec<(Option<bool>, Option<Load>)> = HEALTH.with(|h| {
            let h = h.borrow();
            names.iter().map(|n| (h.up(n), h.load(n))).collect()
        });
        series(
            "msc_gateway_executor_up",
            "1 when the executor answered its last health check here, 0 when it failed (absent: not checked yet).",
            "gauge",
            names
                .iter()
                .zip(&health)
                .filter_map(|(n, (up, _))| up.map(|u| (n.clone(), u64::from(u))))
                .collect(),
        );
        series(
            "msc_gateway_executor_computers",
            "Computers on the executor as its last health check said (plus those placed since).",
            "gauge",
            names
                .iter()
                .zip(&health)
                .filter_map(|(n, (_, l))| l.map(|l| (n.clone(), l.computers)))
                .collect(),
        );
        series(
            "msc_gateway_executor_draining",
            "1 for an executor marked draining in EXECUTORS.",
            "gauge",
            self.executors
                .iter()
                .map(|e| (e.name.clone(), u64::from(e.draining)))
                .collect(),
        );
        out
    }
}

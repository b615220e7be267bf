//! Prometheus metrics of this process (`GET /metrics` on the HTTP server and in executor
//! mode, behind the same auth as their other routes), with `prometheus-client`.
//!
//! Owns: the one registry of the process and its families: execs by backend and outcome
//! and their latency, jobs started, auth refusals, HTTP requests by status; and the
//! gauges set at scrape time from what the caller reads off `crate::computers` right then
//! (computers by state, jobs running, the WASM jobs' buffered output and its budget) and
//! the process's resident memory (`/proc/self/status`), so they can never drift from what
//! they describe. It records; it never
//! decides anything, and it holds no computer id, command or token (labels are closed
//! sets: backend names, outcomes, status codes).

use std::fmt::Write as _;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of the exposition (OpenMetrics text, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How an exec ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Exit code 0.
    Ok,
    /// Ran and exited non-zero (not a timeout).
    Nonzero,
    /// Killed at its timeout (exit 124).
    Timeout,
    /// Output cut at `--output-limit`.
    Truncated,
    /// Never ran to an exit: refused or failed at the backend.
    Error,
    /// The call was cancelled (or its connection dropped) while it ran.
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Nonzero => "nonzero",
            Self::Timeout => "timeout",
            Self::Truncated => "truncated",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
        }
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Server {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            Self::Mcp => "mcp",
            Self::Executor => "executor",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecLabels {
    backend: String,
    outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
    temporary: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandoutLabel {
    /// `hit`: a warm-pool member was ready; `miss`: made on demand.
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    /// `direct`: the socket in the computer's host directory; `relay`: an exec through the
    /// engine.
    channel: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: Server,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: Server,
    code: String,
}

/// Which of the binary's HTTP servers.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Server {
    /// The MCP server (`--transport http`).
    Mcp,
    /// Executor mode (the gateway's `/v1` API).
    Executor,
}

struct Metrics {
    registry: Registry,
    execs: Family<ExecLabels, Counter>,
    exec_seconds: Family<BackendLabel, Histogram>,
    jobs_started: Family<BackendLabel, Counter>,
    jobs_running: Gauge,
    computers: Family<StateLabels, Gauge>,
    auth_refusals: Family<ServerLabel, Counter>,
    requests: Family<RequestLabels, Counter>,
    pool_ready: Gauge,
    pool_handouts: Family<HandoutLabel, Counter>,
    supervisor_connections: Family<ChannelLabel, Counter>,
    job_output_buffered: Gauge,
    job_output_budget: Gauge,
    resident: Gauge,
    egress_blocked: Counter,
    /// One scrape at a time sets the scrape-time gauges and encodes.
    scrape: Mutex<()>,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~9 min, ×4 per bucket.
    Histogram::new(exponential_buckets(0.0005, 4.0, 11))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("msc");
    let execs = Family::<ExecLabels, Counter>::default();
    registry.register(
        "execs",
        "Commands run (terminal_execute without yield_ms, and the executor API's exec), by backend and outcome",
        execs.clone(),
    );
    let exec_seconds =
        Family::<BackendLabel, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
    registry.register(
        "exec_duration_seconds",
        "Wall time of a command, from the call to its result, by backend",
        exec_seconds.clone(),
    );
    let jobs_started = Family::<BackendLabel, Counter>::default();
    registry.register(
        "jobs_started",
        "Jobs started (terminal_execute with yield_ms), by backend",
        jobs_started.clone(),
    );
    let jobs_running = Gauge::default();
    registry.register(
        "jobs_running",
        "Jobs this process started whose end it has not seen yet and whose timeout has not passed (at scrape time)",
        jobs_running.clone(),
    );
    let computers = Family::<StateLabels, Gauge>::default();
    registry.register(
        "computers",
        "Computers this process tracks, by state (busy: running a command now; idle) and temporary or not (at scrape time)",
        computers.clone(),
    );
    let auth_refusals = Family::<ServerLabel, Counter>::default();
    registry.register(
        "auth_refusals",
        "Requests refused for a missing, wrong or insufficient token, by server",
        auth_refusals.clone(),
    );
    let requests = Family::<RequestLabels, Counter>::default();
    registry.register(
        "http_requests",
        "HTTP requests answered, by server and status code",
        requests.clone(),
    );
    let pool_ready = Gauge::default();
    registry.register(
        "warm_pool_ready",
        "Warm-pool computers started and not handed out (--warm-pool)",
        pool_ready.clone(),
    );
    let pool_handouts = Family::<HandoutLabel, Counter>::default();
    registry.register(
        "warm_pool_handouts",
        "New computers with a server-chosen id, by whether a warm-pool member was ready (hit) or not (miss)",
        pool_handouts.clone(),
    );
    let supervisor_connections = Family::<ChannelLabel, Counter>::default();
    registry.register(
        "supervisor_connections",
        "Connections opened to computers' supervisors, by channel (direct or relay)",
        supervisor_connections.clone(),
    );
    let job_output_buffered = Gauge::default();
    registry.register(
        "job_output_buffered_bytes",
        "Unread output of kept jobs held in this process (WASM computers' jobs; 0 where the computers hold their jobs' output) (at scrape time)",
        job_output_buffered.clone(),
    );
    let job_output_budget = Gauge::default();
    registry.register(
        "job_output_budget_bytes",
        "The bound on job_output_buffered_bytes (--wasm-job-output-budget; 0 where this process buffers no job output): past it the biggest buffers lose their oldest bytes, counted in the jobs' dropped_bytes",
        job_output_budget.clone(),
    );
    let resident = Gauge::default();
    registry.register(
        "process_resident_memory_bytes",
        "Resident memory of this process (VmRSS; 0 where /proc cannot tell) (at scrape time)",
        resident.clone(),
    );
    let egress_blocked = Counter::default();
    registry.register(
        "egress_blocked",
        "Connections and DNS names the egress gate refused (SPEC §3.11: network allow lists)",
        egress_blocked.clone(),
    );
    Metrics {
        registry,
        egress_blocked,
        job_output_buffered,
        job_output_budget,
        resident,
        supervisor_connections,
        pool_ready,
        pool_handouts,
        execs,
        exec_seconds,
        jobs_started,
        jobs_running,
        computers,
        auth_refusals,
        requests,
        scrape: Mutex::new(()),
    }
});

/// Times one exec; records it as cancelled unless [`ExecTimer::finish`] is called (the
/// call's future was dropped while the command ran).
pub struct ExecTimer {
    backend: &'static str,
    start: Instant,
    done: bool,
}

impl ExecTimer {
    pub fn start(backend: &'static str) -> Self {
        Self {
            backend,
            start: Instant::now(),
            done: false,
        }
    }

    /// Records the exec with `outcome`.
    pub fn finish(mut self, outcome: Outcome) {
        self.record(outcome);
    }

    fn record(&mut self, outcome: Outcome) {
        self.done = true;
        let m = &*METRICS;
        m.execs
            .get_or_create(&ExecLabels {
                backend: self.backend.to_owned(),
                outcome,
            })
            .inc();
        m.exec_seconds
            .get_or_create(&BackendLabel {
                backend: self.backend.to_owned(),
            })
            .observe(self.start.elapsed().as_secs_f64());
    }
}

impl Drop for ExecTimer {
    fn drop(&mut self) {
        if !self.done {
            self.record(Outcome::Cancelled);
        }
    }
}

/// The outcome of an exec that ran to a result.
pub fn outcome_of(exit_code: i64, timed_out: bool, truncated: bool) -> Outcome {
    if timed_out {
        Outcome::Timeout
    } else if truncated {
        Outcome::Truncated
    } else if exit_code == 0 {
        Outcome::Ok
    } else {
        Outcome::Nonzero
    }
}

/// A job was started on `backend`.
pub fn job_started(backend: &str) {
    METRICS
        .jobs_started
        .get_or_create(&BackendLabel {
            backend: backend.to_owned(),
        })
        .inc();
}

/// The warm pool now holds `n` ready members.
pub fn pool_ready(n: usize) {
    METRICS.pool_ready.set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// A new computer with a server-chosen id was asked of the warm pool.
pub fn pool_handout(hit: bool) {
    METRICS
        .pool_handouts
        .get_or_create(&HandoutLabel {
            result: if hit { "hit" } else { "miss" },
        })
        .inc();
}

/// A connection to a computer's supervisor was opened, over the direct channel or the relay.
pub fn supervisor_connection(direct: bool) {
    METRICS
        .supervisor_connections
        .get_or_create(&ChannelLabel {
            channel: if direct { "direct" } else { "relay" },
        })
        .inc();
}

/// The egress gate refused a connection or a name.
pub fn egress_blocked() {
    METRICS.egress_blocked.inc();
}

/// A request to `server` was refused for its token.
pub fn auth_refused(server: Server) {
    METRICS
        .auth_refusals
        .get_or_create(&ServerLabel { server })
        .inc();
}

/// Middleware of both HTTP servers: counts every answered request by status.
pub async fn count_requests(
    axum::extract::State(server): axum::extract::State<Server>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    METRICS
        .requests
        .get_or_create(&RequestLabels {
            server,
            code: response.status().as_u16().to_string(),
        })
        .inc();
    response
}

/// The exposition text, with the scrape-time gauges set from `computers` (every tracked
/// computer now), `jobs_running` and `memory`.
pub fn render(
    computers: &[ComputerState],
    jobs_running: i64,
    memory: Memory,
) -> Result<String, std::fmt::Error> {
    let m = &*METRICS;
    let _one = m.scrape.lock().unwrap_or_else(|p| p.into_inner());
    m.computers.clear();
    for c in computers {
        m.computers
            .get_or_create(&StateLabels {
                state: if c.busy { "busy" } else { "idle" }.to_owned(),
                temporary: c.temporary.to_string(),
            })
            .inc();
    }
    m.jobs_running.set(jobs_running);
    let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    m.job_output_buffered.set(gauge(memory.job_output_buffered));
    m.job_output_budget.set(gauge(memory.job_output_budget));
    m.resident.set(gauge(resident_bytes().unwrap_or(0)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &m.registry)?;
    Ok(out)
}

/// The `/metrics` answer (the caller has checked the auth).
pub fn response(computers: &[ComputerState], jobs_running: i64, memory: Memory) -> Response {
    match render(computers, jobs_running, memory) {
        Ok(text) => {
            let mut r = (StatusCode::OK, text).into_response();
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// What the scrape reports of memory the caller knows of.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// Unread output of kept jobs held in this process.
    pub job_output_buffered: u64,
    /// Its bound (0: this process buffers no job output).
    pub job_output_budget: u64,
}

/// This process's resident memory (`VmRSS` of `/proc/self/status`), if it can tell.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// One tracked computer, as the scrape sees it.
#[derive(Debug, Clone, Copy)]
pub struct ComputerState {
    pub temporary: bool,
    /// Running a command now.
    pub busy: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes() {
        assert_eq!(outcome_of(0, false, false), Outcome::Ok);
        assert_eq!(outcome_of(3, false, false), Outcome::Nonzero);
        assert_eq!(outcome_of(124, true, false), Outcome::Timeout);
        assert_eq!(outcome_of(0, false, true), Outcome::Truncated);
    }

    #[test]
    fn a_dropped_timer_counts_as_cancelled() {
        let before = METRICS
            .execs
            .get_or_create(&ExecLabels {
                backend: "unit".into(),
                outcome: Outcome::Cancelled,
            })
            .get();
        drop(ExecTimer::start("unit"));
        ExecTimer::start("unit").finish(Outcome::Ok);
        let after = |outcome| {
            METRICS
                .execs
                .get_or_create(&ExecLabels {
                    backend: "unit".into(),
                    outcome,
                })
                .get()
        };
        assert_eq!(after(Outcome::Cancelled), before + 1);
        assert_eq!(after(Outcome::Ok), 1);
    }
}

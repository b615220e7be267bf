//! MCP over stdio: newline-delimited JSON-RPC on stdin/stdout, one caller (this process).
//!
//! Owns framing, concurrency (each request runs as its own task, so several execs run at
//! once and a slow one never blocks `ping`), `notifications/cancelled` (aborting a request
//! kills its command inside the computer), the order of what goes out ([`Out`]) and the end
//! of the session on EOF. Only JSON-RPC goes to stdout; logs go to stderr.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde_json::Value;
use shared::mcp::{
    Dispatcher, Era, Incoming, MODERN_VERSION, negotiate, parse_message, success_response,
};
use tokio::task::AbortHandle;

use crate::computers::SessionHost;

/// Longest accepted line (stdin payloads are ≤ 2 MiB, JSON escaping can grow them 6×).
const MAX_LINE: usize = 16 * 1024 * 1024;

type InFlight = Arc<Mutex<HashMap<String, AbortHandle>>>;

fn key(id: &Value) -> String {
    id.to_string()
}

/// One line of stdin, read on the reader thread.
enum Line {
    Read(Vec<u8>),
    /// Over [`MAX_LINE`]; the rest of it was skipped.
    TooLarge,
}

/// Reads stdin lines on a thread of its own and hands each to `session` there, until EOF
/// or a read error. A thread, not tokio's stdin: that one hands every read to the blocking
/// pool, which costs a warm exec two wake-ups more; and the requests are spawned onto the
/// runtime from here, so a request reaches a worker in one hand-off.
fn read_lines(session: &mut Session) -> std::io::Result<()> {
    use std::io::{BufRead, Read};
    let stdin = std::io::stdin();
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, stdin.lock());
    loop {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line);
        match read? {
            0 => return Ok(()),
            _ if line.len() > MAX_LINE => {
                // Skip the rest of the oversized line.
                if !line.ends_with(b"\n") {
                    let mut sink = Vec::new();
                    reader.read_until(b'\n', &mut sink)?;
                }
                session.take(Line::TooLarge);
            }
            _ => session.take(Line::Read(line)),
        }
    }
}

/// Lines at most this long are written by the task that has them, when nothing is queued
/// or being written: a small answer reaches stdout with no hand-off between threads. A
/// pipe takes this much at once, so such a write does not wait for a reader that keeps up.
const INLINE_MAX: usize = 16 * 1024;

/// stdout, written one whole line at a time, in the order lines are given: inline by the
/// task that has a small line when stdout is idle, else queued for the writer thread (big
/// answers, or while another line is being written). A thread, not tokio's stdout, for the
/// same reason as the reader.
#[derive(Default)]
struct Out {
    state: Mutex<OutState>,
    wake: Condvar,
}

#[derive(Default)]
struct OutState {
    queue: VecDeque<Vec<u8>>,
    /// A line is being written (inline or by the writer).
    busy: bool,
    /// stdout failed: nothing more is written.
    broken: bool,
    /// No more lines will come: the writer ends once the queue is empty.
    done: bool,
}

impl Out {
    fn state(&self) -> MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends one message.
    fn emit(&self, msg: &Value) {
        let mut line = shared::json::to_vec(msg);
        line.push(b'\n');
        let mut st = self.state();
        if st.broken {
            return;
        }
        if line.len() <= INLINE_MAX && !st.busy && st.queue.is_empty() {
            st.busy = true;
            drop(st);
            let ok = write_line(&line);
            let mut st = self.state();
            st.busy = false;
            st.broken |= !ok;
            if !st.queue.is_empty() || st.broken {
                self.wake.notify_one();
            }
            return;
        }
        st.queue.push_back(line);
        self.wake.notify_one();
    }

    /// The writer thread: writes queued lines until [`Out::finish`] and an empty queue.
    fn write_queued(&self) {
        loop {
            let line = {
                let mut st = self.state();
                loop {
                    if st.broken {
                        return;
                    }
                    if !st.busy {
                        if let Some(line) = st.queue.pop_front() {
                            st.busy = true;
                            break line;
                        }
                        if st.done {
                            return;
                        }
                    }
                    st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            };
            let ok = write_line(&line);
            let mut st = self.state();
            st.busy = false;
            st.broken |= !ok;
        }
    }

    /// No more lines: the writer writes what is queued and ends.
    fn finish(&self) {
        self.state().done = true;
        self.wake.notify_one();
    }
}

fn write_line(line: &[u8]) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(line).and_then(|()| out.flush()).is_ok()
}

/// The state of the one stdio session, kept by the reader thread.
struct Session {
    dispatcher: Arc<Dispatcher>,
    host: SessionHost,
    out: Arc<Out>,
    inflight: InFlight,
    era: Option<Era>,
    runtime: tokio::runtime::Handle,
}

impl Session {
    /// Serves one line of stdin: answers what needs no work at once, and spawns a task
    /// for each request.
    fn take(&mut self, line: Line) {
        let line = match line {
            Line::Read(line) => line,
            Line::TooLarge => {
                return self.out.emit(&shared::mcp::error_response(
                    Value::Null,
                    shared::mcp::codes::INVALID_REQUEST,
                    "message too large (16 MiB at most)",
                    None,
                ));
            }
        };
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        match parse_message(trimmed) {
            Err(resp) => self.out.emit(&resp),
            Ok(Incoming::Response) => {}
            Ok(Incoming::Notification { method, params }) => {
                if method == "notifications/cancelled"
                    && let Some(id) = params.as_ref().and_then(|p| p.get("requestId"))
                {
                    let handle = lock(&self.inflight).remove(&key(id));
                    if let Some(h) = handle {
                        tracing::info!(request_id = %id, "request cancelled by the client");
                        h.abort();
                    }
                }
            }
            Ok(Incoming::Request { id, method, params }) => {
                if method == "initialize" {
                    let requested = params
                        .as_ref()
                        .and_then(|p| p.get("protocolVersion"))
                        .and_then(Value::as_str);
                    let version = negotiate(requested);
                    self.era = Some(Era::Legacy(version.to_owned()));
                    let result = self.dispatcher.initialize_result(version);
                    return self.out.emit(&success_response(id, result));
                }
                let request_era = match (&self.era, requested_modern(params.as_ref())) {
                    (_, true) | (None, _) => Era::Modern,
                    (Some(e), false) => e.clone(),
                };
                let out = self.out.clone();
                let d = self.dispatcher.clone();
                let h = self.host.clone();
                let k = key(&id);
                let flight = self.inflight.clone();
                // Registered before the task can end and remove itself.
                let mut inflight = lock(&self.inflight);
                let task = self.runtime.spawn(async move {
                    let resp = d
                        .request(&h, &request_era, id.clone(), &method, params.as_ref())
                        .await;
                    lock(&flight).remove(&key(&id));
                    out.emit(&resp);
                });
                inflight.insert(k, task.abort_handle());
            }
        }
    }
}

fn lock(inflight: &InFlight) -> MutexGuard<'_, HashMap<String, AbortHandle>> {
    inflight.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves until stdin closes. Returns after the in-flight commands were stopped.
pub async fn serve(dispatcher: Arc<Dispatcher>, host: SessionHost) -> std::io::Result<()> {
    let out = Arc::new(Out::default());
    let writer = {
        let out = out.clone();
        std::thread::spawn(move || out.write_queued())
    };
    let host = host.with_notifier({
        let out = out.clone();
        crate::progress::Notifier::new(move |msg| out.emit(&msg))
    });
    let inflight: InFlight = Arc::default();
    let mut session = Session {
        dispatcher,
        host: host.clone(),
        out: out.clone(),
        inflight: inflight.clone(),
        era: None,
        runtime: tokio::runtime::Handle::current(),
    };
    let (ended_tx, ended) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = ended_tx.send(read_lines(&mut session));
    });
    let read = ended.await.unwrap_or(Ok(()));
    // EOF: the client is gone. Stop what still runs; nobody will read the answers.
    let handles: Vec<AbortHandle> = lock(&inflight).drain().map(|(_, h)| h).collect();
    for h in handles {
        h.abort();
    }
    drop(host);
    out.finish();
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    read
}

fn requested_modern(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(shared::mcp::META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        == Some(MODERN_VERSION)
}

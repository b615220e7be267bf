//! A request whose client reads event streams and asked for progress: answered as JSON
//! when its result comes soon enough, as an SSE stream only when a notification must
//! really go out first.
//!
//! The newest MCP clients cap one SSE event at 1 MiB (the Python SDK 2.x, FastMCP 4,
//! pydantic-ai), and a result holds up to `--output-limit` (2 MiB) of output, JSON-escaped:
//! an SSE answer carrying it fails there (issue 45). So the answer waits for its first
//! message: the result is answered as plain JSON; a notification starts a grace window
//! ([`GRACE`]) in which a result still goes out as JSON (the notifications of a call that
//! already ended told of nothing left to wait for, and are dropped); only a call still
//! running when the window ends streams: its notifications, then its result. Closing the
//! connection cancels the request, in the window or while streaming.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use shared::mcp::{Dispatcher, Era, Outcome, Params, RequestId};
use shared::transport::modern_status;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::AbortHandle;

use super::{AbortOnDrop, status_code};
use crate::computers::SessionHost;

/// How long a request's first notification may wait for its result before the answer
/// becomes a stream.
pub(super) const GRACE: Duration = Duration::from_secs(2);

/// At most this many notifications wait in the window (the newest are kept).
const HELD_MAX: usize = 64;

/// The largest event a stream sends: the newest clients refuse one over 1 MiB (with room
/// for the SSE framing).
const EVENT_MAX: usize = 1_000_000;

/// What the request's task sends.
enum Out {
    /// A notification (progress) to go out before the result.
    Note(shared::mcp::ProgressNote),
    /// The JSON-RPC response.
    Done(shared::mcp::Response),
}

/// A started request whose answer is not chosen yet.
pub(super) struct Pending {
    rx: UnboundedReceiver<Out>,
    /// Cancels the request when the answer is dropped (the client went away).
    guard: AbortOnDrop,
    modern: bool,
    /// The request's id, for the answer of a request that was cancelled.
    id: RequestId,
}

/// Starts the request; returns what answers it and, for cancellation by id, its key and
/// abort handle.
pub(super) fn start(
    host: SessionHost,
    d: Arc<Dispatcher>,
    era: Era,
    id: RequestId,
    method: String,
    params: Params,
    on_done: impl FnOnce() + Send + 'static,
) -> (Pending, (RequestId, AbortHandle)) {
    let (tx, rx) = unbounded_channel::<Out>();
    let notes = tx.clone();
    let host = host.with_notifier(crate::progress::Notifier::new(move |msg| {
        let _ = notes.send(Out::Note(msg));
    }));
    let key = id.clone();
    let modern = era == Era::Modern;
    let rid = id.clone();
    let task = tokio::spawn(async move {
        let resp = d.request(&host, &era, id, &method, &params).await;
        let _ = tx.send(Out::Done(resp));
        on_done();
    });
    let handle = task.abort_handle();
    let pending = Pending {
        rx,
        guard: AbortOnDrop(task.abort_handle()),
        modern,
        id: rid,
    };
    (pending, (key, handle))
}

impl Pending {
    /// The answer: JSON when the result comes first or within [`GRACE`] of the first
    /// notification, else an SSE stream.
    pub(super) async fn respond(mut self) -> Response {
        let mut held: Vec<shared::mcp::ProgressNote> = Vec::new();
        let mut window: Option<tokio::time::Instant> = None;
        loop {
            let next = match window {
                None => self.rx.recv().await,
                Some(until) => match tokio::time::timeout_at(until, self.rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            match next {
                Some(Out::Done(resp)) => return self.json(resp),
                Some(Out::Note(note)) => {
                    if held.len() == HELD_MAX {
                        held.remove(0);
                    }
                    held.push(note);
                    window.get_or_insert_with(|| tokio::time::Instant::now() + GRACE);
                }
                // The task ended without an answer (aborted).
                None => {
                    let resp = shared::mcp::Response::error(
                        Some(self.id.clone()),
                        shared::mcp::codes::INTERNAL_ERROR,
                        "request cancelled",
                    );
                    return self.json(resp);
                }
            }
        }
        self.stream(held)
    }

    fn json(&self, resp: shared::mcp::Response) -> Response {
        let status = match self.modern {
            true => status_code(modern_status(&resp)),
            false => StatusCode::OK,
        };
        super::rpc_response(status, &resp)
    }

    /// The held notifications, then everything else the request sends, as SSE.
    fn stream(self, held: Vec<shared::mcp::ProgressNote>) -> Response {
        let Pending { rx, guard, .. } = self;
        let event =
            |text: String| Ok::<_, Infallible>(Event::default().event("message").data(text));
        let first = futures_util::stream::iter(
            held.iter()
                .map(|note| event(note.to_json()))
                .collect::<Vec<_>>(),
        );
        let rest = futures_util::stream::unfold(
            (rx, guard, false),
            move |(mut rx, guard, ended)| async move {
                if ended {
                    return None;
                }
                match rx.recv().await? {
                    Out::Note(msg) => Some((event(msg.to_json()), (rx, guard, false))),
                    Out::Done(resp) => Some((event(fit_event(resp).to_json()), (rx, guard, true))),
                }
            },
        );
        let mut resp = Sse::new(futures_util::StreamExt::chain(first, rest)).into_response();
        resp.headers_mut()
            .insert("x-accel-buffering", HeaderValue::from_static("no"));
        resp
    }
}

/// A streamed result made to fit one event ([`EVENT_MAX`]). A command's output keeps its
/// end (where errors and summaries are): the start of the longer of stdout and stderr is
/// left out, and stderr says how much and what to do instead; exact-byte copies
/// (`*_base64`) go first. Anything else too big becomes an error that says to call again
/// (a call streams only while it waited, e.g. for its computer to be made, so the next
/// one answers as plain JSON) or to ask for less.
fn fit_event(mut resp: shared::mcp::Response) -> shared::mcp::Response {
    let size = |r: &shared::mcp::Response| r.to_vec().len();
    let whole = size(&resp);
    if whole <= EVENT_MAX {
        return resp;
    }
    let mut left_out = [0usize; 2];
    for _ in 0..8 {
        let over = size(&resp).saturating_sub(EVENT_MAX);
        if over == 0 {
            break;
        }
        let Outcome::Result(result) = &mut resp.outcome else {
            break;
        };
        let Some(out) = result
            .pointer_mut("/structuredContent")
            .and_then(Value::as_object_mut)
            .filter(|o| o.get("stdout").is_some_and(Value::is_string))
        else {
            break;
        };
        if out.remove("stdout_base64").is_none() && out.remove("stderr_base64").is_none() {
            let len = |k: &str| out.get(k).and_then(Value::as_str).map_or(0, str::len);
            let (which, key) = match len("stdout") >= len("stderr") {
                true => (0, "stdout"),
                false => (1, "stderr"),
            };
            let text = out.get(key).and_then(Value::as_str).unwrap_or_default();
            // Each byte is in the result twice (structured and text), escaped at least once.
            let mut cut = (over / 2 + 512).min(text.len());
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            left_out[which] += cut;
            let kept = text[cut..].to_owned();
            out.insert(key.into(), Value::String(kept));
        }
        let notice = format!(
            "\n[mcp-sandbox-computer: the first {} bytes of stdout and {} of stderr are left out: \
             this answer was streamed (the call sent progress for over 2 s) and MCP clients take \
             at most 1 MiB in one streamed event. For big output, redirect it to a file, or use \
             yield_ms and terminal_job.]",
            left_out[0], left_out[1]
        );
        let stderr = out
            .get("stderr")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let stderr = match stderr.find("\n[mcp-sandbox-computer: the first ") {
            Some(at) => format!("{}{notice}", &stderr[..at]),
            None => format!("{stderr}{notice}"),
        };
        out.insert("stderr".into(), Value::String(stderr));
        let text = shared::json::to_string(&Value::Object(out.clone()));
        if let Some(block) = result.pointer_mut("/content/0/text") {
            *block = Value::String(text);
        }
    }
    if size(&resp) <= EVENT_MAX {
        return resp;
    }
    let message = format!(
        "this answer ({whole} bytes) is too big for one streamed event (MCP clients take at most \
         1 MiB): it was streamed because the call waited over 2 s (e.g. for its computer to be \
         made). Call again: the answer then comes as plain JSON; or ask for less."
    );
    let result =
        serde_json::to_value(shared::result::operation_error(&message)).unwrap_or(Value::Null);
    resp.outcome = Outcome::Result(result);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::catalogue::{Groups, ToolNames};
    use shared::mcp::ServerConfig;

    use crate::computers::Computers;
    use crate::fake::Fake;

    fn dispatcher() -> Arc<Dispatcher> {
        Arc::new(Dispatcher::new(ServerConfig {
            name: "t".into(),
            version: "0".into(),
            names: ToolNames::with_groups("terminal_execute", Groups::ALL),
            exec_description: "run".into(),
            instructions: None,
            dashboard_html: None,
            tasks: false,
        }))
    }

    /// The answer to a call of `command` with a progress token: its content type and body.
    async fn answer(command: &str) -> (String, String) {
        let host = SessionHost::new(Computers::over_fake(Fake::default()), "session:a", false);
        let params: Params = serde_json::from_value(serde_json::json!({"name": "terminal_execute",
            "arguments": {"command": command}, "_meta": {"progressToken": "p"}}))
        .unwrap();
        let era = Era::Legacy("2025-11-25".into());
        let (pending, _) = start(
            host,
            dispatcher(),
            era,
            RequestId::number(7),
            "tools/call".into(),
            params,
            || {},
        );
        let resp = pending.respond().await;
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        (ct, body)
    }

    #[tokio::test]
    async fn issue_45_a_result_within_the_window_is_plain_json() {
        for command in ["echo quiet", "note 100"] {
            let (ct, body) = answer(command).await;
            assert!(ct.starts_with("application/json"), "{command}: {ct}");
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            assert_eq!(v["id"], 7, "{command}: {body}");
            assert_eq!(v["result"]["isError"], false, "{body}");
        }
    }

    #[tokio::test]
    async fn a_call_still_running_after_the_window_streams_its_notes_then_its_result() {
        let ms = GRACE.as_millis() + 500;
        let (ct, body) = answer(&format!("note {ms}")).await;
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let msgs: Vec<Value> = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect();
        assert_eq!(msgs.len(), 2, "{body}");
        assert_eq!(msgs[0]["method"], "notifications/progress");
        assert_eq!(msgs[0]["params"]["message"], "working");
        assert_eq!(msgs[1]["id"], 7);
        assert_eq!(msgs[1]["result"]["structuredContent"]["exit_code"], 0);
    }

    /// Issue 45: a streamed result over what the newest clients take in one event (1 MiB)
    /// keeps its output's end, says what was left out, and fits.
    #[tokio::test]
    async fn issue_45_a_streamed_result_fits_one_event() {
        let ms = GRACE.as_millis() + 300;
        let (ct, body) = answer(&format!("note {ms} 1500000")).await;
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let events: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .collect();
        assert_eq!(events.len(), 2, "{}", &body[..200.min(body.len())]);
        assert!(
            events.iter().all(|e| e.len() <= EVENT_MAX),
            "an event over 1 MiB"
        );
        let last: Value = serde_json::from_str(events[1].trim()).unwrap();
        let out = &last["result"]["structuredContent"];
        let stdout = out["stdout"].as_str().unwrap();
        assert!(stdout.len() > 400_000 && stdout.bytes().all(|b| b == b'a'));
        let stderr = out["stderr"].as_str().unwrap();
        let left = 1_500_000 - stdout.len();
        assert!(
            stderr.contains(&format!("the first {left} bytes of stdout")),
            "{stderr}"
        );
        let text: Value =
            serde_json::from_str(last["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(&text, out, "the text block is the structured content");
    }

    #[test]
    fn a_streamed_answer_that_is_not_output_and_too_big_says_to_call_again() {
        let big = "x".repeat(EVENT_MAX);
        let resp = shared::mcp::Response::success(
            RequestId::number(3),
            serde_json::json!({"content": [{"type": "text", "text": big}],
                "structuredContent": {"content": big}}),
        );
        let fitted = serde_json::to_value(fit_event(resp)).unwrap();
        assert_eq!(fitted["id"], 3);
        assert_eq!(
            fitted["result"]["isError"], true,
            "{}",
            fitted["result"]["content"]
        );
        let msg = fitted["result"]["structuredContent"]["error"]
            .as_str()
            .unwrap();
        assert!(msg.contains("Call again"), "{msg}");
        let small = shared::mcp::Response::success(RequestId::number(1), serde_json::json!({}));
        assert_eq!(fit_event(small.clone()), small);
    }
}

//! The frames that reach kept jobs (`kept.rs`): start, read, peek, close stdin, signal,
//! list, and stdin. A read may wait, so it never runs on the connection's own thread.

use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;

use crate::frame::{CHUNK, Frame, JobControl, Kind, split_job_stdin};
use crate::kept::Kept;
use crate::proc::{Writer, send};
use crate::run::start_job;
use crate::sink::Sink;
use crate::state::State;

fn error(w: &Writer, req: u32, message: impl Into<String>) {
    send(
        w,
        &Frame::new(Kind::Error, req, message.into().into_bytes()),
    );
}

fn done(w: &Writer, req: u32, body: &impl serde::Serialize) {
    match serde_json::to_vec(body) {
        Ok(bytes) => send(w, &Frame::new(Kind::Done, req, bytes)),
        Err(e) => error(w, req, e.to_string()),
    }
}

fn unknown(w: &Writer, req: u32, id: &str) {
    error(
        w,
        req,
        format!("no job {id} on this computer (it never existed, or it ended and was read)"),
    );
}

/// Serves one `Job` request (`req` is the connection's number for it).
pub(crate) fn control(state: &Arc<State>, w: &Writer, req: u32, control: JobControl) {
    match control {
        JobControl::Start {
            job_id,
            command,
            spec,
            buffer_bytes,
        } => {
            if job_id.is_empty() || job_id.len() > 128 {
                return error(w, req, "a job id has 1 to 128 bytes");
            }
            let kept = Arc::new(Kept::new(job_id, command, spec.timeout_ms, buffer_bytes));
            if let Err(why) = state.kept.insert(kept.clone()) {
                return error(w, req, why);
            }
            kept.attach(start_job(state, spec, Sink::Kept(kept.clone())));
            let status = kept.current();
            done(w, req, &status);
        }
        JobControl::Read {
            job_id,
            wait_ms,
            until_exit,
            max_bytes,
        } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            let (w, state) = (w.clone(), state.clone());
            // A read may wait: never on the connection's own thread.
            crate::workers::spawn(move || {
                let max = usize::try_from(max_bytes.max(1)).unwrap_or(usize::MAX);
                let (stdout, stderr, status) =
                    kept.read(Duration::from_millis(wait_ms), until_exit, max);
                for (kind, bytes) in [(Kind::Stdout, stdout), (Kind::Stderr, stderr)] {
                    for chunk in bytes.chunks(CHUNK) {
                        send(&w, &Frame::new(kind, req, chunk.to_vec()));
                    }
                }
                if status.exit.is_some() {
                    state.kept.remove(&job_id);
                }
                done(&w, req, &status);
            });
        }
        JobControl::Peek { job_id, max_bytes } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
            let (stdout, stderr, status) = kept.peek(max);
            for (kind, bytes) in [(Kind::Stdout, stdout), (Kind::Stderr, stderr)] {
                for chunk in bytes.chunks(CHUNK) {
                    send(w, &Frame::new(kind, req, chunk.to_vec()));
                }
            }
            done(w, req, &status);
        }
        JobControl::CloseStdin { job_id } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            kept.close_stdin();
            done(w, req, &serde_json::json!({}));
        }
        JobControl::Signal { job_id, signal } => {
            let Some(kept) = state.kept.get(&job_id) else {
                return unknown(w, req, &job_id);
            };
            let Some(sig) = Signal::from_named_raw(signal) else {
                return error(w, req, format!("{signal} is not a signal number"));
            };
            // An ended job has no group left: signalling it is a no-op, not an error.
            kept.signal(sig);
            done(w, req, &serde_json::json!({}));
        }
        JobControl::List {} => done(w, req, &state.kept.list()),
    }
}

/// Serves one `JobStdin` frame.
pub(crate) fn stdin(state: &Arc<State>, w: &Writer, req: u32, payload: &[u8]) {
    let Some((job_id, bytes)) = split_job_stdin(payload) else {
        return error(w, req, "bad stdin frame");
    };
    let Some(kept) = state.kept.get(job_id) else {
        return unknown(w, req, job_id);
    };
    if kept.send_stdin(bytes) {
        done(w, req, &serde_json::json!({}));
    } else {
        error(
            w,
            req,
            format!("job {job_id} takes no more input: its stdin was closed, or it ended"),
        );
    }
}

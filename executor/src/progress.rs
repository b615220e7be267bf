//! MCP progress notifications while a computer is being made (image pull, create, start),
//! and while a foreground command runs: its newest output line, at most every 250 ms
//! ([`LineTicker`], SPEC §3.8).
//!
//! A caller opts in with `_meta.progressToken`; transports that can deliver notifications
//! alongside a pending request (stdio, an SSE stream) hand the host a [`Notifier`]. Where
//! there is no token or no notifier, reporting is a no-op.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shared::mcp::{ProgressNote, ProgressToken};

/// Where a transport takes the notifications that go out beside a pending request: it
/// sends them in the order they are given, before anything the same task answers later.
#[derive(Clone)]
pub struct Notifier(Arc<dyn Fn(ProgressNote) + Send + Sync>);

impl Notifier {
    pub fn new(send: impl Fn(ProgressNote) + Send + Sync + 'static) -> Self {
        Self(Arc::new(send))
    }

    /// Sends to a channel (an SSE stream's, a test's).
    pub fn channel(tx: tokio::sync::mpsc::UnboundedSender<ProgressNote>) -> Self {
        Self::new(move |msg| {
            let _ = tx.send(msg);
        })
    }

    pub fn send(&self, msg: ProgressNote) {
        (self.0)(msg);
    }
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notifier")
    }
}

/// Where progress goes for one tool call.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    sink: Option<(Notifier, ProgressToken)>,
    step: Arc<AtomicU64>,
}

impl Progress {
    /// Progress for a call with `token`, delivered to `tx`.
    pub fn new(tx: Option<Notifier>, token: Option<ProgressToken>) -> Self {
        Self {
            sink: tx.zip(token),
            step: Arc::default(),
        }
    }

    /// Sends `notifications/progress` with a strictly increasing `progress`.
    pub fn report(&self, message: &str) {
        if let Some((tx, token)) = &self.sink {
            let progress = self.step.fetch_add(1, Ordering::Relaxed) + 1;
            tx.send(ProgressNote {
                token: token.clone(),
                progress,
                message: message.to_owned(),
            });
        }
    }
}

impl Progress {
    /// Whether anything would be delivered.
    pub fn is_on(&self) -> bool {
        self.sink.is_some()
    }
}

/// The least time between two output notifications of one call.
const EVERY: Duration = Duration::from_millis(250);
/// The longest line shown, in characters.
const LINE_MAX: usize = 200;
/// The most of an unfinished line kept while waiting for its end.
const PARTIAL_MAX: usize = 4096;

/// Turns a command's output into progress notifications of its newest complete line.
#[derive(Debug)]
pub struct LineTicker {
    progress: Progress,
    last_sent: Option<Instant>,
    partial: Vec<u8>,
    newest: Option<String>,
}

impl LineTicker {
    pub fn new(progress: Progress) -> Self {
        Self {
            progress,
            last_sent: None,
            partial: Vec::new(),
            newest: None,
        }
    }

    /// Feeds output; reports the newest complete line when the last report is old enough.
    pub fn push(&mut self, bytes: &[u8]) {
        if !self.progress.is_on() {
            return;
        }
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
            if self.partial.len() < PARTIAL_MAX {
                let room = PARTIAL_MAX - self.partial.len();
                self.partial
                    .extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            return self.tick();
        };
        let before = &bytes[..end];
        let line = match before.iter().rposition(|b| *b == b'\n') {
            Some(start) => before[start + 1..].to_vec(),
            None => {
                let mut l = std::mem::take(&mut self.partial);
                l.extend_from_slice(before);
                l
            }
        };
        self.partial.clear();
        let rest = &bytes[end + 1..];
        self.partial
            .extend_from_slice(&rest[..rest.len().min(PARTIAL_MAX)]);
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\r');
        if !text.trim().is_empty() {
            self.newest = Some(text.chars().take(LINE_MAX).collect());
        }
        self.tick();
    }

    fn tick(&mut self) {
        if self.last_sent.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        if let Some(line) = self.newest.take() {
            self.progress.report(&line);
            self.last_sent = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_are_reported_newest_first_and_throttled() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut t = LineTicker::new(Progress::new(
            Some(Notifier::channel(tx)),
            Some(ProgressToken::number(7)),
        ));
        t.push(b"par");
        t.push(b"tial one\ntwo\r\nthr");
        let first = rx.try_recv().unwrap();
        assert_eq!(first.message, "two");
        // Within 250 ms nothing more goes out, however much comes in.
        t.push(b"ee\nfour\n");
        assert!(rx.try_recv().is_err());
        std::thread::sleep(EVERY);
        t.push(b"five\n");
        assert_eq!(rx.try_recv().unwrap().message, "five");
        // No token: nothing at all, and no work.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut off = LineTicker::new(Progress::new(Some(Notifier::channel(tx)), None));
        off.push(b"a\n");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn reports_increase_and_need_a_token() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        Progress::new(Some(Notifier::channel(tx.clone())), None).report("x");
        assert!(rx.try_recv().is_err());
        let p = Progress::new(
            Some(Notifier::channel(tx)),
            Some(ProgressToken::Text("t1".into())),
        );
        p.report("a");
        p.report("b");
        let a = rx.try_recv().unwrap();
        let b = rx.try_recv().unwrap();
        assert_eq!(
            a.to_json(),
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":1,"message":"a"}}"#
        );
        assert_eq!((b.progress, b.message.as_str()), (2, "b"));
    }
}

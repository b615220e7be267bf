//! MCP over stdio: newline-delimited JSON-RPC on stdin/stdout, one caller (this process).
//!
//! Owns framing, concurrency (each request runs as its own task, so several execs run at
//! once and a slow one never blocks `ping`), `notifications/cancelled` (aborting a request
//! kills its command inside the computer), the order of what goes out ([`Out`]) and the end
//! of the session on EOF, and JSON-RPC batches in 2025-03-26 sessions (the one revision
//! that has them). Only JSON-RPC goes to stdout; logs go to stderr.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use shared::mcp::{
    Dispatcher, Era, Incoming, MODERN_VERSION, Params, RequestId, Response, codes, negotiate,
    parse_message,
};
use tokio::task::AbortHandle;

use crate::computers::SessionHost;

/// Longest accepted line (stdin payloads are ≤ 2 MiB, JSON escaping can grow them 6×).
const MAX_LINE: usize = 16 * 1024 * 1024;

type InFlight = Arc<Mutex<HashMap<Flight, AbortHandle>>>;

/// What runs: a request (cancelled by its id), or a batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Flight {
    Request(RequestId),
    Batch(u64),
}

/// One line of stdin, as the [`Splitter`] cut it.
enum Line {
    Read(Vec<u8>),
    /// Over [`MAX_LINE`]; the rest of it was skipped.
    TooLarge,
}

/// Splits stdin's bytes into lines (each with its `\n`), as they come; a line longer than
/// [`MAX_LINE`] becomes one [`Line::TooLarge`] and the rest of it is skipped.
#[derive(Default)]
struct Splitter {
    line: Vec<u8>,
    /// Inside a line already answered as too large.
    skipping: bool,
}

impl Splitter {
    /// Hands each line that `bytes` completes to `take`, and keeps the unfinished rest.
    fn feed(&mut self, mut bytes: &[u8], take: &mut impl FnMut(Line)) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|b| *b == b'\n');
            let (part, rest) = bytes.split_at(end.map_or(bytes.len(), |i| i + 1));
            bytes = rest;
            let done = end.is_some();
            if self.skipping {
                self.skipping = !done;
                continue;
            }
            if self.line.len() + part.len() > MAX_LINE {
                self.line = Vec::new();
                self.skipping = !done;
                take(Line::TooLarge);
                continue;
            }
            self.line.extend_from_slice(part);
            if done {
                take(Line::Read(std::mem::take(&mut self.line)));
            }
        }
    }

    /// At the end of input: an unfinished last line is still a line.
    fn finish(self, take: &mut impl FnMut(Line)) {
        if !self.line.is_empty() {
            take(Line::Read(self.line));
        }
    }
}

/// Bytes read from stdin at once.
const CHUNK: usize = 64 * 1024;

/// Reads stdin on a thread of its own and hands each line to `session` there, until EOF
/// or a read error: for a stdin the runtime cannot watch (a file, a terminal). A thread,
/// not tokio's stdin: that one hands every read to the blocking pool, which costs a warm
/// exec two wake-ups more.
fn read_lines(session: &mut Session) -> std::io::Result<()> {
    use std::io::Read;
    let mut stdin = std::io::stdin().lock();
    let mut chunk = vec![0u8; CHUNK];
    let mut split = Splitter::default();
    loop {
        match stdin.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => split.feed(&chunk[..n], &mut |l| session.take(l)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    split.finish(&mut |l| session.take(l));
    Ok(())
}

/// stdin, when it is a pipe or a socket (what an MCP client gives) that answers
/// `FIONREAD`, watched by the runtime's poller: a request then wakes a worker directly,
/// which reads it and runs it, with no hand-off from a reader thread. A copy of the
/// descriptor, left blocking (others may share it): only what `FIONREAD` says is there is
/// read, so no read ever blocks.
fn watchable_stdin() -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use rustix::fs::FileType;
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let stat = rustix::fs::fstat(stdin.as_fd()).ok()?;
    if !matches!(
        FileType::from_raw_mode(stat.st_mode),
        FileType::Fifo | FileType::Socket
    ) {
        return None;
    }
    // Where the kernel cannot say how much is waiting, the thread reads.
    rustix::io::ioctl_fionread(stdin.as_fd()).ok()?;
    let fd = stdin.as_fd().try_clone_to_owned().ok()?;
    // SAFETY: the contract is that the descriptor stays open and names the same file
    // description for the AsyncFd's whole life. It owns the OwnedFd, which owns the
    // descriptor: nothing else closes or replaces it.
    #[allow(unsafe_code)]
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    };
    fd.ok()
}

/// What is in `fd` now, at most `buf.len()` bytes; `Ok(0)` at its end (`closed`: the other
/// side hung up), `WouldBlock` when nothing is there yet.
fn read_available(
    fd: &std::os::fd::OwnedFd,
    buf: &mut [u8],
    closed: bool,
) -> std::io::Result<usize> {
    let available = rustix::io::ioctl_fionread(fd)?;
    if available == 0 && !closed {
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    let want = usize::try_from(available)
        .unwrap_or(usize::MAX)
        .clamp(1, buf.len());
    let buf = buf.get_mut(..want).unwrap_or_default();
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Err(rustix::io::Errno::INTR) => {}
            r => return Ok(r?),
        }
    }
}

/// Reads stdin on the runtime (see [`watchable_stdin`]) and hands each line to `session`,
/// until EOF or a read error.
async fn read_lines_polled(
    session: &mut Session,
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
) -> std::io::Result<()> {
    let mut chunk = vec![0u8; CHUNK];
    let mut split = Splitter::default();
    loop {
        let mut ready = fd.readable().await?;
        let closed = ready.ready().is_read_closed();
        match ready.try_io(|fd| read_available(fd.get_ref(), &mut chunk, closed)) {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => split.feed(&chunk[..n], &mut |l| session.take(l)),
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
    split.finish(&mut |l| session.take(l));
    Ok(())
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

    /// Sends one response.
    fn emit(&self, resp: &Response) {
        self.send(resp.to_vec());
    }

    /// Sends one message (a notification, or a batch's answer), as JSON text.
    fn send(&self, mut line: Vec<u8>) {
        line.push(b'\n');
        let mut st = self.state();
        if st.broken {
            return;
        }
        if line.len() <= INLINE_MAX && !st.busy && st.queue.is_empty() {
            st.busy = true;
            drop(st);
            let ok = write_line(&line);
            return self.written_inline(ok);
        }
        st.queue.push_back(line);
        self.wake.notify_one();
    }

    /// A line written inline is out (`ok`: stdout took it).
    fn written_inline(&self, ok: bool) {
        let mut st = self.state();
        st.busy = false;
        st.broken |= !ok;
        // The writer may be waiting for this line to be out: for the next queued line, or
        // to end (it was told to while this line was being written).
        if !st.queue.is_empty() || st.broken || st.done {
            self.wake.notify_one();
        }
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
                return self.out.emit(&Response::error(
                    None,
                    codes::INVALID_REQUEST,
                    "message too large (16 MiB at most)",
                ));
            }
        };
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        if trimmed.starts_with(b"[") {
            return self.take_batch(trimmed);
        }
        match parse_message(trimmed) {
            Err(resp) => self.out.emit(&resp),
            Ok(Incoming::Response) => {}
            Ok(Incoming::Notification { method, params }) => self.notified(&method, params),
            Ok(Incoming::Request { id, method, params }) => {
                if method == "initialize" {
                    let version = negotiate(params.protocol_version.as_str());
                    self.era = Some(Era::Legacy(version.to_owned()));
                    let result = self.dispatcher.initialize_result(version);
                    return self.out.emit(&Response::success(id, result));
                }
                let request_era = match (&self.era, requested_modern(&params)) {
                    (_, true) | (None, _) => Era::Modern,
                    (Some(e), false) => e.clone(),
                };
                let out = self.out.clone();
                let d = self.dispatcher.clone();
                let h = self.host.clone();
                let k = Flight::Request(id.clone());
                let flight = self.inflight.clone();
                // Registered before the task can end and remove itself.
                let mut inflight = lock(&self.inflight);
                let task = self.runtime.spawn(async move {
                    let resp = d
                        .request(&h, &request_era, id.clone(), &method, &params)
                        .await;
                    lock(&flight).remove(&Flight::Request(id));
                    out.emit(&resp);
                });
                inflight.insert(k, task.abort_handle());
            }
        }
    }

    /// A notification: only `notifications/cancelled` does anything (it aborts its request).
    fn notified(&self, method: &str, params: Params) {
        if method == "notifications/cancelled"
            && let shared::mcp::Field::Is(id) = params.request_id
        {
            let handle = lock(&self.inflight).remove(&Flight::Request(id.clone()));
            if let Some(h) = handle {
                tracing::info!(request_id = %id, "request cancelled by the client");
                h.abort();
            }
        }
    }

    /// A JSON-RPC batch: only a 2025-03-26 session takes one (the revision that has them,
    /// as over HTTP). Its requests run concurrently and are answered as one array, in
    /// order, once all are done; its notifications act at once; `initialize` cannot be in
    /// one. A batch of notifications only is answered with nothing.
    fn take_batch(&mut self, line: &[u8]) {
        let version = match &self.era {
            Some(Era::Legacy(v)) => v.clone(),
            _ => MODERN_VERSION.to_owned(),
        };
        if let Some((_, refusal)) = shared::transport::route::batch_refused(&version) {
            return self.out.emit(&refusal);
        }
        let raws: Vec<Box<serde_json::value::RawValue>> = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                return self.out.emit(&Response::error(
                    None,
                    codes::PARSE_ERROR,
                    format!("parse error: {e}"),
                ));
            }
        };
        if raws.is_empty() {
            return self.out.emit(&Response::error(
                None,
                codes::INVALID_REQUEST,
                "an empty batch: send at least one JSON-RPC message",
            ));
        }
        let era = Era::Legacy(version);
        let mut answers = Vec::with_capacity(raws.len());
        for raw in &raws {
            match parse_message(raw.get().as_bytes()) {
                Err(resp) => answers.push(Answer::Now(resp)),
                Ok(Incoming::Response) => {}
                Ok(Incoming::Notification { method, params }) => self.notified(&method, params),
                Ok(Incoming::Request { id, method, .. }) if method == "initialize" => {
                    answers.push(Answer::Now(Response::error(
                        Some(id),
                        codes::INVALID_REQUEST,
                        "`initialize` cannot be part of a batch: send it alone",
                    )));
                }
                Ok(Incoming::Request { id, method, params }) => {
                    answers.push(Answer::Later(id, method, Box::new(params)));
                }
            }
        }
        if answers.is_empty() {
            return;
        }
        let (out, d, h) = (self.out.clone(), self.dispatcher.clone(), self.host.clone());
        // Registered like a request, so the end of stdin stops it too.
        let k = Flight::Batch(rand::random::<u64>());
        let (flight, done_key) = (self.inflight.clone(), k.clone());
        let mut inflight = lock(&self.inflight);
        let task = self.runtime.spawn(async move {
            let responses = answers.into_iter().map(|a| {
                let (d, h, era) = (d.clone(), h.clone(), era.clone());
                async move {
                    match a {
                        Answer::Now(resp) => resp,
                        Answer::Later(id, method, params) => {
                            d.request(&h, &era, id, &method, &params).await
                        }
                    }
                }
            });
            let responses = futures_util::future::join_all(responses).await;
            lock(&flight).remove(&done_key);
            out.send(shared::mcp::batch_to_vec(&responses));
        });
        inflight.insert(k, task.abort_handle());
    }
}

/// One element's answer in a batch: known already, or a request to run.
enum Answer {
    Now(Response),
    Later(RequestId, String, Box<Params>),
}

fn lock(inflight: &InFlight) -> MutexGuard<'_, HashMap<Flight, AbortHandle>> {
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
        crate::progress::Notifier::new(move |note| out.send(note.to_vec()))
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
    let read = match watchable_stdin() {
        // On a worker, not here on the runtime's entry thread: a request spawned from a
        // worker starts on the same worker.
        Some(fd) => tokio::spawn(async move { read_lines_polled(&mut session, fd).await })
            .await
            .unwrap_or(Ok(())),
        None => {
            let (ended_tx, ended) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                let _ = ended_tx.send(read_lines(&mut session));
            });
            ended.await.unwrap_or(Ok(()))
        }
    };
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

fn requested_modern(params: &Params) -> bool {
    params.meta_version() == Some(MODERN_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a splitter makes of `chunks`, fed one after another.
    fn split(chunks: &[&[u8]]) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        let mut take = |l: Line| {
            out.push(match l {
                Line::Read(bytes) => Some(bytes),
                Line::TooLarge => None,
            })
        };
        let mut s = Splitter::default();
        for c in chunks {
            s.feed(c, &mut take);
        }
        s.finish(&mut take);
        out
    }

    /// The writer is told to end while a line is being written inline: it ends once the
    /// line is out (it used to wait for a wake-up that never came, and the session never
    /// ended at EOF).
    #[test]
    fn the_writer_ends_after_an_inline_line_it_waited_for() {
        let out = Arc::new(Out::default());
        out.state().busy = true;
        let writer = {
            let out = out.clone();
            std::thread::spawn(move || out.write_queued())
        };
        out.finish();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !writer.is_finished(),
            "the writer ended while a line was being written"
        );
        out.written_inline(true);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !writer.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer did not end"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        writer.join().expect("writer");
    }

    #[test]
    fn lines_are_split_across_and_within_reads() {
        assert_eq!(
            split(&[b"{\"a\":1}\n{\"b\"", b":2}\n\n{\"c\":3}"]),
            [
                Some(b"{\"a\":1}\n".to_vec()),
                Some(b"{\"b\":2}\n".to_vec()),
                Some(b"\n".to_vec()),
                // The last line needs no newline.
                Some(b"{\"c\":3}".to_vec()),
            ]
        );
        assert!(split(&[]).is_empty());
        assert!(split(&[b"", b""]).is_empty());
    }

    #[test]
    fn a_line_past_the_limit_is_answered_once_and_skipped() {
        let big = vec![b'x'; MAX_LINE];
        // MAX_LINE bytes with their newline fit; one more does not.
        let fits = [&big[..MAX_LINE - 1], b"\n"].concat();
        assert_eq!(split(&[&fits]), [Some(fits.clone())]);
        let out = split(&[&big, b"yyy", b"y\nnext\n"]);
        assert_eq!(out, [None, Some(b"next\n".to_vec())]);
        // Over the limit in one read, and at the end of input without a newline.
        let out = split(&[&[&big[..], b"x\nok\n"].concat(), &big, b"z"]);
        assert_eq!(out, [None, Some(b"ok\n".to_vec()), None]);
    }
}

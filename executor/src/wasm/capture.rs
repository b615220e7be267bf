//! Output capture for WASM commands: stdout and stderr writers that feed one
//! [`OutputCollector`] (the head of both streams, in arrival order, up to the limit) and
//! signal when the limit is hit, so the command is stopped like a Docker one. Both also feed
//! the call's live output (its newest line as progress, SPEC §3.8), as on Docker.
//! Once the call's output is taken, later writes (a background job kept between calls) are
//! accepted and dropped: the job goes on as if its output went nowhere.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use shared::result::{OutputCollector, Push, Stream};
use tokio::sync::Notify;

use crate::progress::{LineTicker, Progress};

/// The shared collector of one command.
#[derive(Debug, Clone)]
pub struct Capture {
    inner: Arc<Mutex<Option<Collecting>>>,
    limit_hit: Arc<Notify>,
}

/// What a command's writes feed until its call takes the output.
#[derive(Debug)]
struct Collecting {
    output: OutputCollector,
    live: LineTicker,
}

impl Capture {
    /// A capture of up to `limit` bytes whose output lines go to `progress`.
    pub fn new(limit: usize, progress: Progress) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Some(Collecting {
                output: OutputCollector::new(limit),
                live: LineTicker::new(progress),
            }))),
            limit_hit: Arc::new(Notify::new()),
        }
    }

    /// A writer for `stream`.
    pub fn writer(&self, stream: Stream) -> CaptureWriter {
        CaptureWriter {
            capture: self.clone(),
            stream,
        }
    }

    /// Resolves once the output limit is hit.
    pub async fn limit_hit(&self) {
        self.limit_hit.notified().await;
    }

    /// Takes what was collected: stdout, stderr, truncated. Later writes are dropped.
    pub fn take(&self) -> (Vec<u8>, Vec<u8>, bool) {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        c.take()
            .map_or_else(|| (Vec::new(), Vec::new(), false), |c| c.output.finish())
    }
}

/// One stream's writer; past the limit every write fails with `BrokenPipe`.
#[derive(Debug)]
pub struct CaptureWriter {
    capture: Capture,
    stream: Stream,
}

impl tokio::io::AsyncWrite for CaptureWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let pushed = {
            let mut c = self.capture.inner.lock().unwrap_or_else(|p| p.into_inner());
            match c.as_mut() {
                Some(c) => {
                    c.live.push(buf);
                    c.output.push(self.stream, buf)
                }
                // The call returned: nobody reads this any more.
                None => Push::More,
            }
        };
        match pushed {
            Push::More => Poll::Ready(Ok(buf.len())),
            Push::LimitHit => {
                self.capture.limit_hit.notify_one();
                Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn keeps_the_head_and_signals_the_limit() {
        let c = Capture::new(5, Progress::default());
        let mut out = c.writer(Stream::Stdout);
        let mut err = c.writer(Stream::Stderr);
        out.write_all(b"abc").await.unwrap();
        err.write_all(b"d").await.unwrap();
        let hit = c.clone();
        let waiter = tokio::spawn(async move { hit.limit_hit().await });
        assert!(out.write_all(b"efgh").await.is_err());
        waiter.await.unwrap();
        let (o, e, truncated) = c.take();
        assert_eq!(
            (o.as_slice(), e.as_slice(), truncated),
            (&b"abce"[..], &b"d"[..], true)
        );
        // After the take, writes succeed and go nowhere.
        out.write_all(b"later").await.unwrap();
        assert_eq!(c.take(), (Vec::new(), Vec::new(), false));
    }

    #[tokio::test]
    async fn output_lines_are_live_output_until_the_take() {
        use crate::progress::Notifier;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let token = shared::mcp::ProgressToken::Text("p1".into());
        let c = Capture::new(
            1024,
            Progress::new(Some(Notifier::channel(tx)), Some(token)),
        );
        let mut out = c.writer(Stream::Stdout);
        let mut err = c.writer(Stream::Stderr);
        out.write_all(b"step 1\n").await.unwrap();
        assert_eq!(rx.try_recv().unwrap().message, "step 1");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        err.write_all(b"warning 2\n").await.unwrap();
        assert_eq!(rx.try_recv().unwrap().message, "warning 2");
        let _ = c.take();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        out.write_all(b"after the call\n").await.unwrap();
        assert!(
            rx.try_recv().is_err(),
            "a kept job's output is nobody's progress"
        );
    }
}

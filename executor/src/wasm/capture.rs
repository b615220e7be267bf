//! Output capture for WASM commands: stdout and stderr writers that feed one
//! [`OutputCollector`] (the head of both streams, in arrival order, up to the limit) and
//! signal when the limit is hit, so the command is stopped like a Docker one. Once the
//! call's output is taken, later writes (a background job kept between calls) are
//! accepted and dropped: the job goes on as if its output went nowhere.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use shared::result::{OutputCollector, Push, Stream};
use tokio::sync::Notify;

/// The shared collector of one command.
#[derive(Debug, Clone)]
pub struct Capture {
    inner: Arc<Mutex<Option<OutputCollector>>>,
    limit_hit: Arc<Notify>,
}

impl Capture {
    pub fn new(limit: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Some(OutputCollector::new(limit)))),
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
            .map_or_else(|| (Vec::new(), Vec::new(), false), OutputCollector::finish)
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
                Some(c) => c.push(self.stream, buf),
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
        let c = Capture::new(5);
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
}

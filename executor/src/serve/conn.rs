//! One HTTP/1.1 connection: hyper serving the router, and a watchdog that closes the
//! connection when its client is too slow to send a request head or leaves it idle.
//!
//! The watchdog follows what the connection is doing ([`Activity`]): *idle* between
//! requests (the keep-alive timeout runs), *in a head* from the first byte of a request
//! head until hyper has parsed it (the header timeout runs; a fresh connection is in a
//! head from the moment it is accepted), or *busy* from the parsed head until the
//! response body has gone out. A busy connection has no deadline here: a long tool call
//! or an SSE stream may last as long as it needs, and its request body has its own read
//! timeout (`super::body::TimedBody`).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::HttpLimits;
use super::body::TimedBody;

/// What a connection is doing, for its watchdog.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Between requests since `since`; `head` is when the next head's first byte came.
    Idle {
        since: Instant,
        head: Option<Instant>,
    },
    /// Requests whose response has not gone out yet.
    Busy(usize),
}

/// The phase of one connection, shared by its reader, its service and its watchdog.
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            phase: Mutex::new(Phase::Idle {
                since: now,
                head: Some(now),
            }),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes came in: between requests, they start the next head.
    fn bytes_in(&self) {
        let mut p = self.phase();
        if let Phase::Idle {
            head: head @ None, ..
        } = &mut *p
        {
            *head = Some(Instant::now());
            drop(p);
            self.changed.notify_one();
        }
    }

    /// A request head was parsed: busy until the guard (kept by the response body) drops.
    fn begin(self: &Arc<Self>) -> Busy {
        {
            let mut p = self.phase();
            *p = match *p {
                Phase::Busy(n) => Phase::Busy(n + 1),
                Phase::Idle { .. } => Phase::Busy(1),
            };
        }
        self.changed.notify_one();
        Busy(self.clone())
    }

    /// When the watchdog acts next, and how; `None` while busy.
    fn deadline(&self, limits: &HttpLimits, idle_too: bool) -> Option<(Instant, Verdict)> {
        match *self.phase() {
            Phase::Busy(_) => None,
            Phase::Idle { head: Some(t), .. } => {
                Some((t + limits.header_timeout, Verdict::SlowHead))
            }
            Phase::Idle { since, head: None } if idle_too => {
                Some((since + limits.idle_timeout, Verdict::Idle))
            }
            Phase::Idle { .. } => None,
        }
    }
}

/// Keeps a connection busy while a response is on its way.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        {
            let mut p = self.0.phase();
            *p = match *p {
                Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
                _ => Phase::Idle {
                    since: Instant::now(),
                    head: None,
                },
            };
        }
        self.0.changed.notify_one();
    }
}

/// What the watchdog decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// No complete request head within the header timeout: close at once.
    SlowHead,
    /// Idle for the keep-alive timeout: close (gracefully; a request that just arrived
    /// is still answered).
    Idle,
}

/// Waits until the connection's deadline passes (checked again after every change).
async fn watchdog(act: &Activity, limits: &HttpLimits, idle_too: bool) -> Verdict {
    loop {
        let notified = act.changed.notified();
        match act.deadline(limits, idle_too) {
            None => notified.await,
            Some((at, verdict)) => {
                if at <= Instant::now() {
                    return verdict;
                }
                tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
        }
    }
}

/// The TCP stream, telling [`Activity`] when bytes come in.
struct Watched {
    inner: TcpStream,
    act: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.act.bytes_in();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body that keeps its connection busy until it is done (or dropped).
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The router as hyper's service for one connection: request bodies get their read
/// timeout, responses keep the connection busy.
#[derive(Clone)]
struct Service {
    app: TowerToHyperService<Router>,
    act: Arc<Activity>,
    body_timeout: Duration,
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let busy = self.act.begin();
        let req = req.map(|b| Body::new(TimedBody::new(b, self.body_timeout)));
        let answer = self.app.call(req);
        Box::pin(async move {
            let resp = answer.await?;
            Ok(resp.map(|body| Tracked { body, _busy: busy }))
        })
    }
}

/// Serves one connection until it ends, its watchdog closes it, or the server stops
/// (`stop` changes: the connection finishes its request, then closes).
pub(super) async fn serve(
    stream: TcpStream,
    app: Router,
    limits: HttpLimits,
    mut stop: watch::Receiver<()>,
) {
    let act = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        act: act.clone(),
    });
    let service = Service {
        app: TowerToHyperService::new(app),
        act: act.clone(),
        body_timeout: limits.body_timeout,
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The header timeout is ours (hyper's would also cut idle keep-alive connections).
    builder.header_read_timeout(None::<Duration>);
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let why = tokio::select! {
        r = conn.as_mut() => return log_end(r),
        v = watchdog(&act, &limits, true) => Some(v),
        _ = stop.changed() => None,
    };
    if why == Some(Verdict::SlowHead) {
        tracing::debug!("no request head within the header timeout; connection closed");
        return;
    }
    if why == Some(Verdict::Idle) {
        tracing::debug!("connection idle for the keep-alive timeout; closing");
    }
    conn.as_mut().graceful_shutdown();
    // Still cut a head that does not come; an idle connection closes by itself now.
    tokio::select! {
        r = conn.as_mut() => log_end(r),
        _ = watchdog(&act, &limits, false) => {
            tracing::debug!("no request head within the header timeout; connection closed");
        }
    }
}

fn log_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits {
            max_body: 1024,
            header_timeout: Duration::from_secs(2),
            body_timeout: Duration::from_secs(3),
            idle_timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn phases_pick_the_deadline() {
        let l = limits();
        let act = Arc::new(Activity::new());
        let (_, v) = act.deadline(&l, true).unwrap();
        assert_eq!(v, Verdict::SlowHead, "a fresh connection owes a head");
        let busy = act.begin();
        assert!(act.deadline(&l, true).is_none(), "busy: no deadline");
        act.bytes_in();
        assert!(
            act.deadline(&l, true).is_none(),
            "body bytes change nothing"
        );
        drop(busy);
        let (at, v) = act.deadline(&l, true).unwrap();
        assert_eq!(v, Verdict::Idle);
        assert!(at > Instant::now() + Duration::from_secs(4));
        assert!(act.deadline(&l, false).is_none());
        act.bytes_in();
        let (at, v) = act.deadline(&l, false).unwrap();
        assert_eq!(v, Verdict::SlowHead);
        assert!(at <= Instant::now() + Duration::from_secs(2));
    }
}

//! Request bodies: the read timeout every body gets, the size limit of the JSON routes,
//! and the lingering read that lets a client still sending a refused body see the answer.
//!
//! Owns [`TimedBody`] (a body that makes no progress fails with [`Stalled`]), the
//! [`buffer`] middleware (a whole body under `--http-max-body`, else 413; a stalled one
//! 408), and [`linger`]. Knows nothing of MCP or of the executor API: each server passes
//! the function that shapes its error replies ([`BodyLimit::reply`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use http_body::{Frame, SizeHint};

/// The slowest a body may come on average: each KiB received adds a second to the
/// time the server waits for it in all (`--http-body-timeout` plus this).
pub const MIN_RATE_BYTES_PER_SEC: u64 = 1024;

/// How long a refused body is still read (and dropped) after the answer went out.
pub const LINGER_TIME: Duration = Duration::from_secs(30);

/// The least a refused body is read for, whatever `--http-max-body` is (a 50 MB upload to
/// a server with the default limit still gets its 413).
const LINGER_MIN_BYTES: u64 = 64 << 20;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error of a body that made no progress: its client sent nothing for
/// `--http-body-timeout`, or came slower than [`MIN_RATE_BYTES_PER_SEC`] in all.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "the request body stalled: nothing arrived for {secs} s, or it came slower than 1 KiB/s (--http-body-timeout {secs}); send the whole body promptly"
)]
pub struct Stalled {
    pub secs: u64,
}

/// The body timeout, if that is what `e` (from reading a request body) is.
pub fn stalled(e: &(dyn std::error::Error + 'static)) -> Option<Stalled> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(s) = err.downcast_ref::<Stalled>() {
            return Some(*s);
        }
        cur = err.source();
    }
    None
}

/// A request body with a read timeout. Only the time spent waiting for the client counts
/// (a handler that is slow to ask for the next bytes is not the client's fault): one wait
/// may last at most `timeout`, and all of them at most `timeout` plus one second per
/// [`MIN_RATE_BYTES_PER_SEC`] bytes received, so a body sent a byte at a time is cut too.
pub struct TimedBody<B> {
    inner: B,
    timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    waiting_since: Option<Instant>,
    waited: Duration,
    received: u64,
    failed: bool,
}

impl<B> TimedBody<B> {
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: None,
            waiting_since: None,
            waited: Duration::ZERO,
            received: 0,
            failed: false,
        }
    }

    /// How long the wait that starts now may last.
    fn allowance(&self) -> Duration {
        let earned = Duration::from_secs_f64(self.received as f64 / MIN_RATE_BYTES_PER_SEC as f64);
        (self.timeout + earned)
            .saturating_sub(self.waited)
            .min(self.timeout)
    }
}

impl<B> http_body::Body for TimedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(since) = this.waiting_since.take() {
                    this.waited += since.elapsed();
                }
                this.sleep = None;
                if let Some(Ok(f)) = &frame
                    && let Some(data) = f.data_ref()
                {
                    this.received += data.len() as u64;
                }
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                if this.waiting_since.is_none() {
                    this.waiting_since = Some(Instant::now());
                    this.sleep = Some(Box::pin(tokio::time::sleep(this.allowance())));
                }
                if let Some(sleep) = this.sleep.as_mut()
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    this.failed = true;
                    this.sleep = None;
                    let secs = this.timeout.as_secs();
                    return Poll::Ready(Some(Err(Box::new(Stalled { secs }))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why the [`buffer`] middleware refused a body.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(
        "the request body is over this server's limit of {limit} bytes (--http-max-body); send a smaller request (files go through PUT /v1/files, bounded by --file-limit)"
    )]
    TooLarge { limit: usize },
    #[error(transparent)]
    Stalled(Stalled),
    #[error("reading the request body failed: {0}")]
    Broken(String),
}

impl BodyError {
    /// The HTTP status of this refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Stalled(_) => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// The size limit of a group of routes, and how its server words a refusal.
#[derive(Clone, Copy)]
pub struct BodyLimit {
    pub max: usize,
    pub reply: fn(&BodyError) -> Response,
}

/// Middleware: reads the whole body (at most `max` bytes) before the handler runs. Over
/// the limit (declared or streamed) the answer is 413 at once, and the rest of the body
/// is read and dropped in the background ([`linger`]) so a client still sending it
/// reads the 413 instead of a reset connection; a stalled body gets 408. Both close the
/// connection after the answer.
pub async fn buffer(State(limit): State<BodyLimit>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let max = limit.max;
    if declared.is_some_and(|n| n > max as u64) {
        linger(body.into_data_stream(), max);
        return refuse(&limit, &BodyError::TooLarge { limit: max });
    }
    let mut stream = body.into_data_stream();
    // What the head declares, but not more than 1 MiB before any of it came.
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n.min(1 << 20) as usize));
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) if buf.len() + bytes.len() > max => {
                linger(stream, max);
                return refuse(&limit, &BodyError::TooLarge { limit: max });
            }
            Ok(bytes) => buf.extend_from_slice(&bytes),
            Err(e) => {
                let why = match stalled(&e) {
                    Some(s) => BodyError::Stalled(s),
                    None => BodyError::Broken(e.to_string()),
                };
                return refuse(&limit, &why);
            }
        }
    }
    next.run(Request::from_parts(parts, Body::from(buf))).await
}

fn refuse(limit: &BodyLimit, e: &BodyError) -> Response {
    tracing::info!(status = e.status().as_u16(), error = %e, "request body refused");
    let mut r = (limit.reply)(e);
    close_after(&mut r);
    r
}

/// Marks `r` as the last answer on its connection.
pub fn close_after(r: &mut Response) {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// Reads and drops what is left of a refused body in the background, for at most
/// [`LINGER_TIME`] and the larger of 4 × `max` and 64 MiB, so the client still sending it
/// can read the answer already sent (its reads would otherwise meet a reset). The body's
/// read timeout still applies; past either bound the connection is closed.
pub fn linger<S, B, E>(stream: S, max: usize)
where
    S: futures_util::Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]>,
{
    let cap = (max as u64).saturating_mul(4).max(LINGER_MIN_BYTES);
    tokio::spawn(async move {
        let drain = async {
            let mut stream = std::pin::pin!(stream);
            let mut seen = 0u64;
            while let Some(Ok(chunk)) = stream.next().await {
                seen += chunk.as_ref().len() as u64;
                if seen > cap {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frame<B: http_body::Body + Unpin>(
        b: &mut B,
    ) -> Option<Result<Frame<B::Data>, B::Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *b).poll_frame(cx)).await
    }

    /// A body that never sends anything.
    struct Silent;
    impl http_body::Body for Silent {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_silent_body_stalls_after_the_timeout() {
        let mut b = TimedBody::new(Silent, Duration::from_millis(300));
        let started = Instant::now();
        let err = frame(&mut b)
            .await
            .and_then(Result::err)
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("stalled")));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3));
        assert!(frame(&mut b).await.is_none(), "a failed body ends");
    }

    #[test]
    fn the_allowance_grows_with_bytes_and_shrinks_with_waiting() {
        let mut b = TimedBody::new(Silent, Duration::from_secs(2));
        assert_eq!(b.allowance(), Duration::from_secs(2));
        b.waited = Duration::from_secs(1);
        assert_eq!(b.allowance(), Duration::from_secs(1));
        b.received = 10 * 1024;
        assert_eq!(
            b.allowance(),
            Duration::from_secs(2),
            "never past one timeout"
        );
        b.waited = Duration::from_secs(12);
        assert_eq!(b.allowance(), Duration::ZERO);
    }

    #[test]
    fn stalled_is_found_through_wrappers() {
        let e = axum::Error::new(Stalled { secs: 2 });
        assert_eq!(stalled(&e).map(|s| s.secs), Some(2));
        assert!(stalled(&axum::Error::new(std::io::Error::other("x"))).is_none());
    }
}

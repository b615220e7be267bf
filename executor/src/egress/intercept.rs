//! Connections to a secret's hosts (SPEC §3.11): the only ones the gate opens. TLS is
//! terminated with the host's certificate from the gate's authority ([`Authority`]); each
//! HTTP/1.1 request gets the computer's placeholders replaced by the values
//! ([`secrets::substitute_header`], [`secrets::substitute`]) and goes to the host over a
//! verified connection of the gate's own; each answer comes back with the values masked.
//! A request that carried a value asks for an unencoded answer (`Accept-Encoding:
//! identity`), so the masking sees the bytes. hyper speaks HTTP on both sides.
//!
//! An upstream certificate that does not verify is refused like a blocked host (listed
//! in `network_blocked`), and the computer gets a 502 saying why.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{ACCEPT_ENCODING, CONNECTION, CONTENT_ENCODING, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use shared::egress::Denial;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::Confined;
use super::authority::Authority;
use super::secrets::{self, Masker, Swap};

/// One connection to a secret's host, as the gate carries it.
struct Carrier {
    confined: Arc<Confined>,
    authority: Arc<Authority>,
    name: String,
    port: u16,
    addrs: Vec<IpAddr>,
    tls: bool,
    swaps: Vec<Swap>,
    upstream: Mutex<Option<SendRequest<Incoming>>>,
}

/// Carries `sock` (the computer's connection to `name`:`port`, allowed, for which
/// `swaps` hold) through the gate's HTTP, to one of `addrs`.
pub(super) async fn carry(
    sock: TcpStream,
    confined: Arc<Confined>,
    authority: Arc<Authority>,
    name: String,
    port: u16,
    addrs: Vec<IpAddr>,
    swaps: Vec<Swap>,
) {
    let mut first = [0u8; 1];
    let tls = matches!(sock.peek(&mut first).await, Ok(1) if first[0] == 0x16);
    let carrier = Arc::new(Carrier {
        confined,
        authority: authority.clone(),
        name,
        port,
        addrs,
        tls,
        swaps,
        upstream: Mutex::new(None),
    });
    let _ = sock.set_nodelay(true);
    if tls {
        let acceptor = tokio_rustls::TlsAcceptor::from(authority.to_computer.clone());
        match acceptor.accept(sock).await {
            Ok(down) => serve(down, carrier).await,
            Err(e) => {
                tracing::debug!(name = %carrier.name, error = %e, "a computer's TLS to a secret's host failed")
            }
        }
    } else {
        serve(sock, carrier).await;
    }
}

/// Serves the computer's requests on `io`.
async fn serve<I>(io: I, carrier: Arc<Carrier>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let carrier = carrier.clone();
        async move { Ok::<_, std::convert::Infallible>(carrier.forward(req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .await;
}

impl Carrier {
    /// One request: placeholders replaced, sent upstream, the answer masked.
    async fn forward(&self, mut req: Request<Incoming>) -> Response<Answer> {
        if rewrite(&mut req, &self.swaps) {
            req.headers_mut()
                .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        }
        let mut upstream = self.upstream.lock().await;
        if upstream.as_ref().is_none_or(SendRequest::is_closed) {
            match self.dial().await {
                Ok(s) => *upstream = Some(s),
                Err(why) => return failed(&why.to_string()),
            }
        }
        let Some(sender) = upstream.as_mut() else {
            return failed("no upstream connection");
        };
        if let Err(e) = sender.ready().await {
            return failed(&format!("the connection to {} ended: {e}", self.name));
        }
        let answer = sender.send_request(req);
        drop(upstream);
        match answer.await {
            Ok(res) => self.masked(res),
            Err(e) => failed(&format!("{} did not answer: {e}", self.name)),
        }
    }

    /// A connection of the gate's own to the host: TLS verified when the computer spoke TLS.
    async fn dial(&self) -> Result<SendRequest<Incoming>, DialError> {
        let tcp = super::tcp::connect(&self.addrs, self.port)
            .await
            .ok_or_else(|| DialError::Connect(self.name.clone(), self.port))?;
        let _ = tcp.set_nodelay(true);
        if !self.tls {
            return handshake(tcp).await;
        }
        let server_name = rustls::pki_types::ServerName::try_from(self.name.clone())
            .map_err(|_| DialError::Name(self.name.clone()))?;
        let connector = tokio_rustls::TlsConnector::from(self.authority.upstream.clone());
        match connector.connect(server_name, tcp).await {
            Ok(tls) => handshake(tls).await,
            Err(e) => {
                self.confined
                    .refuse(&self.name, self.port, Denial::Untrusted);
                tracing::warn!(name = %self.name, error = %e, "the egress gate could not verify a secret's host");
                Err(DialError::Untrusted {
                    name: self.name.clone(),
                    error: e,
                })
            }
        }
    }

    /// The host's answer with the values masked (headers: by the placeholder; an
    /// unencoded body: by as many `*`).
    fn masked(&self, res: Response<Incoming>) -> Response<Answer> {
        let (mut parts, body) = res.into_parts();
        for value in parts.headers.values_mut() {
            if let Some(new) = secrets::mask(value.as_bytes(), &self.swaps)
                && let Ok(v) = HeaderValue::from_bytes(&new)
            {
                *value = v;
            }
        }
        let encoded = parts
            .headers
            .get(CONTENT_ENCODING)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        let masker = Masker::new(if encoded { &[] } else { &self.swaps });
        Response::from_parts(
            parts,
            Answer::Masked {
                inner: body,
                masker,
                done: false,
                trailers: None,
            },
        )
    }
}

/// Why the gate's own connection to a secret's host could not be made (answered to the
/// computer as a 502 with this text).
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("could not connect to {0}:{1}")]
    Connect(String, u16),
    #[error("{0} is not a name a TLS certificate can be checked against")]
    Name(String),
    #[error(
        "{name}'s certificate could not be verified ({error}); an operator can add its CA with --egress-ca-file"
    )]
    Untrusted { name: String, error: std::io::Error },
    #[error("the HTTP/1.1 handshake failed: {0}")]
    Handshake(#[from] hyper::Error),
}

async fn handshake<I>(io: I) -> Result<SendRequest<Incoming>, DialError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Replaces the placeholders in `req`'s headers and target: did any hold one?
fn rewrite(req: &mut Request<Incoming>, swaps: &[Swap]) -> bool {
    let mut swapped = false;
    for value in req.headers_mut().values_mut() {
        if let Some(new) = secrets::substitute_header(value.as_bytes(), swaps)
            && let Ok(v) = HeaderValue::from_bytes(&new)
        {
            *value = v;
            swapped = true;
        }
    }
    let target = req.uri().path_and_query().map(|p| p.as_str().as_bytes());
    if let Some(new) = target.and_then(|t| secrets::substitute(t, swaps)) {
        let mut parts = req.uri().clone().into_parts();
        if let Ok(pq) = http::uri::PathAndQuery::try_from(new)
            && let Ok(uri) = {
                parts.path_and_query = Some(pq);
                Uri::from_parts(parts)
            }
        {
            *req.uri_mut() = uri;
            swapped = true;
        }
    }
    swapped
}

/// The gate's own answer when the host could not be reached.
fn failed(why: &str) -> Response<Answer> {
    let text = format!("msc egress gate: {why}\n");
    let mut res = Response::new(Answer::Text(Some(Bytes::from(text))));
    *res.status_mut() = StatusCode::BAD_GATEWAY;
    res.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    res
}

/// An answer's body: the host's, masked, or the gate's own text.
enum Answer {
    Masked {
        inner: Incoming,
        masker: Masker,
        done: bool,
        /// Trailers that came while masked bytes were still held.
        trailers: Option<Frame<Bytes>>,
    },
    Text(Option<Bytes>),
}

impl Body for Answer {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            Answer::Text(text) => Poll::Ready(text.take().map(|t| Ok(Frame::data(t)))),
            Answer::Masked {
                inner,
                masker,
                done,
                trailers,
            } => loop {
                if let Some(t) = trailers.take() {
                    return Poll::Ready(Some(Ok(t)));
                }
                if *done {
                    return Poll::Ready(None);
                }
                match Pin::new(&mut *inner).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => {
                            let out = masker.push(&data);
                            if !out.is_empty() {
                                return Poll::Ready(Some(Ok(Frame::data(out.into()))));
                            }
                        }
                        Err(other) => {
                            let held = masker.finish();
                            if held.is_empty() {
                                return Poll::Ready(Some(Ok(other)));
                            }
                            *trailers = Some(other);
                            return Poll::Ready(Some(Ok(Frame::data(held.into()))));
                        }
                    },
                    Poll::Ready(None) => {
                        *done = true;
                        let held = masker.finish();
                        if !held.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(held.into()))));
                        }
                    }
                }
            },
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            // Masking keeps the length.
            Answer::Masked { inner, .. } => inner.size_hint(),
            Answer::Text(Some(t)) => SizeHint::with_exact(t.len() as u64),
            Answer::Text(None) => SizeHint::with_exact(0),
        }
    }
}

//! The gRPC plumbing under every call: channels (TLS with rustls and the webpki roots, or
//! plain HTTP/2 for a local server), the control plane's auth metadata, and the retry of
//! `UNAVAILABLE`/`RESOURCE_EXHAUSTED` with exponential backoff.

use std::future::Future;
use std::time::Duration;

use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use super::{
    ModalClient, ModalClientClient, ModalError, RETRY_ATTEMPTS, RETRY_BASE, RETRY_MAX_DELAY,
};

impl ModalClient {
    pub(super) fn request<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        for kv in self.inner.auth.iter() {
            if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv {
                r.metadata_mut().insert(k.clone(), v.clone());
            }
        }
        r
    }

    /// Calls the control plane, retrying `UNAVAILABLE`/`RESOURCE_EXHAUSTED`.
    pub(super) async fn retry<M, R, F, Fut>(
        &self,
        what: &str,
        f: F,
        msg: M,
    ) -> Result<R, ModalError>
    where
        M: Clone,
        F: Fn(ModalClientClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match f(self.inner.cp.clone(), self.request(msg.clone())).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(e) if retryable(&e) && attempt < RETRY_ATTEMPTS => {
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(ModalError::from_status(what, &e)),
            }
        }
    }
}

pub(super) fn ascii(what: &str, v: &str) -> Result<AsciiMetadataValue, ModalError> {
    AsciiMetadataValue::try_from(v)
        .map_err(|_| ModalError::Config(format!("the {what} contains invalid characters")))
}

pub(super) fn channel(url: &str) -> Result<Channel, ModalError> {
    let ep = Endpoint::from_shared(url.to_owned())
        .map_err(|e| ModalError::Config(format!("invalid Modal URL {url:?}: {e}")))?
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let ep = if url.starts_with("https://") {
        tls(ep, url)?
    } else if url.starts_with("http://") {
        ep
    } else {
        return Err(ModalError::Config(format!(
            "the Modal URL {url:?} must start with https:// (or http:// for a local server)"
        )));
    };
    Ok(ep.connect_lazy())
}

/// TLS with the webpki roots (rustls, ring).
#[cfg(feature = "tls")]
fn tls(ep: Endpoint, url: &str) -> Result<Endpoint, ModalError> {
    ep.tls_config(tonic::transport::ClientTlsConfig::new().with_webpki_roots())
        .map_err(|e| ModalError::Transport(format!("TLS setup for {url}: {e}")))
}

#[cfg(not(feature = "tls"))]
fn tls(_ep: Endpoint, url: &str) -> Result<Endpoint, ModalError> {
    Err(ModalError::Config(format!(
        "this build has no TLS (cargo feature `tls`), so it cannot reach {url}"
    )))
}

pub(super) fn retryable(s: &Status) -> bool {
    matches!(s.code(), Code::Unavailable | Code::ResourceExhausted)
}

/// Exponential backoff with jitter for the `attempt`-th failure (1-based).
pub(super) fn backoff(attempt: u32) -> Duration {
    let base = RETRY_BASE.saturating_mul(1 << attempt.saturating_sub(1).min(8));
    let base = base.min(RETRY_MAX_DELAY);
    base + Duration::from_millis(rand::random::<u64>() % (base.as_millis() as u64 / 2 + 1))
}

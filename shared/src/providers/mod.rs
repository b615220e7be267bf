//! Cloud-provider clients, sans-I/O behind a small HTTP-transport trait.
//!
//! A client here builds [`HttpRequest`]s and interprets [`HttpResponse`]s; the caller
//! supplies the [`HttpTransport`] that moves the bytes (reqwest natively, `worker::Fetch` in
//! the Worker) and sleeps between retries. No runtime, no clocks, no I/O in this module, so
//! it builds and is tested natively and on `wasm32-unknown-unknown`.
//!
//! Clients: [`fly`] (the Fly Machines REST API), [`e2b`] (E2B's control plane and envd).
//! On top of them, [`computers`] maps our computers onto machines and sandboxes, for both
//! the local binary and the Worker.

use std::fmt;
use std::future::Future;

use crate::maybe_send::{MaybeSend, MaybeSync};

pub mod computers;
pub mod e2b;
pub mod fly;
pub mod send;

/// One HTTP request, fully built by a client.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// `GET`, `POST`, `DELETE`, ...
    pub method: &'static str,
    /// Absolute URL, path segments and query already percent-encoded.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

impl HttpRequest {
    /// A JSON API request: `auth` (one header), `Accept: application/json`, and
    /// `Content-Type: application/json` when there is a body.
    pub fn json(
        method: &'static str,
        url: String,
        auth: (&str, &str),
        body: Option<Vec<u8>>,
    ) -> Self {
        let mut headers = vec![
            (auth.0.to_owned(), auth.1.to_owned()),
            ("Accept".to_owned(), "application/json".to_owned()),
        ];
        if body.is_some() {
            headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        }
        Self {
            method,
            url,
            headers,
            body,
        }
    }

    /// The first header of that name (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

/// Never prints credentials: the values of `Authorization`-like headers are redacted.
impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let lower = k.to_ascii_lowercase();
                let secret =
                    lower == "authorization" || lower.contains("token") || lower.contains("key");
                (k.as_str(), if secret { "[redacted]" } else { v.as_str() })
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .finish()
    }
}

/// One HTTP response as the transport received it (any status; the client interprets it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header of that name (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// 200..=299.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// No HTTP response arrived (DNS, connect, TLS, reset, the transport's own timeout): what
/// failed, in words for operators.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

impl TransportError {
    /// From any error's message.
    pub fn of(e: impl std::fmt::Display) -> Self {
        Self(e.to_string())
    }
}

crate::message_error_from!(TransportError);

/// A request body that could not be encoded, or a response body not of the shape expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(pub String);

crate::message_error_from!(WireError);

/// Moves bytes for a provider client. Implemented by the native server (reqwest) and the
/// Worker (`worker::Fetch`).
///
/// `send` returns `Ok` for every HTTP response, whatever its status; `Err` only when no
/// response arrived (DNS, connect, TLS, reset, the transport's own timeout). The error
/// string should say what failed; it is shown to operators. The transport's timeout must
/// exceed the longest request a client makes (Fly: `wait` blocks up to 60 s, `exec` up to
/// its own timeout).
///
/// `sleep` waits between retries and polls (`tokio::time::sleep` natively, a JS timer in the
/// Worker); `now_ms` is the caller's clock (milliseconds since any fixed origin), used for
/// command deadlines.
pub trait HttpTransport: MaybeSync {
    fn send(
        &self,
        req: HttpRequest,
    ) -> impl Future<Output = Result<HttpResponse, TransportError>> + MaybeSend;

    fn sleep(&self, millis: u64) -> impl Future<Output = ()> + MaybeSend;

    fn now_ms(&self) -> u64;
}

/// A shared reference to a transport is a transport (lets callers keep the original).
impl<T: HttpTransport> HttpTransport for &T {
    fn send(
        &self,
        req: HttpRequest,
    ) -> impl Future<Output = Result<HttpResponse, TransportError>> + MaybeSend {
        (**self).send(req)
    }

    fn sleep(&self, millis: u64) -> impl Future<Output = ()> + MaybeSend {
        (**self).sleep(millis)
    }

    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// Percent-encodes one URL path segment or query component: everything except the RFC 3986
/// unreserved characters (`A-Z a-z 0-9 - . _ ~`) becomes `%XX`.
pub fn encode_component(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

/// `?k=v&k2=v2` with both sides encoded by [`encode_component`]; empty for no pairs.
pub fn query_string(pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&encode_component(k));
        out.push('=');
        out.push_str(&encode_component(v));
    }
    out
}

/// Test double of the HTTP transport: records every request and sleep, answers from a
/// script. Shared by the provider clients' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::VecDeque;
    use std::future::{Future, ready};
    use std::sync::Mutex;

    use super::{HttpRequest, HttpResponse, HttpTransport};
    use crate::maybe_send::MaybeSend;

    /// A scripted answer: a response, or a transport failure.
    pub(crate) type Reply = Result<HttpResponse, super::TransportError>;

    #[derive(Default)]
    pub(crate) struct ScriptedTransport {
        script: Mutex<VecDeque<Reply>>,
        requests: Mutex<Vec<HttpRequest>>,
        sleeps: Mutex<Vec<u64>>,
    }

    impl ScriptedTransport {
        pub(crate) fn new(script: impl IntoIterator<Item = Reply>) -> Self {
            Self {
                script: Mutex::new(script.into_iter().collect()),
                ..Self::default()
            }
        }

        pub(crate) fn requests(&self) -> Vec<HttpRequest> {
            self.requests.lock().unwrap().clone()
        }

        pub(crate) fn sleeps(&self) -> Vec<u64> {
            self.sleeps.lock().unwrap().clone()
        }

        /// Scripted replies not consumed.
        pub(crate) fn remaining(&self) -> usize {
            self.script.lock().unwrap().len()
        }
    }

    impl HttpTransport for ScriptedTransport {
        fn send(&self, req: HttpRequest) -> impl Future<Output = Reply> + MaybeSend {
            let reply = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| panic!("unscripted request: {req:?}"));
            self.requests.lock().unwrap().push(req);
            ready(reply)
        }

        fn sleep(&self, millis: u64) -> impl Future<Output = ()> + MaybeSend {
            self.sleeps.lock().unwrap().push(millis);
            ready(())
        }

        /// A fake clock: the sum of the sleeps so far.
        fn now_ms(&self) -> u64 {
            self.sleeps.lock().unwrap().iter().sum()
        }
    }

    /// A response with a JSON body and `content-type: application/json`.
    pub(crate) fn json(status: u16, body: serde_json::Value) -> Reply {
        Ok(HttpResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        })
    }

    /// A response with the given headers and raw body.
    pub(crate) fn raw(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        Ok(HttpResponse {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_components() {
        assert_eq!(encode_component("abc-XYZ_0.9~"), "abc-XYZ_0.9~");
        assert_eq!(encode_component("a b/c?d&e=f"), "a%20b%2Fc%3Fd%26e%3Df");
        assert_eq!(encode_component("é"), "%C3%A9");
        assert_eq!(encode_component("+%"), "%2B%25");
    }

    #[test]
    fn builds_query_strings() {
        assert_eq!(query_string(&[]), "");
        let q = query_string(&[
            ("metadata.owner".into(), "a b".into()),
            ("limit".into(), "5".into()),
        ]);
        assert_eq!(q, "?metadata.owner=a%20b&limit=5");
    }

    #[test]
    fn debug_redacts_authorization() {
        let req = HttpRequest {
            method: "GET",
            url: "https://x/".into(),
            headers: vec![
                ("Authorization".into(), "Bearer secret-tok".into()),
                ("X-API-Key".into(), "e2b_secret-key".into()),
                ("X-Access-Token".into(), "envd-secret".into()),
            ],
            body: None,
        };
        let s = format!("{req:?}");
        for secret in ["secret-tok", "secret-key", "envd-secret"] {
            assert!(!s.contains(secret), "{s}");
        }
        assert!(s.contains("[redacted]"));
        assert_eq!(req.header("authorization"), Some("Bearer secret-tok"));
    }
}

//! Real upstream servers on the host for the egress tests and bench (issue 38): an HTTP(S)
//! server that keeps what it was sent, and a test CA with a server certificate.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One request as an upstream saw it: the TLS server name (`None`: plain HTTP) and the
/// request's head.
pub type Seen = (Option<String>, String);

/// An HTTP(S) server on the host that keeps each request's head and answers `ok`, or, for
/// `/echo`, the head itself.
pub struct Recorder {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    /// Listens on every address of the host, on a port of its own, speaking TLS with
    /// `tls` (plain HTTP without).
    pub async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> anyhow::Result<Recorder> {
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await?;
        let port = listener.local_addr()?.port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (kept, tls) = (kept.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            if let Ok(s) = acceptor.accept(sock).await {
                                let name = s.get_ref().1.server_name().map(str::to_owned);
                                answer(s, name, kept).await;
                            }
                        }
                        None => answer(sock, None, kept).await,
                    }
                });
            }
        });
        Ok(Recorder { port, seen })
    }

    /// Every request seen so far, in order.
    pub fn heads(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    name: Option<String>,
    kept: Arc<Mutex<Vec<Seen>>>,
) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    kept.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((name, head.clone()));
    let body = if head.starts_with("GET /echo") {
        head
    } else {
        "ok".to_owned()
    };
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// A CA (its PEM), and a server configuration with a certificate for `names` signed by it.
pub fn test_pki(names: &[&str]) -> anyhow::Result<(String, Arc<rustls::ServerConfig>)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let leaf = CertificateParams::new(names)?.signed_by(&key, &issuer)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    Ok((ca_cert.pem(), Arc::new(config)))
}

//! The gate's TLS for secrets (SPEC §3.11): a certificate authority made when the server
//! starts (its key never leaves this process; computers trust its certificate), the
//! certificates it shows a computer for a secret's hosts (made on first use, kept for a
//! week), and the TLS configurations of both sides: towards the computer (those hosts'
//! certificates, HTTP/1.1) and upstream (verified against the system's roots, Mozilla's
//! when the system has none, and `--egress-ca-file`).
//!
//! rcgen (the rustls project's generator) makes the certificates; rustls with ring speaks
//! TLS (already the TLS of every other client in this server).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

/// Why the gate's TLS could not be set up (at start).
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("the egress gate could not make its certificate authority: {0}")]
    Make(#[from] rcgen::Error),
    #[error("the egress gate's TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("--egress-ca-file {0}: {1}")]
    CaFile(String, String),
    #[error(
        "the egress gate found no root certificates to verify upstream servers with (none in the system's store and no --egress-ca-file)"
    )]
    NoRoots,
}

/// How long a host's certificate is used before a new one is made.
const LEAF_LIFE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The HTTP version both sides speak through the gate.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The gate's certificate authority and the TLS configurations that use it.
#[derive(Debug)]
pub struct Authority {
    /// The CA certificate, PEM: what computers trust.
    pub ca_pem: String,
    /// Towards computers: a secret host's certificate, made by [`Leaves`].
    pub to_computer: Arc<rustls::ServerConfig>,
    /// Upstream: verified.
    pub upstream: Arc<rustls::ClientConfig>,
}

/// The hosts' certificates, made on first use.
struct Leaves {
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
    /// The names certificates may be made for (the secrets' hosts).
    names: Vec<String>,
    made: Mutex<HashMap<String, (Arc<CertifiedKey>, Instant)>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl std::fmt::Debug for Leaves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaves")
            .field("names", &self.names)
            .finish()
    }
}

impl Authority {
    /// A new authority for the secrets' `hosts`; upstream trusts the system's roots and
    /// those of `ca_file`.
    pub fn new(hosts: &[String], ca_file: Option<&Path>) -> Result<Authority, AuthorityError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            DnType::CommonName,
            "MCP Sandbox Computer egress gate (this server only)",
        );
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(3650);
        let ca = params.self_signed(&ca_key)?;
        let leaves = Leaves {
            ca_der: ca.der().clone(),
            issuer: Issuer::new(params, ca_key),
            names: hosts.to_vec(),
            made: Mutex::default(),
            provider: provider.clone(),
        };
        let mut to_computer = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(leaves));
        to_computer.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        let mut upstream = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots(ca_file)?)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(Authority {
            ca_pem: ca.pem(),
            to_computer: Arc::new(to_computer),
            upstream: Arc::new(upstream),
        })
    }
}

/// The roots upstream certificates are verified against.
fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore, AuthorityError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = ca_file {
        let bad = |why: String| AuthorityError::CaFile(path.display().to_string(), why);
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        for cert in CertificateDer::pem_slice_iter(&bytes) {
            let cert = cert.map_err(|e| bad(e.to_string()))?;
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    if roots.is_empty() {
        return Err(AuthorityError::NoRoots);
    }
    Ok(roots)
}

impl Leaves {
    /// `name`'s certificate (and the CA's), made now or a week ago at most.
    fn leaf(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        if !self.names.iter().any(|n| n == name) {
            return None;
        }
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((key, at)) = made.get(name)
            && at.elapsed() < LEAF_LIFE
        {
            return Some(key.clone());
        }
        let key = match self.make(name) {
            Ok(k) => Arc::new(k),
            Err(e) => {
                tracing::warn!(name, error = %e, "the egress gate could not make a certificate");
                return None;
            }
        };
        made.insert(name.to_owned(), (key.clone(), Instant::now()));
        Some(key)
    }

    fn make(&self, name: &str) -> Result<CertifiedKey, AuthorityError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(30);
        let cert = params.signed_by(&key, &self.issuer)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = self.provider.key_provider.load_private_key(der)?;
        Ok(CertifiedKey::new(
            vec![cert.der().clone(), self.ca_der.clone()],
            signer,
        ))
    }
}

impl rustls::server::ResolvesServerCert for Leaves {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = shared::egress::normal_name(hello.server_name()?)?;
        self.leaf(&name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that trusts only the gate's CA reaches a secret host's certificate, and
    /// no certificate is made for another name.
    #[tokio::test]
    async fn computers_trusting_the_ca_accept_the_hosts_certificates() {
        let a = Authority::new(&["api.example.test".into()], None).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(a.ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let client = Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        );
        for (name, ok) in [("api.example.test", true), ("other.example.test", false)] {
            let (c, s) = tokio::io::duplex(64 << 10);
            let acceptor = tokio_rustls::TlsAcceptor::from(a.to_computer.clone());
            let server = tokio::spawn(async move { acceptor.accept(s).await.is_ok() });
            let connector = tokio_rustls::TlsConnector::from(client.clone());
            let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
            let got = connector.connect(server_name, c).await;
            assert_eq!(got.is_ok(), ok, "{name}: {got:?}");
            assert_eq!(server.await.unwrap(), ok, "{name}");
        }
    }

    #[test]
    fn a_ca_file_without_certificates_or_unreadable_is_refused() {
        let dir = std::env::temp_dir().join(format!("msc-ca-{}", rand::random::<u64>()));
        std::fs::write(&dir, "not a certificate").unwrap();
        let a = Authority::new(&["x.test".into()], Some(&dir)).unwrap();
        // No PEM block at all: nothing added, the system's roots stand.
        assert!(!a.ca_pem.is_empty());
        let bad = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
        std::fs::write(&dir, bad).unwrap();
        let e = Authority::new(&["x.test".into()], Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("--egress-ca-file"), "{e}");
        let _ = std::fs::remove_file(&dir);
        let e = Authority::new(&["x.test".into()], Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("--egress-ca-file"), "{e}");
    }
}

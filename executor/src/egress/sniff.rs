//! The name a connection's first bytes give: the server name of a TLS ClientHello (read by
//! rustls' `Acceptor`, the parser rustls servers use) or the `Host` of an HTTP/1 request
//! (httparse). Pure functions over the bytes seen so far.

/// What the first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sniffed {
    /// The name the program gave.
    Name(String),
    /// A TLS ClientHello or an HTTP request without a name, or another protocol.
    Nameless,
    /// Too few bytes to tell yet.
    More,
}

/// The most bytes read before deciding (a ClientHello with post-quantum key shares is
/// under 2 KiB; a request line and headers rarely over 8).
pub(super) const SNIFF_MAX: usize = 16 * 1024;

/// What `bytes` (the start of a connection) say.
pub(super) fn sniff(bytes: &[u8]) -> Sniffed {
    match bytes.first() {
        None => Sniffed::More,
        // A TLS handshake record.
        Some(0x16) => tls_name(bytes),
        Some(b) if b.is_ascii_uppercase() => http_host(bytes),
        Some(_) => Sniffed::Nameless,
    }
}

fn tls_name(bytes: &[u8]) -> Sniffed {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rd: &[u8] = bytes;
    if acceptor.read_tls(&mut rd).is_err() {
        return Sniffed::Nameless;
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => match accepted.client_hello().server_name() {
            Some(n) => Sniffed::Name(n.to_owned()),
            None => Sniffed::Nameless,
        },
        Ok(None) if bytes.len() < SNIFF_MAX => Sniffed::More,
        Ok(None) | Err(_) => Sniffed::Nameless,
    }
}

fn http_host(bytes: &[u8]) -> Sniffed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) if bytes.len() < SNIFF_MAX => {
            // The Host header may already be in; a request still arriving is waited for.
            if !bytes.windows(4).any(|w| w == b"\r\n\r\n") {
                return Sniffed::More;
            }
        }
        _ => return Sniffed::Nameless,
    }
    let host = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .and_then(|h| std::str::from_utf8(h.value).ok());
    match host.map(strip_port) {
        Some(h) if !h.is_empty() => Sniffed::Name(h.to_owned()),
        _ => Sniffed::Nameless,
    }
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `::1`.
fn strip_port(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match host.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello for `name`, made by rustls' own client.
    fn client_hello(name: &str) -> Vec<u8> {
        use std::sync::Arc;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("name");
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server).expect("conn");
        let mut out = Vec::new();
        conn.write_tls(&mut out).expect("hello");
        out
    }

    #[test]
    fn tls_server_names_are_read_whole_or_waited_for() {
        let hello = client_hello("pypi.org");
        assert_eq!(sniff(&hello), Sniffed::Name("pypi.org".into()));
        assert_eq!(sniff(&hello[..hello.len() / 2]), Sniffed::More);
        assert_eq!(sniff(&hello[..3]), Sniffed::More);
    }

    #[test]
    fn http_hosts_lose_their_port() {
        for (req, want) in [
            (
                "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
                Some("example.com"),
            ),
            (
                "GET / HTTP/1.1\r\nhost: Example.com:8080\r\n\r\n",
                Some("Example.com"),
            ),
            ("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", Some("::1")),
            ("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", None),
        ] {
            let got = sniff(req.as_bytes());
            match want {
                Some(h) => assert_eq!(got, Sniffed::Name(h.into()), "{req:?}"),
                None => assert_eq!(got, Sniffed::Nameless, "{req:?}"),
            }
        }
        assert_eq!(sniff(b"GET / HTTP/1.1\r\nHost: exa"), Sniffed::More);
        assert_eq!(sniff(b"SSH-2.0-OpenSSH_9.6\r\n"), Sniffed::Nameless);
        assert_eq!(sniff(b"\x00\x01binary"), Sniffed::Nameless);
    }

    #[test]
    fn junk_never_panics() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 300) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|i| (seed >> (i % 56)) as u8).collect();
            if let Some(b) = bytes.first_mut() {
                *b = [0x16, b'G', b'X', 0][(seed % 4) as usize];
            }
            let _ = sniff(&bytes);
        }
    }
}

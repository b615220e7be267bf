//! DNS-rebinding and cross-site protection: the request's host, and its `Origin` when a
//! browser sends one, must be one of `PUBLIC_ORIGINS` (comma-separated, e.g.
//! `https://mcp.example.com`); with none configured only loopback names are accepted
//! (`wrangler dev`). Pure: the Worker passes the request URL and the header.

use url::Url;

/// The origins this gateway is reached at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins {
    allowed: Vec<String>,
}

fn loopback(host: &str) -> bool {
    let h = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost") || h == "::1" || h.starts_with("127.")
}

impl Origins {
    /// From the `PUBLIC_ORIGINS` var (`None` or empty: loopback only).
    pub fn parse(public_origins: Option<&str>) -> Self {
        let allowed = public_origins
            .unwrap_or_default()
            .split(',')
            .map(|o| o.trim().trim_end_matches('/').to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        Self { allowed }
    }

    fn ok(&self, candidate: &Url) -> bool {
        if self.allowed.is_empty() {
            candidate.host_str().is_some_and(loopback)
        } else {
            let origin = candidate.origin().ascii_serialization();
            self.allowed.contains(&origin)
        }
    }

    /// The origin to name in answers to a request for `url` (the protected-resource
    /// metadata, a 401's challenge): the request's own when it is served here, else the
    /// first of `PUBLIC_ORIGINS` (or, with none, `http://localhost`), so a forged `Host`
    /// header is never reflected (issue 46).
    pub fn public(&self, url: &Url) -> String {
        if self.ok(url) {
            return url.origin().ascii_serialization();
        }
        self.allowed
            .first()
            .cloned()
            .unwrap_or_else(|| "http://localhost".to_owned())
    }

    /// May a request to `url` with this `Origin` header be served? The refusal says what
    /// to configure.
    pub fn check(&self, url: &Url, origin: Option<&str>) -> Result<(), Refused> {
        if !self.ok(url) {
            return Err(Refused::Host(url.host_str().unwrap_or_default().to_owned()));
        }
        if let Some(o) = origin.filter(|o| *o != "null") {
            match Url::parse(o) {
                Ok(u) if self.ok(&u) => {}
                _ => return Err(Refused::Origin(o.to_owned())),
            }
        }
        Ok(())
    }
}

/// A request [`Origins::check`] refuses (a 403), with what to configure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("host {0:?} is not served here: add its origin to PUBLIC_ORIGINS")]
    Host(String),
    #[error("origin {0:?} is not allowed: add it to PUBLIC_ORIGINS")]
    Origin(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn loopback_only_without_public_origins() {
        let o = Origins::parse(None);
        for ok in [
            "http://127.0.0.1:8787/mcp",
            "http://localhost/mcp",
            "http://[::1]:1/mcp",
            "http://a.localhost/mcp",
        ] {
            assert_eq!(o.check(&url(ok), None), Ok(()), "{ok}");
        }
        assert!(
            o.check(&url("https://evil.example/mcp"), None)
                .unwrap_err()
                .to_string()
                .contains("PUBLIC_ORIGINS")
        );
        let local = url("http://127.0.0.1:8787/mcp");
        assert_eq!(o.check(&local, Some("null")), Ok(()));
        assert_eq!(o.check(&local, Some("http://localhost:3000")), Ok(()));
        assert!(o.check(&local, Some("https://evil.example")).is_err());
        assert!(o.check(&local, Some("not a url")).is_err());
    }

    #[test]
    fn public_origins_are_exact() {
        let o = Origins::parse(Some(" https://mcp.example.com/ , ,https://b.example:8443"));
        assert_eq!(o.check(&url("https://mcp.example.com/mcp"), None), Ok(()));
        assert_eq!(
            o.check(
                &url("https://b.example:8443/mcp"),
                Some("https://mcp.example.com")
            ),
            Ok(())
        );
        assert!(o.check(&url("http://mcp.example.com/mcp"), None).is_err());
        assert!(o.check(&url("http://127.0.0.1/mcp"), None).is_err());
        assert!(
            o.check(
                &url("https://mcp.example.com/mcp"),
                Some("https://evil.example")
            )
            .is_err()
        );
    }

    #[test]
    fn issue_46_a_forged_host_is_never_named_back() {
        let o = Origins::parse(Some("https://mcp.example.com, https://alt.example.com"));
        assert_eq!(
            o.public(&url("https://alt.example.com/mcp")),
            "https://alt.example.com"
        );
        assert_eq!(
            o.public(&url("https://evil.example/mcp")),
            "https://mcp.example.com"
        );
        let dev = Origins::parse(None);
        assert_eq!(
            dev.public(&url("http://127.0.0.1:8787/x")),
            "http://127.0.0.1:8787"
        );
        assert_eq!(
            dev.public(&url("https://evil.example/x")),
            "http://localhost"
        );
    }
}

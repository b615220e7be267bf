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

/// A loopback host: an address in 127.0.0.0/8 or `::1` (as the URL parser reads it, so a
/// name such as `127.evil.example` is not one), or `localhost` and its subdomains.
fn loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => {
            let d = d.to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost")
        }
        None => false,
    }
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
            loopback(candidate)
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

    /// Issue 46's review: a name that merely starts like a loopback address is a name,
    /// and a page served from it is cross-site to a gateway without PUBLIC_ORIGINS.
    #[test]
    fn a_domain_that_starts_with_127_is_not_loopback() {
        let o = Origins::parse(None);
        let local = url("http://localhost:8787/mcp");
        for evil in ["http://127.evil.example", "http://127.0.0.1.evil.example"] {
            assert!(o.check(&local, Some(evil)).is_err(), "{evil}");
            assert!(
                o.check(&url(&format!("{evil}/mcp")), None).is_err(),
                "{evil}"
            );
        }
        for ok in [
            "http://127.0.0.1:1",
            "http://127.1.2.3",
            "http://[::1]:8787",
        ] {
            assert_eq!(o.check(&local, Some(ok)), Ok(()), "{ok}");
        }
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

    #[test]
    fn a_refused_host_or_origin_is_named_with_what_to_configure() {
        let o = Origins::parse(Some("https://mcp.example.com"));
        let e = o.check(&url("https://evil.example/mcp"), None).unwrap_err();
        assert_eq!(e, Refused::Host("evil.example".into()));
        assert!(e.to_string().contains("\"evil.example\""), "{e}");
        let e = o
            .check(
                &url("https://mcp.example.com/mcp"),
                Some("https://mcp.example.com:8443"),
            )
            .unwrap_err();
        assert_eq!(e, Refused::Origin("https://mcp.example.com:8443".into()));
        assert!(e.to_string().contains("PUBLIC_ORIGINS"), "{e}");
    }

    #[test]
    fn a_default_port_and_the_request_path_do_not_change_the_origin() {
        let o = Origins::parse(Some("https://mcp.example.com"));
        for ok in [
            "https://mcp.example.com:443/mcp",
            "https://mcp.example.com/mcp?x=1#y",
            "https://MCP.Example.com/other/path",
        ] {
            assert_eq!(
                o.check(&url(ok), Some("https://mcp.example.com")),
                Ok(()),
                "{ok}"
            );
        }
        // The public origin named back is the configured one, trailing slash trimmed.
        let slash = Origins::parse(Some("https://mcp.example.com/"));
        assert_eq!(
            slash.public(&url("https://evil.example/")),
            "https://mcp.example.com"
        );
        assert_eq!(
            slash.public(&url("https://mcp.example.com:443/mcp")),
            "https://mcp.example.com"
        );
    }

    #[test]
    fn names_that_merely_contain_localhost_are_not_loopback() {
        let o = Origins::parse(Some(""));
        for bad in [
            "http://localhost.evil.example/mcp",
            "http://evil-localhost/mcp",
            "http://0.0.0.0/mcp",
            "http://10.0.0.1/mcp",
            "http://[::2]/mcp",
        ] {
            assert!(o.check(&url(bad), None).is_err(), "{bad}");
        }
        for ok in ["http://LOCALHOST:8787/mcp", "http://[0:0:0:0:0:0:0:1]/mcp"] {
            assert_eq!(o.check(&url(ok), None), Ok(()), "{ok}");
        }
        let local = url("http://localhost:8787/mcp");
        assert!(
            o.check(&local, Some("http://localhost.evil.example"))
                .is_err()
        );
    }
}

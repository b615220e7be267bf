//! The dashboard page (`ui/dashboard.html`): one file, served as the MCP App resource
//! (`ui://kilntainers/computers`) and as the web page at `/dashboard` by the local HTTP
//! server and the gateway. Its Content-Security-Policy for the web allows exactly its own
//! inline script and style (by hash) and requests to its own origin.

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The page.
pub const HTML: &str = include_str!("../../ui/dashboard.html");

/// `'sha256-…'` of the text between the first `<tag>` and `</tag>` of [`HTML`].
fn inline_hash(tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = HTML.find(&open)? + open.len();
    let end = start + HTML[start..].find(&format!("</{tag}>"))?;
    let digest = Sha256::digest(&HTML.as_bytes()[start..end]);
    Some(format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    ))
}

/// The Content-Security-Policy header for the web page.
pub fn web_csp() -> String {
    let script = inline_hash("script").unwrap_or_else(|| "'none'".into());
    let style = inline_hash("style").unwrap_or_else(|| "'none'".into());
    format!(
        "default-src 'none'; script-src {script}; style-src {style}; connect-src 'self'; \
         img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_inline_script_and_style_no_external_loads() {
        assert_eq!(HTML.matches("<script").count(), 1, "one inline script");
        assert_eq!(HTML.matches("<style").count(), 1, "one inline style");
        for banned in [
            "src=\"http",
            "href=\"http",
            "@import",
            "url(http",
            " style=\"",
        ] {
            assert!(!HTML.contains(banned), "{banned} in the page");
        }
        let csp = web_csp();
        assert!(csp.contains("script-src 'sha256-"), "{csp}");
        assert!(csp.contains("style-src 'sha256-"), "{csp}");
    }
}

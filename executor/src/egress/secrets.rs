//! Secrets that computers use without holding them (SPEC §3.11, `--egress-secret`), sans
//! I/O: each computer's environment holds a placeholder per secret (`msc-secret-` and 32
//! random hex digits, made at creation); the gate reads them back from the computer's
//! configuration when it confines it ([`Swaps::of_env`]) and, in requests to a secret's
//! hosts only, puts the value where the placeholder was: in header values (a `Basic`
//! authorization decoded first: that is where URL userinfo travels) and in the request
//! target (path and query). Answers from those hosts come back with the value masked
//! ([`mask`], [`Masker`]), so a host that echoes a request cannot hand it to the computer.

use std::sync::Arc;

use base64::Engine as _;

/// A secret computers use without holding it (`--egress-secret NAME=HOST,...`).
#[derive(Clone, PartialEq, Eq)]
pub struct EgressSecret {
    /// The environment variable: the server's holds the value, a computer's a placeholder.
    pub name: String,
    /// The hosts whose requests get the value (normal names).
    pub hosts: Vec<String>,
    /// The value, read from the server's environment at start.
    pub value: String,
}

impl std::fmt::Debug for EgressSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressSecret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// What every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "msc-secret-";

/// A new placeholder (128 random bits).
pub fn placeholder() -> String {
    format!("{PLACEHOLDER_PREFIX}{:032x}", rand::random::<u128>())
}

/// Is `text` a placeholder this server could have made?
fn is_placeholder(text: &str) -> bool {
    text.strip_prefix(PLACEHOLDER_PREFIX)
        .is_some_and(|r| r.len() == 32 && r.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One secret as one computer holds it.
#[derive(Clone)]
pub struct Swap {
    placeholder: String,
    value: Arc<str>,
    hosts: Arc<[String]>,
}

impl std::fmt::Debug for Swap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swap")
            .field("placeholder", &self.placeholder)
            .field("value", &"<redacted>")
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// The secrets of one computer.
#[derive(Debug, Clone, Default)]
pub struct Swaps(Vec<Swap>);

impl Swaps {
    /// The computer's secrets: the configured ones whose variable its environment
    /// (`NAME=value` entries, as the engine reports them) holds a placeholder in.
    pub fn of_env(secrets: &[EgressSecret], env: &[String]) -> Swaps {
        let swaps = secrets
            .iter()
            .filter_map(|s| {
                let held = env.iter().rev().find_map(|e| {
                    let (k, v) = e.split_once('=')?;
                    (k == s.name).then_some(v)
                })?;
                is_placeholder(held).then(|| Swap {
                    placeholder: held.to_owned(),
                    value: s.value.as_str().into(),
                    hosts: s.hosts.clone().into(),
                })
            })
            .collect();
        Swaps(swaps)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The secrets whose value requests to `host` (a normal name) get.
    pub fn for_host(&self, host: &str) -> Vec<Swap> {
        self.0
            .iter()
            .filter(|s| s.hosts.iter().any(|h| h == host))
            .cloned()
            .collect()
    }
}

/// `text` with each placeholder of `swaps` replaced by its value; `None` when it holds none.
pub fn substitute(text: &[u8], swaps: &[Swap]) -> Option<Vec<u8>> {
    replace_all(text, swaps, |s| {
        (s.placeholder.as_bytes(), s.value.as_bytes())
    })
}

/// A header value with the placeholders replaced: in the value itself, or inside the
/// base64 of a `Basic` authorization (URL userinfo: `https://user:PLACEHOLDER@host/`).
pub fn substitute_header(value: &[u8], swaps: &[Swap]) -> Option<Vec<u8>> {
    if let Some(out) = substitute(value, swaps) {
        return Some(out);
    }
    let (scheme, rest) = split_scheme(value)?;
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let decoded = engine.decode(rest.trim_ascii()).ok()?;
    let swapped = substitute(&decoded, swaps)?;
    let mut out = scheme.to_vec();
    out.push(b' ');
    out.extend_from_slice(engine.encode(swapped).as_bytes());
    Some(out)
}

/// `Basic dXNlcjpwYXNz` → (`Basic`, `dXNlcjpwYXNz`).
fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = value.iter().position(|b| *b == b' ')?;
    Some((&value[..at], &value[at + 1..]))
}

/// `text` with each value of `swaps` replaced by its placeholder (an answer's header);
/// `None` when it holds none.
pub fn mask(text: &[u8], swaps: &[Swap]) -> Option<Vec<u8>> {
    replace_all(text, swaps, |s| {
        (s.value.as_bytes(), s.placeholder.as_bytes())
    })
}

fn replace_all<'a>(
    text: &[u8],
    swaps: &'a [Swap],
    pair: impl Fn(&'a Swap) -> (&'a [u8], &'a [u8]),
) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for s in swaps {
        let (from, to) = pair(s);
        let current = out.as_deref().unwrap_or(text);
        if from.is_empty() || !contains(current, from) {
            continue;
        }
        let mut next = Vec::with_capacity(current.len());
        let mut rest = current;
        while let Some(at) = find(rest, from) {
            next.extend_from_slice(&rest[..at]);
            next.extend_from_slice(to);
            rest = &rest[at + from.len()..];
        }
        next.extend_from_slice(rest);
        out = Some(next);
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

/// Masks the values of `swaps` in a stream of body chunks, each value by as many `*`
/// (the length stays, so a `Content-Length` still holds). A chunk's tail that could be
/// the start of a value is held back until the next chunk (or the end) tells.
#[derive(Debug)]
pub struct Masker {
    values: Vec<Arc<str>>,
    held: Vec<u8>,
}

impl Masker {
    pub fn new(swaps: &[Swap]) -> Masker {
        Masker {
            values: swaps
                .iter()
                .map(|s| s.value.clone())
                .filter(|v| !v.is_empty())
                .collect(),
            held: Vec::new(),
        }
    }

    /// The bytes of `chunk` (after what was held) that can go out now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        self.cover(&mut data);
        let keep = self.open_tail(&data);
        self.held = data.split_off(data.len() - keep);
        data
    }

    /// What was held back, at the end of the body.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    fn cover(&self, data: &mut [u8]) {
        for v in &self.values {
            let v = v.as_bytes();
            let mut from = 0;
            while let Some(at) = find(&data[from..], v) {
                let at = from + at;
                data[at..at + v.len()].fill(b'*');
                from = at + v.len();
            }
        }
    }

    /// The longest tail of `data` that is a proper start of some value.
    fn open_tail(&self, data: &[u8]) -> usize {
        self.values
            .iter()
            .map(|v| {
                let v = v.as_bytes();
                (1..v.len().min(data.len() + 1))
                    .rev()
                    .find(|n| data.ends_with(&v[..*n]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, value: &str, hosts: &[&str]) -> EgressSecret {
        EgressSecret {
            name: name.into(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            value: value.into(),
        }
    }

    fn swaps() -> (Swaps, String) {
        let p = placeholder();
        let env = vec![
            "PATH=/usr/bin".to_owned(),
            format!("GH_TOKEN={p}"),
            "OTHER=msc-secret-nothex".to_owned(),
        ];
        let secrets = [
            secret("GH_TOKEN", "ghp_real", &["api.github.com"]),
            secret("OTHER", "x", &["other.test"]),
            secret("ABSENT", "y", &["absent.test"]),
        ];
        (Swaps::of_env(&secrets, &env), p)
    }

    #[test]
    fn placeholders_are_read_back_from_the_environment_only_when_they_are_ours() {
        let (s, p) = swaps();
        assert!(is_placeholder(&p), "{p}");
        assert_eq!(s.0.len(), 1, "{s:?}");
        assert_eq!(s.for_host("api.github.com").len(), 1);
        assert!(s.for_host("github.com").is_empty());
        assert!(s.for_host("other.test").is_empty());
        assert!(!format!("{s:?}").contains("ghp_real"), "{s:?}");
        assert_ne!(placeholder(), placeholder());
    }

    #[test]
    fn values_go_into_headers_queries_and_userinfo_and_come_back_masked() {
        let (s, p) = swaps();
        let on = s.for_host("api.github.com");
        let header = format!("Bearer {p}");
        assert_eq!(
            substitute_header(header.as_bytes(), &on).unwrap(),
            b"Bearer ghp_real"
        );
        let query = format!("/repos?token={p}&x={p}");
        assert_eq!(
            substitute(query.as_bytes(), &on).unwrap(),
            b"/repos?token=ghp_real&x=ghp_real"
        );
        let engine = base64::engine::general_purpose::STANDARD;
        let basic = format!("Basic {}", engine.encode(format!("user:{p}")));
        let got = substitute_header(basic.as_bytes(), &on).unwrap();
        assert_eq!(
            got,
            format!("Basic {}", engine.encode("user:ghp_real")).as_bytes()
        );
        assert_eq!(substitute_header(b"Bearer nothing", &on), None);
        assert_eq!(substitute_header(b"Basic !!!", &on), None);
        assert_eq!(
            mask(b"echo: ghp_real", &on).unwrap(),
            format!("echo: {p}").as_bytes()
        );
        assert_eq!(mask(b"nothing", &on), None);
    }

    #[test]
    fn the_masker_finds_values_split_across_chunks() {
        let (s, _) = swaps();
        let on = s.for_host("api.github.com");
        let body = b"a ghp_real b ghp_re".to_vec();
        for split in 0..=body.len() {
            let mut m = Masker::new(&on);
            let mut out = m.push(&body[..split]);
            out.extend(m.push(&body[split..]));
            out.extend(m.finish());
            assert_eq!(out, b"a ******** b ghp_re", "split at {split}");
        }
        // Byte by byte.
        let mut m = Masker::new(&on);
        let mut out = Vec::new();
        for b in b"xghp_realghp_real" {
            out.extend(m.push(&[*b]));
        }
        out.extend(m.finish());
        assert_eq!(out, b"x****************");
    }

    proptest::proptest! {
        #[test]
        fn substitution_and_masking_never_panic(
            text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            cut in 0usize..200,
        ) {
            let (s, _) = swaps();
            let on = s.for_host("api.github.com");
            let _ = substitute_header(&text, &on);
            let _ = mask(&text, &on);
            let mut m = Masker::new(&on);
            let cut = cut.min(text.len());
            let mut out = m.push(&text[..cut]);
            out.extend(m.push(&text[cut..]));
            out.extend(m.finish());
            proptest::prop_assert_eq!(out.len(), text.len());
        }
    }
}

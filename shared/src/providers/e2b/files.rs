//! Files through a sandbox's envd daemon: `GET` / `POST /files` (`specs/e2b/envd/envd.yaml`:
//! a whole file down, raw bytes up with `application/octet-stream`) and
//! `filesystem.Filesystem/Stat` (Connect unary, JSON codec,
//! `specs/e2b/envd/filesystem/filesystem.proto`).
//!
//! envd answers a refused file operation with its own status (400 a bad path or a
//! directory, 404 a missing file, 507 a full disk): those come back as
//! [`E2bError::File`], so callers can tell them from a sandbox that is gone (E2B's proxy
//! answers that with a body naming `sandboxId`).

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::*;

/// What a path is (`filesystem.FileType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// `filesystem.EntryInfo`, the parts a file call needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    pub size: u64,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// `modifiedTime`, seconds since the epoch (0 when absent).
    pub mtime_secs: i64,
}

/// `StatResponse` in proto3 JSON (`int64` arrives as a string, `uint32` as a number).
#[derive(Deserialize)]
struct StatBody {
    entry: Option<EntryBody>,
}

#[derive(Deserialize)]
struct EntryBody {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    size: Option<IntOrText>,
    #[serde(default)]
    mode: Option<u32>,
    #[serde(rename = "modifiedTime", default)]
    modified_time: Option<String>,
}

impl EntryBody {
    fn entry(self) -> Result<Entry, WireError> {
        let kind = match self.kind.as_deref() {
            Some("FILE_TYPE_FILE") => EntryKind::File,
            Some("FILE_TYPE_DIRECTORY") => EntryKind::Directory,
            Some("FILE_TYPE_SYMLINK") => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        let size = match self.size {
            None => 0,
            Some(IntOrText::Text(s)) => s.parse::<u64>().map_err(|e| format!("size {s:?}: {e}"))?,
            Some(IntOrText::Number(n)) => n.as_u64().ok_or(format!("size {n}"))?,
            Some(other) => return Err(format!("size {other}").into()),
        };
        let mtime_secs = match self.modified_time.as_deref() {
            None => 0,
            Some(t) => timestamp_secs(t).ok_or(format!("modifiedTime {t:?}"))?,
        };
        Ok(Entry {
            kind,
            size,
            mode: self.mode.unwrap_or(0) & 0o7777,
            mtime_secs,
        })
    }
}

/// The seconds of a proto3 JSON `Timestamp` (`2026-12-04T01:02:03.5Z`, RFC 3339 in UTC,
/// fractional seconds optional; an offset such as `+02:00` is honoured too).
fn timestamp_secs(t: &str) -> Option<i64> {
    let num = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (date, time) = t.split_once(['T', 't'])?;
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    let (clock, offset) = match time.strip_suffix(['Z', 'z']) {
        Some(c) => (c, 0),
        None => {
            let at = time.rfind(['+', '-'])?;
            let (c, off) = time.split_at(at);
            let (oh, om) = off[1..].split_once(':')?;
            let secs = num(oh)? * 3600 + num(om)? * 60;
            (c, if off.starts_with('-') { -secs } else { secs })
        }
    };
    let clock = clock.split_once('.').map_or(clock, |(whole, _)| whole);
    let mut c = clock.splitn(3, ':');
    let (h, min, s) = (num(c.next()?)?, num(c.next()?)?, num(c.next()?)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || s > 60 {
        return None;
    }
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + s - offset)
}

impl<T: HttpTransport> E2bClient<T> {
    /// `filesystem.Filesystem/Stat` of `path`; `None` when it does not exist.
    pub async fn stat(&self, sandbox: &Sandbox, path: &str) -> Result<Option<Entry>, E2bError> {
        let (base, mut headers) = self.envd_base(sandbox)?;
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        headers.push(("Connect-Protocol-Version".to_owned(), "1".to_owned()));
        let body = json_body(&serde_json::json!({ "path": path }))?;
        let req = HttpRequest {
            method: "POST",
            url: format!("{base}/filesystem.Filesystem/Stat"),
            headers,
            body: Some(body),
        };
        let token = sandbox.envd_access_token.as_deref();
        let resp = self.execute_with(req, true, Target::Envd { token }).await?;
        if !resp.is_success() {
            return match self.envd_error(&resp, &sandbox.sandbox_id, token) {
                E2bError::Rpc { code, .. } if code == "not_found" => Ok(None),
                e => Err(e),
            };
        }
        let body: StatBody = decode(&resp, "a Stat answer")?;
        body.entry
            .ok_or_else(|| E2bError::Decode("a Stat answer without `entry`".into()))?
            .entry()
            .map(Some)
            .map_err(|e| E2bError::Decode(format!("a Stat answer: {e}")))
    }

    /// `GET /files?path=…`: the whole file.
    pub async fn download(&self, sandbox: &Sandbox, path: &str) -> Result<Vec<u8>, E2bError> {
        let req = self.files_request(sandbox, "GET", path, None)?;
        let token = sandbox.envd_access_token.as_deref();
        let resp = self.execute_with(req, true, Target::Envd { token }).await?;
        if resp.is_success() {
            return Ok(resp.body);
        }
        Err(self.file_error(&resp, &sandbox.sandbox_id, token))
    }

    /// `POST /files?path=…` with the raw bytes: writes `path` whole, making missing parent
    /// directories (envd's rule). Retried like any idempotent request: it overwrites.
    pub async fn upload(
        &self,
        sandbox: &Sandbox,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), E2bError> {
        let req = self.files_request(sandbox, "POST", path, Some(bytes))?;
        let token = sandbox.envd_access_token.as_deref();
        let resp = self.execute_with(req, true, Target::Envd { token }).await?;
        if resp.is_success() {
            return Ok(());
        }
        Err(self.file_error(&resp, &sandbox.sandbox_id, token))
    }

    fn files_request(
        &self,
        sandbox: &Sandbox,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<HttpRequest, E2bError> {
        let (base, mut headers) = self.envd_base(sandbox)?;
        if body.is_some() {
            headers.push((
                "Content-Type".to_owned(),
                "application/octet-stream".to_owned(),
            ));
        }
        Ok(HttpRequest {
            method,
            url: format!("{base}/files?path={}", encode_component(path)),
            headers,
            body,
        })
    }

    /// envd's own refusal of a file call ([`E2bError::File`]), else what any envd failure
    /// maps to (a gone sandbox is named by E2B's proxy with `sandboxId`).
    fn file_error(&self, resp: &HttpResponse, id: &str, token: Option<&str>) -> E2bError {
        let from_proxy = serde_json::from_slice::<BTreeMap<String, IgnoredAny>>(&resp.body)
            .is_ok_and(|body| body.contains_key("sandboxId"));
        if !from_proxy && matches!(resp.status, 400 | 404 | 500 | 507) {
            return E2bError::File {
                status: resp.status,
                message: self.redact(error_message(resp), token),
            };
        }
        self.envd_error(resp, id, token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_entries_read_proto_json() {
        let v: StatBody = serde_json::from_str(
            r#"{"entry":{"name":"a","type":"FILE_TYPE_FILE","path":"/a","size":"2097152","mode":33188,"permissions":"-rw-r--r--","owner":"root","group":"root","modifiedTime":"2026-12-04T01:00:00Z"}}"#,
        )
        .unwrap();
        assert_eq!(
            v.entry.unwrap().entry().unwrap(),
            Entry {
                kind: EntryKind::File,
                size: 2 << 20,
                mode: 0o644,
                mtime_secs: 1_796_346_000,
            }
        );
        let dir: StatBody =
            serde_json::from_str(r#"{"entry":{"type":"FILE_TYPE_DIRECTORY","mode":2147484141}}"#)
                .unwrap();
        let d = dir.entry.unwrap().entry().unwrap();
        assert_eq!((d.kind, d.size, d.mode), (EntryKind::Directory, 0, 0o755));
        let bad: StatBody =
            serde_json::from_str(r#"{"entry":{"type":"FILE_TYPE_FILE","size":"-1"}}"#).unwrap();
        assert!(bad.entry.unwrap().entry().is_err());
    }

    #[test]
    fn timestamps_are_rfc3339() {
        for (t, want) in [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2000-03-01T00:00:00Z", Some(951_868_800)),
            ("2026-12-04T01:00:00.123456789Z", Some(1_796_346_000)),
            ("2026-12-04T03:00:00+02:00", Some(1_796_346_000)),
            ("2026-12-03T23:30:00-01:30", Some(1_796_346_000)),
            ("2026-13-04T01:00:00Z", None),
            ("2026-12-04 01:00:00Z", None),
            ("x", None),
            ("", None),
            ("2026-12-04T01:00:00+0", None),
        ] {
            assert_eq!(timestamp_secs(t), want, "{t}");
        }
    }
}

//! `GET` / `PUT /v1/files/{computer_id}/{path}` (SPEC §3.9): files streamed as raw bytes,
//! with the bearer auth and the ownership rules of the tools.
//!
//! The caller is the legacy session named by `Mcp-Session-Id`, else the authenticated
//! principal (as a stateless tool call is). A download needs the computer to exist; an
//! upload creates it like a first tool call (`?temporary=false` for a permanent one).
//! Neither holds a file in memory: a download sends one slice at a time, an upload
//! streams into a temporary file that replaces the old one only once the body ended well.
//! Both stop at `--file-limit`: a bigger upload gets 413 at once, and the rest of its
//! body is read and dropped in the background (`crate::serve::body::linger`) so a client
//! still sending sees the status; an upload that stalls gets 408 (`--http-body-timeout`).
//! `Range: bytes=a-b` answers 206 with that part.
//!
//! An upload refused before its body is read (auth, the path, the query, the size, the
//! computer, and whatever the backend checks before it reads: a missing parent,
//! `create_only`, a read-only path) is answered at once without reading it
//! ([`refuse_unread`]): hyper sends `100 Continue` only on a body's first read, so a
//! client that sent `Expect: 100-continue` never sends the body; the body of one that did
//! not wait is read and dropped in the background so it sees the status, not a broken
//! pipe. A download whose file changes while it is read ends in a broken body, never a
//! clean short or mixed 200 (`crate::computers::files::Download`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, BodyDataStream};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;
use shared::answer::Answer;
use shared::files::{BrokenStream, PutQuery};

use super::{HttpState, check_auth, check_host_origin, header_str, json_response, principal};
use crate::computers::SessionHost;
use crate::error::ComputerError;
use crate::serve::body;
use crate::spec::FilePutSpec;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, json!({"error": message.into()}))
}

/// Why a request is refused before anything runs (small, unlike a `Response`).
pub(crate) enum Denied {
    Auth(super::Refusal),
    Status(StatusCode, String),
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::Auth(r) => r.into_response(),
            Denied::Status(status, message) => error(status, message),
        }
    }
}

fn failed(e: &ComputerError) -> Response {
    let status =
        StatusCode::from_u16(e.api_code().http_status()).unwrap_or(StatusCode::BAD_GATEWAY);
    error(status, e.to_string())
}

/// The caller: its legacy session, or the principal.
fn caller(state: &HttpState, headers: &HeaderMap) -> Result<SessionHost, Denied> {
    match header_str(headers, "mcp-session-id") {
        Some(sid) => {
            let mut sessions = state.sessions();
            let s = sessions.get_mut(sid).ok_or_else(|| {
                Denied::Status(
                    StatusCode::NOT_FOUND,
                    "unknown Mcp-Session-Id: the session ended or never existed; start a new one, or send no session header".into(),
                )
            })?;
            s.last_seen = Instant::now();
            Ok(s.host.clone())
        }
        None => Ok(SessionHost::new(
            state.computers.clone(),
            principal(state),
            true,
        )),
    }
}

/// Auth, the caller, and the validated absolute path.
fn admit(
    state: &HttpState,
    headers: &HeaderMap,
    id: &str,
    rest: &str,
) -> Result<(SessionHost, String), Denied> {
    check_host_origin(state, headers)
        .and_then(|()| check_auth(state, headers))
        .map_err(Denied::Auth)?;
    if !state.dispatcher.config().names.files {
        return Err(Denied::Status(
            StatusCode::NOT_FOUND,
            "/v1/files belongs to the files tool group: start the server with --tools files (or all)".into(),
        ));
    }
    let path = target(id, rest)?;
    Ok((caller(state, headers)?, path))
}

/// The validated computer id and the absolute path of `/v1/files/{id}/{rest}`.
pub(crate) fn target(id: &str, rest: &str) -> Result<String, Denied> {
    let bad = |e: String| Denied::Status(StatusCode::BAD_REQUEST, e);
    shared::ids::validate_computer_id(id).map_err(|e| bad(e.to_string()))?;
    let path = format!("/{rest}");
    shared::files::validate_path(&path).map_err(|e| bad(e.to_string()))?;
    Ok(path)
}

/// `bytes=a-b`, `bytes=a-` or `bytes=-n` (one range) as `(from, Some(to_exclusive))`;
/// `Err` for anything else.
fn parse_range(raw: &str, size_hint: Option<u64>) -> Result<(u64, Option<u64>), ()> {
    let spec = raw.trim().strip_prefix("bytes=").ok_or(())?;
    if spec.contains(',') {
        return Err(());
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let num = |s: &str| s.trim().parse::<u64>().map_err(|_| ());
    match (a.trim().is_empty(), b.trim().is_empty()) {
        (false, true) => Ok((num(a)?, None)),
        (false, false) => {
            let (from, to) = (num(a)?, num(b)?);
            if to < from {
                return Err(());
            }
            Ok((from, Some(to.saturating_add(1))))
        }
        // A suffix needs the size, which the caller learns first.
        (true, false) => {
            let n = num(b)?;
            let size = size_hint.ok_or(())?;
            Ok((size.saturating_sub(n), None))
        }
        (true, true) => Err(()),
    }
}

/// `GET /v1/files/{computer_id}/{path}`.
pub(super) async fn get(
    State(state): State<Arc<HttpState>>,
    Path((id, rest)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    match admit(&state, &headers, &id, &rest) {
        Ok((host, path)) => download(&host, &id, &path, &headers, state.file_limit).await,
        Err(r) => r.into_response(),
    }
}

/// Streams `path` of computer `id` to `host`'s caller (a `Range` header honoured).
pub(crate) async fn download(
    host: &SessionHost,
    id: &str,
    path: &str,
    headers: &HeaderMap,
    limit: u64,
) -> Response {
    let range_header = header_str(headers, "range").map(str::to_owned);
    let mut range = None;
    if let Some(raw) = &range_header {
        match parse_range(raw, None) {
            Ok(r) => range = Some(r),
            // A suffix range: learn the size with the first slice, then ask again.
            Err(()) if raw.contains("=-") => {
                let probe = host.download(id, path, None, limit).await;
                match probe {
                    Ok(d) => match parse_range(raw, Some(d.size)) {
                        Ok(r) => range = Some(r),
                        Err(()) => return bad_range(d.size),
                    },
                    Err(e) => return failed(&e),
                }
            }
            Err(()) => {
                return error(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "Range must be one `bytes=a-b`, `bytes=a-` or `bytes=-n`",
                );
            }
        }
    }
    let d = match host.download(id, path, range, limit).await {
        Ok(d) => d,
        Err(e) => return failed(&e),
    };
    if range.is_some() && d.start >= d.size && d.size > 0 {
        return bad_range(d.size);
    }
    let (start, end, size) = (d.start, d.end.max(d.start), d.size);
    // One slice at a time: the next is read once the previous went out.
    let chunks = futures_util::stream::unfold(d, |mut d| async move {
        let chunk = d.next_chunk().await?;
        Some((chunk.map_err(|e| std::io::Error::other(e.to_string())), d))
    });
    let mut r = Response::new(Body::from_stream(chunks));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    if range.is_some() {
        *r.status_mut() = StatusCode::PARTIAL_CONTENT;
        let last = end.saturating_sub(1).max(start);
        if let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{last}/{size}")) {
            r.headers_mut().insert(header::CONTENT_RANGE, v);
        }
    }
    r
}

fn bad_range(size: u64) -> Response {
    let mut r = error(
        StatusCode::RANGE_NOT_SATISFIABLE,
        format!("the range starts past the end of the file ({size} bytes)"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
        r.headers_mut().insert(header::CONTENT_RANGE, v);
    }
    r
}

fn put_query(uri: &Uri) -> Result<PutQuery, shared::files::QueryError> {
    PutQuery::parse(uri.query().unwrap_or_default())
}

/// `PUT /v1/files/{computer_id}/{path}`.
pub(super) async fn put(
    State(state): State<Arc<HttpState>>,
    Path((id, rest)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match admit(&state, &headers, &id, &rest) {
        Ok((host, path)) => upload(&host, &id, &path, &uri, &headers, body, state.file_limit).await,
        Err(r) => refuse_unread(&headers, body.into_data_stream(), r.into_response()),
    }
}

/// Whether the client sent `Expect: 100-continue`: it waits for a go-ahead before the body.
fn expects_continue(headers: &HeaderMap) -> bool {
    header_str(headers, "expect").is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
}

/// Answers `r` to an upload refused before its body was read (issue 46): the answer goes
/// out at once, the last on its connection. hyper sends `100 Continue` only when a body
/// is first read, so a client that sent `Expect: 100-continue` gets the refusal instead and
/// never sends the body; the body of one that did not wait is read and dropped in the
/// background ([`body::linger`], bounded), so it reads the answer instead of meeting a
/// broken pipe.
pub(crate) fn refuse_unread(
    headers: &HeaderMap,
    body: BodyDataStream,
    mut r: Response,
) -> Response {
    if !expects_continue(headers) {
        body::linger(body, 0);
    }
    body::close_after(&mut r);
    r
}

/// Answers `r` to an upload refused after its body was read from: the rest of a body
/// still coming is read and dropped in the background, the connection closed after.
fn refuse_read(body: BodyDataStream, mut r: Response) -> Response {
    if !http_body::Body::is_end_stream(&body) {
        body::linger(body, 0);
        body::close_after(&mut r);
    }
    r
}

/// Streams `body` into `path` of computer `id` for `host`'s caller (the query says how).
pub(crate) async fn upload(
    host: &SessionHost,
    id: &str,
    path: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
    limit: u64,
) -> Response {
    let mut raw = body.into_data_stream();
    let q = match put_query(uri) {
        Ok(q) => q,
        Err(e) => {
            return refuse_unread(headers, raw, error(StatusCode::BAD_REQUEST, e.to_string()));
        }
    };
    let declared = header_str(headers, "content-length").and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        let r = too_large(format!(
            "the body is over this server's --file-limit of {limit} bytes; nothing was written"
        ));
        return refuse_unread(headers, raw, r);
    }
    let mut seen = 0u64;
    let mut over = false;
    let mut stalled = None;
    // Whether the backend read from the body: each refuses what it can (the computer, the
    // path, `create_only`) before it reads, and then the body is never read.
    let mut polled = false;
    let polling = futures_util::stream::poll_fn(|cx| {
        polled = true;
        raw.poll_next_unpin(cx)
    });
    let mut stream = polling.map(|chunk| {
        let bytes = chunk.map_err(|e| {
            stalled = body::stalled(&e);
            BrokenStream(format!("reading the request body: {e}"))
        })?;
        seen += bytes.len() as u64;
        if seen > limit {
            over = true;
            return Err(BrokenStream(format!(
                "the body passed this server's --file-limit of {limit} bytes"
            )));
        }
        Ok(Vec::from(bytes))
    });
    let spec = FilePutSpec {
        path,
        create_only: q.create_only,
        mode: q.mode,
        make_dirs: q.make_dirs,
        size: declared,
    };
    let result = host.upload(id, q.temporary, &spec, &mut stream).await;
    drop(stream);
    match result {
        Ok(w) => json_response(StatusCode::CREATED, Answer::Written(w).to_value()),
        Err(e) if over => {
            body::linger(raw, 0);
            too_large(e.to_string())
        }
        Err(_) if stalled.is_some() => {
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                stalled.map(|s| s.to_string()).unwrap_or_default(),
            );
            body::close_after(&mut r);
            r
        }
        Err(e) if !polled => refuse_unread(headers, raw, failed(&e)),
        Err(e) => refuse_read(raw, failed(&e)),
    }
}

/// 413 for a body over `--file-limit`, the last answer on its connection.
fn too_large(message: String) -> Response {
    let mut r = error(StatusCode::PAYLOAD_TOO_LARGE, message);
    body::close_after(&mut r);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", None), Ok((0, Some(10))));
        assert_eq!(parse_range("bytes=5-", None), Ok((5, None)));
        assert_eq!(parse_range("bytes=-4", Some(10)), Ok((6, None)));
        assert_eq!(parse_range("bytes=-40", Some(10)), Ok((0, None)));
        for bad in [
            "bytes=9-1",
            "bytes=a-b",
            "items=0-1",
            "bytes=0-1,3-4",
            "bytes=-",
            "bytes=-4",
        ] {
            assert_eq!(parse_range(bad, None), Err(()), "{bad}");
        }
    }

    fn refusal(d: Denied) -> (StatusCode, String) {
        match d {
            Denied::Status(status, message) => (status, message),
            Denied::Auth(_) => panic!("an auth refusal"),
        }
    }

    #[test]
    fn a_route_names_a_valid_computer_and_an_absolute_path_below_root() {
        assert_eq!(target("box", "etc/hosts").ok(), Some("/etc/hosts".into()));
        assert_eq!(target("box", "a b/ü").ok(), Some("/a b/ü".into()));
        for (id, rest, why) in [
            ("Box", "f", "lowercase letters"),
            ("-box", "f", "must start and end"),
            ("box", "", "not the root directory"),
            ("box", "a\0b", "NUL"),
        ] {
            let (status, message) = refusal(target(id, rest).err().unwrap());
            assert_eq!(status, StatusCode::BAD_REQUEST, "{id} {rest:?}");
            assert!(message.contains(why), "{id} {rest:?}: {message}");
        }
    }

    #[test]
    fn more_ranges_one_byte_spaces_and_huge_ends() {
        assert_eq!(parse_range("bytes=0-0", None), Ok((0, Some(1))));
        assert_eq!(parse_range(" bytes= 3 - 4 ", None), Ok((3, Some(5))));
        assert_eq!(
            parse_range(&format!("bytes=0-{}", u64::MAX), None),
            Ok((0, Some(u64::MAX)))
        );
        assert_eq!(parse_range("bytes=-0", Some(10)), Ok((10, None)));
        assert_eq!(parse_range("bytes=-10", Some(10)), Ok((0, None)));
        assert_eq!(parse_range("bytes=1-2-3", None), Err(()));
        assert_eq!(parse_range("bytes=18446744073709551616-", None), Err(()));
    }

    #[test]
    fn a_range_past_the_end_says_the_files_size() {
        let r = bad_range(42);
        assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(r.headers()[header::CONTENT_RANGE], "bytes */42");
    }

    #[test]
    fn only_an_expect_100_continue_waits_for_a_go_ahead() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::EXPECT, HeaderValue::from_static(v));
            expects_continue(&h)
        };
        assert!(with("100-continue"));
        assert!(with(" 100-Continue "));
        assert!(!with("200-ok"));
        assert!(!expects_continue(&HeaderMap::new()));
    }

    #[test]
    fn junk_never_panics() {
        let alphabet = b"bytes=-,0123456789 \xff";
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let raw: Vec<u8> = (0..(seed % 24) as usize)
                .map(|i| alphabet[((seed >> (i % 60)) as usize + i) % alphabet.len()])
                .collect();
            let raw = String::from_utf8_lossy(&raw);
            let _ = parse_range(&raw, Some(seed % 1000));
            let _ = parse_range(&raw, None);
            if let Ok(uri) = format!("/x?{}", raw.replace(' ', "&")).parse::<Uri>() {
                let _ = put_query(&uri);
            }
        }
        let uri: Uri = "/x?temporary=false&mode=0755&create_only&make_dirs=1"
            .parse()
            .unwrap();
        let q = put_query(&uri).unwrap();
        assert_eq!(
            (q.temporary, q.mode, q.create_only, q.make_dirs),
            (Some(false), Some(0o755), true, true)
        );
    }
}

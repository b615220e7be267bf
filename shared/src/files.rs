//! Files as bytes (SPEC §3.9, group `files`): the validated file calls, the edit rule,
//! and the shape of their results.
//!
//! Every backend moves bytes; the text/base64 choice, the `eof` flag and the edit
//! (an exact, counted replacement) are decided here once, so the local server, the
//! executor API and the gateway answer alike.

use serde::{Deserialize, Serialize};
/// The hash of `Written::sha256`, for backends that hash as they go.
pub use sha2::{Digest, Sha256};

pub mod over_exec;

/// The file tools' names.
pub const READ_TOOL: &str = "computer_file_read";
pub const WRITE_TOOL: &str = "computer_file_write";
pub const EDIT_TOOL: &str = "computer_file_edit";

/// Most bytes one tool call reads or writes (4 MiB).
pub const MAX_SLICE: u64 = 4 << 20;
/// Largest file `computer_file_edit` rewrites (read whole, written back in one atomic
/// replace).
pub const MAX_EDIT_BYTES: u64 = MAX_SLICE;
/// Longest path accepted.
pub const MAX_PATH: usize = 4096;
/// The mode of a file written without `mode`.
pub const DEFAULT_MODE: u32 = 0o644;

/// A validated `computer_file_read` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    pub computer_id: Option<String>,
    pub temporary: Option<bool>,
    pub path: String,
    pub offset: u64,
    /// At most [`MAX_SLICE`].
    pub length: u64,
}

/// A validated `computer_file_write` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileWrite {
    pub computer_id: Option<String>,
    pub temporary: Option<bool>,
    pub path: String,
    pub content: Vec<u8>,
    pub append: bool,
    pub create_only: bool,
    /// `None`: [`DEFAULT_MODE`] for a new or replaced file; an appended file keeps its own.
    pub mode: Option<u32>,
    pub make_dirs: bool,
}

/// A validated `computer_file_edit` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEdit {
    pub computer_id: Option<String>,
    pub temporary: Option<bool>,
    pub path: String,
    pub old_text: String,
    pub new_text: String,
    pub expected_replacements: u64,
}

/// One of the file tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileCall {
    Read(FileRead),
    Write(FileWrite),
    Edit(FileEdit),
}

impl FileCall {
    pub fn computer_id(&self) -> Option<&str> {
        match self {
            FileCall::Read(r) => r.computer_id.as_deref(),
            FileCall::Write(w) => w.computer_id.as_deref(),
            FileCall::Edit(e) => e.computer_id.as_deref(),
        }
    }

    pub fn temporary(&self) -> Option<bool> {
        match self {
            FileCall::Read(r) => r.temporary,
            FileCall::Write(w) => w.temporary,
            FileCall::Edit(e) => e.temporary,
        }
    }

    /// The same call on `computer_id`, with `temporary` as given.
    pub fn on(mut self, computer_id: &str, temporary: Option<bool>) -> FileCall {
        let (id, t) = match &mut self {
            FileCall::Read(r) => (&mut r.computer_id, &mut r.temporary),
            FileCall::Write(w) => (&mut w.computer_id, &mut w.temporary),
            FileCall::Edit(e) => (&mut e.computer_id, &mut e.temporary),
        };
        *id = Some(computer_id.to_owned());
        *t = temporary;
        self
    }

    pub fn path(&self) -> &str {
        match self {
            FileCall::Read(r) => &r.path,
            FileCall::Write(w) => &w.path,
            FileCall::Edit(e) => &e.path,
        }
    }

    /// The tool this call is.
    pub fn tool(&self) -> &'static str {
        match self {
            FileCall::Read(_) => READ_TOOL,
            FileCall::Write(_) => WRITE_TOOL,
            FileCall::Edit(_) => EDIT_TOOL,
        }
    }
}

/// Why a streamed body broke off (the client went away, a limit passed, the backend
/// failed): whoever sees it stops, leaving the old file as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BrokenStream(pub String);

crate::message_error_from!(BrokenStream);

/// Why a path an agent passed is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("`path` must be absolute (start with /), got {0:?}")]
    NotAbsolute(String),
    #[error("`path` is {0} bytes; at most {MAX_PATH} are accepted")]
    TooLong(usize),
    #[error("`path` must not contain NUL characters")]
    Nul,
    #[error("`path` must name a file, not the root directory")]
    Root,
}

/// Checks a path an agent passed: absolute, no NUL, bounded.
pub fn validate_path(path: &str) -> Result<(), PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute(crate::history::cut(path, 60)));
    }
    if path.len() > MAX_PATH {
        return Err(PathError::TooLong(path.len()));
    }
    if path.contains('\0') {
        return Err(PathError::Nul);
    }
    if path.trim_end_matches('/').is_empty() {
        return Err(PathError::Root);
    }
    Ok(())
}

/// A `mode` that is not an octal permission string (the value, cut to 20 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`mode` must be an octal permission string like \"0644\" or \"0755\", got {0:?}")]
pub struct ModeError(pub String);

/// Parses a `mode` argument: an octal string like `"0644"` or `"755"`, exactly the
/// schema's pattern `^(0o)?[0-7]{1,4}$` (no sign, no spaces: `u32::from_str_radix` alone
/// would take `"+755"`).
pub fn parse_mode(raw: &str) -> Result<u32, ModeError> {
    let digits = raw.strip_prefix("0o").unwrap_or(raw);
    let octal =
        (1..=4).contains(&digits.len()) && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(digits, 8) {
        Ok(m) if octal => Ok(m),
        _ => Err(ModeError(crate::history::cut(raw, 20))),
    }
}

/// A mode as SPEC writes it: four octal digits.
pub fn mode_string(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// What a backend read: one slice of a regular file, and the file's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The file's size when read.
    pub size: u64,
    pub offset: u64,
    pub data: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
    /// Last modification, seconds since the epoch.
    pub mtime_secs: i64,
    /// Nanoseconds past `mtime_secs`, where the backend knows them (else 0): with the size,
    /// how a download spanning several reads tells that the file changed meanwhile.
    pub mtime_nanos: u32,
}

impl Slice {
    /// Whether this slice reaches the end of the file.
    pub fn eof(&self) -> bool {
        self.offset.saturating_add(self.data.len() as u64) >= self.size
    }
}

/// What a backend wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The file's size after the write.
    pub size: u64,
    /// SHA-256 of the whole file after the write, lowercase hex.
    pub sha256: String,
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of a digest.
pub fn hex(digest: &[u8]) -> String {
    let mut s = String::with_capacity(digest.len() * 2);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The answer of `computer_file_read`: built by [`read_structured`] only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadAnswer {
    pub computer_id: String,
    pub path: String,
    pub size: u64,
    pub offset: u64,
    /// The slice when it is UTF-8 ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// ... else its bytes in base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
    #[serde(default, skip_serializing_if = "crate::result::is_false")]
    pub eof: bool,
    pub mode: String,
    pub mtime: String,
    /// This call made the computer (SPEC §3.2).
    #[serde(default, skip_serializing_if = "crate::result::is_false")]
    pub created: bool,
}

/// `structuredContent` of `computer_file_read`.
pub fn read_structured(computer_id: &str, path: &str, slice: &Slice) -> ReadAnswer {
    let (content, content_base64) = match std::str::from_utf8(&slice.data) {
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(&slice.data);
            (None, Some(b64))
        }
    };
    let mtime_ms = u64::try_from(slice.mtime_secs)
        .unwrap_or(0)
        .saturating_mul(1000);
    ReadAnswer {
        computer_id: computer_id.to_owned(),
        path: path.to_owned(),
        size: slice.size,
        offset: slice.offset,
        content,
        content_base64,
        eof: slice.eof(),
        mode: mode_string(slice.mode),
        mtime: crate::history::rfc3339_utc(mtime_ms),
        created: false,
    }
}

/// The answer of `computer_file_write`: built by [`write_structured`] only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteAnswer {
    pub computer_id: String,
    pub path: String,
    pub size: u64,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "crate::result::is_false")]
    pub created: bool,
}

/// `structuredContent` of `computer_file_write`.
pub fn write_structured(computer_id: &str, path: &str, w: &Written) -> WriteAnswer {
    WriteAnswer {
        computer_id: computer_id.to_owned(),
        path: path.to_owned(),
        size: w.size,
        sha256: w.sha256.clone(),
        created: false,
    }
}

/// The route's path with its `%XX` escapes decoded (as an executor's router decodes it);
/// a decoding that is not UTF-8 leaves the path as sent.
pub fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

/// The query of `PUT /v1/files/{computer_id}/{path}`: `temporary`, `mode`,
/// `create_only`, `make_dirs` (flags: empty, `true`, `1`, `false` or `0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PutQuery {
    pub temporary: Option<bool>,
    pub mode: Option<u32>,
    pub create_only: bool,
    pub make_dirs: bool,
}

/// Why the query of a `PUT /v1/files` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("`{name}` must be true or false, got {value:?}")]
    Flag { name: String, value: String },
    #[error("query parameter {0:?} is given more than once; give it once")]
    Repeated(String),
    #[error("unknown query parameter {0:?}; accepted: temporary, mode, create_only, make_dirs")]
    Unknown(String),
    #[error(transparent)]
    Mode(#[from] ModeError),
}

impl PutQuery {
    /// Parses the query text (without `?`); an unknown name, a bad value or a name given
    /// twice says what is accepted. A repeated name is refused, not read as its first or
    /// last value: the Worker and the executor must never read one query two ways
    /// (issue 46).
    pub fn parse(query: &str) -> Result<Self, QueryError> {
        let mut q = PutQuery::default();
        let mut seen: Vec<&str> = Vec::new();
        let flag = |k: &str, v: &str| match v {
            "" | "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(QueryError::Flag {
                name: k.to_owned(),
                value: v.to_owned(),
            }),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if seen.contains(&k) {
                return Err(QueryError::Repeated(k.to_owned()));
            }
            seen.push(k);
            match k {
                "temporary" => q.temporary = Some(flag(k, v)?),
                "create_only" => q.create_only = flag(k, v)?,
                "make_dirs" => q.make_dirs = flag(k, v)?,
                "mode" => q.mode = Some(parse_mode(v)?),
                other => return Err(QueryError::Unknown(other.to_owned())),
            }
        }
        Ok(q)
    }
}

/// The answer of `computer_file_edit`: built by [`edit_structured`] only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditAnswer {
    pub computer_id: String,
    pub path: String,
    pub replacements: u64,
    pub size: u64,
    #[serde(default, skip_serializing_if = "crate::result::is_false")]
    pub created: bool,
}

/// `structuredContent` of `computer_file_edit`.
pub fn edit_structured(computer_id: &str, path: &str, replacements: u64, size: u64) -> EditAnswer {
    EditAnswer {
        computer_id: computer_id.to_owned(),
        path: path.to_owned(),
        replacements,
        size,
        created: false,
    }
}

/// Why an edit changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error(
        "`old_text` was not found in {path}: nothing changed. Read the file (computer_file_read) and copy the text exactly, whitespace included"
    )]
    NotFound { path: String },
    #[error(
        "`old_text` occurs {found} times in {path}, not {expected}: nothing changed. Add surrounding lines to make it unique, or pass `expected_replacements: {found}` to replace every one"
    )]
    Count {
        path: String,
        found: u64,
        expected: u64,
    },
    #[error(
        "{path} is {size} bytes; computer_file_edit rewrites files of at most {MAX_EDIT_BYTES} bytes (4 MiB) atomically: edit it with terminal_execute (e.g. sed -i)"
    )]
    TooBig { path: String, size: u64 },
    #[error(
        "the edited file would be {0} bytes, over the 4 MiB computer_file_edit writes at once; nothing changed"
    )]
    GrowsTooBig(usize),
}

/// The whole new content of an edit of `file` (read from offset 0 with length
/// [`MAX_EDIT_BYTES`]) and the number of replacements, or why nothing changes. The caller
/// writes it back in one atomic replace with `file.mode`.
pub fn edit_file(e: &FileEdit, file: &Slice) -> Result<(Vec<u8>, u64), EditError> {
    if file.size > MAX_EDIT_BYTES || !file.eof() {
        return Err(EditError::TooBig {
            path: e.path.clone(),
            size: file.size,
        });
    }
    let (edited, replacements) = apply_edit(
        &e.path,
        &file.data,
        &e.old_text,
        &e.new_text,
        e.expected_replacements,
    )?;
    if edited.len() as u64 > MAX_EDIT_BYTES {
        return Err(EditError::GrowsTooBig(edited.len()));
    }
    Ok((edited, replacements))
}

/// Replaces every non-overlapping `old` in `content` with `new`, only when it occurs
/// exactly `expected` times. Bytes, so a file that is not UTF-8 elsewhere edits fine.
pub fn apply_edit(
    path: &str,
    content: &[u8],
    old: &str,
    new: &str,
    expected: u64,
) -> Result<(Vec<u8>, u64), EditError> {
    let old = old.as_bytes();
    if old.is_empty() {
        // Validation refuses it; an empty needle would match everywhere.
        return Err(EditError::NotFound { path: path.into() });
    }
    let mut at = Vec::new();
    let mut i = 0;
    while i + old.len() <= content.len() {
        if &content[i..i + old.len()] == old {
            at.push(i);
            i += old.len();
        } else {
            i += 1;
        }
    }
    let found = at.len() as u64;
    if found == 0 {
        return Err(EditError::NotFound { path: path.into() });
    }
    if found != expected {
        return Err(EditError::Count {
            path: path.into(),
            found,
            expected,
        });
    }
    let mut out = Vec::with_capacity(content.len() + at.len() * new.len());
    let mut from = 0;
    for a in at {
        out.extend_from_slice(&content[from..a]);
        out.extend_from_slice(new.as_bytes());
        from = a + old.len();
    }
    out.extend_from_slice(&content[from..]);
    Ok((out, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn read_structured(id: &str, path: &str, slice: &Slice) -> Value {
        serde_json::to_value(super::read_structured(id, path, slice)).unwrap()
    }

    #[test]
    fn route_paths_are_percent_decoded() {
        for (raw, want) in [
            ("a%20b/c.txt", "a b/c.txt"),
            ("%2Fetc", "/etc"),
            ("%C3%A9t%c3%a9", "été"),
            ("%", "%"),
            ("x%4", "x%4"),
            ("%zz", "%zz"),
            ("%FF", "%FF"),
            ("a%00b", "a\0b"),
            ("plain", "plain"),
        ] {
            assert_eq!(percent_decoded(raw), want, "{raw}");
        }
        assert!(validate_path(&format!("/{}", percent_decoded("a%00b"))).is_err());
    }

    #[test]
    fn paths_and_modes() {
        assert!(validate_path("/etc/hosts").is_ok());
        assert!(validate_path("etc/hosts").is_err());
        assert!(validate_path("/").is_err());
        assert!(validate_path("//").is_err());
        assert!(validate_path(&format!("/{}", "a".repeat(MAX_PATH))).is_err());
        assert_eq!(parse_mode("0644"), Ok(0o644));
        assert_eq!(parse_mode("755"), Ok(0o755));
        assert_eq!(parse_mode("0o600"), Ok(0o600));
        assert_eq!(parse_mode("4755"), Ok(0o4755));
        for bad in [
            "",
            "0o",
            "888",
            "rw-r--r--",
            "77777",
            "00644",
            "-1",
            "0x1ff",
            "+755",
            "+0",
            " 755",
            "755 ",
            "0o+7",
        ] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
        assert_eq!(mode_string(0o100644), "0644");
    }

    #[test]
    fn edits_are_exact_and_counted() {
        let f = b"a = 1\nb = 1\n\xff\n";
        assert_eq!(
            apply_edit("/f", f, "b = 1", "b = 2", 1),
            Ok((b"a = 1\nb = 2\n\xff\n".to_vec(), 1))
        );
        assert_eq!(
            apply_edit("/f", f, " = 1", "=2", 2),
            Ok((b"a=2\nb=2\n\xff\n".to_vec(), 2))
        );
        assert!(matches!(
            apply_edit("/f", f, " = 1", "", 1),
            Err(EditError::Count {
                found: 2,
                expected: 1,
                ..
            })
        ));
        assert!(matches!(
            apply_edit("/f", f, "zzz", "", 1),
            Err(EditError::NotFound { .. })
        ));
        // Non-overlapping, left to right.
        assert_eq!(
            apply_edit("/f", b"aaaa", "aa", "b", 2),
            Ok((b"bb".to_vec(), 2))
        );
        assert_eq!(
            apply_edit("/f", b"aaa", "aa", "b", 1),
            Ok((b"ba".to_vec(), 1))
        );
    }

    #[test]
    fn read_results_choose_text_or_base64() {
        let s = Slice {
            size: 3,
            offset: 0,
            data: b"hi\n".to_vec(),
            mode: 0o644,
            mtime_secs: 0,
            mtime_nanos: 0,
        };
        let v = read_structured("box", "/f", &s);
        assert_eq!(v["content"], "hi\n");
        assert_eq!(v["eof"], true);
        assert_eq!(v["mode"], "0644");
        assert_eq!(v["mtime"], "1970-01-01T00:00:00.000Z");
        let s = Slice {
            size: 10,
            data: vec![0, 255],
            ..s
        };
        let v = read_structured("box", "/f", &s);
        assert_eq!(v["content_base64"], "AP8=");
        assert!(v.get("content").is_none() && v.get("eof").is_none());
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    fn edit(old: &str, new: &str) -> FileEdit {
        FileEdit {
            computer_id: None,
            temporary: None,
            path: "/f".into(),
            old_text: old.into(),
            new_text: new.into(),
            expected_replacements: 1,
        }
    }

    fn whole(data: Vec<u8>) -> Slice {
        Slice {
            size: data.len() as u64,
            offset: 0,
            data,
            mode: 0o600,
            mtime_secs: 0,
            mtime_nanos: 0,
        }
    }

    #[test]
    fn a_file_over_4_mib_or_not_read_whole_is_too_big_to_edit() {
        let mut big = whole(b"x".to_vec());
        big.size = MAX_EDIT_BYTES + 1;
        let e = edit_file(&edit("x", "y"), &big).unwrap_err();
        assert_eq!(
            e,
            EditError::TooBig {
                path: "/f".into(),
                size: MAX_EDIT_BYTES + 1
            }
        );
        assert!(e.to_string().contains("sed -i"), "{e}");
        // The file grew between its size and its read: only part of it is here.
        let mut short = whole(b"x".to_vec());
        short.size = 2;
        assert!(matches!(
            edit_file(&edit("x", "y"), &short),
            Err(EditError::TooBig { size: 2, .. })
        ));
        assert_eq!(
            edit_file(&edit("x", "y"), &whole(b"axb".to_vec())),
            Ok((b"ayb".to_vec(), 1))
        );
    }

    #[test]
    fn an_edit_may_grow_a_file_to_4_mib_but_not_past_it() {
        let mut data = vec![b'a'; MAX_EDIT_BYTES as usize - 1];
        data.push(b'x');
        let file = whole(data);
        let (same, n) = edit_file(&edit("x", "y"), &file).unwrap();
        assert_eq!((same.len() as u64, n), (MAX_EDIT_BYTES, 1));
        assert_eq!(
            edit_file(&edit("x", "yz"), &file),
            Err(EditError::GrowsTooBig(MAX_EDIT_BYTES as usize + 1))
        );
    }

    #[test]
    fn a_count_mismatch_says_how_many_there_are_and_how_to_replace_them_all() {
        let e = apply_edit("/etc/app.conf", b"x x x", "x", "y", 1).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("occurs 3 times in /etc/app.conf, not 1"), "{m}");
        assert!(m.contains("`expected_replacements: 3`"), "{m}");
        let m = apply_edit("/etc/app.conf", b"abc", "z", "y", 1)
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("not found in /etc/app.conf: nothing changed"),
            "{m}"
        );
        // An empty needle matches nothing rather than everywhere.
        assert!(matches!(
            apply_edit("/f", b"abc", "", "y", 4),
            Err(EditError::NotFound { .. })
        ));
    }

    #[test]
    fn a_slice_reaches_the_end_when_its_last_byte_is_the_files_last() {
        let at = |offset: u64, len: usize, size: u64| {
            Slice {
                offset,
                size,
                ..whole(vec![0; len])
            }
            .eof()
        };
        assert!(at(8, 2, 10));
        assert!(!at(7, 2, 10));
        assert!(at(20, 0, 10), "an offset past the end");
        assert!(at(0, 0, 0), "an empty file");
        assert!(at(u64::MAX, 1, 10), "no overflow");
    }

    #[test]
    fn a_file_call_moved_to_another_computer_keeps_the_rest() {
        let write = FileCall::Write(FileWrite {
            computer_id: None,
            temporary: Some(true),
            path: "/w".into(),
            content: b"c".to_vec(),
            append: true,
            create_only: false,
            mode: Some(0o600),
            make_dirs: true,
        });
        let moved = write.clone().on("box", None);
        assert_eq!(
            (
                moved.computer_id(),
                moved.temporary(),
                moved.path(),
                moved.tool()
            ),
            (Some("box"), None, "/w", WRITE_TOOL)
        );
        let (FileCall::Write(a), FileCall::Write(b)) = (&write, &moved) else {
            panic!()
        };
        assert_eq!(
            (&a.content, a.append, a.mode, a.make_dirs),
            (&b.content, b.append, b.mode, b.make_dirs)
        );
        let e = FileCall::Edit(edit("a", "b")).on("other", Some(false));
        assert_eq!(
            (e.computer_id(), e.temporary(), e.tool()),
            (Some("other"), Some(false), EDIT_TOOL)
        );
        let r = FileCall::Read(FileRead {
            computer_id: Some("x".into()),
            temporary: None,
            path: "/r".into(),
            offset: 0,
            length: 1,
        })
        .on("y", Some(true));
        assert_eq!(
            (r.computer_id(), r.temporary(), r.tool()),
            (Some("y"), Some(true), READ_TOOL)
        );
    }

    #[test]
    fn a_put_query_names_what_it_refuses() {
        let e = PutQuery::parse("owner=me").unwrap_err();
        assert_eq!(e, QueryError::Unknown("owner".into()));
        assert!(
            e.to_string()
                .contains("accepted: temporary, mode, create_only, make_dirs")
        );
        let e = PutQuery::parse("make_dirs=yes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`make_dirs` must be true or false, got \"yes\""
        );
        assert!(matches!(
            PutQuery::parse("mode=999"),
            Err(QueryError::Mode(ModeError(m))) if m == "999"
        ));
        assert_eq!(PutQuery::parse(""), Ok(PutQuery::default()));
        // Empty pairs are skipped; a bare flag is true.
        assert_eq!(
            PutQuery::parse("&&make_dirs&temporary=0&"),
            Ok(PutQuery {
                make_dirs: true,
                temporary: Some(false),
                ..PutQuery::default()
            })
        );
    }

    #[test]
    fn a_refused_relative_path_is_shown_cut_to_60_bytes() {
        let long = "d/".repeat(100);
        let PathError::NotAbsolute(shown) = validate_path(&long).unwrap_err() else {
            panic!()
        };
        assert!(shown.len() <= 60 && shown.ends_with('…'), "{shown}");
        assert!(long.starts_with(shown.trim_end_matches('…')));
        assert_eq!(validate_path("/a\0b"), Err(PathError::Nul));
        let at_limit = format!("/{}", "a".repeat(MAX_PATH - 1));
        assert_eq!(validate_path(&at_limit), Ok(()));
        assert_eq!(
            validate_path(&format!("{at_limit}a")),
            Err(PathError::TooLong(MAX_PATH + 1))
        );
    }

    #[test]
    fn issue_46_a_query_parameter_given_twice_is_refused() {
        for query in [
            "temporary=false&temporary=true",
            "mode=0644&mode=0600",
            "create_only&create_only=false",
            "make_dirs=1&mode=0600&make_dirs=1",
        ] {
            let e = PutQuery::parse(query).unwrap_err();
            assert!(matches!(e, QueryError::Repeated(_)), "{query}: {e}");
            assert!(e.to_string().contains("more than once"), "{query}: {e}");
        }
        let q = PutQuery::parse("temporary=false&mode=0600&create_only&make_dirs=0").unwrap();
        assert_eq!(
            (q.temporary, q.mode, q.create_only, q.make_dirs),
            (Some(false), Some(0o600), true, false)
        );
    }
}

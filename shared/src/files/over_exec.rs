//! Files through a computer's exec, for providers with no file API of ours (Fly, E2B,
//! Modal): POSIX `sh` with `stat`, `tail`, `head` and `base64`, which both GNU coreutils
//! and BusyBox have. Bytes travel as base64 on stdout (reads, [`READ_SLICE`] a call) and
//! stdin (writes, [`SLICE`] a call), so a provider's request size never matters. Where the
//! provider also has a file API ([`Shell::moves_files`]: E2B's envd), slices bigger than
//! one exec's move through it as raw bytes, and the exec only checks and commits.
//!
//! A write stages its bytes in a temporary file beside the target (`.<name>.msc-<n>.tmp`)
//! over as many calls as it needs, then one last call commits: a rename over the target
//! (`create_only`: a hard link, which fails if the name exists), or, for an append, the
//! staged bytes added to the end. A failure removes the temporary, so a failed write leaves
//! the old file. What this path cannot do is fsync: the staged file is renamed when the
//! shell says it is written.

use std::future::Future;

use base64::Engine;

use super::{Slice, Written};
use crate::result::ExecOutcome;

/// Bytes written per exec call: 960 KiB of base64 on stdin, under E2B's 1 MiB limit for a
/// command's input.
pub const SLICE: usize = 720 << 10;
/// Bytes read per exec call (about 2.8 MB of base64 on stdout).
pub const READ_SLICE: u64 = 2 << 20;
/// The output a read needs kept, for the provider's limit: its base64 (4 characters per 3
/// bytes, plus the newline `base64` writes after every 76) and the stat line.
pub const OUTPUT_LIMIT: usize = {
    let b64 = (READ_SLICE as usize).div_ceil(3) * 4;
    b64 + b64 / 76 + 1 + 8192
};
/// Each call's timeout.
pub const TIMEOUT_MS: u64 = 120_000;

/// Bytes per upload when the shell has a file API ([`Shell::moves_files`]).
pub const MOVE_SLICE: usize = 4 << 20;
/// Largest file a read takes whole through a file API (it has no ranges); a bigger one is
/// read in exec slices.
pub const WHOLE_MAX: u64 = 8 << 20;

/// What a provider's file API says a path is ([`Shell::stat`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    File,
    Directory,
    /// A symlink (its target is left to the computer's own shell), a device, a socket…
    Other,
}

/// A path as a provider's file API describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    pub kind: PathKind,
    pub size: u64,
    pub mode: u32,
    pub mtime_secs: i64,
}

/// A computer's shell, one command at a time: argv, stdin, the outcome. (No `Send` bound:
/// callers use concrete shells, whose futures are `Send` where their exec is.)
///
/// A shell whose provider also has a file API (E2B's envd) says so with
/// [`Shell::moves_files`] and serves [`Shell::stat`], [`Shell::download`] and
/// [`Shell::upload`]: then slices bigger than one exec's move as raw bytes, and the exec
/// only checks and commits.
pub trait Shell {
    type Error;
    fn run(
        &self,
        argv: Vec<String>,
        stdin: Option<String>,
    ) -> impl Future<Output = Result<ExecOutcome, Self::Error>>;

    /// Whether the file API methods below work.
    fn moves_files(&self) -> bool {
        false
    }

    /// What `path` is; `None` when it does not exist.
    fn stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Option<PathInfo>, OverExec<Self::Error>>> {
        let _ = path;
        async { Err(no_file_api()) }
    }

    /// File `path`, whole.
    fn download(&self, path: &str) -> impl Future<Output = Result<Vec<u8>, OverExec<Self::Error>>> {
        let _ = path;
        async { Err(no_file_api()) }
    }

    /// Writes `bytes` to `path` whole, making missing parent directories.
    fn upload(
        &self,
        path: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<(), OverExec<Self::Error>>> {
        let _ = (path, bytes);
        async { Err(no_file_api()) }
    }
}

/// What a file API method answers where the computer has none (never called when
/// [`Shell::moves_files`] is false).
pub fn no_file_api<E>() -> OverExec<E> {
    OverExec::Refused("this computer has no provider file API".into())
}

/// Why a file operation through exec failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverExec<E> {
    /// The exec itself failed (the computer is gone, the provider refused).
    #[error(transparent)]
    Shell(E),
    /// The path (or a parent) does not exist.
    #[error("{0}")]
    NoSuchFile(String),
    /// Refused, nothing changed: a directory, an existing file, a full disk…
    #[error("{0}")]
    Refused(String),
}

const READ: &str = r#"f=$1; off=$2; len=$3
if [ -d "$f" ]; then echo msc:is_dir >&2; exit 40; fi
if [ ! -e "$f" ]; then echo msc:not_found >&2; exit 41; fi
if [ ! -f "$f" ]; then echo msc:not_regular >&2; exit 42; fi
if [ ! -r "$f" ]; then echo msc:permission >&2; exit 43; fi
m=$(stat -c '%s %a %Y' "$f") || exit 44
echo "$m"
tail -c +$((off + 1)) "$f" | head -c "$len" | base64"#;

/// `$1` phase (`first`, `more`, `last`, `whole`, `abort`; `pfirst`, `pmore`, `plast`,
/// `pwhole`: the same with the bytes already uploaded to `$3.p`), `$2` path, `$3`
/// temporary, `$4` mode (octal, or `-`), `$5` flags (`a` append, `c` create_only, `d`
/// make_dirs).
const WRITE: &str = r#"ph=$1; f=$2; t=$3; mode=$4; fl=$5
case $ph in abort) rm -f "$t" "$t.p"; exit 0;; esac
d=${f%/*}; [ -n "$d" ] || d=/
case $fl in *d*) case $ph in first|whole|pfirst|pwhole) mkdir -p "$d" 2>/dev/null;; esac;; esac
if [ -d "$f" ]; then echo msc:is_dir >&2; rm -f "$t" "$t.p"; exit 40; fi
if [ ! -d "$d" ]; then if [ -e "$d" ]; then echo msc:not_dir >&2; else echo msc:no_parent >&2; fi; exit 41; fi
case $fl in *c*) if [ -e "$f" ]; then echo msc:exists >&2; rm -f "$t" "$t.p"; exit 45; fi;; esac
case $ph in
  first|whole) base64 -d > "$t" || { rm -f "$t"; exit 46; };;
  more|last) base64 -d >> "$t" || { rm -f "$t"; exit 46; };;
  pfirst|pwhole) mv -f "$t.p" "$t" || { rm -f "$t" "$t.p"; exit 46; };;
  pmore|plast) { cat "$t.p" >> "$t" && rm -f "$t.p"; } || { rm -f "$t" "$t.p"; exit 46; };;
esac
case $ph in first|more|pfirst|pmore) exit 0;; esac
case $fl in
  *a*)
    new=0; [ -e "$f" ] || new=1
    cat "$t" >> "$f" || { rm -f "$t"; exit 46; }
    rm -f "$t"
    if [ "$mode" != - ]; then chmod "$mode" "$f"; elif [ $new = 1 ]; then chmod 644 "$f"; fi;;
  *)
    if [ "$mode" = - ]; then mode=644; fi
    chmod "$mode" "$t" || { rm -f "$t"; exit 46; }
    case $fl in
      *c*) ln "$t" "$f" 2>/dev/null || { rm -f "$t"; echo msc:exists >&2; exit 45; }; rm -f "$t";;
      *) mv -f "$t" "$f" || { rm -f "$t"; exit 46; };;
    esac;;
esac
s=$(wc -c < "$f") || exit 44
h=$(sha256sum "$f") || exit 44
echo "$s ${h%% *}""#;

fn sh(script: &str, args: &[&str]) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        "msc-file".to_owned(),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv
}

/// The agent's words for a refusal marked `marker` (the script's, or the same finding
/// through a file API).
fn said<E>(marker: &str, path: &str) -> Option<OverExec<E>> {
    Some(match marker {
        "msc:not_found" => OverExec::NoSuchFile(format!(
            "{path} does not exist on this computer (list its directory with terminal_execute: ls)"
        )),
        "msc:no_parent" => OverExec::NoSuchFile(format!(
            "{path}: a parent directory does not exist; pass make_dirs: true to create it"
        )),
        "msc:not_dir" => OverExec::Refused(format!(
            "{path}: a component of the path is a file, not a directory"
        )),
        "msc:is_dir" => OverExec::Refused(format!(
            "{path} is a directory; name a file inside it (list it with terminal_execute: ls)"
        )),
        "msc:exists" => OverExec::Refused(format!(
            "{path} already exists and `create_only` is set: nothing changed"
        )),
        "msc:not_regular" => OverExec::Refused(format!(
            "{path} is not a regular file (a device, socket or pipe)"
        )),
        "msc:permission" => OverExec::Refused(format!("{path}: permission denied")),
        _ => return None,
    })
}

/// The markers [`said`] knows, in the order a script's stderr is searched.
const MARKERS: [&str; 7] = [
    "msc:not_found",
    "msc:no_parent",
    "msc:not_dir",
    "msc:is_dir",
    "msc:exists",
    "msc:not_regular",
    "msc:permission",
];

/// The agent's words for a refusal the script reported.
fn refusal<E>(path: &str, out: &ExecOutcome) -> OverExec<E> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if let Some(e) = MARKERS
        .iter()
        .find(|m| stderr.contains(*m))
        .and_then(|m| said(m, path))
    {
        e
    } else {
        let why = stderr.trim();
        OverExec::Refused(format!(
            "{path}: the computer's shell failed (exit {}): {}; nothing changed",
            out.exit_code,
            if why.is_empty() { "no message" } else { why }
        ))
    }
}

/// [`said`] for a marker it knows.
fn finding<E>(marker: &str, path: &str) -> OverExec<E> {
    said(marker, path).unwrap_or_else(|| OverExec::Refused(format!("{path}: {marker}")))
}

/// Reads at most `length` bytes of `path` from `offset`: through the shell's file API when
/// the slice is bigger than one exec's and the file small enough to take whole, else in
/// exec calls of [`READ_SLICE`].
pub async fn read<S: Shell>(
    shell: &S,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<Slice, OverExec<S::Error>> {
    if shell.moves_files()
        && length > READ_SLICE
        && let Some(slice) = read_whole(shell, path, offset, length).await?
    {
        return Ok(slice);
    }
    let mut data = Vec::new();
    let meta = loop {
        let at = offset + data.len() as u64;
        let want = (length - data.len() as u64).min(READ_SLICE);
        let argv = sh(READ, &[path, &at.to_string(), &want.to_string()]);
        let out = shell.run(argv, None).await.map_err(OverExec::Shell)?;
        if out.exit_code != 0 || out.truncated_at.is_some() || out.timed_out_after.is_some() {
            return Err(refusal(path, &out));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let (head, body) = text.split_once('\n').unwrap_or((&text, ""));
        let mut fields = head.split_whitespace();
        let (Some(size), Some(mode), Some(mtime)) = (
            fields.next().and_then(|v| v.parse::<u64>().ok()),
            fields.next().and_then(|v| u32::from_str_radix(v, 8).ok()),
            fields.next().and_then(|v| v.parse::<i64>().ok()),
        ) else {
            return Err(OverExec::Refused(format!(
                "{path}: the computer's stat answered {head:?}; it needs a POSIX shell with stat, tail, head and base64"
            )));
        };
        let clean: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map_err(|e| OverExec::Refused(format!("{path}: the computer's base64: {e}")))?;
        let got = bytes.len() as u64;
        data.extend_from_slice(&bytes);
        if got < want || data.len() as u64 >= length || at + got >= size {
            break (size, mode, mtime);
        }
    };
    let (size, mode, mtime_secs) = meta;
    Ok(Slice {
        size,
        offset,
        data,
        mode,
        mtime_secs,
        mtime_nanos: 0,
    })
}

/// A slice of a file taken whole through the file API; `None` when the exec path must
/// read it (a symlink, a device, a file over [`WHOLE_MAX`]).
async fn read_whole<S: Shell>(
    shell: &S,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<Option<Slice>, OverExec<S::Error>> {
    let info = match shell.stat(path).await? {
        None => return Err(finding("msc:not_found", path)),
        Some(i) if i.kind == PathKind::Directory => return Err(finding("msc:is_dir", path)),
        Some(i) if i.kind == PathKind::File && i.size <= WHOLE_MAX => i,
        Some(_) => return Ok(None),
    };
    let whole = shell.download(path).await?;
    let size = whole.len() as u64;
    let from = usize::try_from(offset.min(size)).unwrap_or(whole.len());
    let to = usize::try_from(offset.saturating_add(length).min(size)).unwrap_or(whole.len());
    Ok(Some(Slice {
        size,
        offset,
        data: whole[from..to].to_vec(),
        mode: info.mode,
        mtime_secs: info.mtime_secs,
        mtime_nanos: 0,
    }))
}

/// How a write goes (the bytes come separately).
#[derive(Debug, Clone, Copy)]
pub struct WriteHow<'a> {
    pub path: &'a str,
    pub append: bool,
    pub create_only: bool,
    pub mode: Option<u32>,
    pub make_dirs: bool,
    /// Names the temporary file (a random number).
    pub nonce: u64,
}

impl<'a> WriteHow<'a> {
    /// A replace (or, with `append`, an append) of `path`.
    pub fn new(
        path: &'a str,
        append: bool,
        create_only: bool,
        mode: Option<u32>,
        make_dirs: bool,
        nonce: u64,
    ) -> Self {
        Self {
            path,
            append,
            create_only,
            mode,
            make_dirs,
            nonce,
        }
    }

    fn temp(&self) -> String {
        let (dir, name) = self.path.rsplit_once('/').unwrap_or(("", self.path));
        format!("{dir}/.{name}.msc-{:016x}.tmp", self.nonce)
    }

    fn parent(&self) -> &str {
        match self.path.rsplit_once('/') {
            Some(("", _)) | None => "/",
            Some((dir, _)) => dir,
        }
    }

    fn flags(&self) -> String {
        let mut f = String::from("-");
        for (on, c) in [
            (self.append, 'a'),
            (self.create_only, 'c'),
            (self.make_dirs, 'd'),
        ] {
            if on {
                f.push(c);
            }
        }
        f
    }

    fn argv(&self, phase: &str) -> Vec<String> {
        let mode = self.mode.map_or("-".to_owned(), |m| format!("{m:o}"));
        sh(
            WRITE,
            &[phase, self.path, &self.temp(), &mode, &self.flags()],
        )
    }
}

/// A write staged over several calls: [`Staged::add`] the bytes, then
/// [`Staged::commit`] (or [`Staged::abort`] to leave the old file as it was).
///
/// Through a shell with a file API, a write bigger than one exec's [`SLICE`] uploads its
/// bytes in [`MOVE_SLICE`]s beside the target (`<temporary>.p`) and each exec only adds
/// them to the temporary; a small write stays one exec.
pub struct Staged<'s, S: Shell> {
    shell: &'s S,
    how: WriteHow<'s>,
    started: bool,
    pending: Vec<u8>,
    /// The parent directory was checked (before the file API's first upload, which would
    /// make it).
    parent_checked: bool,
}

impl<'s, S: Shell> Staged<'s, S> {
    pub fn new(shell: &'s S, how: WriteHow<'s>) -> Self {
        Self {
            shell,
            how,
            started: false,
            pending: Vec::new(),
            parent_checked: false,
        }
    }

    /// Bytes gathered before a slice goes to the computer.
    fn cap(&self) -> usize {
        if self.shell.moves_files() {
            MOVE_SLICE
        } else {
            SLICE
        }
    }

    async fn send(&mut self, phase: &str, bytes: &[u8]) -> Result<String, OverExec<S::Error>> {
        let stdin = base64::engine::general_purpose::STANDARD.encode(bytes);
        self.exec(phase, Some(stdin)).await
    }

    async fn exec(
        &mut self,
        phase: &str,
        stdin: Option<String>,
    ) -> Result<String, OverExec<S::Error>> {
        let out = self
            .shell
            .run(self.how.argv(phase), stdin)
            .await
            .map_err(OverExec::Shell)?;
        if out.exit_code != 0 {
            return Err(refusal(self.how.path, &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Uploads `bytes` to `<temporary>.p`, then runs `phase` (a `p…` phase) to take them.
    /// Without `make_dirs`, the parent is checked first: the upload would make it.
    async fn moved(&mut self, phase: &str, bytes: Vec<u8>) -> Result<String, OverExec<S::Error>> {
        if !self.how.make_dirs && !self.parent_checked {
            match self.shell.stat(self.how.parent()).await? {
                None => return Err(finding("msc:no_parent", self.how.path)),
                Some(i) if i.kind == PathKind::File => {
                    return Err(finding("msc:not_dir", self.how.path));
                }
                Some(_) => self.parent_checked = true,
            }
        }
        let part = format!("{}.p", self.how.temp());
        self.shell.upload(&part, bytes).await?;
        self.exec(phase, None).await
    }

    /// Sends one slice: `first`/`more` (or `whole`/`last` with `end`), by file API when
    /// the shell has one and the write is bigger than one exec's.
    async fn flush(&mut self, chunk: Vec<u8>, end: bool) -> Result<String, OverExec<S::Error>> {
        let phase = match (self.started, end) {
            (false, false) => "first",
            (true, false) => "more",
            (false, true) => "whole",
            (true, true) => "last",
        };
        let by_api = self.shell.moves_files() && chunk.len() > SLICE;
        let sent = if by_api {
            self.moved(&format!("p{phase}"), chunk).await
        } else {
            self.send(phase, &chunk).await
        };
        if sent.is_err() && (self.started || by_api) {
            self.abort().await;
        }
        let text = sent?;
        self.started = true;
        Ok(text)
    }

    /// Adds bytes; a full slice goes to the computer.
    pub async fn add(&mut self, mut bytes: &[u8]) -> Result<(), OverExec<S::Error>> {
        let cap = self.cap();
        while !bytes.is_empty() {
            let room = cap - self.pending.len();
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.pending.extend_from_slice(now);
            bytes = rest;
            if self.pending.len() == cap {
                let chunk = std::mem::take(&mut self.pending);
                self.flush(chunk, false).await?;
            }
        }
        Ok(())
    }

    /// Writes what is left and commits: the file's size and whole-file SHA-256.
    pub async fn commit(mut self) -> Result<Written, OverExec<S::Error>> {
        let chunk = std::mem::take(&mut self.pending);
        let text = self.flush(chunk, true).await?;
        let mut fields = text.split_whitespace();
        match (
            fields.next().and_then(|v| v.parse::<u64>().ok()),
            fields.next(),
        ) {
            (Some(size), Some(sha)) if sha.len() == 64 => Ok(Written {
                size,
                sha256: sha.to_ascii_lowercase(),
            }),
            _ => Err(OverExec::Refused(format!(
                "{}: the computer answered {:?} after the write; it needs sha256sum and wc",
                self.how.path,
                text.trim()
            ))),
        }
    }

    /// Removes the staged bytes (best effort): the old file stays as it was.
    pub async fn abort(&mut self) {
        let _ = self.shell.run(self.how.argv("abort"), None).await;
    }
}

/// Writes `data` in one go (staged in slices when bigger than one).
pub async fn write<S: Shell>(
    shell: &S,
    how: WriteHow<'_>,
    data: &[u8],
) -> Result<Written, OverExec<S::Error>> {
    let mut staged = Staged::new(shell, how);
    staged.add(data).await?;
    staged.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_read_slice_fits_the_output_limit() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(vec![0u8; READ_SLICE as usize]);
        // GNU and BusyBox base64 wrap at 76 columns.
        let wrapped = b64.len() + b64.len().div_ceil(76);
        assert!(wrapped + "4294967296 777 9999999999\n".len() <= OUTPUT_LIMIT);
    }

    #[test]
    fn temporaries_sit_beside_the_target() {
        let how = WriteHow {
            path: "/srv/a b/c.txt",
            append: true,
            create_only: false,
            mode: Some(0o755),
            make_dirs: true,
            nonce: 0xab,
        };
        assert_eq!(how.temp(), "/srv/a b/.c.txt.msc-00000000000000ab.tmp");
        assert_eq!(how.flags(), "-ad");
        let argv = how.argv("whole");
        assert_eq!(
            &argv[4..],
            [
                "whole",
                "/srv/a b/c.txt",
                "/srv/a b/.c.txt.msc-00000000000000ab.tmp",
                "755",
                "-ad"
            ]
        );
    }
}

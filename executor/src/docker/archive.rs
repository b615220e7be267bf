//! Files through the Engine's archive API (`GET`/`PUT /containers/{id}/archive`): the
//! fallback for computers without a supervisor that serves files, and the tar archives
//! the server uploads (the supervisor binary).
//!
//! Reads are here; writes are in [`super::archive_write`] (staged beside the target and
//! renamed, so a failed write leaves the old file) and [`super::archive_stream`].

use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;

use super::{Docker, DockerError};
use crate::spec::FileSlice;

/// Symlinks followed before giving up.
const MAX_LINKS: usize = 8;

/// One 512-byte ustar header.
pub(super) fn header(name: &[u8], size: u64, mode: u32, mtime: u64, kind: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    let n = name.len().min(100);
    h[..n].copy_from_slice(&name[..n]);
    let octal = |field: &mut [u8], value: u64| {
        let s = format!("{value:0width$o}\0", width = field.len() - 1);
        if s.len() == field.len() {
            field.copy_from_slice(s.as_bytes());
        }
    };
    octal(&mut h[100..108], u64::from(mode & 0o7777));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// The header(s) of one regular file `name` (a relative path) of `size` bytes: a PAX
/// extended header carrying the whole name first when it does not fit ustar's 100 bytes.
pub(super) fn file_headers(name: &str, size: u64, mode: u32, mtime: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 * 512);
    if name.len() > 100 {
        // "<len> path=<name>\n", where <len> counts itself.
        let body = format!(" path={name}\n");
        let mut len = body.len() + 1;
        while format!("{len}{body}").len() != len {
            len += 1;
        }
        let record = format!("{len}{body}");
        out.extend_from_slice(&header(
            b"././@PaxHeader",
            record.len() as u64,
            0o644,
            mtime,
            b'x',
        ));
        out.extend_from_slice(record.as_bytes());
        pad(&mut out);
    }
    out.extend_from_slice(&header(name.as_bytes(), size, mode, mtime, b'0'));
    out
}

/// A tar archive of one regular file `name` (a relative path; a long one goes in a PAX
/// header) holding `data`, with permission bits `mode`.
pub fn one_file_tar(name: &str, data: &[u8], mode: u32, mtime: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 4 * 512);
    out.extend_from_slice(&file_headers(name, data.len() as u64, mode, mtime));
    out.extend_from_slice(data);
    pad(&mut out);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// A tar archive of regular files (relative paths, parents made by the engine), each
/// with permission bits `mode`.
pub fn files_tar(files: &[(&str, &[u8])], mode: u32, mtime: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in files {
        out.extend_from_slice(&file_headers(name, data.len() as u64, mode, mtime));
        out.extend_from_slice(data);
        pad(&mut out);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// A tar header's numeric field: octal text, or GNU base-256 when the top bit is set.
pub(super) fn number(field: &[u8]) -> u64 {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        return field[1..]
            .iter()
            .fold(0u64, |n, b| n.wrapping_shl(8) | u64::from(*b));
    }
    let text: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| char::from(*b))
        .collect();
    u64::from_str_radix(text.trim(), 8).unwrap_or(0)
}

/// The first entry of an archive stream that is not a PAX/GNU extension.
enum Entry {
    /// A regular file: its size, mode, mtime and the wanted slice of its bytes.
    File {
        size: u64,
        mode: u32,
        mtime: i64,
        data: Vec<u8>,
    },
    Dir,
    Link(String),
    Other,
}

/// Reads the first real entry of the archive of `path`, taking bytes `offset..+length`
/// of a regular file; the download stops there (a slice of a huge file costs the slice).
async fn first_entry(
    docker: &Docker,
    container: &str,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<Entry, DockerError> {
    let opts = DownloadFromContainerOptions { path: path.into() };
    let mut stream = docker.client.download_from_container(container, Some(opts));
    let mut buf: Vec<u8> = Vec::new();
    let mut at = 0usize; // start of the current header in `buf`
    loop {
        // Enough for a header?
        while buf.len() < at + 512 {
            match stream.next().await {
                Some(Ok(b)) => buf.extend_from_slice(&b),
                Some(Err(e)) => return Err(archive_error(e, path)),
                None => return Ok(Entry::Other),
            }
        }
        let h = &buf[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            return Ok(Entry::Other);
        }
        let size = number(&h[124..136]);
        let kind = h[156];
        let ext = matches!(kind, b'x' | b'g' | b'L' | b'K');
        match kind {
            b'5' => return Ok(Entry::Dir),
            b'2' => {
                let target: Vec<u8> = h[157..257]
                    .iter()
                    .copied()
                    .take_while(|b| *b != 0)
                    .collect();
                return Ok(Entry::Link(String::from_utf8_lossy(&target).into_owned()));
            }
            b'0' | 0 | b'7' => {
                let mode = (number(&h[100..108]) & 0o7777) as u32;
                let mtime = i64::try_from(number(&h[136..148])).unwrap_or(0);
                let content = at + 512;
                let want = length.min(size.saturating_sub(offset));
                let start = offset.min(size);
                let mut data = Vec::new();
                // Bytes of the content seen so far begin at `content` in `buf`.
                let mut seen = (buf.len() - content) as u64;
                let take = |chunk: &[u8], chunk_at: u64, data: &mut Vec<u8>| {
                    let lo = start.max(chunk_at);
                    let hi = (start + want).min(chunk_at + chunk.len() as u64);
                    if lo < hi {
                        data.extend_from_slice(
                            &chunk[(lo - chunk_at) as usize..(hi - chunk_at) as usize],
                        );
                    }
                };
                take(&buf[content..], 0, &mut data);
                while (data.len() as u64) < want {
                    match stream.next().await {
                        Some(Ok(b)) => {
                            take(&b, seen, &mut data);
                            seen += b.len() as u64;
                        }
                        Some(Err(e)) => return Err(archive_error(e, path)),
                        None => break,
                    }
                }
                return Ok(Entry::File {
                    size,
                    mode,
                    mtime,
                    data,
                });
            }
            _ if ext => {
                // Skip the extension's content (padded) and read the next header.
                let next = at + 512 + (size as usize).div_ceil(512) * 512;
                while buf.len() < next {
                    match stream.next().await {
                        Some(Ok(b)) => buf.extend_from_slice(&b),
                        Some(Err(e)) => return Err(archive_error(e, path)),
                        None => return Ok(Entry::Other),
                    }
                }
                at = next;
            }
            _ => return Ok(Entry::Other),
        }
    }
}

fn archive_error(e: bollard::errors::Error, path: &str) -> DockerError {
    match super::status_of(&e) {
        Some(404) => DockerError::NoSuchFile(format!(
            "{path} does not exist; check the path (list its directory with terminal_execute ls)"
        )),
        _ => DockerError::from_bollard(e),
    }
}

pub(super) fn missing_dir(path: &str) -> DockerError {
    DockerError::NoSuchFile(format!(
        "the directory of {path} does not exist; pass make_dirs: true to create parent directories"
    ))
}

/// `path`'s parent directory (`/` for a top-level name) and its last component.
pub(super) fn split(path: &str) -> (&str, &str) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((dir, name)) => (dir, name),
        None => ("/", trimmed),
    }
}

/// Joins a symlink's target onto the directory of the link.
fn follow(path: &str, target: &str) -> String {
    if target.starts_with('/') {
        target.to_owned()
    } else {
        let (dir, _) = split(path);
        format!("{}/{target}", dir.trim_end_matches('/'))
    }
}

impl Docker {
    /// Reads a slice through the archive API, following symlinks.
    pub(super) async fn archive_read(
        &self,
        container: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, DockerError> {
        let mut at = path.to_owned();
        for _ in 0..=MAX_LINKS {
            match first_entry(self, container, &at, offset, length).await? {
                Entry::File {
                    size,
                    mode,
                    mtime,
                    data,
                } => {
                    return Ok(FileSlice {
                        size,
                        offset,
                        data,
                        mode,
                        mtime_secs: mtime,
                        mtime_nanos: 0,
                    });
                }
                Entry::Dir => {
                    return Err(DockerError::File(format!(
                        "{path} is a directory; read a file, or list it with terminal_execute ls"
                    )));
                }
                Entry::Link(target) => at = follow(&at, &target),
                Entry::Other => {
                    return Err(DockerError::File(format!(
                        "{path} is not a regular file; the file tools read and write regular files"
                    )));
                }
            }
        }
        Err(DockerError::File(format!(
            "{path}: too many levels of symbolic links"
        )))
    }
}

/// An archive upload the engine refused, in words for the agent: a full disk said so;
/// anything else without the engine's text (which names paths on the host), logged.
pub(super) fn upload_failed(path: &str, e: bollard::errors::Error) -> DockerError {
    let text = e.to_string().to_ascii_lowercase();
    if text.contains("no space left on device") || text.contains("disk quota exceeded") {
        return DockerError::File(format!(
            "{path}: the computer's disk is full: nothing was written and the old file is unchanged; free space (delete files) and try again"
        ));
    }
    tracing::warn!(path, error = %e, "the engine refused an archive upload");
    match DockerError::from_bollard(e) {
        DockerError::Unreachable(why) => DockerError::Unreachable(why),
        _ => DockerError::File(format!(
            "{path}: the engine refused the upload; the old file is unchanged"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tars_are_well_formed() {
        let t = one_file_tar("msc-supervisor", b"abc", 0o755, 0);
        assert_eq!(t.len() % 512, 0);
        assert_eq!(&t[257..262], b"ustar");
        assert_eq!(&t[..15], b"msc-supervisor\0");
        assert_eq!(number(&t[100..108]), 0o755);
        assert_eq!(number(&t[124..136]), 3);
        assert_eq!(&t[512..515], b"abc");
        let long = format!("{}/file", "d".repeat(150));
        let t = one_file_tar(&long, b"x", 0o644, 5);
        assert_eq!(t[156], b'x');
        let len = number(&t[124..136]) as usize;
        let record = std::str::from_utf8(&t[512..512 + len]).unwrap();
        assert_eq!(record, format!("{len} path={long}\n"));
        assert_eq!(t[1024 + 156], b'0');
    }

    #[test]
    fn paths_split_and_links_follow() {
        assert_eq!(split("/a/b/c"), ("/a/b", "c"));
        assert_eq!(split("/c"), ("/", "c"));
        assert_eq!(follow("/a/b/c", "d"), "/a/b/d");
        assert_eq!(follow("/a/b/c", "/x"), "/x");
        assert_eq!(follow("/c", "d"), "/d");
        assert_eq!(number(&[0x80, 0, 0, 1, 0]), 256);
    }
}

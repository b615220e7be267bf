//! Writes through the Engine's archive API, for computers without the supervisor. Every
//! write is checked in the computer first ([`super::archive_stream::PREPARE`]: directories, `create_only`,
//! `make_dirs`, a final symlink followed), staged as a temporary beside the target and
//! committed by rename ([`COMMIT`]), so a failed write (a full disk) leaves the old file.
//! Linear: an append uploads only its own bytes (staged as a temporary beside the target, then
//! added by `cat >>` in the computer and removed), and an upload of unknown length is
//! staged in pieces of [`PIECE`] bytes the same way, then committed by rename like a
//! sized one ([`super::archive_stream`]). Nothing is ever downloaded to be sent back, so
//! a file written in n slices costs O(n) bytes moved, not O(n²).
//!
//! The whole file's hash after an append comes from `sha256sum` in the computer (GNU and
//! BusyBox have it); without it the file is read back once through the archive API.

use futures_util::StreamExt;
use shared::files::{Digest, Sha256, hex};

use super::archive::{missing_dir, one_file_tar, split};
use super::archive_stream::{COMMIT, temp_name};
use super::{Docker, DockerError};
use crate::spec::{FilePutSpec, FileWriteSpec, FileWritten, UploadStream};

/// Bytes staged per archive upload of a body of unknown length.
const PIECE: usize = 8 << 20;

/// Adds staged `$1` to the end of `$2` (mode `$3`, `-` keeps it), then prints the size
/// and the hash. A failed `cat` (a full disk) cuts the file back to its old size.
const APPEND: &str = r#"t=$1; f=$2
[ -f "$t" ] || { echo "$f: the engine's archive API could not place the bytes in this directory (a tmpfs mount, which it does not see?): nothing was written. Write into the container's own filesystem or a volume, or use a computer with the supervisor" >&2; exit 40; }
old=$(wc -c < "$f") || { rm -f "$t"; exit 40; }
if ! cat "$t" >> "$f"; then
  truncate -s "$old" "$f" 2>/dev/null
  rm -f "$t"
  echo "$f: the append failed (is the computer's disk full? free space and try again); the file is as it was" >&2
  exit 40
fi
rm -f "$t"
if [ "$3" != - ]; then chmod "$3" "$f" || exit 40; fi
wc -c < "$f"
sha256sum < "$f" 2>/dev/null || echo nosha"#;

/// Adds staged piece `$2` to the end of temporary `$1`.
const GROW: &str = r#"[ -f "$2" ] || { rm -f "$1"; echo "the engine's archive API could not place the bytes in this directory (a tmpfs mount, which it does not see?): nothing was written. Write into the container's own filesystem or a volume, or use a computer with the supervisor" >&2; exit 40; }
if ! cat "$2" >> "$1"; then rm -f "$1" "$2"; echo "the upload failed (is the computer's disk full? free space and try again); the old file is unchanged" >&2; exit 40; fi
rm -f "$2""#;

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `dir/name`, for a directory from [`split`].
fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

impl Docker {
    /// Uploads `data` as the file `name` (mode 0600) in the existing directory `dir`.
    async fn stage(
        &self,
        container: &str,
        path: &str,
        dir: &str,
        name: &str,
        data: &[u8],
    ) -> Result<(), DockerError> {
        let tar = one_file_tar(name, data, 0o600, now_secs());
        let opts = bollard::query_parameters::UploadToContainerOptions {
            path: dir.to_owned(),
            ..Default::default()
        };
        match self
            .client
            .upload_to_container(container, Some(opts), bollard::body_full(tar.into()))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => {
                // A refused extraction may leave part of the file.
                self.remove_temp(container, &join(dir, name)).await;
                Err(match super::status_of(&e) {
                    Some(404) => missing_dir(path),
                    _ => super::archive::upload_failed(path, e),
                })
            }
        }
    }

    /// Writes one slice: a replace (staged, renamed over the target) or an append.
    pub(super) async fn archive_write(
        &self,
        container: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, DockerError> {
        let (exists, target) = self
            .prepare(container, spec.path, spec.create_only, spec.make_dirs)
            .await?;
        if spec.append && exists {
            return self.archive_append(container, spec, &target).await;
        }
        let (dir, name) = split(&target);
        let staged_name = temp_name(name, rand::random::<u64>());
        self.stage(container, spec.path, dir, &staged_name, spec.data)
            .await?;
        let staged = join(dir, &staged_name);
        let mode = format!("{:o}", spec.mode.unwrap_or(shared::files::DEFAULT_MODE));
        let flags = if spec.create_only { "-c" } else { "-" };
        self.sh(container, COMMIT, &[&staged, &target, &mode, flags])
            .await?;
        Ok(FileWritten {
            size: spec.data.len() as u64,
            sha256: shared::files::sha256_hex(spec.data),
        })
    }

    /// Appends `spec.data` to the existing file `target`: stage, `cat >>`, hash there.
    async fn archive_append(
        &self,
        container: &str,
        spec: &FileWriteSpec<'_>,
        target: &str,
    ) -> Result<FileWritten, DockerError> {
        let (dir, name) = split(target);
        let staged = temp_name(name, rand::random::<u64>());
        self.stage(container, spec.path, dir, &staged, spec.data)
            .await?;
        let mode = spec.mode.map_or("-".to_owned(), |m| format!("{m:o}"));
        let out = self
            .sh(container, APPEND, &[&join(dir, &staged), target, &mode])
            .await?;
        let mut lines = out.lines();
        let size = lines.next().and_then(|l| l.trim().parse::<u64>().ok());
        let sha = lines
            .next()
            .and_then(|l| l.split_whitespace().next())
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        match (size, sha) {
            (Some(size), Some(sha)) => Ok(FileWritten {
                size,
                sha256: sha.to_ascii_lowercase(),
            }),
            // No sha256sum in this image: read the file back once.
            _ => {
                let whole = self.archive_read(container, target, 0, u64::MAX).await?;
                Ok(FileWritten {
                    size: whole.data.len() as u64,
                    sha256: shared::files::sha256_hex(&whole.data),
                })
            }
        }
    }

    /// An upload of unknown length: checked, staged in pieces beside the target (hashed
    /// on the way), then renamed over it (`create_only`: linked). A body that breaks off
    /// leaves the old file; the temporaries are removed.
    pub(super) async fn archive_put_unsized(
        &self,
        container: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, DockerError> {
        let (_, target) = self
            .prepare(container, spec.path, spec.create_only, spec.make_dirs)
            .await?;
        let (dir, name) = split(&target);
        let nonce = rand::random::<u64>();
        let temp_file = temp_name(name, nonce);
        let temp = join(dir, &temp_file);
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut piece = Vec::with_capacity(PIECE);
        let mut pieces = 0u64;
        let result: Result<(), DockerError> = async {
            loop {
                let next = body.next().await;
                let end = next.is_none();
                if let Some(chunk) = next {
                    let bytes = chunk.map_err(|why| {
                        DockerError::File(format!(
                            "{}: the upload broke off ({why}); the old file is unchanged",
                            spec.path
                        ))
                    })?;
                    hasher.update(&bytes);
                    size += bytes.len() as u64;
                    piece.extend_from_slice(&bytes);
                }
                if piece.len() >= PIECE || (end && (pieces == 0 || !piece.is_empty())) {
                    if pieces == 0 {
                        self.stage(container, spec.path, dir, &temp_file, &piece)
                            .await?;
                    } else {
                        let part = temp_name(name, nonce.wrapping_add(pieces));
                        self.stage(container, spec.path, dir, &part, &piece).await?;
                        self.sh(container, GROW, &[&temp, &join(dir, &part)])
                            .await?;
                    }
                    pieces += 1;
                    piece.clear();
                }
                if end {
                    return Ok(());
                }
            }
        }
        .await;
        if let Err(e) = result {
            self.remove_temp(container, &temp).await;
            return Err(e);
        }
        let mode = format!("{:o}", spec.mode.unwrap_or(shared::files::DEFAULT_MODE));
        let flags = if spec.create_only { "-c" } else { "-" };
        self.sh(container, COMMIT, &[&temp, &target, &mode, flags])
            .await?;
        Ok(FileWritten {
            size,
            sha256: hex(&hasher.finalize()),
        })
    }
}

//! A whole range of a file streamed out of a computer through the Engine's archive API
//! (`GET /containers/{id}/archive`, what `docker cp` uses): the fast path of a big
//! `GET /v1/files` download, at the engine's own speed. The tar stream is read by a task
//! of its own into a small bounded channel (the HTTP client's pace holds it back), so
//! memory stays at a few chunks whatever the size.

use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::archive::number;
use super::{Docker, DockerError};
use crate::spec::FileChunks;

/// Bytes per chunk handed on (engine chunks are gathered up to this).
const CHUNK: usize = 1 << 20;

impl Docker {
    /// Bytes `from..to` of regular file `path` in `container`, streamed; `None` when the
    /// archive's entry is not a regular file (a symlink, say), so the caller reads slices.
    pub async fn archive_stream(
        &self,
        container: &str,
        path: &str,
        from: u64,
        to: u64,
    ) -> Option<FileChunks> {
        let client = self.client.clone();
        let (container, path) = (container.to_owned(), path.to_owned());
        let (tx, rx) = mpsc::channel::<Result<Vec<u8>, shared::files::BrokenStream>>(4);
        let (ready_tx, ready_rx) = oneshot::channel::<bool>();
        tokio::spawn(async move {
            let opts = DownloadFromContainerOptions { path: path.clone() };
            let mut stream = client.download_from_container(&container, Some(opts));
            let mut buf: Vec<u8> = Vec::new();
            let mut at = 0usize;
            // The first entry that is not a PAX/GNU extension must be a regular file.
            let (content, size) = loop {
                while buf.len() < at + 512 {
                    match stream.next().await {
                        Some(Ok(b)) => buf.extend_from_slice(&b),
                        _ => {
                            let _ = ready_tx.send(false);
                            return;
                        }
                    }
                }
                let h = &buf[at..at + 512];
                let size = number(&h[124..136]);
                match h[156] {
                    b'0' | 0 | b'7' => break (at + 512, size),
                    b'x' | b'g' | b'L' | b'K' => {
                        let next = at
                            + 512
                            + usize::try_from(size.div_ceil(512) * 512).unwrap_or(usize::MAX);
                        while buf.len() < next {
                            match stream.next().await {
                                Some(Ok(b)) => buf.extend_from_slice(&b),
                                _ => {
                                    let _ = ready_tx.send(false);
                                    return;
                                }
                            }
                        }
                        at = next;
                    }
                    _ => {
                        let _ = ready_tx.send(false);
                        return;
                    }
                }
            };
            let _ = ready_tx.send(true);
            let to = to.min(size);
            // `pos`: the content offset of the next byte the engine sends.
            let mut pos = 0u64;
            let mut out = Vec::with_capacity(CHUNK);
            let mut pending = buf.split_off(content);
            drop(buf);
            loop {
                let lo = from.max(pos);
                let hi = to.min(pos + pending.len() as u64);
                if lo < hi {
                    let mut piece = &pending[(lo - pos) as usize..(hi - pos) as usize];
                    while !piece.is_empty() {
                        let take = (CHUNK - out.len()).min(piece.len());
                        out.extend_from_slice(&piece[..take]);
                        piece = &piece[take..];
                        if out.len() == CHUNK {
                            let full = std::mem::replace(&mut out, Vec::with_capacity(CHUNK));
                            if tx.send(Ok(full)).await.is_err() {
                                return; // the client went away
                            }
                        }
                    }
                }
                pos += pending.len() as u64;
                if pos >= to {
                    break;
                }
                match stream.next().await {
                    Some(Ok(b)) => pending = b.to_vec(),
                    Some(Err(e)) => {
                        let _ = tx
                            .send(Err(format!("the engine's archive stream broke: {e}").into()))
                            .await;
                        return;
                    }
                    None => {
                        let _ = tx
                            .send(Err("the engine's archive stream ended early".into()))
                            .await;
                        return;
                    }
                }
            }
            if !out.is_empty() {
                let _ = tx.send(Ok(out)).await;
            }
        });
        match ready_rx.await {
            Ok(true) => Some(rx),
            _ => None,
        }
    }
}

/// Checks before an upload (`$1` path, `$2` flags: `c` create_only, `d` make_dirs):
/// a final symlink is followed (a write goes to its target, as a shell's `>` would;
/// `create_only` refuses it, the name exists). Prints `1` or `0` (the file exists) and,
/// on the next line, the path the bytes go to.
pub(super) const PREPARE: &str = r#"f=$1
case $2 in *c*) if [ -e "$f" ] || [ -L "$f" ]; then echo "$f already exists and create_only is set: nothing changed" >&2; exit 40; fi;; esac
if [ -L "$f" ]; then r=$(readlink -f "$f") && [ -n "$r" ] && f=$r; fi
d=${f%/*}; [ -n "$d" ] || d=/
case $2 in *d*) mkdir -p "$d" 2>/dev/null;; esac
if [ -d "$f" ]; then echo "$1 is a directory; name a file inside it (list it with terminal_execute: ls)" >&2; exit 40; fi
if [ ! -d "$d" ]; then if [ -e "$d" ]; then echo "$1: a component of the path is a file, not a directory" >&2; else echo "$1: a parent directory does not exist; pass make_dirs: true to create it" >&2; exit 41; fi; exit 40; fi
if [ -e "$f" ] && [ ! -f "$f" ]; then echo "$1 is not a regular file; the file tools write regular files" >&2; exit 40; fi
if [ -e "$f" ]; then echo 1; else echo 0; fi
printf '%s' "$f""#;

/// Commits an uploaded temporary (`$1` temporary, `$2` path, `$3` mode, `$4` flags).
pub(super) const COMMIT: &str = r#"t=$1; f=$2
[ -f "$t" ] || { echo "$f: the engine's archive API could not place the bytes in this directory (a tmpfs mount, which it does not see?): nothing was written. Write into the container's own filesystem or a volume, or use a computer with the supervisor" >&2; exit 40; }
chmod "$3" "$t" || { rm -f "$t"; exit 40; }
case $4 in
  *c*) ln "$t" "$f" 2>/dev/null || { rm -f "$t"; echo "$f already exists and create_only is set: nothing changed" >&2; exit 40; }; rm -f "$t";;
  *) mv -f "$t" "$f" || { rm -f "$t"; exit 40; };;
esac"#;

impl Docker {
    pub(super) async fn sh(
        &self,
        container: &str,
        script: &str,
        args: &[&str],
    ) -> Result<String, DockerError> {
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".into(),
            script.into(),
            "msc-put".into(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        let spec = crate::spec::ExecSpec {
            argv,
            shell_command: None,
            stdin: None,
            working_directory: None,
            timeout: std::time::Duration::from_secs(60),
            output_limit: 64 << 10,
            env: Vec::new(),
            progress: crate::progress::Progress::default(),
        };
        let out = self.exec(container, &spec).await?;
        match out.exit_code {
            0 => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            41 => Err(DockerError::NoSuchFile(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            )),
            _ => Err(DockerError::File(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            )),
        }
    }

    /// A big upload of known `size` at the engine's speed: checked in the computer, sent
    /// as a one-file tar through the archive API to a temporary beside the target (hashed
    /// on the way), then renamed over it (`create_only`: linked). A body that breaks off
    /// or a wrong size leaves the old file; the temporary is removed.
    pub(super) async fn archive_put(
        &self,
        container: &str,
        spec: &crate::spec::FilePutSpec<'_>,
        size: u64,
        body: crate::spec::UploadStream<'_>,
    ) -> Result<crate::spec::FileWritten, DockerError> {
        use shared::files::{Digest, Sha256};
        let (_, target) = self
            .prepare(container, spec.path, spec.create_only, spec.make_dirs)
            .await?;
        let (dir, name) = super::archive::split(&target);
        let temp_name = temp_name(name, rand::random::<u64>());
        let temp = format!("{}/{temp_name}", dir.trim_end_matches('/'));
        let mtime = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // A long name needs its PAX header (ustar holds 100 bytes of it).
        let head = super::archive::file_headers(&temp_name, size, 0o600, mtime);
        let (tx, rx) = mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(4);
        let upload = {
            let client = self.client.clone();
            let (container, dir) = (container.to_owned(), dir.to_owned());
            tokio::spawn(async move {
                client
                    .upload_to_container(
                        &container,
                        Some(bollard::query_parameters::UploadToContainerOptions {
                            path: dir,
                            ..Default::default()
                        }),
                        bollard::body_try_stream(stream_of(rx)),
                    )
                    .await
            })
        };
        let mut hasher = Sha256::new();
        let mut count = 0u64;
        let mut broke = None;
        let mut engine_gone = false;
        let _ = tx.send(Ok(head.into())).await;
        // Body chunks are small; the engine gets them gathered into CHUNK-sized writes.
        let mut gathered = Vec::with_capacity(CHUNK);
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(bytes) => {
                    hasher.update(&bytes);
                    count += bytes.len() as u64;
                    if count > size {
                        broke = Some("the body is longer than its Content-Length".to_owned());
                        break;
                    }
                    gathered.extend_from_slice(&bytes);
                    if gathered.len() >= CHUNK {
                        let full = std::mem::replace(&mut gathered, Vec::with_capacity(CHUNK));
                        if tx.send(Ok(full.into())).await.is_err() {
                            engine_gone = true; // the upload ended early; its answer says why
                            break;
                        }
                    }
                }
                Err(why) => {
                    broke = Some(why.0);
                    break;
                }
            }
        }
        if broke.is_none() && !engine_gone && count != size {
            broke = Some("the body is shorter than its Content-Length".to_owned());
        }
        if broke.is_none() && !gathered.is_empty() {
            let _ = tx.send(Ok(gathered.into())).await;
        }
        match &broke {
            // An error on the stream makes the engine drop the partial archive.
            Some(why) => {
                let _ = tx.send(Err(std::io::Error::other(why.clone()))).await;
            }
            None => {
                let pad = usize::try_from(size.div_ceil(512) * 512 - size).unwrap_or(0);
                let mut tail = vec![0u8; pad];
                tail.extend_from_slice(&[0u8; 1024]);
                let _ = tx.send(Ok(tail.into())).await;
            }
        }
        drop(tx);
        let uploaded = upload.await;
        if let Some(why) = broke {
            self.remove_temp(container, &temp).await;
            return Err(DockerError::File(format!(
                "{}: the upload broke off ({why}); the old file is unchanged",
                spec.path
            )));
        }
        match uploaded {
            Ok(Ok(())) if engine_gone => {
                self.remove_temp(container, &temp).await;
                return Err(DockerError::File(format!(
                    "{}: the engine stopped reading the upload; the old file is unchanged",
                    spec.path
                )));
            }
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.remove_temp(container, &temp).await;
                return Err(super::archive::upload_failed(spec.path, e));
            }
            Err(e) => {
                self.remove_temp(container, &temp).await;
                return Err(DockerError::File(format!(
                    "{}: the upload failed: {e}",
                    spec.path
                )));
            }
        }
        let mode = format!("{:o}", spec.mode.unwrap_or(shared::files::DEFAULT_MODE));
        let flags = if spec.create_only { "-c" } else { "-" };
        self.sh(container, COMMIT, &[&temp, &target, &mode, flags])
            .await?;
        Ok(crate::spec::FileWritten {
            size: count,
            sha256: shared::files::hex(&hasher.finalize()),
        })
    }

    /// Runs [`PREPARE`]: whether the file exists, and the path the bytes go to.
    pub(super) async fn prepare(
        &self,
        container: &str,
        path: &str,
        create_only: bool,
        make_dirs: bool,
    ) -> Result<(bool, String), DockerError> {
        let flags = format!(
            "-{}{}",
            if create_only { "c" } else { "" },
            if make_dirs { "d" } else { "" }
        );
        let out = self.sh(container, PREPARE, &[path, &flags]).await?;
        match out.split_once('\n') {
            Some((exists, target)) if target.starts_with('/') => {
                Ok((exists == "1", target.to_owned()))
            }
            _ => Err(DockerError::File(format!(
                "{path}: the computer's shell gave an unexpected answer while preparing the write"
            ))),
        }
    }

    /// Removes a temporary an upload left (best effort).
    pub(super) async fn remove_temp(&self, container: &str, temp: &str) {
        let _ = self.sh(container, "rm -f \"$1\"", &[temp]).await;
    }
}

/// The temporary's name beside the target `name`: hidden, unique, and within the 255
/// bytes a file name may have (a long `name` is cut on a character boundary).
pub(super) fn temp_name(name: &str, nonce: u64) -> String {
    let mut keep = name.len().min(200);
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!(".{}.msc-{nonce:016x}.tmp", &name[..keep])
}

fn stream_of<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::temp_name;

    #[test]
    fn temporary_names_stay_within_a_file_name() {
        assert_eq!(temp_name("a.bin", 1), ".a.bin.msc-0000000000000001.tmp");
        let long = "é".repeat(127); // 254 bytes
        let t = temp_name(&long, u64::MAX);
        assert!(t.len() <= 255, "{}", t.len());
        assert!(t.starts_with(".é") && t.ends_with(".msc-ffffffffffffffff.tmp"));
    }
}

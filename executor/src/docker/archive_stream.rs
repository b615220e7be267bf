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
        let (tx, rx) = mpsc::channel::<Result<Vec<u8>, String>>(4);
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
                            .send(Err(format!("the engine's archive stream broke: {e}")))
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

/// Checks before a big upload (`$1` path, `$2` flags: `c` create_only, `d` make_dirs).
const PREPARE: &str = r#"f=$1; d=${f%/*}; [ -n "$d" ] || d=/
case $2 in *d*) mkdir -p "$d" 2>/dev/null;; esac
if [ -d "$f" ]; then echo "$f is a directory; name a file inside it (list it with terminal_execute: ls)" >&2; exit 40; fi
if [ ! -d "$d" ]; then if [ -e "$d" ]; then echo "$f: a component of the path is a file, not a directory" >&2; else echo "$f: a parent directory does not exist; pass make_dirs: true to create it" >&2; exit 41; fi; exit 40; fi
case $2 in *c*) if [ -e "$f" ]; then echo "$f already exists and create_only is set: nothing changed" >&2; exit 40; fi;; esac
exit 0"#;

/// Commits an uploaded temporary (`$1` temporary, `$2` path, `$3` mode, `$4` flags).
const COMMIT: &str = r#"t=$1; f=$2
chmod "$3" "$t" || { rm -f "$t"; exit 40; }
case $4 in
  *c*) ln "$t" "$f" 2>/dev/null || { rm -f "$t"; echo "$f already exists and create_only is set: nothing changed" >&2; exit 40; }; rm -f "$t";;
  *) mv -f "$t" "$f" || { rm -f "$t"; exit 40; };;
esac"#;

impl Docker {
    async fn sh(&self, container: &str, script: &str, args: &[&str]) -> Result<(), DockerError> {
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
            0 => Ok(()),
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
        let flags = format!(
            "-{}{}",
            if spec.create_only { "c" } else { "" },
            if spec.make_dirs { "d" } else { "" }
        );
        self.sh(container, PREPARE, &[spec.path, &flags]).await?;
        let (dir, name) = spec.path.rsplit_once('/').unwrap_or(("", spec.path));
        let dir = if dir.is_empty() { "/" } else { dir };
        let temp_name = format!(".{name}.msc-{:016x}.tmp", rand::random::<u64>());
        let temp = format!("{}/{temp_name}", dir.trim_end_matches('/'));
        let mtime = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let head = super::archive::header(temp_name.as_bytes(), size, 0o600, mtime, b'0');
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
        let _ = tx.send(Ok(head.to_vec().into())).await;
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
                            break; // the upload ended early; its answer says why
                        }
                    }
                }
                Err(why) => {
                    broke = Some(why);
                    break;
                }
            }
        }
        if broke.is_none() && count != size {
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
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.remove_temp(container, &temp).await;
                return Err(DockerError::from_bollard(e));
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
        self.sh(container, COMMIT, &[&temp, spec.path, &mode, flags])
            .await?;
        Ok(crate::spec::FileWritten {
            size: count,
            sha256: shared::files::hex(&hasher.finalize()),
        })
    }

    /// Removes a temporary an upload left (best effort).
    async fn remove_temp(&self, container: &str, temp: &str) {
        let _ = self.sh(container, "rm -f \"$1\"", &[temp]).await;
    }
}

fn stream_of<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

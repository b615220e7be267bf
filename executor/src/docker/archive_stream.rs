//! A whole range of a file streamed out of a computer through the Engine's archive API
//! (`GET /containers/{id}/archive`, what `docker cp` uses): the fast path of a big
//! `GET /v1/files` download, at the engine's own speed. The tar stream is read by a task
//! of its own into a small bounded channel (the HTTP client's pace holds it back), so
//! memory stays at a few chunks whatever the size.

use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::Docker;
use super::archive::number;
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

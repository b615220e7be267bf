//! Shared stream handles and the file-descriptor table of the shell.
//!
//! Every open descriptor is an `Arc` to a shared reader or writer, so that several commands
//! (a sequence of commands, a program and the builtins around it, background jobs) can use the
//! same stream. A stream is closed when its last handle is dropped: the shell never calls
//! `shutdown` on a stream it did not create (a program calling `shutdown` on its stdout only
//! flushes it), so the end of one command never closes the output of the next one.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::budget::Charge;
use super::{Input, Output};

/// Capacity of the pipes between pipeline stages.
pub(crate) const PIPE_CAPACITY: usize = 64 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A readable stream shared by several commands, with a push-back buffer so that `read`
/// can consume exactly one line and leave the rest to the next command.
pub(crate) struct SharedReader {
    state: Mutex<ReaderState>,
}

struct ReaderState {
    inner: Input,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
}

impl SharedReader {
    pub(crate) fn new(inner: Input) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(ReaderState {
                inner,
                buf: Vec::new(),
                pos: 0,
                eof: false,
            }),
        })
    }

    /// Reads up to and including `delim` (or to EOF). Returns the bytes without the delimiter
    /// and whether the delimiter was found.
    pub(crate) async fn read_until(&self, delim: u8, limit: usize) -> io::Result<(Vec<u8>, bool)> {
        std::future::poll_fn(|cx| {
            let mut st = lock(&self.state);
            loop {
                let st = &mut *st;
                let avail = &st.buf[st.pos..];
                if let Some(i) = avail.iter().take(limit).position(|b| *b == delim) {
                    let line = avail[..i].to_vec();
                    st.pos += i + 1;
                    return Poll::Ready(Ok((line, true)));
                }
                if st.eof || avail.len() >= limit {
                    let take = avail.len().min(limit);
                    let line = avail.get(..take).unwrap_or_default().to_vec();
                    st.pos += take;
                    return Poll::Ready(Ok((line, false)));
                }
                if st.pos > 0 {
                    st.buf.drain(..st.pos);
                    st.pos = 0;
                }
                let mut tmp = [0u8; 4096];
                let mut rb = ReadBuf::new(&mut tmp);
                match Pin::new(&mut st.inner).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) => {
                        if rb.filled().is_empty() {
                            st.eof = true;
                        } else {
                            st.buf.extend_from_slice(rb.filled());
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await
    }

    /// Reads everything up to EOF (at most `limit` bytes).
    pub(crate) async fn read_all(&self, limit: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            let n = std::future::poll_fn(|cx| {
                let mut rb = ReadBuf::new(&mut chunk);
                match self.poll_read_inner(cx, &mut rb) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(rb.filled().len())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(chunk.get(..n).unwrap_or_default());
            if out.len() >= limit {
                out.truncate(limit);
                break;
            }
        }
        Ok(out)
    }

    fn poll_read_inner(&self, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut st = lock(&self.state);
        let st = &mut *st;
        if st.pos < st.buf.len() {
            let avail = &st.buf[st.pos..];
            let n = avail.len().min(out.remaining());
            out.put_slice(&avail[..n]);
            st.pos += n;
            if st.pos == st.buf.len() {
                st.buf.clear();
                st.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if st.eof {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut st.inner).poll_read(cx, out)
    }
}

/// An owned handle on a shared reader (what a program gets as its stdin).
pub(crate) struct InHandle<R>(pub(crate) R);

impl AsyncRead for InHandle<Arc<SharedReader>> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0.poll_read_inner(cx, buf)
    }
}

/// A writable stream shared by several commands.
pub(crate) struct SharedWriter {
    inner: Mutex<Output>,
}

impl SharedWriter {
    pub(crate) fn new(inner: Output) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(inner),
        })
    }
}

/// An owned handle on a shared writer (what a program gets as stdout/stderr).
pub(crate) struct OutHandle(pub(crate) Arc<SharedWriter>);

impl AsyncWrite for OutHandle {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut g = lock(&self.0.inner);
        Pin::new(&mut *g).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut g = lock(&self.0.inner);
        Pin::new(&mut *g).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Never close a shared stream: it closes when its last handle is dropped.
        self.poll_flush(cx)
    }
}

/// An open file descriptor.
#[derive(Clone)]
pub(crate) enum Fd {
    In(Arc<SharedReader>),
    Out(Arc<SharedWriter>),
}

/// The descriptors 0..=9 of a shell context.
#[derive(Clone, Default)]
pub(crate) struct Fds(pub(crate) [Option<Fd>; 10]);

impl Fds {
    pub(crate) fn get(&self, n: usize) -> Option<&Fd> {
        self.0.get(n).and_then(Option::as_ref)
    }

    pub(crate) fn set(&mut self, n: usize, fd: Option<Fd>) {
        if let Some(slot) = self.0.get_mut(n) {
            *slot = fd;
        }
    }

    pub(crate) fn writer(&self, n: usize) -> Option<Arc<SharedWriter>> {
        match self.get(n) {
            Some(Fd::Out(w)) => Some(w.clone()),
            _ => None,
        }
    }

    pub(crate) fn reader(&self, n: usize) -> Option<Arc<SharedReader>> {
        match self.get(n) {
            Some(Fd::In(r)) => Some(r.clone()),
            _ => None,
        }
    }

    /// Boxed stdin for a program (empty if fd 0 is closed).
    pub(crate) fn boxed_in(&self) -> Input {
        match self.reader(0) {
            Some(r) => Box::new(InHandle(r)),
            None => Box::new(tokio::io::empty()),
        }
    }

    /// Boxed writer for a program (a sink if the fd is closed).
    pub(crate) fn boxed_out(&self, n: usize) -> Output {
        match self.writer(n) {
            Some(w) => Box::new(OutHandle(w)),
            None => Box::new(tokio::io::sink()),
        }
    }
}

/// A new pipe: (writer end, reader end).
pub(crate) fn pipe() -> (Arc<SharedWriter>, Arc<SharedReader>) {
    let (a, b) = tokio::io::duplex(PIPE_CAPACITY);
    (
        SharedWriter::new(Box::new(a)),
        SharedReader::new(Box::new(b)),
    )
}

/// Blocking file I/O presented as async (small reads/writes on local files are fast).
pub(crate) struct SyncFile(pub(crate) std::fs::File);

impl AsyncRead for SyncFile {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = {
            let dst = buf.initialize_unfilled();
            let max = dst.len().min(64 * 1024);
            match io::Read::read(&mut self.0, &mut dst[..max]) {
                Ok(n) => n,
                Err(e) => return Poll::Ready(Err(e)),
            }
        };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SyncFile {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(io::Write::write(&mut self.0, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(io::Write::flush(&mut self.0))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// Captures the output of a command substitution in memory, counted against the memory
/// budget: past it writes fail with `BrokenPipe` (ending the producer like SIGPIPE would)
/// and the budget stops the run.
pub(crate) struct CaptureSink {
    pub(crate) buf: Arc<Mutex<Vec<u8>>>,
    pub(crate) charge: Charge,
}

impl CaptureSink {
    pub(crate) fn take(buf: &Arc<Mutex<Vec<u8>>>) -> Vec<u8> {
        std::mem::take(&mut *lock(buf))
    }
}

impl AsyncWrite for CaptureSink {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.charge.grow(buf.len()).is_err() {
            return Poll::Ready(Err(io::Error::from(io::ErrorKind::BrokenPipe)));
        }
        lock(&this.buf).extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A reader over an in-memory buffer (here-documents, here-strings).
pub(crate) fn memory_reader(data: Vec<u8>) -> Arc<SharedReader> {
    SharedReader::new(Box::new(std::io::Cursor::new(data)))
}

/// [`memory_reader`] whose bytes stay counted (by `charge`) while the reader lives.
pub(crate) fn charged_reader(data: Vec<u8>, charge: Charge) -> Arc<SharedReader> {
    SharedReader::new(Box::new(Charged {
        inner: std::io::Cursor::new(data),
        _charge: charge,
    }))
}

struct Charged<R> {
    inner: R,
    _charge: Charge,
}

impl<R: AsyncRead + Unpin> AsyncRead for Charged<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

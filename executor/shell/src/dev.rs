//! The devices of `/dev` the host serves: `/dev/null`, `/dev/zero`, `/dev/full`,
//! `/dev/random` and `/dev/urandom` (the host's random source), `/dev/stdin`, `/dev/stdout`,
//! `/dev/stderr` and `/dev/fd/N`.
//!
//! WASI has no device files, so a program of the toolbox cannot open them itself. The
//! shell serves them in redirections (`< /dev/urandom`, `> /dev/full`), and when one of
//! them is the one file operand of a utility that reads files (`head -c 16 /dev/urandom`,
//! `od -N8 /dev/zero`, `cat /dev/stdin`), it passes `-` and connects the device as the
//! program's stdin.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A device by path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Device {
    Null,
    Zero,
    Full,
    Random,
    Fd(usize),
}

pub(crate) fn device(abs: &str) -> Option<Device> {
    match abs {
        "/dev/null" => Some(Device::Null),
        "/dev/zero" => Some(Device::Zero),
        "/dev/full" => Some(Device::Full),
        "/dev/random" | "/dev/urandom" => Some(Device::Random),
        "/dev/stdin" => Some(Device::Fd(0)),
        "/dev/stdout" => Some(Device::Fd(1)),
        "/dev/stderr" => Some(Device::Fd(2)),
        _ => abs
            .strip_prefix("/dev/fd/")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < 10)
            .map(Device::Fd),
    }
}

/// Reads the host's random source.
pub(crate) struct Random;

impl AsyncRead for Random {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = buf.remaining().min(64 * 1024);
        let mut chunk = vec![0u8; n];
        getrandom::fill(&mut chunk).map_err(|e| std::io::Error::other(e.to_string()))?;
        buf.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}

/// `/dev/full` for writing: every write fails with "No space left on device".
pub(crate) struct Full;

impl AsyncWrite for Full {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Err(std::io::Error::from(std::io::ErrorKind::StorageFull)))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Utilities of the toolbox that read their file operands (or `-`, stdin).
const READERS: &[&str] = &[
    "base32",
    "base64",
    "cat",
    "cksum",
    "cmp",
    "cut",
    "fold",
    "gunzip",
    "gzip",
    "head",
    "md5sum",
    "nl",
    "od",
    "rev",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "sort",
    "tac",
    "tail",
    "uniq",
    "wc",
    "zcat",
];

/// When exactly one operand of a reading utility is a readable device, replaces it by `-`
/// and returns the device to connect as stdin.
pub(crate) fn device_operand(argv: &mut [String], cwd: &str) -> Option<Device> {
    let name = argv.first()?;
    if !READERS.contains(&name.as_str()) {
        return None;
    }
    let mut found = None;
    for (i, a) in argv.iter().enumerate().skip(1) {
        if a.starts_with('-') {
            continue;
        }
        if let Some(d @ (Device::Zero | Device::Random | Device::Null | Device::Fd(0))) =
            device(&super::fs::resolve(cwd, a))
        {
            if found.is_some() {
                return None;
            }
            found = Some((i, d));
        }
    }
    let (i, d) = found?;
    if let Some(slot) = argv.get_mut(i) {
        "-".clone_into(slot);
    }
    Some(d)
}

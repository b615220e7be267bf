//! The bounded output buffer of a kept job: chunks tagged by stream, in arrival order,
//! holding at most `cap` bytes. When the job writes faster than its reader reads, the
//! oldest bytes go (never the newest) and are counted, so a read can say how much it
//! missed. Beside it, the newest [`RECENT`] bytes of each stream stay for a peek (a
//! dashboard's tail), read or not. Dependency-free, so the WASM backend's job table uses
//! the same buffer.

use std::collections::VecDeque;

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout = 0,
    Stderr = 1,
}

/// The newest bytes of each stream kept for [`Ring::recent`], read or not.
pub const RECENT: usize = 16 * 1024;

/// Chunks are merged up to this size, so dropping from the front stays cheap.
const CHUNK_MAX: usize = 64 * 1024;

/// What one read took out of a [`Ring`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Taken {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes dropped (the oldest) since the previous read.
    pub dropped: u64,
}

/// A job's unread output.
#[derive(Debug)]
pub struct Ring {
    chunks: VecDeque<(Stream, Vec<u8>)>,
    len: usize,
    cap: usize,
    dropped: u64,
    /// The newest bytes of stdout and stderr (at most `2 * RECENT` each between trims).
    recent: [Vec<u8>; 2],
}

impl Ring {
    pub fn new(cap: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            len: 0,
            cap: cap.max(1),
            dropped: 0,
            recent: [Vec::new(), Vec::new()],
        }
    }

    /// Unread bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the reader fell behind: bytes were dropped since the previous read.
    pub fn behind(&self) -> bool {
        self.dropped > 0
    }

    /// Whether a read would return anything (output, or a count of dropped bytes).
    pub fn has_news(&self) -> bool {
        self.len > 0 || self.dropped > 0
    }

    /// Appends output, dropping the oldest bytes beyond the cap.
    pub fn push(&mut self, stream: Stream, mut bytes: &[u8]) {
        self.remember(stream, bytes);
        if bytes.len() > self.cap {
            let cut = bytes.len() - self.cap;
            self.dropped += cut as u64;
            bytes = &bytes[cut..];
        }
        let mut excess = (self.len + bytes.len()).saturating_sub(self.cap);
        while excess > 0 {
            let Some((_, front)) = self.chunks.front_mut() else {
                break;
            };
            if front.len() <= excess {
                let n = front.len();
                self.chunks.pop_front();
                self.len -= n;
                self.dropped += n as u64;
                excess -= n;
            } else {
                front.drain(..excess);
                self.len -= excess;
                self.dropped += excess as u64;
                excess = 0;
            }
        }
        if bytes.is_empty() {
            return;
        }
        match self.chunks.back_mut() {
            Some((s, last)) if *s == stream && last.len() + bytes.len() <= CHUNK_MAX => {
                last.extend_from_slice(bytes);
            }
            _ => self.chunks.push_back((stream, bytes.to_vec())),
        }
        self.len += bytes.len();
    }

    /// Keeps the newest [`RECENT`] bytes of `stream`, trimming only when twice that is held
    /// (so a push costs one copy of its bytes).
    fn remember(&mut self, stream: Stream, bytes: &[u8]) {
        let recent = &mut self.recent[stream as usize];
        if bytes.len() >= RECENT {
            recent.clear();
            recent.extend_from_slice(&bytes[bytes.len() - RECENT..]);
            return;
        }
        recent.extend_from_slice(bytes);
        if recent.len() > 2 * RECENT {
            recent.drain(..recent.len() - RECENT);
        }
    }

    /// The newest bytes of stdout and stderr (at most `max` of each, and [`RECENT`]),
    /// whether read or not; takes nothing. A character cut at the front is left out, and
    /// with `hold_partial` one not complete yet at the end.
    pub fn recent(&self, max: usize, hold_partial: bool) -> (Vec<u8>, Vec<u8>) {
        let tail = |bytes: &Vec<u8>| {
            let mut t = &bytes[bytes.len() - bytes.len().min(max.min(RECENT))..];
            if t.len() < bytes.len() {
                let cut = t.iter().take(3).take_while(|b| **b & 0xc0 == 0x80).count();
                t = &t[cut..];
            }
            if hold_partial {
                t = &t[..t.len() - incomplete_tail(t)];
            }
            t.to_vec()
        };
        (tail(&self.recent[0]), tail(&self.recent[1]))
    }

    /// Takes up to `max` bytes, oldest first. With `hold_partial` (the job still runs), an
    /// incomplete UTF-8 character at the very end stays for the next read, so polling a
    /// job never splits a character its program wrote whole.
    pub fn take(&mut self, max: usize, hold_partial: bool) -> Taken {
        let mut taken = Taken {
            dropped: std::mem::take(&mut self.dropped),
            ..Taken::default()
        };
        let mut room = max;
        let mut last = None;
        while room > 0 {
            let Some((stream, mut chunk)) = self.chunks.pop_front() else {
                break;
            };
            if chunk.len() > room {
                let rest = chunk.split_off(room);
                self.chunks.push_front((stream, rest));
            }
            room -= chunk.len();
            self.len -= chunk.len();
            let out = match stream {
                Stream::Stdout => &mut taken.stdout,
                Stream::Stderr => &mut taken.stderr,
            };
            out.extend_from_slice(&chunk);
            last = Some(stream);
        }
        if hold_partial
            && self.chunks.is_empty()
            && let Some(stream) = last
        {
            let out = match stream {
                Stream::Stdout => &mut taken.stdout,
                Stream::Stderr => &mut taken.stderr,
            };
            let keep = incomplete_tail(out);
            if keep > 0 {
                let tail = out.split_off(out.len() - keep);
                self.len += tail.len();
                self.chunks.push_front((stream, tail));
            }
        }
        taken
    }
}

/// How many bytes at the end of `bytes` start a UTF-8 character that is not complete yet.
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back for the lead
        }
        let need = match b {
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_splits_streams() {
        let mut r = Ring::new(100);
        r.push(Stream::Stdout, b"a");
        r.push(Stream::Stderr, b"b");
        r.push(Stream::Stdout, b"c");
        assert_eq!(r.len(), 3);
        let t = r.take(10, false);
        assert_eq!(
            (t.stdout.as_slice(), t.stderr.as_slice()),
            (&b"ac"[..], &b"b"[..])
        );
        assert!(r.is_empty() && !r.has_news());
    }

    #[test]
    fn drops_the_oldest_and_counts_them() {
        let mut r = Ring::new(10);
        r.push(Stream::Stdout, b"0123456789");
        r.push(Stream::Stdout, b"abc");
        let t = r.take(100, false);
        assert_eq!(t.stdout, b"3456789abc");
        assert_eq!(t.dropped, 3);
        // A single push larger than the cap keeps its newest bytes.
        r.push(Stream::Stderr, b"zzzzzzzzzzzzNEWEST");
        let t = r.take(100, false);
        assert_eq!(t.stderr, b"zzzzNEWEST");
        assert_eq!(t.dropped, 8);
        assert_eq!(r.take(100, false), Taken::default());
    }

    #[test]
    fn reads_are_bounded_and_resume() {
        let mut r = Ring::new(1 << 20);
        for _ in 0..100 {
            r.push(Stream::Stdout, &[b'x'; 1000]);
        }
        let mut total = 0;
        loop {
            let t = r.take(4096, false);
            if t.stdout.is_empty() {
                break;
            }
            assert!(t.stdout.len() <= 4096);
            total += t.stdout.len();
        }
        assert_eq!(total, 100_000);
    }

    #[test]
    fn a_split_character_waits_for_its_end() {
        let mut r = Ring::new(100);
        let snow = "☃".as_bytes(); // 3 bytes
        r.push(Stream::Stdout, b"hi ");
        r.push(Stream::Stdout, &snow[..2]);
        let t = r.take(100, true);
        assert_eq!(t.stdout, b"hi ");
        r.push(Stream::Stdout, &snow[2..]);
        let t = r.take(100, true);
        assert_eq!(t.stdout, snow);
        // Once the job ended, nothing is held back.
        r.push(Stream::Stdout, &snow[..1]);
        assert_eq!(r.take(100, false).stdout, &snow[..1]);
        // Invalid bytes are not held (they will never complete).
        r.push(Stream::Stdout, b"\xff");
        assert_eq!(r.take(100, true).stdout, b"\xff");
        for (bytes, want) in [
            (&b"a"[..], 0),
            (b"\xc3", 1),
            (b"\xc3\xa9", 0),
            (b"\xf0\x9f\x8c", 3),
            (b"\xf0\x9f\x8c\x8d", 0),
            (b"\x80\x80\x80", 0),
        ] {
            assert_eq!(incomplete_tail(bytes), want, "{bytes:?}");
        }
    }

    #[test]
    fn recent_output_stays_for_a_peek_read_or_not() {
        let mut r = Ring::new(100);
        r.push(Stream::Stdout, b"one\n");
        r.push(Stream::Stderr, b"err\n");
        assert_eq!(r.recent(10, true), (b"one\n".to_vec(), b"err\n".to_vec()));
        // A peek takes nothing; a read leaves the recent bytes.
        assert_eq!(r.len(), 8);
        let t = r.take(100, true);
        assert_eq!((t.stdout.len(), t.stderr.len()), (4, 4));
        assert_eq!(r.recent(3, true).0, b"ne\n");
        // The newest RECENT bytes, also past the ring's own cap and across many pushes.
        for i in 0..5000u32 {
            r.push(Stream::Stdout, format!("{i:07}\n").as_bytes());
        }
        let (out, err) = r.recent(usize::MAX, true);
        assert_eq!(out.len(), RECENT);
        assert!(out.ends_with(b"0004999\n"));
        assert_eq!(err, b"err\n");
        r.push(Stream::Stdout, &vec![b'z'; RECENT + 5]);
        assert_eq!(r.recent(usize::MAX, true).0, vec![b'z'; RECENT]);
        // A character cut at the front is left out, one still being written is held.
        let mut r = Ring::new(100);
        r.push(Stream::Stdout, "é☃".as_bytes());
        assert_eq!(r.recent(4, true).0, "☃".as_bytes());
        r.push(Stream::Stdout, &"☃".as_bytes()[..1]);
        assert_eq!(r.recent(4, true).0, "☃".as_bytes());
        assert_eq!(r.recent(4, false).0, &"☃☃".as_bytes()[..4]);
    }

    #[test]
    fn arbitrary_pushes_and_takes_never_exceed_the_cap() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut r = Ring::new(777);
        let (mut pushed, mut got, mut dropped) = (0u64, 0u64, 0u64);
        for _ in 0..10_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 300) as usize;
            if seed.is_multiple_of(3) {
                let t = r.take(n, seed.is_multiple_of(2));
                got += (t.stdout.len() + t.stderr.len()) as u64;
                dropped += t.dropped;
            } else {
                let stream = if seed.is_multiple_of(5) {
                    Stream::Stderr
                } else {
                    Stream::Stdout
                };
                r.push(stream, &vec![0xe2; n]);
                pushed += n as u64;
            }
            assert!(r.len() <= 777);
        }
        let t = r.take(usize::MAX, false);
        got += (t.stdout.len() + t.stderr.len()) as u64;
        dropped += t.dropped;
        assert_eq!(
            pushed,
            got + dropped,
            "every byte is read or counted as dropped"
        );
    }
}

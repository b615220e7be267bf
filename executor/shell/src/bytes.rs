//! Bytes that are not UTF-8, carried in the shell's `String` values.
//!
//! The shell's words and variables are Rust strings, but a shell must be byte-exact:
//! `printf '\303\251'` writes two bytes, `x=$(printf '\377')` keeps one byte 0xFF, and
//! `printf '\360\237'` (half a character) writes exactly those two bytes. So a byte that
//! does not belong to valid UTF-8 is held as one character of a private range
//! (U+10FF80 + (byte - 0x80), the last 128 code points of plane 16's private use area),
//! and turned back into that byte wherever the shell writes: to a file, a pipe, a
//! program's stdin, stdout. Valid UTF-8 stays as it is, so text is untouched; nothing
//! outside the shell ever sees the private characters (program arguments and environment
//! get the bytes back, made valid UTF-8 where WASI needs it).

use std::borrow::Cow;

/// The first code point of the private range (byte 0x80).
const BASE: u32 = 0x10_FF80;

/// The character that holds `byte` (an ASCII byte is itself).
pub(crate) fn raw_char(byte: u8) -> char {
    if byte < 0x80 {
        char::from(byte)
    } else {
        char::from_u32(BASE + u32::from(byte - 0x80)).unwrap_or(char::REPLACEMENT_CHARACTER)
    }
}

/// The byte a private character holds, if it is one.
fn raw_byte(c: char) -> Option<u8> {
    let v = u32::from(c);
    (BASE..=BASE + 0x7F)
        .contains(&v)
        .then(|| u8::try_from(v - BASE + 0x80).unwrap_or(0))
}

/// Pushes `byte` onto `out` as shell text.
pub(crate) fn push_byte(out: &mut String, byte: u8) {
    out.push(raw_char(byte));
}

/// Shell text from bytes: valid UTF-8 as it is, every other byte as its private character.
pub(crate) fn decode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            push_byte(&mut out, *b);
        }
    }
    out
}

/// The bytes shell text stands for (private characters back to their bytes). Borrowed
/// when there is none, which is the common case.
pub(crate) fn encode(s: &str) -> Cow<'_, [u8]> {
    if !s.chars().any(|c| raw_byte(c).is_some()) {
        return Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    let mut buf = [0u8; 4];
    for c in s.chars() {
        match raw_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
        }
    }
    Cow::Owned(out)
}

/// Shell text made valid UTF-8 for where only UTF-8 can go (WASI arguments and
/// environment): the bytes it stands for, with an invalid sequence as U+FFFD.
pub(crate) fn to_utf8(s: String) -> String {
    match encode(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(b) => String::from_utf8_lossy(&b).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255u8).collect();
        assert_eq!(&*encode(&decode(&all)), &all[..]);
        for b in 0..=255u8 {
            let mut s = String::new();
            push_byte(&mut s, b);
            assert_eq!(&*encode(&s), &[b][..], "byte {b}");
        }
    }

    #[test]
    fn utf8_stays_text_and_split_characters_are_bytes() {
        assert_eq!(decode("hé 🌍".as_bytes()), "hé 🌍");
        let mut s = String::new();
        for b in [0xc3, 0xa9] {
            push_byte(&mut s, b);
        }
        assert_eq!(&*encode(&s), "é".as_bytes());
        assert_eq!(to_utf8(s), "é");
        assert_eq!(&*encode(&decode(&[0xf0, 0x9f])), &[0xf0, 0x9f][..]);
        assert!(matches!(encode("plain"), Cow::Borrowed(_)));
    }
}

//! Compact JSON text of a `serde_json::Value`, byte for byte what `Value::to_string` writes,
//! several times faster on the strings command output is made of.
//!
//! serde_json escapes a string with a call per escape; output such as `yes` or a build log
//! is one escape every few bytes, and a 2 MiB result then spends tens of milliseconds in
//! escaping, twice (the structured content and the text block that repeats it). Here a
//! string is escaped in one pass into a buffer reserved up front. Numbers, and the order of
//! object keys, are serde_json's own.

use serde_json::Value;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The escape of byte `b` inside a JSON string, if it needs one (`u` = `\u00XX`).
const fn escape_of(b: u8) -> u8 {
    match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        0x00..=0x1f => b'u',
        _ => 0,
    }
}

static ESCAPES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = escape_of(i as u8);
        i += 1;
    }
    t
};

/// Appends the JSON string literal of `s` to `out`.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + bytes.len() / 4 + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let e = ESCAPES[b as usize];
        if e == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if e == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', e]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends the compact JSON text of `v` to `out`.
pub fn write(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write(out, item);
            }
            out.push(b'}');
        }
    }
}

/// The compact JSON text of `v` (what `v.to_string()` gives).
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut out, v);
    out
}

/// The compact JSON text of `v` as a `String`.
pub fn to_string(v: &Value) -> String {
    // Only JSON text of valid strings was written: always UTF-8.
    String::from_utf8(to_vec(v))
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// What `v` is, for a message that says what was given instead of what was wanted:
/// `the string "abc"` (cut to 40 characters), `the number 5`, `an array`, ...
pub fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {:?}", cut_for_message(s)),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// `s` cut to its first 40 characters (with `…`), for messages that quote input.
pub fn cut_for_message(s: &str) -> String {
    if s.chars().count() <= 40 {
        s.to_owned()
    } else {
        let head: String = s.chars().take(40).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_text_as_serde_json() {
        let every_byte: String = (0u8..128).map(char::from).collect();
        let values = [
            json!(null),
            json!([true, false, 0, -1, 1.5, 1e300, u64::MAX, i64::MIN]),
            json!({"a": "y\n".repeat(100), "b": every_byte, "c": "é☃🌍 \u{7f}\u{2028}", "": {}}),
            json!({"nested": [[[]], {"k\"ey\\": [null, "\u{0}\u{1f}"]}], "order": {"z": 1, "a": 2}}),
            json!(""),
        ];
        for v in values {
            assert_eq!(to_string(&v), v.to_string(), "{v:?}");
        }
    }

    #[test]
    fn random_strings_match() {
        let mut seed = 0x243f_6a88_85a3_08d3u64;
        for _ in 0..2_000 {
            let mut s = String::new();
            for _ in 0..(seed % 40) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let c = match seed % 4 {
                    0 => char::from((seed >> 8) as u8 & 0x7f),
                    1 => char::from_u32((seed >> 8) as u32 % 0x11_0000).unwrap_or('x'),
                    2 => '\n',
                    _ => '"',
                };
                s.push(c);
            }
            let v = json!({ s.clone(): [s.clone(), {"t": s}] });
            assert_eq!(to_string(&v), v.to_string());
        }
    }
}

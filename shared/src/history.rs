//! Per-computer command history: what ran, when, its exit code and duration (never its
//! output). The last [`HISTORY_LEN`] commands of a computer, each cut to [`COMMAND_CUT`]
//! bytes; carried as the `history` field of `computer_list` items and shown by the
//! dashboard. Clock-free: callers pass the time.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Commands kept per computer.
pub const HISTORY_LEN: usize = 50;
/// Longest command text kept, in bytes (cut on a UTF-8 boundary, then `…`).
pub const COMMAND_CUT: usize = 1024;

/// One command that ran on a computer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The shell command, or the argv joined with spaces (quoted where needed).
    pub command: String,
    /// RFC 3339, UTC, milliseconds.
    pub started_at: String,
    pub exit_code: i64,
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The last [`HISTORY_LEN`] commands of one computer, oldest first.
#[derive(Debug, Clone, Default)]
pub struct History(VecDeque<HistoryEntry>);

impl History {
    /// Records a command, dropping the oldest beyond [`HISTORY_LEN`].
    pub fn push(&mut self, entry: HistoryEntry) {
        if self.0.len() == HISTORY_LEN {
            self.0.pop_front();
        }
        self.0.push_back(entry);
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<HistoryEntry> {
        self.0.iter().cloned().collect()
    }
}

/// The text recorded for a call: `command` as given, or `args` joined like a shell would
/// read them back; cut to [`COMMAND_CUT`] bytes.
pub fn describe(command: Option<&str>, args: Option<&[String]>) -> String {
    let text = match (command, args) {
        (Some(c), _) => c.to_owned(),
        (None, Some(a)) => a.iter().map(|s| quote(s)).collect::<Vec<_>>().join(" "),
        (None, None) => String::new(),
    };
    cut(&text, COMMAND_CUT)
}

fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &s[..end])
}

/// RFC 3339 (UTC, milliseconds) for a time given in milliseconds since the Unix epoch.
pub fn rfc3339_utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: usize) -> HistoryEntry {
        HistoryEntry {
            command: format!("echo {i}"),
            started_at: rfc3339_utc(0),
            exit_code: 0,
            duration_ms: 1,
            timed_out: false,
            truncated: false,
        }
    }

    #[test]
    fn keeps_the_last_fifty_oldest_first() {
        let mut h = History::default();
        for i in 0..60 {
            h.push(entry(i));
        }
        let e = h.entries();
        assert_eq!(e.len(), HISTORY_LEN);
        assert_eq!(e[0].command, "echo 10");
        assert_eq!(e[49].command, "echo 59");
    }

    #[test]
    fn commands_are_cut_on_a_char_boundary() {
        let long = "é".repeat(600); // 1200 bytes
        let d = describe(Some(&long), None);
        assert!(d.len() <= COMMAND_CUT, "{}", d.len());
        assert!(d.ends_with('…'));
        assert_eq!(describe(Some("ls"), None), "ls");
        let args = ["printf".to_owned(), "a b".to_owned(), "it's".to_owned()];
        assert_eq!(describe(None, Some(&args)), r"printf 'a b' 'it'\''s'");
        assert_eq!(cut("abc", 3), "abc");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_utc(1_796_083_199_999), "2026-11-30T23:59:59.999Z");
        let e = serde_json::to_value(entry(1)).unwrap();
        assert!(e.get("timed_out").is_none());
    }
}

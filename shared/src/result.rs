//! Result shaping: exec outcomes and lifecycle answers as MCP `CallToolResult`s.
//!
//! Owns the exact shapes of SPEC §3.5 (keys, notices, base64 for non-UTF-8 bytes) and the
//! output cap: [`OutputCollector`] keeps the head of stdout+stderr in arrival order and
//! says when the cap is hit, so every backend truncates the same way.

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock as Content};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Collects stdout and stderr up to a combined byte limit.
#[derive(Debug)]
pub struct OutputCollector {
    limit: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

/// What the caller should do after [`OutputCollector::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Keep reading.
    More,
    /// The limit is reached: stop the command.
    LimitHit,
}

impl OutputCollector {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            stdout: Vec::new(),
            stderr: Vec::new(),
            truncated: false,
        }
    }

    fn used(&self) -> usize {
        self.stdout.len() + self.stderr.len()
    }

    /// Adds a chunk. Once the limit is hit, later chunks are dropped.
    pub fn push(&mut self, stream: Stream, bytes: &[u8]) -> Push {
        if self.truncated {
            return Push::LimitHit;
        }
        let room = self.limit.saturating_sub(self.used());
        let buf = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        if bytes.len() <= room {
            buf.extend_from_slice(bytes);
            return Push::More;
        }
        let start = buf.len();
        buf.extend_from_slice(&bytes[..room]);
        // Cut on a UTF-8 boundary: drop an incomplete trailing character.
        if let Err(e) = std::str::from_utf8(&buf[start..])
            && e.error_len().is_none()
        {
            buf.truncate(start + e.valid_up_to());
        }
        self.truncated = true;
        Push::LimitHit
    }

    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Bytes collected so far: (stdout, stderr, truncated).
    pub fn finish(self) -> (Vec<u8>, Vec<u8>, bool) {
        (self.stdout, self.stderr, self.truncated)
    }
}

/// The raw outcome of an exec, as a backend reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecOutcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i64,
    pub duration_ms: u64,
    /// The output limit was hit (value: the limit in bytes).
    pub truncated_at: Option<u64>,
    /// The timeout was hit (value: the timeout in seconds).
    pub timed_out_after: Option<u64>,
    /// The out-of-memory killer ended it (where the backend can tell: Docker with the
    /// supervisor).
    #[serde(default)]
    pub oom_killed: bool,
}

/// Exit code of a timed-out command.
pub const TIMEOUT_EXIT_CODE: i64 = 124;

fn append_notice(stderr: &mut Vec<u8>, notice: &str) {
    if !stderr.is_empty() && !stderr.ends_with(b"\n") {
        stderr.push(b'\n');
    }
    stderr.extend_from_slice(notice.as_bytes());
    stderr.push(b'\n');
}

/// A stream as results show it: the text, and the bytes in base64 when they are not UTF-8
/// (the text then has U+FFFD for what is not).
pub(crate) fn shown(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a command answers (SPEC §3.5, §3.8): `terminal_execute`'s result, and
/// `terminal_job`'s, which adds the job's fields. Built by [`exec_structured`],
/// [`crate::jobs::job_structured`] and [`crate::jobs::yielded_structured`] only.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecAnswer {
    pub computer_id: String,
    /// Absent in `terminal_job`'s answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary: Option<bool>,
    /// A job's (`terminal_job`, or a `terminal_execute` that left its command running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    pub stdout: String,
    pub stderr: String,
    /// Absent while a job runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub oom_killed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_base64: Option<String>,
    /// A job's output dropped (the oldest) since the previous read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_bytes: u64,
    /// A job's peek: nothing was taken.
    #[serde(default, skip_serializing_if = "is_false")]
    pub peek: bool,
    /// This call made the computer (SPEC §3.2).
    #[serde(default, skip_serializing_if = "is_false")]
    pub created: bool,
    /// What the computer's network policy refused during the call (SPEC §3.11).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_blocked: Vec<crate::egress::Blocked>,
}

impl ExecAnswer {
    /// Adds the refusals of the call: listed, and one stderr notice per host.
    pub fn with_blocked(mut self, blocked: Vec<crate::egress::Blocked>) -> Self {
        let mut told = std::collections::HashSet::new();
        for b in &blocked {
            if told.insert(b.host.clone()) {
                if !self.stderr.is_empty() && !self.stderr.ends_with('\n') {
                    self.stderr.push('\n');
                }
                self.stderr.push_str(&b.notice());
                self.stderr.push('\n');
            }
        }
        self.network_blocked = blocked;
        self
    }
}

/// The structured exec result of SPEC §3.5.
pub fn exec_structured(computer_id: &str, temporary: bool, outcome: ExecOutcome) -> ExecAnswer {
    let ExecOutcome {
        stdout,
        mut stderr,
        mut exit_code,
        duration_ms,
        truncated_at,
        timed_out_after,
        oom_killed,
    } = outcome;
    // Notices go after the captured bytes, and base64 covers the captured bytes only.
    let stderr_raw = std::str::from_utf8(&stderr)
        .is_err()
        .then(|| stderr.clone());
    if let Some(secs) = timed_out_after {
        exit_code = TIMEOUT_EXIT_CODE;
        append_notice(
            &mut stderr,
            &format!(
                "[timed out after {secs} s: the command and its child processes were killed; the output so far is kept. Pass a larger `timeout` or run it in the background (nohup … &) and poll]"
            ),
        );
    }
    if let Some(limit) = truncated_at {
        append_notice(
            &mut stderr,
            &format!(
                "[output truncated at {limit} bytes (the output limit); the command was stopped. Redirect output to a file and read it in parts, e.g. `cmd > /tmp/out.txt; head -c 100000 /tmp/out.txt`]"
            ),
        );
    }
    if oom_killed {
        append_notice(
            &mut stderr,
            "[killed by the out-of-memory killer: the computer's memory limit was reached. Use less memory (smaller inputs, fewer parallel jobs) or give computers more (--memory)]",
        );
    }
    let (stdout, stdout_base64) = shown(&stdout);
    let (stderr, stderr_base64) = match stderr_raw {
        None => shown(&stderr),
        Some(raw) => (
            String::from_utf8_lossy(&stderr).into_owned(),
            Some(base64::engine::general_purpose::STANDARD.encode(raw)),
        ),
    };
    ExecAnswer {
        computer_id: computer_id.to_owned(),
        temporary: Some(temporary),
        stdout,
        stderr,
        exit_code: Some(exit_code),
        exec_duration_ms: Some(duration_ms),
        truncated: truncated_at.is_some(),
        timed_out: timed_out_after.is_some(),
        oom_killed,
        stdout_base64,
        stderr_base64,
        ..ExecAnswer::default()
    }
}

/// A successful tool result: structured content plus the same JSON as one text block.
pub fn structured_result(value: Value) -> CallToolResult {
    let text = crate::json::to_string(&value);
    let mut result = CallToolResult::success(vec![Content::text(text)]);
    result.structured_content = Some(value);
    result.is_error = Some(false);
    result
}

/// A validation error: one text block, no structured content (SPEC §3.5).
pub fn validation_error(message: &str) -> CallToolResult {
    let mut result = CallToolResult::error(vec![Content::text(message.to_owned())]);
    result.is_error = Some(true);
    result
}

/// A failed operation: `{"error": message}` as structured content and text.
pub fn operation_error(message: &str) -> CallToolResult {
    let value = json!({ "error": message });
    let mut result = CallToolResult::error(vec![Content::text(value.to_string())]);
    result.structured_content = Some(value);
    result.is_error = Some(true);
    result
}

/// One entry of `computer_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputerInfo {
    pub computer_id: String,
    pub sandbox_id: String,
    pub backend: String,
    pub state: crate::lifecycle::ComputerState,
    pub temporary: bool,
    pub image: String,
    pub created_at: String,
    /// The last commands run on it through this server, oldest first (beyond SPEC §3.5's
    /// required fields; the dashboard shows it).
    #[serde(default)]
    pub history: Vec<crate::history::HistoryEntry>,
    /// Its jobs, running and recently ended (with the `jobs` group; SPEC §3.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<JobInfo>>,
    /// Why its place could not be asked (the gateway lists a computer whose executor is
    /// unreachable with state `unreachable` and this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where it may connect (SPEC §3.11): its effective network policy, `"all"`, `"none"`
    /// or `{"allow": [...]}`. `None` where the lister does not know it (a gateway's
    /// unreachable executor, a provider the gateway reaches itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::egress::Policy>,
}

/// A job as lists show it (`terminal_job` with `list`, and `computer_list` items).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job_id: String,
    pub command: String,
    pub running: bool,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

impl JobInfo {
    pub fn new(
        job_id: String,
        command: String,
        running: bool,
        started_at_ms: u64,
        exit: Option<i64>,
    ) -> Self {
        Self {
            job_id,
            command,
            running,
            started_at: crate::history::rfc3339_utc(started_at_ms),
            exit_code: exit,
        }
    }
}

/// The answer of `computer_create`, `_restart` and `_factory_reset` (SPEC §3.5): built
/// here only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    pub ok: bool,
    pub computer_id: String,
    /// The first 12 characters of the container, machine or sandbox id.
    pub sandbox_id: String,
    pub temporary: bool,
}

impl Created {
    /// The answer for computer `computer_id` (the caller's id), whose backend calls it
    /// `provider_id`.
    pub fn new(computer_id: &str, provider_id: &str, temporary: bool) -> Self {
        Self {
            ok: true,
            computer_id: computer_id.to_owned(),
            sandbox_id: provider_id.chars().take(12).collect(),
            temporary,
        }
    }
}

/// The answer of `computer_delete` (SPEC §3.5): built here only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub ok: bool,
    pub computer_id: String,
    pub deleted: bool,
}

impl Deleted {
    pub fn new(computer_id: &str) -> Self {
        Self {
            ok: true,
            computer_id: computer_id.to_owned(),
            deleted: true,
        }
    }
}

/// The answer of `computer_list` (and the dashboard's data): built here only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub computers: Vec<ComputerInfo>,
    pub count: usize,
}

/// `{"computers": [...], "count": n}`.
pub fn inventory(computers: Vec<ComputerInfo>) -> Listed {
    let count = computers.len();
    Listed { computers, count }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer as JSON (the shape the tests check).
    fn exec_structured(id: &str, temporary: bool, outcome: ExecOutcome) -> Value {
        serde_json::to_value(super::exec_structured(id, temporary, outcome)).unwrap()
    }

    fn inventory(computers: &[ComputerInfo]) -> Value {
        serde_json::to_value(super::inventory(computers.to_vec())).unwrap()
    }

    #[test]
    fn lifecycle_answers_have_the_spec_shapes() {
        let c = serde_json::to_value(Created::new("box", "0123456789abcdef", false)).unwrap();
        assert_eq!(
            c.to_string(),
            r#"{"ok":true,"computer_id":"box","sandbox_id":"0123456789ab","temporary":false}"#
        );
        assert_eq!(
            serde_json::from_value::<Created>(c).unwrap().sandbox_id,
            "0123456789ab"
        );
        let c = Created::new("ü", "äö", true);
        assert_eq!(c.sandbox_id, "äö");
        let d = serde_json::to_value(Deleted::new("box")).unwrap();
        assert_eq!(
            d.to_string(),
            r#"{"ok":true,"computer_id":"box","deleted":true}"#
        );
        assert_eq!(serde_json::to_value(Deleted::new("box")).unwrap(), d);
    }

    #[test]
    fn collector_keeps_head_in_arrival_order() {
        let mut c = OutputCollector::new(10);
        assert_eq!(c.push(Stream::Stdout, b"abc"), Push::More);
        assert_eq!(c.push(Stream::Stderr, b"de"), Push::More);
        assert_eq!(c.push(Stream::Stdout, b"fghijkl"), Push::LimitHit);
        assert_eq!(c.push(Stream::Stderr, b"zz"), Push::LimitHit);
        let (o, e, t) = c.finish();
        assert_eq!(
            (o.as_slice(), e.as_slice(), t),
            (&b"abcfghij"[..], &b"de"[..], true)
        );
    }

    #[test]
    fn collector_cuts_on_utf8_boundary() {
        let mut c = OutputCollector::new(5);
        assert_eq!(c.push(Stream::Stdout, "abcdé".as_bytes()), Push::LimitHit);
        let (o, _, _) = c.finish();
        assert_eq!(o, b"abcd");
        // Exactly at the limit is not truncation.
        let mut c = OutputCollector::new(3);
        assert_eq!(c.push(Stream::Stdout, b"abc"), Push::More);
        assert!(!c.is_truncated());
    }

    #[test]
    fn exec_result_shape() {
        let v = exec_structured(
            "a-b",
            true,
            ExecOutcome {
                stdout: b"hi\n".to_vec(),
                exit_code: 3,
                duration_ms: 7,
                ..Default::default()
            },
        );
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "computer_id",
                "temporary",
                "stdout",
                "stderr",
                "exit_code",
                "exec_duration_ms"
            ]
        );
        assert_eq!(v["exit_code"], 3);
    }

    #[test]
    fn timeout_truncation_and_binary() {
        let v = exec_structured(
            "x",
            false,
            ExecOutcome {
                stdout: vec![0xff, 0x00, b'a'],
                stderr: b"partial".to_vec(),
                exit_code: -1,
                duration_ms: 1000,
                truncated_at: Some(100),
                timed_out_after: Some(1),
                oom_killed: false,
            },
        );
        assert_eq!(v["exit_code"], 124);
        assert_eq!(v["timed_out"], true);
        assert_eq!(v["truncated"], true);
        assert_eq!(v["stdout_base64"], "/wBh");
        let stderr = v["stderr"].as_str().unwrap();
        assert!(
            stderr.starts_with("partial\n[timed out after 1 s"),
            "{stderr}"
        );
        assert!(stderr.contains("truncated at 100 bytes"));
        assert!(v.get("stderr_base64").is_none());
    }

    #[test]
    fn binary_stderr_keeps_its_base64_free_of_the_notices() {
        let v = exec_structured(
            "x",
            false,
            ExecOutcome {
                stderr: vec![0xff, b'e'],
                exit_code: 0,
                timed_out_after: Some(5),
                ..Default::default()
            },
        );
        assert_eq!(v["stderr_base64"], "/2U=");
        let text = v["stderr"].as_str().unwrap();
        assert!(
            text.starts_with("\u{fffd}e\n[timed out after 5 s"),
            "{text}"
        );
        assert_eq!(v["exit_code"], TIMEOUT_EXIT_CODE);
    }

    #[test]
    fn an_oom_kill_is_flagged_and_says_what_to_do() {
        let v = exec_structured(
            "x",
            false,
            ExecOutcome {
                stderr: b"Killed".to_vec(),
                exit_code: 137,
                oom_killed: true,
                ..Default::default()
            },
        );
        assert_eq!(v["oom_killed"], true);
        assert_eq!(v["exit_code"], 137, "an OOM kill keeps its own exit code");
        let stderr = v["stderr"].as_str().unwrap();
        assert!(
            stderr.starts_with("Killed\n[killed by the out-of-memory killer"),
            "{stderr}"
        );
        assert!(stderr.contains("--memory"), "{stderr}");
        assert!(v.get("timed_out").is_none() && v.get("truncated").is_none());
        let fine = exec_structured("x", false, ExecOutcome::default());
        assert!(fine.get("oom_killed").is_none());
    }

    #[test]
    fn a_character_split_across_chunks_at_the_limit_is_dropped_whole() {
        let euro = "€".as_bytes();
        let mut c = OutputCollector::new(4);
        assert_eq!(c.push(Stream::Stderr, b"ab"), Push::More);
        assert_eq!(c.push(Stream::Stderr, euro), Push::LimitHit);
        assert!(c.is_truncated());
        assert_eq!(c.push(Stream::Stdout, b""), Push::LimitHit);
        let (o, e, t) = c.finish();
        assert_eq!(
            (o.as_slice(), e.as_slice(), t),
            (&b""[..], &b"ab"[..], true)
        );
        // Bytes that are not UTF-8 at all are cut exactly at the limit.
        let mut c = OutputCollector::new(2);
        assert_eq!(c.push(Stream::Stdout, &[0xff, 0xfe, 0xfd]), Push::LimitHit);
        assert_eq!(c.finish().0, [0xff, 0xfe]);
        // A zero limit keeps nothing.
        let mut c = OutputCollector::new(0);
        assert_eq!(c.push(Stream::Stdout, b"a"), Push::LimitHit);
        assert_eq!(c.finish(), (vec![], vec![], true));
    }

    #[test]
    fn a_computer_without_a_job_list_omits_the_key_and_old_records_read() {
        let info = ComputerInfo {
            computer_id: "box".into(),
            sandbox_id: "abc".into(),
            backend: "docker".into(),
            state: crate::lifecycle::ComputerState::Running,
            temporary: false,
            image: "debian".into(),
            created_at: "1970-01-01T00:00:00.000Z".into(),
            history: Vec::new(),
            jobs: None,
            error: None,
            network: None,
        };
        let mut wire = serde_json::to_value(&info).unwrap();
        assert!(wire.get("jobs").is_none(), "{wire}");
        assert!(wire.get("network").is_none(), "{wire}");
        assert_eq!(wire["state"], "running");
        wire.as_object_mut().unwrap().remove("history");
        assert_eq!(serde_json::from_value::<ComputerInfo>(wire).unwrap(), info);
        let listed = inventory(&[info.clone(), info]);
        assert_eq!(listed["count"], 2);
        assert_eq!(listed["computers"][1]["computer_id"], "box");
    }

    #[test]
    fn results_have_text_mirror() {
        let r = structured_result(json!({"ok": true}));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["isError"], false);
        assert_eq!(v["content"][0]["text"], "{\"ok\":true}");
        let r = serde_json::to_value(validation_error("fix it")).unwrap();
        assert!(r.get("structuredContent").is_none());
        assert_eq!(r["isError"], true);
        let r = serde_json::to_value(operation_error("gone")).unwrap();
        assert_eq!(r["structuredContent"]["error"], "gone");
    }
}

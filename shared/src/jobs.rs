//! Long-running commands (SPEC §3.8, group `jobs`): the `terminal_job` call, job ids,
//! signals, and the shape of job results.
//!
//! A command started with `yield_ms` that is still running when the wait ends becomes a
//! job: it keeps running on its computer, with its output in a bounded buffer there
//! (the oldest bytes dropped and counted), until it ends and its output is read. Jobs are
//! reached by id through the computer they run on; whoever may reach the computer may
//! reach its jobs. Every backend and the gateway use these rules and shapes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::result::JobInfo;
use crate::result::{ExecAnswer, ExecOutcome, exec_structured, shown};

pub mod over_exec;

/// The job tool's name.
pub const JOB_TOOL: &str = "terminal_job";
/// `wait_ms` when omitted.
pub const DEFAULT_WAIT_MS: u64 = 1_000;
/// The longest `wait_ms`.
pub const MAX_WAIT_MS: u64 = 60_000;
/// Most jobs a computer keeps (running, or ended with output not read yet).
pub const MAX_JOBS: usize = 64;
/// Each job's output buffer.
pub const BUFFER_BYTES: u64 = 8 << 20;
/// Most bytes of each stream a peek shows (`terminal_job` with `peek`).
pub const PEEK_BYTES: usize = 16 * 1024;
/// Longest job id accepted.
const MAX_JOB_ID: usize = 64;

/// A job id from 12 random bytes (96 bits): `job-` and 24 hex digits.
pub fn job_id_from(random: [u8; 12]) -> String {
    let mut id = String::with_capacity(28);
    id.push_str("job-");
    for b in random {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// A `job_id` that is not shaped like one (the value, cut to 40 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`job_id` must be the id terminal_execute returned (like \"job-1f2e…\"), got {0:?}")]
pub struct JobIdError(pub String);

/// Checks the shape of a job id an agent passed (it may still name no job).
pub fn validate_job_id(id: &str) -> Result<(), JobIdError> {
    if id.is_empty()
        || id.len() > MAX_JOB_ID
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(JobIdError(crate::history::cut(id, 40)));
    }
    Ok(())
}

/// A `signal` that is not one of the schema's: the value as given, and what to write
/// instead where it is a near miss (`": write \"TERM\""`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`signal` must be INT, TERM, KILL, HUP, QUIT, USR1, USR2, STOP or CONT (exactly, in capitals) or a signal number from 1 to 64, got {given}{hint}"
)]
pub struct SignalError {
    pub given: String,
    pub hint: String,
}

/// The signal a name or number means: `INT`, `TERM`, `KILL`, `HUP` (also with `SIG`,
/// any case, and a few more), or a number from 1 to 64.
pub fn parse_signal(raw: &Value) -> Result<i32, SignalError> {
    let fail = |hint: String| SignalError {
        given: raw.to_string(),
        hint,
    };
    let named = |name: &str| {
        Some(match name {
            "HUP" => 1,
            "INT" => 2,
            "QUIT" => 3,
            "KILL" => 9,
            "USR1" => 10,
            "USR2" => 12,
            "TERM" => 15,
            "CONT" => 18,
            "STOP" => 19,
            _ => return None,
        })
    };
    match raw {
        Value::Number(n) => n
            .as_u64()
            .filter(|n| (1..=64).contains(n))
            .map(|n| n as i32)
            .ok_or_else(|| fail(String::new())),
        Value::String(s) => named(s).ok_or_else(|| {
            // Near misses are refused (the schema's words only), with what to write.
            let upper = s.trim().to_ascii_uppercase();
            let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
            let hint = match (named(bare), bare.parse::<u64>()) {
                (Some(_), _) => format!(": write \"{bare}\""),
                (None, Ok(n)) => format!(": write the number {n} without quotes"),
                (None, Err(_)) => String::new(),
            };
            fail(hint)
        }),
        _ => Err(fail(String::new())),
    }
}

/// A validated `terminal_job` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobCall {
    /// The jobs on a computer, running and recently ended.
    List { computer_id: Option<String> },
    /// Write, close, signal (in that order), then wait for news and read it.
    Poll(JobPoll),
}

/// What one `terminal_job` call does to one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPoll {
    pub job_id: String,
    /// `None`: the computer the job was started on, as this server knows it, else the
    /// session default.
    pub computer_id: Option<String>,
    pub stdin: Option<Vec<u8>>,
    pub close_stdin: bool,
    pub signal: Option<i32>,
    pub wait_ms: u64,
    /// Only look (after any `signal`): the newest output, taking nothing, at once.
    pub peek: bool,
}

impl JobCall {
    pub fn computer_id(&self) -> Option<&str> {
        match self {
            JobCall::List { computer_id } => computer_id.as_deref(),
            JobCall::Poll(p) => p.computer_id.as_deref(),
        }
    }
}

/// What a read of a job found: its new output and how it stands. Its serde form (the
/// answer of [`crate::op::Op::JobRead`]) carries the output as base64 strings, exactly.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobOutput {
    pub job_id: String,
    #[serde(with = "base64_bytes")]
    pub stdout: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub stderr: Vec<u8>,
    /// False once it ended and this read took the last of its output.
    pub running: bool,
    /// Set when `running` is false.
    pub exit_code: Option<i64>,
    pub duration_ms: u64,
    /// Output dropped (the oldest) since the previous read.
    pub dropped_bytes: u64,
    /// Its timeout ended it (value: the timeout in seconds).
    pub timed_out_after: Option<u64>,
    /// The out-of-memory killer ended it.
    pub oom_killed: bool,
    /// A peek: the newest output (at most [`PEEK_BYTES`] of each stream), read or not;
    /// nothing was taken, and `running: false` means the program ended (the job stays
    /// until a read takes its output).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub peek: bool,
}

impl JobOutput {
    /// The read a running job's structured answer shows (a `terminal_execute` that
    /// yielded, or a `terminal_job` read of a job still running): exact, since a running
    /// answer carries no notices. `None` for an ended answer (its stderr may hold notices:
    /// read it with [`crate::op::Op::JobRead`]) or one that is not a job's.
    pub fn of_running(a: &ExecAnswer) -> Option<JobOutput> {
        if a.running != Some(true) {
            return None;
        }
        let stream = |text: &str, b64: &Option<String>| -> Option<Vec<u8>> {
            use base64::Engine as _;
            match b64 {
                Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).ok(),
                None => Some(text.as_bytes().to_vec()),
            }
        };
        Some(JobOutput {
            job_id: a.job_id.clone()?,
            stdout: stream(&a.stdout, &a.stdout_base64)?,
            stderr: stream(&a.stderr, &a.stderr_base64)?,
            running: true,
            exit_code: None,
            duration_ms: a.exec_duration_ms.unwrap_or(0),
            dropped_bytes: a.dropped_bytes,
            timed_out_after: None,
            oom_killed: false,
            peek: false,
        })
    }
}

/// The newest bytes of a stream as a peek shows them: with `cut` (older bytes were left
/// out) a character cut at the front is dropped, and while the job `running`, one not
/// complete yet at the end waits for a later look.
pub fn peek_tidy(bytes: &[u8], cut: bool, running: bool) -> &[u8] {
    let mut t = bytes;
    if cut {
        let n = t.iter().take(3).take_while(|b| **b & 0xc0 == 0x80).count();
        t = &t[n..];
    }
    if running
        && let Some(lead) = (t.len().saturating_sub(4)..t.len())
            .rev()
            .find(|i| t[*i] & 0xc0 != 0x80)
        && std::str::from_utf8(&t[lead..]).is_err_and(|e| e.error_len().is_none())
    {
        t = &t[..lead];
    }
    t
}

/// Bytes as one base64 string in serde forms (job reads, task records).
pub(crate) mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

fn as_outcome(out: &JobOutput) -> ExecOutcome {
    ExecOutcome {
        stdout: out.stdout.clone(),
        stderr: out.stderr.clone(),
        exit_code: out.exit_code.unwrap_or_default(),
        duration_ms: out.duration_ms,
        truncated_at: None,
        timed_out_after: out.timed_out_after,
        oom_killed: out.oom_killed,
    }
}

/// The structured result of `terminal_job` (SPEC §3.8): only what is new since the
/// previous read; `exit_code` and `exec_duration_ms` once the job ended.
pub fn job_structured(computer_id: &str, out: JobOutput) -> ExecAnswer {
    let mut a = if out.running {
        let (stdout, stdout_base64) = shown(&out.stdout);
        let (stderr, stderr_base64) = shown(&out.stderr);
        ExecAnswer {
            computer_id: computer_id.to_owned(),
            stdout,
            stderr,
            stdout_base64,
            stderr_base64,
            ..ExecAnswer::default()
        }
    } else {
        // The ended shape, notices included, is the exec result's.
        let mut ended = exec_structured(computer_id, false, as_outcome(&out));
        ended.temporary = None;
        ended
    };
    a.job_id = Some(out.job_id);
    a.running = Some(out.running);
    a.dropped_bytes = out.dropped_bytes;
    a.peek = out.peek;
    a
}

/// The structured result of a `terminal_execute` with `yield_ms`: the exec result when the
/// command ended in time, else what it printed so far with `running: true` and `job_id`.
pub fn yielded_structured(computer_id: &str, temporary: bool, out: JobOutput) -> ExecAnswer {
    let mut a = exec_structured(computer_id, temporary, as_outcome(&out));
    a.dropped_bytes = out.dropped_bytes;
    if out.running {
        // Nothing ended: no exit code and no notices.
        a.exit_code = None;
        a.running = Some(true);
        a.job_id = Some(out.job_id);
    }
    a
}

/// The words every "this job ended with the server process that ran it" message holds
/// ([`gone_with_its_server`], [`tells_server_stopped`]).
const SERVER_STOPPED: &str = "the server process that ran it stopped";

/// What a later server says of a job that lived inside the server process that ran it (a
/// WebAssembly computer's) and ended with that process: `exit` when the command had ended
/// before, its output unread.
pub fn gone_with_its_server(job_id: &str, command: &str, exit: Option<i64>) -> String {
    let command = crate::history::cut(command, 80);
    match exit {
        None => format!(
            "job {job_id} (`{command}`) ended when {SERVER_STOPPED}: WebAssembly computers run their commands inside the server process, so the command was stopped with it and its output and exit status are lost; run it again"
        ),
        Some(code) => format!(
            "job {job_id} (`{command}`) exited with status {code}, but {SERVER_STOPPED} before its output was read: WebAssembly computers keep a job's output inside the server process, so that output is lost"
        ),
    }
}

/// Does a backend's "no such job" message say the job ended with the server process that
/// ran it ([`gone_with_its_server`])? A task then says so instead of guessing.
pub fn tells_server_stopped(message: &str) -> bool {
    message.contains(SERVER_STOPPED)
}

/// The answer of `terminal_job` with `list`: built here only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobList {
    pub computer_id: String,
    pub jobs: Vec<JobInfo>,
    pub count: usize,
}

/// The structured result of `terminal_job` with `list`.
pub fn job_list_structured(computer_id: &str, jobs: Vec<JobInfo>) -> JobList {
    let count = jobs.len();
    JobList {
        computer_id: computer_id.to_owned(),
        jobs,
        count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The answers as JSON (the shapes the tests check).
    fn job_structured(id: &str, out: JobOutput) -> Value {
        serde_json::to_value(super::job_structured(id, out)).unwrap()
    }

    fn yielded_structured(id: &str, temporary: bool, out: JobOutput) -> Value {
        serde_json::to_value(super::yielded_structured(id, temporary, out)).unwrap()
    }

    fn job_list_structured(id: &str, jobs: &[JobInfo]) -> Value {
        serde_json::to_value(super::job_list_structured(id, jobs.to_vec())).unwrap()
    }

    /// [`JobOutput::of_running`] of an answer in its JSON form (`None`: not an answer).
    fn of_running(v: &Value) -> Option<JobOutput> {
        JobOutput::of_running(&serde_json::from_value(v.clone()).ok()?)
    }

    #[test]
    fn a_peek_shows_whole_characters() {
        let snow = "☃".as_bytes();
        assert_eq!(peek_tidy(b"ab", true, true), b"ab");
        assert_eq!(peek_tidy(&snow[1..], true, true), b"");
        assert_eq!(peek_tidy(&[&snow[2..], b"x"].concat(), true, false), b"x");
        assert_eq!(peek_tidy(&snow[1..], false, false), &snow[1..]);
        let held = [b"x", &snow[..2]].concat();
        assert_eq!(peek_tidy(&held, false, true), b"x");
        assert_eq!(peek_tidy(&held, false, false), &held[..]);
        assert_eq!(peek_tidy(b"x\xff", false, true), b"x\xff");
        assert_eq!(peek_tidy(snow, true, true), snow);
    }

    #[test]
    fn ids_are_long_and_checked() {
        let id = job_id_from([0xab; 12]);
        assert_eq!(id, format!("job-{}", "ab".repeat(12)));
        assert!(validate_job_id(&id).is_ok());
        for bad in ["", "a b", "job/1", "é", &"x".repeat(65)] {
            assert!(validate_job_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn signals_by_name_or_number() {
        for (raw, want) in [
            (json!("INT"), 2),
            (json!("TERM"), 15),
            (json!("KILL"), 9),
            (json!("HUP"), 1),
            (json!("USR1"), 10),
            (json!(9), 9),
            (json!(64), 64),
        ] {
            assert_eq!(parse_signal(&raw), Ok(want), "{raw}");
        }
        for bad in [
            json!(0),
            json!(65),
            json!(-1),
            json!(1.5),
            json!("BOOM"),
            json!(null),
            json!([9]),
            json!(""),
        ] {
            assert!(
                parse_signal(&bad)
                    .unwrap_err()
                    .to_string()
                    .contains("`signal`"),
                "{bad}"
            );
        }
    }

    #[test]
    fn issue_46_only_the_schemas_signals_are_taken_and_near_misses_say_what_to_write() {
        for (raw, hint) in [
            (json!("9"), "write the number 9 without quotes"),
            (json!("SIGKILL"), "write \"KILL\""),
            (json!("kill"), "write \"KILL\""),
            (json!("INT "), "write \"INT\""),
            (json!(" sigterm"), "write \"TERM\""),
            (json!("Sig15"), "write the number 15 without quotes"),
        ] {
            let e = parse_signal(&raw).unwrap_err();
            assert!(e.hint.contains(hint), "{raw}: {e}");
        }
    }

    #[test]
    fn running_answers_give_back_their_read_exactly() {
        let read = JobOutput {
            job_id: "job-1".into(),
            stdout: b"a\0\xff\n".to_vec(),
            stderr: "é\n".as_bytes().to_vec(),
            running: true,
            duration_ms: 7,
            dropped_bytes: 2,
            ..JobOutput::default()
        };
        let y = yielded_structured("box", false, read.clone());
        assert_eq!(of_running(&y), Some(read.clone()));
        let mut polled = read.clone();
        polled.duration_ms = 0;
        let j = job_structured("box", read.clone());
        assert_eq!(of_running(&j), Some(polled));
        // Ended, or not a job's answer at all: not read from it.
        let mut ended = read.clone();
        ended.running = false;
        ended.exit_code = Some(0);
        assert_eq!(of_running(&job_structured("box", ended)), None);
        for junk in [
            json!({}),
            json!({"running": true}),
            json!({"running": true, "job_id": "j", "stdout": 1, "stderr": ""}),
            json!({"running": true, "job_id": "j", "stdout": "", "stderr": "", "stdout_base64": "!"}),
            json!("running"),
        ] {
            assert_eq!(of_running(&junk), None, "{junk}");
        }
        // The serde form (Op::JobRead's answer) is exact, with the output as base64.
        let wire = serde_json::to_value(&read).unwrap();
        assert_eq!(wire["stdout"], "YQD/Cg==");
        assert_eq!(serde_json::from_value::<JobOutput>(wire).unwrap(), read);
        let bad = json!({"job_id": "j", "stdout": "!!", "stderr": "", "running": false,
            "exit_code": 0, "duration_ms": 0, "dropped_bytes": 0, "timed_out_after": null,
            "oom_killed": false});
        assert!(serde_json::from_value::<JobOutput>(bad).is_err());
    }

    #[test]
    fn a_job_gone_with_its_server_is_told_apart_with_or_without_an_exit() {
        let long = format!("make {}", "all ".repeat(40));
        let lost = gone_with_its_server("job-1", &long, None);
        assert!(tells_server_stopped(&lost), "{lost}");
        assert!(lost.contains("run it again"), "{lost}");
        assert!(!lost.contains(&long), "the command is cut: {lost}");
        assert!(lost.contains(&crate::history::cut(&long, 80)), "{lost}");
        let exited = gone_with_its_server("job-2", "true", Some(3));
        assert!(tells_server_stopped(&exited), "{exited}");
        assert!(
            exited.contains("job job-2 (`true`) exited with status 3"),
            "{exited}"
        );
        assert!(!tells_server_stopped("no job job-3 on computer box"));
    }

    #[test]
    fn a_bad_job_id_is_quoted_cut_and_a_64_character_one_is_fine() {
        assert!(validate_job_id(&format!("job_{}", "a-".repeat(30))).is_ok());
        assert!(validate_job_id(&"x".repeat(64)).is_ok());
        let e = validate_job_id(&format!("{}/", "y".repeat(70))).unwrap_err();
        assert!(e.0.chars().count() <= 40 && e.0.ends_with('…'), "{e}");
        assert!(
            e.to_string()
                .starts_with("`job_id` must be the id terminal_execute returned"),
            "{e}"
        );
    }

    #[test]
    fn a_peek_is_marked_and_a_plain_read_carries_no_peek_key() {
        let read = JobOutput {
            job_id: "job-1".into(),
            running: true,
            ..JobOutput::default()
        };
        let wire = serde_json::to_value(&read).unwrap();
        assert!(wire.get("peek").is_none(), "{wire}");
        // An older answer without the key reads as no peek.
        assert_eq!(serde_json::from_value::<JobOutput>(wire).unwrap(), read);
        let peek = JobOutput {
            peek: true,
            ..read.clone()
        };
        let wire = serde_json::to_value(&peek).unwrap();
        assert_eq!(wire["peek"], true);
        assert_eq!(serde_json::from_value::<JobOutput>(wire).unwrap(), peek);
        let v = job_structured("box", peek);
        assert_eq!(v["peek"], true);
        assert!(v.get("dropped_bytes").is_none(), "{v}");
        assert!(job_structured("box", read).get("peek").is_none());
    }

    #[test]
    fn a_job_list_counts_its_jobs_and_shows_an_exit_only_once_ended() {
        let jobs = [
            JobInfo::new("job-1".into(), "sleep 9".into(), true, 0, None),
            JobInfo::new("job-2".into(), "false".into(), false, 1_500, Some(1)),
        ];
        let v = job_list_structured("box", &jobs);
        assert_eq!(v["count"], 2);
        assert_eq!(v["computer_id"], "box");
        assert!(v["jobs"][0].get("exit_code").is_none(), "{v}");
        assert_eq!(v["jobs"][1]["exit_code"], 1);
        assert_eq!(v["jobs"][1]["started_at"], "1970-01-01T00:00:01.500Z");
        assert_eq!(job_list_structured("box", &[])["count"], 0);
    }

    #[test]
    fn shapes() {
        let running = JobOutput {
            job_id: "job-1".into(),
            stdout: b"so far".to_vec(),
            stderr: b"\xff".to_vec(),
            running: true,
            duration_ms: 5,
            dropped_bytes: 3,
            ..JobOutput::default()
        };
        let v = job_structured("box", running.clone());
        assert_eq!(v["running"], true);
        assert_eq!(v["stdout"], "so far");
        assert_eq!(v["stderr_base64"], "/w==");
        assert_eq!(v["dropped_bytes"], 3);
        assert!(v.get("exit_code").is_none());
        let y = yielded_structured("box", true, running);
        assert_eq!(
            (y["running"].clone(), y["job_id"].clone()),
            (json!(true), json!("job-1"))
        );
        assert_eq!(y["temporary"], true);
        assert!(y.get("exit_code").is_none());
        let ended = JobOutput {
            job_id: "job-1".into(),
            stdout: b"done\n".to_vec(),
            exit_code: Some(124),
            timed_out_after: Some(2),
            duration_ms: 2000,
            ..JobOutput::default()
        };
        let v = job_structured("box", ended.clone());
        assert_eq!(
            (v["running"].clone(), v["exit_code"].clone()),
            (json!(false), json!(124))
        );
        assert_eq!(v["timed_out"], true);
        assert!(
            v["stderr"]
                .as_str()
                .unwrap()
                .contains("timed out after 2 s")
        );
        assert!(v.get("temporary").is_none());
        let y = yielded_structured("box", false, ended);
        assert_eq!(y["exit_code"], 124);
        assert!(y.get("job_id").is_none() && y.get("running").is_none());
    }
}

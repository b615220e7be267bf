//! Typed answers: what each operation answers, the `structuredContent` of its tool
//! (SPEC §3.5, §3.8, §3.9), one type per shape, each built in one place.
//!
//! Handlers (the executor's controller, the Worker's direct providers) return an
//! [`Answer`]; it becomes JSON once, where it leaves the process: a tool result
//! ([`Answer::into_result`]) or an executor API body. The gateway reads an executor's body
//! back with [`Answer::decode`], by the kind of answer its operation gets
//! (`crate::op::Op::answer_kind`), so the fields it acts on (a job left running, the
//! computers of a list) are typed.

use rmcp::model::CallToolResult;
use serde::Serialize;

use crate::files::{EditAnswer, ReadAnswer, WriteAnswer};
use crate::jobs::{JobList, JobOutput};
use crate::result::{Created, Deleted, ExecAnswer, Listed, structured_result};
use crate::snapshots::{Snapshot, SnapshotDeleted, SnapshotList};

/// The answer of one operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// A command's result (`terminal_execute`, `terminal_job`).
    Exec(ExecAnswer),
    Listed(Listed),
    /// Created, restarted or factory reset.
    Created(Created),
    Deleted(Deleted),
    Jobs(JobList),
    Read(ReadAnswer),
    Written(WriteAnswer),
    Edited(EditAnswer),
    /// A job's read itself (`crate::op::Op::JobRead`), not a tool's view of it.
    JobRead(JobOutput),
    Snapshot(Snapshot),
    Snapshots(SnapshotList),
    SnapshotDeleted(SnapshotDeleted),
}

/// Which [`Answer`] an operation gets: how its JSON form is read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    Exec,
    Listed,
    Created,
    Deleted,
    Jobs,
    Read,
    Written,
    Edited,
    JobRead,
    Snapshot,
    Snapshots,
    SnapshotDeleted,
}

macro_rules! from_shape {
    ($($variant:ident($shape:ty)),* $(,)?) => {$(
        impl From<$shape> for Answer {
            fn from(a: $shape) -> Answer {
                Answer::$variant(a)
            }
        }
    )*};
}

from_shape!(
    Exec(ExecAnswer),
    Listed(Listed),
    Created(Created),
    Deleted(Deleted),
    Jobs(JobList),
    Read(ReadAnswer),
    Written(WriteAnswer),
    Edited(EditAnswer),
    JobRead(JobOutput),
    Snapshot(Snapshot),
    Snapshots(SnapshotList),
    SnapshotDeleted(SnapshotDeleted),
);

impl Answer {
    /// An answer of `kind` from its JSON form (an executor API body).
    pub fn decode(kind: AnswerKind, text: &str) -> Result<Answer, serde_json::Error> {
        Ok(match kind {
            AnswerKind::Exec => Answer::Exec(serde_json::from_str(text)?),
            AnswerKind::Listed => Answer::Listed(serde_json::from_str(text)?),
            AnswerKind::Created => Answer::Created(serde_json::from_str(text)?),
            AnswerKind::Deleted => Answer::Deleted(serde_json::from_str(text)?),
            AnswerKind::Jobs => Answer::Jobs(serde_json::from_str(text)?),
            AnswerKind::Read => Answer::Read(serde_json::from_str(text)?),
            AnswerKind::Written => Answer::Written(serde_json::from_str(text)?),
            AnswerKind::Edited => Answer::Edited(serde_json::from_str(text)?),
            AnswerKind::JobRead => Answer::JobRead(serde_json::from_str(text)?),
            AnswerKind::Snapshot => Answer::Snapshot(serde_json::from_str(text)?),
            AnswerKind::Snapshots => Answer::Snapshots(serde_json::from_str(text)?),
            AnswerKind::SnapshotDeleted => Answer::SnapshotDeleted(serde_json::from_str(text)?),
        })
    }

    /// Says `created: true` when the call made its computer (SPEC §3.2): the answers of
    /// the calls that may make one (a command, a file tool).
    pub fn mark_created(mut self, created: bool) -> Answer {
        if created {
            match &mut self {
                Answer::Exec(a) => a.created = true,
                Answer::Read(a) => a.created = true,
                Answer::Written(a) => a.created = true,
                Answer::Edited(a) => a.created = true,
                _ => {}
            }
        }
        self
    }

    /// The command's result, for the callers that act on a job left running.
    pub fn as_exec(&self) -> Option<&ExecAnswer> {
        match self {
            Answer::Exec(a) => Some(a),
            _ => None,
        }
    }

    /// Its JSON form (the tool's `structuredContent`).
    pub fn to_value(&self) -> serde_json::Value {
        // Plain data with string keys: encoding cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The tool result: the structured content and its text mirror.
    pub fn into_result(self) -> CallToolResult {
        structured_result(self.to_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::{Slice, Written};
    use crate::jobs::{JobInfo, job_list_structured, job_structured, yielded_structured};
    use crate::result::{ExecOutcome, exec_structured, inventory};

    fn running_job() -> JobOutput {
        JobOutput {
            job_id: "job-1".into(),
            stdout: b"so far\xff".to_vec(),
            running: true,
            duration_ms: 9,
            dropped_bytes: 4,
            ..JobOutput::default()
        }
    }

    /// One answer of every shape, with the kind its operation reads it back as.
    fn every_answer() -> Vec<(AnswerKind, Answer)> {
        let slice = Slice {
            data: b"hi\n".to_vec(),
            size: 3,
            offset: 0,
            mode: 0o644,
            mtime_secs: 1,
            mtime_nanos: 0,
        };
        let written = Written {
            size: 3,
            sha256: "ab".repeat(32),
        };
        let ended = ExecOutcome {
            stdout: vec![0xff, b'a'],
            stderr: b"oops".to_vec(),
            exit_code: 3,
            duration_ms: 12,
            truncated_at: Some(10),
            ..ExecOutcome::default()
        };
        vec![
            (AnswerKind::Exec, exec_structured("box", true, ended).into()),
            (
                AnswerKind::Exec,
                yielded_structured("box", false, running_job()).into(),
            ),
            (
                AnswerKind::Exec,
                job_structured("box", running_job()).into(),
            ),
            (AnswerKind::Listed, inventory(Vec::new()).into()),
            (
                AnswerKind::Created,
                Created::new("box", "0123456789abcdef", true).into(),
            ),
            (AnswerKind::Deleted, Deleted::new("box").into()),
            (
                AnswerKind::Jobs,
                job_list_structured(
                    "box",
                    vec![JobInfo::new(
                        "job-1".into(),
                        "sleep 9".into(),
                        true,
                        0,
                        None,
                    )],
                )
                .into(),
            ),
            (
                AnswerKind::Read,
                crate::files::read_structured("box", "/f", &slice).into(),
            ),
            (
                AnswerKind::Written,
                crate::files::write_structured("box", "/f", &written).into(),
            ),
            (
                AnswerKind::Edited,
                crate::files::edit_structured("box", "/f", 2, 40).into(),
            ),
            (AnswerKind::JobRead, running_job().into()),
            (AnswerKind::Snapshot, snapshot().into()),
            (
                AnswerKind::Snapshots,
                crate::snapshots::SnapshotList::new(vec![snapshot()]).into(),
            ),
            (
                AnswerKind::SnapshotDeleted,
                crate::snapshots::SnapshotDeleted::new(&snapshot().snapshot_id).into(),
            ),
        ]
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            computer_id: "box".into(),
            snapshot_id: crate::snapshots::new_id(9),
            label: "before".into(),
            created_at: "2026-12-07T06:00:00Z".into(),
            size_bytes: 4096,
            memory: false,
        }
    }

    #[test]
    fn every_answer_reads_back_from_its_json_as_it_was() {
        for (kind, answer) in every_answer() {
            let text = answer.to_value().to_string();
            assert_eq!(Answer::decode(kind, &text).unwrap(), answer, "{text}");
            // The tool result carries the same JSON as structured content and text.
            let result = serde_json::to_value(answer.clone().into_result()).unwrap();
            assert_eq!(result["structuredContent"], answer.to_value());
            assert_eq!(result["content"][0]["text"], text);
        }
    }

    #[test]
    fn a_body_of_another_shape_is_refused_not_taken_for_an_answer() {
        let deleted = Answer::from(Deleted::new("box")).to_value().to_string();
        for kind in [
            AnswerKind::Exec,
            AnswerKind::Created,
            AnswerKind::Listed,
            AnswerKind::JobRead,
        ] {
            assert!(Answer::decode(kind, &deleted).is_err(), "{kind:?}");
        }
        assert!(Answer::decode(AnswerKind::Deleted, "{").is_err());
        assert!(Answer::decode(AnswerKind::Exec, "[]").is_err());
    }

    #[test]
    fn only_the_calls_that_may_make_a_computer_say_created() {
        for (_, answer) in every_answer() {
            let may = matches!(
                answer,
                Answer::Exec(_) | Answer::Read(_) | Answer::Written(_) | Answer::Edited(_)
            );
            let v = answer.clone().mark_created(true).to_value();
            assert_eq!(
                v.get("created") == Some(&serde_json::json!(true)),
                may,
                "{v}"
            );
            assert_eq!(answer.clone().mark_created(false), answer);
            assert!(answer.to_value().get("created").is_none());
        }
    }

    #[test]
    fn a_running_job_reads_back_exactly_and_an_ended_one_does_not() {
        let a = yielded_structured("box", true, running_job());
        assert_eq!(JobOutput::of_running(&a), Some(running_job()));
        assert_eq!(a.exit_code, None);
        let mut ended = running_job();
        ended.running = false;
        ended.exit_code = Some(0);
        let a = yielded_structured("box", true, ended);
        assert_eq!((a.running, a.job_id.as_deref()), (None, None));
        assert_eq!(JobOutput::of_running(&a), None);
    }
}

use super::*;
use serde_json::{Value, json};

fn read(job: &str, out: &[u8], err: &[u8], running: bool) -> JobOutput {
    JobOutput {
        job_id: job.into(),
        stdout: out.to_vec(),
        stderr: err.to_vec(),
        running,
        exit_code: (!running).then_some(3),
        duration_ms: 40,
        ..JobOutput::default()
    }
}

#[test]
fn declared_only_with_the_extension_object() {
    let params = |meta: Value| -> crate::jsonrpc::Params {
        serde_json::from_value(json!({ "_meta": meta })).unwrap()
    };
    let with = |ext: Value| {
        params(
            json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: ext}}}),
        )
    };
    assert!(declared(&with(json!({}))));
    assert!(!declared(&with(json!(true))));
    assert!(!declared(&params(
        json!({"io.modelcontextprotocol/clientCapabilities": {}})
    )));
    assert!(!declared(&params(json!({}))));
    assert!(!declared(&crate::jsonrpc::Params::default()));
}

#[test]
fn task_ids_are_checked() {
    let params = |v: Value| -> crate::jsonrpc::Params { serde_json::from_value(v).unwrap() };
    assert_eq!(
        task_id_param(&params(json!({"taskId": "job-00ff"}))),
        Ok("job-00ff")
    );
    for bad in [json!({}), json!({"taskId": 5}), json!({"taskId": "a/b"})] {
        assert!(task_id_param(&params(bad.clone())).is_err(), "{bad}");
    }
}

#[test]
fn a_task_gathers_output_and_completes_with_the_exec_result() {
    let mut t = Task::new(
        "box",
        true,
        1 << 20,
        1_000,
        read("job-1", b"one\n", b"", true),
    );
    let c = t.created().to_value();
    assert_eq!(c["resultType"], "task");
    assert_eq!(
        (c["taskId"].clone(), c["status"].clone()),
        (json!("job-1"), json!("working"))
    );
    assert_eq!(c["statusMessage"], "running on box: one");
    assert_eq!(c["createdAt"], "1970-01-01T00:00:01.000Z");
    assert!(t.detailed().to_value().get("result").is_none());
    t.absorb(read("job-1", b"two\n", b"warn\n", true), 2_000);
    assert_eq!(
        t.detailed().to_value()["lastUpdatedAt"],
        "1970-01-01T00:00:02.000Z"
    );
    t.absorb(read("job-1", b"three\n", b"", false), 3_000);
    let d = t.detailed().to_value();
    assert_eq!(d["status"], "completed");
    assert_eq!(d["statusMessage"], "exited with code 3");
    let s = &d["result"]["structuredContent"];
    assert_eq!(s["stdout"], "one\ntwo\nthree\n");
    assert_eq!(s["stderr"], "warn\n");
    assert_eq!(
        (s["exit_code"].clone(), s["temporary"].clone()),
        (json!(3), json!(true))
    );
    assert_eq!(d["result"]["isError"], false);
    // A read after the end changes nothing.
    t.absorb(read("job-1", b"late", b"", false), 4_000);
    assert_eq!(t.detailed().to_value(), d);
    assert!(!t.expired(3_000 + KEEP_MS) && t.expired(3_001 + KEEP_MS));
}

#[test]
fn output_past_the_limit_is_cut_and_marked() {
    let mut t = Task::new("box", false, 6, 0, read("job-1", b"abcd", b"", true));
    assert!(!t.over_limit());
    t.absorb(read("job-1", b"efgh", b"ij", true), 1);
    assert!(t.over_limit());
    t.absorb(read("job-1", b"", b"", false), 2);
    let s = t.detailed().to_value()["result"]["structuredContent"].clone();
    assert_eq!(s["stdout"], "abcdef");
    assert_eq!(s["truncated"], true);
    assert!(
        s["stderr"]
            .as_str()
            .unwrap()
            .contains("truncated at 6 bytes")
    );
}

#[test]
fn cancelled_and_lost_tasks_have_no_result() {
    let mut t = Task::new("box", false, 100, 0, read("job-1", b"", b"", true));
    t.cancel_requested = true;
    t.absorb(read("job-1", b"", b"", false), 5);
    let d = t.detailed().to_value();
    assert_eq!(d["status"], "cancelled");
    assert!(d.get("result").is_none());
    assert!(
        d["statusMessage"]
            .as_str()
            .unwrap()
            .contains("tasks/cancel")
    );
    let mut l = Task::new("box", false, 100, 0, read("job-2", b"x", b"", true));
    l.lost(9, None);
    assert_eq!(l.detailed().to_value()["status"], "cancelled");
    assert!(
        l.detailed().to_value()["statusMessage"]
            .as_str()
            .unwrap()
            .contains("restarted")
    );
}

#[test]
fn issue_46_a_task_whose_server_stopped_says_so_not_restarted() {
    let gone = crate::jobs::gone_with_its_server("job-2", "make all", Some(0));
    let mut t = Task::new("box", false, 100, 0, read("job-2", b"x", b"", true));
    t.lost(9, Some(&gone));
    let msg = t.detailed().to_value()["statusMessage"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(t.detailed().to_value()["status"], "cancelled");
    assert!(
        msg.contains("exited with status 0")
            && msg.contains("server process that ran it stopped")
            && !msg.contains("restarted"),
        "{msg}"
    );
    let mut r = Task::new("box", false, 100, 0, read("job-3", b"", b"", true));
    r.lost(
        9,
        Some(&crate::jobs::gone_with_its_server("job-3", "sleep 9", None)),
    );
    let msg = r.detailed().to_value()["statusMessage"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("ended when the server process") && !msg.contains("restarted"),
        "{msg}"
    );
    // A plain "no such job" keeps the restart/reset/delete reason.
    let mut p = Task::new("box", false, 100, 0, read("job-4", b"", b"", true));
    p.lost(9, Some("no job job-4 on this computer"));
    assert!(
        p.detailed().to_value()["statusMessage"]
            .as_str()
            .unwrap()
            .contains("restarted")
    );
}

#[test]
fn binary_output_is_kept_exactly() {
    let mut t = Task::new("box", false, 100, 0, read("job-1", b"\xff\x00", b"", true));
    t.absorb(read("job-1", b"\x01", b"", false), 1);
    let s = t.detailed().to_value()["result"]["structuredContent"].clone();
    assert_eq!(s["stdout_base64"], "/wAB");
}

#[test]
fn a_task_record_survives_its_serde_form() {
    // The Worker keeps tasks in its team's Durable Object as JSON between requests.
    let mut t = Task::new("box", false, 100, 5, read("job-9", b"\x00\xff", b"e", true));
    let text = serde_json::to_string(&t).unwrap();
    assert!(text.contains("\"stdout\":\"AP8=\""), "{text}");
    let mut back: Task = serde_json::from_str(&text).unwrap();
    assert_eq!(back, t);
    back.absorb(read("job-9", b"!", b"", false), 9);
    t.absorb(read("job-9", b"!", b"", false), 9);
    let again: Task = serde_json::from_str(&serde_json::to_string(&back).unwrap()).unwrap();
    assert_eq!(again.detailed().to_value(), t.detailed().to_value());
    assert!(serde_json::from_str::<Task>("{\"task_id\": 1}").is_err());
}

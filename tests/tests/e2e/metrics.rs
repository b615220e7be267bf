//! Issue 17: `GET /metrics` in Prometheus text on the HTTP server and in executor mode,
//! behind their auth; the counts move with what the server does. A small strict parser
//! reads the exposition: every sample line must be `name{labels} value` of a declared
//! family, or the test fails.

use std::collections::{BTreeMap, HashMap};

use serde_json::json;
use tests::*;

/// Samples by `name{sorted labels}`; panics on a line that is not valid exposition.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut declared = Vec::new();
    let mut samples = HashMap::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "# EOF" {
            assert!(lines.peek().is_none(), "text after # EOF");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            let (kind, name) = (w.next().unwrap(), w.next().unwrap());
            match kind {
                "HELP" => assert!(w.next().is_some_and(|h| !h.is_empty()), "{line}"),
                "TYPE" => {
                    let t = w.next().unwrap();
                    assert!(
                        ["counter", "gauge", "histogram"].contains(&t),
                        "type {t}: {line}"
                    );
                    declared.push(name.to_owned());
                }
                "UNIT" => {}
                _ => panic!("unknown comment {line}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').unwrap_or_else(|| panic!("{line}"))),
            None => (series, ""),
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "name: {line}"
        );
        assert!(
            declared.iter().any(|d| name.starts_with(d.as_str())),
            "undeclared family: {line}"
        );
        let mut set = BTreeMap::new();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("{line}"));
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_else(|| panic!("label value: {line}"));
            set.insert(k.to_owned(), v.to_owned());
        }
        let key = format!(
            "{name}{{{}}}",
            set.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(samples.insert(key, value).is_none(), "duplicate: {line}");
    }
    assert!(text.ends_with("# EOF\n"), "no # EOF at the end");
    samples
}

fn get(s: &HashMap<String, f64>, key: &str) -> f64 {
    s.get(key).copied().unwrap_or(0.0)
}

async fn scrape(base: &str, token: Option<&str>) -> anyhow::Result<(u16, String, String)> {
    let mut r = reqwest::Client::new().get(format!("{base}/metrics"));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await?;
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok((status, ctype, resp.text().await?))
}

#[tokio::test]
async fn issue_17_metrics_on_the_http_server() -> anyhow::Result<()> {
    let t = tag("metrics");
    let token = "metrics-token-0123456789abcdef";
    let mut opts = ServerOpts::default().arg("--tools=exec,jobs");
    opts.env
        .push(("KILNTAINERS_AUTH_TOKEN".into(), token.into()));
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;

    // Refused without the token, and that refusal is counted.
    let (status, _, body) = scrape(&s.base, None).await?;
    assert_eq!(status, 401, "{body}");
    let (status, _, _) = scrape(&s.base, Some("wrong")).await?;
    assert_eq!(status, 401);
    let (status, ctype, text) = scrape(&s.base, Some(token)).await?;
    assert_eq!(status, 200, "{text}");
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let before = parse(&text);
    assert_eq!(
        get(&before, "msc_auth_refusals_total{server=mcp}"),
        2.0,
        "{text}"
    );
    assert_eq!(
        get(&before, "msc_computers{state=idle,temporary=false}"),
        0.0
    );

    let c = s.modern_client(Some(token)).await?;
    let id = format!("{t}-m");
    let r = exec(&c, json!({"command": "true", "computer_id": id})).await?;
    assert_eq!(r["exit_code"], 0);
    let r = exec(&c, json!({"command": "exit 3", "computer_id": id})).await?;
    assert_eq!(r["exit_code"], 3);
    let r = exec(
        &c,
        json!({"command": "sleep 5", "computer_id": id, "timeout": 1}),
    )
    .await?;
    assert_eq!(r["exit_code"], 124);
    let r = exec(
        &c,
        json!({"command": "sleep 30", "computer_id": id, "yield_ms": 10}),
    )
    .await?;
    assert_eq!(r["running"], true, "{r}");

    let (_, _, text) = scrape(&s.base, Some(token)).await?;
    let after = parse(&text);
    for (outcome, n) in [("ok", 1.0), ("nonzero", 1.0), ("timeout", 1.0)] {
        let key = format!("msc_execs_total{{backend=docker,outcome={outcome}}}");
        assert_eq!(get(&after, &key) - get(&before, &key), n, "{key}\n{text}");
    }
    let count = "msc_exec_duration_seconds_count{backend=docker}";
    assert_eq!(get(&after, count) - get(&before, count), 3.0, "{text}");
    let sum = get(&after, "msc_exec_duration_seconds_sum{backend=docker}");
    assert!(sum >= 1.0, "the timed-out exec took a second: {sum}");
    let inf = "msc_exec_duration_seconds_bucket{backend=docker,le=+Inf}";
    assert_eq!(get(&after, inf), get(&after, count), "{text}");
    assert_eq!(get(&after, "msc_jobs_started_total{backend=docker}"), 1.0);
    assert_eq!(get(&after, "msc_jobs_running{}"), 1.0, "{text}");
    assert_eq!(
        get(&after, "msc_computers{state=idle,temporary=true}"),
        1.0,
        "{text}"
    );
    let ok200 = "msc_http_requests_total{code=200,server=mcp}";
    assert!(get(&after, ok200) > get(&before, ok200), "{text}");
    assert!(get(&after, "msc_http_requests_total{code=401,server=mcp}") >= 2.0);

    c.cancel().await?;
    s.terminate().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_17_metrics_in_executor_mode() -> anyhow::Result<()> {
    let t = tag("xmetrics");
    let secret = "metrics-exec-secret-0123456789abcdef0123";
    let x = HttpServer::start_executor(&t, &state_dir(&t), &ServerOpts::default(), secret).await?;
    let (status, _, _) = scrape(&x.base, None).await?;
    assert_eq!(status, 401);
    let (status, _, _) = scrape(&x.base, Some(&executor_token("a", "team")?)).await?;
    assert_eq!(status, 401, "a token signed with another secret");
    let tok = executor_token(secret, "team-m")?;
    let (status, _, text) = scrape(&x.base, Some(&tok)).await?;
    assert_eq!(status, 200, "{text}");
    let before = parse(&text);
    assert_eq!(
        get(&before, "msc_auth_refusals_total{server=executor}"),
        2.0
    );

    let id = format!("{t}-x");
    let r = reqwest::Client::new()
        .post(format!("{}/v1/computers/{id}/exec", x.base))
        .bearer_auth(&tok)
        .json(&json!({"command": "echo hi"}))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await?);
    let (_, _, text) = scrape(&x.base, Some(&tok)).await?;
    let after = parse(&text);
    let key = "msc_execs_total{backend=docker,outcome=ok}";
    assert_eq!(get(&after, key) - get(&before, key), 1.0, "{text}");
    assert_eq!(
        get(&after, "msc_computers{state=idle,temporary=true}"),
        1.0,
        "{text}"
    );
    assert!(get(&after, "msc_http_requests_total{code=200,server=executor}") >= 2.0);
    x.terminate().await?;
    remove_all(&t).await
}

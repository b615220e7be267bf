//! Secrets that never enter the computer (SPEC §3.11, issue 38): `--egress-secret` on
//! Docker. Real HTTPS and HTTP upstream servers on the host (a test CA, trusted by the
//! server through `--egress-ca-file`), real clients inside the computer (curl, python3's
//! urllib), and a search of the computer's whole filesystem, environment and `/proc` for
//! the value.

use std::time::Duration;

use serde_json::{Value, json};
use tests::upstream::{Recorder, test_pki};
use tests::*;

/// Runs `script` in container `name` with `docker exec` (not through any server).
async fn docker_sh(name: &str, script: &str) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("docker")
        .args(["exec", name, "sh", "-c", script])
        .output()
        .await?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn issue_38_secrets_are_put_in_on_the_wire_and_never_enter_the_computer() -> anyhow::Result<()>
{
    let t = tag("egress-secret");
    let (ca_pem, trusted) = test_pki(&["api.secret.test", "other.test"])?;
    // A host whose certificate no CA the server trusts signed.
    let (_, rogue_tls) = test_pki(&["rogue.secret.test"])?;
    let api = Recorder::start(Some(trusted)).await?;
    let rogue = Recorder::start(Some(rogue_tls)).await?;
    let plain = Recorder::start(None).await?;
    let gw = bridge_gateway().await?;
    let dir = state_dir(&t);
    std::fs::create_dir_all(&dir)?;
    let ca_file = dir.join("test-ca.pem");
    std::fs::write(&ca_file, &ca_pem)?;
    // Hex only: searched for below as `[x]rest`, so no search command holds it whole.
    let value = format!("e{:031x}", rand::random::<u128>() >> 4);
    let pattern = format!("[{}]{}", &value[..1], &value[1..]);
    let (ap, rp, pp) = (api.port, rogue.port, plain.port);
    let mut opts = ServerOpts::default()
        .arg("--tools=lifecycle")
        .arg("--image")
        .arg("msc-test/net:latest")
        .arg("--tool-instruction-override")
        .arg("Debian bookworm with curl and python3.")
        .arg(&format!(
            "--egress-allow=api.secret.test:{ap},other.test:{ap},rogue.secret.test:{rp},plain.secret.test:{pp}"
        ))
        .arg("--egress-secret=MSC_T_TOKEN=api.secret.test,rogue.secret.test,plain.secret.test")
        .arg(&format!("--egress-ca-file={}", ca_file.display()));
    for name in [
        "api.secret.test",
        "other.test",
        "rogue.secret.test",
        "plain.secret.test",
    ] {
        opts = opts.arg(&format!("--egress-resolve={name}={gw}"));
    }
    opts.env.push(("MSC_T_TOKEN".into(), value.clone()));
    opts.env.push(("RUST_LOG".into(), "debug".into()));
    let state = state_dir(&t);
    let c = stdio_client(&t, &state, &opts).await?;
    let mut results: Vec<Value> = Vec::new();

    // Inside: a placeholder, the trust-store variables, the gate's CA in the system store.
    let r = exec(
        &c,
        json!({"command": "echo \"$MSC_T_TOKEN\"; echo \"$SSL_CERT_FILE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS\"; grep -c 'msc egress gate CA: begin' /etc/ssl/certs/ca-certificates.crt"}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default().to_owned();
    let placeholder = out.lines().next().unwrap_or_default().to_owned();
    assert!(
        placeholder.starts_with("msc-secret-") && placeholder.len() == 43,
        "{r}"
    );
    assert!(
        out.contains(
            "/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt /etc/msc-egress-ca.pem"
        ),
        "{r}"
    );
    assert!(out.ends_with("\n1\n"), "{r}");
    let id = r["computer_id"].as_str().unwrap().to_owned();
    results.push(r);

    // To a secret's host: the value goes in (header, query, URL userinfo), over HTTPS that
    // curl and python3 verify with the system store (no -k), and over plain HTTP.
    let r = exec(
        &c,
        json!({"command": format!(
            "curl -sS --max-time 10 -H \"Authorization: Bearer $MSC_T_TOKEN\" \"https://api.secret.test:{ap}/q?token=$MSC_T_TOKEN\"; echo \" curl=$?\"; \
             curl -sS --max-time 10 -u \"user:$MSC_T_TOKEN\" https://api.secret.test:{ap}/basic; echo \" basic=$?\"; \
             python3 -c \"import os, urllib.request as u; print(u.urlopen(u.Request('https://api.secret.test:{ap}/py', headers={{'X-Token': os.environ['MSC_T_TOKEN']}}), timeout=10).read().decode(), 'py')\"; \
             curl -sS --max-time 10 \"http://plain.secret.test:{pp}/p?t=$MSC_T_TOKEN\"; echo \" plain=$?\""
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default().to_owned();
    for ok in ["ok curl=0", "ok basic=0", "ok py", "ok plain=0"] {
        assert!(out.contains(ok), "{ok}: {r}{}", log_tail(&t, 30));
    }
    results.push(r);
    let heads = api.heads();
    let find = |path: &str| {
        heads
            .iter()
            .find(|(_, h)| h.starts_with(&format!("GET {path}")))
            .cloned()
            .unwrap_or_else(|| panic!("no request for {path}: {heads:?}"))
    };
    let (sni, head) = find("/q");
    assert_eq!(sni.as_deref(), Some("api.secret.test"));
    assert!(
        head.starts_with(&format!("GET /q?token={value} ")),
        "{head}"
    );
    assert!(
        head.contains(&format!("authorization: Bearer {value}\r\n")),
        "{head}"
    );
    assert!(!head.contains("msc-secret-"), "{head}");
    let (_, head) = find("/basic");
    let engine = base64::engine::general_purpose::STANDARD;
    let basic = base64::Engine::encode(&engine, format!("user:{value}"));
    assert!(
        head.contains(&format!("authorization: Basic {basic}")),
        "{head}"
    );
    let (_, head) = find("/py");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("x-token: {value}")),
        "{head}"
    );
    let (sni, head) = plain.heads().pop().unwrap();
    assert_eq!(sni, None);
    assert!(head.starts_with(&format!("GET /p?t={value} ")), "{head}");

    // Anywhere else the placeholder is worthless: another allowed host gets it as it is,
    // through a tunnel the gate does not open (its own certificate, hence -k).
    let r = exec(
        &c,
        json!({"command": format!(
            "curl -sSk --max-time 10 -H \"Authorization: Bearer $MSC_T_TOKEN\" https://other.test:{ap}/elsewhere; echo \" other=$?\""
        )}),
    )
    .await?;
    assert!(
        r["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("ok other=0"),
        "{r}"
    );
    results.push(r);
    let (sni, head) = api
        .heads()
        .into_iter()
        .find(|(_, h)| h.starts_with("GET /elsewhere"))
        .unwrap();
    assert_eq!(sni.as_deref(), Some("other.test"));
    assert!(head.contains(&format!("Bearer {placeholder}")), "{head}");
    assert!(!head.contains(&value), "{head}");

    // A host that echoes the request cannot hand the value back: masked.
    let r = exec(
        &c,
        json!({"command": format!(
            "curl -sS --max-time 10 -H \"X-Token: $MSC_T_TOKEN\" https://api.secret.test:{ap}/echo"
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(
        out.contains(&format!("x-token: {}", "*".repeat(value.len()))),
        "{r}"
    );
    results.push(r);

    // A secret's host whose certificate does not verify gets nothing: a 502 that says
    // why, listed in network_blocked.
    let r = exec(
        &c,
        json!({"command": format!(
            "curl -sS --max-time 10 -H \"X-Token: $MSC_T_TOKEN\" https://rogue.secret.test:{rp}/; echo \" rogue=$?\""
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("could not be verified"), "{r}");
    assert!(rogue.heads().is_empty(), "{:?}", rogue.heads());
    let blocked = r["network_blocked"].to_string();
    assert!(
        blocked.contains("rogue.secret.test") && blocked.contains("certificate not verified"),
        "{r}"
    );
    results.push(r);

    // A restart: the CA goes in again (once), and the placeholder still works.
    call_ok(&c, "computer_restart", json!({"computer_id": id})).await?;
    let r = exec(
        &c,
        json!({"computer_id": id, "command": format!(
            "grep -c 'msc egress gate CA: begin' /etc/ssl/certs/ca-certificates.crt; curl -sS --max-time 10 -H \"X-Token: $MSC_T_TOKEN\" https://api.secret.test:{ap}/again"
        )}),
    )
    .await?;
    assert_eq!(r["stdout"], "1\nok", "{r}");
    results.push(r);

    // The value is nowhere inside: files, environments, command lines (searched with
    // docker exec, as root, by a pattern that is not the value itself).
    let name = format!("kilntainer-{id}");
    let found = docker_sh(
        &name,
        &format!(
            "grep -rlsaE '{pattern}' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev; \
             for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -lsaE '{pattern}' \"$f\"; done; \
             env | grep -E '{pattern}'; echo searched"
        ),
    )
    .await?;
    assert_eq!(
        found.trim(),
        "searched",
        "the value was found inside: {found}"
    );
    let env_seen = docker_sh(
        &name,
        "cat /proc/1/environ | tr '\\0' '\\n' | grep MSC_T_TOKEN",
    )
    .await?;
    assert_eq!(env_seen.trim(), format!("MSC_T_TOKEN={placeholder}"));
    let info = docker()?.inspect_container(&name, None).await?;
    let env = info.config.and_then(|c| c.env).unwrap_or_default();
    assert!(env.iter().all(|e| !e.contains(&value)), "{env:?}");
    // Nor in a result, the server's log or its state.
    for r in &results {
        assert!(!r.to_string().contains(&value), "{r}");
    }
    c.cancel().await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logs = log_tail(&t, usize::MAX);
    assert!(logs.contains("egress"), "the debug log was kept: {logs}");
    assert!(!logs.contains(&value), "the value is in the server's log");
    for entry in walk(&state) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !bytes.windows(value.len()).any(|w| w == value.as_bytes()),
            "the value is in {}",
            entry.display()
        );
    }
    remove_all(&t).await
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn issue_38_secrets_on_podman() -> anyhow::Result<()> {
    let t = tag("egress-secret-podman");
    let plain = Recorder::start(None).await?;
    let other = Recorder::start(None).await?;
    let gw = podman_gateway()?;
    let value = format!("e{:031x}", rand::random::<u128>() >> 4);
    let (pp, op) = (plain.port, other.port);
    let mut opts = ServerOpts::default()
        .podman()
        .arg(&format!(
            "--egress-allow=plain.secret.test:{pp},other.test:{op}"
        ))
        .arg("--egress-secret=MSC_T_TOKEN=plain.secret.test")
        .arg(&format!("--egress-resolve=plain.secret.test={gw}"))
        .arg(&format!("--egress-resolve=other.test={gw}"));
    opts.env.push(("MSC_T_TOKEN".into(), value.clone()));
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    // bash's /dev/tcp (what the plain image has): the value goes to the secret's host
    // only; the gate's CA went into the system bundle through Podman's archive API.
    let get = |host: &str, port: u16| {
        format!(
            "(exec 3<>/dev/tcp/{host}/{port} && printf 'GET /p?t=%s HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' \"$MSC_T_TOKEN\" >&3 && cat <&3); echo"
        )
    };
    let r = exec(
        &c,
        json!({"command": format!(
            "echo \"$MSC_T_TOKEN\"; grep -c 'msc egress gate CA: begin' /etc/ssl/certs/ca-certificates.crt; {}; {}",
            get("plain.secret.test", pp),
            get("other.test", op),
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default().to_owned();
    let placeholder = out.lines().next().unwrap_or_default().to_owned();
    assert!(placeholder.starts_with("msc-secret-"), "{r}");
    assert!(out.contains("\n1\n"), "{r}");
    assert_eq!(
        out.matches("\r\n\r\nok").count(),
        2,
        "{r}{}",
        log_tail(&t, 30)
    );
    assert!(!r.to_string().contains(&value), "{r}");
    let (_, head) = plain.heads().pop().unwrap();
    assert!(head.starts_with(&format!("GET /p?t={value} ")), "{head}");
    let (_, head) = other.heads().pop().unwrap();
    assert!(
        head.starts_with(&format!("GET /p?t={placeholder} ")),
        "{head}"
    );
    c.cancel().await?;
    remove_all(&t).await
}

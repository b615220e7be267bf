//! The egress gate (issue 38): each figure through the gate next to the same thing from an
//! open computer of the same server, in the same run. Two computers of the `msc-test/net`
//! image (scripts/setup builds it): `gated` (an allow list naming the upstream) and `open`.
//! The upstream is an HTTP server of this process on the host, reached at the docker
//! bridge's address (pinned with `--egress-resolve`). The secrets row runs a second server
//! with `--egress-secret` and HTTPS upstreams of a test CA.

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Row, ms, pct};

/// Connections timed per computer.
const CONNECTIONS: usize = 300;
/// Warm execs per computer.
const EXECS: usize = 150;
/// The download's size.
const BIG: u64 = 1 << 30;
/// HTTPS requests timed per host in the secrets row.
const REQUESTS: usize = 200;

/// An HTTP/1.1 server on the host: `/big` streams [`BIG`] zero bytes, anything else is a
/// one-line answer; one request per connection.
async fn upstream() -> Result<u16> {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = sock.set_nodelay(true);
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if head.starts_with(b"GET /big ") {
                    let h = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\nConnection: close\r\n\r\n"
                    );
                    if sock.write_all(h.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = vec![0u8; 1 << 20];
                    for _ in 0..(BIG >> 20) {
                        if sock.write_all(&chunk).await.is_err() {
                            return;
                        }
                    }
                } else {
                    let _ = sock
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                }
            });
        }
    });
    Ok(port)
}

/// Python in the computer: `CONNECTIONS` connections to `host:port` (resolved once), each a
/// whole small request; prints the milliseconds of each.
fn connect_script(host: &str, port: u16) -> String {
    format!(
        "import socket,time\n\
         ip=socket.gethostbyname('{host}')\n\
         req=b'GET / HTTP/1.1\\r\\nHost: upstream.test\\r\\nConnection: close\\r\\n\\r\\n'\n\
         for i in range({CONNECTIONS}):\n\
         \x20   t=time.perf_counter()\n\
         \x20   s=socket.create_connection((ip,{port}))\n\
         \x20   s.sendall(req)\n\
         \x20   while s.recv(65536): pass\n\
         \x20   s.close()\n\
         \x20   print((time.perf_counter()-t)*1000)\n"
    )
}

async fn on(c: &Client, id: &str, command: String) -> Result<Value> {
    let r = exec(
        c,
        json!({"computer_id": id, "command": command, "timeout": 600}),
    )
    .await?;
    anyhow::ensure!(r["exit_code"] == 0, "{id}: {r}");
    Ok(r)
}

/// The p50 of the numbers a command printed, one a line.
fn p50_of(r: &Value) -> Result<f64> {
    let mut v: Vec<f64> = r["stdout"]
        .as_str()
        .context("stdout")?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    anyhow::ensure!(!v.is_empty(), "no figures: {r}");
    v.sort_by(f64::total_cmp);
    Ok(pct(&v, 0.5))
}

/// Warm execs of `true` on computers `a` and `b`, taking turns (so load and warm-up fall
/// on both alike): their p50 ms.
async fn warm_p50s(c: &Client, a: &str, b: &str) -> Result<(f64, f64)> {
    let (mut ta, mut tb) = (Vec::with_capacity(EXECS), Vec::with_capacity(EXECS));
    for i in 0..2 * EXECS {
        let (id, into) = if i % 2 == 0 {
            (a, &mut ta)
        } else {
            (b, &mut tb)
        };
        let s = Instant::now();
        exec(c, json!({"computer_id": id, "args": ["true"]})).await?;
        into.push(ms(s.elapsed()));
    }
    ta.sort_by(f64::total_cmp);
    tb.sort_by(f64::total_cmp);
    Ok((pct(&ta, 0.5), pct(&tb, 0.5)))
}

pub async fn rows(t: &str, rows: &mut Vec<Row>) -> Result<()> {
    let port = upstream().await?;
    let gw = bridge_gateway().await?;
    let opts = ServerOpts::lifecycle()
        .arg("--image")
        .arg("msc-test/net:latest")
        .arg("--tool-instruction-override")
        .arg("Debian bookworm with curl and python3.")
        .arg(&format!("--egress-resolve=upstream.test={gw}"));
    let tag = format!("{t}-egress");
    let c = stdio_client(&tag, &state_dir(&tag), &opts).await?;
    call_ok(
        &c,
        "computer_create",
        json!({"computer_id": "gated", "network": {"allow": [format!("upstream.test:{port}")]}}),
    )
    .await?;
    call_ok(&c, "computer_create", json!({"computer_id": "open"})).await?;

    // Connection set-up: a whole small request per connection.
    let gated = p50_of(
        &on(
            &c,
            "gated",
            format!("python3 -c \"{}\"", connect_script("upstream.test", port)),
        )
        .await?,
    )?;
    let open = p50_of(
        &on(
            &c,
            "open",
            format!("python3 -c \"{}\"", connect_script(&gw, port)),
        )
        .await?,
    )?;
    rows.push(Row {
        name: "egress: a connection (connect + small request) through the gate, p50",
        value: gated,
        unit: "ms",
        floor: Some(open),
        target: "<= floor + 1 ms".into(),
        pass: gated <= open + 1.0,
    });

    // A 1 GiB download.
    let speed = |r: Value| -> Result<f64> {
        let bps: f64 = r["stdout"].as_str().context("stdout")?.trim().parse()?;
        Ok(bps / f64::from(1u32 << 20))
    };
    let curl = |host: &str| {
        format!("curl -s -o /dev/null -w '%{{speed_download}}' http://{host}:{port}/big")
    };
    let through = speed(on(&c, "gated", curl("upstream.test")).await?)?;
    let direct = speed(on(&c, "open", curl(&gw)).await?)?;
    rows.push(Row {
        name: "egress: 1 GiB download through the gate",
        value: through,
        unit: "MiB/s",
        floor: Some(direct),
        target: ">= 0.8x floor".into(),
        pass: through >= 0.8 * direct,
    });

    // A warm exec: the gate costs a call nothing.
    let _ = warm_p50s(&c, "gated", "open").await?;
    let (with, without) = warm_p50s(&c, "gated", "open").await?;
    rows.push(Row {
        name: "egress: warm exec of a computer with an allow list, p50",
        value: with,
        unit: "ms",
        floor: Some(without),
        target: "<= 1.05x floor".into(),
        pass: with <= 1.05 * without,
    });
    c.cancel().await?;
    remove_all(&tag).await?;
    secret_row(t, &gw, rows).await
}

/// Python in the computer: [`REQUESTS`] HTTPS requests (a new connection each, bearing the
/// placeholder) to `secret` and `plain` in turns; prints `s <ms>` and `p <ms>` for each.
fn https_script(secret: &str, plain: &str, port: u16) -> String {
    format!(
        "import http.client,ssl,time,os\n\
         ctx=ssl._create_unverified_context()\n\
         h={{'Authorization':'Bearer '+os.environ['MSC_B_TOKEN']}}\n\
         for i in range({REQUESTS}):\n\
         \x20   for tag,host in (('s','{secret}'),('p','{plain}')):\n\
         \x20       t=time.perf_counter()\n\
         \x20       c=http.client.HTTPSConnection(host,{port},context=ctx)\n\
         \x20       c.request('GET','/',headers=h)\n\
         \x20       c.getresponse().read()\n\
         \x20       c.close()\n\
         \x20       print(tag,(time.perf_counter()-t)*1000)\n"
    )
}

/// An HTTPS request to a secret's host (TLS ended at the gate, the value put in, a second
/// TLS connection to the host) next to the same request to an allowed host without a
/// secret (TLS carried through), both from one computer, in turns.
async fn secret_row(t: &str, gw: &str, rows: &mut Vec<Row>) -> Result<()> {
    let tag = format!("{t}-egress-secret");
    let state = state_dir(&tag);
    std::fs::create_dir_all(&state)?;
    let (ca_pem, tls) = tests::upstream::test_pki(&["api.secret.test", "tls.test"])?;
    let ca_file = state.join("test-ca.pem");
    std::fs::write(&ca_file, ca_pem)?;
    let server = tests::upstream::Recorder::start(Some(tls)).await?;
    let port = server.port;
    let value = format!("v{:031x}", rand::random::<u128>() >> 4);
    let mut opts = ServerOpts::lifecycle()
        .arg("--image")
        .arg("msc-test/net:latest")
        .arg("--tool-instruction-override")
        .arg("Debian bookworm with curl and python3.")
        .arg(&format!(
            "--egress-allow=api.secret.test:{port},tls.test:{port}"
        ))
        .arg("--egress-secret=MSC_B_TOKEN=api.secret.test")
        .arg(&format!("--egress-ca-file={}", ca_file.display()))
        .arg(&format!("--egress-resolve=api.secret.test={gw}"))
        .arg(&format!("--egress-resolve=tls.test={gw}"));
    opts.env.push(("MSC_B_TOKEN".into(), value.clone()));
    let c = stdio_client(&tag, &state, &opts).await?;
    let script = https_script("api.secret.test", "tls.test", port);
    let r = on(&c, "timed", format!("python3 -c \"{script}\"")).await?;
    let out = r["stdout"].as_str().context("stdout")?;
    let p50 = |tag: &str| -> Result<f64> {
        let mut v: Vec<f64> = out
            .lines()
            .filter_map(|l| l.strip_prefix(tag)?.trim().parse().ok())
            .collect();
        anyhow::ensure!(v.len() == REQUESTS, "{tag}: {} figures: {r}", v.len());
        v.sort_by(f64::total_cmp);
        Ok(pct(&v, 0.5))
    };
    let (secret, plain) = (p50("s ")?, p50("p ")?);
    // The row times what it names: the value reached the secret's host every time, and
    // never the other host.
    let heads = server.heads();
    let with = |name: &str| {
        heads
            .iter()
            .filter(|(sni, head)| sni.as_deref() == Some(name) && head.contains(&value))
            .count()
    };
    anyhow::ensure!(
        with("api.secret.test") == REQUESTS && with("tls.test") == 0,
        "the value reached api.secret.test {} times and tls.test {} times",
        with("api.secret.test"),
        with("tls.test")
    );
    rows.push(Row {
        name: "egress: an HTTPS request to a secret's host (TLS ended at the gate, value put in), p50",
        value: secret,
        unit: "ms",
        floor: Some(plain),
        target: "<= floor + 2 ms".into(),
        pass: secret <= plain + 2.0,
    });
    c.cancel().await?;
    remove_all(&tag).await
}

